#include <math.h>

/* import_inline_too_many_ops.h — each level calls the one below twice on
 * different arguments: g11 inlines to 2048 copies of g0 (shallow, but over
 * the limit on operations; g10 is within it). */
static inline float g0(float x) { return x; }
static inline float g1(float x) { return g0(sinf(x)) + g0(cosf(x)); }
static inline float g2(float x) { return g1(sinf(x)) + g1(cosf(x)); }
static inline float g3(float x) { return g2(sinf(x)) + g2(cosf(x)); }
static inline float g4(float x) { return g3(sinf(x)) + g3(cosf(x)); }
static inline float g5(float x) { return g4(sinf(x)) + g4(cosf(x)); }
static inline float g6(float x) { return g5(sinf(x)) + g5(cosf(x)); }
static inline float g7(float x) { return g6(sinf(x)) + g6(cosf(x)); }
static inline float g8(float x) { return g7(sinf(x)) + g7(cosf(x)); }
static inline float g9(float x) { return g8(sinf(x)) + g8(cosf(x)); }
static inline float g10(float x) { return g9(sinf(x)) + g9(cosf(x)); }
static inline float g11(float x) { return g10(sinf(x)) + g10(cosf(x)); }
