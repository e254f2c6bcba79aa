/* dist_summa.h — 2D tensor parallelism (Optimus) over MPI: SUMMA linear
 * layers on a q×q grid and layernorm with the channel dim split over a
 * communicator. Part of libshardrt_mpi; needs only MPI and libshardrt.
 *
 * Grid: the rank at row i, column j is rank i of `col` (the q ranks of its
 * grid column) and rank j of `row` (the q ranks of its grid row).
 * Y[M,N] = X[M,K]·W[N,K]ᵀ + b in blocks of Mb = M/q, Kb = K/q, Nb = N/q:
 *   x    (Mb,Kb)  X rows block i, K block j
 *   w    (Nb,Kb)  W N block j, K block i
 *   bias (Nb)     N block j (the same down a column)
 *   y    (Mb,Nb)  Y rows block i, N block j
 * Block sizes are >= 1 and the same on every rank.
 *
 * Every rank of a grid row / column must make the same calls in the same
 * order with the same NULL-ness of optional pointers (the collectives pair
 * up). The collectives of one call, in order, are dist_orders.h's
 * rt_summa_msgs, which the compiler's communication check also reads. Byte counters are ADDED to: bytes sent per rank under the formulas
 * of dist_formulas.h, per communicator. MPI errors abort (the default
 * MPI_ERRORS_ARE_FATAL handler), so these functions return nothing.
 * Reductions are MPI_SUM over a fixed communicator and sizes, and local sums
 * run in a fixed order: results are the same run to run, whatever the
 * timing (and, as for the GEMMs of shardrt.h, for a given thread count).
 *
 * Volumes (esize = sizeof element, xb = Mb·Kb·esize, wb = Nb·Kb·esize):
 *   forward   row  q·rt_vol_bcast(xb, q)
 *             col  q·rt_vol_bcast(wb, q)                 (sum: rt_vol_summa_fwd)
 *   backward  row  q·(rt_vol_bcast(xb, q) + rt_vol_reduce(xb, q))
 *             col  q·(rt_vol_bcast(wb, q) + rt_vol_reduce(wb, q))
 *                  + rt_vol_allreduce(Nb·esize, q)      when dbias != NULL
 *             (sum without dbias: rt_vol_summa_bwd); dx == NULL drops the
 *             W broadcasts (col) and dX reduces (row), dw == NULL the X
 *             broadcasts (row) and dW reduces (col).
 * Scratch (elements): rt_scratch_summa_fwd(Mb·Kb, Nb·Kb) forward,
 * rt_scratch_summa_bwd(Mb·Kb, Nb·Kb) backward.
 */
#ifndef SHARDRT_DIST_SUMMA_H
#define SHARDRT_DIST_SUMMA_H

#include <stdint.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = x·wᵀ + bias summed over the grid (WRITTEN); bias may be NULL.
 * For k in 0..q-1: X(i,k) broadcast along the row from column k, the W
 * block of rank (k,j) down the column from row k, y += X(i,k)·W(k,j)ᵀ. */
void rt_summa_forward_f32(MPI_Comm row, MPI_Comm col, uint64_t *bytes_row,
                          uint64_t *bytes_col, float *y, const float *x, const float *w,
                          const float *bias, int Mb, int Kb, int Nb, float *scratch);
/* dy is (Mb,Nb); dx (Mb,Kb), dw (Nb,Kb), dbias (Nb) ACCUMULATE, any NULL.
 * dX = dY·W: for l, the W block of rank (l,j) down the column, dy·W summed
 * along the row into column l's dx. dW = dYᵀ·X: for l, X(i,l) along the
 * row, dyᵀ·X(i,l) summed down the column into row l's dw. dbias = Σ_rows dy
 * all-reduced down the column (every rank of column j gets all of it). */
void rt_summa_backward_f32(MPI_Comm row, MPI_Comm col, uint64_t *bytes_row,
                           uint64_t *bytes_col, float *dx, float *dw, float *dbias,
                           const float *dy, const float *x, const float *w, int Mb, int Kb,
                           int Nb, float *scratch);

/* Layernorm over C = P·Cl channels split over comm (P ranks, Cl each):
 * x, out (N,Cl); w, b (Cl), b may be NULL; mean, rstd (N) or NULL, the
 * full-row statistics, the same on every rank. One all-reduce of each
 * row's (Σx, Σx²) in double (rt_vol_ln_split_fwd); every rank adds its Σx²
 * as Σ(x - m_r)² + Cl·m_r² about its local mean m_r, so the variance
 * Σx²/C - mean² loses to cancellation only what double loses on mean².
 * scratch: rt_scratch_ln_split_bytes(N) bytes. */
void rt_layernorm_split_forward_f32(MPI_Comm comm, uint64_t *bytes, float *out,
                                    float *mean, float *rstd, const float *x,
                                    const float *w, const float *b, int N, int Cl, int C,
                                    double eps, double *scratch);
/* dout, x (N,Cl); mean, rstd (N) from the forward. dx (N,Cl), dw, db (Cl)
 * ACCUMULATE, any NULL; dw and db are this rank's sums over its N rows
 * only. dx needs one all-reduce of each row's (Σ w·dy, Σ w·dy·x̂) in double
 * (rt_vol_ln_split_bwd); with dx == NULL nothing is communicated. */
void rt_layernorm_split_backward_f32(MPI_Comm comm, uint64_t *bytes, float *dx, float *dw,
                                     float *db, const float *dout, const float *x,
                                     const float *w, const float *mean, const float *rstd,
                                     int N, int Cl, int C, double *scratch);

/* RMSNorm over C = P·Cl channels split over comm: x, out (N,Cl); w (Cl);
 * rstd (N) or NULL, the full-row statistic, the same on every rank. One
 * all-reduce of each row's Σx² in double (rt_vol_rms_split_fwd).
 * scratch: rt_scratch_rms_split_bytes(N) bytes. */
void rt_rmsnorm_split_forward_f32(MPI_Comm comm, uint64_t *bytes, float *out, float *rstd,
                                  const float *x, const float *w, int N, int Cl, int C,
                                  double eps, double *scratch);
/* dout, x (N,Cl); rstd (N) from the forward. dx (N,Cl), dw (Cl) ACCUMULATE,
 * either NULL; dw is this rank's sum over its N rows only. dx needs one
 * all-reduce of each row's Σ w·dy·x in double (rt_vol_rms_split_bwd); with
 * dx == NULL nothing is communicated. */
void rt_rmsnorm_split_backward_f32(MPI_Comm comm, uint64_t *bytes, float *dx, float *dw,
                                   const float *dout, const float *x, const float *w,
                                   const float *rstd, int N, int Cl, int C, double *scratch);

/* The same over double. */
void rt_summa_forward_f64(MPI_Comm row, MPI_Comm col, uint64_t *bytes_row,
                          uint64_t *bytes_col, double *y, const double *x, const double *w,
                          const double *bias, int Mb, int Kb, int Nb, double *scratch);
void rt_summa_backward_f64(MPI_Comm row, MPI_Comm col, uint64_t *bytes_row,
                           uint64_t *bytes_col, double *dx, double *dw, double *dbias,
                           const double *dy, const double *x, const double *w, int Mb,
                           int Kb, int Nb, double *scratch);
void rt_layernorm_split_forward_f64(MPI_Comm comm, uint64_t *bytes, double *out,
                                    double *mean, double *rstd, const double *x,
                                    const double *w, const double *b, int N, int Cl, int C,
                                    double eps, double *scratch);
void rt_layernorm_split_backward_f64(MPI_Comm comm, uint64_t *bytes, double *dx,
                                     double *dw, double *db, const double *dout,
                                     const double *x, const double *w, const double *mean,
                                     const double *rstd, int N, int Cl, int C,
                                     double *scratch);

void rt_rmsnorm_split_forward_f64(MPI_Comm comm, uint64_t *bytes, double *out, double *rstd,
                                  const double *x, const double *w, int N, int Cl, int C,
                                  double eps, double *scratch);
void rt_rmsnorm_split_backward_f64(MPI_Comm comm, uint64_t *bytes, double *dx, double *dw,
                                   const double *dout, const double *x, const double *w,
                                   const double *rstd, int N, int Cl, int C, double *scratch);

#ifdef __cplusplus
}
#endif

#endif
