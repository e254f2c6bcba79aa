/* recompute.c — activation recompute (Chen et al. 2016; Korthikanti et al.
 * 2022), on each stage graph after autodiff.
 *
 * A layer (a repeated scope such as "blocks.3") holds what its backward
 * reads of its forward from the forward to the backward ("saved" values; in
 * a pipeline, in the microbatch's stash slot).  Recompute drops some of
 * them: copies of the forward nodes that make them run again right before
 * the first backward node of the layer that reads one, and the backward
 * reads the copies.  The copies are ordinary nodes of the schedule (Node.remat
 * names the node each one repeats), so the memory plan places their buffers
 * (the plan stays exact), the program prints them fused as the forward was,
 * a dropout copy draws the forward's mask, and the communication check sees
 * a copied collective.  Only the schedule changes, never an operation, so the
 * numbers do not.
 *
 *   selective  the values that cheap ops make (norms, elementwise ops,
 *              softmax, dropout, slices, rotary, views: O(elements), no
 *              GEMM, no attention, no communication) from values that are
 *              kept anyway; Korthikanti et al.'s attention core (scores,
 *              softmax, dropout) is such a set when a model spells it out,
 *              and the fused attention never stores it.
 *   full       everything but what another layer's forward reads (the
 *              layer's output, the next layer's input): the layer's forward
 *              runs again before its backward.
 * What no layer holds (the embedding, the head, the loss) is never dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "passes.h"

typedef struct R {
  Graph *g;
  int nn, nv;
  int *lid;          /* node -> layer (-1: none), forward nodes */
  int *vlayer;       /* value -> layer of its defining forward node (-1) */
  bool *saved;       /* a forward value some backward node reads */
  bool *other;       /* read by a forward node of another layer (or nothing of a layer) */
  bool *rep;         /* can be produced again by copies from kept values */
  bool *drop;        /* dropped: the backward reads a copy */
  Value **copy;      /* value -> its copy (NULL: none yet) */
} R;

static Value *root(Value *v) {
  while (v->alias) v = v->alias;
  return v;
}

/* Ops that selective recompute repeats: O(elements) work, and Megatron
 * sequence parallelism's all-gather of a norm's output before a linear
 * (as Korthikanti et al. keep the sequence shards and gather again in the
 * backward). */
static bool cheap(const Node *n) {
  if (fuse_is_view(n) || n->op == OP_ALLGATHER_G) return true;
  switch (ir_ops[n->op].cls) {
  case OPC_UNARY: case OPC_BINARY: case OPC_MAP: case OPC_ROWWISE: case OPC_NORM:
  case OPC_VIEW: case OPC_SLICE: case OPC_ROPE:
    return true;
  default:
    return false;
  }
}

static bool repeatable(const Node *n, Recompute how) {
  if (how == RECOMPUTE_NONE) return false;
  if (n->op == OP_INPUT || n->op == OP_PARAM || n->op == OP_RECV || n->op == OP_FILL) return false;
  if (ir_ops[n->op].cls == OPC_LOSS || ir_ops[n->op].cls == OPC_BUCKET) return false;
  return how == RECOMPUTE_FULL || cheap(n);
}

/* Marks the layers' saved values (what the backward reads) and what
 * another layer's forward reads. */
static void mark(R *r) {
  Graph *g = r->g;
  for (int i = 0; i < r->nn; i++) {
    Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++) {
      Value *v = n->in[k];
      if (!ir_reads_data(n, k)) continue;
      if (i >= g->nfwd) r->saved[v->id] = true;
      else if (r->vlayer[v->id] >= 0 && r->lid[i] != r->vlayer[v->id]) r->other[v->id] = true;
    }
  }
  /* what reads a view reads its root */
  for (int i = 0; i < r->nv; i++) {
    Value *v = g->values.data[i];
    if (v->alias && r->saved[v->id]) r->saved[root(v)->id] = true;
    if (v->alias && r->other[v->id]) r->other[root(v)->id] = true;
  }
  if (g->loss) r->other[g->loss->id] = true;
  for (int i = 0; i < g->nsend; i++) r->other[g->send_act[i]->id] = true;
}

/* Marks the layers' saved values and decides which to drop. */
static void choose(R *r, const Recompute *how) {
  Graph *g = r->g;
  mark(r);
  /* In forward order: a value is repeatable when its node is and every
   * value the node reads is outside the layer, kept, or repeatable. */
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = g->nodes.data[i];
    if (r->lid[i] < 0 || !repeatable(n, how[r->lid[i]])) continue;
    bool ok = true;
    for (int k = 0; k < n->nin && ok; k++) {
      Value *u = n->in[k];
      if (!fuse_reads_data(n, k) && !fuse_is_view(n)) continue;
      if (r->vlayer[u->id] != r->lid[i]) continue;      /* the layer's input, a parameter */
      ok = r->rep[u->id] || (r->saved[u->id] && !r->drop[u->id]);
    }
    if (!ok) continue;
    for (int j = 0; j < n->nout; j++) {
      Value *v = n->outs[j];
      if (!v) continue;
      r->rep[v->id] = true;
      r->drop[v->id] = r->saved[v->id] && !r->other[v->id];
    }
  }
  /* A view the backward keeps keeps its root: undo drops under kept views
   * (and views of kept roots are not worth a copy). */
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < r->nv; i++) {
      Value *v = g->values.data[i];
      if (!v->alias || r->vlayer[v->id] < 0) continue;
      Value *rt = root(v);
      if (r->saved[v->id] && !r->drop[v->id] && r->drop[rt->id]) {
        r->drop[rt->id] = false;
        changed = true;
      }
      if (r->drop[v->id] && !r->drop[rt->id] && r->vlayer[rt->id] >= 0) {
        r->drop[v->id] = false;
        changed = true;
      }
    }
  }
}

/* The copy of value v for layer l's recompute segment: copies of the nodes
 * that make it, first (depth first, so the segment stays in forward order
 * after sorting by the originals' positions). */
static Value *need(R *r, Value *v, PtrVec *seg) {
  if (r->copy[v->id]) return r->copy[v->id];
  Node *n = v->def;
  Graph *g = r->g;
  Node *c = ir_node_copy(g, n);
  g->nodes.len--; /* placed by the caller */
  c->remat = n;
  c->bwd = false;
  for (int k = 0; k < n->nin; k++) {
    Value *u = n->in[k];
    bool read = fuse_reads_data(n, k) || fuse_is_view(n);
    /* from the layer: a dropped or repeatable (not kept) value comes from copies */
    if (read && r->vlayer[u->id] == r->vlayer[v->id] && (r->drop[u->id] || !r->saved[u->id]))
      c->in[k] = need(r, u, seg);
  }
  for (int j = 0; j < n->nout; j++) {
    Value *o = n->outs[j];
    if (!o) continue;
    Value *co = ir_value_copy(g, o);
    co->def = c;
    co->name = NULL;
    c->outs[j] = co;
    r->copy[o->id] = co;
  }
  c->out = c->outs[0];
  for (int j = 0; j < n->nout; j++) {
    Value *o = n->outs[j];
    if (o && o->alias) {
      /* a view's copy is a view of its input's copy (or of the kept input) */
      Value *a = r->copy[o->alias->id] ? r->copy[o->alias->id] : o->alias;
      c->outs[j]->alias = a;
    }
  }
  for (int k = 0; k < c->nin; k++) c->in[k]->nuses++;
  vec_push(seg, c);
  return r->copy[v->id];
}

static int by_orig(const void *a, const void *b) {
  const Node *x = *(Node *const *)a, *y = *(Node *const *)b;
  return x->remat->id - y->remat->id;
}

/* The layers of g's forward: each repeated scope ("blocks.3") in order of
 * appearance; lid[node] and vlayer[value] (-1: none), names[layer]. */
static int find_layers(R *r, const char ***names) {
  Graph *g = r->g;
  StrMap layers = {0};
  PtrVec nv = {0};
  for (int i = 0; i < r->nv; i++) r->vlayer[i] = -1;
  for (int i = 0; i < r->nn; i++) {
    Node *n = g->nodes.data[i];
    r->lid[i] = -1;
    if (i >= g->nfwd || n->op == OP_PARAM || n->op == OP_INPUT) continue;
    char buf[256];
    const char *key = stage_layer_of(n, buf, sizeof buf);
    if (!strchr(key, '.')) continue;   /* no repeat index: the embedding, the head */
    intptr_t id = (intptr_t)strmap_get(&layers, key);
    if (!id) {
      vec_push(&nv, arena_strdup(key));
      id = nv.len;
      strmap_put(&layers, nv.data[id - 1], (void *)id);
    }
    r->lid[i] = (int)id - 1;
    for (int j = 0; j < n->nout; j++)
      if (n->outs[j]) r->vlayer[n->outs[j]->id] = r->lid[i];
  }
  if (names) *names = (const char **)nv.data;
  return nv.len;
}

static R analyse(Graph *g) {
  R r = {.g = g, .nn = g->nodes.len, .nv = g->values.len};
  size_t nv1 = (size_t)r.nv + 1;
  r.lid = arena_alloc(sizeof(int) * (size_t)(r.nn + 1));
  r.vlayer = arena_alloc(sizeof(int) * nv1);
  r.saved = arena_alloc(nv1);
  r.other = arena_alloc(nv1);
  r.rep = arena_alloc(nv1);
  r.drop = arena_alloc(nv1);
  r.copy = arena_alloc(sizeof(Value *) * nv1);
  return r;
}

/* The copies of what r->drop drops, in g's schedule. */
static void emit(R *rp) {
  R r = *rp;
  Graph *g = r.g;
  /* A dropped value's copy goes right before the first backward node that
   * reads it (with the copies it needs in turn), or before the bias
   * gradient that this node's matmul_bwd sums (fuse.c pairs the two). */
  PtrVec *before = arena_alloc(sizeof(PtrVec) * (size_t)(r.nn + 1));
  bool *used = arena_alloc((size_t)r.nn + 1);
  for (int i = g->nfwd; i < r.nn; i++) {
    Node *n = g->nodes.data[i];
    int at = i;
    Node *p = i > g->nfwd ? g->nodes.data[i - 1] : NULL;
    if (n->op == OP_MATMUL_BWD && p && p->op == OP_ADD_BWD && p->in[0] == n->in[0]) at = i - 1;
    for (int k = 0; k < n->nin; k++) {
      Value *v = n->in[k];
      if (r.vlayer[v->id] < 0 || !r.drop[v->id]) continue;
      n->in[k] = need(&r, v, &before[at]);
      used[at] = true;
    }
  }
  /* Each segment in the forward's order. */
  for (int i = 0; i < r.nn; i++)
    if (used[i] && before[i].len > 1)
      qsort(before[i].data, (size_t)before[i].len, sizeof(void *), by_orig);
  /* The new schedule; node ids are schedule positions (as zero.c keeps them). */
  PtrVec nodes = {0};
  int *newid = arena_alloc(sizeof(int) * (size_t)(r.nn + 1));
  for (int i = 0; i < r.nn; i++) {
    for (int k = 0; k < before[i].len; k++) vec_push(&nodes, before[i].data[k]);
    newid[i] = nodes.len;
    vec_push(&nodes, g->nodes.data[i]);
  }
  for (int i = 0; i < nodes.len; i++) {
    Node *n = nodes.data[i];
    n->id = i;
    if (n->op == OP_DROPOUT_BWD) n->a.i[1] = newid[n->a.i[1]];
  }
  g->nodes = nodes;
}

/* Recompute in g with policy how[layer]. */
static void apply(Graph *g, const Recompute *how) {
  R r = analyse(g);
  if (!find_layers(&r, NULL)) return;
  choose(&r, how);
  emit(&r);
}

/* Recompute in g what drop[value] drops (recompute=auto's choice per
 * tensor: a set of the values full would drop, closed under views). */
static void apply_drop(Graph *g, const bool *drop) {
  R r = analyse(g);
  if (!find_layers(&r, NULL)) return;
  mark(&r);
  memcpy(r.drop, drop, (size_t)r.nv);
  emit(&r);
}

/* recompute=auto: the planned arena of this stage (after zero and memplan,
 * as the real passes will plan it) with policies how[], on a copy of g. */
static int64_t try_plan(Module *m, const Graph *g, const Recompute *how, const bool *drop) {
  Graph *c = ir_graph_clone(g);
  if (how)
    apply(c, how);
  else
    apply_drop(c, drop);
  Graph *keep = m->graph;
  MemPlan keep_mem = m->mem;
  bool keep_planned = m->planned;
  m->graph = c;
  int rc = precision_apply(c, m->train.precision, !zero_gathers_params(m));
  if (!rc) rc = pass_zero(m);
  if (!rc) rc = pass_memplan(m);
  int64_t bytes = rc ? -1 : m->mem.arena_bytes;
  m->graph = keep;
  m->mem = keep_mem;
  m->planned = keep_planned;
  return bytes;
}

void recompute_dropped(Graph *g, Recompute how, bool *drop) {
  R r = analyse(g);
  int n = find_layers(&r, NULL);
  Recompute *lay = arena_alloc(sizeof(Recompute) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) lay[i] = how;
  if (n) choose(&r, lay);
  memcpy(drop, r.drop, (size_t)r.nv);
}

/* "full for blocks.0 .. blocks.1, selective for blocks.2 .. blocks.3" */
static const char *describe(const Recompute *how, const char **names, int n) {
  char *d = arena_strdup("");
  for (int p = RECOMPUTE_FULL; p >= RECOMPUTE_NONE; p--)
    for (int i = 0; i < n; i++) {
      if (how[i] != (Recompute)p) continue;
      int j = i;
      while (j + 1 < n && how[j + 1] == (Recompute)p) j++;
      d = arena_printf("%s%s%s for %s%s%s", d, *d ? ", " : "", plan_recompute_name((Recompute)p), names[i],
                       j > i ? " .. " : "", j > i ? names[j] : "");
      i = j;
    }
  return d;
}

/* recompute=auto per tensor (Checkmate's problem, Jain et al. 2020:
 * the least recompute FLOPs such that the rank's planned peak fits).  The
 * candidates are the values that full would drop, in units (the outputs
 * of one node: a copy makes them all; with the views of them that are
 * dropped too, as choose() keeps them together);
 * any set of units is a valid choice, and what it costs follows from the
 * copies emit() would make (a node two dropped values need reruns once).
 * Every set tried is planned exactly; none is estimated. */
typedef struct Auto {
  Module *m;
  const Graph *g;
  R r;               /* g: its layers and saved values */
  double budget;
  int nu;            /* units */
  int *unit;         /* value -> unit (-1: never dropped) */
  int *ulayer;       /* unit -> layer */
  int64_t *ubytes;   /* unit -> bytes of its values that are not views */
  bool *drop, *done; /* per value: scratch */
  bool *nodes;       /* per node: rerun by the copies (NULL: not wanted) */
  int plans;         /* exact plans so far */
} Auto;

/* The plans one stage may try after the per-layer search (each clones the
 * stage and runs zero and memplan: about a millisecond for the samples). */
enum { AUTO_MAXPLANS = 300 };

/* The FLOPs of the copies that rebuild v (not already counted in done[]). */
static double rerun(Auto *a, const Value *v) {
  if (a->done[v->id]) return 0;
  const Node *n = v->def;
  for (int j = 0; j < n->nout; j++)
    if (n->outs[j]) a->done[n->outs[j]->id] = true;
  if (a->nodes && n->id >= 0 && n->id < a->r.nn) a->nodes[n->id] = true;
  double f = ir_node_flops(n);
  for (int k = 0; k < n->nin; k++) {
    const Value *u = n->in[k];
    bool read = fuse_reads_data(n, k) || fuse_is_view(n);
    if (read && a->r.vlayer[u->id] == a->r.vlayer[v->id] && (a->drop[u->id] || !a->r.saved[u->id]))
      f += rerun(a, u);
  }
  return f;
}

/* The FLOPs per microbatch that dropping a->drop adds (what emit() copies). */
static double drop_cost(Auto *a) {
  const Graph *g = a->g;
  memset(a->done, 0, (size_t)a->r.nv);
  double f = 0;
  for (int i = g->nfwd; i < a->r.nn; i++) {
    const Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++)
      if (a->r.vlayer[n->in[k]->id] >= 0 && a->drop[n->in[k]->id]) f += rerun(a, n->in[k]);
  }
  return f;
}

static void unit_drop(Auto *a, const bool *in) {
  for (int i = 0; i < a->r.nv; i++) a->drop[i] = a->unit[i] >= 0 && in[a->unit[i]];
}

static double cost(Auto *a, const bool *in) {
  unit_drop(a, in);
  return drop_cost(a);
}

/* The planned arena with the units in[] dropped (-1: no plan). */
static int64_t plan_units(Auto *a, const bool *in) {
  unit_drop(a, in);
  a->plans++;
  return try_plan(a->m, a->g, NULL, a->drop);
}

static bool fits(const Auto *a, int64_t bytes) { return bytes >= 0 && (double)bytes <= a->budget; }

/* Keeps again the units of in[] that save the most FLOPs per byte first,
 * each as long as the exact plan still fits (*bytes: the last plan that
 * did).  Never adds FLOPs: keeping a value only cuts the copies short. */
static void prune(Auto *a, bool *in, int64_t *bytes) {
  int *ord = arena_alloc(sizeof(int) * (size_t)(a->nu + 1)), k = 0;
  double *gain = arena_alloc(sizeof(double) * (size_t)(a->nu + 1));
  double c = cost(a, in);
  for (int u = 0; u < a->nu; u++) {
    if (!in[u]) continue;
    in[u] = false;
    gain[u] = (c - cost(a, in)) / (double)(a->ubytes[u] ? a->ubytes[u] : 1);
    in[u] = true;
    /* insertion by gain, the larger first; ties: the later layer first (its
     * copies run early in the backward, when more is live) */
    int j = k++;
    while (j > 0 && gain[ord[j - 1]] <= gain[u]) ord[j] = ord[j - 1], j--;
    ord[j] = u;
  }
  for (int i = 0; i < k && a->plans < AUTO_MAXPLANS; i++) {
    in[ord[i]] = false;
    int64_t b = plan_units(a, in);
    if (fits(a, b))
      *bytes = b;
    else
      in[ord[i]] = true;
  }
}

/* From nothing: units in order of the least added FLOPs per byte freed
 * (added given those before; ties: the earlier layer, whose copies run late
 * in the backward, or with late, the later layer, whose tensors are live
 * at the backward's start, and which stay live longer than they have to),
 * and the shortest prefix of that order that fits, found by bisection over
 * exact plans.  False when even the whole order does not fit. */
static bool grow(Auto *a, bool *in, int64_t *bytes, bool late) {
  int nu = a->nu, k = 0;
  int *seq = arena_alloc(sizeof(int) * (size_t)(nu + 1));
  double *marg = arena_alloc(sizeof(double) * (size_t)(nu + 1));
  bool *stale = arena_alloc((size_t)nu + 1);
  memset(in, 0, (size_t)nu);
  memset(stale, 1, (size_t)nu);
  double c = 0;
  for (;;) {
    int best = -1;
    for (int u = 0; u < nu; u++) {
      if (in[u] || !a->ubytes[u]) continue;
      if (stale[u]) {
        in[u] = true;
        marg[u] = (cost(a, in) - c) / (double)a->ubytes[u];
        in[u] = false;
        stale[u] = false;
      }
      if (best < 0 || marg[u] < marg[best] || (late && marg[u] == marg[best] && a->ulayer[u] > a->ulayer[best]))
        best = u;
    }
    if (best < 0) break;
    in[best] = true;
    c = cost(a, in);
    seq[k++] = best;
    /* only the units of the same layer share copies with it */
    for (int u = 0; u < nu; u++)
      if (a->ulayer[u] == a->ulayer[best]) stale[u] = true;
  }
  int64_t b = plan_units(a, in);
  if (!fits(a, b)) return false;
  int lo = 0, hi = k;   /* the empty prefix does not fit, all of it does */
  *bytes = b;
  while (hi - lo > 1 && a->plans < AUTO_MAXPLANS) {
    int mid = (lo + hi) / 2;
    memset(in, 0, (size_t)nu);
    for (int i = 0; i < mid; i++) in[seq[i]] = true;
    b = plan_units(a, in);
    if (fits(a, b))
      hi = mid, *bytes = b;
    else
      lo = mid;
  }
  memset(in, 0, (size_t)nu);
  for (int i = 0; i < hi; i++) in[seq[i]] = true;
  return true;
}

/* drop_cost of g with drop[] dropped, marking the nodes the copies rerun in
 * nodes[] when given */
static double drop_walk(Graph *g, const bool *drop, bool *nodes) {
  Auto a = {.g = g, .r = analyse(g)};
  find_layers(&a.r, NULL);
  mark(&a.r);
  a.drop = arena_alloc((size_t)a.r.nv + 1);
  a.done = arena_alloc((size_t)a.r.nv + 1);
  a.nodes = nodes;
  memcpy(a.drop, drop, (size_t)a.r.nv);
  return drop_cost(&a);
}

double recompute_drop_flops(Graph *g, const bool *drop) { return drop_walk(g, drop, NULL); }

void recompute_rerun_nodes(Graph *g, const bool *drop, bool *nodes) { drop_walk(g, drop, nodes); }

int64_t recompute_drop_plan(Module *m, const Graph *g, const bool *drop) {
  return try_plan(m, g, NULL, drop);
}

/* A stage with few candidate units is solved exactly: every set that adds
 * fewer FLOPs than `below` (the best the searches above found), in order
 * of its FLOPs, planned until one fits, which is then the optimum; within
 * AUTO_EXACT_PLANS plans (else the searches' choice stands). */
enum { AUTO_EXACT_UNITS = 12, AUTO_EXACT_PLANS = 512 };

static const double *by_flops_key;
static int by_flops(const void *x, const void *y) {
  double a = by_flops_key[*(const int *)x], b = by_flops_key[*(const int *)y];
  return a < b ? -1 : a > b ? 1 : *(const int *)x - *(const int *)y;
}

static bool exact(Auto *a, bool *in, int64_t *bytes, double below) {
  int ns = 1 << a->nu, k = 0;
  double *fl = arena_alloc(sizeof(double) * (size_t)ns);
  int *ord = arena_alloc(sizeof(int) * (size_t)ns);
  for (int s = 0; s < ns; s++) {
    for (int u = 0; u < a->nu; u++) in[u] = s >> u & 1;
    fl[s] = cost(a, in);
    if (fl[s] < below) ord[k++] = s;
  }
  by_flops_key = fl;
  qsort(ord, (size_t)k, sizeof(int), by_flops);
  for (int i = 0; i < k && i < AUTO_EXACT_PLANS; i++) {
    for (int u = 0; u < a->nu; u++) in[u] = ord[i] >> u & 1;
    int64_t b = plan_units(a, in);
    if (fits(a, b)) {
      *bytes = b;
      return true;
    }
  }
  return false;
}

/* What a node is called in a layer's listing: the DSL name of the layer
 * call inside the layer (its parameters' path, else its scope) and its op:
 * "ln_1 layernorm", "attn.qkv matmul", "mlp gelu". */
static const char *label(const Node *n, const char *layer) {
  const char *sc = n->scope ? n->scope : "";
  for (int k = 0; k < n->nin; k++)
    if (n->in[k]->role == ROLE_PARAM && n->in[k]->name && strrchr(n->in[k]->name, '.')) {
      char *p = arena_strdup(n->in[k]->name);
      *strrchr(p, '.') = 0;   /* blocks.0.ln_1.weight -> blocks.0.ln_1 */
      sc = p;
      break;
    }
  size_t l = strlen(layer);
  if (!strncmp(sc, layer, l) && sc[l] == '.') sc += l + 1;
  else if (!strcmp(sc, layer)) sc = "";
  return *sc ? arena_printf("%s %s", sc, ir_ops[n->op].name) : ir_ops[n->op].name;
}

/* "blocks.0: ln_1 layernorm, mlp gelu; blocks.1 .. blocks.3: selective":
 * per layer, the nodes whose outputs drop[] drops (views left out), "full"
 * or "selective" where that is all full or selective drop; layers in a row
 * with the same listing share it; layers that drop nothing are left out. */
static const char *describe_drop(Auto *a, const bool *drop, const bool *dsel, const bool *dfull,
                                 const char **names, int n) {
  const char **what = arena_alloc(sizeof(char *) * (size_t)(n + 1));
  for (int l = 0; l < n; l++) {
    bool same_sel = true, same_full = true, any = false;
    for (int i = 0; i < a->r.nv; i++) {
      if (a->r.vlayer[i] != l) continue;
      same_sel &= drop[i] == dsel[i];
      same_full &= drop[i] == dfull[i];
      any |= drop[i];
    }
    if (!any) { what[l] = NULL; continue; }
    if (same_full) { what[l] = "full"; continue; }
    if (same_sel) { what[l] = "selective"; continue; }
    char *d = arena_strdup("");
    const Node *last = NULL;
    for (int i = 0; i < a->r.nv; i++) {
      const Value *v = a->g->values.data[i];
      if (a->r.vlayer[i] != l || !drop[i] || v->alias || v->def == last) continue;
      last = v->def;
      d = arena_printf("%s%s%s", d, *d ? ", " : "", label(v->def, names[l]));
    }
    what[l] = d;
  }
  char *d = arena_strdup("");
  for (int i = 0; i < n; i++) {
    if (!what[i]) continue;
    int j = i;
    while (j + 1 < n && what[j + 1] && !strcmp(what[j + 1], what[i])) j++;
    d = arena_printf("%s%s%s%s%s: %s", d, *d ? "; " : "", names[i], j > i ? " .. " : "",
                     j > i ? names[j] : "", what[i]);
    i = j;
  }
  return d;
}

/* recompute=auto on one stage: the least recompute that fits the device
 * (the mesh's memory; an interleaved rank's share per chunk).  First per
 * layer: layers go to selective one by one, then to full one by one, each
 * step planned exactly, until the stage fits.  Then per tensor, from two
 * starts: the per-layer choice with what it drops kept again while the
 * plan fits (prune), and the cheapest units per byte freed until it fits,
 * pruned the same way (grow, with either tie order); the fewest FLOPs of
 * the four wins, unless few units make the exact search affordable.  It is
 * never more than the per-layer choice's, and that is never more than
 * selective's when selective fits (selective costs O(elements), full a
 * layer's forward) and never more than full's.  Sets drop[] (values). */
static void choose_auto(Module *m, Graph *g, const char **names, int n, bool *drop) {
  const Plan *p = &m->train.plan;
  double budget = m->train.mesh ? m->train.mesh->mem_bytes : 0;
  if (m->nstages > p->pp && p->pp > 0) budget /= m->nstages / p->pp;
  Recompute *how = arena_alloc(sizeof(Recompute) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) how[i] = RECOMPUTE_NONE;
  int64_t b = try_plan(m, g, how, NULL);
  int64_t none = b;
  int tried = 1;
  for (int level = RECOMPUTE_SELECTIVE; level <= RECOMPUTE_FULL && budget > 0; level++)
    for (int i = 0; i < n && (b < 0 || (double)b > budget); i++, tried++) {
      how[i] = (Recompute)level;
      b = try_plan(m, g, how, NULL);
    }
  R r0 = analyse(g), rs = analyse(g), rf = analyse(g);
  Recompute *all = arena_alloc(sizeof(Recompute) * (size_t)(n + 1));
  find_layers(&r0, NULL);
  choose(&r0, how);
  memcpy(drop, r0.drop, (size_t)r0.nv);
  char nb[32], bb[32];
  report_commas(nb, sizeof nb, none);
  if (budget <= 0 || (double)none <= budget || (double)b > budget) {
    report_commas(bb, sizeof bb, b);
    g->recompute_desc =
        budget <= 0 ? "no device memory to fit: nothing recomputed"
        : (double)none <= budget
            ? arena_printf("the plan fits without recompute (%s bytes of %s)", nb, report_size(budget))
            : arena_printf("%s: %s bytes (%s without) for a budget of %s; does not fit even so",
                           describe(how, names, n), bb, nb, report_size(budget));
    return;
  }

  Auto a = {.m = m, .g = g, .r = analyse(g), .budget = budget};
  find_layers(&a.r, NULL);
  mark(&a.r);
  int nv = a.r.nv;
  for (int i = 0; i < n; i++) all[i] = RECOMPUTE_FULL;
  find_layers(&rf, NULL);
  choose(&rf, all);
  for (int i = 0; i < n; i++) all[i] = RECOMPUTE_SELECTIVE;
  find_layers(&rs, NULL);
  choose(&rs, all);
  a.unit = arena_alloc(sizeof(int) * (size_t)(nv + 1));
  a.ulayer = arena_alloc(sizeof(int) * (size_t)(nv + 1));
  a.ubytes = arena_alloc(sizeof(int64_t) * (size_t)(nv + 1));
  a.drop = arena_alloc((size_t)nv + 1);
  a.done = arena_alloc((size_t)nv + 1);
  int *nunit = arena_alloc(sizeof(int) * (size_t)(a.r.nn + 1));  /* node -> unit */
  for (int i = 0; i < nv; i++) a.unit[i] = -1;
  for (int i = 0; i < a.r.nn; i++) nunit[i] = -1;
  for (int i = 0; i < nv; i++) {   /* roots before their views (ids in order of making) */
    Value *v = g->values.data[i];
    if (!rf.drop[i]) continue;
    Value *rt = root(v);
    int u = rt != v && rf.drop[rt->id] && a.unit[rt->id] >= 0 ? a.unit[rt->id]
            : rt == v && nunit[v->def->id] >= 0                ? nunit[v->def->id]
                                                                : a.nu++;
    if (rt == v) nunit[v->def->id] = u;
    a.unit[i] = u;
    a.ulayer[u] = a.r.vlayer[i];
    if (!v->alias) a.ubytes[u] += ir_numel(&v->shape) * ir_dtype_size(v->dtype);
  }

  /* the per-layer choice, as units when it is a set of them */
  memcpy(a.drop, r0.drop, (size_t)nv);
  double best = drop_cost(&a), layer_cost = best;
  int64_t best_b = b;
  bool *in = arena_alloc((size_t)a.nu + 1), *in2 = arena_alloc((size_t)a.nu + 1);
  bool units = true;
  for (int i = 0; i < nv; i++) {
    if (r0.drop[i] && a.unit[i] < 0) units = false;
    if (r0.drop[i] && a.unit[i] >= 0) in[a.unit[i]] = true;
  }
  unit_drop(&a, in);
  units = units && !memcmp(a.drop, r0.drop, (size_t)nv);
  int64_t bytes = b;
  if (units) {
    prune(&a, in, &bytes);
    double c = cost(&a, in);
    if (c < best || (c == best && bytes < best_b)) best = c, best_b = bytes, memcpy(drop, a.drop, (size_t)nv);
  }
  for (int late = 0; late < 2; late++)
    if (grow(&a, in2, &bytes, late)) {
      prune(&a, in2, &bytes);
      double c = cost(&a, in2);
      if (c < best || (c == best && bytes < best_b)) best = c, best_b = bytes, memcpy(drop, a.drop, (size_t)nv);
    }
  if (a.nu <= AUTO_EXACT_UNITS && exact(&a, in2, &bytes, best)) {
    best = cost(&a, in2), best_b = bytes;
    memcpy(drop, a.drop, (size_t)nv);
  }
  report_commas(bb, sizeof bb, best_b);
  g->recompute_desc = arena_printf(
      "%s: %s bytes (%s without) for a budget of %s; +%.4g FLOPs per microbatch, per tensor "
      "(per layer, %s: +%.4g; %d plans tried)",
      describe_drop(&a, drop, rs.drop, rf.drop, names, n), bb, nb, report_size(budget), best,
      describe(how, names, n), layer_cost, tried + a.plans);
}

static int recompute_graph(Module *m) {
  Graph *g = m->graph;
  if (!g || !g->nfwd) return 0;
  Recompute pol = plan_recompute_at(&m->train.plan, g->nstages > 1 ? g->stage : 0);
  if (pol == RECOMPUTE_NONE) return 0;
  R r = analyse(g);
  const char **names;
  int n = find_layers(&r, &names);
  if (!n) return 0;
  if (pol == RECOMPUTE_AUTO) {
    bool *drop = arena_alloc((size_t)r.nv + 1);
    choose_auto(m, g, names, n, drop);
    apply_drop(g, drop);
    return 0;
  }
  Recompute *how = arena_alloc(sizeof(Recompute) * (size_t)n);
  for (int i = 0; i < n; i++) how[i] = pol;
  apply(g, how);
  return 0;
}

int pass_recompute(Module *m) { return per_stage(m, recompute_graph); }
