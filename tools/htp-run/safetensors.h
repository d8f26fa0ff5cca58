/*===- tools/htp-run/safetensors.h - Read Hugging Face safetensors files ===*
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON
 *   {"NAME": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [b, e]},
 *    ..., "__metadata__": {"key": "value", ...}}
 * (padded with blanks), then the data; offsets are relative to the data.
 * Parsing checks everything before any tensor is read: the header length
 * against the file size and the 100 MB limit (HTP_ST_MAX_HEADER, as the
 * reference implementation), the JSON (jansson: syntax, UTF-8, nesting, no
 * key twice in any object), that "__metadata__" maps strings to strings,
 * each dtype, that each tensor's byte range is inside the data and exactly
 * prod(shape) * dtype size long, and that no two ranges overlap. A file that
 * passes cannot make a reader go out of bounds. The header limit bounds the
 * parse too: jansson holds the whole tree, so a hostile header at the limit
 * (100 MB of one-digit numbers) costs about 2 GB and half a minute to refuse;
 * real headers are kilobytes to a few megabytes.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_SAFETENSORS_H
#define HTP_RUN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum { HTP_ST_MAX_RANK = 8 };
#define HTP_ST_MAX_HEADER (100u * 1000u * 1000u) /* bytes of JSON */

typedef struct htp_st_tensor {
  char *name;
  char dtype[8];        /* as in the file: F32, F16, BF16, F64, I64, ... */
  int rank;
  int64_t dims[HTP_ST_MAX_RANK];
  uint64_t begin, end;  /* byte range, relative to the data section */
} htp_st_tensor;

typedef struct htp_safetensors {
  const unsigned char *bytes;  /* the whole file */
  size_t size;
  size_t data_offset;          /* 8 + header length */
  int count;
  htp_st_tensor *tensors;      /* in file order */
  void *mapping;               /* non-NULL when bytes is an mmap this reader owns */
  void *metadata;              /* the "__metadata__" object (jansson), or NULL */
} htp_safetensors;

/* Maps and parses the file at path, which must be a regular file (a
 * directory, FIFO or device is refused before anything is read). On failure returns non-zero, leaves *st
 * empty (safe to close) and writes a message (without the path) to err. */
int htp_safetensors_open(const char *path, htp_safetensors *st, char *err, size_t err_size);

/* Parses bytes[0, size), which must outlive *st (not copied). */
int htp_safetensors_parse(const unsigned char *bytes, size_t size, htp_safetensors *st, char *err,
                          size_t err_size);

/* The tensor called name, or NULL. */
const htp_st_tensor *htp_safetensors_find(const htp_safetensors *st, const char *name);

/* Copies a tensor into out (prod(shape) floats), converting F16, BF16 and F64
 * to f32; other dtypes are an error naming the tensor. */
int htp_safetensors_read_f32(const htp_safetensors *st, const htp_st_tensor *tensor, float *out,
                             char *err, size_t err_size);

/* Copies a tensor into out (prod(shape) bf16 bit patterns): BF16 byte for
 * byte, F32 rounded to nearest even (htp_bf16_from_f32); other dtypes are
 * an error naming the tensor. */
int htp_safetensors_read_bf16(const htp_safetensors *st, const htp_st_tensor *tensor,
                              uint16_t *out, char *err, size_t err_size);

/* The "__metadata__" value of key, or NULL (no such key, no metadata). */
const char *htp_safetensors_metadata(const htp_safetensors *st, const char *key);

/* A tensor to write: F32 data of the given shape. */
typedef struct htp_st_write {
  const char *name;
  int rank;
  const int64_t *dims;
  const float *data;
} htp_st_write;

/* Writes an F32 safetensors file at path: metadata (NULL, or key, value,
 * ..., NULL; strings) under "__metadata__", then the tensors in order,
 * little-endian as the machine's floats are (x86, arm64), the header
 * padded to 8 bytes. Written to PATH.tmp and renamed over path. 0, or
 * non-zero with err (a name given twice is an error). */
int htp_safetensors_write_f32(const char *path, const htp_st_write *tensors, int count,
                              const char *const *metadata, char *err, size_t err_size);
/* The same written at path itself (no temporary, no rename), fsync'd: for
 * callers that commit several files together (a checkpoint, train.c). A
 * failure removes what was written. */
int htp_safetensors_write_f32_at(const char *path, const htp_st_write *tensors, int count,
                                 const char *const *metadata, char *err, size_t err_size);

/* Frees everything; accepts an empty or failed *st. */
void htp_safetensors_close(htp_safetensors *st);

#endif /* HTP_RUN_SAFETENSORS_H */
