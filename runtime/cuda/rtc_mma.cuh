/* rtc_mma.cuh — the warp-level tensor-core instructions and asynchronous
 * copies the attention kernels use, by their PTX names and register
 * layouts, with host twins for the RTC_HOST build that follow the same
 * layouts and ordering rules, so the host kernel tests check the kernels'
 * fragment indexing and their waits, not just their arithmetic.
 *
 *   rtc_mma16816(acc, a, b): acc += a·b, mma.sync.aligned.m16n8k16.row.col
 *     .f32.bf16.bf16.f32: a is 16x16 bf16 (4 registers of 2), b 16x8 bf16
 *     (2 registers), acc 16x8 fp32 (4 floats).  With g = lane/4 and
 *     t = lane%4 (the PTX ISA's groupID and threadID_in_group):
 *       a[0] = A(g, 2t..2t+1)    a[1] = A(g+8, 2t..2t+1)
 *       a[2] = A(g, 2t+8..2t+9)  a[3] = A(g+8, 2t+8..2t+9)
 *       b[0] = B(2t..2t+1, g)    b[1] = B(2t+8..2t+9, g)
 *       acc[0..1] = C(g, 2t..2t+1)  acc[2..3] = C(g+8, 2t..2t+1)
 *     the lower column (row of B) in the register's low 16 bits.  So an
 *     accumulator pair of n-blocks (2j, 2j+1), rounded to bf16, is the a of
 *     the next mma whose k runs over those 16 columns (rtc_pack_bf16x2).
 *   rtc_ldsm_x4(r, p) / rtc_ldsm_x4_trans(r, p): ldmatrix.sync.aligned
 *     .m8n8.x4[.trans].shared.b16: lanes 8i..8i+7 give the addresses of
 *     rows 0..7 of 8x8 matrix i (16 bytes each, 16-byte aligned, shared
 *     memory); r[i] of lane l is matrix i's row l/4, columns 2(l%4) and
 *     2(l%4)+1 — with .trans, its column l/4, rows 2(l%4) and 2(l%4)+1.
 *   rtc_cp_async16(dst, src): cp.async.cg.shared.global, 16 bytes from
 *     global to shared memory (both 16-byte aligned) without the registers;
 *     rtc_cp_async_commit() closes the calling thread's group of copies
 *     (cp.async.commit_group), rtc_cp_async_wait<N>() waits until at most
 *     its N most recent groups are still in flight (cp.async.wait_group N).
 *     A copy is visible to the other threads after the wait and a barrier.
 *
 * The host twins are warp-collective as on the GPU: each lane publishes a
 * pointer (to its registers, or its row address) through the shuffles'
 * slot array (rtch_warp_gather), computes its own registers from the
 * others', then waits at a warp barrier so that no lane changes what
 * another still reads.  ldmatrix's addresses must be 16-byte aligned: the
 * twin aborts, naming the lane and address, where the GPU would fault.
 * The copies' twin poisons the destination when a copy is issued (all-ones
 * bytes, NaN) and writes the data when a wait covers its group (each thread
 * keeps its copies in a queue): a kernel that reads a tile before its wait,
 * or that loads into a buffer another thread may still read (a missing
 * barrier), reads poison.
 * Arithmetic of the mma twin: the products of two bf16 are exact in fp32;
 * the sum runs acc + A(m,0)·B(0,n) + ... + A(m,15)·B(15,n) in fp32, in that
 * order (the tensor cores add in an order and width of their own: the
 * results differ from the GPU's in the last bits).
 */
#ifndef RTC_MMA_CUH
#define RTC_MMA_CUH

#include <stdint.h>

#include "common.cuh"
#include "rtc_bf16.h"

// Two floats rounded to bf16 (nearest even) in one register, lo in the low
// 16 bits: the element of the lower column (k) of a fragment.
__device__ __forceinline__ uint32_t rtc_pack_bf16x2(float lo, float hi) {
#ifdef RTC_HOST
  rtc_bf16 l = rtc_f2bf(lo), h = rtc_f2bf(hi);
  uint16_t lb, hb;
  memcpy(&lb, &l, 2);
  memcpy(&hb, &h, 2);
  return (uint32_t)lb | ((uint32_t)hb << 16);
#else
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
  return *reinterpret_cast<uint32_t *>(&v);
#endif
}

#ifndef RTC_HOST

__device__ __forceinline__ void rtc_mma16816(float acc[4], const uint32_t a[4],
                                             const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void rtc_ldsm_x4(uint32_t r[4], const void *p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
}

__device__ __forceinline__ void rtc_ldsm_x4_trans(uint32_t r[4], const void *p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
}

__device__ __forceinline__ void rtc_cp_async16(void *dst, const void *src) {
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}

__device__ __forceinline__ void rtc_cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void rtc_cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#else  // RTC_HOST: the twins (see the top of the file)

#include <stdio.h>
#include <stdlib.h>

#include <vector>

// A thread's copies in flight: (dst, src, group), the group its next
// commit closes (rtc_cp_async_wait does those of closed groups old enough).
struct rtch_cp {
  void *dst;
  const void *src;
  unsigned group;
};
struct rtch_cp_queue {
  std::vector<rtch_cp> q;
  unsigned open = 0;  // the group new copies join
};
static inline rtch_cp_queue &rtch_cp_of(void) {
  static rtch_cp_queue queues[1024];  // a block's threads (at most 1024)
  return queues[rtch_cur->lin];
}

static inline void rtc_cp_async16(void *dst, const void *src) {
  if (((uintptr_t)dst | (uintptr_t)src) & 15) {
    fprintf(stderr, "rtc_mma host twin: cp.async of 16 bytes from %p to %p is not 16-byte aligned\n",
            src, dst);
    abort();
  }
  rtch_cp_queue &c = rtch_cp_of();
  memset(dst, 0xff, 16);  // in flight: neither the old bytes nor the new
  c.q.push_back({dst, src, c.open});
}

static inline void rtc_cp_async_commit(void) { rtch_cp_of().open++; }

template <int N>
static inline void rtc_cp_async_wait(void) {
  rtch_cp_queue &c = rtch_cp_of();
  size_t kept = 0;
  for (size_t i = 0; i < c.q.size(); i++) {
    // closed groups older than the N most recent closed ones are done
    if (c.q[i].group + N < c.open)
      memcpy(c.q[i].dst, c.q[i].src, 16);
    else
      c.q[kept++] = c.q[i];
  }
  c.q.resize(kept);
}

// Element h (0: low 16 bits, 1: high) of a register of two bf16, as fp32.
static inline float rtch_bf16_half(uint32_t r, int h) {
  uint32_t bits = (h ? r >> 16 : r & 0xffffu) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline void rtc_mma16816(float acc[4], const uint32_t a[4], const uint32_t b[2]) {
  struct ab {
    const uint32_t *a, *b;
  } mine = {a, b};
  uint64_t slot[32];
  rtch_warp_gather((uint64_t)(uintptr_t)&mine, slot);
  const ab *ln[32];
  for (int i = 0; i < 32; i++) ln[i] = (const ab *)(uintptr_t)slot[i];
  int l = rtch_lane(), g = l >> 2, t = l & 3;
  float r[4];
  for (int i = 0; i < 4; i++) {
    int m = g + 8 * (i >> 1), n = 2 * t + (i & 1);
    float s = acc[i];
    for (int k = 0; k < 16; k++) {
      // A(m, k): lane (m%8)*4 + (k%8)/2, register (m >= 8) + 2(k >= 8)
      uint32_t ra = ln[(m % 8) * 4 + (k % 8) / 2]->a[(m >= 8) + 2 * (k >= 8)];
      // B(k, n): lane n*4 + (k%8)/2, register (k >= 8)
      uint32_t rb = ln[n * 4 + (k % 8) / 2]->b[k >= 8];
      s += rtch_bf16_half(ra, k & 1) * rtch_bf16_half(rb, k & 1);
    }
    r[i] = s;
  }
  rtch_syncwarp();  // every lane has read the others' a and b
  for (int i = 0; i < 4; i++) acc[i] = r[i];
}

static inline void rtch_ldsm_x4(uint32_t r[4], const void *p, bool trans) {
  if ((uintptr_t)p & 15) {
    fprintf(stderr,
            "rtc_mma host twin: ldmatrix row address %p of lane %d is not 16-byte aligned\n", p,
            rtch_lane());
    abort();
  }
  uint64_t slot[32];
  rtch_warp_gather((uint64_t)(uintptr_t)p, slot);
  int l = rtch_lane();
  for (int i = 0; i < 4; i++) {
    uint16_t lo, hi;
    if (!trans) {
      const uint16_t *row = (const uint16_t *)(uintptr_t)slot[8 * i + l / 4];
      lo = row[2 * (l % 4)];
      hi = row[2 * (l % 4) + 1];
    } else {
      lo = ((const uint16_t *)(uintptr_t)slot[8 * i + 2 * (l % 4)])[l / 4];
      hi = ((const uint16_t *)(uintptr_t)slot[8 * i + 2 * (l % 4) + 1])[l / 4];
    }
    r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
  }
  rtch_syncwarp();  // every lane has read: shared memory may change after
}

static inline void rtc_ldsm_x4(uint32_t r[4], const void *p) { rtch_ldsm_x4(r, p, false); }
static inline void rtc_ldsm_x4_trans(uint32_t r[4], const void *p) { rtch_ldsm_x4(r, p, true); }

#endif  // RTC_HOST

#endif
