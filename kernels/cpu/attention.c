/*===- kernels/cpu/attention.c - Multi-head self-attention, timm layout --===*
 *
 * qkv = x·wqkvᵀ + bqkv once for all heads (one large GEMM), then per (batch,
 * head) the scores q·kᵀ, a numerically stable softmax and p·v, read straight
 * out of the qkv buffer through strided GEMMs (no transposes, no copies),
 * then the output projection. Scratch layout, in floats:
 *   [qkv: rows * 3 * inner][context: rows * inner][scores: tokens * tokens]
 * with rows = batch * tokens and inner = heads * head_dim.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <math.h>

void htp__softmax_rows(float *scores, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float *row = scores + r * cols;
    float max = row[0];
    for (int64_t c = 1; c < cols; ++c)
      max = row[c] > max ? row[c] : max;
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      row[c] = expf(row[c] - max);
      sum += row[c];
    }
    float inv = 1.0f / sum;
    for (int64_t c = 0; c < cols; ++c)
      row[c] *= inv;
  }
}

void htp_cpu_attention_f32(const float *x, const float *wqkv, const float *bqkv,
                           const float *wproj, const float *bproj, float *y, float *scratch,
                           int64_t batch, int64_t tokens, int64_t model_dim,
                           int64_t num_heads, int64_t head_dim) {
  int64_t rows = batch * tokens, inner = num_heads * head_dim, qkv_stride = 3 * inner;
  float *qkv = scratch;
  float *context = qkv + rows * qkv_stride;
  float *scores = context + rows * inner;
  float scale = 1.0f / sqrtf((float)head_dim);

  htp_cpu_linear_f32(x, wqkv, bqkv, qkv, rows, model_dim, qkv_stride);
  for (int64_t b = 0; b < batch; ++b) {
    const float *block = qkv + b * tokens * qkv_stride;
    for (int64_t h = 0; h < num_heads; ++h) {
      const float *q = block + h * head_dim;
      const float *k = block + inner + h * head_dim;
      const float *v = block + 2 * inner + h * head_dim;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)tokens, (int)tokens,
                  (int)head_dim, scale, q, (int)qkv_stride, k, (int)qkv_stride, 0.0f,
                  scores, (int)tokens);
      htp__softmax_rows(scores, tokens, tokens);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)tokens, (int)head_dim,
                  (int)tokens, 1.0f, scores, (int)tokens, v, (int)qkv_stride, 0.0f,
                  context + b * tokens * inner + h * head_dim, (int)inner);
    }
  }
  htp_cpu_linear_f32(context, wproj, bproj, y, rows, inner, model_dim);
}
