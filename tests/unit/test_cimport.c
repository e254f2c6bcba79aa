/* test_cimport.c — importing C scalar functions with libclang.
 *
 * tests/cimport/good.h is also compiled into this test, so every imported
 * expression is checked against the C compiler's own reading of the same
 * function, and every derivative against central finite differences.
 * tests/cimport/bad.h holds one rejected construct per function; each must
 * fail with a message that names it and points at the right line.
 * Runs with the working directory tests/ (as ctest does).
 */
#include "sexpr.h"
#include "test.h"

#include <limits.h>
#include <unistd.h>

#include "../cimport/good.h"

static SrcLoc use_loc;

/* ---- stderr capture, to check what diagnostics say ---- */

static char captured[16384];
static FILE *cap_file;
static int cap_saved_fd = -1;

static void cap_begin(void) {
  fflush(stderr);
  cap_file = tmpfile();
  cap_saved_fd = dup(2);
  dup2(fileno(cap_file), 2);
}

static const char *cap_end(void) {
  fflush(stderr);
  dup2(cap_saved_fd, 2);
  close(cap_saved_fd);
  rewind(cap_file);
  size_t n = fread(captured, 1, sizeof captured - 1, cap_file);
  captured[n] = 0;
  fclose(cap_file);
  return captured;
}

#define ASSERT_CONTAINS(needle, hay)                                                   \
  do {                                                                                 \
    const char *n_ = (needle), *h_ = (hay);                                            \
    test_checks++;                                                                     \
    if (!strstr(h_, n_)) {                                                             \
      fprintf(stderr, "%s:%d: expected \"%s\" in:\n%s\n", __FILE__, __LINE__, n_, h_); \
      test_failures++;                                                                 \
    }                                                                                  \
  } while (0)

/* ---- the C side of good.h ---- */

typedef double (*CFn)(const double *a);
#define WRAP1(f) static double c_##f(const double *a) { return f((float)a[0]); }
#define WRAP2(f) static double c_##f(const double *a) { return f((float)a[0], (float)a[1]); }
WRAP1(mish)
WRAP1(mish_nested)
WRAP1(gelu_tanh)
WRAP1(gelu_erf)
WRAP1(gelu_pi)
WRAP1(silu)
WRAP2(swish)
WRAP1(leaky_relu)
WRAP1(relu6)
WRAP1(hardish)
WRAP2(branches)
WRAP2(powers)
WRAP1(macro_ops)
WRAP1(int_consts)
WRAP1(extras)
WRAP1(static_local)
WRAP1(square)
WRAP2(syntax_zoo)
static double c_mix(const double *a) { return mix(a[0], (float)a[1]); }

typedef struct Case {
  const char *name;
  CFn c;
  int nargs;
  double lo[2], hi[2];
} Case;

static const Case cases[] = {
    {"mish", c_mish, 1, {-6}, {6}},
    {"mish_nested", c_mish_nested, 1, {-6}, {6}},
    {"gelu_tanh", c_gelu_tanh, 1, {-6}, {6}},
    {"gelu_erf", c_gelu_erf, 1, {-6}, {6}},
    {"gelu_pi", c_gelu_pi, 1, {-6}, {6}},
    {"silu", c_silu, 1, {-8}, {8}},
    {"swish", c_swish, 2, {-5, -2}, {5, 2}},
    {"mix", c_mix, 2, {-3, -3}, {3, 3}},
    {"leaky_relu", c_leaky_relu, 1, {-3}, {3}},
    {"relu6", c_relu6, 1, {-2}, {8}},
    {"hardish", c_hardish, 1, {-2}, {2}},
    {"branches", c_branches, 2, {-4, -4}, {4, 4}},
    {"powers", c_powers, 2, {0.2, 0.3}, {3, 2}},
    {"macro_ops", c_macro_ops, 1, {-3}, {3}},
    {"int_consts", c_int_consts, 1, {-3}, {3}},
    {"extras", c_extras, 1, {-4}, {4}},
    {"static_local", c_static_local, 1, {-3}, {3}},
    {"square", c_square, 1, {-3}, {3}},
    {"syntax_zoo", c_syntax_zoo, 2, {-4, -4}, {4, 4}},
};

/* Deterministic points in a box. */
static double lcg(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (*s >> 8) / 16777216.0;
}

static ScalarFn *import_good(const char *name) {
  diag_reset();
  ScalarFn *f = cimp_import("good.h", "cimport", name, use_loc);
  ASSERT(0, diag_error_count());
  if (!f) fprintf(stderr, "import of '%s' failed\n", name);
  return f;
}

/* Imported body == the compiled C function, and every partial derivative ==
 * central differences of the body, at 200 points.  Points where left and
 * right one-sided differences disagree sit on a kink and are skipped. */
static void check_case(const Case *k) {
  ScalarFn *f = import_good(k->name);
  test_checks++;
  if (!f) {
    test_failures++;
    return;
  }
  ASSERT(k->nargs, f->nargs);
  unsigned seed = 12345;
  int compared = 0, skipped = 0;
  for (int i = 0; i < 200; i++) {
    double x[2];
    for (int j = 0; j < k->nargs; j++) x[j] = k->lo[j] + (k->hi[j] - k->lo[j]) * lcg(&seed);
    double want = k->c(x), got = sx_eval(f->body, x);
    double scale = fabs(want) > 1 ? fabs(want) : 1;
    test_checks++;
    if (!(fabs(got - want) <= 1e-4 * scale)) {
      fprintf(stderr, "%s(%g, %g): imported %.9g, C %.9g\n", k->name, x[0], x[1], got, want);
      test_failures++;
    }
    for (int j = 0; j < k->nargs; j++) {
      double xj = x[j], h = 1e-5 * (fabs(xj) > 1 ? fabs(xj) : 1);
      double f0 = sx_eval(f->body, x);
      x[j] = xj + h;
      double fp = sx_eval(f->body, x);
      x[j] = xj - h;
      double fm = sx_eval(f->body, x);
      x[j] = xj;
      double left = (f0 - fm) / h, right = (fp - f0) / h;
      if (fabs(left - right) > 1e-3 * (fabs(left) > 1 ? fabs(left) : 1)) {
        skipped++;
        continue;
      }
      double fd = (fp - fm) / (2 * h), d = sx_eval(f->dbody[j], x);
      test_checks++;
      compared++;
      if (!(fabs(d - fd) <= 1e-6 * (fabs(fd) > 1 ? fabs(fd) : 1))) {
        fprintf(stderr, "d %s / d %s at (%g, %g): %.12g, finite difference %.12g\n", k->name,
                f->argnames[j], x[0], x[1], d, fd);
        test_failures++;
      }
    }
  }
  /* Kinks are rare: almost every point must have been compared. */
  ASSERT(1, skipped <= 200 * k->nargs / 50);
  ASSERT(1, compared >= 190 * k->nargs);
}

static void test_good(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);

  ScalarFn *f = import_good("swish");
  if (!f) return;
  ASSERT_STR("swish", f->name);
  ASSERT(2, f->nargs);
  ASSERT_STR("x", f->argnames[0]);
  ASSERT_STR("beta", f->argnames[1]);
  ASSERT(37, f->line);
  ASSERT_STR("cimport/good.h", f->header);

  /* d(x*x)/dx stays small: 2*x. */
  f = import_good("square");
  if (f) {
    ASSERT(1, f->dbody[0] == sx_bin(SX_MUL, sx_const(2), sx_arg(0)));
    ASSERT(3, sx_count(f->dbody, 1));
  }

  /* Inlining a helper and writing it out give the same DAG. */
  ScalarFn *a = import_good("mish"), *b = import_good("mish_nested");
  if (a && b) {
    ASSERT(1, a->body == b->body);
    ASSERT(1, a->dbody[0] == b->dbody[0]);
  }

  /* if/else chains become nested selects, not a tangle of conditions. */
  f = import_good("hardish");
  if (f) {
    ASSERT(SX_SELECT, f->body->kind);
    ASSERT(SX_SELECT, f->body->c->kind);
    ASSERT(SX_MUL, f->body->c->c->kind);
  }

  f = import_good("no_args");
  if (f) {
    ASSERT(0, f->nargs);
    ASSERT(1, f->body == sx_const(42));
  }

  /* Paths: relative to base_dir, relative to the cwd, absolute. */
  diag_reset();
  ASSERT(1, cimp_import("cimport/good.h", ".", "silu", use_loc) != NULL);
  ASSERT(1, cimp_import("cimport/good.h", NULL, "silu", use_loc) != NULL);
  char abs[PATH_MAX];
  if (realpath("cimport/good.h", abs))
    ASSERT(1, cimp_import(abs, "/nonexistent", "silu", use_loc) != NULL);
  ASSERT(0, diag_error_count());
}

static void test_samples(void) {
  diag_reset();
  ScalarFn *m = cimp_import("acts.h", "../samples", "mish", use_loc);
  ScalarFn *s = cimp_import("acts.h", "../samples", "swish_beta", use_loc);
  ASSERT(0, diag_error_count());
  if (!m || !s) {
    test_failures++;
    return;
  }
  ASSERT(1, m->nargs == 1 && s->nargs == 2);
  double x = 0.37;
  ASSERT_NEAR(x * tanh(log1p(exp(x))), sx_eval(m->body, &x), 1e-12);

  /* Emission is deterministic and uses float math with temporaries. */
  SExpr *roots[2] = {m->body, m->dbody[0]};
  const char *outs[2] = {"y", "dx"};
  char *text[2];
  for (int i = 0; i < 2; i++) {
    size_t len;
    FILE *f = open_memstream(&text[i], &len);
    sx_emit_c(f, roots, outs, 2, m->argnames, "    ");
    fclose(f);
  }
  ASSERT_STR(text[0], text[1]);
  ASSERT_CONTAINS("    const float t0 = expf(x);\n", text[0]);
  ASSERT_CONTAINS("tanhf(", text[0]);
  ASSERT_CONTAINS("    y = x * t", text[0]);
  ASSERT_CONTAINS("    dx = ", text[0]);
  free(text[0]);
  free(text[1]);
}

/* ---- errors ---- */

typedef struct BadCase {
  const char *name;
  const char *where;   /* "file:line:" prefix of the error */
  const char *what;
} BadCase;

static const BadCase bad_cases[] = {
    {"loop", "bad.h:10:3:", "loop: loops are not supported in imported functions"},
    {"whileloop", "bad.h:15:3:", "loops are not supported in imported functions"},
    {"ptr", "bad.h:19:27:",
     "ptr: pointer parameter 'p' is not supported (parameters must be float)"},
    {"intparam", "bad.h:21:", "parameter 'n' has type 'int' (parameters must be float)"},
    {"intret", "bad.h:23:", "return type must be float"},
    {"readglobal", "bad.h:25:40:", "readglobal: reads global variable 'g'"},
    {"writeglobal", "bad.h:28:", "writes global variable 'g'"},
    {"fact", "bad.h:32:", "fact: recursive call to 'fact'"},
    {"pong", "bad.h:36:", "pong: recursive call to 'pong'"},
    {"prints", "bad.h:39:3:", "prints: unsupported call to 'printf'"},
    {"callsunknown", "bad.h:44:", "unsupported call to 'unknown'"},
    {"noreturn_path", "bad.h:48:1:", "without a 'return'"},
    {"uninit", "bad.h:53:", "'y' may be used uninitialized"},
    {"calls_bad_helper", "bad.h:57:3:", "loops are not supported in imported functions"},
    {"intlocal", "bad.h:63:", "local variable 'n' has type 'int'"},
    {"truncs", "bad.h:67:", "conversion from 'float' to 'int' is not supported"},
    {"switches", "bad.h:70:", "'switch' is not supported"},
    {"array", "bad.h:74:", "array local 'a' is not supported"},
    {"staticlocal", "bad.h:79:", "static local variable 'acc' is not supported"},
    {"comma", "bad.h:84:", "the comma operator is not supported"},
    {"gotos", "bad.h:87:", "'goto' and labels are not supported"},
    {"unknown", "bad.h:43:", "declared without a body"},
    {"g", "bad.h:5:", "g: not a function"},
};

static void expect_failure(const char *header, const char *base, const char *name,
                           const char *where, const char *what) {
  diag_reset();
  cap_begin();
  ScalarFn *f = cimp_import(header, base, name, use_loc);
  const char *err = cap_end();
  ASSERT(1, f == NULL);
  ASSERT(1, diag_error_count() >= 1);
  if (where) ASSERT_CONTAINS(where, err);
  ASSERT_CONTAINS(what, err);
}

static void test_bad(void) {
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const BadCase *b = &bad_cases[i];
    expect_failure("bad.h", "cimport", b->name, b->where, b->what);
    /* Every header error also points back at the `use` in the model. */
    ASSERT_CONTAINS("model.shard:3:1: note: while importing", captured);
  }
  /* An error inside an inlined helper also shows the call. */
  expect_failure("bad.h", "cimport", "calls_bad_helper",
                 "bad.h:60:46: note: 'helper_loops' is inlined here", "");
  expect_failure("bad.h", "cimport", "pong", "bad.h:35:30: note: 'ping' is inlined here", "");

  expect_failure("bad.h", "cimport", "nosuch", "model.shard:3:1: error:",
                 "function 'nosuch' not found in 'bad.h'");
  expect_failure("missing.h", "cimport", "mish", "model.shard:3:1: error:",
                 "cannot open header 'missing.h': No such file or directory");
  expect_failure("cimport", ".", "mish", "model.shard:3:1: error:",
                 "cannot open header 'cimport': Is a directory");
  expect_failure("parse_error.h", "cimport", "broken", "cimport/parse_error.h:3:14: error:",
                 "expected expression");
  ASSERT_CONTAINS("model.shard:3:1: note: while importing 'broken' from 'parse_error.h'",
                  captured);
  diag_reset();
}

int main(void) {
  SrcFile *model = src_from_string("model.shard", "const d = 4\n\nuse mish from \"good.h\"\n");
  use_loc.file = model;
  use_loc.line = 3;
  use_loc.col = 1;
  use_loc.len = 3;
  test_good();
  test_samples();
  test_bad();
  TEST_MAIN_END();
}
