/* shardrules.c — the sharding rules written once for any mesh axes (see
 * shardrules.h): used by shard.c (tp, sp=ring) and shard2d.c (tp2d). */
#include <stdarg.h>
#include <string.h>

#include "shardrules.h"

void sh_fail(Sharder *s, const Node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(n->loc, "%s: %s", s->what, msg);
  s->failed = true;
}

int sh_dim(const Value *v, int ax) {
  for (int d = 0; d < v->shape.ndim; d++)
    if (v->shard.axis[d] == ax) return d;
  return -1;
}

/* Whether mesh axis ax (-1: none) is one the pass splits over. */
static bool mine(const Sharder *s, int ax) { return ax >= 0 && (s->axes >> ax & 1); }

bool sh_whole_over(const Value *v, uint32_t axes) {
  for (int d = 0; d < v->shape.ndim; d++)
    if (v->shard.axis[d] >= 0 && (axes >> v->shard.axis[d] & 1)) return false;
  return !(v->shard.partial & axes);
}

bool sh_whole(const Sharder *s, const Value *v) { return sh_whole_over(v, s->axes); }

void sh_clear(Value *v) {
  for (int d = 0; d < IR_MAXDIM; d++) v->shard.axis[d] = -1;
  v->shard.partial = v->shard.gpartial = 0;
  v->shard.nseg = 0;
}

void sh_copy_spec(Node *n, const Value *from) {
  for (int j = 0; j < n->nout; j++) {
    n->outs[j]->shard = from->shard;
    n->outs[j]->shard.gpartial = 0;
  }
}

void sh_rerun(Sharder *s, Node *n) {
  char err[256];
  if (ir_ops[n->op].shape(n, err, sizeof err)) sh_fail(s, n, "internal: %s: %s", ir_ops[n->op].name, err);
}

Value *sh_comm(Sharder *s, OpKind op, Value *v, int dim, int ax, const Node *at) {
  if (s->cap && (size_t)s->g->values.len + 4 >= s->cap) {
    sh_fail(s, at, "internal: value table overflow");
    return NULL;
  }
  Attrs a = {0};
  a.i[0] = dim;
  a.i[1] = s->P;
  a.i[2] = ax;
  a.ni = 3;
  Node *n = ir_add(s->g, op, &v, 1, &a, at->loc, at->scope, ir_ops[op].name);
  if (!n) {
    s->failed = true;
    return NULL;
  }
  n->out->shard = v->shard;
  n->out->shard.gpartial = 0;
  return n->out;
}

bool sh_divisible(Sharder *s, const Node *at, const Value *v, int d, const char *what) {
  if (v->shape.d[d].n % s->P == 0) return true;
  sh_fail(s, at, "%s has %lld %s, not divisible by %d", v->name ? v->name : "an operand",
          (long long)v->shape.d[d].n, what, s->P);
  return false;
}

int64_t sh_bad_segment(const Value *p, int d, int nseg, int P) {
  for (int k = 0; k < (nseg > 1 ? nseg : 1); k++) {
    int64_t len = nseg > 1 ? p->tph_seg[k] : p->shape.d[d].n;
    if (len % P) return len;
  }
  return 0;
}

void sh_split_param(Sharder *s, Value *p, int d, int ax, int nseg) {
  p->shard.axis[d] = (int8_t)ax;
  if (nseg > 1) {
    p->shard.nseg = (int8_t)nseg;
    for (int k = 0; k < nseg; k++) p->shard.seg[k] = p->tph_seg[k];
  }
  p->shape.d[d].n /= s->P;
}

bool sh_dropout_ok(Sharder *s, const Node *n, const char *refusal) {
  if (n->op != OP_DROPOUT || n->a.f[0] <= 0) return true;
  sh_fail(s, n, "dropout %s (its mask would differ from the single-device run); use p = 0", refusal);
  return false;
}

Node *sh_vocab_matmul(const Node *xent) {
  Node *mm = xent->in[0]->def;
  return mm && mm->op == OP_MATMUL && xent->in[0]->nuses == 1 ? mm : NULL;
}

/* ---- rules ---- */

/* A reshape is a view of contiguous rows, so each dim split over one of
 * the pass's axes stays split: it maps to the target dim with the same
 * leading product of global sizes, which P must divide.  Splits over other
 * axes were placed by an earlier pass and stay. */
void sh_view(Sharder *s, Node *n) {
  Value *x = n->in[0];
  int64_t gdim[IR_MAXDIM];
  bool split = false;
  for (int d = 0; d < x->shape.ndim; d++) {
    gdim[d] = x->shape.d[d].n * (mine(s, x->shard.axis[d]) ? s->P : 1);
    split |= mine(s, x->shard.axis[d]);
  }
  if (!split) {
    n->out->shard = x->shard;
    return;
  }
  if (x->shard.nseg > 1) {
    sh_fail(s, n, "cannot reshape a value split in segments");
    return;
  }
  int8_t out_axis[IR_MAXDIM];
  memset(out_axis, -1, sizeof out_axis);
  for (int d = 0; d < x->shape.ndim; d++) {
    int ax = x->shard.axis[d];
    if (!mine(s, ax)) continue;
    int64_t pre = 1, p2 = 1;
    for (int k = 0; k < d; k++) pre *= gdim[k];
    int e = -1;
    for (int k = 0; k < n->a.ni; k++) {
      if (p2 == pre && n->a.i[k] % s->P == 0) {
        e = k;
        break;
      }
      p2 *= n->a.i[k];
    }
    if (e < 0 || out_axis[e] >= 0) {
      /* with several axes, the message names the one */
      if (s->axes & (s->axes - 1))
        sh_fail(s, n, "reshape cannot keep dim %d split over %s", d, ir_axis_name(ax));
      else
        sh_fail(s, n, "reshape cannot keep dim %d split", d);
      return;
    }
    out_axis[e] = (int8_t)ax;
  }
  for (int e = 0; e < n->a.ni; e++)
    if (out_axis[e] >= 0) n->a.i[e] /= s->P;
  Value *al = n->out->alias;
  n->out->alias = NULL;
  sh_rerun(s, n);
  n->out->alias = al;
  for (int e = 0; e < n->a.ni; e++)
    if (out_axis[e] >= 0) n->out->shard.axis[e] = out_axis[e];
}

/* A slice of the last dim: as is when the channels are whole; of channels
 * split over ax it must be exactly one segment of them (q of a fused q,k,v
 * projection), whose local part every rank holds. */
void sh_slice(Sharder *s, Node *n, int ax) {
  Value *x = n->in[0];
  int last = x->shape.ndim - 1;
  if (sh_dim(x, ax) != last) {
    sh_rerun(s, n);
    sh_copy_spec(n, x);
    return;
  }
  int64_t start = 0, lstart = 0;
  int nseg = x->shard.nseg > 1 ? x->shard.nseg : 1;
  for (int k = 0; k < nseg; k++) {
    int64_t len = nseg > 1 ? x->shard.seg[k] : x->shape.d[last].n * s->P;
    if (start == n->a.i[0] && len == n->a.i[1]) {
      n->a.i[0] = lstart;
      n->a.i[1] = len / s->P;
      sh_rerun(s, n);
      sh_copy_spec(n, x);
      n->out->shard.nseg = 0;
      return;
    }
    start += len;
    lstart += len / s->P;
  }
  sh_fail(s, n, "slice [%lld, %lld) does not match a segment of its split input",
          (long long)n->a.i[0], (long long)(n->a.i[0] + n->a.i[1]));
}

void sh_vocab_parallel(Sharder *s, Node *n, int ax) {
  if (ax >= 0) {
    /* gather: i0..i2; cross-entropy: i1..i3 (i0 is its own) */
    int k = ir_ops[n->op].cls == OPC_LOSS;
    n->a.i[k] = 1;
    n->a.i[k + 1] = s->P;
    n->a.i[k + 2] = ax;
    n->a.ni = n->a.ni > k + 3 ? n->a.ni : k + 3; /* a cross-entropy's classes (i4) stay */
  }
  sh_rerun(s, n);
  sh_clear(n->out);
}

void sh_tp_rule(Sharder *s, Node *n) {
  const TpRules *r = s->tp;
  switch (ir_ops[n->op].cls) {
  case OPC_LEAF: r->leaf(s, n); return;
  case OPC_UNARY:
  case OPC_MAP:
  case OPC_ROPE: r->elementwise(s, n); return;
  case OPC_ROWWISE: r->rowwise(s, n); return;
  case OPC_BINARY: r->binary(s, n); return;
  case OPC_NORM: r->norm(s, n); return;
  case OPC_MATMUL: r->matmul(s, n); return;
  case OPC_VIEW: r->view(s, n); return;
  case OPC_SLICE: sh_slice(s, n, r->channels); return;
  case OPC_ATTENTION: r->attention(s, n); return;
  case OPC_GATHER: r->gather(s, n); return;
  case OPC_LOSS: r->loss(s, n); return;
  default: sh_fail(s, n, "internal: no rule for %s", ir_ops[n->op].name); return;
  }
}

/* ---- the rewrite ---- */

int sh_rewrite(Sharder *s, ShardRule node) {
  Graph *g = s->g;
  PtrVec old = g->nodes;
  memset(&g->nodes, 0, sizeof g->nodes);
  for (int i = 0; i < old.len && !s->failed; i++) {
    Node *n = old.data[i];
    for (int k = 0; s->repl && k < n->nin; k++)
      if (s->repl[n->in[k]->id]) n->in[k] = s->repl[n->in[k]->id];
    node(s, n);
    if (s->failed) break;
    vec_push(&g->nodes, n);
    if (s->post) s->post(s, n);
  }
  if (s->failed) return -1;
  /* the loss replaced too (tp2d's head: a mean over its rows, averaged) */
  if (s->repl && g->loss && s->repl[g->loss->id]) g->loss = s->repl[g->loss->id];
  if (g->loss && !sh_whole(s, g->loss)) {
    diag_error(g->loss->loc, "internal: %s: the loss is not replicated", s->what);
    return -1;
  }
  for (int i = 0; i < g->nodes.len; i++) ((Node *)g->nodes.data[i])->id = i;
  return 0;
}
