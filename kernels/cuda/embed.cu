/*===- kernels/cuda/embed.cu - The model's ends: patches, tokens, pooling -===*
 *
 * CUDA twins of kernels/cpu/embed.c (f32): patchify, token embedding,
 * class-token pooling, row sums and the adjoints of embedding and pooling.
 * Copies are one thread per output element; sums over rows are one thread
 * per column, the rows added in order in double (as the CPU adds within a
 * row block), so a result does not depend on the launch. The CPU sums its
 * row blocks separately, so the two may differ in the last bits of f32.
 * Every size product is checked for int64 overflow before a launch (an
 * overflow is refused).
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"
#include "kernels/htp_scratch.h"

namespace {

constexpr int kThreads = 256;

/* Output element i of patches [B*N, C*P*P] reads images[b, c, py*P + ky, px*P + kx]. */
__global__ void patchify_kernel(const float *images, float *patches, int64_t total,
                                int64_t channels, int64_t height, int64_t width, int64_t patch) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total)
    return;
  const int64_t row_len = channels * patch * patch, grid_w = width / patch;
  const int64_t grid_h = height / patch;
  const int64_t row = i / row_len, k = i % row_len;
  const int64_t c = k / (patch * patch), ky = (k / patch) % patch, kx = k % patch;
  const int64_t b = row / (grid_h * grid_w), tok = row % (grid_h * grid_w);
  const int64_t py = tok / grid_w, px = tok % grid_w;
  patches[i] = images[((b * channels + c) * height + py * patch + ky) * width + px * patch + kx];
}

__global__ void embed_kernel(const float *patches, const float *cls, const float *pos, float *y,
                             int64_t total, int64_t n, int64_t dim) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total)
    return;
  const int64_t d = i % dim, row = i / dim, b = row / (n + 1), t = row % (n + 1);
  const float src = t == 0 ? cls[d] : patches[(b * n + t - 1) * dim + d];
  y[i] = src + pos[t * dim + d];
}

/* dst [batch, count] = src[b * src_stride + offset + j]: cls_token, dpatches. */
__global__ void gather_rows_kernel(const float *src, int64_t src_stride, int64_t offset,
                                   float *dst, int64_t total, int64_t count) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < total)
    dst[i] = src[(i / count) * src_stride + offset + i % count];
}

__global__ void cls_back_kernel(const float *dy, float *dx, int64_t total, int64_t tokens,
                                int64_t dim) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total)
    return;
  const int64_t d = i % dim, t = (i / dim) % tokens, b = i / (dim * tokens);
  dx[i] = t == 0 ? dy[b * dim + d] : 0.0f;
}

__global__ void colsum_kernel(const float *a, int64_t rows, int64_t cols, int64_t ld,
                              float *out, int accumulate) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    sum += a[r * ld + c];
  out[c] = accumulate ? out[c] + (float)sum : (float)sum;
}

/* a * b * c for sizes >= 0, or -1 when it does not fit int64. */
int64_t size_product(int64_t a, int64_t b, int64_t c) {
  return htp__size_mul(htp__size_mul(a, b), c);
}

int colsum(htp_cuda_kernels *kernels, const float *a, int64_t rows, int64_t cols, int64_t ld,
           float *out, int accumulate) {
  if (cols <= 0)
    return 0;
  colsum_kernel<<<htp_cuda_blocks(cols, kThreads), kThreads, 0, kernels->stream>>>(
      a, rows, cols, ld, out, accumulate);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

} // namespace

extern "C" int htp_cuda_patchify_f32(htp_cuda_kernels *kernels, const float *images,
                                     float *patches, int64_t batch, int64_t channels,
                                     int64_t height, int64_t width, int64_t patch) {
  if (batch < 0 || channels < 0 || height < 0 || width < 0 || patch < 1 ||
      height % patch != 0 || width % patch != 0)
    return htp_cuda_fail(kernels, "patchify", "bad sizes (height and width must be multiples "
                                              "of patch)");
  const int64_t total = htp__size_mul(size_product(batch, channels, height), width);
  if (total < 0)
    return htp_cuda_fail(kernels, "patchify", "the images' size overflows int64");
  if (total == 0)
    return 0;
  patchify_kernel<<<htp_cuda_blocks(total, kThreads), kThreads, 0, kernels->stream>>>(
      images, patches, total, channels, height, width, patch);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

extern "C" int htp_cuda_embed_tokens_f32(htp_cuda_kernels *kernels, const float *patches,
                                         const float *cls, const float *pos, float *y,
                                         int64_t batch, int64_t patches_per_image,
                                         int64_t dim) {
  if (batch < 0 || patches_per_image < 0 || dim < 0)
    return htp_cuda_fail(kernels, "embed_tokens", "negative size");
  const int64_t total = size_product(batch, htp__size_add(patches_per_image, 1), dim);
  if (total < 0)
    return htp_cuda_fail(kernels, "embed_tokens", "the output's size overflows int64");
  if (total == 0)
    return 0;
  embed_kernel<<<htp_cuda_blocks(total, kThreads), kThreads, 0, kernels->stream>>>(
      patches, cls, pos, y, total, patches_per_image, dim);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

extern "C" int htp_cuda_cls_token_f32(htp_cuda_kernels *kernels, const float *x, float *y,
                                      int64_t batch, int64_t tokens, int64_t dim) {
  if (batch < 0 || tokens < 1 || dim < 0)
    return htp_cuda_fail(kernels, "cls_token", "needs batch, dim >= 0 and tokens >= 1");
  if (size_product(batch, tokens, dim) < 0)
    return htp_cuda_fail(kernels, "cls_token", "the input's size overflows int64");
  const int64_t total = batch * dim;
  if (total == 0)
    return 0;
  gather_rows_kernel<<<htp_cuda_blocks(total, kThreads), kThreads, 0, kernels->stream>>>(
      x, tokens * dim, 0, y, total, dim);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

extern "C" int htp_cuda_cls_token_backward_f32(htp_cuda_kernels *kernels, const float *dy,
                                               float *dx, int64_t batch, int64_t tokens,
                                               int64_t dim) {
  if (batch < 0 || tokens < 1 || dim < 0)
    return htp_cuda_fail(kernels, "cls_token_backward", "needs batch, dim >= 0 and tokens >= 1");
  const int64_t total = size_product(batch, tokens, dim);
  if (total < 0)
    return htp_cuda_fail(kernels, "cls_token_backward", "the output's size overflows int64");
  if (total == 0)
    return 0;
  cls_back_kernel<<<htp_cuda_blocks(total, kThreads), kThreads, 0, kernels->stream>>>(
      dy, dx, total, tokens, dim);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

extern "C" int htp_cuda_row_sum_f32(htp_cuda_kernels *kernels, const float *x, float *y,
                                    int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    return htp_cuda_fail(kernels, "row_sum", "negative size");
  if (htp__size_mul(rows, cols) < 0)
    return htp_cuda_fail(kernels, "row_sum", "the input's size overflows int64");
  return colsum(kernels, x, rows, cols, cols, y, 0);
}

extern "C" int htp_cuda_embed_tokens_backward_f32(htp_cuda_kernels *kernels, const float *dy,
                                                  float *dpatches, float *dcls, float *dpos,
                                                  int64_t batch, int64_t patches_per_image,
                                                  int64_t dim) {
  if (batch < 0 || patches_per_image < 0 || dim < 0)
    return htp_cuda_fail(kernels, "embed_tokens_backward", "negative size");
  if (size_product(batch, htp__size_add(patches_per_image, 1), dim) < 0)
    return htp_cuda_fail(kernels, "embed_tokens_backward", "dy's size overflows int64");
  const int64_t n = patches_per_image, stride = (n + 1) * dim;
  if (dpatches && batch * n * dim > 0) {
    const int64_t total = batch * n * dim;
    gather_rows_kernel<<<htp_cuda_blocks(total, kThreads), kThreads, 0, kernels->stream>>>(
        dy, stride, dim, dpatches, total, n * dim);
    HTP_CUDA_CHECK_LAUNCH(kernels);
  }
  if (dpos && colsum(kernels, dy, batch, stride, stride, dpos, 1))
    return 1;
  if (dcls && colsum(kernels, dy, batch, dim, stride, dcls, 1))
    return 1;
  return 0;
}
