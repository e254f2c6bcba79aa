/* sema.h — semantic analysis: declarations, constants, meshes, the train
 * block and the plan; then lowering of the chosen model to the IR. */
#ifndef SHARDC_SEMA_H
#define SHARDC_SEMA_H

#include "ast.h"
#include "module.h"

typedef struct SemaOptions {
  const char *mesh;       /* --mesh NAME|SPEC, or NULL */
  const char *strategy;   /* --strategy SPEC|auto, or NULL */
  const char *model;      /* --model NAME, or NULL */
  double memory;          /* --memory SIZE: bytes per device (0: the mesh's) */
  bool cuda;              /* --target cuda or cuda-host: the cuda runtime's plan */
} SemaOptions;

/* The frontend: sema_run, then lower_model, then the warnings about unused
 * declarations; returns NULL only when no Module could be built.  Errors go
 * through diag. */
Module *frontend_run(Program *prog, const SemaOptions *opt);

/* Checks the program: declarations, constants, meshes, the train block and
 * the plan.  NULL only when no Module could be built. */
Module *sema_run(Program *prog, const SemaOptions *opt);
/* Warns about declarations the model never used (after lowering). */
void sema_warn_unused(Module *m);

/* ---- shared between sema.c and lower.c ---- */
Decl *sema_lookup_decl(Module *m, const char *name);
/* Evaluates a constant expression to a number; returns 0 or reports. */
int sema_eval_number(Module *m, Expr *e, double *out, bool *is_int);
/* Lowers the train block's model to m->graph (lower.c). */
int lower_model(Module *m);
/* Whether name is a builtin layer (builtins.h). */
bool builtin_exists(const char *name);
ScalarFn *sema_decl_fn(Decl *d);   /* the import behind a `use` */
/* Where the strategy key `bit` (a PLAN_* bit) was written: inside the
 * strategy string or as a train item; no file when it came from --strategy
 * (or was not written). */
SrcLoc sema_plan_key_loc(TrainCfg *t, unsigned bit);
/* Closest name among candidates (edit distance <= 2), or NULL. */
const char *sema_suggest(const char *name, const char *const *cands, int n);

#endif
