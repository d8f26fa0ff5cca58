/*===- tools/htp-run/train/dataset.c - Fashion-MNIST batches for training -----===*
 *
 * See dataset.h. The shuffle and the augmentation draw from tools/rng.h,
 * the generator htp-run's random data uses.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/train/dataset.h"

#include "tools/htp-run/errors.h"

#include "tools/rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int htp_fmnist_file(const char *dir, htp_fmnist_split split, int labels, char *out,
                    size_t out_size) {
  return (size_t)snprintf(out, out_size, "%s/%s-%s", dir,
                          split == HTP_FMNIST_TRAIN ? "train" : "t10k",
                          labels ? "labels-idx1-ubyte.gz" : "images-idx3-ubyte.gz") >= out_size;
}

int htp_fmnist_load(const char *dir, htp_fmnist_split split, long limit, htp_idx_set *out,
                    char *err, size_t err_size) {
  memset(out, 0, sizeof *out);
  const char *prefix = split == HTP_FMNIST_TRAIN ? "train" : "t10k";
  struct stat info;
  int missing = stat(dir, &info) != 0;
  if (missing || !S_ISDIR(info.st_mode))
    return htp_set_error(err, err_size,
                         "%s: %s: no Fashion-MNIST here (install the Debian package %s, "
                         "or give --data DIR holding %s-images-idx3-ubyte.gz and its labels)",
                         dir, missing ? strerror(errno) : "not a directory", HTP_FMNIST_PACKAGE,
                         prefix);
  char images[4096], labels[4096];
  if (htp_fmnist_file(dir, split, 0, images, sizeof images) ||
      htp_fmnist_file(dir, split, 1, labels, sizeof labels))
    return htp_set_error(err, err_size, "%s: the directory name is too long", dir);
  const char *paths[2] = {images, labels};
  for (int i = 0; i < 2; i++)
    if (stat(paths[i], &info) != 0)
      return htp_set_error(err, err_size,
                           "%s: %s (Fashion-MNIST's %s set; the Debian package %s "
                           "installs it under %s)",
                           paths[i], strerror(errno),
                           split == HTP_FMNIST_TRAIN ? "training" : "test", HTP_FMNIST_PACKAGE,
                           "/usr/share/datasets/fashion-mnist");
  if (htp_idx_read_set(images, labels, HTP_FMNIST_CLASSES, out, err, err_size) != 0) return 1;
  if (out->rows != HTP_FMNIST_SIDE || out->cols != HTP_FMNIST_SIDE) {
    int rows = (int)out->rows, cols = (int)out->cols;
    htp_idx_free_set(out);
    return htp_set_error(err, err_size, "%s: images of %dx%d, not Fashion-MNIST's 28x28", images,
                         rows, cols);
  }
  if (limit > 0) {
    if ((uint64_t)limit > out->count) {
      uint32_t count = out->count;
      htp_idx_free_set(out);
      return htp_set_error(err, err_size, "--limit-%s %ld: %s holds only %u images",
                           split == HTP_FMNIST_TRAIN ? "train" : "test", limit, images, count);
    }
    out->count = (uint32_t)limit; /* the first `limit` examples; the rest stay unread */
  }
  return 0;
}

void htp_fmnist_shuffle(uint32_t *order, uint32_t n, uint64_t seed, int64_t epoch) {
  htp_rng r = htp_rng_seeded(seed ^ (UINT64_C(0x5851f42d4c957f2d) * (uint64_t)(epoch + 1)));
  for (uint32_t i = 0; i < n; i++)
    order[i] = i;
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = htp_rng_below(&r, i), t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
}

void htp_fmnist_augment(float *images, int rows, int max_shift, uint64_t seed, int64_t step) {
  enum { SIDE = HTP_FMNIST_SIDE };
  const uint32_t span = 2u * (uint32_t)(max_shift > 0 ? max_shift : 0) + 1u;
  const float background = -HTP_FMNIST_MEAN / HTP_FMNIST_STD;
  float copy[SIDE * SIDE];
  for (int row = 0; row < rows; row++) {
    htp_rng r = htp_rng_seeded(seed ^ (UINT64_C(0x2545f4914f6cdd1d) * (uint64_t)(step + 1)) ^
                               (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(row + 1)));
    const int flip = (int)htp_rng_below(&r, 2);
    /* Flip only draws no shift: flip-shift's draws stay as they were. */
    const int dy = span > 1 ? (int)htp_rng_below(&r, span) - max_shift : 0;
    const int dx = span > 1 ? (int)htp_rng_below(&r, span) - max_shift : 0;
    float *image = images + (size_t)row * SIDE * SIDE;
    memcpy(copy, image, sizeof copy);
    for (int y = 0; y < SIDE; y++)
      for (int x = 0; x < SIDE; x++) {
        const int sy = y - dy, shifted = x - dx, sx = flip ? SIDE - 1 - shifted : shifted;
        image[y * SIDE + x] = sy >= 0 && sy < SIDE && shifted >= 0 && shifted < SIDE
                                  ? copy[sy * SIDE + sx]
                                  : background;
      }
  }
}

void htp_fmnist_erase(float *images, int rows, double p, uint64_t seed, int64_t step) {
  enum { SIDE = HTP_FMNIST_SIDE };
  const double min_area = 0.02, max_area = 0.4, max_aspect = 3.3, min_aspect = 0.3;
  for (int row = 0; row < rows; row++) {
    /* Salted apart from htp_fmnist_augment's stream of the same row. */
    htp_rng r = htp_rng_seeded(seed ^ (UINT64_C(0xd1b54a32d192ed03) * (uint64_t)(step + 1)) ^
                               (UINT64_C(0x8cb92ba72f3d8dd7) * (uint64_t)(row + 1)));
    if (htp_rng_unit(&r) > p) continue;
    /* A box that does not fit is drawn again, as timm's RandomErasing does
     * (10 tries); one that never fits leaves the image as it is. */
    for (int attempt = 0; attempt < 10; attempt++) {
      const double area = SIDE * SIDE * (min_area + (max_area - min_area) * htp_rng_unit(&r));
      const double aspect = exp(log(min_aspect) + (log(max_aspect) - log(min_aspect)) * htp_rng_unit(&r));
      const int h = (int)lround(sqrt(area * aspect)), w = (int)lround(sqrt(area / aspect));
      if (h < 1 || w < 1 || h > SIDE || w > SIDE) continue;
      const int top = (int)htp_rng_below(&r, (uint32_t)(SIDE - h + 1));
      const int left = (int)htp_rng_below(&r, (uint32_t)(SIDE - w + 1));
      float *image = images + (size_t)row * SIDE * SIDE;
      for (int y = top; y < top + h; y++)
        for (int x = left; x < left + w; x++) { /* Box-Muller, one of the pair */
          const double radius = sqrt(-2.0 * log(htp_rng_unit(&r)));
          image[y * SIDE + x] = (float)(radius * cos(6.283185307179586 * htp_rng_unit(&r)));
        }
      break;
    }
  }
}

void htp_fmnist_smooth_targets(float *targets, int rows, double epsilon) {
  const float off = (float)(epsilon / HTP_FMNIST_CLASSES), on = (float)(1.0 - epsilon) + off;
  for (int i = 0; i < rows * HTP_FMNIST_CLASSES; i++)
    targets[i] = targets[i] > 0.5f ? on : off;
}

int htp_fmnist_batch(const htp_idx_set *set, const uint32_t *order, uint32_t start, int batch,
                     float *images, float *targets, int32_t *labels) {
  const size_t pixels = (size_t)HTP_FMNIST_SIDE * HTP_FMNIST_SIDE;
  int real = 0;
  for (int row = 0; row < batch; row++) {
    float *image = images + (size_t)row * pixels, *target = targets + (size_t)row * HTP_FMNIST_CLASSES;
    memset(target, 0, HTP_FMNIST_CLASSES * sizeof *target);
    uint64_t position = (uint64_t)start + (uint64_t)row;
    if (position >= set->count) {
      memset(image, 0, pixels * sizeof *image);
      continue;
    }
    uint32_t index = order ? order[position] : (uint32_t)position;
    const uint8_t *source = set->images.data + (size_t)index * pixels;
    for (size_t p = 0; p < pixels; p++)
      image[p] = ((float)source[p] / 255.0f - HTP_FMNIST_MEAN) / HTP_FMNIST_STD;
    int label = set->labels.data[index];
    target[label] = 1.0f;
    if (labels)
      labels[row] = label;
    real++;
  }
  return real;
}
