/* test_ewbuiltins.c — the expression parser (sx_parse) and the builtin
 * functions defined by it (ir/ops.def's EW rows): every row parses, and its
 * symbolic derivatives match central finite differences in double over
 * [-8, 8], where a trained model's activations are (the whole-program
 * gradient check sees them near 0 only). */
#include "builtins.h"
#include "test.h"

static const char *const names[] = {"x", "y", "z"};
static char err[256];

static double eval2(const char *text, double x, double y) {
  err[0] = 0;
  SExpr *e = sx_parse(text, names, 2, err, sizeof err);
  if (!e) {
    fprintf(stderr, "%s: %s\n", text, err);
    test_failures++;
    return NAN;
  }
  return sx_eval(e, (double[]){x, y});
}

/* The message sx_parse gives for text (of x alone), "" when it parses. */
static const char *parse_error(const char *text) {
  err[0] = 0;
  return sx_parse(text, names, 1, err, sizeof err) ? "" : err;
}

static void test_parse_values(void) {
  ASSERT_NEAR(7, eval2("1 + 2 * 3", 0, 0), 0);
  ASSERT_NEAR(-6, eval2("-x * y", 2, 3), 0);
  ASSERT_NEAR(2, eval2("(1 + x) / 2", 3, 0), 0);
  ASSERT_NEAR(1, eval2("x - y - 1", 5, 3), 0);           /* left-associative */
  ASSERT_NEAR(2, eval2("x / y / 2", 8, 2), 0);
  ASSERT_NEAR(3, eval2("x < y ? x : y", 3, 4), 0);
  ASSERT_NEAR(2, eval2("x > 0 ? y > 0 ? 1 : 2 : 3", 1, -1), 0);
  ASSERT_NEAR(1, eval2("x >= 0 && y != 0 || x == 7", 7, 0), 0);
  ASSERT_NEAR(0, eval2("!(x > 1)", 2, 0), 0);
  ASSERT_NEAR(1, eval2("x <= y == 1", 1, 1), 0);         /* == binds looser than <= */
  ASSERT_NEAR(10, eval2("pow(x, 2) + fmax(x, y) - fmin(x, y)", 3, 2), 1e-12);
  ASSERT_NEAR(2, eval2("exp(log(x))", 2, 0), 1e-12);
  ASSERT_NEAR(2.5, eval2("sqrt(x) + fabs(-y) + sin(0) + cos(0) - 1", 4, 0.5), 1e-12);
  ASSERT_NEAR(tanh(0.3) + erf(0.3), eval2("tanh(x) + erf(x)", 0.3, 0), 1e-12);
  ASSERT_NEAR(3.5e-3, eval2("2.0f * x + 1e-3 + .5e-3", 1e-3, 0), 1e-15);
  ASSERT_NEAR(-2, eval2("+x - -y", -1, -1), 0);
  /* hash-consed: the same DAG as built by hand */
  SExpr *e = sx_parse("x * (y + 1)", names, 2, err, sizeof err);
  ASSERT(1, e == sx_bin(SX_MUL, sx_arg(0), sx_bin(SX_ADD, sx_arg(1), sx_const(1))));
}

static void test_parse_errors(void) {
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"x +", "column 4: unexpected end"},
      {"foo(x)", "column 1: unknown name 'foo'"},
      {"y", "column 1: unknown name 'y'"},
      {"exp x", "column 5: expected '(' after exp"},
      {"pow(x)", "column 6: expected ',' in the arguments of pow"},
      {"tanh(x, x)", "column 7: expected ')' after the arguments of tanh"},
      {"(x", "column 3: expected ')'"},
      {"x ? 1", "column 6: expected ':' of '?:'"},
      {"x x", "column 3: unexpected 'x'"},
      {"1.5.2", "column 4: malformed number"},
      {"2e", "column 2: malformed number"},
      {"x*)", "column 3: expected a number, an argument or a call"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ASSERT_STR(cases[i].msg, parse_error(cases[i].text));
}

/* d fn / d arg var against central differences at npts points of [lo, hi],
 * the other arguments at 0.7; points next to a kink are skipped. */
static void check_derivative(const ScalarFn *fn, int var, double lo, double hi, int npts) {
  double args[3] = {0.7, 0.7, 0.7};
  for (int i = 0; i < npts; i++) {
    double x = lo + (hi - lo) * (i + 0.5) / npts, h = 1e-6;
    args[var] = x + h;
    double fp = sx_eval(fn->body, args);
    args[var] = x - h;
    double fm = sx_eval(fn->body, args);
    args[var] = x;
    double f0 = sx_eval(fn->body, args), d = sx_eval(fn->dbody[var], args);
    test_checks++;
    if (!isfinite(f0) || !isfinite(d)) {
      fprintf(stderr, "%s at %g: value %g, derivative %g\n", fn->name, x, f0, d);
      test_failures++;
      continue;
    }
    double left = (f0 - fm) / h, right = (fp - f0) / h, fd = (fp - fm) / (2 * h);
    if (fabs(left - right) > 1e-3 * (fabs(left) > 1 ? fabs(left) : 1)) continue;
    if (!(fabs(d - fd) <= 1e-6 * (fabs(fd) > 1 ? fabs(fd) : 1))) {
      fprintf(stderr, "d%s/d%s at %g: %.12g, finite difference %.12g\n", fn->name, names[var], x,
              d, fd);
      test_failures++;
    }
  }
}

static void test_table(void) {
  for (int k = 0; k < EW_COUNT; k++) {
    const EwInfo *b = &ew_builtins[k];
    ScalarFn *fn = ew_builtin_fn(k, err, sizeof err);
    if (!fn) {
      fprintf(stderr, "builtin %s: \"%s\": %s\n", b->name, b->expr, err);
      test_failures++;
      continue;
    }
    ASSERT_STR(b->name, fn->name);
    ASSERT(b->nargs, fn->nargs);
    ASSERT(k, ew_builtin_id(b->name));
    ASSERT(1, builtin_exists(b->name));
    ASSERT(-1, builtin_id(b->name));   /* not also a builtin layer */
    for (int v = 0; v < fn->nargs; v++) check_derivative(fn, v, -8, 8, 101);
  }
  ASSERT(-1, ew_builtin_id("gelu"));
}

/* The two of this issue against libm, far into the tails too: the sigmoid
 * is written so that no branch it takes overflows. */
static void test_sigmoid_tanh(void) {
  ScalarFn *sg = ew_builtin_fn(EW_SIGMOID, err, sizeof err);
  ScalarFn *th = ew_builtin_fn(EW_TANH, err, sizeof err);
  static const double xs[] = {-800, -100, -20, -1, -1e-3, 0, 1e-3, 0.5, 3, 20, 100, 800};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
    double x = xs[i], s = 1 / (1 + exp(-x));
    ASSERT_NEAR(s, sx_eval(sg->body, &x), 1e-15);
    ASSERT_NEAR(s * (1 - s), sx_eval(sg->dbody[0], &x), 1e-15);
    ASSERT_NEAR(tanh(x), sx_eval(th->body, &x), 1e-15);
    ASSERT_NEAR(1 - tanh(x) * tanh(x), sx_eval(th->dbody[0], &x), 1e-15);
  }
}

int main(void) {
  test_parse_values();
  test_parse_errors();
  test_table();
  test_sigmoid_tanh();
  TEST_MAIN_END();
}
