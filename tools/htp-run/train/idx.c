/*===- tools/htp-run/train/idx.c - IDX files (MNIST, Fashion-MNIST) -----------===*
 *
 * See idx.h. The file is read whole through zlib's gzread (which passes a
 * plain file through unchanged), with a byte cap one past the largest valid
 * file, so a huge or endless input (a gzip bomb) stops at the cap instead
 * of filling memory; then parsed from memory.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/train/idx.h"

#include "tools/htp-run/errors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

void htp_idx_free(htp_idx *idx) {
  if (!idx) return;
  free(idx->data);
  memset(idx, 0, sizeof *idx);
}

static uint32_t big_endian32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

int htp_idx_parse(const uint8_t *bytes, size_t size, htp_idx *out, char *err,
                  size_t err_size) {
  if (!out) return htp_set_error(err, err_size, "idx: out is NULL");
  memset(out, 0, sizeof *out);
  if (!bytes || size < 4)
    return htp_set_error(err, err_size, "%zu bytes is shorter than an IDX header", size);
  if (bytes[0] != 0 || bytes[1] != 0)
    return htp_set_error(err, err_size,
                         "not an IDX file (the first two bytes are 0x%02x 0x%02x, not 0)", bytes[0],
                         bytes[1]);
  if (bytes[2] != 0x08)
    return htp_set_error(err, err_size,
                         "IDX element type 0x%02x is not supported (only 0x08, unsigned bytes)",
                         bytes[2]);
  const int dims = bytes[3];
  if (dims < 1 || dims > HTP_IDX_MAX_DIMS)
    return htp_set_error(err, err_size, "IDX file has %d dimensions; 1 to %d are supported", dims,
                         HTP_IDX_MAX_DIMS);
  const size_t header = 4 + 4 * (size_t)dims;
  if (size < header)
    return htp_set_error(err, err_size, "IDX header is cut short (%zu of %zu bytes)", size, header);
  uint64_t count = 1;
  for (int d = 0; d < dims; d++) {
    out->dims[d] = big_endian32(bytes + 4 + 4 * d);
    if (out->dims[d] == 0) return htp_set_error(err, err_size, "IDX dimension %d is 0", d);
    if (count > HTP_IDX_MAX_BYTES / out->dims[d])
      return htp_set_error(err, err_size, "IDX dimensions hold more than %llu bytes",
                           (unsigned long long)HTP_IDX_MAX_BYTES);
    count *= out->dims[d];
  }
  if (size - header != count)
    return htp_set_error(err, err_size, "IDX data is %zu bytes; its dimensions say %llu%s",
                         size - header, (unsigned long long)count,
                         size - header > count ? " (trailing bytes)" : " (cut short)");
  out->data = malloc(count);
  if (!out->data)
    return htp_set_error(err, err_size, "out of memory for %llu bytes", (unsigned long long)count);
  memcpy(out->data, bytes + header, count);
  out->num_dims = dims;
  out->count = count;
  return 0;
}

int htp_idx_read(const char *path, htp_idx *out, char *err, size_t err_size) {
  if (!out) return htp_set_error(err, err_size, "idx: out is NULL");
  memset(out, 0, sizeof *out);
  if (!path) return htp_set_error(err, err_size, "idx: path is NULL");
  struct stat st;
  if (stat(path, &st) != 0) return htp_set_error(err, err_size, "%s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return htp_set_error(err, err_size, "%s: not a regular file", path);
  gzFile file = gzopen(path, "rb");
  if (!file) return htp_set_error(err, err_size, "%s: cannot open: %s", path, strerror(errno));
  /* One byte past the largest valid file tells "too long" from "exact". */
  const uint64_t cap = 4 + 4 * HTP_IDX_MAX_DIMS + HTP_IDX_MAX_BYTES + 1;
  size_t size = 0, capacity = 1 << 16;
  uint8_t *bytes = malloc(capacity);
  int rc = bytes ? 0 : htp_set_error(err, err_size, "%s: out of memory", path);
  while (rc == 0) {
    if (size == capacity) {
      size_t grown = capacity * 2 > cap ? (size_t)cap : capacity * 2;
      uint8_t *more = grown > capacity ? realloc(bytes, grown) : NULL;
      if (!more) {
        rc = htp_set_error(err, err_size,
                           "%s: longer than any IDX file this reader accepts (%llu bytes)", path,
                           (unsigned long long)cap - 1);
        break;
      }
      bytes = more;
      capacity = grown;
    }
    size_t want = capacity - size > (1u << 30) ? (1u << 30) : capacity - size;
    int got = gzread(file, bytes + size, (unsigned)want);
    if (got < 0) {
      int code;
      const char *why = gzerror(file, &code);
      rc = htp_set_error(err, err_size, "%s: %s", path, code == Z_ERRNO ? strerror(errno) : why);
    } else if (got == 0) {
      int code;
      const char *why = gzerror(file, &code);
      if (code != Z_OK && code != Z_STREAM_END)
        rc = htp_set_error(err, err_size, "%s: %s", path, why);
      break;
    } else
      size += (size_t)got;
  }
  gzclose(file);
  if (rc == 0) {
    char why[256];
    if (htp_idx_parse(bytes, size, out, why, sizeof why) != 0)
      rc = htp_set_error(err, err_size, "%s: %s", path, why);
  }
  free(bytes);
  return rc;
}

void htp_idx_free_set(htp_idx_set *set) {
  if (!set) return;
  htp_idx_free(&set->images);
  htp_idx_free(&set->labels);
  memset(set, 0, sizeof *set);
}

int htp_idx_read_set(const char *images_path, const char *labels_path, int classes,
                     htp_idx_set *out, char *err, size_t err_size) {
  if (!out) return htp_set_error(err, err_size, "idx: out is NULL");
  memset(out, 0, sizeof *out);
  if (htp_idx_read(images_path, &out->images, err, err_size) != 0) return 1;
  if (htp_idx_read(labels_path, &out->labels, err, err_size) != 0) {
    htp_idx_free_set(out);
    return 1;
  }
  int rc = 0;
  if (out->images.num_dims != 3)
    rc = htp_set_error(err, err_size, "%s: images need 3 dimensions [count, rows, cols], not %d",
                       images_path, out->images.num_dims);
  else if (out->labels.num_dims != 1)
    rc = htp_set_error(err, err_size, "%s: labels need 1 dimension, not %d", labels_path,
                       out->labels.num_dims);
  else if (out->images.dims[0] != out->labels.dims[0])
    rc = htp_set_error(err, err_size, "%s holds %u images but %s holds %u labels", images_path,
                       out->images.dims[0], labels_path, out->labels.dims[0]);
  for (uint64_t i = 0; rc == 0 && i < out->labels.count; i++)
    if (out->labels.data[i] >= classes)
      rc = htp_set_error(err, err_size, "%s: label %llu is %u; the classes are 0..%d", labels_path,
                         (unsigned long long)i, out->labels.data[i], classes - 1);
  if (rc != 0) {
    htp_idx_free_set(out);
    return 1;
  }
  out->count = out->images.dims[0];
  out->rows = out->images.dims[1];
  out->cols = out->images.dims[2];
  return 0;
}
