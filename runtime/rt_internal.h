/* rt_internal.h — helpers shared by the runtime's own .c files (not installed). */
#ifndef SHARDRT_INTERNAL_H
#define SHARDRT_INTERNAL_H

#include "shardrt.h"

/* OpenMP is optional: the pragma appears only when compiled with -fopenmp,
 * so -Wunknown-pragmas stays quiet otherwise. `work` (elements or flops)
 * keeps small calls serial, where forking threads costs more than it saves. */
#define RT_OMP_MIN_WORK (1 << 18)
#define RT_PRAGMA_(x) _Pragma(#x)
#ifdef _OPENMP
#define RT_OMP_FOR(work) RT_PRAGMA_(omp parallel for schedule(static) if ((work) >= RT_OMP_MIN_WORK))
#define RT_OMP_FOR_DYNAMIC(work)                                                   \
  RT_PRAGMA_(omp parallel for schedule(dynamic, 1) if ((work) >= RT_OMP_MIN_WORK))
#else
#define RT_OMP_FOR(work)
#define RT_OMP_FOR_DYNAMIC(work)
#endif

/* Salt for the dropout stream, so it never coincides with an init stream. */
#define RT_DROPOUT_SALT 0xD50F7A11C0FFEE01ull

#endif
