/* parse_error.h — not valid C. */
static inline float broken(float x) {
  return x * ;
}
