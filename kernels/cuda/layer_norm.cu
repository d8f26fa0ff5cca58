/*===- kernels/cuda/layer_norm.cu - Layer norm, a block or a warp a row -===*
 *
 * Two passes over the row held in registers/L1 (mean, then centred
 * variance), as the CPU twin does, so large offsets do not cancel. One body
 * for f32 and bf16 tensors: the statistics and the affine step are f32
 * either way, the output rounded once.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int htp_cuda_layer_norm_kernel_from_env(void) {
  const char *value = getenv("HTP_CUDA_LAYER_NORM");
  if (!value || !*value || strcmp(value, "block") == 0)
    return HTP_CUDA_LAYER_NORM_BLOCK;
  return strcmp(value, "warp") == 0 ? HTP_CUDA_LAYER_NORM_WARP : -1;
}

namespace {

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

/* Quads: the row moves four elements a load (htp_cuda_load4), where dim
 * and the pointers allow; the sums' order differs, nothing else. */
template <typename T, bool Quads>
__global__ void layer_norm_kernel(const T *x, const T *gamma, const T *beta, T *y, int64_t dim,
                                  float epsilon) {
  __shared__ float shared[kThreads / 32];
  const T *in = x + blockIdx.x * dim;
  T *out = y + blockIdx.x * dim;
  const int64_t step = Quads ? 4 * (int64_t)blockDim.x : blockDim.x;
  const int64_t first = Quads ? 4 * (int64_t)threadIdx.x : threadIdx.x;
  float sum = 0.0f;
  for (int64_t i = first; i < dim; i += step) {
    if constexpr (Quads) {
      const float4 v = htp_cuda_load4(in, i);
      sum += (v.x + v.y) + (v.z + v.w);
    } else {
      sum += htp_cuda_load(in, i);
    }
  }
  float mean = block_sum(sum, shared) / (float)dim;
  float squares = 0.0f;
  for (int64_t i = first; i < dim; i += step) {
    if constexpr (Quads) {
      const float4 v = htp_cuda_load4(in, i);
      const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
      squares += (a * a + b * b) + (c * c + d * d);
    } else {
      float centered = htp_cuda_load(in, i) - mean;
      squares += centered * centered;
    }
  }
  float inv_std = rsqrtf(block_sum(squares, shared) / (float)dim + epsilon);
  /* Each thread reads only the elements it writes: y may equal x. */
  for (int64_t i = first; i < dim; i += step) {
    if constexpr (Quads) {
      const float4 v = htp_cuda_load4(in, i), g = htp_cuda_load4(gamma, i),
                   b = htp_cuda_load4(beta, i);
      htp_cuda_store4(out, i,
                      make_float4((v.x - mean) * inv_std * g.x + b.x,
                                  (v.y - mean) * inv_std * g.y + b.y,
                                  (v.z - mean) * inv_std * g.z + b.z,
                                  (v.w - mean) * inv_std * g.w + b.w));
    } else {
      htp_cuda_store(out, i,
                     (htp_cuda_load(in, i) - mean) * inv_std * htp_cuda_load(gamma, i) +
                         htp_cuda_load(beta, i));
    }
  }
}

/* HTP_CUDA_LAYER_NORM=warp: a warp a row, its up to 128 N elements in
 * registers (N float4 a lane, four elements a load), both statistics by
 * shuffles within the warp and no barrier; where the block kernel gives a
 * row of ViT-L/16's 1024 to 256 threads, four elements each, and three
 * barriers a statistic (30 % of an H200's bandwidth in bf16). Every
 * element of the row is read before any is written: y may equal x. */
template <typename T, int N>
__global__ void layer_norm_warp_kernel(const T *x, const T *gamma, const T *beta, T *y,
                                       int64_t rows, int64_t dim, float epsilon) {
  const int64_t row = (int64_t)blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  if (row >= rows)
    return;
  const int lane = threadIdx.x % 32;
  const T *in = x + row * dim;
  T *out = y + row * dim;
  float4 v[N];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int64_t i = 4 * ((int64_t)j * 32 + lane);
    v[j] = i < dim ? htp_cuda_load4(in, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    sum += (v[j].x + v[j].y) + (v[j].z + v[j].w);
  }
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float mean = sum / (float)dim;
  float squares = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (4 * ((int64_t)j * 32 + lane) < dim) {
      const float a = v[j].x - mean, b = v[j].y - mean, c = v[j].z - mean, d = v[j].w - mean;
      squares += (a * a + b * b) + (c * c + d * d);
    }
  for (int offset = 16; offset > 0; offset /= 2)
    squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  const float inv_std = rsqrtf(squares / (float)dim + epsilon);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int64_t i = 4 * ((int64_t)j * 32 + lane);
    if (i < dim) {
      const float4 g = htp_cuda_load4(gamma, i), b = htp_cuda_load4(beta, i);
      htp_cuda_store4(out, i,
                      make_float4((v[j].x - mean) * inv_std * g.x + b.x,
                                  (v[j].y - mean) * inv_std * g.y + b.y,
                                  (v[j].z - mean) * inv_std * g.z + b.z,
                                  (v[j].w - mean) * inv_std * g.w + b.w));
    }
  }
}

/* The warp kernel for rows of up to 2048 elements moved in fours; false
 * when the shape takes the block kernel. */
template <typename T>
bool layer_norm_warp(htp_cuda_kernels *kernels, const T *x, const T *gamma, const T *beta, T *y,
                     int64_t rows, int64_t dim, float epsilon) {
  if (kernels->layer_norm_kernel != HTP_CUDA_LAYER_NORM_WARP || dim > 2048 ||
      !htp_cuda_quads(dim, x, gamma, beta, y))
    return false;
  const unsigned blocks = (unsigned)((rows + kThreads / 32 - 1) / (kThreads / 32));
  if (dim <= 256)
    layer_norm_warp_kernel<T, 2><<<blocks, kThreads, 0, kernels->stream>>>(x, gamma, beta, y,
                                                                          rows, dim, epsilon);
  else if (dim <= 512)
    layer_norm_warp_kernel<T, 4><<<blocks, kThreads, 0, kernels->stream>>>(x, gamma, beta, y,
                                                                          rows, dim, epsilon);
  else if (dim <= 1024)
    layer_norm_warp_kernel<T, 8><<<blocks, kThreads, 0, kernels->stream>>>(x, gamma, beta, y,
                                                                          rows, dim, epsilon);
  else
    layer_norm_warp_kernel<T, 16><<<blocks, kThreads, 0, kernels->stream>>>(x, gamma, beta, y,
                                                                           rows, dim, epsilon);
  return true;
}

template <typename T>
int layer_norm(htp_cuda_kernels *kernels, const T *x, const T *gamma, const T *beta, T *y,
               int64_t rows, int64_t dim, float epsilon) {
  if (rows < 0 || dim < 1 || rows > INT_MAX)
    return htp_cuda_fail(kernels, "layer_norm", "rows must be in [0, INT_MAX] and dim >= 1");
  if (rows == 0)
    return 0;
  if (layer_norm_warp(kernels, x, gamma, beta, y, rows, dim, epsilon))
    ; /* launched */
  else if (htp_cuda_quads(dim, x, gamma, beta, y))
    layer_norm_kernel<T, true><<<(unsigned)rows, kThreads, 0, kernels->stream>>>(
        x, gamma, beta, y, dim, epsilon);
  else
    layer_norm_kernel<T, false><<<(unsigned)rows, kThreads, 0, kernels->stream>>>(
        x, gamma, beta, y, dim, epsilon);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

} // namespace

extern "C" int htp_cuda_layer_norm_f32(htp_cuda_kernels *kernels, const float *x,
                                       const float *gamma, const float *beta, float *y,
                                       int64_t rows, int64_t dim, float epsilon) {
  return layer_norm(kernels, x, gamma, beta, y, rows, dim, epsilon);
}

extern "C" int htp_cuda_layer_norm_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                        const htp_bf16 *gamma, const htp_bf16 *beta,
                                        htp_bf16 *y, int64_t rows, int64_t dim, float epsilon) {
  return layer_norm(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(gamma),
                    htp_cuda_bf16_ptr(beta), htp_cuda_bf16_ptr(y), rows, dim, epsilon);
}
