/*===- kernels/cpu/elementwise.c - GELU, residual add, bias add ----------===*
 *
 * Threaded over the kernels' share of the cores (htp__threads) and written
 * so the loops vectorise: the exact GELU uses the erfc of cpu_internal.h
 * (~2e-7 relative) instead of a per-element libm erff call.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <math.h>

/* 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2), taken as
 * 0.5 x (2 - erfc(|x|/sqrt 2)) for x >= 0 so both sides keep full relative
 * precision (erfc is accurate where it is small, 2 - erfc where it is not).
 * GELU(+inf) = +inf, GELU(-inf) = 0, NaN stays NaN (cpu_internal.h). */
HTP_VECTOR_CLONES
static void gelu_erf_range(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float e = htp__erfc_gelu(v);
    y[i] = 0.5f * htp__gelu_far_left(v) * (v >= 0.0f ? 2.0f - e : e);
  }
}

/* tanh(u) = 1 - 2 / (e^{2u} + 1): fine in relative terms for GELU, whose
 * factor (1 + tanh) is what matters and never cancels badly for u > 0. For
 * u < 0, 1 + tanh(u) = 2 e^{2u} / (e^{2u} + 1) keeps the small values. */
HTP_VECTOR_CLONES
static void gelu_tanh_range(const float *x, float *y, int64_t n) {
  const float k = 0.7978845608028654f; /* sqrt(2/pi) */
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = k * (v + 0.044715f * v * v * v);
    float e = htp__expf(-2.0f * fabsf(u)); /* in [0, 1] */
    float one_plus_tanh = u >= 0.0f ? 2.0f / (1.0f + e) : 2.0f * e / (1.0f + e);
    y[i] = 0.5f * htp__gelu_far_left(v) * one_plus_tanh;
  }
}

struct gelu_job {
  const float *x;
  float *y;
  int32_t tanh_approx;
};

void htp__gelu_range(const float *x, float *y, int64_t n, int32_t tanh_approx) {
  if (tanh_approx)
    gelu_tanh_range(x, y, n);
  else
    gelu_erf_range(x, y, n);
}

static void gelu_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct gelu_job *job = ctx;
  htp__gelu_range(job->x + begin, job->y + begin, end - begin, job->tanh_approx);
}

void htp_cpu_gelu_f32(const float *x, float *y, int64_t n, int32_t tanh_approx) {
  struct gelu_job job = {x, y, tanh_approx};
  htp__parallel(n, HTP_GRAIN, gelu_chunk, &job);
}

HTP_VECTOR_CLONES
static void add_range(const float *a, const float *b, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = a[i] + b[i];
}

struct add_job {
  const float *a, *b;
  float *y;
  int64_t cols; /* bias_add: the bias's length; add: 0 */
};

static void add_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct add_job *job = ctx;
  add_range(job->a + begin, job->b + begin, job->y + begin, end - begin);
}

void htp_cpu_add_f32(const float *a, const float *b, float *y, int64_t n) {
  struct add_job job = {a, b, y, 0};
  /* Memory-bound: bigger chunks than compute-bound loops. */
  htp__parallel(n, 4 * HTP_GRAIN, add_chunk, &job);
}

static void bias_add_rows(void *ctx, int64_t begin, int64_t end) {
  const struct add_job *job = ctx;
  for (int64_t r = begin; r < end; ++r)
    add_range(job->a + r * job->cols, job->b, job->y + r * job->cols, job->cols);
}

void htp_cpu_bias_add_f32(const float *x, const float *bias, float *y, int64_t rows,
                          int64_t cols) {
  struct add_job job = {x, bias, y, cols};
  htp__parallel(rows, cols > 0 ? 1 + 4 * HTP_GRAIN / cols : rows, bias_add_rows, &job);
}
