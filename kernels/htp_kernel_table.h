/*===- kernels/htp_kernel_table.h - One kernel table per device -----------===*
 *
 * The kernel layer's one seam (DESIGN §6): a struct of function pointers,
 * one entry per op and direction, with the same shape on every device. The
 * CPU instance (kernels/cpu/table.c, htp_cpu_kernel_table) wraps the
 * htp_cpu_* kernels; the CUDA instance (kernels/cuda/table.c,
 * htp_cuda_kernel_table, built with CUDA) wraps the htp_cuda_* twins. The
 * runtime context owns its rank's table and environment, and compiled
 * blocks and the balance hooks reach the kernels only through it (the
 * runtime's htp_op_* entry points, runtime/htp_ops.h), so nothing outside
 * kernels/ names a device-specific kernel and one compiled block runs on
 * either device.
 *
 * Every entry: the environment first, then plain pointers (the device's
 * memory: host pointers for the CPU, device pointers for CUDA) and sizes;
 * it returns an htp_kernel_status, whose values are runtime/htp.h's
 * htp_result values (0 = success; the runtime checks that they agree). On
 * failure the entry writes why into env->error (when not NULL). Layouts,
 * in-place rules and scratch are those of kernels/htp_kernels.h; entries do
 * not check shapes against each other (the runtime's entry points check
 * the arguments before dispatching) but never crash on a NULL env or a
 * device they cannot reach. Forward entries first; the training entries
 * (backward, loss, optimizer steps) at the struct's end.
 *
 * An entry may only ENQUEUE work on env->stream (CUDA); the CPU's finish
 * before returning. An environment is used by one thread at a time.
 *
 * This header depends on nothing outside kernels/, so the kernels never
 * include the runtime (no kernels -> runtime cycle).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNEL_TABLE_H
#define HTP_KERNEL_TABLE_H

#include "kernels/htp_bf16.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The result of an entry: runtime/htp.h's htp_result values, repeated here
 * so that kernels/ does not include the runtime. */
typedef int32_t htp_kernel_status;
#define HTP_KERNEL_OK 0
#define HTP_KERNEL_ERR_INVALID 1
#define HTP_KERNEL_ERR_NOMEM 2
#define HTP_KERNEL_ERR_SYSTEM 5      /* the device (CUDA, cuBLAS) failed */
#define HTP_KERNEL_ERR_UNSUPPORTED 6 /* no kernel for this op on this device yet */

typedef enum htp_kernel_device {
  HTP_KERNEL_DEVICE_CPU = 0,
  HTP_KERNEL_DEVICE_CUDA = 1,
  HTP_KERNEL_DEVICE_CHECKED = 2 /* the CPU behaving as a device (kernels/checked/) */
} htp_kernel_device;

/* What every entry gets first. Owned by whoever created it (the runtime
 * context for its rank); the table never frees any of it. */
typedef struct htp_kernel_env {
  int device;            /* CUDA device ordinal; -1 on the CPU */
  void *stream;          /* cudaStream_t to enqueue on; NULL on the CPU */
  void *blas;            /* cublasHandle_t; NULL on the CPU (OpenBLAS is process-wide) */
  void *kernels;         /* the device's kernel object: htp_cuda_kernels *, or on the CPU its
                            conversion buffers (htp_cpu_kernel_env_create) or NULL */
  void *scratch;         /* the environment's own device scratch, or NULL */
  size_t scratch_bytes;  /* its size */
  char *error;           /* where a failing entry writes why (NUL-terminated), or NULL */
  size_t error_size;
} htp_kernel_env;

/* The precision of the products with a weight (every linear's x·wᵀ, and
 * in training its dy·w and dyᵀ·x), as PyTorch's float32 matmul precision
 * ("highest", "high", "medium"): f32 operands as they are; or each operand
 * element rounded to TF32 (10 mantissa bits) or bf16 (7) with the products
 * summed in f32, on tensor cores (CUDA) or bf16 units (CPU) where the device
 * has them. Attention's q·kᵀ and p·v, and bf16 blocks, are not affected. */
typedef enum htp_matmul_precision {
  HTP_MATMUL_F32 = 0,
  HTP_MATMUL_TF32 = 1,
  HTP_MATMUL_BF16 = 2
} htp_matmul_precision;

/* The timers of an environment (mark/elapsed): 0 is the caller's
 * (htp_ctx_mark, an iteration or a step), 1 the balance hooks', 2 the
 * per-call profile's (htp_ctx_profile_start). */
#define HTP_KERNEL_TIMERS 3
#define HTP_KERNEL_TIMER_CALLER 0
#define HTP_KERNEL_TIMER_HOOKS 1
#define HTP_KERNEL_TIMER_PROFILE 2

/* One entry per op. Arguments after env are those of the htp_cpu_* kernel
 * of the same name (kernels/htp_kernels.h), except where noted. */
typedef struct htp_kernel_table {
  const char *name;          /* "cpu", "cuda", "checked" */
  htp_kernel_device device;

  htp_kernel_status (*linear_f32)(const htp_kernel_env *env, const float *x, const float *w,
                                  const float *b, float *y, int64_t rows, int64_t in_features,
                                  int64_t out_features);
  htp_kernel_status (*layer_norm_f32)(const htp_kernel_env *env, const float *x,
                                      const float *gamma, const float *beta, float *y,
                                      int64_t rows, int64_t dim, float epsilon);
  htp_kernel_status (*gelu_f32)(const htp_kernel_env *env, const float *x, float *y, int64_t n,
                                int32_t tanh_approx);
  htp_kernel_status (*add_f32)(const htp_kernel_env *env, const float *a, const float *b,
                               float *y, int64_t n);
  htp_kernel_status (*bias_add_f32)(const htp_kernel_env *env, const float *x, const float *bias,
                                    float *y, int64_t rows, int64_t cols);
  /* scratch holds scratch_floats floats; an entry whose device needs more
   * (attention_scratch_floats) fails with HTP_KERNEL_ERR_INVALID. */
  htp_kernel_status (*attention_f32)(const htp_kernel_env *env, const float *x,
                                     const float *wqkv, const float *bqkv, const float *wproj,
                                     const float *bproj, float *y, float *scratch,
                                     int64_t scratch_floats, int64_t batch, int64_t tokens,
                                     int64_t model_dim, int64_t num_heads, int64_t head_dim);
  /* Floats of scratch attention_f32 needs on this device (< 0: overflow). */
  int64_t (*attention_scratch_floats)(int64_t batch, int64_t tokens, int64_t model_dim,
                                      int64_t num_heads, int64_t head_dim);

  /* The unit kernels of the balance hooks. */
  htp_kernel_status (*attention_heads_f32)(const htp_kernel_env *env, const float *x,
                                           const float *wqkv, const float *bqkv, float *context,
                                           float *scratch, int64_t batch, int64_t tokens,
                                           int64_t model_dim, int64_t num_heads,
                                           int64_t head_dim, const int32_t *heads,
                                           int64_t count);
  htp_kernel_status (*mlp_hidden_units_f32)(const htp_kernel_env *env, const float *x,
                                            const float *w1, const float *b1, float *hidden,
                                            int64_t rows, int64_t dim, int64_t hidden_dim,
                                            int64_t width, const int32_t *units, int64_t count,
                                            int32_t tanh_approx);
  htp_kernel_status (*linear_units_f32)(const htp_kernel_env *env, const float *a,
                                        const float *w, float *y, int64_t rows,
                                        int64_t in_features, int64_t out_features,
                                        int64_t width, const int32_t *units, int64_t count,
                                        int32_t accumulate);

  /* dst = src, bytes bytes, both in this device's memory (result copies of
   * compiled blocks: they may live on the device). No overlap. */
  htp_kernel_status (*copy)(const htp_kernel_env *env, void *dst, const void *src, size_t bytes);
  /* rows rows of row_bytes bytes: row i from src + i * src_pitch to dst +
   * i * dst_pitch, both in this device's memory (CUDA cudaMemcpy2DAsync):
   * the balancer gathers and scatters work units' rows and columns with it
   * (runtime/unit_shard.c). Pitches >= row_bytes; no overlap. */
  htp_kernel_status (*copy_2d)(const htp_kernel_env *env, void *dst, size_t dst_pitch,
                               const void *src, size_t src_pitch, size_t row_bytes,
                               size_t rows);
  /* y[i] = the sum over the `parts` arrays x[p][i], n elements, all in this
   * device's memory: the same-device reduction (ranks that share a device
   * sum their partials here). Elementwise, so y may equal any x[p]. */
  htp_kernel_status (*sum_f32)(const htp_kernel_env *env, const float *const *x, int32_t parts,
                               float *y, int64_t n);

  /* bf16 twins of the entries above (tensors are htp_bf16, bfloat16 bit
   * patterns, kernels/htp_bf16.h): same arguments, same layouts, f32
   * accumulation and f32 layer-norm statistics, each output rounded once
   * to bf16 (round to nearest even). Scratch stays f32 and is sized by
   * the f32 formulas (attention_scratch_floats, kernels/htp_scratch.h), so
   * a compiled block's workspace does not depend on its dtype's kernels.
   * The attention rounds q, k, v, the softmax's numerators p and the
   * context to bf16 for its products (as PyTorch's bf16 attention does):
   * the CUDA one on tensor cores (kernels/htp_kernels_cuda.h), the CPU's
   * as oneDNN bf16 matmuls where it has them (cpu/attention_bf16.c), as
   * are its linears; the CPU's other entries, and all of them without
   * oneDNN, convert their operands to f32, run the f32 kernel and round the
   * result (cpu/bf16.c), which the attention's bound holds too. */
  htp_kernel_status (*linear_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                   const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                   int64_t rows, int64_t in_features, int64_t out_features);
  htp_kernel_status (*layer_norm_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                       const htp_bf16 *gamma, const htp_bf16 *beta, htp_bf16 *y,
                                       int64_t rows, int64_t dim, float epsilon);
  htp_kernel_status (*gelu_bf16)(const htp_kernel_env *env, const htp_bf16 *x, htp_bf16 *y,
                                 int64_t n, int32_t tanh_approx);
  htp_kernel_status (*add_bf16)(const htp_kernel_env *env, const htp_bf16 *a, const htp_bf16 *b,
                                htp_bf16 *y, int64_t n);
  htp_kernel_status (*bias_add_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                     const htp_bf16 *bias, htp_bf16 *y, int64_t rows,
                                     int64_t cols);
  htp_kernel_status (*attention_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                      const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                      const htp_bf16 *wproj, const htp_bf16 *bproj, htp_bf16 *y,
                                      float *scratch, int64_t scratch_floats, int64_t batch,
                                      int64_t tokens, int64_t model_dim, int64_t num_heads,
                                      int64_t head_dim);
  /* The unit kernels in bf16: context and hidden are bf16 like every tensor;
   * linear_units_bf16 with accumulate adds in f32 and rounds once. CUDA's
   * attention_heads (both types) runs any list as the whole attention of
   * that many heads, their weights gathered, in its own memory
   * (attention_bf16's numbers: q, k, v and p rounded to bf16 there); the
   * scratch given is what the CPU's takes (one head's q, k, v and one
   * image's scores). */
  htp_kernel_status (*attention_heads_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                            const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                            htp_bf16 *context, float *scratch, int64_t batch,
                                            int64_t tokens, int64_t model_dim,
                                            int64_t num_heads, int64_t head_dim,
                                            const int32_t *heads, int64_t count);
  htp_kernel_status (*mlp_hidden_units_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                             const htp_bf16 *w1, const htp_bf16 *b1,
                                             htp_bf16 *hidden, int64_t rows, int64_t dim,
                                             int64_t hidden_dim, int64_t width,
                                             const int32_t *units, int64_t count,
                                             int32_t tanh_approx);
  htp_kernel_status (*linear_units_bf16)(const htp_kernel_env *env, const htp_bf16 *a,
                                         const htp_bf16 *w, htp_bf16 *y, int64_t rows,
                                         int64_t in_features, int64_t out_features,
                                         int64_t width, const int32_t *units, int64_t count,
                                         int32_t accumulate);
  /* y[i] = bf16(sum over the `parts` arrays of f32(x[p][i])), n elements,
   * all in this device's memory: the same-device reduction of bf16
   * partials, summed in f32 and rounded once (what an all-reduce of bf16
   * tensors does with its parts). y may equal any x[p]. */
  htp_kernel_status (*sum_bf16)(const htp_kernel_env *env, const htp_bf16 *const *x,
                                int32_t parts, htp_bf16 *y, int64_t n);

  /* The device's memory, for the executor's buffers (htp-run --device):
   * alloc gives bytes (>= 1) of this device's memory in *out (the CPU's:
   * host memory, 64-byte aligned); release frees it (NULL: nothing). */
  htp_kernel_status (*alloc)(const htp_kernel_env *env, size_t bytes, void **out);
  htp_kernel_status (*release)(const htp_kernel_env *env, void *ptr);
  /* Host -> device and device -> host copies (no overlap). Both return once
   * the copy is done; to_host first waits for the work already enqueued on
   * env's stream, so it reads finished results. */
  htp_kernel_status (*to_device)(const htp_kernel_env *env, void *dst, const void *host_src,
                                 size_t bytes);
  htp_kernel_status (*to_host)(const htp_kernel_env *env, void *host_dst, const void *src,
                               size_t bytes);
  /* Waits for everything enqueued on env's stream (the CPU's: nothing). */
  htp_kernel_status (*synchronize)(const htp_kernel_env *env);
  /* Timing on the device's own clock, never the host's around enqueued
   * work: mark(env, timer, 0) before the work, mark(env, timer, 1) after,
   * then elapsed(env, timer, ...) waits for mark 1 and gives the seconds
   * between them (CUDA events on the stream; the CPU's monotonic clock).
   * Each of the HTP_KERNEL_TIMERS timers is one caller's pair of marks, so
   * a timer running inside another's span (the balance hooks inside an
   * iteration) does not move its marks. Needs an environment made by the
   * device's env_create (the marks live in its object). */
  htp_kernel_status (*mark)(const htp_kernel_env *env, int32_t timer, int32_t which);
  htp_kernel_status (*elapsed)(const htp_kernel_env *env, int32_t timer, double *seconds);

  /* ----- Training (DESIGN §11; f32 for now) -------------------------------
   * Backward entries: the adjoint of the forward entry of the same name.
   * Conventions: the input gradient (dx) is WRITTEN; parameter gradients
   * (dw, db, dgamma, ...) are ACCUMULATED (+=), so a step zeroes them once
   * and every contribution adds (a unit's gradient computed on a helper is
   * added on its owner). Any gradient pointer may be NULL: not wanted.
   * Scratch as the forward's: f32, sized by the entry's scratch function. */
  /* dx = dy · w; dw += dyᵀ · x; db += Σ_rows dy. Shapes as linear_f32. */
  htp_kernel_status (*linear_backward_f32)(const htp_kernel_env *env, const float *x,
                                           const float *w, const float *dy, float *dx,
                                           float *dw, float *db, int64_t rows,
                                           int64_t in_features, int64_t out_features);
  /* Layer norm's adjoint (statistics recomputed from x, as the forward's). */
  htp_kernel_status (*layer_norm_backward_f32)(const htp_kernel_env *env, const float *x,
                                               const float *gamma, const float *dy, float *dx,
                                               float *dgamma, float *dbeta, int64_t rows,
                                               int64_t dim, float epsilon);
  /* dx = dy * GELU'(x), exact or tanh form. dx may equal dy. */
  htp_kernel_status (*gelu_backward_f32)(const htp_kernel_env *env, const float *x,
                                         const float *dy, float *dx, int64_t n,
                                         int32_t tanh_approx);
  /* The whole attention's adjoint (forward recomputed into scratch). */
  htp_kernel_status (*attention_backward_f32)(
      const htp_kernel_env *env, const float *x, const float *wqkv, const float *bqkv,
      const float *wproj, const float *bproj, const float *dy, float *dx, float *dwqkv,
      float *dbqkv, float *dwproj, float *dbproj, float *scratch, int64_t scratch_floats,
      int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim);
  /* Floats of scratch attention_backward_f32 needs on this device (< 0: overflow). */
  int64_t (*attention_backward_scratch_floats)(int64_t batch, int64_t tokens,
                                               int64_t model_dim, int64_t num_heads,
                                               int64_t head_dim);
  /* Mean softmax cross-entropy of logits [rows, classes] against targets
   * [rows, classes] (class probabilities, e.g. one-hot rows; PyTorch's
   * cross_entropy with probability targets): *loss = (1/rows) Σ_r Σ_k
   * -t[r,k] log softmax(logits[r])_k, one float in this device's memory
   * (on the CPU a plain pointer); dlogits = (softmax · Σ_k t[r,k] - t) /
   * rows, the exact gradient for any targets (softmax - t for probability
   * rows), written. loss and dlogits may each be NULL. */
  htp_kernel_status (*softmax_cross_entropy_f32)(const htp_kernel_env *env, const float *logits,
                                                 const float *targets, float *loss,
                                                 float *dlogits, int64_t rows,
                                                 int64_t classes);
  /* Optimizer steps over n parameters, in place. SGD (PyTorch's): g' = g +
   * weight_decay w; m = momentum m + g' (m = g' at step 1); w -= lr m.
   * AdamW (decoupled decay): w -= lr weight_decay w; m = b1 m + (1-b1) g;
   * v = b2 v + (1-b2) g²; w -= lr (m / (1-b1^step)) / (sqrt(v / (1-b2^step))
   * + eps). step counts from 1. */
  htp_kernel_status (*sgd_momentum_f32)(const htp_kernel_env *env, float *w, const float *g,
                                        float *m, int64_t n, float lr, float momentum,
                                        float weight_decay, int64_t step);
  htp_kernel_status (*adamw_f32)(const htp_kernel_env *env, float *w, const float *g, float *m,
                                 float *v, int64_t n, float lr, float beta1, float beta2,
                                 float epsilon, float weight_decay, int64_t step);

  /* The whole model's ends (ViT: patch embedding, class token, position
   * embedding, pooling; issue 9's spec A and B), f32. Every output here is
   * WRITTEN except embed_tokens_backward's dcls and dpos (parameter
   * gradients: accumulated, as above). */
  /* patches[b*N + py*(W/P) + px, (c*P + ky)*P + kx] = images[b, c, py*P +
   * ky, px*P + kx]: images [batch, channels, height, width] (height and
   * width multiples of patch) to patches [batch * N, channels * patch²],
   * N = (height/patch)(width/patch), tokens in row-major patch-grid order
   * and each patch vector in (c, ky, kx) order, so a Conv2d weight [D, C,
   * P, P] viewed as [D, C·P·P] makes patch embedding a linear. */
  htp_kernel_status (*patchify_f32)(const htp_kernel_env *env, const float *images,
                                    float *patches, int64_t batch, int64_t channels,
                                    int64_t height, int64_t width, int64_t patch);
  /* y [batch, N+1, dim]: y[b, 0] = cls + pos[0], y[b, 1+i] = patches[b, i]
   * + pos[1+i]; patches [batch, N, dim], cls [dim], pos [N+1, dim]. */
  htp_kernel_status (*embed_tokens_f32)(const htp_kernel_env *env, const float *patches,
                                        const float *cls, const float *pos, float *y,
                                        int64_t batch, int64_t patches_per_image, int64_t dim);
  /* y[b] = x[b, 0]: x [batch, tokens, dim] to y [batch, dim]. */
  htp_kernel_status (*cls_token_f32)(const htp_kernel_env *env, const float *x, float *y,
                                     int64_t batch, int64_t tokens, int64_t dim);
  /* y[c] = Σ_r x[r, c] (written): bias_add's bias gradient. */
  htp_kernel_status (*row_sum_f32)(const htp_kernel_env *env, const float *x, float *y,
                                   int64_t rows, int64_t cols);
  /* embed_tokens' adjoint from dy [batch, N+1, dim]: dpatches[b, i] = dy[b,
   * 1+i] (written); dcls += Σ_b dy[b, 0]; dpos[t] += Σ_b dy[b, t]. Each may
   * be NULL. */
  htp_kernel_status (*embed_tokens_backward_f32)(const htp_kernel_env *env, const float *dy,
                                                 float *dpatches, float *dcls, float *dpos,
                                                 int64_t batch, int64_t patches_per_image,
                                                 int64_t dim);
  /* cls_token's adjoint: dx [batch, tokens, dim] = dy[b] at token 0, zero
   * elsewhere (written whole). */
  htp_kernel_status (*cls_token_backward_f32)(const htp_kernel_env *env, const float *dy,
                                              float *dx, int64_t batch, int64_t tokens,
                                              int64_t dim);
  /* dst = 0, bytes bytes of this device's memory (CPU memset, CUDA
   * cudaMemsetAsync): what the runtime clears accumulated gradients with
   * before a backward entry, so the op's results are written. */
  htp_kernel_status (*zero)(const htp_kernel_env *env, void *dst, size_t bytes);

  /* The device's memory now: bytes free for alloc and in all (CUDA:
   * cudaMemGetInfo, the whole GPU's, whoever holds it). NULL where the
   * device's memory is the host's (the CPU): the host's checks apply. */
  htp_kernel_status (*memory)(const htp_kernel_env *env, size_t *free_bytes,
                              size_t *total_bytes);

  /* ----- Fused forward entries (issue 25, item 1) --------------------------
   * May be NULL: the runtime then runs the unfused entries (htp_op_*).
   * y = GELU(x · wᵀ + b), exact (tanh_approx 0) or tanh form: linear's
   * arguments and layout, then gelu's flag. y must not alias x, w or b.
   * The CPU's bf16 entry runs oneDNN matmuls with an eltwise GELU post-op
   * where it has bf16 units (the GELU applied to the f32 accumulator, y
   * rounded once; unfused, the GELU pass read y back and rounded twice) and
   * elsewhere runs the f32 linear and GELU on widened operands, rounding y
   * once (as linear_bf16 does without oneDNN). Its f32 entry is NULL: at
   * ViT-B's fc1 an f32 matmul primitive with the post-op was within 2 % of
   * dnnl_sgemm then the GELU pass (bench/onednn_postops.c). The GELU is
   * oneDNN's: within 4e-7 absolute of the exact one, where the unfused
   * kernel holds 1e-6 relative per element (it flushes GELU(x) for x below
   * about -5.5, |GELU| < 1e-7, to zero). The CUDA entries (both types) are
   * its MLP unit kernel over every column: the GEMM in f32, then bias,
   * GELU and the one rounding in a single pass. */
  htp_kernel_status (*linear_gelu_f32)(const htp_kernel_env *env, const float *x, const float *w,
                                       const float *b, float *y, int64_t rows,
                                       int64_t in_features, int64_t out_features,
                                       int32_t tanh_approx);
  htp_kernel_status (*linear_gelu_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                        const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                        int64_t rows, int64_t in_features, int64_t out_features,
                                        int32_t tanh_approx);

  /* y = x · wᵀ + b + r and y = attention(...) + r (issue 23): linear's and
   * attention's arguments and layouts with r, the result's shape, after the
   * (proj) bias. May be NULL: the runtime then runs the op, then add_* on y
   * in place. y must not overlap any input. CUDA's add r after the linear,
   * or with HTP_CUDA_RESIDUAL=epilogue in the projection's GEMM epilogue
   * (cuBLASLt's C with beta 1, CUTLASS's source; an add where neither takes
   * the shape); the CPU has
   * none (the add right after the GEMM is ~0.3 % of it,
   * bench/onednn_postops.c); the checked device wraps the CPU's op and add
   * so that a block takes the fused entry there as on a GPU. */
  htp_kernel_status (*linear_residual_f32)(const htp_kernel_env *env, const float *x,
                                           const float *w, const float *b, const float *r,
                                           float *y, int64_t rows, int64_t in_features,
                                           int64_t out_features);
  htp_kernel_status (*linear_residual_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                            const htp_bf16 *w, const htp_bf16 *b,
                                            const htp_bf16 *r, htp_bf16 *y, int64_t rows,
                                            int64_t in_features, int64_t out_features);
  htp_kernel_status (*attention_residual_f32)(const htp_kernel_env *env, const float *x,
                                              const float *wqkv, const float *bqkv,
                                              const float *wproj, const float *bproj,
                                              const float *r, float *y, float *scratch,
                                              int64_t scratch_floats, int64_t batch,
                                              int64_t tokens, int64_t model_dim,
                                              int64_t num_heads, int64_t head_dim);
  htp_kernel_status (*attention_residual_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                               const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                               const htp_bf16 *wproj, const htp_bf16 *bproj,
                                               const htp_bf16 *r, htp_bf16 *y, float *scratch,
                                               int64_t scratch_floats, int64_t batch,
                                               int64_t tokens, int64_t model_dim,
                                               int64_t num_heads, int64_t head_dim);
  /* y = x + bias + r in one pass (bias_add's layout, r of x's shape, not
   * overlapping y): a row-parallel layer's sum after its all-reduce with
   * the residual add fused. May be NULL (the runtime runs bias_add, then
   * add on y in place): the CPU's is, where both are short next to the
   * GEMMs; CUDA's is one kernel; the checked device wraps the CPU's two. */
  htp_kernel_status (*bias_add_residual_f32)(const htp_kernel_env *env, const float *x,
                                             const float *bias, const float *r, float *y,
                                             int64_t rows, int64_t cols);
  htp_kernel_status (*bias_add_residual_bf16)(const htp_kernel_env *env, const htp_bf16 *x,
                                              const htp_bf16 *bias, const htp_bf16 *r,
                                              htp_bf16 *y, int64_t rows, int64_t cols);

  /* The device memory the kernels hold of their own beside what their
   * callers give them (CUDA's f32 sums, attention scratch, staging and
   * cuBLASLt workspace; kernels/htp_scratch.h's "own memory" formulas), in
   * *bytes: on CUDA what the object holds now, on the checked device the
   * most the CUDA kernels would have asked for by the calls it saw. The
   * compiler bounds a block's (the signature's kernel_memory_bytes);
   * htp-run checks the bound with this. NULL where the kernels' memory is
   * the host's (the CPU). */
  htp_kernel_status (*own_memory)(const htp_kernel_env *env, uint64_t *bytes);

  /* Sets the precision (htp_matmul_precision) of env's later products with
   * a weight. The CPU's is process-wide, as its thread count (each
   * environment of the process sets the same); the checked device's is the
   * CPU's; CUDA's is the environment's (its cuBLAS compute type). Fails
   * with HTP_KERNEL_ERR_INVALID on a value not in the enum. */
  htp_kernel_status (*set_matmul_precision)(const htp_kernel_env *env, int32_t precision);
} htp_kernel_table;

/* An environment with every field empty but device = -1 and the error
 * buffer: what the CPU table takes, and where the CUDA one starts. */
void htp_kernel_env_init(htp_kernel_env *env, char *error, size_t error_size);
/* For table instances: writes the printf-style message into env's error
 * buffer (when it has one) and returns status. */
htp_kernel_status htp_kernel_fail(const htp_kernel_env *env, htp_kernel_status status,
                                  const char *format, ...);

/* The unit-list arguments of the entries that take one (attention_heads,
 * mlp_hidden_units, linear_units): a unit width >= 1 and `count` ids in
 * [0, limit), a list wherever count > 0. 0 when they hold; else 1, with why
 * in detail. The CUDA kernels refuse what it refuses, and so does the
 * checked device, so that a caller's slip fails on the CPU as on a GPU. */
int htp_kernel_unit_list_problem(int64_t width, const int32_t *list, int64_t count, int64_t limit,
                                 char *detail, size_t detail_size);

/* The sizes the CUDA kernels take as int (cuBLAS's arguments, their own
 * indices), each in [0, INT_MAX]: a linear's (linear, linear_gelu,
 * mlp_hidden_units, linear_units) and an attention's (attention,
 * attention_heads: the qkv row and the tokens x tokens scores among them).
 * 0 when they hold; else 1, naming the size in detail. The CUDA kernels
 * refuse what they refuse, and so does the checked device, so that a shape
 * no GPU would take fails on the CPU's checked device too. */
int htp_kernel_gemm_sizes_problem(int64_t rows, int64_t in_features, int64_t out_features,
                                  char *detail, size_t detail_size);
int htp_kernel_attention_sizes_problem(int64_t batch, int64_t tokens, int64_t model_dim,
                                       int64_t num_heads, int64_t head_dim, char *detail,
                                       size_t detail_size);

/* The CPU table (static, never NULL). */
const htp_kernel_table *htp_cpu_kernel_table(void);
/* Gives a CPU environment its own object (env->kernels): the conversion
 * buffers the bf16 entries reuse from call to call (without it, e.g. no
 * context, they allocate per call) and the timing marks. env_destroy frees
 * it and accepts an environment without one. */
htp_kernel_status htp_cpu_kernel_env_create(htp_kernel_env *env, char *error, size_t error_size);
void htp_cpu_kernel_env_destroy(htp_kernel_env *env);

/* The checked device (kernels/checked/, built everywhere; DESIGN §10): the
 * CPU's kernels behind a device's contracts, so that code written for a GPU
 * fails here where it would fail there. Its memory (alloc) is an arena whose
 * addresses the host cannot dereference (a host load or store through one
 * faults at once); every entry checks that each tensor is its memory and
 * that the bytes its shapes imply fit the allocation, and that each host
 * array (unit lists, part pointers, a copy's host end) is not; attention
 * scratch is held to the CUDA formula; the stream stays busy
 * HTP_CHECKED_LATENCY_US (default 200) microseconds per entry after the
 * entry returns, which synchronize, to_host, to_device and elapsed wait for
 * and marks see; a pair of marks used by two timers at once fails; it holds
 * HTP_CHECKED_MEMORY_MB (default 81920, an H100's 80 GiB) in all, beyond
 * which alloc fails as cudaMalloc does (memory). The
 * environment is one rank's stream; the memory is the process's (ranks of a
 * local world share it, as they share a GPU). */
const htp_kernel_table *htp_checked_kernel_table(void);
htp_kernel_status htp_checked_kernel_env_create(htp_kernel_env *env, char *error,
                                                size_t error_size);
/* The same for a rank confined to sm_count SMs of the emulated GPU (0: the
 * whole device), as the CUDA device's green contexts: 132 SMs, 120 in 15
 * groups of 8; the counts of the ranks sharing it must fit, else
 * HTP_KERNEL_ERR_INVALID with the CUDA device's words. Nothing runs
 * slower: the partition is bookkeeping, for the runs that pass --sms. */
htp_kernel_status htp_checked_kernel_env_create_on(int sm_count, htp_kernel_env *env,
                                                   char *error, size_t error_size);
void htp_checked_kernel_env_destroy(htp_kernel_env *env);
/* The emulated GPU's SMs (132, an H200's). */
int htp_checked_device_sm_count(void);
/* Whether ptr is the checked device's memory (an address its alloc gave,
 * or one inside it). */
int htp_checked_is_device(const void *ptr);
/* Bytes of the checked device's memory allocated and not yet released. */
size_t htp_checked_live_bytes(void);

/* The CUDA table and its environment: defined only in builds with CUDA
 * (libhtpkernels_cuda; HTP_HAVE_CUDA). The table is static and never NULL;
 * its entries with no CUDA twin yet return HTP_KERNEL_ERR_UNSUPPORTED, and
 * every entry fails (never crashes) on an environment without a device.
 * env_create binds device (its stream, cuBLAS handle and kernel object) to
 * *env; on failure (no such device, no GPU) it returns
 * HTP_KERNEL_ERR_SYSTEM with why in error and leaves *env without a device
 * (entries then fail). env_destroy frees what env_create made; it accepts
 * an environment env_create failed on. */
const htp_kernel_table *htp_cuda_kernel_table(void);
htp_kernel_status htp_cuda_kernel_env_create(int device, htp_kernel_env *env, char *error,
                                             size_t error_size);
void htp_cuda_kernel_env_destroy(htp_kernel_env *env);
/* htp_cuda_kernel_env_create with two choices (DESIGN §10): sm_count > 0
 * confines the environment's work to a green context of that many SMs of
 * device (CUDA driver API; the count must be a whole number of the device's
 * partition steps, 8 on sm_90, else HTP_KERNEL_ERR_INVALID saying the
 * nearest valid counts), 0 uses the whole device; stream, when not NULL, is
 * a cudaStream_t of device the caller owns (the nccl backend's) that the
 * entries enqueue on instead of a stream of their own. sm_count > 0 and a
 * stream are exclusive. */
htp_kernel_status htp_cuda_kernel_env_create_on(int device, int sm_count, void *stream,
                                                htp_kernel_env *env, char *error,
                                                size_t error_size);
/* CUDA device's SMs, or 0 when it cannot be asked. */
int htp_cuda_device_sm_count(int device);

#ifdef __cplusplus
}
#endif

#endif /* HTP_KERNEL_TABLE_H */
