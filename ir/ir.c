/* ir.c — op table rules, graph construction, verifier and printer. */
#include "ir.h"
#include "runtime/dist_formulas.h"

#include <inttypes.h>
#include <string.h>

/* ---- dtypes and shapes ---- */

static const struct {
  const char *name;
  int size;
} dtypes[DT_COUNT] = {
    [DT_F32] = {"f32", 4}, [DT_F64] = {"f64", 8}, [DT_BF16] = {"bf16", 2},
    [DT_F16] = {"f16", 2}, [DT_I32] = {"i32", 4}, [DT_U16] = {"u16", 2},
};

const char *ir_dtype_name(DType t) { return dtypes[t].name; }
int ir_dtype_size(DType t) { return dtypes[t].size; }

int ir_dtype_from_name(const char *s) {
  for (int i = 0; i < DT_COUNT; i++)
    if (!strcmp(dtypes[i].name, s)) return i;
  return -1;
}

const char *ir_role_name(Role r) {
  static const char *names[ROLE_COUNT] = {"input", "param", "act", "grad", "optstate"};
  return names[r];
}

int64_t ir_numel(const Shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++)
    if (__builtin_mul_overflow(n, s->d[i].n, &n)) return INT64_MAX; /* pass_shape refuses it */
  return n;
}

bool ir_shape_eq(const Shape *a, const Shape *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->d[i].n != b->d[i].n) return false;
  return true;
}

Shape ir_shape(int ndim, const int64_t *dims) {
  Shape s = {0};
  s.ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    s.d[i].n = dims[i];
    s.d[i].sym = -1;
  }
  return s;
}

static void dim_str(const Graph *g, Dim d, char *buf, int cap) {
  if (g && d.sym >= 0 && d.sym < g->nsym)
    snprintf(buf, (size_t)cap, "%s=%" PRId64, g->symname[d.sym], d.n);
  else
    snprintf(buf, (size_t)cap, "%" PRId64, d.n);
}

void ir_shape_str(const Graph *g, const Value *v, char *buf, int cap) {
  int n = snprintf(buf, (size_t)cap, "%s[", ir_dtype_name(v->dtype));
  for (int i = 0; i < v->shape.ndim && n < cap; i++) {
    char d[64];
    dim_str(g, v->shape.d[i], d, sizeof d);
    n += snprintf(buf + n, (size_t)(cap - n), "%s%s", i ? "," : "", d);
  }
  if (n < cap) snprintf(buf + n, (size_t)(cap - n), "]");
}

/* ---- shape rules ---- */

#define FAIL(...)                               \
  do {                                          \
    snprintf(err, (size_t)errcap, __VA_ARGS__); \
    return -1;                                  \
  } while (0)

static int is_float(DType t) { return t == DT_F32 || t == DT_F64 || t == DT_BF16 || t == DT_F16; }

static int need_float(Node *n, int i, char *err, int errcap) {
  if (!is_float(n->in[i]->dtype))
    FAIL("operand %d has type %s, expected a floating-point tensor", i + 1,
         ir_dtype_name(n->in[i]->dtype));
  return 0;
}

static int shape_leaf(Node *n, char *err, int errcap) { return 0; }

static int shape_same(Node *n, char *err, int errcap) {
  if (need_float(n, 0, err, errcap)) return -1;
  n->out->shape = n->in[0]->shape;
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

static int shape_matmul(Node *n, char *err, int errcap) {
  Shape *x = &n->in[0]->shape, *w = &n->in[1]->shape;
  if (need_float(n, 0, err, errcap) || need_float(n, 1, err, errcap)) return -1;
  if (x->ndim < 1) FAIL("input is a scalar");
  if (w->ndim != 2) FAIL("weight must be 2-D, got %d-D", w->ndim);
  int64_t k = x->d[x->ndim - 1].n;
  if (k != w->d[1].n)
    FAIL("input has %" PRId64 " features, weight expects %" PRId64, k, w->d[1].n);
  n->out->shape = *x;
  n->out->shape.d[x->ndim - 1] = (Dim){w->d[0].n, -1};
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

/* The graph whose node a shape rule is checking, so that messages can name
 * symbolic dims (f32[B=4,T=64,768]); set by ir_add. */
static const Graph *msg_graph;

/* b's shape must equal a trailing part of a's shape (bias, positional). */
static int shape_bcast(Node *n, char *err, int errcap) {
  Shape *a = &n->in[0]->shape, *b = &n->in[1]->shape;
  if (need_float(n, 0, err, errcap) || need_float(n, 1, err, errcap)) return -1;
  if (b->ndim > a->ndim) {
    char sa[128], sb[128];
    ir_shape_str(msg_graph, n->in[0], sa, sizeof sa);
    ir_shape_str(msg_graph, n->in[1], sb, sizeof sb);
    FAIL("%s cannot be broadcast to %s", sb, sa);
  }
  int off = a->ndim - b->ndim;
  for (int i = 0; i < b->ndim; i++)
    if (a->d[off + i].n != b->d[i].n) {
      char sa[128], sb[128];
      ir_shape_str(msg_graph, n->in[0], sa, sizeof sa);
      ir_shape_str(msg_graph, n->in[1], sb, sizeof sb);
      FAIL("shapes %s and %s do not match", sa, sb);
    }
  n->out->shape = *a;
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

static int shape_norm(Node *n, char *err, int errcap) {
  Shape *x = &n->in[0]->shape;
  if (need_float(n, 0, err, errcap)) return -1;
  if (x->ndim < 1) FAIL("input is a scalar");
  int64_t c = x->d[x->ndim - 1].n;
  for (int i = 1; i < n->nin; i++) {
    Shape *p = &n->in[i]->shape;
    if (p->ndim != 1 || p->d[0].n != c)
      FAIL("input has %" PRId64 " features, %s expects %" PRId64, c,
           i == 1 ? "weight" : "bias", p->ndim == 1 ? p->d[0].n : -1);
  }
  n->out->shape = *x;
  n->out->dtype = n->in[0]->dtype;
  /* mean/rstd per row: x's shape without the last dim. */
  for (int i = 1; i < n->nout; i++) {
    Shape st = *x;
    st.ndim--;
    n->outs[i]->shape = st;
    n->outs[i]->dtype = n->in[0]->dtype;
  }
  return 0;
}

static int shape_map(Node *n, char *err, int errcap) {
  if (!n->a.fn) FAIL("map without a function");
  if (n->nin != n->a.fn->nargs)
    FAIL("%s takes %d arguments, got %d", n->a.fn->name, n->a.fn->nargs, n->nin);
  for (int i = 0; i < n->nin; i++) {
    if (need_float(n, i, err, errcap)) return -1;
    if (!ir_shape_eq(&n->in[i]->shape, &n->in[0]->shape))
      FAIL("%s: argument %d has a different shape from argument 1", n->a.fn->name, i + 1);
  }
  n->out->shape = n->in[0]->shape;
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

static int shape_gather(Node *n, char *err, int errcap) {
  Shape *t = &n->in[0]->shape, *ix = &n->in[1]->shape;
  if (t->ndim != 2) FAIL("table must be 2-D");
  if (n->in[1]->dtype != DT_I32) FAIL("indices must be i32, got %s", ir_dtype_name(n->in[1]->dtype));
  if (ix->ndim + 1 > IR_MAXDIM) FAIL("too many dimensions (limit is %d)", IR_MAXDIM);
  n->out->shape = *ix;
  n->out->shape.d[ix->ndim] = t->d[1];
  n->out->shape.ndim = ix->ndim + 1;
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

static int shape_reshape(Node *n, char *err, int errcap) {
  Shape s = n->in[0]->shape;
  Shape t = {0};
  t.ndim = n->a.ni;
  int64_t prod = 1;
  for (int i = 0; i < n->a.ni; i++) {
    t.d[i].n = n->a.i[i];
    t.d[i].sym = -1;
    /* Keep symbolic names where the leading dims are unchanged. */
    if (i < s.ndim && s.d[i].n == t.d[i].n) t.d[i].sym = s.d[i].sym;
    prod *= n->a.i[i];
  }
  if (prod != ir_numel(&s))
    FAIL("cannot reshape %" PRId64 " elements into %" PRId64, ir_numel(&s), prod);
  n->out->shape = t;
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

static int shape_slice(Node *n, char *err, int errcap) {
  Shape s = n->in[0]->shape;
  int64_t c = s.d[s.ndim - 1].n, st = n->a.i[0], len = n->a.i[1];
  if (st < 0 || len <= 0 || st + len > c)
    FAIL("slice [%" PRId64 ", %" PRId64 ") out of range of %" PRId64, st, st + len, c);
  s.d[s.ndim - 1] = (Dim){len, -1};
  n->out->shape = s;
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

static int shape_rope(Node *n, char *err, int errcap) {
  Shape *s = &n->in[0]->shape;
  if (s->ndim != 4) FAIL("expects [B,T,H,D]");
  if (s->d[3].n % 2) FAIL("head size %" PRId64 " must be even", s->d[3].n);
  return shape_same(n, err, errcap);
}

static int shape_attention(Node *n, char *err, int errcap) {
  Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape, *v = &n->in[2]->shape;
  for (int i = 0; i < 3; i++)
    if (need_float(n, i, err, errcap)) return -1;
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4) FAIL("q, k, v must be [B,T,H,D]");
  if (!ir_shape_eq(k, v)) FAIL("k and v shapes differ");
  if (q->d[0].n != k->d[0].n || q->d[1].n != k->d[1].n || q->d[3].n != k->d[3].n)
    FAIL("q and k disagree in batch, sequence or head size");
  if (q->d[2].n % k->d[2].n)
    FAIL("%" PRId64 " query heads are not a multiple of %" PRId64 " key/value heads",
         q->d[2].n, k->d[2].n);
  n->out->shape = *q;
  n->out->dtype = n->in[0]->dtype;
  /* lse: log-sum-exp of each query row's scores, [B, H, T], kept for backward. */
  Dim lse[3] = {q->d[0], q->d[2], q->d[1]};
  n->outs[1]->shape = (Shape){0};
  n->outs[1]->shape.ndim = 3;
  for (int i = 0; i < 3; i++) n->outs[1]->shape.d[i] = lse[i];
  n->outs[1]->dtype = n->in[0]->dtype;
  return 0;
}

static int shape_xent(Node *n, char *err, int errcap) {
  Shape *l = &n->in[0]->shape, *t = &n->in[1]->shape;
  if (need_float(n, 0, err, errcap)) return -1;
  if (n->in[1]->dtype != DT_I32)
    FAIL("targets must be i32, got %s", ir_dtype_name(n->in[1]->dtype));
  char sl[128], st[128];
  ir_shape_str(msg_graph, n->in[0], sl, sizeof sl);
  ir_shape_str(msg_graph, n->in[1], st, sizeof st);
  if (l->ndim != t->ndim + 1)
    FAIL("logits %s must have one more dimension than targets %s", sl, st);
  for (int i = 0; i < t->ndim; i++)
    if (l->d[i].n != t->d[i].n) FAIL("logits %s do not match targets %s", sl, st);
  /* classes: at most the logits' last dim (all of its shards' under a
   * vocabulary split, i1..i3) */
  int64_t cols = l->d[l->ndim - 1].n * (n->a.i[1] ? n->a.i[2] : 1);
  if (n->a.i[4] > cols)
    FAIL("classes = %lld is more than the logits' %lld columns", (long long)n->a.i[4],
         (long long)cols);
  n->out->shape = (Shape){0};
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

/* Communication ops: i0 the dim, i1 the group size P. */
static int shape_cast(Node *n, char *err, int errcap) {
  if (need_float(n, 0, err, errcap)) return -1;
  if (n->a.ni < 1 || !is_float((DType)n->a.i[0])) FAIL("cast to a dtype that is not floating-point");
  n->out->shape = n->in[0]->shape;
  n->out->dtype = (DType)n->a.i[0];
  /* i1: rows padded to (a step's copy of an LM head's weight: precision.c) */
  int64_t rows = ir_cast_rows(n);
  if (rows) {
    Shape *s = &n->out->shape;
    if (s->ndim < 1 || rows < s->d[0].n) FAIL("cast padded to %" PRId64 " rows", rows);
    s->d[0] = (Dim){rows, -1};
  }
  return 0;
}

static int shape_comm(Node *n, char *err, int errcap) {
  /* (a shard also cuts integer targets: tp2d's head, passes/shard2d.c) */
  if (!(n->op == OP_SHARD && n->in[0]->dtype == DT_I32) && need_float(n, 0, err, errcap)) return -1;
  Shape s = n->in[0]->shape;
  int64_t P = n->a.i[1], d = n->a.i[0];
  if (P < 1) FAIL("group of %" PRId64 " ranks", P);
  if (n->op == OP_ALLGATHER || n->op == OP_ALLGATHER_G || n->op == OP_REDUCE_SCATTER ||
      n->op == OP_SHARD || n->op == OP_GRAD_REDUCE_SCATTER) {
    if (d < 0 || d >= s.ndim) FAIL("dim %" PRId64 " out of range", d);
    if (n->op == OP_ALLGATHER || n->op == OP_ALLGATHER_G) {
      s.d[d].n *= P;
    } else {
      if (s.d[d].n % P) FAIL("dim %" PRId64 " of size %" PRId64 " cannot be split %" PRId64 " ways", d, s.d[d].n, P);
      s.d[d].n /= P;
    }
  }
  n->out->shape = s;
  n->out->dtype = n->in[0]->dtype;
  return 0;
}

/* ---- backward shape rules: each output is the gradient of an input ---- */

static void set_out(Node *n, int i, const Value *like) {
  n->outs[i]->shape = like->shape;
  n->outs[i]->dtype = like->dtype;
}

static int same_as(Node *n, int a, int b, char *err, int errcap) {
  if (!ir_shape_eq(&n->in[a]->shape, &n->in[b]->shape)) {
    char sa[128], sb[128];
    ir_shape_str(NULL, n->in[a], sa, sizeof sa);
    ir_shape_str(NULL, n->in[b], sb, sizeof sb);
    FAIL("operands %d and %d have shapes %s and %s", a + 1, b + 1, sa, sb);
  }
  return 0;
}

/* dy, x (, ...) -> dx shaped like x. */
static int shape_b_first(Node *n, char *err, int errcap) {
  if (n->op != OP_SLICE_BWD && same_as(n, 0, 1, err, errcap)) return -1;
  set_out(n, 0, n->in[1]);
  return 0;
}

/* dy, a, b -> da, db for broadcasting binary ops. */
static int shape_b_pair(Node *n, char *err, int errcap) {
  if (same_as(n, 0, 1, err, errcap)) return -1;
  set_out(n, 0, n->in[1]);
  set_out(n, 1, n->in[2]);
  return 0;
}

static int shape_b_matmul(Node *n, char *err, int errcap) {
  const Shape *dy = &n->in[0]->shape, *x = &n->in[1]->shape, *w = &n->in[2]->shape;
  if (w->ndim != 2 || dy->ndim != x->ndim || dy->d[dy->ndim - 1].n != w->d[0].n ||
      x->d[x->ndim - 1].n != w->d[1].n)
    FAIL("dy, x and W do not form a matmul");
  set_out(n, 0, n->in[1]);
  /* W a copy with padded rows: dW is the master's gradient */
  const Value *wm = n->in[2];
  set_out(n, 1, ir_cast_rows(wm->def) ? wm->def->in[0] : wm);
  return 0;
}

/* dy, x, w, stats... -> dx, dw (, db) */
static int shape_b_norm(Node *n, char *err, int errcap) {
  if (same_as(n, 0, 1, err, errcap)) return -1;
  set_out(n, 0, n->in[1]);
  set_out(n, 1, n->in[2]);
  if (n->nout > 2) set_out(n, 2, n->in[2]);
  return 0;
}

static int shape_b_map(Node *n, char *err, int errcap) {
  if (!n->a.fn || n->nin - 1 != n->a.fn->nargs) FAIL("map_bwd arity does not match its function");
  for (int i = 1; i < n->nin; i++) {
    if (same_as(n, 0, i, err, errcap)) return -1;
    set_out(n, i - 1, n->in[i]);
  }
  return 0;
}

/* dy, x -> dx like x, dy being x's chunk of dim i0 over i1 ranks. */
static int shape_b_shard(Node *n, char *err, int errcap) {
  Shape want = n->in[1]->shape;
  int64_t d = n->a.i[0], P = n->a.i[1];
  if (d < 0 || d >= want.ndim || P < 1 || want.d[d].n % P) FAIL("bad shard of dim %" PRId64, d);
  want.d[d].n /= P;
  if (!ir_shape_eq(&want, &n->in[0]->shape)) FAIL("dy is not a chunk of x");
  set_out(n, 0, n->in[1]);
  return 0;
}

static int shape_b_gather(Node *n, char *err, int errcap) {
  set_out(n, 0, n->in[1]);
  return 0;
}

static int shape_b_attn(Node *n, char *err, int errcap) {
  if (same_as(n, 0, 1, err, errcap) || same_as(n, 0, 4, err, errcap)) return -1;
  set_out(n, 0, n->in[1]);
  set_out(n, 1, n->in[2]);
  set_out(n, 2, n->in[3]);
  return 0;
}

static int shape_b_xent(Node *n, char *err, int errcap) {
  if (n->in[0]->shape.ndim != 0) FAIL("dloss must be a scalar");
  set_out(n, 0, n->in[1]);
  return 0;
}

/* ---- FLOP rules (forward) ---- */

static double numel_out(const Node *n) { return (double)ir_numel(&n->out->shape); }
static double flops_zero(const Node *n) { return 0; }
static double flops_elem1(const Node *n) { return numel_out(n); }
static double flops_gelu(const Node *n) { return 8 * numel_out(n); }
static double flops_silu(const Node *n) { return 4 * numel_out(n); }
static double flops_softmax(const Node *n) { return 5 * numel_out(n); }
static double flops_norm(const Node *n) { return 8 * numel_out(n); }
static double flops_map(const Node *n) {
  return numel_out(n) * (n->a.fn ? sx_count(&n->a.fn->body, 1) : 1);
}
static double flops_matmul(const Node *n) {
  const Shape *w = &n->in[1]->shape;
  return 2.0 * numel_out(n) * (double)w->d[1].n;
}
/* QKᵀ and PV: 4·B·H·T²·D; half of it with a causal mask is still computed
 * by most kernels, and model-FLOPs conventions (Narayanan et al.) count it all. */
static double flops_attention(const Node *n) {
  const Shape *q = &n->in[0]->shape;
  return 4.0 * (double)q->d[0].n * (double)q->d[2].n * (double)q->d[1].n *
         (double)q->d[1].n * (double)q->d[3].n;
}
static double flops_xent(const Node *n) { return 5.0 * (double)ir_numel(&n->in[0]->shape); }

/* Backward FLOPs: elementwise ops count their input's size; matmul and
 * attention backward are twice their forward (dx and dW; dq, dk and dv). */
static double numel_in(const Node *n, int i) { return (double)ir_numel(&n->in[i]->shape); }
static double flops_b_elem(const Node *n) { return 2 * numel_in(n, 0); }
static double flops_b_norm(const Node *n) { return 10 * numel_in(n, 0); }
static double flops_b_map(const Node *n) {
  double f = 0;
  for (int i = 0; i < n->a.fn->nargs; i++) f += sx_count(&n->a.fn->dbody[i], 1);
  return numel_in(n, 0) * f;
}
static double flops_b_matmul(const Node *n) {
  return 4.0 * numel_in(n, 0) * (double)n->in[2]->shape.d[1].n;
}
static double flops_b_attn(const Node *n) {
  const Shape *q = &n->in[1]->shape;
  return 8.0 * (double)q->d[0].n * (double)q->d[2].n * (double)q->d[1].n * (double)q->d[1].n *
         (double)q->d[3].n;
}
static double flops_b_xent(const Node *n) { return 3.0 * numel_in(n, 1); }

const OpInfo ir_ops[OP_COUNT] = {
#define OP(e, name, mn, mx, no, cls, bwd, shape, flops) \
  [OP_##e] = {name, mn, mx, no, OPC_##cls, OP_##bwd, shape, flops},
#include "ops.def"
};

/* ---- graph ---- */

Graph *ir_graph_new(const char *model) {
  Graph *g = arena_alloc(sizeof *g);
  g->model = model;
  return g;
}

static Value *new_value(Graph *g, Role role, SrcLoc loc) {
  Value *v = arena_alloc(sizeof *v);
  v->id = g->values.len;
  v->role = role;
  v->loc = loc;
  for (int i = 0; i < IR_MAXDIM; i++) v->shard.axis[i] = -1;
  vec_push(&g->values, v);
  return v;
}

Value *ir_value_copy(Graph *g, const Value *v) {
  Value *c = new_value(g, v->role, v->loc);
  int id = c->id;
  *c = *v;
  c->id = id;
  c->def = NULL;
  c->grad = c->grad_of = c->alias = NULL;
  c->nuses = 0;
  return c;
}

Value *ir_value(Graph *g, Role role, Shape s, DType t, SrcLoc loc) {
  Value *v = new_value(g, role, loc);
  v->shape = s;
  v->dtype = t;
  return v;
}

int64_t ir_view_off(const Value *v) {
  int64_t o = 0;
  for (; v->alias; v = v->alias) o += v->view_off;
  return o;
}

Value *ir_scratch(Graph *g, int64_t bytes, SrcLoc loc) {
  Value *v = new_value(g, ROLE_ACT, loc);
  int64_t n = (bytes + 3) / 4;
  v->shape = ir_shape(1, &n);
  v->dtype = DT_F32;
  return v;
}

static Node *new_node(Graph *g, OpKind op, SrcLoc loc, const char *scope) {
  Node *n = arena_alloc(sizeof *n);
  n->id = g->nodes.len;
  n->op = op;
  n->loc = loc;
  n->scope = scope;
  n->nout = 1;
  return n;
}

Node *ir_node_copy(Graph *g, const Node *n) {
  Node *c = new_node(g, n->op, n->loc, n->scope);
  int id = c->id;
  *c = *n;
  c->id = id;
  c->scratch = NULL;
  vec_push(&g->nodes, c);
  return c;
}

Graph *ir_graph_clone(const Graph *g) {
  Graph *c = arena_alloc(sizeof *c);
  *c = *g;
  memset(&c->nodes, 0, sizeof c->nodes);
  memset(&c->values, 0, sizeof c->values);
  memset(&c->params, 0, sizeof c->params);
  memset(&c->inputs, 0, sizeof c->inputs);
  memset(&c->buckets, 0, sizeof c->buckets);
  memset(&c->wcasts, 0, sizeof c->wcasts);
  int nv = g->values.len, nn = g->nodes.len;
  Value **vm = arena_alloc(sizeof(Value *) * (size_t)(nv + 1));
  Node **nm = arena_alloc(sizeof(Node *) * (size_t)(nn + 1));
#define V(x) ((x) ? vm[(x)->id] : NULL)
#define N(x) ((x) && (x)->id >= 0 ? nm[(x)->id] : NULL)
  for (int i = 0; i < nv; i++) {
    vm[i] = arena_alloc(sizeof(Value));
    *vm[i] = *(Value *)g->values.data[i];
    vec_push(&c->values, vm[i]);
  }
  for (int i = 0; i < nn; i++) {
    nm[i] = arena_alloc(sizeof(Node));
    *nm[i] = *(Node *)g->nodes.data[i];
    vec_push(&c->nodes, nm[i]);
  }
  for (int i = 0; i < nv; i++) {
    Value *v = vm[i];
    v->def = N(v->def);
    v->grad = V(v->grad);
    v->grad_of = V(v->grad_of);
    v->alias = V(v->alias);
  }
  for (int i = 0; i < nn; i++) {
    Node *n = nm[i];
    for (int k = 0; k < n->nin; k++) n->in[k] = V(n->in[k]);
    for (int j = 0; j < n->nout; j++) n->outs[j] = V(n->outs[j]);
    n->out = n->outs[0];
    n->fwd = N(n->fwd);
    n->remat = N(n->remat);
    n->scratch = V(n->scratch);
  }
  for (int i = 0; i < g->wcasts.len; i++) {
    Node *w = arena_alloc(sizeof(Node));
    *w = *(Node *)g->wcasts.data[i];
    w->in[0] = V(w->in[0]);
    w->out = w->outs[0] = V(w->out);
    w->out->def = w;
    vec_push(&c->wcasts, w);
  }
  for (int i = 0; i < g->params.len; i++) vec_push(&c->params, V((Value *)g->params.data[i]));
  for (int i = 0; i < g->inputs.len; i++) vec_push(&c->inputs, V((Value *)g->inputs.data[i]));
  c->loss = V(g->loss);
  for (int i = 0; i < g->nrecv; i++) c->recv_act[i] = V(g->recv_act[i]);
  for (int i = 0; i < g->nsend; i++) c->send_act[i] = V(g->send_act[i]);
  c->nrecv = g->nrecv;
  c->nsend = g->nsend;
#undef V
#undef N
  return c;
}

static void set_single_out(Node *n, Value *v) {
  n->out = n->outs[0] = v;
  v->def = n;
}

Value *ir_param(Graph *g, const char *name, Shape s, SrcLoc loc, bool decay, const char *init) {
  Value *v = new_value(g, ROLE_PARAM, loc);
  v->name = name;
  v->shape = s;
  v->gshape = s;
  v->dtype = DT_F32;
  v->decay = decay;
  v->init = init;
  Node *n = new_node(g, OP_PARAM, loc, NULL);
  set_single_out(n, v);
  vec_push(&g->nodes, n);
  vec_push(&g->params, v);
  return v;
}

Value *ir_input(Graph *g, const char *name, Shape s, DType t, SrcLoc loc) {
  Value *v = new_value(g, ROLE_INPUT, loc);
  v->name = name;
  v->shape = s;
  v->dtype = t;
  Node *n = new_node(g, OP_INPUT, loc, NULL);
  set_single_out(n, v);
  vec_push(&g->nodes, n);
  vec_push(&g->inputs, v);
  return v;
}

Node *ir_add(Graph *g, OpKind op, Value **in, int nin, const Attrs *a, SrcLoc loc,
             const char *scope, const char *what) {
  const OpInfo *info = &ir_ops[op];
  if (nin < info->min_in || nin > info->max_in) {
    diag_error(loc, "%s: %s takes %d to %d operands, got %d", what, info->name, info->min_in,
               info->max_in, nin);
    return NULL;
  }
  Node *n = new_node(g, op, loc, scope);
  for (int i = 0; i < nin; i++) n->in[i] = in[i];
  n->nin = nin;
  if (a) n->a = *a;
  Value tmp[IR_MAXOUT];
  memset(tmp, 0, sizeof tmp);
  n->nout = info->nout;
  for (int i = 0; i < n->nout; i++) n->outs[i] = &tmp[i];
  n->out = n->outs[0];
  char err[256];
  msg_graph = g;
  int rc = info->shape(n, err, sizeof err);
  msg_graph = NULL;
  if (rc) {
    diag_error(loc, "%s: %s", what, err);
    return NULL;
  }
  for (int i = 0; i < n->nout; i++) {
    Value *v = new_value(g, ROLE_ACT, loc);
    v->shape = tmp[i].shape;
    v->dtype = tmp[i].dtype;
    v->def = n;
    n->outs[i] = v;
  }
  n->out = n->outs[0];
  /* A reshape of contiguous row-major data is a view: same storage. */
  if (op == OP_RESHAPE || op == OP_TP_COPY) n->out->alias = in[0];
  for (int i = 0; i < n->nin; i++) n->in[i]->nuses++;
  vec_push(&g->nodes, n);
  return n;
}

Value *ir_grad(Graph *g, Value *v) {
  if (v->grad) return v->grad;
  Value *d = new_value(g, ROLE_GRAD, v->loc);
  d->shape = v->shape;
  d->dtype = v->dtype;
  d->grad_of = v;
  d->name = v->name;
  v->grad = d;
  return d;
}

Node *ir_add_bwd(Graph *g, OpKind op, Value **in, int nin, Value **outs, const Attrs *a,
                 const Node *fwd) {
  const OpInfo *info = &ir_ops[op];
  if (nin < info->min_in || nin > info->max_in) {
    diag_error(fwd->loc, "internal: %s takes %d to %d operands, got %d", info->name,
               info->min_in, info->max_in, nin);
    return NULL;
  }
  Node *n = new_node(g, op, fwd->loc, fwd->scope);
  n->bwd = true;
  n->fwd = fwd;
  for (int i = 0; i < nin; i++) n->in[i] = in[i];
  n->nin = nin;
  if (a) n->a = *a;
  n->nout = info->nout;
  if (op == OP_MAP_BWD) n->nout = nin - 1;
  Value tmp[IR_MAXOUT];
  memset(tmp, 0, sizeof tmp);
  for (int i = 0; i < n->nout; i++) {
    if (outs[i]) tmp[i] = *outs[i];
    n->outs[i] = &tmp[i];
  }
  n->out = n->outs[0];
  char err[256];
  if (info->shape(n, err, sizeof err)) {
    diag_error(fwd->loc, "internal: %s: %s", info->name, err);
    return NULL;
  }
  for (int i = 0; i < n->nout; i++) {
    n->outs[i] = outs[i];
    if (outs[i] && (!ir_shape_eq(&tmp[i].shape, &outs[i]->shape) || tmp[i].dtype != outs[i]->dtype)) {
      diag_error(fwd->loc, "internal: %s: output %d has the wrong shape", info->name, i + 1);
      return NULL;
    }
  }
  n->out = n->outs[0];
  for (int i = 0; i < n->nin; i++) n->in[i]->nuses++;
  vec_push(&g->nodes, n);
  return n;
}

/* MeshAxis is the runtime's list (runtime/dist_axes.h); codegen/cpu.c's
 * rt_axis table and the axis-ordered printing below still spell its order. */
_Static_assert(AX_WORLD == 0 && AX_DP == 1 && AX_TP == 2 && AX_TPR == 3 && AX_TPC == 4 &&
                   AX_SP == 5 && AX_PP == 6 && AX_DATA == 7 && AX_EMBED == 8 && AX_COUNT == 9,
               "the mesh axes were reordered: update codegen/cpu.c's rt_axis table");

const char *ir_axis_name(int ax) { return rt_axis_ir_name(ax); }

bool ir_is_comm(OpKind op) { return ir_ops[op].cls == OPC_COMM || ir_ops[op].cls == OPC_BUCKET; }

int ir_comm_axis(const Node *n, int *group) {
  int ax = -1, P = 1;
  if (ir_is_comm(n->op)) {
    ax = (int)n->a.i[2];
    P = (int)n->a.i[1];
  } else if ((n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD) && n->a.i[1]) {
    ax = (int)n->a.i[3];
    P = (int)n->a.i[2];
  } else if (ir_ring_size(n) > 1) {
    ax = (int)n->a.i[2];
    P = (int)n->a.i[1];
  } else if (ir_norm_split(n) > 1 && ir_comm_bytes(n)) {
    ax = (int)n->a.i[1];
    P = (int)n->a.i[0];
  }
  if (group) *group = P;
  return ax;
}

void ir_dim_split(const Shape *s, int d, int P, int64_t *outer, int64_t *inner) {
  int64_t o = 1, in = 1;
  for (int k = 0; k < d; k++) o *= s->d[k].n;
  for (int k = d; k < s->ndim; k++) in *= s->d[k].n;
  *outer = o;
  *inner = in / P;
}

/* Whether n is of class c or its backward class b. */
static bool of_class(const Node *n, OpClass c, OpClass b) {
  return ir_ops[n->op].cls == c || ir_ops[n->op].cls == b;
}

int ir_summa_q(const Node *n) {
  return of_class(n, OPC_MATMUL, OPC_B_MATMUL) && n->a.ni >= 3 && n->a.i[0] > 1 ? (int)n->a.i[0] : 0;
}

int64_t ir_cast_rows(const Node *n) {
  return n && n->op == OP_CAST && n->a.ni > 1 ? n->a.i[1] : 0;
}

int ir_norm_split(const Node *n) {
  return of_class(n, OPC_NORM, OPC_B_NORM) && n->a.ni >= 2 && n->a.i[0] > 1 ? (int)n->a.i[0] : 0;
}

int ir_ring_size(const Node *n) {
  return of_class(n, OPC_ATTENTION, OPC_B_ATTENTION) && n->a.ni >= 3 ? (int)n->a.i[1] : 0;
}

int64_t ir_ring_kv(const Node *n) {
  return ir_numel(&n->in[n->op == OP_ATTENTION ? 1 : 2]->shape);
}

uint64_t ir_comm_bytes(const Node *n) {
  int P = (int)n->a.i[1];
  uint64_t in = n->nin ? (uint64_t)ir_numel(&n->in[0]->shape) * (uint64_t)ir_dtype_size(n->in[0]->dtype) : 0;
  switch (n->op) {
  case OP_ALLREDUCE:
  case OP_GRAD_ALLREDUCE:
    return rt_vol_allreduce(in, P);
  case OP_ALLGATHER:
  case OP_ALLGATHER_G:
    return rt_vol_allgather(in * (uint64_t)P, P);
  case OP_REDUCE_SCATTER:
  case OP_GRAD_REDUCE_SCATTER:
    return rt_vol_reduce_scatter(in, P);
  case OP_CROSS_ENTROPY:
    if (n->a.i[1]) {
      const Shape *l = &n->in[0]->shape;
      return rt_vol_vp_xent_fwd((size_t)(ir_numel(l) / l->d[l->ndim - 1].n), (int)n->a.i[2]);
    }
    return 0;
  case OP_CROSS_ENTROPY_BWD:
    if (n->a.i[1]) {
      const Shape *l = &n->in[1]->shape;
      return rt_vol_vp_xent_bwd((size_t)(ir_numel(l) / l->d[l->ndim - 1].n), (int)n->a.i[2]);
    }
    return 0;
  case OP_MATMUL:
  case OP_MATMUL_BWD: {
    int q = ir_summa_q(n);
    if (!q) return 0;
    const Value *x = n->in[n->op == OP_MATMUL ? 0 : 1], *w = n->in[n->op == OP_MATMUL ? 1 : 2];
    uint64_t es = (uint64_t)ir_dtype_size(x->dtype);
    uint64_t xb = (uint64_t)ir_numel(&x->shape) * es, wb = (uint64_t)ir_numel(&w->shape) * es;
    if (n->op == OP_MATMUL) return rt_vol_summa_fwd(xb, wb, q);
    /* runtime/dist_summa.h: dX costs the W broadcasts and dX reduces, dW the
     * X broadcasts and dW reduces (no dbias: a bias add is its own node) */
    /* with 16-bit data the blocks travel in 16 bits and the reduced dX and
     * dW partials as fp32 (runtime/cuda/rtc_summa.cu, rt_summa_msg_vol_bf16) */
    uint64_t rx = es == 2 ? xb * 2 : xb, rw = es == 2 ? wb * 2 : wb;
    uint64_t b = 0;
    if (n->outs[0]) b += (uint64_t)q * (rt_vol_bcast(wb, q) + rt_vol_reduce(rx, q));
    if (n->outs[1]) b += (uint64_t)q * (rt_vol_bcast(xb, q) + rt_vol_reduce(rw, q));
    return b;
  }
  case OP_LAYERNORM:
  case OP_LAYERNORM_BWD:
  case OP_RMSNORM:
  case OP_RMSNORM_BWD: {
    int Pn = ir_norm_split(n);
    if (!Pn) return 0;
    bool fwd = n->op == OP_LAYERNORM || n->op == OP_RMSNORM;
    const Shape *s = &n->in[fwd ? 0 : 1]->shape;
    size_t N = (size_t)(ir_numel(s) / s->d[s->ndim - 1].n);
    if (n->op == OP_RMSNORM) return rt_vol_rms_split_fwd(N, Pn);
    if (n->op == OP_RMSNORM_BWD) return n->outs[0] ? rt_vol_rms_split_bwd(N, Pn) : 0;
    return fwd ? rt_vol_ln_split_fwd(N, Pn) : n->outs[0] ? rt_vol_ln_split_bwd(N, Pn) : 0;
  }
  case OP_ATTENTION:
  case OP_ATTENTION_BWD: {
    int R = ir_ring_size(n), es = ir_dtype_size(n->in[0]->dtype);
    if (R <= 1) return 0;
    size_t kv = (size_t)ir_ring_kv(n);
    /* with 16-bit data dK, dV travel as their fp32 sums (runtime/cuda/rtc_ring.cu) */
    return n->op == OP_ATTENTION ? rt_vol_ring_fwd(kv, es, R)
                                 : rt_vol_ring_bwd2(kv, es, es == 2 ? 4 : es, R);
  }
  default:
    return 0;
  }
}

bool ir_is_recv_act(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nrecv; i++)
    if (g->recv_act[i] == v) return true;
  return false;
}

bool ir_reads_data(const Node *n, int k) {
  switch (n->op) {
  case OP_ADD_BWD:
  case OP_SUB_BWD:
  case OP_SCALE_BWD:
  case OP_SLICE_BWD:
  case OP_DROPOUT_BWD:
    return k == 0;
  case OP_GATHER_BWD:
    return k != 1;
  case OP_SHARD_BWD:
  case OP_ACC:
    return k == 0;
  default:
    return true;
  }
}

int64_t ir_param_count(const Graph *g) {
  int64_t total = 0;
  for (int i = 0; i < g->params.len; i++) total += ir_numel(&((Value *)g->params.data[i])->shape);
  return total;
}

double ir_node_flops(const Node *n) {
  double f = ir_ops[n->op].flops(n);
  /* SUMMA multiplies q blocks of the contraction dim into each output block;
   * a ring attention's queries meet every one of the ring's key blocks. */
  if (ir_summa_q(n) > 1) f *= ir_summa_q(n);
  if (ir_ring_size(n) > 1) f *= ir_ring_size(n);
  return f;
}

double ir_flops(const Graph *g, bool fwd_only) {
  int end = fwd_only && g->nfwd ? g->nfwd : g->nodes.len;
  double f = 0;
  for (int i = 0; i < end; i++) f += ir_node_flops(g->nodes.data[i]);
  return f;
}

/* ---- verifier ---- */

/* Re-runs n's shape rule on copies of its outputs and compares. */
static int verify_shapes(Node *n, char *err, int errcap) {
  Value tmp[IR_MAXOUT], *saved[IR_MAXOUT];
  for (int i = 0; i < n->nout; i++) {
    saved[i] = n->outs[i];
    memset(&tmp[i], 0, sizeof tmp[i]);
    if (saved[i]) tmp[i] = *saved[i];
    n->outs[i] = &tmp[i];
  }
  n->out = n->outs[0];
  int rc = ir_ops[n->op].shape(n, err, errcap);
  for (int i = 0; i < n->nout; i++) {
    n->outs[i] = saved[i];
    /* Floating-point widths are the precision pass's (passes/precision.c):
     * the rules give the operand's; integer against float is an error. */
    if (!rc && saved[i] &&
        (!ir_shape_eq(&tmp[i].shape, &saved[i]->shape) ||
         (tmp[i].dtype != saved[i]->dtype && !(is_float(tmp[i].dtype) && is_float(saved[i]->dtype))))) {
      snprintf(err, (size_t)errcap, "stored shape of output %d disagrees with its shape rule", i + 1);
      rc = -1;
    }
  }
  n->out = n->outs[0];
  return rc;
}

/* A view (a ZeRO-3 parameter inside its gathered bucket) is defined with
 * its root. */
static bool view_defined(const Value *v, const char *defined) {
  if (!v->alias) return false;
  while (v->alias) v = v->alias;
  return defined[v->id];
}

/* Forward values are defined once, before use; persistent state (ROLE_OPTSTATE:
 * ZeRO shards) is defined by the step.  Gradients accumulate: every
 * write to a gradient comes before every read of it (reverse order). */
int ir_verify(Graph *g) {
  int errors = 0;
  int nv = g->values.len;
  char *defined = arena_alloc((size_t)nv + 1);
  int *last_write = arena_alloc(sizeof(int) * ((size_t)nv + 1));
  int *first_read = arena_alloc(sizeof(int) * ((size_t)nv + 1));
  for (int i = 0; i < nv; i++) first_read[i] = -1, last_write[i] = -1;
  for (int i = 0; i < g->wcasts.len; i++) {   /* made once per step, before the schedule */
    const Node *w = g->wcasts.data[i];
    /* a parameter's cast; under ZeRO-1/2 with bf16 also a bucket's shard
     * cast and gathered (passes/zero.c masters_sharded) */
    bool from = w->in[0]->role == ROLE_PARAM || w->in[0]->role == ROLE_OPTSTATE ||
                (w->op == OP_ALLGATHER && defined[w->in[0]->id]);
    if (w->out->def != w || !from) {
      diag_error(w->loc, "internal: the step's cast of %s is malformed", w->in[0]->name);
      errors++;
    }
    defined[w->out->id] = 1;
  }
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = g->nodes.data[i];
    const OpInfo *info = &ir_ops[n->op];
    const char *bad = NULL;
    if (n->nin < info->min_in || n->nin > info->max_in || n->nout < 1 || n->nout > IR_MAXOUT)
      bad = "has the wrong number of operands";
    for (int j = 0; j < n->nin && !bad; j++) {
      Value *in = n->in[j];
      if (!in || in->id >= nv) {
        bad = "has a missing operand";
      } else if (in->role == ROLE_GRAD) {
        if (first_read[in->id] < 0) first_read[in->id] = i;
      } else if (!defined[in->id] && in->role != ROLE_OPTSTATE && !view_defined(in, defined)) {
        bad = "uses a value before its definition";
      }
    }
    for (int j = 0; j < n->nout && !bad; j++) {
      Value *o = n->outs[j];
      if (!o) {
        if (!n->bwd) bad = "has a missing output";
        continue;
      }
      if (n->bwd || n->op == OP_FILL || n->op == OP_RECV) {
        if (o->role != ROLE_GRAD) bad = "accumulates into a value that is not a gradient";
        else last_write[o->id] = i;
      } else {
        if (o->def != n) bad = "output is not linked back to its node";
        if (defined[o->id]) bad = "redefines a value";
        defined[o->id] = 1;
      }
    }
    if (n->out != n->outs[0]) bad = "out and outs[0] differ";
    char err[256];
    if (!bad && verify_shapes(n, err, sizeof err)) bad = err;
    if (bad) {
      diag_error(n->loc, "internal: %s node %d %s", info->name, n->id, bad);
      errors++;
    }
  }
  for (int i = 0; i < nv; i++)
    if (first_read[i] >= 0 && last_write[i] > first_read[i]) {
      Value *v = g->values.data[i];
      diag_error(v->loc, "internal: gradient %d is read (node %d) before its last contribution (node %d)",
                 i, first_read[i], last_write[i]);
      errors++;
    }
  if (g->loss && !g->pipe_out && (g->loss->shape.ndim != 0)) {
    diag_error(g->loss->loc, "internal: loss is not a scalar");
    errors++;
  }
  return errors ? -1 : 0;
}

/* ---- printer ---- */

static void print_value_ref(FILE *out, const Value *v) {
  if (!v) {
    fputs("_", out);
    return;
  }
  if (v->role == ROLE_GRAD && v->grad_of) {
    fputs("d", out);
    v = v->grad_of;
  }
  if (v->role == ROLE_PARAM)
    fprintf(out, "@%s", v->name);
  else if (v->role == ROLE_INPUT)
    fprintf(out, "$%s", v->name);
  else
    fprintf(out, "%%%d", v->id);
}

static void print_attrs(FILE *out, const Node *n) {
  switch (n->op) {
  case OP_SCALE:
  case OP_DROPOUT:
    fprintf(out, " {%s=%.9g}", n->op == OP_SCALE ? "by" : "p", n->a.f[0]);
    break;
  case OP_LAYERNORM:
  case OP_RMSNORM:
    fprintf(out, " {eps=%.9g", n->a.f[0]);
    if (ir_norm_split(n))
      fprintf(out, ", channels over %s(%d), bytes=%" PRIu64, ir_axis_name((int)n->a.i[1]),
              (int)n->a.i[0], ir_comm_bytes(n));
    fputc('}', out);
    break;
  case OP_LAYERNORM_BWD:
  case OP_RMSNORM_BWD:
    if (ir_norm_split(n))
      fprintf(out, " {channels over %s(%d), bytes=%" PRIu64 "}", ir_axis_name((int)n->a.i[1]),
              (int)n->a.i[0], ir_comm_bytes(n));
    break;
  case OP_MATMUL:
  case OP_MATMUL_BWD:
    if (ir_summa_q(n))
      fprintf(out, " {summa %dx%d over %s, %s, bytes=%" PRIu64 "}", ir_summa_q(n), ir_summa_q(n),
              ir_axis_name((int)n->a.i[1]), ir_axis_name((int)n->a.i[2]), ir_comm_bytes(n));
    break;
  case OP_ROPE:
  case OP_ROPE_BWD:
    /* a backward op shows its attributes only when sp=ring changed them */
    if (n->op == OP_ROPE_BWD && !n->a.i[0]) break;
    fprintf(out, " {theta=%.9g", n->a.f[0]);
    if (n->a.i[0]) fprintf(out, ", positions from %s", ir_axis_name((int)n->a.i[1]));
    fputc('}', out);
    break;
  case OP_ATTENTION:
  case OP_ATTENTION_BWD:
    if (n->op == OP_ATTENTION_BWD && ir_ring_size(n) <= 1) break;
    fprintf(out, " {causal=%s", n->a.i[0] ? "true" : "false");
    if (ir_ring_size(n) > 1)
      fprintf(out, ", ring over %s(%d), bytes=%" PRIu64, ir_axis_name((int)n->a.i[2]),
              (int)n->a.i[1], ir_comm_bytes(n));
    fputc('}', out);
    break;
  case OP_SLICE:
    fprintf(out, " {start=%" PRId64 ", len=%" PRId64 "}", n->a.i[0], n->a.i[1]);
    break;
  case OP_MAP:
    fprintf(out, " {fn=%s}", n->a.fn->name);
    break;
  case OP_ALLREDUCE:
  case OP_TP_COPY:
  case OP_GRAD_ALLREDUCE:
    fprintf(out, " {over=%s(%d)", ir_axis_name((int)n->a.i[2]), (int)n->a.i[1]);
    goto bytes;
  case OP_ALLGATHER:
  case OP_ALLGATHER_G:
  case OP_REDUCE_SCATTER:
  case OP_SHARD:
  case OP_SHARD_BWD:
  case OP_GRAD_REDUCE_SCATTER:
    fprintf(out, " {dim=%d, over=%s(%d)", (int)n->a.i[0], ir_axis_name((int)n->a.i[2]),
            (int)n->a.i[1]);
  bytes:
    if (ir_comm_bytes(n)) fprintf(out, ", bytes=%" PRIu64, ir_comm_bytes(n));
    /* a ZeRO / gradient bucket's collective (passes/zero.c) */
    if (n->op == OP_GRAD_ALLREDUCE || n->op == OP_GRAD_REDUCE_SCATTER || n->in[0]->role == ROLE_OPTSTATE)
      fprintf(out, ", bucket=%s", n->scope ? n->scope : "?");
    if (n->op == OP_GRAD_ALLREDUCE || (n->op == OP_GRAD_REDUCE_SCATTER && n->a.i[3]))
      fputs(", last microbatch, non-blocking", out);
    fputc('}', out);
    break;
  case OP_GATHER:
  case OP_GATHER_BWD:
    if (n->a.i[0]) fprintf(out, " {vocab-parallel over %s(%d)}", ir_axis_name((int)n->a.i[2]), (int)n->a.i[1]);
    break;
  case OP_CROSS_ENTROPY:
  case OP_CROSS_ENTROPY_BWD:
    if (n->a.i[1])
      fprintf(out, " {vocab-parallel over %s(%d), bytes=%" PRIu64 "%s", ir_axis_name((int)n->a.i[3]),
              (int)n->a.i[2], ir_comm_bytes(n), n->a.i[4] ? "" : "}");
    if (n->a.i[4]) /* a padded vocabulary: the classes among the columns */
      fprintf(out, "%sclasses=%" PRId64 "}", n->a.i[1] ? ", " : " {", n->a.i[4]);
    break;
  default:
    break;
  }
}

/* A pipeline stage's messages to its neighbours, after the node that ends
 * the forward (the activation) and the backward (the input's gradient). */
static void print_pipe_send(FILE *out, const Graph *g, int i) {
  if (g->nstages <= 1) return;
  for (int k = 0; k < PIPE_MAXACT; k++) {
    const Value *x = NULL;
    int to = 0;
    if (i == g->nfwd - 1 && k < g->nsend) x = g->send_act[k], to = g->stage + 1;
    if (i == g->nodes.len - 1 && k < g->nrecv && g->recv_act[k]->grad)
      x = g->recv_act[k]->grad, to = g->stage - 1;
    if (!x) continue;
    fprintf(out, "  send ");
    print_value_ref(out, x);
    fprintf(out, " {to stage %d, bytes=%" PRId64 "}\n", to, ir_numel(&x->shape) * ir_dtype_size(x->dtype));
  }
}

/* One node of the graph: outputs = op operands {attrs} : shapes  # file:line */
static void print_op(FILE *out, const Graph *g, const Node *n) {
  char sh[256];
  fputs("  ", out);
  for (int j = 0; j < n->nout; j++) {
    if (j) fputs(", ", out);
    print_value_ref(out, n->outs[j]);
  }
  fprintf(out, " %s %s", n->bwd ? "+=" : "=", ir_ops[n->op].name);
  for (int j = 0; j < n->nin; j++) {
    fputs(j ? ", " : " ", out);
    print_value_ref(out, n->in[j]);
  }
  if (n->op == OP_RECV) /* a pipeline stage's output gradient, from the next stage */
    fprintf(out, " {from stage %d, bytes=%" PRId64 "}", g->stage + 1,
            ir_numel(&n->out->shape) * ir_dtype_size(n->out->dtype));
  else
    print_attrs(out, n);
  const char *sep = " : ";
  for (int j = 0; j < n->nout; j++) {
    if (!n->outs[j]) continue;
    ir_shape_str(g, n->outs[j], sh, sizeof sh);
    fprintf(out, "%s%s", sep, sh);
    sep = ", ";
  }
  if (n->loc.file) {
    const char *base = strrchr(n->loc.file->path, '/');
    fprintf(out, "  # %s:%d", base ? base + 1 : n->loc.file->path, n->loc.line);
  }
  fputc('\n', out);
}

void ir_print(FILE *out, const Graph *g) {
  fprintf(out, "graph %s {\n", g->model);
  if (g->nsym) {
    fprintf(out, "  # dims:");
    for (int i = 0; i < g->nsym; i++) fprintf(out, " %s=%" PRId64, g->symname[i], g->symval[i]);
    fprintf(out, "\n");
  }
  /* Imported scalar functions, once each, with their derivatives. */
  PtrVec fns = {0};
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    if (n->op != OP_MAP) continue;
    bool seen = false;
    for (int j = 0; j < fns.len; j++) seen |= fns.data[j] == n->a.fn;
    if (seen) continue;
    vec_push(&fns, n->a.fn);
    const ScalarFn *fn = n->a.fn;
    const char *const *an = fn->argnames;
    fprintf(out, "  fn %s(", fn->name);
    for (int a = 0; a < fn->nargs; a++) fprintf(out, "%s%s", a ? ", " : "", an[a]);
    fprintf(out, ") = ");
    sx_print(out, fn->body, an);
    fputc('\n', out);
    for (int a = 0; a < fn->nargs; a++) {
      fprintf(out, "    d/d%s = ", an[a]);
      sx_print(out, fn->dbody[a], an);
      fputc('\n', out);
    }
  }
  char sh[256];
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    const Value *v = n->out;
    if (n->op == OP_INPUT || n->op == OP_PARAM) ir_shape_str(g, v, sh, sizeof sh);
    if (n->op == OP_INPUT && ir_is_recv_act(g, v)) {
      /* a pipeline stage's activation, from the previous stage */
      fprintf(out, "  %%%d = recv {from stage %d, bytes=%" PRId64 "} : %s\n", v->id, g->stage - 1,
              ir_numel(&v->shape) * ir_dtype_size(v->dtype), sh);
      continue;
    }
    if (n->op == OP_INPUT) {
      fprintf(out, "  input $%s : %s\n", v->name, sh);
      continue;
    }
    if (n->op == OP_PARAM) {
      fprintf(out, "  param @%s : %s init=%s%s", v->name, sh, v->init, v->decay ? " decay" : "");
      for (int d = 0; d < v->shape.ndim; d++)
        if (v->shard.axis[d] >= 0)
          fprintf(out, " split(%d over %s%s)", d, ir_axis_name(v->shard.axis[d]),
                  v->shard.nseg > 1 && (v->shard.axis[d] == AX_TP || v->shard.axis[d] == AX_TPR)
                      ? ", segments"
                      : "");
      if (v->grad_partial)
        for (int ax = 0; ax < AX_COUNT; ax++)
          if (v->grad_partial & (1u << ax)) fprintf(out, " grad-partial(%s)", ir_axis_name(ax));
      fputc('\n', out);
      continue;
    }
    print_op(out, g, n);
    print_pipe_send(out, g, i);
  }
  if (g->wcasts.len) fprintf(out, "  # once per step, before the first microbatch:\n");
  for (int i = 0; i < g->wcasts.len; i++) print_op(out, g, g->wcasts.data[i]);
  if (g->loss) {
    fprintf(out, "  return ");
    print_value_ref(out, g->loss);
    fputc('\n', out);
  }
  fprintf(out, "}\n");
}
