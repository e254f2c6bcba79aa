/* passes.h — the pass pipeline.  Each pass is one file with one entry point;
 * main runs them as a plain list (QBE style). */
#ifndef SHARDC_PASSES_H
#define SHARDC_PASSES_H

#include "sema.h"

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
int pass_autodiff(Module *m);
int pass_memplan(Module *m);
int pass_commcheck(Module *m);

/* Human-readable plan summary (--emit=plan, and the header of generated code). */
void report_plan(FILE *out, const Module *m, const char *prefix);
/* Bytes each rank sends per training step under the plan (the runtime's
 * counting convention, runtime/dist_formulas.h); per mesh axis when
 * per_axis (AX_COUNT entries) is given. */
uint64_t plan_comm_bytes(const Module *m, uint64_t *per_axis);
/* "124,439,808" */
void report_commas(char *buf, int cap, int64_t n);

#endif
