/*===- test/fuzz/fuzz_idx.c - libFuzzer target: the IDX reader ------------===*
 *
 * Feeds arbitrary bytes to htp_idx_parse (what htp_idx_read runs on a file's
 * inflated bytes), and those that start as gzip does (1f 8b) to
 * htp_idx_read through a file, for its inflate loop. Besides what
 * ASan/UBSan catch, it checks what a caller relies on: success gives 1..4
 * dimensions, each >= 1, count = their product and count readable bytes;
 * failure gives a message and nothing.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/train/idx.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* What a caller relies on, after a parse or read that returned rc. */
static void check(int rc, htp_idx *idx, const char *err) {
  if (rc != 0) {
    if (err[0] == '\0' || idx->data != NULL || idx->count != 0) {
      fprintf(stderr, "failure without a message or with data left: '%s'\n", err);
      abort();
    }
    return;
  }
  if (idx->num_dims < 1 || idx->num_dims > HTP_IDX_MAX_DIMS || !idx->data) abort();
  uint64_t count = 1;
  for (int d = 0; d < idx->num_dims; d++) {
    if (idx->dims[d] == 0) abort();
    count *= idx->dims[d];
  }
  if (count != idx->count || count > HTP_IDX_MAX_BYTES) abort();
  volatile unsigned sum = 0;
  for (uint64_t i = 0; i < idx->count; i++) sum += idx->data[i];
  (void)sum;
  htp_idx_free(idx);
}

static char path[64]; /* the file htp_idx_read reads, made at the first gzip input */
static void remove_file(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  htp_idx idx;
  char err[256] = "";
  check(htp_idx_parse(data, size, &idx, err, sizeof err), &idx, err);
  if (size < 2 || data[0] != 0x1f || data[1] != 0x8b) return 0;
  if (!path[0]) {
    snprintf(path, sizeof path, "/tmp/fuzz_idx.XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    atexit(remove_file);
  }
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
  err[0] = '\0';
  check(htp_idx_read(path, &idx, err, sizeof err), &idx, err);
  return 0;
}
