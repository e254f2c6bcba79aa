/* test_dist_shared.c — the headers the compiler and the runtime share:
 * one axis list behind MeshAxis and RtAxis and both name printers
 * (runtime/dist_axes.h); the rank layout (runtime/dist_layout.h), whose
 * groups tests/runtime/mpi/test_dist.c also compares with what MPI builds. */
#include "ir.h"
#include "runtime/dist_axes.h"
#include "runtime/dist_layout.h"
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

int main(void) {
  test_axes();
  test_layout();
  TEST_MAIN_END();
}
