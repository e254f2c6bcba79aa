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
  const char *name;
  int64_t b, cost;
  int phase;
} PhaseBlock;

static int by_root_cost(const void *a, const void *b) {
  const PhaseBlock *x = a, *y = b;
  if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return x->b < y->b ? -1 : x->b > y->b;
}

static bool staggered(const Optimizer *o) {
  return o->kind && !strcmp(o->kind, "shampoo") && !o->no_stagger && o->precondition_every > 1;
}

/* The phase of every block of the model, sorted by (name, b) for lookup. */
static PhaseBlock *model_phases(const Module *m, int *nout) {
  const Optimizer *o = &m->train.opt;
  const Graph *w = m->nstages > 1 ? m->whole : m->graph;
  int n = 0, cap = 0;
  PhaseBlock *pb = NULL;
  for (int i = 0; w && i < w->params.len; i++) {
    const Value *v = w->params.data[i];
    int64_t d[IR_MAXDIM];
    for (int k = 0; k < v->shape.ndim; k++) d[k] = v->shape.d[k].n;
    if (!rt_shampoo_preconditioned(v->shape.ndim, d)) continue;
    int64_t nbr = rt_shampoo_nblocks(d[0], o->block), nbc = rt_shampoo_nblocks(d[1], o->block);
    for (int64_t bi = 0; bi < nbr; bi++)
      for (int64_t bj = 0; bj < nbc; bj++) {
        int64_t r = rt_shampoo_bsize(d[0], o->block, bi), c = rt_shampoo_bsize(d[1], o->block, bj);
        pb = arena_grow(pb, n, &cap, sizeof *pb, 64);
        pb[n++] = (PhaseBlock){v->name, bi * nbc + bj, r * r * r + c * c * c, 0};
      }
  }
  qsort(pb, (size_t)n, sizeof *pb, by_root_cost);
  int64_t *load = arena_alloc(sizeof(int64_t) * (size_t)o->precondition_every);
  for (int k = 0; k < n; k++) {
    int best = 0;
    for (int ph = 1; ph < o->precondition_every; ph++)
      if (load[ph] < load[best]) best = ph;
    pb[k].phase = best;
    load[best] += pb[k].cost;
  }
  *nout = n;
  return pb;
}

static int phase_of(const PhaseBlock *pb, int n, const char *name, int64_t b) {
  for (int k = 0; k < n; k++)
    if (pb[k].b == b && !strcmp(pb[k].name, name)) return pb[k].phase;
  return 0;
}

int optplace_phases(const Module *m, const Value *const *params, int nparams, int **out) {
  const Optimizer *o = &m->train.opt;
  *out = NULL;
  if (!staggered(o)) return 0;
  int nb;
  PhaseBlock *pb = model_phases(m, &nb);
  int n = 0, cap = 0;
  int *ph = NULL;
  for (int i = 0; i < nparams; i++) {
    const Value *v = params[i];
    if (!v || !v->grad) continue;
    int64_t d[IR_MAXDIM];
    for (int k = 0; k < v->shape.ndim; k++) d[k] = v->shape.d[k].n;
    if (!rt_shampoo_preconditioned(v->shape.ndim, d)) continue;
    int64_t nblk = rt_shampoo_nblocks(d[0], o->block) * rt_shampoo_nblocks(d[1], o->block);
    for (int64_t b = 0; b < nblk; b++) {
      ph = arena_grow(ph, n, &cap, sizeof *ph, 64);
      ph[n++] = phase_of(pb, nb, v->name, b);
    }
  }
  *out = ph;
  return n;
}

static const OptUnit *sort_units;
static int by_cost(const void *a, const void *b) {
  const OptUnit *x = &sort_units[*(const int *)a], *y = &sort_units[*(const int *)b];
  if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

int optplace_units(const Module *m, const Value *const *params, int nparams, int nd,
                   OptUnit **out, int64_t *seg) {
  const Optimizer *o = &m->train.opt;
  int *phase, np = optplace_phases(m, params, nparams, &phase), nph = 0;
  int n = 0, cap = 0;
  OptUnit *u = NULL;
  for (int i = 0; i < nparams; i++) {
    const Value *v = params[i];
    if (!v || !v->grad) continue;
    int64_t d[IR_MAXDIM];
    for (int k = 0; k < v->shape.ndim; k++) d[k] = v->shape.d[k].n;
    bool pre = rt_shampoo_preconditioned(v->shape.ndim, d);
    int64_t R = pre ? d[0] : 1, C = pre ? d[1] : ir_numel(&v->shape), B = pre ? o->block : C;
    int64_t nbr = pre ? rt_shampoo_nblocks(R, B) : 1, nbc = pre ? rt_shampoo_nblocks(C, B) : 1;
    for (int64_t bi = 0; bi < nbr; bi++)
      for (int64_t bj = 0; bj < nbc; bj++) {
        u = arena_grow(u, n, &cap, sizeof *u, 64);
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
  for (int i = 0; i < n; i++) ord[i] = i;
  sort_units = u;
  qsort(ord, (size_t)n, sizeof *ord, by_cost);
  double *load = arena_alloc(sizeof(double) * (size_t)nd);
  int every = o->precondition_every > 0 ? o->precondition_every : 1;
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
