/* rng.c — counter-based random numbers (see the formula in shardrt.h). */
#include <math.h>

#include "rt_internal.h"

static inline uint64_t rt_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rt_rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t key = rt_mix64(rt_mix64(seed) ^ (stream * 0x9E3779B97F4A7C15ull));
  return rt_mix64(key + index * 0xD1B54A32D192ED03ull);
}

double rt_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (double)(rt_rng_u64(seed, stream, index) >> 11) * 0x1.0p-53;
}

double rt_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = rt_rng_uniform(seed, stream, index);
  double u2 = rt_rng_uniform(seed, stream ^ 0x5bd1e995ull, index);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}
