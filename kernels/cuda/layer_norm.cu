/*===- kernels/cuda/layer_norm.cu - Layer norm, one block per row --------===*
 *
 * Two passes over the row held in registers/L1 (mean, then centred
 * variance), as the CPU twin does, so large offsets do not cancel.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

constexpr int kThreads = 256;

/* Sum over the block; every thread gets the result. */
__device__ float block_sum(float value, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads(); /* shared may still be read from a previous call */
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < (int)blockDim.x / 32; ++i)
    total += shared[i];
  return total;
}

__global__ void layer_norm_kernel(const float *x, const float *gamma, const float *beta,
                                  float *y, int64_t dim, float epsilon) {
  __shared__ float shared[kThreads / 32];
  const float *in = x + blockIdx.x * dim;
  float *out = y + blockIdx.x * dim;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    sum += in[i];
  float mean = block_sum(sum, shared) / (float)dim;
  float squares = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float centered = in[i] - mean;
    squares += centered * centered;
  }
  float inv_std = rsqrtf(block_sum(squares, shared) / (float)dim + epsilon);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    out[i] = (in[i] - mean) * inv_std * gamma[i] + beta[i];
}

extern "C" int htp_cuda_layer_norm_f32(htp_cuda_kernels *kernels, const float *x,
                                       const float *gamma, const float *beta, float *y,
                                       int64_t rows, int64_t dim, float epsilon) {
  layer_norm_kernel<<<(unsigned)rows, kThreads, 0, kernels->stream>>>(x, gamma, beta, y, dim,
                                                                       epsilon);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}
