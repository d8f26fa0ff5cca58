/*===- kernels/cpu/train.h - The CPU table's training entries -------------===*
 *
 * Private to kernels/cpu: the backward, loss and optimizer entries that
 * cpu/backward.c and cpu/optim.c define and cpu/table.c puts in the CPU
 * table. Arguments and conventions as the table's fields of the same name
 * (kernels/htp_kernel_table.h, "Training"): dx written, parameter
 * gradients accumulated, any gradient may be NULL.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CPU_TRAIN_H
#define HTP_KERNELS_CPU_TRAIN_H

#include "kernels/htp_kernel_table.h"

htp_kernel_status htp__cpu_linear_backward_f32(const htp_kernel_env *env, const float *x,
                                               const float *w, const float *dy, float *dx,
                                               float *dw, float *db, int64_t rows,
                                               int64_t in_features, int64_t out_features);
htp_kernel_status htp__cpu_layer_norm_backward_f32(const htp_kernel_env *env, const float *x,
                                                   const float *gamma, const float *dy,
                                                   float *dx, float *dgamma, float *dbeta,
                                                   int64_t rows, int64_t dim, float epsilon);
htp_kernel_status htp__cpu_gelu_backward_f32(const htp_kernel_env *env, const float *x,
                                             const float *dy, float *dx, int64_t n,
                                             int32_t tanh_approx);
htp_kernel_status htp__cpu_attention_backward_f32(
    const htp_kernel_env *env, const float *x, const float *wqkv, const float *bqkv,
    const float *wproj, const float *bproj, const float *dy, float *dx, float *dwqkv,
    float *dbqkv, float *dwproj, float *dbproj, float *scratch, int64_t scratch_floats,
    int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim);
htp_kernel_status htp__cpu_softmax_cross_entropy_f32(const htp_kernel_env *env,
                                                     const float *logits, const float *targets,
                                                     float *loss, float *dlogits, int64_t rows,
                                                     int64_t classes);
htp_kernel_status htp__cpu_sgd_momentum_f32(const htp_kernel_env *env, float *w, const float *g,
                                            float *m, int64_t n, float lr, float momentum,
                                            float weight_decay, int64_t step);
htp_kernel_status htp__cpu_adamw_f32(const htp_kernel_env *env, float *w, const float *g,
                                     float *m, float *v, int64_t n, float lr, float beta1,
                                     float beta2, float epsilon, float weight_decay,
                                     int64_t step);


/* The model's ends (cpu/embed.c): patchify, token embedding, class-token
 * pooling, row sums and their adjoints, and zeroing. */
htp_kernel_status htp__cpu_patchify_f32(const htp_kernel_env *env, const float *images,
                                        float *patches, int64_t batch, int64_t channels,
                                        int64_t height, int64_t width, int64_t patch);
htp_kernel_status htp__cpu_embed_tokens_f32(const htp_kernel_env *env, const float *patches,
                                            const float *cls, const float *pos, float *y,
                                            int64_t batch, int64_t patches_per_image,
                                            int64_t dim);
htp_kernel_status htp__cpu_cls_token_f32(const htp_kernel_env *env, const float *x, float *y,
                                         int64_t batch, int64_t tokens, int64_t dim);
htp_kernel_status htp__cpu_row_sum_f32(const htp_kernel_env *env, const float *x, float *y,
                                       int64_t rows, int64_t cols);
htp_kernel_status htp__cpu_embed_tokens_backward_f32(const htp_kernel_env *env, const float *dy,
                                                     float *dpatches, float *dcls, float *dpos,
                                                     int64_t batch, int64_t patches_per_image,
                                                     int64_t dim);
htp_kernel_status htp__cpu_cls_token_backward_f32(const htp_kernel_env *env, const float *dy,
                                                  float *dx, int64_t batch, int64_t tokens,
                                                  int64_t dim);
htp_kernel_status htp__cpu_zero(const htp_kernel_env *env, void *dst, size_t bytes);

#endif /* HTP_KERNELS_CPU_TRAIN_H */
