/* test_train.c — the training driver (rt_train.h) on its own: tiny models
 * written by hand against the runtime kernels, their RtProgram tables
 * filled by hand, trained through rt_train_main in child processes.
 *
 * Built twice:
 *   rt_test_train       (libshardrt_train, one rank): a linear classifier on
 *                       the synthetic task: the loss falls, --save/--load
 *                       resume bit-exactly, --steps 0 --save writes the
 *                       initial weights, flag errors exit 2, the NaN stop,
 *                       the divergence warning and --stop-on-divergence,
 *                       the launch check, --gradcheck on an f64 program.
 *   rt_mpi_test_train   (libshardrt_train_mpi; RT_TEST_TRAIN_MPI) run as
 *                       `rt_mpi_test_train MPIRUN [FLAGS] -np`: the same
 *                       model data-parallel on 2 ranks (the gradient range
 *                       all-reduced in the step, one overlapped bucket,
 *                       ZeRO-1, ZeRO-3) and a two-layer model on a 2-stage
 *                       1F1B pipeline train like one rank with the full
 *                       batch (losses within 1e-6); each resumes
 *                       bit-exactly and writes the one-rank initial
 *                       checkpoint byte for byte; a diverging dp=2 run
 *                       stops on every rank with --stop-on-divergence.
 *
 * A child is this binary started as `self --child=VARIANT FLAGS...` (the
 * variant also goes into SHARDRT_TEST_TRAIN, so that a re-exec by
 * rt_blas_setup stays a child).
 */
#include <sys/wait.h>

#include "rt_test.h"
#include "dist_formulas.h"
#include "rt_optim.h"
#include "rt_train.h"
#ifdef RT_TEST_TRAIN_MPI
#include "dist.h"
#endif

/* ---------------------------------------------------------------------------
 * The models: one rank's rows x (R,K) with labels (R) of the synthetic task;
 * linear: logits = x·Wᵀ + b; mlp: h = x·W1ᵀ, logits = h·W2ᵀ + b2
 * (a pipeline: h crosses from stage 0 to stage 1); mean cross-entropy.
 */
enum { K = 8, C = 4, H = 6, BATCH = 16, STEPS = 12, SEED = 7 };

typedef struct Layout {
  int f64, es, R, mb;
  int zero;          /* ZeRO stage of the linear model, 0 none */
  int bucket;        /* linear, no ZeRO: the gradients all-reduced by one overlapped bucket */
  long nan_from;     /* the loss is NaN from this step on (-1: never) */
  long poison_at;    /* shampoo_nan: the forward of this step writes NaN into a factor */
  size_t poison;     /* ... at this arena offset (lin.weight's block 1's L) */
  /* byte offsets in the arena (stash: in the microbatch's stash slot) */
  size_t W, b, dW, db, x, y, logits, dlogits;
  size_t pfull, gfull, gshard, scratch;  /* ZeRO: gathered params, flat grads, the summed shard */
  size_t W1, W2, b2, dW1, dW2, db2, h, dh;
} Layout;
static Layout L;
#ifdef RT_TEST_TRAIN_MPI
static Layout stage[2]; /* stage[r]: pipeline rank r's offsets */
#endif

#define AT(p, off) ((void *)((p)->arena + (off)))
#define ST(p, off) ((void *)((p)->stash + (off)))

static void linear_fwd(void *out, const void *in, const void *w, const void *b, int N, int Cin,
                       int Cout) {
  if (L.f64)
    rt_matmul_forward_f64(out, in, w, b, N, Cin, Cout);
  else
    rt_matmul_forward_f32(out, in, w, b, N, Cin, Cout);
}
static void linear_bwd(void *din, void *dw, void *db, const void *dout, const void *in,
                       const void *w, int N, int Cin, int Cout) {
  if (L.f64)
    rt_matmul_backward_f64(din, dw, db, dout, in, w, N, Cin, Cout);
  else
    rt_matmul_backward_f32(din, dw, db, dout, in, w, N, Cin, Cout);
}
static double xent_fwd(const void *logits, const int32_t *y) {
  double loss = 0;
  int n = 0;
  if (L.f64)
    rt_check(rt_crossentropy_forward_f64(&loss, &n, NULL, NULL, logits, y, L.R, C));
  else
    rt_check(rt_crossentropy_forward_f32(&loss, &n, NULL, NULL, logits, y, L.R, C));
  return loss;
}
/* dlogits written; every row counts (no ignored targets). */
static void xent_bwd(void *dlogits, const void *logits, const int32_t *y) {
  if (L.f64)
    rt_crossentropy_backward_f64(dlogits, logits, NULL, y, L.R, C, 1.0 / L.mb, L.R);
  else
    rt_crossentropy_backward_f32(dlogits, logits, NULL, y, L.R, C, 1.0 / L.mb, L.R);
}

static double linear_forward(RtPass *p) {
  rt_load_batch(p, AT(p, L.x), AT(p, L.y));
  size_t W = L.W, b = L.b;
#ifdef RT_TEST_TRAIN_MPI
  if (L.zero == 3) { /* the bucket's parameters gathered from their chunks */
    rt_allgather_dim(p->mesh, RT_AX_DP, AT(p, L.pfull), AT(p, 0), 1, 32, L.es, NULL);
    W = L.pfull, b = L.pfull + 32 * (size_t)L.es;
  }
#endif
  linear_fwd(AT(p, L.logits), AT(p, L.x), AT(p, W), AT(p, b), L.R, K, C);
  double loss = xent_fwd(AT(p, L.logits), AT(p, L.y));
  if (L.poison && p->step == L.poison_at) /* state gone bad (as an overflow would leave it) */
    for (int i = 0; i < 16; i++)
      ((float *)AT(p, L.poison))[i] = NAN;
  return L.nan_from >= 0 && p->step >= L.nan_from ? NAN : loss;
}

static void linear_backward(RtPass *p) {
  xent_bwd(AT(p, L.dlogits), AT(p, L.logits), AT(p, L.y));
  if (L.zero == 3) {
    memset(AT(p, L.gfull), 0, 64 * (size_t)L.es);
    linear_bwd(NULL, AT(p, L.gfull), AT(p, L.gfull + 32 * (size_t)L.es), AT(p, L.dlogits),
               AT(p, L.x), AT(p, L.pfull), L.R, K, C);
#ifdef RT_TEST_TRAIN_MPI
    rt_reduce_scatter_acc(p->mesh, RT_AX_DP, AT(p, L.gshard), AT(p, L.gfull), 32, L.es,
                          AT(p, L.scratch));
#endif
    return;
  }
  linear_bwd(NULL, AT(p, L.dW), AT(p, L.db), AT(p, L.dlogits), AT(p, L.x), AT(p, L.W), L.R, K, C);
#ifdef RT_TEST_TRAIN_MPI
  if (L.zero == 1)
    rt_bucket_reduce_scatter(p, 0, RT_AX_DP, AT(p, L.gshard), AT(p, L.dW), 32);
  else if (L.bucket)
    rt_bucket_allreduce(p, 0, RT_AX_DP, AT(p, L.dW), (L.db - L.dW) / (size_t)L.es + 16);
#endif
}

static double mlp_forward(RtPass *p) {
  rt_load_batch(p, AT(p, L.x), AT(p, L.y));
  linear_fwd(AT(p, L.h), AT(p, L.x), AT(p, L.W1), NULL, L.R, K, H);
  linear_fwd(AT(p, L.logits), AT(p, L.h), AT(p, L.W2), AT(p, L.b2), L.R, H, C);
  return xent_fwd(AT(p, L.logits), AT(p, L.y));
}

static void mlp_backward(RtPass *p) {
  xent_bwd(AT(p, L.dlogits), AT(p, L.logits), AT(p, L.y));
  memset(AT(p, L.dh), 0, (size_t)L.R * H * (size_t)L.es);
  linear_bwd(AT(p, L.dh), AT(p, L.dW2), AT(p, L.db2), AT(p, L.dlogits), AT(p, L.h), AT(p, L.W2),
             L.R, H, C);
  linear_bwd(NULL, AT(p, L.dW1), NULL, AT(p, L.dh), AT(p, L.x), AT(p, L.W1), L.R, K, H);
}

#ifdef RT_TEST_TRAIN_MPI
/* The pipeline: stage 0 keeps x, y and h in its stash slot (h leaves from
 * there), receives dh into the arena; stage 1 receives h into its slot and
 * sends dh from it. */
static double stage0_forward(RtPass *p) {
  const Layout *S = &stage[0];
  rt_load_batch(p, ST(p, S->x), ST(p, S->y));
  linear_fwd(ST(p, S->h), ST(p, S->x), AT(p, S->W1), NULL, L.R, K, H);
  rt_pipe_send(p, 1, 0, 0, ST(p, S->h), (size_t)L.R * H);
  return 0;
}
static void stage0_backward(RtPass *p) {
  const Layout *S = &stage[0];
  rt_pipe_recv(p, 1, 0, 1, AT(p, S->dh), (size_t)L.R * H);
  linear_bwd(NULL, AT(p, S->dW1), NULL, AT(p, S->dh), ST(p, S->x), AT(p, S->W1), L.R, K, H);
}
static double stage1_forward(RtPass *p) {
  const Layout *S = &stage[1];
  rt_load_batch(p, ST(p, S->x), ST(p, S->y));
  rt_pipe_recv(p, 0, 0, 0, ST(p, S->h), (size_t)L.R * H);
  linear_fwd(ST(p, S->logits), ST(p, S->h), AT(p, S->W2), AT(p, S->b2), L.R, H, C);
  return xent_fwd(ST(p, S->logits), ST(p, S->y));
}
static void stage1_backward(RtPass *p) {
  const Layout *S = &stage[1];
  xent_bwd(AT(p, S->dlogits), ST(p, S->logits), ST(p, S->y));
  memset(ST(p, S->dh), 0, (size_t)L.R * H * (size_t)L.es);
  linear_bwd(ST(p, S->dh), AT(p, S->dW2), AT(p, S->db2), AT(p, S->dlogits), ST(p, S->h),
             AT(p, S->W2), L.R, H, C);
  rt_pipe_send(p, 0, 0, 1, ST(p, S->dh), (size_t)L.R * H);
}
#endif

/* ---------------------------------------------------------------------------
 * The tables
 */

static size_t top; /* the next free byte of the region being laid out */
static size_t take(size_t bytes) {
  size_t at = top;
  top += (bytes + 63) / 64 * 64;
  return at;
}

static RtParam params[2][4], global[4];
static RtShard shards[4];
static RtChunk chunks[2];
static RtStepOp steps[2][8];
static RtBucket bucket = {0, 64, 32, 0}; /* ZeRO: W is flat [0,32), b [32,36), padded to 64 */
static const int bucket_of[4] = {0, 0, 0, 0};
static RtProgram programs[2];

static RtParam tensor(const char *name, int rows, int cols, size_t off, int64_t grad, int init,
                      double std, int decay) {
  RtParam p = {name, cols ? 2 : 1, {rows, cols}, (size_t)rows * (size_t)(cols ? cols : 1),
               off, grad, -1, -1, init, std, decay};
  return p;
}

/* Optimizer state for the tensors of ps that have gradients (AdamW: two
 * slots, SGD with momentum: one). */
static void add_state(RtParam *ps, int n, const RtProgram *pg) {
  for (int i = 0; i < n; i++) {
    if (ps[i].grad < 0)
      continue;
    size_t bytes = ps[i].numel * (size_t)L.es;
    if (pg->opt == RT_OPT_SHAMPOO) {
      ps[i].opt = (int64_t)take((size_t)rt_shampoo_state_elems(ps[i].ndim, ps[i].shape,
                                                               pg->block, pg->beta1 > 0,
                                                               pg->graft) * (size_t)L.es);
      continue;
    }
    if (pg->opt == RT_OPT_ADAMW || pg->momentum > 0)
      ps[i].opt = (int64_t)take(bytes);
    if (pg->opt == RT_OPT_ADAMW)
      ps[i].opt2 = (int64_t)take(bytes);
  }
}

/* The full tensors of a mesh program, replicated over tp; owner[i] is the
 * pipeline rank holding tensor i (-1: every one). */
static void add_global(RtProgram *pg, const RtParam *ps, int n, const int *owner) {
  size_t keep = top;
  top = 0;
  for (int i = 0; i < n; i++) {
    global[i] = ps[i];
    global[i].offset = take(ps[i].numel * (size_t)L.es);
    global[i].grad = -1;
    global[i].opt = global[i].opt2 = -1;
    if (pg->opt == RT_OPT_ADAMW || pg->momentum > 0)
      global[i].opt = (int64_t)take(ps[i].numel * (size_t)L.es);
    if (pg->opt == RT_OPT_ADAMW)
      global[i].opt2 = (int64_t)take(ps[i].numel * (size_t)L.es);
    RtShard s = {ps[i].ndim, {ps[i].shape[0], ps[i].shape[1]}, 0, {{0}}, owner ? owner[i] : -1};
    shards[i] = s;
  }
  pg->global = global;
  pg->nglobal = n;
  pg->global_bytes = top;
  pg->shards = shards;
  top = keep;
}

static void step_op(RtProgram *pg, int kind, int axis, int mode, int64_t off, int64_t count,
                    double div) {
  RtStepOp op = {kind, axis, mode, off, count, div};
  ((RtStepOp *)pg->step)[pg->nstep++] = op;
}

static void common(RtProgram *pg, int r, const char *spec, int ranks, int dp, int pp) {
  memset(pg, 0, sizeof *pg);
  pg->name = "tiny";
  pg->source = "test_train.c";
  pg->mesh = "test";
  pg->spec = spec;
  pg->plan = "plan:     a hand-written test program\n";
  pg->f64 = L.f64;
  pg->ranks = ranks, pg->dp = dp, pg->tp = 1, pg->q = 0, pg->sp = 1, pg->pp = pp;
  pg->rank = r;
  pg->nstages = pp;
  pg->mb = L.mb, pg->microbatch = L.R, pg->batch = BATCH, pg->seq = 1;
  pg->zero = -1;
  pg->zaxis = RT_AX_DP;
  pg->step = steps[r];
  pg->steps = STEPS, pg->seed = SEED;
  pg->opt = RT_OPT_ADAMW;
  pg->lr = 0.05, pg->beta1 = 0.9, pg->beta2 = 0.999, pg->eps = 1e-8;
  pg->weight_decay = 0.01, pg->clip = 1.0, pg->cosine = 1;
  pg->data = RT_TRAIN_SYNTH, pg->features = K, pg->classes = C;
  pg->chunks = &chunks[r];
  pg->nchunks = 1;
}

static void finish_arena(RtProgram *pg, size_t persistent) {
  pg->persistent_bytes = persistent;
  pg->arena_bytes = top;
}

/* The linear classifier: one rank ("one", "f64", "nan", "sgd", "ref",
 * "diverge": AdamW at lr 10; "blowup": SGD at lr 1e39, whose first update
 * leaves the weights infinite with a finite loss; "shampoo": Shampoo in
 * blocks of 4, roots every step; "shampoo_nan": the same, a factor turned
 * NaN by the forward of step 2), or dp=2 ("dp2_range", "dp2_bucket",
 * "zero1", "zero3", "diverge2", "blowup2"; "zero3_unflagged": zero3's
 * tables without their parameter-shard flag, which the driver must
 * refuse). */
static int linear_program(const char *v) {
  int dp = !strncmp(v, "dp2", 3) || !strncmp(v, "zero", 4) || !strcmp(v, "diverge2") ||
                   !strcmp(v, "blowup2")
               ? 2
               : 1;
  L.zero = !strcmp(v, "zero1") ? 1 : !strncmp(v, "zero3", 5) ? 3 : 0;
  L.bucket = !strcmp(v, "dp2_bucket");
  L.mb = dp == 2 ? 1 : 2;
  L.R = BATCH / dp / L.mb;
  RtProgram *pg = &programs[0];
  common(pg, 0, dp == 2 ? (L.zero ? (L.zero == 1 ? "dp=2,zero=1" : "dp=2,zero=3") : "dp=2")
                        : "dp=1",
         dp, dp, 1);
  if (!strcmp(v, "sgd"))
    pg->opt = RT_OPT_SGD, pg->momentum = 0.9, pg->lr = 0.2;
  if (!strncmp(v, "diverge", 7))
    pg->lr = 10, pg->cosine = 0;
  if (!strncmp(v, "blowup", 6))
    pg->opt = RT_OPT_SGD, pg->lr = 1e39, pg->cosine = 0;
  if (!strncmp(v, "shampoo", 7)) {
    pg->opt = RT_OPT_SHAMPOO, pg->block = 4, pg->graft = RT_GRAFT_ADAM, pg->root = RT_ROOT_EIGH;
    pg->start_preconditioning = 0, pg->precondition_every = 1, pg->graft_eps = 1e-8;
    pg->eps = 1e-6;
  }
  size_t es = (size_t)L.es;
  top = 0;
  RtParam *ps = params[0];
  if (L.zero) {
    /* flat layout: W at elements [0,32), b at [32,36) of one bucket of 64;
     * rank r owns elements [32r, 32r+32) */
    size_t flat = L.zero == 3 ? take(32 * es) : take(64 * es); /* ZeRO-3: the chunk only */
    (void)flat;
    size_t G = L.zero == 1 ? take(64 * es) : 0;
    L.gshard = take(32 * es);
    pg->zopt_offset = (int64_t)take(2 * 32 * es);
    size_t persistent = top;
    if (L.zero == 3) {
      L.pfull = take(64 * es);
      G = L.gfull = take(64 * es);
      L.scratch = take(32 * es);
    }
    L.W = 0, L.b = 32 * es; /* ZeRO-1: the whole flat layout */
    L.dW = G, L.db = G + 32 * es;
    ps[0] = tensor("lin.weight", C, K, 0, (int64_t)L.dW, RT_INIT_NORMAL, 0.1, 1);
    ps[1] = tensor("lin.bias", C, 0, 32 * es, (int64_t)L.db, RT_INIT_ZEROS, 0, 0);
    L.x = take((size_t)L.R * K * es);
    L.y = take((size_t)L.R * 4);
    L.logits = take((size_t)L.R * C * es);
    L.dlogits = take((size_t)L.R * C * es);
    finish_arena(pg, persistent);
    pg->zero = L.zero;
    pg->buckets = &bucket, pg->nbuckets = 1, pg->bucket_of = bucket_of;
    pg->zflat = 64, pg->zgroup = 2, pg->zshard = 32;
    pg->gshard_offset = (int64_t)L.gshard;
    pg->nreq = L.zero == 1;
    chunks[0].grads_offset = (int64_t)(L.zero == 1 ? G : L.gshard);
    chunks[0].grads_bytes = (int64_t)(L.gshard + 32 * es) - chunks[0].grads_offset;
  } else {
    L.W = take((size_t)C * K * es);
    L.b = take((size_t)C * es);
    L.dW = take((size_t)C * K * es);
    L.db = take((size_t)C * es);
    chunks[0].grads_offset = (int64_t)L.dW;
    chunks[0].grads_bytes = (int64_t)(top - L.dW);
    ps[0] = tensor("lin.weight", C, K, L.W, (int64_t)L.dW, RT_INIT_NORMAL, 0.1, 1);
    ps[1] = tensor("lin.bias", C, 0, L.b, (int64_t)L.db, RT_INIT_ZEROS, 0, 0);
    add_state(ps, 2, pg);
    if (pg->opt == RT_OPT_SHAMPOO) { /* the workspace; lin.weight's blocks: 4x4 */
      int64_t dbl, ints;
      pg->opt_work_offset = (int64_t)take((size_t)rt_shampoo_work(16, 4, L.es, &dbl, &ints));
      if (!strcmp(v, "shampoo_nan"))
        L.poison_at = 1, L.poison = (size_t)ps[0].opt +
                                     (size_t)(rt_shampoo_head(C * K, 1, RT_GRAFT_ADAM) +
                                              rt_shampoo_block_off(C, K, 4, 0, 1)) * (size_t)L.es;
    }
    size_t persistent = top;
    L.x = take((size_t)L.R * K * es);
    L.y = take((size_t)L.R * 4);
    L.logits = take((size_t)L.R * C * es);
    L.dlogits = take((size_t)L.R * C * es);
    finish_arena(pg, persistent);
    pg->nreq = L.bucket;
    pg->zero = L.bucket ? 0 : -1;
  }
  pg->params = ps, pg->nparams = 2;
  chunks[0].forward = linear_forward, chunks[0].backward = linear_backward;
  int64_t grad_elems = chunks[0].grads_bytes / L.es;
  if (dp == 1) {
    step_op(pg, RT_STEP_NORM, RT_AX_WORLD, RT_NORM_RANGE, (int64_t)L.dW, grad_elems, 0);
    step_op(pg, RT_STEP_OPTIMIZER, RT_AX_WORLD, RT_UPDATE_PARAMS, 0, 0, 0);
    return 1;
  }
  add_global(pg, ps, 2, NULL);
  uint64_t gbytes = (uint64_t)grad_elems * (uint64_t)L.es;
  if (L.zero == 1) {
    step_op(pg, RT_STEP_WAIT, RT_AX_DP, 0, 0, 0, 0);
    pg->comm_bytes = rt_vol_reduce_scatter(64 * es, 2) + rt_vol_allgather(64 * es, 2);
  } else if (L.zero == 3) {
    pg->pshard = strcmp(v, "zero3_unflagged") != 0; /* the parameters stored as the rank's chunks */
    pg->comm_bytes = rt_vol_allgather(64 * es, 2) + rt_vol_reduce_scatter(64 * es, 2);
  } else if (L.bucket) {
    step_op(pg, RT_STEP_WAIT, RT_AX_DP, 0, 0, 0, 0);
    pg->comm_bytes = rt_vol_allreduce(gbytes, 2);
  } else {
    step_op(pg, RT_STEP_ALLREDUCE, RT_AX_DP, 0, (int64_t)L.dW, grad_elems, 0);
    pg->comm_bytes = rt_vol_allreduce(gbytes, 2);
  }
  step_op(pg, RT_STEP_LOSS, RT_AX_DP, RT_LOSS_SUM, 0, 0, dp);
  if (L.zero) {
    step_op(pg, RT_STEP_NORM, RT_AX_WORLD, RT_NORM_ZERO, 0, 0, 0);
    step_op(pg, RT_STEP_OPTIMIZER, RT_AX_WORLD, RT_UPDATE_ZERO, 0, 0, 0);
    if (L.zero == 1)
      step_op(pg, RT_STEP_ALLGATHER, RT_AX_DP, 0, 0, 0, 0);
  } else {
    step_op(pg, RT_STEP_NORM, RT_AX_TP, RT_NORM_PARAMS, 0, 0, 0);
    step_op(pg, RT_STEP_OPTIMIZER, RT_AX_WORLD, RT_UPDATE_PARAMS, 0, 0, 0);
  }
  return 1;
}

/* The two-layer model: one rank ("mlp_ref") or a 2-stage 1F1B pipeline
 * ("pp2") over 2 microbatches. */
static int mlp_program(const char *v) {
  L.mb = 2;
  L.R = BATCH / L.mb;
  size_t es = (size_t)L.es;
  if (!strcmp(v, "mlp_ref")) {
    RtProgram *pg = &programs[0];
    common(pg, 0, "dp=1", 1, 1, 1);
    top = 0;
    RtParam *ps = params[0];
    L.W1 = take((size_t)H * K * es), L.W2 = take((size_t)C * H * es), L.b2 = take((size_t)C * es);
    L.dW1 = take((size_t)H * K * es), L.dW2 = take((size_t)C * H * es);
    L.db2 = take((size_t)C * es);
    chunks[0].grads_offset = (int64_t)L.dW1;
    chunks[0].grads_bytes = (int64_t)(top - L.dW1);
    ps[0] = tensor("l1.weight", H, K, L.W1, (int64_t)L.dW1, RT_INIT_NORMAL, 0.3, 1);
    ps[1] = tensor("l2.weight", C, H, L.W2, (int64_t)L.dW2, RT_INIT_NORMAL, 0.3, 1);
    ps[2] = tensor("l2.bias", C, 0, L.b2, (int64_t)L.db2, RT_INIT_ZEROS, 0, 0);
    add_state(ps, 3, pg);
    size_t persistent = top;
    L.x = take((size_t)L.R * K * es), L.y = take((size_t)L.R * 4);
    L.h = take((size_t)L.R * H * es), L.dh = take((size_t)L.R * H * es);
    L.logits = take((size_t)L.R * C * es), L.dlogits = take((size_t)L.R * C * es);
    finish_arena(pg, persistent);
    pg->params = ps, pg->nparams = 3;
    chunks[0].forward = mlp_forward, chunks[0].backward = mlp_backward;
    step_op(pg, RT_STEP_NORM, RT_AX_WORLD, RT_NORM_RANGE, (int64_t)L.dW1,
            chunks[0].grads_bytes / L.es, 0);
    step_op(pg, RT_STEP_OPTIMIZER, RT_AX_WORLD, RT_UPDATE_PARAMS, 0, 0, 0);
    return 1;
  }
#ifdef RT_TEST_TRAIN_MPI
  /* 1F1B on 2 stages, 2 microbatches: stage 0 runs two forwards ahead */
  static const RtAct order0[4] = {{1, 0, 0, 0}, {1, 1, 0, 0}, {0, 0, 0, 0}, {0, 1, 0, 0}};
  static const RtAct order1[4] = {{1, 0, 0, 0}, {0, 0, 0, 0}, {1, 1, 0, 0}, {0, 1, 0, 0}};
  static const int owner[3] = {0, 1, 1};
  static int local_of[2][3];
  size_t act = (size_t)L.R * H * es;
  for (int r = 0; r < 2; r++) {
    RtProgram *pg = &programs[r];
    Layout *S = &stage[r];
    *S = L;
    common(pg, r, "pp=2,schedule=1f1b", 2, 1, 2);
    top = 0;
    RtParam *ps = params[r];
    int n = 0;
    if (r == 0) {
      S->W1 = take((size_t)H * K * es), S->dW1 = take((size_t)H * K * es);
      ps[n++] = tensor("l1.weight", H, K, S->W1, (int64_t)S->dW1, RT_INIT_NORMAL, 0.3, 1);
    } else {
      S->W2 = take((size_t)C * H * es), S->b2 = take((size_t)C * es);
      S->dW2 = take((size_t)C * H * es), S->db2 = take((size_t)C * es);
      ps[n++] = tensor("l2.weight", C, H, S->W2, (int64_t)S->dW2, RT_INIT_NORMAL, 0.3, 1);
      ps[n++] = tensor("l2.bias", C, 0, S->b2, (int64_t)S->db2, RT_INIT_ZEROS, 0, 0);
    }
    chunks[r].grads_offset = ps[0].grad;
    chunks[r].grads_bytes = (int64_t)top - ps[0].grad;
    add_state(ps, n, pg);
    size_t persistent = top;
    if (r == 0)
      S->dh = take(act); /* received */
    else
      S->dlogits = take((size_t)L.R * C * es);
    /* a stash slot: x, y, h (stage 1: and logits, dh) */
    size_t keep = top;
    top = 0;
    S->x = take((size_t)L.R * K * es), S->y = take((size_t)L.R * 4), S->h = take(act);
    if (r == 1)
      S->logits = take((size_t)L.R * C * es), S->dh = take(act);
    size_t slot = top;
    top = keep;
    chunks[r].slots = r == 0 ? 2 : 1;
    chunks[r].vs = r;
    chunks[r].stash_bytes = (int64_t)slot;
    chunks[r].stash_offset = (int64_t)take(slot * (size_t)chunks[r].slots);
    finish_arena(pg, persistent);
    pg->params = ps, pg->nparams = n;
    for (int i = 0; i < 3; i++)
      local_of[r][i] = r == 0 ? (i == 0 ? 0 : -1) : (i == 0 ? -1 : i - 1);
    pg->local_of = local_of[r];
    pg->order = r == 0 ? order0 : order1;
    pg->norder = 4;
    chunks[r].forward = r == 0 ? stage0_forward : stage1_forward;
    chunks[r].backward = r == 0 ? stage0_backward : stage1_backward;
    step_op(pg, RT_STEP_ALLREDUCE, RT_AX_DP, 0, chunks[r].grads_offset,
            chunks[r].grads_bytes / L.es, 0);
    step_op(pg, RT_STEP_LOSS, RT_AX_WORLD, RT_LOSS_LAST_STAGE, 0, 0, 1);
    step_op(pg, RT_STEP_NORM, RT_AX_WORLD, RT_NORM_PARAMS_DP0, 0, 0, 0);
    step_op(pg, RT_STEP_OPTIMIZER, RT_AX_WORLD, RT_UPDATE_PARAMS, 0, 0, 0);
    pg->comm_bytes = (uint64_t)L.mb * act; /* an activation up, or a gradient down */
  }
  RtParam whole[3] = {tensor("l1.weight", H, K, 0, 0, RT_INIT_NORMAL, 0.3, 1),
                      tensor("l2.weight", C, H, 0, 0, RT_INIT_NORMAL, 0.3, 1),
                      tensor("l2.bias", C, 0, 0, 0, RT_INIT_ZEROS, 0, 0)};
  add_global(&programs[0], whole, 3, owner);
  programs[1].global = programs[0].global, programs[1].nglobal = 3;
  programs[1].global_bytes = programs[0].global_bytes, programs[1].shards = shards;
  return 2;
#else
  return -1;
#endif
}

/* ---------------------------------------------------------------------------
 * A child: one variant's program, trained by the driver
 */

static int child_main(const char *v, int argc, char **argv) {
  static const char *const linear[] = {"one", "f64", "nan", "sgd", "ref", "dp2_range",
                                       "dp2_bucket", "zero1", "zero3", "diverge", "diverge2",
                                       "zero3_unflagged", "blowup", "blowup2", "shampoo",
                                       "shampoo_nan", NULL};
  memset(&L, 0, sizeof L);
  L.f64 = !strcmp(v, "f64");
  L.es = L.f64 ? 8 : 4;
  L.nan_from = !strcmp(v, "nan") ? 2 : -1;
  int n = -1;
  for (int i = 0; linear[i]; i++)
    if (!strcmp(v, linear[i]))
      n = linear_program(v);
  if (!strcmp(v, "mlp_ref") || !strcmp(v, "pp2"))
    n = mlp_program(v);
  if (n < 1) {
    fprintf(stderr, "test_train: no variant '%s' in this build\n", v);
    return 3;
  }
  const RtProgram *progs[2] = {&programs[0], &programs[1]};
  return rt_train_main(progs, n, argc, argv);
}

/* ---------------------------------------------------------------------------
 * The tests: children started with flags, their exit status, output,
 * metrics and checkpoints
 */

static char self[4096];
static const char *dir;
static char **launch; /* MPI: the launcher and its flags up to the rank count */
static int nlaunch;

typedef struct Run {
  int rc;
  char out[16384], err[16384];
} Run;
static Run R;

static void slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = 0;
  if (f)
    fclose(f);
}

/* `self --child=VARIANT FLAGS` (FLAGS split at spaces, @ replaced by the
 * scratch directory), on np ranks under the launcher (np 0: directly);
 * env: "NAME=VALUE" for the child, or NULL. Fills R. */
static void train(int np, const char *variant, const char *flags, const char *env) {
  char buf[2048], child[64], npbuf[16], *args[64];
  int n = 0;
  if (np > 0) {
    for (int i = 0; i < nlaunch; i++)
      args[n++] = launch[i];
    snprintf(npbuf, sizeof npbuf, "%d", np);
    args[n++] = npbuf;
  }
  args[n++] = self;
  snprintf(child, sizeof child, "--child=%s", variant);
  args[n++] = child;
  size_t o = 0;
  for (const char *f = flags; *f && o + 256 < sizeof buf; f++)
    if (*f == '@')
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%s", dir);
    else
      buf[o++] = *f;
  buf[o] = 0;
  for (char *tok = strtok(buf, " "); tok && n < 63; tok = strtok(NULL, " "))
    args[n++] = tok;
  args[n] = NULL;
  char out[512], err[512];
  snprintf(out, sizeof out, "%s/stdout", dir);
  snprintf(err, sizeof err, "%s/stderr", dir);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
      _exit(126);
    if (env)
      putenv((char *)env);
    execvp(args[0], args);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  R.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  slurp(out, R.out, sizeof R.out);
  slurp(err, R.err, sizeof R.err);
  if (getenv("RT_TEST_VERBOSE"))
    fprintf(stderr, "---- %s %s (np %d): exit %d\n%s%s", variant, flags, np, R.rc, R.out, R.err);
}

#define ASSERT_IN(needle, hay)                                                      \
  do {                                                                              \
    test_checks++;                                                                  \
    if (!strstr(hay, needle)) {                                                     \
      fprintf(stderr, "%s:%d: \"%s\" not in %s:\n%s\n", __FILE__, __LINE__, needle, \
              #hay, hay);                                                           \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)
#define ASSERT_NOT_IN(needle, hay)                                                  \
  do {                                                                              \
    test_checks++;                                                                  \
    if (strstr(hay, needle)) {                                                      \
      fprintf(stderr, "%s:%d: \"%s\" in %s:\n%s\n", __FILE__, __LINE__, needle,     \
              #hay, hay);                                                           \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)
/* The child exited with rc; its output is shown otherwise. */
#define ASSERT_RC(want)                                                             \
  do {                                                                              \
    test_checks++;                                                                  \
    if (R.rc != (want)) {                                                           \
      fprintf(stderr, "%s:%d: exit %d, expected %d\nstdout:\n%s\nstderr:\n%s\n",    \
              __FILE__, __LINE__, R.rc, (want), R.out, R.err);                      \
      test_failures++;                                                              \
    }                                                                               \
  } while (0)

static const char *at(const char *name) {
  static char path[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
  return path[k];
}

/* The "loss" values of a JSONL metrics log, as written (%.9g). */
enum { MAXSTEPS = 64 };
typedef struct Losses {
  int n;
  char s[MAXSTEPS][32];
  double v[MAXSTEPS];
} Losses;

static Losses losses(const char *name) {
  Losses l = {0};
  char text[16384];
  slurp(at(name), text, sizeof text);
  for (const char *p = text; (p = strstr(p, "\"loss\":")) && l.n < MAXSTEPS; l.n++) {
    p += 7;
    size_t k = strcspn(p, ",}");
    snprintf(l.s[l.n], sizeof l.s[l.n], "%.*s", (int)(k < 31 ? k : 31), p);
    l.v[l.n] = atof(l.s[l.n]);
  }
  return l;
}

static void assert_same_losses(const char *a, const char *b, int line) {
  Losses x = losses(a), y = losses(b);
  test_checks++;
  int bad = x.n != STEPS || y.n != STEPS;
  for (int i = 0; !bad && i < STEPS; i++)
    bad = strcmp(x.s[i], y.s[i]) != 0;
  if (bad) {
    fprintf(stderr, "%s:%d: losses of %s and %s differ (%d and %d steps):\n", __FILE__, line, a,
            b, x.n, y.n);
    for (int i = 0; i < x.n || i < y.n; i++)
      fprintf(stderr, "  %2d  %-14s %s\n", i + 1, i < x.n ? x.s[i] : "-", i < y.n ? y.s[i] : "-");
    test_failures++;
  }
}

#ifdef RT_TEST_TRAIN_MPI
static void assert_close_losses(const char *a, const char *b, double tol, int line) {
  Losses x = losses(a), y = losses(b);
  test_checks++;
  int bad = x.n != STEPS || y.n != STEPS;
  for (int i = 0; !bad && i < STEPS; i++)
    bad = !(fabs(x.v[i] - y.v[i]) <= tol);
  if (bad) {
    fprintf(stderr, "%s:%d: losses of %s and %s differ by more than %g:\n", __FILE__, line, a, b,
            tol);
    for (int i = 0; i < x.n || i < y.n; i++)
      fprintf(stderr, "  %2d  %-14s %s\n", i + 1, i < x.n ? x.s[i] : "-", i < y.n ? y.s[i] : "-");
    test_failures++;
  }
}
#endif

static int same_file(const char *a, const char *b) {
  FILE *f = fopen(a, "rb"), *g = fopen(b, "rb");
  int same = f && g;
  while (same) {
    int x = fgetc(f), y = fgetc(g);
    same = x == y;
    if (x == EOF)
      break;
  }
  if (f)
    fclose(f);
  if (g)
    fclose(g);
  return same;
}
#define ASSERT_SAME_FILE(a, b) ASSERT_TRUE(same_file(at(a), at(b)))

/* Trains variant to STEPS logging to NAME.jsonl, then again in two runs
 * (cut at step 5 by --save, resumed by --load): the same losses, bit for
 * bit, and the same final checkpoint. */
static void train_and_resume(int np, const char *v) {
  char flags[256], name[64];
  snprintf(flags, sizeof flags, "--log @/%s.jsonl --save @/%s.st", v, v);
  train(np, v, flags, NULL);
  ASSERT_RC(0);
  snprintf(flags, sizeof flags, "--steps 5 --save @/%s_5.st --log @/%s_r.jsonl", v, v);
  train(np, v, flags, NULL);
  ASSERT_RC(0);
  snprintf(flags, sizeof flags, "--load @/%s_5.st --save @/%s_r.st --log @/%s_r.jsonl", v, v, v);
  train(np, v, flags, NULL);
  ASSERT_RC(0);
  snprintf(name, sizeof name, "loaded:   %s/%s_5.st (step 5)", dir, v);
  ASSERT_IN(name, R.out);
  ASSERT_IN("train:    steps 6..12", R.out);
  char a[64], b[64];
  snprintf(a, sizeof a, "%s.jsonl", v);
  snprintf(b, sizeof b, "%s_r.jsonl", v);
  assert_same_losses(a, b, __LINE__);
  snprintf(a, sizeof a, "%s.st", v);
  snprintf(b, sizeof b, "%s_r.st", v);
  ASSERT_SAME_FILE(a, b);
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* The checkpoint of --steps 0 --save: the initial weights, zero
 * optimizer state, step 0. */
static void check_initial(const char *name) {
  RtStFile *f = NULL;
  ASSERT_OK(rt_st_open(&f, at(name)));
  if (!f)
    return;
  ASSERT_STR("0", rt_st_meta(f, "step"));
  ASSERT_STR("adamw", rt_st_meta(f, "optimizer"));
  float w[C * K], want[C * K], bias[C], m[C * K];
  int64_t ws[2] = {C, K}, bs[1] = {C};
  ASSERT_OK(rt_st_read(f, "lin.weight", RT_F32, 2, ws, w));
  ASSERT_OK(rt_st_read(f, "lin.bias", RT_F32, 1, bs, bias));
  ASSERT_OK(rt_st_read(f, "optimizer.exp_avg_sq.lin.weight", RT_F32, 2, ws, m));
  rt_init_normal_f32(want, C * K, 0.1, SEED, fnv1a("lin.weight"), 0);
  ASSERT_TRUE(!memcmp(w, want, sizeof w));
  for (int i = 0; i < C; i++)
    ASSERT_TRUE(bias[i] == 0);
  for (int i = 0; i < C * K; i++)
    ASSERT_TRUE(m[i] == 0);
  rt_st_close(f);
}

static int count_in(const char *needle, const char *hay) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* AdamW at lr 10 (np ranks): the loss soon exceeds ten times its first
 * value; one warning naming that step, and training goes on; with
 * --stop-on-divergence an error that stops the run before it saves. */
static void divergence(int np, const char *v) {
  char flags[256], line[512];
  snprintf(flags, sizeof flags, "--log @/%s.jsonl", v);
  train(np, v, flags, NULL);
  ASSERT_RC(0);
  snprintf(flags, sizeof flags, "%s.jsonl", v);
  Losses l = losses(flags);
  int over = 0;
  while (over < l.n && !(l.v[over] > 10 * l.v[0]))
    over++;
  ASSERT_TRUE(l.n == STEPS && over < l.n);
  snprintf(line, sizeof line, "train: warning: step %d: the loss ", over + 1);
  ASSERT_IN(line, R.err);
  ASSERT_IN(" is over 10 times its first value (", R.err);
  ASSERT_IN(" at step 1): training is diverging; lower the learning rate, or pass "
            "--stop-on-divergence to stop such a run\n", R.err);
  ASSERT(1, count_in("warning", R.err));
  ASSERT_IN("done:     steps 1..12", R.out);
  snprintf(flags, sizeof flags, "--stop-on-divergence --save @/%s.st", v);
  train(np, v, flags, NULL);
  ASSERT_RC(1);
  snprintf(line, sizeof line, "train: error: step %d: the loss ", over + 1);
  ASSERT_IN(line, R.err);
  /* no file at --save: nothing to keep (it said "keeps its last good state") */
  ASSERT_IN(" at step 1): training diverged; stopping without saving (nothing was saved); "
            "lower the learning rate\n", R.err);
  ASSERT_IN(line, R.err);
  ASSERT_NOT_IN("saved:", R.out);
  snprintf(flags, sizeof flags, "%s.st", v);
  ASSERT_TRUE(access(at(flags), F_OK) != 0);
}

/* SGD at lr 1e39 (np ranks): the first step's loss is finite, its update
 * leaves infinite weights, which no save writes: not --steps 1 --save
 * (exit 1, nothing written), nor --save-every over an existing file (kept
 * byte for byte); the message names the tensor, the element and the
 * step. */
static void nonfinite_save(int np, const char *v) {
  char flags[256], name[64], keep[64];
  snprintf(flags, sizeof flags, "--steps 1 --save @/%s.st", v);
  train(np, v, flags, NULL);
  ASSERT_RC(1);
  ASSERT_IN("train: error: after step 1, tensor 'lin.weight' holds ", R.err);
  ASSERT_IN("inf at element 0: not saving ", R.err);
  ASSERT_IN(".st (nothing was saved); training diverged: lower the learning rate or check the "
            "optimizer's settings\n", R.err);
  ASSERT_NOT_IN("saved:", R.out);
  snprintf(name, sizeof name, "%s.st", v);
  ASSERT_TRUE(access(at(name), F_OK) != 0);
  snprintf(flags, sizeof flags, "--steps 0 --save @/%s.st", v);
  train(np, v, flags, NULL);
  ASSERT_RC(0);
  snprintf(keep, sizeof keep, "%s_keep.st", v);
  snprintf(flags, sizeof flags, "cp %s %s", at(name), at(keep));
  ASSERT(0, system(flags));
  snprintf(flags, sizeof flags, "--load @/%s.st --steps 3 --save @/%s.st --save-every 1", v, v);
  train(np, v, flags, NULL);
  ASSERT_RC(1);
  ASSERT_IN(".st (it keeps its last good state); training diverged", R.err);
  ASSERT_NOT_IN("saved:", R.out);
  ASSERT_SAME_FILE(name, keep);
}

#ifndef RT_TEST_TRAIN_MPI
static void one_rank_tests(void) {
  /* trains: the loss falls; the lines every run prints */
  train_and_resume(0, "one");
  char line[512];
  Losses l = losses("one.jsonl");
  ASSERT(STEPS, l.n);
  if (l.n == STEPS)
    ASSERT_TRUE((l.v[9] + l.v[10] + l.v[11]) < 0.8 * (l.v[0] + l.v[1] + l.v[2]));
  train(0, "one", "--steps 3", NULL);
  ASSERT_RC(0);
  ASSERT_IN("plan:     a hand-written test program\ndata:     built-in synthetic task: x ~ N(0,1)^8",
            R.out);
  ASSERT_IN("train:    steps 1..3 on 1 rank, seed 7\n", R.out);
  ASSERT_IN("memory:   planned peak ", R.out);
  ASSERT_NOT_IN("MISMATCH", R.out);
  ASSERT_IN("done:     steps 1..3 in ", R.out);
  ASSERT_NOT_IN("warning", R.err);
  divergence(0, "diverge");
  /* SGD with momentum: its one state slot resumes too */
  train_and_resume(0, "sgd");
  /* --steps 0 --save: the initial weights */
  train(0, "one", "--steps 0 --save @/init.st", NULL);
  ASSERT_RC(0);
  snprintf(line, sizeof line, "saved:    %s/init.st (step 0)\n", dir);
  ASSERT_IN(line, R.out);
  check_initial("init.st");
  /* a checkpoint past --steps */
  train(0, "one", "--load @/one_5.st --steps 3", NULL);
  ASSERT_RC(0);
  ASSERT_IN("nothing to do: the checkpoint is at step 5, --steps is 3", R.out);
  /* --steps 0 without a checkpoint: says so, not "the checkpoint is at step 0" */
  train(0, "one", "--steps 0", NULL);
  ASSERT_RC(0);
  ASSERT_IN("nothing to do: --steps is 0", R.out);
  ASSERT_NOT_IN("checkpoint", R.out);
  /* usage errors exit 2, --help 0 */
  train(0, "one", "--bogus", NULL);
  ASSERT_RC(2);
  ASSERT_IN("train: error: unknown argument '--bogus' (see --help)", R.err);
  train(0, "one", "--steps", NULL);
  ASSERT_RC(2);
  ASSERT_IN("train: error: --steps needs a value", R.err);
  train(0, "one", "--steps -1", NULL);
  ASSERT_RC(2);
  train(0, "one", "--save-every 2", NULL);
  ASSERT_RC(2);
  ASSERT_IN("--save-every needs --save CKPT", R.err);
  train(0, "one", "--data x.txt", NULL);
  ASSERT_RC(2);
  train(0, "one", "--help", NULL);
  ASSERT_RC(0);
  ASSERT_IN("usage: train", R.out);
  ASSERT_IN("Trains model 'tiny' from test_train.c (36 parameters, f32)", R.out);
  ASSERT_IN("  --stop-on-divergence\n", R.out);
  ASSERT_IN("exceeds 10 times\n", R.out);
  /* a bad checkpoint and a save target that cannot be written */
  train(0, "one", "--load @/missing.st", NULL);
  ASSERT_RC(1);
  ASSERT_IN("missing.st", R.err);
  train(0, "one", "--save @/no/such/dir/x.st", NULL);
  ASSERT_RC(1);
  ASSERT_IN("cannot save a checkpoint there", R.err);
  /* a NaN loss stops the run before it is saved */
  train(0, "nan", "--save @/nan.st", NULL);
  ASSERT_RC(1);
  ASSERT_IN("train: error: step 3: the loss is NaN; stopping without saving (nothing was "
            "saved)", R.err);
  ASSERT_TRUE(access(at("nan.st"), F_OK) != 0);
  /* ... and where the file exists, it keeps it */
  train(0, "nan", "--save @/one_5.st", NULL);
  ASSERT_RC(1);
  snprintf(line, sizeof line,
           "train: error: step 3: the loss is NaN; stopping without saving (%s/one_5.st keeps "
           "its last good state)", dir);
  ASSERT_IN(line, R.err);
  nonfinite_save(0, "blowup");
  /* usage errors name the flag of an empty value */
  train(0, "one", "--save=", NULL);
  ASSERT_RC(2);
  ASSERT_IN("train: error: --save needs a non-empty value, got ''\n", R.err);
  train(0, "one", "--log=", NULL);
  ASSERT_RC(2);
  ASSERT_IN("train: error: --log needs a non-empty value, got ''\n", R.err);
  /* a checkpoint with a NaN: refused at load, naming the tensor */
  train(0, "shampoo", "--steps 2 --save @/sh.st", NULL);
  ASSERT_RC(0);
  train(0, "shampoo", "--load @/sh.st --steps 4", NULL);
  ASSERT_RC(0);
  train(0, "shampoo_nan", "--steps 2 --save @/sh.st", NULL);
  ASSERT_RC(1);
  ASSERT_IN("train: error: step 2: shampoo: 'lin.weight', block 1 (row 0, column 1; checkpoint "
            "tensors optimizer.lin.weight.shampoo.*.1), factor L (4x4): the eigendecomposition "
            "failed (LAPACK dsyevd info ", R.err);
  /* another optimizer's checkpoint: which, and what loads */
  train(0, "shampoo", "--load @/one_5.st", NULL);
  ASSERT_RC(1);
  ASSERT_IN("one_5.st: checkpoint does not match the model\n  optimizer: the checkpoint was "
            "written by adamw, this program trains with shampoo (block 4): its parameters alone "
            "load from a copy without the optimizer.* tensors and the \"step\" metadata (the "
            "optimizer then starts from zero)\n", R.err);
  train(0, "one", "--load @/sh.st", NULL);
  ASSERT_RC(1);
  ASSERT_IN("  optimizer: the checkpoint was written by shampoo (block 4), this program trains "
            "with adamw: ", R.err);
  /* the launch: one rank planned, two launched */
  train(0, "one", "", "OMPI_COMM_WORLD_SIZE=2");
  ASSERT_RC(1);
  ASSERT_IN("train: error: this program is planned for 1 rank but was launched on 2", R.err);
  /* gradient check: f64 only */
  train(0, "f64", "--gradcheck 5", NULL);
  ASSERT_RC(0);
  ASSERT_IN("gradcheck: 10 entries in 2 tensors", R.out);
  ASSERT_IN(", 0 mismatched", R.out);
  train(0, "one", "--gradcheck 2", NULL);
  ASSERT_RC(1);
  ASSERT_IN("--gradcheck needs an f64 build", R.err);
  /* a program planned for a mesh needs the MPI driver */
  train(0, "dp2_range", "", NULL);
  ASSERT_RC(1);
  ASSERT_IN("this program is planned for 2 ranks (mesh test: dp=2) but was linked with the "
            "one-rank driver",
            R.err);
}
#endif

#ifdef RT_TEST_TRAIN_MPI
/* Each data-parallel variant against the one-rank reference. */
static void mesh_tests(void) {
  train(1, "ref", "--log @/ref.jsonl", NULL);
  ASSERT_RC(0);
  train(1, "ref", "--steps 0 --save @/ref0.st", NULL);
  ASSERT_RC(0);
  check_initial("ref0.st");
  static const char *const dp[] = {"dp2_range", "dp2_bucket", "zero1", "zero3"};
  for (int i = 0; i < 4; i++) {
    const char *v = dp[i];
    char a[64], b[64];
    train_and_resume(2, v);
    snprintf(a, sizeof a, "%s.jsonl", v);
    assert_close_losses(a, "ref.jsonl", 1e-6, __LINE__);
    train(2, v, "--steps 2", NULL);
    ASSERT_RC(0);
    ASSERT_IN("train:    steps 1..2 on 2 ranks, seed 7\n", R.out);
    ASSERT_IN("memory:   planned peak ", R.out);
    ASSERT_IN("comm:     planned ", R.out);
    ASSERT_NOT_IN("MISMATCH", R.out);
    snprintf(a, sizeof a, "%s0.st", v);
    snprintf(b, sizeof b, "--steps 0 --save @/%s0.st", v);
    train(2, v, b, NULL);
    ASSERT_RC(0);
    ASSERT_SAME_FILE(a, "ref0.st");
  }
  /* tables that say ZeRO-3 but not that the parameters are shards: refused
   * before anything runs, saying which */
  train(2, "zero3_unflagged", "", NULL);
  ASSERT_RC(1);
  ASSERT_IN("train: error: internal: the program's tables are inconsistent: pipeline rank 0: "
            "ZeRO-3 without parameter shards\n", R.err);
  ASSERT_NOT_IN("step 1", R.out);
  /* every rank stops alike (no hang) */
  divergence(2, "diverge2");
  nonfinite_save(2, "blowup2");
  train(1, "dp2_bucket", "", NULL);
  ASSERT_RC(1);
  ASSERT_IN("train: error: this program is planned for 2 ranks (mesh test: dp=2) but runs on 1; "
            "run it as: mpirun -np 2 ",
            R.err);
  /* the pipeline against the two-layer model on one rank */
  train(1, "mlp_ref", "--log @/mlp_ref.jsonl", NULL);
  ASSERT_RC(0);
  train(1, "mlp_ref", "--steps 0 --save @/mlp0.st", NULL);
  ASSERT_RC(0);
  train_and_resume(2, "pp2");
  assert_close_losses("pp2.jsonl", "mlp_ref.jsonl", 1e-6, __LINE__);
  train(2, "pp2", "--steps 1", NULL);
  ASSERT_RC(0);
  ASSERT_IN("memory:   planned peak per rank by stage ", R.out);
  ASSERT_IN("comm:     planned 384 / 384 bytes sent per rank per step by stage, counted 384 / 384\n",
            R.out);
  ASSERT_NOT_IN("MISMATCH", R.out);
  train(2, "pp2", "--steps 0 --save @/pp0.st", NULL);
  ASSERT_RC(0);
  ASSERT_SAME_FILE("pp0.st", "mlp0.st");
  train(1, "pp2", "", NULL);
  ASSERT_RC(1);
  ASSERT_IN("planned for 2 ranks (mesh test: pp=2,schedule=1f1b) but runs on 1", R.err);
}
#endif

int main(int argc, char **argv) {
  const char *v = getenv("SHARDRT_TEST_TRAIN");
  if (argc > 1 && !strncmp(argv[1], "--child=", 8)) {
    v = argv[1] + 8;
    setenv("SHARDRT_TEST_TRAIN", v, 1); /* a re-exec (rt_blas_setup) stays the child */
    argv[1] = argv[0];
    return child_main(v, argc - 1, argv + 1);
  }
  if (v && *v)
    return child_main(v, argc, argv);
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    printf("SKIP: /proc/self/exe unreadable\n");
    return 77;
  }
  self[n] = 0;
  dir = test_tmpdir();
#ifdef RT_TEST_TRAIN_MPI
  if (argc < 3) {
    fprintf(stderr, "usage: %s MPIRUN [FLAGS...] NP-FLAG\n", argv[0]);
    return 2;
  }
  launch = argv + 1;
  nlaunch = argc - 1;
  mesh_tests();
#else
  (void)launch;
  (void)nlaunch;
  one_rank_tests();
#endif
  if (!test_failures)
    test_tmpdir_remove(dir);
  else
    fprintf(stderr, "scratch files kept in %s\n", dir);
  TEST_MAIN_END();
}
