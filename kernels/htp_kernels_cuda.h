/*===- kernels/htp_kernels_cuda.h - CUDA twins of the CPU kernels ---------===*
 *
 * The same operations as kernels/htp_kernels.h, with the same layouts and
 * argument orders, on device memory. Each has the CPU kernel of the same name
 * (htp_cpu_* ↔ htp_cuda_*) as its twin; test/kernels/test_kernels_cuda.c
 * compares them.
 *
 * Every pointer is a device pointer. Calls only ENQUEUE work on the stream of
 * the htp_cuda_kernels object; call htp_cuda_kernels_sync to wait. Return 0 on
 * success, or non-zero with a message in htp_cuda_kernels_error(). An object
 * is used from one thread at a time.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CUDA_H
#define HTP_KERNELS_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A device, a stream and a cuBLAS handle bound to it. */
typedef struct htp_cuda_kernels htp_cuda_kernels;

/* Returns 0, or non-zero when there is no such device or CUDA fails; *out is
 * then NULL and err (if not NULL) holds a message. */
int htp_cuda_kernels_create(int device, htp_cuda_kernels **out, char *err, int err_size);
void htp_cuda_kernels_destroy(htp_cuda_kernels *kernels); /* accepts NULL */
/* Waits for everything enqueued; returns non-zero if any of it failed. */
int htp_cuda_kernels_sync(htp_cuda_kernels *kernels);
const char *htp_cuda_kernels_error(const htp_cuda_kernels *kernels);

int htp_cuda_linear_f32(htp_cuda_kernels *kernels, const float *x, const float *w,
                        const float *b, float *y, int64_t rows, int64_t in_features,
                        int64_t out_features);
int htp_cuda_layer_norm_f32(htp_cuda_kernels *kernels, const float *x, const float *gamma,
                            const float *beta, float *y, int64_t rows, int64_t dim,
                            float epsilon);
int htp_cuda_gelu_f32(htp_cuda_kernels *kernels, const float *x, float *y, int64_t n,
                      int32_t tanh_approx);
int htp_cuda_add_f32(htp_cuda_kernels *kernels, const float *a, const float *b, float *y,
                     int64_t n);
int htp_cuda_bias_add_f32(htp_cuda_kernels *kernels, const float *x, const float *bias, float *y,
                          int64_t rows, int64_t cols);
/* Scratch differs from the CPU twin's: all heads' scores of one image are
 * computed by one batched GEMM. */
int64_t htp_cuda_attention_scratch_floats(int64_t batch, int64_t tokens, int64_t model_dim,
                                          int64_t num_heads, int64_t head_dim);
int htp_cuda_attention_f32(htp_cuda_kernels *kernels, const float *x, const float *wqkv,
                           const float *bqkv, const float *wproj, const float *bproj, float *y,
                           float *scratch, int64_t batch, int64_t tokens, int64_t model_dim,
                           int64_t num_heads, int64_t head_dim);

#ifdef __cplusplus
}
#endif

#endif /* HTP_KERNELS_CUDA_H */
