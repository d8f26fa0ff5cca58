/*===- tools/htp-run/slice.c - Cut a rank's slice out of a global tensor ---===*
 *
 * This file implements slice.h. A slice of dim `dim` is, for each index of
 * the dims before it, one contiguous run of L * inner elements (inner = the
 * product of the dims after it), so the copy is a loop of memcpy's. The qkv
 * layout is three such slices, one per block of rows. Only the element size
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

/* Slice (place 0: global -> local) or place (1: local -> global). */
static int shard_copy(int place, unsigned char *global, unsigned char *local,
                      size_t element_size, int rank, const int64_t *local_dims, int dim,
                      int parts, int part, htp_shard_layout layout, char *err,
                      size_t err_size) {
  if (element_size != 2 && element_size != 4)
    return htp_set_error(err, err_size, "shard: elements of %zu bytes (2 or 4)", element_size);
  if (rank < 0 || rank > HTP_ENTRY_MAX_RANK)
    return htp_set_error(err, err_size, "shard: rank %d out of [0, %d]", rank, HTP_ENTRY_MAX_RANK);
  int64_t count = 1;
  for (int d = 0; d < rank; d++)
    count *= local_dims[d];
  if (layout == HTP_SHARD_NONE) {
    move(place, local, global, (size_t)count * element_size);
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
    const int64_t run = length * inner, stride = (int64_t)parts * length * inner;
    unsigned char *first = global + (size_t)((int64_t)part * run) * element_size;
    for (int64_t i = 0; i < outer; i++)
      move(place, local + (size_t)(i * run) * element_size,
           first + (size_t)(i * stride) * element_size, (size_t)run * element_size);
    return 0;
  }
  if (dim != 0 || length % 3 != 0)
    return htp_set_error(err, err_size, "shard: a qkv slice must be of dim 0 with a multiple of "
                         "3 rows (dim %d, %lld rows)", dim, (long long)length);
  /* Global rows: [q | k | v], each block parts * (length / 3) rows. */
  int64_t per_block = length / 3, block_rows = per_block * parts;
  for (int block = 0; block < 3; block++)
    move(place, local + (size_t)(block * per_block * inner) * element_size,
         global + (size_t)((block * block_rows + (int64_t)part * per_block) * inner) * element_size,
         (size_t)(per_block * inner) * element_size);
  return 0;
}

int htp_shard_slice(const void *global, void *local, size_t element_size, int rank,
                    const int64_t *local_dims, int dim, int parts, int part,
                    htp_shard_layout layout, char *err, size_t err_size) {
  /* Slicing only reads global: the cast is for the shared copier. */
  return shard_copy(0, (unsigned char *)(uintptr_t)global, local, element_size, rank,
                    local_dims, dim, parts, part, layout, err, err_size);
}

int htp_shard_place(const void *local, void *global, size_t element_size, int rank,
                    const int64_t *local_dims, int dim, int parts, int part,
                    htp_shard_layout layout, char *err, size_t err_size) {
  return shard_copy(1, global, (unsigned char *)(uintptr_t)local, element_size, rank,
                    local_dims, dim, parts, part, layout, err, err_size);
}
