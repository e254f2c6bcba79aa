/* train.c — the training driver of generated programs (rt_train.h).
 *
 * One source, several libraries: compiled as is into libshardrt_train, it
 * runs one rank (a program planned for several is refused); compiled with
 * RT_TRAIN_MPI into libshardrt_train_mpi, it starts MPI, builds the mesh
 * and runs any rank of any plan.  With RT_TRAIN_CUDA (libshardrt_train_cuda
 * and _cuda_mpi) it drives the cuda target's programs: the arena is device
 * memory (t->dev) and t->arena its host mirror, where parameters are
 * initialized, checkpoints read and written, batches loaded and staged
 * instructions run; the step's reductions, norm and update run on the
 * device (runtime/cuda), the schedule and every decision stay here.  Everything a program does around its
 * forward and backward is here, in the order generated programs did it
 * before the driver existed, so that their losses, checkpoints and every
 * printed line stay what they were:
 *
 *   flags, launch checks, mesh, threads, arena, parameters (init, --load),
 *   data, [--gradcheck], metrics, plan and data lines, then per step:
 *   microbatches (forward/backward, pipeline messages), the step table
 *   (reductions, loss, norm, finite check, optimizer, all-gathers), the
 *   first step's memory and communication checks, metrics, progress,
 *   --save-every; at the end --save and the summary.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_optim.h"
#include "train_internal.h"
#ifdef RT_TRAIN_MPI
#include "dist.h"
#endif
#ifdef RT_TRAIN_CUDA
#include <pthread.h>
#include <time.h>

#include "cuda/rtc.h"
#include "cuda/rtc_optim.h"
#include "cuda/rtc_train.h"
#endif
#if defined(RT_TRAIN_MPI) && !defined(RT_TRAIN_CUDA)
/* a pipeline rank's Shampoo roots in a thread of their own (RootWorker) */
#define RT_ROOT_WORKER 1
#include <pthread.h>
#include <sched.h>
#include <time.h>
#if defined(__linux__) && !defined(SCHED_IDLE)
#define SCHED_IDLE 5 /* <sched.h> names it under _GNU_SOURCE only */
#endif
typedef struct RootWorker RootWorker;
#endif
#ifdef RT_TRAIN_CUDA
/* root = eigh on a GPU rank: the step's due roots on host threads */
typedef struct CuRoots CuRoots;
#endif

struct RtTrainer {
  const RtProgram *pg;   /* this rank's program */
  RtTrainArgs args;
  int rank, world;
  double peak;           /* MFU's denominator: this rank's peak FLOP/s (rank_peak) */
  int es;                /* element size: 4 (float) or 8 (double) */
  RtArena *mem;
  unsigned char *arena;  /* the arena; cuda: its host mirror */
  unsigned char *dev;    /* where the program runs: the arena, or (cuda) device memory */
  RtTrainData data;
  RtMetrics log;
  struct RtMesh *mesh;   /* NULL on one rank */
  int have_first;        /* first_loss is this run's first step's loss */
  double first_loss;
  long first_step;
  int warned;            /* the divergence warning was printed */
#ifdef RT_TRAIN_MPI
  RtMesh mesh_store;
  int mpi_started;       /* MPI_Init was ours: MPI_Finalize is too */
  MPI_Request *reqs;     /* nreq overlapped bucket reductions */
  MPI_Request *sent;     /* pipelines: [chunk][slot][activation, gradient] sends in flight */
  int maxslots;
  int chunk, slot;       /* the pipeline action being run */
  /* the receives' all-gathers over tp, run at the block's rt_pipe_post */
  struct { void *buf; size_t off, len; } gather[RT_PIPE_MAXMSG];
  int ngather;
#ifdef RT_TRAIN_CUDA
  int pipe_nccl;         /* messages as NCCL groups (not staged) */
  int in_posted;         /* this backward's receives went with the forward's post (pairs) */
  RtBackwardFn ahead_fn; /* pairs: the next backward's receives, queued at this forward's post */
  RtPass ahead_pass;     /* ... run for that backward's microbatch */
  RtcPipeMsg queued[3 * RT_PIPE_MAXMSG];  /* sends and receives not posted yet */
  int nqueued;
#endif
#endif
  /* Shampoo: this step recomputes roots (from the factors of the steps
   * before): every block's (roots_phase -1) or those of phase roots_phase;
   * where the walk over this rank's blocks stands (roots_one resumes
   * there: each due block is visited once a step, however many there are) */
  int roots_due, roots_phase;
  long roots_step;         /* the step (0-based) whose roots these are */
  int rc_i;                /* the parameter */
  int64_t rc_bi, rc_bj;    /* its next block */
  int64_t rc_base;         /* the parameter's first entry of root_phase */
  /* placed Shampoo (pg->nunits): the owner of each local block, at
   * unit_off[param] + bi·(its block columns) + bj; -1 none (built once) */
  int *unit_owner;
  int64_t *unit_off;
#ifdef RT_ROOT_WORKER
  RootWorker *rw;          /* the root worker (NULL: the roots on this thread) */
  int mpi_funneled;        /* MPI allows threads that make no MPI calls */
  long roots_worker;       /* blocks whose roots the worker wrote (under its lock) */
#endif
#ifdef RT_TRAIN_CUDA
  CuRoots *cr;             /* root = eigh's host threads (NULL: not started) */
#endif
#ifdef RT_TRAIN_MPI
  long roots_main;         /* ... and those the main thread computed */
#endif
#ifdef RT_TRAIN_CUDA
  /* every parameter with a gradient, for one-launch updates and norms */
  int nlist;
  float **lp, **lm, **lv;
  const float **lg;
  size_t *ln;
  double *lwd;
  /* CUDA graphs: the step after the first is captured as graph A (the
   * microbatches and the step's device work before the optimizer: bucket
   * waits, all-reduces, the norm's sums of squares) and graph B (the
   * optimizer and the all-gathers), replayed on the later steps; between
   * them the host reads the losses and the norm, checks them and forms the
   * optimizer's scalars.  off_why: why they are off (NULL: on). */
  const char *off_why;
  /* GEMM algorithms (gemm_setup, gemm_agree): the file's choices (the same
   * on every rank: rank 0 reads, broadcasts), the file; NULL: no timing */
  RtGemmTable gemm_known;
  char *gemm_path;
  const char *gpu;
  RtcGraph *ga, *gb;
  double *loss_dev, *loss_pin;   /* [mb] each microbatch's loss (device, pinned) */
  double *ss_dev, *ss_pin;       /* [nparams + 1] the norm's sums of squares */
  double *ss_w;                  /* their weights */
  int nss, ss_one;               /* terms; 1: one term, the sum itself */
  unsigned char *slots;          /* pinned: each microbatch's two inputs, slot0 + slot1 bytes */
  size_t slot0, slot1;
  uint64_t cnt_a[2][RT_AX_COUNT], cnt_b[2][RT_AX_COUNT]; /* bytes, calls counted while captured */
#endif
};

typedef struct RtTrainer Trainer;

/* A block whose roots are due (roots_next): the parameter, its local
 * block, the block in the full tensor's grid and that grid's columns. */
typedef struct RootJob {
  int i;
  int64_t bi, bj, gi, gj, gnbc;
} RootJob;

static int roots_one(Trainer *t);
static int roots_next(Trainer *t, RootJob *j);
static void roots_run(Trainer *t, const RootJob *j);
#ifdef RT_TRAIN_CUDA
static CuRoots *cu_roots_get(Trainer *t);
static int cu_roots_start(Trainer *t);
static void cu_roots_stop(Trainer *t);
#endif
#ifdef RT_ROOT_WORKER
struct RootWorker {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open;            /* the worker may claim blocks of generation gen */
  int quit;
  long gen;            /* the steps with roots due so far (roots_begin) */
  long taken;          /* the generation the main thread took over last */
  int busy;            /* the worker computes `job`, of generation job_gen */
  long job_gen;
  RootJob job;
  int failed;          /* `bad` failed: the main thread redoes it (and stops, saying why) */
  RootJob bad;
  unsigned char *scratch;
  /* tests (SHARDC_TEST_ROOTS): 1 "wait", the optimizer waits for the
   * worker to finish the step's roots; 2 "starve[:MS]", the worker sleeps
   * MS ms (default 30) on every block it claims, so the main thread takes
   * its blocks over (and with a long sleep, the run ends while it sleeps) */
  int test;
  long nap_ms;
};
static RootWorker *root_worker_lock(Trainer *t, long step);
static int root_worker_stop(Trainer *t);
static int root_worker_has_work(Trainer *t);
#endif

/* ---------------------------------------------------------------------------
 * The world: MPI or one rank
 */

#ifdef RT_TRAIN_MPI
static void mpi_check(int err, const char *call, int line) {
  if (err == MPI_SUCCESS)
    return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, msg, &len);
  fprintf(stderr, "train: MPI error at %s:%d: %s: %s\n", __FILE__, line, call, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
}
#define MPI_OK(call) mpi_check((call), #call, __LINE__)
#endif

/* Frees what the run holds and ends MPI; returns status (the exit code). */
static int finish(Trainer *t, int status) {
#ifdef RT_ROOT_WORKER
  /* a worker still in a block the main thread took over is not waited for
   * (at idle priority it could take long): the arena, which holds its
   * scratch, stays, and the process ends with _exit below, before any
   * library's destructor could pull memory from under the thread */
  const int busy = root_worker_stop(t);
#else
  const int busy = 0;
#endif
#ifdef RT_TRAIN_CUDA
  cu_roots_stop(t); /* (each thread ends its root in progress: bounded) */
#endif
  rt_metrics_close(&t->log);
  rt_train_data_close(&t->data);
  free(t->unit_owner);
  free(t->unit_off);
  t->unit_owner = NULL;
  t->unit_off = NULL;
  if (t->mem && !busy)
    rt_arena_destroy(t->mem);
  t->mem = NULL;
  t->arena = NULL;
#ifdef RT_TRAIN_CUDA
  rtc_gemm_tune(0, NULL, 0);
  rt_gemm_table_free(&t->gemm_known);
  free(t->gemm_path);
  t->gemm_path = NULL;
  rtc_graph_free(t->ga);
  rtc_graph_free(t->gb);
  t->ga = t->gb = NULL;
  rtc_dev_free(t->loss_dev);
  rtc_dev_free(t->ss_dev);
  rtc_pinned_free(t->loss_pin);
  rtc_pinned_free(t->ss_pin);
  rtc_pinned_free(t->slots);
  free(t->ss_w);
  free(t->lp);
  free(t->lm);
  free(t->lv);
  free(t->lg);
  free(t->ln);
  free(t->lwd);
  if (t->dev)
    rtc_arena_free(t->dev);
#ifdef RT_TRAIN_MPI
  if (t->mesh)
    rtc_mesh_free();
#endif
#endif
  t->dev = NULL;
#ifdef RT_TRAIN_MPI
  free(t->reqs);
  free(t->sent);
  t->reqs = t->sent = NULL;
  if (t->mesh)
    rt_mesh_free(t->mesh);
  t->mesh = NULL;
  if (t->mpi_started)
    MPI_Finalize();
  t->mpi_started = 0;
#endif
  if (busy) {
    fflush(NULL);
    _exit(status);
  }
  return status;
}

/* A collective decision: every rank learns whether all ranks are fine.  A
 * failing rank prints its error (only rank 0's when rank 0 failed too). */
static int all_ok(Trainer *t, int ok) {
  int v[2] = {ok, t->rank == 0 ? ok : 1};
#ifdef RT_TRAIN_MPI
  MPI_OK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
#endif
  if (!ok && (t->rank == 0 || v[1])) {
    if (t->rank)
      fprintf(stderr, "train: error: rank %d: %s\n", t->rank, rt_last_error());
    else
      fprintf(stderr, "train: error: %s\n", rt_last_error());
  }
  return v[0];
}

#ifndef RT_TRAIN_CUDA
/* A number from the first line of a file (a cgroup's memory.max holds "max"
 * or bytes); -1 when unreadable or not a number. */
static double read_number(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  char buf[64] = "", *end;
  double v = fgets(buf, sizeof buf, f) ? strtod(buf, &end) : -1;
  fclose(f);
  return v >= 0 && end != buf && (*end == '\n' || !*end) ? v : -1;
}

/* bytes as "N bytes", "x.xx MiB" or "x.xx GiB" */
static const char *mem_text(char *buf, size_t cap, double bytes) {
  if (bytes >= 1073741824.0)
    snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
  else if (bytes >= 1048576.0)
    snprintf(buf, cap, "%.2f MiB", bytes / 1048576.0);
  else
    snprintf(buf, cap, "%.0f bytes", bytes);
  return buf;
}

/* What a cgroup's memory limit leaves, in bytes: ROOT/SUB/MAX (no limit:
 * "max", or v1's near 2^63) less ROOT/SUB/CUR, of which the page cache the
 * kernel drops under pressure (INACTIVE in memory.stat) is not in use (as
 * docker stats counts it); -1 when there is no limit or no such files. */
static double cgroup_left(const char *root, const char *sub, const char *max_f,
                          const char *cur_f, const char *inactive) {
  char path[1024];
  snprintf(path, sizeof path, "%s%s/%s", root, sub, max_f);
  double max = read_number(path);
  snprintf(path, sizeof path, "%s%s/%s", root, sub, cur_f);
  double cur = read_number(path);
  if (max <= 0 || max >= 1e18 || cur < 0)
    return -1;
  snprintf(path, sizeof path, "%s%s/memory.stat", root, sub);
  FILE *f = fopen(path, "r");
  if (f) {
    char line[256], key[64];
    unsigned long long b;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "%63s %llu", key, &b) == 2 && !strcmp(key, inactive)) {
        cur = (double)b < cur ? cur - (double)b : 0;
        break;
      }
    fclose(f);
  }
  return max > cur ? max - cur : 0;
}

/* Bytes this node can still give a program (Linux): MemAvailable of
 * /proc/meminfo, at most what this process's cgroup limit leaves (a
 * container's, cgroup v2 or v1: cgroup_left); SHARDC_NODE_MEMORY (bytes)
 * stands in for both (tests); 0 when unknown.  *src names the source. */
static double node_available(const char **src) {
  const char *e = getenv("SHARDC_NODE_MEMORY");
  if (e && *e) {
    char *end;
    double v = strtod(e, &end);
    *src = "SHARDC_NODE_MEMORY";
    if (!*end && v > 0)
      return v;
  }
  double avail = 0;
  *src = "MemAvailable in /proc/meminfo";
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        avail = kb * 1024.0;
        break;
      }
    fclose(f);
  }
  /* a container's limit: cgroup v2 ("0::/path" in /proc/self/cgroup, the
   * files under /sys/fs/cgroup/path), else v1's memory controller
   * ("N:memory:/path", under /sys/fs/cgroup/memory/path); the path as the
   * process sees it, else the mount's root (a container's own) */
  char v2[512] = "", v1[512] = "";
  f = fopen("/proc/self/cgroup", "r");
  if (f) {
    char line[512], *c;
    while (fgets(line, sizeof line, f)) {
      line[strcspn(line, "\n")] = 0;
      if (!strncmp(line, "0::", 3))
        snprintf(v2, sizeof v2, "%s", line + 3);
      else if ((c = strstr(line, ":memory:")))
        snprintf(v1, sizeof v1, "%s", c + 8);
    }
    fclose(f);
  }
  static const struct { const char *dir, *max, *cur, *inactive; } cgv[2] = {
      {"", "memory.max", "memory.current", "inactive_file"},
      {"/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"}};
  const char *mnt = getenv("SHARDC_CGROUP_ROOT"); /* (tests: a tree of their own) */
  for (int v = 0; v < 2; v++)
    for (int at_root = 0; at_root < 2; at_root++) {
      const char *sub = at_root ? "" : v ? v1 : v2;
      char root[300];
      snprintf(root, sizeof root, "%s%s", mnt && *mnt ? mnt : "/sys/fs/cgroup", cgv[v].dir);
      double left = cgroup_left(root, strcmp(sub, "/") ? sub : "", cgv[v].max, cgv[v].cur,
                                cgv[v].inactive);
      if (left < 0)
        continue;
      if (avail <= 0 || left < avail) {
        avail = left > 0 ? left : 1;
        *src = "the cgroup's memory limit less its usage";
      }
      break; /* found: the root's figure is not this process's */
    }
  return avail;
}

/* The arenas of this node's ranks against the memory the node has left:
 * an arena is zeroed as it is created, so a plan larger than the node's
 * memory would be killed by the kernel's OOM killer, with no word of why,
 * before its first step.  Every rank of a node decides alike (their sum
 * against the least any of them read); SHARDC_NO_MEMCHECK=1 skips it. */
static int node_memory_ok(Trainer *t, size_t bytes) {
  const char *off = getenv("SHARDC_NO_MEMCHECK");
  if (off && *off && strcmp(off, "0"))
    return 1;
  const char *src;
  double avail = node_available(&src), need = (double)bytes;
  int nranks = 1;
#ifdef RT_TRAIN_MPI
  MPI_Comm node;
  MPI_OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &node));
  double v[2] = {need, 1}, least;
  MPI_OK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, node));
  MPI_OK(MPI_Allreduce(&avail, &least, 1, MPI_DOUBLE, MPI_MIN, node));
  MPI_OK(MPI_Comm_free(&node));
  need = v[0], nranks = (int)v[1], avail = least;
#else
  (void)t;
#endif
  if (avail <= 0 || need <= avail)
    return 1;
  char n[32], a[32], r[32], ranks[96];
  if (nranks > 1)
    snprintf(ranks, sizeof ranks, "%d ranks' arenas, this one's %s", nranks,
             mem_text(r, sizeof r, (double)bytes));
  else
    snprintf(ranks, sizeof ranks, "one rank's arena");
  rt_errorf(RT_ERR_NOMEM, "the plan needs %s of memory on this node (%s) and the node has %s "
            "available (%s); plan with less memory a rank (a smaller microbatch, recompute, "
            "ZeRO, more ranks or pipeline stages: shardc explore shows each plan's memory) or "
            "run fewer ranks a node (SHARDC_NO_MEMCHECK=1 skips this check)",
            mem_text(n, sizeof n, need), ranks, mem_text(a, sizeof a, avail), src);
  return 0;
}
#endif

/* This rank's index on a mesh axis (0 on one rank). */
static int coord(const Trainer *t, RtAxis ax) {
#ifdef RT_TRAIN_MPI
  if (t->mesh)
    return t->mesh->coord[ax];
#endif
  (void)t;
  (void)ax;
  return 0;
}

/* Σ x over a mesh axis (x on one rank). */
static double sum_over(Trainer *t, int ax, double x) {
#ifdef RT_TRAIN_MPI
  if (t->mesh)
    return rt_mesh_sum_double(t->mesh, (RtAxis)ax, x);
#endif
  (void)t;
  (void)ax;
  return x;
}

/* A failure no rank can report cleanly: stops the job. */
static void fail(Trainer *t, const char *msg) __attribute__((noreturn));
static void fail(Trainer *t, const char *msg) {
#ifdef RT_TRAIN_CUDA
  cu_roots_stop(t); /* no host thread in LAPACK while the process ends */
#endif
#ifdef RT_TRAIN_MPI
  if (t->mesh)
    rt_mesh_fail(t->mesh, "%s", msg);
#endif
  (void)t;
  fprintf(stderr, "train: error: %s\n", msg);
  exit(1);
}

/* ---------------------------------------------------------------------------
 * Tables
 */

/* Optimizer state tensors per parameter: AdamW m and v, SGD momentum. */
static int opt_states(const RtProgram *pg) {
  return pg->opt == RT_OPT_ADAMW ? 2 : pg->momentum > 0 ? 1 : 0;
}

/* What the tables must hold for the driver to run them at all; a
 * generated program always passes. NULL when fine. */
static const char *check_tables(const RtProgram *const *progs, int nprogs) {
  static char msg[256];
  if (nprogs < 1 || !progs || !progs[0])
    return "no program";
  for (int r = 0; r < nprogs; r++) {
    const RtProgram *pg = progs[r];
    if (!pg)
      return "a pipeline rank without a program";
#define BAD(...) (snprintf(msg, sizeof msg, __VA_ARGS__), msg)
    if (pg->rank != r || (nprogs > 1 && pg->pp != nprogs))
      return BAD("program %d of %d says pipeline rank %d of %d", r, nprogs, pg->rank, pg->pp);
    if (pg->ranks < 1 || pg->pp < 1 || pg->ranks % pg->pp || pg->mb < 1 || pg->microbatch < 1)
      return BAD("pipeline rank %d: %d ranks, pp %d, %d microbatches of %d rows", r, pg->ranks,
                 pg->pp, pg->mb, pg->microbatch);
    if (pg->nchunks < 1 || (!pg->order && pg->nchunks != 1) || (pg->order && pg->norder < 1))
      return BAD("pipeline rank %d: %d chunks, %d scheduled actions", r, pg->nchunks,
                 pg->norder);
    for (int c = 0; c < pg->nchunks; c++)
      if (!pg->chunks[c].forward || !pg->chunks[c].backward || (pg->order && pg->chunks[c].slots < 1))
        return BAD("pipeline rank %d: chunk %d lacks its forward, backward or stash slots", r, c);
    for (int a = 0; a < pg->norder; a++)
      if (pg->order[a].chunk < 0 || pg->order[a].chunk >= pg->nchunks || pg->order[a].mb < 0 ||
          pg->order[a].mb >= pg->mb)
        return BAD("pipeline rank %d: action %d runs microbatch %d of chunk %d", r, a,
                   pg->order[a].mb, pg->order[a].chunk);
    if (pg->ranks > 1 && pg->nglobal > 0 && !pg->shards)
      return BAD("pipeline rank %d: full tensors without their shards", r);
    if (pg->zero >= 1 && (pg->ranks < 2 || !pg->buckets || !pg->bucket_of))
      return BAD("pipeline rank %d: ZeRO-%d without a mesh or buckets", r, pg->zero);
    if ((pg->pshard && pg->zero < 1) || (pg->zero == 3 && !pg->pshard))
      return BAD("pipeline rank %d: ZeRO-%d with%s parameter shards", r, pg->zero,
                 pg->pshard ? "" : "out");
    for (int s = 0; s < pg->nstep; s++)
      if (pg->step[s].kind == RT_STEP_ALLGATHER &&
          (pg->step[s].count < 0 || pg->step[s].count >= pg->nbuckets))
        return BAD("pipeline rank %d: all-gather of bucket %lld of %d", r,
                   (long long)pg->step[s].count, pg->nbuckets);
#undef BAD
  }
  return NULL;
}

/* ---------------------------------------------------------------------------
 * Parameters and checkpoints.  One rank: on params directly.  A mesh:
 * through the full tensors (global), of which each rank extracts its
 * pieces and rank 0 gathers and writes them, so a checkpoint is the same
 * file under any plan.  ZeRO: full tensors <-> the flat bucket layout
 * (params[].offset) <-> this rank's chunks.
 */

static void print_saved(const Trainer *t, long steps_done) {
  printf("saved:    %s (step %ld)\n", t->args.save, steps_done);
}

#ifdef RT_TRAIN_MPI

/* Index in params of global tensor i (-1: another pipeline rank's). */
static int local_of(const RtProgram *pg, int i) { return pg->local_of ? pg->local_of[i] : i; }

static void mesh_init_params(Trainer *t, uint64_t seed) {
  const RtProgram *pg = t->pg;
  unsigned char *full = calloc(1, pg->global_bytes);
  if (!full)
    rt_mesh_fail(t->mesh, "out of memory for the full parameters (%lld bytes)",
                 (long long)pg->global_bytes);
  rt_params_init(pg, pg->global, pg->nglobal, full, seed);
  for (int i = 0; i < pg->nglobal; i++)
    if (local_of(pg, i) >= 0)
      rt_shard_extract(&pg->shards[i], t->mesh, full + pg->global[i].offset,
                       t->arena + pg->params[local_of(pg, i)].offset, t->es);
  free(full);
}

/* The shard of slot k of global tensor i: the tensor's own, or for Shampoo
 * and Adafactor state (slot 1) of an unsplit tensor the state as one
 * unsplit row of its elements (Shampoo's of a split one: split_state). */
static const RtShard *slot_shard(const RtProgram *pg, int i, int k, RtShard *tmp) {
  if (k == 0 || pg->opt < RT_OPT_SHAMPOO)
    return &pg->shards[i];
  const RtParam *p = &pg->global[i];
  *tmp = pg->shards[i];
  tmp->ndim = 1;
  tmp->nsplit = 0;
  tmp->shape[0] = pg->opt == RT_OPT_SHAMPOO
                      ? rt_shampoo_state_elems(p->ndim, p->shape, pg->block, pg->beta1 > 0, pg->graft)
                      : rt_adafactor_state_elems(p->ndim, p->shape, pg->beta1 > 0);
  return tmp;
}

/* Shampoo state of global tensor i when tp splits it: this rank's state
 * (laid out on its shard's shape, rt_optim.h) holds the momentum and
 * grafting elements of its piece and the factors and roots of the blocks
 * in its piece, whole (passes/optplace.c refuses a block that would
 * straddle two pieces).  The state of the piece at tp coordinates coord is
 * copied between the full layout at full and the local one at local. */
typedef struct StateCopy {
  const RtProgram *pg;
  const RtMesh *m;
  int i, es;
  unsigned char *full;
} StateCopy;

/* Global index of local block li along dim d (local size ln) of the shard s
 * held at coordinates coord; B the block. */
static int64_t global_block(const RtShard *s, const int *coord, int d, int64_t ln, int64_t B,
                            int64_t li) {
  for (int k = 0; k < s->nsplit; k++) {
    if (s->split[k].dim != d)
      continue;
    const int64_t P = s->shape[d] / ln, x = li * B; /* the block's first local row */
    int64_t g = 0, l = 0;
    for (int j = 0; j < s->split[k].nseg; j++) {
      int64_t piece = s->split[k].seg[j] / P;
      if (x < l + piece)
        return (g + coord[k] * piece + (x - l)) / B;
      g += s->split[k].seg[j];
      l += piece;
    }
  }
  return li;
}

static void shampoo_state_copy(const StateCopy *c, const int *coord, unsigned char *local,
                               int to_full) {
  const RtProgram *pg = c->pg;
  const RtShard *s = &pg->shards[c->i];
  const RtParam *gp = &pg->global[c->i];
  const int es = c->es, mom = pg->beta1 > 0;
  int64_t ls[6];
  rt_shard_local_shape(s, c->m, ls);
  int64_t gn = 1, ln = 1;
  for (int d = 0; d < gp->ndim; d++)
    gn *= gp->shape[d], ln *= ls[d];
  unsigned char *full = c->full + gp->opt;
  const int heads = (mom ? 1 : 0) + (pg->graft != RT_GRAFT_SGD ? 1 : 0);
  for (int h = 0; h < heads; h++)
    rt_shard_copy(s, c->m, coord, full + (size_t)(h * gn * es), local + (size_t)(h * ln * es), es,
                  to_full);
  if (!rt_shampoo_preconditioned(gp->ndim, gp->shape))
    return;
  if (!rt_shampoo_preconditioned(gp->ndim, ls))
    rt_mesh_fail((RtMesh *)c->m, "%s: a shard of %lldx%lld is not preconditioned", gp->name,
                 (long long)ls[0], (long long)ls[1]);
  const int64_t B = pg->block, R = gp->shape[0], C = gp->shape[1];
  unsigned char *gb = full + (size_t)(rt_shampoo_head(gn, mom, pg->graft) * es);
  unsigned char *lb = local + (size_t)(rt_shampoo_head(ln, mom, pg->graft) * es);
  for (int64_t li = 0; li < rt_shampoo_nblocks(ls[0], B); li++)
    for (int64_t lj = 0; lj < rt_shampoo_nblocks(ls[1], B); lj++) {
      int64_t gi = global_block(s, coord, 0, ls[0], B, li);
      int64_t gj = global_block(s, coord, 1, ls[1], B, lj);
      int64_t r = rt_shampoo_bsize(ls[0], B, li), cc = rt_shampoo_bsize(ls[1], B, lj);
      if (r != rt_shampoo_bsize(R, B, gi) || cc != rt_shampoo_bsize(C, B, gj))
        rt_mesh_fail((RtMesh *)c->m, "%s: block (%lld, %lld) straddles its shards", gp->name,
                     (long long)li, (long long)lj);
      size_t bytes = (size_t)(2 * (r * r + cc * cc) * es);
      unsigned char *g = gb + (size_t)(rt_shampoo_block_off(R, C, B, gi, gj) * es);
      unsigned char *l = lb + (size_t)(rt_shampoo_block_off(ls[0], ls[1], B, li, lj) * es);
      memcpy(to_full ? g : l, to_full ? l : g, bytes);
    }
}

static void shampoo_state_place(void *ctx, const int *coord, const void *piece) {
  shampoo_state_copy(ctx, coord, (unsigned char *)piece, 1);
}

/* Whether slot k of global tensor i is Shampoo or Adafactor state split
 * over tp. */
static int split_state(const RtProgram *pg, int i, int k) {
  return k == 1 && pg->opt >= RT_OPT_SHAMPOO && pg->shards[i].nsplit > 0;
}

/* Adafactor state of global tensor i when tp splits it: its parts as
 * tensors of their own, each split like the dim it follows: part 0 the
 * momentum (like the tensor; none when beta1 = 0), 1 the row accumulator
 * (like dim 0) and 2 the column one (like dim 1) of a 2-D tensor, or 1 the
 * full moment (like the tensor).  Their element offsets in the full and the
 * local state; 0 when the tensor has no such part. */
static int af_part(const RtProgram *pg, const RtMesh *m, int i, int part, RtShard *out,
                   int64_t *goff, int64_t *loff) {
  const RtShard *s = &pg->shards[i];
  const RtParam *gp = &pg->global[i];
  int64_t ls[6], gn = 1, ln = 1;
  rt_shard_local_shape(s, m, ls);
  for (int d = 0; d < gp->ndim; d++)
    gn *= gp->shape[d], ln *= ls[d];
  const int mom = pg->beta1 > 0;
  if (part == 0 && !mom)
    return 0;
  *goff = part == 0 ? 0 : mom ? gn : 0;
  *loff = part == 0 ? 0 : mom ? ln : 0;
  *out = *s;
  if (part == 0 || gp->ndim != 2)
    return part <= 1;
  int d = part - 1; /* 1: rows (dim 0), 2: columns (dim 1) */
  if (d == 1)
    *goff += gp->shape[0], *loff += ls[0];
  out->ndim = 1;
  out->shape[0] = gp->shape[d];
  out->nsplit = 0;
  for (int k = 0; k < s->nsplit; k++)
    if (s->split[k].dim == d) {
      out->split[0] = s->split[k];
      out->split[0].dim = 0;
      out->nsplit = 1;
    }
  return 1;
}

/* This rank's tp coordinates on the splits of s. */
static void split_coords(const RtShard *s, const RtMesh *m, int *coord) {
  coord[0] = coord[1] = 0;
  for (int k = 0; k < s->nsplit; k++)
    coord[k] = m->coord[s->split[k].axis];
}

static int mesh_load(Trainer *t, const char *path, long *step, int *weights_only) {
  const RtProgram *pg = t->pg;
  unsigned char *full = calloc(1, pg->global_bytes);
  if (!full)
    return rt_errorf(RT_ERR_NOMEM, "out of memory for the full parameters");
  int rc = rt_ckpt_load(pg, pg->global, pg->nglobal, full, path, step, weights_only);
  for (int i = 0; rc == RT_OK && i < pg->nglobal; i++) {
    int l = local_of(pg, i);
    for (int k = 0; l >= 0 && k < RT_SLOTS; k++) {
      RtShard tmp;
      if (split_state(pg, i, k) && pg->opt == RT_OPT_ADAFACTOR &&
          rt_param_slot(&pg->params[l], k) >= 0) {
        unsigned char *lo = t->arena + rt_param_slot(&pg->params[l], k);
        for (int part = 0; part < 3; part++) {
          int64_t go, lof;
          if (af_part(pg, t->mesh, i, part, &tmp, &go, &lof))
            rt_shard_extract(&tmp, t->mesh, full + pg->global[i].opt + go * t->es,
                             lo + lof * t->es, t->es);
        }
      } else if (split_state(pg, i, k) && rt_param_slot(&pg->params[l], k) >= 0) {
        StateCopy c = {pg, t->mesh, i, t->es, full};
        int coord[2];
        split_coords(&pg->shards[i], t->mesh, coord);
        shampoo_state_copy(&c, coord, t->arena + rt_param_slot(&pg->params[l], k), 0);
      } else if (rt_param_slot(&pg->params[l], k) >= 0 && rt_param_slot(&pg->global[i], k) >= 0)
        rt_shard_extract(slot_shard(pg, i, k, &tmp), t->mesh, full + rt_param_slot(&pg->global[i], k),
                         t->arena + rt_param_slot(&pg->params[l], k), t->es);
    }
  }
  free(full);
  return rc;
}

/* Shampoo placed over the data ranks: each unit's state is current on its
 * owner only; before a save, every owner broadcasts its units' state (the
 * grafting and momentum rows of the block, its factors and roots) over the
 * data axis, so that the ranks the checkpoint gathers from hold all of it
 * (not counted: checkpoint traffic). */
static void placed_sync(Trainer *t) {
  const RtProgram *pg = t->pg;
  MPI_Comm comm = t->mesh->comm[RT_AX_DATA];
  const int mom = pg->beta1 > 0, graft = pg->graft != RT_GRAFT_SGD;
  for (int k = 0; k < pg->nunits; k++) {
    const RtOptUnit *u = &pg->units[k];
    const RtParam *p = &pg->params[u->param];
    float *st = (float *)(t->arena + p->opt);
    const int64_t n = (int64_t)p->numel;
    int64_t r, c, C;
    const int64_t o0 = rt_shampoo_unit_span(p->ndim, p->shape, pg->block, u->bi, u->bj, &r, &c, &C);
    for (int part = 0; part < mom + graft; part++)
      for (int64_t i = 0; i < r; i++)
        MPI_OK(MPI_Bcast(st + part * n + o0 + i * C, (int)c, MPI_FLOAT, u->owner, comm));
    if (rt_shampoo_preconditioned(p->ndim, p->shape))
      MPI_OK(MPI_Bcast(st + rt_shampoo_factors_off(p->shape[0], C, pg->block, u->bi, u->bj, mom,
                                                   pg->graft),
                       (int)(2 * (r * r + c * c)), MPI_FLOAT, u->owner, comm));
  }
}

/* Every slot of every full tensor gathered on rank 0 from the ranks holding
 * its pieces (not counted: checkpoint traffic), which writes the file. */
static int mesh_save(Trainer *t, long steps_done) {
  const RtProgram *pg = t->pg;
  if (pg->nunits)
    placed_sync(t);
  unsigned char *full = t->rank == 0 ? calloc(1, pg->global_bytes) : NULL;
  if (!all_ok(t, t->rank != 0 || full ||
                     rt_errorf(RT_ERR_NOMEM, "out of memory for the checkpoint") == RT_OK))
    return 0;
  for (int i = 0; i < pg->nglobal; i++)
    for (int k = 0; k < RT_SLOTS; k++) {
      int64_t g = rt_param_slot(&pg->global[i], k);
      if (g < 0)
        continue;
      int l = local_of(pg, i);
      const unsigned char *mine = NULL; /* this rank's piece, if it holds the tensor */
      if (l >= 0 && rt_param_slot(&pg->params[l], k) >= 0)
        mine = t->arena + rt_param_slot(&pg->params[l], k);
      RtShard tmp;
      if (split_state(pg, i, k) && pg->opt == RT_OPT_ADAFACTOR) {
        for (int part = 0; part < 3; part++) {
          int64_t go, lof;
          if (af_part(pg, t->mesh, i, part, &tmp, &go, &lof))
            rt_check(rt_shard_gather(&tmp, t->mesh, mine ? mine + lof * t->es : NULL,
                                     full ? full + g + go * t->es : NULL, t->es));
        }
        continue;
      }
      if (split_state(pg, i, k)) {
        StateCopy c = {pg, t->mesh, i, t->es, full};
        int64_t ls[6];
        rt_shard_local_shape(&pg->shards[i], t->mesh, ls);
        size_t bytes = (size_t)rt_shampoo_state_elems(pg->global[i].ndim, ls, pg->block,
                                                      pg->beta1 > 0, pg->graft) * (size_t)t->es;
        rt_check(rt_shard_gather_with(&pg->shards[i], t->mesh, mine, bytes, shampoo_state_place,
                                      &c));
        continue;
      }
      rt_check(rt_shard_gather(slot_shard(pg, i, k, &tmp), t->mesh, mine, full ? full + g : NULL,
                               t->es));
    }
  int ok = all_ok(t, t->rank != 0 || rt_ckpt_save(pg, pg->global, pg->nglobal, full, steps_done,
                                                  t->args.save) == RT_OK);
  free(full);
  if (ok && t->rank == 0 && !t->args.quiet)
    print_saved(t, steps_done);
  return ok;
}

/* ZeRO with Shampoo or Adafactor: the coordinate in the ZeRO group whose
 * chunk holds parameter l whole (passes/zero.c owner_layout), which alone
 * keeps its state current. */
static int zero_owner(const RtProgram *pg, int l, int es) {
  const RtBucket *b = &pg->buckets[pg->bucket_of[l]];
  return (int)((pg->params[l].offset / es - b->flat) / b->chunk);
}

/* Elements of the state of local tensor l (its shard's under tp). */
static int64_t state_elems(const RtProgram *pg, int l) {
  const RtParam *p = &pg->params[l];
  return pg->opt == RT_OPT_SHAMPOO
             ? rt_shampoo_state_elems(p->ndim, p->shape, pg->block, pg->beta1 > 0, pg->graft)
             : rt_adafactor_state_elems(p->ndim, p->shape, pg->beta1 > 0);
}

/* ZeRO with Shampoo or Adafactor: each tensor's state broadcast from its
 * owner over the ZeRO group (not counted: checkpoint traffic), then
 * gathered on rank 0 as without ZeRO (under tp, Shampoo's block by block,
 * shampoo_state_place, Adafactor's part by part, af_part). */
static void zero_state_save(Trainer *t, unsigned char *full) {
  const RtProgram *pg = t->pg;
  RtAxis zax = (RtAxis)pg->zaxis;
  for (int j = 0; j < pg->nglobal; j++) {
    int64_t g = pg->global[j].opt, n = 0;
    int l = local_of(pg, j);
    if (g < 0)
      continue;
    unsigned char *mine = NULL, *tmp = NULL;
    if (l >= 0 && pg->params[l].opt >= 0) {
      int own = zero_owner(pg, l, t->es);
      n = state_elems(pg, l);
      mine = t->arena + pg->params[l].opt;
      if (coord(t, zax) != own && !(mine = tmp = malloc((size_t)n * (size_t)t->es)))
        rt_mesh_fail(t->mesh, "out of memory for the checkpoint");
      MPI_OK(MPI_Bcast(mine, (int)n, t->es == 8 ? MPI_DOUBLE : MPI_FLOAT, own, t->mesh->comm[zax]));
    }
    RtShard sh;
    if (split_state(pg, j, 1) && pg->opt == RT_OPT_ADAFACTOR) {
      for (int part = 0; part < 3; part++) {
        int64_t go, lof;
        if (af_part(pg, t->mesh, j, part, &sh, &go, &lof))
          rt_check(rt_shard_gather(&sh, t->mesh, mine ? mine + lof * t->es : NULL,
                                   full ? full + g + go * t->es : NULL, t->es));
      }
    } else if (split_state(pg, j, 1)) {
      StateCopy c = {pg, t->mesh, j, t->es, full};
      rt_check(rt_shard_gather_with(&pg->shards[j], t->mesh, mine, (size_t)n * (size_t)t->es,
                                    shampoo_state_place, &c));
    } else
      rt_check(rt_shard_gather(slot_shard(pg, j, 1, &sh), t->mesh, mine, full ? full + g : NULL,
                               t->es));
    free(tmp);
  }
}

/* ... and loaded on its owner only (the others' offsets hold their own). */
static void zero_state_load(Trainer *t, unsigned char *full) {
  const RtProgram *pg = t->pg;
  for (int j = 0; j < pg->nglobal; j++) {
    int64_t g = pg->global[j].opt;
    int l = local_of(pg, j);
    if (g < 0 || l < 0 || pg->params[l].opt < 0 ||
        zero_owner(pg, l, t->es) != coord(t, (RtAxis)pg->zaxis))
      continue;
    RtShard sh;
    if (split_state(pg, j, 1) && pg->opt == RT_OPT_ADAFACTOR) {
      for (int part = 0; part < 3; part++) {
        int64_t go, lof;
        if (af_part(pg, t->mesh, j, part, &sh, &go, &lof))
          rt_shard_extract(&sh, t->mesh, full + g + go * t->es,
                           t->arena + pg->params[l].opt + lof * t->es, t->es);
      }
    } else if (split_state(pg, j, 1)) {
      StateCopy c = {pg, t->mesh, j, t->es, full};
      int sc[2];
      split_coords(&pg->shards[j], t->mesh, sc);
      shampoo_state_copy(&c, sc, t->arena + pg->params[l].opt, 0);
    } else
      rt_shard_extract(slot_shard(pg, j, 1, &sh), t->mesh, full + g, t->arena + pg->params[l].opt,
                       t->es);
  }
}

/* ZeRO slot k of this rank: 0 the parameters (ZeRO-1/2: the whole flat
 * layout at the arena's start; pshard: its chunks there), 1 and 2 its
 * chunks of optimizer state. */
static unsigned char *zero_slot(const Trainer *t, int k) {
  const RtProgram *pg = t->pg;
  return k == 0 ? t->arena
                : t->arena + pg->zopt_offset + (size_t)(k - 1) * (size_t)pg->zshard * (size_t)t->es;
}

/* full (slot k of every tensor) -> this rank's storage of slot k, through
 * flat (zflat elements). */
static void zero_store(Trainer *t, int k, const unsigned char *full, unsigned char *flat) {
  const RtProgram *pg = t->pg;
  size_t flat_bytes = (size_t)pg->zflat * (size_t)t->es;
  memset(flat, 0, flat_bytes);
  for (int j = 0; j < pg->nglobal; j++) {
    int l = local_of(pg, j);
    if (l >= 0 && rt_param_slot(&pg->global[j], k) >= 0)
      rt_shard_extract(&pg->shards[j], t->mesh, full + rt_param_slot(&pg->global[j], k),
                       flat + pg->params[l].offset, t->es);
  }
  if (!pg->pshard && k == 0)
    memcpy(t->arena, flat, flat_bytes);
  else
    rt_zero_take(pg->buckets, pg->nbuckets, coord(t, (RtAxis)pg->zaxis), flat, zero_slot(t, k),
                 t->es);
}

static void zero_init_params(Trainer *t, uint64_t seed) {
  const RtProgram *pg = t->pg;
  unsigned char *full = calloc(1, pg->global_bytes);
  unsigned char *flat = malloc((size_t)pg->zflat * (size_t)t->es);
  if (!full || !flat)
    rt_mesh_fail(t->mesh, "out of memory for the full parameters (%lld bytes)",
                 (long long)pg->global_bytes);
  rt_params_init(pg, pg->global, pg->nglobal, full, seed);
  zero_store(t, 0, full, flat);
  free(flat);
  free(full);
}

static int zero_load(Trainer *t, const char *path, long *step, int *weights_only) {
  const RtProgram *pg = t->pg;
  unsigned char *full = calloc(1, pg->global_bytes);
  unsigned char *flat = malloc((size_t)pg->zflat * (size_t)t->es);
  if (!full || !flat) {
    free(full);
    free(flat);
    return rt_errorf(RT_ERR_NOMEM, "out of memory for the full parameters");
  }
  int rc = rt_ckpt_load(pg, pg->global, pg->nglobal, full, path, step, weights_only);
  for (int k = 0; rc == RT_OK && k <= opt_states(pg); k++)
    zero_store(t, k, full, flat);
  if (rc == RT_OK && pg->opt >= RT_OPT_SHAMPOO)
    zero_state_load(t, full);
  free(flat);
  free(full);
  return rc;
}

/* Each slot's chunks gathered over the ZeRO group (not counted) into the
 * flat layout on its coord 0, whose ranks hold every tp piece; rank 0
 * writes the full tensors. */
static int zero_save(Trainer *t, long steps_done) {
  const RtProgram *pg = t->pg;
  RtAxis zax = (RtAxis)pg->zaxis;
  unsigned char *full = t->rank == 0 ? calloc(1, pg->global_bytes) : NULL;
  unsigned char *flat = calloc(1, (size_t)pg->zflat * (size_t)t->es);
  unsigned char *all = malloc((size_t)pg->zshard * (size_t)pg->zgroup * (size_t)t->es);
  if (!flat || !all)
    rt_mesh_fail(t->mesh, "out of memory for the checkpoint");
  if (!all_ok(t, t->rank != 0 || full ||
                     rt_errorf(RT_ERR_NOMEM, "out of memory for the checkpoint") == RT_OK)) {
    free(all);
    free(flat);
    return 0;
  }
  for (int k = 0; k <= opt_states(pg); k++) {
    /* ZeRO-1/2 (fp32) hold every parameter: slot 0 is the arena's flat layout */
    const unsigned char *src = !pg->pshard && k == 0 ? t->arena : flat;
    if (pg->pshard || k > 0) {
      rt_check(rt_gather_flat(t->mesh, zax, zero_slot(t, k), (size_t)pg->zshard, all, t->es));
      if (coord(t, zax) == 0)
        rt_zero_put(pg->buckets, pg->nbuckets, pg->zgroup, pg->zshard, all, flat, t->es);
    }
    for (int j = 0; j < pg->nglobal; j++) {
      int64_t g = rt_param_slot(&pg->global[j], k);
      if (g < 0)
        continue;
      int l = local_of(pg, j);
      rt_check(rt_shard_gather(&pg->shards[j], t->mesh, l >= 0 ? src + pg->params[l].offset : NULL,
                               full ? full + g : NULL, t->es));
    }
  }
  if (pg->opt >= RT_OPT_SHAMPOO)
    zero_state_save(t, full);
  free(all);
  free(flat);
  int ok = all_ok(t, t->rank != 0 || rt_ckpt_save(pg, pg->global, pg->nglobal, full, steps_done,
                                                  t->args.save) == RT_OK);
  free(full);
  if (ok && t->rank == 0 && !t->args.quiet)
    print_saved(t, steps_done);
  return ok;
}

#endif /* RT_TRAIN_MPI */

static void init_params(Trainer *t, uint64_t seed) {
  const RtProgram *pg = t->pg;
#ifdef RT_TRAIN_MPI
  if (t->mesh && pg->zero >= 1)
    return zero_init_params(t, seed);
  if (t->mesh)
    return mesh_init_params(t, seed);
#endif
  rt_params_init(pg, pg->params, pg->nparams, t->arena, seed);
}

static int load_checkpoint(Trainer *t, const char *path, long *step, int *weights_only) {
  const RtProgram *pg = t->pg;
#ifdef RT_TRAIN_MPI
  if (t->mesh && pg->zero >= 1)
    return zero_load(t, path, step, weights_only);
  if (t->mesh)
    return mesh_load(t, path, step, weights_only);
#endif
  return rt_ckpt_load(pg, pg->params, pg->nparams, t->arena, path, step, weights_only);
}

/* Returns 1 when saved (every rank knows). */
static int save_checkpoint(Trainer *t, long steps_done) {
#ifdef RT_TRAIN_CUDA
  rtc_to_host(t->arena, t->dev, t->pg->persistent_bytes);
#endif
  const RtProgram *pg = t->pg;
#ifdef RT_TRAIN_MPI
  if (t->mesh && pg->zero >= 1)
    return zero_save(t, steps_done);
  if (t->mesh)
    return mesh_save(t, steps_done);
#endif
  int ok = all_ok(t, rt_ckpt_save(pg, pg->params, pg->nparams, t->arena, steps_done,
                                  t->args.save) == RT_OK);
  if (ok && !t->args.quiet)
    print_saved(t, steps_done);
  return ok;
}

/* ---------------------------------------------------------------------------
 * The microbatches of one step
 */

/* The first row of this rank's rows in the global batch (one rank: the
 * launcher's rank, 0 unless --gradcheck runs under a launcher). */
static int row_base(const Trainer *t) {
  const RtProgram *pg = t->pg;
  int dp_i = t->mesh ? coord(t, RT_AX_DP) : t->rank;
  return dp_i * (pg->mb * pg->microbatch);
}

#ifdef RT_TRAIN_MPI
static void pipe_flush(Trainer *t);

static MPI_Request *sent_of(Trainer *t, int chunk, int slot) {
  return &t->sent[((size_t)chunk * (size_t)t->maxslots + (size_t)slot) * 2 * RT_PIPE_MAXMSG];
}
#endif

/* A pipeline rank's schedule: each action in its microbatch's stash slot
 * of its chunk; a forward first waits until the slot's earlier messages
 * (an activation up, a gradient down) were delivered, since it overwrites
 * them.  The forward and backward receive and send (rt_pipe_*).  On the
 * cuda target with NCCL the messages are stream work (rt_pipe_post's
 * groups): nothing waits on the host, the step captures as a graph, and
 * the last action's sends are posted at the end. */
static double run_schedule(Trainer *t, RtPass *p, int with_backward) {
  double loss = 0;
#ifdef RT_TRAIN_MPI
  const RtProgram *pg = t->pg;
  size_t nsent = (size_t)pg->nchunks * (size_t)t->maxslots * 2 * RT_PIPE_MAXMSG;
  for (size_t i = 0; i < nsent; i++)
    t->sent[i] = MPI_REQUEST_NULL;
  for (int a = 0; a < pg->norder; a++) {
    const RtAct *act = &pg->order[a];
    const RtChunk *c = &pg->chunks[act->chunk];
    const int k = act->mb, slot = k % c->slots;
    if (!act->fwd && !with_backward)
      continue;
    p->mb = k;
    p->row0 = row_base(t) + k * pg->microbatch;
    p->last_mb = k == pg->mb - 1;
    p->stash = t->dev + c->stash_offset + (size_t)slot * (size_t)c->stash_bytes;
    t->chunk = act->chunk;
    t->slot = slot;
#ifdef RT_TRAIN_CUDA
    /* pairs: this forward's post takes the next backward's receives too,
     * into that microbatch's stash slot; the backward then posts nothing */
    t->in_posted = t->pipe_nccl && with_backward && a > 0 && pg->order[a - 1].pair;
    if (t->pipe_nccl && with_backward && act->pair && a + 1 < pg->norder) {
      const RtAct *nx = &pg->order[a + 1];
      const RtChunk *nc = &pg->chunks[nx->chunk];
      RtPass *q = &t->ahead_pass;
      *q = *p;
      q->mb = nx->mb;
      q->row0 = row_base(t) + nx->mb * pg->microbatch;
      q->last_mb = nx->mb == pg->mb - 1;
      q->stash = t->dev + nc->stash_offset + (size_t)(nx->mb % nc->slots) * (size_t)nc->stash_bytes;
      if (!nc->backward_in)
        fail(t, "internal: a pair without the backward's receives (backward_in)");
      t->ahead_fn = nc->backward_in;
    }
#endif
    if (act->fwd) {
      rt_waitall(t->mesh, 2 * RT_PIPE_MAXMSG, sent_of(t, act->chunk, slot));
      loss += c->forward(p);
    } else {
      c->backward(p);
    }
  }
#ifdef RT_TRAIN_CUDA
  t->in_posted = 0;
#endif
  pipe_flush(t); /* the last action's sends */
  for (int c = 0; c < pg->nchunks; c++)
    for (int k = 0; k < t->maxslots; k++)
      rt_waitall(t->mesh, 2 * RT_PIPE_MAXMSG, sent_of(t, c, k));
#else
  (void)p;
  (void)with_backward;
  fail(t, "a pipeline schedule needs the MPI driver (libshardrt_train_mpi)");
#endif
  return loss;
}

/* Forward (and backward) of this rank's microbatches of one step: the mean
 * loss.  Parameter gradients accumulate over the microbatches. */
static double run_microbatches(Trainer *t, long step, int with_backward) {
  const RtProgram *pg = t->pg;
  for (int c = 0; with_backward && c < pg->nchunks; c++)
#ifdef RT_TRAIN_CUDA
    rtc_memset(t->dev + pg->chunks[c].grads_offset, 0, (size_t)pg->chunks[c].grads_bytes);
#else
    memset(t->arena + pg->chunks[c].grads_offset, 0, (size_t)pg->chunks[c].grads_bytes);
#endif
  RtPass p = {.arena = t->dev, .step = step, .seed = t->args.seed,
              .mesh = t->mesh, .t = t};
  double loss = 0;
  /* the step's 16-bit weight copies, from the masters the last update wrote */
  for (int c = 0; c < pg->nchunks; c++)
    if (pg->chunks[c].cast)
      pg->chunks[c].cast(&p);
  if (pg->order) {
    loss = run_schedule(t, &p, with_backward);
  } else {
    const RtChunk *c = &pg->chunks[0];
    for (int k = 0; k < pg->mb; k++) {
      p.mb = k;
      p.row0 = row_base(t) + k * pg->microbatch;
      p.last_mb = k == pg->mb - 1;
      loss += c->forward(&p);
      if (with_backward)
        c->backward(&p);
    }
  }
  return loss / pg->mb;
}

static double gradcheck_pass(void *ctx, long step, int with_backward) {
  return run_microbatches(ctx, step, with_backward);
}

void rt_load_batch(RtPass *p, void *in0, void *in1) {
  const Trainer *t = p->t;
  const RtProgram *pg = t->pg;
#ifdef RT_TRAIN_CUDA
  /* into the host mirror, then up: rows x (tokens of this rank | features) */
  void *d0 = in0, *d1 = in1;
  in0 = t->arena + ((unsigned char *)d0 - t->dev);
  in1 = t->arena + ((unsigned char *)d1 - t->dev);
  size_t rows = (size_t)pg->microbatch;
  size_t b0 = pg->data == RT_TRAIN_SYNTH ? rows * (size_t)pg->features * 4
                                         : rows * (size_t)(pg->ring ? pg->seq / pg->sp : pg->seq) * 4;
  size_t b1 = pg->data == RT_TRAIN_SYNTH ? rows * 4 : b0;
  if (rtc_capturing()) { /* from the microbatch's pinned slot, filled before each replay */
    unsigned char *s = t->slots + (size_t)p->mb * (t->slot0 + t->slot1);
    rtc_upload(d0, s, b0);
    rtc_upload(d1, s + t->slot0, b1);
    return;
  }
#endif
  if (pg->ring) {
    int tn = pg->seq / pg->sp;
    rt_check(rt_train_data_batch_cols(&t->data, p->step, p->row0, pg->microbatch,
                                      coord(t, RT_AX_SP) * tn, tn, in0, in1));
  } else {
    rt_check(rt_train_data_batch(&t->data, p->step, p->row0, pg->microbatch, in0, in1));
  }
#ifdef RT_TRAIN_CUDA
  rtc_to_device(d0, in0, b0);
  rtc_to_device(d1, in1, b1);
#endif
}

#ifdef RT_TRAIN_CUDA
/* A forward's loss: read now, or while the step is captured copied on the
 * device to the microbatch's slot, which the driver reads after a replay. */
double rtc_pass_loss(RtPass *p, const double *site) {
  Trainer *t = p->t;
  if (!rtc_capturing())
    return *site;
  rtc_copy(&t->loss_dev[p->mb], rt_crossentropy_site_loss_cu(site), sizeof(double));
  return 0;
}

double rtc_pass_loss_f32(RtPass *p, const float *dev) {
  Trainer *t = p->t;
  if (!rtc_capturing())
    return rtc_get_f32(dev);
  rtc_widen_f32(&t->loss_dev[p->mb], dev);
  return 0;
}
#endif

#ifdef RT_TRAIN_MPI
/* The world rank of virtual stage vs's pipeline rank (vs % pp) with this
 * rank's dp, sp and tp coordinates: pp is the outermost axis. */
static int pipe_peer(const Trainer *t, int vs) {
  const RtProgram *pg = t->pg;
  return t->rank + (vs % pg->pp - pg->rank) * (pg->ranks / pg->pp);
}

#ifdef RT_TRAIN_CUDA
/* A message for the next rt_pipe_post's NCCL group. */
static void pipe_queue(Trainer *t, int send, int peer, void *buf, size_t n) {
  if (t->nqueued == 3 * RT_PIPE_MAXMSG)
    rt_mesh_fail(t->mesh, "internal: more than %d pipeline messages queued", t->nqueued);
  t->queued[t->nqueued++] = (RtcPipeMsg){send, peer, buf, n, t->es};
}
#endif

/* Receives n elements at element off of buf (the whole message: off 0). */
static void pipe_recv_(RtPass *p, int peer_vs, int lower_vs, int grad, void *buf, size_t off,
                       size_t n) {
  Trainer *t = p->t;
  int peer = pipe_peer(t, peer_vs), tag = rt_pipe_tag(p->mb, t->pg->nstages, lower_vs, grad);
  unsigned char *b = (unsigned char *)buf + off * (size_t)t->es;
#ifdef RT_TRAIN_CUDA
  if (t->pipe_nccl) { /* posted at the block's rt_pipe_post */
    pipe_queue(t, 0, peer, b, n);
    return;
  }
#endif
#ifdef RT_ROOT_WORKER
  if (t->rw) {
    /* a bubble: the worker computes Shampoo's due roots; the probes sleep
     * between them, leaving it the core, until the message is there */
    for (int flag = 0; root_worker_has_work(t);) {
      MPI_OK(MPI_Iprobe(peer, tag, t->mesh->comm[RT_AX_WORLD], &flag, MPI_STATUS_IGNORE));
      if (flag)
        break;
      struct timespec nap = {0, 50000};
      nanosleep(&nap, NULL);
    }
  } else
#endif
  /* a bubble: Shampoo's due roots, one block at a time, until the message is there */
  for (int flag = 0; t->roots_due;) {
    MPI_OK(MPI_Iprobe(peer, tag, t->mesh->comm[RT_AX_WORLD], &flag, MPI_STATUS_IGNORE));
    if (flag || !roots_one(t))
      break;
  }
#ifdef RT_TRAIN_CUDA
  /* staged through the host mirror */
  unsigned char *h = t->arena + (b - t->dev);
  rt_recv(t->mesh, peer, tag, h, n, t->es);
  rtc_to_device(b, h, n * (size_t)t->es);
#else
  rt_recv(t->mesh, peer, tag, b, n, t->es);
#endif
}

static void pipe_send_(RtPass *p, int peer_vs, int lower_vs, int grad, const void *buf,
                       size_t off, size_t n) {
  Trainer *t = p->t;
  const unsigned char *b = (const unsigned char *)buf + off * (size_t)t->es;
#ifdef RT_TRAIN_CUDA
  if (t->pipe_nccl) { /* posted with the next block's receives: the stream keeps the slot */
    pipe_queue(t, 1, pipe_peer(t, peer_vs), (void *)b, n);
    return;
  }
  /* from the host mirror of the stash slot, which the driver reuses only
   * once the message was delivered */
  unsigned char *h = t->arena + (b - t->dev);
  rtc_to_host(h, b, n * (size_t)t->es);
  b = h;
#endif
  /* the slot's first free request of this direction (a cut's messages) */
  MPI_Request *req = sent_of(t, t->chunk, t->slot) + (grad ? RT_PIPE_MAXMSG : 0);
  int i = 0;
  while (i < RT_PIPE_MAXMSG && req[i] != MPI_REQUEST_NULL)
    i++;
  if (i == RT_PIPE_MAXMSG)
    rt_mesh_fail(t->mesh, "internal: more than %d pipeline messages in flight from one slot",
                 RT_PIPE_MAXMSG);
  rt_isend(t->mesh, pipe_peer(t, peer_vs), rt_pipe_tag(p->mb, t->pg->nstages, lower_vs, grad),
           b, n, t->es, &req[i]);
}

/* Whether this block's receives and post were the forward's before it (pairs). */
static int posted_ahead(const Trainer *t) {
#ifdef RT_TRAIN_CUDA
  return t->in_posted;
#else
  (void)t;
  return 0;
#endif
}

void rt_pipe_recv(RtPass *p, int peer_vs, int lower_vs, int grad, void *buf, size_t n) {
  if (posted_ahead(p->t))
    return;
  pipe_recv_(p, peer_vs, lower_vs, grad, buf, 0, n);
}

void rt_pipe_send(RtPass *p, int peer_vs, int lower_vs, int grad, const void *buf, size_t n) {
  pipe_send_(p, peer_vs, lower_vs, grad, buf, 0, n);
}

/* This tp rank's slice of an n-element scatter/gather message. */
static size_t pipe_slice(const Trainer *t, size_t n, size_t *len) {
  int P = t->mesh->size[RT_AX_TP];
  if (n % (size_t)P)
    rt_mesh_fail(t->mesh, "internal: a pipeline message of %zu elements split over %d tp ranks", n,
                 P);
  *len = n / (size_t)P;
  return *len * (size_t)coord(t, RT_AX_TP);
}

void rt_pipe_recv_gather(RtPass *p, int peer_vs, int lower_vs, int grad, void *buf, size_t n) {
  Trainer *t = p->t;
  if (posted_ahead(t))
    return;
  size_t len, off = pipe_slice(t, n, &len);
  pipe_recv_(p, peer_vs, lower_vs, grad, buf, off, len);
  if (t->ngather == RT_PIPE_MAXMSG)
    rt_mesh_fail(t->mesh, "internal: more than %d pipeline receives in one block", RT_PIPE_MAXMSG);
  t->gather[t->ngather].buf = buf;
  t->gather[t->ngather].off = off;
  t->gather[t->ngather++].len = len;
}

void rt_pipe_send_scatter(RtPass *p, int peer_vs, int lower_vs, int grad, const void *buf,
                          size_t n) {
  size_t len, off = pipe_slice(p->t, n, &len);
  pipe_send_(p, peer_vs, lower_vs, grad, buf, off, len);
}

/* The queued messages as one NCCL group (cuda), their bytes counted on pp. */
static void pipe_flush(Trainer *t) {
#ifdef RT_TRAIN_CUDA
  if (t->nqueued)
    rtc_pipe_group(t->mesh, t->queued, t->nqueued);
  t->nqueued = 0;
#else
  (void)t;
#endif
}

void rt_pipe_post(RtPass *p) {
  Trainer *t = p->t;
  if (posted_ahead(t))
    return; /* the sends wait for the next post */
#ifdef RT_TRAIN_CUDA
  if (t->ahead_fn) { /* a pair: the next backward's receives after this block's (the order
                      * the check proved: a peer's messages match in posting order) */
    RtBackwardFn fn = t->ahead_fn;
    t->ahead_fn = NULL;
    fn(&t->ahead_pass);
  }
#endif
  pipe_flush(t);
  for (int i = 0; i < t->ngather; i++) {
    unsigned char *buf = t->gather[i].buf;
    size_t off = t->gather[i].off, len = t->gather[i].len;
#ifdef RT_TRAIN_CUDA
    /* the message in floats (a 16-bit value's bytes as whole floats) */
    size_t f = (size_t)t->es / 4;
    rtc_allgather_dim(t->mesh, RT_AX_TP, (float *)buf, (const float *)buf + off * f, 1, len * f,
                      NULL);
#else
    rt_allgather_dim(t->mesh, RT_AX_TP, buf, buf + off * (size_t)t->es, 1, len, t->es, NULL);
#endif
  }
  t->ngather = 0;
}

static void check_req(Trainer *t, int req) {
  if (req < 0 || req >= t->pg->nreq)
    rt_mesh_fail(t->mesh, "internal: bucket reduction %d of %d", req, t->pg->nreq);
}

void rt_bucket_allreduce(RtPass *p, int req, RtAxis ax, void *buf, size_t n) {
  Trainer *t = p->t;
  if (!p->last_mb)
    return;
  check_req(t, req);
#ifdef RT_TRAIN_CUDA
  rtc_bucket_allreduce(t->mesh, ax, buf, n);
#else
  rt_iallreduce(t->mesh, ax, buf, n, t->es, &t->reqs[req]);
  rt_progress(t->mesh, req + 1, t->reqs); /* and the earlier buckets' go on */
#endif
}

void rt_bucket_reduce_scatter(RtPass *p, int req, RtAxis ax, void *dst, const void *src,
                              size_t n) {
  Trainer *t = p->t;
  if (!p->last_mb)
    return;
  check_req(t, req);
#ifdef RT_TRAIN_CUDA
  rtc_bucket_reduce_scatter(t->mesh, ax, dst, src, n);
#else
  rt_ireduce_scatter(t->mesh, ax, dst, src, n, t->es, &t->reqs[req]);
  rt_progress(t->mesh, req + 1, t->reqs);
#endif
}
#endif

/* ---------------------------------------------------------------------------
 * The step after the microbatches
 */

static double sumsq(const Trainer *t, const unsigned char *x, size_t n) {
#ifdef RT_TRAIN_CUDA
  (void)t;
  return rt_sumsq_cu((const float *)x, n);
#else
  return t->pg->f64 ? rt_sumsq_f64((const double *)x, n) : rt_sumsq_f32((const float *)x, n);
#endif
}

static double norm_weight(const RtProgram *pg, int i) { return pg->norm_w ? pg->norm_w[i] : 1.0; }

/* Parameter i's elements [*a, *z) of the flat layout that lie in this
 * rank's chunk (coord r of the ZeRO group) of its bucket, at *s in the
 * shard arrays; 0 when none (or no gradient). */
static int zero_range(const Trainer *t, int i, size_t r, size_t *a, size_t *z, size_t *s) {
  const RtProgram *pg = t->pg;
  const RtParam *p = &pg->params[i];
  const RtBucket *b = &pg->buckets[pg->bucket_of[i]];
  const size_t lo = (size_t)b->flat + r * (size_t)b->chunk, hi = lo + (size_t)b->chunk;
  *a = p->offset / (size_t)t->es;
  *z = *a + p->numel;
  if (p->grad < 0 || *z <= lo || *a >= hi)
    return 0;
  if (*a < lo)
    *a = lo;
  if (*z > hi)
    *z = hi;
  *s = (size_t)b->shard + (*a - lo);
  return 1;
}

#ifdef RT_TRAIN_CUDA
/* The list of the parameters with a gradient (device pointers), built once;
 * 0 when there is none or no memory. */
static int param_list(Trainer *t) {
  const RtProgram *pg = t->pg;
  if (t->nlist) return 1;
  size_t k = (size_t)(pg->nparams > 0 ? pg->nparams : 1);
  t->lp = malloc(k * sizeof *t->lp);
  t->lm = malloc(k * sizeof *t->lm);
  t->lv = malloc(k * sizeof *t->lv);
  t->lg = malloc(k * sizeof *t->lg);
  t->ln = malloc(k * sizeof *t->ln);
  t->lwd = malloc(k * sizeof *t->lwd);
  if (!t->lp || !t->lm || !t->lv || !t->lg || !t->ln || !t->lwd) return 0;
  int n = 0;
  for (int i = 0; i < pg->nparams; i++) {
    const RtParam *p = &pg->params[i];
    if (p->grad < 0)
      continue;
    t->lp[n] = (float *)(t->dev + p->offset);
    t->lg[n] = (const float *)(t->dev + p->grad);
    t->lm[n] = p->opt >= 0 ? (float *)(t->dev + p->opt) : NULL;
    t->lv[n] = p->opt2 >= 0 ? (float *)(t->dev + p->opt2) : NULL;
    t->ln[n] = p->numel;
    t->lwd[n] = p->decay ? pg->weight_decay : 0.0;
    n++;
  }
  t->nlist = n;
  return n > 0;
}
#endif

#ifdef RT_TRAIN_CUDA
/* The norm on the device: its sums of squares into ss_dev (weights ss_w),
 * as grad_norm below adds them; norm_finish adds them on the host once
 * they were read (ss_pin). */
static void norm_terms(Trainer *t, const RtStepOp *op) {
  const RtProgram *pg = t->pg;
  t->nss = t->ss_one = 0;
  switch (op->mode) {
  case RT_NORM_RANGE:
    rt_sumsq_dev_cu(&t->ss_dev[t->nss], (const float *)(t->dev + op->off), (size_t)op->count);
    t->ss_w[t->nss++] = 1;
    break;
  case RT_NORM_PARAMS:
  case RT_NORM_PARAMS_DP0:
    if (op->mode == RT_NORM_PARAMS_DP0 && coord(t, RT_AX_DATA) != 0)
      break;
    if (!pg->norm_w && param_list(t)) {
      rt_sumsq_list_dev_cu(&t->ss_dev[t->nss], t->lg, t->ln, t->nlist);
      t->ss_w[t->nss++] = 1;
      t->ss_one = 1; /* the sum itself, as grad_norm's one reduction */
      break;
    }
    for (int i = 0; i < pg->nparams; i++)
      if (pg->params[i].grad >= 0) {
        rt_sumsq_dev_cu(&t->ss_dev[t->nss], (const float *)(t->dev + pg->params[i].grad),
                        pg->params[i].numel);
        t->ss_w[t->nss++] = norm_weight(pg, i);
      }
    break;
  case RT_NORM_ZERO: {
    const size_t r = (size_t)coord(t, (RtAxis)pg->zaxis);
    for (int i = 0; i < pg->nparams; i++) {
      size_t a, z, s;
      if (zero_range(t, i, r, &a, &z, &s)) {
        rt_sumsq_dev_cu(&t->ss_dev[t->nss],
                        (const float *)(t->dev + pg->gshard_offset + s * (size_t)t->es), z - a);
        t->ss_w[t->nss++] = norm_weight(pg, i);
      }
    }
    break;
  }
  default:
    fail(t, "internal: unknown gradient norm mode");
  }
  if (t->nss)
    rtc_download(t->ss_pin, t->ss_dev, (size_t)t->nss * sizeof(double));
}

static double norm_finish(Trainer *t, const RtStepOp *op) {
  if (op->mode == RT_NORM_RANGE)
    return sqrt(t->ss_pin[0]);
  double ss = 0;
  if (t->ss_one)
    ss = t->ss_pin[0];
  else
    for (int k = 0; k < t->nss; k++)
      ss += t->ss_w[k] * t->ss_pin[k];
  return sqrt(sum_over(t, op->axis, ss));
}
#endif

/* The global norm of the summed gradients (before the 1/DP mean): Σ w·x²
 * in parameter order, summed over the op's axis. */
static double grad_norm(Trainer *t, const RtStepOp *op) {
#ifdef RT_TRAIN_CUDA
  norm_terms(t, op);
  rtc_sync();
  return norm_finish(t, op);
#endif
  const RtProgram *pg = t->pg;
  double ss = 0;
  switch (op->mode) {
  case RT_NORM_RANGE:
    return sqrt(sumsq(t, t->dev + op->off, (size_t)op->count));
  case RT_NORM_PARAMS:
  case RT_NORM_PARAMS_DP0: /* the data ranks (dp, and sp under ring attention) hold the same
                            * sums: count data rank 0's */
#ifdef RT_TRAIN_CUDA
    if (!pg->norm_w && param_list(t)) { /* one reduction over every gradient */
      if (op->mode == RT_NORM_PARAMS || coord(t, RT_AX_DATA) == 0)
        ss = rt_sumsq_list_cu(t->lg, t->ln, t->nlist);
      break;
    }
#endif
    for (int i = 0; i < pg->nparams && (op->mode == RT_NORM_PARAMS || coord(t, RT_AX_DATA) == 0);
         i++)
      if (pg->params[i].grad >= 0)
        ss += norm_weight(pg, i) * sumsq(t, t->dev + pg->params[i].grad, pg->params[i].numel);
    break;
  case RT_NORM_ZERO: { /* each rank holds the sums of its chunks */
    const size_t r = (size_t)coord(t, (RtAxis)pg->zaxis);
    for (int i = 0; i < pg->nparams; i++) {
      size_t a, z, s;
      if (zero_range(t, i, r, &a, &z, &s))
        ss += norm_weight(pg, i) *
              sumsq(t, t->dev + pg->gshard_offset + s * (size_t)t->es, z - a);
    }
    break;
  }
  default:
    fail(t, "internal: unknown gradient norm mode");
  }
  return sqrt(sum_over(t, op->axis, ss));
}

static void adamw(const Trainer *t, unsigned char *w, const unsigned char *g, unsigned char *m,
                  unsigned char *v, size_t n, double lr, double wd, long step, double scale) {
  const RtProgram *pg = t->pg;
#ifdef RT_TRAIN_CUDA
  (void)lr, (void)step, (void)scale; /* the step's scalars on the device (optimizer_step) */
  rt_adamw_step_dev_cu((float *)w, (const float *)g, (float *)m, (float *)v, n, wd);
  return;
#endif
  if (pg->f64)
    rt_adamw_step_f64((double *)w, (const double *)g, (double *)m, (double *)v, n, lr,
                      pg->beta1, pg->beta2, pg->eps, wd, step, scale);
  else
    rt_adamw_step_f32((float *)w, (const float *)g, (float *)m, (float *)v, n, lr, pg->beta1,
                      pg->beta2, pg->eps, wd, step, scale);
}

static void sgd(const Trainer *t, unsigned char *w, const unsigned char *g, unsigned char *mom,
                size_t n, double lr, double wd, double scale) {
  const RtProgram *pg = t->pg;
#ifdef RT_TRAIN_CUDA
  (void)lr, (void)scale;
  rt_sgd_step_dev_cu((float *)w, (const float *)g, (float *)mom, n, pg->momentum, wd);
  return;
#endif
  if (pg->f64)
    rt_sgd_step_f64((double *)w, (const double *)g, (double *)mom, n, lr, pg->momentum, wd,
                    scale);
  else
    rt_sgd_step_f32((float *)w, (const float *)g, (float *)mom, n, lr, pg->momentum, wd, scale);
}

/* The scalars of a Shampoo or Adafactor step at 1-based step `step`. */
static RtShampooArgs blocked_args(const Trainer *t, long step, double lr, double grad_scale) {
  const RtProgram *pg = t->pg;
  RtShampooArgs a = {.lr = lr, .beta1 = pg->beta1, .beta2 = pg->beta2, .eps = pg->eps,
                     .graft_eps = pg->graft_eps, .grad_scale = grad_scale,
                     .decay_rate = pg->decay_rate, .clip_threshold = pg->clip_threshold,
                     .t = step, .block = pg->block, .graft = pg->graft, .root = pg->root};
  a.precondition = pg->opt == RT_OPT_SHAMPOO && step - 1 >= pg->start_preconditioning;
  a.recompute = 0; /* the roots are computed before, by roots_one */
  for (int i = 0; i < pg->nparams; i++) {
    int64_t e, k;
    if (pg->params[i].grad < 0)
      continue;
    rt_shampoo_unitmax(pg->params[i].ndim, pg->params[i].shape, pg->block, &e, &k);
    if (e > a.work_elems)
      a.work_elems = e;
    if (k > a.work_k)
      a.work_k = k;
  }
  return a;
}

/* The blocked optimizers' f32 kernels: the cpu's (k_optim2.inc) on the
 * arena, or under RT_TRAIN_CUDA k_optim2.cu's on the device arena (t->dev),
 * with the same arguments (rtc_optim.h). */
#ifdef RT_TRAIN_CUDA
#define BLOCKED(name) name##_cu
/* Adafactor's reduced Σ u² (tp): the device kernel reads it where it is */
#define AF_Q(q) (q)
#define AF_ZERO(p, n) rt_opt_zero_cu((p), (n))
#else
#define BLOCKED(name) name##_f32
#define AF_Q(q) ((double)*(q))
#define AF_ZERO(p, n) memset((p), 0, sizeof(float) * (n))
#endif

#if defined(RT_TRAIN_CUDA) || defined(RT_ROOT_WORKER)
/* Block (bi, bj) of preconditioned parameter p: the byte offset in the
 * arena of its factors L (r x r) and R (c x c), which its roots L^-1/4 and
 * R^-1/4 follow (as many bytes again, f32). */
static size_t block_factors(const Trainer *t, const RtParam *p, int64_t bi, int64_t bj,
                            int64_t *r, int64_t *c) {
  const RtProgram *pg = t->pg;
  const int64_t R = p->shape[0], C = p->shape[1];
  *r = rt_shampoo_bsize(R, pg->block, bi), *c = rt_shampoo_bsize(C, pg->block, bj);
  return (size_t)p->opt +
         4 * (size_t)rt_shampoo_factors_off(R, C, pg->block, bi, bj, pg->beta1 > 0, pg->graft);
}

/* Tests (SHARDC_TEST_ROOTS=starve[:MS]): the ms a root thread sleeps on
 * every block it claims, so that the optimizer step takes blocks over; 0
 * without the hook.  MS outside 1..600000 (or none) is 30. */
static long test_roots_starve_ms(void) {
  const char *test = getenv("SHARDC_TEST_ROOTS");
  if (!test || strncmp(test, "starve", 6)) return 0;
  long ms = test[6] == ':' ? atol(test + 7) : 30;
  return ms >= 1 && ms <= 600000 ? ms : 30;
}
#endif

/* The roots of block (bi, bj) of parameter p from its factors as they are. */
static int unit_roots(Trainer *t, const RtParam *p, int64_t bi, int64_t bj,
                      const RtShampooArgs *a) {
  const RtProgram *pg = t->pg;
  if (pg->f64)
    return rt_shampoo_unit_roots_f64((double *)(t->arena + p->opt), t->arena + pg->opt_work_offset,
                                     p->ndim, p->shape, bi, bj, a);
#ifdef RT_TRAIN_CUDA
  if (pg->root == RT_ROOT_NEWTON)
    return rt_shampoo_unit_roots_cu((float *)(t->dev + p->opt), t->dev + pg->opt_work_offset,
                                    p->ndim, p->shape, bi, bj, a);
  /* eigh: on the host mirror, with the cpu's LAPACK (rtc_optim.h says why):
   * the block's factors L, R down, its roots L^-1/4, R^-1/4 (after them) up */
  int64_t r, c;
  const size_t off = block_factors(t, p, bi, bj, &r, &c), fb = 4 * (size_t)(r * r + c * c);
  rtc_to_host(t->arena + off, t->dev + off, fb);
  int rc = rt_shampoo_unit_roots_f32((float *)(t->arena + p->opt), t->arena + pg->opt_work_offset,
                                     p->ndim, p->shape, bi, bj, a);
  rtc_to_device(t->dev + off + fb, t->arena + off + fb, fb);
  return rc;
#else
  return rt_shampoo_unit_roots_f32((float *)(t->arena + p->opt), t->arena + pg->opt_work_offset,
                                   p->ndim, p->shape, bi, bj, a);
#endif
}

/* The owner table of placed Shampoo's units (Trainer.unit_owner): one
 * lookup per block where a scan of the units per block made the roots'
 * walk cubic in the blocks (tens of thousands of them with small blocks). */
static void unit_owners(Trainer *t) {
  const RtProgram *pg = t->pg;
  int64_t n = 0;
  t->unit_off = malloc((size_t)pg->nparams * sizeof *t->unit_off);
  if (!t->unit_off)
    fail(t, "out of memory for the Shampoo units' owners");
  for (int i = 0; i < pg->nparams; i++) {
    const RtParam *p = &pg->params[i];
    t->unit_off[i] = n;
    if (rt_shampoo_preconditioned(p->ndim, p->shape))
      n += rt_shampoo_nblocks(p->shape[0], pg->block) * rt_shampoo_nblocks(p->shape[1], pg->block);
  }
  t->unit_owner = malloc((size_t)(n > 0 ? n : 1) * sizeof *t->unit_owner);
  if (!t->unit_owner)
    fail(t, "out of memory for the Shampoo units' owners");
  for (int64_t k = 0; k < n; k++)
    t->unit_owner[k] = -1;
  for (int u = 0; u < pg->nunits; u++) {
    const RtOptUnit *un = &pg->units[u];
    if (un->param < 0 || un->param >= pg->nparams)
      fail(t, "internal: a Shampoo unit of no parameter");
    const RtParam *p = &pg->params[un->param];
    if (!rt_shampoo_preconditioned(p->ndim, p->shape))
      continue; /* the grafting method's whole tensor: no roots */
    int64_t nbr = rt_shampoo_nblocks(p->shape[0], pg->block);
    int64_t nbc = rt_shampoo_nblocks(p->shape[1], pg->block);
    if (un->bi < 0 || un->bi >= nbr || un->bj < 0 || un->bj >= nbc)
      fail(t, "internal: a Shampoo unit outside its parameter's blocks");
    t->unit_owner[t->unit_off[un->param] + un->bi * nbc + un->bj] = un->owner;
  }
}

/* Shampoo's roots are recomputed from the factors as the steps before left
 * them, so any time between the end of the previous step's update and this
 * step's directions will do: while a pipeline receive waits (rt_pipe_recv:
 * the schedule's bubbles), and what is left at the start of the optimizer.
 * Every block's at the 0-based step start; then, staggered (root_phase),
 * a block's at the steps s with (s - start) % every = its phase, else
 * every block's at start + k·every.  roots_begin marks a step's roots due;
 * roots_one computes the next due block's of this rank (under placement its
 * data rank's units, else every block of its parameters), 0 when none is
 * left. */
static void roots_begin(Trainer *t, long s) {
  const RtProgram *pg = t->pg;
#ifdef RT_ROOT_WORKER
  RootWorker *w = root_worker_lock(t, s);
#endif
  long o = s - pg->start_preconditioning;
  t->roots_due = pg->opt == RT_OPT_SHAMPOO && o >= 0 &&
                 (o == 0 || pg->root_phase || o % pg->precondition_every == 0);
  t->roots_phase = o > 0 && pg->root_phase ? (int)(o % pg->precondition_every) : -1;
  t->roots_step = s;
  t->rc_i = 0;
  t->rc_bi = t->rc_bj = t->rc_base = 0;
  if (t->roots_due && pg->nunits && !t->unit_owner)
    unit_owners(t);
#ifdef RT_TRAIN_CUDA
  if (t->roots_due)
    cu_roots_start(t);
#endif
#ifdef RT_ROOT_WORKER
  if (w) {
    w->gen++;
    w->open = t->roots_due;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
  }
#endif
}

static int roots_next(Trainer *t, RootJob *j) {
  const RtProgram *pg = t->pg;
  if (!t->roots_due)
    return 0;
  int me = coord(t, RT_AX_DATA);
  /* from where the previous call stopped (roots_begin starts the walk) */
  for (; t->rc_i < pg->nparams; t->rc_i++, t->rc_bi = t->rc_bj = 0) {
    const int i = t->rc_i;
    const RtParam *p = &pg->params[i];
    if (p->grad < 0 || !rt_shampoo_preconditioned(p->ndim, p->shape))
      continue;
    int64_t nbr = rt_shampoo_nblocks(p->shape[0], pg->block);
    int64_t nbc = rt_shampoo_nblocks(p->shape[1], pg->block);
    /* root_phase lists the full tensor's blocks: under tp this shard's are
     * found in the full grid as its checkpointed state is (global_block) */
    int64_t gr = p->shape[0], gc = p->shape[1];
#ifdef RT_TRAIN_MPI
    const RtShard *sh = NULL;
    int sc[2] = {0, 0};
    for (int g = 0; pg->shards && g < pg->nglobal; g++)
      if (local_of(pg, g) == i && pg->shards[g].nsplit > 0) {
        sh = &pg->shards[g];
        gr = pg->global[g].shape[0], gc = pg->global[g].shape[1];
        split_coords(sh, t->mesh, sc);
      }
#endif
    int64_t gnbc = rt_shampoo_nblocks(gc, pg->block);
    size_t za, zz, zs; /* ZeRO: the owner's (its chunk holds the tensor) */
    const int skip = pg->zero >= 1 &&
                     !zero_range(t, i, (size_t)coord(t, (RtAxis)pg->zaxis), &za, &zz, &zs);
    for (; t->rc_bi < nbr && !skip; t->rc_bi++, t->rc_bj = 0)
      for (; t->rc_bj < nbc; t->rc_bj++) {
        const int64_t bi = t->rc_bi, bj = t->rc_bj;
        int64_t gi = bi, gj = bj;
#ifdef RT_TRAIN_MPI
        if (sh) {
          gi = global_block(sh, sc, 0, p->shape[0], pg->block, bi);
          gj = global_block(sh, sc, 1, p->shape[1], pg->block, bj);
        }
#endif
        int64_t b = t->rc_base + gi * gnbc + gj;
        if (pg->root_phase && b >= pg->nroot_phase)
          fail(t, "internal: more Shampoo blocks than root phases");
        int phase = pg->root_phase ? pg->root_phase[b] : -1;
        if (t->roots_phase >= 0 && phase != t->roots_phase)
          continue;
        /* placed: this data rank's units only */
        if (pg->nunits && t->unit_owner[t->unit_off[i] + bi * nbc + bj] != me)
          continue;
        *j = (RootJob){i, bi, bj, gi, gj, gnbc};
        t->rc_bj++; /* the next call goes on after this block */
        return 1;
      }
    t->rc_base += rt_shampoo_nblocks(gr, pg->block) * gnbc;
  }
  t->roots_due = 0;
  return 0;
}

/* Job j's roots, on the main thread (its workspace); a failure stops the
 * run naming the tensor, the block (its checkpoint name's) and the step. */
static void roots_run(Trainer *t, const RootJob *j) {
  const RtParam *p = &t->pg->params[j->i];
#ifdef RT_TRAIN_MPI
  t->roots_main++;
#endif
  RtShampooArgs a = blocked_args(t, 1, 0, 1);
  int rc = unit_roots(t, p, j->bi, j->bj, &a);
  if (rc != RT_OK) {
    const long long b = (long long)(j->gi * j->gnbc + j->gj);
    char msg[4096];
    snprintf(msg, sizeof msg, "step %ld: shampoo: '%s', block %lld (row %lld, column "
             "%lld; checkpoint tensors optimizer.%s.shampoo.*.%lld), %s",
             t->roots_step + 1, p->name, b, (long long)j->gi, (long long)j->gj, p->name, b,
             rt_last_error());
    fail(t, msg);
  }
}

static int roots_one(Trainer *t) {
  RootJob j;
  if (!roots_next(t, &j))
    return 0;
  roots_run(t, &j);
  return 1;
}

#ifdef RT_ROOT_WORKER
/* The root worker, a pipeline rank's (the program plans its scratch:
 * pg->root_work_bytes).  A thread of the rank computes the step's due
 * roots from the step's start, at idle priority (SCHED_IDLE): it runs
 * only where the rank's main thread leaves a core idle, above all while a
 * pipeline receive waits (pipe_recv then polls and sleeps), and it never
 * holds the main thread back: at the optimizer step the main thread takes
 * over what is left (roots_finish), the worker's block in progress
 * included, whose result is then dropped.  The walk (roots_next) is
 * shared under the lock; the worker copies a block's factors into its
 * scratch when it claims the block and writes the roots back only if the
 * block is still its own, both under the lock, so the main thread never
 * races it on the state.  The roots are the main thread's numbers (the
 * same function on the same factors).  Where idle priority is refused the
 * worker runs at the main thread's; SHARDC_ROOT_WORKER=0 turns it off
 * (the roots then on the main thread, between the blocks' probes of a
 * waiting receive, as without a plan for the worker). */

static void *root_worker(void *arg) {
  Trainer *t = arg;
  RootWorker *w = t->rw;
  const RtProgram *pg = t->pg;
#ifdef __linux__
  struct sched_param sp = {0};
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
#endif
  RtShampooArgs a = blocked_args(t, 1, 0, 1);
  const int64_t k = a.work_k;
  a.work_elems = 0; /* the scratch: the factors' and roots' copies, then one root's work */
  float *Lc = (float *)w->scratch, *Rc = Lc + k * k, *Lr = Rc + k * k, *Rr = Lr + k * k;
  unsigned char *work = w->scratch + rt_optim_align64(16 * k * k);
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->quit && !w->open)
      pthread_cond_wait(&w->cv, &w->mu);
    if (w->quit)
      break;
    RootJob j;
    if (!roots_next(t, &j)) {
      w->open = 0;
      pthread_cond_broadcast(&w->cv);
      continue;
    }
    int64_t r, c;
    float *L = (float *)(t->arena + block_factors(t, &pg->params[j.i], j.bi, j.bj, &r, &c));
    memcpy(Lc, L, (size_t)(r * r) * sizeof *L);
    memcpy(Rc, L + r * r, (size_t)(c * c) * sizeof *L);
    const long g = w->gen;
    w->busy = 1;
    w->job = j;
    w->job_gen = g;
    pthread_mutex_unlock(&w->mu);
    if (w->test == 2) {
      struct timespec nap = {w->nap_ms / 1000, w->nap_ms % 1000 * 1000000};
      nanosleep(&nap, NULL);
    }
    int rc = rt_shampoo_roots_f32(Lc, Rc, Lr, Rr, r, c, work, &a);
    pthread_mutex_lock(&w->mu);
    w->busy = 0;
    pthread_cond_broadcast(&w->cv); /* SHARDC_TEST_ROOTS=wait's optimizer */
    if (g != w->gen || w->taken == g)
      continue; /* taken over: the main thread computed it */
    if (rc != RT_OK) {
      w->failed = 1;
      w->bad = j;
      w->open = 0;
      continue;
    }
    float *roots = L + r * r + c * c; /* L^-1/4, then R^-1/4 */
    memcpy(roots, Lr, (size_t)(r * r) * sizeof *L);
    memcpy(roots + r * r, Rr, (size_t)(c * c) * sizeof *L);
    t->roots_worker++;
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* roots_begin's: the worker, started at the first step with roots due,
 * locked (NULL: none, the roots on this thread). */
static RootWorker *root_worker_lock(Trainer *t, long step) {
  const RtProgram *pg = t->pg;
  if (!t->rw) {
    long o = step - pg->start_preconditioning;
    const char *off = getenv("SHARDC_ROOT_WORKER");
    if (pg->opt != RT_OPT_SHAMPOO || pg->root_work_bytes <= 0 || pg->f64 || o < 0 ||
        !t->mpi_funneled || (off && !strcmp(off, "0")))
      return NULL;
    RootWorker *w = calloc(1, sizeof *w);
    if (!w)
      fail(t, "out of memory for Shampoo's root worker");
    w->scratch = t->arena + pg->root_work_offset;
    w->taken = -1;
    const char *test = getenv("SHARDC_TEST_ROOTS");
    w->nap_ms = test_roots_starve_ms();
    w->test = w->nap_ms ? 2 : test && !strcmp(test, "wait") ? 1 : 0;
    if (pthread_mutex_init(&w->mu, NULL) || pthread_cond_init(&w->cv, NULL))
      fail(t, "cannot create the lock of Shampoo's root worker");
    t->rw = w;
    int e = pthread_create(&w->th, NULL, root_worker, t);
    if (e) {
      t->rw = NULL;
      free(w);
      fprintf(stderr, "train: warning: rank %d: no thread for Shampoo's roots (%s): they run "
                      "on the main thread\n", t->rank, strerror(e));
      return NULL;
    }
  }
  pthread_mutex_lock(&t->rw->mu);
  return t->rw;
}

/* The worker has a block to compute this step, or one in progress. */
static int root_worker_has_work(Trainer *t) {
  RootWorker *w = t->rw;
  pthread_mutex_lock(&w->mu);
  int r = w->open || (w->busy && w->job_gen == w->gen && w->taken != w->gen);
  pthread_mutex_unlock(&w->mu);
  return r;
}

/* Stops the worker: 0 when it ended (joined), 1 when it is still in a
 * block (taken over, its result to be dropped): detached then, the caller
 * keeping what it uses (finish). */
static int root_worker_stop(Trainer *t) {
  RootWorker *w = t->rw;
  if (!w)
    return 0;
  pthread_mutex_lock(&w->mu);
  w->quit = 1;
  pthread_cond_broadcast(&w->cv);
  const int busy = w->busy;
  pthread_mutex_unlock(&w->mu);
  t->rw = NULL;
  if (busy) {
    pthread_detach(w->th);
    return 1;
  }
  pthread_join(w->th, NULL); /* waiting for its lock, it ends at once */
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
  return 0;
}

/* The run's line on its roots (a pipeline's Shampoo, every rank): how many
 * the workers computed in idle time, how many the main threads. */
static void roots_report(Trainer *t, int say) {
  const RtProgram *pg = t->pg;
  if (pg->opt != RT_OPT_SHAMPOO || pg->root_work_bytes <= 0)
    return;
  long mine[2] = {0, t->roots_main}, all[2] = {0, 0};
  if (t->rw) {
    pthread_mutex_lock(&t->rw->mu);
    mine[0] = t->roots_worker;
    pthread_mutex_unlock(&t->rw->mu);
  }
  MPI_OK(MPI_Reduce(mine, all, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
  if (say && all[0] + all[1] > 0)
    printf("roots:    Shampoo's roots of %ld blocks over the run: %ld (%.0f%%) by the ranks' root "
           "workers in idle time, %ld by their main threads\n",
           all[0] + all[1], all[0], 100.0 * (double)all[0] / (double)(all[0] + all[1]), all[1]);
}
#endif

#ifdef RT_TRAIN_CUDA
/* root = eigh on a GPU rank: its roots are LAPACK's on the host (unit_roots),
 * and a step's due roots read the factors as the steps before left them, so
 * they are known at the step's start: roots_begin downloads the due blocks'
 * factors into the host mirror and host threads compute their roots there
 * while the GPU runs the step's forward and backward; the optimizer step
 * (roots_finish) computes what no thread has claimed itself, waits for the
 * threads and uploads the roots.  The same function on the same factors:
 * the synchronous path's numbers (SHARDC_ROOT_WORKER=0 turns the threads
 * off).  SHARDC_ROOT_THREADS threads (default 1: each LAPACK call runs on
 * OpenBLAS's threads of the rank), each with an fp64 workspace in host
 * memory, outside the device arena's plan.  No thread makes a CUDA or MPI
 * call. */
#define CU_ROOTS_MAX 16
struct CuRoots {
  Trainer *t;
  pthread_t th[CU_ROOTS_MAX];
  int nth, started, quit;
  pthread_mutex_t mu;
  pthread_cond_t cv, done;
  RootJob *job;
  int *rc;
  int njob, cap, next, left; /* the step's jobs, the next to claim, those not done */
  long by_threads, by_main;  /* over the run */
  long nap_ms;               /* tests (SHARDC_TEST_ROOTS=starve[:MS]): a thread sleeps MS ms
                              * (default 30) before each claim, so the optimizer step
                              * claims jobs too and waits for those in progress */
  unsigned char *work[CU_ROOTS_MAX];
  RtShampooArgs a;           /* work_elems 0: a root's fp64 and integer parts only */
};

/* Job j's two roots from the host mirror's factors of its block, into the
 * mirror's roots of it, with workspace w. */
static int cu_roots_job(Trainer *t, const RootJob *j, unsigned char *w, const RtShampooArgs *a) {
  int64_t r, c;
  float *L = (float *)(t->arena + block_factors(t, &t->pg->params[j->i], j->bi, j->bj, &r, &c));
  float *Rf = L + r * r, *Lr = Rf + c * c, *Rr = Lr + r * r;
  return rt_shampoo_roots_f32(L, Rf, Lr, Rr, r, c, w, a);
}

/* Job j's block in the arena: the byte offset of its factors (L, R), and
 * their bytes (the roots L^-1/4, R^-1/4 follow, as many). */
static size_t cu_roots_span(const Trainer *t, const RootJob *j, size_t *bytes) {
  int64_t r, c;
  const size_t off = block_factors(t, &t->pg->params[j->i], j->bi, j->bj, &r, &c);
  *bytes = 4 * (size_t)(r * r + c * c);
  return off;
}

static void *cu_roots_thread(void *arg) {
  CuRoots *c = arg;
  pthread_mutex_lock(&c->mu);
  const int me = c->started++;
  for (;;) {
    while (!c->quit && c->next >= c->njob)
      pthread_cond_wait(&c->cv, &c->mu);
    if (c->quit)
      break;
    if (c->nap_ms) {
      pthread_mutex_unlock(&c->mu);
      struct timespec nap = {c->nap_ms / 1000, c->nap_ms % 1000 * 1000000};
      nanosleep(&nap, NULL);
      pthread_mutex_lock(&c->mu);
      if (c->quit)
        break;
      if (c->next >= c->njob)
        continue;
    }
    const int k = c->next++;
    pthread_mutex_unlock(&c->mu);
    const int rc = cu_roots_job(c->t, &c->job[k], c->work[me], &c->a);
    pthread_mutex_lock(&c->mu);
    c->rc[k] = rc;
    c->by_threads++;
    if (--c->left == 0)
      pthread_cond_broadcast(&c->done);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* The threads, started at the first step with roots due (NULL: none, the
 * roots on the main thread as they come, unit_roots). */
static CuRoots *cu_roots_get(Trainer *t) {
  const RtProgram *pg = t->pg;
  if (t->cr)
    return t->cr->nth ? t->cr : NULL;
  CuRoots *c = calloc(1, sizeof *c);
  if (!c)
    fail(t, "out of memory for Shampoo's root threads");
  t->cr = c;
  c->t = t;
  const char *off = getenv("SHARDC_ROOT_WORKER"), *nt = getenv("SHARDC_ROOT_THREADS");
  if (pg->opt != RT_OPT_SHAMPOO || pg->root != RT_ROOT_EIGH || pg->f64 ||
      (off && !strcmp(off, "0")))
    return NULL;
  int want = 1;
  if (nt && *nt) {
    char *end;
    long v = strtol(nt, &end, 10);
    if (*end || v < 1 || v > CU_ROOTS_MAX) {
      char msg[160];
      snprintf(msg, sizeof msg, "SHARDC_ROOT_THREADS must be a number of threads from 1 to %d, "
                                "got '%s'", CU_ROOTS_MAX, nt);
      fail(t, msg);
    }
    want = (int)v;
  }
  c->nap_ms = test_roots_starve_ms();
  c->a = blocked_args(t, 1, 0, 1);
  c->a.work_elems = 0;
  int64_t dbl, ints;
  const size_t wb = (size_t)rt_shampoo_work(0, c->a.work_k, 4, &dbl, &ints);
  if (pthread_mutex_init(&c->mu, NULL) || pthread_cond_init(&c->cv, NULL) ||
      pthread_cond_init(&c->done, NULL))
    fail(t, "cannot create the lock of Shampoo's root threads");
  const char *why = NULL;
  char buf[160];
  for (int k = 0; k < want && !why; k++) {
    c->work[k] = aligned_alloc(64, rt_optim_align64((int64_t)wb));
    int e = c->work[k] ? pthread_create(&c->th[k], NULL, cu_roots_thread, c) : ENOMEM;
    if (e) {
      free(c->work[k]);
      c->work[k] = NULL;
      snprintf(buf, sizeof buf, "%s", strerror(e));
      why = buf;
    } else
      c->nth++;
  }
  if (why && t->rank == 0)
    fprintf(stderr, "train: warning: %d of %d threads for Shampoo's roots (%s)%s\n", c->nth,
            want, why, c->nth ? "" : ": they run on the main thread at the optimizer step");
  return c->nth ? c : NULL;
}

/* roots_begin's: every due block of the step (roots_next's walk, which it
 * ends) downloaded and handed to the threads; 0 when there are none. */
static int cu_roots_start(Trainer *t) {
  CuRoots *c = cu_roots_get(t);
  if (!c)
    return 0;
  RootJob j;
  int n = 0;
  /* the threads are idle (the last step's roots_finish waited for them) */
  while (roots_next(t, &j)) {
    if (n == c->cap) {
      int cap = c->cap ? 2 * c->cap : 64;
      RootJob *nj = realloc(c->job, sizeof *nj * (size_t)cap);
      int *nr = nj ? realloc(c->rc, sizeof *nr * (size_t)cap) : NULL;
      if (nj)
        c->job = nj;
      if (!nr)
        fail(t, "out of memory for the list of Shampoo's roots");
      c->rc = nr;
      c->cap = cap;
    }
    c->job[n++] = j;
  }
  for (int k = 0; k < n; k++) { /* the factors as the last step left them */
    size_t fb, off = cu_roots_span(t, &c->job[k], &fb);
    rtc_to_host(t->arena + off, t->dev + off, fb);
  }
  pthread_mutex_lock(&c->mu);
  c->njob = c->left = n;
  c->next = 0;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return 1;
}

/* roots_finish's: the jobs no thread claimed, on this thread; then every
 * job's roots uploaded (a failed one computed again by roots_run, which
 * stops the run saying why). */
static void cu_roots_finish(Trainer *t) {
  CuRoots *c = t->cr;
  if (!c || !c->nth)
    return;
  unsigned char *w = t->arena + t->pg->opt_work_offset; /* the host mirror's workspace */
  pthread_mutex_lock(&c->mu);
  while (c->next < c->njob) {
    const int k = c->next++;
    pthread_mutex_unlock(&c->mu);
    const int rc = cu_roots_job(t, &c->job[k], w, &c->a);
    pthread_mutex_lock(&c->mu);
    c->rc[k] = rc;
    c->by_main++;
    c->left--;
  }
  while (c->left)
    pthread_cond_wait(&c->done, &c->mu);
  const int n = c->njob;
  c->njob = c->next = 0;
  pthread_mutex_unlock(&c->mu);
  for (int k = 0; k < n; k++) {
    if (c->rc[k] != RT_OK) {
      roots_run(t, &c->job[k]);
      continue;
    }
    size_t fb, off = cu_roots_span(t, &c->job[k], &fb);
    rtc_to_device(t->dev + off + fb, t->arena + off + fb, fb);
  }
}

/* Ends the threads (each finishes its root in progress) and frees them. */
static void cu_roots_stop(Trainer *t) {
  CuRoots *c = t->cr;
  if (!c)
    return;
  t->cr = NULL;
  if (c->nth) {
    pthread_mutex_lock(&c->mu);
    c->quit = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    for (int k = 0; k < c->nth; k++)
      pthread_join(c->th[k], NULL);
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
  }
  for (int k = 0; k < CU_ROOTS_MAX; k++)
    free(c->work[k]);
  free(c->job);
  free(c->rc);
  free(c);
}

/* The run's line on root = eigh's roots: how many the host threads
 * computed beside the GPU, how many the optimizer steps (every rank). */
static void cu_roots_report(Trainer *t, int say) {
  CuRoots *c = t->cr;
  if (t->pg->opt != RT_OPT_SHAMPOO || t->pg->root != RT_ROOT_EIGH || t->pg->f64)
    return; /* (the same on every rank) */
  long mine[2] = {c ? c->by_threads : 0, c ? c->by_main : 0}, all[2] = {mine[0], mine[1]};
#ifdef RT_TRAIN_MPI
  if (t->mesh)
    MPI_OK(MPI_Reduce(mine, all, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
#endif
  if (say && c && c->nth && all[0] + all[1] > 0)
    printf("roots:    Shampoo's eigh roots of %ld blocks over the run: %ld (%.0f%%) by host "
           "threads beside the GPU's forward and backward, %ld at the optimizer steps\n",
           all[0] + all[1], all[0], 100.0 * (double)all[0] / (double)(all[0] + all[1]), all[1]);
}
#endif

/* The optimizer's: every due root computed before the directions.  With
 * the worker, the main thread takes over: the worker's block in progress
 * (or one that failed) and the rest of the walk. */
static void roots_finish(Trainer *t) {
#ifdef RT_ROOT_WORKER
  RootWorker *w = t->rw;
  if (w) {
    RootJob j[2];
    int n = 0;
    pthread_mutex_lock(&w->mu);
    while (w->test == 1 && (w->open || w->busy))
      pthread_cond_wait(&w->cv, &w->mu);
    w->open = 0;
    w->taken = w->gen;
    if (w->busy && w->job_gen == w->gen)
      j[n++] = w->job;
    if (w->failed)
      j[n++] = w->bad;
    w->failed = 0;
    pthread_mutex_unlock(&w->mu);
    for (int k = 0; k < n; k++)
      roots_run(t, &j[k]);
  }
#endif
#ifdef RT_TRAIN_CUDA
  cu_roots_finish(t);
#endif
  while (roots_one(t))
    ;
}

/* Shampoo or Adafactor on every parameter with a gradient, at 1-based step
 * `step` (docs/language.md; the state layout is rt_optim.h's). */
static void blocked_step(Trainer *t, long step, double lr, double grad_scale) {
  const RtProgram *pg = t->pg;
  unsigned char *A = t->dev;
  RtShampooArgs a = blocked_args(t, step, lr, grad_scale);
  roots_finish(t);
  for (int i = 0; i < pg->nparams; i++) {
    const RtParam *p = &pg->params[i];
    if (p->grad < 0)
      continue;
    a.weight_decay = p->decay ? pg->weight_decay : 0.0;
    int rc = RT_OK;
    const RtAfSplit *sp = pg->afsplit ? &pg->afsplit[i] : NULL;
    if (sp && sp->q >= 0) { /* split over tp: phase 3, after af_phase's (f32: a mesh program) */
      const float *st = (const float *)(A + pg->afstats);
      BLOCKED(rt_adafactor_finish)((float *)(A + p->offset), (const float *)(A + p->grad),
                                   (float *)(A + p->opt), p->ndim, p->shape,
                                   st + (sp->x >= 0 ? sp->x : 0), sp->rows, AF_Q(st + sp->q),
                                   sp->numel, &a);
    } else if (pg->opt == RT_OPT_ADAFACTOR && pg->f64)
      rt_adafactor_step_f64((double *)(A + p->offset), (double *)(A + p->grad),
                            (double *)(A + p->opt), p->ndim, p->shape, &a);
    else if (pg->opt == RT_OPT_ADAFACTOR)
      BLOCKED(rt_adafactor_step)((float *)(A + p->offset), (float *)(A + p->grad),
                                 (float *)(A + p->opt), p->ndim, p->shape, &a);
    else if (pg->f64)
      rc = rt_shampoo_step_f64((double *)(A + p->offset), (double *)(A + p->grad),
                               (double *)(A + p->opt), A + pg->opt_work_offset, p->ndim, p->shape,
                               &a);
    else
      rc = BLOCKED(rt_shampoo_step)((float *)(A + p->offset), (float *)(A + p->grad),
                                    (float *)(A + p->opt), A + pg->opt_work_offset, p->ndim,
                                    p->shape, &a);
    if (rc != RT_OK)
      fail(t, rt_last_error());
  }
}

/* ZeRO with Shampoo or Adafactor (RT_UPDATE_ZERO): the tensors this rank
 * owns, each whole in its chunks (passes/zero.c owner_layout), from its
 * gradient shard, with their state at their opt offsets; ZeRO's own
 * parameter all-gather (ZeRO-3: before each use) carries the result to the
 * other ranks. */
static void zero_blocked_step(Trainer *t, long step, double lr, double grad_scale) {
  const RtProgram *pg = t->pg;
  unsigned char *A = t->dev;
  const size_t es = (size_t)t->es, r = (size_t)coord(t, (RtAxis)pg->zaxis);
  RtShampooArgs a = blocked_args(t, step, lr, grad_scale);
  roots_finish(t);
  for (int i = 0; i < pg->nparams; i++) {
    const RtParam *p = &pg->params[i];
    size_t lo, hi, s;
    if (!zero_range(t, i, r, &lo, &hi, &s))
      continue;
    if (hi - lo != p->numel || p->opt < 0)
      fail(t, "internal: a ZeRO chunk holds part of a Shampoo or Adafactor tensor");
    unsigned char *w = A + (pg->pshard ? s : lo) * es, *g = A + pg->gshard_offset + s * es;
    a.weight_decay = p->decay ? pg->weight_decay : 0.0;
    int rc = RT_OK;
    const RtAfSplit *sp = pg->afsplit ? &pg->afsplit[i] : NULL;
    if (sp && sp->q >= 0) { /* split over tp: phase 3, after af_phase's */
      const float *st = (const float *)(A + pg->afstats);
      BLOCKED(rt_adafactor_finish)((float *)w, (const float *)g, (float *)(A + p->opt), p->ndim,
                                   p->shape, st + (sp->x >= 0 ? sp->x : 0), sp->rows,
                                   AF_Q(st + sp->q), sp->numel, &a);
    } else if (pg->opt == RT_OPT_ADAFACTOR && pg->f64)
      rt_adafactor_step_f64((double *)w, (double *)g, (double *)(A + p->opt), p->ndim, p->shape, &a);
    else if (pg->opt == RT_OPT_ADAFACTOR)
      BLOCKED(rt_adafactor_step)((float *)w, (float *)g, (float *)(A + p->opt), p->ndim, p->shape,
                                 &a);
    else if (pg->f64)
      rc = rt_shampoo_step_f64((double *)w, (double *)g, (double *)(A + p->opt),
                               A + pg->opt_work_offset, p->ndim, p->shape, &a);
    else
      rc = BLOCKED(rt_shampoo_step)((float *)w, (float *)g, (float *)(A + p->opt),
                                    A + pg->opt_work_offset, p->ndim, p->shape, &a);
    if (rc != RT_OK)
      fail(t, rt_last_error());
  }
}

/* Adafactor under tp (RT_UPDATE_AF_SUMS, RT_UPDATE_AF_SQUARES): phase 1 scales
 * every gradient (blocked_step then runs with scale 1) and writes the
 * partial sums of the split tensors into the statistics buffer; phase 2,
 * after their all-reduces, updates their accumulators and writes their
 * partial sums of squares.  Under ZeRO the tensors this rank owns, from its
 * gradient shard; zeros for the others.  f32 only (a mesh program is
 * never f64). */
static void af_phase(Trainer *t, int mode, long step, double grad_scale) {
  const RtProgram *pg = t->pg;
  unsigned char *A = t->dev;
  RtShampooArgs a = blocked_args(t, step, 0, 1);
  float *st = (float *)(A + pg->afstats);
  if (pg->f64)
    fail(t, "internal: Adafactor's tp statistics in an f64 program");
  const size_t r = pg->zero >= 1 ? (size_t)coord(t, (RtAxis)pg->zaxis) : 0;
  for (int i = 0; i < pg->nparams; i++) {
    const RtParam *p = &pg->params[i];
    const RtAfSplit *sp = &pg->afsplit[i];
    if (p->grad < 0)
      continue;
    float *g = (float *)(A + p->grad), *o = (float *)(A + p->opt);
    float *S = sp->s >= 0 ? st + sp->s : NULL, *T = sp->t >= 0 ? st + sp->t : NULL;
    float *X = st + (sp->x >= 0 ? sp->x : 0);
    size_t lo, hi, s;
    if (pg->zero >= 1 && !zero_range(t, i, r, &lo, &hi, &s)) {
      /* ZeRO: another data rank owns it (and so do this tp group's ranks):
       * zeros in its entries of the all-reduces */
      if (sp->q >= 0 && mode == RT_UPDATE_AF_SUMS) {
        if (S)
          AF_ZERO(S, (size_t)p->shape[0]);
        if (T)
          AF_ZERO(T, (size_t)p->shape[1]);
        if (sp->x >= 0)
          AF_ZERO(X, 1);
      } else if (sp->q >= 0)
        AF_ZERO(st + sp->q, 1);
      continue;
    }
    if (pg->zero >= 1) /* its whole reduced gradient in this rank's shard */
      g = (float *)(A + pg->gshard_offset) + s;
    if (mode == RT_UPDATE_AF_SUMS)
      BLOCKED(rt_opt_scale_grad)(g, p->numel, grad_scale);
    if (sp->q < 0)
      continue;
    if (mode == RT_UPDATE_AF_SUMS)
      BLOCKED(rt_adafactor_sums)(g, o, p->ndim, p->shape, S, T, X, sp->rep, sp->cols, &a);
    else
      BLOCKED(rt_adafactor_squares)(g, o, p->ndim, p->shape, S, T, X, sp->rows, sp->cols,
                                    st + sp->q, &a);
  }
}

/* Shampoo placed over the data ranks (RT_UPDATE_PLACED): the units this
 * rank's data coordinate owns, their directions into its segment of the
 * direction buffer at `dir` (RT_STEP_OPT_GATHER's offset).  f32 only (a
 * mesh program is never f64). */
static void placed_step(Trainer *t, long step, double lr, double grad_scale, int64_t dir) {
  const RtProgram *pg = t->pg;
  unsigned char *A = t->dev;
  RtShampooArgs a = blocked_args(t, step, lr, grad_scale);
  int me = coord(t, RT_AX_DATA);
  roots_finish(t);
#ifdef RT_TRAIN_CUDA
  /* the device: one launch a tensor */
  for (int i = 0; i < pg->nparams; i++)
    if (pg->params[i].grad >= 0)
      BLOCKED(rt_opt_scale_grad)((float *)(A + pg->params[i].grad), pg->params[i].numel,
                                 grad_scale);
#endif
  float *seg = (float *)(A + dir) + (size_t)me * (size_t)pg->useg;
  for (int k = 0; k < pg->nunits; k++) {
    const RtOptUnit *u = &pg->units[k];
    const RtParam *p = &pg->params[u->param];
    if (u->owner != me)
      continue;
#ifndef RT_TRAIN_CUDA
    /* the host: only the unit's gradient elements are read, so only those
     * are scaled (a pass over the other ranks' units would be wasted) */
    int64_t r, c, C;
    float *g0 = (float *)(A + p->grad) +
                rt_shampoo_unit_span(p->ndim, p->shape, pg->block, u->bi, u->bj, &r, &c, &C);
    for (int64_t i = 0; i < r; i++)
      BLOCKED(rt_opt_scale_grad)(g0 + (size_t)(i * C), (size_t)c, grad_scale);
#endif
    int rc = BLOCKED(rt_shampoo_unit)((const float *)(A + p->grad), (float *)(A + p->opt),
                                      A + pg->opt_work_offset, p->ndim, p->shape, u->bi, u->bj,
                                      seg + u->pos, &a);
    if (rc != RT_OK)
      fail(t, rt_last_error());
  }
}

/* RT_STEP_OPT_APPLY: every unit's direction from the gathered buffer. */
static void placed_apply(Trainer *t, double lr, int64_t dir) {
  const RtProgram *pg = t->pg;
  unsigned char *A = t->dev;
  RtShampooArgs a = {.lr = lr, .block = pg->block};
  for (int k = 0; k < pg->nunits; k++) {
    const RtOptUnit *u = &pg->units[k];
    const RtParam *p = &pg->params[u->param];
    a.weight_decay = p->decay ? pg->weight_decay : 0.0;
    const float *d = (const float *)(A + dir) + (size_t)u->owner * (size_t)pg->useg + u->pos;
    BLOCKED(rt_shampoo_apply)((float *)(A + p->offset), d, p->ndim, p->shape, u->bi, u->bj, &a);
  }
}

/* AdamW (torch.optim.AdamW) or SGD (torch.optim.SGD) at 1-based step
 * `step`; decoupled weight decay only where the table says so; grad_scale
 * folds in clipping and the 1/dp mean. */
static void optimizer_step(Trainer *t, const RtStepOp *op, long step, double lr,
                           double grad_scale) {
  const RtProgram *pg = t->pg;
  unsigned char *A = t->dev;
  const size_t es = (size_t)t->es;
  if (op->mode == RT_UPDATE_AF_SUMS || op->mode == RT_UPDATE_AF_SQUARES) {
    af_phase(t, op->mode, step, grad_scale);
    return;
  }
  if (op->mode == RT_UPDATE_PARAMS && pg->opt >= RT_OPT_SHAMPOO) {
    /* under tp, Adafactor's first phase scaled the gradients */
    blocked_step(t, step, lr, pg->afsplit ? 1.0 : grad_scale);
    return;
  }
  if (op->mode == RT_UPDATE_PLACED) {
    int64_t dir = -1; /* the direction buffer: the gather that follows */
    for (int s = 0; s < pg->nstep; s++)
      if (pg->step[s].kind == RT_STEP_OPT_GATHER)
        dir = pg->step[s].off;
    if (dir < 0 || pg->f64)
      fail(t, "internal: a placed Shampoo step without its direction buffer");
    placed_step(t, step, lr, grad_scale, dir);
    return;
  }
#ifdef RT_TRAIN_CUDA
  /* the scalars from the device: a replayed graph takes each step's */
  rtc_opt_scalars_set(lr, pg->beta1, pg->beta2, pg->eps, step, grad_scale);
  rtc_opt_scalars_upload();
  if (op->mode == RT_UPDATE_PARAMS && pg->opt == RT_OPT_ADAMW && param_list(t)) {
    /* one launch over every tensor */
    RtcAdamwList l = {t->nlist, t->lp, t->lg, t->lm, t->lv, t->ln, t->lwd};
    rt_adamw_multi_dev_cu(&l);
    return;
  }
#endif
  if (op->mode == RT_UPDATE_PARAMS) {
    for (int i = 0; i < pg->nparams; i++) {
      const RtParam *p = &pg->params[i];
      if (p->grad < 0)
        continue;
      double wd = p->decay ? pg->weight_decay : 0.0;
      if (pg->opt == RT_OPT_ADAMW)
        adamw(t, A + p->offset, A + p->grad, A + p->opt, A + p->opt2, p->numel, lr, wd, step,
              grad_scale);
      else
        sgd(t, A + p->offset, A + p->grad, p->opt >= 0 ? A + p->opt : NULL, p->numel, lr, wd,
            grad_scale);
    }
    return;
  }
  if (op->mode != RT_UPDATE_ZERO)
    fail(t, "internal: unknown optimizer mode");
  if (pg->opt >= RT_OPT_SHAMPOO) {
    /* under tp, Adafactor's first phase scaled the gradients */
    zero_blocked_step(t, step, lr, pg->afsplit ? 1.0 : grad_scale);
    return;
  }
  /* ZeRO: this rank's chunk of every bucket, with its summed gradient shard
   * and its optimizer state; ZeRO-3 (and ZeRO-1/2 of a bf16 program:
   * pshard) stores only its chunks of the parameters, ZeRO-1/2 the whole
   * flat layout. */
  unsigned char *g = A + pg->gshard_offset, *m1 = A + pg->zopt_offset;
  unsigned char *m2 = m1 + (size_t)pg->zshard * es;
  const size_t r = (size_t)coord(t, (RtAxis)pg->zaxis);
  for (int i = 0; i < pg->nparams; i++) {
    size_t a, z, s;
    if (!zero_range(t, i, r, &a, &z, &s))
      continue;
    unsigned char *w = A + (pg->pshard ? s : a) * es;
    double wd = pg->params[i].decay ? pg->weight_decay : 0.0;
    if (pg->opt == RT_OPT_ADAMW)
      adamw(t, w, g + s * es, m1 + s * es, m2 + s * es, z - a, lr, wd, step, grad_scale);
    else
      sgd(t, w, g + s * es, opt_states(pg) ? m1 + s * es : NULL, z - a, lr, wd, grad_scale);
  }
}

/* Whether any rank says x (every rank learns it). */
static int any_rank(Trainer *t, int x) {
#ifdef RT_TRAIN_MPI
  if (t->world > 1)
    MPI_OK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
#endif
  (void)t;
  return x;
}

/* What a run stopped before its save leaves at --save: " (FILE keeps its
 * last good state)" where FILE exists (an earlier run's, or this run's
 * --save-every: a save never writes a non-finite value), " (nothing was
 * saved)" where it does not; "" without --save. */
static const char *save_left(const Trainer *t, char *buf, size_t cap) {
  const char *save = t->args.save;
  if (!save)
    return "";
  if (access(save, F_OK) == 0)
    snprintf(buf, cap, " (%s keeps its last good state)", save);
  else
    snprintf(buf, cap, " (nothing was saved)");
  return buf;
}

/* A loss above RT_DIVERGENCE_FACTOR times this run's first one (when that
 * is positive): warned about once; with --stop-on-divergence an error that
 * stops the run before this step's update, as a non-finite loss does.
 * Returns 1 to stop; every rank stops alike. */
static int diverging(Trainer *t, long step, double loss) {
  if (!t->have_first) {
    t->have_first = 1;
    t->first_loss = loss;
    t->first_step = step;
    return 0;
  }
  const int stop = t->args.stop_on_divergence;
  int over = t->first_loss > 0 && loss > RT_DIVERGENCE_FACTOR * t->first_loss;
  if (stop)
    over = any_rank(t, over); /* each rank's sum may round apart */
  if (!over || (t->warned && !stop))
    return 0;
  t->warned = 1;
  if (t->rank != 0)
    return stop;
  char what[160];
  snprintf(what, sizeof what, "step %ld: the loss %.6g is over %d times its first value (%.6g at "
           "step %ld)", step + 1, loss, RT_DIVERGENCE_FACTOR, t->first_loss, t->first_step + 1);
  fflush(stdout);
  if (isatty(fileno(stdout)) && isatty(fileno(stderr)))
    fputc('\n', stderr); /* past the progress line */
  char left[4200];
  if (stop)
    fprintf(stderr, "train: error: %s: training diverged; stopping without saving%s; lower "
                    "the learning rate\n", what, save_left(t, left, sizeof left));
  else
    fprintf(stderr, "train: warning: %s: training is diverging; lower the learning rate, or pass "
                    "--stop-on-divergence to stop such a run\n", what);
  return stop;
}

/* Which part of the step table run_step runs: all of it; or, for a step
 * captured as graphs, the device work before the optimizer (graph A), the
 * host's part once A ran (loss, norm, checks), the rest (graph B). */
enum { STEP_ALL, STEP_DEVICE, STEP_HOST, STEP_UPDATE };

/* Test hook (SHARDC_TEST_NAN_AFTER=N): after step N's update every rank's
 * first parameter holds NaN at its first element, as a diverged update
 * leaves it (the saves' and the NaN loss's checks: tests/codegen/
 * bad_input.sh, tests/cuda/programs.sh). */
static void poison_hook(Trainer *t, long step) {
  const char *h = getenv("SHARDC_TEST_NAN_AFTER");
  if (!h || !*h || atol(h) != step + 1 || !t->pg->nparams)
    return;
  size_t off = t->pg->params[0].offset;
  float f = NAN;
  double d = NAN;
  const void *v = t->es == 8 ? (const void *)&d : (const void *)&f;
#ifdef RT_TRAIN_CUDA
  rtc_to_device(t->dev + off, v, (size_t)t->es);
  rtc_sync();
#else
  memcpy(t->arena + off, v, (size_t)t->es);
#endif
}

/* The step table: reductions, loss, norm, then (at the optimizer, or at
 * the end) the finite check and the update.  Returns 0, or 1 after a
 * non-finite loss or norm (reported; every rank sees the same). */
static int run_step(Trainer *t, long step, double *loss, double *lr, double *gscale,
                    int part) {
  const RtProgram *pg = t->pg;
  double norm = 0;
  int checked = 0, after = 0; /* after: at or past the optimizer */
  for (int i = 0; i <= pg->nstep; i++) {
    const RtStepOp *op = i < pg->nstep ? &pg->step[i] : NULL;
    if (!op || op->kind == RT_STEP_OPTIMIZER)
      after = 1;
    if (part == STEP_DEVICE && after)
      break;
    if (!checked && after && part != STEP_UPDATE) {
      checked = 1;
      if (!isfinite(*loss) || !isfinite(norm)) {
        double x = isfinite(*loss) ? norm : *loss;
        char left[4200];
        if (t->rank == 0)
          fprintf(stderr,
                  "train: error: step %ld: the %s is %s; stopping without saving%s; "
                  "check the data, the learning rate and any checkpoint loaded\n",
                  step + 1, isfinite(*loss) ? "gradient norm" : "loss", isnan(x) ? "NaN" : "infinite",
                  save_left(t, left, sizeof left));
        return 1;
      }
      if (diverging(t, step, *loss))
        return 1;
      *lr = rt_train_lr(pg, step);
      /* clipping and the 1/dp mean */
      *gscale = rt_clip_scale(norm, pg->clip) / pg->dp;
    }
    if (part == STEP_HOST && after)
      break;
    if (!op)
      break;
    if ((part == STEP_UPDATE && !after) || (part == STEP_DEVICE && op->kind == RT_STEP_LOSS) ||
        (part == STEP_HOST && op->kind != RT_STEP_LOSS && op->kind != RT_STEP_NORM))
      continue;
    switch (op->kind) {
    case RT_STEP_WAIT:
#if defined(RT_TRAIN_CUDA) && defined(RT_TRAIN_MPI)
      rtc_bucket_wait();
#elif defined(RT_TRAIN_MPI)
      if (t->mesh)
        rt_waitall(t->mesh, pg->nreq, t->reqs);
#endif
      break;
    case RT_STEP_ALLREDUCE:
#ifdef RT_TRAIN_MPI
#ifdef RT_TRAIN_CUDA
      if (t->mesh)
        rtc_allreduce(t->mesh, (RtAxis)op->axis, (float *)(t->dev + op->off), (size_t)op->count);
#else
      if (t->mesh)
        rt_allreduce(t->mesh, (RtAxis)op->axis, t->arena + op->off, (size_t)op->count, t->es);
#endif
#endif
      break;
    case RT_STEP_LOSS: {
      int mine = op->mode == RT_LOSS_SUM ||
                 (pg->rank == pg->pp - 1 && coord(t, RT_AX_TP) == 0);
      *loss = sum_over(t, op->axis, mine ? *loss : 0.0) / op->div;
      break;
    }
    case RT_STEP_NORM:
#ifdef RT_TRAIN_CUDA
      if (part == STEP_DEVICE) {
        norm_terms(t, op);
        break;
      }
      if (part == STEP_HOST) {
        norm = norm_finish(t, op) / pg->dp;
        break;
      }
#endif
      norm = grad_norm(t, op) / pg->dp;
      break;
    case RT_STEP_OPTIMIZER:
      optimizer_step(t, op, step + 1, *lr, *gscale);
      break;
    case RT_STEP_ALLGATHER: {
#ifdef RT_TRAIN_MPI
      const RtBucket *b = &pg->buckets[op->count];
      const size_t r = (size_t)coord(t, (RtAxis)op->axis), es = (size_t)t->es;
#ifdef RT_TRAIN_CUDA
      if (t->mesh)
        rtc_allgather_dim(t->mesh, (RtAxis)op->axis, (float *)(t->dev + (size_t)b->flat * es),
                          (float *)(t->dev + ((size_t)b->flat + r * (size_t)b->chunk) * es), 1,
                          (size_t)b->chunk, NULL);
#else
      if (t->mesh)
        rt_allgather_dim(t->mesh, (RtAxis)op->axis, t->arena + (size_t)b->flat * es,
                         t->arena + ((size_t)b->flat + r * (size_t)b->chunk) * es, 1,
                         (size_t)b->chunk, t->es, NULL);
#endif
#endif
      break;
    }
    case RT_STEP_OPT_GATHER: {
#ifdef RT_TRAIN_MPI
      const size_t r = (size_t)coord(t, (RtAxis)op->axis), es = (size_t)t->es;
#ifdef RT_TRAIN_CUDA
      if (t->mesh)
        rtc_allgather_dim(t->mesh, (RtAxis)op->axis, (float *)(t->dev + op->off),
                          (float *)(t->dev + (size_t)op->off + r * (size_t)op->count * es), 1,
                          (size_t)op->count, NULL);
#else
      if (t->mesh)
        rt_allgather_dim(t->mesh, (RtAxis)op->axis, t->arena + op->off,
                         t->arena + (size_t)op->off + r * (size_t)op->count * es, 1,
                         (size_t)op->count, t->es, NULL);
#endif
#endif
      break;
    }
    case RT_STEP_OPT_APPLY: {
      int64_t dir = -1;
      for (int s = 0; s < pg->nstep; s++)
        if (pg->step[s].kind == RT_STEP_OPT_GATHER)
          dir = pg->step[s].off;
      placed_apply(t, *lr, dir);
      break;
    }
    default:
      fail(t, "internal: unknown step operation");
    }
  }
  return 0;
}

#ifdef RT_TRAIN_CUDA
/* ---------------------------------------------------------------------------
 * A step as two CUDA graphs (see the Trainer): captured on the first step
 * that gets here, replayed on the later ones.
 */

/* The mesh's counts (bytes, calls): a replay adds what its capture counted,
 * so that the communication check counts replayed steps too. */
static void counts_diff(Trainer *t, uint64_t c[2][RT_AX_COUNT], int since) {
#ifdef RT_TRAIN_MPI
  for (int ax = 0; t->mesh && ax < RT_AX_COUNT; ax++) {
    c[0][ax] = t->mesh->bytes[ax] - (since ? c[0][ax] : 0);
    c[1][ax] = t->mesh->calls[ax] - (since ? c[1][ax] : 0);
  }
#else
  (void)t, (void)c, (void)since;
#endif
}

static void counts_add(Trainer *t, uint64_t c[2][RT_AX_COUNT]) {
#ifdef RT_TRAIN_MPI
  for (int ax = 0; t->mesh && ax < RT_AX_COUNT; ax++) {
    t->mesh->bytes[ax] += c[0][ax];
    t->mesh->calls[ax] += c[1][ax];
  }
#else
  (void)t, (void)c;
#endif
}

/* Graph A: the step's batches into the microbatches' pinned slots, the
 * microbatches and the device work before the optimizer; one wait, then the
 * losses and the norm on the host (checks, lr); graph B: the update.  The
 * arithmetic is run_step's, so the losses are bitwise the eager ones. */
static int step_graphed(Trainer *t, long step, double *loss, double *lr, double *gscale) {
  const RtProgram *pg = t->pg;
  for (int k = 0; k < pg->mb; k++) {
    unsigned char *s = t->slots + (size_t)k * (t->slot0 + t->slot1);
    int row0 = row_base(t) + k * pg->microbatch;
    if (pg->ring) { /* this rank's tokens of the rows, as rt_load_batch's */
      int tn = pg->seq / pg->sp;
      rt_check(rt_train_data_batch_cols(&t->data, step, row0, pg->microbatch,
                                        coord(t, RT_AX_SP) * tn, tn, s, s + t->slot0));
    } else {
      rt_check(rt_train_data_batch(&t->data, step, row0, pg->microbatch, s, s + t->slot0));
    }
  }
  if (!t->ga) {
    counts_diff(t, t->cnt_a, 0);
    rtc_capture_begin();
    run_microbatches(t, step, 1);
    rtc_download(t->loss_pin, t->loss_dev, (size_t)pg->mb * sizeof(double));
    run_step(t, step, loss, lr, gscale, STEP_DEVICE);
    t->ga = rtc_capture_end();
    counts_diff(t, t->cnt_a, 1);
  } else {
    counts_add(t, t->cnt_a);
  }
  rtc_graph_launch(t->ga);
  rtc_sync();
  double sum = 0;
  for (int k = 0; k < pg->mb; k++)
    sum += t->loss_pin[k];
  *loss = sum / pg->mb;
  if (run_step(t, step, loss, lr, gscale, STEP_HOST))
    return 1;
  if (!t->gb) {
    counts_diff(t, t->cnt_b, 0);
    rtc_capture_begin();
    run_step(t, step, loss, lr, gscale, STEP_UPDATE); /* sets this step's scalars */
    t->gb = rtc_capture_end();
    counts_diff(t, t->cnt_b, 1);
  } else {
    rtc_opt_scalars_set(*lr, pg->beta1, pg->beta2, pg->eps, step + 1, *gscale);
    counts_add(t, t->cnt_b);
  }
  rtc_graph_launch(t->gb);
  return 0;
}

/* GEMM algorithms (rtc_train.h's rtc_gemm_tune): unless --no-gemm-tune,
 * rank 0 reads the file of timed choices (--gemm-algos, or the program's
 * path + .gemm-algos) and every rank gets them; the first step times the
 * shapes the file lacks (each rank its own), gemm_agree then makes every
 * rank run the same algorithm for the same shape from the second step on,
 * and rank 0 writes the file.  A file that is not one of these is an
 * error, never overwritten; a stale one (another device or cuBLASLt, a
 * damaged line) is timed again and rewritten. */
static int gemm_setup(Trainer *t, const char *argv0, long step, int say) {
  const RtTrainArgs *a = &t->args;
  if (a->no_gemm_tune) {
    rtc_gemm_tune(0, NULL, 0);
    return 1;
  }
  const char *base = argv0 && *argv0 ? argv0 : "train";
  size_t n = strlen(base) + 16;
  t->gemm_path = a->gemm_algos ? strdup(a->gemm_algos) : malloc(n);
  if (!t->gemm_path)
    fail(t, "out of memory");
  if (!a->gemm_algos)
    snprintf(t->gemm_path, n, "%s.gemm-algos", base);
  int ok = 1, cnt = 0;
  if (t->rank == 0) {
    int stale = 0;
    char why[RT_GEMM_WHY_BYTES];
    ok = rt_gemm_table_read(&t->gemm_known, t->gemm_path, t->gpu ? t->gpu : "?",
                            rtc_gemm_lib_version(), &stale, why) == RT_OK;
    if (ok && stale && say)
      printf("gemms:    %s: %s; timing again, and rewriting it\n", t->gemm_path, why);
    cnt = t->gemm_known.n;
  }
  if (!all_ok(t, ok))
    return 0;
#ifdef RT_TRAIN_MPI
  MPI_OK(MPI_Bcast(&cnt, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (t->rank != 0)
    rt_gemm_table_room(&t->gemm_known, cnt);
  if (cnt)
    MPI_OK(MPI_Bcast(t->gemm_known.c, (int)(cnt * sizeof(RtGemmChoice)), MPI_BYTE, 0,
                     MPI_COMM_WORLD));
#else
  (void)cnt;
#endif
  /* step 1 runs the heuristic's first everywhere, the steps after it the
   * agreed choice: a run resumed after step 1 runs the file's at once */
  rtc_gemm_tune(1, &t->gemm_known, step > 0);
  return 1;
}

/* After the first step: every rank's choices to every rank; for each
 * shape the file's, else the lowest rank's timed one, else the
 * heuristic's first; adopted from the next step on; rank 0 keeps the
 * file's and the timed ones in the file. */
static void gemm_agree(Trainer *t, int say) {
  if (!t->gemm_path)
    return;
  RtGemmTable mine = {0}, all = {0}, merged = {0};
  rtc_gemm_choices(&mine);
#ifdef RT_TRAIN_MPI
  int *cnt = calloc((size_t)t->world, sizeof *cnt), *bytes = calloc((size_t)t->world, sizeof *bytes),
      *displ = calloc((size_t)t->world, sizeof *displ);
  if (!cnt || !bytes || !displ)
    fail(t, "out of memory");
  MPI_OK(MPI_Allgather(&mine.n, 1, MPI_INT, cnt, 1, MPI_INT, MPI_COMM_WORLD));
  long total = 0;
  for (int r = 0; r < t->world; r++) {
    displ[r] = (int)(total * (long)sizeof(RtGemmChoice));
    bytes[r] = cnt[r] * (int)sizeof(RtGemmChoice);
    total += cnt[r];
  }
  rt_gemm_table_room(&all, (int)total);
  MPI_OK(MPI_Allgatherv(mine.c ? (void *)mine.c : (void *)all.c, bytes[t->rank], MPI_BYTE, all.c,
                        bytes, displ, MPI_BYTE, MPI_COMM_WORLD));
  free(cnt);
  free(bytes);
  free(displ);
#else
  all = mine;
  mine.c = NULL;
#endif
  rt_gemm_table_agree(&merged, &all);
  rtc_gemm_adopt(&merged);
  int timed = 0, file = 0, first = 0;
  double ms = 0, ms_first = 0;
  RtGemmTable keep = {0};
  for (int i = 0; i < merged.n; i++) {
    const RtGemmChoice *c = &merged.c[i];
    timed += c->source == RT_GEMM_TIMED;
    file += c->source == RT_GEMM_FILE;
    first += c->source == RT_GEMM_FIRST;
    if (c->source != RT_GEMM_FIRST) {
      ms += c->ms;
      ms_first += c->ms_first;
      rt_gemm_table_add(&keep, c);
    }
  }
  int ok = 1;
  if (t->rank == 0 && timed &&
      rt_gemm_table_write(&keep, t->gemm_path, t->gpu ? t->gpu : "?", rtc_gemm_lib_version()) !=
          RT_OK) {
    fprintf(stderr, "train: warning: %s; the next run times the GEMMs again\n", rt_last_error());
    ok = 0;
  }
  if (say && merged.n) {
    printf("gemms:    %d shape%s: %d timed now, %d from %s, %d untimed", merged.n,
           merged.n == 1 ? "" : "s", timed, file, t->gemm_path, first);
    if (timed + file)
      printf("; from the next step the fastest of up to 8 cuBLASLt candidates each: %.1f%% less time "
             "than the heuristic's first over those%s", 100.0 * (1.0 - ms / ms_first),
             timed && ok ? " (kept in the file)" : "");
    printf("\n");
  }
  rt_gemm_table_free(&mine);
  rt_gemm_table_free(&all);
  rt_gemm_table_free(&merged);
  rt_gemm_table_free(&keep);
}

/* Whether the step can be captured (NULL) or why not; and the memory the
 * graphs and the norm use. */
static const char *graph_setup(Trainer *t) {
  const RtProgram *pg = t->pg;
  t->ss_dev = rtc_dev_alloc(((size_t)pg->nparams + 1) * sizeof(double));
  t->ss_pin = rtc_pinned_alloc(((size_t)pg->nparams + 1) * sizeof(double));
  t->ss_w = malloc(((size_t)pg->nparams + 1) * sizeof(double));
  if (!t->ss_w)
    fail(t, "out of memory for the gradient norm's terms");
  if (t->args.no_graph)
    return "--no-graph";
  if (getenv("SHARDC_PROFILE"))
    return "SHARDC_PROFILE times every kernel";
  if (pg->pp > 1 && pg->pipe_mpi)
    return "pipeline messages staged through the host: this schedule's NCCL groups could hang";
  if (pg->opt >= RT_OPT_SHAMPOO)
    return "Shampoo and Adafactor steps run eagerly (root phases and Newton's stopping test "
           "on the host)";
  if (t->mesh && t->args.comm_mpi)
    return "--comm mpi stages collectives through the host";
  size_t rows = (size_t)pg->microbatch;
  size_t seq = (size_t)(pg->ring ? pg->seq / pg->sp : pg->seq); /* this rank's tokens */
  t->slot0 = pg->data == RT_TRAIN_SYNTH ? rows * (size_t)pg->features * 4 : rows * seq * 4;
  t->slot1 = pg->data == RT_TRAIN_SYNTH ? rows * 4 : t->slot0;
  t->slots = rtc_pinned_alloc((size_t)pg->mb * (t->slot0 + t->slot1));
  t->loss_dev = rtc_dev_alloc((size_t)pg->mb * sizeof(double));
  rtc_memset(t->loss_dev, 0, (size_t)pg->mb * sizeof(double)); /* a pipeline's first stages */
  t->loss_pin = rtc_pinned_alloc((size_t)pg->mb * sizeof(double));
  return NULL;
}
#endif

/* ---------------------------------------------------------------------------
 * The first step's checks: the arena's high-water mark against the plan,
 * and the bytes each rank sent against the plan (SHARDC_STRICT_COMM: a
 * difference stops the job).
 */

static void report_one_rank(const Trainer *t, long step, size_t measured, int say) {
  const RtProgram *pg = t->pg;
  if (!say)
    return;
  char a[32], b[32];
  rt_commas(a, sizeof a, pg->arena_bytes);
  rt_commas(b, sizeof b, measured);
  printf("memory:   planned peak %s bytes per rank, measured %s (highest arena byte "
         "written in step %ld)%s\n",
         a, b, step + 1, measured == pg->arena_bytes ? "" : "  MISMATCH");
  fflush(stdout);
}

#ifdef RT_TRAIN_MPI
/* On a mesh every rank compares its own numbers (one plan for all); rank 0
 * reports how many differ. */
static void report_mesh(Trainer *t, long step, size_t measured, int say) {
  const RtProgram *pg = t->pg;
  double off = rt_mesh_sum_double(t->mesh, RT_AX_WORLD, measured != pg->arena_bytes);
  if (say) {
    char a[32], b[32];
    rt_commas(a, sizeof a, pg->arena_bytes);
    rt_commas(b, sizeof b, measured);
    printf("memory:   planned peak %s bytes per rank, measured %s on rank 0 (highest arena byte "
           "written in step %ld)%s\n",
           a, b, step + 1, off ? "  MISMATCH" : "");
    if (off)
      printf("          %.0f rank(s) measured another peak\n", off);
    fflush(stdout);
  }
  unsigned long long counted = rt_mesh_total_bytes(t->mesh);
  /* every rank's count, for the line rank 0 prints */
  double sum = rt_mesh_sum_double(t->mesh, RT_AX_WORLD, (double)counted);
  if (say) {
    char a[32], b[32];
    rt_commas(a, sizeof a, pg->comm_bytes);
    rt_commas(b, sizeof b, counted);
    printf("comm:     planned %s bytes sent per rank per step, counted %s on rank 0 (%.0f over "
           "all ranks)%s\n",
           a, b, sum, counted == pg->comm_bytes ? "" : "  MISMATCH");
    fflush(stdout);
  }
  if (counted != pg->comm_bytes && getenv("SHARDC_STRICT_COMM"))
    rt_mesh_fail(t->mesh, "sent %llu bytes in step 1, the plan says %llu", counted,
                 (unsigned long long)pg->comm_bytes);
}

/* A pipeline: every pipeline rank's planned and measured peak and bytes
 * sent (those of its data 0 (dp 0, sp 0), tp 0 rank), and whether any rank
 * differs. */
static void report_pipeline(Trainer *t, long step, size_t measured, int say) {
  const RtProgram *pg = t->pg;
  unsigned long long counted = rt_mesh_total_bytes(t->mesh);
  int off = measured != pg->arena_bytes, coff = counted != pg->comm_bytes;
  int head = coord(t, RT_AX_DATA) == 0 && coord(t, RT_AX_TP) == 0;
  double bad = rt_mesh_sum_double(t->mesh, RT_AX_WORLD, off);
  double cbad = rt_mesh_sum_double(t->mesh, RT_AX_WORLD, coff);
  char line[4][2048];
  int len[4] = {0, 0, 0, 0};
  for (int s = 0; s < pg->pp; s++) {
    double v[4] = {(double)pg->arena_bytes, (double)measured, (double)pg->comm_bytes,
                   (double)counted};
    for (int j = 0; j < 4; j++) {
      char c[32];
      rt_commas(c, sizeof c,
                (unsigned long long)rt_mesh_sum_double(t->mesh, RT_AX_WORLD,
                                                       head && pg->rank == s ? v[j] : 0));
      if (len[j] < (int)sizeof line[j] - 40)
        len[j] += snprintf(line[j] + len[j], sizeof line[j] - (size_t)len[j], "%s%s",
                           s ? " / " : "", c);
      else if (s == pg->pp - 1) /* the stages that did not fit: said, not dropped */
        snprintf(line[j] + len[j], sizeof line[j] - (size_t)len[j], " / … (%d stages)", pg->pp);
    }
  }
  if (say) {
    printf("memory:   planned peak per rank by stage %s bytes, measured %s (highest arena byte "
           "written in step %ld)%s\n",
           line[0], line[1], step + 1, bad ? "  MISMATCH" : "");
    printf("comm:     planned %s bytes sent per rank per step by stage, counted %s%s\n", line[2],
           line[3], cbad ? "  MISMATCH" : "");
    fflush(stdout);
  }
  if (coff && getenv("SHARDC_STRICT_COMM"))
    rt_mesh_fail(t->mesh, "sent %llu bytes in step 1, the plan says %llu", counted,
                 (unsigned long long)pg->comm_bytes);
}
#endif

/* The measurement on the first step; every step restarts the counts. */
static void first_step_checks(Trainer *t, long step, int measure, size_t measured, int say) {
#ifdef RT_TRAIN_MPI
  if (t->mesh) {
    if (measure && t->pg->pp > 1)
      report_pipeline(t, step, measured, say);
    else if (measure)
      report_mesh(t, step, measured, say);
    rt_mesh_reset_counts(t->mesh);
    return;
  }
#endif
  if (measure)
    report_one_rank(t, step, measured, say);
}

/* ---------------------------------------------------------------------------
 * The run
 */

/* Launch: MPI (or the launcher's environment), this rank's program. */
static int start(Trainer *t, const RtProgram *const *progs, int nprogs, int *argc,
                 char ***argv) {
#ifdef RT_TRAIN_MPI
  int started = 0;
  MPI_OK(MPI_Initialized(&started));
  if (!started) {
    int provided = MPI_THREAD_SINGLE;
    /* funneled: only the main thread calls MPI (the root worker makes no calls) */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      fprintf(stderr, "train: error: MPI_Init failed\n");
      return 1;
    }
    t->mpi_started = 1;
  }
#ifdef RT_ROOT_WORKER
  {
    int level = MPI_THREAD_SINGLE;
    MPI_OK(MPI_Query_thread(&level));
    t->mpi_funneled = level >= MPI_THREAD_FUNNELED;
  }
#endif
  MPI_OK(MPI_Comm_rank(MPI_COMM_WORLD, &t->rank));
  MPI_OK(MPI_Comm_size(MPI_COMM_WORLD, &t->world));
#else
  (void)argc;
  (void)argv;
  t->world = rt_launcher_ranks(&t->rank); /* to refuse a launch on several ranks */
#endif
  const char *bad = check_tables(progs, nprogs);
  if (bad) {
    if (t->rank == 0)
      fprintf(stderr, "train: error: internal: the program's tables are inconsistent: %s\n", bad);
    return 1;
  }
  /* A pipeline rank's program by its pp coordinate (the outermost axis); on
   * a wrong world size the first one says what to run. */
  const RtProgram *pg = progs[0];
  if (nprogs > 1 && t->world == pg->ranks)
    pg = progs[t->rank / (pg->ranks / nprogs)];
  t->pg = pg;
  t->es = pg->f64 ? 8 : 4;
  return 0;
}

/* The launch against the plan; then the mesh (--gradcheck runs the
 * data-parallel plan's program on one rank). */
static int check_launch(Trainer *t, char **argv) {
  const RtProgram *pg = t->pg;
#ifndef RT_TRAIN_MPI
  if (pg->ranks > 1) {
    if (t->rank == 0)
      fprintf(stderr, "train: error: this program is planned for %d ranks (mesh %s: %s) but was "
                      "linked with the one-rank driver (libshardrt_train); link "
                      "libshardrt_train_mpi and run it as: mpirun -np %d %s ...\n",
              pg->ranks, pg->mesh, pg->spec, pg->ranks, argv[0]);
    return 0;
  }
#endif
  if (t->world != pg->ranks && !t->args.gradcheck) {
    if (t->rank == 0) {
      if (pg->ranks > 1)
        fprintf(stderr, "train: error: this program is planned for %d ranks (mesh %s: %s) but "
                        "runs on %d; run it as: mpirun -np %d %s ...\n",
                pg->ranks, pg->mesh, pg->spec, t->world, pg->ranks, argv[0]);
      else
        fprintf(stderr, "train: error: this program is planned for 1 rank but was launched on "
                        "%d; run it directly: %s ...\n",
                t->world, argv[0]);
    }
    return 0;
  }
#ifdef RT_TRAIN_MPI
  if (pg->ranks > 1) {
    int rc = rt_mesh_init(&t->mesh_store, t->args.gradcheck ? 1 : pg->dp, pg->tp, pg->q, pg->sp,
                          pg->pp);
    if (rc == RT_OK)
      t->mesh = &t->mesh_store;
    if (!all_ok(t, rc == RT_OK))
      return 0;
    int maxslots = 1;
    for (int c = 0; c < pg->nchunks; c++)
      if (pg->chunks[c].slots > maxslots)
        maxslots = pg->chunks[c].slots;
    t->maxslots = maxslots;
    t->reqs = malloc(sizeof *t->reqs * (size_t)(pg->nreq > 0 ? pg->nreq : 1));
    t->sent = malloc(sizeof *t->sent * (size_t)pg->nchunks * (size_t)maxslots * 2 * RT_PIPE_MAXMSG);
    if (!all_ok(t, (t->reqs && t->sent) ||
                       rt_errorf(RT_ERR_NOMEM, "out of memory for the requests") == RT_OK))
      return 0;
    for (int i = 0; i < (pg->nreq > 0 ? pg->nreq : 1); i++)
      t->reqs[i] = MPI_REQUEST_NULL;
  }
#endif
  return 1;
}

/* MFU's denominator, the peak FLOP/s of what this rank runs on: the
 * device's (the catalog's, or the mesh block's figure, in the program).  On
 * the CPU a device is one core (ir/mesh.c) and a rank's BLAS runs on its
 * threads, at most its share of the node's cores: one rank on 2 cores has
 * both (its MFU had read over 100% against one core's peak), 4 ranks on 2
 * cores half a core each. */
static double rank_peak(const RtProgram *pg, int world) {
  double share = 1;
#ifndef RT_TRAIN_CUDA
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int local = rt_local_ranks(world), threads = rt_blas_threads();
  if (cores > 0 && local > 0) share = (double)cores / local;
  if (threads > 0 && threads < share) share = threads;
#else
  (void)world;
#endif
  return pg->peak_flops * share;
}

static void print_start(Trainer *t, long step, int weights_only) {
  const RtProgram *pg = t->pg;
  const RtTrainArgs *a = &t->args;
  char d[4608]; /* a path of up to PATH_MAX and the counts */
  rt_train_data_describe(&t->data, d, sizeof d);
  printf("%sdata:     %s\n", pg->plan, d);
  if (a->load && weights_only)
    printf("loaded:   %s (weights only: the optimizer starts from zero)\n", a->load);
  else if (a->load)
    printf("loaded:   %s (step %ld)\n", a->load, step);
  printf("train:    steps %ld..%ld on %d rank%s, seed %llu\n", step + 1, a->steps, t->world,
         t->world == 1 ? "" : "s", (unsigned long long)a->seed);
  double share = pg->peak_flops > 0 ? t->peak / pg->peak_flops : 1; /* (rank_peak's) */
  if (share != 1 && t->peak > 0 && pg->model_flops > 0)
    printf("mfu:      against %.4g FLOP/s a rank: one core's peak (the cpu device) x %.3g cores "
           "(the rank's BLAS threads, at most its share of this node's cores)\n",
           t->peak, share);
  fflush(stdout);
}

/* The steps from `step` to --steps, then --save and the summary. */
static int train(Trainer *t, long step, int say) {
  const RtProgram *pg = t->pg;
  const RtTrainArgs *a = &t->args;
  RtProgress progress;
  rt_progress_init(&progress, a->steps, (a->steps + 19) / 20, !say);
  /* On stdout with the plan and the summary, in order; one line every few
   * steps, except alone on a terminal (mpirun gives ranks a pseudo-tty). */
  progress.out = stdout;
  progress.tty = t->world == 1 && !getenv("OMPI_COMM_WORLD_SIZE") && isatty(fileno(stdout));
  const double tokens_per_step = (double)pg->batch * pg->seq;
  double first_loss = NAN, loss = NAN, t_start = rt_now();
  const long first_step = step;
#ifdef RT_TRAIN_CUDA
  /* SHARDC_PROFILE=W: device time per kernel family over the steps after
   * the first W (default 1), printed at the end */
  long prof_from = -1;
  const char *prof = getenv("SHARDC_PROFILE");
  if (prof) {
    rtc_prof_on = 1;
    prof_from = first_step + (*prof ? atol(prof) : 1);
  }
#endif
#ifdef RT_TRAIN_CUDA
  if (pg->opt == RT_OPT_SHAMPOO)
    (void)cu_roots_get(t); /* its settings checked before the first step */
#endif
  for (; step < a->steps; step++) {
    double t0 = rt_now();
    /* The first step also measures the arena's high-water mark: it starts
     * with every transient byte poisoned (NaN) and finds the highest one
     * written. */
    const int measure = step == first_step;
    const size_t transient = pg->arena_bytes - pg->persistent_bytes + RT_GUARD_BYTES;
    if (measure) {
      rt_mem_poison(pg, t->arena);
#ifdef RT_TRAIN_CUDA
      rtc_to_device(t->dev + pg->persistent_bytes, t->arena + pg->persistent_bytes, transient);
#endif
    }
    roots_begin(t, step);
    double lr = 0, gscale = 1;
    size_t measured = 0;
#ifdef RT_TRAIN_CUDA
    if (step == prof_from)
      rtc_prof_reset(); /* the warm-up steps are not in the profile */
#endif
#ifdef RT_TRAIN_CUDA
    if (!t->off_why && !measure) { /* as graphs; the first step runs eagerly */
      if (step_graphed(t, step, &loss, &lr, &gscale))
        return 1;
    } else
#endif
    {
      loss = run_microbatches(t, step, 1);
#ifdef RT_TRAIN_CUDA
      if (measure)
        rtc_to_host(t->arena + pg->persistent_bytes, t->dev + pg->persistent_bytes, transient);
#endif
      (void)transient;
      measured = measure ? rt_mem_highwater(pg, t->arena) : 0;
      if (run_step(t, step, &loss, &lr, &gscale, STEP_ALL))
        return 1;
    }
#ifdef RT_TRAIN_CUDA
    rtc_sync(); /* the step's time includes its update */
#endif
    poison_hook(t, step);
    double ms = rt_ms_since(t0), tps = tokens_per_step / (ms / 1e3);
    /* model FLOP/s per device and MFU (the plan's count, passes/report.c) */
    double fps = pg->model_flops / (ms / 1e3) / t->world;
    double tflops = pg->model_flops > 0 ? fps / 1e12 : NAN;
    double mfu = pg->model_flops > 0 && t->peak > 0 ? fps / t->peak : NAN;
    first_step_checks(t, step, measure, measured, say);
#ifdef RT_TRAIN_CUDA
    if (measure)
      gemm_agree(t, say);
#endif
    if (!all_ok(t, t->rank != 0 || rt_metrics_log(&t->log, step + 1, loss, lr, ms, tps, tflops,
                                                  mfu) == RT_OK))
      return 1;
    rt_progress_step(&progress, step + 1, loss, tps, tflops, mfu);
    if (isnan(first_loss))
      first_loss = loss;
    if (a->save && a->save_every && (step + 1) % a->save_every == 0 && step + 1 < a->steps &&
        !save_checkpoint(t, step + 1))
      return 1;
  }
  rt_progress_done(&progress);
#ifdef RT_TRAIN_CUDA
  if (rtc_prof_on && say && step > prof_from)
    rtc_prof_report(stdout, step - prof_from);
#endif
  if (a->save && !save_checkpoint(t, step))
    return 1;
#ifdef RT_ROOT_WORKER
  roots_report(t, say);
#endif
#ifdef RT_TRAIN_CUDA
  cu_roots_report(t, say);
#endif
  if (say)
    printf("done:     steps %ld..%ld in %.1f s; loss %.4f -> %.4f\n", first_step + 1, step,
           rt_ms_since(t_start) / 1e3, first_loss, loss);
  if (!all_ok(t, t->rank != 0 || rt_metrics_close(&t->log) == RT_OK))
    return 1;
  return 0;
}

int rt_train_main(const RtProgram *const *progs, int nprogs, int argc, char **argv) {
  /* Over a file size limit (ulimit -f) a write fails with EFBIG, which the
   * save and the log report, rather than killing the run without a word */
  signal(SIGXFSZ, SIG_IGN);
  rt_malloc_setup();
  rt_blas_setup(argc, argv); /* may run the program again: before MPI */
  rt_bind_shared_cores();    /* more ranks than cores: one core each, round robin */
  Trainer tr, *t = &tr;
  memset(t, 0, sizeof *t);
  if (start(t, progs, nprogs, &argc, &argv))
    return finish(t, 1);
  const RtProgram *pg = t->pg;
  int rc = rt_train_args_parse(&t->args, pg, argc, argv, t->rank == 0);
  if (rc)
    return finish(t, rc > 0 ? 0 : 2);
  const RtTrainArgs *a = &t->args;
#ifndef RT_TRAIN_CUDA
  if (a->comm_set || a->no_graph || a->no_gemm_tune || a->gemm_algos) {
    if (t->rank == 0)
      fprintf(stderr, "train: error: %s is for programs built with --target cuda; this one "
                      "runs on the CPU%s\n",
              a->comm_set ? "--comm" : a->no_graph ? "--no-graph"
                                     : a->no_gemm_tune ? "--no-gemm-tune" : "--gemm-algos",
              a->comm_set ? " over MPI" : "");
    return finish(t, 2);
  }
#endif
  if (!check_launch(t, argv))
    return finish(t, 1);
  rt_train_threads(t->world);
#ifdef RT_TRAIN_CUDA
  t->mem = rt_arena_create_mirror(pg->arena_bytes + RT_GUARD_BYTES);
#else
  if (!all_ok(t, node_memory_ok(t, pg->arena_bytes + RT_GUARD_BYTES)))
    return finish(t, 1);
  t->mem = rt_arena_create(pg->arena_bytes + RT_GUARD_BYTES);
#endif
  if (!all_ok(t, t->mem != NULL))
    return finish(t, 1);
  t->arena = t->dev = t->mem->base;
#ifdef RT_TRAIN_CUDA
  t->dev = NULL;
  rtc_gemm_bf16 = pg->bf16;
  const char *gpu = NULL;
  if (!all_ok(t, rtc_device_init(t->rank, &gpu) == RT_OK))
    return finish(t, 1);
#ifdef RT_TRAIN_MPI
  /* NCCL's communicators before the arena: the free memory the arena is
   * checked against is then what their buffers left */
  if (t->mesh && !all_ok(t, rtc_mesh_init(t->mesh, a->comm_mpi) == RT_OK))
    return finish(t, 1);
  t->pipe_nccl = pg->pp > 1 && !pg->pipe_mpi && !a->comm_mpi;
#endif
  if (!all_ok(t, rtc_arena_alloc(pg->arena_bytes + RT_GUARD_BYTES, pg->kernel_ws, &t->dev) == RT_OK))
    return finish(t, 1);
  t->gpu = gpu;
#endif
  init_params(t, a->seed);
  long step = 0;
  int weights_only = 0;
  if (a->load && !all_ok(t, load_checkpoint(t, a->load, &step, &weights_only) == RT_OK))
    return finish(t, 1);
#ifdef RT_TRAIN_CUDA
  if (!gemm_setup(t, argv[0], step, t->rank == 0 && !a->quiet))
    return finish(t, 1);
  rtc_to_device(t->dev, t->arena, pg->persistent_bytes);
  if (t->rank == 0 && !a->quiet)
    printf("device:   %s (%d rank%s, %s; %s)\n", gpu ? gpu : "?", t->world,
           t->world == 1 ? "" : "s", a->comm_mpi ? "collectives staged through MPI" : "NCCL",
           pg->bf16 ? "bf16: 16-bit activations, fp32 masters and state, GEMMs on tensor "
                      "cores with fp32 accumulation"
                    : "fp32, GEMMs with TF32 off");
  t->off_why = graph_setup(t);
  if (t->rank == 0 && !a->quiet) {
    if (t->off_why)
      printf("graphs:   off (%s)\n", t->off_why);
    else
      printf("graphs:   on (each step after the first replays two CUDA graphs: the "
             "microbatches and reductions, then the update)\n");
  }
#endif
  if (a->save &&
      !all_ok(t, t->rank != 0 || rt_ckpt_check_target(a->save, t->rank == 0 && !a->quiet) == RT_OK))
    return finish(t, 1);
  if (!all_ok(t, rt_train_data_open(&t->data, pg, a->data, a->seed) == RT_OK))
    return finish(t, 1);
  if (a->gradcheck)
    return finish(t, rt_gradcheck(pg, t->arena, gradcheck_pass, t, a->gradcheck));
  if (!all_ok(t, t->rank != 0 || rt_metrics_open(&t->log, a->log, a->load != NULL) == RT_OK))
    return finish(t, 1);
  int say = t->rank == 0 && !a->quiet;
  t->peak = rank_peak(pg, t->world);
  if (say)
    print_start(t, step, weights_only);
  if (step >= a->steps) {
    /* --steps 0 --save FILE writes the initial weights (for reference runs). */
    if (a->save)
      return finish(t, save_checkpoint(t, step) ? 0 : 1);
    if (say && a->load)
      printf("nothing to do: the checkpoint is at step %ld, --steps is %ld\n", step, a->steps);
    else if (say)
      printf("nothing to do: --steps is 0 (the train block's steps, or --steps N, sets how many)\n");
    return finish(t, 0);
  }
  return finish(t, train(t, step, say));
}
