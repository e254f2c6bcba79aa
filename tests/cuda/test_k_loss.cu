/* test_k_loss.cu — rt_crossentropy_forward/backward/backward_acc_cu against
 * the cpu kernels (rt_*_f32), on the host build and, compiled by nvcc, on a
 * GPU.
 *
 * Rows with the ignore index among the others; written outputs start
 * poisoned (NaN), the accumulated dlogits from the same random values on
 * both sides; the backward also in place (dlogits == logits), with and
 * without lse.  Error of an element: |got - ref| / max(mag, 1e-6·max mag),
 * mag = |ref| for written outputs and |old| + |term| for accumulated ones;
 * the mean loss relative to itself.  PASS below 1e-5.  Also: the loss is
 * bitwise the same on a second run, a bad target gives RT_ERR_ARG with the
 * cpu kernel's message, all-ignored rows give loss 0 and count 0.
 *
 * The bf16 overloads (logits, dlogits bf16) on logits rounded to bf16,
 * against the cpu kernels on those values: the loss, losses and lse
 * (fp32/double, computed in fp32 from the same values) below 1e-5, the
 * bf16 dlogits (written, accumulated, in place, and through the site's
 * backward with the seed and count on the device) below TOL_BF16 = 1e-2
 * (a bf16 store is off by at most 2^-8 relative) under the same metric.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rtc_test_bf16.h"

extern "C" {
#include "shardrt.h"
}

#define TOL 1e-5
#define TOL_BF16 1e-2

static int failures;
static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint32_t urand_bits(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 32);
}

static float urand(void) { return (float)(urand_bits() >> 8) * (1.0f / 8388608.0f) - 1.0f; }

static float *host_logits(size_t n, float spread) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++)
    h[i] = spread * urand();
  return h;
}

static float *host_nan(size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++)
    h[i] = NAN;
  return h;
}

template <class T> static T *dev_copy(const T *h, size_t n) {
  T *d;
  cudaCheck(cudaMalloc(&d, (n ? n : 1) * sizeof(T)));
  if (n)
    cudaCheck(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

static float *to_host(const float *d, size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  cudaCheck(cudaDeviceSynchronize());
  if (n)
    cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

static double max_err(const float *got, const float *ref, const float *mag, size_t n) {
  double mmax = 0, e = 0;
  for (size_t i = 0; i < n; i++)
    mmax = fmax(mmax, fabs(mag ? mag[i] : ref[i]));
  double floor_ = mmax > 0 ? 1e-6 * mmax : 1e-30;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (d != d)
      return INFINITY;
    e = fmax(e, d / fmax(fabs(mag ? mag[i] : ref[i]), floor_));
  }
  return e;
}

static void report_tol(const char *what, double err, double tol) {
  int ok = err < tol;
  printf("%-60s max err %.3e  %s\n", what, err, ok ? "PASS" : "FAIL");
  if (!ok)
    failures++;
}

static void report(const char *what, double err) { report_tol(what, err, TOL); }

static void check(const char *what, int ok) {
  printf("%-60s %s\n", what, ok ? "PASS" : "FAIL");
  if (!ok)
    failures++;
}

// targets in [0,V), every ignore_every-th row the ignore index (0: none)
static int32_t *host_targets(int N, int V, int ignore_every) {
  int32_t *t = (int32_t *)malloc((size_t)(N ? N : 1) * sizeof(int32_t));
  for (int n = 0; n < N; n++)
    t[n] = ignore_every && n % ignore_every == ignore_every - 1 ? RT_IGNORE_INDEX
                                                                  : (int32_t)(urand_bits() % V);
  return t;
}

static void test_shape(int N, int V, int ignore_every, float spread) {
  size_t nl = (size_t)N * V;
  char what[160];
  float *logits = host_logits(nl, spread);
  int32_t *tg = host_targets(N, V, ignore_every);
  float *losses = host_nan(N), *lse = host_nan(N);
  double loss = -1;
  int count = -1;
  int rc = rt_crossentropy_forward_f32(&loss, &count, losses, lse, logits, tg, N, V);
  if (rc != RT_OK) {
    printf("cpu forward failed: %s\n", rt_last_error());
    exit(1);
  }

  float *d_logits = dev_copy(logits, nl), *nanN = host_nan(N);
  int32_t *d_tg = dev_copy(tg, N);
  float *d_losses = dev_copy(nanN, N), *d_lse = dev_copy(nanN, N);
  double g_loss = -1, g_loss2 = -2;
  int g_count = -1, g_count2 = -2;
  int g_rc = rt_crossentropy_forward_cu(&g_loss, &g_count, d_losses, d_lse, d_logits, d_tg, N, V);
  float *g_losses = to_host(d_losses, N), *g_lse = to_host(d_lse, N);
  snprintf(what, sizeof what, "ce_forward loss   N=%d V=%d ignore=%d (count %d)", N, V,
           ignore_every, count);
  double le = fabs(g_loss - loss) / fmax(fabs(loss), 1e-30);
  report(what, g_rc == RT_OK && g_count == count ? le : INFINITY);
  snprintf(what, sizeof what, "ce_forward losses N=%d V=%d", N, V);
  report(what, max_err(g_losses, losses, lse, N)); // relative to lse: a loss may be ~0
  snprintf(what, sizeof what, "ce_forward lse    N=%d V=%d", N, V);
  report(what, max_err(g_lse, lse, NULL, N));
  // no optional outputs, and bitwise repeatable
  g_rc = rt_crossentropy_forward_cu(&g_loss2, &g_count2, NULL, NULL, d_logits, d_tg, N, V);
  snprintf(what, sizeof what, "ce_forward again without losses/lse N=%d V=%d: same bits", N, V);
  check(what, g_rc == RT_OK && g_count2 == g_count && !memcmp(&g_loss, &g_loss2, sizeof g_loss));

  // backward: written (over NaN), with lse and without; accumulated; in place
  double dloss = 1.0, norm = count ? (double)count : 1.0;
  float *dref = host_nan(nl);
  rt_crossentropy_backward_f32(dref, logits, lse, tg, N, V, dloss, norm);
  float *dacc0 = host_logits(nl, 1e-3f), *daccref = (float *)malloc(nl * 4 + 4),
        *daccmag = (float *)malloc(nl * 4 + 4);
  memcpy(daccref, dacc0, nl * 4);
  rt_crossentropy_backward_acc_f32(daccref, logits, NULL, tg, N, V, dloss, norm);
  for (size_t i = 0; i < nl; i++)
    daccmag[i] = fabsf(dacc0[i]) + fabsf(dref[i]);
  float *nanNV = host_nan(nl);
  for (int use_lse = 0; use_lse < 2; use_lse++) {
    const float *lse_arg = use_lse ? d_lse : NULL;
    float *d_d = dev_copy(nanNV, nl);
    rt_crossentropy_backward_cu(d_d, d_logits, lse_arg, d_tg, N, V, dloss, norm);
    float *got = to_host(d_d, nl);
    snprintf(what, sizeof what, "ce_backward       N=%d V=%d lse=%d", N, V, use_lse);
    report(what, max_err(got, dref, NULL, nl));
    free(got);
    cudaCheck(cudaFree(d_d));

    d_d = dev_copy(dacc0, nl);
    rt_crossentropy_backward_acc_cu(d_d, d_logits, lse_arg, d_tg, N, V, dloss, norm);
    got = to_host(d_d, nl);
    snprintf(what, sizeof what, "ce_backward_acc   N=%d V=%d lse=%d", N, V, use_lse);
    report(what, max_err(got, daccref, daccmag, nl));
    free(got);
    cudaCheck(cudaFree(d_d));

    d_d = dev_copy(logits, nl); // in place: dlogits == logits
    rt_crossentropy_backward_cu(d_d, d_d, lse_arg, d_tg, N, V, dloss, norm);
    got = to_host(d_d, nl);
    snprintf(what, sizeof what, "ce_backward in place N=%d V=%d lse=%d", N, V, use_lse);
    report(what, max_err(got, dref, NULL, nl));
    free(got);
    cudaCheck(cudaFree(d_d));
  }
  cudaCheck(cudaFree(d_logits));
  cudaCheck(cudaFree(d_tg));
  cudaCheck(cudaFree(d_losses));
  cudaCheck(cudaFree(d_lse));
  free(logits), free(tg), free(losses), free(lse), free(nanN), free(g_losses), free(g_lse),
      free(dref), free(dacc0), free(daccref), free(daccmag), free(nanNV);
}

// The bf16 overloads on logits rounded to bf16, against the cpu on those values.
static void test_shape_bf16(int N, int V, int ignore_every, float spread) {
  size_t nl = (size_t)N * V;
  char what[160];
  float *logits = host_logits(nl, spread);
  rtc_test_round(logits, nl);
  int32_t *tg = host_targets(N, V, ignore_every);
  float *losses = host_nan(N), *lse = host_nan(N);
  double loss = -1;
  int count = -1;
  if (rt_crossentropy_forward_f32(&loss, &count, losses, lse, logits, tg, N, V) != RT_OK) {
    printf("cpu forward failed: %s\n", rt_last_error());
    exit(1);
  }

  rtc_bf16 *d_logits = rtc_test_dev_bf16(logits, nl);
  float *nanN = host_nan(N);
  int32_t *d_tg = dev_copy(tg, N);
  float *d_losses = dev_copy(nanN, N), *d_lse = dev_copy(nanN, N), *d_y = dev_copy(nanN, 1);
  double g_loss = -1;
  int g_count = -1;
  int g_rc = rt_crossentropy_forward_cu(&g_loss, &g_count, d_losses, d_lse, d_logits, d_tg, N, V);
  float *g_losses = to_host(d_losses, N), *g_lse = to_host(d_lse, N);
  snprintf(what, sizeof what, "ce_forward bf16 loss N=%d V=%d ignore=%d (count %d)", N, V,
           ignore_every, count);
  double le = fabs(g_loss - loss) / fmax(fabs(loss), 1e-30);
  report(what, g_rc == RT_OK && g_count == count ? le : INFINITY);
  snprintf(what, sizeof what, "ce_forward bf16 losses N=%d V=%d", N, V);
  report(what, max_err(g_losses, losses, lse, N));
  snprintf(what, sizeof what, "ce_forward bf16 lse    N=%d V=%d", N, V);
  report(what, max_err(g_lse, lse, NULL, N));
  // the site's forward: the same loss, y = (float)loss
  static double site; // the call site's key
  double s_loss = -2;
  int s_count = -2;
  g_rc = rt_crossentropy_forward_site_cu(&site, &s_count, d_y, NULL, NULL, d_logits, d_tg, N, V);
  s_loss = site;
  float *g_y = to_host(d_y, 1);
  snprintf(what, sizeof what, "ce_forward_site bf16 N=%d V=%d: the eager loss, y", N, V);
  check(what, g_rc == RT_OK && s_count == count && s_loss == g_loss && *g_y == (float)g_loss);

  // backward: written (over NaN), with lse and without; accumulated; in
  // place; the site's, written and accumulated (seed and count on the device)
  double dloss = 1.0, norm = count ? (double)count : 1.0;
  float *dref = host_nan(nl);
  rt_crossentropy_backward_f32(dref, logits, lse, tg, N, V, dloss, norm);
  float *dacc0 = host_logits(nl, 1e-3f), *daccref = (float *)malloc(nl * 4 + 4),
        *daccmag = (float *)malloc(nl * 4 + 4);
  rtc_test_round(dacc0, nl);
  memcpy(daccref, dacc0, nl * 4);
  rt_crossentropy_backward_acc_f32(daccref, logits, NULL, tg, N, V, dloss, norm);
  for (size_t i = 0; i < nl; i++)
    daccmag[i] = fabsf(dacc0[i]) + fabsf(dref[i]);
  float seed = (float)dloss, *d_seed = dev_copy(&seed, 1);
  for (int use_lse = 0; use_lse < 2; use_lse++) {
    const float *lse_arg = use_lse ? d_lse : NULL;
    rtc_bf16 *d_d = rtc_test_poison_bf16(nl);
    rt_crossentropy_backward_cu(d_d, d_logits, lse_arg, d_tg, N, V, dloss, norm);
    float *got = rtc_test_fetch_bf16(d_d, nl);
    snprintf(what, sizeof what, "ce_backward bf16  N=%d V=%d lse=%d", N, V, use_lse);
    report_tol(what, max_err(got, dref, NULL, nl), TOL_BF16);
    free(got);
    cudaCheck(cudaFree(d_d));

    d_d = rtc_test_dev_bf16(dacc0, nl);
    rt_crossentropy_backward_acc_cu(d_d, d_logits, lse_arg, d_tg, N, V, dloss, norm);
    got = rtc_test_fetch_bf16(d_d, nl);
    snprintf(what, sizeof what, "ce_backward_acc bf16 N=%d V=%d lse=%d", N, V, use_lse);
    report_tol(what, max_err(got, daccref, daccmag, nl), TOL_BF16);
    free(got);
    cudaCheck(cudaFree(d_d));

    d_d = rtc_test_dev_bf16(logits, nl); // in place: dlogits == logits
    rt_crossentropy_backward_cu(d_d, d_d, lse_arg, d_tg, N, V, dloss, norm);
    got = rtc_test_fetch_bf16(d_d, nl);
    snprintf(what, sizeof what, "ce_backward bf16 in place N=%d V=%d lse=%d", N, V, use_lse);
    report_tol(what, max_err(got, dref, NULL, nl), TOL_BF16);
    free(got);
    cudaCheck(cudaFree(d_d));

    if (!count) // the site's scale is 0 without rows, the cpu's above divides by 1
      continue;
    for (int acc = 0; acc < 2; acc++) {
      d_d = acc ? rtc_test_dev_bf16(dacc0, nl) : rtc_test_poison_bf16(nl);
      rt_crossentropy_backward_site_cu(d_d, d_logits, lse_arg, d_tg, N, V, d_seed, &site, acc);
      got = rtc_test_fetch_bf16(d_d, nl);
      snprintf(what, sizeof what, "ce_backward_site bf16 N=%d V=%d lse=%d acc=%d", N, V, use_lse,
               acc);
      report_tol(what, acc ? max_err(got, daccref, daccmag, nl) : max_err(got, dref, NULL, nl),
                 TOL_BF16);
      free(got);
      cudaCheck(cudaFree(d_d));
    }
  }
  cudaCheck(cudaFree(d_logits));
  cudaCheck(cudaFree(d_tg));
  cudaCheck(cudaFree(d_losses));
  cudaCheck(cudaFree(d_lse));
  cudaCheck(cudaFree(d_y));
  cudaCheck(cudaFree(d_seed));
  free(logits), free(tg), free(losses), free(lse), free(nanN), free(g_losses), free(g_lse),
      free(g_y), free(dref), free(dacc0), free(daccref), free(daccmag);
}

/* A padded vocabulary (cross_entropy's classes): rows ld apart, the first V
 * columns the classes.  The reference is the plain kernels on the packed
 * (N,V) copy, so the cpu's _ld kernels are checked too: the loss the same
 * bits, the gradient the packed one's in the first V columns and 0 in the
 * unused ones (acc: left as they were).  Then the device's site kernels
 * (fp32 and bf16) against it. */
static void test_ld(int N, int V, int ld, int ignore_every) {
  size_t nl = (size_t)N * ld, np = (size_t)N * V;
  char what[160];
  float *logits = host_logits(nl, 6.0f), *packed = (float *)malloc(np * 4 + 4);
  rtc_test_round(logits, nl); /* bf16-exact, so the bf16 run sees the same logits */
  for (int n = 0; n < N; n++) memcpy(packed + (size_t)n * V, logits + (size_t)n * ld, (size_t)V * 4);
  int32_t *tg = host_targets(N, V, ignore_every);
  double loss = -1, loss_ld = -2;
  int count = -1, count_ld = -2;
  float *dpk = host_nan(np), *dref = host_nan(nl), *dld = host_nan(nl);
  if (rt_crossentropy_forward_f32(&loss, &count, NULL, NULL, packed, tg, N, V) != RT_OK ||
      rt_crossentropy_forward_ld_f32(&loss_ld, &count_ld, NULL, NULL, logits, tg, N, V, ld) != RT_OK) {
    printf("cpu forward failed: %s\n", rt_last_error());
    exit(1);
  }
  snprintf(what, sizeof what, "cpu ce_forward_ld N=%d V=%d ld=%d: the packed loss", N, V, ld);
  check(what, loss == loss_ld && count == count_ld);
  double norm = count ? (double)count : 1.0;
  rt_crossentropy_backward_f32(dpk, packed, NULL, tg, N, V, 1.0, norm);
  for (int n = 0; n < N; n++)
    for (int i = 0; i < ld; i++) dref[(size_t)n * ld + i] = i < V ? dpk[(size_t)n * V + i] : 0.0f;
  rt_crossentropy_backward_ld_f32(dld, logits, NULL, tg, N, V, ld, 1.0, norm);
  snprintf(what, sizeof what, "cpu ce_backward_ld N=%d V=%d ld=%d", N, V, ld);
  check(what, !memcmp(dld, dref, nl * 4));
  float *dacc0 = host_logits(nl, 1e-3f), *daccref = (float *)malloc(nl * 4 + 4),
        *daccmag = (float *)malloc(nl * 4 + 4);
  rtc_test_round(dacc0, nl);
  for (size_t i = 0; i < nl; i++) {
    daccref[i] = dacc0[i] + dref[i];
    daccmag[i] = fabsf(dacc0[i]) + fabsf(dref[i]); /* a sum's error against its terms */
  }
  memcpy(dld, dacc0, nl * 4);
  rt_crossentropy_backward_acc_ld_f32(dld, logits, NULL, tg, N, V, ld, 1.0, norm);
  snprintf(what, sizeof what, "cpu ce_backward_acc_ld N=%d V=%d ld=%d", N, V, ld);
  report(what, max_err(dld, daccref, daccmag, nl));

  int32_t *d_tg = dev_copy(tg, N);
  float nanv = NAN, seed = 1.0f, *d_y = dev_copy(&nanv, 1), *d_seed = dev_copy(&seed, 1);
  for (int b16 = 0; b16 < 2; b16++) {
    static double site[2]; // the call sites' keys
    double s_loss = -3;
    int s_count = -3, rc;
    float *d_lf = b16 ? NULL : dev_copy(logits, nl);
    rtc_bf16 *d_lb = b16 ? rtc_test_dev_bf16(logits, nl) : NULL;
    rc = b16 ? rt_crossentropy_forward_site_ld_cu(&site[1], &s_count, d_y, NULL, NULL, d_lb, d_tg, N,
                                                  V, ld)
             : rt_crossentropy_forward_site_ld_cu(&site[0], &s_count, d_y, NULL, NULL, d_lf, d_tg, N,
                                                  V, ld);
    s_loss = site[b16];
    snprintf(what, sizeof what, "ce_forward_site_ld%s N=%d V=%d ld=%d (count %d)",
             b16 ? " bf16" : "", N, V, ld, count);
    report(what, rc == RT_OK && s_count == count ? fabs(s_loss - loss) / fmax(fabs(loss), 1e-30)
                                                 : INFINITY);
    if (!count) {
      cudaCheck(cudaFree(b16 ? (void *)d_lb : (void *)d_lf));
      continue;
    }
    for (int acc = 0; acc < 2; acc++) {
      float *got;
      if (b16) {
        rtc_bf16 *d_d = acc ? rtc_test_dev_bf16(dacc0, nl) : rtc_test_poison_bf16(nl);
        rt_crossentropy_backward_site_ld_cu(d_d, d_lb, NULL, d_tg, N, V, ld, d_seed, &site[1], acc);
        got = rtc_test_fetch_bf16(d_d, nl);
        cudaCheck(cudaFree(d_d));
      } else {
        float *d_d = acc ? dev_copy(dacc0, nl) : rtc_test_poison(nl);
        rt_crossentropy_backward_site_ld_cu(d_d, d_lf, NULL, d_tg, N, V, ld, d_seed, &site[0], acc);
        got = to_host(d_d, nl);
        cudaCheck(cudaFree(d_d));
      }
      int pad_ok = 1; /* the unused columns: 0, or as they were */
      for (int n = 0; n < N; n++)
        for (int i = V; i < ld; i++) {
          float w = acc ? dacc0[(size_t)n * ld + i] : 0.0f;
          if (b16) w = rtc_bf2f(rtc_f2bf(w));
          pad_ok &= got[(size_t)n * ld + i] == w;
        }
      snprintf(what, sizeof what, "ce_backward_site_ld%s N=%d V=%d ld=%d acc=%d",
               b16 ? " bf16" : "", N, V, ld, acc);
      double e = acc ? max_err(got, daccref, daccmag, nl) : max_err(got, dref, NULL, nl);
      report_tol(what, pad_ok ? e : INFINITY, b16 ? TOL_BF16 : TOL);
      free(got);
    }
    cudaCheck(cudaFree(b16 ? (void *)d_lb : (void *)d_lf));
  }
  rtc_test_dfree(d_tg, d_y, d_seed);
  free(logits), free(packed), free(tg), free(dpk), free(dref), free(dld), free(dacc0),
      free(daccref), free(daccmag);
}

// a target outside [0,V) that is not the ignore index: RT_ERR_ARG, the cpu's message
static void test_bad_target(int N, int V, int row, int32_t bad, int row2, int32_t bad2) {
  size_t nl = (size_t)N * V;
  float *logits = host_logits(nl, 2.0f);
  int32_t *tg = host_targets(N, V, 5);
  tg[row] = bad;
  if (row2 >= 0)
    tg[row2] = bad2;
  double loss = 123, g_loss = 123;
  int count = 7, g_count = 7;
  rt_clear_error();
  int rc = rt_crossentropy_forward_f32(&loss, &count, NULL, NULL, logits, tg, N, V);
  char cpu_msg[512];
  snprintf(cpu_msg, sizeof cpu_msg, "%s", rt_last_error());
  rt_clear_error();
  float *d_logits = dev_copy(logits, nl);
  int32_t *d_tg = dev_copy(tg, N);
  int g_rc = rt_crossentropy_forward_cu(&g_loss, &g_count, NULL, NULL, d_logits, d_tg, N, V);
  char what[160];
  snprintf(what, sizeof what, "ce_forward bad target %d at row %d (N=%d V=%d)", (int)bad, row, N,
           V);
  int ok = rc == RT_ERR_ARG && g_rc == RT_ERR_ARG && !strcmp(cpu_msg, rt_last_error()) &&
           g_loss == 123 && g_count == 7;
  check(what, ok);
  if (!ok)
    printf("  cpu: %d \"%s\"\n  gpu: %d \"%s\"\n", rc, cpu_msg, g_rc, rt_last_error());
  cudaCheck(cudaFree(d_logits));
  cudaCheck(cudaFree(d_tg));
  free(logits), free(tg);
}

static void test_all_ignored(int N, int V) {
  size_t nl = (size_t)N * V;
  float *logits = host_logits(nl, 1.0f);
  int32_t *tg = host_targets(N, V, 1); // every row ignored
  float *d_logits = dev_copy(logits, nl), *nanN = host_nan(N);
  int32_t *d_tg = dev_copy(tg, N);
  float *d_losses = dev_copy(nanN, N);
  double g_loss = -1;
  int g_count = -1;
  int rc = rt_crossentropy_forward_cu(&g_loss, &g_count, d_losses, NULL, d_logits, d_tg, N, V);
  float *g_losses = to_host(d_losses, N);
  int zeros = 1;
  for (int n = 0; n < N; n++)
    zeros &= g_losses[n] == 0;
  char what[160];
  snprintf(what, sizeof what, "ce_forward all rows ignored N=%d V=%d: loss 0, count 0", N, V);
  check(what, rc == RT_OK && g_loss == 0 && g_count == 0 && zeros);
  cudaCheck(cudaFree(d_logits));
  cudaCheck(cudaFree(d_tg));
  cudaCheck(cudaFree(d_losses));
  free(logits), free(tg), free(nanN), free(g_losses);
}

int main(void) {
  test_shape(1, 1, 0, 1.0f);
  test_shape(1, 7, 0, 1.0f);
  test_shape(5, 33, 3, 4.0f);
  test_shape(300, 100, 7, 8.0f); // more rows than the reduction's threads
  test_shape(64, 5000, 9, 4.0f);
  test_shape(3, 50304, 0, 10.0f); // GPT-2's padded vocabulary
  test_shape(2, 70001, 0, 1.0f);  // a row longer than 64 elements per thread
  test_bad_target(10, 17, 4, 17, -1, 0);
  test_bad_target(10, 17, 6, -5, 8, 40); // the first bad row is reported
  test_bad_target(600, 9, 513, 9, 300, -2);
  test_all_ignored(9, 13);
  test_shape_bf16(1, 1, 0, 1.0f);
  test_shape_bf16(1, 7, 0, 1.0f);
  test_shape_bf16(5, 33, 3, 4.0f);
  test_shape_bf16(300, 100, 7, 8.0f);
  test_shape_bf16(64, 5000, 9, 4.0f);
  test_shape_bf16(3, 50304, 0, 10.0f);
  test_shape_bf16(2, 70001, 0, 1.0f);
  test_ld(5, 33, 40, 3);
  test_ld(300, 100, 104, 7);
  test_ld(3, 50257, 50304, 0); // GPT-2's vocabulary padded to a multiple of 64
  if (failures) {
    printf("%d FAILED\n", failures);
    return 1;
  }
  printf("all passed\n");
  return 0;
}
