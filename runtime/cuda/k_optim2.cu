/* k_optim2.cu — Shampoo (blocked, grafted) and Adafactor on the device:
 * runtime/k_optim2.inc's f32 functions (docs/language.md states the update,
 * rt_optim.h the state layout) with device pointers and the same results,
 * declared in rtc_optim.h.
 *
 * Shampoo: a block's Kronecker factors are updated by two cuBLAS SYRKs
 * (fp32, the upper triangle in row-major terms, mirrored by a kernel), the
 * preconditioned direction L^-1/4 G R^-1/4 is two SGEMMs, the grafting
 * direction, the per-block norm rescale, momentum and the decoupled weight
 * decay are kernels.  The root inverse (A + eps I)^-1/4 of root = newton is
 * the coupled Newton iteration in fp64 on the device, GEMMs only (cuBLAS
 * DGEMM) and small kernels; its stopping test reads one double back per
 * iteration.  root = eigh has no device path here: the driver computes
 * those roots on the host mirror with LAPACK (train.c unit_roots; see
 * rtc_optim.h for why).
 *
 * Every cuBLAS call is column-major: a row-major M x N matrix is its
 * transpose, so a row-major C = A·B is the column-major Cᵀ = Bᵀ·Aᵀ, and a
 * row-major upper triangle is a column-major lower one.  These are the
 * calls OpenBLAS's row-major interface makes for the cpu target, so the
 * host build (host/cublas_host.h: CBLAS) gives the cpu's GEMMs bitwise.
 *
 * Scratch: a unit's two buffers and the fp64 room for one factor's root are
 * the step's workspace in the arena (rt_shampoo_work), as on the cpu; the
 * norm rescale's scalar and Newton's two scalars live in that fp64 room.
 * Adafactor's partial sums (a double per row) are device memory outside
 * the arena, kept between calls (as k_optim.cu's tables).
 *
 * Reductions are in double and deterministic (fixed-order trees, no
 * atomics); their order differs from the cpu's sequential sums, so results
 * agree to rounding, not bitwise.  Adafactor's row and column sums are one
 * thread per row or column, summing in the cpu's order.
 */
#include <math.h>
#include <stdlib.h>

#include "common.cuh"
#include "rt_optim.h"
#include "rtc_optim.h"
#include "shardrt.h"

#ifdef RTC_HOST
#include "host/cublas_host.h"
#else
#include <cublas_v2.h>
#endif

#define RTC_O2_THREADS 256 // a power of two (the trees)

#define cublasCheck(call)                                                                 \
  do {                                                                                    \
    cublasStatus_t rtc_s_ = (call);                                                       \
    if (rtc_s_ != CUBLAS_STATUS_SUCCESS)                                                  \
      rtc_fail("cuBLAS", #call, cublasGetStatusString(rtc_s_), __FILE__, __LINE__,        \
               "the optimizer's GEMMs (k_optim2.cu)");                                    \
  } while (0)

static cublasHandle_t rtc_o2_blas_;

// the handle, on rtc_stream (created on first use)
static cublasHandle_t rtc_o2_handle_(void) {
  if (!rtc_o2_blas_)
    cublasCheck(cublasCreate(&rtc_o2_blas_));
  cublasCheck(cublasSetStream(rtc_o2_blas_, (cudaStream_t)rtc_stream));
  return rtc_o2_blas_;
}

// row-major C (M x N, ldc) = alpha·A (M x K, lda)·B (K x N, ldb) + beta·C
static void rtc_o2_sgemm_(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                          float *C, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  cublasCheck(cublasSgemm(rtc_o2_handle_(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, ldb, A,
                          lda, &zero, C, ldc));
}
static void rtc_o2_dgemm_(int k, const double *A, const double *B, double *C) {
  const double one = 1.0, zero = 0.0;
  cublasCheck(cublasDgemm(rtc_o2_handle_(), CUBLAS_OP_N, CUBLAS_OP_N, k, k, k, &one, B, k, A, k,
                          &zero, C, k));
}

// dst (host) <- one double on the device, after the stream's work so far
static double rtc_o2_read_(const double *dev) {
  if (rtc_capturing())
    rtc_fail("CUDA", "rtc_o2_read_", "a Shampoo root read back during a stream capture", __FILE__,
             __LINE__, "Shampoo and Adafactor steps run eagerly (graphs off)");
  double h = 0;
  cudaCheck(cudaMemcpyAsync(&h, dev, sizeof h, cudaMemcpyDeviceToHost, (cudaStream_t)rtc_stream));
  cudaCheck(cudaStreamSynchronize((cudaStream_t)rtc_stream));
  return h;
}

/* ---------------------------------------------------------------------------
 * Element-wise pieces shared by Shampoo's kernels.
 */

// The grafting method's direction of gradient g with state v (k_optim2.inc graft_dir).
__device__ __forceinline__ float rtc_graft_dir(float g, float v, float bc2, float geps,
                                               int graft) {
  if (graft == RT_GRAFT_ADAM)
    return g / RTC_FADD(sqrtf(v / bc2), geps);
  if (graft == RT_GRAFT_ADAGRAD)
    return g / RTC_FADD(sqrtf(v), geps);
  return g;
}

// A block-wide sum in double over RTC_O2_THREADS threads, fixed order; thread 0 gets it.
__device__ __forceinline__ double rtc_o2_tree_(double v, double *sh) {
  int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int o = RTC_O2_THREADS / 2; o > 0; o >>= 1) {
    if (t < o)
      sh[t] = RTC_DADD(sh[t], sh[t + o]);
    __syncthreads();
  }
  return sh[0];
}

// grad (n) *= gs
__global__ void rtc_scale_grad_kernel(float *grad, size_t n, float gs) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    grad[i] = RTC_FMUL(grad[i], gs);
}

void rt_opt_scale_grad_cu(float *grad, size_t n, double grad_scale) {
  if (grad_scale == 1 || !n)
    return;
  RTC_LAUNCH(rtc_scale_grad_kernel, rtc_blocks(n, RTC_O2_THREADS), RTC_O2_THREADS, 0, grad, n,
             (float)grad_scale);
}

// v (r x c of a row stride C): the grafting state of the block's elements from G
__global__ void rtc_graft_state_kernel(float *v, const float *G, int64_t r, int64_t c, int64_t C,
                                       float gb2, float gomb2, int graft) {
  size_t n = (size_t)(r * c);
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x) {
    size_t e = k / (size_t)c * (size_t)C + k % (size_t)c;
    float g = G[e];
    if (graft == RT_GRAFT_ADAM)
      v[e] = RTC_FADD(RTC_FMUL(v[e], gb2), RTC_FMUL(RTC_FMUL(gomb2, g), g));
    else if (graft == RT_GRAFT_ADAGRAD)
      v[e] = RTC_FADD(v[e], RTC_FMUL(g, g));
  }
}

// M (n x n, row-major): the lower triangle from the upper
__global__ void rtc_mirror_upper_kernel(float *M, int64_t n) {
  size_t nn = (size_t)(n * n);
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < nn;
       k += (size_t)gridDim.x * blockDim.x) {
    size_t i = k / (size_t)n, j = k % (size_t)n;
    if (j < i)
      M[k] = M[j * (size_t)n + i];
  }
}

// *sc = ||graft direction|| / ||out|| over the block (0 when out is 0):
// one block, the sums of squares in double
__global__ void rtc_graft_norm_kernel(float *sc, const float *G, const float *v, const float *out,
                                      int64_t r, int64_t c, int64_t C, float bc2, float geps,
                                      int graft) {
  __shared__ double sh[RTC_O2_THREADS];
  double ng = 0, nd = 0;
  size_t n = (size_t)(r * c);
  for (size_t k = threadIdx.x; k < n; k += RTC_O2_THREADS) {
    size_t e = k / (size_t)c * (size_t)C + k % (size_t)c;
    double x = (double)rtc_graft_dir(G[e], v ? v[e] : 0.0f, bc2, geps, graft);
    double y = (double)out[k];
    ng = RTC_DADD(ng, RTC_DMUL(x, x));
    nd = RTC_DADD(nd, RTC_DMUL(y, y));
  }
  ng = rtc_o2_tree_(ng, sh);
  __syncthreads();
  nd = rtc_o2_tree_(nd, sh);
  if (threadIdx.x == 0)
    *sc = (float)(nd > 0 ? sqrt(ng) / sqrt(nd) : 0.0);
}

// out (r x c) = the unit's direction: out·sc (preconditioned; sc on the
// device) or the grafting direction, through momentum m when given
__global__ void rtc_unit_dir_kernel(float *out, const float *sc, const float *G, const float *v,
                                    float *m, int64_t r, int64_t c, int64_t C, float bc2,
                                    float geps, int graft, float b1, float omb1, float bc1) {
  size_t n = (size_t)(r * c);
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x) {
    size_t e = k / (size_t)c * (size_t)C + k % (size_t)c;
    float d = sc ? RTC_FMUL(out[k], *sc) : rtc_graft_dir(G[e], v ? v[e] : 0.0f, bc2, geps, graft);
    if (m) {
      m[e] = RTC_FADD(RTC_FMUL(m[e], b1), RTC_FMUL(omb1, d));
      d = m[e] / bc1;
    }
    out[k] = d;
  }
}

// w (r x c of a row stride C) = w·decay + nlr·u
__global__ void rtc_unit_apply_kernel(float *w, const float *u, int64_t r, int64_t c, int64_t C,
                                      float decay, float nlr) {
  size_t n = (size_t)(r * c);
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x) {
    size_t e = k / (size_t)c * (size_t)C + k % (size_t)c;
    w[e] = RTC_FADD(RTC_FMUL(w[e], decay), RTC_FMUL(nlr, u[k]));
  }
}

/* ---------------------------------------------------------------------------
 * Shampoo: a unit's step, its roots, its update, a whole tensor.
 */

int rt_shampoo_unit_cu(const float *grad, float *state, unsigned char *work, int ndim,
                       const int64_t *shape, int64_t bi, int64_t bj, float *out,
                       const struct RtShampooArgs *a) {
  int64_t n = 1;
  for (int k = 0; k < ndim; k++)
    n *= shape[k];
  const int mom = a->beta1 > 0;
  float *m = mom ? state : NULL;
  float *v = a->graft != RT_GRAFT_SGD ? state + (mom ? n : 0) : NULL;
  const float bc2 = (float)(1 - pow(a->beta2, (double)a->t)), geps = (float)a->graft_eps;
  const float b1 = (float)a->beta1, omb1 = (float)(1 - a->beta1);
  const float bc1 = (float)(1 - pow(a->beta1, (double)a->t));
  const int pre = rt_shampoo_preconditioned(ndim, shape);
  int64_t r, c, C;
  const size_t o0 = (size_t)rt_shampoo_unit_span(ndim, shape, a->block, bi, bj, &r, &c, &C);
  const float *G = grad + o0;
  float *vb = v ? v + o0 : NULL, *mb = m ? m + o0 : NULL;
  const unsigned th = RTC_O2_THREADS, nb = rtc_blocks((size_t)(r * c), th);
  if (vb)
    RTC_LAUNCH(rtc_graft_state_kernel, nb, th, 0, vb, G, r, c, C, (float)a->beta2,
               (float)(1 - a->beta2), a->graft);
  const float *sc = NULL;
  if (pre) {
    float *L = state + rt_shampoo_factors_off(shape[0], C, a->block, bi, bj, mom, a->graft);
    float *Rf = L + r * r;
    float *Lr = Rf + c * c, *Rr = Lr + r * r;
    /* L = b2 L + (1 - b2) G Gᵀ, R = b2 R + (1 - b2) Gᵀ G (row-major upper
     * triangles: column-major lower), mirrored */
    const float al = (float)(1 - a->beta2), be = (float)a->beta2;
    cublasCheck(cublasSsyrk(rtc_o2_handle_(), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, (int)r, (int)c,
                            &al, G, (int)C, &be, L, (int)r));
    cublasCheck(cublasSsyrk(rtc_o2_handle_(), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, (int)c, (int)r,
                            &al, G, (int)C, &be, Rf, (int)c));
    RTC_LAUNCH(rtc_mirror_upper_kernel, rtc_blocks((size_t)(r * r), th), th, 0, L, r);
    RTC_LAUNCH(rtc_mirror_upper_kernel, rtc_blocks((size_t)(c * c), th), th, 0, Rf, c);
    if (a->precondition) {
      /* out = L^-1/4 G R^-1/4, rescaled to the grafting direction's norm */
      float *P1 = (float *)work;
      int64_t dbl, ints;
      rt_shampoo_work(a->work_elems, a->work_k, 4, &dbl, &ints);
      float *scp = (float *)(work + dbl);
      rtc_o2_sgemm_((int)r, (int)c, (int)r, Lr, (int)r, G, (int)C, P1, (int)c);
      rtc_o2_sgemm_((int)r, (int)c, (int)c, P1, (int)c, Rr, (int)c, out, (int)c);
      RTC_LAUNCH(rtc_graft_norm_kernel, 1, th, 0, scp, G, (const float *)vb, (const float *)out, r,
                 c, C, bc2, geps, a->graft);
      sc = scp;
    }
  }
  RTC_LAUNCH(rtc_unit_dir_kernel, nb, th, 0, out, sc, G, (const float *)vb, mb, r, c, C, bc2, geps,
             a->graft, b1, omb1, bc1);
  return RT_OK;
}

void rt_shampoo_apply_cu(float *param, const float *u, int ndim, const int64_t *shape, int64_t bi,
                         int64_t bj, const struct RtShampooArgs *a) {
  int64_t r, c, C;
  const size_t o0 = (size_t)rt_shampoo_unit_span(ndim, shape, a->block, bi, bj, &r, &c, &C);
  RTC_LAUNCH(rtc_unit_apply_kernel, rtc_blocks((size_t)(r * c), RTC_O2_THREADS), RTC_O2_THREADS,
             0, param + o0, u, r, c, C, (float)(1 - a->lr * a->weight_decay), (float)(-a->lr));
}

/* -- the coupled Newton iteration (k_optim2.inc root_newton), fp64 -- */

// M (k x k) = (double)L + eps on the diagonal; *fro = ||M||_F (one block)
__global__ void rtc_newton_load_kernel(double *M, const float *L, int k, double eps, double *fro) {
  __shared__ double sh[RTC_O2_THREADS];
  size_t kk = (size_t)k * k;
  double s = 0;
  for (size_t e = threadIdx.x; e < kk; e += RTC_O2_THREADS) {
    double x = (double)L[e];
    if (e / (size_t)k == e % (size_t)k)
      x = RTC_DADD(x, eps);
    M[e] = x;
    s = RTC_DADD(s, RTC_DMUL(x, x));
  }
  s = rtc_o2_tree_(s, sh);
  if (threadIdx.x == 0)
    *fro = sqrt(s);
}

// X = zr·I, M = z·M
__global__ void rtc_newton_init_kernel(double *X, double *M, int k, double z, double zr) {
  size_t kk = (size_t)k * k;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < kk;
       e += (size_t)gridDim.x * blockDim.x) {
    X[e] = e / (size_t)k == e % (size_t)k ? zr : 0.0;
    M[e] = RTC_DMUL(z, M[e]);
  }
}

// *err = max |M - I| (one block; a max is exact in any order)
__global__ void rtc_newton_err_kernel(const double *M, int k, double *err) {
  __shared__ double sh[RTC_O2_THREADS];
  size_t kk = (size_t)k * k;
  double e = 0;
  for (size_t i = threadIdx.x; i < kk; i += RTC_O2_THREADS) {
    double d = fabs(M[i] - (i / (size_t)k == i % (size_t)k ? 1.0 : 0.0));
    e = d > e ? d : e;
  }
  int t = threadIdx.x;
  sh[t] = e;
  __syncthreads();
  for (int o = RTC_O2_THREADS / 2; o > 0; o >>= 1) {
    if (t < o && sh[t + o] > sh[t])
      sh[t] = sh[t + o];
    __syncthreads();
  }
  if (t == 0)
    *err = sh[0];
}

// T = (5 I - M) / 4
__global__ void rtc_newton_t_kernel(double *T, const double *M, int k) {
  size_t kk = (size_t)k * k;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < kk;
       e += (size_t)gridDim.x * blockDim.x)
    T[e] = (e / (size_t)k == e % (size_t)k ? 1.25 : 0.0) - RTC_DMUL(0.25, M[e]);
}

// root = (float)X
__global__ void rtc_newton_store_kernel(float *root, const double *X, size_t kk) {
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < kk;
       e += (size_t)gridDim.x * blockDim.x)
    root[e] = (float)X[e];
}

// root (k x k) = (L + eps I)^(-1/4); D holds 6k² doubles, sc two more
static void rtc_root_newton_(const float *L, float *root, int k, double eps, double *D,
                             double *sc) {
  const size_t kk = (size_t)k * k;
  double *M = D, *X = D + kk, *T = D + 2 * kk, *S1 = D + 3 * kk, *S2 = D + 4 * kk, *S3 = D + 5 * kk;
  const unsigned th = RTC_O2_THREADS, nb = rtc_blocks(kk, th);
  RTC_LAUNCH(rtc_newton_load_kernel, 1, th, 0, M, L, k, eps, sc);
  double z = 5.0 / (2.0 * rtc_o2_read_(sc)), zr = pow(z, 0.25);
  RTC_LAUNCH(rtc_newton_init_kernel, nb, th, 0, X, M, k, z, zr);
  RTC_LAUNCH(rtc_newton_err_kernel, 1, th, 0, (const double *)M, k, sc + 1);
  double err = rtc_o2_read_(sc + 1);
  for (int it = 0; it < 100 && err > 1e-6; it++) {
    RTC_LAUNCH(rtc_newton_t_kernel, nb, th, 0, T, (const double *)M, k);
    rtc_o2_dgemm_(k, T, T, S1);
    rtc_o2_dgemm_(k, S1, S1, S2);
    rtc_o2_dgemm_(k, S2, M, S3);
    RTC_LAUNCH(rtc_newton_err_kernel, 1, th, 0, (const double *)S3, k, sc + 1);
    double nerr = rtc_o2_read_(sc + 1);
    if (nerr > err * 1.2)
      break;
    rtc_o2_dgemm_(k, X, T, S1);
    double *t = X;
    X = S1, S1 = t;
    t = M;
    M = S3, S3 = t;
    err = nerr;
  }
  RTC_LAUNCH(rtc_newton_store_kernel, nb, th, 0, root, (const double *)X, kk);
}

int rt_shampoo_unit_roots_cu(float *state, unsigned char *work, int ndim, const int64_t *shape,
                             int64_t bi, int64_t bj, const struct RtShampooArgs *a) {
  if (!rt_shampoo_preconditioned(ndim, shape))
    return RT_OK;
  if (a->root != RT_ROOT_NEWTON)
    return rt_errorf(RT_ERR_ARG, "shampoo: root = eigh has no device path (the driver computes "
                                 "it on the host mirror)");
  const int64_t R = shape[0], C = shape[1], bs = a->block;
  const int64_t r = rt_shampoo_bsize(R, bs, bi), c = rt_shampoo_bsize(C, bs, bj);
  float *L = state + rt_shampoo_factors_off(R, C, bs, bi, bj, a->beta1 > 0, a->graft);
  float *Rf = L + r * r, *Lr = Rf + c * c, *Rr = Lr + r * r;
  int64_t dbl, ints;
  rt_shampoo_work(a->work_elems, a->work_k, 4, &dbl, &ints);
  /* six k x k matrices, then the two scalars: inside the 6k² + 7k + 1 doubles planned */
  double *D = (double *)(work + dbl), *sc = D + 6 * a->work_k * a->work_k;
  rtc_root_newton_(L, Lr, (int)r, a->eps, D, sc);
  rtc_root_newton_(Rf, Rr, (int)c, a->eps, D, sc);
  return RT_OK;
}

int rt_shampoo_step_cu(float *param, float *grad, float *state, unsigned char *work, int ndim,
                       const int64_t *shape, const struct RtShampooArgs *a) {
  int64_t n = 1;
  for (int k = 0; k < ndim; k++)
    n *= shape[k];
  rt_opt_scale_grad_cu(grad, (size_t)n, a->grad_scale);
  const int pre = rt_shampoo_preconditioned(ndim, shape);
  const int64_t nbr = pre ? rt_shampoo_nblocks(shape[0], a->block) : 1;
  const int64_t nbc = pre ? rt_shampoo_nblocks(shape[1], a->block) : 1;
  float *D = (float *)work + a->work_elems; /* the workspace's second unit buffer */
  for (int64_t bi = 0; bi < nbr && a->recompute; bi++)
    for (int64_t bj = 0; bj < nbc; bj++) {
      int rc = rt_shampoo_unit_roots_cu(state, work, ndim, shape, bi, bj, a);
      if (rc != RT_OK)
        return rc;
    }
  for (int64_t bi = 0; bi < nbr; bi++)
    for (int64_t bj = 0; bj < nbc; bj++) {
      int rc = rt_shampoo_unit_cu(grad, state, work, ndim, shape, bi, bj, D, a);
      if (rc != RT_OK)
        return rc;
      rt_shampoo_apply_cu(param, D, ndim, shape, bi, bj, a);
    }
  return RT_OK;
}

/* ---------------------------------------------------------------------------
 * Adafactor (k_optim2.inc rt_adafactor_step).
 */

static void *rtc_af_buf_;
static size_t rtc_af_cap_;

// device scratch of `bytes` (outside the arena, kept; cudaFree synchronizes)
static void *rtc_af_scratch_(size_t bytes) {
  if (bytes > rtc_af_cap_) {
    if (rtc_capturing())
      rtc_fail("CUDA", "rtc_af_scratch_", "Adafactor's scratch grown during a stream capture",
               __FILE__, __LINE__, "Shampoo and Adafactor steps run eagerly (graphs off)");
    if (rtc_af_buf_)
      cudaCheck(cudaFree(rtc_af_buf_));
    cudaCheck(cudaMalloc(&rtc_af_buf_, bytes));
    rtc_af_cap_ = bytes;
  }
  return rtc_af_buf_;
}

// The row or the column accumulators, one thread per line a of n (the
// cpu's order): acc[a] = ρ·acc[a] + (1-ρ)·(S[a], or Σ_b (g² + eps) over the
// line's m elements g[a·sa + b·sb]) / full.  Rows: n = R, m = C, sa = C,
// sb = 1, full = Cfull; columns: n = C, m = R, sa = 1, sb = C, full = Rfull
// (the whole tensor's step: S = NULL, full = the line's length).
__global__ void rtc_af_lines_kernel(float *acc, const float *S, const float *g, int64_t n,
                                    int64_t m, int64_t sa, int64_t sb, double full, float rho,
                                    float omr, float e1) {
  for (int64_t a = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; a < n;
       a += (int64_t)gridDim.x * blockDim.x) {
    double s = 0;
    if (S)
      s = (double)S[a];
    else
      for (int64_t b = 0; b < m; b++) {
        float x = g[a * sa + b * sb];
        s = RTC_DADD(s, (double)RTC_FADD(RTC_FMUL(x, x), e1));
      }
    acc[a] = RTC_FADD(RTC_FMUL(acc[a], rho), RTC_FMUL(omr, (float)(s / full)));
  }
}

// *rmean = mean(row) (one thread, the cpu's order)
__global__ void rtc_af_rmean_kernel(float *rmean, const float *row, int64_t R) {
  double s = 0;
  for (int64_t i = 0; i < R; i++)
    s = RTC_DADD(s, (double)row[i]);
  *rmean = (float)(s / (double)R);
}

// acc = ρ·acc + (1-ρ)·(g² + eps): the unfactored second moment
__global__ void rtc_af_full_kernel(float *acc, const float *g, size_t n, float rho, float omr,
                                   float e1) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = g[i];
    acc[i] = RTC_FADD(RTC_FMUL(acc[i], rho), RTC_FMUL(omr, RTC_FADD(RTC_FMUL(x, x), e1)));
  }
}

// u at row i, column j (k_optim2.inc af_u)
__device__ __forceinline__ float rtc_af_u(const float *g, const float *row, const float *col,
                                          const float *acc, int64_t C, int fac, float rmean,
                                          int64_t i, int64_t j) {
  return fac ? RTC_FMUL(g[i * C + j], RTC_FMUL(1.0f / sqrtf(row[i] / rmean), 1.0f / sqrtf(col[j])))
             : g[j] / sqrtf(acc[j]);
}

// part[p] = Σ u² over row p (factored) or over elements [p·C, p·C + C) of the unfactored tensor
__global__ void rtc_af_part_kernel(double *part, const float *g, const float *row,
                                   const float *col, const float *acc, int64_t R, int64_t C,
                                   int64_t n, int fac, const float *rmean) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < R;
       p += (int64_t)gridDim.x * blockDim.x) {
    double s = 0;
    for (int64_t j = 0; j < C; j++) {
      if (!fac && p * C + j >= n)
        break;
      double u = (double)(fac ? rtc_af_u(g, row, col, acc, C, 1, *rmean, p, j)
                              : rtc_af_u(g, row, col, acc, 0, 0, 0.0f, 0, p * C + j));
      s = RTC_DADD(s, RTC_DMUL(u, u));
    }
    part[p] = s;
  }
}

// *cl = max(1, RMS(u) / clip_threshold) from the parts (one thread)
__global__ void rtc_af_clip_kernel(float *cl, const double *part, int64_t np, double n,
                                   double clip) {
  double ss = 0;
  for (int64_t p = 0; p < np; p++)
    ss = RTC_DADD(ss, part[p]);
  double den = sqrt(ss / n) / clip;
  *cl = (float)(den > 1 ? den : 1.0);
}

// param = param·decay - lr·(u / cl, through momentum m when given)
__global__ void rtc_af_apply_kernel(float *param, const float *g, float *m, const float *row,
                                    const float *col, const float *acc, int64_t C, size_t n,
                                    int fac, const float *rmean, const float *cl, float b1,
                                    float omb1, float decay, float nlr) {
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (size_t)gridDim.x * blockDim.x) {
    int64_t i = fac ? (int64_t)e / C : 0, j = fac ? (int64_t)e % C : (int64_t)e;
    float u = rtc_af_u(g, row, col, acc, C, fac, fac ? *rmean : 0.0f, i, j) / *cl;
    if (m) {
      m[e] = RTC_FADD(RTC_FMUL(m[e], b1), RTC_FMUL(omb1, u));
      u = m[e];
    }
    param[e] = RTC_FADD(RTC_FMUL(param[e], decay), RTC_FMUL(nlr, u));
  }
}

#define RTC_AF_CHUNK 4096 // elements per partial sum of an unfactored tensor

void rt_adafactor_step_cu(float *param, float *grad, float *state, int ndim, const int64_t *shape,
                          const struct RtShampooArgs *a) {
  int64_t n = 1;
  for (int k = 0; k < ndim; k++)
    n *= shape[k];
  const int mom = a->beta1 > 0, fac = ndim == 2;
  float *m = mom ? state : NULL, *acc = state + (mom ? n : 0);
  rt_opt_scale_grad_cu(grad, (size_t)n, a->grad_scale);
  const double rd = 1 - pow((double)a->t, -a->decay_rate);
  const float rho = (float)rd, omr = (float)(1 - rd), e1 = (float)a->eps;
  const int64_t R = fac ? shape[0] : 1, C = fac ? shape[1] : n;
  /* the sums' parts: a row each (factored) or chunks; then rmean and cl */
  const int64_t np = fac ? R : (n + RTC_AF_CHUNK - 1) / RTC_AF_CHUNK, pc = fac ? C : RTC_AF_CHUNK;
  double *part = (double *)rtc_af_scratch_((size_t)np * sizeof(double) + 2 * sizeof(float));
  float *rmean = (float *)(part + np), *cl = rmean + 1;
  float *row = acc, *col = acc + R;
  const unsigned th = RTC_O2_THREADS;
  if (fac) {
    RTC_LAUNCH(rtc_af_lines_kernel, rtc_blocks((size_t)R, 128), 128, 0, row, (const float *)NULL,
               (const float *)grad, R, C, C, (int64_t)1, (double)C, rho, omr, e1);
    RTC_LAUNCH(rtc_af_lines_kernel, rtc_blocks((size_t)C, 128), 128, 0, col, (const float *)NULL,
               (const float *)grad, C, R, (int64_t)1, C, (double)R, rho, omr, e1);
    RTC_LAUNCH(rtc_af_rmean_kernel, 1, 1, 0, rmean, (const float *)row, R);
  } else {
    RTC_LAUNCH(rtc_af_full_kernel, rtc_blocks((size_t)n, th), th, 0, acc, (const float *)grad,
               (size_t)n, rho, omr, e1);
  }
  RTC_LAUNCH(rtc_af_part_kernel, rtc_blocks((size_t)np, 128), 128, 0, part, (const float *)grad,
             (const float *)row, (const float *)col, (const float *)acc, np, pc, n, fac,
             (const float *)rmean);
  RTC_LAUNCH(rtc_af_clip_kernel, 1, 1, 0, cl, (const double *)part, np, (double)n,
             a->clip_threshold);
  RTC_LAUNCH(rtc_af_apply_kernel, rtc_blocks((size_t)n, th), th, 0, param, (const float *)grad, m,
             (const float *)row, (const float *)col, (const float *)acc, C, (size_t)n, fac,
             (const float *)rmean, (const float *)cl, (float)a->beta1, (float)(1 - a->beta1),
             (float)(1 - a->lr * a->weight_decay), (float)(-a->lr));
}

/* ---------------------------------------------------------------------------
 * Adafactor of a tensor split over tp (k_optim2.inc rt_adafactor_sums,
 * _squares, _finish): the sums of each row and column one thread each in
 * the cpu's order, the totals by one thread in the cpu's order.
 */

void rt_opt_zero_cu(float *p, size_t n) {
  if (n)
    cudaCheck(cudaMemsetAsync(p, 0, n * sizeof(float), (cudaStream_t)rtc_stream));
}

// s[i] = Σ_j (g² + eps) over row i in double; S[i] = (float)s[i] when S
__global__ void rtc_af_rowsum_kernel(double *s, float *S, const float *g, int64_t R, int64_t C,
                                     float e1) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < R;
       i += (int64_t)gridDim.x * blockDim.x) {
    double acc = 0;
    for (int64_t j = 0; j < C; j++) {
      float x = g[i * C + j];
      acc = RTC_DADD(acc, (double)RTC_FADD(RTC_FMUL(x, x), e1));
    }
    s[i] = acc;
    if (S)
      S[i] = (float)acc;
  }
}

// T[j] = (float)Σ_i (g² + eps) over column j
__global__ void rtc_af_colsum_kernel(float *T, const float *g, int64_t R, int64_t C, float e1) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < C;
       j += (int64_t)gridDim.x * blockDim.x) {
    double acc = 0;
    for (int64_t i = 0; i < R; i++) {
      float x = g[i * C + j];
      acc = RTC_DADD(acc, (double)RTC_FADD(RTC_FMUL(x, x), e1));
    }
    T[j] = (float)acc;
  }
}

// *X = ρ·Σ row / rep + (1-ρ)·Σ s / Cfull (one thread, the cpu's order)
__global__ void rtc_af_x_kernel(float *X, const double *s, const float *row, int64_t R, double rd,
                                double rep, double Cfull) {
  double rows = 0, sums = 0;
  for (int64_t i = 0; i < R; i++) {
    sums = RTC_DADD(sums, s[i]);
    rows = RTC_DADD(rows, (double)row[i]);
  }
  *X = (float)(rd * rows / rep + (1 - rd) * sums / Cfull);
}

// *rmean = X / Rfull (X reduced over the tp axes)
__global__ void rtc_af_rmean_x_kernel(float *rmean, const float *X, double Rfull) {
  *rmean = (float)((double)*X / Rfull);
}

// *q = (float)Σ parts (one thread)
__global__ void rtc_af_q_kernel(float *q, const double *part, int64_t np) {
  double ss = 0;
  for (int64_t p = 0; p < np; p++)
    ss = RTC_DADD(ss, part[p]);
  *q = (float)ss;
}

// *cl = max(1, sqrt(q / n) / clip) from the reduced Σ u² (one thread)
__global__ void rtc_af_clip_q_kernel(float *cl, const float *q, double n, double clip) {
  double den = sqrt((double)*q / n) / clip;
  *cl = (float)(den > 1 ? den : 1.0);
}

void rt_adafactor_sums_cu(const float *grad, const float *state, int ndim, const int64_t *shape,
                          float *S, float *T, float *X, double rep, int64_t Cfull,
                          const struct RtShampooArgs *a) {
  if (ndim != 2)
    return;
  const int64_t R = shape[0], C = shape[1], n = R * C;
  const float *row = state + (a->beta1 > 0 ? n : 0);
  const double rd = 1 - pow((double)a->t, -a->decay_rate);
  const float e1 = (float)a->eps;
  double *s = (double *)rtc_af_scratch_((size_t)R * sizeof(double));
  RTC_LAUNCH(rtc_af_rowsum_kernel, rtc_blocks((size_t)R, 128), 128, 0, s, S, grad, R, C, e1);
  if (T)
    RTC_LAUNCH(rtc_af_colsum_kernel, rtc_blocks((size_t)C, 128), 128, 0, T, grad, R, C, e1);
  RTC_LAUNCH(rtc_af_x_kernel, 1, 1, 0, X, (const double *)s, row, R, rd, rep, (double)Cfull);
}

void rt_adafactor_squares_cu(const float *grad, float *state, int ndim, const int64_t *shape,
                             const float *S, const float *T, const float *X, int64_t Rfull,
                             int64_t Cfull, float *q, const struct RtShampooArgs *a) {
  int64_t n = 1;
  for (int k = 0; k < ndim; k++)
    n *= shape[k];
  float *acc = state + (a->beta1 > 0 ? n : 0);
  const double rd = 1 - pow((double)a->t, -a->decay_rate);
  const float rho = (float)rd, omr = (float)(1 - rd), e1 = (float)a->eps;
  const int fac = ndim == 2;
  const int64_t R = fac ? shape[0] : 1, C = fac ? shape[1] : n;
  const int64_t np = fac ? R : (n + RTC_AF_CHUNK - 1) / RTC_AF_CHUNK, pc = fac ? C : RTC_AF_CHUNK;
  double *part = (double *)rtc_af_scratch_((size_t)np * sizeof(double) + sizeof(float));
  float *rmean = (float *)(part + np);
  float *row = acc, *col = acc + R;
  if (fac) {
    RTC_LAUNCH(rtc_af_lines_kernel, rtc_blocks((size_t)R, 128), 128, 0, row, S, grad, R, C, C,
               (int64_t)1, (double)Cfull, rho, omr, e1);
    RTC_LAUNCH(rtc_af_lines_kernel, rtc_blocks((size_t)C, 128), 128, 0, col, T, grad, C, R,
               (int64_t)1, C, (double)Rfull, rho, omr, e1);
    RTC_LAUNCH(rtc_af_rmean_x_kernel, 1, 1, 0, rmean, X, (double)Rfull);
  } else {
    RTC_LAUNCH(rtc_af_full_kernel, rtc_blocks((size_t)n, RTC_O2_THREADS), RTC_O2_THREADS, 0, acc,
               grad, (size_t)n, rho, omr, e1);
  }
  RTC_LAUNCH(rtc_af_part_kernel, rtc_blocks((size_t)np, 128), 128, 0, part, grad,
             (const float *)row, (const float *)col, (const float *)acc, np, pc, n, fac,
             (const float *)rmean);
  RTC_LAUNCH(rtc_af_q_kernel, 1, 1, 0, q, (const double *)part, np);
}

void rt_adafactor_finish_cu(float *param, const float *grad, float *state, int ndim,
                            const int64_t *shape, const float *X, int64_t Rfull, const float *q,
                            int64_t nfull, const struct RtShampooArgs *a) {
  int64_t n = 1;
  for (int k = 0; k < ndim; k++)
    n *= shape[k];
  const int mom = a->beta1 > 0, fac = ndim == 2;
  float *m = mom ? state : NULL, *acc = state + (mom ? n : 0);
  const int64_t R = fac ? shape[0] : 1, C = fac ? shape[1] : n;
  float *rmean = (float *)rtc_af_scratch_(2 * sizeof(float)), *cl = rmean + 1;
  if (fac)
    RTC_LAUNCH(rtc_af_rmean_x_kernel, 1, 1, 0, rmean, X, (double)Rfull);
  RTC_LAUNCH(rtc_af_clip_q_kernel, 1, 1, 0, cl, q, (double)nfull, a->clip_threshold);
  const unsigned th = RTC_O2_THREADS;
  RTC_LAUNCH(rtc_af_apply_kernel, rtc_blocks((size_t)n, th), th, 0, param, grad, m,
             (const float *)acc, (const float *)(acc + R), (const float *)acc, C, (size_t)n, fac,
             (const float *)rmean, (const float *)cl, (float)a->beta1, (float)(1 - a->beta1),
             (float)(1 - a->lr * a->weight_decay), (float)(-a->lr));
}
