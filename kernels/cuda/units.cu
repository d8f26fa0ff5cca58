/*===- kernels/cuda/units.cu - Listed heads, MLP units, row-parallel units ===*
 *
 * CUDA twins of kernels/cpu/units.c, the balance hooks' work-unit kernels.
 * The unit lists are host arrays (kernels/htp_kernels_cuda.h): the launcher
 * walks them on the host and issues cuBLAS calls that address each unit's
 * rows or columns of the weights in place through the leading dimension, as
 * the CPU does, merging runs of consecutive ids into one GEMM (MLP units and
 * the row-parallel linear).
 *
 * Attention runs the listed heads as one attention of `count` heads (the
 * fused bf16 kernel, or batched GEMMs over the images: attention.cu) in
 * the object's own scratch, their q, k and v weight rows gathered there
 * first unless the list is every head in order (a rank that keeps its
 * heads, a compact shard), then copies each run of heads' context columns
 * to their place. (It went head by head in the caller's one-head scratch,
 * as the CPU twin does: 4 + 3·batch launches a head, on the in-place path
 * of the balance hooks, which a plan that prunes takes; a plan that only
 * moves units runs the compact shard, every head in order, as before.)
 *
 * One body per kernel for f32 and bf16. The GEMMs read the tensors' own
 * type and always write f32 (q, k, v and the MLP's pre-activations, or the
 * row-parallel sum), so the bf16 twins round each output once, after the
 * bias, GELU or last accumulation: the MLP and row-parallel bf16 twins keep
 * that f32 block in the object's workspace.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <math.h>
#include <stdio.h>
#include <type_traits>

namespace {

constexpr int kThreads = 256;

/* 0 when width >= 1 and every id of list is in [0, limit); else records
 * why on kernels (htp_kernel_unit_list_problem: the checked device's too). */
int check_ids(htp_cuda_kernels *kernels, const char *op, int64_t width, const int32_t *list,
              int64_t count, int64_t limit) {
  char detail[96];
  return htp_kernel_unit_list_problem(width, list, count, limit, detail, sizeof detail)
             ? htp_cuda_fail(kernels, op, detail)
             : 0;
}

/* Length of the run of consecutive ids starting at units[i]. */
int64_t run_length(const int32_t *units, int64_t i, int64_t count) {
  int64_t n = 1;
  while (i + n < count && units[i + n] == units[i] + n) ++n;
  return n;
}

/* out[r, c] = GELU(in[r, c] + bias[c]) over a block of rows × columns, in
 * and out with their own row strides (f32: in is out, in place; bf16: in
 * is the f32 workspace); bias may be NULL. */
template <typename T>
__global__ void bias_gelu_block_kernel(const float *in, int64_t in_stride, T *out,
                                       int64_t out_stride, const T *bias, int64_t rows,
                                       int64_t columns, int32_t tanh_approx) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * columns)
    return;
  int64_t r = i / columns, c = i % columns;
  float v = in[r * in_stride + c] + (bias ? htp_cuda_load(bias, c) : 0.0f);
  htp_cuda_store(out, r * out_stride + c, htp_cuda_gelu(v, tanh_approx));
}
/* The same, four columns a thread (htp_cuda_load4), where the columns,
 * strides and pointers allow (bias_gelu_block below). */
template <typename T>
__global__ void bias_gelu_quads_kernel(const float *in, int64_t in_stride, T *out,
                                       int64_t out_stride, const T *bias, int64_t rows,
                                       int64_t columns, int32_t tanh_approx) {
  int64_t i = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= rows * columns)
    return;
  int64_t r = i / columns, c = i % columns;
  float4 v = htp_cuda_load4(in, r * in_stride + c);
  if (bias) {
    const float4 b = htp_cuda_load4(bias, c);
    v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
  }
  v.x = htp_cuda_gelu(v.x, tanh_approx), v.y = htp_cuda_gelu(v.y, tanh_approx);
  v.z = htp_cuda_gelu(v.z, tanh_approx), v.w = htp_cuda_gelu(v.w, tanh_approx);
  htp_cuda_store4(out, r * out_stride + c, v);
}

/* out[r, c] = GELU(in[r, c] + bias[c]) for a rows x columns block. */
template <typename T>
void bias_gelu_block(htp_cuda_kernels *kernels, const float *in, int64_t in_stride, T *out,
                     int64_t out_stride, const T *bias, int64_t rows, int64_t columns,
                     int32_t tanh_approx) {
  if (htp_cuda_quads(columns, in, out, bias) && in_stride % 4 == 0 && out_stride % 4 == 0)
    bias_gelu_quads_kernel<<<htp_cuda_blocks(rows * columns / 4, kThreads), kThreads, 0,
                             kernels->stream>>>(in, in_stride, out, out_stride, bias, rows,
                                                columns, tanh_approx);
  else
    bias_gelu_block_kernel<<<htp_cuda_blocks(rows * columns, kThreads), kThreads, 0,
                             kernels->stream>>>(in, in_stride, out, out_stride, bias, rows,
                                                columns, tanh_approx);
}

template <typename T>
int attention_heads(htp_cuda_kernels *kernels, const T *x, const T *wqkv, const T *bqkv,
                    T *context, int64_t batch, int64_t tokens, int64_t model_dim,
                    int64_t num_heads, int64_t head_dim, const int32_t *heads, int64_t count) {
  const char *op = "attention_heads";
  const int64_t rows = batch * tokens, inner = num_heads * head_dim;
  if (check_ids(kernels, op, head_dim, heads, count, num_heads) ||
      htp_cuda_check_attention_sizes(kernels, op, batch, tokens, model_dim, num_heads,
                                     head_dim))
    return 1;
  if (count == 0 || rows == 0)
    return 0;
  if (htp_cuda_buffer_reserve(kernels, &kernels->heads_scratch, &kernels->heads_scratch_bytes,
                              htp_cuda_heads_bytes(batch, tokens, model_dim, count, head_dim,
                                                   sizeof(T))))
    return 1;
  bool every_head = count == num_heads;
  for (int64_t i = 0; every_head && i < count; ++i)
    every_head = heads[i] == i;
  /* A list of some heads: their q, k and v weight rows (and biases) gathered
   * side by side, run by run of consecutive ids, so that they are the
   * weights of an attention of `count` heads. */
  const T *weights = wqkv, *biases = bqkv;
  if (!every_head) {
    T *gathered = reinterpret_cast<T *>(
        (char *)kernels->heads_scratch +
        htp_cuda_heads_weights_offset(batch, tokens, model_dim, count, head_dim));
    T *gathered_bias = gathered + 3 * count * head_dim * model_dim;
    for (int64_t i = 0; i < count;) {
      const int64_t run = run_length(heads, i, count), n = run * head_dim;
      for (int64_t part = 0; part < 3; ++part) {
        const int64_t from = part * inner + heads[i] * head_dim, to = (part * count + i) * head_dim;
        HTP_CUDA_CHECK(kernels, cudaMemcpyAsync(gathered + to * model_dim, wqkv + from * model_dim,
                                                (size_t)(n * model_dim) * sizeof(T),
                                                cudaMemcpyDeviceToDevice, kernels->stream));
        if (bqkv)
          HTP_CUDA_CHECK(kernels, cudaMemcpyAsync(gathered_bias + to, bqkv + from,
                                                  (size_t)n * sizeof(T), cudaMemcpyDeviceToDevice,
                                                  kernels->stream));
      }
      i += run;
    }
    weights = gathered;
    biases = bqkv ? gathered_bias : nullptr;
  }
  /* The whole attention of those heads (the fused bf16 kernel, or batched
   * GEMMs over the images) in the object's scratch, then each run's context
   * columns to the head's place. */
  const T *all = htp_cuda_attention_context(kernels, x, weights, biases,
                                            (float *)kernels->heads_scratch, batch, tokens,
                                            model_dim, count, head_dim);
  if (!all)
    return 1;
  for (int64_t i = 0; i < count;) {
    const int64_t run = run_length(heads, i, count);
    HTP_CUDA_CHECK(kernels,
                   cudaMemcpy2DAsync(context + heads[i] * head_dim, (size_t)inner * sizeof(T),
                                     all + i * head_dim, (size_t)(count * head_dim) * sizeof(T),
                                     (size_t)(run * head_dim) * sizeof(T), (size_t)rows,
                                     cudaMemcpyDeviceToDevice, kernels->stream));
    i += run;
  }
  return 0;
}

template <typename T>
int mlp_hidden_units(htp_cuda_kernels *kernels, const T *x, const T *w1, const T *b1, T *hidden,
                     int64_t rows, int64_t dim, int64_t hidden_dim, int64_t width,
                     const int32_t *units, int64_t count, int32_t tanh_approx) {
  const char *op = "mlp_hidden_units";
  if (check_ids(kernels, op, width, units, count, width > 0 ? hidden_dim / width : 0) ||
      htp_cuda_check_gemm_sizes(kernels, op, rows, dim, hidden_dim))
    return 1;
  if (rows == 0)
    return 0;
  /* bf16: the f32 pre-activations of the widest run, reserved when a run
   * first needs them (none where CUTLASS takes every run: at ViT-L/16 batch
   * 64 a layer's 4096 columns are 206 MB). */
  float *pre = NULL;
  int64_t widest = 0;
  for (int64_t i = 0; i < count;) {
    const int64_t run = run_length(units, i, count);
    widest = run > widest ? run : widest;
    i += run;
  }
  for (int64_t i = 0; i < count;) {
    const int64_t run = run_length(units, i, count);
    const int64_t first = (int64_t)units[i] * width, columns = run * width;
    T *out = hidden + first;
#ifdef HTP_HAVE_CUTLASS
    /* bf16 with a bias and the exact GELU: the whole run in one CUTLASS
     * GEMM where HTP_CUDA_GEMM asks for it and the run suits it. */
    if constexpr (!std::is_same_v<T, float>)
      if (b1 && !tanh_approx) {
        const int done = htp_cuda_sm90_linear(kernels, x, w1 + first * dim, b1 + first, nullptr, out,
                                              hidden_dim, rows, dim, columns, 1);
        if (done < 0)
          return 1;
        if (done) {
          i += run;
          continue;
        }
      }
#endif
    float *gemm_out;
    int64_t gemm_ld;
    if constexpr (std::is_same_v<T, float>) {
      gemm_out = out, gemm_ld = hidden_dim;
    } else {
      if (!pre && !(pre = htp_cuda_workspace(kernels, rows, widest * width)))
        return 1;
      gemm_out = pre, gemm_ld = columns;
    }
    /* GEMM of the units' columns in f32, then bias and GELU in one pass. */
    if (htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)columns, (int)rows, (int)dim, 1.0f,
                      w1 + first * dim, (int)dim, x, (int)dim, 0.0f, gemm_out, (int)gemm_ld))
      return 1;
    bias_gelu_block(kernels, gemm_out, gemm_ld, out, hidden_dim, b1 ? b1 + first : NULL, rows,
                    columns, tanh_approx);
    HTP_CUDA_CHECK_LAUNCH(kernels);
    i += run;
  }
  return 0;
}

template <typename T>
int linear_units(htp_cuda_kernels *kernels, const T *a, const T *w, T *y, int64_t rows,
                 int64_t in_features, int64_t out_features, int64_t width, const int32_t *units,
                 int64_t count, int32_t accumulate) {
  const char *op = "linear_units";
  if (check_ids(kernels, op, width, units, count, width > 0 ? in_features / width : 0) ||
      htp_cuda_check_gemm_sizes(kernels, op, rows, in_features, out_features))
    return 1;
  if (count == 0 && !accumulate) {
    HTP_CUDA_CHECK(kernels, cudaMemsetAsync(y, 0, (size_t)(rows * out_features) * sizeof(T),
                                            kernels->stream));
    return 0;
  }
  if (count == 0 || rows == 0 || out_features == 0)
    return 0;
  /* f32 accumulates in y; bf16 with one run and nothing to add to is one
   * GEMM rounding into y once; else bf16 accumulates in the workspace, from
   * y's old values when accumulating, rounded into y once after the last
   * run (two passes over [rows, out] f32 whatever the units: at ViT-L/16
   * batch 64, 52 MB each). */
  float *sum;
  if constexpr (std::is_same_v<T, float>) {
    sum = y;
  } else if (!accumulate && run_length(units, 0, count) == count) {
    const int64_t first = (int64_t)units[0] * width;
    return htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features, (int)rows,
                         (int)(count * width), 1.0f, w + first, (int)in_features, a + first,
                         (int)in_features, 0.0f, y, (int)out_features);
  } else {
    if (!(sum = htp_cuda_workspace(kernels, rows, out_features)) ||
        (accumulate && htp_cuda_convert_block(kernels, (const T *)y, out_features, sum,
                                              out_features, rows, out_features)))
      return 1;
  }
  float beta = accumulate ? 1.0f : 0.0f;
  for (int64_t i = 0; i < count;) {
    const int64_t run = run_length(units, i, count);
    const int64_t first = (int64_t)units[i] * width;
    /* Row-major y[rows, out] += a_blk·w_blkᵀ: column-major yᵀ += w_blk·a_blkᵀ,
     * both blocks addressed in place with leading dimension in_features. */
    if (htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features, (int)rows,
                      (int)(run * width), 1.0f, w + first, (int)in_features, a + first,
                      (int)in_features, beta, sum, (int)out_features))
      return 1;
    beta = 1.0f;
    i += run;
  }
  if constexpr (!std::is_same_v<T, float>)
    return htp_cuda_convert_block(kernels, (const float *)sum, out_features, y, out_features,
                                  rows, out_features);
  return 0;
}

} // namespace

extern "C" int htp_cuda_attention_heads_f32(htp_cuda_kernels *kernels, const float *x,
                                            const float *wqkv, const float *bqkv,
                                            float *context, float *scratch, int64_t batch,
                                            int64_t tokens, int64_t model_dim,
                                            int64_t num_heads, int64_t head_dim,
                                            const int32_t *heads, int64_t count) {
  (void)scratch; /* the caller's one-head scratch: this kernel runs in its own */
  return attention_heads(kernels, x, wqkv, bqkv, context, batch, tokens, model_dim, num_heads,
                         head_dim, heads, count);
}

extern "C" int htp_cuda_attention_heads_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                             const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                             htp_bf16 *context, float *scratch, int64_t batch,
                                             int64_t tokens, int64_t model_dim,
                                             int64_t num_heads, int64_t head_dim,
                                             const int32_t *heads, int64_t count) {
  (void)scratch;
  return attention_heads(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(wqkv),
                         htp_cuda_bf16_ptr(bqkv), htp_cuda_bf16_ptr(context), batch, tokens,
                         model_dim, num_heads, head_dim, heads, count);
}

extern "C" int htp_cuda_mlp_hidden_units_f32(htp_cuda_kernels *kernels, const float *x,
                                             const float *w1, const float *b1, float *hidden,
                                             int64_t rows, int64_t dim, int64_t hidden_dim,
                                             int64_t width, const int32_t *units, int64_t count,
                                             int32_t tanh_approx) {
  return mlp_hidden_units(kernels, x, w1, b1, hidden, rows, dim, hidden_dim, width, units, count,
                          tanh_approx);
}

extern "C" int htp_cuda_mlp_hidden_units_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                              const htp_bf16 *w1, const htp_bf16 *b1,
                                              htp_bf16 *hidden, int64_t rows, int64_t dim,
                                              int64_t hidden_dim, int64_t width,
                                              const int32_t *units, int64_t count,
                                              int32_t tanh_approx) {
  return mlp_hidden_units(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(w1),
                          htp_cuda_bf16_ptr(b1), htp_cuda_bf16_ptr(hidden), rows, dim,
                          hidden_dim, width, units, count, tanh_approx);
}

extern "C" int htp_cuda_linear_units_f32(htp_cuda_kernels *kernels, const float *a,
                                         const float *w, float *y, int64_t rows,
                                         int64_t in_features, int64_t out_features,
                                         int64_t width, const int32_t *units, int64_t count,
                                         int32_t accumulate) {
  return linear_units(kernels, a, w, y, rows, in_features, out_features, width, units, count,
                      accumulate);
}

extern "C" int htp_cuda_linear_units_bf16(htp_cuda_kernels *kernels, const htp_bf16 *a,
                                          const htp_bf16 *w, htp_bf16 *y, int64_t rows,
                                          int64_t in_features, int64_t out_features,
                                          int64_t width, const int32_t *units, int64_t count,
                                          int32_t accumulate) {
  return linear_units(kernels, htp_cuda_bf16_ptr(a), htp_cuda_bf16_ptr(w), htp_cuda_bf16_ptr(y),
                      rows, in_features, out_features, width, units, count, accumulate);
}
