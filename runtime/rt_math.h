/* rt_math.h — exp and tanh in float, branch-free, so that a loop calling
 * them vectorizes (libm's expf and tanhf are scalar calls: a generated
 * fused GELU loop spent most of its time in tanhf).  Used by the f32
 * kernels (kernels.c) and by the fused elementwise loops of generated cpu
 * programs (codegen/cexpr.c writes rt_expf/rt_tanhf there); `shardc
 * calibrate` times these, as the loops call them.
 *
 * Every select below chooses between values computed on every lane; built
 * with -fno-trapping-math (as the kernels and programs are) gcc turns them
 * into vector blends. */
#ifndef SHARDC_RT_MATH_H
#define SHARDC_RT_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) within 1.4 ulp of the exact value (Cephes expf: Cody-Waite
 * reduction by ln 2, degree-6 polynomial, scaling by 2^n through the
 * exponent bits).  Exactly 0 below -87.33 (so exp(-inf) = 0), saturates
 * near 2.2e38 above 88.3 instead of overflowing, NaN stays NaN. */
static inline float rt_expf(float x0) {
  float x = x0 < -87.33f ? -87.33f : x0;
  x = x > 88.3f ? 88.3f : x;
  /* t's low mantissa bits hold n = round(x / ln 2), without a float->int
   * conversion */
  float t = x * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  uint32_t bits;
  memcpy(&bits, &t, sizeof bits);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  uint32_t sbits = (bits << 23) + (127u << 23); /* 2^n */
  float s;
  memcpy(&s, &sbits, sizeof s);
  float y = p * s;
  return x0 < -87.33f ? 0.0f : y;
}

/* tanh(x) within 2 ulp: below |x| = 0.625 Cephes tanhf's odd polynomial
 * (no cancellation near 0), above it 1 - 2/(exp(2|x|) + 1) with the sign of
 * x.  |x| is capped at 10 for the exp (tanh 10 rounds to 1 in float), so
 * nothing overflows or goes subnormal; ±0 keeps its sign, NaN stays NaN. */
static inline float rt_tanhf(float x) {
  float a = fabsf(x);
  float ac = a > 10.0f ? 10.0f : a;
  float e = rt_expf(2.0f * ac);
  float big = 1.0f - 2.0f / (e + 1.0f);
  float z = a * a;
  float p = -5.70498872745E-3f;
  p = p * z + 2.06390887954E-2f;
  p = p * z - 5.37397155531E-2f;
  p = p * z + 1.33314422036E-1f;
  p = p * z - 3.33332819422E-1f;
  float small = p * z * a + a;
  return copysignf(a < 0.625f ? small : big, x);
}

#endif
