/*===- tools/htp-run/train/idx.c - IDX files (MNIST, Fashion-MNIST) -----------===*
 *
 * See idx.h. The file is read, through zlib's inflate where it is gzip data:
 * its header, then the bytes the header declares and one more, so a huge or endless input (a gzip bomb) stops there
 * instead of filling memory; then parsed from memory.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/train/idx.h"

#include "tools/htp-run/errors.h"

#include <errno.h>
#include <stddef.h>
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
  /* The header's dims, for the messages: a file of the wrong kind (labels
   * where images belong) shows here. */
  char shape[16 * HTP_IDX_MAX_DIMS] = "";
  for (int d = 0, used = 0; d < dims; d++)
    used += snprintf(shape + used, sizeof shape - (size_t)used, "%s%u", d ? ", " : "",
                     big_endian32(bytes + 4 + 4 * d));
  uint64_t count = 1;
  for (int d = 0; d < dims; d++) {
    out->dims[d] = big_endian32(bytes + 4 + 4 * d);
    if (out->dims[d] == 0)
      return htp_set_error(err, err_size, "IDX dimension %d of [%s] is 0", d, shape);
    if (count > HTP_IDX_MAX_BYTES / out->dims[d])
      return htp_set_error(err, err_size, "IDX dimensions [%s] hold more than %llu bytes", shape,
                           (unsigned long long)HTP_IDX_MAX_BYTES);
    count *= out->dims[d];
  }
  if (size - header != count)
    return htp_set_error(err, err_size, "IDX data is %zu bytes; its %d dimension%s [%s] say %llu%s",
                         size - header, dims, dims == 1 ? "" : "s", shape,
                         (unsigned long long)count,
                         size - header > count ? " (trailing bytes)" : " (cut short)");
  out->data = malloc(count);
  if (!out->data)
    return htp_set_error(err, err_size, "out of memory for %llu bytes", (unsigned long long)count);
  memcpy(out->data, bytes + header, count);
  out->num_dims = dims;
  out->count = count;
  return 0;
}

/* The file's bytes, inflated when it starts as gzip does (1f 8b): zlib's
 * inflate over the file (gzread, used before, skips whatever follows the
 * last gzip member, so bytes appended to a data set passed unnoticed).
 * Members one after another are one stream, as gzip(1) reads them. */
typedef struct source {
  FILE *file;
  const char *path;
  int gzip;      /* inflating */
  int inflating; /* z initialised */
  int ended;     /* the last member ended at the end of the file */
  z_stream z;
  uint8_t in[1 << 16];
} source;

/* More of the file into s->in; 0 at its end; -1 with err on a read error. */
static int refill(source *s, char *err, size_t err_size) {
  size_t got = fread(s->in, 1, sizeof s->in, s->file);
  if (got == 0 && ferror(s->file)) {
    htp_set_error(err, err_size, "%s: %s", s->path, strerror(errno));
    return -1;
  }
  s->z.next_in = s->in;
  s->z.avail_in = (uInt)got;
  return got > 0;
}

/* After a gzip member's end: the file ends, or another member starts. */
static int next_member(source *s, char *err, size_t err_size) {
  if (s->z.avail_in == 0) {
    int more = refill(s, err, err_size);
    if (more < 0) return 1;
    if (more == 0) {
      s->ended = 1;
      return 0;
    }
  }
  if (s->z.next_in[0] != 0x1f || (s->z.avail_in > 1 && s->z.next_in[1] != 0x8b))
    return htp_set_error(err, err_size, "%s: bytes after the end of its gzip data (a file "
                         "appended to, or not one gzip file)", s->path);
  return inflateReset(&s->z) == Z_OK ? 0 : htp_set_error(err, err_size, "%s: zlib: %s", s->path,
                                                         s->z.msg ? s->z.msg : "reset failed");
}

/* Reads up to want more bytes into to (fewer at the end of the data),
 * adding what it read to *size. Non-zero with err on a read error or
 * corrupt gzip data. */
static int read_upto(source *s, uint8_t *to, size_t want, size_t *size, char *err,
                     size_t err_size) {
  size_t done = 0;
  if (!s->gzip) {
    done = fread(to, 1, want, s->file);
    if (done < want && ferror(s->file))
      return htp_set_error(err, err_size, "%s: %s", s->path, strerror(errno));
    *size += done;
    return 0;
  }
  while (done < want && !s->ended) {
    if (s->z.avail_in == 0) {
      int more = refill(s, err, err_size);
      if (more < 0) return 1;
      if (more == 0)
        return htp_set_error(err, err_size, "%s: its gzip data is cut short (the file ends "
                             "inside the stream)", s->path);
    }
    const size_t chunk = want - done > (1u << 30) ? (1u << 30) : want - done;
    s->z.next_out = to + done;
    s->z.avail_out = (uInt)chunk;
    int rc = inflate(&s->z, Z_NO_FLUSH);
    done += chunk - s->z.avail_out;
    if (rc == Z_STREAM_END) {
      if (next_member(s, err, err_size)) return 1;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return htp_set_error(err, err_size, "%s: corrupt gzip data: %s", s->path,
                           s->z.msg ? s->z.msg : zError(rc));
    }
  }
  *size += done;
  return 0;
}

/* Opens path for read_upto: gzip or plain by its first two bytes. */
static int source_open(source *s, const char *path, char *err, size_t err_size) {
  memset(s, 0, offsetof(source, in));
  s->path = path;
  if (!(s->file = fopen(path, "rb")))
    return htp_set_error(err, err_size, "%s: cannot open: %s", path, strerror(errno));
  uint8_t magic[2];
  size_t got = fread(magic, 1, 2, s->file);
  s->gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (ferror(s->file) || fseek(s->file, 0, SEEK_SET) != 0)
    return htp_set_error(err, err_size, "%s: %s", path, strerror(errno));
  if (s->gzip) {
    if (inflateInit2(&s->z, 15 + 16) != Z_OK) /* gzip wrapping only */
      return htp_set_error(err, err_size, "%s: zlib: %s", path, s->z.msg ? s->z.msg : "init failed");
    s->inflating = 1;
  }
  return 0;
}

static void source_close(source *s) {
  if (s->inflating) inflateEnd(&s->z);
  if (s->file) fclose(s->file);
}

int htp_idx_read(const char *path, htp_idx *out, char *err, size_t err_size) {
  if (!out) return htp_set_error(err, err_size, "idx: out is NULL");
  memset(out, 0, sizeof *out);
  if (!path) return htp_set_error(err, err_size, "idx: path is NULL");
  struct stat st;
  if (stat(path, &st) != 0) return htp_set_error(err, err_size, "%s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return htp_set_error(err, err_size, "%s: not a regular file", path);
  source *file = malloc(sizeof *file);
  if (!file) return htp_set_error(err, err_size, "%s: out of memory", path);
  if (source_open(file, path, err, err_size)) {
    source_close(file);
    free(file);
    return 1;
  }
  /* The header first, then the bytes it declares and one more (to tell
   * "trailing bytes" from "exact"): a gzip bomb is inflated no further than
   * its header claims, and never past the largest valid file. */
  uint8_t head[4 + 4 * HTP_IDX_MAX_DIMS];
  size_t size = 0;
  int rc = read_upto(file, head, 4, &size, err, err_size);
  const size_t header = 4 + 4 * (size_t)(size == 4 && head[3] <= HTP_IDX_MAX_DIMS ? head[3] : 0);
  if (rc == 0 && size == 4 && header > 4)
    rc = read_upto(file, head + 4, header - 4, &size, err, err_size);
  uint64_t declared = 1;
  for (size_t d = 4; rc == 0 && size == header && header > 4 && d < header; d += 4) {
    const uint32_t dim = big_endian32(head + d);
    declared = dim && declared <= HTP_IDX_MAX_BYTES / dim ? declared * dim : 0;
  }
  uint8_t *bytes = NULL;
  if (rc == 0 && size == header && header > 4 && declared > 0) {
    if (!(bytes = malloc(header + (size_t)declared + 1))) {
      source_close(file);
      free(file);
      return htp_set_error(err, err_size, "%s: out of memory for %llu bytes", path,
                           (unsigned long long)declared);
    }
    memcpy(bytes, head, header);
    rc = read_upto(file, bytes + header, (size_t)declared + 1, &size, err, err_size);
  }
  source_close(file);
  free(file);
  /* Read up to one byte past what the header declares: more is there, how
   * much unknown (a gzip bomb is not inflated to find out). */
  if (rc == 0 && bytes && size == header + (size_t)declared + 1) {
    free(bytes);
    return htp_set_error(err, err_size, "%s: IDX data is longer than the %llu bytes its "
                         "dimensions say (trailing bytes; read no further)", path,
                         (unsigned long long)declared);
  }
  if (rc == 0) { /* a header that declares no data is parsed alone: its message */
    char why[256];
    if (htp_idx_parse(bytes ? bytes : head, size, out, why, sizeof why) != 0)
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
