/*===- test/executor/test_npy.c - .npy reader and writer tests -----------===*
 *
 * Files written by htp_npy_write read back bit for bit; images written the
 * way numpy does (v1, v2, '<f8') parse; every corrupt case is refused with a
 * message saying why.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/npy.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* An .npy image: magic, version, header (as given), then data_size bytes. */
static size_t make_npy(unsigned char *out, int major, const char *header, const void *data,
                       size_t data_size) {
  size_t length = strlen(header), prefix = major == 1 ? 10 : 12;
  memcpy(out, "\x93NUMPY", 6);
  out[6] = (unsigned char)major;
  out[7] = 0;
  out[8] = (unsigned char)(length & 0xff);
  out[9] = (unsigned char)(length >> 8);
  if (major != 1) {
    out[10] = 0;
    out[11] = 0;
  }
  memcpy(out + prefix, header, length);
  if (data_size)
    memcpy(out + prefix + length, data, data_size);
  return prefix + length + data_size;
}

static void expect_failure(const unsigned char *bytes, size_t size, const char *expected) {
  unsigned char *exact = malloc(size ? size : 1); /* so ASan sees overreads */
  memcpy(exact, bytes, size);
  htp_array array;
  char err[512] = "";
  int status = htp_npy_parse(exact, size, &array, err, sizeof err);
  if (status == 0 || strstr(err, expected) == NULL)
    fail_msg("expected failure containing \"%s\", got status %d \"%s\"", expected, status, err);
  assert_null(array.data);
  free(exact);
}

static void expect_header_failure(const char *header, size_t data_size, const char *expected) {
  unsigned char buffer[1024];
  float zeros[16] = {0};
  expect_failure(buffer, make_npy(buffer, 1, header, zeros, data_size), expected);
}

static void test_write_read_round_trip(void **state) {
  (void)state;
  const char *path = "executor_npy_round_trip.npy";
  float data[2 * 3 * 4];
  for (int i = 0; i < 24; i++)
    data[i] = (float)i * 0.5f - 3.0f;
  const int64_t shapes[][3] = {{2, 3, 4}, {24, 0, 0}, {0, 0, 0}};
  const int ranks[] = {3, 1, 0};
  for (int s = 0; s < 3; s++) {
    char err[256];
    assert_int_equal(htp_npy_write(path, ranks[s], shapes[s], data, err, sizeof err), 0);
    htp_array array;
    assert_int_equal(htp_npy_read(path, &array, err, sizeof err), 0);
    assert_int_equal(array.rank, ranks[s]);
    for (int d = 0; d < ranks[s]; d++)
      assert_int_equal(array.dims[d], shapes[s][d]);
    assert_int_equal(array.count, ranks[s] == 0 ? 1 : 24);
    assert_memory_equal(array.data, data, (size_t)array.count * sizeof(float));
    htp_array_free(&array);
  }
  /* The header pads the data to 64 bytes, as numpy does. */
  FILE *file = fopen(path, "rb");
  assert_non_null(file);
  unsigned char prefix[10];
  assert_int_equal(fread(prefix, 1, 10, file), 10);
  fclose(file);
  assert_int_equal((10 + (prefix[8] | prefix[9] << 8)) % 64, 0);
  remove(path);
}

static void test_numpy_images(void **state) {
  (void)state;
  unsigned char buffer[512];
  const float values[3] = {1.5f, -2.0f, 0.25f};
  htp_array array;
  char err[256];
  /* Version 2, double quotes, keys in another order, no trailing comma. */
  size_t size = make_npy(buffer, 2, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<f4\"}\n",
                         values, sizeof values);
  assert_int_equal(htp_npy_parse(buffer, size, &array, err, sizeof err), 0);
  assert_int_equal(array.rank, 1);
  assert_memory_equal(array.data, values, sizeof values);
  htp_array_free(&array);
  /* '<f8' is converted. */
  const double doubles[3] = {1.5, -2.0, 0.25};
  size = make_npy(buffer, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 3), }  \n",
                  doubles, sizeof doubles);
  assert_int_equal(htp_npy_parse(buffer, size, &array, err, sizeof err), 0);
  assert_int_equal(array.rank, 2);
  assert_memory_equal(array.data, values, sizeof values);
  htp_array_free(&array);
  htp_array_free(NULL);
}

static void test_bad_magic(void **state) {
  (void)state;
  expect_failure((const unsigned char *)"junk", 4, "not a .npy file");
  expect_failure((const unsigned char *)"\x93NUMPX\x01\x00\x00\x00", 10, "not a .npy file");
  expect_failure((const unsigned char *)"", 0, "not a .npy file");
  expect_failure((const unsigned char *)"\x93NUMPY\x07\x00\x00\x00", 10, "unsupported .npy version 7.0");
}

static void test_truncated_header(void **state) {
  (void)state;
  unsigned char buffer[128];
  size_t size = make_npy(buffer, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", NULL, 0);
  expect_failure(buffer, size - 10, "truncated .npy file");
  expect_failure(buffer, 11, "truncated .npy file");
  size = make_npy(buffer, 2, "{}", NULL, 0);
  expect_failure(buffer, 11, "truncated .npy header");
}

static void test_bad_header_dict(void **state) {
  (void)state;
  /* A NUL in the header's text ended the dtype string early: '<f4\0' was
   * read as '<f4'. */
  unsigned char nul[1024];
  float zero[1] = {0};
  size_t size = make_npy(nul, 1, "{'descr': '<f4X', 'fortran_order': False, 'shape': (1,), }",
                         zero, 4);
  unsigned char *x = memchr(nul, 'X', size);
  assert_non_null(x);
  *x = 0;
  expect_failure(nul, size, "bad .npy header: a NUL byte at offset");
  expect_header_failure("['descr', '<f4']", 0, "not a dict");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False}", 0, "missing 'shape'");
  expect_header_failure("{'descr': '<f4', 'shape': (1,), 'extra': 1}", 4, "unexpected or repeated key 'extra'");
  expect_header_failure("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", 4,
                        "repeated key 'descr'");
  expect_header_failure("{'descr': '<f4', 'fortran_order': Maybe, 'shape': ()}", 4, "not a bool");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", 4, "not a tuple");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (1)}", 4, "must be (n,)");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", 4, "negative dim");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}", 4, "non-integer");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}", 4, "expected ',' or ')'");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
                        4, "too large");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
                        4, "too large");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing", 4,
                        "text after the dict");
  expect_header_failure("{'descr': '<f4 , 'fortran_order': False, 'shape': (1,)}", 4, "bad .npy header");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (1,", 4, "bad .npy header");
}

static void test_fortran_order(void **state) {
  (void)state;
  expect_header_failure("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16,
                        "Fortran-order arrays are not supported");
}

static void test_wrong_dtype(void **state) {
  (void)state;
  expect_header_failure("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", 4,
                        "dtype '<i4' is not supported");
  expect_header_failure("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4,
                        "dtype '>f4' is not supported");
  expect_header_failure("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4,
                        "'descr' is not a dtype string");
}

static void test_truncated_data(void **state) {
  (void)state;
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20,
                        "truncated .npy data: the shape needs 24 bytes, the file holds 20");
  expect_header_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12,
                        "trailing bytes after .npy data");
}

static void test_read_missing_file(void **state) {
  (void)state;
  htp_array array;
  char err[256], path[64];
  /* In a folder of this process's own name that no one made (a fixed
   * absolute path may exist on some machine). */
  snprintf(path, sizeof path, "executor_npy_missing_%ld/x.npy", (long)getpid());
  assert_int_not_equal(htp_npy_read(path, &array, err, sizeof err), 0);
  assert_non_null(strstr(err, "cannot open"));
  assert_int_not_equal(htp_npy_write(path, 0, NULL, (const float[]){1}, err, sizeof err), 0);
  assert_non_null(strstr(err, "cannot create"));
}

/* Only regular files are read or overwritten: a directory, a device that
 * never ends and a FIFO with no writer are refused before any read. */
static void test_non_regular_files(void **state) {
  (void)state;
  htp_array array;
  char err[256], fifo[64];
  assert_int_not_equal(htp_npy_read(".", &array, err, sizeof err), 0);
  assert_string_equal(err, "not a regular file (a directory)");
  assert_null(array.data);
  assert_int_not_equal(htp_npy_read("/dev/zero", &array, err, sizeof err), 0);
  assert_string_equal(err, "not a regular file (a character device)");
  snprintf(fifo, sizeof fifo, "executor_npy_fifo_%ld", (long)getpid());
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_not_equal(htp_npy_read(fifo, &array, err, sizeof err), 0);
  assert_string_equal(err, "not a regular file (a FIFO)");
  /* Writing: a directory, a device, a FIFO are not overwritten. */
  const float one = 1;
  assert_int_not_equal(htp_npy_write(fifo, 0, NULL, &one, err, sizeof err), 0);
  assert_string_equal(err, "not a regular file (a FIFO): refusing to write to it");
  unlink(fifo);
  assert_int_not_equal(htp_npy_write(".", 0, NULL, &one, err, sizeof err), 0);
  assert_non_null(strstr(err, "(a directory)"));
  assert_int_not_equal(htp_npy_write("/dev/null", 0, NULL, &one, err, sizeof err), 0);
  assert_non_null(strstr(err, "(a character device)"));
}

/* A write that fails half way (here: a file-size limit) leaves the old file
 * whole, and no temporary behind; a symlink found at PATH.tmp (a stale
 * temporary, or someone's trap) is replaced, its target never written. */
static void test_write_replaces_whole(void **state) {
  (void)state;
  char path[64], temporary[80], victim[64], err[512];
  snprintf(path, sizeof path, "executor_npy_whole_%ld.npy", (long)getpid());
  snprintf(temporary, sizeof temporary, "%s.tmp", path);
  snprintf(victim, sizeof victim, "executor_npy_victim_%ld", (long)getpid());
  const float old[4] = {1, 2, 3, 4};
  const int64_t four = 4, big = 100000;
  assert_int_equal(htp_npy_write(path, 1, &four, old, err, sizeof err), 0);
  float *large = calloc((size_t)big, sizeof(float));
  assert_non_null(large);
  struct rlimit saved;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = {64 * 1024, saved.rlim_max};
  void (*previous)(int) = signal(SIGXFSZ, SIG_IGN); /* a failed write(2), not a signal */
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  int failed = htp_npy_write(path, 1, &big, large, err, sizeof err);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, previous);
  assert_int_not_equal(failed, 0);
  assert_non_null(strstr(err, "cannot write"));
  assert_int_not_equal(access(temporary, F_OK), 0);
  htp_array array;
  assert_int_equal(htp_npy_read(path, &array, err, sizeof err), 0);
  assert_int_equal(array.count, 4);
  assert_memory_equal(array.data, old, sizeof old);
  htp_array_free(&array);

  FILE *file = fopen(victim, "w");
  assert_non_null(file);
  fputs("someone's file\n", file);
  fclose(file);
  assert_int_equal(symlink(victim, temporary), 0);
  const float new[4] = {5, 6, 7, 8};
  assert_int_equal(htp_npy_write(path, 1, &four, new, err, sizeof err), 0);
  char text[64] = "";
  file = fopen(victim, "r");
  assert_non_null(file);
  assert_non_null(fgets(text, sizeof text, file));
  fclose(file);
  assert_string_equal(text, "someone's file\n");
  struct stat info;
  assert_int_equal(lstat(path, &info), 0);
  assert_true(S_ISREG(info.st_mode));
  assert_int_not_equal(lstat(temporary, &info), 0);
  assert_int_equal(htp_npy_read(path, &array, err, sizeof err), 0);
  assert_memory_equal(array.data, new, sizeof new);
  htp_array_free(&array);
  free(large);
  unlink(path);
  unlink(victim);
}

/* An empty file is not an .npy file (and maps to nothing). */
static void test_empty_file(void **state) {
  (void)state;
  const char *path = "executor_npy_empty.npy";
  FILE *file = fopen(path, "wb");
  assert_non_null(file);
  fclose(file);
  htp_array array;
  char err[256];
  assert_int_not_equal(htp_npy_read(path, &array, err, sizeof err), 0);
  assert_non_null(strstr(err, "not a .npy file"));
  remove(path);
}

/* A version 2 header claiming more than the limit is refused before its
 * text is looked at, even when the bytes are there. */
static void test_header_limit(void **state) {
  (void)state;
  size_t size = 12 + HTP_NPY_MAX_HEADER + 1;
  unsigned char *bytes = calloc(size, 1);
  memcpy(bytes, "\x93NUMPY\x02\x00", 8);
  uint32_t length = HTP_NPY_MAX_HEADER + 1;
  for (int i = 0; i < 4; i++)
    bytes[8 + i] = (unsigned char)(length >> (8 * i));
  expect_failure(bytes, size, ".npy header of 65537 bytes is over the 65536-byte limit");
  /* 4 GiB claimed, 2 bytes present. */
  memcpy(bytes + 8, "\xff\xff\xff\xff", 4);
  expect_failure(bytes, 14, "over the 65536-byte limit");
  free(bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_write_read_round_trip),
      cmocka_unit_test(test_numpy_images),
      cmocka_unit_test(test_bad_magic),
      cmocka_unit_test(test_truncated_header),
      cmocka_unit_test(test_bad_header_dict),
      cmocka_unit_test(test_fortran_order),
      cmocka_unit_test(test_wrong_dtype),
      cmocka_unit_test(test_truncated_data),
      cmocka_unit_test(test_read_missing_file),
      cmocka_unit_test(test_non_regular_files),
      cmocka_unit_test(test_write_replaces_whole),
      cmocka_unit_test(test_empty_file),
      cmocka_unit_test(test_header_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
