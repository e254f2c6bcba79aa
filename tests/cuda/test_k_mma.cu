/* test_k_mma.cu — the warp-level instructions of runtime/cuda/rtc_mma.cuh
 * (mma.sync m16n8k16 bf16, ldmatrix x4 and x4.trans, cp.async and its
 * groups, the bf16 pair packing) against the register layouts the PTX ISA
 * documents, spelled here a second way (per element, as the ISA's tables
 * give them) rather than through the helpers the kernels use.  On the host
 * build this checks the twins; compiled by nvcc and run on a GPU
 * (bench/gpu_check.sh), the same checks hold the hardware to the layouts
 * the twins assume, so the attention kernels' host tests mean something.
 *
 * The mma's inputs are small integers, so every product and sum is exact in
 * fp32 whatever the order: results must match to the bit on both.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "rtc_mma.cuh"

static int failures;
static void check(const char *what, bool ok) {
  printf("%-64s %s\n", what, ok ? "PASS" : "FAIL");
  if (!ok) failures++;
}

static uint16_t bf16_bits(float f) {  // f is exact in bf16 here
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

/* One warp: D = A·B + C twice over (acc += A·B, twice), A (16,16) row-major,
 * B (16,8) row-major (k, n), C and D (16,8) fp32, each register filled from
 * the ISA's per-element formulas for .m16n8k16 .bf16. */
__global__ void k_mma(float *d, const uint16_t *a, const uint16_t *b, const float *c) {
  int lane = threadIdx.x % 32, g = lane >> 2, t = lane % 4;
  uint32_t ar[4] = {0, 0, 0, 0}, br[2] = {0, 0};
  for (int i = 0; i < 8; i++) {  // a0..a7, two to a register, low first
    int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
    ar[i / 2] |= (uint32_t)a[row * 16 + col] << (16 * (i % 2));
  }
  for (int i = 0; i < 4; i++) {  // b0..b3
    int row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0), col = g;
    br[i / 2] |= (uint32_t)b[row * 8 + col] << (16 * (i % 2));
  }
  float acc[4];
  for (int i = 0; i < 4; i++) acc[i] = c[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)];
  rtc_mma16816(acc, ar, br);
  rtc_mma16816(acc, ar, br);
  for (int i = 0; i < 4; i++) d[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)] = acc[i];
}

/* One warp: a (16, 16) tile of b16 codes in shared memory, rows LD apart;
 * lane l points at row l%16, column 8(l/16) (matrix l/8 is the 8x8 block at
 * rows 8((l/8)&1), columns 8(l/16)); out[l*8 + i] is register i of
 * ldmatrix x4, out[l*8 + 4 + i] of x4.trans. */
#define LD 24
__global__ void k_ldsm(uint32_t *out, const uint16_t *tile) {
  __shared__ __align__(16) uint16_t s[16 * LD];
  int lane = threadIdx.x % 32;
  for (int e = lane; e < 16 * LD; e += 32) s[e] = tile[e];
  __syncwarp();
  uint32_t r[4], rt[4];
  const uint16_t *p = s + (lane % 16) * LD + 8 * (lane / 16);
  rtc_ldsm_x4(r, p);
  rtc_ldsm_x4_trans(rt, p);
  for (int i = 0; i < 4; i++) {
    out[lane * 8 + i] = r[i];
    out[lane * 8 + 4 + i] = rt[i];
  }
}

/* 64 threads: thread x copies chunk x (16 bytes) of src into shared memory
 * in group 0 and chunk 64 + x in group 1; after wait<1> and a barrier the
 * first half must be there (out[0..63] chunks as read by thread x from
 * chunk 63 - x, another thread's), after wait<0> the second.  On the host
 * twin the second half also reads as poison after wait<1> (in flight). */
__global__ void k_cp_async(uint32_t *out, int *in_flight_poisoned, const uint32_t *src) {
  __shared__ __align__(16) uint32_t s[128 * 4];
  int x = threadIdx.x;
  rtc_cp_async16(s + 4 * x, src + 4 * x);
  rtc_cp_async_commit();
  rtc_cp_async16(s + 4 * (64 + x), src + 4 * (64 + x));
  rtc_cp_async_commit();
  rtc_cp_async_wait<1>();
  __syncthreads();
  for (int i = 0; i < 4; i++) out[4 * x + i] = s[4 * (63 - x) + i];
#ifdef RTC_HOST
  // (its own group 1: another thread's may be done, its wait run first)
  if (x == 0) *in_flight_poisoned = s[4 * 64] == 0xffffffffu && s[4 * 64 + 3] == 0xffffffffu;
#else
  if (x == 0) *in_flight_poisoned = 1;
#endif
  rtc_cp_async_wait<0>();
  __syncthreads();
  for (int i = 0; i < 4; i++) out[4 * (64 + x) + i] = s[4 * (127 - x) + i];
}

__global__ void k_pack(uint32_t *out, float lo, float hi) {
  if (threadIdx.x == 0) *out = rtc_pack_bf16x2(lo, hi);
}

int main(void) {
  srand(12345);
  /* 1. mma.sync m16n8k16 */
  {
    uint16_t ha[256], hb[128];
    float fa[256], fb[128], hc[128], hd[128], want[128];
    for (int i = 0; i < 256; i++) fa[i] = (float)(rand() % 17 - 8), ha[i] = bf16_bits(fa[i]);
    for (int i = 0; i < 128; i++) fb[i] = (float)(rand() % 17 - 8), hb[i] = bf16_bits(fb[i]);
    for (int i = 0; i < 128; i++) hc[i] = (float)(rand() % 2001 - 1000);
    for (int m = 0; m < 16; m++)
      for (int n = 0; n < 8; n++) {
        float s = 0;
        for (int k = 0; k < 16; k++) s += fa[m * 16 + k] * fb[k * 8 + n];
        want[m * 8 + n] = hc[m * 8 + n] + 2 * s;
      }
    uint16_t *da, *db;
    float *dc, *dd;
    cudaCheck(cudaMalloc(&da, sizeof ha));
    cudaCheck(cudaMalloc(&db, sizeof hb));
    cudaCheck(cudaMalloc(&dc, sizeof hc));
    cudaCheck(cudaMalloc(&dd, sizeof hd));
    cudaCheck(cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dc, hc, sizeof hc, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(dd, 0xff, sizeof hd));
    RTC_LAUNCH(k_mma, 1, 32, 0, dd, da, db, dc);
    cudaCheck(cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < 128; i++) bad += hd[i] != want[i];
    if (bad) printf("  %d of 128 elements differ (d[0] %g, want %g)\n", bad, hd[0], want[0]);
    check("mma m16n8k16 bf16: d = c + 2 a.b, ISA register layout", bad == 0);
    cudaCheck(cudaFree(da));
    cudaCheck(cudaFree(db));
    cudaCheck(cudaFree(dc));
    cudaCheck(cudaFree(dd));
  }
  /* 2. ldmatrix x4 and x4.trans */
  {
    uint16_t tile[16 * LD];
    for (int r = 0; r < 16; r++)
      for (int c = 0; c < LD; c++) tile[r * LD + c] = (uint16_t)(r * 256 + c);
    uint32_t hout[256];
    uint16_t *dt;
    uint32_t *dout;
    cudaCheck(cudaMalloc(&dt, sizeof tile));
    cudaCheck(cudaMalloc(&dout, sizeof hout));
    cudaCheck(cudaMemcpy(dt, tile, sizeof tile, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(dout, 0xff, sizeof hout));
    RTC_LAUNCH(k_ldsm, 1, 32, 0, dout, dt);
    cudaCheck(cudaMemcpy(hout, dout, sizeof hout, cudaMemcpyDeviceToHost));
    int bad = 0, badt = 0;
    for (int l = 0; l < 32; l++)
      for (int i = 0; i < 4; i++) {
        int r0 = 8 * (i & 1), c0 = 8 * (i >> 1);  // matrix i's origin in the tile
        // x4: row l/4 of matrix i, columns 2(l%4) (low half) and 2(l%4)+1
        uint32_t want = tile[(r0 + l / 4) * LD + c0 + 2 * (l % 4)] |
                        (uint32_t)tile[(r0 + l / 4) * LD + c0 + 2 * (l % 4) + 1] << 16;
        // .trans: column l/4 of matrix i, rows 2(l%4) (low half) and 2(l%4)+1
        uint32_t wantt = tile[(r0 + 2 * (l % 4)) * LD + c0 + l / 4] |
                         (uint32_t)tile[(r0 + 2 * (l % 4) + 1) * LD + c0 + l / 4] << 16;
        bad += hout[l * 8 + i] != want;
        badt += hout[l * 8 + 4 + i] != wantt;
      }
    check("ldmatrix m8n8 x4: lane l holds row l/4, columns 2(l%4), +1", bad == 0);
    check("ldmatrix m8n8 x4.trans: lane l holds column l/4, rows 2(l%4), +1", badt == 0);
    cudaCheck(cudaFree(dt));
    cudaCheck(cudaFree(dout));
  }
  /* 3. cp.async groups */
  {
    uint32_t hsrc[512], hout[512];
    for (int i = 0; i < 512; i++) hsrc[i] = 0x9e3779b9u * (uint32_t)(i + 1);
    uint32_t *dsrc, *dout;
    int *dflag, flag = 0;
    cudaCheck(cudaMalloc(&dsrc, sizeof hsrc));
    cudaCheck(cudaMalloc(&dout, sizeof hout));
    cudaCheck(cudaMalloc(&dflag, sizeof flag));
    cudaCheck(cudaMemcpy(dsrc, hsrc, sizeof hsrc, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(dout, 0, sizeof hout));
    RTC_LAUNCH(k_cp_async, 1, 64, 0, dout, dflag, dsrc);
    cudaCheck(cudaMemcpy(hout, dout, sizeof hout, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
    int bad0 = 0, bad1 = 0;
    for (int x = 0; x < 64; x++)
      for (int i = 0; i < 4; i++) {
        bad0 += hout[4 * x + i] != hsrc[4 * (63 - x) + i];
        bad1 += hout[4 * (64 + x) + i] != hsrc[4 * (127 - x) + i];
      }
    check("cp.async: group 0 is in shared memory after wait_group 1", bad0 == 0);
    check("cp.async: group 1 is in shared memory after wait_group 0", bad1 == 0);
    check("cp.async: (host twin) group 1 reads as poison while in flight", flag == 1);
    cudaCheck(cudaFree(dsrc));
    cudaCheck(cudaFree(dout));
    cudaCheck(cudaFree(dflag));
  }
  /* 4. the bf16 pair: lo rounded to nearest even in the low half */
  {
    uint32_t *d, h;
    cudaCheck(cudaMalloc(&d, sizeof h));
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even is 1 (0x3f80);
    // -3 - 3·2^-8 (0.75 ulp past -3) rounds to -3 - 2^-6 (0xc041)
    RTC_LAUNCH(k_pack, 1, 32, 0, d, 1.0f + 0x1p-8f, -3.0f - 3 * 0x1p-8f);
    cudaCheck(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    if (h != 0xc0413f80u) printf("  got 0x%08x, want 0xc0413f80\n", h);
    check("rtc_pack_bf16x2: (lo, hi) rounded to nearest even, lo low", h == 0xc0413f80u);
    cudaCheck(cudaFree(d));
  }
  cudaCheck(cudaGetLastError());
  if (failures) printf("%d check(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
