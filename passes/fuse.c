/* fuse.c — which nodes of a scheduled graph run together (for the per-rank
 * program, passes/program.c):
 * - a bias add right after a matmul whose plain product nothing else reads
 *   becomes the matmul's bias (one call, the product is never written);
 * - the bias gradient of such an add is summed by the matmul's backward call;
 * - a chain of elementwise forward ops (add/sub/mul with broadcasting, scale,
 *   relu, gelu, silu, imported scalar functions) is one loop; a value inside
 *   the chain is stored only when a later node reads it (the backward).
 * Fusion happens only between adjacent nodes.  It is decided from the graph
 * alone: memplan asks fuse_windows first and keeps every input of a group
 * alive to the group's end, so the overlap checks below never fire on a
 * planned graph (they stay as the guard for a graph planned otherwise).
 * A recomputed copy of forward nodes (Node.remat) fuses as its originals did
 * and never further, so it computes the same numbers.
 */
#include "fuse.h"

static Value *root(Value *v) {
  while (v && v->alias) v = v->alias;
  return v;
}

static int64_t numel(const Value *v) { return ir_numel(&v->shape); }
static int64_t last_dim(const Value *v) {
  return v->shape.ndim ? v->shape.d[v->shape.ndim - 1].n : 1;
}

bool fuse_is_view(const Node *n) {
  return (n->op == OP_RESHAPE || n->op == OP_TP_COPY) && root(n->out) == root(n->in[0]);
}

bool fuse_reads_data(const Node *n, int k) {
  if (n->op == OP_RESHAPE || n->op == OP_TP_COPY) return !fuse_is_view(n);
  return ir_reads_data(n, k);
}

bool fuse_emits_code(const Node *n) {
  return n->op != OP_INPUT && n->op != OP_PARAM && !fuse_is_view(n);
}

bool fuse_overlaps(const Value *a, const Value *b) {
  a = root((Value *)a);
  b = root((Value *)b);
  if (a->offset < 0 || b->offset < 0) return false;
  int64_t a0 = a->offset, a1 = a0 + numel(a) * ir_dtype_size(a->dtype);
  int64_t b0 = b->offset, b1 = b0 + numel(b) * ir_dtype_size(b->dtype);
  return a0 < b1 && b0 < a1;
}

/* Elementwise ops the fused loops compute from a scalar expression
 * (fuse_op_expr): the unary, binary and map classes, but dropout, whose mask
 * needs its kernel. */
bool fuse_is_loop_op(OpKind op) {
  OpClass c = ir_ops[op].cls;
  return c == OPC_BINARY || c == OPC_MAP || (c == OPC_UNARY && op != OP_DROPOUT);
}

/* The next node after i that emits code (nn if none). */
static int next_code(const Fusion *f, int i) {
  int j = i + 1;
  while (j < f->nn && !fuse_emits_code(f->g->nodes.data[j])) j++;
  return j;
}

/* The loss, or an activation a pipeline stage sends: stored, never fused away. */
static bool kept(const Fusion *f, const Value *v) {
  if (v == f->g->loss) return true;
  for (int i = 0; i < f->g->nsend; i++)
    if (v == f->g->send_act[i]) return true;
  return false;
}

/* Forward matmul whose product goes only into a bias add right after it. */
static Node *find_bias(Fusion *f, Node *mm) {
  Value *y = mm->out;
  if (ir_summa_q(mm)) return NULL; /* SUMMA: the bias gradient is summed per step (tp-col) */
  if (kept(f, y) || f->fwd_reads[y->id] != 1 || f->reads[y->id] != 1) return NULL;
  Node *a = f->fwd_reader[y->id];
  if (a->op != OP_ADD || a->in[0] != y || a->in[1] == y) return NULL;
  Value *b = a->in[1];
  if (b->shape.ndim != 1 || b->shape.d[0].n != last_dim(y) || b->dtype == DT_I32) return NULL;
  if (next_code(f, mm->id) != a->id) return NULL;
  if (mm->remat && (!a->remat || f->bias[mm->remat->id] != a->remat)) return NULL;
  for (int k = 0; k < 2; k++)
    if (fuse_overlaps(a->out, mm->in[k])) return NULL;
  if (fuse_overlaps(a->out, b)) return NULL;
  return a;
}

/* An add_bwd that only sums a bias gradient, right before the matmul_bwd of
 * the matmul that produced the add's input: returns that matmul_bwd. */
static Node *find_dbias(Fusion *f, Node *n) {
  if (n->op != OP_ADD_BWD || n->outs[0] || !n->outs[1]) return NULL;
  Value *db = n->outs[1];
  if (!root(db)->persistent || db->shape.ndim != 1) return NULL;
  int j = next_code(f, n->id);
  if (j >= f->nn) return NULL;
  Node *mb = f->g->nodes.data[j];
  if (mb->op != OP_MATMUL_BWD || mb->in[0] != n->in[0] || !n->fwd || !mb->fwd) return NULL;
  if (ir_summa_q(mb)) return NULL;
  if (mb->fwd->out != n->fwd->in[0] || db->shape.d[0].n != last_dim(mb->in[0])) return NULL;
  if (f->dbias[mb->id]) return NULL;
  return mb;
}

/* The operand of chain node c that is the previous chain value v, checked
 * to be a full-size operand. */
static bool full_operand(const Node *c, const Value *v) {
  bool found = false;
  for (int k = 0; k < c->nin; k++)
    if (c->in[k] == v) found = true;
  return found && numel(v) == numel(c->out);
}

int64_t fuse_bcast_of(const Node *c) {
  int64_t inner = 0, n = numel(c->out);
  for (int k = 0; k < c->nin; k++) {
    int64_t m = numel(c->in[k]);
    if (m == n) continue;
    if (m <= 0 || n % m) return -1;
    if (inner && inner != m) return -1;
    inner = m;
  }
  return inner;
}

bool fuse_chain_stored(const Fusion *f, Node *const *ch, int len, int k) {
  Value *v = ch[k]->out;
  return k == len - 1 || kept(f, v) || f->reads[v->id] > 1;
}

/* Whether a chain's stored outputs stay clear of everything it reads. */
static bool chain_safe(Fusion *f, Node **ch, int len) {
  for (int k = 0; k < len; k++) {
    if (!fuse_chain_stored(f, ch, len, k)) continue;
    Value *w = ch[k]->out;
    for (int j = 0; j < len; j++)
      for (int i = 0; i < ch[j]->nin; i++) {
        Value *r = ch[j]->in[i];
        if (j > 0 && r == ch[j - 1]->out) continue;   /* inside the loop */
        if (fuse_overlaps(w, r)) return false;
      }
  }
  return true;
}

/* Length of the elementwise chain that starts at node n. */
static int find_chain(Fusion *f, Node *n, Node **ch) {
  if (!fuse_is_loop_op(n->op) || fuse_bcast_of(n) < 0) return 0;
  int64_t inner = fuse_bcast_of(n);
  int len = 0;
  ch[len++] = n;
  while (len < FUSE_MAX_CHAIN) {
    Node *last = ch[len - 1];
    Value *v = last->out;
    if (kept(f, v) || f->fwd_reads[v->id] != 1) break;
    Node *c = f->fwd_reader[v->id];
    if (!fuse_is_loop_op(c->op) || f->skip[c->id] || next_code(f, last->id) != c->id) break;
    if (n->remat && (!c->remat || f->next[last->remat->id] != c->remat)) break;
    if (numel(c->out) != numel(n->out) || !full_operand(c, v)) break;
    int64_t b = fuse_bcast_of(c);
    if (b < 0 || (b && inner && b != inner)) break;
    if (b) inner = b;
    ch[len++] = c;
  }
  while (len > 1 && !chain_safe(f, ch, len)) len--;
  return len;
}

int fuse_chain(const Fusion *f, Node *n, Node **ch) {
  int len = f->chain_len[n->id] ? f->chain_len[n->id] : 1;
  ch[0] = n;
  for (int k = 1; k < len; k++) ch[k] = f->next[ch[k - 1]->id];
  return len;
}

Fusion *fuse_analyse(Graph *g) {
  Fusion *f = arena_alloc(sizeof *f);
  int nv = g->values.len, nn = g->nodes.len;
  f->g = g;
  f->nn = nn;
  f->reads = arena_alloc(sizeof(int) * (size_t)(nv + 1));
  f->fwd_reads = arena_alloc(sizeof(int) * (size_t)(nv + 1));
  f->fwd_reader = arena_alloc(sizeof(Node *) * (size_t)(nv + 1));
  f->skip = arena_alloc(sizeof(bool) * (size_t)(nn + 1));
  f->bias = arena_alloc(sizeof(Node *) * (size_t)(nn + 1));
  f->dbias = arena_alloc(sizeof(Value *) * (size_t)(nn + 1));
  f->dbias_node = arena_alloc(sizeof(Node *) * (size_t)(nn + 1));
  f->chain_len = arena_alloc(sizeof(int) * (size_t)(nn + 1));
  f->next = arena_alloc(sizeof(Node *) * (size_t)(nn + 1));
  f->loop = arena_alloc(sizeof(bool) * (size_t)(nn + 1));
  for (int i = 0; i < nn; i++) {
    Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++) {
      Value *v = n->in[k];
      bool dup = false;
      for (int j = 0; j < k; j++) dup |= n->in[j] == v;
      if (dup) continue;
      if (fuse_reads_data(n, k)) f->reads[v->id]++;
      /* forward readers; a recomputed copy's only of the copies (so the
       * forward's own chains stay as they are) */
      if (i < g->nfwd || (n->remat && v->def && v->def->remat)) {
        f->fwd_reads[v->id]++;
        f->fwd_reader[v->id] = n;
      }
    }
  }
  for (int i = 0; i < nn; i++) {
    Node *n = g->nodes.data[i];
    if (f->skip[i] || (i >= g->nfwd && !n->remat)) continue;
    if (n->op == OP_MATMUL) {
      Node *a = find_bias(f, n);
      if (a) {
        f->bias[i] = a;
        f->skip[a->id] = true;
        f->nbias++;
      }
      continue;
    }
    Node *ch[FUSE_MAX_CHAIN];
    int len = find_chain(f, n, ch);
    if (len > 0) {
      f->chain_len[i] = len;
      for (int k = 1; k < len; k++) {
        f->skip[ch[k]->id] = true;
        f->next[ch[k - 1]->id] = ch[k];
      }
      /* a copy of part of a forward chain computes as a loop, as it did */
      f->loop[i] = n->remat && (f->chain_len[n->remat->id] > 1 || f->skip[n->remat->id]);
      if (len > 1) {
        f->nchains++;
        f->nchained += len;
      }
    }
  }
  for (int i = g->nfwd; i < nn; i++) {
    Node *n = g->nodes.data[i];
    Node *mb = find_dbias(f, n);
    if (mb) {
      f->dbias[mb->id] = n->outs[1];
      f->dbias_node[mb->id] = n;
      f->skip[i] = true;
      f->ndbias++;
    }
  }
  return f;
}

void fuse_windows(Graph *g, int *last) {
  Fusion *f = fuse_analyse(g);
  for (int i = 0; i < f->nn; i++) last[i] = i;
  for (int i = 0; i < f->nn; i++) {
    if (f->bias[i]) last[i] = last[f->bias[i]->id] = f->bias[i]->id;
    Node *ch[FUSE_MAX_CHAIN];
    int len = f->chain_len[i] > 1 ? fuse_chain(f, g->nodes.data[i], ch) : 0;
    for (int k = 0; k < len; k++) last[ch[k]->id] = ch[len - 1]->id;
  }
}

/* ---- elementwise ops as scalar expressions ---- */

SExpr *fuse_fn_expr(const ScalarFn *fn, int which, SExpr *const *args) {
  SExpr *e = which < 0 ? fn->body : fn->dbody[which];
  /* Two steps so an argument expression that mentions arg k is not rewritten
   * again when arg k itself is replaced. */
  enum { PLACEHOLDER = 1 << 20 };
  for (int i = 0; i < fn->nargs; i++) e = sx_subst(e, sx_arg(i), sx_arg(PLACEHOLDER + i));
  for (int i = 0; i < fn->nargs; i++) e = sx_subst(e, sx_arg(PLACEHOLDER + i), args[i]);
  return e;
}

SExpr *fuse_op_expr(const Node *n, SExpr *const *in) {
  SExpr *x = in[0], *zero = sx_const(0), *one = sx_const(1);
  switch (n->op) {
  case OP_ADD: return sx_bin(SX_ADD, in[0], in[1]);
  case OP_SUB: return sx_bin(SX_SUB, in[0], in[1]);
  case OP_MUL: return sx_bin(SX_MUL, in[0], in[1]);
  case OP_SCALE: return sx_bin(SX_MUL, x, sx_const(n->a.f[0]));
  case OP_RELU: return sx_select(sx_bin(SX_GT, x, zero), x, zero);
  case OP_SILU: /* x·sigmoid(x) */
    return sx_bin(SX_DIV, x, sx_bin(SX_ADD, one, sx_un(SX_EXP, sx_un(SX_NEG, x))));
  case OP_GELU: { /* tanh approximation, as rt_gelu_forward */
    SExpr *x3 = sx_bin(SX_MUL, sx_bin(SX_MUL, x, x), x);
    SExpr *u = sx_bin(SX_MUL, sx_const(0.7978845608028654),
                      sx_bin(SX_ADD, x, sx_bin(SX_MUL, sx_const(0.044715), x3)));
    return sx_bin(SX_MUL, sx_bin(SX_MUL, sx_const(0.5), x), sx_bin(SX_ADD, one, sx_un(SX_TANH, u)));
  }
  case OP_MAP: return fuse_fn_expr(n->a.fn, -1, in);
  case OP_CAST: return x; /* the store rounds */
  default: return NULL;
  }
}
