/* rtc_calib.cu — the microbenchmarks behind `shardc calibrate --target
 * cuda`: run under mpirun with one rank per GPU (the device picked as the
 * training runtime picks it, rtc_device_init), it measures on every rank at
 * once
 *   - the GEMM rate over shapes through the launcher the programs call
 *     (rt_gemm_cu: cuBLASLt, the fastest of its candidates as the
 *     programs' steps run them), fp32 with TF32 off ("gemm") and with bf16
 *     operands and product on the tensor cores, fp32 accumulation, as
 *     precision = bf16 runs them ("gemm_bf16"), and by the smallest dim of
 *     a thin GEMM ("gemm_thin", "gemm_thin_bf16");
 *   - a memory-bound kernel's bandwidth over sizes (rt_axpy_cu), net of
 *     the launch as the GEMM rates are (the cost model adds one launch to
 *     every kernel);
 *   - the cost of one kernel launch (an empty kernel, back to back:
 *     "launch_s"), and of one kernel of a replayed CUDA graph (a graph of
 *     100 empty kernels: "launch_graph_s", what a graphed step's kernels
 *     pay);
 *   - the fused attention kernels, forward and backward, over sequence
 *     lengths ("attention", "attention_bwd", and _bf16: seconds a (batch,
 *     head) row at D = 64, causal);
 *   - NCCL all-reduce, all-gather, reduce-scatter, broadcast and send/recv
 *     over message sizes, for groups of 2, 4, ... consecutive ranks (all
 *     groups at once, as a plan's tp or dp groups run);
 * and rank 0 writes the profile (passes/cost.h's format, as
 * driver/calib_bench.c writes the cpu's) to argv[1].
 *
 * Built twice like the rest of runtime/cuda: by nvcc as shardc-calib-cuda,
 * and as host C++ (RTC_HOST: kernels on the CPU, cuBLASLt as OpenBLAS, NCCL
 * as MPI) as shardc-calib-cuda-host, whose figures mean nothing but whose
 * run checks this code and its JSON where there is no GPU.  The host build
 * caps the sizes so that it finishes in seconds.
 *
 * Environment: SHARDC_CALIB_QUICK (a few ms per trial and smaller sizes,
 * for tests); SHARDC_CALIB_GEMM_MAX, SHARDC_CALIB_BW_MAX (floats per
 * buffer), SHARDC_CALIB_COLL_MAX (bytes) override the caps. */
/* MPI's C API only (Open MPI's C++ bindings need a library not linked) */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rtc_internal.h"
#include "profile_colls.h"
#include "shardrt.h"

#ifdef RTC_CALIB_SERIAL
/* One rank without MPI or NCCL (shardc-calib-cuda-serial, for machines with
 * a GPU and no MPI: bench/gpu_check.sh's): the MPI calls of this file on a
 * world of one; no collectives. */
#define MPI_COMM_WORLD 0
#define MPI_DOUBLE ((int)sizeof(double))
#define MPI_INT ((int)sizeof(int))
#define MPI_MIN 0
#define MPI_MAX 1
static int MPI_Init(int *, char ***) { return 0; }
static int MPI_Finalize(void) { return 0; }
static int MPI_Comm_size(int, int *n) { return *n = 1, 0; }
static int MPI_Comm_rank(int, int *r) { return *r = 0, 0; }
static int MPI_Barrier(int) { return 0; }
static int MPI_Abort(int, int code) { exit(code); }
static int MPI_Allreduce(const void *s, void *r, int n, int type, int, int) {
  memcpy(r, s, (size_t)n * (size_t)type);
  return 0;
}
#else
#include <mpi.h>

#include "rtc_nccl.h"
#endif

static int world_, rank_;
/* seconds per trial: GPU timings are steady, a short window does */
static double window_ = 0.05;

static double now_(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sync_(void) { cudaCheck(cudaStreamSynchronize((cudaStream_t)rtc_stream)); }

static long env_long_(const char *name, long dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 10);
  return *end || v < 1 ? dflt : v;
}

/* Seconds per call of body on every rank at once, as calib_bench.c's
 * TIME_ALL: a first call (NCCL's and cuBLASLt's set-up go there) sizes the
 * repetitions to the window (the slowest rank's), then three trials, each
 * from the first rank's start to the last rank's end with the stream
 * drained; the fastest trial is kept. */
template <class F>
static double time_all_(F body) {
  MPI_Barrier(MPI_COMM_WORLD);
  sync_();
  double t0 = now_();
  body();
  sync_();
  double d = now_() - t0, dmax = 0;
  MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int reps = (int)(window_ / (dmax > 1e-7 ? dmax : 1e-7));
  reps = reps < 1 ? 1 : reps > 20000 ? 20000 : reps;
  double best = 1e30;
  for (int k = 0; k < 3; k++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double s = now_(), smin = 0;
    for (int r = 0; r < reps; r++) body();
    sync_();
    double e = now_(), emax = 0;
    MPI_Allreduce(&s, &smin, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&e, &emax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double t = (emax - smin) / reps;
    if (t < best) best = t;
  }
  return best;
}

__global__ void k_calib_empty(int x) { (void)x; }

/* A curve [[x, y], ...] sorted by x, equal x merged (the first kept). */
static void write_curve_(FILE *out, const char *key, const double *x, const double *y, int n,
                         const char *tail) {
  int idx[64];
  for (int i = 0; i < n; i++) idx[i] = i;
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++)
      if (x[idx[b]] < x[idx[a]]) {
        int t = idx[a];
        idx[a] = idx[b];
        idx[b] = t;
      }
  fprintf(out, "\"%s\": [", key);
  double last = 0;
  int first = 1;
  for (int a = 0; a < n; a++) {
    if (x[idx[a]] <= last) continue;
    fprintf(out, "%s[%.6g, %.6g]", first ? "" : ", ", x[idx[a]], y[idx[a]]);
    first = 0;
    last = x[idx[a]];
  }
  fprintf(out, "]%s", tail);
}

/* time_all_ of GEMM calls: a first call, untimed, in which each shape's
 * first call times cuBLASLt's candidates (rtc_gemm_tune), and the calls
 * after it run the fastest, as a training program's steps after the
 * first do. */
template <class F>
static double time_gemms_(F body) {
  body();
  sync_();
  RtGemmTable chosen = {NULL, 0, 0};
  rtc_gemm_choices(&chosen);
  rtc_gemm_adopt(&chosen);
  rt_gemm_table_free(&chosen);
  return time_all_(body);
}

/* A GEMM's operands, need floats, each call the next slot of a pool
 * larger than the L2 cache, as a step's tensors go through its arena. */
struct Rotation_ {
  float *pool;
  long need, nslots, slot = 0;
  Rotation_(float *p, long pool_n, long n) : pool(p), need(n), nslots(pool_n / n) {}
  float *operator()() {
    float *p = pool + slot * need;
    slot = (slot + 1) % nslots;
    return p;
  }
};

int main(int argc, char **argv) {
  int wrote = 1; /* 0: rank 0 could not write the profile */
#ifdef RTC_HOST
  rt_blas_setup(argc, argv); /* cuBLASLt's twin: OpenBLAS's kernels as the programs get them */
#endif
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  int quick = getenv("SHARDC_CALIB_QUICK") != NULL;
  if (quick) window_ = 0.003;
  rtc_gemm_tune(1, NULL, 0); /* the GEMM algorithms the programs run (time_gemms_) */
  if (argc < 2) {
    if (!rank_) fprintf(stderr, "usage: mpirun -np N shardc-calib-cuda OUT.json\n");
    MPI_Finalize();
    return 1;
  }
  /* ---- the device: one rank per GPU, as the training runtime places them ---- */
  const char *gpu = NULL;
  int ok = rtc_device_init(rank_, &gpu) == RT_OK, all_ok = 0;
  if (!ok) fprintf(stderr, "shardc-calib-cuda: rank %d: %s\n", rank_, rt_last_error());
#ifndef RTC_HOST
  /* NCCL refuses two ranks on one device: calibrate one rank per GPU */
  int ndev = 0;
  int local = rt_local_ranks(0);
  if (ok) cudaCheck(cudaGetDeviceCount(&ndev));
  if (ok && local > ndev) {
    if (!rank_)
      fprintf(stderr, "shardc-calib-cuda: %d ranks on a node with %d GPU%s: calibrate runs one "
              "rank per GPU (--np at most the GPUs)\n", local, ndev, ndev == 1 ? "" : "s");
    ok = 0;
  }
#endif
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) {
    MPI_Finalize();
    return 1;
  }
  /* The sizes: a GPU's up to 8192^3 GEMMs, 1 GiB of axpy, 256 MiB messages;
   * the host build's small enough to finish in seconds. */
#ifdef RTC_HOST
  long gemm_max = 256, bw_max = quick ? 1L << 16 : 1L << 18, coll_max = quick ? 1L << 16 : 1L << 20;
  const char *device = "host build of the cuda target (no GPU)";
#else
  long gemm_max = quick ? 2048 : 8192, bw_max = quick ? 1L << 24 : 1L << 27,
       coll_max = quick ? 16L << 20 : 256L << 20;
  const char *device = gpu;
#endif
  gemm_max = env_long_("SHARDC_CALIB_GEMM_MAX", gemm_max);
  bw_max = env_long_("SHARDC_CALIB_BW_MAX", bw_max);
  coll_max = env_long_("SHARDC_CALIB_COLL_MAX", coll_max);

  FILE *out = NULL;
  if (!rank_) {
    out = fopen(argv[1], "w");
    if (!out) {
      fprintf(stderr, "shardc calibrate: cannot write %s: %s\n", argv[1], strerror(errno));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fprintf(out, "{\"shardc_profile\": 1, \"device\": \"%s\", \"np\": %d,\n", device, world_);
  }

  /* ---- launch: an empty kernel, back to back ---- */
  double launch = time_all_([]() { RTC_LAUNCH(k_calib_empty, 1, 1, 0, 0); });
  if (!rank_) fprintf(out, "\"launch_s\": %.6g,\n", launch);
  /* ---- a kernel of a replayed graph: 100 empty kernels captured once ---- */
  {
    const int nk = 100;
    rtc_capture_begin();
    for (int i = 0; i < nk; i++) RTC_LAUNCH(k_calib_empty, 1, 1, 0, i);
    RtcGraph *g = rtc_capture_end();
    double tg = time_all_([g]() { rtc_graph_launch(g); }) / nk;
    rtc_graph_free(g);
    if (!rank_) fprintf(out, "\"launch_graph_s\": %.6g,\n", tg);
  }

  /* ---- GEMMs over shapes, the three layouts a linear runs (y = x·Wᵀ,
   * dx = dy·W, dW = dyᵀ·x), operands rotating through a pool larger than
   * the L2 cache as a step's tensors do through its arena ---- */
  {
    static const int shapes[][3] = {
        {64, 64, 64},       {128, 128, 128},    {256, 256, 256},    {512, 512, 512},
        {1024, 256, 256},   {1024, 1024, 1024}, {2048, 1024, 1024}, {2048, 2048, 2048},
        {4096, 1024, 1024}, {4096, 4096, 1024}, {4096, 4096, 4096}, {8192, 4096, 4096},
        {8192, 8192, 4096}, {8192, 8192, 8192}};
    int nsh = (int)(sizeof shapes / sizeof shapes[0]);
    long pool_n = 3 * gemm_max * gemm_max;
#ifdef RTC_HOST
    if (pool_n < (4L << 20)) pool_n = 4L << 20;
#else
    if (pool_n < (64L << 20)) pool_n = 64L << 20;
#endif
    float *pool = NULL;
    cudaCheck(cudaMalloc(&pool, (size_t)pool_n * sizeof(float)));
    cudaCheck(cudaMemset(pool, 0x3c, (size_t)pool_n * sizeof(float))); /* 0.0115 each */
    /* (the legacy stream's memsets before rtc_stream, which does not wait for it) */
    cudaCheck(cudaDeviceSynchronize());
    for (int bf16 = 0; bf16 < 2; bf16++) {
      /* bf16: bf16 operands and product in the pool's memory (half of each
       * slot), fp32 accumulation, as precision = bf16 programs call it */
      auto mm = [&](int ta, int tb, int M, int N, int K, float *a, int lda, float *b, int ldb,
                    float *c, int ldc) {
        if (bf16)
          rt_gemm_cu(ta, tb, M, N, K, 1.0, (const rtc_bf16 *)a, lda, (const rtc_bf16 *)b, ldb, 0.0,
                     (rtc_bf16 *)c, ldc);
        else
          rt_gemm_cu(ta, tb, M, N, K, 1.0, a, lda, b, ldb, 0.0, c, ldc);
      };
      double gx[64], gy[64];
      int n = 0;
      for (int i = 0; i < nsh; i++) {
        int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        if (M > gemm_max || N > gemm_max || K > gemm_max) continue;
        Rotation_ ops(pool, pool_n, (long)M * K + (long)K * N + (long)M * N);
        double t = time_gemms_([&]() {
          float *a = ops(), *b = a + (long)M * K, *c = b + (long)K * N;
          mm(0, 1, M, N, K, a, K, b, K, c, N);
          a = ops(), b = a + (long)M * K, c = b + (long)K * N;
          mm(0, 0, M, N, K, a, K, b, N, c, N);
          a = ops(), b = a + (long)M * K, c = b + (long)K * N;
          mm(1, 0, M, N, K, a, M, b, N, c, N);
        }) / 3;
        /* the rate net of the launch the cost model adds to every call */
        double net = t - launch > 0.25 * t ? t - launch : 0.25 * t;
        gx[n] = 2.0 * M * N * K;
        gy[n] = gx[n] / net;
        n++;
      }
      if (!rank_) write_curve_(out, bf16 ? "gemm_bf16" : "gemm", gx, gy, n, ",\n");
      /* Thin GEMMs: a linear with k input features (y = x·Wᵀ, dx = dy·W,
       * dW = dyᵀ·x put k in each of the three positions), the other two
       * dims large; the rate by k, which bounds a GEMM whose smallest dim
       * is k however large the others (passes/cost.c cost_gemm): a
       * row-parallel linear's split K, a vocabulary split, a SUMMA block,
       * an attention head. */
      static const int thin[] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048};
      long big = gemm_max / 2;
      n = 0;
      for (int i = 0; i < (int)(sizeof thin / sizeof thin[0]) && thin[i] < big; i++) {
        int M = (int)big, N = (int)big, k = thin[i];
        Rotation_ ops(pool, pool_n, (long)M * k + (long)N * k + (long)M * N);
        double t = time_gemms_([&]() {
          float *x = ops(), *w = x + (long)M * k, *y = w + (long)N * k;
          mm(0, 1, M, N, k, x, k, w, k, y, N);  /* y = x·Wᵀ */
          x = ops(), w = x + (long)M * k, y = w + (long)N * k;
          mm(0, 0, M, k, N, y, N, w, k, x, k);  /* dx = dy·W */
          x = ops(), w = x + (long)M * k, y = w + (long)N * k;
          mm(1, 0, N, k, M, y, N, x, k, w, k);  /* dW = dyᵀ·x */
        }) / 3;
        double net = t - launch > 0.25 * t ? t - launch : 0.25 * t;
        gx[n] = (double)k;
        gy[n] = 2.0 * M * N * k / net;
        n++;
      }
      if (!rank_ && n) write_curve_(out, bf16 ? "gemm_thin_bf16" : "gemm_thin", gx, gy, n, ",\n");
    }
    cudaCheck(cudaFree(pool));
  }

  /* ---- memory-bound: dst += a·src over sizes (3 streams) ---- */
  {
    float *x = NULL, *y = NULL;
    cudaCheck(cudaMalloc(&x, (size_t)bw_max * sizeof(float)));
    cudaCheck(cudaMalloc(&y, (size_t)bw_max * sizeof(float)));
    cudaCheck(cudaMemset(x, 0x3c, (size_t)bw_max * sizeof(float)));
    cudaCheck(cudaMemset(y, 0x3c, (size_t)bw_max * sizeof(float)));
    cudaCheck(cudaDeviceSynchronize());
    double bx[32], by[32];
    int n = 0;
    for (long k = 1024; k <= bw_max && n < 32; k *= 4) {
      double t = time_all_([&]() { rt_axpy_cu(y, x, 1e-6, (size_t)k); });
      double net = t - launch > 0.25 * t ? t - launch : 0.25 * t;
      bx[n] = 3.0 * k * sizeof(float);
      by[n] = bx[n] / net;
      n++;
    }
    if (!rank_) write_curve_(out, "bw", bx, by, n, ",\n");
    cudaCheck(cudaFree(x));
    cudaCheck(cudaFree(y));
  }

  /* ---- attention: the fused kernels (k_attention.cu) on 16 heads of
   * D = 64, causal, over sequence lengths; seconds a (batch, head) row,
   * forward and backward, fp32 and bf16 storage (the cost model scales by
   * B·H, D/64, and 2 without the causal mask).  The FLOP curves of GEMMs
   * do not tell how fast these kernels are (on the H200 GPT-2's attention
   * ran at ~30 TFLOP/s where its GEMMs reach 800) ---- */
  {
    const int H = 16, D = 64;
#ifdef RTC_HOST
    const int Ts[] = {32, 64};
#else
    const int Ts[] = {128, 256, 512, 1024, 2048, 4096};
#endif
    const int nT = quick ? 2 : (int)(sizeof Ts / sizeof Ts[0]);
    const size_t most = (size_t)Ts[nT - 1] * H * D;
    float *buf = NULL, *lse = NULL;
    cudaCheck(cudaMalloc(&buf, 8 * most * sizeof(float)));
    cudaCheck(cudaMalloc(&lse, (size_t)Ts[nT - 1] * H * sizeof(float)));
    cudaCheck(cudaMemset(buf, 0, 8 * most * sizeof(float)));
    cudaCheck(cudaMemset(lse, 0, (size_t)Ts[nT - 1] * H * sizeof(float)));
    cudaCheck(cudaDeviceSynchronize());
    for (int b16 = 0; b16 < 2; b16++) {
      double tx[16], fy[16], by[16];
      for (int i = 0; i < nT; i++) {
        const int T = Ts[i];
        const size_t n = (size_t)T * H * D;
        float *q = buf, *k = q + n, *v = k + n, *o = v + n, *dout = o + n, *dq = dout + n,
              *dk = dq + n, *dv = dk + n;
        double tf, tb;
        if (b16) {
          const rtc_bf16 *qb = (const rtc_bf16 *)q, *kb = (const rtc_bf16 *)k,
                         *vb = (const rtc_bf16 *)v;
          rtc_bf16 *ob = (rtc_bf16 *)o, *db = (rtc_bf16 *)dout;
          tf = time_all_([&]() { rt_attention_forward_cu(ob, lse, qb, kb, vb, 1, T, H, H, D, 1); });
          tb = time_all_([&]() {
            rt_attention_backward_cu((rtc_bf16 *)dq, (rtc_bf16 *)dk, (rtc_bf16 *)dv, db, qb, kb, vb,
                                     ob, lse, 1, T, H, H, D, 1);
          });
        } else {
          tf = time_all_([&]() { rt_attention_forward_cu(o, lse, q, k, v, 1, T, H, H, D, 1); });
          tb = time_all_([&]() {
            rt_attention_backward_cu(dq, dk, dv, dout, q, k, v, o, lse, 1, T, H, H, D, 1);
          });
        }
        tx[i] = T;
        fy[i] = (tf - launch > 0.25 * tf ? tf - launch : 0.25 * tf) / H;
        by[i] = (tb - launch > 0.25 * tb ? tb - launch : 0.25 * tb) / H;
      }
      if (!rank_) {
        write_curve_(out, b16 ? "attention_bf16" : "attention", tx, fy, nT, ",\n");
        write_curve_(out, b16 ? "attention_bwd_bf16" : "attention_bwd", tx, by, nT, ",\n");
      }
    }
    cudaCheck(cudaFree(buf));
    cudaCheck(cudaFree(lse));
  }

  /* ---- collectives: groups of n consecutive ranks, all at once ---- */
  if (!rank_) fprintf(out, "\"coll\": [");
#ifndef RTC_CALIB_SERIAL
  if (world_ > 1) {
    ncclUniqueId id;
    if (!rank_) ncclCheck(ncclGetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t all;
    ncclCheck(ncclCommInitRank(&all, world_, id, rank_));
    char *sb = NULL, *rb = NULL;
    cudaCheck(cudaMalloc(&sb, (size_t)coll_max));
    cudaCheck(cudaMalloc(&rb, (size_t)coll_max));
    cudaCheck(cudaMemset(sb, 0x3c, (size_t)coll_max));
    cudaCheck(cudaMemset(rb, 0x3c, (size_t)coll_max));
    cudaCheck(cudaDeviceSynchronize());
    cudaStream_t s = (cudaStream_t)rtc_stream;
    int firstc = 1;
    for (int n = 2; n <= world_; n *= 2) {
      if (world_ % n) continue;
      ncclComm_t g;
      ncclCheck(ncclCommSplit(all, rank_ / n, rank_, &g, NULL));
      int gr = rank_ % n;
      static const char *names[PROFILE_NCOLL_OPS] = {PROFILE_COLL_OPS};
      for (int o = 0; o < PROFILE_NCOLL_OPS; o++) {
        if (o == 4 && n != 2) continue;
        if (!rank_) fprintf(out, "%s{\"op\": \"%s\", \"n\": %d, \"t\": [", firstc ? "" : ",\n ", names[o], n);
        firstc = 0;
        int first = 1;
        for (long bytes = 64; bytes <= coll_max; bytes *= 4) {
          size_t cnt = (size_t)bytes / sizeof(float), part = cnt / (size_t)n;
          if (part == 0) continue;
          double t;
          switch (o) {
          case 0: /* in place, as rtc_dist.cu runs it */
            t = time_all_([&]() { ncclCheck(ncclAllReduce(sb, sb, cnt, ncclFloat, ncclSum, g, s)); });
            break;
          case 1:
            t = time_all_([&]() { ncclCheck(ncclAllGather(sb, rb, part, ncclFloat, g, s)); });
            break;
          case 2:
            t = time_all_([&]() { ncclCheck(ncclReduceScatter(sb, rb, part, ncclFloat, ncclSum, g, s)); });
            break;
          case 3:
            t = time_all_([&]() { ncclCheck(ncclBroadcast(sb, sb, cnt, ncclFloat, 0, g, s)); });
            break;
          default:
            t = time_all_([&]() {
              ncclCheck(ncclGroupStart());
              ncclCheck(ncclSend(sb, cnt, ncclFloat, gr ^ 1, g, s));
              ncclCheck(ncclRecv(rb, cnt, ncclFloat, gr ^ 1, g, s));
              ncclCheck(ncclGroupEnd());
            });
            break;
          }
          if (!rank_) {
            fprintf(out, "%s[%ld, %.6g]", first ? "" : ", ", bytes, t);
            first = 0;
          }
        }
        if (!rank_) fprintf(out, "]}");
      }
      ncclCheck(ncclCommDestroy(g));
    }
    cudaCheck(cudaFree(sb));
    cudaCheck(cudaFree(rb));
    ncclCheck(ncclCommDestroy(all));
  }
#endif
  if (!rank_) {
    fprintf(out, "]}\n");
    /* a full disk is a failed calibration (shardc keeps the old profile) */
    if (ferror(out) | fclose(out)) {
      fprintf(stderr, "shardc calibrate: cannot write %s: %s\n", argv[1], strerror(errno ? errno : EIO));
      wrote = 0;
    }
  }
  MPI_Finalize();
  return wrote ? 0 : 1;
}
