/* fuzz_frontend.c — libFuzzer target: any bytes through the lexer, parser,
 * sema, lowering, every pass (the per-rank programs and the deadlock check
 * included), then what `shardc compile` prints from them: the plan report,
 * the cost model's report, and the generated code of both targets (cpu and
 * cuda, after each one's cg_check).  Must never crash, hang or trip a
 * sanitizer; errors are the expected outcome for most inputs. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "cost.h"
#include "passes.h"
#include "sema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *sink(void) {
  static FILE *f;
  if (!f) f = fopen("/dev/null", "w");
  return f;
}

/* What the driver does after the passes, into /dev/null. */
static void printers(Module *m) {
  FILE *out = sink();
  if (!out) return;
  report_plan(out, m, "");
  if (m->train.mesh) {
    HwModel hw;
    cost_hw_from_mesh(&hw, m->train.mesh, m->train.precision);
    cost_report(out, m, &hw, "");
  }
  static const char *const targets[] = {"cpu", "cuda"};
  for (int t = 0; t < 2; t++) {
    CgOptions cgo = {0};
    if (diag_error_count() || cg_check(m, targets[t], &cgo) || diag_error_count()) return;
    if (cg_emit(out, m, targets[t], &cgo)) return;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64 * 1024) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  /* The driver rejects files with NUL bytes before parsing; do the same. */
  if (strlen(text) == size) {
    diag_reset();
    SrcFile *f = src_from_string("/nonexistent/fuzz.shard", text);
    Program *p = ast_parse(f);
    if (p && !diag_error_count()) {
      SemaOptions o = {0};
      Module *m = frontend_run(p, &o);
      if (m && m->graph && !diag_error_count()) {
        int i = 0;
        for (; i < pass_count; i++)
          if (pass_list[i].run(m) || diag_error_count()) break;
        if (i == pass_count) printers(m);
      }
    }
  }
  arena_free_all();
  sx_reset();  /* imported expressions live outside the arena */
  free(text);
  return 0;
}
