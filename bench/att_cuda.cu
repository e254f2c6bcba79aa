/* att_cuda.cu — the cuda target's fused attention (runtime/cuda/k_attention.cu,
 * the bf16 tensor-core kernels a precision = bf16 program runs) timed alone
 * on one GPU, at the shapes of GPT-2 124M's step and of a LLaMA-style
 * grouped-query layer, so that it can be set beside PyTorch's
 * scaled_dot_product_attention (bench/att_torch.py prints the same table
 * for FlashAttention-2, cuDNN and memory-efficient attention on the same
 * shapes and the same memory layout) and profiled by ncu (bench/gpu_check.sh
 * builds it when packing and runs both as step 4c).
 *
 * Layout as the programs hold it: q, out, dout (B,T,H,D) rows H·D apart, k
 * and v (B,T,Hkv,D); lse fp32 (B,H,T); bf16 storage, dq, dk, dv accumulated
 * (bf16), as rt_attention_backward_cu does in a step.
 *
 * FLOPs are FlashAttention's benchmark convention, the same in both
 * scripts: the forward 4·B·H·T²·D (halved when causal), the backward 2.5
 * times the forward.  The figure is work done per second by that count,
 * not the products a kernel runs: ours recomputes s and dp twice in the
 * backward (the dk/dv kernel and the dq kernel, no float atomics), seven
 * products where FlashAttention-2's backward runs five.
 *
 * Timing: after two warm-up calls, REPS calls back to back, the device
 * synchronised before and after, host wall time over REPS (each call is
 * milliseconds: the launch gaps are noise); the median of 5 such rounds.
 *   att_cuda                 the table
 *   att_cuda --ncu           one forward and one backward at B = 4 of the
 *                            GPT-2 shape (for ncu to profile, each kernel once)
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>

#include "common.cuh"  // cudaCheck: the runtime's checked calls (file:line, the call, a hint)
#include "rtc.h"

#define CK(x) cudaCheck(x)

struct Shape {
  const char *name;
  int B, T, H, Hkv, D, causal;
};

// n bf16 uniform in [-1, 1) (a fixed LCG: the same inputs every run)
static rtc_bf16 *dev_random(size_t n, unsigned seed) {
  rtc_bf16 *h = (rtc_bf16 *)malloc(n * sizeof(rtc_bf16)), *d;
  unsigned s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    h[i] = rtc_f2bf((float)(s >> 8) / 8388608.0f - 1.0f);
  }
  CK(cudaMalloc(&d, n * sizeof(rtc_bf16)));
  CK(cudaMemcpy(d, h, n * sizeof(rtc_bf16), cudaMemcpyHostToDevice));
  free(h);
  return d;
}

struct Bufs {
  rtc_bf16 *q, *k, *v, *out, *dout, *dq, *dk, *dv;
  float *lse;
};

static Bufs alloc_bufs(const Shape &s) {
  size_t nq = (size_t)s.B * s.T * s.H * s.D, nk = (size_t)s.B * s.T * s.Hkv * s.D;
  Bufs b;
  b.q = dev_random(nq, 1), b.k = dev_random(nk, 2), b.v = dev_random(nk, 3);
  b.dout = dev_random(nq, 4), b.out = dev_random(nq, 5);
  b.dq = dev_random(nq, 6), b.dk = dev_random(nk, 7), b.dv = dev_random(nk, 8);
  CK(cudaMalloc(&b.lse, (size_t)s.B * s.H * s.T * sizeof(float)));
  return b;
}

static void free_bufs(Bufs &b) {
  rtc_bf16 *p[] = {b.q, b.k, b.v, b.out, b.dout, b.dq, b.dk, b.dv};
  for (rtc_bf16 *x : p) CK(cudaFree(x));
  CK(cudaFree(b.lse));
}

static void fwd(const Shape &s, Bufs &b) {
  rt_attention_forward_cu(b.out, b.lse, b.q, b.k, b.v, s.B, s.T, s.H, s.Hkv, s.D, s.causal);
}
static void bwd(const Shape &s, Bufs &b) {
  rt_attention_backward_cu(b.dq, b.dk, b.dv, b.dout, b.q, b.k, b.v, b.out, b.lse, s.B, s.T, s.H,
                           s.Hkv, s.D, s.causal);
}

// seconds a call: the median of 5 rounds of reps calls
template <class F>
static double time_calls(F f, int reps) {
  for (int i = 0; i < 2; i++) f();
  CK(cudaDeviceSynchronize());
  double r[5];
  for (int k = 0; k < 5; k++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; i++) f();
    CK(cudaDeviceSynchronize());
    auto t1 = std::chrono::steady_clock::now();
    r[k] = std::chrono::duration<double>(t1 - t0).count() / reps;
  }
  std::sort(r, r + 5);
  return r[2];
}

int main(int argc, char **argv) {
  static const Shape shapes[] = {
      {"gpt2", 16, 1024, 12, 12, 64, 1},   // GPT-2 124M's layer, 16 sequences
      {"gpt2-nc", 16, 1024, 12, 12, 64, 0},  // the same, not causal
      {"llama", 4, 2048, 32, 8, 128, 1},   // grouped-query, D = 128
  };
  if (argc > 1 && !strcmp(argv[1], "--ncu")) {
    Shape s = shapes[0];
    s.B = 4;
    Bufs b = alloc_bufs(s);
    fwd(s, b);
    bwd(s, b);
    CK(cudaDeviceSynchronize());
    free_bufs(b);
    return 0;
  }
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  printf("attention, ours (runtime/cuda/k_attention.cu, bf16 tensor-core kernels) on %s\n", p.name);
  printf("%-8s %-30s %10s %9s %10s %9s\n", "shape", "B T H/Hkv D", "fwd ms", "TFLOP/s", "bwd ms",
         "TFLOP/s");
  for (const Shape &s : shapes) {
    Bufs b = alloc_bufs(s);
    double f = 4.0 * s.B * s.H * (double)s.T * s.T * s.D / (s.causal ? 2 : 1);
    double tf = time_calls([&] { fwd(s, b); }, 10);
    double tb = time_calls([&] { bwd(s, b); }, 10);
    char dims[64];
    snprintf(dims, sizeof dims, "%d %d %d/%d %d%s", s.B, s.T, s.H, s.Hkv, s.D,
             s.causal ? " causal" : "");
    printf("%-8s %-30s %10.3f %9.1f %10.3f %9.1f\n", s.name, dims, tf * 1e3, f / tf / 1e12,
           tb * 1e3, 2.5 * f / tb / 1e12);
    free_bufs(b);
  }
  return 0;
}
