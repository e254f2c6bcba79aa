/* train_internal.h — the training driver's plumbing (train_support.c), used
 * by train.c and its tests; generated code sees only rt_train.h.
 *
 * Conventions are shardrt.h's: functions that can fail return RT_OK or an
 * RT_ERR_* code with the message in rt_last_error(); nothing here exits.
 * A "tensor table" is ps[0..n): a program's parameters (offsets in its
 * arena) or its full tensors (offsets in the init/checkpoint buffer).
 */
#ifndef SHARDRT_TRAIN_INTERNAL_H
#define SHARDRT_TRAIN_INTERNAL_H

#include "rt_train.h"

/* ---------------------------------------------------------------------------
 * Flags:  --steps N --seed S --data FILE --load CKPT --save CKPT
 *         --save-every N --log FILE.jsonl --quiet --stop-on-divergence
 *         --help --gradcheck N; cuda programs: --comm nccl|mpi --no-graph
 *         --no-gemm-tune --gemm-algos FILE
 */
typedef struct RtTrainArgs {
  long steps;          /* train until this global step (default: the program's steps) */
  uint64_t seed;
  const char *data, *load, *save, *log;
  long save_every;
  int quiet;
  int stop_on_divergence; /* a diverging loss (RT_DIVERGENCE_FACTOR) is an error */
  int gradcheck;       /* --gradcheck N (testing, f64 builds): N entries per tensor */
  int comm_set;        /* --comm given (cuda programs only) */
  int comm_mpi;        /* --comm mpi: collectives staged through host memory and MPI */
  int no_graph;        /* --no-graph (cuda programs only): no CUDA graphs, every step eager */
  int no_gemm_tune;    /* --no-gemm-tune (cuda programs only): cuBLASLt's heuristic's first */
  const char *gemm_algos; /* --gemm-algos FILE (cuda programs only): the timed choices */
} RtTrainArgs;

/* A loss above this many times its first value in a run is diverging: the
 * driver warns once, and stops with --stop-on-divergence.  (The first
 * loss of a language model is about ln(vocab), what guessing uniformly
 * costs; ten times that is far worse than guessing.) */
#define RT_DIVERGENCE_FACTOR 10

/* Parses argv. Returns 0 to run, 1 after printing --help (exit 0), -1 after
 * printing a usage error (exit 2). Prints only when `print` is set (rank 0). */
int rt_train_args_parse(RtTrainArgs *a, const RtProgram *pg, int argc, char **argv, int print);

/* ---------------------------------------------------------------------------
 * Launch
 */

/* World size and rank a launcher (mpirun, mpiexec, srun) asked for, read
 * from its environment; 1 and 0 when started directly.  The one-rank driver
 * refuses a multi-rank launch with it. */
int rt_launcher_ranks(int *rank);
/* glibc keeps freed memory (no per-call mmap/munmap of MPI's buffers). */
void rt_malloc_setup(void);
/* Threads of both pools (rt_set_threads): the cores of this node divided by
 * its ranks; a pool whose variable is set (OMP_NUM_THREADS,
 * OPENBLAS_NUM_THREADS) keeps the size it says. */
void rt_train_threads(int ranks);

/* ---------------------------------------------------------------------------
 * Parameters
 */

/* Every tensor of ps[0..n) at base + offset from its init rule with the
 * counter-based generator keyed by (seed, FNV-1a hash of its name):
 * independent of order and sharding. */
void rt_params_init(const RtProgram *pg, const RtParam *ps, int n, unsigned char *base,
                    uint64_t seed);
/* FNV-1a 64 of a string. */
uint64_t rt_name_hash(const char *s);
/* Learning rate at 0-based step (rt_lr over the program's steps). */
double rt_train_lr(const RtProgram *pg, long step);

/* ---------------------------------------------------------------------------
 * Data: tokens from a file, or the synthetic teacher task
 */
typedef struct RtTrainData {
  const RtProgram *pg;  /* NULL: not open */
  RtData tok;           /* RT_TRAIN_TOKENS */
  uint64_t seed;
} RtTrainData;

/* path NULL: the program's default. */
int rt_train_data_open(RtTrainData *d, const RtProgram *pg, const char *path, uint64_t seed);
/* Rows [row0, row0+nrows) of global batch `step`: tokens/targets (nrows,T)
 * int32, or x (nrows,K) float or double and labels (nrows) int32. */
int rt_train_data_batch(const RtTrainData *d, long step, int row0, int nrows, void *in0,
                        void *in1);
/* Token columns [t0, t0+tn) of those rows (sp=ring): tokens/targets (nrows,tn). */
int rt_train_data_batch_cols(const RtTrainData *d, long step, int row0, int nrows, int t0,
                             int tn, void *in0, void *in1);
/* Closes an open one; a closed one is left alone. */
void rt_train_data_close(RtTrainData *d);
/* One line describing the data ("samples/data/x.txt: 123,456 tokens (text bytes), ..."). */
void rt_train_data_describe(const RtTrainData *d, char *buf, size_t cap);

/* ---------------------------------------------------------------------------
 * Checkpoints: safetensors with the DSL parameter names, the optimizer state
 * as optimizer.exp_avg.NAME / optimizer.exp_avg_sq.NAME (AdamW) or
 * optimizer.momentum_buffer.NAME (SGD), and __metadata__ step/model/optimizer.
 * Saving is atomic (rt_st_save).  ps[0..n) at base: the tensors and their
 * slots (rt_param_slot).
 */

/* Fails early when a checkpoint could not be created at path: an existing
 * path that is not a regular file (a directory, FIFO, device: the save's
 * rename would replace it), or a directory where the temporary file cannot
 * be created (it creates and removes it).  Before that it removes the
 * temporary files of interrupted saves to path (rt_ckpt_remove_stale).
 * Call once, before this process saves. */
int rt_ckpt_check_target(const char *path, int say);
/* Removes PATH.tmp.PID files (rt_st_save's temporaries) of processes that
 * no longer exist on this machine (or of this process: its id was reused,
 * it has not saved yet) and whose lock no process holds (rt_st_save locks
 * its temporary file while writing it): a run killed in the middle of a
 * save leaves one, as large as the checkpoint.  Each removal is printed on
 * stdout when say is set; a failure to remove one is a warning on stderr. */
void rt_ckpt_remove_stale(const char *path, int say);
/* Saves the parameters ps[0..n) and their optimizer state from base (the
 * arena or a gathered copy in its layout).  Shampoo's factors are made
 * whole there first (rt_shampoo_symmetrize: the steps keep only their
 * upper triangles, so this changes nothing a step reads). */
int rt_ckpt_save(const RtProgram *pg, const RtParam *ps, int n, unsigned char *base,
                 long step, const char *path);
/* Loads parameters and optimizer state and sets *step (steps done). A file
 * with the parameters only loads as weights: *step = 0, the optimizer
 * state untouched, *weights_only = 1. Any missing, extra or mis-shaped
 * tensor is an error naming the file and the tensors. */
int rt_ckpt_load(const RtProgram *pg, const RtParam *ps, int n, unsigned char *base,
                 const char *path, long *step, int *weights_only);

/* ---------------------------------------------------------------------------
 * Memory check: the transient region (and the guard past the arena) filled
 * with a NaN pattern before the first step; the highest byte written after.
 */
void rt_mem_poison(const RtProgram *pg, unsigned char *arena);
/* The end of the highest written byte, rounded up to the planner's 64-byte
 * alignment. */
size_t rt_mem_highwater(const RtProgram *pg, const unsigned char *arena);

/* ---------------------------------------------------------------------------
 * Gradient check (f64 programs): central differences of the program's own
 * loss against its backward on per_tensor entries of every parameter.
 */
/* The mean loss of one step's microbatches on this rank; with_backward:
 * zero the parameter gradients first and accumulate them. */
typedef double (*RtPassFn)(void *ctx, long step, int with_backward);
/* Returns 0 when every entry agrees (prints a summary), 1 otherwise. */
int rt_gradcheck(const RtProgram *pg, unsigned char *arena, RtPassFn pass, void *ctx,
                 int per_tensor);

/* ---------------------------------------------------------------------------
 * ZeRO's flat layout (RtBucket in rt_train.h)
 */
/* shard = this rank's (r) chunks of every bucket of flat. */
void rt_zero_take(const RtBucket *b, int nb, int r, const void *flat, void *shard, int esize);
/* flat = every rank's chunks, from all = the P ranks' shard arrays of nshard
 * elements each, concatenated in rank order (rt_gather_flat). */
void rt_zero_put(const RtBucket *b, int nb, int P, int64_t nshard, const void *all, void *flat,
                 int esize);

/* "30,818,368" */
void rt_commas(char *buf, size_t cap, unsigned long long n);

#endif
