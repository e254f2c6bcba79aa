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
 *
 * The embedding is vocab-parallel down the column: every rank gathers the
 * rows of its vocabulary block for all tokens (channels block c), the result
 * is a partial sum over TPC, and one reduce-scatter over TPC along the batch
 * leaves block (r, c).  The head is the transpose: the normalized
 * activations are all-gathered over TPC along the batch (every rank gets all
 * rows of its channel block c; gradient: reduce-scatter), multiplied by the
 * local [V/q, C/q] block (logits of vocabulary block r, partial over the
 * channel blocks), all-reduced over TPR, and the cross-entropy runs
 * vocab-parallel over TPC on all rows, so the loss is the same number on
 * every grid rank and no extra averaging is needed.  This keeps the
 * tied table in one layout for both uses at the price of [B, T, V/q] logits
 * per rank (not 1/q² of them): the simpler correct choice, counted exactly
 * in the plan's bytes and memory.
 *
 * Conversions are inserted right after the op that needs them (the
 * embedding's reduce-scatter, the head's all-reduce) and its readers read
 * the converted value.  Autodiff differentiates the collectives and the
 * SUMMA / split-norm nodes (their attributes travel to the backward).
 */
#include <string.h>

#include "passes.h"

enum { L_NONE, L_LAST, L_SUMMA, L_VOCAB };
enum { RB = 1u << AX_TPR, CB = 1u << AX_TPC };

typedef struct S2 {
  Graph *g;
  int q;
  size_t cap;
  Value **repl;     /* value id -> the converted value its readers read */
  int8_t *layout;   /* parameter value id -> L_* */
  bool *vocab_mm;   /* matmul output value id -> read only by a cross-entropy */
  bool failed;
} S2;

static void fail2(S2 *s, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail2(S2 *s, const Node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(n->loc, "2D tensor parallelism (tp2d=%dx%d): %s", s->q, s->q, msg);
  s->failed = true;
}

static int dim_of(const Value *v, int ax) {
  for (int d = 0; d < v->shape.ndim; d++)
    if (v->shard.axis[d] == ax) return d;
  return -1;
}

static void clear(Value *v) {
  for (int d = 0; d < IR_MAXDIM; d++) v->shard.axis[d] = -1;
  v->shard.partial = v->shard.gpartial = 0;
  v->shard.nseg = 0;
}

static bool whole(const Value *v) {
  return dim_of(v, AX_TPR) < 0 && dim_of(v, AX_TPC) < 0 && !v->shard.partial;
}

/* The activation block layout: batch over TPC, last dim over TPR. */
static bool is_act(const Value *v) {
  int n = v->shape.ndim;
  return n >= 2 && dim_of(v, AX_TPC) == 0 && dim_of(v, AX_TPR) == n - 1 && !v->shard.partial;
}

static void set_act(Value *v, const Value *seg_from) {
  clear(v);
  v->shard.axis[0] = AX_TPC;
  v->shard.axis[v->shape.ndim - 1] = AX_TPR;
  if (seg_from && seg_from->shard.nseg > 1) {
    v->shard.nseg = seg_from->shard.nseg;
    memcpy(v->shard.seg, seg_from->shard.seg, sizeof v->shard.seg);
  }
}

static void reshape2(S2 *s, Node *n) {
  char err[256];
  if (ir_ops[n->op].shape(n, err, sizeof err)) fail2(s, n, "internal: %s: %s", ir_ops[n->op].name, err);
}

/* A communication node over axis ax of the grid converting v. */
static Value *comm2(S2 *s, OpKind op, Value *v, int dim, int ax, const Node *at) {
  if ((size_t)s->g->values.len + 4 >= s->cap) {
    fail2(s, at, "internal: value table overflow");
    return NULL;
  }
  Attrs a = {0};
  a.i[0] = dim;
  a.i[1] = s->q;
  a.i[2] = ax;
  a.ni = 3;
  Node *n = ir_add(s->g, op, &v, 1, &a, at->loc, at->scope, ir_ops[op].name);
  if (!n) {
    s->failed = true;
    return NULL;
  }
  n->out->shard = v->shard;
  n->out->shard.partial = n->out->shard.gpartial = 0;
  return n->out;
}

static bool divisible(S2 *s, const Node *at, const Value *v, int d, const char *what) {
  if (v->shape.d[d].n % s->q == 0) return true;
  fail2(s, at, "%s has %lld %s, not divisible by %d", v->name ? v->name : "an operand",
        (long long)v->shape.d[d].n, what, s->q);
  return false;
}

/* A whole activation cut to this rank's block (an input read by a linear
 * layer): local copies, the gradient lands in the own block. */
static Value *to_act(S2 *s, Value *v, const Node *at) {
  if (is_act(v)) return v;
  if (!whole(v) || v->shape.ndim < 2) {
    fail2(s, at, "an operand of %s is not in the [batch over tp-col, channels over tp-row] "
                 "block layout", ir_ops[at->op].name);
    return NULL;
  }
  int last = v->shape.ndim - 1;
  if (!divisible(s, at, v, 0, "rows") || !divisible(s, at, v, last, "features")) return NULL;
  Value *r = comm2(s, OP_SHARD, v, 0, AX_TPC, at);
  if (r) r->shard.axis[0] = AX_TPC;
  if (r) r = comm2(s, OP_SHARD, r, last, AX_TPR, at);
  if (r) set_act(r, NULL);
  return r;
}

/* ---- parameters ---- */

static void param_layouts(S2 *s, const PtrVec *nodes) {
  for (int i = 0; i < nodes->len; i++) {
    Node *n = nodes->data[i];
    if (n->op == OP_CROSS_ENTROPY) {
      Node *mm = n->in[0]->def;
      if (mm && mm->op == OP_MATMUL && n->in[0]->nuses == 1) s->vocab_mm[n->in[0]->id] = true;
    }
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
      if (s->layout[p->id] && s->layout[p->id] != want) {
        fail2(s, n, "parameter '%s' is used both as a vocabulary table and otherwise", p->name);
        return;
      }
      s->layout[p->id] = (int8_t)want;
    }
  }
}

static void split_param(S2 *s, const Node *at, Value *p, int d, int ax, bool segs) {
  int nseg = segs && p->tph_nseg > 1 ? p->tph_nseg : 1;
  for (int k = 0; k < nseg; k++) {
    int64_t len = nseg > 1 ? p->tph_seg[k] : p->shape.d[d].n;
    if (len % s->q) {
      fail2(s, at, "parameter '%s' has %lld %s along dim %d, not divisible by %d", p->name,
            (long long)len, nseg > 1 ? "rows in a segment" : "elements", d, s->q);
      return;
    }
  }
  p->shard.axis[d] = (int8_t)ax;
  if (nseg > 1) {
    p->shard.nseg = (int8_t)nseg;
    for (int k = 0; k < nseg; k++) p->shard.seg[k] = p->tph_seg[k];
  }
  p->shape.d[d].n /= s->q;
}

static void shard_param2(S2 *s, Node *n) {
  Value *p = n->out;
  clear(p);
  int last = p->shape.ndim - 1;
  switch (s->layout[p->id]) {
  case L_SUMMA:
    if (p->shape.ndim != 2) {
      fail2(s, n, "internal: matmul weight '%s' is not 2-D", p->name);
      return;
    }
    split_param(s, n, p, 0, AX_TPR, p->tph == TPH_COL);
    split_param(s, n, p, 1, AX_TPC, false);
    return;
  case L_VOCAB:
    split_param(s, n, p, 0, AX_TPC, false);
    split_param(s, n, p, 1, AX_TPR, false);
    return;
  case L_LAST:
    split_param(s, n, p, last, AX_TPR, p->shape.ndim == 1 && p->tph == TPH_COL);
    return;
  default:
    return;
  }
}

/* ---- per-op rules ---- */

static void copy_out(Node *n, const Value *from) {
  for (int j = 0; j < n->nout; j++) {
    n->outs[j]->shard = from->shard;
    n->outs[j]->shard.partial = n->outs[j]->shard.gpartial = 0;
  }
}

static void rule_matmul2(S2 *s, Node *n) {
  Value *w = n->in[1];
  int lay = w->role == ROLE_PARAM ? s->layout[w->id] : L_NONE;
  Value *x = to_act(s, n->in[0], n);
  if (!x) return;
  if (lay == L_SUMMA) {
    n->in[0] = x;
    n->a.i[0] = s->q;
    n->a.i[1] = AX_TPR;
    n->a.i[2] = AX_TPC;
    n->a.ni = 3;
    reshape2(s, n);
    set_act(n->out, w);
    return;
  }
  if (lay != L_VOCAB) {
    fail2(s, n, "matmul by a computed operand (not a parameter)");
    return;
  }
  /* the head: all rows of channel block c, times the [V/q, C/q] block */
  Value *xa = comm2(s, OP_ALLGATHER_G, x, 0, AX_TPC, n);
  if (!xa) return;
  clear(xa);
  xa->shard.axis[xa->shape.ndim - 1] = AX_TPR;
  xa->shard.gpartial = CB;
  n->in[0] = xa;
  reshape2(s, n);
  clear(n->out);
  n->out->shard.axis[n->out->shape.ndim - 1] = AX_TPC;
  n->out->shard.partial = RB;
}

static void rule_binary2(S2 *s, Node *n) {
  Value *a = n->in[0], *b = n->in[1];
  if (a->shard.partial || b->shard.partial) {
    fail2(s, n, "internal: %s of a pending partial sum", ir_ops[n->op].name);
    return;
  }
  if (a->shape.ndim == b->shape.ndim && b->role != ROLE_PARAM && !is_act(b) && is_act(a)) b = to_act(s, b, n);
  if (a->shape.ndim == b->shape.ndim && a->role != ROLE_PARAM && !is_act(a) && b && is_act(b)) a = to_act(s, a, n);
  if (!a || !b) return;
  int off = a->shape.ndim - b->shape.ndim;
  static const int axes[2] = {AX_TPR, AX_TPC};
  for (int k = 0; k < 2; k++) {
    int ax = axes[k], da = dim_of(a, ax), db = dim_of(b, ax);
    if (db >= 0 && db + off != da) {
      fail2(s, n, "%s of operands split differently over %s", ir_ops[n->op].name, ir_axis_name(ax));
      return;
    }
    if (da < 0 || db >= 0) continue;
    if (da >= off && b->shape.d[da - off].n != 1) {
      fail2(s, n, "%s: the second operand is not split over %s like the first",
            ir_ops[n->op].name, ir_axis_name(ax));
      return;
    }
    /* b broadcasts along a dim split over ax: its gradient sums over ax */
    if (b->role != ROLE_PARAM) {
      fail2(s, n, "%s broadcasting a computed operand along a split dim", ir_ops[n->op].name);
      return;
    }
    b->grad_partial |= 1u << ax;
  }
  if (a->shard.nseg != b->shard.nseg && b->shape.ndim > 0 && dim_of(b, AX_TPR) >= 0) {
    fail2(s, n, "%s of tensors split in different segments", ir_ops[n->op].name);
    return;
  }
  n->in[0] = a;
  n->in[1] = b;
  reshape2(s, n);
  copy_out(n, a);
}

static void rule_unary2(S2 *s, Node *n, bool rowwise) {
  Value *x = n->in[0];
  for (int k = 0; k < n->nin; k++) {
    Value *v = n->in[k];
    if (v->shard.partial || v->shard.gpartial) {
      fail2(s, n, "internal: %s of a partial or gathered value", ir_ops[n->op].name);
      return;
    }
    if (k && (memcmp(v->shard.axis, x->shard.axis, sizeof x->shard.axis) ||
              !ir_shape_eq(&v->shape, &x->shape))) {
      fail2(s, n, "imported function on operands split differently");
      return;
    }
  }
  if (rowwise && dim_of(x, AX_TPR) == x->shape.ndim - 1) {
    fail2(s, n, "%s along the channels, which are split over the grid row, is not supported",
          ir_ops[n->op].name);
    return;
  }
  reshape2(s, n);
  copy_out(n, x);
}

static void rule_norm2(S2 *s, Node *n) {
  Value *x = to_act(s, n->in[0], n);
  if (!x) return;
  n->in[0] = x;
  for (int k = 1; k < n->nin; k++) {
    Value *w = n->in[k];
    if (w->shape.ndim != 1 || dim_of(w, AX_TPR) != 0) {
      fail2(s, n, "norm weight '%s' must be a vector split over tp-row",
            w->name ? w->name : "(computed)");
      return;
    }
    if (w->role == ROLE_PARAM) w->grad_partial |= CB;
  }
  int64_t C = x->shape.d[x->shape.ndim - 1].n * s->q;
  n->a.i[0] = s->q;
  n->a.i[1] = AX_TPR;
  n->a.i[2] = C;
  n->a.ni = 3;
  reshape2(s, n);
  set_act(n->out, NULL);
  for (int j = 1; j < n->nout; j++) {
    clear(n->outs[j]);
    n->outs[j]->shard.axis[0] = AX_TPC; /* the statistics drop the channels */
  }
}

/* Each split dim of the input maps to the target dim with the same
 * leading product (on global sizes), which must divide by q. */
static void rule_reshape2(S2 *s, Node *n) {
  Value *x = n->in[0];
  if (x->shard.nseg > 1) {
    fail2(s, n, "cannot reshape a value split in segments");
    return;
  }
  int64_t gdim[IR_MAXDIM];
  for (int d = 0; d < x->shape.ndim; d++)
    gdim[d] = x->shape.d[d].n * (x->shard.axis[d] == AX_TPR || x->shard.axis[d] == AX_TPC ? s->q : 1);
  int8_t out_axis[IR_MAXDIM];
  memset(out_axis, -1, sizeof out_axis);
  for (int d = 0; d < x->shape.ndim; d++) {
    int ax = x->shard.axis[d];
    if (ax != AX_TPR && ax != AX_TPC) continue;
    int64_t pre = 1, p2 = 1;
    for (int k = 0; k < d; k++) pre *= gdim[k];
    int e = -1;
    for (int k = 0; k < n->a.ni; k++) {
      if (p2 == pre && n->a.i[k] % s->q == 0) {
        e = k;
        break;
      }
      p2 *= n->a.i[k];
    }
    if (e < 0 || out_axis[e] >= 0) {
      fail2(s, n, "reshape cannot keep dim %d split over %s", d, ir_axis_name(ax));
      return;
    }
    out_axis[e] = (int8_t)ax;
  }
  for (int e = 0; e < n->a.ni; e++)
    if (out_axis[e] >= 0) n->a.i[e] /= s->q;
  Value *al = n->out->alias;
  n->out->alias = NULL;
  reshape2(s, n);
  n->out->alias = al;
  clear(n->out);
  memcpy(n->out->shard.axis, out_axis, sizeof out_axis);
}

static void rule_slice2(S2 *s, Node *n) {
  Value *x = n->in[0];
  int last = x->shape.ndim - 1;
  if (dim_of(x, AX_TPR) != last) {
    reshape2(s, n);
    copy_out(n, x);
    return;
  }
  int64_t start = 0, lstart = 0;
  int nseg = x->shard.nseg > 1 ? x->shard.nseg : 1;
  for (int k = 0; k < nseg; k++) {
    int64_t len = nseg > 1 ? x->shard.seg[k] : x->shape.d[last].n * s->q;
    if (start == n->a.i[0] && len == n->a.i[1]) {
      n->a.i[0] = lstart;
      n->a.i[1] = len / s->q;
      reshape2(s, n);
      copy_out(n, x);
      n->out->shard.nseg = 0;
      return;
    }
    start += len;
    lstart += len / s->q;
  }
  fail2(s, n, "slice [%lld, %lld) does not match a segment of its split input",
        (long long)n->a.i[0], (long long)(n->a.i[0] + n->a.i[1]));
}

static void rule_attention2(S2 *s, Node *n) {
  for (int k = 0; k < 3; k++) {
    const Value *v = n->in[k];
    if (v->shape.ndim != 4 || dim_of(v, AX_TPC) != 0 || dim_of(v, AX_TPR) != 2 || v->shard.partial) {
      fail2(s, n, "attention operands must be split by batch (tp-col) and heads (tp-row)");
      return;
    }
  }
  reshape2(s, n);
  clear(n->outs[0]);
  n->outs[0]->shard.axis[0] = AX_TPC;
  n->outs[0]->shard.axis[2] = AX_TPR;
  clear(n->outs[1]); /* lse [B, H, T] */
  n->outs[1]->shard.axis[0] = AX_TPC;
  n->outs[1]->shard.axis[1] = AX_TPR;
}

static void rule_gather2(S2 *s, Node *n) {
  Value *t = n->in[0];
  if (t->role != ROLE_PARAM || s->layout[t->id] != L_VOCAB || !whole(n->in[1])) {
    fail2(s, n, "embedding lookups need a parameter table and whole token ids");
    return;
  }
  n->a.i[0] = 1;
  n->a.i[1] = s->q;
  n->a.i[2] = AX_TPC;
  n->a.ni = 3;
  reshape2(s, n);
  clear(n->out);
  n->out->shard.axis[n->out->shape.ndim - 1] = AX_TPR;
  n->out->shard.partial = CB;
}

/* Logits [.., V/q] whole along the rows, the vocabulary over one grid axis:
 * the head's (over TPC), or the block layout's (a projection with a bias,
 * over TPR) after an all-gather of the rows over TPC (gradient: the own
 * rows, every rank of the column computing the same). */
static void rule_xent2(S2 *s, Node *n) {
  Value *l = n->in[0];
  int last = l->shape.ndim - 1;
  if (is_act(l) && l->shard.nseg <= 1) {
    l = comm2(s, OP_ALLGATHER, l, 0, AX_TPC, n);
    if (!l) return;
    clear(l);
    l->shard.axis[last] = AX_TPR;
    n->in[0] = l;
  }
  int ax = dim_of(l, AX_TPC) == last ? AX_TPC : dim_of(l, AX_TPR) == last ? AX_TPR : -1;
  if (ax < 0 || dim_of(l, ax == AX_TPC ? AX_TPR : AX_TPC) >= 0 || l->shard.partial ||
      !whole(n->in[1])) {
    fail2(s, n, "the cross-entropy needs logits split only over the vocabulary");
    return;
  }
  n->a.i[1] = 1;
  n->a.i[2] = s->q;
  n->a.i[3] = ax;
  n->a.ni = 4;
  reshape2(s, n);
  clear(n->out);
}

/* After node n is in the list: the conversion its readers need. */
static void post2(S2 *s, Node *n) {
  Value *y = n->out, *r = NULL;
  if (n->op == OP_GATHER) {
    if (y->shape.d[0].n % s->q) {
      fail2(s, n, "a microbatch of %lld rows cannot be split over the %d grid rows (tp-col); "
                  "use a microbatch that %d divides", (long long)y->shape.d[0].n, s->q, s->q);
      return;
    }
    r = comm2(s, OP_REDUCE_SCATTER, y, 0, AX_TPC, n);
    if (r) set_act(r, NULL);
  } else if (n->op == OP_MATMUL && (y->shard.partial & RB)) {
    r = comm2(s, OP_ALLREDUCE, y, 0, AX_TPR, n);
    if (r) clear(r), r->shard.axis[r->shape.ndim - 1] = AX_TPC;
  }
  if (r) s->repl[y->id] = r;
}

int shard_tp2d(Module *m) {
  Graph *g = m->graph;
  const Plan *p = &m->train.plan;
  S2 s = {0};
  s.g = g;
  s.q = p->tp2d;
  s.cap = (size_t)g->values.len * 4 + 256;
  s.repl = arena_alloc(sizeof(Value *) * s.cap);
  s.layout = arena_alloc(s.cap);
  s.vocab_mm = arena_alloc(sizeof(bool) * s.cap);
  PtrVec old = g->nodes;
  param_layouts(&s, &old);
  if (s.failed) return -1;
  memset(&g->nodes, 0, sizeof g->nodes);
  for (int i = 0; i < old.len && !s.failed; i++) {
    Node *n = old.data[i];
    for (int k = 0; k < n->nin; k++)
      if (s.repl[n->in[k]->id]) n->in[k] = s.repl[n->in[k]->id];
    switch (n->op) {
    case OP_INPUT:
      break;
    case OP_PARAM:
      shard_param2(&s, n);
      break;
    case OP_MATMUL:
      rule_matmul2(&s, n);
      break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
      rule_binary2(&s, n);
      break;
    case OP_DROPOUT:
      if (n->a.f[0] > 0) {
        fail2(&s, n, "dropout is not implemented yet under tensor parallelism (its mask would "
                     "differ from the single-device run); use p = 0");
        break;
      }
      rule_unary2(&s, n, false);
      break;
    case OP_SCALE:
    case OP_GELU:
    case OP_RELU:
    case OP_SILU:
    case OP_ROPE:
    case OP_MAP:
      rule_unary2(&s, n, false);
      break;
    case OP_SOFTMAX:
      rule_unary2(&s, n, true);
      break;
    case OP_LAYERNORM:
    case OP_RMSNORM:
      rule_norm2(&s, n);
      break;
    case OP_RESHAPE:
      rule_reshape2(&s, n);
      break;
    case OP_SLICE:
      rule_slice2(&s, n);
      break;
    case OP_ATTENTION:
      rule_attention2(&s, n);
      break;
    case OP_GATHER:
      rule_gather2(&s, n);
      break;
    case OP_CROSS_ENTROPY:
      rule_xent2(&s, n);
      break;
    default:
      fail2(&s, n, "no 2D sharding rule for %s", ir_ops[n->op].name);
      break;
    }
    if (s.failed) break;
    vec_push(&g->nodes, n);
    post2(&s, n);
  }
  if (s.failed) return -1;
  if (g->loss && !whole(g->loss)) {
    diag_error(g->loss->loc, "internal: the loss is not replicated over the tp2d grid");
    return -1;
  }
  for (int i = 0; i < g->nodes.len; i++) ((Node *)g->nodes.data[i])->id = i;
  return 0;
}
