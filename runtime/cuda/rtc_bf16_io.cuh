/* rtc_bf16_io.cuh — element loads and stores of a kernel templated on its
 * storage type T: float, or rtc_bf16 under precision = bf16 (rtc_bf16.h).
 * rtc_ldf reads an element as float; rtc_stf stores a float, rounded to
 * nearest even for bf16.  For float both are the plain access, so a
 * kernel's float instantiation computes exactly what the untemplated
 * kernel did.
 */
#ifndef RTC_BF16_IO_CUH
#define RTC_BF16_IO_CUH

#include <initializer_list>
#include <string.h>

#include "common.cuh"

__device__ __forceinline__ float rtc_ldf(const float *p) { return *p; }
__device__ __forceinline__ float rtc_ldf(const rtc_bf16 *p) { return rtc_bf2f(*p); }
__device__ __forceinline__ void rtc_stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void rtc_stf(rtc_bf16 *p, float v) { *p = rtc_f2bf(v); }

/* 16-byte vectors of T (4 floats or 8 bf16), for row kernels whose rows
 * are 16-byte aligned: one load or store instruction a vector, where an
 * element at a time spends a 2-byte access per lane.  rtc_ldv reads
 * RTC_VEC(T) elements at p into f as floats; rtc_stv stores them rounded.
 * p must be 16-byte aligned (the GPU faults: misaligned address); the host
 * build aborts, naming the thread, where it is not. */
#define RTC_VEC(T) ((int)(16 / sizeof(T)))

template <class T>
__device__ __forceinline__ void rtc_ldv(float *f, const T *p) {
  alignas(16) T e[RTC_VEC(T)];
#ifdef RTC_HOST
  rtch_aligned(p, 16, "rtc_ldv: a 16-byte vector load");
  memcpy(e, p, 16);
#else
  *(uint4 *)e = *(const uint4 *)p;
#endif
  for (int k = 0; k < RTC_VEC(T); k++) f[k] = rtc_ldf(e + k);
}

template <class T>
__device__ __forceinline__ void rtc_stv(T *p, const float *f) {
  alignas(16) T e[RTC_VEC(T)];
  for (int k = 0; k < RTC_VEC(T); k++) rtc_stf(e + k, f[k]);
#ifdef RTC_HOST
  rtch_aligned(p, 16, "rtc_stv: a 16-byte vector store");
  memcpy(p, e, 16);
#else
  *(uint4 *)p = *(const uint4 *)e;
#endif
}

/* 8 elements at p (16-byte aligned) as floats, and back: one 16-byte
 * vector of bf16 or two of float (the generated loops' vector form,
 * codegen/cuda.c). */
template <class T>
__device__ __forceinline__ void rtc_ld8(float *f, const T *p) {
  for (int k = 0; k < 8; k += RTC_VEC(T)) rtc_ldv(f + k, p + k);
}
template <class T>
__device__ __forceinline__ void rtc_st8(T *p, const float *f) {
  for (int k = 0; k < 8; k += RTC_VEC(T)) rtc_stv(p + k, f + k);
}

/* W elements at p as floats, and back: one (rtc_ldf, rtc_stf) or a 16-byte
 * vector (rtc_ldv, rtc_stv; W == RTC_VEC(T)), so that one kernel templated
 * on W serves rows element by element and rows of aligned vectors. */
template <int W, class T>
__device__ __forceinline__ void rtc_ldw(float *f, const T *p) {
  if constexpr (W == 1) f[0] = rtc_ldf(p);
  else rtc_ldv(f, p);
}
template <int W, class T>
__device__ __forceinline__ void rtc_stw(T *p, const float *f) {
  if constexpr (W == 1) rtc_stf(p, f[0]);
  else rtc_stv(p, f);
}

/* Whether rows of C elements of T starting at each pointer given (NULLs
 * skipped) are all 16-byte aligned, so the vector kernels may run. */
template <class T>
static inline bool rtc_rows_vec_ok(int C, std::initializer_list<const void *> ps) {
  if (C % RTC_VEC(T)) return false;
  for (const void *q : ps)
    if (q && ((uintptr_t)q & 15)) return false;
  return true;
}

#endif
