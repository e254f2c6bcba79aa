/* zero.c — data-parallel gradient buckets and ZeRO-2/3 (Rajbhandari et al.
 * 2020), as IR nodes in the backward (and under ZeRO-3 the forward).
 *
 * The parameters are grouped into buckets, one per layer ("blocks.3", and
 * "embed", "pos", ... for the rest); under sp=megatron the gradients that
 * are partial sums over tp (or the 2D grid's rows or columns) go to a
 * bucket of their own, one per set of axes.  A bucket's
 * gradients are one value (Bucket.grads) of which each parameter's gradient
 * is a view, so a whole bucket is reduced in one collective right after the
 * backward node that completes it:
 *
 *   zero=0  grad_all_reduce: the bucket (persistent, as today's gradients)
 *           summed over dp, issued without blocking in the last microbatch
 *           and waited for before the optimizer (llm.c / PyTorch DDP).
 *   zero=1  grad_reduce_scatter of the persistent bucket into the rank's
 *           gradient shard, issued without blocking in the last microbatch
 *           (waited for before the optimizer); parameters and optimizer
 *           state as zero=2.
 *   zero=2  grad_reduce_scatter: the bucket is transient (born at its first
 *           gradient op, dead after the collective); each rank accumulates
 *           the sum of its 1/dp chunk into a persistent shard (Bucket.gshard)
 *           every microbatch.  Parameters stay whole, in the flat bucket
 *           layout; the optimizer updates the rank's chunks and all-gathers
 *           each bucket.
 *   zero=3  as zero=2, and the parameters are only the rank's chunks
 *           (Bucket.pshard): all_gather into a transient copy of the bucket
 *           right before its first use in the forward, and again before its
 *           first use in the backward; the forward and backward nodes read
 *           views of those copies, so the plan frees each after its last use.
 *
 * ZeRO-1/2 under bf16 (zero_shards_masters; as DeepSpeed's and Megatron's
 * distributed optimizer keep them): the fp32 masters are only the rank's
 * chunks too, and what the step reads whole is gathered once per step, in
 * the cast block, before the first microbatch (masters_sharded): a bucket
 * of parameters read only through 16-bit copies (a matmul's weights) has
 * its shard cast to 16 bits and all-gathered into one persistent 16-bit
 * copy of the bucket, of which their copies are views (half the bytes of
 * an fp32 gather, and no whole fp32 master: 4 bytes a parameter less);
 * the others (biases, norm weights, an embedding table) are a bucket of
 * their own ("blocks.3 (fp32)"), gathered in fp32 into a persistent copy.
 * The optimizer updates the shards; no all-gather follows it.  The values
 * are those of the fp32 gather: the cast rounds each element alike.
 * ZeRO-3 under bf16 (zero_gathers16) splits its buckets the same way: a
 * bucket of parameters that the schedule reads only through casts to 16
 * bits (precision.c casts a gathered parameter before each kernel) has its
 * shard cast once a step (the cast block) and gathered in 16 bits before
 * each use; the casts go, their outputs views of the gathered copy.
 *
 * With Shampoo or Adafactor (zero >= 1) a bucket is laid out by owner
 * (owner_layout): each tensor whole in one rank's chunk, so its owner's
 * gradient shard holds its whole reduced gradient, and only the owner keeps
 * its state (owner_state).
 *
 * Under an interleaved schedule (zero >= 1) a pipeline rank's chunks share
 * one flat layout and one shard array: each chunk's buckets continue where
 * the rank's previous chunk's end (zero_rank_buckets), so the rank's state
 * is laid out as one model's would be and the step sees one bucket table.
 * (zero=0: the chunks' gradients are all-reduced after the schedule.)
 *
 * The layout (offsets of parameters, shards and optimizer state) is placed
 * by zero_memplan, called from memplan.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "runtime/rt_optim.h"

/* "blocks.3.attn.qkv.weight" -> "blocks.3"; "embed.weight" -> "embed". */
const char *zero_bucket_key(const char *name) {
  const char *dot = strchr(name, '.');
  if (!dot) return name;
  const char *p = dot + 1;
  if (*p >= '0' && *p <= '9') {
    while (*p >= '0' && *p <= '9') p++;
    return arena_printf("%.*s", (int)(p - name), name);
  }
  return arena_printf("%.*s", (int)(dot - name), name);
}

/* The buckets of pipeline rank r (of the stage graphs, or of the model
 * without a pipeline): under an interleaved schedule its chunks' (virtual
 * stages c·pp + r) in chunk order, which share one flat layout and one
 * shard array under ZeRO; else its stage's. */
const PtrVec *zero_rank_buckets(const Module *m, int r) {
  if (m->nstages <= 1) return &m->graph->buckets;
  int pp = m->train.plan.pp;
  if (m->nstages == pp) return &m->stages[r]->buckets;
  PtrVec *bl = arena_alloc(sizeof *bl);
  for (int s = r; s < m->nstages; s += pp)
    for (int k = 0; k < m->stages[s]->buckets.len; k++) vec_push(bl, m->stages[s]->buckets.data[k]);
  return bl;
}

static Value *root(Value *v) {
  while (v->alias) v = v->alias;
  return v;
}

static Bucket *bucket_of(Graph *g, const char *key, uint32_t partial) {
  /* newest first: a layer's parameters come together (buckets are unique
   * by key and partial, so the order finds the same one) */
  for (int i = g->buckets.len - 1; i >= 0; i--) {
    Bucket *b = g->buckets.data[i];
    if (!strcmp(b->name, key) && b->partial == partial) return b;
  }
  Bucket *b = arena_alloc(sizeof *b);
  b->name = key;
  b->tp_partial = partial != 0;
  b->partial = partial;
  vec_push(&g->buckets, b);
  return b;
}

/* A view of p inside the gathered copy `whole` of its bucket, at byte off. */
static Value *param_view(Graph *g, Value *p, Value *whole, int64_t off) {
  Value *v = ir_value(g, ROLE_PARAM, p->shape, p->dtype, p->loc);
  int id = v->id;
  *v = *p;
  v->id = id;
  v->def = NULL;
  v->grad = NULL;
  v->nuses = 0;
  v->alias = whole;
  v->view_off = off;
  return v;
}

/* The data-parallel group the buckets are reduced and sharded over: dp, or
 * dp x sp under ring attention (every rank of it holds whole parameters). */
static int zaxis = AX_DP;

static Node *comm_node(OpKind op, Value *in, Value *out, int dp, const Bucket *b, bool bwd) {
  Node *n = arena_alloc(sizeof *n);
  n->op = op;
  n->in[0] = in;
  n->nin = 1;
  n->out = n->outs[0] = out;
  n->nout = 1;
  n->bwd = bwd;
  n->a.i[0] = 0;
  n->a.i[1] = dp;
  n->a.i[2] = zaxis;
  n->a.ni = 3;
  n->loc = ((Value *)b->params.data[0])->loc;
  n->scope = b->name;
  if (!bwd) out->def = n;
  return n;
}

static const int64_t *owners_sz;
static int by_owners_size(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b;
  if (owners_sz[i] != owners_sz[j]) return owners_sz[i] > owners_sz[j] ? -1 : 1;
  return i < j ? -1 : i > j;
}

int64_t zero_owners(const int64_t *sz, int n, int dp, int64_t *owned, int *owner) {
  int64_t *fill = arena_alloc(sizeof(int64_t) * (size_t)dp), chunk = 16;
  int *ord = arena_alloc(sizeof(int) * (size_t)(n + 1));
  for (int j = 0; j < n; j++) ord[j] = j;
  owners_sz = sz;   /* by size, largest first, then in order */
  qsort(ord, (size_t)n, sizeof *ord, by_owners_size);
  for (int k = 0; k < n; k++) {
    int j = ord[k], best = 0;
    for (int r = 1; r < dp; r++)
      if (fill[r] < fill[best] || (fill[r] == fill[best] && owned[r] < owned[best])) best = r;
    owner[j] = best;
    fill[best] += sz[j];
  }
  for (int r = 0; r < dp; r++) {
    if (fill[r] > chunk) chunk = fill[r];
    owned[r] += fill[r];
  }
  return chunk;
}

/* ZeRO with Shampoo or Adafactor: a parameter's blocks (and Adafactor's
 * row and column statistics) need its whole reduced gradient, so each
 * parameter lies whole in one rank's chunk of its bucket, and that rank
 * owns it (updates it and keeps its optimizer state): zero_owners picks
 * the owners; within a chunk in parameter order.  The chunk is the fullest
 * rank's, the others padded to it.  Returns the bucket's padded size, dp
 * chunks. */
static int64_t owner_layout(Bucket *b, int dp, int64_t *owned) {
  int np = b->params.len;
  int64_t *sz = arena_alloc(sizeof(int64_t) * (size_t)np);
  int64_t *fill = arena_alloc(sizeof(int64_t) * (size_t)dp);
  b->owner = arena_alloc(sizeof(int) * (size_t)np);
  for (int j = 0; j < np; j++) sz[j] = (ir_numel(&((Value *)b->params.data[j])->shape) + 15) / 16 * 16;
  int64_t chunk = zero_owners(sz, np, dp, owned, b->owner);
  for (int j = 0; j < np; j++) {
    b->pos[j] = b->owner[j] * chunk + fill[b->owner[j]];
    fill[b->owner[j]] += sz[j];
  }
  return chunk * dp;
}

static int by_size_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x > y ? -1 : x < y;
}

/* The elements of a bucket of the n tensors of sizes s (16-rounded;
 * sorted here) laid out by owner_layout over dp ranks: dp times the
 * fullest chunk.  (The fills' multiset, and so the fullest, does not
 * depend on how ties among equally full chunks are broken: a heap of the
 * fills, h (dp of them), will do.) */
static int64_t owner_padded(int64_t *s, int n, int dp, int64_t *h) {
  int64_t most = 16;
  memset(h, 0, sizeof(int64_t) * (size_t)dp);   /* a min-heap */
  qsort(s, (size_t)n, sizeof *s, by_size_desc);   /* largest first */
  for (int k = 0; k < n; k++) {
    int64_t v = h[0] + s[k];
    if (v > most) most = v;
    int i = 0;   /* the least full chunk takes it: sift down */
    for (;;) {
      int c = 2 * i + 1;
      if (c >= dp) break;
      if (c + 1 < dp && h[c + 1] < h[c]) c++;
      if (h[c] >= v) break;
      h[i] = h[c], i = c;
    }
    h[i] = v;
  }
  return most * dp;
}

static const int *group_cls;
static int by_cls_index(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b;
  if (group_cls[i] != group_cls[j]) return group_cls[i] < group_cls[j] ? -1 : 1;
  return i < j ? -1 : i > j;
}

/* group[k] := the first bucket of bucket k's group (of at most G): the
 * buckets of a kind (cls >= 0) in order, cut into ceil(n / G) groups of as
 * even counts as may be; cls < 0: alone. */
void zero_owner_groups(const int *cls, int nb, int G, int *group) {
  int *ord = arena_alloc(sizeof(int) * (size_t)(nb + 1));
  for (int k = 0; k < nb; k++) ord[k] = k;
  group_cls = cls;
  qsort(ord, (size_t)nb, sizeof *ord, by_cls_index);
  for (int a = 0; a < nb;) {
    int e = a + 1;
    if (cls[ord[a]] >= 0)
      while (e < nb && cls[ord[e]] == cls[ord[a]]) e++;
    int n = e - a, K = (n + G - 1) / G;
    for (int i = 0; i < K; i++) {
      int lo = (int)((int64_t)i * n / K), hi = (int)((int64_t)(i + 1) * n / K);
      for (int q = lo; q < hi; q++) group[ord[a + q]] = ord[a + lo];
    }
    a = e;
  }
}

int zero_owner_group(const int64_t *sz, const int *nt, const int *cls, int nb, int dp) {
  const char *e = getenv("SHARDC_ZERO_GROUP");
  if (e && !strcmp(e, "layer")) return 1;   /* a bucket a layer, as before the merging */
  int64_t total = 0, ntens = 0;
  for (int k = 0; k < nb; k++) ntens += nt[k];
  for (int i = 0; i < ntens; i++) total += sz[i];
  int64_t *first = arena_alloc(sizeof(int64_t) * (size_t)(nb + 1));
  int64_t *gs = arena_alloc(sizeof(int64_t) * (size_t)(ntens + 1));
  int *group = arena_alloc(sizeof(int) * (size_t)(nb + 1));
  int *next = arena_alloc(sizeof(int) * (size_t)(nb + 1)), *tail = arena_alloc(sizeof(int) * (size_t)(nb + 1));
  int64_t *heap = arena_alloc(sizeof(int64_t) * (size_t)dp);
  for (int k = 0, at = 0; k < nb; k++) first[k] = at, at += nt[k];
  int best = 1;
  int64_t best_pad = -1;
  /* G = 1, 2, ..., 64, then by halves (96, 144, ...), up to the buckets
   * or 2 dp + 2 (a model of thousands of layers on thousands of ranks
   * tries some 80) */
  for (int G = 1; G <= nb && G <= 2 * dp + 2; G = G < 64 ? G + 1 : G + G / 2) {
    zero_owner_groups(cls, nb, G, group);
    for (int k = 0; k < nb; k++) next[k] = -1, tail[k] = k;
    for (int k = 0; k < nb; k++)   /* each group's members in order, a list from its first */
      if (group[k] != k) next[tail[group[k]]] = k, tail[group[k]] = k;
    int64_t pad = 0;
    for (int k = 0; k < nb; k++) {
      if (group[k] != k) continue;
      int n = 0;
      for (int e = k; e >= 0; e = next[e])
        for (int j = 0; j < nt[e]; j++) gs[n++] = sz[first[e] + j];
      pad += owner_padded(gs, n, dp, heap);
    }
    if (best_pad < 0 || pad < best_pad) best = G, best_pad = pad;
    if (pad * 100 <= total * (100 + ZERO_GROUP_PAD_PCT)) break;
  }
  return best;
}

/* ZeRO-1 with Shampoo or Adafactor: owner_layout pads every chunk of a
 * bucket to its fullest, and a layer's few large tensors fill dp chunks
 * unevenly (a GPT layer's 3d², d², 4d² and 4d² weights over 4 ranks: +33%;
 * over 32 ranks, most chunks hold nothing: +900%), in the gradient
 * buckets, the shards and every byte the reduce-scatter and the parameter
 * all-gather send.  The buckets of a kind (the same partial axes, the same
 * 16-bit gathers) are merged in order into groups of at most G, as even as
 * may be (the smallest G whose padding is at most ZERO_GROUP_PAD_PCT
 * percent, or the least padded), so that the owners balance over more
 * tensors; a group stands where its first bucket stood; a pipeline's tied
 * embedding stays alone.  ZeRO-1's gradient buckets are persistent,
 * so merging them costs no memory; the cost is overlap: a group's
 * reduce-scatter waits for the backward of its first layer.  (ZeRO-2 and 3
 * hold a bucket's gradients or gathered parameters transiently: merged,
 * they would hold G layers' at once; not merged.) */
static void group_owner_buckets(Graph *g, int dp) {
  int nb = g->buckets.len, ntens = 0;
  if (nb < 2) return;
  for (int k = 0; k < nb; k++) ntens += ((Bucket *)g->buckets.data[k])->params.len;
  int64_t *sz = arena_alloc(sizeof(int64_t) * (size_t)(ntens + 1));
  int *nt = arena_alloc(sizeof(int) * (size_t)nb), *cls = arena_alloc(sizeof(int) * (size_t)nb);
  int *group = arena_alloc(sizeof(int) * (size_t)nb);
  for (int k = 0, at = 0; k < nb; k++) {
    Bucket *b = g->buckets.data[k];
    nt[k] = b->params.len;
    for (int j = 0; j < b->params.len; j++)
      sz[at++] = (ir_numel(&((Value *)b->params.data[j])->shape) + 15) / 16 * 16;
    cls[k] = b->tied ? -1 : (int)(b->partial * 2 + b->half);
  }
  int G = zero_owner_group(sz, nt, cls, nb, dp);
  if (G == 1) return;
  zero_owner_groups(cls, nb, G, group);
  PtrVec out = {0};
  int *last = arena_alloc(sizeof(int) * (size_t)nb);
  for (int k = 0; k < nb; k++) {
    Bucket *b = g->buckets.data[group[k]];
    if (group[k] == k) {
      vec_push(&out, b);
      last[k] = k;
      continue;
    }
    Bucket *x = g->buckets.data[k];
    for (int j = 0; j < x->params.len; j++) vec_push(&b->params, x->params.data[j]);
    last[group[k]] = k;
  }
  for (int k = 0; k < nb; k++)
    if (group[k] == k && last[k] > k) {
      Bucket *b = g->buckets.data[k];
      b->name = arena_printf("%s..%s", b->name, ((Bucket *)g->buckets.data[last[k]])->name);
    }
  g->buckets = out;
}

/* The ranks that share the ZeRO shards: dp, or dp x sp under ring
 * attention (its sequence shards share them). */
static int shard_ranks(const Plan *pl) {
  return pl->dp * (pl->sp_kind == SP_RING && pl->sp > 1 ? pl->sp : 1);
}

static bool half_precision(const Module *m) {
  return m->train.precision == DT_BF16 || m->train.precision == DT_F16;
}

bool zero_gathers_params(const Module *m) {
  return m->train.plan.zero == 3 && shard_ranks(&m->train.plan) > 1;
}

bool zero_masters_whole(void) {
  const char *e = getenv("SHARDC_ZERO_MASTERS");
  return e && !strcmp(e, "whole");
}

bool zero_gathers16(const Module *m) {
  if (zero_masters_whole()) return false;
  return zero_gathers_params(m) && half_precision(m) && !opt_blocked(&m->train.opt);
}

bool zero_rs_blocking(void) {
  const char *e = getenv("SHARDC_ZERO_RS");
  return e && !strcmp(e, "blocking");
}

bool zero_rs_trails(const Module *m) {
  if (zero_rs_blocking()) return false;
  return m->train.plan.zero >= 2 && shard_ranks(&m->train.plan) > 1 && half_precision(m);
}

bool zero_shards_masters(const Module *m) {
  if (zero_masters_whole()) return false;
  const Plan *pl = &m->train.plan;
  return (pl->zero == 1 || pl->zero == 2) && shard_ranks(pl) > 1 && half_precision(m) &&
         !opt_blocked(&m->train.opt);
}

/* The step's cast of p into its persistent 16-bit copy (precision.c; a
 * bucket's shard: shard16), or NULL. */
static Node *wcast_of(const Graph *g, const Value *p) {
  for (int c = 0; c < g->wcasts.len; c++)
    if (((Node *)g->wcasts.data[c])->in[0] == p) return g->wcasts.data[c];
  return NULL;
}

/* How the schedule reads each value (by id), for the buckets' split under
 * bf16: NAMED any node names it; NOT16 a node other than a cast of all of
 * it to t16 (precision.c casts a ZeRO-3 parameter before each kernel). */
enum { NAMED = 1, NOT16 = 2 };
static unsigned char *readers(const Graph *g, DType t16) {
  unsigned char *r = arena_alloc((size_t)g->values.len + 1);
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    for (int q = 0; q < n->nin; q++) {
      const Value *x = n->in[q];
      if (!x) continue;
      r[x->id] |= NAMED;
      if (n->op != OP_CAST || n->out->dtype != t16 || ir_numel(&n->out->shape) != ir_numel(&x->shape))
        r[x->id] |= NOT16;
    }
  }
  return r;
}

/* Whether the step reads p only in 16 bits.  ZeRO-1/2 (persistent copies):
 * p has its copy, unpadded (an LM head's padded rows are not a view of a
 * bucket), and no node of the schedule names p itself (the embedding reads
 * its fp32 table, a fused loop an fp32 bias or norm weight).  ZeRO-3: every
 * node that names p is a cast of all of it to 16 bits, and some does. */
static bool read_as16(const Graph *g, const Value *p, const unsigned char *rd, bool persistent) {
  if (!persistent) return rd[p->id] == NAMED;
  Node *w = wcast_of(g, p);
  return w && ir_numel(&w->out->shape) == ir_numel(&p->shape) && !rd[p->id];
}

/* The step's cast of bucket b's fp32 parameter shard into a persistent
 * 16-bit shard (the cast block: g->wcasts), to be all-gathered. */
static Node *shard16(Graph *g, Bucket *b, DType t16) {
  Attrs a = {0};
  a.i[0] = t16;
  a.ni = 1;
  Node *c = ir_add(g, OP_CAST, &b->pshard, 1, &a, b->grads->loc, "", "cast");
  g->nodes.len--;   /* not in the schedule: the step runs it */
  c->id = -1;
  c->scope = b->name;
  c->out->role = ROLE_ACT;
  c->out->name = arena_printf("%s (16-bit shard)", b->name);
  return c;
}

/* The step's all-gather of src (a bucket's shard) into a persistent whole
 * copy of the bucket of type t, named "BUCKET (what)": cast-block work. */
static Node *gathered_copy(Graph *g, Bucket *b, Value *src, DType t, const char *what, int dp) {
  Value *w = ir_value(g, ROLE_ACT, ir_shape(1, &b->numel), t, b->grads->loc);
  w->name = arena_printf("%s (%s)", b->name, what);
  Node *ag = comm_node(OP_ALLGATHER, src, w, dp, b, false);
  ag->id = -1;
  return ag;
}

/* ZeRO-1/2 under bf16 (zero_shards_masters): the buckets' masters as
 * shards (pshard, as ZeRO-3's), and the step's cast block rewritten
 * (g->wcasts): for a bucket of parameters read only as 16-bit copies
 * (half), its shard cast to 16 bits and all-gathered into one 16-bit copy
 * of the bucket, of which the parameters' copies are views; for the others
 * the fp32 shard all-gathered into a whole fp32 copy, of which views
 * replace the parameters in the schedule (and in their own casts, which
 * follow the gathers).  Every output is a persistent copy (memplan places
 * the cast block's outputs after the optimizer state). */
static void masters_sharded(Graph *g, int dp, DType t16) {
  PtrVec wc = {0};
  bool *moved = arena_alloc(sizeof(bool) * (size_t)(g->wcasts.len + 1));
  Node **gathers = arena_alloc(sizeof(Node *) * (size_t)(g->buckets.len + 1));
  int ng = 0;
  int64_t e16 = ir_dtype_size(t16);
  for (int k = 0; k < g->buckets.len; k++) {
    Bucket *b = g->buckets.data[k];
    if (b->half) {
      Node *c = shard16(g, b, t16);
      vec_push(&wc, c);
      Node *ag = gathers[ng++] = gathered_copy(g, b, c->out, t16, "16-bit, gathered", dp);
      Value *w16 = ag->out;
      for (int j = 0; j < b->params.len; j++) {
        Value *p = b->params.data[j];
        for (int q = 0; q < g->wcasts.len; q++) {
          Node *w = g->wcasts.data[q];
          if (w->in[0] != p) continue;
          moved[q] = true;
          w->out->def = NULL;
          w->out->alias = w16;
          w->out->view_off = b->pos[j] * e16;
        }
      }
    } else {
      Value *w32 = (gathers[ng++] = gathered_copy(g, b, b->pshard, DT_F32, "gathered", dp))->out;
      for (int j = 0; j < b->params.len; j++) {
        Value *p = b->params.data[j];
        Value *view = param_view(g, p, w32, b->pos[j] * 4);
        for (int i = 0; i < g->nodes.len; i++) {
          Node *n = g->nodes.data[i];
          for (int q = 0; q < n->nin; q++)
            if (n->in[q] == p) n->in[q] = view;
        }
        for (int q = 0; q < g->wcasts.len; q++)
          if (((Node *)g->wcasts.data[q])->in[0] == p) ((Node *)g->wcasts.data[q])->in[0] = view;
      }
    }
  }
  for (int i = 0; i < ng; i++) vec_push(&wc, gathers[i]);
  for (int q = 0; q < g->wcasts.len; q++)
    if (!moved[q]) vec_push(&wc, g->wcasts.data[q]);
  g->wcasts = wc;
}

int pass_zero(Module *m) {
  Graph *g = m->graph;
  const Plan *pl = &m->train.plan;
  bool ring = pl->sp_kind == SP_RING && pl->sp > 1;
  int dp = shard_ranks(pl), stage = pl->zero;
  bool shm = zero_shards_masters(m), z16 = zero_gathers16(m);
  DType t16 = m->train.precision;
  /* (interleaved pipeline chunks without ZeRO reduce their gradients after
   * the schedule) */
  bool chunks = m->nstages > pl->pp && pl->pp > 1;
  if (!g || !g->nfwd || dp <= 1 || (chunks && !stage)) return 0;
  zaxis = ring ? AX_DATA : AX_DP;
  if (stage == 3)
    for (int i = 0; i < g->values.len; i++) {
      Value *v = g->values.data[i];
      if (v->alias && v->alias->role == ROLE_PARAM) {
        diag_fatal_noloc("zero=3: parameter %s is used through a view (a reshape); gathering "
                         "it per layer is not implemented: use zero=2", v->alias->name);
        return -1;
      }
    }
  const unsigned char *rd = shm || z16 ? readers(g, t16) : NULL;
  /* Buckets in parameter order; zero=0 buckets hold only the parameters
   * that have gradients (the others have no place in the gradient range). */
  for (int i = 0; i < g->params.len; i++) {
    Value *p = g->params.data[i];
    if (!stage && !p->grad) continue;
    /* gradients partial over tp or the 2D grid: a bucket per set of axes */
    uint32_t partial = stage >= 1 ? p->grad_partial & ((1u << AX_TP) | (1u << AX_TPR) | (1u << AX_TPC)) : 0;
    /* a pipeline's tied embedding alone: its shard is summed over EMBED */
    const char *key = p->pp_shared ? arena_printf("%s (tied)", zero_bucket_key(p->name)) : zero_bucket_key(p->name);
    /* masters sharded: the parameters read as 16-bit copies alone, the
     * others in a bucket of their own (gathered in fp32) */
    bool half = (shm || z16) && read_as16(g, p, rd, shm);
    if ((shm || z16) && !half) key = arena_printf("%s (fp32)", key);
    Bucket *b = bucket_of(g, key, partial);
    b->tied = p->pp_shared;
    b->half = half;
    vec_push(&b->params, p);
  }
  int64_t flat = 0, shard = 0;
  /* interleaved: after the rank's earlier chunks (per_stage runs them first) */
  for (int s = g->stage - pl->pp; chunks && s >= 0 && !flat; s -= pl->pp) {
    const PtrVec *pb = &m->stages[s]->buckets;
    if (!pb->len) continue;
    const Bucket *l = pb->data[pb->len - 1];
    flat = l->flat + l->numel;
    shard = l->shard + l->chunk;
  }
  bool whole = stage >= 1 && opt_blocked(&m->train.opt);
  if (whole && stage == 1) group_owner_buckets(g, dp);
  int64_t *owned = arena_alloc(sizeof(int64_t) * (size_t)dp);
  for (int k = 0; k < g->buckets.len; k++) {
    Bucket *b = g->buckets.data[k];
    b->pos = arena_alloc(sizeof(int64_t) * (size_t)b->params.len);
    int64_t n = 0;
    if (whole && b->tied) {
      /* its owner alike at both ends of the pipeline (the shard is summed
       * over EMBED): as if it were the stage's first bucket */
      int64_t *fresh = arena_alloc(sizeof(int64_t) * (size_t)dp);
      n = owner_layout(b, dp, fresh);
      for (int r = 0; r < dp; r++) owned[r] += fresh[r];
    } else if (whole)
      n = owner_layout(b, dp, owned);
    else
      for (int j = 0; j < b->params.len; j++) {
        b->pos[j] = n;
        n += (ir_numel(&((Value *)b->params.data[j])->shape) + 15) / 16 * 16;
      }
    if (stage >= 1 && !whole) n = (n + 16 * dp - 1) / (16 * dp) * (16 * dp);
    b->flat = flat;
    b->numel = n;
    b->chunk = stage >= 1 ? n / dp : 0;
    b->shard = shard;
    flat += n;
    shard += b->chunk;
    Shape s = ir_shape(1, &n);
    b->grads = ir_value(g, ROLE_GRAD, s, DT_F32, ((Value *)b->params.data[0])->loc);
    b->grads->name = b->name;
    for (int j = 0; j < b->params.len; j++) {
      Value *p = b->params.data[j];
      if (!p->grad) continue;
      p->grad->alias = b->grads;
      p->grad->view_off = b->pos[j] * 4;
    }
    if (stage >= 1) {
      Shape c = ir_shape(1, &b->chunk);
      b->gshard = ir_value(g, ROLE_GRAD, c, DT_F32, b->grads->loc);
      b->gshard->name = arena_printf("%s (gradient shard)", b->name);
    }
    if (stage == 3 || shm) {
      Shape c = ir_shape(1, &b->chunk);
      b->pshard = ir_value(g, ROLE_OPTSTATE, c, DT_F32, b->grads->loc);
      b->pshard->name = arena_printf("%s (parameter shard)", b->name);
    }
  }
  if (shm) masters_sharded(g, dp, m->train.precision);
  /* ZeRO-3 under bf16: a bucket read only through 16-bit casts gathers
   * its 16-bit shard, cast once a step (the cast block) */
  for (int k = 0; z16 && k < g->buckets.len; k++) {
    Bucket *b = g->buckets.data[k];
    if (b->half) vec_push(&g->wcasts, shard16(g, b, t16));
  }
  bool *drop = arena_alloc(sizeof(bool) * (size_t)(g->nodes.len + 1));

  /* Where the new nodes go: before[i] runs right before node i, after[i]
   * right after it. */
  int nn = g->nodes.len;
  PtrVec *before = arena_alloc(sizeof(PtrVec) * (size_t)(nn + 1));
  PtrVec *after = arena_alloc(sizeof(PtrVec) * (size_t)(nn + 1));
  /* ZeRO-3's gathers with the node of their bucket's first use */
  typedef struct {
    int first;
    Node *n;
    Value *src, *whole;
    Bucket *b;
    bool bwd; /* the copy the backward reads (else the forward's) */
  } Gather;
  Gather *gat = arena_alloc(sizeof *gat * (size_t)(2 * g->buckets.len + 1));
  int ngat = 0;
  /* lastw[id]: the last backward node that writes storage id (a bucket's
   * gradients: the node its reduction follows); the loop below changes
   * what nodes read, never what they write */
  int nval = g->values.len;
  int *lastw = arena_alloc(sizeof(int) * (size_t)(nval + 1));
  for (int i = 0; i < nval; i++) lastw[i] = -1;
  for (int i = g->nfwd; i < nn; i++) {
    const Node *n = g->nodes.data[i];
    for (int j = 0; j < n->nout; j++) {
      const Value *r = n->outs[j] ? root(n->outs[j]) : NULL;
      if (r && r->id >= 0 && r->id < nval) lastw[r->id] = i;
    }
  }
  /* ZeRO-3: each parameter's readers, node i and operand q as i*IR_MAXIN+q
   * in node order, from uses[at[id]] to uses[at[id+1]] */
  int *at = NULL, *uses = NULL;
  if (stage == 3) {
    at = arena_alloc(sizeof(int) * (size_t)(nval + 2));
    for (int i = 0; i < nn; i++) {
      const Node *n = g->nodes.data[i];
      for (int q = 0; q < n->nin; q++)
        if (n->in[q] && n->in[q]->role == ROLE_PARAM && n->in[q]->id < nval) at[n->in[q]->id + 2]++;
    }
    for (int v = 0; v < nval; v++) at[v + 2] += at[v + 1];
    uses = arena_alloc(sizeof(int) * (size_t)(at[nval + 1] + 1));
    for (int i = 0; i < nn; i++) {
      const Node *n = g->nodes.data[i];
      for (int q = 0; q < n->nin; q++)
        if (n->in[q] && n->in[q]->role == ROLE_PARAM && n->in[q]->id < nval)
          uses[at[n->in[q]->id + 1]++] = i * IR_MAXIN + q;
    }
  }
  for (int k = 0; k < g->buckets.len; k++) {
    Bucket *b = g->buckets.data[k];
    if (stage == 3) {
      /* Two gathered copies, one for each direction; nodes read views.
       * Under bf16 a bucket of parameters read only through casts to 16
       * bits (b->half) is gathered in 16 bits from its 16-bit shard, and
       * the casts' outputs become views of the copy (the casts go: the
       * same values, half the bytes). */
      Value *whole[2];
      DType wt = b->half ? t16 : DT_F32;
      int64_t we = ir_dtype_size(wt);
      for (int d = 0; d < 2; d++) {
        Shape s = ir_shape(1, &b->numel);
        whole[d] = ir_value(g, ROLE_ACT, s, wt, b->grads->loc);
        whole[d]->name = arena_printf("%s (gathered for the %s)", b->name, d ? "backward" : "forward");
      }
      for (int j = 0; j < b->params.len; j++) {
        Value *p = b->params.data[j];
        const int *u0 = p->id < nval ? uses + at[p->id] : NULL, *u1 = p->id < nval ? uses + at[p->id + 1] : NULL;
        if (b->half) {
          for (const int *u = u0; u < u1; u++) {
            int i = *u / IR_MAXIN;
            Node *n = g->nodes.data[i];
            if (*u % IR_MAXIN || n->op != OP_CAST || n->in[0] != p) continue;
            Value *o = n->out;
            o->def = NULL;
            o->alias = whole[i >= g->nfwd];
            o->view_off = b->pos[j] * we;
            drop[i] = true;
          }
          continue;
        }
        Value *view[2] = {param_view(g, p, whole[0], b->pos[j] * 4),
                          param_view(g, p, whole[1], b->pos[j] * 4)};
        for (const int *u = u0; u < u1; u++) {
          int i = *u / IR_MAXIN, q = *u % IR_MAXIN;
          Node *n = g->nodes.data[i];
          /* a backward node that takes p for its shape only (a bias's
           * add_bwd) keeps the forward's view: no gather for it */
          if (n->in[q] == p) n->in[q] = view[i >= g->nfwd && ir_reads_data(n, q)];
        }
      }
      Value *src = b->half ? wcast_of(g, b->pshard)->out : b->pshard;   /* (shard16's) */
      for (int d = 0; d < 2; d++) gat[ngat++] = (Gather){-1, NULL, src, whole[d], b, d == 1};
    }
    int last = lastw[b->grads->id];
    if (last < 0) continue;
    if (stage >= 1) {
      Node *rs = comm_node(OP_GRAD_REDUCE_SCATTER, b->grads, b->gshard, dp, b, true);
      rs->a.i[3] = stage == 1;   /* ZeRO-1: once, in the last microbatch, without blocking */
      rs->a.ni = 4;
      vec_push(&after[last], rs);
    } else
      vec_push(&after[last], comm_node(OP_GRAD_ALLREDUCE, b->grads, b->grads, dp, b, true));
  }

  /* ZeRO-3: each gathered copy's first use, in its direction (a forward
   * node that takes it, even for its shape only, or a backward node that
   * reads it), by one walk over the nodes (the copies are the roots of
   * the views the loop above gave the nodes); an unused copy is not
   * gathered */
  if (ngat) {
    int nv2 = g->values.len;
    int *gidx = arena_alloc(sizeof(int) * (size_t)(nv2 + 1));
    for (int v = 0; v < nv2; v++) gidx[v] = -1;
    for (int j = 0; j < ngat; j++) gidx[gat[j].whole->id] = j;
    for (int i = 0; i < nn; i++) {
      const Node *n = g->nodes.data[i];
      for (int q = 0; q < n->nin && !drop[i]; q++) {
        const Value *r = root(n->in[q]);
        int j = r->id >= 0 && r->id < nv2 ? gidx[r->id] : -1;
        if (j < 0 || gat[j].first >= 0 || gat[j].bwd != (i >= g->nfwd)) continue;
        if (!gat[j].bwd || ir_reads_data(n, q)) gat[j].first = i;
      }
    }
    int kept = 0;
    for (int j = 0; j < ngat; j++)
      if (gat[j].first >= 0) {
        gat[j].n = comm_node(OP_ALLGATHER, gat[j].src, gat[j].whole, dp, gat[j].b, false);
        gat[kept++] = gat[j];
      }
    ngat = kept;
  }

  /* ZeRO-3: each bucket's gather one layer ahead, right before the first
   * use of the bucket used before it in the same direction (the first
   * bucket's at its own first use), so that a target that runs collectives
   * beside the kernels (the cuda target's communication stream) gathers
   * layer i+1 while layer i computes.  Its copy is then live from there:
   * the memory plan gives it a buffer of its own beside the one being read
   * (two gathered layers at a time, counted in the planned peak).  The
   * gathers keep their order, the same on every rank. */
  for (int a = 1; a < ngat; a++)   /* by first use (stable: bucket order on ties) */
    for (int j = a; j > 0 && gat[j - 1].first > gat[j].first; j--) {
      Gather t = gat[j];
      gat[j] = gat[j - 1];
      gat[j - 1] = t;
    }
  for (int j = 0; j < ngat; j++) {
    int at = gat[j].first, fwd = at < g->nfwd;
    for (int q = j - 1; q >= 0; q--)
      if ((gat[q].first < g->nfwd) == fwd) {
        at = gat[q].first;
        break;
      }
    vec_push(&before[at], gat[j].n);
  }

  /* The new schedule; node ids are schedule positions. */
  PtrVec nodes = {0};
  int *newid = arena_alloc(sizeof(int) * (size_t)(nn + 1));
  int nfwd = -1;
  for (int i = 0; i < nn; i++) {
    if (i == g->nfwd) nfwd = nodes.len;
    for (int k = 0; k < before[i].len; k++) vec_push(&nodes, before[i].data[k]);
    newid[i] = nodes.len;
    if (!drop[i]) vec_push(&nodes, g->nodes.data[i]);
    for (int k = 0; k < after[i].len; k++) vec_push(&nodes, after[i].data[k]);
  }
  if (nfwd < 0) nfwd = nodes.len;
  for (int i = 0; i < nodes.len; i++) {
    Node *n = nodes.data[i];
    n->id = i;
    if (n->op == OP_DROPOUT_BWD) n->a.i[1] = newid[n->a.i[1]];
  }
  g->nodes = nodes;
  g->nfwd = nfwd;
  return 0;
}

/* ZeRO with Shampoo or Adafactor: the state of the parameters a rank owns
 * (owner_layout), from off, each tensor's whole (rt_optim.h), in bucket
 * and parameter order; the ranks' regions start alike, so a parameter's
 * state offset is the same number on every rank and means something on its
 * owner only.  The region is the most loaded owner's (every rank's arena
 * is laid out alike), then the step's workspace at *work_off (a pipeline's
 * with the root worker's scratch at its end, *root_work bytes).  Returns
 * the bytes of both. */
static int64_t owner_state(Module *m, const PtrVec *bl, int64_t off, int64_t *work_off,
                           int64_t *root_work) {
  const Optimizer *o = &m->train.opt;
  int dp = optplace_ranks(m);
  int64_t *fill = arena_alloc(sizeof(int64_t) * (size_t)dp), most = 0;
  for (int k = 0; k < bl->len; k++) {
    Bucket *b = bl->data[k];
    for (int j = 0; j < b->params.len; j++) {
      Value *p = b->params.data[j];
      if (!p->grad) continue;
      p->opt_offset = off + fill[b->owner[j]];
      fill[b->owner[j]] += rt_optim_align64(opt_state_elems(o, &p->shape) * 4);
      if (fill[b->owner[j]] > most) most = fill[b->owner[j]];
    }
  }
  const Graph *w = m->nstages > 1 ? m->whole : m->graph;
  const Shape **shapes = arena_alloc(sizeof *shapes * (size_t)(w->params.len + 1));
  for (int i = 0; i < w->params.len; i++) shapes[i] = &((const Value *)w->params.data[i])->shape;
  *work_off = off + most;
  return most +
         rt_optim_align64(opt_work_bytes(o, shapes, w->params.len, opt_root_worker(m), root_work));
}

/* The persistent part of the arena for a bucketed plan (memplan): 0 when
 * the plan has no buckets, else 1 with *end at its end.
 *   zero=0   [params | buckets of gradients | optimizer state per parameter]
 *   zero=1   [params in the flat layout | buckets of gradients | gradient shards | optimizer state of the shards]
 *   zero=2   [params in the flat layout | gradient shards | optimizer state of the shards]
 *   zero=3   [parameter shards | gradient shards | optimizer state of the shards]
 *   zero=1/2 under bf16: zero=3's parameter shards in place of the flat layout,
 *            the step's gathered copies after (memplan's weight copies)
 * A shard array holds the rank's chunk of every bucket, in bucket order.
 * Shampoo and Adafactor: the optimizer state is that of the tensors the
 * rank owns, then the step's workspace (owner_state), then under tp
 * Adafactor's statistics buffer.
 * An interleaved chunk (zero >= 1): the layout of its pipeline rank's
 * buckets (zero_rank_buckets), offsets in the rank's arena; every chunk of
 * the rank plans the same persistent part (memplan's layout_ranks keeps
 * it once). */
int zero_memplan(Module *m, int64_t *end) {
  Graph *g = m->graph;
  MemPlan *mp = &m->mem;
  if (!g->buckets.len) return 0;
  int stage = m->train.plan.zero, nstate = opt_states(&m->train.opt);
  bool shards = stage == 3 || zero_shards_masters(m);   /* the parameters' storage: their chunks */
  int64_t off = 0, nshard = 0;
  int pp = m->train.plan.pp;
  bool chunks = m->nstages > pp && pp > 1;
  const PtrVec *bl = chunks ? zero_rank_buckets(m, g->stage % pp) : &g->buckets;
  Graph rg = *g;   /* the rank's parameters, for Adafactor's statistics under tp */
  if (chunks) {
    rg.params = (PtrVec){0};
    for (int s = g->stage % pp; s < m->nstages; s += pp)
      for (int i = 0; i < m->stages[s]->params.len; i++) vec_push(&rg.params, m->stages[s]->params.data[i]);
  }
  if (stage == 0) {
    for (int i = 0; i < g->params.len; i++) {
      Value *p = g->params.data[i];
      p->persistent = true;
      p->offset = off;
      off += (ir_numel(&p->shape) * 4 + 63) / 64 * 64;
    }
    mp->param_bytes = off;
    for (int k = 0; k < g->buckets.len; k++) {
      Bucket *b = g->buckets.data[k];
      b->grads->persistent = true;
      b->grads->offset = off;
      off += b->numel * 4;
    }
    mp->grad_bytes = off - mp->param_bytes;
    for (int i = 0; i < g->params.len && nstate; i++) {
      Value *p = g->params.data[i];
      if (!p->grad) continue;
      p->opt_offset = off;
      off += nstate * ((ir_numel(&p->shape) * 4 + 63) / 64 * 64);
    }
    off = opt_plan_state(&m->train.opt, g, m->nstages > 1 ? m->whole : NULL, off,
                         &mp->opt_work_offset, opt_root_worker(m), &mp->root_work_bytes);
    mp->root_work_offset = off - mp->root_work_bytes;
    mp->opt_dir_offset = off;
    off += optplace_dir_bytes(m, g);
    mp->opt_stats_offset = off;
    off += optplace_af_bytes(m, g);
    mp->optstate_bytes = off - mp->param_bytes - mp->grad_bytes;
    mp->persistent_bytes = *end = off;
    return 1;
  }
  for (int k = 0; k < bl->len; k++) {
    Bucket *b = bl->data[k];
    nshard += b->chunk;
    for (int j = 0; j < b->params.len; j++) {
      Value *p = b->params.data[j];
      p->persistent = true;
      p->offset = (b->flat + b->pos[j]) * 4;
      if (shards) {   /* no storage of its own: nodes read views of the gathered bucket */
        p->offset = -1;
        p->live_start = p->live_end = -1;
      }
    }
    if (shards) {
      b->pshard->persistent = true;
      b->pshard->offset = b->shard * 4;
    }
  }
  mp->param_bytes = shards ? nshard * 4 : (((Bucket *)bl->data[bl->len - 1])->flat +
                                               ((Bucket *)bl->data[bl->len - 1])->numel) * 4;
  int64_t full = 0;   /* zero=1: the buckets of gradients, whole */
  for (int k = 0; k < bl->len && stage == 1; k++) {
    Bucket *b = bl->data[k];
    b->grads->persistent = true;
    b->grads->offset = mp->param_bytes + b->flat * 4;
    full += b->numel * 4;
  }
  for (int k = 0; k < bl->len; k++) {
    Bucket *b = bl->data[k];
    b->gshard->persistent = true;
    b->gshard->offset = mp->param_bytes + full + b->shard * 4;
  }
  mp->grad_bytes = full + nshard * 4;
  mp->zero_chunk = nshard;
  mp->zero_gshard_offset = mp->param_bytes + full;
  mp->zero_opt_offset = mp->param_bytes + mp->grad_bytes;
  mp->optstate_bytes = nstate * nshard * 4;
  if (opt_blocked(&m->train.opt)) {
    mp->optstate_bytes =
        owner_state(m, bl, mp->zero_opt_offset, &mp->opt_work_offset, &mp->root_work_bytes);
    mp->root_work_offset = mp->zero_opt_offset + mp->optstate_bytes - mp->root_work_bytes;
    /* Adafactor under tp: the statistics buffer all-reduced over the tp
     * axes (optplace_af_layout), entries of the tensors this rank owns */
    mp->opt_stats_offset = mp->zero_opt_offset + mp->optstate_bytes;
    mp->optstate_bytes += optplace_af_bytes(m, &rg);
  }
  mp->persistent_bytes = *end = mp->zero_opt_offset + mp->optstate_bytes;
  return 1;
}
