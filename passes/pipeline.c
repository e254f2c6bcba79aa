/* pipeline.c — the list of passes, in order. */
#include "passes.h"

static int pass_lower(Module *m) { return 0; /* done by sema_run; listed for --dump-after */ }

const Pass pass_list[] = {
    {"lower", "AST -> IR: inline layers, lower builtins, infer shapes", pass_lower},
    {"shape", "re-derive and verify every shape and dtype", pass_shape},
    {"shard", "tensor parallelism: sharding specs, local shapes, collectives", pass_shard},
    {"autodiff", "append the backward pass: accumulating gradient ops, seeded with 1/mb", pass_autodiff},
    {"zero", "data-parallel gradient buckets reduced in the backward; ZeRO-1/2/3 shards, ZeRO-3 gathers", pass_zero},
    {"memplan", "liveness and static arena offsets; exact planned peak bytes per rank", pass_memplan},
    {"commcheck", "prove every rank issues matching collectives in a deadlock-free order", pass_commcheck},
};
const int pass_count = sizeof pass_list / sizeof pass_list[0];
