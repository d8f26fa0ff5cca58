/*===- tools/htp-run/shard.c - Cut a rank's slice out of a global tensor ---===*
 *
 * This file implements shard.h. A slice of dim `dim` is, for each index of
 * the dims before it, one contiguous run of L * inner elements (inner = the
 * product of the dims after it), so the copy is a loop of memcpy's. The qkv
 * layout is three such slices, one per block of rows. Only the element size
 * matters (f32 or bf16 alike): everything is counted in elements and copied
 * in bytes.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/shard.h"

#include "tools/htp-run/errors.h"

#include <string.h>

/* Copies `count` runs of `run` elements, taken every `stride` elements from
 * src (starting at src), to dst back to back. */
static void copy_runs(const unsigned char *src, unsigned char *dst, size_t element_size,
                      int64_t count, int64_t run, int64_t stride) {
  for (int64_t i = 0; i < count; i++)
    memcpy(dst + (size_t)(i * run) * element_size, src + (size_t)(i * stride) * element_size,
           (size_t)run * element_size);
}

int htp_shard_slice(const void *global_data, void *local_data, size_t element_size, int rank,
                    const int64_t *local_dims, int dim, int parts, int part,
                    htp_shard_layout layout, char *err, size_t err_size) {
  const unsigned char *global = global_data;
  unsigned char *local = local_data;
  if (element_size != 2 && element_size != 4)
    return htp_set_error(err, err_size, "shard: elements of %zu bytes (2 or 4)", element_size);
  if (rank < 0 || rank > HTP_ENTRY_MAX_RANK)
    return htp_set_error(err, err_size, "shard: rank %d out of [0, %d]", rank, HTP_ENTRY_MAX_RANK);
  int64_t count = 1;
  for (int d = 0; d < rank; d++)
    count *= local_dims[d];
  if (layout == HTP_SHARD_NONE) {
    memcpy(local, global, (size_t)count * element_size);
    return 0;
  }
  if (layout != HTP_SHARD_BLOCKS && layout != HTP_SHARD_QKV)
    return htp_set_error(err, err_size, "shard: unknown layout %d", (int)layout);
  if (dim < 0 || dim >= rank)
    return htp_set_error(err, err_size, "shard: dim %d of a rank-%d tensor", dim, rank);
  if (parts < 1 || part < 0 || part >= parts)
    return htp_set_error(err, err_size, "shard: part %d of %d", part, parts);

  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++)
    outer *= local_dims[d];
  for (int d = dim + 1; d < rank; d++)
    inner *= local_dims[d];
  int64_t length = local_dims[dim]; /* the slice's extent along dim */

  if (layout == HTP_SHARD_BLOCKS) {
    /* For each outer index, global holds parts * length rows of inner elements. */
    copy_runs(global + (size_t)((int64_t)part * length * inner) * element_size, local,
              element_size, outer, length * inner, (int64_t)parts * length * inner);
    return 0;
  }
  if (dim != 0 || length % 3 != 0)
    return htp_set_error(err, err_size, "shard: a qkv slice must be of dim 0 with a multiple of "
                         "3 rows (dim %d, %lld rows)", dim, (long long)length);
  /* Global rows: [q | k | v], each block parts * (length / 3) rows. */
  int64_t per_block = length / 3, block_rows = per_block * parts;
  for (int block = 0; block < 3; block++)
    memcpy(local + (size_t)(block * per_block * inner) * element_size,
           global + (size_t)((block * block_rows + (int64_t)part * per_block) * inner) * element_size,
           (size_t)(per_block * inner) * element_size);
  return 0;
}
