/*===- kernels/cpu/plain_blas/cblas.h - The CBLAS subset the kernels use ---===*
 *
 * Stands in for OpenBLAS's <cblas.h> when the build has no OpenBLAS
 * (-DHTP_WITH_OPENBLAS=OFF: GPU machines, where the CPU kernels only serve
 * as the CUDA twins' references). kernels/CMakeLists.txt puts this folder
 * on the include path ahead of the system's, so kernels/cpu compiles
 * unchanged. Only what kernels/cpu calls is declared: row-major SGEMM, a
 * plain C loop (sgemm.c): correct, and far slower than any BLAS.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_PLAIN_BLAS_CBLAS_H
#define HTP_PLAIN_BLAS_CBLAS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The values are CBLAS's, so code that stores them means the same thing. */
typedef enum { CblasRowMajor = 101, CblasColMajor = 102 } CBLAS_ORDER;
typedef enum { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 } CBLAS_TRANSPOSE;

/* C = alpha op(A) op(B) + beta C. Supports what the kernels pass: row-major,
 * A and B either way; anything else sets every C element to NaN
 * (loudly wrong in a test rather than silently). */
void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE transa, CBLAS_TRANSPOSE transb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc);

#ifdef __cplusplus
}
#endif

#endif /* HTP_PLAIN_BLAS_CBLAS_H */
