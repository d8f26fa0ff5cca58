/*===- runtime/unit_shard.c - shards of work units: copy, gather, scatter ------===*
 *
 * The one place that knows the shard layout of balance_internal.h
 * (htp__shard): the forward and backward hooks (balance_hooks.c) build
 * compact shards with it, a helper packs its migrated-in units with it
 * (unit_weights.c), and the migration's one-unit shards are shards of one
 * unit.
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"

#include <stdlib.h>
#include <string.h>

htp__shard htp__shard_at(float *base, int64_t units, const htp__unit_shape *u) {
  htp__shard s = {base, base + u->parts * units * u->width * u->d, NULL, units};
  s.second = s.bias + u->parts * units * u->width;
  return s;
}

void htp__copy_unit(const htp__shard *src, int64_t from, const htp__shard *dst, int64_t to,
                    const htp__unit_shape *u) {
  const int64_t w = u->width, d = u->d, row_bytes = w * (int64_t)sizeof(float);
  for (int64_t q = 0; q < u->parts; ++q) {
    memcpy(dst->first + (q * dst->units + to) * w * d, src->first + (q * src->units + from) * w * d,
           (size_t)(d * row_bytes));
    if (!dst->bias) continue;
    float *bias = dst->bias + q * dst->units * w + to * w;
    if (src->bias) memcpy(bias, src->bias + q * src->units * w + from * w, (size_t)row_bytes);
    else memset(bias, 0, (size_t)row_bytes);
  }
  for (int64_t o = 0; o < d; ++o)
    memcpy(dst->second + o * dst->units * w + to * w, src->second + o * src->units * w + from * w,
           (size_t)row_bytes);
}

void htp__gather_units(const htp__shard *src, const int32_t *list, int64_t count,
                       const htp__shard *dst, int64_t at, const htp__unit_shape *u) {
  for (int64_t c = 0; c < count; ++c) htp__copy_unit(src, list[c], dst, at + c, u);
}

void htp__scatter_units(const htp__shard *src, int64_t at, const int32_t *list, int64_t count,
                        const htp__shard *dst, const htp__unit_shape *u) {
  for (int64_t c = 0; c < count; ++c) htp__copy_unit(src, at + c, dst, list[c], u);
}

void htp__zero_shard(const htp__shard *s, const htp__unit_shape *u) {
  const int64_t rows = u->parts * s->units * u->width;
  memset(s->first, 0, (size_t)(rows * u->d) * sizeof(float));
  if (s->bias) memset(s->bias, 0, (size_t)rows * sizeof(float));
  memset(s->second, 0, (size_t)(u->d * s->units * u->width) * sizeof(float));
}

void htp__zero_unit(const htp__shard *s, int64_t unit, const htp__unit_shape *u) {
  const int64_t w = u->width, d = u->d, row_bytes = w * (int64_t)sizeof(float);
  for (int64_t q = 0; q < u->parts; ++q) {
    memset(s->first + (q * s->units + unit) * w * d, 0, (size_t)(d * row_bytes));
    if (s->bias) memset(s->bias + q * s->units * w + unit * w, 0, (size_t)row_bytes);
  }
  for (int64_t o = 0; o < d; ++o) memset(s->second + o * s->units * w + unit * w, 0, (size_t)row_bytes);
}

int htp__reserve_floats(float **buffer, size_t *capacity, size_t floats) {
  if (floats <= *capacity) return 0;
  float *grown = realloc(*buffer, floats * sizeof(float));
  if (!grown) return -1;
  *buffer = grown;
  *capacity = floats;
  return 0;
}
