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
 *
 * Unit id lists (and reduce's list of inputs) are HOST arrays, as the
 * balance hooks hold them: the GEMM-based unit kernels read them on the host
 * to issue one cuBLAS call per run of consecutive ids, and the gather
 * kernels (pack, impute, reduce) copy them to the object's device staging
 * buffer before launching, so the caller may reuse a list as soon as the
 * call returns. Ids are checked on the host (in range, else an error) so a
 * bad list never reaches the device.
 *
 * bf16 twins (the _bf16 functions, at the end) take htp_bf16 tensors
 * (kernels/htp_bf16.h) and compute as the CPU's bf16 table entries do: f32
 * accumulation (cuBLAS GEMMs with bf16 inputs and CUBLAS_COMPUTE_32F), f32
 * layer-norm statistics and softmax, every output rounded once to bf16
 * (nearest even). Scratch stays f32 and is sized as for f32.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CUDA_H
#define HTP_KERNELS_CUDA_H

#include "kernels/htp_bf16.h"
#include "kernels/htp_scratch.h"

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
/* The bytes of device memory the object holds of its own (its workspaces:
 * kernels/htp_scratch.h's own-memory formulas); 0 for NULL. */
uint64_t htp_cuda_kernels_own_bytes(const htp_cuda_kernels *kernels);

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
/* y = x + bias + r in one pass (r of x's shape, not overlapping y). */
int htp_cuda_bias_add_residual_f32(htp_cuda_kernels *kernels, const float *x, const float *bias,
                                   const float *r, float *y, int64_t rows, int64_t cols);

/* The model's ends (kernels/cuda/embed.cu), twins of the CPU table's
 * entries of the same names (kernels/htp_kernel_table.h): patchify, token
 * embedding, class-token pooling, row sums (written) and the adjoints of
 * embedding (dpatches written, dcls and dpos accumulated, each may be NULL)
 * and pooling (dx written whole). Sums: one thread per column, rows in
 * order in double. */
int htp_cuda_patchify_f32(htp_cuda_kernels *kernels, const float *images, float *patches,
                          int64_t batch, int64_t channels, int64_t height, int64_t width,
                          int64_t patch);
int htp_cuda_embed_tokens_f32(htp_cuda_kernels *kernels, const float *patches, const float *cls,
                              const float *pos, float *y, int64_t batch,
                              int64_t patches_per_image, int64_t dim);
int htp_cuda_cls_token_f32(htp_cuda_kernels *kernels, const float *x, float *y, int64_t batch,
                           int64_t tokens, int64_t dim);
int htp_cuda_row_sum_f32(htp_cuda_kernels *kernels, const float *x, float *y, int64_t rows,
                         int64_t cols);
int htp_cuda_embed_tokens_backward_f32(htp_cuda_kernels *kernels, const float *dy,
                                       float *dpatches, float *dcls, float *dpos, int64_t batch,
                                       int64_t patches_per_image, int64_t dim);
int htp_cuda_cls_token_backward_f32(htp_cuda_kernels *kernels, const float *dy, float *dx,
                                    int64_t batch, int64_t tokens, int64_t dim);
/* Scratch differs from the CPU twin's (every image's scores of a head are
 * computed by one batched GEMM): htp_cuda_attention_scratch_floats,
 * kernels/htp_scratch.h. */
int htp_cuda_attention_f32(htp_cuda_kernels *kernels, const float *x, const float *wqkv,
                           const float *bqkv, const float *wproj, const float *bproj, float *y,
                           float *scratch, int64_t batch, int64_t tokens, int64_t model_dim,
                           int64_t num_heads, int64_t head_dim);

/* y = x·wᵀ + b + r and y = attention(...) + r, r a residual of y's shape not
 * overlapping it (the table's linear_residual and attention_residual
 * entries): the add kernel after the projection, or with
 * HTP_CUDA_RESIDUAL=epilogue r in its GEMM's epilogue (cuBLASLt's C,
 * CUTLASS's source) where the shape takes one. */
int htp_cuda_linear_residual_f32(htp_cuda_kernels *kernels, const float *x, const float *w,
                                 const float *b, const float *r, float *y, int64_t rows,
                                 int64_t in_features, int64_t out_features);
int htp_cuda_linear_residual_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                  const htp_bf16 *w, const htp_bf16 *b, const htp_bf16 *r,
                                  htp_bf16 *y, int64_t rows, int64_t in_features,
                                  int64_t out_features);
int htp_cuda_attention_residual_f32(htp_cuda_kernels *kernels, const float *x, const float *wqkv,
                                    const float *bqkv, const float *wproj, const float *bproj,
                                    const float *r, float *y, float *scratch, int64_t batch,
                                    int64_t tokens, int64_t model_dim, int64_t num_heads,
                                    int64_t head_dim);
int htp_cuda_attention_residual_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                     const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                     const htp_bf16 *wproj, const htp_bf16 *bproj,
                                     const htp_bf16 *r, htp_bf16 *y, float *scratch,
                                     int64_t batch, int64_t tokens, int64_t model_dim,
                                     int64_t num_heads, int64_t head_dim);

/* ----- Work-unit kernels of the balance hooks (DESIGN §4) -----------------
 * Twins of htp_cpu_attention_heads_f32, htp_cpu_mlp_hidden_units_f32 and
 * htp_cpu_linear_units_f32 (kernels/htp_kernels.h): same layouts, argument
 * order and scratch size (attention_heads: batch * tokens * 3 * head_dim +
 * tokens * tokens floats, as htp_rt_attention_scratch_floats counts, which
 * the CUDA one leaves unused: it runs in its own memory,
 * htp_cuda_heads_bytes), lists in host memory (above). */
int htp_cuda_attention_heads_f32(htp_cuda_kernels *kernels, const float *x, const float *wqkv,
                                 const float *bqkv, float *context, float *scratch,
                                 int64_t batch, int64_t tokens, int64_t model_dim,
                                 int64_t num_heads, int64_t head_dim, const int32_t *heads,
                                 int64_t count);
int htp_cuda_mlp_hidden_units_f32(htp_cuda_kernels *kernels, const float *x, const float *w1,
                                  const float *b1, float *hidden, int64_t rows, int64_t dim,
                                  int64_t hidden_dim, int64_t width, const int32_t *units,
                                  int64_t count, int32_t tanh_approx);
int htp_cuda_linear_units_f32(htp_cuda_kernels *kernels, const float *a, const float *w,
                              float *y, int64_t rows, int64_t in_features, int64_t out_features,
                              int64_t width, const int32_t *units, int64_t count,
                              int32_t accumulate);

/* ----- Same-device reduction, unit packing, imputation (no CPU twin in
 * kernels/; test/kernels/test_kernels_cuda.c holds reference loops written
 * from the runtime's versions) -------------------------------------------- */

/* y[i] = inputs[0][i] + inputs[1][i] + ... + inputs[count-1][i], added in
 * that order in f32 (so every rank sharing the GPU gets the same bits as a
 * serial loop). inputs is a host array of count device pointers (for ranks
 * that share one GPU); y may be one of them. count 0 zeroes y. The inputs
 * must be complete before this object's stream reaches the launch: the
 * caller orders the other ranks' streams first (an event each). */
int htp_cuda_reduce_sum_f32(htp_cuda_kernels *kernels, const float *const *inputs,
                            int64_t count, float *y, int64_t n);

/* Unit packing, the layout runtime/unit_weights.c pack_in_units builds for
 * the units a helper took in. A pair of `units` units of `width` columns with
 * `parts` row blocks per unit (attention: q, k, v = 3; MLP: 1) is
 *   first  [parts * units * width, model_dim]  (part p, unit u: rows
 *          p*units*width + u*width ...)
 *   bias   [parts * units * width]             (NULL: packed as zeros)
 *   second [model_dim, units * width]          (unit u: columns u*width ...)
 * The listed units list[i] are copied into slots slot + i of a packed block
 * of block_units units, one contiguous buffer laid out the same way:
 *   block = [first: parts*B*width*model_dim][bias: parts*B*width]
 *           [second: model_dim*B*width], B = block_units,
 * i.e. block_units * (parts*width*model_dim + parts*width + model_dim*width)
 * floats. Slots outside [slot, slot + count) are untouched, so a block can
 * be filled from several sources (pack_in_units packs one-unit shards:
 * units = 1, list {0}, slot j). */
int htp_cuda_pack_units_f32(htp_cuda_kernels *kernels, const float *first, const float *bias,
                            const float *second, int64_t units, int64_t width,
                            int64_t model_dim, int64_t parts, const int32_t *list, int64_t count,
                            float *block, int64_t block_units, int64_t slot);

/* Imputation of pruned units' activations, as runtime/units.c
 * htp_impute_fill: act is [rows, row_stride] with unit u in columns
 * [u*width, (u+1)*width).
 * zero:    the pruned units' columns = 0.
 * average: per row and column j of a unit, the mean of the kept units'
 *          column j (summed in list order, in double) into every pruned
 *          unit's column j; no kept unit: zero, as the CPU.
 * same:    the pruned units' columns copied from stored [rows,
 *          stored_stride] (the same columns of an earlier iteration). */
int htp_cuda_impute_zero_f32(htp_cuda_kernels *kernels, float *act, int64_t rows,
                             int64_t row_stride, int64_t width, const int32_t *pruned,
                             int64_t num_pruned);
int htp_cuda_impute_average_f32(htp_cuda_kernels *kernels, float *act, int64_t rows,
                                int64_t row_stride, int64_t width, const int32_t *kept,
                                int64_t num_kept, const int32_t *pruned, int64_t num_pruned);
int htp_cuda_impute_same_f32(htp_cuda_kernels *kernels, float *act, const float *stored,
                             int64_t rows, int64_t row_stride, int64_t stored_stride,
                             int64_t width, const int32_t *pruned, int64_t num_pruned);

/* ----- bf16 twins -----------------------------------------------------------
 * The same arguments, layouts, lists and scratch as the f32 functions above.
 * Where the f32 GEMM would write an output that later passes through
 * another step (the MLP units' bias and GELU, the row-parallel units'
 * accumulation over runs), the bf16 twin keeps the f32 intermediate in the
 * object's own workspace (grown on demand, as the staging buffer) so the
 * output is still rounded once. Attention (head_dim up to 256) is one
 * fused kernel on the tensor cores between its projections, as PyTorch's
 * bf16 flash attention: q, k and v rounded to bf16 by the qkv projection,
 * scores and p·v accumulated in f32, the softmax in f32 with p rounded to
 * bf16 for p·v, the context rounded to bf16 for the output projection; the
 * CPU twin keeps all of those f32 (kernels/cpu/attention_bf16.c), so the
 * two agree to the bf16 operands' rounding (test_kernels_cuda's bound).
 * The listed-heads unit kernel runs its heads as that attention, their
 * weights gathered (kernels/cuda/units.cu). */
int htp_cuda_linear_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x, const htp_bf16 *w,
                         const htp_bf16 *b, htp_bf16 *y, int64_t rows, int64_t in_features,
                         int64_t out_features);
int htp_cuda_layer_norm_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                             const htp_bf16 *gamma, const htp_bf16 *beta, htp_bf16 *y,
                             int64_t rows, int64_t dim, float epsilon);
int htp_cuda_gelu_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x, htp_bf16 *y, int64_t n,
                       int32_t tanh_approx);
int htp_cuda_add_bf16(htp_cuda_kernels *kernels, const htp_bf16 *a, const htp_bf16 *b,
                      htp_bf16 *y, int64_t n);
int htp_cuda_bias_add_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x, const htp_bf16 *bias,
                           htp_bf16 *y, int64_t rows, int64_t cols);
int htp_cuda_bias_add_residual_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                    const htp_bf16 *bias, const htp_bf16 *r, htp_bf16 *y,
                                    int64_t rows, int64_t cols);
/* scratch: htp_cuda_attention_scratch_floats floats, as the f32 twin. */
int htp_cuda_attention_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x, const htp_bf16 *wqkv,
                            const htp_bf16 *bqkv, const htp_bf16 *wproj, const htp_bf16 *bproj,
                            htp_bf16 *y, float *scratch, int64_t batch, int64_t tokens,
                            int64_t model_dim, int64_t num_heads, int64_t head_dim);
int htp_cuda_attention_heads_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                  const htp_bf16 *wqkv, const htp_bf16 *bqkv, htp_bf16 *context,
                                  float *scratch, int64_t batch, int64_t tokens,
                                  int64_t model_dim, int64_t num_heads, int64_t head_dim,
                                  const int32_t *heads, int64_t count);
int htp_cuda_mlp_hidden_units_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                   const htp_bf16 *w1, const htp_bf16 *b1, htp_bf16 *hidden,
                                   int64_t rows, int64_t dim, int64_t hidden_dim, int64_t width,
                                   const int32_t *units, int64_t count, int32_t tanh_approx);
/* With accumulate, y's old values join the f32 sum: rounded once too. */
int htp_cuda_linear_units_bf16(htp_cuda_kernels *kernels, const htp_bf16 *a, const htp_bf16 *w,
                               htp_bf16 *y, int64_t rows, int64_t in_features,
                               int64_t out_features, int64_t width, const int32_t *units,
                               int64_t count, int32_t accumulate);
/* y[i] = bf16(f32(inputs[0][i]) + ... + f32(inputs[count-1][i])), added in
 * that order in f32 and rounded once; otherwise as htp_cuda_reduce_sum_f32. */
int htp_cuda_reduce_sum_bf16(htp_cuda_kernels *kernels, const htp_bf16 *const *inputs,
                             int64_t count, htp_bf16 *y, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* HTP_KERNELS_CUDA_H */
