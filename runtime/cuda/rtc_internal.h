/* rtc_internal.h — shared by the CUDA runtime's own files. */
#ifndef RTC_INTERNAL_H
#define RTC_INTERNAL_H

#include "common.cuh"
#include "rtc_train.h"

/* The stream of the overlapped gradient buckets (rtc_mem.cu), and that of
 * the tensor- and sequence-parallel messages that overlap compute (a linear
 * backward's dX all-reduce beside its dW GEMM, rtc_dist.cu; ring
 * attention's blocks, rtc_ring.cu): not behind the buckets in flight. */
extern cudaStream_t rtc_comm_stream, rtc_tp_stream;

/* rtc_dist.cu, for collective launchers in other files: the NCCL
 * communicator of a mesh axis (ends the job, naming what, where this rank
 * has none), whether the mesh is staged (--comm mpi), and the staged mode's
 * host buffer k (0..3) of at least n floats, grown as needed. */
struct ncclComm;
struct RtMesh;
struct ncclComm *rtc_comm_of(struct RtMesh *m, RtAxis ax, const char *what);
int rtc_staged(void);
float *rtc_host_buf(int k, size_t n);

/* rtc_dist.cu, for the collectives of other files (rtc_normsplit.cu): a
 * sum all-reduce of n doubles over the axis on the compute stream that
 * counts nothing (the caller adds the cpu function's bytes); a no-op on a
 * size-1 axis. */
void rtc_allreduce_f64_nocount(struct RtMesh *m, RtAxis ax, double *buf, size_t n,
                               const char *what);

/* rtc_dist.cu, for the files that put their own messages on rtc_tp_stream
 * (rtc_ring.cu): its next work waits for the kernels issued so far on the
 * compute stream; the compute stream's next kernel waits for its work so
 * far. */
void rtc_tp_after_compute(void);
void rtc_compute_after_tp(void);

#endif
