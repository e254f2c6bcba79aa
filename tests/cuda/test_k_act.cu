/* test_k_act.cu — k_act.cu against the cpu kernels (k_act.inc, and rt_acc,
 * rt_chunk_copy, rt_chunk_acc of train_support.c): outputs poisoned, the
 * accumulated ones starting from the same random values; sizes 1, odd, and
 * more than one block.  Dropout must keep exactly the cpu's elements.
 *
 * The bf16 overloads (precision = bf16 storage) the same way on inputs
 * rounded to bf16, against the cpu kernel on those values
 * (rtc_test_bf16.h's limit); their dropout drops exactly the fp32
 * launcher's elements; rt_cast_bf16_cu rounds as rtc_f2bf (to nearest,
 * ties to even) and rt_widen_bf16_cu widens exactly.  The step's weight
 * casts as one launch (rt_cast_bf16_multi_cu) write, in an arena poisoned
 * elsewhere, exactly the bytes one rt_cast_bf16_cu per segment writes. */
#include "rtc_test_bf16.h"

typedef void (*unary_f32)(float *, const float *, size_t);
typedef void (*unary_bwd_f32)(float *, const float *, const float *, size_t);

static void test_unary(const char *name, unary_f32 cpu, unary_f32 gpu, const char *bname,
                       unary_bwd_f32 cpu_b, unary_bwd_f32 gpu_b, size_t n) {
  char shape[64];
  snprintf(shape, sizeof shape, "n=%zu", n);
  float *x = rtc_test_host(n, -5.0f, 5.0f), *y = rtc_test_host(n, 0, 1);
  float *d_x = rtc_test_dev(x, n), *d_y = rtc_test_poison(n);
  cpu(y, x, n);
  gpu(d_y, d_x, n);
  rtc_test_check(name, shape, "out", d_y, y, n);
  float *dy = rtc_test_host(n, -1.0f, 1.0f), *dx = rtc_test_host(n, -1.0f, 1.0f);
  float *d_dy = rtc_test_dev(dy, n), *d_dx = rtc_test_dev(dx, n);
  cpu_b(dx, x, dy, n);
  gpu_b(d_dx, d_x, d_dy, n);
  rtc_test_check(bname, shape, "dinp", d_dx, dx, n);
  free(x), free(y), free(dy), free(dx);
  rtc_test_dfree(d_x, d_y, d_dy, d_dx);
}

static void test_swiglu(int N, int C, int ld) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d ld=%d", N, C, ld);
  size_t nl = (size_t)N * ld, nc = (size_t)N * C;
  float *a = rtc_test_host(nl, -4.0f, 4.0f), *b = rtc_test_host(nl, -2.0f, 2.0f);
  float *out = rtc_test_host(nc, 0, 1), *dy = rtc_test_host(nc, -1.0f, 1.0f);
  float *da = rtc_test_host(nl, -1.0f, 1.0f), *db = rtc_test_host(nl, -1.0f, 1.0f);
  float *d_a = rtc_test_dev(a, nl), *d_b = rtc_test_dev(b, nl), *d_out = rtc_test_poison(nc);
  float *d_dy = rtc_test_dev(dy, nc), *d_da = rtc_test_dev(da, nl), *d_db = rtc_test_dev(db, nl);
  rt_swiglu_forward_f32(out, a, b, N, C, ld);
  rt_swiglu_forward_cu(d_out, d_a, d_b, N, C, ld);
  rtc_test_check("swiglu_forward", shape, "out", d_out, out, nc);
  rt_swiglu_backward_f32(da, db, dy, a, b, N, C, ld);
  rt_swiglu_backward_cu(d_da, d_db, d_dy, d_a, d_b, N, C, ld);
  rtc_test_check("swiglu_backward", shape, "da", d_da, da, nl);
  rtc_test_check("swiglu_backward", shape, "db", d_db, db, nl);
  rt_swiglu_backward_f32(NULL, db, dy, a, b, N, C, ld);  // da NULL
  rt_swiglu_backward_cu(NULL, d_db, d_dy, d_a, d_b, N, C, ld);
  rtc_test_check("swiglu_backward", shape, "db only", d_db, db, nl);
  free(a), free(b), free(out), free(dy), free(da), free(db);
  float *dev[] = {d_a, d_b, d_out, d_dy, d_da, d_db};
  for (float *p : dev) cudaCheck(cudaFree(p));
}

static void test_softmax(int N, int C) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
  size_t nc = (size_t)N * C;
  float *x = rtc_test_host(nc, -8.0f, 8.0f), *y = rtc_test_host(nc, 0, 1);
  float *d_x = rtc_test_dev(x, nc), *d_y = rtc_test_poison(nc);
  rt_softmax_forward_f32(y, x, N, C);
  rt_softmax_forward_cu(d_y, d_x, N, C);
  rtc_test_check("softmax_forward", shape, "out", d_y, y, nc);
  rt_softmax_forward_cu(d_x, d_x, N, C);  // in place
  rtc_test_check("softmax_forward", shape, "inplace", d_x, y, nc);
  float *dy = rtc_test_host(nc, -1.0f, 1.0f), *dx = rtc_test_host(nc, -1.0f, 1.0f);
  float *d_dy = rtc_test_dev(dy, nc), *d_dx = rtc_test_dev(dx, nc), *d_yc = rtc_test_dev(y, nc);
  rt_softmax_backward_f32(dx, dy, y, N, C);
  rt_softmax_backward_cu(d_dx, d_dy, d_yc, N, C);
  rtc_test_check("softmax_backward", shape, "dinp", d_dx, dx, nc);
  free(x), free(y), free(dy), free(dx);
  float *dev[] = {d_x, d_y, d_dy, d_dx, d_yc};
  for (float *p : dev) cudaCheck(cudaFree(p));
}

static void test_dropout(size_t n, double p, uint64_t seed, uint64_t step, uint64_t offset) {
  char shape[64];
  snprintf(shape, sizeof shape, "n=%zu p=%g", n, p);
  float *x = rtc_test_host(n, -1.0f, 1.0f), *y = rtc_test_host(n, 0, 1);
  float *d_x = rtc_test_dev(x, n), *d_y = rtc_test_poison(n);
  rt_dropout_forward_f32(y, x, n, p, seed, step, offset);
  rt_dropout_forward_cu(d_y, d_x, n, p, seed, step, offset);
  rtc_test_check("dropout_forward", shape, "out", d_y, y, n);
  rt_dropout_forward_cu(d_x, d_x, n, p, seed, step, offset);  // in place
  rtc_test_check("dropout_forward", shape, "inplace", d_x, y, n);
  float *dy = rtc_test_host(n, -1.0f, 1.0f), *dx = rtc_test_host(n, -1.0f, 1.0f);
  float *d_dy = rtc_test_dev(dy, n), *d_dx = rtc_test_dev(dx, n);
  rt_dropout_backward_f32(dx, dy, n, p, seed, step, offset);
  rt_dropout_backward_cu(d_dx, d_dy, n, p, seed, step, offset);
  rtc_test_check("dropout_backward", shape, "dinp", d_dx, dx, n);
  free(x), free(y), free(dy), free(dx);
  float *dev[] = {d_x, d_y, d_dy, d_dx};
  for (float *p_ : dev) cudaCheck(cudaFree(p_));
}

static void test_elementwise(size_t n) {
  char shape[64];
  snprintf(shape, sizeof shape, "n=%zu", n);
  float *a = rtc_test_host(n, -3.0f, 3.0f), *b = rtc_test_host(n, -3.0f, 3.0f);
  float *c = rtc_test_host(n, 0, 1);
  float *d_a = rtc_test_dev(a, n), *d_b = rtc_test_dev(b, n), *d_c = rtc_test_poison(n);
  rt_add_forward_f32(c, a, b, n);
  rt_add_forward_cu(d_c, d_a, d_b, n);
  rtc_test_check("add_forward", shape, "out", d_c, c, n);
  const double alphas[] = {1.0, -0.37};
  for (double al : alphas) {
    float *dst = rtc_test_copy(a, n), *d_dst = rtc_test_dev(a, n);
    rt_axpy_f32(dst, b, al, n);
    rt_axpy_cu(d_dst, d_b, al, n);
    rtc_test_check(al == 1.0 ? "axpy alpha=1" : "axpy alpha=-0.37", shape, "dst", d_dst, dst, n);
    free(dst);
    rtc_test_dfree(d_dst);
  }
  float *x = rtc_test_copy(a, n), *d_x = rtc_test_dev(a, n);
  rt_scale_f32(x, n, 0.731);
  rt_scale_cu(d_x, n, 0.731);
  rtc_test_check("scale", shape, "x", d_x, x, n);
  float *acc = rtc_test_copy(a, n), *d_acc = rtc_test_dev(a, n);
  rt_acc_f32(acc, b, n);
  rt_acc_cu(d_acc, d_b, n);
  rtc_test_check("acc", shape, "dst", d_acc, acc, n);
  free(a), free(b), free(c), free(x), free(acc);
  float *dev[] = {d_a, d_b, d_c, d_x, d_acc};
  for (float *p : dev) cudaCheck(cudaFree(p));
}

static void test_slice(int N, int C, int c0, int W) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d c0=%d W=%d", N, C, c0, W);
  size_t nc = (size_t)N * C, nw = (size_t)N * W;
  float *x = rtc_test_host(nc, -1.0f, 1.0f), *y = rtc_test_host(nw, 0, 1);
  float *d_x = rtc_test_dev(x, nc), *d_y = rtc_test_poison(nw);
  rt_slice_cols_forward_f32(y, x, N, C, c0, W);
  rt_slice_cols_forward_cu(d_y, d_x, N, C, c0, W);
  rtc_test_check("slice_cols_forward", shape, "out", d_y, y, nw);
  float *dy = rtc_test_host(nw, -1.0f, 1.0f), *d_dy = rtc_test_dev(dy, nw);
  rt_slice_cols_backward_f32(x, dy, N, C, c0, W);
  rt_slice_cols_backward_cu(d_x, d_dy, N, C, c0, W);
  rtc_test_check("slice_cols_backward", shape, "dinp", d_x, x, nc);
  free(x), free(y), free(dy);
  rtc_test_dfree(d_x, d_y, d_dy);
}

static void test_chunks(size_t outer, size_t inner, int P, int r) {
  char shape[64];
  snprintf(shape, sizeof shape, "%zux%zu P=%d r=%d", outer, inner, P, r);
  size_t nfull = outer * inner * P, nc = outer * inner;
  float *src = rtc_test_host(nfull, -1.0f, 1.0f), *dst = rtc_test_host(nc, 0, 1);
  float *d_src = rtc_test_dev(src, nfull), *d_dst = rtc_test_poison(nc);
  rt_chunk_copy(dst, src, outer, inner, P, r, 4);
  rt_chunk_copy_cu(d_dst, d_src, outer, inner, P, r, 4);
  rtc_test_check("chunk_copy esize=4", shape, "dst", d_dst, dst, nc);
  /* 8- and 2-byte elements: the same bytes as floats, halved/doubled inner */
  if (inner % 2 == 0) {
    float *d_dst8 = rtc_test_poison(nc);
    rt_chunk_copy_cu(d_dst8, d_src, outer, inner / 2, P, r, 8);
    rtc_test_check("chunk_copy esize=8", shape, "dst", d_dst8, dst, nc);
    cudaCheck(cudaFree(d_dst8));
  }
  float *d_dst2 = rtc_test_poison(nc);
  rt_chunk_copy_cu(d_dst2, d_src, outer, inner * 2, P, r, 2);
  rtc_test_check("chunk_copy esize=2", shape, "dst", d_dst2, dst, nc);
  float *x = rtc_test_host(nc, -1.0f, 1.0f), *d_x = rtc_test_dev(x, nc);
  float *full = rtc_test_copy(src, nfull);
  rt_chunk_acc_f32(full, x, outer, inner, P, r);
  rt_chunk_acc_cu(d_src, d_x, outer, inner, P, r);
  rtc_test_check("chunk_acc", shape, "dst", d_src, full, nfull);
  free(src), free(dst), free(x), free(full);
  float *dev[] = {d_src, d_dst, d_dst2, d_x};
  for (float *p : dev) cudaCheck(cudaFree(p));
}

/* ---- the bf16 overloads ---- */

typedef void (*unary_bf16)(rtc_bf16 *, const rtc_bf16 *, size_t);
typedef void (*unary_bwd_bf16)(rtc_bf16 *, const rtc_bf16 *, const rtc_bf16 *, size_t);

static void test_unary_bf16(const char *name, unary_f32 cpu, unary_bf16 gpu, const char *bname,
                            unary_bwd_f32 cpu_b, unary_bwd_bf16 gpu_b, size_t n) {
  char shape[64];
  snprintf(shape, sizeof shape, "n=%zu", n);
  float *x = rtc_test_host_bf16(n, -5.0f, 5.0f), *y = rtc_test_host(n, 0, 1);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, n), *d_y = rtc_test_poison_bf16(n);
  cpu(y, x, n);
  gpu(d_y, d_x, n);
  rtc_test_check_bf16(name, shape, "out", d_y, y, n);
  float *dy = rtc_test_host_bf16(n, -1.0f, 1.0f), *dx = rtc_test_host_bf16(n, -1.0f, 1.0f);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, n), *d_dx = rtc_test_dev_bf16(dx, n);
  cpu_b(dx, x, dy, n);
  gpu_b(d_dx, d_x, d_dy, n);
  rtc_test_check_bf16(bname, shape, "dinp", d_dx, dx, n);
  free(x), free(y), free(dy), free(dx);
  rtc_test_dfree(d_x, d_y, d_dy, d_dx);
}

static void test_swiglu_bf16(int N, int C, int ld) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d ld=%d", N, C, ld);
  size_t nl = (size_t)N * ld, nc = (size_t)N * C;
  float *a = rtc_test_host_bf16(nl, -4.0f, 4.0f), *b = rtc_test_host_bf16(nl, -2.0f, 2.0f);
  float *out = rtc_test_host(nc, 0, 1), *dy = rtc_test_host_bf16(nc, -1.0f, 1.0f);
  float *da = rtc_test_host_bf16(nl, -1.0f, 1.0f), *db = rtc_test_host_bf16(nl, -1.0f, 1.0f);
  rtc_bf16 *d_a = rtc_test_dev_bf16(a, nl), *d_b = rtc_test_dev_bf16(b, nl);
  rtc_bf16 *d_out = rtc_test_poison_bf16(nc), *d_dy = rtc_test_dev_bf16(dy, nc);
  rtc_bf16 *d_da = rtc_test_dev_bf16(da, nl), *d_db = rtc_test_dev_bf16(db, nl);
  rt_swiglu_forward_f32(out, a, b, N, C, ld);
  rt_swiglu_forward_cu(d_out, d_a, d_b, N, C, ld);
  rtc_test_check_bf16("swiglu_forward", shape, "out", d_out, out, nc);
  rt_swiglu_backward_f32(da, db, dy, a, b, N, C, ld);
  rt_swiglu_backward_cu(d_da, d_db, d_dy, d_a, d_b, N, C, ld);
  rtc_test_check_bf16("swiglu_backward", shape, "da", d_da, da, nl);
  rtc_test_check_bf16("swiglu_backward", shape, "db", d_db, db, nl);
  /* da NULL, db from what the device holds now */
  float *db1 = rtc_test_fetch_bf16(d_db, nl);
  rt_swiglu_backward_f32(NULL, db1, dy, a, b, N, C, ld);
  rt_swiglu_backward_cu((rtc_bf16 *)NULL, d_db, d_dy, d_a, d_b, N, C, ld);
  rtc_test_check_bf16("swiglu_backward", shape, "db only", d_db, db1, nl);
  free(a), free(b), free(out), free(dy), free(da), free(db), free(db1);
  rtc_test_dfree(d_a, d_b, d_out, d_dy, d_da, d_db);
}

static void test_softmax_bf16(int N, int C) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
  size_t nc = (size_t)N * C;
  float *x = rtc_test_host_bf16(nc, -8.0f, 8.0f), *y = rtc_test_host(nc, 0, 1);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, nc), *d_y = rtc_test_poison_bf16(nc);
  rt_softmax_forward_f32(y, x, N, C);
  rt_softmax_forward_cu(d_y, d_x, N, C);
  rtc_test_check_bf16("softmax_forward", shape, "out", d_y, y, nc);
  rt_softmax_forward_cu(d_x, d_x, N, C);  // in place
  rtc_test_check_bf16("softmax_forward", shape, "inplace", d_x, y, nc);
  /* the backward on the stored (rounded) probabilities */
  rtc_test_round(y, nc);
  float *dy = rtc_test_host_bf16(nc, -1.0f, 1.0f), *dx = rtc_test_host_bf16(nc, -1.0f, 1.0f);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, nc), *d_dx = rtc_test_dev_bf16(dx, nc);
  rtc_bf16 *d_yc = rtc_test_dev_bf16(y, nc);
  rt_softmax_backward_f32(dx, dy, y, N, C);
  rt_softmax_backward_cu(d_dx, d_dy, d_yc, N, C);
  rtc_test_check_bf16("softmax_backward", shape, "dinp", d_dx, dx, nc);
  free(x), free(y), free(dy), free(dx);
  rtc_test_dfree(d_x, d_y, d_dy, d_dx, d_yc);
}

/* Elements where a is zero and b is not, or the other way round. */
static size_t zero_mismatches(const float *a, const float *b, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += (a[i] == 0.0f) != (b[i] == 0.0f);
  return k;
}

static void mask_check(const char *what, const char *shape, size_t bad) {
  printf("%-26s %-22s %-8s %zu elements differ %s\n", what, shape, "mask", bad,
         bad ? "FAIL" : "PASS");
  if (bad) rtc_test_failures++;
}

static void test_dropout_bf16(size_t n, double p, uint64_t seed, uint64_t step,
                              uint64_t offset) {
  char shape[64];
  snprintf(shape, sizeof shape, "n=%zu p=%g", n, p);
  float *x = rtc_test_host_bf16(n, -1.0f, 1.0f), *y = rtc_test_host(n, 0, 1);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, n), *d_y = rtc_test_poison_bf16(n);
  float *d_xf = rtc_test_dev(x, n), *d_yf = rtc_test_poison(n);
  rt_dropout_forward_f32(y, x, n, p, seed, step, offset);
  rt_dropout_forward_cu(d_y, d_x, n, p, seed, step, offset);
  rtc_test_check_bf16("dropout_forward", shape, "out", d_y, y, n);
  /* the fp32 launcher's mask: the same zeros (no kept element is 0) */
  rt_dropout_forward_cu(d_yf, d_xf, n, p, seed, step, offset);
  float *yb = rtc_test_fetch_bf16(d_y, n), *yf = (float *)malloc(n * sizeof(float));
  cudaCheck(cudaMemcpy(yf, d_yf, n * sizeof(float), cudaMemcpyDeviceToHost));
  mask_check("dropout_forward bf16", shape, zero_mismatches(yb, yf, n));
  rt_dropout_forward_cu(d_x, d_x, n, p, seed, step, offset);  // in place
  rtc_test_check_bf16("dropout_forward", shape, "inplace", d_x, y, n);

  float *dy = rtc_test_host_bf16(n, -1.0f, 1.0f), *dx = rtc_test_host_bf16(n, -1.0f, 1.0f);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, n), *d_dx = rtc_test_dev_bf16(dx, n);
  float *d_dyf = rtc_test_dev(dy, n), *d_dxf = rtc_test_dev(dx, n);
  rt_dropout_backward_cu(d_dxf, d_dyf, n, p, seed, step, offset);
  rt_dropout_backward_cu(d_dx, d_dy, n, p, seed, step, offset);
  float *dxf = (float *)malloc(n * sizeof(float)), *dxb = rtc_test_fetch_bf16(d_dx, n);
  cudaCheck(cudaMemcpy(dxf, d_dxf, n * sizeof(float), cudaMemcpyDeviceToHost));
  /* the elements the fp32 launcher dropped (left as they were) are left
   * bitwise as they were */
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += dxf[i] == dx[i] && dy[i] != 0.0f && dxb[i] != dx[i];
  mask_check("dropout_backward bf16", shape, bad);
  rt_dropout_backward_f32(dx, dy, n, p, seed, step, offset);
  rtc_test_check_bf16("dropout_backward", shape, "dinp", d_dx, dx, n);
  free(x), free(y), free(yb), free(yf), free(dy), free(dx), free(dxf), free(dxb);
  rtc_test_dfree(d_x, d_y, d_xf, d_yf, d_dy, d_dx, d_dyf, d_dxf);
}

static void test_elementwise_bf16(size_t n) {
  char shape[64];
  snprintf(shape, sizeof shape, "n=%zu", n);
  float *a = rtc_test_host_bf16(n, -3.0f, 3.0f), *b = rtc_test_host_bf16(n, -3.0f, 3.0f);
  float *c = rtc_test_host(n, 0, 1);
  rtc_bf16 *d_a = rtc_test_dev_bf16(a, n), *d_b = rtc_test_dev_bf16(b, n);
  rtc_bf16 *d_c = rtc_test_poison_bf16(n);
  rt_add_forward_f32(c, a, b, n);
  rt_add_forward_cu(d_c, d_a, d_b, n);
  rtc_test_check_bf16("add_forward", shape, "out", d_c, c, n);
  const double alphas[] = {1.0, -0.37};
  for (double al : alphas) {
    float *dst = rtc_test_copy(a, n);
    rtc_bf16 *d_dst = rtc_test_dev_bf16(a, n);
    rt_axpy_f32(dst, b, al, n);
    rt_axpy_cu(d_dst, d_b, al, n);
    rtc_test_check_bf16(al == 1.0 ? "axpy alpha=1" : "axpy alpha=-0.37", shape, "dst", d_dst,
                        dst, n);
    free(dst);
    rtc_test_dfree(d_dst);
  }
  float *x = rtc_test_copy(a, n);
  rtc_bf16 *d_x = rtc_test_dev_bf16(a, n);
  rt_scale_f32(x, n, 0.731);
  rt_scale_cu(d_x, n, 0.731);
  rtc_test_check_bf16("scale", shape, "x", d_x, x, n);
  float *acc = rtc_test_copy(a, n);
  rtc_bf16 *d_acc = rtc_test_dev_bf16(a, n);
  rt_acc_f32(acc, b, n);
  rt_acc_cu(d_acc, d_b, n);
  rtc_test_check_bf16("acc", shape, "dst", d_acc, acc, n);
  free(a), free(b), free(c), free(x), free(acc);
  rtc_test_dfree(d_a, d_b, d_c, d_x, d_acc);
}

static void test_slice_bf16(int N, int C, int c0, int W) {
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d c0=%d W=%d", N, C, c0, W);
  size_t nc = (size_t)N * C, nw = (size_t)N * W;
  float *x = rtc_test_host_bf16(nc, -1.0f, 1.0f), *y = rtc_test_host(nw, 0, 1);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, nc), *d_y = rtc_test_poison_bf16(nw);
  rt_slice_cols_forward_f32(y, x, N, C, c0, W);
  rt_slice_cols_forward_cu(d_y, d_x, N, C, c0, W);
  rtc_test_check_bf16("slice_cols_forward", shape, "out", d_y, y, nw);
  float *dy = rtc_test_host_bf16(nw, -1.0f, 1.0f);
  rtc_bf16 *d_dy = rtc_test_dev_bf16(dy, nw);
  rt_slice_cols_backward_f32(x, dy, N, C, c0, W);
  rt_slice_cols_backward_cu(d_x, d_dy, N, C, c0, W);
  rtc_test_check_bf16("slice_cols_backward", shape, "dinp", d_x, x, nc);
  free(x), free(y), free(dy);
  rtc_test_dfree(d_x, d_y, d_dy);
}

static void test_chunks_bf16(size_t outer, size_t inner, int P, int r) {
  char shape[64];
  snprintf(shape, sizeof shape, "%zux%zu P=%d r=%d", outer, inner, P, r);
  size_t nfull = outer * inner * P, nc = outer * inner;
  float *src = rtc_test_host_bf16(nfull, -1.0f, 1.0f), *dst = rtc_test_host(nc, 0, 1);
  rtc_bf16 *d_src = rtc_test_dev_bf16(src, nfull), *d_dst = rtc_test_poison_bf16(nc);
  rt_chunk_copy(dst, src, outer, inner, P, r, 4);
  rt_chunk_copy_cu(d_dst, d_src, outer, inner, P, r, 2);  // bf16 elements
  rtc_test_check_bf16("chunk_copy esize=2", shape, "dst", d_dst, dst, nc);
  float *x = rtc_test_host_bf16(nc, -1.0f, 1.0f), *full = rtc_test_copy(src, nfull);
  rtc_bf16 *d_x = rtc_test_dev_bf16(x, nc);
  rt_chunk_acc_f32(full, x, outer, inner, P, r);
  rt_chunk_acc_cu(d_src, d_x, outer, inner, P, r);
  rtc_test_check_bf16("chunk_acc", shape, "dst", d_src, full, nfull);
  free(src), free(dst), free(x), free(full);
  rtc_test_dfree(d_src, d_dst, d_x);
}

/* rt_cast_bf16_cu: rtc_f2bf's bits (to nearest, ties to even; NaN stays a
 * NaN) on random floats and the edge cases; rt_widen_bf16_cu: exact. */
static void test_cast(size_t n) {
  char shape[64];
  snprintf(shape, sizeof shape, "n=%zu", n);
  float *x = rtc_test_host(n, -100.0f, 100.0f);
  const uint32_t edges[] = {0x3f808000u,  // 1 + 2^-8: a tie, to 1 (even)
                            0x3f818000u,  // a tie, up to the even 0x3f82
                            0x3f808001u,  // just above a tie: up
                            0x7f7fffffu,  // FLT_MAX: to infinity
                            0x80000000u,  // -0
                            0x00000001u,  // the smallest subnormal
                            0x7f800000u,  // inf
                            0xff800000u,  // -inf
                            0x7fc00000u}; // NaN
  for (size_t k = 0; k < sizeof edges / sizeof *edges && k < n; k++)
    memcpy(&x[k], &edges[k], 4);
  float *d_x = rtc_test_dev(x, n);
  rtc_bf16 *d_b = rtc_test_poison_bf16(n);
  rt_cast_bf16_cu(d_b, d_x, n);
  rtc_bf16 *b = (rtc_bf16 *)malloc(n * sizeof(rtc_bf16));
  cudaCheck(cudaDeviceSynchronize());
  cudaCheck(cudaMemcpy(b, d_b, n * sizeof(rtc_bf16), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    rtc_bf16 want = rtc_f2bf(x[i]);
    float g = rtc_bf2f(b[i]), w = rtc_bf2f(want);
    bad += isnan(w) ? !isnan(g) : memcmp(&b[i], &want, sizeof want) != 0;
  }
  printf("%-26s %-22s %-8s %zu elements differ %s\n", "cast_bf16", shape, "bits", bad,
         bad ? "FAIL" : "PASS");
  if (bad) rtc_test_failures++;
  float *d_w = rtc_test_poison(n), *w = (float *)malloc(n * sizeof(float));
  rt_widen_bf16_cu(d_w, d_b, n);
  for (size_t i = 0; i < n; i++) w[i] = rtc_bf2f(b[i]);
  float *got = (float *)malloc(n * sizeof(float));
  cudaCheck(cudaDeviceSynchronize());
  cudaCheck(cudaMemcpy(got, d_w, n * sizeof(float), cudaMemcpyDeviceToHost));
  bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += isnan(w[i]) ? !isnan(got[i]) : memcmp(&got[i], &w[i], 4) != 0;
  printf("%-26s %-22s %-8s %zu elements differ %s\n", "widen_bf16", shape, "bits", bad,
         bad ? "FAIL" : "PASS");
  if (bad) rtc_test_failures++;
  free(x), free(b), free(w), free(got);
  rtc_test_dfree(d_x, d_b, d_w);
}

/* rt_cast_bf16_multi_cu against rt_cast_bf16_cu per segment: the masters
 * (random, the edge cases in the first) and the copies at scattered 64-byte
 * aligned offsets of an arena whose other bytes are poison, the copies in
 * another order than the masters; sizes around the kernel's chunk (4096)
 * and an empty one.  Both arenas must end byte for byte equal (nothing
 * written outside the copies), and each copy must be rtc_f2bf of its
 * master.  Each table is cast twice (the second launch reuses its device
 * copy) and two tables alternate, as a pipeline's chunks do. */
static void test_cast_multi(void) {
  const int64_t sizes[] = {4099, 1, 0, 4095, 4096, 70001, 16, 12345};
  enum { NS = sizeof sizes / sizeof *sizes };
  static RtcCastSeg segs[NS], rev[3];
  int64_t off = 192;
  for (int k = 0; k < NS; k++) {
    segs[k].src = off;
    segs[k].n = sizes[k];
    off += (sizes[k] * 4 + 63) / 64 * 64 + 64 * (k % 3);
  }
  for (int k = NS - 1; k >= 0; k--) {  // copies in reverse order
    segs[k].dst = off;
    off += (sizes[k] * 2 + 63) / 64 * 64 + 64 * (k % 2);
  }
  const size_t bytes = (size_t)off + 128;
  rev[0] = segs[5], rev[1] = segs[2], rev[2] = segs[0];
  unsigned char *h = (unsigned char *)malloc(bytes);
  memset(h, 0xff, bytes);
  for (int k = 0; k < NS; k++) {
    float *x = rtc_test_host((size_t)sizes[k], -100.0f, 100.0f);
    memcpy(h + segs[k].src, x, (size_t)sizes[k] * 4);
    free(x);
  }
  const uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu, 0x80000000u,
                            0x00000001u, 0x7f800000u, 0xff800000u, 0x7fc00000u};
  memcpy(h + segs[0].src, edges, sizeof edges);
  unsigned char *d_a = rtc_test_dev(h, bytes), *d_b = rtc_test_dev(h, bytes);
  for (int r = 0; r < 2; r++) {
    rt_cast_bf16_multi_cu(d_a, segs, NS);
    rt_cast_bf16_multi_cu(d_a, rev, 3);
    rt_cast_bf16_multi_cu(d_a, rev, 0);
  }
  for (int k = 0; k < NS; k++)
    rt_cast_bf16_cu((rtc_bf16 *)(d_b + segs[k].dst), (const float *)(d_b + segs[k].src),
                    (size_t)segs[k].n);
  unsigned char *a = (unsigned char *)malloc(bytes), *b = (unsigned char *)malloc(bytes);
  cudaCheck(cudaDeviceSynchronize());
  cudaCheck(cudaMemcpy(a, d_a, bytes, cudaMemcpyDeviceToHost));
  cudaCheck(cudaMemcpy(b, d_b, bytes, cudaMemcpyDeviceToHost));
  size_t bad = 0, wrong = 0;
  for (size_t i = 0; i < bytes; i++) bad += a[i] != b[i];
  for (int k = 0; k < NS; k++)
    for (int64_t i = 0; i < sizes[k]; i++) {
      float x;
      rtc_bf16 got;
      memcpy(&x, h + segs[k].src + 4 * i, 4);
      rtc_bf16 want = rtc_f2bf(x);
      memcpy(&got, a + segs[k].dst + 2 * i, 2);
      wrong += memcmp(&got, &want, 2) != 0;
    }
  char shape[64];
  snprintf(shape, sizeof shape, "%d segments", (int)NS);
  printf("%-26s %-22s %-8s %zu bytes differ, %zu copies not rtc_f2bf %s\n", "cast_bf16_multi", shape,
         "bits", bad, wrong, bad || wrong ? "FAIL" : "PASS");
  if (bad || wrong) rtc_test_failures++;
  free(h), free(a), free(b);
  rtc_test_dfree(d_a, d_b);
}

int main(void) {
  const size_t sizes[] = {1, 1000, 70001};
  for (size_t n : sizes) {
    test_unary("gelu_forward", rt_gelu_forward_f32, rt_gelu_forward_cu, "gelu_backward",
               rt_gelu_backward_f32, rt_gelu_backward_cu, n);
    test_unary("relu_forward", rt_relu_forward_f32, rt_relu_forward_cu, "relu_backward",
               rt_relu_backward_f32, rt_relu_backward_cu, n);
    test_unary("silu_forward", rt_silu_forward_f32, rt_silu_forward_cu, "silu_backward",
               rt_silu_backward_f32, rt_silu_backward_cu, n);
    test_elementwise(n);
  }
  test_swiglu(1, 1, 1);
  test_swiglu(37, 53, 106);
  test_swiglu(300, 200, 200);
  const int sm[][2] = {{1, 1}, {1, 1000}, {9, 31}, {300, 257}};
  for (const auto &s : sm) test_softmax(s[0], s[1]);
  const double ps[] = {0.0, 0.1, 0.5, 1.0};
  for (double p : ps) {
    test_dropout(1, p, 42, 3, 0);
    test_dropout(5001, p, 0x1234567890abcdefull, 17, 999);
  }
  test_slice(1, 5, 2, 3);
  test_slice(77, 96, 32, 33);
  test_slice(77, 96, 32, 32);   /* 16-byte vectors (k_act.cu's _vec kernels) */
  test_slice(70000, 16, 8, 8);  /* more rows than the vector grid's 65535 */
  test_chunks(1, 1, 1, 0);
  test_chunks(7, 10, 3, 2);
  test_chunks(33, 64, 4, 1);

  for (size_t n : sizes) {
    test_unary_bf16("gelu_forward", rt_gelu_forward_f32, rt_gelu_forward_cu, "gelu_backward",
                    rt_gelu_backward_f32, rt_gelu_backward_cu, n);
    test_unary_bf16("relu_forward", rt_relu_forward_f32, rt_relu_forward_cu, "relu_backward",
                    rt_relu_backward_f32, rt_relu_backward_cu, n);
    test_unary_bf16("silu_forward", rt_silu_forward_f32, rt_silu_forward_cu, "silu_backward",
                    rt_silu_backward_f32, rt_silu_backward_cu, n);
    test_elementwise_bf16(n);
    test_cast(n);
  }
  test_cast_multi();
  test_swiglu_bf16(1, 1, 1);
  test_swiglu_bf16(37, 53, 106);
  test_swiglu_bf16(300, 200, 200);
  for (const auto &s : sm) test_softmax_bf16(s[0], s[1]);
  for (double p : ps) {
    test_dropout_bf16(1, p, 42, 3, 0);
    test_dropout_bf16(5001, p, 0x1234567890abcdefull, 17, 999);
  }
  test_slice_bf16(1, 5, 2, 3);
  test_slice_bf16(77, 96, 32, 33);
  test_slice_bf16(77, 96, 32, 32);
  test_slice_bf16(70000, 16, 8, 8);
  test_chunks_bf16(1, 1, 1, 0);
  test_chunks_bf16(7, 10, 3, 2);
  test_chunks_bf16(33, 64, 4, 1);
  return rtc_test_done();
}
