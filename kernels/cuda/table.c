/*===- kernels/cuda/table.c - The CUDA kernel table -----------------------===*
 *
 * The CUDA instance of kernels/htp_kernel_table.h: wrappers that give the
 * htp_cuda_* twins (kernels/htp_kernels_cuda.h) the table's uniform
 * signature, and the environment that binds a device's stream, cuBLAS
 * handle and kernel object. Every op of the table has its twin, the unit
 * kernels of the balance hooks included (kernels/cuda/units.cu). Every
 * entry checks that the environment has a device first, so a table used where no GPU was found fails instead of
 * crashing. Entries only enqueue on env->stream.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernel_table.h"

#include "kernels/cuda/kernels_internal.h"

#include <stdio.h>
#include <string.h>


/* The kernel object of env, or NULL after writing why there is none. */
static htp_cuda_kernels *kernels_of(const htp_kernel_env *env, const char *op) {
  if (!env || !env->kernels) {
    htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM,
                    "cuda %s: the environment has no CUDA device (htp_cuda_kernel_env_create "
                    "failed or was not called)", op);
    return NULL;
  }
  return (htp_cuda_kernels *)env->kernels;
}

/* A twin's non-zero return: its message is on the kernel object. */
static htp_kernel_status twin_status(const htp_kernel_env *env, htp_cuda_kernels *kernels,
                                     const char *op, int rc) {
  if (rc == 0) return HTP_KERNEL_OK;
  return htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM, "cuda %s: %s", op,
                         htp_cuda_kernels_error(kernels));
}

#define WITH_KERNELS(op)                                                                       \
  htp_cuda_kernels *kernels = kernels_of(env, op);                                             \
  if (!kernels) return HTP_KERNEL_ERR_SYSTEM

static htp_kernel_status linear(const htp_kernel_env *env, const float *x, const float *w,
                                const float *b, float *y, int64_t rows, int64_t in_features,
                                int64_t out_features) {
  WITH_KERNELS("linear");
  return twin_status(env, kernels, "linear",
                     htp_cuda_linear_f32(kernels, x, w, b, y, rows, in_features, out_features));
}

static htp_kernel_status layer_norm(const htp_kernel_env *env, const float *x, const float *gamma,
                                    const float *beta, float *y, int64_t rows, int64_t dim,
                                    float epsilon) {
  WITH_KERNELS("layer_norm");
  return twin_status(env, kernels, "layer_norm",
                     htp_cuda_layer_norm_f32(kernels, x, gamma, beta, y, rows, dim, epsilon));
}

static htp_kernel_status gelu(const htp_kernel_env *env, const float *x, float *y, int64_t n,
                              int32_t tanh_approx) {
  WITH_KERNELS("gelu");
  return twin_status(env, kernels, "gelu", htp_cuda_gelu_f32(kernels, x, y, n, tanh_approx));
}

static htp_kernel_status add(const htp_kernel_env *env, const float *a, const float *b, float *y,
                             int64_t n) {
  WITH_KERNELS("add");
  return twin_status(env, kernels, "add", htp_cuda_add_f32(kernels, a, b, y, n));
}

static htp_kernel_status bias_add(const htp_kernel_env *env, const float *x, const float *bias,
                                  float *y, int64_t rows, int64_t cols) {
  WITH_KERNELS("bias_add");
  return twin_status(env, kernels, "bias_add",
                     htp_cuda_bias_add_f32(kernels, x, bias, y, rows, cols));
}

static htp_kernel_status attention(const htp_kernel_env *env, const float *x, const float *wqkv,
                                   const float *bqkv, const float *wproj, const float *bproj,
                                   float *y, float *scratch, int64_t scratch_floats,
                                   int64_t batch, int64_t tokens, int64_t model_dim,
                                   int64_t num_heads, int64_t head_dim) {
  WITH_KERNELS("attention");
  /* The CUDA twin's scratch differs from the CPU's, for which compiled
   * blocks size their workspace today: refuse rather than overrun it. */
  const int64_t needed =
      htp_cuda_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  if (needed < 0 || scratch_floats < needed)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cuda attention: scratch holds %lld floats, the CUDA kernel needs %lld",
                           (long long)scratch_floats, (long long)needed);
  return twin_status(env, kernels, "attention",
                     htp_cuda_attention_f32(kernels, x, wqkv, bqkv, wproj, bproj, y, scratch,
                                            batch, tokens, model_dim, num_heads, head_dim));
}

/* The unit kernels of the balance hooks: their lists are host arrays, as
 * the hooks hold them (kernels/htp_kernels_cuda.h). attention_heads uses
 * the CPU twin's scratch size, which the runtime allocates for it. */
static htp_kernel_status attention_heads(const htp_kernel_env *env, const float *x,
                                         const float *wqkv, const float *bqkv, float *context,
                                         float *scratch, int64_t batch, int64_t tokens,
                                         int64_t model_dim, int64_t num_heads, int64_t head_dim,
                                         const int32_t *heads, int64_t count) {
  WITH_KERNELS("attention_heads");
  return twin_status(env, kernels, "attention_heads",
                     htp_cuda_attention_heads_f32(kernels, x, wqkv, bqkv, context, scratch, batch,
                                                  tokens, model_dim, num_heads, head_dim, heads,
                                                  count));
}

static htp_kernel_status mlp_hidden_units(const htp_kernel_env *env, const float *x,
                                          const float *w1, const float *b1, float *hidden,
                                          int64_t rows, int64_t dim, int64_t hidden_dim,
                                          int64_t width, const int32_t *units, int64_t count,
                                          int32_t tanh_approx) {
  WITH_KERNELS("mlp_hidden_units");
  return twin_status(env, kernels, "mlp_hidden_units",
                     htp_cuda_mlp_hidden_units_f32(kernels, x, w1, b1, hidden, rows, dim,
                                                   hidden_dim, width, units, count, tanh_approx));
}

static htp_kernel_status linear_units(const htp_kernel_env *env, const float *a, const float *w,
                                      float *y, int64_t rows, int64_t in_features,
                                      int64_t out_features, int64_t width, const int32_t *units,
                                      int64_t count, int32_t accumulate) {
  WITH_KERNELS("linear_units");
  return twin_status(env, kernels, "linear_units",
                     htp_cuda_linear_units_f32(kernels, a, w, y, rows, in_features, out_features,
                                               width, units, count, accumulate));
}

static htp_kernel_status copy(const htp_kernel_env *env, void *dst, const void *src,
                              size_t bytes) {
  WITH_KERNELS("copy");
  if (!bytes) return HTP_KERNEL_OK;
  /* cudaMemcpyDefault: unified addressing tells host from device memory. */
  cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, kernels->stream);
  if (rc != cudaSuccess)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM, "cuda copy: %s",
                           cudaGetErrorString(rc));
  return HTP_KERNEL_OK;
}

static const htp_kernel_table CUDA_TABLE = {
    .name = "cuda",
    .device = HTP_KERNEL_DEVICE_CUDA,
    .linear_f32 = linear,
    .layer_norm_f32 = layer_norm,
    .gelu_f32 = gelu,
    .add_f32 = add,
    .bias_add_f32 = bias_add,
    .attention_f32 = attention,
    .attention_scratch_floats = htp_cuda_attention_scratch_floats,
    .attention_heads_f32 = attention_heads,
    .mlp_hidden_units_f32 = mlp_hidden_units,
    .linear_units_f32 = linear_units,
    .copy = copy,
};

const htp_kernel_table *htp_cuda_kernel_table(void) { return &CUDA_TABLE; }

htp_kernel_status htp_cuda_kernel_env_create(int device, htp_kernel_env *env, char *error,
                                             size_t error_size) {
  if (!env) return HTP_KERNEL_ERR_INVALID;
  htp_kernel_env_init(env, error, error_size);
  htp_cuda_kernels *kernels = NULL;
  char why[256] = "";
  if (htp_cuda_kernels_create(device, &kernels, why, (int)sizeof why) != 0 || !kernels)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM, "cuda: cannot use device %d: %s",
                           device, why);
  env->device = device;
  env->kernels = kernels;
  env->stream = kernels->stream;
  env->blas = kernels->blas;
  return HTP_KERNEL_OK;
}

void htp_cuda_kernel_env_destroy(htp_kernel_env *env) {
  if (!env) return;
  htp_cuda_kernels_destroy((htp_cuda_kernels *)env->kernels);
  env->kernels = NULL;
  env->stream = NULL;
  env->blas = NULL;
  env->device = -1;
}
