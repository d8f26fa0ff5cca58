/*===- runtime/unit_shard.c - shards of work units: copy, gather, scatter ------===*
 *
 * The one place that knows the shard layout of balance_internal.h
 * (htp__shard): the forward and backward hooks (balance_hooks.c) build
 * compact shards with it, a helper packs its migrated-in units with it
 * (unit_weights.c), and the migration's one-unit shards are shards of one
 * unit.
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"

#include "kernels/htp_kernel_table.h"

#include <stdlib.h>
#include <string.h>

/* base + elements elements of u's size. */
static void *at(void *base, int64_t elements, const htp__unit_shape *u) {
  return (unsigned char *)base + elements * u->elem;
}

htp__shard htp__shard_at(void *base, int64_t units, const htp__unit_shape *u) {
  htp__shard s = {base, at(base, u->parts * units * u->width * u->d, u), NULL, units};
  s.second = at(s.bias, u->parts * units * u->width, u);
  return s;
}

/* Host memory without a table; else the table's device memory. Pitches
 * and row in elements of u's size. */
static htp_kernel_status copy_2d(const htp__unit_mover *m, void *dst, int64_t dst_pitch,
                                 const void *src, int64_t src_pitch, int64_t row, int64_t rows,
                                 const htp__unit_shape *u) {
  const size_t e = (size_t)u->elem;
  if (m && m->table)
    return m->table->copy_2d(m->env, dst, (size_t)dst_pitch * e, src, (size_t)src_pitch * e,
                             (size_t)row * e, (size_t)rows);
  for (int64_t i = 0; i < rows; ++i)
    memcpy((unsigned char *)dst + (size_t)(i * dst_pitch) * e,
           (const unsigned char *)src + (size_t)(i * src_pitch) * e, (size_t)row * e);
  return HTP_KERNEL_OK;
}

static htp_kernel_status zero(const htp__unit_mover *m, void *dst, int64_t elements,
                              const htp__unit_shape *u) {
  const size_t bytes = (size_t)elements * (size_t)u->elem;
  if (m && m->table) return m->table->zero(m->env, dst, bytes);
  memset(dst, 0, bytes);
  return HTP_KERNEL_OK;
}

/* Units from .. from + count - 1 of src into to .. to + count - 1 of dst:
 * each part's rows are one block, its bias one, and second's columns one
 * block of d rows, so a run of units is three 2-D copies whatever its
 * length. */
htp_kernel_status htp__move_units(const htp__unit_mover *m, const htp__shard *src, int64_t from,
                                  const htp__shard *dst, int64_t to, int64_t count,
                                  const htp__unit_shape *u) {
  const int64_t w = u->width, d = u->d, run = count * w;
  htp_kernel_status s = copy_2d(m, at(dst->first, to * w * d, u), dst->units * w * d,
                                at(src->first, from * w * d, u), src->units * w * d, run * d,
                                u->parts, u);
  if (s == HTP_KERNEL_OK && dst->bias && src->bias)
    s = copy_2d(m, at(dst->bias, to * w, u), dst->units * w, at(src->bias, from * w, u),
                src->units * w, run, u->parts, u);
  for (int64_t q = 0; s == HTP_KERNEL_OK && dst->bias && !src->bias && q < u->parts; ++q)
    s = zero(m, at(dst->bias, (q * dst->units + to) * w, u), run, u);
  if (s == HTP_KERNEL_OK)
    s = copy_2d(m, at(dst->second, to * w, u), dst->units * w, at(src->second, from * w, u),
                src->units * w, run, d, u);
  return s;
}

void htp__copy_unit(const htp__shard *src, int64_t from, const htp__shard *dst, int64_t to,
                    const htp__unit_shape *u) {
  htp__move_units(NULL, src, from, dst, to, 1, u);
}

htp_kernel_status htp__gather_units_on(const htp__unit_mover *m, const htp__shard *src,
                                       const int32_t *list, int64_t count, const htp__shard *dst,
                                       int64_t at, const htp__unit_shape *u) {
  htp_kernel_status s = HTP_KERNEL_OK;
  for (int c = 0, n; s == HTP_KERNEL_OK && c < count; c += n) {
    n = htp_unit_run(list, c, (int)count);
    s = htp__move_units(m, src, list[c], dst, at + c, n, u);
  }
  return s;
}

htp_kernel_status htp__scatter_units_on(const htp__unit_mover *m, const htp__shard *src,
                                        int64_t at, const int32_t *list, int64_t count,
                                        const htp__shard *dst, const htp__unit_shape *u) {
  htp_kernel_status s = HTP_KERNEL_OK;
  for (int c = 0, n; s == HTP_KERNEL_OK && c < count; c += n) {
    n = htp_unit_run(list, c, (int)count);
    s = htp__move_units(m, src, at + c, dst, list[c], n, u);
  }
  return s;
}

void htp__gather_units(const htp__shard *src, const int32_t *list, int64_t count,
                       const htp__shard *dst, int64_t at, const htp__unit_shape *u) {
  htp__gather_units_on(NULL, src, list, count, dst, at, u);
}

void htp__scatter_units(const htp__shard *src, int64_t at, const int32_t *list, int64_t count,
                        const htp__shard *dst, const htp__unit_shape *u) {
  htp__scatter_units_on(NULL, src, at, list, count, dst, u);
}

htp_kernel_status htp__zero_shard_on(const htp__unit_mover *m, const htp__shard *s,
                                     const htp__unit_shape *u) {
  const int64_t rows = u->parts * s->units * u->width;
  htp_kernel_status st = zero(m, s->first, rows * u->d, u);
  if (st == HTP_KERNEL_OK && s->bias) st = zero(m, s->bias, rows, u);
  if (st == HTP_KERNEL_OK) st = zero(m, s->second, u->d * s->units * u->width, u);
  return st;
}

void htp__zero_shard(const htp__shard *s, const htp__unit_shape *u) { htp__zero_shard_on(NULL, s, u); }

void htp__zero_unit(const htp__shard *s, int64_t unit, const htp__unit_shape *u) {
  const int64_t w = u->width, d = u->d, row_bytes = w * u->elem;
  for (int64_t q = 0; q < u->parts; ++q) {
    memset(at(s->first, (q * s->units + unit) * w * d, u), 0, (size_t)(d * row_bytes));
    if (s->bias) memset(at(s->bias, q * s->units * w + unit * w, u), 0, (size_t)row_bytes);
  }
  for (int64_t o = 0; o < d; ++o) memset(at(s->second, o * s->units * w + unit * w, u), 0, (size_t)row_bytes);
}

int htp__reserve_floats(float **buffer, size_t *capacity, size_t floats) {
  if (floats <= *capacity) return 0;
  float *grown = realloc(*buffer, floats * sizeof(float));
  if (!grown) return -1;
  *buffer = grown;
  *capacity = floats;
  return 0;
}
