/* k_attention.cu — multi-head attention with grouped-query heads, fused and
 * tiled in the FlashAttention-2 structure; the semantics of the cpu kernels
 * of k_attention.inc (see shardrt_kernels.h): q is (B,T,H,D), k and v are
 * (B,T,Hkv,D), query head h reads kv head h / (H/Hkv), scale 1/sqrt(D),
 * causal masks key j > t; lse (B,H,T) is the logsumexp of the scaled scores.
 *
 * Two sets of kernels, the same structure (below), tiles of ATT_BQ = 64
 * queries against tiles of ATT_BK = 64 keys, 128 threads a block:
 *   - fp32 storage (S = float, the checking mode): CUDA cores, fp32
 *     throughout (the kernels templated on S, described first);
 *   - bf16 storage (precision = bf16, rtc_bf16): the *_tc kernels, the
 *     GEMMs on the tensor cores (described after).
 * The S-templated kernels would compile for S = rtc_bf16 too (widening as
 * the tiles are loaded, att_ld, rounding when stored, att_st); the
 * launchers send bf16 to the tensor-core kernels, and only the delta
 * kernel of the backward serves both.
 *
 * The CUDA-core kernels.  Shared memory holds fp32 tiles.  A block is seen
 * as 8 row groups of 16 lanes: in every 64x64 score tile, thread (ty,tx)
 * holds rows ty+8i (i<8) and columns tx+16j (j<4); a row's 16 lanes are
 * one half-warp, so the
 * row reductions of the softmax are 4 shuffles. The per-row accumulators
 * (output, dq, dk, dv) are 8 rows x NJ columns tx+16j of the head dim per
 * thread, in registers: NJ (1, 2, 4 or 8) is a template parameter with
 * 16·NJ >= D, so D is any value up to 128.
 *
 * Forward: one block per (query tile, head, batch row) loops over the key
 * tiles (those fully above the causal diagonal skipped), online softmax with
 * a running max and sum per row, no T×T buffer.
 * Backward, three kernels, no float atomics, so the gradients are bitwise
 * the same from run to run:
 *   1. delta[b,h,t] = rowsum(dout·out), one warp per row, into B·H·T
 *      floats of the program's kernel workspace (att_workspace, rtc_ws.h).
 *   2. one block per (key tile, kv head, batch row) owns dk, dv of its keys:
 *      it loops over the query heads of its group and the query tiles that
 *      see its keys, recomputing P = exp(S - lse) and dS, accumulating in
 *      registers, and adds to dk, dv once at the end.
 *   3. one block per (query tile, head, batch row) owns dq of its rows: it
 *      loops over the key tiles, recomputing P and dP (the extra pass over
 *      S that keeps dq free of atomics), and adds to dq once at the end.
 * Shared memory is dynamic, opted in with cudaFuncSetAttribute: at D=128
 * 117 KB forward and 150 KB backward (fits sm_80's 163 KB and sm_90's
 * 227 KB; GPUs with 99 KB a block, sm_86/89, would need D <= 64); at D=64
 * 69 KB and 86 KB. Tiles read along the lanes are stored transposed with a
 * stride of 65, rows read by a half-warp in broadcast with D+1, so neither
 * pattern has bank conflicts. Registers: at most 255 (dk/dv at D=128), no
 * spills on sm_80 or sm_90a.
 *
 * The tensor-core kernels (bf16 storage): every GEMM of the forward
 * (s = q·kᵀ, o += p·v) and of the backward (s and dp = dout·vᵀ recomputed,
 * dv += pᵀ·dout, dk += dsᵀ·q, dq += ds·k) runs as nvcuda::wmma 16x16x16
 * bf16 fragments with fp32 accumulators (mma.sync HMMA on sm_80 and
 * sm_90a), so the fragment layout stays opaque and the host build can run
 * the same code through host/wmma_host.h.  The online softmax, lse and
 * delta stay fp32; p and ds are rounded to bf16 before their GEMMs (as
 * FlashAttention does; the softmax's row sum adds the unrounded p).  The
 * 4 warps of a block split the tile's 64 rows, 16 each (queries in the
 * forward and in dq, keys in dk/dv), so the score GEMMs, the softmax and
 * the second GEMM of a warp need only __syncwarp; __syncthreads guards the
 * cooperative tile loads.  A warp's scores go through shared memory (fp32,
 * rows ATC_LDS = 68 floats apart) to the softmax, where lane l holds row
 * l/2 and columns l%2 + 2j (the pair's max and sum one shuffle); p and ds
 * go back as bf16 tiles (rows ATC_LDP = 72 apart).  Accumulators: dq, dk,
 * dv stay in fragments (NJ = D/16 a warp, each) across the whole loop and
 * are added to global memory once at the end through a 16x16 stage; the
 * forward's output, which the online softmax rescales by row, lives in
 * shared memory (fp32, rows dc+4 apart) and is loaded into fragments for
 * each p·v.  q, k, v, dout tiles are bf16, (64, dc) rows dc+8 apart
 * (dc = 16·NJ, zero past D and past T; 16-byte copies when D % 8 == 0), so
 * the bf16 fragments' rows are 16 bytes off one bank cycle.  Key (query)
 * blocks of 16 that a warp's rows cannot see (causal, or past T) are
 * skipped in its GEMMs; their scores are never read.  Dynamic shared
 * memory (base rounded up to 128 bytes): forward 70.1 KB at D=64, 110.1 KB
 * at D=128; backward (both kernels) 88.6 KB and 120.6 KB (at D=64 an
 * sm_90 SM holds 3 forward or 2 backward blocks).  Registers (nvcc 13.0
 * -Xptxas -v, NJ = 1/2/4/8): sm_90a forward 64/64/72/56, dk/dv
 * 80/96/168/250, dq 80/70/96/168; sm_80 forward 72/96/96/72, dk/dv
 * 80/96/159/248, dq 96/80/126/168.  No spills except the forward at NJ=1 on
 * sm_80 (12 bytes).  Not done
 * yet: overlapping the next tile's loads with the GEMMs (cp.async or the
 * bulk tensor copies) and Hopper's wgmma; the speed on a GPU is unmeasured.
 */
#include "common.cuh"

#include <math.h>

#include <type_traits>
#ifdef RTC_HOST
#include "host/wmma_host.h"
#else
#include <mma.h>
#endif
namespace wmma = nvcuda::wmma;

#define ATT_BQ 64                 // queries per tile
#define ATT_BK 64                 // keys per tile
#define ATT_THREADS 128           // ATT_TY row groups x ATT_TX lanes
#define ATT_TX 16                 // lanes per row (a half-warp)
#define ATT_TY 8                  // row groups
#define ATT_RI (ATT_BQ / ATT_TY)  // rows per thread, 8 (ATT_BQ == ATT_BK)
#define ATT_CJ (ATT_BK / ATT_TX)  // score columns per thread, 4
#define ATT_LDT (ATT_BK + 1)      // stride of a transposed tile (D, 64)
#define ATT_LDP (ATT_BK + 16)     // stride of a score tile: the half-warps' rows 16 banks apart
#define ATT_DMAX 128              // largest head dim

// Full unrolling of the loops over a thread's rows and columns, so that the
// accumulators stay in registers (g++ of the host build spells it its way).
#ifdef RTC_HOST
#define ATT_UNROLL _Pragma("GCC unroll 8")
#define ATT_UNROLL2 _Pragma("GCC unroll 2")
#else
#define ATT_UNROLL _Pragma("unroll")
#define ATT_UNROLL2 _Pragma("unroll 2")  // dk/dv's score GEMMs: no spill at D=128
#endif

// Element loads and stores of q, k, v, out and the gradients: fp32, or bf16
// storage (rounded to nearest even).
__device__ __forceinline__ float att_ld(const float *p) { return *p; }
__device__ __forceinline__ void att_st(float *p, float v) { *p = v; }
__device__ __forceinline__ float att_ld(const rtc_bf16 *p) { return rtc_bf2f(*p); }
__device__ __forceinline__ void att_st(rtc_bf16 *p, float v) { *p = rtc_f2bf(v); }

// Max and sum over the 16 lanes of a half-warp (one row of a score tile).
__device__ __forceinline__ float att_max16(float v) {
  for (int o = ATT_TX / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float att_sum16(float v) {
  for (int o = ATT_TX / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Rows [t0, t0+n) of one head: s[r*ld + d] = g[(t0+r)*ldg + d] for d < dc,
// 0 past T or past D (g points at row 0 of the head, rows ldg apart).
template <class S>
__device__ __forceinline__ void att_load_rows(float *s, int ld, const S *g, size_t ldg,
                                              int t0, int n, int T, int D, int dc) {
  for (int e = threadIdx.x; e < n * dc; e += ATT_THREADS) {
    int r = e / dc, d = e - r * dc;
    s[r * ld + d] = t0 + r < T && d < D ? att_ld(g + (size_t)(t0 + r) * ldg + d) : 0.0f;
  }
}
// The same rows transposed: s[d*ATT_LDT + r] for d < dc (reads along d stay coalesced).
template <class S>
__device__ __forceinline__ void att_load_rows_t(float *s, const S *g, size_t ldg, int t0,
                                                int n, int T, int D, int dc) {
  for (int e = threadIdx.x; e < n * dc; e += ATT_THREADS) {
    int r = e / dc, d = e - r * dc;
    s[d * ATT_LDT + r] = t0 + r < T && d < D ? att_ld(g + (size_t)(t0 + r) * ldg + d) : 0.0f;
  }
}

// Bytes of dynamic shared memory of each kernel for head dim D (dc = 16·NJ).
static size_t att_fwd_smem(int D, int dc) {
  return sizeof(float) * ((size_t)ATT_BQ * (D + 1) + (size_t)dc * ATT_LDT + (size_t)ATT_BK * dc +
                          (size_t)ATT_BQ * ATT_LDP);
}
static size_t att_bwd_smem(int D, int dc) {
  return sizeof(float) * (2 * (size_t)ATT_BQ * (D + 1) + 2 * (size_t)dc * ATT_LDT +
                          (size_t)ATT_BQ * ATT_LDP + 2 * ATT_BQ);
}

// out is (B,T,H,D), lse is (B,H,T), q is (B,T,H,D), k and v are (B,T,Hkv,D);
// grid (ceil(T/64), H, B), ATT_THREADS threads, att_fwd_smem(D, 16·NJ) bytes.
template <int NJ, class S>
__global__ void
    attention_forward_kernel(S *out, float *lse, const S *q, const S *k, const S *v, int T,
                             int H, int Hkv, int D, int causal, float scale) {
  const int dc = 16 * NJ, ldq = D + 1;
  RTC_DYNAMIC_SHARED(float, smem);
  float *Qs = smem;                    // (BQ, D), rows ldq apart
  float *Kt = Qs + ATT_BQ * ldq;       // (dc, BK) transposed, rows ATT_LDT apart
  float *Vs = Kt + dc * ATT_LDT;       // (BK, dc), 0 past D
  float *Ps = Vs + ATT_BK * dc;        // (BQ, BK) probabilities, rows ATT_LDP apart
  int q0 = blockIdx.x * ATT_BQ, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  int tx = threadIdx.x % ATT_TX, ty = threadIdx.x / ATT_TX;
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  const S *qb = q + (size_t)b * T * ldh + (size_t)h * D;
  const S *kb = k + (size_t)b * T * ldkv + (size_t)hk * D;
  const S *vb = v + (size_t)b * T * ldkv + (size_t)hk * D;
  att_load_rows(Qs, ldq, qb, ldh, q0, ATT_BQ, T, D, D);

  float m[ATT_RI], l[ATT_RI], o[ATT_RI][NJ];
ATT_UNROLL
  for (int i = 0; i < ATT_RI; i++) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
ATT_UNROLL
    for (int jd = 0; jd < NJ; jd++) o[i][jd] = 0.0f;
  }
  int kend = causal ? min(T, q0 + ATT_BQ) : T;  // keys any row of the tile sees
  for (int j0 = 0; j0 < kend; j0 += ATT_BK) {
    __syncthreads();  // Qs is loaded; the last tile's Kt, Vs, Ps are read
    att_load_rows_t(Kt, kb, ldkv, j0, ATT_BK, T, D, D);
    att_load_rows(Vs, dc, vb, ldkv, j0, ATT_BK, T, D, dc);
    __syncthreads();
    // s = q_tile · k_tileᵀ, this thread's (8, 4)
    float s[ATT_RI][ATT_CJ];
ATT_UNROLL
    for (int i = 0; i < ATT_RI; i++)
ATT_UNROLL
      for (int j = 0; j < ATT_CJ; j++) s[i][j] = 0.0f;
    for (int d = 0; d < D; d++) {
      float qv[ATT_RI], kv[ATT_CJ];
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++) qv[i] = Qs[(ty + ATT_TY * i) * ldq + d];
ATT_UNROLL
      for (int j = 0; j < ATT_CJ; j++) kv[j] = Kt[d * ATT_LDT + tx + ATT_TX * j];
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++)
ATT_UNROLL
        for (int j = 0; j < ATT_CJ; j++) s[i][j] += qv[i] * kv[j];
    }
    // online softmax: p = exp(scale·s - m_new), masked keys 0; the row's
    // earlier output and sum rescaled by exp(m_old - m_new)
ATT_UNROLL
    for (int i = 0; i < ATT_RI; i++) {
      int t = q0 + ty + ATT_TY * i;  // this row's query
      int jn = causal ? min(kend, t + 1) : kend;  // keys it sees
      float mx = -INFINITY;
ATT_UNROLL
      for (int j = 0; j < ATT_CJ; j++) {
        s[i][j] *= scale;
        if (j0 + tx + ATT_TX * j < jn) mx = fmaxf(mx, s[i][j]);
      }
      mx = att_max16(mx);
      float mnew = fmaxf(m[i], mx), sum = 0.0f;
ATT_UNROLL
      for (int j = 0; j < ATT_CJ; j++) {
        float p = j0 + tx + ATT_TX * j < jn ? expf(s[i][j] - mnew) : 0.0f;
        Ps[(ty + ATT_TY * i) * ATT_LDP + tx + ATT_TX * j] = p;
        sum += p;
      }
      sum = att_sum16(sum);
      if (mnew != -INFINITY) {  // a row of the padding past T may see no key yet
        float corr = expf(m[i] - mnew);  // 0 on the first tile (m = -inf)
        l[i] = l[i] * corr + sum;
ATT_UNROLL
        for (int jd = 0; jd < NJ; jd++) o[i][jd] *= corr;
        m[i] = mnew;
      }
    }
    __syncthreads();
    // o += p · v_tile, this thread's (8, NJ) of (BQ, dc)
    int kn = min(ATT_BK, kend - j0);
    for (int c = 0; c < kn; c++) {
      float vv[NJ];
ATT_UNROLL
      for (int jd = 0; jd < NJ; jd++) vv[jd] = Vs[c * dc + tx + ATT_TX * jd];
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++) {
        float p = Ps[(ty + ATT_TY * i) * ATT_LDP + c];
ATT_UNROLL
        for (int jd = 0; jd < NJ; jd++) o[i][jd] += p * vv[jd];
      }
    }
  }
ATT_UNROLL
  for (int i = 0; i < ATT_RI; i++) {
    int t = q0 + ty + ATT_TY * i;
    if (t >= T) continue;
    float inv = 1.0f / l[i];
    S *orow = out + ((size_t)b * T + t) * ldh + (size_t)h * D;
ATT_UNROLL
    for (int jd = 0; jd < NJ; jd++) {
      int d = tx + ATT_TX * jd;
      if (d < D) att_st(orow + d, o[i][jd] * inv);
    }
    if (lse && tx == 0) lse[((size_t)b * H + h) * T + t] = m[i] + logf(l[i]);
  }
}

// delta is (B,H,T) = rowsum(dout·out), dout and out are (B,T,H,D);
// one warp per (b,t,h) row, grid-stride over the rows, ATT_THREADS threads.
template <class S>
__global__ void
    attention_delta_kernel(float *delta, const S *dout, const S *out, int B, int T, int H,
                           int D) {
  size_t rows = (size_t)B * T * H, nwarps = (size_t)gridDim.x * (ATT_THREADS / 32);
  int lane = threadIdx.x % 32;
  // the bound is the same for a warp's 32 lanes, so whole warps leave together
  for (size_t row = (size_t)blockIdx.x * (ATT_THREADS / 32) + threadIdx.x / 32; row < rows;
       row += nwarps) {
    int h = (int)(row % H);
    size_t bt = row / H;  // b·T + t
    const S *dr = dout + row * D, *orow = out + row * D;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s += att_ld(dr + d) * att_ld(orow + d);
    s = rtc_warp_sum(s);
    if (lane == 0) delta[(bt / T * H + h) * T + bt % T] = s;
  }
}

// dk and dv are (B,T,Hkv,D), accumulated; the rest as the launcher. grid
// (ceil(T/64), Hkv, B), ATT_THREADS threads, att_bwd_smem(D, 16·NJ) bytes.
// In the score tile of this kernel rows are keys and columns queries (Sᵀ).
template <int NJ, class S>
__global__ void
    attention_backward_dkdv_kernel(S *dk, S *dv, const S *dout, const S *q, const S *k,
                                   const S *v, const float *lse, const float *delta, int T,
                                   int H, int Hkv, int D, int causal, float scale) {
  const int dc = 16 * NJ, ldk = D + 1;
  RTC_DYNAMIC_SHARED(float, smem);
  float *Ks = smem;                  // (BK, D), rows ldk apart
  float *Vs = Ks + ATT_BK * ldk;     // (BK, D), rows ldk apart
  float *Qt = Vs + ATT_BK * ldk;     // (dc, BQ) transposed, 0 past D
  float *dOt = Qt + dc * ATT_LDT;    // (dc, BQ) transposed, 0 past D
  float *Ps = dOt + dc * ATT_LDT;    // (BK, BQ): Pᵀ, then dSᵀ
  float *Ls = Ps + ATT_BK * ATT_LDP; // (BQ) lse of the query tile
  float *Dl = Ls + ATT_BQ;           // (BQ) delta of the query tile
  int j0 = blockIdx.x * ATT_BK, hk = blockIdx.y, b = blockIdx.z, rep = H / Hkv;
  int tx = threadIdx.x % ATT_TX, ty = threadIdx.x / ATT_TX;
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  size_t koff = (size_t)b * T * ldkv + (size_t)hk * D;
  att_load_rows(Ks, ldk, k + koff, ldkv, j0, ATT_BK, T, D, D);
  att_load_rows(Vs, ldk, v + koff, ldkv, j0, ATT_BK, T, D, D);

  float dka[ATT_RI][NJ], dva[ATT_RI][NJ];
ATT_UNROLL
  for (int i = 0; i < ATT_RI; i++)
ATT_UNROLL
    for (int jd = 0; jd < NJ; jd++) dka[i][jd] = dva[i][jd] = 0.0f;
  int qstart = causal ? j0 / ATT_BQ * ATT_BQ : 0;  // the first query tile that sees key j0
  for (int h = hk * rep; h < (hk + 1) * rep; h++) {
    const S *qb = q + (size_t)b * T * ldh + (size_t)h * D;
    const S *dob = dout + (size_t)b * T * ldh + (size_t)h * D;
    const float *lb = lse + ((size_t)b * H + h) * T, *db = delta + ((size_t)b * H + h) * T;
    for (int q0 = qstart; q0 < T; q0 += ATT_BQ) {
      __syncthreads();  // Ks, Vs are loaded; the last tile's Qt, dOt, Ps, Ls, Dl are read
      att_load_rows_t(Qt, qb, ldh, q0, ATT_BQ, T, D, dc);
      att_load_rows_t(dOt, dob, ldh, q0, ATT_BQ, T, D, dc);
      for (int r = threadIdx.x; r < ATT_BQ; r += ATT_THREADS) {
        Ls[r] = q0 + r < T ? lb[q0 + r] : 0.0f;
        Dl[r] = q0 + r < T ? db[q0 + r] : 0.0f;
      }
      __syncthreads();
      // sᵀ = k_tile · q_tileᵀ and dpᵀ = v_tile · dout_tileᵀ, this thread's (8, 4)
      float p[ATT_RI][ATT_CJ], dp[ATT_RI][ATT_CJ];
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++)
ATT_UNROLL
        for (int j = 0; j < ATT_CJ; j++) p[i][j] = dp[i][j] = 0.0f;
      for (int d = 0; d < D; d++) {
        float kv[ATT_RI], vv[ATT_RI], qv[ATT_CJ], gv[ATT_CJ];
ATT_UNROLL
        for (int i = 0; i < ATT_RI; i++) {
          kv[i] = Ks[(ty + ATT_TY * i) * ldk + d];
          vv[i] = Vs[(ty + ATT_TY * i) * ldk + d];
        }
ATT_UNROLL
        for (int j = 0; j < ATT_CJ; j++) {
          qv[j] = Qt[d * ATT_LDT + tx + ATT_TX * j];
          gv[j] = dOt[d * ATT_LDT + tx + ATT_TX * j];
        }
ATT_UNROLL
        for (int i = 0; i < ATT_RI; i++)
ATT_UNROLL
          for (int j = 0; j < ATT_CJ; j++) {
            p[i][j] += kv[i] * qv[j];
            dp[i][j] += vv[i] * gv[j];
          }
      }
      // pᵀ = exp(scale·sᵀ - lse), 0 where masked or past T
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++) {
        int key = j0 + ty + ATT_TY * i;
ATT_UNROLL
        for (int j = 0; j < ATT_CJ; j++) {
          int c = tx + ATT_TX * j, t = q0 + c;
          bool live = key < T && t < T && (!causal || key <= t);
          p[i][j] = live ? expf(p[i][j] * scale - Ls[c]) : 0.0f;
          Ps[(ty + ATT_TY * i) * ATT_LDP + c] = p[i][j];
        }
      }
      __syncthreads();
      int qn = min(ATT_BQ, T - q0);
      // dv_tile += pᵀ · dout_tile, this thread's (8, NJ) of (BK, dc)
      for (int c = 0; c < qn; c++) {
        float gv[NJ];
ATT_UNROLL
        for (int jd = 0; jd < NJ; jd++) gv[jd] = dOt[(tx + ATT_TX * jd) * ATT_LDT + c];
ATT_UNROLL
        for (int i = 0; i < ATT_RI; i++) {
          float pv = Ps[(ty + ATT_TY * i) * ATT_LDP + c];
ATT_UNROLL
          for (int jd = 0; jd < NJ; jd++) dva[i][jd] += pv * gv[jd];
        }
      }
      __syncthreads();  // Ps is read; it becomes dsᵀ
      // dsᵀ = pᵀ·(dpᵀ - delta)·scale
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++)
ATT_UNROLL
        for (int j = 0; j < ATT_CJ; j++) {
          int c = tx + ATT_TX * j;
          Ps[(ty + ATT_TY * i) * ATT_LDP + c] = p[i][j] * (dp[i][j] - Dl[c]) * scale;
        }
      __syncthreads();
      // dk_tile += dsᵀ · q_tile, this thread's (8, NJ) of (BK, dc)
      for (int c = 0; c < qn; c++) {
        float qv[NJ];
ATT_UNROLL
        for (int jd = 0; jd < NJ; jd++) qv[jd] = Qt[(tx + ATT_TX * jd) * ATT_LDT + c];
ATT_UNROLL
        for (int i = 0; i < ATT_RI; i++) {
          float dsv = Ps[(ty + ATT_TY * i) * ATT_LDP + c];
ATT_UNROLL
          for (int jd = 0; jd < NJ; jd++) dka[i][jd] += dsv * qv[jd];
        }
      }
    }
  }
ATT_UNROLL
  for (int i = 0; i < ATT_RI; i++) {
    int key = j0 + ty + ATT_TY * i;
    if (key >= T) continue;
    size_t off = koff + (size_t)key * ldkv;
ATT_UNROLL
    for (int jd = 0; jd < NJ; jd++) {
      int d = tx + ATT_TX * jd;
      if (d >= D) continue;
      if (dk) att_st(dk + off + d, att_ld(dk + off + d) + dka[i][jd]);
      if (dv) att_st(dv + off + d, att_ld(dv + off + d) + dva[i][jd]);
    }
  }
}

// dq is (B,T,H,D), accumulated; the rest as the launcher. grid
// (ceil(T/64), H, B), ATT_THREADS threads, att_bwd_smem(D, 16·NJ) bytes.
template <int NJ, class S>
__global__ void
    attention_backward_dq_kernel(S *dq, const S *dout, const S *q, const S *k, const S *v,
                                 const float *lse, const float *delta, int T, int H, int Hkv,
                                 int D, int causal, float scale) {
  const int dc = 16 * NJ, ldq = D + 1;
  RTC_DYNAMIC_SHARED(float, smem);
  float *Qs = smem;                 // (BQ, D), rows ldq apart
  float *dOs = Qs + ATT_BQ * ldq;   // (BQ, D), rows ldq apart
  float *Kt = dOs + ATT_BQ * ldq;   // (dc, BK) transposed, 0 past D
  float *Vt = Kt + dc * ATT_LDT;    // (dc, BK) transposed, 0 past D
  float *Ss = Vt + dc * ATT_LDT;    // (BQ, BK) ds
  int q0 = blockIdx.x * ATT_BQ, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  int tx = threadIdx.x % ATT_TX, ty = threadIdx.x / ATT_TX;
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  size_t qoff = (size_t)b * T * ldh + (size_t)h * D;
  size_t koff = (size_t)b * T * ldkv + (size_t)hk * D;
  att_load_rows(Qs, ldq, q + qoff, ldh, q0, ATT_BQ, T, D, D);
  att_load_rows(dOs, ldq, dout + qoff, ldh, q0, ATT_BQ, T, D, D);
  float L[ATT_RI], Dl[ATT_RI], dqa[ATT_RI][NJ];
ATT_UNROLL
  for (int i = 0; i < ATT_RI; i++) {
    int t = q0 + ty + ATT_TY * i;
    L[i] = t < T ? lse[((size_t)b * H + h) * T + t] : 0.0f;
    Dl[i] = t < T ? delta[((size_t)b * H + h) * T + t] : 0.0f;
ATT_UNROLL
    for (int jd = 0; jd < NJ; jd++) dqa[i][jd] = 0.0f;
  }
  int kend = causal ? min(T, q0 + ATT_BQ) : T;
  for (int j0 = 0; j0 < kend; j0 += ATT_BK) {
    __syncthreads();  // Qs, dOs are loaded; the last tile's Kt, Vt, Ss are read
    att_load_rows_t(Kt, k + koff, ldkv, j0, ATT_BK, T, D, dc);
    att_load_rows_t(Vt, v + koff, ldkv, j0, ATT_BK, T, D, dc);
    __syncthreads();
    // s = q_tile · k_tileᵀ and dp = dout_tile · v_tileᵀ, this thread's (8, 4)
    float p[ATT_RI][ATT_CJ], dp[ATT_RI][ATT_CJ];
ATT_UNROLL
    for (int i = 0; i < ATT_RI; i++)
ATT_UNROLL
      for (int j = 0; j < ATT_CJ; j++) p[i][j] = dp[i][j] = 0.0f;
    for (int d = 0; d < D; d++) {
      float qv[ATT_RI], gv[ATT_RI], kv[ATT_CJ], vv[ATT_CJ];
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++) {
        qv[i] = Qs[(ty + ATT_TY * i) * ldq + d];
        gv[i] = dOs[(ty + ATT_TY * i) * ldq + d];
      }
ATT_UNROLL
      for (int j = 0; j < ATT_CJ; j++) {
        kv[j] = Kt[d * ATT_LDT + tx + ATT_TX * j];
        vv[j] = Vt[d * ATT_LDT + tx + ATT_TX * j];
      }
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++)
ATT_UNROLL
        for (int j = 0; j < ATT_CJ; j++) {
          p[i][j] += qv[i] * kv[j];
          dp[i][j] += gv[i] * vv[j];
        }
    }
    // ds = p·(dp - delta)·scale with p = exp(scale·s - lse), 0 where masked
ATT_UNROLL
    for (int i = 0; i < ATT_RI; i++) {
      int t = q0 + ty + ATT_TY * i;
ATT_UNROLL
      for (int j = 0; j < ATT_CJ; j++) {
        int key = j0 + tx + ATT_TX * j;
        bool live = key < T && t < T && (!causal || key <= t);
        float pv = live ? expf(p[i][j] * scale - L[i]) : 0.0f;
        Ss[(ty + ATT_TY * i) * ATT_LDP + tx + ATT_TX * j] = pv * (dp[i][j] - Dl[i]) * scale;
      }
    }
    __syncthreads();
    // dq_tile += ds · k_tile, this thread's (8, NJ) of (BQ, dc)
    int kn = min(ATT_BK, kend - j0);
    for (int c = 0; c < kn; c++) {
      float kv[NJ];
ATT_UNROLL
      for (int jd = 0; jd < NJ; jd++) kv[jd] = Kt[(tx + ATT_TX * jd) * ATT_LDT + c];
ATT_UNROLL
      for (int i = 0; i < ATT_RI; i++) {
        float dsv = Ss[(ty + ATT_TY * i) * ATT_LDP + c];
ATT_UNROLL
        for (int jd = 0; jd < NJ; jd++) dqa[i][jd] += dsv * kv[jd];
      }
    }
  }
ATT_UNROLL
  for (int i = 0; i < ATT_RI; i++) {
    int t = q0 + ty + ATT_TY * i;
    if (t >= T) continue;
    S *row = dq + qoff + (size_t)t * ldh;
ATT_UNROLL
    for (int jd = 0; jd < NJ; jd++) {
      int d = tx + ATT_TX * jd;
      if (d < D) att_st(row + d, att_ld(row + d) + dqa[i][jd]);
    }
  }
}

// ---- precision = bf16: the tensor-core kernels (see the top of the file) ----

#define ATC_LDS 68  // stride (floats) of a warp's fp32 score rows: a multiple of 4 (wmma)
#define ATC_LDP 72  // stride (bf16) of the P and dS tiles: a multiple of 8 (wmma)

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, rtc_bf16, wmma::row_major> att_fa;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, rtc_bf16, wmma::row_major> att_fb;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, rtc_bf16, wmma::col_major> att_fbt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> att_fc;

// Bytes of dynamic shared memory of the tensor-core kernels at dc = 16·NJ
// (the backward's for both of its kernels): bf16 tiles (64, dc) rows dc+8
// apart, fp32 score tiles (64, 64) rows ATC_LDS apart, bf16 P/dS tiles rows
// ATC_LDP apart, the forward's fp32 output (64, dc) rows dc+4 apart, the
// dk/dv kernel's lse and delta; 128 more to align the base to 128 bytes.
static size_t att_tc_fwd_smem(int dc) {
  return 128 + 3 * (size_t)ATT_BQ * (dc + 8) * 2 + (size_t)ATT_BQ * ATC_LDS * 4 +
         (size_t)ATT_BQ * ATC_LDP * 2 + (size_t)ATT_BQ * (dc + 4) * 4;
}
static size_t att_tc_bwd_smem(int dc) {
  return 128 + 4 * (size_t)ATT_BQ * (dc + 8) * 2 + 2 * (size_t)ATT_BQ * ATC_LDS * 4 +
         2 * (size_t)ATT_BQ * ATC_LDP * 2 + 2 * ATT_BQ * 4;
}

// The dynamic shared memory, its base rounded up to 128 bytes (wmma's
// pointers must be 32-byte aligned).
__device__ __forceinline__ unsigned char *att_tc_base(unsigned char *p) {
  return (unsigned char *)(((uintptr_t)p + 127) & ~(uintptr_t)127);
}

// Rows [t0, t0+64) of one head as bf16: s[r*ld + d] = g[(t0+r)*ldg + d] for
// d < dc, 0 past T or past D; 16-byte copies when D, ldg and g allow.
__device__ __forceinline__ void att_tc_load(rtc_bf16 *s, int ld, const rtc_bf16 *g, size_t ldg,
                                            int t0, int T, int D, int dc) {
  const rtc_bf16 zero = rtc_f2bf(0.0f);
  if (D % 8 == 0 && ldg % 8 == 0 && ((uintptr_t)g & 15) == 0) {
    int nc = dc / 8;  // 16-byte chunks a row
    for (int e = threadIdx.x; e < ATT_BQ * nc; e += ATT_THREADS) {
      int r = e / nc, d = (e - r * nc) * 8;
      rtc_bf16 *dst = s + r * ld + d;
      if (t0 + r < T && d < D) {
        const rtc_bf16 *src = g + (size_t)(t0 + r) * ldg + d;
#ifdef RTC_HOST
        memcpy(dst, src, 16);
#else
        *(uint4 *)dst = *(const uint4 *)src;
#endif
      } else {
        for (int i = 0; i < 8; i++) dst[i] = zero;
      }
    }
    return;
  }
  for (int e = threadIdx.x; e < ATT_BQ * dc; e += ATT_THREADS) {
    int r = e / dc, d = e - r * dc;
    s[r * ld + d] = t0 + r < T && d < D ? g[(size_t)(t0 + r) * ldg + d] : zero;
  }
}

// out is (B,T,H,D), lse is (B,H,T), q is (B,T,H,D), k and v are (B,T,Hkv,D);
// grid (ceil(T/64), H, B), ATT_THREADS threads, att_tc_fwd_smem(16·NJ) bytes.
// Warp w owns query rows 16w..16w+15 of the tile; in the softmax lane l
// holds row l/2 of the warp's and columns l%2 + 2j.  out is bf16 or (O =
// float) fp32, unrounded.
template <int NJ, class O>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_tc_kernel(O *out, float *lse, const rtc_bf16 *q,
                                const rtc_bf16 *k, const rtc_bf16 *v, int T, int H, int Hkv,
                                int D, int causal, float scale) {
  const int dc = 16 * NJ, ldt = dc + 8, ldo = dc + 4;
  RTC_DYNAMIC_SHARED(unsigned char, smem_raw);
  rtc_bf16 *Qs = (rtc_bf16 *)att_tc_base(smem_raw);  // (BQ, dc), 0 past T and D
  rtc_bf16 *Ks = Qs + ATT_BQ * ldt;                   // (BK, dc)
  rtc_bf16 *Vs = Ks + ATT_BK * ldt;                   // (BK, dc)
  float *Ss = (float *)(Vs + ATT_BK * ldt);           // (BQ, BK) scores
  rtc_bf16 *Pb = (rtc_bf16 *)(Ss + ATT_BQ * ATC_LDS); // (BQ, BK) probabilities
  float *Os = (float *)(Pb + ATT_BQ * ATC_LDP);       // (BQ, dc) output, unnormalized
  int q0 = blockIdx.x * ATT_BQ, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, half = lane & 1;
  int row = 16 * w + (lane >> 1), t = q0 + row;  // this lane's row in the softmax
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  const rtc_bf16 *kb = k + (size_t)b * T * ldkv + (size_t)hk * D;
  const rtc_bf16 *vb = v + (size_t)b * T * ldkv + (size_t)hk * D;
  att_tc_load(Qs, ldt, q + (size_t)b * T * ldh + (size_t)h * D, ldh, q0, T, D, dc);
  for (int e = lane; e < 16 * dc; e += 32) Os[(16 * w + e / dc) * ldo + e % dc] = 0.0f;

  float m = -INFINITY, l = 0.0f;
  int kend = causal ? min(T, q0 + ATT_BQ) : T;            // keys any row of the tile sees
  int wend = causal ? min(kend, q0 + 16 * w + 16) : kend;  // keys this warp's rows see
  int jn = causal ? min(kend, t + 1) : kend;               // keys this lane's row sees
  for (int j0 = 0; j0 < kend; j0 += ATT_BK) {
    __syncthreads();  // Qs is loaded; the last tile's Ks, Vs are read
    att_tc_load(Ks, ldt, kb, ldkv, j0, T, D, dc);
    att_tc_load(Vs, ldt, vb, ldkv, j0, T, D, dc);
    __syncthreads();
    int nkb = min(ATT_BK / 16, (wend - j0 + 15) / 16);  // key blocks of 16 the warp needs
    // s = q_w · k_tileᵀ, (16, 16·nkb)
    for (int c = 0; c < nkb; c++) {
      att_fc s;
      wmma::fill_fragment(s, 0.0f);
ATT_UNROLL
      for (int kk = 0; kk < NJ; kk++) {
        att_fa a;
        att_fbt bt;
        wmma::load_matrix_sync(a, Qs + 16 * w * ldt + 16 * kk, ldt);
        wmma::load_matrix_sync(bt, Ks + 16 * c * ldt + 16 * kk, ldt);
        wmma::mma_sync(s, a, bt, s);
      }
      wmma::store_matrix_sync(Ss + 16 * w * ATC_LDS + 16 * c, s, ATC_LDS, wmma::mem_row_major);
    }
    __syncwarp();
    // online softmax of the row (keys past jn are masked, their scores
    // never read): p = exp(scale·s - m_new) rounded to bf16 for p · v, the
    // sum of the unrounded p; the row's output rescaled by exp(m_old - m_new)
    float mx = -INFINITY;
    for (int c = half; c < ATT_BK; c += 2)
      if (j0 + c < jn) mx = fmaxf(mx, Ss[row * ATC_LDS + c] * scale);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    float mnew = fmaxf(m, mx), sum = 0.0f;
    for (int c = half; c < ATT_BK; c += 2) {
      float p = j0 + c < jn ? expf(Ss[row * ATC_LDS + c] * scale - mnew) : 0.0f;
      Pb[row * ATC_LDP + c] = rtc_f2bf(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (mnew != -INFINITY) {  // a row past T may see no key yet
      float corr = expf(m - mnew);  // 0 on the first tile (m = -inf)
      l = l * corr + sum;
      for (int c = half; c < dc; c += 2) Os[row * ldo + c] *= corr;
      m = mnew;
    }
    __syncwarp();
    // o_w += p_w · v_tile, (16, dc)
ATT_UNROLL
    for (int n = 0; n < NJ; n++) {
      att_fc o;
      wmma::load_matrix_sync(o, Os + 16 * w * ldo + 16 * n, ldo, wmma::mem_row_major);
      for (int c = 0; c < nkb; c++) {
        att_fa a;
        att_fb bv;
        wmma::load_matrix_sync(a, Pb + 16 * w * ATC_LDP + 16 * c, ATC_LDP);
        wmma::load_matrix_sync(bv, Vs + 16 * c * ldt + 16 * n, ldt);
        wmma::mma_sync(o, a, bv, o);
      }
      wmma::store_matrix_sync(Os + 16 * w * ldo + 16 * n, o, ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (t >= T) return;
  float inv = 1.0f / l;
  O *orow = out + ((size_t)b * T + t) * ldh + (size_t)h * D;
  for (int c = half; c < D; c += 2) att_st(orow + c, Os[row * ldo + c] * inv);
  if (lse && !half) lse[((size_t)b * H + h) * T + t] = m + logf(l);
}

// Adds a warp's (16, dc) accumulators acc to rows r0.. of g (rows ldg
// apart, columns < D, rows < T; bf16 or fp32), through the warp's (16, 16)
// stage in shared memory (rows ATC_LDS apart).
template <int NJ, class G>
__device__ __forceinline__ void att_tc_add(G *g, size_t ldg, int r0, int T, int D,
                                           att_fc (&acc)[NJ], float *stage) {
  int lane = threadIdx.x % 32;
ATT_UNROLL
  for (int n = 0; n < NJ; n++) {
    wmma::store_matrix_sync(stage, acc[n], ATC_LDS, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      int r = e / 16, d = 16 * n + e % 16;
      if (r0 + r < T && d < D) {
        G *p = g + (size_t)(r0 + r) * ldg + d;
        att_st(p, att_ld(p) + stage[r * ATC_LDS + e % 16]);
      }
    }
    __syncwarp();  // the stage is read
  }
}

// dk and dv are (B,T,Hkv,D), accumulated; the rest as the launcher. grid
// (ceil(T/64), Hkv, B), ATT_THREADS threads, att_tc_bwd_smem(16·NJ) bytes.
// Warp w owns keys 16w..16w+15 of the tile and their dk, dv (NJ fragments
// each); in its score tiles (Sᵀ) rows are keys and columns queries, lane l
// holding row l/2 and columns l%2 + 2j.  dk, dv bf16 or (G = float) fp32.
template <int NJ, class G>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkdv_tc_kernel(G *dk, G *dv, const rtc_bf16 *dout,
                                      const rtc_bf16 *q, const rtc_bf16 *k, const rtc_bf16 *v,
                                      const float *lse, const float *delta, int T, int H,
                                      int Hkv, int D, int causal, float scale) {
  const int dc = 16 * NJ, ldt = dc + 8;
  RTC_DYNAMIC_SHARED(unsigned char, smem_raw);
  rtc_bf16 *Ks = (rtc_bf16 *)att_tc_base(smem_raw);  // (BK, dc), 0 past T and D
  rtc_bf16 *Vs = Ks + ATT_BK * ldt;                   // (BK, dc)
  rtc_bf16 *Qs = Vs + ATT_BK * ldt;                   // (BQ, dc)
  rtc_bf16 *dOs = Qs + ATT_BQ * ldt;                  // (BQ, dc)
  float *Ss = (float *)(dOs + ATT_BQ * ldt);          // (BK, BQ) sᵀ
  float *dPs = Ss + ATT_BK * ATC_LDS;                 // (BK, BQ) dpᵀ
  rtc_bf16 *Pb = (rtc_bf16 *)(dPs + ATT_BK * ATC_LDS);  // (BK, BQ) pᵀ
  rtc_bf16 *dSb = Pb + ATT_BK * ATC_LDP;              // (BK, BQ) dsᵀ
  float *Ls = (float *)(dSb + ATT_BK * ATC_LDP);      // (BQ) lse of the query tile
  float *Dl = Ls + ATT_BQ;                            // (BQ) delta of the query tile
  int j0 = blockIdx.x * ATT_BK, hk = blockIdx.y, b = blockIdx.z, rep = H / Hkv;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, half = lane & 1;
  int row = 16 * w + (lane >> 1), key = j0 + row;  // this lane's key in the softmax
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  size_t koff = (size_t)b * T * ldkv + (size_t)hk * D;
  att_tc_load(Ks, ldt, k + koff, ldkv, j0, T, D, dc);
  att_tc_load(Vs, ldt, v + koff, ldkv, j0, T, D, dc);

  att_fc dka[NJ], dva[NJ];
ATT_UNROLL
  for (int n = 0; n < NJ; n++) {
    wmma::fill_fragment(dka[n], 0.0f);
    wmma::fill_fragment(dva[n], 0.0f);
  }
  int qstart = causal ? j0 / ATT_BQ * ATT_BQ : 0;  // the first query tile that sees key j0
  for (int h = hk * rep; h < (hk + 1) * rep; h++) {
    const rtc_bf16 *qb = q + (size_t)b * T * ldh + (size_t)h * D;
    const rtc_bf16 *dob = dout + (size_t)b * T * ldh + (size_t)h * D;
    const float *lb = lse + ((size_t)b * H + h) * T, *db = delta + ((size_t)b * H + h) * T;
    for (int q0 = qstart; q0 < T; q0 += ATT_BQ) {
      __syncthreads();  // Ks, Vs are loaded; the last tile's Qs, dOs, Ls, Dl are read
      att_tc_load(Qs, ldt, qb, ldh, q0, T, D, dc);
      att_tc_load(dOs, ldt, dob, ldh, q0, T, D, dc);
      for (int r = threadIdx.x; r < ATT_BQ; r += ATT_THREADS) {
        Ls[r] = q0 + r < T ? lb[q0 + r] : 0.0f;
        Dl[r] = q0 + r < T ? db[q0 + r] : 0.0f;
      }
      __syncthreads();
      // query blocks of 16 that see some key of the warp: [qlo, qhi)
      int qlo = causal ? max(0, (j0 + 16 * w - q0) / 16) : 0;
      int qhi = min(ATT_BQ / 16, (T - q0 + 15) / 16);
      // sᵀ = k_w · q_tileᵀ and dpᵀ = v_w · dout_tileᵀ, (16, 64)
      for (int c = qlo; c < qhi; c++) {
        att_fc s, dp;
        wmma::fill_fragment(s, 0.0f);
        wmma::fill_fragment(dp, 0.0f);
ATT_UNROLL2
        for (int kk = 0; kk < NJ; kk++) {
          att_fa a;
          att_fbt bt;
          wmma::load_matrix_sync(a, Ks + 16 * w * ldt + 16 * kk, ldt);
          wmma::load_matrix_sync(bt, Qs + 16 * c * ldt + 16 * kk, ldt);
          wmma::mma_sync(s, a, bt, s);
          wmma::load_matrix_sync(a, Vs + 16 * w * ldt + 16 * kk, ldt);
          wmma::load_matrix_sync(bt, dOs + 16 * c * ldt + 16 * kk, ldt);
          wmma::mma_sync(dp, a, bt, dp);
        }
        wmma::store_matrix_sync(Ss + 16 * w * ATC_LDS + 16 * c, s, ATC_LDS, wmma::mem_row_major);
        wmma::store_matrix_sync(dPs + 16 * w * ATC_LDS + 16 * c, dp, ATC_LDS, wmma::mem_row_major);
      }
      __syncwarp();
      // pᵀ = exp(scale·sᵀ - lse) and dsᵀ = pᵀ·(dpᵀ - delta)·scale, 0 where
      // masked or past T (those scores never read), rounded to bf16
      for (int c = half; c < ATT_BQ; c += 2) {
        int tq = q0 + c;
        bool live = key < T && tq < T && (!causal || key <= tq);
        float p = 0.0f, ds = 0.0f;
        if (live) {
          p = expf(Ss[row * ATC_LDS + c] * scale - Ls[c]);
          ds = p * (dPs[row * ATC_LDS + c] - Dl[c]) * scale;
        }
        Pb[row * ATC_LDP + c] = rtc_f2bf(p);
        dSb[row * ATC_LDP + c] = rtc_f2bf(ds);
      }
      __syncwarp();
      // dv_w += pᵀ_w · dout_tile and dk_w += dsᵀ_w · q_tile, (16, dc)
      for (int c = qlo; c < qhi; c++) {
        att_fa a;
        wmma::load_matrix_sync(a, Pb + 16 * w * ATC_LDP + 16 * c, ATC_LDP);
ATT_UNROLL
        for (int n = 0; n < NJ; n++) {
          att_fb bm;
          wmma::load_matrix_sync(bm, dOs + 16 * c * ldt + 16 * n, ldt);
          wmma::mma_sync(dva[n], a, bm, dva[n]);
        }
        wmma::load_matrix_sync(a, dSb + 16 * w * ATC_LDP + 16 * c, ATC_LDP);
ATT_UNROLL
        for (int n = 0; n < NJ; n++) {
          att_fb bm;
          wmma::load_matrix_sync(bm, Qs + 16 * c * ldt + 16 * n, ldt);
          wmma::mma_sync(dka[n], a, bm, dka[n]);
        }
      }
    }
  }
  // the warp's score rows are free: they stage its dk, dv
  if (dk) att_tc_add<NJ>(dk + koff, ldkv, j0 + 16 * w, T, D, dka, Ss + 16 * w * ATC_LDS);
  if (dv) att_tc_add<NJ>(dv + koff, ldkv, j0 + 16 * w, T, D, dva, Ss + 16 * w * ATC_LDS);
}

// dq is (B,T,H,D), accumulated; the rest as the launcher. grid
// (ceil(T/64), H, B), ATT_THREADS threads, att_tc_bwd_smem(16·NJ) bytes.
// Warp w owns query rows 16w..16w+15 of the tile and their dq (NJ
// fragments); lane l holds row l/2 of its score rows, columns l%2 + 2j.
// dq bf16 or (G = float) fp32.
template <int NJ, class G>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_tc_kernel(G *dq, const rtc_bf16 *dout, const rtc_bf16 *q,
                                    const rtc_bf16 *k, const rtc_bf16 *v, const float *lse,
                                    const float *delta, int T, int H, int Hkv, int D,
                                    int causal, float scale) {
  const int dc = 16 * NJ, ldt = dc + 8;
  RTC_DYNAMIC_SHARED(unsigned char, smem_raw);
  rtc_bf16 *Qs = (rtc_bf16 *)att_tc_base(smem_raw);  // (BQ, dc), 0 past T and D
  rtc_bf16 *dOs = Qs + ATT_BQ * ldt;                  // (BQ, dc)
  rtc_bf16 *Ks = dOs + ATT_BQ * ldt;                  // (BK, dc)
  rtc_bf16 *Vs = Ks + ATT_BK * ldt;                   // (BK, dc)
  float *Ss = (float *)(Vs + ATT_BK * ldt);           // (BQ, BK) s
  float *dPs = Ss + ATT_BQ * ATC_LDS;                 // (BQ, BK) dp
  rtc_bf16 *dSb = (rtc_bf16 *)(dPs + ATT_BQ * ATC_LDS);  // (BQ, BK) ds
  int q0 = blockIdx.x * ATT_BQ, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, half = lane & 1;
  int row = 16 * w + (lane >> 1), t = q0 + row;  // this lane's row in the softmax
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  size_t qoff = (size_t)b * T * ldh + (size_t)h * D;
  size_t koff = (size_t)b * T * ldkv + (size_t)hk * D;
  att_tc_load(Qs, ldt, q + qoff, ldh, q0, T, D, dc);
  att_tc_load(dOs, ldt, dout + qoff, ldh, q0, T, D, dc);
  float L = t < T ? lse[((size_t)b * H + h) * T + t] : 0.0f;
  float Dl = t < T ? delta[((size_t)b * H + h) * T + t] : 0.0f;
  att_fc dqa[NJ];
ATT_UNROLL
  for (int n = 0; n < NJ; n++) wmma::fill_fragment(dqa[n], 0.0f);
  int kend = causal ? min(T, q0 + ATT_BQ) : T;
  int wend = causal ? min(kend, q0 + 16 * w + 16) : kend;  // keys this warp's rows see
  for (int j0 = 0; j0 < kend; j0 += ATT_BK) {
    __syncthreads();  // Qs, dOs are loaded; the last tile's Ks, Vs are read
    att_tc_load(Ks, ldt, k + koff, ldkv, j0, T, D, dc);
    att_tc_load(Vs, ldt, v + koff, ldkv, j0, T, D, dc);
    __syncthreads();
    int nkb = min(ATT_BK / 16, (wend - j0 + 15) / 16);  // key blocks of 16 the warp needs
    // s = q_w · k_tileᵀ and dp = dout_w · v_tileᵀ, (16, 16·nkb)
    for (int c = 0; c < nkb; c++) {
      att_fc s, dp;
      wmma::fill_fragment(s, 0.0f);
      wmma::fill_fragment(dp, 0.0f);
ATT_UNROLL
      for (int kk = 0; kk < NJ; kk++) {
        att_fa a;
        att_fbt bt;
        wmma::load_matrix_sync(a, Qs + 16 * w * ldt + 16 * kk, ldt);
        wmma::load_matrix_sync(bt, Ks + 16 * c * ldt + 16 * kk, ldt);
        wmma::mma_sync(s, a, bt, s);
        wmma::load_matrix_sync(a, dOs + 16 * w * ldt + 16 * kk, ldt);
        wmma::load_matrix_sync(bt, Vs + 16 * c * ldt + 16 * kk, ldt);
        wmma::mma_sync(dp, a, bt, dp);
      }
      wmma::store_matrix_sync(Ss + 16 * w * ATC_LDS + 16 * c, s, ATC_LDS, wmma::mem_row_major);
      wmma::store_matrix_sync(dPs + 16 * w * ATC_LDS + 16 * c, dp, ATC_LDS, wmma::mem_row_major);
    }
    __syncwarp();
    // ds = p·(dp - delta)·scale with p = exp(scale·s - lse), 0 where masked
    // (those scores never read), rounded to bf16
    for (int c = half; c < ATT_BK; c += 2) {
      int key = j0 + c;
      bool live = key < T && t < T && (!causal || key <= t);
      float ds = 0.0f;
      if (live) {
        float p = expf(Ss[row * ATC_LDS + c] * scale - L);
        ds = p * (dPs[row * ATC_LDS + c] - Dl) * scale;
      }
      dSb[row * ATC_LDP + c] = rtc_f2bf(ds);
    }
    __syncwarp();
    // dq_w += ds_w · k_tile, (16, dc)
    for (int c = 0; c < nkb; c++) {
      att_fa ads;
      wmma::load_matrix_sync(ads, dSb + 16 * w * ATC_LDP + 16 * c, ATC_LDP);
ATT_UNROLL
      for (int n = 0; n < NJ; n++) {
        att_fb bk;
        wmma::load_matrix_sync(bk, Ks + 16 * c * ldt + 16 * n, ldt);
        wmma::mma_sync(dqa[n], ads, bk, dqa[n]);
      }
    }
  }
  __syncwarp();
  att_tc_add<NJ>(dq + qoff, ldh, q0 + 16 * w, T, D, dqa, Ss + 16 * w * ATC_LDS);
}

// The kernels' column count NJ for head dim D: 16·NJ >= D, NJ in {1,2,4,8}.
static int att_nj(int D, const char *who) {
  if (D > ATT_DMAX)
    rtc_fail("shardrt", who, "head dim D above 128 is not supported by the CUDA attention",
             __FILE__, __LINE__, "use D <= 128 (the kernels keep 8 rows x D/16 per thread)");
  return D <= 16 ? 1 : D <= 32 ? 2 : D <= 64 ? 4 : 8;
}

// The launchers of one NJ, storage S and output (gradient) type O (G):
// S itself, or fp32 for bf16 storage.  The dynamic shared memory limit
// is raised once per kernel, to its size at D = 16·NJ (the largest D it
// serves).  The kernel names are parenthesized for RTC_LAUNCH (their
// template arguments' comma).
template <int NJ, class S, class O>
static void att_forward(O *out, float *lse, const S *q, const S *k, const S *v, int B, int T,
                        int H, int Hkv, int D, int causal, float scale) {
  static int ready = 0;
  dim3 grid((T + ATT_BQ - 1) / ATT_BQ, H, B);
  if constexpr (std::is_same<S, rtc_bf16>::value) {
    size_t smem = att_tc_fwd_smem(16 * NJ);
    if (!ready) {
      cudaCheck(cudaFuncSetAttribute(attention_forward_tc_kernel<NJ, O>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      ready = 1;
    }
    RTC_LAUNCH((attention_forward_tc_kernel<NJ, O>), grid, ATT_THREADS, smem, out, lse, q, k, v, T,
               H, Hkv, D, causal, scale);
  } else {  // fp32: the CUDA-core kernels
    if (!ready) {
      cudaCheck(cudaFuncSetAttribute(attention_forward_kernel<NJ, S>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)att_fwd_smem(16 * NJ, 16 * NJ)));
      ready = 1;
    }
    RTC_LAUNCH((attention_forward_kernel<NJ, S>), grid, ATT_THREADS, att_fwd_smem(D, 16 * NJ), out,
               lse, q, k, v, T, H, Hkv, D, causal, scale);
  }
}

template <int NJ, class S, class G>
static void att_backward(G *dq, G *dk, G *dv, const S *dout, const S *q, const S *k, const S *v,
                         const float *lse, const float *delta, int B, int T, int H, int Hkv,
                         int D, int causal, float scale) {
  static int ready = 0;
  int ntiles = (T + ATT_BQ - 1) / ATT_BQ;
  if constexpr (std::is_same<S, rtc_bf16>::value) {
    size_t smem = att_tc_bwd_smem(16 * NJ);
    if (!ready) {
      cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_tc_kernel<NJ, G>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      cudaCheck(cudaFuncSetAttribute(attention_backward_dq_tc_kernel<NJ, G>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
      ready = 1;
    }
    if (dk || dv)
      RTC_LAUNCH((attention_backward_dkdv_tc_kernel<NJ, G>), dim3(ntiles, Hkv, B), ATT_THREADS,
                 smem, dk, dv, dout, q, k, v, lse, delta, T, H, Hkv, D, causal, scale);
    if (dq)
      RTC_LAUNCH((attention_backward_dq_tc_kernel<NJ, G>), dim3(ntiles, H, B), ATT_THREADS, smem,
                 dq, dout, q, k, v, lse, delta, T, H, Hkv, D, causal, scale);
  } else {  // fp32: the CUDA-core kernels
    int max_smem = (int)att_bwd_smem(16 * NJ, 16 * NJ);
    if (!ready) {
      cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_kernel<NJ, S>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
      cudaCheck(cudaFuncSetAttribute(attention_backward_dq_kernel<NJ, S>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
      ready = 1;
    }
    size_t smem = att_bwd_smem(D, 16 * NJ);
    if (dk || dv)
      RTC_LAUNCH((attention_backward_dkdv_kernel<NJ, S>), dim3(ntiles, Hkv, B), ATT_THREADS, smem,
                 dk, dv, dout, q, k, v, lse, delta, T, H, Hkv, D, causal, scale);
    if (dq)
      RTC_LAUNCH((attention_backward_dq_kernel<NJ, S>), dim3(ntiles, H, B), ATT_THREADS, smem, dq,
                 dout, q, k, v, lse, delta, T, H, Hkv, D, causal, scale);
  }
}

// The backward's delta buffer, B·H·T floats: the program's kernel
// workspace (rtc_ws.h).
static void *att_delta_buf = NULL;
static size_t att_delta_cap = 0;
static float *att_workspace(int B, int T, int H) {
  return (float *)rtc_ws_scratch(rtc_ws_attention_bwd(B, T, H), &att_delta_buf, &att_delta_cap,
                                 "attention backward's delta", __FILE__, __LINE__);
}

// out is (B,T,H,D), lse is (B,H,T) or NULL, q is (B,T,H,D), k and v are (B,T,Hkv,D)
template <class S, class O>
static void att_forward_any(O *out, float *lse, const S *q, const S *k, const S *v, int B, int T,
                            int H, int Hkv, int D, int causal) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0) return;
  float scale = (float)(1 / sqrt((double)D));
  switch (att_nj(D, "rt_attention_forward_cu")) {
    case 1: att_forward<1, S>(out, lse, q, k, v, B, T, H, Hkv, D, causal, scale); break;
    case 2: att_forward<2, S>(out, lse, q, k, v, B, T, H, Hkv, D, causal, scale); break;
    case 4: att_forward<4, S>(out, lse, q, k, v, B, T, H, Hkv, D, causal, scale); break;
    default: att_forward<8, S>(out, lse, q, k, v, B, T, H, Hkv, D, causal, scale); break;
  }
}

// dq is (B,T,H,D), dk and dv are (B,T,Hkv,D), each accumulated (+=) or NULL;
// dout and out are (B,T,H,D), lse is (B,H,T) from the forward
template <class S, class G>
static void att_backward_any(G *dq, G *dk, G *dv, const S *dout, const S *q, const S *k,
                             const S *v, const S *out, const float *lse, int B, int T, int H,
                             int Hkv, int D, int causal) {
  if (B <= 0 || T <= 0 || H <= 0 || D <= 0 || (!dq && !dk && !dv)) return;
  float scale = (float)(1 / sqrt((double)D));
  int nj = att_nj(D, "rt_attention_backward_cu");
  size_t rows = (size_t)B * T * H;
  float *delta = att_workspace(B, T, H);
  RTC_LAUNCH(attention_delta_kernel<S>, rtc_blocks(rows, ATT_THREADS / 32), ATT_THREADS, 0, delta,
             dout, out, B, T, H, D);
  switch (nj) {
    case 1: att_backward<1, S>(dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, Hkv, D, causal, scale); break;
    case 2: att_backward<2, S>(dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, Hkv, D, causal, scale); break;
    case 4: att_backward<4, S>(dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, Hkv, D, causal, scale); break;
    default: att_backward<8, S>(dq, dk, dv, dout, q, k, v, lse, delta, B, T, H, Hkv, D, causal, scale); break;
  }
}

extern "C" {

void rt_attention_forward_cu(float *out, float *lse, const float *q, const float *k,
                             const float *v, int B, int T, int H, int Hkv, int D, int causal) {
  att_forward_any(out, lse, q, k, v, B, T, H, Hkv, D, causal);
}

void rt_attention_backward_cu(float *dq, float *dk, float *dv, const float *dout,
                              const float *q, const float *k, const float *v, const float *out,
                              const float *lse, int B, int T, int H, int Hkv, int D,
                              int causal) {
  att_backward_any(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, Hkv, D, causal);
}

}  // extern "C"

// precision = bf16 (rtc.h's bf16 section): the same kernels on bf16 storage
void rt_attention_forward_cu(rtc_bf16 *out, float *lse, const rtc_bf16 *q, const rtc_bf16 *k,
                             const rtc_bf16 *v, int B, int T, int H, int Hkv, int D,
                             int causal) {
  att_forward_any(out, lse, q, k, v, B, T, H, Hkv, D, causal);
}

void rt_attention_backward_cu(rtc_bf16 *dq, rtc_bf16 *dk, rtc_bf16 *dv, const rtc_bf16 *dout,
                              const rtc_bf16 *q, const rtc_bf16 *k, const rtc_bf16 *v,
                              const rtc_bf16 *out, const float *lse, int B, int T, int H,
                              int Hkv, int D, int causal) {
  att_backward_any(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, Hkv, D, causal);
}

// bf16 storage with fp32 results (rtc.h): ring attention's blocks
// (rtc_ring.cu), merged and summed in fp32
void rt_attention_forward_cu(float *out, float *lse, const rtc_bf16 *q, const rtc_bf16 *k,
                             const rtc_bf16 *v, int B, int T, int H, int Hkv, int D,
                             int causal) {
  att_forward_any(out, lse, q, k, v, B, T, H, Hkv, D, causal);
}

void rt_attention_backward_cu(float *dq, float *dk, float *dv, const rtc_bf16 *dout,
                              const rtc_bf16 *q, const rtc_bf16 *k, const rtc_bf16 *v,
                              const rtc_bf16 *out, const float *lse, int B, int T, int H,
                              int Hkv, int D, int causal) {
  att_backward_any(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, Hkv, D, causal);
}
