/* lower.c — runs the model body as a small interpreter over the AST,
 * inlining user layers and lowering builtin layers to primitive IR ops on
 * concrete shapes.  Shape errors point at the DSL call site. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "builtins.h"
#include "sema.h"


/* ---- interpreter values ---- */

typedef enum { LV_NONE, LV_NUM, LV_BOOL, LV_STR, LV_TENSOR, LV_LAYER, LV_BUILTIN, LV_FN, LV_TUPLE, LV_WORD } LvKind;

typedef struct LVal {
  LvKind k;
  double num;
  bool is_int;
  const char *s;     /* LV_STR, LV_WORD */
  Value *t;
  Decl *layer;
  int builtin;
  ScalarFn *fn;
  PtrVec elems;      /* LV_TUPLE: LVal* */
  SrcLoc loc;
} LVal;

static const char *lv_kind_name(const LVal *v) {
  switch (v->k) {
  case LV_NONE: return "nothing";
  case LV_NUM: return v->is_int ? "an integer" : "a number";
  case LV_BOOL: return "a boolean";
  case LV_STR: return "a string";
  case LV_TENSOR: return "a tensor";
  case LV_LAYER: return "a layer";
  case LV_BUILTIN: return "a builtin layer";
  case LV_FN: return v->fn->header ? "an imported function" : "a builtin function";
  case LV_TUPLE: return "a tuple";
  case LV_WORD: return "a word";
  }
  return "a value";
}

typedef struct Var {
  const char *name;
  LVal v;
  SrcLoc loc;
} Var;

typedef struct Scope {
  struct Scope *parent;  /* NULL: next is the global declarations */
  PtrVec vars;           /* Var* */
} Scope;

typedef struct Ctx {
  Module *m;
  Graph *g;
  TrainCfg *t;
  const char *path;      /* current parameter path prefix ("" at the model) */
  PtrVec stack;          /* Decl* of layers being called */
  PtrVec named;          /* bodies whose call sites have names */
  PtrVec embeds;         /* Value* embedding tables, for tied = embedding */
  StrMap param_names;    /* parameter path -> Value*, to catch duplicates */
  Stmt *repeat;          /* the outermost repeat being unrolled, or NULL */
  long steps;            /* statements executed so far */
  bool failed;
  bool no_trace;         /* the error is at a repeat: no "in layer" notes */
  /* Tensor-parallel role of the next linear's weight (TpHint) and the
   * segments of its output dim, set by the builtins that know it. */
  int tph, tph_nseg;
  int64_t tph_seg[3];
  ScalarFn *ewfn[EW_COUNT]; /* the builtin functions used so far */
} Ctx;

/* Unrolling limits: a model of thousands of transformer layers stays far
 * below them; a typo such as nested `repeat 100000` fails fast instead of
 * exhausting time and memory. */
enum { MAX_CALL_DEPTH = 64, MAX_REPEAT = 100000, MAX_NODES = 1 << 18, MAX_STEPS = 1 << 17 };

/* Reported at the outermost repeat when there is one: it is the likely
 * cause. */
static void too_large(Ctx *c, SrcLoc loc, const char *what, int limit) {
  if (c->repeat) {
    diag_error(c->repeat->value->loc, "repeat unrolls the model into too many %s (limit is %d)",
               what, limit);
    c->no_trace = true;
  } else {
    diag_error(loc, "the model has too many %s (limit is %d)", what, limit);
  }
  c->failed = true;
}

static bool eval(Ctx *c, Scope *s, Expr *e, LVal *out);

static Var *scope_find(Scope *s, const char *name) {
  for (; s; s = s->parent)
    for (int i = s->vars.len - 1; i >= 0; i--) {
      Var *v = s->vars.data[i];
      if (!strcmp(v->name, name)) return v;
    }
  return NULL;
}

static void scope_set(Scope *s, const char *name, LVal v, SrcLoc loc) {
  for (int i = 0; i < s->vars.len; i++) {
    Var *x = s->vars.data[i];
    if (!strcmp(x->name, name)) {
      x->v = v;
      return;
    }
  }
  Var *x = arena_alloc(sizeof *x);
  x->name = name;
  x->v = v;
  x->loc = loc;
  vec_push(&s->vars, x);
}

static void unknown_name(Ctx *c, Scope *s, Expr *e) {
  PtrVec cands = {0};
  for (Scope *p = s; p; p = p->parent)
    for (int i = 0; i < p->vars.len; i++) vec_push(&cands, (void *)((Var *)p->vars.data[i])->name);
  for (int i = 0; i < c->m->decls.len; i++) vec_push(&cands, (void *)((Decl *)c->m->decls.data[i])->name);
  for (int i = 0; i < B_COUNT; i++) vec_push(&cands, (void *)builtins[i].name);
  for (int i = 0; i < EW_COUNT; i++) vec_push(&cands, (void *)ew_builtins[i].name);
  const char *sug = sema_suggest(e->str, (const char *const *)cands.data, cands.len);
  if (sug)
    diag_error(e->loc, "unknown name '%s'; did you mean '%s'?", e->str, sug);
  else
    diag_error(e->loc, "unknown name '%s'", e->str);
}

/* ---- call-site names (parameter paths) ---- */

static void count_calls(Ctx *c, Expr *e, PtrVec *sites) {
  if (!e) return;
  switch (e->kind) {
  case E_CALL: {
    for (int i = 0; i < e->args.len; i++) count_calls(c, ((Arg *)e->args.data[i])->value, sites);
    int b = builtin_id(e->str);
    Decl *d = b < 0 ? sema_lookup_decl(c->m, e->str) : NULL;
    if ((b >= 0 && builtins[b].pname) || (d && d->kind == D_LAYER)) vec_push(sites, e);
    break;
  }
  case E_BIN:
    count_calls(c, e->lhs, sites);
    count_calls(c, e->rhs, sites);
    break;
  case E_NEG:
  case E_UNIT:
    count_calls(c, e->lhs, sites);
    break;
  case E_TUPLE:
    for (int i = 0; i < e->args.len; i++) count_calls(c, e->args.data[i], sites);
    break;
  default:
    break;
  }
}

static const char *site_base(Expr *e) {
  int b = builtin_id(e->str);
  return b >= 0 ? builtins[b].pname : e->str;
}

/* Names every call site of one body: "ln" when a kind appears once, "ln_1",
 * "ln_2", ... in source order otherwise.  Repeat bodies are their own
 * namespace: `repeat N { x = block(x) }` becomes "blocks.<i>". */
static void name_sites(Ctx *c, PtrVec *body) {
  PtrVec sites = {0};
  for (int i = 0; i < body->len; i++) {
    Stmt *st = body->data[i];
    if (st->kind == S_REPEAT) {
      name_sites(c, &st->body);
      continue;
    }
    count_calls(c, st->value, &sites);
  }
  /* Counts per base name first, then numbers in source order: linear in
   * the number of sites (a 1,000-layer model is one body). */
  StrMap total = {0}, seen = {0};
  for (int i = 0; i < sites.len; i++) {
    const char *base = site_base(sites.data[i]);
    strmap_put(&total, base, (void *)((intptr_t)strmap_get(&total, base) + 1));
  }
  for (int i = 0; i < sites.len; i++) {
    Expr *e = sites.data[i];
    const char *base = site_base(e);
    intptr_t k = (intptr_t)strmap_get(&seen, base) + 1;
    strmap_put(&seen, base, (void *)k);
    e->pname = (intptr_t)strmap_get(&total, base) == 1 ? base : arena_printf("%s_%d", base, (int)k);
  }
}

static void ensure_named(Ctx *c, PtrVec *body) {
  for (int i = 0; i < c->named.len; i++)
    if (c->named.data[i] == body) return;
  vec_push(&c->named, body);
  name_sites(c, body);
}

/* The repeat's component: `as NAME`, else the plural of the one user layer
 * its body calls (that call then adds no component), else "layers". */
static const char *repeat_name(Ctx *c, Stmt *st, Expr **only) {
  *only = NULL;
  if (st->name) return st->name;
  PtrVec sites = {0};
  for (int i = 0; i < st->body.len; i++) {
    Stmt *b = st->body.data[i];
    if (b->kind != S_REPEAT) count_calls(c, b->value, &sites);
  }
  Expr *layer_site = NULL;
  int nlayer = 0;
  for (int i = 0; i < sites.len; i++) {
    Expr *e = sites.data[i];
    if (builtin_id(e->str) < 0) {
      nlayer++;
      layer_site = e;
    }
  }
  if (nlayer == 1) {
    *only = layer_site;
    return arena_printf("%ss", layer_site->str);
  }
  return "layers";
}

static const char *join(const char *path, const char *comp) {
  if (!comp || !*comp) return path;
  if (!*path) return comp;
  return arena_printf("%s.%s", path, comp);
}

/* ---- helpers for building IR ---- */

static Shape shp1(int64_t a) { return ir_shape(1, (int64_t[]){a}); }
static Shape shp2(int64_t a, int64_t b) { return ir_shape(2, (int64_t[]){a, b}); }

static Value *op(Ctx *c, OpKind k, Value **in, int nin, const Attrs *a, SrcLoc loc, const char *what) {
  if (c->g->nodes.len >= MAX_NODES) {
    too_large(c, loc, "operations", MAX_NODES);
    return NULL;
  }
  Node *n = ir_add(c->g, k, in, nin, a, loc, c->path, what);
  if (!n) {
    c->failed = true;
    return NULL;
  }
  return n->out;
}

static Value *op1(Ctx *c, OpKind k, Value *x, SrcLoc loc, const char *what) {
  return op(c, k, &x, 1, NULL, loc, what);
}

static Value *op2(Ctx *c, OpKind k, Value *x, Value *y, SrcLoc loc, const char *what) {
  Value *in[2] = {x, y};
  return op(c, k, in, 2, NULL, loc, what);
}

static Value *param(Ctx *c, const char *comp, const char *leaf, Shape s, SrcLoc loc, bool decay,
                    const char *init) {
  if (c->g->nodes.len >= MAX_NODES) {
    too_large(c, loc, "operations", MAX_NODES);
    return NULL;
  }
  const char *name = join(join(c->path, comp), leaf);
  Value *p = strmap_get(&c->param_names, name);
  if (p) {
    diag_error(loc, "parameter '%s' is created twice", name);
    diag_note(p->loc, "first created here; give the calls different names with name = \"...\"");
    c->failed = true;
    return NULL;
  }
  for (int i = 0; i < s.ndim; i++)
    if (s.d[i].n < 1 || s.d[i].n > ((int64_t)1 << 40)) {
      diag_error(loc, "parameter '%s' has an invalid size %lld in dimension %d", name,
                 (long long)s.d[i].n, i);
      c->failed = true;
      return NULL;
    }
  Value *v = ir_param(c->g, name, s, loc, decay, init);
  strmap_put(&c->param_names, name, v);
  return v;
}

/* ---- argument binding for builtins ---- */

typedef struct BArgs {
  LVal v[12];
  bool given[12];
  SrcLoc loc[12];       /* the value */
  SrcLoc argloc[12];    /* the argument: its name, or the value if positional */
} BArgs;

static bool bind_builtin(Ctx *c, Scope *s, Expr *call, const char *const *names, int n, BArgs *b) {
  memset(b, 0, sizeof *b);
  int pos = 0;
  bool ok = true;
  for (int i = 0; i < call->args.len; i++) {
    Arg *a = call->args.data[i];
    int slot;
    if (!a->name) {
      if (pos >= n || !strcmp(names[pos], "name")) {
        char list[160] = "";
        int o = 0;
        for (int k = 0; k < pos && o < (int)sizeof list; k++)
          o += snprintf(list + o, sizeof list - (size_t)o, "%s%s", k ? ", " : "", names[k]);
        diag_error(a->loc, "%s: too many positional arguments (it takes %d: %s)", call->str, pos,
                   list);
        ok = false;
        continue;
      }
      slot = pos++;
    } else {
      slot = -1;
      for (int k = 0; k < n; k++)
        if (!strcmp(names[k], a->name)) slot = k;
      if (slot < 0) {
        const char *sug = sema_suggest(a->name, names, n);
        if (sug)
          diag_error(a->loc, "%s: unknown argument '%s'; did you mean '%s'?", call->str, a->name, sug);
        else
          diag_error(a->loc, "%s: unknown argument '%s'", call->str, a->name);
        ok = false;
        continue;
      }
    }
    if (b->given[slot]) {
      diag_error(a->loc, "%s: argument '%s' is given twice", call->str, names[slot]);
      diag_note(b->argloc[slot], "first given here");
      ok = false;
      continue;
    }
    if (!eval(c, s, a->value, &b->v[slot])) {
      ok = false;
      continue;
    }
    b->given[slot] = true;
    b->loc[slot] = a->value->loc;
    b->argloc[slot] = a->loc;
  }
  return ok;
}

static bool need(Expr *call, BArgs *b, int slot, const char *const *names) {
  if (b->given[slot]) return true;
  diag_error(call->loc, "%s: missing argument '%s'", call->str, names[slot]);
  return false;
}

static bool want_tensor(Expr *call, BArgs *b, int slot, const char *const *names, bool is_float) {
  if (!need(call, b, slot, names)) return false;
  if (b->v[slot].k != LV_TENSOR) {
    diag_error(b->loc[slot], "%s: '%s' must be a tensor, got %s", call->str, names[slot],
               lv_kind_name(&b->v[slot]));
    return false;
  }
  DType t = b->v[slot].t->dtype;
  bool f = t != DT_I32 && t != DT_U16;
  if (is_float != f) {
    diag_error(b->loc[slot], "%s: '%s' must be %s, got %s", call->str, names[slot],
               is_float ? "a floating-point tensor" : "an integer tensor", ir_dtype_name(t));
    return false;
  }
  return true;
}

/* An integer argument >= lo; `dflt` when absent (dflt < 0: required). */
static bool want_int(Expr *call, BArgs *b, int slot, const char *const *names, int64_t dflt,
                     int64_t lo, int64_t *out) {
  if (!b->given[slot]) {
    if (dflt < 0) return need(call, b, slot, names);
    *out = dflt;
    return true;
  }
  LVal *v = &b->v[slot];
  if (v->k != LV_NUM || !v->is_int) {
    diag_error(b->loc[slot], "%s: '%s' must be an integer, got %s", call->str, names[slot],
               lv_kind_name(v));
    return false;
  }
  if (v->num < (double)lo || v->num > 1e12) {
    diag_error(b->loc[slot], "%s: '%s' must be at least %lld, got %.0f", call->str, names[slot],
               (long long)lo, v->num);
    return false;
  }
  *out = (int64_t)v->num;
  return true;
}

static bool want_num(Expr *call, BArgs *b, int slot, const char *const *names, double dflt,
                     double lo, double hi, double *out) {
  if (!b->given[slot]) {
    *out = dflt;
    return true;
  }
  LVal *v = &b->v[slot];
  if (v->k != LV_NUM || !(v->num >= lo && v->num <= hi)) {
    if (v->k != LV_NUM)
      diag_error(b->loc[slot], "%s: '%s' must be a number, got %s", call->str, names[slot],
                 lv_kind_name(v));
    else
      diag_error(b->loc[slot], "%s: '%s' must be between %g and %g, got %g", call->str,
                 names[slot], lo, hi, v->num);
    return false;
  }
  *out = v->num;
  return true;
}

static bool want_bool(Expr *call, BArgs *b, int slot, const char *const *names, bool dflt, bool *out) {
  if (!b->given[slot]) {
    *out = dflt;
    return true;
  }
  if (b->v[slot].k != LV_BOOL) {
    diag_error(b->loc[slot], "%s: '%s' must be true or false, got %s", call->str, names[slot],
               lv_kind_name(&b->v[slot]));
    return false;
  }
  *out = b->v[slot].num != 0;
  return true;
}

static const char *want_name(Expr *call, BArgs *b, int slot, const char *const *names) {
  if (!b->given[slot]) return call->pname;
  if (b->v[slot].k != LV_STR || !b->v[slot].s[0] || strchr(b->v[slot].s, '.')) {
    diag_error(b->loc[slot], "%s: 'name' must be a non-empty string without dots", call->str);
    return NULL;
  }
  return b->v[slot].s;
}

/* Points at the strategy key (a PLAN_* bit) behind a divisibility error. */
static void strategy_note(Ctx *c, unsigned key, const char *axis, int by) {
  SrcLoc l = sema_plan_key_loc(c->t, key);
  if (l.file)
    diag_note(l, "%s=%d is set here", axis, by);
  else if (c->t->cli_strategy)
    diag_note((SrcLoc){0}, "%s=%d comes from --strategy %s", axis, by, c->t->cli_strategy);
}

/* n must split evenly over `by` ranks of the strategy's `axis`; `hint`, if
 * any, is a note on how to fix it. */
static bool check_split(Ctx *c, SrcLoc loc, const char *what, int64_t n, const char *dim,
                        int by, const char *axis, unsigned key, const char *hint) {
  if (by <= 1 || n % by == 0) return true;
  diag_error(loc, "%s: %s %lld cannot be split over %s=%d", what, dim, (long long)n, axis, by);
  if (hint) diag_note(loc, "%s", hint);
  strategy_note(c, key, key == PLAN_TP ? "tp" : key == PLAN_TP2D ? "tp2d" : "sp", by);
  c->failed = true;
  return false;
}

static int64_t last_dim(Value *v) { return v->shape.ndim ? v->shape.d[v->shape.ndim - 1].n : 1; }

static void set_hint(Ctx *c, Value *p, int tph) {
  p->tph = (int8_t)tph;
  p->tph_nseg = tph == TPH_COL && c->tph_nseg > 1 ? (int8_t)c->tph_nseg : 1;
  for (int i = 0; i < p->tph_nseg && p->tph_nseg > 1; i++) p->tph_seg[i] = c->tph_seg[i];
}

/* The next lower_linear's weight is split as tph (segments: nseg sizes). */
static void next_linear(Ctx *c, int tph, int nseg, const int64_t *seg) {
  c->tph = tph;
  c->tph_nseg = nseg;
  for (int i = 0; seg && i < nseg && i < 3; i++) c->tph_seg[i] = seg[i];
}

/* y = x·Wᵀ + b; weight [out, in].  `w` non-NULL: use that weight (tied). */
static Value *lower_linear(Ctx *c, Value *x, int64_t out, bool bias, Value *w, const char *comp,
                           SrcLoc loc, const char *what, const char *init) {
  int tph = c->tph;
  c->tph = TPH_NONE;
  if (!w) {
    w = param(c, comp, "weight", shp2(out, last_dim(x)), loc, true, init);
    if (!w) return NULL;
    set_hint(c, w, tph);
  }
  Value *y = op2(c, OP_MATMUL, x, w, loc, what);
  if (!y) return NULL;
  if (bias) {
    Value *b = param(c, comp, "bias", shp1(out), loc, false, "zeros");
    if (!b) return NULL;
    if (tph == TPH_COL) set_hint(c, b, TPH_COL);
    y = op2(c, OP_ADD, y, b, loc, what);
  }
  return y;
}

static Value *apply_act(Ctx *c, Scope *s, LVal *act, Value *x, SrcLoc loc, Expr *site);

static Value *call_layer(Ctx *c, Decl *d, Expr *site, LVal *args, int nargs, SrcLoc loc,
                         const char *comp);

/* ---- builtin layers ---- */

static bool lower_builtin(Ctx *c, Scope *s, int b, Expr *call, LVal *out) {
  BArgs a;
  const char *what = builtins[b].name;
  SrcLoc loc = call->loc;
  Plan *p = &c->t->plan;
  memset(out, 0, sizeof *out);
  out->k = LV_TENSOR;
  out->loc = loc;
#define BIND(...)                                                   \
  static const char *const names[] = {__VA_ARGS__};                 \
  enum { NN = sizeof names / sizeof names[0] };                     \
  if (!bind_builtin(c, s, call, names, NN, &a)) return false
  switch (b) {
  case B_LINEAR: {
    BIND("x", "out", "bias", "tied", "name");
    int64_t n;
    bool bias = false;
    if (!want_tensor(call, &a, 0, names, true) || !want_int(call, &a, 1, names, -1, 1, &n) ||
        !want_bool(call, &a, 2, names, true, &bias))
      return false;
    const char *comp = want_name(call, &a, 4, names);
    if (!comp) return false;
    Value *w = NULL;
    if (a.given[3]) {
      LVal *t = &a.v[3];
      if (t->k == LV_BUILTIN && t->builtin == B_EMBEDDING) {
        if (c->embeds.len != 1) {
          diag_error(a.loc[3], "linear: tied = embedding needs exactly one embedding before it, "
                               "found %d", c->embeds.len);
          return false;
        }
        w = c->embeds.data[0];
      } else if (t->k == LV_TENSOR && t->t->role == ROLE_PARAM) {
        w = t->t;
      } else {
        diag_error(a.loc[3], "linear: 'tied' must be embedding or a parameter, got %s",
                   lv_kind_name(t));
        return false;
      }
      if (w->shape.ndim != 2 || w->shape.d[0].n != n || w->shape.d[1].n != last_dim(a.v[0].t)) {
        if (w->shape.ndim == 2 && w->shape.d[1].n != last_dim(a.v[0].t))
          diag_error(loc, "linear: input has %lld features, tied weight '%s' expects %lld",
                     (long long)last_dim(a.v[0].t), w->name, (long long)w->shape.d[1].n);
        else
          diag_error(loc, "linear: %lld outputs, but tied weight '%s' has %lld rows",
                     (long long)n, w->name, (long long)w->shape.d[0].n);
        diag_note(w->loc, "'%s' is created here", w->name);
        return false;
      }
      if (w == (c->embeds.len ? c->embeds.data[0] : NULL))
        check_split(c, loc, what, n, "vocabulary", p->tp, "tp", PLAN_TP, NULL);
    }
    out->t = lower_linear(c, a.v[0].t, n, bias, w, comp, loc, what, "normal");
    break;
  }
  case B_EMBEDDING: {
    BIND("tokens", "vocab", "dim", "name");
    int64_t vocab, dim;
    if (!want_tensor(call, &a, 0, names, false) || !want_int(call, &a, 1, names, -1, 1, &vocab) ||
        !want_int(call, &a, 2, names, -1, 1, &dim))
      return false;
    const char *comp = want_name(call, &a, 3, names);
    if (!comp) return false;
    if (!check_split(c, a.loc[1], what, vocab, "vocabulary", p->tp, "tp", PLAN_TP,
                     arena_printf("pad the vocabulary to a multiple of %d (e.g. %lld)", p->tp * 64,
                                  (long long)((vocab + p->tp * 64 - 1) / (p->tp * 64) *
                                              (p->tp * 64)))) ||
        !check_split(c, a.loc[1], what, vocab, "vocabulary", p->tp2d, "tp2d", PLAN_TP2D, NULL))
      return false;
    Value *w = param(c, comp, "weight", shp2(vocab, dim), loc, true, "normal");
    if (!w) return false;
    w->tph = TPH_VOCAB;
    vec_push(&c->embeds, w);
    out->t = op2(c, OP_GATHER, w, a.v[0].t, loc, what);
    break;
  }
  case B_POSITIONAL: {
    BIND("len", "dim", "name");
    int64_t len, dim;
    if (!want_int(call, &a, 0, names, -1, 1, &len) || !want_int(call, &a, 1, names, -1, 1, &dim))
      return false;
    const char *comp = want_name(call, &a, 2, names);
    if (!comp) return false;
    Value *w = param(c, comp, "weight", shp2(len, dim), loc, true, "normal");
    if (!w) return false;
    /* Keep the sequence dim's symbolic name so shapes print as T=... */
    for (int i = 0; i < c->g->nsym; i++)
      if (c->g->symval[i] == len && !strcmp(c->g->symname[i], "T")) w->shape.d[0].sym = i;
    out->t = w;
    break;
  }
  case B_LAYERNORM:
  case B_RMSNORM: {
    BIND("x", "eps", "name");
    double eps;
    if (!want_tensor(call, &a, 0, names, true) ||
        !want_num(call, &a, 1, names, b == B_LAYERNORM ? 1e-5 : 1e-6, 0, 1, &eps))
      return false;
    const char *comp = want_name(call, &a, 2, names);
    if (!comp) return false;
    int64_t cdim = last_dim(a.v[0].t);
    Value *w = param(c, comp, "weight", shp1(cdim), loc, false, "ones");
    if (!w) return false;
    Value *in[3] = {a.v[0].t, w, NULL};
    if (b == B_LAYERNORM) {
      in[2] = param(c, comp, "bias", shp1(cdim), loc, false, "zeros");
      if (!in[2]) return false;
    }
    Attrs at = {0};
    at.f[0] = eps;
    out->t = op(c, b == B_LAYERNORM ? OP_LAYERNORM : OP_RMSNORM, in, b == B_LAYERNORM ? 3 : 2, &at,
                loc, what);
    break;
  }
  case B_ATTENTION: {
    BIND("x", "heads", "kv_heads", "causal", "bias", "rope", "rope_theta", "dropout", "name");
    int64_t h, hk;
    bool causal = false, bias = false, rope = false; /* set by want_bool; gcc -O3 cannot tell */
    double theta, drop;
    if (!want_tensor(call, &a, 0, names, true) || !want_int(call, &a, 1, names, -1, 1, &h))
      return false;
    if (!want_int(call, &a, 2, names, h, 1, &hk) || !want_bool(call, &a, 3, names, true, &causal) ||
        !want_bool(call, &a, 4, names, true, &bias) || !want_bool(call, &a, 5, names, false, &rope) ||
        !want_num(call, &a, 6, names, 10000, 1, 1e9, &theta) ||
        !want_num(call, &a, 7, names, 0, 0, 0.999, &drop))
      return false;
    const char *comp = want_name(call, &a, 8, names);
    if (!comp) return false;
    Value *x = a.v[0].t;
    if (x->shape.ndim != 3) {
      char sh[128];
      ir_shape_str(c->g, x, sh, sizeof sh);
      diag_error(a.loc[0], "attention: input must be [B, T, C], got %s", sh);
      return false;
    }
    int64_t C = last_dim(x);
    if (C % h) {
      diag_error(a.loc[1], "attention: %lld features are not divisible by %lld heads",
                 (long long)C, (long long)h);
      return false;
    }
    if (h % hk) {
      diag_error(a.loc[2], "attention: %lld heads are not a multiple of %lld key/value heads",
                 (long long)h, (long long)hk);
      return false;
    }
    int64_t hd = C / h;
    if (rope && hd % 2) {
      diag_error(a.loc[5], "attention: rotary embeddings need an even head size, got %lld",
                 (long long)hd);
      return false;
    }
    if (!check_split(c, a.loc[1], what, h, "heads", p->tp, "tp", PLAN_TP, NULL) ||
        !check_split(c, a.given[2] ? a.loc[2] : a.loc[1], what, hk, "key/value heads", p->tp, "tp",
                     PLAN_TP, NULL) ||
        !check_split(c, loc, what, C, "features", p->tp2d, "tp2d", PLAN_TP2D, NULL) ||
        !check_split(c, a.loc[1], what, hk, "key/value heads", p->tp2d, "tp2d", PLAN_TP2D, NULL) ||
        !check_split(c, loc, what, x->shape.d[1].n, "sequence length", p->sp, "sp", PLAN_SP, NULL) ||
        !check_split(c, loc, what, x->shape.d[1].n, "sequence length",
                     p->sp_kind == SP_MEGATRON ? p->tp : 1, "tp (sp=megatron)", PLAN_TP, NULL))
      return false;
    const char *path0 = c->path;
    c->path = join(c->path, comp);
    int64_t B = x->shape.d[0].n, T = x->shape.d[1].n;
    Value *parts[3] = {NULL, NULL, NULL};
    int64_t starts[3] = {0, h * hd, (h + hk) * hd}, lens[3] = {h * hd, hk * hd, hk * hd};
    next_linear(c, TPH_COL, 3, lens);
    Value *qkv = lower_linear(c, x, (h + 2 * hk) * hd, bias, NULL, "qkv", loc, what, "normal");
    for (int i = 0; i < 3 && qkv; i++) {
      Attrs sa = {{starts[i], lens[i]}, 2, {0, 0}, NULL};
      Value *sl = op(c, OP_SLICE, &qkv, 1, &sa, loc, what);
      if (!sl) break;
      Attrs ra = {{B, T, i ? hk : h, hd}, 4, {0, 0}, NULL};
      parts[i] = op(c, OP_RESHAPE, &sl, 1, &ra, loc, what);
      if (parts[i] && rope && i < 2) {
        Attrs ro = {0};
        ro.f[0] = theta;
        parts[i] = op(c, OP_ROPE, &parts[i], 1, &ro, loc, what);
      }
    }
    Value *y = NULL;
    if (parts[0] && parts[1] && parts[2]) {
      Attrs at = {0};
      at.i[0] = causal;
      at.ni = 1;
      y = op(c, OP_ATTENTION, parts, 3, &at, loc, what);
    }
    if (y) {
      Attrs ra = {{B, T, h * hd}, 3, {0, 0}, NULL};
      y = op(c, OP_RESHAPE, &y, 1, &ra, loc, what);
    }
    if (y) next_linear(c, TPH_ROW, 1, NULL);
    if (y) y = lower_linear(c, y, C, bias, NULL, "proj", loc, what, "normal_scaled");
    if (y && drop > 0) {
      Attrs da = {0};
      da.f[0] = drop;
      y = op(c, OP_DROPOUT, &y, 1, &da, loc, what);
    }
    c->path = path0;
    out->t = y;
    break;
  }
  case B_MLP: {
    BIND("x", "hidden", "act", "bias", "out", "name");
    if (!want_tensor(call, &a, 0, names, true)) return false;
    Value *x = a.v[0].t;
    int64_t C = last_dim(x), hidden, outd;
    bool bias = false;
    if (!want_int(call, &a, 1, names, 4 * C, 1, &hidden) || !want_bool(call, &a, 3, names, true, &bias) ||
        !want_int(call, &a, 4, names, C, 1, &outd))
      return false;
    const char *comp = want_name(call, &a, 5, names);
    if (!comp) return false;
    if (!check_split(c, a.given[1] ? a.loc[1] : loc, what, hidden, "hidden size", p->tp, "tp",
                     PLAN_TP, NULL) ||
        !check_split(c, a.given[1] ? a.loc[1] : loc, what, hidden, "hidden size", p->tp2d, "tp2d",
                     PLAN_TP2D, NULL))
      return false;
    LVal act = {.k = LV_BUILTIN, .builtin = B_GELU};
    if (a.given[2]) act = a.v[2];
    const char *path0 = c->path;
    c->path = join(c->path, comp);
    Value *y;
    if (act.k == LV_BUILTIN && act.builtin == B_SWIGLU) {
      next_linear(c, TPH_COL, 1, NULL);
      Value *g = lower_linear(c, x, hidden, bias, NULL, "gate", loc, what, "normal");
      next_linear(c, TPH_COL, 1, NULL);
      Value *u = g ? lower_linear(c, x, hidden, bias, NULL, "up", loc, what, "normal") : NULL;
      if (g) g = op1(c, OP_SILU, g, loc, what);
      y = g && u ? op2(c, OP_MUL, g, u, loc, what) : NULL;
      next_linear(c, TPH_ROW, 1, NULL);
      if (y) y = lower_linear(c, y, outd, bias, NULL, "down", loc, what, "normal_scaled");
    } else {
      next_linear(c, TPH_COL, 1, NULL);
      y = lower_linear(c, x, hidden, bias, NULL, "fc", loc, what, "normal");
      /* The activation runs on the column shards: only elementwise ones can. */
      if (y) y = apply_act(c, s, &act, y, a.given[2] ? a.loc[2] : loc, call);
      next_linear(c, TPH_ROW, 1, NULL);
      if (y) y = lower_linear(c, y, outd, bias, NULL, "proj", loc, what, "normal_scaled");
    }
    c->path = path0;
    out->t = y;
    break;
  }
  case B_GELU:
  case B_RELU:
  case B_SILU:
  case B_SOFTMAX: {
    BIND("x");
    if (!want_tensor(call, &a, 0, names, true)) return false;
    OpKind k = b == B_GELU ? OP_GELU : b == B_RELU ? OP_RELU : b == B_SILU ? OP_SILU : OP_SOFTMAX;
    out->t = op1(c, k, a.v[0].t, loc, what);
    break;
  }
  case B_SWIGLU: {
    BIND("x");
    if (!want_tensor(call, &a, 0, names, true)) return false;
    LVal act = {.k = LV_BUILTIN, .builtin = B_SWIGLU};
    out->t = apply_act(c, s, &act, a.v[0].t, loc, call);
    break;
  }
  case B_DROPOUT: {
    BIND("x", "p");
    double pr;
    if (!want_tensor(call, &a, 0, names, true) || !want_num(call, &a, 1, names, 0, 0, 0.999, &pr))
      return false;
    Attrs da = {0};
    da.f[0] = pr;
    out->t = op(c, OP_DROPOUT, &a.v[0].t, 1, &da, loc, what);
    break;
  }
  case B_CROSS_ENTROPY: {
    BIND("logits", "targets", "classes");
    int64_t classes = 0;
    if (!want_tensor(call, &a, 0, names, true) || !want_tensor(call, &a, 1, names, false) ||
        !want_int(call, &a, 2, names, 0, 1, &classes))
      return false;
    /* classes (i4): the softmax over the first `classes` of the logits' last
     * dim, the rest unused columns (a vocabulary padded for aligned rows) */
    Attrs ca = {0};
    ca.i[4] = classes;
    ca.ni = classes ? 5 : 0;
    Value *in2[2] = {a.v[0].t, a.v[1].t};
    out->t = op(c, OP_CROSS_ENTROPY, in2, 2, &ca, loc, what);
    break;
  }
  default:
    return false;
  }
#undef BIND
  return out->t != NULL;
}

/* act may be a builtin activation, an imported scalar function or a layer
 * of one argument. */
static Value *apply_act(Ctx *c, Scope *s, LVal *act, Value *x, SrcLoc loc, Expr *site) {
  switch (act->k) {
  case LV_BUILTIN:
    switch (act->builtin) {
    case B_GELU: return op1(c, OP_GELU, x, loc, "gelu");
    case B_RELU: return op1(c, OP_RELU, x, loc, "relu");
    case B_SILU: return op1(c, OP_SILU, x, loc, "silu");
    case B_SWIGLU: {
      int64_t n = last_dim(x);
      if (n % 2) {
        diag_error(loc, "swiglu: the last dimension (%lld) must be even: it is split into gate "
                        "and value halves", (long long)n);
        c->failed = true;
        return NULL;
      }
      Attrs a0 = {{0, n / 2}, 2, {0, 0}, NULL}, a1 = {{n / 2, n / 2}, 2, {0, 0}, NULL};
      Value *g = op(c, OP_SLICE, &x, 1, &a0, loc, "swiglu");
      Value *u = g ? op(c, OP_SLICE, &x, 1, &a1, loc, "swiglu") : NULL;
      if (g) g = op1(c, OP_SILU, g, loc, "swiglu");
      return g && u ? op2(c, OP_MUL, g, u, loc, "swiglu") : NULL;
    }
    default:
      diag_error(loc, "'%s' cannot be used as an activation", builtins[act->builtin].name);
      c->failed = true;
      return NULL;
    }
  case LV_FN: {
    if (act->fn->nargs != 1) {
      diag_error(loc, "'%s' takes %d arguments; an activation takes one", act->fn->name,
                 act->fn->nargs);
      c->failed = true;
      return NULL;
    }
    Attrs a = {0};
    a.fn = act->fn;
    return op(c, OP_MAP, &x, 1, &a, loc, act->fn->name);
  }
  case LV_LAYER: {
    LVal arg = {.k = LV_TENSOR, .t = x, .loc = loc};
    return call_layer(c, act->layer, site, &arg, 1, loc, act->layer->name);
  }
  default:
    diag_error(loc, "an activation must be a builtin (gelu, relu, silu, swiglu), an imported "
                    "function or a layer, got %s", lv_kind_name(act));
    c->failed = true;
    return NULL;
  }
}

/* ---- statements and user layers ---- */

static bool exec_body(Ctx *c, Scope *s, PtrVec *body, LVal *ret, bool *returned, bool in_repeat);

static Value *call_layer(Ctx *c, Decl *d, Expr *site, LVal *args, int nargs, SrcLoc loc,
                         const char *comp) {
  for (int i = 0; i < c->stack.len; i++)
    if (c->stack.data[i] == d) {
      if (i == c->stack.len - 1) {
        diag_error(loc, "layer '%s' calls itself (recursion is not supported)", d->name);
      } else {
        char chain[256] = "";
        int o = 0;
        for (int j = i; j < c->stack.len && o < (int)sizeof chain; j++)
          o += snprintf(chain + o, sizeof chain - (size_t)o, "%s -> ",
                        ((Decl *)c->stack.data[j])->name);
        diag_error(loc, "layer '%s' is called recursively (%s%s); recursion is not supported",
                   d->name, chain, d->name);
      }
      diag_note(d->name_loc, "'%s' is defined here", d->name);
      c->failed = true;
      return NULL;
    }
  if (c->stack.len >= MAX_CALL_DEPTH) {
    diag_error(loc, "layers nested too deeply (limit is %d)", MAX_CALL_DEPTH);
    c->failed = true;
    c->no_trace = true;   /* a backtrace of the whole limit would be noise */
    return NULL;
  }
  Scope sc = {0};
  for (int i = 0; i < d->params.len; i++) {
    Param *pr = d->params.data[i];
    if (i < nargs && args[i].k != LV_NONE) {
      scope_set(&sc, pr->name, args[i], pr->loc);
    } else if (pr->deflt) {
      LVal v;
      if (!eval(c, &sc, pr->deflt, &v)) return NULL;
      scope_set(&sc, pr->name, v, pr->loc);
    } else {
      diag_error(loc, "missing argument '%s' in call to layer '%s'", pr->name, d->name);
      diag_note(pr->loc, "parameter '%s' is declared here", pr->name);
      c->failed = true;
      return NULL;
    }
  }
  vec_push(&c->stack, d);
  const char *path0 = c->path;
  c->path = join(c->path, comp);
  ensure_named(c, &d->body);
  LVal ret = {0};
  bool returned = false;
  int errors = diag_error_count();
  bool ok = exec_body(c, &sc, &d->body, &ret, &returned, false);
  c->path = path0;
  c->stack.len--;
  if (!ok) {
    /* A backtrace: the error is inside the layer; say which call got there. */
    if (diag_error_count() > errors && !c->no_trace)
      diag_note(loc, "in layer '%s', called here", d->name);
    return NULL;
  }
  if (!returned) {
    diag_error(d->end_loc, "layer '%s' ends without a return", d->name);
    diag_note(loc, "called from here");
    c->failed = true;
    return NULL;
  }
  if (ret.k != LV_TENSOR) {
    diag_error(loc, "layer '%s' returns %s, not a tensor", d->name, lv_kind_name(&ret));
    c->failed = true;
    return NULL;
  }
  return ret.t;
}

/* Binds a call's arguments to a user layer's parameters. */
static bool user_call(Ctx *c, Scope *s, Decl *d, Expr *call, LVal *out) {
  int np = d->params.len;
  if (np > 32) {
    diag_error(d->name_loc, "too many parameters (limit is 32)");
    return false;
  }
  LVal args[32];
  memset(args, 0, sizeof args);
  SrcLoc given[32] = {0};
  int pos = 0;
  bool ok = true;
  for (int i = 0; i < call->args.len; i++) {
    Arg *a = call->args.data[i];
    int slot = -1;
    if (!a->name) {
      if (pos >= np) {
        diag_error(a->loc, "too many arguments to layer '%s' (it takes %d)", d->name, np);
        diag_note(d->name_loc, "'%s' is defined here", d->name);
        ok = false;
        continue;
      }
      slot = pos++;
    } else {
      for (int k = 0; k < np; k++)
        if (!strcmp(((Param *)d->params.data[k])->name, a->name)) slot = k;
      if (slot < 0) {
        const char *pn[32];
        for (int k = 0; k < np; k++) pn[k] = ((Param *)d->params.data[k])->name;
        const char *sug = sema_suggest(a->name, pn, np);
        if (sug)
          diag_error(a->loc, "layer '%s' has no parameter '%s'; did you mean '%s'?", d->name,
                     a->name, sug);
        else
          diag_error(a->loc, "layer '%s' has no parameter '%s'", d->name, a->name);
        diag_note(d->name_loc, "'%s' is defined here", d->name);
        ok = false;
        continue;
      }
    }
    if (given[slot].file) {
      diag_error(a->loc, "layer '%s': argument '%s' is given twice", d->name,
                 ((Param *)d->params.data[slot])->name);
      diag_note(given[slot], "first given here");
      ok = false;
      continue;
    }
    if (!eval(c, s, a->value, &args[slot])) {
      ok = false;
      continue;
    }
    given[slot] = a->loc;
  }
  if (!ok) return false;
  const char *comp = call->pname ? call->pname : d->name;
  Value *t = call_layer(c, d, call, args, np, call->loc, comp);
  if (!t) return false;
  *out = (LVal){.k = LV_TENSOR, .t = t, .loc = call->loc};
  return true;
}

static Expr *repeat_only_site;  /* the call inside a repeat that adds no component */

static bool exec_body(Ctx *c, Scope *s, PtrVec *body, LVal *ret, bool *returned, bool in_repeat) {
  SrcLoc ret_loc = {0};
  for (int i = 0; i < body->len; i++) {
    Stmt *st = body->data[i];
    if (*returned) {
      diag_error(st->loc, "statement after return (it would never run)");
      diag_note(ret_loc, "the return is here");
      return false;
    }
    if (++c->steps > MAX_STEPS) {
      too_large(c, st->loc, "statements", MAX_STEPS);
      return false;
    }
    switch (st->kind) {
    case S_ASSIGN: {
      LVal v;
      if (!eval(c, s, st->value, &v)) return false;
      scope_set(s, st->name, v, st->name_loc);
      break;
    }
    case S_RETURN:
      if (in_repeat) {
        diag_error(st->loc, "return inside repeat (a repeat body cannot return)");
        return false;
      }
      if (!eval(c, s, st->value, ret)) return false;
      *returned = true;
      ret_loc = st->loc;
      break;
    case S_REPEAT: {
      LVal n;
      if (!eval(c, s, st->value, &n)) return false;
      if (n.k != LV_NUM || !n.is_int) {
        if (n.k == LV_NUM)
          diag_error(st->value->loc, "repeat count must be an integer, got %g", n.num);
        else
          diag_error(st->value->loc, "repeat count must be an integer, got %s", lv_kind_name(&n));
        return false;
      }
      if (n.num < 1 || n.num > MAX_REPEAT) {
        diag_error(st->value->loc, "repeat count must be between 1 and %d, got %.0f", MAX_REPEAT,
                   n.num);
        return false;
      }
      Expr *only;
      const char *rname = repeat_name(c, st, &only);
      const char *path0 = c->path;
      Expr *saved_only = repeat_only_site;
      Stmt *outer = c->repeat;
      if (!outer) c->repeat = st;
      for (int k = 0; k < (int)n.num; k++) {
        c->path = join(join(path0, rname), arena_printf("%d", k));
        repeat_only_site = only;
        bool r = false;
        if (!exec_body(c, s, &st->body, ret, &r, true)) {
          c->path = path0;
          repeat_only_site = saved_only;
          c->repeat = outer;
          return false;
        }
      }
      c->path = path0;
      repeat_only_site = saved_only;
      c->repeat = outer;
      break;
    }
    }
    if (c->failed) return false;
  }
  return true;
}

/* ---- expressions ---- */

static bool num_result(Expr *e, double a, double b, bool is_int, LVal *out) {
  double r = 0;
  switch (e->op) {
  case '+': r = a + b; break;
  case '-': r = a - b; break;
  case '*': r = a * b; break;
  case '/':
    if (b == 0) {
      diag_error(e->rhs->loc, "division by zero");
      return false;
    }
    r = a / b;
    if (is_int && fmod(a, b) != 0) is_int = false;
    break;
  case '%':
    if (b == 0) {
      diag_error(e->rhs->loc, "division by zero");
      return false;
    }
    if (!is_int) {
      diag_error(e->oploc, "'%%' needs integer operands, got %g %% %g", a, b);
      return false;
    }
    r = fmod(a, b);
    break;
  }
  *out = (LVal){.k = LV_NUM, .num = r, .is_int = is_int, .loc = e->loc};
  return true;
}

static bool eval_bin(Ctx *c, Scope *s, Expr *e, LVal *out) {
  LVal a, b;
  if (!eval(c, s, e->lhs, &a) || !eval(c, s, e->rhs, &b)) return false;
  if (a.k == LV_NUM && b.k == LV_NUM) return num_result(e, a.num, b.num, a.is_int && b.is_int, out);
  const char *opname = e->op == '+' ? "add" : e->op == '-' ? "sub" : e->op == '*' ? "mul" : "div";
  *out = (LVal){.k = LV_TENSOR, .loc = e->loc};
  if (a.k == LV_TENSOR && b.k == LV_TENSOR) {
    OpKind k = e->op == '+' ? OP_ADD : e->op == '-' ? OP_SUB : e->op == '*' ? OP_MUL : OP_COUNT;
    if (k == OP_COUNT) {
      diag_error(e->oploc, "'%c' is not defined between tensors", e->op);
      return false;
    }
    Value *x = a.t, *y = b.t;
    if (k != OP_SUB && y->shape.ndim > x->shape.ndim) {
      Value *t = x;
      x = y;
      y = t;
    }
    out->t = op2(c, k, x, y, e->oploc, opname);
    return out->t != NULL;
  }
  if ((a.k == LV_TENSOR && b.k == LV_NUM && (e->op == '*' || e->op == '/')) ||
      (a.k == LV_NUM && b.k == LV_TENSOR && e->op == '*')) {
    Value *x = a.k == LV_TENSOR ? a.t : b.t;
    double k = a.k == LV_NUM ? a.num : b.num;
    if (e->op == '/') {
      if (k == 0) {
        diag_error(e->rhs->loc, "division by zero");
        return false;
      }
      k = 1 / k;
    }
    Attrs at = {0};
    at.f[0] = k;
    out->t = op(c, OP_SCALE, &x, 1, &at, e->oploc, opname);
    return out->t != NULL;
  }
  diag_error(e->oploc, "cannot apply '%c' to %s and %s", e->op, lv_kind_name(&a), lv_kind_name(&b));
  return false;
}

static bool eval_ident(Ctx *c, Scope *s, Expr *e, LVal *out) {
  Var *v = scope_find(s, e->str);
  if (v) {
    *out = v->v;
    return true;
  }
  Decl *d = sema_lookup_decl(c->m, e->str);
  if (d) {
    switch (d->kind) {
    case D_CONST: {
      double x;
      bool is_int;
      if (sema_eval_number(c->m, e, &x, &is_int)) return false;
      *out = (LVal){.k = LV_NUM, .num = x, .is_int = is_int, .loc = e->loc};
      return true;
    }
    case D_LAYER:
      *out = (LVal){.k = LV_LAYER, .layer = d, .loc = e->loc};
      return true;
    case D_USE: {
      ScalarFn *fn = sema_decl_fn(d);
      if (!fn) return false;
      *out = (LVal){.k = LV_FN, .fn = fn, .loc = e->loc};
      return true;
    }
    default:
      diag_error(e->loc, "'%s' is a %s and cannot be used inside a model or layer", e->str,
                 d->kind == D_MODEL ? "model" : "mesh");
      diag_note(d->name_loc, "'%s' is declared here", e->str);
      return false;
    }
  }
  int b = builtin_id(e->str);
  if (b >= 0) {
    *out = (LVal){.k = LV_BUILTIN, .builtin = b, .loc = e->loc};
    return true;
  }
  /* A builtin function is a scalar function like an imported one. */
  int k = ew_builtin_id(e->str);
  if (k >= 0) {
    char err[256];
    if (!c->ewfn[k] && !(c->ewfn[k] = ew_builtin_fn(k, err, sizeof err))) {
      diag_error(e->loc, "internal: builtin '%s': %s", e->str, err);
      return false;
    }
    *out = (LVal){.k = LV_FN, .fn = c->ewfn[k], .loc = e->loc};
    return true;
  }
  /* Bare words used as option values (e.g. `schedule = cosine`) are not
   * meaningful inside model bodies. */
  unknown_name(c, s, e);
  return false;
}

static bool eval_call(Ctx *c, Scope *s, Expr *e, LVal *out) {
  Var *v = scope_find(s, e->str);
  LVal callee;
  if (v) {
    callee = v->v;
  } else {
    Expr id = *e;
    id.kind = E_IDENT;
    if (!eval_ident(c, s, &id, &callee)) return false;
  }
  switch (callee.k) {
  case LV_BUILTIN:
    return lower_builtin(c, s, callee.builtin, e, out);
  case LV_LAYER: {
    Expr *site = e;
    const char *pn = e->pname;
    if (e == repeat_only_site) e->pname = "";
    bool ok = user_call(c, s, callee.layer, site, out);
    e->pname = pn;
    return ok;
  }
  case LV_FN: {
    ScalarFn *fn = callee.fn;
    if (e->args.len != fn->nargs) {
      diag_error(e->loc, "'%s' takes %d argument%s, got %d", fn->name, fn->nargs,
                 fn->nargs == 1 ? "" : "s", e->args.len);
      return false;
    }
    Value *in[IR_MAXIN];
    double nums[IR_MAXIN];
    int ntensor = 0;
    if (fn->nargs > IR_MAXIN) {
      diag_error(e->loc, "'%s' has too many arguments (limit is %d)", fn->name, IR_MAXIN);
      return false;
    }
    for (int i = 0; i < e->args.len; i++) {
      Arg *a = e->args.data[i];
      LVal x;
      if (a->name) {
        diag_error(a->loc, "%s '%s' takes positional arguments only",
                   fn->header ? "imported function" : "builtin function", fn->name);
        return false;
      }
      if (!eval(c, s, a->value, &x)) return false;
      if (x.k == LV_TENSOR) {
        in[i] = x.t;
        ntensor++;
      } else if (x.k == LV_NUM) {
        nums[i] = x.num;
        in[i] = NULL;
      } else {
        diag_error(a->loc, "'%s': argument %d must be a tensor or a number, got %s", fn->name,
                   i + 1, lv_kind_name(&x));
        return false;
      }
    }
    if (ntensor == 0) {
      *out = (LVal){.k = LV_NUM, .num = sx_eval(fn->body, nums), .loc = e->loc};
      return true;
    }
    if (ntensor != fn->nargs) {
      diag_error(e->loc, "'%s': all arguments must be tensors of one shape (mixing numbers and "
                         "tensors is not supported)", fn->name);
      return false;
    }
    Attrs at = {0};
    at.fn = fn;
    *out = (LVal){.k = LV_TENSOR, .loc = e->loc};
    out->t = op(c, OP_MAP, in, fn->nargs, &at, e->loc, fn->name);
    return out->t != NULL;
  }
  default:
    diag_error(e->loc, "'%s' is %s, not something that can be called", e->str,
               lv_kind_name(&callee));
    return false;
  }
}

static bool eval(Ctx *c, Scope *s, Expr *e, LVal *out) {
  memset(out, 0, sizeof *out);
  out->loc = e->loc;
  if (c->failed) return false;
  bool ok = true;
  switch (e->kind) {
  case E_INT:
    *out = (LVal){.k = LV_NUM, .num = (double)e->ival, .is_int = true, .loc = e->loc};
    break;
  case E_FLOAT:
    *out = (LVal){.k = LV_NUM, .num = e->fval, .loc = e->loc};
    break;
  case E_BOOL:
    *out = (LVal){.k = LV_BOOL, .num = (double)e->ival, .loc = e->loc};
    break;
  case E_STRING:
    *out = (LVal){.k = LV_STR, .s = e->str, .loc = e->loc};
    break;
  case E_GRID:
    *out = (LVal){.k = LV_WORD, .s = e->str, .loc = e->loc};
    break;
  case E_IDENT:
    ok = eval_ident(c, s, e, out);
    break;
  case E_NEG: {
    LVal a;
    if (!eval(c, s, e->lhs, &a)) return false;
    if (a.k == LV_NUM) {
      *out = a;
      out->num = -a.num;
    } else if (a.k == LV_TENSOR) {
      Attrs at = {0};
      at.f[0] = -1;
      *out = (LVal){.k = LV_TENSOR, .loc = e->loc};
      out->t = op(c, OP_SCALE, &a.t, 1, &at, e->loc, "neg");
      ok = out->t != NULL;
    } else {
      diag_error(e->loc, "cannot negate %s", lv_kind_name(&a));
      ok = false;
    }
    break;
  }
  case E_BIN:
    ok = eval_bin(c, s, e, out);
    break;
  case E_UNIT: {
    double v;
    bool is_int;
    ok = sema_eval_number(c->m, e, &v, &is_int) == 0;
    *out = (LVal){.k = LV_NUM, .num = v, .loc = e->loc};
    break;
  }
  case E_CALL:
    ok = eval_call(c, s, e, out);
    break;
  case E_TUPLE:
    *out = (LVal){.k = LV_TUPLE, .loc = e->loc};
    for (int i = 0; i < e->args.len && ok; i++) {
      LVal *x = arena_alloc(sizeof *x);
      ok = eval(c, s, e->args.data[i], x);
      vec_push(&out->elems, x);
    }
    break;
  }
  if (!ok) c->failed = true;
  return ok;
}

/* ---- the model ---- */

int lower_model(Module *m) {
  TrainCfg *t = &m->train;
  Decl *d = t->model;
  Ctx c = {0};
  c.m = m;
  c.t = t;
  c.g = ir_graph_new(d->name);
  c.path = "";
  Scope sc = {0};

  /* Inputs: symbolic dims bind by position: the first is the batch
   * (microbatch), the second the sequence length (seq). */
  for (int i = 0; i < d->params.len; i++) {
    Param *p = d->params.data[i];
    if (!p->type) {
      diag_error(p->loc, "model input '%s' needs a type, e.g. %s: i32[B, T]", p->name, p->name);
      return -1;
    }
    int dt = ir_dtype_from_name(p->type->dtype);
    if (dt < 0) {
      diag_error(p->type->loc, "unknown element type '%s' (use f32, f64, bf16, f16, i32 or u16)",
                 p->type->dtype);
      return -1;
    }
    if (p->type->dims.len > IR_MAXDIM) {
      diag_error(p->type->loc, "too many dimensions (limit is %d)", IR_MAXDIM);
      return -1;
    }
    Shape sh = {0};
    sh.ndim = p->type->dims.len;
    for (int k = 0; k < sh.ndim; k++) {
      Expr *de = p->type->dims.data[k];
      sh.d[k].sym = -1;
      Decl *cd = de->kind == E_IDENT ? sema_lookup_decl(m, de->str) : NULL;
      if (de->kind == E_IDENT && !cd) {
        int sym = -1;
        for (int q = 0; q < c.g->nsym; q++)
          if (!strcmp(c.g->symname[q], de->str)) sym = q;
        if (sym < 0) {
          /* A new symbolic name that is one typo away from a constant is
           * probably that constant. */
          PtrVec consts = {0};
          for (int q = 0; q < m->decls.len; q++)
            if (((Decl *)m->decls.data[q])->kind == D_CONST)
              vec_push(&consts, (void *)((Decl *)m->decls.data[q])->name);
          const char *sug = sema_suggest(de->str, (const char *const *)consts.data, consts.len);
          int64_t val;
          if (k == 0) {
            val = t->microbatch ? t->microbatch : 1;
          } else if (k == 1) {
            if (!t->seq) {
              if (sug)
                diag_error(de->loc, "unknown constant '%s'; did you mean '%s'?", de->str, sug);
              else
                diag_error(de->loc, "'%s' is the sequence length: give seq = N in the train block",
                           de->str);
              return -1;
            }
            val = t->seq;
          } else {
            if (sug)
              diag_error(de->loc, "unknown constant '%s'; did you mean '%s'?", de->str, sug);
            else
              diag_error(de->loc, "only the first (batch) and second (sequence) dimensions may be "
                                  "symbolic; '%s' is dimension %d", de->str, k + 1);
            return -1;
          }
          if (c.g->nsym == 8) {
            diag_error(de->loc, "too many symbolic dimensions (limit is 8)");
            return -1;
          }
          sym = c.g->nsym++;
          c.g->symname[sym] = de->str;
          c.g->symval[sym] = val;
          scope_set(&sc, de->str, (LVal){.k = LV_NUM, .num = (double)val, .is_int = true}, de->loc);
        }
        sh.d[k].n = c.g->symval[sym];
        sh.d[k].sym = sym;
      } else {
        double v;
        bool is_int;
        if (sema_eval_number(m, de, &v, &is_int)) return -1;
        if (!is_int || v < 1) {
          diag_error(de->loc, "dimension must be a positive integer, got %g", v);
          return -1;
        }
        if (v > 1e9) {
          diag_error(de->loc, "dimension %.0f is larger than the limit of 1000000000", v);
          return -1;
        }
        sh.d[k].n = (int64_t)v;
      }
    }
    Value *in = ir_input(c.g, p->name, sh, (DType)dt, p->loc);
    scope_set(&sc, p->name, (LVal){.k = LV_TENSOR, .t = in, .loc = p->loc}, p->loc);
  }

  ensure_named(&c, &d->body);
  LVal ret = {0};
  bool returned = false;
  if (!exec_body(&c, &sc, &d->body, &ret, &returned, false)) return -1;
  if (!returned) {
    diag_error(d->end_loc, "model '%s' ends without returning a loss", d->name);
    return -1;
  }
  if (ret.k != LV_TENSOR || ret.t->shape.ndim != 0) {
    char sh[128] = "";
    if (ret.k == LV_TENSOR) ir_shape_str(c.g, ret.t, sh, sizeof sh);
    diag_error(ret.loc, "model '%s' must return a scalar loss, got %s%s%s", d->name,
               lv_kind_name(&ret), sh[0] ? " " : "", sh);
    return -1;
  }
  c.g->loss = ret.t;
  if (c.g->params.len == 0) diag_warning(d->name_loc, "model '%s' has no parameters", d->name);
  m->graph = c.g;
  return 0;
}
