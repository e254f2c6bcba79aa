/* dist_formulas.h — communication volume and scratch sizes of the
 * distributed runtime, shared by the runtime (which counts what it sends)
 * and the compiler (which predicts it in the plan).  Header-only, no MPI.
 *
 * Volume convention: bytes SENT per rank per call under the
 * bandwidth-optimal algorithm on a communicator of P ranks, averaged over
 * its ranks (ring all-reduce, ring all-gather / reduce-scatter, scatter +
 * all-gather broadcast, tree reduce), n being the bytes of the full tensor:
 *   all-reduce      2·(P-1)·n / P
 *   all-gather      (P-1)·n / P        (n: the gathered, full size)
 *   reduce-scatter  (P-1)·n / P        (n: the full size before scattering)
 *   broadcast       (P-1)·n / P
 *   reduce          (P-1)·n / P
 *   send            n (counted by the sender; a receive counts nothing)
 * Integer division, per call: the compiler sums the same per-call values.
 */
#ifndef SHARDRT_DIST_FORMULAS_H
#define SHARDRT_DIST_FORMULAS_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t rt_vol_allreduce(uint64_t n, int P) {
  return P > 1 ? 2 * (uint64_t)(P - 1) * n / (uint64_t)P : 0;
}
static inline uint64_t rt_vol_allgather(uint64_t n_full, int P) {
  return P > 1 ? (uint64_t)(P - 1) * n_full / (uint64_t)P : 0;
}
static inline uint64_t rt_vol_reduce_scatter(uint64_t n_full, int P) {
  return P > 1 ? (uint64_t)(P - 1) * n_full / (uint64_t)P : 0;
}
static inline uint64_t rt_vol_bcast(uint64_t n, int P) {
  return P > 1 ? (uint64_t)(P - 1) * n / (uint64_t)P : 0;
}
static inline uint64_t rt_vol_reduce(uint64_t n, int P) {
  return P > 1 ? (uint64_t)(P - 1) * n / (uint64_t)P : 0;
}

/* Pipeline messages: microbatch mb crossing the boundary between virtual
 * stages lower and lower + 1 (of S), its activation (grad 0) going up or
 * its gradient (grad 1) coming back, carry this tag; the program builder
 * (passes/program.c), the check and the runtime's driver all use it. */
/* A cut may carry up to RT_PIPE_MAXMSG tensors (ir.h PIPE_MAXACT): as many
 * messages in each direction, in a fixed order, under the one tag (MPI keeps
 * their order). */
#define RT_PIPE_MAXMSG 4
static inline int rt_pipe_tag(int mb, int S, int lower, int grad) {
  return 2 * (mb * S + lower) + grad;
}

/* ---- scratch (elements of the tensor type) the distributed kernels need,
 * planned in the arena by the compiler ---- */

/* all-gather / reduce-scatter along a non-leading dim (outer > 1): one
 * packed copy of the full tensor. */
static inline size_t rt_scratch_dim_collective(size_t outer, size_t inner_local, int P) {
  return outer > 1 && P > 1 ? outer * inner_local * (size_t)P : 0;
}

/* Vocab-parallel cross-entropy over N rows: per-row max, sum of exps and
 * target logit, in double (3·N doubles = 6·N floats). */
static inline size_t rt_scratch_vp_xent_bytes(size_t N) { return 3 * N * sizeof(double); }
/* Its volume: forward = all-reduce(max, N doubles) + all-reduce(sumexp and
 * target logit, 2N doubles); backward = all-reduce(max) + all-reduce(sumexp). */
static inline uint64_t rt_vol_vp_xent_fwd(size_t N, int P) {
  return rt_vol_allreduce(N * sizeof(double), P) + rt_vol_allreduce(2 * N * sizeof(double), P);
}
static inline uint64_t rt_vol_vp_xent_bwd(size_t N, int P) {
  return rt_vol_allreduce(N * sizeof(double), P) + rt_vol_allreduce(N * sizeof(double), P);
}

/* Ring attention over P sequence shards of Tl tokens; kv = B·Tl·Hkv·D
 * elements of one K (or V) block, esize bytes each.
 * Forward: P-1 rotations of (K, V).  Backward: P-1 rotations of
 * (K, V, dK, dV), then one more hop of (dK, dV) home. */
static inline uint64_t rt_vol_ring_fwd(size_t kv, int esize, int P) {
  return P > 1 ? (uint64_t)(P - 1) * 2 * kv * (uint64_t)esize : 0;
}
static inline uint64_t rt_vol_ring_bwd(size_t kv, int esize, int P) {
  return P > 1 ? ((uint64_t)(P - 1) * 4 + 2) * kv * (uint64_t)esize : 0;
}
/* The backward with dK, dV travelling at gsize bytes an element (bf16
 * activations: K, V at 2, the fp32 sums dK, dV at 4; runtime/cuda/rtc_ring.cu). */
static inline uint64_t rt_vol_ring_bwd2(size_t kv, int esize, int gsize, int P) {
  return P > 1 ? (uint64_t)(P - 1) * 2 * kv * (uint64_t)esize + (uint64_t)P * 2 * kv * (uint64_t)gsize
               : 0;
}
/* Scratch: forward two (K, V) buffers + one block's output (B·Tl·H·D) and
 * lse (B·H·Tl); backward two (K, V, dK, dV) buffers. */
static inline size_t rt_scratch_ring_fwd(size_t B, size_t Tl, size_t H, size_t Hkv, size_t D) {
  return 4 * B * Tl * Hkv * D + B * Tl * H * D + B * H * Tl;
}
static inline size_t rt_scratch_ring_bwd(size_t B, size_t Tl, size_t H, size_t Hkv, size_t D) {
  (void)H;
  return 8 * B * Tl * Hkv * D;
}
/* 16-bit activations (the CUDA runtime's ring, runtime/cuda/rtc_ring.cu):
 * forward and backward, two (K, V) receive buffers; its fp32 sums are in
 * the kernel workspace (rtc_ws.h's rtc_ws_ring_fwd / _bwd). */
static inline size_t rt_scratch_ring16(size_t B, size_t Tl, size_t Hkv, size_t D) {
  return 4 * B * Tl * Hkv * D;
}

/* SUMMA on a q×q grid, Y[M,N] = X[M,K]·W[N,K]ᵀ; local blocks X (M/q, K/q),
 * W (N/q, K/q), Y (M/q, N/q).  Forward: q broadcasts of an X block on the
 * row communicator and q of a W block on the column communicator.
 * Backward: dX needs q broadcasts of a W block (column) and q reduces of a
 * dX block (row); dW needs q broadcasts of an X block (row) and q reduces of
 * a dW block (column).  Sizes in bytes of one local block each. */
static inline uint64_t rt_vol_summa_fwd(uint64_t xb, uint64_t wb, int q) {
  return (uint64_t)q * (rt_vol_bcast(xb, q) + rt_vol_bcast(wb, q));
}
static inline uint64_t rt_vol_summa_bwd(uint64_t xb, uint64_t wb, uint64_t yb, int q) {
  (void)yb;
  return (uint64_t)q * (rt_vol_bcast(wb, q) + rt_vol_reduce(xb, q)) +
         (uint64_t)q * (rt_vol_bcast(xb, q) + rt_vol_reduce(wb, q));
}
/* Scratch: forward an X block and a W block; backward an X block, a W block
 * and a dX and a dW partial block. */
static inline size_t rt_scratch_summa_fwd(size_t xe, size_t we) { return xe + we; }
static inline size_t rt_scratch_summa_bwd(size_t xe, size_t we) { return 2 * xe + 2 * we; }

/* Layernorm with the channel dim split over a communicator of P ranks
 * (2D tensor parallel): forward all-reduces (sum, sum of squares) per row,
 * backward (Σ dy·w, Σ dy·w·x̂) per row; 2N doubles each. */
static inline uint64_t rt_vol_ln_split_fwd(size_t N, int P) { return rt_vol_allreduce(2 * N * sizeof(double), P); }
static inline uint64_t rt_vol_ln_split_bwd(size_t N, int P) { return rt_vol_allreduce(2 * N * sizeof(double), P); }
static inline size_t rt_scratch_ln_split_bytes(size_t N) { return 2 * N * sizeof(double); }
/* RMSNorm the same way: forward all-reduces Σx² per row, backward
 * Σ w·dy·x per row; N doubles each. */
static inline uint64_t rt_vol_rms_split_fwd(size_t N, int P) { return rt_vol_allreduce(N * sizeof(double), P); }
static inline uint64_t rt_vol_rms_split_bwd(size_t N, int P) { return rt_vol_allreduce(N * sizeof(double), P); }
static inline size_t rt_scratch_rms_split_bytes(size_t N) { return N * sizeof(double); }

#endif
