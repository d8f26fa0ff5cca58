/*===- kernels/cpu/threads.c - OpenBLAS's thread count, and the kernels' ---===*
 *
 * Only the kernels know which BLAS computes their GEMMs; an executor that
 * gives each rank its share of the cores sets BLAS's threads through here.
 * The kernels' own OpenMP loops (layer norm, GELU, attention, ...) use the
 * same count, read from BLAS so there is one setting.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>

void htp_cpu_set_blas_threads(int threads) {
  if (threads >= 1)
    openblas_set_num_threads(threads);
}

int htp_cpu_blas_threads(void) { return openblas_get_num_threads(); }

int htp__threads(void) {
  int threads = openblas_get_num_threads();
  return threads >= 1 ? threads : 1;
}

int htp__threads_for(int64_t work) {
  /* About 16k floats: below it the region's start-up (microseconds) is
   * comparable with the loop itself. */
  return work < (1 << 14) ? 1 : htp__threads();
}
