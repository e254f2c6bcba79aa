/* test_dist_shared.c — the headers the compiler and the runtime share:
 * one axis list behind MeshAxis and RtAxis and both name printers
 * (runtime/dist_axes.h); the rank layout (runtime/dist_layout.h), whose
 * groups tests/runtime/mpi/test_dist.c also compares with what MPI builds;
 * the ring attention and SUMMA message orders (runtime/dist_orders.h)
 * against the volumes of runtime/dist_formulas.h. */
#include "ir.h"
#include "runtime/dist_axes.h"
#include "runtime/dist_formulas.h"
#include "runtime/dist_layout.h"
#include "runtime/dist_orders.h"
#include "test.h"

static void test_axes(void) {
  static const struct { int ax, rt; const char *ir_name, *rt_name; } want[] = {
      {AX_WORLD, RT_AX_WORLD, "world", "world"}, {AX_DP, RT_AX_DP, "dp", "dp"},
      {AX_TP, RT_AX_TP, "tp", "tp"},             {AX_TPR, RT_AX_TPR, "tp-row", "tpr"},
      {AX_TPC, RT_AX_TPC, "tp-col", "tpc"},      {AX_SP, RT_AX_SP, "sp", "sp"},
      {AX_PP, RT_AX_PP, "pp", "pp"},             {AX_DATA, RT_AX_DATA, "data", "data"},
      {AX_EMBED, RT_AX_EMBED, "embed", "embed"}};
  int n = (int)(sizeof want / sizeof want[0]);
  ASSERT(AX_COUNT, n);
  ASSERT(RT_AX_COUNT, n);
  for (int i = 0; i < n; i++) {
    ASSERT(i, want[i].ax);
    ASSERT(i, want[i].rt);
    ASSERT_STR(want[i].ir_name, ir_axis_name(want[i].ax));
    ASSERT_STR(want[i].rt_name, rt_axis_rt_name(want[i].rt));
  }
  ASSERT_STR("?", ir_axis_name(AX_COUNT));
  ASSERT_STR("?", ir_axis_name(-1));
  ASSERT_STR("?", rt_axis_rt_name(RT_AX_COUNT));
}

/* One mesh: coordinates round-trip; on every axis every rank's group lists
 * its members in ascending order, the rank at its key, all with the rank's
 * color and size, and no rank outside it has that color; the groups of an
 * axis cover every rank that has one; neighbours change one coordinate. */
static void check_layout(int dp, int tp, int q, int sp, int pp) {
  RtLayout L = {dp, tp, q, sp, pp};
  int nr = rt_layout_world(&L), members[64];
  ASSERT(dp * tp * sp * pp, nr);
  for (int r = 0; r < nr; r++) {
    RtCoords c = rt_layout_coords(&L, r);
    ASSERT(r, rt_layout_rank(&L, c));
    ASSERT(1, c.pp < pp && c.dp < dp && c.sp < sp && c.t < tp);
    for (int ax = 0; ax < RT_AX_COUNT; ax++) {
      RtGroup g = rt_layout_group(&L, ax, r);
      int n = rt_layout_members(&L, ax, r, members);
      ASSERT(g.size, n);
      bool middle = ax == RT_AX_EMBED && pp > 1 && c.pp != 0 && c.pp != pp - 1;
      ASSERT(middle, g.color < 0);
      if (middle) {
        ASSERT(0, n);
        ASSERT(-1, g.key);
        continue;
      }
      ASSERT(r, members[g.key]);
      ASSERT(members[0], g.color); /* the color is the first member */
      int in = 0;
      for (int k = 0; k < n; k++) {
        if (k) ASSERT(1, members[k] > members[k - 1]);
        RtGroup mg = rt_layout_group(&L, ax, members[k]);
        ASSERT(g.color, mg.color);
        ASSERT(k, mg.key);
        ASSERT(n, mg.size);
      }
      for (int w = 0; w < nr; w++) {
        bool member = false;
        for (int k = 0; k < n; k++) member |= members[k] == w;
        in += member;
        ASSERT(member, rt_layout_group(&L, ax, w).color == g.color);
      }
      ASSERT(n, in);
    }
    /* sizes of the groups the runtime documents */
    ASSERT(nr, rt_layout_group(&L, RT_AX_WORLD, r).size);
    ASSERT(dp, rt_layout_group(&L, RT_AX_DP, r).size);
    ASSERT(tp, rt_layout_group(&L, RT_AX_TP, r).size);
    ASSERT(q ? q : 1, rt_layout_group(&L, RT_AX_TPR, r).size);
    ASSERT(q ? q : 1, rt_layout_group(&L, RT_AX_TPC, r).size);
    ASSERT(q ? c.t % q : 0, rt_layout_group(&L, RT_AX_TPR, r).key);
    ASSERT(q ? c.t / q : 0, rt_layout_group(&L, RT_AX_TPC, r).key);
    ASSERT(sp, rt_layout_group(&L, RT_AX_SP, r).size);
    ASSERT(pp, rt_layout_group(&L, RT_AX_PP, r).size);
    ASSERT(dp * sp, rt_layout_group(&L, RT_AX_DATA, r).size);
    ASSERT(c.dp * sp + c.sp, rt_layout_group(&L, RT_AX_DATA, r).key);
    for (int dir = -1; dir <= 1; dir += 2) {
      RtCoords n = rt_layout_coords(&L, rt_layout_pipe_peer(&L, r, dir));
      ASSERT((c.pp + dir + pp) % pp, n.pp);
      ASSERT(1, n.dp == c.dp && n.sp == c.sp && n.t == c.t);
      n = rt_layout_coords(&L, rt_layout_ring_peer(&L, r, dir));
      ASSERT((c.sp + dir + sp) % sp, n.sp);
      ASSERT(1, n.dp == c.dp && n.pp == c.pp && n.t == c.t);
    }
    /* an interleaved schedule's wrap: pp - 1 stages on is one back */
    ASSERT(rt_layout_pipe_peer(&L, r, -1), rt_layout_pipe_peer(&L, r, pp - 1));
  }
}

static void test_layout(void) {
  check_layout(2, 2, 0, 1, 2);   /* dp=2, tp=2, pp=2 */
  check_layout(2, 4, 2, 1, 1);   /* tp2d=2x2, dp=2 */
  check_layout(1, 2, 0, 2, 2);   /* sp=2 (ring), pp=2, tp=2 */
  check_layout(1, 1, 0, 1, 4);   /* a 4-stage pipeline: middle stages have no EMBED */
  check_layout(2, 4, 2, 2, 3);   /* everything at once, 48 ranks */
  /* the first rank of rank 5's groups on dp=2, tp=2, pp=2: ((1*2+0)*1+0)*2+1 */
  RtLayout L = {2, 2, 0, 1, 2};
  ASSERT(5, rt_layout_rank(&L, (RtCoords){1, 0, 0, 1}));
  ASSERT(5, rt_layout_group(&L, RT_AX_DP, 5).color);
  ASSERT(4, rt_layout_group(&L, RT_AX_TP, 5).color);
  ASSERT(1, rt_layout_group(&L, RT_AX_PP, 5).color);
  ASSERT(1, rt_layout_group(&L, RT_AX_EMBED, 5).color);
  ASSERT(1, rt_layout_group(&L, RT_AX_EMBED, 5).key);
  ASSERT(1, rt_layout_pipe_peer(&L, 5, 1));
}

/* Ring attention: (P-1)·4 messages forward, (P-1)·8 + 4 backward, none on
 * one rank; the sends' bytes are rt_vol_ring_fwd / rt_vol_ring_bwd; in each
 * step every send comes before every receive and the blocks received are
 * the blocks sent, in the same order (the previous rank runs the same
 * list); only dK and dV wait for the compute. */
static void check_ring(int bwd, int P, size_t kv, int esize) {
  RtRingCall call = {bwd, P, kv, esize, 0};
  int n = rt_ring_msgs(&call, NULL);
  ASSERT(P == 1 ? 0 : bwd ? (P - 1) * 8 + 4 : (P - 1) * 4, n);
  RtRingMsg all[64];
  ASSERT(n, rt_ring_msgs(&call, all));
  uint64_t sent = 0;
  int k = 0;
  for (int s = 0; s < P; s++) {
    RtRingMsg step[RT_RING_STEP_MAX];
    int m = rt_ring_step(&call, s, step), sends = 0;
    int blocks[2][RT_RING_NBLOCKS], nb[2] = {0, 0};
    for (int i = 0; i < m; i++, k++) {
      const RtRingMsg *g = &step[i];
      ASSERT(1, g->step == all[k].step && g->send == all[k].send && g->block == all[k].block &&
                    g->after == all[k].after && g->n == all[k].n && g->bytes == all[k].bytes);
      ASSERT(s, g->step);
      ASSERT(kv, g->n);
      ASSERT((uint64_t)kv * (uint64_t)esize, g->bytes);
      ASSERT(g->send && g->block >= RT_RING_DK, g->after);
      ASSERT(1, bwd || g->block <= RT_RING_V);
      if (g->send) {
        ASSERT(i, sends++); /* sends first */
        sent += g->bytes;
      }
      blocks[g->send][nb[g->send]++] = g->block;
    }
    ASSERT(nb[1], nb[0]);
    for (int i = 0; i < nb[0] && i < nb[1]; i++) ASSERT(blocks[1][i], blocks[0][i]);
  }
  ASSERT(n, k);
  ASSERT(bwd ? rt_vol_ring_bwd(kv, esize, P) : rt_vol_ring_fwd(kv, esize, P), sent);
}

/* SUMMA: 2q broadcasts forward; backward 2q collectives for each of dX and
 * dW (and the bias all-reduce last); per communicator the volumes of
 * dist_summa.h, in total rt_vol_summa_fwd / rt_vol_summa_bwd; each root is
 * its step; each reduce follows, in its step, the broadcast its partial is
 * computed from. */
static void check_summa(int bwd, int q, int dx, int dw, int dbias, size_t xe, size_t we,
                        size_t nb, int esize) {
  RtSummaCall call = {bwd, q, dx, dw, dbias, xe, we, nb, esize};
  int n = rt_summa_msgs(&call, NULL);
  ASSERT(bwd ? 2 * q * (dx + dw) + dbias : 2 * q, n);
  RtSummaMsg all[64];
  ASSERT(n, rt_summa_msgs(&call, all));
  uint64_t xb = (uint64_t)xe * (uint64_t)esize, wb = (uint64_t)we * (uint64_t)esize;
  uint64_t vol[2] = {0, 0};
  int k = 0;
  for (int s = 0; s < q; s++) {
    RtSummaMsg step[RT_SUMMA_STEP_MAX];
    int m = rt_summa_step(&call, s, step);
    bool have_x = false, have_w = false;
    for (int i = 0; i < m; i++, k++) {
      const RtSummaMsg *g = &step[i];
      ASSERT(1, g->step == all[k].step && g->coll == all[k].coll && g->block == all[k].block &&
                    g->col == all[k].col && g->root == all[k].root && g->n == all[k].n &&
                    g->vol == all[k].vol);
      ASSERT(s, g->step);
      ASSERT(g->coll == RT_SUMMA_ALLREDUCE ? -1 : s, g->root);
      vol[g->col] += g->vol;
      switch (g->block) {
      case RT_SUMMA_X: ASSERT(0, g->col); ASSERT(xe, g->n); have_x = true; break;
      case RT_SUMMA_W: ASSERT(1, g->col); ASSERT(we, g->n); have_w = true; break;
      case RT_SUMMA_DX: ASSERT(0, g->col); ASSERT(1, have_w && dx); break;
      case RT_SUMMA_DW: ASSERT(1, g->col); ASSERT(1, have_x && dw); break;
      default: ASSERT(RT_SUMMA_DB, g->block); ASSERT(1, dbias && s == q - 1); break;
      }
      ASSERT(g->block == RT_SUMMA_X || g->block == RT_SUMMA_W ? RT_SUMMA_BCAST
             : g->block == RT_SUMMA_DB                       ? RT_SUMMA_ALLREDUCE
                                                             : RT_SUMMA_REDUCE,
             g->coll);
    }
  }
  ASSERT(n, k);
  if (!bwd) {
    ASSERT(q * rt_vol_bcast(xb, q), vol[0]);
    ASSERT(q * rt_vol_bcast(wb, q), vol[1]);
    ASSERT(rt_vol_summa_fwd(xb, wb, q), vol[0] + vol[1]);
    return;
  }
  ASSERT(dw * q * rt_vol_bcast(xb, q) + dx * q * rt_vol_reduce(xb, q), vol[0]);
  ASSERT(dx * q * rt_vol_bcast(wb, q) + dw * q * rt_vol_reduce(wb, q) +
             (dbias ? rt_vol_allreduce((uint64_t)nb * (uint64_t)esize, q) : 0),
         vol[1]);
  if (dx && dw && !dbias) ASSERT(rt_vol_summa_bwd(xb, wb, 0, q), vol[0] + vol[1]);
}

static void test_orders(void) {
  for (int P = 1; P <= 6; P++)
    for (int bwd = 0; bwd <= 1; bwd++) {
      check_ring(bwd, P, 1536, 4);
      check_ring(bwd, P, 7, 8);
    }
  for (int q = 1; q <= 4; q++) {
    check_summa(0, q, 0, 0, 0, 96, 160, 0, 4);
    check_summa(0, q, 0, 0, 0, 5, 3, 0, 8);
    for (int mask = 0; mask < 8; mask++)
      check_summa(1, q, mask & 1, mask >> 1 & 1, mask >> 2, 96, 160, 20, 4);
  }
  /* the forward of sp=ring:4 on samples/gpt.shard (32,768-byte blocks):
   * step 1 sends K, V on and receives the next; the last step moves nothing */
  RtRingCall call = {0, 4, 8192, 4, 0};
  RtRingMsg step[RT_RING_STEP_MAX];
  ASSERT(4, rt_ring_step(&call, 0, step));
  ASSERT(1, step[0].send && step[0].block == RT_RING_K && step[1].block == RT_RING_V);
  ASSERT(1, !step[2].send && step[2].block == RT_RING_K && step[3].block == RT_RING_V);
  ASSERT(32768, step[0].bytes);
  ASSERT(0, rt_ring_step(&call, 3, step));
}

int main(void) {
  test_axes();
  test_layout();
  test_orders();
  TEST_MAIN_END();
}
