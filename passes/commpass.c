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
#include "runtime/dist_layout.h"
#include "runtime/dist_orders.h"

/* ---- a program's events ---- */

typedef struct Ev {
  PEvent *e;
  int n, cap;
  int groups;     /* NCCL groups numbered so far */
  int unposted;   /* the first pipeline message no post has taken yet */
} Ev;

static PEvent *push(Ev *v) {
  v->e = arena_grow(v->e, v->n, &v->cap, sizeof *v->e, 256);
  return &v->e[v->n++];
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
 * (runtime/dist_orders.h: sends are non-blocking, each step's receives
 * block after its sends): forward, P-1 steps passing (K, V) on; backward,
 * P steps passing (dK, dV) on, the first P-1 with (K, V) too. */
static void ring_messages(Ev *v, const Node *nd, int k, bool fwd, const char *where) {
  static const char *const name[RT_RING_NBLOCKS] = {"K", "V", "dK", "dV"};
  int ax = (int)nd->a.i[2];
  int es = ir_dtype_size(nd->in[0]->dtype);
  /* with 16-bit data dK, dV travel as their fp32 sums (runtime/cuda/rtc_ring.cu) */
  RtRingCall call = {!fwd, ir_ring_size(nd), (size_t)ir_ring_kv(nd), es, es == 2 ? 4 : 0};
  RtRingMsg *msg = arena_alloc(sizeof(RtRingMsg) * (size_t)(rt_ring_msgs(&call, NULL) + 1));
  int n = rt_ring_msgs(&call, msg);
  /* the cuda target's NCCL groups (runtime/cuda/rtc_ring.cu): per step,
   * K and V, then dK and dV */
  int g0 = v->groups + 1;
  v->groups += 2 * call.P;
  for (int j = 0; j < n; j++) {
    const RtRingMsg *g = &msg[j];
    PEvent *e = push(v);
    e->group = g0 + 2 * g->step + (g->block >= RT_RING_DK);
    e->kind = g->send ? PE_SEND : PE_RECV;
    e->axis = ax;
    e->op = g->send ? "send" : "recv";
    e->bytes = g->bytes;
    e->counted = g->send;
    e->peer = g->send ? 1 : -1;
    e->tag = g->block;
    e->what = arena_printf("node %d ring attention %s %s of step %d over %s (%s), %s of "
                           "microbatch %d: %s",
                           nd->id, g->send ? "send of" : "receive of", name[g->block], g->step + 1,
                           ir_axis_name(ax), nd->scope && *nd->scope ? nd->scope : "model",
                           fwd ? "forward" : "backward", k + 1, where);
  }
}

/* A SUMMA matmul's collectives in runtime/dist_summa.c's order
 * (runtime/dist_orders.h): forward, for each k < q a broadcast of an X
 * block along the grid row, then one of a W block down the column;
 * backward, for each l < q the dX part when dX is needed, then the dW
 * part.  The program passes no bias gradient (the bias add is its own
 * instruction). */
static void summa_messages(Ev *v, const Node *nd, int k, const char *where) {
  static const char *const op[3] = {"broadcast", "reduce", "all_reduce"};
  int q = ir_summa_q(nd), row = (int)nd->a.i[1], col = (int)nd->a.i[2];
  bool fwd = nd->op == OP_MATMUL;
  const Value *x = nd->in[fwd ? 0 : 1], *w = nd->in[fwd ? 1 : 2];
  RtSummaCall call = {!fwd, q, !fwd && nd->outs[0], !fwd && nd->outs[1], 0,
                      (size_t)ir_numel(&x->shape), (size_t)ir_numel(&w->shape), 0,
                      ir_dtype_size(x->dtype)};
  const char *what = arena_printf("node %d summa %dx%d (%s), %s of microbatch %d: %s", nd->id, q, q,
                                  nd->scope && *nd->scope ? nd->scope : "model",
                                  fwd ? "forward" : "backward", k + 1, where);
  RtSummaMsg *msg = arena_alloc(sizeof(RtSummaMsg) * (size_t)(rt_summa_msgs(&call, NULL) + 1));
  int n = rt_summa_msgs(&call, msg);
  /* 16-bit data: blocks in 16 bits, partial sums reduced in fp32 (rtc_summa.cu) */
  bool half = ir_dtype_size(x->dtype) == 2;
  for (int j = 0; j < n; j++)
    coll(v, msg[j].col ? col : row, op[msg[j].coll],
         half ? rt_summa_msg_vol_bf16(&msg[j], q) : msg[j].vol, true, what);
}

/* A post: the pipeline messages queued since the last one, one NCCL group. */
static void post(Ev *v) {
  bool any = false;
  for (int i = v->unposted; i < v->n; i++)
    if (v->e[i].pipe) v->e[i].group = v->groups + 1, any = true;
  v->groups += any;
  v->unposted = v->n;
}

/* The name of instruction j of chunk c's forward or backward, for messages. */
static const char *instr_name(const RankProg *p, const PChunk *c, bool fwd, int j) {
  return p->nchunks > 1 ? arena_printf("instruction c%d.%s.%d", (int)(c - p->chunk),
                                       fwd ? "fwd" : "bwd", j)
                        : arena_printf("instruction %s.%d", fwd ? "fwd" : "bwd", j);
}

/* Pipeline message in (a PI_SEND or PI_RECV) of microbatch k. */
static void p2p_event(Ev *v, const RankProg *p, const PInstr *in, int k, const char *where) {
  PEvent *e = push(v);
  bool send = in->kind == PI_SEND;
  e->kind = send ? PE_SEND : PE_RECV;
  e->axis = AX_PP;
  e->op = send ? "send" : "recv";
  e->bytes = in->comm.bytes;
  e->counted = send;
  e->peer = in->peer_vs;
  e->tag = rt_pipe_tag(k, p->nstages, in->lower_vs, in->grad);
  e->pipe = true;
  e->what = arena_printf("%s of microbatch %d %s stage %d: %s", in->grad ? "gradient" : "activation",
                         k + 1, send ? "to" : "from", in->peer_vs, where);
}

/* The tp all-gathers of the split receives among bl's first n instructions
 * (scatter/gather: the received slices made whole over tp), at a post. */
static void gather_events(Ev *v, const PBlock *bl, int n, int k, const char *where) {
  for (int i = 0; i < n; i++) {
    const PInstr *r = &bl->ins[i];
    if (r->kind == PI_RECV && r->split)
      coll(v, r->gather.axis, r->gather.op, r->gather.bytes, true,
           arena_printf("all-gather over tp of the %s of microbatch %d from stage %d: %s",
                        r->grad ? "gradient" : "activation", k + 1, r->peer_vs, where));
  }
}

/* The events of block bl of chunk c, run for microbatch k.  ahead: the
 * next action, a backward whose receives this block's post posts too (a
 * pair, PAct.pair); posted: this block's receives were posted so, and it
 * posts nothing (its sends wait for the next post). */
static void block_events(Ev *v, const RankProg *p, const PChunk *c, const PBlock *bl, bool fwd,
                         int k, const PAct *ahead, bool posted) {
  for (int j = 0; j < bl->n; j++) {
    const PInstr *in = &bl->ins[j];
    if (in->comm.kind == PC_NONE && in->kind != PI_POST) continue;
    if (posted && (in->kind == PI_POST || in->kind == PI_RECV)) continue;
    const char *where = instr_name(p, c, fwd, j);
    if (in->kind == PI_POST) {
      const PChunk *ac = ahead ? &p->chunk[ahead->chunk] : NULL;
      for (int i = 0; ac && i < ac->bwd.n; i++)
        if (ac->bwd.ins[i].kind == PI_RECV)
          p2p_event(v, p, &ac->bwd.ins[i], ahead->mb, instr_name(p, ac, false, i));
      post(v);
      gather_events(v, bl, j, k, where);
      if (ac) gather_events(v, &ac->bwd, ac->bwd.n, ahead->mb, where);
      continue;
    }
    const Node *nd = in->n;
    switch (in->comm.kind) {
    case PC_P2P:
      p2p_event(v, p, in, k, where);
      break;
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

/* pairs: with the cuda runtime's pairs (PAct.pair; NCCL), else in the
 * order the cpu runtime and staged messages take. */
static int events(const RankProg *p, PEvent **out, bool pairs) {
  Ev v = {0};
  *out = NULL;
  if (!p->dist) return 0;
  const Plan *pl = &p->m->train.plan;
  int ndev = p->m->train.mesh->ndev, es = 4 * p->scale;
  /* the step's weight copies before the first microbatch: under ZeRO-1/2
   * with bf16 each bucket's gathered from the shards (passes/zero.c) */
  for (int ci = 0; ci < p->nchunks; ci++) {
    const PBlock *cb = &p->chunk[ci].cast;
    for (int j = 0; j < cb->n; j++) {
      const PInstr *in = &cb->ins[j];
      if (in->comm.kind != PC_COLL) continue;
      coll(&v, in->comm.axis, in->comm.op, in->comm.bytes, true,
           arena_printf("%s of %s over %s before the first microbatch%s: instruction cast.%d",
                        in->comm.op, prog_vname(in->n->out), ir_axis_name(in->comm.axis),
                        p->nchunks > 1 ? arena_printf(" (stage %d)", p->chunk[ci].vs) : "", j));
    }
  }
  for (int a = 0; a < p->nsched; a++) {
    const PAct *act = &p->sched[a];
    const PChunk *c = &p->chunk[act->chunk];
    bool pair = pairs && act->pair && a + 1 < p->nsched,
         paired = pairs && a > 0 && p->sched[a - 1].pair;
    block_events(&v, p, c, act->fwd ? &c->fwd : &c->bwd, act->fwd, act->mb,
                 pair ? &p->sched[a + 1] : NULL, paired);
  }
  post(&v);   /* the last sends (the runtime posts them after the schedule) */
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
    case PS_OPT_GATHER: {
      int P = axis_size(pl, s->axis, ndev);
      coll(&v, s->axis, "all_gather",
           rt_vol_allgather((uint64_t)s->count * (uint64_t)es * (uint64_t)P, P), true, what);
      break;
    }
    default:
      break;
    }
  }
  *out = v.e;
  return v.n;
}

int prog_events(const RankProg *p, PEvent **out) { return events(p, out, false); }

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

/* Under NCCL's rules each group's events stand together where its first
 * does (ring attention's step lists its K, V and dK, dV sends before their
 * receives; the runtime posts the K, V group, then the dK, dV one). */
static void gather_groups(CommEvent *ev, int n) {
  int most = 0;
  for (int i = 0; i < n; i++)
    if (ev[i].group > most) most = ev[i].group;
  if (!most) return;
  int *cnt = arena_alloc(sizeof(int) * (size_t)(most + 2));
  memset(cnt, 0, sizeof(int) * (size_t)(most + 2));
  for (int i = 0; i < n; i++)
    if (ev[i].group > 0) cnt[ev[i].group + 1]++;
  for (int g = 0; g <= most; g++) cnt[g + 1] += cnt[g];   /* cnt[g]: group g's start */
  CommEvent *grp = arena_alloc(sizeof(CommEvent) * (size_t)(cnt[most + 1] + 1));
  int *fill = arena_alloc(sizeof(int) * (size_t)(most + 1));
  memcpy(fill, cnt, sizeof(int) * (size_t)(most + 1));
  for (int i = 0; i < n; i++)
    if (ev[i].group > 0) grp[fill[ev[i].group]++] = ev[i];
  CommEvent *out = arena_alloc(sizeof(CommEvent) * (size_t)(n + 1));
  bool *done = arena_alloc(sizeof(bool) * (size_t)(most + 1));
  memset(done, 0, sizeof(bool) * (size_t)(most + 1));
  int k = 0;
  for (int i = 0; i < n; i++) {
    int g = ev[i].group;
    if (g <= 0) {
      out[k++] = ev[i];
    } else if (!done[g]) {
      done[g] = true;
      for (int j = cnt[g]; j < cnt[g + 1]; j++) out[k++] = grp[j];
    }
  }
  memcpy(ev, out, sizeof(CommEvent) * (size_t)n);
}

/* The job on layout L: every rank runs ev[its pipeline rank] (nev[q]
 * events), each collective on its own rank's group of the axis, each ring
 * message to or from its neighbours on the sp ring, each pipeline message to
 * or from the rank with the same coordinates on the pipeline rank holding
 * the peer stage.  mode 0: MPI's rules (the cpu target, --comm mpi); 1: the
 * cuda target's NCCL groups; 2: NCCL, but the pipeline's messages staged
 * through MPI. */
int comm_program_layout(const RtLayout *L, PEvent *const *ev, const int *nev, int mode,
                        CommProgram *out) {
  Comms cs = {0};
  cs.L = *L;
  int nr = rt_layout_world(&cs.L);
  CommProgram p = {0};
  p.nranks = nr;
  p.n = arena_alloc(sizeof(int) * (size_t)nr);
  p.ev = arena_alloc(sizeof(CommEvent *) * (size_t)nr);
  number_comms(&p, &cs);
  for (int r = 0; r < nr; r++) {
    int q = rt_layout_coords(&cs.L, r).pp;
    p.n[r] = 0;
    p.ev[r] = arena_alloc(sizeof(CommEvent) * (size_t)(nev[q] + 1));
    for (int i = 0; i < nev[q]; i++) {
      const PEvent *pe = &ev[q][i];
      CommEvent *e = &p.ev[r][p.n[r]++];
      e->kind = pe->kind == PE_SEND ? CEV_SEND : pe->kind == PE_RECV ? CEV_RECV : CEV_COLL;
      e->comm = pe->kind == PE_COLL ? comm_of(&cs, pe->axis, r) : 0;
      e->op = pe->op;
      e->bytes = pe->bytes;
      e->what = pe->what;
      e->tag = pe->tag;
      if (pe->pipe)
        e->peer = rt_layout_pipe_peer(&cs.L, r, pe->peer % cs.L.pp - q);
      else if (pe->kind != PE_COLL)
        e->peer = rt_layout_ring_peer(&cs.L, r, pe->peer);
      e->group = mode == 2 && pe->pipe ? -1 : pe->group;
    }
    if (mode) gather_groups(p.ev[r], p.n[r]);
  }
  p.rendezvous = mode != 0;
  *out = p;
  return nr;
}

/* The plan's job; with `model`, as the check models it (pass_commcheck):
 * at most 2 data-parallel ranks, and at most 2 tensor-parallel ones on a
 * 1D axis. */
static RtLayout job_layout(const Module *m, bool model) {
  const Plan *pl = &m->train.plan;
  RtLayout L;
  L.dp = model && pl->dp > 2 ? 2 : pl->dp;
  L.sp = pl->sp_kind == SP_RING ? pl->sp : 1;
  L.tp = pl->tp * pl->tp2d * pl->tp2d;
  L.q = pl->tp2d > 1 ? pl->tp2d : 0;
  if (model && !L.q && L.tp > 2) L.tp = 2;
  L.pp = m->nstages > 1 ? pl->pp : 1; /* pipeline ranks (each runs its chunks) */
  return L;
}

static int build_program(const Module *m, CommProgram *out, int mode, bool model) {
  RtLayout L = job_layout(m, model);
  PEvent *ev[MAX_STAGES];
  int nev[MAX_STAGES];
  for (int q = 0; q < L.pp; q++) nev[q] = events(m->rprog[q], &ev[q], mode == 1);
  return comm_program_layout(&L, ev, nev, mode, out);
}

int comm_program(const Module *m, CommProgram *out) {
  return build_program(m, out, 0, false);
}
int comm_program_cuda(const Module *m, CommProgram *out, bool pipe_mpi) {
  return build_program(m, out, pipe_mpi ? 2 : 1, false);
}

/* Pairs (PAct.pair) on every rank: each forward followed by the backward
 * of another microbatch (on, else none). */
static void set_pairs(Module *m, bool on) {
  for (int r = 0; r < m->nrprog; r++) {
    RankProg *p = m->rprog[r];
    p->pairs = false;
    for (int a = 0; a < p->nsched; a++) {
      const PAct *x = &p->sched[a], *y = a + 1 < p->nsched ? &p->sched[a + 1] : NULL;
      p->sched[a].pair = on && y && x->fwd && !y->fwd && x->mb != y->mb;
      p->pairs |= p->sched[a].pair;
    }
  }
}

/* Whether the cuda target's program (comm_program_cuda, or the check's
 * model of it) passes the check, broken first by SHARDC_DEBUG_BREAK_COMM's
 * spec as the MPI one is; else why not in err. */
static bool cuda_ok(const Module *m, bool model, bool pipe_mpi, const char *spec, char *err,
                    int cap) {
  CommProgram q;
  build_program(m, &q, pipe_mpi ? 2 : 1, model);
  if (spec && *spec) commcheck_mutate(&q, spec, err, cap);
  return !commcheck(&q, err, cap);
}

/* The check of the job (or of its model): 0, or -1 having said why
 * (report) or not; pipe_mpi set to whether the cuda target stages its
 * pipeline messages through MPI. */
static int check_job(Module *m, bool model, const char *spec, bool report, bool *pipe_mpi) {
  CommProgram p;
  build_program(m, &p, 0, model);
  RtLayout L = job_layout(m, false);
  int nr = rt_layout_world(&L); /* the job's ranks, for messages */
  char err[4096];
  *pipe_mpi = false;
  if (spec && *spec && commcheck_mutate(&p, spec, err, sizeof err)) {
    if (report) diag_fatal_noloc("SHARDC_DEBUG_BREAK_COMM: %s", err);
    return -1;
  }
  if (commcheck(&p, err, sizeof err)) {
    if (report) diag_fatal_noloc("communication check failed for strategy on %d ranks: %s", nr, err);
    return -1;
  }
  /* The cuda target posts its messages as NCCL groups, where a send waits
   * for its receive: proven too.  A pipeline whose groups could hang (a
   * cycle of sends around the ranks) keeps its messages on MPI, staged
   * through the host, on every rank. */
  bool pipe = m->nstages > 1, p2p = false;
  for (int r = 0; r < p.nranks && !p2p; r++)
    for (int i = 0; i < p.n[r] && !p2p; i++) p2p = p.ev[r][i].kind != CEV_COLL;
  if (!p2p) return 0;
  if (cuda_ok(m, model, false, spec, err, sizeof err)) return 0;
  /* Interleaved: Megatron's pairs (a forward's post with the next
   * backward's receives, whose gradients the memory plan keeps in the
   * stash), where posting each action's receives alone could hang */
  char err2[4096];
  if (pipe && m->train.plan.schedule == SCHED_INTERLEAVED) {
    set_pairs(m, true);
    if (cuda_ok(m, model, false, spec, err2, sizeof err2)) return 0;
    set_pairs(m, false);
  }
  if (pipe && cuda_ok(m, model, true, spec, err2, sizeof err2)) {
    *pipe_mpi = true;
    return 0;
  }
  if (report)
    diag_fatal_noloc("communication check (the cuda target's NCCL groups) failed for strategy on "
                     "%d ranks: %s", nr, pipe ? err2 : err);
  return -1;
}

/* Ranks that differ in their data-parallel coordinate alone run the same
 * events (their pipeline rank's list, prog_events), and so do ranks that
 * differ in their 1D tensor-parallel one alone; every message and every
 * communicator but that axis's own (and DATA and WORLD, which span it)
 * keeps the coordinate.  The check's semantics are deterministic (a blocked
 * rank waits for one thing; matching is FIFO per pair and per
 * communicator), so ranks that differ in such a coordinate move in
 * lockstep: a collective across them completes exactly when one of them
 * reaches it, and a mismatch or a hang among D of them is one among 2.  So
 * the check models at most 2 ranks on each of those axes (GPT-3 on 8,192
 * GPUs, tp = 8, pp = 16, dp = 64: 64 ranks, not 8,192, whose events and
 * per-pair queues took 16 GB and 27 s); should that fail, the whole job is
 * checked again, for its message's world ranks.  SHARDC_COMMCHECK_FULL=1
 * checks the whole job always (the tests compare the two);
 * SHARDC_DEBUG_BREAK_COMM's edits name world ranks, so they get the whole
 * job too.  A 2D grid's axes keep their size. */
int pass_commcheck(Module *m) {
  if (!m->nrprog || !m->train.mesh || m->train.mesh->ndev <= 1) return 0;
  const char *spec = getenv("SHARDC_DEBUG_BREAK_COMM"), *full = getenv("SHARDC_COMMCHECK_FULL");
  RtLayout L = job_layout(m, false), M = job_layout(m, true);
  bool pipe_mpi;
  if (!(spec && *spec) && !(full && *full && strcmp(full, "0")) &&
      rt_layout_world(&M) < rt_layout_world(&L) && !check_job(m, true, NULL, false, &pipe_mpi)) {
    /* the model passed: check_job left the pairs as the cuda target runs them */
  } else if (check_job(m, false, spec, true, &pipe_mpi)) {
    return -1;
  }
  for (int r = 0; r < m->nrprog; r++) m->rprog[r]->pipe_mpi = pipe_mpi;
  return 0;
}
