/* test_k_optim.cu — rt_adamw_step_cu, rt_sgd_step_cu, rt_sumsq_cu,
 * rt_sumsq_list_cu and rt_adamw_multi_cu (rtc_optim.h) against the cpu
 * kernels (rt_*_f32), on the host build and, compiled by nvcc, on a GPU.
 *
 * The steps update param, m, v (mom) in place from the same random values on
 * both sides, over several steps (t = 1, 2, 3) with decay, gradient scaling
 * and momentum on and off.  Error of an element: |got - ref| / max(|ref|,
 * 1e-6·max |ref|), PASS below 1e-6 (the device code spells every float
 * operation unfused, so it should agree to the bit; the max error and the
 * count of differing elements are printed).  The sums of squares (double)
 * relative to the cpu's, PASS below 1e-12.  The multi-tensor AdamW must
 * equal rt_adamw_step_cu on each tensor to the bit, and the cpu within 1e-6.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "rtc_optim.h"

extern "C" {
#include "shardrt.h"
}

#define TOL 1e-6
#define TOL_SUMSQ 1e-12

static int failures;
static uint64_t rng_state = 0x853c49e6748fea9bull;

static float urand(void) { // in [-1, 1)
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *host_rand(size_t n, float scale, int positive) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++)
    h[i] = positive ? scale * fabsf(urand()) : scale * urand();
  return h;
}

static float *host_dup(const float *h, size_t n) {
  float *d = (float *)malloc((n ? n : 1) * sizeof(float));
  memcpy(d, h, n * sizeof(float));
  return d;
}

static float *dev_copy(const float *h, size_t n) {
  float *d;
  cudaCheck(cudaMalloc(&d, (n ? n : 1) * sizeof(float)));
  if (n)
    cudaCheck(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

static void to_host(float *h, const float *d, size_t n) {
  cudaCheck(cudaDeviceSynchronize());
  if (n)
    cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
}

// max relative error (floor 1e-6·max|ref|); *ndiff counts elements not bitwise equal
static double max_err(const float *got, const float *ref, size_t n, size_t *ndiff) {
  double mmax = 0, e = 0;
  for (size_t i = 0; i < n; i++)
    mmax = fmax(mmax, fabs(ref[i]));
  double floor_ = mmax > 0 ? 1e-6 * mmax : 1e-30;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (d != d)
      return INFINITY;
    e = fmax(e, d / fmax(fabs(ref[i]), floor_));
    if (memcmp(&got[i], &ref[i], sizeof(float)))
      ++*ndiff;
  }
  return e;
}

static void report(const char *what, double err, double tol, size_t ndiff) {
  int ok = err < tol;
  printf("%-62s max err %.3e (%zu differ)  %s\n", what, err, ndiff, ok ? "PASS" : "FAIL");
  if (!ok)
    failures++;
}

static void check(const char *what, int ok) {
  printf("%-62s %s\n", what, ok ? "PASS" : "FAIL");
  if (!ok)
    failures++;
}

/* ---- AdamW: three steps on one tensor ---- */
static void test_adamw(size_t n, double wd, double grad_scale) {
  float *p = host_rand(n, 1.0f, 0), *m = host_rand(n, 0.1f, 0), *v = host_rand(n, 0.01f, 1);
  float *d_p = dev_copy(p, n), *d_m = dev_copy(m, n), *d_v = dev_copy(v, n);
  float *gp = host_dup(p, n), *gm = host_dup(m, n), *gv = host_dup(v, n);
  for (long t = 1; t <= 3; t++) {
    float *g = host_rand(n, 2.0f, 0);
    float *d_g = dev_copy(g, n);
    rt_adamw_step_f32(p, g, m, v, n, 1e-3 * t, 0.9, 0.95, 1e-8, wd, t, grad_scale);
    rt_adamw_step_cu(d_p, d_g, d_m, d_v, n, 1e-3 * t, 0.9, 0.95, 1e-8, wd, t, grad_scale);
    cudaCheck(cudaFree(d_g));
    free(g);
  }
  to_host(gp, d_p, n), to_host(gm, d_m, n), to_host(gv, d_v, n);
  size_t nd = 0;
  double e = fmax(max_err(gp, p, n, &nd), fmax(max_err(gm, m, n, &nd), max_err(gv, v, n, &nd)));
  char what[160];
  snprintf(what, sizeof what, "adamw n=%zu wd=%g grad_scale=%g (3 steps)", n, wd, grad_scale);
  report(what, e, TOL, nd);
  cudaCheck(cudaFree(d_p));
  cudaCheck(cudaFree(d_m));
  cudaCheck(cudaFree(d_v));
  free(p), free(m), free(v), free(gp), free(gm), free(gv);
}

/* ---- SGD: three steps ---- */
static void test_sgd(size_t n, double momentum, double wd, double grad_scale, int with_mom) {
  float *p = host_rand(n, 1.0f, 0), *mom = host_rand(n, 0.1f, 0);
  float *d_p = dev_copy(p, n), *d_mom = dev_copy(mom, n);
  float *gp = host_dup(p, n), *gmom = host_dup(mom, n);
  for (int t = 1; t <= 3; t++) {
    float *g = host_rand(n, 2.0f, 0);
    float *d_g = dev_copy(g, n);
    rt_sgd_step_f32(p, g, with_mom ? mom : NULL, n, 0.01, momentum, wd, grad_scale);
    rt_sgd_step_cu(d_p, d_g, with_mom ? d_mom : NULL, n, 0.01, momentum, wd, grad_scale);
    cudaCheck(cudaFree(d_g));
    free(g);
  }
  to_host(gp, d_p, n), to_host(gmom, d_mom, n);
  size_t nd = 0;
  double e = fmax(max_err(gp, p, n, &nd), max_err(gmom, mom, n, &nd));
  char what[160];
  snprintf(what, sizeof what, "sgd n=%zu momentum=%g wd=%g grad_scale=%g mom=%s", n, momentum, wd,
           grad_scale, with_mom ? "buf" : "NULL");
  report(what, e, TOL, nd);
  cudaCheck(cudaFree(d_p));
  cudaCheck(cudaFree(d_mom));
  free(p), free(mom), free(gp), free(gmom);
}

/* ---- sums of squares: one tensor, then a list with an empty member ---- */
static void test_sumsq(const size_t *ns, int count) {
  float **h = (float **)malloc(sizeof(float *) * count);
  const float **d = (const float **)malloc(sizeof(float *) * count);
  size_t total = 0;
  for (int i = 0; i < count; i++) {
    h[i] = host_rand(ns[i], 3.0f, 0);
    d[i] = dev_copy(h[i], ns[i]);
    total += ns[i];
  }
  char what[160];
  if (count == 1) {
    double ref = rt_sumsq_f32(h[0], ns[0]), got = rt_sumsq_cu(d[0], ns[0]);
    double got2 = rt_sumsq_cu(d[0], ns[0]);
    double e = ref == got ? 0 : fabs(got - ref) / fabs(ref);
    snprintf(what, sizeof what, "sumsq n=%zu", ns[0]);
    report(what, e, TOL_SUMSQ, ref != got);
    snprintf(what, sizeof what, "sumsq n=%zu again: same bits", ns[0]);
    check(what, !memcmp(&got, &got2, sizeof got));
  } else {
    double ref = rt_sumsq_list_f32((const float *const *)h, ns, count);
    double got = rt_sumsq_list_cu(d, ns, count);
    double e = ref == got ? 0 : fabs(got - ref) / fabs(ref);
    snprintf(what, sizeof what, "sumsq_list %d tensors, %zu elements", count, total);
    report(what, e, TOL_SUMSQ, ref != got);
  }
  for (int i = 0; i < count; i++) {
    cudaCheck(cudaFree((void *)d[i]));
    free(h[i]);
  }
  free(h), free(d);
}

/* ---- multi-tensor AdamW: equal to the per-tensor launcher and to the cpu ---- */
static void test_adamw_multi(void) {
  enum { COUNT = 7 };
  const size_t ns[COUNT] = {1, 4096, 4097, 0, 33, 20000, 12289};
  const double wds[COUNT] = {0.1, 0.0, 0.1, 0.1, 0.05, 0.1, 0.0};
  float *hp[COUNT], *hm[COUNT], *hv[COUNT];    // cpu
  float *dp[COUNT], *dm[COUNT], *dv[COUNT];    // multi
  float *sp[COUNT], *sm[COUNT], *sv[COUNT];    // per-tensor launcher
  for (int i = 0; i < COUNT; i++) {
    hp[i] = host_rand(ns[i], 1.0f, 0), hm[i] = host_rand(ns[i], 0.1f, 0);
    hv[i] = host_rand(ns[i], 0.01f, 1);
    dp[i] = dev_copy(hp[i], ns[i]), dm[i] = dev_copy(hm[i], ns[i]), dv[i] = dev_copy(hv[i], ns[i]);
    sp[i] = dev_copy(hp[i], ns[i]), sm[i] = dev_copy(hm[i], ns[i]), sv[i] = dev_copy(hv[i], ns[i]);
  }
  for (long t = 1; t <= 3; t++) {
    float *hg[COUNT], *dg[COUNT];
    for (int i = 0; i < COUNT; i++) {
      hg[i] = host_rand(ns[i], 2.0f, 0);
      dg[i] = dev_copy(hg[i], ns[i]);
    }
    double lr = 1e-3 / t, gs = t == 2 ? 0.5 : 1.0;
    RtcAdamwList l = {COUNT, dp, (const float *const *)dg, dm, dv, ns, wds};
    rt_adamw_multi_cu(&l, lr, 0.9, 0.999, 1e-8, t, gs);
    for (int i = 0; i < COUNT; i++) {
      rt_adamw_step_cu(sp[i], dg[i], sm[i], sv[i], ns[i], lr, 0.9, 0.999, 1e-8, wds[i], t, gs);
      rt_adamw_step_f32(hp[i], hg[i], hm[i], hv[i], ns[i], lr, 0.9, 0.999, 1e-8, wds[i], t, gs);
    }
    for (int i = 0; i < COUNT; i++) {
      cudaCheck(cudaFree(dg[i]));
      free(hg[i]);
    }
  }
  double e = 0;
  size_t nd = 0, total = 0;
  int same = 1;
  for (int i = 0; i < COUNT; i++) {
    size_t n = ns[i];
    float *a = (float *)malloc(n * 4 + 4), *b = (float *)malloc(n * 4 + 4);
    float *dd[3] = {dp[i], dm[i], dv[i]}, *ss[3] = {sp[i], sm[i], sv[i]},
          *hh[3] = {hp[i], hm[i], hv[i]};
    for (int k = 0; k < 3; k++) {
      to_host(a, dd[k], n), to_host(b, ss[k], n);
      same &= n == 0 || !memcmp(a, b, n * 4);
      e = fmax(e, max_err(a, hh[k], n, &nd));
    }
    total += n;
    free(a), free(b);
    cudaCheck(cudaFree(dp[i]));
    cudaCheck(cudaFree(dm[i]));
    cudaCheck(cudaFree(dv[i]));
    cudaCheck(cudaFree(sp[i]));
    cudaCheck(cudaFree(sm[i]));
    cudaCheck(cudaFree(sv[i]));
    free(hp[i]), free(hm[i]), free(hv[i]);
  }
  char what[160];
  snprintf(what, sizeof what, "adamw_multi %d tensors, %zu elements: = per-tensor launcher",
           COUNT, total);
  check(what, same);
  snprintf(what, sizeof what, "adamw_multi %d tensors, %zu elements (3 steps) vs cpu", COUNT,
           total);
  report(what, e, TOL, nd);
}

int main(void) {
  static const size_t sizes[] = {1, 31, 1000, 65537, 300001};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s];
    test_adamw(n, 0.1, 1.0);
    test_adamw(n, 0.0, 0.25);
    test_sgd(n, 0.9, 0.01, 1.0, 1);
    test_sgd(n, 0.0, 0.0, 0.5, 0);
    test_sgd(n, 0.9, 0.0, 1.0, 0); // momentum without a buffer: plain SGD
    test_sumsq(&n, 1);
  }
  const size_t list[] = {17, 0, 16384, 16385, 100000, 1};
  test_sumsq(list, 6);
  test_adamw_multi();
  if (failures) {
    printf("%d FAILED\n", failures);
    return 1;
  }
  printf("all passed\n");
  return 0;
}
