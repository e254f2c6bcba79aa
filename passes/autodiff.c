/* autodiff.c — reverse-mode differentiation of the forward graph.
 *
 * Walks the forward nodes backwards and appends, for each one on a path
 * from a parameter to the loss, the backward op of its rule.  Backward ops
 * accumulate into gradient values, so a value used several times (the
 * residual stream, a tied embedding) sums its contributions without extra
 * adds, and parameter gradients sum over microbatches.  The loss gradient is
 * seeded with 1/mb so the accumulated gradient is that of the mean loss.
 */
#include "passes.h"

/* Whether v lies on a path from a parameter (so it needs a gradient), and
 * how many forward nodes read it. */
static bool *needs;
static int *fwd_uses;

static bool is_float(const Value *v) { return v->dtype != DT_I32 && v->dtype != DT_U16; }

/* The gradient of v, or NULL when v needs none.  A reshape's output is a
 * view of its input, and so is its gradient. */
static Value *G(Graph *g, Value *v) {
  if (!needs[v->id]) return NULL;
  if (v->grad) return v->grad;
  Value *d = ir_grad(g, v);
  if (v->def && v->def->op == OP_RESHAPE) d->alias = G(g, v->def->in[0]);
  return d;
}

static bool emit(Graph *g, OpKind op, Value **in, int nin, Value **outs, const Attrs *a,
                 const Node *fwd) {
  int nout = op == OP_MAP_BWD ? nin - 1 : ir_ops[op].nout;
  bool any = false;
  for (int i = 0; i < nout; i++) any |= outs[i] != NULL;
  if (!any) return true;
  return ir_add_bwd(g, op, in, nin, outs, a, fwd) != NULL;
}

/* Appends the backward of forward node n: by its class, which fixes what
 * the backward op (ops.def's backward column) reads. */
static bool backward(Graph *g, Node *n) {
  Value *dy = n->out->grad;
  Value **x = n->in;
  Value *o[IR_MAXOUT] = {0};
  OpKind b = ir_ops[n->op].bwd;
  switch (ir_ops[n->op].cls) {
  case OPC_UNARY:
  case OPC_MAP:
  case OPC_SLICE:
  case OPC_ROPE:
  case OPC_MATMUL:
  case OPC_GATHER:
  case OPC_LOSS: {
    /* dy and the operands -> a gradient for each float operand (integer
     * ids and targets have none) */
    Value *in[IR_MAXIN];
    in[0] = dy;
    for (int i = 0; i < n->nin; i++) {
      in[i + 1] = x[i];
      o[i] = G(g, x[i]);
    }
    Attrs a = n->a;
    /* Dropout's mask is a function of (seed, forward node, step): name the node. */
    if (n->op == OP_DROPOUT) a.i[1] = n->id, a.ni = 2;
    return emit(g, b, in, n->nin + 1, o, &a, n);
  }
  case OPC_BINARY: {
    Value *in[3] = {dy, x[0], x[1]};
    /* An operand of an add (or the left of a sub) that has no other use and
     * the result's shape has exactly dy as its gradient: share dy's buffer
     * instead of copying into a new one (the residual stream and every
     * bias add). */
    for (int k = 0; k < 2 && n->op != OP_MUL; k++) {
      if (n->op == OP_SUB && k == 1) {
        o[1] = G(g, x[1]); /* -dy, never shared */
        break;
      }
      if (needs[x[k]->id] && !x[k]->grad && fwd_uses[x[k]->id] == 1 &&
          ir_shape_eq(&x[k]->shape, &n->out->shape) && x[k]->def->op != OP_RESHAPE &&
          x[k]->role != ROLE_PARAM && x[0] != x[1])
        x[k]->grad = dy;
      else
        o[k] = G(g, x[k]);
    }
    if (n->op == OP_MUL) {
      o[0] = G(g, x[0]);
      o[1] = G(g, x[1]);
    }
    return emit(g, b, in, 3, o, &n->a, n);
  }
  case OPC_ROWWISE: {
    /* dy and the output */
    Value *in[2] = {dy, n->out};
    o[0] = G(g, x[0]);
    return emit(g, b, in, 2, o, &n->a, n);
  }
  case OPC_NORM: {
    /* dy, x, the weight and the statistics -> dx and the weights' gradients */
    Value *in[IR_MAXIN] = {dy, x[0], x[1]};
    for (int j = 1; j < n->nout; j++) in[2 + j] = n->outs[j];
    for (int k = 0; k < n->nin; k++) o[k] = G(g, x[k]);
    return emit(g, b, in, n->nout + 2, o, &n->a, n);
  }
  case OPC_ATTENTION: {
    /* dy, q, k, v and the outputs (o, lse) -> dq, dk, dv */
    Value *in[6] = {dy, x[0], x[1], x[2], n->outs[0], n->outs[1]};
    o[0] = G(g, x[0]);
    o[1] = G(g, x[1]);
    o[2] = G(g, x[2]);
    return emit(g, b, in, 6, o, &n->a, n);
  }
  case OPC_VIEW:
    /* dy is a view of dx (see G): nothing to compute. */
    return true;
  case OPC_COMM: {
    /* The adjoint: an accumulating op (shard -> shard_bwd), or the adjoint
     * collective into a new buffer, then accumulated: all-reduce <->
     * pass-through, all-gather -> own chunk (or, for a gathered input of a
     * column-parallel op, reduce-scatter), reduce-scatter -> all-gather,
     * tp_copy -> all-reduce. */
    Value *dx = G(g, x[0]);
    if (!dx) return true;
    Value *t = dy;
    if (b != OP_NONE && ir_ops[b].cls == OPC_B_ACC) {
      Value *in[2] = {dy, x[0]};
      o[0] = dx;
      return emit(g, b, in, 2, o, &n->a, n);
    }
    if (b != OP_NONE) {
      Node *c = ir_add(g, b, &dy, 1, &n->a, n->loc, n->scope, ir_ops[b].name);
      if (!c) return false;
      c->fwd = n;
      t = c->out;
    }
    Value *in[2] = {t, x[0]};
    o[0] = dx;
    return emit(g, OP_ACC, in, 2, o, &n->a, n);
  }
  default:
    diag_error(n->loc, "internal: autodiff has no rule for %s", ir_ops[n->op].name);
    return false;
  }
}

int pass_autodiff(Module *m) {
  Graph *g = m->graph;
  if (!g || !g->loss) return 0;
  if (g->nfwd) {
    diag_error(g->loss->loc, "internal: autodiff ran twice");
    return -1;
  }
  g->nfwd = g->nodes.len;
  needs = arena_alloc(sizeof(bool) * (size_t)(g->values.len + 1));
  fwd_uses = arena_alloc(sizeof(int) * (size_t)(g->values.len + 1));
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++) fwd_uses[n->in[k]->id]++;
    for (int j = 0; j < n->nout; j++) {
      Value *v = n->outs[j];
      /* a pipeline stage's received activation: its gradient goes back */
      bool need = n->op == OP_PARAM || ir_is_recv_act(g, v);
      for (int k = 0; k < n->nin; k++) need |= needs[n->in[k]->id];
      /* Side outputs (norm statistics, attention's lse) carry no gradient. */
      needs[v->id] = need && is_float(v) && (j == 0 || n->op == OP_PARAM);
    }
  }
  bool any = needs[g->loss->id];
  for (int i = 0; i < g->nsend; i++) any |= needs[g->send_act[i]->id];
  if (!any) {
    diag_warning(g->loss->loc, "the loss does not depend on any parameter");
    return 0;
  }
  /* Seed: d(mean loss over mb microbatches)/d(loss of one) = 1/mb.  Under
   * sp=ring the loss is a mean over 1/sp of a row's tokens, and the step
   * sums gradients over the sp ranks: 1/(mb·sp).  Before the last pipeline
   * stage: the gradients of the sent activations, received from the next
   * stage, in their order (one that needs none gets none). */
  Attrs a = {0};
  int mb = m->train.plan.mb > 0 ? m->train.plan.mb : 1;
  const Plan *pl = &m->train.plan;
  a.f[0] = 1.0 / (mb * (pl->sp_kind == SP_RING && pl->sp > 1 ? pl->sp : 1));
  int nseed = g->pipe_out ? g->nsend : 1;
  for (int i = 0; i < nseed; i++) {
    Value *l = g->pipe_out ? g->send_act[i] : g->loss;
    Value *outs[1] = {G(g, l)};
    if (!outs[0]) continue;
    Node *seed = ir_add_bwd(g, g->pipe_out ? OP_RECV : OP_FILL, NULL, 0, outs, &a, l->def);
    if (!seed) return -1;
    seed->bwd = false; /* a fill sets its output */
  }
  for (int i = g->nfwd - 1; i >= 0; i--) {
    Node *n = g->nodes.data[i];
    if (n->op == OP_INPUT || n->op == OP_PARAM || !n->out->grad) continue;
    if (!backward(g, n)) return -1;
  }
  return 0;
}
