/* acts.h — activation functions imported by the samples with
 * `use mish from "acts.h"`.  shardc reads these bodies with libclang and
 * differentiates them; they are ordinary C and compile as such. */
#ifndef SHARDC_SAMPLES_ACTS_H
#define SHARDC_SAMPLES_ACTS_H

#include <math.h>

/* softplus(x) = log(1 + e^x) */
static inline float softplus(float x) { return logf(1.0f + expf(x)); }

/* Mish (Misra 2019): x * tanh(softplus(x)). */
static inline float mish(float x) { return x * tanhf(softplus(x)); }

/* Swish with a trainable-style slope: x * sigmoid(b x). */
static inline float swish_beta(float x, float b) {
  const float s = 1.0f / (1.0f + expf(-b * x));
  return x * s;
}

#endif
