/* test_k_matmul.cu — rt_matmul_forward/backward_cu and rt_gemm_cu against
 * the cpu kernels (rt_*_f32), on the host build (cblas twin, the dbias
 * kernel through the shim) and, compiled by nvcc, on a GPU (cuBLASLt).
 *
 * Written outputs start poisoned (NaN), accumulated ones (+=, beta != 0)
 * from the same random values on both sides.  The error of an element is
 *   |got - ref| / max(mag, 1e-6·max mag),
 * mag being the sum of the absolute values of its terms (the cpu kernel run
 * on |inputs|): a GEMM's rounding is bounded by a multiple of it whatever
 * the summation order.  PASS below 1e-5.  One line per kernel and shape;
 * exit 1 on any failure.
 *
 * bf16 storage (rtc.h's bf16 overloads): inputs rounded to bf16, compared
 * with the cpu kernel run on the rounded inputs (bias, dweight, dbias stay
 * fp32) by bf16_cmp.h's metric, the largest per-element relative error
 * floored at the tensor's rms: below 1e-2 for bf16 results (out, dinp, c),
 * 1e-4 for fp32 ones (dweight, dbias, an fp32 c: exact products, only the
 * summation order differs).  Written bf16 outputs start poisoned,
 * accumulated ones from random (nonzero) values.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_cmp.h"

#define TOL 1e-5

static int failures;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float urand(void) { // in [-1, 1)
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *host_rand(size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++)
    h[i] = urand();
  return h;
}

static float *host_abs(const float *h, size_t n) {
  float *a = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++)
    a[i] = fabsf(h[i]);
  return a;
}

static float *host_nan(size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++)
    h[i] = NAN;
  return h;
}

// every device buffer of the test, freed at the end (dev_free_all)
static float *allocs_[4096];
static int nallocs_;

// a device copy of h (n floats); extra floats of room before it (misalignment)
static float *dev_copy(const float *h, size_t n, size_t before = 0) {
  float *d;
  cudaCheck(cudaMalloc(&d, (n + before + 1) * sizeof(float)));
  if (nallocs_ == (int)(sizeof allocs_ / sizeof *allocs_)) {
    fprintf(stderr, "test_k_matmul: more than %d device buffers\n", nallocs_);
    exit(1);
  }
  allocs_[nallocs_++] = d;
  if (n)
    cudaCheck(cudaMemcpy(d + before, h, n * sizeof(float), cudaMemcpyHostToDevice));
  return d + before;
}

static float *to_host(const float *d, size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  cudaCheck(cudaDeviceSynchronize());
  if (n)
    cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

// the error defined at the top; NaN counts as failure; mag NULL: |ref|
static double max_err(const float *got, const float *ref, const float *mag, size_t n) {
  double mmax = 0, e = 0;
  for (size_t i = 0; i < n; i++)
    mmax = fmax(mmax, fabs(mag ? mag[i] : ref[i]));
  double floor_ = mmax > 0 ? 1e-6 * mmax : 1e-30;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (d != d || (got[i] != got[i]) != (ref[i] != ref[i]))
      return INFINITY;
    double m = fmax(fabs(mag ? mag[i] : ref[i]), floor_);
    e = fmax(e, d / m);
  }
  return e;
}

static void check(const char *what, int ok) {
  printf("%-56s %s\n", what, ok ? "PASS" : "FAIL");
  if (!ok)
    failures++;
}

static void report(const char *what, double err) {
  int ok = err < TOL;
  printf("%-56s max err %.3e  %s\n", what, err, ok ? "PASS" : "FAIL");
  if (!ok)
    failures++;
}

/* ---- rt_matmul_forward ---- */
static void test_forward(int N, int C, int OC, int bias_mode) { // 0 none, 1 aligned, 2 misaligned
  float *inp = host_rand((size_t)N * C), *w = host_rand((size_t)OC * C), *b = host_rand(OC);
  float *ref = host_nan((size_t)N * OC), *mag = host_nan((size_t)N * OC);
  const float *bias = bias_mode ? b : NULL;
  rt_matmul_forward_f32(ref, inp, w, bias, N, C, OC);
  float *ia = host_abs(inp, (size_t)N * C), *wa = host_abs(w, (size_t)OC * C), *ba = host_abs(b, OC);
  rt_matmul_forward_f32(mag, ia, wa, bias ? ba : NULL, N, C, OC);

  float *d_inp = dev_copy(inp, (size_t)N * C), *d_w = dev_copy(w, (size_t)OC * C);
  float *d_b = dev_copy(b, OC, bias_mode == 2 ? 1 : 0);
  float *nan_out = host_nan((size_t)N * OC), *d_out = dev_copy(nan_out, (size_t)N * OC);
  rt_matmul_forward_cu(d_out, d_inp, d_w, bias_mode ? d_b : NULL, N, C, OC);
  float *got = to_host(d_out, (size_t)N * OC);
  char what[128];
  snprintf(what, sizeof what, "matmul_forward N=%d C=%d OC=%d bias=%s", N, C, OC,
           bias_mode == 0 ? "none" : bias_mode == 1 ? "aligned" : "misaligned");
  report(what, max_err(got, ref, mag, (size_t)N * OC));
  // a second run gives the same bits (one algorithm per shape)
  float *d_out2 = dev_copy(nan_out, (size_t)N * OC);
  rt_matmul_forward_cu(d_out2, d_inp, d_w, bias_mode ? d_b : NULL, N, C, OC);
  float *got2 = to_host(d_out2, (size_t)N * OC);
  snprintf(what, sizeof what, "matmul_forward N=%d C=%d OC=%d again: same bits", N, C, OC);
  check(what, !memcmp(got, got2, (size_t)N * OC * sizeof(float)));
  free(got2);
  free(inp), free(w), free(b), free(ref), free(mag), free(ia), free(wa), free(ba), free(nan_out),
      free(got);
}

/* ---- rt_matmul_backward: all three gradients, then each alone ---- */
static void test_backward(int N, int C, int OC, int which) { // bit 0 dinp, 1 dweight, 2 dbias
  size_t nin = (size_t)N * C, nw = (size_t)OC * C;
  float *inp = host_rand(nin), *w = host_rand(nw), *dout = host_rand((size_t)N * OC);
  float *dinp0 = host_rand(nin), *dw0 = host_rand(nw), *db0 = host_rand(OC);
  float *dinp = (float *)malloc(nin * 4 + 4), *dw = (float *)malloc(nw * 4 + 4),
        *db = (float *)malloc((size_t)OC * 4);
  memcpy(dinp, dinp0, nin * 4), memcpy(dw, dw0, nw * 4), memcpy(db, db0, (size_t)OC * 4);
  rt_matmul_backward_f32(which & 1 ? dinp : NULL, which & 2 ? dw : NULL, which & 4 ? db : NULL,
                         dout, inp, w, N, C, OC);
  // magnitudes: the same accumulation on absolute values
  float *ma = host_abs(dinp0, nin), *mw = host_abs(dw0, nw), *mb = host_abs(db0, OC);
  float *ia = host_abs(inp, nin), *wa = host_abs(w, nw), *oa = host_abs(dout, (size_t)N * OC);
  rt_matmul_backward_f32(ma, mw, mb, oa, ia, wa, N, C, OC);

  float *d_inp = dev_copy(inp, nin), *d_w = dev_copy(w, nw), *d_dout = dev_copy(dout, (size_t)N * OC);
  float *d_dinp = dev_copy(dinp0, nin), *d_dw = dev_copy(dw0, nw), *d_db = dev_copy(db0, OC);
  rt_matmul_backward_cu(which & 1 ? d_dinp : NULL, which & 2 ? d_dw : NULL,
                        which & 4 ? d_db : NULL, d_dout, d_inp, d_w, N, C, OC);
  float *g_dinp = to_host(d_dinp, nin), *g_dw = to_host(d_dw, nw), *g_db = to_host(d_db, OC);
  char what[128];
  const char *names[3] = {"dinp", "dweight", "dbias"};
  float *gots[3] = {g_dinp, g_dw, g_db}, *refs[3] = {dinp, dw, db}, *mags[3] = {ma, mw, mb};
  float *olds[3] = {dinp0, dw0, db0};
  size_t ns[3] = {nin, nw, (size_t)OC};
  for (int k = 0; k < 3; k++) {
    snprintf(what, sizeof what, "matmul_backward %-7s N=%d C=%d OC=%d (set %d)", names[k], N, C,
             OC, which);
    if (which & (1 << k)) {
      report(what, max_err(gots[k], refs[k], mags[k], ns[k]));
    } else { // a NULL gradient: the buffer is left alone
      int same = ns[k] == 0 || !memcmp(gots[k], olds[k], ns[k] * 4);
      report(what, same ? 0 : INFINITY);
    }
  }
  if (which == 7) { // a second run from the same accumulators gives the same bits
    float *e_dinp = dev_copy(dinp0, nin), *e_dw = dev_copy(dw0, nw), *e_db = dev_copy(db0, OC);
    rt_matmul_backward_cu(e_dinp, e_dw, e_db, d_dout, d_inp, d_w, N, C, OC);
    float *h_dinp = to_host(e_dinp, nin), *h_dw = to_host(e_dw, nw), *h_db = to_host(e_db, OC);
    snprintf(what, sizeof what, "matmul_backward N=%d C=%d OC=%d again: same bits", N, C, OC);
    check(what, !memcmp(h_dinp, g_dinp, nin * 4) && !memcmp(h_dw, g_dw, nw * 4) &&
                    !memcmp(h_db, g_db, (size_t)OC * 4));
    free(h_dinp), free(h_dw), free(h_db);
  }
  free(inp), free(w), free(dout), free(dinp0), free(dw0), free(db0), free(dinp), free(dw),
      free(db), free(ma), free(mw), free(mb), free(ia), free(wa), free(oa), free(g_dinp),
      free(g_dw), free(g_db);
}

/* ---- rt_gemm: c (M,N, ldc) = alpha·op(a)·op(b) + beta·c ---- */
static void test_gemm(int ta, int tb, int M, int N, int K, double alpha, double beta, int pad) {
  int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
  float *a = host_rand(na), *b = host_rand(nb);
  float *c0 = beta == 0 ? host_nan(nc) : host_rand(nc);
  float *ref = (float *)malloc(nc * 4 + 4), *mag = host_abs(c0, nc);
  memcpy(ref, c0, nc * 4);
  rt_gemm_f32(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, ref, ldc);
  float *aa = host_abs(a, na), *ba = host_abs(b, nb);
  if (beta == 0)
    for (size_t i = 0; i < nc; i++)
      mag[i] = 0;
  rt_gemm_f32(ta, tb, M, N, K, fabs(alpha), aa, lda, ba, ldb, fabs(beta) > 0 ? fabs(beta) : 0,
              mag, ldc);
  float *d_a = dev_copy(a, na), *d_b = dev_copy(b, nb), *d_c = dev_copy(c0, nc);
  rt_gemm_cu(ta, tb, M, N, K, alpha, d_a, lda, d_b, ldb, beta, d_c, ldc);
  float *got = to_host(d_c, nc);
  // only the (M,N) block is defined; the padding columns must be untouched
  double err = 0;
  for (int i = 0; i < M; i++) {
    err = fmax(err, max_err(got + (size_t)i * ldc, ref + (size_t)i * ldc,
                            mag + (size_t)i * ldc, (size_t)N));
    for (int j = N; j < ldc; j++) {
      float g = got[(size_t)i * ldc + j], o = c0[(size_t)i * ldc + j];
      if (memcmp(&g, &o, 4))
        err = INFINITY;
    }
  }
  char what[128];
  snprintf(what, sizeof what, "gemm ta=%d tb=%d M=%d N=%d K=%d a=%g b=%g pad=%d", ta, tb, M, N, K,
           alpha, beta, pad);
  report(what, err);
  free(a), free(b), free(c0), free(ref), free(mag), free(aa), free(ba), free(got);
}

/* ---- bf16 storage: rt_matmul_forward / backward ---- */
static void test_bf16_matmul(int N, int C, int OC, int which) { // which: backward's set, as above
  size_t nin = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  char shape[96];
  float *inp = bf16_host(nin, -1, 1), *w = bf16_host(nw, -1, 1), *b = rtc_test_host(OC, -1, 1);
  rtc_bf16 *d_inp = bf16_dev(inp, nin), *d_w = bf16_dev(w, nw);
  float *d_b = rtc_test_dev(b, (size_t)OC);
  if (which == 7)
    for (int withb = 0; withb < 2; withb++) {
      float *ref = host_nan(no);
      rt_matmul_forward_f32(ref, inp, w, withb ? b : NULL, N, C, OC);
      rtc_bf16 *d_out = bf16_poison(no);
      rt_matmul_forward_cu(d_out, d_inp, d_w, withb ? d_b : NULL, N, C, OC);
      snprintf(shape, sizeof shape, "N=%d C=%d OC=%d%s", N, C, OC, withb ? " +bias" : "");
      bf16_check("bf16 matmul_forward", shape, "out", d_out, ref, no);
      free(ref);
      rtc_test_dfree(d_out);
    }
  float *dout = bf16_host(no, -1, 1);
  float *dinp = bf16_host(nin, -1, 1), *dw = rtc_test_host(nw, -1, 1), *db = rtc_test_host(OC, -1, 1);
  rtc_bf16 *d_dout = bf16_dev(dout, no), *d_dinp = bf16_dev(dinp, nin);
  float *d_dw = rtc_test_dev(dw, nw), *d_db = rtc_test_dev(db, (size_t)OC);
  float *dinp0 = rtc_test_copy(dinp, nin), *dw0 = rtc_test_copy(dw, nw), *db0 = rtc_test_copy(db, OC);
  rt_matmul_backward_f32(which & 1 ? dinp : NULL, which & 2 ? dw : NULL, which & 4 ? db : NULL,
                         dout, inp, w, N, C, OC);
  rt_matmul_backward_cu(which & 1 ? d_dinp : NULL, which & 2 ? d_dw : NULL,
                        which & 4 ? d_db : NULL, d_dout, d_inp, d_w, N, C, OC);
  snprintf(shape, sizeof shape, "N=%d C=%d OC=%d (set %d)", N, C, OC, which);
  // a gradient not wanted: the cpu's is its start, the device's must equal it
  bf16_check("bf16 matmul_backward", shape, "dinp", d_dinp, dinp, nin, which & 1 ? BF16_TOL : 1e-30);
  f32_check("bf16 matmul_backward", shape, "dw", d_dw, dw, nw, which & 2 ? 1e-4 : 1e-30);
  f32_check("bf16 matmul_backward", shape, "dbias", d_db, db, (size_t)OC, which & 4 ? 1e-4 : 1e-30);
  free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(dinp0), free(dw0),
      free(db0);
  rtc_test_dfree(d_inp, d_w, d_b, d_dout, d_dinp, d_dw, d_db);
}

/* ---- bf16: a linear with a GELU after it as one call (cuBLASLt's
 * GELU_AUX_BIAS epilogue: act and its pre-activation) and the backward of
 * the linear after a GELU with the GELU's (DGELU: dpre written, poisoned first),
 * against the cpu's matmul and gelu kernels.  The epilogue takes gelu of the
 * fp32 pre-activation, the cpu kernel of the rounded one: both within the
 * bf16 limit. ---- */
static void test_bf16_gelu(int N, int C, int OC, int withb) {
  size_t nin = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  char shape[96];
  snprintf(shape, sizeof shape, "N=%d C=%d OC=%d%s", N, C, OC, withb ? " +bias" : "");
  float *inp = bf16_host(nin, -1, 1), *w = bf16_host(nw, -1, 1), *b = rtc_test_host(OC, -1, 1);
  rtc_bf16 *d_inp = bf16_dev(inp, nin), *d_w = bf16_dev(w, nw);
  float *d_b = rtc_test_dev(b, (size_t)OC);
  float *pre = host_nan(no), *act = host_nan(no);
  rt_matmul_forward_f32(pre, inp, w, withb ? b : NULL, N, C, OC);
  rt_gelu_forward_f32(act, pre, no);
  rtc_bf16 *d_pre = bf16_poison(no), *d_act = bf16_poison(no);
  rt_matmul_forward_gelu_cu(d_act, d_pre, d_inp, d_w, withb ? d_b : NULL, N, C, OC);
  bf16_check("bf16 matmul+gelu forward", shape, "pre", d_pre, pre, no);
  bf16_check("bf16 matmul+gelu forward", shape, "act", d_act, act, no);
  /* the backward of a linear (OC -> C here: dout (N,OC), weight (OC,C)) whose
   * input is gelu(pre), pre (N,C) */
  float *dout = bf16_host(no, -1, 1), *xpre = bf16_host(nin, -2, 2);
  float *dw = rtc_test_host(nw, -1, 1), *db = rtc_test_host(OC, -1, 1);
  float *xa = host_nan(nin), *da = (float *)calloc(nin, sizeof(float)),
        *dpre = (float *)calloc(nin, sizeof(float));
  rt_gelu_forward_f32(xa, xpre, nin);
  bf16_round_host(xa, nin); // the activation as the forward stored it
  rtc_bf16 *d_dout = bf16_dev(dout, no), *d_xpre = bf16_dev(xpre, nin), *d_xa = bf16_dev(xa, nin);
  rtc_bf16 *d_dpre = bf16_poison(nin), *d_da = bf16_dev(da, nin); // dpre: written, not read
  float *d_dw = rtc_test_dev(dw, nw), *d_db = rtc_test_dev(db, (size_t)OC);
  rt_matmul_backward_f32(da, dw, withb ? db : NULL, dout, xa, w, N, C, OC);
  rt_gelu_backward_f32(dpre, xpre, da, nin);
  rt_matmul_backward_dgelu_cu(d_dpre, d_da, d_dw, withb ? d_db : NULL, d_dout, d_xa, d_w, d_xpre,
                              N, C, OC);
  bf16_check("bf16 matmul+dgelu backward", shape, "dpre", d_dpre, dpre, nin);
  f32_check("bf16 matmul+dgelu backward", shape, "dw", d_dw, dw, nw, 1e-4);
  f32_check("bf16 matmul+dgelu backward", shape, "dbias", d_db, db, (size_t)OC, withb ? 1e-4 : 1e-30);
  free(inp), free(w), free(b), free(pre), free(act), free(dout), free(xpre), free(dw), free(db),
      free(xa), free(da), free(dpre);
  rtc_test_dfree(d_inp, d_w, d_b, d_pre, d_act, d_dout, d_xpre, d_xa, d_dpre, d_da, d_dw, d_db);
}

/* ---- bf16: an LM head whose weight copy has rows padded from V to Vp
 * (passes/precision.c): rt_matmul_backward_rows_cu against the cpu backward
 * of the unpadded head.  The copy's pad rows are zero (the step's cast
 * writes them so), so dinp does not see dout's pad columns, which are
 * random here (the cross-entropy writes zeros) so that a dweight over Vp
 * rows would change the guard row after its V rows. ---- */
static void test_bf16_head(int N, int C, int V, int Vp) {
  size_t nin = (size_t)N * C, nw = (size_t)V * C;
  float *inp = bf16_host(nin, -1, 1), *w = bf16_host(nw, -1, 1), *dout = bf16_host((size_t)N * V, -1, 1);
  float *wp = (float *)calloc((size_t)Vp * C, sizeof(float));
  float *doutp = bf16_host((size_t)N * Vp, -1, 1);
  memcpy(wp, w, nw * sizeof(float));
  for (int n = 0; n < N; n++) memcpy(doutp + (size_t)n * Vp, dout + (size_t)n * V, (size_t)V * 4);
  float *dinp = bf16_host(nin, -1, 1), *dw = rtc_test_host(nw + C, -1, 1);
  for (int c = 0; c < C; c++) dw[nw + c] = 7.0f;
  rtc_bf16 *d_inp = bf16_dev(inp, nin), *d_w = bf16_dev(wp, (size_t)Vp * C),
           *d_dout = bf16_dev(doutp, (size_t)N * Vp), *d_dinp = bf16_dev(dinp, nin);
  float *d_dw = rtc_test_dev(dw, nw + C);
  rt_matmul_backward_f32(dinp, dw, NULL, dout, inp, w, N, C, V);
  rt_matmul_backward_rows_cu(d_dinp, d_dw, d_dout, d_inp, d_w, N, C, Vp, V);
  char shape[96];
  snprintf(shape, sizeof shape, "N=%d C=%d V=%d rows %d", N, C, V, Vp);
  bf16_check("bf16 head backward", shape, "dinp", d_dinp, dinp, nin);
  f32_check("bf16 head backward", shape, "dw", d_dw, dw, nw, 1e-4);
  float *guard = f32_download(d_dw + nw, (size_t)C);
  int kept = 1;
  for (int c = 0; c < C; c++) kept &= guard[c] == 7.0f;
  printf("%-26s %-30s %-6s %s\n", "bf16 head backward", shape, "guard",
         kept ? "rows past V untouched PASS" : "written FAIL");
  if (!kept) rtc_test_failures++;
  free(inp), free(w), free(dout), free(wp), free(doutp), free(dinp), free(dw), free(guard);
  rtc_test_dfree(d_inp, d_w, d_dout, d_dinp, d_dw);
}

/* ---- bf16 storage: rt_gemm with c bf16 (T = rtc_bf16) or fp32 ---- */
template <class T>
static void test_bf16_gemm(int ta, int tb, int M, int N, int K, double alpha, double beta,
                           int pad) {
  const int c16 = sizeof(T) == sizeof(rtc_bf16);
  int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
  float *a = bf16_host(na, -1, 1), *b = bf16_host(nb, -1, 1), *c0 = rtc_test_host(nc, -1, 1);
  if (c16) bf16_round_host(c0, nc);
  if (beta == 0) // poisoned: c is written, not read (cpu and device alike)
    for (size_t i = 0; i < nc; i++) c0[i] = NAN;
  float *ref = rtc_test_copy(c0, nc);
  rt_gemm_f32(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, ref, ldc);
  rtc_bf16 *d_a = bf16_dev(a, na), *d_b = bf16_dev(b, nb);
  T *d_c;
  if constexpr (sizeof(T) == sizeof(rtc_bf16)) d_c = bf16_dev(c0, nc);
  else d_c = rtc_test_dev(c0, nc);
  rt_gemm_cu(ta, tb, M, N, K, alpha, d_a, lda, d_b, ldb, beta, d_c, ldc);
  float *got;
  if constexpr (sizeof(T) == sizeof(rtc_bf16)) got = bf16_download(d_c, nc);
  else got = f32_download(d_c, nc);
  // the (M,N) block against the cpu's; the padding columns untouched (NaN stays NaN)
  float *gb = (float *)malloc((size_t)M * N * 4 + 4), *rb = (float *)malloc((size_t)M * N * 4 + 4);
  int pad_ok = 1;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < ldc; j++) {
      float g = got[(size_t)i * ldc + j], r = ref[(size_t)i * ldc + j];
      if (j < N) gb[(size_t)i * N + j] = g, rb[(size_t)i * N + j] = r;
      else if (!(g == c0[(size_t)i * ldc + j] || (isnan(g) && isnan(c0[(size_t)i * ldc + j]))))
        pad_ok = 0;
    }
  char shape[96];
  snprintf(shape, sizeof shape, "ta=%d tb=%d %dx%dx%d a=%g b=%g pad=%d", ta, tb, M, N, K, alpha,
           beta, pad);
  bf16_cmp_host(c16 ? "bf16 gemm, c bf16" : "bf16 gemm, c fp32", shape, "c", gb, rb,
                (size_t)M * N, c16 ? BF16_TOL : 1e-4);
  if (!pad_ok) {
    printf("    the padding columns of c were written: FAIL\n");
    rtc_test_failures++;
  }
  free(a), free(b), free(c0), free(ref), free(got), free(gb), free(rb);
  rtc_test_dfree(d_a, d_b, d_c);
}

static void test_bf16(void) {
  bf16_selftest();
  /* The bias by cuBLASLt's epilogue (a bf16 copy of it) up to
   * RTC_MM_BIAS_BYTES / 2 features; past that the kernels' way: {2, 3,
   * 131080} on 16-byte vectors (OC % 8 == 0; the grid's row loop past
   * 65535 rows is test_k_act's slice test), {3, 2, 131073} element-wise */
  static const int shapes[][3] = {{1, 1, 1},    {37, 19, 23},    {129, 257, 65},
                                  {1000, 48, 40}, {2049, 3, 130}, {2, 3, 131080},
                                  {3, 2, 131073}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    test_bf16_matmul(shapes[s][0], shapes[s][1], shapes[s][2], 7);
  for (int which = 1; which < 7; which++) test_bf16_matmul(77, 31, 45, which);
  { // C = 0: rows of the bias, rounded
    float b[9], ref[5 * 9];
    for (int o = 0; o < 9; o++) b[o] = rtc_test_rand(-1, 1);
    rt_matmul_forward_f32(ref, NULL, NULL, b, 5, 0, 9);
    float *d_b = rtc_test_dev(b, 9);
    rtc_bf16 *d_out = bf16_poison(45);
    rt_matmul_forward_cu(d_out, (const rtc_bf16 *)NULL, (const rtc_bf16 *)NULL, d_b, 5, 0, 9);
    bf16_check("bf16 matmul_forward", "N=5 C=0 OC=9 +bias", "out", d_out, ref, 45);
    rtc_test_dfree(d_b, d_out);
  }
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      test_bf16_gemm<rtc_bf16>(ta, tb, 33, 17, 29, 1.0, 0.0, 0);
      test_bf16_gemm<rtc_bf16>(ta, tb, 70, 130, 257, 0.5, 1.5, 3);
      test_bf16_gemm<float>(ta, tb, 33, 17, 29, 1.0, 0.0, 2);
      test_bf16_gemm<float>(ta, tb, 70, 130, 257, -1.0, 1.0, 5);
    }
  test_bf16_gemm<rtc_bf16>(0, 0, 6, 5, 0, 1.0, 2.0, 2); // K = 0: c = 2c
  test_bf16_gelu(37, 24, 64, 1);    // the GPT MLP's fc + GELU and proj's backward
  test_bf16_gelu(130, 64, 40, 0);
  test_bf16_gelu(33, 20, 13, 1);    // OC, C not multiples of 8: the kernels' way
  test_bf16_head(37, 24, 61, 64);   // the tiny cases of precision.c's padding
  test_bf16_head(130, 64, 260, 320);
}

int main(void) {
  static const int shapes[][3] = {{1, 1, 1},   {1, 7, 5},     {37, 19, 23},  {64, 64, 64},
                                  {129, 257, 65}, {300, 33, 97}, {1000, 48, 40}, {2049, 3, 130}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
    for (int bm = 0; bm < 3; bm++)
      test_forward(N, C, OC, bm);
    test_backward(N, C, OC, 7);
  }
  test_forward(5, 0, 9, 1); // C = 0: rows of bias
  test_forward(5, 0, 9, 0); // C = 0: zeros
  for (int which = 1; which < 7; which++)
    test_backward(77, 31, 45, which);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      test_gemm(ta, tb, 33, 17, 29, 1.0, 0.0, 0);
      test_gemm(ta, tb, 33, 17, 29, 0.5, 1.5, 3);
      test_gemm(ta, tb, 1, 1, 1, 2.0, -1.0, 0);
      test_gemm(ta, tb, 70, 130, 257, -1.0, 1.0, 5);
    }
  test_gemm(0, 0, 6, 5, 0, 1.0, 0.0, 2); // K = 0: c = 0 (from NaN)
  test_gemm(0, 0, 6, 5, 0, 1.0, 2.0, 2); // K = 0: c = 2c
  for (int i = 0; i < nallocs_; i++)
    cudaCheck(cudaFree(allocs_[i]));
  test_bf16();
  failures += rtc_test_failures;
  if (failures) {
    printf("%d FAILED\n", failures);
    return 1;
  }
  printf("all passed\n");
  return 0;
}
