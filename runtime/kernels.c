/* kernels.c — instantiates every kernel twice from the k_*.inc templates:
 * REAL = float with the _f32 suffix, REAL = double with _f64. */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "rt_internal.h"

#define FN(name) RT_CAT(name, SFX)

#define REAL float
#define SFX _f32
#define GEMM cblas_sgemm
#define EXP expf
#define LOG logf
#define SQRT sqrtf
#define TANH tanhf
#include "k_matmul.inc"
#include "k_norm.inc"
#include "k_act.inc"
#include "k_embed.inc"
#include "k_attention.inc"
#include "k_loss.inc"
#include "k_optim.inc"
#undef REAL
#undef SFX
#undef GEMM
#undef EXP
#undef LOG
#undef SQRT
#undef TANH

#define REAL double
#define SFX _f64
#define GEMM cblas_dgemm
#define EXP exp
#define LOG log
#define SQRT sqrt
#define TANH tanh
#include "k_matmul.inc"
#include "k_norm.inc"
#include "k_act.inc"
#include "k_embed.inc"
#include "k_attention.inc"
#include "k_loss.inc"
#include "k_optim.inc"
