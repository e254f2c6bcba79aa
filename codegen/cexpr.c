/* cexpr.c — scalar expressions as C: the bodies of fused elementwise loops.
 *
 * Expressions are hash-consed DAGs (ir/sexpr.h), so a subexpression shared
 * by a chain of fused ops, or by an imported function and its derivatives,
 * is one node: it is computed once into a `const float tN` temporary and
 * every use reads the temporary (common-subexpression elimination). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"

/* ---- literals ---- */

void cg_literal(char *buf, int cap, double v, int f64) {
  if (isnan(v)) {
    snprintf(buf, cap, "NAN");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, cap, v < 0 ? "-INFINITY" : "INFINITY");
    return;
  }
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, cap, "%.*g", p, v);
    double back = strtod(buf, NULL);
    if (f64 ? back == v : (float)back == (float)v) break;
  }
  if (!strpbrk(buf, ".e")) strncat(buf, ".0", (size_t)cap - strlen(buf) - 1);
  if (!f64) strncat(buf, "f", (size_t)cap - strlen(buf) - 1);
}

/* ---- printing with shared temporaries ---- */

enum { P_COND = 3, P_OR = 4, P_AND = 5, P_LOGIC_OPERAND = 6, P_EQ = 9, P_REL = 10,
       P_ADD = 12, P_MUL = 13, P_UNARY = 14, P_PRIMARY = 16 };

typedef struct Ctx {
  FILE *out;
  int f64, rtmath;
  const char *const *argnames;
  const SExpr **node;   /* distinct nodes, post-order (operands first) */
  int *uses, *temp;     /* per node: references; temporary number or -1 */
  int n, cap;
} Ctx;

static int find(const Ctx *c, const SExpr *e) {
  for (int i = 0; i < c->n; i++)
    if (c->node[i] == e) return i;
  return -1;
}

static void visit(Ctx *c, const SExpr *e) {
  int k = find(c, e);
  if (k >= 0) {
    c->uses[k]++;
    return;
  }
  if (e->a) visit(c, e->a);
  if (e->b) visit(c, e->b);
  if (e->c) visit(c, e->c);
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 64;
    c->node = realloc(c->node, sizeof *c->node * (size_t)c->cap);
    c->uses = realloc(c->uses, sizeof *c->uses * (size_t)c->cap);
    c->temp = realloc(c->temp, sizeof *c->temp * (size_t)c->cap);
    if (!c->node || !c->uses || !c->temp) abort();
  }
  c->node[c->n] = e;
  c->uses[c->n] = 1;
  c->temp[c->n] = -1;
  c->n++;
}

static int prec(const SExpr *e) {
  switch (e->kind) {
  case SX_CONST: return e->value < 0 || (e->value == 0 && signbit(e->value)) ? P_UNARY : P_PRIMARY;
  case SX_NEG: case SX_NOT: return P_UNARY;
  case SX_MUL: case SX_DIV: return P_MUL;
  case SX_ADD: case SX_SUB: return P_ADD;
  case SX_LT: case SX_LE: case SX_GT: case SX_GE: return P_REL;
  case SX_EQ: case SX_NE: return P_EQ;
  case SX_AND: return P_AND;
  case SX_OR: return P_OR;
  case SX_SELECT: return P_COND;
  default: return P_PRIMARY;
  }
}

static const char *fn_name(SxKind k, int f64, int rtmath) {
  /* rt_math.h's branch-free exp and tanh vectorize; libm's are scalar calls */
  if (rtmath && !f64 && k == SX_EXP) return "rt_expf";
  if (rtmath && !f64 && k == SX_TANH) return "rt_tanhf";
  static const struct { SxKind k; const char *f; } fns[] = {
      {SX_EXP, "exp"},   {SX_LOG, "log"}, {SX_TANH, "tanh"}, {SX_SQRT, "sqrt"},
      {SX_SIN, "sin"},   {SX_COS, "cos"}, {SX_ABS, "fabs"},  {SX_POW, "pow"},
      {SX_MAX, "fmax"},  {SX_MIN, "fmin"}, {SX_ERF, "erf"},
  };
  static char buf[16];
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
    if (fns[i].k == k) {
      snprintf(buf, sizeof buf, "%s%s", fns[i].f, f64 ? "" : "f");
      return buf;
    }
  return NULL;
}

static void print(Ctx *c, const SExpr *e, int minprec, int top) {
  FILE *o = c->out;
  int k = find(c, e);
  if (!top && k >= 0 && c->temp[k] >= 0) {
    fprintf(o, "t%d", c->temp[k]);
    return;
  }
  int p = prec(e), paren = p < minprec;
  if (paren) fputc('(', o);
  switch (e->kind) {
  case SX_CONST: {
    char buf[64];
    cg_literal(buf, sizeof buf, e->value, c->f64);
    fputs(buf, o);
    break;
  }
  case SX_ARG:
    fputs(c->argnames[e->arg], o);
    break;
  case SX_NEG:
  case SX_NOT: {
    fputc(e->kind == SX_NEG ? '-' : '!', o);
    int kk = find(c, e->a);
    bool tmp = kk >= 0 && c->temp[kk] >= 0;
    /* "- -x" must not become "--x". */
    print(c, e->a, !tmp && prec(e->a) == P_UNARY ? P_PRIMARY : P_UNARY, 0);
    break;
  }
  case SX_ADD: case SX_SUB: case SX_MUL: case SX_DIV:
    /* Floating point is not associative: a right operand of the same
     * precedence keeps its parentheses. */
    print(c, e->a, p, 0);
    fprintf(o, " %s ", sx_op_str(e->kind));
    print(c, e->b, p + 1, 0);
    break;
  case SX_LT: case SX_LE: case SX_GT: case SX_GE: case SX_EQ: case SX_NE:
    print(c, e->a, p + 1, 0);
    fprintf(o, " %s ", sx_op_str(e->kind));
    print(c, e->b, p + 1, 0);
    break;
  case SX_AND: case SX_OR:
    print(c, e->a, P_LOGIC_OPERAND, 0);
    fprintf(o, " %s ", sx_op_str(e->kind));
    print(c, e->b, P_LOGIC_OPERAND, 0);
    break;
  case SX_SELECT:
    print(c, e->a, P_LOGIC_OPERAND, 0);
    fputs(" ? ", o);
    print(c, e->b, P_OR, 0);
    fputs(" : ", o);
    print(c, e->c, P_COND, 0);
    break;
  default: {
    const char *fn = fn_name(e->kind, c->f64, c->rtmath);
    fprintf(o, "%s(", fn ? fn : "unsupported_op");
    print(c, e->a, 0, 0);
    if (e->b) {
      fputs(", ", o);
      print(c, e->b, 0, 0);
    }
    fputc(')', o);
  }
  }
  if (paren) fputc(')', o);
}

void cg_emit_exprs(FILE *out, SExpr *const *roots, const char *const *lhs,
                   const char *const *ops, int n, const char *const *argnames,
                   const char *indent, int flags) {
  const int f64 = !!(flags & CG_F64);
  Ctx c = {out, f64, !!(flags & CG_RTMATH), argnames, NULL, NULL, NULL, 0, 0};
  for (int i = 0; i < n; i++) visit(&c, roots[i]);
  int ntemp = 0;
  for (int i = 0; i < c.n; i++) {
    const SExpr *e = c.node[i];
    if (e->kind == SX_CONST || e->kind == SX_ARG || c.uses[i] < 2) continue;
    fprintf(out, "%sconst %s t%d = ", indent, f64 ? "double" : "float", ntemp);
    print(&c, e, 0, 1);
    fputs(";\n", out);
    c.temp[i] = ntemp++;
  }
  for (int i = 0; i < n; i++) {
    fprintf(out, "%s%s %s ", indent, lhs[i], ops[i]);
    print(&c, roots[i], 0, 0);
    fputs(";\n", out);
  }
  free(c.node);
  free(c.uses);
  free(c.temp);
}
