/* kernels.c — instantiates every kernel twice from the k_*.inc templates:
 * REAL = float with the _f32 suffix, REAL = double with _f64.
 *
 * The f32 kernels take exp from rt_math.h's branch-free function, which the
 * compiler vectorizes (libm's is a scalar call); the f64 kernels, there for
 * gradient checks, keep libm's. */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "rt_internal.h"
#include "rt_math.h"
#include "rt_optim.h"

/* LAPACK (in OpenBLAS): the symmetric eigendecomposition of Shampoo's roots. */
void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
             double *w, double *work, const int *lwork, int *iwork, const int *liwork, int *info);

#define FN(name) RT_CAT(name, SFX)

#define REAL float
#define SFX _f32
#define GEMM cblas_sgemm
#define SYRK cblas_ssyrk
#define EXP rt_expf
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
