/*===- runtime/ops.c - the op entry points: one op through the rank's table ===*
 *
 * What compiled blocks call for every op that is not a collective or a
 * balance hook (DESIGN §6): each htp_op_* checks its arguments, then calls
 * the entry of the context's kernel table (ctx.c chose it from
 * htp_config.device; a NULL context gets the CPU table). A compiled block
 * therefore names only htp_op_*, htp_rt_* and htp_allreduce_*, and the same
 * artifact runs on whichever device the context holds.
 *===----------------------------------------------------------------------===*/
#include "runtime/comm_internal.h"
#include "runtime/profile.h"
#include "runtime/htp_ops.h"

#include <limits.h>
#include <math.h>

/* htp.h spells bf16 tensors uint16_t so that it needs no kernels/ header. */
_Static_assert(sizeof(htp_bf16) == sizeof(uint16_t), "bf16 storage");

/* Calls `entry` of ctx's table with ctx's environment and turns a failure
 * into the context's message. */
#define OP_DISPATCH(ctx, what, entry, ...)                                                     \
  do {                                                                                         \
    const htp_kernel_table *table_ = htp__kernel_table(ctx);                                   \
    const htp_kernel_env *env_ = htp__kernel_env(ctx);                                         \
    if ((ctx)) (ctx)->kernel_error[0] = '\0';                                                  \
    if (!table_->entry)                                                                        \
      return (ctx) ? htp__fail((ctx), HTP_ERR_UNSUPPORTED, "%s: the %s table has no " #entry   \
                               " entry", (what), table_->name)                                 \
                   : HTP_ERR_UNSUPPORTED;                                                      \
    htp_kernel_status status_ = table_->entry(env_, __VA_ARGS__);                              \
    return status_ == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed((ctx), status_, (what));     \
  } while (0)

/* OP_DISPATCH for a call a compiled block makes, timed by the per-call
 * profile when one runs (profile.c); the runtime's own uses (marks,
 * memory, copies to and from the host) stay untimed. */
#define OP_TIMED(ctx, what, entry, ...)                                                        \
  do {                                                                                         \
    HTP__PROFILED(ctx, what);                                                                  \
    OP_DISPATCH(ctx, what, entry, __VA_ARGS__);                                                \
  } while (0)

/* A dimension a GEMM takes as BLAS's int. */
static int blas_dim(int64_t n) { return n >= 1 && n <= INT_MAX; }

/* ===== Argument checks, one per op (its f32 and bf16 entries share it) === */

#define OP_CHECKED(call)                                                                       \
  do {                                                                                         \
    htp_result checked_ = (call);                                                              \
    if (checked_ != HTP_OK) return checked_;                                                   \
  } while (0)

static htp_result check_linear(htp_ctx *ctx, const char *what, const void *x, const void *w,
                               const void *y, int64_t rows, int64_t in_features,
                               int64_t out_features) {
  HTP__INVALID_IF(ctx, !x || !w || !y, "%s: x, w or y is NULL", what);
  HTP__INVALID_IF(ctx, !blas_dim(rows) || !blas_dim(in_features) || !blas_dim(out_features),
                  "%s: rows %lld, in_features %lld, out_features %lld must be in [1, %d]", what,
                  (long long)rows, (long long)in_features, (long long)out_features, INT_MAX);
  return HTP_OK;
}

static htp_result check_layer_norm(htp_ctx *ctx, const char *what, const void *x,
                                   const void *gamma, const void *beta, const void *y,
                                   int64_t rows, int64_t dim, float epsilon) {
  HTP__INVALID_IF(ctx, !x || !gamma || !beta || !y, "%s: x, gamma, beta or y is NULL", what);
  HTP__INVALID_IF(ctx, rows < 1 || dim < 1 || rows > INT64_MAX / dim,
                  "%s: rows %lld and dim %lld must be >= 1 (and their product fit)", what,
                  (long long)rows, (long long)dim);
  HTP__INVALID_IF(ctx, !(epsilon > 0.0f) || !isfinite(epsilon),
                  "%s: epsilon %g must be positive and finite", what, (double)epsilon);
  return HTP_OK;
}

static htp_result check_gelu(htp_ctx *ctx, const char *what, const void *x, const void *y,
                             int64_t n, int32_t tanh_approx) {
  HTP__INVALID_IF(ctx, !x || !y, "%s: x or y is NULL", what);
  HTP__INVALID_IF(ctx, n < 1, "%s: n %lld must be >= 1", what, (long long)n);
  HTP__INVALID_IF(ctx, tanh_approx != 0 && tanh_approx != 1, "%s: tanh_approx %d must be 0 or 1",
                  what, (int)tanh_approx);
  return HTP_OK;
}

static htp_result check_add(htp_ctx *ctx, const char *what, const void *a, const void *b,
                            const void *y, int64_t n) {
  HTP__INVALID_IF(ctx, !a || !b || !y, "%s: a, b or y is NULL", what);
  HTP__INVALID_IF(ctx, n < 1, "%s: n %lld must be >= 1", what, (long long)n);
  return HTP_OK;
}

static htp_result check_bias_add(htp_ctx *ctx, const char *what, const void *x, const void *bias,
                                 const void *y, int64_t rows, int64_t cols) {
  HTP__INVALID_IF(ctx, !x || !bias || !y, "%s: x, bias or y is NULL", what);
  HTP__INVALID_IF(ctx, rows < 1 || cols < 1 || rows > INT64_MAX / cols,
                  "%s: rows %lld and cols %lld must be >= 1 (and their product fit)", what,
                  (long long)rows, (long long)cols);
  return HTP_OK;
}

static htp_result check_attention(htp_ctx *ctx, const char *what, const void *x,
                                  const void *wqkv, const void *wproj, const void *y,
                                  const float *scratch, int64_t scratch_floats, int64_t batch,
                                  int64_t tokens, int64_t model_dim, int64_t num_heads,
                                  int64_t head_dim) {
  HTP__INVALID_IF(ctx, !x || !wqkv || !wproj || !y || !scratch,
                  "%s: x, wqkv, wproj, y or scratch is NULL", what);
  HTP__INVALID_IF(ctx, batch < 1 || tokens < 1 || model_dim < 1 || num_heads < 1 || head_dim < 1,
                  "%s: batch %lld, tokens %lld, model_dim %lld, num_heads %lld, head_dim %lld must "
                  "all be >= 1",
                  what, (long long)batch, (long long)tokens, (long long)model_dim,
                  (long long)num_heads, (long long)head_dim);
  HTP__INVALID_IF(ctx,
                  batch > INT_MAX / tokens || tokens > INT_MAX / tokens || model_dim > INT_MAX ||
                      num_heads > INT_MAX / 3 / head_dim,
                  "%s: a dimension exceeds BLAS's int range", what);
  HTP__INVALID_IF(ctx, scratch_floats < 0, "%s: scratch_floats %lld is negative", what,
                  (long long)scratch_floats);
  return HTP_OK;
}

/* ===== f32 ============================================================== */

htp_result htp_op_linear_f32(htp_ctx *ctx, const float *x, const float *w, const float *b,
                             float *y, int64_t rows, int64_t in_features,
                             int64_t out_features) {
  const char *what = "htp_op_linear_f32";
  OP_CHECKED(check_linear(ctx, what, x, w, y, rows, in_features, out_features));
  OP_TIMED(ctx, what, linear_f32, x, w, b, y, rows, in_features, out_features);
}

htp_result htp_op_layer_norm_f32(htp_ctx *ctx, const float *x, const float *gamma,
                                 const float *beta, float *y, int64_t rows, int64_t dim,
                                 float epsilon) {
  const char *what = "htp_op_layer_norm_f32";
  OP_CHECKED(check_layer_norm(ctx, what, x, gamma, beta, y, rows, dim, epsilon));
  OP_TIMED(ctx, what, layer_norm_f32, x, gamma, beta, y, rows, dim, epsilon);
}

htp_result htp_op_gelu_f32(htp_ctx *ctx, const float *x, float *y, int64_t n,
                           int32_t tanh_approx) {
  const char *what = "htp_op_gelu_f32";
  OP_CHECKED(check_gelu(ctx, what, x, y, n, tanh_approx));
  OP_TIMED(ctx, what, gelu_f32, x, y, n, tanh_approx);
}

htp_result htp_op_add_f32(htp_ctx *ctx, const float *a, const float *b, float *y, int64_t n) {
  const char *what = "htp_op_add_f32";
  OP_CHECKED(check_add(ctx, what, a, b, y, n));
  OP_TIMED(ctx, what, add_f32, a, b, y, n);
}

htp_result htp_op_bias_add_f32(htp_ctx *ctx, const float *x, const float *bias, float *y,
                               int64_t rows, int64_t cols) {
  const char *what = "htp_op_bias_add_f32";
  OP_CHECKED(check_bias_add(ctx, what, x, bias, y, rows, cols));
  OP_TIMED(ctx, what, bias_add_f32, x, bias, y, rows, cols);
}

htp_result htp_op_attention_f32(htp_ctx *ctx, const float *x, const float *wqkv,
                                const float *bqkv, const float *wproj, const float *bproj,
                                float *y, float *scratch, int64_t scratch_floats,
                                int64_t batch, int64_t tokens, int64_t model_dim,
                                int64_t num_heads, int64_t head_dim) {
  const char *what = "htp_op_attention_f32";
  OP_CHECKED(check_attention(ctx, what, x, wqkv, wproj, y, scratch, scratch_floats, batch,
                             tokens, model_dim, num_heads, head_dim));
  OP_TIMED(ctx, what, attention_f32, x, wqkv, bqkv, wproj, bproj, y, scratch, scratch_floats,
              batch, tokens, model_dim, num_heads, head_dim);
}

/* ===== Fused linear and GELU ============================================ */

/* The fused entry where the table has one, else its linear then its GELU
 * on y in place (the unfused op pair's entries, the same numbers). */
#define LINEAR_GELU(ctx, what, fused, linear, gelu, x, w, b, y, rows, in, out, tanh_approx)    \
  do {                                                                                         \
    OP_CHECKED(check_linear(ctx, what, x, w, y, rows, in, out));                               \
    HTP__INVALID_IF(ctx, tanh_approx != 0 && tanh_approx != 1,                                 \
                    "%s: tanh_approx %d must be 0 or 1", what, (int)tanh_approx);              \
    if (htp__kernel_table(ctx)->fused)                                                         \
      OP_TIMED(ctx, what, fused, x, w, b, y, rows, in, out, tanh_approx);                   \
    OP_CHECKED(linear(ctx, x, w, b, y, rows, in, out));                                        \
    return gelu(ctx, y, y, (rows) * (out), tanh_approx);                                       \
  } while (0)

htp_result htp_op_linear_gelu_f32(htp_ctx *ctx, const float *x, const float *w, const float *b,
                                  float *y, int64_t rows, int64_t in_features,
                                  int64_t out_features, int32_t tanh_approx) {
  LINEAR_GELU(ctx, "htp_op_linear_gelu_f32", linear_gelu_f32, htp_op_linear_f32,
              htp_op_gelu_f32, x, w, b, y, rows, in_features, out_features, tanh_approx);
}

htp_result htp_op_linear_gelu_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *w,
                                   const uint16_t *b, uint16_t *y, int64_t rows,
                                   int64_t in_features, int64_t out_features,
                                   int32_t tanh_approx) {
  LINEAR_GELU(ctx, "htp_op_linear_gelu_bf16", linear_gelu_bf16, htp_op_linear_bf16,
              htp_op_gelu_bf16, x, w, b, y, rows, in_features, out_features, tanh_approx);
}

/* ===== bf16 (htp_bf16 tensors, f32 scratch) ============================= */

htp_result htp_op_linear_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *w,
                              const uint16_t *b, uint16_t *y, int64_t rows, int64_t in_features,
                              int64_t out_features) {
  const char *what = "htp_op_linear_bf16";
  OP_CHECKED(check_linear(ctx, what, x, w, y, rows, in_features, out_features));
  OP_TIMED(ctx, what, linear_bf16, x, w, b, y, rows, in_features, out_features);
}

htp_result htp_op_layer_norm_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *gamma,
                                  const uint16_t *beta, uint16_t *y, int64_t rows, int64_t dim,
                                  float epsilon) {
  const char *what = "htp_op_layer_norm_bf16";
  OP_CHECKED(check_layer_norm(ctx, what, x, gamma, beta, y, rows, dim, epsilon));
  OP_TIMED(ctx, what, layer_norm_bf16, x, gamma, beta, y, rows, dim, epsilon);
}

htp_result htp_op_gelu_bf16(htp_ctx *ctx, const uint16_t *x, uint16_t *y, int64_t n,
                            int32_t tanh_approx) {
  const char *what = "htp_op_gelu_bf16";
  OP_CHECKED(check_gelu(ctx, what, x, y, n, tanh_approx));
  OP_TIMED(ctx, what, gelu_bf16, x, y, n, tanh_approx);
}

htp_result htp_op_add_bf16(htp_ctx *ctx, const uint16_t *a, const uint16_t *b, uint16_t *y,
                           int64_t n) {
  const char *what = "htp_op_add_bf16";
  OP_CHECKED(check_add(ctx, what, a, b, y, n));
  OP_TIMED(ctx, what, add_bf16, a, b, y, n);
}

htp_result htp_op_bias_add_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *bias,
                                uint16_t *y, int64_t rows, int64_t cols) {
  const char *what = "htp_op_bias_add_bf16";
  OP_CHECKED(check_bias_add(ctx, what, x, bias, y, rows, cols));
  OP_TIMED(ctx, what, bias_add_bf16, x, bias, y, rows, cols);
}

htp_result htp_op_attention_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *wqkv,
                                 const uint16_t *bqkv, const uint16_t *wproj,
                                 const uint16_t *bproj, uint16_t *y, float *scratch,
                                 int64_t scratch_floats, int64_t batch, int64_t tokens,
                                 int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const char *what = "htp_op_attention_bf16";
  OP_CHECKED(check_attention(ctx, what, x, wqkv, wproj, y, scratch, scratch_floats, batch,
                             tokens, model_dim, num_heads, head_dim));
  OP_TIMED(ctx, what, attention_bf16, x, wqkv, bqkv, wproj, bproj, y, scratch,
              scratch_floats, batch, tokens, model_dim, num_heads, head_dim);
}

/* ===== Fused residual adds ============================================== */

/* r must not overlap y: the unfused pair writes y before it reads r. */
static htp_result check_residual(htp_ctx *ctx, const char *what, const void *r, const void *y,
                                 int64_t count, size_t element_bytes) {
  HTP__INVALID_IF(ctx, !r, "%s: r is NULL", what);
  const size_t bytes = (size_t)count * element_bytes; /* count's product checked already */
  HTP__INVALID_IF(ctx, htp__overlap(r, bytes, y, bytes), "%s: r (%p) and y (%p) overlap", what,
                  r, y);
  return HTP_OK;
}

/* The fused entry where the table has one, else the linear then the add
 * on y in place (the unfused op pair's entries, the same numbers). */
#define LINEAR_RESIDUAL(ctx, what, T, fused, linear, add, x, w, b, r, y, rows, in, out)         \
  do {                                                                                         \
    OP_CHECKED(check_linear(ctx, what, x, w, y, rows, in, out));                               \
    OP_CHECKED(check_residual(ctx, what, r, y, (rows) * (out), sizeof(T)));                    \
    if (htp__kernel_table(ctx)->fused)                                                         \
      OP_TIMED(ctx, what, fused, x, w, b, r, y, rows, in, out);                                \
    OP_CHECKED(linear(ctx, x, w, b, y, rows, in, out));                                        \
    return add(ctx, y, r, y, (rows) * (out));                                                  \
  } while (0)

htp_result htp_op_linear_residual_f32(htp_ctx *ctx, const float *x, const float *w,
                                      const float *b, const float *r, float *y, int64_t rows,
                                      int64_t in_features, int64_t out_features) {
  LINEAR_RESIDUAL(ctx, "htp_op_linear_residual_f32", float, linear_residual_f32,
                  htp_op_linear_f32, htp_op_add_f32, x, w, b, r, y, rows, in_features,
                  out_features);
}

htp_result htp_op_linear_residual_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *w,
                                       const uint16_t *b, const uint16_t *r, uint16_t *y,
                                       int64_t rows, int64_t in_features, int64_t out_features) {
  LINEAR_RESIDUAL(ctx, "htp_op_linear_residual_bf16", uint16_t, linear_residual_bf16,
                  htp_op_linear_bf16, htp_op_add_bf16, x, w, b, r, y, rows, in_features,
                  out_features);
}

/* The same for the attention: its fused entry, else it then the add. */
#define ATTENTION_RESIDUAL(ctx, what, T, fused, attention, add, x, wqkv, bqkv, wproj, bproj, r, \
                           y, scratch, scratch_floats, batch, tokens, model_dim, num_heads,     \
                           head_dim)                                                            \
  do {                                                                                         \
    OP_CHECKED(check_attention(ctx, what, x, wqkv, wproj, y, scratch, scratch_floats, batch,   \
                               tokens, model_dim, num_heads, head_dim));                       \
    const int64_t count_ = (batch) * (tokens) * (model_dim);                                   \
    OP_CHECKED(check_residual(ctx, what, r, y, count_, sizeof(T)));                            \
    if (htp__kernel_table(ctx)->fused)                                                         \
      OP_TIMED(ctx, what, fused, x, wqkv, bqkv, wproj, bproj, r, y, scratch, scratch_floats,   \
               batch, tokens, model_dim, num_heads, head_dim);                                 \
    OP_CHECKED(attention(ctx, x, wqkv, bqkv, wproj, bproj, y, scratch, scratch_floats, batch,  \
                         tokens, model_dim, num_heads, head_dim));                             \
    return add(ctx, y, r, y, count_);                                                          \
  } while (0)

htp_result htp_op_attention_residual_f32(htp_ctx *ctx, const float *x, const float *wqkv,
                                         const float *bqkv, const float *wproj,
                                         const float *bproj, const float *r, float *y,
                                         float *scratch, int64_t scratch_floats, int64_t batch,
                                         int64_t tokens, int64_t model_dim, int64_t num_heads,
                                         int64_t head_dim) {
  ATTENTION_RESIDUAL(ctx, "htp_op_attention_residual_f32", float, attention_residual_f32,
                     htp_op_attention_f32, htp_op_add_f32, x, wqkv, bqkv, wproj, bproj, r, y,
                     scratch, scratch_floats, batch, tokens, model_dim, num_heads, head_dim);
}

htp_result htp_op_attention_residual_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *wqkv,
                                          const uint16_t *bqkv, const uint16_t *wproj,
                                          const uint16_t *bproj, const uint16_t *r, uint16_t *y,
                                          float *scratch, int64_t scratch_floats, int64_t batch,
                                          int64_t tokens, int64_t model_dim, int64_t num_heads,
                                          int64_t head_dim) {
  ATTENTION_RESIDUAL(ctx, "htp_op_attention_residual_bf16", uint16_t, attention_residual_bf16,
                     htp_op_attention_bf16, htp_op_add_bf16, x, wqkv, bqkv, wproj, bproj, r, y,
                     scratch, scratch_floats, batch, tokens, model_dim, num_heads, head_dim);
}

/* The same for the bias add: its fused entry, else it then the add. */
#define BIAS_ADD_RESIDUAL(ctx, what, T, fused, bias_add, add, x, bias, r, y, rows, cols)      \
  do {                                                                                         \
    OP_CHECKED(check_bias_add(ctx, what, x, bias, y, rows, cols));                             \
    OP_CHECKED(check_residual(ctx, what, r, y, (rows) * (cols), sizeof(T)));                   \
    if (htp__kernel_table(ctx)->fused)                                                         \
      OP_TIMED(ctx, what, fused, x, bias, r, y, rows, cols);                                   \
    OP_CHECKED(bias_add(ctx, x, bias, y, rows, cols));                                         \
    return add(ctx, y, r, y, (rows) * (cols));                                                 \
  } while (0)

htp_result htp_op_bias_add_residual_f32(htp_ctx *ctx, const float *x, const float *bias,
                                        const float *r, float *y, int64_t rows, int64_t cols) {
  BIAS_ADD_RESIDUAL(ctx, "htp_op_bias_add_residual_f32", float, bias_add_residual_f32,
                    htp_op_bias_add_f32, htp_op_add_f32, x, bias, r, y, rows, cols);
}

htp_result htp_op_bias_add_residual_bf16(htp_ctx *ctx, const uint16_t *x, const uint16_t *bias,
                                         const uint16_t *r, uint16_t *y, int64_t rows,
                                         int64_t cols) {
  BIAS_ADD_RESIDUAL(ctx, "htp_op_bias_add_residual_bf16", uint16_t, bias_add_residual_bf16,
                    htp_op_bias_add_bf16, htp_op_add_bf16, x, bias, r, y, rows, cols);
}

htp_result htp_op_copy(htp_ctx *ctx, void *dst, const void *src, size_t bytes) {
  const char *what = "htp_op_copy";
  if (bytes == 0) return HTP_OK;
  HTP__INVALID_IF(ctx, !dst || !src, "%s: dst or src is NULL with bytes %zu", what, bytes);
  if (dst == src) return HTP_OK; /* nothing to move */
  HTP__INVALID_IF(ctx, htp__overlap(dst, bytes, src, bytes), "%s: dst (%p) and src (%p) overlap "
                  "(%zu bytes)", what, dst, src, bytes);
  OP_TIMED(ctx, what, copy, dst, src, bytes);
}

/* ===== Training ops (f32; issue 9 spec A and B) ========================= */

/* The table must have `entry` (checked before anything is written, so a
 * device without the kernel leaves the outputs alone). */
#define OP_NEEDS(ctx, what, entry)                                                             \
  do {                                                                                         \
    const htp_kernel_table *needs_ = htp__kernel_table(ctx);                                   \
    if (!needs_->entry)                                                                        \
      return (ctx) ? htp__fail((ctx), HTP_ERR_UNSUPPORTED, "%s: the %s table has no " #entry   \
                               " entry", (what), needs_->name)                                 \
                   : HTP_ERR_UNSUPPORTED;                                                      \
  } while (0)

/* Calls `entry` (present: OP_NEEDS) and returns only on failure: for ops
 * made of several kernel calls. */
#define OP_CALL(ctx, what, entry, ...)                                                         \
  do {                                                                                         \
    if ((ctx)) (ctx)->kernel_error[0] = '\0';                                                  \
    htp_kernel_status call_ = htp__kernel_table(ctx)->entry(htp__kernel_env(ctx), __VA_ARGS__); \
    if (call_ != HTP_KERNEL_OK) return htp__kernel_failed((ctx), call_, (what));               \
  } while (0)

/* Clears `floats` floats at ptr (NULL: nothing): a gradient the next kernel
 * accumulates into, so that the op's result is written. */
#define OP_ZERO(ctx, what, ptr, floats)                                                        \
  do {                                                                                         \
    if ((ptr)) OP_CALL(ctx, what, zero, (ptr), (size_t)(floats) * sizeof(float));             \
  } while (0)

/* a * b * c >= 1 without overflow (each >= 1). */
static int sizes_fit(int64_t a, int64_t b, int64_t c) {
  if (a < 1 || b < 1 || c < 1) return 0;
  return htp__size_mul(htp__size_mul(a, b), c) >= 1;
}

/* patch_embed and its backward: sizes, divisibility, BLAS ranges, scratch. */
static htp_result check_patch_embed(htp_ctx *ctx, const char *what, int64_t scratch_floats,
                                    int64_t batch, int64_t channels, int64_t height,
                                    int64_t width, int64_t patch, int64_t dim) {
  HTP__INVALID_IF(
      ctx, batch < 1 || channels < 1 || height < 1 || width < 1 || patch < 1 || dim < 1,
      "%s: batch %lld, channels %lld, height %lld, width %lld, patch %lld, dim %lld must "
      "all be >= 1",
      what, (long long)batch, (long long)channels, (long long)height, (long long)width,
      (long long)patch, (long long)dim);
  HTP__INVALID_IF(ctx, height % patch != 0 || width % patch != 0,
                  "%s: height %lld and width %lld must be multiples of patch %lld", what,
                  (long long)height, (long long)width, (long long)patch);
  const int64_t rows = htp__size_mul(batch, htp__size_mul(height / patch, width / patch));
  const int64_t features = htp__size_mul(channels, htp__size_mul(patch, patch));
  HTP__INVALID_IF(ctx, !blas_dim(rows) || !blas_dim(features) || !blas_dim(dim),
                  "%s: the patch linear's rows %lld, features %lld or dim %lld exceed BLAS's int "
                  "range",
                  what, (long long)rows, (long long)features, (long long)dim);
  const int64_t needed = htp__size_mul(rows, features);
  HTP__INVALID_IF(ctx, needed < 0 || scratch_floats < needed,
                  "%s: scratch holds %lld floats, the patches need %lld", what,
                  (long long)scratch_floats, (long long)needed);
  return HTP_OK;
}

htp_result htp_op_patch_embed_f32(htp_ctx *ctx, const float *images, const float *w,
                                  const float *b, float *y, float *scratch,
                                  int64_t scratch_floats, int64_t batch, int64_t channels,
                                  int64_t height, int64_t width, int64_t patch, int64_t dim) {
  const char *what = "htp_op_patch_embed_f32";
  HTP__INVALID_IF(ctx, !images || !w || !b || !y || !scratch,
                  "%s: images, w, b, y or scratch is NULL", what);
  OP_CHECKED(
      check_patch_embed(ctx, what, scratch_floats, batch, channels, height, width, patch, dim));
  OP_NEEDS(ctx, what, patchify_f32);
  OP_NEEDS(ctx, what, linear_f32);
  HTP__PROFILED(ctx, what);
  OP_CALL(ctx, what, patchify_f32, images, scratch, batch, channels, height, width, patch);
  const int64_t rows = batch * (height / patch) * (width / patch);
  OP_TIMED(ctx, what, linear_f32, scratch, w, b, y, rows, channels * patch * patch, dim);
}

htp_result htp_op_patch_embed_backward_f32(htp_ctx *ctx, const float *images, const float *dy,
                                           float *dw, float *db, float *scratch,
                                           int64_t scratch_floats, int64_t batch,
                                           int64_t channels, int64_t height, int64_t width,
                                           int64_t patch, int64_t dim) {
  const char *what = "htp_op_patch_embed_backward_f32";
  HTP__INVALID_IF(ctx, !images || !dy || !dw || !db || !scratch,
                  "%s: images, dy, dw, db or scratch is NULL", what);
  OP_CHECKED(
      check_patch_embed(ctx, what, scratch_floats, batch, channels, height, width, patch, dim));
  OP_NEEDS(ctx, what, patchify_f32);
  OP_NEEDS(ctx, what, linear_backward_f32);
  OP_NEEDS(ctx, what, zero);
  const int64_t rows = batch * (height / patch) * (width / patch);
  const int64_t features = channels * patch * patch;
  HTP__PROFILED(ctx, what);
  OP_CALL(ctx, what, patchify_f32, images, scratch, batch, channels, height, width, patch);
  OP_ZERO(ctx, what, dw, dim * features);
  OP_ZERO(ctx, what, db, dim);
  /* No input gradient (the images are data), so the weight is not read. */
  OP_TIMED(ctx, what, linear_backward_f32, scratch, NULL, dy, NULL, dw, db, rows, features,
              dim);
}

htp_result htp_op_embed_tokens_f32(htp_ctx *ctx, const float *patches, const float *cls,
                                   const float *pos, float *y, int64_t batch,
                                   int64_t patches_per_image, int64_t dim) {
  const char *what = "htp_op_embed_tokens_f32";
  HTP__INVALID_IF(ctx, !patches || !cls || !pos || !y, "%s: patches, cls, pos or y is NULL", what);
  HTP__INVALID_IF(ctx,
                  patches_per_image < 1 || patches_per_image >= INT64_MAX ||
                      !sizes_fit(batch, patches_per_image + 1, dim),
                  "%s: batch %lld, patches_per_image %lld and dim %lld must be >= 1 (and the "
                  "output's size fit)",
                  what, (long long)batch, (long long)patches_per_image, (long long)dim);
  OP_TIMED(ctx, what, embed_tokens_f32, patches, cls, pos, y, batch, patches_per_image, dim);
}

htp_result htp_op_embed_tokens_backward_f32(htp_ctx *ctx, const float *dy, float *dpatches,
                                            float *dcls, float *dpos, int64_t batch,
                                            int64_t patches_per_image, int64_t dim) {
  const char *what = "htp_op_embed_tokens_backward_f32";
  HTP__INVALID_IF(ctx, !dy || !dpatches || !dcls || !dpos, "%s: dy, dpatches, dcls or dpos is NULL",
                  what);
  HTP__INVALID_IF(ctx,
                  patches_per_image < 1 || patches_per_image >= INT64_MAX ||
                      !sizes_fit(batch, patches_per_image + 1, dim),
                  "%s: batch %lld, patches_per_image %lld and dim %lld must be >= 1 (and dy's size "
                  "fit)",
                  what, (long long)batch, (long long)patches_per_image, (long long)dim);
  OP_NEEDS(ctx, what, embed_tokens_backward_f32);
  OP_NEEDS(ctx, what, zero);
  HTP__PROFILED(ctx, what);
  OP_ZERO(ctx, what, dcls, dim);
  OP_ZERO(ctx, what, dpos, (patches_per_image + 1) * dim);
  OP_TIMED(ctx, what, embed_tokens_backward_f32, dy, dpatches, dcls, dpos, batch,
              patches_per_image, dim);
}

htp_result htp_op_cls_token_f32(htp_ctx *ctx, const float *x, float *y, int64_t batch,
                                int64_t tokens, int64_t dim) {
  const char *what = "htp_op_cls_token_f32";
  HTP__INVALID_IF(ctx, !x || !y, "%s: x or y is NULL", what);
  HTP__INVALID_IF(ctx, !sizes_fit(batch, tokens, dim),
                  "%s: batch %lld, tokens %lld and dim %lld must be >= 1 (and x's size fit)", what,
                  (long long)batch, (long long)tokens, (long long)dim);
  OP_TIMED(ctx, what, cls_token_f32, x, y, batch, tokens, dim);
}

htp_result htp_op_cls_token_backward_f32(htp_ctx *ctx, const float *dy, float *dx,
                                         int64_t batch, int64_t tokens, int64_t dim) {
  const char *what = "htp_op_cls_token_backward_f32";
  HTP__INVALID_IF(ctx, !dy || !dx, "%s: dy or dx is NULL", what);
  HTP__INVALID_IF(ctx, !sizes_fit(batch, tokens, dim),
                  "%s: batch %lld, tokens %lld and dim %lld must be >= 1 (and dx's size fit)", what,
                  (long long)batch, (long long)tokens, (long long)dim);
  OP_TIMED(ctx, what, cls_token_backward_f32, dy, dx, batch, tokens, dim);
}

/* A hyperparameter no optimizer means: negative, not finite. */
static int nonnegative(float value) { return value >= 0.0f && isfinite(value); }

htp_result htp_op_sgd_momentum_f32(htp_ctx *ctx, float *w, const float *g, float *m, int64_t n,
                                   float lr, float momentum, float weight_decay, int64_t step) {
  const char *what = "htp_op_sgd_momentum_f32";
  HTP__INVALID_IF(ctx, !w || !g || !m, "%s: w, g or m is NULL", what);
  HTP__INVALID_IF(ctx, n < 1 || step < 1, "%s: n %lld and step %lld must be >= 1", what,
                  (long long)n, (long long)step);
  HTP__INVALID_IF(ctx, !nonnegative(lr) || !nonnegative(momentum) || !nonnegative(weight_decay),
                  "%s: lr %g, momentum %g and weight_decay %g must be finite and >= 0", what,
                  (double)lr, (double)momentum, (double)weight_decay);
  OP_TIMED(ctx, what, sgd_momentum_f32, w, g, m, n, lr, momentum, weight_decay, step);
}

htp_result htp_op_adamw_f32(htp_ctx *ctx, float *w, const float *g, float *m, float *v,
                            int64_t n, float lr, float beta1, float beta2, float epsilon,
                            float weight_decay, int64_t step) {
  const char *what = "htp_op_adamw_f32";
  HTP__INVALID_IF(ctx, !w || !g || !m || !v, "%s: w, g, m or v is NULL", what);
  HTP__INVALID_IF(ctx, n < 1 || step < 1, "%s: n %lld and step %lld must be >= 1", what,
                  (long long)n, (long long)step);
  HTP__INVALID_IF(ctx, !nonnegative(lr) || !nonnegative(weight_decay),
                  "%s: lr %g and weight_decay %g must be finite and >= 0", what, (double)lr,
                  (double)weight_decay);
  HTP__INVALID_IF(ctx,
                  !(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f) ||
                      !(epsilon > 0.0f && isfinite(epsilon)),
                  "%s: beta1 %g and beta2 %g must be in [0, 1), epsilon %g finite and > 0", what,
                  (double)beta1, (double)beta2, (double)epsilon);
  OP_TIMED(ctx, what, adamw_f32, w, g, m, v, n, lr, beta1, beta2, epsilon, weight_decay, step);
}

htp_result htp_op_cross_entropy_f32(htp_ctx *ctx, const float *logits, const float *targets,
                                    float *loss, int64_t rows, int64_t classes) {
  const char *what = "htp_op_cross_entropy_f32";
  HTP__INVALID_IF(ctx, !logits || !targets || !loss, "%s: logits, targets or loss is NULL", what);
  HTP__INVALID_IF(ctx, !sizes_fit(rows, classes, 1),
                  "%s: rows %lld and classes %lld must be >= 1 (and their product fit)", what,
                  (long long)rows, (long long)classes);
  OP_TIMED(ctx, what, softmax_cross_entropy_f32, logits, targets, loss, NULL, rows, classes);
}

htp_result htp_op_cross_entropy_backward_f32(htp_ctx *ctx, const float *logits,
                                             const float *targets, float *dlogits,
                                             int64_t rows, int64_t classes) {
  const char *what = "htp_op_cross_entropy_backward_f32";
  HTP__INVALID_IF(ctx, !logits || !targets || !dlogits, "%s: logits, targets or dlogits is NULL",
                  what);
  HTP__INVALID_IF(ctx, !sizes_fit(rows, classes, 1),
                  "%s: rows %lld and classes %lld must be >= 1 (and their product fit)", what,
                  (long long)rows, (long long)classes);
  OP_TIMED(ctx, what, softmax_cross_entropy_f32, logits, targets, NULL, dlogits, rows, classes);
}

htp_result htp_op_linear_backward_f32(htp_ctx *ctx, const float *x, const float *w,
                                      const float *dy, float *dx, float *dw, float *db,
                                      int64_t rows, int64_t in_features, int64_t out_features) {
  const char *what = "htp_op_linear_backward_f32";
  HTP__INVALID_IF(ctx, !x || !w || !dy || !dx || !dw, "%s: x, w, dy, dx or dw is NULL", what);
  HTP__INVALID_IF(ctx, !blas_dim(rows) || !blas_dim(in_features) || !blas_dim(out_features),
                  "%s: rows %lld, in_features %lld, out_features %lld must be in [1, %d]", what,
                  (long long)rows, (long long)in_features, (long long)out_features, INT_MAX);
  OP_NEEDS(ctx, what, linear_backward_f32);
  OP_NEEDS(ctx, what, zero);
  HTP__PROFILED(ctx, what);
  OP_ZERO(ctx, what, dw, out_features * in_features);
  OP_ZERO(ctx, what, db, out_features);
  OP_TIMED(ctx, what, linear_backward_f32, x, w, dy, dx, dw, db, rows, in_features,
              out_features);
}

htp_result htp_op_layer_norm_backward_f32(htp_ctx *ctx, const float *x, const float *gamma,
                                          const float *dy, float *dx, float *dgamma,
                                          float *dbeta, int64_t rows, int64_t dim,
                                          float epsilon) {
  const char *what = "htp_op_layer_norm_backward_f32";
  HTP__INVALID_IF(ctx, !x || !gamma || !dy || !dx || !dgamma || !dbeta,
                  "%s: x, gamma, dy, dx, dgamma or dbeta is NULL", what);
  HTP__INVALID_IF(ctx, !sizes_fit(rows, dim, 1),
                  "%s: rows %lld and dim %lld must be >= 1 (and their product fit)", what,
                  (long long)rows, (long long)dim);
  HTP__INVALID_IF(ctx, !(epsilon > 0.0f) || !isfinite(epsilon),
                  "%s: epsilon %g must be positive and finite", what, (double)epsilon);
  OP_NEEDS(ctx, what, layer_norm_backward_f32);
  OP_NEEDS(ctx, what, zero);
  HTP__PROFILED(ctx, what);
  OP_ZERO(ctx, what, dgamma, dim);
  OP_ZERO(ctx, what, dbeta, dim);
  OP_TIMED(ctx, what, layer_norm_backward_f32, x, gamma, dy, dx, dgamma, dbeta, rows, dim,
              epsilon);
}

htp_result htp_op_gelu_backward_f32(htp_ctx *ctx, const float *x, const float *dy, float *dx,
                                    int64_t n, int32_t tanh_approx) {
  const char *what = "htp_op_gelu_backward_f32";
  HTP__INVALID_IF(ctx, !dy, "%s: dy is NULL", what);
  OP_CHECKED(check_gelu(ctx, what, x, dx, n, tanh_approx));
  OP_TIMED(ctx, what, gelu_backward_f32, x, dy, dx, n, tanh_approx);
}

htp_result htp_op_attention_backward_f32(htp_ctx *ctx, const float *x, const float *wqkv,
                                         const float *bqkv, const float *wproj, const float *dy,
                                         float *dx, float *dwqkv, float *dbqkv, float *dwproj,
                                         float *dbproj, float *scratch, int64_t scratch_floats,
                                         int64_t batch, int64_t tokens, int64_t model_dim,
                                         int64_t num_heads, int64_t head_dim) {
  const char *what = "htp_op_attention_backward_f32";
  HTP__INVALID_IF(ctx, !dy || !dwqkv || !dbqkv || !dwproj, "%s: dy, dwqkv, dbqkv or dwproj is NULL",
                  what);
  OP_CHECKED(check_attention(ctx, what, x, wqkv, wproj, dx, scratch, scratch_floats, batch, tokens,
                             model_dim, num_heads, head_dim));
  OP_NEEDS(ctx, what, attention_backward_f32);
  OP_NEEDS(ctx, what, zero);
  const htp_kernel_table *table = htp__kernel_table(ctx);
  if (table->attention_backward_scratch_floats) { /* refused before anything is cleared */
    const int64_t needed = table->attention_backward_scratch_floats(batch, tokens, model_dim,
                                                                    num_heads, head_dim);
    HTP__INVALID_IF(ctx, needed < 0 || scratch_floats < needed,
                    "%s: scratch holds %lld floats, the %s kernel needs %lld", what,
                    (long long)scratch_floats, table->name, (long long)needed);
  }
  const int64_t wide = 3 * num_heads * head_dim;
  HTP__PROFILED(ctx, what);
  OP_ZERO(ctx, what, dwqkv, wide * model_dim);
  OP_ZERO(ctx, what, dbqkv, wide);
  OP_ZERO(ctx, what, dwproj, model_dim * num_heads * head_dim);
  OP_ZERO(ctx, what, dbproj, model_dim);
  OP_TIMED(ctx, what, attention_backward_f32, x, wqkv, bqkv, wproj, NULL, dy, dx, dwqkv,
              dbqkv, dwproj, dbproj, scratch, scratch_floats, batch, tokens, model_dim,
              num_heads, head_dim);
}

htp_result htp_op_row_sum_f32(htp_ctx *ctx, const float *x, float *y, int64_t rows,
                              int64_t cols) {
  const char *what = "htp_op_row_sum_f32";
  HTP__INVALID_IF(ctx, !x || !y, "%s: x or y is NULL", what);
  HTP__INVALID_IF(ctx, !sizes_fit(rows, cols, 1),
                  "%s: rows %lld and cols %lld must be >= 1 (and their product fit)", what,
                  (long long)rows, (long long)cols);
  OP_TIMED(ctx, what, row_sum_f32, x, y, rows, cols);
}

/* ===== Device memory and timing (the executor's buffers) ================ */

htp_result htp_mem_alloc(htp_ctx *ctx, size_t bytes, void **out) {
  const char *what = "htp_mem_alloc";
  HTP__INVALID_IF(ctx, !out || bytes == 0, "%s: %zu bytes into %p", what, bytes, (void *)out);
  *out = NULL;
  OP_DISPATCH(ctx, what, alloc, bytes, out);
}

htp_result htp_mem_free(htp_ctx *ctx, void *ptr) {
  if (!ptr) return HTP_OK;
  OP_DISPATCH(ctx, "htp_mem_free", release, ptr);
}

htp_result htp_mem_upload(htp_ctx *ctx, void *dst, const void *host_src, size_t bytes) {
  const char *what = "htp_mem_upload";
  if (bytes == 0) return HTP_OK;
  HTP__INVALID_IF(ctx, !dst || !host_src, "%s: dst or src is NULL with bytes %zu", what, bytes);
  OP_DISPATCH(ctx, what, to_device, dst, host_src, bytes);
}

htp_result htp_mem_download(htp_ctx *ctx, void *host_dst, const void *src, size_t bytes) {
  const char *what = "htp_mem_download";
  if (bytes == 0) return HTP_OK;
  HTP__INVALID_IF(ctx, !host_dst || !src, "%s: dst or src is NULL with bytes %zu", what, bytes);
  OP_DISPATCH(ctx, what, to_host, host_dst, src, bytes);
}

htp_result htp_mem_info(htp_ctx *ctx, size_t *free_bytes, size_t *total_bytes) {
  const char *what = "htp_mem_info";
  HTP__INVALID_IF(ctx, !ctx || !free_bytes || !total_bytes, "%s: ctx or a result pointer is NULL",
                  what);
  /* Host memory has no device count: not a failure of the world. */
  if (!htp__kernel_table(ctx)->memory)
    return htp__ctx_error(ctx, HTP_ERR_UNSUPPORTED, "%s: the %s device's memory is the host's",
                          what, htp__kernel_table(ctx)->name);
  OP_DISPATCH(ctx, what, memory, free_bytes, total_bytes);
}

htp_result htp_mem_kernels_own(htp_ctx *ctx, uint64_t *bytes) {
  const char *what = "htp_mem_kernels_own";
  HTP__INVALID_IF(ctx, !ctx || !bytes, "%s: ctx or the result pointer is NULL", what);
  if (!htp__kernel_table(ctx)->own_memory)
    return htp__ctx_error(ctx, HTP_ERR_UNSUPPORTED, "%s: the %s kernels' memory is the host's",
                          what, htp__kernel_table(ctx)->name);
  OP_DISPATCH(ctx, what, own_memory, bytes);
}

htp_result htp_ctx_synchronize(htp_ctx *ctx) {
  /* OP_DISPATCH needs an argument after env; synchronize takes none. */
  const htp_kernel_table *table = htp__kernel_table(ctx);
  if (!table->synchronize)
    return ctx ? htp__fail(ctx, HTP_ERR_UNSUPPORTED,
                           "htp_ctx_synchronize: the %s table has no synchronize entry",
                           table->name)
               : HTP_ERR_UNSUPPORTED;
  if (ctx) ctx->kernel_error[0] = '\0';
  htp_kernel_status status = table->synchronize(htp__kernel_env(ctx));
  return status == HTP_KERNEL_OK ? HTP_OK
                                 : htp__kernel_failed(ctx, status, "htp_ctx_synchronize");
}

htp_result htp__ctx_mark_timer(htp_ctx *ctx, int timer, int which) {
  const char *what = "htp_ctx_mark";
  HTP__INVALID_IF(ctx, !ctx, "%s: ctx is NULL", what);
  HTP__INVALID_IF(ctx, which != 0 && which != 1, "%s: mark %d must be 0 or 1", what, which);
  OP_DISPATCH(ctx, what, mark, (int32_t)timer, (int32_t)which);
}

htp_result htp__ctx_elapsed_timer(htp_ctx *ctx, int timer, double *seconds) {
  const char *what = "htp_ctx_elapsed";
  HTP__INVALID_IF(ctx, !ctx || !seconds, "%s: ctx or seconds is NULL", what);
  OP_DISPATCH(ctx, what, elapsed, (int32_t)timer, seconds);
}

htp_result htp_ctx_mark(htp_ctx *ctx, int which) {
  return htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_CALLER, which);
}

htp_result htp_ctx_elapsed(htp_ctx *ctx, double *seconds) {
  return htp__ctx_elapsed_timer(ctx, HTP_KERNEL_TIMER_CALLER, seconds);
}
