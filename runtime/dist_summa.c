/* dist_summa.c — SUMMA linear layers and split-channel layernorm over MPI
 * (see dist_summa.h). The file is its own template: the first pass below
 * includes it twice more with REAL = float (_f32) and REAL = double (_f64),
 * as kernels.c does with the k_*.inc files. */
#ifndef RT_DIST_SUMMA_TEMPLATE
#include <math.h>
#include <string.h>

#include "dist_formulas.h"
#include "dist_summa.h"
#include "rt_internal.h"

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
  for (int k = 0; k < q; k++) {
    const REAL *xk = FN(rt_bcast_block_)(x, xbuf, xe, k, row);
    const REAL *wk = FN(rt_bcast_block_)(w, wbuf, we, k, col);
    *bytes_row += rt_vol_bcast(xe * sizeof(REAL), q);
    *bytes_col += rt_vol_bcast(we * sizeof(REAL), q);
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
  for (int l = 0; l < q; l++) {
    if (dx) { // dX(i,l) = Σ_j dY(i,j)·W(j,l); W(j,l) is held by rank (l,j)
      const REAL *wl = FN(rt_bcast_block_)(w, wbuf, we, l, col);
      FN(rt_gemm)(0, 0, Mb, Kb, Nb, 1, dy, Nb, wl, Kb, 0, tx, Kb); // (Mb,Nb)·(Nb,Kb)
      rt_reduce_(tx, xe, MPI_REAL_T, sizeof(REAL), l, row);
      if (j == l)
        FN(rt_axpy)(dx, tx, 1, xe);
      *bytes_col += rt_vol_bcast(we * sizeof(REAL), q);
      *bytes_row += rt_vol_reduce(xe * sizeof(REAL), q);
    }
    if (dw) { // dW(j,l) = Σ_i dY(i,j)ᵀ·X(i,l), kept by rank (l,j)
      const REAL *xl = FN(rt_bcast_block_)(x, xbuf, xe, l, row);
      FN(rt_gemm)(1, 0, Nb, Kb, Mb, 1, dy, Nb, xl, Kb, 0, tw, Kb); // (Mb,Nb)ᵀ·(Mb,Kb)
      rt_reduce_(tw, we, MPI_REAL_T, sizeof(REAL), l, col);
      if (i == l)
        FN(rt_axpy)(dw, tw, 1, we);
      *bytes_row += rt_vol_bcast(xe * sizeof(REAL), q);
      *bytes_col += rt_vol_reduce(we * sizeof(REAL), q);
    }
  }
  if (dbias) { // this block's column sums, then the column's: Nb <= Nb·Kb fits wbuf
    memset(wbuf, 0, (size_t)Nb * sizeof(REAL));
    FN(rt_matmul_backward)(NULL, NULL, wbuf, dy, x, w, Mb, Kb, Nb);
    rt_allreduce_(wbuf, (size_t)Nb, MPI_REAL_T, sizeof(REAL), col);
    FN(rt_axpy)(dbias, wbuf, 1, (size_t)Nb);
    *bytes_col += rt_vol_allreduce((uint64_t)Nb * sizeof(REAL), q);
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
    double s = 0, m2 = 0;
    for (int c = 0; c < Cl; c++)
      s += xr[c];
    double m = Cl > 0 ? s / Cl : 0;
    for (int c = 0; c < Cl; c++)
      m2 += (xr[c] - m) * (xr[c] - m);
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
    double a = 0, an = 0;
    for (int c = 0; c < Cl; c++) {
      REAL dnorm = w[c] * dy[c];
      a += dnorm;
      an += dnorm * ((xr[c] - m) * s);
    }
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
    double ss = 0;
    for (int c = 0; c < Cl; c++)
      ss += (double)xr[c] * xr[c];
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
    double a = 0;
    for (int c = 0; c < Cl; c++)
      a += (double)(w[c] * dy[c]) * xr[c];
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
