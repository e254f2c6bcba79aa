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
