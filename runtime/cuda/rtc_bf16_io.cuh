/* rtc_bf16_io.cuh — element loads and stores of a kernel templated on its
 * storage type T: float, or rtc_bf16 under precision = bf16 (rtc_bf16.h).
 * rtc_ldf reads an element as float; rtc_stf stores a float, rounded to
 * nearest even for bf16.  For float both are the plain access, so a
 * kernel's float instantiation computes exactly what the untemplated
 * kernel did.
 */
#ifndef RTC_BF16_IO_CUH
#define RTC_BF16_IO_CUH

#include "common.cuh"

__device__ __forceinline__ float rtc_ldf(const float *p) { return *p; }
__device__ __forceinline__ float rtc_ldf(const rtc_bf16 *p) { return rtc_bf2f(*p); }
__device__ __forceinline__ void rtc_stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void rtc_stf(rtc_bf16 *p, float v) { *p = rtc_f2bf(v); }

#endif
