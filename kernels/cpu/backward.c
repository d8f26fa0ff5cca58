/*===- kernels/cpu/backward.c - Backward kernels and the loss, f32 -------===*
 *
 * The adjoints of linear, layer norm, GELU and attention, and the mean
 * softmax cross-entropy with its gradient (the CPU table's training
 * entries, cpu/train.h). GEMMs go through htp__sgemm (those with a
 * weight, or giving one's gradient, through htp__linear_gemm: the matmul
 * precision), loops through htp__parallel. Every reduction (db, dgamma, dbeta, the loss) has an order
 * that depends only on the shapes, never on the thread count or on which
 * thread ran what, so a step's gradients are bitwise reproducible: column
 * sums are split by columns (each column summed over rows in order, in
 * double), the loss by a fixed number of row blocks summed in order, and a
 * row's sums (layer norm's) run over the vector lanes of the one clone this
 * machine picks (HTP_VECTOR_CLONES), whichever thread runs the row.
 *
 * The weight gradients dW += dYᵀ·X are one GEMM with A transposed, which
 * htp__linear_gemm splits by dW's rows or columns (dW is small, the sum runs over
 * the batch's rows), so no copy of dY is made.
 *===----------------------------------------------------------------------===*/
#include "kernels/cpu/train.h"

#include "kernels/cpu/cpu_internal.h"
#include "kernels/htp_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ----- Shared pieces ----------------------------------------------------- */

/* out[c] += Σ_r a[r, c] (row stride ld), each column in row order in double. */
struct colsum_job {
  const float *a;
  float *out;
  int64_t rows, ld;
};

enum { COLS_PER_CHUNK = 256 };

/* acc[c] += row[c] for c < width: independent columns, so vectorised
 * without reordering any sum. */
HTP_VECTOR_CLONES
static void add_row(double *acc, const float *row, int64_t width) {
  for (int64_t c = 0; c < width; ++c)
    acc[c] += row[c];
}

static void colsum_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct colsum_job *job = ctx;
  double acc[COLS_PER_CHUNK];
  for (int64_t c0 = begin; c0 < end; c0 += COLS_PER_CHUNK) {
    const int64_t width = end - c0 < COLS_PER_CHUNK ? end - c0 : COLS_PER_CHUNK;
    for (int64_t c = 0; c < width; ++c)
      acc[c] = 0.0;
    for (int64_t r = 0; r < job->rows; ++r)
      add_row(acc, job->a + r * job->ld + c0, width);
    for (int64_t c = 0; c < width; ++c)
      job->out[c0 + c] += (float)acc[c];
  }
}

static void colsum_acc(const float *a, int64_t rows, int64_t cols, int64_t ld, float *out) {
  struct colsum_job job = {a, out, rows, ld};
  htp__parallel(cols, COLS_PER_CHUNK, colsum_chunk, &job);
}

/* ----- Linear ------------------------------------------------------------ */

htp_kernel_status htp__cpu_linear_backward_f32(const htp_kernel_env *env, const float *x,
                                               const float *w, const float *dy, float *dx,
                                               float *dw, float *db, int64_t rows,
                                               int64_t in_features, int64_t out_features) {
  if (rows < 0 || in_features < 0 || out_features < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "linear backward: negative size");
  if (dx) {
    if (out_features == 0)
      memset(dx, 0, (size_t)(rows * in_features) * sizeof(float));
    else /* dx[rows, in] = dy[rows, out] · w[out, in] */
      htp__linear_gemm(CblasNoTrans, CblasNoTrans, rows, in_features, out_features, 1.0f, dy,
                       out_features, w, in_features, 0.0f, dx, in_features);
  }
  if (db)
    colsum_acc(dy, rows, out_features, out_features, db);
  if (dw && rows > 0 && out_features > 0 && in_features > 0) /* dw[out, in] += dyᵀ · x */
    htp__linear_gemm(CblasTrans, CblasNoTrans, out_features, in_features, rows, 1.0f, dy,
                     out_features, x, in_features, 1.0f, dw, in_features);
  return HTP_KERNEL_OK;
}

/* ----- Layer norm -------------------------------------------------------- */

/* Per row, with x̂ = (x - mean) rstd and g = dy γ:
 *   dx = rstd (g - mean(g) - x̂ mean(g x̂)),
 *   dγ += Σ_rows dy x̂, dβ += Σ_rows dy.
 * Rows first (statistics, in double as the forward, and dx), then dγ and dβ
 * by columns from the saved statistics. */
struct ln_job {
  const float *x, *gamma, *dy;
  float *dx, *dgamma, *dbeta;
  double *stats; /* [rows][2]: mean, rstd */
  int64_t rows, dim;
  float epsilon;
};

/* One row: its statistics to stats[0..1] and, when dx is wanted, dx. The
 * sums run in double over fixed lanes (omp simd: the order depends on the
 * vector width this machine's clone uses, never on threads). gamma NULL is
 * all ones. */
HTP_VECTOR_CLONES
static void ln_row(const float *x, const float *gamma, const float *dy, float *dx, double *stats,
                   int64_t dim, float epsilon) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < dim; ++i)
    sum += x[i];
  const double mean = sum / (double)dim;
  double squares = 0.0;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < dim; ++i)
    squares += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / sqrt(squares / (double)dim + (double)epsilon);
  stats[0] = mean;
  stats[1] = rstd;
  if (!dx)
    return;
  double g_sum = 0.0, gx_sum = 0.0;
  if (gamma) {
#pragma omp simd reduction(+ : g_sum, gx_sum)
    for (int64_t i = 0; i < dim; ++i) {
      const double g = (double)dy[i] * gamma[i];
      g_sum += g;
      gx_sum += g * (x[i] - mean);
    }
  } else {
#pragma omp simd reduction(+ : g_sum, gx_sum)
    for (int64_t i = 0; i < dim; ++i) {
      g_sum += dy[i];
      gx_sum += (double)dy[i] * (x[i] - mean);
    }
  }
  const double g_mean = g_sum / (double)dim, gx_mean = gx_sum * rstd / (double)dim;
  /* dx = rstd (g - g_mean - (x - mean) rstd gx_mean), in float from here:
   * its terms are each within f32 round-off of their double values. */
  const float a = (float)rstd, b = (float)(rstd * g_mean), c = (float)(rstd * rstd * gx_mean);
  if (gamma) {
    for (int64_t i = 0; i < dim; ++i)
      dx[i] = a * (dy[i] * gamma[i]) - b - ((float)((double)x[i] - mean)) * c;
  } else {
    for (int64_t i = 0; i < dim; ++i)
      dx[i] = a * dy[i] - b - ((float)((double)x[i] - mean)) * c;
  }
}

static void ln_rows(void *ctx, int64_t begin, int64_t end) {
  const struct ln_job *job = ctx;
  for (int64_t r = begin; r < end; ++r)
    ln_row(job->x + r * job->dim, job->gamma, job->dy + r * job->dim,
           job->dx ? job->dx + r * job->dim : NULL, job->stats + 2 * r, job->dim, job->epsilon);
}

/* acc_g[c] += dy[c] (x[c] - mean) rstd, acc_b[c] += dy[c] for c < width:
 * independent columns, vectorised without reordering any sum. */
HTP_VECTOR_CLONES
static void ln_col_row(double *acc_g, double *acc_b, const float *x, const float *dy,
                       double mean, double rstd, int64_t width) {
  for (int64_t c = 0; c < width; ++c) {
    acc_g[c] += dy[c] * ((x[c] - mean) * rstd);
    acc_b[c] += dy[c];
  }
}

static void ln_cols(void *ctx, int64_t begin, int64_t end) {
  const struct ln_job *job = ctx;
  double acc_g[COLS_PER_CHUNK], acc_b[COLS_PER_CHUNK];
  for (int64_t c0 = begin; c0 < end; c0 += COLS_PER_CHUNK) {
    const int64_t width = end - c0 < COLS_PER_CHUNK ? end - c0 : COLS_PER_CHUNK;
    for (int64_t c = 0; c < width; ++c)
      acc_g[c] = acc_b[c] = 0.0;
    for (int64_t r = 0; r < job->rows; ++r)
      ln_col_row(acc_g, acc_b, job->x + r * job->dim + c0, job->dy + r * job->dim + c0,
                 job->stats[2 * r], job->stats[2 * r + 1], width);
    for (int64_t c = 0; c < width; ++c) {
      if (job->dgamma)
        job->dgamma[c0 + c] += (float)acc_g[c];
      if (job->dbeta)
        job->dbeta[c0 + c] += (float)acc_b[c];
    }
  }
}

htp_kernel_status htp__cpu_layer_norm_backward_f32(const htp_kernel_env *env, const float *x,
                                                   const float *gamma, const float *dy,
                                                   float *dx, float *dgamma, float *dbeta,
                                                   int64_t rows, int64_t dim, float epsilon) {
  if (rows < 0 || dim < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "layer norm backward: negative size");
  if (rows == 0 || dim == 0 || (!dx && !dgamma && !dbeta))
    return HTP_KERNEL_OK;
  double *stats = malloc((size_t)rows * 2 * sizeof(double));
  if (!stats)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM,
                           "layer norm backward: no memory for %lld rows' statistics",
                           (long long)rows);
  struct ln_job job = {x, gamma, dy, dx, dgamma, dbeta, stats, rows, dim, epsilon};
  htp__parallel(rows, 1 + HTP_GRAIN / dim, ln_rows, &job);
  if (dgamma || dbeta)
    htp__parallel(dim, COLS_PER_CHUNK, ln_cols, &job);
  free(stats);
  return HTP_KERNEL_OK;
}

/* ----- GELU -------------------------------------------------------------- */

/* Exact: d/dx x Φ(x) = Φ(x) + x φ(x), Φ from the forward's erfc (full
 * relative precision on both sides), φ(x) = e^{-x²/2} / sqrt(2π). x φ(x)
 * takes x clamped (φ is 0 beyond), so the derivative is 1 at +inf and 0 at
 * -inf rather than inf * 0. */
HTP_VECTOR_CLONES
static void gelu_erf_grad(const float *x, const float *dy, float *dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], e = htp__erfc_gelu(v), near = htp__gelu_far_clamp(v);
    const float cdf = v >= 0.0f ? 1.0f - 0.5f * e : 0.5f * e;
    const float pdf = 0.3989422804014327f * htp__expf(-0.5f * near * near);
    dx[i] = dy[i] * (cdf + near * pdf);
  }
}

/* Tanh form: y = x (1 + t) / 2, t = tanh(u), u = k (x + c x³):
 * y' = (1 + t) / 2 + x (1 - t²) k (1 + 3 c x²) / 2, with e = e^{-2|u|}:
 * 1 + t as the forward, 1 - t² = 4 e / (1 + e)². The second term takes x
 * clamped (1 - t² is 0 beyond), so huge x gives no inf * 0. */
HTP_VECTOR_CLONES
static void gelu_tanh_grad(const float *x, const float *dy, float *dx, int64_t n) {
  const float k = 0.7978845608028654f, c = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], near = htp__gelu_far_clamp(v);
    const float u = k * (v + c * v * v * v);
    const float e = htp__expf(-2.0f * fabsf(u));
    const float inv = 1.0f / (1.0f + e);
    const float one_plus_tanh = u >= 0.0f ? 2.0f * inv : 2.0f * e * inv;
    const float sech2 = 4.0f * e * inv * inv;
    dx[i] = dy[i] * (0.5f * one_plus_tanh +
                     0.5f * near * sech2 * k * (1.0f + 3.0f * c * near * near));
  }
}

struct gelu_job {
  const float *x, *dy;
  float *dx;
  int32_t tanh_approx;
};

static void gelu_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct gelu_job *job = ctx;
  if (job->tanh_approx)
    gelu_tanh_grad(job->x + begin, job->dy + begin, job->dx + begin, end - begin);
  else
    gelu_erf_grad(job->x + begin, job->dy + begin, job->dx + begin, end - begin);
}

htp_kernel_status htp__cpu_gelu_backward_f32(const htp_kernel_env *env, const float *x,
                                             const float *dy, float *dx, int64_t n,
                                             int32_t tanh_approx) {
  if (n < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "gelu backward: negative size");
  if (!dx)
    return HTP_KERNEL_OK;
  struct gelu_job job = {x, dy, dx, tanh_approx};
  htp__parallel(n, HTP_GRAIN, gelu_chunk, &job);
  return HTP_KERNEL_OK;
}

/* ----- Attention --------------------------------------------------------- */

/* One (image, head) task: the forward recomputed (P = softmax(q kᵀ s),
 * context = P v) and, when dqkv is wanted, its adjoint:
 *   dP = dctx vᵀ; dS = P ∘ (dP - rowsum(P ∘ dP)) s;
 *   dv = Pᵀ dctx; dq = dS k; dk = dSᵀ q.
 * Tasks write disjoint columns of context and dqkv. */
struct attn_job {
  const float *qkv, *dctx;
  float *ctx, *dqkv, *slots;
  int64_t tasks, slot_count, tokens, num_heads, head_dim, inner;
  float scale;
  int backward;
  int small; /* a head's products by htp__small_product (AVX-512, small heads) */
};

/* d = p ∘ (d - Σ p ∘ d) scale for one row; the sum in double over the
 * lanes of this machine's clone (a fixed order). */
HTP_VECTOR_CLONES
static void softmax_grad_row(const float *p, float *d, int64_t n, float scale) {
  double dot = 0.0;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j)
    dot += (double)p[j] * d[j];
  const float shift = (float)dot;
  for (int64_t j = 0; j < n; ++j)
    d[j] = p[j] * (d[j] - shift) * scale;
}

#if HTP_AVX512_KERNELS
/* attn_task's products for a small head: the forward's (attention.c), then
 * vᵀ copied (the products read B by rows) and the four adjoint products. */
static void small_head_task(const struct attn_job *job, const float *q, const float *k,
                            const float *v, float *ctx, const float *dctx, float *dq, float *dk,
                            float *dv, float *p, float *d) {
  const int64_t t = job->tokens, hd = job->head_dim, inner = job->inner, stride = 3 * inner;
  htp__small_head_forward(q, k, v, stride, ctx, inner, t, hd, job->scale, p);
  if (!job->backward)
    return;
  /* [hd, t]; the thread's own (a stack array here reads to GCC as maybe
   * uninitialised through the masked loads). */
  static _Thread_local float vt[HTP_SMALL_HEAD * HTP_SMALL_HEAD];
  for (int64_t j = 0; j < t; ++j)
    for (int64_t c = 0; c < hd; ++c)
      vt[c * t + j] = v[j * stride + c];
  htp__small_product(t, t, hd, 1.0f, dctx, inner, 1, vt, t, d, t); /* dP = dctx vᵀ */
  for (int64_t i = 0; i < t; ++i)
    softmax_grad_row(p + i * t, d + i * t, t, job->scale);
  htp__small_product(t, hd, t, 1.0f, p, 1, t, dctx, inner, dv, stride); /* dv = Pᵀ dctx */
  htp__small_product(t, hd, t, 1.0f, d, t, 1, k, stride, dq, stride);   /* dq = dS k */
  htp__small_product(t, hd, t, 1.0f, d, 1, t, q, stride, dk, stride);   /* dk = dSᵀ q */
}
#endif

static void attn_task(const struct attn_job *job, int64_t task, float *p, float *d) {
  const int64_t tokens = job->tokens, hd = job->head_dim, inner = job->inner;
  const int64_t stride = 3 * inner;
  const int64_t b = task / job->num_heads, h = task % job->num_heads;
  const int64_t qoff = b * tokens * stride + h * hd, coff = b * tokens * inner + h * hd;
  const float *q = job->qkv + qoff, *k = q + inner, *v = q + 2 * inner;
#if HTP_AVX512_KERNELS
  if (job->small) {
    small_head_task(job, q, k, v, job->ctx + coff, job->dctx + coff,
                    job->dqkv + qoff, job->dqkv + qoff + inner, job->dqkv + qoff + 2 * inner,
                    p, d);
    return;
  }
#endif

  htp__sgemm(CblasNoTrans, CblasTrans, tokens, tokens, hd, job->scale, q, stride, k, stride, 0.0f,
             p, tokens);
  htp__softmax_rows(p, tokens, tokens);
  htp__sgemm(CblasNoTrans, CblasNoTrans, tokens, hd, tokens, 1.0f, p, tokens, v, stride, 0.0f,
             job->ctx + coff, inner);
  if (!job->backward)
    return;
  const float *dctx = job->dctx + coff;
  float *dq = job->dqkv + qoff, *dk = dq + inner, *dv = dq + 2 * inner;
  htp__sgemm(CblasNoTrans, CblasTrans, tokens, tokens, hd, 1.0f, dctx, inner, v, stride, 0.0f, d,
             tokens);
  for (int64_t i = 0; i < tokens; ++i)
    softmax_grad_row(p + i * tokens, d + i * tokens, tokens, job->scale);
  htp__sgemm(CblasTrans, CblasNoTrans, tokens, hd, tokens, 1.0f, p, tokens, dctx, inner, 0.0f, dv,
             stride);
  htp__sgemm(CblasNoTrans, CblasNoTrans, tokens, hd, tokens, 1.0f, d, tokens, k, stride, 0.0f, dq,
             stride);
  htp__sgemm(CblasTrans, CblasNoTrans, tokens, hd, tokens, 1.0f, d, tokens, q, stride, 0.0f, dk,
             stride);
}

/* Slot s runs tasks s, s + slots, ... with its own two square buffers. */
static void attn_slots(void *ctx, int64_t begin, int64_t end) {
  const struct attn_job *job = ctx;
  const int64_t square = job->tokens * job->tokens;
  for (int64_t s = begin; s < end; ++s) {
    float *p = job->slots + s * 2 * square, *d = p + square;
    for (int64_t task = s; task < job->tasks; task += job->slot_count)
      attn_task(job, task, p, d);
  }
}

htp_kernel_status htp__cpu_attention_backward_f32(
    const htp_kernel_env *env, const float *x, const float *wqkv, const float *bqkv,
    const float *wproj, const float *bproj, const float *dy, float *dx, float *dwqkv,
    float *dbqkv, float *dwproj, float *dbproj, float *scratch, int64_t scratch_floats,
    int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  (void)bproj; /* y's value does not enter its adjoint */
  const int64_t needed =
      htp_cpu_attention_backward_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  if (needed < 0 || !scratch || scratch_floats < needed)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cpu attention backward: scratch holds %lld floats, the kernel "
                           "needs %lld",
                           (long long)(scratch ? scratch_floats : 0), (long long)needed);
  const int64_t rows = batch * tokens, inner = num_heads * head_dim, wide = 3 * inner;
  const int64_t tasks = batch * num_heads;
  if (rows == 0 || model_dim == 0)
    return HTP_KERNEL_OK; /* nothing flows (dx has no elements, or only zeros below) */
  const int want_dqkv = dx || dwqkv || dbqkv;
  float *qkv = scratch;
  float *ctx = qkv + rows * wide;
  float *dctx = ctx + rows * inner;
  float *dqkv = scratch + htp_cpu_attention_backward_dqkv_at(rows, inner); /* after dctx */
  float *slots = dqkv + rows * wide;

  if (inner == 0 || tokens == 0) {
    if (dx)
      memset(dx, 0, (size_t)(rows * model_dim) * sizeof(float));
    if (dbproj)
      colsum_acc(dy, rows, model_dim, model_dim, dbproj);
    return HTP_KERNEL_OK;
  }
  htp_cpu_linear_f32(x, wqkv, bqkv, qkv, rows, model_dim, wide);
  if (want_dqkv) /* dctx[rows, inner] = dy[rows, model] · wproj[model, inner] */
    htp__linear_gemm(CblasNoTrans, CblasNoTrans, rows, inner, model_dim, 1.0f, dy, model_dim, wproj,
                     inner, 0.0f, dctx, inner);
  struct attn_job job = {qkv, dctx, ctx, dqkv, slots, tasks,
                         tasks < HTP_ATTN_BWD_SLOTS ? tasks : HTP_ATTN_BWD_SLOTS, tokens,
                         num_heads, head_dim, inner, 1.0f / sqrtf((float)head_dim), want_dqkv,
                         0};
  job.small = htp__small_heads(tokens, head_dim);
  htp__parallel(job.slot_count, 1, attn_slots, &job);

  if (dbproj)
    colsum_acc(dy, rows, model_dim, model_dim, dbproj);
  if (dwproj) /* dwproj[model, inner] += dyᵀ · ctx */
    htp__linear_gemm(CblasTrans, CblasNoTrans, model_dim, inner, rows, 1.0f, dy, model_dim, ctx,
                     inner, 1.0f, dwproj, inner);
  if (dbqkv)
    colsum_acc(dqkv, rows, wide, wide, dbqkv);
  if (dwqkv) /* dwqkv[3 inner, model] += dqkvᵀ · x */
    htp__linear_gemm(CblasTrans, CblasNoTrans, wide, model_dim, rows, 1.0f, dqkv, wide, x,
                     model_dim, 1.0f, dwqkv, model_dim);
  if (dx) /* dx[rows, model] = dqkv · wqkv[3 inner, model] */
    htp__linear_gemm(CblasNoTrans, CblasNoTrans, rows, model_dim, wide, 1.0f, dqkv, wide, wqkv,
                     model_dim, 0.0f, dx, model_dim);
  return HTP_KERNEL_OK;
}

/* ----- Softmax cross-entropy --------------------------------------------- */

/* Row r with targets t: lse = max + log Σ e^{l - max}, T = Σ_k t_k;
 * loss_r = Σ_k t_k (lse - l_k) = T lse - Σ_k t_k l_k;
 * dlogits = (softmax T - t) / rows (softmax - t when the row sums to 1).
 * The loss sums in LOSS_BLOCKS blocks of consecutive rows fixed by `rows`
 * alone, then over the blocks in order, so it does not depend on the
 * thread count. */
enum { LOSS_BLOCKS = 64 };

struct ce_job {
  const float *logits, *targets;
  float *dlogits;
  int64_t rows, classes, block;
  double partial[LOSS_BLOCKS];
};

HTP_VECTOR_CLONES
static double ce_row(const float *l, const float *t, float *d, int64_t classes,
                     float inv_rows) {
  float max = l[0];
  for (int64_t c = 1; c < classes; ++c)
    max = l[c] > max ? l[c] : max;
  double sum = 0.0, t_sum = 0.0, tl_sum = 0.0;
  for (int64_t c = 0; c < classes; ++c) {
    sum += htp__expf(l[c] - max);
    t_sum += t[c];
    /* T lse - Σ t l = T log Σ - Σ t (l - max): no cancellation of two large
     * terms when the logits are large. A class with target 0 takes no part
     * (0 log 0 = 0), so a -inf logit there is not 0 * -inf = NaN. */
    tl_sum += t[c] != 0.0f ? (double)t[c] * ((double)l[c] - (double)max) : 0.0;
  }
  if (d) {
    const float scale = (float)(t_sum / sum) * inv_rows;
    for (int64_t c = 0; c < classes; ++c)
      d[c] = htp__expf(l[c] - max) * scale - t[c] * inv_rows;
  }
  return t_sum * log(sum) - tl_sum;
}

static void ce_blocks(void *ctx, int64_t begin, int64_t end) {
  struct ce_job *job = ctx;
  const float inv_rows = (float)(1.0 / (double)job->rows);
  /* [begin, end) is one block from a worker, or all of them run serially. */
  for (int64_t r0 = begin; r0 < end; r0 += job->block) {
    const int64_t r1 = r0 + job->block < end ? r0 + job->block : end;
    double sum = 0.0;
    for (int64_t r = r0; r < r1; ++r)
      sum += ce_row(job->logits + r * job->classes, job->targets + r * job->classes,
                    job->dlogits ? job->dlogits + r * job->classes : NULL, job->classes,
                    inv_rows);
    job->partial[r0 / job->block] = sum;
  }
}

htp_kernel_status htp__cpu_softmax_cross_entropy_f32(const htp_kernel_env *env,
                                                     const float *logits, const float *targets,
                                                     float *loss, float *dlogits, int64_t rows,
                                                     int64_t classes) {
  if (rows < 1 || classes < 1 || rows > INT64_MAX / classes)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "softmax cross-entropy: needs rows >= 1 and classes >= 1 (and their "
                           "product to fit), got %lld rows, %lld classes",
                           (long long)rows, (long long)classes);
  if (!logits || !targets)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "softmax cross-entropy: logits or targets is NULL");
  if (!loss && !dlogits)
    return HTP_KERNEL_OK;
  struct ce_job job = {logits, targets, dlogits, rows, classes,
                       (rows + LOSS_BLOCKS - 1) / LOSS_BLOCKS, {0}};
  htp__parallel(rows, job.block, ce_blocks, &job);
  double total = 0.0;
  for (int i = 0; i < LOSS_BLOCKS; ++i)
    total += job.partial[i];
  if (loss)
    *loss = (float)(total / (double)rows);
  return HTP_KERNEL_OK;
}
