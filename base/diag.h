/* diag.h — diagnostics and arena allocation shared by every layer of shardc.
 *
 * Diagnostics print `file:line:col: error: message`, the source line and a
 * caret under the span, in the style of gcc/clang.  Passes never print or
 * exit on their own: they call diag_error() and return failure.
 */
#ifndef SHARDC_DIAG_H
#define SHARDC_DIAG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* A source file loaded once and kept for caret printing. */
typedef struct SrcFile {
  const char *path;   /* as given on the command line */
  const char *text;   /* NUL-terminated contents */
  size_t len;
} SrcFile;

/* A span in a source file: 1-based line and column, `len` columns wide. */
typedef struct SrcLoc {
  const SrcFile *file;
  int line, col;
  int len;
} SrcLoc;

/* ---- arena (compiler memory is allocated and never freed) ---- */
void *arena_alloc(size_t n);              /* zeroed; aborts on OOM */
char *arena_strdup(const char *s);
char *arena_strndup(const char *s, size_t n);
char *arena_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void arena_free_all(void);
size_t arena_bytes(void);                 /* bytes handed out so far */
/* An arena array of n elements of es bytes (room for *cap) with room for
 * one more: returns data, or a copy twice as large (first elements at
 * least), and zeroes element n.  `a = arena_grow(a, n, &cap, sizeof *a, 64);
 * T *x = &a[n++];` */
void *arena_grow(void *data, int n, int *cap, size_t es, int first);

/* Growable array of pointers (arena-backed). */
typedef struct PtrVec {
  void **data;
  int len, cap;
} PtrVec;
void vec_push(PtrVec *v, void *p);

/* String-keyed hash map (arena-backed, open addressing, never shrinks). */
typedef struct StrMap {
  const char **keys;
  void **vals;
  int len, cap;
} StrMap;
void *strmap_get(const StrMap *m, const char *key);
void strmap_put(StrMap *m, const char *key, void *val);   /* replaces */

/* ---- source files ---- */
/* The largest .shard file or imported C header shardc reads.  Models are a
 * few kilobytes; the limit refuses /dev/zero or a data file named by mistake
 * before any of it is read (docs/language.md). */
#define SRC_MAX_BYTES (4u << 20)
#define SRC_MAX_DESC "4 MiB"
/* Why path cannot be read as a source file, without reading it: "No such
 * file or directory" (strerror), "Is a directory", "not a regular file (a
 * character device)", "too large: N bytes (limit is 4 MiB)"; NULL when it
 * can be. */
const char *src_refusal(const char *path);
/* NULL on failure; src_error() then says why (as src_refusal). */
SrcFile *src_load(const char *path);
const char *src_error(void);
SrcFile *src_from_string(const char *name, const char *text);

/* ---- diagnostics ---- */
/* Length of the UTF-8 sequence at s (at most n bytes) and its code point in
 * *cp (may be NULL); 0 when the bytes are not valid UTF-8. */
int diag_utf8_decode(const unsigned char *s, size_t n, unsigned *cp);
void diag_error(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_warning(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_note(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error with no source position, e.g. "shardc: error: cannot open x". */
void diag_fatal_noloc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void diag_verror(SrcLoc loc, const char *fmt, va_list ap);
/* An error located in a file that is not a SrcFile we own (e.g. a C header
 * seen through libclang); prints the line from disk when it can. */
void diag_error_at_path(const char *path, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int diag_error_count(void);
int diag_warning_count(void);
void diag_reset(void);
/* Stop after this many errors (avoids floods on garbage input). */
enum { DIAG_MAX_ERRORS = 50 };
int diag_too_many(void);
/* Until diag_capture(NULL, 0): diagnostics are counted but not printed, and
 * the first error's message (without its position) is kept in buf (cap
 * bytes; "" while there is none).  For trial compiles (explore's plans). */
void diag_capture(char *buf, size_t cap);
/* Suppress warnings (e.g. for generated inputs). */
int diag_set_quiet_warnings(int quiet);   /* returns the previous setting */

#endif
