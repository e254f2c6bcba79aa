/* k_matmul.cu — linear layers and GEMM (rt_matmul_forward/backward, rt_gemm)
 * on cuBLASLt, fp32 with TF32 off, and the bias gradient by a fixed-order
 * reduction kernel.
 *
 * Every GEMM goes through one helper, rtc_gemm_, which turns the row-major
 * call into the column-major one the libraries take (a row-major X (r,c) is
 * the column-major Xᵀ, so c = op(a)·op(b) is cᵀ = op(b)ᵀ·op(a)ᵀ: b first,
 * a second, m = N, n = M).  The GPU build calls cublasLtMatmul; the host
 * build (RTC_HOST) calls cblas_sgemm (OpenBLAS) with the same column-major
 * arguments, so CI checks the swap.
 *
 * Why fp32 with CUBLAS_COMPUTE_32F and not _FAST_TF32: this mode exists to
 * check the CUDA target against the cpu target within 1e-5; TF32's 10-bit
 * mantissa would not.  (On Blackwell, the CUBLAS_EMULATE_SINGLE_PRECISION
 * environment variable could still switch fp32 to BF16x9 emulation.)
 *
 * Determinism: the algorithm for a shape is chosen once (the plan cache
 * below) and split-K schemes that reduce in place through the output buffer
 * are excluded, so a GEMM is bitwise the same run to run on one GPU model.
 * The choice is cuBLASLt heuristic's first, or (rtc_gemm_tune, the default
 * of training programs) the fastest of its candidates timed in the first
 * step, agreed over the ranks and kept in a file that later runs read
 * (train.c's gemm_setup/gemm_agree, runtime/gemm_algos.h).
 * The bias gradient does not use the BGRADB epilogue: the epilogue writes
 * (the backward accumulates), its summation order is not documented, and
 * the reduction kernel here also runs, and is tested, in the host build.
 * No atomics anywhere in this file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "rtc_bf16_io.cuh"
#include "rtc_train.h"

#ifdef RTC_HOST

/* GELU's tanh form, as the cpu kernel (k_act.inc) and cuBLASLt's epilogues
 * compute it: gelu(x) = 0.5·x·(1 + tanh u), u = √(2/π)·(x + 0.044715·x³), and
 * its derivative; the host twin's epilogues. */
static inline float rtc_gelu_f_(float x) {
  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
static inline float rtc_dgelu_f_(float x) {
  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x), t = tanhf(u);
  float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
#include <cblas.h>
#else
#include <cublasLt.h>
#endif

/* ---------------------------------------------------------------------------
 * The workspace: RTC_MM_WS_BYTES (rtc_ws.h: 32 MiB, what cuBLAS recommends
 * on Hopper) of the program's kernel workspace, given to every cuBLASLt
 * call and used between calls, in stream order, for the bias gradient's
 * partial sums.
 */
static void *rtc_mm_ws_;
static size_t rtc_mm_ws_cap_;

static void *rtc_mm_workspace_(void) {
  return rtc_ws_scratch(rtc_ws_matmul(), &rtc_mm_ws_, &rtc_mm_ws_cap_, "cuBLASLt workspace", __FILE__,
                        __LINE__);
}

/* ---------------------------------------------------------------------------
 * Kernels: the bias gradient, and the fills for empty sums.
 */

#define RTC_DB_COLS 32   // columns per block of the bias gradient: one warp across
#define RTC_DB_LANES 8   // row lanes per block (threadIdx.y)
#define RTC_DB_ROWS 256  // rows per split, at least
#define RTC_DB_SPLITS 64 // splits, at most

// Element loads and stores of the kernels below: fp32, or bf16 storage
// (widened on load, rounded to nearest even on store).
__device__ __forceinline__ float rtc_mm_ld(const float *p) { return *p; }
__device__ __forceinline__ float rtc_mm_ld(const rtc_bf16 *p) { return rtc_bf2f(*p); }
__device__ __forceinline__ void rtc_mm_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void rtc_mm_st(rtc_bf16 *p, float v) { *p = rtc_f2bf(v); }

// dout is (N,OC) of T (float or rtc_bf16); block (bx, by) sums columns
// [32·bx, 32·bx+32) over rows [by·rows, by·rows+rows) in fp32: lane y takes
// rows y, y+8, ... in order, then the 8 lanes add in order.  One split
// (gridDim.y == 1): adds into dbias (OC); else writes part (gridDim.y, OC).
template <class T>
__global__ void rtc_dbias_part_kernel(float *__restrict__ out, const T *__restrict__ dout, int N,
                                      int OC, int rows) {
  __shared__ float lane_sum[RTC_DB_LANES][RTC_DB_COLS];
  int o = blockIdx.x * RTC_DB_COLS + threadIdx.x;
  int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float s = 0.0f;
  if (o < OC)
    for (int r = r0 + (int)threadIdx.y; r < r1; r += RTC_DB_LANES)
      s += rtc_mm_ld(dout + (size_t)r * OC + o);
  lane_sum[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    float t = lane_sum[0][threadIdx.x];
    for (int y = 1; y < RTC_DB_LANES; y++)
      t += lane_sum[y][threadIdx.x];
    if (gridDim.y == 1)
      out[o] += t;
    else
      out[(size_t)blockIdx.y * OC + o] = t;
  }
}

// The same on 16-byte vectors (OC % RTC_VEC(T) == 0, dout 16-byte aligned):
// thread x takes RTC_VEC(T) adjacent columns, so a block covers 32·V of
// them; each column's sum is the scalar kernel's, in the same order (its
// bits).
template <class T>
__global__ void rtc_dbias_part_vec_kernel(float *__restrict__ out, const T *__restrict__ dout,
                                          int N, int OC, int rows) {
  constexpr int V = RTC_VEC(T);
  __shared__ float lane_sum[RTC_DB_LANES][RTC_DB_COLS * V];
  int o = (blockIdx.x * RTC_DB_COLS + threadIdx.x) * V;
  int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float s[V], f[V];
  for (int k = 0; k < V; k++) s[k] = 0.0f;
  if (o < OC)
    for (int r = r0 + (int)threadIdx.y; r < r1; r += RTC_DB_LANES) {
      rtc_ldv(f, dout + (size_t)r * OC + o);
      for (int k = 0; k < V; k++) s[k] += f[k];
    }
  for (int k = 0; k < V; k++) lane_sum[threadIdx.y][threadIdx.x * V + k] = s[k];
  __syncthreads();
  if (threadIdx.y == 0 && o < OC)
    for (int k = 0; k < V; k++) {
      float t = lane_sum[0][threadIdx.x * V + k];
      for (int y = 1; y < RTC_DB_LANES; y++)
        t += lane_sum[y][threadIdx.x * V + k];
      if (gridDim.y == 1)
        out[o + k] += t;
      else
        out[(size_t)blockIdx.y * OC + o + k] = t;
    }
}

// part is (nsplit, OC), dbias is (OC): dbias[o] += Σ_s part[s][o], s in order
__global__ void rtc_dbias_sum_kernel(float *__restrict__ dbias, const float *__restrict__ part,
                                     int nsplit, int OC) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC)
    return;
  float t = part[o];
  for (int s = 1; s < nsplit; s++)
    t += part[(size_t)s * OC + o];
  dbias[o] += t;
}

// out is (N,OC) of T: every row = bias (OC), or 0 without a bias
template <class T>
__global__ void rtc_rows_fill_kernel(T *__restrict__ out, const float *__restrict__ bias, int N,
                                     int OC) {
  size_t total = (size_t)N * OC;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    rtc_mm_st(out + i, bias ? bias[i % OC] : 0.0f);
}

// d[i] += s[i], i < n (a bias gradient from a GEMM's epilogue, which writes)
__global__ void rtc_acc_f32_kernel(float *__restrict__ d, const float *__restrict__ s, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    d[i] += s[i];
}

// d (n) = s rounded to bf16: a bias for cuBLASLt's epilogue of a bf16 D
__global__ void rtc_round_bf16_kernel(rtc_bf16 *__restrict__ d, const float *__restrict__ s,
                                      int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] = rtc_f2bf(s[i]);
}

// The scratch after the workspace (RTC_MM_BIAS_BYTES, rtc_ws.h): an
// epilogue's bf16 bias, or the fp32 bias gradient an epilogue writes.
static void *rtc_mm_bias_scratch_(void) { return (char *)rtc_mm_workspace_() + RTC_MM_WS_BYTES; }

// bias (OC) rounded to bf16 into that scratch (OC·2 <= RTC_MM_BIAS_BYTES):
// the bias of D's type that a bf16 GEMM's bias epilogue takes
static rtc_bf16 *rtc_bias16_(const float *bias, int OC) {
  rtc_bf16 *b16 = (rtc_bf16 *)rtc_mm_bias_scratch_();
  RTC_LAUNCH(rtc_round_bf16_kernel, rtc_blocks((size_t)OC, 256), 256, 0, b16, bias, OC);
  return b16;
}

// out is (N,OC) bf16, bias (OC) fp32: out = bf16(out + bias), the sum in fp32
// (cuBLASLt's bias epilogue takes a bias of D's type, bf16 here; see below)
__global__ void rtc_bias_add_bf16_kernel(rtc_bf16 *__restrict__ out,
                                         const float *__restrict__ bias, int N, int OC) {
  size_t total = (size_t)N * OC;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = rtc_f2bf(rtc_bf2f(out[i]) + bias[i % OC]);
}

// The same on rows of 16-byte vectors (OC % 8 == 0, out 16-byte aligned):
// grid (vectors of a row / blockDim.x, rows), no division by OC per element
// (124 ms of GPT-2's step on the H200 element by element, 3.5%)
__global__ void rtc_bias_add_bf16_vec_kernel(rtc_bf16 *__restrict__ out,
                                             const float *__restrict__ bias, int N, int OC) {
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
  if (c >= OC) return;
  float b[8], f[8];
  for (int k = 0; k < 8; k++) b[k] = __ldg(bias + c + k);
  for (int n = blockIdx.y; n < N; n += gridDim.y) {
    rtc_bf16 *p = out + (size_t)n * OC + c;
    rtc_ldv(f, p);
    for (int k = 0; k < 8; k++) f[k] += b[k];
    rtc_stv(p, f);
  }
}

// c is (M,N) of T with leading dim ldc: c = beta·c (0 for beta 0, NaNs
// included), the product rounded once from double as the cpu kernel does
template <class T>
__global__ void rtc_scale_rows_kernel(T *c, int M, int N, int ldc, double beta) {
  size_t total = (size_t)M * N;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    T *p = c + (i / N) * ldc + i % N;
    rtc_mm_st(p, beta == 0 ? 0.0f : (float)(beta * rtc_mm_ld(p)));
  }
}

// dout is (N,OC) of T, dbias is (OC): dbias += Σ_n dout, in fp32, in an
// order that depends on N and OC only
template <class T>
static void rtc_dbias_(float *dbias, const T *dout, int N, int OC) {
  int nsplit = (N + RTC_DB_ROWS - 1) / RTC_DB_ROWS;
  if (nsplit > RTC_DB_SPLITS)
    nsplit = RTC_DB_SPLITS;
  while (nsplit > 1 && (size_t)nsplit * OC * sizeof(float) > RTC_MM_WS_BYTES)
    nsplit /= 2;
  int rows = (N + nsplit - 1) / nsplit;
  const bool vec = rtc_rows_vec_ok<T>(OC, {dout});
  const int cols = vec ? RTC_DB_COLS * RTC_VEC(T) : RTC_DB_COLS;
  dim3 grid((OC + cols - 1) / cols, nsplit), block(RTC_DB_COLS, RTC_DB_LANES);
  float *part = nsplit == 1 ? dbias : (float *)rtc_mm_workspace_();
  if (vec)
    RTC_LAUNCH(rtc_dbias_part_vec_kernel<T>, grid, block, 0, part, dout, N, OC, rows);
  else
    RTC_LAUNCH(rtc_dbias_part_kernel<T>, grid, block, 0, part, dout, N, OC, rows);
  if (nsplit == 1)
    return;
  RTC_LAUNCH(rtc_dbias_sum_kernel, (OC + 255) / 256, 256, 0, dbias, (const float *)part, nsplit,
             OC);
}

/* ---------------------------------------------------------------------------
 * The GEMM helper: row-major c (M,N, ldc) = alpha·op(a)·op(b) + beta·c, plus
 * bias (N) on every row when bias is given (then beta must be 0).  K > 0.
 * Returns 0, having done nothing, when cuBLASLt has no algorithm for the
 * bias epilogue on this shape; fails (rtc_fail) when it has none at all.
 * Not thread-safe (the plan cache): one host thread drives rtc_stream.
 *
 * The storage of the operands, st: 0, everything fp32 (rtc_gemm_bf16 then
 * picks the compute mode); RTC_ST_AB16, a and b are bf16 (precision = bf16
 * storage: CUBLAS_COMPUTE_32F, fp32 accumulation), c fp32 unless also
 * RTC_ST_C16, c bf16 (read as bf16 for beta, the result rounded once).
 * The bias is fp32, or with RTC_ST_BIAS16 bf16 (cuBLASLt's bias of a bf16
 * D: the epilogue adds it in fp32 before the one rounding).  With
 * RTC_ST_BGRAD, bias is instead an output, fp32 like c: the row sums of
 * op(a), bias[i] = Σ_k op(a)[i,k] (cuBLASLt's BGRADB epilogue: its B is our
 * a; the bias gradient of a weight-gradient GEMM dW = doutᵀ·x), written.
 * aux, a matrix of c's type and layout (ldc): with RTC_ST_GELU (beta 0) it
 * gets the pre-activation t = alpha·op(a)·op(b) + bias and c gets gelu(t)
 * (GELU_AUX(_BIAS)); with RTC_ST_DGELU (beta 0) it is read and c gets
 * gelu'(aux) ⊙ alpha·op(a)·op(b) (DGELU).
 */

int rtc_gemm_bf16;

enum { RTC_ST_AB16 = 1, RTC_ST_C16 = 2, RTC_ST_BIAS16 = 4, RTC_ST_BGRAD = 8, RTC_ST_GELU = 16,
       RTC_ST_DGELU = 32 };

// Algorithm choice (rtc_train.h's rtc_gemm_tune; the GPU build's plans):
// candidates timed a shape, whether timing is on, the choices not to time.
#define RTC_GEMM_CANDS 8
static int rtc_tune_on_, rtc_known_now_;
static const RtGemmTable *rtc_known_;

void rtc_gemm_tune(int on, const RtGemmTable *known, int known_now) {
  rtc_tune_on_ = on;
  rtc_known_ = known;
  rtc_known_now_ = known_now;
}

#ifdef RTC_HOST

/* x rounded to bf16 (to nearest, ties to even) and back: what the tensor
 * cores see of an fp32 input under CUBLAS_COMPUTE_32F_FAST_16BF. */
static float rtc_bf16_round_(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) // finite: round the low 16 bits away
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* A column-major matrix of cols columns of rows elements at stride ld,
 * rounded to bf16 into a new buffer (free it). */
static float *rtc_bf16_copy_(const float *x, int rows, int cols, int ld) {
  size_t n = cols ? (size_t)(cols - 1) * (size_t)ld + (size_t)rows : 0;
  float *y = (float *)malloc(n ? n * sizeof(float) : 1);
  if (!y) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
  for (size_t i = 0; i < n; i++) y[i] = rtc_bf16_round_(x[i]);
  return y;
}

/* A column-major bf16 matrix (as rtc_bf16_copy_) widened to fp32 into a new
 * buffer (free it); beyond each column's rows, zeros. */
static float *rtc_bf16_widen_(const rtc_bf16 *x, int rows, int cols, int ld) {
  size_t n = cols ? (size_t)(cols - 1) * (size_t)ld + (size_t)rows : 0;
  float *y = (float *)calloc(n ? n : 1, sizeof(float));
  if (!y) rtc_fail("host", "calloc", "out of memory", __FILE__, __LINE__, "");
  for (size_t j = 0; j < (size_t)cols; j++)
    for (size_t i = 0; i < (size_t)rows; i++) y[j * ld + i] = rtc_bf2f(x[j * ld + i]);
  return y;
}

static void rtc_gemm_now_(int ta, int tb, int M, int N, int K, float alpha, const void *a,
                          int lda, const void *b, int ldb, float beta, void *c, int ldc,
                          const void *bias, int bf16, int st, void *aux) {
  // the column-major call of the GPU build: cᵀ (N,M) = op(b)ᵀ (N,K) · op(a)ᵀ (K,M)
  float *ra = NULL, *rb = NULL, *rc = NULL;
  if (st & RTC_ST_AB16) { // bf16 storage: the values widened, exact in fp32
    ra = rtc_bf16_widen_((const rtc_bf16 *)a, ta ? M : K, ta ? K : M, lda);
    rb = rtc_bf16_widen_((const rtc_bf16 *)b, tb ? K : N, tb ? N : K, ldb);
  } else if (bf16) {
    ra = rtc_bf16_copy_((const float *)a, ta ? M : K, ta ? K : M, lda);
    rb = rtc_bf16_copy_((const float *)b, tb ? K : N, tb ? N : K, ldb);
  }
  if (st & RTC_ST_C16) // c in fp32 for the product, rounded back once below
    rc = rtc_bf16_widen_((const rtc_bf16 *)c, N, M, ldc);
  const float *fa = ra ? ra : (const float *)a, *fb = rb ? rb : (const float *)b;
  float *fc = rc ? rc : (float *)c;
  if (rtc_prof_on) rtc_prof_begin();
  cblas_sgemm(CblasColMajor, tb ? CblasTrans : CblasNoTrans, ta ? CblasTrans : CblasNoTrans, N,
              M, K, alpha, fb, ldb, fa, lda, beta, fc, ldc);
  if (rtc_prof_on) rtc_prof_end(__FILE__, "cblas_sgemm (cuBLASLt's host twin)");
  if (bias && (st & RTC_ST_BGRAD)) // BGRADB: op(a)'s row sums, in fp32, k in order
    for (int i = 0; i < M; i++) {
      float g = 0.0f;
      for (int k = 0; k < K; k++) g += ta ? fa[(size_t)k * lda + i] : fa[(size_t)i * lda + k];
      ((float *)bias)[i] = g;
    }
  free(ra);
  free(rb);
  if (bias && !(st & RTC_ST_BGRAD)) // the epilogue: added after alpha·op(a)·op(b), in fp32
    for (size_t i = 0; i < (size_t)M; i++)
      for (int j = 0; j < N; j++)
        fc[i * ldc + j] += st & RTC_ST_BIAS16 ? rtc_bf2f(((const rtc_bf16 *)bias)[j])
                                              : ((const float *)bias)[j];
  if (aux && (st & (RTC_ST_GELU | RTC_ST_DGELU))) // in fp32, c rounded once below
    for (size_t i = 0; i < (size_t)M; i++)
      for (int j = 0; j < N; j++) {
        size_t k = i * ldc + j;
        if (st & RTC_ST_GELU) {
          if (st & RTC_ST_C16) ((rtc_bf16 *)aux)[k] = rtc_f2bf(fc[k]);
          else ((float *)aux)[k] = fc[k];
          fc[k] = rtc_gelu_f_(fc[k]);
        } else {
          float x = st & RTC_ST_C16 ? rtc_bf2f(((const rtc_bf16 *)aux)[k]) : ((float *)aux)[k];
          fc[k] *= rtc_dgelu_f_(x);
        }
      }
  if (rc) {
    rtc_bf16 *c16 = (rtc_bf16 *)c;
    for (size_t i = 0; i < (size_t)M; i++)
      for (int j = 0; j < N; j++)
        c16[i * ldc + j] = rtc_f2bf(rc[i * ldc + j]);
    free(rc);
  }
}

// on rtc_stream: now, or recorded while a capture is open
static int rtc_gemm_st_(int ta, int tb, int M, int N, int K, float alpha, const void *a, int lda,
                        const void *b, int ldb, float beta, void *c, int ldc, const void *bias,
                        int st, void *aux = NULL) {
  int bf16 = rtc_gemm_bf16;
  rtch_enqueue([=]() {
    rtc_gemm_now_(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, bias, bf16, st, aux);
  });
  return 1;
}

// The host twin has one algorithm (OpenBLAS's): nothing to choose.
int rtc_gemm_choices(RtGemmTable *t) {
  t->n = 0;
  return 0;
}
int rtc_gemm_adopt(const RtGemmTable *t) {
  (void)t;
  return 0;
}
long rtc_gemm_lib_version(void) { return 0; }

#else

#define cublasCheck(call)                                                                 \
  do {                                                                                    \
    cublasStatus_t rtc_s_ = (call);                                                       \
    if (rtc_s_ != CUBLAS_STATUS_SUCCESS)                                                  \
      rtc_fail("cuBLASLt", #call, cublasLtGetStatusString(rtc_s_), __FILE__, __LINE__,    \
               rtc_hint("cuBLASLt", (int)rtc_s_));                                        \
  } while (0)

/* A plan: the descriptors and the algorithm for one shape, kept for the
 * life of the process (cuBLASLt's heuristic costs tens of microseconds, and
 * fixing the algorithm keeps results bitwise repeatable).  The pointers'
 * alignments are part of the key because the heuristic picks algorithms by
 * them (cuBLASLt assumes 256-byte alignment unless told). */
typedef struct {
  int ta, tb, M, N, K, lda, ldb, ldc, bias, bf16, st;
  int align_a, align_b, align_c, align_bias, align_aux;
} RtcGemmKey;

typedef struct {
  RtcGemmKey key;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lb, la, lc; // cuBLASLt's A is our b, its B our a
  cublasLtMatmulAlgo_t algo;         // what the calls run
  int found; // 0: no algorithm (kept, so that the heuristic is not asked again)
  // the heuristic's candidates (cand[0] its first) and what timing them found
  cublasLtMatmulAlgo_t cand[RTC_GEMM_CANDS];
  int ncand, best, timed;
  const RtGemmChoice *known; // the file's choice (rtc_known_), kept for it, not timed
  float ms, ms_first;
} RtcGemmPlan;
static_assert(sizeof(RtcGemmKey) == RT_GEMM_KEY_INTS * sizeof(int32_t), "gemm_algos.h's key");
static_assert(sizeof(cublasLtMatmulAlgo_t) == RT_GEMM_ALGO_WORDS * sizeof(uint64_t),
              "gemm_algos.h's algorithm");

#define RTC_GEMM_PLANS 64 // a model has a few dozen distinct GEMM shapes

static cublasLtHandle_t rtc_lt_;
static RtcGemmPlan rtc_plans_[RTC_GEMM_PLANS];
static int rtc_nplans_, rtc_plan_next_;

// the largest power of two, at most 256, that divides the address (at
// least 2: the size of the smallest element, bf16)
static int rtc_align_(const void *p) {
  uintptr_t u = (uintptr_t)p;
  int al = 256;
  while (al > 2 && u % (uintptr_t)al)
    al /= 2;
  return al;
}

static void rtc_plan_free_(RtcGemmPlan *p) {
  cublasCheck(cublasLtMatmulDescDestroy(p->op));
  cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
  cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
  cublasCheck(cublasLtMatrixLayoutDestroy(p->lc));
}

// p runs c's algorithm from now on (1), or keeps its own (0): the same, or
// one that cuBLASLt's check refuses for p (from a file, or another rank's
// GPU: the heuristic's first stays).
static int rtc_gemm_use_(RtcGemmPlan *p, const RtGemmChoice *c) {
  cublasLtMatmulAlgo_t algo;
  memcpy(&algo, c->algo, sizeof algo);
  if (!memcmp(&algo, &p->algo, sizeof algo))
    return 0;
  cublasLtMatmulHeuristicResult_t res;
  cublasStatus_t st = cublasLtMatmulAlgoCheck(rtc_lt_, p->op, p->lb, p->la, p->lc, p->lc, &algo,
                                              &res);
  if (st != CUBLAS_STATUS_SUCCESS || res.workspaceSize > RTC_MM_WS_BYTES)
    return 0;
  p->algo = algo;
  return 1;
}

// The plan for key: found, or made (evicting the oldest when the cache is full).
static RtcGemmPlan *rtc_plan_(const RtcGemmKey *key, const void *bias, const void *aux) {
  for (int i = 0; i < rtc_nplans_; i++)
    if (!memcmp(&rtc_plans_[i].key, key, sizeof *key))
      return &rtc_plans_[i];
  if (!rtc_lt_)
    cublasCheck(cublasLtCreate(&rtc_lt_));
  RtcGemmPlan *p;
  if (rtc_nplans_ < RTC_GEMM_PLANS) {
    p = &rtc_plans_[rtc_nplans_++];
  } else {
    p = &rtc_plans_[rtc_plan_next_];
    rtc_plan_next_ = (rtc_plan_next_ + 1) % RTC_GEMM_PLANS;
    rtc_plan_free_(p);
  }
  memset(p, 0, sizeof *p);
  p->key = *key;
  cublasOperation_t opb = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opa = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  // bf16 storage: bf16 tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F
  // with CUDA_R_16BF A and B; D CUDA_R_16BF or CUDA_R_32F, both supported)
  cudaDataType_t tab = key->st & RTC_ST_AB16 ? CUDA_R_16BF : CUDA_R_32F;
  cudaDataType_t tcd = key->st & RTC_ST_C16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasCheck(cublasLtMatmulDescCreate(
      &p->op, key->bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof opb));
  cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof opa));
  cublasLtEpilogue_t epi = key->st & RTC_ST_DGELU  ? CUBLASLT_EPILOGUE_DGELU
                           : key->st & RTC_ST_GELU ? (key->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                               : CUBLASLT_EPILOGUE_GELU_AUX)
                           : !key->bias             ? CUBLASLT_EPILOGUE_DEFAULT
                           : key->st & RTC_ST_BGRAD ? CUBLASLT_EPILOGUE_BGRADB
                                                    : CUBLASLT_EPILOGUE_BIAS;
  cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (key->bias) {
    cudaDataType_t bt = key->st & RTC_ST_BIAS16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                               sizeof bt));
    // the heuristic reads the bias pointer's alignment
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                               sizeof bias));
  }
  if (key->st & (RTC_ST_GELU | RTC_ST_DGELU)) { // aux: c's type and layout (N,M), ldc
    int64_t ld = key->ldc;
    int32_t at = key->st & RTC_ST_C16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                               &aux, sizeof aux));
    cublasCheck(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                               &at, sizeof at));
  }
  // stored column-major: b is (N,K) or, transposed, (K,N); a is (K,M) or (M,K); c is (N,M)
  int M = key->M, N = key->N, K = key->K;
  cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, tab, key->tb ? K : N, key->tb ? N : K,
                                         key->ldb));
  cublasCheck(cublasLtMatrixLayoutCreate(&p->la, tab, key->ta ? M : K, key->ta ? K : M,
                                         key->lda));
  cublasCheck(cublasLtMatrixLayoutCreate(&p->lc, tcd, N, M, key->ldc));

  cublasLtMatmulPreference_t pref;
  cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = RTC_MM_WS_BYTES;
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws));
  // split-K through the output buffer is left out: the others reduce in a fixed step
  uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
  uint32_t al_a = (uint32_t)key->align_b, al_b = (uint32_t)key->align_a,
           al_c = (uint32_t)key->align_c;
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
  cublasLtMatmulHeuristicResult_t res[RTC_GEMM_CANDS];
  int found = 0;
  // no algorithm comes back as NOT_SUPPORTED or as success with none found;
  // the first is the same whether one or more are asked for
  int asked = rtc_tune_on_ ? RTC_GEMM_CANDS : 1;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(rtc_lt_, p->op, p->lb, p->la, p->lc, p->lc,
                                                     pref, asked, res, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED)
    found = 0;
  else if (st != CUBLAS_STATUS_SUCCESS)
    rtc_fail("cuBLASLt", "cublasLtMatmulAlgoGetHeuristic", cublasLtGetStatusString(st), __FILE__,
             __LINE__, rtc_hint("cuBLASLt", (int)st));
  cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
  p->found = found > 0;
  // with an epilogue the caller falls back to the plain GEMM and its kernels
  if (found < 1 && !key->bias && !(key->st & (RTC_ST_GELU | RTC_ST_DGELU))) {
    char msg[160];
    snprintf(msg, sizeof msg, "no %s algorithm for M=%d N=%d K=%d (ta=%d tb=%d, bias %d)",
             key->st ? (key->st & RTC_ST_C16 ? "bf16" : "bf16->fp32") : "fp32", M, N, K,
             key->ta, key->tb, key->bias);
    rtc_fail("cuBLASLt", "cublasLtMatmulAlgoGetHeuristic", msg, __FILE__, __LINE__,
             rtc_hint("cuBLASLt", (int)CUBLAS_STATUS_NOT_SUPPORTED));
  }
  if (p->found)
    p->algo = res[0].algo;
  for (int i = 0; i < found && i < RTC_GEMM_CANDS; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS)
      p->cand[p->ncand++] = res[i].algo;
  p->known = rtc_known_ ? rt_gemm_table_find(rtc_known_, (const int32_t *)key) : NULL;
  if (p->known && p->found && rtc_known_now_) // a resumed run: the choice from the first call
    rtc_gemm_use_(p, p->known);
  return p;
}

/* ---------------------------------------------------------------------------
 * Timing the candidates (rtc_gemm_tune, rtc_train.h).  At a shape's first
 * call, before the call itself, each of the heuristic's candidates runs on
 * the call's operands: a warm-up, then enough calls to fill about 2 ms
 * (3 to 50), timed by events on the stream; the fastest (the first among
 * equals) becomes p->best.  With beta = 0 the candidates write c (and aux,
 * and a BGRADB bias) themselves, which the call then overwrites, unless c
 * shares bytes with what the call reads (an in-place call); otherwise c
 * holds what the call adds to, and they write a scratch of c's size, at
 * most RTC_TUNE_SCRATCH bytes, allocated for the timing and freed in
 * stream order (not the arena: the plan's bytes stay exact).  The host
 * waits for the compute stream's events only, as a rank blocked at each
 * NCCL group does in the program's deadlock check (passes/commcheck.c),
 * so the timing cannot hang a mesh.  Not while a graph is being
 * captured (nothing may wait then), not without scratch: the shape keeps
 * the heuristic's first.  The calls keep running p->algo until
 * rtc_gemm_adopt: the choice is the ranks' agreement, applied from the
 * second step (train.c).
 */
#define RTC_TUNE_SCRATCH ((size_t)1 << 30)

// Whether the byte ranges [x, x+nx) and [y, y+ny) share a byte.
static bool rtc_overlap_(const void *x, size_t nx, const void *y, size_t ny) {
  uintptr_t x0 = (uintptr_t)x, y0 = (uintptr_t)y;
  return x && y && x0 < y0 + ny && y0 < x0 + nx;
}

static void rtc_tune_(RtcGemmPlan *p, float alpha, const void *a, const void *b, float beta,
                      void *c, size_t c_bytes, bool c_free) {
  p->timed = -1; // tried: not again
  cudaStream_t s = (cudaStream_t)rtc_stream;
  cudaStreamCaptureStatus cs;
  cudaCheck(cudaStreamIsCapturing(s, &cs));
  if (cs != cudaStreamCaptureStatusNone)
    return;
  void *out = c, *scratch = NULL;
  if (!c_free) {
    if (c_bytes > RTC_TUNE_SCRATCH)
      return;
    // stream-ordered: no device-wide synchronization (cudaFree's), which
    // would also wait for the collectives in flight on the other streams
    cudaError_t e = cudaMallocAsync(&scratch, c_bytes, s);
    if (e != cudaSuccess) {
      // out of memory: untimed, nothing broken (the error cleared, not sticky)
      cudaError_t was = cudaGetLastError();
      if (was != cudaSuccess && was != cudaErrorMemoryAllocation)
        cudaCheck(was);
      return;
    }
    cudaCheck(cudaMemsetAsync(scratch, 0, c_bytes, s));
    out = scratch;
  }
  cudaEvent_t e0, e1;
  cudaCheck(cudaEventCreate(&e0));
  cudaCheck(cudaEventCreate(&e1));
  float ms[RTC_GEMM_CANDS];
  int best = -1;
  for (int i = 0; i < p->ncand; i++) {
    ms[i] = INFINITY;
    int reps = 1;
    bool ok = true;
    for (int round = 0; round < 2 && ok; round++) { // one timed call, then the repeats
      cudaCheck(cudaEventRecord(e0, s));
      for (int r = 0; r < reps && ok; r++) // a candidate that refuses these operands: untimed
        ok = cublasLtMatmul(rtc_lt_, p->op, &alpha, b, p->lb, a, p->la, &beta, out, p->lc, out,
                            p->lc, &p->cand[i], rtc_mm_workspace_(), RTC_MM_WS_BYTES,
                            s) == CUBLAS_STATUS_SUCCESS;
      cudaCheck(cudaEventRecord(e1, s));
      cudaCheck(cudaEventSynchronize(e1));
      float t = 0;
      cudaCheck(cudaEventElapsedTime(&t, e0, e1));
      if (round == 0) {
        float per = t > 1e-4f ? t : 1e-4f;
        reps = (int)(2.0f / per);
        reps = reps < 3 ? 3 : reps > 50 ? 50 : reps;
      } else {
        ms[i] = t / (float)reps;
      }
    }
    if (ok && (best < 0 || ms[i] < ms[best]))
      best = i;
  }
  cudaCheck(cudaEventDestroy(e0));
  cudaCheck(cudaEventDestroy(e1));
  if (scratch)
    cudaCheck(cudaFreeAsync(scratch, s));
  if (best < 0 || !isfinite(ms[0]))
    return;
  p->best = best;
  p->ms = ms[best];
  p->ms_first = ms[0];
  p->timed = 1;
}

int rtc_gemm_choices(RtGemmTable *t) {
  t->n = 0;
  for (int i = 0; i < rtc_nplans_; i++) {
    const RtcGemmPlan *p = &rtc_plans_[i];
    if (!p->found)
      continue;
    RtGemmChoice c;
    memset(&c, 0, sizeof c);
    memcpy(c.key, &p->key, sizeof c.key);
    if (p->known) {
      c = *p->known;
    } else {
      memcpy(c.algo, p->timed > 0 ? &p->cand[p->best] : &p->algo, sizeof c.algo);
      c.source = p->timed > 0 ? RT_GEMM_TIMED : RT_GEMM_FIRST;
      c.ms = p->timed > 0 ? p->ms : 0.0f;
      c.ms_first = p->timed > 0 ? p->ms_first : 0.0f;
      c.cands = p->timed > 0 ? p->ncand : 0;
    }
    rt_gemm_table_add(t, &c);
  }
  return t->n;
}

int rtc_gemm_adopt(const RtGemmTable *t) {
  int n = 0;
  for (int i = 0; i < rtc_nplans_; i++) {
    RtcGemmPlan *p = &rtc_plans_[i];
    const RtGemmChoice *c = p->found ? rt_gemm_table_find(t, (const int32_t *)&p->key) : NULL;
    n += c && rtc_gemm_use_(p, c);
  }
  return n;
}

long rtc_gemm_lib_version(void) { return (long)cublasLtGetVersion(); }

static int rtc_gemm_st_(int ta, int tb, int M, int N, int K, float alpha, const void *a, int lda,
                        const void *b, int ldb, float beta, void *c, int ldc, const void *bias,
                        int st, void *aux = NULL) {
  RtcGemmKey key;
  memset(&key, 0, sizeof key); // the key is compared bytewise
  key.ta = ta;
  key.tb = tb;
  key.M = M;
  key.N = N;
  key.K = K;
  key.lda = lda;
  key.ldb = ldb;
  key.ldc = ldc;
  key.bias = bias != NULL;
  key.bf16 = !st && rtc_gemm_bf16 != 0; // bf16 storage is the compute mode of its own
  key.st = st;
  key.align_a = rtc_align_(a);
  key.align_b = rtc_align_(b);
  key.align_c = rtc_align_(c);
  key.align_bias = bias ? rtc_align_(bias) : 0;
  key.align_aux = aux ? rtc_align_(aux) : 0;
  RtcGemmPlan *p = rtc_plan_(&key, bias, aux);
  if (!p->found)
    return 0;
  if (bias)
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                               sizeof bias));
  if (aux)
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                               &aux, sizeof aux));
  if (rtc_tune_on_ && !p->timed && !p->known && p->ncand > 1) {
    // c may take the candidates' writes when the call overwrites it (beta
    // 0) and it shares no byte with what the call reads: a, b, a DGELU's
    // aux, a bias that is an input (each an extent from its first to its
    // last element)
    size_t es = st & RTC_ST_AB16 ? 2 : 4, cs = st & RTC_ST_C16 ? 2 : 4;
    size_t c_bytes = ((size_t)(M - 1) * (size_t)ldc + (size_t)N) * cs;
    size_t a_bytes = ((size_t)((ta ? K : M) - 1) * (size_t)lda + (size_t)(ta ? M : K)) * es;
    size_t b_bytes = ((size_t)((tb ? N : K) - 1) * (size_t)ldb + (size_t)(tb ? K : N)) * es;
    bool c_free = beta == 0.0f && !rtc_overlap_(c, c_bytes, a, a_bytes) &&
                  !rtc_overlap_(c, c_bytes, b, b_bytes) &&
                  !(st & RTC_ST_DGELU && rtc_overlap_(c, c_bytes, aux, c_bytes)) &&
                  !(bias && !(st & RTC_ST_BGRAD) &&
                    rtc_overlap_(c, c_bytes, bias, (size_t)N * (st & RTC_ST_BIAS16 ? 2 : 4)));
    rtc_tune_(p, alpha, a, b, beta, c, c_bytes, c_free);
  }
  if (rtc_prof_on) rtc_prof_begin();
  cublasCheck(cublasLtMatmul(rtc_lt_, p->op, &alpha, b, p->lb, a, p->la, &beta, c, p->lc, c,
                             p->lc, &p->algo, rtc_mm_workspace_(), RTC_MM_WS_BYTES,
                             (cudaStream_t)rtc_stream));
  if (rtc_prof_on)
    rtc_prof_end(__FILE__, key.st     ? "cublasLtMatmul bf16 storage"
                           : key.bf16 ? "cublasLtMatmul bf16"
                                      : "cublasLtMatmul fp32");
  return 1;
}

#endif

// The fp32 GEMM (st 0).
static int rtc_gemm_(int ta, int tb, int M, int N, int K, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc, const float *bias) {
  return rtc_gemm_st_(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, bias, 0);
}

/* ---------------------------------------------------------------------------
 * The launchers.
 */

// out is (N,OC), inp is (N,C), weight is (OC,C), bias is (OC) or NULL
extern "C" void rt_matmul_forward_cu(float *out, const float *inp, const float *weight,
                                     const float *bias, int N, int C, int OC) {
  if (N <= 0 || OC <= 0)
    return;
  if (C <= 0) {
    RTC_LAUNCH(rtc_rows_fill_kernel<float>, rtc_blocks((size_t)N * OC, 256), 256, 0, out, bias, N, OC);
    return;
  }
  // (N,OC) = (N,C)·(OC,C)ᵀ [+ bias by the epilogue].  A bias not 16-byte
  // aligned, or a shape without an epilogue algorithm, goes the cpu kernel's
  // way: the bias copied into the rows, the product accumulated onto it.
  if (!bias || (uintptr_t)bias % 16 == 0)
    if (rtc_gemm_(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC, bias))
      return;
  RTC_LAUNCH(rtc_rows_fill_kernel<float>, rtc_blocks((size_t)N * OC, 256), 256, 0, out, bias, N, OC);
  rtc_gemm_(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC, NULL);
}

// dinp is (N,C), dweight is (OC,C), dbias is (OC), dout is (N,OC)
extern "C" void rt_matmul_backward_cu(float *dinp, float *dweight, float *dbias, const float *dout,
                                      const float *inp, const float *weight, int N, int C,
                                      int OC) {
  if (N <= 0 || OC <= 0)
    return;
  if (dinp && C > 0) // (N,C) += (N,OC)·(OC,C)
    rtc_gemm_(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C, NULL);
  if (dweight && C > 0) // (OC,C) += (OC,N)·(N,C)
    rtc_gemm_(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, NULL);
  if (dbias)
    rtc_dbias_(dbias, dout, N, OC);
}

// c is (M,N) with leading dim ldc; op(a) is (M,K), op(b) is (K,N)
extern "C" void rt_gemm_cu(int trans_a, int trans_b, int M, int N, int K, double alpha,
                           const float *a, int lda, const float *b, int ldb, double beta, float *c,
                           int ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) { // an empty sum: c = beta·c
    RTC_LAUNCH(rtc_scale_rows_kernel<float>, rtc_blocks((size_t)M * N, 256), 256, 0, c, M, N, ldc, beta);
    return;
  }
  rtc_gemm_(trans_a, trans_b, M, N, K, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc, NULL);
}

// precision = fp32: the GEMM and the gelu kernels (the epilogues serve the
// bf16 programs), the same calls as rt_matmul_forward_gelu_cu's bf16 overload
void rt_matmul_forward_gelu_cu(float *act, float *pre, const float *inp, const float *weight,
                               const float *bias, int N, int C, int OC) {
  rt_matmul_forward_cu(pre, inp, weight, bias, N, C, OC);  // (act overlaps none of its inputs)
  if (N > 0 && OC > 0)
    rt_gelu_forward_cu(act, pre, (size_t)N * OC);
}

void rt_matmul_backward_dgelu_cu(float *dpre, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *weight,
                                 const float *pre, int N, int C, int OC) {
  if (N <= 0 || OC <= 0 || C <= 0)
    return;
  rt_matmul_backward_cu((float *)NULL, dweight, dbias, dout, inp, weight, N, C, OC);
  rt_matmul_backward_cu(dinp, (float *)NULL, (float *)NULL, dout, inp, weight, N, C, OC);
  cudaCheck(cudaMemsetAsync(dpre, 0, (size_t)N * C * sizeof(float), (cudaStream_t)rtc_stream));
  rt_gelu_backward_cu(dpre, pre, dinp, (size_t)N * C);
}

/* ---------------------------------------------------------------------------
 * precision = bf16 storage (rtc.h's bf16 section): activations, their
 * gradients and the weight's bf16 copy are bf16; bias, dweight and dbias
 * fp32.  The GEMMs run on bf16 tensor cores with fp32 accumulation; out and
 * dinp are rounded to bf16 once (dinp's old value read as bf16), dweight
 * accumulates in fp32.  The bias is cuBLASLt's epilogue, which takes a
 * bias of D's type (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: "the
 * same type as the elements of output matrix (Dtype)", the exceptions being
 * IMMA and fp8 kernels) where the master is fp32: a one-block kernel rounds
 * the bias to bf16 into the scratch after the workspace (rtc_ws.h), and the
 * epilogue adds it to the fp32 product before its one rounding (PyTorch's
 * autocast likewise hands the GEMM a bf16 bias).  It replaced a pass over
 * the output (the rounded product read, the fp32 bias added, rounded
 * again: 41 ms of GPT-2's step on an H200), which stays for a bias longer
 * than the scratch or a shape without an epilogue algorithm.
 */

// out is (N,OC), inp is (N,C), weight is (OC,C), bias is (OC) or NULL
void rt_matmul_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, const rtc_bf16 *weight,
                          const float *bias, int N, int C, int OC) {
  if (N <= 0 || OC <= 0)
    return;
  size_t n = (size_t)N * OC;
  if (C <= 0) {
    RTC_LAUNCH(rtc_rows_fill_kernel<rtc_bf16>, rtc_blocks(n, 256), 256, 0, out, bias, N, OC);
    return;
  }
  // The bias by cuBLASLt's epilogue, which takes a bias of D's type: a bf16
  // copy of it after the workspace (rtc_ws.h), added in fp32 to the product
  // before its one rounding.  A bias too long for the copy, or a shape
  // without an epilogue algorithm, goes the kernel's way below: the
  // product rounded, the fp32 bias added, rounded again.
  if (bias && (size_t)OC * sizeof(rtc_bf16) <= RTC_MM_BIAS_BYTES) {
    rtc_bf16 *b16 = rtc_bias16_(bias, OC);
    if (rtc_gemm_st_(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC, b16,
                     RTC_ST_AB16 | RTC_ST_C16 | RTC_ST_BIAS16))
      return;
  }
  rtc_gemm_st_(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC, NULL,
               RTC_ST_AB16 | RTC_ST_C16);
  if (bias && rtc_rows_vec_ok<rtc_bf16>(OC, {out})) {
    const int nv = OC / 8, th = nv < 128 ? (nv + 31) / 32 * 32 : 128;
    dim3 grid((unsigned)((nv + th - 1) / th), (unsigned)(N < 65535 ? N : 65535));
    RTC_LAUNCH(rtc_bias_add_bf16_vec_kernel, grid, th, 0, out, bias, N, OC);
  } else if (bias) {
    RTC_LAUNCH(rtc_bias_add_bf16_kernel, rtc_blocks(n, 256), 256, 0, out, bias, N, OC);
  }
}

// dinp is (N,C) bf16, dweight is (OC,C) and dbias (OC) fp32, each += or
// NULL; dout is (N,OC), inp (N,C), weight (OC,C) bf16
void rt_matmul_backward_cu(rtc_bf16 *dinp, float *dweight, float *dbias, const rtc_bf16 *dout,
                           const rtc_bf16 *inp, const rtc_bf16 *weight, int N, int C, int OC) {
  if (N <= 0 || OC <= 0)
    return;
  if (dinp && C > 0) // (N,C) += (N,OC)·(OC,C)
    rtc_gemm_st_(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C, NULL,
                 RTC_ST_AB16 | RTC_ST_C16);
  // (OC,C) += (OC,N)·(N,C), in fp32; the bias gradient, Σ_n dout, by the
  // same GEMM's BGRADB epilogue where cuBLASLt has one for the shape (into
  // the scratch after the workspace, then added: the epilogue writes), which
  // spares a second read of dout (30 ms of GPT-2's step on an H200); else by
  // the dbias kernels
  bool db_done = false;
  if (dweight && C > 0 && dbias && (size_t)OC * sizeof(float) <= RTC_MM_BIAS_BYTES) {
    float *g = (float *)rtc_mm_bias_scratch_();
    db_done = rtc_gemm_st_(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, g,
                           RTC_ST_AB16 | RTC_ST_BGRAD);
    if (db_done)
      RTC_LAUNCH(rtc_acc_f32_kernel, rtc_blocks((size_t)OC, 256), 256, 0, dbias, g, OC);
  }
  if (dweight && C > 0 && !db_done)
    rtc_gemm_st_(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, NULL, RTC_ST_AB16);
  if (dbias && !db_done)
    rtc_dbias_(dbias, dout, N, OC);
}

// An LM head's padded copy (rtc.h): weight (OC,C) with OC >= rows, dout
// (N,OC) with zero columns past rows; dweight (rows,C) += in fp32
void rt_matmul_backward_rows_cu(rtc_bf16 *dinp, float *dweight, const rtc_bf16 *dout,
                                const rtc_bf16 *inp, const rtc_bf16 *weight, int N, int C, int OC,
                                int rows) {
  if (N <= 0 || OC <= 0 || C <= 0)
    return;
  if (dinp) // (N,C) += (N,OC)·(OC,C): aligned rows, dense
    rtc_gemm_st_(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C, NULL,
                 RTC_ST_AB16 | RTC_ST_C16);
  if (dweight && rows > 0) // (rows,C) += (rows,N)·(N,C): dout's first rows columns, OC apart
    rtc_gemm_st_(1, 0, rows < OC ? rows : OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C,
                 NULL, RTC_ST_AB16);
}

// act (N,OC) = gelu(pre), pre = inp·weightᵀ (+ bias), both written: one GEMM
// with cuBLASLt's GELU_AUX(_BIAS) epilogue (pre its aux output; gelu of the
// fp32 pre-activation, then each rounded once) where it has one for the
// shape, else the GEMM and the gelu kernel (gelu of the rounded pre).
void rt_matmul_forward_gelu_cu(rtc_bf16 *act, rtc_bf16 *pre, const rtc_bf16 *inp,
                               const rtc_bf16 *weight, const float *bias, int N, int C, int OC) {
  if (N <= 0 || OC <= 0)
    return;
  if (C > 0 && OC % 8 == 0 && (!bias || (size_t)OC * sizeof(rtc_bf16) <= RTC_MM_BIAS_BYTES)) {
    rtc_bf16 *b16 = bias ? rtc_bias16_(bias, OC) : NULL;
    if (rtc_gemm_st_(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, act, OC, b16,
                     RTC_ST_AB16 | RTC_ST_C16 | (bias ? RTC_ST_BIAS16 : 0) | RTC_ST_GELU, pre))
      return;
  }
  rt_matmul_forward_cu(pre, inp, weight, bias, N, C, OC);
  rt_gelu_forward_cu(act, pre, (size_t)N * OC);
}

// dweight and dbias += as rt_matmul_backward_cu, first (dpre may be inp's
// buffer); then dpre (N,C) = gelu'(pre) ⊙ dout·weight, written: the
// input-gradient GEMM's DGELU epilogue (pre its aux input) where cuBLASLt
// has one for the shape (dinp, zeros, untouched), else that GEMM into dinp
// (zeros) and the gelu backward kernel onto dpre cleared.
void rt_matmul_backward_dgelu_cu(rtc_bf16 *dpre, rtc_bf16 *dinp, float *dweight, float *dbias,
                                 const rtc_bf16 *dout, const rtc_bf16 *inp,
                                 const rtc_bf16 *weight, const rtc_bf16 *pre, int N, int C,
                                 int OC) {
  if (N <= 0 || OC <= 0 || C <= 0)
    return;
  rt_matmul_backward_cu((rtc_bf16 *)NULL, dweight, dbias, dout, inp, weight, N, C, OC);
  if (C % 8 == 0 && rtc_gemm_st_(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dpre, C, NULL,
                                 RTC_ST_AB16 | RTC_ST_C16 | RTC_ST_DGELU, (void *)pre))
    return;
  rt_matmul_backward_cu(dinp, (float *)NULL, (float *)NULL, dout, inp, weight, N, C, OC);
  cudaCheck(cudaMemsetAsync(dpre, 0, (size_t)N * C * sizeof(rtc_bf16), (cudaStream_t)rtc_stream));
  rt_gelu_backward_cu(dpre, pre, dinp, (size_t)N * C);
}

// c is (M,N) with leading dim ldc, bf16 or fp32; op(a) is (M,K), op(b) is (K,N), bf16
template <class T>
static void rtc_gemm_bf16_(int trans_a, int trans_b, int M, int N, int K, double alpha,
                           const rtc_bf16 *a, int lda, const rtc_bf16 *b, int ldb, double beta,
                           T *c, int ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) { // an empty sum: c = beta·c
    RTC_LAUNCH(rtc_scale_rows_kernel<T>, rtc_blocks((size_t)M * N, 256), 256, 0, c, M, N, ldc,
               beta);
    return;
  }
  int st = RTC_ST_AB16 | (sizeof(T) == sizeof(rtc_bf16) ? RTC_ST_C16 : 0);
  rtc_gemm_st_(trans_a, trans_b, M, N, K, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc, NULL,
               st);
}

void rt_gemm_cu(int trans_a, int trans_b, int M, int N, int K, double alpha, const rtc_bf16 *a,
                int lda, const rtc_bf16 *b, int ldb, double beta, rtc_bf16 *c, int ldc) {
  rtc_gemm_bf16_(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

void rt_gemm_cu(int trans_a, int trans_b, int M, int N, int K, double alpha, const rtc_bf16 *a,
                int lda, const rtc_bf16 *b, int ldb, double beta, float *c, int ldc) {
  rtc_gemm_bf16_(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}
