/* rtc_ring.cu — ring self-attention of the CUDA programs over the sp axis
 * (rtc_train.h): dist_ring.h's rt_ring_attention_forward_f32 /
 * _backward_f32 on device buffers, fp32 or bf16 activations.
 *
 * The same walk as dist_ring.c: step s computes with the blocks in hand,
 * those of rank (rank - s) mod P, through k_attention.cu's launchers, and
 * moves the messages of dist_orders.h's rt_ring_step (the list the
 * compiler's communication check proves deadlock-free) one rank on, each
 * send's bytes added to m->bytes[ax] as the cpu adds them (no calls
 * counted, as there).  The messages travel on a stream of their own
 * (rtc_tp_stream: not behind the gradient buckets in flight on the
 * communication stream) while the step computes: a step's K, V (the step only
 * reads them) are one NCCL group issued before its kernels, the
 * backward's dK, dV a second group after them (they carry what the step
 * added: the cpu's `after`); a group holds each receive with the send that
 * matches it on the previous rank, or the ranks would wait on each other.
 * Receives go to the other of two scratch buffers, the one the previous
 * step read, so the message stream first waits for the kernels
 * issued so far (the previous step's readers; for dK, dV this step's
 * writers), and the next step's kernels wait for the messages (events, no
 * host synchronization); the call ends with the compute stream waiting
 * for the last of them, so its caller and a graph capture see one stream.
 * No allocation during a call (scratch: the arena's and the kernel
 * workspace, rtc_ws.h): a step captures as a CUDA graph.  The host build
 * runs the two streams in issue order (runtime/cuda/host/cuda_host.h).
 *
 * Forward: the partial results merge by log-sum-exp (ring_merge_kernel).
 * fp32: into out and lse, as the cpu does.  bf16: each block's attention
 * is the tensor-core kernel with an fp32 output, the running output and
 * its merge fp32 (the kernel workspace), and out is rounded once, at the
 * last block merged.  Backward: the launchers accumulate into dq and the
 * travelling dK, dV (zeroed scratch); bf16: into fp32 sums (dK, dV travel
 * as fp32, dist_orders.h's gsize), each added to dq, dk, dv and rounded
 * once at the end.
 *
 * Scratch (device; what the memory plan gives the op): fp32,
 * rt_scratch_ring_fwd / _bwd floats, forward [0, 2kv) and [2kv, 4kv) the
 * (K, V) receive buffers, then one block's output (B,Tl,H,D) and lse
 * (B,H,Tl), backward two (K, V, dK, dV) buffers of 4kv; bf16,
 * rt_scratch_ring16 elements, two (K, V) buffers of 2kv.  Kernel
 * workspace: rtc_ws_ring_fwd / _bwd (rtc_ws.h).  In the host build NCCL is
 * host/nccl_host.h (MPI).  Staged (--comm mpi): the cpu functions on host
 * copies (bf16 widened, rounded back, counted as the device counts).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "dist.h"
#include "dist_orders.h"
#include "dist_ring.h"
#include "rtc.h"
#include "rtc_internal.h"
#include "rtc_nccl.h"
#include "rtc_ws.h"

__device__ __forceinline__ float ring_ld_(const float *p) { return *p; }
__device__ __forceinline__ float ring_ld_(const rtc_bf16 *p) { return rtc_bf2f(*p); }
__device__ __forceinline__ void ring_st_(float *p, float v) { *p = v; }
__device__ __forceinline__ void ring_st_(rtc_bf16 *p, float v) { *p = rtc_f2bf(v); }

// acc, ob, fin are (B,Tl,H,D), lse, lb (B,H,Tl); one warp per row
// (b,t,h), grid-stride, 128 threads a block.  Folds a block's output ob
// and logsumexp lb into the running (acc, lse):
// lse' = logaddexp(lse, lb), acc' = e^(lse-lse')·acc + e^(lb-lse')·ob;
// first: acc' = ob, lse' = lb.  fin (or NULL) gets acc' in its type.
template <class F>
__global__ void ring_merge_kernel(float *acc, float *lse, const float *ob, const float *lb,
                                  F *fin, int Tl, int H, int D, size_t rows, int first) {
  size_t nwarps = (size_t)gridDim.x * (blockDim.x / 32);
  int lane = threadIdx.x % 32;
  for (size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows;
       row += nwarps) {
    int h = (int)(row % H);
    size_t bt = row / H;  // b·Tl + t
    size_t li = (bt / Tl * H + h) * Tl + bt % Tl;
    float wa = 0.0f, wc = 1.0f, n = lb[li];
    if (!first) {  // every row is finite: a query sees at least its own key
      float a = lse[li], c = lb[li];
      n = fmaxf(a, c) + log1pf(expf(-fabsf(a - c)));
      wa = expf(a - n);
      wc = expf(c - n);
    }
    float *o = acc + row * D;
    const float *p = ob + row * D;
    for (int d = lane; d < D; d += 32) {
      float r = first ? p[d] : wa * o[d] + wc * p[d];
      o[d] = r;
      if (fin) ring_st_(fin + row * D + d, r);
    }
    __syncwarp();  // the warp's lanes have read lse[li]
    if (lane == 0) lse[li] = n;
  }
}

template <class F>
static void merge_(float *acc, float *lse, const float *ob, const float *lb, F *fin, int B,
                   int Tl, int H, int D, int first) {
  size_t rows = (size_t)B * Tl * H;
  if (!rows || D <= 0) return;
  RTC_LAUNCH(ring_merge_kernel<F>, rtc_blocks(rows, 4), 128, 0, acc, lse, ob, lb, fin, Tl, H, D,
             rows, first);
}

// dst (n) += src (n), the sum in fp32, rounded once (bf16)
template <class G>
__global__ void ring_add_kernel(G *dst, const float *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    ring_st_(dst + i, ring_ld_(dst + i) + src[i]);
}

template <class G>
static void add_(G *dst, const float *src, size_t n) {
  if (n) RTC_LAUNCH(ring_add_kernel<G>, rtc_blocks(n, 256), 256, 0, dst, src, n);
}

template <class S>
static ncclDataType_t nccl_type_(void) {
  return std::is_same<S, rtc_bf16>::value ? ncclBfloat16 : ncclFloat;
}

// A block the ring moves has more elements than a message may count.
static void ring_open_(RtMesh *m, size_t kv) {
  if (kv > INT_MAX)
    rt_mesh_fail(m, "ring attention: K block of %zu elements is too large (limit is %d, the "
                 "MPI count)", kv, INT_MAX);
}

// Step s's messages (rt_ring_step) of K, V (late = 0: they travel while
// the step computes) or of dK, dV (late = 1: after it) as one NCCL group
// on rtc_tp_stream, after the kernels issued so far: a send of
// the block in hand hand[block] to the next rank (its bytes counted on
// ax), a receive into in[block] from the previous; K, V of kvtype, dK, dV
// of gtype.  Returns the bit set (1 << block) of the blocks received.
static unsigned ring_step_(RtMesh *m, RtAxis ax, ncclComm_t c, const RtRingCall *call, int s,
                           int late, void *const *hand, void *const *in,
                           ncclDataType_t kvtype, ncclDataType_t gtype) {
  RtRingMsg msg[RT_RING_STEP_MAX];
  int n = rt_ring_step(call, s, msg), mine = 0;
  int P = call->P, rank = m->coord[ax];
  for (int i = 0; i < n; i++) {
    if ((msg[i].block >= RT_RING_DK) != late) continue;
    mine++;
    if (msg[i].send ? !hand[msg[i].block] : !in[msg[i].block])
      rt_mesh_fail(m, "ring attention: step %d moves block %d, which the %s has not", s,
                   msg[i].block, call->bwd ? "backward" : "forward");
  }
  if (!mine) return 0;
  rtc_tp_after_compute();
  unsigned got = 0;
  ncclCheck(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    const RtRingMsg *g = &msg[i];
    if ((g->block >= RT_RING_DK) != late) continue;
    ncclDataType_t type = g->block >= RT_RING_DK ? gtype : kvtype;
    if (g->send) {
      ncclCheck(ncclSend(hand[g->block], g->n, type, (rank + 1) % P, c, rtc_tp_stream));
      m->bytes[ax] += g->bytes;
    } else {
      ncclCheck(ncclRecv(in[g->block], g->n, type, (rank + P - 1) % P, c, rtc_tp_stream));
      got |= 1u << g->block;
    }
  }
  ncclCheck(ncclGroupEnd());
  return got;
}

/* ---- staged (--comm mpi): the cpu functions on host floats ---- */

static rtc_bf16 *stage_;
static size_t stage_cap_;
static rtc_bf16 *stage_buf_(size_t n) {
  if (n > stage_cap_) {
    free(stage_);
    stage_cap_ = n;
    stage_ = (rtc_bf16 *)malloc((n ? n : 1) * sizeof(rtc_bf16));
    if (!stage_) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
  }
  return stage_;
}
// n elements of the device's d as host floats h, and back (bf16 rounded)
static void to_host_(float *h, const float *d, size_t n) { rtc_to_host(h, d, n * 4); }
static void to_host_(float *h, const rtc_bf16 *d, size_t n) {
  rtc_bf16 *s = stage_buf_(n);
  rtc_to_host(s, d, n * sizeof(rtc_bf16));
  for (size_t i = 0; i < n; i++) h[i] = rtc_bf2f(s[i]);
}
static void to_dev_(float *d, const float *h, size_t n) { rtc_to_device(d, h, n * 4); }
static void to_dev_(rtc_bf16 *d, const float *h, size_t n) {
  rtc_bf16 *s = stage_buf_(n);
  for (size_t i = 0; i < n; i++) s[i] = rtc_f2bf(h[i]);
  rtc_to_device(d, s, n * sizeof(rtc_bf16));
}

template <class S>
static void forward_staged_(RtMesh *m, RtAxis ax, S *out, float *lse, const S *q, const S *k,
                            const S *v, int B, int Tl, int H, int Hkv, int D, int causal) {
  size_t kv = (size_t)B * Tl * Hkv * D, qn = (size_t)B * Tl * H * D, ln = (size_t)B * H * Tl;
  float *hout = rtc_host_buf(0, qn + ln), *hlse = hout + qn, *hq = rtc_host_buf(1, qn);
  float *hk = rtc_host_buf(2, 2 * kv), *hv = hk + kv;
  float *hs = rtc_host_buf(3, rt_scratch_ring_fwd(B, Tl, H, Hkv, D));
  to_host_(hq, q, qn);
  to_host_(hk, k, kv);
  to_host_(hv, v, kv);
  uint64_t before = m->bytes[ax];
  rt_ring_attention_forward_f32(m->comm[ax], &m->bytes[ax], hout, hlse, hq, hk, hv, B, Tl, H,
                                Hkv, D, causal, hs);
  m->bytes[ax] = before + rt_vol_ring_fwd(kv, (int)sizeof(S), m->size[ax]);
  to_dev_(out, hout, qn);
  rtc_to_device(lse, hlse, ln * 4);
}

template <class S>
static void backward_staged_(RtMesh *m, RtAxis ax, S *dq, S *dk, S *dv, const S *dout,
                             const S *q, const S *k, const S *v, const S *out, const float *lse,
                             int B, int Tl, int H, int Hkv, int D, int causal) {
  size_t kv = (size_t)B * Tl * Hkv * D, qn = (size_t)B * Tl * H * D, ln = (size_t)B * H * Tl;
  float *hdq = rtc_host_buf(0, qn + 2 * kv), *hdk = hdq + qn, *hdv = hdk + kv;
  float *hdout = rtc_host_buf(1, 3 * qn), *hq = hdout + qn, *hout = hq + qn;
  float *hk = rtc_host_buf(2, 2 * kv + ln), *hv = hk + kv, *hlse = hv + kv;
  float *hs = rtc_host_buf(3, rt_scratch_ring_bwd(B, Tl, H, Hkv, D));
  if (dq) to_host_(hdq, dq, qn);
  if (dk) to_host_(hdk, dk, kv);
  if (dv) to_host_(hdv, dv, kv);
  to_host_(hdout, dout, qn);
  to_host_(hq, q, qn);
  to_host_(hout, out, qn);
  to_host_(hk, k, kv);
  to_host_(hv, v, kv);
  rtc_to_host(hlse, lse, ln * 4);
  uint64_t before = m->bytes[ax];
  rt_ring_attention_backward_f32(m->comm[ax], &m->bytes[ax], dq ? hdq : NULL, dk ? hdk : NULL,
                                 dv ? hdv : NULL, hdout, hq, hk, hv, hout, hlse, B, Tl, H, Hkv,
                                 D, causal, hs);
  m->bytes[ax] = before + rt_vol_ring_bwd2(kv, (int)sizeof(S), 4, m->size[ax]);
  if (dq) to_dev_(dq, hdq, qn);
  if (dk) to_dev_(dk, hdk, kv);
  if (dv) to_dev_(dv, hdv, kv);
}

/* ---- on the device ---- */

// bf16's fp32 running output, block and sums: the kernel workspace (rtc_ws.h)
static void *ws_lazy_;
static size_t ws_cap_;
static unsigned char *ws_(size_t bytes) {
  return (unsigned char *)rtc_ws_scratch(bytes, &ws_lazy_, &ws_cap_, "ring attention's fp32 sums",
                                         __FILE__, __LINE__);
}

template <class S>
static void forward_(RtMesh *m, RtAxis ax, S *out, float *lse, const S *q, const S *k,
                     const S *v, int B, int Tl, int H, int Hkv, int D, int causal,
                     void *scratch) {
  if (rtc_staged())
    return forward_staged_(m, ax, out, lse, q, k, v, B, Tl, H, Hkv, D, causal);
  int P = m->size[ax], rank = m->coord[ax];
  if (P <= 1) {  // nothing travels: the diagonal block only
    rt_attention_forward_cu(out, lse, q, k, v, B, Tl, H, Hkv, D, causal);
    return;
  }
  size_t kv = (size_t)B * Tl * Hkv * D, qn = (size_t)B * Tl * H * D;
  ring_open_(m, kv);
  ncclComm_t c = rtc_comm_of(m, ax, "rt_ring_attention_forward_cu");
  const bool bf16 = std::is_same<S, rtc_bf16>::value;
  RtRingCall call = {0, P, kv, (int)sizeof(S), 0};
  S *sk = (S *)scratch;
  // the running output (fp32: out itself), a block's output and lse
  float *acc, *ob, *lb;
  if (bf16) {
    unsigned char *w = ws_(rtc_ws_ring_fwd(B, Tl, H, D, 1));
    acc = (float *)w;
    ob = (float *)(w + rtc_ws_round(qn * sizeof(float)));
    lb = (float *)(w + 2 * rtc_ws_round(qn * sizeof(float)));
  } else {
    acc = (float *)out;
    ob = (float *)(sk + 4 * kv);
    lb = ob + qn;
  }
  // the last step that computes (causal: blocks from later ranks are
  // masked); bf16's merge there rounds the result into out
  int last = causal ? rank : P - 1;
  void *hand[RT_RING_NBLOCKS] = {(void *)k, (void *)v, NULL, NULL};
  for (int s = 0; s < P; s++) {
    int src = (rank - s + P) % P;
    S *nk = sk + (size_t)(s & 1) * 2 * kv;
    void *in[RT_RING_NBLOCKS] = {nk, nk + kv, NULL, NULL};
    const S *ck = (const S *)hand[RT_RING_K], *cv = (const S *)hand[RT_RING_V];
    S *fin = bf16 && s == last ? out : NULL;
    // the blocks in hand move on while this step computes with them
    unsigned got = ring_step_(m, ax, c, &call, s, 0, hand, in, nccl_type_<S>(), ncclFloat);
    if (s == 0) {  // the diagonal block: query t sees keys <= t, as on one device
      rt_attention_forward_cu(acc, lse, q, ck, cv, B, Tl, H, Hkv, D, causal);
      if (fin) merge_(acc, lse, acc, lse, fin, B, Tl, H, D, 1);
    } else if (!causal || src < rank) {  // earlier tokens: unmasked
      rt_attention_forward_cu(ob, lb, q, ck, cv, B, Tl, H, Hkv, D, 0);
      merge_(acc, lse, ob, lb, fin, B, Tl, H, D, 0);
    }  // else later tokens, all masked
    if (got) rtc_compute_after_tp();  // the next step computes with what arrived
    for (int b = 0; b < RT_RING_NBLOCKS; b++)
      if (got >> b & 1) hand[b] = in[b];
  }
  rtc_compute_after_tp();  // the last sends have read k, v and the scratch
}

template <class S>
static void backward_(RtMesh *m, RtAxis ax, S *dq, S *dk, S *dv, const S *dout, const S *q,
                      const S *k, const S *v, const S *out, const float *lse, int B, int Tl,
                      int H, int Hkv, int D, int causal, void *scratch) {
  if (rtc_staged())
    return backward_staged_(m, ax, dq, dk, dv, dout, q, k, v, out, lse, B, Tl, H, Hkv, D,
                            causal);
  int P = m->size[ax], rank = m->coord[ax];
  if (P <= 1) {  // nothing travels
    rt_attention_backward_cu(dq, dk, dv, dout, q, k, v, out, lse, B, Tl, H, Hkv, D, causal);
    return;
  }
  size_t kv = (size_t)B * Tl * Hkv * D, qn = (size_t)B * Tl * H * D;
  ring_open_(m, kv);
  ncclComm_t c = rtc_comm_of(m, ax, "rt_ring_attention_backward_cu");
  const bool bf16 = std::is_same<S, rtc_bf16>::value;
  // The blocks in hand: K, V (only read; the caller's k, v at step 0) and
  // their dK, dV accumulating in fp32 the contributions of the queries
  // they have met.  Step s receives into buffer s&1, so step 0's (zeroed)
  // sums live in buffer 1.  fp32: buffer b is (K, V, dK, dV) at 4kv·b of
  // the scratch, and dq accumulates in place.  bf16: (K, V) at 2kv·b of the
  // scratch; the sums (dK, dV) at 2kv·b of g and dq's in dq32 (the kernel
  // workspace, after attention's delta).
  RtRingCall call = {1, P, kv, (int)sizeof(S), bf16 ? 4 : 0};
  S *sk = (S *)scratch;
  float *dq32 = (float *)dq, *g = NULL;
  if (bf16) {
    size_t delta = rtc_ws_attention_bwd(B, Tl, H), dqb = rtc_ws_round(qn * sizeof(float));
    unsigned char *w = ws_(rtc_ws_ring_bwd(B, Tl, H, Hkv, D, 1));
    dq32 = dq ? (float *)(w + delta) : NULL;
    g = (float *)(w + delta + dqb);
    if (dq32) rtc_memset(dq32, 0, qn * sizeof(float));
  }
  S *kvb[2];
  float *gb[2];
  for (int b = 0; b < 2; b++) {
    kvb[b] = sk + (size_t)b * (bf16 ? 2 : 4) * kv;
    gb[b] = bf16 ? g + (size_t)b * 2 * kv : (float *)(kvb[b] + 2 * kv);
  }
  rtc_memset(gb[1], 0, 2 * kv * sizeof(float));
  void *hand[RT_RING_NBLOCKS] = {(void *)k, (void *)v, gb[1], gb[1] + kv};
  for (int s = 0; s < P; s++) {
    int src = (rank - s + P) % P;
    S *n = kvb[s & 1];
    float *ng = gb[s & 1];
    void *in[RT_RING_NBLOCKS] = {n, n + kv, ng, ng + kv};
    // K, V move on while the step computes with them; dK, dV after it
    unsigned got = ring_step_(m, ax, c, &call, s, 0, hand, in, nccl_type_<S>(), ncclFloat);
    // With the final out and lse, P = exp(S - lse) of each block is exact,
    // so its contributions simply add up (FlashAttention-2's backward).
    if (!causal || src <= rank)
      rt_attention_backward_cu(dq32, (float *)hand[RT_RING_DK], (float *)hand[RT_RING_DV], dout,
                               q, (const S *)hand[RT_RING_K], (const S *)hand[RT_RING_V], out,
                               lse, B, Tl, H, Hkv, D, causal && src == rank);
    got |= ring_step_(m, ax, c, &call, s, 1, hand, in, nccl_type_<S>(), ncclFloat);
    if (got) rtc_compute_after_tp();  // the next step computes and adds into what arrived
    for (int b = 0; b < RT_RING_NBLOCKS; b++)
      if (got >> b & 1) hand[b] = in[b];
  }
  rtc_compute_after_tp();  // the last sends have read k, v and the scratch
  // this rank's own block's sums from every rank's queries; bf16: rounded once
  if (bf16 && dq) add_(dq, dq32, qn);
  if (dk) add_(dk, (const float *)hand[RT_RING_DK], kv);
  if (dv) add_(dv, (const float *)hand[RT_RING_DV], kv);
}

extern "C" {

void rt_ring_attention_forward_cu(RtMesh *m, RtAxis ax, float *out, float *lse, const float *q,
                                  const float *k, const float *v, int B, int Tl, int H, int Hkv,
                                  int D, int causal, void *scratch) {
  forward_(m, ax, out, lse, q, k, v, B, Tl, H, Hkv, D, causal, scratch);
}

void rt_ring_attention_backward_cu(RtMesh *m, RtAxis ax, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *lse, int B,
                                   int Tl, int H, int Hkv, int D, int causal, void *scratch) {
  backward_(m, ax, dq, dk, dv, dout, q, k, v, out, lse, B, Tl, H, Hkv, D, causal, scratch);
}

void rt_ring_merge_cu(float *acc, float *lse, const float *ob, const float *lb, int B, int Tl,
                      int H, int D, int first) {
  merge_(acc, lse, ob, lb, (float *)NULL, B, Tl, H, D, first);
}

}  // extern "C"

void rt_ring_attention_forward_cu(RtMesh *m, RtAxis ax, rtc_bf16 *out, float *lse,
                                  const rtc_bf16 *q, const rtc_bf16 *k, const rtc_bf16 *v, int B,
                                  int Tl, int H, int Hkv, int D, int causal, void *scratch) {
  forward_(m, ax, out, lse, q, k, v, B, Tl, H, Hkv, D, causal, scratch);
}

void rt_ring_attention_backward_cu(RtMesh *m, RtAxis ax, rtc_bf16 *dq, rtc_bf16 *dk,
                                   rtc_bf16 *dv, const rtc_bf16 *dout, const rtc_bf16 *q,
                                   const rtc_bf16 *k, const rtc_bf16 *v, const rtc_bf16 *out,
                                   const float *lse, int B, int Tl, int H, int Hkv, int D,
                                   int causal, void *scratch) {
  backward_(m, ax, dq, dk, dv, dout, q, k, v, out, lse, B, Tl, H, Hkv, D, causal, scratch);
}

void rt_ring_merge_cu(float *acc, float *lse, const float *ob, const float *lb, rtc_bf16 *fin,
                      int B, int Tl, int H, int D, int first) {
  merge_(acc, lse, ob, lb, fin, B, Tl, H, D, first);
}
