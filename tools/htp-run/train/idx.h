/*===- tools/htp-run/train/idx.h - IDX files (MNIST, Fashion-MNIST) -----------===*
 *
 * Reads the IDX format of the MNIST family (Debian's dataset-fashion-mnist
 * ships them gzipped under /usr/share/datasets/fashion-mnist): a big-endian
 * header — two zero bytes, a type byte (0x08: unsigned bytes, the only type
 * these data sets use), the number of dimensions — then one big-endian
 * uint32 per dimension, then the data, nothing after it. Plain and gzipped
 * files are read alike (zlib). Everything is checked before it is trusted:
 * a regular file (not a device or a FIFO), the magic, 1..4 dimensions, each
 * >= 1, the product within HTP_IDX_MAX_BYTES, the data exactly that long.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TRAIN_IDX_H
#define HTP_TRAIN_IDX_H

#include <stddef.h>
#include <stdint.h>

#define HTP_IDX_MAX_DIMS 4
#define HTP_IDX_MAX_BYTES ((uint64_t)1 << 30) /* 1 GiB: 70,000 28x28 images are 55 MB */

typedef struct htp_idx {
  int num_dims;
  uint32_t dims[HTP_IDX_MAX_DIMS];
  uint64_t count; /* product of dims */
  uint8_t *data;  /* count bytes, row-major; owned */
} htp_idx;

/* Reads path (plain or gzip) into *out. 0 on success; else 1 with why in
 * err (path named) and *out empty. */
int htp_idx_read(const char *path, htp_idx *out, char *err, size_t err_size);
/* The same from memory holding a plain (not gzipped) IDX file; what the
 * fuzzer drives. */
int htp_idx_parse(const uint8_t *bytes, size_t size, htp_idx *out, char *err, size_t err_size);
void htp_idx_free(htp_idx *idx); /* accepts NULL and an empty one */

/* A labelled image set: images [count, rows, cols] and labels [count], both
 * of the same count, labels < classes. 0 on success, else 1 with why. */
typedef struct htp_idx_set {
  htp_idx images, labels;
  uint32_t count, rows, cols;
} htp_idx_set;
int htp_idx_read_set(const char *images_path, const char *labels_path, int classes,
                     htp_idx_set *out, char *err, size_t err_size);
void htp_idx_free_set(htp_idx_set *set);

#endif /* HTP_TRAIN_IDX_H */
