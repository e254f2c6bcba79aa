/* stage.c — pipeline parallelism: the forward graph cut into pp stages.
 *
 * Runs after the shard pass (so a stage holds tp-local shapes and its
 * collectives) and before autodiff.  A cut falls at an op boundary where
 * at most PIPE_MAXACT (4) activations cross it: between two layers (the
 * nodes on either side belong to different top-level scopes, e.g.
 * "blocks.1" and "blocks.2", or the embedding and the first block), or
 * inside a layer (a transformer block's residual stream between its
 * attention and its MLP; the residual and ln_1's output before the qkv
 * matmul; the residual and the fc output before the gelu).  The stage
 * sends those activations to the next one per microbatch, one message
 * each in definition order, and their gradients come back in that order.
 * The pp-1 cuts minimise the largest stage's FLOPs (forward and backward
 * are proportional per op): between layers as before, inside one only
 * where that makes the largest stage smaller, and then as few as keep it
 * so, then the fewest message bytes; or, with pp=N:a+b+..., stage s holds
 * the next given number of layers, a.5 ending inside the next layer at the
 * boundary nearest its middle that one activation crosses (where none
 * does, that several cross) (ops outside any layer, the embedding and the
 * head, go with the first and last stage).
 *
 * Each stage becomes a graph of its own (Module.stages): its nodes, copies
 * of the parameters it uses (a parameter used in two stages, a tied
 * embedding, is held by both and its gradients are summed over the EMBED
 * communicator), both data inputs (each stage loads its microbatch's
 * tokens and targets), the received activations (recv_act, input nodes)
 * and, before the last stage, the sent ones (send_act, the first as its
 * "loss"): autodiff seeds their gradients with those received (OP_RECV)
 * instead of 1/mb.
 */
#include <math.h>
#include <string.h>

#include "cost.h"
#include "passes.h"
#include "schedule.h"

/* The layer a node belongs to: its scope up to the repeat index
 * ("blocks.3.attn" -> "blocks.3"), or the first component. */
const char *stage_layer_of(const Node *n, char *buf, int cap) {
  const char *s = n->scope ? n->scope : "";
  const char *dot = strchr(s, '.');
  int len = dot ? (int)(dot - s) : (int)strlen(s);
  if (dot && dot[1] >= '0' && dot[1] <= '9') {
    const char *e = dot + 1;
    while (*e >= '0' && *e <= '9') e++;
    len = (int)(e - s);
  }
  if (len >= cap) len = cap - 1;
  memcpy(buf, s, (size_t)len);
  buf[len] = 0;
  return buf;
}

static bool is_leaf(const Node *n) { return n->op == OP_PARAM || n->op == OP_INPUT; }

/* The first and last node (positions in g) that reads each parameter, by
 * value id; -1 for a value no node reads as a parameter.  Arena-allocated. */
static void param_readers(const Graph *g, int **first, int **last) {
  int n = g->nodes.len, nv = g->values.len;
  int *f = arena_alloc(sizeof(int) * (size_t)nv), *l = arena_alloc(sizeof(int) * (size_t)nv);
  for (int i = 0; i < nv; i++) f[i] = l[i] = -1;
  for (int i = 0; i < n; i++) {
    const Node *nd = g->nodes.data[i];
    for (int k = 0; k < nd->nin && !is_leaf(nd); k++) {
      const Value *v = nd->in[k];
      if (v->role != ROLE_PARAM) continue;
      if (f[v->id] < 0) f[v->id] = i;
      l[v->id] = i;
    }
  }
  *first = f, *last = l;
}

typedef struct Cut {
  int at;          /* nodes [0, at) before it */
  Value *v[PIPE_MAXACT];   /* the activations crossing it, in definition order */
  int nv;
  double bytes;    /* of one microbatch's message(s) */
  double xbytes;   /* the bytes beyond the first tensor's: held in a stash
                      slot on both sides (sent, and the gradient sent back) */
  double extra;    /* their FLOP-equivalents, paid by the stages on both
                      sides (msg_flops_per_byte) */
  double before;   /* FLOPs of the nodes before it */
  int layers;      /* layers (named scopes such as blocks.3) that end before it */
  bool inside;     /* inside layer number `layers` (an op boundary), not between two */
  double lo, hi;   /* inside: the FLOPs before that layer, and before its end */
} Cut;

/* Value copies for one stage: map[old id] (NULL: not yet in the stage). */
static Value *stage_value(Graph *sg, Value **map, Value *v) {
  if (map[v->id]) return map[v->id];
  Value *c = ir_value_copy(sg, v);
  map[v->id] = c;
  if (v->role == ROLE_PARAM) {
    Node *n = ir_node_copy(sg, v->def);
    n->out = n->outs[0] = c;
    c->def = n;
    vec_push(&sg->params, c);
  }
  return c;
}

static Graph *build_stage(Module *m, int s, int lo, int hi, const Cut *recv, const Cut *send,
                          const bool *shared) {
  Graph *g = m->graph;
  Graph *sg = ir_graph_new(g->model);
  memcpy(sg->symname, g->symname, sizeof g->symname);
  memcpy(sg->symval, g->symval, sizeof g->symval);
  sg->nsym = g->nsym;
  sg->stage = s;
  sg->nstages = m->nstages;
  Value **map = arena_alloc(sizeof(Value *) * (size_t)(g->values.len + 1));
  /* Both data inputs, first, in their order. */
  for (int i = 0; i < g->inputs.len; i++) {
    Value *v = g->inputs.data[i];
    Value *c = ir_input(sg, v->name, v->shape, v->dtype, v->loc);
    c->shard = v->shard;
    map[v->id] = c;
  }
  for (int i = 0; recv && i < recv->nv; i++) {
    const Value *r = recv->v[i];
    Value *c = ir_input(sg, NULL, r->shape, r->dtype, r->loc);
    sg->inputs.len--; /* received, not loaded: an activation */
    c->role = ROLE_ACT;
    c->shard = r->shard;
    sg->recv_act[sg->nrecv++] = c;
    map[r->id] = c;
  }
  for (int i = lo; i < hi; i++) {
    Node *n = g->nodes.data[i];
    if (is_leaf(n)) continue;
    Value *in[IR_MAXIN];
    for (int k = 0; k < n->nin; k++) {
      Value *v = n->in[k];
      if (!map[v->id] && v->role != ROLE_PARAM) {
        diag_error(n->loc, "internal: pipeline stage %d uses value %d from another stage", s, v->id);
        return NULL;
      }
      in[k] = stage_value(sg, map, v);
      if (v->role == ROLE_PARAM) in[k]->pp_shared = shared[v->id];
    }
    Node *c = ir_node_copy(sg, n);
    for (int k = 0; k < n->nin; k++) {
      c->in[k] = in[k];
      in[k]->nuses++;
    }
    for (int j = 0; j < n->nout; j++) {
      Value *o = n->outs[j];
      if (!o) continue;
      Value *co = ir_value_copy(sg, o);
      co->def = c;
      c->outs[j] = co;
      map[o->id] = co;
    }
    c->out = c->outs[0];
    for (int j = 0; j < n->nout; j++) {
      Value *o = n->outs[j];
      if (o && o->alias) c->outs[j]->alias = map[o->alias->id];
    }
  }
  if (send) {
    for (int i = 0; i < send->nv; i++) sg->send_act[sg->nsend++] = map[send->v[i]->id];
    sg->loss = sg->send_act[0];
    sg->pipe_out = true;
  } else {
    sg->loss = map[g->loss->id];
  }
  sg->nfwd = 0;
  return sg;
}

/* Memory of a stage, estimated before the stages exist (the exact plan
 * comes from memplan once they do): what its parameters cost per rank
 * (parameter, gradient and optimizer state, over ZeRO's shards), plus the
 * activations its backward reads of one microbatch's forward times the
 * microbatches it holds at once under the schedule.  The activations come
 * from autodiff run on a copy of the whole forward graph: held[v] when a
 * backward node reads forward value v. */
typedef struct StageMem {
  double *held_at;     /* prefix sums over node positions: held bytes defined before i */
  double *par_at;      /* prefix sums: bytes of the parameters first read before node i */
  double *tied_at;     /* bytes of the parameters read before node i and at or after it */
  double per_param;    /* bytes per parameter byte: itself, gradient, optimizer state */
  int slots[MAX_STAGES];
  double budget;       /* device bytes (0: none) */
} StageMem;

static bool stage_mem_init(Module *m, StageMem *sm, int S) {
  Graph *g = m->graph;
  const Plan *p = &m->train.plan;
  memset(sm, 0, sizeof *sm);
  if (S != p->pp) return false;   /* (interleaved chunks: by FLOPs) */
  Graph *c = ir_graph_clone(g);
  m->graph = c;
  int quiet = diag_set_quiet_warnings(1);
  int rc = pass_autodiff(m);
  diag_set_quiet_warnings(quiet);
  m->graph = g;
  if (rc || !c->nfwd) return false;
  int n = g->nodes.len, nv = g->values.len;
  bool *held = arena_alloc((size_t)c->values.len + 1);
  for (int i = c->nfwd; i < c->nodes.len; i++) {
    Node *nd = c->nodes.data[i];
    for (int k = 0; k < nd->nin; k++) {
      Value *v = nd->in[k];
      while (v->alias) v = v->alias;
      if (v->id < nv && ir_reads_data(nd, k)) held[v->id] = true;
    }
  }
  sm->held_at = arena_alloc(sizeof(double) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    Node *nd = g->nodes.data[i];
    double h = 0;
    for (int j = 0; j < nd->nout; j++) {
      Value *v = nd->outs[j];
      if (v && held[v->id] && v->role != ROLE_PARAM && !v->alias)
        h += (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype);
    }
    sm->held_at[i + 1] = sm->held_at[i] + h;
  }
  int *pfirst, *plast;
  param_readers(g, &pfirst, &plast);
  /* par_at by first reader; tied_at by the range (first, last] of readers */
  sm->par_at = arena_alloc(sizeof(double) * (size_t)(n + 2));
  sm->tied_at = arena_alloc(sizeof(double) * (size_t)(n + 2));
  for (int i = 0; i < g->params.len; i++) {
    const Value *v = g->params.data[i];
    if (pfirst[v->id] < 0) continue;
    double bytes = (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype);
    sm->par_at[pfirst[v->id] + 1] += bytes;
    sm->tied_at[pfirst[v->id] + 1] += bytes;
    sm->tied_at[plast[v->id] + 1] -= bytes;
  }
  for (int i = 1; i <= n + 1; i++) {
    sm->par_at[i] += sm->par_at[i - 1];
    sm->tied_at[i] += sm->tied_at[i - 1];
  }
  int dp = p->dp * (p->sp_kind == SP_RING ? p->sp : 1), z = p->zero;
  double st = opt_states(&m->train.opt);
  sm->per_param = (z >= 3 ? 1.0 / dp : 1) + (z >= 2 ? 1.0 / dp : 1) + (z >= 1 ? st / dp : st);
  PipeSched ps;
  char err[256];
  int mb = p->mb > 0 ? p->mb : 1;
  if (sched_build(&ps, p->schedule, p->pp, mb, 1, err, sizeof err)) return false;
  for (int k = 0; k < S; k++) sm->slots[k] = ps.inflight[k][0];
  sched_free(&ps);
  sm->budget = m->train.mesh ? m->train.mesh->mem_bytes : 0;
  return true;
}

/* Estimated bytes of stage k holding nodes [a, b): the parameters its
 * nodes read first, and on the last stage those read before it too (a tied
 * embedding), with their state; its held activations times its slots. */
static double stage_mem_of(const Module *m, const StageMem *sm, int k, int a, int b) {
  double par = sm->par_at[b] - sm->par_at[a];
  if (b == m->graph->nodes.len) par += sm->tied_at[a];
  return par * sm->per_param + sm->slots[k] * (sm->held_at[b] - sm->held_at[a]);
}

/* The pp-1 cuts of S stages, by dynamic programming over the candidates:
 * best[k][j], the best k+1 stages whose last cut is cuts[j].  The cost of a
 * stage is its FLOPs (time), infinite when its estimated memory exceeds the
 * device's; or (by) its estimated memory. */
typedef struct Chooser {
  Module *m;
  const StageMem *sm;
  bool mem;        /* sm holds the estimate */
  int by;          /* 0: FLOPs within the memory; 1: memory */
  const Cut *cuts;
  int ncut, S, n;
  double total;    /* FLOPs of the whole forward */
} Chooser;

/* Stage k holds nodes [a, b) (FLOPs fb - fa) between cuts ca and cb (NULL:
 * the model's start or end); a cut several tensors cross costs it their
 * extra message time, and their extra bytes in each stash slot. */
static double seg_cost(const Chooser *ch, int k, int a, int b, double fa, double fb, const Cut *ca,
                       const Cut *cb) {
  double xb = (ca ? ca->xbytes : 0) + (cb ? cb->xbytes : 0);
  double mem = ch->mem ? stage_mem_of(ch->m, ch->sm, k, a, b) + ch->sm->slots[k] * xb : 0;
  if (ch->by) return mem;
  if (ch->mem && ch->sm->budget > 0 && mem > ch->sm->budget) return 1e300;
  return fb - fa + (ca ? ca->extra : 0) + (cb ? cb->extra : 0);
}

/* A floor under seg_cost of a stage between cuts ca and cb (not the
 * last), which does not fall as ca moves to an earlier cut: its FLOPs, or
 * by memory its estimate without the extra crossing bytes. */
static double seg_floor(const Chooser *ch, int k, const Cut *ca, const Cut *cb) {
  if (ch->by) return ch->mem ? stage_mem_of(ch->m, ch->sm, k, ca->at, cb->at) : 0;
  return cb->before - ca->before;
}

/* Which cuts a search may take: tier 0, between layers with one tensor
 * crossing (as before cuts inside layers existed); 1, inside layers too; 2,
 * where several tensors cross too. */
static bool cut_in_tier(const Cut *c, int tier) {
  return tier >= 2 || (c->nv == 1 && (tier >= 1 || !c->inside));
}

/* The last of cuts[0 .. n) whose FLOPs before it are at most x (the
 * cuts are in the order of the nodes); -1 if none. */
static int last_cut_before(const Cut *cuts, int n, double x) {
  int lo = -1, hi = n - 1; /* cuts[lo] is at most x, the answer is at most hi */
  while (lo < hi) {
    int mid = hi - (hi - lo) / 2;
    if (cuts[mid].before <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* The cost of a partition into S stages at cuts of the tier found
 * greedily for a target t (each stage ends at the farthest cut that keeps
 * it within t, leaving a cut for each later stage), or -1 where that finds
 * none.  A partition, so an upper bound on the best one's cost. */
static double greedy_cost(const Chooser *ch, int tier, const int *tcut, int ntc, double t) {
  int S = ch->S;
  const Cut *cuts = ch->cuts;
  int p = -1;
  double worst = 0;
  if (ntc < S - 1) return -1;
  for (int k = 0; k < S - 1; k++) {
    int pick = -1;
    double pc = 0;
    /* the tier's cuts after p, one left for each later stage */
    for (int j = p + 1; j <= tcut[ntc - (S - 1 - k)]; j++) {
      if (p >= 0 ? seg_floor(ch, k, &cuts[p], &cuts[j]) > t : !ch->by && cuts[j].before > t) break;
      if (!cut_in_tier(&cuts[j], tier)) continue;
      double c = p < 0 ? seg_cost(ch, 0, 0, cuts[j].at, 0, cuts[j].before, NULL, &cuts[j])
                       : seg_cost(ch, k, cuts[p].at, cuts[j].at, cuts[p].before, cuts[j].before,
                                  &cuts[p], &cuts[j]);
      if (c <= t) pick = j, pc = c;
    }
    if (pick < 0) return -1;
    if (pc > worst) worst = pc;
    p = pick;
  }
  double c = seg_cost(ch, S - 1, cuts[p].at, ch->n, cuts[p].before, ch->total, &cuts[p], NULL);
  if (c > t) return -1;
  return c > worst ? c : worst;
}

/* An upper bound on the cost choose_cuts finds without a limit (-1:
 * none): the least of greedy partitions over targets bisected below the
 * first one's cost.  No stage of the best partition costs more, so the
 * search skips every stage that does: a deep model's cuts far from a
 * stage's share (64 stages of 2,000 layers: 45 s of the compile, now a
 * fraction of a second). */
static double cost_bound(const Chooser *ch, int tier) {
  int *tcut = arena_alloc(sizeof(int) * (size_t)(ch->ncut + 1)), ntc = 0;
  for (int j = 0; j < ch->ncut; j++)
    if (cut_in_tier(&ch->cuts[j], tier)) tcut[ntc++] = j;
  double best = greedy_cost(ch, tier, tcut, ntc, 1e300);
  if (best < 0) return -1;
  /* a success at t costs c <= t: the next target is below c */
  double lo = 0, hi = best;
  for (int it = 0; it < 40 && hi - lo > 1e-6 * hi; it++) {
    double mid = lo + (hi - lo) / 2, c = greedy_cost(ch, tier, tcut, ntc, mid);
    if (c < 0) {
      lo = mid;
    } else {
      hi = c;
      if (c < best) best = c;
    }
  }
  return best;
}

/* limit < 0: the cuts (of tier `tier`, cut_in_tier) that minimise the
 * largest stage's cost, the fewest inside layers among equal ones, then the
 * fewest message bytes; else the fewest cuts inside layers whose stages all
 * cost at most limit, then the fewest message bytes (a cut two tensors cross
 * sends more than one the residual stream alone crosses), the smallest
 * largest stage among those.  Returns that largest cost (-1: no cut set)
 * and the cuts in chosen[0 .. S-2]. */
static double choose_cuts(const Chooser *ch, int tier, double limit, int *chosen) {
  int S = ch->S, nc = ch->ncut;
  const Cut *cuts = ch->cuts;
  double *best = arena_alloc(sizeof(double) * (size_t)S * (size_t)(nc + 1));
  int *from = arena_alloc(sizeof(int) * (size_t)S * (size_t)(nc + 1));
  int *nin = arena_alloc(sizeof(int) * (size_t)S * (size_t)(nc + 1));
  double *nby = arena_alloc(sizeof(double) * (size_t)S * (size_t)(nc + 1));
#define B(k, j) best[(size_t)(k) * (size_t)(nc + 1) + (size_t)(j)]
#define FR(k, j) from[(size_t)(k) * (size_t)(nc + 1) + (size_t)(j)]
#define NI(k, j) nin[(size_t)(k) * (size_t)(nc + 1) + (size_t)(j)]
#define NB(k, j) nby[(size_t)(k) * (size_t)(nc + 1) + (size_t)(j)]
#define BETTER(c, ni, nb, bc, bni, bnb)                                                       \
  ((bc) < 0 ||                                                                               \
   (limit < 0 ? (c) < (bc) || ((c) == (bc) && ((ni) < (bni) || ((ni) == (bni) && (nb) < (bnb)))) \
              : (ni) < (bni) || ((ni) == (bni) && ((nb) < (bnb) || ((nb) == (bnb) && (c) < (bc))))))
  /* stage k from cut i to cut j after the best k stages up to cut i */
#define TRY(i_)                                                                              \
  do {                                                                                       \
    const int ii = (i_);                                                                     \
    if (B(k - 1, ii) < 0 || (ub >= 0 && B(k - 1, ii) > ub)) break;                           \
    double seg = seg_cost(ch, k, cuts[ii].at, cuts[j].at, cuts[ii].before, cuts[j].before,   \
                          &cuts[ii], &cuts[j]);                                              \
    if (limit >= 0 && seg > limit) break;                                                    \
    if (ub >= 0 && seg > ub) break;                                                          \
    double c = seg > B(k - 1, ii) ? seg : B(k - 1, ii);                                      \
    int ni = NI(k - 1, ii) + cuts[j].inside;                                                 \
    double nb = NB(k - 1, ii) + cuts[j].bytes;                                               \
    if (BETTER(c, ni, nb, B(k, j), NI(k, j), NB(k, j)) ||                                    \
        (c == B(k, j) && ni == NI(k, j) && nb == NB(k, j)))                                  \
      B(k, j) = c, FR(k, j) = ii, NI(k, j) = ni, NB(k, j) = nb;                              \
  } while (0)
  /* Without a limit, the largest stage's cost decides first (BETTER): a
   * stage (or a path to one) costing more than a partition's (ub) can
   * never be the best one's, nor tie with it, so it is skipped; the
   * states it would fill are never chosen.  The choice is the same. */
  double ub = limit < 0 ? cost_bound(ch, tier) : -1;
  /* By FLOPs, a stage costs at least its FLOPs, so the k + 1 stages up
   * to cut j cost at least the FLOPs before it shared among them, and the
   * stages after it those after it: where either passes the limit (or ub),
   * no partition with stage k ending at j is feasible (or the best). */
  double cap = limit >= 0 ? limit : ub;
#define HOPELESS(k, j)                                                          \
  (!ch->by && cap >= 0 &&                                                       \
   (ch->total - cuts[j].before > (S - 1 - (k)) * cap * (1 + 1e-9) ||           \
    cuts[j].before > ((k) + 1) * cap * (1 + 1e-9)))
  for (int j = 0; j < nc; j++) {
    double c = seg_cost(ch, 0, 0, cuts[j].at, 0, cuts[j].before, NULL, &cuts[j]);
    bool ok = cut_in_tier(&cuts[j], tier) && (limit < 0 || c <= limit) && (ub < 0 || c <= ub) &&
              !HOPELESS(0, j);
    B(0, j) = ok ? c : -1, FR(0, j) = -1, NI(0, j) = cuts[j].inside, NB(0, j) = cuts[j].bytes;
  }
  for (int k = 1; k < S - 1; k++)
    for (int j = 0; j < nc; j++) {
      B(k, j) = -1;
      if (!cut_in_tier(&cuts[j], tier) || HOPELESS(k, j)) continue;
      /* Only the cuts i that can win are tried (deep models: linear in
       * the cuts near the balance, not in all of them).  Nearest first: a
       * stage's cost is at least seg_floor, which only grows as its first
       * cut moves back, so the walk stops where it passes the limit or the
       * best cost so far.  By FLOPs, the costliest of the k stages before
       * cut i costs at least 1/k of the FLOPs before it, so the walk starts
       * at the last cut under k times the limit, or the best cost of the
       * cuts beside the balance point.
       * An equal candidate further back replaces the one found: the choice
       * is the first among equals, as a forward scan makes it. */
      int top = j - 1;
      if (!ch->by) {
        double t = limit;
        if (limit < 0) {
          /* the cuts of the tier on either side of the balance point */
          int lo = last_cut_before(cuts, j, cuts[j].before * k / (k + 1)), hi = lo + 1;
          while (lo >= 0 && B(k - 1, lo) < 0) lo--;
          while (hi < j && B(k - 1, hi) < 0) hi++;
          if (lo >= 0) TRY(lo);
          if (hi < j) TRY(hi);
          t = B(k, j) >= 0 ? B(k, j) : ub;
        }
        if (t >= 0) top = last_cut_before(cuts, j, k * t * (1 + 1e-9));
      }
      for (int i = top; i >= 0; i--) {
        double fl = seg_floor(ch, k, &cuts[i], &cuts[j]);
        if (limit >= 0 ? fl > limit : (B(k, j) >= 0 && fl > B(k, j)) || (ub >= 0 && fl > ub)) break;
        TRY(i);
      }
    }
  int bestj = -1, bestni = 0;
  double bestc = -1, bestnb = 0;
  for (int j = 0; j < nc; j++) {
    if (B(S - 2, j) < 0) continue;
    double seg = seg_cost(ch, S - 1, cuts[j].at, ch->n, cuts[j].before, ch->total, &cuts[j], NULL);
    if (limit >= 0 && seg > limit) continue;
    double c = seg > B(S - 2, j) ? seg : B(S - 2, j);
    if (BETTER(c, NI(S - 2, j), NB(S - 2, j), bestc, bestni, bestnb))
      bestc = c, bestj = j, bestni = NI(S - 2, j), bestnb = NB(S - 2, j);
  }
  if (bestj >= 0)
    for (int k = S - 2, j = bestj; k >= 0; j = FR(k, j), k--) chosen[k] = j;
  return bestc;
#undef TRY
#undef HOPELESS
#undef BETTER
#undef NB
#undef NI
#undef B
#undef FR
}

/* FLOP-equivalents (of the forward, the unit stages are balanced in) of one
 * byte of a pipeline message: the link's time for it at the device's GEMM
 * rate, the activation going forward and its gradient back against about 3x
 * the forward's FLOPs for forward and backward.  pp is the outermost mesh
 * axis: neighbouring stages talk over the inter-node links when there are
 * several nodes. */
static double msg_flops_per_byte(const Module *m) {
  const Mesh *me = m->train.mesh;
  if (!me || !me->device) return 0;
  HwModel hw;
  cost_hw_from_mesh(&hw, me, m->train.precision);
  double bw = (hw.nodes > 1 ? hw.inter_bw : hw.intra_bw) * hw.link_eff;
  return bw > 0 ? 2.0 / 3.0 * hw.peak * hw.gemm_eff / bw * hw.elt / 4 : 0;
}

/* A count of layers in hundredths, as pp=N:a+b+... writes it: "3", "1.5",
 * "1.25". */
static const char *layers_str(int h) {
  if (h % 100 == 0) return arena_printf("%d", h / 100);
  if (h % 10 == 0) return arena_printf("%d.%d", h / 100, h % 100 / 10);
  return arena_printf("%d.%02d", h / 100, h % 100);
}

/* The first non-leaf node at or after i, and the last one before i. */
static const Node *first_op(const Graph *g, int i) {
  while (i < g->nodes.len - 1 && is_leaf(g->nodes.data[i])) i++;
  return g->nodes.data[i];
}

static const Node *last_op(const Graph *g, int i) {
  do i--;
  while (i > 0 && is_leaf(g->nodes.data[i]));
  return g->nodes.data[i];
}

/* Where a cut falls, for the plan: "between blocks.1 and blocks.2", or
 * "inside blocks.1 (after 1.5 layers), after add (gpt.shard:5), before
 * layernorm". */
static const char *cut_desc(const Graph *g, const Cut *c) {
  char a[128], b[128];
  const Node *x = last_op(g, c->at), *y = first_op(g, c->at);
  stage_layer_of(x, a, sizeof a);
  stage_layer_of(y, b, sizeof b);
  if (!c->inside)
    return arena_printf("between %s and %s (after %d layer%s)", *a ? a : "model ops",
                        *b ? b : "model ops", c->layers, c->layers == 1 ? "" : "s");
  const char *path = x->loc.file ? x->loc.file->path : "?", *base = strrchr(path, '/');
  if (c->nv == 1)
    return arena_printf("inside %s (after %d.5 layers), after %s (%s:%d), before %s", b, c->layers,
                        ir_ops[x->op].name, base ? base + 1 : path, x->loc.line,
                        ir_ops[y->op].name);
  /* several tensors cross: where it falls by the layer's FLOPs */
  double f = c->hi > c->lo ? (c->before - c->lo) / (c->hi - c->lo) : 0;
  return arena_printf("inside %s (after %.2f layers), after %s (%s:%d), before %s; %d tensors "
                      "cross it",
                      b, c->layers + f, ir_ops[x->op].name, base ? base + 1 : path, x->loc.line,
                      ir_ops[y->op].name, c->nv);
}

int pass_stage(Module *m) {
  Graph *g = m->graph;
  Plan *p = &m->train.plan;
  if (!g || p->pp <= 1) return 0;
  int S = p->pp * (p->schedule == SCHED_INTERLEAVED && p->vchunks > 1 ? p->vchunks : 1);
  if (S > MAX_STAGES) {
    diag_error(plan_key_loc(&m->train, PLAN_PP), "pipeline of %d stages: at most %d are supported", S, MAX_STAGES);
    return -1;
  }
  int n = g->nodes.len, nv = g->values.len;
  int *def_at = arena_alloc(sizeof(int) * (size_t)nv), *last = arena_alloc(sizeof(int) * (size_t)nv);
  for (int i = 0; i < nv; i++) def_at[i] = last[i] = -1;
  for (int i = 0; i < n; i++) {
    Node *nd = g->nodes.data[i];
    for (int j = 0; j < nd->nout; j++)
      if (nd->outs[j]) def_at[nd->outs[j]->id] = i;
    for (int k = 0; k < nd->nin; k++) last[nd->in[k]->id] = i;
  }
  /* Candidate cuts: an op boundary with at most PIPE_MAXACT activations
   * crossing, between two layers or inside one (a transformer block's
   * residual stream between its attention and its MLP; the residual and
   * a layernorm's output between ln_1 and the qkv matmul).  cross[i]: the
   * activations defined before node i and read at or after it. */
  int *cross = arena_alloc(sizeof(int) * (size_t)(n + 2));
  for (int k = 0; k < nv; k++) {
    Value *v = g->values.data[k];
    if (v->role == ROLE_PARAM || v->role == ROLE_INPUT || def_at[k] < 0 || last[k] <= def_at[k])
      continue;
    cross[def_at[k] + 1]++;
    cross[last[k] + 1]--;
  }
  for (int i = 1; i <= n; i++) cross[i] += cross[i - 1];
  /* dep[v]: v is computed from a parameter, so the stage that receives it
   * has a gradient to send back */
  bool *dep = arena_alloc((size_t)nv + 1);
  for (int i = 0; i < n; i++) {
    Node *nd = g->nodes.data[i];
    bool d = nd->op == OP_PARAM;
    for (int k = 0; k < nd->nin; k++) d |= dep[nd->in[k]->id];
    for (int j = 0; j < nd->nout; j++)
      if (nd->outs[j]) dep[nd->outs[j]->id] = d;
  }
  /* a parameter's first and last reader: a cut inside a layer must not
   * fall between two readers of one of the layer's parameters */
  int *pfirst, *plast;
  param_readers(g, &pfirst, &plast);
  /* reach[i]: the last reader of the parameters node i reads first (-1:
   * none); a cut at i is inside a parameter's readers when one of the
   * layer's nodes before i has reach >= i */
  int *reach = arena_alloc(sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) reach[i] = -1;
  for (int k = 0; k < g->params.len; k++) {
    const Value *v = g->params.data[k];
    if (pfirst[v->id] >= 0 && plast[v->id] > reach[pfirst[v->id]])
      reach[pfirst[v->id]] = plast[v->id];
  }
  /* The activations crossing node i's boundary (cross[i] of them), kept
   * as the walk passes their definition and last reader: a list linked
   * through lnext/lprev (-1 ends it), each added at def_at + 1 and dropped
   * at last + 1 (bucket lists through anext, rnext). */
  int *lnext = arena_alloc(sizeof(int) * (size_t)nv), *lprev = arena_alloc(sizeof(int) * (size_t)nv);
  int *ahead = arena_alloc(sizeof(int) * (size_t)(n + 2)), *rhead = arena_alloc(sizeof(int) * (size_t)(n + 2));
  int *anext = arena_alloc(sizeof(int) * (size_t)nv), *rnext = arena_alloc(sizeof(int) * (size_t)nv);
  for (int i = 0; i <= n + 1; i++) ahead[i] = rhead[i] = -1;
  for (int k = nv - 1; k >= 0; k--) {
    Value *v = g->values.data[k];
    if (v->role == ROLE_PARAM || v->role == ROLE_INPUT || def_at[k] < 0 || last[k] <= def_at[k])
      continue;
    anext[k] = ahead[def_at[k] + 1], ahead[def_at[k] + 1] = k;
    rnext[k] = rhead[last[k] + 1], rhead[last[k] + 1] = k;
  }
  int live = -1, reach_max = -1;
  Cut *cuts = arena_alloc(sizeof(Cut) * (size_t)(n + 2));
  double fpb = msg_flops_per_byte(m);
  int ncut = 0, layer_first = 0;   /* the first candidate inside the current layer */
  double flops = 0, layer_lo = 0;
  char prev[128] = "", cur[128];
  bool have_prev = false;
  int nlayers = 0;
  for (int i = 0; i < n; i++) {
    Node *nd = g->nodes.data[i];
    for (int k = rhead[i]; k >= 0; k = rnext[k]) {  /* last read before i */
      if (lprev[k] >= 0) lnext[lprev[k]] = lnext[k];
      else live = lnext[k];
      if (lnext[k] >= 0) lprev[lnext[k]] = lprev[k];
    }
    for (int k = ahead[i]; k >= 0; k = anext[k]) {  /* defined before i */
      lnext[k] = live, lprev[k] = -1;
      if (live >= 0) lprev[live] = k;
      live = k;
    }
    if (!is_leaf(nd)) {
      stage_layer_of(nd, cur, sizeof cur);
      bool change = have_prev && strcmp(prev, cur);
      if (change) {
        for (int j = layer_first; j < ncut; j++) cuts[j].hi = flops;
        nlayers += *prev != 0;
        layer_lo = flops;
        reach_max = -1;
      }
      /* inside: a parameter of the layer read on both sides */
      bool split = !change && reach_max >= i;
      int nx = cross[i];
      if ((change || (have_prev && *cur)) && nx >= 1 && nx <= PIPE_MAXACT && !split) {
        /* each crossing value: fp32, not a view; with several, each the
         * main output of its node and computed from a parameter, so each
         * has a gradient to come back; in the order of their ids */
        Cut c = {.at = i, .before = flops, .layers = nlayers, .inside = !change, .lo = layer_lo};
        bool ok = true;
        int ids[PIPE_MAXACT], nid = 0;
        for (int k = live; k >= 0 && nid < nx; k = lnext[k]) {
          int at = nid++;
          for (; at > 0 && ids[at - 1] > k; at--) ids[at] = ids[at - 1];
          ids[at] = k;
        }
        for (int q = 0; q < nid; q++) {
          Value *v = g->values.data[ids[q]];
          ok &= v->dtype == DT_F32 && !v->alias;
          ok &= nx == 1 || (dep[v->id] && v->def->out == v);
          c.v[c.nv++] = v;
          c.bytes += (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype);
        }
        /* a cut several tensors cross costs its bytes beyond the first's:
         * taken only where the balance gains more than that */
        if (c.nv > 1) {
          c.xbytes = c.bytes - (double)ir_numel(&c.v[0]->shape) * ir_dtype_size(c.v[0]->dtype);
          c.extra = fpb * c.xbytes;
        }
        if (ok && c.nv == nx) cuts[ncut++] = c;
      }
      if (change) layer_first = ncut;
      memcpy(prev, cur, sizeof prev);
      have_prev = true;
    }
    if (reach[i] > reach_max) reach_max = reach[i];
    flops += ir_ops[nd->op].flops(nd);
  }
  for (int j = layer_first; j < ncut; j++) cuts[j].hi = flops;
  nlayers += *prev != 0;
  double total = flops;
  int chosen[MAX_STAGES];
  if (p->nstage_layers) {
    /* pp=N:a+b+...: stage s ends after a + b + ... layers; counted in
     * hundredths, a count not a multiple of 100 ends inside the next layer */
    int want = plan_stage_hundredths(p);
    if (p->nstage_layers != S) {
      diag_error(plan_key_loc(&m->train, PLAN_PP), "pp=%d: %d stage sizes for %d stages",
                 p->pp, p->nstage_layers, S);
      return -1;
    }
    if (want != 100 * nlayers) {
      diag_error(plan_key_loc(&m->train, PLAN_PP),
                 "pp=%d: the stage sizes add up to %s layers, but model %s has %d", p->pp,
                 layers_str(want), g->model, nlayers);
      return -1;
    }
    for (int k = 0, sum = 0; k < S - 1; k++) {
      sum += 100 * p->stage_layers[k] + p->stage_frac[k];
      int L = sum / 100, f = sum % 100;
      chosen[k] = -1;
      /* inside a layer at a.5: the op boundary nearest half its FLOPs that
       * one activation crosses, or, where none does, that several do; at
       * another fraction, the boundary nearest that share of its FLOPs
       * (any that at most PIPE_MAXACT cross) */
      for (int several = f == 50 ? 0 : 1; several < 2 && chosen[k] < 0; several++)
        for (int j = 0; j < ncut; j++) {
          if (cuts[j].layers != L || cuts[j].inside != (f != 0)) continue;
          if (f == 50 && (cuts[j].nv > 1) != several) continue;
          double mid = cuts[j].lo + (cuts[j].hi - cuts[j].lo) * f / 100;
          if (chosen[k] < 0 ||
              fabs(cuts[j].before - mid) < fabs(cuts[chosen[k]].before - mid) ||
              (cuts[j].before - mid == cuts[chosen[k]].before - mid &&
               cuts[j].bytes < cuts[chosen[k]].bytes))
            chosen[k] = j;
        }
      if (chosen[k] < 0) {
        if (f)
          diag_error(plan_key_loc(&m->train, PLAN_PP),
                     "pp: model %s cannot be cut inside its layer %d (after %s layers): no op "
                     "boundary there has at most %d activations crossing it",
                     g->model, L + 1, layers_str(sum), PIPE_MAXACT);
        else
          diag_error(plan_key_loc(&m->train, PLAN_PP),
                     "pp: model %s cannot be cut after its first %d layers (more than %d "
                     "activations cross there)", g->model, L, PIPE_MAXACT);
        return -1;
      }
      if (k && cuts[chosen[k]].at <= cuts[chosen[k - 1]].at) {
        diag_error(plan_key_loc(&m->train, PLAN_PP),
                   "pp: stage %d of model %s would be empty: its part of a layer holds no op "
                   "boundary to cut at", k, g->model);
        return -1;
      }
    }
    goto cut;
  }
  if (ncut < S - 1) {
    diag_error(plan_key_loc(&m->train, PLAN_PP),
               "pp=%d needs %d pipeline stages but model %s has only %d places to cut it (between "
               "layers or inside one, where at most %d activations cross); use %s",
               p->pp, S, g->model, ncut, PIPE_MAXACT,
               S > p->pp ? "fewer interleaved chunks or a smaller pp"
                         : arena_printf("pp=%d or less", ncut + 1));
    return -1;
  }
  /* By FLOPs within the device memory; when no cuts fit (or with
   * pp=N:memory), by the estimated memory. */
  StageMem sm;
  Chooser ch = {m, &sm, stage_mem_init(m, &sm, S), 0, cuts, ncut, S, n, total};
  for (ch.by = p->balance_memory ? 1 : 0; ch.by < 2; ch.by++) {
    if (ch.by && !ch.mem) break;
    /* between layers (as before cuts inside layers existed), then with
     * them, then with cuts several tensors cross: each only where that
     * balances better, and then as few inside layers and as few message
     * bytes as keep that balance.  By the estimated memory, cuts several
     * tensors cross are not taken: the estimate leaves out the transient
     * gradients, and with the finer choice a stage it underrates (the
     * head's logits) was loaded past its measured peak (bigvocab.shard,
     * pp=4:memory: 27.1 MB where one-tensor cuts keep 25.4 MB). */
    int alt[MAX_STAGES];
    double c0 = choose_cuts(&ch, 0, -1, chosen);
    for (int tier = 1; tier <= (ch.by ? 1 : 2); tier++) {
      double c1 = choose_cuts(&ch, tier, -1, alt);
      if (c1 >= 0 && (c0 < 0 || c1 < c0 * (1 - 1e-9)))
        choose_cuts(&ch, tier, c1 * (1 + 1e-9), chosen), c0 = c1;
    }
    m->stage_cuts_by = ch.by ? "estimated memory" : ch.mem && sm.budget > 0
                                                        ? "FLOPs within the device memory"
                                                        : "FLOPs";
    if (ch.by || c0 < 1e300) break;
  }
cut:;
  /* Which stages use each parameter. */
  int bound[MAX_STAGES + 1];
  bound[0] = 0;
  for (int k = 0; k < S - 1; k++) bound[k + 1] = cuts[chosen[k]].at;
  bound[S] = n;
  bool *shared = arena_alloc(sizeof(bool) * (size_t)nv);
  int *first = arena_alloc(sizeof(int) * (size_t)nv);
  for (int i = 0; i < nv; i++) first[i] = -1;
  for (int i = 0; i < g->params.len; i++) ((Value *)g->params.data[i])->gidx = i;
  for (int s = 0; s < S; s++)
    for (int i = bound[s]; i < bound[s + 1]; i++) {
      Node *nd = g->nodes.data[i];
      if (is_leaf(nd)) continue;
      for (int k = 0; k < nd->nin; k++) {
        Value *v = nd->in[k];
        if (v->role != ROLE_PARAM) continue;
        if (first[v->id] < 0) {
          first[v->id] = s;
        } else if (first[v->id] != s) {
          if (first[v->id] != 0 || s != S - 1) {
            diag_error(nd->loc,
                       "parameter %s is used by pipeline stages %d and %d: only the first and last "
                       "stage may share one (a tied embedding); choose another pp",
                       v->name, first[v->id], s);
            return -1;
          }
          shared[v->id] = true;
        }
      }
    }
  m->whole = g;
  g->nfwd = n; /* all forward: autodiff runs on the stages */
  m->nstages = S;
  for (int s = 0; s < S; s++) {
    const Cut *recv = s ? &cuts[chosen[s - 1]] : NULL;
    const Cut *send = s < S - 1 ? &cuts[chosen[s]] : NULL;
    Graph *sg = build_stage(m, s, bound[s], bound[s + 1], recv, send, shared);
    if (!sg) return -1;
    m->stages[s] = sg;
    /* the first and last layer; ops outside any layer (embedding, head) as
     * "model ops"; a cut inside a layer names the op the stage starts or
     * ends with ("blocks.1 from layernorm") */
    char a[128] = "", b[128] = "", l[128];
    bool top_a = false, top_b = false;
    for (int i = bound[s]; i < bound[s + 1]; i++) {
      if (is_leaf(g->nodes.data[i])) continue;
      stage_layer_of(g->nodes.data[i], l, sizeof l);
      if (!*l) {
        if (*a) top_b = true;
        else top_a = true;
        continue;
      }
      if (!*a) memcpy(a, l, sizeof a);
      memcpy(b, l, sizeof b);
      top_b = false;
    }
    if (!*a) strcpy(a, "model ops"), top_a = top_b = false;
    if (!*b) strcpy(b, a);
    const char *from = s && cuts[chosen[s - 1]].inside
                           ? arena_printf(" from %s", ir_ops[first_op(g, bound[s])->op].name)
                           : "";
    const char *to = s < S - 1 && cuts[chosen[s]].inside
                         ? arena_printf(" to %s", ir_ops[last_op(g, bound[s + 1])->op].name)
                         : "";
    const char *span = strcmp(a, b) ? arena_printf("%s%s .. %s%s", a, from, b, to)
                                    : arena_printf("%s%s%s", a, from, to);
    if (s < S - 1) m->stage_cut[s] = cut_desc(g, &cuts[chosen[s]]);
    double f = 0;
    for (int i = bound[s]; i < bound[s + 1]; i++)
      f += ir_ops[((Node *)g->nodes.data[i])->op].flops(g->nodes.data[i]);
    m->stage_desc[s] = arena_printf("%s%s%s; %.1f%% of the FLOPs", top_a ? "model ops, " : "", span,
                                    top_b ? ", model ops" : "", 100 * f / total);
  }
  return 0;
}

/* Points the module at stage s (graph and memory plan), or back at the
 * whole model (s < 0; memory plan of stage 0). */
void stage_select(Module *m, int s) {
  if (m->nstages <= 1) return;
  if (s < 0) {
    m->graph = m->whole;
    m->mem = m->stage_mem[0];
  } else {
    m->graph = m->stages[s];
    m->mem = m->stage_mem[s];
  }
}

int per_stage(Module *m, int (*fn)(Module *m)) {
  if (m->nstages <= 1) return fn(m);
  for (int s = 0; s < m->nstages; s++) {
    stage_select(m, s);
    int rc = fn(m);
    m->stage_mem[s] = m->mem;
    if (rc) {
      stage_select(m, -1);
      return rc;
    }
  }
  stage_select(m, -1);
  return 0;
}
