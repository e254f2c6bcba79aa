/* precision.c — what `precision = bf16` (or fp16) stores in 16 bits.
 *
 * Mixed precision as runtime/cuda/rtc_bf16.h states it: activations and
 * their gradients in 16 bits, computed in fp32 by every kernel; parameters
 * (the fp32 masters), their gradients, optimizer state, the statistics
 * kernels keep for their backward (layernorm mean and rstd, rmsnorm rstd,
 * attention's log-sum-exp) and the loss in fp32.  The memory plan then
 * places each value at its own width, so planned bytes stay exact.
 *
 * Per stage graph, after autodiff and recompute (recompute=auto plans its
 * trials through precision_apply too), before zero and memplan:
 *   1. forward values, in program order: a kernel's data outputs are 16-bit,
 *      its statistics fp32; an elementwise op, a view or a collective gives
 *      its operands' width (16-bit if any float operand is), so a value made
 *      of parameters and float inputs alone stays fp32; parameters, inputs
 *      and the loss stay fp32; the activation a pipeline stage receives is
 *      16-bit.
 *   2. a gradient has its forward value's width (a parameter's: fp32).
 *   3. backward temporaries (a collective's adjoint) the width of their
 *      operand.
 *   4. where a kernel reads a data operand in fp32, a 16-bit copy:
 *      - of a parameter the rank holds for the whole step (a matmul's
 *        weight): one persistent copy per parameter, made by an OP_CAST
 *        node in g->wcasts rather than the schedule; the per-rank program
 *        runs those once per step, before the first microbatch and after
 *        the last step's update (passes/program.c, the chunk's cast block),
 *        and memplan places the copies after the optimizer state.  Every
 *        microbatch's forward and backward (and a recompute) read the same
 *        copy, as llm.c and Megatron keep one bf16 weight per step, where a
 *        cast per reader read every fp32 weight and wrote its copy 2 x mb
 *        times a step.  The values are the same: the masters do not change
 *        between the microbatches, and the cast rounds them alike.
 *      - of anything else (a float input, a view or shard of a parameter,
 *        and under ZeRO-3 every parameter: gathered into a transient copy
 *        of its bucket before its forward and again before its backward,
 *        never whole for the step, so there is nothing to cast once), a
 *        cast node right before the kernel (transient: freed after it).
 *      Where an accumulation (acc, shard_bwd) adds one width into the
 *      other, its source is cast to its destination's.
 *   5. an LM head whose 16-bit rows are not 16-byte aligned gets a copy
 *      with padded rows (pad_heads below; SHARDC_HEAD_PAD=0 turns it off).
 * Node ids stay schedule positions (dropout_bwd's forward index follows).
 */
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "passes.h"

static bool is16(DType t) { return t == DT_BF16 || t == DT_F16; }
static bool isfloat(DType t) { return t == DT_F32 || is16(t); }

/* Whether output k of a kernel node is a statistic (fp32). */
static bool stat_out(const Node *n, int k) {
  switch (n->op) {
  case OP_LAYERNORM:
  case OP_RMSNORM:
  case OP_ATTENTION: return k > 0;
  case OP_CROSS_ENTROPY: return true;
  default: return false;
  }
}

/* Whether operand k of n is read by the kernel as 16-bit data (a cast makes
 * it so when it is fp32).  Elementwise loops read either width. */
static bool data_operand(const Node *n, int k) {
  switch (n->op) {
  case OP_MATMUL: return k <= 1;
  case OP_MATMUL_BWD: return k <= 2;
  case OP_LAYERNORM:
  case OP_RMSNORM:
  case OP_SOFTMAX:
  case OP_DROPOUT:
  case OP_SLICE:
  case OP_ROPE:
  case OP_CROSS_ENTROPY:
  case OP_GATHER_BWD:
  case OP_DROPOUT_BWD:
  case OP_SLICE_BWD:
  case OP_ROPE_BWD: return k == 0;
  case OP_LAYERNORM_BWD:
  case OP_RMSNORM_BWD:
  case OP_SOFTMAX_BWD: return k <= 1;
  case OP_ATTENTION: return k <= 2;
  case OP_ATTENTION_BWD: return k <= 4;
  case OP_CROSS_ENTROPY_BWD: return k == 1;
  default: return false;
  }
}

/* Ops whose outputs have their operands' width. */
static bool follows_operands(const Node *n) {
  return fuse_is_loop_op(n->op) || ir_ops[n->op].cls == OPC_VIEW || ir_is_comm(n->op) ||
         n->op == OP_TP_COPY;
}

static const Value *root(const Value *v) {
  while (v->alias) v = v->alias;
  return v;
}

/* A backward kernel writes the gradients of its data operands in 16 bits:
 * one of a value computed from parameters and float inputs alone (fp32)
 * has no launcher. */
static int check_grads(const Graph *g, DType t) {
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    if (!n->bwd || fuse_is_loop_op(n->op) || ir_ops[n->op].cls == OPC_B_ACC) continue;
    if (ir_ops[n->op].cls == OPC_B_BINARY || ir_ops[n->op].cls == OPC_B_UNARY ||
        ir_ops[n->op].cls == OPC_B_MAP)
      continue; /* loops (and the unary kernels' fp32 launchers) */
    for (int k = 0; k < n->nout; k++) {
      const Value *o = n->outs[k];
      if (!o || o->dtype != DT_F32 || !o->grad_of) continue;
      const Value *f = root(o->grad_of);
      /* (a parameter all-gathered whole: tp2d's head table, its fp32
       * gradient reduce-scattered back, passes/shard2d.c) */
      while (f->def && f->def->op == OP_ALLGATHER_G && f->def->in[0]->role == ROLE_PARAM)
        f = root(f->def->in[0]);
      if (f->role == ROLE_PARAM) continue;
      diag_error(n->loc,
                 "precision = %s: the gradient of a value computed from parameters alone flows "
                 "through %s, which has no mixed-precision kernel for it; compute it in the "
                 "model's activations, or train with precision = fp32",
                 ir_dtype_name(t), ir_ops[n->op].name);
      return -1;
    }
  }
  return 0;
}

typedef struct Cast {
  int before;   /* node index it goes before */
  Node *n;
  const Node *reader;
} Cast;

static int by_before(const void *a, const void *b) {
  const Cast *x = a, *y = b;
  return x->before != y->before ? (x->before < y->before ? -1 : 1) : (x->n->id < y->n->id ? -1 : 1);
}

/* 5. A 16-bit LM head whose rows are not 16-byte aligned (GPT-2's 50257
 *    rows of 2 bytes): cuBLAS runs GEMMs over such rows at about a sixth of
 *    its rate (the H200 measured 103 TFLOP/s at 50257 against 760 at
 *    50304: bench/results/gpu_check-2026-12-04.txt, 26% of GPT-2's step).
 *    Where a parameter's persistent copy is read only by matmuls whose
 *    logits only a cross-entropy reads (and by their backward), the copy
 *    gets VOCAB_PAD-aligned rows: the step's cast writes the master's rows
 *    and zeroes the rest (passes/program.c), the logits and their gradient
 *    get the padded width, the cross-entropy takes `classes` = the real
 *    rows (the padded columns' logits are 0 and get no gradient), the
 *    backward's dx runs dense over the padded rows (zero weights, zero
 *    gradients) and its dW reads the first rows of dlogits into the
 *    master's gradient, which keeps its shape: buckets, ZeRO shards, the
 *    optimizer and checkpoints are untouched.  The model's numbers are
 *    those of the unpadded head.  Under ZeRO-3 (no persistent copy) the
 *    casts before each reader of such a head are padded alike (then not a
 *    16-bit gather's view: passes/zero.c read_as16). */
#define VOCAB_PAD 64

/* the logits operand of a cross-entropy that is not vocab-parallel */
static bool logits_ok(const Node *n, int k, const void *arg) {
  (void)arg;
  if (n->op == OP_CROSS_ENTROPY) return k == 0 && !n->a.i[1];
  if (n->op == OP_CROSS_ENTROPY_BWD) return k == 1 && !n->a.i[1];
  return false;
}

/* Every reader of v among g's nodes satisfies ok(reader, k); v is read. */
static bool readers_all(const Graph *g, const Value *v, bool (*ok)(const Node *, int, const void *),
                        const void *arg) {
  int seen = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] == v || root(n->in[k]) == v) {
        if (n->in[k] != v || !ok(n, k, arg)) return false;
        seen++;
      }
  }
  return seen > 0;
}

/* Whether v is a 16-bit copy of parameter p: its persistent copy (wcasts)
 * or a cast of it before one reader (under ZeRO-3). */
static bool copy_of(const Value *v, const Value *p) {
  return v && v->def && v->def->op == OP_CAST && v->def->in[0] == p;
}

static bool dlogits_ok(const Node *n, int k, const void *p) {
  return n->op == OP_MATMUL_BWD && k == 0 && copy_of(n->in[2], p);
}

static bool head_ok(const Node *n, int k, const void *w) {
  (void)w;
  return (n->op == OP_MATMUL && k == 1) || (n->op == OP_MATMUL_BWD && k == 2);
}

static void pad_last(Value *v, int64_t n) {
  v->shape.d[v->shape.ndim - 1] = (Dim){n, -1};
}

/* Pads the 16-bit copies cp[0..nc) of parameter p (its persistent copy, or
 * its casts before each reader) where every one is read only as an LM
 * head's weight (above); returns whether it did. */
static bool pad_copies(Graph *g, DType t, const Value *p, Node **cp, int nc) {
  int64_t elt = ir_dtype_size(t);
  if (p->shape.ndim != 2 || nc < 1) return false;
  int64_t V = p->shape.d[0].n, C = p->shape.d[1].n;
  if (V * elt % 16 == 0 || C * elt % 16 || V < VOCAB_PAD) return false;
  for (int c = 0; c < nc; c++)
    if (!readers_all(g, cp[c]->out, head_ok, NULL)) return false;
  /* each matmul's logits read only by cross-entropies; their gradient
   * only by a backward of this head, and written only by the backward of
   * those cross-entropies */
  bool ok = true;
  for (int i = 0; i < g->nodes.len && ok; i++) {
    const Node *n = g->nodes.data[i];
    if (n->op == OP_MATMUL && copy_of(n->in[1], p)) {
      const Value *o = n->out;
      ok = o->alias == NULL && readers_all(g, o, logits_ok, NULL);
      for (int s = 0; s < g->nsend && ok; s++) ok = root(g->send_act[s]) != o;
    } else if (n->op == OP_MATMUL_BWD && copy_of(n->in[2], p)) {
      const Value *dy = n->in[0], *f = dy->grad_of;
      ok = dy->alias == NULL && f && f->def && f->def->op == OP_MATMUL && copy_of(f->def->in[1], p) &&
           readers_all(g, dy, dlogits_ok, p);
      for (int j = 0; j < g->nodes.len && ok; j++) {
        const Node *q = g->nodes.data[j];
        for (int k = 0; k < q->nout && ok; k++)
          if (q->outs[k] && root(q->outs[k]) == dy) ok = q->op == OP_CROSS_ENTROPY_BWD;
      }
    }
  }
  if (!ok) return false;
  int64_t Vp = (V + VOCAB_PAD - 1) / VOCAB_PAD * VOCAB_PAD;
  for (int c = 0; c < nc; c++) {
    Node *w = cp[c];
    w->a.i[1] = Vp;
    if (w->a.ni < 2) w->a.ni = 2;
    w->out->shape.d[0] = (Dim){Vp, -1};
  }
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = g->nodes.data[i];
    if (n->op == OP_MATMUL && copy_of(n->in[1], p)) {
      pad_last(n->out, Vp);
      if (n->out->grad) pad_last(n->out->grad, Vp); /* dlogits, the cross-entropy backward's */
    } else if (n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD) {
      const Value *x = n->in[n->op == OP_CROSS_ENTROPY ? 0 : 1];
      if (!x->def || x->def->op != OP_MATMUL || !copy_of(x->def->in[1], p)) continue;
      if (!n->a.i[4]) n->a.i[4] = V;
      if (n->a.ni < 5) n->a.ni = 5;
    }
  }
  return true;
}

/* The persistent copies (step_casts), or the parameters' casts before each
 * reader (ZeRO-3: casts[0..ncast)). */
static void pad_heads(Graph *g, DType t, const Cast *casts, int ncast) {
  for (int c = 0; c < g->wcasts.len; c++) {
    Node *w = g->wcasts.data[c];
    pad_copies(g, t, w->in[0], &w, 1);
  }
  Node **cp = arena_alloc(sizeof(Node *) * (size_t)(ncast + 1));
  for (int c = 0; c < ncast; c++) {
    const Value *p = casts[c].n->in[0];
    if (p->role != ROLE_PARAM || p->alias) continue;
    bool first = true;
    for (int d = 0; d < c && first; d++) first = casts[d].n->in[0] != p;
    if (!first) continue;
    int nc = 0;
    for (int d = c; d < ncast; d++)
      if (casts[d].n->in[0] == p) cp[nc++] = casts[d].n;
    pad_copies(g, t, p, cp, nc);
  }
}

int precision_apply(Graph *g, DType t, bool step_casts) {
  if (!is16(t)) return 0;
  int nn = g->nodes.len;
  /* the activation received from the previous pipeline stage (an input) */
  for (int i = 0; i < g->nrecv; i++)
    if (g->recv_act[i]->dtype == DT_F32) g->recv_act[i]->dtype = t;
  /* 1. forward values (and recomputed copies: forward ops in the backward) */
  for (int i = 0; i < nn; i++) {
    Node *n = g->nodes.data[i];
    if (n->bwd || n->op == OP_FILL || n->op == OP_PARAM || n->op == OP_INPUT) continue;
    if (n->op == OP_RECV) {
      if (n->out->role != ROLE_GRAD && n->out->dtype == DT_F32) n->out->dtype = t;
      continue;
    }
    bool wide = false;
    for (int k = 0; k < n->nin; k++) wide |= is16(n->in[k]->dtype);
    for (int k = 0; k < n->nout; k++) {
      Value *o = n->outs[k];
      if (!o || o->role == ROLE_GRAD || o->dtype != DT_F32) continue;
      if (n->op == OP_CAST) continue;
      if (follows_operands(n)) {
        if (wide) o->dtype = t;
      } else if (!stat_out(n, k)) {
        o->dtype = t;
      }
    }
  }
  /* 2. gradients: their forward value's width */
  for (int i = 0; i < g->values.len; i++) {
    Value *v = g->values.data[i];
    if (v->role == ROLE_GRAD && v->grad_of && isfloat(v->dtype)) v->dtype = v->grad_of->dtype;
  }
  /* 3. backward temporaries (not gradients): their operand's width */
  for (int i = 0; i < nn; i++) {
    Node *n = g->nodes.data[i];
    if (!n->bwd && n->op != OP_FILL && n->op != OP_RECV && !ir_is_comm(n->op)) continue;
    for (int k = 0; k < n->nout; k++) {
      Value *o = n->outs[k];
      if (o && o->role != ROLE_GRAD && o->dtype == DT_F32 && n->nin && is16(n->in[0]->dtype))
        o->dtype = t;
    }
  }
  for (int i = 0; i < g->nsend; i++) {
    if (is16(g->send_act[i]->dtype) || !isfloat(g->send_act[i]->dtype)) continue;
    diag_error(g->send_act[i]->loc,
               "precision = %s: the activation stage %d sends is computed from parameters and "
               "float inputs alone; cut the pipeline after a layer",
               ir_dtype_name(t), g->stage);
    return -1;
  }
  /* 4. casts before the kernels that read fp32 data, and into accumulations
   *    of the other width */
  Cast *casts = NULL;
  int ncast = 0, cap = 0;
  for (int i = 0; i < nn; i++) {
    Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++) {
      Value *v = n->in[k];
      DType want;
      if (data_operand(n, k) && v->dtype == DT_F32)
        want = t;
      else if ((n->op == OP_ACC || n->op == OP_SHARD_BWD) && k == 0 && n->out &&
               isfloat(v->dtype) && isfloat(n->out->dtype) && v->dtype != n->out->dtype)
        want = n->out->dtype;
      else
        continue;
      /* a parameter the rank holds for the whole step: one persistent copy,
       * cast once per step (the graph's wcasts; memplan places it) */
      if (step_casts && want == t && v->role == ROLE_PARAM && !v->alias) {
        Node *w = NULL;
        for (int c = 0; c < g->wcasts.len && !w; c++)
          if (((Node *)g->wcasts.data[c])->in[0] == v) w = g->wcasts.data[c];
        if (!w) {
          Attrs a = {0};
          a.i[0] = t;
          a.ni = 1;
          w = ir_add(g, OP_CAST, &v, 1, &a, v->loc, "", "cast");
          if (!w) return -1;
          g->nodes.len--;   /* not in the schedule: the step runs it */
          w->id = -1;
          w->out->role = ROLE_ACT;
          vec_push(&g->wcasts, w);
        }
        n->in[k] = w->out;
        continue;
      }
      /* one cast per value and node */
      Value *done = NULL;
      for (int c = 0; c < ncast; c++)
        if (casts[c].reader == n && casts[c].n->in[0] == v) done = casts[c].n->out;
      if (done) {
        n->in[k] = done;
        continue;
      }
      Attrs a = {0};
      a.i[0] = want;
      a.ni = 1;
      Node *c = ir_add(g, OP_CAST, &v, 1, &a, n->loc, n->scope, "cast");
      if (!c) return -1;
      c->out->role = ROLE_ACT;
      /* before the bias gradient a matmul_bwd sums (fuse.c pairs the two) */
      int at = i;
      const Node *p = i > 0 ? g->nodes.data[i - 1] : NULL;
      if (n->op == OP_MATMUL_BWD && p && p->op == OP_ADD_BWD && p->in[0] == n->in[0]) at = i - 1;
      casts = arena_grow(casts, ncast, &cap, sizeof *casts, 16);
      casts[ncast++] = (Cast){at, c, n};
      n->in[k] = c->out;
    }
  }
  if (check_grads(g, t)) return -1;
  const char *pad = getenv("SHARDC_HEAD_PAD"); /* "0": off (to compare) */
  if (!(pad && !strcmp(pad, "0"))) pad_heads(g, t, casts, ncast);
  if (!ncast) return 0;
  /* ir_add appended them: move each right before its reader */
  g->nodes.len = nn;
  qsort(casts, (size_t)ncast, sizeof *casts, by_before);
  PtrVec nodes = {0};
  int *newid = arena_alloc(sizeof(int) * (size_t)(nn + 1));
  int nfwd = -1, c = 0;
  for (int i = 0; i < nn; i++) {
    if (i == g->nfwd) nfwd = nodes.len;
    for (; c < ncast && casts[c].before == i; c++) vec_push(&nodes, casts[c].n);
    newid[i] = nodes.len;
    vec_push(&nodes, g->nodes.data[i]);
  }
  if (nfwd < 0) nfwd = nodes.len;
  for (int i = 0; i < nodes.len; i++) {
    Node *n = nodes.data[i];
    n->id = i;
    if (n->op == OP_DROPOUT_BWD) n->a.i[1] = newid[n->a.i[1]];
  }
  g->nodes = nodes;
  g->nfwd = nfwd;
  return 0;
}

static int precision_stage(Module *m) {
  return precision_apply(m->graph, m->train.precision, !zero_gathers_params(m));
}

int pass_precision(Module *m) {
  if (!is16(m->train.precision)) return 0;
  return per_stage(m, precision_stage);
}
