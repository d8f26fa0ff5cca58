/*===- kernels/cpu/bf16.h - The CPU table's bf16 and sum entries ----------===*
 *
 * Private to kernels/cpu: the entries cpu/bf16.c defines and cpu/table.c
 * puts in the CPU table. Arguments as the table's fields of the same name
 * (kernels/htp_kernel_table.h).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CPU_BF16_H
#define HTP_KERNELS_CPU_BF16_H

#include "kernels/htp_kernel_table.h"

htp_kernel_status htp__cpu_linear_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                       const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                       int64_t rows, int64_t in_features, int64_t out_features);
/* linear_bf16 with its GELU fused (oneDNN's post-op where it runs the
 * linear, else the two entries one after the other). */
htp_kernel_status htp__cpu_linear_gelu_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                            const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                            int64_t rows, int64_t in_features,
                                            int64_t out_features, int32_t tanh_approx);
htp_kernel_status htp__cpu_layer_norm_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                           const htp_bf16 *gamma, const htp_bf16 *beta,
                                           htp_bf16 *y, int64_t rows, int64_t dim,
                                           float epsilon);
htp_kernel_status htp__cpu_gelu_bf16(const htp_kernel_env *env, const htp_bf16 *x, htp_bf16 *y,
                                     int64_t n, int32_t tanh_approx);
htp_kernel_status htp__cpu_add_bf16(const htp_kernel_env *env, const htp_bf16 *a,
                                    const htp_bf16 *b, htp_bf16 *y, int64_t n);
htp_kernel_status htp__cpu_bias_add_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                         const htp_bf16 *bias, htp_bf16 *y, int64_t rows,
                                         int64_t cols);
htp_kernel_status htp__cpu_attention_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                          const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                          const htp_bf16 *wproj, const htp_bf16 *bproj,
                                          htp_bf16 *y, float *scratch, int64_t scratch_floats,
                                          int64_t batch, int64_t tokens, int64_t model_dim,
                                          int64_t num_heads, int64_t head_dim);
htp_kernel_status htp__cpu_attention_heads_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                                const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                                htp_bf16 *context, float *scratch,
                                                int64_t batch, int64_t tokens,
                                                int64_t model_dim, int64_t num_heads,
                                                int64_t head_dim, const int32_t *heads,
                                                int64_t count);
htp_kernel_status htp__cpu_mlp_hidden_units_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                                 const htp_bf16 *w1, const htp_bf16 *b1,
                                                 htp_bf16 *hidden, int64_t rows, int64_t dim,
                                                 int64_t hidden_dim, int64_t width,
                                                 const int32_t *units, int64_t count,
                                                 int32_t tanh_approx);
htp_kernel_status htp__cpu_linear_units_bf16(const htp_kernel_env *env, const htp_bf16 *a,
                                             const htp_bf16 *w, htp_bf16 *y, int64_t rows,
                                             int64_t in_features, int64_t out_features,
                                             int64_t width, const int32_t *units, int64_t count,
                                             int32_t accumulate);
htp_kernel_status htp__cpu_sum_f32(const htp_kernel_env *env, const float *const *x,
                                   int32_t parts, float *y, int64_t n);
htp_kernel_status htp__cpu_sum_bf16(const htp_kernel_env *env, const htp_bf16 *const *x,
                                    int32_t parts, htp_bf16 *y, int64_t n);

#endif /* HTP_KERNELS_CPU_BF16_H */
