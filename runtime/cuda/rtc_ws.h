/* rtc_ws.h — the scratch the CUDA launchers use within one call (cuBLASLt's
 * workspace and the bias gradient's partial sums, attention's backward
 * delta, the norms' weight-gradient partials, the cross-entropy's per-row
 * losses, bf16 ring attention's fp32 sums, the embedding backward's token
 * lists).  Every use lies
 * inside one launcher call, in stream order, so one region serves them
 * all: the compiler (codegen/cuda.c) sizes it for a program as the largest
 * need of its kernel instructions, by these formulas, and the driver takes
 * it from the same cudaMalloc as the arena (runtime/train.c, after the
 * arena; rtc_ws_attach), so the memory check before the first step covers
 * it.  A launcher called without an attached region (the kernels' own
 * tests) allocates its scratch on first use.
 * Plain C: the compiler includes it. */
#ifndef SHARDC_RTC_WS_H
#define SHARDC_RTC_WS_H

#include <stddef.h>
#include <stdint.h>

#define RTC_MM_WS_BYTES ((size_t)32 << 20) /* cuBLAS recommends 32 MiB on Hopper */
#define RTC_MM_BIAS_BYTES ((size_t)256 << 10) /* after it: a bf16 GEMM's bias in bf16 (128K features) */
#define RTC_NORM_ROWS 32                   /* rows per partial sum of the norms' weight grads */
#define RTC_CE_RESULT_BYTES 64             /* >= sizeof the cross-entropy's result (k_loss.cu) */
#define RTC_WS_ALIGN 256

static inline size_t rtc_ws_round(size_t b) { return (b + RTC_WS_ALIGN - 1) / RTC_WS_ALIGN * RTC_WS_ALIGN; }

/* a GEMM (cuBLASLt's workspace, the bias gradient's partials fit in it;
 * then a bf16 copy of the bias its epilogue adds) */
static inline size_t rtc_ws_matmul(void) { return RTC_MM_WS_BYTES + RTC_MM_BIAS_BYTES; }
/* attention's backward: delta, one float per (batch, head, query) */
static inline size_t rtc_ws_attention_bwd(int64_t B, int64_t T, int64_t H) {
  return rtc_ws_round((size_t)(B * T * H) * sizeof(float));
}
/* a norm's weight (and bias) gradient over N rows of C channels: two
 * partial sums per chunk of RTC_NORM_ROWS rows and channel */
static inline size_t rtc_ws_norm_params(int64_t N, int64_t C) {
  return rtc_ws_round(2 * (size_t)((N + RTC_NORM_ROWS - 1) / RTC_NORM_ROWS) * (size_t)C * sizeof(float));
}
/* the cross-entropy's forward over N rows: per-row losses, then a result */
static inline size_t rtc_ws_cross_entropy(int64_t N) {
  return rtc_ws_round((size_t)N * sizeof(double)) + RTC_CE_RESULT_BYTES;
}

/* the embedding backward over N rows: a count and a start per token bucket,
 * then each row's index and token listed by bucket (k_embed.cu) */
#define RTC_EMB_BUCKETS 512
static inline size_t rtc_ws_embedding_bwd(int64_t N) {
  return rtc_ws_round(sizeof(int) * (2 * RTC_EMB_BUCKETS + 1)) + rtc_ws_round(2 * (size_t)N * sizeof(int));
}

/* ring attention (rtc_ring.cu) over sequence shards of Tl tokens; on bf16
 * activations its sums are fp32 here (fp32 activations: in the arena's
 * scratch).  Forward: the running output and a block's output (B,Tl,H,D),
 * a block's lse (B,H,Tl).  Backward: attention's delta, then dq's sum
 * (B,Tl,H,D) and two (dK, dV) buffers of kv = B·Tl·Hkv·D each. */
static inline size_t rtc_ws_ring_fwd(int64_t B, int64_t Tl, int64_t H, int64_t D, int bf16) {
  if (!bf16) return 0;
  return 2 * rtc_ws_round((size_t)(B * Tl * H * D) * sizeof(float)) +
         rtc_ws_round((size_t)(B * H * Tl) * sizeof(float));
}
static inline size_t rtc_ws_ring_bwd(int64_t B, int64_t Tl, int64_t H, int64_t Hkv, int64_t D,
                                     int bf16) {
  size_t w = rtc_ws_attention_bwd(B, Tl, H);
  if (!bf16) return w;
  return w + rtc_ws_round((size_t)(B * Tl * H * D) * sizeof(float)) +
         rtc_ws_round((size_t)(4 * B * Tl * Hkv * D) * sizeof(float));
}

#ifdef __cplusplus
extern "C" {
#endif
/* The driver's region for a program (NULL, 0: none; launchers allocate). */
void rtc_ws_attach(void *base, size_t bytes);
#ifdef __cplusplus
}
#endif

#endif
