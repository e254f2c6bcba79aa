/* test_sexpr.c — hash-consing, simplification, derivatives (against central
 * finite differences in double), printing and C emission of SExprs. */
#include "sexpr.h"
#include "test.h"

#include <stdint.h>

static SExpr *X, *Y, *Z;
static const char *const names[] = {"x", "y", "z"};

static SExpr *add(SExpr *a, SExpr *b) { return sx_bin(SX_ADD, a, b); }
static SExpr *sub(SExpr *a, SExpr *b) { return sx_bin(SX_SUB, a, b); }
static SExpr *mul(SExpr *a, SExpr *b) { return sx_bin(SX_MUL, a, b); }
static SExpr *dvd(SExpr *a, SExpr *b) { return sx_bin(SX_DIV, a, b); }
static SExpr *num(double v) { return sx_const(v); }

/* sx_print into a static buffer. */
static const char *show(const SExpr *e) {
  static char buf[4096];
  FILE *f = fmemopen(buf, sizeof buf, "w");
  sx_print(f, e, names);
  fclose(f);
  return buf;
}

static char *emit(SExpr **roots, const char *const *outs, int n, const char *const *argn) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  sx_emit_c(f, roots, outs, n, argn, "  ");
  fclose(f);
  return buf;
}

/* Size of e expanded as a tree (shared nodes counted once per use),
 * memoized by id so that exponential trees are measured in linear time. */
enum { MAXID = 1 << 20 };
static double tree_memo[MAXID];
static unsigned char tree_seen[MAXID];
static double tree_size_rec(const SExpr *e) {
  if (!e) return 0;
  if (e->id < MAXID && tree_seen[e->id]) return tree_memo[e->id];
  double n = 1 + tree_size_rec(e->a) + tree_size_rec(e->b) + tree_size_rec(e->c);
  if (e->id < MAXID) {
    tree_seen[e->id] = 1;
    tree_memo[e->id] = n;
  }
  return n;
}
static double tree_size(const SExpr *e) {
  memset(tree_seen, 0, sizeof tree_seen);
  return tree_size_rec(e);
}

/* Checks d e / d arg `var` at `npts` points of [lo, hi] (other arguments
 * fixed at `args`) against central differences.  Points within a step of
 * a kink (one-sided differences disagree) are skipped; returns how many
 * points were compared. */
static int check_diff(SExpr *e, int var, double *args, double lo, double hi, int npts) {
  SExpr *d = sx_diff(e, var);
  int compared = 0;
  for (int i = 0; i < npts; i++) {
    double x = lo + (hi - lo) * (i + 0.5) / npts;
    double h = 1e-5 * (fabs(x) > 1 ? fabs(x) : 1);
    args[var] = x + h;
    double fp = sx_eval(e, args);
    args[var] = x - h;
    double fm = sx_eval(e, args);
    args[var] = x;
    double f0 = sx_eval(e, args);
    double left = (f0 - fm) / h, right = (fp - f0) / h;
    double scale = fabs(left) > 1 ? fabs(left) : 1;
    if (fabs(left - right) > 1e-3 * scale) continue;
    double fd = (fp - fm) / (2 * h);
    double got = sx_eval(d, args);
    scale = fabs(fd) > 1 ? fabs(fd) : 1;
    test_checks++;
    if (!(fabs(got - fd) <= 1e-6 * scale)) {
      fprintf(stderr, "d/d%s of %s at %g: %.12g, finite difference %.12g\n", names[var], show(e),
              x, got, fd);
      test_failures++;
    }
    compared++;
  }
  return compared;
}

static SExpr *mish_expr(SExpr *x) {
  return mul(x, sx_un(SX_TANH, sx_un(SX_LOG, add(num(1), sx_un(SX_EXP, x)))));
}

static void test_hash_consing(void) {
  ASSERT(1, sx_const(2.5) == sx_const(2.5));
  ASSERT(1, sx_const(0.0) == sx_const(-0.0));
  ASSERT(1, sx_arg(1) == Y);
  ASSERT(1, add(X, Y) == add(X, Y));
  ASSERT(0, add(X, Y) == add(Y, X));
  ASSERT(1, mish_expr(X) == mish_expr(X));
  ASSERT(1, sx_un(SX_EXP, X) != sx_un(SX_LOG, X));
  ASSERT(1, add(X, Y)->id != add(Y, X)->id);
}

static void test_simplify(void) {
  SExpr *zero = num(0), *one = num(1);
  ASSERT(1, add(X, zero) == X);
  ASSERT(1, add(zero, X) == X);
  ASSERT(1, sub(X, zero) == X);
  ASSERT(1, sub(zero, X) == sx_un(SX_NEG, X));
  ASSERT(1, mul(X, one) == X);
  ASSERT(1, mul(one, X) == X);
  ASSERT(1, mul(X, zero) == zero);
  ASSERT(1, mul(zero, X) == zero);
  ASSERT(1, dvd(X, one) == X);
  ASSERT(1, dvd(zero, X) == zero);
  ASSERT(1, dvd(X, X) == one);
  ASSERT(1, sx_un(SX_NEG, sx_un(SX_NEG, X)) == X);
  ASSERT(1, sub(X, X) == zero);
  ASSERT(1, sub(mish_expr(X), mish_expr(X)) == zero);
  ASSERT(1, add(X, sx_un(SX_NEG, Y)) == sub(X, Y));
  ASSERT(1, sub(X, sx_un(SX_NEG, Y)) == add(X, Y));
  ASSERT(1, sx_un(SX_NEG, sub(X, Y)) == sub(Y, X));
  ASSERT(1, mul(num(-1), X) == sx_un(SX_NEG, X));
  ASSERT(1, mul(num(2), mul(num(3), X)) == mul(num(6), X));
  ASSERT(1, mul(X, num(2)) == mul(num(2), X));
  ASSERT(1, add(X, X) == mul(num(2), X));
  ASSERT(1, add(sub(add(X, one), one), one) == add(X, one));
  ASSERT(1, sub(add(X, num(2)), num(2)) == X);
  ASSERT(1, sub(sub(X, num(2)), num(3)) == sub(X, num(5)));
  ASSERT(1, sx_bin(SX_POW, X, one) == X);
  ASSERT(1, sx_bin(SX_POW, X, zero) == one);
  ASSERT(1, sx_bin(SX_POW, X, num(2)) == mul(X, X));
  ASSERT(1, sx_bin(SX_MAX, X, X) == X);
  ASSERT(1, sx_bin(SX_LT, X, X) == zero);
  ASSERT(1, sx_bin(SX_LE, X, X) == one);

  /* constant folding */
  ASSERT_NEAR(5.0, add(num(2), num(3))->value, 0);
  ASSERT(SX_CONST, add(num(2), num(3))->kind);
  ASSERT(SX_CONST, sx_un(SX_EXP, zero)->kind);
  ASSERT_NEAR(1.0, sx_un(SX_EXP, zero)->value, 0);
  ASSERT_NEAR(8.0, sx_bin(SX_POW, num(2), num(3))->value, 0);
  ASSERT_NEAR(1.0, sx_bin(SX_LT, num(2), num(3))->value, 0);
  ASSERT_NEAR(0.0, sx_bin(SX_AND, num(2), num(0))->value, 0);

  /* select and truth values */
  SExpr *c = sx_bin(SX_LT, X, Y);
  ASSERT(1, sx_select(one, X, Y) == X);
  ASSERT(1, sx_select(zero, X, Y) == Y);
  ASSERT(1, sx_select(c, X, X) == X);
  ASSERT(1, sx_select(c, one, zero) == c);
  ASSERT(1, sx_select(sx_un(SX_NOT, c), X, Y) == sx_select(c, Y, X));
  ASSERT(1, sx_un(SX_NOT, sx_un(SX_NOT, c)) == c);
  ASSERT(1, sx_bin(SX_AND, one, c) == c);
  ASSERT(1, sx_bin(SX_OR, zero, c) == c);
  ASSERT(1, sx_bin(SX_OR, one, X) == one);
  /* a non-boolean operand of && becomes x != 0 */
  ASSERT(1, sx_bin(SX_AND, one, X) == sx_bin(SX_NE, X, zero));
}

static void test_derivative_shapes(void) {
  /* d(x*x)/dx = 2*x: three nodes. */
  SExpr *d = sx_diff(mul(X, X), 0);
  ASSERT(1, d == mul(num(2), X));
  ASSERT(3, sx_count(&d, 1));
  ASSERT_STR("2.0f * x", show(d));
  /* d(x*y)/dx = y, d(x+y)/dy = 1, d(c)/dx = 0 */
  ASSERT(1, sx_diff(mul(X, Y), 0) == Y);
  ASSERT(1, sx_diff(add(X, Y), 1) == num(1));
  ASSERT(1, sx_diff(num(3), 0) == num(0));
  ASSERT(1, sx_diff(sx_un(SX_EXP, Y), 0) == num(0));
  /* exp reuses itself, tanh reuses itself */
  SExpr *ex = sx_un(SX_EXP, X);
  ASSERT(1, sx_diff(ex, 0) == ex);
  SExpr *th = sx_un(SX_TANH, X);
  ASSERT(1, sx_diff(th, 0) == sub(num(1), mul(th, th)));
  /* x^3 -> 3 x^2 */
  ASSERT_STR("3.0f * (x * x)", show(sx_diff(sx_bin(SX_POW, X, num(3)), 0)));
  /* max/min -> select of a comparison */
  SExpr *dm = sx_diff(sx_bin(SX_MAX, X, Y), 0);
  ASSERT(SX_GE, dm->kind);
  ASSERT_STR("x >= y", show(dm));
  ASSERT_STR("x < 0.0f ? -1.0f : 1.0f", show(sx_diff(sx_un(SX_ABS, X), 0)));
  /* comparisons and logic are flat */
  ASSERT(1, sx_diff(sx_bin(SX_LT, X, Y), 0) == num(0));

  /* Sharing: mish' as a DAG is much smaller than as a tree. */
  SExpr *m = mish_expr(X);
  SExpr *dmish = sx_diff(m, 0);
  int dag = sx_count(&dmish, 1);
  ASSERT(1, dag < tree_size(dmish));
  ASSERT(1, dag <= 16);
  SExpr *both[2] = {m, dmish};
  ASSERT(1, sx_count(both, 2) <= dag + 2);   /* y and y' share almost everything */

  /* The memo keeps derivatives of deep shared DAGs linear: t <- t*t + sin t
   * thirty times is a 2^30-node tree. */
  SExpr *t = X;
  for (int i = 0; i < 30; i++) t = add(mul(t, t), sx_un(SX_SIN, t));
  SExpr *dt = sx_diff(t, 0);
  ASSERT(1, sx_count(&dt, 1) < 400);
  ASSERT(1, tree_size(dt) > 1e9);
}

static void test_derivatives_numeric(void) {
  double a[3] = {0, 0.7, -0.4};
  SExpr *one = num(1);
  /* mish */
  ASSERT(200, check_diff(mish_expr(X), 0, a, -6, 6, 200));
  /* gelu, tanh approximation */
  SExpr *inner = mul(num(0.7978845608028654), add(X, mul(num(0.044715), mul(X, mul(X, X)))));
  SExpr *gelu = mul(mul(num(0.5), X), add(one, sx_un(SX_TANH, inner)));
  ASSERT(200, check_diff(gelu, 0, a, -6, 6, 200));
  /* gelu, erf form */
  SExpr *gelu_erf =
      mul(mul(num(0.5), X), add(one, sx_un(SX_ERF, dvd(X, sx_un(SX_SQRT, num(2))))));
  ASSERT(200, check_diff(gelu_erf, 0, a, -6, 6, 200));
  /* swish / silu, and swish with a slope in both arguments */
  SExpr *silu = dvd(X, add(one, sx_un(SX_EXP, sx_un(SX_NEG, X))));
  ASSERT(200, check_diff(silu, 0, a, -8, 8, 200));
  SExpr *swb = mul(X, dvd(one, add(one, sx_un(SX_EXP, sx_un(SX_NEG, mul(Y, X))))));
  ASSERT(200, check_diff(swb, 0, a, -5, 5, 200));
  ASSERT(200, check_diff(swb, 1, a, -3, 3, 200));
  /* two arguments, quotient, trig, log, sqrt */
  SExpr *f2 = add(mul(X, sx_un(SX_SIN, Y)), dvd(sx_un(SX_COS, X), add(num(2), mul(Y, Y))));
  f2 = add(f2, sx_un(SX_LOG, add(num(1.5), sx_un(SX_SQRT, add(mul(X, X), one)))));
  ASSERT(200, check_diff(f2, 0, a, -4, 4, 200));
  ASSERT(200, check_diff(f2, 1, a, -4, 4, 200));
  /* pow: constant, symbolic-constant and variable exponents */
  double p[3] = {1.3, 0.8, 2.5};
  ASSERT(200, check_diff(sx_bin(SX_POW, X, num(3.5)), 0, p, 0.1, 4, 200));
  ASSERT(200, check_diff(sx_bin(SX_POW, X, Z), 0, p, 0.1, 4, 200));
  ASSERT(200, check_diff(sx_bin(SX_POW, X, Y), 0, p, 0.1, 4, 200));
  ASSERT(200, check_diff(sx_bin(SX_POW, X, Y), 1, p, -2, 2, 200));
  ASSERT(200, check_diff(sx_bin(SX_POW, Y, mul(X, X)), 0, p, -1.5, 1.5, 200));
  /* abs, max, min and select: kinks are skipped, most points remain */
  SExpr *kinky = add(sx_un(SX_ABS, sub(X, num(0.3))),
                     mul(sx_bin(SX_MAX, X, num(1)), sx_bin(SX_MIN, X, Y)));
  kinky = add(kinky, sx_select(sx_bin(SX_GT, X, num(2)), mul(X, X), mul(num(3), X)));
  int n = check_diff(kinky, 0, a, -4, 4, 200);
  ASSERT(1, n >= 190 && n < 200);
  n = check_diff(kinky, 1, a, -4, 4, 200);
  ASSERT(1, n >= 190);
}

static void test_eval(void) {
  double a[3] = {0.5, -2, 3};
  ASSERT_NEAR(0.5 * tanh(log1p(exp(0.5))), sx_eval(mish_expr(X), a), 1e-15);
  ASSERT_NEAR(1.0, sx_eval(sx_bin(SX_LT, Y, X), a), 0);
  ASSERT_NEAR(-2.0, sx_eval(sx_select(sx_bin(SX_GT, Y, X), X, Y), a), 0);
  ASSERT_NEAR(3.0, sx_eval(sx_bin(SX_MAX, Y, Z), a), 0);
  ASSERT_NEAR(erf(0.5), sx_eval(sx_un(SX_ERF, X), a), 1e-15);
  ASSERT_NEAR(pow(3, 0.5), sx_eval(sx_bin(SX_POW, Z, X), a), 1e-15);
  ASSERT_NEAR(0.0, sx_eval(sx_un(SX_NOT, Z), a), 0);
}

static void test_print(void) {
  ASSERT_STR("x + 2.0f * y", show(add(X, mul(Y, num(2)))));
  ASSERT_STR("(x + y) * z", show(mul(add(X, Y), Z)));
  ASSERT_STR("x - y - z", show(sub(sub(X, Y), Z)));
  ASSERT_STR("x - (y - z)", show(sub(X, sub(Y, Z))));
  ASSERT_STR("x + (y + z)", show(add(X, add(Y, Z))));
  ASSERT_STR("x / (y * z)", show(dvd(X, mul(Y, Z))));
  ASSERT_STR("x * y / z", show(dvd(mul(X, Y), Z)));
  ASSERT_STR("-(x * y)", show(sx_un(SX_NEG, mul(X, Y))));
  ASSERT_STR("-x", show(sx_un(SX_NEG, X)));
  ASSERT_STR("expf(-x)", show(sx_un(SX_EXP, sx_un(SX_NEG, X))));
  ASSERT_STR("-2.0f * x", show(mul(num(-2), X)));
  ASSERT_STR("0.5f", show(num(0.5)));
  ASSERT_STR("0.001f", show(num(1e-3)));
  ASSERT_STR("1e-05f", show(num(1e-5)));
  ASSERT_STR("0.7978846f", show(num(0.7978845608028654)));
  ASSERT_STR("100.0f", show(num(100)));
  ASSERT_STR("123456.0f", show(num(123456)));
  ASSERT_STR("1e+10f", show(num(1e10)));
  ASSERT_STR("0.00025f", show(num(2.5e-4)));
  ASSERT_STR("INFINITY", show(num(INFINITY)));
  ASSERT_STR("-INFINITY", show(num(-INFINITY)));
  ASSERT_STR("NAN", show(num(NAN)));
  ASSERT_STR("powf(x, y)", show(sx_bin(SX_POW, X, Y)));
  ASSERT_STR("fmaxf(x, 0.0f)", show(sx_bin(SX_MAX, X, num(0))));
  ASSERT_STR("x < y ? x : y", show(sx_select(sx_bin(SX_LT, X, Y), X, Y)));
  ASSERT_STR("(x < y ? x : y) + 1.0f", show(add(sx_select(sx_bin(SX_LT, X, Y), X, Y), num(1))));
  ASSERT_STR("(x < y) * z", show(mul(sx_bin(SX_LT, X, Y), Z)));
  ASSERT_STR("x < y || (y < z && x != 0.0f)",
             show(sx_bin(SX_OR, sx_bin(SX_LT, X, Y),
                         sx_bin(SX_AND, sx_bin(SX_LT, Y, Z), sx_bin(SX_NE, X, num(0))))));
  ASSERT_STR("!(x < y)", show(sx_un(SX_NOT, sx_bin(SX_LT, X, Y))));
}

static void test_subst(void) {
  SExpr *e = add(mul(X, Y), sx_un(SX_EXP, X));
  ASSERT(1, sx_subst(e, X, Z) == add(mul(Z, Y), sx_un(SX_EXP, Z)));
  ASSERT(1, sx_subst(e, X, num(0)) == num(1));   /* re-simplified: 0*y + exp(0) */
  ASSERT(1, sx_subst(e, Z, X) == e);
}

static void test_emit(void) {
  SExpr *m = mish_expr(X);
  SExpr *roots[2] = {m, sx_diff(m, 0)};
  const char *outs[2] = {"y", "dx"};
  char *a = emit(roots, outs, 2, names);
  ASSERT_STR("  const float t0 = expf(x);\n"
             "  const float t1 = 1.0f + t0;\n"
             "  const float t2 = tanhf(logf(t1));\n"
             "  y = x * t2;\n"
             "  dx = t2 + x * ((1.0f - t2 * t2) * (t0 / t1));\n",
             a);
  /* Deterministic: the same text again, and after building unrelated nodes
   * (ids shift; temporaries are numbered by emission order, not by id). */
  char *b = emit(roots, outs, 2, names);
  ASSERT_STR(a, b);
  for (int i = 0; i < 50; i++) sx_un(SX_SIN, add(Z, num(i)));
  SExpr *m2 = mish_expr(X);
  SExpr *roots2[2] = {m2, sx_diff(m2, 0)};
  char *c = emit(roots2, outs, 2, names);
  ASSERT_STR(a, c);
  free(a);
  free(b);
  free(c);

  /* A root used by another root gets a temporary; leaves never do. */
  SExpr *ex = sx_un(SX_EXP, X);
  SExpr *r2[2] = {ex, sx_diff(ex, 0)};
  char *d = emit(r2, outs, 2, names);
  ASSERT_STR("  const float t0 = expf(x);\n  y = t0;\n  dx = t0;\n", d);
  free(d);
  SExpr *r3[2] = {X, num(1)};
  char *e = emit(r3, outs, 2, names);
  ASSERT_STR("  y = x;\n  dx = 1.0f;\n", e);
  free(e);

  /* Temporaries never shadow a parameter called t0. */
  const char *tnames[] = {"t0", "t1"};
  SExpr *s = sx_un(SX_SIN, add(X, Y));
  SExpr *r4[1] = {mul(s, s)};
  const char *o4[1] = {"out"};
  char *f = emit(r4, o4, 1, tnames);
  ASSERT_STR("  const float t_0 = sinf(t0 + t1);\n  out = t_0 * t_0;\n", f);
  free(f);
}

int main(void) {
  X = sx_arg(0);
  Y = sx_arg(1);
  Z = sx_arg(2);
  test_hash_consing();
  test_simplify();
  test_derivative_shapes();
  test_derivatives_numeric();
  test_eval();
  test_print();
  test_subst();
  test_emit();
  TEST_MAIN_END();
}
