/* wmma_host.h — the host twin of the nvcuda::wmma subset the kernels use
 * (k_attention.cu's bf16 tensor-core path), for the RTC_HOST build only.
 *
 * What it maps: 16x16x16 fragments of bf16 (rtc_bf16) matrix_a / matrix_b,
 * row or col major, and float accumulators; fill_fragment,
 * load_matrix_sync (ldm in elements; an accumulator with mem_row_major or
 * mem_col_major), store_matrix_sync, mma_sync (d = a·b + c).
 *
 * A fragment is spread over the warp as on the GPU, with a layout of its
 * own (the GPU's is opaque, so code that is right there does not depend
 * on it): lane l holds the elements l + 32i (i < 8) of the 16x16 tile in
 * row-major order of the tile (rows m, columns k of a; rows k, columns n of
 * b; rows m, columns n of an accumulator), num_elements = 8.
 *   - fill, load and store touch only the calling lane's 8 elements, with
 *     no barrier: a lane that reads what other lanes stored without a
 *     __syncwarp (or __syncthreads) between reads shared memory's poison
 *     (the fibers run in turn), as the GPU gives no order there either.
 *   - mma_sync is warp-collective: every lane publishes the addresses of
 *     its a and b (rtch_warp_gather, the shuffles' slot array: write, warp
 *     barrier, read, warp barrier), computes its own 8 elements of d from
 *     the other lanes' fragments (which live on their fibers' stacks, the
 *     fibers waiting at the barrier), then waits at a warp barrier again so
 *     that no lane changes or drops its a or b while another still reads
 *     them.  A lane that skips an mma_sync its warp runs is the shim's
 *     deadlock report.
 * Arithmetic: each product of two bf16 is exact in fp32; the sum runs
 * c + a[m][0]·b[0][n] + ... + a[m][15]·b[15][n] in fp32, in that order
 * (the tensor cores add in an order and with internal widths of their own:
 * the results differ from the GPU's in the last bits).
 */
#ifndef RTC_WMMA_HOST_H
#define RTC_WMMA_HOST_H

#include <stdint.h>

#include "../rtc_bf16.h"
#include "cuda_host.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

enum { rtch_frag_n = 8 };  // elements a lane holds: 256 / 32

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the host twin maps 16x16x16 fragments only");
  enum { num_elements = rtch_frag_n };
  T x[rtch_frag_n];
};

/* Element (r, c) of a tile at p, ldm elements apart: row major p[r*ldm + c]. */
template <class T>
static inline T rtch_frag_at(const T *p, unsigned ldm, int r, int c, bool row) {
  return row ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <class Use, class T, class L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, T v) {
  for (int i = 0; i < rtch_frag_n; i++) f.x[i] = v;
}

template <class Use, class T, class L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p,
                                    unsigned ldm) {
  static_assert(!std::is_same<L, void>::value, "an accumulator's load takes its layout_t");
  int l = rtch_lane();
  for (int i = 0; i < rtch_frag_n; i++) {
    int e = l + 32 * i;
    f.x[i] = rtch_frag_at(p, ldm, e / 16, e % 16, std::is_same<L, row_major>::value);
  }
}

static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t layout) {
  int l = rtch_lane();
  for (int i = 0; i < rtch_frag_n; i++) {
    int e = l + 32 * i;
    f.x[i] = rtch_frag_at(p, ldm, e / 16, e % 16, layout == mem_row_major);
  }
}

static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t layout) {
  int l = rtch_lane();
  for (int i = 0; i < rtch_frag_n; i++) {
    int e = l + 32 * i, r = e / 16, c = e % 16;
    if (layout == mem_row_major)
      p[(size_t)r * ldm + c] = f.x[i];
    else
      p[(size_t)c * ldm + r] = f.x[i];
  }
}

/* d = a·b + c over the warp (see the top of the file); d may be c. */
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, rtc_bf16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, rtc_bf16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
  typedef fragment<matrix_a, 16, 16, 16, rtc_bf16, LA> A;
  typedef fragment<matrix_b, 16, 16, 16, rtc_bf16, LB> B;
  struct ab {
    const A *a;
    const B *b;
  } mine = {&a, &b};
  uint64_t slot[32];
  rtch_warp_gather((uint64_t)(uintptr_t)&mine, slot);
  const ab *lane[32];
  for (int i = 0; i < 32; i++) lane[i] = (const ab *)(uintptr_t)slot[i];
  int l = rtch_lane();
  float r[rtch_frag_n];
  for (int i = 0; i < rtch_frag_n; i++) {
    int e = l + 32 * i, m = e / 16, n = e % 16;
    float s = c.x[i];
    for (int k = 0; k < 16; k++) {
      int ea = m * 16 + k, eb = k * 16 + n;  // their owners: lane e % 32, element e / 32
      s += rtc_bf2f(lane[ea % 32]->a->x[ea / 32]) * rtc_bf2f(lane[eb % 32]->b->x[eb / 32]);
    }
    r[i] = s;
  }
  rtch_syncwarp();  // every lane has read the others' a and b
  for (int i = 0; i < rtch_frag_n; i++) d.x[i] = r[i];
}

}  // namespace wmma
}  // namespace nvcuda

#endif
