/* rtc_nccl.h — NCCL for the CUDA runtime's collective files (rtc_dist.cu,
 * rtc_summa.cu): the library on the GPU, host/nccl_host.h (MPI) in the
 * host build, and the checked call. */
#ifndef RTC_NCCL_H
#define RTC_NCCL_H

#include "rtc_internal.h"
#ifdef RTC_HOST
#include "host/nccl_host.h"
#else
#include <nccl.h>
#endif

#define ncclCheck(call)                                                                   \
  do {                                                                                    \
    ncclResult_t rtc_r_ = (call);                                                         \
    if (rtc_r_ != ncclSuccess)                                                            \
      rtc_fail("NCCL", #call, ncclGetErrorString(rtc_r_), __FILE__, __LINE__,             \
               rtc_hint("NCCL", (int)rtc_r_));                                            \
  } while (0)

#endif
