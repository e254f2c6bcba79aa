/* rtc_errors.cu — what a failed CUDA, cuBLASLt or NCCL call prints, and the
 * stream every launcher uses.
 *
 * rtc_fail prints `file:line: error: LIB call failed: <call>: <msg>` and a
 * hint, then ends the job through rtc_abort_hook: the driver sets it to
 * MPI_Abort under a mesh (this library does not link MPI); unset, exit(1).
 */
#include "common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {

rtc_stream_t rtc_stream = 0;

/* Set by a driver that must end every rank (MPI_Abort); returns or not. */
void (*rtc_abort_hook)(int status) = 0;

const char *rtc_hint(const char *lib, int code) {
  if (!strcmp(lib, "CUDA")) {
    switch (code) {
    case 2: /* cudaErrorMemoryAllocation */
      return "the plan needs more device memory than is free: lower the microbatch or use "
             "recompute/zero";
    case 98:  /* cudaErrorInvalidDeviceFunction */
    case 209: /* cudaErrorNoKernelImageForDevice */
    case 222: /* cudaErrorUnsupportedPtxVersion */
      return "the binary was built for another GPU architecture: rebuild with --arch";
    case 9: /* cudaErrorInvalidConfiguration */
      return "a kernel was launched with a bad grid or block shape or too much shared memory "
             "(a bug in the launcher: report it with the shapes)";
    case 35: /* cudaErrorInsufficientDriver */
      return "the NVIDIA driver is older than the CUDA runtime this was built with: update "
             "the driver";
    case 100: /* cudaErrorNoDevice */
    case 101: /* cudaErrorInvalidDevice */
      return "no usable GPU for this rank: check CUDA_VISIBLE_DEVICES and the ranks per node";
    case 700: /* cudaErrorIllegalAddress */
    case 719: /* cudaErrorLaunchFailure */
    case 701: /* cudaErrorLaunchOutOfResources */
    case 702: /* cudaErrorLaunchTimeout */
      return "a kernel failed (an earlier launch may be the cause: rerun with "
             "CUDA_LAUNCH_BLOCKING=1 to find it, or under compute-sanitizer)";
    }
    return "";
  }
  if (!strcmp(lib, "cuBLASLt")) {
    switch (code) {
    case 3: /* CUBLAS_STATUS_ALLOC_FAILED */
      return "the plan needs more device memory than is free: lower the microbatch or use "
             "recompute/zero";
    case 8: /* CUBLAS_STATUS_ARCH_MISMATCH */
      return "the binary was built for another GPU architecture: rebuild with --arch";
    case 15: /* CUBLAS_STATUS_NOT_SUPPORTED */
      return "cuBLASLt has no algorithm for this shape and layout (an odd leading dimension?)";
    }
    return "";
  }
  if (!strcmp(lib, "NCCL")) {
    switch (code) {
    case 1: /* ncclUnhandledCudaError */
      return "a CUDA call inside NCCL failed: see the CUDA error above, or set NCCL_DEBUG=WARN";
    case 2: /* ncclSystemError */
      return "a system call inside NCCL failed (shared memory, sockets or InfiniBand): set "
             "NCCL_DEBUG=WARN; in containers raise /dev/shm (--shm-size)";
    case 3: /* ncclInternalError */
      return "NCCL internal error: set NCCL_DEBUG=INFO and check that every rank runs the same "
             "program";
    case 4: /* ncclInvalidArgument */
    case 5: /* ncclInvalidUsage */
      return "ranks disagree on a collective (count, type or order): every rank must run the "
             "same plan";
    case 6: /* ncclRemoteError */
      return "another rank failed or the network dropped: see that rank's error";
    }
    return "";
  }
  return "";
}

void rtc_fail(const char *lib, const char *call, const char *msg, const char *file, int line,
              const char *hint) {
  fprintf(stderr, "%s:%d: error: %s call failed: %s: %s\n", file, line, lib, call, msg);
  if (hint && *hint) fprintf(stderr, "hint: %s\n", hint);
  fflush(stderr);
  if (rtc_abort_hook) rtc_abort_hook(1);
  exit(1);
}

}  // extern "C"
