/* k_embed.cu — token and positional embeddings, rotary embeddings
 * (runtime/k_embed.inc and the range embeddings of train_support.c on the
 * GPU).
 *
 * The gradients that sum rows add them in row order with no atomics, as the
 * cpu does: dwte and dtable by one thread per (column, token bucket) walking
 * every row (the tokens staged through shared memory) and taking those
 * whose token falls in its bucket (token mod RT_EMB_BUCKETS), so a row of
 * the table is only ever written by one thread
 * and repeated tokens add in position order; dwpe by one thread per
 * (position, column) walking the batch.
 */
#include "common.cuh"
#include "rtc_bf16_io.cuh"

#define RT_EMB_THREADS 256
#define RT_EMB_BUCKETS 256 // token buckets (grid.y) of the embedding backward
#define RT_EMB_TILE 2048   // tokens staged in shared memory at a time

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

// dtable is (Vl,C) for tokens [v0, v0+Vl), dout is (N,C), tokens is (N).
// grid (ceil(C/256), RT_EMB_BUCKETS): thread (c, bucket) adds, rows in
// order, dout[n,c] to dtable[t,c] for every row n whose t = tokens[n] - v0
// is in the table and in the bucket (t % RT_EMB_BUCKETS): each (t, c) has
// one owner, so the sums are the same every run.  The tokens go through
// shared memory a tile at a time.  (With 32 buckets each thread walked all
// of GPT-2's 131,072 rows for 1/32 of them: 18 ms a call on the H200.)
template <class T>
__global__ void embedding_backward_kernel(float *dtable, const T *dout, const int32_t *tokens,
                                          int N, int v0, int Vl, int C) {
  __shared__ int32_t tok[RT_EMB_TILE];
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int bucket = blockIdx.y;
  for (int n0 = 0; n0 < N; n0 += RT_EMB_TILE) {
    int len = N - n0 < RT_EMB_TILE ? N - n0 : RT_EMB_TILE;
    __syncthreads(); // the last tile is read by every thread
    for (int i = threadIdx.x; i < len; i += blockDim.x) tok[i] = __ldg(tokens + n0 + i) - v0;
    __syncthreads();
    if (c < C)
      for (int i = 0; i < len; i++) {
        int t = tok[i];
        if (t < 0 || t >= Vl || t % RT_EMB_BUCKETS != bucket) continue;
        dtable[(size_t)t * C + c] += rtc_ldf(dout + (size_t)(n0 + i) * C + c);
      }
  }
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

template <class T>
static void embedding_backward(float *dtable, const T *dout, const int32_t *tokens, int N,
                               int v0, int Vl, int C) {
  if (N <= 0 || C <= 0 || Vl <= 0) return;
  dim3 grid((unsigned)((C + RT_EMB_THREADS - 1) / RT_EMB_THREADS), RT_EMB_BUCKETS);
  RTC_LAUNCH(embedding_backward_kernel<T>, grid, RT_EMB_THREADS, 0, dtable, dout, tokens, N, v0,
             Vl, C);
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
