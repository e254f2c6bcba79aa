/* threads.c — the two thread pools a program runs on: OpenMP's (the
 * kernels' own loops) and OpenBLAS's (GEMMs), and how they share the cores.
 * The interplay is documented in shardrt.h, next to rt_set_threads. */
#define _GNU_SOURCE /* sched_setaffinity */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
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

void rt_set_threads_unless_env(int n) {
#ifdef _OPENMP
  if (!getenv("OMP_NUM_THREADS"))
    omp_set_num_threads(n);
#endif
  if (!getenv("OPENBLAS_NUM_THREADS") && openblas_set_num_threads)
    openblas_set_num_threads(n);
}

int rt_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int rt_blas_threads(void) {
  if (openblas_get_num_threads)
    return openblas_get_num_threads();
  return rt_threads();
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

/* A positive count at the start of s ("4"), or 0. */
static int leading_count(const char *s) {
  if (!s || *s < '0' || *s > '9')
    return 0;
  char *end;
  long v = strtol(s, &end, 10);
  return v > 0 && v <= 1 << 20 && *end == 0 ? (int)v : 0;
}

/* Slurm's SLURM_TASKS_PER_NODE ("2(x3),1": 2 tasks on each of the first 3
 * nodes, 1 on the 4th) at node `node`, or 0 when it does not parse. */
static int slurm_tasks_on(const char *s, int node) {
  if (!s || node < 0)
    return 0;
  while (*s) {
    char *end;
    long n = strtol(s, &end, 10), times = 1;
    if (end == s || n <= 0 || n > 1 << 20)
      return 0;
    s = end;
    if (*s == '(') {
      if (s[1] != 'x')
        return 0;
      times = strtol(s + 2, &end, 10);
      if (end == s + 2 || times <= 0 || *end != ')')
        return 0;
      s = end + 1;
    }
    if (node < times)
      return (int)n;
    node -= (int)times;
    if (*s == ',')
      s++;
    else if (*s)
      return 0;
  }
  return 0;
}

int rt_local_ranks(int def) {
  int n = leading_count(getenv("OMPI_COMM_WORLD_LOCAL_SIZE"));
  if (n <= 0)
    n = leading_count(getenv("SLURM_NTASKS_PER_NODE"));
  if (n <= 0) {
    /* this node's figure (SLURM_NODEID, 0 when unset) */
    const char *id = getenv("SLURM_NODEID");
    char *end = NULL;
    long node = id && *id ? strtol(id, &end, 10) : 0;
    if (!id || !*id || (*end == 0 && node >= 0 && node < 1 << 20))
      n = slurm_tasks_on(getenv("SLURM_TASKS_PER_NODE"), (int)node);
  }
  return n > 0 ? n : def;
}

int rt_threads_per_rank(int ranks) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int local = rt_local_ranks(ranks);
  long t = cores > 0 && local > 0 ? cores / local : 1;
  return t < 1 ? 1 : (int)t;
}

int rt_bind_shared_cores(void) {
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!lr) /* Slurm's name */
    lr = getenv("SLURM_LOCALID");
  const char *off = getenv("SHARDC_NO_BIND");
  int local = rt_local_ranks(0);
  if (!local || !lr || (off && *off && strcmp(off, "0")))
    return -1;
  int me = atoi(lr);
  cpu_set_t cur;
  if (local <= 0 || me < 0 || sched_getaffinity(0, sizeof cur, &cur))
    return -1;
  /* the cores this rank may use (the launcher's binding or the container's
   * cpuset): a core each, or more, leaves the choice to the kernel; else a
   * core of them, so never outside what the launcher allowed */
  int n = CPU_COUNT(&cur);
  if (n <= 1 || local <= n)
    return -1;
  int want = me % n, k = 0;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &cur))
      continue;
    if (k++ == want) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      return sched_setaffinity(0, sizeof one, &one) ? -1 : c;
    }
  }
  return -1;
}
