/*===- test/executor/test_safetensors.c - safetensors reader tests -------===*
 *
 * A valid file round trips (values compared with memcmp, F16/BF16/F64
 * converted); BF16 reads into bf16 byte for byte and F32 rounds to it (bit
 * patterns written out by hand); every corrupt case is refused with a
 * message saying why.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/safetensors.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
      " \"pad\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [12, 16]},"
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
  expect_header_failure("{\"a\": {\"dtype\": \"F3", 0, "premature end of input");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1", 0, "bad JSON at line 1, column 34");
}

static void test_bad_json(void **state) {
  (void)state;
  expect_header_failure("not json", 0, "bad safetensors header: bad JSON");
  expect_header_failure("[]", 0, "not a JSON object");
  expect_header_failure("\"a\"", 0, "bad JSON");
  expect_header_failure("{\"a\" 1}", 0, "':' expected");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]},}",
                        4, "bad JSON");
  expect_header_failure("{} x", 0, "end of file expected");
  expect_header_failure("{\"a\\q\": {}}", 0, "invalid escape");
  expect_header_failure("{\"a\\ud800\": {}}", 0, "invalid Unicode");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
                        4, "tensor 'a': shape holds a negative number -1");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}",
                        4, "tensor 'a': shape holds a non-integer");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [99999999999999999999], "
                        "\"data_offsets\": [0, 4]}}", 4, "too big integer");
  expect_header_failure("{\"__metadata__\": [1, 2]}", 0, "'__metadata__' is not an object");
  expect_header_failure("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "lacks a dtype");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F32\", \"shape\": [1], "
                        "\"data_offsets\": [0, 4]}}", 4, "duplicate object key near '\"dtype\"'");
  expect_header_failure("{\"a\": {\"dtype\": 3, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                        "tensor 'a': dtype is not a string");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4,
                        "tensor 'a': shape is not an array");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}",
                        8, "tensor 'a': data_offsets is not [begin, end]");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, \"4\"]}}",
                        4, "tensor 'a': data_offsets holds a non-integer");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, -4]}}",
                        4, "data_offsets holds a negative number");
  expect_header_failure("{\"a\": []}", 4, "tensor 'a' is not a JSON object");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], "
                        "\"data_offsets\": [0, 4]}}", 4, "more than 8 dims");
  /* Strings: invalid UTF-8, and a NUL spelled \u0000 in a key. */
  expect_header_failure("{\"\xff\": {}}", 0, "unable to decode byte 0xff");
  expect_header_failure("{\"a\\u0000b\": {}}", 0, "NUL byte in object key");
  /* A NUL byte inside the header text. */
  image file = make_image("{\"a\": 1}", 0);
  file.bytes[10] = '\0';
  expect_failure(file, "bad JSON");
}

/* No key twice in any object: a tensor, a field of a tensor, the metadata,
 * or a key inside the metadata (the file would mean two things). */
static void test_duplicate_keys(void **state) {
  (void)state;
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                        "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}, "
                        "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                        8, "duplicate object key near '\"a\"'");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], "
                        "\"data_offsets\": [0, 4]}}", 4, "duplicate object key near '\"data_offsets\"'");
  expect_header_failure("{\"__metadata__\": {}, \"__metadata__\": {}}", 0,
                        "duplicate object key near '\"__metadata__\"'");
  expect_header_failure("{\"__metadata__\": {\"k\": \"1\", \"k\": \"2\"}}", 0,
                        "duplicate object key near '\"k\"'");
  /* The same name spelled two ways is the same key. */
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                        "\"\\u0061\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                        8, "duplicate object key");
}

/* Metadata maps strings to strings; deep nesting anywhere is refused by
 * the parser's depth limit, not by running out of stack. */
static void test_metadata_and_nesting(void **state) {
  (void)state;
  expect_header_failure("{\"__metadata__\": [1, 2]}", 0, "'__metadata__' is not an object");
  expect_header_failure("{\"__metadata__\": {\"k\": 1}}", 0,
                        "'__metadata__' value of 'k' is not a string");
  expect_header_failure("{\"__metadata__\": {\"k\": [[[[]]]]}}", 0,
                        "'__metadata__' value of 'k' is not a string");
  enum { DEPTH = 100000 };
  static const char *const prefixes[] = {"{\"__metadata__\": {\"k\": ", "{\"a\": {\"shape\": "};
  char *deep = malloc(2 * DEPTH + 64);
  for (int p = 0; p < 2; p++) {
    size_t length = (size_t)sprintf(deep, "%s", prefixes[p]);
    memset(deep + length, '[', DEPTH);
    memset(deep + length + DEPTH, ']', DEPTH);
    strcpy(deep + length + 2 * DEPTH, "}}");
    expect_header_failure(deep, 0, "maximum parsing depth reached");
  }
  free(deep);
  /* Metadata is allowed and skipped. */
  image file = make_image("{\"__metadata__\": {\"format\": \"pt\", \"\": \"\"}}", 0);
  htp_safetensors st;
  char err[256] = "";
  assert_int_equal(htp_safetensors_parse(file.bytes, file.size, &st, err, sizeof err), 0);
  assert_int_equal(st.count, 0);
  htp_safetensors_close(&st);
  free(file.bytes);
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
  /* No gap and nothing after the last tensor (the reference reader refuses
   * both; a file appended to was read as if whole). */
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                        "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
                        12, "data bytes [4, 8) belong to no tensor (before 'b')");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                        8, "data bytes [0, 4) belong to no tensor (before 'a')");
  expect_header_failure("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                        7, "3 bytes after the last tensor's data belong to no tensor");
  expect_header_failure("{}", 5, "5 bytes after the last tensor's data belong to no tensor");
}

/* htp_safetensors_read_bf16: BF16 as stored, F32 rounded to nearest even
 * (expected bit patterns by hand), anything else refused by name. */
static void test_read_bf16(void **state) {
  (void)state;
  const char *header =
      "{\"b\": {\"dtype\": \"BF16\", \"shape\": [5], \"data_offsets\": [0, 10]},"
      " \"pad\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [10, 12]},"
      " \"f\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [12, 44]},"
      " \"h\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [44, 48]},"
      " \"d\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [48, 56]}}";
  /* The F32 words start at data offset 12, and the data section at 8 + the
   * header's length: nothing promises they are aligned (the reader copies). */
  image file = make_image(header, 56);
  unsigned char *data = file.bytes + file.size - 56;
  /* Any bit patterns, a NaN and an infinity among them: copied unchanged. */
  const uint16_t brains[5] = {0x3f80, 0xbf00, 0x7fc1, 0xff80, 0x0001};
  memcpy(data, brains, 10);
  /* f32 -> bf16, round to nearest even on the low 16 bits:
   *   0x3f808000 (a tie, even below) -> 0x3f80   0x3f818000 (a tie, odd below) -> 0x3f82
   *   0x3f808001 (above the tie)     -> 0x3f81   0x3f807fff (below the tie)    -> 0x3f80
   *   0x7f7fffff (FLT_MAX)           -> 0x7f80 (inf)   0xff800000 (-inf)     -> 0xff80
   *   0x7f800001 (a signalling NaN)  -> a NaN (0x7fc0: exponent all ones, mantissa set)
   *   0x80000000 (-0)                -> 0x8000 */
  const uint32_t words[8] = {0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff,
                             0x7f7fffff, 0xff800000, 0x7f800001, 0x80000000};
  memcpy(data + 12, words, 32);
  htp_safetensors st;
  char err[256];
  assert_int_equal(htp_safetensors_parse(file.bytes, file.size, &st, err, sizeof err), 0);
  uint16_t out[8];
  assert_int_equal(htp_safetensors_read_bf16(&st, htp_safetensors_find(&st, "b"), out, err,
                                             sizeof err), 0);
  assert_memory_equal(out, brains, sizeof brains);
  assert_int_equal(htp_safetensors_read_bf16(&st, htp_safetensors_find(&st, "f"), out, err,
                                             sizeof err), 0);
  const uint16_t expected[6] = {0x3f80, 0x3f82, 0x3f81, 0x3f80, 0x7f80, 0xff80};
  assert_memory_equal(out, expected, sizeof expected);
  assert_true((out[6] & 0x7f80) == 0x7f80 && (out[6] & 0x007f) != 0);
  assert_int_equal(out[7], 0x8000);
  /* F16 and F64 are not bound to bf16: the message names the tensor. */
  assert_int_not_equal(htp_safetensors_read_bf16(&st, htp_safetensors_find(&st, "h"), out, err,
                                                 sizeof err), 0);
  assert_non_null(strstr(err, "tensor 'h' has dtype F16"));
  assert_non_null(strstr(err, "BF16"));
  assert_int_not_equal(htp_safetensors_read_bf16(&st, htp_safetensors_find(&st, "d"), out, err,
                                                 sizeof err), 0);
  assert_non_null(strstr(err, "tensor 'd' has dtype F64"));
  /* BF16 widened to f32 is exact: the top half of the f32 word. */
  float wide[5];
  assert_int_equal(htp_safetensors_read_f32(&st, htp_safetensors_find(&st, "b"), wide, err,
                                            sizeof err), 0);
  for (int i = 0; i < 5; i++) {
    uint32_t bits;
    memcpy(&bits, &wide[i], 4);
    assert_int_equal(bits, (uint32_t)brains[i] << 16);
  }
  htp_safetensors_close(&st);
  free(file.bytes);
}

/* A BF16 tensor whose byte range is not 2 bytes an element: refused when
 * the file is parsed, before any reader sees it. */
static void test_bf16_wrong_byte_count(void **state) {
  (void)state;
  expect_header_failure("{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], "
                        "\"data_offsets\": [0, 24]}}", 24,
                        "tensor 'a' (BF16, 2 dims) needs 12 bytes but its data_offsets hold 24");
  expect_header_failure("{\"a\": {\"dtype\": \"BF16\", \"shape\": [3], "
                        "\"data_offsets\": [0, 5]}}", 6, "needs 6 bytes but its data_offsets "
                        "hold 5");
  expect_header_failure("{\"a\": {\"dtype\": \"BF16\", \"shape\": [4], "
                        "\"data_offsets\": [0, 8]}}", 6, "outside the 6 data bytes");
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
  char err[256], path[64];
  snprintf(path, sizeof path, "executor_st_missing_%ld/w.safetensors", (long)getpid());
  assert_int_not_equal(htp_safetensors_open(path, &st, err, sizeof err), 0);
  assert_non_null(strstr(err, "cannot open"));
  htp_safetensors_close(&st);
  htp_safetensors_close(NULL);
}

/* Only regular files are read: a directory, a device that never ends and a
 * FIFO with no writer are refused at once, before any read (a FIFO would
 * block, /dev/zero would be read until memory runs out). */
static void test_open_non_regular(void **state) {
  (void)state;
  htp_safetensors st;
  char err[256], fifo[64];
  assert_int_not_equal(htp_safetensors_open(".", &st, err, sizeof err), 0);
  assert_string_equal(err, "not a regular file (a directory)");
  assert_int_not_equal(htp_safetensors_open("/dev/zero", &st, err, sizeof err), 0);
  assert_string_equal(err, "not a regular file (a character device)");
  snprintf(fifo, sizeof fifo, "executor_st_fifo_%ld", (long)getpid());
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_not_equal(htp_safetensors_open(fifo, &st, err, sizeof err), 0);
  assert_string_equal(err, "not a regular file (a FIFO)");
  unlink(fifo);
  htp_safetensors_close(&st);
}

/* The file path: a valid file written to disk opens, an empty one is refused. */
static void test_open_file(void **state) {
  (void)state;
  const char *path = "executor_st_open.safetensors";
  image file = make_image("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4);
  FILE *out = fopen(path, "wb");
  assert_non_null(out);
  assert_int_equal(fwrite(file.bytes, 1, file.size, out), file.size);
  fclose(out);
  htp_safetensors st;
  char err[256] = "";
  assert_int_equal(htp_safetensors_open(path, &st, err, sizeof err), 0);
  assert_int_equal(st.count, 1);
  float value;
  assert_int_equal(htp_safetensors_read_f32(&st, &st.tensors[0], &value, err, sizeof err), 0);
  assert_memory_equal(&value, file.bytes + file.size - 4, 4);
  htp_safetensors_close(&st);
  out = fopen(path, "wb");
  fclose(out);
  assert_int_not_equal(htp_safetensors_open(path, &st, err, sizeof err), 0);
  assert_non_null(strstr(err, "0 bytes, shorter than the 8-byte header length"));
  remove(path);
  free(file.bytes);
}

/* The header length is checked against the limit before the JSON is read. */
static void test_header_limit(void **state) {
  (void)state;
  size_t length = HTP_ST_MAX_HEADER + 1;
  image file = {calloc(8 + length, 1), 8 + length};
  for (int i = 0; i < 8; i++)
    file.bytes[i] = (unsigned char)((uint64_t)length >> (8 * i));
  expect_failure(file, "safetensors header of 100000001 bytes is over the 100 MB limit");
}


/* The writer (--train's checkpoints): what it writes reads back through the
 * parser with the same names, shapes, values and metadata, the data
 * aligned to 8 bytes; a name twice and an unwritable path are errors that
 * leave no file. */
static void test_write_round_trip(void **state) {
  (void)state;
  const char *path = "written.safetensors";
  float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f}, b[3] = {7, 8, 9}, s[1] = {-1};
  const int64_t w_dims[2] = {2, 3}, b_dims[1] = {3};
  const htp_st_write tensors[] = {{"blocks.0.mlp.fc1.weight", 2, w_dims, w},
                                  {"head.bias", 1, b_dims, b},
                                  {"scalar", 0, NULL, s}};
  const char *metadata[] = {"format", "pt", "htp.epoch", "3", NULL};
  char err[512] = "";
  assert_int_equal(htp_safetensors_write_f32(path, tensors, 3, metadata, err, sizeof err), 0);
  htp_safetensors st;
  assert_int_equal(htp_safetensors_open(path, &st, err, sizeof err), 0);
  assert_int_equal(st.count, 3);
  assert_int_equal(st.data_offset % 8, 0);
  assert_string_equal(htp_safetensors_metadata(&st, "htp.epoch"), "3");
  assert_string_equal(htp_safetensors_metadata(&st, "format"), "pt");
  assert_null(htp_safetensors_metadata(&st, "htp.step"));
  const htp_st_tensor *t = htp_safetensors_find(&st, "blocks.0.mlp.fc1.weight");
  assert_non_null(t);
  assert_string_equal(t->dtype, "F32");
  assert_int_equal(t->rank, 2);
  assert_true(t->dims[0] == 2 && t->dims[1] == 3);
  float back[6];
  assert_int_equal(htp_safetensors_read_f32(&st, t, back, err, sizeof err), 0);
  assert_memory_equal(back, w, sizeof w);
  t = htp_safetensors_find(&st, "head.bias");
  assert_int_equal(htp_safetensors_read_f32(&st, t, back, err, sizeof err), 0);
  assert_memory_equal(back, b, sizeof b);
  t = htp_safetensors_find(&st, "scalar");
  assert_int_equal(t->rank, 0);
  assert_int_equal(htp_safetensors_read_f32(&st, t, back, err, sizeof err), 0);
  assert_true(back[0] == -1.0f);
  htp_safetensors_close(&st);
  /* Without metadata: none in the file. */
  assert_int_equal(htp_safetensors_write_f32(path, tensors, 1, NULL, err, sizeof err), 0);
  assert_int_equal(htp_safetensors_open(path, &st, err, sizeof err), 0);
  assert_null(htp_safetensors_metadata(&st, "format"));
  assert_int_equal(st.count, 1);
  htp_safetensors_close(&st);
  /* A name twice; a directory that does not exist. */
  const htp_st_write twice[] = {{"x", 1, b_dims, b}, {"x", 1, b_dims, b}};
  assert_int_not_equal(htp_safetensors_write_f32("twice.safetensors", twice, 2, NULL, err,
                                                 sizeof err), 0);
  assert_non_null(strstr(err, "a name twice"));
  assert_int_not_equal(access("twice.safetensors", F_OK), 0);
  assert_int_not_equal(htp_safetensors_write_f32("no/such/dir/x.safetensors", tensors, 1, NULL,
                                                 err, sizeof err), 0);
  assert_non_null(strstr(err, "cannot create"));
  /* A symlink at PATH.tmp (a checkpoint's commit writes there) is replaced,
   * its target never written. */
  FILE *file = fopen("victim.txt", "w");
  assert_non_null(file);
  fputs("keep", file);
  fclose(file);
  unlink("written.safetensors.tmp");
  assert_int_equal(symlink("victim.txt", "written.safetensors.tmp"), 0);
  assert_int_equal(htp_safetensors_write_f32(path, tensors, 1, NULL, err, sizeof err), 0);
  char text[16] = "";
  file = fopen("victim.txt", "r");
  assert_non_null(file);
  assert_non_null(fgets(text, sizeof text, file));
  fclose(file);
  assert_string_equal(text, "keep");
  assert_int_equal(htp_safetensors_open(path, &st, err, sizeof err), 0);
  assert_int_equal(st.count, 1);
  htp_safetensors_close(&st);
  remove("victim.txt");
  remove(path);
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
      cmocka_unit_test(test_duplicate_keys),
      cmocka_unit_test(test_metadata_and_nesting),
      cmocka_unit_test(test_offsets_out_of_range),
      cmocka_unit_test(test_overlapping),
      cmocka_unit_test(test_wrong_byte_count),
      cmocka_unit_test(test_read_bf16),
      cmocka_unit_test(test_bf16_wrong_byte_count),
      cmocka_unit_test(test_unsupported_dtype),
      cmocka_unit_test(test_open_missing_file),
      cmocka_unit_test(test_open_non_regular),
      cmocka_unit_test(test_open_file),
      cmocka_unit_test(test_header_limit),
      cmocka_unit_test(test_write_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
