/* sema.c — declarations, constants, `use` imports, meshes, the train block
 * and the plan.  Lowering of the model body lives in lower.c. */
#include "builtins.h"
#include "sema.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* Per-declaration semantic state, kept beside the AST. */
typedef struct DeclInfo {
  Decl *d;
  int state;       /* consts: 0 new, 1 evaluating, 2 done, 3 failed */
  double value;
  bool is_int;
  bool used;
  ScalarFn *fn;    /* D_USE */
  Mesh *mesh;      /* D_MESH */
} DeclInfo;

static PtrVec infos;   /* DeclInfo*, parallel to Module.decls */
static StrMap by_name; /* name -> DeclInfo* */

static DeclInfo *info_of(Decl *d) {
  DeclInfo *in = d && d->name ? strmap_get(&by_name, d->name) : NULL;
  return in && in->d == d ? in : NULL;
}

static const char *kind_name(DeclKind k) {
  switch (k) {
  case D_CONST: return "constant";
  case D_USE: return "imported function";
  case D_LAYER: return "layer";
  case D_MODEL: return "model";
  case D_MESH: return "mesh";
  case D_TRAIN: return "train block";
  }
  return "declaration";
}

Decl *sema_lookup_decl(Module *m, const char *name) {
  DeclInfo *in = strmap_get(&by_name, name);
  if (!in) return NULL;
  in->used = true;
  return in->d;
}

ScalarFn *sema_decl_fn(Decl *d) {
  DeclInfo *in = info_of(d);
  return in ? in->fn : NULL;
}

/* ---- suggestions ---- */

static int edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 64 || lb > 64) return 99;
  int prev[65], cur[65];
  for (int j = 0; j <= lb; j++) prev[j] = j;
  for (int i = 1; i <= la; i++) {
    cur[0] = i;
    for (int j = 1; j <= lb; j++) {
      int c = prev[j - 1] + (a[i - 1] != b[j - 1]);
      if (prev[j] + 1 < c) c = prev[j] + 1;
      if (cur[j - 1] + 1 < c) c = cur[j - 1] + 1;
      cur[j] = c;
    }
    memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
  }
  return prev[lb];
}

const char *sema_suggest(const char *name, const char *const *cands, int n) {
  const char *best = NULL;
  int bestd = 3;
  int len = (int)strlen(name);
  for (int i = 0; i < n; i++) {
    int d = edit_distance(name, cands[i]);
    if (d < bestd && d < len) {
      bestd = d;
      best = cands[i];
    }
  }
  return best;
}

/* ---- constants ---- */

static int eval_const_decl(Module *m, Decl *d, double *out, bool *is_int, Expr *ref);

/* Constants being evaluated, outermost first, and for each the reference
 * that led into it (NULL for the outermost): reported when they form a
 * cycle. */
static PtrVec const_chain, const_refs;
/* The longest chain of constants defined in terms of one another. */
#define SEMA_CONST_DEPTH 1000

/* What a non-number is, for messages: "a string", "a call to 'f'", ... */
static const char *expr_desc(const Expr *e) {
  switch (e->kind) {
  case E_STRING: return "a string";
  case E_BOOL: return e->ival ? "'true'" : "'false'";
  case E_CALL: return arena_printf("a call to '%s'", e->str);
  case E_TUPLE: return "a tuple";
  case E_GRID: return arena_printf("'%s'", e->str);
  case E_IDENT: return arena_printf("'%s'", e->str);
  default: return "an expression";
  }
}

/* Names of the declarations of one kind, for suggestions. */
static const char *suggest_decl(Module *m, const char *name, DeclKind kind) {
  PtrVec cands = {0};
  for (int i = 0; i < m->decls.len; i++) {
    Decl *d = m->decls.data[i];
    if (d->kind == kind) vec_push(&cands, (void *)d->name);
  }
  return sema_suggest(name, (const char *const *)cands.data, cands.len);
}

int sema_eval_number(Module *m, Expr *e, double *out, bool *is_int) {
  double a, b;
  bool ia, ib;
  switch (e->kind) {
  case E_INT:
    *out = (double)e->ival;
    *is_int = true;
    return 0;
  case E_FLOAT:
    *out = e->fval;
    *is_int = false;
    return 0;
  case E_NEG:
    if (sema_eval_number(m, e->lhs, &a, &ia)) return -1;
    *out = -a;
    *is_int = ia;
    return 0;
  case E_UNIT: {
    if (sema_eval_number(m, e->lhs, &a, &ia)) return -1;
    const char *u = e->str;
    double scale = 1;
    char p = u[0];
    bool bin = u[1] == 'i';
    double k = bin ? 1024.0 : 1000.0;
    if (p == 'K') scale = k;
    else if (p == 'M') scale = k * k;
    else if (p == 'G') scale = k * k * k;
    else if (p == 'T') scale = k * k * k * k;
    else if (p == 'P') scale = k * k * k * k * k;
    if (strstr(u, "b/s")) scale /= 8; /* bits */
    if (strstr(u, "F/s")) scale = (p == 'G' ? 1e9 : p == 'T' ? 1e12 : 1e15);
    *out = a * scale;
    *is_int = false;
    if (!isfinite(*out)) {
      diag_error(e->loc, "the value overflows a double (%g %s)", a, u);
      return -1;
    }
    return 0;
  }
  case E_BIN: {
    if (sema_eval_number(m, e->lhs, &a, &ia) | sema_eval_number(m, e->rhs, &b, &ib)) return -1;
    *is_int = ia && ib;
    switch (e->op) {
    case '+': *out = a + b; break;
    case '-': *out = a - b; break;
    case '*': *out = a * b; break;
    case '/':
      if (b == 0) {
        if (e->rhs->kind == E_IDENT)
          diag_error(e->rhs->loc, "division by zero ('%s' is 0)", e->rhs->str);
        else
          diag_error(e->rhs->loc, "division by zero");
        return -1;
      }
      if (*is_int && fmod(a, b) != 0) *is_int = false;
      *out = a / b;
      break;
    case '%':
      if (!*is_int) {
        diag_error(e->oploc, "'%%' needs integer operands, got %g %% %g", a, b);
        return -1;
      }
      if (b == 0) {
        if (e->rhs->kind == E_IDENT)
          diag_error(e->rhs->loc, "division by zero ('%s' is 0)", e->rhs->str);
        else
          diag_error(e->rhs->loc, "division by zero");
        return -1;
      }
      *out = fmod(a, b);
      break;
    }
    if (*is_int && fabs(*out) > 9.007199254740992e15) {
      diag_error(e->loc, "integer constant overflows (limit is 2^53)");
      return -1;
    }
    /* inf or NaN would reach a shape, an option or a tensor's scale */
    if (!isfinite(*out)) {
      diag_error(e->loc, "%s", isnan(*out) ? "the value is not a number (inf - inf, inf * 0 or 0 * inf)"
                                           : "the value overflows a double (beyond 1.8e308)");
      return -1;
    }
    return 0;
  }
  case E_IDENT: {
    Decl *d = sema_lookup_decl(m, e->str);
    if (!d) {
      const char *s = suggest_decl(m, e->str, D_CONST);
      if (s)
        diag_error(e->loc, "unknown constant '%s'; did you mean '%s'?", e->str, s);
      else
        diag_error(e->loc, "unknown constant '%s'", e->str);
      return -1;
    }
    if (d->kind != D_CONST) {
      diag_error(e->loc, "'%s' is a %s, not a number", e->str, kind_name(d->kind));
      diag_note(d->name_loc, "'%s' is defined here", e->str);
      return -1;
    }
    return eval_const_decl(m, d, out, is_int, e);
  }
  default:
    diag_error(e->loc, "expected a number, got %s", expr_desc(e));
    return -1;
  }
}

static int eval_const_decl(Module *m, Decl *d, double *out, bool *is_int, Expr *ref) {
  DeclInfo *in = info_of(d);
  if (in->state == 1) {
    /* A cycle: d ... -> d.  Show each step of it. */
    int i = 0;
    while (i < const_chain.len && const_chain.data[i] != d) i++;
    diag_error(d->name_loc, "constant '%s' is defined in terms of itself", d->name);
    for (int j = i; j < const_chain.len; j++) {
      Decl *from = const_chain.data[j];
      Expr *use = j + 1 < const_chain.len ? const_refs.data[j + 1] : ref;
      if (use && !strcmp(use->str, from->name))
        diag_note(use->loc, "'%s' uses itself here", from->name);
      else if (use)
        diag_note(use->loc, "'%s' uses '%s' here", from->name, use->str);
    }
    in->state = 3;
    return -1;
  }
  if (in->state == 3) return -1;
  if (in->state == 0) {
    /* Each constant in the chain is a few frames of this walk: a chain of
     * tens of thousands (a generated file) would overflow the stack. */
    if (const_chain.len >= SEMA_CONST_DEPTH) {
      static const Module *told; /* once a module: the chain's later constants would each say it */
      if (told != m) {
        diag_error(d->name_loc, "constant '%s' is defined through a chain of more than %d other "
                   "constants", d->name, SEMA_CONST_DEPTH);
        if (ref) diag_note(ref->loc, "the chain reaches '%s' here", d->name);
      }
      told = m;
      in->state = 3;
      return -1;
    }
    in->state = 1;
    vec_push(&const_chain, d);
    vec_push(&const_refs, ref);
    int rc = sema_eval_number(m, d->value, &in->value, &in->is_int);
    const_chain.len--;
    const_refs.len--;
    if (rc) {
      in->state = 3;
      return -1;
    }
    in->state = 2;
  }
  *out = in->value;
  *is_int = in->is_int;
  return 0;
}

/* ---- item lists (mesh, train) ---- */

static Arg *find_item(PtrVec *items, const char *key) {
  Arg *found = NULL;
  for (int i = 0; i < items->len; i++) {
    Arg *a = items->data[i];
    if (!strcmp(a->name, key)) found = a;
  }
  return found;
}

/* Unknown and repeated keys.  `what` names the block ("mesh": "unknown mesh
 * key") or, for the arguments of a call such as adamw(...), the callee
 * ("adamw: unknown argument"). */
static int check_items(PtrVec *items, const char *const *keys, int nkeys, const char *what,
                       bool call) {
  int rc = 0;
  for (int i = 0; i < items->len; i++) {
    Arg *a = items->data[i];
    bool ok = false;
    for (int k = 0; k < nkeys; k++)
      if (!strcmp(keys[k], a->name)) ok = true;
    if (!ok) {
      const char *s = sema_suggest(a->name, keys, nkeys);
      const char *head = arena_printf(call ? "%s: unknown argument '%s'" : "unknown %s key '%s'",
                                      what, a->name);
      if (s)
        diag_error(a->loc, "%s; did you mean '%s'?", head, s);
      else
        diag_error(a->loc, "%s", head);
      rc = -1;
    }
    for (int j = 0; j < i; j++) {
      Arg *b = items->data[j];
      if (!strcmp(a->name, b->name)) {
        if (call)
          diag_error(a->loc, "%s: argument '%s' is given twice", what, a->name);
        else
          diag_error(a->loc, "'%s' is given twice", a->name);
        diag_note(b->loc, "first given here");
        rc = -1;
      }
    }
  }
  return rc;
}

/* A value that cannot be a number at all (a string, a bare word, a call):
 * reported as "'key' must be WHAT, got ...".  An unknown name that looks
 * like a misspelled constant is left to sema_eval_number's suggestion. */
static bool not_a_number(Module *m, Arg *a, const char *what) {
  Expr *v = a->value;
  bool bad = v->kind == E_STRING || v->kind == E_BOOL || v->kind == E_CALL ||
             v->kind == E_TUPLE || v->kind == E_GRID ||
             (v->kind == E_IDENT && !sema_lookup_decl(m, v->str) &&
              !suggest_decl(m, v->str, D_CONST));
  if (bad) diag_error(v->loc, "'%s' must be %s, got %s", a->name, what, expr_desc(v));
  return bad;
}

/* An integer item in [lo, hi]; 0 if absent.  Returns -1 on error. */
static int64_t int_item(Module *m, PtrVec *items, const char *key, int64_t lo, int64_t hi) {
  Arg *a = find_item(items, key);
  if (!a) return 0;
  double v;
  bool is_int;
  if (not_a_number(m, a, "an integer") || sema_eval_number(m, a->value, &v, &is_int)) return -1;
  if (!is_int) {
    diag_error(a->value->loc, "'%s' must be an integer, got %g", key, v);
    return -1;
  }
  if (v < (double)lo || v > (double)hi) {
    /* a literal as written (past 2^53 a double rounds it) */
    const char *got = a->value->kind == E_INT ? arena_printf("%lld", (long long)a->value->ival)
                                              : arena_printf("%.0f", v);
    diag_error(a->value->loc, "'%s' must be between %lld and %lld, got %s", key, (long long)lo,
               (long long)hi, got);
    return -1;
  }
  return (int64_t)v;
}

/* A number item in [lo, hi]: 1 if given, 0 if absent, -1 on error.  `what`
 * says what kind of number it is ("a bandwidth such as 50 GB/s"). */
static int num_item(Module *m, PtrVec *items, const char *key, double *out, double lo, double hi,
                    const char *what) {
  Arg *a = find_item(items, key);
  if (!a) return 0;
  bool is_int;
  if (not_a_number(m, a, what) || sema_eval_number(m, a->value, out, &is_int)) return -1;
  if (!(*out >= lo && *out <= hi)) {
    diag_error(a->value->loc, "'%s' must be between %g and %g, got %g", key, lo, hi, *out);
    return -1;
  }
  return 1;
}

/* ---- meshes ---- */

/* The kind of the first unit in e ('s' a size: 80 GB; 'b' a bandwidth:
 * 450 GB/s, 200 Gb/s; 'f' a FLOP rate: 989 TF/s), 0 when it has none;
 * *unit its text. */
static char unit_kind(const Expr *e, const char **unit) {
  if (!e) return 0;
  if (e->kind == E_UNIT && e->str) {
    *unit = e->str;
    size_t n = strlen(e->str);
    if (n >= 3 && !strcmp(e->str + n - 3, "F/s")) return 'f';
    if (n >= 2 && !strcmp(e->str + n - 2, "/s")) return 'b';
    return 's';
  }
  char k = unit_kind(e->lhs, unit);
  if (!k) k = unit_kind(e->rhs, unit);
  return k;
}

static const char *const mesh_keys[] = {
    "devices", "nodes", "per_node", "device", "intra", "inter", "memory", "peak_bf16", "peak_fp32",
    "peak_tf32", "memory_bw", "launch_us", "intra_latency_us", "inter_latency_us", "link", "nics"};
enum { NMESH_KEYS = sizeof mesh_keys / sizeof mesh_keys[0] };

/* "unknown device 'H100_SMX'; did you mean 'H100_SXM'? (known: cpu, ...)" */
static const char *unknown_device(const char *name) {
  char names[256];
  ir_device_names(names, sizeof names);
  PtrVec cands = {0};
  for (char *save = NULL, *tok = strtok_r(arena_strdup(names), ", ", &save); tok;
       tok = strtok_r(NULL, ", ", &save))
    vec_push(&cands, tok);
  const char *s = sema_suggest(name, (const char *const *)cands.data, cands.len);
  if (s) return arena_printf("unknown device '%s'; did you mean '%s'? (known: %s)", name, s, names);
  return arena_printf("unknown device '%s' (known: %s)", name, names);
}

static Mesh *check_mesh(Module *m, Decl *d) {
  PtrVec *it = &d->items;
  if (check_items(it, mesh_keys, NMESH_KEYS, "mesh", false)) return NULL;
  Mesh *me = arena_alloc(sizeof *me);
  me->name = d->name;
  me->loc = d->name_loc;
  int64_t devs = int_item(m, it, "devices", 1, 1 << 20);
  int64_t nodes = int_item(m, it, "nodes", 1, 1 << 16);
  int64_t per = int_item(m, it, "per_node", 1, 1 << 12);
  if (devs < 0 || nodes < 0 || per < 0) return NULL;
  if (devs && (nodes || per)) {
    Arg *a = find_item(it, nodes ? "nodes" : "per_node");
    diag_error(a->loc, "give either 'devices' or 'nodes' and 'per_node', not both");
    diag_note(find_item(it, "devices")->loc, "'devices' given here");
    return NULL;
  }
  if (!devs && !nodes && !per) {
    diag_error(d->name_loc, "mesh '%s' has no size: give 'devices = N' or 'nodes' and 'per_node'",
               d->name);
    return NULL;
  }
  if (devs) {
    me->nodes = 1;
    me->per_node = (int)devs;
  } else {
    me->nodes = nodes ? (int)nodes : 1;
    me->per_node = per ? (int)per : 1;
  }
  if ((int64_t)me->nodes * me->per_node > (1 << 20)) {
    diag_error(d->name_loc, "mesh '%s' is too large (limit is %d devices)", d->name, 1 << 20);
    return NULL;
  }
  me->ndev = me->nodes * me->per_node;
  Arg *dev = find_item(it, "device");
  me->device = ir_device_lookup("cpu");
  if (dev) {
    if (dev->value->kind != E_IDENT && dev->value->kind != E_STRING) {
      diag_error(dev->value->loc, "'device' must be a device name such as H100_SXM or cpu, got %s",
                 dev->value->kind == E_INT || dev->value->kind == E_FLOAT ? "a number"
                                                                          : expr_desc(dev->value));
      return NULL;
    }
    me->device = ir_device_lookup(dev->value->str);
    if (!me->device) {
      diag_error(dev->value->loc, "%s", unknown_device(dev->value->str));
      return NULL;
    }
  }
  ir_mesh_defaults(me);
  /* Every figure of the hardware model can be overridden (docs/language.md). */
  static const struct {
    const char *key;
    size_t off;
    double lo, hi, scale;
    char unit; /* unit_kind's: 's' size, 'b' bandwidth, 'f' FLOP rate; 0: none */
    const char *what;
  } figs[] = {
      {"intra", offsetof(Mesh, intra_bw), 1e6, 1e15, 1, 'b', "a bandwidth such as 450 GB/s"},
      {"inter", offsetof(Mesh, inter_bw), 1e6, 1e15, 1, 'b', "a bandwidth such as 50 GB/s"},
      {"memory", offsetof(Mesh, mem_bytes), 1e6, 1e15, 1, 's', "a size such as 80 GB"},
      {"peak_bf16", offsetof(Mesh, peak_bf16), 1e6, 1e18, 1, 'f', "a rate such as 989 TF/s"},
      {"peak_fp32", offsetof(Mesh, peak_fp32), 1e6, 1e18, 1, 'f', "a rate such as 67 TF/s"},
      {"peak_tf32", offsetof(Mesh, peak_tf32), 1e6, 1e18, 1, 'f', "a rate such as 494 TF/s"},
      {"memory_bw", offsetof(Mesh, mem_bw), 1e6, 1e15, 1, 'b', "a bandwidth such as 3350 GB/s"},
      {"launch_us", offsetof(Mesh, launch_s), 0, 1e6, 1e-6, 0, "microseconds such as 4"},
      {"intra_latency_us", offsetof(Mesh, intra_lat), 0, 1e6, 1e-6, 0, "microseconds such as 3"},
      {"inter_latency_us", offsetof(Mesh, inter_lat), 0, 1e6, 1e-6, 0, "microseconds such as 6"},
  };
  for (size_t k = 0; k < sizeof figs / sizeof figs[0]; k++) {
    double v;
    /* a unit of the wrong kind (memory = 80 GB/s) is an error, not a
     * number taken as it is */
    Arg *fa = find_item(it, figs[k].key);
    const char *unit = NULL;
    char uk = fa ? unit_kind(fa->value, &unit) : 0;
    if (uk && uk != figs[k].unit) {
      diag_error(fa->value->loc, "'%s' must be %s, got %s ('%s')", figs[k].key, figs[k].what,
                 !figs[k].unit ? "a unit" : uk == 's' ? "a size" : uk == 'b' ? "a bandwidth" : "a FLOP rate",
                 unit);
      return NULL;
    }
    int r = num_item(m, it, figs[k].key, &v, figs[k].lo, figs[k].hi, figs[k].what);
    if (r < 0) return NULL;
    if (r) *(double *)((char *)me + figs[k].off) = v * figs[k].scale;
    if (r && !strcmp(figs[k].key, "memory")) me->mem_loc = find_item(it, "memory")->value->loc;
  }
  int64_t nics = int_item(m, it, "nics", 1, 64);
  if (nics < 0) return NULL;
  if (nics) me->nics = (int)nics;
  Arg *link = find_item(it, "link");
  if (link) {
    static const char *const kinds[] = {"nvswitch", "nvlink", "pcie", "shm"};
    const char *v = link->value->kind == E_IDENT || link->value->kind == E_STRING ? link->value->str
                                                                                  : NULL;
    int ok = 0;
    for (int k = 0; v && k < 4; k++) ok |= !strcmp(v, kinds[k]);
    if (!ok) {
      diag_error(link->value->loc, "'link' must be nvswitch, nvlink, pcie or shm, got %s",
                 v ? arena_printf("'%s'", v) : expr_desc(link->value));
      return NULL;
    }
    me->link = v;
  }
  Arg *inter = find_item(it, "inter");
  if (inter && me->nodes == 1)
    diag_warning(inter->loc, "'inter' is unused: mesh '%s' has a single node", d->name);
  return me;
}

/* A whole decimal number in [1, 2^20], -2 for a larger one (or 0), or -1
 * for anything else. */
static long spec_size(const char *s, const char *end) {
  if (s == end) return -1;
  long v = 0;
  for (const char *p = s; p < end; p++) {
    if (*p < '0' || *p > '9') return -1;
    if (v <= (1 << 20)) v = v * 10 + (*p - '0');
  }
  return v >= 1 && v <= (1 << 20) ? v : -2;
}

/* --mesh NAME or SPEC: N, NxM (nodes x per_node), optionally :DEVICE. */
static Mesh *mesh_from_spec(Module *m, const char *spec) {
  for (int i = 0; i < m->meshes.len; i++) {
    Mesh *me = m->meshes.data[i];
    if (!strcmp(me->name, spec)) {
      info_of(sema_lookup_decl(m, spec))->used = true;
      return me;
    }
  }
  const char *colon = strchr(spec, ':');
  const char *end = colon ? colon : spec + strlen(spec);
  const char *devname = colon ? colon + 1 : "cpu";
  const char *x = memchr(spec, 'x', (size_t)(end - spec));
  long a = spec_size(spec, x ? x : end), b = x ? spec_size(x + 1, end) : 1;
  if (a < 0 || b < 0 || a * b > (1 << 20)) {
    const char *s = suggest_decl(m, spec, D_MESH);
    if (s)
      diag_fatal_noloc("--mesh '%s' is not a mesh in this file; did you mean '%s'?", spec, s);
    else if (a > 0 && b > 0)
      diag_fatal_noloc("--mesh '%s' has %ld devices (limit is %d)", spec, a * b, 1 << 20);
    else if (a != -1 && b != -1)
      diag_fatal_noloc("--mesh '%s': sizes run from 1 to %d devices", spec, 1 << 20);
    else
      diag_fatal_noloc("--mesh '%s' is neither a mesh declared in the file nor a size "
                       "(N or NODESxPER_NODE, optionally :DEVICE)", spec);
    return NULL;
  }
  const DeviceSpec *dev = ir_device_lookup(devname);
  if (!dev) {
    diag_fatal_noloc("--mesh '%s': %s", spec, unknown_device(devname));
    return NULL;
  }
  Mesh *me = arena_alloc(sizeof *me);
  me->name = arena_strdup(spec);
  me->nodes = x ? (int)a : 1;
  me->per_node = x ? (int)b : (int)a;
  me->ndev = (int)(a * b);
  me->device = dev;
  ir_mesh_defaults(me);
  return me;
}

/* ---- the train block ---- */

static const char *const train_keys[] = {
    "model", "mesh", "batch", "seq", "microbatch", "steps", "optimizer", "precision", "strategy",
    "seed", "data", "dp", "tp", "tp2d", "sp", "pp", "schedule", "mb", "zero", "recompute"};
enum { N_TRAIN_KEYS = sizeof train_keys / sizeof train_keys[0] };

static const char *const adamw_keys[] = {"lr", "betas", "eps", "weight_decay", "warmup",
                                         "schedule", "min_lr", "clip"};
static const char *const sgd_keys[] = {"lr", "momentum", "weight_decay", "warmup",
                                       "schedule", "min_lr", "clip"};

static const char *const shampoo_keys[] = {
    "lr", "betas", "epsilon", "weight_decay", "block", "precondition_every",
    "start_preconditioning", "graft", "root", "graft_eps", "spread", "stagger", "warmup", "schedule", "min_lr",
    "clip"};
static const char *const adafactor_keys[] = {"lr", "beta1", "decay_rate", "eps",
                                             "clip_threshold", "weight_decay", "warmup",
                                             "schedule", "min_lr", "clip"};

/* An identifier option among `names`: its index, -1 when absent, -2 on error. */
static int word_item(PtrVec *items, const char *key, const char *const *names, int n,
                     const char *who) {
  Arg *a = find_item(items, key);
  if (!a) return -1;
  Expr *v = a->value;
  for (int i = 0; v->kind == E_IDENT && i < n; i++)
    if (!strcmp(v->str, names[i])) return i;
  char list[128] = "";
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? i + 1 == n ? " or " : ", " : "", names[i]);
  const char *s = v->kind == E_IDENT ? sema_suggest(v->str, names, n) : NULL;
  if (s)
    diag_error(v->loc, "%s: unknown %s '%s'; did you mean '%s'? (use %s)", who, key, v->str, s, list);
  else
    diag_error(v->loc, "%s: %s must be %s, got %s", who, key, list,
               v->kind == E_IDENT ? arena_printf("'%s'", v->str) : expr_desc(v));
  return -2;
}

/* A positive number item (strictly above 0, at most hi): 1 given, 0 absent, -1 error. */
static int pos_item(Module *m, PtrVec *items, const char *key, double *out, double hi,
                    const char *who) {
  Arg *a = find_item(items, key);
  if (!a) return 0;
  bool is_int;
  if (not_a_number(m, a, "a number") || sema_eval_number(m, a->value, out, &is_int)) return -1;
  if (!(*out > 0 && *out <= hi)) {
    diag_error(a->value->loc, "%s: %s must be %s, got %g", who, key,
               *out <= 0 ? "positive" : arena_printf("at most %g", hi), *out);
    return -1;
  }
  return 1;
}

/* An epsilon the optimizer adds in fp32: positive, at most hi, and a
 * normal fp32 number (a smaller one rounds to 0 or a denormal, and a
 * parameter whose gradient is 0 then divides 0 by 0). */
static int eps_item(Module *m, PtrVec *items, const char *key, double *out, double hi,
                    const char *who) {
  int r = pos_item(m, items, key, out, hi, who);
  if (r > 0 && *out < FLT_MIN) {
    diag_error(find_item(items, key)->value->loc,
               "%s: %s must be at least %.3g (it is added in fp32, where a smaller value is 0 or "
               "denormal), got %g", who, key, FLT_MIN, *out);
    return -1;
  }
  return r;
}

/* shampoo(...) and adafactor(...)'s own options (docs/language.md). */
static int check_blocked_optimizer(Module *m, Expr *e, Optimizer *o) {
  PtrVec *a = &e->args;
  double v;
  int r;
  if (!strcmp(o->kind, "shampoo")) {
    o->eps = 1e-6;
    if ((r = pos_item(m, a, "epsilon", &v, 1, o->kind)) < 0) return -1;
    if (r && v < 1e-30) {
      /* the roots, up to epsilon^(-1/4), are stored in fp32, and a
       * direction multiplies two of them */
      diag_error(find_item(a, "epsilon")->value->loc,
                 "shampoo: epsilon must be at least 1e-30 (the inverse roots, up to "
                 "epsilon^(-1/4), are stored in fp32), got %g", v);
      return -1;
    }
    if (r) o->eps = v;
    if ((r = eps_item(m, a, "graft_eps", &v, 1, o->kind)) < 0) return -1;
    if (r) o->graft_eps = v;
    int64_t k;
    if ((k = int_item(m, a, "block", 1, 1 << 16)) < 0) return -1;
    if (k) o->block = (int)k;
    o->block_loc = find_item(a, "block") ? find_item(a, "block")->value->loc : e->loc;
    if ((k = int_item(m, a, "start_preconditioning", 0, 1 << 30)) < 0) return -1;
    if (find_item(a, "start_preconditioning")) o->start_preconditioning = (int)k;
    if ((k = int_item(m, a, "precondition_every", 1, 1 << 30)) < 0) return -1;
    if (k) o->precondition_every = (int)k;
    static const char *const grafts[] = {"adam", "adagrad", "sgd"};
    static const char *const roots[] = {"eigh", "newton"};
    int w = word_item(a, "graft", grafts, 3, o->kind);
    if (w == -2) return -1;
    if (w >= 0) o->graft = w;
    w = word_item(a, "root", roots, 2, o->kind);
    if (w == -2) return -1;
    if (w >= 0) o->root = w;
    o->root_loc = find_item(a, "root") ? find_item(a, "root")->value->loc : e->loc;
    Arg *sp = find_item(a, "spread");
    if (sp && sp->value->kind != E_BOOL) {
      diag_error(sp->value->loc, "shampoo: spread must be true or false, got %s", expr_desc(sp->value));
      return -1;
    }
    if (sp) o->no_spread = !sp->value->ival;
    Arg *sg = find_item(a, "stagger");
    if (sg && sg->value->kind != E_BOOL) {
      diag_error(sg->value->loc, "shampoo: stagger must be true or false, got %s", expr_desc(sg->value));
      return -1;
    }
    if (sg) o->no_stagger = !sg->value->ival;
  } else {
    o->eps = 1e-30;
    o->beta1 = 0;
    if ((r = eps_item(m, a, "eps", &v, 1, o->kind)) < 0) return -1;
    if (r) o->eps = v;
    if ((r = num_item(m, a, "beta1", &v, 0, 0.999999, "a number")) < 0) return -1;
    if (r) o->beta1 = v;
    if ((r = pos_item(m, a, "decay_rate", &v, 1, o->kind)) < 0) return -1;
    if (r) o->decay_rate = v;
    if ((r = pos_item(m, a, "clip_threshold", &v, 1e9, o->kind)) < 0) return -1;
    if (r) o->clip_threshold = v;
  }
  return 0;
}

static int check_optimizer(Module *m, Expr *e, Optimizer *o) {
  static const char *const kinds[] = {"adamw", "sgd", "shampoo", "adafactor"};
  static const char *const *const keys[] = {adamw_keys, sgd_keys, shampoo_keys, adafactor_keys};
#define NKEYS(a) ((int)(sizeof a / sizeof a[0]))
  static const int nkeys[] = {NKEYS(adamw_keys), NKEYS(sgd_keys), NKEYS(shampoo_keys),
                              NKEYS(adafactor_keys)};
#undef NKEYS
  int kind = -1;
  for (int k = 0; e->kind == E_CALL && k < 4; k++)
    if (!strcmp(e->str, kinds[k])) kind = k;
  const char *use = "use adamw(...), sgd(...), shampoo(...) or adafactor(...)";
  if (kind < 0) {
    const char *s = e->kind == E_CALL || e->kind == E_IDENT ? sema_suggest(e->str, kinds, 4) : NULL;
    if (e->kind == E_IDENT && s && !strcmp(s, e->str))
      diag_error(e->loc, "optimizer must be a call, e.g. %s(lr = 3e-4)", e->str);
    else if (s)
      diag_error(e->loc, "unknown optimizer '%s'; did you mean '%s'? (%s)", e->str, s, use);
    else if (e->kind == E_CALL)
      diag_error(e->loc, "unknown optimizer '%s' (%s)", e->str, use);
    else
      diag_error(e->loc, "optimizer must be adamw(...), sgd(...), shampoo(...) or adafactor(...), got %s",
                 e->kind == E_INT || e->kind == E_FLOAT ? "a number" : expr_desc(e));
    return -1;
  }
  o->kind = kinds[kind];
  int rc = 0;
  for (int i = 0; i < e->args.len; i++) {
    Arg *a = e->args.data[i];
    if (!a->name) {
      if (i == 0) {
        a->name = "lr";
      } else {
        diag_error(a->loc, "%s: only 'lr' may be given without a name", o->kind);
        rc = -1;
        continue;
      }
    }
  }
  if (rc || check_items(&e->args, keys[kind], nkeys[kind], o->kind, true))
    return -1;
  if (kind >= 2 && check_blocked_optimizer(m, e, o)) return -1;
  double v;
  int r;
  if ((r = num_item(m, &e->args, "lr", &v, 0, 10, "a number")) < 0) return -1;
  if (r) o->lr = v;
  if (kind < 2 && (r = eps_item(m, &e->args, "eps", &v, 1, o->kind)) < 0) return -1;
  if (kind < 2 && r) o->eps = v;
  if ((r = num_item(m, &e->args, "weight_decay", &v, 0, 10, "a number")) < 0) return -1;
  if (r) o->weight_decay = v;
  if ((r = num_item(m, &e->args, "momentum", &v, 0, 0.999999, "a number")) < 0) return -1;
  if (r) o->momentum = v;
  if ((r = num_item(m, &e->args, "clip", &v, 0, 1e9, "a number")) < 0) return -1;
  if (r) o->clip = v;
  if ((r = num_item(m, &e->args, "min_lr", &v, 0, 10, "a number")) < 0) return -1;
  if (r) o->min_lr_ratio = o->lr > 0 ? v / o->lr : 0;
  int64_t w = int_item(m, &e->args, "warmup", 0, 1 << 30);
  if (w < 0) return -1;
  o->warmup = (int)w;
  Arg *betas = find_item(&e->args, "betas");
  if (betas) {
    Expr *t = betas->value;
    bool ia;
    if (t->kind != E_TUPLE || t->args.len != 2) {
      diag_error(t->loc, "%s: betas must be a pair, e.g. betas = (0.9, 0.95)", o->kind);
      return -1;
    }
    double *beta[2] = {&o->beta1, &o->beta2};
    for (int i = 0; i < 2; i++) {
      Expr *b = t->args.data[i];
      if (sema_eval_number(m, b, beta[i], &ia)) return -1;
      if (!(*beta[i] >= 0 && *beta[i] < 1)) {
        diag_error(b->loc, "%s: beta%d must lie in [0, 1), got %g", o->kind, i + 1, *beta[i]);
        return -1;
      }
    }
  }
  Arg *sch = find_item(&e->args, "schedule");
  if (sch) {
    if (sch->value->kind != E_IDENT ||
        (strcmp(sch->value->str, "cosine") && strcmp(sch->value->str, "constant"))) {
      diag_error(sch->value->loc, "%s: schedule must be cosine or constant, got %s", o->kind,
                 expr_desc(sch->value));
      return -1;
    }
    o->schedule = sch->value->str;
  }
  return 0;
}

/* ---- strategy ---- */

static const char *const plan_keys[] = {"dp", "tp", "tp2d", "sp", "pp", "schedule", "mb", "zero",
                                        "recompute"};
static const unsigned plan_bits[] = {PLAN_DP, PLAN_TP, PLAN_TP2D, PLAN_SP, PLAN_PP, PLAN_SCHED,
                                     PLAN_MB, PLAN_ZERO, PLAN_RECOMPUTE};
enum { N_PLAN_KEYS = sizeof plan_keys / sizeof plan_keys[0] };

/* The comma-separated token of `spec` that starts at or after *from:
 * [*start, *end) without surrounding blanks.  False at the end. */
static bool spec_token(const char *spec, const char **from, const char **start, const char **end) {
  const char *t = *from;
  if (!t) return false;
  const char *comma = strchr(t, ',');
  const char *e = comma ? comma : t + strlen(t);
  *from = comma ? comma + 1 : NULL;
  while (t < e && *t == ' ') t++;
  while (e > t && e[-1] == ' ') e--;
  *start = t;
  *end = e;
  return true;
}

/* plan_parse_spec, and on error the offending key=value: its offset and
 * length in spec (the whole spec if no single token is to blame), and a
 * suggestion for a misspelled key. */
static int parse_spec_at(const char *spec, Plan *p, char *err, int errcap, int *off, int *len) {
  if (plan_parse_spec(spec, p, err, errcap) == 0) return 0;
  *off = 0;
  *len = (int)strlen(spec);
  Plan scratch;
  plan_default(&scratch);
  const char *from = spec, *t, *e;
  while (spec_token(spec, &from, &t, &e)) {
    if (t == e) continue;
    char *tok = arena_strndup(t, (size_t)(e - t)), e2[256];
    if (plan_parse_spec(tok, &scratch, e2, sizeof e2) == 0) continue;
    *off = (int)(t - spec);
    *len = (int)(e - t);
    char *eq = strchr(tok, '=');
    if (eq) {
      *eq = 0;
      for (char *k = eq; k > tok && k[-1] == ' ';) *--k = 0;
      bool known = false;
      for (int k = 0; k < N_PLAN_KEYS; k++) known |= !strcmp(plan_keys[k], tok);
      const char *sug = known ? NULL : sema_suggest(tok, plan_keys, N_PLAN_KEYS);
      if (!known) *len = (int)strlen(tok);
      if (sug) snprintf(err, (size_t)errcap, "unknown strategy key '%s'; did you mean '%s'?", tok, sug);
    }
    break;
  }
  return -1;
}

/* A span inside the quoted string at `strloc` (strings have no escapes and
 * no newlines, so byte offsets map to columns). */
static SrcLoc string_span(SrcLoc strloc, int off, int len) {
  SrcLoc l = strloc;
  l.col += 1 + off;
  l.len = len > 0 ? len : 1;
  return l;
}

/* Where the strategy key `bit` was given: inside the strategy string, or
 * as a train item.  The strategy as a whole when neither. */
SrcLoc sema_plan_key_loc(TrainCfg *t, unsigned bit) {
  const char *name = NULL;
  for (int k = 0; k < N_PLAN_KEYS; k++)
    if (plan_bits[k] == bit) name = plan_keys[k];
  if (!t->decl || !name || t->cli_strategy) return t->plan_loc;
  Arg *a = find_item(&t->decl->items, name);
  if (a) return a->loc;
  Arg *st = find_item(&t->decl->items, "strategy");
  if (st && st->value->kind == E_STRING) {
    const char *spec = st->value->str, *from = spec, *tk, *e;
    size_t n = strlen(name);
    while (spec_token(spec, &from, &tk, &e)) {
      const char *k = tk + n;
      while (k < e && *k == ' ') k++;
      if ((size_t)(e - tk) > n && !strncmp(tk, name, n) && *k == '=')
        return string_span(st->value->loc, (int)(tk - spec), (int)(e - tk));
    }
  }
  return t->plan_loc;
}

/* The strategy keys written directly in the train block become a SPEC.
 * *where is the strategy item, else the first strategy key in the block. */
static int train_plan(Module *m, PtrVec *it, Plan *p, SrcLoc *where) {
  Arg *strategy = find_item(it, "strategy");
  char err[256];
  if (strategy) {
    *where = strategy->value->loc;
    Expr *v = strategy->value;
    int off, len;
    if (v->kind == E_IDENT && !strcmp(v->str, "auto")) {
      p->is_auto = true;
    } else if (v->kind == E_STRING) {
      if (parse_spec_at(v->str, p, err, sizeof err, &off, &len)) {
        diag_error(string_span(v->loc, off, len), "strategy: %s", err);
        return -1;
      }
    } else {
      diag_error(v->loc, "strategy must be auto or a string such as \"dp=2,tp=2\", got %s",
                 expr_desc(v));
      return -1;
    }
  }
  for (int i = 0; i < it->len; i++) {
    Arg *a = it->data[i];
    int k = 0;
    while (k < N_PLAN_KEYS && strcmp(plan_keys[k], a->name)) k++;
    if (k == N_PLAN_KEYS) continue;
    if (!where->file) *where = a->loc;
    char val[96];
    Expr *v = a->value;
    Decl *cd = v->kind == E_IDENT ? sema_lookup_decl(m, v->str) : NULL;
    if ((v->kind == E_IDENT && !cd) || v->kind == E_GRID) {
      snprintf(val, sizeof val, "%s", v->str);
    } else if (v->kind == E_CALL && v->args.len == 1 &&
               ((Arg *)v->args.data[0])->name == NULL) {
      /* interleaved(2) is interleaved:2 */
      double n;
      bool ii;
      if (sema_eval_number(m, ((Arg *)v->args.data[0])->value, &n, &ii)) return -1;
      snprintf(val, sizeof val, "%s:%.0f", v->str, n);
    } else {
      double n;
      bool is_int;
      if (not_a_number(m, a, "an integer") || sema_eval_number(m, v, &n, &is_int)) return -1;
      if (!is_int || fabs(n) > 1e9) {
        diag_error(v->loc, "'%s' must be an integer, got %g", plan_keys[k], n);
        return -1;
      }
      snprintf(val, sizeof val, "%.0f", n);
    }
    char spec[160];
    snprintf(spec, sizeof spec, "%s=%s", plan_keys[k], val);
    if (plan_parse_spec(spec, p, err, sizeof err)) {
      diag_error(v->loc, "%s", err);
      return -1;
    }
  }
  return 0;
}

/* For errors about the sizes of the strategy as a whole: where the mesh
 * came from. */
static void mesh_note(TrainCfg *t, const SemaOptions *opt) {
  if (opt->mesh && !t->mesh->loc.file)
    diag_note((SrcLoc){0}, "the mesh comes from --mesh %s (%d device%s)", opt->mesh, t->mesh->ndev,
              t->mesh->ndev == 1 ? "" : "s");
  else if (t->mesh->loc.file)
    diag_note(t->mesh->loc, "mesh '%s' is declared here (%d device%s)", t->mesh->name,
              t->mesh->ndev, t->mesh->ndev == 1 ? "" : "s");
}

/* Where dp came from: a strategy key, or what the mesh leaves over. */
static void dp_note(TrainCfg *t, const SemaOptions *opt) {
  Plan *p = &t->plan;
  if (p->given & PLAN_DP) {
    SrcLoc l = sema_plan_key_loc(t, PLAN_DP);
    if (l.file)
      diag_note(l, "dp=%d is set here", p->dp);
    else if (opt->strategy)
      diag_note((SrcLoc){0}, "dp=%d comes from --strategy %s", p->dp, opt->strategy);
  } else if (t->mesh->loc.file) {
    diag_note(t->mesh->loc, "dp=%d: what mesh '%s' (%d devices) leaves after the other axes",
              p->dp, t->mesh->name, t->mesh->ndev);
  } else {
    diag_note((SrcLoc){0}, "dp=%d: what the mesh (%d devices) leaves after the other axes", p->dp,
              t->mesh->ndev);
  }
}

static int check_train(Module *m, Decl *d, const SemaOptions *opt) {
  TrainCfg *t = &m->train;
  PtrVec *it = d ? &d->items : &(PtrVec){0};
  t->decl = d;
  if (d) t->loc = d->loc;
  if (d && check_items(it, train_keys, N_TRAIN_KEYS, "train", false)) return -1;
  int rc = 0;

  /* model */
  Arg *ma = find_item(it, "model");
  const char *mname = opt->model ? opt->model : NULL;
  if (!mname && ma) {
    if (ma->value->kind != E_IDENT) {
      diag_error(ma->value->loc, "'model' must name a model, got %s", expr_desc(ma->value));
      return -1;
    }
    mname = ma->value->str;
  }
  if (mname) {
    Decl *md = sema_lookup_decl(m, mname);
    if (!md || md->kind != D_MODEL) {
      const char *s = md ? NULL : suggest_decl(m, mname, D_MODEL);
      const char *hint = s ? arena_printf("; did you mean '%s'?", s) : "";
      if (ma && !opt->model) {
        if (md)
          diag_error(ma->value->loc, "'%s' is not a model", mname);
        else
          diag_error(ma->value->loc, "unknown model '%s'%s", mname, hint);
        if (md) diag_note(md->name_loc, "'%s' is a %s", mname, kind_name(md->kind));
      } else {
        diag_fatal_noloc("--model '%s' is not a model in this file%s", mname, hint);
      }
      return -1;
    }
    t->model = md;
  } else {
    for (int i = 0; i < m->decls.len; i++) {
      Decl *md = m->decls.data[i];
      if (md->kind != D_MODEL) continue;
      if (t->model) {
        diag_error(md->name_loc, "more than one model, and nothing says which to use (write "
                                 "model = NAME in the train block, or pass --model NAME)");
        diag_note(t->model->name_loc, "'%s' is also a model", t->model->name);
        return -1;
      }
      t->model = md;
    }
    if (t->model) info_of(t->model)->used = true;
  }
  t->model_name = t->model ? t->model->name : NULL;

  /* mesh */
  Arg *mesh = find_item(it, "mesh");
  if (opt->mesh) {
    if (mesh && mesh->value->kind == E_IDENT) sema_lookup_decl(m, mesh->value->str); /* marks it used */
    t->mesh = mesh_from_spec(m, opt->mesh);
    if (!t->mesh) return -1;
  } else if (mesh) {
    if (mesh->value->kind != E_IDENT) {
      diag_error(mesh->value->loc, "'mesh' must name a mesh, got %s", expr_desc(mesh->value));
      return -1;
    }
    Decl *md = sema_lookup_decl(m, mesh->value->str);
    if (!md || md->kind != D_MESH) {
      const char *s = md ? NULL : suggest_decl(m, mesh->value->str, D_MESH);
      if (md)
        diag_error(mesh->value->loc, "'%s' is not a mesh", mesh->value->str);
      else if (s)
        diag_error(mesh->value->loc, "unknown mesh '%s'; did you mean '%s'?", mesh->value->str, s);
      else
        diag_error(mesh->value->loc, "unknown mesh '%s'", mesh->value->str);
      if (md) diag_note(md->name_loc, "'%s' is a %s", md->name, kind_name(md->kind));
      return -1;
    }
    t->mesh = info_of(md)->mesh;
    if (!t->mesh) return -1; /* already reported */
  } else {
    t->mesh = mesh_from_spec(m, "1");
  }
  if (opt->memory > 0 && t->mesh) {
    Mesh *c = arena_alloc(sizeof *c);
    *c = *t->mesh;
    c->mem_bytes = opt->memory;
    c->mem_loc = (SrcLoc){0};
    c->mem_from_flag = true;
    t->mesh = c;
  }

  /* sizes */
  int64_t batch = int_item(m, it, "batch", 1, 1 << 24);
  int64_t seq = int_item(m, it, "seq", 1, 1 << 24);
  int64_t micro = int_item(m, it, "microbatch", 1, 1 << 24);
  int64_t steps = int_item(m, it, "steps", 0, 1 << 30);
  int64_t seed = int_item(m, it, "seed", 0, (int64_t)1 << 40);
  if (batch < 0 || seq < 0 || micro < 0 || steps < 0 || seed < 0) rc = -1;
  t->batch = batch ? batch : 1;
  t->seq = seq;
  t->microbatch = micro;
  t->microbatch_given = micro > 0;
  /* 0 is a valid number of steps (and seed): only absence means default. */
  t->steps = find_item(it, "steps") ? steps : 10;
  t->seed = find_item(it, "seed") ? seed : 1337;

  /* optimizer */
  Optimizer *o = &t->opt;
  *o = (Optimizer){"adamw", 3e-4, 0.9, 0.999, 1e-8, 0.0, 0.0, 1.0, 0.0, 0, "cosine",
                   .block = 1024, .precondition_every = 10, .start_preconditioning = 20,
                   .graft = 0, .root = 0, .graft_eps = 1e-8, .decay_rate = 0.8,
                   .clip_threshold = 1.0};
  Arg *oa = find_item(it, "optimizer");
  if (oa && check_optimizer(m, oa->value, o)) rc = -1;

  /* precision */
  t->precision = DT_F32;
  Arg *pa = find_item(it, "precision");
  if (pa) {
    Expr *v = pa->value;
    int dt = (v->kind == E_IDENT) ? ir_dtype_from_name(strcmp(v->str, "fp32") == 0   ? "f32"
                                                       : strcmp(v->str, "bf16") == 0 ? "bf16"
                                                       : strcmp(v->str, "fp16") == 0 ? "f16"
                                                                                     : v->str)
                                  : -1;
    if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16) {
      diag_error(v->loc, "precision must be fp32, bf16 or fp16, got %s", expr_desc(v));
      rc = -1;
    } else {
      t->precision = (DType)dt;
      t->precision_loc = v->loc;
    }
  }
  Arg *da = find_item(it, "data");
  if (da) {
    if (da->value->kind != E_STRING) {
      diag_error(da->value->loc, "'data' must be a file name in quotes, got %s",
                 expr_desc(da->value));
      rc = -1;
    } else {
      t->data = da->value->str;
    }
  }

  /* plan: train block, then --strategy on top (the command line wins) */
  plan_default(&t->plan);
  t->plan_origin = "default";
  if (d && train_plan(m, it, &t->plan, &t->plan_loc)) return -1;
  if (t->plan.given || t->plan.is_auto) t->plan_origin = "train block";
  char err[256];
  if (opt->strategy) {
    Plan p;
    plan_default(&p);
    int off, len;
    if (parse_spec_at(opt->strategy, &p, err, sizeof err, &off, &len)) {
      diag_fatal_noloc("--strategy '%s': %s", opt->strategy, err);
      return -1;
    }
    t->plan = p;
    t->plan_origin = "--strategy";
    t->plan_loc = (SrcLoc){0};
    t->cli_strategy = opt->strategy;
  }
  unsigned keys;
  if (plan_resolve_keys(&t->plan, t->mesh->ndev, err, sizeof err, &keys)) {
    if (t->plan_loc.file) {
      diag_error(sema_plan_key_loc(t, keys), "%s", err);
      if (!keys) mesh_note(t, opt);
    } else {
      if (opt->strategy)
        diag_fatal_noloc("--strategy '%s': %s", opt->strategy, err);
      else
        diag_fatal_noloc("%s", err);
      if (!keys) mesh_note(t, opt);
    }
    return -1;
  }
  if (rc) return rc;

  /* batch arithmetic: batch = dp * microbatch * microbatches */
  Plan *p = &t->plan;
  if (!p->is_auto) {
    Arg *ba = find_item(it, "batch");
    const char *dflt = ba ? "" : " (the default; set batch = N in the train block)";
    SrcLoc bl = ba ? ba->value->loc : d ? d->loc : t->plan_loc;
    if (t->batch % p->dp) {
      if (bl.file)
        diag_error(bl, "batch %lld%s is not divisible by the data-parallel size dp=%d",
                   (long long)t->batch, dflt, p->dp);
      else
        diag_fatal_noloc("batch %lld%s is not divisible by the data-parallel size dp=%d",
                         (long long)t->batch, dflt, p->dp);
      dp_note(t, opt);
      return -1;
    }
    int64_t per_rank = t->batch / p->dp;
    if (p->mb && per_rank % p->mb) {
      SrcLoc l = sema_plan_key_loc(t, PLAN_MB);
      if (l.file)
        diag_error(l, "mb=%d microbatches do not divide the per-rank batch %lld (batch %lld / dp %d)",
                   p->mb, (long long)per_rank, (long long)t->batch, p->dp);
      else
        diag_fatal_noloc("mb=%d microbatches do not divide the per-rank batch %lld (batch %lld / "
                         "dp %d)", p->mb, (long long)per_rank, (long long)t->batch, p->dp);
      return -1;
    }
    if (!t->microbatch) t->microbatch = p->mb ? per_rank / p->mb : per_rank;
    if (per_rank % t->microbatch) {
      Arg *ma2 = find_item(it, "microbatch");
      SrcLoc ml = ma2 ? ma2->value->loc : bl;
      if (ml.file)
        diag_error(ml, "microbatch %lld does not divide the per-rank batch %lld (batch %lld / dp %d)",
                   (long long)t->microbatch, (long long)per_rank, (long long)t->batch, p->dp);
      else
        diag_fatal_noloc("microbatch %lld does not divide the per-rank batch %lld",
                         (long long)t->microbatch, (long long)per_rank);
      if (p->dp > 1) dp_note(t, opt);
      return -1;
    }
    int64_t nmb = per_rank / t->microbatch;
    if (p->mb && p->mb != nmb) {
      SrcLoc l = sema_plan_key_loc(t, PLAN_MB);
      diag_error(l.file ? l : bl,
                 "mb=%d microbatches disagree with batch %lld / dp %d / microbatch %lld = %lld",
                 p->mb, (long long)t->batch, p->dp, (long long)t->microbatch, (long long)nmb);
      return -1;
    }
    p->mb = (int)nmb;
    if (p->schedule == SCHED_INTERLEAVED && p->pp > 1 && nmb % p->pp) {
      SrcLoc l = sema_plan_key_loc(t, PLAN_SCHED);
      diag_error(l.file ? l : bl,
                 "the interleaved schedule needs the number of microbatches (%lld) to be a "
                 "multiple of pp=%d", (long long)nmb, p->pp);
      return -1;
    }
  } else if (!t->microbatch) {
    t->microbatch = t->batch;
  }
  for (int k = 0; k < PLAN_NKEYS; k++) t->key_loc[k] = sema_plan_key_loc(t, 1u << k);
  return 0;
}

/* ---- the whole program ---- */

static const char *dirname_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return ".";
  if (slash == path) return "/";
  return arena_strndup(path, (size_t)(slash - path));
}

Module *sema_run(Program *prog, const SemaOptions *opt) {
  Module *m = arena_alloc(sizeof *m);
  m->prog = prog;
  m->cuda = opt->cuda;
  m->source = prog->file->path;
  m->base_dir = dirname_of(prog->file->path);
  infos = (PtrVec){0};
  by_name = (StrMap){0};
  const_chain = const_refs = (PtrVec){0};
  Decl *train = NULL;

  /* Names: one namespace for constants, functions, layers, models, meshes. */
  for (int i = 0; i < prog->decls.len; i++) {
    Decl *d = prog->decls.data[i];
    if (d->kind == D_TRAIN) {
      if (train) {
        diag_error(d->loc, "more than one train block");
        diag_note(train->loc, "the first train block is here");
        continue;
      }
      train = d;
      continue;
    }
    DeclInfo *previn = strmap_get(&by_name, d->name);
    Decl *prev = previn ? previn->d : NULL;
    if (prev) {
      diag_error(d->name_loc, "redefinition of '%s'", d->name);
      diag_note(prev->name_loc, "previous definition of '%s' as a %s is here", d->name,
                kind_name(prev->kind));
      continue;
    }
    if (builtin_exists(d->name)) {
      diag_error(d->name_loc, "'%s' is a builtin layer and cannot be redefined", d->name);
      continue;
    }
    vec_push(&m->decls, d);
    DeclInfo *in = arena_alloc(sizeof *in);
    in->d = d;
    vec_push(&infos, in);
    strmap_put(&by_name, d->name, in);
  }

  for (int i = 0; i < m->decls.len; i++) {
    Decl *d = m->decls.data[i];
    DeclInfo *in = info_of(d);
    double v;
    bool is_int;
    switch (d->kind) {
    case D_CONST:
      eval_const_decl(m, d, &v, &is_int, NULL);
      break;
    case D_USE:
      in->fn = cimp_import(d->header, m->base_dir, d->name, d->header_loc);
      if (in->fn) vec_push(&m->fns, in->fn);
      break;
    case D_LAYER:
      /* Layers are generic: a parameter takes the type of its argument. */
      for (int k = 0; k < d->params.len; k++) {
        Param *p = d->params.data[k];
        if (p->type)
          diag_error(p->type->loc, "layer parameter '%s' cannot have a type (only model inputs "
                     "do; it takes the type of its argument)", p->name);
      }
      break;
    case D_MESH:
      in->mesh = check_mesh(m, d);
      if (in->mesh) vec_push(&m->meshes, in->mesh);
      break;
    default:
      break;
    }
  }
  if (diag_error_count()) return m;

  if (check_train(m, train, opt) == 0 && m->train.model) m->lowerable = true;
  return m;
}

/* Unused declarations are warnings, after everything (lowering included)
 * had its chance to use them. */
void sema_warn_unused(Module *m) {
  for (int i = 0; i < m->decls.len && !diag_error_count(); i++) {
    DeclInfo *in = infos.data[i];
    Decl *d = in->d;
    if (in->used || d->kind == D_MODEL) continue;
    if (d->kind == D_MESH && (!m->train.decl || m->train.mesh == in->mesh)) continue;
    diag_warning(d->name_loc, "%s '%s' is never used", kind_name(d->kind), d->name);
  }
}
