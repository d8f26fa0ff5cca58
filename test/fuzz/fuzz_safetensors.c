/*===- test/fuzz/fuzz_safetensors.c - libFuzzer target: safetensors ------===*
 *
 * Feeds arbitrary bytes to htp_safetensors_parse, the function
 * htp_safetensors_open calls on a mapped file, then reads every tensor it
 * accepted (htp_safetensors_read_f32 into a buffer of exactly prod(shape)
 * floats, htp_safetensors_read_bf16 into one of prod(shape) bf16s), so a
 * range the validation let through that is not inside the data, or not
 * prod(shape) elements long, is an ASan report.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly size bytes: reads past the end are caught. */
  unsigned char *bytes = malloc(size ? size : 1);
  if (!bytes)
    return 0;
  memcpy(bytes, data, size);
  htp_safetensors st;
  char err[512] = "";
  if (htp_safetensors_parse(bytes, size, &st, err, sizeof err) != 0) {
    if (err[0] == '\0' || st.count != 0 || st.tensors != NULL) {
      fprintf(stderr, "failure without a message or with tensors left: '%s'\n", err);
      abort();
    }
    free(bytes);
    return 0;
  }
  for (int i = 0; i < st.count; i++) {
    const htp_st_tensor *tensor = &st.tensors[i];
    if (htp_safetensors_find(&st, tensor->name) != tensor)
      abort(); /* names are unique */
    uint64_t count = 1;
    for (int d = 0; d < tensor->rank; d++)
      count *= (uint64_t)tensor->dims[d];
    /* Big but valid shapes are possible only with as many data bytes. */
    if (count > size)
      abort();
    float *out = malloc(count ? count * sizeof(float) : 1);
    if (!out)
      abort();
    char read_err[256] = "";
    if (htp_safetensors_read_f32(&st, tensor, out, read_err, sizeof read_err) != 0 &&
        read_err[0] == '\0')
      abort();
    free(out);
    uint16_t *narrow = malloc(count ? count * sizeof(uint16_t) : 1);
    if (!narrow)
      abort();
    read_err[0] = '\0';
    if (htp_safetensors_read_bf16(&st, tensor, narrow, read_err, sizeof read_err) != 0 &&
        read_err[0] == '\0')
      abort();
    free(narrow);
  }
  htp_safetensors_close(&st);
  free(bytes);
  return 0;
}
