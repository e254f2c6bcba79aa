/* test_ring.c — ring attention (dist_ring.c) against the single-device
 * kernels on the whole sequence, at any np. Every rank builds the same full
 * q, k, v, dout (T = P·Tl), computes the reference, runs the ring on its
 * shard of Tl tokens and compares its rows of out, lse, dq, dk, dv, the
 * bytes counted against dist_formulas.h, and that scratch of exactly the
 * planned size is enough (a guard after it stays untouched). */
#include <mpi.h>

#include "../rt_test.h"
#include "dist_ring.h"

typedef struct {
  int B, Tl, H, Hkv, D, causal, f64;
} Case;

#define GUARD 64
#define GUARD_VAL 12345.0

static void to_real(void *dst, const double *src, size_t n, int f64) {
  if (f64)
    memcpy(dst, src, n * sizeof(double));
  else
    rt_f64_to_f32(dst, src, n);
}

static void from_real(double *dst, const void *src, size_t n, int f64) {
  if (f64)
    memcpy(dst, src, n * sizeof(double));
  else
    rt_f32_to_f64(dst, src, n);
}

// src is (B,T,row), dst is (B,Tl,row): tokens [r·Tl, (r+1)·Tl).
static void slice(double *dst, const double *src, int B, int T, int Tl, int r, size_t row) {
  for (int b = 0; b < B; b++)
    memcpy(dst + (size_t)b * Tl * row, src + ((size_t)b * T + (size_t)r * Tl) * row,
           Tl * row * sizeof(double));
}

// A REAL buffer of n elements holding x (or zeros when x is NULL).
static void *real_buf(const double *x, size_t n, int f64) {
  void *p = xcalloc(n, f64 ? sizeof(double) : sizeof(float));
  if (x)
    to_real(p, x, n, f64);
  return p;
}

static int guard_intact(const void *scratch, size_t n, int f64) {
  for (size_t i = n; i < n + GUARD; i++) {
    double g = f64 ? ((const double *)scratch)[i] : ((const float *)scratch)[i];
    if (g != GUARD_VAL)
      return 0;
  }
  return 1;
}

static void run_case(MPI_Comm comm, Case c) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  int B = c.B, Tl = c.Tl, H = c.H, Hkv = c.Hkv, D = c.D, T = P * Tl, f64 = c.f64;
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
  size_t lq = nq / P, lk = nk / P, ll = nl / P;
  size_t esize = f64 ? sizeof(double) : sizeof(float);

  // the full tensors, the same on every rank; nonzero starting gradients
  double *q = xcalloc(nq, 8), *k = xcalloc(nk, 8), *v = xcalloc(nk, 8), *dout = xcalloc(nq, 8);
  double *dq0 = xcalloc(nq, 8), *dk0 = xcalloc(nk, 8), *dv0 = xcalloc(nk, 8);
  uint64_t seed = 1000 * (uint64_t)Tl + 10 * (uint64_t)Hkv + (uint64_t)c.causal;
  randn64(q, nq, 1.5, seed + 1);
  randn64(k, nk, 1.0, seed + 2);
  randn64(v, nk, 1.0, seed + 3);
  randn64(dout, nq, 1.0, seed + 4);
  randn64(dq0, nq, 0.5, seed + 5);
  randn64(dk0, nk, 0.5, seed + 6);
  randn64(dv0, nk, 0.5, seed + 7);

  // reference: the single-device kernels on the whole sequence
  void *Q = real_buf(q, nq, f64), *K = real_buf(k, nk, f64), *V = real_buf(v, nk, f64);
  void *DO = real_buf(dout, nq, f64), *O = real_buf(NULL, nq, f64), *L = real_buf(NULL, nl, f64);
  void *DQ = real_buf(dq0, nq, f64), *DK = real_buf(dk0, nk, f64), *DV = real_buf(dv0, nk, f64);
  if (f64) {
    rt_attention_forward_f64(O, L, Q, K, V, B, T, H, Hkv, D, c.causal);
    rt_attention_backward_f64(DQ, DK, DV, DO, Q, K, V, O, L, B, T, H, Hkv, D, c.causal);
  } else {
    rt_attention_forward_f32(O, L, Q, K, V, B, T, H, Hkv, D, c.causal);
    rt_attention_backward_f32(DQ, DK, DV, DO, Q, K, V, O, L, B, T, H, Hkv, D, c.causal);
  }
  double *ro = xcalloc(nq, 8), *rl = xcalloc(nl, 8), *rdq = xcalloc(nq, 8);
  double *rdk = xcalloc(nk, 8), *rdv = xcalloc(nk, 8);
  from_real(ro, O, nq, f64);
  from_real(rl, L, nl, f64);
  from_real(rdq, DQ, nq, f64);
  from_real(rdk, DK, nk, f64);
  from_real(rdv, DV, nk, f64);

  // this rank's shard, in and expected out
  double *sq = xcalloc(lq, 8), *sk = xcalloc(lk, 8), *sv = xcalloc(lk, 8), *sdo = xcalloc(lq, 8);
  double *sdq = xcalloc(lq, 8), *sdk = xcalloc(lk, 8), *sdv = xcalloc(lk, 8);
  double *eo = xcalloc(lq, 8), *el = xcalloc(ll, 8), *edq = xcalloc(lq, 8);
  double *edk = xcalloc(lk, 8), *edv = xcalloc(lk, 8);
  slice(sq, q, B, T, Tl, r, (size_t)H * D);
  slice(sk, k, B, T, Tl, r, (size_t)Hkv * D);
  slice(sv, v, B, T, Tl, r, (size_t)Hkv * D);
  slice(sdo, dout, B, T, Tl, r, (size_t)H * D);
  slice(sdq, dq0, B, T, Tl, r, (size_t)H * D);
  slice(sdk, dk0, B, T, Tl, r, (size_t)Hkv * D);
  slice(sdv, dv0, B, T, Tl, r, (size_t)Hkv * D);
  slice(eo, ro, B, T, Tl, r, (size_t)H * D);
  slice(el, rl, B * H, T, Tl, r, 1);
  slice(edq, rdq, B, T, Tl, r, (size_t)H * D);
  slice(edk, rdk, B, T, Tl, r, (size_t)Hkv * D);
  slice(edv, rdv, B, T, Tl, r, (size_t)Hkv * D);

  // the ring, scratch of exactly the planned size followed by a guard
  size_t nfwd = rt_scratch_ring_fwd(B, Tl, H, Hkv, D), nbwd = rt_scratch_ring_bwd(B, Tl, H, Hkv, D);
  size_t ns = nfwd > nbwd ? nfwd : nbwd;
  double *guard = xcalloc(ns + GUARD, 8);
  for (size_t i = 0; i < ns + GUARD; i++)
    guard[i] = GUARD_VAL;
  void *SQ = real_buf(sq, lq, f64), *SK = real_buf(sk, lk, f64), *SV = real_buf(sv, lk, f64);
  void *SDO = real_buf(sdo, lq, f64), *SO = real_buf(NULL, lq, f64), *SL = real_buf(NULL, ll, f64);
  void *SDQ = real_buf(sdq, lq, f64), *SDK = real_buf(sdk, lk, f64), *SDV = real_buf(sdv, lk, f64);
  void *S = real_buf(guard, ns + GUARD, f64), *S2 = real_buf(guard, ns + GUARD, f64);
  uint64_t bf = 1000, bb = 2000; // counters accumulate
  if (f64) {
    rt_ring_attention_forward_f64(comm, &bf, SO, SL, SQ, SK, SV, B, Tl, H, Hkv, D, c.causal, S);
    rt_ring_attention_backward_f64(comm, &bb, SDQ, SDK, SDV, SDO, SQ, SK, SV, SO, SL, B, Tl, H,
                                   Hkv, D, c.causal, S2);
  } else {
    rt_ring_attention_forward_f32(comm, &bf, SO, SL, SQ, SK, SV, B, Tl, H, Hkv, D, c.causal, S);
    rt_ring_attention_backward_f32(comm, &bb, SDQ, SDK, SDV, SDO, SQ, SK, SV, SO, SL, B, Tl, H,
                                   Hkv, D, c.causal, S2);
  }
  double *go = xcalloc(lq, 8), *gl = xcalloc(ll, 8), *gdq = xcalloc(lq, 8);
  double *gdk = xcalloc(lk, 8), *gdv = xcalloc(lk, 8);
  from_real(go, SO, lq, f64);
  from_real(gl, SL, ll, f64);
  from_real(gdq, SDQ, lq, f64);
  from_real(gdk, SDK, lk, f64);
  from_real(gdv, SDV, lk, f64);

  char what[160];
  double tol = f64 ? 1e-12 : 2e-5;
#define CHECK(name, got, want, n)                                                   \
  do {                                                                            \
    snprintf(what, sizeof what, "rank %d/%d Tl=%d Hkv=%d causal=%d %s: %s", r, P, Tl, \
             Hkv, c.causal, f64 ? "f64" : "f32", name);                           \
    CHECK_CLOSE64(what, got, want, n, tol, tol);                                  \
  } while (0)
  CHECK("out", go, eo, lq);
  CHECK("lse", gl, el, ll);
  CHECK("dq", gdq, edq, lq);
  CHECK("dk", gdk, edk, lk);
  CHECK("dv", gdv, edv, lk);
#undef CHECK
  size_t kv = (size_t)B * Tl * Hkv * D;
  ASSERT(1000 + rt_vol_ring_fwd(kv, (int)esize, P), bf);
  ASSERT(2000 + rt_vol_ring_bwd(kv, (int)esize, P), bb);
  ASSERT_TRUE(guard_intact(S, nfwd, f64));
  ASSERT_TRUE(guard_intact(S2, nbwd, f64));

  void *frees[] = {q, k, v, dout, dq0, dk0, dv0, Q, K, V, DO, O, L, DQ, DK, DV,
                   ro, rl, rdq, rdk, rdv, sq, sk, sv, sdo, sdq, sdk, sdv, eo, el,
                   edq, edk, edv, guard, SQ, SK, SV, SDO, SO, SL, SDQ, SDK, SDV,
                   S, S2, go, gl, gdq, gdk, gdv};
  for (size_t i = 0; i < sizeof frees / sizeof *frees; i++)
    free(frees[i]);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int P;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (P > 1) // oversubscribed ranks: one thread each
    rt_set_threads(1);
  static const Case cases[] = {
      {2, 16, 4, 2, 16, 0, 0}, {2, 16, 4, 2, 16, 1, 0}, {2, 16, 4, 4, 16, 0, 0},
      {2, 16, 4, 4, 16, 1, 0}, {2, 5, 4, 2, 16, 0, 0},  {2, 5, 4, 2, 16, 1, 0},
      {2, 5, 4, 4, 16, 0, 0},  {2, 5, 4, 4, 16, 1, 0},
      {1, 70, 4, 2, 16, 1, 0}, // shards wider than the kernels' query block
      {2, 5, 4, 2, 16, 1, 1},  {2, 16, 4, 4, 16, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    run_case(MPI_COMM_WORLD, cases[i]);
  // a split communicator: ring neighbours are ranks of comm, not of the world
  if (P >= 4) {
    int wr;
    MPI_Comm half;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_split(MPI_COMM_WORLD, wr % 2, P - wr, &half);
    run_case(half, (Case){2, 5, 4, 2, 16, 1, 0});
    MPI_Comm_free(&half);
  }
  int failed = 0;
  MPI_Allreduce(&test_failures, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf("%s: np %d, %d checks per rank, %s\n", __FILE__, P, test_checks,
           failed ? "FAILED" : "ok");
  MPI_Finalize();
  return failed ? 1 : 0;
}
