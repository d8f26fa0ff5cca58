/*===- test/executor/test_slice.c - Slicing global tensors for ranks -------===*
 *
 * htp_shard_slice against a naive element-by-element reference for every
 * layout, rank and part, with 4-byte (f32) and 2-byte (bf16) elements; the
 * parts of a tensor together hold every global element exactly once; bad
 * requests are refused with a message. Also
 * htp_format_shape, how htp-run prints the shapes.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/shape.h"
#include "tools/htp-run/slice.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Global element index of local element `flat` (row-major), by definition
 * of the layouts in runtime/htp_entry.h. */
static int64_t reference_index(int rank, const int64_t *local_dims, int dim, int parts, int part,
                               htp_shard_layout layout, int64_t flat) {
  int64_t index[HTP_ENTRY_MAX_RANK], global_dims[HTP_ENTRY_MAX_RANK];
  for (int d = rank - 1; d >= 0; d--) {
    index[d] = flat % local_dims[d];
    flat /= local_dims[d];
    global_dims[d] = local_dims[d];
  }
  if (layout != HTP_SHARD_NONE)
    global_dims[dim] *= parts;
  if (layout == HTP_SHARD_BLOCKS) {
    index[dim] += part * local_dims[dim];
  } else if (layout == HTP_SHARD_QKV) {
    int64_t per_block = local_dims[0] / 3;
    int64_t block = index[0] / per_block, row = index[0] % per_block;
    index[0] = block * per_block * parts + part * per_block + row;
  }
  int64_t global = 0;
  for (int d = 0; d < rank; d++)
    global = global * global_dims[d] + index[d];
  return global;
}

/* Element i of a buffer of element_size-byte elements, as an integer: the
 * tests store each element's global index in it (uint32 or uint16, so the
 * check never depends on float values). */
static int64_t element_at(const unsigned char *data, size_t element_size, int64_t i) {
  if (element_size == 4) {
    uint32_t value;
    memcpy(&value, data + 4 * i, 4);
    return value;
  }
  uint16_t value;
  memcpy(&value, data + 2 * i, 2);
  return value;
}

static void set_element(unsigned char *data, size_t element_size, int64_t i, int64_t value) {
  if (element_size == 4) {
    uint32_t word = (uint32_t)value;
    memcpy(data + 4 * i, &word, 4);
  } else {
    uint16_t half = (uint16_t)value;
    memcpy(data + 2 * i, &half, 2);
  }
}

/* Slices every part of a global tensor whose elements hold their own index
 * and checks each element and that the parts cover the tensor once; both
 * element sizes (the tests stay below 2^16 elements). */
static void check_layout_sized(size_t element_size, int rank, const int64_t *local_dims, int dim,
                               int parts, htp_shard_layout layout) {
  int64_t local_count = 1;
  for (int d = 0; d < rank; d++)
    local_count *= local_dims[d];
  int64_t global_count = local_count * (layout == HTP_SHARD_NONE ? 1 : parts);
  assert_true(global_count < 65536);
  unsigned char *global = malloc((size_t)global_count * element_size);
  /* Exactly the slice's bytes, so ASan sees a write past it. */
  unsigned char *local = malloc((size_t)(local_count ? local_count : 1) * element_size);
  int *seen = calloc((size_t)global_count + 1, sizeof *seen);
  assert_non_null(global);
  assert_non_null(local);
  assert_non_null(seen);
  for (int64_t i = 0; i < global_count; i++)
    set_element(global, element_size, i, i);
  int count_parts = layout == HTP_SHARD_NONE ? 1 : parts;
  for (int part = 0; part < count_parts; part++) {
    char err[256] = "";
    memset(local, 0xff, (size_t)local_count * element_size);
    assert_int_equal(htp_shard_slice(global, local, element_size, rank, local_dims, dim, parts,
                                     part, layout, NULL, 0, err, sizeof err), 0);
    for (int64_t i = 0; i < local_count; i++) {
      int64_t expected = reference_index(rank, local_dims, dim, parts, part, layout, i);
      int64_t got = element_at(local, element_size, i);
      if (got != expected)
        fail_msg("%zu-byte elements, layout %d rank %d dim %d part %d/%d: local[%lld] = %lld, "
                 "expected global[%lld]", element_size, (int)layout, rank, dim, part, parts,
                 (long long)i, (long long)got, (long long)expected);
      seen[expected]++;
    }
  }
  for (int64_t i = 0; i < global_count; i++)
    if (seen[i] != 1)
      fail_msg("global element %lld taken %d times", (long long)i, seen[i]);
  free(global);
  free(local);
  free(seen);
}

static void check_layout(int rank, const int64_t *local_dims, int dim, int parts,
                         htp_shard_layout layout) {
  check_layout_sized(4, rank, local_dims, dim, parts, layout);
  check_layout_sized(2, rank, local_dims, dim, parts, layout);
}

/* 1. Column-parallel weight (fc1: [out, in] split on out). */
static void test_blocks_rows(void **state) {
  (void)state;
  for (int parts = 1; parts <= 4; parts++) {
    int64_t dims[2] = {5, 7};
    check_layout(2, dims, 0, parts, HTP_SHARD_BLOCKS);
  }
}

/* 2. Row-parallel weight (proj, fc2: [out, in] split on in). */
static void test_blocks_columns(void **state) {
  (void)state;
  for (int parts = 1; parts <= 4; parts++) {
    int64_t dims[2] = {6, 5};
    check_layout(2, dims, 1, parts, HTP_SHARD_BLOCKS);
  }
}

/* 3. Biases (rank 1) and a middle dim of a rank-3 tensor. */
static void test_blocks_other_ranks(void **state) {
  (void)state;
  int64_t bias[1] = {10};
  check_layout(1, bias, 0, 3, HTP_SHARD_BLOCKS);
  int64_t cube[3] = {2, 3, 4};
  check_layout(3, cube, 1, 3, HTP_SHARD_BLOCKS);
  check_layout(3, cube, 2, 2, HTP_SHARD_BLOCKS);
  check_layout(3, cube, 0, 4, HTP_SHARD_BLOCKS);
}

/* 4. The fused qkv weight and bias: slice r of each of q, k and v. */
static void test_qkv(void **state) {
  (void)state;
  for (int parts = 1; parts <= 4; parts++) {
    int64_t weight[2] = {3 * 2, 5}; /* 2 rows of each of q, k, v per rank */
    check_layout(2, weight, 0, parts, HTP_SHARD_QKV);
    int64_t bias[1] = {3 * 3};
    check_layout(1, bias, 0, parts, HTP_SHARD_QKV);
  }
}

/* 5. A concrete qkv case written out: 2 ranks, heads of 1 row. */
static void test_qkv_explicit(void **state) {
  (void)state;
  /* global rows: q0 q1 k0 k1 v0 v1 (values 0..5); rank 1 takes q1 k1 v1. */
  const float global[6] = {0, 1, 2, 3, 4, 5};
  float local[3] = {-1, -1, -1};
  int64_t dims[1] = {3};
  char err[128];
  assert_int_equal(htp_shard_slice(global, local, sizeof(float), 1, dims, 0, 2, 1,
                                   HTP_SHARD_QKV, NULL, 0, err, sizeof err), 0);
  assert_true(local[0] == 1 && local[1] == 3 && local[2] == 5);
  /* The same in bf16 bit patterns (1.0 .. 5.0 are exact: 0x3f80 ...). */
  const uint16_t global_bf16[6] = {0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0};
  uint16_t local_bf16[3] = {0xffff, 0xffff, 0xffff};
  assert_int_equal(htp_shard_slice(global_bf16, local_bf16, 2, 1, dims, 0, 2, 1, HTP_SHARD_QKV,
                                   NULL, 0, err, sizeof err), 0);
  assert_true(local_bf16[0] == 0x3f80 && local_bf16[1] == 0x4040 && local_bf16[2] == 0x40a0);
}

/* 6. Not sharded: a copy. */
static void test_none(void **state) {
  (void)state;
  int64_t dims[2] = {3, 4};
  check_layout(2, dims, 0, 3, HTP_SHARD_NONE);
}

static void expect_refused(int rank, const int64_t *dims, int dim, int parts, int part,
                           htp_shard_layout layout, const char *expected) {
  float global[64] = {0}, local[64];
  char err[256] = "";
  if (htp_shard_slice(global, local, sizeof(float), rank, dims, dim, parts, part, layout, NULL, 0,
                      err,
                      sizeof err) == 0 ||
      !strstr(err, expected))
    fail_msg("expected a refusal containing \"%s\", got \"%s\"", expected, err);
}

/* 7. Bad requests. */
static void test_refused(void **state) {
  (void)state;
  int64_t dims[2] = {3, 4};
  expect_refused(2, dims, 2, 2, 0, HTP_SHARD_BLOCKS, "dim 2 of a rank-2 tensor");
  expect_refused(2, dims, -1, 2, 0, HTP_SHARD_BLOCKS, "dim -1");
  expect_refused(2, dims, 0, 2, 2, HTP_SHARD_BLOCKS, "part 2 of 2");
  expect_refused(2, dims, 0, 0, 0, HTP_SHARD_BLOCKS, "part 0 of 0");
  expect_refused(2, dims, 1, 2, 0, HTP_SHARD_QKV, "qkv slice must be of dim 0");
  int64_t not_three[1] = {4};
  expect_refused(1, not_three, 0, 2, 0, HTP_SHARD_QKV, "4 rows");
  expect_refused(9, dims, 0, 2, 0, HTP_SHARD_BLOCKS, "rank 9");
  expect_refused(2, dims, 0, 2, 0, (htp_shard_layout)7, "unknown layout");
  /* An element size that is neither f32's nor bf16's. */
  float global[16] = {0}, local[16];
  char err[256] = "";
  assert_int_not_equal(htp_shard_slice(global, local, 8, 2, dims, 0, 2, 0, HTP_SHARD_BLOCKS, NULL,
                                       0, err,
                                       sizeof err), 0);
  assert_non_null(strstr(err, "elements of 8 bytes"));
}

static void test_format_shape(void **state) {
  (void)state;
  char out[64];
  const int64_t dims[] = {2, 5, 12};
  htp_format_shape(out, sizeof out, 3, dims);
  assert_string_equal(out, "[2, 5, 12]");
  htp_format_shape(out, sizeof out, 0, dims);
  assert_string_equal(out, "[]");
  htp_format_shape(out, 4, 3, dims); /* truncates, stays terminated */
  assert_string_equal(out, "[2,");
}


/* htp_shard_place undoes htp_shard_slice: every part sliced and placed
 * back into a zeroed tensor rebuilds the original (blocks on each dim,
 * qkv), in f32 and 2-byte elements alike. */
static void test_place_round_trip(void **state) {
  (void)state;
  enum { TP = 3 };
  float global[6 * TP * 4], rebuilt[6 * TP * 4], local[6 * 4];
  for (int i = 0; i < 6 * TP * 4; i++)
    global[i] = (float)i + 0.5f;
  struct {
    int dim;
    htp_shard_layout layout;
    int64_t dims[2];
  } cases[] = {{0, HTP_SHARD_BLOCKS, {6, 4}}, {0, HTP_SHARD_QKV, {6, 4}},
               {1, HTP_SHARD_BLOCKS, {24, 1}}}; /* the last: global [24, 3] by columns */
  for (int c = 0; c < 3; c++) {
    const int64_t *dims = cases[c].dims;
    for (size_t element = 2; element <= 4; element += 2) {
      char err[256];
      memset(rebuilt, 0, sizeof rebuilt);
      for (int part = 0; part < TP; part++) {
        assert_int_equal(htp_shard_slice(global, local, element, 2, dims, cases[c].dim, TP, part,
                                         cases[c].layout, NULL, 0, err, sizeof err), 0);
        assert_int_equal(htp_shard_place(local, rebuilt, element, 2, dims, cases[c].dim, TP,
                                         part, cases[c].layout, NULL, 0, err, sizeof err), 0);
      }
      size_t bytes = (size_t)(dims[0] * dims[1] * TP) * element;
      assert_memory_equal(rebuilt, global, bytes);
    }
  }
  char err[256];
  assert_int_not_equal(htp_shard_place(local, rebuilt, 4, 2, cases[0].dims, 0, TP, TP,
                                       HTP_SHARD_BLOCKS, NULL, 0, err, sizeof err), 0);
}

/* The cuts a split in units takes: rows (qkv: of each of three blocks) or
 * columns. */
static const struct {
  int dim;
  htp_shard_layout layout;
  int blocks;
} UNIT_CASES[] = {{0, HTP_SHARD_BLOCKS, 1}, {0, HTP_SHARD_QKV, 3}, {1, HTP_SHARD_BLOCKS, 1}};

/* Uneven shards against a naive reference: units 3, 1, 2 of 2 rows (qkv:
 * per block; blocks: rows of dim 0, then columns of dim 1), every part with
 * room for `room` units (3, the most; more is spare room). Part p's local
 * rows are its own units' global rows, then zeros up to the room; placing
 * every part back rebuilds the global tensor, whatever its empty slots hold
 * (place skips them: they are filled with garbage first). */
static void check_uneven(int room) {
  enum { TP = 3, UNIT = 2, MAX_ROOM = 5, TOTAL = 6, INNER = 4 };
  assert_true(room >= 3 && room <= MAX_ROOM);
  const int32_t units[TP] = {3, 1, 2};
  const int64_t first[TP] = {0, 3, 4};
  for (int c = 0; c < 3; c++) {
    const int blocks = UNIT_CASES[c].blocks, by_columns = UNIT_CASES[c].dim == 1;
    /* Global: blocks x TOTAL units x UNIT rows x INNER (by columns: INNER
     * rows of TOTAL x UNIT columns). */
    const int64_t global_rows = (int64_t)blocks * TOTAL * UNIT, local_rows = blocks * room * UNIT;
    float global[3 * TOTAL * UNIT * INNER], local[3 * MAX_ROOM * UNIT * INNER],
        rebuilt[3 * TOTAL * UNIT * INNER];
    for (int i = 0; i < global_rows * INNER; i++)
      global[i] = (float)i + 1.0f;
    const int64_t dims[2] = {by_columns ? INNER : local_rows, by_columns ? local_rows : INNER};
    memset(rebuilt, 0, sizeof rebuilt);
    for (int part = 0; part < TP; part++) {
      char err[256];
      for (size_t i = 0; i < sizeof local / sizeof *local; i++)
        local[i] = -7.0f; /* what slice must overwrite, empty slots too */
      assert_int_equal(htp_shard_slice(global, local, 4, 2, dims, UNIT_CASES[c].dim, TP, part,
                                       UNIT_CASES[c].layout, units, UNIT, err, sizeof err), 0);
      for (int b = 0; b < blocks; b++)
        for (int row = 0; row < room * UNIT; row++)
          for (int k = 0; k < INNER; k++) {
            const int64_t local_row = (int64_t)b * room * UNIT + row;
            const int64_t global_row = (int64_t)b * TOTAL * UNIT + first[part] * UNIT + row;
            float *at = by_columns ? &local[k * local_rows + local_row]
                                   : &local[local_row * INNER + k];
            const float want = row >= units[part] * UNIT ? 0.0f
                               : by_columns             ? global[k * global_rows + global_row]
                                                        : global[global_row * INNER + k];
            if (*at != want)
              fail_msg("room %d case %d part %d block %d row %d col %d: %g, want %g", room, c,
                       part, b, row, k, *at, want);
            if (row >= units[part] * UNIT)
              *at = 99.0f; /* an empty slot: place must not copy it anywhere */
          }
      assert_int_equal(htp_shard_place(local, rebuilt, 4, 2, dims, UNIT_CASES[c].dim, TP, part,
                                       UNIT_CASES[c].layout, units, UNIT, err, sizeof err), 0);
    }
    assert_memory_equal(rebuilt, global, (size_t)global_rows * INNER * sizeof(float));
  }
}

static void test_uneven(void **state) {
  (void)state;
  check_uneven(3);
}

/* Spare room: 1 and 2 units beyond the most any part owns. */
static void test_uneven_spare(void **state) {
  (void)state;
  check_uneven(4);
  check_uneven(5);
}

/* Bad units and rooms are refused: a part that owns none, a room below the
 * most any part owns (3 units of 2 rows), one that is not whole units, one
 * of more units than a shard holds. */
static void test_uneven_refused(void **state) {
  (void)state;
  enum { TP = 3, UNIT = 2, MOST = 3, TOTAL = 6, INNER = 4 };
  const int32_t units[TP] = {3, 1, 2};
  char err[256];
  float global[TOTAL * UNIT * INNER] = {0}, local[MOST * UNIT * INNER];
  const int64_t dims[2] = {MOST * UNIT, INNER};
  const int32_t zero[TP] = {3, 0, 2};
  assert_int_not_equal(htp_shard_slice(global, local, 4, 2, dims, 0, TP, 1, HTP_SHARD_BLOCKS,
                                       zero, UNIT, err, sizeof err), 0);
  assert_non_null(strstr(err, "part 1 owns 0 units"));
  const int64_t small_room[2] = {2 * UNIT, INNER}, partial_room[2] = {7, INNER},
                huge_room[2] = {(HTP_ENTRY_MAX_SHARD_UNITS + 1) * UNIT, INNER};
  const int64_t *rooms[3] = {small_room, partial_room, huge_room};
  const char *const says[3] = {"slice of 4 rows", "slice of 7 rows", "slice of 2097154 rows"};
  for (int k = 0; k < 3; k++) {
    /* Refused before anything is copied (local is too small for the last). */
    assert_int_not_equal(htp_shard_slice(global, local, 4, 2, rooms[k], 0, TP, 1,
                                         HTP_SHARD_BLOCKS, units, UNIT, err, sizeof err), 0);
    assert_non_null(strstr(err, "is not room for whole units of 2, from the most units of a "
                                "part (3) to 1048576"));
    assert_non_null(strstr(err, says[k]));
    assert_int_not_equal(htp_shard_place(local, global, 4, 2, rooms[k], 0, TP, 1,
                                         HTP_SHARD_BLOCKS, units, UNIT, err, sizeof err), 0);
  }
}

/* A re-partitioned split (DESIGN §12): slots in any order, some empty.
 * Every part's slice is built element by element from the map; placing
 * them all with htp_shard_place_slots rebuilds the global tensor, empty
 * slots touch nothing, bad maps are refused. */
static void test_place_slots(void **state) {
  (void)state;
  enum { TP = 3, UNIT = 2, ROOM = 3, TOTAL = 6, INNER = 4 };
  const int32_t slots[TP][ROOM] = {{4, 0, -1}, {1, 5, 2}, {3, -1, -1}};
  for (int c = 0; c < 3; c++) {
    const int blocks = UNIT_CASES[c].blocks, by_columns = UNIT_CASES[c].dim == 1;
    const int64_t global_rows = (int64_t)blocks * TOTAL * UNIT, local_rows = blocks * ROOM * UNIT;
    float global[3 * TOTAL * UNIT * INNER], local[3 * ROOM * UNIT * INNER],
        rebuilt[3 * TOTAL * UNIT * INNER];
    for (int i = 0; i < global_rows * INNER; i++)
      global[i] = (float)i + 1.0f;
    const int64_t dims[2] = {by_columns ? INNER : local_rows, by_columns ? local_rows : INNER};
    memset(rebuilt, 0, sizeof rebuilt);
    for (int part = 0; part < TP; part++) {
      for (int b = 0; b < blocks; b++)
        for (int row = 0; row < ROOM * UNIT; row++)
          for (int k = 0; k < INNER; k++) {
            const int32_t unit = slots[part][row / UNIT];
            const int64_t local_row = (int64_t)b * ROOM * UNIT + row;
            const int64_t global_row = (int64_t)b * TOTAL * UNIT + unit * UNIT + row % UNIT;
            float *got = by_columns ? &local[k * local_rows + local_row]
                                    : &local[local_row * INNER + k];
            *got = unit < 0 ? -7.0f /* never placed */
                   : by_columns ? global[k * global_rows + global_row]
                                : global[global_row * INNER + k];
          }
      char err[256];
      assert_int_equal(htp_shard_place_slots(local, rebuilt, 4, 2, dims, UNIT_CASES[c].dim,
                                             UNIT_CASES[c].layout, slots[part], UNIT, TOTAL, err,
                                             sizeof err),
                       0);
    }
    assert_memory_equal(rebuilt, global, (size_t)global_rows * INNER * sizeof(float));
  }
  char err[256];
  float global[TOTAL * UNIT * INNER] = {0}, local[ROOM * UNIT * INNER] = {0};
  const int64_t dims[2] = {ROOM * UNIT, INNER}, odd[2] = {ROOM * UNIT + 1, INNER};
  const int32_t beyond[ROOM] = {0, 6, -1};
  assert_int_not_equal(htp_shard_place_slots(local, global, 4, 2, dims, 0, HTP_SHARD_BLOCKS,
                                             beyond, UNIT, TOTAL, err, sizeof err),
                       0);
  assert_non_null(strstr(err, "slot 1 holds unit 6 of 6"));
  assert_int_not_equal(htp_shard_place_slots(local, global, 4, 2, odd, 0, HTP_SHARD_BLOCKS,
                                             slots[0], UNIT, TOTAL, err, sizeof err),
                       0);
  assert_non_null(strstr(err, "not whole units"));
  assert_int_not_equal(htp_shard_place_slots(local, global, 4, 2, dims, 0, HTP_SHARD_NONE,
                                             slots[0], UNIT, TOTAL, err, sizeof err),
                       0);
  assert_non_null(strstr(err, "not sharded"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uneven),        cmocka_unit_test(test_uneven_spare),
      cmocka_unit_test(test_uneven_refused), cmocka_unit_test(test_place_slots),
      cmocka_unit_test(test_blocks_rows),   cmocka_unit_test(test_blocks_columns),
      cmocka_unit_test(test_blocks_other_ranks), cmocka_unit_test(test_qkv),
      cmocka_unit_test(test_qkv_explicit),  cmocka_unit_test(test_none),
      cmocka_unit_test(test_refused),       cmocka_unit_test(test_format_shape),
      cmocka_unit_test(test_place_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
