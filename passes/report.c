/* report.c — the plan summary printed by `--emit=plan` and placed at the
 * top of generated code. */
#include <string.h>

#include "passes.h"
#include "runtime/dist_formulas.h"
#include "runtime/dist_orders.h"
#include "schedule.h"

void report_commas(char *buf, int cap, int64_t n) {
  char tmp[32];
  snprintf(tmp, sizeof tmp, "%lld", (long long)(n < 0 ? -n : n));
  int len = (int)strlen(tmp), o = 0;
  if (n < 0 && o < cap - 1) buf[o++] = '-';
  for (int i = 0; i < len && o < cap - 1; i++) {
    if (i && (len - i) % 3 == 0 && o < cap - 1) buf[o++] = ',';
    if (o < cap - 1) buf[o++] = tmp[i];
  }
  buf[o] = 0;
}

static const char *human_bytes(double b) {
  static char buf[8][32];
  static int k;
  char *s = buf[k++ & 7];
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) {
    b /= 1024;
    i++;
  }
  snprintf(s, 32, i ? "%.2f %s" : "%.0f %s", b, u[i]);
  return s;
}

static void comm_line(FILE *out, const Module *m, const char *pf, const char *what) {
  uint64_t ax[AX_COUNT];
  uint64_t total = plan_comm_bytes(m, ax);
  char c[32];
  report_commas(c, sizeof c, (int64_t)total);
  fprintf(out, "%s%s%s bytes sent per rank per step", pf, what, c);
  const char *sep = " (";
  for (int k = 0; k < AX_COUNT; k++)
    if (ax[k]) {
      report_commas(c, sizeof c, (int64_t)ax[k]);
      fprintf(out, "%s%s %s", sep, ir_axis_name(k), c);
      sep = ", ";
    }
  fprintf(out, "%s\n", *sep == ',' ? ")" : "");
}

/* A pipeline: the schedule, then per stage its layers, memory (with the
 * stash slots) and communication. */
static void report_stages(FILE *out, Module *m, const char *pf) {
  const Plan *p = &m->train.plan;
  Graph *sel = m->graph;
  MemPlan keep = m->mem;
  fprintf(out, "%spipeline: %d stages, %s schedule, %d microbatches per step; activations of a "
               "microbatch wait in a stash slot from its forward to its backward\n",
          pf, m->nstages,
          p->schedule == SCHED_GPIPE ? "GPipe" : p->schedule == SCHED_1F1B ? "1F1B" : "interleaved",
          p->mb);
  for (int s = 0; s < m->nstages; s++) {
    stage_select(m, s);
    const MemPlan *mp = &m->mem;
    const Graph *g = m->graph;
    char a[32], st[32];
    report_commas(a, sizeof a, mp->arena_bytes);
    report_commas(st, sizeof st, mp->stash_bytes);
    int v = m->nstages / p->pp;
    fprintf(out, "%sstage %d:  %s; %d params, %d nodes%s\n", pf, s, m->stage_desc[s],
            g->params.len, g->nodes.len,
            v > 1 ? arena_printf(" (pipeline rank %d, chunk %d)", s % p->pp, s / p->pp) : "");
    fprintf(out, "%s  memory: %s bytes per rank (%s): params %s, grads %s, optimizer %s, "
                 "activations %s at node %d, stash %d slot%s x %s bytes\n",
            pf, a, human_bytes((double)mp->arena_bytes), human_bytes((double)mp->param_bytes),
            human_bytes((double)mp->grad_bytes), human_bytes((double)mp->optstate_bytes),
            human_bytes((double)mp->transient_peak), mp->peak_node, mp->slots,
            mp->slots == 1 ? "" : "s", st);
    comm_line(out, m, pf, v > 1 ? "  comm:   (its pipeline rank's) " : "  comm:   ");
  }
  /* interleaved: a rank holds its chunks side by side with one transient
   * region (codegen's arena layout) */
  for (int r = 0; m->nstages > p->pp && r < p->pp; r++) {
    int64_t pers = 0, trans = 0, stash = 0;
    for (int s = r; s < m->nstages; s += p->pp) {
      const MemPlan *mp = &m->stage_mem[s];
      pers += mp->persistent_bytes;
      if (mp->transient_peak > trans) trans = mp->transient_peak;
      stash += mp->slots * mp->stash_bytes;
    }
    char a[32], b[32], c[32], d[32];
    report_commas(a, sizeof a, pers + trans + stash);
    report_commas(b, sizeof b, pers);
    report_commas(c, sizeof c, trans);
    report_commas(d, sizeof d, stash);
    fprintf(out, "%srank %d:   memory %s bytes per rank (%s): persistent %s + transient %s (the "
                 "largest chunk's) + stash slots %s\n",
            pf, r, a, human_bytes((double)(pers + trans + stash)), b, c, d);
  }
  m->graph = sel;
  m->mem = keep;
}

void report_plan(FILE *out, const Module *m, const char *pf) {
  const TrainCfg *t = &m->train;
  const Mesh *me = t->mesh;
  const Plan *p = &t->plan;
  char spec[256], num[64];
  fprintf(out, "%ssource:   %s\n", pf, m->source);
  if (t->model_name) fprintf(out, "%smodel:    %s\n", pf, t->model_name);
  if (me)
    fprintf(out, "%smesh:     %s = %d x %s (%d node%s x %d), intra %.0f GB/s, inter %.0f GB/s, %s per device\n",
            pf, me->name, me->ndev, me->device->name, me->nodes, me->nodes == 1 ? "" : "s",
            me->per_node, me->intra_bw / 1e9, me->inter_bw / 1e9, human_bytes(me->mem_bytes));
  plan_str(p, spec, sizeof spec);
  fprintf(out, "%sstrategy: %s (from %s)\n", pf, spec, t->plan_origin);
  if (!p->is_auto && me) {
    /* Rank <-> coordinate: tp innermost (a DGX node holds a tp group), then
     * sp, dp, pp outermost. */
    fprintf(out, "%sranks:    rank = ((pp*%d + dp)*%d + sp)*%d + tp  (tp innermost)\n", pf, p->dp,
            p->sp, p->tp * p->tp2d * p->tp2d);
    fprintf(out, "%sbatch:    %lld %s/step = dp %d x microbatch %lld x %d microbatch%s", pf,
            (long long)t->batch, t->seq ? "sequences" : "examples", p->dp, (long long)t->microbatch,
            p->mb, p->mb == 1 ? "" : "es");
    if (t->seq) fprintf(out, "; seq %lld", (long long)t->seq);
    fputc('\n', out);
  }
  const Optimizer *o = &t->opt;
  if (o->kind) {
    if (!strcmp(o->kind, "adamw"))
      fprintf(out, "%soptim:    adamw lr=%g betas=(%g, %g) eps=%g weight_decay=%g warmup=%d %s min_lr=%g clip=%g\n",
              pf, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->warmup, o->schedule,
              o->lr * o->min_lr_ratio, o->clip);
    else
      fprintf(out, "%soptim:    sgd lr=%g momentum=%g weight_decay=%g warmup=%d %s min_lr=%g clip=%g\n",
              pf, o->lr, o->momentum, o->weight_decay, o->warmup, o->schedule, o->lr * o->min_lr_ratio,
              o->clip);
    fprintf(out, "%ssteps:    %lld, precision %s, seed %lld\n", pf, (long long)t->steps,
            t->precision == DT_F32 ? "fp32" : t->precision == DT_BF16 ? "bf16" : "fp16",
            (long long)t->seed);
  }
  const Graph *g = m->nstages > 1 ? m->whole : m->graph;
  if (!g) return;
  int64_t np = ir_param_count(g);
  report_commas(num, sizeof num, np);
  fprintf(out, "%sparams:   %s in %d tensors (%s fp32)\n", pf, num, g->params.len,
          human_bytes((double)np * 4));
  double f = ir_flops(g);
  int64_t tokens = 1;
  for (int i = 0; i < g->nsym; i++) tokens *= g->symval[i];
  if (p->sp_kind == SP_RING && p->sp > 1) tokens /= p->sp; /* this rank's chunk of the sequence */
  fprintf(out, "%sflops:    %.4g forward per microbatch (%lld tokens); %.4g per step fwd+bwd\n", pf,
          f, (long long)tokens, 3 * f * (t->plan.mb ? t->plan.mb : 1) * t->plan.dp);
  fprintf(out, "%sgraph:    %d nodes (%d forward), %d values\n", pf, g->nodes.len,
          g->nfwd ? g->nfwd : g->nodes.len, g->values.len);
  if (m->planned && m->nstages > 1) {
    report_stages(out, (Module *)m, pf);
  } else if (m->planned) {
    const MemPlan *mp = &m->mem;
    char a[32];
    report_commas(a, sizeof a, mp->arena_bytes);
    fprintf(out, "%smemory:   %s bytes per rank (%s): params %s, grads %s, optimizer %s, "
                 "activations+inputs %s at node %d\n",
            pf, a, human_bytes((double)mp->arena_bytes), human_bytes((double)mp->param_bytes),
            human_bytes((double)mp->grad_bytes), human_bytes((double)mp->optstate_bytes),
            human_bytes((double)mp->transient_peak), mp->peak_node);
    if (t->mesh && t->mesh->ndev > 1) comm_line(out, m, pf, "comm:     ");
  }
}

/* Ring attention's messages, as runtime/dist_ring.c issues them
 * (runtime/dist_orders.h: sends are non-blocking, each step's receives
 * block after its sends): forward, P-1 steps passing (K, V) on; backward,
 * P steps passing (dK, dV) on, the first P-1 with (K, V) too.  Returns the
 * entries written. */
static int ring_messages(const Node *nd, PlanColl *c, int i, int k, bool fwd) {
  static const char *const name[RT_RING_NBLOCKS] = {"K", "V", "dK", "dV"};
  int ax = (int)nd->a.i[2];
  RtRingCall call = {!fwd, ir_ring_size(nd), (size_t)ir_ring_kv(nd),
                     ir_dtype_size(nd->in[0]->dtype)};
  RtRingMsg *msg = arena_alloc(sizeof(RtRingMsg) * (size_t)rt_ring_msgs(&call, NULL));
  int n = rt_ring_msgs(&call, msg);
  for (int j = 0; j < n; j++) {
    const RtRingMsg *g = &msg[j];
    c[j] = (PlanColl){ax, g->send ? "send" : "recv", g->bytes, g->send,
                      arena_printf("node %d ring attention %s %s of step %d over %s (%s), "
                                   "%s of microbatch %d",
                                   i, g->send ? "send of" : "receive of", name[g->block],
                                   g->step + 1, ir_axis_name(ax),
                                   nd->scope && *nd->scope ? nd->scope : "model",
                                   fwd ? "forward" : "backward", k + 1),
                      g->send ? 1 : -1, g->block, 0};
  }
  return n;
}

/* A SUMMA matmul's collectives as runtime/dist_summa.c issues them
 * (runtime/dist_orders.h): forward, for each k < q a broadcast of an X
 * block along the grid row, then one of a W block down the column;
 * backward, for each l < q the dX part (a W block down the column, a dX
 * partial reduced along the row) when dX is needed, then the dW part (an X
 * block along the row, a dW partial reduced down the column).  The
 * generated call passes no bias gradient (the bias add is its own node).
 * Returns the entries written. */
static int summa_messages(const Node *nd, PlanColl *c, int i, int k) {
  int q = ir_summa_q(nd), row = (int)nd->a.i[1], col = (int)nd->a.i[2];
  bool fwd = nd->op == OP_MATMUL;
  const Value *x = nd->in[fwd ? 0 : 1], *w = nd->in[fwd ? 1 : 2];
  RtSummaCall call = {!fwd, q, !fwd && nd->outs[0], !fwd && nd->outs[1], 0,
                      (size_t)ir_numel(&x->shape), (size_t)ir_numel(&w->shape), 0,
                      ir_dtype_size(x->dtype)};
  const char *what = arena_printf("node %d summa %dx%d (%s), %s of microbatch %d", i, q, q,
                                  nd->scope && *nd->scope ? nd->scope : "model",
                                  fwd ? "forward" : "backward", k + 1);
  RtSummaMsg *msg = arena_alloc(sizeof(RtSummaMsg) * (size_t)rt_summa_msgs(&call, NULL));
  int n = rt_summa_msgs(&call, msg);
  static const char *const op[3] = {"broadcast", "reduce", "all_reduce"};
  for (int j = 0; j < n; j++)
    c[j] = (PlanColl){msg[j].col ? col : row, op[msg[j].coll], msg[j].vol, true, what, 0, 0, 0};
  return n;
}

/* One step of one rank, in issue order: the graph's communication for each
 * microbatch, then the step's (passes.h PlanColl).  A pipeline rank runs its
 * stage graph (its chunks' graphs, interleaved) in the schedule's order. */
int plan_collectives(const Module *m, PlanColl **out) {
  const Graph *g = m->graph;
  *out = NULL;
  if (!g || !m->planned || !m->train.mesh || m->train.mesh->ndev <= 1) return 0;
  const Plan *p = &m->train.plan;
  bool staged = g->nstages > 1;
  int S = staged ? g->nstages : 1, v = staged ? S / p->pp : 1, r = staged ? g->stage % p->pp : 0;
  /* the rank's chunks: virtual stages c*pp + r */
  const Graph *gs[MAX_STAGES];
  const MemPlan *mps[MAX_STAGES];
  for (int c = 0; c < v; c++) {
    gs[c] = v > 1 ? m->stages[c * p->pp + r] : g;
    mps[c] = v > 1 ? &m->stage_mem[c * p->pp + r] : &m->mem;
  }
  int mb = p->mb > 0 ? p->mb : 1, n = 0, cap = 8;
  for (int c = 0; c < v; c++) {
    for (int i = 0; i < gs[c]->nodes.len; i++) {
      const Node *nd = gs[c]->nodes.data[i];
      int R = ir_ring_size(nd);
      cap += mb * (R > 1 ? 8 * R : ir_summa_q(nd) ? 4 * ir_summa_q(nd) : ir_comm_axis(nd, NULL) >= 0);
    }
    cap += 4 * gs[c]->params.len + 3 * gs[c]->buckets.len + 4 * mb + 2;
  }
  PlanColl *c = arena_alloc(sizeof(PlanColl) * (size_t)cap);
  /* gradient buckets (passes/zero.c): stages 0 and 1 all-reduce or
   * reduce-scatter them in the last microbatch, 2 and 3 in every one */
  int stage = g->buckets.len ? p->zero : -1;
#define ADD(ax, o, b, cnt, w) c[n++] = (PlanColl){(ax), (o), (b), (cnt), (w), 0, 0, 0}
#define PIPE(dst, tg) (c[n - 1].pipe = (dst) % p->pp - r, c[n - 1].tag = (tg))
  /* A pipeline stage runs its microbatches' forwards and backwards in the
   * schedule's order, with the activation and gradient messages around them:
   * to and from virtual stages vs +- 1, tagged 2 (k S + the lower stage) +
   * (1 for a gradient). */
  PipeSched ps = {0};
  if (staged) {
    char err[256];
    if (sched_build(&ps, p->schedule, p->pp, mb, v, err, sizeof err)) return 0;
  }
  for (int a = 0; a < (staged ? ps.n[r] : 2 * mb); a++) {
    int k = staged ? ps.act[r][a].mb : a / 2, ch = staged ? ps.act[r][a].chunk : 0;
    bool fwd = staged ? ps.act[r][a].fwd != 0 : a % 2 == 0;
    const Graph *cg = gs[ch];
    int vs = ch * p->pp + r;
    if (staged && fwd && vs > 0) {
      ADD(AX_PP, "recv", (uint64_t)ir_numel(&cg->recv_act->shape) * 4, false,
          arena_printf("activation of microbatch %d from stage %d", k + 1, vs - 1));
      PIPE(vs - 1, 2 * (k * S + vs - 1));
    }
    if (staged && !fwd && vs < S - 1) {
      ADD(AX_PP, "recv", (uint64_t)ir_numel(&cg->send_act->shape) * 4, false,
          arena_printf("gradient of microbatch %d from stage %d", k + 1, vs + 1));
      PIPE(vs + 1, 2 * (k * S + vs) + 1);
    }
    for (int i = fwd ? 0 : cg->nfwd; i < (fwd ? cg->nfwd : cg->nodes.len); i++) {
      const Node *nd = cg->nodes.data[i];
      if (ir_summa_q(nd)) {
        n += summa_messages(nd, c + n, i, k);
        continue;
      }
      int ax = ir_comm_axis(nd, NULL);
      /* tp_copy and shard only move data locally; their adjoints are nodes too */
      if (ax < 0 || nd->op == OP_TP_COPY || nd->op == OP_SHARD) continue;
      if (ir_ring_size(nd) > 1) {
        n += ring_messages(nd, c + n, i, k, i < cg->nfwd);
        continue;
      }
      bool last_only = nd->op == OP_GRAD_ALLREDUCE || (nd->op == OP_GRAD_REDUCE_SCATTER && nd->a.i[3]);
      if (last_only && k != mb - 1) continue;
      bool xent = nd->op == OP_CROSS_ENTROPY || nd->op == OP_CROSS_ENTROPY_BWD;
      ADD(ax, xent ? "vocab-parallel cross-entropy" : ir_ops[nd->op].name, ir_comm_bytes(nd), true,
          arena_printf("node %d %s over %s (%s), %s of microbatch %d%s", i, ir_ops[nd->op].name,
                       ir_axis_name(ax), nd->scope && *nd->scope ? nd->scope : "model",
                       i < cg->nfwd ? "forward" : "backward", k + 1,
                       v > 1 ? arena_printf(" of stage %d", vs) : ""));
    }
    if (staged && fwd && vs < S - 1) {
      ADD(AX_PP, "send", (uint64_t)ir_numel(&cg->send_act->shape) * 4, true,
          arena_printf("activation of microbatch %d to stage %d", k + 1, vs + 1));
      PIPE(vs + 1, 2 * (k * S + vs));
    }
    if (staged && !fwd && vs > 0 && cg->recv_act->grad) {
      ADD(AX_PP, "send", (uint64_t)ir_numel(&cg->recv_act->shape) * 4, true,
          arena_printf("gradient of microbatch %d to stage %d", k + 1, vs - 1));
      PIPE(vs - 1, 2 * (k * S + vs - 1) + 1);
    }
  }
  sched_free(&ps);
  /* the step (codegen's sync_gradients, mean_loss, grad_norm, optimizer_step) */
  for (int i = 0; i < g->buckets.len && stage >= 1; i++) {
    const Bucket *b = g->buckets.data[i];
    static const int bax[3] = {AX_TP, AX_TPR, AX_TPC};
    for (int a = 0; a < 3; a++)
      if (b->partial & (1u << bax[a]))
        ADD(bax[a], "all_reduce",
            rt_vol_allreduce((uint64_t)b->chunk * 4, bax[a] == AX_TP ? p->tp : p->tp2d), true,
            arena_printf("gradient shard of bucket %s over %s", b->name, ir_axis_name(bax[a])));
    if (b->tied)
      ADD(AX_EMBED, "all_reduce", rt_vol_allreduce((uint64_t)b->chunk * 4, 2), true,
          arena_printf("gradient shard of bucket %s over the first and last stage", b->name));
  }
  /* replicated parameters used on split activations: over tp (1D), or
   * over the grid row and column (2D; codegen's sync_gradients order) */
  static const int gax[3] = {AX_TP, AX_TPR, AX_TPC};
  for (int ch = 0; ch < v; ch++)
    for (int i = 0; i < gs[ch]->params.len && (p->tp > 1 || p->tp2d > 1) && stage < 1; i++) {
      const Value *pv = gs[ch]->params.data[i];
      for (int a = 0; a < 3 && pv->grad; a++)
        if (pv->grad_partial & (1u << gax[a]))
          ADD(gax[a], "all_reduce",
              rt_vol_allreduce((uint64_t)ir_numel(&pv->shape) * 4, gax[a] == AX_TP ? p->tp : p->tp2d),
              true, arena_printf("gradient of %s over %s", pv->name, ir_axis_name(gax[a])));
    }
  for (int ch = 0; ch < v; ch++)
    for (int i = 0; i < gs[ch]->params.len && staged && stage < 1; i++) {
      const Value *pv = gs[ch]->params.data[i];
      if (pv->grad && pv->pp_shared)
        ADD(AX_EMBED, "all_reduce", rt_vol_allreduce((uint64_t)ir_numel(&pv->shape) * 4, 2), true,
            arena_printf("gradient of %s (tied) over the first and last stage", pv->name));
    }
  /* sp=ring: gradients and losses are partial over the sequence shards too */
  int ring = p->sp_kind == SP_RING && p->sp > 1, data = ring ? AX_DATA : AX_DP;
  int nd = p->dp * (ring ? p->sp : 1);
  for (int ch = 0; ch < v && stage < 0; ch++)
    ADD(data, "all_reduce", rt_vol_allreduce((uint64_t)mps[ch]->grad_bytes, nd), true,
        ring ? "gradient all-reduce over dp x sp" : "gradient all-reduce over dp");
  if (staged)
    ADD(AX_WORLD, "sum (loss)", 8, false, "loss sum over all ranks");
  else
    ADD(data, "sum (loss)", 8, false, ring ? "loss sum over dp x sp" : "loss sum over dp");
  ADD(stage >= 1 || staged ? AX_WORLD : AX_TP, "sum (norm)", 8, false, "gradient norm sum");
  for (int i = 0; i < g->buckets.len && (stage == 1 || stage == 2); i++) {
    const Bucket *b = g->buckets.data[i];
    ADD(data, "all_gather", rt_vol_allgather((uint64_t)b->numel * 4, nd), true,
        arena_printf("ZeRO-%d parameter all-gather of bucket %s over %s", stage, b->name,
                     ring ? "dp x sp" : "dp"));
  }
#undef ADD
#undef PIPE
  *out = c;
  return n;
}

uint64_t plan_comm_bytes(const Module *m, uint64_t *per_axis) {
  uint64_t ax[AX_COUNT] = {0}, total = 0;
  PlanColl *c;
  int n = plan_collectives(m, &c);
  for (int i = 0; i < n; i++)
    if (c[i].counted) ax[c[i].axis] += c[i].bytes;
  for (int a = 0; a < AX_COUNT; a++) {
    total += ax[a];
    if (per_axis) per_axis[a] = ax[a];
  }
  return total;
}
