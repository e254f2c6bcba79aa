/* rtc.h — the CUDA kernels' launchers, called by programs that
 * `shardc build --target cuda` writes and by the CUDA half of the training
 * driver.  One launcher per cpu kernel of shardrt_kernels.h, with the same
 * name, arguments and meaning, the suffix _cu instead of _f32: every pointer
 * is a device pointer (elements f32), every launch goes on rtc_stream.
 * Where the cpu kernel returns a value to the host (a loss, a sum of
 * squares), the launcher synchronizes the stream to read it.
 *
 * The kernels are one .cu file per family (runtime/cuda/k_*.cu, llm.c's
 * one-file-per-layer layout); each file is built twice: by nvcc for the
 * GPU (libshardrt_cuda) and, through runtime/cuda/host/cuda_host.h, by the
 * host C++ compiler (libshardrt_cuda_host), so that CI without a GPU runs
 * the same kernel code (blocks in turn, a block's threads as fibers).
 */
#ifndef RTC_H
#define RTC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef RTC_STREAM_T_DEFINED
#define RTC_STREAM_T_DEFINED
typedef struct CUstream_st *rtc_stream_t;
#endif
/* The stream every launcher uses (set by the driver; 0: the legacy default). */
extern rtc_stream_t rtc_stream;
/* Set by the driver under precision = bf16: what the fp32 launchers' GEMMs
 * do with fp32 buffers (a bf16 program's activations are bf16 and go
 * through the bf16 overloads below; the calibrator times both): run on
 * bf16 tensor cores, their fp32 inputs rounded to bf16, with fp32
 * accumulation and output (cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16BF; the
 * host build rounds the inputs itself).  0: fp32 with TF32 off, for
 * checking against the cpu target. */
extern int rtc_gemm_bf16;

/* Whether a capture of rtc_stream is open (rtc_capture_begin, rtc_train.h):
 * launchers that would read a result back leave it on the device then. */
int rtc_capturing(void);
/* *dev = value, by a one-thread kernel on rtc_stream (capturable, unlike
 * rtc_set_f32); *dst = (double)*src likewise. */
void rtc_store_f32(float *dev, float value);
void rtc_widen_f32(double *dst, const float *src);

/* ---- matmul (k_matmul.cu): cuBLASLt, fp32 with TF32 off (host: cblas) ---- */
void rt_matmul_forward_cu(float *out, const float *inp, const float *weight, const float *bias,
                          int N, int C, int OC);
void rt_matmul_backward_cu(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, int N, int C, int OC);
/* A matmul, its bias and a GELU after it as one call (codegen/cuda.c pairs
 * the two instructions): act = gelu(pre), pre = inp·weightᵀ + bias, both
 * written; and the backward of the matmul after the GELU with the GELU's:
 * dpre = gelu'(pre) ⊙ dout·weight (written over zeros; dinp, zeros, is the
 * fallback's scratch), dweight and dbias += as rt_matmul_backward_cu.  The
 * bf16 overloads run them as cuBLASLt epilogues where it has them. */
void rt_matmul_forward_gelu_cu(float *act, float *pre, const float *inp, const float *weight,
                               const float *bias, int N, int C, int OC);
void rt_matmul_backward_dgelu_cu(float *dpre, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *weight,
                                 const float *pre, int N, int C, int OC);
/* Row-major c (M,N, ldc) = alpha·op(a)·op(b) + beta·c, as rt_gemm_f32. */
void rt_gemm_cu(int trans_a, int trans_b, int M, int N, int K, double alpha, const float *a,
                int lda, const float *b, int ldb, double beta, float *c, int ldc);

/* ---- normalization (k_norm.cu) ---- */
void rt_layernorm_forward_cu(float *out, float *mean, float *rstd, const float *inp,
                             const float *weight, const float *bias, int N, int C);
void rt_layernorm_forward_eps_cu(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int N, int C,
                                 double eps);
void rt_layernorm_backward_cu(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, const float *mean,
                              const float *rstd, int N, int C);
void rt_rmsnorm_forward_cu(float *out, float *rstd, const float *inp, const float *weight,
                           int N, int C, double eps);
void rt_rmsnorm_backward_cu(float *dinp, float *dweight, const float *dout, const float *inp,
                            const float *weight, const float *rstd, int N, int C);

/* ---- activations, softmax, dropout, elementwise (k_act.cu) ---- */
void rt_gelu_forward_cu(float *out, const float *inp, size_t n);
void rt_gelu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n);
void rt_relu_forward_cu(float *out, const float *inp, size_t n);
void rt_relu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n);
void rt_silu_forward_cu(float *out, const float *inp, size_t n);
void rt_silu_backward_cu(float *dinp, const float *inp, const float *dout, size_t n);
void rt_swiglu_forward_cu(float *out, const float *a, const float *b, int N, int C, int ld);
void rt_swiglu_backward_cu(float *da, float *db, const float *dout, const float *a,
                           const float *b, int N, int C, int ld);
void rt_softmax_forward_cu(float *out, const float *inp, int N, int C);
void rt_softmax_backward_cu(float *dinp, const float *dout, const float *out, int N, int C);
void rt_dropout_forward_cu(float *out, const float *inp, size_t n, double p, uint64_t seed,
                           uint64_t step, uint64_t offset);
void rt_dropout_backward_cu(float *dinp, const float *dout, size_t n, double p, uint64_t seed,
                            uint64_t step, uint64_t offset);
void rt_add_forward_cu(float *out, const float *a, const float *b, size_t n);
void rt_axpy_cu(float *dst, const float *src, double alpha, size_t n);
void rt_scale_cu(float *x, size_t n, double s);
void rt_slice_cols_forward_cu(float *out, const float *inp, int N, int C, int c0, int W);
void rt_slice_cols_backward_cu(float *dinp, const float *dout, int N, int C, int c0, int W);
/* dst += src (rt_acc_f32). */
void rt_acc_cu(float *dst, const float *src, size_t n);
/* As rt_chunk_copy / rt_chunk_acc_f32 (rt_train.h). */
void rt_chunk_copy_cu(void *dst, const void *src, size_t outer, size_t inner, int P, int r,
                      int esize);
void rt_chunk_acc_cu(float *dst, const float *src, size_t outer, size_t inner, int P, int r);

/* ---- embeddings, positions, rotary (k_embed.cu) ---- */
/* Tokens are checked on the host when the batch is loaded; out-of-range
 * tokens give zero rows here.  Returns 0 (RT_OK). */
int rt_embedding_forward_cu(float *out, const int32_t *tokens, const float *wte, int N, int V,
                            int C);
/* Deterministic: each column of dwte sums its rows in token order. */
void rt_embedding_backward_cu(float *dwte, const float *dout, const int32_t *tokens, int N,
                              int C);
int rt_embedding_range_forward_cu(float *out, const int32_t *tokens, const float *table, int N,
                                  int v0, int Vl, int C, int V);
void rt_embedding_range_backward_cu(float *dtable, const float *dout, const int32_t *tokens,
                                    int N, int v0, int Vl, int C);
void rt_positional_forward_cu(float *out, const float *inp, const float *wpe, int B, int T,
                              int C, int t0);
void rt_positional_backward_cu(float *dinp, float *dwpe, const float *dout, int B, int T, int C,
                               int t0);
void rt_rope_forward_cu(float *out, const float *inp, int B, int T, int H, int D, double theta,
                        int t0);
void rt_rope_backward_cu(float *dinp, const float *dout, int B, int T, int H, int D,
                         double theta, int t0);

/* ---- attention (k_attention.cu): one fused tiled kernel each way ---- */
void rt_attention_forward_cu(float *out, float *lse, const float *q, const float *k,
                             const float *v, int B, int T, int H, int Hkv, int D, int causal);
void rt_attention_backward_cu(float *dq, float *dk, float *dv, const float *dout,
                              const float *q, const float *k, const float *v, const float *out,
                              const float *lse, int B, int T, int H, int Hkv, int D, int causal);

/* ---- loss (k_loss.cu) ---- */
/* *loss, *n_valid on the host (the launcher synchronizes); losses and lse
 * are device buffers or NULL.  RT_ERR_ARG (with rt_last_error) for a
 * target outside [0,V) other than RT_IGNORE_INDEX. */
int rt_crossentropy_forward_cu(double *loss, int *n_valid, float *losses, float *lse,
                               const float *logits, const int32_t *targets, int N, int V);
/* The same for one call site of a program, whose result stays on the device
 * (so that a step can be captured as a graph): `loss` (the site's host
 * slot) is also its key; y (device, or NULL) gets (float) of the loss.
 * Outside a capture *loss and *n_valid are read back and a bad target is
 * reported as above; during one they are left alone (the data was checked
 * when loaded). */
int rt_crossentropy_forward_site_cu(double *loss, int *n_valid, float *y, float *losses,
                                    float *lse, const float *logits, const int32_t *targets,
                                    int N, int V);
/* The site's mean loss (device double): what the driver reads after a replay. */
const double *rt_crossentropy_site_loss_cu(const double *loss);
/* The backward of a site: dloss is the seed (device), the norm the site's
 * row count on the device; acc as the _acc variant. */
void rt_crossentropy_backward_site_cu(float *dlogits, const float *logits, const float *lse,
                                      const int32_t *targets, int N, int V, const float *dloss,
                                      const double *site, int acc);
void rt_crossentropy_backward_cu(float *dlogits, const float *logits, const float *lse,
                                 const int32_t *targets, int N, int V, double dloss,
                                 double norm);
void rt_crossentropy_backward_acc_cu(float *dlogits, const float *logits, const float *lse,
                                     const int32_t *targets, int N, int V, double dloss,
                                     double norm);
/* The site's forward and backward on rows ld apart whose first V columns
 * are the classes (a vocabulary padded for aligned rows,
 * `cross_entropy(..., classes = V)`): the rest count for nothing, and the
 * backward writes them 0 (acc: leaves them). */
int rt_crossentropy_forward_site_ld_cu(double *loss, int *n_valid, float *y, float *losses,
                                       float *lse, const float *logits, const int32_t *targets,
                                       int N, int V, int ld);
void rt_crossentropy_backward_site_ld_cu(float *dlogits, const float *logits, const float *lse,
                                         const int32_t *targets, int N, int V, int ld,
                                         const float *dloss, const double *site, int acc);

/* ---- optimizers and norms (k_optim.cu): multi-tensor over flat ranges ---- */
void rt_adamw_step_cu(float *param, const float *grad, float *m, float *v, size_t n, double lr,
                      double beta1, double beta2, double eps, double weight_decay, long t,
                      double grad_scale);
void rt_sgd_step_cu(float *param, const float *grad, float *mom, size_t n, double lr,
                    double momentum, double weight_decay, double grad_scale);
/* Σ x² in double (the launcher synchronizes). */
double rt_sumsq_cu(const float *x, size_t n);
double rt_sumsq_list_cu(const float *const *bufs, const size_t *ns, int count);
/* The same into *out (device), no synchronization (capturable); the list's
 * table is uploaded only when it changed, which must not happen during a
 * capture. */
void rt_sumsq_dev_cu(double *out, const float *x, size_t n);
void rt_sumsq_list_dev_cu(double *out, const float *const *bufs, const size_t *ns, int count);

/* ---- the step's weight casts (k_act.cu; precision = bf16) ---- */
/* One cast of a table: n elements of the fp32 master at byte src of the
 * arena rounded (as rt_cast_bf16_cu) into its bf16 copy at byte dst. */
typedef struct RtcCastSeg {
  int64_t src, dst, n;
} RtcCastSeg;
/* Every cast of segs[0..count) as one launch (a multi-tensor kernel).  segs
 * is a table the caller keeps unchanged for the process (a program's
 * static): the first call with it copies it to device memory kept for the
 * process (not while capturing: rtc_fail), later calls reuse that copy. */
void rt_cast_bf16_multi_cu(unsigned char *arena, const RtcCastSeg *segs, int count);

#ifdef __cplusplus
}
#endif

/* ---- precision = bf16 storage (rtc_bf16.h) ----
 * C++ overloads of the launchers above: the same name, rtc_bf16 * for each
 * activation or activation gradient (and a matmul's weight, its bf16
 * copy), the other pointers as above (parameters, parameter gradients,
 * statistics, losses fp32; tokens i32).  The kernels compute in fp32. */
#ifdef __cplusplus
#include "rtc_bf16.h"

/* out = bf16(in): the bf16 copy of a parameter, before the matmuls read it. */
void rt_cast_bf16_cu(rtc_bf16 *out, const float *in, size_t n);

/* -- k_norm, k_act, k_embed, k_loss, rtc_normsplit, the vocab-parallel
 *    cross-entropy -- */
/* out = float(in): a bf16 tensor widened (the driver, tests). */
void rt_widen_bf16_cu(float *out, const rtc_bf16 *in, size_t n);

/* normalization (k_norm.cu): weight, bias, dweight, dbias, mean, rstd fp32 */
void rt_layernorm_forward_cu(rtc_bf16 *out, float *mean, float *rstd, const rtc_bf16 *inp,
                             const float *weight, const float *bias, int N, int C);
void rt_layernorm_forward_eps_cu(rtc_bf16 *out, float *mean, float *rstd, const rtc_bf16 *inp,
                                 const float *weight, const float *bias, int N, int C,
                                 double eps);
void rt_layernorm_backward_cu(rtc_bf16 *dinp, float *dweight, float *dbias,
                              const rtc_bf16 *dout, const rtc_bf16 *inp, const float *weight,
                              const float *mean, const float *rstd, int N, int C);
void rt_rmsnorm_forward_cu(rtc_bf16 *out, float *rstd, const rtc_bf16 *inp, const float *weight,
                           int N, int C, double eps);
void rt_rmsnorm_backward_cu(rtc_bf16 *dinp, float *dweight, const rtc_bf16 *dout,
                            const rtc_bf16 *inp, const float *weight, const float *rstd, int N,
                            int C);

/* activations, softmax, dropout (the fp32 launcher's mask), elementwise (k_act.cu) */
void rt_gelu_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, size_t n);
void rt_gelu_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *inp, const rtc_bf16 *dout, size_t n);
void rt_relu_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, size_t n);
void rt_relu_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *inp, const rtc_bf16 *dout, size_t n);
void rt_silu_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, size_t n);
void rt_silu_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *inp, const rtc_bf16 *dout, size_t n);
void rt_swiglu_forward_cu(rtc_bf16 *out, const rtc_bf16 *a, const rtc_bf16 *b, int N, int C,
                          int ld);
void rt_swiglu_backward_cu(rtc_bf16 *da, rtc_bf16 *db, const rtc_bf16 *dout, const rtc_bf16 *a,
                           const rtc_bf16 *b, int N, int C, int ld);
void rt_softmax_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, int N, int C);
void rt_softmax_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *dout, const rtc_bf16 *out, int N,
                            int C);
void rt_dropout_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, size_t n, double p, uint64_t seed,
                           uint64_t step, uint64_t offset);
void rt_dropout_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *dout, size_t n, double p,
                            uint64_t seed, uint64_t step, uint64_t offset);
void rt_add_forward_cu(rtc_bf16 *out, const rtc_bf16 *a, const rtc_bf16 *b, size_t n);
void rt_axpy_cu(rtc_bf16 *dst, const rtc_bf16 *src, double alpha, size_t n);
void rt_scale_cu(rtc_bf16 *x, size_t n, double s);
void rt_slice_cols_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, int N, int C, int c0, int W);
void rt_slice_cols_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *dout, int N, int C, int c0,
                               int W);
void rt_acc_cu(rtc_bf16 *dst, const rtc_bf16 *src, size_t n);
/* (rt_chunk_copy_cu copies bf16 with esize 2.) */
void rt_chunk_acc_cu(rtc_bf16 *dst, const rtc_bf16 *src, size_t outer, size_t inner, int P,
                     int r);

/* embeddings (k_embed.cu): the tables wte, wpe and their gradients fp32 */
int rt_embedding_forward_cu(rtc_bf16 *out, const int32_t *tokens, const float *wte, int N, int V,
                            int C);
void rt_embedding_backward_cu(float *dwte, const rtc_bf16 *dout, const int32_t *tokens, int N,
                              int C);
int rt_embedding_range_forward_cu(rtc_bf16 *out, const int32_t *tokens, const float *table,
                                  int N, int v0, int Vl, int C, int V);
void rt_embedding_range_backward_cu(float *dtable, const rtc_bf16 *dout, const int32_t *tokens,
                                    int N, int v0, int Vl, int C);
void rt_positional_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, const float *wpe, int B, int T,
                              int C, int t0);
void rt_positional_backward_cu(rtc_bf16 *dinp, float *dwpe, const rtc_bf16 *dout, int B, int T,
                               int C, int t0);
void rt_rope_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, int B, int T, int H, int D,
                        double theta, int t0);
void rt_rope_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *dout, int B, int T, int H, int D,
                         double theta, int t0);

/* loss (k_loss.cu): logits and dlogits bf16; losses, lse, y, the loss fp32/double */
int rt_crossentropy_forward_cu(double *loss, int *n_valid, float *losses, float *lse,
                               const rtc_bf16 *logits, const int32_t *targets, int N, int V);
int rt_crossentropy_forward_site_cu(double *loss, int *n_valid, float *y, float *losses,
                                    float *lse, const rtc_bf16 *logits, const int32_t *targets,
                                    int N, int V);
void rt_crossentropy_backward_site_cu(rtc_bf16 *dlogits, const rtc_bf16 *logits, const float *lse,
                                      const int32_t *targets, int N, int V, const float *dloss,
                                      const double *site, int acc);
void rt_crossentropy_backward_cu(rtc_bf16 *dlogits, const rtc_bf16 *logits, const float *lse,
                                 const int32_t *targets, int N, int V, double dloss,
                                 double norm);
void rt_crossentropy_backward_acc_cu(rtc_bf16 *dlogits, const rtc_bf16 *logits, const float *lse,
                                     const int32_t *targets, int N, int V, double dloss,
                                     double norm);
int rt_crossentropy_forward_site_ld_cu(double *loss, int *n_valid, float *y, float *losses,
                                       float *lse, const rtc_bf16 *logits,
                                       const int32_t *targets, int N, int V, int ld);
void rt_crossentropy_backward_site_ld_cu(rtc_bf16 *dlogits, const rtc_bf16 *logits,
                                         const float *lse, const int32_t *targets, int N, int V,
                                         int ld, const float *dloss, const double *site, int acc);
/* (rtc_normsplit's and the vocab-parallel cross-entropy's: rtc_train.h) */

/* -- k_matmul, k_attention, rtc_summa, rtc_dist's collectives -- */

/* out (N,OC) = inp (N,C)·weight (OC,C)ᵀ [+ bias (OC), fp32], WRITTEN: bf16
 * tensor cores, fp32 accumulation, the bias (rounded to bf16: cuBLASLt's
 * epilogue) added to the fp32 product, which is rounded once. */
void rt_matmul_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, const rtc_bf16 *weight,
                          const float *bias, int N, int C, int OC);
/* dinp (N,C) bf16, dweight (OC,C) and dbias (OC) fp32: each ACCUMULATED,
 * or NULL; dbias summed in fp32 in a fixed order. */
void rt_matmul_backward_cu(rtc_bf16 *dinp, float *dweight, float *dbias, const rtc_bf16 *dout,
                           const rtc_bf16 *inp, const rtc_bf16 *weight, int N, int C, int OC);
void rt_matmul_forward_gelu_cu(rtc_bf16 *act, rtc_bf16 *pre, const rtc_bf16 *inp,
                               const rtc_bf16 *weight, const float *bias, int N, int C, int OC);
void rt_matmul_backward_dgelu_cu(rtc_bf16 *dpre, rtc_bf16 *dinp, float *dweight, float *dbias,
                                 const rtc_bf16 *dout, const rtc_bf16 *inp,
                                 const rtc_bf16 *weight, const rtc_bf16 *pre, int N, int C,
                                 int OC);
/* An LM head whose weight copy has OC rows padded from the master's rows
 * (passes/precision.c): dinp over all OC (the pad rows of weight and the
 * pad columns of dout are zero), dweight (rows, C) += dout[:, :rows]ᵀ·inp,
 * dout's rows OC apart; no bias. */
void rt_matmul_backward_rows_cu(rtc_bf16 *dinp, float *dweight, const rtc_bf16 *dout,
                                const rtc_bf16 *inp, const rtc_bf16 *weight, int N, int C, int OC,
                                int rows);
/* rt_gemm_cu on bf16 a and b, c bf16 or fp32 (read for beta, rounded once);
 * used by rtc_summa.cu. */
void rt_gemm_cu(int trans_a, int trans_b, int M, int N, int K, double alpha, const rtc_bf16 *a,
                int lda, const rtc_bf16 *b, int ldb, double beta, rtc_bf16 *c, int ldc);
void rt_gemm_cu(int trans_a, int trans_b, int M, int N, int K, double alpha, const rtc_bf16 *a,
                int lda, const rtc_bf16 *b, int ldb, double beta, float *c, int ldc);

/* Attention on bf16 q, k, v, out and gradients (lse fp32), computed in fp32
 * as the fp32 kernels; out WRITTEN, dq, dk, dv ACCUMULATED (read as bf16,
 * rounded once) or NULL. */
void rt_attention_forward_cu(rtc_bf16 *out, float *lse, const rtc_bf16 *q, const rtc_bf16 *k,
                             const rtc_bf16 *v, int B, int T, int H, int Hkv, int D, int causal);
void rt_attention_backward_cu(rtc_bf16 *dq, rtc_bf16 *dk, rtc_bf16 *dv, const rtc_bf16 *dout,
                              const rtc_bf16 *q, const rtc_bf16 *k, const rtc_bf16 *v,
                              const rtc_bf16 *out, const float *lse, int B, int T, int H,
                              int Hkv, int D, int causal);
/* The same on bf16 q, k, v, dout, out with fp32 results: out WRITTEN,
 * dq, dk, dv ACCUMULATED unrounded (ring attention's blocks, rtc_ring.cu). */
void rt_attention_forward_cu(float *out, float *lse, const rtc_bf16 *q, const rtc_bf16 *k,
                             const rtc_bf16 *v, int B, int T, int H, int Hkv, int D, int causal);
void rt_attention_backward_cu(float *dq, float *dk, float *dv, const rtc_bf16 *dout,
                              const rtc_bf16 *q, const rtc_bf16 *k, const rtc_bf16 *v,
                              const rtc_bf16 *out, const float *lse, int B, int T, int H,
                              int Hkv, int D, int causal);

#endif
#endif
