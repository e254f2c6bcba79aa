/* k_loss.cu — softmax cross-entropy fused with its gradient
 * (rt_crossentropy_forward/backward/backward_acc).
 *
 * One block per row of logits (V up to 50304 and more): each thread keeps
 * an online (max, Σ exp(x - max)) over its strided elements in one read of
 * the row, then the block merges the pairs (warp shuffles, then the warps in
 * order).  Aligned rows go 16 bytes a load with two loads in flight; a
 * chunk of loaded elements rescales the running sum once, and each element
 * adds exp2f of its distance from the max times log2(e).  The forward
 * leaves each row's loss in double in a scratch buffer; one block then sums them in a fixed order, counts the rows and
 * finds the first bad target, and the launcher reads the result back
 * (synchronizing the stream).  No atomics: the loss is bitwise the same run
 * to run.
 *
 * The row kernels are templated on the storage type T of logits and
 * dlogits (float, or rtc_bf16 under precision = bf16: loaded as float,
 * computed in float, stored rounded; rtc_bf16_io.cuh); losses, lse and the
 * loss are float/double either way.
 */
#include <math.h>

#include "common.cuh"
#include "rtc_bf16_io.cuh"

extern "C" {
#include "shardrt.h" // rt_errorf, RT_ERR_ARG, RT_IGNORE_INDEX
}

/* What the forward's reduction hands back to the host. */
typedef struct {
  double sum;     // Σ over counted rows of lse - x[target], in double
  int count;      // rows whose target is in [0,V)
  int bad_row;    // the first row with a target outside [0,V) that is not the ignore index; N if none
  int bad_target; // its target
  int pad_;
  double loss;    // count ? sum / count : 0, the launcher's *loss
} RtcCeResult;
static_assert(sizeof(RtcCeResult) <= RTC_CE_RESULT_BYTES, "rtc_ws.h: RTC_CE_RESULT_BYTES");

#define RTC_CE_REDUCE_THREADS 256 // the reduction's block: a power of two

/* Scratch for the forward: the per-row losses (N doubles) and the result,
 * from the program's kernel workspace (rtc_ws.h). */
static void *rtc_ce_scratch_;
static size_t rtc_ce_cap_;

static void *rtc_ce_scratch(int N) {
  return rtc_ws_scratch(rtc_ws_cross_entropy(N), &rtc_ce_scratch_, &rtc_ce_cap_,
                        "cross-entropy's row losses", __FILE__, __LINE__);
}

// Threads per row: enough that each has a few dozen elements of a large row.
static unsigned rtc_ce_threads(int V) { return V >= 16384 ? 1024 : V >= 2048 ? 512 : 128; }

// Merges (m2, s2) into (m, s): both are (max, Σ exp(x - max)) over disjoint
// sets; an empty set is (-inf, 0).
__device__ __forceinline__ void rtc_lse_merge_(float &m, float &s, float m2, float s2) {
  float mx = fmaxf(m, m2);
  if (mx == -INFINITY) { // both empty or all -inf: nothing to rescale
    s += s2;
    return;
  }
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

#ifdef RTC_HOST
// The loop below (m and s shuffled a round at a time, merged), replayed from
// one exchange of both (host/cuda_host.h rtch_xor_reduce): the same bits.
struct rtc_lse_pair {
  float m, s;
};
struct rtc_op_lse {
  rtc_lse_pair operator()(rtc_lse_pair a, rtc_lse_pair b) const {
    rtc_lse_merge_(a.m, a.s, b.m, b.s);
    return a;
  }
};
#define RTC_LSE_WARP_MERGE(m, s)                                            \
  do {                                                                      \
    rtc_lse_pair p_ = rtch_xor_reduce(rtc_lse_pair{m, s}, rtc_op_lse(), 16, 1); \
    m = p_.m;                                                               \
    s = p_.s;                                                               \
  } while (0)
#else
#define RTC_LSE_WARP_MERGE(m, s)                                                          \
  for (int o = 16; o > 0; o >>= 1) {                                                    \
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o); \
    rtc_lse_merge_(m, s, m2, s2);                                                       \
  }
#endif

// x is (V): log Σ exp(x), to every thread of the block (blockDim.x a
// multiple of 32).  -inf elements add nothing; a NaN makes it NaN.
// One element into a thread's running (max, sum).
__device__ __forceinline__ void rtc_lse_add_(float &m, float &s, float xi) {
  if (xi > m) {
    s = s * expf(m - xi) + 1.0f;
    m = xi;
  } else if (xi != -INFINITY) {
    s += expf(xi - m);
  }
}

#define RTC_CE_LOG2E 1.4426950408889634f

// A chunk of n elements into a thread's running (max, sum): one rescale for
// the chunk (when its max is larger), then exp2 of each element's distance
// from the max times log2(e) (an FADD, an FMUL and one MUFU.EX2 an element
// on the GPU, where expf is a longer sequence).  -inf elements add 0 (a chunk
// of them alone changes nothing); a NaN adds NaN (fmaxf passes over it in
// the max, not in the sum).
template <int n>
__device__ __forceinline__ void rtc_lse_add_chunk_(float &m, float &s, const float *f) {
  float cm = f[0];
  for (int k = 1; k < n; k++) cm = fmaxf(cm, f[k]);
  if (cm > m) {
    s *= exp2f((m - cm) * RTC_CE_LOG2E);  // 0 when m = -inf
    m = cm;
  }
  if (m == -INFINITY) return;  // every element so far is -inf
  // (x - m) first: exact near the max, where the terms that count are
  for (int k = 0; k < n; k++) s += exp2f((f[k] - m) * RTC_CE_LOG2E);
}

// VEC: x 16-byte aligned, read two vectors (RTC_VEC(T) elements each, so two
// loads in flight) a thread at a time up to the last whole pair, then one,
// the tail element by element.
template <class T, bool VEC = false>
__device__ float rtc_row_lse_(const T *x, int V) {
  __shared__ float part_m[32], part_s[32];
  float m = -INFINITY, s = 0.0f;
  int i0 = 0;
  if (VEC) {
    constexpr int W = RTC_VEC(T);
    float f[2 * W];
    int step = blockDim.x * W, i = threadIdx.x * W;
    i0 = V / W * W;
    for (; i + step < i0; i += 2 * step) {  // a pair: i and i + step
      rtc_ldv(f, x + i);
      rtc_ldv(f + W, x + i + step);
      rtc_lse_add_chunk_<2 * W>(m, s, f);
    }
    if (i < i0) {
      rtc_ldv(f, x + i);
      rtc_lse_add_chunk_<W>(m, s, f);
    }
  }
  for (int i = i0 + threadIdx.x; i < V; i += blockDim.x) rtc_lse_add_(m, s, rtc_ldf(x + i));
  RTC_LSE_WARP_MERGE(m, s);
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads(); // the partials may still be read by an earlier call
  if (lane == 0) {
    part_m[w] = m;
    part_s[w] = s;
  }
  __syncthreads();
  m = lane < nw ? part_m[lane] : -INFINITY;
  s = lane < nw ? part_s[lane] : 0.0f;
  RTC_LSE_WARP_MERGE(m, s);
  return m + logf(s);
}

// logits is (N,ld), the first V columns of a row the classes (ld > V: a
// padded vocabulary's unused columns), targets is (N); block n writes
// rowloss[n] (double) and, when given, losses[n] and lse[n]; rows without a
// target in [0,V) get 0 (the reduction tells an ignored row from a bad one)
template <class T, bool VEC>
__global__ void rtc_ce_forward_kernel(double *__restrict__ rowloss, float *__restrict__ losses,
                                      float *__restrict__ lse, const T *__restrict__ logits,
                                      const int32_t *__restrict__ targets, int V, int ld) {
  int n = blockIdx.x;
  int32_t tgt = targets[n];
  if (tgt < 0 || tgt >= V) { // the whole block returns: no barrier is skipped
    if (threadIdx.x == 0) {
      rowloss[n] = 0;
      if (losses)
        losses[n] = 0;
      if (lse)
        lse[n] = 0;
    }
    return;
  }
  const T *x = logits + (size_t)n * ld;
  float l = rtc_row_lse_<T, VEC>(x, V);
  if (threadIdx.x == 0) {
    float xt = rtc_ldf(x + tgt);
    rowloss[n] = (double)l - (double)xt;
    if (losses)
      losses[n] = l - xt;
    if (lse)
      lse[n] = l;
  }
}

// One block of RTC_CE_REDUCE_THREADS: thread t takes rows t, t+256, ... in
// order, then a fixed tree adds the threads' sums; res gets the sum, the
// count and the first bad row
// (and, given y, *y = (float)loss: the op's output)
__global__ void rtc_ce_reduce_kernel(RtcCeResult *__restrict__ res, float *__restrict__ y,
                                     const double *__restrict__ rowloss,
                                     const int32_t *__restrict__ targets, int N, int V) {
  __shared__ double sum[RTC_CE_REDUCE_THREADS];
  __shared__ int count[RTC_CE_REDUCE_THREADS], bad[RTC_CE_REDUCE_THREADS];
  double s = 0;
  int c = 0, b = N;
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    int32_t t = targets[n];
    if (t == RT_IGNORE_INDEX)
      continue;
    if (t < 0 || t >= V) {
      b = min(b, n);
      continue;
    }
    s += rowloss[n];
    c++;
  }
  sum[threadIdx.x] = s;
  count[threadIdx.x] = c;
  bad[threadIdx.x] = b;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) {
      sum[threadIdx.x] += sum[threadIdx.x + w];
      count[threadIdx.x] += count[threadIdx.x + w];
      bad[threadIdx.x] = min(bad[threadIdx.x], bad[threadIdx.x + w]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    res->sum = sum[0];
    res->count = count[0];
    res->bad_row = bad[0];
    res->bad_target = bad[0] < N ? targets[bad[0]] : 0;
    res->pad_ = 0;
    res->loss = count[0] ? sum[0] / count[0] : 0; // as the host divides
    if (y)
      *y = (float)res->loss;
  }
}

// dlogits and logits are (N,V) and may be the same buffer, lse is (N) or
// NULL, targets is (N).  acc = 0 writes dlogits, acc = 1 adds into it.
// Rows without a target in [0,V) (the ignore index) are zero / untouched.
// With dloss given, scale = (float)(dloss / res->count) (0 without rows), as
// the launcher forms it on the host: the seed and the count stay on the device.
template <class T, bool VEC>
__global__ void rtc_ce_backward_kernel(T *dlogits, const T *logits,
                                       const float *__restrict__ lse,
                                       const int32_t *__restrict__ targets, int V, int ld,
                                       float scale, int acc, const float *__restrict__ dloss,
                                       const RtcCeResult *__restrict__ res) {
  int n = blockIdx.x;
  if (dloss) {
    double norm = res->count;
    scale = (float)(norm > 0 ? (double)*dloss / norm : 0);
  }
  int32_t tgt = targets[n];
  T *dx = dlogits + (size_t)n * ld;
  if (!acc) // a padded vocabulary's unused columns: no gradient
    for (int i = V + threadIdx.x; i < ld; i += blockDim.x)
      rtc_stf(dx + i, 0.0f);
  if (tgt < 0 || tgt >= V) {
    if (!acc)
      for (int i = threadIdx.x; i < V; i += blockDim.x)
        rtc_stf(dx + i, 0.0f);
    return;
  }
  const T *x = logits + (size_t)n * ld;
  // Recomputing lse ends in a barrier after every read of the row, so the
  // writes below cannot clobber a logit another thread still needs; without
  // it each thread reads each of its elements before writing it.
  float l = lse ? lse[n] : rtc_row_lse_<T, VEC>(x, V);
  int i0 = 0;
  if (VEC) { // whole vectors, each read before it is written by the same thread
    constexpr int W = RTC_VEC(T);
    float f[W], g[W];
    i0 = V / W * W;
    for (int i = threadIdx.x * W; i < i0; i += blockDim.x * W) {
      rtc_ldv(f, x + i);
      if (acc) rtc_ldv(g, dx + i);
      for (int k = 0; k < W; k++) {
        float d = (exp2f((f[k] - l) * RTC_CE_LOG2E) - (i + k == tgt ? 1.0f : 0.0f)) * scale;
        g[k] = acc ? g[k] + d : d;
      }
      rtc_stv(dx + i, g);
    }
  }
  for (int i = i0 + threadIdx.x; i < V; i += blockDim.x) {
    float d = (expf(rtc_ldf(x + i) - l) - (i == tgt ? 1.0f : 0.0f)) * scale;
    if (acc)
      rtc_stf(dx + i, rtc_ldf(dx + i) + d);
    else
      rtc_stf(dx + i, d);
  }
}

// logits is (N,V), targets is (N), losses and lse are (N) device buffers or
// NULL; *loss and *n_valid on the host.  On a bad target, RT_ERR_ARG with
// the cpu kernel's message; losses and lse may then have been written.
/* The result of each call site of rt_crossentropy_forward_site_cu, in device
 * memory kept for the process: the site's key is its host loss slot. */
#define RTC_CE_SITES 64
static const void *rtc_ce_key_[RTC_CE_SITES];
static RtcCeResult *rtc_ce_res_;

static RtcCeResult *rtc_ce_site_(const void *key) {
  if (!rtc_ce_res_) {
    cudaCheck(cudaMalloc(&rtc_ce_res_, RTC_CE_SITES * sizeof(RtcCeResult)));
    cudaCheck(cudaMemsetAsync(rtc_ce_res_, 0, RTC_CE_SITES * sizeof(RtcCeResult),
                              (cudaStream_t)rtc_stream));
  }
  for (int i = 0; i < RTC_CE_SITES; i++) {
    if (rtc_ce_key_[i] == key)
      return &rtc_ce_res_[i];
    if (!rtc_ce_key_[i]) {
      rtc_ce_key_[i] = key;
      return &rtc_ce_res_[i];
    }
  }
  rtc_fail("CUDA", "rtc_ce_site_", "more than 64 cross-entropy call sites", __FILE__, __LINE__,
           "");
  return NULL;
}

// rowloss (N doubles) summed into dres (device), and y when given; then,
// unless a stream capture is open, the result read back and checked.
static int rtc_ce_finish_(RtcCeResult *dres, float *y, double *loss, int *n_valid,
                          const double *rowloss, const int32_t *targets, int N, int V) {
  RtcCeResult r = {0, 0, 0, 0, 0, 0};
  if (N > 0) {
    RTC_LAUNCH(rtc_ce_reduce_kernel, 1, RTC_CE_REDUCE_THREADS, 0, dres, y, rowloss, targets, N,
               V);
    if (rtc_capturing())
      return RT_OK; // the driver reads the loss after the replay; the data was checked on load
    cudaCheck(cudaMemcpyAsync(&r, dres, sizeof r, cudaMemcpyDeviceToHost,
                              (cudaStream_t)rtc_stream));
    cudaCheck(cudaStreamSynchronize((cudaStream_t)rtc_stream));
    if (r.bad_row < N)
      return rt_errorf(RT_ERR_ARG,
                       "cross_entropy: target %d at row %d is outside [0,%d) and is not "
                       "the ignore index %d",
                       r.bad_target, r.bad_row, V, RT_IGNORE_INDEX);
  }
  if (loss)
    *loss = r.count ? r.sum / r.count : 0;
  if (n_valid)
    *n_valid = r.count;
  return RT_OK;
}

// The forward into dres (device; the call's own scratch when NULL), and y
// when given.
template <class T>
static int rtc_ce_forward_(RtcCeResult *dres, float *y, double *loss, int *n_valid,
                           float *losses, float *lse, const T *logits,
                           const int32_t *targets, int N, int V, int ld) {
  if (N <= 0)
    return rtc_ce_finish_(dres, y, loss, n_valid, NULL, targets, N, V);
  size_t rows_bytes = rtc_ws_round((size_t)N * sizeof(double));
  char *scratch = (char *)rtc_ce_scratch(N);
  double *rowloss = (double *)scratch;
  if (!dres)
    dres = (RtcCeResult *)(scratch + rows_bytes);
  if (rtc_rows_vec_ok<T>(ld, {logits}))
    RTC_LAUNCH((rtc_ce_forward_kernel<T, true>), N, rtc_ce_threads(V), 0, rowloss, losses, lse,
               logits, targets, V, ld);
  else
    RTC_LAUNCH((rtc_ce_forward_kernel<T, false>), N, rtc_ce_threads(V), 0, rowloss, losses, lse,
               logits, targets, V, ld);
  return rtc_ce_finish_(dres, y, loss, n_valid, rowloss, targets, N, V);
}

/* The end of the vocab-parallel forward (rtc_dist.cu): its rows' losses
 * (rowloss, device, N doubles, 0 on ignored rows) summed as this file's
 * forward sums them, into the site of the host slot loss (so that
 * rt_crossentropy_site_loss_cu and rtc_pass_loss read it), and y. */
extern "C" int rtc_ce_site_finish(double *loss, float *y, const double *rowloss,
                                  const int32_t *targets, int N, int V) {
  return rtc_ce_finish_(rtc_ce_site_(loss), y, loss, NULL, rowloss, targets, N, V);
}

template <class T>
static int rtc_ce_forward_eager_(double *loss, int *n_valid, float *losses, float *lse,
                                 const T *logits, const int32_t *targets, int N, int V) {
  if (rtc_capturing())
    rtc_fail("CUDA", "rt_crossentropy_forward_cu", "reads its loss back during a stream capture",
             __FILE__, __LINE__, "call rt_crossentropy_forward_site_cu");
  return rtc_ce_forward_(NULL, NULL, loss, n_valid, losses, lse, logits, targets, N, V, V);
}

extern "C" int rt_crossentropy_forward_cu(double *loss, int *n_valid, float *losses, float *lse,
                                          const float *logits, const int32_t *targets, int N,
                                          int V) {
  return rtc_ce_forward_eager_(loss, n_valid, losses, lse, logits, targets, N, V);
}

extern "C" int rt_crossentropy_forward_site_cu(double *loss, int *n_valid, float *y,
                                               float *losses, float *lse, const float *logits,
                                               const int32_t *targets, int N, int V) {
  RtcCeResult *dres = rtc_ce_site_(loss);
  return rtc_ce_forward_(dres, y, loss, n_valid, losses, lse, logits, targets, N, V, V);
}

extern "C" int rt_crossentropy_forward_site_ld_cu(double *loss, int *n_valid, float *y,
                                                  float *losses, float *lse, const float *logits,
                                                  const int32_t *targets, int N, int V, int ld) {
  return rtc_ce_forward_(rtc_ce_site_(loss), y, loss, n_valid, losses, lse, logits, targets, N, V,
                         ld);
}

extern "C" const double *rt_crossentropy_site_loss_cu(const double *loss) {
  return &rtc_ce_site_(loss)->loss;
}

template <class T>
static void rtc_ce_backward_(T *dlogits, const T *logits, const float *lse,
                             const int32_t *targets, int N, int V, double dloss, double norm,
                             int acc) {
  if (N <= 0 || V <= 0)
    return;
  float scale = (float)(norm > 0 ? dloss / norm : 0);
  if (rtc_rows_vec_ok<T>(V, {dlogits, logits}))
    RTC_LAUNCH((rtc_ce_backward_kernel<T, true>), N, rtc_ce_threads(V), 0, dlogits, logits, lse,
               targets, V, V, scale, acc, (const float *)NULL, (const RtcCeResult *)NULL);
  else
    RTC_LAUNCH((rtc_ce_backward_kernel<T, false>), N, rtc_ce_threads(V), 0, dlogits, logits, lse,
               targets, V, V, scale, acc, (const float *)NULL, (const RtcCeResult *)NULL);
}

template <class T>
static void rtc_ce_backward_site_(T *dlogits, const T *logits, const float *lse,
                                  const int32_t *targets, int N, int V, int ld,
                                  const float *dloss, const double *site, int acc) {
  if (N <= 0 || V <= 0)
    return;
  if (rtc_rows_vec_ok<T>(ld, {dlogits, logits}))
    RTC_LAUNCH((rtc_ce_backward_kernel<T, true>), N, rtc_ce_threads(V), 0, dlogits, logits, lse,
               targets, V, ld, 0.0f, acc, dloss, (const RtcCeResult *)rtc_ce_site_(site));
  else
    RTC_LAUNCH((rtc_ce_backward_kernel<T, false>), N, rtc_ce_threads(V), 0, dlogits, logits, lse,
               targets, V, ld, 0.0f, acc, dloss, (const RtcCeResult *)rtc_ce_site_(site));
}

// dloss: the seed (device); site: the forward's host loss slot (its count)
extern "C" void rt_crossentropy_backward_site_cu(float *dlogits, const float *logits,
                                                 const float *lse, const int32_t *targets, int N,
                                                 int V, const float *dloss, const double *site,
                                                 int acc) {
  rtc_ce_backward_site_(dlogits, logits, lse, targets, N, V, V, dloss, site, acc);
}

extern "C" void rt_crossentropy_backward_site_ld_cu(float *dlogits, const float *logits,
                                                    const float *lse, const int32_t *targets,
                                                    int N, int V, int ld, const float *dloss,
                                                    const double *site, int acc) {
  rtc_ce_backward_site_(dlogits, logits, lse, targets, N, V, ld, dloss, site, acc);
}

// dlogits and logits are (N,V) (may be the same buffer), lse is (N) or NULL
extern "C" void rt_crossentropy_backward_cu(float *dlogits, const float *logits, const float *lse,
                                            const int32_t *targets, int N, int V, double dloss,
                                            double norm) {
  rtc_ce_backward_(dlogits, logits, lse, targets, N, V, dloss, norm, 0);
}

extern "C" void rt_crossentropy_backward_acc_cu(float *dlogits, const float *logits,
                                                const float *lse, const int32_t *targets, int N,
                                                int V, double dloss, double norm) {
  rtc_ce_backward_(dlogits, logits, lse, targets, N, V, dloss, norm, 1);
}

/* ---- precision = bf16: logits and dlogits bf16 ---- */

int rt_crossentropy_forward_cu(double *loss, int *n_valid, float *losses, float *lse,
                               const rtc_bf16 *logits, const int32_t *targets, int N, int V) {
  return rtc_ce_forward_eager_(loss, n_valid, losses, lse, logits, targets, N, V);
}

int rt_crossentropy_forward_site_cu(double *loss, int *n_valid, float *y, float *losses,
                                    float *lse, const rtc_bf16 *logits, const int32_t *targets,
                                    int N, int V) {
  return rtc_ce_forward_(rtc_ce_site_(loss), y, loss, n_valid, losses, lse, logits, targets, N,
                         V, V);
}

int rt_crossentropy_forward_site_ld_cu(double *loss, int *n_valid, float *y, float *losses,
                                       float *lse, const rtc_bf16 *logits,
                                       const int32_t *targets, int N, int V, int ld) {
  return rtc_ce_forward_(rtc_ce_site_(loss), y, loss, n_valid, losses, lse, logits, targets, N,
                         V, ld);
}

void rt_crossentropy_backward_site_cu(rtc_bf16 *dlogits, const rtc_bf16 *logits, const float *lse,
                                      const int32_t *targets, int N, int V, const float *dloss,
                                      const double *site, int acc) {
  rtc_ce_backward_site_(dlogits, logits, lse, targets, N, V, V, dloss, site, acc);
}

void rt_crossentropy_backward_site_ld_cu(rtc_bf16 *dlogits, const rtc_bf16 *logits,
                                         const float *lse, const int32_t *targets, int N, int V,
                                         int ld, const float *dloss, const double *site,
                                         int acc) {
  rtc_ce_backward_site_(dlogits, logits, lse, targets, N, V, ld, dloss, site, acc);
}

void rt_crossentropy_backward_cu(rtc_bf16 *dlogits, const rtc_bf16 *logits, const float *lse,
                                 const int32_t *targets, int N, int V, double dloss,
                                 double norm) {
  rtc_ce_backward_(dlogits, logits, lse, targets, N, V, dloss, norm, 0);
}

void rt_crossentropy_backward_acc_cu(rtc_bf16 *dlogits, const rtc_bf16 *logits, const float *lse,
                                     const int32_t *targets, int N, int V, double dloss,
                                     double norm) {
  rtc_ce_backward_(dlogits, logits, lse, targets, N, V, dloss, norm, 1);
}
