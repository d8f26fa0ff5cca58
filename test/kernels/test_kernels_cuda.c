/*===- test/kernels/test_kernels_cuda.c - CUDA kernels against float64 ----===*
 *
 * The forward kernels of the CUDA table (linear, layer norm, GELU, add,
 * bias add, attention, and the unit kernels of the balance hooks:
 * attention_heads, mlp_hidden_units, linear_units), f32 and bf16, against
 * references computed here in double from the values the kernel read, at
 * five shapes:
 *   small   batch 3, 197 tokens, dim 120, 5 heads of 24, MLP 333 (odd
 *           sizes: the edges of every tiling);
 *   ViT-B/16 batch 2, 197 tokens, dim 768, 12 heads of 64, MLP 3072;
 *   ViT-L/16 batch 2, 197 tokens, dim 1024, 16 heads of 64, MLP 4096;
 *   aligned batch 2, 256 tokens, dim 768, 12 heads of 64, MLP 3072 (every
 *           GEMM dimension a multiple of 64, rows 512: the shapes cuBLAS's
 *           tiled kernels, tensor-core ones for bf16, take without edges);
 *   odd     batch 2, 197 tokens, dim 99, 9 heads of 11, MLP 333 (no size a
 *           multiple of 4: the paths that move one element a load, and the
 *           fused bf16 attention's plain copies where cp.async cannot go).
 *
 * What makes a wrong kernel fail:
 * - Every output (and the attention's scratch) is filled with NaN (0xFF
 *   bytes) before its kernel runs, and NaN is never accepted, so an element
 *   the kernel skipped cannot pass by holding an earlier test's value or a
 *   zero. Where a unit kernel must leave columns alone (unlisted heads and
 *   units), those must still hold the poison, bit for bit.
 * - Each element is checked on its own, |got - ref| <= tol_i, with tol_i
 *   derived for that element (cuda_test.h check_close), never relative to
 *   the largest element. A GEMM output of K terms t (bias or an old y
 *   included) errs by G = 4 sqrt(K) u ||t||_2 for f32 (FMAs rounding to
 *   nearest on terms of random sign, as all the data here: cuda_test.h
 *   random_sum_error) and by G = 16 sqrt(K) u ||t||_1 for bf16 on tensor
 *   cores (cuda_test.h sum_error, which holds for any signs and for
 *   truncating accumulation); each is about 7 standard deviations of the
 *   rounding errors. u = 2^-24, out = the output type's unit roundoff (u
 *   for f32; 2^-8 + u for bf16, an f32 result rounded again). Per op:
 *     linear, linear_units: G + out |y| (the runs of units accumulating in
 *       y are one sum of K terms in some order);
 *     layer norm: (s(dim) + 16u) (inv |γ_i| (mean_j |x_j| + |x_i - μ|) +
 *       |β_i|) + out |y_i|, s(n) = 4 sqrt(n) u (sum_error: the mean's terms
 *       share the row's offset, so their sign does not vary) (the mean errs
 *       by s Σ|x|/dim, shared by the row; the variance, rsqrtf and the
 *       affine step are relative to the centred value);
 *     GELU: 8u |x| (1 + |tanh's argument|) + out |y| (erff, tanhf: 2 ulps);
 *       the MLP units add 1.15 (the largest slope of GELU) times the
 *       pre-activation's G + 2u |pre|;
 *     add, bias add: out |y| (one IEEE addition);
 *     attention: to first order, stage by stage, each error source
 *       bounded at the same ~7 standard deviations, independent sources
 *       (k's, q's and v's GEMM outputs, each token's exp, each head) in
 *       quadrature, shared ones (the scores of a head, for its context
 *       columns) added: q, k, v err by their G; a score by scale
 *       (sqrt(Σ_d (q_d Gk_d)^2) + G of its head_dim terms) + 8u|s| from k,
 *       its own f32 sum and scaling, and through q by scale Σ_d Gq_d k_d; a
 *       relative error ρ_j of p_j (exp: 4 (4 + 3.4|s_j - max|) u, __expf
 *       being 2 + 1.2|x| ulps) moves the context by Σ_j p_j ρ_j (v_j - c);
 *       plus Σ_j p_j Gv_j in quadrature, the G of p·v and (s(tokens) + 3u)
 *       |c| for the normalisation; the output by the heads' Σ|wproj|
 *       ctx_err in quadrature, a bf16 context's rounding (4·2^-8 |c| each,
 *       in quadrature), its own G and out |y| (reference_attention).
 *   bf16 inputs are bf16 values, so the reference reads exactly what the
 *   kernel read; bf16 tolerances are then dominated by the output's one
 *   rounding, 2^-8 (3.9e-3) relative.
 * - The references of the large shapes run on a sample of rows (about 24
 *   rows including each image's first and last token, or 12 query rows of
 *   attention over each image's full keys and values) where all rows would
 *   cost more than ~6e7 multiply-adds; every element of every output is
 *   still checked for being written (no NaN left). The small shape's
 *   references cover every row.
 *
 * The same cases run first on the checked device (kernels/checked: the
 * CPU's kernels behind a GPU's memory and stream contracts), before the
 * GPU probe, so the references, the tolerances and the poisoning are
 * exercised where there is no GPU and must accept an implementation that
 * is right: the small and odd shapes always, every shape with
 * HTP_TEST_CHECKED_SHAPES=all. cuda_test.h's negative control shows the
 * checker rejects results that are wrong by one element; the mutants show
 * the cases reject kernels that are wrong in plausible ways (a GEMM that
 * drops one of its K terms, TF32 inputs, a layer norm's epsilon ten times
 * too large, GELU's forms swapped, a unit kernel that writes one head too
 * many or ignores accumulate): the CPU table with one entry so broken at a
 * time must fail the case that covers it (small shape; ViT-B/16 too with
 * HTP_TEST_CHECKED_SHAPES=all).
 *
 * CUDA only: the direct API's refusals, the same-device reduction, unit
 * packing and imputation (reference loops written from runtime/unit_weights.c
 * pack_in_units and runtime/unit_table.c htp_impute_fill), SM partitions
 * (green contexts, kernels/cuda/green.c) and a caller's stream. The
 * partition test also checks where the work ran: a probe kernel
 * (kernels/cuda/probe.cu) records each block's SM id (%smid); a partition
 * of N SMs must show at most N distinct ids, two partitions disjoint sets,
 * and the whole device more than N (so the probe can tell).
 *
 * Exits 77 (ctest: skipped) where no GPU is present, as on the build
 * machines, after the checks that need none; 1 instead when one of those
 * failed or HTP_REQUIRE_GPU=1 (cuda_test.h no_device_exit). Any CUDA error
 * once a device was found is a failure. Never run on a GPU where it was
 * written: compiled, and the checked-device half run.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "kernels/cuda/kernels_internal.h" /* the SM-count check, the partition */
#include "kernels/htp_kernel_table.h"
#include "kernels/sm_partition.h"
#include "kernels/htp_kernels.h"
#include "kernels/htp_kernels_cuda.h"
#include "test/kernels/cuda_test.h"

#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures = 0;

/* kernels/cuda/probe.cu, linked into this test only. */
int htp_cuda_probe_sm_ids(void *stream, int blocks, unsigned *ids, char *err, size_t err_size);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The entries of either type; a NULL entry fails as unsupported. */
static htp_kernel_status run_linear(device *d, dtype t, const void *x, const void *w,
                                    const void *b, void *y, int64_t rows, int64_t in,
                                    int64_t out) {
  return t == F32 ? d->k->linear_f32(&d->env, x, w, b, y, rows, in, out)
                  : d->k->linear_bf16(&d->env, x, w, b, y, rows, in, out);
}
static htp_kernel_status run_layer_norm(device *d, dtype t, const void *x, const void *gamma,
                                        const void *beta, void *y, int64_t rows, int64_t dim,
                                        float epsilon) {
  return t == F32 ? d->k->layer_norm_f32(&d->env, x, gamma, beta, y, rows, dim, epsilon)
                  : d->k->layer_norm_bf16(&d->env, x, gamma, beta, y, rows, dim, epsilon);
}
static htp_kernel_status run_gelu(device *d, dtype t, const void *x, void *y, int64_t n,
                                  int32_t tanh_approx) {
  return t == F32 ? d->k->gelu_f32(&d->env, x, y, n, tanh_approx)
                  : d->k->gelu_bf16(&d->env, x, y, n, tanh_approx);
}
static htp_kernel_status run_add(device *d, dtype t, const void *a, const void *b, void *y,
                                 int64_t n) {
  return t == F32 ? d->k->add_f32(&d->env, a, b, y, n) : d->k->add_bf16(&d->env, a, b, y, n);
}
static htp_kernel_status run_bias_add(device *d, dtype t, const void *x, const void *bias,
                                      void *y, int64_t rows, int64_t cols) {
  return t == F32 ? d->k->bias_add_f32(&d->env, x, bias, y, rows, cols)
                  : d->k->bias_add_bf16(&d->env, x, bias, y, rows, cols);
}
/* The table may have none (the runtime then runs bias_add, then add). */
static int has_bias_add_residual(const device *d, dtype t) {
  return t == F32 ? d->k->bias_add_residual_f32 != NULL : d->k->bias_add_residual_bf16 != NULL;
}
static htp_kernel_status run_bias_add_residual(device *d, dtype t, const void *x,
                                               const void *bias, const void *r, void *y,
                                               int64_t rows, int64_t cols) {
  return t == F32 ? d->k->bias_add_residual_f32(&d->env, x, bias, r, y, rows, cols)
                  : d->k->bias_add_residual_bf16(&d->env, x, bias, r, y, rows, cols);
}
static htp_kernel_status run_attention(device *d, dtype t, const void *x, const void *wqkv,
                                       const void *bqkv, const void *wproj, const void *bproj,
                                       void *y, float *scratch, int64_t scratch_floats,
                                       int64_t batch, int64_t tokens, int64_t dim,
                                       int64_t heads, int64_t head_dim) {
  return t == F32 ? d->k->attention_f32(&d->env, x, wqkv, bqkv, wproj, bproj, y, scratch,
                                        scratch_floats, batch, tokens, dim, heads, head_dim)
                  : d->k->attention_bf16(&d->env, x, wqkv, bqkv, wproj, bproj, y, scratch,
                                         scratch_floats, batch, tokens, dim, heads, head_dim);
}
static htp_kernel_status run_attention_heads(device *d, dtype t, const void *x, const void *wqkv,
                                             const void *bqkv, void *context, float *scratch,
                                             int64_t batch, int64_t tokens, int64_t dim,
                                             int64_t heads, int64_t head_dim,
                                             const int32_t *list, int64_t count) {
  return t == F32 ? d->k->attention_heads_f32(&d->env, x, wqkv, bqkv, context, scratch, batch,
                                              tokens, dim, heads, head_dim, list, count)
                  : d->k->attention_heads_bf16(&d->env, x, wqkv, bqkv, context, scratch, batch,
                                               tokens, dim, heads, head_dim, list, count);
}
static htp_kernel_status run_mlp_units(device *d, dtype t, const void *x, const void *w1,
                                       const void *b1, void *hidden, int64_t rows, int64_t dim,
                                       int64_t hidden_dim, int64_t width, const int32_t *list,
                                       int64_t count, int32_t tanh_approx) {
  return t == F32 ? d->k->mlp_hidden_units_f32(&d->env, x, w1, b1, hidden, rows, dim,
                                               hidden_dim, width, list, count, tanh_approx)
                  : d->k->mlp_hidden_units_bf16(&d->env, x, w1, b1, hidden, rows, dim,
                                                hidden_dim, width, list, count, tanh_approx);
}
/* The table's fused linear + GELU, or NULL's status (unsupported) where
 * the device has none (the runtime then runs linear and GELU). */
static htp_kernel_status run_linear_gelu(device *d, dtype t, const void *x, const void *w,
                                         const void *b, void *y, int64_t rows, int64_t in,
                                         int64_t out, int32_t tanh_approx) {
  if (t == F32 ? !d->k->linear_gelu_f32 : !d->k->linear_gelu_bf16)
    return HTP_KERNEL_ERR_UNSUPPORTED;
  return t == F32 ? d->k->linear_gelu_f32(&d->env, x, w, b, y, rows, in, out, tanh_approx)
                  : d->k->linear_gelu_bf16(&d->env, x, w, b, y, rows, in, out, tanh_approx);
}
/* The fused residual entries, or unsupported where the table has none
 * (the runtime then runs the op, then the add). */
static htp_kernel_status run_linear_residual(device *d, dtype t, const void *x, const void *w,
                                             const void *b, const void *r, void *y,
                                             int64_t rows, int64_t in, int64_t out) {
  if (t == F32 ? !d->k->linear_residual_f32 : !d->k->linear_residual_bf16)
    return HTP_KERNEL_ERR_UNSUPPORTED;
  return t == F32 ? d->k->linear_residual_f32(&d->env, x, w, b, r, y, rows, in, out)
                  : d->k->linear_residual_bf16(&d->env, x, w, b, r, y, rows, in, out);
}
static htp_kernel_status run_attention_residual(device *d, dtype t, const void *x,
                                                const void *wqkv, const void *bqkv,
                                                const void *wproj, const void *bproj,
                                                const void *r, void *y, float *scratch,
                                                int64_t scratch_floats, int64_t batch,
                                                int64_t tokens, int64_t dim, int64_t heads,
                                                int64_t head_dim) {
  if (t == F32 ? !d->k->attention_residual_f32 : !d->k->attention_residual_bf16)
    return HTP_KERNEL_ERR_UNSUPPORTED;
  return t == F32 ? d->k->attention_residual_f32(&d->env, x, wqkv, bqkv, wproj, bproj, r, y,
                                                 scratch, scratch_floats, batch, tokens, dim,
                                                 heads, head_dim)
                  : d->k->attention_residual_bf16(&d->env, x, wqkv, bqkv, wproj, bproj, r, y,
                                                  scratch, scratch_floats, batch, tokens, dim,
                                                  heads, head_dim);
}
static htp_kernel_status run_linear_units(device *d, dtype t, const void *a, const void *w,
                                          void *y, int64_t rows, int64_t in, int64_t out,
                                          int64_t width, const int32_t *list, int64_t count,
                                          int32_t accumulate) {
  return t == F32 ? d->k->linear_units_f32(&d->env, a, w, y, rows, in, out, width, list, count,
                                           accumulate)
                  : d->k->linear_units_bf16(&d->env, a, w, y, rows, in, out, width, list,
                                            count, accumulate);
}

/* ----- Shapes, precisions, row samples ------------------------------------ */

typedef struct shape {
  const char *name;
  int64_t batch, tokens, dim, heads, head_dim, mlp, unit_width;
} shape;

static const shape SMALL = {"small", 3, 197, 120, 5, 24, 333, 37};
static const shape SHAPES[] = {
    {"small", 3, 197, 120, 5, 24, 333, 37},
    {"ViT-B/16", 2, 197, 768, 12, 64, 3072, 192},
    {"ViT-L/16", 2, 197, 1024, 16, 64, 4096, 256},
    {"aligned", 2, 256, 768, 12, 64, 3072, 192},
    {"odd", 2, 197, 99, 9, 11, 333, 37},
};

typedef struct precision {
  const char *name;
  int tensor_cores;     /* the type's GEMMs: bf16 on tensor cores, else f32 FMAs */
  double out;           /* the output type's unit roundoff */
  double context_round; /* attention: the context's rounding before the projection */
  /* attention (not its listed-heads unit kernel): the rounding of q, k, v
   * and p to the tensor cores' operands, as the CUDA bf16 twin's fused
   * kernel does (PyTorch's bf16 flash attention too); 0 for f32 operands.
   * The CPU twin's oneDNN attention rounds them likewise; its widening
   * path (f32 throughout) passes the bound as well. */
  double attention_operands;
} precision;

static const precision PRECISION_F32 = {"f32", 0, UNIT_F32, 0.0, 0.0};
/* bf16 outputs: the f32 result's rounding, then bf16's (double rounding). */
static const precision PRECISION_BF16 = {"bf16", 1, UNIT_BF16 + UNIT_F32, UNIT_BF16, UNIT_BF16};

/* The accumulation error of one of the type's GEMM outputs, its `terms`
 * terms (bias included) having L1 norm l1 and squares summing to squares. */
static double gemm_error(const precision *p, int64_t terms, double l1, double squares) {
  return p->tensor_cores ? sum_error(16.0, terms) * l1 : random_sum_error(terms, squares);
}

/* Multiply-adds a reference may take before it samples rows (~0.1 s). */
#define REFERENCE_BUDGET 6e7

static int compare_rows(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The rows a reference covers: every row when that costs at most
 * REFERENCE_BUDGET at per_row each, else about `sample` rows including the
 * first and last rows, each image's first and last token, the middle, and
 * rows spread in between at an odd offset. Sorted, distinct; malloc'ed. */
static int64_t *sample_rows(int64_t total, int64_t tokens, double per_row, int64_t sample,
                            int64_t *count) {
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)(total > sample + 8 ? total : sample + 8));
  if (!rows) exit(1);
  int64_t n = 0;
  if (per_row * (double)total <= REFERENCE_BUDGET) {
    for (int64_t r = 0; r < total; ++r) rows[n++] = r;
    *count = n;
    return rows;
  }
  const int64_t fixed[] = {0, 1, tokens - 1, tokens, total / 2, total - 2, total - 1};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; ++i)
    if (fixed[i] >= 0 && fixed[i] < total) rows[n++] = fixed[i];
  for (int64_t i = 0; n < sample + 7 && i < sample; ++i) rows[n++] = (i * total) / sample + 3;
  for (int64_t i = 0; i < n; ++i)
    if (rows[i] >= total) rows[i] = total - 1;
  qsort(rows, (size_t)n, sizeof *rows, compare_rows);
  int64_t distinct = 0;
  for (int64_t i = 0; i < n; ++i)
    if (distinct == 0 || rows[distinct - 1] != rows[i]) rows[distinct++] = rows[i];
  *count = distinct;
  return rows;
}

/* ----- Float64 references with their element-wise bounds ------------------ */

/* y = b + x·wᵀ on the listed rows (ref, tol: [count, out]); b may be NULL. */
static void reference_linear(const float *x, const float *w, const float *b, const int64_t *rows,
                             int64_t count, int64_t in, int64_t out, const precision *p,
                             double *ref, double *tol) {
  for (int64_t r = 0; r < count; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double l1, squares;
      const double bias = b ? b[o] : 0.0;
      const double y = bias + dot(x + rows[r] * in, w + o * in, in, &l1, &squares);
      ref[r * out + o] = y;
      tol[r * out + o] =
          gemm_error(p, in + 1, l1 + fabs(bias), squares + bias * bias) + p->out * fabs(y);
    }
}

/* Layer norm (population variance, as PyTorch) on the listed rows. */
static void reference_layer_norm(const float *x, const float *gamma, const float *beta,
                                 const int64_t *rows, int64_t count, int64_t dim, double epsilon,
                                 const precision *p, double *ref, double *tol) {
  const double e = sum_error(4.0, dim) + 16.0 * UNIT_F32;
  for (int64_t r = 0; r < count; ++r) {
    const float *row = x + rows[r] * dim;
    double sum = 0.0, absolute = 0.0, squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += row[i], absolute += fabs(row[i]);
    const double mean = sum / (double)dim, mean_abs = absolute / (double)dim;
    for (int64_t i = 0; i < dim; ++i) squares += (row[i] - mean) * (row[i] - mean);
    const double inv = 1.0 / sqrt(squares / (double)dim + epsilon);
    for (int64_t i = 0; i < dim; ++i) {
      const double centred = row[i] - mean, y = centred * inv * gamma[i] + beta[i];
      ref[r * dim + i] = y;
      tol[r * dim + i] = e * (inv * fabs(gamma[i]) * (mean_abs + fabs(centred)) + fabs(beta[i])) +
                         p->out * fabs(y);
    }
  }
}

/* GELU in double; *argument: tanh's argument (0 for the exact form). */
static double gelu_reference(double v, int tanh_approx, double *argument) {
  if (tanh_approx) {
    *argument = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    return 0.5 * v * (1.0 + tanh(*argument));
  }
  *argument = 0.0;
  return 0.5 * v * (1.0 + erf(v * 0.7071067811865476));
}

static double gelu_own_error(double v, double argument) {
  return 8.0 * UNIT_F32 * fabs(v) * (1.0 + fabs(argument));
}

/* Attention in double for the listed query rows (global rows, sorted):
 * ctx [count, inner] with ctx_err, the bound of the f32 context before any
 * rounding to an output type; with wproj, y [count, dim] and its tol.
 * operands > 0: q, k, v and p are rounded to that unit before their
 * products, which accumulate on tensor cores (each rounding a further
 * error of operands times the value, x4 where it enters in quadrature). The
 * bounds are those of the file's header: each source's error is a bound
 * of the sum_error kind (about 7 standard deviations of its rounding
 * errors), and sources that are independent (different GEMM outputs,
 * different tokens, different heads) add in quadrature. Where the terms in
 * quadrature are single roundings bounded by their worst case (at most
 * sqrt(3) standard deviations each), they are taken 4 times, so that their
 * sum is bounded at about 7 standard deviations too. */
static void reference_attention(const float *x, const float *wqkv, const float *bqkv,
                                const float *wproj, const float *bproj, const shape *s,
                                const int64_t *rows, int64_t count, const precision *p,
                                double operands, double *ctx, double *ctx_err, double *y,
                                double *y_tol) {
  const int64_t T = s->tokens, D = s->dim, H = s->heads, hd = s->head_dim, I = H * hd;
  /* the softmax's denominator: T terms of one sign */
  const double e_sum = sum_error(4.0, T), scale = 1.0 / sqrt((double)hd), u = UNIT_F32;
  /* keys, values and their error bounds, [T, I] */
  double *k = doubles(T * I), *v = doubles(T * I), *ek = doubles(T * I), *ev = doubles(T * I);
  double *q = doubles(I), *eq = doubles(I), *score = doubles(T), *own = doubles(T);
  double *prob = doubles(T), *exp_err = doubles(T), *spread = doubles(T * hd);
  double *g = doubles(hd * hd);
  int64_t image = -1;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t row = rows[r], b = row / T;
    if (b != image) { /* keys and values of every token of the image */
      image = b;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < I; ++i) {
          double l1, squares;
          const float *xt = x + (b * T + t) * D;
          const double bk = bqkv ? bqkv[I + i] : 0.0, bv = bqkv ? bqkv[2 * I + i] : 0.0;
          k[t * I + i] = bk + dot(xt, wqkv + (I + i) * D, D, &l1, &squares);
          ek[t * I + i] = gemm_error(p, D + 1, l1 + fabs(bk), squares + bk * bk) +
                          4.0 * operands * fabs(k[t * I + i]);
          v[t * I + i] = bv + dot(xt, wqkv + (2 * I + i) * D, D, &l1, &squares);
          ev[t * I + i] = gemm_error(p, D + 1, l1 + fabs(bv), squares + bv * bv) +
                          4.0 * operands * fabs(v[t * I + i]);
        }
    }
    for (int64_t i = 0; i < I; ++i) {
      double l1, squares;
      const double bq = bqkv ? bqkv[i] : 0.0;
      q[i] = bq + dot(x + row * D, wqkv + i * D, D, &l1, &squares);
      eq[i] = gemm_error(p, D + 1, l1 + fabs(bq), squares + bq * bq) + 4.0 * operands * fabs(q[i]);
    }
    for (int64_t h = 0; h < H; ++h) {
      const double *qh = q + h * hd;
      double max = -INFINITY, z = 0.0;
      /* score j's error from k_j's errors, its own f32 sum (SGEMM in both
       * types) and its scaling: independent of the other tokens' */
      for (int64_t j = 0; j < T; ++j) {
        const double *kj = k + j * I + h * hd, *ekj = ek + j * I + h * hd;
        double sum = 0.0, squares = 0.0, l1 = 0.0, from_k = 0.0;
        for (int64_t d = 0; d < hd; ++d) {
          sum += qh[d] * kj[d];
          squares += (qh[d] * kj[d]) * (qh[d] * kj[d]);
          l1 += fabs(qh[d] * kj[d]);
          from_k += (qh[d] * ekj[d]) * (qh[d] * ekj[d]);
        }
        score[j] = scale * sum;
        const double own_sum =
            operands > 0 ? sum_error(16.0, hd) * l1 : random_sum_error(hd, squares);
        own[j] = scale * (sqrt(from_k) + own_sum) + 4.0 * 2.0 * u * fabs(score[j]);
        max = fmax(max, score[j]);
      }
      for (int64_t j = 0; j < T; ++j) z += prob[j] = exp(score[j] - max);
      for (int64_t j = 0; j < T; ++j) {
        prob[j] /= z;
        /* the subtraction and __expf (2 + 1.2|x| ulps), x4 as below, and
         * p's rounding to an operand */
        exp_err[j] = 4.0 * (4.0 + 3.4 * fabs(score[j] - max)) * u + 4.0 * operands;
      }
      /* A relative error ρ_j of each p_j moves the context by Σ_j p_j ρ_j
       * (v_j - c) (the normalisation takes out the shared part): spread
       * holds p_j (v_j - c) per output column. */
      for (int64_t dd = 0; dd < hd; ++dd) {
        const int64_t i = h * hd + dd;
        double c = 0.0;
        for (int64_t j = 0; j < T; ++j) c += prob[j] * v[j * I + i];
        ctx[r * I + i] = c;
        for (int64_t j = 0; j < T; ++j) spread[j * hd + dd] = prob[j] * (v[j * I + i] - c);
      }
      /* q's errors are shared by every score: through G[d][dd] = Σ_j
       * spread[j][dd] k_j[d], independent over d. */
      memset(g, 0, sizeof(double) * (size_t)(hd * hd));
      for (int64_t j = 0; j < T; ++j) {
        const double *kj = k + j * I + h * hd;
        for (int64_t d = 0; d < hd; ++d)
          for (int64_t dd = 0; dd < hd; ++dd) g[d * hd + dd] += spread[j * hd + dd] * kj[d];
      }
      for (int64_t dd = 0; dd < hd; ++dd) {
        const int64_t i = h * hd + dd;
        double from_scores = 0.0, from_exp = 0.0, from_v = 0.0, from_q = 0.0, terms = 0.0;
        double terms_l1 = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          const double w = spread[j * hd + dd], pv = prob[j] * v[j * I + i];
          from_scores += (w * own[j]) * (w * own[j]);
          from_exp += (w * exp_err[j]) * (w * exp_err[j]);
          from_v += (prob[j] * ev[j * I + i]) * (prob[j] * ev[j * I + i]);
          terms += pv * pv;
          terms_l1 += fabs(pv);
        }
        for (int64_t d = 0; d < hd; ++d)
          from_q += (eq[h * hd + d] * g[d * hd + dd]) * (eq[h * hd + d] * g[d * hd + dd]);
        from_q *= scale * scale;
        const double c = ctx[r * I + i];
        /* + p·v's own sum, the normalising sum's and the division's */
        const double own_sum =
            operands > 0 ? sum_error(16.0, T) * terms_l1 : random_sum_error(T, terms);
        ctx_err[r * I + i] =
            sqrt(from_scores + from_exp + from_v + from_q) + own_sum + (e_sum + 3.0 * u) * fabs(c);
      }
    }
    if (!wproj) continue;
    /* Context errors are shared within a head (the same scores), independent
     * across heads; a bf16 context's roundings are independent, each at
     * most 2^-8 |c| (x4 as below). */
    for (int64_t o = 0; o < D; ++o) {
      const float *wo = wproj + o * I;
      double sum = bproj[o], magnitude = fabs(bproj[o]), squares = (double)bproj[o] * bproj[o];
      double heads = 0.0, rounding = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        double head = 0.0;
        for (int64_t dd = 0; dd < hd; ++dd) {
          const int64_t i = h * hd + dd;
          const double c = ctx[r * I + i];
          sum += c * wo[i];
          magnitude += fabs(c * wo[i]);
          squares += (c * wo[i]) * (c * wo[i]);
          head += fabs(wo[i]) * ctx_err[r * I + i];
          rounding += (wo[i] * 4.0 * p->context_round * c) * (wo[i] * 4.0 * p->context_round * c);
        }
        heads += head * head;
      }
      y[r * D + o] = sum;
      y_tol[r * D + o] = sqrt(heads) + sqrt(rounding) + gemm_error(p, I + 1, magnitude, squares) +
                         p->out * fabs(sum);
    }
  }
  free(k), free(v), free(ek), free(ev), free(q), free(eq), free(score), free(own);
  free(prob), free(exp_err), free(spread), free(g);
}

/* ----- Checks on a downloaded output -------------------------------------- */

/* got [total_rows, cols] against ref on the sampled rows, element-wise, and
 * written everywhere. */
static void verdict(const char *name, const float *got, int64_t total_rows, int64_t cols,
                    const int64_t *rows, int64_t count, const double *ref, const double *tol) {
  const int64_t bad = check_close(name, got, cols, rows, count, ref, tol) +
                      check_written(name, got, total_rows * cols);
  failures += bad > 0;
}

/* Columns of a unit kernel's output: the listed ones written (finite) in
 * every row, the others still the poison they started as, bit for bit. */
static void check_columns(const char *name, const float *got, int64_t rows, int64_t cols,
                          const unsigned char *listed) {
  int64_t written = 0, touched = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float value = got[r * cols + c];
      if (listed[c]) written += !isfinite(value);
      else touched += !is_poison_f32(value);
    }
  const int ok = written == 0 && touched == 0;
  printf("  %-46s %lld listed elements unwritten, %lld others touched %s\n", name,
         (long long)written, (long long)touched, ok ? "ok" : "FAIL");
  failures += !ok;
}

/* The listed columns of got's sampled rows, packed [count, listed]. */
static float *listed_columns(const float *got, int64_t cols, const int64_t *rows, int64_t count,
                             const unsigned char *listed, int64_t *width) {
  int64_t n = 0;
  for (int64_t c = 0; c < cols; ++c) n += listed[c] != 0;
  float *packed = host_alloc(count * n);
  for (int64_t r = 0; r < count; ++r)
    for (int64_t c = 0, j = 0; c < cols; ++c)
      if (listed[c]) packed[r * n + j++] = got[rows[r] * cols + c];
  *width = n;
  return packed;
}

/* ----- The forward cases of one shape and type ---------------------------- */

static void label(char *out, size_t size, const shape *s, dtype t, const char *what) {
  snprintf(out, size, "%s %s %s", s->name, t == F32 ? "f32" : "bf16", what);
}

/* ref + r on the sampled rows, the bound widened by the output type's
 * rounding of ref (a device may round the op's result before the add, as
 * the unfused pair does, or add r to the f32 sum and round once) and of
 * the sum. */
static void add_residual(const float *r, const int64_t *sample, int64_t count, int64_t cols,
                         const precision *p, double *ref, double *tol) {
  for (int64_t i = 0; i < count; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      const double before = ref[i * cols + c], after = before + r[sample[i] * cols + c];
      ref[i * cols + c] = after;
      tol[i * cols + c] += p->out * (fabs(before) + fabs(after));
    }
}

/* r, still as uploaded: an entry must not write its residual. */
static void check_unchanged(device *d, dtype t, const char *name, const void *dr,
                            const float *r, int64_t n) {
  float *got = download(d, dr, n, t);
  int64_t changed = 0;
  for (int64_t i = 0; i < n; ++i) changed += memcmp(&got[i], &r[i], sizeof *r) != 0;
  printf("  %-46s %lld residual elements changed %s\n", name, (long long)changed,
         changed ? "FAIL" : "ok");
  failures += changed != 0;
  free(got);
}

/* y = x·wᵀ + b (+ r: with_residual, through the linear_residual entry,
 * skipped where the table has none), x [rows, in]; with_bias 0 passes NULL. */
static void linear_case(device *d, const shape *s, dtype t, int64_t in, int64_t out,
                        int with_bias, int with_residual, const char *what) {
  const precision *p = t == F32 ? &PRECISION_F32 : &PRECISION_BF16;
  const int64_t rows = s->batch * s->tokens;
  char name[96];
  label(name, sizeof name, s, t, what);
  if (with_residual && run_linear_residual(d, t, NULL, NULL, NULL, NULL, NULL, 0, 0, 0) ==
                           HTP_KERNEL_ERR_UNSUPPORTED) {
    printf("  %-46s none on this device (linear then add): ok\n", name);
    return;
  }
  const float reach = 1.0f / sqrtf((float)in);
  float *x = random_values(rows * in, -1, 1, t), *w = random_values(out * in, -reach, reach, t);
  float *b = random_values(out, -0.5f, 0.5f, t);
  float *r = with_residual ? random_values(rows * out, -1, 1, t) : NULL;
  void *dx = upload(d, x, rows * in, t), *dw = upload(d, w, out * in, t);
  void *db = with_bias ? upload(d, b, out, t) : NULL, *dy = upload_poison(d, rows * out, t);
  void *dr = r ? upload(d, r, rows * out, t) : NULL;
  if (r)
    ENTRY(d, run_linear_residual(d, t, dx, dw, db, dr, dy, rows, in, out));
  else
    ENTRY(d, run_linear(d, t, dx, dw, db, dy, rows, in, out));
  float *got = download(d, dy, rows * out, t);
  int64_t count;
  int64_t *sample = sample_rows(rows, s->tokens, (double)in * (double)out, 24, &count);
  double *ref = doubles(count * out), *tol = doubles(count * out);
  reference_linear(x, w, with_bias ? b : NULL, sample, count, in, out, p, ref, tol);
  if (r) add_residual(r, sample, count, out, p, ref, tol);
  verdict(name, got, rows, out, sample, count, ref, tol);
  if (r) check_unchanged(d, t, name, dr, r, rows * out);
  release(d, dx), release(d, dw), release(d, db), release(d, dy), release(d, dr);
  free(x), free(w), free(b), free(r), free(got), free(sample), free(ref), free(tol);
}

static void layer_norm_case(device *d, const shape *s, dtype t) {
  const precision *p = t == F32 ? &PRECISION_F32 : &PRECISION_BF16;
  const int64_t rows = s->batch * s->tokens, dim = s->dim;
  /* Rows off centre with their own spread: the statistics must centre them. */
  float *x = host_random(rows * dim, -1, 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float shift = uniform(-1, 1), spread = uniform(0.5f, 2.0f);
    for (int64_t i = 0; i < dim; ++i) x[r * dim + i] = shift + spread * x[r * dim + i];
  }
  if (t == BF16)
    for (int64_t i = 0; i < rows * dim; ++i) x[i] = htp_bf16_to_f32(htp_bf16_from_f32(x[i]));
  float *gamma = random_values(dim, 0.5f, 1.5f, t), *beta = random_values(dim, -1, 1, t);
  void *dx = upload(d, x, rows * dim, t), *dgamma = upload(d, gamma, dim, t);
  void *dbeta = upload(d, beta, dim, t), *dy = upload_poison(d, rows * dim, t);
  ENTRY(d, run_layer_norm(d, t, dx, dgamma, dbeta, dy, rows, dim, 1e-6f));
  float *got = download(d, dy, rows * dim, t);
  int64_t count;
  int64_t *all = sample_rows(rows, s->tokens, 0.0, 0, &count);
  double *ref = doubles(rows * dim), *tol = doubles(rows * dim);
  reference_layer_norm(x, gamma, beta, all, count, dim, 1e-6, p, ref, tol);
  char name[96];
  label(name, sizeof name, s, t, "layer_norm");
  verdict(name, got, rows, dim, all, count, ref, tol);
  /* dim 0 refused on every device (a row of no element has no mean); on
   * the checked device also no gamma, which both kernels read (on CUDA it
   * would be a fault, not a refusal). */
  int refused = run_layer_norm(d, t, dx, dgamma, dbeta, dy, rows, 0, 1e-6f) != HTP_KERNEL_OK;
  if (d->k->device == HTP_KERNEL_DEVICE_CHECKED)
    refused = refused &&
              run_layer_norm(d, t, dx, NULL, dbeta, dy, rows, dim, 1e-6f) != HTP_KERNEL_OK;
  label(name, sizeof name, s, t, "layer_norm dim 0, no gamma");
  printf("  %-46s %s\n", name, refused ? "refused: ok" : "FAIL");
  failures += !refused;
  release(d, dx), release(d, dgamma), release(d, dbeta), release(d, dy);
  free(x), free(gamma), free(beta), free(got), free(all), free(ref), free(tol);
}

/* GELU (both forms) over [rows, mlp] values in [-6, 6]; add and bias add. */
static void elementwise_cases(device *d, const shape *s, dtype t) {
  const precision *p = t == F32 ? &PRECISION_F32 : &PRECISION_BF16;
  const int64_t rows = s->batch * s->tokens, cols = s->mlp, n = rows * cols;
  float *x = random_values(n, -6, 6, t), *other = random_values(n, -6, 6, t);
  float *bias = random_values(cols, -1, 1, t);
  void *dx = upload(d, x, n, t), *dother = upload(d, other, n, t), *dbias = upload(d, bias, cols, t);
  double *ref = doubles(n), *tol = doubles(n);
  char name[96];
  for (int tanh_approx = 0; tanh_approx < 2; ++tanh_approx) {
    void *dy = upload_poison(d, n, t);
    ENTRY(d, run_gelu(d, t, dx, dy, n, tanh_approx));
    float *got = download(d, dy, n, t);
    for (int64_t i = 0; i < n; ++i) {
      double argument;
      ref[i] = gelu_reference(x[i], tanh_approx, &argument);
      tol[i] = gelu_own_error(x[i], argument) + p->out * fabs(ref[i]);
    }
    label(name, sizeof name, s, t, tanh_approx ? "gelu tanh" : "gelu erf");
    verdict(name, got, rows, cols, NULL, rows, ref, tol);
    release(d, dy), free(got);
  }
  void *dy = upload_poison(d, n, t);
  ENTRY(d, run_add(d, t, dx, dother, dy, n));
  float *got = download(d, dy, n, t);
  for (int64_t i = 0; i < n; ++i) {
    ref[i] = (double)x[i] + other[i];
    tol[i] = p->out * fabs(ref[i]);
  }
  label(name, sizeof name, s, t, "add");
  verdict(name, got, rows, cols, NULL, rows, ref, tol);
  release(d, dy), free(got);
  dy = upload_poison(d, n, t);
  ENTRY(d, run_bias_add(d, t, dx, dbias, dy, rows, cols));
  got = download(d, dy, n, t);
  for (int64_t i = 0; i < n; ++i) {
    ref[i] = (double)x[i] + bias[i % cols];
    tol[i] = p->out * fabs(ref[i]);
  }
  label(name, sizeof name, s, t, "bias_add");
  verdict(name, got, rows, cols, NULL, rows, ref, tol);
  release(d, dy), free(got);
  /* With a residual (other): x + b + r, rounded once or after each add. */
  label(name, sizeof name, s, t, "bias_add + residual");
  if (!has_bias_add_residual(d, t)) {
    printf("  %-46s none on this device (bias_add then add): ok\n", name);
  } else {
    dy = upload_poison(d, n, t);
    ENTRY(d, run_bias_add_residual(d, t, dx, dbias, dother, dy, rows, cols));
    got = download(d, dy, n, t);
    for (int64_t i = 0; i < n; ++i) {
      const double biased = (double)x[i] + bias[i % cols];
      ref[i] = biased + other[i];
      tol[i] = p->out * (fabs(biased) + fabs(ref[i]));
    }
    verdict(name, got, rows, cols, NULL, rows, ref, tol);
    check_unchanged(d, t, name, dother, other, n);
    release(d, dy), free(got);
  }
  release(d, dx), release(d, dother), release(d, dbias);
  free(x), free(other), free(bias), free(ref), free(tol);
}

/* The attention (with `whole`) and its listed-heads unit kernel on the
 * same data: one reference (its context is the unit kernel's output).
 * with_bias 0: no qkv bias (the unit kernel only; the attention always has
 * one). */
static void attention_cases(device *d, const shape *s, dtype t, int whole, int with_bias,
                            const int32_t *list, int64_t listed) {
  const precision *p = t == F32 ? &PRECISION_F32 : &PRECISION_BF16;
  const int64_t B = s->batch, T = s->tokens, D = s->dim, H = s->heads, hd = s->head_dim;
  const int64_t rows = B * T, I = H * hd;
  const float reach = 4.0f / sqrtf((float)D);
  float *x = random_values(rows * D, -1, 1, t);
  float *wqkv = random_values(3 * I * D, -reach, reach, t);
  float *bqkv = random_values(3 * I, -0.2f, 0.2f, t);
  float *wproj = random_values(D * I, -1.0f / sqrtf((float)I), 1.0f / sqrtf((float)I), t);
  float *bproj = random_values(D, -0.2f, 0.2f, t);
  void *dx = upload(d, x, rows * D, t), *dwqkv = upload(d, wqkv, 3 * I * D, t);
  void *dbqkv = with_bias ? upload(d, bqkv, 3 * I, t) : NULL;
  void *dwproj = upload(d, wproj, D * I, t), *dbproj = upload(d, bproj, D, t);

  /* The query rows: queries cost T·I each beyond the keys and values. */
  int64_t count;
  int64_t *sample = sample_rows(rows, T, (double)I * (double)(2 * T + D), 12, &count);
  double *ctx = doubles(count * I), *ctx_err = doubles(count * I);
  double *ref = doubles(count * D), *tol = doubles(count * D);
  reference_attention(x, wqkv, with_bias ? bqkv : NULL, wproj, bproj, s, sample, count, p,
                      p->attention_operands, ctx, ctx_err, ref, tol);
  /* The CPU's unit kernel (and the checked device's) keeps f32 operands
   * except for a list of every head in order, which it runs as the whole
   * attention; CUDA's runs any list as the whole attention of those heads
   * (the fused bf16 kernel): the attention's bound there. */
  int whole_attention = listed == H || d->k->device == HTP_KERNEL_DEVICE_CUDA;
  for (int64_t i = 0; whole_attention && i < listed; ++i)
    whole_attention = d->k->device == HTP_KERNEL_DEVICE_CUDA || list[i] == i;
  if (p->attention_operands > 0 && !whole_attention)
    reference_attention(x, wqkv, with_bias ? bqkv : NULL, NULL, NULL, s, sample, count, p, 0.0,
                        ctx, ctx_err, NULL, NULL);
  char name[96];

  if (whole && with_bias) {
    const int64_t floats = d->k->attention_scratch_floats(B, T, D, H, hd);
    float *scratch = upload_poison(d, floats, F32);
    void *dy = upload_poison(d, rows * D, t);
    ENTRY(d, run_attention(d, t, dx, dwqkv, dbqkv, dwproj, dbproj, dy, scratch, floats, B, T, D,
                           H, hd));
    float *got = download(d, dy, rows * D, t);
    label(name, sizeof name, s, t, "attention");
    verdict(name, got, rows, D, sample, count, ref, tol);
    /* One float short of the device's count is refused, not overrun. */
    const htp_kernel_status short_scratch = run_attention(d, t, dx, dwqkv, dbqkv, dwproj, dbproj,
                                                          dy, scratch, floats - 1, B, T, D, H, hd);
    const int refused = short_scratch == HTP_KERNEL_ERR_INVALID;
    label(name, sizeof name, s, t, "attention scratch one short");
    printf("  %-46s %s\n", name, refused ? "refused: ok" : "FAIL");
    failures += !refused;
    release(d, dy), free(got);
    /* With a residual, added in the projection's epilogue where the device
     * fuses it; y poisoned afresh. */
    label(name, sizeof name, s, t, "attention + residual");
    if (run_attention_residual(d, t, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0,
                               0, 0) == HTP_KERNEL_ERR_UNSUPPORTED) {
      printf("  %-46s none on this device (attention then add): ok\n", name);
    } else {
      float *r = random_values(rows * D, -1, 1, t);
      void *dr = upload(d, r, rows * D, t);
      dy = upload_poison(d, rows * D, t);
      ENTRY(d, run_attention_residual(d, t, dx, dwqkv, dbqkv, dwproj, dbproj, dr, dy, scratch,
                                      floats, B, T, D, H, hd));
      got = download(d, dy, rows * D, t);
      double *ref_r = doubles(count * D), *tol_r = doubles(count * D);
      memcpy(ref_r, ref, sizeof *ref * (size_t)(count * D));
      memcpy(tol_r, tol, sizeof *tol * (size_t)(count * D));
      add_residual(r, sample, count, D, p, ref_r, tol_r);
      verdict(name, got, rows, D, sample, count, ref_r, tol_r);
      check_unchanged(d, t, name, dr, r, rows * D);
      release(d, dr), release(d, dy), free(r), free(got), free(ref_r), free(tol_r);
    }
    release(d, scratch);
  }

  /* The listed heads' context, [rows, inner]: other heads' columns stay. */
  float *scratch = upload_poison(d, rows * 3 * hd + T * T, F32);
  void *dcontext = upload_poison(d, rows * I, t);
  ENTRY(d, run_attention_heads(d, t, dx, dwqkv, dbqkv, dcontext, scratch, B, T, D, H, hd, list,
                               listed));
  float *got = download(d, dcontext, rows * I, t);
  unsigned char *mask = calloc((size_t)I, 1);
  for (int64_t i = 0; i < listed; ++i) memset(mask + list[i] * hd, 1, (size_t)hd);
  char what[64];
  snprintf(what, sizeof what, "attention_heads %lld of %lld%s", (long long)listed, (long long)H,
           with_bias ? "" : " no bias");
  label(name, sizeof name, s, t, what);
  check_columns(name, got, rows, I, mask);
  int64_t width;
  float *packed = listed_columns(got, I, sample, count, mask, &width);
  double *want = doubles(count * width), *bound = doubles(count * width);
  for (int64_t r = 0; r < count; ++r)
    for (int64_t i = 0, j = 0; i < I; ++i)
      if (mask[i]) {
        want[r * width + j] = ctx[r * I + i];
        bound[r * width + j++] = ctx_err[r * I + i] + p->out * fabs(ctx[r * I + i]);
      }
  failures += check_close(name, packed, width, NULL, count, want, bound) > 0;
  release(d, scratch), release(d, dcontext);
  free(got), free(mask), free(packed), free(want), free(bound);

  release(d, dx), release(d, dwqkv), release(d, dbqkv), release(d, dwproj), release(d, dbproj);
  free(x), free(wqkv), free(bqkv), free(wproj), free(bproj), free(sample), free(ctx);
  free(ctx_err), free(ref), free(tol);
}

/* hidden[:, units] = GELU(x·w1ᵀ + b1) for the listed units' columns. */
/* GELU(x · w1ᵀ + b1) for the listed MLP units; list NULL: the fused
 * linear_gelu entry over every column (skipped where the table has none). */
static void mlp_units_case(device *d, const shape *s, dtype t, const int32_t *list,
                           int64_t listed, int with_bias, int tanh_approx) {
  const precision *p = t == F32 ? &PRECISION_F32 : &PRECISION_BF16;
  const int64_t rows = s->batch * s->tokens, D = s->dim, M = s->mlp, W = s->unit_width;
  const int fused = list == NULL;
  char what[80], name[96];
  if (fused) {
    snprintf(what, sizeof what, "linear_gelu%s%s", with_bias ? "" : " no bias",
             tanh_approx ? " tanh" : "");
    label(name, sizeof name, s, t, what);
    if (run_linear_gelu(d, t, NULL, NULL, NULL, NULL, 0, 0, 0, 0) ==
        HTP_KERNEL_ERR_UNSUPPORTED) {
      printf("  %-46s none on this device (linear then GELU): ok\n", name);
      return;
    }
    listed = M / W;
  }
  const float reach = 2.0f / sqrtf((float)D);
  float *x = random_values(rows * D, -1, 1, t), *w1 = random_values(M * D, -reach, reach, t);
  float *b1 = random_values(M, -0.5f, 0.5f, t);
  void *dx = upload(d, x, rows * D, t), *dw1 = upload(d, w1, M * D, t);
  void *db1 = with_bias ? upload(d, b1, M, t) : NULL, *dhidden = upload_poison(d, rows * M, t);
  if (fused)
    ENTRY(d, run_linear_gelu(d, t, dx, dw1, db1, dhidden, rows, D, M, tanh_approx));
  else
    ENTRY(d, run_mlp_units(d, t, dx, dw1, db1, dhidden, rows, D, M, W, list, listed,
                           tanh_approx));
  float *got = download(d, dhidden, rows * M, t);
  unsigned char *mask = calloc((size_t)M, 1);
  if (fused)
    memset(mask, 1, (size_t)M);
  for (int64_t i = 0; !fused && i < listed; ++i) memset(mask + list[i] * W, 1, (size_t)W);
  if (!fused) {
    snprintf(what, sizeof what, "mlp_hidden_units %lld of %lld%s%s", (long long)listed,
             (long long)(M / W), with_bias ? "" : " no bias", tanh_approx ? " tanh" : "");
    label(name, sizeof name, s, t, what);
  }
  check_columns(name, got, rows, M, mask);
  int64_t count, width;
  int64_t *sample = sample_rows(rows, s->tokens, (double)listed * W * D, 24, &count);
  float *packed = listed_columns(got, M, sample, count, mask, &width);
  double *ref = doubles(count * width), *tol = doubles(count * width);
  for (int64_t r = 0; r < count; ++r)
    for (int64_t c = 0, j = 0; c < M; ++c) {
      if (!mask[c]) continue;
      double l1, squares, argument;
      const double bias = with_bias ? b1[c] : 0.0;
      const double pre = bias + dot(x + sample[r] * D, w1 + c * D, D, &l1, &squares);
      const double y = gelu_reference(pre, tanh_approx, &argument);
      const double pre_err = gemm_error(p, D + 1, l1 + fabs(bias), squares + bias * bias) +
                             2.0 * UNIT_F32 * fabs(pre);
      ref[r * width + j] = y;
      tol[r * width + j++] = 1.15 * pre_err + gelu_own_error(pre, argument) + p->out * fabs(y);
    }
  failures += check_close(name, packed, width, NULL, count, ref, tol) > 0;
  release(d, dx), release(d, dw1), release(d, db1), release(d, dhidden);
  free(x), free(w1), free(b1), free(got), free(mask), free(sample), free(packed), free(ref);
  free(tol);
}

/* y = [y +] Σ over the listed unit blocks of a[:, block]·w[:, block]ᵀ,
 * a [rows, mlp], w [dim, mlp]: overwrite (y poisoned), accumulate (y a
 * known start), and the empty list both ways (zeros; y kept). */
static void linear_units_cases(device *d, const shape *s, dtype t, const int32_t *list,
                               int64_t listed) {
  const precision *p = t == F32 ? &PRECISION_F32 : &PRECISION_BF16;
  const int64_t rows = s->batch * s->tokens, D = s->dim, M = s->mlp, W = s->unit_width;
  const float reach = 1.0f / sqrtf((float)(listed * W));
  float *a = random_values(rows * M, -1, 1, t), *w = random_values(D * M, -reach, reach, t);
  void *da = upload(d, a, rows * M, t), *dw = upload(d, w, D * M, t);
  int64_t count;
  int64_t *sample = sample_rows(rows, s->tokens, (double)listed * W * D, 24, &count);
  double *ref = doubles(count * D), *tol = doubles(count * D);
  float *packed_a = host_alloc(listed * W), *packed_w = host_alloc(listed * W);
  for (int variant = 0; variant < 4; ++variant) {
    const int32_t accumulate = variant == 1 || variant == 3;
    const int64_t n = variant >= 2 ? 0 : listed;
    float *start = random_values(rows * D, -3, 3, t);
    void *dy = accumulate ? upload(d, start, rows * D, t) : upload_poison(d, rows * D, t);
    ENTRY(d, run_linear_units(d, t, da, dw, dy, rows, M, D, W, list, n, accumulate));
    float *got = download(d, dy, rows * D, t);

    for (int64_t r = 0; r < count; ++r) {
      for (int64_t i = 0; i < n; ++i)
        memcpy(packed_a + i * W, a + sample[r] * M + list[i] * W, sizeof(float) * (size_t)W);
      for (int64_t o = 0; o < D; ++o) {
        for (int64_t i = 0; i < n; ++i)
          memcpy(packed_w + i * W, w + o * M + list[i] * W, sizeof(float) * (size_t)W);
        double l1, squares;
        const double old = accumulate ? start[sample[r] * D + o] : 0.0;
        const double y = old + dot(packed_a, packed_w, n * W, &l1, &squares);
        ref[r * D + o] = y;
        /* the runs' partial sums accumulate in y: one sum in some order */
        tol[r * D + o] =
            n ? gemm_error(p, n * W + 1, l1 + fabs(old), squares + old * old) + p->out * fabs(y)
              : 0.0;
      }
    }
    static const char *names[] = {"linear_units", "linear_units accumulate",
                                  "linear_units none (zeros)", "linear_units none (kept)"};
    char what[80], name[96];
    snprintf(what, sizeof what, "%s %lld of %lld", names[variant], (long long)n,
             (long long)(M / W));
    label(name, sizeof name, s, t, what);
    verdict(name, got, rows, D, sample, count, ref, tol);
    release(d, dy), free(got), free(start);
  }
  /* The unit list's contract, the same on every device
   * (htp_kernel_unit_list_problem): a unit width of 0, even for no units,
   * and an id past the last unit are refused before anything runs. */
  const int32_t past = (int32_t)(M / W);
  void *dy = upload_poison(d, rows * D, t);
  const int refused =
      run_linear_units(d, t, da, dw, dy, rows, M, D, 0, list, listed, 0) != HTP_KERNEL_OK &&
      run_linear_units(d, t, da, dw, dy, rows, M, D, 0, list, 0, 0) != HTP_KERNEL_OK &&
      run_linear_units(d, t, da, dw, dy, rows, M, D, W, &past, 1, 0) != HTP_KERNEL_OK;
  char name[96];
  label(name, sizeof name, s, t, "linear_units width 0, id past the end");
  printf("  %-46s %s\n", name, refused ? "refused: ok" : "FAIL");
  failures += !refused;
  release(d, dy);
  release(d, da), release(d, dw);
  free(a), free(w), free(sample), free(ref), free(tol), free(packed_a), free(packed_w);
}

/* Every forward case of one shape and type. Unit lists: the first, last
 * and a middle head; units in runs (consecutive ids) and alone, the last
 * included. */
static void forward_cases(device *d, const shape *s, dtype t) {
  const double start = now();
  const int small = s->dim == SMALL.dim;
  linear_case(d, s, t, s->dim, s->mlp, 1, 0, "linear fc1");
  linear_case(d, s, t, s->mlp, s->dim, 1, 0, "linear fc2");
  linear_case(d, s, t, s->mlp, s->dim, 1, 1, "linear fc2 + residual");
  if (small) linear_case(d, s, t, s->dim, s->mlp, 0, 0, "linear no bias");
  if (small) linear_case(d, s, t, s->dim, s->dim, 0, 1, "linear no bias + residual");
  layer_norm_case(d, s, t);
  elementwise_cases(d, s, t);
  const int32_t heads[] = {(int32_t)s->heads - 1, 0, (int32_t)(s->heads / 2)};
  attention_cases(d, s, t, 1, 1, heads, 3);
  if (small) attention_cases(d, s, t, 0, 0, heads, 3);
  /* Every head in order: a rank keeping its heads, a compact shard (CUDA
   * runs the whole attention's context for it). */
  int32_t *every = malloc(sizeof *every * (size_t)s->heads);
  for (int32_t h = 0; every && h < (int32_t)s->heads; ++h) every[h] = h;
  if (every) attention_cases(d, s, t, 0, 1, every, s->heads);
  /* Every head, reversed (gathered, not the whole attention), and one head
   * alone (a one-head attention of its gathered weights). */
  for (int32_t h = 0; every && small && h < (int32_t)s->heads; ++h)
    every[h] = (int32_t)s->heads - 1 - h;
  if (every && small) attention_cases(d, s, t, 0, 1, every, s->heads);
  const int32_t alone[] = {(int32_t)(s->heads / 2)};
  if (small) attention_cases(d, s, t, 0, 1, alone, 1);
  free(every);
  /* One run of heads not from 0 (CUDA gathers it with one copy a part). */
  const int32_t run[] = {1, 2};
  if (s->heads >= 3) attention_cases(d, s, t, 0, 1, run, 2);
  const int32_t last = (int32_t)(s->mlp / s->unit_width) - 1;
  const int32_t units[] = {0, 1, 2, last / 2, last};
  mlp_units_case(d, s, t, units, 5, 1, 0);
  if (small) mlp_units_case(d, s, t, units, 5, 0, 0), mlp_units_case(d, s, t, units, 5, 1, 1);
  mlp_units_case(d, s, t, NULL, 0, 1, 0);
  if (small) mlp_units_case(d, s, t, NULL, 0, 0, 1);
  const int32_t blocks[] = {1, 2, 3, last / 2 + 1, last};
  linear_units_cases(d, s, t, blocks, 5);
  /* One run (CUDA's bf16 overwrite: one GEMM rounding into y). */
  linear_units_cases(d, s, t, blocks, 3);
  printf("%s %s on %s: %.1f s\n", s->name, t == F32 ? "f32" : "bf16", d->name, now() - start);
}

/* ----- Matmul precision (set_matmul_precision) ----------------------------- */

/* x rounded to `kept` mantissa bits: to nearest with ties to even (rint in
 * the default mode), or toward zero (a conversion that truncates). */
static double round_bits(double x, int kept, int nearest) {
  if (x == 0.0 || !isfinite(x)) return x;
  int e;
  const double m = ldexp(frexp(x, &e), kept + 1);
  return ldexp(nearest ? rint(m) : trunc(m), e - kept - 1);
}

/* x[rows of list][in] rounded to `kept` bits (nearest: 1, toward zero: 0). */
static double *rounded_rows(const float *x, const int64_t *list, int64_t count, int64_t in,
                            int kept, int nearest) {
  double *r = doubles(count * in);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t k = 0; k < in; ++k)
      r[i * in + k] = kept ? round_bits(x[(list ? list[i] : i) * in + k], kept, nearest)
                           : (double)x[(list ? list[i] : i) * in + k];
  return r;
}

/* An f32 linear (fc1's shape, with a bias) at TF32 and at bf16 operands,
 * against b + Σ round(x) round(w) in double, the operands rounded to
 * nearest even or toward zero, and against the exact operands. The checked
 * device rounds to nearest as the CPU does: within the tensor cores'
 * summation bound G + u |y| of those, and outside it for the exact operands
 * (the precision took effect). cuBLAS's FAST_TF32 / FAST_16BF compute
 * types permit a reduced precision, they do not promise it (an H200 ran
 * FAST_16BF at about TF32's error, and small or odd shapes exactly): on
 * CUDA the result must be within the format's bound from the exact
 * operands, G + 2^(1-kept) Σ|x w| + u |y|, and whether it took effect is
 * reported. Back to f32 after. */
static void precision_cases(device *d, const shape *s) {
  static const struct { int precision, kept; const char *name; } formats[] = {
      {HTP_MATMUL_TF32, 10, "tf32"}, {HTP_MATMUL_BF16, 7, "bf16"}};
  if (!d->k->set_matmul_precision) {
    printf("  %s: the table has no set_matmul_precision: FAIL\n", d->name);
    failures++;
    return;
  }
  const int strict = d->k->device != HTP_KERNEL_DEVICE_CUDA;
  const int64_t rows = s->batch * s->tokens, in = s->dim, out = s->mlp;
  const float reach = 1.0f / sqrtf((float)in);
  for (size_t f = 0; f < sizeof formats / sizeof *formats; ++f) {
    const int kept = formats[f].kept;
    ENTRY(d, d->k->set_matmul_precision(&d->env, formats[f].precision));
    float *x = random_values(rows * in, -1, 1, F32), *w = random_values(out * in, -reach, reach, F32);
    float *b = random_values(out, -0.5f, 0.5f, F32);
    void *dx = upload(d, x, rows * in, F32), *dw = upload(d, w, out * in, F32);
    void *db = upload(d, b, out, F32), *dy = upload_poison(d, rows * out, F32);
    ENTRY(d, run_linear(d, F32, dx, dw, db, dy, rows, in, out));
    float *got = download(d, dy, rows * out, F32);
    int64_t count;
    int64_t *sample = sample_rows(rows, s->tokens, 3.0 * (double)in * (double)out, 24, &count);
    /* the operands of each kind, rounded once: nearest, toward zero, exact */
    double *xs[3], *ws[3];
    for (int kind = 0; kind < 3; ++kind) {
      const int bits = kind == 2 ? 0 : kept;
      xs[kind] = rounded_rows(x, sample, count, in, bits, kind == 0);
      ws[kind] = rounded_rows(w, NULL, out, in, bits, kind == 0);
    }
    double worst[4] = {0.0, 0.0, 0.0, 0.0}; /* nearest, toward zero, exact, format */
    for (int64_t i = 0; i < count; ++i)
      for (int64_t o = 0; o < out; ++o) {
        const double g = (double)got[sample[i] * out + o];
        for (int kind = 0; kind < 3; ++kind) {
          const double *xr = xs[kind] + i * in, *wo = ws[kind] + o * in;
          double y = b[o], l1 = fabs(b[o]);
          for (int64_t k = 0; k < in; ++k) {
            const double t = xr[k] * wo[k];
            y += t;
            l1 += fabs(t);
          }
          const double sum_bound = sum_error(16.0, in + 1) * l1 + UNIT_F32 * fabs(y);
          double ratio = fabs(g - y) / sum_bound;
          worst[kind] = isnan(ratio) ? INFINITY : fmax(worst[kind], ratio);
          if (kind == 2) {
            ratio = fabs(g - y) / (sum_bound + ldexp(1.0, 1 - kept) * l1);
            worst[3] = isnan(ratio) ? INFINITY : fmax(worst[3], ratio);
          }
        }
      }
    const int took_effect = worst[2] > 1.0;
    const int ok = strict ? fmin(worst[0], worst[1]) <= 1.0 && took_effect : worst[3] <= 1.0;
    printf("  %s %s f32 linear at %s operands: worst |error| / bound %.3g (rounded to nearest), "
           "%.3g (toward zero), %.3g (exact operands: %s), %.3g (the format's bound from the "
           "exact operands) %s\n", s->name, d->name, formats[f].name, worst[0], worst[1],
           worst[2], took_effect ? "took effect" : "did not take effect",
           worst[3], ok ? "ok" : "FAIL");
    failures += !ok;
    failures += check_written("precision linear", got, rows * out) > 0;
    release(d, dx), release(d, dw), release(d, db), release(d, dy);
    for (int kind = 0; kind < 3; ++kind) free(xs[kind]), free(ws[kind]);
    free(x), free(w), free(b), free(got), free(sample);
  }
  ENTRY(d, d->k->set_matmul_precision(&d->env, HTP_MATMUL_F32));
}

/* ----- Sums, memory, the model's ends (through the table) ----------------- */

/* sum_f32 and sum_bf16 over three parts, into a poisoned output and in
 * place over the first part (as ranks sharing a GPU sum their partials):
 * in the documented order, one f32 addition at a time (bf16: widened,
 * summed in f32, rounded once), so the bits are known exactly. */
static void sum_cases(device *d) {
  const int64_t n = 100003;
  float *in[3];
  void *din[3], *din16[3];
  float *in16[3];
  for (int k = 0; k < 3; ++k) {
    in[k] = random_values(n, -100, 100, F32), din[k] = upload(d, in[k], n, F32);
    in16[k] = random_values(n, -100, 100, BF16), din16[k] = upload(d, in16[k], n, BF16);
  }
  double *want = doubles(n), *want16 = doubles(n);
  for (int64_t i = 0; i < n; ++i) {
    want[i] = (in[0][i] + in[1][i]) + in[2][i];
    want16[i] = htp_bf16_to_f32(htp_bf16_from_f32((in16[0][i] + in16[1][i]) + in16[2][i]));
  }
  void *dy = upload_poison(d, n, F32), *dy16 = upload_poison(d, n, BF16);
  ENTRY(d, d->k->sum_f32(&d->env, (const float *const *)din, 3, dy, n));
  ENTRY(d, d->k->sum_bf16(&d->env, (const htp_bf16 *const *)din16, 3, dy16, n));
  ENTRY(d, d->k->sum_f32(&d->env, (const float *const *)din, 3, din[0], n));
  ENTRY(d, d->k->sum_bf16(&d->env, (const htp_bf16 *const *)din16, 3, din16[0], n));
  const void *outputs[] = {dy, dy16, din[0], din16[0]};
  static const char *names[] = {"table sum_f32", "table sum_bf16", "table sum_f32 in place",
                                "table sum_bf16 in place"};
  for (int i = 0; i < 4; ++i) {
    float *got = download(d, outputs[i], n, i % 2 ? BF16 : F32);
    verdict(names[i], got, 1, n, NULL, 1, i % 2 ? want16 : want, NULL);
    free(got);
  }
  for (int k = 0; k < 3; ++k) release(d, din[k]), release(d, din16[k]), free(in[k]), free(in16[k]);
  release(d, dy), release(d, dy16), free(want), free(want16);
}

/* Memory, copies, synchronize and timing marks: a round trip through an
 * add timed by marks around it; a zero-byte allocation and a mark other
 * than 0 or 1 are refused. */
static void memory_cases(device *d) {
  const int64_t n = 4099;
  float *host = host_random(n, -8, 8);
  double *want = doubles(n);
  void *p = upload(d, host, n, F32);
  ENTRY(d, d->k->mark(&d->env, 0, 0));
  ENTRY(d, d->k->add_f32(&d->env, p, p, p, n));
  ENTRY(d, d->k->mark(&d->env, 0, 1));
  float *back = download(d, p, n, F32); /* to_host waits for the add */
  double seconds = -1;
  ENTRY(d, d->k->elapsed(&d->env, 0, &seconds));
  release(d, p);
  for (int64_t i = 0; i < n; ++i) want[i] = 2.0 * host[i];
  verdict("table alloc/to_device/add/to_host", back, 1, n, NULL, 1, want, NULL);
  const int timed = seconds >= 0 && seconds < 10;
  printf("  %-46s %.3g s %s\n", "table mark/elapsed", seconds, timed ? "ok" : "FAIL");
  failures += !timed;
  void *none = NULL;
  const int refused = d->k->alloc(&d->env, 0, &none) == HTP_KERNEL_ERR_INVALID &&
                      d->k->mark(&d->env, 0, 2) == HTP_KERNEL_ERR_INVALID;
  printf("  %-46s %s\n", "table alloc 0 / mark 2", refused ? "refused: ok" : "FAIL");
  failures += !refused;
  free(host), free(back), free(want);
}

/* The model's ends (f32) against their definitions (cuda_test.h): the
 * copies exactly, into poisoned outputs; the sums (row_sum, and
 * embed_tokens_backward's dcls and dpos accumulated onto a start)
 * element-wise. */
static void embed_cases(device *d) {
  const int64_t B = 5, C = 3, H = 32, W = 16, P = 4, N = (H / P) * (W / P), K = C * P * P;
  const int64_t D = 37, R = 1000, T = N + 1;
  float *images = host_random(B * C * H * W, -1, 1), *got;
  double *want = doubles(R * D), *tol = doubles(T * D), *tol2 = doubles(D);
  void *dimages = upload(d, images, B * C * H * W, F32), *dpatches = upload_poison(d, B * N * K, F32);
  ENTRY(d, d->k->patchify_f32(&d->env, dimages, dpatches, B, C, H, W, P));
  patchify_reference(images, want, B, C, H, W, P);
  got = download(d, dpatches, B * N * K, F32);
  verdict("table patchify_f32", got, B * N, K, NULL, B * N, want, NULL);
  free(got);

  float *patches = host_random(B * N * D, -1, 1), *cls = host_random(D, -1, 1);
  float *pos = host_random(T * D, -1, 1);
  void *dp = upload(d, patches, B * N * D, F32), *dcls = upload(d, cls, D, F32);
  void *dpos = upload(d, pos, T * D, F32), *dy = upload_poison(d, B * T * D, F32);
  ENTRY(d, d->k->embed_tokens_f32(&d->env, dp, dcls, dpos, dy, B, N, D));
  embed_tokens_reference(patches, cls, pos, want, B, N, D);
  float *embedded = download(d, dy, B * T * D, F32);
  verdict("table embed_tokens_f32", embedded, B * T, D, NULL, B * T, want, NULL);
  void *dpooled = upload_poison(d, B * D, F32);
  ENTRY(d, d->k->cls_token_f32(&d->env, dy, dpooled, B, T, D));
  cls_token_reference(embedded, want, B, T, D);
  float *pooled = download(d, dpooled, B * D, F32);
  verdict("table cls_token_f32", pooled, B, D, NULL, B, want, NULL);
  void *dback = upload_poison(d, B * T * D, F32);
  ENTRY(d, d->k->cls_token_backward_f32(&d->env, dpooled, dback, B, T, D));
  cls_token_backward_reference(pooled, want, B, T, D);
  got = download(d, dback, B * T * D, F32);
  verdict("table cls_token_backward_f32 (written whole)", got, B * T, D, NULL, B * T, want, NULL);
  free(got);

  /* embed_tokens' adjoint from g: dpatches written (poisoned first), dcls
   * and dpos accumulated onto cls and pos. */
  float *g = host_random(B * T * D, -1, 1);
  double *dcls_want = doubles(D), *dpos_want = doubles(T * D);
  void *dg = upload(d, g, B * T * D, F32), *ddp = upload_poison(d, B * N * D, F32);
  ENTRY(d, d->k->embed_tokens_backward_f32(&d->env, dg, ddp, dcls, dpos, B, N, D));
  embed_tokens_backward_reference(g, cls, pos, want, dcls_want, tol2, dpos_want, tol, B, N, D);
  got = download(d, ddp, B * N * D, F32);
  verdict("table embed_tokens_backward dpatches", got, B * N, D, NULL, B * N, want, NULL);
  free(got);
  got = download(d, dpos, T * D, F32);
  verdict("table embed_tokens_backward dpos (+=)", got, T, D, NULL, T, dpos_want, tol);
  free(got);
  got = download(d, dcls, D, F32);
  verdict("table embed_tokens_backward dcls (+=)", got, 1, D, NULL, 1, dcls_want, tol2);
  free(got);

  float *x = host_random(R * D, -1, 1);
  void *dxr = upload(d, x, R * D, F32), *dsums = upload_poison(d, D, F32);
  ENTRY(d, d->k->row_sum_f32(&d->env, dxr, dsums, R, D));
  column_sum_reference(x, R, D, D, NULL, want, tol2);
  got = download(d, dsums, D, F32);
  verdict("table row_sum_f32", got, 1, D, NULL, 1, want, tol2);
  free(got);
  ENTRY(d, d->k->zero(&d->env, dxr, sizeof(float) * (size_t)(R * D)));
  memset(want, 0, sizeof(double) * (size_t)(R * D));
  got = download(d, dxr, R * D, F32);
  verdict("table zero", got, R, D, NULL, R, want, NULL);
  free(got);

  release(d, dimages), release(d, dpatches), release(d, dp), release(d, dcls), release(d, dpos);
  release(d, dy), release(d, dpooled), release(d, dback), release(d, dg), release(d, ddp);
  release(d, dxr), release(d, dsums);
  free(images), free(want), free(tol), free(tol2), free(patches), free(cls), free(pos);
  free(embedded), free(pooled), free(g), free(dcls_want), free(dpos_want), free(x);
}

/* What the kernels keep of their own on a FRESH environment of d, against
 * kernels/htp_scratch.h's formulas: the CUDA kernels' buffers, and what the
 * checked device books for them, must both be exactly those (the compiler
 * bounds a block's by the same formulas). Shapes no multiple of 8, so that
 * no linear takes cuBLASLt's epilogue (the default for aligned ones); the
 * checked device books its workspace wherever a linear with a bias may. */
static void own_memory_cases(device *d) {
  enum { B = 2, T = 5, D = 12, H = 3, HD = 4, R = B * T, OUT = 9 };
  uint64_t held = UINT64_MAX;
  int ok = 1;
  int64_t want = 0;
#define HELD_IS(what)                                                                     \
  do {                                                                                    \
    ENTRY(d, d->k->own_memory(&d->env, &held));                                           \
    if (held != (uint64_t)want) {                                                         \
      fprintf(stderr, "FAIL: %s own memory after %s: %llu bytes, the formulas say %lld\n", \
              d->name, what, (unsigned long long)held, (long long)want);                  \
      ok = 0;                                                                             \
    }                                                                                     \
  } while (0)
  HELD_IS("nothing");
  float *x = random_values(R * D, -1, 1, F32), *w = random_values(3 * H * HD * D, -1, 1, F32);
  float *b = random_values(3 * H * HD, -1, 1, F32);
  void *dx = upload(d, x, R * D, F32), *dw = upload(d, w, 3 * H * HD * D, F32);
  void *db = upload(d, b, 3 * H * HD, F32);
  void *xb = upload(d, x, R * D, BF16), *wb = upload(d, w, OUT * D, BF16);
  void *bb = upload(d, b, OUT, BF16), *yb = upload_poison(d, R * OUT, BF16);
  void *y = upload_poison(d, R * OUT, F32), *context = upload_poison(d, R * H * HD, F32);
  void *scratch = upload_poison(d, R * 3 * HD + T * T, F32);
  ENTRY(d, d->k->linear_f32(&d->env, dx, dw, db, y, R, D, OUT));
  if (d->k->device == HTP_KERNEL_DEVICE_CHECKED)
    want = HTP_CUDA_LT_WORKSPACE_BYTES;
  HELD_IS("an f32 linear");
  ENTRY(d, d->k->linear_bf16(&d->env, xb, wb, bb, yb, R, D, OUT));
  want += htp_cuda_sums_bytes(R, OUT);
  HELD_IS("a bf16 linear with a bias");
  const float *parts[2] = {y, y};
  ENTRY(d, d->k->sum_f32(&d->env, parts, 2, y, R * OUT));
  want += htp_cuda_staging_bytes(2 * (int64_t)sizeof(float *), 0);
  HELD_IS("a sum of two parts");
  const int32_t every[H] = {0, 1, 2};
  ENTRY(d, d->k->attention_heads_f32(&d->env, dx, dw, db, context, scratch, B, T, D, H, HD,
                                     every, H));
  want += htp_cuda_heads_bytes(B, T, D, H, HD, 4);
  HELD_IS("every head");
#undef HELD_IS
  printf("  %s own memory: %s (%llu bytes after a bf16 linear, a sum and every head)\n",
         d->name, ok ? "ok" : "FAIL", (unsigned long long)held);
  failures += !ok;
  void *all[] = {dx, dw, db, xb, wb, bb, yb, y, context, scratch};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
    release(d, all[i]);
  free(x), free(w), free(b);
}

/* Sizes past the kernels' int arguments (htp_kernel_gemm_sizes_problem,
 * htp_kernel_attention_sizes_problem) are refused on every device before
 * any pointer is read, naming the size: here with 16-element buffers that
 * nothing may touch (a linear of 2^31 rows; an attention of 46,341 tokens,
 * whose scores no int can count; one whose qkv width overflows int64). */
static void int_size_cases(device *d) {
  for (int t = F32; t <= BF16; ++t) {
    void *a = upload_poison(d, 16, (dtype)t), *b = upload_poison(d, 16, (dtype)t);
    float *scratch = upload_poison(d, 16, F32);
    const htp_kernel_status linear =
        run_linear(d, (dtype)t, a, a, NULL, b, (int64_t)1 << 31, 4, 4);
    const int linear_named = strstr(d->error, "rows = 2147483648 is too large") != NULL;
    const htp_kernel_status attention =
        run_attention(d, (dtype)t, a, a, NULL, a, NULL, b, scratch, 16, 1, 46341, 4, 1, 4);
    const int attention_named = strstr(d->error, "tokens x tokens = 2147488281") != NULL;
    /* 3 x heads x head_dim past int64 is said as such, not as a negative size. */
    const htp_kernel_status wide = run_attention(d, (dtype)t, a, a, NULL, a, NULL, b, scratch,
                                                 16, 1, 1, 4, INT_MAX, INT_MAX);
    const int wide_named = strstr(d->error, "3 x heads x head_dim overflows 64 bits") != NULL;
    const int ok = linear != HTP_KERNEL_OK && linear_named && attention != HTP_KERNEL_OK &&
                   attention_named && wide != HTP_KERNEL_OK && wide_named;
    printf("  %-46s %s%s\n", t == F32 ? "int sizes f32" : "int sizes bf16",
           ok ? "refused: ok" : "FAIL: ", ok ? "" : d->error);
    failures += !ok;
    release(d, a), release(d, b), release(d, scratch);
  }
}

/* Every case that goes through a table, on device d, at the given shapes. */
static void table_cases(device *d, const shape *shapes, size_t count) {
  int_size_cases(d);
  for (size_t i = 0; i < count; ++i) {
    forward_cases(d, &shapes[i], F32);
    forward_cases(d, &shapes[i], BF16);
    precision_cases(d, &shapes[i]);
  }
  sum_cases(d);
  memory_cases(d);
  embed_cases(d);
}

/* The checked device: the CPU's kernels behind a GPU's contracts. */
static void checked_cases(void) {
  device d = {.name = "checked", .k = htp_checked_kernel_table()};
  if (htp_checked_kernel_env_create(&d.env, d.error, sizeof d.error) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: htp_checked_kernel_env_create: %s\n", d.error);
    failures++;
    return;
  }
  const char *which = getenv("HTP_TEST_CHECKED_SHAPES");
  const int all = which && strcmp(which, "all") == 0;
  printf("the cases on the checked device (%s):\n",
         all ? "every shape" : "the small and odd shapes");
  const size_t count = sizeof SHAPES / sizeof *SHAPES;
  const shape cheap[] = {SHAPES[0], SHAPES[count - 1]}; /* small and odd */
  own_memory_cases(&d);
  table_cases(&d, all ? SHAPES : cheap, all ? count : 2);
  /* A residual overlapping y is refused before anything runs (the fused
   * kernel reads r while it writes y); the device memory stays as it was. */
  {
    float zeros[4 * 4 + 1] = {0}, w[4 * 4] = {0};
    float *buf = upload(&d, zeros, 17, F32), *dw = upload(&d, w, 16, F32);
    const htp_kernel_status rc =
        d.k->linear_residual_f32(&d.env, dw, dw, NULL, buf + 1, buf, 4, 4, 4);
    float *after = download(&d, buf, 17, F32);
    const int ok = rc == HTP_KERNEL_ERR_INVALID && strstr(d.error, "r and y overlap") != NULL &&
                   memcmp(after, zeros, sizeof zeros) == 0;
    printf("  %-46s %s: %s\n", "checked linear_residual r overlapping y",
           ok ? "refused: ok" : "FAIL", d.error);
    failures += !ok;
    release(&d, buf), release(&d, dw), free(after);
  }
  htp_checked_kernel_env_destroy(&d.env);
}

/* ----- Mutants: wrong kernels the cases must reject (no GPU needed) ------ */

typedef enum mutation {
  MUTATION_NONE,
  DROP_ONE_TERM,    /* linear: one of the K products left out */
  TF32_INPUTS,      /* linear, attention: operands rounded to 10 mantissa bits */
  EPSILON_TIMES_10, /* layer norm */
  GELU_FORM_SWAPPED,
  EXTRA_HEAD,       /* attention_heads writes one unlisted head too */
  NO_ACCUMULATE,    /* linear_units overwrites where it should add */
  RESIDUAL_SHIFTED  /* linear_residual reads r one element off (a stride slip) */
} mutation;

static mutation active = MUTATION_NONE;

static const htp_kernel_table *cpu_table(void) { return htp_cpu_kernel_table(); }

/* A host copy of n floats (the CPU device's memory is the host's). */
static float *copy_of(const float *src, int64_t n) {
  float *copy = host_alloc(n);
  if (n > 0) memcpy(copy, src, sizeof(float) * (size_t)n);
  return copy;
}

/* TF32: round to nearest on the 13 low mantissa bits, then drop them. */
static float *tf32_copy(const float *src, int64_t n) {
  float *copy = copy_of(src, n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &copy[i], sizeof bits);
    bits = (bits + 0x1000u) & ~0x1FFFu;
    memcpy(&copy[i], &bits, sizeof bits);
  }
  return copy;
}

static htp_kernel_status mutant_linear(const htp_kernel_env *env, const float *x, const float *w,
                                       const float *b, float *y, int64_t rows, int64_t in,
                                       int64_t out) {
  if (active != DROP_ONE_TERM && active != TF32_INPUTS)
    return cpu_table()->linear_f32(env, x, w, b, y, rows, in, out);
  float *wc = active == TF32_INPUTS ? tf32_copy(w, out * in) : copy_of(w, out * in);
  float *xc = active == TF32_INPUTS ? tf32_copy(x, rows * in) : copy_of(x, rows * in);
  if (active == DROP_ONE_TERM)
    for (int64_t o = 0; o < out; ++o) wc[o * in + in / 2] = 0.0f;
  const htp_kernel_status rc = cpu_table()->linear_f32(env, xc, wc, b, y, rows, in, out);
  free(wc), free(xc);
  return rc;
}

static htp_kernel_status mutant_layer_norm(const htp_kernel_env *env, const float *x,
                                           const float *gamma, const float *beta, float *y,
                                           int64_t rows, int64_t dim, float epsilon) {
  return cpu_table()->layer_norm_f32(env, x, gamma, beta, y, rows, dim,
                                     active == EPSILON_TIMES_10 ? 10.0f * epsilon : epsilon);
}

static htp_kernel_status mutant_gelu(const htp_kernel_env *env, const float *x, float *y,
                                     int64_t n, int32_t tanh_approx) {
  return cpu_table()->gelu_f32(env, x, y, n,
                               active == GELU_FORM_SWAPPED ? !tanh_approx : tanh_approx);
}

static htp_kernel_status mutant_attention(const htp_kernel_env *env, const float *x,
                                          const float *wqkv, const float *bqkv,
                                          const float *wproj, const float *bproj, float *y,
                                          float *scratch, int64_t scratch_floats, int64_t batch,
                                          int64_t tokens, int64_t dim, int64_t heads,
                                          int64_t head_dim) {
  if (active != TF32_INPUTS)
    return cpu_table()->attention_f32(env, x, wqkv, bqkv, wproj, bproj, y, scratch,
                                      scratch_floats, batch, tokens, dim, heads, head_dim);
  const int64_t inner = heads * head_dim;
  float *xc = tf32_copy(x, batch * tokens * dim), *wq = tf32_copy(wqkv, 3 * inner * dim);
  float *wp = tf32_copy(wproj, dim * inner);
  const htp_kernel_status rc = cpu_table()->attention_f32(
      env, xc, wq, bqkv, wp, bproj, y, scratch, scratch_floats, batch, tokens, dim, heads,
      head_dim);
  free(xc), free(wq), free(wp);
  return rc;
}

static htp_kernel_status mutant_attention_heads(const htp_kernel_env *env, const float *x,
                                                const float *wqkv, const float *bqkv,
                                                float *context, float *scratch, int64_t batch,
                                                int64_t tokens, int64_t dim, int64_t heads,
                                                int64_t head_dim, const int32_t *list,
                                                int64_t count) {
  int32_t more[64];
  int64_t n = 0;
  for (int64_t i = 0; i < count && n < 63; ++i) more[n++] = list[i];
  if (active == EXTRA_HEAD) /* the first head not listed */
    for (int32_t h = 0; h < heads; ++h) {
      int listed = 0;
      for (int64_t i = 0; i < count; ++i) listed |= list[i] == h;
      if (!listed) {
        more[n++] = h;
        break;
      }
    }
  return cpu_table()->attention_heads_f32(env, x, wqkv, bqkv, context, scratch, batch, tokens,
                                          dim, heads, head_dim, more, n);
}

static htp_kernel_status mutant_linear_units(const htp_kernel_env *env, const float *a,
                                             const float *w, float *y, int64_t rows, int64_t in,
                                             int64_t out, int64_t width, const int32_t *units,
                                             int64_t count, int32_t accumulate) {
  return cpu_table()->linear_units_f32(env, a, w, y, rows, in, out, width, units, count,
                                       active == NO_ACCUMULATE ? 0 : accumulate);
}

static htp_kernel_status mutant_linear_residual(const htp_kernel_env *env, const float *x,
                                                const float *w, const float *b, const float *r,
                                                float *y, int64_t rows, int64_t in,
                                                int64_t out) {
  htp_kernel_status s = cpu_table()->linear_f32(env, x, w, b, y, rows, in, out);
  const int64_t n = rows * out, shift = active == RESIDUAL_SHIFTED;
  for (int64_t i = 0; s == HTP_KERNEL_OK && i < n; ++i) y[i] += r[(i + shift) % n];
  return s;
}

/* Each mutant against the case that covers its entry: caught when that
 * case reports a failure. The failures it reports are expected and not
 * counted; a mutant that passes is. */
static void mutant_cases(void) {
  static htp_kernel_table mutant;
  mutant = *cpu_table();
  mutant.name = "cpu mutant";
  mutant.linear_f32 = mutant_linear;
  mutant.layer_norm_f32 = mutant_layer_norm;
  mutant.gelu_f32 = mutant_gelu;
  mutant.attention_f32 = mutant_attention;
  mutant.attention_heads_f32 = mutant_attention_heads;
  mutant.linear_units_f32 = mutant_linear_units;
  mutant.linear_residual_f32 = mutant_linear_residual;
  device d = {.name = "cpu mutant", .k = &mutant};
  if (htp_cpu_kernel_env_create(&d.env, d.error, sizeof d.error) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: htp_cpu_kernel_env_create: %s\n", d.error);
    failures++;
    return;
  }
  const char *which = getenv("HTP_TEST_CHECKED_SHAPES");
  const int shapes = which && strcmp(which, "all") == 0 ? 2 : 1;
  printf("mutants (the FAILs inside each are expected; each mutant must be caught):\n");
  for (int k = 0; k < shapes; ++k) {
    const shape *s = &SHAPES[k];
    const int32_t heads[] = {(int32_t)s->heads - 1, 0, (int32_t)(s->heads / 2)};
    const int32_t last = (int32_t)(s->mlp / s->unit_width) - 1;
    const int32_t blocks[] = {1, 2, 3, last / 2 + 1, last};
    static const char *names[] = {"",
                                  "linear drops one of K terms",
                                  "TF32 inputs",
                                  "layer_norm epsilon x10",
                                  "gelu forms swapped",
                                  "attention_heads writes a head too many",
                                  "linear_units ignores accumulate",
                                  "linear_residual reads r one element off"};
    for (int m = DROP_ONE_TERM; m <= RESIDUAL_SHIFTED; ++m) {
      const int before = failures;
      active = (mutation)m;
      switch (active) {
      case DROP_ONE_TERM: linear_case(&d, s, F32, s->mlp, s->dim, 1, 0, "mutant fc2"); break;
      case TF32_INPUTS:
        linear_case(&d, s, F32, s->dim, s->mlp, 1, 0, "mutant fc1");
        attention_cases(&d, s, F32, 1, 1, heads, 3);
        break;
      case EPSILON_TIMES_10: layer_norm_case(&d, s, F32); break;
      case GELU_FORM_SWAPPED: elementwise_cases(&d, s, F32); break;
      case EXTRA_HEAD: attention_cases(&d, s, F32, 1, 1, heads, 3); break;
      case NO_ACCUMULATE: linear_units_cases(&d, s, F32, blocks, 5); break;
      case RESIDUAL_SHIFTED:
        linear_case(&d, s, F32, s->mlp, s->dim, 1, 1, "mutant fc2 + residual");
        break;
      default: break;
      }
      active = MUTATION_NONE;
      /* TF32 must be caught by both its cases (at least 2 failures). */
      const int caught = failures - before >= (m == TF32_INPUTS ? 2 : 1);
      failures = before + !caught;
      printf("-> mutant %s, %s: %s\n", names[m], s->name, caught ? "caught: ok" : "NOT CAUGHT: FAIL");
    }
  }
  htp_cpu_kernel_env_destroy(&d.env);
}

/* ----- CUDA only: the direct API's refusals, reduction, packing, imputation */

#define CHECK_CALL(call)                                                                 \
  do {                                                                                  \
    if ((call) || htp_cuda_kernels_sync(kernels)) {                                     \
      fprintf(stderr, "FAIL: %s: %s\n", #call, htp_cuda_kernels_error(kernels));        \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

/* got (device, n floats) bit for bit against want (host). */
static void compare_bits(const char *name, const float *device_data, const float *want,
                         int64_t n) {
  float *got = host_alloc(n);
  cuda_or_die(cudaMemcpy(got, device_data, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost),
              "cudaMemcpy from the device");
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (bad < 5)
        printf("    mismatch %s [%lld]: got %.9g want %.9g\n", name, (long long)i, got[i],
               want[i]);
      ++bad;
    }
  printf("  %-46s %9lld compared bit for bit %s\n", name, (long long)n, bad ? "FAIL" : "ok");
  failures += bad > 0;
  free(got);
}

/* pack_in_units' layout: unit list[i] of the source pair into slot slot + i
 * of a block of block_units units. */
static void cpu_pack_units(const float *first, const float *bias, const float *second,
                           int64_t units, int64_t width, int64_t d, int64_t parts,
                           const int32_t *list, int64_t count, float *block,
                           int64_t block_units, int64_t slot) {
  const int64_t src_inner = units * width, inner = block_units * width;
  float *block_bias = block + parts * inner * d, *block_second = block_bias + parts * inner;
  for (int64_t j = 0; j < count; ++j) {
    const int64_t u = list[j], to = slot + j;
    for (int64_t part = 0; part < parts; ++part) {
      memcpy(block + (part * inner + to * width) * d, first + (part * src_inner + u * width) * d,
             (size_t)(width * d) * sizeof(float));
      for (int64_t c = 0; c < width; ++c)
        block_bias[part * inner + to * width + c] =
            bias ? bias[part * src_inner + u * width + c] : 0.0f;
    }
    for (int64_t o = 0; o < d; ++o)
      memcpy(block_second + o * inner + to * width, second + o * src_inner + u * width,
             (size_t)width * sizeof(float));
  }
}

/* htp_impute_fill: mode 0 zero, 1 average, 2 same (from stored). */
static void cpu_impute(int mode, float *act, const float *stored, int64_t rows,
                       int64_t row_stride, int64_t stored_stride, int64_t width,
                       const int32_t *kept, int64_t num_kept, const int32_t *pruned,
                       int64_t num_pruned) {
  for (int64_t r = 0; r < rows; ++r) {
    float *row = act + r * row_stride;
    if (mode == 1 && num_kept > 0) {
      for (int64_t j = 0; j < width; ++j) {
        double sum = 0.0;
        for (int64_t i = 0; i < num_kept; ++i) sum += row[kept[i] * width + j];
        const float mean = (float)(sum / (double)num_kept);
        for (int64_t i = 0; i < num_pruned; ++i) row[pruned[i] * width + j] = mean;
      }
      continue;
    }
    for (int64_t i = 0; i < num_pruned; ++i)
      for (int64_t j = 0; j < width; ++j)
        row[pruned[i] * width + j] =
            mode == 2 ? stored[r * stored_stride + pruned[i] * width + j] : 0.0f;
  }
}

static void cuda_only_cases(void) {
  char err[256];
  htp_cuda_kernels *kernels = NULL;
  if (htp_cuda_kernels_create(0, &kernels, err, sizeof err)) {
    fprintf(stderr, "FAIL: %s\n", err);
    exit(1);
  }
  printf("the CUDA direct API:\n");
  /* An id out of range is refused on the host, before any launch. */
  float *dummy = to_device(NULL, 64);
  const int32_t bad_head = 5, unit = 0;
  int refused = htp_cuda_attention_heads_f32(kernels, dummy, dummy, dummy, dummy, dummy, 1, 2, 4,
                                             5, 2, &bad_head, 1) != 0;
  /* A slot range past the block is refused. */
  refused &= htp_cuda_pack_units_f32(kernels, dummy, NULL, dummy, 1, 1, 1, 1, &unit, 1, dummy, 1,
                                     1) != 0;
  printf("  %-46s %s\n", "head 5 of 5, slot 1 of a 1-unit block", refused ? "refused: ok" : "FAIL");
  failures += !refused;
  cudaFree(dummy);

  /* Three ranks' partial sums, in place over the first; none: zeros. */
  const int64_t n = 100003;
  float *in[3], *din[3];
  for (int k = 0; k < 3; ++k) in[k] = host_random(n, -100, 100), din[k] = to_device(in[k], n);
  float *want = host_alloc(n), *poison = host_alloc(n);
  for (int64_t i = 0; i < n; ++i) want[i] = (in[0][i] + in[1][i]) + in[2][i];
  poison_bytes(poison, sizeof(float) * (size_t)n);
  CHECK_CALL(htp_cuda_reduce_sum_f32(kernels, (const float *const *)din, 3, din[0], n));
  compare_bits("reduce_sum (in place)", din[0], want, n);
  float *dy = to_device(poison, n);
  CHECK_CALL(htp_cuda_reduce_sum_f32(kernels, (const float *const *)din, 0, dy, n));
  memset(want, 0, sizeof(float) * (size_t)n);
  compare_bits("reduce_sum no inputs (zeros)", dy, want, n);
  for (int k = 0; k < 3; ++k) cudaFree(din[k]), free(in[k]);
  cudaFree(dy), free(want), free(poison);

  /* Packing into a poisoned block: an attention pair (3 parts) of 5 heads,
   * heads {4, 1} into slots 1, 2 of a 4-unit block; an MLP pair (1 part,
   * no bias) of 9 units, unit 7 into slot 0 of a 1-unit block. Slots not
   * packed keep the poison on both sides, so bits compare. */
  for (int variant = 0; variant < 2; ++variant) {
    const int64_t parts = variant ? 1 : 3, units = variant ? 9 : 5, width = variant ? 37 : 24;
    const int64_t d = 120, block_units = variant ? 1 : 4, slot = variant ? 0 : 1;
    const int32_t list_a[] = {4, 1}, list_b[] = {7};
    const int32_t *list = variant ? list_b : list_a;
    const int64_t count = variant ? 1 : 2;
    const int64_t first_n = parts * units * width * d, bias_n = parts * units * width;
    const int64_t second_n = d * units * width;
    const int64_t block_n = block_units * (parts * width * d + parts * width + d * width);
    float *first = host_random(first_n, -1, 1), *bias = host_random(bias_n, -1, 1);
    float *second = host_random(second_n, -1, 1), *block = host_alloc(block_n);
    poison_bytes(block, sizeof(float) * (size_t)block_n);
    float *dfirst = to_device(first, first_n), *dbias = to_device(bias, bias_n);
    float *dsecond = to_device(second, second_n), *dblock = to_device(block, block_n);
    CHECK_CALL(htp_cuda_pack_units_f32(kernels, dfirst, variant ? NULL : dbias, dsecond, units,
                                       width, d, parts, list, count, dblock, block_units, slot));
    cpu_pack_units(first, variant ? NULL : bias, second, units, width, d, parts, list, count,
                   block, block_units, slot);
    compare_bits(variant ? "pack_units mlp shard" : "pack_units heads {4,1}", dblock, block,
                 block_n);
    cudaFree(dfirst), cudaFree(dbias), cudaFree(dsecond), cudaFree(dblock);
    free(first), free(bias), free(second), free(block);
  }

  /* Imputation over [rows, 9 units of 37 + 5 padding columns], in place
   * (nothing to poison: the kept units are its input). The mean is summed
   * in double in list order on both sides, so bits compare. */
  const int64_t rows = 211, width = 37, row_stride = 9 * width + 5;
  const int32_t kept[] = {0, 2, 3, 5, 8}, pruned[] = {1, 4, 6, 7};
  float *stored = host_random(rows * row_stride, -2, 2);
  float *dstored = to_device(stored, rows * row_stride);
  for (int variant = 0; variant < 4; ++variant) {
    /* zero, average, same, average with nothing kept (zero, as the CPU) */
    const int mode = variant == 3 ? 1 : variant;
    const int64_t num_kept = variant == 3 ? 0 : 5;
    float *act = host_random(rows * row_stride, -4, 4);
    float *dact = to_device(act, rows * row_stride);
    if (mode == 0)
      CHECK_CALL(htp_cuda_impute_zero_f32(kernels, dact, rows, row_stride, width, pruned, 4));
    else if (mode == 1)
      CHECK_CALL(htp_cuda_impute_average_f32(kernels, dact, rows, row_stride, width, kept,
                                             num_kept, pruned, 4));
    else
      CHECK_CALL(htp_cuda_impute_same_f32(kernels, dact, dstored, rows, row_stride, row_stride,
                                          width, pruned, 4));
    cpu_impute(mode, act, stored, rows, row_stride, row_stride, width, kept, num_kept, pruned, 4);
    static const char *names[] = {"impute_zero", "impute_average", "impute_same",
                                  "impute_average none kept"};
    compare_bits(names[variant], dact, act, rows * row_stride);
    cudaFree(dact), free(act);
  }
  cudaFree(dstored), free(stored);
  htp_cuda_kernels_destroy(kernels);
}

/* ----- SM partitions and a caller's stream (DESIGN §10) ------------------ */

static int contains(const char *text, const char *part) { return strstr(text, part) != NULL; }
static int ends_with(const char *text, const char *tail) {
  const size_t n = strlen(text), k = strlen(tail);
  return n >= k && strcmp(text + n - k, tail) == 0;
}

/* The count check alone, on the figures of an H100 (132 SMs: 16 groups of
 * 8) and of a device that cannot be split: no GPU needed. */
static void sm_count_cases(void) {
  static const struct {
    int count, step, groups, valid;
    const char *says;
  } cases[] = {
      {8, 8, 16, 1, ""},
      {64, 8, 16, 1, ""},
      {128, 8, 16, 1, ""},
      {20, 8, 16, 0, "; nearest: 16 or 24"},
      {4, 8, 16, 0, "; nearest: 8"},
      {136, 8, 16, 0, "; nearest: 128"},
      {20, 8, 16, 0, "valid counts are 8, 16, ..., 128"},
      {8, 0, 0, 0, "cannot be partitioned"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    char why[512] = "";
    const int rc = htp_sm_count_check("device 0", cases[i].count, 132, cases[i].step,
                                      cases[i].groups, why, sizeof why);
    /* A "; nearest" hint ends the message; the rest may be anywhere. */
    const int said = cases[i].says[0] == ';' ? ends_with(why, cases[i].says)
                                              : contains(why, cases[i].says);
    const int ok = (rc == 0) == cases[i].valid && (cases[i].valid || said);
    printf("%-30s %d SMs: %s%s%s\n", "sm count check", cases[i].count, ok ? "ok" : "FAIL",
           why[0] ? ": " : "", why);
    failures += !ok;
  }
}

/* Refusals before any device is touched: a negative count, a partition
 * with a caller's stream. */
static void env_refusal_cases(void) {
  const htp_kernel_table *table = htp_cuda_kernel_table();
  char why[512];
  htp_kernel_env env;
  int fake_stream = 0;
  const int negative = htp_cuda_kernel_env_create_on(0, -8, NULL, &env, why, sizeof why);
  int ok = negative == HTP_KERNEL_ERR_INVALID && contains(why, "-8 SMs") && !env.kernels;
  printf("%-30s %s: %s\n", "env_create_on -8 SMs", ok ? "refused: ok" : "FAIL", why);
  failures += !ok;
  const int both = htp_cuda_kernel_env_create_on(0, 8, &fake_stream, &env, why, sizeof why);
  ok = both == HTP_KERNEL_ERR_INVALID && contains(why, "exclude each other") && !env.kernels;
  printf("%-30s %s: %s\n", "env_create_on SMs + stream", ok ? "refused: ok" : "FAIL", why);
  failures += !ok;
  /* The refused environment has no device: entries fail, never crash. */
  ok = table->add_f32(&env, NULL, NULL, NULL, 1) == HTP_KERNEL_ERR_SYSTEM;
  printf("%-30s %s\n", "entry on a refused env", ok ? "fails: ok" : "FAIL");
  failures += !ok;
  /* A misspelt kernel switch is refused by name before the device is
   * touched (kernels_internal.h), with or without a GPU (HTP_CUDA_GEMM's
   * list goes on as the build has CUTLASS or not). */
  const char *switches[][2] = {{"HTP_CUDA_ATTENTION", "mma, wmma or head"},
                               {"HTP_CUDA_LINEAR_EPILOGUE", "pass or cublaslt"},
                               {"HTP_CUDA_LAYER_NORM", "block or warp"},
                               {"HTP_CUDA_RESIDUAL", "add or epilogue"},
                               {"HTP_CUDA_GEMM", "cublas"}};
  for (int i = 0; i < 5; ++i) {
    setenv(switches[i][0], "fused", 1);
    const int rc = htp_cuda_kernel_env_create(0, &env, why, sizeof why);
    char want[96];
    snprintf(want, sizeof want, "%s=fused: expected %s", switches[i][0], switches[i][1]);
    ok = rc != HTP_KERNEL_OK && contains(why, want) && !env.kernels;
    printf("%-30s %s: %s\n", switches[i][0], ok ? "refused: ok" : "FAIL", why);
    failures += !ok;
    htp_cuda_kernel_env_destroy(&env);
    unsetenv(switches[i][0]);
  }
}

/* Without a GPU a partition fails with a message and leaves no device. */
static void no_gpu_partition_case(void) {
  char why[512];
  htp_kernel_env env;
  const int rc = htp_cuda_kernel_env_create_on(0, 8, NULL, &env, why, sizeof why);
  const int ok = rc == HTP_KERNEL_ERR_SYSTEM && why[0] && !env.kernels;
  printf("%-30s %s: %s\n", "partition without a GPU", ok ? "refused: ok" : "FAIL", why);
  failures += !ok;
  htp_cuda_kernel_env_destroy(&env);
}

/* a + a through the table on env, checked on the host. */
static void add_through(const htp_kernel_env *env, const char *name) {
  const htp_kernel_table *table = htp_cuda_kernel_table();
  const int64_t n = 10007;
  float *host = host_random(n, -4, 4), *back = host_alloc(n);
  double *want = doubles(n);
  void *device_data = NULL;
  int rc = table->alloc(env, (size_t)n * sizeof(float), &device_data) ||
           table->to_device(env, device_data, host, (size_t)n * sizeof(float)) ||
           table->mark(env, 0, 0) ||
           table->add_f32(env, device_data, device_data, device_data, n) ||
           table->mark(env, 0, 1) ||
           table->to_host(env, back, device_data, (size_t)n * sizeof(float));
  double seconds = -1;
  if (!rc) rc = table->elapsed(env, 0, &seconds) || table->release(env, device_data);
  if (rc) {
    fprintf(stderr, "FAIL: %s: %s\n", name, env->error);
    failures++;
  } else {
    for (int64_t i = 0; i < n; ++i) want[i] = 2.0 * host[i];
    failures += check_close(name, back, n, NULL, 1, want, NULL) > 0;
  }
  free(host), free(back), free(want);
}

static void partition_cases(void) {
  char why[512];
  htp_kernel_env env;
  printf("SM partitions:\n");
  /* 8 SMs: a partition on every GPU with green contexts (sm_90: steps of
   * 8; older: of 2 or 4). */
  if (htp_cuda_kernel_env_create_on(0, 8, NULL, &env, why, sizeof why) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: a partition of 8 SMs: %s\n", why);
    exit(1);
  }
  const htp_cuda_kernels *object = env.kernels;
  int ok = env.stream && env.stream == (void *)object->stream && object->partition &&
           htp_cuda_partition_sm_count(object->partition) == 8 && !object->owns_stream;
  printf("%-30s %s\n", "partition of 8 SMs", ok ? "ok" : "FAIL");
  failures += !ok;
  add_through(&env, "partition: add, marks");
  htp_cuda_kernel_env_destroy(&env);

  /* 9 SMs is no whole number of steps on any GPU that splits in 2, 4, 8. */
  int rc = htp_cuda_kernel_env_create_on(0, 9, NULL, &env, why, sizeof why);
  ok = rc == HTP_KERNEL_ERR_INVALID && contains(why, "valid counts are") && !env.kernels;
  printf("%-30s %s: %s\n", "partition of 9 SMs", ok ? "refused: ok" : "FAIL", why);
  failures += !ok;

  /* Partitions of 8 until the device is used up: disjoint, so they run
   * out; the refusal says how many are free; destroying one frees its SMs. */
  enum { MOST = 64 };
  htp_kernel_env held[MOST];
  int count = 0;
  while (count < MOST &&
         (rc = htp_cuda_kernel_env_create_on(0, 8, NULL, &held[count], why, sizeof why)) ==
             HTP_KERNEL_OK)
    ++count;
  ok = count >= 1 && count < MOST && rc == HTP_KERNEL_ERR_INVALID && contains(why, "are free");
  printf("%-30s %d partitions of 8, then %s: %s\n", "partitions use the device up", count,
         ok ? "refused: ok" : "FAIL", why);
  failures += !ok;
  if (count > 0) {
    htp_cuda_kernel_env_destroy(&held[--count]);
    rc = htp_cuda_kernel_env_create_on(0, 8, NULL, &held[count], why, sizeof why);
    ok = rc == HTP_KERNEL_OK;
    printf("%-30s %s%s\n", "freed SMs are reused", ok ? "ok" : "FAIL: ", ok ? "" : why);
    failures += !ok;
    if (ok) ++count;
  }
  while (count > 0) htp_cuda_kernel_env_destroy(&held[--count]);

  /* A caller's stream: used, never destroyed with the environment. */
  cudaStream_t stream = NULL;
  cuda_or_die(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (htp_cuda_kernel_env_create_on(0, 0, stream, &env, why, sizeof why) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: a caller's stream: %s\n", why);
    exit(1);
  }
  ok = env.stream == (void *)stream;
  printf("%-30s %s\n", "caller's stream used", ok ? "ok" : "FAIL");
  failures += !ok;
  add_through(&env, "caller's stream: add, marks");
  htp_cuda_kernel_env_destroy(&env);
  ok = cudaStreamQuery(stream) == cudaSuccess;
  printf("%-30s %s\n", "caller's stream left alive", ok ? "ok" : "FAIL");
  failures += !ok;
  cuda_or_die(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

/* ----- Where a partition's work ran: the SM-id probe ---------------------- */

enum { PROBE_BLOCKS = 2048, MAX_SM_ID = 1024 };

/* The distinct SM ids the probe's blocks saw on stream, as a set; -1 when
 * the probe failed or a block recorded no id or one out of range. */
static int probe_sm_set(void *stream, const char *where, unsigned char *seen) {
  static unsigned ids[PROBE_BLOCKS];
  char why[256];
  memset(seen, 0, MAX_SM_ID);
  if (htp_cuda_probe_sm_ids(stream, PROBE_BLOCKS, ids, why, sizeof why)) {
    printf("  FAIL %s: %s\n", where, why);
    return -1;
  }
  int distinct = 0;
  for (int b = 0; b < PROBE_BLOCKS; ++b) {
    if (ids[b] >= MAX_SM_ID) {
      printf("  FAIL %s: block %d recorded SM id %u\n", where, b, ids[b]);
      return -1;
    }
    distinct += !seen[ids[b]];
    seen[ids[b]] = 1;
  }
  printf("  %-46s %d distinct SMs:", where, distinct);
  for (int i = 0; i < MAX_SM_ID; ++i)
    if (seen[i]) printf(" %d", i);
  printf("\n");
  return distinct;
}

/* Partitions of 8 and 16 SMs at once: each one's blocks ran on at most its
 * count of SMs, the two sets are disjoint, and the whole device (an own
 * stream) shows more than 16, so the probe would have seen a leak. */
static void sm_placement_cases(void) {
  static unsigned char whole[MAX_SM_ID], first[MAX_SM_ID], second[MAX_SM_ID];
  char why[512];
  htp_kernel_env all, a, b;
  printf("where partitions' work ran (%%smid of %d blocks):\n", PROBE_BLOCKS);
  if (htp_cuda_kernel_env_create(0, &all, why, sizeof why) != HTP_KERNEL_OK ||
      htp_cuda_kernel_env_create_on(0, 8, NULL, &a, why, sizeof why) != HTP_KERNEL_OK ||
      htp_cuda_kernel_env_create_on(0, 16, NULL, &b, why, sizeof why) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: the probe's environments: %s\n", why);
    exit(1);
  }
  const int n_all = probe_sm_set(all.stream, "whole device", whole);
  const int n_a = probe_sm_set(a.stream, "partition of 8", first);
  const int n_b = probe_sm_set(b.stream, "partition of 16", second);
  int shared = 0;
  for (int i = 0; i < MAX_SM_ID; ++i) shared += first[i] && second[i];
  const int ok_all = n_all > 16, ok_a = n_a >= 1 && n_a <= 8, ok_b = n_b >= 1 && n_b <= 16;
  printf("  %-46s %s\n", "whole device sees more than 16 SMs", ok_all ? "ok" : "FAIL");
  printf("  %-46s %s\n", "partition of 8 ran on at most 8 SMs", ok_a ? "ok" : "FAIL");
  printf("  %-46s %s\n", "partition of 16 ran on at most 16 SMs", ok_b ? "ok" : "FAIL");
  printf("  %-46s %d shared %s\n", "the two partitions' SMs are disjoint", shared,
         shared == 0 && n_a > 0 && n_b > 0 ? "ok" : "FAIL");
  failures += !ok_all + !ok_a + !ok_b + (shared != 0 || n_a <= 0 || n_b <= 0);
  htp_cuda_kernel_env_destroy(&b);
  htp_cuda_kernel_env_destroy(&a);
  htp_cuda_kernel_env_destroy(&all);
}

int main(void) {
  const double start = now();
  failures += checker_negative_control();
  sm_count_cases();
  env_refusal_cases();
  checked_cases();
  mutant_cases();
  printf("checks without a GPU: %.1f s, %d failed\n", now() - start, failures);
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    no_gpu_partition_case();
    return no_device_exit(probe != cudaSuccess ? cudaGetErrorString(probe) : "no device",
                          failures);
  }
  device cuda = {.name = "cuda", .k = htp_cuda_kernel_table()};
  if (htp_cuda_kernel_env_create(0, &cuda.env, cuda.error, sizeof cuda.error) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: htp_cuda_kernel_env_create: %s\n", cuda.error);
    return 1;
  }
  printf("the cases on the GPU:\n");
  own_memory_cases(&cuda);
  table_cases(&cuda, SHAPES, sizeof SHAPES / sizeof *SHAPES);
  htp_cuda_kernel_env_destroy(&cuda.env);
  cuda_only_cases();
  partition_cases();
  sm_placement_cases();
  printf("%.1f s in all\n%s\n", now() - start, failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
