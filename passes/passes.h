/* passes.h — the pass pipeline.  Each pass is one file with one entry point;
 * main runs them as a plain list (QBE style). */
#ifndef SHARDC_PASSES_H
#define SHARDC_PASSES_H

#include "module.h"
#include "rankprog.h"

typedef struct Pass {
  const char *name;
  const char *summary;
  int (*run)(Module *m);   /* 0 on success; errors through diag */
} Pass;

/* In pipeline order.  "lower" (the frontend's AST -> IR) comes first. */
extern const Pass pass_list[];
extern const int pass_count;

int pass_shape(Module *m);
int pass_shard(Module *m);
/* 2D tensor parallelism (tp2d=QxQ, shard2d.c): run by pass_shard. */
int shard_tp2d(Module *m);
int pass_autodiff(Module *m);
int pass_zero(Module *m);
int pass_memplan(Module *m);
/* memplan on every stage, then the pipeline ranks' arenas (Module.rank_mem). */
int pass_memplan_all(Module *m);
/* memplan's persistent layout for a plan with gradient buckets (zero.c):
 * 1 with *end set, or 0 when the plan has none. */
int zero_memplan(Module *m, int64_t *end);
/* The memory line's name of MemPlan.wcopy_bytes: "16-bit weight copies", or
 * under ZeRO-1/2 with bf16 "gathered weight copies" (16-bit, and the fp32
 * copies of the buckets read in fp32). */
const char *memplan_wcopy_label(const MemPlan *mp);
/* ZeRO-3 on a data-parallel mesh: parameters are gathered per use, never
 * whole on a rank for the step. */
bool zero_gathers_params(const Module *m);
/* ZeRO-1/2 with 16-bit precision on dp > 1 (but Shampoo and Adafactor):
 * the fp32 masters stored as shards, the step's weight copies gathered
 * (passes/zero.c masters_sharded). */
bool zero_shards_masters(const Module *m);
/* SHARDC_ZERO_MASTERS=whole in the environment: ZeRO-1/2 keep whole fp32
 * masters and all-gather them in fp32 after the update at every precision,
 * as before (the same values: tests compare the two bitwise). */
bool zero_masters_whole(void);
/* ZeRO-3 with 16-bit precision on dp > 1 (but Shampoo and Adafactor): the
 * buckets of parameters read only through 16-bit casts are gathered in 16
 * bits (passes/zero.c). */
bool zero_gathers16(const Module *m);
/* ZeRO-2/3 with 16-bit precision (the cuda target's programs) on dp > 1:
 * each microbatch's bucket reduce-scatters trail (PInstr.trail): one runs
 * beside the backward until the next bucket's, whose grads and scratch the
 * memory plan keeps apart from it (DeepSpeed's overlap_comm).  Off with
 * SHARDC_ZERO_RS=blocking in the environment (the same values). */
bool zero_rs_trails(const Module *m);
bool zero_rs_blocking(void);   /* SHARDC_ZERO_RS=blocking */
/* The buckets of pipeline rank r: under an interleaved schedule its chunks'
 * in chunk order (one flat layout and one shard array under ZeRO); else
 * its stage's, or the model's. */
const PtrVec *zero_rank_buckets(const Module *m, int r);
/* The ZeRO bucket of a parameter: "blocks.3.attn.qkv.weight" -> "blocks.3",
 * "embed.weight" -> "embed" (explore.c replays zero.c's buckets with it). */
const char *zero_bucket_key(const char *name);
/* ZeRO with Shampoo or Adafactor: the owners of a bucket's n tensors of
 * the (16-rounded) sizes sz, each whole on one of dp ranks: by size,
 * largest first (then in order), each to the rank whose chunk is least
 * full, then the one owning the fewest elements of the buckets before
 * (owned, which grows by this bucket's fills), then the lowest; owner[j]
 * := its rank.  Returns the chunk, the fullest rank's fill (at least 16).
 * (passes/zero.c lays the buckets out so; passes/explore.c estimates the
 * state with it.) */
int64_t zero_owners(const int64_t *sz, int n, int dp, int64_t *owned, int *owner);
/* ZeRO-1 with Shampoo or Adafactor: how many buckets of a kind to merge
 * (G; bucket k of nb has nt[k] tensors of the sizes in sz, in order, and
 * the kind cls[k], < 0: merged with none), so that laying each group out
 * by owner pads at most ZERO_GROUP_PAD_PCT percent, or the least
 * (passes/zero.c; passes/explore.c mirrors it). */
enum { ZERO_GROUP_PAD_PCT = 3 };
int zero_owner_group(const int64_t *sz, const int *nt, const int *cls, int nb, int dp);
/* group[k] := the first bucket of bucket k's group of at most G (of its
 * kind, in order, as even as may be) */
void zero_owner_groups(const int *cls, int nb, int G, int *group);
int pass_commcheck(Module *m);
int pass_stage(Module *m);
/* The layer a node belongs to: its scope up to the repeat index
 * ("blocks.3.attn" -> "blocks.3"), or the scope's first component. */
const char *stage_layer_of(const Node *n, char *buf, int cap);
/* Activation recompute on each stage (recompute.c). */
int pass_recompute(Module *m);
/* precision = bf16 / fp16 (precision.c): 16-bit activations and their
 * gradients, fp32 parameters, gradients, state, statistics and loss; casts
 * before the kernels that read fp32 data.  precision_apply does it to one
 * stage graph (t: the 16-bit dtype; anything else: nothing); step_casts:
 * a parameter read as 16-bit data gets one persistent copy made once per
 * step (g->wcasts) instead of a cast before each reader (false under
 * ZeRO-3, whose parameters are gathered per use). */
int pass_precision(Module *m);
int precision_apply(Graph *g, DType t, bool step_casts);
/* The forward values of g (after autodiff, before recompute) that policy
 * `how` drops for every layer: drop[value id] (for the cost model). */
void recompute_dropped(Graph *g, Recompute how, bool *drop);
/* recompute=auto's exact pieces (for tests): a choice is a set drop[value]
 * of what recompute_dropped(g, RECOMPUTE_FULL, ...) drops, with each
 * dropped root's dropped views; the FLOPs per microbatch its copies add (a
 * node two dropped values need runs once), and the arena that the zero and
 * memplan passes plan for m with it applied to a copy of g (-1: none). */
double recompute_drop_flops(Graph *g, const bool *drop);
/* The forward nodes whose copies rebuild what drop[] drops: nodes[node id]
 * (g->nodes.len entries; for the cost model's recompute=full). */
void recompute_rerun_nodes(Graph *g, const bool *drop, bool *nodes);
int64_t recompute_drop_plan(Module *m, const Graph *g, const bool *drop);
/* Pipeline (Module.nstages > 1): points m->graph and m->mem at stage s, or
 * back at the whole model for s < 0; per_stage runs fn once per stage so
 * (each stage's memory plan kept in m->stage_mem) and returns to the whole
 * model.  Both do nothing else without stages. */
void stage_select(Module *m, int s);
int per_stage(Module *m, int (*fn)(Module *m));

/* Human-readable plan summary (--emit=plan, and the header of generated code). */
void report_plan(FILE *out, const Module *m, const char *prefix);
/* Bytes each rank of the selected stage's pipeline rank (the whole model's
 * without a pipeline) sends per training step under the plan: the counted
 * events of its program (the runtime's counting convention,
 * runtime/dist_formulas.h); per mesh axis when per_axis (AX_COUNT entries)
 * is given. */
uint64_t plan_comm_bytes(const Module *m, uint64_t *per_axis);
/* The per-rank programs (program.c): ir/rankprog.h. */
int pass_program(Module *m);
/* Every rank's communication events of one step, on the mesh's
 * communicators (commpass.c), for the check; returns the ranks. */
struct CommProgram;
int comm_program(const Module *m, struct CommProgram *out);
/* Whether node ar, right after bwd, all-reduces or reduce-scatters
 * (Megatron-SP) the input gradient of the linear backward bwd (a
 * tensor-parallel column linear's): the memory plan keeps what bwd reads
 * live through ar, so the collective's output and scratch share none of
 * it and the cuda target may run the collective beside the dW GEMM
 * (memplan.c; program.c PJ_DX). */
bool memplan_dx_reduce(const Node *bwd, const Node *ar);
/* Whether node n is a bucket reduce-scatter of each microbatch (ZeRO-2/3's,
 * not ZeRO-1's of the last), which trails where zero_rs_trails(m). */
bool memplan_rs_trails(const Node *n);
/* ... as the cuda target posts them: point-to-point messages in NCCL
 * groups (commcheck.h rendezvous), or with pipe_mpi the pipeline's staged
 * through MPI. */
int comm_program_cuda(const Module *m, struct CommProgram *out, bool pipe_mpi);
/* The job on layout L (runtime/dist_layout.h) whose pipeline rank q's
 * ranks each issue ev[q]'s nev[q] events (prog_events): mode 0 MPI's rules,
 * 1 the cuda target's NCCL groups, 2 those with the pipeline's messages
 * staged through MPI; returns the ranks. */
struct RtLayout;
struct PEvent;
int comm_program_layout(const struct RtLayout *L, struct PEvent *const *ev, const int *nev,
                        int mode, struct CommProgram *out);
/* FLOPs of one training step (report.c).  model: 3 x the whole model's
 * forward FLOPs of a microbatch (Module.fwd_flops) x its microbatches on all
 * data-parallel ranks, the same under every strategy and without recompute
 * (the numerator of MFU); hw: every node every rank runs, recompute and the
 * work tensor parallelism replicates included; hw_rank: the busiest rank's
 * share; peak: the mesh device's FLOP/s at the plan's precision (the
 * catalog, ir/mesh.c), 0 without a mesh. */
typedef struct PlanFlops {
  double model, hw, hw_rank, peak;
} PlanFlops;
void plan_flops(const Module *m, PlanFlops *f);
/* Shampoo's placement over the data ranks (optplace.c).  A unit is a
 * block (bi, bj) of rows x cols of a preconditioned parameter, or a whole
 * unblocked parameter (rows 1); param indexes the list given; owner is the
 * data rank computing it, pos its offset (elements) in the owner's segment
 * of the direction buffer, each segment seg elements. */
/* The units of params (those with a gradient) placed on nd data ranks by
 * greedy LPT on their predicted cost; returns how many. */
int optplace_units(const Module *m, const Value *const *params, int nparams, int nd,
                   OptUnit **out, int64_t *seg);
/* Shampoo stagger = true: the root phase in [0, precondition_every) of
 * every block of params (those with a gradient, preconditioned; in order,
 * each row-major), a function of the block alone (LPT over the whole
 * model's blocks); returns how many (0 and *out NULL when not staggered). */
int optplace_phases(const Module *m, const Value *const *params, int nparams, int **out);
/* Predicted flops of a unit's two roots (one recomputation). */
double optplace_root_flops(const Optimizer *o, const OptUnit *u);
/* Whether the plan places Shampoo's blocks over data ranks: shampoo, dp x
 * sp(ring) > 1, no interleaved pipeline chunks (each rank keeps its blocks). */
bool optplace_active(const Module *m);
int optplace_ranks(const Module *m);
/* Bytes of the direction buffer of graph g's parameters (0 when not placed):
 * one segment per data rank, each rounded up to 64 bytes. */
int64_t optplace_dir_bytes(const Module *m, const Graph *g);
/* Shampoo under tp or tp2d: an error when a block would straddle two
 * shards of a split parameter (run by pass_shard); 0 when every block lies
 * in one shard. */
int optplace_check_tp(Module *m);
/* Shampoo's blocks over the whole model: refused (an error at the block
 * option) beyond OPTPLACE_MAX_BLOCKS, which the compiler's tables, the
 * generated program's and the step's per-block work would not bear. */
#define OPTPLACE_MAX_BLOCKS (1 << 22)
int optplace_check_blocks(Module *m);
/* Phases 0..k-1 hold every block of the units u (n of them; 1 when none has
 * a phase): at most one phase a block, whatever precondition_every is. */
int optplace_phases_used(const OptUnit *u, int n);
/* Adafactor under tp or tp2d: the statistics layout of params (n of them,
 * out[i] for each when out is not NULL) and its bounds; returns its
 * elements, 0 when no parameter with a gradient is split. */
int64_t optplace_af_layout(const Module *m, const Value *const *params, int n, AfSplit *out,
                           AfLayout *lay);
/* Bytes of graph g's statistics buffer (memplan.c), 64-byte aligned. */
int64_t optplace_af_bytes(const Module *m, const Graph *g);

/* "124,439,808" */
void report_commas(char *buf, int cap, int64_t n);
/* "22.27 MiB" (an arena string) */
const char *report_size(double bytes);
/* The memory check (memcheck.c, run by the memplan pass): an error when a
 * pipeline rank's planned peak, times scale (2 for f64 programs), exceeds
 * the mesh device's memory, unless Module.no_memory_check.  0 when it fits. */
int plan_memory_check(Module *m, int scale);

#endif
