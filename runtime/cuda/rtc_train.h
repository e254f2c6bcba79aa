/* rtc_train.h — what the CUDA half of the runtime gives the training
 * driver (runtime/train.c built with RT_TRAIN_CUDA) and generated programs:
 * the device and its arena, transfers, scalars, and the collectives over
 * the mesh axes (NCCL; in the host build of runtime/cuda, MPI through
 * host/nccl_host.h).  Plain C; implemented in rtc_mem.cu and rtc_dist.cu,
 * which are built by nvcc (libshardrt_cuda) and by the host C++ compiler
 * (libshardrt_cuda_host).
 *
 * Every function either succeeds or ends the job through rtc_fail with
 * file:line, the failed call and a hint; those that return int report
 * what the caller can say cleanly (RT_ERR_* with rt_last_error()).
 */
#ifndef RTC_TRAIN_H
#define RTC_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dist_axes.h"
#include "gemm_algos.h"
#include "rtc_slots.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the device (rtc_mem.cu) ---- */

/* Picks this rank's GPU: the launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK,
 * SLURM_LOCALID, MPI_LOCALRANKID) modulo the devices, creates the compute
 * stream (rtc_stream), the communication stream (gradient buckets, ZeRO-3
 * gathers) and the tensor/sequence-parallel one.  RT_ERR_ARG when there
 * is no device; *name gets the device's name. */
int rtc_device_init(int world_rank, const char **name);
/* The arena (bytes) and after it the launchers' scratch (ws bytes,
 * rtc_ws.h, attached for them): one allocation on the device, after
 * checking the device's free memory (RT_ERR_NOMEM: "the plan needs N bytes
 * per rank (A arena + W kernel workspace), the GPU has F free of T"). */
int rtc_arena_alloc(size_t bytes, size_t ws, unsigned char **dev);
void rtc_arena_free(unsigned char *dev);
/* On the compute stream, in order with the kernels. */
void rtc_memset(void *dst, int value, size_t bytes);
void rtc_copy(void *dst, const void *src, size_t bytes);
/* Synchronous transfers between the arena and host memory. */
void rtc_to_host(void *host, const void *dev, size_t bytes);
void rtc_to_device(void *dev, const void *host, size_t bytes);
/* A scalar buffer read or written by host code (synchronous). */
float rtc_get_f32(const void *dev);
void rtc_set_f32(void *dev, float value);
/* Waits for the compute stream. */
void rtc_sync(void);
/* Memory outside the arena, kept for the run: device memory, and pinned
 * host memory (the source of copies a graph replays). */
void *rtc_dev_alloc(size_t bytes);
void *rtc_pinned_alloc(size_t bytes);
void rtc_dev_free(void *dev);
void rtc_pinned_free(void *host);
/* dev <- pinned host memory, on the compute stream without waiting (in a
 * graph the copy reads the host memory when replayed). */
void rtc_upload(void *dev, const void *pinned, size_t bytes);
/* dst (pinned host memory) <- dev, on the compute stream without waiting. */
void rtc_download(void *pinned, const void *dev, size_t bytes);

/* A forward's loss (the training driver, train.c): its cross-entropy site's
 * (rt_crossentropy_forward_site_cu's host slot), or a device float; read
 * now, or while the step is captured left on the device for the driver. */
struct RtPass;
double rtc_pass_loss(struct RtPass *p, const double *site);
double rtc_pass_loss_f32(struct RtPass *p, const float *dev);

/* ---- CUDA graphs (rtc_mem.cu): the compute stream's work between
 * rtc_capture_begin and rtc_capture_end (kernels, copies, collectives, the
 * communication stream's buckets joined back) is recorded, not run; a
 * graph replays it on the compute stream. ---- */
typedef struct RtcGraph RtcGraph;
void rtc_capture_begin(void);
RtcGraph *rtc_capture_end(void);
void rtc_graph_launch(RtcGraph *g);
void rtc_graph_free(RtcGraph *g);

/* ---- GEMM algorithms (k_matmul.cu; gemm_algos.h): cuBLASLt's heuristic
 * ranks algorithms by a model; timing its candidates on the device finds a
 * faster one for most shapes.  The training driver (train.c) turns timing
 * on, agrees the choices over the ranks after the first step and keeps
 * them in a file; the host build has one algorithm and chooses nothing. ---- */
/* on: each GEMM shape's first call (not while a graph is captured) times up
 * to 8 of the heuristic's candidates on its operands; known: shapes not to
 * time (the caller's table, kept until the run ends).  The calls keep the
 * heuristic's first until rtc_gemm_adopt, or with known_now (a resumed
 * run) run a known shape's choice from its first call. */
void rtc_gemm_tune(int on, const RtGemmTable *known, int known_now);
/* Every shape planned so far into t (emptied first) with its choice: the
 * known one, the fastest timed, or the heuristic's first; returns t->n. */
int rtc_gemm_choices(RtGemmTable *t);
/* From now on each planned shape with a choice in t runs it (one that
 * cuBLASLt's check refuses keeps the current); returns how many changed. */
int rtc_gemm_adopt(const RtGemmTable *t);
/* cuBLASLt's version (cublasLtGetVersion), 0 in the host build. */
long rtc_gemm_lib_version(void);

/* ---- the kernel profile (rtc_prof.cu; SHARDC_PROFILE): rtc_prof_on
 * (common.cuh) times every launch; reset drops what was timed so far
 * (warm-up); report prints device time per step by family and kernel ---- */
extern int rtc_prof_on;
void rtc_prof_reset(void);
void rtc_prof_report(FILE *f, long steps);

/* ---- collectives (rtc_dist.cu): the semantics and byte counts of
 * dist.h's rt_allreduce, rt_allgather_dim, rt_reduce_scatter_dim,
 * rt_reduce_scatter_acc on f32 device buffers ---- */
struct RtMesh;
/* One NCCL communicator per mesh axis, split from a world communicator
 * whose unique id rank 0 broadcasts over MPI.  With staged (mpi) set, no
 * NCCL: every collective copies its buffer to the host, runs the MPI layer
 * there and copies back (several ranks sharing a GPU, where NCCL refuses). */
int rtc_mesh_init(struct RtMesh *m, int staged);
void rtc_mesh_free(void);
void rtc_allreduce(struct RtMesh *m, RtAxis ax, float *buf, size_t n);
/* A linear backward's input gradient x (n) all-reduced into y (may be x)
 * beside its dW GEMM: started after the compute work issued so far on a
 * stream of its own; rtc_tp_join makes the compute stream wait for it (one
 * at a time).  The bytes counted as rtc_allreduce's; staged (mpi): done at
 * once.  Between rtc_tp_begin and rtc_tp_end the collectives of this file
 * (Megatron-SP's reduce-scatter of dX) run on that stream the same way,
 * joined by rtc_tp_join. */
void rtc_allreduce_start(struct RtMesh *m, RtAxis ax, float *y, const float *x, size_t n);
void rtc_tp_begin(void);
void rtc_tp_end(void);
void rtc_tp_join(void);
void rtc_allgather_dim(struct RtMesh *m, RtAxis ax, float *dst, const float *src, size_t outer,
                       size_t inner, float *scratch);
void rtc_reduce_scatter_dim(struct RtMesh *m, RtAxis ax, float *dst, const float *src,
                            size_t outer, size_t inner, float *scratch);
void rtc_reduce_scatter_acc(struct RtMesh *m, RtAxis ax, float *dst, const float *src,
                            size_t inner, float *scratch);
/* The same, trailing (ir/rankprog.h PInstr.trail: ZeRO-2/3 under bf16):
 * first finishes the one before (rtc_reduce_scatter_finish), then starts
 * the reduce-scatter of src into scratch on the communication stream once
 * the compute stream's work so far is done, and returns; finishing it makes
 * the compute stream wait for it and adds scratch into dst there (the same
 * arithmetic as rtc_reduce_scatter_acc, in the same order).  The program's
 * memory plan keeps src and scratch live until then.  Staged: blocking. */
void rtc_reduce_scatter_trail(struct RtMesh *m, RtAxis ax, float *dst, const float *src,
                              size_t inner, float *scratch);
void rtc_reduce_scatter_finish(void);
/* Gradient buckets overlapped with the backward: started on the
 * communication stream once the compute stream's work so far is done
 * (an event); rtc_bucket_wait makes the compute stream wait for all. */
void rtc_bucket_allreduce(struct RtMesh *m, RtAxis ax, float *buf, size_t n);
void rtc_bucket_reduce_scatter(struct RtMesh *m, RtAxis ax, float *dst, const float *src,
                               size_t n);
void rtc_bucket_wait(void);
/* ZeRO-3's parameter gathers one layer ahead (ir/rankprog.h PInstr.ahead):
 * rtc_allgather_dim's gather of n elements a rank into dst, started on the
 * communication stream once the compute stream's work so far is done (the
 * buffer dst is free by then), its end recorded in slot's event;
 * rtc_gather_wait(slot) makes the compute stream wait for it before the
 * first kernel that reads dst.  Staged: blocking (the wait does nothing).
 * The blocking reduce-scatters (rtc_reduce_scatter_acc) run on the same
 * stream, so that every collective of the data axis keeps issue order. */
void rtc_allgather_ahead(struct RtMesh *m, RtAxis ax, float *dst, const float *src, size_t n,
                         int slot);
void rtc_gather_wait(int slot);
/* ZeRO-1/2 with the masters sharded: the cast block's gathers of the
 * buckets' copies at the step's start (ir/rankprog.h PInstr.early): as
 * rtc_allgather_ahead, numbered 0, 1, ... in the order the step issues
 * them (one event each, created in the eager first step);
 * rtc_gather_early_wait(k) makes the compute stream wait for gathers 0..k
 * (on one stream in that order: the event of k) the first time it is
 * called in a step, nothing after.  Staged: blocking. */
void rtc_allgather_early(struct RtMesh *m, RtAxis ax, float *dst, const float *src, size_t n,
                         int k);
void rtc_gather_early_wait(int k);

/* ---- the vocab-parallel cross-entropy (rtc_vpce.cu): dist.h's
 * rt_vp_crossentropy_forward_f32 / _backward_acc_f32 on device buffers,
 * with their semantics, errors and byte and call counts: logits (N,Vl) =
 * columns [v0, v0+Vl) of the (N,Vl·P) logits whose first V are the classes,
 * targets (N) global ids, scratch
 * rt_scratch_vp_xent_bytes(N) bytes; max, sums and loss in double; the
 * reductions are NCCL all-reduces on the compute stream.  Staged (mpi): the
 * cpu functions on host copies. ---- */
/* The forward, as rt_crossentropy_forward_site_cu: *loss is the call
 * site's key (rtc_pass_loss reads its device result) and gets the mean over
 * the valid rows unless a stream capture is open; y (device, or NULL) gets
 * (float)loss.  RT_ERR_ARG before any communication for a target outside
 * [0,V) other than RT_IGNORE_INDEX (not checked while capturing: the step
 * ran eagerly first). */
int rt_vp_crossentropy_forward_cu(struct RtMesh *m, RtAxis ax, double *loss, float *y,
                                  const float *logits, const int32_t *targets, int N, int Vl,
                                  int v0, int V, double *scratch);
/* dlogits (N,Vl) += (softmax - onehot)·dloss/norm, nothing on ignored rows;
 * dloss is the seed on the device (one float). */
void rt_vp_crossentropy_backward_acc_cu(struct RtMesh *m, RtAxis ax, float *dlogits,
                                        const float *logits, const int32_t *targets, int N,
                                        int Vl, int v0, const float *dloss, double norm,
                                        double *scratch);
/* The same where only the first V of the (N, Vl·P) logits' columns are
 * classes (a padded vocabulary, the forward's V): the slice's columns at
 * or past V get nothing (dist.h's _cls). */
void rt_vp_crossentropy_backward_acc_cls_cu(struct RtMesh *m, RtAxis ax, float *dlogits,
                                            const float *logits, const int32_t *targets, int N,
                                            int Vl, int v0, int V, const float *dloss,
                                            double norm, double *scratch);

/* ---- SUMMA linear layers, 2D tensor parallelism on a q×q grid
 * (rtc_summa.cu): dist_summa.h's rt_summa_forward_f32 / _backward_f32 on
 * device buffers, row and col the mesh axes of the grid row and column
 * (their communicators are that header's row and col), with the same
 * blocks, collectives in dist_orders.h's order (NCCL broadcasts, reduces
 * to the owner and the bias gradient's all-reduce on the compute stream),
 * and bytes added to m->bytes[row] / m->bytes[col] as the cpu adds them (no
 * calls counted, as there).  Scratch (device): rt_scratch_summa_fwd /
 * _bwd(Mb·Kb, Nb·Kb) floats.  Staged (mpi): the cpu functions on host
 * copies. ---- */
/* y (Mb,Nb) = x·wᵀ summed over the grid [+ bias] (WRITTEN); bias may be NULL. */
void rt_summa_forward_cu(struct RtMesh *m, RtAxis row, RtAxis col, float *y, const float *x,
                         const float *w, const float *bias, int Mb, int Kb, int Nb,
                         float *scratch);
/* dx (Mb,Kb), dw (Nb,Kb), dbias (Nb) ACCUMULATE, any NULL (the same
 * NULL-ness on every rank of the grid). */
void rt_summa_backward_cu(struct RtMesh *m, RtAxis row, RtAxis col, float *dx, float *dw,
                          float *dbias, const float *dy, const float *x, const float *w, int Mb,
                          int Kb, int Nb, float *scratch);

/* ---- layernorm and rmsnorm with the channels split over an axis
 * (rtc_normsplit.cu): dist_summa.h's rt_layernorm_split_*_f32 /
 * rt_rmsnorm_split_*_f32 on device buffers, with their semantics, scratch
 * contents (rt_scratch_ln_split_bytes / rt_scratch_rms_split_bytes) and
 * byte counts (on m->bytes[ax]; like them, no call is counted): x, out (N,Cl)
 * of C = P·Cl channels; mean, rstd (N) the full rows' statistics; the
 * backward's dx, dw, db ACCUMULATE, any NULL, dw and db over this rank's
 * rows only, nothing communicated without dx.  Row sums in double, one NCCL
 * all-reduce on the compute stream.  Staged (mpi): the cpu functions on host
 * copies. ---- */
void rt_layernorm_split_forward_cu(struct RtMesh *m, RtAxis ax, float *out, float *mean,
                                   float *rstd, const float *x, const float *w, const float *b,
                                   int N, int Cl, int C, double eps, double *scratch);
void rt_layernorm_split_backward_cu(struct RtMesh *m, RtAxis ax, float *dx, float *dw,
                                    float *db, const float *dout, const float *x,
                                    const float *w, const float *mean, const float *rstd, int N,
                                    int Cl, int C, double *scratch);
void rt_rmsnorm_split_forward_cu(struct RtMesh *m, RtAxis ax, float *out, float *rstd,
                                 const float *x, const float *w, int N, int Cl, int C,
                                 double eps, double *scratch);
void rt_rmsnorm_split_backward_cu(struct RtMesh *m, RtAxis ax, float *dx, float *dw,
                                  const float *dout, const float *x, const float *w,
                                  const float *rstd, int N, int Cl, int C, double *scratch);

/* ---- pipeline messages (rtc_dist.cu): one NCCL group of sends and
 * receives (send 1: buf's n elements of esize bytes to world rank peer; 0:
 * into buf from peer) on the compute stream, over the world communicator;
 * each send's bytes counted on pp.  The caller (train.c rt_pipe_post)
 * groups a stage's sends with the next block's receives, the grouping the
 * compiler's check proves cannot hang (passes/commpass.c). ---- */
typedef struct RtcPipeMsg {
  int send, peer;
  void *buf;
  size_t n;
  int esize;
} RtcPipeMsg;
void rtc_pipe_group(struct RtMesh *m, const RtcPipeMsg *msg, int n);

/* ---- ring attention over the sequence split on an axis (rtc_ring.cu):
 * dist_ring.h's rt_ring_attention_forward_f32 / _backward_f32 on device
 * buffers, with their shapes, semantics (out WRITTEN, dq, dk, dv
 * ACCUMULATED, dk, dv may be NULL), scratch (rt_scratch_ring_fwd / _bwd
 * elements of the activations' type) and byte counts on m->bytes[ax] (no
 * calls counted, as there): the messages of dist_orders.h's rt_ring_step,
 * each step's one NCCL group of sends and receives on the compute stream
 * (capturable), the compute k_attention.cu's launchers.  Kernel
 * workspace: rtc_ws_ring_fwd / _bwd (rtc_ws.h).  Staged (mpi): the cpu
 * functions on host copies. ---- */
void rt_ring_attention_forward_cu(struct RtMesh *m, RtAxis ax, float *out, float *lse,
                                  const float *q, const float *k, const float *v, int B, int Tl,
                                  int H, int Hkv, int D, int causal, void *scratch);
void rt_ring_attention_backward_cu(struct RtMesh *m, RtAxis ax, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *lse, int B,
                                   int Tl, int H, int Hkv, int D, int causal, void *scratch);
/* Its merge: acc, ob (B,Tl,H,D), lse, lb (B,H,Tl); the running (acc, lse)
 * folded with a block's (ob, lb) by log-sum-exp, lse' = logaddexp(lse, lb),
 * acc' = e^(lse-lse')·acc + e^(lb-lse')·ob; first: acc' = ob, lse' = lb. */
void rt_ring_merge_cu(float *acc, float *lse, const float *ob, const float *lb, int B, int Tl,
                      int H, int D, int first);

#ifdef __cplusplus
}
#endif

/* ---- precision = bf16 storage (rtc_bf16.h, rtc.h's bf16 section): C++
 * overloads of the launchers above, rtc_bf16 * for each activation or
 * activation gradient, the other pointers as above ---- */
#ifdef __cplusplus
#include "rtc_bf16.h"

/* -- k_norm/k_loss helpers: the split-channel norms (rtc_normsplit.cu; x,
 *    out, dout, dx bf16) and the vocab-parallel cross-entropy
 *    (rtc_vpce.cu; logits, dlogits bf16) -- */
void rt_layernorm_split_forward_cu(struct RtMesh *m, RtAxis ax, rtc_bf16 *out, float *mean,
                                   float *rstd, const rtc_bf16 *x, const float *w,
                                   const float *b, int N, int Cl, int C, double eps,
                                   double *scratch);
void rt_layernorm_split_backward_cu(struct RtMesh *m, RtAxis ax, rtc_bf16 *dx, float *dw,
                                    float *db, const rtc_bf16 *dout, const rtc_bf16 *x,
                                    const float *w, const float *mean, const float *rstd, int N,
                                    int Cl, int C, double *scratch);
void rt_rmsnorm_split_forward_cu(struct RtMesh *m, RtAxis ax, rtc_bf16 *out, float *rstd,
                                 const rtc_bf16 *x, const float *w, int N, int Cl, int C,
                                 double eps, double *scratch);
void rt_rmsnorm_split_backward_cu(struct RtMesh *m, RtAxis ax, rtc_bf16 *dx, float *dw,
                                  const rtc_bf16 *dout, const rtc_bf16 *x, const float *w,
                                  const float *rstd, int N, int Cl, int C, double *scratch);
int rt_vp_crossentropy_forward_cu(struct RtMesh *m, RtAxis ax, double *loss, float *y,
                                  const rtc_bf16 *logits, const int32_t *targets, int N, int Vl,
                                  int v0, int V, double *scratch);
void rt_vp_crossentropy_backward_acc_cu(struct RtMesh *m, RtAxis ax, rtc_bf16 *dlogits,
                                        const rtc_bf16 *logits, const int32_t *targets, int N,
                                        int Vl, int v0, const float *dloss, double norm,
                                        double *scratch);
void rt_vp_crossentropy_backward_acc_cls_cu(struct RtMesh *m, RtAxis ax, rtc_bf16 *dlogits,
                                            const rtc_bf16 *logits, const int32_t *targets, int N,
                                            int Vl, int v0, int V, const float *dloss,
                                            double norm, double *scratch);

#endif /* __cplusplus */

/* ---- bf16: collectives and SUMMA (precision = bf16 storage, rtc_bf16.h):
 * C++ overloads of the functions above for bf16 activations, the same names
 * and semantics.  Collectives: NCCL's ncclBfloat16 (sums in NCCL's bf16
 * arithmetic); bytes counted at 2 an element (dist_formulas.h on n·2), as
 * the plan counts a bf16 value; scratch is the fp32 version's element count
 * of bf16.  Staged (mpi): widened to fp32 on the host, dist.h's function,
 * rounded back; counted as bf16.  SUMMA: x, y, dx, dy bf16, w the weight's
 * bf16 copy; bias, dw, dbias fp32; scratch rt_scratch_summa_fwd / _bwd
 * (Mb·Kb, Nb·Kb) × 2 bytes (rtc_summa.cu lays it out); the X and W blocks
 * are broadcast as bf16 (2 bytes an element counted), the dX and dW
 * partials and the bias gradient reduced as fp32 (4 bytes an element
 * counted).  The gradient buckets stay fp32. ---- */
#ifdef __cplusplus
#include "rtc_bf16.h"
void rtc_allreduce(struct RtMesh *m, RtAxis ax, rtc_bf16 *buf, size_t n);
void rtc_allreduce_start(struct RtMesh *m, RtAxis ax, rtc_bf16 *y, const rtc_bf16 *x, size_t n);
void rtc_allgather_dim(struct RtMesh *m, RtAxis ax, rtc_bf16 *dst, const rtc_bf16 *src,
                       size_t outer, size_t inner, void *scratch);
void rtc_reduce_scatter_dim(struct RtMesh *m, RtAxis ax, rtc_bf16 *dst, const rtc_bf16 *src,
                            size_t outer, size_t inner, void *scratch);
void rt_summa_forward_cu(struct RtMesh *m, RtAxis row, RtAxis col, rtc_bf16 *y,
                         const rtc_bf16 *x, const rtc_bf16 *w, const float *bias, int Mb, int Kb,
                         int Nb, void *scratch);
void rt_summa_backward_cu(struct RtMesh *m, RtAxis row, RtAxis col, rtc_bf16 *dx, float *dw,
                          float *dbias, const rtc_bf16 *dy, const rtc_bf16 *x, const rtc_bf16 *w,
                          int Mb, int Kb, int Nb, void *scratch);
/* Ring attention on bf16 q, k, v, out and gradients (lse fp32): K, V move
 * as bf16 (2 bytes an element counted), the backward's dK, dV as fp32 sums
 * (4 bytes: dist_formulas.h's rt_vol_ring_bwd2); blocks through the
 * tensor-core attention with fp32 results, the forward's running output,
 * merge and the backward's sums fp32 (kernel workspace rtc_ws_ring_fwd /
 * _bwd), out, dq, dk, dv rounded once; scratch rt_scratch_ring16 bf16
 * elements (the (K, V) receive buffers). */
void rt_ring_attention_forward_cu(struct RtMesh *m, RtAxis ax, rtc_bf16 *out, float *lse,
                                  const rtc_bf16 *q, const rtc_bf16 *k, const rtc_bf16 *v, int B,
                                  int Tl, int H, int Hkv, int D, int causal, void *scratch);
void rt_ring_attention_backward_cu(struct RtMesh *m, RtAxis ax, rtc_bf16 *dq, rtc_bf16 *dk,
                                   rtc_bf16 *dv, const rtc_bf16 *dout, const rtc_bf16 *q,
                                   const rtc_bf16 *k, const rtc_bf16 *v, const rtc_bf16 *out,
                                   const float *lse, int B, int Tl, int H, int Hkv, int D,
                                   int causal, void *scratch);
/* The merge with fin (or NULL) getting acc' rounded. */
void rt_ring_merge_cu(float *acc, float *lse, const float *ob, const float *lb, rtc_bf16 *fin,
                      int B, int Tl, int H, int D, int first);
#endif

#endif
