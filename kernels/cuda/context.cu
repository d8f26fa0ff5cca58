/*===- kernels/cuda/context.cu - Device, stream and cuBLAS handle --------===*/
#include "kernels/cuda/kernels_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

int htp_cuda_fail(htp_cuda_kernels *kernels, const char *what, const char *detail) {
  snprintf(kernels->error, sizeof kernels->error, "%s: %s", what, detail);
  return 1;
}

extern "C" int htp_cuda_kernels_create(int device, htp_cuda_kernels **out, char *err,
                                       int err_size) {
  *out = NULL;
  htp_cuda_kernels *kernels = (htp_cuda_kernels *)calloc(1, sizeof *kernels);
  if (!kernels) {
    if (err) snprintf(err, (size_t)err_size, "out of memory");
    return 1;
  }
  kernels->device = device;
  int failed = 0;
  cudaError_t status = cudaSetDevice(device);
  if (status == cudaSuccess)
    status = cudaStreamCreateWithFlags(&kernels->stream, cudaStreamNonBlocking);
  if (status != cudaSuccess) {
    if (err) snprintf(err, (size_t)err_size, "CUDA device %d: %s", device, cudaGetErrorString(status));
    failed = 1;
  } else if (cublasCreate(&kernels->blas) != CUBLAS_STATUS_SUCCESS ||
             cublasSetStream(kernels->blas, kernels->stream) != CUBLAS_STATUS_SUCCESS) {
    if (err) snprintf(err, (size_t)err_size, "cuBLAS initialisation failed on device %d", device);
    failed = 1;
  }
  if (failed) {
    htp_cuda_kernels_destroy(kernels);
    return 1;
  }
  *out = kernels;
  return 0;
}

extern "C" void htp_cuda_kernels_destroy(htp_cuda_kernels *kernels) {
  if (!kernels)
    return;
  if (kernels->staging)
    cudaFree(kernels->staging);
  if (kernels->workspace)
    cudaFree(kernels->workspace);
  for (int i = 0; i < 2; ++i)
    if (kernels->marks[i])
      cudaEventDestroy(kernels->marks[i]);
  if (kernels->blas)
    cublasDestroy(kernels->blas);
  if (kernels->stream)
    cudaStreamDestroy(kernels->stream);
  free(kernels);
}

int htp_cuda_buffer_reserve(htp_cuda_kernels *kernels, void **buffer, size_t *size,
                            size_t bytes) {
  if (bytes <= *size)
    return 0;
  size_t grown = *size ? *size : 4096;
  while (grown < bytes)
    grown *= 2;
  HTP_CUDA_CHECK(kernels, cudaStreamSynchronize(kernels->stream));
  if (*buffer)
    HTP_CUDA_CHECK(kernels, cudaFree(*buffer));
  *buffer = NULL;
  *size = 0;
  HTP_CUDA_CHECK(kernels, cudaMalloc(buffer, grown));
  *size = grown;
  return 0;
}

int htp_cuda_check_int(htp_cuda_kernels *kernels, const char *op, int64_t a, int64_t b,
                       int64_t c) {
  if (a < 0 || b < 0 || c < 0 || a > INT_MAX || b > INT_MAX || c > INT_MAX)
    return htp_cuda_fail(kernels, op, "a size is negative or too large for cuBLAS");
  return 0;
}

extern "C" int htp_cuda_kernels_sync(htp_cuda_kernels *kernels) {
  HTP_CUDA_CHECK(kernels, cudaStreamSynchronize(kernels->stream));
  return 0;
}

extern "C" const char *htp_cuda_kernels_error(const htp_cuda_kernels *kernels) {
  return kernels ? kernels->error : "no CUDA kernels object";
}
