/* rtc_summa.cu — SUMMA linear layers (2D tensor parallelism, Optimus) of
 * the CUDA programs on a q×q grid: dist_summa.h's rt_summa_forward_f32 /
 * rt_summa_backward_f32 on device buffers (rtc_train.h).
 *
 * The same walk as dist_summa.c: the collectives of dist_orders.h's
 * rt_summa_step in its order (the list the compiler's communication check
 * proves deadlock-free), as NCCL broadcasts, reduces to the step's owner
 * and the bias gradient's all-reduce on the compute stream, each adding its
 * dist_formulas.h volume to m->bytes of its axis as the cpu adds it (no
 * calls are counted: the cpu functions count none).  The local products
 * are rt_gemm_cu (cuBLASLt) in the cpu's order: the forward accumulates its
 * q products onto y step by step, a reduce's partial is its own GEMM then
 * added to its owner's block.  No atomics: bitwise the same run to run.
 * In the host build NCCL is host/nccl_host.h (MPI).  Staged (--comm mpi):
 * the cpu functions on host copies.
 */
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "dist_orders.h"
#include "dist_summa.h"
#include "rtc.h"
#include "rtc_internal.h"
#include "rtc_nccl.h"

static cudaStream_t stream_(void) { return (cudaStream_t)rtc_stream; }

// y is (Mb,Nb): every row = bias (Nb)
static __global__ void rtc_summa_fill_kernel(float *__restrict__ y,
                                             const float *__restrict__ bias, int Mb, int Nb) {
  size_t total = (size_t)Mb * Nb;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = bias[i % Nb];
}

// own is this rank's (n) block, buf (n) scratch: the root's block broadcast
// over c, read from own on the root (NCCL's in-place broadcast there)
static const float *bcast_block_(ncclComm_t c, int me, int q, const float *own, float *buf,
                                 size_t n, int root) {
  float *p = me == root ? (float *)own : buf;
  if (q > 1) ncclCheck(ncclBroadcast(p, p, n, ncclFloat, root, c, stream_()));
  return p;
}

// The order asked for a block this launcher has not got: the header and
// the launcher disagree, and the other ranks would wait forever.
static void order_fail_(RtMesh *m, int step, const char *why) {
  rt_mesh_fail(m, "summa: step %d: %s", step, why);
}

extern "C" void rt_summa_forward_cu(RtMesh *m, RtAxis row, RtAxis col, float *y, const float *x,
                                    const float *w, const float *bias, int Mb, int Kb, int Nb,
                                    float *scratch) {
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb, ye = (size_t)Mb * Nb;
  if (rtc_staged()) { /* dist_summa.c's on host copies; it communicates and counts */
    float *hy = rtc_host_buf(0, ye), *hx = rtc_host_buf(1, xe), *hw = rtc_host_buf(2, we);
    float *hs = rtc_host_buf(3, rt_scratch_summa_fwd(xe, we) + (size_t)Nb);
    float *hb = bias ? hs + rt_scratch_summa_fwd(xe, we) : NULL;
    rtc_to_host(hx, x, xe * 4);
    rtc_to_host(hw, w, we * 4);
    if (bias) rtc_to_host(hb, bias, (size_t)Nb * 4);
    rt_summa_forward_f32(m->comm[row], m->comm[col], &m->bytes[row], &m->bytes[col], hy, hx, hw,
                         hb, Mb, Kb, Nb, hs);
    rtc_to_device(y, hy, ye * 4);
    return;
  }
  ncclComm_t cr = rtc_comm_of(m, row, "rt_summa_forward_cu");
  ncclComm_t cc = rtc_comm_of(m, col, "rt_summa_forward_cu");
  int q = m->size[row], i = m->coord[col], j = m->coord[row];
  float *xbuf = scratch, *wbuf = scratch + xe;
  double beta = 0;
  if (bias) {
    if (ye) RTC_LAUNCH(rtc_summa_fill_kernel, rtc_blocks(ye, 256), 256, 0, y, bias, Mb, Nb);
    beta = 1;
  }
  RtSummaCall call = {0, q, 0, 0, 0, xe, we, 0, (int)sizeof(float)};
  for (int k = 0; k < q; k++) {
    RtSummaMsg msg[RT_SUMMA_STEP_MAX];
    int n = rt_summa_step(&call, k, msg);
    const float *xk = NULL, *wk = NULL;
    for (int t = 0; t < n; t++) {
      const RtSummaMsg *g = &msg[t];
      if (g->coll != RT_SUMMA_BCAST || (g->block != RT_SUMMA_X && g->block != RT_SUMMA_W))
        order_fail_(m, g->step, "the forward only broadcasts X and W blocks");
      if (g->block == RT_SUMMA_X)
        xk = bcast_block_(g->col ? cc : cr, g->col ? i : j, q, x, xbuf, g->n, g->root);
      else
        wk = bcast_block_(g->col ? cc : cr, g->col ? i : j, q, w, wbuf, g->n, g->root);
      m->bytes[g->col ? col : row] += g->vol;
    }
    if (!xk || !wk) order_fail_(m, k, "the step needs an X and a W block");
    // (Mb,Nb) += (Mb,Kb)·(Nb,Kb)ᵀ
    rt_gemm_cu(0, 1, Mb, Nb, Kb, 1, xk, Kb, wk, Kb, beta, y, Nb);
    beta = 1;
  }
}

extern "C" void rt_summa_backward_cu(RtMesh *m, RtAxis row, RtAxis col, float *dx, float *dw,
                                     float *dbias, const float *dy, const float *x,
                                     const float *w, int Mb, int Kb, int Nb, float *scratch) {
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb, ye = (size_t)Mb * Nb;
  if (rtc_staged()) {
    /* buffer 0: dx, dw, dbias; 1: dy; 2: x, w; 3: the scratch */
    float *hdx = rtc_host_buf(0, xe + we + (size_t)Nb), *hdw = hdx + xe, *hdb = hdw + we;
    float *hdy = rtc_host_buf(1, ye), *hx = rtc_host_buf(2, xe + we), *hw = hx + xe;
    float *hs = rtc_host_buf(3, rt_scratch_summa_bwd(xe, we));
    rtc_to_host(hdy, dy, ye * 4);
    rtc_to_host(hx, x, xe * 4);
    rtc_to_host(hw, w, we * 4);
    if (dx) rtc_to_host(hdx, dx, xe * 4);
    if (dw) rtc_to_host(hdw, dw, we * 4);
    if (dbias) rtc_to_host(hdb, dbias, (size_t)Nb * 4);
    rt_summa_backward_f32(m->comm[row], m->comm[col], &m->bytes[row], &m->bytes[col],
                          dx ? hdx : NULL, dw ? hdw : NULL, dbias ? hdb : NULL, hdy, hx, hw, Mb,
                          Kb, Nb, hs);
    if (dx) rtc_to_device(dx, hdx, xe * 4);
    if (dw) rtc_to_device(dw, hdw, we * 4);
    if (dbias) rtc_to_device(dbias, hdb, (size_t)Nb * 4);
    return;
  }
  ncclComm_t cr = rtc_comm_of(m, row, "rt_summa_backward_cu");
  ncclComm_t cc = rtc_comm_of(m, col, "rt_summa_backward_cu");
  int q = m->size[row], i = m->coord[col], j = m->coord[row];
  float *xbuf = scratch, *wbuf = xbuf + xe, *tx = wbuf + we, *tw = tx + xe;
  RtSummaCall call = {1, q, dx != NULL, dw != NULL, dbias != NULL, xe, we, (size_t)Nb,
                      (int)sizeof(float)};
  for (int l = 0; l < q; l++) {
    RtSummaMsg msg[RT_SUMMA_STEP_MAX];
    int n = rt_summa_step(&call, l, msg);
    const float *xl = NULL, *wl = NULL; // this step's broadcast blocks
    for (int t = 0; t < n; t++) {
      const RtSummaMsg *g = &msg[t];
      ncclComm_t c = g->col ? cc : cr;
      int me = g->col ? i : j; // coord on c
      switch (g->block) {
      case RT_SUMMA_W: // W(j,l), held by rank (l,j)
        wl = bcast_block_(c, me, q, w, wbuf, g->n, g->root);
        break;
      case RT_SUMMA_X: // X(i,l), held by rank (i,l)
        xl = bcast_block_(c, me, q, x, xbuf, g->n, g->root);
        break;
      case RT_SUMMA_DX: // dX(i,l) = Σ_j dY(i,j)·W(j,l), kept by rank (i,l)
        if (!wl || !dx) order_fail_(m, g->step, "a dX reduce needs dx and the step's W block");
        rt_gemm_cu(0, 0, Mb, Kb, Nb, 1, dy, Nb, wl, Kb, 0, tx, Kb); // (Mb,Nb)·(Nb,Kb)
        if (q > 1) ncclCheck(ncclReduce(tx, tx, g->n, ncclFloat, ncclSum, g->root, c, stream_()));
        if (me == g->root) rt_axpy_cu(dx, tx, 1, g->n);
        break;
      case RT_SUMMA_DW: // dW(j,l) = Σ_i dY(i,j)ᵀ·X(i,l), kept by rank (l,j)
        if (!xl || !dw) order_fail_(m, g->step, "a dW reduce needs dw and the step's X block");
        rt_gemm_cu(1, 0, Nb, Kb, Mb, 1, dy, Nb, xl, Kb, 0, tw, Kb); // (Mb,Nb)ᵀ·(Mb,Kb)
        if (q > 1) ncclCheck(ncclReduce(tw, tw, g->n, ncclFloat, ncclSum, g->root, c, stream_()));
        if (me == g->root) rt_axpy_cu(dw, tw, 1, g->n);
        break;
      case RT_SUMMA_DB: // this block's column sums, then the column's: Nb <= Nb·Kb fits wbuf
        if (!dbias) order_fail_(m, g->step, "a bias all-reduce needs dbias");
        rtc_memset(wbuf, 0, g->n * sizeof(float));
        rt_matmul_backward_cu(NULL, NULL, wbuf, dy, x, w, Mb, Kb, Nb);
        if (q > 1)
          ncclCheck(ncclAllReduce(wbuf, wbuf, g->n, ncclFloat, ncclSum, c, stream_()));
        rt_axpy_cu(dbias, wbuf, 1, g->n);
        break;
      default:
        order_fail_(m, g->step, "no such block");
      }
      m->bytes[g->col ? col : row] += g->vol;
    }
  }
}

/* ---------------------------------------------------------------------------
 * precision = bf16 storage (rtc_train.h's bf16 block): x, y, dx, dy and w
 * (the weight's bf16 copy) are bf16; bias, dw and dbias fp32.  The same
 * walk as above with the messages of a bf16 call (esize 2): what is
 * broadcast is stored data, the X and W blocks, and travels as bf16
 * (ncclBfloat16, 2 bytes an element); what is reduced is a partial sum, the
 * dX and dW partials and the bias gradient, and travels as fp32 (ncclFloat,
 * 4 bytes an element: dist_orders.h's rt_summa_msg_vol_bf16), so that
 * dx is rounded once, at its owner, and dw, dbias not at all (bf16 dX
 * partials, rounded per rank and per step of NCCL's sum, lose 1-4% where
 * the partials cancel).  The local GEMMs are the bf16 rt_gemm_cu (fp32
 * accumulation); y accumulates its q products in bf16, rounded after each
 * step (an fp32 y would not fit the scratch).
 *
 * Scratch, in bytes, exactly rt_scratch_summa_fwd / _bwd(Mb·Kb, Nb·Kb) × 2
 * (what the memory plan gives an op whose input is bf16), xe = Mb·Kb,
 * we = Nb·Kb:
 *   forward   [0, 2xe) the X block, [2xe, 2xe+2we) the W block (bf16);
 *   backward  [0, 4xe) the fp32 dX partial while a step's dX part runs,
 *             then [0, 2xe) the bf16 X block for its dW part;
 *             [4xe, 4xe+2we) the bf16 W block for the dX part, then
 *             [4xe, 4xe+4we) the fp32 dW partial for the dW part, and the
 *             fp32 bias gradient (Nb <= we floats) at the last step.
 *   A step broadcasts W, reduces dX, then broadcasts X and reduces dW
 *   (dist_orders.h), all on the compute stream: each buffer's last reader
 *   runs before the next writer of its bytes.
 */

// y is (Mb,Nb) bf16: every row = bias (Nb), rounded
static __global__ void rtc_summa_fill_bf16_kernel(rtc_bf16 *__restrict__ y,
                                                  const float *__restrict__ bias, int Mb, int Nb) {
  size_t total = (size_t)Mb * Nb;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = rtc_f2bf(bias[i % Nb]);
}

// dst (n) bf16 += src (n) fp32, the sum in fp32, rounded once
static __global__ void rtc_summa_acc_bf16_kernel(rtc_bf16 *__restrict__ dst,
                                                 const float *__restrict__ src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = rtc_f2bf(rtc_bf2f(dst[i]) + src[i]);
}

// bcast_block_ of bf16 blocks
static const rtc_bf16 *bcast_block_bf16_(ncclComm_t c, int me, int q, const rtc_bf16 *own,
                                         rtc_bf16 *buf, size_t n, int root) {
  rtc_bf16 *p = me == root ? (rtc_bf16 *)own : buf;
  if (q > 1) ncclCheck(ncclBroadcast(p, p, n, ncclBfloat16, root, c, stream_()));
  return p;
}

// Every message of the call counted on the axes (the staged mode's counts).
static void count_bf16_(RtMesh *m, RtAxis row, RtAxis col, const RtSummaCall *call) {
  for (int k = 0; k < call->q; k++) {
    RtSummaMsg msg[RT_SUMMA_STEP_MAX];
    int n = rt_summa_step(call, k, msg);
    for (int t = 0; t < n; t++)
      m->bytes[msg[t].col ? col : row] += rt_summa_msg_vol_bf16(&msg[t], call->q);
  }
}

/* The staged mode's bf16 transfers: n elements between the device and host
 * floats, through a bf16 host buffer grown as needed. */
static rtc_bf16 *stage_;
static size_t stage_cap_;
static rtc_bf16 *stage_buf_(size_t n) {
  if (n > stage_cap_) {
    free(stage_);
    stage_ = (rtc_bf16 *)malloc((n ? n : 1) * sizeof(rtc_bf16));
    if (!stage_) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
    stage_cap_ = n;
  }
  return stage_;
}
static void to_host_bf16_(float *h, const rtc_bf16 *dev, size_t n) {
  rtc_bf16 *s = stage_buf_(n);
  rtc_to_host(s, dev, n * sizeof(rtc_bf16));
  for (size_t i = 0; i < n; i++) h[i] = rtc_bf2f(s[i]);
}
static void to_device_bf16_(rtc_bf16 *dev, const float *h, size_t n) {
  rtc_bf16 *s = stage_buf_(n);
  for (size_t i = 0; i < n; i++) s[i] = rtc_f2bf(h[i]);
  rtc_to_device(dev, s, n * sizeof(rtc_bf16));
}

void rt_summa_forward_cu(RtMesh *m, RtAxis row, RtAxis col, rtc_bf16 *y, const rtc_bf16 *x,
                         const rtc_bf16 *w, const float *bias, int Mb, int Kb, int Nb,
                         void *scratch) {
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb, ye = (size_t)Mb * Nb;
  int q = m->size[row];
  RtSummaCall call = {0, q, 0, 0, 0, xe, we, 0, (int)sizeof(rtc_bf16)};
  if (rtc_staged()) { /* dist_summa.c's on widened host copies, counted as bf16 */
    float *hy = rtc_host_buf(0, ye), *hx = rtc_host_buf(1, xe), *hw = rtc_host_buf(2, we);
    float *hs = rtc_host_buf(3, rt_scratch_summa_fwd(xe, we) + (size_t)Nb);
    float *hb = bias ? hs + rt_scratch_summa_fwd(xe, we) : NULL;
    to_host_bf16_(hx, x, xe);
    to_host_bf16_(hw, w, we);
    if (bias) rtc_to_host(hb, bias, (size_t)Nb * 4);
    uint64_t brow = m->bytes[row], bcol = m->bytes[col];
    rt_summa_forward_f32(m->comm[row], m->comm[col], &m->bytes[row], &m->bytes[col], hy, hx, hw,
                         hb, Mb, Kb, Nb, hs);
    m->bytes[row] = brow;
    m->bytes[col] = bcol;
    count_bf16_(m, row, col, &call);
    to_device_bf16_(y, hy, ye);
    return;
  }
  ncclComm_t cr = rtc_comm_of(m, row, "rt_summa_forward_cu");
  ncclComm_t cc = rtc_comm_of(m, col, "rt_summa_forward_cu");
  int i = m->coord[col], j = m->coord[row];
  rtc_bf16 *xbuf = (rtc_bf16 *)scratch, *wbuf = xbuf + xe;
  double beta = 0;
  if (bias) {
    if (ye) RTC_LAUNCH(rtc_summa_fill_bf16_kernel, rtc_blocks(ye, 256), 256, 0, y, bias, Mb, Nb);
    beta = 1;
  }
  for (int k = 0; k < q; k++) {
    RtSummaMsg msg[RT_SUMMA_STEP_MAX];
    int n = rt_summa_step(&call, k, msg);
    const rtc_bf16 *xk = NULL, *wk = NULL;
    for (int t = 0; t < n; t++) {
      const RtSummaMsg *g = &msg[t];
      if (g->coll != RT_SUMMA_BCAST || (g->block != RT_SUMMA_X && g->block != RT_SUMMA_W))
        order_fail_(m, g->step, "the forward only broadcasts X and W blocks");
      if (g->block == RT_SUMMA_X)
        xk = bcast_block_bf16_(g->col ? cc : cr, g->col ? i : j, q, x, xbuf, g->n, g->root);
      else
        wk = bcast_block_bf16_(g->col ? cc : cr, g->col ? i : j, q, w, wbuf, g->n, g->root);
      m->bytes[g->col ? col : row] += rt_summa_msg_vol_bf16(g, q);
    }
    if (!xk || !wk) order_fail_(m, k, "the step needs an X and a W block");
    // (Mb,Nb) += (Mb,Kb)·(Nb,Kb)ᵀ
    rt_gemm_cu(0, 1, Mb, Nb, Kb, 1, xk, Kb, wk, Kb, beta, y, Nb);
    beta = 1;
  }
}

void rt_summa_backward_cu(RtMesh *m, RtAxis row, RtAxis col, rtc_bf16 *dx, float *dw,
                          float *dbias, const rtc_bf16 *dy, const rtc_bf16 *x, const rtc_bf16 *w,
                          int Mb, int Kb, int Nb, void *scratch) {
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb, ye = (size_t)Mb * Nb;
  int q = m->size[row];
  RtSummaCall call = {1, q, dx != NULL, dw != NULL, dbias != NULL, xe, we, (size_t)Nb,
                      (int)sizeof(rtc_bf16)};
  if (rtc_staged()) {
    /* buffer 0: dx, dw, dbias; 1: dy; 2: x, w; 3: the scratch */
    float *hdx = rtc_host_buf(0, xe + we + (size_t)Nb), *hdw = hdx + xe, *hdb = hdw + we;
    float *hdy = rtc_host_buf(1, ye), *hx = rtc_host_buf(2, xe + we), *hw = hx + xe;
    float *hs = rtc_host_buf(3, rt_scratch_summa_bwd(xe, we));
    to_host_bf16_(hdy, dy, ye);
    to_host_bf16_(hx, x, xe);
    to_host_bf16_(hw, w, we);
    if (dx) to_host_bf16_(hdx, dx, xe);
    if (dw) rtc_to_host(hdw, dw, we * 4);
    if (dbias) rtc_to_host(hdb, dbias, (size_t)Nb * 4);
    uint64_t brow = m->bytes[row], bcol = m->bytes[col];
    rt_summa_backward_f32(m->comm[row], m->comm[col], &m->bytes[row], &m->bytes[col],
                          dx ? hdx : NULL, dw ? hdw : NULL, dbias ? hdb : NULL, hdy, hx, hw, Mb,
                          Kb, Nb, hs);
    m->bytes[row] = brow;
    m->bytes[col] = bcol;
    count_bf16_(m, row, col, &call);
    if (dx) to_device_bf16_(dx, hdx, xe);
    if (dw) rtc_to_device(dw, hdw, we * 4);
    if (dbias) rtc_to_device(dbias, hdb, (size_t)Nb * 4);
    return;
  }
  ncclComm_t cr = rtc_comm_of(m, row, "rt_summa_backward_cu");
  ncclComm_t cc = rtc_comm_of(m, col, "rt_summa_backward_cu");
  int i = m->coord[col], j = m->coord[row];
  // the layout above: tx over xbuf, tw over wbuf
  rtc_bf16 *xbuf = (rtc_bf16 *)scratch, *wbuf = xbuf + 2 * xe;
  float *tx = (float *)scratch, *tw = (float *)(void *)wbuf;
  for (int l = 0; l < q; l++) {
    RtSummaMsg msg[RT_SUMMA_STEP_MAX];
    int n = rt_summa_step(&call, l, msg);
    const rtc_bf16 *xl = NULL, *wl = NULL; // this step's broadcast blocks
    for (int t = 0; t < n; t++) {
      const RtSummaMsg *g = &msg[t];
      ncclComm_t c = g->col ? cc : cr;
      int me = g->col ? i : j; // coord on c
      switch (g->block) {
      case RT_SUMMA_W: // W(j,l), held by rank (l,j)
        wl = bcast_block_bf16_(c, me, q, w, wbuf, g->n, g->root);
        break;
      case RT_SUMMA_X: // X(i,l), held by rank (i,l)
        xl = bcast_block_bf16_(c, me, q, x, xbuf, g->n, g->root);
        wl = NULL; // tw is written over wbuf from here
        break;
      case RT_SUMMA_DX: // dX(i,l) = Σ_j dY(i,j)·W(j,l), kept by rank (i,l)
        if (!wl || !dx) order_fail_(m, g->step, "a dX reduce needs dx and the step's W block");
        rt_gemm_cu(0, 0, Mb, Kb, Nb, 1, dy, Nb, wl, Kb, 0, tx, Kb); // (Mb,Nb)·(Nb,Kb), fp32
        if (q > 1) ncclCheck(ncclReduce(tx, tx, g->n, ncclFloat, ncclSum, g->root, c, stream_()));
        if (me == g->root && g->n)
          RTC_LAUNCH(rtc_summa_acc_bf16_kernel, rtc_blocks(g->n, 256), 256, 0, dx,
                     (const float *)tx, g->n);
        break;
      case RT_SUMMA_DW: // dW(j,l) = Σ_i dY(i,j)ᵀ·X(i,l), kept by rank (l,j), in fp32
        if (!xl || !dw) order_fail_(m, g->step, "a dW reduce needs dw and the step's X block");
        rt_gemm_cu(1, 0, Nb, Kb, Mb, 1, dy, Nb, xl, Kb, 0, tw, Kb); // (Mb,Nb)ᵀ·(Mb,Kb)
        if (q > 1) ncclCheck(ncclReduce(tw, tw, g->n, ncclFloat, ncclSum, g->root, c, stream_()));
        if (me == g->root) rt_axpy_cu(dw, tw, 1, g->n);
        break;
      case RT_SUMMA_DB: // this block's column sums, then the column's, in fp32 over tw
        if (!dbias) order_fail_(m, g->step, "a bias all-reduce needs dbias");
        rtc_memset(tw, 0, g->n * sizeof(float));
        rt_matmul_backward_cu(NULL, NULL, tw, dy, x, w, Mb, Kb, Nb);
        if (q > 1)
          ncclCheck(ncclAllReduce(tw, tw, g->n, ncclFloat, ncclSum, c, stream_()));
        rt_axpy_cu(dbias, tw, 1, g->n);
        break;
      default:
        order_fail_(m, g->step, "no such block");
      }
      m->bytes[g->col ? col : row] += rt_summa_msg_vol_bf16(g, q);
    }
  }
}
