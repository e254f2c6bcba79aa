/* dist.c — the mesh, counted collectives, pipeline point-to-point,
 * vocab-parallel cross-entropy and sharded tensors (see dist.h). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "dist.h"
#include "rt_internal.h"
#include "rt_math.h"

/* Elements per MPI call where a call is split (allreduce, bcast, the
 * checkpoint messages): MPI counts are ints. */
#define RT_MPI_CHUNK ((size_t)1 << 30)

const char *rt_axis_name(RtAxis ax) { return rt_axis_rt_name((int)ax); }

/* ---- failing ---- */

/* The failing rank's line is written by one write: under mpirun, stderr is
 * unbuffered and forwarded per write, so a line printed in pieces can be
 * split by another rank's output or by mpirun's own abort notice. */
static void __attribute__((noreturn)) mesh_die_(const RtMesh *m, const char *what) {
  char line[4600];
  int len;
  if (m)
    len = snprintf(line, sizeof line - 1, "train: rank %d (pp=%d dp=%d sp=%d tp=%d)%s", m->rank,
                   m->coord[RT_AX_PP], m->coord[RT_AX_DP], m->coord[RT_AX_SP],
                   m->coord[RT_AX_TP], what);
  else
    len = snprintf(line, sizeof line - 1, "train%s", what);
  rt_mark_cut(line, sizeof line - 1, len);
  strcat(line, "\n");
  fputs(line, stderr);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  abort(); // MPI_Abort does not return; this keeps noreturn honest
}

void rt_mesh_fail(const RtMesh *m, const char *fmt, ...) {
  char msg[4200], what[4300]; /* room for any rt_last_error() */
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rt_mark_cut(msg, sizeof msg, len);
  snprintf(what, sizeof what, ": error: %s", msg);
  mesh_die_(m, what);
}

static void __attribute__((noreturn)) mpi_fail_(const RtMesh *m, const char *call, int rc) {
  char why[MPI_MAX_ERROR_STRING], what[MPI_MAX_ERROR_STRING + 128];
  int len = 0;
  if (MPI_Error_string(rc, why, &len) != MPI_SUCCESS)
    snprintf(why, sizeof why, "error code %d", rc);
  snprintf(what, sizeof what, ": MPI error in %s: %s", call, why);
  mesh_die_(m, what);
}

// MPI_CHECK(m, MPI_Foo, args...): call MPI_Foo(args...), abort the job on error.
#define MPI_CHECK(m, fn, ...)                                                         \
  do {                                                                                \
    int rc_ = fn(__VA_ARGS__);                                                        \
    if (rc_ != MPI_SUCCESS)                                                           \
      mpi_fail_(m, #fn, rc_);                                                         \
  } while (0)

static MPI_Datatype mpi_real_(const RtMesh *m, int esize, const char *what) {
  if (esize == 4)
    return MPI_FLOAT;
  if (esize == 8)
    return MPI_DOUBLE;
  rt_mesh_fail(m, "%s: element size %d (want 4 for float or 8 for double)", what, esize);
}

static int mpi_count_(const RtMesh *m, size_t n, const char *what) {
  if (n > INT_MAX)
    rt_mesh_fail(m, "%s: too many elements for one MPI call (%zu, limit is %d)", what, n,
                 INT_MAX);
  return (int)n;
}

static MPI_Comm axis_comm_(const RtMesh *m, RtAxis ax, const char *what) {
  if ((unsigned)ax >= RT_AX_COUNT)
    rt_mesh_fail(m, "%s: no mesh axis %d", what, (int)ax);
  if (m->comm[ax] == MPI_COMM_NULL)
    rt_mesh_fail(m, "%s: this rank has no %s communicator", what, rt_axis_name(ax));
  return m->comm[ax];
}

static void count_(RtMesh *m, RtAxis ax, uint64_t bytes, uint64_t calls) {
  m->bytes[ax] += bytes;
  m->calls[ax] += calls;
}

/* ---- the mesh ---- */

static RtLayout mesh_layout_(const RtMesh *m) {
  return (RtLayout){m->dp, m->tp, m->q, m->sp, m->pp};
}

// One axis communicator: split WORLD by the layout's color, ordered by its
// key, which must come out as the rank's coord in a group of the layout's
// size (color -1: none, MPI_UNDEFINED).
static void mesh_split_(RtMesh *m, RtAxis ax) {
  RtLayout L = mesh_layout_(m);
  RtGroup g = rt_layout_group(&L, ax, m->rank);
  MPI_Comm c;
  MPI_CHECK(m, MPI_Comm_split, m->comm[RT_AX_WORLD], g.color < 0 ? MPI_UNDEFINED : g.color,
            g.key < 0 ? 0 : g.key, &c);
  m->comm[ax] = c;
  if (c == MPI_COMM_NULL) {
    m->size[ax] = 0;
    m->coord[ax] = -1;
    return;
  }
  MPI_CHECK(m, MPI_Comm_set_errhandler, c, MPI_ERRORS_RETURN);
  MPI_CHECK(m, MPI_Comm_size, c, &m->size[ax]);
  MPI_CHECK(m, MPI_Comm_rank, c, &m->coord[ax]);
  if (m->size[ax] != g.size || m->coord[ax] != g.key)
    rt_mesh_fail(m, "mesh: %s communicator has coord %d of %d, expected %d of %d",
                 rt_axis_name(ax), m->coord[ax], m->size[ax], g.key, g.size);
}

int rt_mesh_init(RtMesh *m, int dp, int tp, int q, int sp, int pp) {
  memset(m, 0, sizeof *m);
  for (int a = 0; a < RT_AX_COUNT; a++)
    m->comm[a] = MPI_COMM_NULL;
  m->ckpt = MPI_COMM_NULL;
  MPI_CHECK(m, MPI_Comm_rank, MPI_COMM_WORLD, &m->rank);
  MPI_CHECK(m, MPI_Comm_size, MPI_COMM_WORLD, &m->world);
  if (dp < 1 || tp < 1 || q < 0 || sp < 1 || pp < 1)
    return rt_errorf(RT_ERR_ARG, "mesh: sizes dp=%d tp=%d q=%d sp=%d pp=%d must be >= 1 "
                     "(q >= 0)", dp, tp, q, sp, pp);
  if (q > 0 && tp != q * q)
    return rt_errorf(RT_ERR_ARG, "mesh: a %dx%d tensor-parallel grid needs tp=%d, got tp=%d",
                     q, q, q * q, tp);
  if ((long long)dp * tp * sp * pp != m->world)
    return rt_errorf(RT_ERR_ARG, "mesh: dp=%d x tp=%d x sp=%d x pp=%d is %lld ranks, but "
                     "MPI started %d", dp, tp, sp, pp, (long long)dp * tp * sp * pp,
                     m->world);
  m->dp = dp, m->tp = tp, m->q = q, m->sp = sp, m->pp = pp;
  RtLayout L = mesh_layout_(m);
  RtCoords c = rt_layout_coords(&L, m->rank);
  // Coordinates first, so a failure below prints them.
  m->coord[RT_AX_PP] = c.pp, m->coord[RT_AX_DP] = c.dp, m->coord[RT_AX_SP] = c.sp;
  m->coord[RT_AX_TP] = c.t;

  // WORLD is a duplicate of MPI_COMM_WORLD (the layout's one group).
  MPI_Comm w;
  MPI_CHECK(m, MPI_Comm_dup, MPI_COMM_WORLD, &w);
  MPI_CHECK(m, MPI_Comm_set_errhandler, w, MPI_ERRORS_RETURN);
  m->comm[RT_AX_WORLD] = w;
  m->size[RT_AX_WORLD] = m->world, m->coord[RT_AX_WORLD] = m->rank;
  MPI_CHECK(m, MPI_Comm_dup, w, &m->ckpt);
  MPI_CHECK(m, MPI_Comm_set_errhandler, m->ckpt, MPI_ERRORS_RETURN);

  for (int a = 0; a < RT_AX_COUNT; a++)
    if (a != RT_AX_WORLD)
      mesh_split_(m, (RtAxis)a);
  return RT_OK;
}

void rt_mesh_free(RtMesh *m) {
  for (int a = 0; a < RT_AX_COUNT; a++)
    if (m->comm[a] != MPI_COMM_NULL)
      MPI_CHECK(m, MPI_Comm_free, &m->comm[a]);
  if (m->ckpt != MPI_COMM_NULL)
    MPI_CHECK(m, MPI_Comm_free, &m->ckpt);
}

void rt_mesh_reset_counts(RtMesh *m) {
  memset(m->bytes, 0, sizeof m->bytes);
  memset(m->calls, 0, sizeof m->calls);
}

uint64_t rt_mesh_total_bytes(const RtMesh *m) {
  uint64_t s = 0;
  for (int a = 0; a < RT_AX_COUNT; a++)
    s += m->bytes[a];
  return s;
}

int rt_mesh_all_ok(RtMesh *m, int ok) {
  int mine = ok != 0, all = 0;
  MPI_CHECK(m, MPI_Allreduce, &mine, &all, 1, MPI_INT, MPI_MIN,
            axis_comm_(m, RT_AX_WORLD, "rt_mesh_all_ok"));
  return all;
}

double rt_mesh_sum_double(RtMesh *m, RtAxis ax, double x) {
  double s = 0;
  MPI_CHECK(m, MPI_Allreduce, &x, &s, 1, MPI_DOUBLE, MPI_SUM,
            axis_comm_(m, ax, "rt_mesh_sum_double"));
  return s;
}

/* ---- counted collectives ---- */

void rt_allreduce(RtMesh *m, RtAxis ax, void *buf, size_t n, int esize) {
  MPI_Comm c = axis_comm_(m, ax, "rt_allreduce");
  MPI_Datatype dt = mpi_real_(m, esize, "rt_allreduce");
  int P = m->size[ax];
  count_(m, ax, rt_vol_allreduce((uint64_t)n * esize, P), 1);
  if (P == 1)
    return;
  for (size_t i = 0; i < n; i += RT_MPI_CHUNK) {
    size_t k = n - i < RT_MPI_CHUNK ? n - i : RT_MPI_CHUNK;
    MPI_CHECK(m, MPI_Allreduce, MPI_IN_PLACE, (char *)buf + i * esize, (int)k, dt, MPI_SUM,
              c);
  }
}

// src is (outer, inner), dst is (outer, P*inner); scratch is (P, outer, inner)
void rt_allgather_dim(RtMesh *m, RtAxis ax, void *dst, const void *src, size_t outer,
                      size_t inner, int esize, void *scratch) {
  MPI_Comm c = axis_comm_(m, ax, "rt_allgather_dim");
  MPI_Datatype dt = mpi_real_(m, esize, "rt_allgather_dim");
  int P = m->size[ax], r = m->coord[ax];
  size_t blk = outer * inner * esize, row = inner * esize;
  count_(m, ax, rt_vol_allgather((uint64_t)outer * P * inner * esize, P), 1);
  if (P == 1) {
    if (dst != src)
      memmove(dst, src, blk);
    return;
  }
  int cnt = mpi_count_(m, outer * inner, "rt_allgather_dim");
  if (outer <= 1 || inner == 0) {
    const void *s = src == (char *)dst + r * row ? MPI_IN_PLACE : src;
    MPI_CHECK(m, MPI_Allgather, s, cnt, dt, dst, cnt, dt, c);
    return;
  }
  if (!scratch)
    rt_mesh_fail(m, "rt_allgather_dim: outer %zu > 1 needs scratch", outer);
  MPI_CHECK(m, MPI_Allgather, src, cnt, dt, scratch, cnt, dt, c);
  for (int p = 0; p < P; p++)
    for (size_t o = 0; o < outer; o++)
      memcpy((char *)dst + (o * P + p) * row, (char *)scratch + p * blk + o * row, row);
}

// src is (outer, P*inner), dst is (outer, inner); scratch is (P, outer, inner)
void rt_reduce_scatter_dim(RtMesh *m, RtAxis ax, void *dst, const void *src,
                           size_t outer, size_t inner, int esize, void *scratch) {
  MPI_Comm c = axis_comm_(m, ax, "rt_reduce_scatter_dim");
  MPI_Datatype dt = mpi_real_(m, esize, "rt_reduce_scatter_dim");
  int P = m->size[ax];
  size_t blk = outer * inner * esize, row = inner * esize;
  count_(m, ax, rt_vol_reduce_scatter((uint64_t)outer * P * inner * esize, P), 1);
  if (P == 1) {
    memcpy(dst, src, blk);
    return;
  }
  int cnt = mpi_count_(m, outer * inner, "rt_reduce_scatter_dim");
  const void *send = src;
  if (outer > 1 && inner > 0) {
    if (!scratch)
      rt_mesh_fail(m, "rt_reduce_scatter_dim: outer %zu > 1 needs scratch", outer);
    for (int p = 0; p < P; p++)
      for (size_t o = 0; o < outer; o++)
        memcpy((char *)scratch + p * blk + o * row, (const char *)src + (o * P + p) * row,
               row);
    send = scratch;
  }
  MPI_CHECK(m, MPI_Reduce_scatter_block, send, dst, cnt, dt, MPI_SUM, c);
}

void rt_reduce_scatter_acc(RtMesh *m, RtAxis ax, void *dst, const void *src, size_t inner,
                           int esize, void *scratch) {
  if (!scratch) rt_mesh_fail(m, "rt_reduce_scatter_acc: needs scratch");
  rt_reduce_scatter_dim(m, ax, scratch, src, 1, inner, esize, NULL);
  if (esize == 4) {
    float *d = dst;
    const float *t = scratch;
    for (size_t i = 0; i < inner; i++) d[i] += t[i];
  } else {
    double *d = dst;
    const double *t = scratch;
    for (size_t i = 0; i < inner; i++) d[i] += t[i];
  }
}

void rt_ireduce_scatter(RtMesh *m, RtAxis ax, void *dst, const void *src, size_t inner,
                        int esize, MPI_Request *req) {
  MPI_Comm c = axis_comm_(m, ax, "rt_ireduce_scatter");
  MPI_Datatype dt = mpi_real_(m, esize, "rt_ireduce_scatter");
  int P = m->size[ax];
  count_(m, ax, rt_vol_reduce_scatter((uint64_t)P * inner * esize, P), 1);
  *req = MPI_REQUEST_NULL;
  if (P == 1) {
    memcpy(dst, src, inner * esize);
    return;
  }
  int cnt = mpi_count_(m, inner, "rt_ireduce_scatter");
  MPI_CHECK(m, MPI_Ireduce_scatter_block, src, dst, cnt, dt, MPI_SUM, c, req);
}

void rt_iallreduce(RtMesh *m, RtAxis ax, void *buf, size_t n, int esize, MPI_Request *req) {
  MPI_Comm c = axis_comm_(m, ax, "rt_iallreduce");
  MPI_Datatype dt = mpi_real_(m, esize, "rt_iallreduce");
  int P = m->size[ax];
  count_(m, ax, rt_vol_allreduce((uint64_t)n * esize, P), 1);
  *req = MPI_REQUEST_NULL;
  if (P == 1)
    return;
  int cnt = mpi_count_(m, n, "rt_iallreduce");
  MPI_CHECK(m, MPI_Iallreduce, MPI_IN_PLACE, buf, cnt, dt, MPI_SUM, c, req);
}

void rt_bcast(RtMesh *m, RtAxis ax, void *buf, size_t n, int esize, int root) {
  MPI_Comm c = axis_comm_(m, ax, "rt_bcast");
  MPI_Datatype dt = mpi_real_(m, esize, "rt_bcast");
  int P = m->size[ax];
  if (root < 0 || root >= P)
    rt_mesh_fail(m, "rt_bcast: root %d is outside the %s axis [0,%d)", root,
                 rt_axis_name(ax), P);
  count_(m, ax, rt_vol_bcast((uint64_t)n * esize, P), 1);
  if (P == 1)
    return;
  for (size_t i = 0; i < n; i += RT_MPI_CHUNK) {
    size_t k = n - i < RT_MPI_CHUNK ? n - i : RT_MPI_CHUNK;
    MPI_CHECK(m, MPI_Bcast, (char *)buf + i * esize, (int)k, dt, root, c);
  }
}

/* ---- pipeline point-to-point ---- */

void rt_send(RtMesh *m, int peer, int tag, const void *buf, size_t n, int esize) {
  MPI_Datatype dt = mpi_real_(m, esize, "rt_send");
  int cnt = mpi_count_(m, n, "rt_send");
  count_(m, RT_AX_PP, (uint64_t)n * esize, 1);
  MPI_CHECK(m, MPI_Send, buf, cnt, dt, peer, tag, axis_comm_(m, RT_AX_WORLD, "rt_send"));
}

void rt_recv(RtMesh *m, int peer, int tag, void *buf, size_t n, int esize) {
  MPI_Datatype dt = mpi_real_(m, esize, "rt_recv");
  int cnt = mpi_count_(m, n, "rt_recv");
  MPI_Status st;
  MPI_CHECK(m, MPI_Recv, buf, cnt, dt, peer, tag, axis_comm_(m, RT_AX_WORLD, "rt_recv"),
            &st);
  int got = 0;
  MPI_CHECK(m, MPI_Get_count, &st, dt, &got);
  if (got != cnt)
    rt_mesh_fail(m, "rt_recv: %d elements from rank %d (tag %d), expected %d", got, peer,
                 tag, cnt);
}

void rt_isend(RtMesh *m, int peer, int tag, const void *buf, size_t n, int esize,
              MPI_Request *req) {
  MPI_Datatype dt = mpi_real_(m, esize, "rt_isend");
  int cnt = mpi_count_(m, n, "rt_isend");
  count_(m, RT_AX_PP, (uint64_t)n * esize, 1);
  MPI_CHECK(m, MPI_Isend, buf, cnt, dt, peer, tag, axis_comm_(m, RT_AX_WORLD, "rt_isend"),
            req);
}

void rt_irecv(RtMesh *m, int peer, int tag, void *buf, size_t n, int esize,
              MPI_Request *req) {
  MPI_Datatype dt = mpi_real_(m, esize, "rt_irecv");
  int cnt = mpi_count_(m, n, "rt_irecv");
  MPI_CHECK(m, MPI_Irecv, buf, cnt, dt, peer, tag, axis_comm_(m, RT_AX_WORLD, "rt_irecv"),
            req);
}

void rt_waitall(RtMesh *m, int n, MPI_Request *reqs) {
  MPI_CHECK(m, MPI_Waitall, n, reqs, MPI_STATUSES_IGNORE);
}

void rt_progress(RtMesh *m, int n, MPI_Request *reqs) {
  int done = 0;
  MPI_CHECK(m, MPI_Testall, n, reqs, &done, MPI_STATUSES_IGNORE);
}

/* ---- vocab-parallel cross-entropy ----
 * Per-row pieces: the local max (NaNs skipped, -inf for an empty slice),
 * Σ exp(x - mx) summed in double, and the gradient row.  The f32 pieces
 * take exp in float from rt_math.h as the one-rank kernel does (a
 * vectorized polynomial: libm's double exp was a tenth of a tp2d step), the
 * f64 ones libm's. */

#define RT_VP_MAX(REAL, SFX)                                                          \
  static double vp_max##SFX(const REAL *x, int n) {                                   \
    REAL mx = -INFINITY;                                                              \
    for (int i = 0; i < n; i++)                                                       \
      mx = x[i] > mx ? x[i] : mx;                                                     \
    return mx;                                                                        \
  }
RT_VP_MAX(float, _f32)
RT_VP_MAX(double, _f64)

static double vp_sumexp_f32(const float *x, int n, double mx) {
  const float m = (float)mx; /* mx is a float of the row (or -inf) */
  double s;
#define TERM(i) (double)rt_expf(x[i] - m)
  RT_DSUM(s, n, TERM);
#undef TERM
  return s;
}
static double vp_sumexp_f64(const double *x, int n, double mx) {
  double s = 0;
  for (int i = 0; i < n; i++)
    s += exp(x[i] - mx);
  return s;
}
/* dx += (exp(x - lse) - (i == tl))·scale; tl < 0 or >= n: not in this slice.
 * In float, lse and scale rounded once, as the one-rank kernel has them. */
static void vp_grad_f32(float *dx, const float *x, int n, double lse, int tl, double scale) {
  const float l = (float)lse, sc = (float)scale;
  for (int i = 0; i < n; i++)
    dx[i] += (rt_expf(x[i] - l) - (float)(i == tl)) * sc;
}
static void vp_grad_f64(double *dx, const double *x, int n, double lse, int tl, double scale) {
  for (int i = 0; i < n; i++)
    dx[i] += (exp(x[i] - lse) - (i == tl)) * scale;
}

#define VP_ROW(esize, base, n, Vl) ((const char *)(base) + (size_t)(n) * (Vl) * (esize))

static double vp_max_(const void *x, int esize, int Vl) {
  return esize == 4 ? vp_max_f32(x, Vl) : vp_max_f64(x, Vl);
}
static double vp_sumexp_(const void *x, int esize, int Vl, double mx) {
  return esize == 4 ? vp_sumexp_f32(x, Vl, mx) : vp_sumexp_f64(x, Vl, mx);
}
static double vp_at_(const void *x, int esize, int i) {
  return esize == 4 ? ((const float *)x)[i] : ((const double *)x)[i];
}

// The classes among this slice's columns: [v0, v0+Vl) below V (a
// vocabulary padded past its classes leaves the last slices' ends unused).
static int vp_classes_(int Vl, int v0, int V) {
  long long nv = (long long)V - v0;
  return nv < 0 ? 0 : nv > Vl ? Vl : (int)nv;
}

// scratch[0,N) gets the global row max (0 on ignored rows) over the first
// nv of each row's Vl columns.
static void vp_global_max_(RtMesh *m, RtAxis ax, MPI_Comm c, const void *logits, int esize,
                           const int32_t *targets, int N, int Vl, int nv, double *mx) {
  RT_OMP_FOR(2 * (size_t)N * Vl)
  for (int n = 0; n < N; n++)
    mx[n] = targets[n] < 0 ? 0 : vp_max_(VP_ROW(esize, logits, n, Vl), esize, nv);
  if (m->size[ax] > 1)
    MPI_CHECK(m, MPI_Allreduce, MPI_IN_PLACE, mx, N, MPI_DOUBLE, MPI_MAX, c);
}

// logits is (N,Vl), columns [v0, v0+Vl) of (N,Vl·P) whose first V are the
// classes (the rest unused: a padded vocabulary); scratch is 3N doubles
static int vp_forward_(RtMesh *m, RtAxis ax, double *loss, const void *logits, int esize,
                       const int32_t *targets, int N, int Vl, int v0, int V,
                       double *scratch) {
  if (N < 0 || Vl < 0 || v0 < 0 || V < 1)
    return rt_errorf(RT_ERR_ARG, "vp_cross_entropy: slice [%d,%d) of %d rows of a vocabulary "
                     "of %d classes", v0, v0 + Vl, N, V);
  for (int n = 0; n < N; n++)
    if (targets[n] != RT_IGNORE_INDEX && (targets[n] < 0 || targets[n] >= V))
      return rt_errorf(RT_ERR_ARG,
                       "vp_cross_entropy: target %d at row %d is outside [0,%d) and is not "
                       "the ignore index %d",
                       (int)targets[n], n, V, RT_IGNORE_INDEX);
  MPI_Comm c = axis_comm_(m, ax, "rt_vp_crossentropy_forward");
  int P = m->size[ax];
  double *mx = scratch, *se = scratch + N; // se: (sumexp, target logit) per row
  const int nv = vp_classes_(Vl, v0, V);
  vp_global_max_(m, ax, c, logits, esize, targets, N, Vl, nv, mx);
  RT_OMP_FOR(8 * (size_t)N * Vl)
  for (int n = 0; n < N; n++) {
    const void *x = VP_ROW(esize, logits, n, Vl);
    int tl = targets[n] - v0;
    se[2 * n] = targets[n] < 0 ? 0 : vp_sumexp_(x, esize, nv, mx[n]);
    se[2 * n + 1] = targets[n] >= 0 && tl >= 0 && tl < nv ? vp_at_(x, esize, tl) : 0;
  }
  if (P > 1)
    MPI_CHECK(m, MPI_Allreduce, MPI_IN_PLACE, se, 2 * N, MPI_DOUBLE, MPI_SUM, c);
  count_(m, ax, rt_vol_vp_xent_fwd(N, P), 2);
  double sum = 0;
  int count = 0;
  for (int n = 0; n < N; n++)
    if (targets[n] >= 0) {
      sum += log(se[2 * n]) + mx[n] - se[2 * n + 1];
      count++;
    }
  *loss = count ? sum / count : 0;
  return RT_OK;
}

// the columns at or past V (unused) get nothing
static void vp_backward_(RtMesh *m, RtAxis ax, void *dlogits, const void *logits,
                         int esize, const int32_t *targets, int N, int Vl, int v0, int V,
                         double dloss, double norm, double *scratch) {
  MPI_Comm c = axis_comm_(m, ax, "rt_vp_crossentropy_backward_acc");
  int P = m->size[ax];
  double *mx = scratch, *se = scratch + N;
  const int nv = vp_classes_(Vl, v0, V);
  vp_global_max_(m, ax, c, logits, esize, targets, N, Vl, nv, mx);
  RT_OMP_FOR(8 * (size_t)N * Vl)
  for (int n = 0; n < N; n++)
    se[n] = targets[n] < 0 ? 0 : vp_sumexp_(VP_ROW(esize, logits, n, Vl), esize, nv, mx[n]);
  if (P > 1)
    MPI_CHECK(m, MPI_Allreduce, MPI_IN_PLACE, se, N, MPI_DOUBLE, MPI_SUM, c);
  count_(m, ax, rt_vol_vp_xent_bwd(N, P), 2);
  double scale = norm > 0 ? dloss / norm : 0;
  RT_OMP_FOR(8 * (size_t)N * Vl)
  for (int n = 0; n < N; n++) {
    if (targets[n] < 0) // the ignore index (others were rejected by the forward)
      continue;
    double lse = mx[n] + log(se[n]);
    size_t off = (size_t)n * Vl;
    if (esize == 4)
      vp_grad_f32((float *)dlogits + off, (const float *)logits + off, nv, lse,
                  targets[n] - v0, scale);
    else
      vp_grad_f64((double *)dlogits + off, (const double *)logits + off, nv, lse,
                  targets[n] - v0, scale);
  }
}

int rt_vp_crossentropy_forward_f32(RtMesh *m, RtAxis ax, double *loss, const float *logits,
                                   const int32_t *targets, int N, int Vl, int v0, int V,
                                   double *scratch) {
  return vp_forward_(m, ax, loss, logits, 4, targets, N, Vl, v0, V, scratch);
}

int rt_vp_crossentropy_forward_f64(RtMesh *m, RtAxis ax, double *loss,
                                   const double *logits, const int32_t *targets, int N,
                                   int Vl, int v0, int V, double *scratch) {
  return vp_forward_(m, ax, loss, logits, 8, targets, N, Vl, v0, V, scratch);
}

void rt_vp_crossentropy_backward_acc_f32(RtMesh *m, RtAxis ax, float *dlogits,
                                         const float *logits, const int32_t *targets,
                                         int N, int Vl, int v0, double dloss, double norm,
                                         double *scratch) {
  vp_backward_(m, ax, dlogits, logits, 4, targets, N, Vl, v0, v0 + Vl, dloss, norm, scratch);
}

void rt_vp_crossentropy_backward_acc_f64(RtMesh *m, RtAxis ax, double *dlogits,
                                         const double *logits, const int32_t *targets,
                                         int N, int Vl, int v0, double dloss, double norm,
                                         double *scratch) {
  vp_backward_(m, ax, dlogits, logits, 8, targets, N, Vl, v0, v0 + Vl, dloss, norm, scratch);
}

void rt_vp_crossentropy_backward_acc_cls_f32(RtMesh *m, RtAxis ax, float *dlogits,
                                             const float *logits, const int32_t *targets,
                                             int N, int Vl, int v0, int V, double dloss,
                                             double norm, double *scratch) {
  vp_backward_(m, ax, dlogits, logits, 4, targets, N, Vl, v0, V, dloss, norm, scratch);
}

void rt_vp_crossentropy_backward_acc_cls_f64(RtMesh *m, RtAxis ax, double *dlogits,
                                             const double *logits, const int32_t *targets,
                                             int N, int Vl, int v0, int V, double dloss,
                                             double norm, double *scratch) {
  vp_backward_(m, ax, dlogits, logits, 8, targets, N, Vl, v0, V, dloss, norm, scratch);
}

/* ---- sharded tensors ---- */

static int shard_P_(const RtMesh *m, int axis) {
  return axis == RT_AX_TP || axis == RT_AX_TPR || axis == RT_AX_TPC ? m->size[axis] : 0;
}

int rt_shard_check(const RtShard *s, const RtMesh *m) {
  if (s->ndim < 0 || s->ndim > 6)
    return rt_errorf(RT_ERR_ARG, "shard: %d dims (limit is 6)", s->ndim);
  for (int d = 0; d < s->ndim; d++)
    if (s->shape[d] < 0)
      return rt_errorf(RT_ERR_ARG, "shard: dim %d has size %lld", d, (long long)s->shape[d]);
  if (s->nsplit < 0 || s->nsplit > 2)
    return rt_errorf(RT_ERR_ARG, "shard: %d splits (limit is 2)", s->nsplit);
  if (s->pp_owner < -1 || s->pp_owner >= m->pp)
    return rt_errorf(RT_ERR_ARG, "shard: pp_owner %d is not -1 or a stage in [0,%d)",
                     s->pp_owner, m->pp);
  for (int k = 0; k < s->nsplit; k++) {
    int dim = s->split[k].dim, axis = s->split[k].axis, nseg = s->split[k].nseg;
    if (dim < 0 || dim >= s->ndim)
      return rt_errorf(RT_ERR_ARG, "shard: split %d on dim %d of a %d-dim tensor", k, dim,
                       s->ndim);
    int P = shard_P_(m, axis);
    if (P < 1)
      return rt_errorf(RT_ERR_ARG, "shard: split %d over axis %s (want tp, tpr or tpc)", k,
                       rt_axis_name(axis));
    if (nseg < 1 || nseg > 4)
      return rt_errorf(RT_ERR_ARG, "shard: split %d has %d segments (1 to 4)", k, nseg);
    int64_t sum = 0;
    for (int j = 0; j < nseg; j++) {
      if (s->split[k].seg[j] < 0 || s->split[k].seg[j] % P)
        return rt_errorf(RT_ERR_ARG, "shard: segment %d of dim %d (%lld) does not split "
                         "evenly over %s=%d", j, dim, (long long)s->split[k].seg[j],
                         rt_axis_name(axis), P);
      sum += s->split[k].seg[j];
    }
    if (sum != s->shape[dim])
      return rt_errorf(RT_ERR_ARG, "shard: segments of dim %d sum to %lld, not %lld", dim,
                       (long long)sum, (long long)s->shape[dim]);
  }
  if (s->nsplit == 2) {
    int a0 = s->split[0].axis, a1 = s->split[1].axis;
    if (s->split[0].dim == s->split[1].dim || a0 == a1 || a0 == RT_AX_TP || a1 == RT_AX_TP)
      return rt_errorf(RT_ERR_ARG, "shard: two splits need two dims and the axes tpr and "
                       "tpc (got dims %d, %d over %s, %s)", s->split[0].dim,
                       s->split[1].dim, rt_axis_name(a0), rt_axis_name(a1));
  }
  return RT_OK;
}

static void shard_check_or_fail_(const RtShard *s, const RtMesh *m, const char *what) {
  if (rt_shard_check(s, m) != RT_OK)
    rt_mesh_fail(m, "%s: %s", what, rt_last_error());
}

static int64_t shard_local_dim_(const RtShard *s, const RtMesh *m, int d) {
  for (int k = 0; k < s->nsplit; k++)
    if (s->split[k].dim == d)
      return s->shape[d] / shard_P_(m, s->split[k].axis);
  return s->shape[d];
}

void rt_shard_local_shape(const RtShard *s, const RtMesh *m, int64_t *local_shape) {
  shard_check_or_fail_(s, m, "rt_shard_local_shape");
  for (int d = 0; d < s->ndim; d++)
    local_shape[d] = shard_local_dim_(s, m, d);
}

size_t rt_shard_local_numel(const RtShard *s, const RtMesh *m) {
  shard_check_or_fail_(s, m, "rt_shard_local_numel");
  size_t n = 1;
  for (int d = 0; d < s->ndim; d++)
    n *= (size_t)shard_local_dim_(s, m, d);
  return n;
}

/* The copy between the full tensor and the block of the rank with coord r[k]
 * on split k: dims up to the last split one (ds) are walked as runs of
 * indices contiguous in both tensors (one run per segment on a split dim,
 * one on the others); the dims after ds travel whole with each run. */
typedef struct ShardRuns {
  int ds;                                  /* last split dim */
  int nrun[6];
  int64_t gstart[6][4], lstart[6][4], len[6][4];
  int64_t gdim[6], ldim[6];
  size_t inner_bytes;                      /* bytes of one index of dim ds */
} ShardRuns;

static void shard_runs_(ShardRuns *R, const RtShard *s, const RtMesh *m, const int *coord,
                        int esize) {
  R->ds = -1;
  for (int k = 0; k < s->nsplit; k++)
    R->ds = s->split[k].dim > R->ds ? s->split[k].dim : R->ds;
  for (int d = 0; d <= R->ds; d++) {
    R->gdim[d] = s->shape[d];
    R->ldim[d] = shard_local_dim_(s, m, d);
    R->nrun[d] = 1;
    R->gstart[d][0] = R->lstart[d][0] = 0;
    R->len[d][0] = s->shape[d];
    for (int k = 0; k < s->nsplit; k++) {
      if (s->split[k].dim != d)
        continue;
      int P = shard_P_(m, s->split[k].axis);
      int64_t g = 0, l = 0;
      R->nrun[d] = s->split[k].nseg;
      for (int j = 0; j < s->split[k].nseg; j++) {
        int64_t piece = s->split[k].seg[j] / P;
        R->gstart[d][j] = g + coord[k] * piece;
        R->lstart[d][j] = l;
        R->len[d][j] = piece;
        g += s->split[k].seg[j];
        l += piece;
      }
    }
  }
  size_t inner = (size_t)esize;
  for (int d = R->ds + 1; d < s->ndim; d++)
    inner *= (size_t)s->shape[d];
  R->inner_bytes = inner;
}

// goff/loff: flat index of the prefix over dims < d in the full/local tensor
static void shard_copy_rec_(const ShardRuns *R, int d, size_t goff, size_t loff,
                            char *global, char *local, int to_global) {
  for (int j = 0; j < R->nrun[d]; j++) {
    if (d == R->ds) {
      char *g = global + (goff * R->gdim[d] + R->gstart[d][j]) * R->inner_bytes;
      char *l = local + (loff * R->ldim[d] + R->lstart[d][j]) * R->inner_bytes;
      size_t bytes = (size_t)R->len[d][j] * R->inner_bytes;
      if (to_global)
        memcpy(g, l, bytes);
      else
        memcpy(l, g, bytes);
      continue;
    }
    for (int64_t i = 0; i < R->len[d][j]; i++)
      shard_copy_rec_(R, d + 1, goff * R->gdim[d] + R->gstart[d][j] + i,
                      loff * R->ldim[d] + R->lstart[d][j] + i, global, local, to_global);
  }
}

static void shard_copy_(const RtShard *s, const RtMesh *m, const int *coord, char *global,
                        char *local, int esize, int to_global) {
  ShardRuns R;
  shard_runs_(&R, s, m, coord, esize);
  if (R.ds < 0) { // not split: the whole tensor
    if (to_global)
      memcpy(global, local, R.inner_bytes);
    else
      memcpy(local, global, R.inner_bytes);
    return;
  }
  shard_copy_rec_(&R, 0, 0, 0, global, local, to_global);
}

void rt_shard_extract(const RtShard *s, const RtMesh *m, const void *global, void *local,
                      int esize) {
  shard_check_or_fail_(s, m, "rt_shard_extract");
  int coord[2] = {0, 0};
  for (int k = 0; k < s->nsplit; k++)
    coord[k] = m->coord[s->split[k].axis];
  shard_copy_(s, m, coord, (char *)global, local, esize, 0);
}

// t holds distinct pieces when its tp coordinates not used by a split are 0;
// coord[k] is then its coord on split k's axis.
static int shard_holder_(const RtShard *s, const RtMesh *m, int t, int *coord) {
  int q = m->q, r = q > 0 ? t / q : 0, c = q > 0 ? t % q : t;
  int use_tp = 0, use_r = 0, use_c = 0;
  for (int k = 0; k < s->nsplit; k++) {
    int a = s->split[k].axis;
    use_tp |= a == RT_AX_TP, use_c |= a == RT_AX_TPR, use_r |= a == RT_AX_TPC;
    coord[k] = a == RT_AX_TP ? t : a == RT_AX_TPR ? (q > 0 ? c : 0) : (q > 0 ? r : 0);
  }
  if (use_tp)
    return 1;
  if (q == 0)
    return t == 0;
  return (use_r || r == 0) && (use_c || c == 0);
}

// bytes to/from world rank peer on the checkpoint communicator, in chunks
static void ckpt_xfer_(RtMesh *m, int peer, void *buf, size_t bytes, int send) {
  for (size_t i = 0; i < bytes; i += RT_MPI_CHUNK) {
    int k = (int)(bytes - i < RT_MPI_CHUNK ? bytes - i : RT_MPI_CHUNK);
    if (send)
      MPI_CHECK(m, MPI_Send, (char *)buf + i, k, MPI_BYTE, peer, 0, m->ckpt);
    else
      MPI_CHECK(m, MPI_Recv, (char *)buf + i, k, MPI_BYTE, peer, 0, m->ckpt,
                MPI_STATUS_IGNORE);
  }
}

/* rt_shard_gather's placement of a piece: into the full tensor. */
typedef struct ShardPlace {
  const RtShard *s;
  const RtMesh *m;
  char *global;
  int esize;
} ShardPlace;

static void shard_place_(void *ctx, const int *coord, const void *piece) {
  const ShardPlace *p = ctx;
  shard_copy_(p->s, p->m, coord, p->global, (char *)piece, p->esize, 1);
}

int rt_shard_gather(const RtShard *s, RtMesh *m, const void *local, void *global,
                    int esize) {
  int rc = rt_shard_check(s, m);
  if (rc != RT_OK)
    return rc;
  if (m->rank == 0 && !global)
    rt_mesh_fail(m, "rt_shard_gather: world rank 0 needs the full tensor's buffer");
  ShardPlace p = {s, m, global, esize};
  return rt_shard_gather_with(s, m, local, rt_shard_local_numel(s, m) * (size_t)esize,
                              shard_place_, &p);
}

void rt_shard_copy(const RtShard *s, const RtMesh *m, const int *coord, void *global, void *local,
                   int esize, int to_global) {
  shard_check_or_fail_(s, m, "rt_shard_copy");
  shard_copy_(s, m, coord, (char *)global, (char *)local, esize, to_global);
}

int rt_shard_gather_with(const RtShard *s, RtMesh *m, const void *local, size_t bytes,
                         void (*place)(void *ctx, const int *coord, const void *piece),
                         void *ctx) {
  int rc = rt_shard_check(s, m);
  if (rc != RT_OK)
    return rc;
  RtLayout L = mesh_layout_(m);
  int owner = s->pp_owner < 0 ? 0 : s->pp_owner;
  int coord[2] = {0, 0};
  if (m->rank != 0) {
    int holder = m->coord[RT_AX_DP] == 0 && m->coord[RT_AX_SP] == 0 &&
                 m->coord[RT_AX_PP] == owner && shard_holder_(s, m, m->coord[RT_AX_TP], coord);
    if (holder)
      ckpt_xfer_(m, 0, (void *)local, bytes, 1);
    return RT_OK;
  }
  void *tmp = NULL;
  for (int t = 0; t < L.tp; t++) {
    if (!shard_holder_(s, m, t, coord))
      continue;
    int peer = rt_layout_rank(&L, (RtCoords){owner, 0, 0, t});
    const void *piece = local;
    if (peer != 0) {
      if (!tmp && !(tmp = malloc(bytes ? bytes : 1)))
        rt_mesh_fail(m, "rt_shard_gather_with: out of memory for a %zu-byte piece", bytes);
      ckpt_xfer_(m, peer, tmp, bytes, 0);
      piece = tmp;
    }
    place(ctx, coord, piece);
  }
  free(tmp);
  return RT_OK;
}

// one MPI element of esize bytes (freed by the caller)
static MPI_Datatype bytes_type_(RtMesh *m, int esize, const char *what) {
  if (esize < 1)
    rt_mesh_fail(m, "%s: element size %d", what, esize);
  MPI_Datatype dt;
  MPI_CHECK(m, MPI_Type_contiguous, esize, MPI_BYTE, &dt);
  MPI_CHECK(m, MPI_Type_commit, &dt);
  return dt;
}

int rt_gather_flat(RtMesh *m, RtAxis ax, const void *local, size_t n_local, void *full,
                   int esize) {
  if ((unsigned)ax >= RT_AX_COUNT || m->comm[ax] == MPI_COMM_NULL)
    return rt_errorf(RT_ERR_ARG, "gather_flat: this rank has no %s communicator",
                     rt_axis_name(ax));
  int cnt = mpi_count_(m, n_local, "rt_gather_flat");
  MPI_Datatype dt = bytes_type_(m, esize, "rt_gather_flat");
  MPI_CHECK(m, MPI_Gather, local, cnt, dt, full, cnt, dt, 0, m->comm[ax]);
  MPI_CHECK(m, MPI_Type_free, &dt);
  return RT_OK;
}

int rt_scatter_flat(RtMesh *m, RtAxis ax, const void *full, void *local, size_t n_local,
                    int esize) {
  if ((unsigned)ax >= RT_AX_COUNT || m->comm[ax] == MPI_COMM_NULL)
    return rt_errorf(RT_ERR_ARG, "scatter_flat: this rank has no %s communicator",
                     rt_axis_name(ax));
  int cnt = mpi_count_(m, n_local, "rt_scatter_flat");
  MPI_Datatype dt = bytes_type_(m, esize, "rt_scatter_flat");
  MPI_CHECK(m, MPI_Scatter, full, cnt, dt, local, cnt, dt, 0, m->comm[ax]);
  MPI_CHECK(m, MPI_Type_free, &dt);
  return RT_OK;
}
