/*===- kernels/cuda/units.cu - Listed heads, MLP units, row-parallel units ===*
 *
 * CUDA twins of kernels/cpu/units.c, the balance hooks' work-unit kernels.
 * The unit lists are host arrays (kernels/htp_kernels_cuda.h): the launcher
 * walks them on the host and issues cuBLAS calls that address each unit's
 * rows or columns of the weights in place through the leading dimension, as
 * the CPU does, merging runs of consecutive ids into one GEMM (MLP units and
 * the row-parallel linear).
 *
 * Attention goes head by head in the CPU twin's scratch (one head's q, k, v
 * for every row, then one image's scores), which is all the runtime gives
 * this kernel (htp_rt_attention_scratch_floats): per head three GEMMs make
 * q, k and v side by side (ldc = 3·head_dim), then per image scores, softmax
 * and p·v into the head's context columns. That is 4 + 3·batch launches per
 * head: fine for the hooks' shard sizes; a wider scratch would let the
 * images batch (strided batched GEMMs, as attention.cu).
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>

namespace {

constexpr int kThreads = 256;

/* 0 when every id of list is in [0, limit); else records why on kernels. */
int check_ids(htp_cuda_kernels *kernels, const char *op, const int32_t *list, int64_t count,
              int64_t limit) {
  if (count < 0 || (count > 0 && !list)) {
    char detail[96];
    snprintf(detail, sizeof detail, "%lld ids and %s list", (long long)count,
             list ? "a" : "no");
    return htp_cuda_fail(kernels, op, detail);
  }
  for (int64_t i = 0; i < count; ++i)
    if (list[i] < 0 || list[i] >= limit) {
      char detail[96];
      snprintf(detail, sizeof detail, "id %d (entry %lld) is not in [0, %lld)", (int)list[i],
               (long long)i, (long long)limit);
      return htp_cuda_fail(kernels, op, detail);
    }
  return 0;
}

/* 0 when every size fits cuBLAS's int arguments. */
int check_int(htp_cuda_kernels *kernels, const char *op, int64_t a, int64_t b, int64_t c) {
  if (a < 0 || b < 0 || c < 0 || a > INT_MAX || b > INT_MAX || c > INT_MAX)
    return htp_cuda_fail(kernels, op, "a size is negative or too large for cuBLAS");
  return 0;
}

/* Length of the run of consecutive ids starting at units[i]. */
int64_t run_length(const int32_t *units, int64_t i, int64_t count) {
  int64_t n = 1;
  while (i + n < count && units[i + n] == units[i] + n) ++n;
  return n;
}

/* qkv[r, part*head_dim + c] = bqkv[part*inner + head*head_dim + c]: head h's
 * three bias slices broadcast over the rows, the GEMM then adds onto them. */
__global__ void head_bias_kernel(const float *bqkv, float *qkv, int64_t rows, int64_t head_dim,
                                 int64_t inner, int64_t head) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t cols = 3 * head_dim;
  if (i >= rows * cols)
    return;
  int64_t c = i % cols, part = c / head_dim;
  qkv[i] = bqkv[part * inner + head * head_dim + c % head_dim];
}

__device__ float gelu(float v, int32_t tanh_approx) {
  if (tanh_approx)
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}

/* out[r, c] = GELU(out[r, c] + bias[c]) over a column block of rows × columns
 * with row stride `stride`; bias may be NULL. */
__global__ void bias_gelu_block_kernel(float *out, const float *bias, int64_t rows,
                                       int64_t columns, int64_t stride, int32_t tanh_approx) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * columns)
    return;
  int64_t r = i / columns, c = i % columns;
  float v = out[r * stride + c] + (bias ? bias[c] : 0.0f);
  out[r * stride + c] = gelu(v, tanh_approx);
}

} // namespace

extern "C" int htp_cuda_attention_heads_f32(htp_cuda_kernels *kernels, const float *x,
                                            const float *wqkv, const float *bqkv,
                                            float *context, float *scratch, int64_t batch,
                                            int64_t tokens, int64_t model_dim,
                                            int64_t num_heads, int64_t head_dim,
                                            const int32_t *heads, int64_t count) {
  const char *op = "attention_heads";
  const int64_t rows = batch * tokens, inner = num_heads * head_dim, stride = 3 * head_dim;
  if (check_ids(kernels, op, heads, count, num_heads) ||
      check_int(kernels, op, rows, model_dim, stride) || check_int(kernels, op, inner, 0, 0) ||
      check_int(kernels, op, tokens * tokens, 0, 0))
    return 1;
  float *qkv = scratch;                /* [rows, q_h | k_h | v_h] */
  float *scores = qkv + rows * stride; /* [tokens, tokens] */
  const float scale = 1.0f / sqrtf((float)head_dim), one = 1.0f, zero = 0.0f;
  const int t = (int)tokens, hd = (int)head_dim, ld = (int)stride;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t h = heads[i];
    float beta = 0.0f;
    if (bqkv) {
      head_bias_kernel<<<htp_cuda_blocks(rows * stride, kThreads), kThreads, 0,
                         kernels->stream>>>(bqkv, qkv, rows, head_dim, inner, h);
      HTP_CUDA_CHECK_LAUNCH(kernels);
      beta = 1.0f;
    }
    /* Part p (q, k, v) of head h: rows p*inner + h*head_dim of wqkv; row-major
     * out[rows, hd] = x·w_pᵀ is column-major outᵀ = w_p·xᵀ (as linear.cu).
     * Three plain GEMMs rather than one strided batch with x's stride 0,
     * which cuBLAS does not document as allowed. */
    for (int64_t part = 0; part < 3; ++part)
      HTP_CUBLAS_CHECK(kernels, cublasSgemm(kernels->blas, CUBLAS_OP_T, CUBLAS_OP_N, hd,
                                            (int)rows, (int)model_dim, &one,
                                            wqkv + (part * inner + h * head_dim) * model_dim,
                                            (int)model_dim, x, (int)model_dim, &beta,
                                            qkv + part * head_dim, ld));
    for (int64_t b = 0; b < batch; ++b) {
      const float *block = qkv + b * tokens * stride;
      /* Row-major scores[t, t] = q·kᵀ is column-major scoresᵀ = k·qᵀ. */
      HTP_CUBLAS_CHECK(kernels, cublasSgemm(kernels->blas, CUBLAS_OP_T, CUBLAS_OP_N, t, t, hd,
                                            &scale, block + head_dim, ld, block, ld, &zero,
                                            scores, t));
      if (htp_cuda_softmax_rows(kernels, scores, tokens, tokens))
        return 1;
      /* Row-major context[t, hd] = p·v is column-major contextᵀ = vᵀ·pᵀ. */
      HTP_CUBLAS_CHECK(kernels, cublasSgemm(kernels->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, t, t,
                                            &one, block + 2 * head_dim, ld, scores, t, &zero,
                                            context + b * tokens * inner + h * head_dim,
                                            (int)inner));
    }
  }
  return 0;
}

extern "C" int htp_cuda_mlp_hidden_units_f32(htp_cuda_kernels *kernels, const float *x,
                                             const float *w1, const float *b1, float *hidden,
                                             int64_t rows, int64_t dim, int64_t hidden_dim,
                                             int64_t width, const int32_t *units, int64_t count,
                                             int32_t tanh_approx) {
  const char *op = "mlp_hidden_units";
  if (width < 1)
    return htp_cuda_fail(kernels, op, "unit width < 1");
  if (check_ids(kernels, op, units, count, hidden_dim / width) ||
      check_int(kernels, op, rows, dim, hidden_dim))
    return 1;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t i = 0; i < count;) {
    const int64_t run = run_length(units, i, count);
    const int64_t first = (int64_t)units[i] * width, columns = run * width;
    float *out = hidden + first;
    /* GEMM into the units' columns, then bias and GELU in one pass. */
    HTP_CUBLAS_CHECK(kernels, cublasSgemm(kernels->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)columns,
                                          (int)rows, (int)dim, &one, w1 + first * dim, (int)dim,
                                          x, (int)dim, &zero, out, (int)hidden_dim));
    bias_gelu_block_kernel<<<htp_cuda_blocks(rows * columns, kThreads), kThreads, 0,
                             kernels->stream>>>(out, b1 ? b1 + first : NULL, rows, columns,
                                                hidden_dim, tanh_approx);
    HTP_CUDA_CHECK_LAUNCH(kernels);
    i += run;
  }
  return 0;
}

extern "C" int htp_cuda_linear_units_f32(htp_cuda_kernels *kernels, const float *a,
                                         const float *w, float *y, int64_t rows,
                                         int64_t in_features, int64_t out_features,
                                         int64_t width, const int32_t *units, int64_t count,
                                         int32_t accumulate) {
  const char *op = "linear_units";
  if (width < 1)
    return htp_cuda_fail(kernels, op, "unit width < 1");
  if (check_ids(kernels, op, units, count, in_features / width) ||
      check_int(kernels, op, rows, in_features, out_features))
    return 1;
  if (count == 0 && !accumulate) {
    HTP_CUDA_CHECK(kernels, cudaMemsetAsync(y, 0, (size_t)(rows * out_features) * sizeof(float),
                                            kernels->stream));
    return 0;
  }
  const float one = 1.0f;
  float beta = accumulate ? 1.0f : 0.0f;
  for (int64_t i = 0; i < count;) {
    const int64_t run = run_length(units, i, count);
    const int64_t first = (int64_t)units[i] * width;
    /* Row-major y[rows, out] += a_blk·w_blkᵀ: column-major yᵀ += w_blk·a_blkᵀ,
     * both blocks addressed in place with leading dimension in_features. */
    HTP_CUBLAS_CHECK(kernels, cublasSgemm(kernels->blas, CUBLAS_OP_T, CUBLAS_OP_N,
                                          (int)out_features, (int)rows, (int)(run * width), &one,
                                          w + first, (int)in_features, a + first,
                                          (int)in_features, &beta, y, (int)out_features));
    beta = 1.0f;
    i += run;
  }
  return 0;
}
