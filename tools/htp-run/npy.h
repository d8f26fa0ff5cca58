/*===- tools/htp-run/npy.h - Read and write NumPy .npy files -----------===*
 *
 * The .npy format (versions 1.0, 2.0, 3.0): the magic "\x93NUMPY", a major
 * and minor version byte, a little-endian header length (2 bytes in 1.0, 4
 * after), a Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 5, 12), }
 * and the raw data. Reading accepts '<f4' and '<f8' (converted to f32) in C
 * order and checks that the data is exactly prod(shape) items long;
 * everything else is an error that says what was found. Writing produces
 * version 1.0, '<f4', C order, as numpy.save does.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_NPY_H
#define HTP_RUN_NPY_H

#include <stddef.h>
#include <stdint.h>

/* Limits: dims, and bytes of the header dict (numpy writes version 1.0,
 * whose 2-byte length is below this, unless a dtype needs more). */
enum { HTP_NPY_MAX_RANK = 8, HTP_NPY_MAX_HEADER = 65536 };

typedef struct htp_array {
  int rank;
  int64_t dims[HTP_NPY_MAX_RANK];
  int64_t count;   /* prod(dims); 1 for rank 0 */
  float *data;     /* malloc'ed; htp_array_free releases it */
} htp_array;

/* Reads the file at path, which must be a regular file (a directory, FIFO or
 * device is refused before anything is read). On failure returns non-zero,
 * leaves *out empty and writes a message (without the path) to err. */
int htp_npy_read(const char *path, htp_array *out, char *err, size_t err_size);

/* Parses an .npy image held in memory (bytes[0, size); what htp_npy_read
 * does after mapping the file). The data is copied into out->data, whose
 * size is bounded by size: the shape must match the bytes present. */
int htp_npy_parse(const unsigned char *bytes, size_t size, htp_array *out, char *err,
                  size_t err_size);

/* Writes data (prod(dims) floats) as a version 1.0 '<f4' C-order file. A
 * path that exists and is not a regular file is refused. */
int htp_npy_write(const char *path, int rank, const int64_t *dims, const float *data, char *err,
                  size_t err_size);

void htp_array_free(htp_array *array);

#endif /* HTP_RUN_NPY_H */
