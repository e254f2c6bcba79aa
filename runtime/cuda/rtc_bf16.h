/* rtc_bf16.h — the 16-bit storage type of `precision = bf16` programs.
 *
 * Under precision = bf16 the memory plan stores (passes/precision.c):
 *   - bf16 (rtc_bf16): activations and their gradients (every value the
 *     forward computes from the inputs, and its gradient), the embedding's
 *     and matmuls' outputs, and the bf16 copy of each parameter a matmul
 *     reads (written from the fp32 master by rt_cast_bf16_cu);
 *   - fp32: parameters (the master weights: embeddings, norm weights and
 *     biases read them directly), parameter gradients, optimizer state,
 *     statistics (layernorm mean/rstd, rmsnorm rstd, attention's
 *     log-sum-exp, cross-entropy losses), the loss and its seed;
 *   - i32: tokens and targets.
 * Every kernel reads bf16, computes in fp32 and rounds what it stores to
 * bf16 (to nearest, ties to even).  The launchers of a bf16 program are
 * C++ overloads of rtc.h's fp32 launchers, the same names with rtc_bf16 *
 * where the value is bf16 (rtc.h's bf16 section), so the program printer
 * writes the same call for both precisions.
 *
 * On the GPU rtc_bf16 is cuda_bf16.h's __nv_bfloat16; in the host build
 * (runtime/cuda/host/cuda_host.h) and in C++ that includes rtc.h without
 * nvcc, a 2-byte struct with the same bits.  C sees none of this.
 */
#ifndef RTC_BF16_H
#define RTC_BF16_H

#ifdef __cplusplus
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) && !defined(RTC_HOST)
#include <cuda_bf16.h>
#define RTC_BF16_FN __host__ __device__ __forceinline__
typedef __nv_bfloat16 rtc_bf16;
RTC_BF16_FN float rtc_bf2f(rtc_bf16 x) { return __bfloat162float(x); }
RTC_BF16_FN rtc_bf16 rtc_f2bf(float x) { return __float2bfloat16_rn(x); }
#else
#define RTC_BF16_FN static inline
/* The bits of a bf16: the top half of an IEEE float. */
struct rtc_bf16 {
  uint16_t bits;
};
RTC_BF16_FN float rtc_bf2f(rtc_bf16 x) {
  uint32_t u = (uint32_t)x.bits << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* Round to nearest, ties to even; NaN stays a (quiet) NaN. */
RTC_BF16_FN rtc_bf16 rtc_f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  rtc_bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.bits = (uint16_t)((u >> 16) | 0x40u);
    return r;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.bits = (uint16_t)(u >> 16);
  return r;
}
#endif

/* x rounded to bf16 and back: what a bf16 store keeps of x. */
RTC_BF16_FN float rtc_bf16_round(float x) { return rtc_bf2f(rtc_f2bf(x)); }

#endif /* __cplusplus */
#endif
