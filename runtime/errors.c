/* errors.c — the per-thread last-error message, and opening the files a
 * run reads (rt_open_regular). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

static _Thread_local char rt_errbuf[4096];

const char *rt_last_error(void) { return rt_errbuf; }

void rt_clear_error(void) { rt_errbuf[0] = '\0'; }

void rt_mark_cut(char *buf, size_t cap, int len) {
  static const char mark[] = "…"; /* 3 bytes of UTF-8 */
  if (len < 0 || (size_t)len < cap || cap < sizeof mark)
    return;
  size_t at = cap - sizeof mark;
  while (at > 0 && ((unsigned char)buf[at] & 0xC0) == 0x80) /* not inside a character */
    at--;
  memcpy(buf + at, mark, sizeof mark);
}

int rt_errorf(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(rt_errbuf, sizeof rt_errbuf, fmt, ap);
  va_end(ap);
  rt_mark_cut(rt_errbuf, sizeof rt_errbuf, len);
  return code;
}

int rt_open_regular(const char *path, struct stat *st) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return -1;
  if (fstat(fd, st) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    return -2;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}
