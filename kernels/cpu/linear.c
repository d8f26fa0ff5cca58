/*===- kernels/cpu/linear.c - y = x·wᵀ + b through OpenBLAS -------------===*
 *
 * The GEMM of htp.linear. The bias is broadcast into y first so the GEMM can
 * accumulate onto it (beta = 1): one pass over y instead of two. The
 * broadcast is a memory-bound pass over y, so it is split over the threads.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <string.h>

void htp_cpu_linear_f32(const float *x, const float *w, const float *b, float *y,
                        int64_t rows, int64_t in_features, int64_t out_features) {
  float beta = 0.0f;
  if (b) {
    const int threads = htp__threads_for(rows * out_features);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
    for (int64_t row = 0; row < rows; ++row)
      memcpy(y + row * out_features, b, (size_t)out_features * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out_features,
              (int)in_features, 1.0f, x, (int)in_features, w, (int)in_features, beta,
              y, (int)out_features);
}
