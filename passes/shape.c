/* shape.c — re-derives every value's shape and dtype from the op table and
 * checks the graph's structure.  Lowering already inferred shapes node by
 * node (so user errors point at the DSL); this pass is the verifier that
 * every later pass's edits are held to. */
#include "passes.h"

int pass_shape(Module *m) {
  if (!m->graph) return 0;
  if (ir_verify(m->graph)) return -1;
  /* The last look at the whole, unsharded forward graph: its FLOPs are the
   * model FLOPs, the same under every strategy. */
  Graph *g = m->graph;
  m->fwd_flops = ir_flops(g, true);
  m->fwd_tokens = 1;
  for (int i = 0; i < g->nsym; i++) m->fwd_tokens *= g->symval[i];
  return 0;
}
