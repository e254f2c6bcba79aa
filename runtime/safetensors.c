/* safetensors.c — checkpoint writer (atomic) and validating reader, with a
 * small strict JSON parser for the header. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

#define RT_ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */
#define RT_JSON_MAX_DEPTH 16

/* ---- dtypes ---- */

static const struct {
  const char *name;
  size_t size;
} rt_dtypes[RT_NDTYPES] = {
    [RT_F64] = {"F64", 8}, [RT_F32] = {"F32", 4},  [RT_F16] = {"F16", 2},
    [RT_BF16] = {"BF16", 2}, [RT_I64] = {"I64", 8}, [RT_I32] = {"I32", 4},
    [RT_I16] = {"I16", 2}, [RT_I8] = {"I8", 1},     [RT_U64] = {"U64", 8},
    [RT_U32] = {"U32", 4}, [RT_U16] = {"U16", 2},   [RT_U8] = {"U8", 1},
    [RT_BOOL] = {"BOOL", 1},
};

const char *rt_dtype_name(RtDtype dt) {
  return (unsigned)dt < RT_NDTYPES ? rt_dtypes[dt].name : "?";
}

size_t rt_dtype_size(RtDtype dt) { return (unsigned)dt < RT_NDTYPES ? rt_dtypes[dt].size : 0; }

int rt_dtype_parse(const char *s, RtDtype *dt) {
  for (int i = 0; i < RT_NDTYPES; i++)
    if (strcmp(s, rt_dtypes[i].name) == 0) {
      *dt = (RtDtype)i;
      return 0;
    }
  return -1;
}

/* Element count of a shape; -1 on overflow. */
static int64_t shape_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || (shape[i] != 0 && n > INT64_MAX / shape[i]))
      return -1;
    n *= shape[i];
  }
  return n;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t len = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "",
                            (long long)shape[i]);
  if (len < cap)
    snprintf(buf + len, cap - len, "]");
}

/* ---- JSON ----
 * Strict RFC 8259 subset sufficient for any safetensors header: objects,
 * arrays, strings (all escapes, \u to UTF-8 with surrogate pairs), numbers
 * (kept as text), true/false/null. Depth-limited; duplicate keys rejected. */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct JVal {
  int type;
  char *str; /* J_STR: the decoded string, J_NUM: the literal */
  int n;
  struct JVal *items; /* J_ARR / J_OBJ values */
  char **keys;        /* J_OBJ keys */
  size_t pos;         /* byte offset in the header, for messages */
} JVal;

typedef struct {
  const char *start, *p, *end;
  int depth;
  char err[200];
} JParser;

static void jfree(JVal *v) {
  free(v->str);
  for (int i = 0; i < v->n; i++) {
    jfree(&v->items[i]);
    if (v->keys)
      free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
}

static int jerr(JParser *jp, const char *msg) {
  if (!jp->err[0])
    snprintf(jp->err, sizeof jp->err, "%s at byte %ld of the header", msg,
             (long)(jp->p - jp->start));
  return -1;
}

static void jws(JParser *jp) {
  while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r'))
    jp->p++;
}

static int jhex4(JParser *jp, unsigned *out) {
  if (jp->end - jp->p < 4)
    return jerr(jp, "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = *jp->p++;
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return jerr(jp, "bad hex digit in \\u escape");
  }
  *out = v;
  return 0;
}

static int jstring(JParser *jp, char **out) {
  if (jp->p >= jp->end || *jp->p != '"')
    return jerr(jp, "expected a string");
  jp->p++;
  size_t cap = 16, len = 0;
  char *s = malloc(cap);
  if (!s)
    return jerr(jp, "out of memory");
  for (;;) {
    if (jp->p >= jp->end) {
      free(s);
      return jerr(jp, "unterminated string");
    }
    if (cap - len < 5) {
      char *t = realloc(s, cap *= 2);
      if (!t) {
        free(s);
        return jerr(jp, "out of memory");
      }
      s = t;
    }
    unsigned char c = (unsigned char)*jp->p;
    if (c == '"') {
      jp->p++;
      break;
    }
    if (c < 0x20) {
      free(s);
      return jerr(jp, "control character in string");
    }
    if (c != '\\') {
      s[len++] = (char)c;
      jp->p++;
      continue;
    }
    jp->p++;
    if (jp->p >= jp->end) {
      free(s);
      return jerr(jp, "unterminated string");
    }
    char e = *jp->p++;
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e && simple) {
      static const char map[] = "\"\\/\b\f\n\r\t";
      s[len++] = map[simple - "\"\\/bfnrt"];
      continue;
    }
    if (e != 'u') {
      free(s);
      jp->p--;
      return jerr(jp, "bad escape in string");
    }
    unsigned cp;
    if (jhex4(jp, &cp)) {
      free(s);
      return -1;
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) { // high surrogate: a low one must follow
      unsigned lo;
      if (jp->end - jp->p < 2 || jp->p[0] != '\\' || jp->p[1] != 'u') {
        free(s);
        return jerr(jp, "unpaired surrogate in \\u escape");
      }
      jp->p += 2;
      if (jhex4(jp, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
        free(s);
        return jerr(jp, "unpaired surrogate in \\u escape");
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      free(s);
      return jerr(jp, "unpaired surrogate in \\u escape");
    }
    if (cp == 0) {
      free(s);
      return jerr(jp, "NUL character in string");
    }
    if (cp < 0x80) {
      s[len++] = (char)cp;
    } else if (cp < 0x800) {
      s[len++] = (char)(0xC0 | (cp >> 6));
      s[len++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s[len++] = (char)(0xE0 | (cp >> 12));
      s[len++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      s[len++] = (char)(0x80 | (cp & 0x3F));
    } else {
      s[len++] = (char)(0xF0 | (cp >> 18));
      s[len++] = (char)(0x80 | ((cp >> 12) & 0x3F));
      s[len++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      s[len++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  s[len] = '\0';
  *out = s;
  return 0;
}

/* A set of names (pointers to strings that outlive it), open addressing:
 * the duplicate checks of a header's keys and of a writer's tensors, one
 * lookup each where a scan of the names so far made a checkpoint of 10^5
 * tensors (Shampoo with small blocks: four per block) take minutes. */
typedef struct NameSet {
  const char **slot;
  size_t cap, n;
} NameSet;

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The slot of name in a table of cap (a power of two) slots: where it is,
 * or the empty one where it would go. */
static size_t nameset_slot(const char *const *slot, size_t cap, const char *name) {
  size_t k = name_hash(name) & (cap - 1);
  while (slot[k] && strcmp(slot[k], name) != 0)
    k = (k + 1) & (cap - 1);
  return k;
}

static int nameset_has(const NameSet *h, const char *name) {
  return h->cap && h->slot[nameset_slot(h->slot, h->cap, name)];
}

/* 1: added, 0: already there, -1: out of memory. */
static int nameset_add(NameSet *h, const char *name) {
  if (2 * (h->n + 1) > h->cap) {
    size_t ncap = h->cap ? 2 * h->cap : 64;
    const char **ns = calloc(ncap, sizeof *ns);
    if (!ns)
      return -1;
    for (size_t i = 0; i < h->cap; i++)
      if (h->slot[i])
        ns[nameset_slot(ns, ncap, h->slot[i])] = h->slot[i];
    free(h->slot);
    h->slot = ns;
    h->cap = ncap;
  }
  size_t k = nameset_slot(h->slot, h->cap, name);
  if (h->slot[k])
    return 0;
  h->slot[k] = name;
  h->n++;
  return 1;
}

static void nameset_free(NameSet *h) {
  free(h->slot);
  memset(h, 0, sizeof *h);
}

static int jvalue(JParser *jp, JVal *v);

static int jpush(JParser *jp, JVal *v, int *cap, char *key) {
  if (v->n == *cap) {
    int ncap = *cap ? *cap * 2 : 4;
    JVal *items = realloc(v->items, (size_t)ncap * sizeof *items);
    if (!items)
      return jerr(jp, "out of memory");
    v->items = items;
    if (v->type == J_OBJ) {
      char **keys = realloc(v->keys, (size_t)ncap * sizeof *keys);
      if (!keys)
        return jerr(jp, "out of memory");
      v->keys = keys;
    }
    *cap = ncap;
  }
  memset(&v->items[v->n], 0, sizeof(JVal));
  if (v->type == J_OBJ)
    v->keys[v->n] = key;
  v->n++;
  return 0;
}

static int jcontainer_(JParser *jp, JVal *v, int is_obj, NameSet *seen);

static int jcontainer(JParser *jp, JVal *v, int is_obj) {
  NameSet seen = {0};
  int rc = jcontainer_(jp, v, is_obj, &seen);
  nameset_free(&seen);
  return rc;
}

static int jcontainer_(JParser *jp, JVal *v, int is_obj, NameSet *seen) {
  if (++jp->depth > RT_JSON_MAX_DEPTH)
    return jerr(jp, "nesting too deep");
  v->type = is_obj ? J_OBJ : J_ARR;
  jp->p++; // '{' or '['
  char close = is_obj ? '}' : ']';
  int cap = 0;
  jws(jp);
  if (jp->p < jp->end && *jp->p == close) {
    jp->p++;
    jp->depth--;
    return 0;
  }
  for (;;) {
    char *key = NULL;
    jws(jp);
    if (is_obj) {
      const char *kpos = jp->p;
      if (jstring(jp, &key))
        return -1;
      int fresh = nameset_add(seen, key);
      if (fresh <= 0) {
        free(key);
        jp->p = kpos;
        return jerr(jp, fresh < 0 ? "out of memory" : "duplicate key");
      }
      jws(jp);
      if (jp->p >= jp->end || *jp->p != ':') {
        free(key);
        return jerr(jp, "expected ':'");
      }
      jp->p++;
      jws(jp);
    }
    if (jpush(jp, v, &cap, key)) {
      free(key);
      return -1;
    }
    if (jvalue(jp, &v->items[v->n - 1]))
      return -1;
    jws(jp);
    if (jp->p < jp->end && *jp->p == ',') {
      jp->p++;
      continue;
    }
    if (jp->p < jp->end && *jp->p == close) {
      jp->p++;
      jp->depth--;
      return 0;
    }
    return jerr(jp, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int jvalue(JParser *jp, JVal *v) {
  jws(jp);
  v->pos = (size_t)(jp->p - jp->start);
  if (jp->p >= jp->end)
    return jerr(jp, "unexpected end of header");
  char c = *jp->p;
  if (c == '{' || c == '[')
    return jcontainer(jp, v, c == '{');
  if (c == '"') {
    v->type = J_STR;
    return jstring(jp, &v->str);
  }
  static const char *const words[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t wl = strlen(words[i]);
    if ((size_t)(jp->end - jp->p) >= wl && memcmp(jp->p, words[i], wl) == 0) {
      v->type = i < 2 ? J_BOOL : J_NULL;
      jp->p += wl;
      return 0;
    }
  }
  // number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  const char *s = jp->p;
  if (jp->p < jp->end && *jp->p == '-')
    jp->p++;
  if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9')
    return jerr(jp, "unexpected character");
  if (*jp->p == '0')
    jp->p++;
  else
    while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
      jp->p++;
  if (jp->p < jp->end && *jp->p == '.') {
    jp->p++;
    if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9')
      return jerr(jp, "bad number");
    while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
      jp->p++;
  }
  if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
    jp->p++;
    if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-'))
      jp->p++;
    if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9')
      return jerr(jp, "bad number");
    while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
      jp->p++;
  }
  v->type = J_NUM;
  v->str = strndup(s, (size_t)(jp->p - s));
  return v->str ? 0 : jerr(jp, "out of memory");
}

/* A JSON number that is a non-negative integer fitting int64. */
static int juint(const JVal *v, int64_t *out) {
  if (v->type != J_NUM || v->str[0] == '-')
    return -1;
  int64_t x = 0;
  for (const char *c = v->str; *c; c++) {
    if (*c < '0' || *c > '9')
      return -1;
    if (x > (INT64_MAX - (*c - '0')) / 10)
      return -1;
    x = x * 10 + (*c - '0');
  }
  *out = x;
  return 0;
}

/* ---- writer ---- */

typedef struct {
  char *name;
  RtDtype dtype;
  int ndim;
  int64_t shape[RT_ST_MAXDIM];
  size_t nbytes;
  const void *data;
} WTensor;

struct RtStWriter {
  WTensor *t;
  int n, cap;
  NameSet names; /* the tensors' (their strdup'd names) */
  char **mkeys, **mvals;
  int nmeta, mcap;
};

RtStWriter *rt_st_writer_new(void) {
  RtStWriter *w = calloc(1, sizeof *w);
  if (!w)
    rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
  return w;
}

void rt_st_writer_free(RtStWriter *w) {
  if (!w)
    return;
  for (int i = 0; i < w->n; i++)
    free(w->t[i].name);
  for (int i = 0; i < w->nmeta; i++) {
    free(w->mkeys[i]);
    free(w->mvals[i]);
  }
  free(w->t);
  nameset_free(&w->names);
  free(w->mkeys);
  free(w->mvals);
  free(w);
}

int rt_st_add(RtStWriter *w, const char *name, RtDtype dtype, int ndim,
              const int64_t *shape, const void *data) {
  if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
    return rt_errorf(RT_ERR_ARG, "safetensors: invalid tensor name '%s'", name ? name : "(null)");
  if ((unsigned)dtype >= RT_NDTYPES)
    return rt_errorf(RT_ERR_ARG, "safetensors: tensor '%s': invalid dtype %d", name, (int)dtype);
  if (ndim < 0 || ndim > RT_ST_MAXDIM)
    return rt_errorf(RT_ERR_ARG, "safetensors: tensor '%s': %d dimensions (limit is %d)", name,
                     ndim, RT_ST_MAXDIM);
  int64_t numel = shape_numel(ndim, shape);
  if (numel < 0 || (uint64_t)numel > SIZE_MAX / rt_dtype_size(dtype))
    return rt_errorf(RT_ERR_ARG, "safetensors: tensor '%s': invalid shape", name);
  size_t nbytes = (size_t)numel * rt_dtype_size(dtype);
  if (nbytes && !data)
    return rt_errorf(RT_ERR_ARG, "safetensors: tensor '%s': no data", name);
  if (nameset_has(&w->names, name))
    return rt_errorf(RT_ERR_ARG, "safetensors: tensor '%s' added twice", name);
  if (w->n == w->cap) {
    int ncap = w->cap ? 2 * w->cap : 16;
    WTensor *t = realloc(w->t, (size_t)ncap * sizeof *t);
    if (!t)
      return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
    w->t = t;
    w->cap = ncap;
  }
  WTensor *t = &w->t[w->n];
  memset(t, 0, sizeof *t);
  if (!(t->name = strdup(name)))
    return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
  if (nameset_add(&w->names, t->name) < 0) {
    free(t->name);
    t->name = NULL;
    return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
  }
  t->dtype = dtype;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++)
    t->shape[i] = shape[i];
  t->nbytes = nbytes;
  t->data = data;
  w->n++;
  return RT_OK;
}

int rt_st_add_meta(RtStWriter *w, const char *key, const char *value) {
  for (int i = 0; i < w->nmeta; i++)
    if (strcmp(w->mkeys[i], key) == 0)
      return rt_errorf(RT_ERR_ARG, "safetensors: metadata key '%s' added twice", key);
  if (w->nmeta == w->mcap) {
    int ncap = w->mcap ? 2 * w->mcap : 8;
    char **k = realloc(w->mkeys, (size_t)ncap * sizeof *k);
    if (!k)
      return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
    w->mkeys = k;
    char **v = realloc(w->mvals, (size_t)ncap * sizeof *v);
    if (!v)
      return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
    w->mvals = v;
    w->mcap = ncap;
  }
  w->mkeys[w->nmeta] = strdup(key);
  w->mvals[w->nmeta] = strdup(value);
  if (!w->mkeys[w->nmeta] || !w->mvals[w->nmeta]) {
    free(w->mkeys[w->nmeta]);
    free(w->mvals[w->nmeta]);
    return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
  }
  w->nmeta++;
  return RT_OK;
}

static void json_put_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\')
      fprintf(f, "\\%c", *c);
    else if (*c < 0x20)
      fprintf(f, "\\u%04x", *c);
    else
      fputc(*c, f);
  }
  fputc('"', f);
}

static int cmp_wtensor(const void *a, const void *b) {
  return strcmp(((const WTensor *)a)->name, ((const WTensor *)b)->name);
}

static int cmp_str_idx(const void *a, const void *b) {
  return strcmp(**(char *const *const *)a, **(char *const *const *)b);
}

/* The header: sorted metadata, then tensors sorted by name, space-padded. */
static int build_header(RtStWriter *w, char **out, size_t *outlen) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
  fputc('{', f);
  int first = 1;
  if (w->nmeta) {
    char ***order = malloc((size_t)w->nmeta * sizeof *order);
    if (!order) {
      fclose(f);
      free(buf);
      return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
    }
    for (int i = 0; i < w->nmeta; i++)
      order[i] = &w->mkeys[i];
    qsort(order, (size_t)w->nmeta, sizeof order[0], cmp_str_idx);
    fputs("\"__metadata__\":{", f);
    for (int i = 0; i < w->nmeta; i++) {
      int idx = (int)(order[i] - w->mkeys);
      if (i)
        fputc(',', f);
      json_put_string(f, w->mkeys[idx]);
      fputc(':', f);
      json_put_string(f, w->mvals[idx]);
    }
    free(order);
    fputc('}', f);
    first = 0;
  }
  size_t off = 0;
  for (int i = 0; i < w->n; i++) {
    WTensor *t = &w->t[i];
    if (!first)
      fputc(',', f);
    first = 0;
    json_put_string(f, t->name);
    fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", rt_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++)
      fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    fprintf(f, "],\"data_offsets\":[%zu,%zu]}", off, off + t->nbytes);
    off += t->nbytes;
  }
  fputc('}', f);
  while (ftell(f) % 8) // align the data section (the reference writer does too)
    fputc(' ', f);
  if (fclose(f) != 0) {
    free(buf);
    return rt_errorf(RT_ERR_NOMEM, "safetensors: out of memory");
  }
  *out = buf;
  *outlen = len;
  return RT_OK;
}

static int fsync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return rt_errorf(RT_ERR_IO, "%s: cannot open directory '%s' to sync it: %s", path, dir,
                     strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) // some filesystems cannot sync dirs
    return rt_errorf(RT_ERR_IO, "%s: fsync of directory '%s' failed: %s", path, dir,
                     strerror(err));
  return RT_OK;
}

int rt_st_save(RtStWriter *w, const char *path) {
  qsort(w->t, (size_t)w->n, sizeof *w->t, cmp_wtensor);
  char *header = NULL;
  size_t hlen = 0;
  int rc = build_header(w, &header, &hlen);
  if (rc)
    return rc;

  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) {
    free(header);
    return rt_errorf(RT_ERR_ARG, "%s: path too long", path);
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    free(header);
    return rt_errorf(RT_ERR_IO, "%s: cannot create temporary file '%s': %s", path, tmp,
                     strerror(errno));
  }
  /* Held until the file is closed: a live writer's temporary file is never
   * taken for a stale one (rt_ckpt_remove_stale), on any machine. */
  (void)flock(fd, LOCK_EX | LOCK_NB);
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    int err = errno;
    close(fd);
    unlink(tmp);
    free(header);
    return rt_errorf(RT_ERR_IO, "%s: cannot write '%s': %s", path, tmp, strerror(err));
  }
  unsigned char lenbuf[8];
  for (int i = 0; i < 8; i++)
    lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  int ok = fwrite(lenbuf, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen;
  for (int i = 0; ok && i < w->n; i++)
    ok = w->t[i].nbytes == 0 || fwrite(w->t[i].data, 1, w->t[i].nbytes, f) == w->t[i].nbytes;
  free(header);
  const char *what = "write";
  int err = errno;
  if (ok && fflush(f) != 0) {
    ok = 0, err = errno, what = "flush";
  } else if (!ok) {
    err = errno;
  }
  if (ok && fsync(fileno(f)) != 0)
    ok = 0, err = errno, what = "fsync";
  if (fclose(f) != 0 && ok)
    ok = 0, err = errno, what = "close";
  if (!ok) {
    unlink(tmp);
    return rt_errorf(RT_ERR_IO, "%s: %s of temporary file '%s' failed: %s%s (the existing file, if any, is unchanged)",
                     path, what, tmp, strerror(err ? err : EIO),
                     err == EFBIG ? " (over the process's file size limit: ulimit -f)" : "");
  }
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    unlink(tmp);
    return rt_errorf(RT_ERR_IO, "%s: not saved: it exists and is not a regular file (a directory, "
                     "FIFO or device), which the save would replace", path);
  }
  if (rename(tmp, path) != 0) {
    err = errno;
    unlink(tmp);
    return rt_errorf(RT_ERR_IO, "%s: cannot rename '%s' over it: %s", path, tmp,
                     strerror(err));
  }
  return fsync_dir_of(path);
}

/* ---- reader ---- */

void rt_st_close(RtStFile *f) {
  if (!f)
    return;
  if (f->map)
    munmap(f->map, f->size);
  for (int i = 0; i < f->ntensors; i++)
    free(f->tensors[i].name);
  for (int i = 0; i < f->nmeta; i++) {
    free(f->meta_keys[i]);
    free(f->meta_vals[i]);
  }
  free(f->tensors);
  free(f->meta_keys);
  free(f->meta_vals);
  free(f->path);
  free(f);
}

typedef struct {
  size_t begin, end;
  int idx;
} Range;

static int cmp_range(const void *a, const void *b) {
  const Range *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return x->idx - y->idx;
}

static int cmp_tensor(const void *a, const void *b) {
  return strcmp(((const RtStTensor *)a)->name, ((const RtStTensor *)b)->name);
}

/* One tensor entry {"dtype":..,"shape":[..],"data_offsets":[b,e]}. */
static int parse_entry(RtStFile *f, const char *name, const JVal *v, RtStTensor *t,
                       size_t *begin, size_t *end) {
  const char *p = f->path;
  if (v->type != J_OBJ)
    return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", p, name);
  const JVal *dt = NULL, *sh = NULL, *off = NULL;
  for (int i = 0; i < v->n; i++) {
    if (strcmp(v->keys[i], "dtype") == 0)
      dt = &v->items[i];
    else if (strcmp(v->keys[i], "shape") == 0)
      sh = &v->items[i];
    else if (strcmp(v->keys[i], "data_offsets") == 0)
      off = &v->items[i];
    else
      return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': unknown field '%s'", p, name,
                       v->keys[i]);
  }
  if (!dt || !sh || !off)
    return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': missing field '%s'", p, name,
                     !dt ? "dtype" : !sh ? "shape" : "data_offsets");
  if (dt->type != J_STR || rt_dtype_parse(dt->str, &t->dtype) != 0)
    return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", p, name,
                     dt->type == J_STR ? dt->str : "(not a string)");
  if (sh->type != J_ARR)
    return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': shape is not an array", p, name);
  if (sh->n > RT_ST_MAXDIM)
    return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': %d dimensions (limit is %d)", p, name,
                     sh->n, RT_ST_MAXDIM);
  t->ndim = sh->n;
  for (int i = 0; i < sh->n; i++)
    if (juint(&sh->items[i], &t->shape[i]))
      return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': shape entry %d is not a non-negative integer",
                       p, name, i);
  int64_t b, e;
  if (off->type != J_ARR || off->n != 2 || juint(&off->items[0], &b) ||
      juint(&off->items[1], &e))
    return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': data_offsets must be two non-negative integers",
                     p, name);
  if (b > e)
    return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end before they begin",
                     p, name, (long long)b, (long long)e);
  int64_t numel = shape_numel(t->ndim, t->shape);
  size_t esize = rt_dtype_size(t->dtype);
  char sbuf[200];
  shape_str(sbuf, sizeof sbuf, t->ndim, t->shape);
  if (numel < 0 || (uint64_t)numel > (uint64_t)INT64_MAX / esize)
    return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': shape %s is too large", p, name, sbuf);
  if ((uint64_t)numel * esize != (uint64_t)(e - b))
    return rt_errorf(RT_ERR_FORMAT,
                     "%s: tensor '%s': shape %s of %s needs %lld bytes but data_offsets [%lld, %lld] hold %lld",
                     p, name, sbuf, rt_dtype_name(t->dtype),
                     (long long)((uint64_t)numel * esize), (long long)b,
                     (long long)e, (long long)(e - b));
  *begin = (size_t)b;
  *end = (size_t)e;
  t->nbytes = (size_t)(e - b);
  return RT_OK;
}

static int parse_header(RtStFile *f, const char *hdr, size_t hlen, size_t data_start) {
  const char *p = f->path;
  JParser jp = {.start = hdr, .p = hdr, .end = hdr + hlen};
  JVal root = {0};
  jws(&jp);
  if (jp.p >= jp.end || *jp.p != '{') {
    jfree(&root);
    return rt_errorf(RT_ERR_FORMAT, "%s: malformed JSON header: expected '{' at byte %ld of the header",
                     p, (long)(jp.p - hdr));
  }
  if (jvalue(&jp, &root) == 0) {
    jws(&jp);
    if (jp.p != jp.end)
      jerr(&jp, "trailing characters after the header object");
  }
  if (jp.err[0]) {
    jfree(&root);
    return rt_errorf(RT_ERR_FORMAT, "%s: malformed JSON header: %s", p, jp.err);
  }

  int rc = RT_OK;
  size_t data_size = f->size - data_start;
  f->tensors = calloc((size_t)root.n + 1, sizeof *f->tensors);
  Range *ranges = calloc((size_t)root.n + 1, sizeof *ranges);
  if (!f->tensors || !ranges) {
    rc = rt_errorf(RT_ERR_NOMEM, "%s: out of memory", p);
    goto done;
  }
  for (int i = 0; i < root.n && !rc; i++) {
    const char *key = root.keys[i];
    const JVal *v = &root.items[i];
    if (strcmp(key, "__metadata__") == 0) {
      if (v->type != J_OBJ) {
        rc = rt_errorf(RT_ERR_FORMAT, "%s: __metadata__ is not an object", p);
        break;
      }
      f->meta_keys = calloc((size_t)v->n + 1, sizeof(char *));
      f->meta_vals = calloc((size_t)v->n + 1, sizeof(char *));
      if (!f->meta_keys || !f->meta_vals) {
        rc = rt_errorf(RT_ERR_NOMEM, "%s: out of memory", p);
        break;
      }
      for (int j = 0; j < v->n; j++) {
        if (v->items[j].type != J_STR) {
          rc = rt_errorf(RT_ERR_FORMAT, "%s: __metadata__ value of '%s' is not a string", p,
                         v->keys[j]);
          break;
        }
        f->meta_keys[j] = strdup(v->keys[j]);
        f->meta_vals[j] = strdup(v->items[j].str);
        f->nmeta++;
        if (!f->meta_keys[j] || !f->meta_vals[j]) {
          rc = rt_errorf(RT_ERR_NOMEM, "%s: out of memory", p);
          break;
        }
      }
      continue;
    }
    RtStTensor *t = &f->tensors[f->ntensors];
    Range *r = &ranges[f->ntensors];
    rc = parse_entry(f, key, v, t, &r->begin, &r->end);
    if (rc)
      break;
    if (!(t->name = strdup(key))) {
      rc = rt_errorf(RT_ERR_NOMEM, "%s: out of memory", p);
      break;
    }
    r->idx = f->ntensors++;
    if (r->end > data_size) {
      rc = rt_errorf(RT_ERR_FORMAT,
                     "%s: tensor '%s': data_offsets [%zu, %zu] out of range: the data section has %zu bytes",
                     p, key, r->begin, r->end, data_size);
      break;
    }
    t->data = f->map + data_start + r->begin;
  }
  if (rc)
    goto done;

  // The byte ranges must tile [0, data_size) exactly: no overlap, no gap.
  qsort(ranges, (size_t)f->ntensors, sizeof *ranges, cmp_range);
  size_t pos = 0;
  const char *prev = NULL;
  for (int i = 0; i < f->ntensors && !rc; i++) {
    Range *r = &ranges[i];
    const char *name = f->tensors[r->idx].name;
    if (r->begin < pos)
      rc = rt_errorf(RT_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap (byte %zu)", p, prev,
                     name, r->begin);
    else if (r->begin > pos)
      rc = rt_errorf(RT_ERR_FORMAT,
                     "%s: data bytes [%zu, %zu) before tensor '%s' belong to no tensor", p,
                     pos, r->begin, name);
    pos = r->end;
    prev = name;
  }
  if (!rc && pos != data_size)
    rc = rt_errorf(RT_ERR_FORMAT,
                   "%s: the data section has %zu bytes but the tensors cover %zu (trailing bytes belong to no tensor)",
                   p, data_size, pos);
  if (!rc)
    qsort(f->tensors, (size_t)f->ntensors, sizeof *f->tensors, cmp_tensor);
done:
  free(ranges);
  jfree(&root);
  return rc;
}

int rt_st_open(RtStFile **out, const char *path) {
  *out = NULL;
  RtStFile *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", path);
  }
  struct stat st;
  int fd = rt_open_regular(path, &st);
  if (fd < 0) {
    int err = errno;
    rt_st_close(f);
    if (fd == -2)
      return rt_errorf(RT_ERR_IO, "%s: not a regular file", path);
    return rt_errorf(RT_ERR_IO, "%s: cannot open: %s", path, strerror(err));
  }
  f->size = (size_t)st.st_size;
  if (f->size < 8) {
    close(fd);
    rt_st_close(f);
    return rt_errorf(RT_ERR_FORMAT,
                     "%s: file too short (%zu bytes) to hold the 8-byte header length", path,
                     (size_t)st.st_size);
  }
  f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (f->map == MAP_FAILED) {
    int err = errno;
    f->map = NULL;
    rt_st_close(f);
    return rt_errorf(RT_ERR_IO, "%s: cannot map: %s", path, strerror(err));
  }
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)f->map[i] << (8 * i);
  if (hlen > f->size - 8) {
    size_t size = f->size;
    rt_st_close(f);
    return rt_errorf(RT_ERR_FORMAT,
                     "%s: header length %llu goes beyond the end of the file (%zu bytes)", path,
                     (unsigned long long)hlen, size);
  }
  if (hlen > RT_ST_MAX_HEADER) {
    rt_st_close(f);
    return rt_errorf(RT_ERR_FORMAT, "%s: header length %llu is over the limit of %u bytes",
                     path, (unsigned long long)hlen, RT_ST_MAX_HEADER);
  }
  int rc = parse_header(f, (const char *)f->map + 8, (size_t)hlen, 8 + (size_t)hlen);
  if (rc) {
    rt_st_close(f);
    return rc;
  }
  *out = f;
  return RT_OK;
}

const RtStTensor *rt_st_find(const RtStFile *f, const char *name) {
  RtStTensor key = {.name = (char *)name};
  return bsearch(&key, f->tensors, (size_t)f->ntensors, sizeof key, cmp_tensor);
}

const char *rt_st_meta(const RtStFile *f, const char *key) {
  for (int i = 0; i < f->nmeta; i++)
    if (strcmp(f->meta_keys[i], key) == 0)
      return f->meta_vals[i];
  return NULL;
}

static int same_shape(int n1, const int64_t *s1, int n2, const int64_t *s2) {
  if (n1 != n2)
    return 0;
  for (int i = 0; i < n1; i++)
    if (s1[i] != s2[i])
      return 0;
  return 1;
}

/* Finds name and checks dtype and shape, with a message naming both. */
static const RtStTensor *find_checked(const RtStFile *f, const char *name, RtDtype dtype,
                                      int ndim, const int64_t *shape) {
  const RtStTensor *t = rt_st_find(f, name);
  if (!t) {
    rt_errorf(RT_ERR_MISMATCH, "%s: tensor '%s' not found", f->path, name);
    return NULL;
  }
  if (t->dtype != dtype) {
    rt_errorf(RT_ERR_MISMATCH, "%s: tensor '%s' has dtype %s, expected %s", f->path, name,
              rt_dtype_name(t->dtype), rt_dtype_name(dtype));
    return NULL;
  }
  if (!same_shape(t->ndim, t->shape, ndim, shape)) {
    char have[200], want[200];
    shape_str(have, sizeof have, t->ndim, t->shape);
    shape_str(want, sizeof want, ndim, shape);
    rt_errorf(RT_ERR_MISMATCH, "%s: tensor '%s' has shape %s, expected %s", f->path, name,
              have, want);
    return NULL;
  }
  return t;
}

int rt_st_read(const RtStFile *f, const char *name, RtDtype dtype, int ndim,
               const int64_t *shape, void *dst) {
  const RtStTensor *t = find_checked(f, name, dtype, ndim, shape);
  if (!t)
    return RT_ERR_MISMATCH;
  if (t->nbytes)
    memcpy(dst, t->data, t->nbytes);
  return RT_OK;
}

int rt_st_read_slice(const RtStFile *f, const char *name, RtDtype dtype, int ndim,
                     const int64_t *shape, int dim, int64_t start, int64_t len, void *dst) {
  const RtStTensor *t = find_checked(f, name, dtype, ndim, shape);
  if (!t)
    return RT_ERR_MISMATCH;
  if (dim < 0 || dim >= ndim || start < 0 || len < 0 || start + len > shape[dim])
    return rt_errorf(RT_ERR_ARG, "%s: tensor '%s': slice [%lld, %lld) of dimension %d is out of range",
                     f->path, name, (long long)start, (long long)(start + len), dim);
  size_t outer = 1, inner = rt_dtype_size(dtype);
  for (int i = 0; i < dim; i++)
    outer *= (size_t)shape[i];
  for (int i = dim + 1; i < ndim; i++)
    inner *= (size_t)shape[i];
  const unsigned char *src = t->data;
  unsigned char *d = dst;
  for (size_t o = 0; o < outer; o++)
    memcpy(d + o * (size_t)len * inner, src + (o * (size_t)shape[dim] + (size_t)start) * inner,
           (size_t)len * inner);
  return RT_OK;
}

/* At most this many names per line of a mismatch message; the rest are counted. */
#define RT_ST_LIST 5

/* "  HEAD: 'a', 'b', 'c', 'd', 'e' and 7 more" */
static void list_line(FILE *m, const char *head, const char *const *names, int n) {
  fprintf(m, "\n  %s: ", head);
  for (int i = 0; i < n && i < RT_ST_LIST; i++)
    fprintf(m, "%s'%s'", i ? ", " : "", names[i]);
  if (n > RT_ST_LIST)
    fprintf(m, " and %d more", n - RT_ST_LIST);
}

int rt_st_check_model(const RtStFile *f, const RtStSpec *specs, int nspecs, int allow_extra,
                      const char *model) {
  const char **missing = calloc((size_t)nspecs + 1, sizeof *missing);
  const char **extra = calloc((size_t)f->ntensors + 1, sizeof *extra);
  char *msg = NULL;
  size_t mlen = 0;
  FILE *m = missing && extra ? open_memstream(&msg, &mlen) : NULL;
  if (!m) {
    free(missing);
    free(extra);
    return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", f->path);
  }
  int nmissing = 0, nextra = 0, nbad = 0;
  for (int i = 0; i < nspecs; i++)
    if (!rt_st_find(f, specs[i].name))
      missing[nmissing++] = specs[i].name;
  if (!allow_extra) {
    NameSet known = {0};
    for (int j = 0; j < nspecs; j++)
      if (nameset_add(&known, specs[j].name) < 0) {
        nameset_free(&known);
        fclose(m);
        free(msg);
        free(missing);
        free(extra);
        return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", f->path);
      }
    for (int i = 0; i < f->ntensors; i++)
      if (!nameset_has(&known, f->tensors[i].name))
        extra[nextra++] = f->tensors[i].name;
    nameset_free(&known);
  }
  fprintf(m, "%s: checkpoint does not match the model", f->path);
  if (model) {
    const char *theirs = rt_st_meta(f, "model");
    if (theirs && !strcmp(theirs, model))
      fprintf(m, "\n  model: '%s' in the file and in this program", model);
    else if (theirs)
      fprintf(m, "\n  model: '%s' in the file, '%s' in this program", theirs, model);
    else
      fprintf(m, "\n  model: not recorded in the file, '%s' in this program", model);
  }
  if (nmissing) {
    char head[96];
    snprintf(head, sizeof head, "missing tensors (%d of the %d expected)", nmissing,
             nspecs);
    list_line(m, head, missing, nmissing);
  }
  if (nextra) {
    char head[96];
    snprintf(head, sizeof head, "unexpected tensors (%d of the %d in the file)", nextra,
             f->ntensors);
    list_line(m, head, extra, nextra);
  }
  for (int i = 0; i < nspecs; i++) {
    const RtStTensor *t = rt_st_find(f, specs[i].name);
    if (!t)
      continue;
    int dtype = t->dtype != specs[i].dtype;
    int shape = !same_shape(t->ndim, t->shape, specs[i].ndim, specs[i].shape);
    if ((dtype || shape) && nbad++ < RT_ST_LIST) {
      char have[200], want[200];
      shape_str(have, sizeof have, t->ndim, t->shape);
      shape_str(want, sizeof want, specs[i].ndim, specs[i].shape);
      fprintf(m, "\n  tensor '%s' has", t->name);
      if (dtype)
        fprintf(m, " dtype %s, expected %s%s", rt_dtype_name(t->dtype),
                rt_dtype_name(specs[i].dtype), shape ? ";" : "");
      if (shape)
        fprintf(m, " shape %s, expected %s", have, want);
    }
  }
  if (nbad > RT_ST_LIST)
    fprintf(m, "\n  and %d more tensors of another dtype or shape", nbad - RT_ST_LIST);
  fclose(m);
  int rc = RT_OK;
  if (nmissing || nextra || nbad)
    rc = rt_errorf(RT_ERR_MISMATCH, "%s", msg);
  free(msg);
  free(missing);
  free(extra);
  return rc;
}

int rt_st_check(const RtStFile *f, const RtStSpec *specs, int nspecs, int allow_extra) {
  return rt_st_check_model(f, specs, nspecs, allow_extra, NULL);
}
