/* sexpr.h — scalar expressions: bodies of C functions imported with
 * `use NAME from "file.h"` and of the builtin elementwise functions
 * (ir/ops.def's EW rows), their symbolic partial derivatives, evaluation
 * and C emission.  Expressions are hash-consed DAGs (structurally equal
 * subexpressions are one node), so shared subexpressions are kept shared
 * through differentiation and simplification.
 */
#ifndef SHARDC_SEXPR_H
#define SHARDC_SEXPR_H

#include <stdio.h>

#include "diag.h"

typedef enum {
  SX_CONST,   /* value */
  SX_ARG,     /* argument number `arg` */
  SX_ADD, SX_SUB, SX_MUL, SX_DIV, SX_NEG,
  SX_POW,     /* powf(a, b) */
  SX_MAX, SX_MIN,                /* fmaxf, fminf */
  SX_EXP, SX_LOG, SX_TANH, SX_SQRT, SX_SIN, SX_COS, SX_ABS,
  SX_SIGMOID_UNUSED_,            /* reserved */
  SX_ERF,
  SX_LT, SX_LE, SX_GT, SX_GE, SX_EQ, SX_NE,   /* 1.0 or 0.0 */
  SX_AND, SX_OR, SX_NOT,
  SX_SELECT,  /* a ? b : c  (a compared != 0) */
  SX_NKINDS
} SxKind;

typedef struct SExpr {
  SxKind kind;
  int arg;               /* SX_ARG */
  double value;          /* SX_CONST */
  struct SExpr *a, *b, *c;
  unsigned id;           /* unique, dense per process: for CSE in emitters */
  unsigned depth;        /* operations on the longest path down (leaves: 0) */
} SExpr;

/* The deepest expression a producer may hand on.  Differentiation,
 * substitution, evaluation and both C printers recurse once per level (and
 * a derivative is up to about three times as deep as its function, a fused
 * loop up to FUSE_MAX_CHAIN functions deep), so producers of unbounded
 * expressions (cimport.c) refuse deeper ones.  Real activations are a few
 * dozen levels deep. */
enum { SX_MAX_DEPTH = 1000 };

/* A scalar function (imported from a C header, or a builtin defined by an
 * expression) and its partial derivatives. */
typedef struct ScalarFn {
  const char *name;
  const char *header;     /* path as resolved; NULL for a builtin */
  int line;               /* line of the definition in the header */
  int nargs;
  const char **argnames;
  SExpr *body;
  SExpr **dbody;          /* dbody[i] = d body / d arg i, simplified */
} ScalarFn;

/* Constructors: hash-consed and locally simplified (constant folding,
 * x+0, x*1, x*0, --x, ...). */
SExpr *sx_const(double v);
SExpr *sx_arg(int i);
SExpr *sx_un(SxKind k, SExpr *a);
SExpr *sx_bin(SxKind k, SExpr *a, SExpr *b);
SExpr *sx_select(SExpr *cond, SExpr *a, SExpr *b);

/* e with every occurrence of node `from` replaced by `to`, re-simplified. */
SExpr *sx_subst(SExpr *e, SExpr *from, SExpr *to);

/* d e / d arg i, simplified. */
SExpr *sx_diff(SExpr *e, int i);
double sx_eval(const SExpr *e, const double *args);
/* The C spelling of a binary operator kind ("+", "<=", "&&", ...). */
const char *sx_op_str(SxKind k);
/* Number of distinct nodes in the DAGs rooted at roots[0..n). */
int sx_count(SExpr **roots, int n);

/* Print as one C expression using argnames, e.g. for IR dumps.  One that
 * would be long written out as a tree (shared subexpressions repeated:
 * over a thousand nodes) names its shared subexpressions instead:
 * "t1 * t1 where t0 = x * x, t1 = t0 * t0". */
void sx_print(FILE *out, const SExpr *e, const char *const *argnames);
/* Emit C statements computing roots[0..n) with shared subexpressions in
 * `const float tN = ...;` temporaries; results assigned to outs[i]
 * (e.g. "y", "dx").  Uses float math functions (expf, tanhf, ...).
 * Each line is prefixed with `indent`. */
void sx_emit_c(FILE *out, SExpr **roots, const char *const *outs, int n,
               const char *const *argnames, const char *indent);

/* Parses text, a C-like expression of the arguments argnames[0..nargs):
 * numbers (1, 0.5, 1e-3, 2.0f), argument names, + - * / and unary - + !,
 * < <= > >= == !=, && ||, ?: and the calls exp log tanh sqrt sin cos fabs
 * erf (one argument) and pow fmax fmin (two), with C's precedence.  NULL
 * with "column N: message" in err when it does not parse. */
SExpr *sx_parse(const char *text, const char *const *argnames, int nargs, char *err, int errcap);
/* The function `name` whose body is sx_parse(text, ...) with its partial
 * derivatives (arena-allocated, header NULL); NULL with a message in err. */
ScalarFn *sx_fn_parse(const char *name, const char *text, const char *const *argnames, int nargs,
                      char *err, int errcap);

/* Free every node (they live outside the arena so that hash-consing survives
 * arena_free_all()).  Only for long-running processes such as fuzzers: any
 * SExpr or ScalarFn built before is invalid afterwards. */
void sx_reset(void);

/* Import `name` from the C header `header` (resolved relative to
 * `base_dir` when relative) with libclang; `use_loc` is the `use` in the
 * DSL, used for notes.  Reports errors (with the location inside the header)
 * through diag and returns NULL on failure. */
ScalarFn *cimp_import(const char *header, const char *base_dir, const char *name,
                      SrcLoc use_loc);

#endif
