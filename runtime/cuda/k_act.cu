/* k_act.cu — activations, softmax, dropout and elementwise helpers
 * (runtime/k_act.inc on the GPU), plus the accumulate and chunk copies of
 * the training driver (rt_acc, rt_chunk_copy, rt_chunk_acc of rt_train.h).
 *
 * Elementwise kernels: grid-stride loops, 256 threads a block.  Softmax:
 * one warp per row.  Backward kernels accumulate (+=) as the cpu ones do.
 * Dropout draws rt_rng_uniform (runtime/rng.c) bit for bit, so the GPU keeps
 * the same elements as the cpu for the same (seed, step, offset).
 */
#include "common.cuh"

#define RT_ACT_THREADS 256
#define RT_ACT_WARPS 8  // softmax rows per block
/* RT_DROPOUT_SALT of rt_internal.h (the cpu dropout's seed salt). */
#define RTC_DROPOUT_SALT 0xD50F7A11C0FFEE01ull
#define RTC_GELU_K 0.7978845608028654f  // sqrt(2/pi)

/* rng.c's counter-based generator on the device. */
__device__ __forceinline__ uint64_t rtc_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* rt_rng_uniform(seed, stream, index) with key = the per-(seed, stream) part. */
__device__ __forceinline__ double rtc_rng_uniform_keyed(uint64_t key, uint64_t index) {
  uint64_t u = rtc_mix64(key + index * 0xD1B54A32D192ED03ull);
  return (double)(u >> 11) * 0x1.0p-53;
}
static uint64_t rtc_rng_key(uint64_t seed, uint64_t stream) {
  uint64_t z = seed;  // rt_mix64(rt_mix64(seed) ^ stream·golden), on the host
  for (int k = 0; k < 2; k++) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    if (k == 0) z ^= stream * 0x9E3779B97F4A7C15ull;
  }
  return z;
}

#define GRID_STRIDE(i, n) \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (size_t)gridDim.x * blockDim.x)

/* GELU's tanh form through e = exp(-2|u|), as k_act.inc (no cancellation
 * near tanh u = ±1): returns (1 + tanh u)/2, *sm = (1 - tanh u)/2. */
__device__ __forceinline__ float gelu_sp(float x, float *sm) {
  float u = RTC_GELU_K * (x + 0.044715f * x * x * x);
  float e = expf(-2.0f * fabsf(u)), inv = 1.0f / (1.0f + e);
  *sm = u >= 0.0f ? e * inv : inv;
  return u >= 0.0f ? inv : e * inv;
}
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// out and inp are (n)
__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
  GRID_STRIDE(i, n) {
    float sm, x = inp[i];
    out[i] = x * gelu_sp(x, &sm);
  }
}
// dinp, inp, dout are (n): dinp += gelu'(inp)·dout
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
  GRID_STRIDE(i, n) {
    float x = inp[i], sm, sp = gelu_sp(x, &sm);
    float du = RTC_GELU_K * (1.0f + (float)(3 * 0.044715) * x * x);
    dinp[i] += (sp + 2.0f * x * sp * sm * du) * dout[i];
  }
}
__global__ void relu_forward_kernel(float *out, const float *inp, size_t n) {
  GRID_STRIDE(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
__global__ void relu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
  GRID_STRIDE(i, n) dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}
__global__ void silu_forward_kernel(float *out, const float *inp, size_t n) {
  GRID_STRIDE(i, n) out[i] = inp[i] * sigmoidf_(inp[i]);
}
__global__ void silu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
  GRID_STRIDE(i, n) {
    float x = inp[i], sg = sigmoidf_(x);
    dinp[i] += dout[i] * sg * (1.0f + x * (1.0f - sg));
  }
}

// out is (N,C); a and b are (N,C) with row stride ld
__global__ void swiglu_forward_kernel(float *out, const float *a, const float *b, int N, int C,
                                      int ld) {
  GRID_STRIDE(k, (size_t)N * C) {
    size_t n = k / C, i = k % C, j = n * ld + i;
    float x = a[j];
    out[k] = x * sigmoidf_(x) * b[j];
  }
}
// da, db (either NULL), a, b are (N,C) with row stride ld; dout is (N,C)
__global__ void swiglu_backward_kernel(float *da, float *db, const float *dout, const float *a,
                                       const float *b, int N, int C, int ld) {
  GRID_STRIDE(k, (size_t)N * C) {
    size_t n = k / C, i = k % C, j = n * ld + i;
    float x = a[j], sg = sigmoidf_(x), dy = dout[k];
    if (da) da[j] += dy * b[j] * sg * (1.0f + x * (1.0f - sg));
    if (db) db[j] += dy * x * sg;
  }
}

// out and inp are (N,C), out may alias inp.  One warp per row: max (NaNs
// skipped, as rt_max_), out = exp(x - max), then out /= Σ out.
__global__ void softmax_forward_kernel(float *out, const float *inp, int N, int C) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RT_ACT_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *x = inp + (size_t)n * C;
  float *y = out + (size_t)n * C;
  float mx = -INFINITY;
  for (int i = lane; i < C; i += 32) mx = x[i] > mx ? x[i] : mx;
  mx = rtc_warp_max(mx);
  float s = 0.0f;
  for (int i = lane; i < C; i += 32) {
    float e = expf(x[i] - mx);
    y[i] = e;
    s += e;
  }
  float inv = 1.0f / rtc_warp_sum(s);
  for (int i = lane; i < C; i += 32) y[i] *= inv;
}
// dinp, dout, out are (N,C): dinp += out·(dout - Σ dout·out)
__global__ void softmax_backward_kernel(float *dinp, const float *dout, const float *out, int N,
                                        int C) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RT_ACT_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *y = out + (size_t)n * C, *dy = dout + (size_t)n * C;
  float *dx = dinp + (size_t)n * C;
  float d = 0.0f;
  for (int i = lane; i < C; i += 32) d += dy[i] * y[i];
  d = rtc_warp_sum(d);
  for (int i = lane; i < C; i += 32) dx[i] += y[i] * (dy[i] - d);
}

// out and inp are (n), out may alias inp: kept (uniform >= p) elements scaled
__global__ void dropout_forward_kernel(float *out, const float *inp, size_t n, double p,
                                       float scale, uint64_t key, uint64_t offset) {
  GRID_STRIDE(i, n) {
    int keep = rtc_rng_uniform_keyed(key, offset + i) >= p;
    out[i] = keep ? inp[i] * scale : 0.0f;
  }
}
// dinp and dout are (n): dinp += the kept elements of dout, scaled
__global__ void dropout_backward_kernel(float *dinp, const float *dout, size_t n, double p,
                                        float scale, uint64_t key, uint64_t offset) {
  GRID_STRIDE(i, n) {
    if (rtc_rng_uniform_keyed(key, offset + i) >= p) dinp[i] += dout[i] * scale;
  }
}

__global__ void add_kernel(float *out, const float *a, const float *b, size_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
// dst += src (alpha == 1: no multiply, as rt_axpy_f32)
__global__ void acc_kernel(float *dst, const float *src, size_t n) {
  GRID_STRIDE(i, n) dst[i] += src[i];
}
__global__ void axpy_kernel(float *dst, const float *src, float alpha, size_t n) {
  GRID_STRIDE(i, n) dst[i] += alpha * src[i];
}
__global__ void scale_kernel(float *x, size_t n, float s) {
  GRID_STRIDE(i, n) x[i] *= s;
}

// out is (N,W) = inp[:, c0:c0+W], inp is (N,C)
__global__ void slice_cols_forward_kernel(float *out, const float *inp, int N, int C, int c0,
                                          int W) {
  GRID_STRIDE(k, (size_t)N * W) out[k] = inp[(k / W) * C + c0 + k % W];
}
// dinp is (N,C): dinp[:, c0:c0+W] += dout (N,W)
__global__ void slice_cols_backward_kernel(float *dinp, const float *dout, int N, int C, int c0,
                                           int W) {
  GRID_STRIDE(k, (size_t)N * W) dinp[(k / W) * C + c0 + k % W] += dout[k];
}

// src is [outer, P·inner] of T: dst [outer, inner] = chunk r of every row
template <class T>
__global__ void chunk_copy_kernel(T *dst, const T *src, size_t outer, size_t inner, int P,
                                  int r) {
  GRID_STRIDE(k, outer * inner) {
    size_t o = k / inner, i = k % inner;
    dst[k] = src[(o * (size_t)P + (size_t)r) * inner + i];
  }
}
// dst is [outer, P·inner]: chunk r of every row += src [outer, inner]
__global__ void chunk_acc_kernel(float *dst, const float *src, size_t outer, size_t inner, int P,
                                 int r) {
  GRID_STRIDE(k, outer * inner) {
    size_t o = k / inner, i = k % inner;
    dst[(o * (size_t)P + (size_t)r) * inner + i] += src[k];
  }
}

static unsigned blocks(size_t n) { return rtc_blocks(n, RT_ACT_THREADS); }
static unsigned row_blocks(int N) { return (unsigned)((N + RT_ACT_WARPS - 1) / RT_ACT_WARPS); }

extern "C" {

void rt_gelu_forward_cu(float *out, const float *inp, size_t n) {
  if (n) RTC_LAUNCH(gelu_forward_kernel, blocks(n), RT_ACT_THREADS, 0, out, inp, n);
}
void rt_gelu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n) {
  if (n) RTC_LAUNCH(gelu_backward_kernel, blocks(n), RT_ACT_THREADS, 0, dinp, inp, dout, n);
}
void rt_relu_forward_cu(float *out, const float *inp, size_t n) {
  if (n) RTC_LAUNCH(relu_forward_kernel, blocks(n), RT_ACT_THREADS, 0, out, inp, n);
}
void rt_relu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n) {
  if (n) RTC_LAUNCH(relu_backward_kernel, blocks(n), RT_ACT_THREADS, 0, dinp, inp, dout, n);
}
void rt_silu_forward_cu(float *out, const float *inp, size_t n) {
  if (n) RTC_LAUNCH(silu_forward_kernel, blocks(n), RT_ACT_THREADS, 0, out, inp, n);
}
void rt_silu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n) {
  if (n) RTC_LAUNCH(silu_backward_kernel, blocks(n), RT_ACT_THREADS, 0, dinp, inp, dout, n);
}
void rt_swiglu_forward_cu(float *out, const float *a, const float *b, int N, int C, int ld) {
  size_t n = N > 0 && C > 0 ? (size_t)N * C : 0;
  if (n) RTC_LAUNCH(swiglu_forward_kernel, blocks(n), RT_ACT_THREADS, 0, out, a, b, N, C, ld);
}
void rt_swiglu_backward_cu(float *da, float *db, const float *dout, const float *a,
                           const float *b, int N, int C, int ld) {
  size_t n = N > 0 && C > 0 ? (size_t)N * C : 0;
  if (n && (da || db))
    RTC_LAUNCH(swiglu_backward_kernel, blocks(n), RT_ACT_THREADS, 0, da, db, dout, a, b, N, C,
               ld);
}
void rt_softmax_forward_cu(float *out, const float *inp, int N, int C) {
  if (N > 0 && C > 0)
    RTC_LAUNCH(softmax_forward_kernel, row_blocks(N), 32 * RT_ACT_WARPS, 0, out, inp, N, C);
}
void rt_softmax_backward_cu(float *dinp, const float *dout, const float *out, int N, int C) {
  if (N > 0 && C > 0)
    RTC_LAUNCH(softmax_backward_kernel, row_blocks(N), 32 * RT_ACT_WARPS, 0, dinp, dout, out,
               N, C);
}
void rt_dropout_forward_cu(float *out, const float *inp, size_t n, double p, uint64_t seed,
                           uint64_t step, uint64_t offset) {
  if (!n) return;
  if (p <= 0) {
    if (out != inp)
      cudaCheck(cudaMemcpyAsync(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                (cudaStream_t)rtc_stream));
    return;
  }
  float scale = p < 1 ? (float)(1 / (1 - p)) : 0.0f;
  RTC_LAUNCH(dropout_forward_kernel, blocks(n), RT_ACT_THREADS, 0, out, inp, n, p, scale,
             rtc_rng_key(seed ^ RTC_DROPOUT_SALT, step), offset);
}
void rt_dropout_backward_cu(float *dinp, const float *dout, size_t n, double p, uint64_t seed,
                            uint64_t step, uint64_t offset) {
  if (!n) return;
  if (p <= 0) {
    RTC_LAUNCH(acc_kernel, blocks(n), RT_ACT_THREADS, 0, dinp, dout, n);
    return;
  }
  float scale = p < 1 ? (float)(1 / (1 - p)) : 0.0f;
  RTC_LAUNCH(dropout_backward_kernel, blocks(n), RT_ACT_THREADS, 0, dinp, dout, n, p, scale,
             rtc_rng_key(seed ^ RTC_DROPOUT_SALT, step), offset);
}
void rt_add_forward_cu(float *out, const float *a, const float *b, size_t n) {
  if (n) RTC_LAUNCH(add_kernel, blocks(n), RT_ACT_THREADS, 0, out, a, b, n);
}
void rt_axpy_cu(float *dst, const float *src, double alpha, size_t n) {
  if (!n) return;
  if (alpha == 1)
    RTC_LAUNCH(acc_kernel, blocks(n), RT_ACT_THREADS, 0, dst, src, n);
  else
    RTC_LAUNCH(axpy_kernel, blocks(n), RT_ACT_THREADS, 0, dst, src, (float)alpha, n);
}
void rt_scale_cu(float *x, size_t n, double s) {
  if (n) RTC_LAUNCH(scale_kernel, blocks(n), RT_ACT_THREADS, 0, x, n, (float)s);
}
void rt_slice_cols_forward_cu(float *out, const float *inp, int N, int C, int c0, int W) {
  size_t n = N > 0 && W > 0 ? (size_t)N * W : 0;
  if (n) RTC_LAUNCH(slice_cols_forward_kernel, blocks(n), RT_ACT_THREADS, 0, out, inp, N, C, c0, W);
}
void rt_slice_cols_backward_cu(float *dinp, const float *dout, int N, int C, int c0, int W) {
  size_t n = N > 0 && W > 0 ? (size_t)N * W : 0;
  if (n)
    RTC_LAUNCH(slice_cols_backward_kernel, blocks(n), RT_ACT_THREADS, 0, dinp, dout, N, C, c0, W);
}
void rt_acc_cu(float *dst, const float *src, size_t n) {
  if (n) RTC_LAUNCH(acc_kernel, blocks(n), RT_ACT_THREADS, 0, dst, src, n);
}
void rt_chunk_copy_cu(void *dst, const void *src, size_t outer, size_t inner, int P, int r,
                      int esize) {
  size_t n = outer * inner;
  if (!n) return;
  /* whole elements of 8, 4, 2 or 1 bytes */
  if (esize == 8)
    RTC_LAUNCH(chunk_copy_kernel<uint64_t>, blocks(n), RT_ACT_THREADS, 0, (uint64_t *)dst,
               (const uint64_t *)src, outer, inner, P, r);
  else if (esize == 4)
    RTC_LAUNCH(chunk_copy_kernel<uint32_t>, blocks(n), RT_ACT_THREADS, 0, (uint32_t *)dst,
               (const uint32_t *)src, outer, inner, P, r);
  else if (esize == 2)
    RTC_LAUNCH(chunk_copy_kernel<uint16_t>, blocks(n), RT_ACT_THREADS, 0, (uint16_t *)dst,
               (const uint16_t *)src, outer, inner, P, r);
  else
    RTC_LAUNCH(chunk_copy_kernel<uint8_t>, blocks(n * (size_t)esize), RT_ACT_THREADS, 0,
               (uint8_t *)dst, (const uint8_t *)src, outer, inner * (size_t)esize, P, r);
}
void rt_chunk_acc_cu(float *dst, const float *src, size_t outer, size_t inner, int P, int r) {
  size_t n = outer * inner;
  if (n) RTC_LAUNCH(chunk_acc_kernel, blocks(n), RT_ACT_THREADS, 0, dst, src, outer, inner, P, r);
}

}  // extern "C"
