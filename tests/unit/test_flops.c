/* test_flops.c — the plan's FLOPs per step (passes/report.c plan_flops)
 * against the closed form for decoder-only transformers (Kaplan et al.,
 * Narayanan et al.):
 *
 *   6 N tokens + 12 L d T tokens   per step, tokens = batch x seq,
 *
 * N the parameters that multiply (the GPT's tied embedding is its head; its
 * positional table and LLaMA's untied input embedding are lookups), L
 * layers, d the width, T the sequence (attention's QKᵀ and PV counted whole,
 * causal or not).  The IR also counts the elementwise ops the formula
 * leaves out (norms, activations, residuals, the loss): about 1% here.
 *
 * Model FLOPs are the same under every strategy; the hardware count (every
 * node every rank runs) is close to them without recompute.  Before, plans
 * without pipeline stages printed 3x the graph's forward-and-backward
 * count as "per step". */
#include "passes.h"
#include "sema.h"
#include "test.h"
#include "compile.h"

static Module *compile(const char *path, const char *strategy) {
  return test_compile(path, strategy ? "4" : NULL, strategy);
}

/* lookup: parameters read by a gather only (no FLOPs per token). */
static void check(const char *path, int layers, int d, int64_t lookup, const char *const *strategies,
                  int n) {
  double model0 = 0, N = 0;
  for (int i = 0; i < n; i++) {
    Module *m = compile(path, strategies[i]);
    ASSERT(1, m != NULL);
    if (!m) continue;
    /* (the sample's own plan, strategies[0], holds whole parameters) */
    if (i == 0) N = (double)(ir_param_count(m->nstages > 1 ? m->whole : m->graph) - lookup);
    double tokens = (double)m->train.batch * (double)m->train.seq, T = (double)m->train.seq;
    double closed = 6 * N * tokens + 12.0 * layers * d * T * tokens;
    PlanFlops f;
    plan_flops(m, &f);
    if (fabs(f.model / closed - 1) > 0.02 || fabs(f.hw / closed - 1) > 0.03)
      fprintf(stderr, "%s %s: model %.6g, hardware %.6g, closed form %.6g\n", path,
              strategies[i] ? strategies[i] : "(own)", f.model, f.hw, closed);
    ASSERT_NEAR(1.0, f.model / closed, 0.02);
    /* (tp replicates the norms and the loss on every tp rank: +2.3% at tp=4) */
    ASSERT_NEAR(1.0, f.hw / closed, 0.03);
    /* the busiest rank runs at least its share */
    ASSERT(1, f.hw_rank * m->train.mesh->ndev >= f.hw * (1 - 1e-12));
    ASSERT_NEAR(ir_device_lookup("cpu")->flops_fp32, f.peak, 0);   /* cpu, fp32 (ir/mesh.c) */
    if (i == 0) model0 = f.model;
    ASSERT_NEAR(1.0, f.model / model0, 1e-12);
  }
}

int main(void) {
  diag_set_quiet_warnings(1);
  const char *gpt[] = {NULL,  "dp=4",   "tp=4",     "tp=2,sp=megatron,dp=2",
                       "pp=4", "pp=2,dp=2,schedule=interleaved:2", "sp=ring:4",
                       "sp=ring:2,dp=2", "tp2d=2x2", "dp=4,zero=3"};
  /* gpt.shard: d 128, 4 layers, tied embedding; the positional table 64 x 128 */
  check("../samples/gpt.shard", 4, 128, 64 * 128, gpt, (int)(sizeof gpt / sizeof gpt[0]));
  const char *llama[] = {NULL, "tp=2,sp=megatron,dp=2", "tp=2,dp=2", "pp=2,dp=2", "sp=ring:2,dp=2", "tp2d=2x2"};
  /* llama.shard: d 128, 4 layers, the input embedding 256 x 128 */
  check("../samples/llama.shard", 4, 128, 256 * 128, llama, (int)(sizeof llama / sizeof llama[0]));
  TEST_MAIN_END();
}
