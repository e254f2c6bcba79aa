/* test_coll_bf16.cu — the bf16 overloads of rtc_dist.cu's collectives
 * (rtc_allreduce, rtc_allgather_dim, rtc_reduce_scatter_dim; rtc_train.h's
 * bf16 block) against dist.h's MPI functions on the same values widened to
 * fp32, under mpirun (2 and 4 ranks; host build: NCCL is MPI through
 * host/nccl_host.h, ncclBfloat16 included), NCCL and staged (--comm mpi).
 *
 * Per axis of size > 1 of a tp mesh and, on 4 ranks, a dp×tp one: random
 * inputs rounded to bf16, outputs poisoned (NaN); outer 1 and outer 3 (the
 * permuted path, scratch exactly rt_scratch_dim_collective × 2 bytes),
 * inner odd.  Metric bf16_cmp.h's (largest per-element relative error
 * floored at the rms): the gather exact (limit 1e-30), the sums below
 * BF16_TOL (the fp32 sum rounded to bf16).  Bytes: m->bytes[ax] grows by
 * dist_formulas.h's volume of the bf16 bytes, one call.
 */
#include <mpi.h>

#include "bf16_cmp.h"
#include "rtc_train.h"

extern "C" {
#include "dist.h"
}

#include "rtc_test_mpi.h"

static void check_bytes_(RtMesh *m, RtAxis ax, const char *what, uint64_t want) {
  CHECK(m->bytes[ax] == want && m->calls[ax] == 1 && rt_mesh_total_bytes(m) == want,
        "%s over %s counted %llu bytes in %llu calls, want %llu in 1", what, rt_axis_name(ax),
        (unsigned long long)m->bytes[ax], (unsigned long long)m->calls[ax],
        (unsigned long long)want);
}

static void check_axis(RtMesh *m, RtAxis ax, const char *mode) {
  int P = m->size[ax];
  char shape[96], label[64];
  snprintf(label, sizeof label, "rank %d: bf16 %s", world_rank, rt_axis_name(ax));
  rtc_test_state = 0x9e3779b97f4a7c15ull + 104729ull * (uint64_t)(world_rank + 1);

  // all-reduce of n values
  size_t n = 1001;
  float *a = bf16_host(n, -1, 1), *want = rtc_test_copy(a, n);
  rt_allreduce(m, ax, want, n, 4);
  rtc_bf16 *d_a = bf16_dev(a, n);
  rt_mesh_reset_counts(m);
  rtc_allreduce(m, ax, d_a, n);
  rtc_sync();
  check_bytes_(m, ax, "rtc_allreduce", rt_vol_allreduce((uint64_t)n * 2, P));
  snprintf(shape, sizeof shape, "%s P=%d n=%zu", mode, P, n);
  bf16_check(label, shape, "allred", d_a, want, n);
  free(a), free(want);
  rtc_test_dfree(d_a);

  for (size_t outer = 1; outer <= 3; outer += 2) {
    size_t inner = 37, nb = outer * inner, nf = nb * (size_t)P;
    size_t sbytes = rt_scratch_dim_collective(outer, inner, P) * 2;
    // the scratch: exactly its bytes (none for outer 1)
    void *d_s = sbytes ? (void *)bf16_poison(sbytes / 2) : NULL;
    snprintf(shape, sizeof shape, "%s P=%d outer=%zu inner=%zu", mode, P, outer, inner);

    // all-gather: (outer, inner) -> (outer, P·inner)
    float *src = bf16_host(nb, -1, 1), *full = (float *)malloc(nf * sizeof(float));
    float *hx = (float *)malloc((nf ? nf : 1) * sizeof(float));
    rt_allgather_dim(m, ax, full, src, outer, inner, 4, hx);
    rtc_bf16 *d_src = bf16_dev(src, nb), *d_full = bf16_poison(nf);
    rt_mesh_reset_counts(m);
    rtc_allgather_dim(m, ax, d_full, d_src, outer, inner, d_s);
    rtc_sync();
    check_bytes_(m, ax, "rtc_allgather_dim", rt_vol_allgather((uint64_t)outer * P * inner * 2, P));
    bf16_check(label, shape, "gather", d_full, full, nf, 1e-30);

    // reduce-scatter: (outer, P·inner) partial sums -> (outer, inner)
    float *part = bf16_host(nf, -1, 1), *mine = (float *)malloc(nb * sizeof(float));
    rt_reduce_scatter_dim(m, ax, mine, part, outer, inner, 4, hx);
    rtc_bf16 *d_part = bf16_dev(part, nf), *d_mine = bf16_poison(nb);
    rt_mesh_reset_counts(m);
    rtc_reduce_scatter_dim(m, ax, d_mine, d_part, outer, inner, d_s);
    rtc_sync();
    check_bytes_(m, ax, "rtc_reduce_scatter_dim",
                 rt_vol_reduce_scatter((uint64_t)outer * P * inner * 2, P));
    bf16_check(label, shape, "redsc", d_mine, mine, nb);

    free(src), free(full), free(hx), free(part), free(mine);
    rtc_test_dfree(d_src, d_full, d_part, d_mine, d_s);
  }
}

static void check_mesh(int dp, int tp) {
  RtMesh m;
  if (rt_mesh_init(&m, dp, tp, 0, 1, 1) != RT_OK) {
    printf("rank %d: FAIL mesh dp=%d tp=%d: %s\n", world_rank, dp, tp, rt_last_error());
    rtc_test_failures++;
    return;
  }
  const char *modes[2] = {"nccl", "mpi"};
  for (int staged = 0; staged < 2; staged++) {
    CHECK(rtc_mesh_init(&m, staged) == RT_OK, "rtc_mesh_init: %s", rt_last_error());
    for (int ax = 0; ax < RT_AX_COUNT; ax++)
      if (m.comm[ax] != MPI_COMM_NULL && m.size[ax] > 1) check_axis(&m, (RtAxis)ax, modes[staged]);
    rtc_mesh_free();
  }
  rt_mesh_free(&m);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char *name = NULL;
  if (world < 2) {
    if (world_rank == 0) printf("SKIP: one rank\n");
    MPI_Finalize();
    return 77;
  }
  if (rtc_device_init(world_rank, &name) != RT_OK) {
    printf("SKIP: no device: %s\n", rt_last_error());
    MPI_Finalize();
    return 77;
  }
  check_mesh(1, world);
  if (world % 2 == 0 && world > 2) check_mesh(2, world / 2);
  bf16_selftest();
  return rtc_test_mpi_finish();
}
