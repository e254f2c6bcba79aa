#include <math.h>

/* import_inline_too_deep.h — each level calls the one below twice, in a
 * chain: f10 inlines to tanhf applied 1024 times, deeper than shardc allows. */
static inline float f0(float x) { return tanhf(x); }
static inline float f1(float x) { return f0(f0(x)); }
static inline float f2(float x) { return f1(f1(x)); }
static inline float f3(float x) { return f2(f2(x)); }
static inline float f4(float x) { return f3(f3(x)); }
static inline float f5(float x) { return f4(f4(x)); }
static inline float f6(float x) { return f5(f5(x)); }
static inline float f7(float x) { return f6(f6(x)); }
static inline float f8(float x) { return f7(f7(x)); }
static inline float f9(float x) { return f8(f8(x)); }
static inline float f10(float x) { return f9(f9(x)); }
