/* test_k_attention.cu — rt_attention_forward_cu / rt_attention_backward_cu
 * against the cpu kernels rt_attention_forward_f32 / rt_attention_backward_f32
 * on random inputs: causal and not, grouped-query (H=4,Hkv=2; H=6,Hkv=1)
 * and multi-head, T = 1, 7, 64, 100, 200 (tails past a 64-row tile, several
 * tiles), D = 16, 24, 64, 128, B = 1 and 2.
 *
 * The forward's outputs (out, lse) are poisoned with NaN before the call;
 * the gradients accumulate, so dq, dk, dv start from the same random values
 * on both sides. Error metric, per tensor, norm-wise: ||gpu - cpu|| / ||cpu||
 * (in double); pass: every error < 1e-5. For the gradients the line also
 * shows, for information, the same metric on the increments alone (result
 * minus the initial values): it is the stricter figure, but meaningless
 * where the exact gradient is 0 (T = 1: both sides are rounding noise).
 * Element-wise errors (with a floor of 1e-2·max|cpu|) are ~1e-5 to 6e-5:
 * the two sides sum in different orders, and fp32 cancellation near 0
 * leaves absolute errors of ~1e-7 of the tensor's scale.
 * Also: the backward twice from the same start is bitwise equal (no float
 * atomics), and a call with dk = dv = NULL gives the dq of the full call.
 *
 * Built like the kernels, by nvcc for a GPU or through the host shim.
 */
#include "common.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "shardrt.h"
}

#define TOL 1e-5

static uint64_t rng_state = 0x243f6a8885a308d3ull;
// A standard normal (Box-Muller on a 64-bit xorshift).
static float randn(void) {
  double u[2];
  for (int i = 0; i < 2; i++) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    u[i] = ((rng_state >> 11) + 0.5) / 9007199254740992.0;
  }
  return (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static float *host_randn(size_t n) {
  float *p = (float *)malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = randn();
  return p;
}
static float *to_dev(const float *h, size_t n) {
  float *d;
  cudaCheck(cudaMalloc((void **)&d, n * sizeof(float)));
  cudaCheck(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}
static float *from_dev(const float *d, size_t n) {
  float *h = (float *)malloc(n * sizeof(float));
  cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}
// A device buffer of n NaNs (0x7fc00000).
static float *dev_poison(size_t n) {
  float *h = (float *)malloc(n * sizeof(float));
  uint32_t nan = 0x7fc00000u;
  for (size_t i = 0; i < n; i++) memcpy(h + i, &nan, 4);
  float *d = to_dev(h, n);
  free(h);
  return d;
}

// Norm-wise relative error ||a - b|| / ||b - base|| over one tensor (base
// NULL: 0), in double; NaN or inf anywhere in a gives +inf.
static double rel_err(const float *a, const float *b, const float *base, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i]) || isinf(a[i])) return INFINITY;
    double e = (double)a[i] - b[i], r = (double)b[i] - (base ? base[i] : 0);
    num += e * e;
    den += r * r;
  }
  return sqrt(num / (den > 1e-300 ? den : 1e-300));
}

typedef struct {
  int B, T, H, Hkv, D, causal;
} Case;

// Runs one shape both ways; returns the number of failures.
static int run_case(Case c) {
  int B = c.B, T = c.T, H = c.H, Hkv = c.Hkv, D = c.D;
  size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
  float *q = host_randn(nq), *k = host_randn(nk), *v = host_randn(nk), *dout = host_randn(nq);
  float *dq0 = host_randn(nq), *dk0 = host_randn(nk), *dv0 = host_randn(nk);
  int fails = 0;

  // cpu reference
  float *out = (float *)malloc(nq * 4), *lse = (float *)malloc(nl * 4);
  float *dq = (float *)malloc(nq * 4), *dk = (float *)malloc(nk * 4), *dv = (float *)malloc(nk * 4);
  rt_attention_forward_f32(out, lse, q, k, v, B, T, H, Hkv, D, c.causal);
  memcpy(dq, dq0, nq * 4);
  memcpy(dk, dk0, nk * 4);
  memcpy(dv, dv0, nk * 4);
  rt_attention_backward_f32(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, Hkv, D, c.causal);

  // forward
  float *d_q = to_dev(q, nq), *d_k = to_dev(k, nk), *d_v = to_dev(v, nk);
  float *d_dout = to_dev(dout, nq), *d_out = dev_poison(nq), *d_lse = dev_poison(nl);
  rt_attention_forward_cu(d_out, d_lse, d_q, d_k, d_v, B, T, H, Hkv, D, c.causal);
  cudaCheck(cudaDeviceSynchronize());
  float *g_out = from_dev(d_out, nq), *g_lse = from_dev(d_lse, nl);
  double e_out = rel_err(g_out, out, NULL, nq), e_lse = rel_err(g_lse, lse, NULL, nl);
  int ok = e_out < TOL && e_lse < TOL;
  fails += !ok;
  printf("attention_forward  B=%d T=%3d H=%d Hkv=%d D=%3d causal=%d  out %.2e lse %.2e  %s\n", B,
         T, H, Hkv, D, c.causal, e_out, e_lse, ok ? "PASS" : "FAIL");

  // backward on the cpu forward's out and lse (so only the backward is measured)
  float *d_o = to_dev(out, nq), *d_l = to_dev(lse, nl);
  float *d_dq = to_dev(dq0, nq), *d_dk = to_dev(dk0, nk), *d_dv = to_dev(dv0, nk);
  rt_attention_backward_cu(d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_o, d_l, B, T, H, Hkv, D,
                           c.causal);
  cudaCheck(cudaDeviceSynchronize());
  float *g_dq = from_dev(d_dq, nq), *g_dk = from_dev(d_dk, nk), *g_dv = from_dev(d_dv, nk);
  double e_dq = rel_err(g_dq, dq, NULL, nq), e_dk = rel_err(g_dk, dk, NULL, nk),
         e_dv = rel_err(g_dv, dv, NULL, nk);
  double i_dq = rel_err(g_dq, dq, dq0, nq), i_dk = rel_err(g_dk, dk, dk0, nk),
         i_dv = rel_err(g_dv, dv, dv0, nk);
  ok = e_dq < TOL && e_dk < TOL && e_dv < TOL;
  fails += !ok;
  printf("attention_backward B=%d T=%3d H=%d Hkv=%d D=%3d causal=%d  dq %.2e dk %.2e dv %.2e"
         "  (increments %.1e %.1e %.1e)  %s\n",
         B, T, H, Hkv, D, c.causal, e_dq, e_dk, e_dv, i_dq, i_dk, i_dv, ok ? "PASS" : "FAIL");

  // determinism: the same call again from the same start, bitwise; then dq alone
  cudaCheck(cudaMemcpy(d_dq, dq0, nq * 4, cudaMemcpyHostToDevice));
  cudaCheck(cudaMemcpy(d_dk, dk0, nk * 4, cudaMemcpyHostToDevice));
  cudaCheck(cudaMemcpy(d_dv, dv0, nk * 4, cudaMemcpyHostToDevice));
  rt_attention_backward_cu(d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_o, d_l, B, T, H, Hkv, D,
                           c.causal);
  cudaCheck(cudaDeviceSynchronize());
  float *h_dq = from_dev(d_dq, nq), *h_dk = from_dev(d_dk, nk), *h_dv = from_dev(d_dv, nk);
  int same = !memcmp(h_dq, g_dq, nq * 4) && !memcmp(h_dk, g_dk, nk * 4) &&
             !memcmp(h_dv, g_dv, nk * 4);
  cudaCheck(cudaMemcpy(d_dq, dq0, nq * 4, cudaMemcpyHostToDevice));
  rt_attention_backward_cu(d_dq, NULL, NULL, d_dout, d_q, d_k, d_v, d_o, d_l, B, T, H, Hkv, D,
                           c.causal);
  cudaCheck(cudaDeviceSynchronize());
  free(h_dq);
  h_dq = from_dev(d_dq, nq);
  int same_dq = !memcmp(h_dq, g_dq, nq * 4);
  fails += !same + !same_dq;
  printf("attention_backward B=%d T=%3d H=%d Hkv=%d D=%3d causal=%d  repeat %s, dq alone %s  %s\n",
         B, T, H, Hkv, D, c.causal, same ? "bitwise equal" : "DIFFERS",
         same_dq ? "bitwise equal" : "DIFFERS", same && same_dq ? "PASS" : "FAIL");

  float *hs[] = {q, k, v, dout, dq0, dk0, dv0, out, lse, dq, dk, dv, g_out, g_lse,
                 g_dq, g_dk, g_dv, h_dq, h_dk, h_dv};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]);
  float *ds[] = {d_q, d_k, d_v, d_dout, d_out, d_lse, d_o, d_l, d_dq, d_dk, d_dv};
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cudaCheck(cudaFree(ds[i]));
  return fails;
}

int main(void) {
  static const Case cases[] = {
      {1, 1, 4, 2, 16, 1},   {1, 1, 4, 4, 24, 0},   {2, 7, 4, 2, 16, 1},
      {2, 7, 6, 1, 24, 0},   {1, 64, 4, 4, 64, 1},  {1, 64, 6, 1, 16, 0},
      {2, 100, 4, 2, 24, 1}, {1, 100, 6, 1, 64, 1}, {2, 100, 4, 4, 64, 0},
      {1, 100, 4, 2, 16, 0}, {1, 200, 2, 1, 32, 1}, {1, 70, 2, 2, 128, 1},
  };
  int fails = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fails += run_case(cases[i]);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
  return fails ? 1 : 0;
}
