/* rtc_test_mpi.h — what the multi-rank CUDA tests (test_summa, test_vpce,
 * test_normsplit, test_coll_bf16, test_ring) share: the world rank, a CHECK
 * whose failure names it, and the end of main (the failures summed over the
 * ranks, the verdict on rank 0).  Include after rtc_test.h (bf16_cmp.h
 * includes it).
 */
#ifndef RTC_TEST_MPI_H
#define RTC_TEST_MPI_H

#include <mpi.h>
#include <stdio.h>

static int world_rank;

#define CHECK(cond, ...)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      printf("rank %d: FAIL %s:%d: ", world_rank, __FILE__, __LINE__);               \
      printf(__VA_ARGS__);                                                           \
      printf("\n");                                                                  \
      rtc_test_failures++;                                                           \
    }                                                                                \
  } while (0)

/* Every rank's failures summed, the verdict printed by rank 0, MPI
 * finalized: main's exit status. */
static inline int rtc_test_mpi_finish(void) {
  int failed = rtc_test_failures, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) printf(any ? "%d check(s) FAILED\n" : "all checks passed\n", any);
  MPI_Finalize();
  return any ? 1 : 0;
}

#endif
