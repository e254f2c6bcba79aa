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
  const char *kind;       /* "adamw", "sgd", "shampoo" or "adafactor" */
  double lr, beta1, beta2, eps, weight_decay, momentum, clip, min_lr_ratio;
  int warmup;
  const char *schedule;   /* "cosine" or "constant" */
  /* shampoo (docs/language.md): blocks of at most block x block of the full
   * tensor; roots every precondition_every steps from step
   * start_preconditioning (0-based); graft RT_GRAFT_*, root RT_ROOT_*
   * (runtime/rt_optim.h); eps regularises the factors, graft_eps the
   * grafting method's denominator.  adafactor: eps is eps1 (added to g²),
   * decay_rate gives beta2(t) = 1 - t^-decay_rate, clip_threshold the
   * update's RMS clipping, beta1 the optional momentum. */
  int block, precondition_every, start_preconditioning, graft, root;
  double graft_eps, decay_rate, clip_threshold;
  bool no_spread;         /* shampoo spread = false: every data rank computes every block */
  bool no_stagger;        /* shampoo stagger = false: every block's roots at the same steps */
  SrcLoc block_loc;       /* shampoo: its `block` value, or the call (the default) */
  SrcLoc root_loc;        /* shampoo: its `root` value, or the call (the default) */
} Optimizer;

typedef struct TrainCfg {
  Decl *decl;             /* NULL when there is no train block */
  SrcLoc loc;             /* its `train` keyword, or none */
  Decl *model;
  const char *model_name; /* its name */
  Mesh *mesh;
  int64_t batch;          /* sequences per optimizer step, all dp ranks */
  int64_t microbatch;     /* sequences per rank per forward pass */
  bool microbatch_given;  /* written in the train block (the search keeps it) */
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
  int64_t persistent_bytes;   /* params + grads + optimizer state + 16-bit weight copies */
  /* precision = bf16: the 16-bit copies of the parameters kernels read
   * (the graph's wcasts, cast once per step), after the optimizer state;
   * interleaved: every chunk's (under ZeRO, the rank's one part) */
  int64_t wcopy_offset, wcopy_bytes;
  bool wcopy_gathered;        /* ZeRO-1/2 under bf16: they are the buckets' gathered copies,
                               * some in fp32 (passes/zero.c masters_sharded) */
  int64_t transient_peak;     /* activations, their gradients and inputs, at the peak */
  int64_t arena_bytes;        /* persistent + transient peak: the planned peak */
  int peak_node;              /* node index at which the transient peak is reached */
  int nbuffers;
  /* ZeRO (plan zero >= 1, dp > 1; passes/zero.c): each rank keeps the
   * summed gradients and the optimizer state of its chunk of every bucket
   * only (zero_chunk elements in all), at these offsets. */
  int64_t zero_chunk, zero_gshard_offset, zero_opt_offset;
  /* shampoo: the optimizer step's workspace (after the state), and with
   * blocks placed over data ranks (passes/optplace.c) the direction buffer */
  int64_t opt_work_offset, opt_dir_offset;
  /* a pipeline's Shampoo: the root worker's scratch (the end of the
   * workspace; runtime/train.c), bytes 0 without */
  int64_t root_work_offset, root_work_bytes;
  int64_t opt_stats_offset; /* adafactor under tp: the statistics buffer (optplace.c) */
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
  const char *stage_cut[MAX_STAGES];    /* where the cut after stage s falls (stage.c) */
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
  bool cuda;             /* planned for the cuda target's runtime (--target cuda, cuda-host):
                          * no Shampoo root worker (runtime/train.c) */
  bool lowerable;        /* sema found the train block sound and a model to lower */
  bool planned;
  /* Shampoo's root phases of the whole model's blocks (passes/optplace.c),
   * made once: the same for every rank's program and report of a compile. */
  struct OptPhaseCache *opt_phases;
  /* ... and the units placed over the ranks, per parameters and ranks asked */
  struct OptUnitCache *opt_units;
} Module;

/* Optimizer-state tensors per parameter: AdamW 2 (m, v), SGD with momentum 1;
 * 0 for shampoo and adafactor, whose state is opt_state_elems per tensor. */
int opt_states(const Optimizer *o);
/* Shampoo or adafactor: state laid out per tensor (runtime/rt_optim.h). */
bool opt_blocked(const Optimizer *o);
/* Elements of optimizer state of a parameter of shape s (shampoo,
 * adafactor), and the step's workspace in bytes over all of them; with
 * `worker` (a pipeline's: Shampoo's roots in a thread of their own,
 * runtime/train.c) the root worker's scratch at its end, *root_work bytes
 * (0 without; root_work may be NULL). */
int64_t opt_state_elems(const Optimizer *o, const Shape *s);
int64_t opt_work_bytes(const Optimizer *o, const Shape *const *shapes, int n, bool worker,
                       int64_t *root_work);
/* Shampoo, adafactor: the state of g's parameters with a gradient from byte
 * off (their opt_offset), then the step's workspace (at *work_off, sized for
 * `whole`'s largest block, or g's when NULL; with `worker`, a pipeline
 * rank's of the cpu target, the root worker's scratch at its end,
 * *root_work bytes); returns the end. */
int64_t opt_plan_state(const Optimizer *o, Graph *g, const Graph *whole, int64_t off,
                       int64_t *work_off, bool worker, int64_t *root_work);
/* Whether m's pipeline ranks run Shampoo's root worker (runtime/train.c):
 * a pipeline of the cpu target. */
bool opt_root_worker(const Module *m);

#endif
