/* rtc_optim.h — the multi-tensor optimizer step of the CUDA target
 * (k_optim.cu): one launch steps every parameter tensor, where
 * rt_adamw_step_cu would take one launch per tensor.
 */
#ifndef RTC_OPTIM_H
#define RTC_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The tensors of one AdamW step: tensor i is param[i], grad[i], m[i], v[i]
 * (device pointers, n[i] floats each), decayed with weight_decay[i].  The
 * arrays themselves are host memory, read during the call only.  The
 * launcher uploads a table of the tensors and keeps it: a list equal to the
 * previous call's (the same pointers, sizes and decays, as in a training
 * loop) is not uploaded again. */
typedef struct RtcAdamwList {
  int count;
  float *const *param;
  const float *const *grad;
  float *const *m;
  float *const *v;
  const size_t *n;
  const double *weight_decay;
} RtcAdamwList;

/* For every tensor of l, exactly rt_adamw_step_cu(param[i], grad[i], m[i],
 * v[i], n[i], lr, beta1, beta2, eps, weight_decay[i], t, grad_scale), in one
 * launch on rtc_stream. */
void rt_adamw_multi_cu(const RtcAdamwList *l, double lr, double beta1, double beta2, double eps,
                       long t, double grad_scale);

/* The step's scalars, read by the _dev launchers from the device, so that
 * a captured optimizer takes each replay's values: rtc_opt_scalars_set
 * forms them on the host as the launchers above do (into pinned memory),
 * rtc_opt_scalars_upload copies them to the device on rtc_stream (a copy a
 * graph replays; set them before each replay). */
void rtc_opt_scalars_set(double lr, double beta1, double beta2, double eps, long t,
                         double grad_scale);
void rtc_opt_scalars_upload(void);
/* rt_adamw_multi_cu, rt_adamw_step_cu, rt_sgd_step_cu with the uploaded
 * scalars. */
void rt_adamw_multi_dev_cu(const RtcAdamwList *l);
void rt_adamw_step_dev_cu(float *param, const float *grad, float *m, float *v, size_t n,
                          double weight_decay);
void rt_sgd_step_dev_cu(float *param, const float *grad, float *mom, size_t n, double momentum,
                        double weight_decay);

/* ---- Shampoo and Adafactor (k_optim2.cu): runtime/k_optim2.inc's f32
 * functions (shardrt_kernels.h) on device pointers, with their arguments
 * and semantics, on rtc_stream.  The factors' SYRKs and the preconditioning
 * GEMMs are cuBLAS (fp32), the element-wise work kernels; Newton's root
 * inverse is fp64 cuBLAS DGEMMs on the device, reading one double back per
 * iteration (its stopping test), so these run eagerly, never in a captured
 * graph.  root = eigh has no device path: rt_shampoo_unit_roots_cu refuses
 * it (RT_ERR_ARG) and the training driver computes those roots on the host
 * mirror with the cpu's LAPACK dsyevd (train.c unit_roots): a cuSOLVER
 * syevd sizes its workspace at run time (cusolverDnDsyevd_bufferSize),
 * which the memory plan (planned = measured, at compile time) cannot
 * count, and the roots are recomputed rarely (every precondition_every
 * steps, staggered), a copy of 2·k² floats each way per block. ---- */
struct RtShampooArgs;
void rt_opt_scale_grad_cu(float *grad, size_t n, double grad_scale);
int rt_shampoo_unit_cu(const float *grad, float *state, unsigned char *work, int ndim,
                       const int64_t *shape, int64_t bi, int64_t bj, float *out,
                       const struct RtShampooArgs *a);
int rt_shampoo_unit_roots_cu(float *state, unsigned char *work, int ndim, const int64_t *shape,
                             int64_t bi, int64_t bj, const struct RtShampooArgs *a);
void rt_shampoo_apply_cu(float *param, const float *u, int ndim, const int64_t *shape, int64_t bi,
                         int64_t bj, const struct RtShampooArgs *a);
int rt_shampoo_step_cu(float *param, float *grad, float *state, unsigned char *work, int ndim,
                       const int64_t *shape, const struct RtShampooArgs *a);
void rt_adafactor_step_cu(float *param, float *grad, float *state, int ndim, const int64_t *shape,
                          const struct RtShampooArgs *a);
/* Adafactor of a tensor split over tp, the three phases of k_optim2.inc
 * (rt_adafactor_sums, _squares, _finish) on the device: S, T, X and q are
 * device pointers into the statistics buffer the step's all-reduces sum;
 * finish reads Σ u² from q on the device (the cpu's takes it as a value). */
void rt_adafactor_sums_cu(const float *grad, const float *state, int ndim, const int64_t *shape,
                          float *S, float *T, float *X, double rep, int64_t Cfull,
                          const struct RtShampooArgs *a);
void rt_adafactor_squares_cu(const float *grad, float *state, int ndim, const int64_t *shape,
                             const float *S, const float *T, const float *X, int64_t Rfull,
                             int64_t Cfull, float *q, const struct RtShampooArgs *a);
void rt_adafactor_finish_cu(float *param, const float *grad, float *state, int ndim,
                            const int64_t *shape, const float *X, int64_t Rfull, const float *q,
                            int64_t nfull, const struct RtShampooArgs *a);
/* n floats at p (device) = 0, on the program's stream. */
void rt_opt_zero_cu(float *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif
