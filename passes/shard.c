/* shard.c — tensor parallelism (and sp=ring, at the end): sharding specs per
 * value, rules per op class, and the communication that makes every rank's
 * graph compute its share.  The rules that do not depend on the axis are
 * shared with shard2d.c (shardrules.c).
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

#include "shardrules.h"

typedef struct S {
  Sharder sh;      /* first member: the rules receive &s->sh */
  bool seqpar;     /* sp=megatron: activations outside tp regions split on dim 1 */
  Value **gathered;/* value id -> its whole* (tp_copy / all_gather_g) version */
  Value **whole;   /* value id -> its whole version (all_reduce / all_gather) */
  Value **act;     /* value id -> its resolved partial (reduce to the activation spec) */
} S;

enum { TPB = 1u << AX_TP };

static int split_dim(const Value *v) { return sh_dim(v, AX_TP); }
static bool partial(const Value *v) { return v->shard.partial & TPB; }

static void spec_split(Value *v, int d) {
  sh_clear(v);
  v->shard.axis[d] = AX_TP;
}

/* A communication node on the tp axis converting v; NULL after an error. */
static Value *comm(S *s, OpKind op, Value *v, int dim, const Node *at) {
  return sh_comm(&s->sh, op, v, dim, AX_TP, at);
}

/* The spec activations have between tensor-parallel regions. */
static int act_dim(S *s, const Value *v) { return s->seqpar && v->shape.ndim >= 3 ? 1 : -1; }

/* v with its partial sum resolved to the activation spec. */
static Value *resolve(S *s, Value *v, const Node *at) {
  if (!partial(v)) return v;
  if (s->act[v->id]) return s->act[v->id];
  int d = act_dim(s, v);
  Value *r;
  if (d >= 0 && v->shape.d[d].n % s->sh.P == 0) {
    r = comm(s, OP_REDUCE_SCATTER, v, d, at);
    if (r) spec_split(r, d);
  } else {
    r = comm(s, OP_ALLREDUCE, v, 0, at);
    if (r) sh_clear(r);
  }
  /* the reduction of partial sums made outside any layer (a vocabulary-
   * parallel embedding's, read first by a layer) is its producer's: the
   * layer's input is then the reduced value (under Megatron-SP the
   * sequence shard, not the whole partial sums: what full recompute keeps
   * of the layer, and what a pipeline cut before it sends) */
  char b1[256], b2[256];
  if (r && v->def && r->def && !strchr(stage_layer_of(v->def, b1, sizeof b1), '.') &&
      strchr(stage_layer_of(at, b2, sizeof b2), '.'))
    r->def->scope = v->def->scope;
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
      sh_fail(&s->sh, at, "cannot gather a value split in segments");
      return NULL;
    }
    r = comm(s, OP_ALLGATHER_G, v, d, at);
  } else {
    r = comm(s, OP_TP_COPY, v, 0, at);
  }
  if (!r) return NULL;
  sh_clear(r);
  r->shard.gpartial = TPB;
  return s->gathered[v->id] = r;
}

/* v whole on every rank, with a whole gradient (for replicated compute). */
static Value *whole(S *s, Value *v, const Node *at) {
  if (sh_whole(&s->sh, v)) return v;
  if (s->whole[v->id]) return s->whole[v->id];
  Value *r;
  if (partial(v)) {
    r = comm(s, OP_ALLREDUCE, v, 0, at);
  } else {
    if (v->shard.nseg > 1) {
      sh_fail(&s->sh, at, "cannot gather a value split in segments");
      return NULL;
    }
    r = comm(s, OP_ALLGATHER, v, split_dim(v), at);
  }
  if (r) sh_clear(r);
  return s->whole[v->id] = r;
}

/* Replicated parameter p read where the computation is split over tp:
 * its gradient is a partial sum over tp. */
static void grad_partial(Value *p) {
  if (p->role == ROLE_PARAM) p->grad_partial |= TPB;
}

/* ---- per-class rules ---- */

/* Parameters split by their hint; one that does not divide stays
 * replicated (the builtins checked heads, hidden sizes and vocabularies). */
static void rule_leaf(Sharder *sh, Node *n) {
  Value *p = n->out;
  if (n->op != OP_PARAM) return;
  sh_clear(p);
  int d = p->tph == TPH_COL || p->tph == TPH_VOCAB ? 0 : p->tph == TPH_ROW ? 1 : -1;
  if (d < 0 || d >= p->shape.ndim) return;
  int nseg = p->tph == TPH_COL && p->tph_nseg > 1 ? p->tph_nseg : 1;
  if (sh_bad_segment(p, d, nseg, sh->P)) return;
  sh_split_param(sh, p, d, AX_TP, nseg);
  p->shard.nseg = (int8_t)nseg; /* one segment at least: a product inherits it */
}

/* dims of b (broadcast against a's trailing dims) */
static void rule_binary(Sharder *sh, Node *n) {
  S *s = (S *)sh;
  Value *a = n->in[0], *b = n->in[1];
  bool linear = n->op == OP_ADD || n->op == OP_SUB;
  /* a sum of partial sums stays one (one reduction for both), but not
   * under Megatron-SP, where activations are sequence shards: there the
   * residual stream would stay whole on every rank (a model without
   * biases: the embedding's and every row-parallel output's partial sums
   * added up, each norm reduce-scattering the running sum), its copies in
   * the stash and its pipeline messages t times the shard (Llama 3 405B's
   * at tp=8: 268 MB a message, not 34); each operand reduce-scattered is
   * the same traffic, as Megatron-LM does it */
  if (partial(a) && partial(b) && linear && !(s->seqpar && act_dim(s, n->out) >= 0)) {
    sh_clear(n->out);
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
      sh_fail(sh, n, "%s of tensors split in different segments", ir_ops[n->op].name);
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
  sh_rerun(sh, n);
  sh_copy_spec(n, a);
}

static void rule_matmul(Sharder *sh, Node *n) {
  S *s = (S *)sh;
  Value *x = n->in[0], *w = n->in[1];
  int dw = split_dim(w);
  int last = x->shape.ndim - 1;
  if (dw == 0) {
    /* column-parallel: whole input (gradient partial), output split on its last dim */
    x = gathered(s, x, n);
    if (!x) return;
    n->in[0] = x;
    sh_rerun(sh, n);
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
      sh_fail(sh, n, "row-parallel weight '%s' needs its input split on the features", w->name);
      return;
    }
    n->in[0] = x;
    sh_rerun(sh, n);
    sh_clear(n->out);
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
  sh_rerun(sh, n);
  sh_copy_spec(n, x);
}

/* Elementwise (and rope, on the heads) or row-wise ops: any split, no
 * pending sums (except scale, which is linear); row-wise ones need the
 * last dim whole.  An imported function's other operands are taken as
 * they are. */
static void unary(S *s, Node *n, bool rowwise) {
  Value *x = n->in[0];
  if (partial(x) && n->op != OP_SCALE) x = resolve(s, x, n);
  if (!x) return;
  if (rowwise && split_dim(x) == x->shape.ndim - 1) x = whole(s, x, n);
  if (!x) return;
  if (x->shard.gpartial) {
    sh_fail(&s->sh, n, "internal: %s of a gathered value", ir_ops[n->op].name);
    return;
  }
  n->in[0] = x;
  sh_rerun(&s->sh, n);
  sh_copy_spec(n, x);
}

static void rule_elementwise(Sharder *sh, Node *n) {
  if (sh_dropout_ok(sh, n, "under tensor parallelism is not implemented yet")) unary((S *)sh, n, false);
}

static void rule_rowwise(Sharder *sh, Node *n) { unary((S *)sh, n, true); }

/* A reshape that keeps its input's split is a view of it (as ir_add made
 * every reshape). */
static void rule_view(Sharder *sh, Node *n) {
  sh_view(sh, n);
  if (!sh->failed) n->out->alias = n->in[0];
}

static void rule_norm(Sharder *sh, Node *n) {
  S *s = (S *)sh;
  Value *x = n->in[0];
  if (partial(x)) x = resolve(s, x, n);
  if (!x) return;
  int last = x->shape.ndim - 1;
  if (split_dim(x) == last) x = whole(s, x, n);
  if (!x) return;
  n->in[0] = x;
  for (int k = 1; k < n->nin; k++) {
    if (split_dim(n->in[k]) >= 0 || partial(n->in[k])) {
      sh_fail(sh, n, "norm weights must be replicated");
      return;
    }
    if (split_dim(x) >= 0) grad_partial(n->in[k]);
  }
  sh_rerun(sh, n);
  for (int j = 0; j < n->nout; j++) {
    sh_clear(n->outs[j]);
    int d = split_dim(x);
    if (d >= 0) n->outs[j]->shard.axis[d] = AX_TP; /* stats drop only the last dim */
  }
}

static void rule_attention(Sharder *sh, Node *n) {
  S *s = (S *)sh;
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
  sh_rerun(sh, n);
  sh_clear(n->outs[0]);
  sh_clear(n->outs[1]);
  if (split) {
    spec_split(n->outs[0], 2);
    spec_split(n->outs[1], 1);
  }
}

static void rule_gather(Sharder *sh, Node *n) {
  S *s = (S *)sh;
  int dt = split_dim(n->in[0]);
  if (split_dim(n->in[1]) >= 0) n->in[1] = whole(s, n->in[1], n);
  if (dt > 0) {
    sh_fail(sh, n, "embedding table split on its features");
    return;
  }
  /* the table's rows split: each rank's lookups, zero outside its rows */
  sh_vocab_parallel(sh, n, dt == 0 ? AX_TP : -1);
  if (dt == 0) n->out->shard.partial = TPB;
}

static void rule_xent(Sharder *sh, Node *n) {
  S *s = (S *)sh;
  Value *l = n->in[0];
  int last = l->shape.ndim - 1;
  /* logits whole, or split over the vocabulary */
  if (partial(l) || (split_dim(l) >= 0 && split_dim(l) != last)) l = whole(s, l, n);
  if (!l) return;
  n->in[0] = l;
  sh_vocab_parallel(sh, n, split_dim(l) == last ? AX_TP : -1);
}

static const TpRules tp_rules = {
    .leaf = rule_leaf, .elementwise = rule_elementwise, .rowwise = rule_rowwise, .view = rule_view,
    .binary = rule_binary, .norm = rule_norm, .matmul = rule_matmul, .attention = rule_attention,
    .gather = rule_gather, .loss = rule_xent, .channels = AX_TP,
};

/* A projection to the vocabulary read only by the cross-entropy becomes
 * column-parallel (its output split over the vocabulary). */
static void prefer_vocab_parallel(S *s) {
  Graph *g = s->sh.g;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = g->nodes.data[i];
    Node *mm = n->op == OP_CROSS_ENTROPY ? sh_vocab_matmul(n) : NULL;
    if (!mm) continue;
    Value *w = mm->in[1];
    if (w->role == ROLE_PARAM && w->tph == TPH_NONE && w->shape.d[0].n % s->sh.P == 0)
      w->tph = TPH_COL, w->tph_nseg = 1;
  }
}

static int shard_tp(Module *m) {
  Graph *g = m->graph;
  const Plan *p = &m->train.plan;
  S s = {0};
  s.sh = (Sharder){.g = g, .P = p->tp, .axes = TPB, .tp = &tp_rules,
                   .what = arena_printf("tensor parallel (tp=%d)", p->tp)};
  s.seqpar = p->sp_kind == SP_MEGATRON;
  s.sh.cap = (size_t)g->values.len * 8 + 64;
  s.gathered = arena_alloc(sizeof(Value *) * s.sh.cap);
  s.whole = arena_alloc(sizeof(Value *) * s.sh.cap);
  s.act = arena_alloc(sizeof(Value *) * s.sh.cap);
  prefer_vocab_parallel(&s);
  return sh_rewrite(&s.sh, sh_tp_rule);
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

enum { SPB = 1u << AX_SP };

static void set_seq(Value *v, int d) {
  if (d >= 0 && d < v->shape.ndim) v->shard.axis[d] = AX_SP;
}

/* v (not split over sp) cut to this rank's chunk of its dim d. */
static Value *ring_shard(Sharder *r, Value *v, int d, const Node *at) {
  if (!sh_divisible(r, at, v, d, "rows along the sequence")) return NULL;
  Value *c = sh_comm(r, OP_SHARD, v, d, AX_SP, at);
  if (c) set_seq(c, d);
  return c;
}

/* Binary ops with broadcasting: an operand that is whole along the other's
 * sequence dim is cut to the chunk. */
static void ring_binary(Sharder *r, Node *n) {
  int nd = n->out->shape.ndim, d = -1;
  for (int k = 0; k < 2; k++) {
    int sd = sh_dim(n->in[k], AX_SP);
    if (sd >= 0) d = sd + nd - n->in[k]->shape.ndim;
  }
  for (int k = 0; k < 2 && d >= 0; k++) {
    Value *v = n->in[k];
    int want = d - (nd - v->shape.ndim);
    if (want < 0 || sh_dim(v, AX_SP) == want) continue;
    if (sh_dim(v, AX_SP) >= 0) {
      sh_fail(r, n, "%s of tensors split along different dims", ir_ops[n->op].name);
      return;
    }
    if (v->shape.d[want].n == 1) continue; /* broadcast along the sequence */
    n->in[k] = ring_shard(r, v, want, n);
    if (!n->in[k]) return;
  }
  sh_rerun(r, n);
  set_seq(n->out, d);
}

static void ring_input(Sharder *r, Node *n) {
  Value *v = n->out;
  if (v->shape.ndim < 2 || v->shape.d[1].sym < 0) {
    sh_fail(r, n, "input %s has no sequence dim to split (ring attention needs inputs "
                  "such as tokens: i32[B, T])", v->name);
    return;
  }
  v->shape.d[1].n /= r->P;
  set_seq(v, 1);
}

/* Ops on the sequence chunk, by class: d is the sequence dim of the first
 * operand split along it. */
static void ring_node(Sharder *r, Node *n) {
  int d = -1;
  for (int k = 0; k < n->nin && d < 0; k++) d = sh_dim(n->in[k], AX_SP);
  if (n->op == OP_INPUT) {
    ring_input(r, n);
    return;
  }
  if (d < 0) return; /* parameters and what is computed from them alone */
  int last = n->in[0]->shape.ndim - 1;
  switch (ir_ops[n->op].cls) {
  case OPC_BINARY:
    ring_binary(r, n);
    return;
  case OPC_UNARY:
    if (!sh_dropout_ok(r, n, "is not implemented yet with ring attention")) return;
    break;
  case OPC_ROWWISE:
  case OPC_SLICE:
  case OPC_MATMUL:
  case OPC_NORM:
    if (d == last) {
      sh_fail(r, n, "%s along the sequence", ir_ops[n->op].name);
      return;
    }
    break;
  case OPC_MAP:
    for (int k = 0; k < n->nin; k++)
      if (sh_dim(n->in[k], AX_SP) != d || !ir_shape_eq(&n->in[k]->shape, &n->in[0]->shape)) {
        sh_fail(r, n, "imported function on operands split differently");
        return;
      }
    break;
  case OPC_ROPE:
    if (d != 1) break;
    n->a.i[0] = 1; /* positions start at this rank's chunk */
    n->a.i[1] = AX_SP;
    n->a.ni = 2;
    break;
  case OPC_ATTENTION:
    for (int k = 0; k < 3; k++)
      if (sh_dim(n->in[k], AX_SP) != 1) {
        sh_fail(r, n, "attention operands must all be split along the sequence");
        return;
      }
    n->a.i[1] = r->P;
    n->a.i[2] = AX_SP;
    n->a.ni = 3;
    sh_rerun(r, n);
    set_seq(n->outs[0], 1);
    set_seq(n->outs[1], 2); /* lse [B, H, T] */
    return;
  case OPC_VIEW:
    sh_view(r, n);
    return;
  case OPC_GATHER:
    if (sh_dim(n->in[1], AX_SP) != d || sh_dim(n->in[0], AX_SP) >= 0) {
      sh_fail(r, n, "embedding table split along the sequence");
      return;
    }
    break;
  case OPC_LOSS:
    if (sh_dim(n->in[0], AX_SP) != sh_dim(n->in[1], AX_SP)) {
      sh_fail(r, n, "logits and targets split differently");
      return;
    }
    sh_rerun(r, n); /* a mean over this rank's tokens */
    return;
  case OPC_COMM:
    /* a collective of the tp rewrite along another dim runs on the chunk */
    if (n->op != OP_ALLREDUCE && n->op != OP_TP_COPY && n->a.i[0] == d) {
      sh_fail(r, n, "%s along the sequence", ir_ops[n->op].name);
      return;
    }
    break;
  default:
    sh_fail(r, n, "internal: no ring rule for %s", ir_ops[n->op].name);
    return;
  }
  sh_rerun(r, n);
  for (int j = 0; j < n->nout; j++) set_seq(n->outs[j], d);
}

static int shard_ring(Graph *g, int sp) {
  Sharder r = {.g = g, .P = sp, .axes = SPB, .what = arena_printf("ring attention (sp=ring:%d)", sp)};
  if (sh_rewrite(&r, ring_node)) return -1;
  for (int i = 0; i < g->params.len; i++) ((Value *)g->params.data[i])->grad_partial |= SPB;
  return 0;
}

int pass_shard(Module *m) {
  Graph *g = m->graph;
  const Plan *p = &m->train.plan;
  if (!g || g->nfwd) return 0;
  if (optplace_check_blocks(m)) return -1;
  if (p->tp > 1 && shard_tp(m)) return -1;
  if (p->tp2d > 1 && shard_tp2d(m)) return -1;
  if (optplace_check_tp(m)) return -1;
  if (p->sp_kind == SP_RING && p->sp > 1) return shard_ring(g, p->sp);
  return 0;
}
