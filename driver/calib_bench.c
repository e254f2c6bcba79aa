/* calib_bench.c — the microbenchmarks behind `shardc calibrate`: run under
 * mpirun with the ranks placed as training programs place them (every rank
 * busy at once, threads per rank as the training driver sets them), it
 * measures on every rank at once
 *   - SGEMM throughput over shapes, through the BLAS the programs link;
 *   - a memory-bound kernel's bandwidth over sizes;
 *   - the cost of one kernel call;
 *   - the time of one evaluation of each special function (exp, tanh, ...);
 *   - all-reduce, all-gather, reduce-scatter, broadcast and send/recv over
 *     message sizes, for groups of 2, 4, ... consecutive ranks (all groups
 *     at once, as a plan's tp or dp groups run);
 * the whole suite ROUNDS times (default 3), each figure its fastest round,
 * and rank 0 writes the profile (cost.h's format) to argv[1]. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "profile_colls.h"
#include "rt_math.h"
#include "rt_optim.h"
#include "shardrt.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int world, rank;
/* seconds per trial (SHARDC_CALIB_QUICK: a few ms, for tests) */
static double window = 0.15;

/* Time per call of `body` on every rank at once: a first call sizes the
 * repetitions to about 0.15 s (the same on every rank: the slowest's), then
 * two trials (and the suite runs `rounds` times, below); a trial lasts
 * from the first rank's start to the last rank's end (one node's
 * monotonic clock: ranks sharing cores may start late, after others ran),
 * and the fastest trial is kept (the machine
 * least disturbed by other work; the accuracy benchmark takes the fastest
 * step alike). */
#define TIME_ALL(body, out)                                                            \
  do {                                                                               \
    MPI_Barrier(MPI_COMM_WORLD);                                                     \
    double t0_ = now();                                                              \
    body;                                                                            \
    double d_ = now() - t0_, dmax_;                                                  \
    MPI_Allreduce(&d_, &dmax_, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);              \
    int reps_ = (int)(window / (dmax_ > 1e-7 ? dmax_ : 1e-7));                         \
    reps_ = reps_ < 1 ? 1 : reps_ > 20000 ? 20000 : reps_;                           \
    double tr_[2];                                                                   \
    for (int k_ = 0; k_ < 2; k_++) {                                                 \
      MPI_Barrier(MPI_COMM_WORLD);                                                   \
      double s_ = now(), smin_;                                                      \
      for (int r_ = 0; r_ < reps_; r_++) { body; }                                   \
      double e_ = now(), emax_;                                                      \
      MPI_Allreduce(&s_, &smin_, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);            \
      MPI_Allreduce(&e_, &emax_, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);            \
      tr_[k_] = (emax_ - smin_) / reps_;                                             \
    }                                                                                \
    (out) = fmin(tr_[0], tr_[1]);                                                     \
  } while (0)

/* One linear layer's three GEMMs of an M x N x K product, in the layouts
 * it runs: y = x·Wᵀ, dx = dy·W, dW = dyᵀ·x; seconds per GEMM.  The weight
 * operand is a fresh one each call, rotating through a pool larger than
 * the caches (a step walks all its parameters between two uses of one);
 * the activation operands are reused, as consecutive ops hand a
 * microbatch's activations over through the cache (a small microbatch's
 * stay there, a large one's fall out by themselves).  The weight gradient
 * (dW's output) is the weight-shaped operand there. */
static double time_linear(int M, int N, int K, float *pool, long pool_n) {
  double t;
  /* no product feeds another (values stay of one scale, never
   * subnormal): dx has its own buffer, and the weight gradients their
   * own half of the rotating region */
  float *x_ = pool, *y_ = x_ + (long)M * K, *dx_ = y_ + (long)M * N;
  /* The operands fresh each time: a call's x and weights lie where an
   * earlier call of other shapes wrote its products, and products of
   * products of those, call after call, shrink to subnormal floats, which
   * the CPU computes many times slower (the thin GEMMs below were timed
   * 20 times slow that way).  Values of an activation's range, as the
   * sections after the GEMMs refill the pool with. */
  for (long i = 0; i < pool_n; i++) pool[i] = -2.0f + 4e-3f * (float)(i % 1001);
  float *wpool = dx_ + (long)M * K;
  long wslot = 0, wn = (long)K * N, half = (pool_n - (wpool - pool)) / 2;
  long nw = half / wn > 1 ? half / wn : 1;
  float *gpool = wpool + nw * wn;
#define W_ (wpool + wslot * wn)
#define G_ (gpool + wslot * wn)
  TIME_ALL(wslot = (wslot + 1) % nw;
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x_, K, W_, K, 0.0f, y_, N);
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, y_, N, W_, K, 0.0f, dx_, K);
           cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, y_, N, x_, K, 0.0f, G_, K), t);
#undef W_
#undef G_
  return t / 3;
}

int main(int argc, char **argv) {
  int wrote = 1; /* 0: rank 0 could not write the profile */
  rt_blas_setup(argc, argv); /* OpenBLAS's kernels as the programs get them */
  rt_bind_shared_cores(); /* ranks placed as the programs place them (runtime/threads.c) */
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (getenv("SHARDC_CALIB_QUICK")) window = 0.003;
  int rounds = argc > 2 ? atoi(argv[2]) : 3;
  if (argc < 2 || rounds < 1 || rounds > 100) {
    if (!rank) fprintf(stderr, "usage: mpirun -np N shardc-calib OUT.json [ROUNDS 1-100]\n");
    MPI_Finalize();
    return 1;
  }
  /* threads as runtime/train_support.c's rt_train_threads sets them */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = rt_threads_per_rank(world);
  rt_set_threads_unless_env(threads);

  FILE *out = NULL;
  if (!rank) {
    out = fopen(argv[1], "w");
    if (!out) {
      fprintf(stderr, "shardc calibrate: cannot write %s: %s\n", argv[1], strerror(errno));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *core = rt_blas_core();
    fprintf(out, "{\"shardc_profile\": 1, \"device\": \"cpu\", \"np\": %d, \"threads\": %d, \"cores\": %ld,\n"
            "\"blas_core\": \"%s\",\n", world, threads, cores, core ? core : "unknown");
  }
  /* Every figure is the fastest of `rounds` rounds of the whole suite: a
   * trial's minimum escapes a disturbance of a fraction of a second, but
   * on a shared host a neighbour's memory traffic or a busy core lasts
   * seconds to minutes (bandwidth measured 9 then 14 GB/s a quarter of an
   * hour apart), so the suite runs again later and each figure keeps its
   * least disturbed round. */
  enum { MAXD = 1024, NSH = 18, NTHIN = 7, NBW = 7, NSF = 8, NKERN = 8, NOPS = PROFILE_NCOLL_OPS, NBYTES = 10, NGRP = 13 };
  float *A = malloc(sizeof(float) * MAXD * MAXD * 4), *B = malloc(sizeof(float) * MAXD * MAXD * 4),
        *C = malloc(sizeof(float) * MAXD * MAXD * 4);
  for (long i = 0; i < (long)MAXD * MAXD * 4; i++) A[i] = B[i] = C[i] = 1e-3f * (float)(i % 7);
  /* 64 MiB per rank, over the last-level cache of the whole socket */
  enum { POOL = 16L << 20 };
  float *pool = malloc(sizeof(float) * POOL);
  static const int shapes[NSH][3] = {
      {1, 1, 1},       {8, 8, 8},       {16, 16, 16},     {32, 32, 32},     {64, 64, 64},
      {256, 64, 64},   {128, 128, 128}, {256, 128, 128},  {256, 256, 128},  {256, 256, 256},
      {256, 512, 128}, {512, 384, 128}, {512, 512, 256},  {512, 512, 512},  {1024, 512, 512},
      {1024, 1024, 512}, {1024, 1024, 1024}, {2048, 1024, 1024}};
  static const int thin[NTHIN] = {8, 16, 32, 64, 128, 256, 512};
  enum { REF_SHAPE = 15 }; /* 1024 x 1024 x 512: the FLOPs of 2048 x 512 x 512 */
  static const char *sf_names[NSF] = {"exp", "log", "tanh", "erf", "sin", "cos", "pow", "sqrt"};
  static const char *kern_names[NKERN] = {"gelu", "gelu_bwd", "silu", "silu_bwd",
                                          "layernorm", "layernorm_bwd", "rmsnorm", "rmsnorm_bwd"};
  static const char *ops[NOPS] = {PROFILE_COLL_OPS};
  /* coll_t: a collective behind the GEMM, and gemm_behind the GEMM alone:
   * each the fastest of its rounds, subtracted at the end (the fastest of
   * the differences would keep the rounds where noise made it small) */
  double gemm_t[NSH], bw_t[NBW], sf_t[NSF], kern_t[NKERN], coll_t[NGRP][NOPS][NBYTES];
  /* the thin shapes' rates relative to 2048 x 512 x 512 timed right after
   * each (a disturbance of the host slows both), per round; and the
   * rounds' spread of two figures, to warn of a busy host */
  double gemm_behind = INFINITY, thin_ratio[NTHIN][100];
  /* Shampoo's root = eigh, as the programs compute it: the runtime's
   * rt_shampoo_roots (the fp32 factor to fp64, LAPACK dsyevd, the root
   * rebuilt from the eigenvectors by a SYRK, back to fp32) on two factors
   * of side EK (the default block's), G·Gᵀ of a random EK x 2EK G (full
   * rank) */
  enum { EK = 256 };
  double eigh_t = INFINITY;
  int64_t e_dbl, e_ints;
  const int64_t e_work = rt_shampoo_work(0, EK, 4, &e_dbl, &e_ints);
  RtShampooArgs e_args = {.eps = 1e-6, .root = RT_ROOT_EIGH, .work_elems = 0, .work_k = EK};
  float *eL = malloc(sizeof(float) * 4 * EK * EK), *eG = malloc(sizeof(float) * EK * 2 * EK);
  unsigned char *ew = malloc((size_t)e_work);
  int e_rc = RT_OK;
  if (!eL || !eG || !ew) {
    fprintf(stderr, "shardc calibrate: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (long i = 0; i < (long)EK * 2 * EK; i++) eG[i] = (float)((i * 7919 + rank) % 1000) / 1000.0f - 0.5f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, EK, EK, 2 * EK, 1.0f, eG, 2 * EK, eG, 2 * EK, 0.0f,
              eL, EK);
  double big_lo = INFINITY, big_hi = 0, bw_lo = INFINITY, bw_hi = 0;
  for (int i = 0; i < NSH; i++) gemm_t[i] = INFINITY;
  for (int i = 0; i < NBW; i++) bw_t[i] = INFINITY;
  for (int i = 0; i < NSF; i++) sf_t[i] = INFINITY;
  for (int i = 0; i < NKERN; i++) kern_t[i] = INFINITY;
  for (int g = 0; g < NGRP; g++)
    for (int o = 0; o < NOPS; o++)
      for (int b = 0; b < NBYTES; b++) coll_t[g][o][b] = INFINITY;
  /* groups of n = 2, 4, ... consecutive ranks, all at once */
  MPI_Comm groups[NGRP];
  int ngroups = 0;
  for (int n = 2; n <= world && ngroups < NGRP; n *= 2) {
    groups[ngroups] = MPI_COMM_NULL;
    if (world % n == 0) MPI_Comm_split(MPI_COMM_WORLD, rank / n, rank, &groups[ngroups]);
    ngroups++;
  }
  long maxb = 16L << 20;
  char *sb = malloc((size_t)maxb), *rb = malloc((size_t)maxb);
  memset(sb, 1, (size_t)maxb);
#define BEST(slot, t) ((slot) = fmin((slot), (t)))

  for (int round = 0; round < rounds; round++) {
    for (long i = 0; i < POOL; i++) pool[i] = 1e-3f * (float)(i % 5);
    /* ---- GEMM over shapes: square and the skinny ones training runs ---- */
    for (int i = 0; i < NSH; i++) {
      double t = time_linear(shapes[i][0], shapes[i][1], shapes[i][2], pool, POOL);
      BEST(gemm_t[i], t);
      if (i == NSH - 1) {
        big_lo = fmin(big_lo, t);
        big_hi = fmax(big_hi, t);
      }
    }
    /* thin: the smallest dim alone, the other two large, as a ratio to the
     * reference beside it (the rate written is the ratio's median over the
     * rounds times the reference shape's rate from the curve above) */
    for (int i = 0; i < NTHIN; i++) {
      double tk = time_linear(2048, 512, thin[i], pool, POOL);
      double tr = time_linear(2048, 512, 512, pool, POOL);
      thin_ratio[i][round] = (2.0 * 2048 * 512 * thin[i] / tk) / (2.0 * 2048 * 512 * 512 / tr);
    }
    /* The GEMMs left their products in the pool, and products of products
     * shrink towards subnormal floats, which some CPUs compute many times
     * slower: the pool is refilled with values of an activation's range
     * before the sections that read it next (the streaming kernel below
     * writes each slot's third array from its first two, never chaining, so
     * the kernels' section after it still reads these values). */
    for (long i = 0; i < POOL; i++) pool[i] = -2.0f + 4e-3f * (float)(i % 1001);
    /* ---- memory-bound: y = a + s*b over sizes (3 streams) ---- */
    {
      int k = 0;
      for (long n = 1024; n <= (long)MAXD * MAXD * 4 && k < NBW; n *= 4, k++) {
        double t;
        /* the three arrays rotate through the pool, as a step's kernels meet
         * activations written long before (a GEMM or more in between): warm
         * arrays would measure the cache, 2-3x the bandwidth a layernorm or a
         * fused loop of a training step gets */
        long slot = 0, nslots = POOL / (3 * n) > 1 ? POOL / (3 * n) : 1;
        TIME_ALL(slot = (slot + 1) % nslots; const float *a_ = pool + slot * 3 * n;
                 const float *b_ = a_ + n; float *c_ = (float *)b_ + n;
                 for (long i = 0; i < n; i++) c_[i] = a_[i] + 0.5f * b_[i], t);
        BEST(bw_t[k], t);
        if (k == NBW - 1) {
          bw_lo = fmin(bw_lo, t);
          bw_hi = fmax(bw_hi, t);
        }
      }
    }
    /* ---- special functions: seconds per evaluation, as generated fused
     * loops call them: exp and tanh from rt_math.h (vectorized), the others
     * from libm (one element at a time) ---- */
    {
      enum { NS = 4096 };
      float *in = A, *res = C;
      for (int i = 0; i < NS; i++) in[i] = -4.0f + 8.0f * (float)i / NS; /* activations' range */
      for (int f = 0; f < NSF; f++) {
        double t;
        switch (f) {
        case 0: TIME_ALL(for (int i = 0; i < NS; i++) res[i] = rt_expf(in[i]), t); break;
        case 1: TIME_ALL(for (int i = 0; i < NS; i++) res[i] = logf(in[i] + 4.5f), t); break;
        case 2: TIME_ALL(for (int i = 0; i < NS; i++) res[i] = rt_tanhf(in[i]), t); break;
        case 3: TIME_ALL(for (int i = 0; i < NS; i++) res[i] = erff(in[i]), t); break;
        case 4: TIME_ALL(for (int i = 0; i < NS; i++) res[i] = sinf(in[i]), t); break;
        case 5: TIME_ALL(for (int i = 0; i < NS; i++) res[i] = cosf(in[i]), t); break;
        case 6: TIME_ALL(for (int i = 0; i < NS; i++) res[i] = powf(in[i] + 4.5f, 1.7f), t); break;
        default: TIME_ALL(for (int i = 0; i < NS; i++) res[i] = sqrtf(in[i] + 4.5f), t); break;
        }
        BEST(sf_t[f], t / NS);
      }
    }
    /* ---- the runtime's row and activation kernels a step calls, seconds
     * per element: their passes over the rows, reductions and exp cost more
     * than one streaming pass (GELU: an exp and a division per element;
     * layernorm's backward: three passes and the weight gradients).  Rows of
     * C = 1024, operands rotating through the pool (cold, as in a step). ---- */
    {
      enum { KC = 1024, KR = 1024, KN = KC * KR };
      float *st = A, *w = A + 4 * KR, *bb = w + KC, *dw = bb + KC, *db = dw + KC; /* small, warm */
      for (int i = 0; i < 2 * KR; i++) st[i] = 1.0f + 1e-3f * (float)(i % 7);
      long slot = 0, nslots = POOL / (3L * KN) > 1 ? POOL / (3L * KN) : 1;
#define KOPS_ (slot = (slot + 1) % nslots, pool + slot * 3L * KN)
      for (int k = 0; k < NKERN; k++) {
        double t;
        float *x, *y, *z;
#define KBODY(call) TIME_ALL(x = KOPS_; y = x + KN; z = y + KN; call, t)
        switch (k) {
        case 0: KBODY(rt_gelu_forward_f32(y, x, KN)); break;
        case 1: KBODY(rt_gelu_backward_f32(z, x, y, KN)); break;
        case 2: KBODY(rt_silu_forward_f32(y, x, KN)); break;
        case 3: KBODY(rt_silu_backward_f32(z, x, y, KN)); break;
        case 4: KBODY(rt_layernorm_forward_eps_f32(y, st, st + KR, x, w, bb, KR, KC, 1e-5)); break;
        case 5: KBODY(rt_layernorm_backward_f32(z, dw, db, y, x, w, st, st + KR, KR, KC)); break;
        case 6: KBODY(rt_rmsnorm_forward_f32(y, st + KR, x, w, KR, KC, 1e-5)); break;
        default: KBODY(rt_rmsnorm_backward_f32(z, dw, y, x, w, st + KR, KR, KC)); break;
        }
#undef KBODY
        BEST(kern_t[k], t / KN);
      }
#undef KOPS_
    }
    /* ---- Shampoo's eigendecomposition, every rank at once ---- */
    {
      double t;
      TIME_ALL(e_rc |= rt_shampoo_roots_f32(eL, eL, eL + 2 * EK * EK, eL + 3 * EK * EK, EK, EK, ew,
                                            &e_args),
               t);
      if (e_rc != RT_OK) {
        fprintf(stderr, "shardc calibrate: rank %d: Shampoo's root failed: %s\n", rank, rt_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      BEST(eigh_t, t / 2);
    }
    /* ---- collectives: groups of n consecutive ranks, all at once, as a
     * step meets them: after a stretch of compute on every rank (ranks
     * sharing cores then arrive out of step and must be scheduled in), so
     * each is timed behind a GEMM and the GEMM's own time taken off. ---- */
    const int GM = 192;
    double tg;
#define WORK cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, GM, GM, GM, 1.0f, A, GM, B, GM, 0.0f, C, GM)
    TIME_ALL(WORK, tg);
    BEST(gemm_behind, tg);
    for (int gi = 0; gi < ngroups; gi++) {
      int n = 2 << gi;
      MPI_Comm g = groups[gi];
      if (g == MPI_COMM_NULL) continue;
      int gr;
      MPI_Comm_rank(g, &gr);
      for (int o = 0; o < NOPS; o++) {
        if (o == 4 && n != 2) continue;
        int bi = 0;
        for (long bytes = 64; bytes <= maxb && bi < NBYTES; bytes *= 4, bi++) {
          long cnt = bytes / 4;
          double t;
          /* the all-reduce in place, as runtime/dist.c runs it, on buffers
           * rotating through the pool as a step's activations do */
          long aslot = 0, naslots = (long)POOL * 4 / bytes > 1 ? (long)POOL * 4 / bytes : 1;
#define AR_BUF_ ((aslot = (aslot + 1) % naslots), (char *)pool + aslot * bytes)
          switch (o) {
          case 0: TIME_ALL(WORK; MPI_Allreduce(MPI_IN_PLACE, AR_BUF_, (int)cnt, MPI_FLOAT, MPI_SUM, g), t); break;
          case 1: TIME_ALL(WORK; MPI_Allgather(sb, (int)(cnt / n), MPI_FLOAT, rb, (int)(cnt / n), MPI_FLOAT, g), t); break;
          case 2: TIME_ALL(WORK; MPI_Reduce_scatter_block(sb, rb, (int)(cnt / n), MPI_FLOAT, MPI_SUM, g), t); break;
          case 3: TIME_ALL(WORK; MPI_Bcast(sb, (int)cnt, MPI_FLOAT, 0, g), t); break;
          default:
            TIME_ALL(WORK; MPI_Sendrecv(sb, (int)cnt, MPI_FLOAT, gr ^ 1, 7, rb, (int)cnt, MPI_FLOAT, gr ^ 1, 7, g, MPI_STATUS_IGNORE), t);
            break;
          }
#undef AR_BUF_
          BEST(coll_t[gi][o][bi], t);
        }
      }
    }
#undef WORK
  }
#undef BEST

  if (!rank) {
    /* GEMM: a curve of rate by FLOPs, sorted, equal FLOPs merged; the
     * rates net of one call's cost (the 1x1x1 product's time) */
    double launch = gemm_t[0];
    fprintf(out, "\"rounds\": %d,\n\"launch_s\": %.6g,\n\"gemm\": [", rounds, launch);
    int idx[NSH], n = 0;
    for (int i = 1; i < NSH; i++) idx[n++] = i;
    for (int a = 0; a < n; a++)
      for (int b = a + 1; b < n; b++) {
        double fa = 2.0 * shapes[idx[a]][0] * shapes[idx[a]][1] * shapes[idx[a]][2];
        double fb = 2.0 * shapes[idx[b]][0] * shapes[idx[b]][1] * shapes[idx[b]][2];
        if (fb < fa) {
          int t = idx[a];
          idx[a] = idx[b];
          idx[b] = t;
        }
      }
    double last = 0;
    int first = 1;
    for (int a = 0; a < n; a++) {
      const int *s = shapes[idx[a]];
      double fl = 2.0 * s[0] * s[1] * s[2], t = gemm_t[idx[a]];
      if (fl <= last) continue;
      fprintf(out, "%s[%.6g, %.6g]", first ? "" : ", ", fl, fl / (t > launch ? t - launch : t));
      first = 0;
      last = fl;
    }
    fprintf(out, "],\n\"gemm_thin\": [");
    const int *rs = shapes[REF_SHAPE];
    double rfl = 2.0 * rs[0] * rs[1] * rs[2], rt = gemm_t[REF_SHAPE];
    double ref_rate = rfl / (rt > launch ? rt - launch : rt);
    for (int i = 0; i < NTHIN; i++) {
      double r[100];
      for (int k = 0; k < rounds; k++) { /* insertion sort for the median */
        int j = k;
        while (j > 0 && r[j - 1] > thin_ratio[i][k]) {
          r[j] = r[j - 1];
          j--;
        }
        r[j] = thin_ratio[i][k];
      }
      double med = rounds % 2 ? r[rounds / 2] : 0.5 * (r[rounds / 2 - 1] + r[rounds / 2]);
      fprintf(out, "%s[%d, %.6g]", i ? ", " : "", thin[i], med * ref_rate);
    }
    fprintf(out, "],\n\"bw\": [");
    int k = 0;
    for (long nn = 1024; nn <= (long)MAXD * MAXD * 4 && k < NBW; nn *= 4, k++)
      fprintf(out, "%s[%.6g, %.6g]", k ? ", " : "", 3.0 * nn * 4, 3.0 * nn * 4 / bw_t[k]);
    /* 9k³ FLOPs an eigendecomposition with its vectors (passes/cost.c) */
    fprintf(out, "],\n\"eigh_flops\": %.6g", 9.0 * EK * EK * EK / eigh_t);
    fprintf(out, ",\n\"special\": {");
    for (int f = 0; f < NSF; f++) fprintf(out, "%s\"%s\": %.6g", f ? ", " : "", sf_names[f], sf_t[f]);
    fprintf(out, "},\n\"kernels\": {");
    for (int f = 0; f < NKERN; f++) fprintf(out, "%s\"%s\": %.6g", f ? ", " : "", kern_names[f], kern_t[f]);
    fprintf(out, "},\n\"coll\": [");
    int firstc = 1;
    for (int gi = 0; gi < ngroups; gi++) {
      int gn = 2 << gi;
      if (world % gn) continue;
      for (int o = 0; o < NOPS; o++) {
        if (o == 4 && gn != 2) continue;
        fprintf(out, "%s{\"op\": \"%s\", \"n\": %d, \"t\": [", firstc ? "" : ",\n ", ops[o], gn);
        firstc = 0;
        int bi = 0;
        for (long bytes = 64; bytes <= maxb && bi < NBYTES; bytes *= 4, bi++) {
          double t = coll_t[gi][o][bi] - gemm_behind;
          fprintf(out, "%s[%ld, %.6g]", bi ? ", " : "", bytes, t < 1e-6 ? 1e-6 : t);
        }
        fprintf(out, "]}");
      }
    }
    fprintf(out, "]}\n");
    /* a full disk is a failed calibration (shardc keeps the old profile) */
    if (ferror(out) | fclose(out)) {
      fprintf(stderr, "shardc calibrate: cannot write %s: %s\n", argv[1], strerror(errno ? errno : EIO));
      wrote = 0;
    }
    /* a host busy with other work: the rounds disagree */
    double sg = big_hi / big_lo - 1, sb = bw_hi / bw_lo - 1;
    if (rounds > 1 && (sg > 0.1 || sb > 0.1))
      fprintf(stderr,
              "shardc calibrate: warning: the rounds disagree (the largest GEMM by %.0f%%, streaming "
              "bandwidth by %.0f%%): other work was running; the profile keeps each figure's fastest "
              "round, but predictions from it are steadier after a calibration on a quiet machine\n",
              100 * sg, 100 * sb);
  }
  for (int gi = 0; gi < ngroups; gi++)
    if (groups[gi] != MPI_COMM_NULL) MPI_Comm_free(&groups[gi]);
  free(A);
  free(pool);
  free(eL);
  free(eG);
  free(ew);
  free(B);
  free(C);
  free(sb);
  free(rb);
  MPI_Finalize();
  return wrote ? 0 : 1;
}
