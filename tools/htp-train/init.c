/*===- tools/htp-train/init.c - A timm-style initialisation of a ViT ------===*
 *
 * See init.h. Normals by Box-Muller from xoshiro256** seeded through
 * splitmix64 with seed ^ FNV-1a(name); a draw outside the bounds is drawn
 * again (what truncation means), which at std 0.02 and bounds +-2 never
 * happens in practice but is done anyway.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-train/init.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t *s) {
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/* Uniform in (0, 1]: never 0, so log() is finite. */
static double next_unit(uint64_t *s) {
  return ((next_u64(s) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static int ends_with(const char *text, const char *suffix) {
  size_t length = strlen(text), tail = strlen(suffix);
  return length >= tail && strcmp(text + length - tail, suffix) == 0;
}

htp_init_kind htp_train_init_kind(const char *name) {
  if (strstr(name, "norm") && ends_with(name, ".weight"))
    return HTP_INIT_ONES;
  if (ends_with(name, ".bias"))
    return HTP_INIT_ZEROS;
  return HTP_INIT_TRUNC_NORMAL;
}

void htp_train_init_param(const char *name, int64_t count, uint64_t seed, float *out) {
  htp_init_kind kind = htp_train_init_kind(name);
  if (kind != HTP_INIT_TRUNC_NORMAL) {
    for (int64_t i = 0; i < count; i++)
      out[i] = kind == HTP_INIT_ONES ? 1.0f : 0.0f;
    return;
  }
  uint64_t hash = UINT64_C(0xcbf29ce484222325);
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    hash = (hash ^ *p) * UINT64_C(0x100000001b3);
  uint64_t mix = seed ^ hash, s[4];
  for (int i = 0; i < 4; i++)
    s[i] = splitmix64(&mix);
  for (int64_t i = 0; i < count;) {
    double radius = sqrt(-2.0 * log(next_unit(s))), angle = 6.283185307179586 * next_unit(s);
    double pair[2] = {radius * cos(angle), radius * sin(angle)};
    for (int k = 0; k < 2 && i < count; k++) {
      double value = HTP_TRAIN_INIT_STD * pair[k];
      if (fabs(value) <= HTP_TRAIN_INIT_BOUND)
        out[i++] = (float)value;
    }
  }
}
