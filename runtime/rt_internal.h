/* rt_internal.h — helpers shared by the runtime's own .c files (not installed). */
#ifndef SHARDRT_INTERNAL_H
#define SHARDRT_INTERNAL_H

#include "shardrt.h"

/* OpenMP is optional: the pragma appears only when compiled with -fopenmp,
 * so -Wunknown-pragmas stays quiet otherwise. */
#ifdef _OPENMP
#define RT_OMP_FOR _Pragma("omp parallel for schedule(static)")
#define RT_OMP_FOR_DYNAMIC _Pragma("omp parallel for schedule(dynamic, 1)")
#else
#define RT_OMP_FOR
#define RT_OMP_FOR_DYNAMIC
#endif

/* Salt for the dropout stream, so it never coincides with an init stream. */
#define RT_DROPOUT_SALT 0xD50F7A11C0FFEE01ull

#endif
