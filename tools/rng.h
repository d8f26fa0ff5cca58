/*===- tools/rng.h - The tools' seeded random numbers ----------------------===*
 *
 * One generator for everything the tools draw (htp-run's random data, the
 * training init, the shuffle and the augmentation): xoshiro256** seeded by
 * four splitmix64 draws from a 64-bit mix. Small, portable and identical on
 * every machine, so a seed gives the same numbers everywhere. Header-only,
 * so the training library need not link htp-run.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TOOLS_RNG_H
#define HTP_TOOLS_RNG_H

#include <stdint.h>

typedef struct htp_rng {
  uint64_t state[4];
} htp_rng;

static inline uint64_t htp_splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* A generator whose state is four splitmix64 draws from mix. */
static inline htp_rng htp_rng_seeded(uint64_t mix) {
  htp_rng r;
  for (int i = 0; i < 4; i++)
    r.state[i] = htp_splitmix64(&mix);
  return r;
}

static inline uint64_t htp_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t htp_rng_u64(htp_rng *r) {
  uint64_t *s = r->state;
  uint64_t result = htp_rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = htp_rng_rotl(s[3], 45);
  return result;
}

/* Uniform in (0, 1]: never 0, so log() is finite. */
static inline double htp_rng_unit(htp_rng *r) {
  return ((htp_rng_u64(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

/* Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject). */
static inline uint32_t htp_rng_below(htp_rng *r, uint32_t bound) {
  uint64_t product = (htp_rng_u64(r) >> 32) * bound;
  uint32_t low = (uint32_t)product;
  if (low < bound) {
    uint32_t threshold = (uint32_t)(-bound) % bound;
    while (low < threshold) {
      product = (htp_rng_u64(r) >> 32) * bound;
      low = (uint32_t)product;
    }
  }
  return (uint32_t)(product >> 32);
}

#endif /* HTP_TOOLS_RNG_H */
