/* rt_test.h — tiny test helpers for the runtime tests (chibicc-style ASSERTs
 * plus array comparison, finite differences and a scratch directory). */
#ifndef RT_TEST_H
#define RT_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardrt.h"

static int test_failures, test_checks;

#define ASSERT(expected, actual)                                                    \
  do {                                                                              \
    long long e_ = (long long)(expected), a_ = (long long)(actual);                 \
    test_checks++;                                                                  \
    if (e_ != a_) {                                                                 \
      fprintf(stderr, "%s:%d: %s => %lld expected but got %lld\n", __FILE__,        \
              __LINE__, #actual, e_, a_);                                           \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)

#define ASSERT_TRUE(cond) ASSERT(1, !!(cond))

#define ASSERT_NEAR(expected, actual, tol)                                          \
  do {                                                                              \
    double e_ = (expected), a_ = (actual);                                          \
    test_checks++;                                                                  \
    if (!(fabs(e_ - a_) <= (tol))) {                                                \
      fprintf(stderr, "%s:%d: %s => %.12g expected but got %.12g (tol %g)\n",       \
              __FILE__, __LINE__, #actual, e_, a_, (double)(tol));                  \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)

#define ASSERT_STR(expected, actual)                                                \
  do {                                                                              \
    const char *e_ = (expected), *a_ = (actual);                                    \
    test_checks++;                                                                  \
    if (!a_ || strcmp(e_, a_) != 0) {                                               \
      fprintf(stderr, "%s:%d: %s => \"%s\" expected but got \"%s\"\n", __FILE__,    \
              __LINE__, #actual, e_, a_ ? a_ : "(null)");                          \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)

/* A runtime call that must succeed. */
#define ASSERT_OK(call)                                                             \
  do {                                                                              \
    int rc_ = (call);                                                               \
    test_checks++;                                                                  \
    if (rc_ != RT_OK) {                                                             \
      fprintf(stderr, "%s:%d: %s failed (%d): %s\n", __FILE__, __LINE__, #call,     \
              rc_, rt_last_error());                                               \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)

/* A runtime call that must fail with code and a message containing each of
 * the NULL-terminated substrings. */
#define ASSERT_FAILS(code, call, ...)                                               \
  do {                                                                              \
    rt_clear_error();                                                               \
    int rc_ = (call);                                                               \
    test_checks++;                                                                  \
    const char *subs_[] = {__VA_ARGS__, NULL};                                      \
    int bad_ = rc_ != (code);                                                       \
    for (int i_ = 0; subs_[i_]; i_++)                                               \
      bad_ |= strstr(rt_last_error(), subs_[i_]) == NULL;                           \
    if (getenv("RT_TEST_VERBOSE"))                                                  \
      fprintf(stderr, "%s:%d: expected error: %s\n", __FILE__, __LINE__,            \
              rt_last_error());                                                    \
    if (bad_) {                                                                     \
      fprintf(stderr, "%s:%d: %s => code %d (want %d), message \"%s\"\n", __FILE__, \
              __LINE__, #call, rc_, (code), rt_last_error());                      \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)

#define TEST_MAIN_END()                                                             \
  do {                                                                              \
    printf("%s: %d checks, %d failed\n", __FILE__, test_checks, test_failures);     \
    return test_failures ? 1 : 0;                                                   \
  } while (0)

/* Deterministic N(0, std) data, independent of libc rand. */
static inline void randn64(double *x, size_t n, double std, uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    x[i] = std * rt_rng_normal(seed, 77, i);
}

static inline void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* Arrays agree when |a-b| <= atol + rtol*|b| everywhere; reports the worst. */
static inline void check_close64(const char *what, const double *a, const double *b,
                                 size_t n, double rtol, double atol, const char *file,
                                 int line) {
  test_checks++;
  size_t worst = 0;
  double worst_ex = -1;
  for (size_t i = 0; i < n; i++) {
    double ex = fabs(a[i] - b[i]) - (atol + rtol * fabs(b[i]));
    if (!(ex <= worst_ex) || isnan(a[i]) != isnan(b[i])) {
      worst_ex = isnan(ex) ? INFINITY : ex;
      worst = i;
    }
  }
  if (n && worst_ex > 0) {
    fprintf(stderr, "%s:%d: %s: element %zu is %.12g, expected %.12g (rtol %g, atol %g)\n",
            file, line, what, worst, a[worst], b[worst], rtol, atol);
    test_failures++;
  }
}
#define CHECK_CLOSE64(what, a, b, n, rtol, atol)                                    \
  check_close64(what, a, b, n, rtol, atol, __FILE__, __LINE__)

static inline void check_close32(const char *what, const float *a, const double *b,
                                 size_t n, double rtol, double atol, const char *file,
                                 int line) {
  double *tmp = xcalloc(n, sizeof *tmp);
  rt_f32_to_f64(tmp, a, n);
  check_close64(what, tmp, b, n, rtol, atol, file, line);
  free(tmp);
}
#define CHECK_CLOSE32(what, a, b, n, rtol, atol)                                    \
  check_close32(what, a, b, n, rtol, atol, __FILE__, __LINE__)

/* Central finite differences of a scalar loss f(ctx) with respect to x,
 * compared with an analytic gradient. At most max_checks elements, spread
 * over x; the error is relative to max(|analytic|, |numeric|, 1e-2·max|grad|). */
typedef double (*LossFn)(void *ctx);

static inline void fd_check(const char *what, LossFn f, void *ctx, double *x, size_t n,
                            const double *grad, size_t max_checks, double tol,
                            const char *file, int line) {
  const double h = 1e-5;
  double gmax = 0;
  for (size_t i = 0; i < n; i++)
    gmax = fmax(gmax, fabs(grad[i]));
  size_t step = n > max_checks ? n / max_checks : 1;
  double worst = 0;
  size_t worst_i = 0;
  double worst_a = 0, worst_n = 0;
  for (size_t i = (step > 1 ? step / 2 : 0); i < n; i += step) {
    double x0 = x[i];
    x[i] = x0 + h;
    double lp = f(ctx);
    x[i] = x0 - h;
    double lm = f(ctx);
    x[i] = x0;
    double num = (lp - lm) / (2 * h);
    double denom = fmax(fmax(fabs(num), fabs(grad[i])), fmax(1e-2 * gmax, 1e-12));
    double err = fabs(num - grad[i]) / denom;
    if (!(err <= worst)) {
      worst = err;
      worst_i = i, worst_a = grad[i], worst_n = num;
    }
  }
  test_checks++;
  if (!(worst <= tol)) {
    fprintf(stderr, "%s:%d: %s: gradient element %zu is %.10g, finite difference %.10g (rel err %.3g > %g)\n",
            file, line, what, worst_i, worst_a, worst_n, worst, tol);
    test_failures++;
  }
  if (gmax == 0) {
    fprintf(stderr, "%s:%d: %s: gradient is all zero (test is vacuous)\n", file, line, what);
    test_failures++;
  }
}
#define FD_CHECK(what, f, ctx, x, n, grad, max_checks)                              \
  fd_check(what, f, ctx, x, n, grad, max_checks, 1e-6, __FILE__, __LINE__)

/* A fresh scratch directory, removed by test_tmpdir_remove. */
static inline const char *test_tmpdir(void) {
  static char dir[64];
  snprintf(dir, sizeof dir, "/tmp/shardrt_test_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(2);
  }
  return dir;
}

static inline void test_tmpdir_remove(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "warning: could not remove %s\n", dir);
}

static inline void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
    perror(path);
    exit(2);
  }
}

#endif
