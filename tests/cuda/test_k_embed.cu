/* test_k_embed.cu — k_embed.cu against the cpu kernels (k_embed.inc and the
 * range embeddings of train_support.c): token embeddings with many repeated
 * tokens (the backward sums them in row order), vocabulary ranges with
 * tokens inside and outside, positions with an offset, rotary embeddings;
 * outputs poisoned, gradients accumulating onto the same random values.
 *
 * The bf16 overloads (out, inp, dout, dinp bf16; the tables and their
 * gradients fp32) the same way on inputs rounded to bf16, against the cpu
 * kernel on those values: bf16 outputs within rtc_test_bf16.h's limit,
 * the tables' gradients within rtc_test.h's. */
#include "rtc_test_bf16.h"

/* skew_: every other row's token is V / 2 (a frequent word: one bucket's
 * long run, interleaved with the bucket's other tokens) */
static int skew_;

static int32_t *rand_tokens(int N, int V) {
  int32_t *t = (int32_t *)malloc((N ? N : 1) * sizeof(int32_t));
  for (int n = 0; n < N; n++)
    t[n] = skew_ && n % 2 ? V / 2 : (int32_t)(rtc_test_rand(0.0f, 1.0f) * V) % V;
  return t;
}

/* The table gradients sum rows in the cpu kernel's order: equal bit for bit. */
static void bitwise(const char *kernel, const char *shape, const float *d_got, const float *want,
                    size_t n) {
  float *got = (float *)malloc((n ? n : 1) * sizeof(float));
  cudaCheck(cudaDeviceSynchronize());
  cudaCheck(cudaMemcpy(got, d_got, n * sizeof(float), cudaMemcpyDeviceToHost));
  int same = !memcmp(got, want, n * sizeof(float));
  printf("%-26s %-22s %-8s %s\n", kernel, shape, "bitwise", same ? "PASS" : "FAIL");
  if (!same) rtc_test_failures++;
  free(got);
}

static void test_embedding(int N, int V, int C) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d V=%d C=%d", N, V, C);
  size_t nc = (size_t)N * C, vc = (size_t)V * C;
  int32_t *tok = rand_tokens(N, V), *d_tok = rtc_test_dev(tok, N);
  float *wte = rtc_test_host(vc, -1.0f, 1.0f), *out = rtc_test_host(nc, 0, 1);
  float *d_wte = rtc_test_dev(wte, vc), *d_out = rtc_test_poison(nc);
  if (rt_embedding_forward_f32(out, tok, wte, N, V, C) != RT_OK) abort();
  if (rt_embedding_forward_cu(d_out, d_tok, d_wte, N, V, C) != 0) abort();
  rtc_test_check("embedding_forward", shape, "out", d_out, out, nc);
  float *dy = rtc_test_host(nc, -1.0f, 1.0f), *d_dy = rtc_test_dev(dy, nc);
  float *d_dw = rtc_test_dev(wte, vc);  // dwte starts from wte's values
  rt_embedding_backward_f32(wte, dy, tok, N, C);
  rt_embedding_backward_cu(d_dw, d_dy, d_tok, N, C);
  rtc_test_check("embedding_backward", shape, "dwte", d_dw, wte, vc);
  bitwise("embedding_backward", shape, d_dw, wte, vc);

  /* the vocabulary range [v0, v0+Vl) of a vocab-parallel table */
  int v0 = V / 3, Vl = V / 2 > 0 ? V / 2 : 1;
  size_t lc = (size_t)Vl * C;
  float *tab = rtc_test_host(lc, -1.0f, 1.0f), *d_tab = rtc_test_dev(tab, lc);
  float *d_out2 = rtc_test_poison(nc);
  if (rt_embedding_range_forward_f32(out, tok, tab, N, v0, Vl, C, V) != RT_OK) abort();
  if (rt_embedding_range_forward_cu(d_out2, d_tok, d_tab, N, v0, Vl, C, V) != 0) abort();
  rtc_test_check("embedding_range_forward", shape, "out", d_out2, out, nc);
  rt_embedding_range_backward_f32(tab, dy, tok, N, v0, Vl, C);
  rt_embedding_range_backward_cu(d_tab, d_dy, d_tok, N, v0, Vl, C);
  rtc_test_check("embedding_range_backward", shape, "dtable", d_tab, tab, lc);
  bitwise("embedding_range_backward", shape, d_tab, tab, lc);

  free(tok), free(wte), free(out), free(dy), free(tab);
  rtc_test_dfree(d_tok, d_wte, d_out, d_dy, d_dw, d_tab, d_out2);
}

static void test_positional(int B, int T, int C, int t0) {
  char shape[64];
  snprintf(shape, sizeof shape, "B=%d T=%d C=%d t0=%d", B, T, C, t0);
  int maxT = t0 + T + 3;
  size_t n = (size_t)B * T * C, pc = (size_t)maxT * C;
  float *x = rtc_test_host(n, -1.0f, 1.0f), *wpe = rtc_test_host(pc, -1.0f, 1.0f);
  float *y = rtc_test_host(n, 0, 1);
  float *d_x = rtc_test_dev(x, n), *d_wpe = rtc_test_dev(wpe, pc), *d_y = rtc_test_poison(n);
  rt_positional_forward_f32(y, x, wpe, B, T, C, t0);
  rt_positional_forward_cu(d_y, d_x, d_wpe, B, T, C, t0);
  rtc_test_check("positional_forward", shape, "out", d_y, y, n);
  rt_positional_forward_cu(d_x, d_x, d_wpe, B, T, C, t0);  // in place
  rtc_test_check("positional_forward", shape, "inplace", d_x, y, n);

  float *dy = rtc_test_host(n, -1.0f, 1.0f), *dx = rtc_test_host(n, -1.0f, 1.0f);
  float *d_dy = rtc_test_dev(dy, n), *d_dx = rtc_test_dev(dx, n);
  rt_positional_backward_f32(dx, wpe, dy, B, T, C, t0);  // wpe as dwpe
  rt_positional_backward_cu(d_dx, d_wpe, d_dy, B, T, C, t0);
  rtc_test_check("positional_backward", shape, "dinp", d_dx, dx, n);
  rtc_test_check("positional_backward", shape, "dwpe", d_wpe, wpe, pc);
  rt_positional_backward_f32(NULL, wpe, dy, B, T, C, t0);
  rt_positional_backward_cu(NULL, d_wpe, d_dy, B, T, C, t0);
  rtc_test_check("positional_backward", shape, "dwpe1", d_wpe, wpe, pc);
  rt_positional_backward_f32(dx, NULL, dy, B, T, C, t0);
  rt_positional_backward_cu(d_dx, NULL, d_dy, B, T, C, t0);
  rtc_test_check("positional_backward", shape, "dinp1", d_dx, dx, n);
  free(x), free(wpe), free(y), free(dy), free(dx);
  rtc_test_dfree(d_x, d_wpe, d_y, d_dy, d_dx);
}

static void test_rope(int B, int T, int H, int D, double theta, int t0) {
  char shape[64];
  snprintf(shape, sizeof shape, "B=%d T=%d H=%d D=%d t0=%d", B, T, H, D, t0);
  size_t n = (size_t)B * T * H * D;
  float *x = rtc_test_host(n, -1.0f, 1.0f), *y = rtc_test_host(n, 0, 1);
  float *d_x = rtc_test_dev(x, n), *d_y = rtc_test_poison(n);
  rt_rope_forward_f32(y, x, B, T, H, D, theta, t0);
  rt_rope_forward_cu(d_y, d_x, B, T, H, D, theta, t0);
  rtc_test_check("rope_forward", shape, "out", d_y, y, n);
  rt_rope_forward_cu(d_x, d_x, B, T, H, D, theta, t0);  // in place
  rtc_test_check("rope_forward", shape, "inplace", d_x, y, n);
  float *dy = rtc_test_host(n, -1.0f, 1.0f), *dx = rtc_test_host(n, -1.0f, 1.0f);
  float *d_dy = rtc_test_dev(dy, n), *d_dx = rtc_test_dev(dx, n);
  rt_rope_backward_f32(dx, dy, B, T, H, D, theta, t0);
  rt_rope_backward_cu(d_dx, d_dy, B, T, H, D, theta, t0);
  rtc_test_check("rope_backward", shape, "dinp", d_dx, dx, n);
  free(x), free(y), free(dy), free(dx);
  rtc_test_dfree(d_x, d_y, d_dy, d_dx);
}

static void test_embedding_bf16(int N, int V, int C) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d V=%d C=%d", N, V, C);
  size_t nc = (size_t)N * C, vc = (size_t)V * C;
  int32_t *tok = rand_tokens(N, V), *d_tok = rtc_test_dev(tok, N);
  float *wte = rtc_test_host(vc, -1.0f, 1.0f), *out = rtc_test_host(nc, 0, 1);
  float *d_wte = rtc_test_dev(wte, vc);
  rtc_bf16 *d_out = rtc_test_poison_bf16(nc);
  if (rt_embedding_forward_f32(out, tok, wte, N, V, C) != RT_OK) abort();
  if (rt_embedding_forward_cu(d_out, d_tok, d_wte, N, V, C) != 0) abort();
  rtc_test_check_bf16("embedding_forward", shape, "out", d_out, out, nc);
  float *dy = rtc_test_host_bf16(nc, -1.0f, 1.0f), *d_dw = rtc_test_dev(wte, vc);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, nc);
  rt_embedding_backward_f32(wte, dy, tok, N, C);
  rt_embedding_backward_cu(d_dw, d_dy, d_tok, N, C);
  rtc_test_check("embedding_backward bf16", shape, "dwte", d_dw, wte, vc);

  int v0 = V / 3, Vl = V / 2 > 0 ? V / 2 : 1;
  size_t lc = (size_t)Vl * C;
  float *tab = rtc_test_host(lc, -1.0f, 1.0f), *d_tab = rtc_test_dev(tab, lc);
  rtc_bf16 *d_out2 = rtc_test_poison_bf16(nc);
  if (rt_embedding_range_forward_f32(out, tok, tab, N, v0, Vl, C, V) != RT_OK) abort();
  if (rt_embedding_range_forward_cu(d_out2, d_tok, d_tab, N, v0, Vl, C, V) != 0) abort();
  rtc_test_check_bf16("embedding_range_forward", shape, "out", d_out2, out, nc);
  rt_embedding_range_backward_f32(tab, dy, tok, N, v0, Vl, C);
  rt_embedding_range_backward_cu(d_tab, d_dy, d_tok, N, v0, Vl, C);
  rtc_test_check("embedding_range_backward bf16", shape, "dtable", d_tab, tab, lc);

  free(tok), free(wte), free(out), free(dy), free(tab);
  rtc_test_dfree(d_tok, d_wte, d_out, d_dy, d_dw, d_tab, d_out2);
}

static void test_positional_bf16(int B, int T, int C, int t0) {
  char shape[64];
  snprintf(shape, sizeof shape, "B=%d T=%d C=%d t0=%d", B, T, C, t0);
  int maxT = t0 + T + 3;
  size_t n = (size_t)B * T * C, pc = (size_t)maxT * C;
  float *x = rtc_test_host_bf16(n, -1.0f, 1.0f), *wpe = rtc_test_host(pc, -1.0f, 1.0f);
  float *y = rtc_test_host(n, 0, 1), *d_wpe = rtc_test_dev(wpe, pc);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, n), *d_y = rtc_test_poison_bf16(n);
  rt_positional_forward_f32(y, x, wpe, B, T, C, t0);
  rt_positional_forward_cu(d_y, d_x, d_wpe, B, T, C, t0);
  rtc_test_check_bf16("positional_forward", shape, "out", d_y, y, n);
  rt_positional_forward_cu(d_x, d_x, d_wpe, B, T, C, t0);  // in place
  rtc_test_check_bf16("positional_forward", shape, "inplace", d_x, y, n);

  float *dy = rtc_test_host_bf16(n, -1.0f, 1.0f), *dx = rtc_test_host_bf16(n, -1.0f, 1.0f);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, n), *d_dx = rtc_test_dev_bf16(dx, n);
  rt_positional_backward_f32(dx, wpe, dy, B, T, C, t0);  // wpe as dwpe
  rt_positional_backward_cu(d_dx, d_wpe, d_dy, B, T, C, t0);
  rtc_test_check_bf16("positional_backward", shape, "dinp", d_dx, dx, n);
  rtc_test_check("positional_backward bf16", shape, "dwpe", d_wpe, wpe, pc);
  rt_positional_backward_f32(NULL, wpe, dy, B, T, C, t0);
  rt_positional_backward_cu((rtc_bf16 *)NULL, d_wpe, d_dy, B, T, C, t0);
  rtc_test_check("positional_backward bf16", shape, "dwpe1", d_wpe, wpe, pc);
  /* dinp only, from the (rounded) values the device holds */
  float *dx1 = rtc_test_fetch_bf16(d_dx, n);
  rt_positional_backward_f32(dx1, NULL, dy, B, T, C, t0);
  rt_positional_backward_cu(d_dx, (float *)NULL, d_dy, B, T, C, t0);
  rtc_test_check_bf16("positional_backward", shape, "dinp1", d_dx, dx1, n);
  free(x), free(wpe), free(y), free(dy), free(dx), free(dx1);
  rtc_test_dfree(d_x, d_wpe, d_y, d_dy, d_dx);
}

static void test_rope_bf16(int B, int T, int H, int D, double theta, int t0) {
  char shape[64];
  snprintf(shape, sizeof shape, "B=%d T=%d H=%d D=%d t0=%d", B, T, H, D, t0);
  size_t n = (size_t)B * T * H * D;
  float *x = rtc_test_host_bf16(n, -1.0f, 1.0f), *y = rtc_test_host(n, 0, 1);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, n), *d_y = rtc_test_poison_bf16(n);
  rt_rope_forward_f32(y, x, B, T, H, D, theta, t0);
  rt_rope_forward_cu(d_y, d_x, B, T, H, D, theta, t0);
  rtc_test_check_bf16("rope_forward", shape, "out", d_y, y, n);
  rt_rope_forward_cu(d_x, d_x, B, T, H, D, theta, t0);  // in place
  rtc_test_check_bf16("rope_forward", shape, "inplace", d_x, y, n);
  float *dy = rtc_test_host_bf16(n, -1.0f, 1.0f), *dx = rtc_test_host_bf16(n, -1.0f, 1.0f);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, n), *d_dx = rtc_test_dev_bf16(dx, n);
  rt_rope_backward_f32(dx, dy, B, T, H, D, theta, t0);
  rt_rope_backward_cu(d_dx, d_dy, B, T, H, D, theta, t0);
  rtc_test_check_bf16("rope_backward", shape, "dinp", d_dx, dx, n);
  free(x), free(y), free(dy), free(dx);
  rtc_test_dfree(d_x, d_y, d_dy, d_dx);
}

int main(void) {
  test_embedding(1, 1, 1);
  test_embedding(50, 7, 33);     // every token repeated
  test_embedding(300, 97, 130);  // every bucket holds a token or none
  test_embedding(64, 3000, 300); // more tokens than the 512 buckets
  test_embedding(5000, 600, 40); // 19 tiles of 256 rows and 136 (the list kernel's)
  skew_ = 1;                     // half the rows one token: a long run, interleaved
  test_embedding(4099, 2000, 70);
  skew_ = 0;
  test_positional(1, 1, 1, 0);
  test_positional(3, 17, 45, 5);
  test_positional(4, 64, 96, 0);
  test_rope(1, 1, 1, 2, 10000.0, 0);
  test_rope(2, 13, 3, 10, 10000.0, 7);
  test_rope(2, 64, 4, 64, 500000.0, 1000);
  test_embedding_bf16(1, 1, 1);
  test_embedding_bf16(50, 7, 33);
  test_embedding_bf16(300, 97, 130);
  test_embedding_bf16(64, 1000, 300);
  test_positional_bf16(1, 1, 1, 0);
  test_positional_bf16(3, 17, 45, 5);
  test_positional_bf16(4, 64, 96, 0);
  test_rope_bf16(1, 1, 1, 2, 10000.0, 0);
  test_rope_bf16(2, 13, 3, 10, 10000.0, 7);
  test_rope_bf16(2, 64, 4, 64, 500000.0, 1000);
  return rtc_test_done();
}
