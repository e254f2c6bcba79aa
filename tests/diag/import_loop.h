/* import_loop.h — a function with a loop, which shardc cannot differentiate. */
static inline float poly(float x) {
  float s = 0;
  for (int i = 0; i < 4; i++) s = s * x + 1;
  return s;
}
