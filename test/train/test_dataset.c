/*===- test/train/test_dataset.c - Batches, shuffle and init for --train ---===*
 *
 * The pieces of htp-run --train that need no block: the seeded shuffle (a
 * permutation; the same for the same seed and epoch, another for another),
 * batches (normalisation by Fashion-MNIST's mean and std, one-hot targets,
 * zero padding past the end), the loader's errors (a missing directory
 * names the Debian package; a device is not a directory), and the init's
 * rules and statistics (mean 0 and std 0.02 within sampling error, ones
 * and zeros by name, the same numbers for the same seed), and the
 * augmentation (each image one flip and shift within bounds, background
 * where nothing moved in, every flip and shift drawn, the same draws for
 * the same seed and step).
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/train/dataset.h"
#include "tools/htp-run/train/init.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_shuffle(void **state) {
  (void)state;
  enum { N = 1000 };
  static uint32_t a[N], b[N], c[N];
  static int seen[N];
  htp_fmnist_shuffle(a, N, 42, 3);
  htp_fmnist_shuffle(b, N, 42, 3);
  htp_fmnist_shuffle(c, N, 42, 4);
  assert_memory_equal(a, b, sizeof a);
  assert_memory_not_equal(a, c, sizeof a);
  int moved = 0;
  for (int i = 0; i < N; i++) {
    assert_true(a[i] < N);
    seen[a[i]]++;
    moved += a[i] != (uint32_t)i;
  }
  for (int i = 0; i < N; i++)
    assert_int_equal(seen[i], 1);
  assert_true(moved > N * 9 / 10);
  htp_fmnist_shuffle(b, N, 43, 3);
  assert_memory_not_equal(a, b, sizeof a);
  htp_fmnist_shuffle(a, 1, 42, 0);
  assert_int_equal(a[0], 0);
}

static void test_batch(void **state) {
  (void)state;
  enum { COUNT = 3, PIXELS = 28 * 28, B = 4 };
  static uint8_t images[COUNT * PIXELS], labels[COUNT] = {7, 0, 9};
  for (int i = 0; i < COUNT * PIXELS; i++)
    images[i] = (uint8_t)(i * 37);
  htp_idx_set set;
  memset(&set, 0, sizeof set);
  set.images.data = images;
  set.labels.data = labels;
  set.count = COUNT;
  static float x[B * PIXELS], t[B * 10];
  int32_t got[B] = {-1, -1, -1, -1};
  const uint32_t order[COUNT] = {2, 0, 1};
  assert_int_equal(htp_fmnist_batch(&set, order, 1, B, x, t, got), 2);
  /* Rows: example order[1] = 0, order[2] = 1, then two padding rows. */
  assert_int_equal(got[0], 7);
  assert_int_equal(got[1], 0);
  for (int p = 0; p < PIXELS; p++) {
    double expected = ((double)images[p] / 255.0 - 0.2860) / 0.3530;
    assert_true(fabs(x[p] - expected) < 1e-5);
    assert_true(fabs(x[PIXELS + p] - ((double)images[PIXELS + p] / 255.0 - 0.2860) / 0.3530) <
                1e-5);
    assert_true(x[2 * PIXELS + p] == 0 && x[3 * PIXELS + p] == 0);
  }
  for (int k = 0; k < 10; k++) {
    assert_true(t[k] == (k == 7 ? 1.0f : 0.0f));
    assert_true(t[10 + k] == (k == 0 ? 1.0f : 0.0f));
    assert_true(t[20 + k] == 0 && t[30 + k] == 0);
  }
  /* Without an order: the set's own. */
  assert_int_equal(htp_fmnist_batch(&set, NULL, 0, 2, x, t, got), 2);
  assert_int_equal(got[0], 7);
  assert_int_equal(got[1], 0);
}

/* Pixels numbered 1..784 (any value but the background): each augmented
 * image must be one (flip, dy, dx) of its original. */
static void test_augment(void **state) {
  (void)state;
  enum { ROWS = 1000, SIDE = HTP_FMNIST_SIDE, PIXELS = SIDE * SIDE, SPAN = 2 * HTP_FMNIST_SHIFT + 1 };
  static float images[ROWS * PIXELS], again[ROWS * PIXELS];
  for (int r = 0; r < ROWS; r++)
    for (int p = 0; p < PIXELS; p++)
      images[r * PIXELS + p] = (float)(p + 1);
  memcpy(again, images, sizeof images);
  htp_fmnist_augment(images, ROWS, HTP_FMNIST_SHIFT, 7, 11);
  htp_fmnist_augment(again, ROWS, HTP_FMNIST_SHIFT, 7, 11);
  assert_memory_equal(images, again, sizeof images);
  const float background = -HTP_FMNIST_MEAN / HTP_FMNIST_STD;
  int drawn[2][SPAN][SPAN] = {{{0}}};
  for (int r = 0; r < ROWS; r++) {
    const float *image = images + r * PIXELS;
    int matches = 0;
    for (int flip = 0; flip < 2; flip++)
      for (int dy = -HTP_FMNIST_SHIFT; dy <= HTP_FMNIST_SHIFT; dy++)
        for (int dx = -HTP_FMNIST_SHIFT; dx <= HTP_FMNIST_SHIFT; dx++) {
          int same = 1;
          for (int y = 0; y < SIDE && same; y++)
            for (int x = 0; x < SIDE && same; x++) {
              const int sy = y - dy, sx = x - dx;
              const float want = sy < 0 || sy >= SIDE || sx < 0 || sx >= SIDE
                                     ? background
                                     : (float)(sy * SIDE + (flip ? SIDE - 1 - sx : sx) + 1);
              same = image[y * SIDE + x] == want;
            }
          if (same) {
            matches++;
            drawn[flip][dy + HTP_FMNIST_SHIFT][dx + HTP_FMNIST_SHIFT]++;
          }
        }
    assert_int_equal(matches, 1);
  }
  for (int flip = 0; flip < 2; flip++)
    for (int dy = 0; dy < SPAN; dy++)
      for (int dx = 0; dx < SPAN; dx++)
        assert_true(drawn[flip][dy][dx] > 0); /* 50 choices: each ~20 times */
  /* Another step draws anew (10 rows all alike: odds 50^-10). */
  for (int r = 0; r < 10; r++)
    for (int p = 0; p < PIXELS; p++)
      again[r * PIXELS + p] = (float)(p + 1);
  htp_fmnist_augment(again, 10, HTP_FMNIST_SHIFT, 7, 12);
  assert_memory_not_equal(again, images, 10 * PIXELS * sizeof(float));
}

/* Flip only: each image is itself or its mirror, never shifted, both seen. */
static void test_augment_flip(void **state) {
  (void)state;
  enum { ROWS = 200, SIDE = HTP_FMNIST_SIDE, PIXELS = SIDE * SIDE };
  static float images[ROWS * PIXELS];
  for (int r = 0; r < ROWS; r++)
    for (int p = 0; p < PIXELS; p++)
      images[r * PIXELS + p] = (float)(p + 1);
  htp_fmnist_augment(images, ROWS, 0, 7, 11);
  int flipped = 0;
  for (int r = 0; r < ROWS; r++) {
    int same = 1, mirror = 1;
    for (int y = 0; y < SIDE; y++)
      for (int x = 0; x < SIDE; x++) {
        const float v = images[r * PIXELS + y * SIDE + x];
        same &= v == (float)(y * SIDE + x + 1);
        mirror &= v == (float)(y * SIDE + (SIDE - 1 - x) + 1);
      }
    assert_true(same != mirror);
    flipped += mirror;
  }
  assert_true(flipped > ROWS / 4 && flipped < 3 * ROWS / 4);
}

/* Random erasing: an image is untouched or differs in exactly one box of
 * 2-40 % of the image (the bounding box of its changed pixels, all of them
 * changed: the fill is noise); about p of the images are erased; the same
 * (seed, step) erases the same boxes; p 0 erases none, p 1 every image;
 * rows past `rows` stay as they were. */
static int erased_box(const float *image, int *area) {
  enum { SIDE = HTP_FMNIST_SIDE };
  int top = SIDE, bottom = -1, left = SIDE, right = -1, changed = 0;
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++)
      if (image[y * SIDE + x] != (float)(y * SIDE + x + 1)) {
        changed++;
        top = y < top ? y : top, bottom = y > bottom ? y : bottom;
        left = x < left ? x : left, right = x > right ? x : right;
      }
  *area = changed;
  if (!changed) return 0;
  assert_int_equal(changed, (bottom - top + 1) * (right - left + 1));
  return 1;
}

static void test_erase(void **state) {
  (void)state;
  enum { ROWS = 400, SIDE = HTP_FMNIST_SIDE, PIXELS = SIDE * SIDE };
  static float images[(ROWS + 1) * PIXELS], again[(ROWS + 1) * PIXELS];
  const double probabilities[] = {0.0, 0.5, 1.0};
  for (int t = 0; t < 3; t++) {
    for (int r = 0; r <= ROWS; r++)
      for (int p = 0; p < PIXELS; p++)
        images[r * PIXELS + p] = (float)(p + 1);
    memcpy(again, images, sizeof images);
    htp_fmnist_erase(images, ROWS, probabilities[t], 7, 11);
    htp_fmnist_erase(again, ROWS, probabilities[t], 7, 11);
    assert_memory_equal(images, again, sizeof images);
    int erased = 0, area;
    for (int r = 0; r < ROWS; r++)
      if (erased_box(images + r * PIXELS, &area)) {
        erased++;
        assert_true(area >= PIXELS / 50 - 4 && area <= 0.4 * PIXELS + 2 * SIDE);
      }
    assert_false(erased_box(images + ROWS * PIXELS, &area));
    if (t == 0) assert_int_equal(erased, 0);
    if (t == 1) assert_true(erased > ROWS / 2 - 60 && erased < ROWS / 2 + 60);
    if (t == 2) assert_true(erased >= ROWS - 4); /* a box may fail its 10 tries */
  }
  htp_fmnist_erase(again, ROWS, 0.5, 7, 12); /* another step, other boxes */
  assert_memory_not_equal(images, again, sizeof images);
}

/* Smoothed targets: (1 - e) + e / 10 at the label, e / 10 elsewhere, rows
 * summing to 1; rows past `rows` (padding) untouched. */
static void test_smooth_targets(void **state) {
  (void)state;
  float targets[3 * HTP_FMNIST_CLASSES] = {0};
  targets[4] = 1;
  targets[HTP_FMNIST_CLASSES + 9] = 1;
  htp_fmnist_smooth_targets(targets, 2, 0.1);
  for (int r = 0; r < 2; r++) {
    double sum = 0;
    for (int c = 0; c < HTP_FMNIST_CLASSES; c++) {
      const float v = targets[r * HTP_FMNIST_CLASSES + c];
      const int label = c == (r == 0 ? 4 : 9);
      assert_float_equal(v, label ? 0.91 : 0.01, 1e-7);
      sum += v;
    }
    assert_float_equal(sum, 1.0, 1e-6);
  }
  for (int c = 0; c < HTP_FMNIST_CLASSES; c++)
    assert_true(targets[2 * HTP_FMNIST_CLASSES + c] == 0.0f);
}

static void test_load_errors(void **state) {
  (void)state;
  htp_idx_set set;
  char err[1024];
  assert_int_equal(htp_fmnist_load("/nonexistent-htp-data", HTP_FMNIST_TRAIN, 0, &set, err,
                                   sizeof err), 1);
  assert_non_null(strstr(err, "/nonexistent-htp-data"));
  assert_non_null(strstr(err, "dataset-fashion-mnist"));
  assert_int_equal(htp_fmnist_load("/dev/zero", HTP_FMNIST_TEST, 0, &set, err, sizeof err), 1);
  assert_non_null(strstr(err, "not a directory"));
  /* A directory without the files: the missing file is named. */
  assert_int_equal(htp_fmnist_load("/", HTP_FMNIST_TEST, 0, &set, err, sizeof err), 1);
  assert_non_null(strstr(err, "//t10k-images-idx3-ubyte.gz"));
  assert_non_null(strstr(err, "dataset-fashion-mnist"));
}

static void test_init(void **state) {
  (void)state;
  enum { N = 200000 };
  static float w[N], again[N], other[N];
  assert_int_equal(htp_train_init_kind("blocks.0.norm1.weight"), HTP_INIT_ONES);
  assert_int_equal(htp_train_init_kind("norm.bias"), HTP_INIT_ZEROS);
  assert_int_equal(htp_train_init_kind("head.bias"), HTP_INIT_ZEROS);
  assert_int_equal(htp_train_init_kind("patch_embed.proj.bias"), HTP_INIT_ZEROS);
  assert_int_equal(htp_train_init_kind("cls_token"), HTP_INIT_TRUNC_NORMAL);
  assert_int_equal(htp_train_init_kind("pos_embed"), HTP_INIT_TRUNC_NORMAL);
  assert_int_equal(htp_train_init_kind("blocks.1.attn.qkv.weight"), HTP_INIT_TRUNC_NORMAL);
  htp_train_init_param("blocks.0.attn.qkv.weight", N, 11, w);
  htp_train_init_param("blocks.0.attn.qkv.weight", N, 11, again);
  assert_memory_equal(w, again, sizeof w);
  htp_train_init_param("blocks.0.attn.qkv.weight", N, 12, other);
  assert_memory_not_equal(w, other, sizeof w);
  htp_train_init_param("blocks.0.attn.proj.weight", N, 11, other);
  assert_memory_not_equal(w, other, sizeof w);
  double sum = 0, squares = 0, largest = 0;
  for (int i = 0; i < N; i++) {
    sum += w[i];
    squares += (double)w[i] * w[i];
    largest = fabs(w[i]) > largest ? fabs(w[i]) : largest;
  }
  double mean = sum / N, std = sqrt(squares / N - mean * mean);
  /* Sampling error of the mean: 0.02 / sqrt(N) = 4.5e-5; of the std about
   * 0.02 / sqrt(2N) = 3.2e-5. Five of each. */
  assert_true(fabs(mean) < 2.3e-4);
  assert_true(fabs(std - 0.02) < 1.6e-4);
  assert_true(largest <= 2.0 && largest > 0.06); /* the tails are there, within the bounds */
  htp_train_init_param("norm.weight", 5, 1, w);
  htp_train_init_param("head.bias", 5, 1, again);
  for (int i = 0; i < 5; i++)
    assert_true(w[i] == 1.0f && again[i] == 0.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shuffle),
      cmocka_unit_test(test_batch),
      cmocka_unit_test(test_augment),
      cmocka_unit_test(test_augment_flip),
      cmocka_unit_test(test_smooth_targets),
      cmocka_unit_test(test_erase),
      cmocka_unit_test(test_load_errors),
      cmocka_unit_test(test_init),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
