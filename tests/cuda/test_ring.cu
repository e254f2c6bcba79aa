/* test_ring.cu — ring attention in the CUDA programs
 * (rt_ring_attention_forward_cu / _backward_cu and their merge,
 * runtime/cuda/rtc_ring.cu) under mpirun on P ranks of the sp axis (2 and
 * 4; host build: NCCL is MPI).
 *
 * The merge kernel against the log-sum-exp fold in double (first and
 * later blocks; the result rounded to bf16 too).  The launchers
 * against the cpu's single-device attention (rt_attention_*_f32) on the
 * whole sequence of T = P·Tl tokens, this rank's rows: q, k, v, dout
 * random (the same full tensors on every rank), out and lse poisoned
 * (written), dq, dk, dv random (accumulated); the backward gets the
 * reference's out and lse.  Causal and not, grouped-query heads (Hkv <
 * H), an odd Tl.  Metric rtc_test.h's, below 1e-5 for fp32; bf16 (inputs
 * rounded, the reference on the rounded values): bf16_cmp.h's, out, dq,
 * dk, dv below BF16_TOL (1e-2), lse below 1e-4.  The scratch exactly
 * the plan's (rt_scratch_ring_fwd / _bwd floats, rt_scratch_ring16 bf16), its
 * neighbours poisoned and checked untouched; the bytes counted on the sp
 * axis dist_formulas.h's rt_vol_ring_fwd / _bwd2 (bf16: dK, dV travel as
 * fp32 sums, 4 bytes an element); the fp32 forward and
 * backward captured as a graph and replayed give the eager results
 * bitwise; then the fp32 case again staged (--comm mpi).
 */
#include <mpi.h>

#include "bf16_cmp.h"
#include "rtc_train.h"

extern "C" {
#include "dist.h"
}

#include "rtc_test_mpi.h"

static const RtAxis SP = RT_AX_SP;

// ---- the merge ----

static void test_merge(int B, int Tl, int H, int D) {
  size_t no = (size_t)B * Tl * H * D, nl = (size_t)B * H * Tl;
  char shape[64];
  snprintf(shape, sizeof shape, "(%d,%d,%d,%d)", B, Tl, H, D);
  float *acc = rtc_test_host(no, -1, 1), *ob = rtc_test_host(no, -1, 1);
  float *lse = rtc_test_host(nl, -3, 3), *lb = rtc_test_host(nl, -3, 3);
  float *want = (float *)malloc(no * sizeof(float)), *wl = (float *)malloc(nl * sizeof(float));
  for (size_t row = 0; row < (size_t)B * Tl * H; row++) {
    size_t bt = row / H, li = (bt / Tl * H + row % H) * Tl + bt % Tl;
    double a = lse[li], c = lb[li], n = fmax(a, c) + log1p(exp(-fabs(a - c)));
    for (int d = 0; d < D; d++)
      want[row * D + d] = (float)(exp(a - n) * acc[row * D + d] + exp(c - n) * ob[row * D + d]);
    wl[li] = (float)n;
  }
  float *d_acc = rtc_test_dev(acc, no), *d_lse = rtc_test_dev(lse, nl);
  float *d_ob = rtc_test_dev(ob, no), *d_lb = rtc_test_dev(lb, nl);
  rt_ring_merge_cu(d_acc, d_lse, d_ob, d_lb, B, Tl, H, D, 0);
  rtc_test_check("ring_merge", shape, "acc", d_acc, want, no);
  rtc_test_check("ring_merge", shape, "lse", d_lse, wl, nl);
  rt_ring_merge_cu(d_acc, d_lse, d_ob, d_lb, B, Tl, H, D, 1);  // first: the block itself
  rtc_test_check("ring_merge first", shape, "acc", d_acc, ob, no);
  rtc_test_check("ring_merge first", shape, "lse", d_lse, lb, nl);
  // the result rounded into bf16 fin too
  rtc_bf16 *d_fin = bf16_poison(no);
  rtc_to_device(d_acc, acc, no * 4);
  rtc_to_device(d_lse, lse, nl * 4);
  rtc_to_device(d_ob, ob, no * 4);
  rt_ring_merge_cu(d_acc, d_lse, d_ob, d_lb, d_fin, B, Tl, H, D, 0);
  rtc_test_check("bf16 ring_merge", shape, "acc", d_acc, want, no);
  bf16_check("bf16 ring_merge", shape, "fin", d_fin, want, no);
  free(acc), free(ob), free(lse), free(lb), free(want), free(wl);
  rtc_test_dfree(d_acc, d_lse, d_ob, d_lb, d_fin);
}

// ---- the launchers ----

// rows [r·Tl, r·Tl+Tl) of every batch row of full (B,T,C): (B,Tl,C)
static float *rows_(const float *full, int B, int T, int Tl, int r, size_t C) {
  float *h = (float *)malloc((size_t)B * Tl * C * sizeof(float));
  for (int b = 0; b < B; b++)
    memcpy(h + (size_t)b * Tl * C, full + ((size_t)b * T + (size_t)r * Tl) * C,
           (size_t)Tl * C * sizeof(float));
  return h;
}
// lse (B,H,T) -> this rank's (B,H,Tl)
static float *lse_rows_(const float *full, int B, int H, int T, int Tl, int r) {
  return rows_(full, B * H, T, Tl, r, 1);
}

// An element type's device tensors: upload, poison, download.
template <class S> struct Dev;
template <> struct Dev<float> {
  static float *up(const float *h, size_t n) { return rtc_test_dev(h, n); }
  static float *down(const float *d, size_t n) { return f32_download(d, n); }
};
template <> struct Dev<rtc_bf16> {
  static rtc_bf16 *up(const float *h, size_t n) { return bf16_dev(h, n); }
  static float *down(const rtc_bf16 *d, size_t n) { return bf16_download(d, n); }
};

// A device result against the reference: fp32 at 1e-5, bf16 at tol.
static void check_(const char *what, const char *shape, const char *t, const float *d,
                   const float *want, size_t n, double) {
  rtc_test_check(what, shape, t, d, want, n);
}
static void check_(const char *what, const char *shape, const char *t, const rtc_bf16 *d,
                   const float *want, size_t n, double tol) {
  bf16_check(what, shape, t, d, want, n, tol);
}

// n bytes at p (device) are all 0xff
static int poisoned_(const void *p, size_t n) {
  unsigned char *h = (unsigned char *)malloc(n ? n : 1);
  rtc_to_host(h, p, n);
  int ok = 1;
  for (size_t i = 0; i < n; i++) ok &= h[i] == 0xff;
  free(h);
  return ok;
}
static int same_(const void *dev, const float *h, size_t n) {
  float *got = (float *)malloc((n ? n : 1) * sizeof(float));
  rtc_to_host(got, dev, n * sizeof(float));
  int ok = !memcmp(got, h, n * sizeof(float));
  free(got);
  return ok;
}

template <class S>
static void test_ring(RtMesh *m, const char *mode, int B, int Tl, int H, int Hkv, int D,
                      int causal) {
  const bool bf16 = sizeof(S) == 2;
  int P = m->size[SP], r = m->coord[SP], T = P * Tl;
  size_t nq = (size_t)B * Tl * H * D, kv = (size_t)B * Tl * Hkv * D, nl = (size_t)B * H * Tl;
  size_t Nq = nq * P, Nk = kv * P, Nl = nl * P;
  char shape[96], what[64];
  snprintf(shape, sizeof shape, "%s P=%d (%d,%d,%d,%d,%d)%s", mode, P, B, Tl, H, Hkv, D,
           causal ? " causal" : "");
  snprintf(what, sizeof what, "%sring_attention", bf16 ? "bf16 " : "");
  rtc_test_state = 0x9e3779b97f4a7c15ull + (uint64_t)(B * 131 + Tl * 17 + H + causal);
  // the whole sequence, the same on every rank (bf16: the rounded values)
  float *q = rtc_test_host(Nq, -1, 1), *k = rtc_test_host(Nk, -1, 1);
  float *v = rtc_test_host(Nk, -1, 1), *dout = rtc_test_host(Nq, -1, 1);
  float *dq = rtc_test_host(Nq, -1, 1), *dk = rtc_test_host(Nk, -1, 1);
  float *dv = rtc_test_host(Nk, -1, 1);
  if (bf16)
    for (float *x : {q, k, v, dout, dq, dk, dv}) bf16_round_host(x, x == q || x == dout || x == dq ? Nq : Nk);
  float *lq = rows_(q, B, T, Tl, r, (size_t)H * D), *lk = rows_(k, B, T, Tl, r, (size_t)Hkv * D);
  float *lv = rows_(v, B, T, Tl, r, (size_t)Hkv * D), *ldo = rows_(dout, B, T, Tl, r, (size_t)H * D);
  float *ldq0 = rows_(dq, B, T, Tl, r, (size_t)H * D);
  float *ldk0 = rows_(dk, B, T, Tl, r, (size_t)Hkv * D), *ldv0 = rows_(dv, B, T, Tl, r, (size_t)Hkv * D);
  // the reference: one device, the whole sequence
  float *out = (float *)malloc(Nq * sizeof(float)), *lse = (float *)malloc(Nl * sizeof(float));
  rt_attention_forward_f32(out, lse, q, k, v, B, T, H, Hkv, D, causal);
  float *wout = rows_(out, B, T, Tl, r, (size_t)H * D);  // the forward's, unrounded
  if (bf16) bf16_round_host(out, Nq);  // what the backward reads: the bf16 output
  rt_attention_backward_f32(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, Hkv, D, causal);
  float *lout = rows_(out, B, T, Tl, r, (size_t)H * D), *llse = lse_rows_(lse, B, H, T, Tl, r);
  float *ldq = rows_(dq, B, T, Tl, r, (size_t)H * D);
  float *ldk = rows_(dk, B, T, Tl, r, (size_t)Hkv * D), *ldv = rows_(dv, B, T, Tl, r, (size_t)Hkv * D);

  S *d_q = Dev<S>::up(lq, nq), *d_k = Dev<S>::up(lk, kv), *d_v = Dev<S>::up(lv, kv);
  S *d_do = Dev<S>::up(ldo, nq), *d_o = Dev<S>::up(lout, nq);
  float *d_l = rtc_test_dev(llse, nl);
  // the scratch, exactly the plan's, between poisoned guards
  size_t sb = bf16 ? rt_scratch_ring16(B, Tl, Hkv, D) : rt_scratch_ring_bwd(B, Tl, H, Hkv, D);
  size_t sf = bf16 ? rt_scratch_ring16(B, Tl, Hkv, D) : rt_scratch_ring_fwd(B, Tl, H, Hkv, D);
  size_t sn = (sb > sf ? sb : sf) * sizeof(S), guard = 256;
  unsigned char *d_s;
  cudaCheck(cudaMalloc(&d_s, sn + 2 * guard));
  rtc_memset(d_s, 0xff, sn + 2 * guard);
  void *scratch = d_s + guard;

  // forward
  S *d_out = Dev<S>::up(lout, nq);
  float *d_lse = rtc_test_poison(nl);
  rtc_memset(d_out, 0xff, nq * sizeof(S));
  rt_mesh_reset_counts(m);
  rt_ring_attention_forward_cu(m, SP, d_out, d_lse, d_q, d_k, d_v, B, Tl, H, Hkv, D, causal,
                               scratch);
  rtc_sync();
  CHECK(m->bytes[SP] == rt_vol_ring_fwd(kv, (int)sizeof(S), P),
        "%s: forward counted %llu bytes, dist_formulas.h %llu", shape,
        (unsigned long long)m->bytes[SP], (unsigned long long)rt_vol_ring_fwd(kv, (int)sizeof(S), P));
  char label[96];
  snprintf(label, sizeof label, "rank %d: %s_fwd", r, what);
  check_(label, shape, "out", d_out, wout, nq, BF16_TOL);
  if (bf16) f32_check(label, shape, "lse", d_lse, llse, nl, 1e-4);
  else rtc_test_check(label, shape, "lse", d_lse, llse, nl);
  CHECK(poisoned_(d_s, guard) && poisoned_(d_s + guard + sf * sizeof(S), guard),
        "%s: the forward wrote outside its scratch", shape);

  // backward, accumulated onto dq0, dk0, dv0
  S *d_dq = Dev<S>::up(ldq0, nq), *d_dk = Dev<S>::up(ldk0, kv), *d_dv = Dev<S>::up(ldv0, kv);
  rt_mesh_reset_counts(m);
  rt_ring_attention_backward_cu(m, SP, d_dq, d_dk, d_dv, d_do, d_q, d_k, d_v, d_o, d_l, B, Tl, H,
                                Hkv, D, causal, scratch);
  rtc_sync();
  uint64_t vb = rt_vol_ring_bwd2(kv, (int)sizeof(S), 4, P);  // dK, dV: fp32 sums
  CHECK(m->bytes[SP] == vb, "%s: backward counted %llu bytes, dist_formulas.h %llu", shape,
        (unsigned long long)m->bytes[SP], (unsigned long long)vb);
  snprintf(label, sizeof label, "rank %d: %s_bwd", r, what);
  check_(label, shape, "dq", d_dq, ldq, nq, BF16_TOL);
  check_(label, shape, "dk", d_dk, ldk, kv, BF16_TOL);
  check_(label, shape, "dv", d_dv, ldv, kv, BF16_TOL);
  CHECK(poisoned_(d_s, guard) && poisoned_(d_s + guard + sb * sizeof(S), guard),
        "%s: the backward wrote outside its scratch", shape);

  if (!bf16 && !strcmp(mode, "nccl")) {  // captured and replayed: the eager results
    float *o1 = Dev<S>::down(d_out, nq), *q1 = Dev<S>::down(d_dq, nq);
    float *k1 = Dev<S>::down(d_dk, kv), *v1 = Dev<S>::down(d_dv, kv);
    rtc_memset(d_out, 0xff, nq * sizeof(S));
    rtc_to_device(d_dq, ldq0, nq * 4);
    rtc_to_device(d_dk, ldk0, kv * 4);
    rtc_to_device(d_dv, ldv0, kv * 4);
    rt_mesh_reset_counts(m);
    rtc_capture_begin();
    rt_ring_attention_forward_cu(m, SP, d_out, d_lse, d_q, d_k, d_v, B, Tl, H, Hkv, D, causal,
                                 scratch);
    rt_ring_attention_backward_cu(m, SP, d_dq, d_dk, d_dv, d_do, d_q, d_k, d_v, d_o, d_l, B, Tl,
                                  H, Hkv, D, causal, scratch);
    RtcGraph *g = rtc_capture_end();
    CHECK(m->bytes[SP] == rt_vol_ring_fwd(kv, 4, P) + rt_vol_ring_bwd(kv, 4, P),
          "%s: the capture counted %llu bytes", shape, (unsigned long long)m->bytes[SP]);
    rtc_graph_launch(g);
    rtc_sync();
    int ok = same_(d_out, o1, nq) && same_(d_dq, q1, nq) && same_(d_dk, k1, kv) &&
             same_(d_dv, v1, kv);
    CHECK(ok, "%s: the replayed ring attention differs from the eager", shape);
    printf("%-26s %-30s %-6s %s\n", label, shape, "graph", ok ? "PASS (bitwise)" : "FAIL");
    rtc_graph_free(g);
    free(o1), free(q1), free(k1), free(v1);
  }
  for (float *x : {q, k, v, dout, dq, dk, dv, out, lse, lq, lk, lv, ldo, ldq0, ldk0, ldv0, wout,
                   lout, llse, ldq, ldk, ldv})
    free(x);
  rtc_test_dfree(d_q, d_k, d_v, d_do, d_o, d_l, d_s, d_out, d_lse, d_dq, d_dk, d_dv);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 2) {
    printf("SKIP: ring attention needs 2 ranks or more\n");
    MPI_Finalize();
    return 77;
  }
  const char *name = NULL;
  if (rtc_device_init(world_rank, &name) != RT_OK) {
    printf("SKIP: no device: %s\n", rt_last_error());
    MPI_Finalize();
    return 77;
  }
  if (world_rank == 0) {
    test_merge(2, 5, 3, 40);
    test_merge(1, 1, 1, 1);
  }
  RtMesh m;
  if (rt_mesh_init(&m, 1, 1, 0, world, 1) != RT_OK) {
    printf("rank %d: FAIL mesh sp=%d: %s\n", world_rank, world, rt_last_error());
    MPI_Finalize();
    return 1;
  }
  const char *modes[2] = {"nccl", "mpi"};
  for (int staged = 0; staged < 2; staged++) {
    CHECK(rtc_mesh_init(&m, staged) == RT_OK, "rtc_mesh_init: %s", rt_last_error());
    for (int causal = 0; causal < 2; causal++) {
      test_ring<float>(&m, modes[staged], 2, 5, 4, 2, 16, causal);  // GQA, odd Tl
      if (!staged) test_ring<rtc_bf16>(&m, modes[staged], 2, 5, 4, 2, 16, causal);
    }
    if (!staged) {
      test_ring<float>(&m, modes[staged], 1, 8, 2, 2, 24, 1);  // H = Hkv, D not a multiple of 16
      test_ring<rtc_bf16>(&m, modes[staged], 1, 8, 2, 1, 32, 1);
    }
    rtc_mesh_free();
  }
  rt_mesh_free(&m);
  return rtc_test_mpi_finish();
}
