/*===- kernels/cuda/train.h - The CUDA table's training entries ----------===*
 *
 * Private to kernels/cuda: the backward, loss and optimizer entries that
 * cuda/train.cu defines and cuda/table.c puts in the CUDA table, the twins
 * of kernels/cpu/train.h's. Arguments and conventions are the table's
 * fields of the same name (kernels/htp_kernel_table.h, "Training"): dx
 * written, parameter gradients accumulated, any gradient may be NULL, all
 * pointers device memory (the loss too). Unlike the twins of
 * kernels/htp_kernels_cuda.h these take the environment and return the
 * table's status themselves, so a bad argument is HTP_KERNEL_ERR_INVALID
 * and only a failing CUDA or cuBLAS call is HTP_KERNEL_ERR_SYSTEM. Each
 * only enqueues work on the environment's stream.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CUDA_TRAIN_H
#define HTP_KERNELS_CUDA_TRAIN_H

#include "kernels/htp_kernel_table.h"

#ifdef __cplusplus
extern "C" {
#endif

htp_kernel_status htp__cuda_linear_backward_f32(const htp_kernel_env *env, const float *x,
                                                const float *w, const float *dy, float *dx,
                                                float *dw, float *db, int64_t rows,
                                                int64_t in_features, int64_t out_features);
htp_kernel_status htp__cuda_layer_norm_backward_f32(const htp_kernel_env *env, const float *x,
                                                    const float *gamma, const float *dy,
                                                    float *dx, float *dgamma, float *dbeta,
                                                    int64_t rows, int64_t dim, float epsilon);
htp_kernel_status htp__cuda_gelu_backward_f32(const htp_kernel_env *env, const float *x,
                                              const float *dy, float *dx, int64_t n,
                                              int32_t tanh_approx);
htp_kernel_status htp__cuda_attention_backward_f32(
    const htp_kernel_env *env, const float *x, const float *wqkv, const float *bqkv,
    const float *wproj, const float *bproj, const float *dy, float *dx, float *dwqkv,
    float *dbqkv, float *dwproj, float *dbproj, float *scratch, int64_t scratch_floats,
    int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim);
/* The same count as the CPU kernel's (htp_cpu_attention_backward_scratch_floats,
 * kernels/htp_scratch.h), on purpose: the runtime's balance hooks size this
 * scratch by that formula whatever the device. < 0 on overflow. */
int64_t htp__cuda_attention_backward_scratch_floats(int64_t batch, int64_t tokens,
                                                    int64_t model_dim, int64_t num_heads,
                                                    int64_t head_dim);
htp_kernel_status htp__cuda_softmax_cross_entropy_f32(const htp_kernel_env *env,
                                                      const float *logits, const float *targets,
                                                      float *loss, float *dlogits, int64_t rows,
                                                      int64_t classes);
htp_kernel_status htp__cuda_sgd_momentum_f32(const htp_kernel_env *env, float *w, const float *g,
                                             float *m, int64_t n, float lr, float momentum,
                                             float weight_decay, int64_t step);
htp_kernel_status htp__cuda_adamw_f32(const htp_kernel_env *env, float *w, const float *g,
                                      float *m, float *v, int64_t n, float lr, float beta1,
                                      float beta2, float epsilon, float weight_decay,
                                      int64_t step);

#ifdef __cplusplus
}
#endif

#endif /* HTP_KERNELS_CUDA_TRAIN_H */
