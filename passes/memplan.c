/* memplan.c — liveness over one microbatch's forward and backward, then a
 * static offset for every buffer in one arena per rank.
 *
 * Layout: [params | param grads | optimizer state | transient]. Transient
 * buffers (inputs, activations, activation gradients) are placed by a
 * best-fit allocator walking the node schedule; a buffer is live from the
 * node that first writes it to the node that last reads it. Views (reshape
 * outputs and their gradients) share their root's storage. The arena size is
 * the exact planned peak; the runtime checks its high-water mark against it.
 */
#include <string.h>

#include "fuse.h"
#include "passes.h"
#include "rankprog.h"
#include "runtime/dist_formulas.h"
#include "schedule.h"

enum { ALIGN = 64 };

static int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static Value *root(Value *v) {
  while (v->alias) v = v->alias;
  return v;
}

static int64_t bytes_of(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* Free list of transient ranges, kept sorted by offset and coalesced. */
typedef struct Range {
  int64_t off, len;
} Range;

typedef struct Alloc {
  Range *free;
  int nfree, cap;
  int64_t top;   /* high-water mark of the transient region */
} Alloc;

static void free_push(Alloc *a, int at, Range r) {
  a->free = arena_grow(a->free, a->nfree, &a->cap, sizeof *a->free, 64);
  memmove(&a->free[at + 1], &a->free[at], sizeof(Range) * (size_t)(a->nfree - at));
  a->free[at] = r;
  a->nfree++;
}

static int64_t alloc_take(Alloc *a, int64_t len) {
  int best = -1;
  for (int i = 0; i < a->nfree; i++)
    if (a->free[i].len >= len && (best < 0 || a->free[i].len < a->free[best].len)) best = i;
  if (best >= 0) {
    int64_t off = a->free[best].off;
    a->free[best].off += len;
    a->free[best].len -= len;
    if (!a->free[best].len) {
      memmove(&a->free[best], &a->free[best + 1], sizeof(Range) * (size_t)(a->nfree - best - 1));
      a->nfree--;
    }
    return off;
  }
  /* Grow at the top, absorbing a free range that ends there. */
  int64_t off = a->top;
  if (a->nfree && a->free[a->nfree - 1].off + a->free[a->nfree - 1].len == a->top) {
    off = a->free[a->nfree - 1].off;
    a->nfree--;
  }
  a->top = off + len;
  return off;
}

static void alloc_give(Alloc *a, int64_t off, int64_t len) {
  int at = 0;
  while (at < a->nfree && a->free[at].off < off) at++;
  free_push(a, at, (Range){off, len});
  /* coalesce with the next, then the previous */
  if (at + 1 < a->nfree && a->free[at].off + a->free[at].len == a->free[at + 1].off) {
    a->free[at].len += a->free[at + 1].len;
    memmove(&a->free[at + 1], &a->free[at + 2], sizeof(Range) * (size_t)(a->nfree - at - 2));
    a->nfree--;
  }
  if (at > 0 && a->free[at - 1].off + a->free[at - 1].len == a->free[at].off) {
    a->free[at - 1].len += a->free[at].len;
    memmove(&a->free[at], &a->free[at + 1], sizeof(Range) * (size_t)(a->nfree - at - 1));
    a->nfree--;
  }
}

/* Bytes of working memory the runtime needs during node n
 * (runtime/dist_formulas.h), 0 for none. */
static int64_t scratch_bytes(const Node *n) {
  int esize = ir_dtype_size(n->out ? n->out->dtype : DT_F32);
  switch (n->op) {
  case OP_ALLGATHER:
  case OP_ALLGATHER_G:
  case OP_REDUCE_SCATTER: {
    const Value *full = n->op == OP_REDUCE_SCATTER ? n->in[0] : n->out;
    int P = (int)n->a.i[1];
    int64_t outer, inner;
    ir_dim_split(&full->shape, (int)n->a.i[0], P, &outer, &inner);
    return (int64_t)rt_scratch_dim_collective((size_t)outer, (size_t)inner, P) * esize;
  }
  case OP_ATTENTION:
  case OP_ATTENTION_BWD: {
    if (ir_ring_size(n) <= 1) return 0;
    const Shape *q = &n->in[n->op == OP_ATTENTION ? 0 : 1]->shape;
    const Shape *k = &n->in[n->op == OP_ATTENTION ? 1 : 2]->shape;
    size_t B = (size_t)q->d[0].n, Tl = (size_t)q->d[1].n, H = (size_t)q->d[2].n;
    size_t Hkv = (size_t)k->d[2].n, D = (size_t)q->d[3].n;
    int es = ir_dtype_size(n->in[0]->dtype);
    size_t el = es == 2                ? rt_scratch_ring16(B, Tl, Hkv, D)
                : n->op == OP_ATTENTION ? rt_scratch_ring_fwd(B, Tl, H, Hkv, D)
                                        : rt_scratch_ring_bwd(B, Tl, H, Hkv, D);
    return (int64_t)el * es;
  }
  case OP_GRAD_REDUCE_SCATTER:   /* the chunk, reduced before it is added (not ZeRO-1's) */
    return n->a.i[3] ? 0 : ir_numel(&n->out->shape) * esize;
  case OP_MATMUL:
  case OP_MATMUL_BWD: {
    if (!ir_summa_q(n)) return 0;
    bool fwd = n->op == OP_MATMUL;
    size_t xe = (size_t)ir_numel(&n->in[fwd ? 0 : 1]->shape);
    size_t we = (size_t)ir_numel(&n->in[fwd ? 1 : 2]->shape);
    return (int64_t)(fwd ? rt_scratch_summa_fwd(xe, we) : rt_scratch_summa_bwd(xe, we)) *
           ir_dtype_size(n->in[0]->dtype);
  }
  case OP_LAYERNORM:
  case OP_LAYERNORM_BWD:
  case OP_RMSNORM:
  case OP_RMSNORM_BWD: {
    if (!ir_norm_split(n)) return 0;
    const Shape *x = &n->in[n->op == OP_LAYERNORM || n->op == OP_RMSNORM ? 0 : 1]->shape;
    size_t N = (size_t)(ir_numel(x) / x->d[x->ndim - 1].n);
    return (int64_t)(n->op == OP_LAYERNORM || n->op == OP_LAYERNORM_BWD
                         ? rt_scratch_ln_split_bytes(N)
                         : rt_scratch_rms_split_bytes(N));
  }
  case OP_CROSS_ENTROPY:
  case OP_CROSS_ENTROPY_BWD:
    if (n->a.i[1]) {
      const Value *l = n->in[n->op == OP_CROSS_ENTROPY ? 0 : 1];
      return (int64_t)rt_scratch_vp_xent_bytes(
          (size_t)(ir_numel(&l->shape) / l->shape.d[l->shape.ndim - 1].n));
    }
    return 0;
  default:
    return 0;
  }
}

bool memplan_rs_trails(const Node *n) {
  return n->op == OP_GRAD_REDUCE_SCATTER && !n->a.i[3];
}

bool memplan_dx_reduce(const Node *bwd, const Node *ar) {
  return bwd->op == OP_MATMUL_BWD && bwd->outs[0] && !ir_summa_q(bwd) &&
         (ar->op == OP_ALLREDUCE || ar->op == OP_REDUCE_SCATTER) &&
         root(ar->in[0]) == root(bwd->outs[0]);
}

static void touch(Value *v, int i) {
  Value *r = root(v);
  if (r->live_start < 0 || i < r->live_start) r->live_start = i;
  if (i > r->live_end) r->live_end = i;
}

/* A rank's arena is at most the bytes of its graph's values and scratch
 * (and a pipeline's stash slots, layout_ranks): past a pebibyte, which no
 * device holds, the plan is refused here, so that no offset or sum below
 * (nor a schedule's slots times a stash) can leave int64 (passes/shape.c
 * bounds one tensor at 2^48 elements; a graph may hold many). */
#define MEMPLAN_MAX_BYTES ((int64_t)1 << 50)

static int check_total(Module *m, Graph *g) {
  long double total = 0;
  for (int i = 0; i < g->values.len; i++) {
    const Value *v = g->values.data[i];
    if (v) total += (long double)ir_numel(&v->shape) * ir_dtype_size(v->dtype);
  }
  for (int i = 0; i < g->nodes.len; i++) total += (long double)scratch_bytes(g->nodes.data[i]);
  if (total <= (long double)MEMPLAN_MAX_BYTES) return 0;
  diag_error(m->train.plan_loc, "the plan's buffers on a rank add up to %.3Lg bytes, more than "
             "%.3g (a pebibyte, which no device holds): shard the model over more devices (tp, "
             "pp, sp) or make it smaller", total, (double)MEMPLAN_MAX_BYTES);
  return -1;
}

int pass_memplan(Module *m) {
  Graph *g = m->graph;
  if (!g) return 0;
  if (check_total(m, g)) return -1;
  MemPlan *mp = &m->mem;
  memset(mp, 0, sizeof *mp);
  int nn = g->nodes.len;
  for (int i = 0; i < g->values.len; i++) {
    Value *v = g->values.data[i];
    v->offset = v->opt_offset = -1;
    v->live_start = -1;
    v->live_end = -1;
  }
  /* What a fused group reads stays live to the group's last node (fuse.c),
   * and what a linear's backward reads to the all-reduce of its input
   * gradient right after it (memplan_dx_reduce). */
  int *win = arena_alloc(sizeof(int) * (size_t)(nn + 1));
  fuse_windows(g, win);
  for (int i = 0; i + 1 < nn; i++)
    if (memplan_dx_reduce(g->nodes.data[i], g->nodes.data[i + 1]) && win[i] < i + 1)
      win[i] = i + 1;
  /* ZeRO-2/3's trailing bucket reduce-scatters (zero_rs_trails): a bucket's
   * gradients and scratch stay live to the PROG_TRAILS-th next one's (which
   * finishes it), or the end */
  bool trails = zero_rs_trails(m);
  int after[PROG_TRAILS];   /* the next trailing ones, nearest first */
  for (int k = 0; k < PROG_TRAILS; k++) after[k] = nn - 1;
  for (int i = nn - 1; trails && i >= 0; i--)
    if (memplan_rs_trails(g->nodes.data[i])) {
      if (win[i] < after[PROG_TRAILS - 1]) win[i] = after[PROG_TRAILS - 1];
      for (int k = PROG_TRAILS - 1; k > 0; k--) after[k] = after[k - 1];
      after[0] = i;
    }
  for (int i = 0; i < nn; i++) {
    Node *n = g->nodes.data[i];
    int64_t sb = scratch_bytes(n);
    if (sb && !n->scratch) n->scratch = ir_scratch(g, sb, n->loc);
    if (n->scratch) {
      n->scratch->offset = -1;
      n->scratch->live_start = n->scratch->live_end = -1;
      touch(n->scratch, i);
      if (trails && memplan_rs_trails(n)) touch(n->scratch, win[i]);
    }
    for (int j = 0; j < n->nin; j++)
      if (ir_reads_data(n, j)) touch(n->in[j], win[i]);
    for (int j = 0; j < n->nout; j++)
      if (n->outs[j]) touch(n->outs[j], i);
  }
  /* Inputs are filled before the pass starts; the loss is read after it. */
  for (int i = 0; i < g->inputs.len; i++) {
    Value *v = root(g->inputs.data[i]);
    v->live_start = 0;
    v->live_end = nn - 1;
  }
  if (g->loss) root(g->loss)->live_end = nn - 1;
  for (int i = 0; i < g->nrecv; i++) {
    root(g->recv_act[i])->live_start = 0;
    root(g->recv_act[i])->live_end = nn - 1;
  }
  for (int i = 0; i < g->nsend; i++) root(g->send_act[i])->live_end = nn - 1;

  /* Persistent: parameters, then their gradients, then optimizer state. */
  int64_t off = 0;
  if (zero_memplan(m, &off)) goto transient;   /* gradient buckets, ZeRO (zero.c) */
  for (int i = 0; i < g->params.len; i++) {
    Value *p = g->params.data[i];
    p->persistent = true;
    p->offset = off;
    off += align_up(bytes_of(p));
  }
  mp->param_bytes = off;
  const Optimizer *o = &m->train.opt;
  int nstate = opt_states(o);
  for (int i = 0; i < g->params.len; i++) {
    Value *p = g->params.data[i];
    if (!p->grad) continue;
    Value *d = root(p->grad);
    d->persistent = true;
    d->offset = off;
    off += align_up(bytes_of(d));
  }
  mp->grad_bytes = off - mp->param_bytes;
  for (int i = 0; i < g->params.len && nstate; i++) {
    Value *p = g->params.data[i];
    if (!p->grad) continue;
    p->opt_offset = off;
    off += nstate * align_up(bytes_of(p));
  }
  /* shampoo, adafactor: each tensor's state, then the step's workspace */
  off = opt_plan_state(o, g, m->nstages > 1 ? m->whole : NULL, off, &mp->opt_work_offset,
                       opt_root_worker(m), &mp->root_work_bytes);
  mp->root_work_offset = off - mp->root_work_bytes;
  mp->opt_dir_offset = off;
  off += optplace_dir_bytes(m, g);
  mp->opt_stats_offset = off;
  /* (interleaved: one buffer for the rank's chunks, layout_ranks) */
  if (m->nstages <= 1 || m->nstages == m->train.plan.pp) off += optplace_af_bytes(m, g);
  mp->optstate_bytes = off - mp->param_bytes - mp->grad_bytes;
  mp->persistent_bytes = off;

transient:;
  /* The 16-bit weight copies (precision.c), made once per step: persistent.
   * Interleaved under ZeRO every chunk plans its rank's one persistent part,
   * so each places the copies of all the rank's chunks, in chunk order. */
  mp->wcopy_offset = off = mp->persistent_bytes;
  {
    int pp = m->train.plan.pp;
    bool shared = g->buckets.len && m->nstages > pp && pp > 1 && m->train.plan.zero >= 1;
    /* shared: the rank's chunks are stages stage % pp, + pp, ...; else this stage alone */
    int first = shared ? g->stage % pp : g->stage, end = shared ? m->nstages : g->stage + 1,
        stride = shared ? pp : 1;
    for (int s = first; s < end; s += stride) {
      const Graph *sg = s == g->stage ? g : m->stages[s];
      for (int i = 0; i < sg->wcasts.len; i++) {
        Value *c = ((Node *)sg->wcasts.data[i])->out;
        if (((Node *)sg->wcasts.data[i])->op == OP_ALLGATHER) mp->wcopy_gathered = true;
        c->persistent = true;
        c->offset = off;
        off += align_up(bytes_of(c));
      }
    }
  }
  mp->wcopy_bytes = off - mp->wcopy_offset;
  mp->persistent_bytes = off;
  /* A pipeline stage keeps what its backward reads of a microbatch's
   * forward in that microbatch's stash slot, and the messages it sends
   * (activation, input gradient) there until they are delivered. */
  bool staged = g->nstages > 1;
  for (int i = 0; i < g->values.len; i++) {
    Value *v = g->values.data[i];
    v->stash = staged && !v->alias && !v->persistent && v->role != ROLE_PARAM &&
               v->live_start >= 0 && v->live_start < g->nfwd && v->live_end >= g->nfwd;
  }
  for (int i = 0; staged && i < g->nsend; i++) root(g->send_act[i])->stash = true;
  for (int i = 0; staged && i < g->nrecv; i++)
    if (g->recv_act[i]->grad) root(g->recv_act[i]->grad)->stash = true;
  /* Interleaved: the gradients the backward receives too, so that the cuda
   * target may post their receive before the forward that runs ahead of it
   * (ir/rankprog.h PAct.pair) */
  bool inter = m->train.plan.schedule == SCHED_INTERLEAVED;
  for (int i = 0; staged && inter && i < g->nsend; i++)
    if (g->send_act[i]->grad) root(g->send_act[i]->grad)->stash = true;

  /* Transient: walk the schedule; free what died before node i, then place
   * what is born at i. */
  PtrVec *born = arena_alloc(sizeof(PtrVec) * (size_t)(nn + 1));
  PtrVec *dies = arena_alloc(sizeof(PtrVec) * (size_t)(nn + 1));
  for (int i = 0; i < g->values.len; i++) {
    Value *v = g->values.data[i];
    if (v->alias || v->persistent || v->live_start < 0 || v->stash) continue;
    if (v->role == ROLE_PARAM) continue;
    vec_push(&born[v->live_start], v);
    vec_push(&dies[v->live_end], v);
    mp->nbuffers++;
  }
  Alloc a = {0};
  int64_t peak = 0;
  for (int i = 0; i < nn; i++) {
    if (i > 0)
      for (int k = 0; k < dies[i - 1].len; k++) {
        Value *v = dies[i - 1].data[k];
        alloc_give(&a, v->offset - mp->persistent_bytes, align_up(bytes_of(v)));
      }
    for (int k = 0; k < born[i].len; k++) {
      Value *v = born[i].data[k];
      v->offset = mp->persistent_bytes + alloc_take(&a, align_up(bytes_of(v)));
      if (v->role == ROLE_INPUT) mp->input_bytes += align_up(bytes_of(v));
    }
    if (a.top > peak) {
      peak = a.top;
      mp->peak_node = i;
    }
  }
  mp->transient_peak = peak;
  mp->arena_bytes = mp->persistent_bytes + peak;
  if (staged) {
    /* Stash slots after the transient region; offsets are those of slot 0. */
    mp->stash_offset = mp->arena_bytes;
    for (int i = 0; i < g->values.len; i++) {
      Value *v = g->values.data[i];
      if (!v->stash) continue;
      v->offset = mp->stash_offset + mp->stash_bytes;
      mp->stash_bytes += align_up(bytes_of(v));
      if (v->role == ROLE_INPUT) mp->input_bytes += align_up(bytes_of(v));
      mp->nbuffers++;
    }
    PipeSched ps;
    char err[256];
    const Plan *plan = &m->train.plan;
    int mb = plan->mb > 0 ? plan->mb : 1;
    if (sched_build(&ps, plan->schedule, plan->pp, mb, g->nstages / plan->pp, err, sizeof err)) {
      diag_error(plan_key_loc(&m->train, PLAN_SCHED), "%s", err);
      return -1;
    }
    mp->slots = ps.inflight[g->stage % plan->pp][g->stage / plan->pp];
    sched_free(&ps);
    mp->arena_bytes += mp->slots * mp->stash_bytes;
  }
  for (int i = 0; i < g->values.len; i++) {
    Value *v = g->values.data[i];
    if (v->alias) v->offset = root(v)->offset + ir_view_off(v);
  }
  m->planned = true;
  return 0;
}

/* The pipeline ranks' arenas (Module.rank_mem).  Without interleaving a
 * rank's arena is its stage's plan.  Interleaved, rank r holds chunks
 * c = 0..v-1 (virtual stages c*pp + r) in one arena: their persistent parts
 * one after the other (then, for Adafactor under tp, one statistics buffer
 * for all of them), one transient region as large as the largest
 * chunk's (one action runs at a time), then every chunk's stash slots; each
 * chunk's values are relocated into it.  Under ZeRO the chunks' persistent
 * parts are already the rank's one (zero.c's zero_memplan). */
static void layout_ranks(Module *m) {
  const Plan *p = &m->train.plan;
  int pp = m->nstages > 1 ? p->pp : 1, v = m->nstages > 1 ? m->nstages / pp : 1;
  if (m->nstages <= 1) {
    m->rank_mem[0] = m->mem;
    return;
  }
  for (int r = 0; r < pp; r++) {
    MemPlan *all = &m->rank_mem[r];
    memset(all, 0, sizeof *all);
    if (v == 1) {
      *all = m->stage_mem[r];
      continue;
    }
    /* ZeRO: every chunk planned the rank's one persistent part (zero.c) */
    bool zero = m->stages[r]->buckets.len > 0;
    int64_t tbase = 0, tsize = 0;
    if (zero) {
      const MemPlan *c0 = &m->stage_mem[r];
      tbase = c0->persistent_bytes;
      all->param_bytes = c0->param_bytes;
      all->grad_bytes = c0->grad_bytes;
      all->optstate_bytes = c0->optstate_bytes;
      all->zero_chunk = c0->zero_chunk;
      all->zero_gshard_offset = c0->zero_gshard_offset;
      all->zero_opt_offset = c0->zero_opt_offset;
      all->opt_stats_offset = c0->opt_stats_offset;
      all->wcopy_offset = c0->wcopy_offset;
      all->wcopy_bytes = c0->wcopy_bytes;
      all->wcopy_gathered = c0->wcopy_gathered;
    }
    for (int c = 0; c < v; c++) {
      MemPlan *cm = &m->stage_mem[c * pp + r];
      cm->base = zero ? 0 : tbase;
      if (!zero) tbase += cm->persistent_bytes;
      if (cm->transient_peak > tsize) tsize = cm->transient_peak;
      if (!zero) {
        all->param_bytes += cm->param_bytes;
        all->grad_bytes += cm->grad_bytes;
        all->optstate_bytes += cm->optstate_bytes;
        all->wcopy_bytes += cm->wcopy_bytes;
      }
      all->input_bytes += cm->input_bytes;
      all->nbuffers += cm->nbuffers;
    }
    if (!zero) {
      /* Adafactor under tp: one statistics buffer for the parameters of
       * every chunk, in chunk order (as program.c's step lays it out) */
      PtrVec ps = {0};
      for (int c = 0; c < v; c++) {
        Graph *g = m->stages[c * pp + r];
        for (int i = 0; i < g->params.len; i++) vec_push(&ps, g->params.data[i]);
      }
      Graph rg = {.params = ps};
      int64_t af = optplace_af_bytes(m, &rg);
      all->opt_stats_offset = tbase;
      all->optstate_bytes += af;
      tbase += af;
    }
    int64_t top = tbase + tsize;
    for (int c = 0; c < v; c++) {
      MemPlan *cm = &m->stage_mem[c * pp + r];
      Graph *g = m->stages[c * pp + r];
      for (int i = 0; i < g->values.len; i++) {
        Value *x = g->values.data[i];
        if (x->opt_offset >= 0) x->opt_offset += cm->base;
        if (x->offset < 0) continue;
        if (root(x)->stash)
          x->offset = x->offset - cm->stash_offset + top;
        else if (x->offset < cm->persistent_bytes)
          x->offset += cm->base;
        else
          x->offset = x->offset - cm->persistent_bytes + tbase;
      }
      cm->stash_offset = top;
      top += cm->slots * cm->stash_bytes;
    }
    /* the chunks' workspaces are alike (the whole model's largest block): chunk 0's */
    all->opt_work_offset = m->stage_mem[r].base + m->stage_mem[r].opt_work_offset;
    all->root_work_offset = m->stage_mem[r].base + m->stage_mem[r].root_work_offset;
    all->root_work_bytes = m->stage_mem[r].root_work_bytes;
    all->persistent_bytes = tbase;
    all->transient_peak = tsize;
    all->arena_bytes = top;
  }
}

int pass_memplan_all(Module *m) {
  int rc = per_stage(m, pass_memplan);
  if (rc) return rc;
  layout_ranks(m);
  return plan_memory_check(m, 1);
}

const char *memplan_wcopy_label(const MemPlan *mp) {
  return mp->wcopy_gathered ? "gathered weight copies" : "16-bit weight copies";
}
