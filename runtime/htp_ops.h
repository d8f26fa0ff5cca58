/*===- runtime/htp_ops.h - What compiled blocks call: ops and balance hooks ===*
 *
 * Public, next to runtime/htp_entry.h; the compiled-code ABI of libhtprt.
 * Every op of a lowered block (htp-opt --htp-lower-to-runtime,
 * passes/OpLowerings.cpp) becomes a call, by name, of a function declared
 * here: an op entry point htp_op_* (one op through the context's kernel
 * table) or, for an attention or MLP pair marked by --htp-balance-hooks, a
 * balance hook htp_rt_* (the rank's share of the pair as the balancer's
 * plan says). The block's all-reduce calls htp_allreduce_sum_f32 / _bf16,
 * which are collectives of the embedding API and so stay in runtime/htp.h.
 *
 * These names and signatures are an ABI, not just an API: htp-run's JIT
 * resolves them from its own process (which exports libhtprt) and a .so from
 * htp-compile resolves them when it is loaded, so renaming one, or changing
 * its arguments, breaks every block compiled before. All are exported
 * (HTP_API); runtime.visibility (test/runtime/check_visibility.py) checks
 * that each name the lowering emits is declared here and exported.
 *
 * Who includes it: the runtime that defines these functions (runtime/ops.c,
 * runtime/balance*.c), the compiler for the scratch formulas it sizes a
 * block's workspace with, tests that call an op or a hook directly, and a
 * driver that runs what a block does not: htp-run --train calls the
 * optimizer steps (htp_op_sgd_momentum_f32, htp_op_adamw_f32), which no
 * lowering emits today but which follow the ops' conventions exactly. An
 * embedder that only runs compiled blocks needs runtime/htp.h and
 * runtime/htp_entry.h, not this header.
 *
 * Why a sibling of htp_entry.h rather than part of it: htp_entry.h is the
 * other direction of the same seam, what a compiled block EXPORTS (its entry
 * symbol, signature and facts) and how a loader reads them; loaders
 * (htp-run's, an embedder's) include it and call no op. This header is what
 * a block IMPORTS. Keeping the two apart keeps the signature format in one
 * piece, keeps loaders from seeing some thirty declarations they never call,
 * and keeps runtime/htp.h the embedding API alone.
 *
 * Scratch. Ops and hooks that need scratch take it from the block's
 * workspace, sized by the formulas of kernels/htp_scratch.h
 * (htp_attention_scratch_floats, htp_rt_attention_scratch_floats,
 * htp_rt_mlp_scratch_floats and their backward twins: header-only, static
 * inline), which this header includes so that its callers size scratch
 * exactly as the compiler does. runtime/htp.h includes no kernel header.
 *
 * Conventions are runtime/htp.h's (htp_result, htp_ctx, HTP_API).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_OPS_H
#define HTP_OPS_H

#include "kernels/htp_scratch.h"
#include "runtime/htp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ===== Balance hooks: what compiled blocks call for a balanced pair ===== *
 *
 * The hooks carry out the plan of the balancer attached to the context
 * (runtime/htp.h: htp_balancer_create, and the section "The balancer"
 * there, which says what a hook computes for kept, pruned, handed-off and
 * migrated-in units). */

/* The hooks. Shapes and layouts as htp_cpu_attention_f32 (without proj
 * bias) and as an MLP pair (fc1 [hidden, dim] + bias, GELU, fc2 [dim,
 * hidden], no fc2 bias); y receives the partial sum (overwritten, not
 * accumulated; it must not alias an input). bqkv / b1 may be NULL (no
 * bias). scratch holds htp_rt_attention_scratch_floats(...) or
 * htp_rt_mlp_scratch_floats(...) floats (kernels/htp_scratch.h: the compiler
 * sizes the block's workspace with them). ctx may be NULL, or have no
 * balancer: every unit is computed (for the MLP, hidden_dim need only be a
 * multiple of unit_width). With a balancer, pair must be in [0, 2 *
 * num_layers), even for attention and odd for MLP, and the shapes must be
 * the config's: num_heads == units_per_rank[HTP_PAIR_ATTENTION], head_dim,
 * model_dim; unit_width == mlp_unit_width and hidden_dim ==
 * units_per_rank[HTP_PAIR_MLP] * unit_width. The hook records where the
 * pair's weights are (for packing handed-off units later), so pass the same
 * buffers every iteration. It adds its wall time to the balancer's site
 * seconds. Not collective: no hook talks to other ranks.
 * Return HTP_OK, or HTP_ERR_INVALID with htp_last_error(ctx) (NULL
 * buffers, sizes < 1 or beyond BLAS's int, a pair out of range or of the
 * other kind, shapes that disagree with the balancer's config), or
 * HTP_ERR_INTERNAL (a migrated-in unit's weights are not cached). A failing
 * hook also fails the world, as the collectives do with bad arguments: this
 * rank will not reach the block's all-reduce, and its peers should learn
 * it at once. Without ctx only HTP_ERR_INVALID, and no message. */

HTP_API htp_result htp_rt_attention_f32(htp_ctx *ctx, int32_t pair, const float *x, const float *wqkv,
                                const float *bqkv, const float *wproj, float *y, float *scratch,
                                int64_t batch, int64_t tokens, int64_t model_dim,
                                int64_t num_heads, int64_t head_dim);
HTP_API htp_result htp_rt_mlp_f32(htp_ctx *ctx, int32_t pair, const float *x, const float *w1,
                          const float *b1, const float *w2, float *y, float *scratch,
                          int64_t rows, int64_t model_dim, int64_t hidden_dim,
                          int64_t unit_width, int32_t tanh_approx);
/* Their bf16 twins (tensors as bfloat16 bit patterns; scratch stays f32 and
 * is sized by the same functions): the units are computed with the kernel
 * table's bf16 unit kernels (f32 accumulation, outputs rounded once), and
 * migrated units travel and are packed as bf16. With a balancer its
 * config's element_bytes must be 2 (and 4 for the f32 hooks, else
 * HTP_ERR_INVALID). */
HTP_API htp_result htp_rt_attention_bf16(htp_ctx *ctx, int32_t pair, const uint16_t *x,
                                         const uint16_t *wqkv, const uint16_t *bqkv,
                                         const uint16_t *wproj, uint16_t *y, float *scratch,
                                         int64_t batch, int64_t tokens, int64_t model_dim,
                                         int64_t num_heads, int64_t head_dim);
HTP_API htp_result htp_rt_mlp_bf16(htp_ctx *ctx, int32_t pair, const uint16_t *x,
                                   const uint16_t *w1, const uint16_t *b1, const uint16_t *w2,
                                   uint16_t *y, float *scratch, int64_t rows, int64_t model_dim,
                                   int64_t hidden_dim, int64_t unit_width, int32_t tanh_approx);

/* The backward hooks (DESIGN §11): the adjoints of the two hooks above,
 * which htp-grad writes for a hooked attention (htp.attention_grad with a
 * pair) and a hooked MLP (htp.mlp_grad). Operands as the forward hook's,
 * then dy (the partial sum's gradient, [rows, model_dim]); dx (this rank's
 * part of the input's gradient, which the block all-reduces) is WRITTEN, and
 * so is every weight gradient (dwqkv, dbqkv, dwproj; dw1, db1, dw2: the
 * hook zeroes them first). db1 may be NULL exactly when b1 is; bqkv and
 * dbqkv may not be NULL (htp.attention always has a qkv bias; a block
 * without one passes zeros). scratch
 * holds htp_rt_attention_grad_scratch_floats(...) or
 * htp_rt_mlp_grad_scratch_floats(...) floats (kernels/htp_scratch.h).
 * Without a balancer (or a hookless one) every unit is differentiated, as
 * htp_op_attention_backward_f32 and the MLP's linear/GELU adjoints would.
 * With one, they follow the plan the forward hook of the same pair ran
 * under:
 *   kept unit       its weight gradient and its part of dx;
 *   pruned unit     no weight gradient (zeros), and its part of dx imputed
 *                   as its activation was: zero (none), average (the mean
 *                   of the kept units' parts) or same (its part from the
 *                   last step that computed it; zero before that);
 *   handed off      computed by the helper, whose weight gradient is sent
 *                   back here (written into this rank's gradient slice);
 *   migrated in     this helper adds the unit's part of dx and sends its
 *                   weight gradient to the owner.
 * The gradient return makes the backward hooks collective over the ranks
 * of the plan's flows (point-to-point, one global order, as the migration
 * transfers); with no flow they talk to no one. Errors as the forward
 * hooks', plus those of the transfers; a failing hook fails the world. */
HTP_API htp_result htp_rt_attention_grad_f32(htp_ctx *ctx, int32_t pair, const float *x,
                                             const float *wqkv, const float *bqkv,
                                             const float *wproj, const float *dy, float *dx,
                                             float *dwqkv, float *dbqkv, float *dwproj,
                                             float *scratch, int64_t batch, int64_t tokens,
                                             int64_t model_dim, int64_t num_heads,
                                             int64_t head_dim);
HTP_API htp_result htp_rt_mlp_grad_f32(htp_ctx *ctx, int32_t pair, const float *x,
                                       const float *w1, const float *b1, const float *w2,
                                       const float *dy, float *dx, float *dw1, float *db1,
                                       float *dw2, float *scratch, int64_t rows,
                                       int64_t model_dim, int64_t hidden_dim, int64_t unit_width,
                                       int32_t tanh_approx);

/* ===== Op entry points: what compiled blocks call for every op ========== *
 *
 * Each computes one op through the context's kernel table (htp_config.device:
 * the CPU table by default), so compiled code names no device-specific
 * kernel and one compiled block runs on either device. Layouts, in-place
 * rules and scratch are those of the CPU kernels of the same name
 * (kernels/htp_kernels.h); pointers are the context's device memory (host
 * memory on the CPU). ctx may be NULL: the CPU table is used and a failure
 * has no message (embedders running a tp-1 block without a context keep
 * working). Sizes must be >= 1 and GEMM dimensions fit BLAS's int; b, bqkv,
 * bproj may be NULL (no bias). Return HTP_OK; HTP_ERR_INVALID (a NULL
 * buffer, a size out of range, too little scratch for the device's kernel);
 * HTP_ERR_UNSUPPORTED (no kernel for the op on the context's device);
 * HTP_ERR_SYSTEM (the device failed). Like the hooks, a failing op fails
 * the world (this rank will not reach the block's all-reduce) and says why
 * in htp_last_error(ctx). Not collective. On a CUDA table the op is only
 * enqueued on the rank's stream. */
HTP_API htp_result htp_op_linear_f32(htp_ctx *ctx, const float *x, const float *w,
                                     const float *b, float *y, int64_t rows,
                                     int64_t in_features, int64_t out_features);
HTP_API htp_result htp_op_layer_norm_f32(htp_ctx *ctx, const float *x, const float *gamma,
                                         const float *beta, float *y, int64_t rows,
                                         int64_t dim, float epsilon);
HTP_API htp_result htp_op_gelu_f32(htp_ctx *ctx, const float *x, float *y, int64_t n,
                                   int32_t tanh_approx);
HTP_API htp_result htp_op_add_f32(htp_ctx *ctx, const float *a, const float *b, float *y,
                                  int64_t n);
HTP_API htp_result htp_op_bias_add_f32(htp_ctx *ctx, const float *x, const float *bias,
                                       float *y, int64_t rows, int64_t cols);
/* scratch holds scratch_floats floats: at least what the device's kernel
 * needs (on the CPU htp_cpu_attention_scratch_floats, kernels/htp_scratch.h,
 * which is what compiled blocks reserve). */
HTP_API htp_result htp_op_attention_f32(htp_ctx *ctx, const float *x, const float *wqkv,
                                        const float *bqkv, const float *wproj,
                                        const float *bproj, float *y, float *scratch,
                                        int64_t scratch_floats, int64_t batch, int64_t tokens,
                                        int64_t model_dim, int64_t num_heads,
                                        int64_t head_dim);
/* The same ops on bf16 tensors (bfloat16 bit patterns in uint16_t; every
 * tensor of the op bf16, the attention's scratch still f32 and as large as
 * for f32): f32 arithmetic, each output rounded once to nearest even
 * (kernels/htp_bf16.h). Same arguments, checks and results as above. */
HTP_API htp_result htp_op_linear_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *w,
                                      const uint16_t *b, uint16_t *y, int64_t rows,
                                      int64_t in_features, int64_t out_features);
HTP_API htp_result htp_op_layer_norm_bf16(htp_ctx *ctx, const uint16_t *x,
                                          const uint16_t *gamma, const uint16_t *beta,
                                          uint16_t *y, int64_t rows, int64_t dim,
                                          float epsilon);
HTP_API htp_result htp_op_gelu_bf16(htp_ctx *ctx, const uint16_t *x, uint16_t *y, int64_t n,
                                    int32_t tanh_approx);
HTP_API htp_result htp_op_add_bf16(htp_ctx *ctx, const uint16_t *a, const uint16_t *b,
                                   uint16_t *y, int64_t n);
HTP_API htp_result htp_op_bias_add_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *bias,
                                        uint16_t *y, int64_t rows, int64_t cols);
HTP_API htp_result htp_op_attention_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *wqkv,
                                         const uint16_t *bqkv, const uint16_t *wproj,
                                         const uint16_t *bproj, uint16_t *y, float *scratch,
                                         int64_t scratch_floats, int64_t batch, int64_t tokens,
                                         int64_t model_dim, int64_t num_heads,
                                         int64_t head_dim);
/* y = GELU(x · wᵀ + b): htp.linear with its GELU fused
 * (--htp-fuse-linear-gelu), linear's arguments then gelu's flag; y must
 * not overlap x, w or b. Where the table has the fused entry (the CPU's
 * bf16, as a oneDNN post-op) one pass, else the linear then the GELU in
 * place on y, both through the table. Checks and results as the others. */
HTP_API htp_result htp_op_linear_gelu_f32(htp_ctx *ctx, const float *x, const float *w,
                                          const float *b, float *y, int64_t rows,
                                          int64_t in_features, int64_t out_features,
                                          int32_t tanh_approx);
HTP_API htp_result htp_op_linear_gelu_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *w,
                                           const uint16_t *b, uint16_t *y, int64_t rows,
                                           int64_t in_features, int64_t out_features,
                                           int32_t tanh_approx);
/* y = x · wᵀ + b + r and y = attention(...) + r: htp.linear and
 * htp.attention with their residual add fused (--htp-fuse-residual), r
 * the result's shape, after the (proj) bias; y must not overlap any input.
 * Where the table has the fused entry (CUDA's: the GEMM's epilogue adds r
 * under HTP_CUDA_RESIDUAL=epilogue) one call, else the op then the add in
 * place on y, both through the
 * table. Checks and results as the others. */
HTP_API htp_result htp_op_linear_residual_f32(htp_ctx *ctx, const float *x, const float *w,
                                              const float *b, const float *r, float *y,
                                              int64_t rows, int64_t in_features,
                                              int64_t out_features);
HTP_API htp_result htp_op_linear_residual_bf16(htp_ctx *ctx, const uint16_t *x,
                                               const uint16_t *w, const uint16_t *b,
                                               const uint16_t *r, uint16_t *y, int64_t rows,
                                               int64_t in_features, int64_t out_features);
HTP_API htp_result htp_op_attention_residual_f32(
    htp_ctx *ctx, const float *x, const float *wqkv, const float *bqkv, const float *wproj,
    const float *bproj, const float *r, float *y, float *scratch, int64_t scratch_floats,
    int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim);
HTP_API htp_result htp_op_attention_residual_bf16(
    htp_ctx *ctx, const uint16_t *x, const uint16_t *wqkv, const uint16_t *bqkv,
    const uint16_t *wproj, const uint16_t *bproj, const uint16_t *r, uint16_t *y,
    float *scratch, int64_t scratch_floats, int64_t batch, int64_t tokens, int64_t model_dim,
    int64_t num_heads, int64_t head_dim);
/* y = x + bias + r (bias [cols] on every row of x [rows, cols], r of x's
 * shape): htp.bias_add with its residual add fused (--htp-fuse-residual;
 * a row-parallel layer's sum after its all-reduce). r must not overlap y.
 * The table's fused entry where it has one (CUDA's: one pass), else the
 * bias add then the add in place on y. */
HTP_API htp_result htp_op_bias_add_residual_f32(htp_ctx *ctx, const float *x, const float *bias,
                                                const float *r, float *y, int64_t rows,
                                                int64_t cols);
HTP_API htp_result htp_op_bias_add_residual_bf16(htp_ctx *ctx, const uint16_t *x,
                                                 const uint16_t *bias, const uint16_t *r,
                                                 uint16_t *y, int64_t rows, int64_t cols);
/* dst = src (bytes bytes; dst == src does nothing, another overlap is
 * refused): a compiled block's result copies,
 * which may live on the device. bytes 0 is a no-op. */
HTP_API htp_result htp_op_copy(htp_ctx *ctx, void *dst, const void *src, size_t bytes);

/* ----- Training ops (f32 only; issue 9's spec, sections A and B) ----------
 * Same conventions as above (ctx may be NULL, sizes >= 1, GEMM dimensions
 * within BLAS's int, HTP_ERR_INVALID / _UNSUPPORTED / _SYSTEM). Layouts are
 * the kernel table's entries of the same names (kernels/htp_kernel_table.h).
 * Every output, gradients included, is WRITTEN (the ops are pure values):
 * the entries clear the parameter gradients that the table's backward
 * kernels accumulate (its `zero` entry) before calling them. No output may
 * overlap an input. Pointers other than those marked "may be NULL" must
 * not be NULL. */

/* y [B, N, D] = patchify(images [B, C, H, W]) · w[D, C·P·P]ᵀ + b [D],
 * N = (H/P)(W/P) tokens in row-major patch-grid order, patch vectors in
 * (c, ky, kx) order (timm's Conv2d patch_embed.proj weight [D, C, P, P]).
 * H and W are multiples of P. scratch holds scratch_floats >= B·C·H·W
 * floats (the patches, [B·N, C·P·P]). */
HTP_API htp_result htp_op_patch_embed_f32(htp_ctx *ctx, const float *images, const float *w,
                                          const float *b, float *y, float *scratch,
                                          int64_t scratch_floats, int64_t batch,
                                          int64_t channels, int64_t height, int64_t width,
                                          int64_t patch, int64_t dim);
/* y [B, N+1, D]: y[b, 0] = cls + pos[0], y[b, 1+i] = patches[b, i] + pos[1+i];
 * patches [B, N, D], cls [1, 1, D], pos [1, N+1, D]. */
HTP_API htp_result htp_op_embed_tokens_f32(htp_ctx *ctx, const float *patches, const float *cls,
                                           const float *pos, float *y, int64_t batch,
                                           int64_t patches_per_image, int64_t dim);
/* y [B, D] = x[:, 0] (x [B, T, D]; timm's global_pool='token'). */
HTP_API htp_result htp_op_cls_token_f32(htp_ctx *ctx, const float *x, float *y, int64_t batch,
                                        int64_t tokens, int64_t dim);
/* *loss = mean over rows of -Σ_k t_k log softmax(logits)_k: logits and
 * targets [rows, classes] (targets are class probabilities, e.g. one-hot
 * rows), loss one float of the context's device memory. */
HTP_API htp_result htp_op_cross_entropy_f32(htp_ctx *ctx, const float *logits,
                                            const float *targets, float *loss, int64_t rows,
                                            int64_t classes);
/* dlogits [rows, classes] = d(cross_entropy)/d(logits) for d(loss) = 1:
 * (softmax · Σ_k t_k - t) / rows. */
HTP_API htp_result htp_op_cross_entropy_backward_f32(htp_ctx *ctx, const float *logits,
                                                     const float *targets, float *dlogits,
                                                     int64_t rows, int64_t classes);
/* linear's adjoint: dx [rows, in] = dy · w; dw [out, in] = dyᵀ · x; db [out]
 * = Σ_rows dy (db may be NULL: not wanted). */
HTP_API htp_result htp_op_linear_backward_f32(htp_ctx *ctx, const float *x, const float *w,
                                              const float *dy, float *dx, float *dw, float *db,
                                              int64_t rows, int64_t in_features,
                                              int64_t out_features);
/* layer norm's adjoint (statistics recomputed from x): dx [rows, dim],
 * dgamma and dbeta [dim]. */
HTP_API htp_result htp_op_layer_norm_backward_f32(htp_ctx *ctx, const float *x,
                                                  const float *gamma, const float *dy,
                                                  float *dx, float *dgamma, float *dbeta,
                                                  int64_t rows, int64_t dim, float epsilon);
/* dx = dy · GELU'(x), n elements, exact (tanh_approx 0) or tanh form (1);
 * dx may equal dy. */
HTP_API htp_result htp_op_gelu_backward_f32(htp_ctx *ctx, const float *x, const float *dy,
                                            float *dx, int64_t n, int32_t tanh_approx);
/* The whole attention's adjoint (the forward recomputed in scratch): dx
 * [B·T, model_dim], dwqkv, dbqkv, dwproj as their parameters, dbproj [model_dim]
 * (may be NULL: not wanted). bqkv may be NULL (no qkv bias), as in the
 * forward. The projection's bias changes no gradient but its own, so it is
 * not an argument. scratch holds scratch_floats floats, at least what the
 * device's kernel needs (on the CPU htp_cpu_attention_backward_scratch_floats,
 * kernels/htp_scratch.h). */
HTP_API htp_result htp_op_attention_backward_f32(
    htp_ctx *ctx, const float *x, const float *wqkv, const float *bqkv, const float *wproj,
    const float *dy, float *dx, float *dwqkv, float *dbqkv, float *dwproj, float *dbproj,
    float *scratch, int64_t scratch_floats, int64_t batch, int64_t tokens, int64_t model_dim,
    int64_t num_heads, int64_t head_dim);
/* y [cols] = Σ_rows x [rows, cols] (bias_add's bias gradient), summed in an
 * order that does not depend on the thread count. */
HTP_API htp_result htp_op_row_sum_f32(htp_ctx *ctx, const float *x, float *y, int64_t rows,
                                      int64_t cols);
/* patch_embed's parameter gradients from dy [B, N, D]: dw [D, C, P, P], db
 * [D]. Scratch as htp_op_patch_embed_f32's (the patches again). */
HTP_API htp_result htp_op_patch_embed_backward_f32(htp_ctx *ctx, const float *images,
                                                   const float *dy, float *dw, float *db,
                                                   float *scratch, int64_t scratch_floats,
                                                   int64_t batch, int64_t channels,
                                                   int64_t height, int64_t width, int64_t patch,
                                                   int64_t dim);
/* embed_tokens' adjoint from dy [B, N+1, D]: dpatches [B, N, D] = dy[:, 1:],
 * dcls [1, 1, D] = Σ_b dy[b, 0], dpos [1, N+1, D] = Σ_b dy[b]. */
HTP_API htp_result htp_op_embed_tokens_backward_f32(htp_ctx *ctx, const float *dy,
                                                    float *dpatches, float *dcls, float *dpos,
                                                    int64_t batch, int64_t patches_per_image,
                                                    int64_t dim);
/* cls_token's adjoint: dx [B, T, D] = dy [B, D] at token 0, zero elsewhere. */
HTP_API htp_result htp_op_cls_token_backward_f32(htp_ctx *ctx, const float *dy, float *dx,
                                                 int64_t batch, int64_t tokens, int64_t dim);

/* Optimizer steps over n parameters w, in place, on their gradients g
 * (the kernel table's entries: kernels/htp_kernel_table.h gives the exact
 * updates; PyTorch's SGD with momentum and AdamW with decoupled decay).
 * No lowering emits them today: the training driver (htp-run --train)
 * calls them between steps, with the ops' conventions above.
 * step counts from 1 (the bias correction and SGD's first momentum use it);
 * m (and v) are the optimizer's moments, as long as w. lr, weight_decay,
 * momentum >= 0 and finite; beta1, beta2 in [0, 1); epsilon > 0. */
HTP_API htp_result htp_op_sgd_momentum_f32(htp_ctx *ctx, float *w, const float *g, float *m,
                                           int64_t n, float lr, float momentum,
                                           float weight_decay, int64_t step);
HTP_API htp_result htp_op_adamw_f32(htp_ctx *ctx, float *w, const float *g, float *m, float *v,
                                    int64_t n, float lr, float beta1, float beta2, float epsilon,
                                    float weight_decay, int64_t step);

#ifdef __cplusplus
}
#endif

#endif /* HTP_OPS_H */
