/*===- kernels/cuda/elementwise.cu - GELU, residual add, bias add --------===*/
#include "kernels/cuda/kernels_internal.h"

__global__ void gelu_kernel(const float *x, float *y, int64_t n, int32_t tanh_approx) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float v = x[i];
  if (tanh_approx)
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  else
    y[i] = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}

__global__ void add_kernel(const float *a, const float *b, float *y, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = a[i] + b[i];
}

__global__ void bias_add_kernel(const float *x, const float *bias, float *y, int64_t rows,
                                int64_t cols) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols)
    y[i] = x[i] + bias[i % cols];
}

extern "C" int htp_cuda_gelu_f32(htp_cuda_kernels *kernels, const float *x, float *y, int64_t n,
                                 int32_t tanh_approx) {
  gelu_kernel<<<htp_cuda_blocks(n, 256), 256, 0, kernels->stream>>>(x, y, n, tanh_approx);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

extern "C" int htp_cuda_add_f32(htp_cuda_kernels *kernels, const float *a, const float *b,
                                float *y, int64_t n) {
  add_kernel<<<htp_cuda_blocks(n, 256), 256, 0, kernels->stream>>>(a, b, y, n);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

extern "C" int htp_cuda_bias_add_f32(htp_cuda_kernels *kernels, const float *x, const float *bias,
                                     float *y, int64_t rows, int64_t cols) {
  bias_add_kernel<<<htp_cuda_blocks(rows * cols, 256), 256, 0, kernels->stream>>>(x, bias, y, rows,
                                                                                  cols);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}
