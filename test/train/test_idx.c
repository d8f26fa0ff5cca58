/*===- test/train/test_idx.c - The IDX reader against good and bad files --===*
 *
 * Files written here byte by byte (plain and gzipped), one per class of bad
 * input: wrong magic or type, dimension counts out of range, a zero or
 * overflowing dimension, header or data cut short, trailing bytes, a cut
 * gzip stream, not a regular file, a missing file; and labelled sets whose
 * counts or labels disagree. Where Debian's dataset-fashion-mnist is
 * installed, its four files are read and checked against their documented
 * shapes (60,000 + 10,000 images of 28 x 28, labels 0..9).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "tools/htp-run/train/idx.h"

static char dir[] = "/tmp/htp-idx-XXXXXX";

/* Paths in dir; a few live at once (a set's images and labels). */
static const char *path_of(const char *name) {
  static char paths[4][256];
  static int next;
  char *path = paths[next++ % 4];
  snprintf(path, sizeof paths[0], "%s/%s", dir, name);
  return path;
}

static const char *write_file(const char *name, const uint8_t *bytes, size_t size, int gz) {
  const char *path = path_of(name);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, bytes, (unsigned)size), (int)size);
    assert_int_equal(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, size, f), size);
    fclose(f);
  }
  return path;
}

/* An IDX file of ubytes with the given dims and data i % 251. */
static size_t make_idx(uint8_t *out, int dims, const uint32_t *d, size_t extra_data) {
  out[0] = out[1] = 0, out[2] = 0x08, out[3] = (uint8_t)dims;
  size_t n = 1, at = 4;
  for (int i = 0; i < dims; i++) {
    out[at++] = (uint8_t)(d[i] >> 24), out[at++] = (uint8_t)(d[i] >> 16);
    out[at++] = (uint8_t)(d[i] >> 8), out[at++] = (uint8_t)d[i];
    n *= d[i];
  }
  for (size_t i = 0; i < n + extra_data; i++) out[at++] = (uint8_t)(i % 251);
  return at;
}

static void expect_error(const char *path, const char *needle) {
  htp_idx idx;
  char err[256] = "";
  assert_int_equal(htp_idx_read(path, &idx, err, sizeof err), 1);
  assert_null(idx.data);
  if (!strstr(err, needle)) fail_msg("error \"%s\" lacks \"%s\"", err, needle);
}

static void good_files(void **state) {
  (void)state;
  uint8_t bytes[4096];
  const uint32_t d[3] = {3, 5, 7};
  size_t size = make_idx(bytes, 3, d, 0);
  for (int gz = 0; gz <= 1; gz++) {
    const char *path = write_file(gz ? "good.gz" : "good", bytes, size, gz);
    htp_idx idx;
    char err[256];
    if (htp_idx_read(path, &idx, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(idx.num_dims, 3);
    assert_int_equal(idx.dims[0], 3);
    assert_int_equal(idx.dims[2], 7);
    assert_int_equal(idx.count, 105);
    for (int i = 0; i < 105; i++) assert_int_equal(idx.data[i], i % 251);
    htp_idx_free(&idx);
    htp_idx_free(&idx); /* twice is harmless */
  }
}

static void bad_files(void **state) {
  (void)state;
  uint8_t bytes[4096];
  const uint32_t d[2] = {4, 6};
  size_t size = make_idx(bytes, 2, d, 0);
  uint8_t bad[4096];

  memcpy(bad, bytes, size), bad[1] = 8;
  expect_error(write_file("magic", bad, size, 0), "not an IDX file");
  memcpy(bad, bytes, size), bad[2] = 0x0d;
  expect_error(write_file("type", bad, size, 0), "0x0d is not supported");
  memcpy(bad, bytes, size), bad[3] = 0;
  expect_error(write_file("dims0", bad, size, 0), "0 dimensions");
  memcpy(bad, bytes, size), bad[3] = 5;
  expect_error(write_file("dims5", bad, size, 0), "5 dimensions");
  memcpy(bad, bytes, size), bad[7] = 0;
  expect_error(write_file("zero", bad, size, 0), "dimension 0 of [0, 6] is 0");
  const uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 2};
  size_t header_only = 4 + 12;
  make_idx(bad, 3, (const uint32_t[3]){1, 1, 1}, 0);
  for (int i = 0; i < 3; i++)
    bad[4 + 4 * i] = (uint8_t)(huge[i] >> 24), bad[5 + 4 * i] = (uint8_t)(huge[i] >> 16),
    bad[6 + 4 * i] = (uint8_t)(huge[i] >> 8), bad[7 + 4 * i] = (uint8_t)huge[i];
  expect_error(write_file("overflow", bad, header_only, 0), "more than");
  expect_error(write_file("header", bytes, 9, 0), "header is cut short");
  expect_error(write_file("short3", bytes, 3, 0), "shorter than an IDX header");
  expect_error(write_file("cut", bytes, size - 1, 0), "its 2 dimensions [4, 6] say 24 (cut short)");
  make_idx(bad, 2, d, 3);
  expect_error(write_file("trailing", bad, size + 3, 0), "trailing bytes");
  /* A gzip bomb: 24 bytes declared, 1 MiB inflated. Said as longer than
   * declared, not as the bytes read before stopping (25: it said "IDX data
   * is 25 bytes"). */
  uint8_t *bomb = calloc(1, 1 << 20);
  assert_non_null(bomb);
  make_idx(bomb, 2, d, 0);
  expect_error(write_file("bomb.gz", bomb, 1 << 20, 1),
               "IDX data is longer than the 24 bytes its dimensions say (trailing bytes; read no "
               "further)");
  free(bomb);
  expect_error(write_file("cut.gz", bytes, size - 5, 1), "cut short");

  /* A gzip stream cut in the middle. */
  write_file("whole.gz", bytes, size, 1);
  FILE *f = fopen(path_of("whole.gz"), "rb");
  uint8_t gz[4096];
  size_t gz_size = fread(gz, 1, sizeof gz, f);
  fclose(f);
  expect_error(write_file("broken.gz", gz, gz_size / 2, 0), "");
  htp_idx idx;
  char err[256];
  assert_int_equal(htp_idx_read(path_of("broken.gz"), &idx, err, sizeof err), 1);

  /* Bytes after the gzip data (appended, or a plain tail): refused, where
   * zlib's gzread skipped them. Zeros too (padding is not gzip data). */
  uint8_t tail[4096 + 8];
  memcpy(tail, gz, gz_size);
  memcpy(tail + gz_size, "garbage", 7);
  expect_error(write_file("appended.gz", tail, gz_size + 7, 0), "bytes after the end of its gzip data");
  memset(tail + gz_size, 0, 8);
  expect_error(write_file("padded.gz", tail, gz_size + 8, 0), "bytes after the end of its gzip data");
  /* A byte of the compressed data changed: zlib's check fails. */
  memcpy(tail, gz, gz_size);
  tail[gz_size - 6] ^= 0x40; /* in the CRC-32 trailer */
  expect_error(write_file("flipped.gz", tail, gz_size, 0), "corrupt gzip data");
  /* Cut after the deflate data but before its trailer. */
  expect_error(write_file("notrailer.gz", gz, gz_size - 4, 0), "cut short");

  /* Two gzip members one after the other are one file (as gzip -d reads
   * them): the header in the first, the data in the second. */
  write_file("head.gz", bytes, 12, 1);
  write_file("rest.gz", bytes + 12, size - 12, 1);
  uint8_t two[8192];
  size_t two_size = 0;
  for (int k = 0; k < 2; k++) {
    f = fopen(path_of(k ? "rest.gz" : "head.gz"), "rb");
    two_size += fread(two + two_size, 1, sizeof two - two_size, f);
    fclose(f);
  }
  if (htp_idx_read(write_file("two.gz", two, two_size, 0), &idx, err, sizeof err) != 0)
    fail_msg("%s", err);
  assert_int_equal(idx.count, 24);
  for (int i = 0; i < 24; i++) assert_int_equal(idx.data[i], i % 251);
  htp_idx_free(&idx);

  expect_error(dir, "not a regular file");
  expect_error("/dev/zero", "not a regular file");
  expect_error(path_of("missing"), "No such file");
  assert_int_equal(htp_idx_parse(NULL, 0, &idx, err, sizeof err), 1);
}

static void labelled_sets(void **state) {
  (void)state;
  uint8_t images[4096], labels[256];
  const uint32_t di[3] = {6, 4, 3}, dl[1] = {6}, dl5[1] = {5};
  const char *im = write_file("images", images, make_idx(images, 3, di, 0), 0);
  size_t ls = make_idx(labels, 1, dl, 0);
  for (int i = 0; i < 6; i++) labels[8 + i] = (uint8_t)(i % 3);
  const char *lb = write_file("labels", labels, ls, 0);
  htp_idx_set set;
  char err[256];
  if (htp_idx_read_set(im, lb, 10, &set, err, sizeof err) != 0) fail_msg("%s", err);
  assert_int_equal(set.count, 6);
  assert_int_equal(set.rows, 4);
  assert_int_equal(set.cols, 3);
  htp_idx_free_set(&set);
  assert_int_equal(htp_idx_read_set(im, lb, 2, &set, err, sizeof err), 1);
  assert_non_null(strstr(err, "label 2 is 2; the classes are 0..1"));
  const char *lb5 = write_file("labels5", labels, make_idx(labels, 1, dl5, 0), 0);
  assert_int_equal(htp_idx_read_set(im, lb5, 251, &set, err, sizeof err), 1);
  assert_non_null(strstr(err, "holds 6 images but"));
  assert_int_equal(htp_idx_read_set(lb, lb, 251, &set, err, sizeof err), 1);
  assert_non_null(strstr(err, "images need 3 dimensions"));
  assert_int_equal(htp_idx_read_set(im, im, 251, &set, err, sizeof err), 1);
  assert_non_null(strstr(err, "labels need 1 dimension"));
}

static void fashion_mnist(void **state) {
  (void)state;
  const char *root = "/usr/share/datasets/fashion-mnist";
  char images[256], labels[256];
  snprintf(images, sizeof images, "%s/t10k-images-idx3-ubyte.gz", root);
  snprintf(labels, sizeof labels, "%s/t10k-labels-idx1-ubyte.gz", root);
  if (access(images, R_OK) != 0) skip(); /* dataset-fashion-mnist not installed */
  htp_idx_set set;
  char err[256];
  if (htp_idx_read_set(images, labels, 10, &set, err, sizeof err) != 0) fail_msg("%s", err);
  assert_int_equal(set.count, 10000);
  assert_int_equal(set.rows, 28);
  assert_int_equal(set.cols, 28);
  int per_class[10] = {0};
  for (uint32_t i = 0; i < set.count; i++) per_class[set.labels.data[i]]++;
  for (int c = 0; c < 10; c++) assert_int_equal(per_class[c], 1000); /* balanced test set */
  htp_idx_free_set(&set);
  snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", root);
  snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", root);
  if (htp_idx_read_set(images, labels, 10, &set, err, sizeof err) != 0) fail_msg("%s", err);
  assert_int_equal(set.count, 60000);
  htp_idx_free_set(&set);
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(good_files),
      cmocka_unit_test(bad_files),
      cmocka_unit_test(labelled_sets),
      cmocka_unit_test(fashion_mnist),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  char command[512];
  snprintf(command, sizeof command, "rm -rf '%s'", dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return failed;
}
