/* rtc_program.cuh — included by the programs `shardc build --target cuda`
 * writes: the kernels' launchers (rtc.h), the driver's device functions
 * (rtc_train.h), and rtc_foreach (rtc_foreach32: 32-bit indices), which
 * runs a fused elementwise chain (a device functor over the element index,
 * its buffers as fields, codegen/cuda.c; or over 8 elements with rtc_bf16_io.cuh's rtc_ld8/rtc_st8) as one
 * kernel.
 */
#ifndef RTC_PROGRAM_CUH
#define RTC_PROGRAM_CUH

#include "common.cuh"
#include "rtc_bf16_io.cuh"
#include "rtc_train.h"

template <class F>
__global__ void rtc_foreach_kernel(size_t n, F f) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    f(i);
}

/* f(i) for i < n, one thread per element (grid-stride beyond the grid). */
template <class F>
static inline void rtc_foreach(size_t n, F f) {
  RTC_LAUNCH(rtc_foreach_kernel, rtc_blocks(n, 256), 256, 0, n, f);
}

/* The same with 32-bit indices, for n < 2^31 (the code generator's choice
 * where the loop allows): the index, its stride and a broadcast operand's
 * i % K in 32-bit arithmetic, a few instructions an element fewer than
 * size_t's in kernels that are all memory traffic. */
template <class F>
__global__ void rtc_foreach32_kernel(unsigned n, F f) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    f(i);
}

template <class F>
static inline void rtc_foreach32(unsigned n, F f) {
  RTC_LAUNCH(rtc_foreach32_kernel, rtc_blocks(n, 256), 256, 0, n, f);
}

#endif
