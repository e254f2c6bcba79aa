/* pipeline.c — the list of passes, in order. */
#include "passes.h"

static int pass_lower(Module *m) { return 0; /* done by sema_run; listed for --dump-after */ }
/* After "pipeline", each stage graph goes through these passes on its own. */
static int autodiff_stages(Module *m) { return per_stage(m, pass_autodiff); }
static int zero_stages(Module *m) { return per_stage(m, pass_zero); }

const Pass pass_list[] = {
    {"lower", "AST -> IR: inline layers, lower builtins, infer shapes", pass_lower},
    {"shape", "re-derive and verify every shape and dtype", pass_shape},
    {"shard", "tensor parallelism (1D, and 2D on a q x q grid) and ring sequence parallelism: sharding specs, local shapes, collectives", pass_shard},
    {"pipeline", "cut the forward graph into stages between layers or inside one at an op boundary, balanced by FLOPs or pp=N:a+b+... (pp > 1)", pass_stage},
    {"autodiff", "append the backward pass: accumulating gradient ops, seeded with 1/mb", autodiff_stages},
    {"recompute", "recompute=selective|full: copies of forward nodes before the backward that reads what they make, instead of holding it", pass_recompute},
    {"precision", "precision=bf16|fp16: 16-bit activations and their gradients, fp32 parameters, gradients, optimizer state, statistics and loss; casts where a kernel reads fp32 data", pass_precision},
    {"zero", "data-parallel gradient buckets reduced in the backward; ZeRO-1/2/3 shards, ZeRO-3 gathers", zero_stages},
    {"memplan", "liveness and static arena offsets; exact planned peak bytes per rank", pass_memplan_all},
    {"program", "lower each pipeline rank to its per-rank program: fused instructions over arena offsets, the schedule, the step", pass_program},
    {"commcheck", "prove, on the programs, that every rank issues matching collectives and messages in a deadlock-free order", pass_commcheck},  /* every rank at once */
};
const int pass_count = sizeof pass_list / sizeof pass_list[0];
