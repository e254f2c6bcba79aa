/* rt_internal.h — helpers shared by the runtime's own .c files (not installed). */
#ifndef SHARDRT_INTERNAL_H
#define SHARDRT_INTERNAL_H

#include "shardrt.h"

/* OpenMP is optional: the pragma appears only when compiled with -fopenmp,
 * so -Wunknown-pragmas stays quiet otherwise. `work` (elements, or elements
 * weighted by their cost) keeps small calls serial, where forking threads
 * costs more than it saves. Static schedules everywhere a thread's share
 * could matter; the dynamic one only hands out independent tasks whose
 * results do not depend on which thread runs them. */
#define RT_OMP_MIN_WORK (1 << 18)
#define RT_PRAGMA_(x) _Pragma(#x)
#ifdef _OPENMP
#define RT_OMP_FOR(work)                                                           \
  RT_PRAGMA_(omp parallel for schedule(static) if ((work) >= RT_OMP_MIN_WORK))
#define RT_OMP_FOR_DYNAMIC(work)                                                   \
  RT_PRAGMA_(omp parallel for schedule(dynamic, 1) if ((work) >= RT_OMP_MIN_WORK))
#else
#define RT_OMP_FOR(work)
#define RT_OMP_FOR_DYNAMIC(work)
#endif

/* Σ TERM(c) for c < n into the double `out`, in RT_DSUM_LANES partial sums
 * added in a fixed order (so every run rounds alike): one dependent add
 * per element bound the split norms' and the vocab-parallel
 * cross-entropy's row sums at 4 cycles an element; lanes vectorize. */
#define RT_DSUM_LANES 8
#define RT_DSUM(out, n, TERM)                                                      \
  do {                                                                             \
    double acc_[RT_DSUM_LANES] = {0};                                              \
    int c_ = 0;                                                                    \
    for (; c_ + RT_DSUM_LANES <= (n); c_ += RT_DSUM_LANES)                         \
      for (int j_ = 0; j_ < RT_DSUM_LANES; j_++)                                   \
        acc_[j_] += TERM(c_ + j_);                                                 \
    for (; c_ < (n); c_++)                                                         \
      acc_[c_ % RT_DSUM_LANES] += TERM(c_);                                        \
    out = ((acc_[0] + acc_[1]) + (acc_[2] + acc_[3])) +                            \
          ((acc_[4] + acc_[5]) + (acc_[6] + acc_[7]));                             \
  } while (0)

/* Column-parallel reductions over rows (parameter gradients) give each task
 * this many columns: a few cache lines per row, rows summed in order. */
#define RT_COL_CHUNK 64

/* OpenBLAS to one thread for a kernel that calls BLAS from inside its own
 * OpenMP region (threads.c); returns what to restore with _end. */
int rt_blas_serial_begin(void);
void rt_blas_serial_end(int prev);

/* After len = snprintf(buf, cap, ...): a message that did not fit ends in
 * "…" (cut on a character boundary), so no message is cut silently. */
void rt_mark_cut(char *buf, size_t cap, int len);

/* Opens path to read without waiting (open() of a FIFO would wait for a
 * writer forever) and refuses what is not a regular file (a FIFO, a
 * device: no end, or no bytes): the descriptor, back to blocking, with
 * *st filled; -1 with errno when open() or fstat() failed; -2 when path
 * is not a regular file (nothing left open). */
struct stat;
int rt_open_regular(const char *path, struct stat *st);

/* Salt for the dropout stream, so it never coincides with an init stream. */
#define RT_DROPOUT_SALT 0xD50F7A11C0FFEE01ull

#endif
