/* shape.c — re-derives every value's shape and dtype from the op table and
 * checks the graph's structure.  Lowering already inferred shapes node by
 * node (so user errors point at the DSL); this pass is the verifier that
 * every later pass's edits are held to. */
#include "passes.h"

/* The most elements one tensor of the whole model may have: 2^48 (a
 * global batch of 16M tokens' logits over a 128K vocabulary is 2^41), so
 * that its bytes, and a rank's sum of such buffers, stay far inside int64. */
#define SHAPE_MAX_NUMEL ((int64_t)1 << 48)

static int check_sizes(Graph *g) {
  for (int i = 0; i < g->values.len; i++) {
    const Value *v = g->values.data[i];
    if (!v || ir_numel(&v->shape) <= SHAPE_MAX_NUMEL) continue;
    char buf[256];
    ir_shape_str(g, v, buf, sizeof buf);
    long double n = 1;
    for (int k = 0; k < v->shape.ndim; k++) n *= (long double)v->shape.d[k].n;
    diag_error(v->loc, "%s%s%s is %s: %.3Lg elements, more than the limit of 2^48 (%.3g) for one "
               "tensor", v->name ? "'" : "", v->name ? v->name : "this tensor", v->name ? "'" : "",
               buf, n, (double)SHAPE_MAX_NUMEL);
    return -1;
  }
  return 0;
}

int pass_shape(Module *m) {
  if (!m->graph) return 0;
  if (check_sizes(m->graph) || ir_verify(m->graph)) return -1;
  /* The last look at the whole, unsharded forward graph: its FLOPs are the
   * model FLOPs, the same under every strategy. */
  Graph *g = m->graph;
  m->fwd_flops = ir_flops(g, true);
  m->fwd_tokens = 1;
  for (int i = 0; i < g->nsym; i++) m->fwd_tokens *= g->symval[i];
  return 0;
}
