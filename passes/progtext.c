/* progtext.c — the per-rank programs as text (--emit=program): per
 * pipeline rank its arena, each chunk's forward and backward instructions
 * with their operands at arena offsets and what they communicate, the
 * schedule and the step.  Deterministic; golden tests diff it. */
#include <inttypes.h>
#include <string.h>

#include "passes.h"
#include "rankprog.h"

static const char *commas(int64_t n) {
  char b[64];
  report_commas(b, sizeof b, n);
  return arena_strdup(b);
}

/* "%12@F(1234)", "$tokens@IS(0)", a 16-bit value "%7@BF(64)" */
static const char *opnd(PRef r) {
  if (!r.v) return "_";
  bool half = r.v->dtype == DT_BF16 || r.v->dtype == DT_F16;
  return arena_printf("%s@%s%s(%" PRId64 ")", prog_vname(r.v),
                      r.v->dtype == DT_I32 ? "I" : half ? "BF" : "F", r.stash ? "S" : "", r.off);
}

/* n's statement; with refs, the instruction's operands at their offsets. */
static const char *stmt(const PInstr *in, const Node *n, bool refs) {
  char *s = arena_strdup("");
  for (int j = 0; j < n->nout; j++)
    s = arena_printf("%s%s%s", s, j ? ", " : "",
                     refs && in->out[j].v ? opnd(in->out[j]) : prog_vname(n->outs[j]));
  s = arena_printf("%s %s %s", s, n->bwd ? "+=" : "=", ir_ops[n->op].name);
  for (int k = 0; k < n->nin; k++)
    s = arena_printf("%s%s%s", s, k ? ", " : " ",
                     refs && in->in[k].v ? opnd(in->in[k]) : prog_vname(n->in[k]));
  return s;
}

static const char *comm_text(const RankProg *p, const PInstr *in) {
  const PComm *c = &in->comm;
  switch (c->kind) {
  case PC_COLL:
    return arena_printf("  [%s over %s, %s bytes%s]", c->op, ir_axis_name(c->axis),
                        commas((int64_t)c->bytes), c->last_mb ? ", last microbatch only" : "");
  case PC_RING:
    return arena_printf("  [ring over %s: %s bytes sent]", ir_axis_name(c->axis),
                        commas((int64_t)c->bytes));
  case PC_SUMMA:
    return arena_printf("  [summa on the %s x %s grid: %s bytes sent]", ir_axis_name(c->axis),
                        ir_axis_name(c->axis == AX_TPR ? AX_TPC : AX_TPR), commas((int64_t)c->bytes));
  case PC_P2P:
    return arena_printf("  [%s bytes, tag 2 (mb*%d + %d) + %d]", commas((int64_t)c->bytes),
                        p->nstages, in->lower_vs, in->grad);
  default:
    return "";
  }
}

static void instr(FILE *out, const RankProg *p, const PInstr *in, const char *label) {
  fprintf(out, "  %-10s", label);
  for (int s = 0; s < PROG_AHEAD_SLOTS; s++)
    if (in->wait >> s & 1) fprintf(out, "wait for gather slot %d; ", s);
  if (in->early_wait) fprintf(out, "wait for early gathers 0..%d; ", in->early_wait - 1);
  for (int z = 0; z < in->nzero; z++)
    fprintf(out, "zero %s (%s bytes); ", opnd(in->zero[z]), commas(in->zero_bytes[z]));
  switch (in->kind) {
  case PI_LOAD:
    fprintf(out, "load %s, %s%s\n", opnd(in->out[0]), opnd(in->out[1]),
            p->ring > 1 ? " (this rank's sequence columns)" : "");
    return;
  case PI_RECV:
    if (in->split)
      fprintf(out, "recv this tp rank's 1/%d of %s from stage %d%s, all_gathered over tp at the "
                   "post [%s bytes]\n",
              in->split, opnd(in->out[0]), in->peer_vs, comm_text(p, in),
              commas((int64_t)in->gather.bytes));
    else
      fprintf(out, "recv %s from stage %d%s\n", opnd(in->out[0]), in->peer_vs, comm_text(p, in));
    return;
  case PI_SEND:
    fprintf(out, "send %s%s to stage %d, non-blocking%s\n",
            in->split ? arena_printf("this tp rank's 1/%d of ", in->split) : "", opnd(in->in[0]),
            in->peer_vs, comm_text(p, in));
    return;
  case PI_POST:
    fprintf(out, "post the queued messages (the sends before, the receives above; cuda: %s), "
                 "then the receives' all_gathers\n",
            p->pipe_mpi ? "staged through the host by MPI" : "one NCCL group");
    return;
  case PI_SEED:
    if (in->received)
      fprintf(out, "seed %s: the gradient received above\n", opnd(in->out[0]));
    else
      fprintf(out, "fill %s = %.9g\n", opnd(in->out[0]), in->value);
    return;
  case PI_COPY:
    fprintf(out, "copy %s = %s (%s bytes)\n", opnd(in->out[0]), opnd(in->in[0]), commas(in->bytes));
    return;
  case PI_LOOP: {
    const PLoop *L = in->loop;
    fprintf(out, "loop %s", commas(L->n));
    if (L->inner) fprintf(out, " (rows of %s)", commas(L->inner));
    fprintf(out, ":");
    for (int k = 0; k < L->nout; k++)
      fprintf(out, "%s %s %s", k ? "," : "", opnd(L->out[k].r), L->op[k]);
    fprintf(out, " f(");
    for (int i = 0; i < L->nin; i++) fprintf(out, "%s%s%s", i ? ", " : "", opnd(L->in[i].r), L->in[i].bcast ? "[j]" : "");
    fprintf(out, ")  {");
    for (int i = 0; i < in->nnodes; i++) fprintf(out, "%s%s", i ? "; " : "", stmt(in, in->nodes[i], false));
    fprintf(out, "}\n");
    return;
  }
  case PI_BUCKET: {
    const Bucket *b = p->buckets->data[in->bucket];
    fprintf(out, "bucket %s: %s%s%s\n", b->name, stmt(in, in->n, true),
            in->req >= 0  ? arena_printf(", started without blocking (request %d)", in->req)
            : in->trail ? arena_printf(", trailing: beside the backward until the %s trailing one's", PROG_TRAILS == 2 ? "second" : "next")
                        : "",
            comm_text(p, in));
    return;
  }
  case PI_COLL:
  case PI_KERNEL: {
    fprintf(out, "%s", stmt(in, in->nodes[0], in->nodes[0] == in->n));
    for (int i = 1; i < in->nnodes; i++)
      fprintf(out, "; %s", stmt(in, in->nodes[i], in->nodes[i] == in->n));
    if (in->bias.v) fprintf(out, " (bias %s fused)", opnd(in->bias));
    if (in->dbias.v) fprintf(out, " (bias gradient %s summed)", opnd(in->dbias));
    if (in->assign) fprintf(out, " (writes: the first contribution)");
    if (in->scratch.v) fprintf(out, " scratch %s", opnd(in->scratch));
    if (in->ahead) fprintf(out, " (ahead: beside what follows, slot %d)", in->ahead - 1);
    if (in->early) fprintf(out, " (early %d: beside the forward)", in->early - 1);
    fprintf(out, "%s\n", comm_text(p, in));
    return;
  }
  }
}

static void block(FILE *out, const RankProg *p, int c, const PBlock *bl, const char *name) {
  for (int j = 0; j < bl->n; j++) {
    const char *label = p->nchunks > 1 ? arena_printf("c%d.%s.%d", c, name, j) : arena_printf("%s.%d", name, j);
    instr(out, p, &bl->ins[j], label);
  }
}

static void step_text(FILE *out, const RankProg *p) {
  static const char *const norm[] = {"sqrt of the sum of squares of the gradient range",
                                     "weighted sum of squares of every parameter's gradient",
                                     "the same on data rank 0 (dp 0, sp 0) only",
                                     "weighted sum of squares of this rank's ZeRO chunks"};
  fprintf(out, "step:\n");
  for (int j = 0; j < p->nstep; j++) {
    const PStep *s = &p->step[j];
    const char *label = arena_printf("step.%d", j);
    fprintf(out, "  %-10s", label);
    switch (s->kind) {
    case PS_WAIT:
      fprintf(out, "wait for the %d bucket reductions started in the backward\n", (int)s->count);
      break;
    case PS_ALLREDUCE:
      fprintf(out, "all_reduce over %s: %" PRId64 " elements at F(%" PRId64 ")  (%s)\n",
              ir_axis_name(s->axis), s->count, s->off, s->what);
      break;
    case PS_LOSS:
      fprintf(out, "loss: %s over %s / %g\n",
              s->mode == PL_LAST_STAGE ? "the last stage's (tp rank 0) summed" : "summed",
              ir_axis_name(s->axis), s->div);
      break;
    case PS_NORM:
      if (s->mode == PN_RANGE)
        fprintf(out, "norm: %s F(%" PRId64 ") x %" PRId64 "\n", norm[0], s->off, s->count);
      else
        fprintf(out, "norm: %s, summed over %s\n", norm[s->mode], ir_axis_name(s->axis));
      break;
    case PS_OPTIMIZER:
      fprintf(out, "optimizer: %s on %s\n", p->m->train.opt.kind ? p->m->train.opt.kind : "none",
              s->mode == PO_ZERO     ? "this rank's chunk of every bucket"
              : s->mode == PO_AF_SUMS ? "the tensors tp splits: Adafactor's partial row and column sums"
              : s->mode == PO_AF_SQUARES ? "the tensors tp splits: Adafactor's accumulators and partial sums of squares"
              : s->mode == PO_PLACED ? arena_printf("the Shampoo units (of %d: blocks and unblocked "
                                                    "parameters) its data rank owns, directions "
                                                    "into its segment at F(%" PRId64 ")",
                                                    p->nunits, p->step[j + 1].off)
                                     : "every parameter with a gradient");
      break;
    case PS_OPT_GATHER:
      fprintf(out, "all_gather over %s: %" PRId64 " elements per rank at F(%" PRId64 ")  (%s)\n",
              ir_axis_name(s->axis), s->count, s->off, s->what);
      break;
    case PS_OPT_APPLY:
      fprintf(out, "optimizer: every Shampoo direction applied to the parameters\n");
      break;
    case PS_ALLGATHER:
      fprintf(out, "all_gather over %s: %s\n", ir_axis_name(s->axis), s->what);
      break;
    }
  }
}

void prog_print(FILE *out, const Module *m) {
  if (!m->nrprog) {
    fprintf(out, "# no per-rank program: the model has no backward pass planned\n");
    return;
  }
  for (int r = 0; r < m->nrprog; r++) {
    const RankProg *p = m->rprog[r];
    const MemPlan *mp = p->mem;
    if (m->nrprog > 1) fprintf(out, "%s# pipeline rank %d of %d\n", r ? "\n" : "", r, p->pp);
    fprintf(out, "program %s: %d chunk%s, %d microbatch%s per step, %d instructions in the step\n",
            p->chunk[0].g->model, p->nchunks, p->nchunks == 1 ? "" : "s", p->mb,
            p->mb == 1 ? "" : "es", p->nstep);
    fprintf(out, "arena: %s bytes = persistent %s (params %s, grads %s, optimizer %s%s) + transient %s%s\n",
            commas(mp->arena_bytes), commas(mp->persistent_bytes), commas(mp->param_bytes),
            commas(mp->grad_bytes), commas(mp->optstate_bytes),
            mp->wcopy_bytes ? arena_printf(", %s %s", memplan_wcopy_label(mp), commas(mp->wcopy_bytes)) : "",
            commas(mp->transient_peak),
            mp->arena_bytes > mp->persistent_bytes + mp->transient_peak
                ? arena_printf(" + stash %s", commas(mp->arena_bytes - mp->persistent_bytes - mp->transient_peak))
                : "");
    for (int c = 0; c < p->nchunks; c++) {
      const PChunk *ch = &p->chunk[c];
      if (m->nstages > 1)
        fprintf(out, "chunk %d: stage %d, stash %d slot%s x %s bytes at %s\n", c, ch->vs, ch->slots,
                ch->slots == 1 ? "" : "s", commas(ch->stash_bytes), commas(ch->stash_off));
      if (ch->cast.n) {
        fprintf(out, "cast (once per step, before the first microbatch):\n");
        block(out, p, c, &ch->cast, "cast");
      }
      fprintf(out, "forward:\n");
      block(out, p, c, &ch->fwd, "fwd");
      if (ch->g->pipe_out) fprintf(out, "  (returns 0: the last stage has the loss)\n");
      else if (ch->loss_slot >= 0) fprintf(out, "  (returns the loss of cross-entropy slot %d)\n", ch->loss_slot);
      else fprintf(out, "  (returns %s)\n", opnd(ch->loss));
      fprintf(out, "backward:\n");
      block(out, p, c, &ch->bwd, "bwd");
    }
    fprintf(out, "schedule:");
    for (int a = 0; a < p->nsched; a++) {
      const PAct *s = &p->sched[a];
      fprintf(out, "%s%c%d", a && p->sched[a - 1].pair ? "+" : " ", s->fwd ? 'F' : 'B', s->mb);
      if (p->nchunks > 1) fprintf(out, ".%d", s->chunk);
    }
    fprintf(out, "\n");
    if (p->pairs)
      fprintf(out, "  (F+B: a pair; on cuda the forward's post takes the backward's receives too)\n");
    step_text(out, p);
  }
}
