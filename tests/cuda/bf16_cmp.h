/* bf16_cmp.h — what the bf16-storage tests of k_matmul, k_attention,
 * rtc_summa and rtc_dist's collectives share (on top of rtc_test.h):
 * inputs rounded to bf16, bf16 device copies, poisoned bf16 outputs, and
 * the comparison of a bf16 (or fp32) result with the cpu kernel's fp32 run
 * on the same rounded inputs.
 *
 * The metric is rtc_test.h's, the maximum over the elements of
 *   |got - want| / max(|want|, rms(want))
 * (a relative error, floored at the tensor's root mean square so that
 * cancellations are judged on the tensor's scale; a NaN where the cpu has a
 * number fails), against a limit given per check: BF16_TOL = 1e-2 for what
 * is stored in bf16 (one rounding is at most 2^-8 ≈ 3.9e-3 of the value).
 * Where a result is rounded several times along a sum, bf16_cmp_host takes
 * mag (the same computation on absolute values, which bounds every partial
 * sum) in place of max(|want|, rms).  bf16_selftest shows the check fails
 * on a result 3% off.
 */
#ifndef BF16_CMP_H
#define BF16_CMP_H

#include "rtc_test_bf16.h"

#define BF16_TOL 1e-2

/* The bf16 inputs and outputs of rtc_test_bf16.h under this file's names. */
static inline float *bf16_round_host(float *h, size_t n) {
  rtc_test_round(h, n);
  return h;
}
static inline float *bf16_host(size_t n, float lo, float hi) { return rtc_test_host_bf16(n, lo, hi); }
static inline rtc_bf16 *bf16_dev(const float *h, size_t n) { return rtc_test_dev_bf16(h, n); }
static inline rtc_bf16 *bf16_poison(size_t n) { return rtc_test_poison_bf16(n); }
static inline float *bf16_download(const rtc_bf16 *d, size_t n) { return rtc_test_fetch_bf16(d, n); }
static inline float *f32_download(const float *d, size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  cudaCheck(cudaDeviceSynchronize());
  cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

/* The metric on host arrays; prints one line and counts a failure unless
 * quiet (then only returns whether it passed).  With mag, the error of an
 * element is relative to mag[i] (floored at 1e-6 of its largest). */
static inline int bf16_cmp_host(const char *kernel, const char *shape, const char *tensor,
                                const float *got, const float *want, size_t n, double tol,
                                int quiet = 0, const float *mag = NULL) {
  size_t at;
  double worst = rtc_test_worst(got, want, n, mag, &at);
  int ok = worst < tol;
  if (quiet) return ok;
  printf("%-26s %-30s %-6s max rel err %.3g (limit %.0e) %s\n", kernel, shape, tensor, worst, tol,
         ok ? "PASS" : "FAIL");
  if (!ok) {
    printf("    worst at %zu: got %.9g want %.9g\n", at, (double)got[at], (double)want[at]);
    rtc_test_failures++;
  }
  return ok;
}
/* A device bf16 result against the cpu's. */
static inline int bf16_check(const char *kernel, const char *shape, const char *tensor,
                             const rtc_bf16 *d_got, const float *want, size_t n,
                             double tol = BF16_TOL) {
  float *got = bf16_download(d_got, n);
  int ok = bf16_cmp_host(kernel, shape, tensor, got, want, n, tol);
  free(got);
  return ok;
}
/* A device fp32 result (a parameter gradient, a statistic) against the cpu's. */
static inline int f32_check(const char *kernel, const char *shape, const char *tensor,
                            const float *d_got, const float *want, size_t n, double tol) {
  float *got = f32_download(d_got, n);
  int ok = bf16_cmp_host(kernel, shape, tensor, got, want, n, tol);
  free(got);
  return ok;
}
/* The metric can fail: a result 3% off every element, and one NaN, are
 * rejected at BF16_TOL (counted as a failure if not). */
static inline void bf16_selftest(void) {
  float want[64], off[64], nan1[64];
  for (int i = 0; i < 64; i++) {
    want[i] = (float)(i - 31) * 0.25f;
    off[i] = want[i] * 1.03f;
    nan1[i] = want[i];
  }
  nan1[17] = NAN;
  int caught = !bf16_cmp_host("", "", "", off, want, 64, BF16_TOL, 1) &&
               !bf16_cmp_host("", "", "", nan1, want, 64, BF16_TOL, 1) &&
               bf16_cmp_host("", "", "", want, want, 64, BF16_TOL, 1);
  printf("%-26s %-30s %-6s %s\n", "bf16 metric self-test", "3% off, a NaN", "",
         caught ? "rejected PASS" : "accepted FAIL");
  rtc_test_failures += !caught;
}

#endif
