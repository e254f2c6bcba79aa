/* train_support.c — the training driver's plumbing (train_internal.h) and
 * the local pieces of sharded ops generated code calls (rt_train.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"
#include "rt_optim.h"
#include "train_internal.h"

/* ---- small helpers ---- */

void rt_commas(char *buf, size_t cap, unsigned long long n) {
  char tmp[32];
  int len = snprintf(tmp, sizeof tmp, "%llu", n), o = 0;
  for (int i = 0; i < len && (size_t)o + 1 < cap; i++) {
    if (i && (len - i) % 3 == 0 && (size_t)o + 2 < cap)
      buf[o++] = ',';
    buf[o++] = tmp[i];
  }
  buf[o] = 0;
}

uint64_t rt_name_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static size_t elt(const RtProgram *pg) { return pg->f64 ? sizeof(double) : sizeof(float); }

/* ---- flags ---- */

static void usage(const RtProgram *pg, FILE *f) {
  char np[32];
  unsigned long long count = 0;
  for (int i = 0; i < pg->nparams; i++)
    count += pg->params[i].numel;
  rt_commas(np, sizeof np, count);
  fprintf(f,
          "usage: train [--steps N] [--seed S] [--data FILE] [--load CKPT] [--save CKPT]\n"
          "             [--save-every N] [--log FILE.jsonl] [--quiet] [--stop-on-divergence]\n"
          "\n"
          "Trains model '%s' from %s (%s parameters, %s) with the plan\n"
          "printed at start. ",
          pg->name, pg->source, np, pg->f64 ? "f64" : "f32");
  if (pg->ranks > 1)
    fprintf(f, "It runs on %d ranks (mesh %s): mpirun -np %d ./train ...\n", pg->ranks, pg->mesh,
            pg->ranks);
  else
    fprintf(f, "It runs on one rank: ./train ...\n");
  fprintf(f,
          "\n"
          "  --steps N        train until global step N (default %ld, the train block's\n"
          "                   steps); the learning-rate schedule always spans %ld steps,\n"
          "                   so a run cut short and resumed matches an uninterrupted one;\n"
          "                   --steps 0 --save FILE writes the initial weights\n"
          "  --seed S         seed of parameter init, data order and dropout (default %llu)\n",
          pg->steps, pg->steps, (unsigned long long)pg->seed);
  if (pg->data == RT_TRAIN_TOKENS)
    fprintf(f,
            "  --data FILE      training tokens: a text file (one token per byte), a nanoGPT\n"
            "                   .bin (uint16) or an llm.c .bin file; ids below %d\n"
            "                   (default %s)\n",
            pg->vocab, pg->default_data ? pg->default_data : "none");
  else
    fprintf(f, "  --data FILE      not available: this model's inputs (x[%d], labels < %d) come\n"
               "                   from a built-in synthetic teacher task\n",
            pg->features, pg->classes);
  fprintf(f,
          "  --load CKPT      start from a safetensors checkpoint written by --save\n"
          "                   (parameters, optimizer state and step), or from a file\n"
          "                   holding the parameters only\n"
          "  --save CKPT      write a checkpoint after the last step (atomically: temp file,\n"
          "                   fsync, rename; a failed save leaves an existing file intact)\n"
          "  --save-every N   also write it every N steps (needs --save)\n"
          "  --log FILE       write one JSON object per step to FILE (JSONL; appended to\n"
          "                   when resuming with --load):\n"
          "                   {\"step\":1,\"loss\":4.17,\"lr\":0.0006,\"step_ms\":12.3,"
          "\"tokens_per_s\":10400,\n"
          "                   \"model_tflops_per_device\":0.0421,\"mfu\":0.421} (model FLOPs,\n"
          "                   no recompute, per second and device in 10^12, and over the\n"
          "                   device's peak in the mesh's catalog)\n"
          "  --quiet          print nothing but warnings and errors\n"
          "  --stop-on-divergence\n"
          "                   stop (exit 1, without saving) when the loss exceeds %d times\n"
          "                   its first value in this run; without it that is a warning,\n"
          "                   printed once, and training goes on\n"
          "  --comm nccl|mpi  cuda programs: collectives over NCCL (default), or staged\n"
          "                   through host memory and MPI (several ranks on one GPU)\n"
          "  --no-graph       cuda programs: run every step eagerly (by default the steps\n"
          "                   after the first replay CUDA graphs of the step)\n"
          "  --gemm-algos FILE\n"
          "                   cuda programs: where the GEMM algorithms chosen by timing are\n"
          "                   kept (default: this program's path + .gemm-algos): the first\n"
          "                   step times cuBLASLt's candidates for each GEMM shape not in\n"
          "                   FILE, the ranks agree, the later steps run the fastest, and\n"
          "                   FILE gets them, so that later runs run the same algorithms\n"
          "  --no-gemm-tune   cuda programs: cuBLASLt's heuristic's first algorithm for\n"
          "                   every GEMM; no timing, no file\n"
          "  --help           print this help\n"
          "\n"
          "Exit status: 0 on success, 1 on a run-time error (bad data or checkpoint, a\n"
          "non-finite loss, a diverging one with --stop-on-divergence, wrong number of\n"
          "ranks), 2 on a usage error.\n",
          RT_DIVERGENCE_FACTOR);
}

static int parse_long(const char *s, long lo, long *out) {
  if (!s || !*s)
    return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo)
    return -1;
  *out = v;
  return 0;
}

/* --flag VALUE or --flag=VALUE */
static const char *flag_value(int argc, char **argv, int *i, const char *flag, int *missing) {
  size_t n = strlen(flag);
  if (strncmp(argv[*i], flag, n))
    return NULL;
  if (argv[*i][n] == '=')
    return argv[*i] + n + 1;
  if (argv[*i][n])
    return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

int rt_train_args_parse(RtTrainArgs *a, const RtProgram *pg, int argc, char **argv, int print) {
  memset(a, 0, sizeof *a);
  a->steps = pg->steps;
  a->seed = pg->seed;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v = NULL, *bad = NULL;
    int missing = 0;
    long n = 0;
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      if (print)
        usage(pg, stdout);
      return 1;
    } else if (!strcmp(arg, "--quiet") || !strcmp(arg, "-q")) {
      a->quiet = 1;
    } else if (!strcmp(arg, "--no-graph")) {
      a->no_graph = 1;
    } else if (!strcmp(arg, "--no-gemm-tune")) {
      a->no_gemm_tune = 1;
    } else if ((v = flag_value(argc, argv, &i, "--gemm-algos", &missing))) {
      a->gemm_algos = v;
    } else if (!strcmp(arg, "--stop-on-divergence")) {
      a->stop_on_divergence = 1;
    } else if ((v = flag_value(argc, argv, &i, "--steps", &missing))) {
      if (parse_long(v, 0, &a->steps))
        bad = "--steps needs a whole number >= 0";
    } else if ((v = flag_value(argc, argv, &i, "--seed", &missing))) {
      if (parse_long(v, 0, &n))
        bad = "--seed needs a whole number >= 0";
      a->seed = (uint64_t)n;
    } else if ((v = flag_value(argc, argv, &i, "--save-every", &missing))) {
      if (parse_long(v, 1, &a->save_every))
        bad = "--save-every needs a whole number >= 1";
    } else if ((v = flag_value(argc, argv, &i, "--gradcheck", &missing))) {
      if (parse_long(v, 1, &n) || n > 1000)
        bad = "--gradcheck needs a count in [1, 1000]";
      a->gradcheck = (int)n;
    } else if ((v = flag_value(argc, argv, &i, "--data", &missing))) {
      a->data = v;
    } else if ((v = flag_value(argc, argv, &i, "--load", &missing))) {
      a->load = v;
    } else if ((v = flag_value(argc, argv, &i, "--save", &missing))) {
      a->save = v;
    } else if ((v = flag_value(argc, argv, &i, "--log", &missing))) {
      a->log = v;
    } else if ((v = flag_value(argc, argv, &i, "--comm", &missing))) {
      a->comm_set = 1;
      a->comm_mpi = !strcmp(v, "mpi");
      if (strcmp(v, "mpi") && strcmp(v, "nccl"))
        bad = "--comm needs nccl or mpi";
    } else if (!missing) {
      if (print)
        fprintf(stderr, "train: error: unknown argument '%s' (see --help)\n", arg);
      return -1;
    }
    if (missing) {
      if (print)
        fprintf(stderr, "train: error: %s needs a value (see --help)\n", arg);
      return -1;
    }
    if (v && !*v && !bad) {
      if (print) /* arg: the flag, or FLAG= */
        fprintf(stderr, "train: error: %.*s needs a non-empty value, got ''\n",
                (int)strcspn(arg, "="), arg);
      return -1;
    }
    if (bad) {
      if (print)
        fprintf(stderr, "train: error: %s, got '%s'\n", bad, v ? v : "");
      return -1;
    }
  }
  if (a->save_every && !a->save) {
    if (print)
      fprintf(stderr, "train: error: --save-every needs --save CKPT\n");
    return -1;
  }
  if (a->gemm_algos && a->no_gemm_tune) {
    if (print)
      fprintf(stderr, "train: error: --gemm-algos keeps timed GEMM algorithms, --no-gemm-tune "
                      "times none: give one of them\n");
    return -1;
  }
  if (a->data && pg->data != RT_TRAIN_TOKENS) {
    if (print)
      fprintf(stderr, "train: error: --data: model '%s' takes no token data (its inputs come "
                      "from the built-in synthetic task)\n", pg->name);
    return -1;
  }
  return 0;
}

/* ---- launch, arena, init, schedule ---- */

static int env_int(const char *name, int def) {
  const char *s = getenv(name);
  long v = 0;
  return s && !parse_long(s, 0, &v) && v <= INT_MAX ? (int)v : def;
}

int rt_launcher_ranks(int *rank) {
  static const char *sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  static const char *ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
  for (int i = 0; i < 3; i++) {
    int n = env_int(sizes[i], 0);
    if (n > 0) {
      *rank = env_int(ranks[i], 0);
      return n;
    }
  }
  *rank = 0;
  return 1;
}

/* Freed memory stays with the process: MPI's collectives allocate their
 * temporary buffers per call (a reduce-scatter of a sequence-parallel
 * activation: megabytes), which glibc would otherwise map and unmap each
 * time, paying a page fault per 4 KiB on every touch (18,000 a step of
 * the bench GPT under sp=megatron on 2 ranks, 7% of its step time).
 * Buffers up to 32 MiB come from the heap, which is never trimmed. */
void rt_malloc_setup(void) {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

extern char *openblas_get_corename(void) __attribute__((weak));

const char *rt_blas_core(void) { return openblas_get_corename ? openblas_get_corename() : NULL; }

void rt_blas_setup(int argc, char **argv) {
  (void)argc;
  if (getenv("OPENBLAS_CORETYPE") || getenv("SHARDC_BLAS_REEXEC"))
    return;
  const char *core = rt_blas_core();
  if (!core || strcasecmp(core, "prescott"))
    return;
  __builtin_cpu_init();
  const char *want = __builtin_cpu_supports("avx512f")  ? "SkylakeX"
                     : __builtin_cpu_supports("avx2") ? "Haswell"
                                                      : NULL;
  if (!want)
    return;
  /* OpenBLAS picks its kernels when it loads, before main: run again. */
  setenv("OPENBLAS_CORETYPE", want, 1);
  setenv("SHARDC_BLAS_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE"); /* exec failed: carry on with what we have */
}

void rt_train_threads(int ranks) {
  /* each pool the environment does not size: OPENBLAS_NUM_THREADS=1 alone
   * (a common habit) left OpenMP at every core in every rank, and 4 ranks
   * on 2 cores ran ten times slower */
  rt_set_threads_unless_env(rt_threads_per_rank(ranks));
}

void rt_params_init(const RtProgram *pg, const RtParam *ps, int n, unsigned char *base,
                    uint64_t seed) {
  for (int i = 0; i < n; i++) {
    const RtParam *p = &ps[i];
    void *buf = base + p->offset;
    double c = p->init == RT_INIT_ONES ? 1 : 0;
    if (p->init == RT_INIT_NORMAL) {
      if (pg->f64)
        rt_init_normal_f64(buf, p->numel, p->std, seed, rt_name_hash(p->name), 0);
      else
        rt_init_normal_f32(buf, p->numel, p->std, seed, rt_name_hash(p->name), 0);
    } else if (pg->f64) {
      rt_init_const_f64(buf, p->numel, c);
    } else {
      rt_init_const_f32(buf, p->numel, c);
    }
  }
}

double rt_train_lr(const RtProgram *pg, long step) {
  return rt_lr(step, pg->lr, pg->warmup, pg->steps, pg->min_lr_ratio,
               pg->cosine ? RT_LR_COSINE : RT_LR_CONSTANT);
}

/* ---- data ---- */

#define RT_SYNTH_SALT 0x5EED5A17DA7A0001ull
#define RT_TEACHER_SEED 0x7EAC4E5EEDull

int rt_train_data_open(RtTrainData *d, const RtProgram *pg, const char *path, uint64_t seed) {
  memset(d, 0, sizeof *d);
  d->pg = pg;
  d->seed = seed;
  if (pg->data == RT_TRAIN_SYNTH)
    return RT_OK;
  if (!path)
    path = pg->default_data;
  if (!path)
    return rt_errorf(RT_ERR_ARG, "no training data: pass --data FILE");
  return rt_data_open(&d->tok, path, RT_DATA_AUTO, pg->vocab, pg->batch, pg->seq, 1, seed);
}

/* Test hook for the PyTorch-parity tests: with SHARDC_DUMP_BATCHES=FILE every
 * batch read is appended to FILE as raw 4-byte values, inputs then targets,
 * so the reference trains on exactly the same data. */
static void dump_batch(const RtProgram *pg, int nrows, const void *in0, const void *in1) {
  static FILE *f;
  static int tried;
  if (!tried) {
    tried = 1;
    const char *path = getenv("SHARDC_DUMP_BATCHES");
    if (path && *path) f = fopen(path, "ab");
  }
  if (!f || pg->f64) return;
  size_t n0 = (size_t)nrows * (size_t)(pg->data == RT_TRAIN_TOKENS ? pg->seq : pg->features);
  size_t n1 = (size_t)nrows * (size_t)(pg->data == RT_TRAIN_TOKENS ? pg->seq : 1);
  fwrite(in0, 4, n0, f);
  fwrite(in1, 4, n1, f);
  fflush(f);
}

int rt_train_data_batch(const RtTrainData *d, long step, int row0, int nrows, void *in0, void *in1) {
  const RtProgram *pg = d->pg;
  if (pg->data == RT_TRAIN_TOKENS) {
    int rc = rt_data_batch(&d->tok, step, row0, nrows, in0, in1);
    if (rc == RT_OK) dump_batch(pg, nrows, in0, in1);
    return rc;
  }
  int K = pg->features, V = pg->classes;
  int32_t *labels = in1;
  for (int r = 0; r < nrows; r++) {
    uint64_t g = (uint64_t)step * (uint64_t)pg->batch + (uint64_t)(row0 + r);
    double best = -INFINITY;
    int arg = 0;
    for (int c = 0; c < V; c++) {
      double s = 0;
      for (int k = 0; k < K; k++)
        s += rt_rng_normal(RT_TEACHER_SEED, (uint64_t)c, (uint64_t)k) *
             rt_rng_normal(d->seed ^ RT_SYNTH_SALT, g, (uint64_t)k);
      if (s > best)
        best = s, arg = c;
    }
    labels[r] = arg;
    for (int k = 0; k < K; k++) {
      double x = rt_rng_normal(d->seed ^ RT_SYNTH_SALT, g, (uint64_t)k);
      if (pg->f64)
        ((double *)in0)[(size_t)r * K + k] = x;
      else
        ((float *)in0)[(size_t)r * K + k] = (float)x;
    }
  }
  dump_batch(pg, nrows, in0, in1);
  return RT_OK;
}

int rt_train_data_batch_cols(const RtTrainData *d, long step, int row0, int nrows, int t0, int tn,
                       void *in0, void *in1) {
  const RtProgram *pg = d->pg;
  if (pg->data != RT_TRAIN_TOKENS)
    return rt_errorf(RT_ERR_ARG, "a sequence shard of the data needs token data");
  return rt_data_batch_cols(&d->tok, step, row0, nrows, t0, tn, in0, in1);
}

void rt_train_data_close(RtTrainData *d) {
  if (d->pg && d->pg->data == RT_TRAIN_TOKENS)
    rt_data_close(&d->tok);
  d->pg = NULL;
}

void rt_train_data_describe(const RtTrainData *d, char *buf, size_t cap) {
  const RtProgram *pg = d->pg;
  if (pg->data == RT_TRAIN_SYNTH) {
    snprintf(buf, cap, "built-in synthetic task: x ~ N(0,1)^%d, label = argmax of a fixed "
                       "random linear teacher over %d classes", pg->features, pg->classes);
    return;
  }
  char n[32], w[32];
  rt_commas(n, sizeof n, d->tok.ntok);
  rt_commas(w, sizeof w, d->tok.nwin);
  const char *fmt = d->tok.format == RT_DATA_TEXT ? "text bytes"
                    : d->tok.format == RT_DATA_LLMC ? "llm.c tokens" : "uint16 tokens";
  int len = snprintf(buf, cap, "%s: %s tokens (%s), %s windows of %d, shuffled per epoch",
                     d->tok.path, n, fmt, w, pg->seq);
  rt_mark_cut(buf, cap, len);
}

/* ---- checkpoints ---- */

static const char *opt_prefix(const RtProgram *pg, int which) {
  if (pg->opt == RT_OPT_ADAMW)
    return which ? "optimizer.exp_avg_sq." : "optimizer.exp_avg.";
  return "optimizer.momentum_buffer.";
}

static void free_specs(RtStSpec *s, int n) {
  for (int i = 0; i < n; i++)
    free((char *)s[i].name);
  free(s);
}

/* Shampoo and Adafactor: the state tensors of parameter p (rt_optim.h's
 * layout), as optimizer.NAME.shampoo.L.<block> etc. (docs/language.md);
 * filled into s[n..] and d[n..] when s is given.  Returns how many, or -1
 * out of memory. */
static int blocked_specs(const RtProgram *pg, const RtParam *p, RtStSpec *s, const void **d,
                         int n, const unsigned char *base) {
  const size_t es = pg->f64 ? 8 : 4;
  const int mom = pg->beta1 > 0;
  const int64_t numel = (int64_t)p->numel;
  int k = 0;
  size_t off = (size_t)p->opt;
#define ENTRY(fmt, arg, nd, d0, d1)                                                    \
  do {                                                                                 \
    if (s) {                                                                           \
      char buf[64];                                                                    \
      snprintf(buf, sizeof buf, fmt, arg);                                             \
      char *name = malloc(strlen(p->name) + strlen(buf) + 12);                        \
      if (!name)                                                                       \
        return -1;                                                                     \
      sprintf(name, "optimizer.%s.%s", p->name, buf);                                  \
      RtStSpec *e = &s[n + k];                                                         \
      e->name = name;                                                                  \
      e->dtype = pg->f64 ? RT_F64 : RT_F32;                                            \
      e->ndim = (nd);                                                                  \
      if ((nd) == 0) {                                                                 \
        e->ndim = p->ndim;                                                             \
        memcpy(e->shape, p->shape, sizeof p->shape);                                   \
      } else {                                                                         \
        e->shape[0] = (d0);                                                            \
        e->shape[1] = (d1);                                                            \
      }                                                                                \
      if (d)                                                                           \
        d[n + k] = base + off;                                                         \
    }                                                                                  \
    int64_t cnt = (nd) == 0 ? numel : (nd) == 1 ? (int64_t)(d0) : (int64_t)(d0) * (d1); \
    off += (size_t)cnt * es;                                                           \
    k++;                                                                               \
  } while (0)
  if (pg->opt == RT_OPT_ADAFACTOR) {
    if (mom)
      ENTRY("adafactor.%s", "momentum", 0, 0, 0);
    if (p->ndim == 2) {
      ENTRY("adafactor.%s", "row", 1, p->shape[0], 0);
      ENTRY("adafactor.%s", "col", 1, p->shape[1], 0);
    } else {
      ENTRY("adafactor.%s", "v", 0, 0, 0);
    }
    return k;
  }
  if (mom)
    ENTRY("shampoo.%s", "momentum", 0, 0, 0);
  if (pg->graft != RT_GRAFT_SGD)
    ENTRY("shampoo.%s", "graft", 0, 0, 0);
  if (!rt_shampoo_preconditioned(p->ndim, p->shape))
    return k;
  const int64_t R = p->shape[0], C = p->shape[1], B = pg->block;
  const int64_t nbc = rt_shampoo_nblocks(C, B);
  for (int64_t i = 0; i < rt_shampoo_nblocks(R, B); i++)
    for (int64_t j = 0; j < nbc; j++) {
      int64_t r = rt_shampoo_bsize(R, B, i), c = rt_shampoo_bsize(C, B, j), b = i * nbc + j;
      ENTRY("shampoo.L.%lld", (long long)b, 2, r, r);
      ENTRY("shampoo.R.%lld", (long long)b, 2, c, c);
      ENTRY("shampoo.L_root.%lld", (long long)b, 2, r, r);
      ENTRY("shampoo.R_root.%lld", (long long)b, 2, c, c);
    }
#undef ENTRY
  return k;
}

/* The checkpoint's tensors: ps[0..np), then their optimizer state; names
 * are allocated (free with free_specs). */
static int ckpt_specs(const RtProgram *pg, const RtParam *ps, int np, RtStSpec **out,
                      const void ***data, int with_opt, const unsigned char *base) {
  int n = 0, cap = np * RT_SLOTS;
  if (pg->opt >= RT_OPT_SHAMPOO && with_opt) {
    for (int i = 0; i < np; i++)
      if (ps[i].opt >= 0)
        cap += blocked_specs(pg, &ps[i], NULL, NULL, 0, base);
  }
  RtStSpec *s = calloc((size_t)cap + 1, sizeof *s);
  const void **d = calloc((size_t)cap + 1, sizeof *d);
  if (!s || !d) {
    free(s);
    free(d);
    return -1;
  }
  RtDtype dt = pg->f64 ? RT_F64 : RT_F32;
  for (int pass = 0; pass < RT_SLOTS; pass++)
    for (int i = 0; i < np; i++) {
      const RtParam *p = &ps[i];
      int64_t off = rt_param_slot(p, pass);
      if (pass > 0 && (!with_opt || off < 0))
        continue;
      if (pass > 0 && pg->opt >= RT_OPT_SHAMPOO) {
        if (pass > 1)
          continue;
        int k = blocked_specs(pg, p, s, d, n, base);
        if (k < 0) {
          free_specs(s, n);
          free(d);
          return -1;
        }
        n += k;
        continue;
      }
      const char *pre = pass == 0 ? "" : opt_prefix(pg, pass - 1);
      char *name = malloc(strlen(pre) + strlen(p->name) + 1);
      if (!name) {
        free_specs(s, n);
        free(d);
        return -1;
      }
      strcpy(name, pre);
      strcat(name, p->name);
      s[n].name = name;
      s[n].dtype = dt;
      s[n].ndim = p->ndim;
      memcpy(s[n].shape, p->shape, sizeof p->shape);
      d[n] = base + off;
      n++;
    }
  *out = s;
  if (data)
    *data = d;
  else
    free(d);
  return n;
}

/* What a file that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
                          : "a special file";
}

/* Whether the temporary file name (in path's directory) was left by an
 * interrupted save: PATH.tmp.PID (rt_st_save's name) of a process that no
 * longer exists on this machine, or of this one (a reused id: this process
 * has not saved yet), whose lock no process holds (a live writer holds
 * one, on any machine). *pid: the id in its name. */
static int stale_temp(const char *dir, const char *name, const char *base, char *full,
                      size_t cap, long *pid, off_t *bytes) {
  size_t nb = strlen(base);
  if (strncmp(name, base, nb) || strncmp(name + nb, ".tmp.", 5))
    return 0;
  const char *digits = name + nb + 5;
  char *end;
  errno = 0;
  long p = strtol(digits, &end, 10);
  if (!*digits || *digits < '1' || *digits > '9' || *end || errno || p > INT_MAX)
    return 0;
  if ((size_t)snprintf(full, cap, "%s/%s", dir, name) >= cap)
    return 0;
  struct stat st;
  if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode))
    return 0;
  if (p != (long)getpid() && !(kill((pid_t)p, 0) != 0 && errno == ESRCH))
    return 0;
  int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return 0;
  int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  *pid = p;
  *bytes = st.st_size;
  return !held;
}

void rt_ckpt_remove_stale(const char *path, int say) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  const char *base = slash ? slash + 1 : path;
  if (!slash || slash == path)
    snprintf(dir, sizeof dir, "%s", slash ? "/" : ".");
  else if ((size_t)snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path) >= sizeof dir)
    return;
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  char full[8192];
  while ((e = readdir(d))) {
    long pid;
    off_t bytes;
    if (!stale_temp(dir, e->d_name, base, full, sizeof full, &pid, &bytes))
      continue;
    char n[32];
    rt_commas(n, sizeof n, (unsigned long long)bytes);
    if (unlink(full) != 0)
      fprintf(stderr, "train: warning: cannot remove '%s', the temporary file of an interrupted "
                      "save (process %ld no longer exists): %s\n", full, pid, strerror(errno));
    else if (say)
      printf("removed:  %s (%s bytes), the temporary file of an interrupted save (process %ld "
             "no longer exists)\n", full, n, pid);
  }
  closedir(d);
  fflush(stdout);
}

int rt_ckpt_check_target(const char *path, int say) {
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return rt_errorf(RT_ERR_IO, "%s: cannot save a checkpoint there: it is %s%s", path,
                     file_kind(st.st_mode),
                     S_ISDIR(st.st_mode) ? "" : ", not a regular file (a save would replace it)");
  rt_ckpt_remove_stale(path, say);
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
    return rt_errorf(RT_ERR_ARG, "%s: path too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return rt_errorf(RT_ERR_IO, "%s: cannot save a checkpoint there: cannot create '%s': %s",
                     path, tmp, strerror(errno));
  close(fd);
  unlink(tmp);
  return RT_OK;
}

/* Test hook (SHARDC_TEST_DIE_IN_SAVE=1): the process kills itself with
 * SIGKILL in the middle of writing the temporary file, as `kill -9` during a
 * save would. The data of one small tensor written late is placed so that it
 * runs into an inaccessible page; copying it into the stdio buffer faults,
 * and the fault handler sends SIGKILL. Earlier bytes are already in the file. */
static void die_in_save(int sig) {
  static const char msg[] = "train: test hook: killed (SIGKILL) while writing the checkpoint\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  kill(getpid(), SIGKILL);
}

static const void *tripwire(const RtStSpec *s, const void **data, int n, size_t eltsz) {
  int pick = -1;
  size_t bytes = 0;
  for (int i = 0; i < n; i++) {
    size_t b = eltsz;
    for (int k = 0; k < s[i].ndim; k++)
      b *= (size_t)s[i].shape[k];
    if (b < 2 || b > 2048)
      continue;
    if (pick < 0 || strcmp(s[i].name, s[pick].name) > 0)
      pick = i, bytes = b;
  }
  if (pick < 0)
    return NULL;
  long page = sysconf(_SC_PAGESIZE);
  unsigned char *map = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    return NULL;
  unsigned char *start = map + page - bytes / 2;
  memcpy(start, data[pick], bytes / 2);
  mprotect(map + page, (size_t)page, PROT_NONE);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = die_in_save;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  data[pick] = start;
  return start;
}

static const char *opt_name(const RtProgram *pg) {
  return pg->opt == RT_OPT_ADAMW     ? "adamw"
         : pg->opt == RT_OPT_SGD     ? "sgd"
         : pg->opt == RT_OPT_SHAMPOO ? "shampoo"
                                     : "adafactor";
}

/* A checkpoint that does not match the program because another optimizer
 * (or Shampoo with another block) wrote it: its tensor lists say what
 * differs, this line why and what loads.  Inserted after the message's
 * first line; nothing when the file names no optimizer or the same one. */
static int explain_optimizer(const RtStFile *f, const RtProgram *pg, int rc) {
  const char *fo = rt_st_meta(f, "optimizer"), *fb = rt_st_meta(f, "shampoo_block");
  char theirs[160], mine[64];
  snprintf(theirs, sizeof theirs, "%.40s%s%.20s%s", fo ? fo : "", fb ? " (block " : "",
           fb ? fb : "", fb ? ")" : "");
  snprintf(mine, sizeof mine, "%s", opt_name(pg));
  if (pg->opt == RT_OPT_SHAMPOO)
    snprintf(mine, sizeof mine, "shampoo (block %d)", pg->block);
  /* a file without the block (older) names the optimizer only */
  if (!fo || !strcmp(theirs, mine) || (!fb && !strcmp(fo, opt_name(pg))))
    return rc;
  char prev[4096];
  snprintf(prev, sizeof prev, "%s", rt_last_error());
  size_t first = strcspn(prev, "\n");
  return rt_errorf(rc, "%.*s\n  optimizer: the checkpoint was written by %s, this program trains "
                       "with %s: its parameters alone load from a copy without the optimizer.* "
                       "tensors and the \"step\" metadata (the optimizer then starts from zero)%s",
                   (int)first, prev, theirs, mine, prev + first);
}

/* The first element of tensors s[0..n) at data[] that is not finite: the
 * tensor's index (-1: every element is finite), *at the element's index in
 * it and *what "NaN", "+inf" or "-inf".  One pass over the bytes: an
 * integer test of the exponent bits, which the compiler vectorizes; only
 * a tensor that fails it is scanned again for the element. */
static int find_nonfinite(const RtStSpec *s, const void *const *data, int n, size_t es,
                          int64_t *at, const char **what) {
  for (int i = 0; i < n; i++) {
    size_t m = 1;
    for (int k = 0; k < s[i].ndim; k++)
      m *= (size_t)s[i].shape[k];
    const unsigned char *x = data[i];
    unsigned bad = 0;
    if (es == 8)
      for (size_t j = 0; j < m; j++) {
        uint64_t u;
        memcpy(&u, x + 8 * j, 8);
        bad |= (u & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
      }
    else
      for (size_t j = 0; j < m; j++) {
        uint32_t u;
        memcpy(&u, x + 4 * j, 4);
        bad |= (u & 0x7F800000u) == 0x7F800000u;
      }
    if (!bad)
      continue;
    for (size_t j = 0; j < m; j++) {
      double v = es == 8 ? ((const double *)data[i])[j] : (double)((const float *)data[i])[j];
      if (!isfinite(v)) {
        *at = (int64_t)j;
        *what = isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf";
        return i;
      }
    }
  }
  return -1;
}

int rt_ckpt_save(const RtProgram *pg, const RtParam *ps, int np, unsigned char *base,
                 long step, const char *path) {
  if (pg->opt == RT_OPT_SHAMPOO)
    for (int i = 0; i < np; i++) {
      if (ps[i].opt < 0)
        continue;
      if (pg->f64)
        rt_shampoo_symmetrize_f64((double *)(base + ps[i].opt), ps[i].ndim, ps[i].shape,
                                  pg->block, pg->beta1 > 0, pg->graft);
      else
        rt_shampoo_symmetrize_f32((float *)(base + ps[i].opt), ps[i].ndim, ps[i].shape,
                                  pg->block, pg->beta1 > 0, pg->graft);
    }
  RtStSpec *s;
  const void **data;
  int n = ckpt_specs(pg, ps, np, &s, &data, 1, base);
  if (n < 0)
    return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", path);
  /* A diverged update (the loss and the norm are checked before it, not
   * its result) must not replace the last good checkpoint. */
  int64_t at;
  const char *what;
  int bad = find_nonfinite(s, (const void *const *)data, n, elt(pg), &at, &what);
  if (bad >= 0) {
    struct stat st;
    int kept = stat(path, &st) == 0;
    int rc = rt_errorf(RT_ERR_ARG,
                       "after step %ld, tensor '%s' holds %s at element %lld: not saving %s "
                       "(%s); training diverged: lower the learning rate or check the "
                       "optimizer's settings",
                       step, s[bad].name, what, (long long)at, path,
                       kept ? "it keeps its last good state" : "nothing was saved");
    free(data);
    free_specs(s, n);
    return rc;
  }
  const char *hook = getenv("SHARDC_TEST_DIE_IN_SAVE");
  if (hook && *hook && strcmp(hook, "0"))
    tripwire(s, data, n, elt(pg));
  RtStWriter *w = rt_st_writer_new();
  int rc = w ? RT_OK : rt_errorf(RT_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; rc == RT_OK && i < n; i++)
    rc = rt_st_add(w, s[i].name, s[i].dtype, s[i].ndim, s[i].shape, data[i]);
  char stepbuf[32];
  snprintf(stepbuf, sizeof stepbuf, "%ld", step);
  if (rc == RT_OK)
    rc = rt_st_add_meta(w, "step", stepbuf);
  if (rc == RT_OK)
    rc = rt_st_add_meta(w, "model", pg->name);
  if (rc == RT_OK)
    rc = rt_st_add_meta(w, "optimizer", opt_name(pg));
  char blockbuf[32];
  snprintf(blockbuf, sizeof blockbuf, "%d", pg->block);
  if (rc == RT_OK && pg->opt == RT_OPT_SHAMPOO) /* its state's shapes follow the block */
    rc = rt_st_add_meta(w, "shampoo_block", blockbuf);
  if (rc == RT_OK)
    rc = rt_st_save(w, path);
  rt_st_writer_free(w);
  free(data);
  free_specs(s, n);
  return rc;
}

int rt_ckpt_load(const RtProgram *pg, const RtParam *ps, int np, unsigned char *base,
                 const char *path, long *step, int *weights_only) {
  RtStFile *f;
  int rc = rt_st_open(&f, path);
  if (rc)
    return rc;
  /* Optimizer tensors present at all? None (and no step): a weights file. */
  int nopt = 0;
  for (int i = 0; i < f->ntensors; i++)
    nopt += !strncmp(f->tensors[i].name, "optimizer.", 10);
  const char *st = rt_st_meta(f, "step");
  int with_opt = nopt > 0 || st != NULL;
  RtStSpec *s;
  const void **dst;
  int n = ckpt_specs(pg, ps, np, &s, &dst, with_opt, base);
  if (n < 0) {
    rt_st_close(f);
    return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", path);
  }
  rc = rt_st_check_model(f, s, n, 0, pg->name);
  if (rc == RT_ERR_MISMATCH)
    rc = explain_optimizer(f, pg, rc);
  long steps = 0;
  if (rc == RT_OK && with_opt) {
    if (!st || parse_long(st, 0, &steps))
      rc = rt_errorf(RT_ERR_FORMAT, "%s: checkpoint has optimizer state but no valid \"step\" "
                                    "in its __metadata__ (got %s%s%s)",
                     path, st ? "'" : "", st ? st : "none", st ? "'" : "");
  }
  /* Everything was validated above; a read failure now ends the program. */
  for (int j = 0; rc == RT_OK && j < n; j++)
    rc = rt_st_read(f, s[j].name, s[j].dtype, s[j].ndim, s[j].shape, (void *)dst[j]);
  /* Training from a NaN or an infinity only spreads it (a factor's fails
   * the eigendecomposition, a parameter's the first loss): refused here,
   * naming the tensor. */
  int64_t at;
  const char *what;
  int bad = rc == RT_OK ? find_nonfinite(s, (const void *const *)dst, n, elt(pg), &at, &what) : -1;
  if (bad >= 0)
    rc = rt_errorf(RT_ERR_FORMAT, "checkpoint %s: tensor '%s' holds %s at element %lld", path,
                   s[bad].name, what, (long long)at);
  free(dst);
  free_specs(s, n);
  rt_st_close(f);
  if (rc == RT_OK) {
    *step = steps;
    *weights_only = !with_opt;
  }
  return rc;
}

/* ---- memory check ---- */

#define RT_POISON 0xFF

void rt_mem_poison(const RtProgram *pg, unsigned char *arena) {
  memset(arena + pg->persistent_bytes, RT_POISON,
         pg->arena_bytes - pg->persistent_bytes + RT_GUARD_BYTES);
}

size_t rt_mem_highwater(const RtProgram *pg, const unsigned char *arena) {
  size_t end = pg->arena_bytes + RT_GUARD_BYTES;
  while (end > pg->persistent_bytes && arena[end - 1] == RT_POISON)
    end--;
  return (end + 63) / 64 * 64;
}

/* ---- gradient check ---- */

int rt_gradcheck(const RtProgram *pg, unsigned char *arena, RtPassFn pass, void *ctx,
                 int per_tensor) {
  if (!pg->f64) {
    fprintf(stderr, "train: error: --gradcheck needs an f64 build (shardc build --precision=fp64)\n");
    return 1;
  }
  const double h = 1e-5, atol = 1e-8, rtol = 1e-5;
  double loss = pass(ctx, 0, 1);
  printf("gradcheck: loss %.12g at step 1; central differences h=%g, tolerance %g + %g*|g|\n",
         loss, h, atol, rtol);
  int checked = 0, failed = 0, nonzero = 0;
  double worst = 0;
  for (int i = 0; i < pg->nparams; i++) {
    const RtParam *p = &pg->params[i];
    if (p->grad < 0)
      continue;
    double *w = (double *)(arena + p->offset), *g = (double *)(arena + p->grad);
    for (int k = 0; k < per_tensor; k++) {
      size_t idx = (size_t)(rt_rng_u64(0x6C8EC4ull, rt_name_hash(p->name), (uint64_t)k) % p->numel);
      double w0 = w[idx], an = g[idx];
      w[idx] = w0 + h;
      double lp = pass(ctx, 0, 0);
      w[idx] = w0 - h;
      double lm = pass(ctx, 0, 0);
      w[idx] = w0;
      double fd = (lp - lm) / (2 * h);
      double err = fabs(an - fd), tol = atol + rtol * fmax(fabs(an), fabs(fd));
      double rel = err / fmax(fmax(fabs(an), fabs(fd)), 1e-12);
      if (err > tol || !isfinite(fd) || !isfinite(an)) {
        failed++;
        printf("  MISMATCH %s[%zu]: backward %.10g, finite difference %.10g (error %.3g)\n",
               p->name, idx, an, fd, err);
      }
      if (fmax(fabs(an), fabs(fd)) > 1e-6 && rel > worst)
        worst = rel;
      nonzero += fmax(fabs(an), fabs(fd)) > 1e-6;
      checked++;
    }
  }
  printf("gradcheck: %d entries in %d tensors (%d with |g| > 1e-6), %d mismatched; worst "
         "relative error %.3g: %s\n",
         checked, pg->nparams, nonzero, failed, worst, failed ? "FAIL" : "OK");
  return failed ? 1 : 0;
}

/* ---- local pieces of sharded ops ---- */

#define RT_RANGE_EMBED(T, S)                                                                   \
  int rt_embedding_range_forward_##S(T *out, const int32_t *tokens, const T *table, int N,     \
                                     int v0, int Vl, int C, int V) {                           \
    for (int n = 0; n < N; n++) {                                                              \
      int t = tokens[n];                                                                       \
      if (t < 0 || t >= V)                                                                     \
        return rt_errorf(RT_ERR_ARG, "token %d at position %d is outside the vocabulary [0,%d)", \
                         t, n, V);                                                             \
      if (t >= v0 && t < v0 + Vl)                                                              \
        memcpy(out + (size_t)n * C, table + (size_t)(t - v0) * C, sizeof(T) * (size_t)C);      \
      else                                                                                     \
        memset(out + (size_t)n * C, 0, sizeof(T) * (size_t)C);                                 \
    }                                                                                          \
    return RT_OK;                                                                              \
  }                                                                                            \
  void rt_embedding_range_backward_##S(T *dtable, const T *dout, const int32_t *tokens, int N,  \
                                       int v0, int Vl, int C) {                                \
    for (int n = 0; n < N; n++) {                                                              \
      int t = tokens[n];                                                                       \
      if (t < v0 || t >= v0 + Vl)                                                              \
        continue;                                                                              \
      T *d = dtable + (size_t)(t - v0) * C;                                                    \
      const T *g = dout + (size_t)n * C;                                                       \
      for (int c = 0; c < C; c++)                                                              \
        d[c] += g[c];                                                                          \
    }                                                                                          \
  }                                                                                            \
  void rt_acc_##S(T *dst, const T *src, size_t n) {                                           \
    for (size_t i = 0; i < n; i++)                                                             \
      dst[i] += src[i];                                                                        \
  }                                                                                            \
  void rt_chunk_acc_##S(T *dst, const T *src, size_t outer, size_t inner, int P, int r) {     \
    for (size_t o = 0; o < outer; o++) {                                                       \
      T *d = dst + (o * (size_t)P + (size_t)r) * inner;                                        \
      const T *x = src + o * inner;                                                            \
      for (size_t i = 0; i < inner; i++)                                                       \
        d[i] += x[i];                                                                          \
    }                                                                                          \
  }
RT_RANGE_EMBED(float, f32)
RT_RANGE_EMBED(double, f64)

void rt_zero_take(const RtBucket *b, int nb, int r, const void *flat, void *shard, int esize) {
  size_t es = (size_t)esize;
  for (int i = 0; i < nb; i++)
    memcpy((char *)shard + (size_t)b[i].shard * es,
           (const char *)flat + (size_t)(b[i].flat + r * b[i].chunk) * es, (size_t)b[i].chunk * es);
}

void rt_zero_put(const RtBucket *b, int nb, int P, int64_t nshard, const void *all, void *flat,
                 int esize) {
  size_t es = (size_t)esize;
  for (int r = 0; r < P; r++)
    for (int i = 0; i < nb; i++)
      memcpy((char *)flat + (size_t)(b[i].flat + r * b[i].chunk) * es,
             (const char *)all + (size_t)(r * nshard + b[i].shard) * es, (size_t)b[i].chunk * es);
}

void rt_chunk_copy(void *dst, const void *src, size_t outer, size_t inner, int P, int r,
                   int esize) {
  size_t row = inner * (size_t)esize;
  for (size_t o = 0; o < outer; o++)
    memcpy((char *)dst + o * row, (const char *)src + (o * (size_t)P + (size_t)r) * row, row);
}
