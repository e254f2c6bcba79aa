/* k_act.cu — activations, softmax, dropout and elementwise helpers
 * (runtime/k_act.inc on the GPU), plus the accumulate and chunk copies of
 * the training driver (rt_acc, rt_chunk_copy, rt_chunk_acc of rt_train.h).
 *
 * Elementwise kernels: grid-stride loops, 256 threads a block.  Softmax:
 * one warp per row.  Backward kernels accumulate (+=) as the cpu ones do.
 * Dropout draws rt_rng_uniform (runtime/rng.c) bit for bit, so the GPU keeps
 * the same elements as the cpu for the same (seed, step, offset).
 */
#include <stdlib.h>

#include <type_traits>

#include "common.cuh"
#include "rtc_bf16_io.cuh"

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

/* The kernels are templated on the storage type T of their activations
 * (float, or rtc_bf16: loaded as float, computed in float, stored rounded;
 * rtc_bf16_io.cuh). */

// out and inp are (n).  W: the elements a thread loads at once (rtc_ldw):
// 1, or a 16-byte vector where n is a multiple and the pointers are aligned
// (element by element, GPT-2's GELU backward ran at 40% of the H200's
// bandwidth: gpu_check-2026-12-04); each element the same either way.
template <class T, int W>
__global__ void gelu_forward_kernel(T *out, const T *inp, size_t n) {
  GRID_STRIDE(j, n / W) {
    float f[W];
    rtc_ldw<W>(f, inp + j * W);
    for (int k = 0; k < W; k++) {
      float sm, x = f[k];
      f[k] = x * gelu_sp(x, &sm);
    }
    rtc_stw<W>(out + j * W, f);
  }
}
// dinp, inp, dout are (n): dinp += gelu'(inp)·dout
template <class T, int W>
__global__ void gelu_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n) {
  GRID_STRIDE(j, n / W) {
    float fx[W], fy[W], fd[W];
    rtc_ldw<W>(fx, inp + j * W);
    rtc_ldw<W>(fy, dout + j * W);
    rtc_ldw<W>(fd, dinp + j * W);
    for (int k = 0; k < W; k++) {
      float x = fx[k], sm, sp = gelu_sp(x, &sm);
      float du = RTC_GELU_K * (1.0f + (float)(3 * 0.044715) * x * x);
      fd[k] = fd[k] + (sp + 2.0f * x * sp * sm * du) * fy[k];
    }
    rtc_stw<W>(dinp + j * W, fd);
  }
}
template <class T>
__global__ void relu_forward_kernel(T *out, const T *inp, size_t n) {
  GRID_STRIDE(i, n) {
    float x = rtc_ldf(inp + i);
    rtc_stf(out + i, x > 0.0f ? x : 0.0f);
  }
}
template <class T>
__global__ void relu_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n) {
  GRID_STRIDE(i, n) {
    rtc_stf(dinp + i, rtc_ldf(dinp + i) + (rtc_ldf(inp + i) > 0.0f ? rtc_ldf(dout + i) : 0.0f));
  }
}
template <class T>
__global__ void silu_forward_kernel(T *out, const T *inp, size_t n) {
  GRID_STRIDE(i, n) {
    float x = rtc_ldf(inp + i);
    rtc_stf(out + i, x * sigmoidf_(x));
  }
}
template <class T>
__global__ void silu_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n) {
  GRID_STRIDE(i, n) {
    float x = rtc_ldf(inp + i), sg = sigmoidf_(x);
    rtc_stf(dinp + i, rtc_ldf(dinp + i) + rtc_ldf(dout + i) * sg * (1.0f + x * (1.0f - sg)));
  }
}

// out is (N,C); a and b are (N,C) with row stride ld
template <class T>
__global__ void swiglu_forward_kernel(T *out, const T *a, const T *b, int N, int C, int ld) {
  GRID_STRIDE(k, (size_t)N * C) {
    size_t n = k / C, i = k % C, j = n * ld + i;
    float x = rtc_ldf(a + j);
    rtc_stf(out + k, x * sigmoidf_(x) * rtc_ldf(b + j));
  }
}
// da, db (either NULL), a, b are (N,C) with row stride ld; dout is (N,C)
template <class T>
__global__ void swiglu_backward_kernel(T *da, T *db, const T *dout, const T *a, const T *b,
                                       int N, int C, int ld) {
  GRID_STRIDE(k, (size_t)N * C) {
    size_t n = k / C, i = k % C, j = n * ld + i;
    float x = rtc_ldf(a + j), sg = sigmoidf_(x), dy = rtc_ldf(dout + k);
    if (da) rtc_stf(da + j, rtc_ldf(da + j) + dy * rtc_ldf(b + j) * sg * (1.0f + x * (1.0f - sg)));
    if (db) rtc_stf(db + j, rtc_ldf(db + j) + dy * x * sg);
  }
}

// out and inp are (N,C), out may alias inp.  One warp per row: max (NaNs
// skipped, as rt_max_), out = exp(x - max), then out /= Σ out.  In bf16 the
// exponentials are not stored in between (that would round twice): the sum
// takes them, and the last pass forms them again, scaled.
template <class T>
__global__ void softmax_forward_kernel(T *out, const T *inp, int N, int C) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RT_ACT_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const T *x = inp + (size_t)n * C;
  T *y = out + (size_t)n * C;
  float mx = -INFINITY;
  for (int i = lane; i < C; i += 32) {
    float xi = rtc_ldf(x + i);
    mx = xi > mx ? xi : mx;
  }
  mx = rtc_warp_max(mx);
  float s = 0.0f;
  if constexpr (std::is_same<T, float>::value) {
    for (int i = lane; i < C; i += 32) {
      float e = expf(x[i] - mx);
      y[i] = e;
      s += e;
    }
    float inv = 1.0f / rtc_warp_sum(s);
    for (int i = lane; i < C; i += 32) y[i] *= inv;
  } else {
    for (int i = lane; i < C; i += 32) s += expf(rtc_ldf(x + i) - mx);
    float inv = 1.0f / rtc_warp_sum(s);
    for (int i = lane; i < C; i += 32) rtc_stf(y + i, expf(rtc_ldf(x + i) - mx) * inv);
  }
}
// dinp, dout, out are (N,C): dinp += out·(dout - Σ dout·out)
template <class T>
__global__ void softmax_backward_kernel(T *dinp, const T *dout, const T *out, int N, int C) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RT_ACT_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const T *y = out + (size_t)n * C, *dy = dout + (size_t)n * C;
  T *dx = dinp + (size_t)n * C;
  float d = 0.0f;
  for (int i = lane; i < C; i += 32) d += rtc_ldf(dy + i) * rtc_ldf(y + i);
  d = rtc_warp_sum(d);
  for (int i = lane; i < C; i += 32)
    rtc_stf(dx + i, rtc_ldf(dx + i) + rtc_ldf(y + i) * (rtc_ldf(dy + i) - d));
}

// out and inp are (n), out may alias inp: kept (uniform >= p) elements scaled
template <class T>
__global__ void dropout_forward_kernel(T *out, const T *inp, size_t n, double p, float scale,
                                       uint64_t key, uint64_t offset) {
  GRID_STRIDE(i, n) {
    int keep = rtc_rng_uniform_keyed(key, offset + i) >= p;
    rtc_stf(out + i, keep ? rtc_ldf(inp + i) * scale : 0.0f);
  }
}
// dinp and dout are (n): dinp += the kept elements of dout, scaled
template <class T>
__global__ void dropout_backward_kernel(T *dinp, const T *dout, size_t n, double p, float scale,
                                        uint64_t key, uint64_t offset) {
  GRID_STRIDE(i, n) {
    if (rtc_rng_uniform_keyed(key, offset + i) >= p)
      rtc_stf(dinp + i, rtc_ldf(dinp + i) + rtc_ldf(dout + i) * scale);
  }
}

template <class T>
__global__ void add_kernel(T *out, const T *a, const T *b, size_t n) {
  GRID_STRIDE(i, n) rtc_stf(out + i, rtc_ldf(a + i) + rtc_ldf(b + i));
}
// dst += src (alpha == 1: no multiply, as rt_axpy_f32)
template <class T>
__global__ void acc_kernel(T *dst, const T *src, size_t n) {
  GRID_STRIDE(i, n) rtc_stf(dst + i, rtc_ldf(dst + i) + rtc_ldf(src + i));
}
template <class T>
__global__ void axpy_kernel(T *dst, const T *src, float alpha, size_t n) {
  GRID_STRIDE(i, n) rtc_stf(dst + i, rtc_ldf(dst + i) + alpha * rtc_ldf(src + i));
}
template <class T>
__global__ void scale_kernel(T *x, size_t n, float s) {
  GRID_STRIDE(i, n) rtc_stf(x + i, rtc_ldf(x + i) * s);
}

// out is (N,W) = inp[:, c0:c0+W], inp is (N,C)
template <class T>
__global__ void slice_cols_forward_kernel(T *out, const T *inp, int N, int C, int c0, int W) {
  GRID_STRIDE(k, (size_t)N * W) out[k] = inp[(k / W) * C + c0 + k % W];
}
// dinp is (N,C): dinp[:, c0:c0+W] += dout (N,W)
template <class T>
__global__ void slice_cols_backward_kernel(T *dinp, const T *dout, int N, int C, int c0, int W) {
  GRID_STRIDE(k, (size_t)N * W) {
    T *d = dinp + (k / W) * C + c0 + k % W;
    rtc_stf(d, rtc_ldf(d) + rtc_ldf(dout + k));
  }
}

/* The column slices on 16-byte vectors (C, c0, W multiples of RTC_VEC(T),
 * pointers 16-byte aligned): grid (vectors of a slice row / blockDim.x,
 * rows), no division per element. */
template <class T>
__global__ void slice_cols_forward_vec_kernel(T *out, const T *inp, int N, int C, int c0, int W) {
  constexpr int V = RTC_VEC(T);
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c >= W) return;
  float f[V];
  for (int n = blockIdx.y; n < N; n += gridDim.y) {
    rtc_ldv(f, inp + (size_t)n * C + c0 + c);
    rtc_stv(out + (size_t)n * W + c, f);
  }
}
template <class T>
__global__ void slice_cols_backward_vec_kernel(T *dinp, const T *dout, int N, int C, int c0,
                                               int W) {
  constexpr int V = RTC_VEC(T);
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c >= W) return;
  float f[V], g[V];
  for (int n = blockIdx.y; n < N; n += gridDim.y) {
    T *d = dinp + (size_t)n * C + c0 + c;
    rtc_ldv(f, d);
    rtc_ldv(g, dout + (size_t)n * W + c);
    for (int k = 0; k < V; k++) f[k] = f[k] + g[k];
    rtc_stv(d, f);
  }
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
template <class T>
__global__ void chunk_acc_kernel(T *dst, const T *src, size_t outer, size_t inner, int P,
                                 int r) {
  GRID_STRIDE(k, outer * inner) {
    size_t o = k / inner, i = k % inner;
    T *d = dst + (o * (size_t)P + (size_t)r) * inner + i;
    rtc_stf(d, rtc_ldf(d) + rtc_ldf(src + k));
  }
}

// out (n) = in rounded to bf16, or widened back to float
__global__ void cast_bf16_kernel(rtc_bf16 *out, const float *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = rtc_f2bf(in[i]);
}
__global__ void widen_bf16_kernel(float *out, const rtc_bf16 *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = rtc_bf2f(in[i]);
}

/* The step's weight casts as one launch: a block casts up to
 * RTC_CAST_CHUNK elements of one segment, the segment whose first block
 * (blk0, ascending) is the last at or below blockIdx.x (a binary search
 * of the device table; empty segments are left out of it). */
#define RTC_CAST_CHUNK (RT_ACT_THREADS * 16)
typedef struct {
  int64_t src, dst, n, blk0;
} RtcCastDev;
__global__ void cast_bf16_multi_kernel(unsigned char *arena, const RtcCastDev *segs, int count) {
  const int64_t b = blockIdx.x;
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (segs[mid].blk0 <= b) lo = mid;
    else hi = mid - 1;
  }
  const RtcCastDev s = segs[lo];
  const float *in = (const float *)(arena + s.src);
  rtc_bf16 *out = (rtc_bf16 *)(arena + s.dst);
  int64_t i0 = (b - s.blk0) * RTC_CAST_CHUNK, end = i0 + RTC_CAST_CHUNK < s.n ? i0 + RTC_CAST_CHUNK : s.n;
  for (int64_t i = i0 + threadIdx.x; i < end; i += blockDim.x) out[i] = rtc_f2bf(in[i]);
}

static unsigned blocks(size_t n) { return rtc_blocks(n, RT_ACT_THREADS); }
static unsigned row_blocks(int N) { return (unsigned)((N + RT_ACT_WARPS - 1) / RT_ACT_WARPS); }

/* The launchers, for either storage type; the fp32 ones (extern "C") and
 * the bf16 overloads below call them. */
// n elements of T at each pointer given: all on 16-byte vectors?
template <class T>
static bool vec_ok(size_t n, std::initializer_list<const void *> ps) {
  return n % RTC_VEC(T) == 0 && rtc_rows_vec_ok<T>(0, ps);
}
// grid (vectors of a W-wide row / threads, rows) of the slice kernels
static dim3 slice_grid(int N, int W, int V, int *th) {
  const int nv = W / V;
  *th = nv < 128 ? (nv + 31) / 32 * 32 : 128;
  return dim3((unsigned)((nv + *th - 1) / *th), (unsigned)(N < 65535 ? N : 65535));
}

template <class T>
static void gelu_forward_(T *out, const T *inp, size_t n) {
  if (n && vec_ok<T>(n, {out, inp}))
    RTC_LAUNCH((gelu_forward_kernel<T, RTC_VEC(T)>), blocks(n / RTC_VEC(T)), RT_ACT_THREADS, 0,
               out, inp, n);
  else if (n)
    RTC_LAUNCH((gelu_forward_kernel<T, 1>), blocks(n), RT_ACT_THREADS, 0, out, inp, n);
}
template <class T>
static void gelu_backward_(T *dinp, const T *inp, const T *dout, size_t n) {
  if (n && vec_ok<T>(n, {dinp, inp, dout}))
    RTC_LAUNCH((gelu_backward_kernel<T, RTC_VEC(T)>), blocks(n / RTC_VEC(T)), RT_ACT_THREADS, 0,
               dinp, inp, dout, n);
  else if (n)
    RTC_LAUNCH((gelu_backward_kernel<T, 1>), blocks(n), RT_ACT_THREADS, 0, dinp, inp, dout, n);
}
template <class T>
static void relu_forward_(T *out, const T *inp, size_t n) {
  if (n) RTC_LAUNCH(relu_forward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, out, inp, n);
}
template <class T>
static void relu_backward_(T *dinp, const T *inp, const T *dout, size_t n) {
  if (n) RTC_LAUNCH(relu_backward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dinp, inp, dout, n);
}
template <class T>
static void silu_forward_(T *out, const T *inp, size_t n) {
  if (n) RTC_LAUNCH(silu_forward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, out, inp, n);
}
template <class T>
static void silu_backward_(T *dinp, const T *inp, const T *dout, size_t n) {
  if (n) RTC_LAUNCH(silu_backward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dinp, inp, dout, n);
}
template <class T>
static void swiglu_forward_(T *out, const T *a, const T *b, int N, int C, int ld) {
  size_t n = N > 0 && C > 0 ? (size_t)N * C : 0;
  if (n) RTC_LAUNCH(swiglu_forward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, out, a, b, N, C, ld);
}
template <class T>
static void swiglu_backward_(T *da, T *db, const T *dout, const T *a, const T *b, int N, int C,
                             int ld) {
  size_t n = N > 0 && C > 0 ? (size_t)N * C : 0;
  if (n && (da || db))
    RTC_LAUNCH(swiglu_backward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, da, db, dout, a, b, N, C,
               ld);
}
template <class T>
static void softmax_forward_(T *out, const T *inp, int N, int C) {
  if (N > 0 && C > 0)
    RTC_LAUNCH(softmax_forward_kernel<T>, row_blocks(N), 32 * RT_ACT_WARPS, 0, out, inp, N, C);
}
template <class T>
static void softmax_backward_(T *dinp, const T *dout, const T *out, int N, int C) {
  if (N > 0 && C > 0)
    RTC_LAUNCH(softmax_backward_kernel<T>, row_blocks(N), 32 * RT_ACT_WARPS, 0, dinp, dout, out,
               N, C);
}
template <class T>
static void dropout_forward_(T *out, const T *inp, size_t n, double p, uint64_t seed,
                             uint64_t step, uint64_t offset) {
  if (!n) return;
  if (p <= 0) {
    if (out != inp)
      cudaCheck(cudaMemcpyAsync(out, inp, n * sizeof(T), cudaMemcpyDeviceToDevice,
                                (cudaStream_t)rtc_stream));
    return;
  }
  float scale = p < 1 ? (float)(1 / (1 - p)) : 0.0f;
  RTC_LAUNCH(dropout_forward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, out, inp, n, p, scale,
             rtc_rng_key(seed ^ RTC_DROPOUT_SALT, step), offset);
}
template <class T>
static void dropout_backward_(T *dinp, const T *dout, size_t n, double p, uint64_t seed,
                              uint64_t step, uint64_t offset) {
  if (!n) return;
  if (p <= 0) {
    RTC_LAUNCH(acc_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dinp, dout, n);
    return;
  }
  float scale = p < 1 ? (float)(1 / (1 - p)) : 0.0f;
  RTC_LAUNCH(dropout_backward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dinp, dout, n, p, scale,
             rtc_rng_key(seed ^ RTC_DROPOUT_SALT, step), offset);
}
template <class T>
static void add_forward_(T *out, const T *a, const T *b, size_t n) {
  if (n) RTC_LAUNCH(add_kernel<T>, blocks(n), RT_ACT_THREADS, 0, out, a, b, n);
}
template <class T>
static void axpy_(T *dst, const T *src, double alpha, size_t n) {
  if (!n) return;
  if (alpha == 1)
    RTC_LAUNCH(acc_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dst, src, n);
  else
    RTC_LAUNCH(axpy_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dst, src, (float)alpha, n);
}
template <class T>
static void scale_(T *x, size_t n, double s) {
  if (n) RTC_LAUNCH(scale_kernel<T>, blocks(n), RT_ACT_THREADS, 0, x, n, (float)s);
}
template <class T>
static void slice_cols_forward_(T *out, const T *inp, int N, int C, int c0, int W) {
  size_t n = N > 0 && W > 0 ? (size_t)N * W : 0;
  int th;
  if (n && C % RTC_VEC(T) == 0 && c0 % RTC_VEC(T) == 0 && W % RTC_VEC(T) == 0 &&
      rtc_rows_vec_ok<T>(0, {out, inp})) {
    dim3 g = slice_grid(N, W, RTC_VEC(T), &th);
    RTC_LAUNCH(slice_cols_forward_vec_kernel<T>, g, th, 0, out, inp, N, C, c0, W);
  } else if (n)
    RTC_LAUNCH(slice_cols_forward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, out, inp, N, C, c0,
               W);
}
template <class T>
static void slice_cols_backward_(T *dinp, const T *dout, int N, int C, int c0, int W) {
  size_t n = N > 0 && W > 0 ? (size_t)N * W : 0;
  int th;
  if (n && C % RTC_VEC(T) == 0 && c0 % RTC_VEC(T) == 0 && W % RTC_VEC(T) == 0 &&
      rtc_rows_vec_ok<T>(0, {dinp, dout})) {
    dim3 g = slice_grid(N, W, RTC_VEC(T), &th);
    RTC_LAUNCH(slice_cols_backward_vec_kernel<T>, g, th, 0, dinp, dout, N, C, c0, W);
  } else if (n)
    RTC_LAUNCH(slice_cols_backward_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dinp, dout, N, C, c0,
               W);
}
template <class T>
static void acc_(T *dst, const T *src, size_t n) {
  if (n) RTC_LAUNCH(acc_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dst, src, n);
}
template <class T>
static void chunk_acc_(T *dst, const T *src, size_t outer, size_t inner, int P, int r) {
  size_t n = outer * inner;
  if (n)
    RTC_LAUNCH(chunk_acc_kernel<T>, blocks(n), RT_ACT_THREADS, 0, dst, src, outer, inner, P, r);
}

extern "C" {

void rt_gelu_forward_cu(float *out, const float *inp, size_t n) { gelu_forward_(out, inp, n); }
void rt_gelu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n) {
  gelu_backward_(dinp, inp, dout, n);
}
void rt_relu_forward_cu(float *out, const float *inp, size_t n) { relu_forward_(out, inp, n); }
void rt_relu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n) {
  relu_backward_(dinp, inp, dout, n);
}
void rt_silu_forward_cu(float *out, const float *inp, size_t n) { silu_forward_(out, inp, n); }
void rt_silu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n) {
  silu_backward_(dinp, inp, dout, n);
}
void rt_swiglu_forward_cu(float *out, const float *a, const float *b, int N, int C, int ld) {
  swiglu_forward_(out, a, b, N, C, ld);
}
void rt_swiglu_backward_cu(float *da, float *db, const float *dout, const float *a,
                           const float *b, int N, int C, int ld) {
  swiglu_backward_(da, db, dout, a, b, N, C, ld);
}
void rt_softmax_forward_cu(float *out, const float *inp, int N, int C) {
  softmax_forward_(out, inp, N, C);
}
void rt_softmax_backward_cu(float *dinp, const float *dout, const float *out, int N, int C) {
  softmax_backward_(dinp, dout, out, N, C);
}
void rt_dropout_forward_cu(float *out, const float *inp, size_t n, double p, uint64_t seed,
                           uint64_t step, uint64_t offset) {
  dropout_forward_(out, inp, n, p, seed, step, offset);
}
void rt_dropout_backward_cu(float *dinp, const float *dout, size_t n, double p, uint64_t seed,
                            uint64_t step, uint64_t offset) {
  dropout_backward_(dinp, dout, n, p, seed, step, offset);
}
void rt_add_forward_cu(float *out, const float *a, const float *b, size_t n) {
  add_forward_(out, a, b, n);
}
void rt_axpy_cu(float *dst, const float *src, double alpha, size_t n) {
  axpy_(dst, src, alpha, n);
}
void rt_scale_cu(float *x, size_t n, double s) { scale_(x, n, s); }
void rt_slice_cols_forward_cu(float *out, const float *inp, int N, int C, int c0, int W) {
  slice_cols_forward_(out, inp, N, C, c0, W);
}
void rt_slice_cols_backward_cu(float *dinp, const float *dout, int N, int C, int c0, int W) {
  slice_cols_backward_(dinp, dout, N, C, c0, W);
}
void rt_acc_cu(float *dst, const float *src, size_t n) { acc_(dst, src, n); }
void rt_chunk_copy_cu(void *dst, const void *src, size_t outer, size_t inner, int P, int r,
                      int esize) {
  size_t n = outer * inner;
  if (!n) return;
  /* whole elements of 8, 4, 2 (bf16) or 1 bytes */
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
  chunk_acc_(dst, src, outer, inner, P, r);
}

}  // extern "C"

/* ---- precision = bf16: the same launchers on bf16 activations ---- */

void rt_gelu_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, size_t n) {
  gelu_forward_(out, inp, n);
}
void rt_gelu_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *inp, const rtc_bf16 *dout, size_t n) {
  gelu_backward_(dinp, inp, dout, n);
}
void rt_relu_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, size_t n) {
  relu_forward_(out, inp, n);
}
void rt_relu_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *inp, const rtc_bf16 *dout, size_t n) {
  relu_backward_(dinp, inp, dout, n);
}
void rt_silu_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, size_t n) {
  silu_forward_(out, inp, n);
}
void rt_silu_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *inp, const rtc_bf16 *dout, size_t n) {
  silu_backward_(dinp, inp, dout, n);
}
void rt_swiglu_forward_cu(rtc_bf16 *out, const rtc_bf16 *a, const rtc_bf16 *b, int N, int C,
                          int ld) {
  swiglu_forward_(out, a, b, N, C, ld);
}
void rt_swiglu_backward_cu(rtc_bf16 *da, rtc_bf16 *db, const rtc_bf16 *dout, const rtc_bf16 *a,
                           const rtc_bf16 *b, int N, int C, int ld) {
  swiglu_backward_(da, db, dout, a, b, N, C, ld);
}
void rt_softmax_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, int N, int C) {
  softmax_forward_(out, inp, N, C);
}
void rt_softmax_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *dout, const rtc_bf16 *out, int N,
                            int C) {
  softmax_backward_(dinp, dout, out, N, C);
}
void rt_dropout_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, size_t n, double p, uint64_t seed,
                           uint64_t step, uint64_t offset) {
  dropout_forward_(out, inp, n, p, seed, step, offset);
}
void rt_dropout_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *dout, size_t n, double p,
                            uint64_t seed, uint64_t step, uint64_t offset) {
  dropout_backward_(dinp, dout, n, p, seed, step, offset);
}
void rt_add_forward_cu(rtc_bf16 *out, const rtc_bf16 *a, const rtc_bf16 *b, size_t n) {
  add_forward_(out, a, b, n);
}
void rt_axpy_cu(rtc_bf16 *dst, const rtc_bf16 *src, double alpha, size_t n) {
  axpy_(dst, src, alpha, n);
}
void rt_scale_cu(rtc_bf16 *x, size_t n, double s) { scale_(x, n, s); }
void rt_slice_cols_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, int N, int C, int c0, int W) {
  slice_cols_forward_(out, inp, N, C, c0, W);
}
void rt_slice_cols_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *dout, int N, int C, int c0,
                               int W) {
  slice_cols_backward_(dinp, dout, N, C, c0, W);
}
void rt_acc_cu(rtc_bf16 *dst, const rtc_bf16 *src, size_t n) { acc_(dst, src, n); }
void rt_chunk_acc_cu(rtc_bf16 *dst, const rtc_bf16 *src, size_t outer, size_t inner, int P,
                     int r) {
  chunk_acc_(dst, src, outer, inner, P, r);
}
void rt_cast_bf16_cu(rtc_bf16 *out, const float *in, size_t n) {
  if (n) RTC_LAUNCH(cast_bf16_kernel, blocks(n), RT_ACT_THREADS, 0, out, in, n);
}
void rt_widen_bf16_cu(float *out, const rtc_bf16 *in, size_t n) {
  if (n) RTC_LAUNCH(widen_bf16_kernel, blocks(n), RT_ACT_THREADS, 0, out, in, n);
}

/* The device copies of the cast tables seen so far, keyed by the caller's
 * table: uploaded on its first call (an eager step), reused by every later
 * call and graph replay. */
typedef struct RtcCastTable {
  const RtcCastSeg *key;
  int count;            /* of the caller's table */
  RtcCastDev *dev;      /* its non-empty segments, with their first blocks */
  int ndev;
  unsigned blocks;
  struct RtcCastTable *next;
} RtcCastTable;
static RtcCastTable *rtc_cast_tables_;

static const RtcCastTable *rtc_cast_table_(const RtcCastSeg *segs, int count) {
  for (const RtcCastTable *t = rtc_cast_tables_; t; t = t->next)
    if (t->key == segs && t->count == count) return t;
  if (rtc_capturing()) // a graph must not hold the upload, nor find the table missing later
    rtc_fail("CUDA", "rt_cast_bf16_multi_cu", "a weight-cast table first seen during a stream capture",
             __FILE__, __LINE__, "run the program's casts eagerly once before capturing a step");
  RtcCastTable *t = (RtcCastTable *)calloc(1, sizeof *t);
  RtcCastDev *h = (RtcCastDev *)malloc(sizeof(RtcCastDev) * (size_t)(count ? count : 1));
  if (!t || !h)
    rtc_fail("CUDA", "malloc", "out of host memory for a weight-cast table", __FILE__, __LINE__,
             "");
  int64_t blk = 0;
  for (int k = 0; k < count; k++) {
    if (segs[k].n <= 0) continue;
    h[t->ndev] = RtcCastDev{segs[k].src, segs[k].dst, segs[k].n, blk};
    t->ndev++;
    blk += (segs[k].n + RTC_CAST_CHUNK - 1) / RTC_CAST_CHUNK;
  }
  if (blk > 0x7fffffff)
    rtc_fail("CUDA", "rt_cast_bf16_multi_cu", "more than 2^31 blocks of weight casts", __FILE__,
             __LINE__, "");
  t->key = segs;
  t->count = count;
  t->blocks = (unsigned)blk;
  if (t->ndev) {
    cudaCheck(cudaMalloc((void **)&t->dev, sizeof(RtcCastDev) * (size_t)t->ndev));
    // on rtc_stream, before the launch that reads it; from pageable memory the
    // call has copied h out when it returns
    cudaCheck(cudaMemcpyAsync(t->dev, h, sizeof(RtcCastDev) * (size_t)t->ndev,
                              cudaMemcpyHostToDevice, (cudaStream_t)rtc_stream));
  }
  free(h);
  t->next = rtc_cast_tables_;
  rtc_cast_tables_ = t;
  return t;
}

void rt_cast_bf16_multi_cu(unsigned char *arena, const RtcCastSeg *segs, int count) {
  const RtcCastTable *t = rtc_cast_table_(segs, count);
  if (t->ndev)
    RTC_LAUNCH(cast_bf16_multi_kernel, t->blocks, RT_ACT_THREADS, 0, arena,
               (const RtcCastDev *)t->dev, t->ndev);
}
