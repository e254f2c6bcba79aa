/* test_normsplit.cu — layernorm and rmsnorm with the channels split over a
 * mesh axis (rt_layernorm_split_*_cu / rt_rmsnorm_split_*_cu,
 * runtime/cuda/rtc_normsplit.cu) against dist_summa.h's *_f32 on the same
 * rank data, under mpirun (2 and 4 ranks; host build: NCCL is MPI).
 *
 * Per mesh axis of size > 1 (tp, dp and the tp2d grid's row and column) and
 * shape (odd Cl, one row, a row wider than a warp's stride; eps 1e-5 and
 * 0.1; x off zero, where Σx² cancels): out, mean, rstd, the all-reduced
 * scratch, and the backward's dx, dw, db accumulated onto random values
 * (rtc_test.h's metric, < 1e-5), the bytes and calls counted equal to the
 * cpu's, results bitwise the same on a second run, a layernorm without bias
 * and a backward without dx (nothing communicated); then all of it again in
 * staged mode (--comm mpi).
 *
 * The bf16 overloads (x, out, dout, dx bf16) the same way on inputs rounded
 * to bf16, against the cpu functions on those values: out and dx within
 * rtc_test_bf16.h's limit, mean, rstd, dw, db and the scratch (fp32 and
 * double, from the same values) within rtc_test.h's, the same counts.
 */
#include <mpi.h>

#include "rtc_test_bf16.h"
#include "rtc_train.h"

extern "C" {
#include "dist.h"
#include "dist_summa.h"
}

#include "rtc_test_mpi.h"

// n device doubles against the cpu's: the largest relative error
static void check_d(const char *label, const char *shape, const double *dev, const double *want,
                    size_t n) {
  double *got = (double *)malloc((n ? n : 1) * sizeof(double)), worst = 0;
  rtc_to_host(got, dev, n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    double w = fabs(want[i]) > 1e-30 ? fabs(want[i]) : 1e-30, e = fabs(got[i] - want[i]) / w;
    if (!(e <= worst)) worst = e;
  }
  printf("%-26s %-22s %-8s max rel err %.3g %s\n", label, shape, "scratch", worst,
         worst < RTC_TEST_TOL ? "PASS" : "FAIL");
  if (!(worst < RTC_TEST_TOL)) rtc_test_failures++;
  free(got);
}

static int same_(const float *dev, const float *host_first, size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  rtc_to_host(h, dev, n * sizeof(float));
  int ok = !memcmp(h, host_first, n * sizeof(float));
  free(h);
  return ok;
}

static float *fetch_(const float *dev, size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  rtc_to_host(h, dev, n * sizeof(float));
  return h;
}

static void counted_(RtMesh *m, RtAxis ax, uint64_t bytes, uint64_t calls, uint64_t want,
                     const char *what) {
  CHECK(m->bytes[ax] == bytes && m->calls[ax] == calls && rt_mesh_total_bytes(m) == bytes &&
            bytes == want,
        "%s counted %llu bytes in %llu calls, cpu %llu in %llu (formula %llu)", what,
        (unsigned long long)m->bytes[ax], (unsigned long long)m->calls[ax],
        (unsigned long long)bytes, (unsigned long long)calls, (unsigned long long)want);
}

static void check_ln(RtMesh *m, RtAxis ax, const char *mode, int N, int Cl, double eps,
                     int bias) {
  int P = m->size[ax], C = P * Cl;
  size_t nx = (size_t)N * Cl;
  char shape[64], label[64];
  snprintf(shape, sizeof shape, "%s %s P=%d (%d,%d)%s", mode, rt_axis_name(ax), P, N, Cl,
           bias ? "" : " nob");
  snprintf(label, sizeof label, "rank %d: ln_split eps=%g", world_rank, eps);
  rtc_test_state = 0x853c49e6748fea9bull + 7919ull * (uint64_t)(world_rank + 1) + N * 31 + Cl;
  float *x = rtc_test_host(nx, 2.0f, 4.0f); // off zero: Σx² about the mean
  float *w = rtc_test_host(Cl, 0.5f, 1.5f), *b = bias ? rtc_test_host(Cl, -1, 1) : NULL;
  float *dy = rtc_test_host(nx, -1, 1), *dx0 = rtc_test_host(nx, -1, 1);
  float *dw0 = rtc_test_host(Cl, -1, 1), *db0 = rtc_test_host(Cl, -1, 1);
  float *out = (float *)malloc(nx * 4 + 4), *mean = (float *)malloc(N * 4 + 4),
        *rstd = (float *)malloc(N * 4 + 4);
  double *hs = (double *)malloc(rt_scratch_ln_split_bytes(N) + 8);
  float *hdx = rtc_test_copy(dx0, nx), *hdw = rtc_test_copy(dw0, Cl),
        *hdb = rtc_test_copy(db0, Cl);

  float *d_x = rtc_test_dev(x, nx), *d_w = rtc_test_dev(w, Cl);
  float *d_b = bias ? rtc_test_dev(b, Cl) : NULL, *d_dy = rtc_test_dev(dy, nx);
  float *d_out = rtc_test_poison(nx), *d_mean = rtc_test_poison(N), *d_rstd = rtc_test_poison(N);
  float *d_dx = rtc_test_dev(dx0, nx), *d_dw = rtc_test_dev(dw0, Cl), *d_db = rtc_test_dev(db0, Cl);
  double *d_s;
  cudaCheck(cudaMalloc(&d_s, rt_scratch_ln_split_bytes(N)));

  // forward
  rt_mesh_reset_counts(m);
  rt_layernorm_split_forward_f32(m->comm[ax], &m->bytes[ax], out, mean, rstd, x, w, b, N, Cl, C,
                                 eps, hs);
  uint64_t bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_layernorm_split_forward_cu(m, ax, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, Cl, C, eps, d_s);
  counted_(m, ax, bytes, calls, rt_vol_ln_split_fwd(N, P), "ln forward");
  rtc_test_check(label, shape, "out", d_out, out, nx);
  rtc_test_check(label, shape, "mean", d_mean, mean, N);
  rtc_test_check(label, shape, "rstd", d_rstd, rstd, N);
  check_d(label, shape, d_s, hs, 2 * (size_t)N);
  float *first = fetch_(d_out, nx);
  rt_layernorm_split_forward_cu(m, ax, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, Cl, C, eps, d_s);
  CHECK(same_(d_out, first, nx), "%s: a second ln forward differs", shape);
  free(first);

  // backward (on the cpu's statistics, the same on both sides)
  rtc_to_device(d_mean, mean, N * 4), rtc_to_device(d_rstd, rstd, N * 4);
  rt_mesh_reset_counts(m);
  rt_layernorm_split_backward_f32(m->comm[ax], &m->bytes[ax], hdx, hdw, bias ? hdb : NULL, dy, x,
                                  w, mean, rstd, N, Cl, C, hs);
  bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_layernorm_split_backward_cu(m, ax, d_dx, d_dw, bias ? d_db : NULL, d_dy, d_x, d_w, d_mean,
                                 d_rstd, N, Cl, C, d_s);
  counted_(m, ax, bytes, calls, rt_vol_ln_split_bwd(N, P), "ln backward");
  rtc_test_check(label, shape, "dx", d_dx, hdx, nx);
  rtc_test_check(label, shape, "dw", d_dw, hdw, Cl);
  if (bias) rtc_test_check(label, shape, "db", d_db, hdb, Cl);
  check_d(label, shape, d_s, hs, 2 * (size_t)N);
  float *fdx = fetch_(d_dx, nx), *fdw = fetch_(d_dw, Cl);
  rtc_to_device(d_dx, dx0, nx * 4), rtc_to_device(d_dw, dw0, Cl * 4);
  rtc_to_device(d_db, db0, Cl * 4);
  rt_layernorm_split_backward_cu(m, ax, d_dx, d_dw, bias ? d_db : NULL, d_dy, d_x, d_w, d_mean,
                                 d_rstd, N, Cl, C, d_s);
  CHECK(same_(d_dx, fdx, nx) && same_(d_dw, fdw, Cl), "%s: a second ln backward differs", shape);
  // without dx: the parameter gradients only, nothing communicated
  rt_mesh_reset_counts(m);
  rt_layernorm_split_backward_cu(m, ax, NULL, d_dw, NULL, d_dy, d_x, d_w, d_mean, d_rstd, N, Cl,
                                 C, d_s);
  CHECK(rt_mesh_total_bytes(m) == 0 && m->calls[ax] == 0, "%s: ln backward without dx "
        "communicated", shape);

  free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(out), free(mean);
  free(rstd), free(hs), free(hdx), free(hdw), free(hdb), free(fdx), free(fdw);
  rtc_test_dfree(d_x, d_w, d_b, d_dy, d_out, d_mean, d_rstd, d_dx, d_dw, d_db, d_s);
}

static void check_rms(RtMesh *m, RtAxis ax, const char *mode, int N, int Cl, double eps) {
  int P = m->size[ax], C = P * Cl;
  size_t nx = (size_t)N * Cl;
  char shape[64], label[64];
  snprintf(shape, sizeof shape, "%s %s P=%d (%d,%d)", mode, rt_axis_name(ax), P, N, Cl);
  snprintf(label, sizeof label, "rank %d: rms_split eps=%g", world_rank, eps);
  rtc_test_state = 0x9e3779b97f4a7c15ull + 104729ull * (uint64_t)(world_rank + 1) + N * 31 + Cl;
  float *x = rtc_test_host(nx, -2.0f, 3.0f), *w = rtc_test_host(Cl, 0.5f, 1.5f);
  float *dy = rtc_test_host(nx, -1, 1), *dx0 = rtc_test_host(nx, -1, 1);
  float *dw0 = rtc_test_host(Cl, -1, 1);
  float *out = (float *)malloc(nx * 4 + 4), *rstd = (float *)malloc(N * 4 + 4);
  double *hs = (double *)malloc(rt_scratch_rms_split_bytes(N) + 8);
  float *hdx = rtc_test_copy(dx0, nx), *hdw = rtc_test_copy(dw0, Cl);

  float *d_x = rtc_test_dev(x, nx), *d_w = rtc_test_dev(w, Cl), *d_dy = rtc_test_dev(dy, nx);
  float *d_out = rtc_test_poison(nx), *d_rstd = rtc_test_poison(N);
  float *d_dx = rtc_test_dev(dx0, nx), *d_dw = rtc_test_dev(dw0, Cl);
  double *d_s;
  cudaCheck(cudaMalloc(&d_s, rt_scratch_rms_split_bytes(N)));

  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_forward_f32(m->comm[ax], &m->bytes[ax], out, rstd, x, w, N, Cl, C, eps, hs);
  uint64_t bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_forward_cu(m, ax, d_out, d_rstd, d_x, d_w, N, Cl, C, eps, d_s);
  counted_(m, ax, bytes, calls, rt_vol_rms_split_fwd(N, P), "rms forward");
  rtc_test_check(label, shape, "out", d_out, out, nx);
  rtc_test_check(label, shape, "rstd", d_rstd, rstd, N);
  check_d(label, shape, d_s, hs, (size_t)N);
  float *first = fetch_(d_out, nx);
  rt_rmsnorm_split_forward_cu(m, ax, d_out, d_rstd, d_x, d_w, N, Cl, C, eps, d_s);
  CHECK(same_(d_out, first, nx), "%s: a second rms forward differs", shape);
  free(first);

  rtc_to_device(d_rstd, rstd, N * 4);
  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_backward_f32(m->comm[ax], &m->bytes[ax], hdx, hdw, dy, x, w, rstd, N, Cl, C,
                                hs);
  bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_backward_cu(m, ax, d_dx, d_dw, d_dy, d_x, d_w, d_rstd, N, Cl, C, d_s);
  counted_(m, ax, bytes, calls, rt_vol_rms_split_bwd(N, P), "rms backward");
  rtc_test_check(label, shape, "dx", d_dx, hdx, nx);
  rtc_test_check(label, shape, "dw", d_dw, hdw, Cl);
  check_d(label, shape, d_s, hs, (size_t)N);
  float *fdx = fetch_(d_dx, nx), *fdw = fetch_(d_dw, Cl);
  rtc_to_device(d_dx, dx0, nx * 4), rtc_to_device(d_dw, dw0, Cl * 4);
  rt_rmsnorm_split_backward_cu(m, ax, d_dx, d_dw, d_dy, d_x, d_w, d_rstd, N, Cl, C, d_s);
  CHECK(same_(d_dx, fdx, nx) && same_(d_dw, fdw, Cl), "%s: a second rms backward differs", shape);
  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_backward_cu(m, ax, NULL, d_dw, d_dy, d_x, d_w, d_rstd, N, Cl, C, d_s);
  CHECK(rt_mesh_total_bytes(m) == 0 && m->calls[ax] == 0, "%s: rms backward without dx "
        "communicated", shape);

  free(x), free(w), free(dy), free(dx0), free(dw0), free(out), free(rstd), free(hs), free(hdx);
  free(hdw), free(fdx), free(fdw);
  rtc_test_dfree(d_x, d_w, d_dy, d_out, d_rstd, d_dx, d_dw, d_s);
}

static void check_ln_bf16(RtMesh *m, RtAxis ax, const char *mode, int N, int Cl, double eps,
                          int bias) {
  int P = m->size[ax], C = P * Cl;
  size_t nx = (size_t)N * Cl;
  char shape[64], label[64];
  snprintf(shape, sizeof shape, "%s %s P=%d (%d,%d)%s", mode, rt_axis_name(ax), P, N, Cl,
           bias ? "" : " nob");
  snprintf(label, sizeof label, "rank %d: ln_split bf16 eps=%g", world_rank, eps);
  rtc_test_state = 0x853c49e6748fea9bull + 7919ull * (uint64_t)(world_rank + 1) + N * 31 + Cl;
  float *x = rtc_test_host_bf16(nx, 2.0f, 4.0f);
  float *w = rtc_test_host(Cl, 0.5f, 1.5f), *b = bias ? rtc_test_host(Cl, -1, 1) : NULL;
  float *dy = rtc_test_host_bf16(nx, -1, 1), *dx0 = rtc_test_host_bf16(nx, -1, 1);
  float *dw0 = rtc_test_host(Cl, -1, 1), *db0 = rtc_test_host(Cl, -1, 1);
  float *out = (float *)malloc(nx * 4 + 4), *mean = (float *)malloc(N * 4 + 4),
        *rstd = (float *)malloc(N * 4 + 4);
  double *hs = (double *)malloc(rt_scratch_ln_split_bytes(N) + 8);
  float *hdx = rtc_test_copy(dx0, nx), *hdw = rtc_test_copy(dw0, Cl),
        *hdb = rtc_test_copy(db0, Cl);

  rtc_bf16 *d_x = rtc_test_dev_bf16(x, nx), *d_dy = rtc_test_dev_bf16(dy, nx);
  rtc_bf16 *d_out = rtc_test_poison_bf16(nx), *d_dx = rtc_test_dev_bf16(dx0, nx);
  float *d_w = rtc_test_dev(w, Cl), *d_b = bias ? rtc_test_dev(b, Cl) : NULL;
  float *d_mean = rtc_test_poison(N), *d_rstd = rtc_test_poison(N);
  float *d_dw = rtc_test_dev(dw0, Cl), *d_db = rtc_test_dev(db0, Cl);
  double *d_s;
  cudaCheck(cudaMalloc(&d_s, rt_scratch_ln_split_bytes(N)));

  rt_mesh_reset_counts(m);
  rt_layernorm_split_forward_f32(m->comm[ax], &m->bytes[ax], out, mean, rstd, x, w, b, N, Cl, C,
                                 eps, hs);
  uint64_t bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_layernorm_split_forward_cu(m, ax, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, Cl, C, eps, d_s);
  counted_(m, ax, bytes, calls, rt_vol_ln_split_fwd(N, P), "ln forward bf16");
  rtc_test_check_bf16(label, shape, "out", d_out, out, nx);
  rtc_test_check(label, shape, "mean", d_mean, mean, N);
  rtc_test_check(label, shape, "rstd", d_rstd, rstd, N);
  check_d(label, shape, d_s, hs, 2 * (size_t)N);

  rtc_to_device(d_mean, mean, N * 4), rtc_to_device(d_rstd, rstd, N * 4);
  rt_mesh_reset_counts(m);
  rt_layernorm_split_backward_f32(m->comm[ax], &m->bytes[ax], hdx, hdw, bias ? hdb : NULL, dy, x,
                                  w, mean, rstd, N, Cl, C, hs);
  bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_layernorm_split_backward_cu(m, ax, d_dx, d_dw, bias ? d_db : NULL, d_dy, d_x, d_w, d_mean,
                                 d_rstd, N, Cl, C, d_s);
  counted_(m, ax, bytes, calls, rt_vol_ln_split_bwd(N, P), "ln backward bf16");
  rtc_test_check_bf16(label, shape, "dx", d_dx, hdx, nx);
  rtc_test_check(label, shape, "dw", d_dw, hdw, Cl);
  if (bias) rtc_test_check(label, shape, "db", d_db, hdb, Cl);
  check_d(label, shape, d_s, hs, 2 * (size_t)N);
  // without dx: the parameter gradients only, nothing communicated
  rt_mesh_reset_counts(m);
  rt_layernorm_split_backward_cu(m, ax, (rtc_bf16 *)NULL, d_dw, NULL, d_dy, d_x, d_w, d_mean,
                                 d_rstd, N, Cl, C, d_s);
  CHECK(rt_mesh_total_bytes(m) == 0 && m->calls[ax] == 0, "%s: bf16 ln backward without dx "
        "communicated", shape);

  free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(out), free(mean);
  free(rstd), free(hs), free(hdx), free(hdw), free(hdb);
  rtc_test_dfree(d_x, d_w, d_b, d_dy, d_out, d_mean, d_rstd, d_dx, d_dw, d_db, d_s);
}

static void check_rms_bf16(RtMesh *m, RtAxis ax, const char *mode, int N, int Cl, double eps) {
  int P = m->size[ax], C = P * Cl;
  size_t nx = (size_t)N * Cl;
  char shape[64], label[64];
  snprintf(shape, sizeof shape, "%s %s P=%d (%d,%d)", mode, rt_axis_name(ax), P, N, Cl);
  snprintf(label, sizeof label, "rank %d: rms_split bf16 eps=%g", world_rank, eps);
  rtc_test_state = 0x9e3779b97f4a7c15ull + 104729ull * (uint64_t)(world_rank + 1) + N * 31 + Cl;
  float *x = rtc_test_host_bf16(nx, -2.0f, 3.0f), *w = rtc_test_host(Cl, 0.5f, 1.5f);
  float *dy = rtc_test_host_bf16(nx, -1, 1), *dx0 = rtc_test_host_bf16(nx, -1, 1);
  float *dw0 = rtc_test_host(Cl, -1, 1);
  float *out = (float *)malloc(nx * 4 + 4), *rstd = (float *)malloc(N * 4 + 4);
  double *hs = (double *)malloc(rt_scratch_rms_split_bytes(N) + 8);
  float *hdx = rtc_test_copy(dx0, nx), *hdw = rtc_test_copy(dw0, Cl);

  rtc_bf16 *d_x = rtc_test_dev_bf16(x, nx), *d_dy = rtc_test_dev_bf16(dy, nx);
  rtc_bf16 *d_out = rtc_test_poison_bf16(nx), *d_dx = rtc_test_dev_bf16(dx0, nx);
  float *d_w = rtc_test_dev(w, Cl), *d_rstd = rtc_test_poison(N), *d_dw = rtc_test_dev(dw0, Cl);
  double *d_s;
  cudaCheck(cudaMalloc(&d_s, rt_scratch_rms_split_bytes(N)));

  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_forward_f32(m->comm[ax], &m->bytes[ax], out, rstd, x, w, N, Cl, C, eps, hs);
  uint64_t bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_forward_cu(m, ax, d_out, d_rstd, d_x, d_w, N, Cl, C, eps, d_s);
  counted_(m, ax, bytes, calls, rt_vol_rms_split_fwd(N, P), "rms forward bf16");
  rtc_test_check_bf16(label, shape, "out", d_out, out, nx);
  rtc_test_check(label, shape, "rstd", d_rstd, rstd, N);
  check_d(label, shape, d_s, hs, (size_t)N);

  rtc_to_device(d_rstd, rstd, N * 4);
  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_backward_f32(m->comm[ax], &m->bytes[ax], hdx, hdw, dy, x, w, rstd, N, Cl, C,
                                hs);
  bytes = m->bytes[ax], calls = m->calls[ax];
  rt_mesh_reset_counts(m);
  rt_rmsnorm_split_backward_cu(m, ax, d_dx, d_dw, d_dy, d_x, d_w, d_rstd, N, Cl, C, d_s);
  counted_(m, ax, bytes, calls, rt_vol_rms_split_bwd(N, P), "rms backward bf16");
  rtc_test_check_bf16(label, shape, "dx", d_dx, hdx, nx);
  rtc_test_check(label, shape, "dw", d_dw, hdw, Cl);
  check_d(label, shape, d_s, hs, (size_t)N);

  free(x), free(w), free(dy), free(dx0), free(dw0), free(out), free(rstd), free(hs), free(hdx);
  free(hdw);
  rtc_test_dfree(d_x, d_w, d_dy, d_out, d_rstd, d_dx, d_dw, d_s);
}

static void check_axis(RtMesh *m, RtAxis ax, const char *mode) {
  static const struct { int N, Cl; double eps; } cases[] = {
      {37, 45, 1e-5}, {1, 3, 1e-5}, {5, 300, 0.1}, {16, 1, 1e-5}};
  for (auto &c : cases) {
    check_ln(m, ax, mode, c.N, c.Cl, c.eps, 1);
    check_rms(m, ax, mode, c.N, c.Cl, c.eps);
  }
  check_ln(m, ax, mode, 9, 33, 1e-5, 0);
  for (auto &c : cases) {
    check_ln_bf16(m, ax, mode, c.N, c.Cl, c.eps, 1);
    check_rms_bf16(m, ax, mode, c.N, c.Cl, c.eps);
  }
  check_ln_bf16(m, ax, mode, 9, 33, 1e-5, 0);
}

// every axis of size > 1 of the mesh, NCCL then staged
static void check_mesh(int dp, int tp, int q) {
  RtMesh m;
  if (rt_mesh_init(&m, dp, tp, q, 1, 1) != RT_OK) {
    printf("rank %d: FAIL mesh dp=%d tp=%d q=%d: %s\n", world_rank, dp, tp, q, rt_last_error());
    rtc_test_failures++;
    return;
  }
  const char *modes[2] = {"nccl", "mpi"};
  for (int staged = 0; staged < 2; staged++) {
    CHECK(rtc_mesh_init(&m, staged) == RT_OK, "rtc_mesh_init: %s", rt_last_error());
    for (int ax = 0; ax < RT_AX_COUNT; ax++)
      if (m.comm[ax] != MPI_COMM_NULL && m.size[ax] > 1)
        check_axis(&m, (RtAxis)ax, modes[staged]);
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
  check_mesh(1, world, 0);
  if (world == 4) check_mesh(1, 4, 2); // the tp2d grid: row and column axes
  if (world % 2 == 0 && world > 2) check_mesh(2, world / 2, 0);
  return rtc_test_mpi_finish();
}
