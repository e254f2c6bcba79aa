/* rtc_mem.cu — the device, its arena, transfers and scalars, graphs
 * (rtc_train.h).  Two streams: rtc_stream runs the program (kernels,
 * copies, collectives in program order) and rtc_comm_stream the overlapped
 * gradient buckets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "rtc_internal.h"
#include "shardrt.h"

cudaStream_t rtc_comm_stream, rtc_tp_stream;

static int env_int(const char *name, int *v) {
  const char *s = getenv(name);
  if (!s || !*s) return 0;
  char *end;
  long x = strtol(s, &end, 10);
  if (*end || x < 0 || x > 1 << 20) return 0;
  *v = (int)x;
  return 1;
}

int rtc_device_init(int world_rank, const char **name) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    return rt_errorf(RT_ERR_ARG, "no CUDA device on this node (%s); a --target cuda program "
                     "runs one rank per GPU", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  int local = world_rank;
  if (!env_int("OMPI_COMM_WORLD_LOCAL_RANK", &local) && !env_int("SLURM_LOCALID", &local))
    env_int("MPI_LOCALRANKID", &local);
  cudaCheck(cudaSetDevice(local % n));
  static cudaDeviceProp prop;
  cudaCheck(cudaGetDeviceProperties(&prop, local % n));
  if (name) *name = prop.name;
  cudaStream_t s;
  cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  rtc_stream = (rtc_stream_t)s;
  cudaCheck(cudaStreamCreateWithFlags(&rtc_comm_stream, cudaStreamNonBlocking));
  cudaCheck(cudaStreamCreateWithFlags(&rtc_tp_stream, cudaStreamNonBlocking));
#ifdef RTC_HOST
  /* RTCH_DEFER_STREAMS=1: the side streams' collectives run as late as
   * their events allow (cuda_host.h), to catch a missing wait */
  rtch_stream_defer(rtc_comm_stream);
  rtch_stream_defer(rtc_tp_stream);
  /* the kernels' and GEMMs' stream, for the capture's membership checks */
  rtch_launch_stream(s);
  /* The emulated device runs its kernels on this thread, one at a time:
   * the GEMMs (OpenBLAS) get one thread too, not a pool spinning beside it
   * (a third of the CPU time of a run), unless the user sized the pool. */
  rt_set_threads_unless_env(1);
#endif
  return RT_OK;
}

int rtc_arena_alloc(size_t arena, size_t ws, unsigned char **dev) {
  size_t at = rtc_ws_round(arena), bytes = at + rtc_ws_round(ws);
  size_t free_b = 0, total = 0;
  cudaCheck(cudaMemGetInfo(&free_b, &total));
  if (bytes > free_b) {
    return rt_errorf(RT_ERR_NOMEM, "the plan needs %zu bytes (%.2f GiB) of device memory per "
                     "rank (%zu arena + %zu kernel workspace), the GPU has %zu (%.2f GiB) free of "
                     "%.2f GiB; lower the microbatch, or plan with recompute or ZeRO (shardc "
                     "explore finds a plan that fits)",
                     bytes, bytes / 1073741824.0, arena, bytes - at, free_b, free_b / 1073741824.0,
                     total / 1073741824.0);
  }
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    return rt_errorf(RT_ERR_NOMEM, "cudaMalloc of the %zu-byte arena and workspace failed: %s",
                     bytes, cudaGetErrorString(e));
  }
  *dev = (unsigned char *)p;
  rtc_ws_attach(ws ? (unsigned char *)p + at : NULL, ws);
  return RT_OK;
}

static void *rtc_ws_base_;
static size_t rtc_ws_bytes_;

void rtc_ws_attach(void *base, size_t bytes) {
  rtc_ws_base_ = base;
  rtc_ws_bytes_ = base ? bytes : 0;
}

void *rtc_ws_scratch(size_t bytes, void **lazy, size_t *cap, const char *who, const char *file,
                     int line) {
  if (rtc_ws_base_) {
    if (bytes > rtc_ws_bytes_) {
      char msg[160];
      snprintf(msg, sizeof msg, "needs %zu bytes of kernel workspace; the program planned %zu", bytes,
               rtc_ws_bytes_);
      rtc_fail("shardc", who, msg, file, line,
               "the compiler's workspace formulas (runtime/cuda/rtc_ws.h) and this launcher disagree: "
               "a bug in shardc, please report it");
    }
    return rtc_ws_base_;
  }
  if (bytes > *cap) {
    if (*lazy) cudaCheck(cudaFree(*lazy));
    cudaCheck(cudaMalloc(lazy, bytes));
    *cap = bytes;
  }
  return *lazy;
}

void rtc_arena_free(unsigned char *dev) {
  rtc_ws_attach(NULL, 0);
  if (dev) cudaCheck(cudaFree(dev));
}

void rtc_memset(void *dst, int value, size_t bytes) {
  cudaCheck(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)rtc_stream));
}

void rtc_copy(void *dst, const void *src, size_t bytes) {
  if (dst != src)
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)rtc_stream));
}

void rtc_to_host(void *host, const void *dev, size_t bytes) {
  cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)rtc_stream));
  cudaCheck(cudaStreamSynchronize((cudaStream_t)rtc_stream));
}

void rtc_to_device(void *dev, const void *host, size_t bytes) {
  cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, (cudaStream_t)rtc_stream));
  cudaCheck(cudaStreamSynchronize((cudaStream_t)rtc_stream));
}

float rtc_get_f32(const void *dev) {
  float v;
  rtc_to_host(&v, dev, sizeof v);
  return v;
}

void rtc_set_f32(void *dev, float value) { rtc_to_device(dev, &value, sizeof value); }

void rtc_sync(void) { cudaCheck(cudaStreamSynchronize((cudaStream_t)rtc_stream)); }

void *rtc_dev_alloc(size_t bytes) {
  void *p = NULL;
  cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

void *rtc_pinned_alloc(size_t bytes) {
  void *p = NULL;
  cudaCheck(cudaMallocHost(&p, bytes ? bytes : 1));
  return p;
}

void rtc_dev_free(void *dev) {
  if (dev) cudaCheck(cudaFree(dev));
}

void rtc_pinned_free(void *host) {
  if (host) cudaCheck(cudaFreeHost(host));
}

void rtc_upload(void *dev, const void *pinned, size_t bytes) {
  cudaCheck(cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, (cudaStream_t)rtc_stream));
}

void rtc_download(void *pinned, const void *dev, size_t bytes) {
  cudaCheck(cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)rtc_stream));
}

__global__ void rtc_store_kernel(float *dev, float value) { *dev = value; }
__global__ void rtc_widen_kernel(double *dst, const float *src) { *dst = (double)*src; }

void rtc_store_f32(float *dev, float value) { RTC_LAUNCH(rtc_store_kernel, 1, 1, 0, dev, value); }
void rtc_widen_f32(double *dst, const float *src) { RTC_LAUNCH(rtc_widen_kernel, 1, 1, 0, dst, src); }

/* ---- graphs ---- */

struct RtcGraph {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
};

static int capturing_;

int rtc_capturing(void) { return capturing_; }

void rtc_capture_begin(void) {
  cudaCheck(cudaStreamBeginCapture((cudaStream_t)rtc_stream, cudaStreamCaptureModeGlobal));
  capturing_ = 1;
}

RtcGraph *rtc_capture_end(void) {
  RtcGraph *g = (RtcGraph *)calloc(1, sizeof *g);
  if (!g) rtc_fail("host", "calloc", "out of memory for a graph", __FILE__, __LINE__, "");
  cudaCheck(cudaStreamEndCapture((cudaStream_t)rtc_stream, &g->graph));
  capturing_ = 0;
  cudaCheck(cudaGraphInstantiate(&g->exec, g->graph, 0));
  return g;
}

void rtc_graph_launch(RtcGraph *g) { cudaCheck(cudaGraphLaunch(g->exec, (cudaStream_t)rtc_stream)); }

void rtc_graph_free(RtcGraph *g) {
  if (!g) return;
  cudaCheck(cudaGraphExecDestroy(g->exec));
  cudaCheck(cudaGraphDestroy(g->graph));
  free(g);
}
