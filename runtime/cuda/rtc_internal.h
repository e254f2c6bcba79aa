/* rtc_internal.h — shared by the CUDA runtime's own files. */
#ifndef RTC_INTERNAL_H
#define RTC_INTERNAL_H

#include "common.cuh"
#include "rtc_train.h"

/* The stream of the overlapped gradient buckets (rtc_mem.cu). */
extern cudaStream_t rtc_comm_stream;

#endif
