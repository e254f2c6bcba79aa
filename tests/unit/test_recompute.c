/* test_recompute.c — recompute=auto's choice per tensor against the exact
 * optimum.  On a small model (three MLP blocks, nine candidate nodes)
 * every set of candidates is planned exactly (the zero and memplan passes
 * on a copy, as the pass plans it): the least recompute FLOPs whose planned
 * arena fits is the optimum.  For budgets from just below the plain plan
 * to full recompute's, recompute=auto must fit and add exactly the
 * optimum's FLOPs.  (The optima: one layernorm's outputs just below the
 * plain plan, a GELU output with or without a layernorm's further down,
 * and near full's plan also a pre-activation, whose matmul reruns; per
 * layer, auto would take the first block's whole selective or full set.) */
#include "test.h"
#include "compile.h"

static const char *src =
    "const vocab = 16, d = 32, layers = 3\n"
    "layer block(x) {\n"
    "  x = x + mlp(layernorm(x), hidden = 4 * d, act = gelu)\n"
    "  return x\n"
    "}\n"
    "model net(tokens: i32[B, T], targets: i32[B, T]) {\n"
    "  x = embedding(tokens, vocab, d)\n"
    "  repeat layers { x = block(x) }\n"
    "  logits = linear(layernorm(x), vocab, bias = false, tied = embedding)\n"
    "  return cross_entropy(logits, targets)\n"
    "}\n"
    "mesh one { devices = 1, device = cpu }\n"
    "train {\n"
    "  model = net, mesh = one\n"
    "  batch = 4, seq = 16, steps = 1\n"
    "  optimizer = sgd(lr = 0.1)\n"
    "  strategy = \"dp=1,recompute=auto\"\n"
    "}\n";

static Value *root(Value *v) {
  while (v->alias) v = v->alias;
  return v;
}

/* The module with every pass before recompute run. */
static Module *before_recompute(void) {
  diag_reset();
  Program *p = ast_parse(src_from_string("remat.shard", src));
  SemaOptions o = {0};
  Module *m = p ? frontend_run(p, &o) : NULL;
  ASSERT(0, diag_error_count());
  if (!m || !m->graph) return NULL;
  for (int i = 0; i < pass_count && strcmp(pass_list[i].name, "recompute"); i++)
    ASSERT(0, pass_list[i].run(m));
  return m;
}

/* The FLOPs per microbatch of the copies recompute put in g. */
static double remat_flops(const Graph *g) {
  double f = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    if (n->remat) f += ir_node_flops(n);
  }
  return f;
}

int main(void) {
  Module *m = before_recompute();
  if (!m) return 1;
  Graph *g0 = ir_graph_clone(m->graph);
  int nv = g0->values.len;
  bool *cand = calloc((size_t)nv + 1, 1), *drop = calloc((size_t)nv + 1, 1);
  recompute_dropped(g0, RECOMPUTE_FULL, cand);
  /* units: a candidate node's outputs with their candidate views */
  int nn = g0->nodes.len;
  int *unit = malloc(sizeof(int) * (size_t)(nv + 1)), nu = 0, gelu_unit = -1;
  int *nunit = malloc(sizeof(int) * (size_t)(nn + 1));
  for (int i = 0; i < nn; i++) nunit[i] = -1;
  for (int i = 0; i < nv; i++) {
    Value *v = g0->values.data[i], *rt = root(v);
    unit[i] = !cand[i]                      ? -1
              : rt != v && cand[rt->id]     ? unit[rt->id]
              : rt == v && nunit[v->def->id] >= 0 ? nunit[v->def->id]
                                            : nu++;
    if (cand[i] && rt == v) nunit[v->def->id] = unit[i];
    if (cand[i] && v->def->op == OP_GELU && gelu_unit < 0) gelu_unit = unit[i];
  }
  ASSERT(1, nu >= 6 && nu <= 16);
  ASSERT(1, gelu_unit >= 0);

  int64_t none = recompute_drop_plan(m, g0, drop);
  memcpy(drop, cand, (size_t)nv);
  int64_t full = recompute_drop_plan(m, g0, drop);
  ASSERT(1, full > 0 && full < none);

  /* every set's FLOPs and planned arena */
  int ns = 1 << nu;
  double *fl = malloc(sizeof(double) * (size_t)ns);
  int64_t *by = malloc(sizeof(int64_t) * (size_t)ns);
  for (int s = 0; s < ns; s++) {
    for (int i = 0; i < nv; i++) drop[i] = unit[i] >= 0 && (s >> unit[i] & 1);
    fl[s] = recompute_drop_flops(g0, drop);
    by[s] = recompute_drop_plan(m, g0, drop);
  }
  int64_t gelu_bytes = by[1 << gelu_unit];
  ASSERT(1, gelu_bytes < none);
  double cheapest = -1;
  for (int u = 0; u < nu; u++)
    if (by[1 << u] >= 0 && by[1 << u] < none && (cheapest < 0 || fl[1 << u] < cheapest)) cheapest = fl[1 << u];

  /* budgets: just below none, the one GELU output's plan, and between */
  int64_t budgets[] = {none - 1, gelu_bytes, gelu_bytes - 1, (none + full) / 2, (none + 3 * full) / 4,
                       full + 4096, full};
  int nb = (int)(sizeof budgets / sizeof *budgets);
  for (int b = 0; b < nb; b++) {
    double best = -1;
    for (int s = 0; s < ns; s++)
      if (by[s] >= 0 && by[s] <= budgets[b] && (best < 0 || fl[s] < best)) best = fl[s];
    ASSERT(1, best >= 0);
    m->graph = ir_graph_clone(g0);
    m->train.mesh->mem_bytes = (double)budgets[b];
    ASSERT(0, pass_recompute(m));
    double got = remat_flops(m->graph);
    if (got != best)
      fprintf(stderr, "budget %lld: recompute=auto adds %.6g FLOPs, the optimum %.6g (%s)\n",
              (long long)budgets[b], got, best, m->graph->recompute_desc);
    ASSERT_NEAR(best, got, 0.0);
    /* it fits: plan what it chose */
    ASSERT(0, pass_zero(m));
    ASSERT(0, pass_memplan(m));
    ASSERT(1, m->mem.arena_bytes <= budgets[b]);
    /* just below the plain plan: the cheapest single node (a layernorm) */
    if (b == 0) ASSERT_NEAR(cheapest, got, 0.0);
  }
  printf("recompute: %d candidate units, %d sets planned; none %lld, full %lld bytes\n", nu, ns,
         (long long)none, (long long)full);
  free(fl);
  free(by);
  free(unit);
  free(nunit);
  free(cand);
  free(drop);
  TEST_MAIN_END();
}
