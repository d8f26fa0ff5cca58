/*===- tools/htp-run/slice.c - Cut a rank's slice out of a global tensor ---===*
 *
 * This file implements slice.h. A slice of dim `dim` is, for each index of
 * the dims before it, one contiguous run of L * inner elements (inner = the
 * product of the dims after it), so the copy is a loop of memcpy's. The qkv
 * layout is three such slices, one per block of rows. An uneven part copies
 * the rows it owns and zeroes the rest of its L (the slots of smaller
 * shares and any spare room alike). Only the element size
 * matters (f32 or bf16 alike): everything is counted in elements and copied
 * in bytes.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/slice.h"

#include "tools/htp-run/errors.h"

#include <string.h>

/* Copies n bytes between a local and a global address: to the local one
 * (slice), or back (place). */
static void move(int place, unsigned char *local, unsigned char *global, size_t n) {
  if (place)
    memcpy(global, local, n);
  else
    memcpy(local, global, n);
}

/* Where part `part` sits along the cut dim, in rows of one block (qkv: of
 * each of the three): the global block's rows, the local block's, the
 * first global row the part owns and how many it owns (the rest of its
 * local rows are empty slots). Even: owned = local = rows / parts. */
typedef struct part_rows {
  int64_t global, local, first, owned;
} part_rows;

static int rows_of_part(int64_t local_rows, int parts, int part, const int32_t *units,
                        int64_t unit, part_rows *rows, char *err, size_t err_size) {
  if (!units) {
    *rows = (part_rows){local_rows * parts, local_rows, local_rows * part, local_rows};
    return 0;
  }
  int64_t before = 0, total = 0, most = 0;
  for (int p = 0; p < parts; p++) {
    if (units[p] < 1 || units[p] > HTP_ENTRY_MAX_SHARD_UNITS)
      return htp_set_error(err, err_size, "shard: part %d owns %lld units", p,
                           (long long)units[p]);
    if (p < part)
      before += units[p];
    total += units[p];
    most = units[p] > most ? units[p] : most;
  }
  /* The room: whole units, from the most a part owns (spare room above it)
   * to a shard's bound; most * unit stays far from overflow (2^20 x 2^31). */
  if (unit < 1 || unit > HTP_ENTRY_MAX_DIM || local_rows < most * unit || local_rows % unit != 0 ||
      local_rows / unit > HTP_ENTRY_MAX_SHARD_UNITS)
    return htp_set_error(err, err_size, "shard: an uneven slice of %lld rows is not room for "
                         "whole units of %lld, from the most units of a part (%lld) to %lld",
                         (long long)local_rows, (long long)unit, (long long)most,
                         (long long)HTP_ENTRY_MAX_SHARD_UNITS);
  *rows = (part_rows){total * unit, local_rows, before * unit, units[part] * unit};
  return 0;
}

/* A sharded tensor's shape around its cut dim: `blocks` runs (one per
 * outer index; qkv: q, k, v) of whole rows of `inner` elements, `local_rows`
 * rows of each on this part. Checks the arguments both copies share. */
typedef struct cut_shape {
  int64_t blocks, local_rows;
  size_t row_bytes;
} cut_shape;

static int cut_shape_of(size_t element_size, int rank, const int64_t *local_dims, int dim,
                        htp_shard_layout layout, cut_shape *cut, char *err, size_t err_size) {
  if (layout != HTP_SHARD_BLOCKS && layout != HTP_SHARD_QKV)
    return htp_set_error(err, err_size, "shard: unknown layout %d", (int)layout);
  if (dim < 0 || dim >= rank)
    return htp_set_error(err, err_size, "shard: dim %d of a rank-%d tensor", dim, rank);
  if (layout == HTP_SHARD_QKV && (dim != 0 || local_dims[0] % 3 != 0))
    return htp_set_error(err, err_size, "shard: a qkv slice must be of dim 0 with a multiple of "
                         "3 rows (dim %d, %lld rows)", dim, (long long)local_dims[dim]);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++)
    outer *= local_dims[d];
  for (int d = dim + 1; d < rank; d++)
    inner *= local_dims[d];
  /* Blocks: one block of local_dims[dim] rows per outer index; qkv: three
   * blocks (q, k, v) of local_dims[0] / 3 rows, outer = 1. */
  *cut = (cut_shape){layout == HTP_SHARD_QKV ? 3 : outer,
                     local_dims[dim] / (layout == HTP_SHARD_QKV ? 3 : 1),
                     (size_t)inner * element_size};
  return 0;
}

static int check_element(size_t element_size, int rank, char *err, size_t err_size) {
  if (element_size != 2 && element_size != 4)
    return htp_set_error(err, err_size, "shard: elements of %zu bytes (2 or 4)", element_size);
  if (rank < 0 || rank > HTP_ENTRY_MAX_RANK)
    return htp_set_error(err, err_size, "shard: rank %d out of [0, %d]", rank, HTP_ENTRY_MAX_RANK);
  return 0;
}

/* Slice (place 0: global -> local) or place (1: local -> global). */
static int shard_copy(int place, unsigned char *global, unsigned char *local,
                      size_t element_size, int rank, const int64_t *local_dims, int dim,
                      int parts, int part, htp_shard_layout layout, const int32_t *units,
                      int64_t unit, char *err, size_t err_size) {
  if (check_element(element_size, rank, err, err_size))
    return 1;
  int64_t count = 1;
  for (int d = 0; d < rank; d++)
    count *= local_dims[d];
  if (layout == HTP_SHARD_NONE) {
    move(place, local, global, (size_t)count * element_size);
    return 0;
  }
  cut_shape cut;
  if (cut_shape_of(element_size, rank, local_dims, dim, layout, &cut, err, err_size))
    return 1;
  if (parts < 1 || part < 0 || part >= parts)
    return htp_set_error(err, err_size, "shard: part %d of %d", part, parts);
  part_rows rows = {0};
  if (rows_of_part(cut.local_rows, parts, part, units, unit, &rows, err, err_size))
    return 1;
  for (int64_t b = 0; b < cut.blocks; b++) {
    unsigned char *to = local + (size_t)(b * rows.local) * cut.row_bytes;
    unsigned char *from = global + (size_t)(b * rows.global + rows.first) * cut.row_bytes;
    move(place, to, from, (size_t)rows.owned * cut.row_bytes);
    if (!place && rows.owned < rows.local) /* empty slots: zeros, which contribute nothing */
      memset(to + (size_t)rows.owned * cut.row_bytes, 0,
             (size_t)(rows.local - rows.owned) * cut.row_bytes);
  }
  return 0;
}

int htp_shard_place_slots(const void *local, void *global, size_t element_size, int rank,
                          const int64_t *local_dims, int dim, htp_shard_layout layout,
                          const int32_t *slot_units, int64_t unit, int64_t global_units,
                          char *err, size_t err_size) {
  if (check_element(element_size, rank, err, err_size))
    return 1;
  cut_shape cut;
  if (layout == HTP_SHARD_NONE)
    return htp_set_error(err, err_size, "shard: a slot map for a tensor that is not sharded");
  if (cut_shape_of(element_size, rank, local_dims, dim, layout, &cut, err, err_size))
    return 1;
  if (unit < 1 || cut.local_rows % unit != 0 || global_units < 1 ||
      global_units > HTP_ENTRY_MAX_DIM / unit)
    return htp_set_error(err, err_size, "shard: %lld rows are not whole units of %lld, or %lld "
                         "global units are out of range", (long long)cut.local_rows,
                         (long long)unit, (long long)global_units);
  const int64_t slots = cut.local_rows / unit, global_rows = global_units * unit;
  const size_t unit_bytes = (size_t)unit * cut.row_bytes;
  for (int64_t s = 0; s < slots; s++)
    if (slot_units[s] >= global_units)
      return htp_set_error(err, err_size, "shard: slot %lld holds unit %d of %lld",
                           (long long)s, slot_units[s], (long long)global_units);
  const unsigned char *from = local;
  unsigned char *to = global;
  for (int64_t b = 0; b < cut.blocks; b++)
    for (int64_t s = 0; s < slots; s++)
      if (slot_units[s] >= 0) /* an empty slot has nothing to place */
        memcpy(to + (size_t)(b * global_rows + slot_units[s] * unit) * cut.row_bytes,
               from + (size_t)(b * cut.local_rows + s * unit) * cut.row_bytes, unit_bytes);
  return 0;
}

int htp_shard_slice(const void *global, void *local, size_t element_size, int rank,
                    const int64_t *local_dims, int dim, int parts, int part,
                    htp_shard_layout layout, const int32_t *units, int64_t unit, char *err,
                    size_t err_size) {
  /* Slicing only reads global: the cast is for the shared copier. */
  return shard_copy(0, (unsigned char *)(uintptr_t)global, local, element_size, rank,
                    local_dims, dim, parts, part, layout, units, unit, err, err_size);
}

int htp_shard_place(const void *local, void *global, size_t element_size, int rank,
                    const int64_t *local_dims, int dim, int parts, int part,
                    htp_shard_layout layout, const int32_t *units, int64_t unit, char *err,
                    size_t err_size) {
  return shard_copy(1, global, (unsigned char *)(uintptr_t)local, element_size, rank,
                    local_dims, dim, parts, part, layout, units, unit, err, err_size);
}
