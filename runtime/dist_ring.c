/* dist_ring.c — ring self-attention over a sequence-parallel communicator
 * (see dist_ring.h). The typed half is written once, at the bottom, and
 * instantiated for float and double by including this file into itself, the
 * way kernels.c instantiates its k_*.inc templates.
 *
 * Which blocks travel at which step, and in which order, is
 * dist_orders.h's rt_ring_step, the list the compiler's communication check
 * proves deadlock-free: each step posts its messages (sends of the blocks
 * in hand — the caller's k, v at step 0, then the other buffer —, receives
 * into one scratch buffer) before the compute, those marked `after` (dK,
 * dV) once the compute has added to them, and completes them all after it,
 * so the compute overlaps the next blocks' transfer. */
#ifndef RT_RING_TEMPLATE

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dist_orders.h"
#include "dist_ring.h"
#include "rt_internal.h"

/* Message tags on the caller's communicator: RING_TAG + the block
 * (RtRingBlock). */
enum { RING_TAG = 0x5200 };

/* One call's view of the ring: this rank, its neighbours, the requests in
 * flight (one step's messages at most). */
typedef struct {
  MPI_Comm comm;
  MPI_Datatype type;
  int esize, rank, P, next, prev, nreq;
  uint64_t *bytes;
  MPI_Request req[RT_RING_STEP_MAX];
} Ring;

// A failed MPI call ends the job: the other ranks of the ring would wait forever.
static void ring_check_(const Ring *R, int rc, const char *what) {
  if (rc == MPI_SUCCESS)
    return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
    snprintf(msg, sizeof msg, "MPI error %d", rc);
  fprintf(stderr, "rank %d: ring attention: %s failed: %s\n", R->rank, what, msg);
  MPI_Abort(R->comm, 1);
}

// kv is the elements of one K (or V) block: each travels as one message.
static void ring_open_(Ring *R, MPI_Comm comm, uint64_t *bytes, MPI_Datatype type,
                       int esize, size_t kv) {
  R->comm = comm, R->type = type, R->esize = esize, R->bytes = bytes, R->nreq = 0;
  R->rank = -1;
  ring_check_(R, MPI_Comm_rank(comm, &R->rank), "MPI_Comm_rank");
  ring_check_(R, MPI_Comm_size(comm, &R->P), "MPI_Comm_size");
  R->next = (R->rank + 1) % R->P;
  R->prev = (R->rank + R->P - 1) % R->P;
  if (kv > INT_MAX) {
    fprintf(stderr,
            "rank %d: ring attention: K block of %zu elements is too large "
            "(limit is %d, the MPI count)\n",
            R->rank, kv, INT_MAX);
    MPI_Abort(comm, 1);
  }
}

// buf is (n): post its send to the next rank; counts n elements sent.
static void ring_send_(Ring *R, const void *buf, size_t n, int tag) {
  ring_check_(R, MPI_Isend(buf, (int)n, R->type, R->next, tag, R->comm, &R->req[R->nreq++]),
              "MPI_Isend");
  *R->bytes += (uint64_t)n * (uint64_t)R->esize;
}

// buf is (n): post its receive from the previous rank.
static void ring_recv_(Ring *R, void *buf, size_t n, int tag) {
  ring_check_(R, MPI_Irecv(buf, (int)n, R->type, R->prev, tag, R->comm, &R->req[R->nreq++]),
              "MPI_Irecv");
}

// Posts step s's messages (rt_ring_step) whose `after` is after: a send of
// the block in hand out[block], a receive into in[block]. Returns the bit
// set (1 << block) of the blocks received.
static unsigned ring_post_(Ring *R, const RtRingCall *call, int s, int after,
                           void *const *out, void *const *in) {
  RtRingMsg msg[RT_RING_STEP_MAX];
  int n = rt_ring_step(call, s, msg);
  unsigned got = 0;
  for (int i = 0; i < n; i++) {
    const RtRingMsg *g = &msg[i];
    if (g->after != after)
      continue;
    if (g->send ? !out[g->block] : !in[g->block]) {
      fprintf(stderr, "rank %d: ring attention: step %d moves block %d, which the %s has not\n",
              R->rank, s, g->block, call->bwd ? "backward" : "forward");
      MPI_Abort(R->comm, 1);
    }
    if (g->send) {
      ring_send_(R, out[g->block], g->n, RING_TAG + g->block);
    } else {
      ring_recv_(R, in[g->block], g->n, RING_TAG + g->block);
      got |= 1u << g->block;
    }
  }
  return got;
}

static void ring_wait_(Ring *R) {
  ring_check_(R, MPI_Waitall(R->nreq, R->req, MPI_STATUSES_IGNORE), "MPI_Waitall");
  R->nreq = 0;
}

#define RT_RING_TEMPLATE
#define FN(name) RT_CAT(name, SFX)

#define REAL float
#define SFX _f32
#define RING_MPI_TYPE MPI_FLOAT
#include "dist_ring.c"
#undef REAL
#undef SFX
#undef RING_MPI_TYPE

#define REAL double
#define SFX _f64
#define RING_MPI_TYPE MPI_DOUBLE
#include "dist_ring.c"
#undef REAL
#undef SFX
#undef RING_MPI_TYPE

#else /* RT_RING_TEMPLATE: REAL, SFX, RING_MPI_TYPE */

// out, ob are (B,Tl,H,D), lse, lb are (B,H,Tl): fold one key block's
// normalized output ob and logsumexp lb into the running (out, lse), which
// then hold attention over the union of the key sets:
// lse' = logaddexp(lse, lb), out' = e^(lse-lse')·out + e^(lb-lse')·ob.
// Every row is finite: each query row sees at least its own key.
static void FN(ring_merge_)(REAL *out, REAL *lse, const REAL *ob, const REAL *lb, int B,
                            int Tl, int H, int D) {
  long rows = (long)B * Tl * H; // row i = (b·Tl + t)·H + h of out
  RT_OMP_FOR((size_t)rows * D)
  for (long i = 0; i < rows; i++) {
    long bt = i / H;
    int h = (int)(i % H), t = (int)(bt % Tl), b = (int)(bt / Tl);
    size_t li = ((size_t)b * H + h) * Tl + t;
    double a = lse[li], c = lb[li], m = a > c ? a : c;
    double n = m + log1p(exp(-fabs(a - c)));
    REAL wa = (REAL)exp(a - n), wc = (REAL)exp(c - n);
    REAL *o = out + (size_t)i * D;
    const REAL *p = ob + (size_t)i * D;
    for (int d = 0; d < D; d++)
      o[d] = wa * o[d] + wc * p[d];
    lse[li] = (REAL)n;
  }
}

// out, q are (B,Tl,H,D), lse is (B,H,Tl), k, v are (B,Tl,Hkv,D); scratch is
// rt_scratch_ring_fwd: two (K,V) receive buffers (2·kv each), a block's
// output (B,Tl,H,D) and lse (B,H,Tl)
void FN(rt_ring_attention_forward)(MPI_Comm comm, uint64_t *bytes, REAL *out, REAL *lse,
                                   const REAL *q, const REAL *k, const REAL *v, int B,
                                   int Tl, int H, int Hkv, int D, int causal,
                                   REAL *scratch) {
  size_t kv = (size_t)B * Tl * Hkv * D;
  Ring R;
  ring_open_(&R, comm, bytes, RING_MPI_TYPE, (int)sizeof(REAL), kv);
  RtRingCall call = {0, R.P, kv, (int)sizeof(REAL), 0};
  REAL *ob = scratch + 4 * kv, *lb = ob + (size_t)B * Tl * H * D;
  // the blocks in hand (K, V), from rank (rank - s) mod P, only read (the
  // caller's k, v at step 0); causal: passed on even when masked here, the
  // same volume on every rank
  void *hand[RT_RING_NBLOCKS] = {(void *)k, (void *)v, NULL, NULL};
  for (int s = 0; s < R.P; s++) {
    int src = (R.rank - s + R.P) % R.P;
    REAL *nk = scratch + (size_t)(s & 1) * 2 * kv;
    void *in[RT_RING_NBLOCKS] = {nk, nk + kv, NULL, NULL};
    unsigned got = ring_post_(&R, &call, s, 0, hand, in);
    const REAL *ck = hand[RT_RING_K], *cv = hand[RT_RING_V];
    if (s == 0) // the diagonal block: query t sees keys <= t, as on one device
      FN(rt_attention_forward)(out, lse, q, ck, cv, B, Tl, H, Hkv, D, causal);
    else if (!causal || src < R.rank) { // earlier tokens: unmasked
      FN(rt_attention_forward)(ob, lb, q, ck, cv, B, Tl, H, Hkv, D, 0);
      FN(ring_merge_)(out, lse, ob, lb, B, Tl, H, D);
    } // else later tokens, all masked
    got |= ring_post_(&R, &call, s, 1, hand, in);
    ring_wait_(&R);
    for (int b = 0; b < RT_RING_NBLOCKS; b++)
      if (got >> b & 1)
        hand[b] = in[b];
  }
}

// dq, dout, q, out are (B,Tl,H,D), dk, dv, k, v are (B,Tl,Hkv,D), lse is
// (B,H,Tl); scratch is rt_scratch_ring_bwd: two (K,V,dK,dV) buffers, 4·kv each
void FN(rt_ring_attention_backward)(MPI_Comm comm, uint64_t *bytes, REAL *dq, REAL *dk,
                                    REAL *dv, const REAL *dout, const REAL *q,
                                    const REAL *k, const REAL *v, const REAL *out,
                                    const REAL *lse, int B, int Tl, int H, int Hkv, int D,
                                    int causal, REAL *scratch) {
  size_t kv = (size_t)B * Tl * Hkv * D;
  Ring R;
  ring_open_(&R, comm, bytes, RING_MPI_TYPE, (int)sizeof(REAL), kv);
  if (R.P == 1) { // nothing travels
    FN(rt_attention_backward)(dq, dk, dv, dout, q, k, v, out, lse, B, Tl, H, Hkv, D, causal);
    return;
  }
  // The blocks in hand: K, V (only read; the caller's k, v at step 0) and
  // their dK, dV accumulating the contributions of the queries they have
  // met. Step s receives into buffer s&1, so step 0's (zeroed) accumulators
  // live in buffer 1.
  RtRingCall call = {1, R.P, kv, (int)sizeof(REAL), 0};
  REAL *acc = scratch + 4 * kv + 2 * kv;
  memset(acc, 0, 2 * kv * sizeof(REAL));
  void *hand[RT_RING_NBLOCKS] = {(void *)k, (void *)v, acc, acc + kv};
  for (int s = 0; s < R.P; s++) {
    int src = (R.rank - s + R.P) % R.P;
    REAL *n = scratch + (size_t)(s & 1) * 4 * kv;
    void *in[RT_RING_NBLOCKS] = {n, n + kv, n + 2 * kv, n + 3 * kv};
    unsigned got = ring_post_(&R, &call, s, 0, hand, in);
    // With the final out and lse, P = exp(S - lse) of each block is exact,
    // so its contributions simply add up (FlashAttention-2's backward).
    if (!causal || src <= R.rank)
      FN(rt_attention_backward)(dq, hand[RT_RING_DK], hand[RT_RING_DV], dout, q,
                                hand[RT_RING_K], hand[RT_RING_V], out, lse, B, Tl, H, Hkv, D,
                                causal && src == R.rank);
    got |= ring_post_(&R, &call, s, 1, hand, in);
    ring_wait_(&R);
    for (int b = 0; b < RT_RING_NBLOCKS; b++)
      if (got >> b & 1)
        hand[b] = in[b];
  }
  REAL *cdk = hand[RT_RING_DK], *cdv = hand[RT_RING_DV];
  // cdk, cdv now hold this rank's own block's sums from every rank's queries
  if (dk)
    FN(rt_axpy)(dk, cdk, 1, kv);
  if (dv)
    FN(rt_axpy)(dv, cdv, 1, kv);
}

#endif
