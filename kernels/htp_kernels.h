/*===- kernels/htp_kernels.h - CPU compute kernels --------------------------===*
 *
 * The C ABI of the CPU kernels in kernels/cpu/. Compiled blocks do not call
 * them by name: they call the runtime's htp_op_* entry points, which reach
 * them through the CPU kernel table (kernels/htp_kernel_table.h,
 * kernels/cpu/table.c wraps each); change a signature here and its wrapper
 * there together.
 *
 * Conventions: all tensors are dense, row-major f32 with no padding; the
 * caller owns every buffer; outputs never alias inputs unless said so; sizes
 * are int64_t; a NULL bias means "no bias". Kernels do not allocate: scratch
 * comes from the caller (the compiler puts it in the block's workspace).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_H
#define HTP_KERNELS_H

#include "kernels/htp_scratch.h"

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
 * scratch holds htp_cpu_attention_scratch_floats(...) floats
 * (kernels/htp_scratch.h). */
void htp_cpu_attention_f32(const float *x, const float *wqkv, const float *bqkv,
                           const float *wproj, const float *bproj, float *y, float *scratch,
                           int64_t batch, int64_t tokens, int64_t model_dim,
                           int64_t num_heads, int64_t head_dim);

/* ----- Work-unit kernels, for the balance hooks (DESIGN §4) ---------------
 * A unit is one head of an attention pair, or one block of `width`
 * consecutive neurons of an MLP pair. These compute a LISTED subset of a
 * rank's units (unit ids in [0, units), any order, no repeats), so pruning
 * or handing off a fraction of the units removes that fraction of the FLOPs.
 * A unit handed to another rank arrives there as a one-unit shard in the
 * same layout (num_heads = 1, or hidden_dim = width with unit 0). */

/* context[:, h*head_dim, (h+1)*head_dim) = the attention output of head h
 * (softmax(q kᵀ / sqrt(head_dim)) v) for every listed head; columns of
 * other heads are left untouched. context is [batch * tokens, num_heads *
 * head_dim]; wqkv/bqkv as htp_cpu_attention_f32 (num_heads heads). scratch
 * holds batch * tokens * 3 * head_dim + tokens * tokens floats (one head's
 * q, k, v and one image's scores; runtime/htp_ops.h's
 * htp_rt_attention_scratch_floats counts on exactly this). */
void htp_cpu_attention_heads_f32(const float *x, const float *wqkv, const float *bqkv,
                                 float *context, float *scratch, int64_t batch, int64_t tokens,
                                 int64_t model_dim, int64_t num_heads, int64_t head_dim,
                                 const int32_t *heads, int64_t count);

/* hidden[:, u*width, (u+1)*width) = GELU(x · w1[u*width .. (u+1)*width)ᵀ
 * + b1[...]) for every listed unit u; other columns untouched. x is [rows,
 * dim], w1 [hidden_dim, dim], b1 [hidden_dim] (may be NULL), hidden [rows,
 * hidden_dim]; tanh_approx as htp_cpu_gelu_f32. */
void htp_cpu_mlp_hidden_units_f32(const float *x, const float *w1, const float *b1,
                                  float *hidden, int64_t rows, int64_t dim, int64_t hidden_dim,
                                  int64_t width, const int32_t *units, int64_t count,
                                  int32_t tanh_approx);

/* y = (accumulate ? y : 0) + sum over listed units u of
 *     a[:, u*width, (u+1)*width) · w[:, u*width, (u+1)*width)ᵀ
 * with a [rows, in_features] and w [out_features, in_features]: a row-parallel
 * linear (proj, fc2) over a subset of its input blocks. count 0 with
 * accumulate 0 zeroes y. */
void htp_cpu_linear_units_f32(const float *a, const float *w, float *y, int64_t rows,
                              int64_t in_features, int64_t out_features, int64_t width,
                              const int32_t *units, int64_t count, int32_t accumulate);

/* BLAS's thread count for the GEMMs of every kernel (process-wide; set it
 * before ranks start). threads < 1 is ignored; above the pool's 64 threads,
 * 64. */
void htp_cpu_set_blas_threads(int threads);
/* The count set so far; unset, what the environment says
 * (htp_cpu_threads_from_env), else every core this process may run on. */
int htp_cpu_blas_threads(void);
/* The thread count the environment sets for BLAS, read as the BLAS
 * libraries read it: the first of OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS,
 * BLIS_NUM_THREADS and OMP_NUM_THREADS that holds a whole number from 1 to
 * 1024, its name in *name (may be NULL); 0 when none does. A variable set to
 * anything else is passed over, and the first such is named in *bad (may be
 * NULL; NULL when there was none), for the caller to say so. */
int htp_cpu_threads_from_env(const char **name, const char **bad);
/* The cores this process may run on (its affinity mask, else the online
 * cores); at least 1. The pool's default when no variable is set. */
int htp_cpu_cores(void);
/* What computes the GEMMs, for reports: "onednn 2.6.3 (avx512_core_amx)"
 * (the ISA oneDNN generates its kernels for), "openblas (SkylakeX)" (the
 * core OpenBLAS picked), "blis" or "plain C loop". */
const char *htp_cpu_gemm_provider(void);

#ifdef __cplusplus
}
#endif

#endif /* HTP_KERNELS_H */
