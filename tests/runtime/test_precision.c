/* test_precision.c — the f32 kernels against the f64 kernels on the same
 * (f32-representable) inputs: one template, two instantiations, so this
 * catches float-specific mistakes (overflow in exp, lost precision, a
 * constant typed double in one place). */
#include "rt_math.h"
#include "rt_test.h"

/* f64 data rounded to f32, and its f32 copy. */
typedef struct {
  double *d;
  float *f;
  size_t n;
} Pair;

static Pair pair(size_t n, double std, uint64_t seed) {
  Pair p = {xcalloc(n, sizeof(double)), xcalloc(n, sizeof(float)), n};
  randn64(p.d, n, std, seed);
  rt_f64_to_f32(p.f, p.d, n);
  rt_f32_to_f64(p.d, p.f, n);
  return p;
}

static Pair zeros(size_t n) {
  Pair p = {xcalloc(n, sizeof(double)), xcalloc(n, sizeof(float)), n};
  return p;
}

static void pfree(Pair *p) {
  free(p->d);
  free(p->f);
}

#define SAME(what, p, rtol, atol) CHECK_CLOSE32(what, (p).f, (p).d, (p).n, rtol, atol)

static void test_matmul(void) {
  int N = 33, C = 70, OC = 45;
  Pair x = pair((size_t)N * C, 1, 1), w = pair((size_t)OC * C, 0.1, 2), b = pair(OC, 1, 3);
  Pair out = zeros((size_t)N * OC), dout = pair((size_t)N * OC, 1, 4);
  Pair dx = zeros((size_t)N * C), dw = zeros((size_t)OC * C), db = zeros(OC);
  rt_matmul_forward_f32(out.f, x.f, w.f, b.f, N, C, OC);
  rt_matmul_forward_f64(out.d, x.d, w.d, b.d, N, C, OC);
  SAME("matmul out", out, 1e-5, 1e-5);
  rt_matmul_backward_f32(dx.f, dw.f, db.f, dout.f, x.f, w.f, N, C, OC);
  rt_matmul_backward_f64(dx.d, dw.d, db.d, dout.d, x.d, w.d, N, C, OC);
  SAME("matmul dinp", dx, 1e-5, 1e-5);
  SAME("matmul dweight", dw, 1e-5, 1e-4);
  SAME("matmul dbias", db, 1e-5, 1e-4);
  // gemm helpers: c = 2·aᵀ·b + 0.5·c, batched twice
  Pair a = pair(2 * 6 * 5, 1, 5), bb = pair(2 * 6 * 4, 1, 6), c = pair(2 * 5 * 4, 1, 7);
  rt_gemm_batched_f32(2, 1, 0, 5, 4, 6, 2.0, a.f, 5, 30, bb.f, 4, 24, 0.5, c.f, 4, 20);
  rt_gemm_batched_f64(2, 1, 0, 5, 4, 6, 2.0, a.d, 5, 30, bb.d, 4, 24, 0.5, c.d, 4, 20);
  SAME("gemm_batched", c, 1e-5, 1e-5);
  // one element by hand, from a fresh copy of the original c
  Pair c2 = pair(2 * 5 * 4, 1, 7);
  double ref = 0.5 * c2.d[20 + 1 * 4 + 2];
  for (int k = 0; k < 6; k++)
    ref += 2.0 * a.d[30 + k * 5 + 1] * bb.d[24 + k * 4 + 2];
  ASSERT_NEAR(ref, c.d[20 + 1 * 4 + 2], 1e-12);
  Pair *all[] = {&x, &w, &b, &out, &dout, &dx, &dw, &db, &a, &bb, &c, &c2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    pfree(all[i]);
}

static void test_norms(void) {
  int N = 16, C = 96;
  size_t n = (size_t)N * C;
  Pair x = pair(n, 2, 11), w = pair(C, 1, 12), b = pair(C, 1, 13), dout = pair(n, 1, 14);
  Pair out = zeros(n), mean = zeros(N), rstd = zeros(N), dx = zeros(n), dw = zeros(C),
       db = zeros(C);
  rt_layernorm_forward_f32(out.f, mean.f, rstd.f, x.f, w.f, b.f, N, C);
  rt_layernorm_forward_f64(out.d, mean.d, rstd.d, x.d, w.d, b.d, N, C);
  SAME("layernorm out", out, 1e-5, 1e-5);
  SAME("layernorm rstd", rstd, 1e-5, 1e-6);
  rt_layernorm_backward_f32(dx.f, dw.f, db.f, dout.f, x.f, w.f, mean.f, rstd.f, N, C);
  rt_layernorm_backward_f64(dx.d, dw.d, db.d, dout.d, x.d, w.d, mean.d, rstd.d, N, C);
  SAME("layernorm dinp", dx, 1e-4, 1e-5);
  SAME("layernorm dweight", dw, 1e-5, 1e-5);
  rt_rmsnorm_forward_f32(out.f, rstd.f, x.f, w.f, N, C, 1e-6);
  rt_rmsnorm_forward_f64(out.d, rstd.d, x.d, w.d, N, C, 1e-6);
  SAME("rmsnorm out", out, 1e-5, 1e-5);
  Pair *all[] = {&x, &w, &b, &dout, &out, &mean, &rstd, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    pfree(all[i]);
}

static void test_pointwise(void) {
  size_t n = 1000;
  Pair x = pair(n, 3, 21), out = zeros(n), b = pair(n, 1, 22), dout = pair(n, 1, 23),
       dx = zeros(n);
  rt_gelu_forward_f32(out.f, x.f, n);
  rt_gelu_forward_f64(out.d, x.d, n);
  SAME("gelu out", out, 1e-5, 1e-6);
  rt_gelu_backward_f32(dx.f, x.f, dout.f, n);
  rt_gelu_backward_f64(dx.d, x.d, dout.d, n);
  SAME("gelu dinp", dx, 1e-5, 1e-6);
  rt_silu_forward_f32(out.f, x.f, n);
  rt_silu_forward_f64(out.d, x.d, n);
  SAME("silu out", out, 1e-5, 1e-6);
  rt_relu_forward_f32(out.f, x.f, n);
  rt_relu_forward_f64(out.d, x.d, n);
  SAME("relu out", out, 0, 0);
  rt_swiglu_forward_f32(out.f, x.f, b.f, 10, 100, 100);
  rt_swiglu_forward_f64(out.d, x.d, b.d, 10, 100, 100);
  SAME("swiglu out", out, 1e-5, 1e-6);
  rt_softmax_forward_f32(out.f, x.f, 10, 100);
  rt_softmax_forward_f64(out.d, x.d, 10, 100);
  SAME("softmax out", out, 1e-5, 1e-7);
  rt_dropout_forward_f32(out.f, x.f, n, 0.25, 5, 6, 7);
  rt_dropout_forward_f64(out.d, x.d, n, 0.25, 5, 6, 7);
  SAME("dropout out (same mask)", out, 1e-6, 0);
  Pair *all[] = {&x, &out, &b, &dout, &dx};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    pfree(all[i]);
}

/* Far tails: finite values where the exact ones are finite, softmax's exact
 * zeros for -inf, in both precisions. */
static void test_extremes(void) {
  static const double xs[] = {-1e4, -1e3, -100, -88, -30, -9.5, 0,
                              1e-30, 9.5, 30,   88,  100, 1e4};
  enum { NX = sizeof xs / sizeof xs[0] };
  float xf[NX], yf[NX], gf[NX], onef[NX];
  double xd[NX], yd[NX], gd[NX], oned[NX];
  for (int i = 0; i < NX; i++)
    xf[i] = (float)xs[i], xd[i] = xs[i], onef[i] = 1, oned[i] = 1, gf[i] = 0, gd[i] = 0;
  rt_gelu_forward_f32(yf, xf, NX);
  rt_gelu_forward_f64(yd, xd, NX);
  rt_gelu_backward_f32(gf, xf, onef, NX);
  rt_gelu_backward_f64(gd, xd, oned, NX);
  int finite = 1;
  for (int i = 0; i < NX; i++)
    finite &= isfinite(yf[i]) && isfinite(yd[i]) && isfinite(gf[i]) && isfinite(gd[i]);
  ASSERT_TRUE(finite);
  ASSERT_NEAR(0, yf[0], 0);
  ASSERT_NEAR(0, gf[1], 0);
  ASSERT_NEAR(1e4, yf[NX - 1], 0);
  ASSERT_NEAR(1, gf[NX - 1], 0);
  rt_silu_forward_f32(yf, xf, NX);
  rt_silu_forward_f64(yd, xd, NX);
  for (int i = 0; i < NX; i++)
    gf[i] = 0, gd[i] = 0;
  rt_silu_backward_f32(gf, xf, onef, NX);
  rt_silu_backward_f64(gd, xd, oned, NX);
  finite = 1;
  for (int i = 0; i < NX; i++)
    finite &= isfinite(yf[i]) && isfinite(yd[i]) && isfinite(gf[i]) && isfinite(gd[i]);
  ASSERT_TRUE(finite);
  float sf[6] = {-INFINITY, 2, -INFINITY, 1, 3, -1e30f};
  double sd[6] = {-INFINITY, 2, -INFINITY, 1, 3, -1e30};
  rt_softmax_forward_f32(sf, sf, 2, 3);
  rt_softmax_forward_f64(sd, sd, 2, 3);
  ASSERT_NEAR(0, sf[0], 0);
  ASSERT_NEAR(1, sf[1], 0);
  ASSERT_NEAR(0, sf[2], 0);
  ASSERT_NEAR(0, sf[5], 0);
  ASSERT_NEAR(sd[3], sf[3], 1e-7);
  ASSERT_NEAR(sd[4], sf[4], 1e-7);
}

static void test_rope(void) {
  int B = 1, T = 16, H = 2, D = 64, t0 = 1000; // far positions stress the angles
  size_t n = (size_t)B * T * H * D;
  Pair x = pair(n, 1, 31), out = zeros(n), dx = zeros(n);
  rt_rope_forward_f32(out.f, x.f, B, T, H, D, 10000.0, t0);
  rt_rope_forward_f64(out.d, x.d, B, T, H, D, 10000.0, t0);
  SAME("rope out", out, 1e-4, 1e-4);
  rt_rope_backward_f32(dx.f, x.f, B, T, H, D, 10000.0, t0);
  rt_rope_backward_f64(dx.d, x.d, B, T, H, D, 10000.0, t0);
  SAME("rope dinp", dx, 1e-4, 1e-4);
  pfree(&x), pfree(&out), pfree(&dx);
}

static void test_attention(int B, int T, int H, int Hkv, int D, int causal) {
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
  Pair q = pair(nq, 1, 41), k = pair(nk, 1, 42), v = pair(nk, 1, 43), dout = pair(nq, 1, 44);
  Pair out = zeros(nq), lse = zeros(nl), dq = zeros(nq), dk = zeros(nk), dv = zeros(nk);
  rt_attention_forward_f32(out.f, lse.f, q.f, k.f, v.f, B, T, H, Hkv, D, causal);
  rt_attention_forward_f64(out.d, lse.d, q.d, k.d, v.d, B, T, H, Hkv, D, causal);
  SAME("attention out", out, 1e-4, 1e-5);
  SAME("attention lse", lse, 1e-5, 1e-5);
  rt_attention_backward_f32(dq.f, dk.f, dv.f, dout.f, q.f, k.f, v.f, out.f, lse.f, B, T, H,
                            Hkv, D, causal);
  rt_attention_backward_f64(dq.d, dk.d, dv.d, dout.d, q.d, k.d, v.d, out.d, lse.d, B, T, H,
                            Hkv, D, causal);
  SAME("attention dq", dq, 1e-4, 1e-4);
  SAME("attention dk", dk, 1e-4, 1e-4);
  SAME("attention dv", dv, 1e-4, 1e-4);
  Pair *all[] = {&q, &k, &v, &dout, &out, &lse, &dq, &dk, &dv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    pfree(all[i]);
}

static void test_crossentropy(void) {
  int N = 12, V = 5000;
  Pair x = pair((size_t)N * V, 4, 51), dx = zeros((size_t)N * V), lse = zeros(N);
  int32_t tgt[12];
  for (int i = 0; i < N; i++)
    tgt[i] = i == 3 ? RT_IGNORE_INDEX : (i * 977) % V;
  double l32, l64;
  int n32, n64;
  ASSERT_OK(rt_crossentropy_forward_f32(&l32, &n32, NULL, lse.f, x.f, tgt, N, V));
  ASSERT_OK(rt_crossentropy_forward_f64(&l64, &n64, NULL, lse.d, x.d, tgt, N, V));
  ASSERT(11, n32);
  ASSERT_NEAR(l64, l32, 1e-5 * l64);
  rt_crossentropy_backward_f32(dx.f, x.f, lse.f, tgt, N, V, 1.0, n32);
  rt_crossentropy_backward_f64(dx.d, x.d, lse.d, tgt, N, V, 1.0, n64);
  SAME("cross_entropy dlogits", dx, 1e-4, 1e-8);
  pfree(&x), pfree(&dx), pfree(&lse);
}

static void test_optim(void) {
  size_t n = 300;
  Pair p = pair(n, 1, 61), m = zeros(n), v = zeros(n), mom = zeros(n), p2 = pair(n, 1, 61);
  for (int t = 1; t <= 5; t++) {
    Pair g = pair(n, 0.1, 70 + t);
    rt_adamw_step_f32(p.f, g.f, m.f, v.f, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, t, 0.5);
    rt_adamw_step_f64(p.d, g.d, m.d, v.d, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, t, 0.5);
    rt_sgd_step_f32(p2.f, g.f, mom.f, n, 0.1, 0.9, 0.01, 1.0);
    rt_sgd_step_f64(p2.d, g.d, mom.d, n, 0.1, 0.9, 0.01, 1.0);
    ASSERT_NEAR(rt_sumsq_f64(g.d, n), rt_sumsq_f32(g.f, n), 1e-12);
    pfree(&g);
  }
  SAME("adamw param", p, 1e-6, 1e-6);
  SAME("adamw m", m, 1e-5, 1e-7);
  SAME("adamw v", v, 1e-5, 1e-9);
  SAME("sgd param", p2, 1e-6, 1e-6);
  // init: the f32 values are the f64 values rounded
  Pair w = zeros(1000);
  rt_init_normal_f32(w.f, 1000, 0.02, 42, 3, 500);
  rt_init_normal_f64(w.d, 1000, 0.02, 42, 3, 500);
  int same = 1;
  for (int i = 0; i < 1000; i++)
    same &= w.f[i] == (float)w.d[i];
  ASSERT_TRUE(same);
  pfree(&p), pfree(&m), pfree(&v), pfree(&mom), pfree(&p2), pfree(&w);
}

/* |got - want| in units of the last place of want rounded to float */
static double ulps(float got, double want) {
  float w = (float)want;
  double u = fabs((double)nextafterf(w, INFINITY) - (double)w);
  return fabs((double)got - want) / u;
}

/* rt_math.h's exp and tanh (the f32 kernels' and generated loops') against
 * libm's double on a dense grid: within 1.5 and 2 ulp; the edges exact */
static void test_rt_math(void) {
  double worst_e = 0, worst_t = 0;
  for (float x = -87.0f; x < 88.0f; x += 1e-3f + fabsf(x) * 1e-5f)
    worst_e = fmax(worst_e, ulps(rt_expf(x), exp((double)x)));
  for (float x = -12.0f; x < 12.0f; x += 1e-5f + fabsf(x) * 1e-5f)
    worst_t = fmax(worst_t, ulps(rt_tanhf(x), tanh((double)x)));
  for (float x = 1e-30f; x < 1e-2f; x *= 1.01f) { /* no cancellation near 0 */
    worst_t = fmax(worst_t, ulps(rt_tanhf(x), tanh((double)x)));
    worst_t = fmax(worst_t, ulps(rt_tanhf(-x), tanh(-(double)x)));
  }
  ASSERT_TRUE(worst_e <= 1.5);
  ASSERT_TRUE(worst_t <= 2.0);
  ASSERT_NEAR(0, rt_expf(-INFINITY), 0);
  ASSERT_NEAR(0, rt_expf(-100), 0);
  ASSERT_TRUE(isfinite(rt_expf(100)) && rt_expf(100) > 1e38f);
  ASSERT_TRUE(isnan(rt_expf(NAN)) && isnan(rt_tanhf(NAN)));
  ASSERT_NEAR(1, rt_tanhf(INFINITY), 0);
  ASSERT_NEAR(-1, rt_tanhf(-50), 0);
  ASSERT_TRUE(rt_tanhf(-0.0f) == 0 && signbit(rt_tanhf(-0.0f)));
}

int main(void) {
  test_rt_math();
  test_matmul();
  test_norms();
  test_pointwise();
  test_rope();
  test_attention(2, 100, 4, 2, 16, 1);
  test_attention(2, 100, 4, 2, 16, 0);
  test_attention(1, 300, 4, 1, 32, 0); // three key blocks: the online rescale in f32
  test_attention(1, 300, 2, 2, 64, 1);
  test_extremes();
  test_crossentropy();
  test_optim();
  TEST_MAIN_END();
}
