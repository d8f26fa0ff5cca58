/*===- test/kernels/test_data.h - Seeded random data for the kernel tests -===*
 *
 * A xorshift64 stream per test file (static state), so each test binary sees
 * the same numbers on every run and machine. Include after <cmocka.h>.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TEST_KERNELS_TEST_DATA_H
#define HTP_TEST_KERNELS_TEST_DATA_H

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* Uniform in [lo, hi). */
static inline float uniform(float lo, float hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (float)((rng_state >> 11) * (1.0 / 9007199254740992.0));
}

/* n floats uniform in [lo, hi); the caller frees. */
static inline float *random_floats(int64_t n, float lo, float hi) {
  float *data = malloc((size_t)n * sizeof(float));
  assert_non_null(data);
  for (int64_t i = 0; i < n; ++i)
    data[i] = uniform(lo, hi);
  return data;
}

#endif /* HTP_TEST_KERNELS_TEST_DATA_H */
