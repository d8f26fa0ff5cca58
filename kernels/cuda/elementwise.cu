/*===- kernels/cuda/elementwise.cu - GELU, residual add, bias add --------===*
 *
 * One body per op for f32 and bf16: loads widen to f32, the op runs in f32,
 * the store rounds once (kernels_internal.h), so a bf16 result is the f32
 * result of the same bf16 inputs, rounded. y may equal an input: each
 * thread reads its element before it writes it. Also the block conversion
 * between element types that the bf16 attention and unit kernels use.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

namespace {

constexpr int kThreads = 256;

/* Each op has a kernel of one element per thread and one of four (quads,
 * htp_cuda_load4), which a launch takes where the sizes and pointers allow. */
template <typename T>
__global__ void gelu_kernel(const T *x, T *y, int64_t n, int32_t tanh_approx) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    htp_cuda_store(y, i, htp_cuda_gelu(htp_cuda_load(x, i), tanh_approx));
}
template <typename T>
__global__ void gelu_quads_kernel(const T *x, T *y, int64_t n, int32_t tanh_approx) {
  int64_t i = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n)
    return;
  float4 v = htp_cuda_load4(x, i);
  v.x = htp_cuda_gelu(v.x, tanh_approx), v.y = htp_cuda_gelu(v.y, tanh_approx);
  v.z = htp_cuda_gelu(v.z, tanh_approx), v.w = htp_cuda_gelu(v.w, tanh_approx);
  htp_cuda_store4(y, i, v);
}

template <typename T> __global__ void add_kernel(const T *a, const T *b, T *y, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    htp_cuda_store(y, i, htp_cuda_load(a, i) + htp_cuda_load(b, i));
}
template <typename T> __global__ void add_quads_kernel(const T *a, const T *b, T *y, int64_t n) {
  int64_t i = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n)
    return;
  const float4 u = htp_cuda_load4(a, i), v = htp_cuda_load4(b, i);
  htp_cuda_store4(y, i, make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w));
}

/* y = x + bias broadcast over the rows (+ r, a residual of y's type, where
 * r is not NULL), each of its own type, summed in f32 and rounded once (the
 * bf16 linear adds a bf16 bias to its f32 sums). */
template <typename X, typename B, typename Y>
__global__ void bias_add_kernel(const X *x, const B *bias, const Y *r, Y *y, int64_t rows,
                                int64_t cols) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols)
    return;
  float v = htp_cuda_load(x, i) + htp_cuda_load(bias, i % cols);
  if (r)
    v += htp_cuda_load(r, i);
  htp_cuda_store(y, i, v);
}
template <typename X, typename B, typename Y>
__global__ void bias_add_quads_kernel(const X *x, const B *bias, const Y *r, Y *y,
                                      int64_t rows, int64_t cols) {
  int64_t i = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= rows * cols)
    return;
  const float4 u = htp_cuda_load4(x, i), v = htp_cuda_load4(bias, i % cols);
  float4 sum = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
  if (r) {
    const float4 w = htp_cuda_load4(r, i);
    sum = make_float4(sum.x + w.x, sum.y + w.y, sum.z + w.z, sum.w + w.w);
  }
  htp_cuda_store4(y, i, sum);
}

template <typename In, typename Out>
__global__ void convert_block_kernel(const In *src, int64_t src_ld, Out *dst, int64_t dst_ld,
                                     int64_t rows, int64_t cols) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols)
    return;
  const int64_t r = i / cols, c = i % cols;
  htp_cuda_store(dst, r * dst_ld + c, htp_cuda_load(src, r * src_ld + c));
}

template <typename T>
int gelu(htp_cuda_kernels *kernels, const T *x, T *y, int64_t n, int32_t tanh_approx) {
  if (n <= 0)
    return n < 0 ? htp_cuda_fail(kernels, "gelu", "negative size") : 0;
  if (htp_cuda_quads(n, x, y))
    gelu_quads_kernel<<<htp_cuda_blocks(n / 4, kThreads), kThreads, 0, kernels->stream>>>(
        x, y, n, tanh_approx);
  else
    gelu_kernel<<<htp_cuda_blocks(n, kThreads), kThreads, 0, kernels->stream>>>(x, y, n,
                                                                               tanh_approx);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}


} // namespace

template <typename T> int htp_cuda_add(htp_cuda_kernels *kernels, const T *a, const T *b, T *y, int64_t n) {
  if (n <= 0)
    return n < 0 ? htp_cuda_fail(kernels, "add", "negative size") : 0;
  if (htp_cuda_quads(n, a, b, y))
    add_quads_kernel<<<htp_cuda_blocks(n / 4, kThreads), kThreads, 0, kernels->stream>>>(a, b,
                                                                                          y, n);
  else
    add_kernel<<<htp_cuda_blocks(n, kThreads), kThreads, 0, kernels->stream>>>(a, b, y, n);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

template int htp_cuda_add<float>(htp_cuda_kernels *, const float *, const float *, float *,
                                 int64_t);
template int htp_cuda_add<htp_cuda_bf16>(htp_cuda_kernels *, const htp_cuda_bf16 *,
                                         const htp_cuda_bf16 *, htp_cuda_bf16 *, int64_t);

template <typename X, typename B, typename Y>
int htp_cuda_bias_add_block(htp_cuda_kernels *kernels, const X *x, const B *bias, Y *y,
                            int64_t rows, int64_t cols, const Y *r) {
  if (rows <= 0 || cols <= 0)
    return rows < 0 || cols < 0 ? htp_cuda_fail(kernels, "bias_add", "negative size") : 0;
  if (htp_cuda_quads(cols, x, bias, y, r))
    bias_add_quads_kernel<<<htp_cuda_blocks(rows * cols / 4, kThreads), kThreads, 0,
                            kernels->stream>>>(x, bias, r, y, rows, cols);
  else
    bias_add_kernel<<<htp_cuda_blocks(rows * cols, kThreads), kThreads, 0, kernels->stream>>>(
        x, bias, r, y, rows, cols);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

template int htp_cuda_bias_add_block<float, htp_cuda_bf16, htp_cuda_bf16>(
    htp_cuda_kernels *, const float *, const htp_cuda_bf16 *, htp_cuda_bf16 *, int64_t, int64_t,
    const htp_cuda_bf16 *);

template <typename In, typename Out>
int htp_cuda_convert_block(htp_cuda_kernels *kernels, const In *src, int64_t src_ld, Out *dst,
                           int64_t dst_ld, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0)
    return rows < 0 || cols < 0 ? htp_cuda_fail(kernels, "convert", "negative size") : 0;
  convert_block_kernel<<<htp_cuda_blocks(rows * cols, kThreads), kThreads, 0,
                         kernels->stream>>>(src, src_ld, dst, dst_ld, rows, cols);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

template int htp_cuda_convert_block<float, htp_cuda_bf16>(htp_cuda_kernels *, const float *,
                                                          int64_t, htp_cuda_bf16 *, int64_t,
                                                          int64_t, int64_t);
template int htp_cuda_convert_block<htp_cuda_bf16, float>(htp_cuda_kernels *,
                                                          const htp_cuda_bf16 *, int64_t,
                                                          float *, int64_t, int64_t, int64_t);

extern "C" int htp_cuda_gelu_f32(htp_cuda_kernels *kernels, const float *x, float *y, int64_t n,
                                 int32_t tanh_approx) {
  return gelu(kernels, x, y, n, tanh_approx);
}

extern "C" int htp_cuda_gelu_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x, htp_bf16 *y,
                                  int64_t n, int32_t tanh_approx) {
  return gelu(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(y), n, tanh_approx);
}

extern "C" int htp_cuda_add_f32(htp_cuda_kernels *kernels, const float *a, const float *b,
                                float *y, int64_t n) {
  return htp_cuda_add(kernels, a, b, y, n);
}

extern "C" int htp_cuda_add_bf16(htp_cuda_kernels *kernels, const htp_bf16 *a,
                                 const htp_bf16 *b, htp_bf16 *y, int64_t n) {
  return htp_cuda_add(kernels, htp_cuda_bf16_ptr(a), htp_cuda_bf16_ptr(b), htp_cuda_bf16_ptr(y), n);
}

extern "C" int htp_cuda_bias_add_f32(htp_cuda_kernels *kernels, const float *x, const float *bias,
                                     float *y, int64_t rows, int64_t cols) {
  return htp_cuda_bias_add_block(kernels, x, bias, y, rows, cols);
}

extern "C" int htp_cuda_bias_add_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                      const htp_bf16 *bias, htp_bf16 *y, int64_t rows,
                                      int64_t cols) {
  return htp_cuda_bias_add_block(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(bias),
                                 htp_cuda_bf16_ptr(y), rows, cols);
}

extern "C" int htp_cuda_bias_add_residual_f32(htp_cuda_kernels *kernels, const float *x,
                                              const float *bias, const float *r, float *y,
                                              int64_t rows, int64_t cols) {
  return htp_cuda_bias_add_block(kernels, x, bias, y, rows, cols, r);
}

extern "C" int htp_cuda_bias_add_residual_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                               const htp_bf16 *bias, const htp_bf16 *r,
                                               htp_bf16 *y, int64_t rows, int64_t cols) {
  return htp_cuda_bias_add_block(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(bias),
                                 htp_cuda_bf16_ptr(y), rows, cols, htp_cuda_bf16_ptr(r));
}
