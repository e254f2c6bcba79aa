/* import_macro_too_many_ops.h — a macro that uses its argument twice, nested
 * 15 deep, expands to 32767 multiplications (it once took quadratic time). */
#define SQ(x) ((x) * (x))
static inline float pow32768(float x) { return SQ(SQ(SQ(SQ(SQ(SQ(SQ(SQ(SQ(SQ(SQ(SQ(SQ(SQ(SQ(x))))))))))))))); }
