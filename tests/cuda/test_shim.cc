/* test_shim.cc — the host CUDA shim (runtime/cuda/host/cuda_host.h) does what
 * the kernels rely on: block barriers order shared-memory phases, warp
 * shuffles exchange the right lanes, a grid's blocks and a block's threads
 * see their 3-D indices, dynamic shared memory is per-launch and poisoned,
 * atomicAdd accumulates, a launch recorded in a graph replays with the
 * values its arguments had at the launch, a deferred stream's work runs
 * when a wait on its event comes, and a capture's membership is checked as
 * CUDA checks it (forks joined back, no wait across its boundary), and
 * a launch above 48 KiB of dynamic shared memory needs its limit raised.  (The tensor-core and async-copy
 * twins of rtc_mma.cuh are checked against the PTX ISA's layouts by
 * test_k_mma.cu, on the host and on a GPU.)  Each check prints PASS/FAIL;
 * exit 1 on any FAIL.
 */
#include "common.cuh"
#include "rtc_bf16_io.cuh"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
static void check(const char *what, int ok) {
  printf("%-58s %s\n", what, ok ? "PASS" : "FAIL");
  if (!ok) failures++;
}

/* Whether f, run in a child process (its stderr silenced), ends it by
 * abort(): the shim's answer to what a GPU faults on or CUDA runs outside
 * a graph. */
template <class F>
static bool aborts(F f) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(2);
    f();
    _exit(0);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) &&
         WTERMSIG(status) == SIGABRT;
}

/* out[i] = inp[n-1-i] through shared memory: every thread writes one
 * element, __syncthreads, then reads its mirror (written by another thread,
 * later in fiber order for the first half).  Then a second phase overwrites
 * the shared array in place, which needs the barrier after the reads. */
__global__ void k_reverse(float *out, const float *inp, int n) {
  __shared__ float s[1024];
  int i = threadIdx.x;
  s[i] = inp[i];
  __syncthreads();
  float v = s[n - 1 - i];
  __syncthreads();  // all reads of phase one before phase two's writes
  s[i] = 2.0f * v;
  __syncthreads();
  out[i] = s[n - 1 - i];  // 2·inp[i]
}

/* Sum of the block: warp sums by xor (rtc_block_sum), and by down-shuffles
 * (lane 0 holds the sum). */
__global__ void k_sums(float *xor_out, float *down_out, const float *inp) {
  int i = threadIdx.x;
  float v = inp[blockIdx.x * blockDim.x + i];
  float s = rtc_block_sum(v);
  if (i == 0) xor_out[blockIdx.x] = s;
  float d = v;
  for (int o = 16; o > 0; o >>= 1) d += __shfl_down_sync(0xffffffffu, d, o);
  __shared__ float part[32];
  if (i % 32 == 0) part[i / 32] = d;
  __syncthreads();
  if (i == 0) {
    float t = 0.0f;
    for (unsigned w = 0; w < blockDim.x / 32; w++) t += part[w];
    down_out[blockIdx.x] = t;
  }
}

/* Shuffle variants over int and double: every lane reads lane 7 and its
 * lane - 3 (up). */
__global__ void k_shfl(int *bcast, double *up) {
  int l = threadIdx.x % 32;
  bcast[threadIdx.x] = __shfl_sync(0xffffffffu, 100 + l, 7);
  up[threadIdx.x] = __shfl_up_sync(0xffffffffu, (double)l + 0.5, 3);
}

/* Exchanges back to back (the shim's two sets of warp slots in turn), a
 * vote between them, then __syncthreads and one more exchange: a lane
 * reading the set of the exchange before would see the wrong values. */
__global__ void k_chain(int *out) {
  int l = threadIdx.x % 32, w = threadIdx.x / 32;
  int a = __shfl_sync(0xffffffffu, 1000 * (w + 1) + 10 * blockIdx.x + l, (l + 1) % 32);
  int b = __shfl_xor_sync(0xffffffffu, a, 5);
  unsigned m = __ballot_sync(0xffffffffu, b % 3 == 0);
  int c = __shfl_sync(0xffffffffu, b + __builtin_popcount(m), 31 - l);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = __shfl_down_sync(0xffffffffu, c, 1);
}

/* The host build's butterflies (rtch_xor_reduce, one exchange and a table)
 * against the __shfl_xor_sync loops they stand for, lane by lane: sums
 * from 16 down, a half-warp max from 8 down, offsets 1 then 2 up, and an
 * operation that is not symmetric (each lane's own rounds matter), back to
 * back so that the tables of both slot sets are reused, with a
 * __syncthreads and a plain shuffle between. */
struct op_skew {
  __device__ float operator()(float a, float b) const { return 0.75f * a + b; }
};
template <class Op>
__device__ float xor_loop(float v, Op op, int first, int last) {
  for (int o = first;; o = first > last ? o / 2 : o * 2) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (o == last) return v;
  }
}
__global__ void k_butterfly(float *loop, float *table, const float *in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, k = 0;
  float v = in[i];
  loop[8 * i + k] = xor_loop(v, rtc_op_add(), 16, 1);
  table[8 * i + k++] = rtch_xor_reduce(v, rtc_op_add(), 16, 1);
  table[8 * i + k] = rtch_xor_reduce(v, rtc_op_max(), 8, 1);
  loop[8 * i + k++] = xor_loop(v, rtc_op_max(), 8, 1);
  table[8 * i + k] = rtch_xor_reduce(v, rtc_op_add(), 1, 2);
  table[8 * i + k + 1] = rtch_xor_reduce(v, op_skew(), 16, 1);
  loop[8 * i + k++] = xor_loop(v, rtc_op_add(), 1, 2);
  loop[8 * i + k++] = xor_loop(v, op_skew(), 16, 1);
  __syncthreads();
  v = __shfl_sync(0xffffffffu, v, 3) + v;
  table[8 * i + k] = rtch_xor_reduce(v, op_skew(), 1, 16);
  loop[8 * i + k++] = xor_loop(v, op_skew(), 1, 16);
  loop[8 * i + k] = xor_loop(v, rtc_op_add(), 16, 1);
  table[8 * i + k++] = rtc_warp_sum(v);
  (void)k;
}

/* Every thread of a 3-D grid of 3-D blocks writes its global linear id. */
__global__ void k_index(int *out) {
  unsigned bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;
  unsigned tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  unsigned block = bx + gridDim.x * (by + gridDim.y * bz);
  unsigned thread = tx + blockDim.x * (ty + blockDim.y * tz);
  unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  out[block * nt + thread] = (int)(block * 1000 + thread);
}

/* Dynamic shared memory: poisoned (NaN) at the block's start, then used. */
__global__ void k_dyn(float *out, int *poisoned) {
  RTC_DYNAMIC_SHARED(float, buf);
  int i = threadIdx.x;
  if (buf[i] == buf[i]) poisoned[0] = 0;  // not NaN: not poisoned
  __syncthreads();
  buf[i] = (float)(i + blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + i] = buf[(i + 1) % blockDim.x];
}

__global__ void k_atomic(float *acc, int *count) {
  atomicAdd(acc, (float)threadIdx.x);
  atomicAdd(count, 1);
}

/* Threads that return early do not hold a later barrier. */
__global__ void k_early_exit(int *out) {
  __shared__ int s[64];
  int i = threadIdx.x;
  if (i >= 40) return;
  s[i] = i;
  __syncthreads();
  out[i] = s[39 - i];
}

/* out[i] = v for i < n. */
__global__ void k_fill(int *out, int n, int v) {
  int i = threadIdx.x;
  if (i < n) out[i] = v;
}
struct FillArgs {
  int n, v;
};

/* out[0..4) = the 4 floats at p, one 16-byte vector load (rtc_ldv) */
__global__ void k_ldv(float *out, const float *p) {
  float f[4];
  rtc_ldv(f, p);
  for (int k = 0; k < 4; k++) out[k] = f[k];
}

/* order[i]: the rank of thread i of the grid among the threads to run */
__global__ void k_order(int *order, int *counter) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  order[i] = atomicAdd(counter, 1);
}

int main(void) {
  char what[128];
  /* 1. two-phase reversal, 1024 and 37 threads */
  const int rev_sizes[] = {1024, 37};
  for (int n : rev_sizes) {
    float h_in[1024], h_out[1024];
    for (int i = 0; i < n; i++) h_in[i] = (float)i;
    float *d_in, *d_out;
    cudaCheck(cudaMalloc(&d_in, n * sizeof(float)));
    cudaCheck(cudaMalloc(&d_out, n * sizeof(float)));
    cudaCheck(cudaMemcpy(d_in, h_in, n * sizeof(float), cudaMemcpyHostToDevice));
    RTC_LAUNCH(k_reverse, 1, n, 0, d_out, d_in, n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(h_out, d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= h_out[i] == 2.0f * (float)i;
    snprintf(what, sizeof what, "barrier: two-phase shared reversal, %d threads", n);
    check(what, ok);
    cudaCheck(cudaFree(d_in));
    cudaCheck(cudaFree(d_out));
  }
  /* 2. xor and down sums over 32 and 1024 threads (3 blocks each) */
  const int sum_sizes[] = {32, 1024};
  for (int n : sum_sizes) {
    int nb = 3;
    float *h = (float *)malloc(nb * n * sizeof(float)), hx[3], hd[3];
    for (int i = 0; i < nb * n; i++) h[i] = (float)(i % 97) - 40.0f;  // exact in float
    float *d, *dx, *dd;
    cudaCheck(cudaMalloc(&d, nb * n * sizeof(float)));
    cudaCheck(cudaMalloc(&dx, nb * sizeof(float)));
    cudaCheck(cudaMalloc(&dd, nb * sizeof(float)));
    cudaCheck(cudaMemcpy(d, h, nb * n * sizeof(float), cudaMemcpyHostToDevice));
    RTC_LAUNCH(k_sums, nb, n, 0, dx, dd, d);
    cudaCheck(cudaMemcpy(hx, dx, sizeof hx, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost));
    int okx = 1, okd = 1;
    for (int b = 0; b < nb; b++) {
      float want = 0.0f;
      for (int i = 0; i < n; i++) want += h[b * n + i];
      okx &= hx[b] == want;
      okd &= hd[b] == want;
    }
    snprintf(what, sizeof what, "shuffle: xor block sum over %d threads", n);
    check(what, okx);
    snprintf(what, sizeof what, "shuffle: down warp sums over %d threads", n);
    check(what, okd);
    free(h);
    cudaCheck(cudaFree(d));
    cudaCheck(cudaFree(dx));
    cudaCheck(cudaFree(dd));
  }
  /* 3. __shfl_sync broadcast (int) and __shfl_up_sync (double), 64 threads */
  {
    int hb[64];
    double hu[64];
    int *db;
    double *du;
    cudaCheck(cudaMalloc(&db, sizeof hb));
    cudaCheck(cudaMalloc(&du, sizeof hu));
    RTC_LAUNCH(k_shfl, 1, 64, 0, db, du);
    cudaCheck(cudaMemcpy(hb, db, sizeof hb, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hu, du, sizeof hu, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < 64; i++) {
      int l = i % 32;
      ok &= hb[i] == 107;
      ok &= hu[i] == (l >= 3 ? l - 3 : l) + 0.5;
    }
    check("shuffle: __shfl_sync (int), __shfl_up_sync (double)", ok);
    cudaCheck(cudaFree(db));
    cudaCheck(cudaFree(du));
  }
  /* 3b. exchanges back to back, a vote, __syncthreads, an exchange: 2
   * blocks of 3 warps */
  {
    int h[192], *d;
    cudaCheck(cudaMalloc(&d, sizeof h));
    RTC_LAUNCH(k_chain, 2, 96, 0, d);
    cudaCheck(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int blk = 0; blk < 2; blk++)
      for (int w = 0; w < 3; w++) {
        int a[32], b[32], c[32];
        for (int l = 0; l < 32; l++) a[l] = 1000 * (w + 1) + 10 * blk + (l + 1) % 32;
        for (int l = 0; l < 32; l++) b[l] = a[l ^ 5];
        int m = 0;
        for (int l = 0; l < 32; l++) m += b[l] % 3 == 0;
        for (int l = 0; l < 32; l++) c[l] = b[31 - l] + m;
        for (int l = 0; l < 32; l++) ok &= h[blk * 96 + w * 32 + l] == (l < 31 ? c[l + 1] : c[l]);
      }
    check("shuffle: exchanges back to back, a vote, __syncthreads, 2 x 96 threads", ok);
    cudaCheck(cudaFree(d));
  }
  /* 3c. the host build's butterflies against the shuffle loops: 2 blocks
   * of 3 warps, random values */
  {
    const int n = 192, per = 8;
    float h_in[n], h_loop[n * per], h_table[n * per], *d_in, *d_loop, *d_table;
    unsigned r = 12345;
    for (int i = 0; i < n; i++) {
      r = r * 1664525u + 1013904223u;
      h_in[i] = (float)(r >> 8) / 16777216.0f * 8.0f - 4.0f;
    }
    cudaCheck(cudaMalloc(&d_in, sizeof h_in));
    cudaCheck(cudaMalloc(&d_loop, sizeof h_loop));
    cudaCheck(cudaMalloc(&d_table, sizeof h_table));
    cudaCheck(cudaMemset(d_loop, 0, sizeof h_loop));
    cudaCheck(cudaMemset(d_table, 0xff, sizeof h_table));
    cudaCheck(cudaMemcpy(d_in, h_in, sizeof h_in, cudaMemcpyHostToDevice));
    RTC_LAUNCH(k_butterfly, 2, 96, 0, d_loop, d_table, d_in);
    cudaCheck(cudaMemcpy(h_loop, d_loop, sizeof h_loop, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(h_table, d_table, sizeof h_table, cudaMemcpyDeviceToHost));
    int ok = 1, lanes_differ = 0;
    for (int i = 0; i < n; i++)
      for (int k = 0; k < 6; k++) ok &= memcmp(&h_loop[per * i + k], &h_table[per * i + k], 4) == 0;
    for (int i = 1; i < 32; i++) lanes_differ |= h_loop[per * i + 3] != h_loop[3];  // op_skew
    check("shuffle: butterflies from one exchange = the xor loops, bitwise", ok && lanes_differ);
    cudaCheck(cudaFree(d_in));
    cudaCheck(cudaFree(d_loop));
    cudaCheck(cudaFree(d_table));
  }
  /* 4. 3-D grid of 3-D blocks */
  {
    dim3 grid(3, 2, 2), block(5, 3, 2);
    int nt = 30, nblk = 12, *d, h[360];
    cudaCheck(cudaMalloc(&d, sizeof h));
    cudaCheck(cudaMemset(d, 0xff, sizeof h));
    RTC_LAUNCH(k_index, grid, block, 0, d);
    cudaCheck(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int b = 0; b < nblk; b++)
      for (int t = 0; t < nt; t++) ok &= h[b * nt + t] == b * 1000 + t;
    check("grid: 3-D blocks and threads, (3,2,2) x (5,3,2)", ok);
    cudaCheck(cudaFree(d));
  }
  /* 5. dynamic shared memory: poisoned per block, sized per launch */
  {
    int n = 96, nb = 2, hp = 1, *dp;
    float h[192], *d;
    cudaCheck(cudaMalloc(&d, sizeof h));
    cudaCheck(cudaMalloc(&dp, sizeof hp));
    cudaCheck(cudaMemcpy(dp, &hp, sizeof hp, cudaMemcpyHostToDevice));
    RTC_LAUNCH(k_dyn, nb, n, n * sizeof(float), d, dp);
    cudaCheck(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&hp, dp, sizeof hp, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int b = 0; b < nb; b++)
      for (int i = 0; i < n; i++) ok &= h[b * n + i] == (float)((i + 1) % n + b);
    check("shared: dynamic shared memory, 2 blocks of 96", ok);
    check("shared: dynamic shared memory poisoned at block start", hp == 1);
    cudaCheck(cudaFree(d));
    cudaCheck(cudaFree(dp));
  }
  /* 6. atomicAdd from 4 blocks of 256 */
  {
    float hz = 0.0f, ha, *da;
    int hc = 0, *dc;
    cudaCheck(cudaMalloc(&da, sizeof ha));
    cudaCheck(cudaMalloc(&dc, sizeof hc));
    cudaCheck(cudaMemcpy(da, &hz, sizeof hz, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dc, &hc, sizeof hc, cudaMemcpyHostToDevice));
    RTC_LAUNCH(k_atomic, 4, 256, 0, da, dc);
    cudaCheck(cudaMemcpy(&ha, da, sizeof ha, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&hc, dc, sizeof hc, cudaMemcpyDeviceToHost));
    check("atomics: atomicAdd float and int, 4 x 256 threads",
          ha == 4.0f * 255.0f * 256.0f / 2.0f && hc == 1024);
    cudaCheck(cudaFree(da));
    cudaCheck(cudaFree(dc));
  }
  /* 7. early return: exited threads do not hold __syncthreads */
  {
    int h[40], *d;
    cudaCheck(cudaMalloc(&d, sizeof h));
    RTC_LAUNCH(k_early_exit, 1, 64, 0, d);
    cudaCheck(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < 40; i++) ok &= h[i] == 39 - i;
    check("barrier: threads that returned early are not waited for", ok);
    cudaCheck(cudaFree(d));
  }
  /* 8. capture: arguments evaluated at the launch (as CUDA does), not at
   * the replay: the struct they were read through is changed (a stack
   * slot reused) before the graph runs */
  {
    int h[64], *d;
    cudaCheck(cudaMalloc(&d, sizeof h));
    cudaCheck(cudaMemset(d, 0, sizeof h));
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    FillArgs a = {16, 7};
    const FillArgs *g = &a;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    RTC_LAUNCH(k_fill, 1, 64, 0, d, g->n, g->v);
    cudaCheck(cudaStreamEndCapture(s, &graph));
    a.n = 64;
    a.v = -1;
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    cudaCheck(cudaGraphLaunch(exec, s));
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < 64; i++) ok &= h[i] == (i < 16 ? 7 : 0);
    check("graphs: a replayed launch keeps its arguments' values", ok);
    cudaCheck(cudaGraphExecDestroy(exec));
    cudaCheck(cudaGraphDestroy(graph));
    cudaCheck(cudaStreamDestroy(s));
    cudaCheck(cudaFree(d));
  }
  /* 9. deferred streams (RTCH_DEFER_STREAMS=1, the race check of the
   * host-build program tests): a deferred stream's async work runs when
   * another stream waits for an event recorded after it, not before, and
   * not the work queued after that event; a synchronization runs the rest */
  {
    setenv("RTCH_DEFER_STREAMS", "1", 1);
    int h[3] = {0, 0, 0}, *d;
    cudaCheck(cudaMalloc(&d, sizeof h));
    cudaCheck(cudaMemset(d, 0, sizeof h));
    cudaStream_t side, compute;
    cudaEvent_t e1, e2;
    cudaCheck(cudaStreamCreate(&side));
    cudaCheck(cudaStreamCreate(&compute));
    cudaCheck(cudaEventCreate(&e1));
    cudaCheck(cudaEventCreate(&e2));
    rtch_stream_defer(side);
    int one = 0x01010101;
    cudaCheck(cudaMemsetAsync(d, 1, sizeof(int), side));
    cudaCheck(cudaEventRecord(e1, side));
    cudaCheck(cudaMemcpyAsync(d + 1, &one, sizeof(int), cudaMemcpyHostToDevice, side));
    cudaCheck(cudaEventRecord(e2, side));
    cudaCheck(cudaMemsetAsync(d + 2, 1, sizeof(int), side));
    int queued = d[0] == 0 && d[1] == 0 && d[2] == 0;
    cudaCheck(cudaStreamWaitEvent(compute, e1, 0));
    int first = d[0] == one && d[1] == 0 && d[2] == 0;
    cudaCheck(cudaStreamWaitEvent(compute, e2, 0));
    int second = d[1] == one && d[2] == 0;
    cudaCheck(cudaStreamSynchronize(side));
    int rest = d[2] == one;
    check("deferred streams: async work waits for a wait on its event", queued && first);
    check("deferred streams: a wait runs what precedes its event only", second);
    check("deferred streams: a synchronization runs the rest", rest);
    cudaCheck(cudaEventDestroy(e1));
    cudaCheck(cudaEventDestroy(e2));
    cudaCheck(cudaStreamDestroy(side));
    cudaCheck(cudaStreamDestroy(compute));
    cudaCheck(cudaFree(d));
  }
  /* 10. capture membership, checked as CUDA checks it: a side stream joins
   * a capture by waiting for an event recorded in it and must be joined
   * back before the end; a wait for an event recorded outside the capture,
   * or, after it, for one last recorded in it, is an error; work on a stream
   * outside the capture (CUDA would run it at once) aborts */
  {
    unsetenv("RTCH_DEFER_STREAMS");
    int *d;
    cudaCheck(cudaMalloc(&d, 2 * sizeof(int)));
    cudaCheck(cudaMemset(d, 0, 2 * sizeof(int)));
    cudaStream_t s, t;
    cudaEvent_t forked, join, outside;
    cudaCheck(cudaStreamCreate(&s));
    cudaCheck(cudaStreamCreate(&t));
    cudaCheck(cudaEventCreate(&forked));
    cudaCheck(cudaEventCreate(&join));
    cudaCheck(cudaEventCreate(&outside));
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec;
    /* fork, work on the side stream, join: a graph that runs it */
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaCheck(cudaEventRecord(forked, s));
    cudaCheck(cudaStreamWaitEvent(t, forked, 0));
    cudaCheck(cudaMemsetAsync(d, 1, sizeof(int), t));
    cudaCheck(cudaEventRecord(join, t));
    cudaCheck(cudaStreamWaitEvent(s, join, 0));
    cudaCheck(cudaMemsetAsync(d + 1, 2, sizeof(int), s));
    cudaError_t end = cudaStreamEndCapture(s, &g);
    int ran = 0;
    if (end == cudaSuccess) {
      cudaCheck(cudaGraphInstantiate(&exec, g, 0));
      cudaCheck(cudaGraphLaunch(exec, s));
      cudaCheck(cudaStreamSynchronize(s));
      ran = d[0] == 0x01010101 && d[1] == 0x02020202;
      cudaCheck(cudaGraphExecDestroy(exec));
      cudaCheck(cudaGraphDestroy(g));
    }
    check("capture: a forked and joined side stream is captured", end == cudaSuccess && ran);
    /* after it: the join event was last recorded in the capture */
    cudaError_t captured = cudaStreamWaitEvent(t, join, 0);
    (void)cudaGetLastError();
    cudaCheck(cudaEventRecord(join, t));
    cudaError_t again = cudaStreamWaitEvent(s, join, 0);
    check("capture: a wait for an event recorded in a closed capture fails",
          captured == cudaErrorCapturedEvent && again == cudaSuccess);
    /* a fork without its join */
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaCheck(cudaEventRecord(forked, s));
    cudaCheck(cudaStreamWaitEvent(t, forked, 0));
    cudaCheck(cudaMemsetAsync(d, 3, sizeof(int), t));
    g = (cudaGraph_t)&g;
    end = cudaStreamEndCapture(s, &g);
    (void)cudaGetLastError();
    check("capture: a side stream not joined back fails the capture",
          end == cudaErrorStreamCaptureUnjoined && g == NULL);
    /* a captured stream waits for work recorded outside the capture */
    cudaCheck(cudaEventRecord(outside, t));
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t iso = cudaStreamWaitEvent(s, outside, 0);
    (void)cudaGetLastError();
    cudaCheck(cudaStreamEndCapture(s, &g));
    cudaCheck(cudaGraphDestroy(g));
    check("capture: a wait for an event recorded outside it fails",
          iso == cudaErrorStreamCaptureIsolation);
    /* an async copy from pageable host memory while capturing; from pinned */
    int pageable = 5, *pinned;
    cudaCheck(cudaMallocHost(&pinned, sizeof(int)));
    *pinned = 6;
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t from_pageable = cudaMemcpyAsync(d, &pageable, sizeof(int), cudaMemcpyHostToDevice, s);
    (void)cudaGetLastError();
    cudaError_t from_pinned = cudaMemcpyAsync(d, pinned, sizeof(int), cudaMemcpyHostToDevice, s);
    cudaCheck(cudaStreamEndCapture(s, &g));
    cudaCheck(cudaGraphDestroy(g));
    check("capture: an async copy from pageable memory fails, pinned not",
          from_pageable == cudaErrorStreamCaptureUnsupported && from_pinned == cudaSuccess);
    cudaCheck(cudaFreeHost(pinned));
    /* work on a stream that never joined: the shim aborts (a child process) */
    check("capture: work on a stream outside the capture aborts", aborts([&]() {
            cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
            cudaMemsetAsync(d, 4, sizeof(int), t);
          }));
    cudaCheck(cudaEventDestroy(forked));
    cudaCheck(cudaEventDestroy(join));
    cudaCheck(cudaEventDestroy(outside));
    cudaCheck(cudaStreamDestroy(s));
    cudaCheck(cudaStreamDestroy(t));
    cudaCheck(cudaFree(d));
  }
  /* 11. dynamic shared memory above 48 KiB: a launch needs the kernel's
   * limit raised first (CUDA fails it otherwise); the shim aborts */
  {
    int *d;
    cudaCheck(cudaMalloc(&d, 64 * sizeof(int)));
    bool unraised = aborts([&]() { RTC_LAUNCH_SMEM(k_fill, 1, 64, 64 * 1024, d, 64, 1); });
    cudaCheck(cudaFuncSetAttribute(k_fill, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    RTC_LAUNCH_SMEM(k_fill, 1, 64, 64 * 1024, d, 64, 1);
    int h[64], ok = 1;
    cudaCheck(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) ok &= h[i] == 1;
    check("launch: 64 KiB of shared memory needs the limit raised", unraised && ok);
    cudaCheck(cudaFree(d));
  }
  /* 12. a 16-byte vector load from an address 4 bytes past alignment: the
   * GPU faults, the shim aborts (a child process); aligned, it loads */
  {
    float *d, h[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[4];
    cudaCheck(cudaMalloc(&d, 12 * sizeof(float)));
    cudaCheck(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    bool misaligned = aborts([&]() { RTC_LAUNCH(k_ldv, 1, 1, 0, d + 8, d + 1); });
    RTC_LAUNCH(k_ldv, 1, 1, 0, d + 8, d + 4);
    cudaCheck(cudaMemcpy(got, d + 8, sizeof got, cudaMemcpyDeviceToHost));
    check("vector loads: a misaligned one aborts, an aligned one loads",
          misaligned && got[0] == 5 && got[3] == 8);
    cudaCheck(cudaFree(d));
  }
  /* 13. the order threads and blocks run in: block 0's thread 0 first, or
   * with RTCH_REVERSE=1 (the kernel tests' second run) the last block's
   * last thread first, a warp's lanes last first */
  {
    int *d, h[128];
    cudaCheck(cudaMalloc(&d, 129 * sizeof(int)));
    cudaCheck(cudaMemset(d, 0, 129 * sizeof(int)));
    RTC_LAUNCH(k_order, 2, 64, 0, d, d + 128);
    cudaCheck(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    const char *r = getenv("RTCH_REVERSE");
    int rev = r && *r && strcmp(r, "0") != 0, ok = 1;
    for (int i = 0; i < 128; i++) ok &= h[i] == (rev ? 127 - i : i);
    check(rev ? "order: reversed (RTCH_REVERSE)" : "order: block 0's thread 0 first", ok);
    cudaCheck(cudaFree(d));
  }
  cudaCheck(cudaGetLastError());
  if (failures) printf("%d check(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
