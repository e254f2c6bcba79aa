/* ir.h — the shardc IR: op table, graph of values and nodes, meshes and plans.
 *
 * A Graph is one model lowered for one (micro)batch shape: values are
 * tensors with concrete shapes (symbolic dims keep their name for printing),
 * nodes are primitive ops from ops.def in program order.
 */
#ifndef SHARDC_IR_H
#define SHARDC_IR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "diag.h"
#include "runtime/dist_axes.h"
#include "sexpr.h"

/* ---- op table ---- */
typedef enum {
#define OP(e, name, mn, mx, no, cls, bwd, shape, flops) OP_##e,
#include "ops.def"
  OP_COUNT,
  OP_NONE = -1   /* ops.def's backward column: none */
} OpKind;

/* Op classes (ops.def's class column): ops of one class share their
 * operand conventions, so the shard passes and autodiff write one rule per
 * class.  Shapes: x [..., C]; P ranks of a mesh axis. */
typedef enum {
  OPC_LEAF,       /* no operands: a model input, parameter or gradient seed */
  OPC_UNARY,      /* y = f(x) elementwise, y like x: scale, gelu, relu, silu, dropout */
  OPC_BINARY,     /* y = a op b elementwise, b like a's trailing dims (broadcast) */
  OPC_MAP,        /* y = f(x1..xn) elementwise, operands of one shape: a scalar function */
  OPC_ROWWISE,    /* each row (the last dim) as a whole: softmax */
  OPC_NORM,       /* x, weights [C] -> y, per-row statistics [...]: layernorm, rmsnorm */
  OPC_MATMUL,     /* x [..., K] · W [N, K]ᵀ */
  OPC_GATHER,     /* rows of a table [V, C] by integer ids */
  OPC_VIEW,       /* the same storage in another shape: reshape */
  OPC_SLICE,      /* a range of the last dim */
  OPC_ROPE,       /* rotary position embedding of [B, T, H, D] */
  OPC_ATTENTION,  /* q, k, v [B, T, H, D] -> o, lse */
  OPC_LOSS,       /* logits, targets -> scalar: cross_entropy */
  OPC_COMM,       /* a collective or local shard over mesh axis i2 (i0 dim, i1 P) */
  OPC_BUCKET,     /* a data-parallel gradient bucket's collective (passes/zero.c) */
  /* backward: the gradients of the class they name */
  OPC_B_ACC,      /* t (or a chunk of it) accumulated into a gradient: acc, shard_bwd */
  OPC_B_UNARY, OPC_B_BINARY, OPC_B_MAP, OPC_B_ROWWISE, OPC_B_NORM, OPC_B_MATMUL,
  OPC_B_GATHER, OPC_B_SLICE, OPC_B_ROPE, OPC_B_ATTENTION, OPC_B_LOSS,
  OPC_COUNT
} OpClass;

typedef enum { DT_F32, DT_F64, DT_BF16, DT_F16, DT_I32, DT_U16, DT_COUNT } DType;

typedef enum {
  ROLE_INPUT,
  ROLE_PARAM,
  ROLE_ACT,
  ROLE_GRAD,
  ROLE_OPTSTATE,
  ROLE_COUNT
} Role;

enum { IR_MAXDIM = 6, IR_MAXIN = 8, IR_MAXOUT = 4 };
/* tensors one pipeline cut may carry (runtime/dist_formulas.h RT_PIPE_MAXMSG) */
enum { PIPE_MAXACT = 4 };

/* One dimension: concrete size n; sym >= 0 names a symbolic dim (B, T) of the
 * model's inputs whose size was bound from the train block. */
typedef struct Dim {
  int64_t n;
  int sym;
} Dim;

typedef struct Shape {
  int ndim;
  Dim d[IR_MAXDIM];
} Shape;

/* Mesh axes: the runtime's RtAxis list (runtime/dist_axes.h), AX_X being
 * RT_AX_X: the world, the plan's axes, the 2D grid's rows and columns, dp x
 * sp together (DATA: the ranks that split the batch) and the first and last
 * pipeline stages (EMBED: a tied embedding's two copies).  Who shares each
 * axis's communicator is runtime/dist_layout.h. */
typedef enum {
#define IR_AX_ENUM_(id, rt, ir) AX_##id = RT_AX_##id,
  RT_AXES(IR_AX_ENUM_)
#undef IR_AX_ENUM_
  AX_COUNT = RT_AX_COUNT
} MeshAxis;
const char *ir_axis_name(int ax);   /* "tp", "dp", ... */

/* GSPMD-style sharding of a value on one rank: for each dim the mesh axis it
 * is split over (-1 = whole), a bit set (1 << axis) of axes over which the
 * value is a pending partial sum, and of axes over which the value is
 * replicated but its GRADIENT will be partial (the input of a column-parallel
 * matmul: Megatron's f).  Along a split dim the tensor may be nseg
 * consecutive segments (global sizes seg[]), each split evenly (a fused
 * q,k,v projection keeps each rank's q, k and v parts).  Filled by the shard
 * pass; all -1 / 0 without tensor or sequence parallelism. */
typedef struct ShardSpec {
  int8_t axis[IR_MAXDIM];
  uint32_t partial;
  uint32_t gpartial;
  int8_t nseg;
  int64_t seg[3];
} ShardSpec;

/* Parameter sharding hints from the builtin that creates the parameter
 * (Megatron: column-parallel splits the output rows, row-parallel the input
 * columns, vocab-parallel the embedding rows). */
typedef enum { TPH_NONE, TPH_COL, TPH_ROW, TPH_VOCAB } TpHint;

typedef struct Node Node;

typedef struct Value {
  int id;
  const char *name;     /* parameter path ("blocks.3.attn.qkv.weight"), input name, or NULL */
  Shape shape;
  DType dtype;
  Role role;
  SrcLoc loc;
  Node *def;            /* producing node (NULL for gradients: they accumulate) */
  struct Value *grad;   /* forward value: its gradient, once autodiff made one */
  struct Value *grad_of;/* gradient value: the forward value it belongs to */
  struct Value *alias;  /* shares storage with this value (a reshape is a view) */
  int64_t view_off;     /* alias: byte offset of this view in the alias's storage
                         * (a parameter or gradient inside a ZeRO bucket) */
  /* Memory plan: byte offset in the rank's arena (-1: none); the node
   * range [live_start, live_end] over which the storage is live; optimizer
   * state of a parameter at opt_offset. */
  int64_t offset, opt_offset;
  int live_start, live_end;
  bool persistent;
  ShardSpec shard;
  /* Parameters: the tp hint (TpHint) and, for TPH_COL, the segments of the
   * output dim (q, k, v); the global shape before the shard pass; mesh axes
   * (1 << axis) over which the gradient is a partial sum that the step must
   * all-reduce (a replicated parameter used on sequence shards). */
  int8_t tph;
  int8_t tph_nseg;
  int64_t tph_seg[3];
  Shape gshape;
  uint32_t grad_partial;
  int nuses;
  /* Parameters: weight decay applies (matrices yes, norms/biases no). */
  bool decay;
  /* Pipeline stage graphs: held in the stash slot of its microbatch (live
   * from forward into backward, or sent and not yet delivered); parameters:
   * index in the whole model's parameter list, and whether another stage
   * holds a copy too (a tied embedding: gradients summed over EMBED). */
  bool stash;
  bool pp_shared;
  int gidx;
  const char *init;     /* parameter init: "normal", "normal_scaled", "ones", "zeros" */
} Value;

typedef struct Attrs {
  int64_t i[IR_MAXDIM];
  int ni;
  double f[2];
  ScalarFn *fn;         /* OP_MAP */
} Attrs;

struct Node {
  int id;
  OpKind op;
  Value *in[IR_MAXIN];
  int nin;
  Value *out;           /* == outs[0] */
  Value *outs[IR_MAXOUT];
  int nout;
  bool bwd;             /* a backward node: outputs accumulate (+=) */
  const Node *fwd;      /* backward node: the forward node it differentiates */
  Attrs a;
  SrcLoc loc;           /* DSL call site */
  const char *scope;    /* parameter path prefix at the call, for provenance */
  Value *scratch;       /* working memory the kernel needs during this node, or NULL */
  const Node *remat;    /* a recomputed copy (passes/recompute.c): the forward node it repeats */
};

/* A bucket of parameters (passes/zero.c): one range of a flat layout whose
 * gradients are reduced together as soon as the backward has produced them
 * (and, under ZeRO-3, whose parameters are gathered together).  Sizes and
 * offsets in elements; under ZeRO-2/3 numel is padded to a multiple of
 * 16·dp and each dp rank owns chunk = numel/dp of it. */
typedef struct Bucket {
  const char *name;     /* "blocks.3", "embed", "blocks.3 (tp-partial)" */
  PtrVec params;        /* Value* (ROLE_PARAM), in layout order */
  int64_t *pos;         /* element offset of params[k] in the bucket */
  int *owner;           /* ZeRO with shampoo or adafactor: the data rank whose chunk holds
                         * params[k] whole (zero.c); else NULL */
  int64_t flat, numel, chunk, shard;  /* in the flat layout; padded size; numel/dp; in the shards */
  bool tp_partial;      /* its gradients are partial sums over tp (sp=megatron) or the 2D grid */
  uint32_t partial;     /* over which of AX_TP, AX_TPR, AX_TPC (1 << axis) */
  bool tied;            /* a pipeline's tied embedding: summed over EMBED too */
  Value *grads;         /* the bucket's gradients; the parameters' gradients are views */
  Value *gshard;        /* ZeRO-2/3: this rank's chunk of the summed gradients */
  Value *pshard;        /* ZeRO-3, and ZeRO-1/2 under bf16 (zero_shards_masters): this
                         * rank's chunk of the parameters (the fp32 masters) */
  bool half;            /* masters sharded: its parameters are read only as 16-bit copies,
                         * so the step gathers them in 16 bits (zero.c masters_sharded) */
} Bucket;

typedef struct Graph {
  const char *model;
  PtrVec nodes;         /* Node*, program order */
  PtrVec values;        /* Value* */
  PtrVec params;        /* Value* with ROLE_PARAM, creation order */
  PtrVec inputs;        /* Value* with ROLE_INPUT */
  Value *loss;          /* scalar the model returns */
  int nfwd;             /* nodes [0, nfwd) are the forward pass; then backward */
  /* A pipeline stage (nstages > 1): its index; the activations received
   * from the previous stage (input nodes, not in inputs) and those sent to
   * the next, one message each per microbatch in this order (a cut inside
   * a layer may carry several: the residual stream and a layernorm's
   * output).  A stage before the last has pipe_out set and loss ==
   * send_act[0]: the sent activations' gradients are received (OP_RECV),
   * not seeded with 1/mb. */
  int stage, nstages;
  Value *recv_act[PIPE_MAXACT], *send_act[PIPE_MAXACT];
  int nrecv, nsend;
  bool pipe_out;
  PtrVec buckets;       /* Bucket*, from passes/zero.c (empty without data parallelism) */
  /* precision = bf16: OP_CAST nodes of a parameter into its persistent
   * 16-bit copy (passes/precision.c), not in nodes: the program runs them
   * once per step, before the first microbatch (id -1) */
  PtrVec wcasts;
  const char *recompute_desc;   /* recompute=auto: what it chose and why (passes/recompute.c) */
  const char *symname[8];
  int64_t symval[8];
  int nsym;
} Graph;

typedef struct OpInfo {
  const char *name;
  int min_in, max_in, nout;
  OpClass cls;
  OpKind bwd;            /* the backward op autodiff emits, OP_NONE for none */
  int (*shape)(Node *n, char *err, int errcap);
  double (*flops)(const Node *n);
} OpInfo;

extern const OpInfo ir_ops[OP_COUNT];

const char *ir_dtype_name(DType t);
int ir_dtype_size(DType t);
int ir_dtype_from_name(const char *s);   /* -1 if unknown */
const char *ir_role_name(Role r);

int64_t ir_numel(const Shape *s);
bool ir_shape_eq(const Shape *a, const Shape *b);
Shape ir_shape(int ndim, const int64_t *dims);
/* Writes "f32[B=4,T=64,128]" style text. */
void ir_shape_str(const Graph *g, const Value *v, char *buf, int cap);

Graph *ir_graph_new(const char *model);
Value *ir_param(Graph *g, const char *name, Shape s, SrcLoc loc, bool decay, const char *init);
Value *ir_input(Graph *g, const char *name, Shape s, DType t, SrcLoc loc);
/* Append a node; runs the op's shape rule.  On a shape error reports
 * "<what>: <message>" at loc and returns NULL. */
Node *ir_add(Graph *g, OpKind op, Value **in, int nin, const Attrs *a, SrcLoc loc,
             const char *scope, const char *what);
/* A value with no defining node yet (passes that rewrite the graph). */
Value *ir_value(Graph *g, Role role, Shape s, DType t, SrcLoc loc);
/* Byte offset of v's storage in its root's (the sum of view_off along the
 * alias chain; 0 for a value that is its own root). */
int64_t ir_view_off(const Value *v);
/* A working buffer of at least `bytes` (f32 elements) for one node. */
Value *ir_scratch(Graph *g, int64_t bytes, SrcLoc loc);
/* A copy of v in g (new id; def, grad, alias and uses cleared): for the
 * pipeline pass's stage graphs. */
Value *ir_value_copy(Graph *g, const Value *v);
/* A copy of n appended to g (new id, no scratch); its in/outs still point
 * at the original values until the caller maps them. */
Node *ir_node_copy(Graph *g, const Node *n);
/* A deep copy of g (its values and nodes, same ids); the buckets are not
 * copied (for passes that try a transformation on a copy: recompute=auto). */
Graph *ir_graph_clone(const Graph *g);
/* The gradient value of v (created on first use, ROLE_GRAD). */
Value *ir_grad(Graph *g, Value *v);
/* Append a backward node accumulating into outs[0..nout) (entries may be
 * NULL); checks their shapes against the op's rule.  NULL on failure. */
Node *ir_add_bwd(Graph *g, OpKind op, Value **in, int nin, Value **outs, const Attrs *a,
                 const Node *fwd);

/* Bytes this rank sends for a communication node under the convention of
 * runtime/dist_formulas.h (0 for other nodes). */
uint64_t ir_comm_bytes(const Node *n);
/* Whether op is a communication op (its i[2] names the mesh axis). */
bool ir_is_comm(OpKind op);
/* The mesh axis a node communicates over (a collective, a vocab-parallel
 * cross-entropy or a ring attention), -1 for none; *group gets the ranks in the group. */
int ir_comm_axis(const Node *n, int *group);
/* Ring attention (sp=ring): an attention or attention_bwd node whose i1 is
 * the ring's ranks and i2 its mesh axis; 0 otherwise.  ir_ring_kv: the
 * elements of one K (or V) block that travels the ring. */
int ir_ring_size(const Node *n);
int64_t ir_ring_kv(const Node *n);
/* 2D tensor parallelism (tp2d): a matmul or matmul_bwd run as SUMMA on a
 * q x q grid (i0 = q, i1 = the grid-row axis, i2 = the grid-column axis;
 * runtime/dist_summa.h) returns q, any other node 0.  ir_norm_split: a
 * layernorm or rmsnorm (or its backward) with the channels split over a
 * mesh axis (i0 = its P ranks, i1 = the axis; eps stays in f0) returns P. */
int ir_summa_q(const Node *n);
int ir_norm_split(const Node *n);
/* A cast whose copy has its rows padded (i1; an LM head's weight copy,
 * passes/precision.c) returns the padded row count, any other node 0. */
int64_t ir_cast_rows(const Node *n);
/* A collective along dim d of the full shape s over P ranks: the rows before
 * d (outer) and the elements of one rank's chunk per outer row (inner). */
void ir_dim_split(const Shape *s, int d, int P, int64_t *outer, int64_t *inner);

/* Whether node n reads the data of input k (some backward ops take an
 * operand only for its shape: add_bwd needs dy, not a and b). */
bool ir_reads_data(const Node *n, int k);

/* Whether v is one of the activations pipeline stage g receives. */
bool ir_is_recv_act(const Graph *g, const Value *v);

int64_t ir_param_count(const Graph *g);
/* The FLOPs one rank runs for node n: the op table's rule on its local
 * shapes, times q for a SUMMA matmul and times the ring's size for a ring
 * attention (the blocks that travel to it).  ir_flops: summed over g's nodes
 * (fwd_only: over its forward pass [0, nfwd), all nodes before autodiff). */
double ir_node_flops(const Node *n);
double ir_flops(const Graph *g, bool fwd_only);

/* Checks structure and re-runs every shape rule; returns 0 or reports. */
int ir_verify(Graph *g);
/* Deterministic text dump (--emit=ir). */
void ir_print(FILE *out, const Graph *g);

/* ---- devices, meshes, plans ---- */

/* A device model: what one rank's device computes and holds, and the
 * default topology of the nodes it comes in (the cost model, passes/cost.c,
 * reads these through the Mesh, whose block may override each figure). */
typedef struct DeviceSpec {
  const char *name;
  double flops_bf16;    /* dense peak, FLOP/s (bf16/fp16 tensor cores) */
  double flops_fp32;    /* plain fp32 (no tensor cores; a CPU core's FMA peak) */
  double flops_tf32;    /* fp32 through tf32 tensor cores (0: none) */
  double mem_bytes;
  double mem_bw;        /* bytes/s */
  double launch_s;      /* fixed cost of one kernel call (launch, or a BLAS call's setup) */
  /* default topology of a node of these devices */
  int per_node;
  const char *link;     /* intra-node link: "nvswitch", "nvlink", "pcie", "shm" */
  double link_bw;       /* intra-node link per device, per direction, bytes/s */
  double link_lat;      /* intra-node latency of one message, s */
  double nic_bw;        /* one NIC port per direction, bytes/s */
  double net_lat;       /* inter-node latency of one message, s */
  int nics;             /* NIC ports per node */
} DeviceSpec;

const DeviceSpec *ir_device_lookup(const char *name);
void ir_device_names(char *buf, int cap);   /* "cpu, A100_SXM, ..." for messages */

/* A mesh: nodes of per_node devices, with the figures the cost model uses
 * (the device's, overridden by the mesh block's keys). */
typedef struct Mesh {
  const char *name;
  SrcLoc loc;
  int nodes, per_node, ndev;
  const DeviceSpec *device;
  double intra_bw, inter_bw;   /* bytes/s per device per direction */
  double mem_bytes;            /* per device */
  SrcLoc mem_loc;              /* its `memory =` value, or none (the catalog's) */
  bool mem_from_flag;          /* mem_bytes comes from --memory */
  double peak_bf16, peak_fp32, peak_tf32;   /* FLOP/s */
  double mem_bw, launch_s;
  double intra_lat, inter_lat; /* s */
  const char *link;
  int nics;                    /* per node */
} Mesh;

/* Fills a mesh's figures from its device (inter: the node's NICs shared by
 * its devices); the mesh block's keys then override them. */
void ir_mesh_defaults(Mesh *me);
/* Whether a pipeline of pp stages (the outermost axis: stage k holds ranks
 * [k·ndev/pp, (k+1)·ndev/pp), ranks numbered node by node) sends between
 * nodes at some stage boundary, the wrap-around of interleaved schedules
 * included.  Messages whole on every tp rank then go scattered over tp
 * (passes/program.c): 1/tp of the bytes over the inter-node link. */
bool ir_mesh_pp_crosses_nodes(const Mesh *me, int pp);

typedef enum { SP_NONE, SP_MEGATRON, SP_RING } SpKind;
enum { PLAN_MAXSTAGES = 64 };
typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED } Schedule;
typedef enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL, RECOMPUTE_AUTO } Recompute;

/* A parallel plan.  Sizes multiply to the mesh size:
 * dp * tp * tp2d^2 * sp (ring) * pp == ndev. */
typedef struct Plan {
  bool is_auto;
  int dp, tp, tp2d, sp, pp;
  SpKind sp_kind;
  Schedule schedule;
  int vchunks;           /* interleaved: virtual stages per device */
  /* pp=N:a+b+...: layers of each stage (nstage_layers == 0: balanced by FLOPs);
   * stage_frac[k]: stage k holds that many hundredths of a layer more (a.5:
   * 50, a.25: 25; the cut
   * inside a layer at an op boundary, passes/stage.c) */
  int stage_layers[PLAN_MAXSTAGES];
  int nstage_layers;
  unsigned char stage_frac[PLAN_MAXSTAGES];
  bool balance_memory;   /* pp=N:memory: cuts that minimise the largest stage's memory */
  int mb;                /* microbatches per step (0 = from the train block) */
  int zero;
  Recompute recompute;   /* the strongest of stage_recompute when that is given */
  /* recompute=a+b+...: each pipeline stage's policy (0: recompute for all) */
  Recompute stage_recompute[PLAN_MAXSTAGES];
  int nstage_recompute;
  unsigned given;        /* PLAN_* bits of keys set explicitly */
} Plan;

enum { PLAN_DP = 1, PLAN_TP = 2, PLAN_TP2D = 4, PLAN_SP = 8, PLAN_PP = 16, PLAN_SCHED = 32,
       PLAN_MB = 64, PLAN_ZERO = 128, PLAN_RECOMPUTE = 256, PLAN_NKEYS = 9 };

void plan_default(Plan *p);
/* The recompute policy of pipeline stage `stage` (a virtual stage of an
 * interleaved schedule: its device's). */
Recompute plan_recompute_at(const Plan *p, int stage);
/* "none", "selective", "full", "auto" (the SPEC's spelling). */
const char *plan_recompute_name(Recompute r);
/* Parses "dp=2,tp=2,sp=ring,pp=2,schedule=1f1b,mb=4,zero=1,recompute=selective"
 * (or "auto") into p, on top of what p holds.  Returns 0, or -1 with a
 * message in err. */
int plan_parse_spec(const char *spec, Plan *p, char *err, int errcap);
/* Fills unset sizes (dp absorbs what is left) and checks that the sizes
 * multiply to ndev.  Returns 0, or -1 with a message. */
int plan_resolve(Plan *p, int ndev, char *err, int errcap);
/* plan_resolve that also says which keys an error is about: PLAN_* bits in
 * *keys, 0 when it is about the sizes as a whole (their product). */
int plan_resolve_keys(Plan *p, int ndev, char *err, int errcap, unsigned *keys);
/* Canonical SPEC string. */
void plan_str(const Plan *p, char *buf, int cap);
/* The layers pp=N:a+b+... gives its stages, in hundredths (a.5 is 50 more). */
int plan_stage_hundredths(const Plan *p);
/* Only the keys given explicitly (p->given), e.g. "tp=2,recompute=full". */
void plan_str_given(const Plan *p, char *buf, int cap);

#endif
