/* commpass.c — the communication check as a pass: before code is emitted,
 * the exact sequence of collectives every rank's program will issue in one
 * training step (plan_collectives in report.c: the graph's communication
 * nodes for each microbatch, then the step's gradient reductions, optimizer
 * all-gather and loss/norm sums) is laid out per rank and proven to match (commcheck.c): on every
 * communicator all members issue the same collectives in the same order
 * with the same sizes, and nothing waits forever.  Ring attention (sp=ring)
 * enters as its point-to-point messages, each send to the next rank of the
 * sp ring and each receive from the previous one, in the kernel's order.  A violation is a compile
 * error naming the ranks and ops, never a hang at run time.
 *
 * SHARDC_DEBUG_BREAK_COMM=SPEC (commcheck_mutate: drop:R:I, swap:R:I,
 * bytes:R:I, tag:R:I) breaks the built program first, to test the check.
 */
#include <stdlib.h>
#include <string.h>

#include "commcheck.h"
#include "passes.h"

typedef struct Build {
  CommProgram p;
  int dp, sp, tp;
} Build;

/* Communicator instance ids (rank = (dp_i*sp + sp_i)*tp + t, runtime/dist.h):
 * tp groups (one per dp_i, sp_i), dp groups (one per sp_i, t), sp groups (one
 * per dp_i, t), data groups (dp x sp, one per t), the world. */
static int comm_id(const Build *b, int axis, int rank) {
  int t = rank % b->tp, s = rank / b->tp % b->sp, d = rank / (b->tp * b->sp);
  int base_dp = b->dp * b->sp, base_sp = base_dp + b->sp * b->tp,
      base_data = base_sp + b->dp * b->tp;
  switch (axis) {
  case AX_TP:
    return d * b->sp + s;
  case AX_DP:
    return base_dp + s * b->tp + t;
  case AX_SP:
    return base_sp + d * b->tp + t;
  case AX_DATA:
    return base_data + t;
  default:
    return base_data + b->tp;
  }
}

/* The rank dir (+1 next, -1 previous) steps away on the sp ring. */
static int ring_peer(const Build *b, int rank, int dir) {
  int t = rank % b->tp, s = rank / b->tp % b->sp, d = rank / (b->tp * b->sp);
  s = (s + dir + b->sp) % b->sp;
  return (d * b->sp + s) * b->tp + t;
}

int pass_commcheck(Module *m) {
  Graph *g = m->graph;
  const Plan *pl = &m->train.plan;
  if (!g || !m->planned || !g->nfwd || !m->train.mesh || m->train.mesh->ndev <= 1) return 0;
  if (pl->pp > 1 || pl->tp2d > 1) return 0; /* not generated yet */
  PlanColl *coll;
  int ncoll = plan_collectives(m, &coll);
  Build b = {0};
  b.dp = pl->dp;
  b.sp = pl->sp_kind == SP_RING ? pl->sp : 1;
  b.tp = pl->tp;
  int nr = b.dp * b.sp * b.tp;
  b.p.nranks = nr;
  b.p.n = arena_alloc(sizeof(int) * (size_t)nr);
  b.p.ev = arena_alloc(sizeof(CommEvent *) * (size_t)nr);
  b.p.ncomms = comm_id(&b, AX_WORLD, 0) + 1;
  b.p.comm_size = arena_alloc(sizeof(int) * (size_t)b.p.ncomms);
  b.p.comm_members = arena_alloc(sizeof(int *) * (size_t)b.p.ncomms);
  for (int c = 0; c < b.p.ncomms; c++) b.p.comm_members[c] = arena_alloc(sizeof(int) * (size_t)nr);
  for (int r = 0; r < nr; r++) { /* ascending rank order: members come out sorted */
    static const int axes[5] = {AX_TP, AX_DP, AX_SP, AX_DATA, AX_WORLD};
    for (int k = 0; k < 5; k++) {
      int c = comm_id(&b, axes[k], r);
      b.p.comm_members[c][b.p.comm_size[c]++] = r;
    }
  }
  /* Every rank of a dp x sp x tp plan runs the same program: the same list,
   * each collective on its own rank's group of the axis, each ring message
   * to or from its neighbours on the sp ring. */
  for (int r = 0; r < nr; r++) {
    b.p.ev[r] = arena_alloc(sizeof(CommEvent) * (size_t)(ncoll + 1));
    for (int i = 0; i < ncoll; i++) {
      CommEvent *e = &b.p.ev[r][b.p.n[r]++];
      e->kind = coll[i].ring > 0 ? CEV_SEND : coll[i].ring < 0 ? CEV_RECV : CEV_COLL;
      e->comm = comm_id(&b, coll[i].axis, r);
      e->op = coll[i].op;
      e->bytes = coll[i].bytes;
      e->what = coll[i].what;
      if (coll[i].ring) {
        e->peer = ring_peer(&b, r, coll[i].ring);
        e->tag = coll[i].tag;
      }
    }
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
