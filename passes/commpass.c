/* commpass.c — the communication check as a pass: before code is emitted,
 * the exact sequence of collectives every rank's program will issue in one
 * training step (plan_collectives in report.c: the graph's communication
 * nodes for each microbatch, then the step's gradient reductions, optimizer
 * all-gather and loss/norm sums) is laid out per rank and proven to match (commcheck.c): on every
 * communicator all members issue the same collectives in the same order
 * with the same sizes, and nothing waits forever.  Ring attention (sp=ring)
 * enters as its point-to-point messages, each send to the next rank of the
 * sp ring and each receive from the previous one, in the kernel's order;
 * a pipeline as every stage's program, with its activation and gradient
 * messages in the schedule's order.  A violation is a compile error naming
 * the ranks and ops, never a hang at run time.
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
  int dp, sp, tp, pp;
  int q;   /* tp2d: the grid side (tp = q*q), else 0 */
} Build;

/* Communicator instance ids (rank = ((pp_i*dp + dp_i)*sp + sp_i)*tp + t,
 * runtime/dist.h): per pipeline stage its tp, dp, sp and data groups; then
 * the EMBED pairs (first and last stage, one per dp, sp, tp coordinate);
 * then the world. */
static int comm_id(const Build *b, int axis, int rank) {
  int per = b->dp * b->sp * b->tp, q = rank / per, rr = rank % per;
  int t = rr % b->tp, s = rr / b->tp % b->sp, d = rr / (b->tp * b->sp);
  int base_dp = b->dp * b->sp, base_sp = base_dp + b->sp * b->tp,
      base_data = base_sp + b->dp * b->tp, stage = base_data + b->tp;
  switch (axis) {
  case AX_TP:
    return q * stage + d * b->sp + s;
  case AX_DP:
    return q * stage + base_dp + s * b->tp + t;
  case AX_SP:
    return q * stage + base_sp + d * b->tp + t;
  case AX_DATA:
    return q * stage + base_data + t;
  case AX_EMBED:
    return b->pp * stage + rr;
  case AX_TPR: /* tp2d: after the world, one per grid row, then one per column */
  case AX_TPC: {
    int world = b->pp * stage + (b->pp > 1 ? per : 0), grid = (q * b->dp + d) * b->sp + s;
    int ngrids = b->pp * b->dp * b->sp, qq = b->q > 0 ? b->q : 1;
    if (axis == AX_TPR) return world + 1 + grid * qq + t / qq;
    return world + 1 + ngrids * qq + grid * qq + t % qq;
  }
  default: /* the world (after the EMBED pairs when there is a pipeline) */
    return b->pp * stage + (b->pp > 1 ? per : 0);
  }
}

/* The rank dir (+1 next, -1 previous) steps away on the sp ring. */
static int ring_peer(const Build *b, int rank, int dir) {
  int per = b->dp * b->sp * b->tp, q = rank / per, rr = rank % per;
  int t = rr % b->tp, s = rr / b->tp % b->sp, d = rr / (b->tp * b->sp);
  s = (s + dir + b->sp) % b->sp;
  return q * per + (d * b->sp + s) * b->tp + t;
}

static int check_program(Module *m) {
  const Plan *pl = &m->train.plan;
  Build b = {0};
  b.dp = pl->dp;
  b.sp = pl->sp_kind == SP_RING ? pl->sp : 1;
  b.tp = pl->tp * pl->tp2d * pl->tp2d;
  b.q = pl->tp2d > 1 ? pl->tp2d : 0;
  b.pp = m->nstages > 1 ? pl->pp : 1; /* pipeline ranks (each runs its chunks) */
  int per = b.dp * b.sp * b.tp, nr = per * b.pp;
  /* each stage's list (the whole model's without a pipeline) */
  PlanColl *coll[MAX_STAGES];
  int ncoll[MAX_STAGES];
  for (int q = 0; q < b.pp; q++) {
    stage_select(m, b.pp > 1 ? q : -1);
    ncoll[q] = plan_collectives(m, &coll[q]);
  }
  stage_select(m, -1);
  b.p.nranks = nr;
  b.p.n = arena_alloc(sizeof(int) * (size_t)nr);
  b.p.ev = arena_alloc(sizeof(CommEvent *) * (size_t)nr);
  b.p.ncomms = comm_id(&b, AX_WORLD, 0) + 1 + (b.q ? 2 * b.pp * b.dp * b.sp * b.q : 0);
  b.p.comm_size = arena_alloc(sizeof(int) * (size_t)b.p.ncomms);
  b.p.comm_members = arena_alloc(sizeof(int *) * (size_t)b.p.ncomms);
  for (int c = 0; c < b.p.ncomms; c++) b.p.comm_members[c] = arena_alloc(sizeof(int) * (size_t)nr);
  for (int r = 0; r < nr; r++) { /* ascending rank order: members come out sorted */
    static const int axes[8] = {AX_TP, AX_DP, AX_SP, AX_DATA, AX_EMBED, AX_WORLD, AX_TPR, AX_TPC};
    int q = r / per;
    for (int k = 0; k < 8; k++) {
      if (axes[k] == AX_EMBED && (b.pp == 1 || (q != 0 && q != b.pp - 1))) continue;
      if ((axes[k] == AX_TPR || axes[k] == AX_TPC) && !b.q) continue;
      int c = comm_id(&b, axes[k], r);
      b.p.comm_members[c][b.p.comm_size[c]++] = r;
    }
  }
  /* Every rank of a stage runs the stage's program: its list, each
   * collective on its own rank's group of the axis, each ring message to or
   * from its neighbours on the sp ring, each pipeline message to or from
   * the rank with the same coordinates on the next or previous stage. */
  for (int r = 0; r < nr; r++) {
    int q = r / per;
    const PlanColl *cl = coll[q];
    b.p.ev[r] = arena_alloc(sizeof(CommEvent) * (size_t)(ncoll[q] + 1));
    for (int i = 0; i < ncoll[q]; i++) {
      CommEvent *e = &b.p.ev[r][b.p.n[r]++];
      e->kind = cl[i].ring > 0 ? CEV_SEND : cl[i].ring < 0 ? CEV_RECV : CEV_COLL;
      if (cl[i].pipe) e->kind = !strcmp(cl[i].op, "send") ? CEV_SEND : CEV_RECV;
      e->comm = cl[i].pipe ? 0 : comm_id(&b, cl[i].axis, r);
      e->op = cl[i].op;
      e->bytes = cl[i].bytes;
      e->what = cl[i].what;
      if (cl[i].ring) {
        e->peer = ring_peer(&b, r, cl[i].ring);
        e->tag = cl[i].tag;
      } else if (cl[i].pipe) {
        e->peer = r + cl[i].pipe * per;
        e->tag = cl[i].tag;
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

int pass_commcheck(Module *m) {
  if (!m->graph || !m->planned || !m->train.mesh || m->train.mesh->ndev <= 1) return 0;
  if (m->nstages <= 1 && !m->graph->nfwd) return 0;
  return check_program(m);
}
