/*===- kernels/cpu/cpu_internal.h - Pieces the CPU kernels share ----------===*
 *
 * Private to kernels/cpu: not part of the ABI in kernels/htp_kernels.h.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CPU_INTERNAL_H
#define HTP_KERNELS_CPU_INTERNAL_H

#include <stdint.h>

/* Row-wise softmax in place, subtracting each row's max first (so large
 * scores do not overflow expf). Used by attention.c and units.c. */
void htp__softmax_rows(float *scores, int64_t rows, int64_t cols);

#endif /* HTP_KERNELS_CPU_INTERNAL_H */
