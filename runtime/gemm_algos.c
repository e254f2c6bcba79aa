/* gemm_algos.c — the file of chosen GEMM algorithms (gemm_algos.h). */
#include "gemm_algos.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"
#include "shardrt.h"

#define HEADER "# shardc GEMM algorithms (train --gemm-algos)"

void rt_gemm_table_free(RtGemmTable *t) {
  free(t->c);
  t->c = NULL;
  t->n = t->cap = 0;
}

/* Out of memory for a table: the run cannot go on. */
static void *table_alloc(void *old, int n) {
  void *p = realloc(old, (size_t)(n ? n : 1) * sizeof(RtGemmChoice));
  if (!p) {
    fprintf(stderr, "train: out of memory for the GEMM algorithm table\n");
    exit(1);
  }
  return p;
}

void rt_gemm_table_room(RtGemmTable *t, int n) {
  t->c = table_alloc(t->c, n);
  t->n = t->cap = n;
}

const RtGemmChoice *rt_gemm_table_find(const RtGemmTable *t, const int32_t *key) {
  for (int i = 0; i < t->n; i++)
    if (!memcmp(t->c[i].key, key, sizeof t->c[i].key))
      return &t->c[i];
  return NULL;
}

int rt_gemm_table_add(RtGemmTable *t, const RtGemmChoice *c) {
  if (rt_gemm_table_find(t, c->key))
    return 0;
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 32;
    t->c = table_alloc(t->c, t->cap);
  }
  t->c[t->n++] = *c;
  return 1;
}

void rt_gemm_table_agree(RtGemmTable *out, const RtGemmTable *all) {
  out->n = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < all->n; i++)
      if ((all->c[i].source != RT_GEMM_FIRST) == (pass == 0))
        rt_gemm_table_add(out, &all->c[i]);
}

/* The device name as written: quotes and line ends would break the line. */
static void clean_name(char *dst, size_t cap, const char *src) {
  size_t i = 0;
  for (; src && src[i] && i + 1 < cap; i++)
    dst[i] = src[i] == '"' || src[i] == '\n' || src[i] == '\r' ? '\'' : src[i];
  dst[i] = 0;
}

/* One "gemm ..." line (without its newline) into c; 0 on success. */
static int parse_gemm(const char *s, RtGemmChoice *c) {
  memset(c, 0, sizeof *c);
  if (strncmp(s, "gemm ", 5))
    return -1;
  s += 5;
  char *end;
  for (int i = 0; i < RT_GEMM_KEY_INTS; i++) {
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v < INT32_MIN || v > INT32_MAX)
      return -1;
    c->key[i] = (int32_t)v;
    s = end;
  }
  while (*s == ' ')
    s++;
  if (strncmp(s, "algo ", 5))
    return -1;
  s += 5;
  for (int i = 0; i < RT_GEMM_ALGO_WORDS; i++) {
    while (*s == ' ')
      s++;
    if (*s == '-' || *s == '+')
      return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (end == s || errno || end - s > 16)
      return -1;
    c->algo[i] = (uint64_t)v;
    s = end;
  }
  float ms, first;
  int cands, used = 0;
  if (sscanf(s, " ms %f first %f cands %d%n", &ms, &first, &cands, &used) != 3 || s[used] ||
      !(ms > 0) || !(first > 0) || cands < 1)
    return -1;
  c->ms = ms;
  c->ms_first = first;
  c->cands = cands;
  c->source = RT_GEMM_FILE;
  return 0;
}

int rt_gemm_table_read(RtGemmTable *t, const char *path, const char *device, long lib,
                       int *stale, char *why) {
  t->n = 0;
  *stale = 0;
  why[0] = 0;
  struct stat st;
  int fd = rt_open_regular(path, &st);
  if (fd == -1 && errno == ENOENT)
    return RT_OK;
  if (fd == -1)
    return rt_errorf(RT_ERR_IO, "%s: cannot read the GEMM algorithms: %s", path, strerror(errno));
  if (fd == -2)
    return rt_errorf(RT_ERR_IO, "%s: cannot read the GEMM algorithms: not a regular file", path);
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return rt_errorf(RT_ERR_IO, "%s: cannot read the GEMM algorithms: %s", path, strerror(errno));
  }
  char line[1024], want[256];
  clean_name(want, sizeof want, device);
  int lineno = 0, rc = RT_OK;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t len = strlen(line);
    int whole = len > 0 && line[len - 1] == '\n';
    if (whole)
      line[--len] = 0;
    if (lineno == 1) {
      if (strncmp(line, HEADER, strlen(HEADER))) {
        rc = rt_errorf(RT_ERR_FORMAT,
                       "%s is not a shardc GEMM algorithm file (its first line is not \"%s...\"); "
                       "remove it or name another file with --gemm-algos",
                       path, HEADER);
        break;
      }
      continue;
    }
    if (!whole && !feof(f)) {
      snprintf(why, RT_GEMM_WHY_BYTES, "line %d is longer than %zu bytes", lineno, sizeof line - 2);
      *stale = 1;
      break;
    }
    if (lineno == 2) {
      char name[256];
      long v = -1;
      int used = 0;
      if (sscanf(line, "device \"%255[^\"]\" cublaslt %ld%n", name, &v, &used) != 2 ||
          line[used]) {
        snprintf(why, RT_GEMM_WHY_BYTES, "line 2 is not 'device \"NAME\" cublaslt VERSION'");
        *stale = 1;
        break;
      }
      if (strcmp(name, want) || v != lib) {
        snprintf(why, RT_GEMM_WHY_BYTES, "it was timed on %.80s with cuBLASLt %ld", name, v);
        *stale = 1;
        break;
      }
      continue;
    }
    if (!line[0] || line[0] == '#')
      continue;
    RtGemmChoice c;
    if (parse_gemm(line, &c)) {
      snprintf(why, RT_GEMM_WHY_BYTES, "line %d is not 'gemm <16 numbers> algo <8 hex words> ms T first T "
                               "cands N'", lineno);
      *stale = 1;
      break;
    }
    rt_gemm_table_add(t, &c);
  }
  if (rc == RT_OK && !*stale && lineno == 0) { /* nothing to lose by rewriting it */
    snprintf(why, RT_GEMM_WHY_BYTES, "it is empty");
    *stale = 1;
  } else if (rc == RT_OK && !*stale && lineno == 1) {
    snprintf(why, RT_GEMM_WHY_BYTES, "it has no device line");
    *stale = 1;
  }
  if (rc == RT_OK && ferror(f))
    rc = rt_errorf(RT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
  fclose(f);
  if (rc != RT_OK || *stale)
    t->n = 0;
  return rc;
}

int rt_gemm_table_write(const RtGemmTable *t, const char *path, const char *device, long lib) {
  size_t n = strlen(path) + 32;
  char *tmp = malloc(n);
  if (!tmp)
    return rt_errorf(RT_ERR_NOMEM, "out of memory");
  snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    int rc = rt_errorf(RT_ERR_IO, "%s: cannot write the GEMM algorithms: %s", tmp, strerror(errno));
    free(tmp);
    return rc;
  }
  char name[256];
  clean_name(name, sizeof name, device);
  fprintf(f, "%s: the fastest of cuBLASLt's candidates for each GEMM, timed on the device "
             "below; delete the file to time them again\n", HEADER);
  fprintf(f, "device \"%s\" cublaslt %ld\n", name, lib);
  for (int i = 0; i < t->n; i++) {
    const RtGemmChoice *c = &t->c[i];
    fputs("gemm", f);
    for (int k = 0; k < RT_GEMM_KEY_INTS; k++)
      fprintf(f, " %" PRId32, c->key[k]);
    fputs(" algo", f);
    for (int k = 0; k < RT_GEMM_ALGO_WORDS; k++)
      fprintf(f, " %" PRIx64, c->algo[k]);
    fprintf(f, " ms %.6g first %.6g cands %d\n", c->ms, c->ms_first, (int)c->cands);
  }
  int bad = fflush(f) != 0 || ferror(f);
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path)) {
    int rc = rt_errorf(RT_ERR_IO, "%s: cannot write the GEMM algorithms: %s", path,
                       strerror(errno));
    unlink(tmp);
    free(tmp);
    return rc;
  }
  free(tmp);
  return RT_OK;
}
