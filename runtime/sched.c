/* sched.c — timers, the learning-rate schedule, the clip factor, conversions. */
#include <math.h>
#include <time.h>

#include "rt_internal.h"

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double rt_ms_since(double t0) { return (rt_now() - t0) * 1e3; }

double rt_lr(long step, double base_lr, long warmup, long total_steps,
             double min_lr_ratio, int kind) {
  if (step < 0)
    step = 0;
  if (step < warmup)
    return base_lr * (double)(step + 1) / (double)warmup;
  if (kind != RT_LR_COSINE)
    return base_lr;
  double min_lr = base_lr * min_lr_ratio;
  if (total_steps <= warmup || step >= total_steps)
    return min_lr;
  double ratio = (double)(step - warmup) / (double)(total_steps - warmup);
  double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
  return min_lr + coeff * (base_lr - min_lr);
}

double rt_clip_scale(double total_norm, double max_norm) {
  if (max_norm <= 0)
    return 1.0;
  double c = max_norm / (total_norm + 1e-6);
  return c < 1.0 ? c : 1.0;
}

void rt_f32_to_f64(double *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = src[i];
}

void rt_f64_to_f32(float *dst, const double *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = (float)src[i];
}
