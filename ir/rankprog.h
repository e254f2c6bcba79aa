/* rankprog.h — the per-rank program: what one rank of the mesh runs in one
 * training step, as straight-line instruction lists over byte offsets in
 * its arena.  Built after the memory plan (passes/program.c); the
 * communication check, the plan report and every code printer read it and
 * nothing else decides what runs where.
 *
 * A RankProg is one pipeline rank's program (without a pipeline: the only
 * one; every rank of the mesh runs its pipeline rank's program on its own
 * coordinates).  It holds one or more chunks (interleaved pipelines: the
 * virtual stages c*pp + r), each with a forward and a backward block of one
 * microbatch, and a block run once per step before the microbatches (the
 * 16-bit weight copies of precision = bf16); the schedule (which chunk's
 * forward or backward of which microbatch runs when); and the step that
 * follows the microbatches
 * (gradient reductions, the loss and gradient-norm sums, the optimizer,
 * ZeRO's parameter gathers).
 *
 * Operands are PRefs: an IR value (for names, shapes and dtype) at a byte
 * offset, either in the arena or in the stash slot of the microbatch being
 * run (pipelines; the slot is chosen at run time).  Offsets and byte counts
 * are in the program's element size (scale 2 for f64 gradient-check builds).
 */
#ifndef SHARDC_RANKPROG_H
#define SHARDC_RANKPROG_H

#include "module.h"
#include "sexpr.h"

/* Shampoo's placement over the data ranks (passes/optplace.c).  A unit is a
 * block (bi, bj) of r x c of a preconditioned parameter, or a whole
 * unblocked parameter (r 1); param indexes the rank's parameters; owner is
 * the data rank computing it, pos its offset (elements) in the owner's
 * segment of the direction buffer. */
typedef struct OptUnit {
  int param, owner;
  int phase;          /* the step of precondition_every its roots are recomputed at (-1: none) */
  int64_t bi, bj, r, c, pos;
  bool blocked;
  double cost;
} OptUnit;

/* Adafactor of a parameter split over tp (passes/optplace.c): element
 * offsets in the statistics buffer of its partial row sums s and column
 * sums t (-1: that dim is whole on the rank), of x (its part of the sum of
 * the row accumulators; -1: not factored) and of q (Σ u²; -1: not
 * split); rep: the ranks holding the same rows; the full tensor's rows,
 * cols, numel. */
typedef struct AfSplit {
  int64_t s, t, x, q;
  double rep;
  int64_t rows, cols, numel;
} AfSplit;

/* The statistics buffer: per round (0: s, t, x; 1: q) the element bounds
 * of the entries reduced over axis ax[0] only, over both, over ax[1] only:
 * [r[k][0], r[k][1]), [r[k][1], r[k][2]), [r[k][2], r[k][3]). */
typedef struct AfLayout {
  int ax[2];
  int64_t r[2][4];
  int64_t elems;
} AfLayout;

typedef struct PRef {
  const Value *v;     /* NULL: no operand */
  int64_t off;        /* bytes from the arena, or from the stash slot when stash */
  bool stash;
} PRef;

/* A fused elementwise loop: for i < n (or rows x inner with broadcast
 * operands), out[k] op[k] expr[k], with operands read at i (or at j, the
 * position within a row, when bcast). */
typedef struct PLoopArg {
  PRef r;
  bool bcast;
} PLoopArg;

typedef struct PLoop {
  PLoopArg *in;       /* SX_ARG k of the expressions is in[k] */
  int nin;
  PLoopArg *out;
  const char **op;    /* "=", "+=", "-=" */
  SExpr **expr;
  int nout;
  int64_t n, inner;   /* elements; the broadcast operands' size (0: none) */
} PLoop;

typedef enum {
  PI_LOAD,      /* the microbatch's data: out[0], out[1] = the model's two inputs (ring: its columns) */
  PI_RECV,      /* blocking receive from virtual stage peer_vs into out[0] (count elements) */
  PI_SEND,      /* non-blocking send of in[0] to virtual stage peer_vs, from the stash slot */
  PI_SEED,      /* the loss gradient: out[0] = value (a fill), or (received) a note */
  PI_COPY,      /* out[0] = in[0] (bytes): a reshape or tp_copy the plan gave its own buffer */
  PI_KERNEL,    /* node n as one runtime call (possibly with communication, see comm) */
  PI_LOOP,      /* a fused elementwise loop (forward chain, or one backward node) */
  PI_COLL,      /* a collective node: all_reduce, all_gather / reduce_scatter along a dim */
  PI_BUCKET,    /* a gradient bucket's reduction (passes/zero.c) */
  PI_POST,      /* pipelines: the messages queued so far (the previous action's sends, this
                 * block's receives) posted, one NCCL group on the cuda target, then the
                 * receives' tp all-gathers; every block of a pipeline has one, before its
                 * compute */
} PInstrKind;

/* What an instruction sends and receives, for the check and the report. */
typedef enum {
  PC_NONE,
  PC_COLL,      /* one collective on axis: op, bytes (sent per rank) */
  PC_RING,      /* ring attention's messages (runtime/dist_ring.c order) */
  PC_SUMMA,     /* SUMMA's broadcasts and reduces (runtime/dist_summa.c order) */
  PC_P2P,       /* a pipeline message (PI_SEND / PI_RECV) */
} PCommKind;

typedef struct PComm {
  PCommKind kind;
  int axis;
  const char *op;     /* PC_COLL: "all_reduce", "vocab-parallel cross-entropy", ... */
  uint64_t bytes;     /* PC_COLL and PC_P2P: bytes of the call (sent, for the counted ones) */
  bool last_mb;       /* issued only in the last microbatch (overlapped bucket reductions) */
} PComm;

typedef struct PInstr {
  PInstrKind kind;
  const Node *n;          /* the IR node (KERNEL, COLL, BUCKET, SEED, COPY; LOOP: the first) */
  const Node **nodes;     /* every node this instruction runs, in order (comments) */
  int nnodes;
  PRef in[IR_MAXIN], out[IR_MAXOUT], scratch;
  PComm comm;
  /* transient gradients cleared first (KERNEL, LOOP): the first writer */
  PRef zero[IR_MAXOUT];
  int64_t zero_bytes[IR_MAXOUT];
  const Value *zero_of[IR_MAXOUT];
  int nzero;
  int64_t bytes;          /* COPY */
  int64_t count;          /* RECV, SEND: elements */
  /* KERNEL */
  PRef bias;              /* matmul: the bias of a fused add (out[0] is the add's output) */
  PRef dbias;             /* matmul_bwd: the bias gradient it also sums */
  bool assign;            /* writes its output (=) instead of accumulating: the first contribution */
  int ce_slot;            /* cross_entropy(_bwd): the slot of its loss and row count */
  uint64_t site;          /* dropout(_bwd): the mask site, before the row offset */
  int64_t row_elems;      /* dropout(_bwd): elements per microbatch row */
  /* LOOP */
  PLoop *loop;
  /* SEED: the fill value (recv: received, nothing to run) */
  double value;
  bool received;
  /* RECV, SEND: peer virtual stage, tag 2 (mb S + lower) + grad, request slot */
  int peer_vs, lower_vs;
  bool grad;
  /* RECV, SEND of a value whole on every tensor-parallel rank (1D tp, no
   * sequence split over tp): Megatron's scatter/gather.  Each of the split
   * tp ranks sends its 1/split of the message (count / split elements at
   * coord · count / split) to the same tp rank of the peer stage, and the
   * receive all-gathers the whole over tp (gather: that collective, tp
   * bytes).  0: the whole message on every tp rank. */
  int split;
  PComm gather;
  /* BUCKET */
  int bucket;             /* index in the graph's buckets */
  int req;                /* overlapped: its request among the step's (-1: blocking) */
  /* ZeRO-2/3's reduce-scatter of each microbatch (req -1) that trails
   * (passes/passes.h zero_rs_trails): a target may run it beside what
   * follows until the block's PROG_TRAILS-th next trailing one, which
   * first finishes it (waits, adds the shard), or the block's end; the
   * memory plan keeps its gradients and scratch live so long. */
  bool trail;
  /* COLL: a ZeRO-3 parameter gather (passes/zero.c places it one layer
   * ahead): 1 + its slot (0: none).  A target may run it beside the
   * kernels that follow, after those before it (the buffer it writes is
   * free by then: the memory plan placed it so), until the instruction
   * whose wait names the same slot. */
  int ahead;
  /* bit s: this instruction is the first in its block to touch the buffer
   * of slot s's gather ahead, and waits for it first (0: none) */
  int wait;
  /* COLL in a cast block: a bucket's gather at the step's start (ZeRO-1/2
   * with the masters sharded, passes/zero.c): 1 + its number among the
   * rank's early gathers (0: none; then it blocks).  A target may run it
   * beside the forward that follows, until the instruction whose
   * early_wait is at least that number: the rank's early gathers run in
   * their numbers' order on one stream, so waiting for one waits for
   * those before it.  Megatron-LM's overlapped parameter gather. */
  int early;
  /* 1 + the highest number of the early gathers whose copy this
   * instruction is the first of the step to touch: it waits for that
   * gather first (0: none) */
  int early_wait;
  /* The cuda target runs it jointly with the instruction before it
   * (passes/program.c; priced so by cost.c): PJ_GELU a GELU after its
   * linear, in the GEMM's cuBLASLt epilogue (GELU_AUX_BIAS); PJ_DGELU a
   * GELU's backward after the linear's backward, in the dX GEMM's (DGELU);
   * PJ_DX (COLL) the all-reduce (or Megatron-SP's reduce-scatter) of a
   * linear backward's input gradient, started on a stream of its own after
   * the dX GEMM, beside the dW GEMM; 0 none */
  int joint;
  const Node *joint_with;  /* the node of the instruction before (joint != 0) */
} PInstr;

enum { PJ_NONE = 0, PJ_GELU = 1, PJ_DGELU = 2, PJ_DX = 3 };

/* The backward of an LM head whose weight copy has padded rows
 * (passes/precision.c): dW's rows are the master's, fewer than dlogits'
 * columns (passes/program.c). */
bool prog_head_rows_padded(const Node *n);

/* Slots of gathers ahead: gathers take them in turn; at most two are in
 * flight (the next layer's beside the one being read), and waiting on a
 * slot's later gather only waits longer (in order on one stream).  The CUDA
 * runtime's RTC_AHEAD_SLOTS (runtime/cuda/rtc_slots.h) is the same number;
 * tests/unit/test_program.c asserts it. */
#define PROG_AHEAD_SLOTS 2

/* Trailing reduce-scatters in flight at once (PInstr.trail): a layer's
 * 16-bit bucket and its fp32 one (biases, norms) beside the next layer's
 * backward.  The CUDA runtime's RTC_TRAILS (runtime/cuda/rtc_slots.h) is
 * the same number; tests/unit/test_program.c asserts it. */
#define PROG_TRAILS 2

typedef struct PBlock {
  PInstr *ins;
  int n, cap;
} PBlock;

/* One chunk: a (virtual) pipeline stage's graph, or the whole model. */
typedef struct PChunk {
  Graph *g;
  const MemPlan *mem;
  int vs;                 /* virtual stage (c*pp + r), 0 without a pipeline */
  PBlock fwd, bwd;
  /* once per step, before the schedule's first action: the 16-bit copies
   * of the parameters its kernels read (precision = bf16; passes/precision.c
   * wcasts), one PI_LOOP each; empty otherwise */
  PBlock cast;
  int nce;                /* cross_entropy slots */
  bool dropout;
  /* forward's result: the loss from ce slot loss_slot, or from loss (a
   * value), or nothing (a stage before the last: it sends its activation) */
  int loss_slot;
  PRef loss;
  int64_t grads_off, grads_bytes;   /* the chunk's parameter gradients, one range */
  int64_t stash_off, stash_bytes;   /* its stash slots (pipelines) */
  int slots;
  /* fusion counts, for the header */
  int nbias, ndbias, nchains, nchained;
} PChunk;

/* The step after the microbatches (runtime/rt_train.h runs the same list). */
typedef enum {
  PS_WAIT,        /* wait for the count overlapped bucket reductions */
  PS_ALLREDUCE,   /* count elements at off summed over axis */
  PS_LOSS,        /* the mean loss: summed over axis, divided by div; mode PL_* */
  PS_NORM,        /* the gradient norm; mode PN_* */
  PS_OPTIMIZER,   /* the update; mode PO_* */
  PS_ALLGATHER,   /* ZeRO-1/2: bucket `count`'s parameters all-gathered over axis */
  PS_OPT_GATHER,  /* Shampoo placed: the direction buffer at off, count elements per data
                   * rank, all-gathered over axis */
  PS_OPT_APPLY,   /* Shampoo placed: every unit's direction applied to the parameters */
} PStepKind;

enum { PL_SUM = 0, PL_LAST_STAGE = 1 };
enum { PN_RANGE = 0, PN_PARAMS = 1, PN_PARAMS_DP0 = 2, PN_ZERO = 3 };
/* PN_PARAMS_DP0: on data rank 0 only (dp 0, and sp 0 under ring attention): a
 * pipeline's data ranks hold the same reduced gradients. */
enum { PO_PARAMS = 0, PO_ZERO = 1, PO_PLACED = 2, PO_AF_SUMS = 3, PO_AF_SQUARES = 4 };
/* PO_AF_SUMS, PO_AF_SQUARES: Adafactor's partial sums of the tensors tp
 * splits, each followed by their all-reduces over the tp axes
 * (passes/optplace.c; runtime/rt_train.h RT_UPDATE_AF_*). */
/* PO_PLACED: Shampoo's units of this data rank only, their directions into
 * its segment of the direction buffer (then PS_OPT_GATHER, PS_OPT_APPLY). */

typedef struct PStep {
  PStepKind kind;
  int axis, mode;
  int64_t off, count;
  double div;
  const char *what;       /* for comments and messages */
} PStep;

/* A parameter this rank holds: its local tensor and where its gradient and
 * optimizer state are (bytes; -1: none). */
typedef struct PParam {
  const Value *v;
  int64_t offset, grad, opt, opt2;
  int init;               /* PINIT_* */
  double std;
  double norm_w;          /* its gradient's weight in the global norm: 1 / the ranks holding
                           * the same elements (0: a pipeline's second copy of a tied embedding) */
  int bucket;             /* ZeRO: its bucket */
} PParam;

enum { PINIT_ZEROS = 0, PINIT_ONES = 1, PINIT_NORMAL = 2 };

/* A whole-model tensor (init and checkpoints go through full tensors, so a
 * checkpoint is the same file under every plan): its place in a buffer of
 * global_bytes, with optimizer slots when it has a gradient somewhere. */
typedef struct PGlobal {
  const Value *v;         /* a holder's copy: name, full shape (gshape), split */
  int64_t offset, opt, opt2;
  int init;
  double std;
  int owner;              /* the pipeline rank holding it (the first of two: a tied
                           * embedding); -1 without a pipeline */
  int local;              /* its index in this rank's params, -1: another rank's */
} PGlobal;

/* The model's data inputs and where they come from. */
enum { PDATA_NONE, PDATA_TOKENS, PDATA_SYNTH };

/* One action of the schedule: chunk c's forward or backward of microbatch mb.
 * pair (cuda, a forward followed by the backward of another microbatch):
 * the forward's post also posts that backward's receives (into its stash
 * slot), and the backward posts nothing, its sends waiting for the next
 * post with the forward's: Megatron's interleaved steady state, where
 * posting each action's receives with the sends before it could hang
 * (passes/commpass.c chooses). */
typedef struct PAct {
  bool fwd;
  int mb, chunk;
  bool pair;
} PAct;

typedef struct RankProg {
  const Module *m;
  int rank;               /* pipeline rank (0 without a pipeline) */
  int pp, nstages;        /* pipeline ranks and (virtual) stages; 1 and 1 without */
  int scale;              /* offsets and bytes multiplied (2: f64) */
  PChunk *chunk;
  int nchunks;
  PAct *sched;
  int nsched;
  int mb;                 /* microbatches per step */
  PStep *step;
  int nstep, capstep;
  int nreq;               /* overlapped bucket reductions per step */
  const MemPlan *mem;     /* the rank's whole arena (interleaved: all its chunks) */
  bool dist;              /* runs on a mesh of several ranks */
  /* the tensors */
  PParam *param;
  int nparam;
  PGlobal *global;        /* mesh programs: the whole model */
  int nglobal;
  int64_t global_bytes;
  int nscaled;            /* normal_scaled tensors: std 0.02 / sqrt(nscaled) */
  /* gradient buckets (passes/zero.c) and ZeRO */
  int zero;               /* ZeRO stage with buckets, -1 without buckets */
  bool pshard;            /* the parameters stored as the rank's chunks: ZeRO-3, and ZeRO-1/2
                           * under bf16 (zero_shards_masters) */
  int zaxis;              /* the axis of the buckets and ZeRO shards: dp, or data (dp x sp) */
  int nearly;             /* early gathers (PInstr.early) in the cast blocks */
  const PtrVec *buckets;  /* Bucket* of the graph */
  int64_t zflat;          /* elements of the flat layout */
  int zgroup;             /* ranks sharing the shards */
  int64_t zshard, gshard_off, zopt_off;   /* elements per rank; byte offsets */
  /* data */
  int data;               /* PDATA_* */
  int vocab, seq, features, classes;
  int ring;               /* sp=ring: the sequence shards, else 0 */
  /* Shampoo placed over the data ranks (passes/optplace.c), else nunits 0 */
  OptUnit *units;
  int nunits, uranks;
  int64_t useg;           /* elements per data rank's segment of the direction buffer */
  /* Shampoo stagger = true: the root phase of every block of the rank's
   * parameters (with a gradient, preconditioned; in order, each row-major;
   * passes/optplace.c), else nphase 0 */
  int *phase;
  int nphase;
  /* Adafactor under tp (passes/optplace.c): per parameter, else NULL */
  AfSplit *afsplit;
  /* pipelines on the cuda target: their messages staged through the host
   * with MPI, because posted as NCCL groups (PI_POST) the ranks could wait
   * on each other (passes/commpass.c checks both ways; interleaved
   * schedules); the same on every rank */
  bool pipe_mpi;
  bool pairs;             /* some action of sched pairs (the same on every rank) */
} RankProg;

/* ---- passes/program.c ---- */

/* Builds m->prog[r] for every pipeline rank r (scale 1 or 2); 0 or reports. */
int prog_build(Module *m, int scale);
/* The --emit=program text of every pipeline rank's program. */
void prog_print(FILE *out, const Module *m);
/* The IR's name of a value: %14, @embed.weight, $tokens, d%14, d@embed.weight. */
const char *prog_vname(const Value *v);

/* One communication event of a rank in one step, in issue order: a
 * collective (peer -1) on axis, or a pipeline or ring message to or from
 * peer (for PC_P2P a virtual stage, for PC_RING +1 next / -1 previous on the
 * axis).  `what` names the instruction for errors. */
typedef struct PEvent {
  enum { PE_COLL, PE_SEND, PE_RECV } kind;
  int axis;
  const char *op;
  uint64_t bytes;
  bool counted;
  int peer, tag;
  bool pipe;
  int group;              /* NCCL group (commcheck.h): a PI_POST's messages, a ring step's */
  const char *what;
} PEvent;

/* The events of one step of p, in order (allocated in the compiler arena):
 * the order the cpu runtime issues them (comm_program_cuda orders them as
 * the cuda runtime with its pairs, PAct.pair). */
int prog_events(const RankProg *p, PEvent **out);
/* Bytes one rank of p sends per step (counted events), per axis when
 * per_axis (AX_COUNT entries) is given. */
uint64_t prog_comm_bytes(const RankProg *p, uint64_t *per_axis);

#endif
