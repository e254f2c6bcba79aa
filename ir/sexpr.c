/* sexpr.c — hash-consed scalar expression DAGs, their simplification,
 * symbolic differentiation, evaluation and C emission.
 *
 * Every constructor returns the unique node for its (kind, operands) after
 * local simplification, so structural equality is pointer equality: `a == b`
 * is how rules like x-x -> 0 and select(c, a, a) -> a are written.
 *
 * Memory: nodes and the intern table come from malloc, not from the arena,
 * because the table must outlive any single compilation: a driver or test
 * that calls arena_free_all() and compiles again would otherwise find the
 * table full of dangling nodes.  The pool only grows with the number of
 * distinct expressions ever built (a few hundred per imported function);
 * sx_reset() releases it.
 */
#include "sexpr.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- node pool and intern table ---- */

enum { SX_SLAB = 1024 };

typedef struct SxSlab {
  struct SxSlab *next;
  int used;
  SExpr nodes[SX_SLAB];
} SxSlab;

static SxSlab *sx_slabs;
static SExpr **sx_table;     /* open addressing, linear probing */
static size_t sx_table_cap;  /* power of two */
static unsigned sx_next_id;  /* == number of live nodes */

static void *sx_xmalloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p) {
    fprintf(stderr, "shardc: fatal: out of memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}

void sx_reset(void) {
  while (sx_slabs) {
    SxSlab *n = sx_slabs->next;
    free(sx_slabs);
    sx_slabs = n;
  }
  free(sx_table);
  sx_table = NULL;
  sx_table_cap = 0;
  sx_next_id = 0;
}

static uint64_t sx_dbits(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

static uint64_t sx_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t sx_hash(SxKind k, int arg, double value, const SExpr *a, const SExpr *b,
                        const SExpr *c) {
  uint64_t h = sx_mix((uint64_t)k, (uint64_t)(unsigned)arg);
  h = sx_mix(h, sx_dbits(value));
  h = sx_mix(h, a ? a->id + 1u : 0);
  h = sx_mix(h, b ? b->id + 1u : 0);
  h = sx_mix(h, c ? c->id + 1u : 0);
  return h ^ (h >> 29);
}

static int sx_same(const SExpr *e, SxKind k, int arg, double value, const SExpr *a,
                   const SExpr *b, const SExpr *c) {
  return e->kind == k && e->arg == arg && sx_dbits(e->value) == sx_dbits(value) &&
         e->a == a && e->b == b && e->c == c;
}

static void sx_table_grow(void) {
  size_t ncap = sx_table_cap ? sx_table_cap * 2 : 1024;
  SExpr **nt = sx_xmalloc(ncap * sizeof *nt);
  for (size_t i = 0; i < sx_table_cap; i++) {
    SExpr *e = sx_table[i];
    if (!e) continue;
    size_t j = sx_hash(e->kind, e->arg, e->value, e->a, e->b, e->c) & (ncap - 1);
    while (nt[j]) j = (j + 1) & (ncap - 1);
    nt[j] = e;
  }
  free(sx_table);
  sx_table = nt;
  sx_table_cap = ncap;
}

/* The unique node with these fields; no simplification here. */
static SExpr *sx_intern(SxKind k, int arg, double value, SExpr *a, SExpr *b, SExpr *c) {
  if ((size_t)sx_next_id * 2 >= sx_table_cap) sx_table_grow();
  size_t j = sx_hash(k, arg, value, a, b, c) & (sx_table_cap - 1);
  for (; sx_table[j]; j = (j + 1) & (sx_table_cap - 1))
    if (sx_same(sx_table[j], k, arg, value, a, b, c)) return sx_table[j];
  if (!sx_slabs || sx_slabs->used == SX_SLAB) {
    SxSlab *s = sx_xmalloc(sizeof *s);
    s->next = sx_slabs;
    sx_slabs = s;
  }
  SExpr *e = &sx_slabs->nodes[sx_slabs->used++];
  e->kind = k;
  e->arg = arg;
  e->value = value;
  e->a = a;
  e->b = b;
  e->c = c;
  e->id = sx_next_id++;
  unsigned d = a ? a->depth : 0;
  if (b && b->depth > d) d = b->depth;
  if (c && c->depth > d) d = c->depth;
  e->depth = a ? d + 1 : 0;
  sx_table[j] = e;
  return e;
}

/* ---- per-node scratch (memo tables indexed by dense id) ---- */

/* A generation-stamped array: entries whose stamp differs from the current
 * generation are empty, so starting a new walk costs nothing. */
typedef struct SxScratch {
  unsigned *stamp;
  double *val;
  int *num;
  SExpr **ptr;
  size_t cap;
  unsigned gen;
} SxScratch;

static void sx_scratch_begin(SxScratch *s) {
  if (s->cap < sx_next_id) {
    size_t ncap = sx_next_id + sx_next_id / 2 + 64;
    free(s->stamp);
    free(s->val);
    free(s->num);
    free(s->ptr);
    s->stamp = sx_xmalloc(ncap * sizeof *s->stamp);
    s->val = sx_xmalloc(ncap * sizeof *s->val);
    s->num = sx_xmalloc(ncap * sizeof *s->num);
    s->ptr = sx_xmalloc(ncap * sizeof *s->ptr);
    s->cap = ncap;
    s->gen = 0;
  }
  if (++s->gen == 0) { /* wrapped: clear so stale stamps cannot match */
    memset(s->stamp, 0, s->cap * sizeof *s->stamp);
    s->gen = 1;
  }
}

static int sx_scratch_seen(SxScratch *s, const SExpr *e) { return s->stamp[e->id] == s->gen; }
static void sx_scratch_mark(SxScratch *s, const SExpr *e) { s->stamp[e->id] = s->gen; }

/* ---- evaluation of one operator (shared by folding and sx_eval) ---- */

static double sx_apply(SxKind k, double a, double b, double c) {
  switch (k) {
  case SX_ADD: return a + b;
  case SX_SUB: return a - b;
  case SX_MUL: return a * b;
  case SX_DIV: return a / b;
  case SX_NEG: return -a;
  case SX_POW: return pow(a, b);
  case SX_MAX: return fmax(a, b);
  case SX_MIN: return fmin(a, b);
  case SX_EXP: return exp(a);
  case SX_LOG: return log(a);
  case SX_TANH: return tanh(a);
  case SX_SQRT: return sqrt(a);
  case SX_SIN: return sin(a);
  case SX_COS: return cos(a);
  case SX_ABS: return fabs(a);
  case SX_ERF: return erf(a);
  case SX_LT: return a < b;
  case SX_LE: return a <= b;
  case SX_GT: return a > b;
  case SX_GE: return a >= b;
  case SX_EQ: return a == b;
  case SX_NE: return a != b;
  case SX_AND: return a != 0 && b != 0;
  case SX_OR: return a != 0 || b != 0;
  case SX_NOT: return a == 0;
  case SX_SELECT: return a != 0 ? b : c;
  default: return NAN;
  }
}

/* ---- constructors with local simplification ---- */

SExpr *sx_const(double v) {
  if (v == 0) v = 0.0;     /* -0 and +0 are one constant */
  if (isnan(v)) v = NAN;   /* and so are all NaNs */
  return sx_intern(SX_CONST, 0, v, NULL, NULL, NULL);
}

SExpr *sx_arg(int i) { return sx_intern(SX_ARG, i, 0.0, NULL, NULL, NULL); }

static int sx_isconst(const SExpr *e, double v) { return e->kind == SX_CONST && e->value == v; }
static int sx_iscmp(SxKind k) { return k >= SX_LT && k <= SX_NE; }

/* True when e is always exactly 0.0 or 1.0, so `e != 0` can be e itself. */
static int sx_isbool(const SExpr *e) {
  if (e->kind == SX_CONST) return e->value == 0 || e->value == 1;
  if (sx_iscmp(e->kind) || e->kind == SX_AND || e->kind == SX_OR || e->kind == SX_NOT)
    return 1;
  if (e->kind == SX_SELECT) return sx_isbool(e->b) && sx_isbool(e->c);
  return 0;
}

/* e as a 0/1 truth value. */
static SExpr *sx_truth(SExpr *e) { return sx_isbool(e) ? e : sx_bin(SX_NE, e, sx_const(0)); }

SExpr *sx_un(SxKind k, SExpr *a) {
  if (a->kind == SX_CONST) return sx_const(sx_apply(k, a->value, 0, 0));
  switch (k) {
  case SX_NEG:
    if (a->kind == SX_NEG) return a->a;                                    /* -(-x) */
    if (a->kind == SX_SUB) return sx_bin(SX_SUB, a->b, a->a);              /* -(x-y) */
    if (a->kind == SX_MUL && a->a->kind == SX_CONST)                        /* -(c*x) */
      return sx_bin(SX_MUL, sx_const(-a->a->value), a->b);
    break;
  case SX_ABS:
    if (a->kind == SX_ABS) return a;
    if (a->kind == SX_NEG) return sx_un(SX_ABS, a->a);
    break;
  case SX_NOT:
    if (a->kind == SX_NOT && sx_isbool(a->a)) return a->a;
    break;
  default:
    break;
  }
  return sx_intern(k, 0, 0.0, a, NULL, NULL);
}

SExpr *sx_bin(SxKind k, SExpr *a, SExpr *b) {
  if (a->kind == SX_CONST && b->kind == SX_CONST)
    return sx_const(sx_apply(k, a->value, b->value, 0));
  switch (k) {
  case SX_ADD:
  case SX_SUB:
    /* (x + c1) +- c2 -> x + (c1 +- c2): runs of x++ / x -= 1 collapse. */
    if (b->kind == SX_CONST && (a->kind == SX_ADD || a->kind == SX_SUB) &&
        a->b->kind == SX_CONST) {
      double c = (a->kind == SX_ADD ? a->b->value : -a->b->value) +
                 (k == SX_ADD ? b->value : -b->value);
      return sx_bin(c < 0 ? SX_SUB : SX_ADD, a->a, sx_const(fabs(c)));
    }
    break;
  default:
    break;
  }
  switch (k) {
  case SX_ADD:
    if (sx_isconst(a, 0)) return b;
    if (sx_isconst(b, 0)) return a;
    if (b->kind == SX_NEG) return sx_bin(SX_SUB, a, b->a);                 /* x + -y */
    if (a->kind == SX_NEG) return sx_bin(SX_SUB, b, a->a);                 /* -x + y */
    if (b->kind == SX_CONST && b->value < 0)                                /* x + -c */
      return sx_bin(SX_SUB, a, sx_const(-b->value));
    if (a == b) return sx_bin(SX_MUL, sx_const(2), a);
    break;
  case SX_SUB:
    if (sx_isconst(b, 0)) return a;
    if (sx_isconst(a, 0)) return sx_un(SX_NEG, b);
    if (a == b) return sx_const(0);
    if (b->kind == SX_NEG) return sx_bin(SX_ADD, a, b->a);                 /* x - -y */
    if (b->kind == SX_CONST && b->value < 0)                                /* x - -c */
      return sx_bin(SX_ADD, a, sx_const(-b->value));
    break;
  case SX_MUL:
    /* Constants go left, so c1*(c2*x) folds and prints as "2.0f * x". */
    if (b->kind == SX_CONST) {
      SExpr *t = a;
      a = b;
      b = t;
    }
    if (a->kind == SX_CONST) {
      if (a->value == 0) return a;
      if (a->value == 1) return b;
      if (a->value == -1) return sx_un(SX_NEG, b);
      if (b->kind == SX_MUL && b->a->kind == SX_CONST)
        return sx_bin(SX_MUL, sx_const(a->value * b->a->value), b->b);
      if (b->kind == SX_NEG) return sx_bin(SX_MUL, sx_const(-a->value), b->a);
      break;
    }
    /* Pull negations out so they meet the +/- rules above. */
    if (a->kind == SX_NEG && b->kind == SX_NEG) return sx_bin(SX_MUL, a->a, b->a);
    if (a->kind == SX_NEG) return sx_un(SX_NEG, sx_bin(SX_MUL, a->a, b));
    if (b->kind == SX_NEG) return sx_un(SX_NEG, sx_bin(SX_MUL, a, b->a));
    break;
  case SX_DIV:
    if (sx_isconst(b, 1)) return a;
    if (sx_isconst(b, -1)) return sx_un(SX_NEG, a);
    if (sx_isconst(a, 0)) return a;
    if (a == b) return sx_const(1);
    if (a->kind == SX_NEG) return sx_un(SX_NEG, sx_bin(SX_DIV, a->a, b));
    if (b->kind == SX_NEG) return sx_un(SX_NEG, sx_bin(SX_DIV, a, b->a));
    break;
  case SX_POW:
    if (sx_isconst(b, 0) || sx_isconst(a, 1)) return sx_const(1);
    if (sx_isconst(b, 1)) return a;
    if (sx_isconst(b, 2)) return sx_bin(SX_MUL, a, a);
    if (sx_isconst(b, -1)) return sx_bin(SX_DIV, sx_const(1), a);
    if (sx_isconst(b, 0.5)) return sx_un(SX_SQRT, a);
    break;
  case SX_MAX:
  case SX_MIN:
    if (a == b) return a;
    break;
  case SX_LT: case SX_GT: case SX_NE:
    if (a == b) return sx_const(0);
    break;
  case SX_LE: case SX_GE: case SX_EQ:
    if (a == b) return sx_const(1);
    break;
  case SX_AND:
    if (a->kind == SX_CONST) return a->value == 0 ? sx_const(0) : sx_truth(b);
    if (b->kind == SX_CONST) return b->value == 0 ? sx_const(0) : sx_truth(a);
    if (a == b) return sx_truth(a);
    break;
  case SX_OR:
    if (a->kind == SX_CONST) return a->value != 0 ? sx_const(1) : sx_truth(b);
    if (b->kind == SX_CONST) return b->value != 0 ? sx_const(1) : sx_truth(a);
    if (a == b) return sx_truth(a);
    break;
  default:
    break;
  }
  return sx_intern(k, 0, 0.0, a, b, NULL);
}

SExpr *sx_select(SExpr *cond, SExpr *a, SExpr *b) {
  if (cond->kind == SX_CONST) return cond->value != 0 ? a : b;
  if (a == b) return a;
  if (cond->kind == SX_NOT) return sx_select(cond->a, b, a);
  /* `x != 0 ? a : b` tests the same thing as `x ? a : b`. */
  if (cond->kind == SX_NE && sx_isconst(cond->b, 0)) return sx_select(cond->a, a, b);
  if (sx_isbool(cond)) {
    if (sx_isconst(a, 1) && sx_isconst(b, 0)) return cond;
    if (sx_isconst(a, 0) && sx_isconst(b, 1)) return sx_un(SX_NOT, cond);
    /* Truth values: c ? 1 : b is c || b, and c ? a : 0 is c && a. */
    if (sx_isconst(a, 1) && sx_isbool(b)) return sx_bin(SX_OR, cond, b);
    if (sx_isconst(b, 0) && sx_isbool(a)) return sx_bin(SX_AND, cond, a);
  }
  return sx_intern(SX_SELECT, 0, 0.0, cond, a, b);
}

/* ---- substitution ---- */

/* The memo is a generation-stamped scratch, not a fresh table: cimport.c
 * substitutes once per `if` and `return`, each into a small expression,
 * while the pool may hold millions of nodes. */
static SxScratch sx_subst_scratch;

static SExpr *sx_subst_rec(SExpr *e, SExpr *from, SExpr *to, unsigned n) {
  SxScratch *s = &sx_subst_scratch;
  if (e == from) return to;
  if (e->id >= n || !e->a) return e;   /* leaves and nodes newer than the walk */
  if (sx_scratch_seen(s, e)) return s->ptr[e->id];
  SExpr *a = sx_subst_rec(e->a, from, to, n);
  SExpr *b = e->b ? sx_subst_rec(e->b, from, to, n) : NULL;
  SExpr *c = e->c ? sx_subst_rec(e->c, from, to, n) : NULL;
  SExpr *r;
  if (a == e->a && b == e->b && c == e->c) r = e;
  else if (e->kind == SX_SELECT) r = sx_select(a, b, c);
  else if (b) r = sx_bin(e->kind, a, b);
  else r = sx_un(e->kind, a);
  sx_scratch_mark(s, e);
  return s->ptr[e->id] = r;
}

SExpr *sx_subst(SExpr *e, SExpr *from, SExpr *to) {
  sx_scratch_begin(&sx_subst_scratch);
  return sx_subst_rec(e, from, to, sx_next_id);
}

/* ---- differentiation ---- */

typedef struct SxDiff {
  int var;
  SExpr **memo;   /* by id of nodes of the original expression */
} SxDiff;

static SExpr *sx_d(SxDiff *D, SExpr *e);

/* f'(a) * da, the chain rule for unary f. */
static SExpr *sx_chain(SExpr *fprime, SExpr *da) { return sx_bin(SX_MUL, fprime, da); }

static SExpr *sx_d_uncached(SxDiff *D, SExpr *e) {
  SExpr *zero = sx_const(0), *one = sx_const(1);
  switch (e->kind) {
  case SX_CONST: return zero;
  case SX_ARG: return e->arg == D->var ? one : zero;
  case SX_LT: case SX_LE: case SX_GT: case SX_GE: case SX_EQ: case SX_NE:
  case SX_AND: case SX_OR: case SX_NOT:
    return zero;   /* piecewise constant: zero almost everywhere */
  default:
    break;
  }
  SExpr *a = e->a, *b = e->b;
  SExpr *da = sx_d(D, a);
  SExpr *db = b && e->kind != SX_SELECT ? sx_d(D, b) : NULL;
  switch (e->kind) {
  case SX_ADD: return sx_bin(SX_ADD, da, db);
  case SX_SUB: return sx_bin(SX_SUB, da, db);
  case SX_NEG: return sx_un(SX_NEG, da);
  case SX_MUL: return sx_bin(SX_ADD, sx_bin(SX_MUL, da, b), sx_bin(SX_MUL, a, db));
  case SX_DIV:
    /* d(a/b) = (da - (a/b) db) / b reuses the quotient node itself. */
    return sx_bin(SX_DIV, sx_bin(SX_SUB, da, sx_bin(SX_MUL, e, db)), b);
  case SX_POW:
    if (sx_isconst(db, 0)) {
      /* b does not depend on the variable: b a^(b-1) da. */
      SExpr *bm1 = sx_bin(SX_SUB, b, one);
      return sx_chain(sx_bin(SX_MUL, b, sx_bin(SX_POW, a, bm1)), da);
    }
    if (sx_isconst(da, 0)) /* a^b log(a) db */
      return sx_chain(sx_bin(SX_MUL, e, sx_un(SX_LOG, a)), db);
    return sx_bin(SX_MUL, e,
                  sx_bin(SX_ADD, sx_bin(SX_MUL, db, sx_un(SX_LOG, a)),
                         sx_bin(SX_DIV, sx_bin(SX_MUL, b, da), a)));
  case SX_MAX: return sx_select(sx_bin(SX_GE, a, b), da, db);
  case SX_MIN: return sx_select(sx_bin(SX_LE, a, b), da, db);
  case SX_EXP: return sx_chain(e, da);
  case SX_LOG: return sx_bin(SX_DIV, da, a);
  case SX_TANH: return sx_chain(sx_bin(SX_SUB, one, sx_bin(SX_MUL, e, e)), da);
  case SX_SQRT: return sx_chain(sx_bin(SX_DIV, sx_const(0.5), e), da);
  case SX_SIN: return sx_chain(sx_un(SX_COS, a), da);
  case SX_COS: return sx_chain(sx_un(SX_NEG, sx_un(SX_SIN, a)), da);
  case SX_ABS: return sx_select(sx_bin(SX_LT, a, zero), sx_un(SX_NEG, da), da);
  case SX_ERF: {
    /* erf'(x) = 2/sqrt(pi) exp(-x^2) */
    SExpr *g = sx_un(SX_EXP, sx_un(SX_NEG, sx_bin(SX_MUL, a, a)));
    return sx_chain(sx_bin(SX_MUL, sx_const(1.1283791670955126), g), da);
  }
  case SX_SELECT:
    /* The condition is piecewise constant; differentiate the branches. */
    return sx_select(a, sx_d(D, e->b), sx_d(D, e->c));
  default:
    return sx_const(NAN);
  }
}

static SExpr *sx_d(SxDiff *D, SExpr *e) {
  if (!D->memo[e->id]) D->memo[e->id] = sx_d_uncached(D, e);
  return D->memo[e->id];
}

SExpr *sx_diff(SExpr *e, int i) {
  SxDiff D = {i, sx_xmalloc(sx_next_id * sizeof(SExpr *))};
  SExpr *r = sx_d(&D, e);
  free(D.memo);
  return r;
}

/* ---- evaluation and counting ---- */

static SxScratch sx_eval_scratch;

static double sx_eval_rec(const SExpr *e, const double *args) {
  SxScratch *s = &sx_eval_scratch;
  if (sx_scratch_seen(s, e)) return s->val[e->id];
  double v;
  switch (e->kind) {
  case SX_CONST: v = e->value; break;
  case SX_ARG: v = args[e->arg]; break;
  default: {
    double a = sx_eval_rec(e->a, args);
    double b = e->b ? sx_eval_rec(e->b, args) : 0;
    double c = e->c ? sx_eval_rec(e->c, args) : 0;
    v = sx_apply(e->kind, a, b, c);
  }
  }
  sx_scratch_mark(s, e);
  s->val[e->id] = v;
  return v;
}

double sx_eval(const SExpr *e, const double *args) {
  sx_scratch_begin(&sx_eval_scratch);
  return sx_eval_rec(e, args);
}

static SxScratch sx_walk_scratch;

static int sx_count_rec(const SExpr *e) {
  if (!e || sx_scratch_seen(&sx_walk_scratch, e)) return 0;
  sx_scratch_mark(&sx_walk_scratch, e);
  return 1 + sx_count_rec(e->a) + sx_count_rec(e->b) + sx_count_rec(e->c);
}

int sx_count(SExpr **roots, int n) {
  sx_scratch_begin(&sx_walk_scratch);
  int total = 0;
  for (int i = 0; i < n; i++) total += sx_count_rec(roots[i]);
  return total;
}

/* ---- printing ---- */

/* C precedence levels, higher binds tighter. */
enum {
  SX_P_COND = 3, SX_P_OR = 4, SX_P_AND = 5, SX_P_EQ = 9, SX_P_REL = 10,
  SX_P_ADD = 12, SX_P_MUL = 13, SX_P_UNARY = 15, SX_P_PRIMARY = 16
};

static const char *sx_fn_name(SxKind k) {
  switch (k) {
  case SX_POW: return "powf";
  case SX_MAX: return "fmaxf";
  case SX_MIN: return "fminf";
  case SX_EXP: return "expf";
  case SX_LOG: return "logf";
  case SX_TANH: return "tanhf";
  case SX_SQRT: return "sqrtf";
  case SX_SIN: return "sinf";
  case SX_COS: return "cosf";
  case SX_ABS: return "fabsf";
  case SX_ERF: return "erff";
  default: return NULL;
  }
}

const char *sx_op_str(SxKind k) {
  switch (k) {
  case SX_ADD: return "+";
  case SX_SUB: return "-";
  case SX_MUL: return "*";
  case SX_DIV: return "/";
  case SX_LT: return "<";
  case SX_LE: return "<=";
  case SX_GT: return ">";
  case SX_GE: return ">=";
  case SX_EQ: return "==";
  case SX_NE: return "!=";
  case SX_AND: return "&&";
  case SX_OR: return "||";
  default: return "?";
  }
}

static int sx_prec(const SExpr *e) {
  switch (e->kind) {
  case SX_CONST:
    return e->value < 0 ? SX_P_UNARY : SX_P_PRIMARY;   /* "-2.0f" is a unary minus */
  case SX_NEG: case SX_NOT: return SX_P_UNARY;
  case SX_MUL: case SX_DIV: return SX_P_MUL;
  case SX_ADD: case SX_SUB: return SX_P_ADD;
  case SX_LT: case SX_LE: case SX_GT: case SX_GE: return SX_P_REL;
  case SX_EQ: case SX_NE: return SX_P_EQ;
  case SX_AND: return SX_P_AND;
  case SX_OR: return SX_P_OR;
  case SX_SELECT: return SX_P_COND;
  default: return SX_P_PRIMARY;   /* arguments and calls */
  }
}

/* The shortest decimal that reads back as the same float, as a C float
 * literal: 0.5 -> "0.5f", 2 -> "2.0f", 1e-05 -> "1e-05f". */
static void sx_float_lit(char *buf, size_t n, double v) {
  float f = (float)v;
  if (isnan(f)) {
    snprintf(buf, n, "NAN");
    return;
  }
  if (isinf(f)) {
    snprintf(buf, n, f < 0 ? "-INFINITY" : "INFINITY");
    return;
  }
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, n, "%.*g", p, (double)f);
    if ((float)strtod(buf, NULL) == f) break;
  }
  /* %g writes 100 as "1e+02"; plain notation reads better in that range. */
  if (strchr(buf, 'e') && fabsf(f) >= 1e-4f && fabsf(f) < 1e7f) {
    for (int p = 0; p <= 12; p++) {
      snprintf(buf, n, "%.*f", p, (double)f);
      if ((float)strtod(buf, NULL) == f) break;
    }
  }
  if (!strpbrk(buf, ".e")) strncat(buf, ".0", n - strlen(buf) - 1);
  strncat(buf, "f", n - strlen(buf) - 1);
}

/* How a node is referred to while printing: temporaries (emit) by name. */
typedef struct SxPrinter {
  FILE *out;
  const char *const *argnames;
  const int *tempnum;   /* by id; -1 = inline.  NULL: no temporaries */
  const char *tprefix;
} SxPrinter;

static void sx_print_rec(SxPrinter *P, const SExpr *e, int minprec, int is_root);

static void sx_print_child(SxPrinter *P, const SExpr *e, int minprec) {
  sx_print_rec(P, e, minprec, 0);
}

static void sx_print_rec(SxPrinter *P, const SExpr *e, int minprec, int is_root) {
  FILE *out = P->out;
  if (!is_root && P->tempnum && P->tempnum[e->id] >= 0) {
    fprintf(out, "%s%d", P->tprefix, P->tempnum[e->id]);
    return;
  }
  int prec = sx_prec(e);
  int paren = prec < minprec;
  if (paren) fputc('(', out);
  switch (e->kind) {
  case SX_CONST: {
    char buf[64];
    sx_float_lit(buf, sizeof buf, e->value);
    fputs(buf, out);
    break;
  }
  case SX_ARG:
    if (P->argnames) fputs(P->argnames[e->arg], out);
    else fprintf(out, "arg%d", e->arg);
    break;
  case SX_NEG:
  case SX_NOT: {
    fputc(e->kind == SX_NEG ? '-' : '!', out);
    /* Operands that start with '-' get parentheses so "- -x" never
     * becomes the decrement operator. */
    const SExpr *a = e->a;
    int inner_paren = e->kind == SX_NEG && !(P->tempnum && P->tempnum[a->id] >= 0) &&
                      (a->kind == SX_NEG || (a->kind == SX_CONST && a->value < 0));
    sx_print_child(P, a, inner_paren ? SX_P_PRIMARY + 1 : SX_P_UNARY);
    break;
  }
  case SX_ADD: case SX_SUB: case SX_MUL: case SX_DIV:
    /* Left-associative: a right operand of equal precedence keeps its
     * parentheses because float arithmetic is not associative. */
    sx_print_child(P, e->a, prec);
    fprintf(out, " %s ", sx_op_str(e->kind));
    sx_print_child(P, e->b, prec + 1);
    break;
  case SX_LT: case SX_LE: case SX_GT: case SX_GE: case SX_EQ: case SX_NE:
  case SX_AND: case SX_OR:
    /* Chained comparisons and && inside || are parenthesized, as gcc's
     * -Wparentheses would ask. */
    sx_print_child(P, e->a, e->kind == SX_OR ? SX_P_AND + 1 : prec + 1);
    fprintf(out, " %s ", sx_op_str(e->kind));
    sx_print_child(P, e->b, e->kind == SX_OR ? SX_P_AND + 1 : prec + 1);
    break;
  case SX_SELECT:
    sx_print_child(P, e->a, SX_P_OR);
    fputs(" ? ", out);
    sx_print_child(P, e->b, SX_P_OR);
    fputs(" : ", out);
    sx_print_child(P, e->c, SX_P_COND);
    break;
  default: {
    const char *fn = sx_fn_name(e->kind);
    fprintf(out, "%s(", fn ? fn : "?");
    sx_print_child(P, e->a, 0);
    if (e->b) {
      fputs(", ", out);
      sx_print_child(P, e->b, 0);
    }
    fputc(')', out);
  }
  }
  if (paren) fputc(')', out);
}

/* ---- C emission with common-subexpression temporaries ---- */

typedef struct SxEmit {
  SxScratch *s;          /* num[] = use count */
  const SExpr **order;   /* post-order: operands before users */
  int norder;
} SxEmit;

static void sx_emit_visit(SxEmit *E, const SExpr *e) {
  SxScratch *s = E->s;
  if (sx_scratch_seen(s, e)) {
    s->num[e->id]++;
    return;
  }
  sx_scratch_mark(s, e);
  s->num[e->id] = 1;
  if (e->a) sx_emit_visit(E, e->a);
  if (e->b) sx_emit_visit(E, e->b);
  if (e->c) sx_emit_visit(E, e->c);
  E->order[E->norder++] = e;
}

/* A temporary prefix that cannot collide with a parameter or output name
 * ("t", then "t_", "t__", ...): a user parameter may well be called t0. */
static const char *sx_temp_prefix(const char *const *argnames, int nargs,
                                  const char *const *outs, int nouts, char *buf, size_t n) {
  size_t len = 1;
  for (;;) {
    if (len + 1 > n) break;
    memset(buf, '_', len);
    buf[0] = 't';
    buf[len] = 0;
    int clash = 0;
    for (int pass = 0; pass < 2 && !clash; pass++) {
      const char *const *names = pass ? outs : argnames;
      int cnt = pass ? nouts : nargs;
      for (int i = 0; i < cnt && !clash; i++) {
        const char *nm = names ? names[i] : NULL;
        if (!nm || strncmp(nm, buf, len) != 0) continue;
        const char *p = nm + len;
        if (!*p) continue;
        while (*p >= '0' && *p <= '9') p++;
        clash = *p == 0;
      }
    }
    if (!clash) return buf;
    len++;
  }
  return "t";
}

void sx_emit_c(FILE *out, SExpr **roots, const char *const *outs, int n,
               const char *const *argnames, const char *indent) {
  SxScratch *s = &sx_walk_scratch;
  sx_scratch_begin(s);
  SxEmit E = {s, sx_xmalloc((size_t)sx_next_id * sizeof(SExpr *) + 1), 0};
  int maxarg = -1;
  for (int i = 0; i < n; i++) sx_emit_visit(&E, roots[i]);
  for (int i = 0; i < E.norder; i++)
    if (E.order[i]->kind == SX_ARG && E.order[i]->arg > maxarg) maxarg = E.order[i]->arg;
  char pbuf[32];
  const char *prefix = sx_temp_prefix(argnames, maxarg + 1, outs, n, pbuf, sizeof pbuf);

  /* tempnum[id]: -1 = print inline.  Shared non-leaf nodes get temporaries
   * numbered in emission order, so the text depends only on the DAG shape. */
  int *tempnum = sx_xmalloc((size_t)sx_next_id * sizeof(int) + 1);
  for (int i = 0; i < E.norder; i++) tempnum[E.order[i]->id] = -1;
  SxPrinter P = {out, argnames, tempnum, prefix};
  int ntemps = 0;
  for (int i = 0; i < E.norder; i++) {
    const SExpr *e = E.order[i];
    if (e->kind == SX_CONST || e->kind == SX_ARG || s->num[e->id] < 2) continue;
    fprintf(out, "%sconst float %s%d = ", indent, prefix, ntemps);
    sx_print_rec(&P, e, 0, 1);
    fputs(";\n", out);
    tempnum[e->id] = ntemps++;
  }
  for (int i = 0; i < n; i++) {
    fprintf(out, "%s%s = ", indent, outs[i]);
    sx_print_rec(&P, roots[i], 0, 0);
    fputs(";\n", out);
  }
  free(tempnum);
  free(E.order);
}

/* ---- printing as one expression ---- */

/* Beyond this many nodes written out as a tree, sx_print names the shared
 * subexpressions instead; real activations and their derivatives print in
 * a few dozen. */
enum { SX_PRINT_TREE_MAX = 1000 };

static SxScratch sx_size_scratch;

/* Nodes of e written out as a tree (shared subexpressions counted at each
 * use); a double because it grows as 2^depth: `y = y * y;` forty times is
 * 2^40 nodes from a DAG of forty. */
static double sx_tree_size(const SExpr *e) {
  SxScratch *s = &sx_size_scratch;
  if (sx_scratch_seen(s, e)) return s->val[e->id];
  double n = 1;
  if (e->a) n += sx_tree_size(e->a);
  if (e->b) n += sx_tree_size(e->b);
  if (e->c) n += sx_tree_size(e->c);
  sx_scratch_mark(s, e);
  s->val[e->id] = n;
  return n;
}

void sx_print(FILE *out, const SExpr *e, const char *const *argnames) {
  sx_scratch_begin(&sx_size_scratch);
  if (sx_tree_size(e) <= SX_PRINT_TREE_MAX) {
    SxPrinter P = {out, argnames, NULL, "t"};
    sx_print_rec(&P, e, 0, 1);
    return;
  }
  /* As a tree it could be exponentially long: print each shared
   * subexpression once, "t0 * t0 where t0 = ...", defined before use. */
  SxScratch *s = &sx_walk_scratch;
  sx_scratch_begin(s);
  SxEmit E = {s, sx_xmalloc((size_t)sx_next_id * sizeof(SExpr *) + 1), 0};
  sx_emit_visit(&E, e);
  int maxarg = -1;
  for (int i = 0; i < E.norder; i++)
    if (E.order[i]->kind == SX_ARG && E.order[i]->arg > maxarg) maxarg = E.order[i]->arg;
  char pbuf[32];
  const char *prefix = sx_temp_prefix(argnames, maxarg + 1, NULL, 0, pbuf, sizeof pbuf);
  int *tempnum = sx_xmalloc((size_t)sx_next_id * sizeof(int) + 1);
  int ntemps = 0;
  for (int i = 0; i < E.norder; i++) {
    const SExpr *n = E.order[i];
    int shared = n->kind != SX_CONST && n->kind != SX_ARG && s->num[n->id] >= 2;
    tempnum[n->id] = shared ? ntemps++ : -1;
  }
  SxPrinter P = {out, argnames, tempnum, prefix};
  sx_print_rec(&P, e, 0, 1);
  const char *sep = " where ";
  for (int i = 0; i < E.norder; i++) {
    const SExpr *n = E.order[i];
    if (tempnum[n->id] < 0) continue;
    fprintf(out, "%s%s%d = ", sep, prefix, tempnum[n->id]);
    sx_print_rec(&P, n, 0, 1);
    sep = ", ";
  }
  free(tempnum);
  free(E.order);
}

/* ---- parsing ----
 *
 *   cond    = or ("?" cond ":" cond)?
 *   or      = and ("||" and)*
 *   and     = eq ("&&" eq)*
 *   eq      = rel (("==" | "!=") rel)*
 *   rel     = add (("<" | "<=" | ">" | ">=") add)*
 *   add     = mul (("+" | "-") mul)*
 *   mul     = unary (("*" | "/") unary)*
 *   unary   = ("-" | "+" | "!") unary | primary
 *   primary = number | arg | fn "(" cond ("," cond)* ")" | "(" cond ")"
 */

typedef struct SxParser {
  const char *text, *p;
  const char *const *argnames;
  int nargs;
  char *err;
  int errcap;
  int failed;
} SxParser;

static const struct {
  const char *name;
  SxKind kind;
  int nargs;
} sx_calls[] = {
    {"exp", SX_EXP, 1},   {"log", SX_LOG, 1},   {"tanh", SX_TANH, 1}, {"sqrt", SX_SQRT, 1},
    {"sin", SX_SIN, 1},   {"cos", SX_COS, 1},   {"fabs", SX_ABS, 1},  {"erf", SX_ERF, 1},
    {"pow", SX_POW, 2},   {"fmax", SX_MAX, 2},  {"fmin", SX_MIN, 2},
};

/* Reports the first error only; the parse unwinds returning NULL. */
static SExpr *sx_perr(SxParser *P, const char *msg, const char *what) {
  if (!P->failed)
    snprintf(P->err, (size_t)P->errcap, "column %d: %s%s", (int)(P->p - P->text) + 1, msg, what);
  P->failed = 1;
  return NULL;
}

static void sx_skip(SxParser *P) {
  while (*P->p == ' ' || *P->p == '\t') P->p++;
}

/* Consumes op (and not a longer operator starting with it: "<" not "<="). */
static int sx_eat(SxParser *P, const char *op) {
  sx_skip(P);
  size_t n = strlen(op);
  if (strncmp(P->p, op, n) != 0) return 0;
  if (n == 1 && strchr("<>=!", op[0]) && P->p[1] == '=') return 0;
  if (n == 1 && (op[0] == '&' || op[0] == '|') && P->p[1] == op[0]) return 0;
  P->p += n;
  return 1;
}

static int sx_isident(int c, int first) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

static SExpr *sx_pcond(SxParser *P);

static SExpr *sx_pprimary(SxParser *P) {
  sx_skip(P);
  const char *s = P->p;
  if ((*s >= '0' && *s <= '9') || (*s == '.' && s[1] >= '0' && s[1] <= '9')) {
    char *end;
    double v = strtod(s, &end);
    P->p = end;
    if (*P->p == 'f' || *P->p == 'F') P->p++;
    if (sx_isident(*P->p, 0) || *P->p == '.') return sx_perr(P, "malformed number", "");
    return sx_const(v);
  }
  if (*s == '(') {
    P->p++;
    SExpr *e = sx_pcond(P);
    if (e && !sx_eat(P, ")")) return sx_perr(P, "expected ')'", "");
    return e;
  }
  if (!sx_isident(*s, 1))
    return sx_perr(P, *s ? "expected a number, an argument or a call" : "unexpected end", "");
  size_t n = 1;
  while (sx_isident(s[n], 0)) n++;
  for (int i = 0; i < P->nargs; i++)
    if (strlen(P->argnames[i]) == n && !strncmp(P->argnames[i], s, n)) {
      P->p += n;
      return sx_arg(i);
    }
  for (size_t k = 0; k < sizeof sx_calls / sizeof sx_calls[0]; k++) {
    if (strlen(sx_calls[k].name) != n || strncmp(sx_calls[k].name, s, n)) continue;
    P->p += n;
    if (!sx_eat(P, "(")) return sx_perr(P, "expected '(' after ", sx_calls[k].name);
    SExpr *a[2] = {NULL, NULL};
    for (int i = 0; i < sx_calls[k].nargs; i++) {
      if (i && !sx_eat(P, ",")) return sx_perr(P, "expected ',' in the arguments of ", sx_calls[k].name);
      if (!(a[i] = sx_pcond(P))) return NULL;
    }
    if (!sx_eat(P, ")")) return sx_perr(P, "expected ')' after the arguments of ", sx_calls[k].name);
    return sx_calls[k].nargs == 1 ? sx_un(sx_calls[k].kind, a[0]) : sx_bin(sx_calls[k].kind, a[0], a[1]);
  }
  char name[64];
  snprintf(name, sizeof name, "%.*s'", (int)(n < 60 ? n : 60), s);
  return sx_perr(P, "unknown name '", name);
}

static SExpr *sx_punary(SxParser *P) {
  if (sx_eat(P, "-")) {
    SExpr *a = sx_punary(P);
    return a ? sx_un(SX_NEG, a) : NULL;
  }
  if (sx_eat(P, "!")) {
    SExpr *a = sx_punary(P);
    return a ? sx_un(SX_NOT, a) : NULL;
  }
  if (sx_eat(P, "+")) return sx_punary(P);
  return sx_pprimary(P);
}

/* The binary operators by precedence, loosest first; all left-associative.
 * Longer spellings come first ("<=" before "<"). */
static const struct {
  const char *ops[5];
  SxKind kinds[4];
} sx_levels[] = {
    {{"||"}, {SX_OR}},
    {{"&&"}, {SX_AND}},
    {{"==", "!="}, {SX_EQ, SX_NE}},
    {{"<=", ">=", "<", ">"}, {SX_LE, SX_GE, SX_LT, SX_GT}},
    {{"+", "-"}, {SX_ADD, SX_SUB}},
    {{"*", "/"}, {SX_MUL, SX_DIV}},
};
enum { SX_NLEVELS = sizeof sx_levels / sizeof sx_levels[0] };

/* or, and, eq, rel, add, mul: the operators of level lv and tighter. */
static SExpr *sx_pbinary(SxParser *P, int lv) {
  if (lv == SX_NLEVELS) return sx_punary(P);
  SExpr *e = sx_pbinary(P, lv + 1);
  while (e) {
    int k = 0;
    while (sx_levels[lv].ops[k] && !sx_eat(P, sx_levels[lv].ops[k])) k++;
    if (!sx_levels[lv].ops[k]) break;
    SExpr *b = sx_pbinary(P, lv + 1);
    e = b ? sx_bin(sx_levels[lv].kinds[k], e, b) : NULL;
  }
  return e;
}

static SExpr *sx_pcond(SxParser *P) {
  SExpr *c = sx_pbinary(P, 0);
  if (!c || !sx_eat(P, "?")) return c;
  SExpr *a = sx_pcond(P);
  if (!a) return NULL;
  if (!sx_eat(P, ":")) return sx_perr(P, "expected ':' of '?:'", "");
  SExpr *b = sx_pcond(P);
  return b ? sx_select(c, a, b) : NULL;
}

SExpr *sx_parse(const char *text, const char *const *argnames, int nargs, char *err, int errcap) {
  SxParser P = {text, text, argnames, nargs, err, errcap, 0};
  SExpr *e = sx_pcond(&P);
  sx_skip(&P);
  if (e && *P.p) {
    char c[3] = {*P.p, '\'', 0};
    return sx_perr(&P, "unexpected '", c);
  }
  return e;
}

ScalarFn *sx_fn_parse(const char *name, const char *text, const char *const *argnames, int nargs,
                      char *err, int errcap) {
  SExpr *body = sx_parse(text, argnames, nargs, err, errcap);
  if (!body) return NULL;
  ScalarFn *fn = arena_alloc(sizeof *fn);
  fn->name = name;
  fn->nargs = nargs;
  fn->argnames = arena_alloc(sizeof(char *) * (size_t)(nargs ? nargs : 1));
  for (int i = 0; i < nargs; i++) fn->argnames[i] = argnames[i];
  fn->body = body;
  fn->dbody = arena_alloc(sizeof(SExpr *) * (size_t)(nargs ? nargs : 1));
  for (int i = 0; i < nargs; i++) fn->dbody[i] = sx_diff(body, i);
  return fn;
}
