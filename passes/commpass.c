/* commpass.c — the communication check as a pass, on the per-rank programs
 * (ir/rankprog.h): every rank runs its pipeline rank's program on its own
 * coordinates, so its communication in one step is the program's
 * instructions expanded in schedule order (prog_events): each action's
 * block (data, the pipeline messages around it, the collectives of its
 * nodes, ring attention's and SUMMA's messages in the runtime's order,
 * bucket reductions started in the last microbatch), then the step's
 * reductions and sums.  Those lists, mapped onto the mesh's communicators,
 * are proven to match (commcheck.c): on every communicator all members
 * issue the same collectives in the same order with the same sizes, every
 * receive has its send, and nothing waits forever.  A violation is a
 * compile error naming the ranks and instructions, never a hang at run
 * time.  The plan's communication volume (report.c) counts the same events.
 *
 * SHARDC_DEBUG_BREAK_COMM=SPEC (commcheck_mutate: drop:R:I, swap:R:I,
 * bytes:R:I, tag:R:I) breaks the built event lists first, to test the check.
 */
#include <stdlib.h>
#include <string.h>

#include "commcheck.h"
#include "passes.h"
#include "rankprog.h"
#include "runtime/dist_formulas.h"

/* ---- a program's events ---- */

typedef struct Ev {
  PEvent *e;
  int n, cap;
} Ev;

static PEvent *push(Ev *v) {
  if (v->n == v->cap) {
    int cap = v->cap ? 2 * v->cap : 256;
    PEvent *e = arena_alloc(sizeof(PEvent) * (size_t)cap);
    if (v->n) memcpy(e, v->e, sizeof(PEvent) * (size_t)v->n);
    v->e = e;
    v->cap = cap;
  }
  PEvent *e = &v->e[v->n++];
  memset(e, 0, sizeof *e);
  return e;
}

static void coll(Ev *v, int axis, const char *op, uint64_t bytes, bool counted, const char *what) {
  PEvent *e = push(v);
  e->kind = PE_COLL;
  e->axis = axis;
  e->op = op;
  e->bytes = bytes;
  e->counted = counted;
  e->peer = -1;
  e->what = what;
}

/* Ring attention's messages in the order runtime/dist_ring.c posts them
 * (sends are non-blocking, each step waits for its receives): forward,
 * P-1 steps passing (K, V) on; backward, P steps passing (dK, dV) on,
 * the first P-1 with (K, V) too. */
static void ring_messages(Ev *v, const Node *nd, int k, bool fwd, const char *where) {
  static const char *const name[4] = {"K", "V", "dK", "dV"};
  int P = ir_ring_size(nd), ax = (int)nd->a.i[2];
  uint64_t b = (uint64_t)ir_ring_kv(nd) * (uint64_t)ir_dtype_size(nd->in[0]->dtype);
  for (int s = 0; s < (fwd ? P - 1 : P); s++)
    for (int dir = 1; dir >= -1; dir -= 2)
      for (int t = 0; t < 4; t++) {
        if (fwd ? t >= 2 : t < 2 && s == P - 1) continue;
        PEvent *e = push(v);
        e->kind = dir > 0 ? PE_SEND : PE_RECV;
        e->axis = ax;
        e->op = dir > 0 ? "send" : "recv";
        e->bytes = b;
        e->counted = dir > 0;
        e->peer = dir;
        e->tag = t;
        e->what = arena_printf("node %d ring attention %s %s of step %d over %s (%s), %s of "
                               "microbatch %d: %s",
                               nd->id, dir > 0 ? "send of" : "receive of", name[t], s + 1,
                               ir_axis_name(ax), nd->scope && *nd->scope ? nd->scope : "model",
                               fwd ? "forward" : "backward", k + 1, where);
      }
}

/* A SUMMA matmul's collectives in runtime/dist_summa.c's order: forward,
 * for each l < q a broadcast of an X block along the grid row, then one of
 * a W block down the column; backward, for each l < q the dX part (a W
 * block down the column, a dX partial reduced along the row) when dX is
 * needed, then the dW part (an X block along the row, a dW partial reduced
 * down the column). */
static void summa_messages(Ev *v, const Node *nd, int k, const char *where) {
  int q = ir_summa_q(nd), row = (int)nd->a.i[1], col = (int)nd->a.i[2];
  bool fwd = nd->op == OP_MATMUL;
  const Value *x = nd->in[fwd ? 0 : 1], *w = nd->in[fwd ? 1 : 2];
  uint64_t es = (uint64_t)ir_dtype_size(x->dtype);
  uint64_t xb = (uint64_t)ir_numel(&x->shape) * es, wb = (uint64_t)ir_numel(&w->shape) * es;
  const char *what = arena_printf("node %d summa %dx%d (%s), %s of microbatch %d: %s", nd->id, q, q,
                                  nd->scope && *nd->scope ? nd->scope : "model",
                                  fwd ? "forward" : "backward", k + 1, where);
  for (int l = 0; l < q; l++) {
    if (fwd) {
      coll(v, row, "broadcast", rt_vol_bcast(xb, q), true, what);
      coll(v, col, "broadcast", rt_vol_bcast(wb, q), true, what);
      continue;
    }
    if (nd->outs[0]) {
      coll(v, col, "broadcast", rt_vol_bcast(wb, q), true, what);
      coll(v, row, "reduce", rt_vol_reduce(xb, q), true, what);
    }
    if (nd->outs[1]) {
      coll(v, row, "broadcast", rt_vol_bcast(xb, q), true, what);
      coll(v, col, "reduce", rt_vol_reduce(wb, q), true, what);
    }
  }
}

/* The events of block bl of chunk c, run for microbatch k. */
static void block_events(Ev *v, const RankProg *p, const PChunk *c, const PBlock *bl, bool fwd,
                         int k) {
  int S = p->nstages;
  for (int j = 0; j < bl->n; j++) {
    const PInstr *in = &bl->ins[j];
    if (in->comm.kind == PC_NONE) continue;
    const char *where = p->nchunks > 1 ? arena_printf("instruction c%d.%s.%d", (int)(c - p->chunk),
                                                      fwd ? "fwd" : "bwd", j)
                                       : arena_printf("instruction %s.%d", fwd ? "fwd" : "bwd", j);
    const Node *nd = in->n;
    switch (in->comm.kind) {
    case PC_P2P: {
      PEvent *e = push(v);
      bool send = in->kind == PI_SEND;
      e->kind = send ? PE_SEND : PE_RECV;
      e->axis = AX_PP;
      e->op = send ? "send" : "recv";
      e->bytes = in->comm.bytes;
      e->counted = send;
      e->peer = in->peer_vs;
      e->tag = rt_pipe_tag(k, S, in->lower_vs, in->grad);
      e->pipe = true;
      e->what = arena_printf("%s of microbatch %d %s stage %d: %s",
                             in->grad ? "gradient" : "activation", k + 1, send ? "to" : "from",
                             in->peer_vs, where);
      break;
    }
    case PC_RING:
      ring_messages(v, nd, k, nd->op == OP_ATTENTION, where);
      break;
    case PC_SUMMA:
      summa_messages(v, nd, k, where);
      break;
    default:
      if (in->comm.last_mb && k != p->mb - 1) break;
      coll(v, in->comm.axis, in->comm.op, in->comm.bytes, true,
           arena_printf("node %d %s over %s (%s), %s of microbatch %d%s: %s", nd->id,
                        ir_ops[nd->op].name, ir_axis_name(in->comm.axis),
                        nd->scope && *nd->scope ? nd->scope : "model",
                        fwd ? "forward" : "backward", k + 1,
                        p->nchunks > 1 ? arena_printf(" of stage %d", c->vs) : "", where));
    }
  }
}

/* Ranks in a group of the axis, under the plan. */
static int axis_size(const Plan *pl, int axis, int ndev) {
  switch (axis) {
  case AX_DP: return pl->dp;
  case AX_TP: return pl->tp * pl->tp2d * pl->tp2d;
  case AX_TPR: case AX_TPC: return pl->tp2d;
  case AX_SP: return pl->sp;
  case AX_PP: return pl->pp;
  case AX_DATA: return pl->dp * (pl->sp_kind == SP_RING ? pl->sp : 1);
  case AX_EMBED: return 2;
  default: return ndev;
  }
}

int prog_events(const RankProg *p, PEvent **out) {
  Ev v = {0};
  *out = NULL;
  if (!p->dist) return 0;
  const Plan *pl = &p->m->train.plan;
  int ndev = p->m->train.mesh->ndev, es = 4 * p->scale;
  for (int a = 0; a < p->nsched; a++) {
    const PAct *act = &p->sched[a];
    const PChunk *c = &p->chunk[act->chunk];
    block_events(&v, p, c, act->fwd ? &c->fwd : &c->bwd, act->fwd, act->mb);
  }
  for (int j = 0; j < p->nstep; j++) {
    const PStep *s = &p->step[j];
    const char *what = arena_printf("%s: instruction step.%d", s->what, j);
    switch (s->kind) {
    case PS_ALLREDUCE:
      coll(&v, s->axis, "all_reduce",
           rt_vol_allreduce((uint64_t)s->count * (uint64_t)es, axis_size(pl, s->axis, ndev)), true,
           what);
      break;
    case PS_LOSS:
      coll(&v, s->axis, "sum (loss)", 8, false, what);
      break;
    case PS_NORM:
      coll(&v, s->axis, "sum (norm)", 8, false, what);
      break;
    case PS_ALLGATHER: {
      const Bucket *b = p->buckets->data[s->count];
      coll(&v, s->axis, "all_gather", rt_vol_allgather((uint64_t)b->numel * (uint64_t)es, p->zgroup),
           true, what);
      break;
    }
    default:
      break;
    }
  }
  *out = v.e;
  return v.n;
}

uint64_t prog_comm_bytes(const RankProg *p, uint64_t *per_axis) {
  uint64_t ax[AX_COUNT] = {0}, total = 0;
  PEvent *e;
  int n = prog_events(p, &e);
  for (int i = 0; i < n; i++)
    if (e[i].counted) ax[e[i].axis] += e[i].bytes;
  for (int a = 0; a < AX_COUNT; a++) {
    total += ax[a];
    if (per_axis) per_axis[a] = ax[a];
  }
  return total;
}

/* ---- the mesh: communicators and peers ---- */

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

int comm_program(const Module *m, CommProgram *out) {
  const Plan *pl = &m->train.plan;
  Build b = {0};
  b.dp = pl->dp;
  b.sp = pl->sp_kind == SP_RING ? pl->sp : 1;
  b.tp = pl->tp * pl->tp2d * pl->tp2d;
  b.q = pl->tp2d > 1 ? pl->tp2d : 0;
  b.pp = m->nstages > 1 ? pl->pp : 1; /* pipeline ranks (each runs its chunks) */
  int per = b.dp * b.sp * b.tp, nr = per * b.pp;
  PEvent *ev[MAX_STAGES];
  int nev[MAX_STAGES];
  for (int q = 0; q < b.pp; q++) nev[q] = prog_events(m->rprog[q], &ev[q]);
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
  /* Every rank of a pipeline rank runs its program: each collective on its
   * own rank's group of the axis, each ring message to or from its
   * neighbours on the sp ring, each pipeline message to or from the rank
   * with the same coordinates on the pipeline rank holding the peer stage. */
  for (int r = 0; r < nr; r++) {
    int q = r / per;
    b.p.ev[r] = arena_alloc(sizeof(CommEvent) * (size_t)(nev[q] + 1));
    for (int i = 0; i < nev[q]; i++) {
      const PEvent *pe = &ev[q][i];
      CommEvent *e = &b.p.ev[r][b.p.n[r]++];
      e->kind = pe->kind == PE_SEND ? CEV_SEND : pe->kind == PE_RECV ? CEV_RECV : CEV_COLL;
      e->comm = pe->kind == PE_COLL ? comm_id(&b, pe->axis, r) : 0;
      e->op = pe->op;
      e->bytes = pe->bytes;
      e->what = pe->what;
      e->tag = pe->tag;
      if (pe->pipe)
        e->peer = r + (pe->peer % b.pp - q) * per;
      else if (pe->kind != PE_COLL)
        e->peer = ring_peer(&b, r, pe->peer);
    }
  }
  *out = b.p;
  return nr;
}

int pass_commcheck(Module *m) {
  if (!m->nrprog || !m->train.mesh || m->train.mesh->ndev <= 1) return 0;
  CommProgram p;
  int nr = comm_program(m, &p);
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
