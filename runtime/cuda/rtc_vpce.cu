/* rtc_vpce.cu — the vocab-parallel cross-entropy: dist.h's
 * rt_vp_crossentropy_forward_f32 / _backward_acc_f32 on device buffers
 * (logits (N,Vl) = columns [v0, v0+Vl) of the (N,V) logits, targets global
 * ids, scratch rt_scratch_vp_xent_bytes(N) bytes), rtc_train.h's fp32
 * launchers and their bf16 overloads.  Row max, Σ exp and the loss in
 * double; NCCL all-reduces of the rows' max and sums on the compute
 * stream; fixed-order block reductions, no atomics: bitwise repeatable.
 *
 * One set of row kernels, templated on the storage type T of logits and
 * dlogits (rtc_bf16_io.cuh: loaded as float, bf16 rounded when stored),
 * serves both.  Staged (--comm mpi): the cpu functions on host copies
 * (bf16 widened, and dlogits rounded back).
 */
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "rtc_bf16_io.cuh"
#include "rtc_internal.h"
#include "rtc_nccl.h"

#define RTC_VPB_THREADS 256 // a row's block: a power of two

// k_loss.cu: the rows' losses summed into the site of the host slot loss, and y
extern "C" int rtc_ce_site_finish(double *loss, float *y, const double *rowloss,
                                  const int32_t *targets, int N, int V);

static cudaStream_t vpb_stream_(void) { return (cudaStream_t)rtc_stream; }

// v over the block in a fixed tree (every thread gets it); max or sum
template <bool MAX>
__device__ double vpb_block_(double v) {
  __shared__ double part[RTC_VPB_THREADS];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = RTC_VPB_THREADS / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) {
      double o = part[threadIdx.x + w];
      part[threadIdx.x] = MAX ? fmax(part[threadIdx.x], o) : part[threadIdx.x] + o;
    }
    __syncthreads();
  }
  double r = part[0];
  __syncthreads(); // part may be written again by the next call
  return r;
}

// bad[0] = the first row whose target is outside [0,V) and not the ignore
// index (N if none), bad[1] its target; one block of RTC_VPB_THREADS
static __global__ void vpb_bad_kernel(int *bad, const int32_t *__restrict__ targets, int N,
                                      int V) {
  int b = N;
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    int32_t t = targets[n];
    if (t != RT_IGNORE_INDEX && (t < 0 || t >= V)) {
      b = n;
      break;
    }
  }
  __shared__ int first[RTC_VPB_THREADS];
  first[threadIdx.x] = b;
  __syncthreads();
  for (int w = RTC_VPB_THREADS / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) first[threadIdx.x] = min(first[threadIdx.x], first[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    bad[0] = first[0];
    bad[1] = first[0] < N ? targets[first[0]] : 0;
  }
}

// logits is (N,Vl), of which the first nv columns of a row are classes (the
// rest a padded vocabulary's unused ones); block n: mx[n] = the row's max
// over them (0 on ignored rows)
template <class T>
static __global__ void vpb_max_kernel(double *__restrict__ mx, const T *__restrict__ logits,
                                      const int32_t *__restrict__ targets, int Vl, int nv) {
  int n = blockIdx.x;
  if (targets[n] < 0) { // the whole block returns: no barrier is skipped
    if (threadIdx.x == 0) mx[n] = 0;
    return;
  }
  const T *x = logits + (size_t)n * Vl;
  double m = -INFINITY;
  for (int i = threadIdx.x; i < nv; i += blockDim.x) m = fmax(m, (double)rtc_ldf(x + i));
  m = vpb_block_<true>(m);
  if (threadIdx.x == 0) mx[n] = m;
}

// block n: se[stride·n] = Σ exp(x - mx[n]) over the slice and, with stride
// 2, se[2n+1] = the target's logit when it is in the slice; 0 otherwise
template <class T>
static __global__ void vpb_sumexp_kernel(double *__restrict__ se, int stride,
                                         const double *__restrict__ mx,
                                         const T *__restrict__ logits,
                                         const int32_t *__restrict__ targets, int Vl, int nv,
                                         int v0) {
  int n = blockIdx.x;
  int32_t t = targets[n];
  if (t < 0) {
    if (threadIdx.x == 0) {
      se[stride * n] = 0;
      if (stride == 2) se[2 * n + 1] = 0;
    }
    return;
  }
  const T *x = logits + (size_t)n * Vl;
  double m = mx[n], s = 0;
  for (int i = threadIdx.x; i < nv; i += blockDim.x) s += exp((double)rtc_ldf(x + i) - m);
  s = vpb_block_<false>(s);
  if (threadIdx.x == 0) {
    se[stride * n] = s;
    int tl = t - v0;
    if (stride == 2) se[2 * n + 1] = tl >= 0 && tl < nv ? (double)rtc_ldf(x + tl) : 0;
  }
}

// rowloss[n] = log Σexp + max - target logit (0 on ignored rows); rowloss
// may be mx (each element is read and written by one thread)
static __global__ void vpb_rowloss_kernel(double *rowloss, const double *mx,
                                          const double *__restrict__ se,
                                          const int32_t *__restrict__ targets, int N) {
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x)
    rowloss[n] = targets[n] >= 0 ? log(se[2 * n]) + mx[n] - se[2 * n + 1] : 0;
}

// block n: dlogits[n] += (exp(x - lse) - onehot)·(dloss/norm), lse = mx + log se;
// nothing on ignored rows, nor past a row's nv classes
template <class T>
static __global__ void vpb_grad_kernel(T *__restrict__ dlogits, const T *__restrict__ logits,
                                       const int32_t *__restrict__ targets, int Vl, int nv, int v0,
                                       const double *__restrict__ mx,
                                       const double *__restrict__ se,
                                       const float *__restrict__ dloss, double norm) {
  int n = blockIdx.x;
  int32_t t = targets[n];
  if (t < 0) return;
  double lse = mx[n] + log(se[n]), scale = norm > 0 ? (double)*dloss / norm : 0;
  int tl = t - v0;
  const T *x = logits + (size_t)n * Vl;
  T *dx = dlogits + (size_t)n * Vl;
  for (int i = threadIdx.x; i < nv; i += blockDim.x)
    rtc_stf(dx + i, rtc_ldf(dx + i) +
                        (float)((exp((double)rtc_ldf(x + i) - lse) - (i == tl)) * scale));
}

// the global row max into mx (N doubles): a kernel, then the all-reduce
template <class T>
static void vpb_global_max_(RtMesh *m, RtAxis ax, ncclComm_t c, double *mx, const T *logits,
                            const int32_t *targets, int N, int Vl, int nv) {
  if (N > 0) RTC_LAUNCH(vpb_max_kernel<T>, N, RTC_VPB_THREADS, 0, mx, logits, targets, Vl, nv);
  if (m->size[ax] > 1)
    ncclCheck(ncclAllReduce(mx, mx, (size_t)N, ncclDouble, ncclMax, c, vpb_stream_()));
}

// n device values into host buffer k as floats (bf16 widened)
static float *vpb_up_(int k, const float *dev, size_t n) {
  float *h = rtc_host_buf(k, n);
  rtc_to_host(h, dev, n * sizeof(float));
  return h;
}
static float *vpb_up_(int k, const rtc_bf16 *dev, size_t n) {
  float *h = rtc_host_buf(k, n);
  rtc_bf16 *b = (rtc_bf16 *)malloc(n * sizeof(rtc_bf16) + 1);
  if (!b) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
  rtc_to_host(b, dev, n * sizeof(rtc_bf16));
  for (size_t i = 0; i < n; i++) h[i] = rtc_bf2f(b[i]);
  free(b);
  return h;
}
// n host floats back to the device (bf16 rounded)
static void vpb_down_(float *dev, const float *h, size_t n) {
  rtc_to_device(dev, h, n * sizeof(float));
}
static void vpb_down_(rtc_bf16 *dev, const float *h, size_t n) {
  rtc_bf16 *b = (rtc_bf16 *)malloc(n * sizeof(rtc_bf16) + 1);
  if (!b) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
  for (size_t i = 0; i < n; i++) b[i] = rtc_f2bf(h[i]);
  rtc_to_device(dev, b, n * sizeof(rtc_bf16));
  free(b);
}

// The classes among the slice's columns [v0, v0+Vl): those below V (dist.c)
static int vpb_classes_(int Vl, int v0, int V) {
  long long nv = (long long)V - v0;
  return nv < 0 ? 0 : nv > Vl ? Vl : (int)nv;
}

template <class T>
static int vpb_forward_(RtMesh *m, RtAxis ax, double *loss, float *y, const T *logits,
                        const int32_t *targets, int N, int Vl, int v0, int V, double *scratch) {
  if (N < 0 || Vl < 0 || v0 < 0 || V < 1)
    return rt_errorf(RT_ERR_ARG, "vp_cross_entropy: slice [%d,%d) of %d rows of a vocabulary "
                     "of %d classes", v0, v0 + Vl, N, V);
  const int nv = vpb_classes_(Vl, v0, V);
  if (rtc_staged()) { /* dist.h's on host copies; it checks, communicates and counts */
    float *hx = vpb_up_(0, logits, (size_t)N * Vl);
    int32_t *ht = (int32_t *)rtc_host_buf(1, (size_t)N);
    double *hs = (double *)rtc_host_buf(2, rt_scratch_vp_xent_bytes((size_t)N) / 4);
    rtc_to_host(ht, targets, (size_t)N * 4);
    int rc = rt_vp_crossentropy_forward_f32(m, ax, loss, hx, ht, N, Vl, v0, V, hs);
    if (rc != RT_OK) return rc;
    rtc_to_device(scratch, hs, rt_scratch_vp_xent_bytes((size_t)N));
    if (y) rtc_set_f32(y, (float)*loss);
    return RT_OK;
  }
  /* the targets, before any communication (a captured step's were checked
   * when its step ran eagerly, and the data on load) */
  if (N > 0 && !rtc_capturing()) {
    int bad[2];
    RTC_LAUNCH(vpb_bad_kernel, 1, RTC_VPB_THREADS, 0, (int *)scratch, targets, N, V);
    rtc_to_host(bad, scratch, sizeof bad);
    if (bad[0] < N)
      return rt_errorf(RT_ERR_ARG,
                       "vp_cross_entropy: target %d at row %d is outside [0,%d) and is not "
                       "the ignore index %d",
                       bad[1], bad[0], V, RT_IGNORE_INDEX);
  }
  ncclComm_t c = rtc_comm_of(m, ax, "rt_vp_crossentropy_forward_cu");
  int P = m->size[ax];
  double *mx = scratch, *se = scratch + N; // se: (sumexp, target logit) per row
  vpb_global_max_(m, ax, c, mx, logits, targets, N, Vl, nv);
  if (N > 0)
    RTC_LAUNCH(vpb_sumexp_kernel<T>, N, RTC_VPB_THREADS, 0, se, 2, (const double *)mx, logits,
               targets, Vl, nv, v0);
  if (P > 1)
    ncclCheck(ncclAllReduce(se, se, 2 * (size_t)N, ncclDouble, ncclSum, c, vpb_stream_()));
  m->bytes[ax] += rt_vol_vp_xent_fwd((size_t)N, P);
  m->calls[ax] += 2; // two all-reduces
  if (N > 0)
    RTC_LAUNCH(vpb_rowloss_kernel, rtc_blocks((size_t)N, 256), 256, 0, mx, (const double *)mx,
               (const double *)se, targets, N);
  return rtc_ce_site_finish(loss, y, mx, targets, N, V);
}

template <class T>
static void vpb_backward_acc_(RtMesh *m, RtAxis ax, T *dlogits, const T *logits,
                              const int32_t *targets, int N, int Vl, int v0, int V,
                              const float *dloss, double norm, double *scratch) {
  const int nv = vpb_classes_(Vl, v0, V);
  if (rtc_staged()) {
    size_t nx = (size_t)N * Vl;
    float *hd = vpb_up_(0, dlogits, nx), *hx = vpb_up_(3, logits, nx);
    int32_t *ht = (int32_t *)rtc_host_buf(1, (size_t)N);
    double *hs = (double *)rtc_host_buf(2, rt_scratch_vp_xent_bytes((size_t)N) / 4);
    rtc_to_host(ht, targets, (size_t)N * 4);
    rt_vp_crossentropy_backward_acc_cls_f32(m, ax, hd, hx, ht, N, Vl, v0, V, rtc_get_f32(dloss),
                                            norm, hs);
    vpb_down_(dlogits, hd, nx);
    rtc_to_device(scratch, hs, 2 * (size_t)N * sizeof(double));
    return;
  }
  ncclComm_t c = rtc_comm_of(m, ax, "rt_vp_crossentropy_backward_acc_cu");
  int P = m->size[ax];
  double *mx = scratch, *se = scratch + N;
  vpb_global_max_(m, ax, c, mx, logits, targets, N, Vl, nv);
  if (N > 0)
    RTC_LAUNCH(vpb_sumexp_kernel<T>, N, RTC_VPB_THREADS, 0, se, 1, (const double *)mx, logits,
               targets, Vl, nv, v0);
  if (P > 1) ncclCheck(ncclAllReduce(se, se, (size_t)N, ncclDouble, ncclSum, c, vpb_stream_()));
  m->bytes[ax] += rt_vol_vp_xent_bwd((size_t)N, P);
  m->calls[ax] += 2; // two all-reduces
  if (N > 0)
    RTC_LAUNCH(vpb_grad_kernel<T>, N, RTC_VPB_THREADS, 0, dlogits, logits, targets, Vl, nv, v0,
               (const double *)mx, (const double *)se, dloss, norm);
}

int rt_vp_crossentropy_forward_cu(RtMesh *m, RtAxis ax, double *loss, float *y,
                                  const float *logits, const int32_t *targets, int N, int Vl,
                                  int v0, int V, double *scratch) {
  return vpb_forward_(m, ax, loss, y, logits, targets, N, Vl, v0, V, scratch);
}

void rt_vp_crossentropy_backward_acc_cu(RtMesh *m, RtAxis ax, float *dlogits, const float *logits,
                                        const int32_t *targets, int N, int Vl, int v0,
                                        const float *dloss, double norm, double *scratch) {
  vpb_backward_acc_(m, ax, dlogits, logits, targets, N, Vl, v0, v0 + Vl, dloss, norm, scratch);
}

void rt_vp_crossentropy_backward_acc_cls_cu(RtMesh *m, RtAxis ax, float *dlogits,
                                            const float *logits, const int32_t *targets, int N,
                                            int Vl, int v0, int V, const float *dloss, double norm,
                                            double *scratch) {
  vpb_backward_acc_(m, ax, dlogits, logits, targets, N, Vl, v0, V, dloss, norm, scratch);
}

int rt_vp_crossentropy_forward_cu(RtMesh *m, RtAxis ax, double *loss, float *y,
                                  const rtc_bf16 *logits, const int32_t *targets, int N, int Vl,
                                  int v0, int V, double *scratch) {
  return vpb_forward_(m, ax, loss, y, logits, targets, N, Vl, v0, V, scratch);
}

void rt_vp_crossentropy_backward_acc_cu(RtMesh *m, RtAxis ax, rtc_bf16 *dlogits,
                                        const rtc_bf16 *logits, const int32_t *targets, int N,
                                        int Vl, int v0, const float *dloss, double norm,
                                        double *scratch) {
  vpb_backward_acc_(m, ax, dlogits, logits, targets, N, Vl, v0, v0 + Vl, dloss, norm, scratch);
}

void rt_vp_crossentropy_backward_acc_cls_cu(RtMesh *m, RtAxis ax, rtc_bf16 *dlogits,
                                            const rtc_bf16 *logits, const int32_t *targets, int N,
                                            int Vl, int v0, int V, const float *dloss, double norm,
                                            double *scratch) {
  vpb_backward_acc_(m, ax, dlogits, logits, targets, N, Vl, v0, V, dloss, norm, scratch);
}
