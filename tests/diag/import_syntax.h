/* import_syntax.h — not valid C. */
static inline float broken(float x) {
  return x * ;
}
