/*===- test/fuzz/fuzz_idx.c - libFuzzer target: the IDX reader ------------===*
 *
 * Feeds arbitrary bytes to htp_idx_parse (what htp_idx_read runs on a file's
 * inflated bytes). Besides what ASan/UBSan catch, it checks what a caller
 * relies on: success gives 1..4 dimensions, each >= 1, count = their
 * product and count readable bytes; failure gives a message and nothing.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/train/idx.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  htp_idx idx;
  char err[256] = "";
  if (htp_idx_parse(data, size, &idx, err, sizeof err) != 0) {
    if (err[0] == '\0' || idx.data != NULL || idx.count != 0) {
      fprintf(stderr, "failure without a message or with data left: '%s'\n", err);
      abort();
    }
    return 0;
  }
  if (idx.num_dims < 1 || idx.num_dims > HTP_IDX_MAX_DIMS || !idx.data) abort();
  uint64_t count = 1;
  for (int d = 0; d < idx.num_dims; d++) {
    if (idx.dims[d] == 0) abort();
    count *= idx.dims[d];
  }
  if (count != idx.count || count > HTP_IDX_MAX_BYTES) abort();
  volatile unsigned sum = 0;
  for (uint64_t i = 0; i < idx.count; i++) sum += idx.data[i];
  (void)sum;
  htp_idx_free(&idx);
  return 0;
}
