/*===- test/fuzz/fuzz_npy.c - libFuzzer target: the .npy reader ----------===*
 *
 * Feeds arbitrary bytes to htp_npy_parse, the function htp_npy_read calls on
 * a mapped file. Besides what ASan/UBSan catch, it checks what a caller
 * relies on: success gives a shape within the limits, count = prod(dims),
 * and count readable floats; failure gives a message and an empty array.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  htp_array array;
  char err[512] = "";
  if (htp_npy_parse(data, size, &array, err, sizeof err) != 0) {
    if (err[0] == '\0' || array.data != NULL || array.count != 0) {
      fprintf(stderr, "failure without a message or with data left: '%s'\n", err);
      abort();
    }
    return 0;
  }
  int64_t count = 1;
  if (array.rank < 0 || array.rank > HTP_NPY_MAX_RANK)
    abort();
  for (int d = 0; d < array.rank; d++) {
    if (array.dims[d] < 0)
      abort();
    count *= array.dims[d];
  }
  if (count != array.count || array.data == NULL)
    abort();
  /* Every float is there (ASan catches a short buffer). */
  volatile float sum = 0;
  for (int64_t i = 0; i < array.count; i++)
    sum += array.data[i];
  (void)sum;
  htp_array_free(&array);
  return 0;
}
