/* kernels.c — instantiates every kernel twice from the k_*.inc templates:
 * REAL = float with the _f32 suffix, REAL = double with _f64.
 *
 * The f32 kernels take exp from the branch-free function below, which the
 * compiler vectorizes (libm's is a scalar call); the f64 kernels, there for
 * gradient checks, keep libm's. */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "rt_internal.h"
#include "rt_optim.h"

/* LAPACK (in OpenBLAS): the symmetric eigendecomposition of Shampoo's roots. */
void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
             double *w, double *work, const int *lwork, int *iwork, const int *liwork, int *info);

#define FN(name) RT_CAT(name, SFX)

/* exp(x) in float, within 1.4 ulp of the exact value (Cephes expf: Cody-Waite
 * reduction by ln 2, degree-6 polynomial, scaling by 2^n through the exponent
 * bits). Exactly 0 below -87.33 (so exp(-inf) = 0), saturates near 2.2e38
 * above 88.3 instead of overflowing, NaN stays NaN. */
static inline float rt_expf_(float x0) {
  float x = x0 < -87.33f ? -87.33f : x0; // selects between values only: the loop vectorizes
  x = x > 88.3f ? 88.3f : x;
  // t's low mantissa bits hold n = round(x / ln 2), without a float->int conversion
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
  uint32_t sbits = (bits << 23) + (127u << 23); // 2^n
  float s;
  memcpy(&s, &sbits, sizeof s);
  float y = p * s; // computed on every lane, then selected (no product under a branch)
  return x0 < -87.33f ? 0.0f : y;
}

#define REAL float
#define SFX _f32
#define GEMM cblas_sgemm
#define SYRK cblas_ssyrk
#define EXP rt_expf_
#define LOG logf
#define SQRT sqrtf
#include "k_common.inc"
#include "k_matmul.inc"
#include "k_norm.inc"
#include "k_act.inc"
#include "k_embed.inc"
#include "k_attention.inc"
#include "k_loss.inc"
#include "k_optim.inc"
#include "k_optim2.inc"
#undef REAL
#undef SFX
#undef GEMM
#undef SYRK
#undef EXP
#undef LOG
#undef SQRT
#undef RT_LANES

#define REAL double
#define SFX _f64
#define GEMM cblas_dgemm
#define SYRK cblas_dsyrk
#define EXP exp
#define LOG log
#define SQRT sqrt
#include "k_common.inc"
#include "k_matmul.inc"
#include "k_norm.inc"
#include "k_act.inc"
#include "k_embed.inc"
#include "k_attention.inc"
#include "k_loss.inc"
#include "k_optim.inc"
#include "k_optim2.inc"
