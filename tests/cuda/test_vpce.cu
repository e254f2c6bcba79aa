/* test_vpce.cu — the vocab-parallel cross-entropy of the CUDA programs
 * (rt_vp_crossentropy_forward_cu / _backward_acc_cu, runtime/cuda/rtc_dist.cu)
 * against dist.h's rt_vp_crossentropy_*_f32 on the same rank data, under
 * mpirun (2 and 4 ranks; host build: NCCL is MPI).
 *
 * Per mesh axis: logits (N,Vl) random per rank, targets global ids the same
 * on the axis with ignore-index rows among them.  The loss (relative error
 * < 1e-5, and y = (float)loss), dlogits accumulated onto random values
 * (rtc_test.h's metric, < 1e-5; ignored rows untouched), the bytes and calls
 * counted on the axis equal to dist.c's, results bitwise the same on a
 * second run, the forward captured as a graph and replayed giving the eager
 * loss bitwise, a bad target giving RT_ERR_ARG with dist.c's message before
 * any communication; then all of it again in staged mode (--comm mpi).
 *
 * The bf16 overloads (runtime/cuda/rtc_vpce.cu: logits, dlogits
 * bf16) the same way on logits and dlogits rounded to bf16, against the
 * cpu functions on those values: the loss (computed in double from the
 * same values) within 1e-5, dlogits within rtc_test_bf16.h's limit,
 * ignored rows bitwise untouched, the same counts, repeatable, captured,
 * and the same error for a bad target.  A padded vocabulary (the first V
 * of the P·VL columns the classes) through the _cls backward, likewise.
 */
#include <mpi.h>

#include "rtc_test_bf16.h"
#include "rtc_train.h"

extern "C" {
#include "dist.h"
}

enum { N = 37, VL = 300 }; // rows; a slice wider than a row's block of 256 threads

#include "rtc_test_mpi.h"

static double rel(double got, double want) {
  return fabs(got - want) / (fabs(want) > 1e-30 ? fabs(want) : 1e-30);
}

static void check_axis(RtMesh *m, RtAxis ax, const char *mode) {
  int P = m->size[ax], r = m->coord[ax], V = P * VL, v0 = r * VL;
  char shape[64];
  snprintf(shape, sizeof shape, "%s %s P=%d (%d,%d)", mode, rt_axis_name(ax), P, N, VL);
  // targets: the same on every rank (a fixed seed); logits and dlogits: this rank's
  int32_t targets[N];
  rtc_test_state = 0x9e3779b97f4a7c15ull;
  for (int n = 0; n < N; n++)
    targets[n] = n % 5 == 3 ? RT_IGNORE_INDEX : (int32_t)rtc_test_rand(0.0f, (float)V) % V;
  for (int p = 0; p < P; p++) targets[p] = p * VL + p; // each slice holds a target
  rtc_test_state = 0x853c49e6748fea9bull + 7919ull * (uint64_t)(world_rank + 1);
  float *x = rtc_test_host((size_t)N * VL, -4.0f, 4.0f);
  float *d0 = rtc_test_host((size_t)N * VL, -1e-4f, 1e-4f); // about the terms' size
  float *hd = rtc_test_copy(d0, (size_t)N * VL);
  double hs[3 * N];
  int nvalid = 0;
  for (int n = 0; n < N; n++) nvalid += targets[n] >= 0;

  float *dx = rtc_test_dev(x, (size_t)N * VL), *dd = rtc_test_dev(d0, (size_t)N * VL);
  int32_t *dt = rtc_test_dev(targets, (size_t)N);
  float *dy = rtc_test_poison(1), seed = 1.7f, *dseed = rtc_test_dev(&seed, 1);
  double *dscratch;
  cudaCheck(cudaMalloc(&dscratch, rt_scratch_vp_xent_bytes(N)));

  // the forward
  double ref = -1;
  rt_mesh_reset_counts(m);
  int rc = rt_vp_crossentropy_forward_f32(m, ax, &ref, x, targets, N, VL, v0, V, hs);
  uint64_t bytes = m->bytes[ax], calls = m->calls[ax];
  CHECK(rc == RT_OK, "cpu forward: %s", rt_last_error());
  static double site, site2, site3; // the call sites' keys
  rt_mesh_reset_counts(m);
  rc = rt_vp_crossentropy_forward_cu(m, ax, &site, dy, dx, dt, N, VL, v0, V, dscratch);
  CHECK(rc == RT_OK, "forward: %s", rt_last_error());
  double err = rel(site, ref);
  printf("rank %d: %-26s %-26s loss     rel err %.3g %s\n", world_rank, "vp_crossentropy_fwd",
         shape, err, err < RTC_TEST_TOL ? "PASS" : "FAIL");
  CHECK(err < RTC_TEST_TOL, "loss %.17g, cpu %.17g", site, ref);
  CHECK(m->bytes[ax] == bytes && m->calls[ax] == calls && rt_mesh_total_bytes(m) == bytes &&
            bytes == rt_vol_vp_xent_fwd(N, P),
        "forward counted %llu bytes in %llu calls, dist.c %llu in %llu",
        (unsigned long long)m->bytes[ax], (unsigned long long)m->calls[ax],
        (unsigned long long)bytes, (unsigned long long)calls);
  CHECK(rtc_get_f32(dy) == (float)site, "y %.9g, loss %.9g", rtc_get_f32(dy), site);
  rc = rt_vp_crossentropy_forward_cu(m, ax, &site2, NULL, dx, dt, N, VL, v0, V, dscratch);
  CHECK(rc == RT_OK && site2 == site, "a second forward: %.17g, first %.17g", site2, site);

  // captured and replayed: the eager loss, left on the device
  if (!strcmp(mode, "nccl")) {
    rt_mesh_reset_counts(m);
    rtc_capture_begin();
    rc = rt_vp_crossentropy_forward_cu(m, ax, &site3, NULL, dx, dt, N, VL, v0, V, dscratch);
    RtcGraph *g = rtc_capture_end();
    CHECK(rc == RT_OK && m->bytes[ax] == bytes && m->calls[ax] == calls,
          "captured forward: rc %d, %llu bytes", rc, (unsigned long long)m->bytes[ax]);
    rtc_graph_launch(g);
    double replayed = -1;
    rtc_to_host(&replayed, rt_crossentropy_site_loss_cu(&site3), sizeof replayed);
    CHECK(replayed == site, "replayed loss %.17g, eager %.17g", replayed, site);
    rtc_graph_free(g);
  }

  // the backward, accumulated onto random values
  rt_mesh_reset_counts(m);
  rt_vp_crossentropy_backward_acc_f32(m, ax, hd, x, targets, N, VL, v0, (double)seed, nvalid, hs);
  bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_vp_crossentropy_backward_acc_cu(m, ax, dd, dx, dt, N, VL, v0, dseed, nvalid, dscratch);
  CHECK(m->bytes[ax] == bytes && m->calls[ax] == calls && rt_mesh_total_bytes(m) == bytes &&
            bytes == rt_vol_vp_xent_bwd(N, P),
        "backward counted %llu bytes in %llu calls, dist.c %llu in %llu",
        (unsigned long long)m->bytes[ax], (unsigned long long)m->calls[ax],
        (unsigned long long)bytes, (unsigned long long)calls);
  char label[80];
  snprintf(label, sizeof label, "rank %d: vp_crossentropy_bwd", world_rank);
  rtc_test_check(label, shape, "dlogits", dd, hd, (size_t)N * VL);
  float *got = (float *)malloc((size_t)N * VL * sizeof(float));
  rtc_to_host(got, dd, (size_t)N * VL * sizeof(float));
  for (int n = 0; n < N; n++)
    if (targets[n] < 0)
      CHECK(!memcmp(got + (size_t)n * VL, d0 + (size_t)n * VL, VL * sizeof(float)),
            "ignored row %d has a gradient", n);
  // bitwise repeatable
  float *again = (float *)malloc((size_t)N * VL * sizeof(float));
  rtc_to_device(dd, d0, (size_t)N * VL * sizeof(float));
  rt_vp_crossentropy_backward_acc_cu(m, ax, dd, dx, dt, N, VL, v0, dseed, nvalid, dscratch);
  rtc_to_host(again, dd, (size_t)N * VL * sizeof(float));
  CHECK(!memcmp(got, again, (size_t)N * VL * sizeof(float)), "a second backward differs");

  // a bad target: dist.c's error, on every rank, before any communication
  targets[5] = V;
  rtc_to_device(dt, targets, sizeof targets);
  rc = rt_vp_crossentropy_forward_f32(m, ax, &ref, x, targets, N, VL, v0, V, hs);
  char want[512];
  snprintf(want, sizeof want, "%s", rt_last_error());
  rt_mesh_reset_counts(m);
  rc = rt_vp_crossentropy_forward_cu(m, ax, &site, dy, dx, dt, N, VL, v0, V, dscratch);
  int ok = rc == RT_ERR_ARG && !strcmp(rt_last_error(), want);
  CHECK(ok, "bad target: rc %d, \"%s\", dist.c \"%s\"", rc, rt_last_error(), want);
  CHECK(rt_mesh_total_bytes(m) == 0, "bad target communicated");
  CHECK(rt_mesh_all_ok(m, ok), "bad target not reported on every rank");

  free(x), free(d0), free(hd), free(got), free(again);
  rtc_test_dfree(dx, dd, dt, dy, dseed, dscratch);
}

static void check_axis_bf16(RtMesh *m, RtAxis ax, const char *mode) {
  int P = m->size[ax], r = m->coord[ax], V = P * VL, v0 = r * VL;
  size_t nx = (size_t)N * VL;
  char shape[64];
  snprintf(shape, sizeof shape, "%s %s P=%d (%d,%d)", mode, rt_axis_name(ax), P, N, VL);
  int32_t targets[N];
  rtc_test_state = 0x9e3779b97f4a7c15ull;
  for (int n = 0; n < N; n++)
    targets[n] = n % 5 == 3 ? RT_IGNORE_INDEX : (int32_t)rtc_test_rand(0.0f, (float)V) % V;
  for (int p = 0; p < P; p++) targets[p] = p * VL + p; // each slice holds a target
  rtc_test_state = 0x853c49e6748fea9bull + 7919ull * (uint64_t)(world_rank + 1);
  float *x = rtc_test_host_bf16(nx, -4.0f, 4.0f);
  float *d0 = rtc_test_host_bf16(nx, -1e-4f, 1e-4f);
  float *hd = rtc_test_copy(d0, nx);
  double hs[3 * N];
  int nvalid = 0;
  for (int n = 0; n < N; n++) nvalid += targets[n] >= 0;

  rtc_bf16 *dx = rtc_test_dev_bf16(x, nx), *dd = rtc_test_dev_bf16(d0, nx);
  int32_t *dt = rtc_test_dev(targets, (size_t)N);
  float *dy = rtc_test_poison(1), seed = 1.7f, *dseed = rtc_test_dev(&seed, 1);
  double *dscratch;
  cudaCheck(cudaMalloc(&dscratch, rt_scratch_vp_xent_bytes(N)));

  double ref = -1;
  rt_mesh_reset_counts(m);
  int rc = rt_vp_crossentropy_forward_f32(m, ax, &ref, x, targets, N, VL, v0, V, hs);
  uint64_t bytes = m->bytes[ax], calls = m->calls[ax];
  CHECK(rc == RT_OK, "cpu forward: %s", rt_last_error());
  static double site, site2, site3;
  rt_mesh_reset_counts(m);
  rc = rt_vp_crossentropy_forward_cu(m, ax, &site, dy, dx, dt, N, VL, v0, V, dscratch);
  CHECK(rc == RT_OK, "bf16 forward: %s", rt_last_error());
  double err = rel(site, ref);
  printf("rank %d: %-26s %-26s loss     rel err %.3g %s\n", world_rank,
         "vp_crossentropy_fwd bf16", shape, err, err < RTC_TEST_TOL ? "PASS" : "FAIL");
  CHECK(err < RTC_TEST_TOL, "bf16 loss %.17g, cpu %.17g", site, ref);
  CHECK(m->bytes[ax] == bytes && m->calls[ax] == calls && rt_mesh_total_bytes(m) == bytes,
        "bf16 forward counted %llu bytes in %llu calls, dist.c %llu in %llu",
        (unsigned long long)m->bytes[ax], (unsigned long long)m->calls[ax],
        (unsigned long long)bytes, (unsigned long long)calls);
  CHECK(rtc_get_f32(dy) == (float)site, "bf16 y %.9g, loss %.9g", rtc_get_f32(dy), site);
  rc = rt_vp_crossentropy_forward_cu(m, ax, &site2, NULL, dx, dt, N, VL, v0, V, dscratch);
  CHECK(rc == RT_OK && site2 == site, "a second bf16 forward: %.17g, first %.17g", site2, site);
  if (!strcmp(mode, "nccl")) {
    rtc_capture_begin();
    rc = rt_vp_crossentropy_forward_cu(m, ax, &site3, NULL, dx, dt, N, VL, v0, V, dscratch);
    RtcGraph *g = rtc_capture_end();
    rtc_graph_launch(g);
    double replayed = -1;
    rtc_to_host(&replayed, rt_crossentropy_site_loss_cu(&site3), sizeof replayed);
    CHECK(rc == RT_OK && replayed == site, "replayed bf16 loss %.17g, eager %.17g", replayed,
          site);
    rtc_graph_free(g);
  }

  rt_mesh_reset_counts(m);
  rt_vp_crossentropy_backward_acc_f32(m, ax, hd, x, targets, N, VL, v0, (double)seed, nvalid, hs);
  bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_vp_crossentropy_backward_acc_cu(m, ax, dd, dx, dt, N, VL, v0, dseed, nvalid, dscratch);
  CHECK(m->bytes[ax] == bytes && m->calls[ax] == calls && rt_mesh_total_bytes(m) == bytes,
        "bf16 backward counted %llu bytes in %llu calls, dist.c %llu in %llu",
        (unsigned long long)m->bytes[ax], (unsigned long long)m->calls[ax],
        (unsigned long long)bytes, (unsigned long long)calls);
  char label[80];
  snprintf(label, sizeof label, "rank %d: vp_crossentropy_bwd", world_rank);
  rtc_test_check_bf16(label, shape, "dlogits", dd, hd, nx);
  float *got = rtc_test_fetch_bf16(dd, nx);
  for (int n = 0; n < N; n++)
    if (targets[n] < 0)
      CHECK(!memcmp(got + (size_t)n * VL, d0 + (size_t)n * VL, VL * sizeof(float)),
            "bf16: ignored row %d has a gradient", n);
  rtc_bf16 *dd2 = rtc_test_dev_bf16(d0, nx);
  rt_vp_crossentropy_backward_acc_cu(m, ax, dd2, dx, dt, N, VL, v0, dseed, nvalid, dscratch);
  float *again = rtc_test_fetch_bf16(dd2, nx);
  CHECK(!memcmp(got, again, nx * sizeof(float)), "a second bf16 backward differs");

  targets[5] = V;
  rtc_to_device(dt, targets, sizeof targets);
  rc = rt_vp_crossentropy_forward_f32(m, ax, &ref, x, targets, N, VL, v0, V, hs);
  char want[512];
  snprintf(want, sizeof want, "%s", rt_last_error());
  rt_mesh_reset_counts(m);
  rc = rt_vp_crossentropy_forward_cu(m, ax, &site, dy, dx, dt, N, VL, v0, V, dscratch);
  int ok = rc == RT_ERR_ARG && !strcmp(rt_last_error(), want);
  CHECK(ok, "bf16 bad target: rc %d, \"%s\", dist.c \"%s\"", rc, rt_last_error(), want);
  CHECK(rt_mesh_total_bytes(m) == 0, "bf16 bad target communicated");
  CHECK(rt_mesh_all_ok(m, ok), "bf16 bad target not reported on every rank");

  free(x), free(d0), free(hd), free(got), free(again);
  rtc_test_dfree(dx, dd, dd2, dt, dy, dseed, dscratch);
}

// every axis of size > 1 of the mesh dp x tp, NCCL then staged
/* A padded vocabulary (cross_entropy's classes): V = P·VL - 157 classes,
 * so the last rank's slice holds 143 classes and 157 unused columns (with
 * P = 2 the first rank none unused).  The device's forward and _cls
 * backward against dist.c's on the same data: the loss, dlogits, the
 * unused columns untouched, the same counts; both staged and not. */
static void check_axis_cls(RtMesh *m, RtAxis ax, const char *mode) {
  int P = m->size[ax], r = m->coord[ax], V = P * VL - 157, v0 = r * VL;
  char shape[64];
  snprintf(shape, sizeof shape, "%s %s P=%d (%d,%d) V=%d", mode, rt_axis_name(ax), P, N, VL, V);
  int32_t targets[N];
  rtc_test_state = 0x2545f4914f6cdd1dull;
  for (int n = 0; n < N; n++)
    targets[n] = n % 7 == 2 ? RT_IGNORE_INDEX : (int32_t)rtc_test_rand(0.0f, (float)V) % V;
  targets[0] = V - 1; // the last class, in the last slice
  rtc_test_state = 0x94d049bb133111ebull + 104729ull * (uint64_t)(world_rank + 1);
  float *x = rtc_test_host((size_t)N * VL, -4.0f, 4.0f);
  float *d0 = rtc_test_host((size_t)N * VL, -1e-4f, 1e-4f);
  float *hd = rtc_test_copy(d0, (size_t)N * VL);
  double hs[3 * N];
  int nvalid = 0;
  for (int n = 0; n < N; n++) nvalid += targets[n] >= 0;
  float *dx = rtc_test_dev(x, (size_t)N * VL), *dd = rtc_test_dev(d0, (size_t)N * VL);
  int32_t *dt = rtc_test_dev(targets, (size_t)N);
  float seed = 0.9f, *dseed = rtc_test_dev(&seed, 1);
  double *dscratch;
  cudaCheck(cudaMalloc(&dscratch, rt_scratch_vp_xent_bytes(N)));
  double ref = -1;
  rt_mesh_reset_counts(m);
  int rc = rt_vp_crossentropy_forward_f32(m, ax, &ref, x, targets, N, VL, v0, V, hs);
  uint64_t bytes = m->bytes[ax];
  CHECK(rc == RT_OK, "cpu forward (classes): %s", rt_last_error());
  static double site; // the call site's key
  rt_mesh_reset_counts(m);
  rc = rt_vp_crossentropy_forward_cu(m, ax, &site, NULL, dx, dt, N, VL, v0, V, dscratch);
  CHECK(rc == RT_OK, "forward (classes): %s", rt_last_error());
  double err = rel(site, ref);
  printf("rank %d: %-26s %-26s loss     rel err %.3g %s\n", world_rank, "vp_crossentropy_fwd cls",
         shape, err, err < RTC_TEST_TOL ? "PASS" : "FAIL");
  CHECK(err < RTC_TEST_TOL && m->bytes[ax] == bytes, "loss %.17g, cpu %.17g", site, ref);
  rt_vp_crossentropy_backward_acc_cls_f32(m, ax, hd, x, targets, N, VL, v0, V, (double)seed, nvalid,
                                          hs);
  rt_vp_crossentropy_backward_acc_cls_cu(m, ax, dd, dx, dt, N, VL, v0, V, dseed, nvalid, dscratch);
  char label[80];
  snprintf(label, sizeof label, "rank %d: vp_crossentropy_bwd cls", world_rank);
  rtc_test_check(label, shape, "dlogits", dd, hd, (size_t)N * VL);
  float *got = (float *)malloc((size_t)N * VL * sizeof(float));
  rtc_to_host(got, dd, (size_t)N * VL * sizeof(float));
  int nv = V - v0 < 0 ? 0 : V - v0 > VL ? VL : V - v0, untouched = 1;
  for (int n = 0; n < N; n++)
    for (int i = nv; i < VL; i++) untouched &= got[(size_t)n * VL + i] == d0[(size_t)n * VL + i];
  CHECK(untouched, "an unused column (past the %d classes) has a gradient", V);
  free(x), free(d0), free(hd), free(got);
  rtc_test_dfree(dx, dd, dt, dseed, dscratch);
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
    if (tp > 1) check_axis(&m, RT_AX_TP, modes[staged]);
    if (dp > 1) check_axis(&m, RT_AX_DP, modes[staged]);
    if (tp > 1) check_axis_cls(&m, RT_AX_TP, modes[staged]);
    if (tp > 1) check_axis_bf16(&m, RT_AX_TP, modes[staged]);
    if (dp > 1) check_axis_bf16(&m, RT_AX_DP, modes[staged]);
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
  if (rtc_device_init(world_rank, &name) != RT_OK) {
    printf("SKIP: no device: %s\n", rt_last_error());
    MPI_Finalize();
    return 77;
  }
  check_mesh(1, world);
  if (world % 2 == 0 && world > 2) check_mesh(2, world / 2);
  return rtc_test_mpi_finish();
}
