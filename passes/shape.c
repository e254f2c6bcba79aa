/* shape.c — re-derives every value's shape and dtype from the op table and
 * checks the graph's structure.  Lowering already inferred shapes node by
 * node (so user errors point at the DSL); this pass is the verifier that
 * every later pass's edits are held to. */
#include "passes.h"

int pass_shape(Module *m) {
  if (!m->graph) return 0;
  return ir_verify(m->graph);
}
