/*===- tools/htp-run/safetensors.c - Read Hugging Face safetensors files ===*
 *
 * This file implements safetensors.h: mmap, header validation (see the
 * header for the list of checks) and conversion of float tensors to f32.
 * The header is limited to 100 MB, as in the reference implementation.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/safetensors.h"

#include "tools/htp-run/convert.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HTP_ST_MAX_HEADER (100u * 1000u * 1000u)

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

/* Reads {"dtype": ..., "shape": [...], "data_offsets": [b, e]} into tensor. */
static int parse_tensor_info(htp_json *json, htp_st_tensor *tensor, char *err, size_t err_size) {
  int have_dtype = 0, have_shape = 0, have_offsets = 0;
  if (htp_json_expect(json, '{'))
    return 1;
  if (htp_json_peek(json) == '}')
    return htp_set_error(err, err_size, "tensor '%s' has no dtype, shape or data_offsets",
                         tensor->name);
  for (;;) {
    char *key = NULL;
    if (htp_json_string(json, &key) || htp_json_expect(json, ':')) {
      free(key);
      return 1;
    }
    int status = 0;
    if (strcmp(key, "dtype") == 0 && !have_dtype) {
      char *dtype = NULL;
      have_dtype = 1;
      if (htp_json_string(json, &dtype)) {
        status = 1;
      } else if (dtype_size(dtype) == 0) {
        status = htp_set_error(err, err_size, "tensor '%s' has unknown dtype '%.32s'",
                               tensor->name, dtype);
      } else {
        snprintf(tensor->dtype, sizeof tensor->dtype, "%s", dtype);
      }
      free(dtype);
    } else if (strcmp(key, "shape") == 0 && !have_shape) {
      have_shape = 1;
      status = htp_json_expect(json, '[');
      if (!status && htp_json_peek(json) == ']') {
        json->cursor++;
      } else {
        while (!status) {
          uint64_t dim;
          if (tensor->rank == HTP_ST_MAX_RANK) {
            status = htp_set_error(err, err_size, "tensor '%s' has more than %d dims",
                                   tensor->name, HTP_ST_MAX_RANK);
            break;
          }
          status = htp_json_uint(json, &dim);
          if (status)
            break;
          tensor->dims[tensor->rank++] = (int64_t)dim;
          int c = htp_json_peek(json);
          if (c == ']') {
            json->cursor++;
            break;
          }
          status = htp_json_expect(json, ',');
        }
      }
    } else if (strcmp(key, "data_offsets") == 0 && !have_offsets) {
      have_offsets = 1;
      status = htp_json_expect(json, '[') || htp_json_uint(json, &tensor->begin) ||
               htp_json_expect(json, ',') || htp_json_uint(json, &tensor->end) ||
               htp_json_expect(json, ']');
    } else if (strcmp(key, "dtype") == 0 || strcmp(key, "shape") == 0 ||
               strcmp(key, "data_offsets") == 0) {
      status = htp_set_error(err, err_size, "tensor '%s' has '%s' twice", tensor->name, key);
    } else {
      status = htp_json_skip_value(json);
    }
    free(key);
    if (status)
      return 1;
    int c = htp_json_peek(json);
    if (c == '}') {
      json->cursor++;
      break;
    }
    if (htp_json_expect(json, ','))
      return 1;
  }
  if (!have_dtype || !have_shape || !have_offsets)
    return htp_set_error(err, err_size, "tensor '%s' lacks %s", tensor->name,
                         !have_dtype ? "a dtype" : !have_shape ? "a shape" : "data_offsets");
  return 0;
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
  if (st->count < 2)
    return 0;
  const htp_st_tensor **order = malloc((size_t)st->count * sizeof *order);
  if (!order)
    return htp_set_error(err, err_size, "out of memory");
  for (int i = 0; i < st->count; i++)
    order[i] = &st->tensors[i];
  qsort(order, (size_t)st->count, sizeof *order, compare_begin);
  int status = 0;
  for (int i = 1; i < st->count && !status; i++)
    if (order[i]->begin < order[i - 1]->end)
      status = htp_set_error(err, err_size, "tensors '%s' and '%s' overlap", order[i - 1]->name,
                             order[i]->name);
  free(order);
  return status;
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
  st->bytes = bytes;
  st->size = size;
  st->data_offset = 8 + (size_t)header_length;

  char json_err[256] = "";
  htp_json json;
  htp_json_init(&json, (const char *)bytes + 8, (size_t)header_length, json_err, sizeof json_err);
  int capacity = 0, status = 0, have_metadata = 0;
  if (htp_json_expect(&json, '{'))
    goto json_failure;
  if (htp_json_peek(&json) == '}') {
    json.cursor++;
  } else {
    for (;;) {
      char *name = NULL;
      if (htp_json_string(&json, &name) || htp_json_expect(&json, ':')) {
        free(name);
        goto json_failure;
      }
      if (strcmp(name, "__metadata__") == 0) {
        free(name);
        if (have_metadata) {
          status = htp_set_error(err, err_size, "'__metadata__' appears twice");
          goto failure;
        }
        have_metadata = 1;
        if (htp_json_peek(&json) != '{') {
          status = htp_set_error(err, err_size, "'__metadata__' is not an object");
          goto failure;
        }
        if (htp_json_skip_value(&json))
          goto json_failure;
      } else {
        if (htp_safetensors_find(st, name)) {
          status = htp_set_error(err, err_size, "tensor '%s' appears twice", name);
          free(name);
          goto failure;
        }
        if (st->count == capacity) {
          int grown = capacity ? capacity * 2 : 16;
          htp_st_tensor *tensors = realloc(st->tensors, (size_t)grown * sizeof *tensors);
          if (!tensors) {
            free(name);
            status = htp_set_error(err, err_size, "out of memory");
            goto failure;
          }
          st->tensors = tensors;
          capacity = grown;
        }
        htp_st_tensor *tensor = &st->tensors[st->count++];
        memset(tensor, 0, sizeof *tensor);
        tensor->name = name;
        json_err[0] = '\0';
        if (parse_tensor_info(&json, tensor, json_err, sizeof json_err))
          goto json_failure;
      }
      int c = htp_json_peek(&json);
      if (c == '}') {
        json.cursor++;
        break;
      }
      if (htp_json_expect(&json, ','))
        goto json_failure;
    }
  }
  if (htp_json_finish(&json))
    goto json_failure;
  if (check_ranges(st, err, err_size)) {
    status = 1;
    goto failure;
  }
  return 0;

json_failure:
  status = htp_set_error(err, err_size, "bad safetensors header: %s", json_err);
failure:
  free_tensors(st);
  memset(st, 0, sizeof *st);
  return status ? status : 1;
}

int htp_safetensors_open(const char *path, htp_safetensors *st, char *err, size_t err_size) {
  memset(st, 0, sizeof *st);
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return htp_set_error(err, err_size, "cannot open: %s", strerror(errno));
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return htp_set_error(err, err_size, "not a regular file");
  }
  size_t size = (size_t)info.st_size;
  if (size < 8) {
    close(fd);
    return htp_set_error(err, err_size, "not a safetensors file: %zu bytes, shorter than the "
                         "8-byte header length", size);
  }
  void *mapping = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (mapping == MAP_FAILED)
    return htp_set_error(err, err_size, "cannot map: %s", strerror(errno));
  if (htp_safetensors_parse(mapping, size, st, err, err_size)) {
    munmap(mapping, size);
    return 1;
  }
  st->mapping = mapping;
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
    for (size_t i = 0; i < bytes / 2; i++) {
      uint32_t word = (uint32_t)(data[2 * i] | data[2 * i + 1] << 8) << 16;
      memcpy(&out[i], &word, 4);
    }
  } else {
    return htp_set_error(err, err_size,
                         "tensor '%s' has dtype %s; htp-run reads F32, F16, BF16 and F64",
                         tensor->name, tensor->dtype);
  }
  return 0;
}

void htp_safetensors_close(htp_safetensors *st) {
  if (!st)
    return;
  free_tensors(st);
  if (st->mapping)
    munmap(st->mapping, st->size);
  memset(st, 0, sizeof *st);
}
