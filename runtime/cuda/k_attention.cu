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
 * dv += pᵀ·dout, dk += dsᵀ·q, dq += ds·k) runs as mma.sync m16n8k16 bf16
 * with fp32 accumulators on register fragments loaded by ldmatrix
 * (rtc_mma.cuh: the PTX ISA's layouts, with host twins that follow them,
 * checked on a GPU by tests/cuda/test_k_mma.cu), FlashAttention-2 style:
 *   - the 4 warps of a block split the tile's rows: keys in dk/dv, 16
 *     each (64 rows); queries in the forward and in dq, 16·MT each (MT
 *     m-tiles: 2 at D <= 64, where each k, v fragment ldmatrix brings
 *     feeds two mmas, so a block takes 128 queries; 1 at D = 128 for the
 *     registers; SHARDC_ATT_MT=1 forces 1); lane l holds rows l/4 and
 *     l/4 + 8 of each m-tile, so the row max and sum of the online softmax
 *     are two shuffles among the 4 lanes of a row;
 *   - nothing goes through shared memory but the q, k, v, dout tiles: a
 *     warp's scores stay in its accumulators, and p (ds) rounded to bf16
 *     IS the a fragment of the next mma (an accumulator pair of n-blocks
 *     has the a layout), the output (dq, dk, dv) accumulates in registers
 *     over the whole loop and is written (added) once at the end;
 *   - the loop's tiles are double-buffered: the next k, v (q, dout) tile
 *     loads by cp.async while the current one feeds the mmas;
 *   - the forward takes a key tile of 64 at once (8 n-blocks of scores in
 *     registers, one rescale of the output a tile); the backward takes its
 *     inner tile 16 at a time, so a block's pᵀ, dsᵀ (ds) is one a fragment
 *     and the registers stay low;
 *   - the scores are in log2 units: p = att_exp2(fmaf(s, scale·log2(e),
 *     -m)), one FMA and one MUFU.EX2 an element (the row maxima taken of
 *     the raw scores, scaled after); the online softmax, lse and delta
 *     stay fp32; p and ds are rounded to bf16 before their GEMMs (as
 *     FlashAttention does; the softmax's row sum adds the unrounded p);
 *   - key (query) blocks of 16 that a warp's rows cannot see (causal, or
 *     past T) are skipped in its GEMMs, and masked elements are 0 in p:
 *     the mask's compares run only in the tiles (blocks) that hold a
 *     masked element, the diagonal's and the last past T, for they cost
 *     more issue slots than the tile's mmas (bench/sass_mix.sh: the
 *     forward's loop at D = 64 issues 1431 other instructions beside its
 *     128 HMMAs where it issued 1904, dq 1358 beside 192 where 1929,
 *     dk/dv 2212 beside 128 where 2591).
 * Tiles are bf16 (64, dc) rows dc+8 apart (dc = 16·NJ, zero past D and
 * past T; 16-byte asynchronous copies when D % 8 == 0, plain stores
 * otherwise), so ldmatrix's 8 rows fall on distinct banks.  Dynamic shared
 * memory: forward 54.1 KB at D=64 (MT=2: two q tiles, k and v twice),
 * 85.1 KB at D=128 (MT=1); dk/dv 55.1 KB and 103.1 KB (6 tiles and the
 * double lse/delta); dq 72.1 KB at D=64 (MT=2), 102.1 KB at D=128.
 * Registers (nvcc 13.0 -Xptxas -v, sm_90a, NJ = 1/2/4/8, MT 2/2/2/1):
 * forward 141/165/230/168 (94/92/123 at MT=1), dq 116/152/229/203
 * (64/94/128 at MT=1), dk/dv 94/128/168/255; spills only in dk/dv, 36
 * bytes at NJ=8 and 4 at NJ=2 and 4 (one word, since the unmasked path
 * was split from the masked one; sm_80: a few bytes more in dk/dv and the
 * forward at NJ=8).  Not done yet: Hopper's wgmma and the bulk tensor
 * copies (TMA); two key m-tiles a warp in dk/dv (its registers do not
 * allow it at D=64).
 */
#include "common.cuh"

#include <math.h>
#include <stdio.h>

#include <type_traits>
#include "rtc_mma.cuh"

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

// 2^x for the tensor-core kernels' softmax: MUFU.EX2 alone on the GPU
// (ex2.approx.ftz: relative error about 2^-22, a result below 2^-126 is 0,
// which p can spare), where exp2f without fast math wraps it in a compare
// and two predicated multiplies for denormal results; exp2f in the host
// build.  2^-inf = 0.
__device__ __forceinline__ float att_exp2(float x) {
#ifdef RTC_HOST
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// Max and sum over the 16 lanes of a half-warp (one row of a score tile).
__device__ __forceinline__ float att_max16(float v) {
#ifdef RTC_HOST
  return rtch_xor_reduce(v, rtc_op_max(), ATT_TX / 2, 1);  // (common.cuh's rtc_warp_sum)
#endif
  for (int o = ATT_TX / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float att_sum16(float v) {
#ifdef RTC_HOST
  return rtch_xor_reduce(v, rtc_op_add(), ATT_TX / 2, 1);
#endif
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

#define ATC_LOG2E 1.4426950408889634f
#define ATC_LN2 0.6931471805599453f

// Bytes of dynamic shared memory of the tensor-core kernels at dc = 16·NJ:
// bf16 tiles (64, dc) rows dc+8 apart, the tiles a loop walks over twice
// (the next one loads while the current one is used): five in the forward
// (q; k, v twice), six in the backward (k, v; q, dout twice in dk/dv, the
// other way round in dq) and the dk/dv kernel's lse and delta of a query
// tile, twice; 128 more to align the base.
static size_t att_tc_fwd_smem(int dc, int mt) {
  return 128 + (size_t)(mt + 4) * ATT_BQ * (dc + 8) * 2;
}
static size_t att_tc_dq_smem(int dc, int mt) {
  return 128 + (size_t)(2 * mt + 4) * ATT_BQ * (dc + 8) * 2;
}
static size_t att_tc_bwd_smem(int dc) {
  return 128 + 6 * (size_t)ATT_BQ * (dc + 8) * 2 + 4 * ATT_BQ * 4;
}

// The dynamic shared memory, its base rounded up to 128 bytes (ldmatrix's
// rows must be 16-byte aligned).
__device__ __forceinline__ unsigned char *att_tc_base(unsigned char *p) {
  return (unsigned char *)(((uintptr_t)p + 127) & ~(uintptr_t)127);
}

// Rows [t0, t0+64) of one head as bf16: s[r*ld + d] = g[(t0+r)*ldg + d] for
// d < dc, 0 past T or past D.  Where D, ldg and g allow, the rows go as
// 16-byte asynchronous copies (rtc_cp_async16): the caller commits them
// and waits (rtc_cp_async_wait) before a barrier and the first read; the
// zeros and the element-wise path are plain stores.
__device__ __forceinline__ void att_tc_load(rtc_bf16 *s, int ld, const rtc_bf16 *g, size_t ldg,
                                            int t0, int T, int D, int dc) {
  const rtc_bf16 zero = rtc_f2bf(0.0f);
  if (D % 8 == 0 && ldg % 8 == 0 && ((uintptr_t)g & 15) == 0) {
    int nc = dc / 8;  // 16-byte chunks a row
    for (int e = threadIdx.x; e < ATT_BQ * nc; e += ATT_THREADS) {
      int r = e / nc, d = (e - r * nc) * 8;
      rtc_bf16 *dst = s + r * ld + d;
      if (t0 + r < T && d < D)
        rtc_cp_async16(dst, g + (size_t)(t0 + r) * ldg + d);
      else
        for (int i = 0; i < 8; i++) dst[i] = zero;
    }
    return;
  }
  for (int e = threadIdx.x; e < ATT_BQ * dc; e += ATT_THREADS) {
    int r = e / dc, d = e - r * dc;
    s[r * ld + d] = t0 + r < T && d < D ? g[(size_t)(t0 + r) * ldg + d] : zero;
  }
}

// Fragment addresses in a bf16 tile s (rows ld apart) for the calling lane
// of rtc_ldsm_x4 (rtc_mma.cuh):
//   att_a:  the a of rows r0..r0+15, columns k0..k0+15 (row-major A);
//   att_bn: the b of two n-blocks, for B(k, n) = s[(n0+n)*ld + k0+k]: rows
//           of s are n (keys of kᵀ), k contiguous; r[0..1] n-block n0,
//           r[2..3] n-block n0+8;
//   att_bt: the b (with rtc_ldsm_x4_trans) of two n-blocks, for B(k, n) =
//           s[(k0+k)*ld + n0+n]: rows of s are k; r[0..1] n-block n0,
//           r[2..3] n0+8.
__device__ __forceinline__ const rtc_bf16 *att_a(const rtc_bf16 *s, int ld, int r0, int k0,
                                                 int lane) {
  return s + (r0 + lane % 16) * ld + k0 + 8 * (lane / 16);
}
__device__ __forceinline__ const rtc_bf16 *att_bn(const rtc_bf16 *s, int ld, int n0, int k0,
                                                  int lane) {
  return s + (n0 + lane % 8 + 8 * (lane / 16)) * ld + k0 + 8 * ((lane / 8) & 1);
}
__device__ __forceinline__ const rtc_bf16 *att_bt(const rtc_bf16 *s, int ld, int k0, int n0,
                                                  int lane) {
  return s + (k0 + lane % 8 + 8 * ((lane / 8) & 1)) * ld + n0 + 8 * (lane / 16);
}

// The a of the next mma from two accumulators (n-blocks 2c, 2c+1 of a 16x16
// block, fp32), rounded to bf16.
__device__ __forceinline__ void att_pack_a(uint32_t a[4], const float c0[4], const float c1[4]) {
  a[0] = rtc_pack_bf16x2(c0[0], c0[1]);
  a[1] = rtc_pack_bf16x2(c0[2], c0[3]);
  a[2] = rtc_pack_bf16x2(c1[0], c1[1]);
  a[3] = rtc_pack_bf16x2(c1[2], c1[3]);
}

// The products every kernel runs, for MT m-tiles of 16 rows a warp (each
// fragment ldmatrix brings feeds MT mmas):
//   att_tc_abt: acc[mt] (16, 16: two n-blocks of 8) += a[mt] · tᵀ over the
//     head dim, a[mt] the warp's rows (NJ a fragments), t rows n0..n0+15 of
//     a tile (rows ld apart): the scores s = q·kᵀ (sᵀ = k·qᵀ) and dp;
//   att_tc_ab: acc[mt] (16, dc: 2·NJ n-blocks) += a[mt] (one a fragment,
//     16 x 16) · t rows k0..k0+15: o += p·v, dq += ds·k, dv += pᵀ·dout,
//     dk += dsᵀ·q.
template <int NJ, int MT>
__device__ __forceinline__ void att_tc_abt(float (&acc)[MT][2][4], const uint32_t (&a)[MT][NJ][4],
                                           const rtc_bf16 *t, int ld, int n0, int lane) {
ATT_UNROLL
  for (int kk = 0; kk < NJ; kk++) {
    uint32_t f[4];
    rtc_ldsm_x4(f, att_bn(t, ld, n0, 16 * kk, lane));
ATT_UNROLL
    for (int mt = 0; mt < MT; mt++) {
      rtc_mma16816(acc[mt][0], a[mt][kk], f);
      rtc_mma16816(acc[mt][1], a[mt][kk], f + 2);
    }
  }
}
template <int NJ, int MT>
__device__ __forceinline__ void att_tc_ab(float (&acc)[MT][2 * NJ][4], const uint32_t (&a)[MT][4],
                                          const rtc_bf16 *t, int ld, int k0, int lane) {
ATT_UNROLL
  for (int n = 0; n < NJ; n++) {
    uint32_t f[4];
    rtc_ldsm_x4_trans(f, att_bt(t, ld, k0, 16 * n, lane));
ATT_UNROLL
    for (int mt = 0; mt < MT; mt++) {
      rtc_mma16816(acc[mt][2 * n], a[mt], f);
      rtc_mma16816(acc[mt][2 * n + 1], a[mt], f + 2);
    }
  }
}

// Zeroes an accumulator array of floats, of any shape.
template <class A>
__device__ __forceinline__ void att_tc_zero(A &acc) {
  float *f = reinterpret_cast<float *>(&acc);
ATT_UNROLL
  for (size_t i = 0; i < sizeof acc / sizeof(float); i++) f[i] = 0.0f;
}

// Adds a warp's (16, dc) accumulators acc (2·NJ n-blocks of 8 columns) to
// g: the calling lane's rows r_lo and r_lo + 8 (rows ldg apart, < T),
// columns 8j + 2(lane%4) and one more (< D); bf16 or fp32.
template <int NJ, class G>
__device__ __forceinline__ void att_tc_add(G *g, size_t ldg, int r_lo, int T, int D,
                                           const float (&acc)[2 * NJ][4]) {
  int tq = threadIdx.x % 4;
ATT_UNROLL
  for (int r = 0; r < 2; r++) {
    int row = r_lo + 8 * r;
    if (row >= T) continue;
    G *gr = g + (size_t)row * ldg;
ATT_UNROLL
    for (int n = 0; n < 2 * NJ; n++)
ATT_UNROLL
      for (int e = 0; e < 2; e++) {
        int d = 8 * n + 2 * tq + e;
        if (d < D) att_st(gr + d, att_ld(gr + d) + acc[n][2 * r + e]);
      }
  }
}

// The forward's m-tiles (16 query rows each) a warp owns: two where the
// registers allow (D <= 64: every k, v fragment loaded from shared memory
// feeds two mmas, halving ldmatrix's traffic a product, which bounds the
// one-tile kernel), one at D = 128.  A block's query tile is 64·MT rows.
template <int NJ>
struct AttFwdMT {
  static constexpr int value = NJ <= 4 ? 2 : 1;
};

// SHARDC_ATT_MT=1 in the environment: one m-tile a warp at every D, in
// the forward and in dq (for timing the two against each other:
// bench/gpu_check.sh step 4b).
static bool att_fwd_mt1(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("SHARDC_ATT_MT");
    v = e && !strcmp(e, "1");
  }
  return v != 0;
}

// out is (B,T,H,D), lse is (B,H,T), q is (B,T,H,D), k and v are (B,T,Hkv,D);
// grid (ceil(T/(64·MT)), H, B), ATT_THREADS threads, att_tc_fwd_smem(16·NJ,
// MT) bytes.  Warp w owns query rows 16·MT·w.. (MT m-tiles of 16) of the
// tile; lane l holds rows l/4 and l/4 + 8 of each m-tile in its
// accumulators (rtc_mma.cuh's layout): its q fragments, its scores (8
// n-blocks of 8 keys an m-tile), p and output (2·NJ n-blocks of 8 columns)
// all stay in registers.  out is bf16 or (O = float) fp32, unrounded.
template <int NJ, int MT, class O>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_tc_kernel(O *out, float *lse, const rtc_bf16 *q,
                                const rtc_bf16 *k, const rtc_bf16 *v, int T, int H, int Hkv,
                                int D, int causal, float scale) {
  const int dc = 16 * NJ, ldt = dc + 8, BQ = ATT_BQ * MT;
  RTC_DYNAMIC_SHARED(unsigned char, smem_raw);
  rtc_bf16 *Qs = (rtc_bf16 *)att_tc_base(smem_raw);  // (BQ, dc), 0 past T and D
  rtc_bf16 *KV = Qs + BQ * ldt;  // k, v tiles (BK, dc) of buffer i at KV + 2i·BK·ldt
  int q0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane & 3;
  int r0 = q0 + 16 * MT * w, t_lo = r0 + lane / 4;  // the warp's first row, the lane's
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  const rtc_bf16 *qb = q + (size_t)b * T * ldh + (size_t)h * D;
  const rtc_bf16 *kb = k + (size_t)b * T * ldkv + (size_t)hk * D;
  const rtc_bf16 *vb = v + (size_t)b * T * ldkv + (size_t)hk * D;
  for (int g = 0; g < MT; g++)
    att_tc_load(Qs + g * ATT_BQ * ldt, ldt, qb, ldh, q0 + g * ATT_BQ, T, D, dc);
  att_tc_load(KV, ldt, kb, ldkv, 0, T, D, dc);
  att_tc_load(KV + ATT_BK * ldt, ldt, vb, ldkv, 0, T, D, dc);
  rtc_cp_async_commit();
  rtc_cp_async_wait<0>();
  __syncthreads();
  uint32_t qa[MT][NJ][4];
ATT_UNROLL
  for (int mt = 0; mt < MT; mt++)
ATT_UNROLL
    for (int kk = 0; kk < NJ; kk++)
      rtc_ldsm_x4(qa[mt][kk], att_a(Qs, ldt, 16 * (MT * w + mt), 16 * kk, lane));

  const float sl2 = scale * ATC_LOG2E;  // scores in log2 units: p = exp2(s·sl2 - m)
  // per m-tile: the output, and the running max and (this lane's share of
  // the) sum of the lane's two rows
  float o[MT][2 * NJ][4], m[MT][2], l[MT][2];
  att_tc_zero(o);
ATT_UNROLL
  for (int mt = 0; mt < MT; mt++) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  int kend = causal ? min(T, q0 + BQ) : T;            // keys any row of the tile sees
  int wend = causal ? min(kend, r0 + 16 * MT) : kend;  // keys this warp's rows see
  for (int j0 = 0, it = 0; j0 < kend; j0 += ATT_BK, it++) {
    // the next tile loads into the other buffer (read in the last
    // iteration, before its closing barrier) while this one is used
    const rtc_bf16 *Ks = KV + 2 * (it & 1) * ATT_BK * ldt, *Vs = Ks + ATT_BK * ldt;
    if (j0 + ATT_BK < kend) {
      rtc_bf16 *Kn = KV + 2 * (~it & 1) * ATT_BK * ldt;
      att_tc_load(Kn, ldt, kb, ldkv, j0 + ATT_BK, T, D, dc);
      att_tc_load(Kn + ATT_BK * ldt, ldt, vb, ldkv, j0 + ATT_BK, T, D, dc);
    }
    rtc_cp_async_commit();
    rtc_cp_async_wait<1>();  // this tile's copies are done
    __syncthreads();
    // key blocks of 16 the warp needs: none where a causal tile lies past
    // every row of the warp (with MT = 2 a block's first warps see fewer
    // key tiles than its last)
    int nkb = min(ATT_BK / 16, (wend - j0 + 15) / 16);
    // s = q_w · k_tileᵀ, (16·MT, 16·nkb), key block c of 16 in s[c]: n-block
    // n of 8 keys is s[n/2][mt][n%2]
    float s[ATT_BK / 16][MT][2][4];
    att_tc_zero(s);
ATT_UNROLL
    for (int c = 0; c < ATT_BK / 16; c++)
      if (c < nkb) att_tc_abt<NJ, MT>(s[c], qa, Ks, ldt, 16 * c, lane);
    // online softmax, per m-tile: masked scores (key past T, above the
    // diagonal, or in a block the warp skipped) are -inf, in the tiles
    // that have any (the diagonal's, the last past T: the mask's compares
    // cost more issue slots than the tile's mmas, so a whole tile goes
    // without them); row maxima of the raw scores over the 4 lanes of a
    // row, scaled after (sl2 > 0); p = exp2(s·sl2 - m_new) as one FMA and
    // MUFU.EX2, the lane's share of the row sums of the unrounded p, the
    // output rescaled by exp2(m_old - m_new)
    const bool whole = j0 + ATT_BK <= wend && (!causal || j0 + ATT_BK <= r0 + 1);
ATT_UNROLL
    for (int mt = 0; mt < MT; mt++) {
      int tm = t_lo + 16 * mt;
      float mx[2] = {-INFINITY, -INFINITY};
      if (whole) {
ATT_UNROLL
        for (int n = 0; n < ATT_BK / 8; n++)
ATT_UNROLL
          for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[n >> 1][mt][n & 1][e]);
      } else {
ATT_UNROLL
        for (int n = 0; n < ATT_BK / 8; n++)
ATT_UNROLL
          for (int e = 0; e < 4; e++) {
            int key = j0 + 8 * n + 2 * tq + (e & 1), t = tm + 8 * (e >> 1);
            bool live = 8 * n < 16 * nkb && key < T && (!causal || key <= t);
            float &x = s[n >> 1][mt][n & 1][e];
            x = live ? x : -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
          }
      }
      float corr[2], mb[2];
ATT_UNROLL
      for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float mnew = fmaxf(m[mt][r], mx[r] * sl2);
        mb[r] = mnew == -INFINITY ? 0.0f : mnew;  // a row that sees no key yet: p = 0
        corr[r] = att_exp2(m[mt][r] - mb[r]);        // 0 on its first keys (m = -inf)
        m[mt][r] = mnew;
        l[mt][r] *= corr[r];
      }
ATT_UNROLL
      for (int n = 0; n < ATT_BK / 8; n++)
ATT_UNROLL
        for (int e = 0; e < 4; e++) {
          float p = att_exp2(fmaf(s[n >> 1][mt][n & 1][e], sl2, -mb[e >> 1]));
          s[n >> 1][mt][n & 1][e] = p;
          l[mt][e >> 1] += p;
        }
ATT_UNROLL
      for (int n = 0; n < 2 * NJ; n++) {
        o[mt][n][0] *= corr[0];
        o[mt][n][1] *= corr[0];
        o[mt][n][2] *= corr[1];
        o[mt][n][3] *= corr[1];
      }
    }
    // o_w += p_w · v_tile, (16·MT, dc): p's accumulators are the a
    // fragments; each v fragment feeds MT mmas
ATT_UNROLL
    for (int c = 0; c < ATT_BK / 16; c++)
      if (c < nkb) {
        uint32_t pa[MT][4];
ATT_UNROLL
        for (int mt = 0; mt < MT; mt++) att_pack_a(pa[mt], s[c][mt][0], s[c][mt][1]);
        att_tc_ab<NJ, MT>(o, pa, Vs, ldt, 16 * c, lane);
      }
    __syncthreads();  // this buffer is read: the next iteration but one loads into it
  }
ATT_UNROLL
  for (int mt = 0; mt < MT; mt++)
ATT_UNROLL
    for (int r = 0; r < 2; r++) {
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
      int t = t_lo + 16 * mt + 8 * r;
      if (t >= T) continue;
      float inv = 1.0f / l[mt][r];
      O *orow = out + ((size_t)b * T + t) * ldh + (size_t)h * D;
ATT_UNROLL
      for (int n = 0; n < 2 * NJ; n++)
ATT_UNROLL
        for (int e = 0; e < 2; e++) {
          int d = 8 * n + 2 * tq + e;
          if (d < D) att_st(orow + d, o[mt][n][2 * r + e] * inv);
        }
      if (lse && tq == 0) lse[((size_t)b * H + h) * T + t] = m[mt][r] * ATC_LN2 + logf(l[mt][r]);
    }
}

// dk and dv are (B,T,Hkv,D), accumulated; the rest as the launcher. grid
// (ceil(T/64), Hkv, B), ATT_THREADS threads, att_tc_bwd_smem(16·NJ) bytes.
// Warp w owns keys 16w..16w+15 of the tile: their k and v fragments (the a
// of sᵀ = k·qᵀ and dpᵀ = v·doutᵀ) and their dk, dv accumulators stay in
// registers; a query tile is taken 16 queries at a time, so a block's pᵀ
// and dsᵀ are one a fragment each.  lane l holds keys l/4 and l/4 + 8.
// dk, dv bf16 or (G = float) fp32.
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
  rtc_bf16 *QD = Vs + ATT_BK * ldt;  // q, dout tiles (BQ, dc) of buffer i at QD + 2i·BQ·ldt
  float *LD = (float *)(QD + 4 * ATT_BQ * ldt);  // lse·log2(e), delta (BQ each) of buffer i at LD + 2i·BQ
  int j0 = blockIdx.x * ATT_BK, hk = blockIdx.y, b = blockIdx.z, rep = H / Hkv;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane & 3;
  int key_lo = j0 + 16 * w + lane / 4;  // this lane's keys: key_lo and key_lo + 8
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  size_t koff = (size_t)b * T * ldkv + (size_t)hk * D;
  int qstart = causal ? j0 / ATT_BQ * ATT_BQ : 0;  // the first query tile that sees key j0
  // The loop's tiles: query tile q0 of head h, h over the group's heads;
  // load(h, q0, i) fills buffer i with them (asynchronously, see att_tc_load)
  auto load = [&](int h, int q0, int i) {
    size_t qoff = (size_t)b * T * ldh + (size_t)h * D;
    rtc_bf16 *Qn = QD + 2 * i * ATT_BQ * ldt;
    att_tc_load(Qn, ldt, q + qoff, ldh, q0, T, D, dc);
    att_tc_load(Qn + ATT_BQ * ldt, ldt, dout + qoff, ldh, q0, T, D, dc);
    const float *lb = lse + ((size_t)b * H + h) * T, *db = delta + ((size_t)b * H + h) * T;
    float *Ln = LD + 2 * i * ATT_BQ;
    for (int r = threadIdx.x; r < ATT_BQ; r += ATT_THREADS) {
      Ln[r] = q0 + r < T ? lb[q0 + r] * ATC_LOG2E : 0.0f;
      Ln[ATT_BQ + r] = q0 + r < T ? db[q0 + r] : 0.0f;
    }
  };
  att_tc_load(Ks, ldt, k + koff, ldkv, j0, T, D, dc);
  att_tc_load(Vs, ldt, v + koff, ldkv, j0, T, D, dc);
  load(hk * rep, qstart, 0);
  rtc_cp_async_commit();
  rtc_cp_async_wait<0>();
  __syncthreads();
  uint32_t ka[1][NJ][4], va[1][NJ][4];  // one m-tile of keys
ATT_UNROLL
  for (int kk = 0; kk < NJ; kk++) {
    rtc_ldsm_x4(ka[0][kk], att_a(Ks, ldt, 16 * w, 16 * kk, lane));
    rtc_ldsm_x4(va[0][kk], att_a(Vs, ldt, 16 * w, 16 * kk, lane));
  }
  const float sl2 = scale * ATC_LOG2E;
  float dka[1][2 * NJ][4], dva[1][2 * NJ][4];
  att_tc_zero(dka);
  att_tc_zero(dva);
  int it = 0;
  for (int h = hk * rep; h < (hk + 1) * rep; h++) {
    for (int q0 = qstart; q0 < T; q0 += ATT_BQ, it++) {
      // the next tile loads into the other buffer while this one is used
      const rtc_bf16 *Qs = QD + 2 * (it & 1) * ATT_BQ * ldt, *dOs = Qs + ATT_BQ * ldt;
      const float *Ls = LD + 2 * (it & 1) * ATT_BQ, *Dl = Ls + ATT_BQ;
      if (q0 + ATT_BQ < T)
        load(h, q0 + ATT_BQ, ~it & 1);
      else if (h + 1 < (hk + 1) * rep)
        load(h + 1, qstart, ~it & 1);
      rtc_cp_async_commit();
      rtc_cp_async_wait<1>();  // this tile's copies are done
      __syncthreads();
      // query blocks of 16 that see some key of the warp: [qlo, qhi)
      int qlo = causal ? max(0, (j0 + 16 * w - q0) / 16) : 0;
      int qhi = min(ATT_BQ / 16, (T - q0 + 15) / 16);
ATT_UNROLL
      for (int c = 0; c < ATT_BQ / 16; c++) {
        if (c < qlo || c >= qhi) continue;
        // sᵀ = k_w · q_cᵀ and dpᵀ = v_w · dout_cᵀ, (16, 16)
        float s[1][2][4], dp[1][2][4];
        att_tc_zero(s);
        att_tc_zero(dp);
        att_tc_abt<NJ, 1>(s, ka, Qs, ldt, 16 * c, lane);
        att_tc_abt<NJ, 1>(dp, va, dOs, ldt, 16 * c, lane);
        // pᵀ = exp2(sᵀ·sl2 - lse·log2(e)) (one FMA, one MUFU.EX2) and dsᵀ =
        // pᵀ·(dpᵀ - delta)·scale, 0 where masked or past T: the compares
        // only in the blocks that hold such an element (whole: none)
        const bool whole = j0 + 16 * w + 16 <= T && q0 + 16 * c + 16 <= T &&
                           (!causal || j0 + 16 * w + 15 <= q0 + 16 * c);
        if (whole) {
ATT_UNROLL
          for (int n = 0; n < 2; n++)
ATT_UNROLL
            for (int e = 0; e < 4; e++) {
              int qc = 16 * c + 8 * n + 2 * tq + (e & 1);
              float p = att_exp2(fmaf(s[0][n][e], sl2, -Ls[qc]));
              s[0][n][e] = p;
              dp[0][n][e] = p * (dp[0][n][e] - Dl[qc]) * scale;
            }
        } else {
ATT_UNROLL
          for (int n = 0; n < 2; n++)
ATT_UNROLL
            for (int e = 0; e < 4; e++) {
              int qc = 16 * c + 8 * n + 2 * tq + (e & 1), key = key_lo + 8 * (e >> 1);
              bool live = key < T && q0 + qc < T && (!causal || key <= q0 + qc);
              float p = live ? att_exp2(fmaf(s[0][n][e], sl2, -Ls[qc])) : 0.0f;
              s[0][n][e] = p;
              dp[0][n][e] = p * (dp[0][n][e] - Dl[qc]) * scale;
            }
        }
        // dv_w += pᵀ · dout_c and dk_w += dsᵀ · q_c, (16, dc)
        uint32_t pa[1][4], dsa[1][4];
        att_pack_a(pa[0], s[0][0], s[0][1]);
        att_pack_a(dsa[0], dp[0][0], dp[0][1]);
        att_tc_ab<NJ, 1>(dva, pa, dOs, ldt, 16 * c, lane);
        att_tc_ab<NJ, 1>(dka, dsa, Qs, ldt, 16 * c, lane);
      }
      __syncthreads();  // this buffer is read: the next iteration but one loads into it
    }
  }
  if (dk) att_tc_add<NJ>(dk + koff, ldkv, key_lo, T, D, dka[0]);
  if (dv) att_tc_add<NJ>(dv + koff, ldkv, key_lo, T, D, dva[0]);
}

// dq is (B,T,H,D), accumulated; the rest as the launcher. grid
// (ceil(T/(64·MT)), H, B), ATT_THREADS threads, att_tc_dq_smem(16·NJ, MT)
// bytes.  Warp w owns query rows 16·MT·w.. (MT m-tiles of 16, as the
// forward: AttFwdMT) of the tile: their q and dout fragments and dq
// accumulators stay in registers, and each k, v fragment feeds MT mmas; a
// key tile is taken 16 keys at a time (a block's ds is one a fragment an
// m-tile).  lane l holds rows l/4 and l/4 + 8 of each m-tile.  dq bf16 or
// (G = float) fp32.
template <int NJ, int MT, class G>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_tc_kernel(G *dq, const rtc_bf16 *dout, const rtc_bf16 *q,
                                    const rtc_bf16 *k, const rtc_bf16 *v, const float *lse,
                                    const float *delta, int T, int H, int Hkv, int D,
                                    int causal, float scale) {
  const int dc = 16 * NJ, ldt = dc + 8, BQ = ATT_BQ * MT;
  RTC_DYNAMIC_SHARED(unsigned char, smem_raw);
  rtc_bf16 *Qs = (rtc_bf16 *)att_tc_base(smem_raw);  // (BQ, dc), 0 past T and D
  rtc_bf16 *dOs = Qs + BQ * ldt;                      // (BQ, dc)
  rtc_bf16 *KV = dOs + BQ * ldt;  // k, v tiles (BK, dc) of buffer i at KV + 2i·BK·ldt
  int q0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane & 3;
  int r0 = q0 + 16 * MT * w, t_lo = r0 + lane / 4;  // the warp's first row, the lane's
  size_t ldh = (size_t)H * D, ldkv = (size_t)Hkv * D;
  size_t qoff = (size_t)b * T * ldh + (size_t)h * D;
  size_t koff = (size_t)b * T * ldkv + (size_t)hk * D;
  for (int g = 0; g < MT; g++) {
    att_tc_load(Qs + g * ATT_BQ * ldt, ldt, q + qoff, ldh, q0 + g * ATT_BQ, T, D, dc);
    att_tc_load(dOs + g * ATT_BQ * ldt, ldt, dout + qoff, ldh, q0 + g * ATT_BQ, T, D, dc);
  }
  att_tc_load(KV, ldt, k + koff, ldkv, 0, T, D, dc);
  att_tc_load(KV + ATT_BK * ldt, ldt, v + koff, ldkv, 0, T, D, dc);
  rtc_cp_async_commit();
  rtc_cp_async_wait<0>();
  __syncthreads();
  uint32_t qa[MT][NJ][4], ga[MT][NJ][4];
ATT_UNROLL
  for (int mt = 0; mt < MT; mt++)
ATT_UNROLL
    for (int kk = 0; kk < NJ; kk++) {
      rtc_ldsm_x4(qa[mt][kk], att_a(Qs, ldt, 16 * (MT * w + mt), 16 * kk, lane));
      rtc_ldsm_x4(ga[mt][kk], att_a(dOs, ldt, 16 * (MT * w + mt), 16 * kk, lane));
    }
  const float sl2 = scale * ATC_LOG2E;
  float L[MT][2], Dl[MT][2];
ATT_UNROLL
  for (int mt = 0; mt < MT; mt++)
ATT_UNROLL
    for (int r = 0; r < 2; r++) {
      int t = t_lo + 16 * mt + 8 * r;
      L[mt][r] = t < T ? lse[((size_t)b * H + h) * T + t] * ATC_LOG2E : 0.0f;
      Dl[mt][r] = t < T ? delta[((size_t)b * H + h) * T + t] : 0.0f;
    }
  float dqa[MT][2 * NJ][4];
  att_tc_zero(dqa);
  int kend = causal ? min(T, q0 + BQ) : T;
  int wend = causal ? min(kend, r0 + 16 * MT) : kend;  // keys this warp's rows see
  for (int j0 = 0, it = 0; j0 < kend; j0 += ATT_BK, it++) {
    // the next tile loads into the other buffer while this one is used
    const rtc_bf16 *Ks = KV + 2 * (it & 1) * ATT_BK * ldt, *Vs = Ks + ATT_BK * ldt;
    if (j0 + ATT_BK < kend) {
      rtc_bf16 *Kn = KV + 2 * (~it & 1) * ATT_BK * ldt;
      att_tc_load(Kn, ldt, k + koff, ldkv, j0 + ATT_BK, T, D, dc);
      att_tc_load(Kn + ATT_BK * ldt, ldt, v + koff, ldkv, j0 + ATT_BK, T, D, dc);
    }
    rtc_cp_async_commit();
    rtc_cp_async_wait<1>();  // this tile's copies are done
    __syncthreads();
    int nkb = min(ATT_BK / 16, (wend - j0 + 15) / 16);  // key blocks of 16 the warp needs
ATT_UNROLL
    for (int c = 0; c < ATT_BK / 16; c++) {
      if (c >= nkb) continue;
      // s = q_w · k_cᵀ and dp = dout_w · v_cᵀ, (16·MT, 16): each k, v
      // fragment feeds MT mmas
      float s[MT][2][4], dp[MT][2][4];
      att_tc_zero(s);
      att_tc_zero(dp);
      att_tc_abt<NJ, MT>(s, qa, Ks, ldt, 16 * c, lane);
      att_tc_abt<NJ, MT>(dp, ga, Vs, ldt, 16 * c, lane);
      // ds = p·(dp - delta)·scale with p = exp2(s·sl2 - lse·log2(e)) (one
      // FMA, one MUFU.EX2), 0 where masked or past T: the compares only in
      // the blocks that hold such an element (whole: none)
      const bool whole = j0 + 16 * c + 16 <= T && r0 + 16 * MT <= T &&
                         (!causal || j0 + 16 * c + 15 <= r0);
      uint32_t dsa[MT][4];
ATT_UNROLL
      for (int mt = 0; mt < MT; mt++) {
        if (whole) {
ATT_UNROLL
          for (int n = 0; n < 2; n++)
ATT_UNROLL
            for (int e = 0; e < 4; e++) {
              float p = att_exp2(fmaf(s[mt][n][e], sl2, -L[mt][e >> 1]));
              s[mt][n][e] = p * (dp[mt][n][e] - Dl[mt][e >> 1]) * scale;
            }
        } else {
ATT_UNROLL
          for (int n = 0; n < 2; n++)
ATT_UNROLL
            for (int e = 0; e < 4; e++) {
              int key = j0 + 16 * c + 8 * n + 2 * tq + (e & 1), t = t_lo + 16 * mt + 8 * (e >> 1);
              bool live = key < T && t < T && (!causal || key <= t);
              float p = live ? att_exp2(fmaf(s[mt][n][e], sl2, -L[mt][e >> 1])) : 0.0f;
              s[mt][n][e] = p * (dp[mt][n][e] - Dl[mt][e >> 1]) * scale;
            }
        }
        att_pack_a(dsa[mt], s[mt][0], s[mt][1]);
      }
      // dq_w += ds · k_c, (16·MT, dc)
      att_tc_ab<NJ, MT>(dqa, dsa, Ks, ldt, 16 * c, lane);
    }
    __syncthreads();  // this buffer is read: the next iteration but one loads into it
  }
ATT_UNROLL
  for (int mt = 0; mt < MT; mt++) att_tc_add<NJ>(dq + qoff, ldh, t_lo + 16 * mt, T, D, dqa[mt]);
}

// The dynamic shared memory a tensor-core kernel asks for against what a
// block of this GPU may opt in to (sharedMemPerBlockOptin, read once): a
// clear error before the launch rather than its "invalid argument".
static void att_smem_check(size_t smem, int D, const char *who) {
  static size_t optin = 0;
  if (!optin) {
    int dev;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    optin = prop.sharedMemPerBlockOptin;
  }
  if (smem <= optin) return;
  char msg[200];
  snprintf(msg, sizeof msg,
           "the attention kernel at head dim %d needs %zu bytes of shared memory a block; this "
           "GPU allows %zu",
           D, smem, optin);
  rtc_fail("CUDA", who, msg, __FILE__, __LINE__,
           "head dims up to 64 fit every GPU from sm_80 on; 128 needs an A100/H100-class GPU "
           "(163 or 227 KB a block), not sm_86/sm_89 (99 KB)");
}

// On a launcher's first call (*ready unset): smem checked against the
// opt-in limit, then set as the kernel's dynamic shared memory limit.
template <class K>
static void att_opt_in(int *ready, K kernel, size_t smem, int D, const char *who) {
  if (*ready) return;
  att_smem_check(smem, D, who);
  cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  *ready = 1;
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
template <int NJ, int MT, class O>
static void att_forward_tc(O *out, float *lse, const rtc_bf16 *q, const rtc_bf16 *k,
                           const rtc_bf16 *v, int B, int T, int H, int Hkv, int D, int causal,
                           float scale) {
  static int ready = 0;
  size_t smem = att_tc_fwd_smem(16 * NJ, MT);
  att_opt_in(&ready, attention_forward_tc_kernel<NJ, MT, O>, smem, D, "rt_attention_forward_cu");
  dim3 grid((T + ATT_BQ * MT - 1) / (ATT_BQ * MT), H, B);
  RTC_LAUNCH_SMEM((attention_forward_tc_kernel<NJ, MT, O>), grid, ATT_THREADS, smem, out, lse, q, k, v,
             T, H, Hkv, D, causal, scale);
}

template <int NJ, class S, class O>
static void att_forward(O *out, float *lse, const S *q, const S *k, const S *v, int B, int T,
                        int H, int Hkv, int D, int causal, float scale) {
  static int ready = 0;
  dim3 grid((T + ATT_BQ - 1) / ATT_BQ, H, B);
  if constexpr (std::is_same<S, rtc_bf16>::value) {
    constexpr int MT = AttFwdMT<NJ>::value;
    if (MT > 1 && att_fwd_mt1()) {
      att_forward_tc<NJ, 1>(out, lse, q, k, v, B, T, H, Hkv, D, causal, scale);
      return;
    }
    att_forward_tc<NJ, MT>(out, lse, q, k, v, B, T, H, Hkv, D, causal, scale);
  } else {  // fp32: the CUDA-core kernels
    att_opt_in(&ready, attention_forward_kernel<NJ, S>, att_fwd_smem(16 * NJ, 16 * NJ), D,
               "rt_attention_forward_cu");
    RTC_LAUNCH_SMEM((attention_forward_kernel<NJ, S>), grid, ATT_THREADS, att_fwd_smem(D, 16 * NJ), out,
               lse, q, k, v, T, H, Hkv, D, causal, scale);
  }
}

template <int NJ, int MT, class G>
static void att_dq_tc(G *dq, const rtc_bf16 *dout, const rtc_bf16 *q, const rtc_bf16 *k,
                      const rtc_bf16 *v, const float *lse, const float *delta, int B, int T,
                      int H, int Hkv, int D, int causal, float scale) {
  static int ready = 0;
  size_t smem = att_tc_dq_smem(16 * NJ, MT);
  att_opt_in(&ready, attention_backward_dq_tc_kernel<NJ, MT, G>, smem, D,
             "rt_attention_backward_cu");
  dim3 grid((T + ATT_BQ * MT - 1) / (ATT_BQ * MT), H, B);
  RTC_LAUNCH_SMEM((attention_backward_dq_tc_kernel<NJ, MT, G>), grid, ATT_THREADS, smem, dq, dout, q,
             k, v, lse, delta, T, H, Hkv, D, causal, scale);
}

template <int NJ, class S, class G>
static void att_backward(G *dq, G *dk, G *dv, const S *dout, const S *q, const S *k, const S *v,
                         const float *lse, const float *delta, int B, int T, int H, int Hkv,
                         int D, int causal, float scale) {
  static int ready = 0;
  int ntiles = (T + ATT_BQ - 1) / ATT_BQ;
  if constexpr (std::is_same<S, rtc_bf16>::value) {
    size_t smem = att_tc_bwd_smem(16 * NJ);
    att_opt_in(&ready, attention_backward_dkdv_tc_kernel<NJ, G>, smem, D,
               "rt_attention_backward_cu");
    if (dk || dv)
      RTC_LAUNCH_SMEM((attention_backward_dkdv_tc_kernel<NJ, G>), dim3(ntiles, Hkv, B), ATT_THREADS,
                 smem, dk, dv, dout, q, k, v, lse, delta, T, H, Hkv, D, causal, scale);
    constexpr int MT = AttFwdMT<NJ>::value;
    if (dq && MT > 1 && att_fwd_mt1())
      att_dq_tc<NJ, 1>(dq, dout, q, k, v, lse, delta, B, T, H, Hkv, D, causal, scale);
    else if (dq)
      att_dq_tc<NJ, MT>(dq, dout, q, k, v, lse, delta, B, T, H, Hkv, D, causal, scale);
  } else {  // fp32: the CUDA-core kernels
    static int ready_dq = 0;
    size_t max_smem = att_bwd_smem(16 * NJ, 16 * NJ);
    att_opt_in(&ready, attention_backward_dkdv_kernel<NJ, S>, max_smem, D,
               "rt_attention_backward_cu");
    att_opt_in(&ready_dq, attention_backward_dq_kernel<NJ, S>, max_smem, D,
               "rt_attention_backward_cu");
    size_t smem = att_bwd_smem(D, 16 * NJ);
    if (dk || dv)
      RTC_LAUNCH_SMEM((attention_backward_dkdv_kernel<NJ, S>), dim3(ntiles, Hkv, B), ATT_THREADS, smem,
                 dk, dv, dout, q, k, v, lse, delta, T, H, Hkv, D, causal, scale);
    if (dq)
      RTC_LAUNCH_SMEM((attention_backward_dq_kernel<NJ, S>), dim3(ntiles, H, B), ATT_THREADS, smem, dq,
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
