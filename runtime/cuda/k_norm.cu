/* k_norm.cu — layernorm and rmsnorm (runtime/k_norm.inc on the GPU).
 *
 * Rows: one warp per row, 8 rows a 256-thread block, the row's sums by warp
 * shuffles; rows that are 16-byte aligned are read and written 16 bytes a
 * lane (the kernels' W: 3.35 ms a GPT-2 backward call element by element
 * on the H200, bench/results/gpu_check-2026-12-04.txt).  Weight and bias gradients (sums over rows) in two fixed-order
 * passes, no atomics: pass 1 gives each chunk of RT_NORM_ROWS rows and each
 * column a partial sum (rows in order) in a scratch buffer, pass 2 adds a
 * column's partials in chunk order to dweight/dbias.  The chunking depends
 * on N only, so the result is the same run to run and GPU to GPU.
 * Scratch: 2·ceil(N/RT_NORM_ROWS)·C floats of the program's kernel workspace
 * (rtc_ws.h).
 */
#include "common.cuh"
#include "rtc_bf16_io.cuh"

#define RT_NORM_ROWS RTC_NORM_ROWS // rows per partial sum of the parameter gradients (rtc_ws.h)
#define RT_NORM_WARPS 8   // rows (warps) per block of the row kernels
#define RT_LN_EPS_CU 1e-5 // RT_LN_EPS in shardrt.h

static void *rtc_norm_ws;
static size_t rtc_norm_ws_bytes;

static float *rtc_norm_workspace(int N, int C) {
  return (float *)rtc_ws_scratch(rtc_ws_norm_params(N, C), &rtc_norm_ws, &rtc_norm_ws_bytes,
                                 "norm weight gradient's partial sums", __FILE__, __LINE__);
}

/* The row kernels and the gradients' pass 1 are templated on the storage
 * type T of the activations (float, or rtc_bf16 under precision = bf16:
 * loaded as float, computed in float, stored rounded; rtc_bf16_io.cuh);
 * weight, bias, statistics and parameter gradients are float either way.
 * And on W, the elements a lane loads at once (rtc_ldw): 1, element by
 * element, or RTC_VEC(T), a 16-byte vector where the rows are aligned
 * (rtc_rows_vec_ok): lane l then takes elements or vectors l, l + 32, ...
 * of a row, so a warp reads 512 contiguous bytes an instruction.  The
 * row sums are the same run to run either way (in another order with
 * vectors: a lane adds its W elements, then the warp's lanes). */

// out is (N,C), mean and rstd are (N) or NULL, inp is (N,C) (out may alias
// inp), weight is (C), bias is (C) or NULL.  One warp per row.
template <class T, int W>
__global__ void layernorm_forward_kernel(T *out, float *mean, float *rstd, const T *inp,
                                         const float *__restrict__ weight,
                                         const float *__restrict__ bias, int N, int C,
                                         float eps) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * RT_NORM_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const T *x = inp + (size_t)n * C;
  T *y = out + (size_t)n * C;
  float f[W], s = 0.0f;
  for (int i = lane * W; i < C; i += 32 * W) {
    rtc_ldw<W>(f, x + i);
    for (int k = 0; k < W; k++) s += f[k];
  }
  float m = rtc_warp_sum(s) / C;
  float v = 0.0f;
  for (int i = lane * W; i < C; i += 32 * W) {
    rtc_ldw<W>(f, x + i);
    for (int k = 0; k < W; k++) {
      float d = f[k] - m;
      v += d * d;
    }
  }
  float r = 1.0f / sqrtf(rtc_warp_sum(v) / C + eps);
  for (int i = lane * W; i < C; i += 32 * W) {
    rtc_ldw<W>(f, x + i);
    for (int k = 0; k < W; k++) {
      float o = (f[k] - m) * r * __ldg(weight + i + k);
      f[k] = bias ? o + __ldg(bias + i + k) : o;
    }
    rtc_stw<W>(y + i, f);
  }
  if (lane == 0) {
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = r;
  }
}

// out is (N,C), rstd is (N) or NULL, inp is (N,C) (out may alias inp), weight is (C)
template <class T, int W>
__global__ void rmsnorm_forward_kernel(T *out, float *rstd, const T *inp,
                                       const float *__restrict__ weight, int N, int C,
                                       float eps) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * RT_NORM_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const T *x = inp + (size_t)n * C;
  T *y = out + (size_t)n * C;
  float f[W], s = 0.0f;
  for (int i = lane * W; i < C; i += 32 * W) {
    rtc_ldw<W>(f, x + i);
    for (int k = 0; k < W; k++) s += f[k] * f[k];
  }
  float r = 1.0f / sqrtf(rtc_warp_sum(s) / C + eps);
  for (int i = lane * W; i < C; i += 32 * W) {
    rtc_ldw<W>(f, x + i);
    for (int k = 0; k < W; k++) f[k] = f[k] * r * __ldg(weight + i + k);
    rtc_stw<W>(y + i, f);
  }
  if (lane == 0 && rstd) rstd[n] = r;
}

// dinp += dx for one row a warp.  dinp, dout, inp are (N,C), weight is (C),
// mean is (N) or NULL (rmsnorm), rstd is (N):
//   dx = s·(w·dy - [layernorm] mean(w·dy) - norm·mean(w·dy·norm)), norm = (x - m)·s
template <class T, int W>
__global__ void norm_backward_kernel(T *dinp, const T *dout, const T *inp,
                                     const float *__restrict__ weight,
                                     const float *__restrict__ mean,
                                     const float *__restrict__ rstd, int N, int C) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * RT_NORM_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const T *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
  T *dx = dinp + (size_t)n * C;
  float m = mean ? mean[n] : 0.0f, s = rstd[n];
  float a = 0.0f, b = 0.0f, fx[W], fy[W], fd[W];
  for (int i = lane * W; i < C; i += 32 * W) {
    rtc_ldw<W>(fx, x + i);
    rtc_ldw<W>(fy, dy + i);
    for (int k = 0; k < W; k++) {
      float wdy = __ldg(weight + i + k) * fy[k];
      a += wdy;
      b += wdy * ((fx[k] - m) * s);
    }
  }
  float dnorm_mean = mean ? rtc_warp_sum(a) / C : 0.0f;
  float dnorm_norm_mean = rtc_warp_sum(b) / C;
  for (int i = lane * W; i < C; i += 32 * W) {
    rtc_ldw<W>(fx, x + i);
    rtc_ldw<W>(fy, dy + i);
    rtc_ldw<W>(fd, dx + i);
    for (int k = 0; k < W; k++) {
      float norm = (fx[k] - m) * s;
      fd[k] = fd[k] + s * (__ldg(weight + i + k) * fy[k] - dnorm_mean - norm * dnorm_norm_mean);
    }
    rtc_stw<W>(dx + i, fd);
  }
}

// Pass 1 of the parameter gradients.  grid (ceil(C/(W·blockDim.x)), nchunks):
// thread t of the grid's x takes columns W t .. W t + W - 1.  pw and pb are
// (nchunks, C): pw[k,c] = Σ_{n in chunk k} (x - m)·s·dy, pb[k,c] = Σ dy,
// rows in order (the same sums for any W).  mean is (N) or NULL; pb unused
// when NULL.
template <class T, int W>
__global__ void norm_param_partial_kernel(float *pw, float *pb, const T *dout, const T *inp,
                                          const float *mean, const float *rstd, int N, int C) {
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * W;
  if (c >= C) return;
  int n0 = blockIdx.y * RT_NORM_ROWS, n1 = min(n0 + RT_NORM_ROWS, N);
  float sw[W], sb[W], fy[W], fx[W];
  for (int k = 0; k < W; k++) sw[k] = 0.0f, sb[k] = 0.0f;
  for (int n = n0; n < n1; n++) {
    rtc_ldw<W>(fy, dout + (size_t)n * C + c);
    rtc_ldw<W>(fx, inp + (size_t)n * C + c);
    float m = mean ? __ldg(mean + n) : 0.0f, r = __ldg(rstd + n);
    for (int k = 0; k < W; k++) {
      sb[k] += fy[k];
      sw[k] += (fx[k] - m) * r * fy[k];
    }
  }
  for (int k = 0; k < W; k++) {
    pw[(size_t)blockIdx.y * C + c + k] = sw[k];
    if (pb) pb[(size_t)blockIdx.y * C + c + k] = sb[k];
  }
}

// Pass 2: dweight[c] += Σ_k pw[k,c], dbias[c] += Σ_k pb[k,c] (either
// output NULL).  A block takes 32 columns (threadIdx.x) and splits the
// chunks over RT_NORM_SUM_LANES lanes (threadIdx.y: chunks y, y + lanes,
// ... in order), then adds the lanes' sums in a fixed tree: the same order
// every run.  (One thread a column over GPT-2's 4,096 partials kept 3 of
// the H200's 132 SMs busy: 0.31 ms a call.)
#define RT_NORM_SUM_LANES 32
__global__ void norm_param_sum_kernel(float *dweight, float *dbias, const float *pw,
                                      const float *pb, int nchunks, int C) {
  __shared__ float shw[RT_NORM_SUM_LANES][33], shb[RT_NORM_SUM_LANES][33];
  int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
  float sw = 0.0f, sb = 0.0f;
  if (c < C)
    for (int k = ty; k < nchunks; k += RT_NORM_SUM_LANES) {
      sw += pw[(size_t)k * C + c];
      if (dbias) sb += pb[(size_t)k * C + c];
    }
  shw[ty][tx] = sw;
  shb[ty][tx] = sb;
  __syncthreads();
  for (int w = RT_NORM_SUM_LANES / 2; w > 0; w /= 2) {
    if (ty < w) {
      shw[ty][tx] += shw[ty + w][tx];
      shb[ty][tx] += shb[ty + w][tx];
    }
    __syncthreads();
  }
  if (ty == 0 && c < C) {
    if (dweight) dweight[c] += shw[0][tx];
    if (dbias) dbias[c] += shb[0][tx];
  }
}

template <class T>
static void norm_param_grads(float *dweight, float *dbias, const T *dout, const T *inp,
                             const float *mean, const float *rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  int nchunks = (N + RT_NORM_ROWS - 1) / RT_NORM_ROWS;
  float *pw = rtc_norm_workspace(N, C);
  float *pb = dbias ? pw + (size_t)nchunks * C : NULL;
  const bool vec = rtc_rows_vec_ok<T>(C, {dout, inp});
  const int nt = vec ? C / RTC_VEC(T) : C, th = nt < 128 ? (nt + 31) / 32 * 32 : 128;
  dim3 grid((unsigned)((nt + th - 1) / th), (unsigned)nchunks);
  if (vec)
    RTC_LAUNCH((norm_param_partial_kernel<T, RTC_VEC(T)>), grid, th, 0, pw, pb, dout, inp, mean,
               rstd, N, C);
  else
    RTC_LAUNCH((norm_param_partial_kernel<T, 1>), grid, th, 0, pw, pb, dout, inp, mean, rstd, N,
               C);
  RTC_LAUNCH(norm_param_sum_kernel, (C + 31) / 32, dim3(32, RT_NORM_SUM_LANES), 0, dweight,
             dbias, pw, pb, nchunks, C);
}

static unsigned row_blocks(int N) { return (unsigned)((N + RT_NORM_WARPS - 1) / RT_NORM_WARPS); }

/* The row kernels' launch: on vectors where every row given is aligned. */
#define RT_NORM_ROWS_LAUNCH(kernel, vec, ...)                                               \
  do {                                                                                      \
    if (vec)                                                                                \
      RTC_LAUNCH((kernel<T, RTC_VEC(T)>), row_blocks(N), 32 * RT_NORM_WARPS, 0, __VA_ARGS__); \
    else                                                                                    \
      RTC_LAUNCH((kernel<T, 1>), row_blocks(N), 32 * RT_NORM_WARPS, 0, __VA_ARGS__);         \
  } while (0)

/* The launchers, for either storage type. */
template <class T>
static void layernorm_forward_(T *out, float *mean, float *rstd, const T *inp,
                               const float *weight, const float *bias, int N, int C,
                               double eps) {
  if (N <= 0) return;
  RT_NORM_ROWS_LAUNCH(layernorm_forward_kernel, (rtc_rows_vec_ok<T>(C, {out, inp})), out, mean,
                      rstd, inp, weight, bias, N, C, (float)eps);
}

template <class T>
static void layernorm_backward_(T *dinp, float *dweight, float *dbias, const T *dout,
                                const T *inp, const float *weight, const float *mean,
                                const float *rstd, int N, int C) {
  if (dweight || dbias) norm_param_grads(dweight, dbias, dout, inp, mean, rstd, N, C);
  if (!dinp || N <= 0) return;
  RT_NORM_ROWS_LAUNCH(norm_backward_kernel, (rtc_rows_vec_ok<T>(C, {dinp, dout, inp})), dinp,
                      dout, inp, weight, mean, rstd, N, C);
}

template <class T>
static void rmsnorm_forward_(T *out, float *rstd, const T *inp, const float *weight, int N,
                             int C, double eps) {
  if (N <= 0) return;
  RT_NORM_ROWS_LAUNCH(rmsnorm_forward_kernel, (rtc_rows_vec_ok<T>(C, {out, inp})), out, rstd, inp,
                      weight, N, C, (float)eps);
}

template <class T>
static void rmsnorm_backward_(T *dinp, float *dweight, const T *dout, const T *inp,
                              const float *weight, const float *rstd, int N, int C) {
  if (dweight) norm_param_grads(dweight, (float *)NULL, dout, inp, (const float *)NULL, rstd, N, C);
  if (!dinp || N <= 0) return;
  RT_NORM_ROWS_LAUNCH(norm_backward_kernel, (rtc_rows_vec_ok<T>(C, {dinp, dout, inp})), dinp,
                      dout, inp, weight, (const float *)NULL, rstd, N, C);
}

extern "C" {

void rt_layernorm_forward_eps_cu(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int N, int C,
                                 double eps) {
  layernorm_forward_(out, mean, rstd, inp, weight, bias, N, C, eps);
}

void rt_layernorm_forward_cu(float *out, float *mean, float *rstd, const float *inp,
                             const float *weight, const float *bias, int N, int C) {
  layernorm_forward_(out, mean, rstd, inp, weight, bias, N, C, RT_LN_EPS_CU);
}

void rt_layernorm_backward_cu(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, const float *mean,
                              const float *rstd, int N, int C) {
  layernorm_backward_(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void rt_rmsnorm_forward_cu(float *out, float *rstd, const float *inp, const float *weight,
                           int N, int C, double eps) {
  rmsnorm_forward_(out, rstd, inp, weight, N, C, eps);
}

void rt_rmsnorm_backward_cu(float *dinp, float *dweight, const float *dout, const float *inp,
                            const float *weight, const float *rstd, int N, int C) {
  rmsnorm_backward_(dinp, dweight, dout, inp, weight, rstd, N, C);
}

}  // extern "C"

/* ---- precision = bf16: x, out, dout, dinp bf16 ---- */

void rt_layernorm_forward_eps_cu(rtc_bf16 *out, float *mean, float *rstd, const rtc_bf16 *inp,
                                 const float *weight, const float *bias, int N, int C,
                                 double eps) {
  layernorm_forward_(out, mean, rstd, inp, weight, bias, N, C, eps);
}

void rt_layernorm_forward_cu(rtc_bf16 *out, float *mean, float *rstd, const rtc_bf16 *inp,
                             const float *weight, const float *bias, int N, int C) {
  layernorm_forward_(out, mean, rstd, inp, weight, bias, N, C, RT_LN_EPS_CU);
}

void rt_layernorm_backward_cu(rtc_bf16 *dinp, float *dweight, float *dbias,
                              const rtc_bf16 *dout, const rtc_bf16 *inp, const float *weight,
                              const float *mean, const float *rstd, int N, int C) {
  layernorm_backward_(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void rt_rmsnorm_forward_cu(rtc_bf16 *out, float *rstd, const rtc_bf16 *inp, const float *weight,
                           int N, int C, double eps) {
  rmsnorm_forward_(out, rstd, inp, weight, N, C, eps);
}

void rt_rmsnorm_backward_cu(rtc_bf16 *dinp, float *dweight, const rtc_bf16 *dout,
                            const rtc_bf16 *inp, const float *weight, const float *rstd, int N,
                            int C) {
  rmsnorm_backward_(dinp, dweight, dout, inp, weight, rstd, N, C);
}
