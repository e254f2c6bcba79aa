/* dist_ring.h — ring self-attention over a sequence-parallel communicator
 * (Ring Attention on the FlashAttention-2 kernels of shardrt_kernels.h).
 *
 * The sequence of T = P·Tl tokens is split over the P ranks of comm: rank r
 * holds tokens [r·Tl, (r+1)·Tl). Shapes and the grouped-query rule are those
 * of rt_attention_forward with T = Tl:
 *   q, out, dq, dout (B,Tl,H,D); k, v, dk, dv (B,Tl,Hkv,D); lse (B,H,Tl).
 * Results equal the single-device kernels on the whole sequence, restricted
 * to this rank's rows, up to rounding (blocks are merged in another order).
 *
 * Forward: the (K, V) block travels the ring (to r+1, from r-1) P-1 times,
 * each step's compute overlapping the next block's transfer; a rank's
 * queries meet every block and the partial results merge through lse.
 * Causal: blocks from later ranks are skipped (fully masked) but still
 * forwarded, so the volume is the same on every rank.
 * Backward: from the final out and lse every block's contribution is exact
 * (FlashAttention-2); (K, V, dK, dV) travel P-1 times, dK and dV gathering
 * the contributions of every rank's queries, then one more hop brings them
 * home. dq, dk, dv ACCUMULATE (+=). The messages of one call, in order,
 * are dist_orders.h's rt_ring_msgs, which the compiler's communication
 * check also reads.
 *
 * Every rank of comm calls with the same B, Tl, H, Hkv, D, causal. scratch
 * holds rt_scratch_ring_fwd / rt_scratch_ring_bwd (dist_formulas.h)
 * elements; nothing is allocated. *bytes += the bytes this rank sends,
 * rt_vol_ring_fwd / rt_vol_ring_bwd of kv = B·Tl·Hkv·D. A failing MPI call,
 * or a block over INT_MAX elements, prints the reason with the rank to
 * stderr and calls MPI_Abort on comm. */
#ifndef SHARDRT_DIST_RING_H
#define SHARDRT_DIST_RING_H

#include <stdint.h>

#include <mpi.h>

#include "dist_formulas.h"

#ifdef __cplusplus
extern "C" {
#endif

void rt_ring_attention_forward_f32(MPI_Comm comm, uint64_t *bytes, float *out, float *lse,
                                   const float *q, const float *k, const float *v, int B,
                                   int Tl, int H, int Hkv, int D, int causal,
                                   float *scratch);
void rt_ring_attention_backward_f32(MPI_Comm comm, uint64_t *bytes, float *dq, float *dk,
                                    float *dv, const float *dout, const float *q,
                                    const float *k, const float *v, const float *out,
                                    const float *lse, int B, int Tl, int H, int Hkv, int D,
                                    int causal, float *scratch);

void rt_ring_attention_forward_f64(MPI_Comm comm, uint64_t *bytes, double *out, double *lse,
                                   const double *q, const double *k, const double *v, int B,
                                   int Tl, int H, int Hkv, int D, int causal,
                                   double *scratch);
void rt_ring_attention_backward_f64(MPI_Comm comm, uint64_t *bytes, double *dq, double *dk,
                                    double *dv, const double *dout, const double *q,
                                    const double *k, const double *v, const double *out,
                                    const double *lse, int B, int Tl, int H, int Hkv, int D,
                                    int causal, double *scratch);

#ifdef __cplusplus
}
#endif

#endif
