/* rtc_test_bf16.h — what the tests of the launchers' bf16 overloads share
 * (precision = bf16 storage, rtc.h's bf16 section): inputs rounded to bf16
 * (the cpu kernel runs on the same values as floats), bf16 device copies,
 * poisoned bf16 outputs, and the comparison of a bf16 output with the cpu's
 * fp32 result.
 *
 * The metric is rtc_test.h's: per element |got - want| / max(|want|,
 * rms(want)), got widened from bf16; a NaN where the cpu has a number (an
 * element never written: outputs start as all-ones bytes, NaN in bf16)
 * fails.  Limit 1e-2: a bf16 store (8 significant bits) is off by at most
 * 2^-8 relative, a kernel that computes in fp32 from the same inputs as the
 * cpu stays within that (the tests see 3.9e-3), and a wrong or missing term
 * does not.  The fp32 outputs of a bf16 launcher
 * (statistics, parameter gradients, losses) are computed in fp32 from the
 * same values as the cpu's, so they keep rtc_test_check's 1e-5.
 */
#ifndef RTC_TEST_BF16_H
#define RTC_TEST_BF16_H

#include "rtc_test.h"

#define RTC_TEST_BF16_TOL 1e-2

/* h rounded to bf16 in place: the values a bf16 tensor of h holds. */
static inline void rtc_test_round(float *h, size_t n) {
  for (size_t i = 0; i < n; i++) h[i] = rtc_bf16_round(h[i]);
}
/* n host floats uniform in [lo, hi), rounded to bf16. */
static inline float *rtc_test_host_bf16(size_t n, float lo, float hi) {
  float *h = rtc_test_host(n, lo, hi);
  rtc_test_round(h, n);
  return h;
}
/* A device bf16 copy of h (n floats, rounded). */
static inline rtc_bf16 *rtc_test_dev_bf16(const float *h, size_t n) {
  rtc_bf16 *b = (rtc_bf16 *)malloc((n ? n : 1) * sizeof(rtc_bf16)), *d;
  for (size_t i = 0; i < n; i++) b[i] = rtc_f2bf(h[i]);
  cudaCheck(cudaMalloc(&d, (n ? n : 1) * sizeof(rtc_bf16)));
  cudaCheck(cudaMemcpy(d, b, n * sizeof(rtc_bf16), cudaMemcpyHostToDevice));
  free(b);
  return d;
}
/* n device bf16 of NaN (all-ones bytes). */
static inline rtc_bf16 *rtc_test_poison_bf16(size_t n) {
  rtc_bf16 *d;
  cudaCheck(cudaMalloc(&d, (n ? n : 1) * sizeof(rtc_bf16)));
  cudaCheck(cudaMemset(d, 0xff, n * sizeof(rtc_bf16)));
  return d;
}
/* n device bf16 widened into a new host array. */
static inline float *rtc_test_fetch_bf16(const rtc_bf16 *d, size_t n) {
  rtc_bf16 *b = (rtc_bf16 *)malloc((n ? n : 1) * sizeof(rtc_bf16));
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  cudaCheck(cudaDeviceSynchronize());
  cudaCheck(cudaMemcpy(b, d, n * sizeof(rtc_bf16), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) h[i] = rtc_bf2f(b[i]);
  free(b);
  return h;
}

/* Host arrays got and want under the metric above with limit tol; prints one
 * line, counts a failure. */
static inline double rtc_test_compare(const char *kernel, const char *shape, const char *tensor,
                                      const float *got, const float *want, size_t n, double tol) {
  size_t at;
  double worst = rtc_test_worst(got, want, n, NULL, &at);
  int ok = worst < tol;
  printf("%-26s %-22s %-8s max rel err %.3g %s\n", kernel, shape, tensor, worst,
         ok ? "PASS" : "FAIL");
  if (!ok) {
    printf("    worst at %zu: got %.9g want %.9g\n", at, (double)got[at], (double)want[at]);
    rtc_test_failures++;
  }
  return worst;
}

/* A bf16 device output against the cpu's fp32 result, limit RTC_TEST_BF16_TOL
 * (the line says bf16 after the kernel's name unless the name does). */
static inline double rtc_test_check_bf16(const char *kernel, const char *shape,
                                         const char *tensor, const rtc_bf16 *d_got,
                                         const float *want, size_t n) {
  float *got = rtc_test_fetch_bf16(d_got, n);
  char k[160];
  snprintf(k, sizeof k, strstr(kernel, "bf16") ? "%.150s" : "%.150s bf16", kernel);
  double e = rtc_test_compare(k, shape, tensor, got, want, n, RTC_TEST_BF16_TOL);
  free(got);
  return e;
}

#endif
