/* shard2d.c — 2D tensor parallelism (Optimus, tp2d=QxQ): the forward graph
 * rewritten into the graph of one rank of the q x q grid (rank (r, c):
 * coord r on the tp-col axis TPC, coord c on the tp-row axis TPR).
 *
 * Layouts (runtime/dist_summa.h's blocks):
 *   activations [B, T, C]   rows (the batch, dim 0) split over TPC, the
 *                           channels (last dim) over TPR: block (r, c)
 *   attention [B, T, H, D]  batch over TPC, heads over TPR: attention, rope
 *                           and the softmax run locally on (r, c)'s heads
 *   linear weight [N, K]    N over TPR (with segments: a fused q,k,v keeps
 *                           each rank's q, k and v parts), K over TPC:
 *                           matmul runs as SUMMA (q broadcasts of X blocks
 *                           along the grid row, q of W blocks down the
 *                           column); its gradient is complete on its holder
 *   vectors [.., C]         biases, norm weights, learned positions: the
 *                           last dim over TPR, replicated down the column;
 *                           their gradients are partial over TPC (each rank
 *                           sums its own rows), summed once per step
 *   norms                   layernorm / rmsnorm with the channel statistics
 *                           all-reduced over the grid row (split norms)
 *   vocabulary [V, C]       the embedding table (tied or not) and any
 *                           projection read only by the cross-entropy: V
 *                           over TPC, C over TPR.  (A projection with a bias
 *                           stays SUMMA; its logits are all-gathered over
 *                           TPC along the rows and the cross-entropy runs
 *                           vocab-parallel over TPR.)
 *   vocabulary bias [V]     the bias of a head whose weight is a vocabulary
 *                           table (tied): V over TPC like the logits it is
 *                           added to, replicated along the grid row; every
 *                           rank of the row computes the same (complete)
 *                           gradient from the all-reduced logits
 *
 * The embedding is vocab-parallel down the column: every rank gathers the
 * rows of its vocabulary block for all tokens (channels block c), the result
 * is a partial sum over TPC, and one reduce-scatter over TPC along the batch
 * leaves block (r, c).  The head gathers what it multiplies instead of
 * reducing what it makes: the normalized activations are all-gathered over
 * TPC along the batch and over TPR along the channels, and cut to row
 * block c over TPR (a shard; gradient: the own rows, reduce-scattered back
 * over both axes); the table's [V/q, C/q] block is all-gathered over TPR
 * into [V/q, C] (gradient: reduce-scattered over TPR, each rank's rows
 * summed); their product is the logits of row block c and vocabulary block
 * r, whole sums, 1/q² of them per rank.  The cross-entropy runs
 * vocab-parallel over TPC on row block c (its targets cut alike), and its
 * mean over those rows is all-reduced over TPR and scaled by 1/q: the loss
 * is the same number on every grid rank, the gradient 1/q of each block's.
 * The old head (the rows gathered, the partial logits all-reduced over TPR,
 * [B, T, V/q] of them per rank) sent 824 MB a microbatch of 16 for GPT-2
 * 124M on a 2x2 grid; this one sends the activations and the table's block
 * (tens of MB) and holds a quarter of the logits.
 *
 * Conversions are inserted right after the op that needs them (the
 * embedding's reduce-scatter, the loss's all-reduce and scale) and its
 * readers, and the graph's loss, read the converted value.  Autodiff differentiates the collectives and the
 * SUMMA / split-norm nodes (their attributes travel to the backward).
 */
#include <string.h>

#include "shardrules.h"

enum { L_NONE, L_LAST, L_SUMMA, L_VOCAB, L_VBIAS };
enum { RB = 1u << AX_TPR, CB = 1u << AX_TPC };

typedef struct S2 {
  Sharder sh;       /* first member: the rules receive &s->sh */
  int8_t *layout;   /* parameter value id -> L_* */
  bool *vocab_mm;   /* matmul output value id -> read only by a cross-entropy */
} S2;

/* The activation block layout: batch over TPC, last dim over TPR. */
static bool is_act(const Value *v) {
  int n = v->shape.ndim;
  return n >= 2 && sh_dim(v, AX_TPC) == 0 && sh_dim(v, AX_TPR) == n - 1 && !v->shard.partial;
}

static void set_act(Value *v, const Value *seg_from) {
  sh_clear(v);
  v->shard.axis[0] = AX_TPC;
  v->shard.axis[v->shape.ndim - 1] = AX_TPR;
  if (seg_from && seg_from->shard.nseg > 1) {
    v->shard.nseg = seg_from->shard.nseg;
    memcpy(v->shard.seg, seg_from->shard.seg, sizeof v->shard.seg);
  }
}

/* A whole activation cut to this rank's block (an input read by a linear
 * layer): local copies, the gradient lands in the own block. */
static Value *to_act(Sharder *s, Value *v, const Node *at) {
  if (is_act(v)) return v;
  if (!sh_whole(s, v) || v->shape.ndim < 2) {
    sh_fail(s, at, "an operand of %s is not in the [batch over tp-col, channels over tp-row] "
                   "block layout", ir_ops[at->op].name);
    return NULL;
  }
  int last = v->shape.ndim - 1;
  if (!sh_divisible(s, at, v, 0, "rows") || !sh_divisible(s, at, v, last, "features")) return NULL;
  Value *r = sh_comm(s, OP_SHARD, v, 0, AX_TPC, at);
  if (r) r->shard.axis[0] = AX_TPC;
  if (r) r = sh_comm(s, OP_SHARD, r, last, AX_TPR, at);
  if (r) set_act(r, NULL);
  return r;
}

/* ---- parameters ---- */

/* Whether v is the head's logits: a matmul by a vocabulary table (whose
 * layout is already known, the matmul coming first). */
static bool vocab_logits(const S2 *s, const Value *v) {
  const Node *mm = v->def;
  return mm && mm->op == OP_MATMUL && mm->in[1]->role == ROLE_PARAM &&
         s->layout[mm->in[1]->id] == L_VOCAB;
}

static void param_layouts(S2 *s, const PtrVec *nodes) {
  for (int i = 0; i < nodes->len; i++) {
    Node *n = nodes->data[i];
    if (n->op == OP_CROSS_ENTROPY && sh_vocab_matmul(n)) s->vocab_mm[n->in[0]->id] = true;
  }
  for (int i = 0; i < nodes->len; i++) {
    Node *n = nodes->data[i];
    for (int k = 0; k < n->nin; k++) {
      Value *p = n->in[k];
      if (p->role != ROLE_PARAM) continue;
      int want = L_LAST;
      if (n->op == OP_GATHER && k == 0) want = L_VOCAB;
      if (n->op == OP_MATMUL && k == 1)
        want = p->tph == TPH_VOCAB || s->vocab_mm[n->out->id] ? L_VOCAB : L_SUMMA;
      if (n->op == OP_ADD && k == 1 && p->shape.ndim == 1 && vocab_logits(s, n->in[0]))
        want = L_VBIAS;
      if (s->layout[p->id] && s->layout[p->id] != want) {
        sh_fail(&s->sh, n, "parameter '%s' is used both as a vocabulary table and otherwise", p->name);
        return;
      }
      s->layout[p->id] = (int8_t)want;
    }
  }
}

static void split_param(Sharder *s, const Node *at, Value *p, int d, int ax, bool segs) {
  int nseg = segs && p->tph_nseg > 1 ? p->tph_nseg : 1;
  int64_t len = sh_bad_segment(p, d, nseg, s->P);
  if (len) {
    sh_fail(s, at, "parameter '%s' has %lld %s along dim %d, not divisible by %d", p->name,
            (long long)len, nseg > 1 ? "rows in a segment" : "elements", d, s->P);
    return;
  }
  sh_split_param(s, p, d, ax, nseg);
}

/* ---- per-class rules ---- */

/* n runs over the grid row: i0 = q ranks, i1 = tp-row, and i2 (a SUMMA's
 * column axis, a split norm's global channels). */
static void over_row(Sharder *sh, Node *n, int64_t i2) {
  n->a.i[0] = sh->P;
  n->a.i[1] = AX_TPR;
  n->a.i[2] = i2;
  n->a.ni = 3;
  sh_rerun(sh, n);
}

static void rule_leaf2(Sharder *sh, Node *n) {
  S2 *s = (S2 *)sh;
  Value *p = n->out;
  if (n->op != OP_PARAM) return;
  sh_clear(p);
  int last = p->shape.ndim - 1;
  switch (s->layout[p->id]) {
  case L_SUMMA:
    if (p->shape.ndim != 2) {
      sh_fail(sh, n, "internal: matmul weight '%s' is not 2-D", p->name);
      return;
    }
    split_param(sh, n, p, 0, AX_TPR, p->tph == TPH_COL);
    split_param(sh, n, p, 1, AX_TPC, false);
    return;
  case L_VOCAB:
    split_param(sh, n, p, 0, AX_TPC, false);
    split_param(sh, n, p, 1, AX_TPR, false);
    return;
  case L_LAST:
    split_param(sh, n, p, last, AX_TPR, p->shape.ndim == 1 && p->tph == TPH_COL);
    return;
  case L_VBIAS:
    split_param(sh, n, p, 0, AX_TPC, false);
    return;
  default:
    return;
  }
}

static void rule_matmul2(Sharder *sh, Node *n) {
  S2 *s = (S2 *)sh;
  Value *w = n->in[1];
  int lay = w->role == ROLE_PARAM ? s->layout[w->id] : L_NONE;
  Value *x = to_act(sh, n->in[0], n);
  if (!x) return;
  if (lay == L_SUMMA) {
    n->in[0] = x;
    over_row(sh, n, AX_TPC);
    set_act(n->out, w);
    return;
  }
  if (lay != L_VOCAB) {
    sh_fail(sh, n, "matmul by a computed operand (not a parameter)");
    return;
  }
  /* the head: row block c of all the channels (the rows gathered over
   * TPC, the channels over TPR, then the rows cut over TPR), times the
   * [V/q, C] block (the table's [V/q, C/q] gathered over TPR): logits of
   * row block c and vocabulary block r, whole sums, 1/q^2 of them */
  int last = x->shape.ndim - 1;
  Value *xa = sh_comm(sh, OP_ALLGATHER_G, x, 0, AX_TPC, n);
  if (!xa) return;
  sh_clear(xa);
  xa->shard.axis[last] = AX_TPR;
  Value *xb = sh_comm(sh, OP_ALLGATHER_G, xa, last, AX_TPR, n);
  if (!xb) return;
  sh_clear(xb);
  if (!sh_divisible(sh, n, xb, 0, "rows")) return;
  Value *xc = sh_comm(sh, OP_SHARD, xb, 0, AX_TPR, n);
  if (!xc) return;
  sh_clear(xc);
  xc->shard.axis[0] = AX_TPR;
  Value *wa = sh_comm(sh, OP_ALLGATHER_G, w, 1, AX_TPR, n);
  if (!wa) return;
  sh_clear(wa);
  wa->shard.axis[0] = AX_TPC;
  n->in[0] = xc;
  n->in[1] = wa;
  sh_rerun(sh, n);
  sh_clear(n->out);
  n->out->shard.axis[0] = AX_TPR;
  n->out->shard.axis[n->out->shape.ndim - 1] = AX_TPC;
}

static void rule_binary2(Sharder *sh, Node *n) {
  Value *a = n->in[0], *b = n->in[1];
  if (a->shard.partial || b->shard.partial) {
    sh_fail(sh, n, "internal: %s of a pending partial sum", ir_ops[n->op].name);
    return;
  }
  if (a->shape.ndim == b->shape.ndim && b->role != ROLE_PARAM && !is_act(b) && is_act(a)) b = to_act(sh, b, n);
  if (a->shape.ndim == b->shape.ndim && a->role != ROLE_PARAM && !is_act(a) && b && is_act(b)) a = to_act(sh, a, n);
  if (!a || !b) return;
  int off = a->shape.ndim - b->shape.ndim;
  static const int axes[2] = {AX_TPR, AX_TPC};
  for (int k = 0; k < 2; k++) {
    int ax = axes[k], da = sh_dim(a, ax), db = sh_dim(b, ax);
    if (db >= 0 && db + off != da) {
      sh_fail(sh, n, "%s of operands split differently over %s", ir_ops[n->op].name, ir_axis_name(ax));
      return;
    }
    if (da < 0 || db >= 0) continue;
    if (da >= off && b->shape.d[da - off].n != 1) {
      sh_fail(sh, n, "%s: the second operand is not split over %s like the first",
              ir_ops[n->op].name, ir_axis_name(ax));
      return;
    }
    /* b broadcasts along a dim split over ax: its gradient sums over ax */
    if (b->role != ROLE_PARAM) {
      sh_fail(sh, n, "%s broadcasting a computed operand along a split dim", ir_ops[n->op].name);
      return;
    }
    b->grad_partial |= 1u << ax;
  }
  if (a->shard.nseg != b->shard.nseg && b->shape.ndim > 0 && sh_dim(b, AX_TPR) >= 0) {
    sh_fail(sh, n, "%s of tensors split in different segments", ir_ops[n->op].name);
    return;
  }
  n->in[0] = a;
  n->in[1] = b;
  sh_rerun(sh, n);
  sh_copy_spec(n, a);
}

/* Elementwise and row-wise ops run on the rank's block as it is: every
 * operand in one spec, no pending sums; a row-wise op needs whole rows,
 * which the block layout splits. */
static void unary2(Sharder *sh, Node *n, bool rowwise) {
  Value *x = n->in[0];
  for (int k = 0; k < n->nin; k++) {
    Value *v = n->in[k];
    if (v->shard.partial || v->shard.gpartial) {
      sh_fail(sh, n, "internal: %s of a partial or gathered value", ir_ops[n->op].name);
      return;
    }
    if (k && (memcmp(v->shard.axis, x->shard.axis, sizeof x->shard.axis) ||
              !ir_shape_eq(&v->shape, &x->shape))) {
      sh_fail(sh, n, "imported function on operands split differently");
      return;
    }
  }
  if (rowwise && sh_dim(x, AX_TPR) == x->shape.ndim - 1) {
    sh_fail(sh, n, "%s along the channels, which are split over the grid row, is not supported",
            ir_ops[n->op].name);
    return;
  }
  sh_rerun(sh, n);
  sh_copy_spec(n, x);
}

static void rule_elementwise2(Sharder *sh, Node *n) {
  if (sh_dropout_ok(sh, n, "is not implemented yet under tensor parallelism")) unary2(sh, n, false);
}

static void rule_rowwise2(Sharder *sh, Node *n) { unary2(sh, n, true); }

static void rule_norm2(Sharder *sh, Node *n) {
  Value *x = to_act(sh, n->in[0], n);
  if (!x) return;
  n->in[0] = x;
  for (int k = 1; k < n->nin; k++) {
    Value *w = n->in[k];
    if (w->shape.ndim != 1 || sh_dim(w, AX_TPR) != 0) {
      sh_fail(sh, n, "norm weight '%s' must be a vector split over tp-row",
              w->name ? w->name : "(computed)");
      return;
    }
    if (w->role == ROLE_PARAM) w->grad_partial |= CB;
  }
  over_row(sh, n, x->shape.d[x->shape.ndim - 1].n * sh->P);
  set_act(n->out, NULL);
  for (int j = 1; j < n->nout; j++) {
    sh_clear(n->outs[j]);
    n->outs[j]->shard.axis[0] = AX_TPC; /* the statistics drop the channels */
  }
}

static void rule_attention2(Sharder *sh, Node *n) {
  for (int k = 0; k < 3; k++) {
    const Value *v = n->in[k];
    if (v->shape.ndim != 4 || sh_dim(v, AX_TPC) != 0 || sh_dim(v, AX_TPR) != 2 || v->shard.partial) {
      sh_fail(sh, n, "attention operands must be split by batch (tp-col) and heads (tp-row)");
      return;
    }
  }
  sh_rerun(sh, n);
  sh_clear(n->outs[0]);
  n->outs[0]->shard.axis[0] = AX_TPC;
  n->outs[0]->shard.axis[2] = AX_TPR;
  sh_clear(n->outs[1]); /* lse [B, H, T] */
  n->outs[1]->shard.axis[0] = AX_TPC;
  n->outs[1]->shard.axis[1] = AX_TPR;
}

static void rule_gather2(Sharder *sh, Node *n) {
  S2 *s = (S2 *)sh;
  Value *t = n->in[0];
  if (t->role != ROLE_PARAM || s->layout[t->id] != L_VOCAB || !sh_whole(sh, n->in[1])) {
    sh_fail(sh, n, "embedding lookups need a parameter table and whole token ids");
    return;
  }
  sh_vocab_parallel(sh, n, AX_TPC);
  n->out->shard.axis[n->out->shape.ndim - 1] = AX_TPR;
  n->out->shard.partial = CB;
}

/* Logits [.., V/q] whole along the rows, the vocabulary over one grid axis:
 * the head's (over TPC), or the block layout's (a projection with a bias,
 * over TPR) after an all-gather of the rows over TPC (gradient: the own
 * rows, every rank of the column computing the same). */
static void rule_xent2(Sharder *sh, Node *n) {
  Value *l = n->in[0];
  int last = l->shape.ndim - 1;
  if (is_act(l) && l->shard.nseg <= 1) {
    l = sh_comm(sh, OP_ALLGATHER, l, 0, AX_TPC, n);
    if (!l) return;
    sh_clear(l);
    l->shard.axis[last] = AX_TPR;
    n->in[0] = l;
  }
  int ax = sh_dim(l, AX_TPC) == last ? AX_TPC : sh_dim(l, AX_TPR) == last ? AX_TPR : -1;
  /* the head's logits: their rows over TPR, the targets cut alike */
  bool rows = ax == AX_TPC && last > 0 && sh_dim(l, AX_TPR) == 0;
  if (rows && sh_whole(sh, n->in[1]) && n->in[1]->shape.ndim == l->shape.ndim - 1) {
    Value *t = sh_comm(sh, OP_SHARD, n->in[1], 0, AX_TPR, n);
    if (!t) return;
    sh_clear(t);
    t->shard.axis[0] = AX_TPR;
    n->in[1] = t;
  }
  if (ax < 0 || (!rows && sh_dim(l, ax == AX_TPC ? AX_TPR : AX_TPC) >= 0) || l->shard.partial ||
      (!rows && !sh_whole(sh, n->in[1]))) {
    sh_fail(sh, n, "the cross-entropy needs logits split only over the vocabulary");
    return;
  }
  sh_vocab_parallel(sh, n, ax);
}

static const TpRules tp2d_rules = {
    .leaf = rule_leaf2, .elementwise = rule_elementwise2, .rowwise = rule_rowwise2, .view = sh_view,
    .binary = rule_binary2, .norm = rule_norm2, .matmul = rule_matmul2,
    .attention = rule_attention2, .gather = rule_gather2, .loss = rule_xent2, .channels = AX_TPR,
};

/* After node n is in the list: the conversion its readers need. */
static void post2(Sharder *sh, Node *n) {
  Value *y = n->out, *r = NULL;
  if (n->op == OP_GATHER) {
    if (y->shape.d[0].n % sh->P) {
      sh_fail(sh, n, "a microbatch of %lld rows cannot be split over the %d grid rows (tp-col); "
                     "use a microbatch that %d divides", (long long)y->shape.d[0].n, sh->P, sh->P);
      return;
    }
    r = sh_comm(sh, OP_REDUCE_SCATTER, y, 0, AX_TPC, n);
    if (r) set_act(r, NULL);
  } else if (n->op == OP_CROSS_ENTROPY && sh_dim(n->in[0], AX_TPR) == 0) {
    /* the mean over row block c: averaged over the grid's rows (the
     * gradient of each block's mean 1/q of the loss's) */
    Value *s = sh_comm(sh, OP_ALLREDUCE, y, 0, AX_TPR, n);
    if (!s) return;
    sh_clear(s);
    Attrs a = {0};
    a.f[0] = 1.0 / sh->P;
    Node *m = ir_add(sh->g, OP_SCALE, &s, 1, &a, n->loc, n->scope, "mean over tp-row");
    if (!m) {
      sh->failed = true;
      return;
    }
    sh_clear(m->out);
    r = m->out;
  }
  if (r) sh->repl[y->id] = r;
}

int shard_tp2d(Module *m) {
  Graph *g = m->graph;
  int q = m->train.plan.tp2d;
  S2 s = {0};
  s.sh = (Sharder){.g = g, .P = q, .axes = RB | CB, .tp = &tp2d_rules, .post = post2,
                   .what = arena_printf("2D tensor parallelism (tp2d=%dx%d)", q, q)};
  s.sh.cap = (size_t)g->values.len * 4 + 256;
  s.sh.repl = arena_alloc(sizeof(Value *) * s.sh.cap);
  s.layout = arena_alloc(s.sh.cap);
  s.vocab_mm = arena_alloc(sizeof(bool) * s.sh.cap);
  param_layouts(&s, &g->nodes);
  if (s.sh.failed) return -1;
  return sh_rewrite(&s.sh, sh_tp_rule);
}
