/* diag.c — arena allocation, source files and diagnostics. */
#include "diag.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- arena ---- */

typedef struct Chunk {
  struct Chunk *next;
  size_t used, cap;
  max_align_t data[];
} Chunk;

static Chunk *chunks;
static size_t total_bytes;

void *arena_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!chunks || chunks->used + n > chunks->cap) {
    size_t cap = n > (1u << 20) ? n : (1u << 20);
    Chunk *c = malloc(sizeof(Chunk) + cap);
    if (!c) {
      fprintf(stderr, "shardc: fatal: out of memory (%zu bytes)\n", n);
      exit(2);
    }
    c->next = chunks;
    c->used = 0;
    c->cap = cap;
    chunks = c;
  }
  void *p = (char *)chunks->data + chunks->used;
  chunks->used += n;
  total_bytes += n;
  memset(p, 0, n);
  return p;
}

char *arena_strndup(const char *s, size_t n) {
  char *p = arena_alloc(n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(const char *s) { return arena_strndup(s, strlen(s)); }

char *arena_printf(const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = arena_alloc((size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}

void arena_free_all(void) {
  while (chunks) {
    Chunk *n = chunks->next;
    free(chunks);
    chunks = n;
  }
  total_bytes = 0;
}

size_t arena_bytes(void) { return total_bytes; }

void *arena_grow(void *data, int n, int *cap, size_t es, int first) {
  if (n == *cap) {
    int c = *cap ? 2 * *cap : first;
    void *d = arena_alloc(es * (size_t)c);
    if (n) memcpy(d, data, es * (size_t)n);
    data = d;
    *cap = c;
  }
  memset((char *)data + es * (size_t)n, 0, es);
  return data;
}

void vec_push(PtrVec *v, void *p) {
  v->data = arena_grow(v->data, v->len, &v->cap, sizeof(void *), 8);
  v->data[v->len++] = p;
}

static unsigned long str_hash(const char *s) {
  unsigned long h = 1469598103934665603ul;  /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ul;
  return h;
}

void *strmap_get(const StrMap *m, const char *key) {
  if (!m->cap) return NULL;
  for (unsigned long i = str_hash(key) & (unsigned long)(m->cap - 1);; i = (i + 1) & (unsigned long)(m->cap - 1)) {
    if (!m->keys[i]) return NULL;
    if (!strcmp(m->keys[i], key)) return m->vals[i];
  }
}

void strmap_put(StrMap *m, const char *key, void *val) {
  if (2 * (m->len + 1) > m->cap) {
    StrMap n = {0};
    n.cap = m->cap ? m->cap * 2 : 64;
    n.keys = arena_alloc(sizeof(char *) * (size_t)n.cap);
    n.vals = arena_alloc(sizeof(void *) * (size_t)n.cap);
    for (int i = 0; i < m->cap; i++)
      if (m->keys[i]) strmap_put(&n, m->keys[i], m->vals[i]);
    *m = n;
  }
  unsigned long i = str_hash(key) & (unsigned long)(m->cap - 1);
  while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & (unsigned long)(m->cap - 1);
  if (!m->keys[i]) {
    m->keys[i] = key;
    m->len++;
  }
  m->vals[i] = val;
}

/* ---- source files ---- */

static const char *src_why;

const char *src_error(void) { return src_why ? src_why : "unknown error"; }

static const char *file_kind(mode_t m) {
  return S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
       : S_ISFIFO(m) ? "a pipe" : S_ISSOCK(m) ? "a socket" : "a special file";
}

/* The refusal for a file of this type and size, or NULL. */
static const char *refuse_stat(const struct stat *st) {
  if (S_ISDIR(st->st_mode)) return strerror(EISDIR);
  if (!S_ISREG(st->st_mode))
    return arena_printf("not a regular file (%s)", file_kind(st->st_mode));
  if ((uintmax_t)st->st_size > SRC_MAX_BYTES)
    return arena_printf("too large: %jd bytes (limit is " SRC_MAX_DESC ")", (intmax_t)st->st_size);
  return NULL;
}

const char *src_refusal(const char *path) {
  struct stat st;
  if (stat(path, &st)) return strerror(errno);
  return refuse_stat(&st);
}

/* Reads at most SRC_MAX_BYTES of a regular file, checked before the first
 * read (a FIFO is never opened: opening one would wait for a writer) and
 * again on the open file (it may have been replaced or may grow). */
SrcFile *src_load(const char *path) {
  if ((src_why = src_refusal(path))) return NULL;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    src_why = strerror(errno);
    return NULL;
  }
  if (fstat(fd, &st) || (src_why = refuse_stat(&st))) {
    if (!src_why) src_why = strerror(errno);
    close(fd);
    return NULL;
  }
  size_t cap = (size_t)st.st_size + 1, len = 0;
  char *buf = arena_alloc(cap + 1);
  for (;;) {
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      src_why = strerror(errno);
      close(fd);
      return NULL;
    }
    if (n == 0) break;
    len += (size_t)n;
    if (len == cap) {
      /* it grew since fstat */
      if (cap > SRC_MAX_BYTES) {
        src_why = arena_printf("too large: more than %u bytes (limit is " SRC_MAX_DESC ")",
                               SRC_MAX_BYTES);
        close(fd);
        return NULL;
      }
      size_t ncap = 2 * cap < SRC_MAX_BYTES + 1 ? 2 * cap : SRC_MAX_BYTES + 1;
      char *nb = arena_alloc(ncap + 1);
      memcpy(nb, buf, len);
      buf = nb;
      cap = ncap;
    }
  }
  close(fd);
  buf[len] = 0;
  SrcFile *sf = arena_alloc(sizeof *sf);
  sf->path = arena_strdup(path);
  sf->text = buf;
  sf->len = len;
  return sf;
}

SrcFile *src_from_string(const char *name, const char *text) {
  SrcFile *sf = arena_alloc(sizeof *sf);
  sf->path = arena_strdup(name);
  sf->len = strlen(text);
  sf->text = arena_strndup(text, sf->len);
  return sf;
}

/* ---- diagnostics ---- */

static int n_errors, n_warnings, quiet_warnings;

int diag_error_count(void) { return n_errors; }
int diag_warning_count(void) { return n_warnings; }
void diag_reset(void) { n_errors = n_warnings = 0; }
int diag_too_many(void) { return n_errors >= DIAG_MAX_ERRORS; }
int diag_set_quiet_warnings(int quiet) {
  int was = quiet_warnings;
  quiet_warnings = quiet;
  return was;
}

int diag_utf8_decode(const unsigned char *s, size_t n, unsigned *cp) {
  int len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
          : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  if (!len || (size_t)len > n) return 0;
  unsigned c = s[0] & (0x7fu >> len);
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    c = c << 6 | (s[i] & 0x3fu);
  }
  /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
  if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
      (c >= 0xd800 && c < 0xe000))
    return 0;
  if (cp) *cp = c;
  return len;
}

/* Lines wider than this are shown as a window around the caret. */
enum { SRC_WIDTH = 100, SRC_BEFORE = 40 };

/* Print the source line `line` of `text` and a caret line under the bytes
 * [col, col+len).  Each printed character is one column: tabs become
 * spaces, control bytes and invalid UTF-8 '?', a UTF-8 character stays
 * itself; so the caret lines up on a terminal. */
static void print_source_line(const char *text, size_t tlen, int line, int col, int len) {
  const char *p = text, *end = text + tlen;
  for (int l = 1; l < line && p < end; p++)
    if (*p == '\n') l++;
  if (p >= end && line > 1) return;
  const char *e = p;
  while (e < end && *e != '\n') e++;
  if (e > p && e[-1] == '\r') e--;
  size_t nbytes = (size_t)(e - p);
  /* start[i]: byte offset of display column i; nchars columns in all. */
  size_t *start = malloc(sizeof(size_t) * (nbytes + 1));
  if (!start) return;
  size_t nchars = 0;
  for (size_t i = 0; i < nbytes;) {
    start[nchars++] = i;
    unsigned char c = (unsigned char)p[i];
    int k = c >= 0x80 ? diag_utf8_decode((const unsigned char *)p + i, nbytes - i, NULL) : 1;
    i += k ? (size_t)k : 1;
  }
  start[nchars] = nbytes;
  /* Display columns of the caret and of the end of the span. */
  size_t cbyte = (size_t)(col - 1), ebyte = cbyte + (size_t)(len > 1 ? len : 1);
  size_t ccol = 0, ecol;
  while (ccol < nchars && start[ccol] < cbyte) ccol++;
  if (cbyte > nbytes) ccol = nchars + (cbyte - nbytes);   /* past the end of the line */
  ecol = ccol;
  while (ecol < nchars && start[ecol] < ebyte) ecol++;
  if (ecol == ccol) ecol = ccol + 1;
  size_t from = 0, to = nchars;
  if (nchars > SRC_WIDTH) {
    from = ccol > SRC_BEFORE ? ccol - SRC_BEFORE : 0;
    if (from + SRC_WIDTH > nchars) from = nchars > SRC_WIDTH ? nchars - SRC_WIDTH : 0;
    if (ccol < from) from = ccol;
    to = from + SRC_WIDTH < nchars ? from + SRC_WIDTH : nchars;
  }
  const char *lead = from > 0 ? "..." : "";
  fputc(' ', stderr);
  fputs(lead, stderr);
  for (size_t i = from; i < to; i++) {
    const unsigned char *q = (const unsigned char *)p + start[i];
    size_t k = start[i + 1] - start[i];
    if (k > 1) fwrite(q, 1, k, stderr);
    else fputc(*q == '\t' ? ' ' : (*q < 32 || *q >= 127) ? '?' : *q, stderr);
  }
  if (to < nchars) fputs("...", stderr);
  fputc('\n', stderr);
  fputc(' ', stderr);
  for (size_t i = 0; i < strlen(lead) + (ccol - from); i++) fputc(' ', stderr);
  fputc('^', stderr);
  size_t stop = ecol < to ? ecol : to;
  for (size_t i = ccol + 1; i < stop; i++) fputc('~', stderr);
  fputc('\n', stderr);
  free(start);
}

/* diag_capture: the first error's text, nothing printed */
static char *cap_buf;
static size_t cap_len;

void diag_capture(char *buf, size_t cap) {
  cap_buf = cap ? buf : NULL;
  cap_len = cap;
  if (cap_buf) cap_buf[0] = 0;
}

static bool captured(const char *kind, const char *fmt, va_list ap) {
  if (!cap_buf) return false;
  if (!strcmp(kind, "error") && !cap_buf[0]) {
    va_list aq;
    va_copy(aq, ap);
    vsnprintf(cap_buf, cap_len, fmt, aq);
    va_end(aq);
  }
  return true;
}

static void vreport(const char *kind, SrcLoc loc, const char *fmt, va_list ap) {
  if (captured(kind, fmt, ap)) return;
  if (loc.file)
    fprintf(stderr, "%s:%d:%d: %s: ", loc.file->path, loc.line, loc.col, kind);
  else
    fprintf(stderr, "shardc: %s: ", kind);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  if (loc.file && loc.line > 0)
    print_source_line(loc.file->text, loc.file->len, loc.line, loc.col > 0 ? loc.col : 1,
                      loc.len);
}

void diag_verror(SrcLoc loc, const char *fmt, va_list ap) {
  if (n_errors >= DIAG_MAX_ERRORS) {
    n_errors++;
    return;
  }
  n_errors++;
  vreport("error", loc, fmt, ap);
  if (n_errors == DIAG_MAX_ERRORS)
    fprintf(stderr, "shardc: error: too many errors (limit is %d), stopping\n",
            DIAG_MAX_ERRORS);
}

void diag_error(SrcLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(loc, fmt, ap);
  va_end(ap);
}

void diag_warning(SrcLoc loc, const char *fmt, ...) {
  n_warnings++;
  if (quiet_warnings) return;
  va_list ap;
  va_start(ap, fmt);
  vreport("warning", loc, fmt, ap);
  va_end(ap);
}

void diag_note(SrcLoc loc, const char *fmt, ...) {
  if (n_errors > DIAG_MAX_ERRORS) return;
  va_list ap;
  va_start(ap, fmt);
  vreport("note", loc, fmt, ap);
  va_end(ap);
}

void diag_fatal_noloc(const char *fmt, ...) {
  n_errors++;
  va_list ap;
  va_start(ap, fmt);
  if (captured("error", fmt, ap)) {
    va_end(ap);
    return;
  }
  fprintf(stderr, "shardc: error: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void diag_error_at_path(const char *path, int line, int col, const char *fmt, ...) {
  n_errors++;
  va_list ap;
  va_start(ap, fmt);
  if (captured("error", fmt, ap)) {
    va_end(ap);
    return;
  }
  fprintf(stderr, "%s:%d:%d: error: ", path, line, col);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  SrcFile *sf = src_load(path);
  if (sf && line > 0) print_source_line(sf->text, sf->len, line, col > 0 ? col : 1, 1);
}
