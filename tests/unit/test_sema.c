/* test_sema.c — train-block and strategy details that the diagnostics corpus
 * cannot see (they change the result, not stderr): explicit zeros, --mesh
 * sizes, the keys a strategy error is about, expression spans.  (The
 * messages printed on the way are the corpus's business.) */
#include "passes.h"
#include "sema.h"
#include "test.h"

static Module *compile_with(const char *text, const char *mesh, const char *strategy) {
  diag_reset();
  SrcFile *f = src_from_string("t.shard", text);
  Program *p = ast_parse(f);
  if (!p || diag_error_count()) return NULL;
  SemaOptions o = {0};
  o.mesh = mesh;
  o.strategy = strategy;
  Module *m = frontend_run(p, &o);
  if (!m || diag_error_count()) return NULL;
  return m;
}

static const char *model =
    "model m(x: f32[B, 4], y: i32[B]) {\n"
    "  return cross_entropy(linear(x, 2), y)\n"
    "}\n";

int main(void) {
  diag_set_quiet_warnings(1);
  char buf[512];

  /* steps = 0 and seed = 0 are values, not "use the default". */
  snprintf(buf, sizeof buf, "%strain { steps = 0, seed = 0 }\n", model);
  Module *m = compile_with(buf, NULL, NULL);
  ASSERT(1, m != NULL);
  if (m) {
    ASSERT(0, m->train.steps);
    ASSERT(0, m->train.seed);
  }
  snprintf(buf, sizeof buf, "%strain { batch = 2 }\n", model);
  m = compile_with(buf, NULL, NULL);
  ASSERT(1, m != NULL);
  if (m) {
    ASSERT(10, m->train.steps);
    ASSERT(1337, m->train.seed);
  }

  /* --mesh: whole numbers only. */
  snprintf(buf, sizeof buf, "%strain { batch = 8 }\n", model);
  m = compile_with(buf, "2x4", NULL);
  ASSERT(1, m != NULL);
  if (m) {
    ASSERT(2, m->train.mesh->nodes);
    ASSERT(4, m->train.mesh->per_node);
    ASSERT(8, m->train.plan.dp);
  }
  ASSERT(1, compile_with(buf, "3abc", NULL) == NULL);
  ASSERT(1, compile_with(buf, "99999999999", NULL) == NULL);
  ASSERT(1, compile_with(buf, "2x", NULL) == NULL);
  ASSERT(1, compile_with(buf, "x2", NULL) == NULL);
  ASSERT(1, compile_with(buf, "4:H100_SXM", NULL) != NULL);

  /* A strategy key given as a constant. */
  snprintf(buf, sizeof buf, "const ranks = 2\n%strain { batch = 8, dp = ranks }\n", model);
  m = compile_with(buf, "2", NULL);
  ASSERT(1, m != NULL);
  if (m) ASSERT(2, m->train.plan.dp);

  /* plan_resolve_keys names the key an error is about; sizes far beyond
   * the mesh are errors, not overflows. */
  Plan p;
  char err[256];
  unsigned keys;
  plan_default(&p);
  ASSERT(0, plan_parse_spec("dp=2,sp=megatron", &p, err, sizeof err));
  ASSERT(-1, plan_resolve_keys(&p, 2, err, sizeof err, &keys));
  ASSERT(PLAN_SP, keys);
  plan_default(&p);
  ASSERT(0, plan_parse_spec("dp=2,tp=2", &p, err, sizeof err));
  ASSERT(-1, plan_resolve_keys(&p, 8, err, sizeof err, &keys));
  ASSERT(0, keys);
  plan_default(&p);
  ASSERT(0, plan_parse_spec("tp=1048576,pp=1048576,sp=ring:1048576,dp=1048576", &p, err,
                            sizeof err));
  ASSERT(-1, plan_resolve_keys(&p, 1 << 20, err, sizeof err, &keys));
  plan_default(&p);
  ASSERT(-1, plan_parse_spec("tp2d=99999999999x99999999999", &p, err, sizeof err));

  /* A binary expression spans both operands; its operator is separate. */
  diag_reset();
  Program *pr = ast_parse(src_from_string("t.shard", "const x = 12 * (3 - 1)\n"));
  ASSERT(1, pr && pr->decls.len == 1);
  if (pr && pr->decls.len == 1) {
    Expr *e = ((Decl *)pr->decls.data[0])->value;
    ASSERT(E_BIN, e->kind);
    ASSERT(11, e->loc.col);
    ASSERT(12, e->loc.len);
    ASSERT(14, e->oploc.col);
    ASSERT(1, e->oploc.len);
  }
  TEST_MAIN_END();
}
