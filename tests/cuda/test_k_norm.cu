/* test_k_norm.cu — k_norm.cu against the cpu kernels (k_norm.inc): layernorm
 * and rmsnorm forward and backward on random rows, outputs poisoned,
 * accumulated gradients starting from the same random values; odd sizes,
 * one row, one column.  Also: the parameter gradients are bitwise the same
 * on a second run.
 *
 * The bf16 overloads (x, out, dout, dinp bf16) the same way on inputs
 * rounded to bf16, against the cpu kernel on those values: the bf16
 * outputs within rtc_test_bf16.h's limit, the fp32 ones (mean, rstd,
 * dweight, dbias) within rtc_test.h's. */
#include "rtc_test_bf16.h"

static void test_layernorm(int N, int C, int with_bias) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d%s", N, C, with_bias ? "" : " nobias");
  size_t nc = (size_t)N * C;
  float *x = rtc_test_host(nc, -2.0f, 3.0f), *w = rtc_test_host(C, 0.5f, 1.5f);
  float *b = with_bias ? rtc_test_host(C, -1.0f, 1.0f) : NULL;
  float *out = rtc_test_host(nc, 0, 1), *mean = rtc_test_host(N, 0, 1),
        *rstd = rtc_test_host(N, 0, 1);
  rt_layernorm_forward_f32(out, mean, rstd, x, w, b, N, C);
  float *d_x = rtc_test_dev(x, nc), *d_w = rtc_test_dev(w, C);
  float *d_b = b ? rtc_test_dev(b, C) : NULL;
  float *d_out = rtc_test_poison(nc), *d_mean = rtc_test_poison(N), *d_rstd = rtc_test_poison(N);
  rt_layernorm_forward_cu(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
  rtc_test_check("layernorm_forward", shape, "out", d_out, out, nc);
  rtc_test_check("layernorm_forward", shape, "mean", d_mean, mean, N);
  rtc_test_check("layernorm_forward", shape, "rstd", d_rstd, rstd, N);

  /* in place, with an explicit eps and no saved statistics */
  float *out2 = rtc_test_copy(x, nc);
  rt_layernorm_forward_eps_f32(out2, NULL, NULL, out2, w, b, N, C, 1e-3);
  float *d_io = rtc_test_dev(x, nc);
  rt_layernorm_forward_eps_cu(d_io, NULL, NULL, d_io, d_w, d_b, N, C, 1e-3);
  rtc_test_check("layernorm_forward_eps", shape, "inplace", d_io, out2, nc);

  /* backward: everything accumulates */
  float *dy = rtc_test_host(nc, -1.0f, 1.0f);
  float *dx = rtc_test_host(nc, -1.0f, 1.0f), *dw = rtc_test_host(C, -1.0f, 1.0f),
        *db = rtc_test_host(C, -1.0f, 1.0f);
  float *d_dy = rtc_test_dev(dy, nc), *d_dx = rtc_test_dev(dx, nc), *d_dw = rtc_test_dev(dw, C),
        *d_db = rtc_test_dev(db, C), *d_dw2 = rtc_test_dev(dw, C), *d_db2 = rtc_test_dev(db, C);
  float *d_mean_c = rtc_test_dev(mean, N), *d_rstd_c = rtc_test_dev(rstd, N);
  rt_layernorm_backward_f32(dx, dw, db, dy, x, w, mean, rstd, N, C);
  rt_layernorm_backward_cu(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean_c, d_rstd_c, N, C);
  /* dinp = rstd (g - mean g - x̂ mean(g x̂)), g = dy·w: a difference of terms
   * of size rstd |g|, so an element's error is measured against that (with
   * C = 1 it is rstd times a rounding of g - g, and rstd is 1/sqrt(eps)) */
  float *mag = (float *)malloc(nc * sizeof(float));
  for (int n = 0; n < N; n++) {
    double gmax = 0;
    for (int c = 0; c < C; c++) gmax = fmax(gmax, fabs((double)dy[(size_t)n * C + c] * w[c]));
    for (int c = 0; c < C; c++)
      mag[(size_t)n * C + c] = (float)fmax(fabs((double)dx[(size_t)n * C + c]), rstd[n] * gmax);
  }
  rtc_test_check_mag("layernorm_backward", shape, "dinp", d_dx, dx, mag, nc);
  free(mag);
  rtc_test_check("layernorm_backward", shape, "dweight", d_dw, dw, C);
  rtc_test_check("layernorm_backward", shape, "dbias", d_db, db, C);
  /* the same gradients again: bitwise equal */
  rt_layernorm_backward_cu(NULL, d_dw2, d_db2, d_dy, d_x, d_w, d_mean_c, d_rstd_c, N, C);
  float *g1 = (float *)malloc(C * sizeof(float)), *g2 = (float *)malloc(C * sizeof(float));
  cudaCheck(cudaMemcpy(g1, d_dw, C * sizeof(float), cudaMemcpyDeviceToHost));
  cudaCheck(cudaMemcpy(g2, d_dw2, C * sizeof(float), cudaMemcpyDeviceToHost));
  int same = !memcmp(g1, g2, C * sizeof(float));
  cudaCheck(cudaMemcpy(g1, d_db, C * sizeof(float), cudaMemcpyDeviceToHost));
  cudaCheck(cudaMemcpy(g2, d_db2, C * sizeof(float), cudaMemcpyDeviceToHost));
  same &= !memcmp(g1, g2, C * sizeof(float));
  printf("%-26s %-22s %-8s %s\n", "layernorm_backward", shape, "repeat",
         same ? "bitwise PASS" : "differs FAIL");
  if (!same) rtc_test_failures++;

  free(x), free(w), free(b), free(out), free(mean), free(rstd), free(out2), free(dy), free(dx),
      free(dw), free(db), free(g1), free(g2);
  float *dev[] = {d_x, d_w, d_b, d_out, d_mean, d_rstd, d_io, d_dy, d_dx,
                  d_dw, d_db, d_dw2, d_db2, d_mean_c, d_rstd_c};
  for (float *p : dev) cudaCheck(cudaFree(p));
}

static void test_rmsnorm(int N, int C) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
  size_t nc = (size_t)N * C;
  double eps = 1e-6;
  float *x = rtc_test_host(nc, -2.0f, 3.0f), *w = rtc_test_host(C, 0.5f, 1.5f);
  float *out = rtc_test_host(nc, 0, 1), *rstd = rtc_test_host(N, 0, 1);
  rt_rmsnorm_forward_f32(out, rstd, x, w, N, C, eps);
  float *d_x = rtc_test_dev(x, nc), *d_w = rtc_test_dev(w, C);
  float *d_out = rtc_test_poison(nc), *d_rstd = rtc_test_poison(N);
  rt_rmsnorm_forward_cu(d_out, d_rstd, d_x, d_w, N, C, eps);
  rtc_test_check("rmsnorm_forward", shape, "out", d_out, out, nc);
  rtc_test_check("rmsnorm_forward", shape, "rstd", d_rstd, rstd, N);

  float *dy = rtc_test_host(nc, -1.0f, 1.0f), *dx = rtc_test_host(nc, -1.0f, 1.0f),
        *dw = rtc_test_host(C, -1.0f, 1.0f);
  float *d_dy = rtc_test_dev(dy, nc), *d_dx = rtc_test_dev(dx, nc), *d_dw = rtc_test_dev(dw, C);
  float *d_rstd_c = rtc_test_dev(rstd, N);
  rt_rmsnorm_backward_f32(dx, dw, dy, x, w, rstd, N, C);
  rt_rmsnorm_backward_cu(d_dx, d_dw, d_dy, d_x, d_w, d_rstd_c, N, C);
  rtc_test_check("rmsnorm_backward", shape, "dinp", d_dx, dx, nc);
  rtc_test_check("rmsnorm_backward", shape, "dweight", d_dw, dw, C);

  /* dinp only, and dweight only */
  float *dx2 = rtc_test_host(nc, -1.0f, 1.0f), *dw2 = rtc_test_host(C, -1.0f, 1.0f);
  float *d_dx2 = rtc_test_dev(dx2, nc), *d_dw2 = rtc_test_dev(dw2, C);
  rt_rmsnorm_backward_f32(dx2, NULL, dy, x, w, rstd, N, C);
  rt_rmsnorm_backward_f32(NULL, dw2, dy, x, w, rstd, N, C);
  rt_rmsnorm_backward_cu(d_dx2, NULL, d_dy, d_x, d_w, d_rstd_c, N, C);
  rt_rmsnorm_backward_cu(NULL, d_dw2, d_dy, d_x, d_w, d_rstd_c, N, C);
  rtc_test_check("rmsnorm_backward", shape, "dinp1", d_dx2, dx2, nc);
  rtc_test_check("rmsnorm_backward", shape, "dweight1", d_dw2, dw2, C);

  free(x), free(w), free(out), free(rstd), free(dy), free(dx), free(dw), free(dx2), free(dw2);
  float *dev[] = {d_x, d_w, d_out, d_rstd, d_dy, d_dx, d_dw, d_rstd_c, d_dx2, d_dw2};
  for (float *p : dev) cudaCheck(cudaFree(p));
}

static void test_layernorm_bf16(int N, int C, int with_bias) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d%s", N, C, with_bias ? "" : " nobias");
  size_t nc = (size_t)N * C;
  float *x = rtc_test_host_bf16(nc, -2.0f, 3.0f), *w = rtc_test_host(C, 0.5f, 1.5f);
  float *b = with_bias ? rtc_test_host(C, -1.0f, 1.0f) : NULL;
  float *out = rtc_test_host(nc, 0, 1), *mean = rtc_test_host(N, 0, 1),
        *rstd = rtc_test_host(N, 0, 1);
  rt_layernorm_forward_f32(out, mean, rstd, x, w, b, N, C);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, nc), *d_out = rtc_test_poison_bf16(nc);
  float *d_w = rtc_test_dev(w, C), *d_b = b ? rtc_test_dev(b, C) : NULL;
  float *d_mean = rtc_test_poison(N), *d_rstd = rtc_test_poison(N);
  rt_layernorm_forward_cu(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
  rtc_test_check_bf16("layernorm_forward", shape, "out", d_out, out, nc);
  rtc_test_check("layernorm_forward bf16", shape, "mean", d_mean, mean, N);
  rtc_test_check("layernorm_forward bf16", shape, "rstd", d_rstd, rstd, N);

  /* in place, with an explicit eps and no saved statistics */
  float *out2 = rtc_test_copy(x, nc);
  rt_layernorm_forward_eps_f32(out2, NULL, NULL, out2, w, b, N, C, 1e-3);
  rtc_bf16 *d_io = rtc_test_dev_bf16(x, nc);
  rt_layernorm_forward_eps_cu(d_io, NULL, NULL, d_io, d_w, d_b, N, C, 1e-3);
  rtc_test_check_bf16("layernorm_forward_eps", shape, "inplace", d_io, out2, nc);

  /* backward: everything accumulates (dinp from bf16 values) */
  float *dy = rtc_test_host_bf16(nc, -1.0f, 1.0f), *dx = rtc_test_host_bf16(nc, -1.0f, 1.0f);
  float *dw = rtc_test_host(C, -1.0f, 1.0f), *db = rtc_test_host(C, -1.0f, 1.0f);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, nc), *d_dx = rtc_test_dev_bf16(dx, nc);
  float *d_dw = rtc_test_dev(dw, C), *d_db = rtc_test_dev(db, C);
  float *d_dw2 = rtc_test_dev(dw, C), *d_db2 = rtc_test_dev(db, C);
  float *d_mean_c = rtc_test_dev(mean, N), *d_rstd_c = rtc_test_dev(rstd, N);
  rt_layernorm_backward_f32(dx, dw, db, dy, x, w, mean, rstd, N, C);
  rt_layernorm_backward_cu(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean_c, d_rstd_c, N, C);
  rtc_test_check_bf16("layernorm_backward", shape, "dinp", d_dx, dx, nc);
  rtc_test_check("layernorm_backward bf16", shape, "dweight", d_dw, dw, C);
  rtc_test_check("layernorm_backward bf16", shape, "dbias", d_db, db, C);
  /* the same gradients again, without dinp: bitwise equal */
  rt_layernorm_backward_cu((rtc_bf16 *)NULL, d_dw2, d_db2, d_dy, d_x, d_w, d_mean_c, d_rstd_c, N,
                           C);
  float *g1 = (float *)malloc(C * sizeof(float)), *g2 = (float *)malloc(C * sizeof(float));
  cudaCheck(cudaMemcpy(g1, d_dw, C * sizeof(float), cudaMemcpyDeviceToHost));
  cudaCheck(cudaMemcpy(g2, d_dw2, C * sizeof(float), cudaMemcpyDeviceToHost));
  int same = !memcmp(g1, g2, C * sizeof(float));
  cudaCheck(cudaMemcpy(g1, d_db, C * sizeof(float), cudaMemcpyDeviceToHost));
  cudaCheck(cudaMemcpy(g2, d_db2, C * sizeof(float), cudaMemcpyDeviceToHost));
  same &= !memcmp(g1, g2, C * sizeof(float));
  printf("%-26s %-22s %-8s %s\n", "layernorm_backward bf16", shape, "repeat",
         same ? "bitwise PASS" : "differs FAIL");
  if (!same) rtc_test_failures++;

  free(x), free(w), free(b), free(out), free(mean), free(rstd), free(out2), free(dy), free(dx),
      free(dw), free(db), free(g1), free(g2);
  rtc_test_dfree(d_x, d_out, d_w, d_b, d_mean, d_rstd, d_io, d_dy, d_dx, d_dw, d_db, d_dw2,
                 d_db2, d_mean_c, d_rstd_c);
}

static void test_rmsnorm_bf16(int N, int C) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
  size_t nc = (size_t)N * C;
  double eps = 1e-6;
  float *x = rtc_test_host_bf16(nc, -2.0f, 3.0f), *w = rtc_test_host(C, 0.5f, 1.5f);
  float *out = rtc_test_host(nc, 0, 1), *rstd = rtc_test_host(N, 0, 1);
  rt_rmsnorm_forward_f32(out, rstd, x, w, N, C, eps);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, nc), *d_out = rtc_test_poison_bf16(nc);
  float *d_w = rtc_test_dev(w, C), *d_rstd = rtc_test_poison(N);
  rt_rmsnorm_forward_cu(d_out, d_rstd, d_x, d_w, N, C, eps);
  rtc_test_check_bf16("rmsnorm_forward", shape, "out", d_out, out, nc);
  rtc_test_check("rmsnorm_forward bf16", shape, "rstd", d_rstd, rstd, N);
  rtc_bf16 *d_io = rtc_test_dev_bf16(x, nc);  // in place
  rt_rmsnorm_forward_cu(d_io, (float *)NULL, d_io, d_w, N, C, eps);
  rtc_test_check_bf16("rmsnorm_forward", shape, "inplace", d_io, out, nc);

  float *dy = rtc_test_host_bf16(nc, -1.0f, 1.0f), *dx = rtc_test_host_bf16(nc, -1.0f, 1.0f);
  float *dw = rtc_test_host(C, -1.0f, 1.0f);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, nc), *d_dx = rtc_test_dev_bf16(dx, nc);
  float *d_dw = rtc_test_dev(dw, C), *d_rstd_c = rtc_test_dev(rstd, N);
  rt_rmsnorm_backward_f32(dx, dw, dy, x, w, rstd, N, C);
  rt_rmsnorm_backward_cu(d_dx, d_dw, d_dy, d_x, d_w, d_rstd_c, N, C);
  rtc_test_check_bf16("rmsnorm_backward", shape, "dinp", d_dx, dx, nc);
  rtc_test_check("rmsnorm_backward bf16", shape, "dweight", d_dw, dw, C);

  /* dinp only, and dweight only */
  float *dx2 = rtc_test_host_bf16(nc, -1.0f, 1.0f), *dw2 = rtc_test_host(C, -1.0f, 1.0f);
  rtc_bf16 *d_dx2 = rtc_test_dev_bf16(dx2, nc);
  float *d_dw2 = rtc_test_dev(dw2, C);
  rt_rmsnorm_backward_f32(dx2, NULL, dy, x, w, rstd, N, C);
  rt_rmsnorm_backward_f32(NULL, dw2, dy, x, w, rstd, N, C);
  rt_rmsnorm_backward_cu(d_dx2, (float *)NULL, d_dy, d_x, d_w, d_rstd_c, N, C);
  rt_rmsnorm_backward_cu((rtc_bf16 *)NULL, d_dw2, d_dy, d_x, d_w, d_rstd_c, N, C);
  rtc_test_check_bf16("rmsnorm_backward", shape, "dinp1", d_dx2, dx2, nc);
  rtc_test_check("rmsnorm_backward bf16", shape, "dweight1", d_dw2, dw2, C);

  free(x), free(w), free(out), free(rstd), free(dy), free(dx), free(dw), free(dx2), free(dw2);
  rtc_test_dfree(d_x, d_out, d_w, d_rstd, d_io, d_dy, d_dx, d_dw, d_rstd_c, d_dx2, d_dw2);
}

int main(void) {
  /* odd sizes (not multiples of 32 or of the 8 rows a block), one row, one
   * column, more rows than one 32-row gradient chunk */
  /* {1500, 40}: 47 partial sums a column, two for some of the second pass's lanes */
  const int shapes[][2] = {{1, 1}, {1, 37}, {7, 64}, {33, 300}, {300, 96}, {257, 257}, {1500, 40}};
  for (const auto &s : shapes) {
    test_layernorm(s[0], s[1], 1);
    test_rmsnorm(s[0], s[1]);
  }
  test_layernorm(45, 129, 0);
  for (const auto &s : shapes) {
    test_layernorm_bf16(s[0], s[1], 1);
    test_rmsnorm_bf16(s[0], s[1]);
  }
  test_layernorm_bf16(45, 129, 0);
  return rtc_test_done();
}
