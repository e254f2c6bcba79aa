/* dist_summa.c — SUMMA linear layers and split-channel layernorm over MPI
 * (see dist_summa.h). The file is its own template: the first pass below
 * includes it twice more with REAL = float (_f32) and REAL = double (_f64),
 * as kernels.c does with the k_*.inc files.
 *
 * SUMMA's broadcasts and reduces are issued in the order of dist_orders.h's
 * rt_summa_step, the list the compiler's communication check proves
 * deadlock-free: the kernels walk it, and each reduce sums the partial its
 * step computes from the step's broadcast block. */
#ifndef RT_DIST_SUMMA_TEMPLATE
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dist_formulas.h"
#include "dist_orders.h"
#include "dist_summa.h"
#include "rt_internal.h"

// The order asked for a block this kernel has not got: the header and the
// kernels disagree, and the other ranks would wait forever.
static void summa_order_fail_(MPI_Comm comm, int step, const char *why) {
  int me = -1;
  MPI_Comm_rank(comm, &me);
  fprintf(stderr, "rank %d of its grid row: summa: step %d: %s\n", me, step, why);
  MPI_Abort(comm, 1);
}

/* MPI counts are ints: a collective on more elements goes in pieces. */
#define RT_MPI_PIECE ((size_t)1 << 30)

// buf is (n) elements of type t; the root's is sent, everyone else's received
static void rt_bcast_(void *buf, size_t n, MPI_Datatype t, size_t esize, int root,
                      MPI_Comm comm) {
  for (size_t o = 0; o < n; o += RT_MPI_PIECE) {
    size_t c = n - o < RT_MPI_PIECE ? n - o : RT_MPI_PIECE;
    MPI_Bcast((char *)buf + o * esize, (int)c, t, root, comm);
  }
}

// buf is (n): the root's becomes the sum over comm of everyone's
static void rt_reduce_(void *buf, size_t n, MPI_Datatype t, size_t esize, int root,
                       MPI_Comm comm) {
  int me;
  MPI_Comm_rank(comm, &me);
  for (size_t o = 0; o < n; o += RT_MPI_PIECE) {
    size_t c = n - o < RT_MPI_PIECE ? n - o : RT_MPI_PIECE;
    char *p = (char *)buf + o * esize;
    if (me == root)
      MPI_Reduce(MPI_IN_PLACE, p, (int)c, t, MPI_SUM, root, comm);
    else
      MPI_Reduce(p, NULL, (int)c, t, MPI_SUM, root, comm);
  }
}

// buf is (n): everyone's becomes the sum over comm
static void rt_allreduce_(void *buf, size_t n, MPI_Datatype t, size_t esize,
                          MPI_Comm comm) {
  for (size_t o = 0; o < n; o += RT_MPI_PIECE) {
    size_t c = n - o < RT_MPI_PIECE ? n - o : RT_MPI_PIECE;
    MPI_Allreduce(MPI_IN_PLACE, (char *)buf + o * esize, (int)c, t, MPI_SUM, comm);
  }
}

#define RT_DIST_SUMMA_TEMPLATE
#define FN(name) RT_CAT(name, SFX)

#define REAL float
#define SFX _f32
#define MPI_REAL_T MPI_FLOAT
#include "dist_summa.c"
#undef REAL
#undef SFX
#undef MPI_REAL_T

#define REAL double
#define SFX _f64
#define MPI_REAL_T MPI_DOUBLE
#include "dist_summa.c"

#else /* the template: REAL, FN, MPI_REAL_T */

// own is this rank's (n) block, buf (n) scratch: the root's block broadcast
// over comm, read from own on the root (MPI only reads the root's buffer)
static const REAL *FN(rt_bcast_block_)(const REAL *own, REAL *buf, size_t n, int root,
                                       MPI_Comm comm) {
  int me;
  MPI_Comm_rank(comm, &me);
  REAL *p = me == root ? (REAL *)own : buf;
  rt_bcast_(p, n, MPI_REAL_T, sizeof(REAL), root, comm);
  return p;
}

// y is (Mb,Nb), x (Mb,Kb), w (Nb,Kb), bias (Nb) or NULL;
// scratch: an X block (Mb·Kb) then a W block (Nb·Kb)
void FN(rt_summa_forward)(MPI_Comm row, MPI_Comm col, uint64_t *bytes_row,
                          uint64_t *bytes_col, REAL *y, const REAL *x, const REAL *w,
                          const REAL *bias, int Mb, int Kb, int Nb, REAL *scratch) {
  int q;
  MPI_Comm_size(row, &q);
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb;
  REAL *xbuf = scratch, *wbuf = scratch + xe;
  double beta = 0;
  if (bias) {
    for (size_t r = 0; r < (size_t)Mb; r++)
      memcpy(y + r * Nb, bias, (size_t)Nb * sizeof(REAL));
    beta = 1;
  }
  RtSummaCall call = {0, q, 0, 0, 0, xe, we, 0, (int)sizeof(REAL)};
  for (int k = 0; k < q; k++) {
    RtSummaMsg msg[RT_SUMMA_STEP_MAX];
    int n = rt_summa_step(&call, k, msg);
    const REAL *xk = NULL, *wk = NULL;
    for (int i = 0; i < n; i++) {
      const RtSummaMsg *g = &msg[i];
      MPI_Comm c = g->col ? col : row;
      if (g->coll != RT_SUMMA_BCAST || (g->block != RT_SUMMA_X && g->block != RT_SUMMA_W))
        summa_order_fail_(row, g->step, "the forward only broadcasts X and W blocks");
      if (g->block == RT_SUMMA_X)
        xk = FN(rt_bcast_block_)(x, xbuf, g->n, g->root, c);
      else
        wk = FN(rt_bcast_block_)(w, wbuf, g->n, g->root, c);
      *(g->col ? bytes_col : bytes_row) += g->vol;
    }
    if (!xk || !wk)
      summa_order_fail_(row, k, "the step needs an X and a W block");
    // (Mb,Nb) += (Mb,Kb)·(Nb,Kb)ᵀ
    FN(rt_gemm)(0, 1, Mb, Nb, Kb, 1, xk, Kb, wk, Kb, beta, y, Nb);
    beta = 1;
  }
}

// dy is (Mb,Nb), x (Mb,Kb), w (Nb,Kb); dx (Mb,Kb), dw (Nb,Kb), dbias (Nb)
// or NULL; scratch: X block, W block, dX partial (Mb·Kb), dW partial (Nb·Kb)
void FN(rt_summa_backward)(MPI_Comm row, MPI_Comm col, uint64_t *bytes_row,
                           uint64_t *bytes_col, REAL *dx, REAL *dw, REAL *dbias,
                           const REAL *dy, const REAL *x, const REAL *w, int Mb, int Kb,
                           int Nb, REAL *scratch) {
  int q, i, j;
  MPI_Comm_size(row, &q);
  MPI_Comm_rank(col, &i);
  MPI_Comm_rank(row, &j);
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb;
  REAL *xbuf = scratch, *wbuf = xbuf + xe, *tx = wbuf + we, *tw = tx + xe;
  RtSummaCall call = {1, q, dx != NULL, dw != NULL, dbias != NULL, xe, we, (size_t)Nb,
                      (int)sizeof(REAL)};
  for (int l = 0; l < q; l++) {
    RtSummaMsg msg[RT_SUMMA_STEP_MAX];
    int n = rt_summa_step(&call, l, msg);
    const REAL *xl = NULL, *wl = NULL; // this step's broadcast blocks
    for (int k = 0; k < n; k++) {
      const RtSummaMsg *g = &msg[k];
      MPI_Comm c = g->col ? col : row;
      int me = g->col ? i : j; // coord on c
      switch (g->block) {
      case RT_SUMMA_W: // W(j,l), held by rank (l,j)
        wl = FN(rt_bcast_block_)(w, wbuf, g->n, g->root, c);
        break;
      case RT_SUMMA_X: // X(i,l), held by rank (i,l)
        xl = FN(rt_bcast_block_)(x, xbuf, g->n, g->root, c);
        break;
      case RT_SUMMA_DX: // dX(i,l) = Σ_j dY(i,j)·W(j,l), kept by rank (i,l)
        if (!wl || !dx)
          summa_order_fail_(row, g->step, "a dX reduce needs dx and the step's W block");
        FN(rt_gemm)(0, 0, Mb, Kb, Nb, 1, dy, Nb, wl, Kb, 0, tx, Kb); // (Mb,Nb)·(Nb,Kb)
        rt_reduce_(tx, g->n, MPI_REAL_T, sizeof(REAL), g->root, c);
        if (me == g->root)
          FN(rt_axpy)(dx, tx, 1, g->n);
        break;
      case RT_SUMMA_DW: // dW(j,l) = Σ_i dY(i,j)ᵀ·X(i,l), kept by rank (l,j)
        if (!xl || !dw)
          summa_order_fail_(row, g->step, "a dW reduce needs dw and the step's X block");
        FN(rt_gemm)(1, 0, Nb, Kb, Mb, 1, dy, Nb, xl, Kb, 0, tw, Kb); // (Mb,Nb)ᵀ·(Mb,Kb)
        rt_reduce_(tw, g->n, MPI_REAL_T, sizeof(REAL), g->root, c);
        if (me == g->root)
          FN(rt_axpy)(dw, tw, 1, g->n);
        break;
      case RT_SUMMA_DB: // this block's column sums, then the column's: Nb <= Nb·Kb fits wbuf
        if (!dbias)
          summa_order_fail_(row, g->step, "a bias all-reduce needs dbias");
        memset(wbuf, 0, g->n * sizeof(REAL));
        FN(rt_matmul_backward)(NULL, NULL, wbuf, dy, x, w, Mb, Kb, Nb);
        rt_allreduce_(wbuf, g->n, MPI_REAL_T, sizeof(REAL), c);
        FN(rt_axpy)(dbias, wbuf, 1, g->n);
        break;
      default:
        summa_order_fail_(row, g->step, "no such block");
      }
      *(g->col ? bytes_col : bytes_row) += g->vol;
    }
  }
}

// out, x are (N,Cl), mean, rstd (N) or NULL, w, b (Cl), b or NULL;
// scratch (2N doubles): each row's (Σx, Σx²) over all C channels
void FN(rt_layernorm_split_forward)(MPI_Comm comm, uint64_t *bytes, REAL *out, REAL *mean,
                                    REAL *rstd, const REAL *x, const REAL *w, const REAL *b,
                                    int N, int Cl, int C, double eps, double *scratch) {
  int P;
  MPI_Comm_size(comm, &P);
  RT_OMP_FOR((size_t)N * Cl)
  for (int n = 0; n < N; n++) {
    const REAL *xr = x + (size_t)n * Cl;
    double s, m2;
#define TERM(c) (double)xr[c]
    RT_DSUM(s, Cl, TERM);
#undef TERM
    double m = Cl > 0 ? s / Cl : 0;
#define TERM(c) ((double)xr[c] - m) * ((double)xr[c] - m)
    RT_DSUM(m2, Cl, TERM);
#undef TERM
    scratch[2 * n] = s;
    scratch[2 * n + 1] = m2 + s * m; // Σx² = Σ(x - m)² + Cl·m²
  }
  rt_allreduce_(scratch, 2 * (size_t)N, MPI_DOUBLE, sizeof(double), comm);
  *bytes += rt_vol_ln_split_fwd((size_t)N, P);
  RT_OMP_FOR((size_t)N * Cl)
  for (int n = 0; n < N; n++) {
    const REAL *xr = x + (size_t)n * Cl;
    REAL *y = out + (size_t)n * Cl;
    double mu = scratch[2 * n] / C, var = scratch[2 * n + 1] / C - mu * mu;
    REAL m = (REAL)mu, s = (REAL)(1 / sqrt((var > 0 ? var : 0) + eps));
    if (b)
      for (int c = 0; c < Cl; c++)
        y[c] = (xr[c] - m) * s * w[c] + b[c];
    else
      for (int c = 0; c < Cl; c++)
        y[c] = (xr[c] - m) * s * w[c];
    if (mean)
      mean[n] = m;
    if (rstd)
      rstd[n] = s;
  }
}

// dx, dout, x are (N,Cl), dw, db, w (Cl), mean, rstd (N);
// scratch (2N doubles): each row's (Σ w·dy, Σ w·dy·x̂) over all C channels
void FN(rt_layernorm_split_backward)(MPI_Comm comm, uint64_t *bytes, REAL *dx, REAL *dw,
                                     REAL *db, const REAL *dout, const REAL *x,
                                     const REAL *w, const REAL *mean, const REAL *rstd,
                                     int N, int Cl, int C, double *scratch) {
  if (dw || db) // column sums over the local rows: the single-device kernel's
    FN(rt_layernorm_backward)(NULL, dw, db, dout, x, w, mean, rstd, N, Cl);
  if (!dx)
    return;
  int P;
  MPI_Comm_size(comm, &P);
  RT_OMP_FOR((size_t)N * Cl)
  for (int n = 0; n < N; n++) {
    const REAL *xr = x + (size_t)n * Cl, *dy = dout + (size_t)n * Cl;
    REAL m = mean[n], s = rstd[n];
    double a, an;
#define TERM(c) (double)(w[c] * dy[c])
    RT_DSUM(a, Cl, TERM);
#undef TERM
#define TERM(c) (double)((w[c] * dy[c]) * ((xr[c] - m) * s))
    RT_DSUM(an, Cl, TERM);
#undef TERM
    scratch[2 * n] = a;
    scratch[2 * n + 1] = an;
  }
  rt_allreduce_(scratch, 2 * (size_t)N, MPI_DOUBLE, sizeof(double), comm);
  *bytes += rt_vol_ln_split_bwd((size_t)N, P);
  RT_OMP_FOR((size_t)N * Cl)
  for (int n = 0; n < N; n++) {
    const REAL *xr = x + (size_t)n * Cl, *dy = dout + (size_t)n * Cl;
    REAL *d = dx + (size_t)n * Cl;
    REAL m = mean[n], s = rstd[n];
    // dx = s·(dnorm - mean(dnorm) - norm·mean(dnorm·norm)), dnorm = w·dy
    REAL dnorm_mean = (REAL)(scratch[2 * n] / C);
    REAL dnorm_norm_mean = (REAL)(scratch[2 * n + 1] / C);
    for (int c = 0; c < Cl; c++) {
      REAL norm = (xr[c] - m) * s;
      d[c] += s * (w[c] * dy[c] - dnorm_mean - norm * dnorm_norm_mean);
    }
  }
}

// out, x are (N,Cl), rstd (N) or NULL, w (Cl); scratch (N doubles): each
// row's Σx² over all C channels
void FN(rt_rmsnorm_split_forward)(MPI_Comm comm, uint64_t *bytes, REAL *out, REAL *rstd,
                                  const REAL *x, const REAL *w, int N, int Cl, int C,
                                  double eps, double *scratch) {
  int P;
  MPI_Comm_size(comm, &P);
  RT_OMP_FOR((size_t)N * Cl)
  for (int n = 0; n < N; n++) {
    const REAL *xr = x + (size_t)n * Cl;
    double ss;
#define TERM(c) (double)xr[c] * xr[c]
    RT_DSUM(ss, Cl, TERM);
#undef TERM
    scratch[n] = ss;
  }
  rt_allreduce_(scratch, (size_t)N, MPI_DOUBLE, sizeof(double), comm);
  *bytes += rt_vol_rms_split_fwd((size_t)N, P);
  RT_OMP_FOR((size_t)N * Cl)
  for (int n = 0; n < N; n++) {
    const REAL *xr = x + (size_t)n * Cl;
    REAL *y = out + (size_t)n * Cl;
    REAL s = (REAL)(1 / sqrt(scratch[n] / C + eps));
    for (int c = 0; c < Cl; c++)
      y[c] = xr[c] * s * w[c];
    if (rstd)
      rstd[n] = s;
  }
}

// dx, dout, x are (N,Cl), dw, w (Cl), rstd (N); scratch (N doubles): each
// row's Σ w·dy·x over all C channels
void FN(rt_rmsnorm_split_backward)(MPI_Comm comm, uint64_t *bytes, REAL *dx, REAL *dw,
                                   const REAL *dout, const REAL *x, const REAL *w,
                                   const REAL *rstd, int N, int Cl, int C, double *scratch) {
  if (dw) // column sums over the local rows: the single-device kernel's
    FN(rt_rmsnorm_backward)(NULL, dw, dout, x, w, rstd, N, Cl);
  if (!dx)
    return;
  int P;
  MPI_Comm_size(comm, &P);
  RT_OMP_FOR((size_t)N * Cl)
  for (int n = 0; n < N; n++) {
    const REAL *xr = x + (size_t)n * Cl, *dy = dout + (size_t)n * Cl;
    double a;
#define TERM(c) (double)(w[c] * dy[c]) * xr[c]
    RT_DSUM(a, Cl, TERM);
#undef TERM
    scratch[n] = a;
  }
  rt_allreduce_(scratch, (size_t)N, MPI_DOUBLE, sizeof(double), comm);
  *bytes += rt_vol_rms_split_bwd((size_t)N, P);
  RT_OMP_FOR((size_t)N * Cl)
  for (int n = 0; n < N; n++) {
    const REAL *xr = x + (size_t)n * Cl, *dy = dout + (size_t)n * Cl;
    REAL *d = dx + (size_t)n * Cl;
    REAL s = rstd[n];
    // dx = s·(dnorm - norm·mean(dnorm·norm)), norm = x·s, dnorm = w·dy
    REAL dn_n_mean = (REAL)(scratch[n] * s / C);
    for (int c = 0; c < Cl; c++)
      d[c] += s * (w[c] * dy[c] - xr[c] * s * dn_n_mean);
  }
}

#endif
