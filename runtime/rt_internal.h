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

/* Salt for the dropout stream, so it never coincides with an init stream. */
#define RT_DROPOUT_SALT 0xD50F7A11C0FFEE01ull

#endif
