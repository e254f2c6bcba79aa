/* test_summa.cu — the SUMMA matmuls of 2D tensor parallelism in the CUDA
 * programs (rt_summa_forward_cu / rt_summa_backward_cu,
 * runtime/cuda/rtc_summa.cu) against dist_summa.h's rt_summa_*_f32 on the
 * same rank data, under mpirun on a q×q grid (4 ranks: 2x2, 9 ranks: 3x3;
 * another count skips; host build: NCCL is MPI).
 *
 * Per shape: x (Mb,Kb), w (Nb,Kb), bias (Nb) and dy (Mb,Nb) random per
 * rank.  The forward with and without the bias; the backward with each of
 * the 8 subsets of (dx, dw, dbias) wanted, accumulated onto random values.
 * Every result against the cpu's with rtc_test.h's metric (per element
 * |got - want| / max(|want|, rms(want)) < 1e-5: the GEMMs and the
 * reductions sum in other orders); the bytes added to the row and column
 * axes equal to dist_summa.c's (and dist_formulas.h's rt_vol_summa_*
 * without the bias); results bitwise the same on a second run; the
 * forward captured as a graph and replayed giving the eager result
 * bitwise; then all of it again in staged mode (--comm mpi).
 *
 * bf16 storage (rtc_train.h's bf16 overloads): x, w, dy and dx's start
 * rounded to bf16 (bias, dw, dbias fp32), against the cpu functions on the
 * rounded values; the scratch exactly rt_scratch_summa_* × 2 bytes (what
 * the memory plan gives a bf16 op), its neighbours poisoned and checked
 * untouched; bytes counted: X and W blocks at 2 bytes an element, the dX
 * and dW partials and the bias gradient at 4 (dist_formulas.h's volumes
 * computed here).  Metric bf16_cmp.h's (largest per-element relative error
 * floored at the rms): fp32 results (dw, dbias) below 1e-4, dx (rounded
 * once) below BF16_TOL.  y of the forward is rounded q + 1 times (the bias,
 * then each step's product added in bf16), each rounding relative to a
 * partial sum, which may be larger than y where the steps cancel: its
 * error is judged relative to mag, the same SUMMA on |x|, |w|, |bias| (what
 * bounds every partial sum; test_k_matmul.cu's metric), below BF16_TOL.
 */
#include <mpi.h>

#include "bf16_cmp.h"
#include "rtc_train.h"

extern "C" {
#include "dist.h"
#include "dist_summa.h"
}

#include "rtc_test_mpi.h"

static const RtAxis ROW = RT_AX_TPR, COL = RT_AX_TPC;

// n device floats bitwise equal to h
static int same_(const float *dev, const float *h, size_t n) {
  float *got = (float *)malloc((n ? n : 1) * sizeof(float));
  rtc_to_host(got, dev, n * sizeof(float));
  int ok = !memcmp(got, h, n * sizeof(float));
  free(got);
  return ok;
}

static float *download_(const float *dev, size_t n) {
  float *h = (float *)malloc((n ? n : 1) * sizeof(float));
  rtc_to_host(h, dev, n * sizeof(float));
  return h;
}

static void check_counts_(RtMesh *m, const char *what, uint64_t row, uint64_t col) {
  CHECK(m->bytes[ROW] == row && m->bytes[COL] == col && rt_mesh_total_bytes(m) == row + col,
        "%s counted %llu + %llu bytes (row + col), dist_summa.c %llu + %llu", what,
        (unsigned long long)m->bytes[ROW], (unsigned long long)m->bytes[COL],
        (unsigned long long)row, (unsigned long long)col);
}

static void check_shape(RtMesh *m, const char *mode, int Mb, int Kb, int Nb) {
  int q = m->size[ROW];
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb, ye = (size_t)Mb * Nb;
  char shape[96], label[96];
  snprintf(shape, sizeof shape, "%s %dx%d (%d,%d,%d)", mode, q, q, Mb, Kb, Nb);
  rtc_test_state = 0x853c49e6748fea9bull + 7919ull * (uint64_t)(world_rank + 1);
  float *x = rtc_test_host(xe, -1, 1), *w = rtc_test_host(we, -1, 1);
  float *bias = rtc_test_host((size_t)Nb, -1, 1), *dy = rtc_test_host(ye, -1, 1);
  float *dx0 = rtc_test_host(xe, -1, 1), *dw0 = rtc_test_host(we, -1, 1);
  float *db0 = rtc_test_host((size_t)Nb, -1, 1);
  size_t sbwd = rt_scratch_summa_bwd(xe, we); // >= rt_scratch_summa_fwd(xe, we)
  float *hs = (float *)malloc(sbwd * sizeof(float)), *hy = (float *)malloc(ye * sizeof(float));
  float *d_x = rtc_test_dev(x, xe), *d_w = rtc_test_dev(w, we), *d_b = rtc_test_dev(bias, Nb);
  float *d_dy = rtc_test_dev(dy, ye), *d_y = rtc_test_poison(ye);
  float *d_dx = rtc_test_dev(dx0, xe), *d_dw = rtc_test_dev(dw0, we);
  float *d_db = rtc_test_dev(db0, (size_t)Nb), *d_s = rtc_test_poison(sbwd);
  uint64_t xb = xe * 4, wb = we * 4;

  // the forward, with and without the bias
  for (int withb = 0; withb < 2; withb++) {
    const float *b = withb ? bias : NULL, *db = withb ? d_b : NULL;
    rt_mesh_reset_counts(m);
    rt_summa_forward_f32(m->comm[ROW], m->comm[COL], &m->bytes[ROW], &m->bytes[COL], hy, x, w, b,
                         Mb, Kb, Nb, hs);
    uint64_t row = m->bytes[ROW], col = m->bytes[COL];
    CHECK(row + col == rt_vol_summa_fwd(xb, wb, q), "dist_summa.c's forward bytes");
    rt_mesh_reset_counts(m);
    rtc_memset(d_y, 0xff, ye * 4); // NaN: y is written, not read
    rt_summa_forward_cu(m, ROW, COL, d_y, d_x, d_w, db, Mb, Kb, Nb, d_s);
    check_counts_(m, "forward", row, col);
    snprintf(label, sizeof label, "rank %d: summa_fwd%s", world_rank, withb ? "+bias" : "");
    rtc_test_check(label, shape, "y", d_y, hy, ye);
    float *first = download_(d_y, ye);
    rt_summa_forward_cu(m, ROW, COL, d_y, d_x, d_w, db, Mb, Kb, Nb, d_s);
    CHECK(same_(d_y, first, ye), "%s: a second forward differs", shape);
    if (!strcmp(mode, "nccl")) { // captured and replayed: the eager result
      rt_mesh_reset_counts(m);
      float *d_y2 = rtc_test_poison(ye);
      rtc_capture_begin();
      rt_summa_forward_cu(m, ROW, COL, d_y2, d_x, d_w, db, Mb, Kb, Nb, d_s);
      RtcGraph *g = rtc_capture_end();
      check_counts_(m, "captured forward", row, col);
      rtc_graph_launch(g);
      rtc_sync();
      CHECK(same_(d_y2, first, ye), "%s: the replayed forward differs from the eager", shape);
      rtc_graph_free(g);
      rtc_test_dfree(d_y2);
    }
    free(first);
  }

  // the backward: every subset of (dx, dw, dbias), accumulated onto dx0, dw0, db0
  for (int mask = 0; mask < 8; mask++) {
    int wx = mask & 1, ww = mask & 2, wbias = mask & 4;
    float *hdx = rtc_test_copy(dx0, xe), *hdw = rtc_test_copy(dw0, we);
    float *hdb = rtc_test_copy(db0, (size_t)Nb);
    rt_mesh_reset_counts(m);
    rt_summa_backward_f32(m->comm[ROW], m->comm[COL], &m->bytes[ROW], &m->bytes[COL],
                          wx ? hdx : NULL, ww ? hdw : NULL, wbias ? hdb : NULL, dy, x, w, Mb, Kb,
                          Nb, hs);
    uint64_t row = m->bytes[ROW], col = m->bytes[COL];
    if (wx && ww && !wbias)
      CHECK(row + col == rt_vol_summa_bwd(xb, wb, ye * 4, q), "dist_summa.c's backward bytes");
    float *results[3] = {NULL, NULL, NULL};
    for (int run = 0; run < 2; run++) {
      rtc_to_device(d_dx, dx0, xe * 4);
      rtc_to_device(d_dw, dw0, we * 4);
      rtc_to_device(d_db, db0, (size_t)Nb * 4);
      rt_mesh_reset_counts(m);
      rt_summa_backward_cu(m, ROW, COL, wx ? d_dx : NULL, ww ? d_dw : NULL, wbias ? d_db : NULL,
                           d_dy, d_x, d_w, Mb, Kb, Nb, d_s);
      rtc_sync();
      char what[64];
      snprintf(what, sizeof what, "backward (dx %d, dw %d, dbias %d)", !!wx, !!ww, !!wbias);
      check_counts_(m, what, row, col);
      if (run == 0) {
        snprintf(label, sizeof label, "rank %d: summa_bwd %c%c%c", world_rank, wx ? 'x' : '-',
                 ww ? 'w' : '-', wbias ? 'b' : '-');
        // a gradient not wanted is untouched (hdx etc. are then dx0 etc.)
        rtc_test_check(label, shape, "dx", d_dx, hdx, xe);
        rtc_test_check(label, shape, "dw", d_dw, hdw, we);
        rtc_test_check(label, shape, "dbias", d_db, hdb, (size_t)Nb);
        if (!wx) CHECK(same_(d_dx, dx0, xe), "%s: %s wrote dx", shape, what);
        if (!ww) CHECK(same_(d_dw, dw0, we), "%s: %s wrote dw", shape, what);
        if (!wbias) CHECK(same_(d_db, db0, (size_t)Nb), "%s: %s wrote dbias", shape, what);
        results[0] = download_(d_dx, xe);
        results[1] = download_(d_dw, we);
        results[2] = download_(d_db, (size_t)Nb);
      } else {
        CHECK(same_(d_dx, results[0], xe) && same_(d_dw, results[1], we) &&
                  same_(d_db, results[2], (size_t)Nb),
              "%s: a second %s differs", shape, what);
      }
    }
    for (int k = 0; k < 3; k++) free(results[k]);
    free(hdx), free(hdw), free(hdb);
  }
  free(x), free(w), free(bias), free(dy), free(dx0), free(dw0), free(db0), free(hs), free(hy);
  rtc_test_dfree(d_x, d_w, d_b, d_dy, d_y, d_dx, d_dw, d_db, d_s);
}

// Whether the n bytes at p (device) are all 0xff (the poison around the scratch).
static int poisoned_(const void *p, size_t n) {
  unsigned char *h = (unsigned char *)malloc(n ? n : 1);
  rtc_to_host(h, p, n);
  int ok = 1;
  for (size_t i = 0; i < n; i++) ok &= h[i] == 0xff;
  free(h);
  return ok;
}

static void check_shape_bf16(RtMesh *m, const char *mode, int Mb, int Kb, int Nb) {
  int q = m->size[ROW];
  size_t xe = (size_t)Mb * Kb, we = (size_t)Nb * Kb, ye = (size_t)Mb * Nb;
  char shape[96], label[96];
  snprintf(shape, sizeof shape, "bf16 %s %dx%d (%d,%d,%d)", mode, q, q, Mb, Kb, Nb);
  rtc_test_state = 0x2545f4914f6cdd1dull + 7919ull * (uint64_t)(world_rank + 1);
  float *x = bf16_host(xe, -1, 1), *w = bf16_host(we, -1, 1), *dy = bf16_host(ye, -1, 1);
  float *bias = rtc_test_host((size_t)Nb, -1, 1), *dx0 = bf16_host(xe, -1, 1);
  float *dw0 = rtc_test_host(we, -1, 1), *db0 = rtc_test_host((size_t)Nb, -1, 1);
  float *hs = (float *)malloc(rt_scratch_summa_bwd(xe, we) * sizeof(float));
  float *hy = (float *)malloc(ye * sizeof(float)), *mag = (float *)malloc(ye * sizeof(float));
  float *ax = rtc_test_copy(x, xe), *aw = rtc_test_copy(w, we), *ab = rtc_test_copy(bias, Nb);
  for (size_t e = 0; e < xe; e++) ax[e] = fabsf(ax[e]);
  for (size_t e = 0; e < we; e++) aw[e] = fabsf(aw[e]);
  for (int e = 0; e < Nb; e++) ab[e] = fabsf(ab[e]);
  rtc_bf16 *d_x = bf16_dev(x, xe), *d_w = bf16_dev(w, we), *d_dy = bf16_dev(dy, ye);
  rtc_bf16 *d_y = bf16_poison(ye), *d_dx = bf16_dev(dx0, xe);
  float *d_b = rtc_test_dev(bias, (size_t)Nb), *d_dw = rtc_test_dev(dw0, we);
  float *d_db = rtc_test_dev(db0, (size_t)Nb);
  // the scratch: exactly the plan's bytes, with 256 poisoned bytes either side
  size_t sf = rt_scratch_summa_fwd(xe, we) * 2, sb = rt_scratch_summa_bwd(xe, we) * 2;
  unsigned char *d_sa = (unsigned char *)bf16_poison((sb + 512) / 2);
  unsigned char *d_s = d_sa + 256;
  uint64_t xb = xe * 2, wb = we * 2;

  for (int withb = 0; withb < 2; withb++) {
    rt_summa_forward_f32(m->comm[ROW], m->comm[COL], &m->bytes[ROW], &m->bytes[COL], hy, x, w,
                         withb ? bias : NULL, Mb, Kb, Nb, hs);
    rt_summa_forward_f32(m->comm[ROW], m->comm[COL], &m->bytes[ROW], &m->bytes[COL], mag, ax,
                         aw, withb ? ab : NULL, Mb, Kb, Nb, hs);
    rt_mesh_reset_counts(m);
    rtc_memset(d_y, 0xff, ye * 2);
    rt_summa_forward_cu(m, ROW, COL, d_y, d_x, d_w, withb ? d_b : NULL, Mb, Kb, Nb, d_s);
    check_counts_(m, "bf16 forward", (uint64_t)q * rt_vol_bcast(xb, q),
                  (uint64_t)q * rt_vol_bcast(wb, q));
    snprintf(label, sizeof label, "rank %d: summa_fwd%s", world_rank, withb ? "+bias" : "");
    float *got = bf16_download(d_y, ye);
    bf16_cmp_host(label, shape, "y/mag", got, hy, ye, BF16_TOL, 0, mag);
    free(got);
    CHECK(poisoned_(d_sa, 256) && poisoned_(d_s + sf, 256),
          "%s: the forward wrote outside its %zu bytes of scratch", shape, sf);
  }
  for (int mask = 0; mask < 8; mask++) {
    int wx = mask & 1, ww = mask & 2, wbias = mask & 4;
    float *hdx = rtc_test_copy(dx0, xe), *hdw = rtc_test_copy(dw0, we);
    float *hdb = rtc_test_copy(db0, (size_t)Nb);
    rt_summa_backward_f32(m->comm[ROW], m->comm[COL], &m->bytes[ROW], &m->bytes[COL],
                          wx ? hdx : NULL, ww ? hdw : NULL, wbias ? hdb : NULL, dy, x, w, Mb, Kb,
                          Nb, hs);
    rtc_bf16 *e_dx = bf16_dev(dx0, xe);
    rtc_to_device(d_dw, dw0, we * 4);
    rtc_to_device(d_db, db0, (size_t)Nb * 4);
    rt_mesh_reset_counts(m);
    rt_summa_backward_cu(m, ROW, COL, wx ? e_dx : NULL, ww ? d_dw : NULL, wbias ? d_db : NULL,
                         d_dy, d_x, d_w, Mb, Kb, Nb, d_s);
    rtc_sync();
    uint64_t row = 0, col = 0;
    if (wx) col += (uint64_t)q * rt_vol_bcast(wb, q), row += (uint64_t)q * rt_vol_reduce(xe * 4, q);
    if (ww) row += (uint64_t)q * rt_vol_bcast(xb, q), col += (uint64_t)q * rt_vol_reduce(we * 4, q);
    if (wbias) col += rt_vol_allreduce((uint64_t)Nb * 4, q);
    char what[64];
    snprintf(what, sizeof what, "bf16 backward (dx %d, dw %d, dbias %d)", !!wx, !!ww, !!wbias);
    check_counts_(m, what, row, col);
    snprintf(label, sizeof label, "rank %d: summa_bwd %c%c%c", world_rank, wx ? 'x' : '-',
             ww ? 'w' : '-', wbias ? 'b' : '-');
    // a gradient not wanted: the cpu's is its start, the device's must equal it
    bf16_check(label, shape, "dx", e_dx, hdx, xe, wx ? BF16_TOL : 1e-30);
    f32_check(label, shape, "dw", d_dw, hdw, we, ww ? 1e-4 : 1e-30);
    f32_check(label, shape, "dbias", d_db, hdb, (size_t)Nb, wbias ? 1e-4 : 1e-30);
    CHECK(poisoned_(d_sa, 256) && poisoned_(d_s + sb, 256),
          "%s: %s wrote outside its %zu bytes of scratch", shape, what, sb);
    free(hdx), free(hdw), free(hdb);
    rtc_test_dfree(e_dx);
  }
  free(x), free(w), free(dy), free(bias), free(dx0), free(dw0), free(db0), free(hs), free(hy);
  free(mag), free(ax), free(aw), free(ab);
  rtc_test_dfree(d_x, d_w, d_dy, d_y, d_dx, d_b, d_dw, d_db, d_sa);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int q = 1;
  while ((q + 1) * (q + 1) <= world) q++;
  if (q < 2 || q * q != world) {
    if (world_rank == 0) printf("SKIP: %d ranks are not a q x q grid with q >= 2\n", world);
    MPI_Finalize();
    return 77;
  }
  const char *name = NULL;
  if (rtc_device_init(world_rank, &name) != RT_OK) {
    printf("SKIP: no device: %s\n", rt_last_error());
    MPI_Finalize();
    return 77;
  }
  RtMesh m;
  if (rt_mesh_init(&m, 1, world, q, 1, 1) != RT_OK) {
    printf("rank %d: FAIL mesh %dx%d: %s\n", world_rank, q, q, rt_last_error());
    MPI_Finalize();
    return 1;
  }
  const char *modes[2] = {"nccl", "mpi"};
  for (int staged = 0; staged < 2; staged++) {
    CHECK(rtc_mesh_init(&m, staged) == RT_OK, "rtc_mesh_init: %s", rt_last_error());
    check_shape(&m, modes[staged], 19, 13, 11);  // odd, unaligned blocks
    check_shape(&m, modes[staged], 1, 1, 1);     // the smallest
    check_shape(&m, modes[staged], 64, 96, 80);  // a few GEMM tiles
    check_shape_bf16(&m, modes[staged], 19, 13, 11);
    check_shape_bf16(&m, modes[staged], 1, 1, 1);
    check_shape_bf16(&m, modes[staged], 64, 96, 80);
    rtc_mesh_free();
  }
  rt_mesh_free(&m);
  bf16_selftest();
  return rtc_test_mpi_finish();
}
