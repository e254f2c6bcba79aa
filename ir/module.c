/* module.c — small facts about a compilation shared by the passes. */
#include <string.h>

#include "module.h"
#include "runtime/rt_optim.h"

int opt_states(const Optimizer *o) {
  if (!o->kind || opt_blocked(o)) return 0;
  return !strcmp(o->kind, "adamw") ? 2 : o->momentum > 0 ? 1 : 0;
}

bool opt_blocked(const Optimizer *o) {
  return o->kind && (!strcmp(o->kind, "shampoo") || !strcmp(o->kind, "adafactor"));
}

static int dims(const Shape *s, int64_t *d) {
  for (int k = 0; k < s->ndim; k++) d[k] = s->d[k].n;
  return s->ndim;
}

int64_t opt_state_elems(const Optimizer *o, const Shape *s) {
  int64_t d[IR_MAXDIM];
  int nd = dims(s, d);
  if (!strcmp(o->kind, "shampoo"))
    return rt_shampoo_state_elems(nd, d, o->block, o->beta1 > 0, o->graft);
  return rt_adafactor_state_elems(nd, d, o->beta1 > 0);
}

int64_t opt_work_bytes(const Optimizer *o, const Shape *const *shapes, int n, bool worker,
                       int64_t *root_work) {
  if (root_work) *root_work = 0;
  if (strcmp(o->kind, "shampoo")) return 0;
  int64_t elems = 0, k = 0, dbl, ints;
  for (int i = 0; i < n; i++) {
    int64_t d[IR_MAXDIM], e, f;
    int nd = dims(shapes[i], d);
    rt_shampoo_unitmax(nd, d, o->block, &e, &f);
    if (e > elems) elems = e;
    if (f > k) k = f;
  }
  int64_t main = rt_optim_align64(rt_shampoo_work(elems, k, 4, &dbl, &ints));
  int64_t rw = worker ? rt_shampoo_root_work(k) : 0;
  if (root_work) *root_work = rw;
  return main + rw;
}

bool opt_root_worker(const Module *m) {
  return m->nstages > 1 && !m->cuda && m->train.opt.kind && !strcmp(m->train.opt.kind, "shampoo");
}

int64_t opt_plan_state(const Optimizer *o, Graph *g, const Graph *whole, int64_t off,
                       int64_t *work_off, bool worker, int64_t *root_work) {
  *work_off = off;
  *root_work = 0;
  if (!opt_blocked(o)) return off;
  for (int i = 0; i < g->params.len; i++) {
    Value *p = g->params.data[i];
    if (!p->grad) continue;
    p->opt_offset = off;
    off += rt_optim_align64(opt_state_elems(o, &p->shape) * 4);
  }
  /* one workspace as large as the whole model's largest block needs, so
   * that any chunk's serves a pipeline rank's chunks */
  const Graph *w = whole ? whole : g;
  const Shape **shapes = arena_alloc(sizeof *shapes * (size_t)(w->params.len + 1));
  for (int i = 0; i < w->params.len; i++) shapes[i] = &((const Value *)w->params.data[i])->shape;
  *work_off = off;
  return off + rt_optim_align64(opt_work_bytes(o, shapes, w->params.len, worker, root_work));
}
