/* rtc_test.h — what the CUDA kernels' tests (tests/cuda/test_k_*.cu) share:
 * random host data, device copies, poisoned outputs and the comparison
 * against the cpu kernel.  Built as host C++ on the shim and by nvcc.
 *
 * The error metric: per element |got - want| / max(|want|, rms(want)), the
 * floor being the tensor's root mean square so that elements near zero
 * (cancellations) are judged on the tensor's scale; a NaN where the cpu has
 * a number (a poisoned element never written) fails.  Limit 1e-5.
 */
#ifndef RTC_TEST_H
#define RTC_TEST_H

#include "common.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "rt_train.h"
#include "shardrt.h"
}

#define RTC_TEST_TOL 1e-5

static int rtc_test_failures;
static uint64_t rtc_test_state = 0x853c49e6748fea9bull;

/* Uniform in [lo, hi). */
static inline float rtc_test_rand(float lo, float hi) {
  rtc_test_state = rtc_test_state * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (float)((rtc_test_state >> 40) * 0x1.0p-24);
}
/* n host floats, uniform in [lo, hi). */
static inline float *rtc_test_host(size_t n, float lo, float hi) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) h[i] = rtc_test_rand(lo, hi);
  return h;
}
static inline float *rtc_test_copy(const float *h, size_t n) {
  float *c = (float *)malloc((n ? n : 1) * sizeof(float));
  memcpy(c, h, n * sizeof(float));
  return c;
}
/* A device copy of h (n floats or ints). */
template <class T>
static inline T *rtc_test_dev(const T *h, size_t n) {
  T *d;
  cudaCheck(cudaMalloc(&d, (n ? n : 1) * sizeof(T)));
  cudaCheck(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
/* n device floats of NaN (all-ones bytes). */
static inline float *rtc_test_poison(size_t n) {
  float *d;
  cudaCheck(cudaMalloc(&d, (n ? n : 1) * sizeof(float)));
  cudaCheck(cudaMemset(d, 0xff, n * sizeof(float)));
  return d;
}
static inline void rtc_test_poison_host(float *h, size_t n) { memset(h, 0xff, n * sizeof(float)); }

/* cudaFree of each (NULLs allowed). */
template <class... P>
static inline void rtc_test_dfree(P... p) {
  const void *ps[] = {(const void *)p...};
  for (const void *q : ps) cudaCheck(cudaFree((void *)q));
}

/* The tests' metric: the largest over the elements of |got - want| /
 * max(|want|, rms(want)) (with mag: / max(|mag[i]|, 1e-6 max|mag|)); a NaN
 * where the cpu has a number, or a differing infinity, is INFINITY.  *at gets
 * the worst element. */
static inline double rtc_test_worst(const float *got, const float *want, size_t n,
                                    const float *mag, size_t *at) {
  double ss = 0.0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(want[i])) ss += (double)want[i] * want[i];
  double floor_ = n ? sqrt(ss / (double)n) : 0.0, worst = 0.0, mmax = 0.0;
  if (floor_ < 1e-30) floor_ = 1e-30;
  for (size_t i = 0; mag && i < n; i++) mmax = fmax(mmax, fabs((double)mag[i]));
  *at = 0;
  for (size_t i = 0; i < n; i++) {
    double e;
    if (isnan(want[i]))
      e = isnan(got[i]) ? 0.0 : INFINITY;
    else if (!isfinite(got[i]) || !isfinite(want[i]))
      e = got[i] == want[i] ? 0.0 : INFINITY;
    else {
      double w = mag ? fmax(fabs((double)mag[i]), 1e-6 * mmax) : fmax(fabs((double)want[i]), floor_);
      e = fabs((double)got[i] - (double)want[i]) / (w > 1e-30 ? w : 1e-30);
    }
    if (!(e <= worst)) worst = e, *at = i;
  }
  return worst;
}

/* Compares n device floats with the cpu's, prints one line, counts a
 * failure; with mag, each element's error is measured against mag[i] (the
 * size of the terms whose difference it is) rather than against |want|. */
static inline double rtc_test_check_mag(const char *kernel, const char *shape, const char *tensor,
                                        const float *d_got, const float *want, const float *mag,
                                        size_t n) {
  float *got = (float *)malloc((n ? n : 1) * sizeof(float));
  cudaCheck(cudaDeviceSynchronize());
  cudaCheck(cudaMemcpy(got, d_got, n * sizeof(float), cudaMemcpyDeviceToHost));
  size_t at;
  double worst = rtc_test_worst(got, want, n, mag, &at);
  int ok = worst < RTC_TEST_TOL;
  printf("%-26s %-22s %-8s max rel err %.3g %s\n", kernel, shape, tensor, worst,
         ok ? "PASS" : "FAIL");
  if (!ok) {
    printf("    worst at %zu: got %.9g want %.9g\n", at, (double)got[at], (double)want[at]);
    rtc_test_failures++;
  }
  free(got);
  return worst;
}

static inline double rtc_test_check(const char *kernel, const char *shape, const char *tensor,
                                    const float *d_got, const float *want, size_t n) {
  return rtc_test_check_mag(kernel, shape, tensor, d_got, want, NULL, n);
}

static inline int rtc_test_done(void) {
  if (rtc_test_failures) printf("%d check(s) FAILED\n", rtc_test_failures);
  else printf("all checks passed\n");
  return rtc_test_failures ? 1 : 0;
}

#endif
