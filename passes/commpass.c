/* commpass.c — the communication check as a pass: before code is emitted,
 * the exact sequence of collectives every rank's program will issue in one
 * training step (plan_collectives in report.c: the graph's communication
 * nodes for each microbatch, then the step's gradient reductions, optimizer
 * all-gather and loss/norm sums) is laid out per rank and proven to match (commcheck.c): on every
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

typedef struct Build {
  CommProgram p;
  int dp, tp;
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

int pass_commcheck(Module *m) {
  Graph *g = m->graph;
  const Plan *pl = &m->train.plan;
  if (!g || !m->planned || !g->nfwd || !m->train.mesh || m->train.mesh->ndev <= 1) return 0;
  if (pl->pp > 1 || pl->sp > 1 || pl->tp2d > 1) return 0; /* not generated yet */
  PlanColl *coll;
  int ncoll = plan_collectives(m, &coll);
  Build b = {0};
  b.dp = pl->dp;
  b.tp = pl->tp;
  int nr = b.dp * b.tp;
  b.p.nranks = nr;
  b.p.n = arena_alloc(sizeof(int) * (size_t)nr);
  b.p.ev = arena_alloc(sizeof(CommEvent *) * (size_t)nr);
  b.p.ncomms = b.dp + b.tp + 1;
  b.p.comm_size = arena_alloc(sizeof(int) * (size_t)b.p.ncomms);
  b.p.comm_members = arena_alloc(sizeof(int *) * (size_t)b.p.ncomms);
  for (int c = 0; c < b.p.ncomms; c++) b.p.comm_members[c] = arena_alloc(sizeof(int) * (size_t)nr);
  for (int r = 0; r < nr; r++) { /* ascending rank order: members come out sorted */
    static const int axes[3] = {AX_TP, AX_DP, AX_WORLD};
    for (int k = 0; k < 3; k++) {
      int c = comm_id(&b, axes[k], r);
      b.p.comm_members[c][b.p.comm_size[c]++] = r;
    }
  }
  /* Every rank of a dp x tp plan runs the same program: the same list, each
   * collective on its own rank's group of the axis. */
  for (int r = 0; r < nr; r++) {
    b.p.ev[r] = arena_alloc(sizeof(CommEvent) * (size_t)(ncoll + 1));
    for (int i = 0; i < ncoll; i++) {
      CommEvent *e = &b.p.ev[r][b.p.n[r]++];
      e->kind = CEV_COLL;
      e->comm = comm_id(&b, coll[i].axis, r);
      e->op = coll[i].op;
      e->bytes = coll[i].bytes;
      e->what = coll[i].what;
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
