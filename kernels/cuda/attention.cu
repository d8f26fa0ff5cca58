/*===- kernels/cuda/attention.cu - Multi-head self-attention, timm layout -===*
 *
 * The CPU twin's algorithm with the per-image loop folded into cuBLAS
 * strided batched GEMMs: for each head, the scores of every image come from
 * one call (image b's q and k start b·tokens qkv rows apart), then one
 * softmax launch over all batch·heads·tokens rows, then per head one batched
 * p·v that writes that head's columns of every image's context: 2 heads + 1
 * launches, where a loop over the images took 3 per image (192 for ViT-L/16
 * at batch 64, launch-bound on an H200). Scratch layout, in floats:
 *   [qkv: rows * 3 * inner][context: rows * inner]
 *   [scores: heads * batch * tokens², head-major]
 * The bf16 twin uses the same f32 scratch: its qkv projection (bf16 GEMM)
 * writes f32 q, k, v, and everything up to the context stays f32; the
 * context is rounded to bf16 into the qkv region (free by then; half of it
 * would do) for the bf16 output projection.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <math.h>
#include <type_traits>

constexpr int kThreads = 256;

/* Max (is_max) or sum over the block; every thread gets the result. */
__device__ float block_reduce(float value, bool is_max, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = is_max ? fmaxf(value, other) : value + other;
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  float total = shared[0];
  for (int i = 1; i < (int)blockDim.x / 32; ++i)
    total = is_max ? fmaxf(total, shared[i]) : total + shared[i];
  return total;
}

/* Numerically stable softmax of one row per block, in place. */
__global__ void softmax_rows_kernel(float *scores, int64_t cols) {
  __shared__ float shared[kThreads / 32];
  float *row = scores + blockIdx.x * cols;
  float max = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    max = fmaxf(max, row[c]);
  max = block_reduce(max, true, shared);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float e = __expf(row[c] - max);
    row[c] = e;
    sum += e;
  }
  float inv = 1.0f / block_reduce(sum, false, shared);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    row[c] *= inv;
}

int htp_cuda_softmax_rows(htp_cuda_kernels *kernels, float *scores, int64_t rows,
                          int64_t cols) {
  softmax_rows_kernel<<<(unsigned)rows, kThreads, 0, kernels->stream>>>(scores, cols);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

namespace {

template <typename T>
int attention(htp_cuda_kernels *kernels, const T *x, const T *wqkv, const T *bqkv,
              const T *wproj, const T *bproj, T *y, float *scratch, int64_t batch,
              int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const char *op = "attention";
  int64_t rows = batch * tokens, inner = num_heads * head_dim, qkv_stride = 3 * inner;
  if (htp_cuda_check_int(kernels, op, rows, qkv_stride, tokens * tokens) ||
      htp_cuda_check_int(kernels, op, model_dim, head_dim, num_heads) ||
      htp_cuda_check_int(kernels, op, batch, tokens * qkv_stride, tokens * inner))
    return 1;
  float *qkv = scratch;
  float *context = qkv + rows * qkv_stride;
  float *scores = context + rows * inner;
  float scale = 1.0f / sqrtf((float)head_dim), one = 1.0f, zero = 0.0f;
  int t = (int)tokens, hd = (int)head_dim, ld = (int)qkv_stride;

  if (htp_cuda_linear(kernels, x, wqkv, bqkv, qkv, rows, model_dim, qkv_stride))
    return 1;
  const int images = (int)batch;
  const int64_t image_qkv = tokens * qkv_stride, image_scores = tokens * tokens;
  for (int64_t h = 0; h < num_heads; ++h) {
    const float *head = qkv + h * head_dim;
    float *head_scores = scores + h * batch * image_scores;
    /* Row-major scores[t, t] = q·kᵀ is column-major scoresᵀ = k·qᵀ. */
    HTP_CUBLAS_CHECK(kernels, cublasSgemmStridedBatched(
                                  kernels->blas, CUBLAS_OP_T, CUBLAS_OP_N, t, t, hd, &scale,
                                  head + inner, ld, image_qkv, head, ld, image_qkv, &zero,
                                  head_scores, t, image_scores, images));
  }
  if (htp_cuda_softmax_rows(kernels, scores, num_heads * batch * tokens, tokens))
    return 1;
  for (int64_t h = 0; h < num_heads; ++h) {
    /* Row-major context[t, hd] = p·v is column-major contextᵀ = vᵀ·pᵀ. */
    HTP_CUBLAS_CHECK(kernels, cublasSgemmStridedBatched(
                                  kernels->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, t, t, &one,
                                  qkv + 2 * inner + h * head_dim, ld, image_qkv,
                                  scores + h * batch * image_scores, t, image_scores, &zero,
                                  context + h * head_dim, (int)inner, tokens * inner, images));
  }
  if constexpr (std::is_same_v<T, float>) {
    return htp_cuda_linear(kernels, context, wproj, bproj, y, rows, inner, model_dim);
  } else {
    T *rounded = reinterpret_cast<T *>(qkv);
    if (htp_cuda_convert_block(kernels, context, inner, rounded, inner, rows, inner))
      return 1;
    return htp_cuda_linear(kernels, (const T *)rounded, wproj, bproj, y, rows, inner,
                           model_dim);
  }
}

} // namespace

extern "C" int htp_cuda_attention_f32(htp_cuda_kernels *kernels, const float *x,
                                      const float *wqkv, const float *bqkv, const float *wproj,
                                      const float *bproj, float *y, float *scratch, int64_t batch,
                                      int64_t tokens, int64_t model_dim, int64_t num_heads,
                                      int64_t head_dim) {
  return attention(kernels, x, wqkv, bqkv, wproj, bproj, y, scratch, batch, tokens, model_dim,
                   num_heads, head_dim);
}

extern "C" int htp_cuda_attention_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                       const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                       const htp_bf16 *wproj, const htp_bf16 *bproj, htp_bf16 *y,
                                       float *scratch, int64_t batch, int64_t tokens,
                                       int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  return attention(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(wqkv),
                   htp_cuda_bf16_ptr(bqkv), htp_cuda_bf16_ptr(wproj), htp_cuda_bf16_ptr(bproj),
                   htp_cuda_bf16_ptr(y), scratch, batch, tokens, model_dim, num_heads, head_dim);
}
