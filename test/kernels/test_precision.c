/*===- test/kernels/test_precision.c - Products with a weight at TF32 / bf16 -===*
 *
 * The CPU table's set_matmul_precision (htp_config.matmul_precision, htp-run
 * --matmul-precision): every product with a weight (the linear, its
 * backward's dx and dW, the unit kernels' linears) takes its operands
 * rounded to TF32 or bf16 and sums the exact products in f32. Checked
 * element by element against double sums over operands rounded here with
 * frexp/rint/ldexp (to nearest, ties to even: not the kernels' bit
 * arithmetic), within an f32 summation bound; as negative controls the
 * unrounded operands' sums must break that bound somewhere (the rounding
 * happened), and f32 precision must meet the exact sums. Shapes cover C
 * split by rows and by columns over the pool, transposed A (dW), beta 1
 * (bias, dW and accumulating units), and one element. ctest runs it again
 * at oneDNN ISA caps: AVX2 (rounded f32 copies) and AVX512_CORE_BF16
 * (bf16 on oneDNN's bf16 units).
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "test/kernels/test_data.h"

static const int PRECISIONS[] = {HTP_MATMUL_F32, HTP_MATMUL_TF32, HTP_MATMUL_BF16};

/* Mantissa bits kept (beyond the leading one) by a precision. */
static int kept_bits(int precision) {
  return precision == HTP_MATMUL_BF16 ? 7 : precision == HTP_MATMUL_TF32 ? 10 : 23;
}

/* x rounded to `kept` mantissa bits, to nearest with ties to even (rint in
 * the default rounding mode), from the value's binary exponent. */
static double round_to(double x, int kept) {
  if (kept >= 23 || x == 0.0 || !isfinite(x)) return x;
  int e;
  const double m = frexp(x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
  return ldexp(rint(ldexp(m, kept + 1)), e - kept - 1);
}

/* One product's check: C [m, n] against sums over p < k of A(i, p) B(p, j),
 * given as double arrays read through strides, plus c0 (the value C
 * started from, or the bias; NULL: 0). */
typedef struct product {
  int64_t m, n, k;
  const float *a, *b;
  int64_t a_i, a_p, b_p, b_j; /* A(i, p) = a[i a_i + p a_p], B(p, j) = b[p b_p + j b_j] */
  const float *c0;            /* [m, n], or NULL */
  const float *bias;          /* [n], or NULL */
} product;

/* max over elements of |got - sum| / bound, where sum is over operands
 * rounded to `kept` bits and bound = eps32 (2 |sum| + 4 sqrt(k + 2) S),
 * S the sum of the terms' magnitudes (f32 summation of k terms: its error
 * grows like sqrt(k) eps S in practice; 4x margin). */
static double worst_ratio(const product *pr, const float *got, int kept) {
  const double eps = FLT_EPSILON;
  double worst = 0.0;
  for (int64_t i = 0; i < pr->m; ++i)
    for (int64_t j = 0; j < pr->n; ++j) {
      double sum = 0.0, size = 0.0;
      if (pr->c0) sum += pr->c0[i * pr->n + j], size += fabs(pr->c0[i * pr->n + j]);
      if (pr->bias) sum += pr->bias[j], size += fabs(pr->bias[j]);
      for (int64_t p = 0; p < pr->k; ++p) {
        const double t = round_to(pr->a[i * pr->a_i + p * pr->a_p], kept) *
                         round_to(pr->b[p * pr->b_p + j * pr->b_j], kept);
        sum += t;
        size += fabs(t);
      }
      const double bound = eps * (2.0 * fabs(sum) + 4.0 * sqrt((double)pr->k + 2.0) * size);
      const double diff = fabs((double)got[i * pr->n + j] - sum);
      const double ratio =
          isnan(diff) ? INFINITY : bound > 0 ? diff / bound : diff > 0 ? INFINITY : 0.0;
      if (ratio > worst) worst = ratio;
    }
  return worst;
}

/* The product holds at its precision; against the unrounded operands it
 * must fail (TF32, bf16) or hold (f32). */
static void expect_product(const product *pr, const float *got, int precision, const char *what) {
  const double at = worst_ratio(pr, got, kept_bits(precision));
  const double exact = worst_ratio(pr, got, 23);
  if (!(at <= 1.0) || (precision != HTP_MATMUL_F32 && !(exact > 1.0)))
    fprintf(stderr, "  %s, precision %d [%lld x %lld x %lld]: worst |error| / bound %.3g with "
            "rounded operands, %.3g with exact ones\n", what, precision, (long long)pr->m,
            (long long)pr->k, (long long)pr->n, at, exact);
  assert_true(at <= 1.0);
  if (precision != HTP_MATMUL_F32) assert_true(exact > 1.0);
}

static htp_kernel_env env;
static char error[256];

static void set_precision(int precision) {
  const htp_kernel_table *t = htp_cpu_kernel_table();
  assert_int_equal(t->set_matmul_precision(&env, precision), HTP_KERNEL_OK);
}

/* rows, in, out: C split by rows (rows >= out), by columns (out > rows),
 * below the pool's threshold, and one element. */
static const int64_t SHAPES[][3] = {{1, 1, 1},     {7, 33, 5},     {64, 96, 200},
                                    {197, 192, 576}, {16, 300, 700}, {40, 1000, 24}};
enum { NUM_SHAPES = sizeof SHAPES / sizeof SHAPES[0] };

static void test_linear(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  for (size_t s = 0; s < NUM_SHAPES; ++s)
    for (size_t q = 0; q < sizeof PRECISIONS / sizeof *PRECISIONS; ++q) {
      const int64_t rows = SHAPES[s][0], in = SHAPES[s][1], out = SHAPES[s][2];
      float *x = random_floats(rows * in, -2.0f, 2.0f), *w = random_floats(out * in, -1.0f, 1.0f);
      float *b = random_floats(out, -1.0f, 1.0f), *y = malloc(sizeof(float) * rows * out);
      set_precision(PRECISIONS[q]);
      for (int with_bias = 0; with_bias < 2; ++with_bias) {
        assert_int_equal(t->linear_f32(&env, x, w, with_bias ? b : NULL, y, rows, in, out),
                         HTP_KERNEL_OK);
        const product pr = {rows, out, in, x, w, in, 1, 1, in, NULL, with_bias ? b : NULL};
        expect_product(&pr, y, PRECISIONS[q], with_bias ? "linear with a bias" : "linear");
      }
      free(x), free(w), free(b), free(y);
    }
  set_precision(HTP_MATMUL_F32);
}

static void test_linear_backward(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  for (size_t s = 0; s < NUM_SHAPES; ++s)
    for (size_t q = 0; q < sizeof PRECISIONS / sizeof *PRECISIONS; ++q) {
      const int64_t rows = SHAPES[s][0], in = SHAPES[s][1], out = SHAPES[s][2];
      float *x = random_floats(rows * in, -2.0f, 2.0f), *w = random_floats(out * in, -1.0f, 1.0f);
      float *dy = random_floats(rows * out, -1.0f, 1.0f), *dx = malloc(sizeof(float) * rows * in);
      float *dw0 = random_floats(out * in, -1.0f, 1.0f), *dw = malloc(sizeof(float) * out * in);
      memcpy(dw, dw0, sizeof(float) * out * in); /* accumulated onto */
      set_precision(PRECISIONS[q]);
      assert_int_equal(t->linear_backward_f32(&env, x, w, dy, dx, dw, NULL, rows, in, out),
                       HTP_KERNEL_OK);
      /* dx [rows, in] = dy [rows, out] · w [out, in]; dw [out, in] += dyᵀ · x */
      const product dx_product = {rows, in, out, dy, w, out, 1, in, 1, NULL, NULL};
      const product dw_product = {out, in, rows, dy, x, 1, out, in, 1, dw0, NULL};
      expect_product(&dx_product, dx, PRECISIONS[q], "linear backward dx");
      expect_product(&dw_product, dw, PRECISIONS[q], "linear backward dW (A transposed)");
      free(x), free(w), free(dy), free(dx), free(dw0), free(dw);
    }
  set_precision(HTP_MATMUL_F32);
}

/* The row-parallel unit linear over listed units, accumulating onto y. */
static void test_linear_units(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  const int64_t rows = 50, width = 16, units = 6, in = width * units, out = 40;
  const int32_t list[] = {4, 0, 1, 5}; /* three runs, one GEMM each: {4}, {0, 1}, {5} */
  for (size_t q = 0; q < sizeof PRECISIONS / sizeof *PRECISIONS; ++q) {
    float *a = random_floats(rows * in, -2.0f, 2.0f), *w = random_floats(out * in, -1.0f, 1.0f);
    float *y0 = random_floats(rows * out, -1.0f, 1.0f), *y = malloc(sizeof(float) * rows * out);
    memcpy(y, y0, sizeof(float) * rows * out);
    set_precision(PRECISIONS[q]);
    assert_int_equal(t->linear_units_f32(&env, a, w, y, rows, in, out, width, list, 4, 1),
                     HTP_KERNEL_OK);
    /* The listed units' columns of a and w, zero elsewhere: the same sum. */
    float *a_listed = calloc((size_t)(rows * in), sizeof(float));
    for (int64_t r = 0; r < rows; ++r)
      for (int u = 0; u < 4; ++u)
        memcpy(a_listed + r * in + list[u] * width, a + r * in + list[u] * width,
               sizeof(float) * width);
    const product pr = {rows, out, in, a_listed, w, in, 1, 1, in, y0, NULL};
    expect_product(&pr, y, PRECISIONS[q], "linear units (accumulating)");
    free(a), free(w), free(y0), free(y), free(a_listed);
  }
  set_precision(HTP_MATMUL_F32);
}

/* A NaN or an infinity in an operand reaches the outputs it feeds, at every
 * precision (rounding keeps them), and no other. */
static void test_nonfinite(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  const int64_t rows = 64, in = 96, out = 200;
  for (size_t q = 0; q < sizeof PRECISIONS / sizeof *PRECISIONS; ++q) {
    float *x = random_floats(rows * in, -2.0f, 2.0f), *w = random_floats(out * in, -1.0f, 1.0f);
    float *y = malloc(sizeof(float) * rows * out);
    x[3 * in + 7] = NAN;
    x[10 * in + 1] = INFINITY;
    set_precision(PRECISIONS[q]);
    assert_int_equal(t->linear_f32(&env, x, w, NULL, y, rows, in, out), HTP_KERNEL_OK);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) {
        const float v = y[r * out + j];
        if (r == 3) assert_true(isnan(v));
        else if (r == 10) assert_true(isinf(v) || isnan(v)); /* inf · w summed: inf (or nan) */
        else assert_true(isfinite(v));
      }
    free(x), free(w), free(y);
  }
  set_precision(HTP_MATMUL_F32);
}

static void test_refuses_unknown(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  assert_int_equal(t->set_matmul_precision(&env, 3), HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "not an htp_matmul_precision"));
  assert_int_equal(t->set_matmul_precision(&env, -1), HTP_KERNEL_ERR_INVALID);
}

int main(void) {
  htp_kernel_env_init(&env, error, sizeof error);
  htp_cpu_set_blas_threads(2); /* C split over the pool (and by each side) */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear),       cmocka_unit_test(test_linear_backward),
      cmocka_unit_test(test_linear_units), cmocka_unit_test(test_nonfinite),
      cmocka_unit_test(test_refuses_unknown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
