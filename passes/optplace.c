/* optplace.c — Shampoo's work placed over the data-parallel ranks (Shi et
 * al. 2023): the units of work are the blocks of the preconditioned
 * parameters (factor update, root inverses, search direction) and the
 * unblocked parameters (the grafting method); each goes to one data rank by
 * greedy longest-processing-time on its predicted cost, the largest first,
 * to the least loaded rank.  Each rank computes its units' update
 * directions into its segment of one buffer, an all-gather over the data
 * ranks (a step instruction, in the communication check) gives every rank
 * every direction, and every rank applies them to its replicated
 * parameters.  The memory plan sizes the buffer (memplan.c) and the program
 * emits the assignment (program.c); both call optplace_units, so they
 * agree.  With stagger = true each block also has a root phase (below),
 * and the placement balances each phase's root work over the ranks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "runtime/rt_optim.h"

/* Predicted flops of a unit: the factor updates (2 r c (r + c)) every step,
 * and the two roots (about 9 d³ each for a symmetric eigendecomposition and
 * the product, or 8 d³ per Newton iteration, ~20 iterations) amortised over
 * precondition_every steps; an unblocked parameter's elementwise update. */
static double unit_cost(const Optimizer *o, int64_t r, int64_t c, bool blocked) {
  if (!blocked) return 10.0 * (double)(r * c);
  double root = (o->root == 1 ? 160.0 : 9.0) * ((double)r * r * r + (double)c * c * c);
  return 2.0 * r * c * (double)(r + c) + root / o->precondition_every + 4.0 * r * c * (double)(r + c);
}

double optplace_root_flops(const Optimizer *o, const OptUnit *u) {
  if (!u->blocked) return 0;
  return (o->root == 1 ? 160.0 : 9.0) *
         ((double)u->r * u->r * u->r + (double)u->c * u->c * u->c);
}

/* ord[0 .. n) := 0 .. n-1 by key(base, i), largest first, the lower index
 * first among equal keys (a stable sort by descending key).  A model's
 * blocks come in a few sizes, so their keys take a few values: counted
 * into buckets of the distinct keys, linear in n (a million blocks of a
 * small block size: 0.4 s of qsort a compile before); qsort where more than
 * ORDER_MAXKEYS keys differ. */
enum { ORDER_MAXKEYS = 4096, ORDER_HASH = 8192 };
typedef double (*KeyFn)(const void *base, int i);
static const void *order_base;
static KeyFn order_key;
static int by_key_desc(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b;
  double x = order_key(order_base, i), y = order_key(order_base, j);
  if (x != y) return x > y ? -1 : 1;
  return i < j ? -1 : i > j;
}

static int by_double_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x > y ? -1 : x < y;
}

/* the slot of key k in the table (keys: the distinct values, -1 slots empty) */
static int key_slot(const double *keys, const int *slot, double k) {
  uint64_t h;
  memcpy(&h, &k, sizeof h);
  h *= 0x9E3779B97F4A7C15ull;
  int at = (int)(h >> 51);   /* 13 bits: ORDER_HASH */
  while (slot[at] >= 0 && keys[slot[at]] != k) at = (at + 1) & (ORDER_HASH - 1);
  return at;
}

static void order_desc(const void *base, int n, KeyFn key, int *ord) {
  double *keys = arena_alloc(sizeof(double) * ORDER_MAXKEYS);
  int *slot = arena_alloc(sizeof(int) * ORDER_HASH), nk = 0;
  int64_t *count = arena_alloc(sizeof(int64_t) * ORDER_MAXKEYS);
  for (int i = 0; i < ORDER_HASH; i++) slot[i] = -1;
  for (int i = 0; i < n && nk <= ORDER_MAXKEYS; i++) {
    double k = key(base, i);
    int at = key_slot(keys, slot, k);
    if (slot[at] < 0) {
      if (nk == ORDER_MAXKEYS) {
        nk++;   /* too many: qsort */
        break;
      }
      keys[nk] = k, slot[at] = nk++;
    }
    count[slot[at]]++;
  }
  if (nk > ORDER_MAXKEYS) {
    for (int i = 0; i < n; i++) ord[i] = i;
    order_base = base, order_key = key;
    qsort(ord, (size_t)n, sizeof *ord, by_key_desc);
    return;
  }
  /* each distinct key's first place in the order, largest key first */
  double *sorted = arena_alloc(sizeof(double) * (size_t)(nk + 1));
  memcpy(sorted, keys, sizeof(double) * (size_t)nk);
  qsort(sorted, (size_t)nk, sizeof *sorted, by_double_desc);
  int64_t *start = arena_alloc(sizeof(int64_t) * (size_t)(nk + 1));
  for (int q = 0, pos = 0; q < nk; q++) {
    int id = slot[key_slot(keys, slot, sorted[q])];
    start[id] = pos;
    pos += (int)count[id];
  }
  for (int i = 0; i < n; i++) ord[start[slot[key_slot(keys, slot, key(base, i))]]++] = i;
}

/* Shampoo's root phases (stagger = true, docs/language.md): every block of
 * every preconditioned parameter of the whole model (its full tensor, so the
 * phases are the same under every plan and in tests/parity/torch_ref.py),
 * ordered by root cost r³ + c³ (largest first), then parameter name (bytes),
 * then block number; each block in turn to the phase of [0, every) with the
 * least cost so far, the lowest on a tie.  A block's roots are recomputed at
 * step start_preconditioning (all of them) and at the later steps s with
 * (s - start) mod every = its phase, so each step carries about 1/every of
 * the root work. */
typedef struct PhaseBlock {
  int rank;     /* its parameter's place in name order (names are unique) */
  int64_t b, cost;
  int phase;
} PhaseBlock;

/* A block's root cost r³ + c³ (exact in a double below 2^53). */
static double phase_block_cost(const void *base, int i) {
  return (double)((const PhaseBlock *)base)[i].cost;
}

static bool staggered(const Optimizer *o) {
  return o->kind && !strcmp(o->kind, "shampoo") && !o->no_stagger && o->precondition_every > 1;
}

static int by_name(const void *a, const void *b) {
  return strcmp((*(const Value *const *)a)->name, (*(const Value *const *)b)->name);
}

typedef struct PhaseLoad {
  int64_t load;
  int phase;
} PhaseLoad;

static bool phase_less(const PhaseLoad *x, const PhaseLoad *y) {
  return x->load != y->load ? x->load < y->load : x->phase < y->phase;
}

/* h[i] may have grown: sift it down the min-heap of n */
static void heap_down(PhaseLoad *h, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && phase_less(&h[l], &h[m])) m = l;
    if (r < n && phase_less(&h[r], &h[m])) m = r;
    if (m == i) return;
    PhaseLoad t = h[i];
    h[i] = h[m], h[m] = t;
    i = m;
  }
}

/* A parameter's full shape (a tensor-parallel shard's unsplit one) into d:
 * true where Shampoo preconditions it (a matrix), its blocks defined on d. */
static bool shampoo_full_dims(const Value *v, int64_t d[IR_MAXDIM]) {
  const Shape *full = v->gshape.ndim == v->shape.ndim ? &v->gshape : &v->shape;
  for (int k = 0; k < full->ndim; k++) d[k] = full->d[k].n;
  return rt_shampoo_preconditioned(full->ndim, d);
}

/* The phase of every block of the model, sorted by (name, b): each
 * preconditioned parameter's blocks 0 .. nblocks-1 together, the first at
 * (*first)[rank], its name's rank in *names (StrMap of rank + 1). */
static PhaseBlock *model_phases(const Module *m, int *nout, StrMap *names, int **first) {
  const Optimizer *o = &m->train.opt;
  const Graph *w = m->nstages > 1 ? m->whole : m->graph;
  int np = w ? w->params.len : 0;
  const Value **byname = arena_alloc(sizeof *byname * (size_t)(np + 1));
  for (int i = 0; i < np; i++) byname[i] = w->params.data[i];
  qsort(byname, (size_t)np, sizeof *byname, by_name);
  *names = (StrMap){0};
  *first = arena_alloc(sizeof **first * (size_t)(np + 1));
  /* the blocks counted, then made in one array */
  int64_t total = 0;
  for (int i = 0; i < np; i++) {
    int64_t d[IR_MAXDIM];
    if (shampoo_full_dims(byname[i], d))
      total += rt_shampoo_nblocks(d[0], o->block) * rt_shampoo_nblocks(d[1], o->block);
  }
  int n = 0;
  PhaseBlock *pb = arena_alloc(sizeof *pb * (size_t)(total + 1));
  for (int i = 0; i < np; i++) {
    const Value *v = byname[i];
    int64_t d[IR_MAXDIM];
    (*first)[i] = -1;
    if (!shampoo_full_dims(v, d)) continue;
    strmap_put(names, v->name, (void *)(intptr_t)(i + 1));
    int64_t nbr = rt_shampoo_nblocks(d[0], o->block), nbc = rt_shampoo_nblocks(d[1], o->block);
    for (int64_t bi = 0; bi < nbr; bi++)
      for (int64_t bj = 0; bj < nbc; bj++) {
        int64_t r = rt_shampoo_bsize(d[0], o->block, bi), c = rt_shampoo_bsize(d[1], o->block, bj);
        pb[n++] = (PhaseBlock){i, bi * nbc + bj, r * r * r + c * c * c, 0};
      }
  }
  /* pb is in (name, block) order: the blocks by root cost, largest first,
   * in that order among equal costs, through ord */
  int *ord = arena_alloc(sizeof(int) * (size_t)(n + 1));
  order_desc(pb, n, phase_block_cost, ord);
  /* LPT over the phases by a min-heap on (load, phase): the same choice as
   * a scan for the least load, the lowest phase on a tie.  Costs are
   * positive, so an empty phase always beats a loaded one: only the first
   * min(every, n) phases can ever get a block (every may be 2^30). */
  int nph = o->precondition_every < n ? o->precondition_every : n;
  PhaseLoad *h = arena_alloc(sizeof *h * (size_t)(nph + 1));
  for (int k = 0; k < nph; k++) h[k] = (PhaseLoad){0, k}; /* a heap already */
  for (int k = 0; k < n; k++) {
    pb[ord[k]].phase = h[0].phase;
    h[0].load += pb[ord[k]].cost;
    heap_down(h, nph, 0);
  }
  for (int k = n - 1; k >= 0; k--) (*first)[pb[k].rank] = k;
  *nout = n;
  return pb;
}

/* Block b's phase, of the parameter of name rank r (-1: none) */
static int phase_of(const PhaseBlock *pb, int n, const int *first, intptr_t r, int64_t b) {
  if (r < 0 || first[r] < 0) return 0;
  int64_t k = first[r] + b;
  return k < n && pb[k].rank == r && pb[k].b == b ? pb[k].phase : 0;
}

/* model_phases of a module, kept in it (Module.opt_phases) for the graph,
 * block and period it was made for. */
typedef struct OptPhaseCache {
  const Graph *w;
  int64_t block;
  int every;
  PhaseBlock *pb;
  int n, *first;
  StrMap names;
} OptPhaseCache;

/* The blocks of parameter v's full tensor (a tp shard's are among them:
 * the runtime finds its blocks' phases by their place in the full grid);
 * 0 when v has no gradient or is not preconditioned. */
static int64_t full_blocks(const Optimizer *o, const Value *v) {
  if (!v || !v->grad) return 0;
  int64_t d[IR_MAXDIM];
  for (int k = 0; k < v->shape.ndim; k++) d[k] = v->shape.d[k].n;
  if (!rt_shampoo_preconditioned(v->shape.ndim, d)) return 0;
  const Shape *full = v->gshape.ndim == v->shape.ndim ? &v->gshape : &v->shape;
  return rt_shampoo_nblocks(full->d[0].n, o->block) * rt_shampoo_nblocks(full->d[1].n, o->block);
}

int optplace_phases(const Module *m, const Value *const *params, int nparams, int **out) {
  const Optimizer *o = &m->train.opt;
  *out = NULL;
  if (!staggered(o)) return 0;
  const Graph *w = m->nstages > 1 ? m->whole : m->graph;
  OptPhaseCache *c = m->opt_phases;
  if (!c || c->w != w || c->block != o->block || c->every != o->precondition_every) {
    c = arena_alloc(sizeof *c);
    *c = (OptPhaseCache){.w = w, .block = o->block, .every = o->precondition_every};
    c->pb = model_phases(m, &c->n, &c->names, &c->first);
    ((Module *)m)->opt_phases = c; /* a cache: what the module computes is unchanged */
  }
  int nb = c->n, *first = c->first;
  StrMap names = c->names;
  PhaseBlock *pb = c->pb;
  int64_t total = 0;
  for (int i = 0; i < nparams; i++) total += full_blocks(o, params[i]);
  int n = 0;
  int *ph = arena_alloc(sizeof *ph * (size_t)(total + 1));
  for (int i = 0; i < nparams; i++) {
    int64_t nblk = full_blocks(o, params[i]);
    if (!nblk) continue;
    intptr_t r = (intptr_t)strmap_get(&names, params[i]->name) - 1;
    for (int64_t b = 0; b < nblk; b++) ph[n++] = phase_of(pb, nb, first, r, b);
  }
  *out = ph;
  return n;
}

static double unit_cost_key(const void *base, int i) { return ((const OptUnit *)base)[i].cost; }

int optplace_phases_used(const OptUnit *u, int n) {
  int k = 1;
  for (int i = 0; i < n; i++)
    if (u[i].phase >= k) k = u[i].phase + 1;
  return k;
}

/* Parameter v's Shampoo blocks under o: rows R and columns C of the tensor
 * (1 x its elements when it is not preconditioned), the block side B, and
 * nbr x nbc blocks; whether v is preconditioned. */
static bool unit_grid(const Optimizer *o, const Value *v, int64_t *R, int64_t *C, int64_t *B,
                      int64_t *nbr, int64_t *nbc) {
  int64_t d[IR_MAXDIM];
  for (int k = 0; k < v->shape.ndim; k++) d[k] = v->shape.d[k].n;
  bool pre = rt_shampoo_preconditioned(v->shape.ndim, d);
  *R = pre ? d[0] : 1;
  *C = pre ? d[1] : ir_numel(&v->shape);
  *B = pre ? o->block : *C;
  *nbr = pre ? rt_shampoo_nblocks(*R, *B) : 1;
  *nbc = pre ? rt_shampoo_nblocks(*C, *B) : 1;
  return pre;
}

/* The units of params placed over nd ranks (optplace_units, uncached). */
static int make_units(const Module *m, const Value *const *params, int nparams, int nd,
                      OptUnit **out, int64_t *seg) {
  const Optimizer *o = &m->train.opt;
  int *phase, np = optplace_phases(m, params, nparams, &phase), nph = 0;
  /* the units counted first, then made in one array (a million blocks of
   * a small block size: no doubling's leftovers in the arena) */
  int64_t total = 0, R, C, B, nbr, nbc;
  for (int i = 0; i < nparams; i++)
    if (params[i] && params[i]->grad) {
      unit_grid(o, params[i], &R, &C, &B, &nbr, &nbc);
      total += nbr * nbc;
    }
  int n = 0;
  OptUnit *u = arena_alloc(sizeof *u * (size_t)(total + 1));
  for (int i = 0; i < nparams; i++) {
    const Value *v = params[i];
    if (!v || !v->grad) continue;
    bool pre = unit_grid(o, v, &R, &C, &B, &nbr, &nbc);
    for (int64_t bi = 0; bi < nbr; bi++)
      for (int64_t bj = 0; bj < nbc; bj++) {
        OptUnit *x = &u[n++];
        memset(x, 0, sizeof *x);
        x->param = i;
        x->bi = bi;
        x->bj = bj;
        x->r = pre ? rt_shampoo_bsize(R, B, bi) : 1;
        x->c = pre ? rt_shampoo_bsize(C, B, bj) : C;
        x->blocked = pre;
        x->cost = unit_cost(o, x->r, x->c, pre);
        x->phase = pre && nph < np ? phase[nph++] : -1;
      }
  }
  /* LPT: the costliest first, each to the least loaded rank (the lowest on
   * a tie); with staggered roots a block goes to the rank with the least
   * root work in its phase first (so that every step's roots are spread
   * over the ranks too), then the least loaded */
  int *ord = arena_alloc(sizeof(int) * (size_t)(n + 1));
  order_desc(u, n, unit_cost_key, ord);
  double *load = arena_alloc(sizeof(double) * (size_t)nd);
  int every = optplace_phases_used(u, n);
  double *pload = arena_alloc(sizeof(double) * (size_t)nd * (size_t)every);
  for (int k = 0; k < n; k++) {
    const OptUnit *x = &u[ord[k]];
    int best = 0;
    for (int r = 1; r < nd; r++) {
      if (x->phase >= 0) {
        double a = pload[r * every + x->phase], b = pload[best * every + x->phase];
        if (a != b) {
          if (a < b) best = r;
          continue;
        }
      }
      if (load[r] < load[best]) best = r;
    }
    u[ord[k]].owner = best;
    load[best] += x->cost;
    if (x->phase >= 0) pload[best * every + x->phase] += optplace_root_flops(o, x);
  }
  /* each rank's units packed in unit order into its segment */
  int64_t *fill = arena_alloc(sizeof(int64_t) * (size_t)nd);
  *seg = 0;
  for (int k = 0; k < n; k++) {
    u[k].pos = fill[u[k].owner];
    fill[u[k].owner] += u[k].r * u[k].c;
    if (fill[u[k].owner] > *seg) *seg = fill[u[k].owner];
  }
  *out = u;
  return n;
}

/* optplace_units' results kept in the module (Module.opt_units) for the
 * last few (parameters, ranks, settings) asked: the memory plan, the
 * program and each print of the plan ask for the same units (a million
 * blocks of a small block size: a fifth of a second each time).  The units
 * handed out are shared: callers read them (report.c copies before it
 * changes their owners). */
enum { UNIT_CACHE = 4 };
typedef struct OptUnitKey {
  const Graph *w;
  const Value **params;
  int nparams, nd;
  int block, every, root;
  bool stagger;
  uint64_t shapes;   /* the parameters' shapes and gradients, hashed (a pass may reshape) */
} OptUnitKey;
typedef struct OptUnitCache {
  OptUnitKey key[UNIT_CACHE];
  OptUnit *u[UNIT_CACHE];
  int n[UNIT_CACHE], next, used;
  int64_t seg[UNIT_CACHE];
} OptUnitCache;

static bool unit_key_eq(const OptUnitKey *a, const OptUnitKey *b) {
  return a->w == b->w && a->nparams == b->nparams && a->nd == b->nd && a->block == b->block &&
         a->every == b->every && a->root == b->root && a->stagger == b->stagger &&
         a->shapes == b->shapes &&
         !memcmp(a->params, b->params, sizeof *a->params * (size_t)a->nparams);
}

static uint64_t shapes_hash(const Value *const *params, int nparams) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < nparams; i++) {
    const Value *v = params[i];
    if (!v) continue;
    h = (h ^ (uint64_t)(v->grad != NULL)) * 1099511628211ull;
    for (int k = 0; k < v->shape.ndim; k++) h = (h ^ (uint64_t)v->shape.d[k].n) * 1099511628211ull;
    for (int k = 0; k < v->gshape.ndim; k++) h = (h ^ (uint64_t)v->gshape.d[k].n) * 1099511628211ull;
  }
  return h;
}

int optplace_units(const Module *m, const Value *const *params, int nparams, int nd,
                   OptUnit **out, int64_t *seg) {
  const Optimizer *o = &m->train.opt;
  OptUnitKey k = {m->nstages > 1 ? m->whole : m->graph, (const Value **)params, nparams, nd,
                  o->block, o->precondition_every, o->root, staggered(o),
                  shapes_hash(params, nparams)};
  OptUnitCache *c = m->opt_units;
  for (int i = 0; c && i < c->used; i++)
    if (unit_key_eq(&c->key[i], &k)) {
      *out = c->u[i], *seg = c->seg[i];
      return c->n[i];
    }
  int n = make_units(m, params, nparams, nd, out, seg);
  if (!c) {
    c = arena_alloc(sizeof *c);
    ((Module *)m)->opt_units = c; /* a cache: what the module computes is unchanged */
  }
  int i = c->next;
  c->next = (c->next + 1) % UNIT_CACHE;
  if (c->used < UNIT_CACHE) c->used++;
  k.params = arena_alloc(sizeof *k.params * (size_t)(nparams + 1));
  memcpy(k.params, params, sizeof *k.params * (size_t)nparams);
  c->key[i] = k, c->u[i] = *out, c->n[i] = n, c->seg[i] = *seg;
  return n;
}


bool optplace_active(const Module *m) {
  const Plan *p = &m->train.plan;
  const Optimizer *o = &m->train.opt;
  int nd = p->dp * (p->sp_kind == SP_RING && p->sp > 1 ? p->sp : 1);
  int v = m->nstages > 1 ? m->nstages / p->pp : 1;
  return o->kind && !strcmp(o->kind, "shampoo") && !o->no_spread && nd > 1 && v == 1 && p->zero == 0 &&
         m->train.mesh && m->train.mesh->ndev > 1;
}

int optplace_ranks(const Module *m) {
  const Plan *p = &m->train.plan;
  return p->dp * (p->sp_kind == SP_RING && p->sp > 1 ? p->sp : 1);
}

int64_t optplace_dir_bytes(const Module *m, const Graph *g) {
  if (!optplace_active(m)) return 0;
  OptUnit *u;
  int64_t seg;
  optplace_units(m, (const Value *const *)g->params.data, g->params.len, optplace_ranks(m), &u,
                 &seg);
  return rt_optim_align64(seg * 4) * optplace_ranks(m);
}

/* Under tensor parallelism (1D or the tp2d grid) each rank runs Shampoo on
 * its shard: a block lives where its shard lives and nothing more moves.
 * The blocks stay the full tensor's (the 1-rank run's) only when every
 * piece a split dim is cut into (the local dim, or for a fused q,k,v
 * weight each segment's share) is a whole number of blocks; otherwise a
 * block would straddle two shards, and the plan is refused naming the
 * parameter, the piece and a block that fits every split parameter. */
static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

/* Piece j of the pieces dim d of p is cut into per rank (0: d not split,
 * or no piece j): the local dim, or a fused weight's segment's share. */
static int64_t tp_piece(const Plan *pl, const Value *p, int d, int j) {
  int ax = p->shard.axis[d];
  if (ax < 0) return 0;
  int P = ax == AX_TP ? pl->tp : pl->tp2d;
  bool segs = (ax == AX_TP || ax == AX_TPR) && p->shard.nseg > 1;
  if (!segs) return j == 0 ? p->shape.d[d].n : 0;
  return j < p->shard.nseg ? p->shard.seg[j] / P : 0;
}

/* Shampoo's blocks over the whole model's matrices (full tensors). */
static int64_t model_blocks(const Graph *g, int64_t block) {
  int64_t n = 0;
  for (int i = 0; i < g->params.len; i++) {
    int64_t d[IR_MAXDIM];
    if (shampoo_full_dims(g->params.data[i], d))
      n += rt_shampoo_nblocks(d[0], block) * rt_shampoo_nblocks(d[1], block);
  }
  return n;
}

int optplace_check_blocks(Module *m) {
  const Optimizer *o = &m->train.opt;
  const Graph *g = m->graph;
  if (!g || !o->kind || strcmp(o->kind, "shampoo") || o->block < 1) return 0;
  int64_t n = model_blocks(g, o->block);
  if (n <= OPTPLACE_MAX_BLOCKS) return 0;
  /* the smallest power-of-two multiple of block that fits */
  int64_t sug = o->block;
  while (sug < (1 << 16) && model_blocks(g, sug) > OPTPLACE_MAX_BLOCKS) sug *= 2;
  const char *fmt = "shampoo block %d cuts the model's matrices into %lld blocks, more than the "
                    "%d a model may have (each block has its own factors, roots and step); use a "
                    "larger block (e.g. block = %lld)";
  if (o->block_loc.file)
    diag_error(o->block_loc, fmt, o->block, (long long)n, OPTPLACE_MAX_BLOCKS, (long long)sug);
  else
    diag_fatal_noloc(fmt, o->block, (long long)n, OPTPLACE_MAX_BLOCKS, (long long)sug);
  return -1;
}

int optplace_check_tp(Module *m) {
  const Plan *pl = &m->train.plan;
  const Optimizer *o = &m->train.opt;
  Graph *g = m->graph;
  if (!g || !o->kind || strcmp(o->kind, "shampoo") || (pl->tp <= 1 && pl->tp2d <= 1)) return 0;
  const Value *bad = NULL;
  int bad_d = 0;
  int64_t all = 0, bad_s = 0;
  for (int i = 0; i < g->params.len; i++) {
    const Value *p = g->params.data[i];
    int64_t gd[2] = {0, 0};
    if (p->gshape.ndim != 2) continue;
    gd[0] = p->gshape.d[0].n, gd[1] = p->gshape.d[1].n;
    if (!rt_shampoo_preconditioned(2, gd)) continue;
    for (int d = 0; d < 2; d++)
      for (int j = 0; tp_piece(pl, p, d, j); j++) {
        int64_t s = tp_piece(pl, p, d, j);
        all = gcd64(all, s);
        if ((s % o->block || s < 2) && !bad) bad = p, bad_d = d, bad_s = s;
      }
  }
  if (!bad) return 0;
  int64_t sug = 0;
  for (int64_t b = all < o->block ? all : o->block; b >= 2 && !sug; b--)
    if (all % b == 0) sug = b;
  int ax = bad->shard.axis[bad_d];
  char msg[160];
  if (sug)
    snprintf(msg, sizeof msg, "e.g. block = %lld", (long long)sug);
  else
    snprintf(msg, sizeof msg, "no block of 2 or more fits every split parameter");
  SrcLoc at = plan_key_loc(&m->train, pl->tp > 1 ? PLAN_TP : PLAN_TP2D);
  const char *fmt = "shampoo block %d would straddle the shards of parameter '%s': %s cuts its "
                    "dim %d (%lld) into pieces of %lld; a block lives where its shard lives, so "
                    "the block must divide every piece (%s)";
  if (at.file)
    diag_error(at, fmt, o->block, bad->name, ax == AX_TP ? "tp" : "tp2d", bad_d,
               (long long)bad->gshape.d[bad_d].n, (long long)bad_s, msg);
  else
    diag_fatal_noloc(fmt, o->block, bad->name, ax == AX_TP ? "tp" : "tp2d", bad_d,
                     (long long)bad->gshape.d[bad_d].n, (long long)bad_s, msg);
  return -1;
}

/* Adafactor under tensor parallelism: a factored tensor's row and column
 * statistics and the RMS of its update span the shards, so the step runs in
 * three phases (runtime k_optim2.inc rt_adafactor_sums, _squares, _finish)
 * with all-reduces over the tp axes between them, of a statistics buffer
 * laid out here: round 0 the partial row sums (columns split), column sums
 * (rows split) and row-accumulator sums x, round 1 each tensor's Σ u²;
 * within a round, the entries reduced over the first axis only (tp, or the
 * grid's row axis), over both, over the second only, so that one all-reduce
 * per axis and round covers them. */
int64_t optplace_af_layout(const Module *m, const Value *const *params, int n, AfSplit *out,
                           AfLayout *lay) {
  const Plan *pl = &m->train.plan;
  const Optimizer *o = &m->train.opt;
  memset(lay, 0, sizeof *lay);
  lay->ax[0] = pl->tp2d > 1 ? AX_TPR : AX_TP;
  lay->ax[1] = pl->tp2d > 1 ? AX_TPC : -1;
  if (!o->kind || strcmp(o->kind, "adafactor") || (pl->tp <= 1 && pl->tp2d <= 1)) return 0;
  int P = pl->tp2d > 1 ? pl->tp2d : pl->tp;
  /* region of an axis set: 0 the first axis only, 1 both, 2 the second only */
#define AF_REGION(a0, a1) ((a0) && (a1) ? 1 : (a0) ? 0 : 2)
  int64_t len[2][3] = {{0}};
  for (int pass = 0; pass < 2; pass++) {
    int64_t at[2][3] = {{0}};
    for (int k = 0; k < 2 && pass; k++) {
      int64_t base = k ? lay->r[0][3] : 0;
      lay->r[k][0] = base;
      lay->r[k][1] = base + len[k][0];
      lay->r[k][2] = lay->r[k][1] + len[k][1];
      lay->r[k][3] = lay->r[k][2] + len[k][2];
      for (int g = 0; g < 3; g++) at[k][g] = lay->r[k][g];
    }
    for (int i = 0; i < n; i++) {
      const Value *v = params[i];
      AfSplit a = {-1, -1, -1, -1, 1, 1, 1, 1};
      bool on[2] = {false, false}; /* split over ax[0], ax[1] */
      for (int d = 0; d < v->shape.ndim; d++)
        for (int k = 0; k < 2; k++) on[k] |= v->shard.axis[d] >= 0 && v->shard.axis[d] == lay->ax[k];
      if (v->grad && (on[0] || on[1])) {
        int rq = AF_REGION(on[0], on[1]);
        if (v->shape.ndim == 2) {
          int a0 = v->shard.axis[0], a1 = v->shard.axis[1];
          a.rows = v->gshape.d[0].n, a.cols = v->gshape.d[1].n;
          a.rep = a1 >= 0 ? P : 1;
          if (a1 >= 0) { /* row sums over the columns' axis */
            int g = AF_REGION(a1 == lay->ax[0], a1 == lay->ax[1]);
            a.s = at[0][g], at[0][g] += v->shape.d[0].n;
            if (!pass) len[0][g] += v->shape.d[0].n;
          }
          if (a0 >= 0) {
            int g = AF_REGION(a0 == lay->ax[0], a0 == lay->ax[1]);
            a.t = at[0][g], at[0][g] += v->shape.d[1].n;
            if (!pass) len[0][g] += v->shape.d[1].n;
          }
          a.x = at[0][rq]++;
          if (!pass) len[0][rq]++;
        }
        a.numel = ir_numel(&v->gshape);
        a.q = at[1][rq]++;
        if (!pass) len[1][rq]++;
      }
      if (pass && out) out[i] = a;
    }
  }
#undef AF_REGION
  lay->elems = lay->r[1][3];
  return lay->elems;
}

int64_t optplace_af_bytes(const Module *m, const Graph *g) {
  AfLayout lay;
  return rt_optim_align64(4 * optplace_af_layout(m, (const Value *const *)g->params.data,
                                                 g->params.len, NULL, &lay));
}
