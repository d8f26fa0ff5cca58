/*===- kernels/htp_kernels.h - CPU compute kernels called by compiled code -===*
 *
 * The C ABI between code that htp-opt lowers (--htp-lower-to-runtime) and the
 * CPU kernels in kernels/cpu/. Compiled blocks call these by name, so the
 * names and argument orders here are a contract with passes/LowerToRuntime.cpp:
 * change both together.
 *
 * Conventions: all tensors are dense, row-major f32 with no padding; the
 * caller owns every buffer; outputs never alias inputs unless said so; sizes
 * are int64_t; a NULL bias means "no bias". Kernels do not allocate: scratch
 * comes from the caller (the compiler puts it in the block's workspace).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_H
#define HTP_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[rows, out] = x[rows, in] · w[out, in]ᵀ (+ b[out]). PyTorch nn.Linear layout. */
void htp_cpu_linear_f32(const float *x, const float *w, const float *b, float *y,
                        int64_t rows, int64_t in_features, int64_t out_features);

/* Layer norm over the last dim (biased variance, as PyTorch):
 * y = (x - mean) / sqrt(var + epsilon) * gamma + beta. gamma/beta are [dim]. */
void htp_cpu_layer_norm_f32(const float *x, const float *gamma, const float *beta,
                            float *y, int64_t rows, int64_t dim, float epsilon);

/* GELU over n elements; tanh_approx = 0: exact (erf), 1: tanh approximation.
 * y may equal x (in place). */
void htp_cpu_gelu_f32(const float *x, float *y, int64_t n, int32_t tanh_approx);

/* y = a + b over n elements. y may equal a or b. */
void htp_cpu_add_f32(const float *a, const float *b, float *y, int64_t n);

/* y[r, c] = x[r, c] + bias[c] for rows × cols. y may equal x. */
void htp_cpu_bias_add_f32(const float *x, const float *bias, float *y, int64_t rows,
                          int64_t cols);

/* Multi-head self-attention with fused qkv, timm layout, on a (possibly
 * tensor-parallel) subset of heads:
 *   x     [batch, tokens, model_dim]
 *   wqkv  [3 * num_heads * head_dim, model_dim]: q rows, then k rows, then v
 *         rows, each block ordered by head; bqkv [3 * num_heads * head_dim]
 *   wproj [model_dim, num_heads * head_dim]; bproj [model_dim]
 *   y     [batch, tokens, model_dim]
 * Scores are scaled by 1/sqrt(head_dim); softmax is numerically stable.
 * scratch holds htp_cpu_attention_scratch_floats(...) floats. */
int64_t htp_cpu_attention_scratch_floats(int64_t batch, int64_t tokens, int64_t model_dim,
                                         int64_t num_heads, int64_t head_dim);
void htp_cpu_attention_f32(const float *x, const float *wqkv, const float *bqkv,
                           const float *wproj, const float *bproj, float *y, float *scratch,
                           int64_t batch, int64_t tokens, int64_t model_dim,
                           int64_t num_heads, int64_t head_dim);

#ifdef __cplusplus
}
#endif

#endif /* HTP_KERNELS_H */
