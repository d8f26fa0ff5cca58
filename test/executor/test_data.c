/*===- test/executor/test_data.c - Binding data to bf16 and f32 blocks ----===*
 *
 * tools/htp-run/data.h on small files written here: a bf16 parameter takes
 * a BF16 safetensors tensor byte for byte and an F32 one rounded to nearest
 * even; an f32 parameter takes BF16 widened exactly; F16 for a bf16
 * parameter and a BF16 tensor of the wrong byte length are refused with the
 * file and tensor named; a .npy input (<f4) is rounded for a bf16 input;
 * random bf16 data is the f32 draw rounded. Expected bit patterns are
 * written out by hand, or found by distance (the nearer bf16 neighbour, ties
 * to the even one), never by calling the conversion under test.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/data.h"
#include "tools/htp-run/npy.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void parse_signature(const char *text, htp_signature *sig) {
  char err[512] = "";
  if (htp_signature_parse(text, strlen(text), sig, err, sizeof err) != HTP_OK)
    fail_msg("bad test signature: %s", err);
}

/* A block of dtype `dtype` with params a [2, 3] and b [4] and input x [3]. */
static void block_signature(const char *dtype, htp_signature *sig) {
  char text[1024];
  snprintf(text, sizeof text,
           "{\"htp_entry\": 2, \"entry\": \"f\", \"args\": ["
           "{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"%s\", \"shape\": [3]}, "
           "{\"name\": \"a\", \"role\": \"param\", \"dtype\": \"%s\", \"shape\": [2, 3]}, "
           "{\"name\": \"b\", \"role\": \"param\", \"dtype\": \"%s\", \"shape\": [4]}], "
           "\"results\": [{\"name\": \"y\", \"dtype\": \"%s\", \"shape\": [3]}], "
           "\"workspace_bytes\": 0}",
           dtype, dtype, dtype, dtype);
  parse_signature(text, sig);
}

/* Writes a safetensors file: header text, then data bytes. */
static void write_safetensors(const char *path, const char *header, const void *data,
                              size_t data_size) {
  FILE *file = fopen(path, "wb");
  assert_non_null(file);
  uint64_t length = strlen(header);
  unsigned char prefix[8];
  for (int i = 0; i < 8; i++)
    prefix[i] = (unsigned char)(length >> (8 * i));
  assert_int_equal(fwrite(prefix, 1, 8, file), 8);
  assert_int_equal(fwrite(header, 1, length, file), length);
  assert_int_equal(fwrite(data, 1, data_size, file), data_size);
  assert_int_equal(fclose(file), 0);
}

static float from_bits(uint32_t bits) {
  float value;
  memcpy(&value, &bits, 4);
  return value;
}

/* Buffers for the three arguments of block_signature, as bytes. */
typedef struct buffers {
  unsigned char x[12], a[24], b[16];
  void *list[3];
} buffers;

static void init_buffers(buffers *b) {
  memset(b, 0xee, sizeof *b);
  b->list[0] = b->x;
  b->list[1] = b->a;
  b->list[2] = b->b;
}

/* 1. BF16 tensors bind byte for byte; F32 tensors are rounded (ties to even). */
static void test_bf16_weights(void **state) {
  (void)state;
  htp_signature sig;
  block_signature("bf16", &sig);
  const uint16_t a[6] = {0x3f80, 0xbf00, 0x7fc1, 0xff80, 0x0001, 0x4049};
  /* 1 + 2^-8 (a tie, even below) -> 0x3f80; 1 + 3 * 2^-8 (a tie, odd
   * below) -> 0x3f82; just above a tie -> 0x3f81; -3.0 exact -> 0xc040. */
  const uint32_t b[4] = {0x3f808000, 0x3f818000, 0x3f808001, 0xc0400000};
  unsigned char data[28];
  memcpy(data, a, 12);
  memcpy(data + 12, b, 16);
  write_safetensors("bf16_weights.safetensors",
                    "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}, "
                    "\"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [12, 28]}}",
                    data, sizeof data);
  buffers out;
  init_buffers(&out);
  char err[512] = "";
  assert_int_equal(htp_bind_weights("bf16_weights.safetensors", &sig, out.list, err, sizeof err),
                   0);
  assert_memory_equal(out.a, a, sizeof a);
  const uint16_t rounded[4] = {0x3f80, 0x3f82, 0x3f81, 0xc040};
  assert_memory_equal(out.b, rounded, sizeof rounded);
  /* The input is not a parameter: untouched. */
  for (size_t i = 0; i < sizeof out.x; i++)
    assert_int_equal(out.x[i], 0xee);
  htp_signature_free(&sig);
}

/* 2. An f32 block takes BF16 widened (exact: the top half of each word). */
static void test_bf16_into_f32(void **state) {
  (void)state;
  htp_signature sig;
  block_signature("f32", &sig);
  const uint16_t a[6] = {0x3f80, 0xbf00, 0x4049, 0xc2f7, 0x0001, 0x8000};
  const float b[4] = {1.5f, -2.25f, 0.1f, 1e-30f};
  unsigned char data[28];
  memcpy(data, a, 12);
  memcpy(data + 12, b, 16);
  write_safetensors("f32_from_bf16.safetensors",
                    "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}, "
                    "\"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [12, 28]}}",
                    data, sizeof data);
  buffers out;
  init_buffers(&out);
  char err[512] = "";
  assert_int_equal(htp_bind_weights("f32_from_bf16.safetensors", &sig, out.list, err,
                                    sizeof err), 0);
  for (int i = 0; i < 6; i++) {
    float value;
    memcpy(&value, out.a + 4 * i, 4);
    assert_true(value == from_bits((uint32_t)a[i] << 16));
  }
  assert_memory_equal(out.b, b, sizeof b);
  htp_signature_free(&sig);
}

/* 3. F16 (and I32) for a bf16 block, and a BF16 tensor of the wrong byte
 * length or shape: refused, naming the file and the tensor. */
static void test_refused(void **state) {
  (void)state;
  htp_signature sig;
  block_signature("bf16", &sig);
  unsigned char data[40] = {0};
  buffers out;
  char err[512] = "";
  write_safetensors("f16.safetensors",
                    "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}, "
                    "\"b\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [12, 20]}}",
                    data, 20);
  init_buffers(&out);
  assert_int_not_equal(htp_bind_weights("f16.safetensors", &sig, out.list, err, sizeof err), 0);
  assert_non_null(strstr(err, "f16.safetensors: tensor 'b' has dtype F16"));
  write_safetensors("i32.safetensors",
                    "{\"a\": {\"dtype\": \"I32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}, "
                    "\"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]}}",
                    data, 32);
  assert_int_not_equal(htp_bind_weights("i32.safetensors", &sig, out.list, err, sizeof err), 0);
  assert_non_null(strstr(err, "tensor 'a' has dtype I32"));
  /* 4 BF16 elements are 8 bytes; the file claims 16. */
  write_safetensors("short.safetensors",
                    "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}, "
                    "\"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [12, 28]}}",
                    data, 28);
  assert_int_not_equal(htp_bind_weights("short.safetensors", &sig, out.list, err, sizeof err), 0);
  assert_non_null(strstr(err, "short.safetensors: tensor 'b' (BF16, 1 dims) needs 8 bytes but "
                              "its data_offsets hold 16"));
  /* Right bytes for its own shape, wrong shape for the block. */
  write_safetensors("shape.safetensors",
                    "{\"a\": {\"dtype\": \"BF16\", \"shape\": [3, 2], \"data_offsets\": [0, 12]}, "
                    "\"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [12, 20]}}",
                    data, 20);
  assert_int_not_equal(htp_bind_weights("shape.safetensors", &sig, out.list, err, sizeof err), 0);
  assert_non_null(strstr(err, "tensor 'a' has shape [3, 2] but the block expects [2, 3]"));
  htp_signature_free(&sig);
}

/* 4. A .npy input (<f4) for a bf16 input is rounded; for f32 copied. */
static void test_npy_input(void **state) {
  (void)state;
  htp_signature sig;
  block_signature("bf16", &sig);
  const float values[3] = {from_bits(0x3f808000), from_bits(0x3f818000), -0.0f};
  const int64_t dims[1] = {3};
  char err[512] = "";
  assert_int_equal(htp_npy_write("x.npy", 1, dims, values, err, sizeof err), 0);
  uint16_t out[3] = {0xeeee, 0xeeee, 0xeeee};
  assert_int_equal(htp_bind_input("x.npy", &sig.args[0], out, err, sizeof err), 0);
  assert_true(out[0] == 0x3f80 && out[1] == 0x3f82 && out[2] == 0x8000);
  /* The wrong shape is refused before anything is written. */
  const int64_t wrong[2] = {1, 3};
  assert_int_equal(htp_npy_write("x13.npy", 2, wrong, values, err, sizeof err), 0);
  assert_int_not_equal(htp_bind_input("x13.npy", &sig.args[0], out, err, sizeof err), 0);
  assert_non_null(strstr(err, "array of shape [1, 3], but input 'x' has shape [3]"));
  htp_signature_free(&sig);
  block_signature("f32", &sig);
  float wide[3];
  assert_int_equal(htp_bind_input("x.npy", &sig.args[0], wide, err, sizeof err), 0);
  assert_memory_equal(wide, values, sizeof values);
  htp_signature_free(&sig);
}

/* The bf16 nearest to f: of the two patterns around it (truncated, and the
 * next one away from zero), the nearer; on a tie the even one. */
static uint16_t nearest_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint16_t low = (uint16_t)(bits >> 16), high = (uint16_t)(low + 1);
  double below = (double)from_bits((uint32_t)low << 16);
  double above = (double)from_bits((uint32_t)high << 16);
  double to_low = fabs((double)f - below), to_high = fabs(above - (double)f);
  if (to_low != to_high)
    return to_low < to_high ? low : high;
  return (low & 1) ? high : low;
}

/* 5. Random data of a bf16 argument is the f32 draw rounded, for each role
 * (inputs N(0, 1), weights N(0, 0.02^2), norm weights 1, norm biases 0). */
static void test_random(void **state) {
  (void)state;
  const char *text =
      "{\"htp_entry\": 2, \"entry\": \"f\", \"args\": ["
      "{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"%s\", \"shape\": [1000]}, "
      "{\"name\": \"w\", \"role\": \"param\", \"dtype\": \"%s\", \"shape\": [999]}, "
      "{\"name\": \"norm1.weight\", \"role\": \"param\", \"dtype\": \"%s\", \"shape\": [5]}, "
      "{\"name\": \"norm1.bias\", \"role\": \"param\", \"dtype\": \"%s\", \"shape\": [5]}], "
      "\"results\": [{\"name\": \"y\", \"dtype\": \"%s\", \"shape\": [3]}], "
      "\"workspace_bytes\": 0}";
  char f32_text[1024], bf16_text[1024];
  snprintf(f32_text, sizeof f32_text, text, "f32", "f32", "f32", "f32", "f32");
  snprintf(bf16_text, sizeof bf16_text, text, "bf16", "bf16", "bf16", "bf16", "bf16");
  htp_signature f32_sig, bf16_sig;
  parse_signature(f32_text, &f32_sig);
  parse_signature(bf16_text, &bf16_sig);
  for (int i = 0; i < 4; i++) {
    int64_t count = f32_sig.args[i].count;
    float *wide = malloc((size_t)count * sizeof *wide);
    uint16_t *narrow = malloc((size_t)count * sizeof *narrow);
    htp_fill_random(&f32_sig.args[i], i, 7, wide);
    htp_fill_random(&bf16_sig.args[i], i, 7, narrow);
    for (int64_t k = 0; k < count; k++)
      if (narrow[k] != nearest_bf16(wide[k]))
        fail_msg("argument %d element %lld: f32 %.9g gave bf16 0x%04x, not 0x%04x", i,
                 (long long)k, (double)wide[k], narrow[k], nearest_bf16(wide[k]));
    free(wide);
    free(narrow);
  }
  htp_signature_free(&f32_sig);
  htp_signature_free(&bf16_sig);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16_weights), cmocka_unit_test(test_bf16_into_f32),
      cmocka_unit_test(test_refused),      cmocka_unit_test(test_npy_input),
      cmocka_unit_test(test_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
