/* dist_types.h — the distributed runtime's plain types, without MPI: the
 * mesh axes and the sharding of a tensor over them.  Generated programs'
 * tables use them on every target; dist.h (MPI) acts on them. */
#ifndef SHARDRT_DIST_TYPES_H
#define SHARDRT_DIST_TYPES_H

#include <stdint.h>

#include "dist_axes.h" /* RtAxis: the mesh axes, listed once with the compiler's MeshAxis */

typedef struct RtShard {
  int ndim; int64_t shape[6];            /* the global tensor */
  int nsplit;                            /* 0, 1 or 2 */
  struct { int dim; int axis; int nseg; int64_t seg[4]; } split[2];
  /* dim is split over mesh axis `axis` (an RtAxis: RT_AX_TP, RT_AX_TPR, RT_AX_TPC); along it the
   * tensor is nseg consecutive segments of global sizes seg[0..nseg) (nseg 1: seg[0] = shape[dim]);
   * each segment is split evenly over the axis and rank coord r holds piece r of every segment,
   * concatenated in segment order (a fused q,k,v weight keeps its q, k and v parts per rank). */
  int pp_owner;                          /* pp stage (coord) holding the tensor; -1: every stage */
} RtShard;

#endif
