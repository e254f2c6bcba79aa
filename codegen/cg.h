/* cg.h — code generators: the planned per-rank program written out as source
 * for a target.  Only the cpu target (C + libshardrt + MPI) exists so far.
 *
 *   cexpr.c   scalar expressions (imported C functions, fused elementwise
 *             chains) as C statements with common subexpressions shared
 *   cpu.c     the cpu target: one self-contained, readable C file per model
 */
#ifndef SHARDC_CG_H
#define SHARDC_CG_H

#include "passes.h"

typedef struct CgOptions {
  /* Emit double arithmetic and the _f64 kernels, every arena offset doubled
   * (the f32 plan scaled by two stays disjoint): for gradient checks. */
  int f64;
} CgOptions;

/* 0 when the generator for `target` ("cpu", "cuda") handles this module:
 * its plan, precision, ops and inputs; otherwise reports through diag what is
 * not implemented yet and returns -1. */
int cg_check(Module *m, const char *target);

/* One C file for the cpu target; 0 on success.  Deterministic text. */
int cg_emit_cpu(FILE *out, Module *m);
int cg_emit_cpu_opts(FILE *out, Module *m, const CgOptions *o);

/* The data file a generated program reads by default: the train block's
 * `data` resolved against the model's directory, else the built-in text in
 * samples/data/ (absolute path; NULL when the model takes no token data). */
const char *cg_default_data(Module *m);
/* Whether the program needs MPI (more than one rank). */
int cg_needs_mpi(const Module *m);

/* ---- build.c ---- */

/* `shardc build`: writes DIR/model.c (created with its parents) and compiles
 * it with cc, or mpicc when the plan has several ranks, against libshardrt
 * into DIR/train.  Reports the compiler's output on failure.  0 on success. */
int cg_build(Module *m, const char *dir, const CgOptions *o);

/* ---- cexpr.c ---- */

/* An elementwise forward op (add, sub, mul, scale, relu, gelu, silu, map) as
 * a scalar expression of its operands' expressions; NULL for other ops. */
SExpr *cg_op_expr(const Node *n, SExpr *const *operands);
/* `fn`'s body or derivative `which` (-1: body) with its arguments replaced
 * by args[0..nargs). */
SExpr *cg_fn_expr(const ScalarFn *fn, int which, SExpr *const *args);
/* Emits `lhs[k] ops[k] roots[k];` for k < n, with every subexpression used
 * more than once computed once into `const T tN` temporaries (T = float, or
 * double when f64).  argnames name SX_ARG k.  Math functions and literals in
 * float (expf, 1.5f) or double (exp, 1.5). */
void cg_emit_exprs(FILE *out, SExpr *const *roots, const char *const *lhs,
                   const char *const *ops, int n, const char *const *argnames,
                   const char *indent, int f64);
/* A C literal for v: "0.5f" (f32) or "0.5" (f64), shortest that round-trips. */
void cg_literal(char *buf, int cap, double v, int f64);

#endif
