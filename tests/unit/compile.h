/* compile.h — how the unit tests get a Module: parse and check a file
 * (--mesh and --strategy as given, NULL for the file's own), then run every
 * pass.  Include after test.h. */
#ifndef SHARDC_TEST_COMPILE_H
#define SHARDC_TEST_COMPILE_H

#include "passes.h"
#include "sema.h"

/* The frontend only (NULL on errors, which count as failed checks). */
static inline Module *test_frontend(const char *path, const char *mesh, const char *strategy) {
  diag_reset();
  SrcFile *f = src_load(path);
  ASSERT(1, f != NULL);
  if (!f) return NULL;
  Program *p = ast_parse(f);
  SemaOptions o = {0};
  o.mesh = mesh;
  o.strategy = strategy;
  Module *m = p ? frontend_run(p, &o) : NULL;
  ASSERT(0, diag_error_count());
  return m && m->graph && !diag_error_count() ? m : NULL;
}

/* The frontend and every pass. */
static inline Module *test_compile(const char *path, const char *mesh, const char *strategy) {
  Module *m = test_frontend(path, mesh, strategy);
  if (!m) return NULL;
  for (int i = 0; i < pass_count; i++) ASSERT(0, pass_list[i].run(m));
  return diag_error_count() ? NULL : m;
}

#endif
