/* test_dist.c — the MPI layer (dist.h) at any world size: every mesh
 * dp×tp×sp×pp (and dp×q²×sp×pp) of the world is built and checked against
 * the layout formula (recomputed here) and against dist_layout.h, the
 * compiler's model of the same (sizes, keys, members, colors, pipeline and
 * ring neighbours), each collective against a serial sum computed on every
 * rank, the counted volumes against dist_formulas.h, sharded tensors by
 * extract + gather, and vocab-parallel cross-entropy against the single-rank
 * kernels on the full logits.
 *
 *   mpirun -np N rt_mpi_test_dist            the checks (N = 1, 2, 4, 8, ...)
 *   mpirun -np 2 rt_mpi_test_dist --abort fail|mpi
 *                                            rank 1 dies (see run.sh)
 *   mpirun -np 2 rt_mpi_test_dist --leak     a mesh never freed: under the
 *                                            sanitizers LeakSanitizer must
 *                                            report its communicators (the
 *                                            suppressions hide Open MPI's
 *                                            own allocations only)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"

enum { G_LAYOUT, G_COLL, G_P2P, G_FLAT, G_SHARD, G_XENT, G_COUNT };
static const char *group_names[G_COUNT] = {
    "layout and communicators", "collectives and volumes", "pipeline send/recv",
    "flat gather/scatter", "sharded extract/gather", "vocab-parallel cross-entropy"};
static long n_checks[G_COUNT], n_fail[G_COUNT];
static int group, my_rank;
static char ctx[96]; // the mesh under test, for messages

#define CHECK(cond, ...)                                                              \
  do {                                                                                \
    n_checks[group]++;                                                                \
    if (!(cond)) {                                                                    \
      if (n_fail[group]++ < 10) {                                                     \
        fprintf(stderr, "rank %d [%s] %s:%d: ", my_rank, ctx, __FILE__, __LINE__);    \
        fprintf(stderr, __VA_ARGS__);                                                 \
        fputc('\n', stderr);                                                          \
      }                                                                               \
    }                                                                                 \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return p;
}

/* ---- the mesh, recomputed independently of dist.c ---- */

typedef struct Cfg { int dp, tp, q, sp, pp; } Cfg;
typedef struct Pos { int pp, dp, sp, t; } Pos;

static int cfg_T(const Cfg *c) { return c->q > 0 ? c->q * c->q : c->tp; }
static int world_of(const Cfg *c, Pos p) {
  return ((p.pp * c->dp + p.dp) * c->sp + p.sp) * cfg_T(c) + p.t;
}
static Pos pos_of(const Cfg *c, int w) {
  int T = cfg_T(c);
  return (Pos){w / (T * c->sp * c->dp), w / (T * c->sp) % c->dp, w / T % c->sp, w % T};
}

// size, coord and the world rank of member k of rank w's group on axis ax
static int exp_size(const Cfg *c, Pos p, int ax) {
  switch (ax) {
  case RT_AX_WORLD: return c->dp * cfg_T(c) * c->sp * c->pp;
  case RT_AX_DP: return c->dp;
  case RT_AX_TP: return cfg_T(c);
  case RT_AX_TPR: case RT_AX_TPC: return c->q > 0 ? c->q : 1;
  case RT_AX_SP: return c->sp;
  case RT_AX_PP: return c->pp;
  case RT_AX_DATA: return c->dp * c->sp;
  default: return c->pp == 1 ? 1 : p.pp == 0 || p.pp == c->pp - 1 ? 2 : 0;
  }
}
static int exp_coord(const Cfg *c, Pos p, int ax) {
  switch (ax) {
  case RT_AX_WORLD: return world_of(c, p);
  case RT_AX_DP: return p.dp;
  case RT_AX_TP: return p.t;
  case RT_AX_TPR: return c->q > 0 ? p.t % c->q : 0;
  case RT_AX_TPC: return c->q > 0 ? p.t / c->q : 0;
  case RT_AX_SP: return p.sp;
  case RT_AX_PP: return p.pp;
  case RT_AX_DATA: return p.dp * c->sp + p.sp;
  default: return c->pp == 1 ? 0 : p.pp == 0 ? 0 : p.pp == c->pp - 1 ? 1 : -1;
  }
}
static int member(const Cfg *c, Pos p, int ax, int k) {
  Pos m = p;
  switch (ax) {
  case RT_AX_WORLD: return k;
  case RT_AX_DP: m.dp = k; break;
  case RT_AX_TP: m.t = k; break;
  case RT_AX_TPR: if (c->q > 0) m.t = p.t / c->q * c->q + k; break;
  case RT_AX_TPC: if (c->q > 0) m.t = k * c->q + p.t % c->q; break;
  case RT_AX_SP: m.sp = k; break;
  case RT_AX_PP: m.pp = k; break;
  case RT_AX_DATA: m.dp = k / c->sp, m.sp = k % c->sp; break;
  default: if (c->pp > 1) m.pp = k == 0 ? 0 : c->pp - 1; break;
  }
  return world_of(c, m);
}

// Deterministic data that sums exactly in float: multiples of 1/8 in [-4, 4).
static double val(int w, size_t i, int salt) {
  return (double)((int)((w * 131 + i * 17 + salt * 7) % 64) - 32) / 8;
}
static void fill(void *buf, int esize, size_t n, int w, int salt) {
  for (size_t i = 0; i < n; i++)
    if (esize == 4)
      ((float *)buf)[i] = (float)val(w, i, salt);
    else
      ((double *)buf)[i] = val(w, i, salt);
}
static double get(const void *buf, int esize, size_t i) {
  return esize == 4 ? ((const float *)buf)[i] : ((const double *)buf)[i];
}

/* ---- layout ---- */

/* What MPI built agrees with dist_layout.h, the compiler's model: the
 * group's size, this rank's key and the member list (ranks, from MPI, in
 * coord order), and the colors, gathered from every rank, equal exactly on
 * the members; the pipeline and ring neighbours are the PP and SP
 * communicators' neighbours. Collective over WORLD (every rank, every
 * axis). */
static void check_layout_members(const Cfg *c, RtMesh *m, int ax, const int *ranks) {
  RtLayout L = {c->dp, cfg_T(c), c->q, c->sp, c->pp};
  RtGroup g = rt_layout_group(&L, ax, m->rank);
  CHECK(g.size == m->size[ax] && g.key == m->coord[ax],
        "%s: layout says coord %d of %d, MPI built %d of %d", rt_axis_name(ax), g.key, g.size,
        m->coord[ax], m->size[ax]);
  int *want = xmalloc(sizeof(int) * (size_t)m->world);
  int n = rt_layout_members(&L, ax, m->rank, want);
  CHECK(n == m->size[ax], "%s: layout lists %d members, MPI %d", rt_axis_name(ax), n,
        m->size[ax]);
  for (int k = 0; k < n && k < m->size[ax]; k++)
    CHECK(want[k] == ranks[k], "%s: layout's member %d is rank %d, MPI's %d",
          rt_axis_name(ax), k, want[k], ranks[k]);
  int *colors = xmalloc(sizeof(int) * (size_t)m->world);
  MPI_Allgather(&g.color, 1, MPI_INT, colors, 1, MPI_INT, MPI_COMM_WORLD);
  for (int w = 0, k = 0; w < m->world; w++) {
    int in = k < m->size[ax] && ranks[k] == w;
    k += in;
    CHECK((g.color >= 0 && colors[w] == g.color) == in,
          "%s: rank %d has color %d, this rank %d, but is %s", rt_axis_name(ax), w, colors[w],
          g.color, in ? "a member" : "not a member");
  }
  if (ax == RT_AX_PP || ax == RT_AX_SP)
    for (int dir = -1; dir <= 1; dir += 2) {
      int P = m->size[ax], k = ((m->coord[ax] + dir) % P + P) % P;
      int peer = ax == RT_AX_PP ? rt_layout_pipe_peer(&L, m->rank, dir)
                                : rt_layout_ring_peer(&L, m->rank, dir);
      CHECK(peer == ranks[k], "%s neighbour %+d: layout says rank %d, the communicator %d",
            rt_axis_name(ax), dir, peer, ranks[k]);
    }
  free(colors);
  free(want);
}

static void check_layout(const Cfg *c, RtMesh *m) {
  group = G_LAYOUT;
  Pos p = pos_of(c, m->rank);
  CHECK(m->dp == c->dp && m->tp == cfg_T(c) && m->q == c->q && m->sp == c->sp &&
            m->pp == c->pp, "mesh sizes");
  for (int ax = 0; ax < RT_AX_COUNT; ax++) {
    int size = exp_size(c, p, ax), coord = exp_coord(c, p, ax);
    CHECK(m->size[ax] == size, "%s size %d, expected %d", rt_axis_name(ax), m->size[ax], size);
    CHECK(m->coord[ax] == coord, "%s coord %d, expected %d", rt_axis_name(ax), m->coord[ax],
          coord);
    CHECK((m->comm[ax] == MPI_COMM_NULL) == (size == 0), "%s communicator presence",
          rt_axis_name(ax));
    // Who is in it, in coord order (nobody without a communicator).
    int *ranks = xmalloc(sizeof(int) * (size_t)m->size[ax]);
    if (m->comm[ax] != MPI_COMM_NULL)
      MPI_Allgather(&m->rank, 1, MPI_INT, ranks, 1, MPI_INT, m->comm[ax]);
    for (int k = 0; k < m->size[ax]; k++)
      CHECK(ranks[k] == member(c, p, ax, k), "%s member %d is rank %d, expected %d",
            rt_axis_name(ax), k, ranks[k], member(c, p, ax, k));
    check_layout_members(c, m, ax, ranks);
    free(ranks);
    if (m->comm[ax] == MPI_COMM_NULL)
      continue;
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(m->comm[ax], &eh);
    CHECK(eh == MPI_ERRORS_RETURN, "%s errhandler is not MPI_ERRORS_RETURN",
          rt_axis_name(ax));
    MPI_Errhandler_free(&eh);
  }
}

/* ---- collectives ---- */

#define VOL(ax, want, what)                                                           \
  do {                                                                                \
    uint64_t got_ = m->bytes[ax] - b0[ax], calls_ = m->calls[ax] - c0[ax];            \
    CHECK(got_ == (uint64_t)(want), "%s on %s: counted %llu bytes, formula %llu", what, \
          rt_axis_name(ax), (unsigned long long)got_, (unsigned long long)(want));    \
    CHECK(calls_ == 1, "%s on %s: counted %llu calls", what, rt_axis_name(ax),        \
          (unsigned long long)calls_);                                                \
    memcpy(b0, m->bytes, sizeof b0);                                                  \
    memcpy(c0, m->calls, sizeof c0);                                                  \
  } while (0)

static void check_collectives(const Cfg *c, RtMesh *m) {
  group = G_COLL;
  Pos p = pos_of(c, m->rank);
  uint64_t b0[RT_AX_COUNT], c0[RT_AX_COUNT];
  rt_mesh_reset_counts(m);
  CHECK(rt_mesh_total_bytes(m) == 0, "counts not reset");
  memcpy(b0, m->bytes, sizeof b0);
  memcpy(c0, m->calls, sizeof c0);
  uint64_t total = 0;
  for (int ax = 0; ax < RT_AX_COUNT; ax++) {
    if (m->comm[ax] == MPI_COMM_NULL)
      continue;
    int P = m->size[ax], r = m->coord[ax], salt = ax * 10;
    for (int esize = 4; esize <= 8; esize += 4) {
      // allreduce
      size_t n = 7;
      char buf[8 * 256], ref[8 * 256], scr[8 * 256];
      fill(buf, esize, n, m->rank, salt);
      rt_allreduce(m, ax, buf, n, esize);
      for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < P; k++)
          s += val(member(c, p, ax, k), i, salt);
        CHECK(fabs(get(buf, esize, i) - s) <= 1e-6, "allreduce[%zu] = %g, expected %g", i,
              get(buf, esize, i), s);
      }
      VOL(ax, rt_vol_allreduce(n * esize, P), "allreduce");
      total += rt_vol_allreduce(n * esize, P);

      // all-gather along dim 1 of (outer, inner), and in place for outer 1
      for (size_t outer = 1; outer <= 3; outer += 2) {
        size_t inner = 5, ns = rt_scratch_dim_collective(outer, inner, P);
        fill(ref, esize, outer * inner, m->rank, salt + 1);
        rt_allgather_dim(m, ax, buf, ref, outer, inner, esize, ns ? scr : NULL);
        int bad = 0;
        for (size_t o = 0; o < outer; o++)
          for (int k = 0; k < P; k++)
            for (size_t i = 0; i < inner; i++)
              bad += get(buf, esize, (o * P + k) * inner + i) !=
                     val(member(c, p, ax, k), o * inner + i, salt + 1);
        CHECK(!bad, "allgather_dim outer %zu: %d wrong elements", outer, bad);
        VOL(ax, rt_vol_allgather(outer * P * inner * esize, P), "allgather_dim");
        total += rt_vol_allgather(outer * P * inner * esize, P);
      }
      memset(buf, 0, sizeof buf);
      fill(buf + r * 5 * esize, esize, 5, m->rank, salt + 1);
      rt_allgather_dim(m, ax, buf, buf + r * 5 * esize, 1, 5, esize, NULL);
      int bad = 0;
      for (int k = 0; k < P; k++)
        for (size_t i = 0; i < 5; i++)
          bad += get(buf, esize, k * 5 + i) != val(member(c, p, ax, k), i, salt + 1);
      CHECK(!bad, "allgather_dim in place: %d wrong elements", bad);
      VOL(ax, rt_vol_allgather(P * 5 * esize, P), "allgather_dim in place");
      total += rt_vol_allgather(P * 5 * esize, P);

      // reduce-scatter of (outer, P*inner) partial sums
      for (size_t outer = 1; outer <= 3; outer += 2) {
        size_t inner = 4, ns = rt_scratch_dim_collective(outer, inner, P);
        fill(ref, esize, outer * P * inner, m->rank, salt + 2);
        memset(buf, 0xff, sizeof buf); // written, not accumulated
        rt_reduce_scatter_dim(m, ax, buf, ref, outer, inner, esize, ns ? scr : NULL);
        double worst = 0;
        for (size_t o = 0; o < outer; o++)
          for (size_t i = 0; i < inner; i++) {
            double s = 0;
            for (int k = 0; k < P; k++)
              s += val(member(c, p, ax, k), (o * P + r) * inner + i, salt + 2);
            worst = fmax(worst, fabs(get(buf, esize, o * inner + i) - s));
          }
        CHECK(worst <= 1e-6, "reduce_scatter_dim outer %zu: off by %g", outer, worst);
        VOL(ax, rt_vol_reduce_scatter(outer * P * inner * esize, P), "reduce_scatter_dim");
        total += rt_vol_reduce_scatter(outer * P * inner * esize, P);
      }

      // broadcast from the last coord
      fill(buf, esize, n, m->rank, salt + 3);
      rt_bcast(m, ax, buf, n, esize, P - 1);
      bad = 0;
      for (size_t i = 0; i < n; i++)
        bad += get(buf, esize, i) != val(member(c, p, ax, P - 1), i, salt + 3);
      CHECK(!bad, "bcast: %d wrong elements", bad);
      VOL(ax, rt_vol_bcast(n * esize, P), "bcast");
      total += rt_vol_bcast(n * esize, P);

      // gradient buckets: non-blocking all-reduce and reduce-scatter, and the
      // accumulating reduce-scatter (ZeRO)
      MPI_Request req[2];
      fill(buf, esize, n, m->rank, salt + 4);
      rt_iallreduce(m, ax, buf, n, esize, &req[0]);
      VOL(ax, rt_vol_allreduce(n * esize, P), "iallreduce");
      total += rt_vol_allreduce(n * esize, P);
      size_t inner = 3;
      char rs[8 * 16], acc[8 * 16];
      fill(ref, esize, P * inner, m->rank, salt + 5);
      rt_ireduce_scatter(m, ax, rs, ref, inner, esize, &req[1]);
      VOL(ax, rt_vol_reduce_scatter(P * inner * esize, P), "ireduce_scatter");
      total += rt_vol_reduce_scatter(P * inner * esize, P);
      rt_waitall(m, 2, req);
      fill(acc, esize, inner, 0, salt + 6);
      rt_reduce_scatter_acc(m, ax, acc, ref, inner, esize, scr);
      VOL(ax, rt_vol_reduce_scatter(P * inner * esize, P), "reduce_scatter_acc");
      total += rt_vol_reduce_scatter(P * inner * esize, P);
      double worst = 0;
      for (size_t i = 0; i < n; i++) {
        double sa = 0;
        for (int k = 0; k < P; k++)
          sa += val(member(c, p, ax, k), i, salt + 4);
        worst = fmax(worst, fabs(get(buf, esize, i) - sa));
      }
      for (size_t i = 0; i < inner; i++) {
        double sr = 0;
        for (int k = 0; k < P; k++)
          sr += val(member(c, p, ax, k), r * inner + i, salt + 5);
        worst = fmax(worst, fabs(get(rs, esize, i) - sr));
        worst = fmax(worst, fabs(get(acc, esize, i) - (sr + val(0, i, salt + 6))));
      }
      CHECK(worst <= 1e-6, "iallreduce / ireduce_scatter / reduce_scatter_acc: off by %g", worst);
    }
    // control traffic: summed, not counted
    double s = 0;
    for (int k = 0; k < P; k++)
      s += member(c, p, ax, k) + 1;
    CHECK(rt_mesh_sum_double(m, ax, m->rank + 1) == s, "sum_double on %s", rt_axis_name(ax));
  }
  CHECK(rt_mesh_all_ok(m, 1) == 1, "all_ok(1)");
  CHECK(rt_mesh_all_ok(m, m->rank != m->world - 1) == 0, "all_ok with one rank failing");
  CHECK(rt_mesh_total_bytes(m) == total, "total bytes %llu, expected %llu",
        (unsigned long long)rt_mesh_total_bytes(m), (unsigned long long)total);
}

/* ---- pipeline point-to-point ---- */

static void check_p2p(const Cfg *c, RtMesh *m) {
  group = G_P2P;
  Pos p = pos_of(c, m->rank), prev = p, next = p;
  prev.pp--, next.pp++;
  size_t n = 6;
  float out[6], in[6];
  // A chain down the stages with blocking calls: receive, then send.
  rt_mesh_reset_counts(m);
  if (p.pp > 0) {
    rt_recv(m, world_of(c, prev), 3, in, n, 4);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
      bad += in[i] != (float)val(world_of(c, prev), i, 50);
    CHECK(!bad, "recv from the previous stage: %d wrong elements", bad);
  }
  if (p.pp < c->pp - 1) {
    fill(out, 4, n, m->rank, 50);
    rt_send(m, world_of(c, next), 3, out, n, 4);
  }
  uint64_t want = p.pp < c->pp - 1 ? n * 4 : 0;
  CHECK(m->bytes[RT_AX_PP] == want && rt_mesh_total_bytes(m) == want,
        "send/recv counted %llu bytes, expected %llu", (unsigned long long)m->bytes[RT_AX_PP],
        (unsigned long long)want);
  // A ring with isend + recv + waitall (to itself when pp == 1).
  double dout[5], din[5];
  next.pp = (p.pp + 1) % c->pp, prev.pp = (p.pp + c->pp - 1) % c->pp;
  fill(dout, 8, 5, m->rank, 51);
  MPI_Request req;
  rt_isend(m, world_of(c, next), 4, dout, 5, 8, &req);
  rt_recv(m, world_of(c, prev), 4, din, 5, 8);
  rt_waitall(m, 1, &req);
  int bad = 0;
  for (size_t i = 0; i < 5; i++)
    bad += din[i] != val(world_of(c, prev), i, 51);
  CHECK(!bad, "isend ring: %d wrong elements", bad);
  CHECK(m->bytes[RT_AX_PP] == want + 40, "isend counted %llu bytes",
        (unsigned long long)m->bytes[RT_AX_PP]);
}

/* ---- flat (ZeRO) shards ---- */

static void check_flat(const Cfg *c, RtMesh *m) {
  group = G_FLAT;
  Pos p = pos_of(c, m->rank);
  const int axes[] = {RT_AX_DATA, RT_AX_DP};
  for (int a = 0; a < 2; a++) {
    int ax = axes[a], P = m->size[ax];
    size_t n = 3;
    double local[3], *full = xmalloc(sizeof(double) * n * P);
    fill(local, 8, n, m->rank, 60);
    memset(full, 0, sizeof(double) * n * P);
    rt_mesh_reset_counts(m);
    CHECK(rt_gather_flat(m, ax, local, n, m->coord[ax] == 0 ? full : NULL, 8) == RT_OK,
          "gather_flat");
    if (m->coord[ax] == 0) {
      int bad = 0;
      for (int k = 0; k < P; k++)
        for (size_t i = 0; i < n; i++)
          bad += full[k * n + i] != val(member(c, p, ax, k), i, 60);
      CHECK(!bad, "gather_flat on %s: %d wrong elements", rt_axis_name(ax), bad);
      for (size_t i = 0; i < n * P; i++)
        full[i] += 100;
    }
    CHECK(rt_scatter_flat(m, ax, m->coord[ax] == 0 ? full : NULL, local, n, 8) == RT_OK,
          "scatter_flat");
    int bad = 0;
    for (size_t i = 0; i < n; i++)
      bad += local[i] != val(m->rank, i, 60) + 100;
    CHECK(!bad, "scatter_flat on %s: %d wrong elements", rt_axis_name(ax), bad);
    CHECK(rt_mesh_total_bytes(m) == 0, "flat gather/scatter must not be counted");
    free(full);
  }
  if (m->comm[RT_AX_EMBED] == MPI_COMM_NULL) {
    double x = 0;
    CHECK(rt_gather_flat(m, RT_AX_EMBED, &x, 1, NULL, 8) == RT_ERR_ARG,
          "gather_flat without a communicator");
  }
}

/* ---- sharded tensors ---- */

// Global index along dim d of local index l, for a rank with coord[k] on split k.
static int64_t shard_map(const RtShard *s, const int *P, const int *coord, int d, int64_t l) {
  for (int k = 0; k < s->nsplit; k++) {
    if (s->split[k].dim != d)
      continue;
    int64_t g0 = 0, l0 = 0;
    for (int j = 0; j < s->split[k].nseg; j++) {
      int64_t piece = s->split[k].seg[j] / P[k];
      if (l < l0 + piece)
        return g0 + coord[k] * piece + (l - l0);
      g0 += s->split[k].seg[j], l0 += piece;
    }
  }
  return l;
}

static void check_one_shard(const Cfg *c, RtMesh *m, const RtShard *s, int esize,
                            const char *what) {
  Pos p = pos_of(c, m->rank);
  int P[2] = {1, 1}, coord[2] = {0, 0};
  for (int k = 0; k < s->nsplit; k++) {
    P[k] = exp_size(c, p, s->split[k].axis);
    coord[k] = exp_coord(c, p, s->split[k].axis);
  }
  CHECK(rt_shard_check(s, m) == RT_OK, "%s: check: %s", what, rt_last_error());
  int64_t lshape[6], gshape[6];
  rt_shard_local_shape(s, m, lshape);
  size_t gn = 1, ln = 1;
  for (int d = 0; d < s->ndim; d++) {
    int64_t want = s->shape[d];
    for (int k = 0; k < s->nsplit; k++)
      if (s->split[k].dim == d)
        want /= P[k];
    CHECK(lshape[d] == want, "%s: local dim %d is %lld, expected %lld", what, d,
          (long long)lshape[d], (long long)want);
    gn *= s->shape[d], ln *= lshape[d];
    gshape[d] = s->shape[d];
  }
  CHECK(rt_shard_local_numel(s, m) == ln, "%s: local numel", what);
  // The global tensor: element i holds a value derived from i alone.
  unsigned char *global = xmalloc(gn * esize), *local = xmalloc(ln * esize);
  unsigned char *back = xmalloc(gn * esize);
  for (size_t i = 0; i < gn; i++)
    for (int b = 0; b < esize; b++)
      global[i * esize + b] = (unsigned char)(i * 7 + b * 31 + (i >> 8) * 3);
  rt_shard_extract(s, m, global, local, esize);
  int bad = 0;
  for (size_t li = 0; li < ln; li++) {
    size_t rem = li, gi = 0, stride = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
      int64_t l = rem % lshape[d];
      rem /= lshape[d];
      gi += shard_map(s, P, coord, d, l) * stride;
      stride *= gshape[d];
    }
    bad += memcmp(local + li * esize, global + gi * esize, esize) != 0;
  }
  CHECK(!bad, "%s: extract: %d wrong elements", what, bad);
  // Only the designated holders may be read: garbage everywhere else.
  int owner = s->pp_owner < 0 ? 0 : s->pp_owner;
  if (p.dp != 0 || p.sp != 0 || p.pp != owner)
    memset(local, 0xab, ln * esize);
  memset(back, 0xcd, gn * esize);
  rt_mesh_reset_counts(m);
  CHECK(rt_shard_gather(s, m, local, m->rank == 0 ? back : NULL, esize) == RT_OK,
        "%s: gather: %s", what, rt_last_error());
  if (m->rank == 0)
    CHECK(memcmp(back, global, gn * esize) == 0, "%s: gathered tensor differs", what);
  CHECK(rt_mesh_total_bytes(m) == 0, "%s: gather must not be counted", what);
  free(global), free(local), free(back);
}

static RtShard shard2(int64_t d0, int64_t d1, int pp_owner) {
  RtShard s = {.ndim = 2, .shape = {d0, d1}, .pp_owner = pp_owner};
  return s;
}
static void add_split(RtShard *s, int dim, int axis, int nseg, const int64_t *seg) {
  int k = s->nsplit++;
  s->split[k].dim = dim, s->split[k].axis = axis, s->split[k].nseg = nseg;
  for (int j = 0; j < nseg; j++)
    s->split[k].seg[j] = seg ? seg[j] : s->shape[dim];
}

static void check_shards(const Cfg *c, RtMesh *m) {
  group = G_SHARD;
  int T = cfg_T(c), q = c->q, last = c->pp - 1;
  RtShard s = shard2(3, 5, -1);
  check_one_shard(c, m, &s, 4, "unsplit (3,5)");
  RtShard sc = {.ndim = 0, .pp_owner = last};
  check_one_shard(c, m, &sc, 8, "scalar on the last stage");
  s = shard2(2 * T, 3, 0);
  add_split(&s, 0, RT_AX_TP, 1, NULL);
  check_one_shard(c, m, &s, 4, "rows over tp");
  check_one_shard(c, m, &s, 2, "rows over tp, 2-byte elements");
  // A fused (q,k,v)-style weight: unequal segments, on the last stage.
  int g = T % 4 == 0 ? 4 : T % 2 == 0 ? 2 : 1; // gcd(T, 4): 8,4,4 for T = 1, 2, 4
  int64_t u = T / g, qkv[3] = {8 * u, 4 * u, 4 * u};
  s = shard2(3, 16 * u, last);
  add_split(&s, 1, RT_AX_TP, 3, qkv);
  check_one_shard(c, m, &s, 4, "qkv segments 8,4,4 over tp");
  check_one_shard(c, m, &s, 8, "qkv segments 8,4,4 over tp, f64");
  RtShard s3 = {.ndim = 3, .shape = {2, 2 * T, 3}, .pp_owner = -1};
  int64_t halves[2] = {T, T};
  add_split(&s3, 1, RT_AX_TP, 2, halves);
  check_one_shard(c, m, &s3, 4, "middle dim, 2 segments");
  if (q > 0) {
    s = shard2(2 * q, 3 * q, -1);
    add_split(&s, 0, RT_AX_TPC, 1, NULL);
    add_split(&s, 1, RT_AX_TPR, 1, NULL);
    check_one_shard(c, m, &s, 4, "2D: rows over tpc, columns over tpr");
    int64_t two[2] = {2 * q, 2 * q};
    s = shard2(3, 4 * q, last);
    add_split(&s, 1, RT_AX_TPR, 2, two);
    check_one_shard(c, m, &s, 4, "2D: columns over tpr only, 2 segments");
    s = shard2(2 * q, 5, 0);
    add_split(&s, 0, RT_AX_TPC, 1, NULL);
    check_one_shard(c, m, &s, 8, "2D: rows over tpc only");
    s = shard2(2 * q * q, 3, -1);
    add_split(&s, 0, RT_AX_TP, 1, NULL);
    check_one_shard(c, m, &s, 4, "2D: rows over the whole grid");
    RtShard s4 = {.ndim = 4, .shape = {2, 2 * q, 3, 2 * q}, .pp_owner = last};
    int64_t qq[2] = {q, q};
    add_split(&s4, 3, RT_AX_TPR, 2, qq);
    add_split(&s4, 1, RT_AX_TPC, 1, NULL);
    check_one_shard(c, m, &s4, 4, "2D: 4-dim, tpr segments on dim 3, tpc on dim 1");
  }
  // Bad specs: RT_ERR_ARG on every rank, nothing sent.
  int64_t wrong[2] = {2 * T, T};
  s = shard2(3, 4 * T, -1);
  add_split(&s, 1, RT_AX_TP, 2, wrong);
  CHECK(rt_shard_gather(&s, m, NULL, NULL, 4) == RT_ERR_ARG &&
            strstr(rt_last_error(), "sum to"), "segments not summing: %s", rt_last_error());
  s = shard2(3, 4, c->pp);
  CHECK(rt_shard_check(&s, m) == RT_ERR_ARG, "pp_owner out of range");
  if (T > 1) {
    s = shard2(T + 1, 4, -1);
    add_split(&s, 0, RT_AX_TP, 1, NULL);
    CHECK(rt_shard_check(&s, m) == RT_ERR_ARG && strstr(rt_last_error(), "evenly"),
          "uneven split: %s", rt_last_error());
  }
  s = shard2(4, 4, -1);
  add_split(&s, 0, RT_AX_DP, 1, NULL);
  CHECK(rt_shard_check(&s, m) == RT_ERR_ARG, "split over dp");
}

/* ---- vocab-parallel cross-entropy ---- */

static void check_xent_axis(const Cfg *c, RtMesh *m, int ax) {
  group = G_XENT;
  int P = m->size[ax], r = m->coord[ax];
  enum { N = 9, VL = 7 };
  int V = P * VL, v0 = r * VL;
  int32_t targets[N];
  // Row n < P targets slice n; row 3 is ignored.
  for (int n = 0; n < N; n++)
    targets[n] = n == 3 ? RT_IGNORE_INDEX : (n % P) * VL + (n * 3) % VL;
  float *full = xmalloc(sizeof(float) * N * V), *dfull = xmalloc(sizeof(float) * N * V);
  double *full64 = xmalloc(sizeof(double) * N * V), *dfull64 = xmalloc(sizeof(double) * N * V);
  float loc[N * VL], dloc[N * VL];
  double loc64[N * VL], dloc64[N * VL], scratch[3 * N];
  for (int i = 0; i < N * V; i++) {
    full64[i] = 2.5 * rt_rng_normal(1234, (uint64_t)ax, (uint64_t)i);
    full[i] = (float)full64[i];
    dfull[i] = 0, dfull64[i] = 0.5; // f64 also shows it accumulates
  }
  for (int n = 0; n < N; n++)
    for (int j = 0; j < VL; j++) {
      loc[n * VL + j] = full[n * V + v0 + j], loc64[n * VL + j] = full64[n * V + v0 + j];
      dloc[n * VL + j] = 0, dloc64[n * VL + j] = 0.5;
    }
  CHECK(rt_scratch_vp_xent_bytes(N) == sizeof scratch, "scratch size");

  double ref, loss = -1, ref64, loss64 = -1;
  int nvalid;
  rt_crossentropy_forward_f32(&ref, &nvalid, NULL, NULL, full, targets, N, V);
  rt_crossentropy_forward_f64(&ref64, NULL, NULL, NULL, full64, targets, N, V);
  rt_mesh_reset_counts(m);
  int rc = rt_vp_crossentropy_forward_f32(m, ax, &loss, loc, targets, N, VL, v0, V, scratch);
  CHECK(rc == RT_OK && fabs(loss - ref) <= 1e-6 * fabs(ref), "%s f32 loss %.9g, kernel %.9g",
        rt_axis_name(ax), loss, ref);
  CHECK(m->bytes[ax] == rt_vol_vp_xent_fwd(N, P) && rt_mesh_total_bytes(m) == m->bytes[ax],
        "forward volume %llu, formula %llu", (unsigned long long)m->bytes[ax],
        (unsigned long long)rt_vol_vp_xent_fwd(N, P));
  rc = rt_vp_crossentropy_forward_f64(m, ax, &loss64, loc64, targets, N, VL, v0, V, scratch);
  CHECK(rc == RT_OK && fabs(loss64 - ref64) <= 1e-12 * fabs(ref64),
        "%s f64 loss %.17g, kernel %.17g", rt_axis_name(ax), loss64, ref64);

  rt_mesh_reset_counts(m);
  rt_crossentropy_backward_acc_f32(dfull, full, NULL, targets, N, V, 1.7, nvalid);
  rt_vp_crossentropy_backward_acc_f32(m, ax, dloc, loc, targets, N, VL, v0, 1.7, nvalid,
                                      scratch);
  CHECK(m->bytes[ax] == rt_vol_vp_xent_bwd(N, P) && rt_mesh_total_bytes(m) == m->bytes[ax],
        "backward volume %llu, formula %llu", (unsigned long long)m->bytes[ax],
        (unsigned long long)rt_vol_vp_xent_bwd(N, P));
  rt_crossentropy_backward_acc_f64(dfull64, full64, NULL, targets, N, V, 1.7, nvalid);
  rt_vp_crossentropy_backward_acc_f64(m, ax, dloc64, loc64, targets, N, VL, v0, 1.7, nvalid,
                                      scratch);
  double worst = 0, worst64 = 0;
  for (int n = 0; n < N; n++)
    for (int j = 0; j < VL; j++) {
      double want = dfull[n * V + v0 + j], got = dloc[n * VL + j];
      worst = fmax(worst, fabs(got - want) / (2e-6 * fabs(want) + 1e-12));
      want = dfull64[n * V + v0 + j], got = dloc64[n * VL + j];
      worst64 = fmax(worst64, fabs(got - want) / (1e-12 * fabs(want) + 1e-14));
      if (n == 3)
        CHECK(dloc[n * VL + j] == 0 && dloc64[n * VL + j] == 0.5,
              "ignored row has a gradient");
    }
  CHECK(worst <= 1, "%s f32 dlogits off by %.3g x tolerance", rt_axis_name(ax), worst);
  CHECK(worst64 <= 1, "%s f64 dlogits off by %.3g x tolerance", rt_axis_name(ax), worst64);

  // A bad target: RT_ERR_ARG on every rank, before any communication.
  targets[5] = V;
  rt_mesh_reset_counts(m);
  rc = rt_vp_crossentropy_forward_f32(m, ax, &loss, loc, targets, N, VL, v0, V, scratch);
  int ok = rc == RT_ERR_ARG && strstr(rt_last_error(), "outside") != NULL;
  CHECK(ok, "bad target: rc %d, \"%s\"", rc, rt_last_error());
  CHECK(rt_mesh_total_bytes(m) == 0, "bad target communicated");
  CHECK(rt_mesh_all_ok(m, ok), "bad target not reported on every rank");
  free(full), free(dfull), free(full64), free(dfull64);
}

/* ---- driver ---- */

static int ncfg;
static Cfg cfgs[64];

static void add_cfg(int dp, int tp, int q, int sp, int pp) {
  if (ncfg < 64)
    cfgs[ncfg++] = (Cfg){dp, tp, q, sp, pp};
}

// Every dp·tp·sp·pp = np, then the q×q grids (q = 1 on one mesh, q ≥ 2
// where q² divides np).
static void make_cfgs(int np) {
  for (int tp = 1; tp <= np; tp++)
    for (int dp = 1; dp <= np; dp++)
      for (int sp = 1; sp <= np; sp++)
        for (int pp = 1; pp <= np; pp++)
          if (tp * dp * sp * pp == np)
            add_cfg(dp, tp, 0, sp, pp);
  add_cfg(np, 1, 1, 1, 1);
  for (int q = 2; q * q <= np; q++)
    if (np % (q * q) == 0)
      for (int dp = 1; dp <= np; dp++)
        for (int sp = 1; sp <= np; sp++)
          for (int pp = 1; pp <= np; pp++)
            if (q * q * dp * sp * pp == np)
              add_cfg(dp, q * q, q, sp, pp);
}

static int abort_test(const char *mode) {
  RtMesh m;
  int np;
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  if (rt_mesh_init(&m, 1, np, 0, 1, 1) != RT_OK) {
    fprintf(stderr, "%s\n", rt_last_error());
    return 1;
  }
  if (m.rank == np - 1) {
    float x = 0;
    if (!strcmp(mode, "fail"))
      rt_mesh_fail(&m, "deliberate failure (%s)", "test");
    rt_send(&m, np, 0, &x, 1, 4); // no such rank
  }
  MPI_Barrier(MPI_COMM_WORLD); // the others wait here until the job is taken down
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int np;
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  if (argc == 3 && !strcmp(argv[1], "--abort")) {
    int rc = abort_test(argv[2]);
    MPI_Finalize();
    return rc;
  }
  if (argc == 2 && !strcmp(argv[1], "--leak")) {
    RtMesh leaked;
    int rc = rt_mesh_init(&leaked, 1, np, 0, 1, 1);
    MPI_Finalize();
    return rc;
  }
  double t0 = MPI_Wtime();

  // Bad meshes: RT_ERR_ARG on every rank.
  RtMesh m;
  group = G_LAYOUT;
  snprintf(ctx, sizeof ctx, "bad meshes");
  CHECK(rt_mesh_init(&m, np + 1, 1, 0, 1, 1) == RT_ERR_ARG &&
            strstr(rt_last_error(), "MPI started"), "world mismatch: %s", rt_last_error());
  CHECK(rt_mesh_init(&m, np, 2, 2, 1, 1) == RT_ERR_ARG, "tp != q*q");
  CHECK(rt_mesh_init(&m, 0, np, 0, 1, 1) == RT_ERR_ARG, "dp = 0");

  make_cfgs(np);
  for (int i = 0; i < ncfg; i++) {
    Cfg *c = &cfgs[i];
    snprintf(ctx, sizeof ctx, "dp=%d tp=%d q=%d sp=%d pp=%d", c->dp, c->tp, c->q, c->sp,
             c->pp);
    int rc = rt_mesh_init(&m, c->dp, c->tp, c->q, c->sp, c->pp);
    group = G_LAYOUT;
    CHECK(rc == RT_OK, "mesh init: %s", rt_last_error());
    if (rc != RT_OK)
      continue;
    check_layout(c, &m);
    check_collectives(c, &m);
    check_p2p(c, &m);
    check_flat(c, &m);
    check_shards(c, &m);
    check_xent_axis(c, &m, RT_AX_TP);
    if (c->q > 1)
      check_xent_axis(c, &m, RT_AX_TPR);
    rt_mesh_free(&m);
  }

  // Rank 0 reports each group's totals over all ranks.
  long tot_checks[G_COUNT], tot_fail[G_COUNT];
  MPI_Reduce(n_checks, tot_checks, G_COUNT, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(n_fail, tot_fail, G_COUNT, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  long fails = 0;
  for (int g = 0; g < G_COUNT; g++)
    fails += n_fail[g];
  long any = 0;
  MPI_Allreduce(&fails, &any, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (my_rank == 0) {
    for (int g = 0; g < G_COUNT; g++)
      printf("np=%d %-30s %6ld checks %s\n", np, group_names[g], tot_checks[g],
             tot_fail[g] ? "FAILED" : "ok");
    printf("np=%d: %d meshes, %.2f s: %s\n", np, ncfg, MPI_Wtime() - t0, any ? "FAIL" : "ok");
  }
  MPI_Finalize();
  return any ? 1 : 0;
}
