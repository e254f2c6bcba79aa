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
#include "runtime/dist_layout.h"

/* The communicators the check knows, numbered in this order (the numbers
 * appear in its messages): per pipeline stage its tp, dp, sp and data
 * groups, then the EMBED pairs (with a pipeline), the world, and on a 2D
 * grid its rows and columns; within an axis in ascending order of their
 * first rank.  Who is in each is runtime/dist_layout.h, as for the runtime's
 * communicators; id[axis][color] is the number of a group (-1: none). */
typedef struct Comms {
  RtLayout L;
  int *id[AX_COUNT];
} Comms;

static void add_comm(CommProgram *p, Comms *cs, int axis, int rank) {
  RtGroup g = rt_layout_group(&cs->L, axis, rank);
  if (g.color < 0 || cs->id[axis][g.color] >= 0) return;
  int c = cs->id[axis][g.color] = p->ncomms++;
  p->comm_members[c] = arena_alloc(sizeof(int) * (size_t)g.size);
  p->comm_size[c] = rt_layout_members(&cs->L, axis, rank, p->comm_members[c]);
}

static void number_comms(CommProgram *p, Comms *cs) {
  const RtLayout *L = &cs->L;
  /* at most 4 groups per rank's stage axes, the EMBED pairs, the world, the
   * grid's rows and columns */
  int nr = rt_layout_world(L), per = nr / L->pp, most = 4 * nr + per + 1 + 2 * nr;
  p->ncomms = 0;
  p->comm_size = arena_alloc(sizeof(int) * (size_t)most);
  p->comm_members = arena_alloc(sizeof(int *) * (size_t)most);
  for (int a = 0; a < AX_COUNT; a++) {
    cs->id[a] = arena_alloc(sizeof(int) * (size_t)nr);
    for (int r = 0; r < nr; r++) cs->id[a][r] = -1;
  }
  static const int stage_axes[4] = {AX_TP, AX_DP, AX_SP, AX_DATA};
  for (int q = 0; q < L->pp; q++)
    for (int k = 0; k < 4; k++)
      for (int r = q * per; r < (q + 1) * per; r++) add_comm(p, cs, stage_axes[k], r);
  static const int job_axes[4] = {AX_EMBED, AX_WORLD, AX_TPR, AX_TPC};
  for (int k = 0; k < 4; k++) {
    if (job_axes[k] == AX_EMBED && L->pp == 1) continue;
    if ((job_axes[k] == AX_TPR || job_axes[k] == AX_TPC) && !L->q) continue;
    for (int r = 0; r < nr; r++) add_comm(p, cs, job_axes[k], r);
  }
}

/* The number of rank's group on axis, -1 when it has none there (commcheck
 * then reports the event). */
static int comm_of(const Comms *cs, int axis, int rank) {
  if (axis < 0 || axis >= AX_COUNT) return -1;
  RtGroup g = rt_layout_group(&cs->L, axis, rank);
  return g.color < 0 ? -1 : cs->id[axis][g.color];
}

static int check_program(Module *m) {
  const Plan *pl = &m->train.plan;
  Comms cs = {0};
  cs.L.dp = pl->dp;
  cs.L.sp = pl->sp_kind == SP_RING ? pl->sp : 1;
  cs.L.tp = pl->tp * pl->tp2d * pl->tp2d;
  cs.L.q = pl->tp2d > 1 ? pl->tp2d : 0;
  cs.L.pp = m->nstages > 1 ? pl->pp : 1; /* pipeline ranks (each runs its chunks) */
  int nr = rt_layout_world(&cs.L);
  /* each stage's list (the whole model's without a pipeline) */
  PlanColl *coll[MAX_STAGES];
  int ncoll[MAX_STAGES];
  for (int q = 0; q < cs.L.pp; q++) {
    stage_select(m, cs.L.pp > 1 ? q : -1);
    ncoll[q] = plan_collectives(m, &coll[q]);
  }
  stage_select(m, -1);
  CommProgram p = {0};
  p.nranks = nr;
  p.n = arena_alloc(sizeof(int) * (size_t)nr);
  p.ev = arena_alloc(sizeof(CommEvent *) * (size_t)nr);
  number_comms(&p, &cs);
  /* Every rank of a stage runs the stage's program: its list, each
   * collective on its own rank's group of the axis, each ring message to or
   * from its neighbours on the sp ring, each pipeline message to or from
   * the rank with the same coordinates on the next or previous stage. */
  for (int r = 0; r < nr; r++) {
    int q = rt_layout_coords(&cs.L, r).pp;
    const PlanColl *cl = coll[q];
    p.ev[r] = arena_alloc(sizeof(CommEvent) * (size_t)(ncoll[q] + 1));
    for (int i = 0; i < ncoll[q]; i++) {
      CommEvent *e = &p.ev[r][p.n[r]++];
      e->kind = cl[i].ring > 0 ? CEV_SEND : cl[i].ring < 0 ? CEV_RECV : CEV_COLL;
      if (cl[i].pipe) e->kind = !strcmp(cl[i].op, "send") ? CEV_SEND : CEV_RECV;
      e->comm = cl[i].pipe ? 0 : comm_of(&cs, cl[i].axis, r);
      e->op = cl[i].op;
      e->bytes = cl[i].bytes;
      e->what = cl[i].what;
      if (cl[i].ring) {
        e->peer = rt_layout_ring_peer(&cs.L, r, cl[i].ring);
        e->tag = cl[i].tag;
      } else if (cl[i].pipe) {
        e->peer = rt_layout_pipe_peer(&cs.L, r, cl[i].pipe);
        e->tag = cl[i].tag;
      }
    }
  }
  char err[4096];
  const char *spec = getenv("SHARDC_DEBUG_BREAK_COMM");
  if (spec && *spec && commcheck_mutate(&p, spec, err, sizeof err)) {
    diag_fatal_noloc("SHARDC_DEBUG_BREAK_COMM: %s", err);
    return -1;
  }
  if (commcheck(&p, err, sizeof err)) {
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
