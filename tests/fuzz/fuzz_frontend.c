/* fuzz_frontend.c — libFuzzer target: any bytes through the lexer, parser,
 * sema, lowering and the shape verifier.  Must never crash, hang or trip a
 * sanitizer; errors are the expected outcome for most inputs. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "sema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
      if (m && !diag_error_count())
        for (int i = 0; i < pass_count; i++)
          if (pass_list[i].run(m)) break;
    }
  }
  arena_free_all();
  sx_reset();  /* imported expressions live outside the arena */
  free(text);
  return 0;
}
