/*===- test/kernels/test_units.c - work-unit kernels vs full kernels -----===*
 *
 * The unit kernels (htp_cpu_attention_heads_f32, htp_cpu_mlp_hidden_units_f32,
 * htp_cpu_linear_units_f32) against (1) the full kernels over all units,
 * (2) naive double-precision loops over the listed subset, written from the
 * math, and (3) one-unit shards packed the way the migration packs them.
 * Shapes are odd on purpose; unit lists are out of order and have gaps.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"

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

/* max |got - want| / max |want|; prints the worst mismatch when above tol. */
static double relative_error(const float *got, const double *want, int64_t n, double tol) {
  double max_ref = 1e-30, max_diff = 0.0;
  int64_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_ref = fmax(max_ref, fabs(want[i]));
    double diff = fabs((double)got[i] - want[i]);
    if (!(diff <= max_diff)) {
      max_diff = isnan(diff) ? INFINITY : diff;
      worst = i;
    }
  }
  double error = max_diff / max_ref;
  if (error > tol)
    fprintf(stderr, "  worst at %lld: got %g want %g (error %g)\n", (long long)worst, got[worst],
            want[worst], error);
  return error;
}
static double float_error(const float *got, const float *want, int64_t n, double tol) {
  double *w = malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; ++i) w[i] = want[i];
  double e = relative_error(got, w, n, tol);
  free(w);
  return e;
}

/* Context of the listed heads from the definition, in double, into
 * ctx[rows, heads * head_dim] (other columns 0). */
static void reference_heads(const float *x, const float *wqkv, const float *bqkv, double *ctx,
                            int64_t batch, int64_t tokens, int64_t dim, int64_t heads,
                            int64_t head_dim, const int32_t *list, int64_t count) {
  const int64_t inner = heads * head_dim, rows = batch * tokens;
  memset(ctx, 0, sizeof(double) * (size_t)(rows * inner));
  double *q = malloc(sizeof(double) * rows * head_dim), *k = malloc(sizeof(double) * rows * head_dim),
         *v = malloc(sizeof(double) * rows * head_dim), *p = malloc(sizeof(double) * tokens);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t h = list[i];
    double *dst[3] = {q, k, v};
    for (int part = 0; part < 3; ++part)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < head_dim; ++c) {
          int64_t o = part * inner + h * head_dim + c;
          double acc = bqkv[o];
          for (int64_t j = 0; j < dim; ++j) acc += (double)x[r * dim + j] * wqkv[o * dim + j];
          dst[part][r * head_dim + c] = acc;
        }
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < tokens; ++t) {
        double max = -INFINITY, sum = 0;
        for (int64_t s = 0; s < tokens; ++s) {
          double dot = 0;
          for (int64_t c = 0; c < head_dim; ++c)
            dot += q[(b * tokens + t) * head_dim + c] * k[(b * tokens + s) * head_dim + c];
          p[s] = dot / sqrt((double)head_dim);
          max = fmax(max, p[s]);
        }
        for (int64_t s = 0; s < tokens; ++s) sum += (p[s] = exp(p[s] - max));
        for (int64_t s = 0; s < tokens; ++s)
          for (int64_t c = 0; c < head_dim; ++c)
            ctx[(b * tokens + t) * inner + h * head_dim + c] +=
                p[s] / sum * v[(b * tokens + s) * head_dim + c];
      }
  }
  free(q); free(k); free(v); free(p);
}

enum { BATCH = 2, TOKENS = 7, DIM = 22, HEADS = 5, HEAD_DIM = 6 };
#define ROWS (BATCH * TOKENS)
#define INNER (HEADS * HEAD_DIM)
#define HEAD_SCRATCH (ROWS * 3 * HEAD_DIM + TOKENS * TOKENS)

/* 1: all heads, then the row-parallel projection over all heads, equals the
 * full attention kernel with no proj bias. */
static void test_01_attention_all_heads(void **state) {
  (void)state;
  float *x = random_floats(ROWS * DIM, -1, 1), *wqkv = random_floats(3 * INNER * DIM, -0.3f, 0.3f);
  float *bqkv = random_floats(3 * INNER, -0.1f, 0.1f), *wproj = random_floats(DIM * INNER, -0.2f, 0.2f);
  float *ctx = random_floats(ROWS * INNER, 7, 8), *y = random_floats(ROWS * DIM, 7, 8);
  float *want = malloc(sizeof(float) * ROWS * DIM);
  float *scratch = malloc(sizeof(float) * htp_cpu_attention_scratch_floats(BATCH, TOKENS, DIM, HEADS, HEAD_DIM));
  float head_scratch[HEAD_SCRATCH];
  const int32_t all[HEADS] = {0, 1, 2, 3, 4};
  htp_cpu_attention_f32(x, wqkv, bqkv, wproj, NULL, want, scratch, BATCH, TOKENS, DIM, HEADS, HEAD_DIM);
  htp_cpu_attention_heads_f32(x, wqkv, bqkv, ctx, head_scratch, BATCH, TOKENS, DIM, HEADS, HEAD_DIM, all, HEADS);
  htp_cpu_linear_units_f32(ctx, wproj, y, ROWS, INNER, DIM, HEAD_DIM, all, HEADS, 0);
  assert_true(float_error(y, want, ROWS * DIM, 1e-5) < 1e-5);
  /* Out of order, one GEMM per head: the same result. */
  const int32_t shuffled[HEADS] = {3, 0, 4, 2, 1};
  htp_cpu_linear_units_f32(ctx, wproj, y, ROWS, INNER, DIM, HEAD_DIM, shuffled, HEADS, 0);
  assert_true(float_error(y, want, ROWS * DIM, 1e-5) < 1e-5);
  free(x); free(wqkv); free(bqkv); free(wproj); free(ctx); free(y); free(want); free(scratch);
}

/* 2: a subset of heads (out of order, with gaps) equals the double reference
 * of that subset; columns of other heads are untouched; the projection over
 * the subset equals the reference projection of those columns. */
static void test_02_attention_subset(void **state) {
  (void)state;
  float *x = random_floats(ROWS * DIM, -1, 1), *wqkv = random_floats(3 * INNER * DIM, -0.4f, 0.4f);
  float *bqkv = random_floats(3 * INNER, -0.1f, 0.1f), *wproj = random_floats(DIM * INNER, -0.2f, 0.2f);
  float *ctx = malloc(sizeof(float) * ROWS * INNER), *y = random_floats(ROWS * DIM, -1, 1);
  float *y0 = malloc(sizeof(float) * ROWS * DIM);
  memcpy(y0, y, sizeof(float) * ROWS * DIM);
  double *want_ctx = malloc(sizeof(double) * ROWS * INNER), *want_y = malloc(sizeof(double) * ROWS * DIM);
  float head_scratch[HEAD_SCRATCH];
  const int32_t subset[3] = {4, 1, 2};
  const float sentinel = 12345.0f;
  for (int64_t i = 0; i < ROWS * INNER; ++i) ctx[i] = sentinel;
  htp_cpu_attention_heads_f32(x, wqkv, bqkv, ctx, head_scratch, BATCH, TOKENS, DIM, HEADS, HEAD_DIM, subset, 3);
  reference_heads(x, wqkv, bqkv, want_ctx, BATCH, TOKENS, DIM, HEADS, HEAD_DIM, subset, 3);
  for (int64_t r = 0; r < ROWS; ++r)
    for (int64_t h = 0; h < HEADS; ++h)
      if (h == 0 || h == 3)
        for (int64_t c = 0; c < HEAD_DIM; ++c) {
          assert_true(ctx[r * INNER + h * HEAD_DIM + c] == sentinel);
          ctx[r * INNER + h * HEAD_DIM + c] = 0.0f; /* the reference has 0 there */
        }
  assert_true(relative_error(ctx, want_ctx, ROWS * INNER, 1e-5) < 1e-5);
  /* accumulate 1 onto y0: y = y0 + sum over the subset */
  htp_cpu_linear_units_f32(ctx, wproj, y, ROWS, INNER, DIM, HEAD_DIM, subset, 3, 1);
  for (int64_t r = 0; r < ROWS; ++r)
    for (int64_t o = 0; o < DIM; ++o) {
      double acc = y0[r * DIM + o];
      for (int i = 0; i < 3; ++i)
        for (int64_t c = 0; c < HEAD_DIM; ++c) {
          int64_t col = subset[i] * HEAD_DIM + c;
          acc += want_ctx[r * INNER + col] * wproj[o * INNER + col];
        }
      want_y[r * DIM + o] = acc;
    }
  assert_true(relative_error(y, want_y, ROWS * DIM, 1e-5) < 1e-5);
  free(x); free(wqkv); free(bqkv); free(wproj); free(ctx); free(y); free(y0); free(want_ctx); free(want_y);
}

/* 3: head h packed as a one-head shard (q_h, k_h, v_h rows, their biases,
 * proj columns) contributes exactly what head h contributes in the full shard. */
static void test_03_attention_one_head_shard(void **state) {
  (void)state;
  float *x = random_floats(ROWS * DIM, -1, 1), *wqkv = random_floats(3 * INNER * DIM, -0.4f, 0.4f);
  float *bqkv = random_floats(3 * INNER, -0.1f, 0.1f), *wproj = random_floats(DIM * INNER, -0.2f, 0.2f);
  float *ctx = malloc(sizeof(float) * ROWS * INNER), *ctx1 = malloc(sizeof(float) * ROWS * HEAD_DIM);
  float *want = malloc(sizeof(float) * ROWS * DIM), *got = malloc(sizeof(float) * ROWS * DIM);
  float wqkv1[3 * HEAD_DIM * DIM], bqkv1[3 * HEAD_DIM], wproj1[DIM * HEAD_DIM];
  float head_scratch[HEAD_SCRATCH];
  const int32_t zero = 0;
  for (int32_t h = 0; h < HEADS; ++h) {
    for (int part = 0; part < 3; ++part) {
      memcpy(wqkv1 + part * HEAD_DIM * DIM, wqkv + (part * INNER + h * HEAD_DIM) * DIM,
             sizeof(float) * HEAD_DIM * DIM);
      memcpy(bqkv1 + part * HEAD_DIM, bqkv + part * INNER + h * HEAD_DIM, sizeof(float) * HEAD_DIM);
    }
    for (int o = 0; o < DIM; ++o)
      memcpy(wproj1 + o * HEAD_DIM, wproj + o * INNER + h * HEAD_DIM, sizeof(float) * HEAD_DIM);
    htp_cpu_attention_heads_f32(x, wqkv, bqkv, ctx, head_scratch, BATCH, TOKENS, DIM, HEADS, HEAD_DIM, &h, 1);
    htp_cpu_linear_units_f32(ctx, wproj, want, ROWS, INNER, DIM, HEAD_DIM, &h, 1, 0);
    htp_cpu_attention_heads_f32(x, wqkv1, bqkv1, ctx1, head_scratch, BATCH, TOKENS, DIM, 1, HEAD_DIM, &zero, 1);
    htp_cpu_linear_units_f32(ctx1, wproj1, got, ROWS, HEAD_DIM, DIM, HEAD_DIM, &zero, 1, 0);
    assert_true(float_error(got, want, ROWS * DIM, 1e-6) < 1e-6);
  }
  free(x); free(wqkv); free(bqkv); free(wproj); free(ctx); free(ctx1); free(want); free(got);
}

enum { MLP_ROWS = 13, MLP_DIM = 19, WIDTH = 3, MLP_UNITS = 7 };
#define HIDDEN (WIDTH * MLP_UNITS)

/* 4: MLP units: all units == linear + gelu + linear; a subset == the double
 * reference of that subset; a one-unit shard == that unit's contribution;
 * count 0 zeroes y. Both GELU forms. */
static void test_04_mlp_units(void **state) {
  (void)state;
  float *x = random_floats(MLP_ROWS * MLP_DIM, -1, 1), *w1 = random_floats(HIDDEN * MLP_DIM, -0.4f, 0.4f);
  float *b1 = random_floats(HIDDEN, -0.2f, 0.2f), *w2 = random_floats(MLP_DIM * HIDDEN, -0.3f, 0.3f);
  float *hidden = malloc(sizeof(float) * MLP_ROWS * HIDDEN), *full = malloc(sizeof(float) * MLP_ROWS * HIDDEN);
  float *want = malloc(sizeof(float) * MLP_ROWS * MLP_DIM), *y = random_floats(MLP_ROWS * MLP_DIM, 3, 4);
  double *ref = malloc(sizeof(double) * MLP_ROWS * MLP_DIM);
  const int32_t all[MLP_UNITS] = {0, 1, 2, 3, 4, 5, 6};
  for (int tanh_approx = 0; tanh_approx < 2; ++tanh_approx) {
    htp_cpu_linear_f32(x, w1, b1, full, MLP_ROWS, MLP_DIM, HIDDEN);
    htp_cpu_gelu_f32(full, full, MLP_ROWS * HIDDEN, tanh_approx);
    htp_cpu_linear_f32(full, w2, NULL, want, MLP_ROWS, HIDDEN, MLP_DIM);
    htp_cpu_mlp_hidden_units_f32(x, w1, b1, hidden, MLP_ROWS, MLP_DIM, HIDDEN, WIDTH, all, MLP_UNITS, tanh_approx);
    htp_cpu_linear_units_f32(hidden, w2, y, MLP_ROWS, HIDDEN, MLP_DIM, WIDTH, all, MLP_UNITS, 0);
    assert_true(float_error(y, want, MLP_ROWS * MLP_DIM, 1e-5) < 1e-5);

    /* subset {5, 0, 3}: double reference */
    const int32_t subset[3] = {5, 0, 3};
    htp_cpu_mlp_hidden_units_f32(x, w1, b1, hidden, MLP_ROWS, MLP_DIM, HIDDEN, WIDTH, subset, 3, tanh_approx);
    htp_cpu_linear_units_f32(hidden, w2, y, MLP_ROWS, HIDDEN, MLP_DIM, WIDTH, subset, 3, 0);
    for (int64_t r = 0; r < MLP_ROWS; ++r)
      for (int64_t o = 0; o < MLP_DIM; ++o) {
        double acc = 0;
        for (int i = 0; i < 3; ++i)
          for (int64_t c = 0; c < WIDTH; ++c) {
            int64_t n = subset[i] * WIDTH + c;
            double pre = b1[n];
            for (int64_t j = 0; j < MLP_DIM; ++j) pre += (double)x[r * MLP_DIM + j] * w1[n * MLP_DIM + j];
            double act = tanh_approx
                             ? 0.5 * pre * (1 + tanh(sqrt(2 / M_PI) * (pre + 0.044715 * pre * pre * pre)))
                             : 0.5 * pre * (1 + erf(pre / sqrt(2.0)));
            acc += act * w2[o * HIDDEN + n];
          }
        ref[r * MLP_DIM + o] = acc;
      }
    assert_true(relative_error(y, ref, MLP_ROWS * MLP_DIM, 1e-5) < 1e-5);

    /* one-unit shards [w1_u | b1_u | w2_u] */
    float shard[WIDTH * MLP_DIM + WIDTH + MLP_DIM * WIDTH], h1[MLP_ROWS * WIDTH];
    float *got = malloc(sizeof(float) * MLP_ROWS * MLP_DIM);
    const int32_t zero = 0;
    for (int32_t u = 0; u < MLP_UNITS; ++u) {
      memcpy(shard, w1 + u * WIDTH * MLP_DIM, sizeof(float) * WIDTH * MLP_DIM);
      memcpy(shard + WIDTH * MLP_DIM, b1 + u * WIDTH, sizeof(float) * WIDTH);
      for (int o = 0; o < MLP_DIM; ++o)
        memcpy(shard + WIDTH * MLP_DIM + WIDTH + o * WIDTH, w2 + o * HIDDEN + u * WIDTH, sizeof(float) * WIDTH);
      htp_cpu_mlp_hidden_units_f32(x, w1, b1, hidden, MLP_ROWS, MLP_DIM, HIDDEN, WIDTH, &u, 1, tanh_approx);
      htp_cpu_linear_units_f32(hidden, w2, want, MLP_ROWS, HIDDEN, MLP_DIM, WIDTH, &u, 1, 0);
      htp_cpu_mlp_hidden_units_f32(x, shard, shard + WIDTH * MLP_DIM, h1, MLP_ROWS, MLP_DIM, WIDTH, WIDTH, &zero, 1, tanh_approx);
      htp_cpu_linear_units_f32(h1, shard + WIDTH * MLP_DIM + WIDTH, got, MLP_ROWS, WIDTH, MLP_DIM, WIDTH, &zero, 1, 0);
      assert_true(float_error(got, want, MLP_ROWS * MLP_DIM, 1e-6) < 1e-6);
    }
    free(got);
  }
  /* count 0: accumulate 0 zeroes y, accumulate 1 leaves it */
  for (int64_t i = 0; i < MLP_ROWS * MLP_DIM; ++i) y[i] = 2.5f;
  htp_cpu_linear_units_f32(hidden, w2, y, MLP_ROWS, HIDDEN, MLP_DIM, WIDTH, NULL, 0, 1);
  for (int64_t i = 0; i < MLP_ROWS * MLP_DIM; ++i) assert_true(y[i] == 2.5f);
  htp_cpu_linear_units_f32(hidden, w2, y, MLP_ROWS, HIDDEN, MLP_DIM, WIDTH, NULL, 0, 0);
  for (int64_t i = 0; i < MLP_ROWS * MLP_DIM; ++i) assert_true(y[i] == 0.0f);
  free(x); free(w1); free(b1); free(w2); free(hidden); free(full); free(want); free(y); free(ref);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_01_attention_all_heads),
      cmocka_unit_test(test_02_attention_subset),
      cmocka_unit_test(test_03_attention_one_head_shard),
      cmocka_unit_test(test_04_mlp_units),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
