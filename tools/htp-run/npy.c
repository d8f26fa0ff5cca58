/*===- tools/htp-run/npy.c - Read and write NumPy .npy files -----------===*
 *
 * This file implements npy.h. The header dict is parsed strictly: exactly
 * the three keys numpy writes, each once, quoted with ' or ". Files are
 * mapped through file_map.h (regular files only) and parsed in memory by
 * the same htp_npy_parse the fuzzer calls.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/npy.h"

#include "tools/htp-run/convert.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

/* A cursor over the header dict. */
typedef struct dict_reader {
  const char *cursor, *end;
} dict_reader;

static void skip_blanks(dict_reader *reader) {
  while (reader->cursor < reader->end &&
         (*reader->cursor == ' ' || *reader->cursor == '\t' || *reader->cursor == '\n' ||
          *reader->cursor == '\r'))
    reader->cursor++;
}

static int accept(dict_reader *reader, char c) {
  skip_blanks(reader);
  if (reader->cursor < reader->end && *reader->cursor == c) {
    reader->cursor++;
    return 1;
  }
  return 0;
}

/* Reads a quoted Python string without escapes into out (at most size-1). */
static int read_quoted(dict_reader *reader, char *out, size_t size) {
  skip_blanks(reader);
  if (reader->cursor >= reader->end || (*reader->cursor != '\'' && *reader->cursor != '"'))
    return 1;
  char quote = *reader->cursor++;
  size_t length = 0;
  while (reader->cursor < reader->end && *reader->cursor != quote) {
    if (*reader->cursor == '\\' || length + 1 >= size)
      return 1;
    out[length++] = *reader->cursor++;
  }
  if (reader->cursor >= reader->end)
    return 1;
  reader->cursor++;
  out[length] = '\0';
  return 0;
}

static int accept_word(dict_reader *reader, const char *word) {
  skip_blanks(reader);
  size_t length = strlen(word);
  if ((size_t)(reader->end - reader->cursor) >= length &&
      memcmp(reader->cursor, word, length) == 0) {
    reader->cursor += length;
    return 1;
  }
  return 0;
}

static int parse_shape(dict_reader *reader, htp_array *out, char *err, size_t err_size) {
  if (!accept(reader, '('))
    return htp_set_error(err, err_size, "bad .npy header: 'shape' is not a tuple");
  out->rank = 0;
  out->count = 1;
  if (accept(reader, ')'))
    return 0;
  for (;;) {
    skip_blanks(reader);
    if (reader->cursor < reader->end && *reader->cursor == '-')
      return htp_set_error(err, err_size, "bad .npy header: 'shape' holds a negative dim");
    if (reader->cursor >= reader->end || *reader->cursor < '0' || *reader->cursor > '9')
      return htp_set_error(err, err_size, "bad .npy header: 'shape' holds a non-integer");
    int64_t dim = 0;
    while (reader->cursor < reader->end && *reader->cursor >= '0' && *reader->cursor <= '9') {
      if (dim > (INT64_MAX - 9) / 10)
        return htp_set_error(err, err_size, "bad .npy header: a dim is too large");
      dim = dim * 10 + (*reader->cursor++ - '0');
    }
    if (out->rank == HTP_NPY_MAX_RANK)
      return htp_set_error(err, err_size, "bad .npy header: more than %d dims", HTP_NPY_MAX_RANK);
    if (dim != 0 && out->count > INT64_MAX / 8 / dim)
      return htp_set_error(err, err_size, "bad .npy header: the shape is too large");
    out->dims[out->rank++] = dim;
    out->count *= dim;
    int comma = accept(reader, ',');
    if (accept(reader, ')'))
      return (out->rank == 1 && !comma)
                 ? htp_set_error(err, err_size, "bad .npy header: 'shape' (n) must be (n,)")
                 : 0;
    if (!comma)
      return htp_set_error(err, err_size, "bad .npy header: expected ',' or ')' in 'shape'");
  }
}

/* The magic, the version and the header's length: *prefix bytes before
 * the header, *header_length of it, both within size. Non-zero with err. */
static int read_preamble(const unsigned char *bytes, size_t size, size_t *prefix,
                         size_t *header_length, char *err, size_t err_size) {
  if (size < 10 || memcmp(bytes, npy_magic, sizeof npy_magic) != 0)
    return htp_set_error(err, err_size, "not a .npy file (no \\x93NUMPY magic)");
  unsigned major = bytes[6];
  if (major == 1) {
    *header_length = (size_t)bytes[8] | (size_t)bytes[9] << 8;
    *prefix = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return htp_set_error(err, err_size, "truncated .npy header");
    *header_length = (size_t)bytes[8] | (size_t)bytes[9] << 8 | (size_t)bytes[10] << 16 |
                     (size_t)bytes[11] << 24;
    *prefix = 12;
  } else {
    return htp_set_error(err, err_size, "unsupported .npy version %u.%u", major, bytes[7]);
  }
  if (*header_length > HTP_NPY_MAX_HEADER)
    return htp_set_error(err, err_size, ".npy header of %zu bytes is over the %d-byte limit",
                         *header_length, HTP_NPY_MAX_HEADER);
  if (*header_length > size - *prefix)
    return htp_set_error(err, err_size,
                         "truncated .npy file: header of %zu bytes, only %zu bytes follow",
                         *header_length, size - *prefix);
  /* The header is text: a NUL in it would end a string early ('<f4\0...'
   * read as '<f4'). */
  const unsigned char *nul = memchr(bytes + *prefix, 0, *header_length);
  if (nul)
    return htp_set_error(err, err_size, "bad .npy header: a NUL byte at offset %zu of its text",
                         (size_t)(nul - bytes - *prefix));
  return 0;
}

/* The header's dict: each of descr, fortran_order and shape once, nothing
 * else; a C-order array of '<f4' or '<f8' (*item: its bytes). Non-zero
 * with err. */
static int parse_header(dict_reader *reader, htp_array *out, size_t *item, char *err,
                        size_t err_size) {
  char key[32], descr[16] = "";
  int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0;
  if (!accept(reader, '{'))
    return htp_set_error(err, err_size, "bad .npy header: not a dict");
  while (!accept(reader, '}')) {
    if (read_quoted(reader, key, sizeof key) || !accept(reader, ':'))
      return htp_set_error(err, err_size, "bad .npy header: expected 'key': value");
    if (strcmp(key, "descr") == 0 && !have_descr) {
      have_descr = 1;
      if (read_quoted(reader, descr, sizeof descr))
        return htp_set_error(err, err_size, "bad .npy header: 'descr' is not a dtype string");
    } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
      have_order = 1;
      if (accept_word(reader, "True"))
        fortran = 1;
      else if (!accept_word(reader, "False"))
        return htp_set_error(err, err_size, "bad .npy header: 'fortran_order' is not a bool");
    } else if (strcmp(key, "shape") == 0 && !have_shape) {
      have_shape = 1;
      if (parse_shape(reader, out, err, err_size))
        return 1;
    } else {
      return htp_set_error(err, err_size, "bad .npy header: unexpected or repeated key '%s'", key);
    }
    if (!accept(reader, ',')) {
      if (!accept(reader, '}'))
        return htp_set_error(err, err_size, "bad .npy header: expected ',' or '}'");
      break;
    }
  }
  skip_blanks(reader);
  if (reader->cursor != reader->end)
    return htp_set_error(err, err_size, "bad .npy header: text after the dict");
  if (!have_descr || !have_order || !have_shape)
    return htp_set_error(err, err_size, "bad .npy header: missing '%s'",
                         !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
  if (fortran)
    return htp_set_error(err, err_size, "Fortran-order arrays are not supported (save a C-order "
                         "array: numpy.ascontiguousarray)");
  if (strcmp(descr, "<f4") == 0)
    *item = 4;
  else if (strcmp(descr, "<f8") == 0)
    *item = 8;
  else
    return htp_set_error(err, err_size, "dtype '%s' is not supported (use float32, '<f4', or "
                         "float64, '<f8')", descr);
  return 0;
}

static int parse_npy(const unsigned char *bytes, size_t size, htp_array *out, char *err,
                     size_t err_size) {
  size_t prefix = 0, header_length = 0, item = 0;
  if (read_preamble(bytes, size, &prefix, &header_length, err, err_size))
    return 1;
  dict_reader reader = {(const char *)bytes + prefix, (const char *)bytes + prefix + header_length};
  if (parse_header(&reader, out, &item, err, err_size))
    return 1;
  const unsigned char *data = bytes + prefix + header_length;
  size_t available = size - prefix - header_length;
  uint64_t needed = (uint64_t)out->count * item;
  if (available != needed)
    return htp_set_error(err, err_size, "%s .npy data: the shape needs %llu bytes, the file "
                         "holds %zu", available < needed ? "truncated" : "trailing bytes after",
                         (unsigned long long)needed, available);
  out->data = malloc(out->count ? (size_t)out->count * sizeof(float) : 1);
  if (!out->data)
    return htp_set_error(err, err_size, "out of memory for %lld floats", (long long)out->count);
  if (item == 4) {
    memcpy(out->data, data, (size_t)needed);
  } else {
    for (int64_t i = 0; i < out->count; i++) {
      double value;
      memcpy(&value, data + 8 * i, 8);
      out->data[i] = htp_narrow_to_float(value);
    }
  }
  return 0;
}

int htp_npy_parse(const unsigned char *bytes, size_t size, htp_array *out, char *err,
                  size_t err_size) {
  memset(out, 0, sizeof *out);
  if (parse_npy(bytes, size, out, err, err_size)) {
    htp_array_free(out);
    return 1;
  }
  return 0;
}

int htp_npy_read(const char *path, htp_array *out, char *err, size_t err_size) {
  memset(out, 0, sizeof *out);
  htp_file_map file;
  if (htp_file_map_open(path, &file, err, err_size))
    return 1;
  int status = htp_npy_parse(file.bytes, file.size, out, err, err_size);
  htp_file_map_close(&file);
  return status;
}

int htp_npy_write(const char *path, int rank, const int64_t *dims, const float *data, char *err,
                  size_t err_size) {
  if (htp_check_writable_path(path, err, err_size))
    return 1;
  char header[512];
  int length = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  int64_t count = 1;
  for (int i = 0; i < rank; i++) {
    length += snprintf(header + length, sizeof header - (size_t)length, "%lld%s",
                       (long long)dims[i], (rank == 1 || i + 1 < rank) ? ", " : "");
    count *= dims[i];
  }
  if (rank == 1)
    length -= 1; /* "(n,)" as numpy writes it */
  length += snprintf(header + length, sizeof header - (size_t)length, "), }");
  /* Pad with blanks so the data starts at a multiple of 64, then '\n'. */
  size_t total = 10 + (size_t)length + 1;
  size_t padding = (64 - total % 64) % 64;
  if ((size_t)length + padding + 1 >= sizeof header)
    return htp_set_error(err, err_size, "shape too long for an .npy header");
  memset(header + length, ' ', padding);
  length += (int)padding;
  header[length++] = '\n';

  /* Beside the file, then renamed over it (file_map.h): a failed write
   * leaves the old file as it was. */
  char temporary[4200];
  if (htp_file_temporary_name(path, temporary, sizeof temporary))
    return htp_set_error(err, err_size, "the name is too long");
  FILE *file = htp_file_create(temporary, err, err_size);
  if (!file)
    return 1;
  unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(length & 0xff),
                              (unsigned char)(length >> 8)};
  int ok = fwrite(prefix, 1, sizeof prefix, file) == sizeof prefix &&
           fwrite(header, 1, (size_t)length, file) == (size_t)length &&
           (count == 0 || fwrite(data, sizeof(float), (size_t)count, file) == (size_t)count);
  if (htp_file_finish(file, ok, temporary, err, err_size))
    return 1;
  return htp_file_commit(temporary, path, err, err_size);
}

void htp_array_free(htp_array *array) {
  if (!array)
    return;
  free(array->data);
  memset(array, 0, sizeof *array);
}
