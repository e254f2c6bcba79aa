/* import_ok.h — valid scalar functions for the call-site errors. */
static inline float sq(float x) { return x * x; }
static inline float mix(float a, float b) { return 0.5f * a + 0.5f * b; }
