/* module.h — one compilation: the declarations sema checked, the train
 * block and its plan, the lowered graph (one per pipeline stage) and each
 * graph's memory plan.  Built by the frontend, read and refined by the passes
 * and the code generators. */
#ifndef SHARDC_MODULE_H
#define SHARDC_MODULE_H

#include "ir.h"

/* The frontend's syntax tree (frontend/ast.h); the IR only carries it. */
typedef struct Program Program;
typedef struct Decl Decl;

typedef struct Optimizer {
  const char *kind;       /* "adamw" or "sgd" */
  double lr, beta1, beta2, eps, weight_decay, momentum, clip, min_lr_ratio;
  int warmup;
  const char *schedule;   /* "cosine" or "constant" */
} Optimizer;

typedef struct TrainCfg {
  Decl *decl;             /* NULL when there is no train block */
  SrcLoc loc;             /* its `train` keyword, or none */
  Decl *model;
  const char *model_name; /* its name */
  Mesh *mesh;
  int64_t batch;          /* sequences per optimizer step, all dp ranks */
  int64_t microbatch;     /* sequences per rank per forward pass */
  int64_t seq;
  int64_t steps, seed;
  Optimizer opt;
  DType precision;
  SrcLoc precision_loc;   /* the `precision` item's value, or none */
  const char *data;       /* default data file, may be NULL */
  Plan plan;
  SrcLoc plan_loc;        /* where the strategy was given (item or none) */
  const char *plan_origin;/* "train block", "--strategy" or "default" */
  const char *cli_strategy;/* the --strategy SPEC, or NULL */
  /* Where each strategy key was written (index: the PLAN_* bit's position),
   * for errors of later passes; plan_loc where a key was not written. */
  SrcLoc key_loc[PLAN_NKEYS];
} TrainCfg;

/* Where the strategy key `bit` (a PLAN_* bit) was written. */
static inline SrcLoc plan_key_loc(const TrainCfg *t, unsigned bit) {
  for (int k = 0; k < PLAN_NKEYS; k++)
    if (bit == 1u << k) return t->key_loc[k];
  return t->plan_loc;
}

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
  /* An interleaved chunk: where its persistent part starts in its pipeline
   * rank's arena (Module.rank_mem); 0 otherwise. */
  int64_t base;
} MemPlan;

enum { MAX_STAGES = 64 };

typedef struct Module {
  Program *prog;          /* the parsed file (frontend/ast.h) */
  const char *source;     /* its path, as given */
  const char *base_dir;   /* directory of the .shard file, for `use` */
  PtrVec decls;           /* Decl* that define names (const, use, layer, model, mesh) */
  PtrVec meshes;          /* Mesh* */
  PtrVec fns;             /* ScalarFn* */
  TrainCfg train;
  Graph *graph;           /* the lowered model (NULL if there is none) */
  /* The whole model's forward FLOPs of one microbatch and its tokens (rows
   * x seq), counted by the shape pass before any sharding: the base of the
   * model FLOPs (passes/report.c plan_flops). */
  double fwd_flops;
  int64_t fwd_tokens;
  MemPlan mem;            /* filled by the memplan pass */
  /* Pipeline (plan pp > 1): the stage graphs cut from the whole forward
   * graph (kept in `whole`), one memory plan each; the passes after
   * "stage" run once per stage with graph/mem set to it. */
  Graph *whole;
  int nstages;
  Graph *stages[MAX_STAGES];
  MemPlan stage_mem[MAX_STAGES];
  const char *stage_desc[MAX_STAGES];   /* "embed, blocks.0-1" */
  const char *stage_cuts_by;            /* what the stage cuts balance (stage.c) */
  /* Each pipeline rank's arena (memplan; rank 0 alone without a pipeline):
   * interleaved, its chunks (virtual stages c*pp + r) side by side,
   *   [persistent of chunk 0 | of chunk 1 | ... | one transient region (the
   *    largest chunk's: one action runs at a time) | stash slots of chunk 0 | ...],
   * the chunks' values relocated there; else the stage's own plan. */
  MemPlan rank_mem[MAX_STAGES];
  /* The per-rank programs (passes/program.c), one per pipeline rank. */
  struct RankProg *rprog[MAX_STAGES];
  int nrprog;
  bool no_memory_check;  /* --no-memory-check: plans larger than the device pass (memcheck.c) */
  bool lowerable;        /* sema found the train block sound and a model to lower */
  bool planned;
} Module;

/* Optimizer-state tensors per parameter: AdamW 2 (m, v), SGD with momentum 1. */
int opt_states(const Optimizer *o);

#endif
