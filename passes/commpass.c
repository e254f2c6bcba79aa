/* commpass.c — the communication check as a pass: before code is emitted,
 * the exact sequence of collectives every rank's program will issue in one
 * training step (the graph's communication nodes for each microbatch, then
 * the step's gradient reductions, optimizer all-gather and loss/norm sums)
 * is built per rank and proven to match (commcheck.c): on every
 * communicator all members issue the same collectives in the same order
 * with the same sizes, and nothing waits forever.  A violation is a compile
 * error naming the ranks and ops, never a hang at run time.
 *
 * SHARDC_DEBUG_BREAK_COMM=SPEC (commcheck_mutate: drop:R:I, swap:R:I,
 * bytes:R:I, tag:R:I) breaks the built program first, to test the check.
 */
#include <stdlib.h>
#include <string.h>

#include "commcheck.h"
#include "passes.h"
#include "runtime/dist_formulas.h"

typedef struct Build {
  CommProgram p;
  int dp, tp;
  int cap_ev;
} Build;

/* Communicator instance ids: tp groups (one per dp coordinate), dp groups
 * (one per tp coordinate), the world. */
static int comm_id(const Build *b, int axis, int rank) {
  int t = rank % b->tp, d = rank / b->tp;
  switch (axis) {
  case AX_TP:
    return d;
  case AX_DP:
    return b->dp + t;
  default:
    return b->dp + b->tp;
  }
}

static void add(Build *b, int rank, int axis, const char *op, uint64_t bytes, const char *what) {
  int *n = &b->p.n[rank];
  if (*n == b->cap_ev) {
    diag_fatal_noloc("internal: communication check event table overflow");
    return;
  }
  CommEvent *e = &b->p.ev[rank][(*n)++];
  memset(e, 0, sizeof *e);
  e->kind = CEV_COLL;
  e->comm = comm_id(b, axis, rank);
  e->op = op;
  e->bytes = bytes;
  e->what = what;
}

static int axis_size(const Build *b, int axis) {
  return axis == AX_TP ? b->tp : axis == AX_DP ? b->dp : b->dp * b->tp;
}

int pass_commcheck(Module *m) {
  Graph *g = m->graph;
  const Plan *pl = &m->train.plan;
  if (!g || !m->planned || !g->nfwd || !m->train.mesh || m->train.mesh->ndev <= 1) return 0;
  if (pl->pp > 1 || pl->sp > 1 || pl->tp2d > 1) return 0; /* not generated yet */
  Build b = {0};
  b.dp = pl->dp;
  b.tp = pl->tp;
  int nr = b.dp * b.tp, mb = pl->mb > 0 ? pl->mb : 1;
  int ncoll = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    ncoll += ir_comm_bytes(n) > 0 || (ir_is_comm(n->op) && n->op != OP_TP_COPY && n->op != OP_SHARD);
  }
  b.cap_ev = ncoll * mb + g->params.len + 16;
  b.p.nranks = nr;
  b.p.n = arena_alloc(sizeof(int) * (size_t)nr);
  b.p.ev = arena_alloc(sizeof(CommEvent *) * (size_t)nr);
  for (int r = 0; r < nr; r++) b.p.ev[r] = arena_alloc(sizeof(CommEvent) * (size_t)b.cap_ev);
  b.p.ncomms = b.dp + b.tp + 1;
  b.p.comm_size = arena_alloc(sizeof(int) * (size_t)b.p.ncomms);
  b.p.comm_members = arena_alloc(sizeof(int *) * (size_t)b.p.ncomms);
  for (int c = 0; c < b.p.ncomms; c++) b.p.comm_members[c] = arena_alloc(sizeof(int) * (size_t)nr);
  for (int r = 0; r < nr; r++) /* ascending rank order: members come out sorted */
    for (int ax = 0; ax < 3; ax++) {
      int axis = ax == 0 ? AX_TP : ax == 1 ? AX_DP : AX_WORLD;
      int c = comm_id(&b, axis, r);
      b.p.comm_members[c][b.p.comm_size[c]++] = r;
    }
  for (int r = 0; r < nr; r++) {
    for (int k = 0; k < mb; k++)
      for (int i = 0; i < g->nodes.len; i++) {
        const Node *n = g->nodes.data[i];
        bool xent = (n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD) && n->a.i[1];
        if (!xent && (!ir_is_comm(n->op) || n->op == OP_TP_COPY || n->op == OP_SHARD)) continue;
        int axis = xent ? (int)n->a.i[3] : (int)n->a.i[2];
        if (axis_size(&b, axis) <= 1) continue;
        const char *what = arena_printf("node %d %s over %s (%s), %s of microbatch %d", i,
                                        ir_ops[n->op].name, ir_axis_name(axis),
                                        n->scope && *n->scope ? n->scope : "model",
                                        i < g->nfwd ? "forward" : "backward", k + 1);
        add(&b, r, axis, xent ? "vocab-parallel cross-entropy" : ir_ops[n->op].name,
            ir_comm_bytes(n), what);
      }
    /* the step: partial gradients over tp, then over dp (ZeRO-1: reduce-scatter) */
    for (int i = 0; i < g->params.len && b.tp > 1; i++) {
      const Value *v = g->params.data[i];
      if (v->grad && (v->grad_partial & (1u << AX_TP)))
        add(&b, r, AX_TP, "all_reduce",
            rt_vol_allreduce((uint64_t)ir_numel(&v->shape) * 4, b.tp),
            arena_printf("gradient of %s over tp", v->name));
    }
    if (m->mem.zero_chunk)
      add(&b, r, AX_DP, "reduce_scatter", rt_vol_reduce_scatter((uint64_t)m->mem.grad_bytes, b.dp),
          "ZeRO-1 gradient reduce-scatter over dp");
    else
      add(&b, r, AX_DP, "all_reduce", rt_vol_allreduce((uint64_t)m->mem.grad_bytes, b.dp),
          "gradient all-reduce over dp");
    add(&b, r, AX_DP, "sum (loss)", 8, "loss sum over dp");
    add(&b, r, m->mem.zero_chunk ? AX_WORLD : AX_TP, "sum (norm)", 8, "gradient norm sum");
    if (m->mem.zero_chunk)
      add(&b, r, AX_DP, "all_gather", rt_vol_allgather((uint64_t)m->mem.param_bytes, b.dp),
          "ZeRO-1 parameter all-gather over dp");
  }
  char err[4096];
  const char *spec = getenv("SHARDC_DEBUG_BREAK_COMM");
  if (spec && *spec && commcheck_mutate(&b.p, spec, err, sizeof err)) {
    diag_fatal_noloc("SHARDC_DEBUG_BREAK_COMM: %s", err);
    return -1;
  }
  if (commcheck(&b.p, err, sizeof err)) {
    diag_fatal_noloc("communication check failed for strategy on %d ranks: %s", nr, err);
    return -1;
  }
  return 0;
}
