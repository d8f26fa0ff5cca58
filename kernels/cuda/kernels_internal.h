/*===- kernels/cuda/kernels_internal.h - State and checks of the CUDA twins ===*/
#ifndef HTP_KERNELS_CUDA_INTERNAL_H
#define HTP_KERNELS_CUDA_INTERNAL_H

#include "kernels/htp_kernels_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

struct htp_cuda_kernels {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  /* Device copy of the host-side lists (unit ids, input pointers) that the
   * gather kernels read (units.cu); grown on demand, freed with the object. */
  void *staging;
  size_t staging_bytes;
  char error[256];
};

/* Makes kernels->staging hold at least `bytes` bytes. Growing waits for the
 * stream first (earlier launches may still read the old buffer). */
int htp_cuda_staging_reserve(htp_cuda_kernels *kernels, size_t bytes);

/* Numerically stable softmax of each of `rows` rows of `cols` scores, in
 * place, enqueued on kernels' stream (attention.cu; the plain and the
 * listed-heads attention share it). Returns 0, or non-zero with the error. */
int htp_cuda_softmax_rows(htp_cuda_kernels *kernels, float *scores, int64_t rows,
                          int64_t cols);

/* Records a failure on `kernels` and returns non-zero; 0 for success. */
int htp_cuda_fail(htp_cuda_kernels *kernels, const char *what, const char *detail);

#define HTP_CUDA_CHECK(kernels, call)                                                    \
  do {                                                                                  \
    cudaError_t status_ = (call);                                                       \
    if (status_ != cudaSuccess)                                                         \
      return htp_cuda_fail((kernels), #call, cudaGetErrorString(status_));              \
  } while (0)

#define HTP_CUBLAS_CHECK(kernels, call)                                                  \
  do {                                                                                  \
    cublasStatus_t status_ = (call);                                                    \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                               \
      return htp_cuda_fail((kernels), #call, cublasGetStatusString(status_));           \
  } while (0)

/* A launch leaves no status of its own: ask for the last error. */
#define HTP_CUDA_CHECK_LAUNCH(kernels) HTP_CUDA_CHECK(kernels, cudaGetLastError())

static inline unsigned htp_cuda_blocks(int64_t n, int threads) {
  return (unsigned)((n + threads - 1) / threads);
}

#endif /* HTP_KERNELS_CUDA_INTERNAL_H */
