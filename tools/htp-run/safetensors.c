/*===- tools/htp-run/safetensors.c - Read Hugging Face safetensors files ===*
 *
 * This file implements safetensors.h: the file mapped through file_map.h
 * (regular files only), the header read with jansson and validated (see the
 * header for the list of checks), and float tensors converted to f32 or to
 * bf16 (kernels/htp_bf16.h's conversions, the ones every part of htp uses).
 * The header is limited to 100 MB, as in the reference implementation.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/safetensors.h"

#include "kernels/htp_bf16.h"
#include "tools/htp-run/convert.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"

#include <jansson.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

static const struct {
  const char *name;
  unsigned size;
} known_dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
    {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2}, {"U8", 1},
    {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

static unsigned dtype_size(const char *dtype) {
  for (size_t i = 0; i < sizeof known_dtypes / sizeof known_dtypes[0]; i++)
    if (strcmp(known_dtypes[i].name, dtype) == 0)
      return known_dtypes[i].size;
  return 0;
}

static void free_tensors(htp_safetensors *st) {
  for (int i = 0; i < st->count; i++)
    free(st->tensors[i].name);
  free(st->tensors);
  st->tensors = NULL;
  st->count = 0;
}

/* A JSON integer in [0, 2^63), or non-zero with a message about what. */
static int read_count(const json_t *value, const char *tensor, const char *what, uint64_t *out,
                      char *err, size_t err_size) {
  if (!json_is_integer(value))
    return htp_set_error(err, err_size, "tensor '%s': %s holds a non-integer", tensor, what);
  json_int_t number = json_integer_value(value);
  if (number < 0)
    return htp_set_error(err, err_size, "tensor '%s': %s holds a negative number %lld", tensor,
                         what, (long long)number);
  *out = (uint64_t)number;
  return 0;
}

/* Reads {"dtype": ..., "shape": [...], "data_offsets": [b, e]} into tensor;
 * other keys are ignored, as the format allows. */
static int parse_tensor_info(const json_t *info, htp_st_tensor *tensor, char *err,
                             size_t err_size) {
  if (!json_is_object(info))
    return htp_set_error(err, err_size, "tensor '%s' is not a JSON object", tensor->name);
  const json_t *dtype = json_object_get(info, "dtype");
  const json_t *shape = json_object_get(info, "shape");
  const json_t *offsets = json_object_get(info, "data_offsets");
  if (!dtype || !shape || !offsets)
    return htp_set_error(err, err_size, "tensor '%s' lacks %s", tensor->name,
                         !dtype ? "a dtype" : !shape ? "a shape" : "data_offsets");
  if (!json_is_string(dtype))
    return htp_set_error(err, err_size, "tensor '%s': dtype is not a string", tensor->name);
  if (dtype_size(json_string_value(dtype)) == 0)
    return htp_set_error(err, err_size, "tensor '%s' has unknown dtype '%.32s'", tensor->name,
                         json_string_value(dtype));
  snprintf(tensor->dtype, sizeof tensor->dtype, "%s", json_string_value(dtype));

  if (!json_is_array(shape))
    return htp_set_error(err, err_size, "tensor '%s': shape is not an array", tensor->name);
  if (json_array_size(shape) > HTP_ST_MAX_RANK)
    return htp_set_error(err, err_size, "tensor '%s' has more than %d dims", tensor->name,
                         HTP_ST_MAX_RANK);
  for (size_t d = 0; d < json_array_size(shape); d++) {
    uint64_t dim = 0;
    if (read_count(json_array_get(shape, d), tensor->name, "shape", &dim, err, err_size))
      return 1;
    tensor->dims[tensor->rank++] = (int64_t)dim;
  }

  if (!json_is_array(offsets) || json_array_size(offsets) != 2)
    return htp_set_error(err, err_size, "tensor '%s': data_offsets is not [begin, end]",
                         tensor->name);
  return read_count(json_array_get(offsets, 0), tensor->name, "data_offsets", &tensor->begin,
                    err, err_size) ||
         read_count(json_array_get(offsets, 1), tensor->name, "data_offsets", &tensor->end, err,
                    err_size);
}

static int compare_begin(const void *a, const void *b) {
  const htp_st_tensor *x = *(const htp_st_tensor *const *)a, *y = *(const htp_st_tensor *const *)b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* Checks each tensor's range against its shape and the data size, and that
 * no two ranges overlap. */
static int check_ranges(htp_safetensors *st, char *err, size_t err_size) {
  uint64_t data_size = st->size - st->data_offset;
  for (int i = 0; i < st->count; i++) {
    htp_st_tensor *t = &st->tensors[i];
    uint64_t bytes = dtype_size(t->dtype);
    for (int d = 0; d < t->rank; d++) {
      if (t->dims[d] != 0 && bytes > UINT64_MAX / 2 / (uint64_t)t->dims[d])
        return htp_set_error(err, err_size, "tensor '%s' has a shape too large", t->name);
      bytes *= (uint64_t)t->dims[d];
    }
    if (t->begin > t->end || t->end > data_size)
      return htp_set_error(err, err_size,
                           "tensor '%s' has data_offsets [%llu, %llu] outside the %llu data "
                           "bytes of the file",
                           t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                           (unsigned long long)data_size);
    if (t->end - t->begin != bytes)
      return htp_set_error(err, err_size,
                           "tensor '%s' (%s, %d dims) needs %llu bytes but its data_offsets "
                           "hold %llu",
                           t->name, t->dtype, t->rank, (unsigned long long)bytes,
                           (unsigned long long)(t->end - t->begin));
  }
  const htp_st_tensor **order = malloc(((size_t)st->count + 1) * sizeof *order);
  if (!order)
    return htp_set_error(err, err_size, "out of memory");
  for (int i = 0; i < st->count; i++)
    order[i] = &st->tensors[i];
  qsort(order, (size_t)st->count, sizeof *order, compare_begin);
  int status = 0;
  /* The format's data is the tensors' bytes one after another, nothing
   * else (as the reference reader has it): no overlap, no hole, no bytes
   * after the last (a file appended to, or cut and patched). */
  uint64_t covered = 0;
  for (int i = 0; i < st->count && !status; i++) {
    if (i > 0 && order[i]->begin < order[i - 1]->end)
      status = htp_set_error(err, err_size, "tensors '%s' and '%s' overlap", order[i - 1]->name,
                             order[i]->name);
    else if (order[i]->begin != covered)
      status = htp_set_error(err, err_size, "data bytes [%llu, %llu) belong to no tensor (before "
                             "'%s'): the format has no gaps", (unsigned long long)covered,
                             (unsigned long long)order[i]->begin, order[i]->name);
    else
      covered = order[i]->end;
  }
  if (!status && covered != data_size)
    status = htp_set_error(err, err_size, "%llu bytes after the last tensor's data belong to no "
                           "tensor (the file has %llu data bytes, the tensors %llu): the format "
                           "has none", (unsigned long long)(data_size - covered),
                           (unsigned long long)data_size, (unsigned long long)covered);
  free(order);
  return status;
}

/* The header's "__metadata__": a map of strings to strings (the format's
 * rule; nothing else may hide there). */
static int check_metadata(const json_t *metadata, char *err, size_t err_size) {
  if (!json_is_object(metadata))
    return htp_set_error(err, err_size, "'__metadata__' is not an object");
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)metadata, key, value) {
    if (!json_is_string(value))
      return htp_set_error(err, err_size, "'__metadata__' value of '%.64s' is not a string", key);
  }
  return 0;
}

int htp_safetensors_parse(const unsigned char *bytes, size_t size, htp_safetensors *st, char *err,
                          size_t err_size) {
  memset(st, 0, sizeof *st);
  if (size < 8)
    return htp_set_error(err, err_size, "not a safetensors file: %zu bytes, shorter than the "
                         "8-byte header length", size);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; i--)
    header_length = header_length << 8 | bytes[i];
  if (header_length > size - 8)
    return htp_set_error(err, err_size,
                         "not a safetensors file: header length %llu exceeds the %zu bytes "
                         "after it", (unsigned long long)header_length, size - 8);
  if (header_length > HTP_ST_MAX_HEADER)
    return htp_set_error(err, err_size, "safetensors header of %llu bytes is over the 100 MB "
                         "limit", (unsigned long long)header_length);
  if (header_length < 2)
    return htp_set_error(err, err_size, "not a safetensors file: header of %llu bytes",
                         (unsigned long long)header_length);

  /* jansson checks the syntax, UTF-8, nesting depth, and (with the flag)
   * that no object repeats a key: a tensor, or a tensor's "dtype". A NUL
   * byte in the text or a \u0000 in a string is an error without
   * JSON_ALLOW_NUL. */
  json_error_t json_error;
  errno = 0; /* jansson says "invalid token" or nothing when memory runs short */
  json_t *root = json_loadb((const char *)bytes + 8, (size_t)header_length,
                            JSON_REJECT_DUPLICATES, &json_error);
  if (!root && (errno == ENOMEM || json_error_code(&json_error) == json_error_out_of_memory))
    return htp_set_error(err, err_size, "out of memory reading the safetensors header (%lld "
                         "bytes)", (long long)header_length);
  if (!root)
    return htp_set_error(err, err_size, "bad safetensors header: bad JSON at line %d, column %d: "
                         "%s", json_error.line, json_error.column, json_error.text);
  int status = 0;
  if (!json_is_object(root)) {
    status = htp_set_error(err, err_size, "bad safetensors header: not a JSON object");
    goto done;
  }
  st->bytes = bytes;
  st->size = size;
  st->data_offset = 8 + (size_t)header_length;
  size_t entries = json_object_size(root);
  if (entries > INT_MAX) {
    status = htp_set_error(err, err_size, "bad safetensors header: too many tensors");
    goto done;
  }
  st->tensors = calloc(entries ? entries : 1, sizeof *st->tensors);
  if (!st->tensors) {
    status = htp_set_error(err, err_size, "out of memory");
    goto done;
  }
  const char *name;
  json_t *info;
  json_object_foreach(root, name, info) {
    if (strcmp(name, "__metadata__") == 0) {
      status = check_metadata(info, err, err_size);
      if (!status)
        st->metadata = json_incref(info);
    } else {
      htp_st_tensor *tensor = &st->tensors[st->count];
      tensor->name = strdup(name);
      if (!tensor->name) {
        status = htp_set_error(err, err_size, "out of memory");
        break;
      }
      st->count++;
      status = parse_tensor_info(info, tensor, err, err_size);
    }
    if (status)
      break;
  }
  if (!status)
    status = check_ranges(st, err, err_size);
done:
  json_decref(root);
  if (status) {
    free_tensors(st);
    json_decref(st->metadata);
    memset(st, 0, sizeof *st);
  }
  return status;
}

const char *htp_safetensors_metadata(const htp_safetensors *st, const char *key) {
  return st->metadata ? json_string_value(json_object_get(st->metadata, key)) : NULL;
}

int htp_safetensors_open(const char *path, htp_safetensors *st, char *err, size_t err_size) {
  memset(st, 0, sizeof *st);
  htp_file_map file;
  if (htp_file_map_open(path, &file, err, err_size))
    return 1;
  if (htp_safetensors_parse(file.bytes, file.size, st, err, err_size)) {
    htp_file_map_close(&file);
    return 1;
  }
  st->mapping = file.mapping;
  return 0;
}

const htp_st_tensor *htp_safetensors_find(const htp_safetensors *st, const char *name) {
  for (int i = 0; i < st->count; i++)
    if (strcmp(st->tensors[i].name, name) == 0)
      return &st->tensors[i];
  return NULL;
}

static float half_to_float(uint16_t h) {
  int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float value;
  if (exponent == 0)
    value = ldexpf((float)mantissa, -24);
  else if (exponent == 31)
    value = mantissa ? NAN : INFINITY;
  else
    value = ldexpf((float)(mantissa | 0x400), exponent - 25);
  return (h & 0x8000) ? -value : value;
}

int htp_safetensors_read_f32(const htp_safetensors *st, const htp_st_tensor *tensor, float *out,
                             char *err, size_t err_size) {
  const unsigned char *data = st->bytes + st->data_offset + tensor->begin;
  size_t bytes = (size_t)(tensor->end - tensor->begin);
  if (strcmp(tensor->dtype, "F32") == 0) {
    memcpy(out, data, bytes); /* little endian, as is the host (x86-64, aarch64) */
  } else if (strcmp(tensor->dtype, "F64") == 0) {
    for (size_t i = 0; i < bytes / 8; i++) {
      double value;
      memcpy(&value, data + 8 * i, 8);
      out[i] = htp_narrow_to_float(value);
    }
  } else if (strcmp(tensor->dtype, "F16") == 0) {
    for (size_t i = 0; i < bytes / 2; i++)
      out[i] = half_to_float((uint16_t)(data[2 * i] | data[2 * i + 1] << 8));
  } else if (strcmp(tensor->dtype, "BF16") == 0) {
    for (size_t i = 0; i < bytes / 2; i++)
      out[i] = htp_bf16_to_f32((htp_bf16)(data[2 * i] | data[2 * i + 1] << 8));
  } else {
    return htp_set_error(err, err_size,
                         "tensor '%s' has dtype %s; htp-run reads F32, F16, BF16 and F64",
                         tensor->name, tensor->dtype);
  }
  return 0;
}

int htp_safetensors_read_bf16(const htp_safetensors *st, const htp_st_tensor *tensor,
                              uint16_t *out, char *err, size_t err_size) {
  const unsigned char *data = st->bytes + st->data_offset + tensor->begin;
  size_t bytes = (size_t)(tensor->end - tensor->begin);
  if (strcmp(tensor->dtype, "BF16") == 0) {
    memcpy(out, data, bytes); /* little endian, as is the host */
  } else if (strcmp(tensor->dtype, "F32") == 0) {
    for (size_t i = 0; i < bytes / 4; i++) {
      float value; /* the data may be unaligned: memcpy, not a cast */
      memcpy(&value, data + 4 * i, 4);
      out[i] = htp_bf16_from_f32(value);
    }
  } else {
    return htp_set_error(err, err_size,
                         "tensor '%s' has dtype %s; a bf16 block takes BF16 tensors (bound as "
                         "they are) or F32 (rounded to bf16)",
                         tensor->name, tensor->dtype);
  }
  return 0;
}

void htp_safetensors_close(htp_safetensors *st) {
  if (!st)
    return;
  free_tensors(st);
  json_decref(st->metadata);
  if (st->mapping)
    munmap(st->mapping, st->size);
  memset(st, 0, sizeof *st);
}

int htp_safetensors_write_f32_at(const char *path, const htp_st_write *tensors, int count,
                                 const char *const *metadata, char *err, size_t err_size) {
  json_t *header = json_object();
  json_t *meta = json_object();
  int status = 0;
  if (!header || !meta) {
    json_decref(header);
    json_decref(meta);
    return htp_set_error(err, err_size, "out of memory");
  }
  for (int i = 0; metadata && metadata[i] && !status; i += 2)
    status = json_object_set_new(meta, metadata[i], json_string(metadata[i + 1]));
  /* Metadata first, then the tensors in the given order, back to back. */
  if (!status && json_object_size(meta))
    status = json_object_set(header, "__metadata__", meta);
  uint64_t offset = 0;
  for (int i = 0; i < count && !status; i++) {
    const htp_st_write *t = &tensors[i];
    json_t *shape = json_array(), *info = json_object(), *offsets = json_array();
    uint64_t bytes = 4;
    for (int d = 0; d < t->rank && shape; d++) {
      json_array_append_new(shape, json_integer(t->dims[d]));
      bytes *= (uint64_t)t->dims[d];
    }
    if (!shape || !info || !offsets || json_object_get(header, t->name)) {
      json_decref(shape);
      json_decref(info);
      json_decref(offsets);
      status = 1;
      break;
    }
    json_array_append_new(offsets, json_integer((json_int_t)offset));
    json_array_append_new(offsets, json_integer((json_int_t)(offset + bytes)));
    json_object_set_new(info, "dtype", json_string("F32"));
    json_object_set_new(info, "shape", shape);
    json_object_set_new(info, "data_offsets", offsets);
    status = json_object_set_new(header, t->name, info);
    offset += bytes;
  }
  char *text = status ? NULL : json_dumps(header, JSON_PRESERVE_ORDER | JSON_COMPACT);
  json_decref(header);
  json_decref(meta);
  if (!text)
    return htp_set_error(err, err_size, "cannot build the safetensors header (out of memory, a "
                         "name twice, or a name that is not UTF-8)");
  /* The header is padded with blanks to 8 bytes, so the data is aligned. */
  size_t length = strlen(text), padded = (length + 7) / 8 * 8;
  unsigned char prefix[8];
  for (int i = 0; i < 8; i++)
    prefix[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  FILE *file = htp_file_create(path, err, err_size);
  if (!file) {
    free(text);
    return 1;
  }
  int ok = fwrite(prefix, 1, 8, file) == 8 && fwrite(text, 1, length, file) == length;
  for (size_t i = length; ok && i < padded; i++)
    ok = fputc(' ', file) != EOF;
  for (int i = 0; i < count && ok; i++) {
    size_t n = 1;
    for (int d = 0; d < tensors[i].rank; d++)
      n *= (size_t)tensors[i].dims[d];
    ok = fwrite(tensors[i].data, sizeof(float), n, file) == n;
  }
  free(text);
  return htp_file_finish(file, ok, path, err, err_size);
}

int htp_safetensors_write_f32(const char *path, const htp_st_write *tensors, int count,
                              const char *const *metadata, char *err, size_t err_size) {
  /* Written beside the file and renamed over it: a reader (or a crash)
   * never sees half a file. */
  char temporary[4200];
  if (htp_file_temporary_name(path, temporary, sizeof temporary))
    return htp_set_error(err, err_size, "%s: the name is too long", path);
  if (htp_safetensors_write_f32_at(temporary, tensors, count, metadata, err, err_size))
    return 1;
  return htp_file_commit(temporary, path, err, err_size);
}
