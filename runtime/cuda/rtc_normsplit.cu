/* rtc_normsplit.cu — layernorm and rmsnorm with the channels split over a
 * mesh axis (2D tensor parallelism: the grid row), dist_summa.h's
 * rt_layernorm_split_*_f32 / rt_rmsnorm_split_*_f32 on device buffers.
 *
 * Each pass is a row kernel (one warp per row, 8 rows a block, the row's
 * sums in double: lanes in a fixed stride, then a fixed shuffle tree; no
 * atomics, bitwise repeatable), one NCCL all-reduce of the rows' doubles in
 * the scratch over the axis on the compute stream, and the normalization
 * (or dx) kernel reading them.  The scratch holds what the cpu function's
 * holds: layernorm forward (Σx, Σx²) per row, Σx² taken as Σ(x - m_r)² +
 * Σx·m_r about the rank's local mean; layernorm backward (Σ w·dy, Σ w·dy·x̂);
 * rmsnorm Σx² and Σ w·dy·x.  The parameter gradients are this rank's column
 * sums over its rows: k_norm.cu's fixed-order two-pass kernels.  Bytes are
 * counted as the cpu functions count them (rt_vol_ln_split_* /
 * rt_vol_rms_split_* on m->bytes[ax]; they count no calls).
 *
 * Staged (--comm mpi): the cpu functions on host copies.
 */
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "dist_summa.h"
#include "rtc.h"
#include "rtc_internal.h"

#define RTC_NS_WARPS 8 // rows (warps) per block

static unsigned ns_blocks_(int N) { return (unsigned)((N + RTC_NS_WARPS - 1) / RTC_NS_WARPS); }

// x is (N,Cl); warp n: st[2n] = Σx, st[2n+1] = Σ(x - m)² + Σx·m, m = Σx/Cl
__global__ void rtc_ln_split_stats_kernel(double *__restrict__ st, const float *__restrict__ x,
                                          int N, int Cl) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RTC_NS_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *xr = x + (size_t)n * Cl;
  double s = 0, m2 = 0;
  for (int c = lane; c < Cl; c += 32) s += xr[c];
  s = rtc_warp_sum_d(s);
  double m = Cl > 0 ? s / Cl : 0;
  for (int c = lane; c < Cl; c += 32) {
    double d = xr[c] - m;
    m2 += d * d;
  }
  m2 = rtc_warp_sum_d(m2);
  if (lane == 0) {
    st[2 * n] = s;
    st[2 * n + 1] = m2 + s * m;
  }
}

// out, x are (N,Cl) (out may alias x), mean, rstd (N) or NULL, w (Cl), b (Cl)
// or NULL; st the all-reduced (Σx, Σx²) of each row over all C channels
__global__ void rtc_ln_split_norm_kernel(float *out, float *mean, float *rstd, const float *x,
                                         const float *__restrict__ w,
                                         const float *__restrict__ b,
                                         const double *__restrict__ st, int N, int Cl, int C,
                                         double eps) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RTC_NS_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *xr = x + (size_t)n * Cl;
  float *y = out + (size_t)n * Cl;
  double mu = st[2 * n] / C, var = st[2 * n + 1] / C - mu * mu;
  float m = (float)mu, s = (float)(1 / sqrt((var > 0 ? var : 0) + eps));
  for (int c = lane; c < Cl; c += 32) {
    float o = (xr[c] - m) * s * w[c];
    y[c] = b ? o + b[c] : o;
  }
  if (lane == 0) {
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = s;
  }
}

// dout, x are (N,Cl), w (Cl), mean (N) or NULL (rmsnorm), rstd (N); warp n:
// layernorm st[2n] = Σ w·dy, st[2n+1] = Σ w·dy·x̂; rmsnorm st[n] = Σ w·dy·x
__global__ void rtc_norm_split_dstats_kernel(double *__restrict__ st,
                                             const float *__restrict__ dout,
                                             const float *__restrict__ x,
                                             const float *__restrict__ w,
                                             const float *__restrict__ mean,
                                             const float *__restrict__ rstd, int N, int Cl) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RTC_NS_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *xr = x + (size_t)n * Cl, *dy = dout + (size_t)n * Cl;
  double a = 0, an = 0;
  if (mean) {
    float m = mean[n], s = rstd[n];
    for (int c = lane; c < Cl; c += 32) {
      float dnorm = w[c] * dy[c];
      a += dnorm;
      an += dnorm * ((xr[c] - m) * s);
    }
    a = rtc_warp_sum_d(a);
    an = rtc_warp_sum_d(an);
    if (lane == 0) {
      st[2 * n] = a;
      st[2 * n + 1] = an;
    }
  } else {
    for (int c = lane; c < Cl; c += 32) a += (double)(w[c] * dy[c]) * xr[c];
    a = rtc_warp_sum_d(a);
    if (lane == 0) st[n] = a;
  }
}

// dx += s·(w·dy - mean(w·dy) - x̂·mean(w·dy·x̂)) (layernorm, mean given) or
// s·(w·dy - x·s·mean(w·dy·x)·s) (rmsnorm, mean NULL); st from the all-reduce
__global__ void rtc_norm_split_dx_kernel(float *dx, const float *dout, const float *x,
                                         const float *__restrict__ w,
                                         const float *__restrict__ mean,
                                         const float *__restrict__ rstd,
                                         const double *__restrict__ st, int N, int Cl, int C) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RTC_NS_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *xr = x + (size_t)n * Cl, *dy = dout + (size_t)n * Cl;
  float *d = dx + (size_t)n * Cl;
  float s = rstd[n];
  if (mean) {
    float m = mean[n];
    float dnorm_mean = (float)(st[2 * n] / C), dnorm_norm_mean = (float)(st[2 * n + 1] / C);
    for (int c = lane; c < Cl; c += 32) {
      float norm = (xr[c] - m) * s;
      d[c] += s * (w[c] * dy[c] - dnorm_mean - norm * dnorm_norm_mean);
    }
  } else {
    float dn_n_mean = (float)(st[n] * s / C);
    for (int c = lane; c < Cl; c += 32) d[c] += s * (w[c] * dy[c] - xr[c] * s * dn_n_mean);
  }
}

// x is (N,Cl); warp n: st[n] = Σx²
__global__ void rtc_rms_split_stats_kernel(double *__restrict__ st, const float *__restrict__ x,
                                           int N, int Cl) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RTC_NS_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *xr = x + (size_t)n * Cl;
  double ss = 0;
  for (int c = lane; c < Cl; c += 32) ss += (double)xr[c] * xr[c];
  ss = rtc_warp_sum_d(ss);
  if (lane == 0) st[n] = ss;
}

// out, x are (N,Cl) (out may alias x), rstd (N) or NULL, w (Cl); st the
// all-reduced Σx² of each row over all C channels
__global__ void rtc_rms_split_norm_kernel(float *out, float *rstd, const float *x,
                                          const float *__restrict__ w,
                                          const double *__restrict__ st, int N, int Cl, int C,
                                          double eps) {
  int lane = threadIdx.x % 32, n = blockIdx.x * RTC_NS_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *xr = x + (size_t)n * Cl;
  float *y = out + (size_t)n * Cl;
  float s = (float)(1 / sqrt(st[n] / C + eps));
  for (int c = lane; c < Cl; c += 32) y[c] = xr[c] * s * w[c];
  if (lane == 0 && rstd) rstd[n] = s;
}

/* ---- staged: host copies, the cpu function, results back ---- */

static float *up_(const float *dev, size_t n) { // NULL stays NULL
  if (!dev) return NULL;
  float *h = (float *)malloc(n * sizeof(float) + 1);
  if (!h) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
  rtc_to_host(h, dev, n * sizeof(float));
  return h;
}

static float *alloc_(const float *dev, size_t n) { // an output's host copy, not read
  if (!dev) return NULL;
  float *h = (float *)malloc(n * sizeof(float) + 1);
  if (!h) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
  return h;
}

static void down_(float *dev, float *h, size_t n) { // and frees h
  if (dev) rtc_to_device(dev, h, n * sizeof(float));
  free(h);
}

static double *scratch_(size_t bytes) {
  double *h = (double *)malloc(bytes + 1);
  if (!h) rtc_fail("host", "malloc", "out of memory", __FILE__, __LINE__, "");
  return h;
}

static void scratch_down_(double *dev, double *h, size_t bytes) {
  rtc_to_device(dev, h, bytes);
  free(h);
}

extern "C" {

void rt_layernorm_split_forward_cu(RtMesh *m, RtAxis ax, float *out, float *mean, float *rstd,
                                   const float *x, const float *w, const float *b, int N,
                                   int Cl, int C, double eps, double *scratch) {
  size_t nx = (size_t)N * Cl, sb = rt_scratch_ln_split_bytes((size_t)N);
  if (rtc_staged()) {
    float *hx = up_(x, nx), *hw = up_(w, (size_t)Cl), *hb = up_(b, (size_t)Cl);
    float *ho = alloc_(out, nx), *hm = alloc_(mean, (size_t)N), *hr = alloc_(rstd, (size_t)N);
    double *hs = scratch_(sb);
    rt_layernorm_split_forward_f32(m->comm[ax], &m->bytes[ax], ho, hm, hr, hx, hw, hb, N, Cl, C,
                                   eps, hs);
    down_(out, ho, nx), down_(mean, hm, (size_t)N), down_(rstd, hr, (size_t)N);
    scratch_down_(scratch, hs, sb);
    free(hx), free(hw), free(hb);
    return;
  }
  if (N > 0)
    RTC_LAUNCH(rtc_ln_split_stats_kernel, ns_blocks_(N), 32 * RTC_NS_WARPS, 0, scratch, x, N,
               Cl);
  rtc_allreduce_f64_nocount(m, ax, scratch, 2 * (size_t)N, "rt_layernorm_split_forward_cu");
  m->bytes[ax] += rt_vol_ln_split_fwd((size_t)N, m->size[ax]);
  if (N > 0)
    RTC_LAUNCH(rtc_ln_split_norm_kernel, ns_blocks_(N), 32 * RTC_NS_WARPS, 0, out, mean, rstd,
               x, w, b, (const double *)scratch, N, Cl, C, eps);
}

void rt_layernorm_split_backward_cu(RtMesh *m, RtAxis ax, float *dx, float *dw, float *db,
                                    const float *dout, const float *x, const float *w,
                                    const float *mean, const float *rstd, int N, int Cl, int C,
                                    double *scratch) {
  size_t nx = (size_t)N * Cl, sb = rt_scratch_ln_split_bytes((size_t)N);
  if (rtc_staged()) {
    float *hdx = up_(dx, nx), *hdw = up_(dw, (size_t)Cl), *hdb = up_(db, (size_t)Cl);
    float *hdy = up_(dout, nx), *hx = up_(x, nx), *hw = up_(w, (size_t)Cl);
    float *hm = up_(mean, (size_t)N), *hr = up_(rstd, (size_t)N);
    double *hs = scratch_(sb);
    rt_layernorm_split_backward_f32(m->comm[ax], &m->bytes[ax], hdx, hdw, hdb, hdy, hx, hw, hm,
                                    hr, N, Cl, C, hs);
    down_(dx, hdx, nx), down_(dw, hdw, (size_t)Cl), down_(db, hdb, (size_t)Cl);
    if (dx) scratch_down_(scratch, hs, sb);
    else free(hs);
    free(hdy), free(hx), free(hw), free(hm), free(hr);
    return;
  }
  if (dw || db) rt_layernorm_backward_cu(NULL, dw, db, dout, x, w, mean, rstd, N, Cl);
  if (!dx) return;
  if (N > 0)
    RTC_LAUNCH(rtc_norm_split_dstats_kernel, ns_blocks_(N), 32 * RTC_NS_WARPS, 0, scratch,
               dout, x, w, mean, rstd, N, Cl);
  rtc_allreduce_f64_nocount(m, ax, scratch, 2 * (size_t)N, "rt_layernorm_split_backward_cu");
  m->bytes[ax] += rt_vol_ln_split_bwd((size_t)N, m->size[ax]);
  if (N > 0)
    RTC_LAUNCH(rtc_norm_split_dx_kernel, ns_blocks_(N), 32 * RTC_NS_WARPS, 0, dx, dout, x, w,
               mean, rstd, (const double *)scratch, N, Cl, C);
}

void rt_rmsnorm_split_forward_cu(RtMesh *m, RtAxis ax, float *out, float *rstd, const float *x,
                                 const float *w, int N, int Cl, int C, double eps,
                                 double *scratch) {
  size_t nx = (size_t)N * Cl, sb = rt_scratch_rms_split_bytes((size_t)N);
  if (rtc_staged()) {
    float *hx = up_(x, nx), *hw = up_(w, (size_t)Cl);
    float *ho = alloc_(out, nx), *hr = alloc_(rstd, (size_t)N);
    double *hs = scratch_(sb);
    rt_rmsnorm_split_forward_f32(m->comm[ax], &m->bytes[ax], ho, hr, hx, hw, N, Cl, C, eps, hs);
    down_(out, ho, nx), down_(rstd, hr, (size_t)N);
    scratch_down_(scratch, hs, sb);
    free(hx), free(hw);
    return;
  }
  if (N > 0)
    RTC_LAUNCH(rtc_rms_split_stats_kernel, ns_blocks_(N), 32 * RTC_NS_WARPS, 0, scratch, x, N,
               Cl);
  rtc_allreduce_f64_nocount(m, ax, scratch, (size_t)N, "rt_rmsnorm_split_forward_cu");
  m->bytes[ax] += rt_vol_rms_split_fwd((size_t)N, m->size[ax]);
  if (N > 0)
    RTC_LAUNCH(rtc_rms_split_norm_kernel, ns_blocks_(N), 32 * RTC_NS_WARPS, 0, out, rstd, x, w,
               (const double *)scratch, N, Cl, C, eps);
}

void rt_rmsnorm_split_backward_cu(RtMesh *m, RtAxis ax, float *dx, float *dw, const float *dout,
                                  const float *x, const float *w, const float *rstd, int N,
                                  int Cl, int C, double *scratch) {
  size_t nx = (size_t)N * Cl, sb = rt_scratch_rms_split_bytes((size_t)N);
  if (rtc_staged()) {
    float *hdx = up_(dx, nx), *hdw = up_(dw, (size_t)Cl);
    float *hdy = up_(dout, nx), *hx = up_(x, nx), *hw = up_(w, (size_t)Cl);
    float *hr = up_(rstd, (size_t)N);
    double *hs = scratch_(sb);
    rt_rmsnorm_split_backward_f32(m->comm[ax], &m->bytes[ax], hdx, hdw, hdy, hx, hw, hr, N, Cl,
                                  C, hs);
    down_(dx, hdx, nx), down_(dw, hdw, (size_t)Cl);
    if (dx) scratch_down_(scratch, hs, sb);
    else free(hs);
    free(hdy), free(hx), free(hw), free(hr);
    return;
  }
  if (dw) rt_rmsnorm_backward_cu(NULL, dw, dout, x, w, rstd, N, Cl);
  if (!dx) return;
  if (N > 0)
    RTC_LAUNCH(rtc_norm_split_dstats_kernel, ns_blocks_(N), 32 * RTC_NS_WARPS, 0, scratch,
               dout, x, w, (const float *)NULL, rstd, N, Cl);
  rtc_allreduce_f64_nocount(m, ax, scratch, (size_t)N, "rt_rmsnorm_split_backward_cu");
  m->bytes[ax] += rt_vol_rms_split_bwd((size_t)N, m->size[ax]);
  if (N > 0)
    RTC_LAUNCH(rtc_norm_split_dx_kernel, ns_blocks_(N), 32 * RTC_NS_WARPS, 0, dx, dout, x, w,
               (const float *)NULL, rstd, (const double *)scratch, N, Cl, C);
}

} // extern "C"
