/*===- test/executor/test_safetensors.c - safetensors reader tests -------===*
 *
 * A valid file round trips (values compared with memcmp, F16/BF16/F64
 * converted); every corrupt case is refused with a message saying why.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/safetensors.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A file image: 8-byte length, header text, then data_size bytes 0, 1, 2, ... */
typedef struct image {
  unsigned char *bytes;
  size_t size;
} image;

static image make_image(const char *header, size_t data_size) {
  size_t length = strlen(header);
  image result = {malloc(8 + length + data_size + 1), 8 + length + data_size};
  for (int i = 0; i < 8; i++)
    result.bytes[i] = (unsigned char)((uint64_t)length >> (8 * i));
  memcpy(result.bytes + 8, header, length);
  for (size_t i = 0; i < data_size; i++)
    result.bytes[8 + length + i] = (unsigned char)i;
  return result;
}

/* Parses an image that must fail with a message containing `expected`. The
 * image is copied to a buffer of exactly its size so ASan sees overreads. */
static void expect_failure(image file, const char *expected) {
  unsigned char *exact = malloc(file.size ? file.size : 1);
  memcpy(exact, file.bytes, file.size);
  htp_safetensors st;
  char err[512] = "";
  int status = htp_safetensors_parse(exact, file.size, &st, err, sizeof err);
  if (status == 0 || strstr(err, expected) == NULL)
    fail_msg("expected failure containing \"%s\", got status %d \"%s\"", expected, status, err);
  assert_int_equal(st.count, 0);
  htp_safetensors_close(&st);
  free(exact);
  free(file.bytes);
}

static void expect_header_failure(const char *header, size_t data_size, const char *expected) {
  expect_failure(make_image(header, data_size), expected);
}

static void test_valid_round_trip(void **state) {
  (void)state;
  float a[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
  float b[2] = {42, -0.25f};
  const char *header = "{\"__metadata__\": {\"format\": \"pt\"}, "
                       "\"b.bias\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [24, 32]}, "
                       "\"a.weight\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}}   ";
  image file = make_image(header, 32);
  memcpy(file.bytes + file.size - 32, a, sizeof a);
  memcpy(file.bytes + file.size - 8, b, sizeof b);
  htp_safetensors st;
  char err[256] = "";
  assert_int_equal(htp_safetensors_parse(file.bytes, file.size, &st, err, sizeof err), 0);
  assert_int_equal(st.count, 2);
  const htp_st_tensor *weight = htp_safetensors_find(&st, "a.weight");
  assert_non_null(weight);
  assert_int_equal(weight->rank, 2);
  assert_int_equal(weight->dims[0], 2);
  assert_int_equal(weight->dims[1], 3);
  assert_string_equal(weight->dtype, "F32");
  float out[6];
  assert_int_equal(htp_safetensors_read_f32(&st, weight, out, err, sizeof err), 0);
  assert_memory_equal(out, a, sizeof a);
  const htp_st_tensor *bias = htp_safetensors_find(&st, "b.bias");
  assert_non_null(bias);
  assert_int_equal(htp_safetensors_read_f32(&st, bias, out, err, sizeof err), 0);
  assert_memory_equal(out, b, sizeof b);
  assert_null(htp_safetensors_find(&st, "c"));
  htp_safetensors_close(&st);
  free(file.bytes);
}

static void test_empty_header_and_scalars(void **state) {
  (void)state;
  htp_safetensors st;
  char err[256];
  image file = make_image("{}", 0);
  assert_int_equal(htp_safetensors_parse(file.bytes, file.size, &st, err, sizeof err), 0);
  assert_int_equal(st.count, 0);
  htp_safetensors_close(&st);
  free(file.bytes);
  /* A scalar (shape []) is one element; an empty tensor is zero bytes. */
  file = make_image("{\"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}, "
                    "\"e\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [4, 4]}}",
                    4);
  assert_int_equal(htp_safetensors_parse(file.bytes, file.size, &st, err, sizeof err), 0);
  assert_int_equal(st.count, 2);
  htp_safetensors_close(&st);
  free(file.bytes);
}

static void test_conversions(void **state) {
  (void)state;
  /* F16 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff, smallest subnormal 0x0001;
   * BF16 1.0 = 0x3f80, -0.5 = 0xbf00; F64 3.25, 1e300 (saturates to inf). */
  const char *header =
      "{\"h\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [0, 8]},"
      " \"b\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [8, 12]},"
      " \"d\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [16, 32]},"
      " \"i\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [32, 40]}}";
  image file = make_image(header, 40);
  unsigned char *data = file.bytes + file.size - 40;
  const uint16_t halves[4] = {0x3c00, 0xc000, 0x7bff, 0x0001};
  const uint16_t brains[2] = {0x3f80, 0xbf00};
  const double doubles[2] = {3.25, 1e300};
  memcpy(data, halves, 8);
  memcpy(data + 8, brains, 4);
  memcpy(data + 16, doubles, 16);
  htp_safetensors st;
  char err[256];
  assert_int_equal(htp_safetensors_parse(file.bytes, file.size, &st, err, sizeof err), 0);
  float out[4];
  assert_int_equal(htp_safetensors_read_f32(&st, htp_safetensors_find(&st, "h"), out, err, sizeof err), 0);
  assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f && out[3] == 0x1p-24f);
  assert_int_equal(htp_safetensors_read_f32(&st, htp_safetensors_find(&st, "b"), out, err, sizeof err), 0);
  assert_true(out[0] == 1.0f && out[1] == -0.5f);
  assert_int_equal(htp_safetensors_read_f32(&st, htp_safetensors_find(&st, "d"), out, err, sizeof err), 0);
  assert_true(out[0] == 3.25f && out[1] > 3e38f);
  /* Integer tensors parse (a checkpoint may hold them) but cannot be read. */
  assert_int_not_equal(htp_safetensors_read_f32(&st, htp_safetensors_find(&st, "i"), out, err, sizeof err), 0);
  assert_non_null(strstr(err, "tensor 'i' has dtype I64"));
  htp_safetensors_close(&st);
  free(file.bytes);
}

static void test_truncated_length(void **state) {
  (void)state;
  image file = {malloc(5), 5};
  memcpy(file.bytes, "\x02\0\0\0\0", 5);
  expect_failure(file, "shorter than the 8-byte header length");
  file.bytes = malloc(1);
  file.size = 0;
  expect_failure(file, "shorter than the 8-byte header length");
}

static void test_header_length_past_end(void **state) {
  (void)state;
  image file = make_image("{}", 0);
  file.bytes[0] = 200; /* claims 200 bytes of header, 2 follow */
  expect_failure(file, "header length 200 exceeds the 2 bytes after it");
  file = make_image("{}", 0);
  memset(file.bytes, 0xff, 8); /* 2^64 - 1: no overflow in the check */
  expect_failure(file, "exceeds");
}

static void test_truncated_header(void **state) {
  (void)state;
  /* The file ends inside the JSON (the length says so too). */
  expect_header_failure("{\"a\": {\"dtype\": \"F3", 0, "unterminated string");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1", 0, "bad JSON");
}

static void test_bad_json(void **state) {
  (void)state;
  expect_header_failure("not json", 0, "bad safetensors header");
  expect_header_failure("[]", 0, "expected '{'");
  expect_header_failure("{\"a\" 1}", 0, "expected ':'");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]},}",
                        4, "bad JSON");
  expect_header_failure("{} x", 0, "expected the end of the JSON text");
  expect_header_failure("{\"a\\q\": {}}", 0, "unknown escape");
  expect_header_failure("{\"a\\ud800\": {}}", 0, "low surrogate");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
                        4, "non-negative integer");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}",
                        4, "expected an integer");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [99999999999999999999], "
                        "\"data_offsets\": [0, 4]}}", 4, "integer too large");
  expect_header_failure("{\"__metadata__\": [1, 2]}", 0, "'__metadata__' is not an object");
  expect_header_failure("{\"__metadata__\": {\"k\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
                        "]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", 0, "nesting too deep");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                        "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                        8, "tensor 'a' appears twice");
  expect_header_failure("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "lacks a dtype");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F32\", \"shape\": [1], "
                        "\"data_offsets\": [0, 4]}}", 4, "has 'dtype' twice");
  /* A NUL byte inside the header text. */
  image file = make_image("{\"a\": 1}", 0);
  file.bytes[10] = '\0';
  expect_failure(file, "bad JSON");
}

static void test_offsets_out_of_range(void **state) {
  (void)state;
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4,
                        "outside the 4 data bytes");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
                        "data_offsets [8, 4]");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], "
                        "\"data_offsets\": [9223372036854775800, 9223372036854775804]}}",
                        4, "outside");
}

static void test_overlapping(void **state) {
  (void)state;
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                        "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                        12, "overlap");
}

static void test_wrong_byte_count(void **state) {
  (void)state;
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
                        "needs 12 bytes but its data_offsets hold 8");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
                        "\"data_offsets\": [0, 8]}}", 8, "too large");
}

static void test_unsupported_dtype(void **state) {
  (void)state;
  expect_header_failure("{\"a\": {\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                        "unknown dtype 'Q4'");
}

static void test_open_missing_file(void **state) {
  (void)state;
  htp_safetensors st;
  char err[256];
  assert_int_not_equal(htp_safetensors_open("/nonexistent/w.safetensors", &st, err, sizeof err), 0);
  assert_non_null(strstr(err, "cannot open"));
  htp_safetensors_close(&st);
  htp_safetensors_close(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid_round_trip),
      cmocka_unit_test(test_empty_header_and_scalars),
      cmocka_unit_test(test_conversions),
      cmocka_unit_test(test_truncated_length),
      cmocka_unit_test(test_header_length_past_end),
      cmocka_unit_test(test_truncated_header),
      cmocka_unit_test(test_bad_json),
      cmocka_unit_test(test_offsets_out_of_range),
      cmocka_unit_test(test_overlapping),
      cmocka_unit_test(test_wrong_byte_count),
      cmocka_unit_test(test_unsupported_dtype),
      cmocka_unit_test(test_open_missing_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
