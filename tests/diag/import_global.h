/* import_global.h — reads a global variable. */
float alpha = 0.1f;
static inline float leaky(float x) { return x > 0 ? x : alpha * x; }
