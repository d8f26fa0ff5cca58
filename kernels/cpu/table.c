/*===- kernels/cpu/table.c - The CPU kernel table -------------------------===*
 *
 * The CPU instance of kernels/htp_kernel_table.h: thin wrappers that give
 * the htp_cpu_* kernels (kernels/htp_kernels.h) the table's uniform
 * signature. The kernels themselves stay as they are; the wrappers only
 * refuse what the CPU cannot do (too little attention scratch) and never
 * touch the environment beyond its error buffer. The bf16 entries and the
 * sums live in cpu/bf16.c, memory, copies and timing in cpu/env.c (they use
 * the environment's object).
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernel_table.h"

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/env.h"
#include "kernels/cpu/train.h"
#include "kernels/htp_kernels.h"

#include <stdio.h>
#include <string.h>

static htp_kernel_status linear(const htp_kernel_env *env, const float *x, const float *w,
                                const float *b, float *y, int64_t rows, int64_t in_features,
                                int64_t out_features) {
  (void)env;
  htp_cpu_linear_f32(x, w, b, y, rows, in_features, out_features);
  return HTP_KERNEL_OK;
}

static htp_kernel_status layer_norm(const htp_kernel_env *env, const float *x, const float *gamma,
                                    const float *beta, float *y, int64_t rows, int64_t dim,
                                    float epsilon) {
  (void)env;
  htp_cpu_layer_norm_f32(x, gamma, beta, y, rows, dim, epsilon);
  return HTP_KERNEL_OK;
}

static htp_kernel_status gelu(const htp_kernel_env *env, const float *x, float *y, int64_t n,
                              int32_t tanh_approx) {
  (void)env;
  htp_cpu_gelu_f32(x, y, n, tanh_approx);
  return HTP_KERNEL_OK;
}

static htp_kernel_status add(const htp_kernel_env *env, const float *a, const float *b, float *y,
                             int64_t n) {
  (void)env;
  htp_cpu_add_f32(a, b, y, n);
  return HTP_KERNEL_OK;
}

static htp_kernel_status bias_add(const htp_kernel_env *env, const float *x, const float *bias,
                                  float *y, int64_t rows, int64_t cols) {
  (void)env;
  htp_cpu_bias_add_f32(x, bias, y, rows, cols);
  return HTP_KERNEL_OK;
}

static htp_kernel_status attention(const htp_kernel_env *env, const float *x, const float *wqkv,
                                   const float *bqkv, const float *wproj, const float *bproj,
                                   float *y, float *scratch, int64_t scratch_floats,
                                   int64_t batch, int64_t tokens, int64_t model_dim,
                                   int64_t num_heads, int64_t head_dim) {
  const int64_t needed =
      htp_cpu_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  if (needed < 0 || scratch_floats < needed)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cpu attention: scratch holds %lld floats, the kernel needs %lld",
                           (long long)scratch_floats, (long long)needed);
  htp_cpu_attention_f32(x, wqkv, bqkv, wproj, bproj, y, scratch, batch, tokens, model_dim,
                        num_heads, head_dim);
  return HTP_KERNEL_OK;
}

static htp_kernel_status attention_heads(const htp_kernel_env *env, const float *x,
                                         const float *wqkv, const float *bqkv, float *context,
                                         float *scratch, int64_t batch, int64_t tokens,
                                         int64_t model_dim, int64_t num_heads, int64_t head_dim,
                                         const int32_t *heads, int64_t count) {
  (void)env;
  htp_cpu_attention_heads_f32(x, wqkv, bqkv, context, scratch, batch, tokens, model_dim,
                              num_heads, head_dim, heads, count);
  return HTP_KERNEL_OK;
}

static htp_kernel_status mlp_hidden_units(const htp_kernel_env *env, const float *x,
                                          const float *w1, const float *b1, float *hidden,
                                          int64_t rows, int64_t dim, int64_t hidden_dim,
                                          int64_t width, const int32_t *units, int64_t count,
                                          int32_t tanh_approx) {
  (void)env;
  htp_cpu_mlp_hidden_units_f32(x, w1, b1, hidden, rows, dim, hidden_dim, width, units, count,
                               tanh_approx);
  return HTP_KERNEL_OK;
}

static htp_kernel_status linear_units(const htp_kernel_env *env, const float *a, const float *w,
                                      float *y, int64_t rows, int64_t in_features,
                                      int64_t out_features, int64_t width, const int32_t *units,
                                      int64_t count, int32_t accumulate) {
  (void)env;
  htp_cpu_linear_units_f32(a, w, y, rows, in_features, out_features, width, units, count,
                           accumulate);
  return HTP_KERNEL_OK;
}

static htp_kernel_status copy(const htp_kernel_env *env, void *dst, const void *src,
                              size_t bytes) {
  (void)env;
  if (bytes) memcpy(dst, src, bytes);
  return HTP_KERNEL_OK;
}

static htp_kernel_status copy_2d(const htp_kernel_env *env, void *dst, size_t dst_pitch,
                                 const void *src, size_t src_pitch, size_t row_bytes,
                                 size_t rows) {
  (void)env;
  for (size_t i = 0; i < rows && row_bytes; ++i)
    memcpy((char *)dst + i * dst_pitch, (const char *)src + i * src_pitch, row_bytes);
  return HTP_KERNEL_OK;
}

static const htp_kernel_table CPU_TABLE = {
    .name = "cpu",
    .device = HTP_KERNEL_DEVICE_CPU,
    .linear_f32 = linear,
    .layer_norm_f32 = layer_norm,
    .gelu_f32 = gelu,
    .add_f32 = add,
    .bias_add_f32 = bias_add,
    .attention_f32 = attention,
    .attention_scratch_floats = htp_cpu_attention_scratch_floats,
    .attention_heads_f32 = attention_heads,
    .mlp_hidden_units_f32 = mlp_hidden_units,
    .linear_units_f32 = linear_units,
    .copy = copy,
    .copy_2d = copy_2d,
    .sum_f32 = htp__cpu_sum_f32,
    .linear_bf16 = htp__cpu_linear_bf16,
    .layer_norm_bf16 = htp__cpu_layer_norm_bf16,
    .gelu_bf16 = htp__cpu_gelu_bf16,
    .add_bf16 = htp__cpu_add_bf16,
    .bias_add_bf16 = htp__cpu_bias_add_bf16,
    .attention_bf16 = htp__cpu_attention_bf16,
    .attention_heads_bf16 = htp__cpu_attention_heads_bf16,
    .mlp_hidden_units_bf16 = htp__cpu_mlp_hidden_units_bf16,
    .linear_units_bf16 = htp__cpu_linear_units_bf16,
    .sum_bf16 = htp__cpu_sum_bf16,
    .alloc = htp__cpu_alloc,
    .release = htp__cpu_release,
    .to_device = htp__cpu_to_device,
    .to_host = htp__cpu_to_host,
    .synchronize = htp__cpu_synchronize,
    .mark = htp__cpu_mark,
    .elapsed = htp__cpu_elapsed,
    .linear_backward_f32 = htp__cpu_linear_backward_f32,
    .layer_norm_backward_f32 = htp__cpu_layer_norm_backward_f32,
    .gelu_backward_f32 = htp__cpu_gelu_backward_f32,
    .attention_backward_f32 = htp__cpu_attention_backward_f32,
    .attention_backward_scratch_floats = htp_cpu_attention_backward_scratch_floats,
    .softmax_cross_entropy_f32 = htp__cpu_softmax_cross_entropy_f32,
    .sgd_momentum_f32 = htp__cpu_sgd_momentum_f32,
    .adamw_f32 = htp__cpu_adamw_f32,
    .patchify_f32 = htp__cpu_patchify_f32,
    .embed_tokens_f32 = htp__cpu_embed_tokens_f32,
    .cls_token_f32 = htp__cpu_cls_token_f32,
    .row_sum_f32 = htp__cpu_row_sum_f32,
    .embed_tokens_backward_f32 = htp__cpu_embed_tokens_backward_f32,
    .cls_token_backward_f32 = htp__cpu_cls_token_backward_f32,
    .zero = htp__cpu_zero,
    /* linear_gelu_f32 NULL: the runtime runs linear then GELU (fusing was
     * no faster in f32, bench/onednn_postops.c). */
    .linear_gelu_bf16 = htp__cpu_linear_gelu_bf16,
    .set_matmul_precision = htp__cpu_set_matmul_precision,
};

const htp_kernel_table *htp_cpu_kernel_table(void) { return &CPU_TABLE; }
