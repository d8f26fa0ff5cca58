/*===- test/kernels/test_train_cuda.c - Training entries against float64 --===*
 *
 * Every training entry of the CUDA kernel table (kernels/cuda/train.cu: the
 * backward of linear, layer norm, GELU and attention, the softmax
 * cross-entropy, SGD and AdamW; kernels/cuda/embed.cu: the model's ends)
 * against references computed here in double from the values the entry
 * read, element by element (cuda_test.h check_close), on a few odd shapes
 * and on ViT-B/16's (batch 2, 197 tokens, dim 768, MLP 3072; attention's
 * adjoint at batch 1, 12 heads of 64).
 *
 * Each output element i must be within tol_i = inherited_i + G_i + u |ref_i|
 * of the reference (u = 2^-24): G the rounding of its own sum of K terms
 * t (cuda_test.h random_sum_error: 4 sqrt(K) u ||t||_2, about 7 standard
 * deviations for terms of random sign, which all of these are; an
 * accumulated gradient's start value is one more term), inherited the
 * bound of what its inputs carried from earlier f32 stages:
 *   linear: inputs exact, inherited 0; dx K = out, dw and db K = rows.
 *   layer norm: x̂ errs by (s(dim) + 16u) inv (mean|x| + |x - μ|), s(n) =
 *     4 sqrt(n) u (cuda_test.h sum_error, the forward's bound); dγ
 *     inherits Σ_r |dy| Ex̂, dx = inv (g - mean g - x̂ mean(g x̂)) inherits
 *     inv (u|g| + E mean g + |x̂| E mean(g x̂) + Ex̂ |mean(g x̂)|) + (s(dim) +
 *     16u) |dx|.
 *   GELU: dx = dy GELU'(x), 8u |dy| (1 + |x| (1 + 0.134 x²) + |x| φ(x) (1 +
 *     x²)): erfcf, expf and tanh's argument and derivative, a few ulps each
 *     scaled by the slopes.
 *   attention: the forward recomputed with its bounds, then the adjoint
 *     (dP = dctx vᵀ, c = rowsum(P ∘ dP), dS = scale P ∘ (dP - c), dq = dS k,
 *     dk = dSᵀ q, dv = Pᵀ dctx, the projections), first order, each
 *     product Σ a b inheriting |a| Eb + Ea |b| over its terms: in
 *     quadrature where the errors come from independent GEMM outputs (q,
 *     k, v, dctx elements; different heads; different images), added
 *     where they may be correlated (P, dP, dS: every element of a row or
 *     column shares the same q or k errors). The added part makes this
 *     bound loose: at ViT-B/16 its mean is 0.55% of |dx| and 0.1-0.6% of
 *     the weight gradients (0.04% at the 50-token shape), and the CPU's
 *     errors reach 1/1000 of it; it catches wrong indices, heads, images,
 *     scales and terms, not a precision regression below that.
 *   cross-entropy: the row loss as T log Z + Σ_k t_k (max - l_k), terms
 *     of one sign, so s(classes) on them, Z = Σ e^{l - max} with (4 +
 *     1.2|l - max|) u per exp; dlogits = (p T - t) / rows by p's and T's.
 *   SGD, AdamW: each step's few roundings (u per operation on each term)
 *     carried through the steps, on w, m and v.
 *
 * The conventions are tested, not only the values:
 * - written outputs (dx, dlogits, the loss, the copies) are filled with NaN
 *   (0xFF bytes) before the entry, so an element left unwritten or added to
 *   fails (NaN is never accepted);
 * - accumulated gradients (dw, db, dgamma, ...) run twice, from zeros and
 *   from random values of the gradient's own size, so writing instead of
 *   adding fails by O(1);
 * - each entry runs with several subsets of its gradients NULL (not
 *   wanted), comparing the ones that are;
 * - the attention backward's shapes take both of its groupings (an image's
 *   heads batched, or a head's images) and more (image, head) pairs than
 *   its 64 slots both ways; one short of its scratch is refused;
 * - bad arguments (negative or overflowing sizes, too little scratch, a
 *   momentum without its buffer, betas out of range) are refused.
 *
 * Before looking for a GPU (so also on the build machines): the CUDA table
 * has every training entry, the attention backward's scratch count is the
 * CPU kernel's (which the runtime's balance hooks size it by), every entry
 * fails without crashing on a NULL environment, the checker's negative
 * control (cuda_test.h), and every case above on the checked device
 * (kernels/checked: the CPU's kernels behind a GPU's contracts), so the
 * references and bounds must accept an implementation that is right; the
 * ViT-B/16 shapes there only with HTP_TEST_CHECKED_SHAPES=all.
 *
 * Exits 77 (ctest: skipped) where no GPU is present, unless
 * HTP_REQUIRE_GPU=1 or a check that needs no GPU failed: then 1, as on any
 * CUDA error once a device was found. Never run on a GPU where it was
 * written: compiled, and the checked-device half run.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"
#include "kernels/htp_scratch.h"
#include "test/kernels/cuda_test.h"

#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures = 0;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ----- References: a value per element and what bounds its error --------- */

/* The reference of one output: per element its value (without an
 * accumulated output's start), the squares of its own sum's `terms` terms
 * (0 terms: no sum of its own) and the error it inherits from its inputs.
 * rows (NULL: all) lists the rows of the output, `cols` wide, it holds. */
typedef struct reference {
  double *value, *squares, *inherited;
  int64_t terms, cols, count;
  int64_t *rows;
} reference;

static reference reference_new(int64_t count, int64_t cols, int64_t terms, int64_t *rows) {
  reference r = {doubles(count * cols), doubles(count * cols), doubles(count * cols), terms,
                 cols, count, rows};
  memset(r.squares, 0, sizeof(double) * (size_t)(count * cols));
  memset(r.inherited, 0, sizeof(double) * (size_t)(count * cols));
  return r;
}

static void reference_free(reference *r) {
  free(r->value), free(r->squares), free(r->inherited), free(r->rows);
  r->value = r->squares = r->inherited = NULL;
  r->rows = NULL;
}

/* got (the whole output, total rows) against the reference, start (host,
 * the whole output) added for an accumulated output: element-wise, and no
 * element left unwritten. Returns 1 on a failure. */
static int check_reference(const char *name, const float *got, int64_t total_rows,
                           const reference *r, const float *start) {
  const int64_t n = r->count * r->cols;
  double *want = doubles(n), *tol = doubles(n);
  for (int64_t k = 0; k < r->count; ++k)
    for (int64_t c = 0; c < r->cols; ++c) {
      const int64_t i = k * r->cols + c, row = r->rows ? r->rows[k] : k;
      const double old = start ? start[row * r->cols + c] : 0.0;
      want[i] = r->value[i] + old;
      const double own = r->terms > 0 ? random_sum_error(r->terms + (start != NULL),
                                                         r->squares[i] + old * old)
                                      : 0.0;
      tol[i] = r->inherited[i] + own + UNIT_F32 * fabs(want[i]);
    }
  const int64_t bad = check_close(name, got, r->cols, r->rows, r->count, want, tol) +
                      check_written(name, got, total_rows * r->cols);
  free(want), free(tol);
  return bad > 0;
}

/* The rows a reference covers: all when that costs at most ~6e7
 * multiply-adds at per_row each, else ~24 including both ends, each
 * image's first and last token (tokens 0: none) and rows in between.
 * Sorted, distinct, malloc'ed (count in *count). */
static int compare_rows(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int64_t *sample_rows(int64_t total, int64_t tokens, double per_row, int64_t *count) {
  enum { SAMPLE = 24 };
  int64_t *rows = malloc(sizeof(int64_t) * (size_t)(total > SAMPLE + 8 ? total : SAMPLE + 8));
  if (!rows) exit(1);
  int64_t n = 0;
  if (per_row * (double)total <= 6e7) {
    for (int64_t r = 0; r < total; ++r) rows[n++] = r;
    *count = n;
    return rows;
  }
  const int64_t fixed[] = {0, 1, tokens ? tokens - 1 : 0, tokens, total / 2, total - 1};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; ++i)
    if (fixed[i] >= 0 && fixed[i] < total) rows[n++] = fixed[i];
  for (int64_t i = 0; i < SAMPLE; ++i) rows[n++] = ((i * total) / SAMPLE + 3) % total;
  qsort(rows, (size_t)n, sizeof *rows, compare_rows);
  int64_t distinct = 0;
  for (int64_t i = 0; i < n; ++i)
    if (distinct == 0 || rows[distinct - 1] != rows[i]) rows[distinct++] = rows[i];
  *count = distinct;
  return rows;
}

/* ----- Outputs: written or accumulated, wanted or NULL -------------------- */

/* One output of an entry: [rows, cols]. A written one starts as NaN on the
 * device; an accumulated one from zeros (pass 0) or from random values of
 * `scale` (pass 1: the size of pass 0's result), kept in start. Not
 * wanted: device NULL. */
typedef struct output {
  const char *name;
  int64_t rows, cols;
  int accumulated;
  float scale;
  float *start;
  void *device;
} output;

#define OUTPUT(name, rows, cols, accumulated) {name, rows, cols, accumulated, 1.0f, NULL, NULL}

static void outputs_begin(device *d, output *o, int count, unsigned wanted, int pass) {
  for (int i = 0; i < count; ++i) {
    o[i].start = NULL, o[i].device = NULL;
    if (!(wanted & (1u << i))) continue;
    const int64_t n = o[i].rows * o[i].cols;
    if (!o[i].accumulated) {
      o[i].device = upload_poison(d, n, F32);
      continue;
    }
    o[i].start = pass == 0 ? host_random(n, 0.0f, 0.0f) : host_random(n, -o[i].scale, o[i].scale);
    o[i].device = upload(d, o[i].start, n, F32);
  }
}

/* Checks the wanted outputs against their references, keeps pass 0's
 * sizes for pass 1, frees. Returns 1 on a failure. */
static int outputs_end(device *d, output *o, const reference *refs, int count, int pass,
                       const char *case_name) {
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    if (!o[i].device) continue;
    const int64_t n = o[i].rows * o[i].cols;
    float *got = download(d, o[i].device, n, F32);
    char name[160];
    snprintf(name, sizeof name, "%s %s%s", case_name, o[i].name,
             o[i].accumulated ? (pass ? " (+= random)" : " (+= zeros)") : "");
    failed |= check_reference(name, got, o[i].rows, &refs[i], o[i].start);
    if (pass == 0 && o[i].accumulated) {
      double m = 0.0;
      for (int64_t k = 0; k < n; ++k) m = fmax(m, fabs(got[k]));
      o[i].scale = m > 0.0 && isfinite(m) ? (float)m : 1.0f;
    }
    free(got), free(o[i].start);
    release(d, o[i].device);
    o[i].start = NULL, o[i].device = NULL;
  }
  return failed;
}

/* ----- linear_backward ---------------------------------------------------- */

static void linear_case(device *d, int64_t rows, int64_t in, int64_t out_features,
                        int64_t tokens) {
  float *x = host_random(rows * in, -1, 1), *w = host_random(out_features * in, -0.5f, 0.5f);
  float *dy = host_random(rows * out_features, -1, 1);
  void *x_d = upload(d, x, rows * in, F32), *w_d = upload(d, w, out_features * in, F32);
  void *dy_d = upload(d, dy, rows * out_features, F32);
  /* dx on sampled rows (out terms each), dw on sampled output features
   * (rows terms each), db whole. */
  int64_t nx, nw;
  int64_t *rows_x = sample_rows(rows, tokens, (double)in * out_features, &nx);
  int64_t *rows_w = sample_rows(out_features, 0, (double)in * rows, &nw);
  reference refs[3] = {reference_new(nx, in, out_features, rows_x),
                       reference_new(nw, in, rows, rows_w),
                       reference_new(out_features, 1, rows, NULL)};
  for (int64_t k = 0; k < nx; ++k)
    for (int64_t i = 0; i < in; ++i) {
      double sum = 0.0, squares = 0.0;
      for (int64_t o = 0; o < out_features; ++o) {
        const double t = (double)dy[rows_x[k] * out_features + o] * w[o * in + i];
        sum += t, squares += t * t;
      }
      refs[0].value[k * in + i] = sum, refs[0].squares[k * in + i] = squares;
    }
  for (int64_t k = 0; k < nw; ++k)
    for (int64_t i = 0; i < in; ++i) {
      double sum = 0.0, squares = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        const double t = (double)dy[r * out_features + rows_w[k]] * x[r * in + i];
        sum += t, squares += t * t;
      }
      refs[1].value[k * in + i] = sum, refs[1].squares[k * in + i] = squares;
    }
  for (int64_t o = 0; o < out_features; ++o) {
    double sum = 0.0, squares = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const double t = dy[r * out_features + o];
      sum += t, squares += t * t;
    }
    refs[2].value[o] = sum, refs[2].squares[o] = squares;
  }
  output out[] = {OUTPUT("dx", rows, in, 0), OUTPUT("dw", out_features, in, 1),
                  OUTPUT("db", out_features, 1, 1)};
  static const unsigned masks[] = {7, 1, 2, 4, 6};
  char name[96];
  snprintf(name, sizeof name, "linear_backward %lldx%lld->%lld", (long long)rows, (long long)in,
           (long long)out_features);
  int failed = 0;
  for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m)
    for (int pass = 0; pass < 2; ++pass) {
      outputs_begin(d, out, 3, masks[m], pass);
      ENTRY(d, d->k->linear_backward_f32(&d->env, x_d, w_d, dy_d, out[0].device, out[1].device,
                                         out[2].device, rows, in, out_features));
      failed |= outputs_end(d, out, refs, 3, pass, name);
    }
  failures += failed;
  for (int i = 0; i < 3; ++i) reference_free(&refs[i]);
  release(d, x_d), release(d, w_d), release(d, dy_d), free(x), free(w), free(dy);
}

/* ----- layer_norm_backward ------------------------------------------------ */

static void layer_norm_case(device *d, int64_t rows, int64_t dim) {
  const float epsilon = 1e-5f;
  const double e_stat = sum_error(4.0, dim) + 16.0 * UNIT_F32, u = UNIT_F32;
  /* Rows off centre (the statistics must centre them) with their own spread. */
  float *x = host_random(rows * dim, -1, 1), *gamma = host_random(dim, 0.5f, 1.5f);
  for (int64_t r = 0; r < rows; ++r) {
    const float shift = uniform(-3, 3), spread = uniform(0.2f, 2.0f);
    for (int64_t i = 0; i < dim; ++i) x[r * dim + i] = shift + spread * x[r * dim + i];
  }
  float *dy = host_random(rows * dim, -1, 1);
  void *x_d = upload(d, x, rows * dim, F32), *gamma_d = upload(d, gamma, dim, F32);
  void *dy_d = upload(d, dy, rows * dim, F32);
  double *xhat = doubles(rows * dim), *exhat = doubles(rows * dim), *inv = doubles(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * dim;
    double sum = 0.0, absolute = 0.0, squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i], absolute += fabs(xr[i]);
    const double mean = sum / (double)dim;
    for (int64_t i = 0; i < dim; ++i) squares += (xr[i] - mean) * (xr[i] - mean);
    inv[r] = 1.0 / sqrt(squares / (double)dim + epsilon);
    for (int64_t i = 0; i < dim; ++i) {
      xhat[r * dim + i] = (xr[i] - mean) * inv[r];
      exhat[r * dim + i] = e_stat * inv[r] * (absolute / (double)dim + fabs(xr[i] - mean));
    }
  }
  output out[] = {OUTPUT("dx", rows, dim, 0), OUTPUT("dgamma", 1, dim, 1),
                  OUTPUT("dbeta", 1, dim, 1)};
  static const unsigned masks[] = {7, 1, 6, 4, 2};
  int failed = 0;
  for (int with_gamma = 1; with_gamma >= 0; --with_gamma) {
    int64_t count;
    int64_t *sample = sample_rows(rows, 0, 0.0, &count);
    reference refs[3] = {reference_new(rows, dim, 0, sample), reference_new(1, dim, rows, NULL),
                         reference_new(1, dim, rows, NULL)};
    for (int64_t r = 0; r < rows; ++r) {
      double m1 = 0.0, m1_sq = 0.0, m1_own = 0.0, m2 = 0.0, m2_sq = 0.0, m2_in = 0.0;
      for (int64_t i = 0; i < dim; ++i) {
        const double g = (double)dy[r * dim + i] * (with_gamma ? gamma[i] : 1.0);
        const double gx = g * xhat[r * dim + i];
        m1 += g, m1_sq += g * g, m1_own += (u * g) * (u * g);
        m2 += gx, m2_sq += gx * gx;
        m2_in += fabs(g) * exhat[r * dim + i] + u * fabs(g) * fabs(xhat[r * dim + i]);
      }
      m1 /= (double)dim, m2 /= (double)dim;
      const double e_m1 = (random_sum_error(dim, m1_sq) + 4.0 * sqrt(m1_own)) / (double)dim +
                          u * fabs(m1);
      const double e_m2 = (random_sum_error(dim, m2_sq) + m2_in) / (double)dim + u * fabs(m2);
      for (int64_t i = 0; i < dim; ++i) {
        const int64_t k = r * dim + i;
        const double g = (double)dy[k] * (with_gamma ? gamma[i] : 1.0);
        const double dx = inv[r] * (g - m1 - xhat[k] * m2);
        refs[0].value[k] = dx;
        refs[0].inherited[k] =
            inv[r] * (u * fabs(g) + e_m1 + fabs(xhat[k]) * e_m2 + exhat[k] * fabs(m2)) +
            (e_stat + 4.0 * u) * fabs(dx);
      }
    }
    for (int64_t i = 0; i < dim; ++i) {
      double gsum = 0.0, gsq = 0.0, gin = 0.0, bsum = 0.0, bsq = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        const double t = (double)dy[r * dim + i] * xhat[r * dim + i];
        gsum += t, gsq += t * t, gin += fabs(dy[r * dim + i]) * exhat[r * dim + i];
        bsum += dy[r * dim + i], bsq += (double)dy[r * dim + i] * dy[r * dim + i];
      }
      refs[1].value[i] = gsum, refs[1].squares[i] = gsq, refs[1].inherited[i] = gin;
      refs[2].value[i] = bsum, refs[2].squares[i] = bsq;
    }
    char name[96];
    snprintf(name, sizeof name, "layer_norm_backward %lldx%lld%s", (long long)rows,
             (long long)dim, with_gamma ? "" : " no gamma");
    for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m)
      for (int pass = 0; pass < 2; ++pass) {
        outputs_begin(d, out, 3, masks[m], pass);
        ENTRY(d, d->k->layer_norm_backward_f32(&d->env, x_d, with_gamma ? gamma_d : NULL, dy_d,
                                               out[0].device, out[1].device, out[2].device, rows,
                                               dim, epsilon));
        failed |= outputs_end(d, out, refs, 3, pass, name);
      }
    for (int i = 0; i < 3; ++i) reference_free(&refs[i]);
  }
  failures += failed;
  release(d, x_d), release(d, gamma_d), release(d, dy_d);
  free(x), free(gamma), free(dy), free(xhat), free(exhat), free(inv);
}

/* ----- gelu_backward ------------------------------------------------------ */

static void gelu_case(device *d, int64_t n) {
  float *x = host_random(n, -6, 6), *dy = host_random(n, -1, 1);
  void *x_d = upload(d, x, n, F32), *dy_d = upload(d, dy, n, F32);
  int failed = 0;
  for (int tanh_approx = 0; tanh_approx < 2; ++tanh_approx) {
    reference r = reference_new(n, 1, 0, NULL);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], pdf = 0.3989422804014327 * exp(-0.5 * v * v);
      double slope;
      if (tanh_approx) {
        const double k = 0.7978845608028654, c = 0.044715, t = tanh(k * (v + c * v * v * v));
        slope = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * c * v * v);
      } else {
        slope = 0.5 * (1.0 + erf(v * 0.7071067811865476)) + v * pdf;
      }
      r.value[i] = dy[i] * slope;
      r.inherited[i] = 8.0 * UNIT_F32 * fabs(dy[i]) *
                       (1.0 + fabs(v) * (1.0 + 0.134 * v * v) + fabs(v) * pdf * (1.0 + v * v));
    }
    char name[64];
    snprintf(name, sizeof name, "gelu_backward n %lld %s", (long long)n,
             tanh_approx ? "tanh" : "erf");
    /* Out of place into NaN. */
    void *dx_d = upload_poison(d, n, F32);
    ENTRY(d, d->k->gelu_backward_f32(&d->env, x_d, dy_d, dx_d, n, tanh_approx));
    float *got = download(d, dx_d, n, F32);
    failed |= check_reference(name, got, n, &r, NULL);
    free(got);
    /* In place: dx = dy. */
    void *inplace_d = upload(d, dy, n, F32);
    ENTRY(d, d->k->gelu_backward_f32(&d->env, x_d, inplace_d, inplace_d, n, tanh_approx));
    got = download(d, inplace_d, n, F32);
    snprintf(name, sizeof name, "gelu_backward n %lld %s, dx = dy", (long long)n,
             tanh_approx ? "tanh" : "erf");
    failed |= check_reference(name, got, n, &r, NULL);
    free(got);
    /* dx NULL: nothing wanted, nothing done (the table's contract; the
     * checked device refuses it, so CUDA only). */
    if (d->k->device == HTP_KERNEL_DEVICE_CUDA)
      ENTRY(d, d->k->gelu_backward_f32(&d->env, x_d, dy_d, NULL, n, tanh_approx));
    release(d, dx_d), release(d, inplace_d);
    reference_free(&r);
  }
  failures += failed;
  release(d, x_d), release(d, dy_d), free(x), free(dy);
}

/* ----- attention_backward ------------------------------------------------- */

/* Values with their error bounds, [n] each. */
typedef struct bounded {
  double *v, *e;
} bounded;

static bounded bounded_new(int64_t n) {
  bounded b = {doubles(n), doubles(n)};
  memset(b.v, 0, sizeof(double) * (size_t)n);
  memset(b.e, 0, sizeof(double) * (size_t)n);
  return b;
}
static void bounded_free(bounded *b) { free(b->v), free(b->e); }

/* The forward recomputed and the adjoint, in double with the bounds of the
 * file's header; refs: dx, dwqkv, dbqkv, dwproj, dbproj (full). */
static void reference_attention_backward(const float *x, const float *wqkv, const float *bqkv,
                                         const float *wproj, const float *dy, int64_t B,
                                         int64_t T, int64_t D, int64_t H, int64_t hd,
                                         reference *refs) {
  const int64_t R = B * T, I = H * hd, W = 3 * I;
  const double u = UNIT_F32, scale = 1.0 / sqrt((double)hd), e_sum = sum_error(4.0, T);
  bounded qkv = bounded_new(R * W), ctx = bounded_new(R * I), dctx = bounded_new(R * I);
  bounded dqkv = bounded_new(R * W), p = bounded_new(T * T), dp = bounded_new(T * T);
  double *c = doubles(T), *ec = doubles(T);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < W; ++o) {
      double l1, squares;
      const double b = bqkv ? bqkv[o] : 0.0;
      qkv.v[r * W + o] = b + dot(x + r * D, wqkv + o * D, D, &l1, &squares);
      qkv.e[r * W + o] = random_sum_error(D + 1, squares + b * b) + u * fabs(qkv.v[r * W + o]);
    }
  /* dctx = dy wproj: exact inputs */
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < I; ++i) {
      double sum = 0.0, squares = 0.0;
      for (int64_t o = 0; o < D; ++o) {
        const double t = (double)dy[r * D + o] * wproj[o * I + i];
        sum += t, squares += t * t;
      }
      dctx.v[r * I + i] = sum;
      dctx.e[r * I + i] = random_sum_error(D, squares) + u * fabs(sum);
    }
#define Q(t, d) (base + (t) * W + h * hd + (d))
#define K(t, d) (base + (t) * W + I + h * hd + (d))
#define V(t, d) (base + (t) * W + 2 * I + h * hd + (d))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t base = b * T * W;
      for (int64_t t = 0; t < T; ++t) {
        double max = -INFINITY, z = 0.0, shared = 0.0;
        double *pv = p.v + t * T, *pe = p.e + t * T;
        for (int64_t j = 0; j < T; ++j) {
          double sum = 0.0, squares = 0.0, from_k = 0.0, from_q = 0.0;
          for (int64_t dd = 0; dd < hd; ++dd) {
            const double qv = qkv.v[Q(t, dd)], kv = qkv.v[K(j, dd)];
            const double ek = qv * qkv.e[K(j, dd)], eq = qkv.e[Q(t, dd)] * kv;
            sum += qv * kv, squares += qv * kv * qv * kv;
            from_k += ek * ek, from_q += eq * eq;
          }
          pv[j] = scale * sum; /* the score, for now */
          pe[j] = scale * (sqrt(from_k) + sqrt(from_q) + random_sum_error(hd, squares)) +
                  2.0 * u * fabs(pv[j]);
          max = fmax(max, pv[j]);
        }
        double *score_err = doubles(T), *exp_err = doubles(T);
        for (int64_t j = 0; j < T; ++j) {
          exp_err[j] = (4.0 + 3.4 * fabs(pv[j] - max)) * u;
          score_err[j] = pe[j];
          z += pv[j] = exp(pv[j] - max);
        }
        for (int64_t j = 0; j < T; ++j) pv[j] /= z, shared += pv[j] * score_err[j];
        for (int64_t j = 0; j < T; ++j)
          pe[j] = pv[j] * (score_err[j] + shared + exp_err[j] + e_sum + 3.0 * u);
        free(score_err), free(exp_err);
        for (int64_t dd = 0; dd < hd; ++dd) {
          double sum = 0.0, squares = 0.0, from_p = 0.0, from_v = 0.0;
          for (int64_t j = 0; j < T; ++j) {
            const double vv = qkv.v[V(j, dd)], ev = pv[j] * qkv.e[V(j, dd)];
            sum += pv[j] * vv, squares += pv[j] * vv * pv[j] * vv;
            from_p += pe[j] * fabs(vv), from_v += ev * ev;
          }
          const int64_t i = (b * T + t) * I + h * hd + dd;
          ctx.v[i] = sum;
          ctx.e[i] = from_p + sqrt(from_v) + random_sum_error(T, squares) + u * fabs(sum);
        }
      }
      /* dP = dctx vᵀ, c = rowsum(P ∘ dP), dS = scale P ∘ (dP - c) into dp */
      for (int64_t t = 0; t < T; ++t) {
        const double *dc = dctx.v + (b * T + t) * I + h * hd, *edc = dctx.e + (b * T + t) * I + h * hd;
        double csum = 0.0, csq = 0.0, cin = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          double sum = 0.0, squares = 0.0, from_dc = 0.0, from_v = 0.0;
          for (int64_t dd = 0; dd < hd; ++dd) {
            const double vv = qkv.v[V(j, dd)];
            const double a = edc[dd] * vv, b2 = dc[dd] * qkv.e[V(j, dd)];
            sum += dc[dd] * vv, squares += dc[dd] * vv * dc[dd] * vv;
            from_dc += a * a, from_v += b2 * b2;
          }
          dp.v[t * T + j] = sum;
          dp.e[t * T + j] =
              sqrt(from_dc) + sqrt(from_v) + random_sum_error(hd, squares) + u * fabs(sum);
          const double pj = p.v[t * T + j];
          csum += pj * sum, csq += pj * sum * pj * sum;
          cin += p.e[t * T + j] * fabs(sum) + pj * dp.e[t * T + j];
        }
        c[t] = csum;
        ec[t] = cin + random_sum_error(T, csq) + u * fabs(csum);
        for (int64_t j = 0; j < T; ++j) {
          const double pj = p.v[t * T + j], diff = dp.v[t * T + j] - c[t];
          const double ds = scale * pj * diff;
          dp.e[t * T + j] = scale * (p.e[t * T + j] * fabs(diff) + pj * (dp.e[t * T + j] + ec[t])) +
                            3.0 * u * fabs(ds);
          dp.v[t * T + j] = ds;
        }
      }
      /* dq = dS k, dk = dSᵀ q, dv = Pᵀ dctx */
      for (int64_t t = 0; t < T; ++t)
        for (int64_t dd = 0; dd < hd; ++dd) {
          /* dS's and P's errors: linear (shared sources); k's, q's and
           * dctx's: independent GEMM outputs, in quadrature */
          double sq = 0.0, sqq = 0.0, inq = 0.0, rq = 0.0, sk = 0.0, skq = 0.0, ink = 0.0;
          double rk = 0.0, sv = 0.0, svq = 0.0, inv_ = 0.0, rv = 0.0;
          for (int64_t j = 0; j < T; ++j) {
            const double ds = dp.v[t * T + j], eds = dp.e[t * T + j], kv = qkv.v[K(j, dd)];
            sq += ds * kv, sqq += ds * kv * ds * kv;
            inq += eds * fabs(kv), rq += (ds * qkv.e[K(j, dd)]) * (ds * qkv.e[K(j, dd)]);
            /* token t as a key: column t of dS and of P */
            const double dst = dp.v[j * T + t], edst = dp.e[j * T + t], qv = qkv.v[Q(j, dd)];
            sk += dst * qv, skq += dst * qv * dst * qv;
            ink += edst * fabs(qv), rk += (dst * qkv.e[Q(j, dd)]) * (dst * qkv.e[Q(j, dd)]);
            const int64_t jrow = (b * T + j) * I + h * hd + dd;
            const double pjt = p.v[j * T + t];
            sv += pjt * dctx.v[jrow], svq += pjt * dctx.v[jrow] * pjt * dctx.v[jrow];
            inv_ += p.e[j * T + t] * fabs(dctx.v[jrow]);
            rv += (pjt * dctx.e[jrow]) * (pjt * dctx.e[jrow]);
          }
          const int64_t row = (b * T + t) * W + h * hd + dd;
          dqkv.v[row] = sq;
          dqkv.e[row] = inq + sqrt(rq) + random_sum_error(T, sqq) + u * fabs(sq);
          dqkv.v[row + I] = sk;
          dqkv.e[row + I] = ink + sqrt(rk) + random_sum_error(T, skq) + u * fabs(sk);
          dqkv.v[row + 2 * I] = sv;
          dqkv.e[row + 2 * I] = inv_ + sqrt(rv) + random_sum_error(T, svq) + u * fabs(sv);
        }
    }
#undef Q
#undef K
#undef V
  /* dx = dqkv wqkv; dwqkv += dqkvᵀ x; dbqkv += Σ dqkv; dwproj += dyᵀ ctx;
   * dbproj += Σ dy */
  /* dqkv's errors: shared within a head (its q, k and v parts come from
   * the same scores), independent across heads; across tokens, shared
   * within an image (its keys and values), independent across images. */
  double *per_head = doubles(H), *per_image = doubles(B);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < D; ++i) {
      double sum = 0.0, squares = 0.0, inherited = 0.0;
      memset(per_head, 0, sizeof(double) * (size_t)H);
      for (int64_t o = 0; o < W; ++o) {
        const double t = dqkv.v[r * W + o] * wqkv[o * D + i];
        sum += t, squares += t * t;
        per_head[(o % I) / hd] += dqkv.e[r * W + o] * fabs(wqkv[o * D + i]);
      }
      for (int64_t h = 0; h < H; ++h) inherited += per_head[h] * per_head[h];
      refs[0].value[r * D + i] = sum, refs[0].squares[r * D + i] = squares;
      refs[0].inherited[r * D + i] = sqrt(inherited);
    }
  for (int64_t o = 0; o < W; ++o) {
    for (int64_t i = 0; i < D; ++i) {
      double sum = 0.0, squares = 0.0, inherited = 0.0;
      memset(per_image, 0, sizeof(double) * (size_t)B);
      for (int64_t r = 0; r < R; ++r) {
        const double t = dqkv.v[r * W + o] * x[r * D + i];
        sum += t, squares += t * t, per_image[r / T] += dqkv.e[r * W + o] * fabs(x[r * D + i]);
      }
      for (int64_t b = 0; b < B; ++b) inherited += per_image[b] * per_image[b];
      refs[1].value[o * D + i] = sum, refs[1].squares[o * D + i] = squares;
      refs[1].inherited[o * D + i] = sqrt(inherited);
    }
    double sum = 0.0, squares = 0.0, inherited = 0.0;
    memset(per_image, 0, sizeof(double) * (size_t)B);
    for (int64_t r = 0; r < R; ++r)
      sum += dqkv.v[r * W + o], squares += dqkv.v[r * W + o] * dqkv.v[r * W + o],
          per_image[r / T] += dqkv.e[r * W + o];
    for (int64_t b = 0; b < B; ++b) inherited += per_image[b] * per_image[b];
    refs[2].value[o] = sum, refs[2].squares[o] = squares, refs[2].inherited[o] = sqrt(inherited);
  }
  for (int64_t o = 0; o < D; ++o) {
    for (int64_t i = 0; i < I; ++i) {
      double sum = 0.0, squares = 0.0, inherited = 0.0;
      memset(per_image, 0, sizeof(double) * (size_t)B);
      for (int64_t r = 0; r < R; ++r) {
        const double t = (double)dy[r * D + o] * ctx.v[r * I + i];
        sum += t, squares += t * t, per_image[r / T] += fabs(dy[r * D + o]) * ctx.e[r * I + i];
      }
      for (int64_t b = 0; b < B; ++b) inherited += per_image[b] * per_image[b];
      refs[3].value[o * I + i] = sum, refs[3].squares[o * I + i] = squares;
      refs[3].inherited[o * I + i] = sqrt(inherited);
    }
    double sum = 0.0, squares = 0.0;
    for (int64_t r = 0; r < R; ++r) sum += dy[r * D + o], squares += (double)dy[r * D + o] * dy[r * D + o];
    refs[4].value[o] = sum, refs[4].squares[o] = squares;
  }
  bounded_free(&qkv), bounded_free(&ctx), bounded_free(&dctx), bounded_free(&dqkv);
  bounded_free(&p), bounded_free(&dp), free(c), free(ec), free(per_head), free(per_image);
}

static void attention_case(device *d, int64_t batch, int64_t tokens, int64_t dim, int64_t heads,
                           int64_t head_dim, int with_bias) {
  const int64_t rows = batch * tokens, inner = heads * head_dim, wide = 3 * inner;
  const float reach = 2.0f / sqrtf((float)dim);
  float *x = host_random(rows * dim, -1, 1), *wqkv = host_random(wide * dim, -reach, reach);
  float *bqkv = host_random(wide, -0.2f, 0.2f);
  float *wproj = host_random(dim * inner, -1.0f / sqrtf((float)inner), 1.0f / sqrtf((float)inner));
  float *bproj = host_random(dim, -0.2f, 0.2f), *dy = host_random(rows * dim, -1, 1);
  void *x_d = upload(d, x, rows * dim, F32), *wqkv_d = upload(d, wqkv, wide * dim, F32);
  void *bqkv_d = upload(d, bqkv, wide, F32), *wproj_d = upload(d, wproj, dim * inner, F32);
  void *bproj_d = upload(d, bproj, dim, F32), *dy_d = upload(d, dy, rows * dim, F32);
  const int64_t floats =
      d->k->attention_backward_scratch_floats(batch, tokens, dim, heads, head_dim);
  void *scratch_d = upload_poison(d, floats, F32);
  reference refs[5] = {reference_new(rows, dim, wide, NULL), reference_new(wide, dim, rows, NULL),
                       reference_new(wide, 1, rows, NULL), reference_new(dim, inner, rows, NULL),
                       reference_new(dim, 1, rows, NULL)};
  reference_attention_backward(x, wqkv, with_bias ? bqkv : NULL, wproj, dy, batch, tokens, dim,
                               heads, head_dim, refs);
  output out[] = {OUTPUT("dx", rows, dim, 0), OUTPUT("dwqkv", wide, dim, 1),
                  OUTPUT("dbqkv", wide, 1, 1), OUTPUT("dwproj", dim, inner, 1),
                  OUTPUT("dbproj", dim, 1, 1)};
  /* All; dx only; the projection's only (no dqkv pass); qkv's only; no dbproj. */
  static const unsigned masks[] = {31, 1, 24, 6, 15};
  char name[96];
  snprintf(name, sizeof name, "attention_backward B%lld T%lld D%lld H%lld hd%lld%s",
           (long long)batch, (long long)tokens, (long long)dim, (long long)heads,
           (long long)head_dim, with_bias ? "" : " no bqkv");
  int failed = 0;
  for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m)
    for (int pass = 0; pass < 2; ++pass) {
      outputs_begin(d, out, 5, masks[m], pass);
      ENTRY(d, d->k->attention_backward_f32(&d->env, x_d, wqkv_d, with_bias ? bqkv_d : NULL,
                                            wproj_d, bproj_d, dy_d, out[0].device, out[1].device,
                                            out[2].device, out[3].device, out[4].device,
                                            scratch_d, floats, batch, tokens, dim, heads,
                                            head_dim));
      failed |= outputs_end(d, out, refs, 5, pass, name);
    }
  /* One float short of the device's count: refused, nothing run. */
  void *dx_d = upload_poison(d, rows * dim, F32);
  const htp_kernel_status short_scratch = d->k->attention_backward_f32(
      &d->env, x_d, wqkv_d, bqkv_d, wproj_d, bproj_d, dy_d, dx_d, NULL, NULL, NULL, NULL,
      scratch_d, floats - 1, batch, tokens, dim, heads, head_dim);
  const int refused = short_scratch == HTP_KERNEL_ERR_INVALID && strstr(d->error, "scratch");
  printf("  %-46s %s\n", "  scratch one short", refused ? "refused: ok" : "FAIL");
  failed |= !refused;
  failures += failed;
  for (int i = 0; i < 5; ++i) reference_free(&refs[i]);
  release(d, x_d), release(d, wqkv_d), release(d, bqkv_d), release(d, wproj_d);
  release(d, bproj_d), release(d, dy_d), release(d, scratch_d), release(d, dx_d);
  free(x), free(wqkv), free(bqkv), free(wproj), free(bproj), free(dy);
}

/* ----- softmax_cross_entropy ---------------------------------------------- */

/* kind 0: one-hot rows; 1: probability rows; 2: rows summing to 0.5..2
 * with large logits (the stable forms matter). */
static void cross_entropy_case(device *d, int64_t rows, int64_t classes, int kind) {
  const double u = UNIT_F32, e_sum = sum_error(4.0, classes);
  const float reach = kind == 2 ? 60.0f : 4.0f;
  float *logits = host_random(rows * classes, -reach, reach);
  float *targets = host_random(rows * classes, 0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float *row = targets + r * classes;
    if (kind == 0) {
      const int64_t label = (int64_t)(uniform(0, 1) * (float)classes) % classes;
      for (int64_t c = 0; c < classes; ++c) row[c] = c == label ? 1.0f : 0.0f;
      continue;
    }
    double sum = 0.0;
    for (int64_t c = 0; c < classes; ++c) sum += row[c];
    const double total = kind == 1 ? 1.0 : uniform(0.5f, 2.0f);
    for (int64_t c = 0; c < classes; ++c) row[c] = (float)(row[c] * total / sum);
  }
  void *logits_d = upload(d, logits, rows * classes, F32);
  void *targets_d = upload(d, targets, rows * classes, F32);
  reference refs[2] = {reference_new(1, 1, 0, NULL), reference_new(rows, classes, 0, NULL)};
  double loss = 0.0, loss_err = 0.0, row_l1 = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float *l = logits + r * classes, *t = targets + r * classes;
    double max = -INFINITY, z = 0.0, total = 0.0, spread = 0.0, exp_err = 0.0;
    for (int64_t c = 0; c < classes; ++c) max = fmax(max, l[c]);
    for (int64_t c = 0; c < classes; ++c) {
      const double e = exp(l[c] - max);
      z += e, total += t[c], spread += t[c] * (max - l[c]);
      exp_err += e * (4.0 + 1.2 * fabs(l[c] - max)) * u;
    }
    const double log_z = log(z), row = total * log_z + spread;
    const double e_log_z = (exp_err + e_sum * z) / z + 2.0 * u * log_z;
    const double e_total = e_sum * total;
    loss += row, row_l1 += row;
    loss_err += total * e_log_z + e_total * log_z + (e_sum + 2.0 * u) * spread + 3.0 * u * row;
    for (int64_t c = 0; c < classes; ++c) {
      const double p = exp(l[c] - max) / z, g = (p * total - t[c]) / (double)rows;
      const double e_p = p * ((4.0 + 1.2 * fabs(l[c] - max)) * u + exp_err / z + e_sum + 3.0 * u);
      refs[1].value[r * classes + c] = g;
      refs[1].inherited[r * classes + c] =
          (e_p * total + p * e_total + u * (p * total + t[c])) / (double)rows + 2.0 * u * fabs(g);
    }
  }
  refs[0].value[0] = loss / (double)rows;
  refs[0].inherited[0] = (loss_err + sum_error(4.0, rows) * row_l1) / (double)rows;
  output out[] = {OUTPUT("loss", 1, 1, 0), OUTPUT("dlogits", rows, classes, 0)};
  static const unsigned masks[] = {3, 1, 2};
  static const char *kinds[] = {"one-hot", "soft", "unnormalised, |logit| <= 60"};
  char name[96];
  snprintf(name, sizeof name, "softmax_cross_entropy %lldx%lld %s", (long long)rows,
           (long long)classes, kinds[kind]);
  int failed = 0;
  for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m) {
    outputs_begin(d, out, 2, masks[m], 0);
    ENTRY(d, d->k->softmax_cross_entropy_f32(&d->env, logits_d, targets_d, out[0].device,
                                             out[1].device, rows, classes));
    failed |= outputs_end(d, out, refs, 2, 0, name);
  }
  failures += failed;
  reference_free(&refs[0]), reference_free(&refs[1]);
  release(d, logits_d), release(d, targets_d), free(logits), free(targets);
}

/* ----- Optimizers --------------------------------------------------------- */

/* Three steps from the same state (m NaN before step 1: it must be set,
 * not read), then w and m against the double reference carried with its
 * bound. Variants: momentum with decay; no momentum and no buffer; no
 * momentum with a buffer. */
static void sgd_case(device *d, int64_t n) {
  static const struct {
    float momentum, weight_decay;
    int buffer;
    const char *name;
  } variants[] = {{0.9f, 1e-2f, 1, "momentum 0.9, decay"},
                  {0.0f, 0.0f, 0, "no momentum, no buffer"},
                  {0.0f, 5e-3f, 1, "no momentum, a buffer"}};
  const double u = UNIT_F32, lr = 0.05f;
  int failed = 0;
  for (size_t k = 0; k < sizeof variants / sizeof *variants; ++k) {
    const double mu = variants[k].momentum, wd = variants[k].weight_decay;
    float *w = host_random(n, -1, 1);
    reference rw = reference_new(n, 1, 0, NULL), rm = reference_new(n, 1, 0, NULL);
    for (int64_t i = 0; i < n; ++i) rw.value[i] = w[i];
    void *w_d = upload(d, w, n, F32);
    void *m_d = variants[k].buffer ? upload_poison(d, n, F32) : NULL;
    for (int64_t step = 1; step <= 3; ++step) {
      float *g = host_random(n, -1, 1);
      void *g_d = upload(d, g, n, F32);
      ENTRY(d, d->k->sgd_momentum_f32(&d->env, w_d, g_d, m_d, n, (float)lr,
                                      variants[k].momentum, variants[k].weight_decay, step));
      for (int64_t i = 0; i < n; ++i) {
        const double wv = rw.value[i], ew = rw.inherited[i];
        const double gp = g[i] + wd * wv, egp = wd * ew + u * (fabs(gp) + wd * fabs(wv));
        double m = gp, em = egp;
        if (step > 1 && mu != 0.0) {
          m = mu * rm.value[i] + gp;
          em = mu * rm.inherited[i] + egp + u * (mu * fabs(rm.value[i]) + fabs(m));
        }
        rm.value[i] = m, rm.inherited[i] = em;
        rw.value[i] = wv - lr * m;
        rw.inherited[i] = ew + lr * em + 2.0 * u * (lr * fabs(m) + fabs(rw.value[i]));
      }
      free(g), release(d, g_d);
    }
    char name[96];
    snprintf(name, sizeof name, "sgd_momentum n %lld, 3 steps, %s: w", (long long)n,
             variants[k].name);
    float *got = download(d, w_d, n, F32);
    failed |= check_reference(name, got, n, &rw, NULL);
    free(got);
    if (m_d) {
      snprintf(name, sizeof name, "sgd_momentum n %lld, 3 steps, %s: m", (long long)n,
               variants[k].name);
      got = download(d, m_d, n, F32);
      failed |= check_reference(name, got, n, &rm, NULL);
      free(got);
    }
    release(d, w_d), release(d, m_d), free(w), reference_free(&rw), reference_free(&rm);
  }
  failures += failed;
}

/* Steps 1, 2, 3 and then 10 (bias corrections), with decoupled decay. */
static void adamw_case(device *d, int64_t n) {
  const double u = UNIT_F32, lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.05f;
  float *w = host_random(n, -1, 1), *zero = host_random(n, 0, 0);
  reference rw = reference_new(n, 1, 0, NULL), rm = reference_new(n, 1, 0, NULL);
  reference rv = reference_new(n, 1, 0, NULL);
  for (int64_t i = 0; i < n; ++i) rw.value[i] = w[i], rm.value[i] = 0.0, rv.value[i] = 0.0;
  void *w_d = upload(d, w, n, F32), *m_d = upload(d, zero, n, F32), *v_d = upload(d, zero, n, F32);
  static const int64_t steps[] = {1, 2, 3, 10};
  for (size_t s = 0; s < sizeof steps / sizeof *steps; ++s) {
    const int64_t step = steps[s];
    float *g = host_random(n, -1, 1);
    void *g_d = upload(d, g, n, F32);
    ENTRY(d, d->k->adamw_f32(&d->env, w_d, g_d, m_d, v_d, n, (float)lr, (float)b1, (float)b2,
                             (float)eps, (float)wd, step));
    const double c1 = 1.0 - pow(b1, (double)step), c2 = 1.0 - pow(b2, (double)step);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[i];
      double wv = rw.value[i], ew = rw.inherited[i];
      const double decayed = wv - lr * wd * wv;
      ew = ew * (1.0 + lr * wd) + 2.0 * u * (lr * wd * fabs(wv) + fabs(decayed));
      const double m = b1 * rm.value[i] + (1.0 - b1) * gi;
      const double em = b1 * rm.inherited[i] + 3.0 * u * (b1 * fabs(rm.value[i]) + fabs(m));
      const double v = b2 * rv.value[i] + (1.0 - b2) * gi * gi;
      const double ev = b2 * rv.inherited[i] + 4.0 * u * (b2 * rv.value[i] + v);
      const double mhat = m / c1, vhat = v / c2, den = sqrt(vhat) + eps;
      const double update = lr * mhat / den;
      /* the bias corrections (powf: a few ulps each), the quotient */
      const double eu = lr * (em / c1) / den +
                        fabs(update) * (vhat > 0 ? 0.5 * (ev / v) * sqrt(vhat) / den : 0.0) +
                        12.0 * u * fabs(update) * (1.0 + (double)step);
      rm.value[i] = m, rm.inherited[i] = em;
      rv.value[i] = v, rv.inherited[i] = ev;
      rw.value[i] = decayed - update;
      rw.inherited[i] = ew + eu + u * fabs(rw.value[i]);
    }
    free(g), release(d, g_d);
  }
  int failed = 0;
  const reference *refs[] = {&rw, &rm, &rv};
  void *devices[] = {w_d, m_d, v_d};
  static const char *names[] = {"adamw n 4099, steps 1 2 3 10: w", "adamw n 4099, steps 1 2 3 10: m",
                                "adamw n 4099, steps 1 2 3 10: v"};
  for (int i = 0; i < 3; ++i) {
    float *got = download(d, devices[i], n, F32);
    failed |= check_reference(names[i], got, n, refs[i], NULL);
    free(got);
  }
  failures += failed;
  release(d, w_d), release(d, m_d), release(d, v_d), free(w), free(zero);
  reference_free(&rw), reference_free(&rm), reference_free(&rv);
}

/* ----- The model's ends --------------------------------------------------- */

/* Exact where the entry copies, into NaN; the sums (cuda_test.h's
 * references) element-wise; embed_tokens' adjoint with its outputs NULL in
 * turn and its accumulated ones from zeros and from random starts. */
static void ends_case(device *d, int64_t batch, int64_t channels, int64_t height, int64_t width,
                      int64_t patch, int64_t dim) {
  const int64_t n = (height / patch) * (width / patch), features = channels * patch * patch;
  const int64_t tokens = n + 1;
  char prefix[64], name[128];
  snprintf(prefix, sizeof prefix, "ends B%lld C%lld %lldx%lld P%lld D%lld", (long long)batch,
           (long long)channels, (long long)height, (long long)width, (long long)patch,
           (long long)dim);
  int failed = 0;
  const int64_t most = batch * tokens * dim > batch * n * features ? batch * tokens * dim
                                                                   : batch * n * features;
  double *want = doubles(most);
  float *got;
#define EXACT(what, got, rows, cols)                                                      \
  do {                                                                                    \
    snprintf(name, sizeof name, "%s %s", prefix, what);                                   \
    const int64_t bad_ = check_close(name, got, cols, NULL, rows, want, NULL) +           \
                         check_written(name, got, (rows) * (cols));                       \
    failed |= bad_ > 0;                                                                   \
  } while (0)

  float *images = host_random(batch * channels * height * width, -1, 1);
  void *images_d = upload(d, images, batch * channels * height * width, F32);
  void *patches_d = upload_poison(d, batch * n * features, F32);
  ENTRY(d, d->k->patchify_f32(&d->env, images_d, patches_d, batch, channels, height, width, patch));
  patchify_reference(images, want, batch, channels, height, width, patch);
  got = download(d, patches_d, batch * n * features, F32);
  EXACT("patchify", got, batch * n, features);
  free(got);

  float *tok = host_random(batch * n * dim, -1, 1), *cls = host_random(dim, -1, 1);
  float *pos = host_random(tokens * dim, -1, 1);
  void *tok_d = upload(d, tok, batch * n * dim, F32), *cls_d = upload(d, cls, dim, F32);
  void *pos_d = upload(d, pos, tokens * dim, F32), *y_d = upload_poison(d, batch * tokens * dim, F32);
  ENTRY(d, d->k->embed_tokens_f32(&d->env, tok_d, cls_d, pos_d, y_d, batch, n, dim));
  embed_tokens_reference(tok, cls, pos, want, batch, n, dim);
  float *y = download(d, y_d, batch * tokens * dim, F32);
  EXACT("embed_tokens", y, batch * tokens, dim);
  void *pooled_d = upload_poison(d, batch * dim, F32);
  ENTRY(d, d->k->cls_token_f32(&d->env, y_d, pooled_d, batch, tokens, dim));
  cls_token_reference(y, want, batch, tokens, dim);
  float *pooled = download(d, pooled_d, batch * dim, F32);
  EXACT("cls_token", pooled, batch, dim);
  void *back_d = upload_poison(d, batch * tokens * dim, F32);
  ENTRY(d, d->k->cls_token_backward_f32(&d->env, pooled_d, back_d, batch, tokens, dim));
  cls_token_backward_reference(pooled, want, batch, tokens, dim);
  got = download(d, back_d, batch * tokens * dim, F32);
  EXACT("cls_token_backward (written whole)", got, batch * tokens, dim);
  free(got);

  /* embed_tokens' adjoint: dpatches written, dcls and dpos accumulated. */
  float *dy = host_random(batch * tokens * dim, -1, 1);
  void *dy_d = upload(d, dy, batch * tokens * dim, F32);
  output out[] = {OUTPUT("dpatches", batch * n, dim, 0), OUTPUT("dcls", 1, dim, 1),
                  OUTPUT("dpos", tokens, dim, 1)};
  static const unsigned masks[] = {7, 6, 1, 2, 4};
  double *dpatches = doubles(batch * n * dim), *dcls = doubles(dim), *dcls_tol = doubles(dim);
  double *dpos = doubles(tokens * dim), *dpos_tol = doubles(tokens * dim);
  for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m)
    for (int pass = 0; pass < 2; ++pass) {
      outputs_begin(d, out, 3, masks[m], pass);
      ENTRY(d, d->k->embed_tokens_backward_f32(&d->env, dy_d, out[0].device, out[1].device,
                                               out[2].device, batch, n, dim));
      embed_tokens_backward_reference(dy, out[1].start, out[2].start, dpatches, dcls, dcls_tol,
                                       dpos, dpos_tol, batch, n, dim);
      const double *refs[] = {dpatches, dcls, dpos}, *tols[] = {NULL, dcls_tol, dpos_tol};
      for (int i = 0; i < 3; ++i) {
        if (!out[i].device) continue;
        got = download(d, out[i].device, out[i].rows * out[i].cols, F32);
        snprintf(name, sizeof name, "%s embed_tokens_backward %s%s", prefix, out[i].name,
                 out[i].accumulated ? (pass ? " (+= random)" : " (+= zeros)") : "");
        failed |= check_close(name, got, out[i].cols, NULL, out[i].rows, refs[i], tols[i]) +
                      check_written(name, got, out[i].rows * out[i].cols) >
                  0;
        if (pass == 0 && i > 0) {
          double mx = 0.0;
          for (int64_t k = 0; k < out[i].rows * out[i].cols; ++k) mx = fmax(mx, fabs(got[k]));
          out[i].scale = mx > 0.0 ? (float)mx : 1.0f;
        }
        free(got), free(out[i].start), release(d, out[i].device);
        out[i].start = NULL, out[i].device = NULL;
      }
    }

  /* row_sum over the embedded tokens as rows (past the CPU's 256-row
   * blocks when batch * tokens is), written; over no rows: zeros. */
  const int64_t rows = batch * tokens;
  void *sums_d = upload_poison(d, dim, F32);
  ENTRY(d, d->k->row_sum_f32(&d->env, dy_d, sums_d, rows, dim));
  column_sum_reference(dy, rows, dim, dim, NULL, dcls, dcls_tol);
  got = download(d, sums_d, dim, F32);
  snprintf(name, sizeof name, "%s row_sum", prefix);
  failed |= check_close(name, got, dim, NULL, 1, dcls, dcls_tol) + check_written(name, got, dim) > 0;
  free(got), release(d, sums_d);
  sums_d = upload_poison(d, dim, F32);
  ENTRY(d, d->k->row_sum_f32(&d->env, dy_d, sums_d, 0, dim));
  memset(want, 0, sizeof(double) * (size_t)dim);
  got = download(d, sums_d, dim, F32);
  EXACT("row_sum of no rows", got, 1, dim);
  free(got), release(d, sums_d);
#undef EXACT
  failures += failed;
  release(d, images_d), release(d, patches_d), release(d, tok_d), release(d, cls_d);
  release(d, pos_d), release(d, y_d), release(d, pooled_d), release(d, back_d), release(d, dy_d);
  free(want), free(images), free(tok), free(cls), free(pos), free(y), free(pooled), free(dy);
  free(dpatches), free(dcls), free(dcls_tol), free(dpos), free(dpos_tol);
}

/* ----- Refusals (with a device: an environment without one fails first) --- */

static void refusal_cases(device *d) {
  const htp_kernel_env *ce = &d->env;
  const htp_kernel_table *k = d->k;
  float *b = to_device(NULL, 64);
  const int64_t huge = INT64_MAX / 2;
  struct {
    const char *what;
    htp_kernel_status status;
  } cases[] = {
      {"linear_backward rows -1", k->linear_backward_f32(ce, b, b, b, b, b, b, -1, 2, 2)},
      {"linear_backward in > INT_MAX",
       k->linear_backward_f32(ce, b, b, b, b, b, b, 2, (int64_t)INT_MAX + 1, 2)},
      {"layer_norm_backward rows * dim overflows",
       k->layer_norm_backward_f32(ce, b, b, b, b, b, b, huge, 4, 1e-5f)},
      {"layer_norm_backward dim -1",
       k->layer_norm_backward_f32(ce, b, b, b, b, b, b, 2, -1, 1e-5f)},
      {"gelu_backward n -1", k->gelu_backward_f32(ce, b, b, b, -1, 0)},
      {"attention_backward sizes overflow",
       k->attention_backward_f32(ce, b, b, b, b, NULL, b, b, b, b, b, b, b, 64, huge, 4, 4, 2,
                                 2)},
      {"attention_backward no scratch",
       k->attention_backward_f32(ce, b, b, b, b, NULL, b, b, b, b, b, b, NULL, 0, 1, 2, 4, 2,
                                 2)},
      {"attention_backward heads -1",
       k->attention_backward_f32(ce, b, b, b, b, NULL, b, b, b, b, b, b, b, 64, 1, 2, 4, -1,
                                 2)},
      {"softmax_cross_entropy rows 0", k->softmax_cross_entropy_f32(ce, b, b, b, b, 0, 3)},
      {"softmax_cross_entropy rows * classes overflows",
       k->softmax_cross_entropy_f32(ce, b, b, b, b, huge, 3)},
      {"softmax_cross_entropy logits NULL",
       k->softmax_cross_entropy_f32(ce, NULL, b, b, b, 2, 3)},
      {"sgd momentum without a buffer",
       k->sgd_momentum_f32(ce, b, b, NULL, 8, 0.1f, 0.9f, 0.0f, 1)},
      {"sgd step 0", k->sgd_momentum_f32(ce, b, b, b, 8, 0.1f, 0.9f, 0.0f, 0)},
      {"adamw beta1 1", k->adamw_f32(ce, b, b, b, b, 8, 0.1f, 1.0f, 0.999f, 1e-8f, 0.0f, 1)},
      {"adamw step 0", k->adamw_f32(ce, b, b, b, b, 8, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0)},
      {"adamw v NULL", k->adamw_f32(ce, b, b, b, NULL, 8, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1)},
  };
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    const int ok = cases[i].status == HTP_KERNEL_ERR_INVALID;
    if (!ok) printf("    FAIL %s: status %d, not refused\n", cases[i].what, (int)cases[i].status);
    failed |= !ok;
  }
  /* The model's ends are twins of htp_kernels_cuda.h (any failure is the
   * table's ERR_SYSTEM): refused, whatever the code. */
  const int ends_refused =
      k->patchify_f32(ce, b, b, 1, 1, 5, 4, 2) != HTP_KERNEL_OK &&
      k->embed_tokens_f32(ce, b, b, b, b, huge, huge, 2) != HTP_KERNEL_OK &&
      k->cls_token_backward_f32(ce, b, b, huge, huge, 2) != HTP_KERNEL_OK &&
      k->row_sum_f32(ce, b, b, huge, 4) != HTP_KERNEL_OK;
  if (!ends_refused) printf("    FAIL a model-end entry ran with bad sizes\n");
  failed |= !ends_refused;
  /* Nothing above may have left an error on the stream. */
  if (k->synchronize(ce) != HTP_KERNEL_OK) {
    printf("    FAIL the stream after the refusals: %s\n", d->error);
    failed = 1;
  }
  printf("  %-46s %s\n", "refusals of bad arguments", failed ? "FAIL" : "ok");
  failures += failed;
  cudaFree(b);
}

/* ----- What needs no GPU -------------------------------------------------- */

static void no_device_cases(void) {
  const htp_kernel_table *k = htp_cuda_kernel_table();
  const int complete = k->linear_backward_f32 && k->layer_norm_backward_f32 &&
                       k->gelu_backward_f32 && k->attention_backward_f32 &&
                       k->attention_backward_scratch_floats && k->softmax_cross_entropy_f32 &&
                       k->sgd_momentum_f32 && k->adamw_f32 && k->patchify_f32 &&
                       k->embed_tokens_f32 && k->cls_token_f32 && k->row_sum_f32 &&
                       k->embed_tokens_backward_f32 && k->cls_token_backward_f32 && k->zero;
  if (!complete) {
    printf("  FAIL the CUDA table lacks a training entry\n");
    failures++;
    return;
  }
  int failed = 0;
  /* The scratch count is the CPU kernel's on every shape (the balance
   * hooks size it by that formula), < 0 on overflow. */
  static const int64_t shapes[][5] = {{2, 7, 12, 3, 4}, {70, 3, 6, 1, 5}, {1, 5, 9, 70, 1},
                                      {0, 5, 9, 3, 2},  {3, 0, 9, 3, 2},  {3, 197, 192, 3, 64}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; ++i) {
    const int64_t *s = shapes[i];
    const int64_t cuda = k->attention_backward_scratch_floats(s[0], s[1], s[2], s[3], s[4]);
    const int64_t cpu = htp_cpu_attention_backward_scratch_floats(s[0], s[1], s[2], s[3], s[4]);
    if (cuda != cpu) {
      printf("    FAIL scratch for shape %zu: CUDA %lld, CPU %lld\n", i, (long long)cuda,
             (long long)cpu);
      failed = 1;
    }
  }
  if (k->attention_backward_scratch_floats(INT64_MAX / 4, 4, 8, 2, 2) >= 0 ||
      k->attention_backward_scratch_floats(1, 4, 8, -1, 2) >= 0) {
    printf("    FAIL an overflowing or negative shape's scratch is not < 0\n");
    failed = 1;
  }
  /* A NULL environment: every entry fails (no device), none crashes. */
  float x[8] = {0};
  const htp_kernel_status statuses[] = {
      k->linear_backward_f32(NULL, x, x, x, x, x, x, 2, 2, 2),
      k->layer_norm_backward_f32(NULL, x, x, x, x, x, x, 2, 2, 1e-5f),
      k->gelu_backward_f32(NULL, x, x, x, 8, 1),
      k->attention_backward_f32(NULL, x, x, x, x, NULL, x, x, x, x, x, x, x, 8, 1, 1, 1, 1, 1),
      k->softmax_cross_entropy_f32(NULL, x, x, x, x, 2, 2),
      k->sgd_momentum_f32(NULL, x, x, x, 8, 0.1f, 0.9f, 0.0f, 1),
      k->adamw_f32(NULL, x, x, x, x, 8, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1),
      k->patchify_f32(NULL, x, x, 1, 2, 2, 2, 2),
      k->embed_tokens_f32(NULL, x, x, x, x, 1, 1, 2),
      k->cls_token_f32(NULL, x, x, 1, 2, 2),
      k->row_sum_f32(NULL, x, x, 2, 2),
      k->embed_tokens_backward_f32(NULL, x, x, x, x, 1, 1, 2),
      k->cls_token_backward_f32(NULL, x, x, 1, 2, 2),
      k->zero(NULL, x, sizeof x)};
  for (size_t i = 0; i < sizeof statuses / sizeof *statuses; ++i)
    if (statuses[i] != HTP_KERNEL_ERR_SYSTEM) {
      printf("    FAIL entry %zu on a NULL environment: status %d\n", i, (int)statuses[i]);
      failed = 1;
    }
  printf("  %-46s %s\n", "CUDA table's training entries, no device", failed ? "FAIL" : "ok");
  failures += failed;
}

/* ----- Every case on one device ------------------------------------------- */

static void training_cases(device *d, int real_shapes) {
  const double start = now();
  /* linear: odd sizes, one-wide ends, and out 0 (dx zeroed, not left). */
  linear_case(d, 37, 19, 23, 0), linear_case(d, 5, 1, 7, 0), linear_case(d, 1, 33, 1, 0);
  linear_case(d, 301, 67, 129, 0), linear_case(d, 6, 5, 0, 0);
  /* layer norm: dims under, at and past one block's threads. */
  layer_norm_case(d, 5, 3), layer_norm_case(d, 33, 47), layer_norm_case(d, 7, 300);
  layer_norm_case(d, 300, 129);
  gelu_case(d, 1001), gelu_case(d, 70001);
  /* attention: an image's heads batched (B < H, and 70 heads past the 64
   * slots), a head's images batched (B > H, and 70 images past the
   * slots), no qkv bias, one token. */
  attention_case(d, 2, 7, 12, 3, 4, 1), attention_case(d, 5, 9, 8, 2, 4, 1);
  attention_case(d, 70, 3, 6, 1, 5, 1), attention_case(d, 1, 5, 9, 70, 1, 1);
  attention_case(d, 3, 17, 20, 5, 6, 0), attention_case(d, 4, 1, 5, 2, 3, 1);
  attention_case(d, 2, 50, 48, 3, 16, 1);
  cross_entropy_case(d, 13, 10, 0), cross_entropy_case(d, 1, 1, 0);
  cross_entropy_case(d, 257, 1000, 1), cross_entropy_case(d, 64, 37, 2);
  sgd_case(d, 1001), adamw_case(d, 4099);
  ends_case(d, 2, 1, 6, 9, 3, 7), ends_case(d, 70, 3, 8, 8, 4, 5);
  printf("odd shapes on %s: %.1f s\n", d->name, now() - start);
  if (!real_shapes) return;
  const double real = now();
  /* ViT-B/16: its MLP's two linears, layer norm and GELU at batch 2, its
   * attention at batch 1 (the reference's cost), 197 tokens. */
  linear_case(d, 394, 768, 3072, 197), linear_case(d, 394, 3072, 768, 197);
  layer_norm_case(d, 394, 768);
  gelu_case(d, 394 * 3072);
  attention_case(d, 1, 197, 768, 12, 64, 1);
  printf("ViT-B/16 shapes on %s: %.1f s\n", d->name, now() - real);
}

int main(void) {
  const double start = now();
  no_device_cases();
  failures += checker_negative_control();
  {
    device checked = {.name = "checked", .k = htp_checked_kernel_table()};
    if (htp_checked_kernel_env_create(&checked.env, checked.error, sizeof checked.error) !=
        HTP_KERNEL_OK) {
      fprintf(stderr, "FAIL: htp_checked_kernel_env_create: %s\n", checked.error);
      failures++;
    } else {
      const char *which = getenv("HTP_TEST_CHECKED_SHAPES");
      printf("the cases on the checked device:\n");
      training_cases(&checked, which && strcmp(which, "all") == 0);
      htp_checked_kernel_env_destroy(&checked.env);
    }
  }
  printf("checks without a GPU: %.1f s, %d failed\n", now() - start, failures);
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0)
    return no_device_exit(probe != cudaSuccess ? cudaGetErrorString(probe) : "no device",
                          failures);

  device cuda = {.name = "cuda", .k = htp_cuda_kernel_table()};
  if (htp_cuda_kernel_env_create(0, &cuda.env, cuda.error, sizeof cuda.error) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: htp_cuda_kernel_env_create: %s\n", cuda.error);
    return 1;
  }
  printf("the cases on the GPU:\n");
  training_cases(&cuda, 1);
  refusal_cases(&cuda);
  htp_cuda_kernel_env_destroy(&cuda.env);
  printf("%.1f s in all\n%s\n", now() - start, failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
