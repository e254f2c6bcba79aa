/* report.c — the plan summary printed by `--emit=plan` and placed at the
 * top of generated code. */
#include <string.h>

#include "passes.h"
#include "runtime/dist_formulas.h"

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

void report_plan(FILE *out, const Module *m, const char *pf) {
  const TrainCfg *t = &m->train;
  const Mesh *me = t->mesh;
  const Plan *p = &t->plan;
  char spec[256], num[64];
  fprintf(out, "%ssource:   %s\n", pf, m->prog->file->path);
  if (t->model) fprintf(out, "%smodel:    %s\n", pf, t->model->name);
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
  const Graph *g = m->graph;
  if (!g) return;
  int64_t np = ir_param_count(g);
  report_commas(num, sizeof num, np);
  fprintf(out, "%sparams:   %s in %d tensors (%s fp32)\n", pf, num, g->params.len,
          human_bytes((double)np * 4));
  double f = ir_flops(g);
  int64_t tokens = 1;
  for (int i = 0; i < g->nsym; i++) tokens *= g->symval[i];
  fprintf(out, "%sflops:    %.4g forward per microbatch (%lld tokens); %.4g per step fwd+bwd\n", pf,
          f, (long long)tokens, 3 * f * (t->plan.mb ? t->plan.mb : 1) * t->plan.dp);
  fprintf(out, "%sgraph:    %d nodes (%d forward), %d values\n", pf, g->nodes.len,
          g->nfwd ? g->nfwd : g->nodes.len, g->values.len);
  if (m->planned) {
    const MemPlan *mp = &m->mem;
    char a[32];
    report_commas(a, sizeof a, mp->arena_bytes);
    fprintf(out, "%smemory:   %s bytes per rank (%s): params %s, grads %s, optimizer %s, "
                 "activations+inputs %s at node %d\n",
            pf, a, human_bytes((double)mp->arena_bytes), human_bytes((double)mp->param_bytes),
            human_bytes((double)mp->grad_bytes), human_bytes((double)mp->optstate_bytes),
            human_bytes((double)mp->transient_peak), mp->peak_node);
    if (p->pp > 1 || p->sp > 1 || p->tp2d > 1)
      fprintf(out, "%s          (pp, sp=ring and tp2d are not applied by the passes yet: the memory "
                   "and communication shown leave them out)\n", pf);
    uint64_t ax[AX_COUNT];
    uint64_t total = plan_comm_bytes(m, ax);
    if (t->mesh && t->mesh->ndev > 1) {
      char c[32];
      report_commas(c, sizeof c, (int64_t)total);
      fprintf(out, "%scomm:     %s bytes sent per rank per step", pf, c);
      const char *sep = " (";
      for (int k = 0; k < AX_COUNT; k++)
        if (ax[k]) {
          report_commas(c, sizeof c, (int64_t)ax[k]);
          fprintf(out, "%s%s %s", sep, ir_axis_name(k), c);
          sep = ", ";
        }
      fprintf(out, "%s\n", *sep == ',' ? ")" : "");
    }
  }
}

/* One step of one rank, in issue order: the graph's communication for each
 * microbatch, then the step's (passes.h PlanColl). */
int plan_collectives(const Module *m, PlanColl **out) {
  const Graph *g = m->graph;
  *out = NULL;
  if (!g || !m->planned || !m->train.mesh || m->train.mesh->ndev <= 1) return 0;
  const Plan *p = &m->train.plan;
  int mb = p->mb > 0 ? p->mb : 1, n = 0, ncomm = 0;
  for (int i = 0; i < g->nodes.len; i++) ncomm += ir_comm_axis(g->nodes.data[i], NULL) >= 0;
  PlanColl *c = arena_alloc(sizeof(PlanColl) * (size_t)(ncomm * mb + g->params.len + 2 * g->buckets.len + 4));
  /* gradient buckets (passes/zero.c): stages 0 and 1 all-reduce or
   * reduce-scatter them in the last microbatch, 2 and 3 in every one */
  int stage = g->buckets.len ? p->zero : -1;
#define ADD(ax, o, b, cnt, w) c[n++] = (PlanColl){(ax), (o), (b), (cnt), (w)}
  for (int k = 0; k < mb; k++)
    for (int i = 0; i < g->nodes.len; i++) {
      const Node *nd = g->nodes.data[i];
      int ax = ir_comm_axis(nd, NULL);
      /* tp_copy and shard only move data locally; their adjoints are nodes too */
      if (ax < 0 || nd->op == OP_TP_COPY || nd->op == OP_SHARD) continue;
      bool last_only = nd->op == OP_GRAD_ALLREDUCE || (nd->op == OP_GRAD_REDUCE_SCATTER && nd->a.i[3]);
      if (last_only && k != mb - 1) continue;
      bool xent = nd->op == OP_CROSS_ENTROPY || nd->op == OP_CROSS_ENTROPY_BWD;
      ADD(ax, xent ? "vocab-parallel cross-entropy" : ir_ops[nd->op].name, ir_comm_bytes(nd), true,
          arena_printf("node %d %s over %s (%s), %s of microbatch %d", i, ir_ops[nd->op].name,
                       ir_axis_name(ax), nd->scope && *nd->scope ? nd->scope : "model",
                       i < g->nfwd ? "forward" : "backward", k + 1));
    }
  /* the step (codegen's sync_gradients, mean_loss, grad_norm, optimizer_step) */
  for (int i = 0; i < g->buckets.len && stage >= 1 && p->tp > 1; i++) {
    const Bucket *b = g->buckets.data[i];
    if (b->tp_partial)
      ADD(AX_TP, "all_reduce", rt_vol_allreduce((uint64_t)b->chunk * 4, p->tp), true,
          arena_printf("gradient shard of bucket %s over tp", b->name));
  }
  for (int i = 0; i < g->params.len && p->tp > 1 && stage < 1; i++) {
    const Value *v = g->params.data[i];
    if (v->grad && (v->grad_partial & (1u << AX_TP)))
      ADD(AX_TP, "all_reduce", rt_vol_allreduce((uint64_t)ir_numel(&v->shape) * 4, p->tp), true,
          arena_printf("gradient of %s over tp", v->name));
  }
  if (stage < 0)
    ADD(AX_DP, "all_reduce", rt_vol_allreduce((uint64_t)m->mem.grad_bytes, p->dp), true,
        "gradient all-reduce over dp");
  ADD(AX_DP, "sum (loss)", 8, false, "loss sum over dp");
  ADD(stage >= 1 ? AX_WORLD : AX_TP, "sum (norm)", 8, false, "gradient norm sum");
  for (int i = 0; i < g->buckets.len && (stage == 1 || stage == 2); i++) {
    const Bucket *b = g->buckets.data[i];
    ADD(AX_DP, "all_gather", rt_vol_allgather((uint64_t)b->numel * 4, p->dp), true,
        arena_printf("ZeRO-%d parameter all-gather of bucket %s over dp", stage, b->name));
  }
#undef ADD
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
