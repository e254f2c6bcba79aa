/* dist_layout.h — where each rank sits on the device mesh and which ranks
 * share each axis's communicator, shared by the runtime (rt_mesh_init splits
 * its communicators with it) and the compiler (the communication check's
 * model of the job, passes/commpass.c).  Header-only, no MPI.
 *
 * A mesh of dp × T × sp × pp ranks, T = tp for 1D tensor parallelism or q·q
 * for a q×q grid:
 *   world rank = ((pp_i·dp + dp_i)·sp + sp_i)·T + t
 * with t = tp_i (1D) or r·q + c (grid row r, column c): tp innermost, so a
 * tensor-parallel group is a block of consecutive ranks.
 *
 * The group of a rank on an axis (RtAxis, dist_axes.h) is the set of ranks
 * that share its communicator there:
 *   WORLD  every rank                  DP   vary dp_i
 *   TP     vary t                      SP   vary sp_i        PP  vary pp_i
 *   TPR    grid: same row r, vary c; coord c (1D: the rank alone)
 *   TPC    grid: same column c, vary r; coord r (1D: the rank alone)
 *   DATA   vary dp_i and sp_i; coord dp_i·sp + sp_i
 *   EMBED  pp > 1: the first and last stage's ranks of the same dp_i, sp_i,
 *          t (coords 0 and 1); none on middle stages.  pp == 1: the rank
 *          alone.
 * It is named by a color, the world rank of its first member (equal for the
 * ranks of one group, different between groups of one axis; -1: none), and
 * a rank's key (coord) in it is its index among the members in ascending
 * world-rank order.
 */
#ifndef SHARDRT_DIST_LAYOUT_H
#define SHARDRT_DIST_LAYOUT_H

#include "dist_axes.h"

/* The mesh's sizes: tp is T, the ranks of one tensor-parallel group (q·q on
 * a grid); q is the grid's side, 0 for 1D. */
typedef struct RtLayout { int dp, tp, q, sp, pp; } RtLayout;
/* A rank's coordinates: pipeline stage, data-parallel and sequence index,
 * and t, its index in the tensor-parallel group (r·q + c on a grid). */
typedef struct RtCoords { int pp, dp, sp, t; } RtCoords;
/* A rank's group on one axis: color (-1: none), key (its coord; -1: none)
 * and size (0: none). */
typedef struct RtGroup { int color, key, size; } RtGroup;

static inline int rt_layout_world(const RtLayout *L) { return L->dp * L->tp * L->sp * L->pp; }

static inline int rt_layout_rank(const RtLayout *L, RtCoords c) {
  return ((c.pp * L->dp + c.dp) * L->sp + c.sp) * L->tp + c.t;
}

static inline RtCoords rt_layout_coords(const RtLayout *L, int rank) {
  int T = L->tp;
  return (RtCoords){rank / (T * L->sp * L->dp), rank / (T * L->sp) % L->dp, rank / T % L->sp,
                    rank % T};
}

static inline RtGroup rt_layout_group(const RtLayout *L, int axis, int rank) {
  RtCoords c = rt_layout_coords(L, rank), first = c;
  int q = L->q, gr = q > 0 ? c.t / q : 0, gc = q > 0 ? c.t % q : 0;
  switch (axis) {
  case RT_AX_WORLD:
    return (RtGroup){0, rank, rt_layout_world(L)};
  case RT_AX_DP:
    first.dp = 0;
    return (RtGroup){rt_layout_rank(L, first), c.dp, L->dp};
  case RT_AX_TP:
    first.t = 0;
    return (RtGroup){rt_layout_rank(L, first), c.t, L->tp};
  case RT_AX_TPR:
    return q > 0 ? (RtGroup){rank - gc, gc, q} : (RtGroup){rank, 0, 1};
  case RT_AX_TPC:
    return q > 0 ? (RtGroup){rank - gr * q, gr, q} : (RtGroup){rank, 0, 1};
  case RT_AX_SP:
    first.sp = 0;
    return (RtGroup){rt_layout_rank(L, first), c.sp, L->sp};
  case RT_AX_PP:
    first.pp = 0;
    return (RtGroup){rt_layout_rank(L, first), c.pp, L->pp};
  case RT_AX_DATA:
    first.dp = first.sp = 0;
    return (RtGroup){rt_layout_rank(L, first), c.dp * L->sp + c.sp, L->dp * L->sp};
  case RT_AX_EMBED:
    if (L->pp == 1)
      return (RtGroup){rank, 0, 1};
    if (c.pp != 0 && c.pp != L->pp - 1)
      return (RtGroup){-1, -1, 0};
    first.pp = 0;
    return (RtGroup){rt_layout_rank(L, first), c.pp == 0 ? 0 : 1, 2};
  default:
    return (RtGroup){-1, -1, 0};
  }
}

/* The world ranks of rank's group on axis, in key order (ascending), into
 * out (room for the group's size); returns the size (0: none). */
static inline int rt_layout_members(const RtLayout *L, int axis, int rank, int *out) {
  RtGroup g = rt_layout_group(L, axis, rank);
  RtCoords c = rt_layout_coords(L, rank);
  int q = L->q;
  for (int k = 0; k < g.size; k++) {
    RtCoords m = c;
    switch (axis) {
    case RT_AX_WORLD: out[k] = k; continue;
    case RT_AX_DP: m.dp = k; break;
    case RT_AX_TP: m.t = k; break;
    case RT_AX_TPR: if (q > 0) m.t = c.t / q * q + k; break;
    case RT_AX_TPC: if (q > 0) m.t = k * q + c.t % q; break;
    case RT_AX_SP: m.sp = k; break;
    case RT_AX_PP: m.pp = k; break;
    case RT_AX_DATA: m.dp = k / L->sp, m.sp = k % L->sp; break;
    case RT_AX_EMBED: if (L->pp > 1) m.pp = k == 0 ? 0 : L->pp - 1; break;
    default: break;
    }
    out[k] = rt_layout_rank(L, m);
  }
  return g.size;
}

/* The rank with rank's dp, sp and t coordinates dir stages along the
 * pipeline (+1 the next, -1 the previous), wrapping around: an interleaved
 * schedule's last stage sends its chunk's activations to the first. */
static inline int rt_layout_pipe_peer(const RtLayout *L, int rank, int dir) {
  RtCoords c = rt_layout_coords(L, rank);
  c.pp = ((c.pp + dir) % L->pp + L->pp) % L->pp;
  return rt_layout_rank(L, c);
}

/* The rank dir steps along rank's sp ring (+1 the next, -1 the previous),
 * the same otherwise: ring attention's neighbours. */
static inline int rt_layout_ring_peer(const RtLayout *L, int rank, int dir) {
  RtCoords c = rt_layout_coords(L, rank);
  c.sp = ((c.sp + dir) % L->sp + L->sp) % L->sp;
  return rt_layout_rank(L, c);
}

#endif
