/* frontend.c — the frontend as one call: check, lower, then warn about what
 * the model never used. */
#include "sema.h"

Module *frontend_run(Program *prog, const SemaOptions *opt) {
  Module *m = sema_run(prog, opt);
  if (!m || diag_error_count()) return m;
  if (m->lowerable) lower_model(m);
  if (!diag_error_count()) sema_warn_unused(m);
  return m;
}
