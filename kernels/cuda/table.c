/*===- kernels/cuda/table.c - The CUDA kernel table -----------------------===*
 *
 * The CUDA instance of kernels/htp_kernel_table.h: wrappers that give the
 * htp_cuda_* twins (kernels/htp_kernels_cuda.h) the table's uniform
 * signature, and the environment that binds a device's stream, cuBLAS
 * handle and kernel object. Every forward op of the table has its twin,
 * the unit kernels of the balance hooks included (kernels/cuda/units.cu),
 * in f32 and bf16, the same-device sums, and the device's memory, copies,
 * synchronisation and timing marks (events), and every training entry:
 * the model's ends (embed.cu), zero, and the backward, loss and optimizer
 * entries (train.cu, which take the environment themselves: cuda/train.h).
 * Every entry checks that the environment has a device first, so a table
 * used where no GPU was found fails instead of crashing. Entries only
 * enqueue on env->stream.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernel_table.h"

#include "kernels/cuda/kernels_internal.h"
#include "kernels/cuda/train.h"

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

/* An entry that only hands its arguments to its twin: `params` is the
 * entry's parenthesised parameter list, `args` the twin's argument list. */
#define TWIN_ENTRY(entry, twin, params, args)                                                  \
  static htp_kernel_status entry params {                                                      \
    WITH_KERNELS(#entry);                                                                      \
    return twin_status(env, kernels, #entry, twin args);                                       \
  }

TWIN_ENTRY(linear_f32, htp_cuda_linear_f32,
           (const htp_kernel_env *env, const float *x, const float *w, const float *b, float *y,
            int64_t rows, int64_t in_features, int64_t out_features),
           (kernels, x, w, b, y, rows, in_features, out_features))
TWIN_ENTRY(linear_bf16, htp_cuda_linear_bf16,
           (const htp_kernel_env *env, const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
            htp_bf16 *y, int64_t rows, int64_t in_features, int64_t out_features),
           (kernels, x, w, b, y, rows, in_features, out_features))
TWIN_ENTRY(layer_norm_f32, htp_cuda_layer_norm_f32,
           (const htp_kernel_env *env, const float *x, const float *gamma, const float *beta,
            float *y, int64_t rows, int64_t dim, float epsilon),
           (kernels, x, gamma, beta, y, rows, dim, epsilon))
TWIN_ENTRY(layer_norm_bf16, htp_cuda_layer_norm_bf16,
           (const htp_kernel_env *env, const htp_bf16 *x, const htp_bf16 *gamma,
            const htp_bf16 *beta, htp_bf16 *y, int64_t rows, int64_t dim, float epsilon),
           (kernels, x, gamma, beta, y, rows, dim, epsilon))
TWIN_ENTRY(gelu_f32, htp_cuda_gelu_f32,
           (const htp_kernel_env *env, const float *x, float *y, int64_t n, int32_t tanh_approx),
           (kernels, x, y, n, tanh_approx))
TWIN_ENTRY(gelu_bf16, htp_cuda_gelu_bf16,
           (const htp_kernel_env *env, const htp_bf16 *x, htp_bf16 *y, int64_t n,
            int32_t tanh_approx),
           (kernels, x, y, n, tanh_approx))
TWIN_ENTRY(add_f32, htp_cuda_add_f32,
           (const htp_kernel_env *env, const float *a, const float *b, float *y, int64_t n),
           (kernels, a, b, y, n))
TWIN_ENTRY(add_bf16, htp_cuda_add_bf16,
           (const htp_kernel_env *env, const htp_bf16 *a, const htp_bf16 *b, htp_bf16 *y,
            int64_t n),
           (kernels, a, b, y, n))
TWIN_ENTRY(bias_add_f32, htp_cuda_bias_add_f32,
           (const htp_kernel_env *env, const float *x, const float *bias, float *y, int64_t rows,
            int64_t cols),
           (kernels, x, bias, y, rows, cols))
TWIN_ENTRY(bias_add_bf16, htp_cuda_bias_add_bf16,
           (const htp_kernel_env *env, const htp_bf16 *x, const htp_bf16 *bias, htp_bf16 *y,
            int64_t rows, int64_t cols),
           (kernels, x, bias, y, rows, cols))
TWIN_ENTRY(bias_add_residual_f32, htp_cuda_bias_add_residual_f32,
           (const htp_kernel_env *env, const float *x, const float *bias, const float *r,
            float *y, int64_t rows, int64_t cols),
           (kernels, x, bias, r, y, rows, cols))
TWIN_ENTRY(bias_add_residual_bf16, htp_cuda_bias_add_residual_bf16,
           (const htp_kernel_env *env, const htp_bf16 *x, const htp_bf16 *bias,
            const htp_bf16 *r, htp_bf16 *y, int64_t rows, int64_t cols),
           (kernels, x, bias, r, y, rows, cols))

/* The model's ends (embed.cu), f32. The other training entries (backward
 * of linear, layer norm, GELU, attention; the loss; the optimizers) are
 * train.cu's, registered as they are (cuda/train.h). */
TWIN_ENTRY(patchify_f32, htp_cuda_patchify_f32,
           (const htp_kernel_env *env, const float *images, float *patches, int64_t batch,
            int64_t channels, int64_t height, int64_t width, int64_t patch),
           (kernels, images, patches, batch, channels, height, width, patch))
TWIN_ENTRY(embed_tokens_f32, htp_cuda_embed_tokens_f32,
           (const htp_kernel_env *env, const float *patches, const float *cls, const float *pos,
            float *y, int64_t batch, int64_t patches_per_image, int64_t dim),
           (kernels, patches, cls, pos, y, batch, patches_per_image, dim))
TWIN_ENTRY(cls_token_f32, htp_cuda_cls_token_f32,
           (const htp_kernel_env *env, const float *x, float *y, int64_t batch, int64_t tokens,
            int64_t dim),
           (kernels, x, y, batch, tokens, dim))
TWIN_ENTRY(row_sum_f32, htp_cuda_row_sum_f32,
           (const htp_kernel_env *env, const float *x, float *y, int64_t rows, int64_t cols),
           (kernels, x, y, rows, cols))
TWIN_ENTRY(embed_tokens_backward_f32, htp_cuda_embed_tokens_backward_f32,
           (const htp_kernel_env *env, const float *dy, float *dpatches, float *dcls,
            float *dpos, int64_t batch, int64_t patches_per_image, int64_t dim),
           (kernels, dy, dpatches, dcls, dpos, batch, patches_per_image, dim))
TWIN_ENTRY(cls_token_backward_f32, htp_cuda_cls_token_backward_f32,
           (const htp_kernel_env *env, const float *dy, float *dx, int64_t batch, int64_t tokens,
            int64_t dim),
           (kernels, dy, dx, batch, tokens, dim))

/* A linear with its GELU fused: the MLP unit kernel with every column one
 * unit (the GEMM in f32, then bias, GELU and the one rounding in a single
 * pass), where linear then GELU took three passes over y in f32 (the
 * bias's broadcast, the GEMM's accumulation, the GELU) and rounded a bf16
 * y twice. */
#define LINEAR_GELU_ENTRY(entry, twin, T)                                                    \
  static htp_kernel_status entry(const htp_kernel_env *env, const T *x, const T *w,           \
                                 const T *b, T *y, int64_t rows, int64_t in_features,         \
                                 int64_t out_features, int32_t tanh_approx) {                 \
    WITH_KERNELS(#entry);                                                                     \
    const int32_t every_column = 0;                                                           \
    if (out_features == 0) return HTP_KERNEL_OK; /* no columns: no unit to be */              \
    return twin_status(env, kernels, #entry,                                                  \
                       twin(kernels, x, w, b, y, rows, in_features, out_features,             \
                            out_features, &every_column, 1, tanh_approx));                    \
  }
LINEAR_GELU_ENTRY(linear_gelu_f32, htp_cuda_mlp_hidden_units_f32, float)
LINEAR_GELU_ENTRY(linear_gelu_bf16, htp_cuda_mlp_hidden_units_bf16, htp_bf16)

/* The unit kernels of the balance hooks: their lists are host arrays, as
 * the hooks hold them (kernels/htp_kernels_cuda.h). attention_heads uses
 * the CPU twin's scratch size, which the runtime allocates for it. */
TWIN_ENTRY(attention_heads_f32, htp_cuda_attention_heads_f32,
           (const htp_kernel_env *env, const float *x, const float *wqkv, const float *bqkv,
            float *context, float *scratch, int64_t batch, int64_t tokens, int64_t model_dim,
            int64_t num_heads, int64_t head_dim, const int32_t *heads, int64_t count),
           (kernels, x, wqkv, bqkv, context, scratch, batch, tokens, model_dim, num_heads,
            head_dim, heads, count))
TWIN_ENTRY(attention_heads_bf16, htp_cuda_attention_heads_bf16,
           (const htp_kernel_env *env, const htp_bf16 *x, const htp_bf16 *wqkv,
            const htp_bf16 *bqkv, htp_bf16 *context, float *scratch, int64_t batch,
            int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim,
            const int32_t *heads, int64_t count),
           (kernels, x, wqkv, bqkv, context, scratch, batch, tokens, model_dim, num_heads,
            head_dim, heads, count))
TWIN_ENTRY(mlp_hidden_units_f32, htp_cuda_mlp_hidden_units_f32,
           (const htp_kernel_env *env, const float *x, const float *w1, const float *b1,
            float *hidden, int64_t rows, int64_t dim, int64_t hidden_dim, int64_t width,
            const int32_t *units, int64_t count, int32_t tanh_approx),
           (kernels, x, w1, b1, hidden, rows, dim, hidden_dim, width, units, count, tanh_approx))
TWIN_ENTRY(mlp_hidden_units_bf16, htp_cuda_mlp_hidden_units_bf16,
           (const htp_kernel_env *env, const htp_bf16 *x, const htp_bf16 *w1,
            const htp_bf16 *b1, htp_bf16 *hidden, int64_t rows, int64_t dim, int64_t hidden_dim,
            int64_t width, const int32_t *units, int64_t count, int32_t tanh_approx),
           (kernels, x, w1, b1, hidden, rows, dim, hidden_dim, width, units, count, tanh_approx))
TWIN_ENTRY(linear_units_f32, htp_cuda_linear_units_f32,
           (const htp_kernel_env *env, const float *a, const float *w, float *y, int64_t rows,
            int64_t in_features, int64_t out_features, int64_t width, const int32_t *units,
            int64_t count, int32_t accumulate),
           (kernels, a, w, y, rows, in_features, out_features, width, units, count, accumulate))
TWIN_ENTRY(linear_units_bf16, htp_cuda_linear_units_bf16,
           (const htp_kernel_env *env, const htp_bf16 *a, const htp_bf16 *w, htp_bf16 *y,
            int64_t rows, int64_t in_features, int64_t out_features, int64_t width,
            const int32_t *units, int64_t count, int32_t accumulate),
           (kernels, a, w, y, rows, in_features, out_features, width, units, count, accumulate))

/* The same-device reduction: x is a HOST array of `parts` device pointers
 * (the ranks sharing the GPU hold theirs on the host); the caller orders
 * the other ranks' streams before this one (htp_cuda_reduce_sum_f32). */
TWIN_ENTRY(sum_f32, htp_cuda_reduce_sum_f32,
           (const htp_kernel_env *env, const float *const *x, int32_t parts, float *y,
            int64_t n),
           (kernels, x, parts, y, n))
TWIN_ENTRY(sum_bf16, htp_cuda_reduce_sum_bf16,
           (const htp_kernel_env *env, const htp_bf16 *const *x, int32_t parts, htp_bf16 *y,
            int64_t n),
           (kernels, x, parts, y, n))

/* The CUDA attention's scratch differs from the CPU's (the table's
 * attention_scratch_floats says how much; bf16 needs what f32 does):
 * refuse rather than overrun a smaller one. */
static htp_kernel_status check_attention_scratch(const htp_kernel_env *env, const char *op,
                                                 int64_t scratch_floats, int64_t batch,
                                                 int64_t tokens, int64_t model_dim,
                                                 int64_t num_heads, int64_t head_dim) {
  /* The sizes first, as the checked device orders them (the scratch's
   * formula assumes they fit; the twin checks them again for its direct
   * callers). */
  char why[160];
  if (htp_kernel_attention_sizes_problem(batch, tokens, model_dim, num_heads, head_dim, why,
                                         sizeof why))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cuda %s: %s", op, why);
  const int64_t needed =
      htp_cuda_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  if (needed < 0 || scratch_floats < needed)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cuda %s: scratch holds %lld floats, the CUDA kernel needs %lld", op,
                           (long long)scratch_floats, (long long)needed);
  return HTP_KERNEL_OK;
}

/* attention_residual_{f32,bf16} (r added to the projection as
 * htp_cuda_linear decides) and attention_{f32,bf16}, the same with r NULL:
 * T is the tensors' element type; the scratch is f32 for both. */
#define ATTENTION_ENTRIES(sfx, T)                                                              \
  static htp_kernel_status attention_call_##sfx(                                               \
      const htp_kernel_env *env, const char *entry, const T *x, const T *wqkv, const T *bqkv,  \
      const T *wproj, const T *bproj, const T *r, T *y, float *scratch,                        \
      int64_t scratch_floats, int64_t batch, int64_t tokens, int64_t model_dim,                \
      int64_t num_heads, int64_t head_dim) {                                                   \
    WITH_KERNELS(entry);                                                                       \
    htp_kernel_status rc = check_attention_scratch(env, entry, scratch_floats, batch, tokens,  \
                                                   model_dim, num_heads, head_dim);            \
    if (rc != HTP_KERNEL_OK) return rc;                                                        \
    return twin_status(env, kernels, entry,                                                    \
                       htp_cuda_attention_residual_##sfx(kernels, x, wqkv, bqkv, wproj, bproj, \
                                                         r, y, scratch, batch, tokens,         \
                                                         model_dim, num_heads, head_dim));     \
  }                                                                                            \
  static htp_kernel_status attention_residual_##sfx(                                           \
      const htp_kernel_env *env, const T *x, const T *wqkv, const T *bqkv, const T *wproj,     \
      const T *bproj, const T *r, T *y, float *scratch, int64_t scratch_floats, int64_t batch, \
      int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {                \
    return attention_call_##sfx(env, "attention_residual_" #sfx, x, wqkv, bqkv, wproj, bproj,  \
                                r, y, scratch, scratch_floats, batch, tokens, model_dim,       \
                                num_heads, head_dim);                                          \
  }                                                                                            \
  static htp_kernel_status attention_##sfx(                                                    \
      const htp_kernel_env *env, const T *x, const T *wqkv, const T *bqkv, const T *wproj,     \
      const T *bproj, T *y, float *scratch, int64_t scratch_floats, int64_t batch,             \
      int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {                \
    return attention_call_##sfx(env, "attention_" #sfx, x, wqkv, bqkv, wproj, bproj, NULL, y,  \
                                scratch, scratch_floats, batch, tokens, model_dim, num_heads,  \
                                head_dim);                                                     \
  }

ATTENTION_ENTRIES(f32, float)
ATTENTION_ENTRIES(bf16, htp_bf16)

TWIN_ENTRY(linear_residual_f32, htp_cuda_linear_residual_f32,
           (const htp_kernel_env *env, const float *x, const float *w, const float *b,
            const float *r, float *y, int64_t rows, int64_t in_features, int64_t out_features),
           (kernels, x, w, b, r, y, rows, in_features, out_features))
TWIN_ENTRY(linear_residual_bf16, htp_cuda_linear_residual_bf16,
           (const htp_kernel_env *env, const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
            const htp_bf16 *r, htp_bf16 *y, int64_t rows, int64_t in_features,
            int64_t out_features),
           (kernels, x, w, b, r, y, rows, in_features, out_features))

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

/* Rows of work units' weights (enqueued, device to device). */
static htp_kernel_status copy_2d(const htp_kernel_env *env, void *dst, size_t dst_pitch,
                                 const void *src, size_t src_pitch, size_t row_bytes,
                                 size_t rows) {
  WITH_KERNELS("copy_2d");
  if (!rows || !row_bytes) return HTP_KERNEL_OK;
  cudaError_t rc = cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                     cudaMemcpyDeviceToDevice, kernels->stream);
  if (rc != cudaSuccess)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM, "cuda copy_2d: %s",
                           cudaGetErrorString(rc));
  return HTP_KERNEL_OK;
}

/* Clears accumulated gradients before a backward entry (enqueued). */
static htp_kernel_status zero(const htp_kernel_env *env, void *dst, size_t bytes) {
  WITH_KERNELS("zero");
  if (!bytes) return HTP_KERNEL_OK;
  if (!dst) return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cuda zero: NULL with %zu bytes",
                                   bytes);
  cudaError_t rc = cudaMemsetAsync(dst, 0, bytes, kernels->stream);
  if (rc != cudaSuccess)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM, "cuda zero: %s", cudaGetErrorString(rc));
  return HTP_KERNEL_OK;
}

/* ----- The device's memory, copies, synchronisation, timing -------------- */

static htp_kernel_status cuda_status(const htp_kernel_env *env, const char *op, cudaError_t rc) {
  if (rc == cudaSuccess) return HTP_KERNEL_OK;
  return htp_kernel_fail(env,
                         rc == cudaErrorMemoryAllocation ? HTP_KERNEL_ERR_NOMEM
                                                         : HTP_KERNEL_ERR_SYSTEM,
                         "cuda %s: %s", op, cudaGetErrorString(rc));
}

static htp_kernel_status alloc(const htp_kernel_env *env, size_t bytes, void **out) {
  WITH_KERNELS("alloc");
  if (!out || bytes == 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cuda alloc: %zu bytes into %p", bytes,
                           (void *)out);
  cudaError_t rc = cudaMalloc(out, bytes);
  if (rc != cudaSuccess) *out = NULL;
  return cuda_status(env, "alloc", rc);
}

static htp_kernel_status release(const htp_kernel_env *env, void *ptr) {
  WITH_KERNELS("release");
  return ptr ? cuda_status(env, "release", cudaFree(ptr)) : HTP_KERNEL_OK;
}

/* A copy enqueued on the stream, after the work already there, then waited
 * for: to_host reads finished results, and both return with the copy done. */
static htp_kernel_status transfer(const htp_kernel_env *env, const char *op, void *dst,
                                  const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  WITH_KERNELS(op);
  if (bytes && (!dst || !src))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cuda %s: NULL with %zu bytes", op,
                           bytes);
  if (!bytes) return HTP_KERNEL_OK;
  cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, kind, kernels->stream);
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(kernels->stream);
  return cuda_status(env, op, rc);
}

static htp_kernel_status to_device(const htp_kernel_env *env, void *dst, const void *host_src,
                                   size_t bytes) {
  return transfer(env, "to_device", dst, host_src, bytes, cudaMemcpyHostToDevice);
}

static htp_kernel_status to_host(const htp_kernel_env *env, void *host_dst, const void *src,
                                 size_t bytes) {
  return transfer(env, "to_host", host_dst, src, bytes, cudaMemcpyDeviceToHost);
}

static htp_kernel_status synchronize(const htp_kernel_env *env) {
  WITH_KERNELS("synchronize");
  return cuda_status(env, "synchronize", cudaStreamSynchronize(kernels->stream));
}

/* Events on the stream: the device's clock, never the host's. */
static htp_kernel_status mark(const htp_kernel_env *env, int32_t timer, int32_t which) {
  WITH_KERNELS("mark");
  if (timer < 0 || timer >= HTP_KERNEL_TIMERS || (which != 0 && which != 1))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cuda mark %d of timer %d: needs mark 0 or 1 of a timer in [0, %d)",
                           (int)which, (int)timer, HTP_KERNEL_TIMERS);
  cudaEvent_t *event = &kernels->marks[timer][which];
  if (!*event) {
    htp_kernel_status rc = cuda_status(env, "mark", cudaEventCreate(event));
    if (rc != HTP_KERNEL_OK) return rc;
  }
  htp_kernel_status rc = cuda_status(env, "mark", cudaEventRecord(*event, kernels->stream));
  if (rc == HTP_KERNEL_OK) kernels->marks_recorded[timer] |= 1 << which;
  return rc;
}

static htp_kernel_status elapsed(const htp_kernel_env *env, int32_t timer, double *seconds) {
  WITH_KERNELS("elapsed");
  if (!seconds || timer < 0 || timer >= HTP_KERNEL_TIMERS || kernels->marks_recorded[timer] != 3)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cuda elapsed of timer %d: needs a result pointer and marks 0 and 1 "
                           "of that timer recorded", (int)timer);
  float ms = 0.0f;
  cudaError_t rc = cudaEventSynchronize(kernels->marks[timer][1]);
  if (rc == cudaSuccess)
    rc = cudaEventElapsedTime(&ms, kernels->marks[timer][0], kernels->marks[timer][1]);
  *seconds = 1e-3 * (double)ms;
  return cuda_status(env, "elapsed", rc);
}

static htp_kernel_status memory(const htp_kernel_env *env, size_t *free_bytes,
                                size_t *total_bytes) {
  WITH_KERNELS("memory");
  if (!free_bytes || !total_bytes)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cuda memory: a result pointer is NULL");
  cudaError_t rc = cudaSetDevice(env->device);
  if (rc == cudaSuccess) rc = cudaMemGetInfo(free_bytes, total_bytes);
  return cuda_status(env, "memory", rc);
}

static htp_kernel_status own_memory(const htp_kernel_env *env, uint64_t *bytes) {
  WITH_KERNELS("own_memory");
  if (!bytes)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cuda own_memory: no result pointer");
  *bytes = htp_cuda_kernels_own_bytes(kernels);
  return HTP_KERNEL_OK;
}

static htp_kernel_status set_matmul_precision(const htp_kernel_env *env, int32_t precision) {
  WITH_KERNELS("set_matmul_precision");
  if (precision != HTP_MATMUL_F32 && precision != HTP_MATMUL_TF32 && precision != HTP_MATMUL_BF16)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cuda set_matmul_precision: %d is not an htp_matmul_precision",
                           (int)precision);
  kernels->matmul_precision = precision;
  return HTP_KERNEL_OK;
}

static const htp_kernel_table CUDA_TABLE = {
    .name = "cuda",
    .device = HTP_KERNEL_DEVICE_CUDA,
    .linear_f32 = linear_f32,
    .layer_norm_f32 = layer_norm_f32,
    .gelu_f32 = gelu_f32,
    .add_f32 = add_f32,
    .bias_add_f32 = bias_add_f32,
    .attention_f32 = attention_f32,
    .attention_scratch_floats = htp_cuda_attention_scratch_floats,
    .attention_heads_f32 = attention_heads_f32,
    .mlp_hidden_units_f32 = mlp_hidden_units_f32,
    .linear_units_f32 = linear_units_f32,
    .copy = copy,
    .copy_2d = copy_2d,
    .sum_f32 = sum_f32,
    .linear_bf16 = linear_bf16,
    .layer_norm_bf16 = layer_norm_bf16,
    .gelu_bf16 = gelu_bf16,
    .add_bf16 = add_bf16,
    .bias_add_bf16 = bias_add_bf16,
    .attention_bf16 = attention_bf16,
    .attention_heads_bf16 = attention_heads_bf16,
    .mlp_hidden_units_bf16 = mlp_hidden_units_bf16,
    .linear_units_bf16 = linear_units_bf16,
    .sum_bf16 = sum_bf16,
    .linear_gelu_f32 = linear_gelu_f32,
    .linear_gelu_bf16 = linear_gelu_bf16,
    .linear_residual_f32 = linear_residual_f32,
    .linear_residual_bf16 = linear_residual_bf16,
    .attention_residual_f32 = attention_residual_f32,
    .attention_residual_bf16 = attention_residual_bf16,
    .bias_add_residual_f32 = bias_add_residual_f32,
    .bias_add_residual_bf16 = bias_add_residual_bf16,
    .own_memory = own_memory,
    .set_matmul_precision = set_matmul_precision,
    .alloc = alloc,
    .release = release,
    .to_device = to_device,
    .to_host = to_host,
    .synchronize = synchronize,
    .mark = mark,
    .elapsed = elapsed,
    .patchify_f32 = patchify_f32,
    .embed_tokens_f32 = embed_tokens_f32,
    .cls_token_f32 = cls_token_f32,
    .row_sum_f32 = row_sum_f32,
    .embed_tokens_backward_f32 = embed_tokens_backward_f32,
    .cls_token_backward_f32 = cls_token_backward_f32,
    .linear_backward_f32 = htp__cuda_linear_backward_f32,
    .layer_norm_backward_f32 = htp__cuda_layer_norm_backward_f32,
    .gelu_backward_f32 = htp__cuda_gelu_backward_f32,
    .attention_backward_f32 = htp__cuda_attention_backward_f32,
    .attention_backward_scratch_floats = htp__cuda_attention_backward_scratch_floats,
    .softmax_cross_entropy_f32 = htp__cuda_softmax_cross_entropy_f32,
    .sgd_momentum_f32 = htp__cuda_sgd_momentum_f32,
    .adamw_f32 = htp__cuda_adamw_f32,
    .zero = zero,
    .memory = memory,
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

/* The plain environment, a caller's stream (the nccl backend's: its
 * collectives and these kernels are then ordered on one stream), or a
 * green context of sm_count SMs (green.c). */
htp_kernel_status htp_cuda_kernel_env_create_on(int device, int sm_count, void *stream,
                                                htp_kernel_env *env, char *error,
                                                size_t error_size) {
  if (!env) return HTP_KERNEL_ERR_INVALID;
  if (sm_count == 0 && !stream) return htp_cuda_kernel_env_create(device, env, error, error_size);
  htp_kernel_env_init(env, error, error_size);
  if (sm_count < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cuda: %d SMs: an SM count is > 0 (a partition) or 0 (the whole "
                           "device)", sm_count);
  if (sm_count > 0 && stream)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cuda: an SM partition (%d SMs) and a caller's stream exclude each "
                           "other: the partition's work runs on a stream of its green context",
                           sm_count);
  char why[256] = "";
  htp_cuda_partition *partition = NULL;
  cudaStream_t on = (cudaStream_t)stream;
  if (sm_count > 0) {
    const int rc = htp_cuda_partition_create(device, sm_count, &partition, &on, why, sizeof why);
    if (rc != 0) return htp_kernel_fail(env, rc, "cuda: %s", why);
  }
  htp_cuda_kernels *kernels = NULL;
  if (htp_cuda_kernels_create_on(device, on, partition, &kernels, why, (int)sizeof why) != 0 ||
      !kernels)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM, "cuda: cannot use device %d%s: %s",
                           device, sm_count > 0 ? " (SM partition)" : " (caller's stream)", why);
  env->device = device;
  env->kernels = kernels;
  env->stream = kernels->stream;
  env->blas = kernels->blas;
  return HTP_KERNEL_OK;
}

int htp_cuda_device_sm_count(int device) {
  int sms = 0;
  return cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess
             ? sms
             : 0;
}

void htp_cuda_kernel_env_destroy(htp_kernel_env *env) {
  if (!env) return;
  htp_cuda_kernels_destroy((htp_cuda_kernels *)env->kernels);
  env->kernels = NULL;
  env->stream = NULL;
  env->blas = NULL;
  env->device = -1;
}
