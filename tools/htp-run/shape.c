/*===- tools/htp-run/shape.c - Shapes as text -----------------------------===*
 *
 * This file implements shape.h.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/shape.h"

#include <stdio.h>

void htp_format_shape(char *out, size_t size, int rank, const int64_t *dims) {
  if (size == 0)
    return;
  size_t length = (size_t)snprintf(out, size, "[");
  for (int d = 0; d < rank && length < size; d++)
    length += (size_t)snprintf(out + length, size - length, "%s%lld", d ? ", " : "",
                               (long long)dims[d]);
  if (length < size)
    snprintf(out + length, size - length, "]");
}
