/* common.cuh — what every kernel file shares: the launch macro, the checked
 * calls, block and warp reductions.
 *
 * Built two ways: by nvcc (the GPU), and with RTC_HOST by the host C++
 * compiler through host/cuda_host.h, which maps the CUDA built-ins these
 * files use (grids and blocks run in turn, a block's threads as fibers with
 * a barrier for __syncthreads, warp shuffles through a per-warp slot array;
 * cuBLASLt calls go to OpenBLAS, NCCL calls to MPI).  Kernel files use only
 * what the host header maps: launch through RTC_LAUNCH, dynamic shared
 * memory through RTC_DYNAMIC_SHARED, no <<<>>> and no extern __shared__.
 */
#ifndef RTC_COMMON_CUH
#define RTC_COMMON_CUH

#ifdef RTC_HOST
#include <tuple>

#include "host/cuda_host.h"
#else
#include <cuda_runtime.h>
#endif
#include <stddef.h>
#include <stdint.h>

#include "rtc.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Reports a failed CUDA, cuBLASLt or NCCL call (file:line, the call, the
 * library's message and a hint) on stderr and ends the job with status 1
 * (MPI_Abort under a mesh).  Defined in rtc_errors.cu. */
void rtc_fail(const char *lib, const char *call, const char *msg, const char *file, int line,
              const char *hint) __attribute__((noreturn));
const char *rtc_hint(const char *lib, int code);
#ifdef __cplusplus
}
#endif

#include "rtc_ws.h"
#ifdef __cplusplus
extern "C" {
#endif
/* `bytes` of scratch for one launcher call (rtc_ws.h): the driver's region
 * when one is attached (a need over its size is a bug, reported), else
 * *lazy, grown to *cap as calls need (cudaFree synchronizes). */
void *rtc_ws_scratch(size_t bytes, void **lazy, size_t *cap, const char *who, const char *file,
                     int line);
#ifdef __cplusplus
}
#endif

#define cudaCheck(call)                                                                   \
  do {                                                                                    \
    cudaError_t rtc_e_ = (call);                                                          \
    if (rtc_e_ != cudaSuccess)                                                            \
      rtc_fail("CUDA", #call, cudaGetErrorString(rtc_e_), __FILE__, __LINE__,             \
               rtc_hint("CUDA", (int)rtc_e_));                                            \
  } while (0)

#ifdef __cplusplus
extern "C" {
#endif
/* The kernel profile (rtc_prof.cu): with rtc_prof_on, every launch, GEMM
 * and collective is timed by a pair of events on its stream and summed per
 * family (the kernel's source file) and name; rtc_prof_report prints it. */
extern int rtc_prof_on;
void rtc_prof_begin(void);
void rtc_prof_end(const char *file, const char *what);
#ifdef __cplusplus
}
#endif

/* kernel<<<grid, block, shmem, rtc_stream>>>(args...), then the launch's error.
 * The host build evaluates the arguments at the launch, as CUDA does, and
 * keeps their values: a launch recorded into a graph must not read, when it
 * is replayed, what an argument expression (g->n) pointed to at capture.
 * A launch with more than 48 KiB of dynamic shared memory uses
 * RTC_LAUNCH_SMEM, whose kernel names one function (template arguments
 * given), after cudaFuncSetAttribute raised the kernel's limit: the host
 * build checks both (it aborts on an RTC_LAUNCH above 48 KiB, and on an
 * RTC_LAUNCH_SMEM above the kernel's raised limit), as CUDA fails such a
 * launch. */
#ifdef RTC_HOST
#define RTC_LAUNCH_HOST_(kptr, kernel, grid, block, shmem, ...)                              \
  do {                                                                                       \
    if (rtc_prof_on) rtc_prof_begin();                                                       \
    rtch_launch_smem_check((kptr), (size_t)(shmem), #kernel);                                \
    auto rtc_args_ = std::make_tuple(__VA_ARGS__);                                           \
    rtch_launch(dim3(grid), dim3(block), (size_t)(shmem), [=]() {                            \
      std::apply([&](auto... rtc_a_) { kernel(rtc_a_...); }, rtc_args_);                     \
    });                                                                                      \
    if (rtc_prof_on) rtc_prof_end(__FILE__, #kernel);                                        \
  } while (0)
#define RTC_LAUNCH(kernel, grid, block, shmem, ...) \
  RTC_LAUNCH_HOST_(NULL, kernel, grid, block, shmem, __VA_ARGS__)
#define RTC_LAUNCH_SMEM(kernel, grid, block, shmem, ...) \
  RTC_LAUNCH_HOST_((const void *)(kernel), kernel, grid, block, shmem, __VA_ARGS__)
#define RTC_DYNAMIC_SHARED(T, name) T *name = (T *)rtch_dynamic_shared()
#else
#define RTC_LAUNCH(kernel, grid, block, shmem, ...)                                       \
  do {                                                                                    \
    if (rtc_prof_on) rtc_prof_begin();                                                    \
    kernel<<<(grid), (block), (shmem), (cudaStream_t)rtc_stream>>>(__VA_ARGS__);          \
    cudaCheck(cudaGetLastError());                                                        \
    if (rtc_prof_on) rtc_prof_end(__FILE__, #kernel);                                     \
  } while (0)
#define RTC_LAUNCH_SMEM(kernel, grid, block, shmem, ...) \
  RTC_LAUNCH(kernel, grid, block, shmem, __VA_ARGS__)
#define RTC_DYNAMIC_SHARED(T, name)                  \
  extern __shared__ __align__(16) unsigned char rtc_smem_[]; \
  T *name = (T *)rtc_smem_
#endif

/* Rounded float and double arithmetic that nvcc will not fuse into an FMA
 * (the cpu kernels are built with -ffp-contract=off): the optimizer
 * kernels (k_optim.cu, k_optim2.cu) spell their element-wise updates with
 * these, so that they round as the cpu's do. */
#ifdef RTC_HOST // the host compiler does not contract (ISO C++)
#define RTC_FMUL(a, b) ((a) * (b))
#define RTC_FADD(a, b) ((a) + (b))
#define RTC_DMUL(a, b) ((a) * (b))
#define RTC_DADD(a, b) ((a) + (b))
#else
#define RTC_FMUL(a, b) __fmul_rn(a, b)
#define RTC_FADD(a, b) __fadd_rn(a, b)
#define RTC_DMUL(a, b) __dmul_rn(a, b)
#define RTC_DADD(a, b) __dadd_rn(a, b)
#endif

static inline unsigned rtc_blocks(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b > 65535u * 8u ? 65535u * 8u : (b ? b : 1));
}

/* The butterflies' operations (rtc_xor_reduce in the host build). */
struct rtc_op_add {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct rtc_op_max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/* Sum over a warp (all 32 lanes get it).  The host build replays the
 * rounds from one exchange (host/cuda_host.h rtch_xor_reduce: the same
 * bits, one warp barrier instead of five). */
__device__ __forceinline__ float rtc_warp_sum(float v) {
#ifdef RTC_HOST
  return rtch_xor_reduce(v, rtc_op_add(), 16, 1);
#endif
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double rtc_warp_sum_d(double v) {
#ifdef RTC_HOST
  return rtch_xor_reduce(v, rtc_op_add(), 16, 1);
#endif
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float rtc_warp_max(float v) {
#ifdef RTC_HOST
  return rtch_xor_reduce(v, rtc_op_max(), 16, 1);
#endif
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets it.  Uses 33 floats of shared memory. */
__device__ __forceinline__ float rtc_block_sum(float v) {
  __shared__ float rtc_part_[33];
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  v = rtc_warp_sum(v);
  __syncthreads();  // rtc_part_ may still be read by an earlier call
  if (lane == 0) rtc_part_[w] = v;
  __syncthreads();
  float s = lane < nw ? rtc_part_[lane] : 0.0f;
  s = rtc_warp_sum(s);
  return s;
}

#endif
