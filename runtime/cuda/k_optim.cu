/* k_optim.cu — optimizer steps and sums of squares (rt_adamw_step,
 * rt_sgd_step, rt_sumsq, rt_sumsq_list, and the multi-tensor
 * rt_adamw_multi of rtc_optim.h).
 *
 * The steps are torch's formulas exactly as runtime/k_optim.inc writes
 * them: the scalars formed in double and rounded once, the per-element
 * arithmetic in float in the cpu's order.  The cpu kernels are compiled
 * with -ffp-contract=off, so the device code spells each operation with a
 * round-to-nearest intrinsic (RTC_FMUL...) that nvcc will not fuse into an
 * FMA: the GPU step is then bitwise the cpu's (sqrtf and '/' are correctly
 * rounded by default on both).
 *
 * Multi-tensor launches (rt_adamw_multi_cu, rt_sumsq_list_cu) read a table
 * of tensors on the device; block b finds its tensor by a binary search of
 * the tensors' first blocks, and works on one chunk of it.
 *
 * The sums of squares are two passes in double: each block sums a chunk in
 * a fixed order (thread strides, then a tree), one block adds the partial
 * sums in a fixed order.  No atomics: every result is bitwise the same run
 * to run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "rtc_optim.h"

#define RTC_OPT_THREADS 256
#define RTC_ADAMW_CHUNK 4096    // elements per block of rt_adamw_multi_cu
#define RTC_SUMSQ_THREADS 256   // a power of two (the tree)
#define RTC_SUMSQ_CHUNK 16384   // elements per partial sum

/* ---------------------------------------------------------------------------
 * Device memory kept between calls: tables and partial sums, grown on demand.
 * TODO(arena): the driver's arena will hand these out instead.
 */

typedef struct {
  void *dev;
  size_t cap;
  void *host;   // what dev holds (tables only)
  size_t bytes; // of it
} RtcOptBuf;

static void rtc_opt_grow_(RtcOptBuf *b, size_t bytes) {
  if (bytes <= b->cap)
    return;
  if (b->dev)
    cudaCheck(cudaFree(b->dev));
  cudaCheck(cudaMalloc(&b->dev, bytes));
  b->cap = bytes;
  b->bytes = 0; // a table must be uploaded again
}

// The device copy of the table src (bytes): uploaded on rtc_stream unless
// it holds src already.  Pageable memory: cudaMemcpyAsync has copied src
// out when it returns, so the host copy may change afterwards.
static const void *rtc_opt_table_(RtcOptBuf *b, const void *src, size_t bytes) {
  if (b->bytes == bytes && bytes && !memcmp(b->host, src, bytes))
    return b->dev;
  if (rtc_capturing()) // a graph would copy from b->host, which the next change overwrites
    rtc_fail("CUDA", "rtc_opt_table_", "a tensor table changed during a stream capture",
             __FILE__, __LINE__, "capture only steps whose tensor lists the eager steps used");
  rtc_opt_grow_(b, bytes);
  void *h = realloc(b->host, bytes);
  if (!h)
    rtc_fail("CUDA", "realloc", "out of host memory for a tensor table", __FILE__, __LINE__,
             "");
  b->host = h;
  memcpy(b->host, src, bytes);
  b->bytes = bytes;
  cudaCheck(cudaMemcpyAsync(b->dev, b->host, bytes, cudaMemcpyHostToDevice,
                            (cudaStream_t)rtc_stream));
  return b->dev;
}

/* ---------------------------------------------------------------------------
 * AdamW and SGD.
 */

/* AdamW's scalars, formed on the host as the cpu kernel forms them. */
typedef struct {
  float b1, b2, omb1, omb2, step_size, bc2_sqrt, e, gs;
  int scaled; // grad_scale != 1
} RtcAdamwScalars;

/* A step's scalars on the device (rtc_opt_scalars_set/_upload): AdamW's as
 * above, lr in double (the decay), SGD's rounded as its launcher rounds. */
typedef struct {
  RtcAdamwScalars a;
  double lr;
  float sgd_lr, sgd_gs;
  int sgd_scaled;
  int pad_;
} RtcStepScalars;

static RtcAdamwScalars rtc_adamw_scalars_(double lr, double beta1, double beta2, double eps,
                                          long t, double grad_scale) {
  RtcAdamwScalars s;
  double bc1 = 1 - pow(beta1, (double)t), bc2 = 1 - pow(beta2, (double)t);
  s.b1 = (float)beta1;
  s.b2 = (float)beta2;
  s.omb1 = (float)(1 - beta1);
  s.omb2 = (float)(1 - beta2);
  s.step_size = (float)(lr / bc1);
  s.bc2_sqrt = (float)sqrt(bc2);
  s.e = (float)eps;
  s.gs = (float)grad_scale;
  s.scaled = grad_scale != 1;
  return s;
}

// element i of param, grad, m, v: torch's _single_tensor_adamw, decoupled
// decay first
__device__ __forceinline__ void rtc_adamw_elem_(float *p, const float *g, float *m, float *v,
                                                size_t i, float decay,
                                                const RtcAdamwScalars &s) {
  float gi = s.scaled ? RTC_FMUL(g[i], s.gs) : g[i];
  float pi = RTC_FMUL(p[i], decay);
  float mi = RTC_FADD(RTC_FMUL(m[i], s.b1), RTC_FMUL(s.omb1, gi));
  float vi = RTC_FADD(RTC_FMUL(v[i], s.b2), RTC_FMUL(RTC_FMUL(s.omb2, gi), gi));
  float denom = RTC_FADD(sqrtf(vi) / s.bc2_sqrt, s.e);
  p[i] = RTC_FADD(pi, RTC_FMUL(-s.step_size, mi) / denom);
  m[i] = mi;
  v[i] = vi;
}

// param, grad, m and v are (n)
// (S given: the scalars and the decay (float)(1 - lr·wd) from the device)
__global__ void rtc_adamw_kernel(float *__restrict__ p, const float *__restrict__ g,
                                 float *__restrict__ m, float *__restrict__ v, size_t n,
                                 float decay, RtcAdamwScalars s, double wd,
                                 const RtcStepScalars *__restrict__ S) {
  if (S) {
    s = S->a;
    decay = (float)RTC_DADD(1.0, -RTC_DMUL(S->lr, wd));
  }
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    rtc_adamw_elem_(p, g, m, v, i, decay, s);
}

/* One tensor of rt_adamw_multi_cu's device table. */
typedef struct {
  float *p;
  const float *g;
  float *m, *v;
  size_t n;
  double wd;
  size_t first_block; // its chunks are blocks [first_block, first_block + ⌈n/CHUNK⌉)
} RtcAdamwTensor;

// the last of count entries whose first_block <= b (entries ordered by it)
template <typename T>
__device__ __forceinline__ int rtc_find_tensor_(const T *tab, int count, size_t b) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (tab[mid].first_block <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// block b steps chunk b - first_block of its tensor
__global__ void rtc_adamw_multi_kernel(const RtcAdamwTensor *__restrict__ tab, int count,
                                       double lr, RtcAdamwScalars s,
                                       const RtcStepScalars *__restrict__ S) {
  if (S) {
    s = S->a;
    lr = S->lr;
  }
  const RtcAdamwTensor *T = &tab[rtc_find_tensor_(tab, count, blockIdx.x)];
  size_t i0 = (blockIdx.x - T->first_block) * (size_t)RTC_ADAMW_CHUNK;
  size_t i1 = min(T->n, i0 + RTC_ADAMW_CHUNK);
  float decay = (float)RTC_DADD(1.0, -RTC_DMUL(lr, T->wd)); // as the cpu: (float)(1 - lr*wd)
  for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
    rtc_adamw_elem_(T->p, T->g, T->m, T->v, i, decay, s);
}

// param, grad and mom are (n); mom is NULL or unused without momentum
__global__ void rtc_sgd_kernel(float *__restrict__ p, const float *__restrict__ g,
                               float *__restrict__ mom, size_t n, float lr, float mu, float wd,
                               float gs, int scaled, int decay, int use_mom,
                               const RtcStepScalars *__restrict__ S) {
  if (S) {
    lr = S->sgd_lr;
    gs = S->sgd_gs;
    scaled = S->sgd_scaled;
  }
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float gi = scaled ? RTC_FMUL(g[i], gs) : g[i];
    if (decay)
      gi = RTC_FADD(gi, RTC_FMUL(wd, p[i]));
    if (use_mom) {
      gi = RTC_FADD(RTC_FMUL(mu, mom[i]), gi);
      mom[i] = gi;
    }
    p[i] = RTC_FADD(p[i], -RTC_FMUL(lr, gi));
  }
}

/* ---------------------------------------------------------------------------
 * Sums of squares.
 */

/* One tensor of the sums of squares' device table. */
typedef struct {
  const float *x;
  size_t n;
  size_t first_block;
} RtcSumsqTensor;

// Σ v over the block, fixed tree; thread 0 gets it (RTC_SUMSQ_THREADS threads)
__device__ double rtc_block_sum_d_(double v) {
  __shared__ double part[RTC_SUMSQ_THREADS];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = RTC_SUMSQ_THREADS / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w)
      part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  return part[0];
}

// partial[b] = Σ x² over chunk b - first_block of block b's tensor (tab, or
// without a table the one tensor one)
__global__ void rtc_sumsq_part_kernel(double *__restrict__ partial,
                                      const RtcSumsqTensor *__restrict__ tab, int count,
                                      RtcSumsqTensor one) {
  const RtcSumsqTensor *T = tab ? &tab[rtc_find_tensor_(tab, count, blockIdx.x)] : &one;
  size_t i0 = (blockIdx.x - T->first_block) * (size_t)RTC_SUMSQ_CHUNK;
  size_t i1 = min(T->n, i0 + RTC_SUMSQ_CHUNK);
  double s = 0;
  for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    double xi = T->x[i];
    s += xi * xi;
  }
  s = rtc_block_sum_d_(s);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = s;
}

// *out = Σ partial (nparts), one block: thread strides in order, then the tree
__global__ void rtc_sumsq_final_kernel(double *__restrict__ out,
                                       const double *__restrict__ partial, size_t nparts) {
  double s = 0;
  for (size_t i = threadIdx.x; i < nparts; i += blockDim.x)
    s += partial[i];
  s = rtc_block_sum_d_(s);
  if (threadIdx.x == 0)
    *out = s;
}

static RtcOptBuf rtc_adamw_tab_, rtc_sumsq_tab_, rtc_sumsq_part_;
static RtcAdamwTensor *rtc_adamw_host_;   // the table being built
static RtcSumsqTensor *rtc_sumsq_host_;
static int rtc_adamw_host_cap_, rtc_sumsq_host_cap_;

// room for count entries of size esize in *tab (capacity *cap)
static void *rtc_opt_host_table_(void *tab, int *cap, int count, size_t esize) {
  if (count <= *cap)
    return tab;
  void *t = realloc(tab, (size_t)count * esize);
  if (!t)
    rtc_fail("CUDA", "realloc", "out of host memory for a tensor table", __FILE__, __LINE__, "");
  *cap = count;
  return t;
}

/* ---------------------------------------------------------------------------
 * The launchers.
 */

// param, grad, m and v are (n)
extern "C" void rt_adamw_step_cu(float *param, const float *grad, float *m, float *v, size_t n,
                                 double lr, double beta1, double beta2, double eps,
                                 double weight_decay, long t, double grad_scale) {
  if (n == 0)
    return;
  RtcAdamwScalars s = rtc_adamw_scalars_(lr, beta1, beta2, eps, t, grad_scale);
  float decay = (float)(1 - lr * weight_decay);
  RTC_LAUNCH(rtc_adamw_kernel, rtc_blocks(n, RTC_OPT_THREADS), RTC_OPT_THREADS, 0, param, grad,
             m, v, n, decay, s, weight_decay, (const RtcStepScalars *)NULL);
}

// l's tensors (device pointers) each as rt_adamw_step_cu, in one launch
// l's table on the device (uploaded when it changed); *blocks its chunks, 0: none
static const RtcAdamwTensor *rtc_adamw_table_(const RtcAdamwList *l, size_t *nblocks,
                                              int *ncount) {
  rtc_adamw_host_ = (RtcAdamwTensor *)rtc_opt_host_table_(rtc_adamw_host_, &rtc_adamw_host_cap_,
                                                          l->count, sizeof(RtcAdamwTensor));
  size_t blocks = 0;
  int count = 0;
  for (int i = 0; i < l->count; i++) {
    if (l->n[i] == 0)
      continue;
    RtcAdamwTensor *T = &rtc_adamw_host_[count++];
    memset(T, 0, sizeof *T); // compared bytewise with the uploaded table
    T->p = l->param[i];
    T->g = l->grad[i];
    T->m = l->m[i];
    T->v = l->v[i];
    T->n = l->n[i];
    T->wd = l->weight_decay[i];
    T->first_block = blocks;
    blocks += (l->n[i] + RTC_ADAMW_CHUNK - 1) / RTC_ADAMW_CHUNK;
  }
  if (!count)
    return NULL;
  if (blocks > 0x7fffffffu)
    rtc_fail("CUDA", "rt_adamw_multi_cu", "more than 2^31-1 chunks of parameters", __FILE__,
             __LINE__, "");
  *nblocks = blocks;
  *ncount = count;
  return (const RtcAdamwTensor *)rtc_opt_table_(&rtc_adamw_tab_, rtc_adamw_host_,
                                                (size_t)count * sizeof(RtcAdamwTensor));
}

// l's tensors (device pointers) each as rt_adamw_step_cu, in one launch
extern "C" void rt_adamw_multi_cu(const RtcAdamwList *l, double lr, double beta1, double beta2,
                                  double eps, long t, double grad_scale) {
  size_t blocks = 0;
  int count = 0;
  const RtcAdamwTensor *tab = rtc_adamw_table_(l, &blocks, &count);
  if (!tab)
    return;
  RtcAdamwScalars s = rtc_adamw_scalars_(lr, beta1, beta2, eps, t, grad_scale);
  RTC_LAUNCH(rtc_adamw_multi_kernel, (unsigned)blocks, RTC_OPT_THREADS, 0, tab, count, lr, s,
             (const RtcStepScalars *)NULL);
}

/* ---- the step's scalars from the device ---- */

static RtcStepScalars *rtc_step_host_, *rtc_step_dev_; // pinned; device

extern "C" void rtc_opt_scalars_set(double lr, double beta1, double beta2, double eps, long t,
                                    double grad_scale) {
  if (!rtc_step_host_) {
    cudaCheck(cudaMallocHost(&rtc_step_host_, sizeof *rtc_step_host_));
    cudaCheck(cudaMalloc(&rtc_step_dev_, sizeof *rtc_step_dev_));
  }
  RtcStepScalars *S = rtc_step_host_;
  memset(S, 0, sizeof *S);
  S->a = rtc_adamw_scalars_(lr, beta1, beta2, eps, t, grad_scale);
  S->lr = lr;
  S->sgd_lr = (float)lr;
  S->sgd_gs = (float)grad_scale;
  S->sgd_scaled = grad_scale != 1;
}

extern "C" void rtc_opt_scalars_upload(void) {
  if (!rtc_step_dev_)
    rtc_fail("CUDA", "rtc_opt_scalars_upload", "no scalars set", __FILE__, __LINE__,
             "call rtc_opt_scalars_set first");
  cudaCheck(cudaMemcpyAsync(rtc_step_dev_, rtc_step_host_, sizeof *rtc_step_dev_,
                            cudaMemcpyHostToDevice, (cudaStream_t)rtc_stream));
}

extern "C" void rt_adamw_multi_dev_cu(const RtcAdamwList *l) {
  size_t blocks = 0;
  int count = 0;
  const RtcAdamwTensor *tab = rtc_adamw_table_(l, &blocks, &count);
  if (!tab)
    return;
  RtcAdamwScalars s;
  memset(&s, 0, sizeof s);
  RTC_LAUNCH(rtc_adamw_multi_kernel, (unsigned)blocks, RTC_OPT_THREADS, 0, tab, count, 0.0, s,
             (const RtcStepScalars *)rtc_step_dev_);
}

extern "C" void rt_adamw_step_dev_cu(float *param, const float *grad, float *m, float *v,
                                     size_t n, double weight_decay) {
  if (n == 0)
    return;
  RtcAdamwScalars s;
  memset(&s, 0, sizeof s);
  RTC_LAUNCH(rtc_adamw_kernel, rtc_blocks(n, RTC_OPT_THREADS), RTC_OPT_THREADS, 0, param, grad,
             m, v, n, 0.0f, s, weight_decay, (const RtcStepScalars *)rtc_step_dev_);
}

extern "C" void rt_sgd_step_dev_cu(float *param, const float *grad, float *mom, size_t n,
                                   double momentum, double weight_decay) {
  if (n == 0)
    return;
  RTC_LAUNCH(rtc_sgd_kernel, rtc_blocks(n, RTC_OPT_THREADS), RTC_OPT_THREADS, 0, param, grad,
             mom, n, 0.0f, (float)momentum, (float)weight_decay, 0.0f, 0, weight_decay != 0,
             momentum != 0 && mom, (const RtcStepScalars *)rtc_step_dev_);
}

// param, grad and mom are (n)
extern "C" void rt_sgd_step_cu(float *param, const float *grad, float *mom, size_t n, double lr,
                               double momentum, double weight_decay, double grad_scale) {
  if (n == 0)
    return;
  RTC_LAUNCH(rtc_sgd_kernel, rtc_blocks(n, RTC_OPT_THREADS), RTC_OPT_THREADS, 0, param, grad,
             mom, n, (float)lr, (float)momentum, (float)weight_decay, (float)grad_scale,
             grad_scale != 1, weight_decay != 0, momentum != 0 && mom,
             (const RtcStepScalars *)NULL);
}

// *out (device) = Σ over bufs[i] (ns[i]) of x², device memory; the array bufs
// is host memory.  A single tensor needs no table.
static void rtc_sumsq_(double *out, const float *const *bufs, const size_t *ns, int count) {
  rtc_sumsq_host_ = (RtcSumsqTensor *)rtc_opt_host_table_(rtc_sumsq_host_, &rtc_sumsq_host_cap_,
                                                          count, sizeof(RtcSumsqTensor));
  size_t blocks = 0;
  int k = 0;
  for (int i = 0; i < count; i++) {
    if (ns[i] == 0)
      continue;
    RtcSumsqTensor *T = &rtc_sumsq_host_[k++];
    memset(T, 0, sizeof *T);
    T->x = bufs[i];
    T->n = ns[i];
    T->first_block = blocks;
    blocks += (ns[i] + RTC_SUMSQ_CHUNK - 1) / RTC_SUMSQ_CHUNK;
  }
  if (!k) {
    cudaCheck(cudaMemsetAsync(out, 0, sizeof *out, (cudaStream_t)rtc_stream)); // 0.0
    return;
  }
  if (blocks > 0x7fffffffu)
    rtc_fail("CUDA", "rt_sumsq_list_cu", "more than 2^31-1 chunks", __FILE__, __LINE__, "");
  RtcSumsqTensor one = rtc_sumsq_host_[0];
  const RtcSumsqTensor *tab =
      k == 1 ? NULL
             : (const RtcSumsqTensor *)rtc_opt_table_(&rtc_sumsq_tab_, rtc_sumsq_host_,
                                                      (size_t)k * sizeof(RtcSumsqTensor));
  rtc_opt_grow_(&rtc_sumsq_part_, blocks * sizeof(double));
  double *partial = (double *)rtc_sumsq_part_.dev;
  RTC_LAUNCH(rtc_sumsq_part_kernel, (unsigned)blocks, RTC_SUMSQ_THREADS, 0, partial, tab, k, one);
  RTC_LAUNCH(rtc_sumsq_final_kernel, 1, RTC_SUMSQ_THREADS, 0, out, (const double *)partial,
             blocks);
}

static double *rtc_sumsq_out_; // the synchronous launchers' result

extern "C" double rt_sumsq_list_cu(const float *const *bufs, const size_t *ns, int count) {
  if (!rtc_sumsq_out_)
    cudaCheck(cudaMalloc(&rtc_sumsq_out_, sizeof(double)));
  rtc_sumsq_(rtc_sumsq_out_, bufs, ns, count);
  double r = 0;
  cudaCheck(cudaMemcpyAsync(&r, rtc_sumsq_out_, sizeof r, cudaMemcpyDeviceToHost,
                            (cudaStream_t)rtc_stream));
  cudaCheck(cudaStreamSynchronize((cudaStream_t)rtc_stream));
  return r;
}

// x is (n)
extern "C" double rt_sumsq_cu(const float *x, size_t n) { return rt_sumsq_list_cu(&x, &n, 1); }

extern "C" void rt_sumsq_list_dev_cu(double *out, const float *const *bufs, const size_t *ns,
                                     int count) {
  rtc_sumsq_(out, bufs, ns, count);
}

extern "C" void rt_sumsq_dev_cu(double *out, const float *x, size_t n) { rtc_sumsq_(out, &x, &n, 1); }
