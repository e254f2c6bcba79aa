/* shard.c — tensor parallelism (and sp=ring, at the end): sharding specs per
 * value, per-op rules, and the communication that makes every rank's graph
 * compute its share.
 *
 * Runs on the forward graph before autodiff and rewrites it in place into
 * the graph of ONE rank of the tp axis: every value gets its local shape and
 * a ShardSpec (split dim, pending partial sum, or a replicated value whose
 * gradient will be partial), and where an op needs its operand in another
 * spec than it has, a conversion node is inserted before it:
 *
 *   partial  -> whole     all_reduce            (gradient: passes through)
 *   partial  -> split d   reduce_scatter        (gradient: all-gather)
 *   split d  -> whole     all_gather            (gradient: own chunk)
 *   split d  -> whole*    all_gather_g          (gradient: reduce-scatter)
 *   whole    -> whole*    tp_copy, a view       (gradient: all-reduce)
 *   whole    -> split d   shard, a local copy   (parameters only)
 *
 * (whole* = replicated, gradient partial: the input of a column-parallel
 * matmul.)  Autodiff then differentiates the rewritten graph, collectives
 * included, so the backward's communication comes out of the same rules.
 *
 * Parameters get their split from the builtin that made them (ir.h TpHint):
 * Megatron's column-parallel (qkv, fc, gate, up: output rows; fused q,k,v as
 * segments), row-parallel (proj, down: input columns, output partial) and
 * vocab-parallel (embedding rows; a tied or final projection to the
 * vocabulary becomes column-parallel and the cross-entropy vocab-parallel).
 * With sp=megatron the activations between those regions are split over
 * the sequence (dim 1) instead of replicated: the all-reduce after a
 * row-parallel matmul becomes a reduce-scatter and the copy before a
 * column-parallel one an all-gather.  A replicated parameter used on split
 * activations (norm weights, row-parallel biases, positions) gets a partial
 * gradient, which the training step all-reduces over tp (grad_partial).
 */
#include <string.h>

#include "passes.h"

static int shard_tp(Module *m);

typedef struct S {
  Graph *g;
  int tp;          /* ranks on the tp axis */
  bool seqpar;     /* sp=megatron: activations outside tp regions split on dim 1 */
  Value **gathered;/* value id -> its whole* (tp_copy / all_gather_g) version */
  Value **whole;   /* value id -> its whole version (all_reduce / all_gather) */
  Value **act;     /* value id -> its resolved partial (reduce to the activation spec) */
  bool failed;
} S;

enum { TPB = 1u << AX_TP };

static int split_dim(const Value *v) {
  for (int d = 0; d < v->shape.ndim; d++)
    if (v->shard.axis[d] == AX_TP) return d;
  return -1;
}
static bool partial(const Value *v) { return v->shard.partial & TPB; }
static bool is_whole(const Value *v) { return split_dim(v) < 0 && !partial(v); }

static void spec_clear(Value *v) {
  for (int d = 0; d < IR_MAXDIM; d++) v->shard.axis[d] = -1;
  v->shard.partial = v->shard.gpartial = 0;
  v->shard.nseg = 0;
}

static void spec_split(Value *v, int d) {
  spec_clear(v);
  v->shard.axis[d] = AX_TP;
}

static void fail(S *s, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(S *s, const Node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(n->loc, "tensor parallel (tp=%d): %s", s->tp, msg);
  s->failed = true;
}

/* A communication node on the tp axis converting v; NULL after an error. */
static Value *comm(S *s, OpKind op, Value *v, int dim, const Node *at) {
  Attrs a = {0};
  a.i[0] = dim;
  a.i[1] = s->tp;
  a.i[2] = AX_TP;
  a.ni = 3;
  Node *n = ir_add(s->g, op, &v, 1, &a, at->loc, at->scope, ir_ops[op].name);
  if (!n) {
    s->failed = true;
    return NULL;
  }
  return n->out;
}

/* The spec activations have between tensor-parallel regions. */
static int act_dim(S *s, const Value *v) { return s->seqpar && v->shape.ndim >= 3 ? 1 : -1; }

/* v with its partial sum resolved to the activation spec. */
static Value *resolve(S *s, Value *v, const Node *at) {
  if (!partial(v)) return v;
  if (s->act[v->id]) return s->act[v->id];
  int d = act_dim(s, v);
  Value *r;
  if (d >= 0 && v->shape.d[d].n % s->tp == 0) {
    r = comm(s, OP_REDUCE_SCATTER, v, d, at);
    if (r) spec_split(r, d);
  } else {
    r = comm(s, OP_ALLREDUCE, v, 0, at);
    if (r) spec_clear(r);
  }
  return s->act[v->id] = r;
}

/* v replicated with a partial gradient: the input of a column-parallel op. */
static Value *gathered(S *s, Value *v, const Node *at) {
  v = resolve(s, v, at);
  if (!v) return NULL;
  if (s->gathered[v->id]) return s->gathered[v->id];
  int d = split_dim(v);
  Value *r;
  if (d >= 0) {
    if (v->shard.nseg > 1) {
      fail(s, at, "cannot gather a value split in segments");
      return NULL;
    }
    r = comm(s, OP_ALLGATHER_G, v, d, at);
  } else {
    r = comm(s, OP_TP_COPY, v, 0, at);
  }
  if (!r) return NULL;
  spec_clear(r);
  r->shard.gpartial = TPB;
  return s->gathered[v->id] = r;
}

/* v whole on every rank, with a whole gradient (for replicated compute). */
static Value *whole(S *s, Value *v, const Node *at) {
  if (is_whole(v)) return v;
  if (s->whole[v->id]) return s->whole[v->id];
  Value *r;
  if (partial(v)) {
    r = comm(s, OP_ALLREDUCE, v, 0, at);
  } else {
    if (v->shard.nseg > 1) {
      fail(s, at, "cannot gather a value split in segments");
      return NULL;
    }
    r = comm(s, OP_ALLGATHER, v, split_dim(v), at);
  }
  if (r) spec_clear(r);
  return s->whole[v->id] = r;
}

/* Replicated parameter p read where the computation is split over tp:
 * its gradient is a partial sum over tp. */
static void grad_partial(Value *p) {
  if (p->role == ROLE_PARAM) p->grad_partial |= TPB;
}

/* ---- parameters ---- */

static void shard_param(S *s, Value *p) {
  spec_clear(p);
  int d = p->tph == TPH_COL || p->tph == TPH_VOCAB ? 0 : p->tph == TPH_ROW ? 1 : -1;
  if (d < 0 || d >= p->shape.ndim) return;
  int64_t n = p->shape.d[d].n;
  int nseg = p->tph == TPH_COL && p->tph_nseg > 1 ? p->tph_nseg : 1;
  for (int k = 0; k < nseg; k++)
    if ((nseg > 1 ? p->tph_seg[k] : n) % s->tp) {
      /* The builtins checked heads, hidden sizes and vocabularies; a
       * parameter that still does not divide stays replicated. */
      return;
    }
  spec_split(p, d);
  p->shard.nseg = (int8_t)nseg;
  for (int k = 0; k < nseg && nseg > 1; k++) p->shard.seg[k] = p->tph_seg[k];
  p->shape.d[d].n = n / s->tp;
}

/* ---- per-op rules ---- */

static void copy_spec_out(Node *n, const Value *from) {
  for (int j = 0; j < n->nout; j++) {
    n->outs[j]->shard = from->shard;
    n->outs[j]->shard.gpartial = 0;
  }
}

/* Re-runs n's shape rule on its (now local) inputs. */
static void reshape_node(S *s, Node *n) {
  char err[256];
  if (ir_ops[n->op].shape(n, err, sizeof err)) fail(s, n, "internal: %s: %s", ir_ops[n->op].name, err);
}

/* dims of b (broadcast against a's trailing dims) */
static void rule_binary(S *s, Node *n) {
  Value *a = n->in[0], *b = n->in[1];
  bool linear = n->op == OP_ADD || n->op == OP_SUB;
  if (partial(a) && partial(b) && linear) {
    spec_clear(n->out);
    n->out->shard.partial = TPB;
    return;
  }
  if (partial(a)) a = resolve(s, a, n);
  if (a && partial(b)) b = resolve(s, b, n);
  if (!a || !b) return;
  int off = a->shape.ndim - b->shape.ndim;
  int da = split_dim(a), db = split_dim(b);
  if (da >= 0 && da >= off) {
    /* a's split dim is one of b's: b must be split alike. */
    if (db != da - off) {
      if (db < 0 && b->role == ROLE_PARAM) {
        b = comm(s, OP_SHARD, b, da - off, n);
        if (!b) return;
        spec_split(b, da - off);
        grad_partial(n->in[1]);
      } else {
        /* bring both to whole */
        a = whole(s, a, n);
        b = whole(s, b, n);
        if (!a || !b) return;
      }
    } else if (a->shard.nseg != b->shard.nseg) {
      fail(s, n, "%s of tensors split in different segments", ir_ops[n->op].name);
      return;
    }
  } else if (da >= 0) {
    /* split on a dim b broadcasts over: b's gradient sums over the shards */
    if (db >= 0) {
      b = whole(s, b, n);
      if (!b) return;
    }
    if (b->role == ROLE_PARAM) grad_partial(b);
    else b = gathered(s, b, n);
    if (!b) return;
  } else if (db >= 0) {
    /* a whole, b split: compute whole */
    b = whole(s, b, n);
    if (!b) return;
  }
  n->in[0] = a;
  n->in[1] = b;
  reshape_node(s, n);
  copy_spec_out(n, a);
}

static void rule_matmul(S *s, Node *n) {
  Value *x = n->in[0], *w = n->in[1];
  int dw = split_dim(w);
  int last = x->shape.ndim - 1;
  if (dw == 0) {
    /* column-parallel: whole input (gradient partial), output split on its last dim */
    x = gathered(s, x, n);
    if (!x) return;
    n->in[0] = x;
    reshape_node(s, n);
    spec_split(n->out, n->out->shape.ndim - 1);
    n->out->shard.nseg = w->shard.nseg;
    memcpy(n->out->shard.seg, w->shard.seg, sizeof w->shard.seg);
    return;
  }
  if (dw == 1) {
    /* row-parallel: input split on its last dim, output a partial sum */
    if (partial(x)) x = resolve(s, x, n);
    if (!x) return;
    if (split_dim(x) != last) {
      fail(s, n, "row-parallel weight '%s' needs its input split on the features", w->name);
      return;
    }
    n->in[0] = x;
    reshape_node(s, n);
    spec_clear(n->out);
    n->out->shard.partial = TPB;
    return;
  }
  /* replicated weight: rows may be split (sequence shards), features not */
  if (partial(x)) x = resolve(s, x, n);
  if (!x) return;
  if (split_dim(x) == last) x = whole(s, x, n);
  if (!x) return;
  if (split_dim(x) >= 0) grad_partial(w);
  n->in[0] = x;
  reshape_node(s, n);
  copy_spec_out(n, x);
}

/* Elementwise or row-wise unary ops: any split, no pending sums (except
 * scale, which is linear); row-wise ones need the last dim whole. */
static void rule_unary(S *s, Node *n, bool rowwise) {
  Value *x = n->in[0];
  if (partial(x) && n->op != OP_SCALE && n->op != OP_SLICE) x = resolve(s, x, n);
  if (!x) return;
  if (rowwise && split_dim(x) == x->shape.ndim - 1) x = whole(s, x, n);
  if (!x) return;
  if (x->shard.gpartial) {
    fail(s, n, "internal: %s of a gathered value", ir_ops[n->op].name);
    return;
  }
  n->in[0] = x;
  reshape_node(s, n);
  copy_spec_out(n, x);
}

static void rule_norm(S *s, Node *n) {
  Value *x = n->in[0];
  if (partial(x)) x = resolve(s, x, n);
  if (!x) return;
  int last = x->shape.ndim - 1;
  if (split_dim(x) == last) x = whole(s, x, n);
  if (!x) return;
  n->in[0] = x;
  for (int k = 1; k < n->nin; k++) {
    if (split_dim(n->in[k]) >= 0 || partial(n->in[k])) {
      fail(s, n, "norm weights must be replicated");
      return;
    }
    if (split_dim(x) >= 0) grad_partial(n->in[k]);
  }
  reshape_node(s, n);
  for (int j = 0; j < n->nout; j++) {
    spec_clear(n->outs[j]);
    int d = split_dim(x);
    if (d >= 0) n->outs[j]->shard.axis[d] = AX_TP; /* stats drop only the last dim */
  }
}

static void rule_reshape(S *s, Node *n) {
  Value *x = n->in[0];
  int d = split_dim(x);
  if (d < 0) {
    n->out->shard = x->shard;
    return;
  }
  if (x->shard.nseg > 1) {
    fail(s, n, "cannot reshape a value split in segments");
    return;
  }
  /* The split dim d maps to the target dim with the same leading product. */
  int64_t pre = 1;
  for (int k = 0; k < d; k++) pre *= x->shape.d[k].n;
  int64_t p2 = 1;
  int e = -1;
  for (int k = 0; k < n->a.ni; k++) {
    if (p2 == pre && n->a.i[k] % s->tp == 0) {
      e = k;
      break;
    }
    p2 *= n->a.i[k];
  }
  if (e < 0) {
    fail(s, n, "reshape cannot keep dim %d split", d);
    return;
  }
  n->a.i[e] /= s->tp;
  n->out->alias = NULL;
  reshape_node(s, n);
  n->out->alias = x;
  spec_split(n->out, e);
}

static void rule_slice(S *s, Node *n) {
  Value *x = n->in[0];
  int last = x->shape.ndim - 1;
  if (split_dim(x) != last) {
    reshape_node(s, n);
    copy_spec_out(n, x);
    return;
  }
  /* a slice of a split dim must be exactly one segment */
  int64_t start = 0, lstart = 0;
  int nseg = x->shard.nseg > 1 ? x->shard.nseg : 1;
  for (int k = 0; k < nseg; k++) {
    int64_t len = nseg > 1 ? x->shard.seg[k] : x->shape.d[last].n * s->tp;
    if (start == n->a.i[0] && len == n->a.i[1]) {
      n->a.i[0] = lstart;
      n->a.i[1] = len / s->tp;
      reshape_node(s, n);
      spec_split(n->out, last);
      return;
    }
    start += len;
    lstart += len / s->tp;
  }
  fail(s, n, "slice [%lld, %lld) does not match a segment of its split input",
       (long long)n->a.i[0], (long long)(n->a.i[0] + n->a.i[1]));
}

static void rule_attention(S *s, Node *n) {
  int split = 0;
  for (int k = 0; k < 3; k++) {
    Value *v = n->in[k];
    if (partial(v)) v = resolve(s, v, n);
    if (!v) return;
    n->in[k] = v;
    split += split_dim(v) == 2;
  }
  if (split != 0 && split != 3) {
    for (int k = 0; k < 3; k++) {
      n->in[k] = whole(s, n->in[k], n);
      if (!n->in[k]) return;
    }
    split = 0;
  }
  for (int k = 0; k < 3 && !split; k++)
    if (split_dim(n->in[k]) >= 0) {
      n->in[k] = whole(s, n->in[k], n);
      if (!n->in[k]) return;
    }
  reshape_node(s, n);
  spec_clear(n->outs[0]);
  spec_clear(n->outs[1]);
  if (split) {
    spec_split(n->outs[0], 2);
    spec_split(n->outs[1], 1);
  }
}

static void rule_gather(S *s, Node *n) {
  Value *t = n->in[0];
  if (split_dim(n->in[1]) >= 0) n->in[1] = whole(s, n->in[1], n);
  if (split_dim(t) == 0) {
    n->a.i[0] = 1;
    n->a.i[1] = s->tp;
    n->a.i[2] = AX_TP;
    n->a.ni = 3;
    reshape_node(s, n);
    spec_clear(n->out);
    n->out->shard.partial = TPB;
    return;
  }
  if (split_dim(t) >= 0) {
    fail(s, n, "embedding table split on its features");
    return;
  }
  reshape_node(s, n);
  spec_clear(n->out);
}

static void rule_xent(S *s, Node *n) {
  Value *l = n->in[0];
  if (partial(l)) l = whole(s, l, n);
  if (!l) return;
  int last = l->shape.ndim - 1;
  if (split_dim(l) >= 0 && split_dim(l) != last) l = whole(s, l, n);
  if (!l) return;
  n->in[0] = l;
  if (split_dim(l) == last) {
    n->a.i[1] = 1;
    n->a.i[2] = s->tp;
    n->a.i[3] = AX_TP;
    n->a.ni = 4;
  }
  reshape_node(s, n);
  spec_clear(n->out);
}

/* A projection to the vocabulary read only by the cross-entropy becomes
 * column-parallel (its output split over the vocabulary). */
static void prefer_vocab_parallel(S *s) {
  Graph *g = s->g;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = g->nodes.data[i];
    if (n->op != OP_CROSS_ENTROPY) continue;
    Node *mm = n->in[0]->def;
    if (!mm || mm->op != OP_MATMUL || n->in[0]->nuses != 1) continue;
    Value *w = mm->in[1];
    if (w->role == ROLE_PARAM && w->tph == TPH_NONE && w->shape.d[0].n % s->tp == 0)
      w->tph = TPH_COL, w->tph_nseg = 1;
  }
}

/* ---- sp=ring: the sequence split over the sp axis ----
 *
 * After the tp rewrite (if any), every activation that depends on the data
 * holds this rank's contiguous chunk of the sequence: rank coord r of the sp
 * axis holds tokens [r·T/N, (r+1)·T/N).  Token-wise ops run unchanged on the
 * chunk; attention becomes ring attention over sp (i1 = N, i2 = the axis),
 * rotary embeddings take their positions from the chunk's start, and a
 * replicated tensor added along the sequence (learned positions) is read
 * through a shard node (its gradient lands in this rank's rows).  Every
 * parameter's gradient is then partial over sp: the step sums it over the
 * data ranks (dp x sp), and the loss, a mean over this rank's tokens,
 * averages over them. */

typedef struct RingS {
  Graph *g;
  int sp;
  bool failed;
} RingS;

enum { SPB = 1u << AX_SP };

static void ring_fail(RingS *r, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ring_fail(RingS *r, const Node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(n->loc, "ring attention (sp=ring:%d): %s", r->sp, msg);
  r->failed = true;
}

/* The dim of v split over sp (its sequence), -1 for none. */
static int seq_dim(const Value *v) {
  for (int d = 0; d < v->shape.ndim; d++)
    if (v->shard.axis[d] == AX_SP) return d;
  return -1;
}

static void set_seq(Value *v, int d) {
  if (d >= 0 && d < v->shape.ndim) v->shard.axis[d] = AX_SP;
}

static void ring_reshape_node(RingS *r, Node *n) {
  char err[256];
  if (ir_ops[n->op].shape(n, err, sizeof err))
    ring_fail(r, n, "internal: %s: %s", ir_ops[n->op].name, err);
}

/* v (not split over sp) cut to this rank's chunk of its dim d. */
static Value *ring_shard(RingS *r, Value *v, int d, const Node *at) {
  if (v->shape.d[d].n % r->sp) {
    ring_fail(r, at, "%s has %lld rows along the sequence, not divisible by %d",
              v->name ? v->name : "an operand", (long long)v->shape.d[d].n, r->sp);
    return NULL;
  }
  Attrs a = {0};
  a.i[0] = d;
  a.i[1] = r->sp;
  a.i[2] = AX_SP;
  a.ni = 3;
  Node *c = ir_add(r->g, OP_SHARD, &v, 1, &a, at->loc, at->scope, "shard");
  if (!c) {
    r->failed = true;
    return NULL;
  }
  c->out->shard = v->shard;
  c->out->shard.gpartial = 0;
  set_seq(c->out, d);
  return c->out;
}

/* Binary ops with broadcasting: an operand that is whole along the other's
 * sequence dim is cut to the chunk. */
static void ring_binary(RingS *r, Node *n) {
  int nd = n->out->shape.ndim, d = -1;
  for (int k = 0; k < 2; k++) {
    int sd = seq_dim(n->in[k]);
    if (sd >= 0) d = sd + nd - n->in[k]->shape.ndim;
  }
  for (int k = 0; k < 2 && d >= 0; k++) {
    Value *v = n->in[k];
    int want = d - (nd - v->shape.ndim);
    if (want < 0 || seq_dim(v) == want) continue;
    if (seq_dim(v) >= 0) {
      ring_fail(r, n, "%s of tensors split along different dims", ir_ops[n->op].name);
      return;
    }
    if (v->shape.d[want].n == 1) continue; /* broadcast along the sequence */
    n->in[k] = ring_shard(r, v, want, n);
    if (!n->in[k]) return;
  }
  ring_reshape_node(r, n);
  set_seq(n->out, d);
}

static void ring_reshape(RingS *r, Node *n, int d) {
  Value *x = n->in[0];
  int64_t pre = 1, p2 = 1;
  for (int k = 0; k < d; k++) pre *= x->shape.d[k].n;
  int e = -1;
  for (int k = 0; k < n->a.ni; k++) {
    if (p2 == pre && n->a.i[k] == x->shape.d[d].n * r->sp) {
      e = k;
      break;
    }
    p2 *= n->a.i[k];
  }
  if (e < 0) {
    ring_fail(r, n, "reshape cannot keep the sequence dim %d split", d);
    return;
  }
  n->a.i[e] /= r->sp;
  Value *al = n->out->alias;
  n->out->alias = NULL;
  ring_reshape_node(r, n);
  n->out->alias = al;
  set_seq(n->out, e);
}

static void ring_node(RingS *r, Node *n) {
  int d = -1;
  for (int k = 0; k < n->nin && d < 0; k++) d = seq_dim(n->in[k]);
  if (n->op == OP_INPUT) {
    Value *v = n->out;
    if (v->shape.ndim < 2 || v->shape.d[1].sym < 0) {
      ring_fail(r, n, "input %s has no sequence dim to split (ring attention needs inputs "
                      "such as tokens: i32[B, T])", v->name);
      return;
    }
    v->shape.d[1].n /= r->sp;
    set_seq(v, 1);
    return;
  }
  if (d < 0) return; /* parameters and what is computed from them alone */
  int last = n->in[0]->shape.ndim - 1;
  switch (n->op) {
  case OP_ADD:
  case OP_SUB:
  case OP_MUL:
    ring_binary(r, n);
    return;
  case OP_DROPOUT:
    if (n->a.f[0] > 0) {
      ring_fail(r, n, "dropout is not implemented yet with ring attention (its mask would "
                      "differ from the single-device run); use p = 0");
      return;
    }
    break;
  case OP_SOFTMAX:
  case OP_SLICE:
  case OP_MATMUL:
  case OP_LAYERNORM:
  case OP_RMSNORM:
    if (d == last) {
      ring_fail(r, n, "%s along the sequence", ir_ops[n->op].name);
      return;
    }
    break;
  case OP_MAP:
    for (int k = 0; k < n->nin; k++)
      if (seq_dim(n->in[k]) != d || !ir_shape_eq(&n->in[k]->shape, &n->in[0]->shape)) {
        ring_fail(r, n, "imported function on operands split differently");
        return;
      }
    break;
  case OP_ROPE:
    if (d != 1) break;
    n->a.i[0] = 1; /* positions start at this rank's chunk */
    n->a.i[1] = AX_SP;
    n->a.ni = 2;
    break;
  case OP_ATTENTION:
    for (int k = 0; k < 3; k++)
      if (seq_dim(n->in[k]) != 1) {
        ring_fail(r, n, "attention operands must all be split along the sequence");
        return;
      }
    n->a.i[1] = r->sp;
    n->a.i[2] = AX_SP;
    n->a.ni = 3;
    ring_reshape_node(r, n);
    set_seq(n->outs[0], 1);
    set_seq(n->outs[1], 2); /* lse [B, H, T] */
    return;
  case OP_RESHAPE:
    ring_reshape(r, n, d);
    return;
  case OP_GATHER:
    if (seq_dim(n->in[1]) != d || seq_dim(n->in[0]) >= 0) {
      ring_fail(r, n, "embedding table split along the sequence");
      return;
    }
    break;
  case OP_CROSS_ENTROPY:
    if (seq_dim(n->in[0]) != seq_dim(n->in[1])) {
      ring_fail(r, n, "logits and targets split differently");
      return;
    }
    ring_reshape_node(r, n); /* a mean over this rank's tokens */
    return;
  case OP_SCALE:
  case OP_GELU:
  case OP_RELU:
  case OP_SILU:
  case OP_ALLREDUCE:
  case OP_ALLGATHER:
  case OP_ALLGATHER_G:
  case OP_REDUCE_SCATTER:
  case OP_TP_COPY:
    if ((ir_is_comm(n->op) && n->op != OP_ALLREDUCE && n->op != OP_TP_COPY && n->a.i[0] == d)) {
      ring_fail(r, n, "%s along the sequence", ir_ops[n->op].name);
      return;
    }
    break;
  default:
    ring_fail(r, n, "internal: no ring rule for %s", ir_ops[n->op].name);
    return;
  }
  ring_reshape_node(r, n);
  for (int j = 0; j < n->nout; j++) set_seq(n->outs[j], d);
}

static int shard_ring(Graph *g, int sp) {
  RingS r = {g, sp, false};
  PtrVec old = g->nodes;
  memset(&g->nodes, 0, sizeof g->nodes);
  for (int i = 0; i < old.len && !r.failed; i++) {
    Node *n = old.data[i];
    ring_node(&r, n);
    vec_push(&g->nodes, n);
  }
  if (r.failed) return -1;
  for (int i = 0; i < g->params.len; i++) ((Value *)g->params.data[i])->grad_partial |= SPB;
  for (int i = 0; i < g->nodes.len; i++) ((Node *)g->nodes.data[i])->id = i;
  return 0;
}

int pass_shard(Module *m) {
  Graph *g = m->graph;
  const Plan *p = &m->train.plan;
  if (!g || g->nfwd) return 0;
  if (p->tp > 1 && shard_tp(m)) return -1;
  if (p->tp2d > 1 && shard_tp2d(m)) return -1;
  if (p->sp_kind == SP_RING && p->sp > 1) return shard_ring(g, p->sp);
  return 0;
}

static int shard_tp(Module *m) {
  Graph *g = m->graph;
  const Plan *p = &m->train.plan;
  S s = {0};
  s.g = g;
  s.tp = p->tp;
  s.seqpar = p->sp_kind == SP_MEGATRON;
  size_t cap = (size_t)g->values.len * 8 + 64;
  s.gathered = arena_alloc(sizeof(Value *) * cap);
  s.whole = arena_alloc(sizeof(Value *) * cap);
  s.act = arena_alloc(sizeof(Value *) * cap);
  prefer_vocab_parallel(&s);
  PtrVec old = g->nodes;
  memset(&g->nodes, 0, sizeof g->nodes);
  for (int i = 0; i < old.len && !s.failed; i++) {
    Node *n = old.data[i];
    if ((size_t)g->values.len + 8 >= cap) {
      diag_error(n->loc, "internal: shard pass value table overflow");
      return -1;
    }
    switch (n->op) {
    case OP_INPUT:
      break;
    case OP_PARAM:
      shard_param(&s, n->out);
      break;
    case OP_MATMUL:
      rule_matmul(&s, n);
      break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
      rule_binary(&s, n);
      break;
    case OP_SCALE:
    case OP_GELU:
    case OP_RELU:
    case OP_SILU:
    case OP_ROPE:
    case OP_MAP:
      rule_unary(&s, n, false);
      break;
    case OP_DROPOUT:
      if (n->a.f[0] > 0) {
        fail(&s, n, "dropout under tensor parallelism is not implemented yet (its mask would "
                    "differ from the single-device run); use p = 0");
        break;
      }
      rule_unary(&s, n, false);
      break;
    case OP_SOFTMAX:
      rule_unary(&s, n, true);
      break;
    case OP_LAYERNORM:
    case OP_RMSNORM:
      rule_norm(&s, n);
      break;
    case OP_RESHAPE:
      rule_reshape(&s, n);
      break;
    case OP_SLICE:
      rule_slice(&s, n);
      break;
    case OP_ATTENTION:
      rule_attention(&s, n);
      break;
    case OP_GATHER:
      rule_gather(&s, n);
      break;
    case OP_CROSS_ENTROPY:
      rule_xent(&s, n);
      break;
    default:
      fail(&s, n, "internal: no sharding rule for %s", ir_ops[n->op].name);
      break;
    }
    vec_push(&g->nodes, n);
  }
  if (s.failed) return -1;
  /* The loss is whole on every rank of the axis. */
  if (g->loss && !is_whole(g->loss)) {
    diag_error(g->loss->loc, "internal: the loss is not replicated over tp");
    return -1;
  }
  for (int i = 0; i < g->nodes.len; i++) ((Node *)g->nodes.data[i])->id = i;
  return 0;
}
