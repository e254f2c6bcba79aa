/* rt_optim.h — the state layout of the blocked optimizers (Shampoo,
 * Adafactor), shared by the compiler's memory plan (passes/memplan.c) and
 * the runtime's update (runtime/optim.c) and checkpoints, so that both
 * count the same bytes.  Header-only, no MPI.
 *
 * Shampoo, for a parameter of n elements, state at its `opt` offset, in
 * elements of the program's type:
 *
 *   [momentum (n, when beta1 > 0)] [grafting state (n; none for graft=sgd)]
 *   then per block b (row-major over the blocks): L_b (r_b²), R_b (c_b²),
 *   L_b^-1/4 (r_b²), R_b^-1/4 (c_b²)
 *
 * A 2-D parameter [R, C] with R > 1 and C > 1 is preconditioned: blocks of
 * at most block x block cut from the full tensor, rows [i·block, ...) and
 * columns [j·block, ...), the last ones smaller.  Any other parameter (1-D
 * norms and biases) uses the grafting method alone and has no blocks.
 *
 * Adafactor: [momentum (n, when beta1 > 0)] then, for a 2-D [R, C], the
 * row and column accumulators (R, then C); for any other shape the full
 * second moment (n).
 *
 * The step's workspace (one region after all the state, shared by the
 * parameters in turn): two buffers of the largest unit (a block, or an
 * unblocked tensor) in the program's type, then
 * fp64 room for one factor's root (6k² + 7k + 1 doubles for a k x k factor:
 * eigh uses the matrix, its eigenvalues and dsyevd's work, newton six
 * matrices), then dsyevd's integer work (3 + 5k).
 */
#ifndef RT_OPTIM_H
#define RT_OPTIM_H

#include <stdint.h>

enum { RT_GRAFT_ADAM = 0, RT_GRAFT_ADAGRAD = 1, RT_GRAFT_SGD = 2 };
enum { RT_ROOT_EIGH = 0, RT_ROOT_NEWTON = 1 };

static inline int64_t rt_optim_align64(int64_t b) { return (b + 63) / 64 * 64; }

/* Whether a tensor of this shape is preconditioned by Shampoo. */
static inline int rt_shampoo_preconditioned(int ndim, const int64_t *shape) {
  return ndim == 2 && shape[0] > 1 && shape[1] > 1;
}

/* Blocks along a dimension of size n. */
static inline int64_t rt_shampoo_nblocks(int64_t n, int64_t block) {
  return (n + block - 1) / block;
}

/* Size of block i along a dimension of size n. */
static inline int64_t rt_shampoo_bsize(int64_t n, int64_t block, int64_t i) {
  int64_t rest = n - i * block;
  return rest < block ? rest : block;
}

/* Elements of state before the blocks (momentum, grafting state). */
static inline int64_t rt_shampoo_head(int64_t numel, int momentum, int graft) {
  return (momentum ? numel : 0) + (graft != RT_GRAFT_SGD ? numel : 0);
}

/* Sum of the squared sizes of the first k blocks along a dimension of n:
 * all are whole blocks but the last of the dimension, n % block when not 0. */
static inline int64_t rt_shampoo_sq_prefix(int64_t n, int64_t block, int64_t k) {
  const int64_t whole = n / block;
  return (k < whole ? k : whole) * block * block + (k > whole ? (n % block) * (n % block) : 0);
}

/* Elements of the factors and roots of blocks before block (bi, bj) (in
 * row-major block order: 2 (r² + c²) each), or of all of them with bi = the
 * number of row blocks, bj = 0.  Closed form: a tensor may have a million
 * blocks (block = 1), and every unit asks. */
static inline int64_t rt_shampoo_block_off(int64_t R, int64_t C, int64_t block, int64_t bi,
                                           int64_t bj) {
  const int64_t nbc = rt_shampoo_nblocks(C, block);
  const int64_t rows = nbc * rt_shampoo_sq_prefix(R, block, bi) +
                       bi * rt_shampoo_sq_prefix(C, block, nbc);
  const int64_t rb = bj ? rt_shampoo_bsize(R, block, bi) : 0;
  return 2 * (rows + bj * rb * rb + rt_shampoo_sq_prefix(C, block, bj));
}

/* Element offset of block (bi, bj)'s factors (L, R, then their roots) in the
 * Shampoo state of an R x C tensor: the head, then the blocks before it. */
static inline int64_t rt_shampoo_factors_off(int64_t R, int64_t C, int64_t block, int64_t bi,
                                             int64_t bj, int momentum, int graft) {
  return rt_shampoo_head(R * C, momentum, graft) + rt_shampoo_block_off(R, C, block, bi, bj);
}

/* Unit (bi, bj) of a tensor's Shampoo step (a block of a preconditioned
 * tensor, or the whole of an unblocked one at 0, 0): *r rows of *c
 * elements, *ld apart in the tensor, from the element offset returned. */
static inline int64_t rt_shampoo_unit_span(int ndim, const int64_t *shape, int64_t block,
                                           int64_t bi, int64_t bj, int64_t *r, int64_t *c,
                                           int64_t *ld) {
  if (!rt_shampoo_preconditioned(ndim, shape)) {
    int64_t n = 1;
    for (int k = 0; k < ndim; k++)
      n *= shape[k];
    *r = 1, *c = n, *ld = n;
    return 0;
  }
  *r = rt_shampoo_bsize(shape[0], block, bi);
  *c = rt_shampoo_bsize(shape[1], block, bj);
  *ld = shape[1];
  return bi * block * shape[1] + bj * block;
}

/* Elements of Shampoo state of a tensor. */
static inline int64_t rt_shampoo_state_elems(int ndim, const int64_t *shape, int64_t block,
                                             int momentum, int graft) {
  int64_t n = 1;
  for (int k = 0; k < ndim; k++)
    n *= shape[k];
  int64_t s = rt_shampoo_head(n, momentum, graft);
  if (rt_shampoo_preconditioned(ndim, shape))
    s += rt_shampoo_block_off(shape[0], shape[1], block, rt_shampoo_nblocks(shape[0], block), 0);
  return s;
}

/* A tensor's largest unit of work: its largest block's elements and factor
 * side (an unblocked tensor: all its elements, no factor). */
static inline void rt_shampoo_unitmax(int ndim, const int64_t *shape, int64_t block,
                                      int64_t *elems, int64_t *k) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= shape[d];
  if (!rt_shampoo_preconditioned(ndim, shape)) {
    *elems = n;
    *k = 0;
    return;
  }
  int64_t r = shape[0] < block ? shape[0] : block, c = shape[1] < block ? shape[1] : block;
  *elems = r * c;
  *k = r > c ? r : c;
}

/* The workspace in bytes for units of at most `elems` elements of esize
 * bytes and factors of side at most k: two unit buffers, then the fp64
 * part at *dbl and the integer part at *ints (bytes from its start). */
static inline int64_t rt_shampoo_work(int64_t elems, int64_t k, int esize, int64_t *dbl,
                                      int64_t *ints) {
  int64_t b = rt_optim_align64(2 * elems * esize);
  int64_t d = k ? rt_optim_align64(8 * (6 * k * k + 7 * k + 1)) : 0;
  int64_t i = k ? rt_optim_align64(4 * (3 + 5 * k)) : 0;
  *dbl = b;
  *ints = b + d;
  return b + d + i;
}

/* The scratch in bytes of a pipeline rank's root worker (runtime/train.c,
 * roots in a thread of their own) for factors of side at most k: copies of
 * a block's two factors and its two roots (fp32, 4k² in all), then the
 * fp64 and integer parts of rt_shampoo_work's for one root. */
static inline int64_t rt_shampoo_root_work(int64_t k) {
  int64_t dbl, ints;
  return k ? rt_optim_align64(16 * k * k) + rt_shampoo_work(0, k, 4, &dbl, &ints) : 0;
}

/* Elements of Adafactor state of a tensor. */
static inline int64_t rt_adafactor_state_elems(int ndim, const int64_t *shape, int momentum) {
  int64_t n = 1;
  for (int k = 0; k < ndim; k++)
    n *= shape[k];
  return (momentum ? n : 0) + (ndim == 2 ? shape[0] + shape[1] : n);
}

#endif
