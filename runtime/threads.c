/* threads.c — the two thread pools a program runs on: OpenMP's (the
 * kernels' own loops) and OpenBLAS's (GEMMs), and how they share the cores.
 * The interplay is documented in shardrt.h, next to rt_set_threads. */
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "rt_internal.h"

/* Weak: the library also links against a BLAS without these (then BLAS
 * threading is that library's business). */
extern void openblas_set_num_threads(int) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));

int rt_set_threads(int n) {
  if (n <= 0) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = cores > 0 ? (int)cores : 1;
  }
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  if (openblas_set_num_threads)
    openblas_set_num_threads(n);
  return n;
}

int rt_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int rt_blas_serial_begin(void) {
  if (!openblas_get_num_threads || !openblas_set_num_threads)
    return 0;
  int prev = openblas_get_num_threads();
  if (prev > 1)
    openblas_set_num_threads(1);
  return prev;
}

void rt_blas_serial_end(int prev) {
  if (prev > 1 && openblas_set_num_threads)
    openblas_set_num_threads(prev);
}
