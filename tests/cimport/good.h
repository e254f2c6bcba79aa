/* good.h — functions that shardc must import; the unit test also compiles
 * this file as C and compares the imported expressions with it. */
#ifndef SHARDC_TEST_GOOD_H
#define SHARDC_TEST_GOOD_H

#include <math.h>

#define SQ(a) ((a) * (a))
#define SQ_BARE(a) a * a
#define GELU_C 0.044715f
#define SQRT_2_OVER_PI 0.7978845608028654

enum { TWO = 2 };
static const float half = 0.5f;

static inline float softplus(float x) { return logf(1 + expf(x)); }

static inline float mish(float x) { return x * tanhf(logf(1 + expf(x))); }

static inline float mish_nested(float x) { return x * tanhf(softplus(x)); }

static inline float gelu_tanh(float x) {
  const float inner = (float)SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
  return half * x * (1.0f + tanhf(inner));
}

static inline float gelu_pi(float x) {
  return 0.5f * x * (1.0f + tanhf(sqrtf(2.0f / (float)M_PI) * (x + GELU_C * x * x * x)));
}

static inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x / sqrtf(2.0f))); }

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static inline float swish(float x, float beta) { return x * sigmoid(beta * x); }

/* Two arguments, locals, doubles and every unary math function. */
static inline double mix(double a, float b) {
  const double s = sin(a) * cosf(b);
  float t = sqrtf(a * a + b * b + 1);
  const float u = fabsf(b) + tanh(a / 3) + exp(-a * a);
  float v = log(t) + s * u;
  return v / t + SQ(a - b) * 1e-3;
}

static inline float leaky_relu(float x) { return x > 0 ? x : 0.01f * x; }

static inline float relu6(float x) { return fminf(fmaxf(x, 0.0f), 6.0f); }

static inline float hardish(float x) {
  if (x < -1.0f) return -1.0f;
  else if (x > 1.0f) return 1.0f;
  return x * (1.5f - 0.5f * x * x);
}

static inline float branches(float x, float y) {
  float r;
  if (x > y && !(y < -2)) {
    r = x * y;
  } else {
    r = x - y;
    if (r > 1 || x == 0) r = r * r;
  }
  r += 1;
  r *= 2;
  r -= x;
  r /= 3;
  return r;
}

static inline float powers(float x, float y) {
  return powf(x, 3.0f) + powf(x, y) + pow(2.0f, y) + powf(x, TWO) + powf(x, 0.5f) + powf(y, -1);
}

static inline float macro_ops(float x) { return SQ(x + 1) - SQ_BARE(x) + -SQ(x); }

static inline float int_consts(float x) {
  return x * (1 / 2) + x * (3 / 2) + (x > 0) * TWO + (float)sizeof(float);
}

static inline float extras(float x) {
  return log1pf(x * x) + expm1f(x) + tanhf(x) + sinhf(x) + coshf(x) + exp2f(x) + log2f(2 + x * x)
         + log10f(1 + x * x) + tanf(0.3f * x);
}

static inline float static_local(float x) {
  static const float k = 3.0f;
  (void)x;
  return k * x;
}

typedef float real;

/* Operators written every which way, typedefs, blocks, ++ and compound
 * assignment. */
static inline real syntax_zoo(real x, const double y) {
  real a = x*-y, b = (x)-(y);
  float c = x/ /* comment */ (1+y*y);
  c++;
  c--;
  ++c;
  a -= !x + !(y > 2);
  b = +b - -a;
  ;
  {
    float inner = a * b;
    c += inner;
  }
  if (c > 100) c = 100;
  return a + b + c + (x >= y) - (x != y) + (x < 0 ? -x : +x) * 0.25e1f;
}

static inline float square(float x) { return x * x; }

static inline float no_args(void) { return 42.0f; }

#endif
