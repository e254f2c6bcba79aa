/* shardrt.h — libshardrt, the thin runtime that generated per-rank C programs
 * link against (target cpu).
 *
 * Conventions (every function below follows them):
 * - Tensors are row-major and contiguous unless a leading dimension is given.
 * - Activations are (N,C) with N = B*T flattened; attention tensors are
 *   (B,T,H,D), i.e. q/k/v rows of H*D per token.
 * - A linear layer is y = x·Wᵀ + b with W of shape (OC,C), the PyTorch
 *   nn.Linear convention, so checkpoints load into PyTorch unchanged.
 * - Kernels never allocate: every buffer comes from the caller (its arena).
 * - Backward passes ACCUMULATE (+=) into parameter gradients and into input
 *   gradients, so residual branches sum without extra adds. The caller zeroes
 *   gradient buffers once per step. The one exception, documented there, is
 *   rt_crossentropy_backward, which writes.
 * - Every kernel exists as name_f32 (float) and name_f64 (double); the
 *   prototypes are in shardrt_kernels.h, written once over RT_REAL.
 * - Functions that can fail return an int status (RT_OK == 0) and leave a
 *   message in rt_last_error(); the library never prints and never exits.
 */
#ifndef SHARDRT_H
#define SHARDRT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * errors.c
 */

enum {
  RT_OK = 0,
  RT_ERR_IO,       /* open/read/write/fsync/rename failed */
  RT_ERR_FORMAT,   /* a file is malformed (safetensors, token file) */
  RT_ERR_NOMEM,    /* malloc or the arena ran out */
  RT_ERR_ARG,      /* bad argument (shape, token id, out-of-range offset) */
  RT_ERR_MISMATCH, /* checkpoint tensor missing/extra/wrong shape or dtype */
};

/* The message of the last failure on this thread ("" when none). */
const char *rt_last_error(void);
/* Set the message (printf-style) and return code; for generated code too. */
int rt_errorf(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rt_clear_error(void);

/* For generated code: any failing call ends the program with the message. */
#define rt_check(call)                                                         \
  do {                                                                         \
    if ((call) != RT_OK) {                                                     \
      fprintf(stderr, "train: error: %s\n", rt_last_error());                 \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* ---------------------------------------------------------------------------
 * arena.c — one 64-byte aligned, zero-filled block per rank.
 *
 * The compiler plans static offsets (memplan); generated code asks for each
 * buffer with rt_arena_at(), which records the highest byte ever used, so the
 * planned peak can be compared with rt_arena_peak() exactly. rt_alloc() is a
 * plain bump allocator over the same block for hand-written programs; do not
 * mix the two styles in one arena. The process peak RSS is measured separately.
 */

typedef struct RtArena {
  unsigned char *base;
  size_t size; /* bytes usable */
  size_t top;  /* bump pointer of rt_alloc */
  size_t peak; /* highest offset+bytes ever handed out */
  size_t mapped; /* rt_arena_create_mirror's mapping (bytes), else 0 */
} RtArena;

/* NULL (and an error) if the block cannot be allocated. */
RtArena *rt_arena_create(size_t bytes);
/* The host mirror of a device arena (the cuda target's): zero-filled like
 * rt_arena_create's, but mapped on demand (mmap, MAP_NORESERVE), so that
 * only the pages something is staged through (parameters, checkpoints,
 * batches, staged messages) take memory: a node's eight 80 GB GPUs need
 * no 640 GB of host memory for arenas mostly of activations. */
RtArena *rt_arena_create_mirror(size_t bytes);
void rt_arena_destroy(RtArena *a);
/* Bump-allocate bytes aligned to align (a power of two); NULL when full. */
void *rt_alloc(RtArena *a, size_t bytes, size_t align);
/* The buffer at a planned static offset; records offset+bytes in the peak.
 * NULL (and an error naming the offset) if it does not fit the arena. */
void *rt_arena_at(RtArena *a, size_t offset, size_t bytes);
/* Highest arena byte ever used (rt_alloc and rt_arena_at). */
size_t rt_arena_peak(const RtArena *a);
/* Process peak resident set size in bytes (getrusage), arena or not. */
size_t rt_peak_rss(void);

/* ---------------------------------------------------------------------------
 * rng.c — counter-based random numbers, so a value depends only on
 * (seed, stream, index) and never on call order, threads or sharding.
 *
 *   rt_rng_u64(seed, stream, index) =
 *     mix(mix(mix(seed) ^ (stream * 0x9E3779B97F4A7C15)) + index * 0xD1B54A32D192ED03)
 *   mix = the splitmix64 finalizer (xor-shift 30/27/31, multipliers
 *         0xBF58476D1CE4E5B9 and 0x94D049BB133111EB, after adding 0x9E3779B97F4A7C15).
 *   uniform  = (u64 >> 11) * 2^-53                      in [0,1)
 *   normal   = sqrt(-2 ln(1 - U(seed, stream, index)))
 *              * cos(2π U(seed, stream ^ 0x5bd1e995, index))
 *              (one Box-Muller value per element, so no element depends on
 *              another).
 * Parameter init uses stream = tensor_id and index = element offset in the
 * whole (unsharded) tensor; dropout uses stream = step with a salted seed.
 */

uint64_t rt_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
double rt_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
double rt_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* ---------------------------------------------------------------------------
 * sched.c — timers, learning-rate schedule, clipping, conversions
 */

/* Monotonic clock (CLOCK_MONOTONIC) in seconds. */
double rt_now(void);
/* Milliseconds elapsed since t0 = rt_now(). */
double rt_ms_since(double t0);

enum { RT_LR_CONSTANT = 0, RT_LR_COSINE = 1 };

/* Learning rate at 0-based step (llm.c convention): linear warmup
 * base_lr*(step+1)/warmup for step < warmup (both kinds), then constant
 * (RT_LR_CONSTANT) or cosine decay from base_lr to base_lr*min_lr_ratio
 * reached at step == total_steps (RT_LR_COSINE); held at the end after that. */
double rt_lr(long step, double base_lr, long warmup, long total_steps,
             double min_lr_ratio, int kind);

/* PyTorch clip_grad_norm_: the factor min(1, max_norm / (total_norm + 1e-6));
 * 1 when max_norm <= 0 (clipping off). total_norm = sqrt(sum of rt_sumsq). */
double rt_clip_scale(double total_norm, double max_norm);

/* Precision conversion helpers (n elements). */
void rt_f32_to_f64(double *dst, const float *src, size_t n);
void rt_f64_to_f32(float *dst, const double *src, size_t n);

/* ---------------------------------------------------------------------------
 * threads.c — threads. Two pools could run a program's kernels:
 *
 * - OpenMP (libgomp): the kernels' own loops — per row (norms, softmax,
 *   activations, cross-entropy, embeddings, optimizer steps), per column
 *   chunk (parameter-gradient sums over rows), per (batch, head) in
 *   attention — and the GEMMs. Sized by OMP_NUM_THREADS or
 *   omp_set_num_threads.
 * - OpenBLAS: Debian's libopenblas0-pthread keeps its own pthread pool,
 *   sized by OPENBLAS_NUM_THREADS or openblas_set_num_threads. It does not
 *   know about OpenMP.
 *
 * libshardrt computes on the OpenMP pool only. A GEMM (matmul, rt_gemm) is
 * cut into one block of output rows or columns per OpenMP thread and every
 * thread calls BLAS on its block with OpenBLAS switched to one thread for
 * the duration; attention's block GEMMs run the same way inside its tasks.
 * Never threads × threads, and never two pools at once: after a kernel,
 * libgomp's threads spin (up to GOMP_SPINCOUNT) waiting for the next
 * parallel region, and OpenBLAS's idle threads spin too (sched_yield), so
 * alternating between the pools leaves a spinning thread on the core the
 * other pool's GEMM needs. On the 2-core bench machine, a GPT d=512 step
 * took 1.8 s with OpenBLAS threading the GEMMs and 0.85 s with this.
 *
 * rt_set_threads sizes both pools to the cores one rank owns (cores / ranks
 * per node); OpenBLAS's size then only matters to code calling BLAS itself.
 * OMP_WAIT_POLICY=passive makes idle OpenMP threads sleep at once, which
 * helps when other programs share the cores. Call the kernels from one
 * thread at a time, outside any parallel region of your own: they fork
 * their own, and switch OpenBLAS's (global) thread count while they run.
 *
 * Results never depend on the OpenMP thread count, except GEMM outputs
 * (their blocks follow the thread count): work is split into pieces fixed
 * by the shapes (rows, column chunks, (batch, head) tasks), each sum runs in
 * a fixed order, and attention's GEMMs are fixed blocks of its own. For a
 * given thread count every result is the same run to run.
 */

/* Threads for both pools: n, or the online cores when n <= 0 (OpenMP only
 * when the library was built with it; OpenBLAS only when linked with it).
 * Returns the count set. */
int rt_set_threads(int n);
/* rt_set_threads(n) for each pool whose size the environment does not set
 * (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS): the user's figure wins. */
void rt_set_threads_unless_env(int n);
/* Threads the OpenMP kernels will use (1 when built without OpenMP). */
int rt_threads(void);
/* Threads the BLAS runs a call on: OpenBLAS's pool, else rt_threads(). */
int rt_blas_threads(void);
/* Ranks the launcher started on this node: Open MPI's
 * OMPI_COMM_WORLD_LOCAL_SIZE, else Slurm's SLURM_NTASKS_PER_NODE, else this
 * node's (SLURM_NODEID's) figure in SLURM_TASKS_PER_NODE ("2(x3),1": 2 on
 * nodes 0-2, 1 on node 3); def when none says. */
int rt_local_ranks(int def);
/* Threads per rank: the node's online cores over its ranks
 * (rt_local_ranks(ranks)), at least 1.  The training driver and the
 * calibrator size their pools with it. */
int rt_threads_per_rank(int ranks);
/* Ranks sharing cores: when the launcher started more ranks on this node
 * (rt_local_ranks; this rank's place among them from
 * OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID) than the
 * cores this process may run on (its affinity: all of them unless the
 * launcher or a cpuset narrowed it), binds this rank to the (local_rank %
 * cores)-th of those cores (round robin:
 * local ranks r and r + cores share a core, as `mpirun --map-by core
 * --bind-to core:overload-allowed` places them).  Unbound, the kernel moves
 * ranks between cores and ranks waiting in MPI (spinning, so never idle to
 * the scheduler) keep ranks that compute from the cores they leave.  On 4
 * ranks and 2 cores, the accuracy benchmark's GPT (fastest step of 8, three
 * alternating runs each): dp=2,pp=2,mb=4 565-615 ms bound, 695-761 ms
 * unbound; tp=4 731-810 ms bound, 771-904 ms unbound.  Placement is also
 * the same from run to run, which the cost model's pipeline simulation
 * counts on (passes/cost.c).
 * SHARDC_NO_BIND=1 leaves placement to the launcher and the kernel.  Call
 * before MPI_Init, so that MPI's threads inherit it.  Returns the core, or
 * -1 when it bound nothing. */
int rt_bind_shared_cores(void);
/* OpenBLAS 0.3.21 does not recognize some newer x86 CPUs and falls back to
 * its slowest (Prescott) kernels; then, when the CPU has AVX2 or AVX-512,
 * the program runs itself again with OPENBLAS_CORETYPE set (Haswell,
 * SkylakeX).  Call first, before MPI_Init (the training programs and the
 * calibrator do, so that calibration times the kernels the programs run).
 * Nothing happens when OPENBLAS_CORETYPE is already set. */
void rt_blas_setup(int argc, char **argv);
/* OpenBLAS's kernel set (openblas_get_corename), NULL with another BLAS. */
const char *rt_blas_core(void);

/* ---------------------------------------------------------------------------
 * kernels.c — forward/backward kernels, templated over the element type:
 * rt_xxx_f32 and rt_xxx_f64. See shardrt_kernels.h for shapes and semantics.
 */

#define RT_IGNORE_INDEX (-1) /* cross-entropy target that contributes nothing */
#define RT_ATTN_QBLOCK 64    /* queries per block in attention */
#define RT_ATTN_BLOCK 128    /* keys per block in attention's online softmax */
#define RT_LN_EPS 1e-5       /* layernorm epsilon (PyTorch default) */

/* The scalars of a Shampoo or Adafactor step (shardrt_kernels.h). */
typedef struct RtShampooArgs {
  double lr, beta1, beta2, eps, graft_eps, weight_decay, grad_scale;
  double decay_rate, clip_threshold;   /* adafactor */
  long t;                              /* 1-based step */
  int block, graft, root;              /* RT_GRAFT_*, RT_ROOT_* (rt_optim.h) */
  int precondition, recompute;
  int64_t work_elems, work_k;          /* the largest unit and factor of the program */
} RtShampooArgs;

#define RT_CAT_(a, b) a##b
#define RT_CAT(a, b) RT_CAT_(a, b)

#define RT_REAL float
#define RT_FN(name) RT_CAT(name, _f32)
#include "shardrt_kernels.h"
#undef RT_REAL
#undef RT_FN

#define RT_REAL double
#define RT_FN(name) RT_CAT(name, _f64)
#include "shardrt_kernels.h"
#undef RT_REAL
#undef RT_FN

/* ---------------------------------------------------------------------------
 * safetensors.c — checkpoints in the safetensors format:
 *   u64 little-endian header length | JSON header | data
 * The header maps each tensor name to {"dtype","shape","data_offsets"}
 * (offsets relative to the data start) plus an optional "__metadata__" object
 * of string values. We write tensors sorted by name (byte order), data packed
 * in that order, the header padded with spaces to a multiple of 8.
 */

typedef enum RtDtype {
  RT_F64, RT_F32, RT_F16, RT_BF16,
  RT_I64, RT_I32, RT_I16, RT_I8,
  RT_U64, RT_U32, RT_U16, RT_U8,
  RT_BOOL,
  RT_NDTYPES
} RtDtype;

#define RT_ST_MAXDIM 8

const char *rt_dtype_name(RtDtype dt); /* "F32", ... */
size_t rt_dtype_size(RtDtype dt);      /* bytes per element */
int rt_dtype_parse(const char *s, RtDtype *dt); /* 0 on success, -1 unknown */

/* Writer: collect tensors (data is borrowed until save), then save atomically:
 * write PATH.tmp.PID in the same directory (locked with flock while it is
 * written), fflush, fsync, rename over PATH, fsync the directory. An existing
 * PATH that is not a regular file (a directory, FIFO, device) is refused. On
 * any failure the temp file is removed and an existing PATH is left
 * untouched. */
typedef struct RtStWriter RtStWriter;

RtStWriter *rt_st_writer_new(void);
void rt_st_writer_free(RtStWriter *w);
/* shape has ndim entries (ndim 0 is a scalar); duplicate names are an error. */
int rt_st_add(RtStWriter *w, const char *name, RtDtype dtype, int ndim,
              const int64_t *shape, const void *data);
/* A "__metadata__" string entry, e.g. ("step", "100"). */
int rt_st_add_meta(RtStWriter *w, const char *key, const char *value);
int rt_st_save(RtStWriter *w, const char *path);

/* Reader: the file is mapped read-only and fully validated on open (length,
 * JSON syntax, dtypes, shapes, offsets in range, no overlap, no gaps, bytes ==
 * shape product × dtype size). Messages name the file and the tensor. */
typedef struct RtStTensor {
  char *name;
  RtDtype dtype;
  int ndim;
  int64_t shape[RT_ST_MAXDIM];
  size_t nbytes;
  const void *data; /* into the mapping; may be unaligned, copy with memcpy */
} RtStTensor;

typedef struct RtStFile {
  char *path;
  unsigned char *map;
  size_t size;
  int ntensors;
  RtStTensor *tensors; /* sorted by name */
  int nmeta;
  char **meta_keys, **meta_vals;
} RtStFile;

int rt_st_open(RtStFile **out, const char *path);
void rt_st_close(RtStFile *f);
/* NULL when absent (no error set). */
const RtStTensor *rt_st_find(const RtStFile *f, const char *name);
/* NULL when absent. */
const char *rt_st_meta(const RtStFile *f, const char *key);
/* Copy a whole tensor, checking that it exists with this dtype and shape. */
int rt_st_read(const RtStFile *f, const char *name, RtDtype dtype, int ndim,
               const int64_t *shape, void *dst);
/* Copy the slice [start, start+len) along dimension dim of a tensor whose
 * full shape must be `shape` (for tensor-parallel shards): dst gets shape
 * with shape[dim] replaced by len. */
int rt_st_read_slice(const RtStFile *f, const char *name, RtDtype dtype, int ndim,
                     const int64_t *shape, int dim, int64_t start, int64_t len,
                     void *dst);

/* What a program expects to find in a checkpoint. */
typedef struct RtStSpec {
  const char *name;
  RtDtype dtype;
  int ndim;
  int64_t shape[RT_ST_MAXDIM];
} RtStSpec;

/* Check the file holds exactly these tensors (extra ones are an error unless
 * allow_extra): one RT_ERR_MISMATCH message of a few lines counts the
 * missing, extra and wrong shape/dtype tensors and names the first few of
 * each. */
int rt_st_check(const RtStFile *f, const RtStSpec *specs, int nspecs, int allow_extra);
/* The same, with a line naming the model the file holds (its __metadata__
 * "model", when recorded) and `model`, the one expected. */
int rt_st_check_model(const RtStFile *f, const RtStSpec *specs, int nspecs, int allow_extra,
                      const char *model);

/* ---------------------------------------------------------------------------
 * data.c — token streams for training.
 *
 * Formats: RT_DATA_U16 raw little-endian uint16 tokens (nanoGPT .bin);
 * RT_DATA_LLMC llm.c files (256 int32 header, magic 20240520, version 1 =
 * uint16 tokens, 2 = uint32, header[2] = token count); RT_DATA_TEXT bytes
 * of (UTF-8) text, one token per byte (vocab >= 256). RT_DATA_AUTO picks
 * LLMC when the magic is present, U16 for a name ending in ".bin", else TEXT.
 *
 * The stream of n tokens is cut into nwin = (n-1)/T windows of T+1 tokens,
 * window w = tokens [w*T, w*T+T]. Global batch `step` (B rows) takes the
 * windows g = step*B + row, row < B, epoch e = g / nwin, in the order
 * i = g % nwin, or a seeded permutation of it per epoch when shuffle is on
 * (a cycle-walking Feistel network: no memory, same on every rank). A rank
 * reads only its rows; the result never depends on how rows are split. */

enum { RT_DATA_AUTO = 0, RT_DATA_U16, RT_DATA_LLMC, RT_DATA_TEXT };

typedef struct RtData {
  char *path;
  int format;
  unsigned char *map;
  size_t map_size;
  const unsigned char *tokens; /* first token */
  int tok_bytes;               /* 1, 2 or 4 */
  size_t ntok;
  size_t nwin;
  int B, T, vocab, shuffle;
  uint64_t seed;
} RtData;

/* Open and validate (every token < vocab); B is the global batch size. */
int rt_data_open(RtData *d, const char *path, int format, int vocab, int B, int T,
                 int shuffle, uint64_t seed);
/* inputs, targets are (nrows,T): rows [row0, row0+nrows) of global batch step. */
int rt_data_batch(const RtData *d, long step, int row0, int nrows,
                  int32_t *inputs, int32_t *targets);
/* Columns [t0, t0+tn) of those rows (a sequence shard: sp=ring): inputs,
 * targets are (nrows,tn), token t0+t of each row and its successor. */
int rt_data_batch_cols(const RtData *d, long step, int row0, int nrows, int t0, int tn,
                       int32_t *inputs, int32_t *targets);
void rt_data_close(RtData *d);

/* ---------------------------------------------------------------------------
 * metrics.c — JSONL metrics and a progress line.
 */

typedef struct RtMetrics {
  FILE *f; /* NULL: logging off */
} RtMetrics;

/* path NULL: logging off (every call is a no-op). append: keep old lines. */
int rt_metrics_open(RtMetrics *m, const char *path, int append);
/* One line, flushed:
 * {"step":1,"loss":4.17,"lr":0.0006,"step_ms":12.3,"tokens_per_s":10400,
 *  "model_tflops_per_device":0.0421,"mfu":0.421}
 * loss %.9g, lr %.6g, step_ms %.6g, tokens_per_s %.0f, model_tflops_per_device
 * (model FLOPs, no recompute, per second and device, in 10^12) and mfu (that
 * over the device's peak, a fraction) %.4g; non-finite (unknown) -> null. */
int rt_metrics_log(RtMetrics *m, long step, double loss, double lr, double step_ms,
                   double tokens_per_s, double model_tflops, double mfu);
int rt_metrics_close(RtMetrics *m);

typedef struct RtProgress {
  FILE *out;   /* stderr by default */
  long total;  /* steps in the run */
  long every;  /* non-tty: one line every this many steps (and the last) */
  int tty;     /* out is a terminal: redraw one line with \r */
  int quiet;   /* print nothing */
  int drawn;   /* a \r line is on screen */
  long first;  /* first step seen, for the ETA */
  double t_first;
} RtProgress;

void rt_progress_init(RtProgress *p, long total_steps, long every, int quiet);
/* "step 12/200 | loss 4.1700 | 10.4k tok/s | 42.1 GFLOP/s/dev | MFU 42.1% | ETA 1m23s"
 * (step is 1-based; model FLOP/s per device and MFU as rt_metrics_log's, each
 * left out when not finite). */
void rt_progress_step(RtProgress *p, long step, double loss, double tokens_per_s,
                      double model_tflops, double mfu);
/* Ends a \r line with a newline. */
void rt_progress_done(RtProgress *p);

#ifdef __cplusplus
}
#endif

#endif
