/* cpu.c — the cpu target: the planned per-rank program as one readable C file
 * (C + libshardrt + MPI), in the manner of llm.c's train_gpt2.c.
 *
 * Layout of the file: a header comment with the source, mesh, plan and
 * memory plan; the sizes; the parameter table; forward() and backward() of
 * one microbatch as straight-line runtime calls on buffers at their planned
 * arena offsets, each with a shape comment and a model.shard:LINE comment;
 * the optimizer; data-parallel communication; main().
 *
 * Fusion (decided here, on the scheduled graph):
 * - a bias add right after a matmul whose plain product nothing else reads
 *   becomes the matmul's bias (one call, the product is never written);
 * - the bias gradient of such an add is summed by the matmul's backward call;
 * - a chain of elementwise forward ops (add/sub/mul with broadcasting, scale,
 *   relu, gelu, silu, imported scalar functions) is one loop; a value inside
 *   the chain is stored only when a later node reads it (the backward), and
 *   shared subexpressions are computed once (cexpr.c);
 * - backward elementwise ops (add/sub/mul/scale/map) are single loops that
 *   produce every input gradient at once;
 * - a transient gradient is zeroed right before its first writer, or written
 *   with `=` by that writer when it covers the whole buffer.
 * Fusion happens only between adjacent nodes whose buffers do not overlap,
 * so the plan's liveness stays valid.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cg.h"
#include "schedule.h"

static const char *sched_name(Schedule s) {
  return s == SCHED_GPIPE ? "GPipe" : s == SCHED_1F1B ? "1F1B" : "interleaved 1F1B";
}

/* The built-in training text for token models without a `data` file. */
#define CG_BUILTIN_DATA "samples/data/tales.txt"

enum { DATA_TOKENS = 0, DATA_SYNTH = 1 };
/* A fused loop: at most MAX_CHAIN nodes of at most IR_MAXIN inputs each. */
enum { MAX_CHAIN = 24, MAX_LOOP = MAX_CHAIN * IR_MAXIN };

typedef struct Emit {
  FILE *o;
  Module *m;
  Graph *g;
  int f64;
  const char *R;        /* element type: float or double */
  const char *S;        /* kernel suffix: _f32 or _f64 */
  int64_t scale;        /* arena offset multiplier (2 for f64) */
  int nn;
  int *reads;           /* value id -> nodes that read its data */
  int *fwd_reads;       /* value id -> forward nodes that take it as an input */
  Node **fwd_reader;    /* value id -> the last such forward node */
  bool *skip;           /* node id -> emitted as part of another node */
  Node **bias;          /* node id (matmul) -> the add whose bias it takes */
  Value **dbias;        /* node id (matmul_bwd) -> the bias gradient it sums */
  Node **dbias_node;    /* node id (matmul_bwd) -> the add_bwd that asked for it */
  int *chain_len;       /* node id -> length of the elementwise chain it starts */
  int *ce_slot;         /* node id (cross_entropy) -> its row-count slot */
  int nce;
  int nbias, ndbias, nchains, nchained;
  /* data */
  int data;
  Value *in0, *in1;     /* tokens/targets or x/labels */
  int vocab, seq, features, classes;
  bool dropout;
  /* distributed: the program runs on a mesh of ranks (runtime/dist.h) */
  bool dist;
  int tp;
  int q;               /* tp2d: the grid side (tp = q*q), else 0 */
  int ring;             /* sp=ring: the sequence shards (ranks of the sp axis), else 0 */
  int zstage;           /* gradient buckets (passes/zero.c): the ZeRO stage, 0 for plain dp; -1 none */
  /* pipeline: this program is stage `stage` of nstages (Graph.stage); the
   * values in stash slots are addressed from `stash` (FS/IS) */
  bool pp;
  int stage, nstages;
  /* interleaved: this pipeline rank's chunks (virtual stages c*pp + stage)
   * and the suffix of the chunk's forward/backward being emitted */
  int nchunks;
  const char *sfx;
  Graph **chunk_g;      /* the chunks' graphs */
  int64_t *sbase;       /* the chunks' stash slots in the arena (relocated offsets) */
} Emit;

static const char *rt_axis(int ax) {
  static const char *const n[AX_COUNT] = {"RT_AX_WORLD", "RT_AX_DP", "RT_AX_TP", "RT_AX_TPR",
                                          "RT_AX_TPC", "RT_AX_SP", "RT_AX_PP", "RT_AX_DATA",
                                          "RT_AX_EMBED"};
  return ax >= 0 && ax < AX_COUNT ? n[ax] : "RT_AX_WORLD";
}

/* The dim of parameter p split over a mesh axis, -1 when it is whole. */
static int split_dim_of(const Value *p) {
  for (int k = 0; k < p->shape.ndim; k++)
    if (p->shard.axis[k] >= 0) return k;
  return -1;
}

static void P(Emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void P(Emit *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(e->o, fmt, ap);
  va_end(ap);
}

/* ---- values ---- */

static Value *root(Value *v) {
  while (v && v->alias) v = v->alias;
  return v;
}

static int64_t numel(const Value *v) { return ir_numel(&v->shape); }
static int64_t last_dim(const Value *v) {
  return v->shape.ndim ? v->shape.d[v->shape.ndim - 1].n : 1;
}
static int64_t rows(const Value *v) { return numel(v) / (last_dim(v) ? last_dim(v) : 1); }
static bool is_int(const Value *v) { return v->dtype == DT_I32; }

/* Bytes of v's data in the emitted program. */
static int64_t nbytes(Emit *e, const Value *v) { return numel(v) * (is_int(v) ? 4 : e->f64 ? 8 : 4); }

/* Arena byte offset of v's storage in the emitted program. */
static int64_t off(Emit *e, const Value *v) { return v->offset * e->scale; }

/* "F(1234)", "I(1234)" or "NULL"; a value in a pipeline stage's stash slot
 * "FS(64)", "IS(64)": relative to stash_base, the slot region of its stage
 * (the slot of the microbatch being run is chosen at run time). */
static const char *ref_at(Emit *e, const Value *v, int64_t stash_base) {
  if (!v) return "NULL";
  const Value *r = v;
  while (r->alias) r = r->alias;
  if (e->pp && r->stash)
    return arena_printf("%s(%" PRId64 ")", is_int(v) ? "IS" : "FS",
                        off(e, v) - stash_base * e->scale);
  return arena_printf("%s(%" PRId64 ")", is_int(v) ? "I" : "F", off(e, v));
}

static const char *ref(Emit *e, const Value *v) { return ref_at(e, v, e->m->mem.stash_offset); }

/* The IR's name of a value: %14, @embed.weight, $tokens, d%14, d@embed.weight. */
static const char *vname(const Value *v) {
  if (!v) return "_";
  const char *d = "";
  if (v->role == ROLE_GRAD && v->grad_of) {
    d = "d";
    v = v->grad_of;
  }
  if (v->role == ROLE_PARAM) return arena_printf("%s@%s", d, v->name);
  if (v->role == ROLE_INPUT) return arena_printf("%s$%s", d, v->name);
  return arena_printf("%s%%%d", d, v->id);
}

/* A C identifier for a local pointer to v inside a fused loop. */
static const char *cname(const Value *v) {
  if (v->role == ROLE_GRAD) return arena_printf("d%d", v->grad_of->id);
  return arena_printf("x%d", v->id);
}

static const char *shape_of(Emit *e, const Value *v) {
  char buf[256];
  ir_shape_str(e->g, v, buf, sizeof buf);
  return arena_strdup(buf);
}

/* Byte ranges of the storage of two values overlap. */
static bool overlaps(Emit *e, const Value *a, const Value *b) {
  a = root((Value *)a);
  b = root((Value *)b);
  if (a->offset < 0 || b->offset < 0) return false;
  int64_t a0 = a->offset, a1 = a0 + numel(a) * ir_dtype_size(a->dtype);
  int64_t b0 = b->offset, b1 = b0 + numel(b) * ir_dtype_size(b->dtype);
  return a0 < b1 && b0 < a1;
}

/* ---- analysis ---- */

/* Whether node n reads the data of input k (some inputs are there for their
 * shape only: add_bwd needs dy, not a and b). */
static bool is_view(const Node *n) {
  return (n->op == OP_RESHAPE || n->op == OP_TP_COPY) && root(n->out) == root(n->in[0]);
}

static bool reads_data(const Node *n, int k) {
  if (n->op == OP_RESHAPE || n->op == OP_TP_COPY) return !is_view(n);
  return ir_reads_data(n, k);
}

/* A reshape whose output is a view of its input (same storage) is free;
 * otherwise the plan gave it a buffer of its own and it is a copy. */
static bool emits_code(const Node *n) {
  return n->op != OP_INPUT && n->op != OP_PARAM && !is_view(n);
}

/* The next node after i that emits code (nn if none). */
static int next_code(Emit *e, int i) {
  int j = i + 1;
  while (j < e->nn && !emits_code(e->g->nodes.data[j])) j++;
  return j;
}

static bool is_loop_op(OpKind op) {
  switch (op) {
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_SCALE: case OP_GELU: case OP_RELU:
  case OP_SILU: case OP_MAP:
    return true;
  default:
    return false;
  }
}

/* Forward matmul whose product goes only into a bias add right after it. */
static Node *find_bias(Emit *e, Node *mm) {
  Value *y = mm->out;
  if (ir_summa_q(mm)) return NULL; /* SUMMA: the bias gradient is summed per step (tp-col) */
  if (y == e->g->loss || e->fwd_reads[y->id] != 1 || e->reads[y->id] != 1) return NULL;
  Node *a = e->fwd_reader[y->id];
  if (a->op != OP_ADD || a->in[0] != y || a->in[1] == y) return NULL;
  Value *b = a->in[1];
  if (b->shape.ndim != 1 || b->shape.d[0].n != last_dim(y) || is_int(b)) return NULL;
  if (next_code(e, mm->id) != a->id) return NULL;
  for (int k = 0; k < 2; k++)
    if (overlaps(e, a->out, mm->in[k])) return NULL;
  if (overlaps(e, a->out, b)) return NULL;
  return a;
}

/* An add_bwd that only sums a bias gradient, right before the matmul_bwd of
 * the matmul that produced the add's input: returns that matmul_bwd. */
static Node *find_dbias(Emit *e, Node *n) {
  if (n->op != OP_ADD_BWD || n->outs[0] || !n->outs[1]) return NULL;
  Value *db = n->outs[1];
  if (!root(db)->persistent || db->shape.ndim != 1) return NULL;
  int j = next_code(e, n->id);
  if (j >= e->nn) return NULL;
  Node *mb = e->g->nodes.data[j];
  if (mb->op != OP_MATMUL_BWD || mb->in[0] != n->in[0] || !n->fwd || !mb->fwd) return NULL;
  if (ir_summa_q(mb)) return NULL;
  if (mb->fwd->out != n->fwd->in[0] || db->shape.d[0].n != last_dim(mb->in[0])) return NULL;
  if (e->dbias[mb->id]) return NULL;
  return mb;
}

/* The operand of chain node c that is the previous chain value v, checked
 * to be a full-size operand. */
static bool full_operand(const Node *c, const Value *v) {
  bool found = false;
  for (int k = 0; k < c->nin; k++)
    if (c->in[k] == v) found = true;
  return found && numel(v) == numel(c->out);
}

/* Broadcast size of node c's operands within a loop of numel(c->out): 0 when
 * all operands are full size, -1 when they disagree. */
static int64_t bcast_of(const Node *c) {
  int64_t inner = 0, n = numel(c->out);
  for (int k = 0; k < c->nin; k++) {
    int64_t m = numel(c->in[k]);
    if (m == n) continue;
    if (m <= 0 || n % m) return -1;
    if (inner && inner != m) return -1;
    inner = m;
  }
  return inner;
}

/* Whether a chain's stored outputs stay clear of everything it reads. */
static bool chain_value_stored(Emit *e, Node **ch, int len, int k) {
  Value *v = ch[k]->out;
  return k == len - 1 || v == e->g->loss || e->reads[v->id] > 1;
}

static bool chain_safe(Emit *e, Node **ch, int len) {
  for (int k = 0; k < len; k++) {
    if (!chain_value_stored(e, ch, len, k)) continue;
    Value *w = ch[k]->out;
    for (int j = 0; j < len; j++)
      for (int i = 0; i < ch[j]->nin; i++) {
        Value *r = ch[j]->in[i];
        if (j > 0 && r == ch[j - 1]->out) continue;   /* inside the loop */
        if (overlaps(e, w, r)) return false;
      }
  }
  return true;
}

/* Length of the elementwise chain that starts at node n. */
static int find_chain(Emit *e, Node *n, Node **ch) {
  if (!is_loop_op(n->op) || bcast_of(n) < 0) return 0;
  int64_t inner = bcast_of(n);
  int len = 0;
  ch[len++] = n;
  while (len < MAX_CHAIN) {
    Node *last = ch[len - 1];
    Value *v = last->out;
    if (v == e->g->loss || e->fwd_reads[v->id] != 1) break;
    Node *c = e->fwd_reader[v->id];
    if (!is_loop_op(c->op) || e->skip[c->id] || next_code(e, last->id) != c->id) break;
    if (numel(c->out) != numel(n->out) || !full_operand(c, v)) break;
    int64_t b = bcast_of(c);
    if (b < 0 || (b && inner && b != inner)) break;
    if (b) inner = b;
    ch[len++] = c;
  }
  while (len > 1 && !chain_safe(e, ch, len)) len--;
  return len;
}

static void analyse(Emit *e) {
  Graph *g = e->g;
  int nv = g->values.len;
  e->reads = arena_alloc(sizeof(int) * (size_t)(nv + 1));
  e->fwd_reads = arena_alloc(sizeof(int) * (size_t)(nv + 1));
  e->fwd_reader = arena_alloc(sizeof(Node *) * (size_t)(nv + 1));
  e->skip = arena_alloc(sizeof(bool) * (size_t)(e->nn + 1));
  e->bias = arena_alloc(sizeof(Node *) * (size_t)(e->nn + 1));
  e->dbias = arena_alloc(sizeof(Value *) * (size_t)(e->nn + 1));
  e->dbias_node = arena_alloc(sizeof(Node *) * (size_t)(e->nn + 1));
  e->chain_len = arena_alloc(sizeof(int) * (size_t)(e->nn + 1));
  e->ce_slot = arena_alloc(sizeof(int) * (size_t)(e->nn + 1));
  for (int i = 0; i < e->nn; i++) {
    Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++) {
      Value *v = n->in[k];
      bool dup = false;
      for (int j = 0; j < k; j++) dup |= n->in[j] == v;
      if (dup) continue;
      if (reads_data(n, k)) e->reads[v->id]++;
      if (i < g->nfwd) {
        e->fwd_reads[v->id]++;
        e->fwd_reader[v->id] = n;
      }
    }
    if (n->op == OP_CROSS_ENTROPY) e->ce_slot[i] = e->nce++;
    if (n->op == OP_DROPOUT) e->dropout = true;
  }
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = g->nodes.data[i];
    if (e->skip[i]) continue;
    if (n->op == OP_MATMUL) {
      Node *a = find_bias(e, n);
      if (a) {
        e->bias[i] = a;
        e->skip[a->id] = true;
        e->nbias++;
      }
      continue;
    }
    Node *ch[MAX_CHAIN];
    int len = find_chain(e, n, ch);
    if (len > 0) {
      e->chain_len[i] = len;
      for (int k = 1; k < len; k++) e->skip[ch[k]->id] = true;
      if (len > 1) {
        e->nchains++;
        e->nchained += len;
      }
    }
  }
  for (int i = g->nfwd; i < e->nn; i++) {
    Node *n = g->nodes.data[i];
    Node *mb = find_dbias(e, n);
    if (mb) {
      e->dbias[mb->id] = n->outs[1];
      e->dbias_node[mb->id] = n;
      e->skip[i] = true;
      e->ndbias++;
    }
  }
}

/* ---- data roles ---- */

static Node *reader_of(Graph *g, Value *v, OpKind op, int slot) {
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = g->nodes.data[i];
    if (n->op == op && n->nin > slot && n->in[slot] == v) return n;
  }
  return NULL;
}

/* Which inputs are tokens/targets (a language model) or x/labels (a
 * classifier on the synthetic task).  0, or -1 with a message in err. */
static int data_roles(Emit *e, char *err, int cap) {
  Graph *g = e->g;
  if (g->nstages > 1) {
    /* a pipeline stage: the roles come from the whole model, whose inputs
     * every stage holds in the same order */
    e->g = e->m->whole;
    int rc = data_roles(e, err, cap);
    e->g = g;
    if (rc) return rc;
    int k0 = e->in0 == e->m->whole->inputs.data[0] ? 0 : 1;
    e->in0 = g->inputs.data[k0];
    e->in1 = g->inputs.data[1 - k0];
    return 0;
  }
  Value *ins[2] = {0};
  if (g->inputs.len != 2) {
    snprintf(err, (size_t)cap, "the model takes %d inputs", g->inputs.len);
    return -1;
  }
  ins[0] = g->inputs.data[0];
  ins[1] = g->inputs.data[1];
  for (int k = 0; k < 2; k++) {
    Value *a = ins[k], *b = ins[1 - k];
    Node *ga = reader_of(g, a, OP_GATHER, 1), *cb = reader_of(g, b, OP_CROSS_ENTROPY, 1);
    if (is_int(a) && is_int(b) && a->shape.ndim == 2 && ir_shape_eq(&a->shape, &b->shape) && ga &&
        cb) {
      e->data = DATA_TOKENS;
      e->in0 = a;
      e->in1 = b;
      /* the full vocabulary (tables and logits may be vocab-parallel shards) */
      const Value *t = ga->in[0];
      int64_t v1 = t->role == ROLE_PARAM ? t->gshape.d[0].n : t->shape.d[0].n;
      int64_t v2 = last_dim(cb->in[0]) * (cb->a.i[1] ? cb->a.i[2] : 1);
      e->vocab = (int)(v1 < v2 ? v1 : v2);
      e->seq = (int)a->shape.d[1].n * (e->ring > 1 ? e->ring : 1); /* the whole row */
      return 0;
    }
    if (!is_int(a) && is_int(b) && a->shape.ndim == 2 && b->shape.ndim == 1 && cb &&
        a->shape.d[0].n == b->shape.d[0].n) {
      e->data = DATA_SYNTH;
      e->in0 = a;
      e->in1 = b;
      e->features = (int)a->shape.d[1].n;
      e->classes = (int)(last_dim(cb->in[0]) * (cb->a.i[1] ? cb->a.i[2] : 1)); /* all, if vocab-parallel */
      e->seq = 1;
      return 0;
    }
  }
  snprintf(err, (size_t)cap, "inputs %s and %s are neither (tokens, targets: i32[B,T] read by "
           "an embedding and a cross_entropy) nor (x: f32[B,K], labels: i32[B])",
           vname(ins[0]), vname(ins[1]));
  return -1;
}

/* ---- sp=ring: the pieces of the program that differ (passes/shard.c) ---- */

static int ring_size(const Module *m) {
  const Plan *p = &m->train.plan;
  return p->sp_kind == SP_RING && p->sp > 1 ? p->sp : 0;
}

/* The first position of this rank's sequence chunk, for rotary embeddings. */
static const char *rope_t0(Emit *e, const Node *n, const Shape *s) {
  if (!n->a.i[0]) return "0";
  return arena_printf("mesh.coord[%s] * %" PRId64, rt_axis((int)n->a.i[1]), s->d[1].n);
}

/* Ring attention over the sp communicator; its bytes go to the mesh's count. */
static void emit_ring_attention(Emit *e, Node *n) {
  Value **x = n->in;
  bool fwd = n->op == OP_ATTENTION;
  const Shape *q = &x[fwd ? 0 : 1]->shape, *k = &x[fwd ? 1 : 2]->shape;
  const char *ax = rt_axis((int)n->a.i[2]);
  P(e, "  // ring over %d sp ranks: K, V %stravel; scratch %s\n", (int)n->a.i[1],
    fwd ? "" : "(and dK, dV) ", shape_of(e, n->scratch));
  P(e, "  rt_ring_attention_%s%s(mesh.comm[%s], &mesh.bytes[%s],\n      ", fwd ? "forward" : "backward",
    e->S, ax, ax);
  if (fwd)
    P(e, "%s, %s, %s, %s, %s,\n      ", ref(e, n->out), ref(e, n->outs[1]), ref(e, x[0]),
      ref(e, x[1]), ref(e, x[2]));
  else
    P(e, "%s, %s, %s, %s, %s, %s, %s, %s, %s,\n      ", ref(e, n->outs[0]), ref(e, n->outs[1]),
      ref(e, n->outs[2]), ref(e, x[0]), ref(e, x[1]), ref(e, x[2]), ref(e, x[3]), ref(e, x[4]),
      ref(e, x[5]));
  P(e, "%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s);\n", q->d[0].n,
    q->d[1].n, q->d[2].n, k->d[2].n, q->d[3].n, n->a.i[0] ? 1 : 0, ref(e, n->scratch));
}

/* This rank's rows and, under sp=ring, its chunk of their tokens. */
static const char *data_batch_call(Emit *e) {
  if (!e->ring)
    return arena_printf("cg_data_batch(&data, step, row0, MICROBATCH, %s, %s)", ref(e, e->in0),
                        ref(e, e->in1));
  return arena_printf("cg_data_batch_cols(&data, step, row0, MICROBATCH, mesh.coord[RT_AX_SP] * "
                      "(SEQ / SP), SEQ / SP, %s, %s)", ref(e, e->in0), ref(e, e->in1));
}

/* ---- support checks ---- */

static void plan_error(Module *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void plan_error(Module *m, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (m->train.plan_loc.file)
    diag_error(m->train.plan_loc, "%s", msg);
  else
    diag_fatal_noloc("%s", msg);
}

static int check_graph(Module *m);

int cg_check(Module *m, const char *target) {
  if (target && !strcmp(target, "cuda")) {
    diag_fatal_noloc("--target cuda: the CUDA code generator is not available yet (roadmap step "
                     "4); use --target cpu");
    return -1;
  }
  const TrainCfg *t = &m->train;
  const Plan *p = &t->plan;
  if (!t->opt.kind) {
    diag_fatal_noloc("code generation needs a train block with an optimizer");
    return -1;
  }
  if (p->is_auto) {
    plan_error(m, "strategy auto is not implemented yet (the plan search comes with 'shardc "
                  "explore'); give an explicit strategy such as dp=%d",
               t->mesh ? t->mesh->ndev : 1);
    return -1;
  }
  char what[256] = "";
  int nw = 0;
#define NOT_YET(cond, ...)                                                               \
  if (cond) nw += snprintf(what + nw, sizeof what - (size_t)nw, "%s", nw ? ", " : ""), \
            nw += snprintf(what + nw, sizeof what - (size_t)nw, __VA_ARGS__)
  NOT_YET(p->tp2d > 1 && p->sp > 1, "tp2d=%dx%d with sp (the grid already splits the rows)",
          p->tp2d, p->tp2d);
  NOT_YET(p->pp > 1 && p->schedule == SCHED_INTERLEAVED && p->zero >= 1, "zero=%d with "
          "schedule=interleaved (ZeRO for pipeline chunks)", p->zero);
  NOT_YET(p->pp > 1 && p->sp_kind == SP_RING && p->sp > 1, "sp=ring with pp (ring attention "
          "inside pipeline stages)");
  NOT_YET(p->recompute != RECOMPUTE_NONE, "recompute=%s",
          p->recompute == RECOMPUTE_FULL ? "full" : "selective");
#undef NOT_YET
  if (nw) {
    plan_error(m, "strategy %s is not implemented yet by the cpu code generator: data "
                  "parallelism (dp=N, mb=N, zero=1|2|3), tensor parallelism (tp=N, tp2d=QxQ), Megatron "
                  "sequence parallelism (sp=megatron), ring attention (sp=ring:N) and pipelines "
                  "(pp=N, schedule=gpipe|1f1b|interleaved:V) run so far",
               what);
    return -1;
  }
  if (t->precision != DT_F32) {
    diag_fatal_noloc("precision %s is not implemented yet by the cpu code generator (only fp32)",
                     t->precision == DT_BF16 ? "bf16" : t->precision == DT_F16 ? "fp16" : "?");
    return -1;
  }
  int mb = p->mb > 0 ? p->mb : 1;
  if (t->batch != (int64_t)p->dp * mb * t->microbatch) {
    diag_fatal_noloc("batch %lld is not dp %d x microbatch %lld x %d microbatches",
                     (long long)t->batch, p->dp, (long long)t->microbatch, mb);
    return -1;
  }
  if (m->nstages <= 1) return check_graph(m);
  int rc = 0;
  for (int s = 0; s < m->nstages && !rc; s++) {
    stage_select(m, s);
    rc = check_graph(m);
  }
  stage_select(m, -1);
  return rc;
}

/* The checks of one graph (a pipeline stage's, or the model's). */
static int check_graph(Module *m) {
  const TrainCfg *t = &m->train;
  Graph *g = m->graph;
  if (!g || !g->loss || !g->nfwd || !m->planned) {
    diag_fatal_noloc("the model has no loss to train (no backward pass was planned)");
    return -1;
  }
  Emit e = {0};
  e.m = m;
  e.g = g;
  e.ring = ring_size(m);
  char err[512];
  if (data_roles(&e, err, sizeof err)) {
    diag_fatal_noloc("the cpu code generator has no data loader for model '%s': %s", g->model, err);
    return -1;
  }
  if (e.in0->shape.d[0].n != t->microbatch) {
    diag_fatal_noloc("input %s has %lld rows, expected the microbatch %lld", vname(e.in0),
                     (long long)e.in0->shape.d[0].n, (long long)t->microbatch);
    return -1;
  }
  for (int i = 0; i < g->values.len; i++) {
    Value *v = g->values.data[i];
    if (v->dtype != DT_F32 && v->dtype != DT_I32) {
      diag_fatal_noloc("value %s has type %s: the cpu code generator handles f32 and i32 only",
                       vname(v), ir_dtype_name(v->dtype));
      return -1;
    }
    if (v->live_start >= 0 && !v->alias && v->offset < 0 && v->role != ROLE_PARAM) {
      diag_fatal_noloc("internal: value %s has no place in the memory plan", vname(v));
      return -1;
    }
  }
  return 0;
}

int cg_needs_mpi(const Module *m) { return m->train.mesh && m->train.mesh->ndev > 1; }

static const char *display_data(Module *m) {
  return m->train.data ? m->train.data : CG_BUILTIN_DATA;
}

const char *cg_default_data(Module *m) {
  const char *d = m->train.data;
  char *path;
  if (!d)
    path = arena_printf("%s/%s", SHARDC_SOURCE_DIR, CG_BUILTIN_DATA);
  else if (d[0] == '/' || !m->base_dir || !*m->base_dir || !strcmp(m->base_dir, "."))
    path = arena_strdup(d);
  else
    path = arena_printf("%s/%s", m->base_dir, d);
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd)) path = arena_printf("%s/%s", cwd, path);
  }
  return path;
}

/* ---- comments ---- */

static const char *ir_stmt(const Node *n) {
  char *s = arena_strdup("");
  for (int j = 0; j < n->nout; j++) s = arena_printf("%s%s%s", s, j ? ", " : "", vname(n->outs[j]));
  s = arena_printf("%s %s %s", s, n->bwd ? "+=" : "=", ir_ops[n->op].name);
  for (int j = 0; j < n->nin; j++) s = arena_printf("%s%s%s", s, j ? ", " : " ", vname(n->in[j]));
  return s;
}

static const char *where(const Node *n) {
  const char *scope = n->scope;
  if ((!scope || !*scope) && n->fwd) scope = n->fwd->scope;
  if (!n->loc.file) return "(no source)";
  const char *path = n->loc.file->path, *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (scope && *scope) return arena_printf("%s:%d (%s)", base, n->loc.line, scope);
  return arena_printf("%s:%d", base, n->loc.line);
}

/* "// model.shard:LINE (scope)  <IR statements>" then "// <shapes in> -> <shapes out>" */
static void comment(Emit *e, Node **ns, int count) {
  P(e, "  // %s  ", where(ns[0]));
  for (int i = 0; i < count; i++) P(e, "%s%s", i ? "; " : "", ir_stmt(ns[i]));
  P(e, "\n  // ");
  /* Shapes: the first node's inputs, then what the group writes last. */
  const Node *n = ns[0];
  if (!n->nin) P(e, "()");
  for (int k = 0; k < n->nin; k++) P(e, "%s%s", k ? ", " : "", shape_of(e, n->in[k]));
  for (int i = 1; i < count; i++)
    for (int k = 0; k < ns[i]->nin; k++) {
      bool internal = ns[i]->in[k] == ns[i - 1]->out;
      if (!internal) P(e, ", %s", shape_of(e, ns[i]->in[k]));
    }
  P(e, " -> ");
  const Node *l = ns[count - 1];
  bool first = true;
  for (int j = 0; j < l->nout; j++) {
    if (!l->outs[j]) continue;
    P(e, "%s%s", first ? "" : ", ", shape_of(e, l->outs[j]));
    first = false;
  }
  if (l->nout == 1 && !l->outs[0]) P(e, "_");
  P(e, "\n");
}

/* ---- zeroing transient gradients ---- */

/* v's storage is a transient gradient first written by node i. */
static bool starts_here(const Value *v, int i) {
  Value *r = root((Value *)v);
  return v && r->role == ROLE_GRAD && !r->persistent && r->live_start == i;
}

/* v is a transient gradient first written by node i, and all of it (not a
 * parameter's gradient inside a bucket). */
static bool first_write(Emit *e, const Value *v, int i) {
  return starts_here(v, i) && !ir_view_off(v) && numel(v) == numel(root((Value *)v));
}

static void zero_outputs(Emit *e, Node *n, int i, bool *assigned) {
  for (int j = 0; j < n->nout; j++) {
    Value *v = n->outs[j];
    if (!v || (assigned && assigned[j]) || !starts_here(v, i)) continue;
    bool dup = false;
    for (int k = 0; k < j; k++) dup |= n->outs[k] && root(n->outs[k]) == root(v);
    if (dup) continue;
    Value *r = root(v);
    P(e, "  memset(%s, 0, %" PRId64 ");  // %s starts here\n", ref(e, r), nbytes(e, r), vname(v));
  }
}

/* ---- elementwise loops ---- */

typedef struct LoopArg {
  Value *v;
  bool bcast;
} LoopArg;

typedef struct Loop {
  LoopArg in[MAX_LOOP];
  int nin;
  Value *out[MAX_LOOP];
  const char *op[MAX_LOOP];     /* "=", "+=", "-=" */
  bool out_bcast[MAX_LOOP];
  SExpr *expr[MAX_LOOP];
  int nout;
  int64_t n, inner;       /* elements; broadcast size (0: none) */
} Loop;

static SExpr *loop_arg(Loop *L, Value *v, bool bcast) {
  for (int i = 0; i < L->nin; i++)
    if (L->in[i].v == v && L->in[i].bcast == bcast) return sx_arg(i);
  L->in[L->nin].v = v;
  L->in[L->nin].bcast = bcast;
  return sx_arg(L->nin++);
}

static SExpr *operand(Loop *L, Value *v) { return loop_arg(L, v, numel(v) != L->n); }

static void loop_out(Loop *L, Value *v, const char *op, bool bcast, SExpr *x) {
  L->out[L->nout] = v;
  L->op[L->nout] = op;
  L->out_bcast[L->nout] = bcast;
  L->expr[L->nout++] = x;
}

static void emit_loop(Emit *e, Loop *L) {
  const char **argn = arena_alloc(sizeof(char *) * (size_t)(L->nin + 1));
  const char **lhs = arena_alloc(sizeof(char *) * (size_t)(L->nout + 1));
  P(e, "  {\n");
  /* Pointers: inputs const, outputs writable; a value both read and written
   * is declared once, writable. */
  for (int i = 0; i < L->nin; i++) {
    bool dup = false, written = false;
    for (int k = 0; k < i; k++) dup |= L->in[k].v == L->in[i].v;
    for (int k = 0; k < L->nout; k++) written |= L->out[k] == L->in[i].v;
    if (!dup && !written)
      P(e, "    const %s *%s = %s;\n", is_int(L->in[i].v) ? "int32_t" : e->R, cname(L->in[i].v),
        ref(e, L->in[i].v));
  }
  for (int k = 0; k < L->nout; k++) {
    bool dup = false;
    for (int j = 0; j < k; j++) dup |= L->out[j] == L->out[k];
    if (!dup) P(e, "    %s *%s = %s;\n", e->R, cname(L->out[k]), ref(e, L->out[k]));
  }
  for (int i = 0; i < L->nin; i++)
    argn[i] = arena_printf("%s[%s]", cname(L->in[i].v), L->in[i].bcast ? "j" : "i");
  for (int k = 0; k < L->nout; k++)
    lhs[k] = arena_printf("%s[%s]", cname(L->out[k]), L->out_bcast[k] ? "j" : "i");
  const char *ind = "      ";
  if (L->inner) {
    P(e, "    for (size_t r = 0; r < %" PRId64 "; r++)\n", L->n / L->inner);
    P(e, "      for (size_t j = 0; j < %" PRId64 "; j++) {\n", L->inner);
    P(e, "        const size_t i = r * %" PRId64 " + j;\n", L->inner);
    ind = "        ";
  } else {
    P(e, "    for (size_t i = 0; i < %" PRId64 "; i++) {\n", L->n);
  }
  cg_emit_exprs(e->o, L->expr, lhs, L->op, L->nout, argn, ind, e->f64);
  P(e, L->inner ? "      }\n  }\n" : "    }\n  }\n");
}

/* Forward: a chain of elementwise nodes as one loop. */
static void emit_chain(Emit *e, Node **ch, int len) {
  Loop L = {0};
  L.n = numel(ch[0]->out);
  SExpr *prev = NULL;
  for (int k = 0; k < len; k++) {
    Node *c = ch[k];
    SExpr *ops[IR_MAXIN];
    for (int i = 0; i < c->nin; i++)
      ops[i] = k > 0 && c->in[i] == ch[k - 1]->out ? prev : operand(&L, c->in[i]);
    int64_t b = bcast_of(c);
    if (b) L.inner = b;
    prev = cg_op_expr(c, ops);
    if (chain_value_stored(e, ch, len, k)) loop_out(&L, c->out, "=", false, prev);
  }
  comment(e, ch, len);
  emit_loop(e, &L);
}

/* Backward elementwise ops: every input gradient in one loop. */
static void emit_bwd_loop(Emit *e, Node *n, int i) {
  Loop L = {0};
  Value *dy = n->in[0];
  L.n = numel(dy);
  SExpr *gdy = loop_arg(&L, dy, false);
  int nx = n->op == OP_MAP_BWD ? n->nin - 1 : n->op == OP_SCALE_BWD ? 1 : 2;
  SExpr *x[IR_MAXIN];
  for (int k = 0; k < nx; k++) {
    Value *v = n->in[k + 1];
    bool bc = numel(v) != L.n;
    if (bc) L.inner = numel(v);
    x[k] = n->op == OP_MUL_BWD || n->op == OP_MAP_BWD ? loop_arg(&L, v, bc) : NULL;
  }
  bool assigned[IR_MAXOUT] = {0};
  for (int k = 0; k < n->nout && k < nx; k++) {
    Value *d = n->outs[k];
    if (!d) continue;
    bool bc = numel(d) != L.n;
    SExpr *g;
    switch (n->op) {
    case OP_ADD_BWD: g = gdy; break;
    case OP_SUB_BWD: g = k == 0 ? gdy : sx_un(SX_NEG, gdy); break;
    case OP_MUL_BWD: g = sx_bin(SX_MUL, gdy, x[1 - k]); break;
    case OP_SCALE_BWD: g = sx_bin(SX_MUL, gdy, sx_const(n->a.f[0])); break;
    default: g = sx_bin(SX_MUL, gdy, cg_fn_expr(n->a.fn, k, x)); break;
    }
    bool dup = false;
    for (int j = 0; j < k; j++) dup |= n->outs[j] == d;
    const char *op = "+=";
    if (!bc && !dup && first_write(e, d, i)) {
      op = "=";
      assigned[k] = true;
    } else if (n->op == OP_SUB_BWD && k == 1) {
      op = "-=";
      g = gdy;
    }
    loop_out(&L, d, op, bc, g);
  }
  comment(e, &n, 1);
  zero_outputs(e, n, i, assigned);
  emit_loop(e, &L);
}

/* ---- kernel calls ---- */

/* 2D tensor parallelism: a SUMMA matmul (runtime/dist_summa.h), forward
 * (y = x·wᵀ) or backward (dx, dw accumulate; the bias add is its own node),
 * one line per argument group. */
static void emit_summa(Emit *e, Node *n) {
  bool fwd = n->op == OP_MATMUL;
  Value *x = n->in[fwd ? 0 : 1], *w = n->in[fwd ? 1 : 2];
  const char *row = rt_axis((int)n->a.i[1]), *col = rt_axis((int)n->a.i[2]);
  const char *fn = arena_printf("rt_summa_%s%s(", fwd ? "forward" : "backward", e->S);
  int ind = 2 + (int)strlen(fn);
  P(e, "  %smesh.comm[%s], mesh.comm[%s],\n", fn, row, col);
  P(e, "%*s&mesh.bytes[%s], &mesh.bytes[%s],\n", ind, "", row, col);
  if (fwd)
    P(e, "%*s%s, %s, %s, NULL,\n", ind, "", ref(e, n->out), ref(e, x), ref(e, w));
  else
    P(e, "%*s%s, %s, NULL, %s, %s, %s,\n", ind, "", ref(e, n->outs[0]), ref(e, n->outs[1]),
      ref(e, n->in[0]), ref(e, x), ref(e, w));
  P(e, "%*s%" PRId64 ", %" PRId64 ", %" PRId64 ", %s);\n", ind, "", rows(x), last_dim(x),
    w->shape.d[0].n, ref(e, n->scratch));
}

/* A layernorm / rmsnorm with the channels split over a mesh axis (the grid
 * row): statistics all-reduced per row (runtime/dist_summa.h).  Lines:
 * communicator; outputs; inputs; sizes and scratch. */
static void emit_norm_split(Emit *e, Node *n) {
  Value **x = n->in, **d = n->outs;
  const char *ax = rt_axis((int)n->a.i[1]);
  bool ln = n->op == OP_LAYERNORM || n->op == OP_LAYERNORM_BWD;
  bool fwd = n->op == OP_LAYERNORM || n->op == OP_RMSNORM;
  const char *fn = arena_printf("rt_%s_split_%s%s(", ln ? "layernorm" : "rmsnorm",
                                fwd ? "forward" : "backward", e->S);
  int ind = 2 + (int)strlen(fn);
  const Value *xin = x[fwd ? 0 : 1];
  P(e, "  %smesh.comm[%s], &mesh.bytes[%s],\n", fn, ax, ax);
  if (fwd && ln)
    P(e, "%*s%s, %s, %s,\n%*s%s, %s, %s,\n", ind, "", ref(e, d[0]), ref(e, d[1]), ref(e, d[2]),
      ind, "", ref(e, x[0]), ref(e, x[1]), ref(e, x[2]));
  else if (fwd)
    P(e, "%*s%s, %s,\n%*s%s, %s,\n", ind, "", ref(e, d[0]), ref(e, d[1]), ind, "", ref(e, x[0]),
      ref(e, x[1]));
  else if (ln)
    P(e, "%*s%s, %s, %s,\n%*s%s, %s, %s, %s, %s,\n", ind, "", ref(e, d[0]), ref(e, d[1]),
      ref(e, d[2]), ind, "", ref(e, x[0]), ref(e, x[1]), ref(e, x[2]), ref(e, x[3]), ref(e, x[4]));
  else
    P(e, "%*s%s, %s,\n%*s%s, %s, %s, %s,\n", ind, "", ref(e, d[0]), ref(e, d[1]), ind, "",
      ref(e, x[0]), ref(e, x[1]), ref(e, x[2]), ref(e, x[3]));
  P(e, "%*s%" PRId64 ", %" PRId64 ", %" PRId64 ", ", ind, "", rows(xin), last_dim(xin), n->a.i[2]);
  if (fwd) P(e, "%.9g, ", n->a.f[0]);
  P(e, "(double *)%s);\n", ref(e, n->scratch));
}

static void emit_fwd(Emit *e, Node *n, int i) {
  Value **x = n->in, *y = n->out;
  const char *S = e->S;
  switch (n->op) {
  case OP_FILL: {
    char lit[64];
    cg_literal(lit, sizeof lit, n->a.f[0], e->f64);
    comment(e, &n, 1);
    P(e, "  *%s = %s;\n", ref(e, y), lit);
    return;
  }
  case OP_RECV:
    comment(e, &n, 1);
    P(e, "  /* %s: received from stage %d before backward() */\n", ref(e, y), e->stage + 1);
    return;
  case OP_MATMUL: {
    if (ir_summa_q(n)) {
      comment(e, &n, 1);
      emit_summa(e, n);
      return;
    }
    Node *a = e->bias[i];
    Node *ns[2] = {n, a};
    comment(e, ns, a ? 2 : 1);
    P(e, "  rt_matmul_forward%s(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");\n", S,
      ref(e, a ? a->out : y), ref(e, x[0]), ref(e, x[1]), a ? ref(e, a->in[1]) : "NULL",
      rows(x[0]), last_dim(x[0]), last_dim(y));
    return;
  }
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_SCALE: case OP_GELU: case OP_RELU:
  case OP_SILU: case OP_MAP: {
    int len = e->chain_len[i] ? e->chain_len[i] : 1;
    Node *ch[MAX_CHAIN];
    ch[0] = n;
    for (int k = 1; k < len; k++) ch[k] = e->fwd_reader[ch[k - 1]->out->id];
    if (len == 1 && (n->op == OP_GELU || n->op == OP_RELU || n->op == OP_SILU)) {
      comment(e, &n, 1);
      P(e, "  rt_%s_forward%s(%s, %s, %" PRId64 ");\n", ir_ops[n->op].name, S, ref(e, y),
        ref(e, x[0]), numel(y));
      return;
    }
    emit_chain(e, ch, len);
    return;
  }
  case OP_LAYERNORM:
    comment(e, &n, 1);
    if (ir_norm_split(n))
      emit_norm_split(e, n);
    else if (n->a.f[0] == 1e-5)
      P(e, "  rt_layernorm_forward%s(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S,
        ref(e, y), ref(e, n->outs[1]), ref(e, n->outs[2]), ref(e, x[0]), ref(e, x[1]),
        ref(e, x[2]), rows(x[0]), last_dim(x[0]));
    else
      P(e, "  rt_layernorm_forward_eps%s(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %.9g);\n",
        S, ref(e, y), ref(e, n->outs[1]), ref(e, n->outs[2]), ref(e, x[0]), ref(e, x[1]),
        ref(e, x[2]), rows(x[0]), last_dim(x[0]), n->a.f[0]);
    return;
  case OP_RMSNORM:
    comment(e, &n, 1);
    if (ir_norm_split(n)) {
      emit_norm_split(e, n);
      return;
    }
    P(e, "  rt_rmsnorm_forward%s(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %.9g);\n", S, ref(e, y),
      ref(e, n->outs[1]), ref(e, x[0]), ref(e, x[1]), rows(x[0]), last_dim(x[0]), n->a.f[0]);
    return;
  case OP_SOFTMAX:
    comment(e, &n, 1);
    P(e, "  rt_softmax_forward%s(%s, %s, %" PRId64 ", %" PRId64 ");\n", S, ref(e, y), ref(e, x[0]),
      rows(x[0]), last_dim(x[0]));
    return;
  case OP_DROPOUT:
    comment(e, &n, 1);
    P(e, "  rt_dropout_forward%s(%s, %s, %" PRId64 ", %.9g, seed, (uint64_t)step,\n"
         "                      DROPOUT_SITE(%d) + (uint64_t)row0 * %" PRId64 ");\n",
      S, ref(e, y), ref(e, x[0]), numel(y), n->a.f[0], n->id, numel(y) / e->in0->shape.d[0].n);
    return;
  case OP_GATHER:
    comment(e, &n, 1);
    if (n->a.i[0]) {
      int64_t vl = x[0]->shape.d[0].n;
      P(e, "  rt_check(cg_embedding_range_forward%s(%s, %s, %s, %" PRId64 ", mesh.coord[%s] * %" PRId64
           ", %" PRId64 ", %" PRId64 ", VOCAB));  // vocab-parallel: rows outside this shard are 0\n",
        S, ref(e, y), ref(e, x[1]), ref(e, x[0]), numel(x[1]), rt_axis((int)n->a.i[2]), vl, vl,
        last_dim(x[0]));
      return;
    }
    P(e, "  rt_check(rt_embedding_forward%s(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 "));\n",
      S, ref(e, y), ref(e, x[1]), ref(e, x[0]), numel(x[1]), x[0]->shape.d[0].n, last_dim(x[0]));
    return;
  case OP_ALLREDUCE:
    comment(e, &n, 1);
    if (off(e, y) != off(e, x[0]))
      P(e, "  memcpy(%s, %s, %" PRId64 ");\n", ref(e, y), ref(e, x[0]), nbytes(e, y));
    P(e, "  rt_allreduce(&mesh, %s, %s, %" PRId64 ", %d);\n", rt_axis((int)n->a.i[2]), ref(e, y),
      numel(y), e->f64 ? 8 : 4);
    return;
  case OP_ALLGATHER:
  case OP_ALLGATHER_G:
  case OP_REDUCE_SCATTER:
  case OP_SHARD: {
    bool gather = n->op == OP_ALLGATHER || n->op == OP_ALLGATHER_G;
    int64_t outer, inner;
    ir_dim_split(&(gather ? y : x[0])->shape, (int)n->a.i[0], (int)n->a.i[1], &outer, &inner);
    comment(e, &n, 1);
    if (n->op == OP_SHARD)
      P(e, "  cg_chunk_copy(%s, %s, %" PRId64 ", %" PRId64 ", %d, mesh.coord[%s], %d);\n", ref(e, y),
        ref(e, x[0]), outer, inner, (int)n->a.i[1], rt_axis((int)n->a.i[2]), e->f64 ? 8 : 4);
    else
      P(e, "  rt_%s_dim(&mesh, %s, %s, %s, %" PRId64 ", %" PRId64 ", %d, %s);\n",
        gather ? "allgather" : "reduce_scatter", rt_axis((int)n->a.i[2]), ref(e, y), ref(e, x[0]),
        outer, inner, e->f64 ? 8 : 4, n->scratch ? ref(e, n->scratch) : "NULL");
    return;
  }
  case OP_TP_COPY:
  case OP_RESHAPE:
    comment(e, &n, 1);
    P(e, "  memcpy(%s, %s, %" PRId64 ");  // not a view in the plan: a copy\n", ref(e, y),
      ref(e, x[0]), nbytes(e, y));
    return;
  case OP_SLICE:
    comment(e, &n, 1);
    P(e, "  rt_slice_cols_forward%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ");\n",
      S, ref(e, y), ref(e, x[0]), rows(x[0]), last_dim(x[0]), n->a.i[0], n->a.i[1]);
    return;
  case OP_ROPE: {
    const Shape *s = &x[0]->shape;
    comment(e, &n, 1);
    P(e, "  rt_rope_forward%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %.9g, %s);\n",
      S, ref(e, y), ref(e, x[0]), s->d[0].n, s->d[1].n, s->d[2].n, s->d[3].n, n->a.f[0],
      rope_t0(e, n, s));
    return;
  }
  case OP_ATTENTION: {
    const Shape *q = &x[0]->shape, *k = &x[1]->shape;
    comment(e, &n, 1);
    if (ir_ring_size(n) > 1) {
      emit_ring_attention(e, n);
      return;
    }
    P(e, "  rt_attention_forward%s(%s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64
         ", %" PRId64 ", %" PRId64 ", %d);\n",
      S, ref(e, y), ref(e, n->outs[1]), ref(e, x[0]), ref(e, x[1]), ref(e, x[2]), q->d[0].n,
      q->d[1].n, q->d[2].n, k->d[2].n, q->d[3].n, n->a.i[0] ? 1 : 0);
    return;
  }
  case OP_CROSS_ENTROPY: {
    int s = e->ce_slot[i];
    comment(e, &n, 1);
    if (n->a.i[1]) {
      int64_t vl = last_dim(x[0]);
      P(e, "  rt_check(rt_vp_crossentropy_forward%s(&mesh, %s, &ce_loss[%d], %s, %s, %" PRId64
           ", %" PRId64 ", mesh.coord[%s] * %" PRId64 ", %s, (double *)%s));\n",
        S, rt_axis((int)n->a.i[3]), s, ref(e, x[0]), ref(e, x[1]), rows(x[0]), vl,
        rt_axis((int)n->a.i[3]), vl,
        e->data == DATA_TOKENS ? "VOCAB" : arena_printf("%" PRId64, vl * n->a.i[2]), /* classes */
        ref(e, n->scratch));
      P(e, "  ce_rows[%d] = %" PRId64 ";\n", s, rows(x[0]));
      P(e, "  *%s = (%s)ce_loss[%d];\n", ref(e, y), e->R, s);
      return;
    }
    P(e, "  rt_check(rt_crossentropy_forward%s(&ce_loss[%d], &ce_rows[%d], NULL, NULL, %s, %s, "
         "%" PRId64 ", %" PRId64 "));\n",
      S, s, s, ref(e, x[0]), ref(e, x[1]), rows(x[0]), last_dim(x[0]));
    P(e, "  *%s = (%s)ce_loss[%d];\n", ref(e, y), e->R, s);
    return;
  }
  default:
    P(e, "  #error \"no code for op %s\"\n", ir_ops[n->op].name);
  }
}

/* The communicator of the gradient buckets and ZeRO shards: the data
 * ranks, dp or (under ring attention) dp x sp. */
static const char *zax(const Emit *e) { return e->ring > 1 ? "RT_AX_DATA" : "RT_AX_DP"; }

/* The bucket index of a gradient-bucket node's input. */
static int bucket_index(Emit *e, const Node *n) {
  for (int k = 0; k < e->g->buckets.len; k++)
    if (((Bucket *)e->g->buckets.data[k])->grads == n->in[0]) return k;
  return -1;
}

/* A bucket's collective started in the last microbatch without blocking
 * (the plain dp all-reduce, ZeRO-1's reduce-scatter). */
static bool overlapped(const Node *n) {
  return n->op == OP_GRAD_ALLREDUCE || (n->op == OP_GRAD_REDUCE_SCATTER && n->a.i[3]);
}

/* The collectives the backward starts (one per bucket with gradients). */
static int n_grad_reqs(Emit *e) {
  int q = 0;
  for (int i = e->g->nfwd; i < e->nn; i++) q += overlapped(e->g->nodes.data[i]);
  return q;
}

/* A gradient bucket's reduction (passes/zero.c): ZeRO-2/3 reduce-scatter
 * into this rank's gradient shard every microbatch; plain dp (all-reduce)
 * and ZeRO-1 (reduce-scatter) start it in the last microbatch without
 * blocking (sync_gradients waits). */
static void emit_bucket_reduce(Emit *e, Node *n) {
  int k = bucket_index(e, n), es = e->f64 ? 8 : 4;
  comment(e, &n, 1);
  if (!overlapped(n)) {
    P(e, "  rt_reduce_scatter_acc(&mesh, %s, %s, %s, %" PRId64 ", %d, %s);\n", zax(e), ref(e, n->out),
      ref(e, n->in[0]), numel(n->out), es, ref(e, n->scratch));
    return;
  }
  int q = 0;
  for (int i = e->g->nfwd; i < n->id; i++) q += overlapped(e->g->nodes.data[i]);
  P(e, "  if (last_microbatch) {  // bucket %s: overlaps the rest of the backward\n",
    ((Bucket *)e->g->buckets.data[k])->name);
  if (n->op == OP_GRAD_ALLREDUCE)
    P(e, "    rt_iallreduce(&mesh, %s, %s, %" PRId64 ", %d, &grad_req[%d]);\n", zax(e), ref(e, n->in[0]),
      numel(n->in[0]), es, q);
  else
    P(e, "    rt_ireduce_scatter(&mesh, %s, %s, %s, %" PRId64 ", %d, &grad_req[%d]);\n", zax(e),
      ref(e, n->out), ref(e, n->in[0]), numel(n->out), es, q);
  P(e, "    rt_progress(&mesh, %d, grad_req);  // and the earlier buckets' go on\n  }\n", q + 1);
}

static void emit_bwd(Emit *e, Node *n, int i) {
  Value **x = n->in, **d = n->outs;
  const char *S = e->S;
  switch (n->op) {
  case OP_FILL:  /* and the adjoints' collectives: forward ops writing new buffers */
  case OP_RECV:
  case OP_ALLREDUCE: case OP_ALLGATHER: case OP_ALLGATHER_G: case OP_REDUCE_SCATTER: case OP_SHARD:
    emit_fwd(e, n, i);
    return;
  case OP_GRAD_ALLREDUCE: case OP_GRAD_REDUCE_SCATTER:
    emit_bucket_reduce(e, n);
    return;
  case OP_ADD_BWD: case OP_SUB_BWD: case OP_MUL_BWD: case OP_SCALE_BWD: case OP_MAP_BWD:
    emit_bwd_loop(e, n, i);
    return;
  default:
    break;
  }
  if (n->op == OP_MATMUL_BWD && e->dbias[i]) {
    /* The bias gradient of the add after this matmul, summed by the same call. */
    Node *ns[2] = {e->dbias_node[i], n};
    P(e, "  // %s  %s; %s\n", where(n), ir_stmt(ns[0]), ir_stmt(n));
    P(e, "  // %s, %s, %s -> %s, %s, %s\n", shape_of(e, n->in[0]), shape_of(e, n->in[1]),
      shape_of(e, n->in[2]), n->outs[0] ? shape_of(e, n->outs[0]) : "_",
      n->outs[1] ? shape_of(e, n->outs[1]) : "_", shape_of(e, e->dbias[i]));
  } else {
    comment(e, &n, 1);
  }
  if (n->op != OP_CROSS_ENTROPY_BWD || n->a.i[1]) zero_outputs(e, n, i, NULL);
  if (ir_summa_q(n)) {
    emit_summa(e, n);
    return;
  }
  if (ir_norm_split(n)) {
    emit_norm_split(e, n);
    return;
  }
  switch (n->op) {
  case OP_MATMUL_BWD: {
    Value *db = e->dbias[i];
    P(e, "  rt_matmul_backward%s(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");\n",
      S, ref(e, d[0]), ref(e, d[1]), ref(e, db), ref(e, x[0]), ref(e, x[1]), ref(e, x[2]),
      rows(x[1]), last_dim(x[1]), last_dim(x[0]));
    return;
  }
  case OP_LAYERNORM_BWD:
    P(e, "  rt_layernorm_backward%s(%s, %s, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S,
      ref(e, d[0]), ref(e, d[1]), ref(e, d[2]), ref(e, x[0]), ref(e, x[1]), ref(e, x[2]),
      ref(e, x[3]), ref(e, x[4]), rows(x[1]), last_dim(x[1]));
    return;
  case OP_RMSNORM_BWD:
    P(e, "  rt_rmsnorm_backward%s(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S,
      ref(e, d[0]), ref(e, d[1]), ref(e, x[0]), ref(e, x[1]), ref(e, x[2]), ref(e, x[3]),
      rows(x[1]), last_dim(x[1]));
    return;
  case OP_GELU_BWD: case OP_RELU_BWD: case OP_SILU_BWD: {
    const char *nm = n->op == OP_GELU_BWD ? "gelu" : n->op == OP_RELU_BWD ? "relu" : "silu";
    P(e, "  rt_%s_backward%s(%s, %s, %s, %" PRId64 ");\n", nm, S, ref(e, d[0]), ref(e, x[1]),
      ref(e, x[0]), numel(x[0]));
    return;
  }
  case OP_SOFTMAX_BWD:
    P(e, "  rt_softmax_backward%s(%s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S, ref(e, d[0]),
      ref(e, x[0]), ref(e, x[1]), rows(x[0]), last_dim(x[0]));
    return;
  case OP_DROPOUT_BWD:
    P(e, "  rt_dropout_backward%s(%s, %s, %" PRId64 ", %.9g, seed, (uint64_t)step,\n"
         "                       DROPOUT_SITE(%" PRId64 ") + (uint64_t)row0 * %" PRId64 ");\n",
      S, ref(e, d[0]), ref(e, x[0]), numel(x[0]), n->a.f[0], n->a.i[1],
      numel(x[0]) / e->in0->shape.d[0].n);
    return;
  case OP_ACC:
    P(e, "  cg_acc%s(%s, %s, %" PRId64 ");\n", S, ref(e, d[0]), ref(e, x[0]), numel(x[0]));
    return;
  case OP_SHARD_BWD: {
    int64_t outer, inner;
    ir_dim_split(&x[1]->shape, (int)n->a.i[0], (int)n->a.i[1], &outer, &inner);
    P(e, "  cg_chunk_acc%s(%s, %s, %" PRId64 ", %" PRId64 ", %d, mesh.coord[%s]);\n", S, ref(e, d[0]),
      ref(e, x[0]), outer, inner, (int)n->a.i[1], rt_axis((int)n->a.i[2]));
    return;
  }
  case OP_GATHER_BWD:
    if (n->a.i[0]) {
      int64_t vl = x[1]->shape.d[0].n;
      P(e, "  cg_embedding_range_backward%s(%s, %s, %s, %" PRId64 ", mesh.coord[%s] * %" PRId64
           ", %" PRId64 ", %" PRId64 ");\n",
        S, ref(e, d[0]), ref(e, x[0]), ref(e, x[2]), numel(x[2]), rt_axis((int)n->a.i[2]), vl, vl,
        last_dim(x[1]));
      return;
    }
    P(e, "  rt_embedding_backward%s(%s, %s, %s, %" PRId64 ", %" PRId64 ");\n", S, ref(e, d[0]),
      ref(e, x[0]), ref(e, x[2]), numel(x[2]), last_dim(x[1]));
    return;
  case OP_SLICE_BWD:
    P(e, "  rt_slice_cols_backward%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ");\n",
      S, ref(e, d[0]), ref(e, x[0]), rows(x[1]), last_dim(x[1]), n->a.i[0], n->a.i[1]);
    return;
  case OP_ROPE_BWD: {
    const Shape *s = &x[1]->shape;
    P(e, "  rt_rope_backward%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %.9g, %s);\n",
      S, ref(e, d[0]), ref(e, x[0]), s->d[0].n, s->d[1].n, s->d[2].n, s->d[3].n, n->a.f[0],
      rope_t0(e, n, s));
    return;
  }
  case OP_ATTENTION_BWD: {
    const Shape *q = &x[1]->shape, *k = &x[2]->shape;
    if (ir_ring_size(n) > 1) {
      emit_ring_attention(e, n);
      return;
    }
    P(e, "  rt_attention_backward%s(%s, %s, %s,\n      %s, %s, %s, %s, %s, %s, %" PRId64
         ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d);\n",
      S, ref(e, d[0]), ref(e, d[1]), ref(e, d[2]), ref(e, x[0]), ref(e, x[1]), ref(e, x[2]),
      ref(e, x[3]), ref(e, x[4]), ref(e, x[5]), q->d[0].n, q->d[1].n, q->d[2].n, k->d[2].n,
      q->d[3].n, n->a.i[0] ? 1 : 0);
    return;
  }
  case OP_CROSS_ENTROPY_BWD: {
    int s = e->ce_slot[n->fwd->id];
    if (n->a.i[1]) {
      int64_t vl = last_dim(x[1]);
      P(e, "  rt_vp_crossentropy_backward_acc%s(&mesh, %s, %s, %s, %s, %" PRId64 ", %" PRId64
           ", mesh.coord[%s] * %" PRId64 ", *%s, ce_rows[%d], (double *)%s);\n",
        S, rt_axis((int)n->a.i[3]), ref(e, d[0]), ref(e, x[1]), ref(e, x[2]), rows(x[1]), vl,
        rt_axis((int)n->a.i[3]), vl, ref(e, x[0]), s, ref(e, n->scratch));
      return;
    }
    bool direct = first_write(e, d[0], i);
    P(e, "  rt_crossentropy_backward%s%s(%s, %s, NULL, %s, %" PRId64 ", %" PRId64 ", *%s, "
         "ce_rows[%d]);%s\n",
      direct ? "" : "_acc", S, ref(e, d[0]), ref(e, x[1]), ref(e, x[2]), rows(x[1]),
      last_dim(x[1]), ref(e, x[0]), s, direct ? "  // writes: the first contribution" : "");
    return;
  }
  default:
    P(e, "  #error \"no code for op %s\"\n", ir_ops[n->op].name);
  }
}

/* ---- sections ---- */

static void emit_c_string(Emit *e, const char *name, const char *text) {
  P(e, "static const char %s[] =\n", name);
  const char *s = text;
  while (*s) {
    P(e, "    \"");
    for (; *s && *s != '\n'; s++) {
      if (*s == '"' || *s == '\\') P(e, "\\%c", *s);
      else P(e, "%c", *s);
    }
    if (*s == '\n') {
      P(e, "\\n");
      s++;
    }
    P(e, "\"%s\n", *s ? "" : ";");
  }
  if (!*text) P(e, "    \"\";\n");
}

static char *plan_text(Module *m, const char *prefix) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return arena_strdup("");
  report_plan(f, m, prefix);
  fclose(f);
  char *s = arena_strdup(buf ? buf : "");
  free(buf);
  return s;
}

static const char *commas(int64_t n) {
  char b[64];
  report_commas(b, sizeof b, n);
  return arena_strdup(b);
}

static void emit_header(Emit *e) {
  Module *m = e->m;
  const char *src = m->source;
  P(e, "/* %s — training program for model '%s' (%s), generated by shardc %s\n", "model.c",
    e->g->model, src, SHARDC_VERSION);
  P(e, " * for the cpu target%s.  Do not edit: regenerate with\n", e->f64 ? " in f64 (gradient checks)" : "");
  P(e, " *   shardc build %s%s\n", src, e->f64 ? " --precision=fp64" : "");
  P(e, " *\n");
  char *plan = plan_text(m, " * ");
  fputs(plan, e->o);
  const MemPlan *mp = &m->mem;
  P(e, " *\n");
  P(e, " * Arena per rank: %s bytes = persistent %s (params %s, grads %s, optimizer\n",
    commas(mp->arena_bytes * e->scale), commas(mp->persistent_bytes * e->scale),
    commas(mp->param_bytes * e->scale), commas(mp->grad_bytes * e->scale));
  P(e, " * %s) + transient peak %s (%d buffers, peak at node %d).\n",
    commas(mp->optstate_bytes * e->scale), commas(mp->transient_peak * e->scale), mp->nbuffers,
    mp->peak_node);
  P(e, " *\n");
  P(e, " * forward() and backward() run one microbatch as straight-line calls into\n");
  P(e, " * libshardrt on buffers at their planned arena offsets: F(offset) is a %s\n", e->R);
  P(e, " * buffer, I(offset) an int32 one.  Backward calls accumulate (+=) into\n");
  P(e, " * gradients.  Fused: %d bias add%s into matmuls, %d bias gradient%s into matmul\n",
    e->nbias, e->nbias == 1 ? "" : "s", e->ndbias, e->ndbias == 1 ? "" : "s");
  P(e, " * backward, %d elementwise chain%s (%d ops) into single loops; transient\n", e->nchains,
    e->nchains == 1 ? "" : "s", e->nchained);
  P(e, " * gradients are zeroed right before their first writer (or written with =).\n");
  P(e, " */\n");
}

static void emit_prelude(Emit *e) {
  Module *m = e->m;
  const TrainCfg *t = &m->train;
  const MemPlan *mp = &m->mem;
  const Plan *p = &t->plan;
  int mb = p->mb > 0 ? p->mb : 1;
  P(e, "#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
       "#include <string.h>\n#include <unistd.h>\n\n#include \"rt_codegen_support.h\"\n#include \"shardrt.h\"\n"
       "#ifdef SHARDC_MPI\n#include <mpi.h>\n#endif\n%s%s%s\n", e->dist ? "#include \"dist.h\"\n" : "",
    e->ring ? "#include \"dist_ring.h\"\n" : "", e->q ? "#include \"dist_summa.h\"\n" : "");
  if (e->data == DATA_TOKENS) {
    P(e, "/* Training text when --data is not given (`shardc build` passes an absolute path). */\n");
    P(e, "#ifndef DEFAULT_DATA\n#define DEFAULT_DATA \"%s\"\n#endif\n\n", display_data(m));
  }
  P(e, "/* ---- the plan ---- */\n");
#define DEF(name, comment, ...)                                     \
  do {                                                              \
    char v_[64];                                                    \
    snprintf(v_, sizeof v_, __VA_ARGS__);                           \
    if (*(comment)) P(e, "#define %-16s %-11s /* %s */\n", name, v_, comment); \
    else P(e, "#define %-16s %s\n", name, v_);                    \
  } while (0)
  int ndev = t->mesh ? t->mesh->ndev : 1;
  DEF("RANKS", arena_printf("mesh %s: launch with mpirun -np %d", t->mesh ? t->mesh->name : "-", ndev),
      "%d", ndev);
  DEF("DP", "data-parallel ranks, each on its own rows", "%d", p->dp);
  if (e->dist) {
    DEF("TP", "tensor-parallel ranks, each on its shards of the layers", "%d", e->tp);
    if (e->q) DEF("Q", "tp2d: the q x q grid of the TP ranks (SUMMA)", "%d", e->q);
    if (e->ring) DEF("SP", "ring attention: sequence shards, each on SEQ / SP tokens of a row", "%d", e->ring);
    DEF("COMM_BYTES", "planned bytes sent per rank per step", "%" PRIu64 "ULL",
        plan_comm_bytes(m, NULL) * (uint64_t)e->scale);
  }
  if (e->dist && e->data == DATA_TOKENS) DEF("VOCAB", "token ids are below it", "%d", e->vocab);
  if (e->zstage >= 0) DEF("NBUCKETS", "gradient buckets (one per layer)", "%d", e->g->buckets.len);
  if (e->zstage >= 1) {
    DEF("ZSHARD", arena_printf("ZeRO-%d: elements of this rank's chunk of every bucket", e->zstage),
        "%" PRId64 "LL", mp->zero_chunk);
    DEF("ZGROUP", e->ring > 1 ? "ranks sharing the chunks: dp x sp" : "ranks sharing the chunks: dp",
        "%s", e->ring > 1 ? "(DP * SP)" : "DP");
    DEF("GSHARD_OFFSET", "its summed gradients", "%" PRId64 "LL", mp->zero_gshard_offset * e->scale);
    DEF("OPT_OFFSET", "optimizer state of its chunks", "%" PRId64 "LL", mp->zero_opt_offset * e->scale);
  }
  DEF("MICROBATCHES", "forward+backward passes per step and rank", "%d", mb);
  DEF("MICROBATCH", "rows per pass", "%lld", (long long)t->microbatch);
  DEF("BATCH", "rows per step over all ranks", "%lld", (long long)t->batch);
  DEF("SEQ", "tokens per row", "%d", e->seq);
  DEF("ARENA_BYTES", "the planned peak per rank", "%" PRId64 "LL", mp->arena_bytes * e->scale);
  DEF("PERSISTENT_BYTES", "params, grads, optimizer state", "%" PRId64 "LL",
      mp->persistent_bytes * e->scale);
  DEF("GRADS_OFFSET", "all parameter gradients, one range", "%" PRId64 "LL",
      mp->param_bytes * e->scale);
  DEF("GRADS_BYTES", "", "%" PRId64 "LL", mp->grad_bytes * e->scale);
  if (e->pp && e->nchunks) {
    DEF("PP", "pipeline ranks, each with VCHUNKS stages", "%d", p->pp);
    DEF("VCHUNKS", arena_printf("chunks per rank (%s)", sched_name(p->schedule)), "%d", e->nchunks);
    DEF("STAGE", "this program's pipeline rank", "%d", e->stage);
  } else if (e->pp) {
    DEF("PP", "pipeline stages, one per pp rank", "%d", e->nstages);
    DEF("STAGE", "this program's stage", "%d", e->stage);
    DEF("STASH_OFFSET", "the stash slots: a microbatch's forward values", "%" PRId64 "LL",
        mp->stash_offset * e->scale);
    DEF("STASH_BYTES", "one slot", "%" PRId64 "LL", mp->stash_bytes * e->scale);
    DEF("SLOTS", arena_printf("microbatches in flight at most (%s)", sched_name(p->schedule)),
        "%d", mp->slots);
  }
#undef DEF
  if (e->dropout && e->nchunks) /* node ids restart in every stage; the executor sets it */
    P(e, "/* Dropout masks: site = stage (of the chunk being run) and forward node, then\n"
         " * the element's global index (a pipeline draws other masks than one rank). */\n"
         "static int dropout_stage;\n"
         "#define DROPOUT_SITE(node) (((uint64_t)dropout_stage << 56) | ((uint64_t)(node) << 40))\n");
  else if (e->dropout && e->pp) /* node ids restart in every stage */
    P(e, "/* Dropout masks: site = stage and forward node, then the element's global\n"
         " * index (a pipeline draws other masks than one rank does). */\n"
         "#define DROPOUT_SITE(node) (((uint64_t)STAGE << 56) | ((uint64_t)(node) << 40))\n");
  else if (e->dropout)
    P(e, "/* Dropout masks: site = forward node, then the element's global index. */\n"
         "#define DROPOUT_SITE(node) ((uint64_t)(node) << 40)\n");
  P(e, "\nstatic unsigned char *arena;\n");
  P(e, "#define F(off) ((%s *)(arena + (off)))\n", e->R);
  P(e, "#define I(off) ((int32_t *)(arena + (off)))\n\n");
  if (e->pp)
    P(e, "/* The stash slot of the microbatch being run (set by run_microbatches). */\n"
         "static unsigned char *stash;\n"
         "#define FS(off) ((%s *)(stash + (off)))\n"
         "#define IS(off) ((int32_t *)(stash + (off)))\n\n", e->R);
  if (e->dist) P(e, "/* The device mesh: this rank's coordinates and communicators (dist.h). */\nstatic RtMesh mesh;\n\n");
}

/* "256, 128": the dims of s, for a C initializer. */
static void emit_dims(Emit *e, const Shape *s) {
  for (int k = 0; k < s->ndim; k++) P(e, "%s%" PRId64, k ? ", " : "", s->d[k].n);
}


/* Parameter p's RtShard (dist.h) as a C initializer row: its full shape and
 * 0, 1 (tp) or 2 (the tp2d grid's row and column) split dims; the segments of
 * a fused q,k,v weight belong to its tp or tp-row split. */
static void emit_shard(Emit *e, const Value *p, int pp_owner) {
  P(e, "    {%d, {", p->gshape.ndim);
  emit_dims(e, &p->gshape);
  int ns = 0;
  for (int d = 0; d < p->shape.ndim; d++) ns += p->shard.axis[d] >= 0;
  P(e, "}, %d, {", ns);
  if (!ns) P(e, "{0}");
  for (int d = 0, k = 0; d < p->shape.ndim; d++) {
    int ax = p->shard.axis[d];
    if (ax < 0) continue;
    bool segs = (ax == AX_TP || ax == AX_TPR) && p->shard.nseg > 1;
    P(e, "%s{%d, %s, %d, {", k++ ? ", " : "", d, rt_axis(ax), segs ? p->shard.nseg : 1);
    if (segs)
      for (int j = 0; j < p->shard.nseg; j++) P(e, "%s%" PRId64, j ? ", " : "", p->shard.seg[j]);
    else
      P(e, "%" PRId64, p->gshape.d[d].n);
    P(e, "}}");
  }
  P(e, "}, %d},  // %s\n", pp_owner, p->name);
}

/* How many tp ranks hold the same elements of p: 1 when it is split over tp,
 * else tp; on the tp2d grid q per axis it is not split over. */
static int holders(Emit *e, const Value *p) {
  if (!e->q) return split_dim_of(p) >= 0 ? 1 : e->tp;
  int h = 1;
  if (!memchr(p->shard.axis, AX_TPR, IR_MAXDIM)) h *= e->q;
  if (!memchr(p->shard.axis, AX_TPC, IR_MAXDIM)) h *= e->q;
  return h;
}

/* p's gradient's weight in the global norm, a C initializer: 1 / its
 * holders, or 0 for the last pipeline stage's copy of a tied embedding. */
static const char *norm_weight(Emit *e, const Value *p) {
  int h = holders(e, p);
  return p->pp_shared && e->stage > 0 ? "0.0," : h == 1 ? "1.0," : arena_printf("1.0 / %d,", h);
}

/* The CgParam init kind and std of p (normal_scaled: 0.02/sqrt(nscaled)). */
static const char *init_kind(const Value *p) {
  return !strcmp(p->init, "ones") ? "CG_INIT_ONES"
         : !strcmp(p->init, "zeros") ? "CG_INIT_ZEROS" : "CG_INIT_NORMAL";
}
static const char *init_std(const Value *p, int nscaled) {
  double std = !strcmp(p->init, "normal_scaled") ? 0.02 / sqrt((double)nscaled)
               : !strcmp(p->init, "normal") ? 0.02 : 0;
  char lit[64];
  cg_literal(lit, sizeof lit, std, 1);
  return arena_strdup(lit);
}
static int count_scaled(const Graph *g) {
  int n = 0;
  for (int i = 0; i < g->params.len; i++) {
    const Value *p = g->params.data[i];
    n += p->init && !strcmp(p->init, "normal_scaled");
  }
  return n;
}

/* The full tensors of ps[0..n) (init, checkpoints) as `gparams`, packed in a
 * buffer of GLOBAL_BYTES with optimizer slots where grad[i]; init fields
 * refer to params[i] when `refs` (the same order), else are literals. */
static void emit_gparams(Emit *e, Value *const *ps, const bool *grad, int n, const char *count,
                         bool refs) {
  const Optimizer *o = &e->m->train.opt;
  bool adam = !strcmp(o->kind, "adamw"), mom = !adam && o->momentum > 0;
  int nscaled = count_scaled(e->pp ? e->m->whole : e->g);
  int64_t goff = 0;
  P(e, "/* Full tensors (init, checkpoints): offsets in a buffer of GLOBAL_BYTES. */\n");
  P(e, "static CgParam gparams[%s] = {\n", count);
  for (int i = 0; i < n; i++) {
    const Value *p = ps[i];
    int64_t ne = ir_numel(&p->gshape), sz = (ne * 4 + 63) / 64 * 64 * e->scale;
    int64_t o0 = goff, o1 = -1, o2 = -1;
    goff += sz;
    if (grad[i] && (adam || mom)) o1 = goff, goff += sz;
    if (grad[i] && adam) o2 = goff, goff += sz;
    P(e, "    {\"%s\", %d, {", p->name, p->gshape.ndim);
    emit_dims(e, &p->gshape);
    if (refs)
      P(e, "}, %" PRId64 ", %" PRId64 ", -1, %" PRId64 ", %" PRId64 ", params[%d].init, "
           "params[%d].std, params[%d].decay},\n", ne, o0, o1, o2, i, i, i);
    else
      P(e, "}, %" PRId64 ", %" PRId64 ", -1, %" PRId64 ", %" PRId64 ", %s, %s, %d},\n", ne, o0, o1,
        o2, init_kind(p), init_std(p, nscaled), p->decay ? 1 : 0);
  }
  P(e, "};\n#define GLOBAL_BYTES %" PRId64 "LL\n\n", goff);
}

/* A pipeline stage: the whole model's parameters as full tensors (init,
 * checkpoints), the stage holding each (pp_owner: the first that uses it)
 * and where this stage keeps it (local_of: index in params, or -1). */
static void emit_global_params_pp(Emit *e) {
  Module *m = e->m;
  Graph *w = m->whole;
  int ng = w->params.len;
  int *owner = arena_alloc(sizeof(int) * (size_t)ng), *local = arena_alloc(sizeof(int) * (size_t)ng);
  bool *grad = arena_alloc(sizeof(bool) * (size_t)ng);
  const Value **rep = arena_alloc(sizeof(Value *) * (size_t)ng);
  for (int i = 0; i < ng; i++) owner[i] = local[i] = -1;
  for (int s = m->nstages - 1; s >= 0; s--) {
    Graph *sg = m->stages[s];
    for (int i = 0; i < sg->params.len; i++) {
      Value *q = sg->params.data[i];
      owner[q->gidx] = s % m->train.plan.pp; /* the pipeline rank (interleaved: of chunk s / pp) */
      grad[q->gidx] |= q->grad != NULL;
      rep[q->gidx] = q;
      if (sg == e->g) local[q->gidx] = i;
      for (int j = 0; e->nchunks && j < e->g->params.len; j++) /* a chunk's: in the rank's list */
        if (e->g->params.data[j] == q) local[q->gidx] = j;
    }
  }
  P(e, "/* The whole model (every stage): NGLOBAL parameters, the sharding of each\n"
       " * with the stage holding it (a tied embedding: the first of the two), and\n"
       " * where this stage keeps it (-1: another stage). */\n");
  P(e, "#define NGLOBAL %d\n", ng);
  P(e, "static const RtShard shards[NGLOBAL] = {\n");
  for (int i = 0; i < ng; i++) emit_shard(e, rep[i], owner[i]);
  P(e, "};\n\n");
  P(e, "static const int local_of[NGLOBAL] = {");
  for (int i = 0; i < ng; i++) P(e, "%s%d,", i % 16 ? " " : "\n    ", local[i]);
  P(e, "\n};\n\n");
  emit_gparams(e, (Value *const *)w->params.data, grad, ng, "NGLOBAL", false);
  Graph *g = e->g;
  P(e, "/* Weight of each gradient in the global norm: 1 / the tp ranks holding the\n"
       " * same elements; 0 for the last stage's copy of a tied embedding. */\n");
  P(e, "static const double norm_w[NPARAMS] = {");
  for (int i = 0; i < g->params.len; i++)
    P(e, "%s%s", i % 8 ? " " : "\n    ", norm_weight(e, g->params.data[i]));
  P(e, "\n};\n\n");
}

/* A parameter's byte offset in the arena, or under ZeRO-3 (where only its
 * bucket's chunk is stored) in the flat bucket layout. */
static int64_t param_offset(Emit *e, const Value *p) {
  if (e->zstage != 3) return off(e, p);
  for (int k = 0; k < e->g->buckets.len; k++) {
    const Bucket *b = e->g->buckets.data[k];
    for (int j = 0; j < b->params.len; j++)
      if (b->params.data[j] == p) return (b->flat + b->pos[j]) * 4 * e->scale;
  }
  return -1;
}

static void emit_params(Emit *e) {
  Graph *g = e->g;
  /* normal_scaled: std 0.02/sqrt(K), K = the number of normal_scaled tensors
   * (the residual projections: two per layer, so 0.02/sqrt(2·layers), GPT-2). */
  int nscaled = count_scaled(e->pp ? e->m->whole : g); /* a stage scales like the whole model */
  P(e, "/* ---- parameters: DSL name, shape, elements, arena offsets (bytes) of the\n"
       " * tensor, its gradient and optimizer state (-1: none), init, std, decay.");
  if (nscaled)
    P(e, "\n * normal_scaled init: std 0.02/sqrt(%d), one term per residual projection.", nscaled);
  P(e, " */\n");
  P(e, "#define NPARAMS %d\n", g->params.len);
  P(e, "static const CgParam params[NPARAMS] = {\n");
  const Optimizer *o = &e->m->train.opt;
  bool adam = !strcmp(o->kind, "adamw"), mom = !adam && o->momentum > 0;
  for (int i = 0; i < g->params.len; i++) {
    Value *p = g->params.data[i];
    int64_t gr = p->grad ? off(e, p->grad) : -1;
    bool sharded = e->zstage >= 1;
    int64_t m1 = p->grad && (adam || mom) && !sharded ? p->opt_offset * e->scale : -1;
    int64_t stride = (numel(p) * 4 + 63) / 64 * 64 * e->scale;
    int64_t m2 = p->grad && adam && !sharded ? m1 + stride : -1;
    P(e, "    {\"%s\", %d, {", p->name, p->shape.ndim);
    emit_dims(e, &p->shape);
    P(e, "}, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s, %d},\n",
      numel(p), param_offset(e, p), gr, m1, m2, init_kind(p), init_std(p, nscaled), p->decay ? 1 : 0);
  }
  P(e, "};\n\n");
  if (e->pp) {
    emit_global_params_pp(e);
    return;
  }
  if (!e->dist) return;
  /* The global view: each tensor's full shape and split, and a table of
   * full tensors packed in one buffer for init and checkpoints. */
  P(e, "/* Sharding of each parameter (dist.h RtShard): its full shape, the dim split\n"
       " * over tp (with segments: a fused q,k,v weight), every pipeline stage. */\n");
  P(e, "static const RtShard shards[NPARAMS] = {\n");
  for (int i = 0; i < g->params.len; i++) emit_shard(e, g->params.data[i], -1);
  P(e, "};\n\n");
  bool *grad = arena_alloc(sizeof(bool) * (size_t)(g->params.len + 1));
  for (int i = 0; i < g->params.len; i++) grad[i] = ((Value *)g->params.data[i])->grad != NULL;
  emit_gparams(e, (Value *const *)g->params.data, grad, g->params.len, "NPARAMS", true);
  P(e, "/* Weight of each gradient in the global norm: 1 / the tp ranks holding the\n"
       " * same elements (a replicated tensor is counted once). */\n");
  P(e, "static const double norm_w[NPARAMS] = {");
  for (int i = 0; i < g->params.len; i++)
    P(e, "%s%s", i % 8 ? " " : "\n    ", norm_weight(e, g->params.data[i]));
  P(e, "\n};\n\n");
}

/* The gradient buckets (passes/zero.c) and, under ZeRO, their chunks. */
static void emit_zero_tables(Emit *e) {
  Graph *g = e->g;
  if (e->zstage < 0) return;
  if (e->zstage <= 1)
    P(e, "/* Gradient buckets: each one's %s starts in the backward of the last\n"
         " * microbatch, right after its last gradient op; sync_gradients waits. */\n"
         "static MPI_Request grad_req[%d];\n\n", e->zstage ? "reduce-scatter" : "all-reduce",
      n_grad_reqs(e) ? n_grad_reqs(e) : 1);
  if (e->zstage == 0) return;
  P(e, "/* ZeRO-%d buckets (elements): the flat layout of the parameters, padded per\n"
       " * bucket to a multiple of 16·DP; rank r owns [flat + r·chunk, +chunk) of each,\n"
       " * at [shard, +chunk) of its %sgradient and optimizer-state shards. */\n"
       "static const CgBucket zbuckets[NBUCKETS] = {\n", e->zstage, e->zstage == 3 ? "parameter, " : "");
  for (int k = 0; k < g->buckets.len; k++) {
    Bucket *b = g->buckets.data[k];
    P(e, "    {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "},  // %s\n", b->flat, b->numel,
      b->chunk, b->shard, b->name);
  }
  P(e, "};\n#define ZFLAT %" PRId64 "LL  /* elements of the flat layout */\n",
    g->buckets.len ? ((Bucket *)g->buckets.data[g->buckets.len - 1])->flat +
                         ((Bucket *)g->buckets.data[g->buckets.len - 1])->numel : 0);
  P(e, "/* The bucket of each parameter. */\nstatic const int zbucket_of[NPARAMS] = {");
  for (int i = 0; i < g->params.len; i++) {
    int kb = 0;
    for (int k = 0; k < g->buckets.len; k++) {
      Bucket *b = g->buckets.data[k];
      for (int j = 0; j < b->params.len; j++)
        if (b->params.data[j] == g->params.data[i]) kb = k;
    }
    P(e, "%s%d,", i % 16 ? " " : "\n    ", kb);
  }
  P(e, "\n};\n\n");
}

static void emit_passes(Emit *e) {
  Graph *g = e->g;
  if (e->nce) {
    P(e, "/* Loss of each cross_entropy (in double) and the rows it averaged over. */\n");
    P(e, "static double ce_loss[%d];\nstatic int ce_rows[%d];\n", e->nce, e->nce);
  }
  if (e->dropout && (!e->nchunks || !strcmp(e->sfx, "_c0"))) /* once per program */
    P(e, "static uint64_t seed;  /* --seed */\n");
  P(e, "\n/* ---- forward: one microbatch; row0 is its first row in the global batch ---- */\n");
  P(e, "static double forward%s(long step, int row0) {\n", e->sfx ? e->sfx : "");
  if (!e->dropout) P(e, "  (void)step;\n  (void)row0;\n");
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = g->nodes.data[i];
    if (!emits_code(n) || e->skip[i]) continue;
    emit_fwd(e, n, i);
  }
  Node *ld = g->loss->def;
  if (g->pipe_out)
    P(e, "  return 0;  /* %s goes to stage %d; the last stage has the loss */\n}\n\n",
      ref(e, g->send_act), e->stage + 1);
  else if (ld && ld->op == OP_CROSS_ENTROPY)
    P(e, "  return ce_loss[%d];\n}\n\n", e->ce_slot[ld->id]);
  else
    P(e, "  return *%s;\n}\n\n", ref(e, g->loss));
  P(e, "/* ---- backward: the same microbatch; accumulates into gradients ---- */\n");
  P(e, "static void backward%s(long step, int row0) {\n", e->sfx ? e->sfx : "");
  if (!e->dropout) P(e, "  (void)step;\n  (void)row0;\n");
  if (e->zstage == 0 || e->zstage == 1)
    P(e, "  static long calls;  // once per microbatch: the last one starts the bucket all-reduces\n"
         "  const int last_microbatch = ++calls %% MICROBATCHES == 0;\n");
  for (int i = g->nfwd; i < e->nn; i++) {
    Node *n = g->nodes.data[i];
    if (!emits_code(n) || e->skip[i]) continue;
    emit_bwd(e, n, i);
  }
  P(e, "}\n\n");
}

/* The loop header shared by the ZeRO optimizer and gradient norm: for
 * each parameter, the elements [a, z) of the flat layout in this rank's
 * chunk of its bucket, at s in the shard arrays. */
static void emit_zero_chunk_loop(Emit *e) {
  P(e, "  const size_t r = (size_t)mesh.coord[%s];\n"
       "  for (int i = 0; i < NPARAMS; i++) {\n"
       "    const CgBucket *b = &zbuckets[zbucket_of[i]];\n"
       "    const size_t lo = (size_t)b->flat + r * (size_t)b->chunk, hi = lo + (size_t)b->chunk;\n"
       "    size_t a = params[i].offset / sizeof(%s), z = a + params[i].numel;\n"
       "    if (params[i].grad < 0 || z <= lo || a >= hi) continue;\n"
       "    if (a < lo) a = lo;\n"
       "    if (z > hi) z = hi;\n"
       "    const size_t s = (size_t)b->shard + (a - lo);\n", zax(e), e->R);
}

/* ZeRO-1/2/3: each rank updates its chunk of every bucket with its summed
 * gradient shard and its optimizer state; ZeRO-1/2 then all-gather every
 * bucket's parameters (ZeRO-3 gathers them layer by layer in the next
 * forward). */
static void emit_optimizer_zero23(Emit *e) {
  const Optimizer *o = &e->m->train.opt;
  bool adam = !strcmp(o->kind, "adamw");
  char lr_wd[64], b1[64], b2[64], eps[64], mo[64];
  cg_literal(lr_wd, sizeof lr_wd, o->weight_decay, 1);
  cg_literal(b1, sizeof b1, o->beta1, 1);
  cg_literal(b2, sizeof b2, o->beta2, 1);
  cg_literal(eps, sizeof eps, o->eps, 1);
  cg_literal(mo, sizeof mo, o->momentum, 1);
  const char *wd = o->weight_decay ? arena_printf("params[i].decay ? %s : 0.0", lr_wd) : "0.0";
  int nstate = opt_states(o);
  const char *par = e->zstage == 3 ? "(%s *)arena + s" : "(%s *)arena + a";
  par = arena_printf(par, e->R);
  P(e, "/* ---- optimizer (ZeRO-%d over dp) ----\n"
       " * %s on this rank's chunk of every bucket%s. */\n",
    e->zstage, adam ? "AdamW (torch.optim.AdamW)" : "SGD (torch.optim.SGD)",
    e->zstage <= 2 ? "; then each bucket's parameters are all-gathered" : " (its parameter shards)");
  P(e, "static void optimizer_step(long t, double lr, double grad_scale) {\n");
  if (!adam) P(e, "  (void)t;\n");
  P(e, "  %s *g = F(GSHARD_OFFSET), *m1 = F(OPT_OFFSET);\n", e->R);
  if (nstate == 2) P(e, "  %s *m2 = m1 + ZSHARD;\n", e->R);
  if (!nstate) P(e, "  (void)m1;\n");
  emit_zero_chunk_loop(e);
  if (adam)
    P(e, "    rt_adamw_step%s(%s, g + s, m1 + s, m2 + s, z - a, lr, %s, %s, %s, %s, t, grad_scale);\n",
      e->S, par, b1, b2, eps, wd);
  else
    P(e, "    rt_sgd_step%s(%s, g + s, %s, z - a, lr, %s, %s, grad_scale);\n", e->S, par,
      nstate ? "m1 + s" : "NULL", mo, wd);
  P(e, "  }\n");
  if (e->zstage <= 2)
    P(e, "  for (int k = 0; k < NBUCKETS; k++)\n"
         "    rt_allgather_dim(&mesh, %s, (%s *)arena + zbuckets[k].flat,\n"
         "                     (%s *)arena + zbuckets[k].flat + r * zbuckets[k].chunk, 1, zbuckets[k].chunk, %d, NULL);\n",
      zax(e), e->R, e->R, e->f64 ? 8 : 4);
  P(e, "}\n\n");
}

static void emit_optimizer(Emit *e) {
  if (e->zstage >= 1) {
    emit_optimizer_zero23(e);
    return;
  }
  const Optimizer *o = &e->m->train.opt;
  char lr_wd[64];
  cg_literal(lr_wd, sizeof lr_wd, o->weight_decay, 1);
  bool all = true;
  for (int i = 0; i < e->g->params.len; i++) all &= ((Value *)e->g->params.data[i])->grad != NULL;
  P(e, "/* ---- optimizer ---- */\n");
  if (!strcmp(o->kind, "adamw")) {
    char b1[64], b2[64], eps[64];
    cg_literal(b1, sizeof b1, o->beta1, 1);
    cg_literal(b2, sizeof b2, o->beta2, 1);
    cg_literal(eps, sizeof eps, o->eps, 1);
    P(e, "/* AdamW (torch.optim.AdamW) on every parameter; decoupled weight decay only\n"
         " * where the table says so.  grad_scale folds in clipping and the 1/dp mean. */\n");
    P(e, "static void optimizer_step(long t, double lr, double grad_scale) {\n");
    P(e, "  for (int i = 0; i < NPARAMS; i++) {\n    const CgParam *p = &params[i];\n");
    if (!all) P(e, "    if (p->grad < 0) continue;\n");
    P(e, "    rt_adamw_step%s(F(p->offset), F(p->grad), F(p->opt), F(p->opt2), p->numel, lr, %s, %s,\n"
         "                    %s, %s, t, grad_scale);\n",
      e->S, b1, b2, eps, o->weight_decay ? arena_printf("p->decay ? %s : 0.0", lr_wd) : "0.0");
  } else {
    char mo[64];
    cg_literal(mo, sizeof mo, o->momentum, 1);
    P(e, "/* SGD (torch.optim.SGD) with momentum %s; weight decay only where the table\n"
         " * says so.  grad_scale folds in clipping and the 1/dp mean. */\n", mo);
    P(e, "static void optimizer_step(long t, double lr, double grad_scale) {\n  (void)t;\n");
    P(e, "  for (int i = 0; i < NPARAMS; i++) {\n    const CgParam *p = &params[i];\n");
    if (!all) P(e, "    if (p->grad < 0) continue;\n");
    P(e, "    rt_sgd_step%s(F(p->offset), F(p->grad), %s, p->numel, lr, %s,\n"
         "                  %s, grad_scale);\n",
      e->S, o->momentum > 0 ? "F(p->opt)" : "NULL", mo,
      o->weight_decay ? arena_printf("p->decay ? %s : 0.0", lr_wd) : "0.0");
  }
  P(e, "  }\n}\n\n");
}

/* gmodel_of(): the model as full tensors (gparams in a buffer of
 * GLOBAL_BYTES; a pipeline stage's: the whole model's). */
static void emit_gmodel_of(Emit *e) {
  P(e, "/* The model as full tensors (gparams in a buffer of GLOBAL_BYTES). */\n"
       "static CgModel gmodel_of(void) {\n"
       "  CgModel gm = model;\n"
       "  gm.params = gparams;\n%s"
       "  gm.arena_bytes = gm.persistent_bytes = GLOBAL_BYTES;\n"
       "  return gm;\n}\n\n", e->pp ? "  gm.nparams = NGLOBAL;  /* the whole model */\n" : "");
}

static void emit_mean_loss_pp(Emit *e) {
  P(e, "/* The last stage has the loss (the same on its tp ranks): its mean over dp. */\n"
       "static double mean_loss(double loss) {\n"
       "  int mine = STAGE == PP - 1 && mesh.coord[RT_AX_TP] == 0;\n"
       "  return rt_mesh_sum_double(&mesh, RT_AX_WORLD, mine ? loss : 0.0) / DP;\n}\n\n");
}

/* The start of sync_gradients without ZeRO shards: wait for the buckets'
 * all-reduces, then sum the gradients of replicated parameters used on
 * split activations over tp (or the 2D grid's rows and columns). */
static void emit_sync_start(Emit *e) {
  Graph *g = e->g;
  if (e->zstage == 0)
    P(e, "  rt_waitall(&mesh, %d, grad_req);  // the buckets' all-reduces, started in the backward\n",
      n_grad_reqs(e));
  for (int i = 0; i < g->params.len; i++) {
    Value *p = g->params.data[i];
    static const int gax[3] = {AX_TP, AX_TPR, AX_TPC}; /* report.c's order */
    for (int a = 0; a < 3; a++)
      if (p->grad && (p->grad_partial & (1u << gax[a])))
        P(e, "  rt_allreduce(&mesh, %s, %s, %" PRId64 ", %d);  // %s\n", rt_axis(gax[a]),
          ref(e, p->grad), numel(p), e->f64 ? 8 : 4, p->name);
  }
}

/* A pipeline stage: init and checkpoints through the whole model's full
 * tensors (each stage extracts what it holds; saving gathers every stage's
 * tensors on rank 0), and the step's reductions: tp-partial gradients, the
 * tied embedding's two copies over EMBED, then dp. */
static void emit_step_support_pp(Emit *e) {
  Graph *g = e->g;
  const char *R = e->R;
  int es = e->f64 ? 8 : 4;
  P(e, "/* ---- the mesh: parameters, checkpoints and the step's reductions ----\n"
       " * Stage %d of %d holds its parameters' shards; init and checkpoints go\n"
       " * through the whole model's full tensors (gparams), so a checkpoint is\n"
       " * the same file under any plan. */\n", e->stage, e->nstages);
  emit_gmodel_of(e);
  P(e, "static void init_params(uint64_t seed) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = calloc(1, GLOBAL_BYTES);\n"
       "  if (!full) rt_mesh_fail(&mesh, \"out of memory for the full parameters (%%lld bytes)\", GLOBAL_BYTES);\n"
       "  cg_init_params(&gm, full, seed);\n"
       "  for (int i = 0; i < NGLOBAL; i++)\n"
       "    if (local_of[i] >= 0)\n"
       "      rt_shard_extract(&shards[i], &mesh, full + gparams[i].offset, arena + params[local_of[i]].offset, %d);\n"
       "  free(full);\n}\n\n", es);
  P(e, "static int load_checkpoint(const char *path, long *step, int *weights_only) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = calloc(1, GLOBAL_BYTES);\n"
       "  if (!full) return rt_errorf(RT_ERR_NOMEM, \"out of memory for the full parameters\");\n"
       "  int rc = cg_ckpt_load(&gm, full, path, step, weights_only);\n"
       "  for (int i = 0; rc == RT_OK && i < NGLOBAL; i++)\n"
       "    for (int k = 0; local_of[i] >= 0 && k < CG_SLOTS; k++)\n"
       "      if (cg_param_slot(&params[local_of[i]], k) >= 0)\n"
       "        rt_shard_extract(&shards[i], &mesh, full + cg_param_slot(&gparams[i], k),\n"
       "                         arena + cg_param_slot(&params[local_of[i]], k), %d);\n", es);
  P(e, "  free(full);\n  return rc;\n}\n\n");
  P(e, "/* Every stage's tensors gathered on rank 0, which writes the whole model. */\n"
       "static int save_checkpoint(long steps_done) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = rank == 0 ? calloc(1, GLOBAL_BYTES) : NULL;\n"
       "  if (!all_ok(rank != 0 || full || rt_errorf(RT_ERR_NOMEM, \"out of memory for the checkpoint\") == RT_OK)) return 0;\n");
  P(e, "  for (int i = 0; i < NGLOBAL; i++)\n"
       "    for (int k = 0; k < CG_SLOTS; k++) {\n"
       "      if (cg_param_slot(&gparams[i], k) < 0) continue;\n"
       "      const unsigned char *mine = NULL;  /* this rank's piece, if its stage holds it */\n"
       "      if (local_of[i] >= 0)\n"
       "        mine = arena + cg_param_slot(&params[local_of[i]], k);\n");
  P(e, "      rt_check(rt_shard_gather(&shards[i], &mesh, mine, full ? full + cg_param_slot(&gparams[i], k) : NULL, %d));\n"
       "    }\n", es);
  P(e, "  int ok = all_ok(rank != 0 || cg_ckpt_save(&gm, full, steps_done, args.save) == RT_OK);\n"
       "  free(full);\n"
       "  if (ok && rank == 0 && !args.quiet) printf(\"saved:    %%s (step %%ld)\\n\", args.save, steps_done);\n"
       "  return ok;\n}\n\n");
  P(e, "/* After the microbatches: gradients summed over tp for replicated parameters\n"
       " * used on sequence shards, over the first and last stage for a tied\n"
       " * embedding, and over the data-parallel ranks%s. */\n"
       "static void sync_gradients(void) {\n",
    e->zstage == 0 ? " (per bucket, started in the last microbatch's backward)" : "");
  emit_sync_start(e);
  for (int i = 0; i < g->params.len; i++) {
    Value *p = g->params.data[i];
    if (!p->grad || !p->pp_shared) continue;
    P(e, "  rt_allreduce(&mesh, RT_AX_EMBED, %s, %" PRId64 ", %d);  // %s, tied: stages 0 and %d\n",
      ref(e, p->grad), numel(p), es, p->name, e->nstages - 1);
  }
  for (int c = 0; c < e->nchunks; c++) /* interleaved: each chunk's range */
    P(e, "  rt_allreduce(&mesh, RT_AX_DP, F(GRADS_OFFSET_%d), GRADS_BYTES_%d / sizeof(%s), %d);\n", c, c,
      R, es);
  if (e->zstage < 0 && !e->nchunks)
    P(e, "  rt_allreduce(&mesh, RT_AX_DP, F(GRADS_OFFSET), GRADS_BYTES / sizeof(%s), %d);\n", R, es);
  P(e, "}\n\n");
  emit_mean_loss_pp(e);
  P(e, "/* The global norm of the summed gradients (before the 1/DP mean): the dp\n"
       " * ranks hold the same sums, so those of dp rank 0 over every stage and tp rank. */\n"
       "static double grad_norm(void) {\n"
       "  double ss = 0;\n"
       "  for (int i = 0; i < NPARAMS && mesh.coord[RT_AX_DP] == 0; i++)\n"
       "    if (params[i].grad >= 0) ss += norm_w[i] * rt_sumsq%s(F(params[i].grad), params[i].numel);\n"
       "  return sqrt(rt_mesh_sum_double(&mesh, RT_AX_WORLD, ss));\n}\n\n", e->S);
}

/* ZeRO: init and checkpoints go through the full tensors (gparams) and a
 * flat copy of the bucket layout; the step's reductions are on the shards. */
static void emit_step_support_zero23(Emit *e) {
  Graph *g = e->g;
  int es = e->f64 ? 8 : 4, nstate = opt_states(&e->m->train.opt);
  bool z3 = e->zstage == 3;
  P(e, "/* ---- the mesh under ZeRO-%d: parameters, checkpoints and the step's reductions ----\n"
       " * Full tensors (gparams) <-> the flat bucket layout (params[].offset) <-> this\n"
       " * rank's %s, so a checkpoint is the same file under any plan. */\n", e->zstage,
    z3 ? "chunks (parameters and optimizer state)" : "parameters and chunks of optimizer state");
  emit_gmodel_of(e);
  P(e, "/* slot 0: the parameters; 1, 2: the optimizer state, in this rank's storage */\n"
       "static unsigned char *zero_slot(int k) {\n"
       "  return k == 0 ? arena : arena + OPT_OFFSET + (size_t)(k - 1) * ZSHARD * %d;\n}\n\n", es);
  P(e, "/* full (slot k of every tensor) -> this rank's storage of slot k */\n"
       "static void zero_store(int k, const unsigned char *full, unsigned char *flat) {\n"
       "  memset(flat, 0, (size_t)ZFLAT * %d);\n", es);
  if (e->pp) /* the parameters this stage holds, from the whole model */
    P(e, "  for (int j = 0; j < NGLOBAL; j++)\n"
         "    if (local_of[j] >= 0 && cg_param_slot(&gparams[j], k) >= 0)\n"
         "      rt_shard_extract(&shards[j], &mesh, full + cg_param_slot(&gparams[j], k), flat + params[local_of[j]].offset, %d);\n",
      es);
  else
    P(e, "  for (int i = 0; i < NPARAMS; i++)\n"
         "    if (cg_param_slot(&gparams[i], k) >= 0)\n"
         "      rt_shard_extract(&shards[i], &mesh, full + cg_param_slot(&gparams[i], k), flat + params[i].offset, %d);\n",
      es);
  if (z3)
    P(e, "  cg_zero_take(zbuckets, NBUCKETS, mesh.coord[%s], flat, zero_slot(k), %d);\n}\n\n", zax(e), es);
  else
    P(e, "  if (k == 0) memcpy(arena, flat, (size_t)ZFLAT * %d);\n"
         "  else cg_zero_take(zbuckets, NBUCKETS, mesh.coord[%s], flat, zero_slot(k), %d);\n}\n\n",
      es, zax(e), es);
  P(e, "static void init_params(uint64_t seed) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = calloc(1, GLOBAL_BYTES), *flat = malloc((size_t)ZFLAT * %d);\n"
       "  if (!full || !flat) rt_mesh_fail(&mesh, \"out of memory for the full parameters (%%lld bytes)\", GLOBAL_BYTES);\n"
       "  cg_init_params(&gm, full, seed);\n"
       "  zero_store(0, full, flat);\n"
       "  free(flat);\n  free(full);\n}\n\n", es);
  P(e, "static int load_checkpoint(const char *path, long *step, int *weights_only) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = calloc(1, GLOBAL_BYTES), *flat = malloc((size_t)ZFLAT * %d);\n"
       "  if (!full || !flat) {\n    free(full);\n    free(flat);\n"
       "    return rt_errorf(RT_ERR_NOMEM, \"out of memory for the full parameters\");\n  }\n"
       "  int rc = cg_ckpt_load(&gm, full, path, step, weights_only);\n"
       "  for (int k = 0; rc == RT_OK && k <= %d; k++) zero_store(k, full, flat);\n"
       "  free(flat);\n  free(full);\n  return rc;\n}\n\n", es, nstate);
  P(e, "/* Each slot's chunks gathered over dp (not counted: checkpoint traffic) into\n"
       " * the flat layout on dp rank 0, whose ranks hold every tp piece; rank 0\n"
       " * writes the full tensors. */\n"
       "static int save_checkpoint(long steps_done) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = rank == 0 ? calloc(1, GLOBAL_BYTES) : NULL;\n"
       "  unsigned char *flat = calloc(1, (size_t)ZFLAT * %d), *all = malloc((size_t)ZSHARD * ZGROUP * %d);\n"
       "  if (!flat || !all) rt_mesh_fail(&mesh, \"out of memory for the checkpoint\");\n"
       "  if (!all_ok(rank != 0 || full || rt_errorf(RT_ERR_NOMEM, \"out of memory for the checkpoint\") == RT_OK)) return 0;\n"
       "  for (int k = 0; k <= %d; k++) {\n", es, es, nstate);
  if (z3)
    P(e, "    const unsigned char *src = flat;\n");
  else
    P(e, "    const unsigned char *src = k == 0 ? arena : flat;\n    if (k > 0) {\n");
  P(e, "%s    rt_check(rt_gather_flat(&mesh, %s, zero_slot(k), ZSHARD, all, %d));\n"
       "%s    if (mesh.coord[%s] == 0) cg_zero_put(zbuckets, NBUCKETS, ZGROUP, ZSHARD, all, flat, %d);\n%s",
    z3 ? "" : "  ", zax(e), es, z3 ? "" : "  ", zax(e), es, z3 ? "" : "    }\n");
  if (e->pp) /* every tensor of the model: the stage holding it sends its pieces */
    P(e, "    for (int j = 0; j < NGLOBAL; j++)\n"
         "      if (cg_param_slot(&gparams[j], k) >= 0)\n"
         "        rt_check(rt_shard_gather(&shards[j], &mesh, local_of[j] >= 0 ? src + params[local_of[j]].offset : NULL,\n"
         "                                 full ? full + cg_param_slot(&gparams[j], k) : NULL, %d));\n", es);
  else
    P(e, "    for (int i = 0; i < NPARAMS; i++)\n"
         "      if (cg_param_slot(&gparams[i], k) >= 0)\n"
         "        rt_check(rt_shard_gather(&shards[i], &mesh, src + params[i].offset,\n"
         "                                 full ? full + cg_param_slot(&gparams[i], k) : NULL, %d));\n", es);
  P(e, "  }\n"
       "  free(all);\n  free(flat);\n"
       "  int ok = all_ok(rank != 0 || cg_ckpt_save(&gm, full, steps_done, args.save) == RT_OK);\n"
       "  free(full);\n"
       "  if (ok && rank == 0 && !args.quiet) printf(\"saved:    %%s (step %%ld)\\n\", args.save, steps_done);\n"
       "  return ok;\n}\n\n");
  P(e, "/* The backward reduce-scattered each bucket into this rank's gradient shard\n"
       " * (dp sums%s); gradients that are partial sums over tp are summed here. */\n"
       "static void sync_gradients(void) {\n", e->zstage == 1 ? ", started in the last microbatch" : "");
  if (e->zstage == 1)
    P(e, "  rt_waitall(&mesh, %d, grad_req);\n", n_grad_reqs(e));
  for (int k = 0; k < g->buckets.len; k++) {
    Bucket *b = g->buckets.data[k];
    static const int gax[3] = {AX_TP, AX_TPR, AX_TPC}; /* report.c's order */
    for (int a = 0; a < 3; a++)
      if (b->partial & (1u << gax[a]))
        P(e, "  rt_allreduce(&mesh, %s, F(GSHARD_OFFSET) + %" PRId64 ", %" PRId64 ", %d);  // %s\n",
          rt_axis(gax[a]), b->shard, b->chunk, es, b->name);
    if (b->tied)
      P(e, "  rt_allreduce(&mesh, RT_AX_EMBED, F(GSHARD_OFFSET) + %" PRId64 ", %" PRId64 ", %d);  // %s: stages 0 and %d\n",
        b->shard, b->chunk, es, b->name, e->nstages - 1);
  }
  P(e, "}\n\n");
  if (e->pp)
    emit_mean_loss_pp(e);
  else if (e->ring)
    P(e, "/* Each rank's loss is the mean over its tokens, the same number on every rank. */\n"
         "static double mean_loss(double loss) { return rt_mesh_sum_double(&mesh, RT_AX_DATA, loss) / (DP * SP); }\n\n");
  else
    P(e, "static double mean_loss(double loss) { return rt_mesh_sum_double(&mesh, RT_AX_DP, loss) / DP; }\n\n");
  P(e, "/* The global norm of the summed gradients (before the 1/DP mean): each rank\n"
       " * holds the sums of its chunks. */\n"
       "static double grad_norm(void) {\n"
       "  double ss = 0;\n");
  emit_zero_chunk_loop(e);
  P(e, "    ss += norm_w[i] * rt_sumsq%s(F(GSHARD_OFFSET) + s, z - a);\n  }\n"
       "  return sqrt(rt_mesh_sum_double(&mesh, RT_AX_WORLD, ss));\n}\n\n", e->S);
}

/* The pieces of main() that differ between one rank and a mesh. */
static void emit_step_support(Emit *e) {
  if (e->pp && e->zstage < 1) {
    emit_step_support_pp(e);
    return;
  }
  const char *R = e->R;
  int es = e->f64 ? 8 : 4;
  if (!e->dist) {
    P(e, "/* ---- one rank: parameters, checkpoints and the step's reductions ---- */\n"
         "static void init_params(uint64_t seed) { cg_init_params(&model, arena, seed); }\n\n"
         "static int load_checkpoint(const char *path, long *step, int *weights_only) {\n"
         "  return cg_ckpt_load(&model, arena, path, step, weights_only);\n}\n\n"
         "static int save_checkpoint(long steps_done) {\n"
         "  int ok = all_ok(cg_ckpt_save(&model, arena, steps_done, args.save) == RT_OK);\n"
         "  if (ok && !args.quiet) printf(\"saved:    %%s (step %%ld)\\n\", args.save, steps_done);\n"
         "  return ok;\n}\n\n"
         "static void sync_gradients(void) {}\n"
         "static double mean_loss(double loss) { return loss; }\n"
         "static double grad_norm(void) {\n"
         "  return sqrt(rt_sumsq%s(F(GRADS_OFFSET), GRADS_BYTES / sizeof(%s)));\n}\n\n",
      e->S, R);
    return;
  }
  if (e->zstage >= 1) {
    emit_step_support_zero23(e);
    return;
  }
  P(e, "/* ---- the mesh: parameters, checkpoints and the step's reductions ----\n"
       " * Every rank holds its shards; init and checkpoints go through the full\n"
       " * tensors (gparams), so a checkpoint is the same file under any plan. */\n");
  emit_gmodel_of(e);
  P(e, "static void init_params(uint64_t seed) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = calloc(1, GLOBAL_BYTES);\n"
       "  if (!full) rt_mesh_fail(&mesh, \"out of memory for the full parameters (%%lld bytes)\", GLOBAL_BYTES);\n"
       "  cg_init_params(&gm, full, seed);\n"
       "  for (int i = 0; i < NPARAMS; i++)\n"
       "    rt_shard_extract(&shards[i], &mesh, full + gparams[i].offset, arena + params[i].offset, %d);\n"
       "  free(full);\n}\n\n", es);
  P(e, "static int load_checkpoint(const char *path, long *step, int *weights_only) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = calloc(1, GLOBAL_BYTES);\n"
       "  if (!full) return rt_errorf(RT_ERR_NOMEM, \"out of memory for the full parameters\");\n"
       "  int rc = cg_ckpt_load(&gm, full, path, step, weights_only);\n"
       "  for (int i = 0; rc == RT_OK && i < NPARAMS; i++)\n"
       "    for (int k = 0; k < CG_SLOTS; k++)\n"
       "      if (cg_param_slot(&params[i], k) >= 0)\n"
       "        rt_shard_extract(&shards[i], &mesh, full + cg_param_slot(&gparams[i], k),\n"
       "                         arena + cg_param_slot(&params[i], k), %d);\n", es);
  P(e, "  free(full);\n  return rc;\n}\n\n");
  P(e, "/* Gathered on rank 0, which writes the full tensors. */\n"
       "static int save_checkpoint(long steps_done) {\n"
       "  CgModel gm = gmodel_of();\n"
       "  unsigned char *full = rank == 0 ? calloc(1, GLOBAL_BYTES) : NULL;\n"
       "  if (!all_ok(rank != 0 || full || rt_errorf(RT_ERR_NOMEM, \"out of memory for the checkpoint\") == RT_OK)) return 0;\n"
       "  for (int i = 0; i < NPARAMS; i++)\n"
       "    for (int k = 0; k < CG_SLOTS; k++)\n"
       "      if (cg_param_slot(&params[i], k) >= 0)\n"
       "        rt_check(rt_shard_gather(&shards[i], &mesh, arena + cg_param_slot(&params[i], k),\n"
       "                                 full ? full + cg_param_slot(&gparams[i], k) : NULL, %d));\n", es);
  P(e, "  int ok = all_ok(rank != 0 || cg_ckpt_save(&gm, full, steps_done, args.save) == RT_OK);\n"
       "  free(full);\n"
       "  if (ok && rank == 0 && !args.quiet) printf(\"saved:    %%s (step %%ld)\\n\", args.save, steps_done);\n"
       "  return ok;\n}\n\n");
  P(e, "/* After the microbatches: gradients summed over the data-parallel ranks, and\n"
       " * over tp for replicated parameters used on sequence shards. */\n"
       "static void sync_gradients(void) {\n");
  emit_sync_start(e);
  if (e->zstage < 0 && e->ring)
    P(e, "  /* sp=ring: every parameter's gradient is partial over the sequence shards too\n"
         "   * (each backward was seeded with 1/SP): summed over dp x sp */\n"
         "  rt_allreduce(&mesh, RT_AX_DATA, F(GRADS_OFFSET), GRADS_BYTES / sizeof(%s), %d);\n", R, es);
  else if (e->zstage < 0)
    P(e, "  rt_allreduce(&mesh, RT_AX_DP, F(GRADS_OFFSET), GRADS_BYTES / sizeof(%s), %d);\n", R, es);
  P(e, "}\n\n");
  if (e->ring)
    P(e, "/* Each rank's loss is the mean over its tokens, the same number on every rank. */\n"
         "static double mean_loss(double loss) { return rt_mesh_sum_double(&mesh, RT_AX_DATA, loss) / (DP * SP); }\n\n");
  else
    P(e, "static double mean_loss(double loss) { return rt_mesh_sum_double(&mesh, RT_AX_DP, loss) / DP; }\n\n");
  P(e, "/* The global norm of the summed gradients (before the 1/DP mean). */\n"
       "static double grad_norm(void) {\n"
       "  double ss = 0;\n"
       "  for (int i = 0; i < NPARAMS; i++)\n"
       "    if (params[i].grad >= 0) ss += norm_w[i] * rt_sumsq%s(F(params[i].grad), params[i].numel);\n"
       "  return sqrt(rt_mesh_sum_double(&mesh, RT_AX_TP, ss));\n}\n\n", e->S);
}

static void emit_comms(Emit *e) {
  P(e, "/* ---- communication: MPI over the data-parallel ranks ---- */\n"
       "static int rank = 0, world = 1;\n"
       "\n"
       "#ifdef SHARDC_MPI\n"
       "#define mpiCheck(call)                                                       \\\n"
       "  do {                                                                       \\\n"
       "    int err_ = (call);                                                       \\\n"
       "    if (err_ != MPI_SUCCESS) {                                               \\\n"
       "      char msg_[MPI_MAX_ERROR_STRING];                                       \\\n"
       "      int len_ = 0;                                                          \\\n"
       "      MPI_Error_string(err_, msg_, &len_);                                   \\\n"
       "      fprintf(stderr, \"train: MPI error at %%s:%%d: %%s\\n\", __FILE__, __LINE__, msg_); \\\n"
       "      MPI_Abort(MPI_COMM_WORLD, 1);                                          \\\n"
       "    }                                                                        \\\n"
       "  } while (0)\n"
       "#endif\n"
       "\n"
       "static void comm_init(int *argc, char ***argv) {\n"
       "#ifdef SHARDC_MPI\n"
       "%s"
       "  mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &rank));\n"
       "  mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &world));\n"
       "#else\n"
       "  (void)argc;\n"
       "  (void)argv;\n"
       "  world = cg_launcher_ranks(&rank);  /* to refuse a launch on several ranks */\n"
       "#endif\n"
       "}\n"
       "\n"
       "static int comm_finish(int status) {\n"
       "#ifdef SHARDC_MPI\n"
       "  MPI_Finalize();\n"
       "#endif\n"
       "  return status;\n"
       "}\n"
       "\n"
       "/* A collective decision: every rank learns whether all ranks are fine.  A\n"
       " * failing rank prints its error (only rank 0's when rank 0 failed too). */\n"
       "static int all_ok(int ok) {\n"
       "  int v[2] = {ok, rank == 0 ? ok : 1};\n"
       "#ifdef SHARDC_MPI\n"
       "  mpiCheck(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD));\n"
       "#endif\n"
       "  if (!ok && (rank == 0 || v[1])) {\n"
       "    if (rank) fprintf(stderr, \"train: error: rank %%d: %%s\\n\", rank, rt_last_error());\n"
       "    else fprintf(stderr, \"train: error: %%s\\n\", rt_last_error());\n"
       "  }\n"
       "  return v[0];\n"
       "}\n\n",
    e->pp ? "  int started = 0;  /* by the launcher, to find this rank's stage */\n"
            "  mpiCheck(MPI_Initialized(&started));\n"
            "  if (!started) mpiCheck(MPI_Init(argc, argv));\n"
          : "  mpiCheck(MPI_Init(argc, argv));\n");
}

/* The first step compares the bytes this rank sent with the plan's. */
static const char *const comm_check_text =
    "    if (measure) {\n"
    "      unsigned long long counted = rt_mesh_total_bytes(&mesh);\n"
    "      /* every rank's count, for the line rank 0 prints */\n"
    "      double sum = rt_mesh_sum_double(&mesh, RT_AX_WORLD, (double)counted);\n"
    "      if (say) {\n"
    "        char a[32], b[32];\n"
    "        cg_commas(a, sizeof a, COMM_BYTES);\n"
    "        cg_commas(b, sizeof b, counted);\n"
    "        printf(\"comm:     planned %s bytes sent per rank per step, counted %s on rank 0 (%.0f over all ranks)%s\\n\",\n"
    "               a, b, sum, counted == COMM_BYTES ? \"\" : \"  MISMATCH\");\n"
    "        fflush(stdout);\n"
    "      }\n"
    "      if (counted != COMM_BYTES && getenv(\"SHARDC_STRICT_COMM\"))\n"
    "        rt_mesh_fail(&mesh, \"sent %llu bytes in step 1, the plan says %llu\", counted, (unsigned long long)COMM_BYTES);\n"
    "    }\n"
    "    rt_mesh_reset_counts(&mesh);\n";

/* A pipeline stage's microbatches: the schedule's forwards and backwards in
 * order, each in its microbatch's stash slot; activations arrive from the
 * previous stage before a forward and leave for the next after it,
 * gradients the other way round, tagged 2 (k S + the lower stage) + (1 for
 * a gradient) as in the plan and its check.  Sends are non-blocking from the
 * slot, which is reused only once they were delivered. */
static void emit_run_pipeline(Emit *e) {
  Graph *g = e->g;
  const Plan *p = &e->m->train.plan;
  int mb = p->mb > 0 ? p->mb : 1, es = e->f64 ? 8 : 4;
  PipeSched ps;
  char err[256];
  if (sched_build(&ps, p->schedule, p->pp, mb, 1, err, sizeof err)) {
    diag_fatal_noloc("%s", err);
    return;
  }
  int r = e->stage, n = ps.n[r];
  P(e, "/* This stage's part of the %s schedule: forward (1) or backward (0) of a\n"
       " * microbatch, in order. */\n", sched_name(p->schedule));
  P(e, "static const struct { signed char fwd; short mb; } order[%d] = {", n);
  for (int i = 0; i < n; i++)
    P(e, "%s{%d, %d},", i % 8 ? " " : "\n    ", ps.act[r][i].fwd, ps.act[r][i].mb);
  P(e, "\n};\n\n");
  sched_free(&ps);
  bool first = r == 0, last = r == e->nstages - 1;
  Value *ra = g->recv_act, *sa = g->send_act;
  Value *dsend = ra ? ra->grad : NULL, *drecv = sa ? sa->grad : NULL;
  P(e, "static MPI_Request sent[SLOTS][2];  /* activation, gradient in flight from each slot */\n\n");
  P(e, "static double run_microbatches(long step, int with_backward) {\n");
  P(e, "  if (with_backward) memset(arena + GRADS_OFFSET, 0, GRADS_BYTES);\n");
  P(e, "  const int stride = RANKS / PP;  /* world ranks between neighbouring stages */\n");
  if (first && last) P(e, "  (void)stride;\n");
  P(e, "  double loss = 0;\n");
  P(e, "  for (int k = 0; k < SLOTS; k++) sent[k][0] = sent[k][1] = MPI_REQUEST_NULL;\n");
  P(e, "  for (int a = 0; a < %d; a++) {\n", n);
  P(e, "    const int k = order[a].mb, slot = k %% SLOTS;\n"
       "    const int row0 = mesh.coord[RT_AX_DP] * (MICROBATCHES * MICROBATCH) + k * MICROBATCH;\n"
       "    stash = arena + STASH_OFFSET + (size_t)slot * STASH_BYTES;\n"
       "    if (order[a].fwd) {\n"
       "      rt_waitall(&mesh, 2, sent[slot]);  /* the slot's last messages were delivered */\n"
       "      // %s, %s\n"
       "      rt_check(cg_data_batch(&data, step, row0, MICROBATCH, %s, %s));\n",
    vname(e->in0), vname(e->in1), ref(e, e->in0), ref(e, e->in1));
  if (!first)
    P(e, "      rt_recv(&mesh, rank - stride, 2 * (k * %d + %d), %s, %" PRId64 ", %d);  // %s from stage %d\n",
      e->nstages, r - 1, ref(e, ra), numel(ra), es, vname(ra), r - 1);
  P(e, "      loss += forward(step, row0);\n");
  if (!last)
    P(e, "      rt_isend(&mesh, rank + stride, 2 * (k * %d + %d), %s, %" PRId64 ", %d, &sent[slot][0]);  // %s to stage %d\n",
      e->nstages, r, ref(e, sa), numel(sa), es, vname(sa), r + 1);
  P(e, "    } else if (with_backward) {\n");
  if (!last)
    P(e, "      rt_recv(&mesh, rank + stride, 2 * (k * %d + %d) + 1, %s, %" PRId64 ", %d);  // %s from stage %d\n",
      e->nstages, r, ref(e, drecv), numel(drecv), es, vname(drecv), r + 1);
  P(e, "      backward(step, row0);\n");
  if (!first && dsend)
    P(e, "      rt_isend(&mesh, rank - stride, 2 * (k * %d + %d) + 1, %s, %" PRId64 ", %d, &sent[slot][1]);  // %s to stage %d\n",
      e->nstages, r - 1, ref(e, dsend), numel(dsend), es, vname(dsend), r - 1);
  P(e, "    }\n  }\n");
  P(e, "  for (int k = 0; k < SLOTS; k++) rt_waitall(&mesh, 2, sent[k]);\n");
  P(e, "  return loss / MICROBATCHES;\n}\n\n");
}

/* The first step compares the arena's high-water mark with the plan. */
static const char *const mem_check_text =
    "    if (measure && say) {\n"
    "      char a[32], b[32];\n"
    "      cg_commas(a, sizeof a, ARENA_BYTES);\n"
    "      cg_commas(b, sizeof b, measured);\n"
    "      printf(\"memory:   planned peak %s bytes per rank, measured %s (highest arena byte \"\n"
    "             \"written in step %ld)%s\\n\", a, b, step + 1,\n"
    "             measured == ARENA_BYTES ? \"\" : \"  MISMATCH\");\n"
    "      fflush(stdout);\n"
    "    }\n";

/* On a mesh every rank compares its own high-water mark (the same plan on
 * every rank); rank 0 reports how many differ. */
static const char *const mesh_mem_check_text =
    "    if (measure) {\n"
    "      double off = rt_mesh_sum_double(&mesh, RT_AX_WORLD, measured != ARENA_BYTES);\n"
    "      if (say) {\n"
    "        char a[32], b[32];\n"
    "        cg_commas(a, sizeof a, ARENA_BYTES);\n"
    "        cg_commas(b, sizeof b, measured);\n"
    "        printf(\"memory:   planned peak %s bytes per rank, measured %s on rank 0 (highest arena byte \"\n"
    "               \"written in step %ld)%s\\n\", a, b, step + 1, off ? \"  MISMATCH\" : \"\");\n"
    "        if (off) printf(\"          %.0f rank(s) measured another peak\\n\", off);\n"
    "        fflush(stdout);\n"
    "      }\n"
    "    }\n";

/* A pipeline's first step: every stage's planned and measured peak and
 * bytes sent (those of its dp 0, tp 0 rank), and any rank that differs. */
static const char *const pp_measure_text =
    "    if (measure) {\n"
    "      unsigned long long counted = rt_mesh_total_bytes(&mesh);\n"
    "      int off = measured != ARENA_BYTES, coff = counted != COMM_BYTES;\n"
    "      int head = mesh.coord[RT_AX_DP] == 0 && mesh.coord[RT_AX_TP] == 0;\n"
    "      double bad = rt_mesh_sum_double(&mesh, RT_AX_WORLD, off), cbad = rt_mesh_sum_double(&mesh, RT_AX_WORLD, coff);\n"
    "      char line[4][2048];\n"
    "      int len[4] = {0, 0, 0, 0};\n"
    "      for (int s = 0; s < PP; s++) {\n"
    "        double v[4] = {ARENA_BYTES, measured, COMM_BYTES, counted};\n"
    "        for (int j = 0; j < 4; j++) {\n"
    "          char c[32];\n"
    "          cg_commas(c, sizeof c, (unsigned long long)rt_mesh_sum_double(&mesh, RT_AX_WORLD, head && STAGE == s ? v[j] : 0));\n"
    "          if (len[j] < (int)sizeof line[j] - 40) len[j] += snprintf(line[j] + len[j], sizeof line[j] - len[j], \"%s%s\", s ? \" / \" : \"\", c);\n"
    "        }\n"
    "      }\n"
    "      if (say) {\n"
    "        printf(\"memory:   planned peak per rank by stage %s bytes, measured %s (highest arena byte \"\n"
    "               \"written in step %ld)%s\\n\", line[0], line[1], step + 1, bad ? \"  MISMATCH\" : \"\");\n"
    "        printf(\"comm:     planned %s bytes sent per rank per step by stage, counted %s%s\\n\", line[2], line[3],\n"
    "               cbad ? \"  MISMATCH\" : \"\");\n"
    "        fflush(stdout);\n"
    "      }\n"
    "      if (coff && getenv(\"SHARDC_STRICT_COMM\"))\n"
    "        rt_mesh_fail(&mesh, \"sent %llu bytes in step 1, the plan says %llu\", counted, (unsigned long long)COMM_BYTES);\n"
    "    }\n"
    "    rt_mesh_reset_counts(&mesh);\n";

/* An interleaved pipeline rank: the schedule's actions name a microbatch and
 * a chunk (virtual stage c*PP + STAGE); each runs in that chunk's stash slot,
 * receiving from and sending to virtual stages vs -+ 1 (the previous and
 * next pipeline rank, wrapping around to the neighbouring chunk), tagged
 * 2 (k S + the lower stage) + (1 for a gradient) as in the plan. */
static void emit_run_chunks(Emit *e) {
  const Plan *p = &e->m->train.plan;
  int mb = p->mb > 0 ? p->mb : 1, es = e->f64 ? 8 : 4, v = e->nchunks, r = e->stage;
  int S = e->nstages, pp = p->pp;
  PipeSched ps;
  char err[256];
  if (sched_build(&ps, p->schedule, pp, mb, v, err, sizeof err)) {
    diag_fatal_noloc("%s", err);
    return;
  }
  int n = ps.n[r];
  Graph *keep = e->g;
  P(e, "/* This rank's part of the %s schedule: forward (1) or backward (0) of a\n"
       " * microbatch of a chunk, in order. */\n", sched_name(p->schedule));
  P(e, "static const struct { signed char fwd; short mb; signed char chunk; } order[%d] = {", n);
  for (int i = 0; i < n; i++)
    P(e, "%s{%d, %d, %d},", i % 6 ? " " : "\n    ", ps.act[r][i].fwd, ps.act[r][i].mb, ps.act[r][i].chunk);
  P(e, "\n};\n\n");
  sched_free(&ps);
  int maxslots = 1;
  for (int c = 0; c < v; c++) {
    const MemPlan *cm = &e->m->stage_mem[c * pp + r];
    if (cm->slots > maxslots) maxslots = cm->slots;
  }
  int k0 = e->in0 == e->chunk_g[0]->inputs.data[0] ? 0 : 1;
  P(e, "static MPI_Request sent[%d][%d][2];  /* per chunk and slot: activation, gradient in flight */\n\n",
    v, maxslots);
  P(e, "static double run_microbatches(long step, int with_backward) {\n");
  for (int c = 0; c < v; c++)
    P(e, "  if (with_backward) memset(arena + GRADS_OFFSET_%d, 0, GRADS_BYTES_%d);\n", c, c);
  P(e, "  const int stride = RANKS / PP;  /* world ranks between neighbouring pipeline ranks */\n"
       "  const int prev = STAGE > 0 ? rank - stride : rank + (PP - 1) * stride;\n"
       "  const int next = STAGE < PP - 1 ? rank + stride : rank - (PP - 1) * stride;\n"
       "  double loss = 0;\n"
       "  for (int c = 0; c < %d; c++)\n"
       "    for (int k = 0; k < %d; k++) sent[c][k][0] = sent[c][k][1] = MPI_REQUEST_NULL;\n", v, maxslots);
  P(e, "  for (int a = 0; a < %d; a++) {\n"
       "    const int k = order[a].mb, c = order[a].chunk;\n"
       "    const int row0 = mesh.coord[RT_AX_DP] * (MICROBATCHES * MICROBATCH) + k * MICROBATCH;\n"
       "    switch (c * 2 + !order[a].fwd) {\n", n);
  for (int c = 0; c < v; c++) {
    Graph *g = e->chunk_g[c];
    const MemPlan *cm = &e->m->stage_mem[c * pp + r];
    int vs = c * pp + r;
    Value *ra = g->recv_act, *sa = g->send_act;
    Value *dsend = ra ? ra->grad : NULL, *drecv = sa ? sa->grad : NULL;
    e->g = g;
    (void)cm;
    P(e, "    case %d: {  // forward of stage %d\n"
         "      const int slot = k %% SLOTS_%d;\n"
         "      stash = arena + STASH_OFFSET_%d + (size_t)slot * STASH_BYTES_%d;\n"
         "      rt_waitall(&mesh, 2, sent[%d][slot]);\n", 2 * c, vs, c, c, c, c);
    Value *in0 = g->inputs.data[k0], *in1 = g->inputs.data[1 - k0];
    P(e, "      rt_check(cg_data_batch(&data, step, row0, MICROBATCH, %s, %s));\n", ref_at(e, in0, e->sbase[c]),
      ref_at(e, in1, e->sbase[c]));
    if (vs > 0)
      P(e, "      rt_recv(&mesh, %s, 2 * (k * %d + %d), %s, %" PRId64 ", %d);  // from stage %d\n",
        "prev", S, vs - 1, ref_at(e, ra, e->sbase[c]), numel(ra), es, vs - 1);
    if (e->dropout) P(e, "      dropout_stage = %d;\n", vs);
    P(e, "      loss += forward_c%d(step, row0);\n", c);
    if (vs < S - 1)
      P(e, "      rt_isend(&mesh, next, 2 * (k * %d + %d), %s, %" PRId64 ", %d, &sent[%d][slot][0]);  // to stage %d\n",
        S, vs, ref_at(e, sa, e->sbase[c]), numel(sa), es, c, vs + 1);
    P(e, "      break;\n    }\n");
    P(e, "    case %d: {  // backward of stage %d\n"
         "      if (!with_backward) break;\n"
         "      const int slot = k %% SLOTS_%d;\n"
         "      stash = arena + STASH_OFFSET_%d + (size_t)slot * STASH_BYTES_%d;\n", 2 * c + 1, vs, c, c, c);
    if (vs < S - 1)
      P(e, "      rt_recv(&mesh, next, 2 * (k * %d + %d) + 1, %s, %" PRId64 ", %d);  // from stage %d\n",
        S, vs, ref_at(e, drecv, e->sbase[c]), numel(drecv), es, vs + 1);
    if (e->dropout) P(e, "      dropout_stage = %d;\n", vs);
    P(e, "      backward_c%d(step, row0);\n", c);
    if (vs > 0 && dsend)
      P(e, "      rt_isend(&mesh, prev, 2 * (k * %d + %d) + 1, %s, %" PRId64 ", %d, &sent[%d][slot][1]);  // to stage %d\n",
        S, vs - 1, ref_at(e, dsend, e->sbase[c]), numel(dsend), es, c, vs - 1);
    P(e, "      break;\n    }\n");
  }
  P(e, "    }\n  }\n");
  P(e, "  for (int c = 0; c < %d; c++)\n"
       "    for (int k = 0; k < %d; k++) rt_waitall(&mesh, 2, sent[c][k]);\n", v, maxslots);
  P(e, "  return loss / MICROBATCHES;\n}\n\n");
  e->g = keep;
}

static void emit_main(Emit *e) {
  Module *m = e->m;
  const TrainCfg *t = &m->train;
  const Optimizer *o = &t->opt;
  const Plan *p = &t->plan;
  char spec[256];
  plan_str(p, spec, sizeof spec);
  emit_c_string(e, "PLAN", plan_text(m, ""));
  char lr[64], b1[64], b2[64], eps[64], wd[64], mo[64], clip[64], minlr[64];
  cg_literal(lr, sizeof lr, o->lr, 1);
  cg_literal(b1, sizeof b1, o->beta1, 1);
  cg_literal(b2, sizeof b2, o->beta2, 1);
  cg_literal(eps, sizeof eps, o->eps, 1);
  cg_literal(wd, sizeof wd, o->weight_decay, 1);
  cg_literal(mo, sizeof mo, o->momentum, 1);
  cg_literal(clip, sizeof clip, o->clip, 1);
  cg_literal(minlr, sizeof minlr, o->min_lr_ratio, 1);
  bool cosine = !o->schedule || !strcmp(o->schedule, "cosine");
  P(e, "\nstatic const CgModel model = {\n");
  P(e, "    .name = \"%s\", .source = \"%s\", .mesh = \"%s\", .plan = PLAN, .f64 = %d,\n",
    e->g->model, m->source, t->mesh ? t->mesh->name : "-", e->f64);
  P(e, "    .params = params, .nparams = NPARAMS,\n");
  P(e, "    .arena_bytes = ARENA_BYTES, .persistent_bytes = PERSISTENT_BYTES,\n");
  P(e, "    .grads_offset = GRADS_OFFSET, .grads_bytes = GRADS_BYTES,\n");
  P(e, "    .ranks = RANKS, .dp = DP, .mb = MICROBATCHES, .microbatch = MICROBATCH,\n");
  P(e, "    .batch = BATCH, .seq = SEQ, .steps = %lld, .seed = %lluull,\n", (long long)t->steps,
    (unsigned long long)t->seed);
  P(e, "    .opt = %s, .lr = %s, .beta1 = %s, .beta2 = %s, .eps = %s,\n",
    strcmp(o->kind, "adamw") ? "CG_OPT_SGD" : "CG_OPT_ADAMW", lr, b1, b2, eps);
  P(e, "    .weight_decay = %s, .momentum = %s, .clip = %s, .min_lr_ratio = %s,\n", wd, mo, clip,
    minlr);
  P(e, "    .warmup = %d, .cosine = %d,\n", o->warmup, cosine ? 1 : 0);
  if (e->data == DATA_TOKENS)
    P(e, "    .data = CG_DATA_TOKENS, .vocab = %d, .default_data = DEFAULT_DATA,\n};\n\n", e->vocab);
  else
    P(e, "    .data = CG_DATA_SYNTH, .features = %d, .classes = %d,\n};\n\n", e->features,
      e->classes);
  P(e, "static CgArgs args;\nstatic CgData data;\n\n");

  if (e->nchunks)
    emit_run_chunks(e);
  else if (e->pp)
    emit_run_pipeline(e);
  else {
  P(e, "/* Forward (and backward) of this rank's microbatches of one step: the mean\n"
       " * loss.  Parameter gradients accumulate over the microbatches. */\n");
  P(e, "static double run_microbatches(long step, int with_backward) {\n");
  P(e, "  if (with_backward) memset(arena + GRADS_OFFSET, 0, GRADS_BYTES);\n");
  P(e, "  double loss = 0;\n");
  P(e, "  for (int k = 0; k < MICROBATCHES; k++) {\n");
  P(e, "    int row0 = %s * (MICROBATCHES * MICROBATCH) + k * MICROBATCH;\n",
    e->dist ? "mesh.coord[RT_AX_DP]" : "rank");
  P(e, "    // %s, %s\n", vname(e->in0), vname(e->in1));
  P(e, "    rt_check(%s);\n", data_batch_call(e));
  P(e, "    loss += forward(step, row0);\n");
  P(e, "    if (with_backward) backward(step, row0);\n");
  P(e, "  }\n  return loss / MICROBATCHES;\n}\n\n");
  }
  emit_step_support(e);


  if (e->pp)
    P(e, "/* Stage %d's main: the launcher's main() calls it on the ranks of stage %d. */\n"
         "int shardc_stage%d_main(int argc, char **argv);\n"
         "int shardc_stage%d_main(int argc, char **argv) {\n", e->stage, e->stage, e->stage, e->stage);
  else
    P(e, "int main(int argc, char **argv) {\n");
  P(e, "  cg_blas_setup(argc, argv);\n");
  P(e, "  comm_init(&argc, &argv);\n");
  P(e, "  int rc = cg_args_parse(&args, &model, argc, argv, rank == 0);\n");
  P(e, "  if (rc) return comm_finish(rc > 0 ? 0 : 2);\n");
  if (e->dropout) P(e, "  seed = args.seed;\n");
  P(e, "  if (world != RANKS && !args.gradcheck) {\n");
  P(e, "    if (rank == 0)\n");
  if (t->mesh && t->mesh->ndev > 1)
    P(e, "      fprintf(stderr, \"train: error: this program is planned for %%d ranks (mesh %s: "
         "%s) but runs on %%d; run it as: mpirun -np %%d %%s ...\\n\",\n"
         "              RANKS, world, RANKS, argv[0]);\n",
      t->mesh->name, spec);
  else
    P(e, "      fprintf(stderr, \"train: error: this program is planned for 1 rank but was "
         "launched on %%d; run it directly: %%s ...\\n\",\n"
         "              world, argv[0]);\n");
  P(e, "    return comm_finish(1);\n  }\n");
  if (e->dist)
    P(e, "  /* --gradcheck runs the data-parallel plan's program on one rank */\n"
         "  if (!all_ok(rt_mesh_init(&mesh, args.gradcheck ? 1 : DP, TP, %s, %s, %s) == RT_OK)) return comm_finish(1);\n",
      e->q ? "Q" : "0", e->ring ? "SP" : "1", e->pp ? "PP" : "1");
  P(e, "  cg_set_threads(world);\n"
       "  RtArena *mem = NULL;\n"
       "  if (!all_ok(cg_arena_create(&mem, &model) == RT_OK)) return comm_finish(1);\n"
       "  arena = mem->base;\n"
       "  init_params(args.seed);\n"
       "  long step = 0;\n"
       "  int weights_only = 0;\n"
       "  if (args.load &&\n"
       "      !all_ok(load_checkpoint(args.load, &step, &weights_only) == RT_OK))\n"
       "    return comm_finish(1);\n"
       "  if (args.save && !all_ok(rank != 0 || cg_ckpt_check_target(args.save) == RT_OK))\n"
       "    return comm_finish(1);\n"
       "  if (!all_ok(cg_data_open(&data, &model, args.data, args.seed) == RT_OK)) return comm_finish(1);\n"
       "  if (args.gradcheck) return comm_finish(cg_gradcheck(&model, arena, run_microbatches, args.gradcheck));\n"
       "  RtMetrics log = {0};\n"
       "  if (!all_ok(rank != 0 || rt_metrics_open(&log, args.log, args.load != NULL) == RT_OK))\n"
       "    return comm_finish(1);\n"
       "  int say = rank == 0 && !args.quiet;\n"
       "  if (say) {\n"
       "    char d[512];\n"
       "    cg_data_describe(&data, d, sizeof d);\n"
       "    printf(\"%%sdata:     %%s\\n\", PLAN, d);\n"
       "    if (args.load && weights_only)\n"
       "      printf(\"loaded:   %%s (weights only: the optimizer starts from zero)\\n\", args.load);\n"
       "    else if (args.load)\n"
       "      printf(\"loaded:   %%s (step %%ld)\\n\", args.load, step);\n"
       "    printf(\"train:    steps %%ld..%%ld on %%d rank%%s, seed %%llu\\n\", step + 1, args.steps, world,\n"
       "           world == 1 ? \"\" : \"s\", (unsigned long long)args.seed);\n"
       "    fflush(stdout);\n"
       "  }\n"
       "  if (step >= args.steps) {\n"
       "    /* --steps 0 --save FILE writes the initial weights (for reference runs). */\n"
       "    if (args.save) return comm_finish(save_checkpoint(step) ? 0 : 1);\n"
       "    if (say) printf(\"nothing to do: the checkpoint is at step %%ld, --steps is %%ld\\n\", step, args.steps);\n"
       "    return comm_finish(0);\n"
       "  }\n"
       "  RtProgress progress;\n"
       "  rt_progress_init(&progress, args.steps, (args.steps + 19) / 20, !say);\n"
       "  /* On stdout with the plan and the summary, in order; one line every few\n"
       "   * steps, except alone on a terminal (mpirun gives ranks a pseudo-tty). */\n"
       "  progress.out = stdout;\n"
       "  progress.tty = world == 1 && !getenv(\"OMPI_COMM_WORLD_SIZE\") && isatty(fileno(stdout));\n"
       "  const double tokens_per_step = (double)BATCH * SEQ;\n"
       "  double first_loss = NAN, loss = NAN, t_start = rt_now();\n"
       "  const long first_step = step;\n"
       "  for (; step < args.steps; step++) {\n"
       "    double t0 = rt_now();\n"
       "    /* The first step also measures the arena's high-water mark: it starts\n"
       "     * with every transient byte poisoned (NaN) and finds the highest one\n"
       "     * written. */\n"
       "    const int measure = step == first_step;\n"
       "    if (measure) cg_mem_poison(&model, arena);\n"
       "    loss = run_microbatches(step, 1);\n"
       "    size_t measured = measure ? cg_mem_highwater(&model, arena) : 0;\n"
       "    // sum gradients and losses over the ranks\n"
       "    sync_gradients();\n"
       "    loss = mean_loss(loss);\n"
       "    double norm = grad_norm() / DP;\n"
       "    if (!isfinite(loss) || !isfinite(norm)) {\n"
       "      double x = isfinite(loss) ? norm : loss;\n"
       "      if (rank == 0)\n"
       "        fprintf(stderr, \"train: error: step %%ld: the %%s is %%s; stopping without saving%%s%%s%%s; \"\n"
       "                        \"check the data, the learning rate and any checkpoint loaded\\n\",\n"
       "                step + 1, isfinite(loss) ? \"gradient norm\" : \"loss\", isnan(x) ? \"NaN\" : \"infinite\",\n"
       "                args.save ? \" (\" : \"\", args.save ? args.save : \"\",\n"
       "                args.save ? \" keeps its last good state)\" : \"\");\n"
       "      return comm_finish(1);\n"
       "    }\n"
       "    double lr = cg_lr(&model, step);\n"
       "    optimizer_step(step + 1, lr, rt_clip_scale(norm, %s) / DP);\n"
       "    double ms = rt_ms_since(t0), tps = tokens_per_step / (ms / 1e3);\n"
       "%s%s"
       "    if (!all_ok(rank != 0 || rt_metrics_log(&log, step + 1, loss, lr, ms, tps) == RT_OK))\n"
       "      return comm_finish(1);\n"
       "    rt_progress_step(&progress, step + 1, loss, tps);\n"
       "    if (isnan(first_loss)) first_loss = loss;\n"
       "    if (args.save && args.save_every && (step + 1) %% args.save_every == 0 &&\n"
       "        step + 1 < args.steps && !save_checkpoint(step + 1))\n"
       "      return comm_finish(1);\n"
       "  }\n"
       "  rt_progress_done(&progress);\n"
       "  if (args.save && !save_checkpoint(step)) return comm_finish(1);\n"
       "  if (say)\n"
       "    printf(\"done:     steps %%ld..%%ld in %%.1f s; loss %%.4f -> %%.4f\\n\", first_step + 1, step,\n"
       "           rt_ms_since(t_start) / 1e3, first_loss, loss);\n"
       "  if (!all_ok(rank != 0 || rt_metrics_close(&log) == RT_OK)) return comm_finish(1);\n"
       "  cg_data_close(&data);\n"
       "  rt_arena_destroy(mem);\n"
       "  return comm_finish(0);\n"
       "}\n",
    clip, e->pp ? pp_measure_text : e->dist ? mesh_mem_check_text : mem_check_text,
    e->pp ? "" : e->dist ? comm_check_text : "");
}

int cg_emit_cpu(FILE *out, Module *m) { return cg_emit_cpu_opts(out, m, NULL); }

static int emit_program(FILE *out, Module *m, const CgOptions *opt);
static int emit_program_chunks(FILE *out, Module *m, const CgOptions *opt, int r);

/* A pipeline: one file holding every stage's program, each compiled on its
 * own (-DSHARDC_STAGE=s, its main renamed), and the launcher's main, which
 * starts MPI and runs the stage of this rank (pp is the outermost axis). */
static int emit_pipeline(FILE *out, Module *m, const CgOptions *opt) {
  int S = m->nstages, rc = 0;
  const Plan *p = &m->train.plan;
  fprintf(out, "/* model.c — %d pipeline stages (%s) on %d pipeline ranks, one program per\n"
               " * rank below (interleaved: each with its chunks).  shardc build compiles this\n"
               " * file once per rank with -DSHARDC_STAGE=r and once without, for the\n"
               " * launcher. */\n\n", S, sched_name(p->schedule), p->pp);
  int v = S / p->pp;
  for (int s = 0; s < p->pp && !rc; s++) {
    fprintf(out, "#if defined(SHARDC_STAGE) && SHARDC_STAGE == %d\n", s);
    stage_select(m, s);
    rc = v > 1 ? emit_program_chunks(out, m, opt, s) : emit_program(out, m, opt);
    fprintf(out, "#endif  /* stage %d */\n\n", s);
  }
  stage_select(m, -1);
  int ndev = m->train.mesh->ndev;
  fprintf(out, "#ifndef SHARDC_STAGE\n"
               "/* ---- the launcher: this rank's stage is its pp coordinate ---- */\n"
               "#include <stdio.h>\n#include <mpi.h>\n\n#include \"rt_codegen_support.h\"\n\n");
  for (int s = 0; s < p->pp; s++) fprintf(out, "int shardc_stage%d_main(int argc, char **argv);\n", s);
  fprintf(out, "\nint main(int argc, char **argv) {\n"
               "  cg_blas_setup(argc, argv);  /* may run the program again: before MPI */\n"
               "  int rank = 0, world = 1;\n"
               "  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {\n"
               "    fprintf(stderr, \"train: error: MPI_Init failed\\n\");\n"
               "    return 1;\n  }\n"
               "  MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
               "  MPI_Comm_size(MPI_COMM_WORLD, &world);\n"
               "  /* on a wrong world size stage 0's program says what to run */\n"
               "  int stage = world == %d ? rank / %d : 0;\n"
               "  switch (stage) {\n", ndev, ndev / p->pp);
  for (int s = 0; s < p->pp; s++)
    fprintf(out, "  case %d: return shardc_stage%d_main(argc, argv);\n", s, s);
  fprintf(out, "  }\n  return 1;\n}\n#endif\n");
  return rc || ferror(out) ? -1 : 0;
}

int cg_emit_cpu_opts(FILE *out, Module *m, const CgOptions *opt) {
  if (cg_check(m, "cpu")) return -1;
  if (m->nstages > 1) return emit_pipeline(out, m, opt);
  return emit_program(out, m, opt);
}

/* An interleaved pipeline rank r: its chunks (virtual stages c*pp + r) in
 * one program.  Their memory plans are laid side by side in one arena,
 *   [persistent of chunk 0 | of chunk 1 | ... | one transient region (the
 *    largest chunk's: one action runs at a time) | stash slots of chunk 0 | ...],
 * so their values are relocated first; each chunk has its own forward_cC
 * and backward_cC, the parameter tables and the step cover all of them. */
static int emit_program_chunks(FILE *out, Module *m, const CgOptions *opt, int r) {
  const Plan *p = &m->train.plan;
  int v = m->nstages / p->pp;
  if (v < 2 || v > SCHED_MAXV) {
    diag_fatal_noloc("internal: %d pipeline chunks per rank", v);
    return -1;
  }
  Graph *cg[SCHED_MAXV] = {0};
  MemPlan *cm[SCHED_MAXV] = {0};
  int64_t sbase[SCHED_MAXV];
  for (int c = 0; c < v; c++) {   /* relocated into the rank's arena by memplan */
    cg[c] = m->stages[c * p->pp + r];
    cm[c] = &m->stage_mem[c * p->pp + r];
    sbase[c] = cm[c]->stash_offset;
  }
  MemPlan all = m->rank_mem[r];
  /* the chunks' parameters as one list */
  Graph *pg = ir_graph_new(cg[0]->model);
  for (int c = 0; c < v; c++)
    for (int i = 0; i < cg[c]->params.len; i++) vec_push(&pg->params, cg[c]->params.data[i]);
  pg->stage = r;
  pg->nstages = m->nstages;
  MemPlan keep = m->mem;
  m->mem = all;
  Emit e = {0};
  e.o = out;
  e.m = m;
  e.g = cg[0];
  e.f64 = opt && opt->f64;
  e.R = e.f64 ? "double" : "float";
  e.S = e.f64 ? "_f64" : "_f32";
  e.scale = e.f64 ? 2 : 1;
  e.dist = true;
  e.tp = p->tp * p->tp2d * p->tp2d;
  e.q = p->tp2d > 1 ? p->tp2d : 0;
  e.ring = ring_size(m);
  e.zstage = -1;
  e.pp = true;
  e.stage = r;
  e.nstages = m->nstages;
  e.nchunks = v;
  e.sbase = arena_alloc(sizeof(int64_t) * (size_t)v);
  for (int c = 0; c < v; c++) e.sbase[c] = sbase[c];
  char err[512];
  if (data_roles(&e, err, sizeof err)) return -1;
  for (int c = 0; c < v; c++) {
    e.g = cg[c];
    e.nn = cg[c]->nodes.len;
    e.nce = 0;
    analyse(&e);
  }
  e.g = pg;
  e.nn = 0;
  emit_header(&e);
  emit_prelude(&e);
  P(&e, "/* The chunks' places in the arena: stash slots, and gradients (one range each). */\n");
  for (int c = 0; c < v; c++) {
    P(&e, "#define STASH_OFFSET_%d %" PRId64 "LL  /* stage %d */\n", c, sbase[c] * e.scale, c * p->pp + r);
    P(&e, "#define STASH_BYTES_%d %" PRId64 "LL\n", c, cm[c]->stash_bytes * e.scale);
    P(&e, "#define SLOTS_%d %d\n", c, cm[c]->slots);
    P(&e, "#define GRADS_OFFSET_%d %" PRId64 "LL\n", c, (cm[c]->base + cm[c]->param_bytes) * e.scale);
    P(&e, "#define GRADS_BYTES_%d %" PRId64 "LL\n", c, cm[c]->grad_bytes * e.scale);
  }
  P(&e, "\n");
  emit_params(&e);
  for (int c = 0; c < v; c++) {
    e.g = cg[c];
    e.nn = cg[c]->nodes.len;
    e.nce = 0;
    analyse(&e);
    e.sfx = arena_printf("_c%d", c);
    m->mem.stash_offset = sbase[c];
    P(&e, "/* ======== chunk %d: pipeline stage %d ======== */\n", c, c * p->pp + r);
    emit_passes(&e);
  }
  e.sfx = NULL;
  e.g = pg;
  e.nn = 0;
  emit_optimizer(&e);
  emit_comms(&e);
  e.chunk_g = cg;
  emit_main(&e);
  m->mem = keep;
  return ferror(out) ? -1 : 0;
}

static int emit_program(FILE *out, Module *m, const CgOptions *opt) {
  Emit e = {0};
  e.o = out;
  e.m = m;
  e.g = m->graph;
  e.f64 = opt && opt->f64;
  e.R = e.f64 ? "double" : "float";
  e.S = e.f64 ? "_f64" : "_f32";
  e.scale = e.f64 ? 2 : 1;
  e.nn = e.g->nodes.len;
  e.dist = cg_needs_mpi(m);
  e.tp = m->train.plan.tp * m->train.plan.tp2d * m->train.plan.tp2d;
  e.q = m->train.plan.tp2d > 1 ? m->train.plan.tp2d : 0;
  e.ring = ring_size(m);
  e.zstage = e.dist && e.g->buckets.len ? m->train.plan.zero : -1;
  e.pp = m->nstages > 1;
  e.stage = e.g->stage;
  e.nstages = m->nstages;
  /* (--gradcheck runs one rank: a tp, ring, pipeline or ZeRO layout is not that rank's program) */
  if (e.dist && e.f64 && (e.tp > 1 || e.ring > 1 || e.pp || e.zstage >= 1)) {
    diag_fatal_noloc("--precision=fp64 builds are for single-rank gradient checks; build with "
                     "--mesh 1 --strategy dp=1, or in fp32");
    return -1;
  }
  for (int i = 0; i < e.nn; i++)
    if (((Node *)e.g->nodes.data[i])->id != i) {
      diag_fatal_noloc("internal: node ids are not their schedule positions");
      return -1;
    }
  char err[512];
  if (data_roles(&e, err, sizeof err)) return -1;
  analyse(&e);
  emit_header(&e);
  emit_prelude(&e);
  emit_params(&e);
  emit_zero_tables(&e);
  emit_passes(&e);
  emit_optimizer(&e);
  emit_comms(&e);
  emit_main(&e);
  return ferror(out) ? -1 : 0;
}
