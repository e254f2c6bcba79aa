/* test_actmem.c — the activations a GPT layer holds from its forward to
 * its backward, as the memory plan places them, against Korthikanti et al.
 * (2022, ../shared/REFERENCES.md), bytes per layer at 16-bit activations:
 *
 *   no parallelism        s·b·h·(34 + 5·a·s/h)
 *   TP                    s·b·h·(10 + 24/t + 5·a·s/(h·t))
 *   TP + SP               s·b·h·(34/t + 5·a·s/(h·t))
 *   TP + SP + selective   34·s·b·h/t
 *   full recompute        2·s·b·h
 *
 * at e bytes per activation (here fp32, e = 4: every term but the masks
 * scales by e/2), less the terms shardc never holds and plus the few it
 * does, each named below:
 *   - dropout masks (1 byte per element: 2·s·b·h, or /t under SP): drawn
 *     again from their seed in the backward;
 *   - the 5·a·s²·b score terms (QKᵀ, softmax, its dropout mask, the
 *     softmax input of ·V): the fused attention never stores scores, it
 *     recomputes them from its log-sum-exp;
 *   + the log-sum-exp, e·a·s·b (/t under TP);
 *   + the layernorms' statistics, 2 norms x (mean, rstd): e·4·s·b (/t
 *     under SP);
 *   + under SP without recompute, the layernorms' outputs are held
 *     all-gathered, as the matmuls read them: e·2·s·b·h·(1 − 1/t)
 *     (selective gathers them again in the backward, as Korthikanti's SP).
 * shardc's selective also drops both layernorms' outputs and their
 * statistics and the GELU's output (12·s·b·h/t of Korthikanti's 34/t), and
 * its full recompute holds exactly Korthikanti's layer input (/t under SP).
 * Both at fp32 (e = 4) and at bf16 (e = 2: precision = bf16, the cuda
 * target's), where the statistics (log-sum-exp, mean, rstd) stay fp32,
 * 4 bytes each, a term the formulas leave out. */
#include <string.h>

#include "passes.h"
#include "sema.h"
#include "test.h"
#include "compile.h"

/* Bytes of the values a layer's forward writes that stay live into the
 * backward (their storage: views count once, as their root). */
static double held(const Graph *g, const char *layer) {
  double b = 0;
  for (int i = 0; i < g->values.len; i++) {
    const Value *v = g->values.data[i];
    if (v->alias || v->persistent || v->role == ROLE_PARAM || !v->def || v->def->remat) continue;
    if (!(v->live_start >= 0 && v->live_start < g->nfwd && v->live_end >= g->nfwd)) continue;
    char buf[64];
    if (!strcmp(stage_layer_of(v->def, buf, sizeof buf), layer))
      b += (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype);
  }
  return b;
}

/* samples/gpt.shard with `precision = bf16` (the cuda target's 16-bit
 * activations), written beside the test. */
static const char *bf16_copy(void) {
  static const char *path = "actmem-gpt-bf16.shard";
  FILE *in = fopen("../samples/gpt.shard", "r"), *out = fopen(path, "w");
  ASSERT(1, in && out);
  char line[512];
  while (in && out && fgets(line, sizeof line, in))
    fputs(strstr(line, "precision = fp32") ? "  precision = bf16\n" : line, out);
  if (in) fclose(in);
  if (out) fclose(out);
  return path;
}

int main(void) {
  diag_set_quiet_warnings(1);
  /* samples/gpt.shard: seq 64, microbatch 4, d 128, 4 heads; tp = 2 */
  const double s = 64, b = 4, h = 128, a = 4, t = 2;
  const double sbh = s * b * h, scores = 5 * a * s * s * b;
  const char *bf16 = bf16_copy();
  /* e: bytes of an activation (fp32, then bf16); f: of a statistic (the
   * log-sum-exp and the norms' mean and rstd stay fp32 under bf16:
   * passes/precision.c) */
  for (int e = 4, f = 4; e >= 2; e -= 2) {
    struct {
      const char *strategy, *mesh;
      double korthikanti, expect;
    } c[] = {
        {"dp=1", "1", sbh * (34 + 5 * a * s / h), 0},
        {"tp=2", "2", sbh * (10 + 24 / t + 5 * a * s / (h * t)), 0},
        {"tp=2,sp=megatron", "2", sbh * (34 / t + 5 * a * s / (h * t)), 0},
        {"tp=2,sp=megatron,recompute=selective", "2", 34 * sbh / t, 0},
        {"dp=1,recompute=full", "1", 2 * sbh, 0},
        {"tp=2,sp=megatron,recompute=full", "2", 2 * sbh, 0},
    };
    c[0].expect = e / 2.0 * (c[0].korthikanti - 2 * sbh - scores) + f * (a * s * b + 4 * s * b);
    c[1].expect = e / 2.0 * (c[1].korthikanti - 2 * sbh - scores / t) + f * (a * s * b / t + 4 * s * b);
    c[2].expect = e / 2.0 * (c[2].korthikanti - 2 * sbh / t - scores / t) +
                  f * (a * s * b / t + 4 * s * b / t) + e * 2 * sbh * (1 - 1 / t);
    c[3].expect = e / 2.0 * (c[3].korthikanti - 2 * sbh / t - 12 * sbh / t) + f * (a * s * b / t);
    c[4].expect = e / 2.0 * c[4].korthikanti;
    c[5].expect = e / 2.0 * c[5].korthikanti / t;
    for (int i = 0; i < (int)(sizeof c / sizeof c[0]); i++) {
      Module *m = test_compile(e == 4 ? "../samples/gpt.shard" : bf16, c[i].mesh, c[i].strategy);
      ASSERT(1, m != NULL);
      if (!m) continue;
      /* a middle layer: its input comes from a layer, its output goes to one */
      double got = held(m->graph, "blocks.1");
      if (got != c[i].expect)
        fprintf(stderr, "%s at %d-byte activations: holds %.0f bytes per layer, expected %.0f "
                        "(Korthikanti %.0f at 16 bits)\n",
                c[i].strategy, e, got, c[i].expect, c[i].korthikanti);
      ASSERT_NEAR(c[i].expect, got, 0);
    }
  }
  remove(bf16);
  TEST_MAIN_END();
}
