/* sema.h — semantic analysis: declarations, constants, meshes, the train
 * block and the plan; then lowering of the chosen model to the IR. */
#ifndef SHARDC_SEMA_H
#define SHARDC_SEMA_H

#include "ast.h"
#include "ir.h"

typedef struct Optimizer {
  const char *kind;       /* "adamw" or "sgd" */
  double lr, beta1, beta2, eps, weight_decay, momentum, clip, min_lr_ratio;
  int warmup;
  const char *schedule;   /* "cosine" or "constant" */
} Optimizer;

typedef struct TrainCfg {
  Decl *decl;             /* NULL when there is no train block */
  Decl *model;
  Mesh *mesh;
  int64_t batch;          /* sequences per optimizer step, all dp ranks */
  int64_t microbatch;     /* sequences per rank per forward pass */
  int64_t seq;
  int64_t steps, seed;
  Optimizer opt;
  DType precision;
  const char *data;       /* default data file, may be NULL */
  Plan plan;
  SrcLoc plan_loc;        /* where the strategy was given (item or none) */
  const char *plan_origin;/* "train block", "--strategy" or "default" */
  const char *cli_strategy;/* the --strategy SPEC, or NULL */
} TrainCfg;

/* The memory plan of one rank: one arena, persistent part first. */
typedef struct MemPlan {
  int64_t param_bytes, grad_bytes, optstate_bytes, input_bytes;
  int64_t persistent_bytes;   /* params + grads + optimizer state */
  int64_t transient_peak;     /* activations, their gradients and inputs, at the peak */
  int64_t arena_bytes;        /* persistent + transient peak: the planned peak */
  int peak_node;              /* node index at which the transient peak is reached */
  int nbuffers;
  /* ZeRO (plan zero >= 1, dp > 1; passes/zero.c): each rank keeps the
   * summed gradients and the optimizer state of its chunk of every bucket
   * only (zero_chunk elements in all), at these offsets. */
  int64_t zero_chunk, zero_gshard_offset, zero_opt_offset;
  /* A pipeline stage: values held from a microbatch's forward to its
   * backward (and messages in flight) live in one of `slots` stash slots of
   * stash_bytes each, at stash_offset + slot * stash_bytes, after the
   * transient region; slots = the most microbatches in flight on the stage
   * under the schedule. */
  int64_t stash_offset, stash_bytes;
  int slots;
} MemPlan;

enum { MAX_STAGES = 64 };

typedef struct Module {
  Program *prog;
  const char *base_dir;   /* directory of the .shard file, for `use` */
  PtrVec decls;           /* Decl* that define names (const, use, layer, model, mesh) */
  PtrVec meshes;          /* Mesh* */
  PtrVec fns;             /* ScalarFn* */
  TrainCfg train;
  Graph *graph;           /* the lowered model (NULL if there is none) */
  MemPlan mem;            /* filled by the memplan pass */
  /* Pipeline (plan pp > 1): the stage graphs cut from the whole forward
   * graph (kept in `whole`), one memory plan each; the passes after
   * "stage" run once per stage with graph/mem set to it. */
  Graph *whole;
  int nstages;
  Graph *stages[MAX_STAGES];
  MemPlan stage_mem[MAX_STAGES];
  const char *stage_desc[MAX_STAGES];   /* "embed, blocks.0-1" */
  bool planned;
} Module;

typedef struct SemaOptions {
  const char *mesh;       /* --mesh NAME|SPEC, or NULL */
  const char *strategy;   /* --strategy SPEC|auto, or NULL */
  const char *model;      /* --model NAME, or NULL */
} SemaOptions;

/* Checks the program and lowers its model; returns NULL only when no
 * Module could be built.  Errors go through diag. */
Module *sema_run(Program *prog, const SemaOptions *opt);

/* ---- shared between sema.c and lower.c ---- */
Decl *sema_lookup_decl(Module *m, const char *name);
/* Evaluates a constant expression to a number; returns 0 or reports. */
int sema_eval_number(Module *m, Expr *e, double *out, bool *is_int);
int lower_model(Module *m);
bool lower_is_builtin(const char *name);
ScalarFn *sema_decl_fn(Decl *d);   /* the import behind a `use` */
/* Where the strategy key `bit` (a PLAN_* bit) was written: inside the
 * strategy string or as a train item; no file when it came from --strategy
 * (or was not written). */
SrcLoc sema_plan_key_loc(TrainCfg *t, unsigned bit);
/* Closest name among candidates (edit distance <= 2), or NULL. */
const char *sema_suggest(const char *name, const char *const *cands, int n);

#endif
