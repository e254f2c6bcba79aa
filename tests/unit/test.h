/* test.h — tiny unit-test helpers in the chibicc spirit. */
#ifndef SHARDC_TEST_H
#define SHARDC_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define ASSERT_NEAR(expected, actual, tol)                                          \
  do {                                                                              \
    double e_ = (expected), a_ = (actual);                                          \
    test_checks++;                                                                  \
    if (!(fabs(e_ - a_) <= (tol))) {                                                \
      fprintf(stderr, "%s:%d: %s => %.10g expected but got %.10g (tol %g)\n",       \
              __FILE__, __LINE__, #actual, e_, a_, (double)(tol));                  \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)

#define TEST_MAIN_END()                                                             \
  do {                                                                              \
    printf("%s: %d checks, %d failed\n", __FILE__, test_checks, test_failures);     \
    return test_failures ? 1 : 0;                                                   \
  } while (0)

#endif
