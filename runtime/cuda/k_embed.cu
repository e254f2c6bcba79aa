/* k_embed.cu — token and positional embeddings, rotary embeddings
 * (runtime/k_embed.inc and the range embeddings of train_support.c on the
 * GPU).
 *
 * The gradients that sum rows add them in row order with no atomics, as the
 * cpu does, so their sums are the cpu kernel's bit for bit.  dwte and
 * dtable: the rows are first listed by token bucket (token mod
 * RT_EMB_BUCKETS), in row order within a bucket, in the kernel workspace
 * (rtc_ws_embedding_bwd: a count per bucket, their prefix sums, the list);
 * then one thread per (column, bucket) walks its bucket's rows, keeping a
 * token's running sum in a register while consecutive rows share it, so a
 * row of the table is only ever written by one thread and repeated tokens
 * add in position order.  (The previous kernel had every thread walk all
 * the rows for its bucket's: 18 ms a call for GPT-2's 131,072 rows on the
 * H200, 2.4% of its step.)  dwpe: one thread per (position, column)
 * walking the batch.
 */
#include "common.cuh"
#include "rtc_bf16_io.cuh"

#define RT_EMB_THREADS 256
#define RT_EMB_BUCKETS RTC_EMB_BUCKETS // token buckets of the embedding backward (rtc_ws.h)

/* The kernels are templated on the storage type T of the activations
 * (float, or rtc_bf16 under precision = bf16: loaded as float, computed in
 * float, stored rounded; rtc_bf16_io.cuh); the tables (wte, wpe) and their
 * gradients are float either way. */

// out is (N,C), tokens is (N), table is (Vl,C) holding tokens [v0, v0+Vl):
// rows whose token is outside give zeros.
template <class T>
__global__ void embedding_forward_kernel(T *out, const int32_t *tokens,
                                         const float *__restrict__ table, int N, int v0, int Vl,
                                         int C) {
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < (size_t)N * C;
       k += (size_t)gridDim.x * blockDim.x) {
    int n = (int)(k / C), c = (int)(k % C), t = __ldg(tokens + n) - v0;
    rtc_stf(out + k, t >= 0 && t < Vl ? __ldg(table + (size_t)t * C + c) : 0.0f);
  }
}

// The embedding backward's three passes over tokens (N) for the table
// rows [v0, v0+Vl): token t - v0 is in the table and in bucket b.
__device__ __forceinline__ bool emb_in_bucket(int t, int Vl, int b) {
  return t >= 0 && t < Vl && t % RT_EMB_BUCKETS == b;
}

// 1: block b counts the rows of bucket b.
__global__ void embedding_bucket_count_kernel(int *count, const int32_t *tokens, int N, int v0,
                                              int Vl) {
  __shared__ int part[RT_EMB_THREADS / 32];
  int b = blockIdx.x, c = 0;
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    c += emb_in_bucket(__ldg(tokens + n) - v0, Vl, b);
  }
  for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++) s += part[w];
    count[b] = s;
  }
}

// 2: start[b] = rows in the buckets before b (one thread; start[B] = all).
__global__ void embedding_bucket_start_kernel(int *start, const int *count) {
  if (threadIdx.x || blockIdx.x) return;
  int s = 0;
  for (int b = 0; b < RT_EMB_BUCKETS; b++) {
    start[b] = s;
    s += count[b];
  }
  start[RT_EMB_BUCKETS] = s;
}

// 3: block b writes its rows, in row order, and their tokens at start[b]:
// a tile of blockDim rows at a time, each warp's matches ranked by a ballot.
__global__ void embedding_bucket_list_kernel(int *rows, int *toks, const int *start,
                                             const int32_t *tokens, int N, int v0, int Vl) {
  __shared__ int wsum[RT_EMB_THREADS / 32];
  __shared__ int base;
  int b = blockIdx.x, lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  if (threadIdx.x == 0) base = start[b];
  for (int n0 = 0; n0 < N; n0 += blockDim.x) {
    int n = n0 + threadIdx.x, t = n < N ? __ldg(tokens + n) - v0 : -1;
    bool mine = emb_in_bucket(t, Vl, b);
    unsigned m = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) wsum[w] = __popc(m);
    __syncthreads(); // wsum and base
    int at = base, total = 0;
    for (int k = 0; k < nw; k++) {
      at += k < w ? wsum[k] : 0;
      total += wsum[k];
    }
    if (mine) {
      at += __popc(m & ((1u << lane) - 1u));
      rows[at] = n;
      toks[at] = t;
    }
    __syncthreads(); // every thread has read wsum and base
    if (threadIdx.x == 0) base += total;
  }
}

// 4: dtable is (Vl,C), dout is (N,C).  Thread (c, bucket) walks its
// bucket's rows in order, adding dout[n,c] into a running sum of dtable[t,c]
// that it stores when the token changes (and reloads if it comes back), so
// each (t, c) gets dtable + its rows in row order: the cpu kernel's sums.
// RT_EMB_ILP rows' loads are issued before their adds: the walk of a
// frequent token's bucket (a byte-level text's space: a sixth of the rows)
// is a chain of dependent loads, and the kernel's time that chain's
// latency, so it moves 16 rows a round trip.
#define RT_EMB_ILP 16
#ifdef RTC_HOST
#define RT_EMB_UNROLL _Pragma("GCC unroll 16")
#else
#define RT_EMB_UNROLL _Pragma("unroll")
#endif
template <class T>
__global__ void embedding_backward_kernel(float *dtable, const T *dout, const int *start,
                                          const int *rows, const int *toks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (c >= C) return;
  int i = start[b], end = start[b + 1], cur = -1;
  float acc = 0.0f;
  while (i < end) {
    int k = end - i < RT_EMB_ILP ? end - i : RT_EMB_ILP, t[RT_EMB_ILP], r[RT_EMB_ILP];
    float d[RT_EMB_ILP];
RT_EMB_UNROLL
    for (int j = 0; j < RT_EMB_ILP; j++) {
      t[j] = j < k ? toks[i + j] : -1;
      r[j] = j < k ? rows[i + j] : 0;
    }
RT_EMB_UNROLL
    for (int j = 0; j < RT_EMB_ILP; j++) d[j] = j < k ? rtc_ldf(dout + (size_t)r[j] * C + c) : 0.0f;
RT_EMB_UNROLL
    for (int j = 0; j < RT_EMB_ILP; j++) {
      if (j >= k) break;
      if (t[j] != cur) {
        if (cur >= 0) dtable[(size_t)cur * C + c] = acc;
        cur = t[j];
        acc = dtable[(size_t)cur * C + c];
      }
      acc += d[j];
    }
    i += k;
  }
  if (cur >= 0) dtable[(size_t)cur * C + c] = acc;
}

// out and inp are (B,T,C) (out may alias inp), wpe is (maxT,C)
template <class T>
__global__ void positional_forward_kernel(T *out, const T *inp, const float *__restrict__ wpe,
                                          int B, int Tn, int C, int t0) {
  size_t total = (size_t)B * Tn * C;
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total;
       k += (size_t)gridDim.x * blockDim.x) {
    size_t bt = k / C;
    int c = (int)(k % C), t = (int)(bt % Tn);
    rtc_stf(out + k, rtc_ldf(inp + k) + __ldg(wpe + (size_t)(t0 + t) * C + c));
  }
}

// dinp is (B,T,C) or NULL, dwpe is (maxT,C) or NULL, dout is (B,T,C).
// Thread (t, c): dinp[b,t,c] += dout[b,t,c] and dwpe[t0+t,c] += dout[b,t,c]
// for b in order.
template <class T>
__global__ void positional_backward_kernel(T *dinp, float *dwpe, const T *dout, int B, int Tn,
                                           int C, int t0) {
  size_t total = (size_t)Tn * C;
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total;
       k += (size_t)gridDim.x * blockDim.x) {
    int t = (int)(k / C), c = (int)(k % C);
    float acc = dwpe ? dwpe[(size_t)(t0 + t) * C + c] : 0.0f;
    for (int b = 0; b < B; b++) {
      size_t i = ((size_t)b * Tn + t) * C + c;
      float g = rtc_ldf(dout + i);
      if (dinp) rtc_stf(dinp + i, rtc_ldf(dinp + i) + g);
      acc += g;
    }
    if (dwpe) dwpe[(size_t)(t0 + t) * C + c] = acc;
  }
}

// out and in are (B,T,H,D) (out may alias in).  Thread (bt, i) rotates the
// pair (i, i + D/2) of every head of row bt by dir·angle, angle = pos /
// theta^(2i/D) formed in float as k_embed.inc (HF's convention); acc: +=.
template <class T>
__global__ void rope_kernel(T *out, const T *in, int BT, int Tn, int H, int D, double theta,
                            int t0, int dir, int acc) {
  int half = D / 2;
  size_t total = (size_t)BT * half;
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total;
       k += (size_t)gridDim.x * blockDim.x) {
    int bt = (int)(k / half), i = (int)(k % half), pos = t0 + bt % Tn;
    float e = (float)(2 * i) / (float)D;
    float inv = 1.0f / (float)pow(theta, (double)e);
    float ang = (float)pos * inv;
    float c = (float)cos((double)ang), s = (float)sin((double)ang) * (float)dir;
    const T *x = in + (size_t)bt * H * D;
    T *y = out + (size_t)bt * H * D;
    for (int h = 0; h < H; h++, x += D, y += D) {
      float x1 = rtc_ldf(x + i), x2 = rtc_ldf(x + i + half);
      float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
      if (acc) {
        rtc_stf(y + i, rtc_ldf(y + i) + y1);
        rtc_stf(y + i + half, rtc_ldf(y + i + half) + y2);
      } else {
        rtc_stf(y + i, y1);
        rtc_stf(y + i + half, y2);
      }
    }
  }
}

static unsigned blocks(size_t n) { return rtc_blocks(n, RT_EMB_THREADS); }

/* The launchers, for either storage type. */
template <class T>
static void embedding_forward(T *out, const int32_t *tokens, const float *table, int N, int v0,
                              int Vl, int C) {
  if (N > 0 && C > 0)
    RTC_LAUNCH(embedding_forward_kernel<T>, blocks((size_t)N * C), RT_EMB_THREADS, 0, out, tokens,
               table, N, v0, Vl, C);
}

static void *rtc_emb_ws;
static size_t rtc_emb_ws_bytes;

template <class T>
static void embedding_backward(float *dtable, const T *dout, const int32_t *tokens, int N,
                               int v0, int Vl, int C) {
  if (N <= 0 || C <= 0 || Vl <= 0) return;
  // the workspace: count[B], start[B + 1], then the rows and their tokens (rtc_ws.h)
  int *count = (int *)rtc_ws_scratch(rtc_ws_embedding_bwd(N), &rtc_emb_ws, &rtc_emb_ws_bytes,
                                     "embedding backward's token lists", __FILE__, __LINE__);
  int *start = count + RT_EMB_BUCKETS;
  int *rows = (int *)((char *)count + rtc_ws_round(sizeof(int) * (2 * RT_EMB_BUCKETS + 1)));
  int *toks = rows + N;
  RTC_LAUNCH(embedding_bucket_count_kernel, RT_EMB_BUCKETS, RT_EMB_THREADS, 0, count, tokens, N,
             v0, Vl);
  RTC_LAUNCH(embedding_bucket_start_kernel, 1, 32, 0, start, count);
  RTC_LAUNCH(embedding_bucket_list_kernel, RT_EMB_BUCKETS, RT_EMB_THREADS, 0, rows, toks, start,
             tokens, N, v0, Vl);
  dim3 grid((unsigned)((C + RT_EMB_THREADS - 1) / RT_EMB_THREADS), RT_EMB_BUCKETS);
  RTC_LAUNCH(embedding_backward_kernel<T>, grid, RT_EMB_THREADS, 0, dtable, dout, start, rows,
             toks, C);
}

template <class T>
static void positional_forward(T *out, const T *inp, const float *wpe, int B, int Tn, int C,
                               int t0) {
  size_t n = B > 0 && Tn > 0 && C > 0 ? (size_t)B * Tn * C : 0;
  if (n)
    RTC_LAUNCH(positional_forward_kernel<T>, blocks(n), RT_EMB_THREADS, 0, out, inp, wpe, B, Tn,
               C, t0);
}

template <class T>
static void positional_backward(T *dinp, float *dwpe, const T *dout, int B, int Tn, int C,
                                int t0) {
  size_t n = Tn > 0 && C > 0 ? (size_t)Tn * C : 0;
  if (n && B > 0 && (dinp || dwpe))
    RTC_LAUNCH(positional_backward_kernel<T>, blocks(n), RT_EMB_THREADS, 0, dinp, dwpe, dout, B,
               Tn, C, t0);
}

// dir 1: the forward (written); -1: the backward (accumulated)
template <class T>
static void rope(T *out, const T *inp, int B, int Tn, int H, int D, double theta, int t0,
                 int dir) {
  size_t n = B > 0 && Tn > 0 && D >= 2 ? (size_t)B * Tn * (D / 2) : 0;
  if (n)
    RTC_LAUNCH(rope_kernel<T>, blocks(n), RT_EMB_THREADS, 0, out, inp, B * Tn, Tn, H, D, theta,
               t0, dir, dir < 0 ? 1 : 0);
}

extern "C" {

int rt_embedding_forward_cu(float *out, const int32_t *tokens, const float *wte, int N, int V,
                            int C) {
  embedding_forward(out, tokens, wte, N, 0, V, C);
  return 0;
}

void rt_embedding_backward_cu(float *dwte, const float *dout, const int32_t *tokens, int N,
                              int C) {
  /* Tokens were checked against V when the batch was loaded: any nonnegative
   * token is a row of dwte. */
  embedding_backward(dwte, dout, tokens, N, 0, 0x7fffffff, C);
}

int rt_embedding_range_forward_cu(float *out, const int32_t *tokens, const float *table, int N,
                                  int v0, int Vl, int C, int V) {
  (void)V;  // tokens outside [0,V) are outside [v0,v0+Vl) too: zero rows
  embedding_forward(out, tokens, table, N, v0, Vl, C);
  return 0;
}

void rt_embedding_range_backward_cu(float *dtable, const float *dout, const int32_t *tokens,
                                    int N, int v0, int Vl, int C) {
  embedding_backward(dtable, dout, tokens, N, v0, Vl, C);
}

void rt_positional_forward_cu(float *out, const float *inp, const float *wpe, int B, int T,
                              int C, int t0) {
  positional_forward(out, inp, wpe, B, T, C, t0);
}

void rt_positional_backward_cu(float *dinp, float *dwpe, const float *dout, int B, int T, int C,
                               int t0) {
  positional_backward(dinp, dwpe, dout, B, T, C, t0);
}

void rt_rope_forward_cu(float *out, const float *inp, int B, int T, int H, int D, double theta,
                        int t0) {
  rope(out, inp, B, T, H, D, theta, t0, 1);
}

void rt_rope_backward_cu(float *dinp, const float *dout, int B, int T, int H, int D,
                         double theta, int t0) {
  rope(dinp, dout, B, T, H, D, theta, t0, -1);
}

}  // extern "C"

/* ---- precision = bf16: out, inp, dout, dinp bf16 ---- */

int rt_embedding_forward_cu(rtc_bf16 *out, const int32_t *tokens, const float *wte, int N, int V,
                            int C) {
  embedding_forward(out, tokens, wte, N, 0, V, C);
  return 0;
}

void rt_embedding_backward_cu(float *dwte, const rtc_bf16 *dout, const int32_t *tokens, int N,
                              int C) {
  embedding_backward(dwte, dout, tokens, N, 0, 0x7fffffff, C);
}

int rt_embedding_range_forward_cu(rtc_bf16 *out, const int32_t *tokens, const float *table,
                                  int N, int v0, int Vl, int C, int V) {
  (void)V;
  embedding_forward(out, tokens, table, N, v0, Vl, C);
  return 0;
}

void rt_embedding_range_backward_cu(float *dtable, const rtc_bf16 *dout, const int32_t *tokens,
                                    int N, int v0, int Vl, int C) {
  embedding_backward(dtable, dout, tokens, N, v0, Vl, C);
}

void rt_positional_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, const float *wpe, int B, int T,
                              int C, int t0) {
  positional_forward(out, inp, wpe, B, T, C, t0);
}

void rt_positional_backward_cu(rtc_bf16 *dinp, float *dwpe, const rtc_bf16 *dout, int B, int T,
                               int C, int t0) {
  positional_backward(dinp, dwpe, dout, B, T, C, t0);
}

void rt_rope_forward_cu(rtc_bf16 *out, const rtc_bf16 *inp, int B, int T, int H, int D,
                        double theta, int t0) {
  rope(out, inp, B, T, H, D, theta, t0, 1);
}

void rt_rope_backward_cu(rtc_bf16 *dinp, const rtc_bf16 *dout, int B, int T, int H, int D,
                         double theta, int t0) {
  rope(dinp, dout, B, T, H, D, theta, t0, -1);
}
