/* explore.h — the strategy search (passes/explore.c): a per-layer analytic
 * cost built once from the model's single-device graph (one layer's ops and
 * the ops outside the layers, with their shapes), evaluated for any plan in
 * microseconds with the formulas of cost.c, memoised per layer shape; stage
 * partitions by dynamic programming over layers; pruning by divisibility
 * and memory. */
#ifndef SHARDC_EXPLORE_H
#define SHARDC_EXPLORE_H

#include "cost.h"

/* One forward op of a layer (or outside the layers), per sequence. */
typedef enum { LO_GEMM, LO_ATTN, LO_ELEM, LO_GATHER, LO_XENT } LOpKind;
typedef struct LOp {
  LOpKind kind;
  double rows;        /* rows per sequence (tokens) */
  double N, K;        /* GEMM: out and in features */
  int split;          /* GEMM: TPH_COL / TPH_ROW / TPH_VOCAB; ELEM: 1 when on split channels */
  double H, Hkv, D;   /* attention heads, kv heads, head dim */
  bool causal;        /* attention: masked above the diagonal */
  bool rerun;         /* run again before the backward under recompute=full (its
                       * output or a value made from it is dropped) */
  double elems;       /* ELEM, GATHER, XENT: elements per sequence moved (in + out) */
  double bwd;         /* ELEM: the backward's time over the forward's (0: 2) */
  double flops;       /* per sequence */
} LOp;

enum { LAYER_MAXOPS = 96, LAYER_MAXTENSORS = 64 };
typedef struct LayerModel {
  LOp op[LAYER_MAXOPS];
  int nop;
  double params;      /* elements */
  double params_split;/* of which split over tp (matrices) */
  double saved;       /* activation elements per sequence held for the backward */
  double saved_split; /* of which on split channels (heads, MLP hidden) */
  double saved_attn;  /* of which the attention's own */
  double saved_sel, saved_sel_split;  /* of which selective recompute drops (passes/recompute.c) */
  /* of saved's replicated elements, the inputs of column-parallel GEMMs:
   * under Megatron-SP each is all-gathered before its GEMMs and the
   * backward keeps the whole sequence's copy (passes/shard.c) */
  double saved_gath, saved_sel_gath;
  /* of saved, the vocabulary projection's input: under tp2d gathered
   * whole, its rows cut over one grid axis (passes/shard2d.c) */
  double saved_vocab;
  double sel_elems;   /* elements the ops it reruns read and write, per sequence */
  double input;       /* the layer input, elements per sequence (kept by full recompute) */
  /* post: the elements of pre's parameters a post op reads too (a tied
   * embedding), of which split over tp; a pipeline's last stage keeps a
   * copy */
  double tied, tied_split;
  double fwd_flops;   /* model FLOPs per sequence (matmul + attention), forward */
  /* Shampoo, Adafactor: the parameters, in order, for the ZeRO owner layout
   * (passes/zero.c): elements, state bytes (64-aligned) and ZeRO bucket */
  int nt;
  int64_t t_numel[LAYER_MAXTENSORS], t_state[LAYER_MAXTENSORS];
  const char *t_bucket[LAYER_MAXTENSORS];
  bool t_tied[LAYER_MAXTENSORS];  /* post: a pre parameter's copy, kept by a pipeline's last stage */
  bool t_shared[LAYER_MAXTENSORS]; /* pre: a parameter the post reads too (a pipeline's
                                   * tied bucket: zero.c merges it with no other) */
  /* Shampoo: its tensors (cost_shampoo_tensor prices each) */
  int nsh;
  const Shape *sh[LAYER_MAXTENSORS];
} LayerModel;

typedef struct ModelShape {
  unsigned long stamp; /* explore_model_shape's count: one per shape made (the cost memo's key) */
  const char *name;
  int layers;
  int64_t seq, batch, hidden, heads, kv_heads, vocab;
  int elt;            /* activation bytes */
  int param_elt;      /* parameter, gradient bytes (memplan's) */
  double opt_states;  /* optimizer state elements per parameter element (AdamW 2;
                       * Shampoo, Adafactor: their whole tensors' state over
                       * their elements) */
  int fixed_b;        /* the train block's microbatch (sequences), 0: free */
  bool eager_opt;     /* Shampoo or Adafactor: the CUDA target's steps run eagerly, not as graphs */
  double opt_work;    /* Shampoo's step workspace, bytes (64-aligned) */
  bool shampoo;       /* the optimizer is Shampoo: its step priced (cost_shampoo_block) */
  bool adafactor;     /* the optimizer is Adafactor: its step priced (cost_adafactor_elems) */
  Optimizer opt;      /* the train block's */
  bool sh_spread;     /* Shampoo's units spread over the data ranks (spread = true) */
  double root_work;   /* ... and a pipeline's root worker's scratch after it */
  bool owner_exact;   /* every parameter listed in its LayerModel (nt) */
  bool blocked;       /* Shampoo or Adafactor (opt_blocked) */
  double half_frac;   /* 16-bit plans: the parameter elements read only by matmuls (passes/
                       * zero.c gathers them in 16 bits under ZeRO), over all */
  double wcopy_frac;  /* 16-bit plans: the parameter elements matmuls read, over all, which
                       * get a persistent 16-bit copy cast once per step (precision.c) */
  LayerModel layer;   /* one repeated layer */
  LayerModel pre, post;   /* ops before the first layer and after the last */
} ModelShape;

/* Builds the model's shape from a single-device compile (after autodiff):
 * 0, or -1 when the graph has no repeated layers. */
int explore_model_shape(const Module *m, ModelShape *ms);

typedef struct PlanEval {
  Plan plan;
  int b;                  /* sequences per microbatch */
  double step_s, tokens_per_s, tflops_per_device, mfu;
  double peak_mem;        /* max over stages */
  double mem_stage[PLAN_MAXSTAGES];
  int nstages;
  double bytes_per_rank;  /* sent per step */
  bool feasible;
  char reason[128];
  char spec[256];
  /* for the report: per pipeline rank, forward and backward of one
   * microbatch (all its chunks), memory by kind; the step's parts */
  double tf[PLAN_MAXSTAGES], tb[PLAN_MAXSTAGES];
  double mem_kind[PLAN_MAXSTAGES][4];   /* params, grads, optimizer, activations */
  double t_gemm, t_attn, t_elem, t_comm;  /* per step on pipeline rank 0's layers */
  double t_reduce, t_opt, t_bubble;
} PlanEval;

/* Every plan the search evaluates, for the report's time-memory scatter. */
typedef struct ExplorePoint {
  float step_s, peak_mem;
  bool feasible;
} ExplorePoint;

/* One pipeline message's time (an activation of b sequences between
 * neighbouring stages, the receiver's wait): scattered over tp where the
 * pipeline crosses nodes (passes/program.c), whole otherwise; 0 without pp. */
double explore_msg_time(const ModelShape *ms, const HwModel *hw, const Mesh *me, const Plan *p,
                        int b);

/* Evaluates one resolved plan (microbatch b sequences). */
void explore_eval(const ModelShape *ms, const HwModel *hw, const Mesh *me, const Plan *p, int b,
                  bool recompute_ok, PlanEval *out);

typedef struct ExploreOpts {
  const Plan *fixed;      /* keys given (fixed->given); NULL: search all */
  int top;
  ExplorePoint *points;   /* when set: every evaluated plan, up to cap_points */
  int cap_points, npoints;
} ExploreOpts;

/* The HTML report (explore --report): SVG drawings of the time-memory
 * Pareto front of the plans evaluated, the best plan's pipeline timeline
 * per rank, its memory per stage by kind and its time breakdown. */
void explore_report_html(FILE *out, const ModelShape *ms, const HwModel *hw, const Mesh *me,
                         const PlanEval *best, int nbest, const ExplorePoint *pts, int npts,
                         const PlanEval *ref);

/* Searches plans; fills the best `cap` (feasible first, by step time) into
 * out and returns how many; *evaluated gets the plans evaluated. */
/* SHARDC_RECOMPUTE_AS=megatron: the search prices recompute=full as
 * Megatron-LM runs it (the whole layer's forward again, its last GEMMs
 * too) rather than as shardc's programs do (only what the backward reads),
 * to compare with published Megatron runs (bench/explore_published.sh);
 * explore then does not compile such plans. */
bool explore_recompute_as_megatron(void);
/* Why explore_search found no plan (fx: the fixed keys, or NULL): a sentence. */
const char *explore_no_plan_reason(const ModelShape *ms, const Mesh *me, const Plan *fx);
/* "stage W needs X > Y" with X and Y in decimal units that tell them apart
 * (GB, MB, kB: a 1 MB budget is not "0.0 GB"). */
const char *explore_mem_reason(int stage, double need, double have);
int explore_search(const ModelShape *ms, const HwModel *hw, const Mesh *me, ExploreOpts *o,
                   PlanEval *out, int cap, long *evaluated);

/* Model FLOPs of one step (forward + backward, 3x forward), and with full
 * recompute (4x the layers' forward). */
double explore_model_flops(const ModelShape *ms, bool full_recompute);

#endif
