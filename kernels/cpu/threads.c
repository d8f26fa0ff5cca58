/*===- kernels/cpu/threads.c - OpenBLAS's thread count --------------------===*
 *
 * Only the kernels know which BLAS computes their GEMMs; an executor that
 * gives each rank its share of the cores sets BLAS's threads through here.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"

#include <cblas.h>

void htp_cpu_set_blas_threads(int threads) {
  if (threads >= 1)
    openblas_set_num_threads(threads);
}

int htp_cpu_blas_threads(void) { return openblas_get_num_threads(); }
