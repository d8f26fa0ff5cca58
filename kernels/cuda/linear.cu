/*===- kernels/cuda/linear.cu - y = x·wᵀ + b through cuBLAS --------------===*
 *
 * cuBLAS is column-major: the row-major y[rows, out] = x·wᵀ is the
 * column-major yᵀ = w·xᵀ, i.e. gemm(T, N) with w and x as stored. An f32 y
 * with a bias gets the bias broadcast into it first and the GEMM
 * accumulates onto it (beta = 1). A bf16 y with a bias is rounded once from
 * f32: the GEMM writes x·wᵀ into the f32 workspace and one pass adds the
 * bias and rounds (10 bytes an element, where broadcast, accumulate and
 * convert took 18). Not cuBLAS's own epilogues: they rounded x·wᵀ to bf16
 * before adding the bias for some shapes on an H200 (cuBLAS 13: beta = 1
 * onto a bf16 C at ViT-B/16's, cuBLASLt's bias epilogue at K = 333), up to
 * 4 bf16 ulps off where the bias cancels the product (gpu-check,
 * 2026-11-27).
 * One body for every element type pair (htp_cuda_linear, kernels_internal.h).
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <type_traits>

namespace {

template <typename In, typename Out>
__global__ void broadcast_bias_kernel(const In *bias, Out *y, int64_t rows, int64_t cols) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols)
    htp_cuda_store(y, i, htp_cuda_load(bias, i % cols));
}

} // namespace

template <typename In, typename Out>
int htp_cuda_linear(htp_cuda_kernels *kernels, const In *x, const In *w, const In *b, Out *y,
                    int64_t rows, int64_t in_features, int64_t out_features) {
  if (htp_cuda_check_int(kernels, "linear", rows, in_features, out_features))
    return 1;
  if (rows == 0 || out_features == 0)
    return 0;
  if (!b)
    return htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features, (int)rows,
                         (int)in_features, 1.0f, w, (int)in_features, x, (int)in_features,
                         0.0f, y, (int)out_features);
  if constexpr (std::is_same_v<Out, float>) {
    broadcast_bias_kernel<<<htp_cuda_blocks(rows * out_features, 256), 256, 0,
                            kernels->stream>>>(b, y, rows, out_features);
    HTP_CUDA_CHECK_LAUNCH(kernels);
    return htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features, (int)rows,
                         (int)in_features, 1.0f, w, (int)in_features, x, (int)in_features,
                         1.0f, y, (int)out_features);
  } else {
    float *sum = htp_cuda_workspace(kernels, rows * out_features);
    if (!sum ||
        htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features, (int)rows,
                      (int)in_features, 1.0f, w, (int)in_features, x, (int)in_features, 0.0f,
                      sum, (int)out_features))
      return 1;
    return htp_cuda_bias_add_block(kernels, sum, b, y, rows, out_features);
  }
}

template int htp_cuda_linear<float, float>(htp_cuda_kernels *, const float *, const float *,
                                           const float *, float *, int64_t, int64_t, int64_t);
template int htp_cuda_linear<htp_cuda_bf16, htp_cuda_bf16>(htp_cuda_kernels *,
                                                           const htp_cuda_bf16 *,
                                                           const htp_cuda_bf16 *,
                                                           const htp_cuda_bf16 *,
                                                           htp_cuda_bf16 *, int64_t, int64_t,
                                                           int64_t);
template int htp_cuda_linear<htp_cuda_bf16, float>(htp_cuda_kernels *, const htp_cuda_bf16 *,
                                                   const htp_cuda_bf16 *, const htp_cuda_bf16 *,
                                                   float *, int64_t, int64_t, int64_t);

extern "C" int htp_cuda_linear_f32(htp_cuda_kernels *kernels, const float *x, const float *w,
                                   const float *b, float *y, int64_t rows, int64_t in_features,
                                   int64_t out_features) {
  return htp_cuda_linear(kernels, x, w, b, y, rows, in_features, out_features);
}

extern "C" int htp_cuda_linear_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                    const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                    int64_t rows, int64_t in_features, int64_t out_features) {
  return htp_cuda_linear(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(w),
                         htp_cuda_bf16_ptr(b), htp_cuda_bf16_ptr(y), rows, in_features,
                         out_features);
}
