/* cuda_host.h — the CUDA subset of runtime/cuda/k_*.cu, on the host.
 *
 * The host build of the kernels (libshardrt_cuda_host: g++ -std=c++17 -x c++
 * -DRTC_HOST, through common.cuh) lets CI without a GPU run the very kernel
 * code nvcc compiles.  What it maps:
 *   - launches (RTC_LAUNCH -> rtch_launch): the grid's blocks run one after
 *     another (x fastest, then y, z) on the calling OS thread; a block's
 *     threads run as cooperative fibers (ucontext), each until it ends or
 *     reaches a barrier.  threadIdx/blockIdx/blockDim/gridDim read the
 *     current fiber's and block's state.
 *   - __syncthreads() is a block barrier, __syncwarp() a warp barrier; a warp
 *     is 32 consecutive linear thread ids (x fastest).  A thread that has
 *     returned no longer counts: a barrier releases once every live thread of
 *     the block (warp) waits at it, as on current GPUs where exited threads do
 *     not hold a barrier.  Live threads waiting at different barriers (a
 *     shuffle some lanes of a warp skip, a __syncthreads some threads skip)
 *     is a deadlock: it is reported and the process aborts.
 *   - warp shuffles (__shfl_sync, _xor, _down, _up; any 1..8-byte type) and
 *     votes (__ballot_sync, __any_sync, __all_sync) go through a per-warp
 *     slot array: write own slot, warp barrier, read the source lane's slot,
 *     warp barrier.  Lanes past the end of a partial warp read poison
 *     (all-ones bytes: NaN for floats).  The mask is not checked.
 *   - __shared__ is `static` (blocks never run concurrently); dynamic shared
 *     memory (rtch_dynamic_shared, i.e. RTC_DYNAMIC_SHARED) is a buffer of
 *     the launch's shmem bytes, filled with all-ones bytes (NaN) at the start
 *     of every block so that a read before a write shows.
 *   - atomics are plain read-modify-writes (one thread runs at a time).
 *   - the runtime API the kernels and their tests use: memory is host memory
 *     (cudaMalloc = aligned malloc, cudaMemcpy = memmove), streams are tokens
 *     and everything is synchronous, events record a wall-clock timestamp,
 *     one device "host".
 *   - stream capture (cudaStreamBeginCapture ... cudaGraphLaunch): while a
 *     capture is open, launches, cudaMemcpyAsync, cudaMemsetAsync,
 *     cudaMemcpy2DAsync, the host twins' work (rtch_enqueue: GEMMs) and the
 *     NCCL shim's collectives are recorded as closures instead of run, and
 *     cudaGraphLaunch replays them in order (everything is synchronous, so
 *     order is all there is).  A synchronous call during a capture
 *     (cudaMemcpy, cudaMemset, cudaMalloc, a stream, event or device
 *     synchronization), an error in CUDA, is reported and aborts, so that
 *     CI catches a step that cannot be captured; the capture's membership
 *     and events are checked as CUDA checks them (Graphs, below).
 *   - RTCH_REVERSE=1: a launch's blocks run last first and a block's
 *     threads (whole warps) last first, for the tests' second pass.
 * What it does not map: <<<>>> and extern __shared__ (use RTC_LAUNCH and
 * RTC_DYNAMIC_SHARED), __constant__ memory and cudaMemcpyToSymbol, textures,
 * cooperative groups, streams running concurrently, cuBLASLt and NCCL (the
 * files that call them have an RTC_HOST twin), more than one launch at a time
 * (the scheduler's state is global: one OS thread launches).
 */
#ifndef RTC_CUDA_HOST_H
#define RTC_CUDA_HOST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <type_traits>

/* ---- function and variable qualifiers ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
/* __restrict__ is g++'s own spelling already. */
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

/* ---- thread geometry ---- */
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* The running fiber (a thread of the current block) and the current block. */
struct rtch_thread {
  dim3 tid;
  unsigned lin;  // linear id in the block: x + y·bx + z·bx·by
};
struct rtch_block {
  dim3 block_idx, block_dim, grid_dim;
};
extern rtch_thread *rtch_cur;
extern rtch_block rtch_blk;

#define threadIdx ((const dim3 &)rtch_cur->tid)
#define blockIdx ((const dim3 &)rtch_blk.block_idx)
#define blockDim ((const dim3 &)rtch_blk.block_dim)
#define gridDim ((const dim3 &)rtch_blk.grid_dim)
static const int warpSize = 32;

/* Whether the environment variable `name` is set, not empty and not "0"
 * (the shim's test switches: RTCH_DEFER_STREAMS, RTCH_REVERSE,
 * RTCH_SHARED_GPU). */
bool rtch_env_on(const char *name);

/* ---- launches ---- */
void rtch_launch_erased(dim3 grid, dim3 block, size_t shmem, void (*call)(const void *),
                        const void *fn);
/* Stream capture: whether one is open; adds f to it as work on stream s
 * (rtch_record: on the launch stream, where kernels and GEMMs run).  Work on
 * a stream that is not part of the capture aborts (see Graphs below). */
bool rtch_capturing(void);
void rtch_record_on(struct CUstream_st *s, std::function<void()> f);
static inline void rtch_record(std::function<void()> f) { rtch_record_on(NULL, std::move(f)); }
/* The stream kernels and GEMMs are launched on (the runtime's rtc_stream);
 * unset, a capture's origin stream. */
void rtch_launch_stream(struct CUstream_st *s);
/* Deferred streams (RTCH_DEFER_STREAMS=1 in the environment: a race check).
 * The runtime marks its side streams (communication, tensor-parallel) with
 * rtch_stream_defer; the collectives and async copies issued on such a
 * stream are then queued, not run, and run only when another stream waits
 * for an event recorded after them (cudaStreamWaitEvent), an event or the
 * stream is synchronized, the device is, or a capture begins: as late as
 * CUDA allows.  A kernel that reads what such work writes before waiting
 * for it reads the old values, and work that reads a buffer a kernel
 * overwrites before the wait reads the new ones: either changes the
 * numbers, which the host build's comparisons catch.  Without the variable
 * (or while a capture is open) everything runs at once, in order. */
void rtch_stream_defer(struct CUstream_st *s);
/* Queues f on s where s is deferred (returns true); else returns false. */
bool rtch_defer_on(struct CUstream_st *s, std::function<void()> f);
/* Runs f now, or records it while a capture is open (host work that stands
 * for device work: the GEMMs, the NCCL shim). */
template <class F>
static inline void rtch_enqueue(F f) {
  if (rtch_capturing())
    rtch_record(std::function<void()>(f));
  else
    f();
}
/* Aborts with a message when a capture is open: call is synchronous. */
void rtch_not_capturing(const char *call);
/* Runs fn() once per thread of grid x block (see the top of the file); while
 * a capture is open, a copy of fn is recorded. */
template <class F>
void rtch_launch(dim3 grid, dim3 block, size_t shmem, F &&fn) {
  using Fn = typename std::remove_reference<F>::type;
  if (rtch_capturing()) {
    Fn f(fn);
    rtch_record([grid, block, shmem, f]() {
      rtch_launch_erased(
          grid, block, shmem, [](const void *p) { (*(const Fn *)p)(); }, (const void *)&f);
    });
    return;
  }
  rtch_launch_erased(
      grid, block, shmem, [](const void *p) { (*(const Fn *)p)(); }, (const void *)&fn);
}
/* A launch of kernel fn (name: its source text; fn NULL where RTC_LAUNCH
 * cannot name one function) with shmem bytes of dynamic shared memory:
 * above 48 KiB CUDA fails it unless the kernel's
 * cudaFuncAttributeMaxDynamicSharedMemorySize was raised to at least shmem
 * (cudaFuncSetAttribute, recorded by rtch_func_smem); it aborts with a
 * message here. */
void rtch_func_smem(const void *fn, int bytes);
void rtch_launch_smem_check(const void *fn, size_t shmem, const char *name);
/* p is `bytes`-aligned, as a vector access on the GPU needs (misaligned:
 * the GPU faults); else the message (what), the thread and block, abort. */
void rtch_misaligned(const void *p, int bytes, const char *what);
static inline void rtch_aligned(const void *p, int bytes, const char *what) {
  if ((uintptr_t)p & (uintptr_t)(bytes - 1)) rtch_misaligned(p, bytes, what);
}
/* The launch's dynamic shared memory (shmem bytes, 64-byte aligned). */
void *rtch_dynamic_shared(void);

/* ---- barriers and warp exchange ---- */
void __syncthreads(void);
void rtch_syncwarp(void);
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  rtch_syncwarp();
}
/* Writes v to the calling lane's slot, waits for the warp, returns lane
 * src's slot (two sets of slots used in turn: one barrier an exchange). */
uint64_t rtch_warp_exchange(uint64_t v, int src);
/* Every lane's slot after the calling lane writes v (slots[32]). */
void rtch_warp_gather(uint64_t v, uint64_t *slots);
static inline int rtch_lane(void) { return (int)(rtch_cur->lin % 32u); }

template <class T>
static inline T rtch_shfl(T v, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a big type");
  uint64_t b = 0;
  memcpy(&b, &v, sizeof v);
  b = rtch_warp_exchange(b, src);
  T r;
  memcpy(&r, &b, sizeof r);
  return r;
}
/* width: a power of two <= 32 splitting the warp into independent segments. */
template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  (void)mask;
  int l = rtch_lane();
  return rtch_shfl(v, (l & ~(width - 1)) + (src & (width - 1)));
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  (void)mask;
  int l = rtch_lane(), s = l ^ lane_mask;
  return rtch_shfl(v, (s & ~(width - 1)) == (l & ~(width - 1)) ? s : l);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  int l = rtch_lane();
  return rtch_shfl(v, (l & (width - 1)) + (int)delta < width ? l + (int)delta : l);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  int l = rtch_lane();
  return rtch_shfl(v, (l & (width - 1)) >= (int)delta ? l - (int)delta : l);
}
/* Every lane's value of a warp exchange in `in`; 1 to the first lane back
 * from its barrier, which fills `out` (32 entries, one a lane) for all. */
int rtch_warp_table(uint64_t v, const uint64_t **in, uint64_t **out);
/* A warp's xor butterfly: in each round, offset o from `first`, halved or
 * doubled to `last`, every lane takes v = op(v, lane^o's v) (a loop of
 * __shfl_xor_sync on the GPU).  Here the lanes' values come in one
 * exchange, the first lane back runs every lane's rounds (rtch_warp_table)
 * and each lane takes its own result: bit for bit the loop's, at one warp
 * barrier instead of one a round (CI's time: most of a host-built step was
 * fibers switching at shuffles).  runtime/cuda/common.cuh's reductions use
 * it in the host build; tests/cuda/test_shim.cc checks it against the
 * loop. */
template <class T, class Op>
static inline T rtch_xor_reduce(T v, const Op &op, int first, int last) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a butterfly of a big type");
  uint64_t b = 0;
  memcpy(&b, &v, sizeof v);
  const uint64_t *in;
  uint64_t *out;
  if (rtch_warp_table(b, &in, &out)) {
    T x[32], y[32];
    for (int i = 0; i < 32; i++) memcpy(&x[i], &in[i], sizeof(T));
    for (int o = first, k = 0; k < 5; o = first > last ? o / 2 : o * 2, k++) {
      for (int i = 0; i < 32; i++) y[i] = op(x[i], x[i ^ o]);
      memcpy(x, y, sizeof x);
      if (o == last) break;
    }
    for (int i = 0; i < 32; i++) {
      out[i] = 0;
      memcpy(&out[i], &x[i], sizeof(T));
    }
  }
  T r;
  memcpy(&r, &out[rtch_lane()], sizeof r);
  return r;
}

/* Bit i: lane i's predicate (lanes of the warp that exist and are live). */
unsigned __ballot_sync(unsigned mask, int pred);
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
int __all_sync(unsigned mask, int pred);
static inline int __popc(unsigned x) { return __builtin_popcount(x); }

/* ---- atomics: plain read-modify-write, returning the old value ---- */
#define RTCH_ATOMIC(T)                                  \
  static inline T atomicAdd(T *p, T v) {                \
    T o = *p;                                           \
    *p = o + v;                                         \
    return o;                                           \
  }                                                     \
  static inline T atomicExch(T *p, T v) {               \
    T o = *p;                                           \
    *p = v;                                             \
    return o;                                           \
  }
RTCH_ATOMIC(float)
RTCH_ATOMIC(double)
RTCH_ATOMIC(int)
RTCH_ATOMIC(unsigned)
RTCH_ATOMIC(unsigned long long)
#undef RTCH_ATOMIC
#define RTCH_ATOMIC_INT(T)                              \
  static inline T atomicMax(T *p, T v) {                \
    T o = *p;                                           \
    if (v > o) *p = v;                                  \
    return o;                                           \
  }                                                     \
  static inline T atomicMin(T *p, T v) {                \
    T o = *p;                                           \
    if (v < o) *p = v;                                  \
    return o;                                           \
  }                                                     \
  static inline T atomicCAS(T *p, T cmp, T v) {         \
    T o = *p;                                           \
    if (o == cmp) *p = v;                               \
    return o;                                           \
  }
RTCH_ATOMIC_INT(int)
RTCH_ATOMIC_INT(unsigned)
RTCH_ATOMIC_INT(unsigned long long)
#undef RTCH_ATOMIC_INT

/* ---- loads and math intrinsics (the libm float functions) ---- */
template <class T>
static inline T __ldg(const T *p) {
  return *p;
}
/* glibc declares these names itself: macros, not functions. */
#define __expf expf
#define __logf logf
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __powf powf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline int __float2int_rn(float x) { return (int)lrintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }

/* min/max as CUDA overloads them: integers by the usual conversions (int
 * and unsigned give unsigned), floating point as fminf/fmaxf. */
template <class A, class B>
static inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type T;
  if constexpr (std::is_floating_point<T>::value) return fmin((T)a, (T)b);
  else return (T)a < (T)b ? (T)a : (T)b;
}
template <class A, class B>
static inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type T;
  if constexpr (std::is_floating_point<T>::value) return fmax((T)a, (T)b);
  else return (T)a > (T)b ? (T)a : (T)b;
}

/* ---- runtime API ---- */
typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorCapturedEvent = 907,
} cudaError_t;

typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
} cudaMemcpyKind;

/* Streams are tokens (work is done when the call returns); the same type as
 * rtc_stream_t in rtc.h. */
typedef struct CUstream_st *cudaStream_t;
#ifndef RTC_STREAM_T_DEFINED
#define RTC_STREAM_T_DEFINED
typedef struct CUstream_st *rtc_stream_t;
#endif
typedef struct CUevent_st *cudaEvent_t;

enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
enum { cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2 };
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int multiProcessorCount;
  int major, minor;
  int l2CacheSize;
};

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t rtch_malloc(void **p, size_t n);
template <class T>
static inline cudaError_t cudaMalloc(T **p, size_t n) {
  return rtch_malloc((void **)p, n);
}
cudaError_t cudaFree(void *p);
/* Pinned host memory: host memory the shim remembers, so that a capture can
 * tell it from pageable memory (an async copy from or to pageable memory
 * is an error while capturing: cudaErrorStreamCaptureUnsupported). */
cudaError_t rtch_malloc_host(void **p, size_t n);
template <class T>
static inline cudaError_t cudaMallocHost(T **p, size_t n) {
  return rtch_malloc_host((void **)p, n);
}
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t s = 0);
/* height rows of width bytes, at pitches dpitch and spitch. */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = 0);

cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

/* Graphs: a capture of one stream at a time, its membership checked as
 * CUDA checks it (the mode is not): a capture starts with its origin
 * stream; another stream joins it by waiting for an event recorded in it (a
 * fork).  While it is open, work issued on a stream outside it (which CUDA
 * would run at once, outside the graph) aborts with a message; a wait of a
 * stream of the capture for an event recorded outside it returns
 * cudaErrorStreamCaptureIsolation; cudaStreamEndCapture returns
 * cudaErrorStreamCaptureUnjoined (and no graph) unless the origin waited
 * for the last work of every stream that joined (a join).  After it, an
 * event last recorded in the capture may not be waited for, synchronized or
 * timed (cudaErrorCapturedEvent) until it is recorded again.  An async copy
 * between the device and pageable host memory (not cudaMallocHost's) while
 * capturing returns cudaErrorStreamCaptureUnsupported. */
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceCount(int *n);
/* free/total: the host's free and total RAM (sysinfo). */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T *fn, enum cudaFuncAttribute a, int v) {
  if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) rtch_func_smem((const void *)fn, v);
  return cudaSuccess;
}

#endif
