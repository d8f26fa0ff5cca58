/*===- tools/htp-run/shape.h - Shapes as text for messages and tables -----===*
 *
 * The executor's tensors are the runtime's signature tensors
 * (runtime/htp_entry.h); this prints their shapes the one way every
 * message and report of htp-run shows them.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_SHAPE_H
#define HTP_RUN_SHAPE_H

#include "runtime/htp_entry.h"

#include <stddef.h>
#include <stdint.h>

/* Writes "[2, 5, 12]" into out (truncated to size, always terminated). */
void htp_format_shape(char *out, size_t size, int rank, const int64_t *dims);

#endif /* HTP_RUN_SHAPE_H */
