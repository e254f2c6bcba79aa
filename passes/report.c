/* report.c — the plan summary printed by `--emit=plan` and placed at the
 * top of generated code. */
#include <string.h>

#include "cost.h"
#include "passes.h"
#include "rankprog.h"
#include "runtime/dist_formulas.h"
#include "runtime/rt_optim.h"
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

/* Where virtual stage s's program sends x scattered over tp (passes/program.c
 * pipe_split): ", scattered over tp: N bytes a rank, all-gathered there";
 * "" otherwise. */
static const char *scatter_text(const Module *m, int s, const Value *x) {
  int pp = m->train.plan.pp > 0 ? m->train.plan.pp : 1;
  if (s % pp >= m->nrprog || !m->rprog[s % pp] || s / pp >= m->rprog[s % pp]->nchunks) return "";
  const PBlock *b = &m->rprog[s % pp]->chunk[s / pp].fwd;
  for (int i = 0; i < b->n; i++)
    if (b->ins[i].kind == PI_SEND && b->ins[i].in[0].v == x && b->ins[i].split) {
      char by[32];
      report_commas(by, sizeof by, (int64_t)b->ins[i].comm.bytes);
      return arena_printf(", scattered over tp: %s bytes a rank, all-gathered there", by);
    }
  return "";
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

const char *report_size(double bytes) { return arena_strdup(human_bytes(bytes)); }

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
/* "bf16 weight copies 237.35 MiB, " (precision = bf16), or nothing. */
static const char *wcopy_text(const MemPlan *mp) {
  return mp->wcopy_bytes ? arena_printf("%s %s, ", memplan_wcopy_label(mp), human_bytes((double)mp->wcopy_bytes))
                         : "";
}

static void report_stages(FILE *out, Module *m, const char *pf) {
  const Plan *p = &m->train.plan;
  Graph *sel = m->graph;
  MemPlan keep = m->mem;
  fprintf(out, "%spipeline: %d stages, %s schedule, %d microbatches per step; activations of a "
               "microbatch wait in a stash slot from its forward to its backward; cuts %s\n",
          pf, m->nstages,
          p->schedule == SCHED_GPIPE ? "GPipe" : p->schedule == SCHED_1F1B ? "1F1B" : "interleaved",
          p->mb,
          m->stage_cuts_by ? arena_printf("balance %s", m->stage_cuts_by) : "as given (pp=N:a+b+...)");
  if (m->nrprog)
    fprintf(out, "%s  messages on cuda: %s\n", pf,
            m->rprog[0]->pipe_mpi
                ? "staged through the host by MPI (posted as NCCL groups, this schedule's could hang)"
            : m->rprog[0]->pairs
                ? "NCCL groups on the compute stream, a stage's sends with its next receives, a "
                  "forward's with those of the backward after it (Megatron's pairs; proven not to "
                  "hang)"
                : "NCCL groups on the compute stream, a stage's sends with its next receives (proven "
                  "not to hang)");
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
    fprintf(out, "%s  memory: %s bytes per rank (%s): params %s, grads %s, optimizer %s, %s"
                 "activations %s at node %d, stash %d slot%s x %s bytes%s\n",
            pf, a, human_bytes((double)mp->arena_bytes), human_bytes((double)mp->param_bytes),
            human_bytes((double)mp->grad_bytes), human_bytes((double)mp->optstate_bytes),
            wcopy_text(mp),
            human_bytes((double)mp->transient_peak), mp->peak_node, mp->slots,
            mp->slots == 1 ? "" : "s", st,
            /* ZeRO over interleaved chunks: one layout per rank (zero.c) */
            v > 1 && g->buckets.len ? " (params, grads, optimizer: its pipeline rank's ZeRO "
                                      "layout, for all its chunks)" : "");
    comm_line(out, m, pf, v > 1 ? "  comm:   (its pipeline rank's) " : "  comm:   ");
    if (s < m->nstages - 1 && m->stage_cut[s] && g->nsend == 1) {
      /* what crosses the cut: the activation forward, its gradient backward */
      const Value *x = g->send_act[0];
      char sh[256], by[32];
      ir_shape_str(g, x, sh, sizeof sh);
      report_commas(by, sizeof by, ir_numel(&x->shape) * ir_dtype_size(x->dtype));
      fprintf(out, "%scut %d:    %s; the message per microbatch: %%%d %s (%s bytes) to stage %d%s, "
                   "its gradient back\n",
              pf, s, m->stage_cut[s], x->id, sh, by, s + 1, scatter_text(m, s, x));
    } else if (s < m->nstages - 1 && m->stage_cut[s] && g->nsend > 1) {
      /* several tensors cross: one message each, in this order */
      int64_t all = 0;
      for (int i = 0; i < g->nsend; i++)
        all += ir_numel(&g->send_act[i]->shape) * ir_dtype_size(g->send_act[i]->dtype);
      char by[32];
      report_commas(by, sizeof by, all);
      fprintf(out, "%scut %d:    %s; %d messages per microbatch (%s bytes) to stage %d, their "
                   "gradients back:\n",
              pf, s, m->stage_cut[s], g->nsend, by, s + 1);
      for (int i = 0; i < g->nsend; i++) {
        const Value *x = g->send_act[i];
        char sh[256], b1[32];
        ir_shape_str(g, x, sh, sizeof sh);
        report_commas(b1, sizeof b1, ir_numel(&x->shape) * ir_dtype_size(x->dtype));
        const char *what = x->def ? ir_ops[x->def->op].name : "?";
        fprintf(out, "%s             %%%d %s (%s bytes), %s's output%s\n", pf, x->id, sh, b1, what,
                scatter_text(m, s, x));
      }
    }
  }
  /* interleaved: a rank holds its chunks side by side with one transient
   * region (memplan's layout of the rank's arena) */
  for (int r = 0; m->nstages > p->pp && r < p->pp; r++) {
    const MemPlan *rm = &m->rank_mem[r];
    int64_t stash = rm->arena_bytes - rm->persistent_bytes - rm->transient_peak;
    char a[32], b[32], c[32], d[32];
    report_commas(a, sizeof a, rm->arena_bytes);
    report_commas(b, sizeof b, rm->persistent_bytes);
    report_commas(c, sizeof c, rm->transient_peak);
    report_commas(d, sizeof d, stash);
    fprintf(out, "%srank %d:   memory %s bytes per rank (%s): persistent %s + transient %s (the "
                 "largest chunk's) + stash slots %s\n",
            pf, r, a, human_bytes((double)rm->arena_bytes), b, c, d);
  }
  m->graph = sel;
  m->mem = keep;
}

static void recompute_line(FILE *out, const Module *m, const char *pf);
static void shampoo_lines(FILE *out, const Module *m, const char *pf);
static void zero_owner_lines(FILE *out, const Module *m, const RankProg *p, const char *st,
                             const char *pf);
/* When a rank computes its due roots (runtime/train.c). */
static const char *roots_when(const Module *m) {
  if (opt_root_worker(m))
    return "from the step's start by a root worker thread at idle priority (the pipeline's "
           "bubbles), the rest at the start of the optimizer step";
  if (m->cuda && m->train.opt.root == RT_ROOT_EIGH)
    return "from the step's start on host threads beside the GPU's forward and backward "
           "(root = eigh: LAPACK on the host), the rest at the start of the optimizer step";
  return m->nstages > 1 ? "at the start of the optimizer step (while pipeline receives wait where "
                          "their messages are staged through the host)"
                        : "at the start of the optimizer step";
}

static void phase_lines(FILE *out, const Module *m, const RankProg *p, const OptUnit *u, int n,
                        int nd, const char *pf);

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
  /* ZeRO-2/3 over several microbatches: a gradient reduction in each */
  int zg = m->nrprog > 0 && m->rprog[0] ? m->rprog[0]->zgroup : 0;
  bool trails = zero_rs_trails(m);
  if (p->zero >= 2 && p->mb > 1 && zg > 1)
    fprintf(out, "%szero:     %d: each rank keeps its 1/%d of the gradients, so every one of the %d "
                 "microbatches' backward reduce-scatters them (%d reductions a step; zero=1 reduces "
                 "once and keeps whole gradients)%s\n",
            pf, p->zero, zg, p->mb, p->mb,
            trails ? "; on the GPU each beside the next layers' backward (trailing)" : "");
  if (zg > 1 && zero_shards_masters(m))
    fprintf(out, "%szero:     %d under bf16: each rank stores its 1/%d of the fp32 masters; at its start "
                 "the step gathers what it reads whole (the matmul weights as bf16 copies, "
                 "cast from the shards; the other tensors in fp32; on the GPU beside the first "
                 "forward, each layer waiting for its own bucket), and nothing after the update\n",
            pf, p->zero, zg);
  const Optimizer *o = &t->opt;
  if (o->kind) {
    if (!strcmp(o->kind, "adamw"))
      fprintf(out, "%soptim:    adamw lr=%g betas=(%g, %g) eps=%g weight_decay=%g warmup=%d %s min_lr=%g clip=%g\n",
              pf, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->warmup, o->schedule,
              o->lr * o->min_lr_ratio, o->clip);
    else if (!strcmp(o->kind, "shampoo"))
      fprintf(out, "%soptim:    shampoo lr=%g betas=(%g, %g) epsilon=%g weight_decay=%g block=%d "
                   "precondition_every=%d start_preconditioning=%d graft=%s root=%s graft_eps=%g "
                   "spread=%s stagger=%s warmup=%d %s min_lr=%g clip=%g\n",
              pf, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->block,
              o->precondition_every, o->start_preconditioning,
              o->graft == 0 ? "adam" : o->graft == 1 ? "adagrad" : "sgd",
              o->root == 0 ? "eigh" : "newton", o->graft_eps, o->no_spread ? "false" : "true",
              o->no_stagger ? "false" : "true", o->warmup, o->schedule,
              o->lr * o->min_lr_ratio, o->clip);
    else if (!strcmp(o->kind, "adafactor"))
      fprintf(out, "%soptim:    adafactor lr=%g beta1=%g decay_rate=%g eps=%g clip_threshold=%g "
                   "weight_decay=%g warmup=%d %s min_lr=%g clip=%g\n",
              pf, o->lr, o->beta1, o->decay_rate, o->eps, o->clip_threshold, o->weight_decay,
              o->warmup, o->schedule, o->lr * o->min_lr_ratio, o->clip);
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
  if (m->fwd_flops > 0) {
    PlanFlops fl;
    plan_flops(m, &fl);
    int mb = p->mb ? p->mb : 1;
    fprintf(out, "%sflops:    model %.4g per step = 3 x %.4g forward per microbatch (%lld %s) x "
                 "%d microbatch%s (dp %d x mb %d)\n",
            pf, fl.model, m->fwd_flops, (long long)m->fwd_tokens, t->seq ? "tokens" : "examples",
            p->dp * mb, p->dp * mb == 1 ? "" : "es", p->dp, mb);
    if (fl.hw > 0)
      fprintf(out, "%s          hardware %.4g per step, %.4g on the busiest rank (as run: forward, "
                   "backward, recompute)%s\n",
              pf, fl.hw, fl.hw_rank,
              fl.peak > 0 ? arena_printf("; device peak %.4g FLOP/s (%s, %s)", fl.peak,
                                         me->device->name,
                                         t->precision == DT_F32    ? "fp32"
                                         : t->precision == DT_BF16 ? "bf16"
                                                                   : "fp16")
                          : "");
  }
  if (m->planned && p->recompute != RECOMPUTE_NONE) recompute_line(out, m, pf);
  fprintf(out, "%sgraph:    %d nodes (%d forward), %d values\n", pf, g->nodes.len,
          g->nfwd ? g->nfwd : g->nodes.len, g->values.len);
  if (m->planned && m->nstages > 1) {
    report_stages(out, (Module *)m, pf);
  } else if (m->planned) {
    const MemPlan *mp = &m->mem;
    char a[32];
    report_commas(a, sizeof a, mp->arena_bytes);
    fprintf(out, "%smemory:   %s bytes per rank (%s): params %s, grads %s, optimizer %s, %s"
                 "activations+inputs %s at node %d\n",
            pf, a, human_bytes((double)mp->arena_bytes), human_bytes((double)mp->param_bytes),
            human_bytes((double)mp->grad_bytes), human_bytes((double)mp->optstate_bytes),
            wcopy_text(mp),
            human_bytes((double)mp->transient_peak), mp->peak_node);
    if (t->mesh && t->mesh->ndev > 1) comm_line(out, m, pf, "comm:     ");
  }
  shampoo_lines(out, m, pf);
  for (int r = 0; o->kind && !strcmp(o->kind, "adafactor") && r < m->nrprog; r++)
    if (m->rprog[r]->zero >= 1)
      zero_owner_lines(out, m, m->rprog[r], m->nrprog > 1 ? arena_printf("stage %d: ", r) : "", pf);
}

/* fl root FLOPs as time: eigh at the catalog's LAPACK rate on a host core
 * (the cost model's, without a profile; a GPU rank's eigh runs there too),
 * Newton's GEMMs at the device's fp32 peak (a bound) */
static const char *root_time(const Optimizer *o, double fl, double peak) {
  if (o->root == RT_ROOT_EIGH)
    return arena_printf("%.3g ms at the catalog's eigh rate of a host core, %.3g GFLOP/s",
                        fl / COST_EIGH_FLOPS * 1e3, COST_EIGH_FLOPS / 1e9);
  return arena_printf("%.3g ms at the device's fp32 peak", peak > 0 ? fl / peak * 1e3 : 0.0);
}

/* ZeRO with Shampoo or Adafactor (passes/zero.c owner_layout): per data
 * rank, the tensors its chunks hold whole and it alone updates, their
 * blocks, state and root work, and the padding the layout costs. */
static void zero_owner_lines(FILE *out, const Module *m, const RankProg *p, const char *st,
                             const char *pf) {
  const Optimizer *o = &m->train.opt;
  bool sh = !strcmp(o->kind, "shampoo");
  int nd = optplace_ranks(m);
  double peak = m->train.mesh ? m->train.mesh->peak_fp32 : 0;
  const Value **vs = arena_alloc(sizeof *vs * (size_t)(p->nparam + 1));
  int *own = arena_alloc(sizeof(int) * (size_t)(p->nparam + 1));
  int64_t used = 0, padded = 0;
  for (int k = 0; k < p->buckets->len; k++) {
    const Bucket *b = p->buckets->data[k];
    padded += b->numel;
    for (int j = 0; j < b->params.len; j++) used += ir_numel(&((const Value *)b->params.data[j])->shape);
  }
  for (int i = 0; i < p->nparam; i++) {
    vs[i] = p->param[i].v;
    own[i] = -1;
    for (int k = 0; k < p->buckets->len; k++) {
      const Bucket *b = p->buckets->data[k];
      for (int j = 0; b->owner && j < b->params.len; j++)
        if (b->params.data[j] == vs[i]) own[i] = b->owner[j];
    }
  }
  OptUnit *shared = NULL;
  int64_t seg;
  int n = sh ? optplace_units(m, vs, p->nparam, 1, &shared, &seg) : 0;
  /* (a copy: optplace_units' are shared) */
  OptUnit *u = arena_alloc(sizeof *u * (size_t)(n + 1));
  if (n) memcpy(u, shared, sizeof *u * (size_t)n);
  for (int k = 0; k < n; k++) u[k].owner = own[u[k].param] < 0 ? 0 : own[u[k].param];
  fprintf(out, "%s%s:%s%szero=%d: each tensor lies whole in one data rank's chunk, which "
               "updates it and alone keeps its state (no collective beyond ZeRO's); the chunks "
               "are padded to the fullest: %lld elements for %lld (+%.1f%%):\n",
          pf, o->kind, sh ? "  " : " ", st, p->zero, (long long)padded, (long long)used,
          used ? 100.0 * (double)(padded - used) / (double)used : 0.0);
  for (int d = 0; d < nd; d++) {
    int nt = 0, nb = 0;
    int64_t elems = 0, state = 0;
    double fl = 0;
    for (int i = 0; i < p->nparam; i++)
      if (own[i] == d && vs[i]->grad) {
        nt++;
        elems += ir_numel(&vs[i]->shape);
        state += rt_optim_align64(opt_state_elems(o, &vs[i]->shape) * 4);
      }
    for (int k = 0; k < n; k++)
      if (u[k].owner == d && u[k].blocked) nb++, fl += optplace_root_flops(o, &u[k]);
    fprintf(out, "%s            data rank %d: %d tensors (%lld elements), state %s", pf, d, nt,
            (long long)elems, human_bytes((double)state));
    if (sh)
      fprintf(out, ", %d blocks, roots %.3g GFLOP (%s)", nb, fl / 1e9, root_time(o, fl, peak));
    fprintf(out, "\n");
  }
  if (sh) phase_lines(out, m, p, u, n, nd, pf);
}

/* Shampoo's placement (passes/optplace.c): per pipeline rank, the units
 * each data rank computes and their predicted root work and time. */
static void shampoo_lines(FILE *out, const Module *m, const char *pf) {
  const Optimizer *o = &m->train.opt;
  if (!o->kind || strcmp(o->kind, "shampoo") || !m->nrprog) return;
  double peak = m->train.mesh ? m->train.mesh->peak_fp32 : 0;
  const Plan *pl = &m->train.plan;
  for (int r = 0; r < m->nrprog; r++) {
    const RankProg *p = m->rprog[r];
    const char *st = m->nrprog > 1 ? arena_printf("stage %d: ", r) : "";
    if (pl->tp > 1 || pl->tp2d > 1) {
      /* a block lives where its shard lives (optplace_check_tp) */
      int64_t lb = 0, gb = 0, rb = 0;
      for (int i = 0; i < p->nparam; i++) {
        const Value *v = p->param[i].v;
        int64_t l[2], g[2];
        if (!v->grad || v->shape.ndim != 2) continue;
        for (int d = 0; d < 2; d++) l[d] = v->shape.d[d].n, g[d] = v->gshape.d[d].n;
        if (!rt_shampoo_preconditioned(2, g)) continue;
        int64_t nl = rt_shampoo_nblocks(l[0], o->block) * rt_shampoo_nblocks(l[1], o->block);
        int64_t ng = rt_shampoo_nblocks(g[0], o->block) * rt_shampoo_nblocks(g[1], o->block);
        bool split = v->shard.axis[0] >= 0 || v->shard.axis[1] >= 0;
        if (split) lb += nl, gb += ng;
        else rb += nl;
      }
      fprintf(out, "%sshampoo:  %s%s: each tp rank runs the blocks of its own shards, no "
                   "communication: %lld of the split parameters' %lld blocks per tp rank, and all "
                   "%lld blocks of the replicated ones\n",
              pf, st, pl->tp > 1 ? arena_printf("tp=%d", pl->tp)
                                 : arena_printf("tp2d=%dx%d", pl->tp2d, pl->tp2d),
              (long long)lb, (long long)gb, (long long)rb);
    }
    if (p->zero >= 1) {
      zero_owner_lines(out, m, p, st, pf);
      continue;
    }
    if (!p->nunits) {
      double fl = 0;
      int nb = 0;
      OptUnit *u;
      int64_t seg;
      const Value **vs = arena_alloc(sizeof *vs * (size_t)(p->nparam + 1));
      for (int i = 0; i < p->nparam; i++) vs[i] = p->param[i].v;
      int n = optplace_units(m, vs, p->nparam, 1, &u, &seg);
      for (int k = 0; k < n; k++) fl += optplace_root_flops(o, &u[k]), nb += u[k].blocked;
      fprintf(out, "%sshampoo:  %severy rank computes all %d blocks of its parameters: roots "
                   "%.3g GFLOP per recomputation (%s), every %d steps from step %d, %s\n",
              pf, st, nb, fl / 1e9, root_time(o, fl, peak), o->precondition_every,
              o->start_preconditioning, roots_when(m));
      phase_lines(out, m, p, u, n, 1, pf);
      continue;
    }
    double *fl = arena_alloc(sizeof(double) * (size_t)p->uranks), total = 0;
    int *nb = arena_alloc(sizeof(int) * (size_t)p->uranks);
    for (int k = 0; k < p->nunits; k++) {
      double f = optplace_root_flops(o, &p->units[k]);
      fl[p->units[k].owner] += f;
      total += f;
      nb[p->units[k].owner]++;
    }
    double worst = 0;
    fprintf(out, "%sshampoo:  %s%d units (blocks and unblocked parameters) over %d data ranks by "
                 "LPT on predicted cost:\n", pf, st, p->nunits, p->uranks);
    for (int d = 0; d < p->uranks; d++) {
      if (fl[d] > worst) worst = fl[d];
      fprintf(out, "%s            data rank %d: %d units, roots %.3g GFLOP (%s)\n", pf, d, nb[d],
              fl[d] / 1e9, root_time(o, fl[d], peak));
    }
    fprintf(out, "%s            the slowest data rank's roots: %.3g of every rank computing every "
                 "root (%.3g GFLOP); roots every %d steps from step %d, %s; directions "
                 "all-gathered over the data ranks (%lld elements per rank)\n",
            pf, total > 0 ? worst / total : 0.0, total / 1e9, o->precondition_every,
            o->start_preconditioning, roots_when(m), (long long)p->useg);
    phase_lines(out, m, p, p->units, p->nunits, p->uranks, pf);
  }
}

/* Shampoo stagger = true: per data rank, the blocks and the predicted root
 * GFLOP of each phase (the steps of precondition_every), and the most
 * loaded phase over the mean. */
static void phase_lines(FILE *out, const Module *m, const RankProg *p, const OptUnit *u, int n,
                        int nd, const char *pf) {
  const Optimizer *o = &m->train.opt;
  if (!p->nphase) return;
  /* the phases that hold a block (precondition_every may be far larger
   * than the model's blocks); a long list is summarised */
  int k = optplace_phases_used(u, n);
  double *fl = arena_alloc(sizeof(double) * (size_t)nd * (size_t)k);
  int *nb = arena_alloc(sizeof(int) * (size_t)nd * (size_t)k);
  for (int i = 0; i < n; i++)
    if (u[i].phase >= 0) {
      fl[(size_t)u[i].owner * k + u[i].phase] += optplace_root_flops(o, &u[i]);
      nb[(size_t)u[i].owner * k + u[i].phase]++;
    }
  const int every = o->precondition_every, list = k <= 32;
  fprintf(out, "%s            roots staggered (stagger = true): every block's at step %d, then a block's "
               "at the steps %d + phase + j·%d (phase by LPT over the model's blocks); ",
          pf, o->start_preconditioning, o->start_preconditioning, every);
  if (k < every)
    fprintf(out, "phases %d..%d hold no block; ", k, every - 1);
  fprintf(out, list ? "per phase 0..%d:\n" : "over phases 0..%d:\n", k - 1);
  for (int d = 0; d < nd; d++) {
    double sum = 0, worst = 0, least = -1;
    int bmin = -1, bmax = 0;
    fprintf(out, "%s            %s blocks", pf, nd > 1 ? arena_printf("data rank %d:", d) : "phases:");
    for (int ph = 0; ph < k; ph++) {
      int b = nb[(size_t)d * k + ph];
      if (list) fprintf(out, " %d", b);
      if (bmin < 0 || b < bmin) bmin = b;
      if (b > bmax) bmax = b;
    }
    if (!list) fprintf(out, " %d to %d a phase", bmin, bmax);
    fprintf(out, "; root GFLOP");
    for (int ph = 0; ph < k; ph++) {
      double f = fl[(size_t)d * k + ph];
      if (list) fprintf(out, " %.3g", f / 1e9);
      sum += f;
      if (f > worst) worst = f;
      if (least < 0 || f < least) least = f;
    }
    if (!list) fprintf(out, " %.3g to %.3g a phase", least / 1e9, worst / 1e9);
    fprintf(out, "; most loaded phase %.2f of the mean\n", sum > 0 ? worst / (sum / k) : 0.0);
  }
}

/* What recompute (passes/recompute.c) runs again on one pipeline rank (the
 * model without a pipeline), per microbatch: copied nodes, their FLOPs, and
 * the bytes they make instead of holding them. */
static void recompute_cost(const Module *m, int r, int *nodes, double *flops, int64_t *bytes) {
  *nodes = 0, *flops = 0, *bytes = 0;
  int pp = m->nstages > 1 ? m->train.plan.pp : 1;
  for (int s = r; s < (m->nstages > 1 ? m->nstages : 1); s += pp) {
    const Graph *g = m->nstages > 1 ? m->stages[s] : m->graph;
    for (int i = 0; i < g->nodes.len; i++) {
      const Node *n = g->nodes.data[i];
      if (!n->remat) continue;
      ++*nodes;
      *flops += ir_node_flops(n);
      for (int j = 0; j < n->nout; j++)
        if (n->outs[j] && !n->outs[j]->alias)
          *bytes += ir_numel(&n->outs[j]->shape) * ir_dtype_size(n->outs[j]->dtype);
    }
  }
}

static void recompute_line(FILE *out, const Module *m, const char *pf) {
  const Plan *p = &m->train.plan;
  int pp = m->nstages > 1 ? p->pp : 1, mb = p->mb ? p->mb : 1;
  for (int r = 0; r < pp; r++) {
    int nodes;
    double flops, all = 0;
    int64_t bytes;
    recompute_cost(m, r, &nodes, &flops, &bytes);
    if (m->nstages > 1)
      for (int s = r; s < m->nstages; s += pp) all += ir_flops(m->stages[s], false);
    else
      all = ir_flops(m->graph, false);
    char b[32];
    report_commas(b, sizeof b, bytes);
    fprintf(out, "%srecompute: %s%s: %d nodes run again per microbatch (%s bytes, %s, of outputs); "
                 "+%.4g FLOPs per step on a rank (%.1f%% of its %.4g)\n",
            pf, plan_recompute_name(plan_recompute_at(p, r)), pp > 1 ? arena_printf(" (pipeline rank %d)", r) : "",
            nodes, b, human_bytes((double)bytes), flops * mb, all > 0 ? 100.0 * flops / all : 0.0,
            all * mb);
    for (int s = r; s < (m->nstages > 1 ? m->nstages : 1); s += pp) {
      const Graph *g = m->nstages > 1 ? m->stages[s] : m->graph;
      if (g->recompute_desc)
        fprintf(out, "%s           auto%s: %s\n", pf,
                m->nstages > pp ? arena_printf(" (chunk %d)", s / pp) : "", g->recompute_desc);
    }
  }
}

void plan_flops(const Module *m, PlanFlops *f) {
  const TrainCfg *t = &m->train;
  const Plan *p = &t->plan;
  memset(f, 0, sizeof *f);
  int mb = p->mb ? p->mb : 1, ndev = t->mesh ? t->mesh->ndev : 1;
  f->model = 3 * m->fwd_flops * mb * p->dp;
  if (t->mesh)
    f->peak = t->precision == DT_F32 ? t->mesh->peak_fp32 : t->mesh->peak_bf16; /* the mesh block's figure, else the device's */
  if (!m->planned) return;
  /* every node of a pipeline rank's chunks (the one graph without stages),
   * once per microbatch; the ranks of a pipeline rank run the same */
  int pp = m->nstages > 1 ? p->pp : 1;
  for (int r = 0; r < pp; r++) {
    double fr = 0;
    if (m->nstages > 1)
      for (int s = r; s < m->nstages; s += pp) fr += ir_flops(m->stages[s], false);
    else
      fr = ir_flops(m->graph, false);
    fr *= mb;
    f->hw += fr * (ndev / pp);
    if (fr > f->hw_rank) f->hw_rank = fr;
  }
}

uint64_t plan_comm_bytes(const Module *m, uint64_t *per_axis) {
  int r = m->nstages > 1 ? m->graph->stage % m->train.plan.pp : 0;
  if (r >= m->nrprog) {
    if (per_axis) memset(per_axis, 0, sizeof(uint64_t) * AX_COUNT);
    return 0;
  }
  return prog_comm_bytes(m->rprog[r], per_axis);
}
