/* program.c — the per-rank program (ir/rankprog.h): the scheduled graphs,
 * the plan and the memory plan lowered, per pipeline rank, into straight-line
 * instruction lists over arena offsets.  Everything a printer, the
 * communication check or the plan report needs is decided here:
 * - operands: every value's byte offset, in the arena or in the stash slot
 *   of the microbatch being run (pipelines);
 * - fusion (fuse.c): bias adds into matmuls, bias gradients into their
 *   matmul's backward, elementwise chains into loops; backward elementwise
 *   ops as one loop producing every input gradient;
 * - a transient gradient is zeroed right before its first writer, or
 *   written (=) by that writer when it covers the whole buffer;
 * - the microbatch's data, the pipeline messages around each forward and
 *   backward (to and from virtual stages vs -+ 1, tagged 2 (k S + the lower
 *   stage) + (1 for a gradient)), gradient buckets started in the last
 *   microbatch;
 * - the 16-bit weight copies of precision = bf16, made once per step before
 *   the microbatches (each chunk's cast block);
 * - the schedule of each pipeline rank (passes/schedule.c);
 * - the step: gradient reductions, the loss and gradient-norm sums, the
 *   optimizer, ZeRO's parameter gathers;
 * - the tensor tables: parameters, the whole model's full tensors for init
 *   and checkpoints, norm weights, buckets.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "fuse.h"
#include "passes.h"
#include "rankprog.h"
#include "runtime/dist_formulas.h"
#include "schedule.h"
#include "shardrules.h"

typedef struct B {
  Module *m;
  RankProg *p;
  PChunk *c;
  Fusion *f;
  int scale;
  bool staged;
} B;

static Value *root(Value *v) {
  while (v && v->alias) v = v->alias;
  return v;
}

static int64_t numel(const Value *v) { return ir_numel(&v->shape); }

/* Bytes of v's data in the program (int32 stays 4 bytes in f64 builds). */
static int64_t nbytes(const B *b, const Value *v) {
  return numel(v) * (v->dtype == DT_I32 ? 4 : ir_dtype_size(v->dtype) * b->scale);
}

static PRef ref(const B *b, const Value *v) {
  PRef r = {0};
  if (!v) return r;
  r.v = v;
  r.off = v->offset * b->scale;
  if (b->staged && root((Value *)v)->stash) {
    r.off -= b->c->stash_off;
    r.stash = true;
  }
  return r;
}

const char *prog_vname(const Value *v) {
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

static PInstr *add(PBlock *bl, PInstrKind k, const Node *n) {
  bl->ins = arena_grow(bl->ins, bl->n, &bl->cap, sizeof *bl->ins, 64);
  PInstr *in = &bl->ins[bl->n++];
  in->kind = k;
  in->n = n;
  in->ce_slot = -1;
  in->req = -1;
  if (n) {
    in->nodes = arena_alloc(sizeof(Node *) * 2);
    in->nodes[0] = n;
    in->nnodes = 1;
  }
  return in;
}

/* The node's operands and outputs as refs. */
static void operands(const B *b, PInstr *in, const Node *n) {
  for (int k = 0; k < n->nin; k++) in->in[k] = ref(b, n->in[k]);
  for (int j = 0; j < n->nout; j++) in->out[j] = ref(b, n->outs[j]);
  if (n->scratch) in->scratch = ref(b, n->scratch);
}

static void comm(PInstr *in, PCommKind kind, int axis, const char *op, uint64_t bytes) {
  in->comm = (PComm){kind, axis, op, bytes, false};
}

/* ---- zeroing transient gradients ---- */

/* v's storage is a transient gradient first written by node i. */
static bool starts_here(const Value *v, int i) {
  Value *r = root((Value *)v);
  return v && r->role == ROLE_GRAD && !r->persistent && r->live_start == i;
}

/* v is a transient gradient first written by node i, and all of it (not a
 * parameter's gradient inside a bucket). */
static bool first_write(const Value *v, int i) {
  return starts_here(v, i) && !ir_view_off(v) && numel(v) == numel(root((Value *)v));
}

/* in->zero: the outputs of n the instruction must clear first. */
static void zero_outputs(const B *b, PInstr *in, const Node *n, int i, const bool *assigned) {
  for (int j = 0; j < n->nout; j++) {
    Value *v = n->outs[j];
    if (!v || (assigned && assigned[j]) || !starts_here(v, i)) continue;
    bool dup = false;
    for (int k = 0; k < j; k++) dup |= n->outs[k] && root(n->outs[k]) == root(v);
    if (dup) continue;
    Value *r = root(v);
    in->zero[in->nzero] = ref(b, r);
    in->zero_bytes[in->nzero] = nbytes(b, r);
    in->zero_of[in->nzero++] = v;
  }
}

/* ---- elementwise loops ---- */

typedef struct Loop {
  PLoopArg in[FUSE_MAX_LOOP];
  int nin;
  PLoopArg out[FUSE_MAX_LOOP];
  const char *op[FUSE_MAX_LOOP];
  SExpr *expr[FUSE_MAX_LOOP];
  int nout;
  int64_t n, inner;
} Loop;

static SExpr *loop_arg(const B *b, Loop *L, Value *v, bool bcast) {
  for (int i = 0; i < L->nin; i++)
    if (L->in[i].r.v == v && L->in[i].bcast == bcast) return sx_arg(i);
  L->in[L->nin].r = ref(b, v);
  L->in[L->nin].bcast = bcast;
  return sx_arg(L->nin++);
}

static void loop_out(const B *b, Loop *L, Value *v, const char *op, bool bcast, SExpr *x) {
  L->out[L->nout].r = ref(b, v);
  L->out[L->nout].bcast = bcast;
  L->op[L->nout] = op;
  L->expr[L->nout++] = x;
}

static PLoop *loop_copy(const Loop *L) {
  PLoop *p = arena_alloc(sizeof *p);
  p->nin = L->nin;
  p->nout = L->nout;
  p->n = L->n;
  p->inner = L->inner;
  p->in = arena_alloc(sizeof(PLoopArg) * (size_t)(L->nin + 1));
  p->out = arena_alloc(sizeof(PLoopArg) * (size_t)(L->nout + 1));
  p->op = arena_alloc(sizeof(char *) * (size_t)(L->nout + 1));
  p->expr = arena_alloc(sizeof(SExpr *) * (size_t)(L->nout + 1));
  memcpy(p->in, L->in, sizeof(PLoopArg) * (size_t)L->nin);
  memcpy(p->out, L->out, sizeof(PLoopArg) * (size_t)L->nout);
  memcpy(p->op, L->op, sizeof(char *) * (size_t)L->nout);
  memcpy(p->expr, L->expr, sizeof(SExpr *) * (size_t)L->nout);
  return p;
}

/* Forward: a chain of elementwise nodes as one loop. */
static void chain_loop(B *b, PBlock *bl, Node **ch, int len) {
  Loop L = {0};
  L.n = numel(ch[0]->out);
  SExpr *prev = NULL;
  for (int k = 0; k < len; k++) {
    Node *c = ch[k];
    SExpr *ops[IR_MAXIN];
    for (int i = 0; i < c->nin; i++)
      ops[i] = k > 0 && c->in[i] == ch[k - 1]->out
                   ? prev
                   : loop_arg(b, &L, c->in[i], numel(c->in[i]) != L.n);
    int64_t bc = fuse_bcast_of(c);
    if (bc) L.inner = bc;
    prev = fuse_op_expr(c, ops);
    if (fuse_chain_stored(b->f, ch, len, k)) loop_out(b, &L, c->out, "=", false, prev);
  }
  PInstr *in = add(bl, PI_LOOP, ch[0]);
  in->nodes = arena_alloc(sizeof(Node *) * (size_t)len);
  memcpy(in->nodes, ch, sizeof(Node *) * (size_t)len);
  in->nnodes = len;
  in->loop = loop_copy(&L);
}

/* Backward elementwise ops: every input gradient in one loop. */
static void bwd_loop(B *b, PBlock *bl, Node *n, int i) {
  Loop L = {0};
  Value *dy = n->in[0];
  L.n = numel(dy);
  SExpr *gdy = loop_arg(b, &L, dy, false);
  int nx = n->op == OP_MAP_BWD ? n->nin - 1 : n->op == OP_SCALE_BWD ? 1 : 2;
  SExpr *x[IR_MAXIN];
  for (int k = 0; k < nx; k++) {
    Value *v = n->in[k + 1];
    bool bc = numel(v) != L.n;
    if (bc) L.inner = numel(v);
    x[k] = n->op == OP_MUL_BWD || n->op == OP_MAP_BWD ? loop_arg(b, &L, v, bc) : NULL;
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
    default: g = sx_bin(SX_MUL, gdy, fuse_fn_expr(n->a.fn, k, x)); break;
    }
    bool dup = false;
    for (int j = 0; j < k; j++) dup |= n->outs[j] == d;
    const char *op = "+=";
    if (!bc && !dup && first_write(d, i)) {
      op = "=";
      assigned[k] = true;
    } else if (n->op == OP_SUB_BWD && k == 1) {
      op = "-=";
      g = gdy;
    }
    loop_out(b, &L, d, op, bc, g);
  }
  PInstr *in = add(bl, PI_LOOP, n);
  zero_outputs(b, in, n, i, assigned);
  in->loop = loop_copy(&L);
}

/* ---- one node ---- */

static void kernel_comm(PInstr *in, const Node *n) {
  if (ir_summa_q(n)) {
    comm(in, PC_SUMMA, (int)n->a.i[1], "summa", ir_comm_bytes(n));
  } else if (ir_ring_size(n) > 1) {
    comm(in, PC_RING, (int)n->a.i[2], "ring attention", ir_comm_bytes(n));
  } else {
    int ax = ir_comm_axis(n, NULL);
    if (ax < 0 || n->op == OP_SHARD) return;   /* a shard only copies this rank's chunk */
    bool xent = n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD;
    comm(in, PC_COLL, ax, xent ? "vocab-parallel cross-entropy" : ir_ops[n->op].name,
         ir_comm_bytes(n));
  }
}

/* Dropout's mask site: the forward node, and in a pipeline the (virtual)
 * stage too (node ids restart in every stage), then the element's global
 * index (row0 times the elements of a row, added at run time). */
static void dropout_site(B *b, PInstr *in, int64_t node, const Value *x) {
  in->site = (uint64_t)node << 40;
  if (b->staged) in->site |= (uint64_t)b->c->vs << 56;
  const Graph *g = b->c->g;
  int64_t rows = g->inputs.len ? ((const Value *)g->inputs.data[0])->shape.d[0].n : 1;
  in->row_elems = numel(x) / (rows ? rows : 1);
}

static void cast_loop(B *b, PBlock *bl, Node *n);

static void node_fwd(B *b, PBlock *bl, Node *n, int i) {
  PInstr *in;
  switch (n->op) {
  case OP_FILL:
  case OP_RECV:
    in = add(bl, PI_SEED, n);
    in->out[0] = ref(b, n->out);
    in->value = n->a.f[0];
    in->received = n->op == OP_RECV;
    return;
  case OP_MATMUL: {
    Node *a = ir_summa_q(n) ? NULL : b->f->bias[i];
    in = add(bl, PI_KERNEL, n);
    operands(b, in, n);
    kernel_comm(in, n);
    if (a) {
      in->nodes[in->nnodes++] = a;
      in->out[0] = ref(b, a->out);
      in->bias = ref(b, a->in[1]);
    }
    return;
  }
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_SCALE: case OP_GELU: case OP_RELU:
  case OP_SILU: case OP_MAP: case OP_CAST: {
    if (n->op == OP_CAST && numel(n->out) > numel(n->in[0])) {
      /* an LM head's copy with padded rows (passes/precision.c), cast
       * before its reader (ZeRO-3): the rows, then zeros */
      cast_loop(b, bl, n);
      return;
    }
    Node *ch[FUSE_MAX_CHAIN];
    int len = fuse_chain(b->f, n, ch);
    if (len == 1 && (n->op == OP_GELU || n->op == OP_RELU || n->op == OP_SILU) && !b->f->loop[i]) {
      in = add(bl, PI_KERNEL, n);
      operands(b, in, n);
      return;
    }
    chain_loop(b, bl, ch, len);
    return;
  }
  case OP_ALLREDUCE:
  case OP_ALLGATHER:
  case OP_ALLGATHER_G:
  case OP_REDUCE_SCATTER:
    in = add(bl, PI_COLL, n);
    operands(b, in, n);
    comm(in, PC_COLL, (int)n->a.i[2], ir_ops[n->op].name, ir_comm_bytes(n));
    return;
  case OP_TP_COPY:
  case OP_RESHAPE:
    in = add(bl, PI_COPY, n);
    operands(b, in, n);
    in->bytes = nbytes(b, n->out);
    return;
  case OP_DROPOUT:
    in = add(bl, PI_KERNEL, n);
    operands(b, in, n);
    dropout_site(b, in, (n->remat ? n->remat : n)->id, n->out);   /* a recompute: the forward's mask */
    b->c->dropout = true;
    return;
  case OP_CROSS_ENTROPY:
    in = add(bl, PI_KERNEL, n);
    operands(b, in, n);
    kernel_comm(in, n);
    in->ce_slot = b->c->nce++;
    return;
  default:
    in = add(bl, PI_KERNEL, n);
    operands(b, in, n);
    kernel_comm(in, n);
    return;
  }
}

/* A bucket's collective started in the last microbatch without blocking
 * (the plain dp all-reduce, ZeRO-1's reduce-scatter). */
static bool overlapped(const Node *n) {
  return n->op == OP_GRAD_ALLREDUCE || (n->op == OP_GRAD_REDUCE_SCATTER && n->a.i[3]);
}

static void node_bwd(B *b, PBlock *bl, Node *n, int i) {
  PInstr *in;
  if (n->remat) { /* a recomputed forward node (passes/recompute.c) */
    node_fwd(b, bl, n, i);
    return;
  }
  switch (n->op) {
  case OP_FILL: /* and the adjoints' collectives: forward ops writing new buffers */
  case OP_RECV:
  case OP_ALLREDUCE: case OP_ALLGATHER: case OP_ALLGATHER_G: case OP_REDUCE_SCATTER: case OP_SHARD:
  case OP_CAST: /* a 16-bit copy for a backward kernel (passes/precision.c) */
    node_fwd(b, bl, n, i);
    return;
  case OP_GRAD_ALLREDUCE:
  case OP_GRAD_REDUCE_SCATTER:
    in = add(bl, PI_BUCKET, n);
    operands(b, in, n);
    comm(in, PC_COLL, (int)n->a.i[2], ir_ops[n->op].name, ir_comm_bytes(n));
    for (int k = 0; k < b->p->buckets->len; k++)   /* (the rank's: every chunk's) */
      if (((Bucket *)b->p->buckets->data[k])->grads == n->in[0]) in->bucket = k;
    if (overlapped(n)) {
      in->req = b->p->nreq++;
      in->comm.last_mb = true;
    } else if (memplan_rs_trails(n) && zero_rs_trails(b->m)) {
      in->trail = true;
    }
    return;
  case OP_ADD_BWD: case OP_SUB_BWD: case OP_MUL_BWD: case OP_SCALE_BWD: case OP_MAP_BWD:
    bwd_loop(b, bl, n, i);
    return;
  default:
    break;
  }
  in = add(bl, PI_KERNEL, n);
  operands(b, in, n);
  kernel_comm(in, n);
  if (n->op == OP_MATMUL_BWD && b->f->dbias[i]) {
    /* the bias gradient of the add after this matmul, summed by the same call */
    in->nodes[0] = b->f->dbias_node[i];
    in->nodes[in->nnodes++] = n;
    in->dbias = ref(b, b->f->dbias[i]);
  }
  if (n->op != OP_CROSS_ENTROPY_BWD || n->a.i[1]) zero_outputs(b, in, n, i, NULL);
  if (n->op == OP_DROPOUT_BWD) dropout_site(b, in, n->a.i[1], n->in[0]);
  if (n->op == OP_CROSS_ENTROPY_BWD) {
    /* the slot of its forward node */
    for (int k = 0; k < b->c->fwd.n; k++)
      if (b->c->fwd.ins[k].n == n->fwd) in->ce_slot = b->c->fwd.ins[k].ce_slot;
    in->assign = !n->a.i[1] && first_write(n->outs[0], i);
  }
}

/* ---- data ---- */

static Node *reader_of(Graph *g, Value *v, OpKind op, int slot) {
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = g->nodes.data[i];
    if (n->op == op && n->nin > slot && n->in[slot] == v) return n;
  }
  return NULL;
}

/* The cross-entropy that reads targets v, directly or through a shard of
 * them (tp2d's head cuts them to its rows, passes/shard2d.c). */
static Node *xent_of(Graph *g, Value *v) {
  Node *n = reader_of(g, v, OP_CROSS_ENTROPY, 1), *s = n ? NULL : reader_of(g, v, OP_SHARD, 0);
  return n ? n : s ? reader_of(g, s->out, OP_CROSS_ENTROPY, 1) : NULL;
}

/* Which inputs are tokens/targets (a language model) or x/labels (a
 * classifier on the synthetic task): the index of the first of the two in
 * g->inputs, or -1 (p->data stays PDATA_NONE). */
static int data_roles(RankProg *p, Graph *g) {
  if (g->inputs.len != 2) return -1;
  for (int k = 0; k < 2; k++) {
    Value *a = g->inputs.data[k], *b = g->inputs.data[1 - k];
    Node *ga = reader_of(g, a, OP_GATHER, 1), *cb = xent_of(g, b);
    if (a->dtype == DT_I32 && b->dtype == DT_I32 && a->shape.ndim == 2 &&
        ir_shape_eq(&a->shape, &b->shape) && ga && cb) {
      p->data = PDATA_TOKENS;
      /* the full vocabulary (tables and logits may be vocab-parallel shards) */
      const Value *t = ga->in[0], *l = cb->in[0];
      int64_t v1 = t->role == ROLE_PARAM ? t->gshape.d[0].n : t->shape.d[0].n;
      int64_t v2 = l->shape.d[l->shape.ndim - 1].n * (cb->a.i[1] ? cb->a.i[2] : 1);
      if (cb->a.i[4] > 0 && cb->a.i[4] < v2) v2 = cb->a.i[4]; /* classes: targets below it */
      p->vocab = (int)(v1 < v2 ? v1 : v2);
      p->seq = (int)a->shape.d[1].n * (p->ring > 1 ? p->ring : 1); /* the whole row */
      return k;
    }
    if (a->dtype != DT_I32 && b->dtype == DT_I32 && a->shape.ndim == 2 && b->shape.ndim == 1 &&
        cb && a->shape.d[0].n == b->shape.d[0].n) {
      const Value *l = cb->in[0];
      p->data = PDATA_SYNTH;
      p->features = (int)a->shape.d[1].n;
      p->classes = (int)(cb->a.i[4] > 0 ? cb->a.i[4]
                                         : l->shape.d[l->shape.ndim - 1].n * (cb->a.i[1] ? cb->a.i[2] : 1));
      p->seq = 1;
      return k;
    }
  }
  return -1;
}

/* ---- a chunk's blocks ---- */

/* The tp ranks a pipeline message of v (count runtime elements) is split
 * over (0: none): where the pipeline crosses nodes, v and its gradient
 * whole on every rank of a 1D tp group, the count a multiple of tp.  (A
 * value split over tp, by Megatron-SP or a column GEMM, already sends only
 * this rank's part.  Inside a node the whole message and the all-gather
 * would move as many bytes over the same links, so it goes whole.) */
static int pipe_split(const B *b, const Value *v, int64_t count) {
  const Plan *pl = &b->m->train.plan;
  const Value *f = v->grad_of ? v->grad_of : v;
  uint32_t tpb = 1u << AX_TP | 1u << AX_TPR | 1u << AX_TPC;
  if (pl->tp <= 1 || pl->tp2d > 1 || count % pl->tp) return 0;
  if (!ir_mesh_pp_crosses_nodes(b->m->train.mesh, pl->pp)) return 0;
  if ((f->shard.gpartial | v->shard.partial) & tpb || !sh_whole_over(f, tpb)) return 0;
  return pl->tp;
}

static void pipe_msg(B *b, PBlock *bl, PInstrKind k, Value *v, int peer, int lower, bool grad) {
  PInstr *in = add(bl, k, NULL);
  if (k == PI_RECV) in->out[0] = ref(b, v);
  else in->in[0] = ref(b, v);
  /* in the runtime's elements (float; a 16-bit value's bytes rounded up to
   * whole floats, inside its 64-byte aligned block) */
  in->count = (nbytes(b, v) + 4 * b->scale - 1) / (4 * b->scale);
  in->peer_vs = peer;
  in->lower_vs = lower;
  in->grad = grad;
  in->split = pipe_split(b, v, in->count);
  uint64_t bytes = (uint64_t)in->count * 4 * b->scale;
  comm(in, PC_P2P, AX_PP, k == PI_RECV ? "recv" : "send", in->split ? bytes / in->split : bytes);
  if (in->split && k == PI_RECV)
    in->gather = (PComm){PC_COLL, AX_TP, "all_gather", rt_vol_allgather(bytes, in->split), false};
}

/* The step's cast of a parameter into its persistent 16-bit copy; a copy
 * with padded rows (an LM head's: passes/precision.c) has its pad cleared
 * first, the loop writing the master's rows. */
static void cast_loop(B *b, PBlock *bl, Node *n) {
  Loop L = {0};
  L.n = numel(n->in[0]);
  SExpr *x = loop_arg(b, &L, n->in[0], false);
  loop_out(b, &L, n->out, "=", false, fuse_op_expr(n, &x));
  PInstr *in = add(bl, PI_LOOP, n);
  in->loop = loop_copy(&L);
  if (numel(n->out) > L.n) {
    int64_t elt = nbytes(b, n->out) / numel(n->out);
    in->zero[0] = ref(b, n->out);
    in->zero[0].off += L.n * elt;
    in->zero_bytes[0] = (numel(n->out) - L.n) * elt;
    in->zero_of[0] = n->out;
    in->nzero = 1;
  }
}

/* Whether instruction in touches (reads, writes, or names) storage of whole
 * or of a view of it. */
static bool touches_root(const PInstr *in, const Value *whole) {
  for (int k = 0; k < IR_MAXIN; k++)
    if (in->in[k].v && root((Value *)in->in[k].v) == whole) return true;
  for (int k = 0; k < IR_MAXOUT; k++)
    if ((in->out[k].v && root((Value *)in->out[k].v) == whole) ||
        (in->zero[k].v && root((Value *)in->zero[k].v) == whole))
      return true;
  const PRef extra[] = {in->scratch, in->bias, in->dbias};
  for (int k = 0; k < 3; k++)
    if (extra[k].v && root((Value *)extra[k].v) == whole) return true;
  for (int k = 0; in->loop && k < in->loop->nin; k++)
    if (root((Value *)in->loop->in[k].r.v) == whole) return true;
  for (int k = 0; in->loop && k < in->loop->nout; k++)
    if (root((Value *)in->loop->out[k].r.v) == whole) return true;
  return false;
}

/* ZeRO-3's parameter gathers (an all_gather of a bucket's parameter shard,
 * placed one layer ahead by passes/zero.c): each takes the next slot and
 * the first later instruction of its block that touches the gathered copy
 * waits for it.  A gather without such an instruction stays blocking. */
static void gathers_ahead(PBlock *bl) {
  int next = 0;
  for (int j = 0; j < bl->n; j++) {
    PInstr *g = &bl->ins[j];
    /* (the shard, or under bf16 its 16-bit copy: the cast block's) */
    const Value *src = g->kind == PI_COLL ? g->n->in[0] : NULL;
    if (src && src->def && src->def->op == OP_CAST && src->def->id < 0) src = src->def->in[0];
    if (g->kind != PI_COLL || g->n->op != OP_ALLGATHER || src->role != ROLE_OPTSTATE)
      continue;
    const Value *whole = root(g->n->out);
    for (int k = j + 1; k < bl->n; k++)
      if (touches_root(&bl->ins[k], whole)) {
        g->ahead = 1 + next;
        bl->ins[k].wait |= 1 << next;
        next = (next + 1) % PROG_AHEAD_SLOTS;
        break;
      }
  }
}

/* ZeRO-1/2 with the masters sharded: the cast block's gathers of the
 * buckets' copies (passes/zero.c), issued at the step's start, each waited
 * for by the first instruction of the step that touches its copy: the rest
 * of the cast block (a tied table's cast from its gathered fp32 copy), else
 * the chunk's forward, else its backward.  The gathers of a cast block are
 * put in the order of those first touches (the layers' order) and numbered
 * across the rank's chunks in the order the cast blocks run, so a layer
 * waits for its own bucket while the later ones are still on the wire.  A
 * gather nothing touches keeps blocking. */
static int first_touch(const PChunk *c, const Value *whole) {
  const PBlock *bl[3] = {&c->cast, &c->fwd, &c->bwd};
  for (int b = 0, base = 0; b < 3; base += bl[b]->n, b++)
    for (int j = 0; j < bl[b]->n; j++) {
      const PInstr *in = &bl[b]->ins[j];
      if (b == 0 && in->kind == PI_COLL) continue;   /* the gathers themselves */
      if (touches_root(in, whole)) return base + j;
    }
  return -1;
}

static PInstr *instr_at(PChunk *c, int at) {
  PBlock *bl[3] = {&c->cast, &c->fwd, &c->bwd};
  for (int b = 0; b < 3; at -= bl[b]->n, b++)
    if (at < bl[b]->n) return &bl[b]->ins[at];
  return NULL;
}

static bool cast_gather(const PInstr *in) { return in->kind == PI_COLL && in->n->op == OP_ALLGATHER; }

static void gathers_early(RankProg *p) {
  p->nearly = 0;
  for (int c = 0; c < p->nchunks; c++) {
    PChunk *ch = &p->chunk[c];
    PBlock *cb = &ch->cast;
    int j0 = 0;
    while (j0 < cb->n && !cast_gather(&cb->ins[j0])) j0++;
    int j1 = j0;
    while (j1 < cb->n && cast_gather(&cb->ins[j1])) j1++;
    if (j1 == j0) continue;
    /* the run [j0, j1) by first touch (insertion sort: stable, a few dozen) */
    int *key = arena_alloc(sizeof(int) * (size_t)(j1 - j0));
    for (int j = j0; j < j1; j++) {
      int t = first_touch(ch, root(cb->ins[j].n->out));
      key[j - j0] = t < 0 ? INT_MAX : t;
    }
    for (int j = j0 + 1; j < j1; j++)
      for (int i = j; i > j0 && key[i - j0] < key[i - 1 - j0]; i--) {
        PInstr t = cb->ins[i];
        cb->ins[i] = cb->ins[i - 1];
        cb->ins[i - 1] = t;
        int k = key[i - j0];
        key[i - j0] = key[i - 1 - j0];
        key[i - 1 - j0] = k;
      }
    for (int j = j0; j < j1; j++) {
      if (key[j - j0] == INT_MAX) continue;
      PInstr *w = instr_at(ch, key[j - j0]);
      cb->ins[j].early = ++p->nearly;
      if (w->early_wait < p->nearly) w->early_wait = p->nearly;
    }
  }
}

/* ---- cuBLASLt epilogue pairs (PInstr.joint) ---- */

bool prog_head_rows_padded(const Node *n) {
  const Value *dl = n->in[0];
  return n->op == OP_MATMUL_BWD && n->outs[1] &&
         n->outs[1]->shape.d[0].n < dl->shape.d[dl->shape.ndim - 1].n;
}

static bool same_ref(PRef a, PRef b) { return a.v && a.v == b.v && a.off == b.off && a.stash == b.stash; }

static bool is16(const Value *v) { return v && ir_dtype_size(v->dtype) == 2; }

static int64_t nbytes_of(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* The nodes of a chunk's graph that read and that write each storage (a
 * value's root, by id): NULL none, USES_SEVERAL two or more. */
typedef struct Uses {
  const Node **rd, **wr;
  int nv;
} Uses;
static const Node uses_several;
#define USES_SEVERAL (&uses_several)

static void uses_add(const Node **t, int nv, const Value *v, const Node *n) {
  if (!v || (v = root((Value *)v))->id < 0 || v->id >= nv) return;
  t[v->id] = !t[v->id] || t[v->id] == n ? n : USES_SEVERAL;
}

static Uses uses_of(const Graph *g) {
  Uses u = {NULL, NULL, g->values.len};
  u.rd = arena_alloc(sizeof *u.rd * (size_t)(u.nv + 1));
  u.wr = arena_alloc(sizeof *u.wr * (size_t)(u.nv + 1));
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++) uses_add(u.rd, u.nv, n->in[k], n);
    for (int k = 0; k < n->nout; k++) uses_add(u.wr, u.nv, n->outs[k], n);
  }
  return u;
}

/* v's storage in the chunk's graph: only r reads it, only w writes it, and
 * v is the storage itself (no view) */
static bool sole_use(const Graph *g, const Uses *u, const Value *v, const Node *r,
                     const Node *w) {
  const Value *rv = root((Value *)v);
  if (v != rv) return false;
  if (rv->id >= 0 && rv->id < u->nv && g->values.data[rv->id] == rv)
    return (!u->rd[rv->id] || u->rd[rv->id] == r) && (!u->wr[rv->id] || u->wr[rv->id] == w);
  for (int i = 0; i < g->nodes.len; i++) { /* a value of another graph: scan */
    const Node *n = g->nodes.data[i];
    for (int k = 0; k < n->nin; k++)
      if (n->in[k] && root(n->in[k]) == rv && n != r) return false;
    for (int k = 0; k < n->nout; k++)
      if (n->outs[k] && root(n->outs[k]) == rv && n != w) return false;
  }
  return true;
}

/* Whether the buffers of a and b share bytes (a pipeline's stash slots lie
 * after the arena's transient part, passes/memplan.c: a stashed value and
 * one that is not never do). */
static bool overlap(PRef a, PRef b) {
  if (!a.v || !b.v || a.stash != b.stash) return false;
  int64_t na = nbytes_of(a.v), nb = nbytes_of(b.v);
  return a.off < b.off + nb && b.off < a.off + na;
}

static bool zeroes_whole(const PInstr *in, PRef r, const Value *v) {
  for (int z = 0; z < in->nzero; z++)
    if (same_ref(in->zero[z], r) && in->zero_bytes[z] == nbytes_of(v)) return true;
  return false;
}

/* Whether b runs in the epilogue of the GEMM a before it (PJ_*).
 * Forward: the activation is written by the GEMM that reads x, W and the
 * bias, so it may overlap none of them.  Backward: dW (and dbias) first,
 * as the matmul_bwd ran, then the GELU's gradient, written (the memory plan
 * may give it the buffer of the activation dW read) by the GEMM that reads
 * dout, W and the pre-activation; the activation's gradient is only the
 * GELU backward's, and both are zeroed whole first.  Not for SUMMA, split
 * norms, ring attention, a padded head, or an instruction that waits for a
 * gather ahead. */
static int gemm_pair(const Graph *g, const Uses *u, const PInstr *a, const PInstr *b) {
  if (a->kind != PI_KERNEL || !a->n || !b->n || b->wait) return PJ_NONE;
  const Node *m = a->n, *n = b->n;
  if (ir_summa_q(m) || ir_norm_split(m) || (m->nout > 1 && ir_ring_size(m) > 1)) return PJ_NONE;
  /* the all-reduce or reduce-scatter of dX beside the dW GEMM: what it
   * writes (its output, its packing scratch) overlaps nothing the backward
   * reads or writes (memplan_dx_reduce keeps them apart) */
  if (b->kind == PI_COLL && !b->ahead && !b->nzero && memplan_dx_reduce(m, n) &&
      !prog_head_rows_padded(m) && same_ref(b->in[0], a->out[0])) {
    const PRef w[2] = {b->out[0], b->scratch};
    bool apart = true;
    for (int k = 0; k < 2 && apart; k++) {
      if (!w[k].v) continue;
      apart = (k == 0 && n->op == OP_ALLREDUCE && same_ref(w[k], a->out[0])) ||
              !overlap(w[k], a->out[0]);
      apart = apart && !overlap(w[k], a->in[0]) && !overlap(w[k], a->in[1]) &&
              !overlap(w[k], a->in[2]) && !overlap(w[k], a->out[1]) &&
              !overlap(w[k], a->dbias) && !overlap(w[k], a->scratch);
    }
    return apart ? PJ_DX : PJ_NONE;
  }
  if (b->kind != PI_KERNEL) return PJ_NONE;
  if (m->op == OP_MATMUL && n->op == OP_GELU && !a->nzero && same_ref(b->in[0], a->out[0]) &&
      is16(m->in[0]) == is16(n->out) && !overlap(b->out[0], a->in[0]) &&
      !overlap(b->out[0], a->in[1]) && !overlap(b->out[0], a->bias))
    return PJ_GELU;
  if (m->op == OP_MATMUL_BWD && n->op == OP_GELU_BWD && m->outs[0] && n->outs[0] &&
      same_ref(b->in[0], a->out[0]) && !prog_head_rows_padded(m) &&
      is16(m->in[0]) == is16(n->outs[0]) && sole_use(g, u, m->outs[0], n, m) &&
      zeroes_whole(a, a->out[0], m->outs[0]) && zeroes_whole(b, b->out[0], n->outs[0]) &&
      !overlap(b->out[0], a->in[0]) && !overlap(b->out[0], a->in[2]) &&
      !overlap(b->out[0], b->in[1]) && !overlap(b->out[0], a->out[0]))
    return PJ_DGELU;
  return PJ_NONE;
}

static void mark_pairs(const Graph *g, const Uses *u, PBlock *bl) {
  for (int j = 0; j + 1 < bl->n; j++)
    if ((bl->ins[j + 1].joint = gemm_pair(g, u, &bl->ins[j], &bl->ins[j + 1]))) {
      bl->ins[j + 1].joint_with = bl->ins[j].n;
      j++;
    }
}

static void build_chunk(B *b, int k0) {
  PChunk *c = b->c;
  Graph *g = c->g;
  int S = b->p->nstages, vs = c->vs;
  b->f = fuse_analyse(g);
  c->nbias = b->f->nbias;
  c->ndbias = b->f->ndbias;
  c->nchains = b->f->nchains;
  c->nchained = b->f->nchained;
  for (int i = 0; i < g->wcasts.len; i++) {
    Node *w = g->wcasts.data[i];
    if (w->op == OP_ALLGATHER) {   /* masters sharded: a bucket's copy (zero.c) */
      PInstr *in = add(&c->cast, PI_COLL, w);
      operands(b, in, w);
      comm(in, PC_COLL, (int)w->a.i[2], ir_ops[w->op].name, ir_comm_bytes(w));
    } else
      cast_loop(b, &c->cast, w);
  }
  if (b->p->data != PDATA_NONE) {
    PInstr *ld = add(&c->fwd, PI_LOAD, NULL);
    ld->out[0] = ref(b, g->inputs.data[k0]);
    ld->out[1] = ref(b, g->inputs.data[1 - k0]);
  }
  /* a cut's messages, one per activation in the stage's order; their
   * gradients come back in the same order */
  for (int i = 0; b->staged && vs > 0 && i < g->nrecv; i++)
    pipe_msg(b, &c->fwd, PI_RECV, g->recv_act[i], vs - 1, vs - 1, false);
  if (b->staged) add(&c->fwd, PI_POST, NULL);
  for (int i = 0; i < g->nfwd; i++) {
    Node *n = g->nodes.data[i];
    if (fuse_emits_code(n) && !b->f->skip[i]) node_fwd(b, &c->fwd, n, i);
  }
  for (int i = 0; b->staged && vs < S - 1 && i < g->nsend; i++)
    pipe_msg(b, &c->fwd, PI_SEND, g->send_act[i], vs + 1, vs, false);
  for (int i = 0; b->staged && vs < S - 1 && i < g->nsend; i++)
    if (g->send_act[i]->grad) pipe_msg(b, &c->bwd, PI_RECV, g->send_act[i]->grad, vs + 1, vs, true);
  if (b->staged) add(&c->bwd, PI_POST, NULL);
  for (int i = g->nfwd; i < g->nodes.len; i++) {
    Node *n = g->nodes.data[i];
    if (fuse_emits_code(n) && !b->f->skip[i]) node_bwd(b, &c->bwd, n, i);
  }
  for (int i = 0; b->staged && vs > 0 && i < g->nrecv; i++)
    if (g->recv_act[i]->grad) pipe_msg(b, &c->bwd, PI_SEND, g->recv_act[i]->grad, vs - 1, vs - 1, true);
  gathers_ahead(&c->fwd);
  gathers_ahead(&c->bwd);
  const Uses u = uses_of(g);
  mark_pairs(g, &u, &c->fwd);
  mark_pairs(g, &u, &c->bwd);
  /* the forward's result */
  c->loss_slot = -1;
  Node *ld = g->loss->def;
  if (!g->pipe_out && ld && ld->op == OP_CROSS_ENTROPY) {
    for (int k = 0; k < c->fwd.n; k++)
      if (c->fwd.ins[k].n == ld) c->loss_slot = c->fwd.ins[k].ce_slot;
  } else if (!g->pipe_out) {
    c->loss = ref(b, g->loss);
  }
}

/* ---- tensor tables ---- */

static int init_kind(const Value *p) {
  return !strcmp(p->init, "ones") ? PINIT_ONES : !strcmp(p->init, "zeros") ? PINIT_ZEROS : PINIT_NORMAL;
}

/* normal_scaled: std 0.02/sqrt(K), K = the number of normal_scaled tensors
 * (the residual projections: two per layer, so 0.02/sqrt(2·layers), GPT-2). */
static double init_std(const Value *p, int nscaled) {
  return !strcmp(p->init, "normal_scaled") ? 0.02 / sqrt((double)nscaled)
         : !strcmp(p->init, "normal")      ? 0.02
                                           : 0;
}

static int count_scaled(const Graph *g) {
  int n = 0;
  for (int i = 0; i < g->params.len; i++) {
    const Value *p = g->params.data[i];
    n += p->init && !strcmp(p->init, "normal_scaled");
  }
  return n;
}

/* How many tp ranks hold the same elements of p: 1 when it is split over tp,
 * else tp; on the tp2d grid q per axis it is not split over. */
static int holders(const Plan *pl, const Value *p) {
  if (pl->tp2d <= 1) {
    for (int d = 0; d < p->shape.ndim; d++)
      if (p->shard.axis[d] >= 0) return 1;
    return pl->tp;
  }
  int h = 1;
  if (!memchr(p->shard.axis, AX_TPR, IR_MAXDIM)) h *= pl->tp2d;
  if (!memchr(p->shard.axis, AX_TPC, IR_MAXDIM)) h *= pl->tp2d;
  return h;
}

/* An open-addressed table by address (values of several stages' graphs
 * may meet in one rank's tables, so not by id), each key with the first
 * and last of something and a position. */
typedef struct PtrSlot {
  const void *key;
  int first, pos, last;
} PtrSlot;
typedef struct PtrMap {
  PtrSlot *t;
  size_t mask;
} PtrMap;

static PtrMap ptrmap_new(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  return (PtrMap){arena_alloc(sizeof(PtrSlot) * cap), cap - 1};
}

/* key's slot: key NULL where it is not in the table (fill it there) */
static PtrSlot *ptrmap_slot(const PtrMap *pm, const void *key) {
  size_t h = ((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull;
  for (size_t i = h >> 20 & pm->mask;; i = (i + 1) & pm->mask)
    if (!pm->t[i].key || pm->t[i].key == key) return &pm->t[i];
}

/* Each parameter of the rank's buckets: the first bucket and position that
 * hold it, and the last bucket. */
static PtrMap bucket_map(const PtrVec *buckets) {
  size_t n = 0;
  for (int k = 0; k < buckets->len; k++) n += (size_t)((const Bucket *)buckets->data[k])->params.len;
  PtrMap bm = ptrmap_new(n);
  for (int k = 0; k < buckets->len; k++) {
    const Bucket *bk = buckets->data[k];
    for (int j = 0; j < bk->params.len; j++) {
      PtrSlot *e = ptrmap_slot(&bm, bk->params.data[j]);
      if (!e->key) *e = (PtrSlot){bk->params.data[j], k, j, k};
      e->last = k;
    }
  }
  return bm;
}

/* A parameter's byte offset in the arena, or where only its bucket's chunk
 * is stored (RankProg.pshard) in the flat bucket layout. */
static int64_t param_offset(const B *b, const PtrMap *bm, const Value *p) {
  if (!b->p->pshard) return p->offset * b->scale;
  const PtrSlot *e = ptrmap_slot(bm, p);
  if (!e->key) return -1;
  const Bucket *bk = b->p->buckets->data[e->first];
  return (bk->flat + bk->pos[e->pos]) * 4 * b->scale;
}

static void param_table(B *b, PtrVec *ps) {
  RankProg *p = b->p;
  const Optimizer *o = &b->m->train.opt;
  bool adam = o->kind && !strcmp(o->kind, "adamw"), mom = !adam && o->momentum > 0;
  const Plan *pl = &b->m->train.plan;
  p->nparam = ps->len;
  p->param = arena_alloc(sizeof(PParam) * (size_t)(ps->len + 1));
  const PtrMap bm = bucket_map(p->buckets);
  for (int i = 0; i < ps->len; i++) {
    Value *v = ps->data[i];
    PParam *q = &p->param[i];
    bool sharded = p->zero >= 1;
    int64_t stride = (numel(v) * 4 + 63) / 64 * 64 * b->scale;
    q->v = v;
    q->offset = param_offset(b, &bm, v);
    q->grad = v->grad ? v->grad->offset * b->scale : -1;
    /* (ZeRO with shampoo or adafactor: the state on the parameter's owner,
     * zero.c owner_state) */
    q->opt = v->grad && (((adam || mom) && !sharded) || opt_blocked(o)) ? v->opt_offset * b->scale : -1;
    q->opt2 = v->grad && adam && !sharded ? q->opt + stride : -1;
    q->init = init_kind(v);
    q->std = init_std(v, p->nscaled);
    int h = holders(pl, v);
    q->norm_w = v->pp_shared && p->rank > 0 ? 0.0 : 1.0 / h;
    const PtrSlot *e = ptrmap_slot(&bm, v);
    q->bucket = e->key && p->zero >= 0 ? e->last : 0;
  }
  /* Shampoo stagger = true: each block's root phase (passes/optplace.c) */
  const Value **vs = arena_alloc(sizeof *vs * (size_t)(ps->len + 1));
  for (int i = 0; i < ps->len; i++) vs[i] = p->param[i].v;
  p->nphase = optplace_phases(b->m, vs, p->nparam, &p->phase);
}

/* The full tensors of the whole model: for init and checkpoints, with the
 * pipeline rank holding each and where this rank keeps it. */
static void global_table(B *b) {
  RankProg *p = b->p;
  Module *m = b->m;
  const Optimizer *o = &m->train.opt;
  bool adam = o->kind && !strcmp(o->kind, "adamw"), mom = !adam && o->momentum > 0;
  Graph *w = m->nstages > 1 ? m->whole : m->graph;
  int ng = w->params.len;
  p->nglobal = ng;
  p->global = arena_alloc(sizeof(PGlobal) * (size_t)(ng + 1));
  bool *grad = arena_alloc(sizeof(bool) * (size_t)(ng + 1));
  for (int i = 0; i < ng; i++) p->global[i].owner = p->global[i].local = -1;
  if (m->nstages > 1) {
    PtrMap loc = ptrmap_new((size_t)p->nparam); /* the rank's parameter tables: the last index */
    for (int j = 0; j < p->nparam; j++) {
      PtrSlot *e = ptrmap_slot(&loc, p->param[j].v);
      e->key = p->param[j].v, e->last = j;
    }
    for (int s = m->nstages - 1; s >= 0; s--) {
      Graph *sg = m->stages[s];
      for (int i = 0; i < sg->params.len; i++) {
        Value *q = sg->params.data[i];
        PGlobal *gl = &p->global[q->gidx];
        gl->owner = s % m->train.plan.pp; /* the pipeline rank (interleaved: of chunk s / pp) */
        grad[q->gidx] |= q->grad != NULL;
        gl->v = q;
        const PtrSlot *e = ptrmap_slot(&loc, q);
        if (e->key) gl->local = e->last;
      }
    }
  } else {
    for (int i = 0; i < ng; i++) {
      Value *q = w->params.data[i];
      p->global[i].v = q;
      p->global[i].local = i;
      grad[i] = q->grad != NULL;
    }
  }
  int64_t goff = 0;
  for (int i = 0; i < ng; i++) {
    PGlobal *gl = &p->global[i];
    int64_t ne = ir_numel(&gl->v->gshape), sz = (ne * 4 + 63) / 64 * 64 * b->scale;
    gl->offset = goff;
    gl->opt = gl->opt2 = -1;
    goff += sz;
    if (grad[i] && (adam || mom)) gl->opt = goff, goff += sz;
    if (grad[i] && adam) gl->opt2 = goff, goff += sz;
    if (grad[i] && opt_blocked(o))   /* shampoo, adafactor: the tensor's whole state */
      gl->opt = goff, goff += (opt_state_elems(o, &gl->v->gshape) * 4 + 63) / 64 * 64 * b->scale;
    gl->init = init_kind(gl->v);
    gl->std = init_std(gl->v, p->nscaled);
  }
  p->global_bytes = goff;
}

/* ---- the step ---- */

static PStep *step(RankProg *p, PStepKind k, int axis, const char *what) {
  p->step = arena_grow(p->step, p->nstep, &p->capstep, sizeof *p->step, 32);
  PStep *s = &p->step[p->nstep++];
  s->kind = k;
  s->axis = axis;
  s->what = what;
  return s;
}

static void step_allreduce(RankProg *p, int axis, int64_t off, int64_t count, const char *what) {
  PStep *s = step(p, PS_ALLREDUCE, axis, what);
  s->off = off;
  s->count = count;
}

/* Gradients of replicated parameters used on split activations: summed over
 * tp (1D), or over the grid row and column (2D). */
static void sync_partial(const B *b) {
  static const int gax[3] = {AX_TP, AX_TPR, AX_TPC};
  RankProg *p = b->p;
  for (int i = 0; i < p->nparam; i++) {
    const Value *v = p->param[i].v;
    for (int a = 0; a < 3; a++)
      if (v->grad && (v->grad_partial & (1u << gax[a])))
        step_allreduce(p, gax[a], p->param[i].grad, numel(v),
                       arena_printf("gradient of %s over %s", v->name, ir_axis_name(gax[a])));
  }
}

/* Adafactor under tp: its partial sums, their all-reduces over the tp
 * axes, the squares, theirs (passes/optplace.c lays out the buffer); the
 * optimizer step after them finishes the update.  Under ZeRO the ranks of
 * a tp group own the same tensors (owner_layout sees the same shard
 * shapes), so each sums its own and the others' entries are zeros. */
static void af_steps(B *b) {
  RankProg *p = b->p;
  AfLayout lay;
  const Value **vs = arena_alloc(sizeof *vs * (size_t)(p->nparam + 1));
  for (int i = 0; i < p->nparam; i++) vs[i] = p->param[i].v;
  if (!optplace_af_layout(b->m, vs, p->nparam, NULL, &lay)) return;
  p->afsplit = arena_alloc(sizeof(AfSplit) * (size_t)(p->nparam + 1));
  optplace_af_layout(b->m, vs, p->nparam, p->afsplit, &lay);
  int64_t off = p->mem->opt_stats_offset * b->scale, es = 4 * b->scale;
  static const char *const what[2][2] = {
      {"Adafactor's row and column sums of split tensors over %s",
       "Adafactor's row and column sums of tensors split over both grid axes, over %s"},
      {"Adafactor's sums of squares of split tensors over %s",
       "Adafactor's sums of squares of tensors split over both grid axes, over %s"}};
  for (int k = 0; k < 2; k++) {
    step(p, PS_OPTIMIZER, AX_WORLD,
         k ? "optimizer: Adafactor's accumulators and sums of squares of the tensors tp splits"
           : "optimizer: Adafactor's partial row and column sums of the tensors tp splits")
        ->mode = k ? PO_AF_SQUARES : PO_AF_SUMS;
    for (int a = 0; a < 2; a++) {
      int64_t lo = lay.r[k][a], hi = lay.r[k][a + 2];
      if (lay.ax[a] < 0 || hi <= lo) continue;
      step_allreduce(p, lay.ax[a], off + lo * es, hi - lo,
                     arena_printf(what[k][lay.ax[1] >= 0], ir_axis_name(lay.ax[a])));
    }
  }
}

static void build_step(B *b) {
  RankProg *p = b->p;
  const Plan *pl = &b->m->train.plan;
  const MemPlan *mp = p->mem;
  int es = 4 * b->scale;
  int data = p->ring > 1 ? AX_DATA : AX_DP;
  double nd = p->ring > 1 ? (double)pl->dp * pl->sp : pl->dp;
  if (!p->dist) {
    PStep *s = step(p, PS_NORM, AX_WORLD, "gradient norm");
    s->mode = PN_RANGE;
    s->off = mp->param_bytes * b->scale;
    s->count = mp->grad_bytes * b->scale / es;
    step(p, PS_OPTIMIZER, AX_WORLD, "optimizer")->mode = PO_PARAMS;
    return;
  }
  if (p->zero == 0 || p->zero == 1) step(p, PS_WAIT, p->zaxis, "the buckets' reductions")->count = p->nreq;
  if (p->zero >= 1) {
    /* the backward reduce-scattered each bucket into this rank's gradient
     * shard; gradients that are partial sums over tp are summed here */
    static const int gax[3] = {AX_TP, AX_TPR, AX_TPC};
    for (int k = 0; k < p->buckets->len; k++) {
      const Bucket *bk = p->buckets->data[k];
      for (int a = 0; a < 3; a++)
        if (bk->partial & (1u << gax[a]))
          step_allreduce(p, gax[a], p->gshard_off + bk->shard * es, bk->chunk,
                         arena_printf("gradient shard of bucket %s over %s", bk->name,
                                      ir_axis_name(gax[a])));
      if (bk->tied)
        step_allreduce(p, AX_EMBED, p->gshard_off + bk->shard * es, bk->chunk,
                       arena_printf("gradient shard of bucket %s over the first and last stage",
                                    bk->name));
    }
  } else {
    sync_partial(b);
    for (int i = 0; i < p->nparam && b->staged; i++) {
      const Value *v = p->param[i].v;
      if (v->grad && v->pp_shared)
        step_allreduce(p, AX_EMBED, p->param[i].grad, numel(v),
                       arena_printf("gradient of %s (tied) over the first and last stage", v->name));
    }
    for (int c = 0; c < p->nchunks && p->zero < 0; c++)
      step_allreduce(p, data, p->chunk[c].grads_off,
                     p->chunk[c].grads_bytes / es,
                     p->ring > 1 ? "gradient all-reduce over dp x sp" : "gradient all-reduce over dp");
  }
  PStep *s = step(p, PS_LOSS, b->staged ? AX_WORLD : data,
                  b->staged ? "loss sum over all ranks"
                  : p->ring > 1 ? "loss sum over dp x sp" : "loss sum over dp");
  s->mode = b->staged ? PL_LAST_STAGE : PL_SUM;
  s->div = nd; /* the data ranks' means (a pipeline's last stage: on tp rank 0) */
  s = step(p, PS_NORM, p->zero >= 1 || b->staged ? AX_WORLD : AX_TP, "gradient norm sum");
  s->mode = p->zero >= 1 ? PN_ZERO : b->staged ? PN_PARAMS_DP0 : PN_PARAMS;
  if (optplace_active(b->m)) {
    /* Shampoo's units on their data ranks, then every direction everywhere */
    const Value **vs = arena_alloc(sizeof *vs * (size_t)(p->nparam + 1));
    for (int i = 0; i < p->nparam; i++) vs[i] = p->param[i].v;
    p->uranks = optplace_ranks(b->m);
    p->nunits = optplace_units(b->m, vs, p->nparam, p->uranks, &p->units, &p->useg);
    step(p, PS_OPTIMIZER, AX_WORLD, "optimizer: this data rank's Shampoo blocks")->mode = PO_PLACED;
    s = step(p, PS_OPT_GATHER, data,
             p->ring > 1 ? "Shampoo directions all-gathered over dp x sp" : "Shampoo directions all-gathered over dp");
    s->off = mp->opt_dir_offset * b->scale;
    s->count = (p->useg * 4 + 63) / 64 * 64 / 4;
    step(p, PS_OPT_APPLY, AX_WORLD, "the directions applied");
  } else {
    af_steps(b);
    step(p, PS_OPTIMIZER, AX_WORLD, "optimizer")->mode = p->zero >= 1 ? PO_ZERO : PO_PARAMS;
  }
  /* (masters sharded: the next step's cast block gathers the copies) */
  for (int k = 0; (p->zero == 1 || p->zero == 2) && !p->pshard && k < p->buckets->len; k++) {
    const Bucket *bk = p->buckets->data[k];
    s = step(p, PS_ALLGATHER, p->zaxis,
             arena_printf("ZeRO-%d parameter all-gather of bucket %s over %s", p->zero, bk->name,
                          p->ring > 1 ? "dp x sp" : "dp"));
    s->count = k;
  }
}

/* ---- a pipeline rank's program ---- */

static RankProg *build_rank(Module *m, int r, int scale) {
  const Plan *pl = &m->train.plan;
  bool staged = m->nstages > 1;
  int pp = staged ? pl->pp : 1, v = staged ? m->nstages / pp : 1;
  RankProg *p = arena_alloc(sizeof *p);
  B b = {m, p, NULL, NULL, scale, staged};
  p->m = m;
  p->rank = r;
  p->pp = pp;
  p->nstages = staged ? m->nstages : 1;
  p->scale = scale;
  p->mb = pl->mb > 0 ? pl->mb : 1;
  p->mem = &m->rank_mem[r];
  p->dist = m->train.mesh && m->train.mesh->ndev > 1;
  p->ring = pl->sp_kind == SP_RING && pl->sp > 1 ? pl->sp : 0;
  p->zaxis = p->ring > 1 ? AX_DATA : AX_DP;
  p->nscaled = count_scaled(staged ? m->whole : m->graph);
  p->nchunks = v;
  p->chunk = arena_alloc(sizeof(PChunk) * (size_t)v);
  for (int c = 0; c < v; c++) {
    PChunk *ch = &p->chunk[c];
    int s = c * pp + r;
    ch->g = staged ? m->stages[s] : m->graph;
    ch->mem = staged ? &m->stage_mem[s] : &m->mem;
    ch->vs = staged ? s : 0;
    ch->grads_off = (ch->mem->base + ch->mem->param_bytes) * scale;
    ch->grads_bytes = ch->mem->grad_bytes * scale;
    /* ZeRO, interleaved: the rank's one gradient range (zero.c), with chunk 0 */
    if (c > 0 && ch->g->buckets.len) ch->grads_bytes = 0;
    ch->stash_off = ch->mem->stash_offset * scale;
    ch->stash_bytes = ch->mem->stash_bytes * scale;
    ch->slots = ch->mem->slots;
  }
  p->buckets = zero_rank_buckets(m, r);
  p->zero = p->dist && p->buckets->len ? pl->zero : -1;
  p->pshard = p->zero == 3 || (p->zero >= 1 && zero_shards_masters(m));
  if (p->zero >= 1) {
    const Bucket *last = p->buckets->data[p->buckets->len - 1];
    p->zflat = last->flat + last->numel;
    p->zgroup = pl->dp * (p->ring > 1 ? pl->sp : 1);
    p->zshard = p->mem->zero_chunk;
    p->gshard_off = p->mem->zero_gshard_offset * scale;
    p->zopt_off = p->mem->zero_opt_offset * scale;
  }
  int k0 = data_roles(p, staged ? m->whole : m->graph);
  for (int c = 0; c < v; c++) {
    b.c = &p->chunk[c];
    build_chunk(&b, k0 < 0 ? 0 : k0);
  }
  /* the schedule: each microbatch's forward then backward, or the pipeline's */
  if (staged) {
    PipeSched ps;
    char err[256];
    if (sched_build(&ps, pl->schedule, pp, p->mb, v, err, sizeof err)) {
      diag_error(plan_key_loc(&m->train, PLAN_SCHED), "%s", err);
      return NULL;
    }
    p->nsched = ps.n[r];
    p->sched = arena_alloc(sizeof(PAct) * (size_t)(p->nsched + 1));
    for (int i = 0; i < p->nsched; i++)
      p->sched[i] = (PAct){ps.act[r][i].fwd != 0, ps.act[r][i].mb, ps.act[r][i].chunk, false};
    sched_free(&ps);
  } else {
    p->nsched = 2 * p->mb;
    p->sched = arena_alloc(sizeof(PAct) * (size_t)p->nsched);
    for (int i = 0; i < p->nsched; i++) p->sched[i] = (PAct){i % 2 == 0, i / 2, 0, false};
  }
  if (p->dist && p->pshard && p->zero >= 1 && p->zero <= 2) gathers_early(p);
  PtrVec ps = {0};
  for (int c = 0; c < v; c++)
    for (int i = 0; i < p->chunk[c].g->params.len; i++) vec_push(&ps, p->chunk[c].g->params.data[i]);
  param_table(&b, &ps);
  if (p->dist) global_table(&b);
  build_step(&b);
  return p;
}

int prog_build(Module *m, int scale) {
  m->nrprog = 0;
  if (!m->graph || !m->planned) return 0;
  if (m->nstages <= 1 && (!m->graph->loss || !m->graph->nfwd)) return 0;
  int pp = m->nstages > 1 ? m->train.plan.pp : 1;
  for (int r = 0; r < pp; r++) {
    m->rprog[r] = build_rank(m, r, scale);
    if (!m->rprog[r]) return -1;
  }
  m->nrprog = pp;
  return 0;
}

int pass_program(Module *m) { return prog_build(m, 1); }
