/* test_summa.c — SUMMA linear layers and split-channel layernorm and rmsnorm on a q×q
 * grid (np = q², else exit 77) against the single-device kernels on the
 * full tensors, which every rank builds from the same seeds: each rank's
 * blocks of y, dx, dw, dbias, the norms' out, mean, rstd, dx, dw, db,
 * the bytes counted per communicator against dist_formulas.h, scratch
 * bounds (guard elements after the planned size) and run-to-run equality.
 * Gradients start non-zero (they accumulate); y starts non-zero (written).
 * Exits 1 on every rank if any rank failed. f32 then f64: the file
 * includes itself once per type, like the runtime's templates. */
#ifndef TEST_SUMMA_TEMPLATE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "dist_formulas.h"
#include "dist_summa.h"
#include "shardrt.h"

#define GUARD 16          /* scratch elements past the planned size */
#define SENTINEL 12345.0  /* what they hold, untouched */

static int g_rank, g_failures, g_checks;

#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    g_checks++;                                                                     \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "rank %d: %s:%d: ", g_rank, __FILE__, __LINE__);              \
      fprintf(stderr, __VA_ARGS__);                                                 \
      fputc('\n', stderr);                                                          \
      g_failures++;                                                                 \
    }                                                                               \
  } while (0)

#define CHECK_U64(expected, actual)                                                 \
  CHECK((uint64_t)(expected) == (uint64_t)(actual), "%s = %llu, expected %llu",     \
        #actual, (unsigned long long)(actual), (unsigned long long)(expected))

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "rank %d: out of memory\n", g_rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

#define TEST_SUMMA_TEMPLATE
#define FN(name) RT_CAT(name, SFX)

#define REAL float
#define SFX _f32
#include "test_summa.c"
#undef REAL
#undef SFX

#define REAL double
#define SFX _f64
#include "test_summa.c"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int q = 1;
  while ((q + 1) * (q + 1) <= size)
    q++;
  if (q * q != size) {
    if (g_rank == 0)
      printf("SKIP: SUMMA needs a square number of ranks, not %d\n", size);
    MPI_Finalize();
    return 77;
  }
  if (size > 1)
    rt_set_threads(1); // ranks share the cores
  int i = g_rank / q, j = g_rank % q;
  MPI_Comm row, col; // row: rank j among (i, ·); col: rank i among (·, j)
  MPI_Comm_split(MPI_COMM_WORLD, i, j, &row);
  MPI_Comm_split(MPI_COMM_WORLD, j, i, &col);

  // odd sizes; then blocks big enough for the threaded GEMM path on one rank
  test_summa_f32(row, col, q, i, j, 5, 7, 3, 1, 1e-5);
  test_summa_f32(row, col, q, i, j, 3, 1, 2, 0, 1e-5);
  test_summa_f32(row, col, q, i, j, 96, 80, 136, 1, 1e-5);
  test_summa_f64(row, col, q, i, j, 5, 7, 3, 1, 1e-12);
  test_summa_f64(row, col, q, i, j, 96, 80, 136, 0, 1e-12);
  test_ln_f32(row, q, i, j, 4, 5, 0.0, 1e-5);
  test_ln_f32(row, q, i, j, 7, 48, 10.0, 1e-5); // mean 10, std 0.29: cancellation
  test_ln_f64(row, q, i, j, 4, 5, 0.0, 1e-12);
  test_ln_f64(row, q, i, j, 7, 48, 10.0, 1e-12);
  test_rms_f32(row, q, i, j, 4, 5, 0.0, 1e-5);
  test_rms_f32(row, q, i, j, 7, 48, 3.0, 1e-5);
  test_rms_f64(row, q, i, j, 4, 5, 0.0, 1e-12);
  test_rms_f64(row, q, i, j, 7, 48, 3.0, 1e-12);

  int failed = g_failures > 0, any;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0)
    printf("%s: %d checks on rank 0, q = %d\n", any ? "FAIL" : "OK", g_checks, q);
  MPI_Comm_free(&row);
  MPI_Comm_free(&col);
  MPI_Finalize();
  return any ? 1 : 0;
}

#else /* the template: REAL, FN */

// a is (n): uniform in [lo,hi), the same on every rank
static REAL *FN(rand_)(size_t n, uint64_t id, double lo, double hi) {
  REAL *a = xmalloc(n * sizeof(REAL));
  FN(rt_init_uniform)(a, n, lo, hi, 20240601, id, 0);
  return a;
}

static REAL *FN(copy_)(const REAL *a, size_t n) {
  REAL *b = xmalloc(n * sizeof(REAL));
  memcpy(b, a, n * sizeof(REAL));
  return b;
}

// a is (·,ld): the (R,Cc) block at (r0,c0), packed
static REAL *FN(block_)(const REAL *a, int ld, int r0, int c0, int R, int Cc) {
  REAL *b = xmalloc((size_t)R * Cc * sizeof(REAL));
  for (int r = 0; r < R; r++)
    memcpy(b + (size_t)r * Cc, a + (size_t)(r0 + r) * ld + c0, (size_t)Cc * sizeof(REAL));
  return b;
}

// got, want are (n): max |got - want| / (1 + |want|), inf on a NaN
static double FN(err_)(const REAL *got, const REAL *want, size_t n) {
  double e = 0;
  for (size_t k = 0; k < n; k++) {
    double d = fabs((double)got[k] - (double)want[k]) / (1 + fabs((double)want[k]));
    if (!(d <= e))
      e = d == d ? d : INFINITY;
  }
  return e;
}

#define CHECK_CLOSE(got, want, n, tol)                                              \
  do {                                                                              \
    double e_ = FN(err_)(got, want, n);                                             \
    CHECK(e_ <= (tol), "%s (f%d, %d·%d): error %.3g > %.3g", #got,                 \
          (int)sizeof(REAL) * 8, q, q, e_, (double)(tol));                             \
  } while (0)

// scratch of n planned elements plus GUARD sentinels
static REAL *FN(scratch_)(size_t n) {
  REAL *s = xmalloc((n + GUARD) * sizeof(REAL));
  for (size_t k = 0; k < n + GUARD; k++)
    s[k] = (REAL)SENTINEL;
  return s;
}
static int FN(guard_ok_)(const REAL *s, size_t n) {
  for (size_t k = n; k < n + GUARD; k++)
    if (s[k] != (REAL)SENTINEL)
      return 0;
  return 1;
}

// Y[M,N] = X[M,K]·W[N,K]ᵀ + b on the grid, M = q·Mb etc.
static void FN(test_summa)(MPI_Comm row, MPI_Comm col, int q, int i, int j, int Mb, int Kb,
                           int Nb, int with_bias, double tol) {
  int M = q * Mb, K = q * Kb, N = q * Nb;
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb, ye = (size_t)Mb * Nb;
  uint64_t es = sizeof(REAL), xb = xe * es, wb = we * es, yb = ye * es;
  REAL *X = FN(rand_)((size_t)M * K, 1, -1, 1), *W = FN(rand_)((size_t)N * K, 2, -1, 1);
  REAL *B = FN(rand_)((size_t)N, 3, -1, 1), *DY = FN(rand_)((size_t)M * N, 4, -1, 1);
  REAL *DX = FN(rand_)((size_t)M * K, 5, -1, 1), *DW = FN(rand_)((size_t)N * K, 6, -1, 1);
  REAL *DB = FN(rand_)((size_t)N, 7, -1, 1);
  REAL *Y = xmalloc((size_t)M * N * sizeof(REAL));
  REAL *dx = FN(block_)(DX, K, i * Mb, j * Kb, Mb, Kb);   // starting gradients
  REAL *dw = FN(block_)(DW, K, j * Nb, i * Kb, Nb, Kb);
  REAL *dw2 = FN(copy_)(dw, we), *db = FN(copy_)(DB + (size_t)j * Nb, (size_t)Nb);
  FN(rt_matmul_forward)(Y, X, W, with_bias ? B : NULL, M, K, N);
  FN(rt_matmul_backward)(DX, DW, DB, DY, X, W, M, K, N); // now the expected results
  REAL *x = FN(block_)(X, K, i * Mb, j * Kb, Mb, Kb), *w = FN(block_)(W, K, j * Nb, i * Kb, Nb, Kb);
  REAL *dy = FN(block_)(DY, N, i * Mb, j * Nb, Mb, Nb);
  REAL *y = xmalloc(ye * sizeof(REAL)), *y2 = xmalloc(ye * sizeof(REAL));
  const REAL *bias = with_bias ? B + (size_t)j * Nb : NULL;
  size_t sf = rt_scratch_summa_fwd(xe, we), sb = rt_scratch_summa_bwd(xe, we);
  REAL *scr = FN(scratch_)(sf > sb ? sf : sb);

  // forward: written, not accumulated
  for (size_t k = 0; k < ye; k++)
    y[k] = y2[k] = 7;
  uint64_t br = 3, bc = 3;
  FN(rt_summa_forward)(row, col, &br, &bc, y, x, w, bias, Mb, Kb, Nb, scr);
  REAL *ywant = FN(block_)(Y, N, i * Mb, j * Nb, Mb, Nb);
  CHECK_CLOSE(y, ywant, ye, tol);
  CHECK_U64(3 + (uint64_t)q * rt_vol_bcast(xb, q), br);
  CHECK_U64(3 + (uint64_t)q * rt_vol_bcast(wb, q), bc);
  CHECK_U64(rt_vol_summa_fwd(xb, wb, q), br + bc - 6);
  CHECK(FN(guard_ok_)(scr, sf), "forward scratch overrun (%s)", "planned size");
  FN(rt_summa_forward)(row, col, &br, &bc, y2, x, w, bias, Mb, Kb, Nb, scr);
  CHECK(memcmp(y, y2, ye * sizeof(REAL)) == 0, "forward not reproducible (%d,%d,%d)", Mb, Kb, Nb);

  // backward: everything accumulates
  br = bc = 3;
  FN(rt_summa_backward)(row, col, &br, &bc, dx, dw, db, dy, x, w, Mb, Kb, Nb, scr);
  REAL *dxwant = FN(block_)(DX, K, i * Mb, j * Kb, Mb, Kb);
  REAL *dwwant = FN(block_)(DW, K, j * Nb, i * Kb, Nb, Kb);
  CHECK_CLOSE(dx, dxwant, xe, tol);
  CHECK_CLOSE(dw, dwwant, we, tol);
  CHECK_CLOSE(db, DB + (size_t)j * Nb, (size_t)Nb, tol);
  uint64_t vdb = rt_vol_allreduce((uint64_t)Nb * es, q);
  CHECK_U64(3 + (uint64_t)q * (rt_vol_bcast(xb, q) + rt_vol_reduce(xb, q)), br);
  CHECK_U64(3 + (uint64_t)q * (rt_vol_bcast(wb, q) + rt_vol_reduce(wb, q)) + vdb, bc);
  CHECK_U64(rt_vol_summa_bwd(xb, wb, yb, q) + vdb, br + bc - 6);
  CHECK(FN(guard_ok_)(scr, sb), "backward scratch overrun (%s)", "planned size");

  // dw alone: only the X broadcasts (row) and dW reduces (column)
  br = bc = 0;
  FN(rt_summa_backward)(row, col, &br, &bc, NULL, dw2, NULL, dy, x, w, Mb, Kb, Nb, scr);
  CHECK(memcmp(dw, dw2, we * sizeof(REAL)) == 0, "dw alone differs (%d,%d,%d)", Mb, Kb, Nb);
  CHECK_U64((uint64_t)q * rt_vol_bcast(xb, q), br);
  CHECK_U64((uint64_t)q * rt_vol_reduce(wb, q), bc);

  free(X), free(W), free(B), free(DY), free(DX), free(DW), free(DB), free(Y);
  free(dx), free(dw), free(dw2), free(db), free(x), free(w), free(dy), free(y), free(y2);
  free(scr), free(ywant), free(dxwant), free(dwwant);
}

// layernorm of (q·R, q·Cl) split in 2D: grid row i has rows block i, the
// channels are split over row (column j has channel block j)
static void FN(test_ln)(MPI_Comm row, int q, int i, int j, int R, int Cl, double offset,
                        double tol) {
  int C = q * Cl, NR = q * R;
  double eps = 1e-5;
  size_t n = (size_t)NR * C, le = (size_t)R * Cl;
  REAL *X = FN(rand_)(n, 11, offset - 0.5, offset + 0.5), *Wt = FN(rand_)((size_t)C, 12, 0.5, 1.5);
  REAL *Bt = FN(rand_)((size_t)C, 13, -1, 1), *DO = FN(rand_)(n, 14, -1, 1);
  REAL *DX = FN(rand_)(n, 15, -1, 1), *DW = FN(rand_)((size_t)C, 16, -1, 1);
  REAL *DB = FN(rand_)((size_t)C, 17, -1, 1);
  REAL *OUT = xmalloc(n * sizeof(REAL)), *MEAN = xmalloc(NR * sizeof(REAL));
  REAL *RSTD = xmalloc(NR * sizeof(REAL));
  REAL *dx = FN(block_)(DX, C, i * R, j * Cl, R, Cl); // starting gradients
  REAL *dw = FN(copy_)(DW + (size_t)j * Cl, (size_t)Cl), *db = FN(copy_)(DB + (size_t)j * Cl, (size_t)Cl);
  FN(rt_layernorm_forward_eps)(OUT, MEAN, RSTD, X, Wt, Bt, NR, C, eps);
  size_t r0 = (size_t)i * R; // dw, db: partial sums over this grid row's rows
  FN(rt_layernorm_backward)(DX + r0 * C, DW, DB, DO + r0 * C, X + r0 * C, Wt, MEAN + r0,
                            RSTD + r0, R, C);
  REAL *x = FN(block_)(X, C, i * R, j * Cl, R, Cl), *dout = FN(block_)(DO, C, i * R, j * Cl, R, Cl);
  REAL *out = xmalloc(le * sizeof(REAL)), *mean = xmalloc(R * sizeof(REAL));
  REAL *rstd = xmalloc(R * sizeof(REAL));
  size_t sd = rt_scratch_ln_split_bytes((size_t)R) / sizeof(double);
  double *scr = xmalloc((sd + GUARD) * sizeof(double));
  for (size_t k = 0; k < sd + GUARD; k++)
    scr[k] = SENTINEL;

  uint64_t bytes = 5;
  FN(rt_layernorm_split_forward)(row, &bytes, out, mean, rstd, x, Wt + (size_t)j * Cl,
                                 Bt + (size_t)j * Cl, R, Cl, C, eps, scr);
  REAL *outwant = FN(block_)(OUT, C, i * R, j * Cl, R, Cl);
  CHECK_CLOSE(out, outwant, le, tol);
  CHECK_CLOSE(mean, MEAN + r0, (size_t)R, tol);
  CHECK_CLOSE(rstd, RSTD + r0, (size_t)R, tol);
  CHECK_U64(5 + rt_vol_ln_split_fwd((size_t)R, q), bytes);

  bytes = 5;
  FN(rt_layernorm_split_backward)(row, &bytes, dx, dw, db, dout, x, Wt + (size_t)j * Cl,
                                  mean, rstd, R, Cl, C, scr);
  REAL *dxwant = FN(block_)(DX, C, i * R, j * Cl, R, Cl);
  CHECK_CLOSE(dx, dxwant, le, tol);
  CHECK_CLOSE(dw, DW + (size_t)j * Cl, (size_t)Cl, tol);
  CHECK_CLOSE(db, DB + (size_t)j * Cl, (size_t)Cl, tol);
  CHECK_U64(5 + rt_vol_ln_split_bwd((size_t)R, q), bytes);
  int guard = 1;
  for (size_t k = sd; k < sd + GUARD; k++)
    guard &= scr[k] == SENTINEL;
  CHECK(guard, "layernorm scratch overrun (%s)", "planned size");

  free(X), free(Wt), free(Bt), free(DO), free(DX), free(DW), free(DB), free(OUT), free(MEAN);
  free(RSTD), free(dx), free(dw), free(db), free(x), free(dout), free(out), free(mean);
  free(rstd), free(scr), free(outwant), free(dxwant);
}

// rmsnorm the same way: (q·R, q·Cl), rows block i, channel block j
static void FN(test_rms)(MPI_Comm row, int q, int i, int j, int R, int Cl, double offset,
                         double tol) {
  int C = q * Cl, NR = q * R;
  double eps = 1e-6;
  size_t n = (size_t)NR * C, le = (size_t)R * Cl, r0 = (size_t)i * R;
  REAL *X = FN(rand_)(n, 21, offset - 0.5, offset + 0.5), *Wt = FN(rand_)((size_t)C, 22, 0.5, 1.5);
  REAL *DO = FN(rand_)(n, 24, -1, 1), *DX = FN(rand_)(n, 25, -1, 1);
  REAL *DW = FN(rand_)((size_t)C, 26, -1, 1);
  REAL *OUT = xmalloc(n * sizeof(REAL)), *RSTD = xmalloc(NR * sizeof(REAL));
  REAL *dx = FN(block_)(DX, C, i * R, j * Cl, R, Cl), *dw = FN(copy_)(DW + (size_t)j * Cl, (size_t)Cl);
  FN(rt_rmsnorm_forward)(OUT, RSTD, X, Wt, NR, C, eps);
  FN(rt_rmsnorm_backward)(DX + r0 * C, DW, DO + r0 * C, X + r0 * C, Wt, RSTD + r0, R, C);
  REAL *x = FN(block_)(X, C, i * R, j * Cl, R, Cl), *dout = FN(block_)(DO, C, i * R, j * Cl, R, Cl);
  REAL *out = xmalloc(le * sizeof(REAL)), *rstd = xmalloc(R * sizeof(REAL));
  size_t sd = rt_scratch_rms_split_bytes((size_t)R) / sizeof(double);
  double *scr = xmalloc((sd + GUARD) * sizeof(double));
  for (size_t k = 0; k < sd + GUARD; k++)
    scr[k] = SENTINEL;

  uint64_t bytes = 5;
  FN(rt_rmsnorm_split_forward)(row, &bytes, out, rstd, x, Wt + (size_t)j * Cl, R, Cl, C, eps, scr);
  REAL *outwant = FN(block_)(OUT, C, i * R, j * Cl, R, Cl);
  CHECK_CLOSE(out, outwant, le, tol);
  CHECK_CLOSE(rstd, RSTD + r0, (size_t)R, tol);
  CHECK_U64(5 + rt_vol_rms_split_fwd((size_t)R, q), bytes);

  bytes = 5;
  FN(rt_rmsnorm_split_backward)(row, &bytes, dx, dw, dout, x, Wt + (size_t)j * Cl, rstd, R, Cl,
                                C, scr);
  REAL *dxwant = FN(block_)(DX, C, i * R, j * Cl, R, Cl);
  CHECK_CLOSE(dx, dxwant, le, tol);
  CHECK_CLOSE(dw, DW + (size_t)j * Cl, (size_t)Cl, tol);
  CHECK_U64(5 + rt_vol_rms_split_bwd((size_t)R, q), bytes);
  bytes = 0; // without dx: no communication
  FN(rt_rmsnorm_split_backward)(row, &bytes, NULL, dw, dout, x, Wt + (size_t)j * Cl, rstd, R, Cl,
                                C, scr);
  CHECK_U64(0, bytes);
  int guard = 1;
  for (size_t k = sd; k < sd + GUARD; k++)
    guard &= scr[k] == SENTINEL;
  CHECK(guard, "rmsnorm scratch overrun (%s)", "planned size");

  free(X), free(Wt), free(DO), free(DX), free(DW), free(OUT), free(RSTD), free(dx), free(dw);
  free(x), free(dout), free(out), free(rstd), free(scr), free(outwant), free(dxwant);
}

#undef CHECK_CLOSE

#endif
