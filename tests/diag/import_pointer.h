/* import_pointer.h — a pointer parameter. */
static inline float scaled(float x, const float *k) { return x * k[0]; }
