/*===- tools/htp-run/train/init.c - A timm-style initialisation of a ViT ------===*
 *
 * See init.h. Normals by Box-Muller from tools/rng.h's generator seeded
 * with seed ^ FNV-1a(name); a draw outside the bounds is drawn
 * again (what truncation means), which at std 0.02 and bounds +-2 never
 * happens in practice but is done anyway.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/train/init.h"

#include "tools/rng.h"

#include <math.h>
#include <string.h>

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
  htp_rng r = htp_rng_seeded(seed ^ hash);
  for (int64_t i = 0; i < count;) {
    double radius = sqrt(-2.0 * log(htp_rng_unit(&r))), angle = 6.283185307179586 * htp_rng_unit(&r);
    double pair[2] = {radius * cos(angle), radius * sin(angle)};
    for (int k = 0; k < 2 && i < count; k++) {
      double value = HTP_TRAIN_INIT_STD * pair[k];
      if (fabs(value) <= HTP_TRAIN_INIT_BOUND)
        out[i++] = (float)value;
    }
  }
}
