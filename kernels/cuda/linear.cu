/*===- kernels/cuda/linear.cu - y = x·wᵀ + b through cuBLAS --------------===*
 *
 * cuBLAS is column-major: the row-major y[rows, out] = x·wᵀ is the
 * column-major yᵀ = w·xᵀ, i.e. gemm(T, N) with w and x as stored. The bias is
 * broadcast into y first and the GEMM accumulates onto it (beta = 1).
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

__global__ void broadcast_bias_kernel(const float *bias, float *y, int64_t rows, int64_t cols) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols)
    y[i] = bias[i % cols];
}

extern "C" int htp_cuda_linear_f32(htp_cuda_kernels *kernels, const float *x, const float *w,
                                   const float *b, float *y, int64_t rows, int64_t in_features,
                                   int64_t out_features) {
  float alpha = 1.0f, beta = 0.0f;
  if (b) {
    broadcast_bias_kernel<<<htp_cuda_blocks(rows * out_features, 256), 256, 0, kernels->stream>>>(
        b, y, rows, out_features);
    HTP_CUDA_CHECK_LAUNCH(kernels);
    beta = 1.0f;
  }
  HTP_CUBLAS_CHECK(kernels, cublasSgemm(kernels->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features,
                                        (int)rows, (int)in_features, &alpha, w, (int)in_features,
                                        x, (int)in_features, &beta, y, (int)out_features));
  return 0;
}
