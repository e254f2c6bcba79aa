/* test_dist_shared.c — the headers the compiler and the runtime share
 * (runtime/dist_axes.h): one axis list behind MeshAxis and RtAxis and both
 * name printers. */
#include "ir.h"
#include "runtime/dist_axes.h"
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

int main(void) {
  test_axes();
  TEST_MAIN_END();
}
