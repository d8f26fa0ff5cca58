/*===- test/kernels/test_kernels.c - CPU kernels vs naive references -----===*
 *
 * Each kernel is compared with a direct double-precision loop that follows
 * the formula in kernels/htp_kernels.h; the tolerance is relative to the
 * largest reference magnitude. Shapes are odd on purpose (no power of two).
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_bf16.h"
#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "test/kernels/test_data.h"

/* max |got - want| / max(|want|, floor); prints the first mismatch. */
static double relative_error(const float *got, const double *want, int64_t n) {
  double max_ref = 1e-30, max_diff = 0.0;
  int64_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_ref = fmax(max_ref, fabs(want[i]));
    double diff = fabs((double)got[i] - want[i]);
    if (!(diff <= max_diff)) { /* also catches NaN */
      max_diff = isnan(diff) ? INFINITY : diff;
      worst = i;
    }
  }
  double error = max_diff / max_ref;
  if (error > 1e-5)
    fprintf(stderr, "  worst at %lld: got %g want %g\n", (long long)worst, got[worst], want[worst]);
  return error;
}

static void reference_linear(const float *x, const float *w, const float *b, double *y,
                             int64_t rows, int64_t in, int64_t out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i)
        acc += (double)x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
}

static void test_linear(void **state) {
  (void)state;
  const int64_t rows = 37, in = 29, out = 53;
  float *x = random_floats(rows * in, -1, 1), *w = random_floats(out * in, -1, 1),
        *b = random_floats(out, -1, 1), *y = random_floats(rows * out, 5, 6);
  double *want = malloc(sizeof(double) * rows * out);
  for (int with_bias = 0; with_bias < 2; ++with_bias) {
    htp_cpu_linear_f32(x, w, with_bias ? b : NULL, y, rows, in, out);
    reference_linear(x, w, with_bias ? b : NULL, want, rows, in, out);
    assert_true(relative_error(y, want, rows * out) < 1e-5);
  }
  free(x); free(w); free(b); free(y); free(want);
}

static void test_layer_norm(void **state) {
  (void)state;
  const int64_t rows = 11, dim = 97;
  /* A large common offset: a one-pass E[x²]-E[x]² in f32 would lose it all. */
  float *x = random_floats(rows * dim, 1000, 1001), *g = random_floats(dim, 0.5, 1.5),
        *b = random_floats(dim, -1, 1), *y = malloc(sizeof(float) * rows * dim);
  double *want = malloc(sizeof(double) * rows * dim);
  const float eps = 1e-6f;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += x[r * dim + i];
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i)
      want[r * dim + i] = (x[r * dim + i] - mean) / sqrt(var + eps) * g[i] + b[i];
  }
  htp_cpu_layer_norm_f32(x, g, b, y, rows, dim, eps);
  assert_true(relative_error(y, want, rows * dim) < 1e-4);
  free(x); free(g); free(b); free(y); free(want);
}

static void test_gelu_and_add(void **state) {
  (void)state;
  const int64_t n = 1001;
  float *x = random_floats(n, -6, 6), *y = malloc(sizeof(float) * n), *z = random_floats(n, -1, 1);
  double *want = malloc(sizeof(double) * n);
  for (int64_t i = 0; i < n; ++i) want[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
  htp_cpu_gelu_f32(x, y, n, 0);
  assert_true(relative_error(y, want, n) < 1e-6);
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    want[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  htp_cpu_gelu_f32(x, y, n, 1);
  assert_true(relative_error(y, want, n) < 1e-6);
  htp_cpu_gelu_f32(x, x, n, 1); /* in place is allowed */
  assert_true(relative_error(x, want, n) < 1e-6);
  for (int64_t i = 0; i < n; ++i) want[i] = (double)x[i] + z[i];
  htp_cpu_add_f32(x, z, x, n); /* in place, y == a */
  assert_true(relative_error(x, want, n) < 1e-6);
  /* 77 rows of 13: the bias repeats every row. */
  for (int64_t i = 0; i < 77 * 13; ++i) want[i] = (double)x[i] + z[i % 13];
  htp_cpu_bias_add_f32(x, z, y, 77, 13);
  assert_true(relative_error(y, want, 77 * 13) < 1e-6);
  free(x); free(y); free(z); free(want);
}

/* Attention straight from the definition, in double. */
static void reference_attention(const float *x, const float *wqkv, const float *bqkv,
                                const float *wproj, const float *bproj, double *y,
                                int64_t batch, int64_t tokens, int64_t dim, int64_t heads,
                                int64_t head_dim) {
  int64_t inner = heads * head_dim, rows = batch * tokens;
  double *qkv = malloc(sizeof(double) * rows * 3 * inner);
  double *ctx = calloc((size_t)(rows * inner), sizeof(double));
  double *p = malloc(sizeof(double) * tokens);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < 3 * inner; ++o) {
      double acc = bqkv[o];
      for (int64_t i = 0; i < dim; ++i) acc += (double)x[r * dim + i] * wqkv[o * dim + i];
      qkv[r * 3 * inner + o] = acc;
    }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < tokens; ++t) {
        const double *q = qkv + (b * tokens + t) * 3 * inner + h * head_dim;
        double max = -INFINITY, sum = 0;
        for (int64_t s = 0; s < tokens; ++s) {
          const double *k = qkv + (b * tokens + s) * 3 * inner + inner + h * head_dim;
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d) dot += q[d] * k[d];
          p[s] = dot / sqrt((double)head_dim);
          max = fmax(max, p[s]);
        }
        for (int64_t s = 0; s < tokens; ++s) sum += (p[s] = exp(p[s] - max));
        for (int64_t s = 0; s < tokens; ++s) {
          const double *v = qkv + (b * tokens + s) * 3 * inner + 2 * inner + h * head_dim;
          for (int64_t d = 0; d < head_dim; ++d)
            ctx[(b * tokens + t) * inner + h * head_dim + d] += p[s] / sum * v[d];
        }
      }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < dim; ++o) {
      double acc = bproj[o];
      for (int64_t i = 0; i < inner; ++i) acc += ctx[r * inner + i] * wproj[o * inner + i];
      y[r * dim + o] = acc;
    }
  free(qkv); free(ctx); free(p);
}

static void check_attention(int64_t batch, int64_t tokens, int64_t dim, int64_t heads,
                            int64_t head_dim, float weight_scale) {
  int64_t inner = heads * head_dim, rows = batch * tokens;
  float *x = random_floats(rows * dim, -1, 1);
  float *wqkv = random_floats(3 * inner * dim, -weight_scale, weight_scale);
  float *bqkv = random_floats(3 * inner, -0.1f, 0.1f);
  float *wproj = random_floats(dim * inner, -0.2f, 0.2f), *bproj = random_floats(dim, -0.1f, 0.1f);
  float *y = malloc(sizeof(float) * rows * dim);
  float *scratch =
      malloc(sizeof(float) * htp_cpu_attention_scratch_floats(batch, tokens, dim, heads, head_dim));
  double *want = malloc(sizeof(double) * rows * dim);
  htp_cpu_attention_f32(x, wqkv, bqkv, wproj, bproj, y, scratch, batch, tokens, dim, heads,
                        head_dim);
  reference_attention(x, wqkv, bqkv, wproj, bproj, want, batch, tokens, dim, heads, head_dim);
  assert_true(relative_error(y, want, rows * dim) < 1e-4);
  free(x); free(wqkv); free(bqkv); free(wproj); free(bproj); free(y); free(scratch); free(want);
}

static void test_attention(void **state) {
  (void)state;
  check_attention(2, 7, 15, 3, 5, 0.3f);
  check_attention(1, 13, 24, 2, 12, 0.3f);
  /* A tensor-parallel shard: 2 of 4 heads, so inner (10) != model dim (20). */
  check_attention(3, 5, 20, 2, 5, 0.3f);
}

/* Scores of several hundred: exp without the max subtraction overflows. */
static void test_attention_large_scores(void **state) {
  (void)state;
  check_attention(1, 9, 16, 2, 8, 8.0f);
}

/* The exact GELU per element, not only against the largest value: its erfc
 * form must keep relative precision where GELU is tiny (x << 0) and near 0. */
static void test_gelu_elementwise_precision(void **state) {
  (void)state;
  const int64_t n = 20001;
  float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
  for (int64_t i = 0; i < n; ++i) x[i] = -12.0f + 24.0f * (float)i / (float)(n - 1);
  x[n / 2] = 0.0f;
  htp_cpu_gelu_f32(x, y, n, 0);
  double worst = 0, worst_x = 0;
  for (int64_t i = 0; i < n; ++i) {
    double want = 0.5 * x[i] * erfc(-x[i] / sqrt(2.0));
    double err = want == 0 ? fabs(y[i]) : fabs(y[i] - want) / fabs(want);
    if (err > worst) worst_x = x[i];
    worst = fmax(worst, err);
  }
  fprintf(stderr, "  gelu worst element relative error %.3g at %g\n", worst, worst_x);
  assert_true(worst < 1e-6);
  /* Far out: no NaN, GELU -> 0 below (underflow) and -> x above, exactly. */
  float far[4] = {-200.0f, -30.0f, 30.0f, 200.0f}, out[4];
  htp_cpu_gelu_f32(far, out, 4, 0);
  assert_true(fabsf(out[0]) < 1e-30f && fabsf(out[1]) < 1e-30f);
  assert_true(out[2] == 30.0f && out[3] == 200.0f);
  htp_cpu_gelu_f32(far, out, 4, 1);
  assert_true(fabsf(out[0]) < 1e-30f && fabsf(out[1]) < 1e-30f);
  assert_true(out[2] == 30.0f && out[3] == 200.0f);
  free(x); free(y);
}

/* ----- NaN, infinities, huge and tiny values ------------------------------
 * Through every vectorised function of cpu_internal.h and the kernels that
 * use them, against libm in double. Defined results: NaN stays NaN, e^+inf =
 * +inf, e^-inf = 0, GELU and its derivative take their limits at +-inf
 * (GELU(+inf) = +inf, GELU(-inf) = 0; the derivative 1 and 0), a softmax
 * row or loss row holding a NaN (or a +inf, whose max-subtracted score is
 * inf - inf) is NaN, and a row that holds none is as usual, huge or tiny
 * values included. Under UBSan (build-asan) nothing here may trap: e^x once
 * converted NaN to int32_t and shifted the negative result. */

/* The inputs, 37 of them: longer than a 16-lane vector twice, so specials
 * land in vector bodies and in scalar tails. */
static int special_inputs(float *x) {
  const float values[] = {NAN,      -NAN,     INFINITY, -INFINITY, 0.0f,     -0.0f,
                          FLT_MAX,  -FLT_MAX, 1e30f,    -1e30f,    1e20f,    -1e20f,
                          88.72f,   88.73f,   89.0f,    -87.5f,    -100.0f,  -103.5f,
                          -103.99f, -104.5f,  -110.0f,  -1000.0f,  FLT_MIN,  -FLT_MIN,
                          1e-45f,   -1e-45f,  1e-30f,   -1e-30f,   1.0f,     -1.0f,
                          20.0f,    -20.0f,   13.5f,    -13.5f,    3.0f,     -3.0f, 0.0f};
  const int n = (int)(sizeof values / sizeof values[0]);
  for (int i = 0; i < n; ++i)
    x[i] = values[i];
  const uint32_t signalling = 0x7fa00001u; /* a signalling NaN with a payload */
  memcpy(&x[n - 1], &signalling, sizeof signalling);
  return n;
}

/* got against the double reference want, element by element: NaN where and
 * only where want is NaN, infinities exactly (also where want is finite but
 * past FLT_MAX), else within rel |want| plus tiny (a subnormal result keeps
 * fewer bits than rel asks for). */
static int special_mismatches_within(const char *what, const float *x, const float *got,
                                     const double *want, int64_t n, double rel, double tiny) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float rounded = (float)want[i];
    const int ok = isnan(want[i])    ? isnan(got[i])
                   : isinf(rounded) ? got[i] == rounded
                                     : fabs((double)got[i] - want[i]) <=
                                           rel * fabs(want[i]) + tiny;
    if (!ok && bad++ < 8)
      fprintf(stderr, "  %s: at x[%lld] = %g got %.9g, want %.9g\n", what, (long long)i,
              x ? (double)x[i] : NAN, got[i], want[i]);
  }
  return bad;
}

/* f32 results: within rel, or 8 of the smallest subnormals. */
static int special_mismatches(const char *what, const float *x, const float *got,
                              const double *want, int64_t n, double rel) {
  return special_mismatches_within(what, x, got, want, n, rel, 8 * FLT_TRUE_MIN);
}

static double reference_gelu(double x, int tanh_approx) {
  if (isinf(x))
    return x > 0 ? x : 0.0;
  if (!tanh_approx)
    return 0.5 * x * erfc(-x / sqrt(2.0));
  /* 1 + tanh(u) = 2 / (1 + e^{-2u}), which keeps the tiny values of u << 0. */
  const double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * 2.0 / (1.0 + exp(-2.0 * u));
}

static double reference_gelu_derivative(double x, int tanh_approx) {
  if (isinf(x))
    return x > 0 ? 1.0 : 0.0;
  if (!tanh_approx)
    return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
  const double k = sqrt(2.0 / M_PI), c = 0.044715, u = k * (x + c * x * x * x);
  const double e = exp(-2.0 * fabs(u)); /* tanh' = 1 - tanh^2 = 4e / (1 + e)^2 */
  const double one_plus_tanh = u >= 0 ? 2.0 / (1.0 + e) : 2.0 * e / (1.0 + e);
  const double sech2 = 4.0 * e / ((1.0 + e) * (1.0 + e));
  return 0.5 * one_plus_tanh + (sech2 == 0 ? 0.0 : 0.5 * x * sech2 * k * (1.0 + 3.0 * c * x * x));
}

/* htp__expf and the exact GELU's erfc, and GELU forward and backward. */
static void test_special_values_elementwise(void **state) {
  (void)state;
  float x[64], got[64], dy[64];
  double want[64];
  const int n = special_inputs(x);
  for (int i = 0; i < n; ++i) {
    got[i] = htp__expf(x[i]);
    want[i] = exp((double)x[i]);
  }
  assert_int_equal(special_mismatches("expf", x, got, want, n, 5e-7), 0);
  /* The limits exactly: no clamp may leave e^-inf a subnormal. */
  assert_true(htp__expf(-INFINITY) == 0.0f && htp__expf(-104.0f) == 0.0f);
  assert_true(htp__expf(INFINITY) == INFINITY && isnan(htp__expf(NAN)));
  for (int i = 0; i < n; ++i) {
    got[i] = htp__erfc_gelu(x[i]);
    want[i] = isnan(x[i]) ? NAN : erfc(fabs((double)x[i]) / sqrt(2.0));
  }
  assert_int_equal(special_mismatches("erfc_gelu", x, got, want, n, 1e-6), 0);
  for (int tanh_approx = 0; tanh_approx < 2; ++tanh_approx) {
    const char *name = tanh_approx ? "gelu tanh" : "gelu";
    htp_cpu_gelu_f32(x, got, n, tanh_approx);
    for (int i = 0; i < n; ++i)
      want[i] = reference_gelu(x[i], tanh_approx);
    assert_int_equal(special_mismatches(name, x, got, want, n, 2e-6), 0);
    for (int i = 0; i < n; ++i)
      dy[i] = 1.0f;
    assert_int_equal(htp_cpu_kernel_table()->gelu_backward_f32(NULL, x, dy, got, n, tanh_approx),
                     HTP_KERNEL_OK);
    for (int i = 0; i < n; ++i)
      want[i] = reference_gelu_derivative(x[i], tanh_approx);
    assert_int_equal(special_mismatches(tanh_approx ? "gelu tanh'" : "gelu'", x, got, want, n,
                                        2e-6),
                     0);
    /* bf16 (NaN weights and activations included): widened, the same
     * kernel, rounded once; against the reference at the rounded input. */
    htp_bf16 xb[64], yb[64];
    float widened[64];
    htp_bf16_from_f32_n(x, xb, n);
    htp_bf16_to_f32_n(xb, widened, n);
    assert_int_equal(htp_cpu_kernel_table()->gelu_bf16(NULL, xb, yb, n, tanh_approx),
                     HTP_KERNEL_OK);
    htp_bf16_to_f32_n(yb, got, n);
    for (int i = 0; i < n; ++i)
      want[i] = reference_gelu(widened[i], tanh_approx);
    /* Half a bf16 ulp, or a bf16 subnormal step (2^-133). */
    assert_int_equal(special_mismatches_within(tanh_approx ? "gelu tanh bf16" : "gelu bf16",
                                               widened, got, want, n, 1.0 / 256, 0x1p-133),
                     0);
    /* A NaN gradient stays NaN whatever x is. */
    for (int i = 0; i < n; ++i)
      dy[i] = NAN;
    assert_int_equal(htp_cpu_kernel_table()->gelu_backward_f32(NULL, x, dy, got, n, tanh_approx),
                     HTP_KERNEL_OK);
    for (int i = 0; i < n; ++i)
      assert_true(isnan(got[i]));
  }
}

/* Softmax of rows in double, max subtracted as the kernels do: a row with a
 * NaN is NaN (fmax would skip it), one with +inf too (inf - inf). */
static void reference_softmax(const float *scores, double *want, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float *row = scores + r * cols;
    double max = -INFINITY, sum = 0;
    int has_nan = 0;
    for (int c = 0; c < cols; ++c) {
      has_nan |= isnan(row[c]);
      max = fmax(max, row[c]);
    }
    for (int c = 0; c < cols; ++c)
      sum += want[r * cols + c] = exp((double)row[c] - max);
    for (int c = 0; c < cols; ++c)
      want[r * cols + c] = has_nan ? NAN : want[r * cols + c] / sum;
  }
}

/* Rows of 19 (a vector body and a tail), each with one kind of value. */
enum { SPECIAL_COLS = 19 };
static int special_rows(float *rows) {
  const float kinds[][3] = {
      {0.5f, -0.25f, 1.0f},          /* ordinary */
      {NAN, 0.5f, 1.0f},             /* a NaN first: the max starts from it */
      {0.5f, NAN, 1.0f},             /* a NaN later */
      {0.5f, INFINITY, 1.0f},        /* +inf */
      {0.5f, -INFINITY, 1.0f},       /* -inf: probability 0 */
      {-INFINITY, -INFINITY, -INFINITY}, /* all -inf: no finite max */
      {FLT_MAX, -FLT_MAX, 0.0f},     /* huge: l - max overflows to -inf */
      {-FLT_MAX, -FLT_MAX, -FLT_MAX}, /* all equal and huge */
      {1e-45f, -1e-45f, 0.0f},       /* subnormal */
      {1e30f, -1e30f, 88.0f},
  };
  const int count = (int)(sizeof kinds / sizeof kinds[0]);
  for (int r = 0; r < count; ++r)
    for (int c = 0; c < SPECIAL_COLS; ++c)
      /* kinds[r][1] at column 11 (past a vector of 8), the others spread. */
      rows[r * SPECIAL_COLS + c] = c == 0 ? kinds[r][0] : c == 11 ? kinds[r][1]
                                   : c % 2 ? kinds[r][2] : kinds[r][2] - 0.125f * (float)(c % 5);
  return count;
}

static void test_special_values_softmax(void **state) {
  (void)state;
  float scores[16 * SPECIAL_COLS], got[16 * SPECIAL_COLS];
  double want[16 * SPECIAL_COLS];
  const int rows = special_rows(scores);
  memcpy(got, scores, sizeof(float) * rows * SPECIAL_COLS);
  htp__softmax_rows(got, rows, SPECIAL_COLS);
  reference_softmax(scores, want, rows, SPECIAL_COLS);
  assert_int_equal(special_mismatches("softmax", scores, got, want, rows * SPECIAL_COLS, 2e-6), 0);

  /* The loss, one row at a time (it is a mean over rows): one-hot targets
   * on column 11, then on column 3. A zero target takes no part, so a -inf
   * logit elsewhere leaves the loss finite; on the target it makes it +inf. */
  const htp_kernel_table *table = htp_cpu_kernel_table();
  for (int hot = 3; hot <= 11; hot += 8)
    for (int r = 0; r < rows; ++r) {
      const float *logits = scores + r * SPECIAL_COLS;
      float targets[SPECIAL_COLS] = {0}, loss, dlogits[SPECIAL_COLS];
      targets[hot] = 1.0f;
      assert_int_equal(table->softmax_cross_entropy_f32(NULL, logits, targets, &loss, dlogits, 1,
                                                        SPECIAL_COLS),
                       HTP_KERNEL_OK);
      const double *p = want + r * SPECIAL_COLS;
      double max = -INFINITY, sum = 0;
      for (int c = 0; c < SPECIAL_COLS; ++c)
        max = fmax(max, logits[c]);
      for (int c = 0; c < SPECIAL_COLS; ++c)
        sum += exp((double)logits[c] - max);
      double want_loss = isnan(p[0]) ? NAN : log(sum) - ((double)logits[hot] - max);
      double want_d[SPECIAL_COLS];
      for (int c = 0; c < SPECIAL_COLS; ++c)
        want_d[c] = p[c] - targets[c];
      char what[64];
      snprintf(what, sizeof what, "cross-entropy row %d, target %d", r, hot);
      assert_int_equal(special_mismatches(what, NULL, &loss, &want_loss, 1, 2e-6), 0);
      assert_int_equal(special_mismatches(what, logits, dlogits, want_d, SPECIAL_COLS, 2e-6), 0);
    }
}

/* Layer norm (in double inside) and attention (its fused softmax) with a
 * NaN, a +inf and a -inf in some rows or tokens and huge or tiny values in
 * others: the rows that hold them are NaN, the others as usual. */
static void test_special_values_rows(void **state) {
  (void)state;
  enum { DIM = 19 };
  float x[16 * DIM], gamma[DIM], beta[DIM], y[16 * DIM];
  double want[16 * DIM];
  const int rows = special_rows(x);
  for (int i = 0; i < DIM; ++i) {
    gamma[i] = 0.5f + 0.0625f * (float)i;
    beta[i] = -0.25f + 0.03125f * (float)i;
  }
  htp_cpu_layer_norm_f32(x, gamma, beta, y, rows, DIM, 1e-6f);
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < DIM; ++i) mean += x[r * DIM + i];
    mean /= DIM;
    for (int i = 0; i < DIM; ++i) var += (x[r * DIM + i] - mean) * (x[r * DIM + i] - mean);
    var /= DIM;
    for (int i = 0; i < DIM; ++i)
      want[r * DIM + i] = (x[r * DIM + i] - mean) / sqrt(var + 1e-6) * gamma[i] + beta[i];
  }
  assert_int_equal(special_mismatches("layer norm", x, y, want, rows * DIM, 1e-5), 0);

  /* Attention over 2 images of 7 tokens: a NaN in image 0's token 3, a
   * +inf in image 1's token 5; every other input ordinary. */
  const int64_t batch = 2, tokens = 7, dim = 12, heads = 3, head_dim = 4, inner = 12;
  float *in = random_floats(batch * tokens * dim, -1, 1);
  float *wqkv = random_floats(3 * inner * dim, -0.3f, 0.3f), *bqkv = random_floats(3 * inner, -0.1f, 0.1f);
  float *wproj = random_floats(dim * inner, -0.2f, 0.2f), *bproj = random_floats(dim, -0.1f, 0.1f);
  float *out = malloc(sizeof(float) * batch * tokens * dim);
  float *scratch =
      malloc(sizeof(float) * htp_cpu_attention_scratch_floats(batch, tokens, dim, heads, head_dim));
  double *reference = malloc(sizeof(double) * batch * tokens * dim);
  in[3 * dim + 5] = NAN;
  in[(tokens + 5) * dim + 2] = INFINITY;
  htp_cpu_attention_f32(in, wqkv, bqkv, wproj, bproj, out, scratch, batch, tokens, dim, heads,
                        head_dim);
  reference_attention(in, wqkv, bqkv, wproj, bproj, reference, batch, tokens, dim, heads, head_dim);
  assert_int_equal(special_mismatches("attention", NULL, out, reference, batch * tokens * dim, 1e-4),
                   0);
  /* Its backward recomputes the softmax: no trap, and the NaN reaches dx. */
  const htp_kernel_table *table = htp_cpu_kernel_table();
  const int64_t floats = table->attention_backward_scratch_floats(batch, tokens, dim, heads, head_dim);
  float *backward_scratch = malloc(sizeof(float) * floats);
  float *dy = random_floats(batch * tokens * dim, -1, 1), *dx = malloc(sizeof(float) * batch * tokens * dim);
  float *dwqkv = calloc((size_t)(3 * inner * dim), sizeof(float));
  assert_int_equal(table->attention_backward_f32(NULL, in, wqkv, bqkv, wproj, bproj, dy, dx, dwqkv,
                                                 NULL, NULL, NULL, backward_scratch, floats, batch,
                                                 tokens, dim, heads, head_dim),
                   HTP_KERNEL_OK);
  assert_true(isnan(dx[3 * dim]) && isnan(dwqkv[0]));
  free(in); free(wqkv); free(bqkv); free(wproj); free(bproj); free(out); free(scratch);
  free(reference); free(backward_scratch); free(dy); free(dx); free(dwqkv);
}

/* The environment's thread count as every BLAS build reads it: the first of
 * OPENBLAS, GOTO, BLIS, OMP _NUM_THREADS holding a whole count from 1 to
 * 1024; anything else passed over and the first such named. */
static void test_threads_from_env(void **state) {
  (void)state;
  static const char *const vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                     "BLIS_NUM_THREADS", "OMP_NUM_THREADS"};
  char *saved[4];
  for (int i = 0; i < 4; ++i) {
    const char *value = getenv(vars[i]);
    saved[i] = value ? strdup(value) : NULL;
    unsetenv(vars[i]);
  }
  const char *name = "x", *bad = "x";
  assert_int_equal(htp_cpu_threads_from_env(&name, &bad), 0);
  assert_null(name);
  assert_null(bad);
  setenv("OMP_NUM_THREADS", "7", 1);
  setenv("BLIS_NUM_THREADS", "3", 1);
  assert_int_equal(htp_cpu_threads_from_env(&name, &bad), 3);
  assert_string_equal(name, "BLIS_NUM_THREADS");
  assert_null(bad);
  static const char *const not_counts[] = {"0", "-2", "1025", "4x", " ", "99999999999999999999", "2.5"};
  for (size_t i = 0; i < sizeof not_counts / sizeof not_counts[0]; ++i) {
    setenv("OPENBLAS_NUM_THREADS", not_counts[i], 1);
    setenv("GOTO_NUM_THREADS", "", 1); /* empty: as if unset, not bad */
    assert_int_equal(htp_cpu_threads_from_env(&name, &bad), 3);
    assert_string_equal(name, "BLIS_NUM_THREADS");
    assert_non_null(bad);
    assert_string_equal(bad, "OPENBLAS_NUM_THREADS");
  }
  setenv("OPENBLAS_NUM_THREADS", "1024", 1);
  assert_int_equal(htp_cpu_threads_from_env(NULL, NULL), 1024);
  for (int i = 0; i < 4; ++i) {
    if (saved[i]) setenv(vars[i], saved[i], 1);
    else unsetenv(vars[i]);
    free(saved[i]);
  }
}

/* The threaded paths (three threads, so nothing divides evenly): sizes above
 * the kernels' single-thread cut-off, row and element counts prime, and
 * attention shapes that use whole vector tiles, tails and the BLAS fallback
 * for heads too large for a thread's stack tile. */
static void test_threaded(void **state) {
  (void)state;
  const int saved = htp_cpu_blas_threads();
  htp_cpu_set_blas_threads(3);
  const int64_t rows = 211, dim = 131, n = rows * dim;
  float *x = random_floats(n, -3, 3), *z = random_floats(n, -1, 1);
  float *g = random_floats(dim, 0.5, 1.5), *b = random_floats(dim, -1, 1);
  float *y = malloc(sizeof(float) * n);
  double *want = malloc(sizeof(double) * n);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += x[r * dim + i];
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i)
      want[r * dim + i] = (x[r * dim + i] - mean) / sqrt(var + 1e-5) * g[i] + b[i];
  }
  htp_cpu_layer_norm_f32(x, g, b, y, rows, dim, 1e-5f);
  assert_true(relative_error(y, want, n) < 1e-5);
  for (int64_t i = 0; i < n; ++i) want[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
  htp_cpu_gelu_f32(x, y, n, 0);
  assert_true(relative_error(y, want, n) < 1e-6);
  for (int64_t i = 0; i < n; ++i) want[i] = (double)x[i] + z[i];
  htp_cpu_add_f32(x, z, y, n);
  assert_true(relative_error(y, want, n) < 1e-6);
  for (int64_t i = 0; i < n; ++i) want[i] = (double)x[i] + b[i % dim];
  htp_cpu_bias_add_f32(x, b, y, rows, dim);
  assert_true(relative_error(y, want, n) < 1e-6);
  float *w = random_floats(dim * dim, -1, 1);
  htp_cpu_linear_f32(x, w, b, y, rows, dim, dim);
  reference_linear(x, w, b, want, rows, dim, dim);
  assert_true(relative_error(y, want, n) < 1e-5);
  /* Big enough (m n k >= 2e6) to be split by rows: 301 rows in four chunks
   * of 80 (a chunk has 1e6 multiply-adds at least), the last one short. */
  {
    const int64_t m = 301, k = 157, o = 101;
    float *a = random_floats(m * k, -1, 1), *wb = random_floats(o * k, -1, 1);
    float *c = malloc(sizeof(float) * m * o);
    double *ref = malloc(sizeof(double) * m * o);
    htp_cpu_linear_f32(a, wb, b, c, m, k, o);
    reference_linear(a, wb, b, ref, m, k, o);
    assert_true(relative_error(c, ref, m * o) < 1e-5);
    free(a); free(wb); free(c); free(ref);
  }
  /* Every path: the small-head products and the AVX-512 tiles where this
   * CPU has AVX-512 (the small heads forced onto the tiles), and the AVX2
   * tiles forced. */
  for (int paths = HTP_ATTENTION_ANY; paths <= HTP_ATTENTION_NARROW; ++paths) {
    htp__attention_force(paths);
    check_attention(5, 17, 40, 4, 12, 0.3f); /* the README model's heads: small products */
    check_attention(3, 32, 64, 2, 32, 0.3f); /* the small products' limits */
    check_attention(4, 1, 8, 2, 4, 0.3f);    /* one token */
    check_attention(3, 37, 40, 2, 32, 0.3f); /* whole 16- or 32-column tiles */
    check_attention(2, 19, 60, 3, 20, 0.3f); /* a tile and a tail, or only a tail */
    check_attention(2, 45, 80, 2, 40, 0.3f); /* tiles and an 8-column tail */
    check_attention(1, 70, 128, 2, 64, 0.3f); /* the ViT head size, keys not a multiple of 32 */
    check_attention(1, 530, 64, 1, 64, 0.3f); /* 64 x 544 > the stack tile: BLAS path */
  }
  htp__attention_force(HTP_ATTENTION_ANY);
  htp_cpu_set_blas_threads(saved);
  free(x); free(z); free(g); free(b); free(y); free(want); free(w);
}

/* Two callers at once (tp ranks are threads of one process): one gets the
 * pool, the other finds it busy and runs alone; both must be right. The
 * data is made before the threads start (the test RNG is not thread-safe). */
enum { C_BATCH = 3, C_DIM = 48, C_HEADS = 4, C_HEAD_DIM = 12 };

struct concurrent_arg {
  int64_t tokens;
  float *x, *wqkv, *bqkv, *wproj, *bproj, *y, *scratch;
  double *want;
  int failures;
};

static void concurrent_setup(struct concurrent_arg *arg, int64_t tokens) {
  const int64_t rows = C_BATCH * tokens, dim = C_DIM;
  arg->tokens = tokens;
  arg->x = random_floats(rows * dim, -1, 1);
  arg->wqkv = random_floats(3 * dim * dim, -0.3f, 0.3f);
  arg->bqkv = random_floats(3 * dim, -0.1f, 0.1f);
  arg->wproj = random_floats(dim * dim, -0.2f, 0.2f);
  arg->bproj = random_floats(dim, -0.1f, 0.1f);
  arg->y = malloc(sizeof(float) * rows * dim);
  const int64_t floats =
      htp_cpu_attention_scratch_floats(C_BATCH, tokens, dim, C_HEADS, C_HEAD_DIM);
  assert_true(floats > 0);
  arg->scratch = malloc(sizeof(float) * (size_t)floats);
  arg->want = malloc(sizeof(double) * rows * dim);
  reference_attention(arg->x, arg->wqkv, arg->bqkv, arg->wproj, arg->bproj, arg->want, C_BATCH,
                      tokens, dim, C_HEADS, C_HEAD_DIM);
  arg->failures = 0;
}

static void *concurrent_caller(void *p) {
  struct concurrent_arg *arg = p;
  for (int round = 0; round < 20; ++round) {
    htp_cpu_attention_f32(arg->x, arg->wqkv, arg->bqkv, arg->wproj, arg->bproj, arg->y,
                          arg->scratch, C_BATCH, arg->tokens, C_DIM, C_HEADS, C_HEAD_DIM);
    htp_cpu_gelu_f32(arg->y, arg->y, C_BATCH * arg->tokens * C_DIM, 0); /* in place, ignored */
    htp_cpu_attention_f32(arg->x, arg->wqkv, arg->bqkv, arg->wproj, arg->bproj, arg->y,
                          arg->scratch, C_BATCH, arg->tokens, C_DIM, C_HEADS, C_HEAD_DIM);
    arg->failures += !(relative_error(arg->y, arg->want, C_BATCH * arg->tokens * C_DIM) < 1e-4);
  }
  return NULL;
}

static void test_concurrent_callers(void **state) {
  (void)state;
  const int saved = htp_cpu_blas_threads();
  htp_cpu_set_blas_threads(3);
  struct concurrent_arg args[2];
  concurrent_setup(&args[0], 23);
  concurrent_setup(&args[1], 31);
  pthread_t threads[2];
  for (int i = 0; i < 2; ++i)
    assert_int_equal(pthread_create(&threads[i], NULL, concurrent_caller, &args[i]), 0);
  for (int i = 0; i < 2; ++i)
    pthread_join(threads[i], NULL);
  htp_cpu_set_blas_threads(saved);
  for (int i = 0; i < 2; ++i) {
    assert_int_equal(args[i].failures, 0);
    free(args[i].x); free(args[i].wqkv); free(args[i].bqkv); free(args[i].wproj);
    free(args[i].bproj); free(args[i].y); free(args[i].scratch); free(args[i].want);
  }
}

/* The pool itself, hammered: caller threads run jobs of alternating small
 * and large chunk counts back to back, each chunk marking its elements. A
 * worker that ran a chunk of one job with another job's fields (a claim
 * racing the next caller's set-up) shows as an element marked twice, not at
 * all, or out of range. */
enum { POOL_CALLERS = 4, POOL_JOBS = 20000, POOL_MAX_N = 4096 };

struct pool_job {
  int n;
  _Atomic int bad;
  _Atomic unsigned char marks[POOL_MAX_N];
};

static void mark_chunk(void *ctx, int64_t begin, int64_t end) {
  struct pool_job *job = ctx;
  if (begin < 0 || end > job->n || begin >= end) {
    atomic_fetch_add(&job->bad, 1);
    return;
  }
  for (int64_t i = begin; i < end; ++i)
    atomic_fetch_add(&job->marks[i], 1);
}

static void *pool_caller(void *arg) {
  int *failures = arg;
  struct pool_job *job = calloc(1, sizeof *job);
  unsigned seed = (unsigned)(uintptr_t)arg;
  for (int j = 0; job && j < POOL_JOBS; ++j) {
    seed = seed * 1103515245u + 12345u;
    job->n = j % 2 ? 2 + (int)(seed >> 16) % 16 : POOL_MAX_N - (int)(seed >> 16) % 64;
    atomic_store(&job->bad, 0);
    for (int i = 0; i < job->n; ++i)
      atomic_store(&job->marks[i], 0);
    htp__parallel(job->n, 1 + j % 3, mark_chunk, job);
    int wrong = atomic_load(&job->bad);
    for (int i = 0; i < job->n; ++i)
      wrong += atomic_load(&job->marks[i]) != 1;
    *failures += wrong != 0;
  }
  free(job);
  return NULL;
}

static void test_pool_jobs_back_to_back(void **state) {
  (void)state;
  const int saved = htp_cpu_blas_threads();
  htp_cpu_set_blas_threads(3);
  pthread_t threads[POOL_CALLERS];
  int failures[POOL_CALLERS] = {0};
  for (int i = 0; i < POOL_CALLERS; ++i)
    assert_int_equal(pthread_create(&threads[i], NULL, pool_caller, &failures[i]), 0);
  for (int i = 0; i < POOL_CALLERS; ++i)
    pthread_join(threads[i], NULL);
  htp_cpu_set_blas_threads(saved);
  for (int i = 0; i < POOL_CALLERS; ++i)
    assert_int_equal(failures[i], 0);
}

/* The pool's workers are joined when the process exits (valgrind called
 * them "possibly lost"). A fresh process (this binary again, so no earlier
 * test's pool) registers an exit handler before it first uses the pool;
 * exit handlers run last-registered first, so by the time it runs the
 * pool's own has joined its workers and only the main thread is left. */
static int threads_in_process(void) {
  DIR *tasks = opendir("/proc/self/task");
  if (!tasks)
    return -1;
  int count = 0;
  for (struct dirent *entry; (entry = readdir(tasks));)
    count += entry->d_name[0] != '.';
  closedir(tasks);
  return count;
}

/* The threads a process has besides the pool's once it has started one:
 * its own, and under ThreadSanitizer the sanitizer's background thread
 * (started with the first thread, not joined at exit). */
#if defined(__SANITIZE_THREAD__)
enum { OWN_THREADS = 2 };
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
enum { OWN_THREADS = 2 };
#else
enum { OWN_THREADS = 1 };
#endif
#else
enum { OWN_THREADS = 1 };
#endif

static void exit_with_thread_count(void) {
  /* A joined thread's task can stay listed for a moment after the join
   * returns (the kernel reaps it just after waking the joiner): a second. */
  int threads = threads_in_process();
  for (int wait = 0; wait < 200 && threads > OWN_THREADS; ++wait) {
    usleep(5000);
    threads = threads_in_process();
  }
  if (threads != OWN_THREADS)
    fprintf(stderr, "  at exit: %d threads (%d before the pool), the pool's workers not joined\n",
            threads, OWN_THREADS);
  _exit(threads == OWN_THREADS ? 0 : 10);
}

static void add_ones(void *ctx, int64_t begin, int64_t end) {
  atomic_fetch_add((_Atomic int64_t *)ctx, end - begin);
}

static int pool_exit_probe(void) {
  atexit(exit_with_thread_count);
  htp_cpu_set_blas_threads(4);
  _Atomic int64_t total = 0;
  for (int job = 0; job < 20; ++job)
    htp__parallel(1 << 16, 1024, add_ones, (void *)&total);
  if (total != 20 << 16 || threads_in_process() < OWN_THREADS + 1) {
    fprintf(stderr, "  the pool ran %lld items on %d threads\n", (long long)total,
            threads_in_process());
    _exit(3);
  }
  return 0; /* exit: the pool's handler, then exit_with_thread_count */
}

static void test_pool_joined_at_exit(void **state) {
  (void)state;
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    execl("/proc/self/exe", "test_kernels", "--pool-exit-probe", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ONEDNN_MAX_CPU_ISA caps htp's own AVX-512 attention kernels with the
 * GEMMs (htp__isa_cap_allows_avx512): below avx512_core (the AVX2 rows of
 * kernels.*.AVX2, and e2e runs under the cap) none runs. */
static void test_isa_cap(void **state) {
  (void)state;
  const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
  if (cap && (strcmp(cap, "AVX2") == 0 || strcmp(cap, "SSE41") == 0 || strcmp(cap, "AVX") == 0)) {
    assert_int_equal(htp__isa_cap_allows_avx512(), 0);
    assert_int_equal(htp__wide_tiles(), 0);
    assert_int_equal(htp__small_heads(17, 12), 0);
  } else if (!cap || strncmp(cap, "AVX512", 6) == 0) {
    /* Uncapped (or capped at an AVX-512 level): the CPU alone decides
     * (oneDNN's avx512_core is F, BW, VL and DQ). */
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    assert_int_equal(htp__isa_cap_allows_avx512(), avx512);
  }
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--pool-exit-probe") == 0)
    return pool_exit_probe();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_from_env),
      cmocka_unit_test(test_isa_cap),
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_layer_norm),
      cmocka_unit_test(test_gelu_and_add),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_attention_large_scores),
      cmocka_unit_test(test_gelu_elementwise_precision),
      cmocka_unit_test(test_special_values_elementwise),
      cmocka_unit_test(test_special_values_softmax),
      cmocka_unit_test(test_special_values_rows),
      cmocka_unit_test(test_threaded),
      cmocka_unit_test(test_concurrent_callers),
      cmocka_unit_test(test_pool_jobs_back_to_back),
      cmocka_unit_test(test_pool_joined_at_exit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
