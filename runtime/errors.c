/* errors.c — the per-thread last-error message. */
#include <stdarg.h>
#include <string.h>

#include "rt_internal.h"

static _Thread_local char rt_errbuf[4096];

const char *rt_last_error(void) { return rt_errbuf; }

void rt_clear_error(void) { rt_errbuf[0] = '\0'; }

int rt_errorf(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rt_errbuf, sizeof rt_errbuf, fmt, ap);
  va_end(ap);
  return code;
}
