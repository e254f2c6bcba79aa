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
 * agree. */
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

static const OptUnit *sort_units;
static int by_cost(const void *a, const void *b) {
  const OptUnit *x = &sort_units[*(const int *)a], *y = &sort_units[*(const int *)b];
  if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

int optplace_units(const Optimizer *o, const Value *const *params, int nparams, int nd,
                   OptUnit **out, int64_t *seg) {
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
      }
  }
  /* LPT: the costliest first, each to the least loaded rank (the lowest on a tie) */
  int *ord = arena_alloc(sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) ord[i] = i;
  sort_units = u;
  qsort(ord, (size_t)n, sizeof *ord, by_cost);
  double *load = arena_alloc(sizeof(double) * (size_t)nd);
  for (int k = 0; k < n; k++) {
    int best = 0;
    for (int r = 1; r < nd; r++)
      if (load[r] < load[best]) best = r;
    u[ord[k]].owner = best;
    load[best] += u[ord[k]].cost;
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
  optplace_units(&m->train.opt, (const Value *const *)g->params.data, g->params.len,
                 optplace_ranks(m), &u, &seg);
  return rt_optim_align64(seg * 4) * optplace_ranks(m);
}
