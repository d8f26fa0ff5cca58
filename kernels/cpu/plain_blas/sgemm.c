/*===- kernels/cpu/plain_blas/sgemm.c - A plain C SGEMM for builds without BLAS
 *
 * See cblas.h beside this file. Loops ordered so the innermost one runs
 * along contiguous rows (vectorisable): for B not transposed, C's row i
 * accumulates op(A)[i,p] * B's row p; for B transposed, C[i,j] is a dot
 * product of op(A)'s row i and B's row j (op(A)'s row is A's column i, read
 * with a stride, when A is transposed).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "cblas.h"

#include <math.h>
#include <stdlib.h>

/* op(A)[i, p]: A's row i, or its column i when transposed. */
static inline float a_at(const float *a, int lda, int transposed, int i, int p) {
  return transposed ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
}

void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE transa, CBLAS_TRANSPOSE transb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc) {
  const int supported = order == CblasRowMajor &&
                        (transa == CblasNoTrans || transa == CblasTrans) &&
                        (transb == CblasNoTrans || transb == CblasTrans);
  const int ta = transa == CblasTrans;
  for (int i = 0; i < m; ++i) {
    float *crow = c + (size_t)i * ldc;
    if (!supported) {
      for (int j = 0; j < n; ++j)
        crow[j] = NAN;
      continue;
    }
    /* beta == 0 overwrites (C may hold garbage), as BLAS does. */
    for (int j = 0; j < n; ++j)
      crow[j] = beta == 0.0f ? 0.0f : beta * crow[j];
    if (transb == CblasNoTrans) {
      for (int p = 0; p < k; ++p) {
        const float s = alpha * a_at(a, lda, ta, i, p);
        const float *brow = b + (size_t)p * ldb;
        for (int j = 0; j < n; ++j)
          crow[j] += s * brow[j];
      }
    } else {
      for (int j = 0; j < n; ++j) {
        const float *brow = b + (size_t)j * ldb;
        float sum = 0.0f;
        for (int p = 0; p < k; ++p)
          sum += a_at(a, lda, ta, i, p) * brow[p];
        crow[j] += alpha * sum;
      }
    }
  }
}
