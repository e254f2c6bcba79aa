/* sema.c — declarations, constants, `use` imports, meshes, the train block
 * and the plan.  Lowering of the model body lives in lower.c. */
#include "sema.h"

#include <math.h>
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

static int eval_const_decl(Module *m, Decl *d, double *out, bool *is_int);

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
        diag_error(e->rhs->loc, "division by zero");
        return -1;
      }
      if (*is_int && fmod(a, b) != 0) *is_int = false;
      *out = a / b;
      break;
    case '%':
      if (!*is_int) {
        diag_error(e->loc, "'%%' needs integer operands");
        return -1;
      }
      if (b == 0) {
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
    return 0;
  }
  case E_IDENT: {
    Decl *d = sema_lookup_decl(m, e->str);
    if (!d) {
      diag_error(e->loc, "unknown constant '%s'", e->str);
      return -1;
    }
    if (d->kind != D_CONST) {
      diag_error(e->loc, "'%s' is a %s, not a number", e->str, kind_name(d->kind));
      diag_note(d->name_loc, "'%s' is defined here", e->str);
      return -1;
    }
    return eval_const_decl(m, d, out, is_int);
  }
  default:
    diag_error(e->loc, "expected a number");
    return -1;
  }
}

static int eval_const_decl(Module *m, Decl *d, double *out, bool *is_int) {
  DeclInfo *in = info_of(d);
  if (in->state == 1) {
    diag_error(d->name_loc, "constant '%s' is defined in terms of itself", d->name);
    in->state = 3;
    return -1;
  }
  if (in->state == 3) return -1;
  if (in->state == 0) {
    in->state = 1;
    if (sema_eval_number(m, d->value, &in->value, &in->is_int)) {
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

static int check_items(PtrVec *items, const char *const *keys, int nkeys, const char *what) {
  int rc = 0;
  for (int i = 0; i < items->len; i++) {
    Arg *a = items->data[i];
    bool ok = false;
    for (int k = 0; k < nkeys; k++)
      if (!strcmp(keys[k], a->name)) ok = true;
    if (!ok) {
      const char *s = sema_suggest(a->name, keys, nkeys);
      if (s)
        diag_error(a->loc, "unknown %s key '%s'; did you mean '%s'?", what, a->name, s);
      else
        diag_error(a->loc, "unknown %s key '%s'", what, a->name);
      rc = -1;
    }
    for (int j = 0; j < i; j++) {
      Arg *b = items->data[j];
      if (!strcmp(a->name, b->name)) {
        diag_error(a->loc, "'%s' is given twice", a->name);
        diag_note(b->loc, "first given here");
        rc = -1;
      }
    }
  }
  return rc;
}

/* A positive integer item; 0 if absent.  Returns -1 on error. */
static int64_t int_item(Module *m, PtrVec *items, const char *key, int64_t lo, int64_t hi) {
  Arg *a = find_item(items, key);
  if (!a) return 0;
  double v;
  bool is_int;
  if (sema_eval_number(m, a->value, &v, &is_int)) return -1;
  if (!is_int) {
    diag_error(a->value->loc, "'%s' must be an integer, got %g", key, v);
    return -1;
  }
  if (v < (double)lo || v > (double)hi) {
    diag_error(a->value->loc, "'%s' must be between %lld and %lld, got %.0f", key, (long long)lo,
               (long long)hi, v);
    return -1;
  }
  return (int64_t)v;
}

static int num_item(Module *m, PtrVec *items, const char *key, double *out, double lo, double hi) {
  Arg *a = find_item(items, key);
  if (!a) return 0;
  bool is_int;
  if (sema_eval_number(m, a->value, out, &is_int)) return -1;
  if (!(*out >= lo && *out <= hi)) {
    diag_error(a->value->loc, "'%s' must be between %g and %g, got %g", key, lo, hi, *out);
    return -1;
  }
  return 1;
}

/* ---- meshes ---- */

static const char *const mesh_keys[] = {"devices", "nodes", "per_node", "device",
                                        "intra", "inter", "memory"};

static Mesh *check_mesh(Module *m, Decl *d) {
  PtrVec *it = &d->items;
  if (check_items(it, mesh_keys, 7, "mesh")) return NULL;
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
      diag_error(dev->value->loc, "'device' must be a device name such as H100_SXM or cpu");
      return NULL;
    }
    me->device = ir_device_lookup(dev->value->str);
    if (!me->device) {
      char names[256];
      ir_device_names(names, sizeof names);
      diag_error(dev->value->loc, "unknown device '%s' (known: %s)", dev->value->str, names);
      return NULL;
    }
  }
  me->intra_bw = me->device->link_bw;
  me->inter_bw = 25e9;
  me->mem_bytes = me->device->mem_bytes;
  double v;
  int r;
  if ((r = num_item(m, it, "intra", &v, 1e6, 1e15)) < 0) return NULL;
  if (r) me->intra_bw = v;
  if ((r = num_item(m, it, "inter", &v, 1e6, 1e15)) < 0) return NULL;
  if (r) me->inter_bw = v;
  if ((r = num_item(m, it, "memory", &v, 1e6, 1e15)) < 0) return NULL;
  if (r) me->mem_bytes = v;
  Arg *inter = find_item(it, "inter");
  if (inter && me->nodes == 1)
    diag_warning(inter->loc, "'inter' is unused: mesh '%s' has a single node", d->name);
  return me;
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
  char buf[128];
  snprintf(buf, sizeof buf, "%s", spec);
  char *colon = strchr(buf, ':');
  const char *devname = "cpu";
  if (colon) {
    *colon = 0;
    devname = colon + 1;
  }
  int a = 0, b = 0;
  char extra;
  int n = sscanf(buf, "%dx%d%c", &a, &b, &extra);
  if (n == 1 && !strchr(buf, 'x')) b = 1;
  else if (n != 2) a = 0;
  if (a < 1 || b < 1 || (long)a * b > (1 << 20)) {
    diag_fatal_noloc("--mesh '%s' is neither a mesh declared in the file nor a size "
                     "(N, NODESxPER_NODE, optionally :DEVICE)", spec);
    return NULL;
  }
  const DeviceSpec *dev = ir_device_lookup(devname);
  if (!dev) {
    char names[256];
    ir_device_names(names, sizeof names);
    diag_fatal_noloc("--mesh '%s': unknown device '%s' (known: %s)", spec, devname, names);
    return NULL;
  }
  Mesh *me = arena_alloc(sizeof *me);
  me->name = arena_strdup(spec);
  me->nodes = n == 2 ? a : 1;
  me->per_node = n == 2 ? b : a;
  me->ndev = a * b;
  me->device = dev;
  me->intra_bw = dev->link_bw;
  me->inter_bw = 25e9;
  me->mem_bytes = dev->mem_bytes;
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

static int check_optimizer(Module *m, Expr *e, Optimizer *o) {
  if (e->kind != E_CALL || (strcmp(e->str, "adamw") && strcmp(e->str, "sgd"))) {
    diag_error(e->loc, "optimizer must be adamw(...) or sgd(...)");
    return -1;
  }
  bool adam = !strcmp(e->str, "adamw");
  o->kind = adam ? "adamw" : "sgd";
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
  if (rc || check_items(&e->args, adam ? adamw_keys : sgd_keys, adam ? 8 : 7, o->kind)) return -1;
  double v;
  int r;
  if ((r = num_item(m, &e->args, "lr", &v, 0, 10)) < 0) return -1;
  if (r) o->lr = v;
  if ((r = num_item(m, &e->args, "eps", &v, 0, 1)) < 0) return -1;
  if (r) o->eps = v;
  if ((r = num_item(m, &e->args, "weight_decay", &v, 0, 10)) < 0) return -1;
  if (r) o->weight_decay = v;
  if ((r = num_item(m, &e->args, "momentum", &v, 0, 0.999999)) < 0) return -1;
  if (r) o->momentum = v;
  if ((r = num_item(m, &e->args, "clip", &v, 0, 1e9)) < 0) return -1;
  if (r) o->clip = v;
  if ((r = num_item(m, &e->args, "min_lr", &v, 0, 10)) < 0) return -1;
  if (r) o->min_lr_ratio = o->lr > 0 ? v / o->lr : 0;
  int64_t w = int_item(m, &e->args, "warmup", 0, 1 << 30);
  if (w < 0) return -1;
  o->warmup = (int)w;
  Arg *betas = find_item(&e->args, "betas");
  if (betas) {
    Expr *t = betas->value;
    bool ia;
    if (t->kind != E_TUPLE || t->args.len != 2) {
      diag_error(t->loc, "betas must be a pair, e.g. betas = (0.9, 0.95)");
      return -1;
    }
    if (sema_eval_number(m, t->args.data[0], &o->beta1, &ia) ||
        sema_eval_number(m, t->args.data[1], &o->beta2, &ia))
      return -1;
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1)) {
      diag_error(t->loc, "betas must lie in [0, 1)");
      return -1;
    }
  }
  Arg *sch = find_item(&e->args, "schedule");
  if (sch) {
    if (sch->value->kind != E_IDENT ||
        (strcmp(sch->value->str, "cosine") && strcmp(sch->value->str, "constant"))) {
      diag_error(sch->value->loc, "schedule must be cosine or constant");
      return -1;
    }
    o->schedule = sch->value->str;
  }
  return 0;
}

/* The strategy keys written directly in the train block become a SPEC. */
static int train_plan(Module *m, PtrVec *it, Plan *p, SrcLoc *where) {
  static const char *const pk[] = {"dp", "tp", "tp2d", "sp", "pp", "schedule", "mb", "zero",
                                   "recompute"};
  Arg *strategy = find_item(it, "strategy");
  char err[256];
  if (strategy) {
    *where = strategy->loc;
    Expr *v = strategy->value;
    if (v->kind == E_IDENT && !strcmp(v->str, "auto")) {
      p->is_auto = true;
    } else if (v->kind == E_STRING) {
      if (plan_parse_spec(v->str, p, err, sizeof err)) {
        diag_error(v->loc, "strategy: %s", err);
        return -1;
      }
    } else {
      diag_error(v->loc, "strategy must be auto or a string such as \"dp=2,tp=2\"");
      return -1;
    }
  }
  for (size_t k = 0; k < sizeof pk / sizeof pk[0]; k++) {
    Arg *a = find_item(it, pk[k]);
    if (!a) continue;
    if (!strategy) *where = a->loc;
    char val[96];
    Expr *v = a->value;
    if (v->kind == E_IDENT || v->kind == E_GRID) {
      snprintf(val, sizeof val, "%s", v->str);
    } else if (v->kind == E_CALL && v->args.len == 1 &&
               ((Arg *)v->args.data[0])->name == NULL) {
      double n;
      bool ii;
      if (sema_eval_number(m, ((Arg *)v->args.data[0])->value, &n, &ii)) return -1;
      snprintf(val, sizeof val, "%s:%.0f", v->str, n);
    } else {
      double n;
      bool is_int;
      if (sema_eval_number(m, v, &n, &is_int)) return -1;
      if (!is_int) {
        diag_error(v->loc, "'%s' must be an integer", pk[k]);
        return -1;
      }
      snprintf(val, sizeof val, "%.0f", n);
    }
    char spec[160];
    snprintf(spec, sizeof spec, "%s=%s", pk[k], val);
    if (plan_parse_spec(spec, p, err, sizeof err)) {
      diag_error(v->loc, "%s", err);
      return -1;
    }
  }
  return 0;
}

static int check_train(Module *m, Decl *d, const SemaOptions *opt) {
  TrainCfg *t = &m->train;
  PtrVec *it = d ? &d->items : &(PtrVec){0};
  t->decl = d;
  if (d && check_items(it, train_keys, N_TRAIN_KEYS, "train")) return -1;
  int rc = 0;

  /* model */
  Arg *ma = find_item(it, "model");
  const char *mname = opt->model ? opt->model : NULL;
  if (!mname && ma) {
    if (ma->value->kind != E_IDENT) {
      diag_error(ma->value->loc, "'model' must name a model");
      return -1;
    }
    mname = ma->value->str;
  }
  if (mname) {
    Decl *md = sema_lookup_decl(m, mname);
    if (!md || md->kind != D_MODEL) {
      if (ma && !opt->model) {
        diag_error(ma->value->loc, "'%s' is not a model", mname);
        if (md) diag_note(md->name_loc, "'%s' is a %s", mname, kind_name(md->kind));
      } else {
        diag_fatal_noloc("--model '%s' is not a model in this file", mname);
      }
      return -1;
    }
    t->model = md;
  } else {
    for (int i = 0; i < m->decls.len; i++) {
      Decl *md = m->decls.data[i];
      if (md->kind != D_MODEL) continue;
      if (t->model) {
        diag_error(md->name_loc, "more than one model and no train block says which to use");
        diag_note(t->model->name_loc, "'%s' is also a model", t->model->name);
        return -1;
      }
      t->model = md;
    }
    if (t->model) info_of(t->model)->used = true;
  }

  /* mesh */
  Arg *mesh = find_item(it, "mesh");
  if (opt->mesh) {
    if (mesh && mesh->value->kind == E_IDENT) sema_lookup_decl(m, mesh->value->str); /* marks it used */
    t->mesh = mesh_from_spec(m, opt->mesh);
    if (!t->mesh) return -1;
  } else if (mesh) {
    if (mesh->value->kind != E_IDENT) {
      diag_error(mesh->value->loc, "'mesh' must name a mesh");
      return -1;
    }
    Decl *md = sema_lookup_decl(m, mesh->value->str);
    if (!md || md->kind != D_MESH) {
      diag_error(mesh->value->loc, "'%s' is not a mesh", mesh->value->str);
      if (md) diag_note(md->name_loc, "'%s' is a %s", md->name, kind_name(md->kind));
      return -1;
    }
    t->mesh = info_of(md)->mesh;
    if (!t->mesh) return -1; /* already reported */
  } else {
    t->mesh = mesh_from_spec(m, "1");
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
  t->steps = steps ? steps : 10;
  t->seed = seed ? seed : 1337;

  /* optimizer */
  Optimizer *o = &t->opt;
  *o = (Optimizer){"adamw", 3e-4, 0.9, 0.999, 1e-8, 0.0, 0.0, 1.0, 0.0, 0, "cosine"};
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
      diag_error(v->loc, "precision must be fp32, bf16 or fp16");
      rc = -1;
    } else {
      t->precision = (DType)dt;
    }
  }
  Arg *da = find_item(it, "data");
  if (da) {
    if (da->value->kind != E_STRING) {
      diag_error(da->value->loc, "'data' must be a file name in quotes");
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
    if (plan_parse_spec(opt->strategy, &p, err, sizeof err)) {
      diag_fatal_noloc("--strategy: %s", err);
      return -1;
    }
    t->plan = p;
    t->plan_origin = "--strategy";
    t->plan_loc = (SrcLoc){0};
  }
  if (plan_resolve(&t->plan, t->mesh->ndev, err, sizeof err)) {
    if (t->plan_loc.file) {
      diag_error(t->plan_loc, "%s", err);
      if (t->mesh->loc.file) diag_note(t->mesh->loc, "mesh '%s' is declared here", t->mesh->name);
    } else {
      diag_fatal_noloc("%s (strategy from %s, mesh '%s')", err, t->plan_origin, t->mesh->name);
    }
    return -1;
  }
  if (rc) return rc;

  /* batch arithmetic: batch = dp * microbatch * microbatches */
  Plan *p = &t->plan;
  if (!p->is_auto) {
    SrcLoc bl = find_item(it, "batch") ? find_item(it, "batch")->value->loc : t->plan_loc;
    if (t->batch % p->dp) {
      if (bl.file)
        diag_error(bl, "batch %lld is not divisible by the data-parallel size dp=%d",
                   (long long)t->batch, p->dp);
      else
        diag_fatal_noloc("batch %lld is not divisible by the data-parallel size dp=%d",
                         (long long)t->batch, p->dp);
      return -1;
    }
    int64_t per_rank = t->batch / p->dp;
    if (!t->microbatch) t->microbatch = p->mb ? per_rank / p->mb : per_rank;
    if (t->microbatch < 1 || per_rank % t->microbatch) {
      SrcLoc ml = find_item(it, "microbatch") ? find_item(it, "microbatch")->value->loc : bl;
      if (ml.file)
        diag_error(ml, "microbatch %lld does not divide the per-rank batch %lld (batch %lld / dp %d)",
                   (long long)t->microbatch, (long long)per_rank, (long long)t->batch, p->dp);
      else
        diag_fatal_noloc("microbatch %lld does not divide the per-rank batch %lld",
                         (long long)t->microbatch, (long long)per_rank);
      return -1;
    }
    int64_t nmb = per_rank / t->microbatch;
    if (p->mb && p->mb != nmb) {
      diag_error(t->plan_loc.file ? t->plan_loc : bl,
                 "mb=%d microbatches disagree with batch %lld / dp %d / microbatch %lld = %lld",
                 p->mb, (long long)t->batch, p->dp, (long long)t->microbatch, (long long)nmb);
      return -1;
    }
    p->mb = (int)nmb;
    if (p->schedule == SCHED_INTERLEAVED && p->pp > 1 && nmb % p->pp) {
      diag_error(t->plan_loc.file ? t->plan_loc : bl,
                 "the interleaved schedule needs the number of microbatches (%lld) to be a "
                 "multiple of pp=%d", (long long)nmb, p->pp);
      return -1;
    }
  } else if (!t->microbatch) {
    t->microbatch = t->batch;
  }
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
  m->base_dir = dirname_of(prog->file->path);
  infos = (PtrVec){0};
  by_name = (StrMap){0};
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
    if (lower_is_builtin(d->name)) {
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
      eval_const_decl(m, d, &v, &is_int);
      break;
    case D_USE:
      in->fn = cimp_import(d->header, m->base_dir, d->name, d->header_loc);
      if (in->fn) vec_push(&m->fns, in->fn);
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

  if (check_train(m, train, opt) == 0 && m->train.model) lower_model(m);

  /* Unused declarations are warnings, after everything had its chance to
   * use them. */
  if (!diag_error_count()) {
    for (int i = 0; i < m->decls.len; i++) {
      DeclInfo *in = infos.data[i];
      Decl *d = in->d;
      if (in->used || d->kind == D_MODEL) continue;
      if (d->kind == D_MESH && (!train || m->train.mesh == in->mesh)) continue;
      diag_warning(d->name_loc, "%s '%s' is never used", kind_name(d->kind), d->name);
    }
  }
  return m;
}
