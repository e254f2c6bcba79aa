/* dist_orders.h — the order of the messages ring attention and SUMMA issue,
 * shared by the runtime kernels (dist_ring.c and dist_summa.c issue exactly
 * these, step by step) and the compiler (passes/report.c lays them out for
 * the communication check, which proves them deadlock-free).  Header-only,
 * no MPI.  Changing an order here changes both.
 *
 * Each call is a sequence of steps, and each step's messages are listed in
 * the order the check sees them (passes/commcheck.h): a send is posted and
 * the rank moves on; a receive blocks until its message arrives; a
 * collective blocks until every member of its communicator is at it.
 */
#ifndef SHARDRT_DIST_ORDERS_H
#define SHARDRT_DIST_ORDERS_H

#include <stddef.h>
#include <stdint.h>

#include "dist_formulas.h"

/* ---- ring attention (dist_ring.h) over P ranks of the sp ring ----
 *
 * Step s (0 ≤ s < P) computes with the blocks in hand, those of rank
 * (rank - s) mod P, while they move one rank on: each travelling block is
 * sent (MPI_Isend) to the next rank and its successor received (MPI_Irecv)
 * from the previous one, and the step ends waiting for all of them.  For
 * the check a receive therefore blocks after every send of its step, which
 * is where the step lists it.  Forward: steps 0..P-2 pass (K, V) on.
 * Backward: steps 0..P-2 pass (K, V, dK, dV) on, step P-1 (dK, dV) home;
 * dK and dV are sent only after the step's compute has added to them
 * (`after`); everything else is posted before it.  One rank (P = 1):
 * nothing travels. */

/* The travelling blocks.  Each travels under a tag of its own: the
 * runtime's RING_TAG + block, the check's the block. */
typedef enum { RT_RING_K, RT_RING_V, RT_RING_DK, RT_RING_DV, RT_RING_NBLOCKS } RtRingBlock;

enum { RT_RING_STEP_MAX = 2 * RT_RING_NBLOCKS };  /* messages in one step at most */

typedef struct RtRingCall {
  int bwd;          /* 0 forward, 1 backward */
  int P;            /* ranks on the ring */
  size_t kv;        /* elements of one block: B·Tl·Hkv·D */
  int esize;        /* bytes per element */
  int gsize;        /* bytes per element of dK, dV; 0: esize (bf16 activations: 4,
                     * the CUDA runtime's fp32 sums, runtime/cuda/rtc_ring.cu) */
} RtRingCall;

typedef struct RtRingMsg {
  int step;         /* 0 ≤ step < P */
  int send;         /* 1: to the next rank (non-blocking); 0: from the previous (blocking) */
  int block;        /* RtRingBlock */
  int after;        /* 1: posted after the step's compute (dK, dV carry what it added) */
  size_t n;         /* elements (kv) */
  uint64_t bytes;   /* n·esize (dK, dV: n·gsize): sent by the sender, counted once */
} RtRingMsg;

/* Step s's messages in order into out (RT_RING_STEP_MAX entries); returns
 * their number. */
static inline int rt_ring_step(const RtRingCall *c, int s, RtRingMsg *out) {
  int n = 0, first = RT_RING_K, last = c->bwd ? RT_RING_DV : RT_RING_V;
  if (c->P <= 1 || s < 0 || s >= c->P)
    return 0;
  if (s == c->P - 1) { /* the forward is done; the backward's dK, dV go home */
    if (!c->bwd)
      return 0;
    first = RT_RING_DK;
  }
  for (int send = 1; send >= 0; send--)
    for (int b = first; b <= last; b++) {
      int es = b >= RT_RING_DK && c->gsize ? c->gsize : c->esize;
      out[n++] = (RtRingMsg){s, send, b, send && b >= RT_RING_DK, c->kv,
                             (uint64_t)c->kv * (uint64_t)es};
    }
  return n;
}

/* Every message of the call in order into out (room for
 * rt_ring_msgs(c, NULL)), or only their number when out is NULL. */
static inline int rt_ring_msgs(const RtRingCall *c, RtRingMsg *out) {
  RtRingMsg step[RT_RING_STEP_MAX];
  int n = 0;
  for (int s = 0; s < c->P; s++) {
    int k = rt_ring_step(c, s, step);
    for (int i = 0; i < k; i++, n++)
      if (out)
        out[n] = step[i];
  }
  return n;
}

/* ---- SUMMA (dist_summa.h) on a q×q grid: Y = X·Wᵀ in blocks ----
 *
 * Rank (i, j) holds X(i,j) (Mb,Kb) and W(j,i) (Nb,Kb).  Forward, step k:
 * X(i,k) is broadcast along the grid row from column k, then W(j,k) down
 * the column from row k; y += X(i,k)·W(j,k)ᵀ.  Backward, step l: the dX
 * part (when dX is wanted) broadcasts W(j,l) down the column from row l and
 * reduces dy·W(j,l) along the row to column l; then the dW part (when dW is
 * wanted) broadcasts X(i,l) along the row from column l and reduces
 * dyᵀ·X(i,l) down the column to row l.  A reduce sums the partial the step computes
 * from the step's broadcast block.  With dbias, the last step ends with an
 * all-reduce of the bias gradient down the column. */

typedef enum { RT_SUMMA_BCAST, RT_SUMMA_REDUCE, RT_SUMMA_ALLREDUCE } RtSummaColl;
/* What travels: a block of X, W, a dX or dW partial, the bias gradient. */
typedef enum { RT_SUMMA_X, RT_SUMMA_W, RT_SUMMA_DX, RT_SUMMA_DW, RT_SUMMA_DB } RtSummaBlock;

enum { RT_SUMMA_STEP_MAX = 5 };  /* collectives in one step at most */

typedef struct RtSummaCall {
  int bwd;          /* 0 forward, 1 backward */
  int q;            /* the grid's side */
  int dx, dw, dbias; /* backward: which gradients are wanted */
  size_t xe, we, nb; /* elements of an X block (Mb·Kb), a W block (Nb·Kb), the bias (Nb) */
  int esize;        /* bytes per element */
} RtSummaCall;

typedef struct RtSummaMsg {
  int step;         /* k (forward) or l (backward), 0 ≤ step < q */
  int coll;         /* RtSummaColl */
  int block;        /* RtSummaBlock */
  int col;          /* 0: along the grid row (the row communicator); 1: down the column */
  int root;         /* the root's coord on that communicator (the step); -1: all-reduce */
  size_t n;         /* elements */
  uint64_t vol;     /* bytes counted per rank (dist_formulas.h) */
} RtSummaMsg;

static inline RtSummaMsg rt_summa_msg_(const RtSummaCall *c, int step, int coll, int block,
                                       int col, size_t n) {
  uint64_t b = (uint64_t)n * (uint64_t)c->esize;
  uint64_t vol = coll == RT_SUMMA_BCAST    ? rt_vol_bcast(b, c->q)
                 : coll == RT_SUMMA_REDUCE ? rt_vol_reduce(b, c->q)
                                           : rt_vol_allreduce(b, c->q);
  return (RtSummaMsg){step, coll, block, col, coll == RT_SUMMA_ALLREDUCE ? -1 : step, n, vol};
}

/* Step k's collectives in order into out (RT_SUMMA_STEP_MAX entries);
 * returns their number. */
static inline int rt_summa_step(const RtSummaCall *c, int k, RtSummaMsg *out) {
  int n = 0;
  if (k < 0 || k >= c->q)
    return 0;
  if (!c->bwd) {
    out[n++] = rt_summa_msg_(c, k, RT_SUMMA_BCAST, RT_SUMMA_X, 0, c->xe);
    out[n++] = rt_summa_msg_(c, k, RT_SUMMA_BCAST, RT_SUMMA_W, 1, c->we);
    return n;
  }
  if (c->dx) {
    out[n++] = rt_summa_msg_(c, k, RT_SUMMA_BCAST, RT_SUMMA_W, 1, c->we);
    out[n++] = rt_summa_msg_(c, k, RT_SUMMA_REDUCE, RT_SUMMA_DX, 0, c->xe);
  }
  if (c->dw) {
    out[n++] = rt_summa_msg_(c, k, RT_SUMMA_BCAST, RT_SUMMA_X, 0, c->xe);
    out[n++] = rt_summa_msg_(c, k, RT_SUMMA_REDUCE, RT_SUMMA_DW, 1, c->we);
  }
  if (c->dbias && k == c->q - 1)
    out[n++] = rt_summa_msg_(c, k, RT_SUMMA_ALLREDUCE, RT_SUMMA_DB, 1, c->nb);
  return n;
}

/* The bytes message g of a call counts when the call's data are bf16
 * (precision = bf16 storage, runtime/cuda/rtc_summa.cu): the broadcast X
 * and W blocks travel as bf16 (g->vol of a call with esize 2), the reduced
 * dX and dW partials and the bias gradient as fp32 partial sums, 4 bytes an
 * element. */
static inline uint64_t rt_summa_msg_vol_bf16(const RtSummaMsg *g, int q) {
  if (g->coll == RT_SUMMA_REDUCE) return rt_vol_reduce((uint64_t)g->n * 4, q);
  if (g->coll == RT_SUMMA_ALLREDUCE) return rt_vol_allreduce((uint64_t)g->n * 4, q);
  return g->vol;
}

/* Every collective of the call in order into out (room for
 * rt_summa_msgs(c, NULL)), or only their number when out is NULL. */
static inline int rt_summa_msgs(const RtSummaCall *c, RtSummaMsg *out) {
  RtSummaMsg step[RT_SUMMA_STEP_MAX];
  int n = 0;
  for (int k = 0; k < c->q; k++) {
    int m = rt_summa_step(c, k, step);
    for (int i = 0; i < m; i++, n++)
      if (out)
        out[n] = step[i];
  }
  return n;
}

#endif
