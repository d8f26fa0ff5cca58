/*===- tools/htp-run/slice.h - Cut a rank's slice out of a global tensor ---===*
 *
 * A tensor-parallel block (entry.h, "shard" records) takes on rank r a slice
 * of each split parameter; htp-run holds the parameters at their global
 * shapes (what a timm checkpoint has) and gives each rank its slice. This is
 * the one place that knows the layouts; pure C, no allocation.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_SHARD_H
#define HTP_RUN_SHARD_H

#include "tools/htp-run/shape.h"

#include <stddef.h>
#include <stdint.h>

/* Copies part `part` of `parts` of the row-major tensor `global` into
 * `local`, both of elements of element_size bytes (4 for f32, 2 for bf16:
 * the layouts count elements, never look at their values). local_dims
 * (rank entries) is the slice's shape; the global shape
 * is local_dims with local_dims[dim] * parts.
 *   HTP_SHARD_BLOCKS: local = global[..., part * L : (part + 1) * L, ...] on
 *                     dim `dim` (L = local_dims[dim]);
 *   HTP_SHARD_QKV:    dim must be 0 and L = local_dims[0] a multiple of 3;
 *                     global dim 0 is three blocks q | k | v of parts * L / 3
 *                     rows each, and local is slice `part` (L / 3 rows) of each
 *                     block, in order q, k, v;
 *   HTP_SHARD_NONE:   local is a copy of global (parts is ignored).
 * An uneven shard (units: `parts` counts, unit >= 1; NULL and 0 for an even
 * one): along dim (in each qkv block) the global tensor is sum(units) units
 * of `unit` rows or columns and L = room * unit, the room the same whole
 * number of units on every part, from max(units) (shares alone) up to
 * HTP_ENTRY_MAX_SHARD_UNITS (spare room, htp-opt's spare); part p's first
 * units[p] * unit come from global unit units[0] + ... + units[p-1] on, and
 * the rest of its L (room - units[p] units) are empty slots: zeroed by
 * slice, skipped by place (global holds no rows for them).
 * Returns 0, or non-zero with a message in err for a bad request (an
 * element size other than 2 or 4, rank out of [0, HTP_ENTRY_MAX_RANK], dim out of range, part not in [0, parts),
 * a qkv slice that is not of dim 0 or not three equal blocks, an uneven L
 * that is not room * unit for a room from max(units) to
 * HTP_ENTRY_MAX_SHARD_UNITS). */
int htp_shard_slice(const void *global, void *local, size_t element_size, int rank,
                    const int64_t *local_dims, int dim, int parts, int part,
                    htp_shard_layout layout, const int32_t *units, int64_t unit, char *err,
                    size_t err_size);

/* The inverse: copies `local`, part `part` of `parts`, into its place in
 * `global` (same arguments and checks as htp_shard_slice; NONE copies the
 * whole tensor). Gathering every part rebuilds the global tensor. */
int htp_shard_place(const void *local, void *global, size_t element_size, int rank,
                    const int64_t *local_dims, int dim, int parts, int part,
                    htp_shard_layout layout, const int32_t *units, int64_t unit, char *err,
                    size_t err_size);

/* Places a re-partitioned slice (runtime ownership, DESIGN §12: the
 * balancer's htp_balancer_slot_units) into `global`: along dim (in each qkv
 * block) local slot s, `unit` rows or columns, holds global unit
 * slot_units[s] of the global tensor's global_units, or is empty (-1:
 * skipped). The slots are local_dims[dim] / unit (/ 3 for qkv) and the
 * global tensor has global_units * unit there. Returns 0, or non-zero with
 * a message in err (as htp_shard_place; also a dim that is not whole
 * units, a unit id out of range). */
int htp_shard_place_slots(const void *local, void *global, size_t element_size, int rank,
                          const int64_t *local_dims, int dim, htp_shard_layout layout,
                          const int32_t *slot_units, int64_t unit, int64_t global_units,
                          char *err, size_t err_size);

#endif /* HTP_RUN_SHARD_H */
