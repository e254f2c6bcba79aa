/* dist_axes.h — the mesh axes, listed once for the runtime (RtAxis,
 * rt_axis_name in dist.h) and the compiler (MeshAxis, ir_axis_name in
 * ir/ir.h, which includes this file as "runtime/dist_axes.h").
 * Header-only, no MPI.
 *
 * RT_AXES(X) expands X(ID, rt_name, ir_name) once per axis, in enum order:
 * RT_AX_ID and AX_ID are both the axis's index in this list, so a new or
 * moved axis changes the runtime and the compiler together.  The runtime
 * names the grid's rows and columns "tpr" and "tpc" in its messages; the
 * compiler prints "tp-row" and "tp-col" in IR dumps, plans and diagnostics.
 * What each axis's communicator holds is in dist_layout.h.
 */
#ifndef SHARDRT_DIST_AXES_H
#define SHARDRT_DIST_AXES_H

#define RT_AXES(X)                  \
  X(WORLD, "world", "world")        \
  X(DP, "dp", "dp")                 \
  X(TP, "tp", "tp")                 \
  X(TPR, "tpr", "tp-row")           \
  X(TPC, "tpc", "tp-col")           \
  X(SP, "sp", "sp")                 \
  X(PP, "pp", "pp")                 \
  X(DATA, "data", "data")           \
  X(EMBED, "embed", "embed")

typedef enum {
#define RT_AX_ENUM_(id, rt, ir) RT_AX_##id,
  RT_AXES(RT_AX_ENUM_)
#undef RT_AX_ENUM_
  RT_AX_COUNT
} RtAxis;

/* The runtime's name of axis ax ("tpr"), "?" outside the list. */
static inline const char *rt_axis_rt_name(int ax) {
  switch (ax) {
#define RT_AX_CASE_(id, rt, ir) case RT_AX_##id: return rt;
  RT_AXES(RT_AX_CASE_)
#undef RT_AX_CASE_
  default: return "?";
  }
}

/* The compiler's name of axis ax ("tp-row"), "?" outside the list. */
static inline const char *rt_axis_ir_name(int ax) {
  switch (ax) {
#define RT_AX_CASE_(id, rt, ir) case RT_AX_##id: return ir;
  RT_AXES(RT_AX_CASE_)
#undef RT_AX_CASE_
  default: return "?";
  }
}

#endif
