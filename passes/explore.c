/* explore.c — the strategy search (explore.h).  The model's single-device
 * graph is read once into a ModelShape: one repeated layer's forward ops
 * with their shapes per sequence, the ops before and after the layers, the
 * parameters, and the activations the backward reads (the values the
 * memory plan keeps from forward to backward).  A plan's per-layer cost
 * applies the plan's splits to those shapes and the formulas of cost.c;
 * it is memoised per (tp, tp2d, sp, microbatch, recompute), so the search
 * over a 175B model on 1,024 devices takes well under a second. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "explore.h"
#include "fuse.h"
#include "passes.h"
#include "schedule.h"
#include "runtime/rt_optim.h"

/* ---- the model's shape ---- */

/* "blocks.3.attn" -> "blocks.3" (stage.c's notion of a layer); "" outside. */
static void layer_name(const Node *n, char *buf, int cap) {
  const char *s = n->scope ? n->scope : "";
  const char *dot = strchr(s, '.');
  buf[0] = 0;
  if (!dot || dot[1] < '0' || dot[1] > '9') return;
  const char *e = dot + 1;
  while (*e >= '0' && *e <= '9') e++;
  int len = (int)(e - s) < cap - 1 ? (int)(e - s) : cap - 1;
  memcpy(buf, s, (size_t)len);
  buf[len] = 0;
}

static double numel(const Value *v) { return v ? (double)ir_numel(&v->shape) : 0; }

/* Whether value v is on split channels (heads, the MLP's hidden; the
 * outputs of column-parallel GEMMs and attention, and what elementwise ops
 * and slices make of them), marked in graph order by mark_split. */
static void mark_split(const Node *n, const bool *vocab_mm, bool *splitv) {
  bool sp = false;
  switch (n->op) {
  case OP_MATMUL: sp = n->in[1]->tph == TPH_COL || n->in[1]->tph == TPH_VOCAB || vocab_mm[n->id]; break;
  case OP_ATTENTION: sp = true; break;
  default:
    if (ir_ops[n->op].cls == OPC_LEAF) break;
    for (int i = 0; i < n->nin; i++)
      if (n->in[i]->role != ROLE_PARAM && splitv[n->in[i]->id]) sp = true;
  }
  for (int i = 0; i < n->nout; i++)
    if (n->outs[i]) splitv[n->outs[i]->id] = sp;
}

/* What explore_model_shape knows of the graph beyond a node. */
typedef struct ShapeCtx {
  const Fusion *fu;     /* the program's fused loops and bias epilogues, or NULL */
  const bool *splitv;   /* value id -> on split channels (mark_split) */
  const bool *vocab_mm; /* node id -> the projection to the vocabulary that the
                         * shard pass makes column-parallel (prefer_vocab_parallel) */
  const bool *rerun;    /* node id -> copied by recompute=full (passes/recompute.c) */
} ShapeCtx;

static void add_op(LayerModel *L, const Node *n, double nseq, double hidden, Value **colin,
                   int *ncolin, const ShapeCtx *cx) {
  const Fusion *fu = cx->fu;
  if (L->nop == LAYER_MAXOPS) return;
  /* what the program runs as part of another node: a bias add in its
   * matmul's epilogue, a node inside a fused elementwise loop (counted
   * with the loop's first node) */
  if (fu && fu->skip[n->id]) return;
  LOp o = {0};
  o.flops = ir_ops[n->op].flops(n) / nseq;
  o.rerun = cx->rerun && cx->rerun[n->id];
  switch (n->op) {
  case OP_MATMUL: {
    o.kind = LO_GEMM;
    o.K = (double)n->in[1]->shape.d[1].n;
    o.N = (double)n->in[1]->shape.d[0].n;
    o.rows = numel(n->in[0]) / o.K / nseq;
    o.split = n->in[1]->tph;
    if (o.split == TPH_NONE && cx->vocab_mm[n->id]) o.split = TPH_VOCAB;
    /* Megatron's f: one all-reduce in the backward per distinct input of
     * column-parallel GEMMs (q,k,v fused; gate and up share theirs) */
    if (o.split == TPH_COL || o.split == TPH_VOCAB) {
      bool seen = false;
      for (int k = 0; k < *ncolin; k++) seen |= colin[k] == n->in[0];
      if (!seen && *ncolin < 16) colin[(*ncolin)++] = n->in[0];
      o.elems = seen ? 0 : 1; /* marks the first column GEMM of an input */
    }
    L->fwd_flops += o.flops;
    break;
  }
  case OP_ATTENTION: {
    const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
    o.kind = LO_ATTN;
    o.rows = (double)q->d[1].n;
    o.H = (double)q->d[2].n;
    o.Hkv = (double)k->d[2].n;
    o.D = (double)q->d[3].n;
    o.causal = n->a.i[0] != 0;
    L->fwd_flops += o.flops;
    break;
  }
  case OP_GATHER:
    o.kind = LO_GATHER;
    o.elems = numel(n->out) / nseq;
    o.rows = o.elems / hidden;
    break;
  case OP_CROSS_ENTROPY:
    o.kind = LO_XENT;
    o.elems = numel(n->in[0]) / nseq;
    o.rows = numel(n->in[1]) / nseq;
    break;
  default: {
    const OpInfo *oi = &ir_ops[n->op];
    if (oi->cls == OPC_LEAF || oi->cls == OPC_VIEW || ir_is_comm(n->op)) return;
    o.kind = LO_ELEM;
    /* a fused loop (passes/fuse.c) reads its operands once and writes what
     * it stores: the chain's inner values stay in registers */
    Node *ch[FUSE_MAX_CHAIN];
    int len = fu ? fuse_chain(fu, (Node *)n, ch) : 1;
    if (!fu) ch[0] = (Node *)n;
    o.flops = 0;
    for (int k = 0; k < len; k++) {
      const Node *c = ch[k];
      o.flops += ir_ops[c->op].flops(c) / nseq;
      for (int i = 0; i < c->nin; i++)
        if (ir_reads_data(c, i) && c->in[i]->role != ROLE_PARAM && (k == 0 || c->in[i] != ch[k - 1]->out))
          o.elems += numel(c->in[i]) / nseq;
      if (len > 1 && k < len - 1 && !fuse_chain_stored(fu, ch, len, k)) continue;
      for (int i = 0; i < c->nout; i++) o.elems += numel(c->outs[i]) / nseq;
    }
    /* a column slice moves its own columns (cost.c's cost_node): the
     * output's elements twice forward, three times in its backward */
    if (len == 1 && n->op == OP_SLICE) {
      o.elems = 2 * numel(n->out) / nseq;
      o.bwd = 1.5;
    }
    const Shape *s = &ch[len - 1]->out->shape;
    o.split = (s->ndim > 0 && (double)s->d[s->ndim - 1].n != hidden) || cx->splitv[ch[len - 1]->out->id];
    o.H = oi->cls == OPC_NORM; /* a norm: tp2d all-reduces its row statistics */
    break;
  }
  }
  L->op[L->nop++] = o;
}

/* Shampoo's and Adafactor's state on the most loaded data rank of a stage
 * holding the tensors of pre (or NULL), nlayers layers and post (or NULL) under ZeRO over
 * D ranks: each bucket's owners as passes/zero.c picks them (zero_owners),
 * the owner keeping its tensors' whole state, the buckets merged under ZeRO-1 as
 * group_owner_buckets merges them; plus the workspace.  D = 1: every
 * tensor's state.  staged: a pipeline's, whose last stage keeps copies of
 * tied tensors. */
static double owner_state_bytes(const ModelShape *ms, const LayerModel *pre, int nlayers,
                                const LayerModel *post, bool staged, int D, int zero) {
  enum { MAXD = 64, MEMO = 64 };
  if (D > MAXD) return -1;
  /* the search asks for the same stages over and over: remembered */
  static struct {
    unsigned long stamp;
    int nlayers, D, zero, flags;
    double bytes;
  } memo[MEMO];
  static int memo_next;
  int flags = (pre != NULL) | (post != NULL) << 1 | staged << 2;
  for (int i = 0; i < MEMO; i++)
    if (memo[i].stamp == ms->stamp && memo[i].nlayers == nlayers && memo[i].D == D &&
        memo[i].zero == zero && memo[i].flags == flags)
      return memo[i].bytes;
  int64_t owned[MAXD] = {0}, state[MAXD] = {0};
  /* the buckets in order: per layer model, its tensors by bucket key */
  int cap = 0;
  for (int gi = -1; gi <= nlayers; gi++) {
    const LayerModel *L = gi < 0 ? pre : gi == nlayers ? post : &ms->layer;
    if (L) cap += L->nt;
  }
  int64_t *sz = arena_alloc(sizeof(int64_t) * (size_t)(cap + 1));
  int64_t *st = arena_alloc(sizeof(int64_t) * (size_t)(cap + 1));
  int *nt = arena_alloc(sizeof(int) * (size_t)(cap + 1)), *cls = arena_alloc(sizeof(int) * (size_t)(cap + 1));
  int nb = 0, ntens = 0;
  for (int gi = -1; gi <= nlayers; gi++) {
    const LayerModel *L = gi < 0 ? pre : gi == nlayers ? post : &ms->layer;
    if (!L) continue;
    bool done[LAYER_MAXTENSORS] = {false};
    for (int j0 = 0; j0 < L->nt; j0++) {
      if (done[j0] || (L->t_tied[j0] && !staged)) continue;
      nt[nb] = 0;
      /* a pipeline's tied tensor: a bucket of its own kind (zero.c) */
      bool alone = L->t_tied[j0] || (staged && L->t_shared[j0]);
      cls[nb] = alone ? -1 : 0;
      for (int j = j0; j < L->nt; j++) {
        if (done[j] || (L->t_tied[j] && !staged) || strcmp(L->t_bucket[j], L->t_bucket[j0]) ||
            (L->t_tied[j] || (staged && L->t_shared[j])) != alone)
          continue;
        done[j] = true;
        sz[ntens] = (L->t_numel[j] + 15) / 16 * 16;
        st[ntens++] = L->t_state[j];
        nt[nb]++;
      }
      nb++;
    }
  }
  int G = zero == 1 && D > 1 ? zero_owner_group(sz, nt, cls, nb, D) : 1;
  int *first = arena_alloc(sizeof(int) * (size_t)(nb + 1)), *idx = arena_alloc(sizeof(int) * (size_t)(ntens + 1));
  int *group = arena_alloc(sizeof(int) * (size_t)(nb + 1)), *own = arena_alloc(sizeof(int) * (size_t)(ntens + 1));
  int64_t *gsz = arena_alloc(sizeof(int64_t) * (size_t)(ntens + 1));
  for (int k = 0, at = 0; k < nb; k++) first[k] = at, at += nt[k];
  zero_owner_groups(cls, nb, G, group);
  for (int k = 0; k < nb; k++) {
    if (group[k] != k) continue;
    int n = 0;   /* the group's tensors in order */
    for (int e = k; e < nb; e++)
      if (group[e] == k)
        for (int j = first[e]; j < first[e] + nt[e]; j++) idx[n] = j, gsz[n++] = sz[j];
    zero_owners(gsz, n, D, owned, own);
    for (int q = 0; q < n; q++) state[own[q]] += st[idx[q]];
  }
  int64_t most = 0;
  for (int r = 0; r < D; r++)
    if (state[r] > most) most = state[r];
  double bytes = (double)most + ms->opt_work + (staged ? ms->root_work : 0);
  memo[memo_next].stamp = ms->stamp, memo[memo_next].nlayers = nlayers, memo[memo_next].D = D;
  memo[memo_next].zero = zero, memo[memo_next].flags = flags, memo[memo_next].bytes = bytes;
  memo_next = (memo_next + 1) % MEMO;
  return bytes;
}

/* Shampoo's step over L's tensors on one rank that computes all of them,
 * seconds but the roots (cost_shampoo_tensor); *roots: the roots'. */
static double shampoo_s(const Optimizer *o, const HwModel *hw, const LayerModel *L, double *roots) {
  double t = 0, rt = 0;
  for (int i = 0; i < L->nsh; i++) cost_shampoo_tensor(hw, o, L->sh[i], &t, &rt);
  *roots = rt;
  return t;
}

int explore_model_shape(const Module *m, ModelShape *ms) {
  const Graph *g = m->graph;
  static unsigned long shapes;
  memset(ms, 0, sizeof *ms);
  ms->stamp = ++shapes;
  ms->name = g->model;
  ms->seq = m->train.seq > 0 ? m->train.seq : 1;
  ms->batch = m->train.batch > 0 ? m->train.batch : 1;
  ms->elt = m->train.precision == DT_F32 ? 4 : m->train.precision == DT_F64 ? 8 : 2;
  ms->opt_states = opt_states(&m->train.opt);
  const char *ok = m->train.opt.kind;
  ms->eager_opt = ok && (!strcmp(ok, "shampoo") || !strcmp(ok, "adafactor"));
  ms->owner_exact = ms->blocked = opt_blocked(&m->train.opt);
  ms->adafactor = ok && !strcmp(ok, "adafactor");
  if (ok && !strcmp(ok, "shampoo")) {
    ms->shampoo = true;
    ms->opt = m->train.opt;
    ms->sh_spread = !m->train.opt.no_spread;
  }
  if (opt_blocked(&m->train.opt)) {
    /* Shampoo's factors, roots and grafting state, Adafactor's factored
     * moments (rt_optim.h): their elements per parameter element over the
     * model's whole tensors */
    double st = 0, pe = 0;
    for (int i = 0; i < g->params.len; i++) {
      const Value *p = g->params.data[i];
      st += (double)opt_state_elems(&m->train.opt, &p->shape);
      pe += (double)ir_numel(&p->shape);
    }
    ms->opt_states = pe > 0 ? st / pe : 0;
  }
  if (m->train.microbatch_given) ms->fixed_b = (int)m->train.microbatch;
  ms->param_elt = g->params.len ? ir_dtype_size(((Value *)g->params.data[0])->dtype) : 4;
  if (ms->elt == 2) {
    bool *seen = arena_alloc((size_t)g->values.len + 1);
    double wc = 0, all = 0;
    for (int i = 0; i < g->params.len; i++) all += (double)ir_numel(&((Value *)g->params.data[i])->shape);
    for (int i = 0; i < g->nodes.len; i++) {
      const Node *n = g->nodes.data[i];
      if (n->op != OP_MATMUL) continue;
      const Value *w = n->in[1];
      if (w->def && w->def->op == OP_CAST) w = w->def->in[0];
      if (w->role != ROLE_PARAM || w->alias || seen[w->id]) continue;
      seen[w->id] = true;
      wc += (double)ir_numel(&w->shape);
    }
    ms->wcopy_frac = all > 0 ? wc / all : 0;
    /* of those, the ones nothing else reads (an embedding table tied to the
     * head is read by the embedding too, in fp32) */
    /* (nor is an LM head whose 16-bit copy has padded rows, passes/precision.c:
     * not a view of a bucket, it is gathered in fp32 and cast) */
    bool *other = arena_alloc((size_t)g->values.len + 1);
    for (int j = 0; j < g->nodes.len; j++) {
      const Node *n = g->nodes.data[j];
      for (int q = 0; q < n->nin && n->op != OP_MATMUL && n->op != OP_MATMUL_BWD; q++) {
        const Value *x = n->in[q];
        if (x && x->def && x->def->op == OP_CAST) x = x->def->in[0];
        if (x) other[x->id] = true;
      }
      const Value *w = n->op == OP_MATMUL ? n->in[1] : NULL;
      if (w && w->def && w->def->op == OP_CAST && ir_cast_rows(w->def) > w->def->in[0]->shape.d[0].n)
        other[w->def->in[0]->id] = true;
    }
    double hc = 0;
    for (int i = 0; i < g->params.len; i++) {
      const Value *p = g->params.data[i];
      if (seen[p->id] && !other[p->id]) hc += (double)ir_numel(&p->shape);
    }
    ms->half_frac = all > 0 ? hc / all : 0;
  }
  double nseq = g->inputs.len ? (double)((Value *)g->inputs.data[0])->shape.d[0].n : 1;
  if (nseq < 1) nseq = 1;
  int nf = g->nfwd ? g->nfwd : g->nodes.len;
  /* the first layer and how many there are */
  char first[128] = "", cur[128], prev[128] = "";
  int first_at = -1, last_end = -1;
  for (int i = 0; i < nf; i++) {
    const Node *n = g->nodes.data[i];
    if (n->op == OP_PARAM || n->op == OP_INPUT) continue;
    layer_name(n, cur, sizeof cur);
    if (!cur[0]) continue;
    if (!first[0]) {
      strcpy(first, cur);
      first_at = i;
    }
    if (strcmp(cur, prev)) ms->layers++;
    strcpy(prev, cur);
    last_end = i;
  }
  if (!ms->layers) first_at = nf; /* no repeated layers: every op before "the layers" */
  /* hidden: the first layer's input width (the model input's without layers) */
  ms->hidden = 0;
  for (int i = ms->layers ? first_at : 0; i < nf && !ms->hidden; i++) {
    const Node *n = g->nodes.data[i];
    if (n->nin && n->in[0]->shape.ndim) ms->hidden = n->in[0]->shape.d[n->in[0]->shape.ndim - 1].n;
  }
  double hidden = (double)ms->hidden;
  Value *colin[16];
  int ncol = 0;
  /* the fused loops and bias epilogues the program will run (fuse.c reads
   * node ids as schedule positions: only where they are) */
  bool ids_ok = true;
  for (int i = 0; i < g->nodes.len && ids_ok; i++) ids_ok = ((Node *)g->nodes.data[i])->id == i;
  Fusion *fu = NULL;
  if (ids_ok) {
    /* no memory plan yet: nothing is placed, so no stored value overlaps
     * another (the plan keeps fused groups' operands apart, fuse.h) */
    int64_t *off = malloc(sizeof *off * (size_t)(g->values.len + 1));
    for (int i = 0; i < g->values.len; i++) {
      Value *v = g->values.data[i];
      off[i] = v->offset;
      v->offset = -1;
    }
    fu = fuse_analyse((Graph *)g);
    for (int i = 0; i < g->values.len; i++) ((Value *)g->values.data[i])->offset = off[i];
    free(off);
  }
  bool *splitv = calloc((size_t)g->values.len + 1, 1);
  bool *vocab_mm = calloc((size_t)g->nodes.len + 1, 1);
  bool *vocab_w = calloc((size_t)g->values.len + 1, 1);
  for (int i = 0; i < nf; i++) {
    /* as the shard pass sees it, before autodiff: the logits' only reader
     * in the forward is the cross-entropy */
    Node *n = g->nodes.data[i];
    Node *mm = n->op == OP_CROSS_ENTROPY ? n->in[0]->def : NULL;
    if (!mm || mm->op != OP_MATMUL || mm->in[1]->role != ROLE_PARAM || mm->id < 0 || mm->id >= g->nodes.len)
      continue;
    int readers = 0;
    for (int j = 0; j < nf; j++) {
      const Node *r = g->nodes.data[j];
      for (int k = 0; k < r->nin; k++) readers += r->in[k] == n->in[0];
    }
    vocab_mm[mm->id] = readers == 1;
    if (readers == 1) vocab_w[mm->in[1]->id] = true;
  }
  /* what recompute=full runs again: the copies of the nodes that rebuild
   * what the backward reads (not a layer's last GEMMs, whose outputs no
   * backward reads), as the pass makes them */
  bool *rerun = NULL;
  if (ids_ok && g->nfwd) {
    bool *dropf = calloc((size_t)g->values.len + 1, 1);
    rerun = calloc((size_t)g->nodes.len + 1, 1);
    recompute_dropped((Graph *)g, RECOMPUTE_FULL, dropf);
    recompute_rerun_nodes((Graph *)g, dropf, rerun);
    free(dropf);
  }
  ShapeCtx cx = {fu, splitv, vocab_mm, rerun};
  for (int i = 0; i < nf; i++) {
    const Node *n = g->nodes.data[i];
    mark_split(n, vocab_mm, splitv);
    if (n->op == OP_PARAM || n->op == OP_INPUT) continue;
    layer_name(n, cur, sizeof cur);
    if (!strcmp(cur, first))
      add_op(&ms->layer, n, nseq, hidden, colin, &ncol, &cx);
    else if (!cur[0])
      add_op(i < first_at ? &ms->pre : &ms->post, n, nseq, hidden, colin, &ncol, &cx);
    else if (i > last_end)
      add_op(&ms->post, n, nseq, hidden, colin, &ncol, &cx);
    if (n->op == OP_ATTENTION && !ms->heads) {
      ms->heads = n->in[0]->shape.d[2].n;
      ms->kv_heads = n->in[1]->shape.d[2].n;
    }
    if (n->op == OP_GATHER && !ms->vocab) ms->vocab = n->in[0]->shape.d[0].n;
  }
  /* parameters */
  size_t flen = strlen(first);
  for (int i = 0; i < g->params.len; i++) {
    const Value *v = g->params.data[i];
    double e = numel(v);
    LayerModel *L = v->name && !strncmp(v->name, first, flen) && v->name[flen] == '.' ? &ms->layer
                                                                                       : NULL;
    if (!L && v->name) {
      /* another layer's ("blocks.7.attn.qkv.weight"): counted by the first's */
      Node tmp = {.scope = v->name};
      layer_name(&tmp, cur, sizeof cur);
      if (cur[0]) continue;
    }
    if (!L) {
      /* outside the layers: with the pre ops when a pre op reads it */
      bool pre = false;
      for (int k = 0; k < first_at; k++) {
        const Node *n = g->nodes.data[k];
        for (int j = 0; j < n->nin; j++) pre |= n->in[j] == v;
      }
      L = pre ? &ms->pre : &ms->post;
    }
    L->params += e;
    if (v->tph != TPH_NONE || vocab_w[v->id]) L->params_split += e;
    /* a pre parameter a post op reads too (a tied embedding): a pipeline's
     * last stage keeps a copy (passes/stage.c), with its gradient and
     * state (in a ZeRO bucket of its own, passes/zero.c) */
    bool tied = false;
    for (int k = last_end + 1; L == &ms->pre && k < nf; k++) {
      const Node *n = g->nodes.data[k];
      for (int j = 0; j < n->nin; j++) tied |= n->in[j] == v;
    }
    if (tied) {
      ms->post.tied += e;
      if (v->tph != TPH_NONE || vocab_w[v->id]) ms->post.tied_split += e;
    }
    if (opt_blocked(&m->train.opt) && v->grad) {
      if (!strcmp(m->train.opt.kind, "shampoo")) {
        if (L->nsh == LAYER_MAXTENSORS) ms->owner_exact = false; /* (never: a layer's few tensors) */
        else L->sh[L->nsh++] = &v->shape;
      }
      for (int c = 0; c < 1 + tied; c++) {
        LayerModel *T = c ? &ms->post : L;
        if (T->nt == LAYER_MAXTENSORS) {
          ms->owner_exact = false;
          continue;
        }
        T->t_numel[T->nt] = (int64_t)e;
        T->t_state[T->nt] = rt_optim_align64(opt_state_elems(&m->train.opt, &v->shape) * 4);
        T->t_tied[T->nt] = c;
        T->t_shared[T->nt] = !c && tied;
        T->t_bucket[T->nt++] = arena_printf("%s%s", zero_bucket_key(v->name ? v->name : ""), c ? " (tied)" : "");
      }
    }
  }
  if (opt_blocked(&m->train.opt)) {
    const Shape **shapes = arena_alloc(sizeof *shapes * (size_t)(g->params.len + 1));
    for (int i = 0; i < g->params.len; i++) shapes[i] = &((const Value *)g->params.data[i])->shape;
    /* the step's workspace, and a pipeline's root worker's scratch after it
     * (the cpu target's; owner_state_bytes adds it for staged plans) */
    int64_t rw, all = opt_work_bytes(&m->train.opt, shapes, g->params.len, !m->cuda, &rw);
    ms->opt_work = (double)rt_optim_align64(all - rw);
    ms->root_work = (double)rw;
  }
  /* activations the backward reads, per sequence; colv: the inputs of
   * column-parallel GEMMs (and of the projection to a vocabulary the
   * shard pass splits), which Megatron-SP gathers whole */
  char *colv = calloc((size_t)g->values.len + 1, 1);
  for (int i = 0; i < nf; i++) {
    const Node *n = g->nodes.data[i];
    if (n->op != OP_MATMUL || !colv) continue;
    bool voc = n->in[1]->tph == TPH_VOCAB || vocab_mm[n->id];
    if (n->in[1]->tph == TPH_COL || voc) {
      const Value *x = n->in[0];
      while (x->alias) x = x->alias;
      /* 2: the projection to the vocabulary's, which tp2d's shard pass
       * gathers whole and cuts to a row block (passes/shard2d.c) */
      colv[x->id] |= voc ? 2 : 1;
    }
  }
  char *mark = calloc((size_t)g->values.len + 1, 1);
  bool *sel = calloc((size_t)g->values.len + 1, 1);
  if (g->nfwd) recompute_dropped((Graph *)g, RECOMPUTE_SELECTIVE, sel);
  for (int i = nf; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++) {
      const Value *v = n->in[k];
      if (!v || !ir_reads_data(n, k) || v->role == ROLE_PARAM || v->role == ROLE_INPUT) continue;
      while (v->alias) v = v->alias;
      if (!v->def || mark[v->id]) continue;
      int at = -1;
      for (int j = 0; j < nf && at < 0; j++)
        if (g->nodes.data[j] == v->def) at = j;
      if (at < 0) continue;
      mark[v->id] = 1;
      layer_name(v->def, cur, sizeof cur);
      LayerModel *L = !strcmp(cur, first) ? &ms->layer : cur[0] ? NULL : at < first_at ? &ms->pre : &ms->post;
      if (!L) continue;
      double e = numel(v) / nseq;
      bool split = v->def->op == OP_ATTENTION || splitv[v->id];
      bool gath = !split && colv && colv[v->id];
      L->saved += e;
      if (split) L->saved_split += e;
      if (gath) L->saved_gath += e;
      if (colv && (colv[v->id] & 2)) L->saved_vocab += e;
      if (v->def->op == OP_ATTENTION) L->saved_attn += e;
      if (sel[v->id]) {
        L->saved_sel += e;
        if (split) L->saved_sel_split += e;
        if (gath) L->saved_sel_gath += e;
        /* rerun: what its node reads and writes */
        for (int q = 0; q < v->def->nin; q++)
          if (ir_reads_data(v->def, q) && v->def->in[q]->role != ROLE_PARAM)
            L->sel_elems += numel(v->def->in[q]) / nseq;
        L->sel_elems += e;
      }
    }
  }
  free(mark);
  free(colv);
  free(splitv);
  free(vocab_mm);
  free(vocab_w);
  free(rerun);
  free(sel);
  ms->layer.input = (double)ms->seq * hidden;
  return 0;
}

double explore_model_flops(const ModelShape *ms, bool full) {
  double per = ms->layer.fwd_flops * ms->layers;
  double outside = ms->pre.fwd_flops + ms->post.fwd_flops;
  return (double)ms->batch * (3 * (per + outside) + (full ? per : 0));
}

/* ---- one plan ---- */

typedef struct LCost {
  double f, b;        /* forward, backward seconds per microbatch (with recompute) */
  double gemm, attn, elem;  /* of which compute by kind, forward + backward */
  double comm_f, comm_b;
  double sent_f, sent_b;  /* bytes this rank sends per microbatch (runtime/dist_formulas.h's count) */
  double act;         /* bytes held per microbatch until its backward */
  double params;      /* local parameter elements */
  double tied;        /* of the ops after the layers: the copy a pipeline's last
                       * stage keeps of a tied embedding, local elements */
  double f_rerun, sent_rerun;  /* of f and sent_f: the ops recompute=full runs again */
} LCost;

typedef struct Split {
  int t, q, r;        /* tp, tp2d grid side, ring sp */
  bool spm;           /* Megatron-SP */
  int b;              /* sequences per microbatch */
  Recompute rc;
  bool graph;         /* the CUDA target's step as CUDA graphs: kernels at launch_graph_s */
  bool pad_head;      /* a 16-bit LM head's rows padded */
  bool rerun_layer;   /* recompute=full priced as Megatron-LM runs it, the whole
                       * layer again (SHARDC_RECOMPUTE_AS=megatron) */
} Split;

static double coll_axis(const HwModel *hw, const char *op, int n, int stride, double bytes) {
  return cost_coll(hw, op, n, stride, bytes, NULL);
}

/* Bytes a rank sends, as runtime/dist_formulas.h counts them: an all-reduce
 * of S bytes over P ranks 2(P-1)/P S; an all-gather, reduce-scatter,
 * broadcast or reduce of S (the whole) (P-1)/P S. */
static double vol_ar(double S, int P) { return P > 1 ? 2.0 * (P - 1) / P * S : 0; }
static double vol_ag(double S, int P) { return P > 1 ? (double)(P - 1) / P * S : 0; }

static void layer_cost(const LayerModel *L, const ModelShape *ms, const HwModel *hw, const Split *s,
                       bool is_layer, LCost *c) {
  memset(c, 0, sizeof *c);
  int t = s->t, q = s->q, r = s->r, T = t * q * q;
  double elt = ms->elt, bseq = s->b;
  for (int i = 0; i < L->nop; i++) {
    const LOp *o = &L->op[i];
    double rows = o->rows * bseq / r; /* this rank's tokens (ring: its chunk) */
    double f0 = c->f, s0 = c->sent_f;
    switch (o->kind) {
    case LO_GEMM: {
      double M = rows, N = o->N, K = o->K, f, b;
      if (q > 1 && o->split == TPH_VOCAB) {
        /* tp2d's projection to the vocabulary (passes/shard2d.c): the
         * input's rows all-gathered over the grid's columns and its
         * channels over its rows, the rows then cut over the grid's rows;
         * the table's block gathered over the grid's rows (fp32); one GEMM
         * of the rank's rows by its vocabulary block with all the channels.
         * The backward reduce-scatters the input's gradient back (both
         * axes) and the table's over the grid's rows */
        double Ml = M / q, Nl = N / q;
        f = cost_gemm(hw, Ml, Nl, K);
        b = cost_gemm(hw, Ml, K, Nl) + cost_gemm(hw, Nl, K, Ml);
        c->gemm += f + b;
        double x1 = M * K / q * elt, x2 = M * K * elt, wb = Nl * K * 4;
        double cf = coll_axis(hw, "all_gather", q, q, x1) + coll_axis(hw, "all_gather", q, 1, x2) +
                    coll_axis(hw, "all_gather", q, 1, wb);
        double cb = coll_axis(hw, "reduce_scatter", q, q, x1) +
                    coll_axis(hw, "reduce_scatter", q, 1, x2) +
                    coll_axis(hw, "reduce_scatter", q, 1, wb);
        double vol = vol_ag(x1, q) + vol_ag(x2, q) + vol_ag(wb, q);
        c->comm_f += cf;
        c->comm_b += cb;
        c->sent_f += vol;
        c->sent_b += vol;
        f += cf;
        b += cb;
      } else if (q > 1) {
        /* SUMMA on the q x q grid: q steps of blocks, broadcasts along the
         * grid's rows and columns */
        M /= q;
        N /= q;
        K /= q;
        f = q * cost_gemm(hw, M, N, K);
        b = q * (cost_gemm(hw, M, K, N) + cost_gemm(hw, N, K, M));
        c->gemm += f + b;
        double xb = M * K * elt, wb = K * N * elt;
        double cf = q * (coll_axis(hw, "broadcast", q, 1, xb) + coll_axis(hw, "broadcast", q, q, wb));
        double cb = 2 * cf;
        c->comm_f += cf;
        c->comm_b += cb;
        c->sent_f += q * (vol_ag(xb, q) + vol_ag(wb, q));
        c->sent_b += 2 * q * (vol_ag(xb, q) + vol_ag(wb, q));
        f += cf;
        b += cb;
      } else {
        /* an LM head on GPU in 16 bits with rows not 16-byte aligned: the
         * precision pass pads its weight copy (passes/precision.c) */
        if (o->split == TPH_VOCAB && t == 1 && s->pad_head && hw->unaligned_eff < 1 &&
            fmod(N * elt, 16.0) != 0 && fmod(K * elt, 16.0) == 0)
          N = ceil(N / 64) * 64;
        if (o->split == TPH_COL || o->split == TPH_VOCAB) N /= t;
        if (o->split == TPH_ROW) K /= t;
        f = cost_gemm(hw, M, N, K);
        b = cost_gemm(hw, M, K, N) + cost_gemm(hw, N, K, M);
        c->gemm += f + b;
        if (t > 1 && o->split == TPH_ROW) {
          /* g: all-reduce of the output (Megatron-SP: reduce-scatter, then
           * the next region's all-gather, the same bytes) */
          double cf = coll_axis(hw, "all_reduce", t, 1, M * o->N * elt);
          c->comm_f += cf;
          c->sent_f += vol_ar(M * o->N * elt, t);
          f += cf;
        }
        if (t > 1 && (o->split == TPH_COL || o->split == TPH_VOCAB) && o->elems > 0) {
          double cb = coll_axis(hw, "all_reduce", t, 1, M * o->K * elt);
          c->comm_b += cb;
          c->sent_b += vol_ar(M * o->K * elt, t);
          /* the CUDA target all-reduces (Megatron-SP: reduce-scatters) dX
           * beside the dW GEMM (program.c PJ_DX) */
          if (hw->overlap > 0) {
            double dw = cost_gemm(hw, N, K, M);
            cb -= hw->overlap * (cb < dw ? cb : dw);
          }
          b += cb;
        }
      }
      c->f += f;
      c->b += b;
      break;
    }
    case LO_ATTN: {
      double H = o->H / (q > 1 ? q : t), Hkv = o->Hkv / (q > 1 ? q : t) > 1 ? o->Hkv / (q > 1 ? q : t) : 1;
      double bl = q > 1 ? bseq / q : bseq, Tl = o->rows / r, Tk = o->rows, D = o->D;
      if (bl < 1) bl = 1;
      /* a ring's step is a Tl x Tk block, unmasked but on the diagonal */
      double f = cost_attention(hw, true, o->causal && r == 1, bl, Tl, Tk, H, D), b;
      if (f >= 0) {
        b = cost_attention(hw, false, o->causal && r == 1, bl, Tl, Tk, H, D);
      } else { /* a CPU's: per (batch, head) GEMMs over Tl x Tk x D */
        double one = cost_gemm(hw, Tl, Tk, D) - hw->launch_s;
        double rate = one > 0 ? 2 * Tl * Tk * D / one : hw->peak;
        double flops = 4 * bl * H * Tl * Tk * D;
        f = flops / rate + bl * H * cost_membound(hw, Tl * Tk * elt * 0.25, 5 * Tl * Tk) / 8 +
            hw->launch_s;
        b = 2 * f;
      }
      c->attn += f + b;
      if (r > 1) {
        double kv = bl * Tl * Hkv * D * elt;
        double cf = (r - 1) * coll_axis(hw, "p2p", 2, T, 2 * kv);
        double cb = (2 * (r - 1) + 1) * coll_axis(hw, "p2p", 2, T, 2 * kv);
        c->comm_f += cf;
        c->comm_b += cb;
        c->sent_f += (r - 1) * 2 * kv;
        c->sent_b += (2 * (r - 1) + 1) * 2 * kv;
        f += cf;
        b += cb;
      }
      c->f += f;
      c->b += b;
      break;
    }
    case LO_ELEM: {
      double div = (double)q * q * r;
      if (q == 1 && (o->split || s->spm)) div *= t;
      double e = o->elems * bseq / div;
      double f = cost_membound(hw, e * elt, o->flops * bseq / div);
      double b = (o->bwd > 0 ? o->bwd : 2) * f;
      c->elem += f + b;
      if (q > 1 && o->H > 0) {
        double st = coll_axis(hw, "all_reduce", q, 1, rows / q * 16);
        f += st;
        b += st;
        c->comm_f += st;
        c->comm_b += st;
        c->sent_f += vol_ar(rows / q * 16, q);
        c->sent_b += vol_ar(rows / q * 16, q);
      }
      c->f += f;
      c->b += b;
      break;
    }
    case LO_GATHER: {
      double e = o->elems * bseq / (q * q * r);
      double f = cost_membound(hw, 2 * e * elt, 0), b = 2 * f;
      if (T > 1) { /* vocab-parallel: the partial rows all-reduced */
        double cf = coll_axis(hw, "all_reduce", q > 1 ? q : t, q > 1 ? q : 1, e * (q > 1 ? 1 : 1) * elt);
        f += cf;
        c->comm_f += cf;
        c->sent_f += vol_ar(e * elt, q > 1 ? q : t);
      }
      c->f += f;
      c->b += b;
      break;
    }
    case LO_XENT: {
      double e = o->elems * bseq / (T * r);
      double f = cost_membound(hw, 2 * e * elt, 5 * e), b = cost_membound(hw, 2 * e * elt, 3 * e);
      if (T > 1) {
        double rw = o->rows * bseq / r;
        double cf = 2 * coll_axis(hw, "all_reduce", q > 1 ? q : t, q > 1 ? q : 1, rw * 16);
        f += cf;
        b += cf;
        c->comm_f += cf;
        c->comm_b += cf;
        c->sent_f += 2 * vol_ar(rw * 16, q > 1 ? q : t);
        c->sent_b += 2 * vol_ar(rw * 16, q > 1 ? q : t);
      }
      c->f += f;
      c->b += b;
      break;
    }
    }
    if (o->rerun) {
      c->f_rerun += c->f - f0;
      c->sent_rerun += c->sent_f - s0;
    }
  }
  /* recompute: the backward reruns the forward ops whose outputs it needs
   * again (passes/recompute.c's copies: a layer's last GEMMs are not among
   * them, as their outputs feed no backward) */
  if (is_layer && s->rc == RECOMPUTE_FULL) {
    c->b += s->rerun_layer ? c->f : c->f_rerun;
    c->sent_b += s->rerun_layer ? c->sent_f : c->sent_rerun;
  }
  /* selective (passes/recompute.c): the norms and elementwise ops whose
   * outputs it drops, memory-bound */
  if (is_layer && s->rc == RECOMPUTE_SELECTIVE) {
    double div = (double)q * q * r * (s->spm ? t : 1);
    c->b += cost_membound(hw, L->sel_elems * bseq / div * elt, 0);
  }
  /* memory held per microbatch */
  /* (Megatron-SP: the replicated ones split over the sequence but for the
   * gathered inputs of column-parallel GEMMs, whole) */
  double div_split = (double)t * q * q * r, div_rep = (double)(s->spm ? t : 1) * q * q * r,
         div_gath = (double)q * q * r;
  double gath = s->spm ? L->saved_gath : 0, gath_sel = s->spm ? L->saved_sel_gath : 0;
  double act = (L->saved_split / div_split + (L->saved - L->saved_split - gath) / div_rep +
                gath / div_gath) * bseq;
  /* tp2d: the head's input holds all the channels of its rows, split once */
  if (q > 1) act += L->saved_vocab * bseq * (1.0 / (q * r) - 1.0 / div_split);
  if (is_layer && s->rc == RECOMPUTE_FULL) act = L->input * bseq / div_rep;
  if (is_layer && s->rc == RECOMPUTE_SELECTIVE)
    act -= (L->saved_sel_split / div_split + (L->saved_sel - L->saved_sel_split - gath_sel) / div_rep +
            gath_sel / div_gath) * bseq;
  c->act = act * elt;
  c->params = L->params_split / T + (L->params - L->params_split) / (q * q);
  c->tied = L->tied_split / T + (L->tied - L->tied_split) / (q * q);
}

/* Memo of layer costs per split (the search revisits each many times). */
enum { MEMO_CAP = 4096 };
typedef struct Memo {
  Split key[MEMO_CAP];
  LCost val[MEMO_CAP][3];
  int n;
  const ModelShape *ms;
  unsigned long stamp;
  HwModel hw;
} Memo;
static Memo *memo;

/* Empties the memo unless it holds ms's and hw's costs: keyed by the
 * shape's stamp and the machine's figures, not by where they lie (another
 * shape or machine may come to lie at the same place).  explore_eval
 * checks on each call, explore_search once for all its plans (a machine's
 * figures are 43 KB: a compare a plan would double the search's time). */
static void memo_check(const ModelShape *ms, const HwModel *hw) {
  if (!memo) memo = calloc(1, sizeof *memo);
  if (!memo) return;
  if (memo->ms != ms || memo->stamp != ms->stamp || memcmp(&memo->hw, hw, sizeof *hw)) {
    memo->n = 0;
    memo->ms = ms;
    memo->stamp = ms->stamp;
    memo->hw = *hw;
  }
}

/* (memo_check first) */
static const LCost *costs(const ModelShape *ms, const HwModel *hw, const Split *s) {
  static LCost tmp[3];
  if (memo)
    for (int i = 0; i < memo->n; i++)
      if (!memcmp(&memo->key[i], s, sizeof *s)) return memo->val[i];
  LCost *v = memo && memo->n < MEMO_CAP ? memo->val[memo->n] : tmp;
  HwModel hg;
  if (s->graph) hw = cost_hw_graphed(hw, &hg); /* a graph's kernels at the replay's cost a kernel */
  layer_cost(&ms->pre, ms, hw, s, false, &v[0]);
  layer_cost(&ms->layer, ms, hw, s, true, &v[1]);
  layer_cost(&ms->post, ms, hw, s, false, &v[2]);
  if (memo && memo->n < MEMO_CAP) memo->key[memo->n++] = *s;
  return v;
}

/* The layers of each stage minimising the slowest stage (min-max
 * partition; the layers are alike, the first stage also runs the ops
 * before them and the last the ops after): the smallest bottleneck T for
 * which greedy filling places every layer, by bisection over the
 * candidate bottlenecks.  Every stage holds at least one layer: a stage
 * spec counts layers from 1 (plan.c), and a stage of the head alone
 * (GPT-2's 12+0 on two stages, whose LM head costs more than a layer)
 * is not a cut the stage pass makes. */
static int partition(int L, int p, double c, double pre, double post, int *n) {
  if (p == 1) {
    n[0] = L;
    return 0;
  }
  if (L < p) return -1;
  double lo = 0, hi = (L + 1) * c + pre + post;
  for (int it = 0; it < 60; it++) {
    double T = (lo + hi) / 2;
    int placed = 0;
    bool ok = true;
    for (int s = 0; s < p; s++) {
      double extra = s == 0 ? pre : s == p - 1 ? post : 0;
      /* (clamped before the cast: a cost of inf, NaN or 1e-300 must not
       * overflow an int) */
      double kf = c > 0 ? floor((T - extra) / c + 1e-9) : L;
      int k = kf >= 1 ? (kf < L ? (int)kf : L) : 0;
      if (k < 1) ok = false;
      placed += k;
    }
    if (ok && placed >= L)
      hi = T;
    else
      lo = T;
  }
  int left = L;
  for (int s = 0; s < p; s++) {
    double extra = s == 0 ? pre : s == p - 1 ? post : 0;
    double kf = c > 0 ? floor((hi - extra) / c + 1e-9) : L;
    int k = kf >= 1 ? (kf < L ? (int)kf : L) : 0;
    int minrest = 0;
    for (int j = s + 1; j < p; j++) minrest++;
    if (k > left - minrest) k = left - minrest;
    if (k < 1) k = 1;
    n[s] = k;
    left -= k;
  }
  n[p - 1] += left;
  return 0;
}

/* A pipeline message of b sequences: its bytes on one rank, and the tp
 * ranks it is scattered over (0: none).  Whole on every rank of a 1D tp
 * group (no Megatron-SP) and sent between nodes, each tp rank sends 1/t of
 * it and the receiver all-gathers it over tp (scatter/gather,
 * passes/program.c pipe_split). */
static double msg_bytes(const ModelShape *ms, const Mesh *me, const Plan *p, int b, int *split) {
  int q = p->tp2d > 1 ? p->tp2d : 1, r = p->sp_kind == SP_RING ? p->sp : 1, t = p->tp;
  bool spm = p->sp_kind == SP_MEGATRON;
  *split = t > 1 && q == 1 && !spm && ir_mesh_pp_crosses_nodes(me, p->pp) ? t : 0;
  return (double)b * ms->seq * ms->hidden * ms->elt / (r * q * q * (spm ? t : 1));
}

double explore_msg_time(const ModelShape *ms, const HwModel *hw, const Mesh *me, const Plan *p,
                        int b) {
  if (p->pp <= 1) return 0;
  int split, stride = p->tp * (p->tp2d > 1 ? p->tp2d * p->tp2d : 1) *
                      (p->sp_kind == SP_RING ? p->sp : 1) * p->dp;
  double bytes = msg_bytes(ms, me, p, b, &split);
  if (split)
    return cost_coll(hw, "p2p", 2, stride, bytes / split, NULL) +
           cost_coll(hw, "all_gather", split, 1, bytes, NULL);
  return cost_coll(hw, "p2p", 2, stride, bytes, NULL);
}

/* The stash slots of pipeline rank k's chunk c: the microbatches its
 * forward has run and its backward not yet, at most at once in the
 * schedule (sched_build's inflight, the slots passes/memplan.c gives each
 * chunk: an interleaved rank holds the sum of its chunks' most, not the
 * most of their sum).  Interleaved schedules are built once per (pp, m, v)
 * and kept; -1 when none can be (explore_eval then takes Megatron's
 * count). */
static int stash_slots(Schedule kind, int pp, int m, int v, int k, int c) {
  if (kind == SCHED_GPIPE) return m;
  if (kind != SCHED_INTERLEAVED || v <= 1) return pp - k < m ? pp - k : m;
  if (pp > SCHED_MAXPP || v > SCHED_MAXV || k >= pp || c >= v) return -1;
  /* past pp·(v+2) microbatches the steady state holds what it held, so
   * the most in flight stop growing: a schedule of that many gives the
   * same slots (every pp up to 64, v up to 8, m up to 40·pp and 2,048:
   * identical), and the search builds small schedules only */
  if (m > pp * (v + 2)) m = pp * (v + 2);
  /* open addressing over (pp, m, v); a search visits some dozens */
  enum { CACHE = 512, PROBE = 8 };
  typedef struct { int pp, m, v; int16_t slots[SCHED_MAXPP][SCHED_MAXV]; } Entry;
  static Entry *cache;
  if (!cache && !(cache = calloc(CACHE, sizeof *cache))) return -1;
  unsigned h = ((unsigned)pp * 2654435761u ^ (unsigned)m * 40503u ^ (unsigned)v * 9973u) % CACHE;
  Entry *e = NULL;
  for (int i = 0; i < PROBE; i++) {
    Entry *x = &cache[(h + i) % CACHE];
    if (x->pp == pp && x->m == m && x->v == v) return x->slots[k][c];
    if (!e && !x->pp) e = x;
  }
  if (!e) e = &cache[h]; /* (all taken: the first gives way) */
  PipeSched ps;
  char err[256];
  if (sched_build(&ps, kind, pp, m, v, err, sizeof err)) return -1;
  e->pp = pp, e->m = m, e->v = v;
  for (int r = 0; r < pp; r++)
    for (int q = 0; q < v; q++) e->slots[r][q] = (int16_t)ps.inflight[r][q];
  sched_free(&ps);
  return e->slots[k][c];
}

static void eval_plan(const ModelShape *ms, const HwModel *hw, const Mesh *me, const Plan *p,
                      int b, PlanEval *out);

void explore_eval(const ModelShape *ms, const HwModel *hw, const Mesh *me, const Plan *p, int b,
                  bool recompute_ok, PlanEval *out) {
  (void)recompute_ok;
  memo_check(ms, hw);
  eval_plan(ms, hw, me, p, b, out);
}

static void eval_plan(const ModelShape *ms, const HwModel *hw, const Mesh *me, const Plan *p,
                      int b, PlanEval *out) {
  memset(out, 0, sizeof *out);
  out->plan = *p;
  out->b = b;
  Plan pl = *p;
  int q = p->tp2d > 1 ? p->tp2d : 1, r = p->sp_kind == SP_RING ? p->sp : 1, t = p->tp;
  int T = t * q * q, D = p->dp * r, pp = p->pp, v = p->schedule == SCHED_INTERLEAVED ? p->vchunks : 1;
  int m = p->mb > 0 ? p->mb : 1;
  /* ZeRO under bf16 (passes/zero.c): the weights only matmuls read are
   * gathered in 16 bits, the rest in fp32 (gel: bytes a parameter element
   * moves); ZeRO-1/2's fp32 masters sharded (shm) */
  bool g16 = ms->elt == 2 && p->zero >= 1 && D > 1 && !ms->blocked && !zero_masters_whole();
  bool shm = g16 && p->zero <= 2;
  double gel = g16 ? 2 * ms->half_frac + ms->param_elt * (1 - ms->half_frac) : ms->param_elt;
  /* the CUDA target runs the step as CUDA graphs but under an eager
   * optimizer (runtime/train.c), or a pipeline whose messages commpass.c
   * could not group for NCCL (none of GPipe's, 1F1B's or interleaved's up
   * to pp 8 and 32 microbatches: the compiled plan knows) */
  bool graph = hw->overlap > 0 && hw->launch_graph_s > 0 && !ms->eager_opt;
  /* the memo compares keys bytewise (costs): padding zeroed */
  Split s;
  memset(&s, 0, sizeof s);
  s.t = t;
  s.q = q;
  s.r = r;
  s.spm = p->sp_kind == SP_MEGATRON;
  s.b = b;
  s.rc = p->recompute;
  s.graph = graph;
  s.pad_head = true;   /* (ZeRO-3: its casts before each use) */
  s.rerun_layer = explore_recompute_as_megatron();
  const LCost *lc = costs(ms, hw, &s);
  /* recompute per pipeline stage (recompute=full+none): each stage's
   * layers priced under its own policy (by value: the memo may reuse) */
  LCost byrc[3][3];
  const LCost *lay_at[PLAN_MAXSTAGES];
  for (int k = 0; k < p->pp && k < PLAN_MAXSTAGES; k++) lay_at[k] = &lc[1];
  if (p->nstage_recompute) {
    bool have[3] = {false, false, false};
    for (int k = 0; k < p->pp && k < PLAN_MAXSTAGES; k++) {
      int rk = (int)plan_recompute_at(p, k);
      if (rk < 0 || rk > 2) rk = (int)p->recompute;
      if (!have[rk]) {
        Split sk = s;
        sk.rc = (Recompute)rk;
        memcpy(byrc[rk], costs(ms, hw, &sk), sizeof byrc[rk]);
        have[rk] = true;
      }
      lay_at[k] = &byrc[rk][1];
    }
    lc = costs(ms, hw, &s); /* again: a full memo hands out one scratch array */
  }
  HwModel hg;
  if (graph) hw = cost_hw_graphed(hw, &hg);
  const LCost *pre = &lc[0], *lay = &lc[1], *post = &lc[2];
  if (p->nstage_recompute && p->pp >= 1 && p->pp <= PLAN_MAXSTAGES) {
    pre = lay_at[0] - 1;           /* the first stage's embedding, the last's head */
    post = lay_at[p->pp - 1] + 1;
  }
  double msg = explore_msg_time(ms, hw, me, p, b);
  /* stage partition */
  int n[PLAN_MAXSTAGES * 8];
  double half[PLAN_MAXSTAGES * 8] = {0};   /* pp=N:a.5+...: half a layer more */
  int S = pp * v;
  if (S > PLAN_MAXSTAGES * 8) S = PLAN_MAXSTAGES * 8;
  if (p->nstage_layers == S && S <= PLAN_MAXSTAGES) {
    for (int k = 0; k < S; k++) n[k] = p->stage_layers[k], half[k] = p->stage_frac[k] / 100.0;
  } else if (v > 1) {
    /* L / S layers per virtual stage; where S does not divide L, the
     * compiler cuts inside layers to balance them (passes/stage.c) */
    for (int k = 0; k < S; k++) {
      n[k] = ms->layers / S;
      half[k] = (double)ms->layers / S - n[k];
    }
  } else if (partition(ms->layers, pp, lay->f + lay->b, pre->f + pre->b, post->f + post->b, n)) {
    snprintf(out->reason, sizeof out->reason, "pp=%d is more stages than the %d layers allow", pp,
             ms->layers);
    plan_str(&pl, out->spec, sizeof out->spec);
    return;
  }
  if (v == 1) {
    pl.nstage_layers = pp > 1 ? pp : 0;
    for (int k = 0; k < pp && pp > 1; k++) pl.stage_layers[k] = n[k];
  }
  /* per pipeline rank: forward and backward of one microbatch over its chunks */
  double tf[PLAN_MAXSTAGES], tb[PLAN_MAXSTAGES], prm[PLAN_MAXSTAGES], act[PLAN_MAXSTAGES],
      hold[PLAN_MAXSTAGES];
  double sent[PLAN_MAXSTAGES];   /* bytes each pipeline rank sends per step */
  /* Shampoo: each pipeline rank's step and roots over its tensors */
  double osh[PLAN_MAXSTAGES], ort[PLAN_MAXSTAGES];
  double sh_pre = 0, sh_lay = 0, sh_post = 0, rt_pre = 0, rt_lay = 0, rt_post = 0;
  if (ms->shampoo) {
    sh_pre = shampoo_s(&ms->opt, hw, &ms->pre, &rt_pre);
    sh_lay = shampoo_s(&ms->opt, hw, &ms->layer, &rt_lay);
    sh_post = shampoo_s(&ms->opt, hw, &ms->post, &rt_post);
  }
  int split;
  double mbytes = msg_bytes(ms, me, p, b, &split);
  double tmax = 0, tsum = 0;
  for (int k = 0; k < pp; k++) {
    tf[k] = tb[k] = prm[k] = act[k] = hold[k] = sent[k] = osh[k] = ort[k] = 0;
    for (int c = 0; c < v; c++) {
      int vs = c * pp + k;
      double nl = n[vs] + half[vs];
      const LCost *lk = lay_at[k];
      osh[k] += nl * sh_lay + (vs == 0 ? sh_pre : 0) + (vs == S - 1 ? sh_post : 0);
      ort[k] += nl * rt_lay + (vs == 0 ? rt_pre : 0) + (vs == S - 1 ? rt_post : 0);
      tf[k] += nl * lk->f + (vs == 0 ? pre->f : 0) + (vs == S - 1 ? post->f : 0);
      tb[k] += nl * lk->b + (vs == 0 ? pre->b : 0) + (vs == S - 1 ? post->b : 0);
      prm[k] += nl * lk->params + (vs == 0 ? pre->params : 0) +
                (vs == S - 1 ? post->params + (S > 1 ? post->tied : 0) : 0);
      /* a stage after the first also holds in its stash slot the
       * activation it received (the layers' saved values count each
       * layer's output, not the stage's input: the first stage's is the
       * embedding's) and the gradient it sends back */
      double ac = nl * lk->act + (vs == 0 ? pre->act : 0) + (vs == S - 1 ? post->act : 0) +
                  (vs > 0 ? 2 * mbytes : 0);
      act[k] += ac;
      /* interleaved: each chunk's slots, each microbatch in one also
       * keeping the gradient it receives (memplan.c: the cuda target's
       * pairs post its receive early) */
      if (v > 1 && hold[k] >= 0) {
        int sl = stash_slots(p->schedule, pp, m, v, k, c);
        hold[k] = sl < 0 ? -1 : hold[k] + sl * (ac + mbytes);
      }
      sent[k] += m * (nl * (lk->sent_f + lk->sent_b) +
                      (vs == 0 ? pre->sent_f + pre->sent_b : 0) +
                      (vs == S - 1 ? post->sent_f + post->sent_b : 0));
      if (S > 1) {
        tf[k] += msg * (vs > 0); /* the receiver waits for the message */
        tb[k] += msg * (vs < S - 1);
        /* the activation on, the gradient back; a scattered one's slices
         * all-gathered by each receiver */
        int sends = (vs < S - 1) + (vs > 0);
        sent[k] += m * sends * (split ? mbytes / split + vol_ag(mbytes, split) : mbytes);
      }
    }
    /* ZeRO-3: each layer's parameters gathered before its forward and its backward */
    if (p->zero == 3 && D > 1) {
      double nl = 0;
      for (int c = 0; c < v; c++) nl += n[c * pp + k] + half[c * pp + k];
      double g = nl * cost_coll(hw, "all_gather", D, T, lay->params * gel, NULL) * (1 - hw->overlap * 0.5);
      tf[k] += g;
      tb[k] += g;
    }
    /* ZeRO-2 and 3 keep only their shard of the gradients: each
     * microbatch's backward reduce-scatters its buckets, blocking
     * (passes/program.c; ZeRO-1's, overlapped, only in the last) */
    if (p->zero >= 2 && D > 1) {
      double rs = cost_coll(hw, "reduce_scatter", D, T, prm[k] * ms->param_elt, NULL);
      if (ms->elt == 2 && hw->overlap > 0 && !zero_rs_blocking()) {
        /* 16-bit (the cuda target): they trail (PInstr.trail), each beside
         * the next layer's backward; the last ones (stage 0: the
         * embedding's) are waited for at the end, and overlap leaves its
         * share of the rest */
        double lb = k == 0 && pre->params > 0 ? pre->params : lay->params;
        double rs1 = cost_coll(hw, "reduce_scatter", D, T, (lb < prm[k] ? lb : prm[k]) * ms->param_elt, NULL);
        double rest = rs > rs1 ? rs - rs1 : 0, hidden = rest < tb[k] ? rest : tb[k];
        rs = rs1 + (rest - hidden) + (1 - hw->overlap) * hidden;
      }
      tb[k] += rs;
    }
    if (tf[k] + tb[k] > tmax) tmax = tf[k] + tb[k];
    tsum += tf[k] + tb[k];
  }
  memset(out->tf, 0, sizeof out->tf);
  for (int k = 0; k < pp; k++) {
    out->tf[k] = tf[k];
    out->tb[k] = tb[k];
  }
  {
    double nl0 = 0;
    for (int c = 0; c < v; c++) nl0 += n[c * pp] + half[c * pp];
    out->t_gemm = m * nl0 * lay_at[0]->gemm;
    out->t_attn = m * nl0 * lay_at[0]->attn;
    out->t_elem = m * nl0 * lay_at[0]->elem;
    out->t_comm = m * nl0 * (lay_at[0]->comm_f + lay_at[0]->comm_b);
  }
  /* the microbatches through the pipeline: (m - 1) of the slowest rank,
   * plus one microbatch's way through every stage (fill and drain);
   * interleaved: the fill and drain over v chunks each 1/v of a rank */
  double pipe;
  if (pp == 1)
    pipe = m * tmax;
  else if (v > 1)
    pipe = m * tmax + (pp - 1) * tmax / v;
  else
    pipe = (m - 1) * tmax + tsum;
  double busy = 0;
  for (int k = 0; k < pp; k++) busy += m * (tf[k] + tb[k]);
  /* the step after the microbatches: gradient reduction over the data ranks
   * (overlapped with the last backward), the optimizer, ZeRO's gathers */
  double tail = 0, bytes_sent = 0;
  double peak = 0;
  for (int k = 0; k < pp; k++) {
    double red = 0, gbytes = prm[k] * ms->param_elt, abytes = prm[k] * gel;   /* (ZeRO's gathers) */
    if (D > 1) {
      /* the gradients: all-reduced (ZeRO-1: reduce-scattered), started in
       * the last microbatch's backward and overlapped with it where the
       * target overlaps; ZeRO-2/3's per microbatch are in tb above */
      if (p->zero <= 1) {
        red = cost_coll(hw, p->zero == 1 ? "reduce_scatter" : "all_reduce", D, T, gbytes, NULL);
        double hidden_part = hw->overlap * red;
        if (hidden_part > tb[k]) hidden_part = tb[k];
        red -= hidden_part;
      }
      /* ZeRO-1/2: the updated shards all-gathered after the step (ZeRO-3
       * gathers the parameters before each use instead).  With the masters
       * sharded the cast block issues them at the step's start (PInstr.early)
       * and, where the target overlaps them, each layer waits only for its
       * own: the first bucket (stage 0: the fp32 embedding table's) is
       * waited for, the rest hides behind the stage's first forward (and
       * the k forwards upstream it waits for) but for the share overlap
       * does not hide. */
      if (p->zero == 1 || p->zero == 2) {
        double ag = cost_coll(hw, "all_gather", D, T, abytes, NULL);
        if (shm && hw->overlap > 0) {
          double fb = k == 0 && pre->params > 0 ? pre->params * ms->param_elt : lay->params * gel;
          double ag1 = cost_coll(hw, "all_gather", D, T, fb < abytes ? fb : abytes, NULL);
          double rest = ag > ag1 ? ag - ag1 : 0, hide = tf[k] * (1 + k);
          double hidden = rest < hide ? rest : hide;
          ag = ag1 + (rest - hidden) + (1 - hw->overlap) * hidden;
        }
        red += ag;
      }
      if (p->zero == 0)
        sent[k] += vol_ar(gbytes, D);
      else if (p->zero == 1)
        sent[k] += vol_ag(gbytes, D) + vol_ag(abytes, D);
      else
        sent[k] += m * vol_ag(gbytes, D) +
                   (p->zero == 2 ? vol_ag(abytes, D) : 2 * m * vol_ag(abytes, D));
    }
    double opt_elems = p->zero >= 1 && D > 1 ? prm[k] / D : prm[k];
    double opt = ms->adafactor ? cost_adafactor_elems(hw, opt_elems, COST_AF_ALL)
                               : cost_membound(hw, 7 * opt_elems * 4, 12 * opt_elems);
    if (ms->shampoo) {
      /* a rank's share of the blocks: its tensor shards' (a block lives
       * where its shard does), over the data ranks that spread them (or
       * ZeRO's owners); a cpu pipeline rank's root worker computes roots
       * in the rank's bubbles (runtime/train.c), the rest adds */
      double share = (double)T * ((ms->sh_spread || p->zero >= 1) && D > 1 ? D : 1);
      double roots = ort[k] / share;
      if (pp > 1 && hw->vec_flops <= 0) {
        double bubble = pipe - m * (tf[k] + tb[k]);
        roots = roots > bubble ? roots - (bubble > 0 ? bubble : 0) : 0;
      }
      opt = osh[k] / share + roots;
      if (ms->sh_spread && p->zero == 0 && D > 1) /* the directions all-gathered, then applied */
        opt += cost_coll(hw, "all_gather", D, T, prm[k] * 4, NULL) +
               cost_membound(hw, 3 * prm[k] * 4, 2 * prm[k]);
    }
    if (k == 0) {
      out->t_reduce = red;
      out->t_opt = opt;
    }
    /* 16-bit plans: the weights' copies, cast once per step (read fp32,
     * write 16-bit) and kept for the step; ZeRO-3 casts per use instead */
    double wcopy = p->zero == 3 && D > 1 ? 0 : prm[k] * ms->wcopy_frac;
    /* ZeRO-3 under bf16: the 16-bit shards of the weights it gathers so */
    double shard16 = p->zero == 3 && g16 ? prm[k] * ms->half_frac * 2 / D : 0;
    double cast = wcopy > 0 ? cost_membound(hw, wcopy / (shm ? D : 1) * (ms->param_elt + 2), wcopy) : 0;
    if (red + opt + cast > tail) tail = red + opt + cast;
    if (sent[k] > bytes_sent) bytes_sent = sent[k];
    /* memory: parameters, gradients, optimizer state (ZeRO shards them over
     * the data ranks), and the microbatches in flight */
    double zp = (p->zero >= 3 || shm) && D > 1 ? D : 1, zg = p->zero >= 2 && D > 1 ? D : 1,
           zo = p->zero >= 1 && D > 1 ? D : 1;
    double ostate = prm[k] * ms->param_elt * ms->opt_states / zo;
    if (ms->owner_exact && t == 1 && q == 1 && v == 1 && half[k] == 0) {
      /* Shampoo, Adafactor: whole tensors on their ZeRO owners (padding
       * included), as the memory plan lays them out */
      double ob = owner_state_bytes(ms, k == 0 ? &ms->pre : NULL, n[k], k == pp - 1 ? &ms->post : NULL,
                                    pp > 1, p->zero >= 1 ? D : 1, p->zero);
      if (ob >= 0) ostate = ob;
    }
    /* masters sharded: the 16-bit copies whole and their shard, the fp32
     * copies of the rest whole */
    double half = prm[k] * ms->half_frac;
    double copies = shm ? half * 2 * (1 + 1.0 / D) + (prm[k] - half) * ms->param_elt + (wcopy - half) * 2
                        : wcopy * 2 + shard16;
    /* ZeRO-3: the weights it gathers whole (with their 16-bit copy under
     * bf16) for the layer at work and the next, prefetched, or the
     * embedding's and the head's (the memory plan's transient buffers,
     * with the activations) */
    double z3 = 0;
    if (p->zero >= 3 && D > 1) {
      double ge = ms->param_elt + (ms->elt == 2 ? 2 : 0), emb = k == 0 ? pre->params : 0;
      if (k == pp - 1 && post->params > emb) emb = post->params;
      double two = 2 * lay_at[k]->params;
      z3 = (two > emb ? two : emb) * ge;
    }
    double mem = prm[k] * ms->param_elt * (1 / zp + 1 / zg) + ostate + copies + z3;
    double inflight = 1;
    if (pp > 1) {
      if (v > 1) /* (Megatron's count, where no schedule could be built) */
        inflight = (2.0 * (pp - k - 1) + (v - 1) * pp + 1) / v;
      else
        inflight = stash_slots(p->schedule, pp, m, 1, k, 0);
      if (inflight > m) inflight = m;
    }
    /* the microbatches in flight (interleaved: each chunk's slots, from the
     * schedule), plus one layer's working set during its backward */
    double held = v > 1 && hold[k] >= 0 ? hold[k] : inflight * (act[k] + (v > 1 ? mbytes : 0));
    out->mem_kind[k][0] = prm[k] * ms->param_elt / zp + copies;   /* with their copies */
    out->mem_kind[k][1] = prm[k] * ms->param_elt / zg;
    out->mem_kind[k][2] = ostate;
    double head = k == pp - 1 ? post->act : 0;
    /* tp2d: each microbatch the last stage holds also keeps the head's
     * block of the vocabulary with all the channels (the fp32 table's,
     * gathered over a grid axis) for its backward, and in a pipeline's
     * stash slot, which the backward cannot reuse, its gradient comes
     * beside it */
    if (k == pp - 1 && q > 1 && ms->post.saved_vocab > 0) {
      double w = (double)ms->vocab * ms->hidden / q * 4;
      int sl = v > 1 ? stash_slots(p->schedule, pp, m, v, k, v - 1) : (int)inflight;
      held += (sl > 0 ? sl : 1) * w;
      if (S > 1) head += w;
    }
    out->mem_kind[k][3] = held + lay_at[k]->act + head + z3;
    mem += held + lay_at[k]->act + head;
    out->mem_stage[k] = mem;
    if (mem > peak) peak = mem;
  }
  out->nstages = pp;
  out->step_s = pipe + tail;
  out->t_bubble = pipe - m * (tf[0] + tb[0]);
  double tokens = (double)ms->batch * ms->seq;
  out->tokens_per_s = tokens / out->step_s;
  double mf = explore_model_flops(ms, false);
  out->tflops_per_device = mf / out->step_s / me->ndev / 1e12;
  out->mfu = mf / out->step_s / me->ndev / hw->peak;
  out->peak_mem = peak;
  out->bytes_per_rank = bytes_sent;
  (void)busy;
  plan_str(&pl, out->spec, sizeof out->spec);
  out->plan = pl;
  out->feasible = true;
  if (peak > me->mem_bytes) {
    int worst = 0;
    for (int k = 0; k < pp; k++)
      if (out->mem_stage[k] > out->mem_stage[worst]) worst = k;
    out->feasible = false;
    snprintf(out->reason, sizeof out->reason, "%s",
             explore_mem_reason(worst, out->mem_stage[worst], (double)me->mem_bytes));
  }
}

const char *explore_mem_reason(int stage, double need, double have) {
  double lo = need < have ? need : have;
  double u = lo >= 1e9 ? 1e9 : lo >= 1e6 ? 1e6 : 1e3;
  const char *un = u == 1e9 ? "GB" : u == 1e6 ? "MB" : "kB";
  int dec = need / u >= 100 && have / u >= 100 ? 0 : 1;
  /* one decimal, more where they would print alike */
  while (dec < 4 && (int64_t)(need / u * pow(10, dec) + 0.5) == (int64_t)(have / u * pow(10, dec) + 0.5)) dec++;
  return arena_printf("stage %d needs %.*f %s > %.*f %s", stage, dec, need / u, un, dec, have / u, un);
}

/* ---- the search ---- */

static int cmp_eval(const void *a, const void *b) {
  const PlanEval *x = a, *y = b;
  if (x->feasible != y->feasible) return x->feasible ? -1 : 1;
  return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}

static void keep(PlanEval *out, int cap, int *n, const PlanEval *e) {
  if (*n < cap) {
    out[(*n)++] = *e;
  } else if (cmp_eval(e, &out[cap - 1]) < 0) {
    out[cap - 1] = *e;
  } else {
    return;
  }
  /* insertion into the sorted list */
  for (int i = *n - 1; i > 0 && cmp_eval(&out[i], &out[i - 1]) < 0; i--) {
    PlanEval t = out[i];
    out[i] = out[i - 1];
    out[i - 1] = t;
  }
}

bool explore_recompute_as_megatron(void) {
  const char *e = getenv("SHARDC_RECOMPUTE_AS");
  return e && !strcmp(e, "megatron");
}

static bool pow2(int64_t x) { return x > 0 && !(x & (x - 1)); }

/* Why explore_search found no plan: the first rule of its space that the
 * mesh, the model or the fixed keys break, in words. */
const char *explore_no_plan_reason(const ModelShape *ms, const Mesh *me, const Plan *fx) {
  unsigned given = fx ? fx->given : 0;
  int N = me->ndev;
  if ((given & PLAN_RECOMPUTE) && fx->recompute == RECOMPUTE_AUTO)
    return "recompute=auto is the compiler's choice per layer at compile time, not a key the search "
           "tries: give none, selective or full, or leave recompute out";
  if ((given & PLAN_RECOMPUTE) && fx->nstage_recompute && (!(given & PLAN_PP) || fx->pp != fx->nstage_recompute))
    return arena_printf("recompute with %d per-stage policies needs pp=%d (one policy a pipeline "
                        "stage)%s", fx->nstage_recompute, fx->nstage_recompute,
                        given & PLAN_PP ? arena_printf(", not pp=%d", fx->pp) : ": give pp too");
  if ((given & PLAN_PP) && fx->nstage_layers) {
    int want = plan_stage_hundredths(fx);
    if (want != 100 * ms->layers)
      return arena_printf("pp=%d: the stage sizes add up to %g layers, but the model has %d",
                          fx->pp, want / 100.0, ms->layers);
    /* pp sizes, or pp x V for interleaved:V (V from the count where the
     * schedule is not given) */
    int per = fx->nstage_layers / fx->pp;
    if (fx->nstage_layers != fx->pp &&
        (((given & PLAN_SCHED) && fx->schedule != SCHED_INTERLEAVED) ||
         (!(given & PLAN_SCHED) && per != 2 && per != 4)))
      return arena_printf("pp=%d with %d stage sizes: the search tries interleaved:2 and 4 (%d "
                          "or %d sizes) and the other schedules (%d)",
                          fx->pp, fx->nstage_layers, 2 * fx->pp, 4 * fx->pp, fx->pp);
    if ((given & PLAN_SCHED) && fx->schedule == SCHED_INTERLEAVED &&
        fx->nstage_layers != fx->pp * fx->vchunks)
      return arena_printf("pp=%d with schedule=interleaved:%d takes %d stage sizes (one a chunk), "
                          "not %d", fx->pp, fx->vchunks, fx->pp * fx->vchunks, fx->nstage_layers);
  }
  int t = given & PLAN_TP ? fx->tp : 1, q = given & PLAN_TP2D ? fx->tp2d : 1;
  if (!ms->layers && (t * q > 1 || ((given & PLAN_PP) && fx->pp > 1) ||
                      ((given & PLAN_SP) && fx->sp_kind != SP_NONE)))
    return "the model has no repeated layers (a transformer block's), over which the search models "
           "tensor, sequence and pipeline parallelism: only data parallelism is searched for it; "
           "compile the plan to see its figures (--emit=plan)";
  if ((given & PLAN_TP) && (!pow2(t) || t > 64))
    return arena_printf("the search tries tp = 1, 2, 4, ..., 64; tp=%d is not one of them", t);
  if ((given & PLAN_TP2D) && (!pow2(q) || q > 8))
    return arena_printf("the search tries tp2d = 2x2, 4x4, 8x8; tp2d=%dx%d is not one of them", q, q);
  if (t > 1 && q > 1) return "tp and tp2d do not combine";
  int sh = q > 1 ? q : t;
  if (sh > 1 && ms->heads && ms->heads % sh)
    return arena_printf("%s=%d does not divide the model's %" PRId64 " attention heads",
                        q > 1 ? "tp2d" : "tp", sh, ms->heads);
  if (sh > 1 && ms->kv_heads && ms->kv_heads % sh)
    return arena_printf("%s=%d does not divide the model's %" PRId64 " key/value heads",
                        q > 1 ? "tp2d" : "tp", sh, ms->kv_heads);
  if (sh > 1 && ms->hidden % sh)
    return arena_printf("%s=%d does not divide the model's hidden size %" PRId64,
                        q > 1 ? "tp2d" : "tp", sh, ms->hidden);
  if (t * q * q > 1 && ms->vocab && ms->vocab % (t * q * q))
    return arena_printf("the %d tensor-parallel ranks do not divide the vocabulary of %" PRId64,
                        t * q * q, ms->vocab);
  int r = (given & PLAN_SP) && fx->sp_kind == SP_RING && fx->sp > 1 ? fx->sp : 1;
  if (r > 1 && (!pow2(r) || r > 16))
    return arena_printf("the search tries sp=ring:2 .. ring:16 in powers of two; ring:%d is not one", r);
  if (r > 1 && ms->seq % r)
    return arena_printf("sp=ring:%d does not divide the sequence of %" PRId64 " tokens", r, ms->seq);
  if ((given & PLAN_SP) && fx->sp_kind == SP_MEGATRON && (given & PLAN_TP) && t < 2)
    return "sp=megatron needs tp of 2 or more";
  int pp = given & PLAN_PP ? fx->pp : 1;
  if ((given & PLAN_PP) && (pp > PLAN_MAXSTAGES || pp > ms->layers + 2))
    return arena_printf("pp=%d is more stages than the model's %d layers allow", pp, ms->layers);
  int dp = given & PLAN_DP ? fx->dp : 1;
  int64_t used = (int64_t)dp * t * q * q * r * pp;
  if (N % used)
    return arena_printf("the keys given use %" PRId64 " devices (dp*tp*tp2d^2*sp*pp), which does not "
                        "divide the mesh's %d", used, N);
  if (ms->fixed_b && ms->batch % ms->fixed_b)
    return arena_printf("the train block's microbatch %d does not divide its batch of %" PRId64
                        " sequences", ms->fixed_b, ms->batch);
  if ((given & PLAN_DP) && ms->batch % dp)
    return arena_printf("dp=%d does not divide the batch of %" PRId64 " sequences", dp, ms->batch);
  if ((given & PLAN_MB) && ms->batch % fx->mb)
    return arena_printf("mb=%d does not divide the batch of %" PRId64 " sequences", fx->mb, ms->batch);
  if ((given & PLAN_SCHED) && fx->schedule == SCHED_INTERLEAVED)
    return arena_printf("interleaved:%d needs at least pp x %d layers (the model has %d), and a "
                        "number of microbatches that pp divides", fx->vchunks, fx->vchunks,
                        ms->layers);
  return arena_printf("no split of the mesh's %d devices into dp x tp x tp2d^2 x sp x pp (tp and "
                      "tp2d dividing the %" PRId64 " heads and the hidden size %" PRId64
                      ", pp at most %d stages, dp dividing the batch of %" PRId64
                      " sequences) matches", N, ms->heads, ms->hidden, ms->layers + 2, ms->batch);
}

int explore_search(const ModelShape *ms, const HwModel *hw, const Mesh *me, ExploreOpts *o,
                   PlanEval *out, int cap, long *evaluated) {
  memo_check(ms, hw);
  int N = me->ndev, n = 0;
  long count = 0;
  const Plan *fx = o->fixed;
  unsigned given = fx ? fx->given : 0;
  /* explicit stage sizes (pp=N:a+b+...) must cover the layers, and take
   * no interleaving (passes/stage.c refuses both) */
  if (fx && (given & PLAN_PP) && fx->nstage_layers && plan_stage_hundredths(fx) != 100 * ms->layers) {
    if (evaluated) *evaluated = 0;
    return 0;
  }
  PlanEval *e = malloc(sizeof *e);
  for (int t = 1; t <= N && t <= 64; t *= 2) {
    if (given & PLAN_TP && t != fx->tp) continue;
    for (int q = 1; q <= 8; q++) {
      if (q > 1 && (q & (q - 1))) continue;
      if (given & PLAN_TP2D ? q != fx->tp2d : 0) continue;
      if (q > 1 && t > 1) continue;
      int T = t * q * q;
      if (N % T) continue;
      /* without repeated layers only data parallelism is modelled */
      if (!ms->layers && T > 1) continue;
      /* divisibility: heads, hidden, vocab over the tensor-parallel ranks */
      if (ms->heads && ms->heads % (q > 1 ? q : t)) continue;
      if (ms->kv_heads && ms->kv_heads % (q > 1 ? q : t)) continue;
      if (ms->hidden % (q > 1 ? q : t)) continue;
      if (ms->vocab && ms->vocab % T) continue;
      for (int spk = 0; spk < 3; spk++) {
        if (given & PLAN_SP && spk != (int)fx->sp_kind) continue;
        if (spk == SP_MEGATRON && (t < 2 || q > 1)) continue;
        if (!ms->layers && spk != SP_NONE) continue;
        for (int r = 1; r <= (spk == SP_RING ? 16 : 1); r *= 2) {
          if (spk == SP_RING && r < 2) continue;
          if (spk == SP_RING && (given & PLAN_SP) && fx->sp && r != fx->sp) continue;
          if (N % (T * r) || ms->seq % r) continue;
          for (int pp = 1; pp <= N / (T * r) && pp <= PLAN_MAXSTAGES; pp++) {
            if ((N / (T * r)) % pp) continue;
            if (given & PLAN_PP && pp != fx->pp) continue;
            if (pp > ms->layers + 2 || (pp > 1 && !ms->layers)) break;
            int dp = N / (T * r * pp);
            if (given & PLAN_DP && dp != fx->dp) continue;
            if (ms->batch % dp) continue;
            int per_dp = (int)(ms->batch / dp);
            for (int b = 1; b <= per_dp && b <= (ms->fixed_b > 64 ? ms->fixed_b : 64); b = b < ms->fixed_b && 2 * b > ms->fixed_b ? ms->fixed_b : 2 * b) {
              if (per_dp % b) continue;
              if (ms->fixed_b && b != ms->fixed_b) continue;
              int m = per_dp / b;
              if (given & PLAN_MB && m != fx->mb) continue;
              for (int sc = 0; sc < 3; sc++) {
                if (pp == 1 && sc != SCHED_1F1B) continue;
                if (given & PLAN_SCHED && sc != (int)fx->schedule) continue;
                for (int v = sc == SCHED_INTERLEAVED ? 2 : 1; v <= (sc == SCHED_INTERLEAVED ? 4 : 1); v *= 2) {
                  /* (a chunk may hold part of a layer where the sizes are given) */
                  bool sized = fx && (given & PLAN_PP) && fx->nstage_layers == pp * v;
                  if (sc == SCHED_INTERLEAVED && (m % pp || (ms->layers < pp * v && !sized)))
                    continue;
                  if ((given & PLAN_SCHED) && sc == SCHED_INTERLEAVED && v != fx->vchunks) continue;
                  /* fixed stage sizes: pp of them, or one per chunk */
                  if (fx && (given & PLAN_PP) && fx->nstage_layers && fx->nstage_layers != pp * v)
                    continue;
                  for (int z = 0; z <= 3; z++) {
                    if (z > 0 && dp * r < 2) continue;
                    if (given & PLAN_ZERO && z != fx->zero) continue;
                    /* each uniform policy's memory per stage, for the
                     * per-stage policy below */
                    double mem_rc[3][PLAN_MAXSTAGES];
                    bool have_rc[3] = {false, false, false};
                    bool per_stage_fixed = (given & PLAN_RECOMPUTE) && fx->nstage_recompute;
                    if (per_stage_fixed && pp != fx->nstage_recompute) continue;
                    /* rc 0..2: none, selective, full on every stage; 3:
                     * each stage the least recompute its memory allows
                     * (pipelines only: the first stages hold the most
                     * microbatches), or the fixed per-stage list */
                    for (int rc = 0; rc < 4; rc++) {
                      if (rc < 3 && per_stage_fixed) continue;
                      if (rc < 3 && given & PLAN_RECOMPUTE && rc != (int)fx->recompute) continue;
                      if (rc == 3 && !per_stage_fixed && ((given & PLAN_RECOMPUTE) || pp < 2)) continue;
                      Plan p;
                      plan_default(&p);
                      p.dp = dp;
                      p.tp = t;
                      p.tp2d = q;
                      p.sp_kind = (SpKind)spk;
                      p.sp = r;
                      p.pp = pp;
                      p.schedule = (Schedule)sc;
                      p.vchunks = v;
                      p.mb = m;
                      p.zero = z;
                      p.recompute = (Recompute)(rc < 3 ? rc : 0);
                      if (rc == 3 && per_stage_fixed) {
                        p.nstage_recompute = fx->nstage_recompute;
                        memcpy(p.stage_recompute, fx->stage_recompute, sizeof p.stage_recompute);
                        p.recompute = fx->recompute;
                      } else if (rc == 3) {
                        /* the weakest policy under which each stage fits,
                         * from the uniform plans' stages (all three
                         * evaluated); only where that mixes policies */
                        if (!have_rc[0] || !have_rc[1] || !have_rc[2]) continue;
                        int lo = 3, hi = -1;
                        for (int k = 0; k < pp; k++) {
                          int r = 0;
                          while (r < 2 && mem_rc[r][k] > me->mem_bytes) r++;
                          p.stage_recompute[k] = (Recompute)r;
                          if (r < lo) lo = r;
                          if (r > hi) hi = r;
                        }
                        if (lo == hi) continue;
                        p.nstage_recompute = pp;
                        p.recompute = (Recompute)hi;
                      }
                      if (fx && fx->nstage_layers && pp == fx->pp) {
                        p.nstage_layers = fx->nstage_layers;
                        memcpy(p.stage_frac, fx->stage_frac, sizeof p.stage_frac);
                        memcpy(p.stage_layers, fx->stage_layers, sizeof p.stage_layers);
                      }
                      eval_plan(ms, hw, me, &p, b, e);
                      if (rc < 3 && e->nstages == pp) {
                        have_rc[rc] = true;
                        for (int k = 0; k < pp; k++) mem_rc[rc][k] = e->mem_stage[k];
                      }
                      count++;
                      if (o->points && o->npoints < o->cap_points)
                        o->points[o->npoints++] = (ExplorePoint){(float)e->step_s, (float)e->peak_mem, e->feasible};
                      if (e->spec[0]) keep(out, cap, &n, e);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  free(e);
  if (evaluated) *evaluated = count;
  return n;
}
