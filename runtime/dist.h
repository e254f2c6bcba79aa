/* dist.h — the MPI layer of libshardrt (library shardrt_mpi): the device
 * mesh and its communicators, counted collectives, pipeline point-to-point,
 * vocab-parallel cross-entropy and sharded tensors for init/checkpoints.
 *
 * Rank layout and communicators: dist_layout.h, shared with the compiler.
 * rt_mesh_init splits one communicator per axis (RtAxis, dist_axes.h) from
 * it: m->comm[ax] holds the rank's group, m->coord[ax] its key (coord) and
 * m->size[ax] the group's size; WORLD is a duplicate of MPI_COMM_WORLD, and
 * a rank without a group (EMBED on a middle pipeline stage) has
 * MPI_COMM_NULL, size 0 and coord -1.
 *
 * Errors. Every communicator returns MPI errors (MPI_ERRORS_RETURN) and every
 * MPI call is checked: a failure prints
 *   train: rank R (pp=.. dp=.. sp=.. tp=..): MPI error in MPI_Xxx: <reason>
 * and aborts the whole job (MPI_Abort), as rt_mesh_fail does for a runtime
 * failure. Misuse (an element size other than 4/8, a rank without the
 * communicator, more than INT_MAX elements where the call cannot split them)
 * fails the same way. Only argument errors the caller can report cleanly
 * (mesh sizes, targets, shard specs) return RT_ERR_ARG with rt_last_error(),
 * and then identically on every rank, before any communication.
 *
 * Volumes. Data collectives add the per-call volume of dist_formulas.h to
 * m->bytes[axis] (n = bytes of the full tensor) and 1 per MPI collective to
 * m->calls[axis], on size-1 communicators too (volume 0 there). Control
 * traffic (rt_mesh_all_ok, rt_mesh_sum_double) and checkpoint traffic
 * (rt_shard_gather, rt_gather_flat, rt_scatter_flat) are not counted.
 */
#ifndef SHARDRT_DIST_H
#define SHARDRT_DIST_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "dist_axes.h"
#include "dist_formulas.h"
#include "dist_layout.h"
#include "dist_types.h"
#include "shardrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RtMesh {
  int rank, world;
  int dp, tp, q, sp, pp;      /* sizes; tp = the 1D tp size, or q*q for 2D (q = 0 for 1D) */
  int coord[RT_AX_COUNT];     /* this rank's index in each axis communicator */
  int size[RT_AX_COUNT];
  MPI_Comm comm[RT_AX_COUNT]; /* MPI_COMM_NULL where this rank has none (EMBED on middle stages) */
  uint64_t bytes[RT_AX_COUNT], calls[RT_AX_COUNT]; /* counted since the last reset */
  MPI_Comm ckpt;              /* duplicate of WORLD for rt_shard_gather's messages */
} RtMesh;

/* ---- the mesh ---- */

/* MPI must be initialized. RT_ERR_ARG (on every rank, nothing created) when
 * a size is < 1, q > 0 and tp != q*q, or world != dp*tp*sp*pp. */
int rt_mesh_init(RtMesh *m, int dp, int tp, int q, int sp, int pp);
void rt_mesh_free(RtMesh *m);
void rt_mesh_reset_counts(RtMesh *m);
/* Σ bytes over the axes. */
uint64_t rt_mesh_total_bytes(const RtMesh *m);
/* Axis name for messages ("dp", "tpr", ...). */
const char *rt_axis_name(RtAxis ax);
/* Print "train: rank R (pp=.. dp=.. sp=.. tp=..): error: <msg>" and abort the
 * whole job. */
void rt_mesh_fail(const RtMesh *m, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
/* 1 when ok is nonzero on every rank, else 0 (on every rank). Not counted. */
int rt_mesh_all_ok(RtMesh *m, int ok);
/* Σ x over the axis. Not counted (scalar control traffic). */
double rt_mesh_sum_double(RtMesh *m, RtAxis ax, double x);

/* ---- counted collectives: esize 4 (float) or 8 (double), sums ---- */

/* buf is (n): summed in place over the axis. */
void rt_allreduce(RtMesh *m, RtAxis ax, void *buf, size_t n, int esize);
/* src is (outer, inner), dst is (outer, P·inner): coord r's block lands at
 * columns [r·inner, (r+1)·inner) of every row. scratch has
 * rt_scratch_dim_collective(outer, inner, P) elements (NULL when 0). With
 * outer 1, src may be this rank's own block of dst (in place); otherwise
 * src must not overlap dst. */
void rt_allgather_dim(RtMesh *m, RtAxis ax, void *dst, const void *src, size_t outer,
                      size_t inner, int esize, void *scratch);
/* src is (outer, P·inner) partial sums, dst is (outer, inner), WRITTEN:
 * dst = Σ_ranks src[:, r·inner:(r+1)·inner] for this rank's coord r. dst must
 * not alias src. scratch as for rt_allgather_dim. */
void rt_reduce_scatter_dim(RtMesh *m, RtAxis ax, void *dst, const void *src,
                           size_t outer, size_t inner, int esize, void *scratch);
/* src is (P·inner) partial sums, dst is (inner), ACCUMULATED: dst += Σ_ranks
 * src[r·inner:(r+1)·inner] for this rank's coord r, through scratch (inner
 * elements).  Counted as rt_reduce_scatter_dim (ZeRO-2/3 gradient buckets). */
void rt_reduce_scatter_acc(RtMesh *m, RtAxis ax, void *dst, const void *src, size_t inner,
                           int esize, void *scratch);
/* Non-blocking rt_allreduce of buf (n, at most INT_MAX elements), counted
 * when issued: *req completes it (rt_waitall); buf must not be touched
 * before.  MPI_REQUEST_NULL on a size-1 axis.  Data-parallel gradient
 * buckets overlapped with the backward. */
void rt_iallreduce(RtMesh *m, RtAxis ax, void *buf, size_t n, int esize, MPI_Request *req);
/* Non-blocking rt_reduce_scatter_dim with outer 1: dst (inner) WRITTEN with
 * this rank's chunk of the sums of src (P·inner), counted when issued; *req
 * completes it.  ZeRO-1 gradient buckets overlapped with the backward. */
void rt_ireduce_scatter(RtMesh *m, RtAxis ax, void *dst, const void *src, size_t inner,
                        int esize, MPI_Request *req);
/* buf is (n), from the rank with coord root on the axis. */
void rt_bcast(RtMesh *m, RtAxis ax, void *buf, size_t n, int esize, int root);

/* ---- pipeline point-to-point: peers are world ranks; a send counts n·esize
 * bytes to bytes[RT_AX_PP] (and a call), a receive nothing ---- */

void rt_send(RtMesh *m, int peer, int tag, const void *buf, size_t n, int esize);
void rt_recv(RtMesh *m, int peer, int tag, void *buf, size_t n, int esize);
void rt_isend(RtMesh *m, int peer, int tag, const void *buf, size_t n, int esize,
              MPI_Request *req);
void rt_irecv(RtMesh *m, int peer, int tag, void *buf, size_t n, int esize,
              MPI_Request *req);
void rt_waitall(RtMesh *m, int n, MPI_Request *reqs);
/* Lets MPI advance the non-blocking collectives or transfers in reqs (most
 * MPI libraries progress them only inside MPI calls); completed ones become
 * MPI_REQUEST_NULL.  Never blocks. */
void rt_progress(RtMesh *m, int n, MPI_Request *reqs);

/* ---- vocab-parallel cross-entropy (Megatron) ----
 * logits is (N,Vl): columns [v0, v0+Vl) of the full (N,Vl·P) logits, of
 * which the first V are the classes (V = Vl·P but for a padded vocabulary,
 * whose unused columns count for nothing); targets
 * (N) hold global ids, the same on every rank of the axis; RT_IGNORE_INDEX
 * rows count for nothing. scratch has rt_scratch_vp_xent_bytes(N) bytes.
 * Max, sums of exps and the loss are computed in double. */

/* *loss = mean over the valid rows (0 when none; their count is the norm
 * for the backward), the same on every rank of the axis.
 * RT_ERR_ARG, before any communication, for a target outside [0,V) other
 * than RT_IGNORE_INDEX. Volume rt_vol_vp_xent_fwd(N, P), 2 calls. */
int rt_vp_crossentropy_forward_f32(RtMesh *m, RtAxis ax, double *loss,
                                   const float *logits, const int32_t *targets, int N,
                                   int Vl, int v0, int V, double *scratch);
int rt_vp_crossentropy_forward_f64(RtMesh *m, RtAxis ax, double *loss,
                                   const double *logits, const int32_t *targets, int N,
                                   int Vl, int v0, int V, double *scratch);
/* dlogits is (N,Vl), ACCUMULATED: += (softmax - onehot)·dloss/norm, nothing on
 * ignored rows; must not alias logits. Volume rt_vol_vp_xent_bwd(N, P). */
void rt_vp_crossentropy_backward_acc_f32(RtMesh *m, RtAxis ax, float *dlogits,
                                         const float *logits, const int32_t *targets,
                                         int N, int Vl, int v0, double dloss, double norm,
                                         double *scratch);
void rt_vp_crossentropy_backward_acc_f64(RtMesh *m, RtAxis ax, double *dlogits,
                                         const double *logits, const int32_t *targets,
                                         int N, int Vl, int v0, double dloss, double norm,
                                         double *scratch);
/* The same where only the first V of the (N, Vl·P) logits' columns are
 * classes (a vocabulary padded past them, `cross_entropy(..., classes = V)`,
 * as the forward's V): the slice's columns at or past V get nothing. */
void rt_vp_crossentropy_backward_acc_cls_f32(RtMesh *m, RtAxis ax, float *dlogits,
                                             const float *logits, const int32_t *targets,
                                             int N, int Vl, int v0, int V, double dloss,
                                             double norm, double *scratch);
void rt_vp_crossentropy_backward_acc_cls_f64(RtMesh *m, RtAxis ax, double *dlogits,
                                             const double *logits, const int32_t *targets,
                                             int N, int Vl, int v0, int V, double dloss,
                                             double norm, double *scratch);

/* ---- sharded tensors (init, checkpoints) ---- */

/* RtShard (dist_types.h): a tensor's full shape and its splits over the mesh axes. */

/* RT_ERR_ARG when the spec is inconsistent with itself or the mesh (ndim,
 * split dims and axes, segments not summing to the dim or not divisible by
 * the axis size, pp_owner out of range). The other shard functions check
 * the same and abort through rt_mesh_fail where they cannot return it. */
int rt_shard_check(const RtShard *s, const RtMesh *m);
/* local_shape has s->ndim entries: this rank's block. */
void rt_shard_local_shape(const RtShard *s, const RtMesh *m, int64_t *local_shape);
/* Elements of this rank's block. */
size_t rt_shard_local_numel(const RtShard *s, const RtMesh *m);
/* local = this rank's block of the full tensor global (no communication);
 * any element size. */
void rt_shard_extract(const RtShard *s, const RtMesh *m, const void *global, void *local,
                      int esize);
/* Collective over WORLD (every rank calls it): the full tensor assembled on
 * world rank 0 (global may be NULL elsewhere) from the ranks with dp_i = 0,
 * sp_i = 0, pp_i = pp_owner (0 when -1) holding its distinct pieces, by
 * point-to-point on m->ckpt. Not counted. RT_ERR_ARG as rt_shard_check. */
int rt_shard_gather(const RtShard *s, RtMesh *m, const void *local, void *global,
                    int esize);
/* The piece of the full tensor global that the tp coordinates coord (one
 * per split of s, on its axis) hold, copied to local (to_global 0) or from
 * it (1); no communication. */
void rt_shard_copy(const RtShard *s, const RtMesh *m, const int *coord, void *global, void *local,
                   int esize, int to_global);
/* rt_shard_gather for a state laid out by its holder's coordinates (Shampoo
 * blocks of a split tensor): the holders of s's pieces send their `bytes`
 * at local to world rank 0, which calls place(ctx, coord, piece) for each
 * (coord as rt_shard_copy's). Collective over WORLD. Not counted. */
int rt_shard_gather_with(const RtShard *s, RtMesh *m, const void *local, size_t bytes,
                         void (*place)(void *ctx, const int *coord, const void *piece),
                         void *ctx);

/* ZeRO's flat shards: full (P·n_local elements, on coord 0 of the axis; may
 * be NULL elsewhere) is the coord-ordered concatenation of every rank's
 * local (n_local). MPI_Gather / MPI_Scatter; any element size; not counted.
 * RT_ERR_ARG when this rank has no communicator on the axis. */
int rt_gather_flat(RtMesh *m, RtAxis ax, const void *local, size_t n_local, void *full,
                   int esize);
int rt_scatter_flat(RtMesh *m, RtAxis ax, const void *full, void *local, size_t n_local,
                    int esize);

#ifdef __cplusplus
}
#endif

#endif
