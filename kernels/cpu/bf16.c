/*===- kernels/cpu/bf16.c - The CPU table's bf16 entries and the sums -----===*
 *
 * Linears and the attention run as oneDNN bf16 matmuls where the build has
 * oneDNN and it has a bf16 matmul for this CPU (cpu/onednn.c,
 * cpu/attention_bf16.c: AMX, AVX512-BF16; f32 accumulation, one rounding of
 * each output, the attention's q, k, v, p and context bf16 operands as on
 * the GPU). Otherwise, and for every other entry, each
 * bf16 entry widens its operands to f32 (exact), runs the f32 kernel (the
 * f32 entry of the same table, its checks included, or for layer norm and
 * GELU its code on a block at a time) and rounds each output once
 * (kernels/htp_bf16.h): the numbers are those of the f32 kernel on
 * bf16-valued data, f32 accumulation throughout. The elementwise add and
 * bias add work per element and need no buffer; the others take their f32 copies from the
 * environment's object (cpu/env.c), or from one allocation per call where
 * it has none. Weights are widened on every call:
 * the table keeps no state between calls, so weights that change (training)
 * are never stale.
 *
 * Outputs the unit kernels leave partly untouched (context, hidden, and y
 * when accumulating) are widened first, so the untouched columns come back
 * as they were (bf16 -> f32 -> bf16 is the identity).
 *===----------------------------------------------------------------------===*/
#include "kernels/cpu/bf16.h"

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/env.h"
#include "kernels/htp_kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#ifdef HTP_BLAS_ONEDNN
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/onednn.h"
#endif

/* ===== Conversions, threaded ============================================ */

struct convert_job {
  const void *src;
  void *dst;
};

HTP_VECTOR_CLONES
static void widen_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct convert_job *job = ctx;
  const htp_bf16 *src = job->src;
  float *dst = job->dst;
  for (int64_t i = begin; i < end; i++) dst[i] = htp_bf16_to_f32(src[i]);
}

HTP_VECTOR_CLONES
static void narrow_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct convert_job *job = ctx;
  const float *src = job->src;
  htp_bf16 *dst = job->dst;
  for (int64_t i = begin; i < end; i++) dst[i] = htp_bf16_from_f32(src[i]);
}

static void widen(const htp_bf16 *src, float *dst, int64_t n) {
  struct convert_job job = {src, dst};
  if (src && n > 0) htp__parallel(n, HTP_GRAIN, widen_chunk, &job);
}

static void narrow(const float *src, htp_bf16 *dst, int64_t n) {
  struct convert_job job = {src, dst};
  if (n > 0) htp__parallel(n, HTP_GRAIN, narrow_chunk, &job);
}

/* Carves consecutive pieces out of an f32 room: the sizes of an entry's
 * operands, summed with overflow checks, then handed out in order. */
typedef struct carve {
  int64_t total; /* < 0 once a sum overflowed */
  float *next;
} carve;

static void carve_count(carve *c, int64_t floats) { c->total = htp__size_add(c->total, floats); }

static float *carve_take(carve *c, int64_t floats) {
  float *piece = c->next;
  c->next += floats;
  return piece;
}

/* ===== The entries ====================================================== */

static const htp_kernel_table *f32_table(void) { return htp_cpu_kernel_table(); }

/* y = x·wᵀ + b on the operands widened to f32, then GELU in f32 when gelu
 * >= 0 (its tanh_approx), y rounded once. */
static htp_kernel_status linear_in_f32(const htp_kernel_env *env, const htp_bf16 *x,
                                       const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                       int64_t rows, int64_t in_features, int64_t out_features,
                                       int32_t gelu) {
  carve c = {0};
  carve_count(&c, htp__size_mul(rows, in_features));
  carve_count(&c, htp__size_mul(out_features, in_features));
  carve_count(&c, b ? out_features : 0);
  carve_count(&c, htp__size_mul(rows, out_features));
  float *owned, *room = htp__cpu_f32_room(env, c.total, &owned);
  if (!room) return HTP_KERNEL_ERR_NOMEM;
  c.next = room;
  float *xf = carve_take(&c, rows * in_features), *wf = carve_take(&c, out_features * in_features);
  float *bf = b ? carve_take(&c, out_features) : NULL, *yf = carve_take(&c, rows * out_features);
  widen(x, xf, rows * in_features);
  widen(w, wf, out_features * in_features);
  widen(b, bf, out_features);
  htp_kernel_status status =
      f32_table()->linear_f32(env, xf, wf, bf, yf, rows, in_features, out_features);
  if (status == HTP_KERNEL_OK && gelu >= 0)
    status = f32_table()->gelu_f32(env, yf, yf, rows * out_features, gelu);
  if (status == HTP_KERNEL_OK) narrow(yf, y, rows * out_features);
  free(owned);
  return status;
}

htp_kernel_status htp__cpu_linear_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                       const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                       int64_t rows, int64_t in_features, int64_t out_features) {
#ifdef HTP_BLAS_ONEDNN
  /* On the CPU's bf16 units where oneDNN has them (AMX, AVX512-BF16). */
  if (x && w && y && htp__onednn_linear_bf16(x, w, b, y, rows, in_features, out_features) == 0)
    return HTP_KERNEL_OK;
#endif
  return linear_in_f32(env, x, w, b, y, rows, in_features, out_features, -1);
}

htp_kernel_status htp__cpu_linear_gelu_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                            const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                            int64_t rows, int64_t in_features,
                                            int64_t out_features, int32_t tanh_approx) {
#ifdef HTP_BLAS_ONEDNN
  /* One pass: the GELU as the matmul's post-op, one rounding. */
  if (x && w && y &&
      htp__onednn_linear_gelu_bf16(x, w, b, y, rows, in_features, out_features, tanh_approx) == 0)
    return HTP_KERNEL_OK;
#endif
  /* Rounded once as the table promises (linear_bf16 then gelu_bf16 would
   * round twice: up to 3x the kernel test's bound). */
  return linear_in_f32(env, x, w, b, y, rows, in_features, out_features, tanh_approx ? 1 : 0);
}

/* Elements (GELU) or rows (layer norm) widened into a block on the stack,
 * computed by the f32 kernel's own code on that block and rounded back: the
 * numbers of widening the whole tensor, without its f32 copies going
 * through memory. */
enum { BLOCK_FLOATS = 2048 };

struct gelu_job {
  const htp_bf16 *x;
  htp_bf16 *y;
  int32_t tanh_approx;
};

static void gelu_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct gelu_job *job = ctx;
  float block[BLOCK_FLOATS];
  for (int64_t i = begin; i < end; i += BLOCK_FLOATS) {
    const int64_t n = end - i < BLOCK_FLOATS ? end - i : BLOCK_FLOATS;
    widen_chunk(&(struct convert_job){job->x + i, block}, 0, n);
    htp__gelu_range(block, block, n, job->tanh_approx);
    narrow_chunk(&(struct convert_job){block, job->y + i}, 0, n);
  }
}

htp_kernel_status htp__cpu_gelu_bf16(const htp_kernel_env *env, const htp_bf16 *x, htp_bf16 *y,
                                     int64_t n, int32_t tanh_approx) {
  (void)env;
  struct gelu_job job = {x, y, tanh_approx};
  if (n > 0) htp__parallel(n, HTP_GRAIN, gelu_chunk, &job);
  return HTP_KERNEL_OK;
}

struct norm_job {
  const htp_bf16 *x;
  const float *gamma, *beta;
  htp_bf16 *y;
  int64_t dim;
  float epsilon;
  _Atomic int failed;
};

static void norm_rows(void *ctx, int64_t begin, int64_t end) {
  struct norm_job *job = ctx;
  const int64_t dim = job->dim;
  float block[BLOCK_FLOATS], *row = dim <= BLOCK_FLOATS ? block : malloc(sizeof *row * dim);
  if (!row) {
    atomic_store(&job->failed, 1);
    return;
  }
  for (int64_t r = begin; r < end; r++) {
    widen_chunk(&(struct convert_job){job->x + r * dim, row}, 0, dim);
    /* In place: the row's statistics are taken before it is written. */
    htp__layer_norm_row(row, job->gamma, job->beta, row, dim, job->epsilon);
    narrow_chunk(&(struct convert_job){row, job->y + r * dim}, 0, dim);
  }
  if (row != block) free(row);
}

htp_kernel_status htp__cpu_layer_norm_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                           const htp_bf16 *gamma, const htp_bf16 *beta,
                                           htp_bf16 *y, int64_t rows, int64_t dim,
                                           float epsilon) {
  if (rows <= 0 || dim <= 0) return HTP_KERNEL_OK;
  float *owned, *room = htp__cpu_f32_room(env, htp__size_mul(dim, 2), &owned);
  if (!room) return HTP_KERNEL_ERR_NOMEM;
  widen(gamma, room, dim);
  widen(beta, room + dim, dim);
  struct norm_job job = {x, room, room + dim, y, dim, epsilon, 0};
  htp__parallel(rows, 1 + HTP_GRAIN / dim, norm_rows, &job);
  free(owned);
  if (atomic_load(&job.failed))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "cpu layer norm bf16: out of memory for a row of %lld",
                           (long long)dim);
  return HTP_KERNEL_OK;
}

struct add_job {
  const htp_bf16 *a, *b;
  htp_bf16 *y;
  int64_t cols; /* bias add: b has cols elements, repeated per row; add: 0 */
};

HTP_VECTOR_CLONES
static void add_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct add_job *job = ctx;
  for (int64_t i = begin; i < end; i++)
    job->y[i] = htp_bf16_from_f32(htp_bf16_to_f32(job->a[i]) + htp_bf16_to_f32(job->b[i]));
}

/* Rows at a time, so the bias index needs no division per element. */
HTP_VECTOR_CLONES
static void bias_add_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct add_job *job = ctx;
  for (int64_t r = begin; r < end; r++) {
    const htp_bf16 *x = job->a + r * job->cols;
    htp_bf16 *y = job->y + r * job->cols;
    for (int64_t c = 0; c < job->cols; c++)
      y[c] = htp_bf16_from_f32(htp_bf16_to_f32(x[c]) + htp_bf16_to_f32(job->b[c]));
  }
}

htp_kernel_status htp__cpu_add_bf16(const htp_kernel_env *env, const htp_bf16 *a,
                                    const htp_bf16 *b, htp_bf16 *y, int64_t n) {
  (void)env;
  struct add_job job = {a, b, y, 0};
  if (n > 0) htp__parallel(n, HTP_GRAIN, add_chunk, &job);
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__cpu_bias_add_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                         const htp_bf16 *bias, htp_bf16 *y, int64_t rows,
                                         int64_t cols) {
  (void)env;
  struct add_job job = {x, bias, y, cols};
  const int64_t grain = cols >= HTP_GRAIN ? 1 : HTP_GRAIN / cols;
  if (rows > 0 && cols > 0) htp__parallel(rows, grain, bias_add_chunk, &job);
  return HTP_KERNEL_OK;
}


htp_kernel_status htp__cpu_attention_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                          const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                          const htp_bf16 *wproj, const htp_bf16 *bproj,
                                          htp_bf16 *y, float *scratch, int64_t scratch_floats,
                                          int64_t batch, int64_t tokens, int64_t model_dim,
                                          int64_t num_heads, int64_t head_dim) {
#ifdef HTP_BLAS_ONEDNN
  if (x && wqkv && wproj && y && scratch && batch > 0 && tokens > 0 && model_dim > 0 &&
      num_heads > 0 && head_dim > 0 &&
      htp__attention_bf16_units(env, x, wqkv, bqkv, wproj, bproj, y, scratch, scratch_floats,
                                batch, tokens, model_dim, num_heads, head_dim) == 0)
    return HTP_KERNEL_OK;
#endif
  const int64_t rows = htp__size_mul(batch, tokens);
  const int64_t act = htp__size_mul(rows, model_dim);
  const int64_t qkv_rows = htp__size_mul(htp__size_mul(num_heads, head_dim), 3);
  const int64_t inner = qkv_rows < 0 ? -1 : qkv_rows / 3;
  carve c = {0};
  carve_count(&c, htp__size_mul(act, 2)); /* x, y */
  carve_count(&c, htp__size_mul(qkv_rows, model_dim));
  carve_count(&c, bqkv ? qkv_rows : 0);
  carve_count(&c, htp__size_mul(model_dim, inner));
  carve_count(&c, bproj ? model_dim : 0);
  float *owned, *room = htp__cpu_f32_room(env, c.total, &owned);
  if (!room) return HTP_KERNEL_ERR_NOMEM;
  c.next = room;
  float *xf = carve_take(&c, act), *yf = carve_take(&c, act);
  float *wqkvf = carve_take(&c, qkv_rows * model_dim);
  float *bqkvf = bqkv ? carve_take(&c, qkv_rows) : NULL;
  float *wprojf = carve_take(&c, model_dim * inner);
  float *bprojf = bproj ? carve_take(&c, model_dim) : NULL;
  widen(x, xf, act);
  widen(wqkv, wqkvf, qkv_rows * model_dim);
  widen(bqkv, bqkvf, qkv_rows);
  widen(wproj, wprojf, model_dim * inner);
  widen(bproj, bprojf, model_dim);
  htp_kernel_status status =
      f32_table()->attention_f32(env, xf, wqkvf, bqkvf, wprojf, bprojf, yf, scratch,
                                 scratch_floats, batch, tokens, model_dim, num_heads, head_dim);
  if (status == HTP_KERNEL_OK) narrow(yf, y, act);
  free(owned);
  return status;
}

/* Whether list is every one of `units` units of `width` columns in order,
 * the whole of `total` columns (one unit of all of them counts too): what a
 * balance hook that keeps everything, or computes a compact shard, asks
 * for, which the unfused bf16 entries (oneDNN) can then run. */
static int every_unit(const int32_t *list, int64_t count, int64_t width, int64_t total) {
  if (!list || count < 1 || width < 1 || count * width != total) return 0;
  for (int64_t i = 0; i < count; ++i)
    if (list[i] != i) return 0;
  return 1;
}

htp_kernel_status htp__cpu_attention_heads_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                                const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                                htp_bf16 *context, float *scratch,
                                                int64_t batch, int64_t tokens,
                                                int64_t model_dim, int64_t num_heads,
                                                int64_t head_dim, const int32_t *heads,
                                                int64_t count) {
#ifdef HTP_BLAS_ONEDNN
  if (x && wqkv && context && every_unit(heads, count, 1, num_heads) &&
      htp__attention_context_bf16_units(env, x, wqkv, bqkv, context, batch, tokens, model_dim,
                                        num_heads, head_dim) == 0)
    return HTP_KERNEL_OK;
#endif
  const int64_t rows = htp__size_mul(batch, tokens);
  const int64_t inner = htp__size_mul(num_heads, head_dim);
  const int64_t qkv_rows = htp__size_mul(inner, 3);
  carve c = {0};
  carve_count(&c, htp__size_mul(rows, model_dim));
  carve_count(&c, htp__size_mul(qkv_rows, model_dim));
  carve_count(&c, bqkv ? qkv_rows : 0);
  carve_count(&c, htp__size_mul(rows, inner));
  float *owned, *room = htp__cpu_f32_room(env, c.total, &owned);
  if (!room) return HTP_KERNEL_ERR_NOMEM;
  c.next = room;
  float *xf = carve_take(&c, rows * model_dim), *wf = carve_take(&c, qkv_rows * model_dim);
  float *bf = bqkv ? carve_take(&c, qkv_rows) : NULL, *cf = carve_take(&c, rows * inner);
  widen(x, xf, rows * model_dim);
  widen(wqkv, wf, qkv_rows * model_dim);
  widen(bqkv, bf, qkv_rows);
  widen(context, cf, rows * inner);
  htp_kernel_status status =
      f32_table()->attention_heads_f32(env, xf, wf, bf, cf, scratch, batch, tokens, model_dim,
                                       num_heads, head_dim, heads, count);
  if (status == HTP_KERNEL_OK) narrow(cf, context, rows * inner);
  free(owned);
  return status;
}

htp_kernel_status htp__cpu_mlp_hidden_units_bf16(const htp_kernel_env *env, const htp_bf16 *x,
                                                 const htp_bf16 *w1, const htp_bf16 *b1,
                                                 htp_bf16 *hidden, int64_t rows, int64_t dim,
                                                 int64_t hidden_dim, int64_t width,
                                                 const int32_t *units, int64_t count,
                                                 int32_t tanh_approx) {
  if (x && w1 && hidden && every_unit(units, count, width, hidden_dim))
    return htp__cpu_linear_gelu_bf16(env, x, w1, b1, hidden, rows, dim, hidden_dim, tanh_approx);
  carve c = {0};
  carve_count(&c, htp__size_mul(rows, dim));
  carve_count(&c, htp__size_mul(hidden_dim, dim));
  carve_count(&c, b1 ? hidden_dim : 0);
  carve_count(&c, htp__size_mul(rows, hidden_dim));
  float *owned, *room = htp__cpu_f32_room(env, c.total, &owned);
  if (!room) return HTP_KERNEL_ERR_NOMEM;
  c.next = room;
  float *xf = carve_take(&c, rows * dim), *wf = carve_take(&c, hidden_dim * dim);
  float *bf = b1 ? carve_take(&c, hidden_dim) : NULL, *hf = carve_take(&c, rows * hidden_dim);
  widen(x, xf, rows * dim);
  widen(w1, wf, hidden_dim * dim);
  widen(b1, bf, hidden_dim);
  widen(hidden, hf, rows * hidden_dim);
  htp_kernel_status status = f32_table()->mlp_hidden_units_f32(
      env, xf, wf, bf, hf, rows, dim, hidden_dim, width, units, count, tanh_approx);
  if (status == HTP_KERNEL_OK) narrow(hf, hidden, rows * hidden_dim);
  free(owned);
  return status;
}

htp_kernel_status htp__cpu_linear_units_bf16(const htp_kernel_env *env, const htp_bf16 *a,
                                             const htp_bf16 *w, htp_bf16 *y, int64_t rows,
                                             int64_t in_features, int64_t out_features,
                                             int64_t width, const int32_t *units, int64_t count,
                                             int32_t accumulate) {
  if (!accumulate && a && w && y && every_unit(units, count, width, in_features))
    return htp__cpu_linear_bf16(env, a, w, NULL, y, rows, in_features, out_features);
  carve c = {0};
  carve_count(&c, htp__size_mul(rows, in_features));
  carve_count(&c, htp__size_mul(out_features, in_features));
  carve_count(&c, htp__size_mul(rows, out_features));
  float *owned, *room = htp__cpu_f32_room(env, c.total, &owned);
  if (!room) return HTP_KERNEL_ERR_NOMEM;
  c.next = room;
  float *af = carve_take(&c, rows * in_features), *wf = carve_take(&c, out_features * in_features);
  float *yf = carve_take(&c, rows * out_features);
  widen(a, af, rows * in_features);
  widen(w, wf, out_features * in_features);
  if (accumulate) widen(y, yf, rows * out_features);
  htp_kernel_status status = f32_table()->linear_units_f32(
      env, af, wf, yf, rows, in_features, out_features, width, units, count, accumulate);
  if (status == HTP_KERNEL_OK) narrow(yf, y, rows * out_features);
  free(owned);
  return status;
}

/* ===== Same-device sums ================================================= */

struct sum_job {
  const void *const *x;
  int32_t parts;
  void *y;
};

HTP_VECTOR_CLONES
static void sum_f32_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct sum_job *job = ctx;
  const float *const *x = (const float *const *)job->x;
  float *y = job->y;
  for (int64_t i = begin; i < end; i++) {
    float s = x[0][i];
    for (int32_t p = 1; p < job->parts; p++) s += x[p][i];
    y[i] = s;
  }
}

HTP_VECTOR_CLONES
static void sum_bf16_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct sum_job *job = ctx;
  const htp_bf16 *const *x = (const htp_bf16 *const *)job->x;
  htp_bf16 *y = job->y;
  for (int64_t i = begin; i < end; i++) {
    float s = htp_bf16_to_f32(x[0][i]);
    for (int32_t p = 1; p < job->parts; p++) s += htp_bf16_to_f32(x[p][i]);
    y[i] = htp_bf16_from_f32(s);
  }
}

static htp_kernel_status sum(const htp_kernel_env *env, const void *const *x, int32_t parts,
                             void *y, int64_t n, htp__chunk_fn chunk) {
  if (!x || !y || parts < 1 || n < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cpu sum: %d parts of %lld elements (x or y NULL?)", (int)parts,
                           (long long)n);
  for (int32_t p = 0; p < parts; p++)
    if (!x[p])
      return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cpu sum: part %d is NULL", (int)p);
  struct sum_job job = {x, parts, y};
  if (n > 0) htp__parallel(n, HTP_GRAIN, chunk, &job);
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__cpu_sum_f32(const htp_kernel_env *env, const float *const *x,
                                   int32_t parts, float *y, int64_t n) {
  return sum(env, (const void *const *)x, parts, y, n, sum_f32_chunk);
}

htp_kernel_status htp__cpu_sum_bf16(const htp_kernel_env *env, const htp_bf16 *const *x,
                                    int32_t parts, htp_bf16 *y, int64_t n) {
  return sum(env, (const void *const *)x, parts, y, n, sum_bf16_chunk);
}
