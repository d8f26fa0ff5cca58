/*===- test/kernels/test_train.c - The CPU table's training entries -------===*
 *
 * Every backward entry against central finite differences of a
 * double-precision forward written here from the math (not from the
 * kernels), on small odd shapes: L = Σ y ∘ R for a fixed random cotangent
 * R = dy, dL/dθ ≈ (L(θ + h) - L(θ - h)) / 2h in double (h = 1e-4: step
 * error ~1e-8, round-off ~1e-12, so the f32 kernel's own error is what the
 * 1e-3 bound measures; a dropped term or a wrong scale is off by O(1), and
 * check_is_strict shows the comparison rejects a gradient 0.2% off). Then
 * linear, layer norm, GELU and the loss against closed-form double
 * references (tighter), the accumulation of parameter gradients (+=), NULL
 * gradients, results independent of the thread count (bitwise), a weight
 * gradient split by its columns, the optimizers against a few steps in
 * double, and the refusals: bad shapes,
 * too little attention scratch, bad optimizer arguments. The loss with
 * probability targets: one-hot rows give the label loss exactly, soft rows
 * (one not summing to 1) against finite differences. The model's ends:
 * patchify's (c, ky, kx) and row-major token order by hand and against the
 * definition, token embedding, class-token pooling and their adjoints
 * against double loops and finite differences, row sums past a row block
 * bitwise the same on 1 and 3 threads, and zero.
 *===----------------------------------------------------------------------===*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_data.h"

#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h" /* htp__attention_force */

static const double FD_STEP = 1e-4, FD_TOL = 1e-3, PI = 3.14159265358979323846;

/* max |got - want| / max |want|: the error relative to the gradient's scale. */
static double rel_error(const float *got, const double *want, int64_t n) {
  double err = 0.0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    err = fmax(err, fabs((double)got[i] - want[i]));
    scale = fmax(scale, fabs(want[i]));
  }
  return err / scale;
}

static void assert_close(const char *what, const float *got, const double *want, int64_t n,
                         double tol) {
  const double err = rel_error(got, want, n);
  if (!(err <= tol))
    fail_msg("%s: relative error %.3g > %.3g", what, err, tol);
}

/* got = 2 once: a gradient accumulated onto itself. */
static void assert_doubled(const char *what, const float *got, const float *once, int64_t n) {
  double *want = calloc((size_t)n, sizeof(double));
  assert_non_null(want);
  for (int64_t i = 0; i < n; ++i)
    want[i] = 2.0 * once[i];
  const double err = rel_error(got, want, n);
  free(want);
  if (!(err <= 1e-6))
    fail_msg("%s: relative error %.3g > 1e-6", what, err);
}

static float *zeros(int64_t n) {
  float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
  assert_non_null(p);
  return p;
}

static double *dzeros(int64_t n) {
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  assert_non_null(p);
  return p;
}

static float *copy_of(const float *a, int64_t n) {
  float *p = zeros(n);
  memcpy(p, a, (size_t)n * sizeof(float));
  return p;
}

static htp_kernel_env env;
static char error[256];

static int setup(void **state) {
  (void)state;
  htp_kernel_env_init(&env, error, sizeof error);
  return 0;
}

/* ----- Double forwards, from the math ------------------------------------ */

/* A model: a forward over parameter arrays (float values, read as double),
 * giving L = Σ y R. Finite differences perturb one float element in place
 * (through a double shadow, so the step is exact). */
typedef double (*loss_fn)(void *ctx);

/* fd[i] = dL/dp[i] for the n elements of p, perturbing p through `shadow`
 * (the model reads shadow, a double copy of p). */
static void finite_diff(loss_fn loss, void *ctx, double *shadow, int64_t n, double *fd) {
  for (int64_t i = 0; i < n; ++i) {
    const double saved = shadow[i];
    shadow[i] = saved + FD_STEP;
    const double up = loss(ctx);
    shadow[i] = saved - FD_STEP;
    const double down = loss(ctx);
    shadow[i] = saved;
    fd[i] = (up - down) / (2.0 * FD_STEP);
  }
}

static double *to_double(const float *a, int64_t n) {
  double *p = dzeros(n);
  for (int64_t i = 0; i < n; ++i)
    p[i] = a[i];
  return p;
}

/* y[r, o] = Σ_i x[r, i] w[o, i] + b[o] */
static void linear_ref(const double *x, const double *w, const double *b, double *y, int64_t rows,
                       int64_t in, int64_t out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i)
        s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
}

static double dot_with(const double *y, const float *r, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i)
    s += y[i] * r[i];
  return s;
}

/* ----- Linear ------------------------------------------------------------ */

enum { LR = 7, LIN = 5, LOUT = 3 };

/* The operands of a small model in double (a: the input, b and c: the
 * parameters), its output, and the cotangent; one loss function per op. */
struct model {
  double *a, *b, *c, *y;
  const float *dy;
};

static double lin_loss(void *ctx) {
  struct model *m = ctx;
  linear_ref(m->a, m->b, m->c, m->y, LR, LIN, LOUT);
  return dot_with(m->y, m->dy, LR * LOUT);
}

static void check_is_strict(void **state) {
  (void)state;
  /* The comparison itself: a gradient 0.2% off fails the FD bound. */
  double want[3] = {1.0, -2.0, 0.5};
  float off[3] = {1.0f, -2.0f * 1.002f, 0.5f};
  assert_true(rel_error(off, want, 3) > FD_TOL);
  float near[3] = {1.0f, -2.0f * 1.0001f, 0.5f};
  assert_true(rel_error(near, want, 3) <= FD_TOL);
}

static void linear_backward(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  float *x = random_floats(LR * LIN, -1, 1), *w = random_floats(LOUT * LIN, -1, 1);
  float *b = random_floats(LOUT, -1, 1), *dy = random_floats(LR * LOUT, -1, 1);
  float *dx = zeros(LR * LIN), *dw = zeros(LOUT * LIN), *db = zeros(LOUT);
  assert_int_equal(t->linear_backward_f32(&env, x, w, dy, dx, dw, db, LR, LIN, LOUT),
                   HTP_KERNEL_OK);

  /* (a) finite differences */
  struct model m = {to_double(x, LR * LIN), to_double(w, LOUT * LIN), to_double(b, LOUT),
                        dzeros(LR * LOUT), dy};
  double *fd = dzeros(LR * LIN);
  finite_diff(lin_loss, &m, m.a, LR * LIN, fd);
  assert_close("linear dx (fd)", dx, fd, LR * LIN, FD_TOL);
  finite_diff(lin_loss, &m, m.b, LOUT * LIN, fd);
  assert_close("linear dw (fd)", dw, fd, LOUT * LIN, FD_TOL);
  finite_diff(lin_loss, &m, m.c, LOUT, fd);
  assert_close("linear db (fd)", db, fd, LOUT, FD_TOL);

  /* (b) closed form: dx = dy w, dw = dyᵀ x, db = Σ dy */
  double *rdx = dzeros(LR * LIN), *rdw = dzeros(LOUT * LIN), *rdb = dzeros(LOUT);
  for (int r = 0; r < LR; ++r)
    for (int o = 0; o < LOUT; ++o) {
      const double g = dy[r * LOUT + o];
      rdb[o] += g;
      for (int i = 0; i < LIN; ++i) {
        rdx[r * LIN + i] += g * w[o * LIN + i];
        rdw[o * LIN + i] += g * x[r * LIN + i];
      }
    }
  assert_close("linear dx", dx, rdx, LR * LIN, 1e-6);
  assert_close("linear dw", dw, rdw, LOUT * LIN, 1e-6);
  assert_close("linear db", db, rdb, LOUT, 1e-6);

  /* Accumulation: parameter gradients add onto what is there; dx is written. */
  float *dw0 = random_floats(LOUT * LIN, -1, 1), *db0 = random_floats(LOUT, -1, 1);
  float *dw2 = copy_of(dw0, LOUT * LIN), *db2 = copy_of(db0, LOUT);
  float *dx2 = random_floats(LR * LIN, 50, 60); /* garbage: overwritten */
  assert_int_equal(t->linear_backward_f32(&env, x, w, dy, dx2, dw2, db2, LR, LIN, LOUT),
                   HTP_KERNEL_OK);
  for (int i = 0; i < LOUT * LIN; ++i)
    rdw[i] += dw0[i];
  for (int i = 0; i < LOUT; ++i)
    rdb[i] += db0[i];
  assert_close("linear dw +=", dw2, rdw, LOUT * LIN, 1e-6);
  assert_close("linear db +=", db2, rdb, LOUT, 1e-6);
  assert_memory_equal(dx2, dx, sizeof(float) * LR * LIN);

  /* NULL gradients: each alone gives what the full call gave. */
  float *only = zeros(LR * LIN);
  assert_int_equal(t->linear_backward_f32(&env, x, w, dy, only, NULL, NULL, LR, LIN, LOUT),
                   HTP_KERNEL_OK);
  assert_memory_equal(only, dx, sizeof(float) * LR * LIN);
  memset(only, 0, sizeof(float) * LR * LIN);
  assert_int_equal(t->linear_backward_f32(&env, x, w, dy, NULL, only, NULL, LR, LIN, LOUT),
                   HTP_KERNEL_OK);
  assert_memory_equal(only, dw, sizeof(float) * LOUT * LIN);
  memset(only, 0, sizeof(float) * LR * LIN);
  assert_int_equal(t->linear_backward_f32(&env, x, w, dy, NULL, NULL, only, LR, LIN, LOUT),
                   HTP_KERNEL_OK);
  assert_memory_equal(only, db, sizeof(float) * LOUT);
  assert_int_equal(t->linear_backward_f32(&env, x, w, dy, NULL, NULL, NULL, LR, LIN, LOUT),
                   HTP_KERNEL_OK);
  assert_string_equal(error, "");

  free(x), free(w), free(b), free(dy), free(dx), free(dw), free(db), free(fd);
  free(m.a), free(m.b), free(m.c), free(m.y), free(rdx), free(rdw), free(rdb);
  free(dw0), free(db0), free(dw2), free(db2), free(dx2), free(only);
}

/* ----- Layer norm -------------------------------------------------------- */

enum { NR = 5, ND = 7 };
static const float LN_EPS = 1e-5f;

/* A row's mean and 1 / sqrt(biased variance + eps). */
static double row_mean_rstd(const double *xr, int64_t dim, double eps, double *rstd) {
  double mean = 0.0, var = 0.0;
  for (int64_t i = 0; i < dim; ++i)
    mean += xr[i];
  mean /= (double)dim;
  for (int64_t i = 0; i < dim; ++i)
    var += (xr[i] - mean) * (xr[i] - mean);
  *rstd = 1.0 / sqrt(var / (double)dim + eps);
  return mean;
}

static void layer_norm_ref(const double *x, const double *gamma, const double *beta, double *y,
                           int64_t rows, int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = x + r * dim;
    double rstd;
    const double mean = row_mean_rstd(xr, dim, eps, &rstd);
    for (int64_t i = 0; i < dim; ++i)
      y[r * dim + i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
  }
}

static double ln_loss(void *ctx) {
  struct model *m = ctx;
  layer_norm_ref(m->a, m->b, m->c, m->y, NR, ND, LN_EPS);
  return dot_with(m->y, m->dy, NR * ND);
}

/* Closed form of the adjoint, in double (xhat and the two row means). */
static void layer_norm_grad_ref(const double *x, const float *gamma, const float *dy,
                                double *dx, double *dgamma, double *dbeta, int64_t rows,
                                int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = x + r * dim;
    const float *g = dy + r * dim;
    double rstd;
    const double mean = row_mean_rstd(xr, dim, eps, &rstd);
    double a = 0.0, c = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = (xr[i] - mean) * rstd;
      a += g[i] * (double)gamma[i];
      c += g[i] * (double)gamma[i] * xhat;
      dgamma[i] += g[i] * xhat;
      dbeta[i] += g[i];
    }
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = (xr[i] - mean) * rstd;
      dx[r * dim + i] = rstd * (g[i] * (double)gamma[i] - a / dim - xhat * c / dim);
    }
  }
}

static void layer_norm_backward(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  float *x = random_floats(NR * ND, -2, 2), *gamma = random_floats(ND, 0.5f, 1.5f);
  float *beta = random_floats(ND, -1, 1), *dy = random_floats(NR * ND, -1, 1);
  for (int i = 0; i < ND; ++i) /* one row far from 0: the centring must be right */
    x[i] = 300.0f + x[i];
  float *dx = zeros(NR * ND), *dg = zeros(ND), *dbt = zeros(ND);
  assert_int_equal(t->layer_norm_backward_f32(&env, x, gamma, dy, dx, dg, dbt, NR, ND, LN_EPS),
                   HTP_KERNEL_OK);

  struct model m = {to_double(x, NR * ND), to_double(gamma, ND), to_double(beta, ND),
                       dzeros(NR * ND), dy};
  double *fd = dzeros(NR * ND);
  finite_diff(ln_loss, &m, m.a, NR * ND, fd);
  assert_close("layer norm dx (fd)", dx, fd, NR * ND, FD_TOL);
  finite_diff(ln_loss, &m, m.b, ND, fd);
  assert_close("layer norm dgamma (fd)", dg, fd, ND, FD_TOL);
  finite_diff(ln_loss, &m, m.c, ND, fd);
  assert_close("layer norm dbeta (fd)", dbt, fd, ND, FD_TOL);

  double *rdx = dzeros(NR * ND), *rdg = dzeros(ND), *rdb = dzeros(ND);
  layer_norm_grad_ref(m.a, gamma, dy, rdx, rdg, rdb, NR, ND, LN_EPS);
  assert_close("layer norm dx", dx, rdx, NR * ND, 1e-5);
  assert_close("layer norm dgamma", dg, rdg, ND, 1e-5);
  assert_close("layer norm dbeta", dbt, rdb, ND, 1e-6);

  /* += on dgamma, dbeta (a second call doubles them); dx written. */
  assert_int_equal(t->layer_norm_backward_f32(&env, x, gamma, dy, dx, dg, dbt, NR, ND, LN_EPS),
                   HTP_KERNEL_OK);
  for (int i = 0; i < ND; ++i)
    rdg[i] *= 2, rdb[i] *= 2;
  assert_close("layer norm dgamma +=", dg, rdg, ND, 1e-5);
  assert_close("layer norm dbeta +=", dbt, rdb, ND, 1e-6);
  assert_close("layer norm dx again", dx, rdx, NR * ND, 1e-5);

  /* NULL gradients */
  float *only = zeros(NR * ND);
  assert_int_equal(
      t->layer_norm_backward_f32(&env, x, gamma, dy, NULL, only, NULL, NR, ND, LN_EPS),
      HTP_KERNEL_OK);
  for (int i = 0; i < ND; ++i)
    rdg[i] /= 2;
  assert_close("layer norm dgamma alone", only, rdg, ND, 1e-5);
  assert_int_equal(
      t->layer_norm_backward_f32(&env, x, gamma, dy, NULL, NULL, NULL, NR, ND, LN_EPS),
      HTP_KERNEL_OK);
  assert_string_equal(error, "");

  free(x), free(gamma), free(beta), free(dy), free(dx), free(dg), free(dbt), free(fd);
  free(m.a), free(m.b), free(m.c), free(m.y), free(rdx), free(rdg), free(rdb), free(only);
}

/* ----- GELU -------------------------------------------------------------- */

enum { GN = 41 };

static double gelu_ref(double x, int tanh_approx) {
  if (tanh_approx)
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static double gelu_grad_ref(double x, int tanh_approx) {
  if (tanh_approx) {
    const double k = sqrt(2.0 / PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
  }
  return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * PI);
}

static void gelu_backward(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  float *x = random_floats(GN, -5, 5), *dy = random_floats(GN, -1, 1);
  x[0] = 0.0f, x[1] = -12.0f, x[2] = 12.0f, x[3] = -0.7518f, x[4] = 40.0f, x[5] = -40.0f;
  for (int tanh_approx = 0; tanh_approx <= 1; ++tanh_approx) {
    float *dx = zeros(GN);
    assert_int_equal(t->gelu_backward_f32(&env, x, dy, dx, GN, tanh_approx), HTP_KERNEL_OK);
    double *fd = dzeros(GN), *ref = dzeros(GN);
    for (int i = 0; i < GN; ++i) {
      const double up = gelu_ref((double)x[i] + FD_STEP, tanh_approx);
      const double down = gelu_ref((double)x[i] - FD_STEP, tanh_approx);
      fd[i] = dy[i] * (up - down) / (2.0 * FD_STEP);
      ref[i] = dy[i] * gelu_grad_ref(x[i], tanh_approx);
    }
    assert_close("gelu dx (fd)", dx, fd, GN, FD_TOL);
    /* Closed form, element by element (absolute near GELU's minimum and in
     * the tails, relative elsewhere). */
    for (int i = 0; i < GN; ++i)
      if (!(fabs(dx[i] - ref[i]) <= 1e-6 + 2e-6 * fabs(ref[i])))
        fail_msg("gelu(%d) dx[%d] at x=%g: %.9g, want %.9g", tanh_approx, i, (double)x[i],
                 (double)dx[i], ref[i]);
    /* In place: dx may equal dy. */
    float *inplace = copy_of(dy, GN);
    assert_int_equal(t->gelu_backward_f32(&env, x, inplace, inplace, GN, tanh_approx),
                     HTP_KERNEL_OK);
    assert_memory_equal(inplace, dx, sizeof(float) * GN);
    free(dx), free(fd), free(ref), free(inplace);
  }
  assert_int_equal(t->gelu_backward_f32(&env, x, dy, NULL, GN, 0), HTP_KERNEL_OK);
  free(x), free(dy);
}

/* ----- Attention --------------------------------------------------------- */

struct attn_shape {
  int64_t batch, tokens, model, heads, hd;
};

struct attn_model {
  struct attn_shape s;
  double *x, *wqkv, *bqkv, *wproj, *bproj;
  const float *dy;
};

/* y = (softmax(q kᵀ / sqrt(hd)) v per image and head) wprojᵀ + bproj,
 * qkv = x wqkvᵀ + bqkv (q, k, v blocks, each by head). */
static double attn_loss(void *ctx) {
  const struct attn_model *m = ctx;
  const int64_t B = m->s.batch, T = m->s.tokens, D = m->s.model, H = m->s.heads, E = m->s.hd;
  const int64_t rows = B * T, inner = H * E;
  double *qkv = dzeros(rows * 3 * inner), *ctxv = dzeros(rows * inner), *y = dzeros(rows * D);
  double *p = dzeros(T);
  linear_ref(m->x, m->wqkv, m->bqkv, qkv, rows, D, 3 * inner);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const double *q = qkv + (b * T + i) * 3 * inner + h * E;
        double max = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          const double *k = qkv + (b * T + j) * 3 * inner + inner + h * E;
          double s = 0.0;
          for (int64_t e = 0; e < E; ++e)
            s += q[e] * k[e];
          p[j] = s / sqrt((double)E);
          max = fmax(max, p[j]);
        }
        for (int64_t j = 0; j < T; ++j)
          sum += p[j] = exp(p[j] - max);
        for (int64_t e = 0; e < E; ++e) {
          double c = 0.0;
          for (int64_t j = 0; j < T; ++j)
            c += p[j] / sum * qkv[(b * T + j) * 3 * inner + 2 * inner + h * E + e];
          ctxv[(b * T + i) * inner + h * E + e] = c;
        }
      }
  linear_ref(ctxv, m->wproj, m->bproj, y, rows, inner, D);
  const double loss = dot_with(y, m->dy, rows * D);
  free(qkv), free(ctxv), free(y), free(p);
  return loss;
}

static void attention_case(struct attn_shape s) {
  const htp_kernel_table *t = htp_cpu_kernel_table();
  const int64_t rows = s.batch * s.tokens, inner = s.heads * s.hd, D = s.model;
  const int64_t nx = rows * D, nwqkv = 3 * inner * D, nb = 3 * inner, nwp = D * inner;
  float *x = random_floats(nx, -1, 1), *wqkv = random_floats(nwqkv, -0.8f, 0.8f);
  float *bqkv = random_floats(nb, -0.5f, 0.5f), *wproj = random_floats(nwp, -1, 1);
  float *bproj = random_floats(D, -1, 1), *dy = random_floats(nx, -1, 1);
  float *dx = zeros(nx), *dwqkv = zeros(nwqkv), *dbqkv = zeros(nb), *dwproj = zeros(nwp),
        *dbproj = zeros(D);
  const int64_t need =
      t->attention_backward_scratch_floats(s.batch, s.tokens, D, s.heads, s.hd);
  assert_true(need > 0);
  float *scratch = random_floats(need, -1e3f, 1e3f); /* garbage: the kernel writes first */
  assert_int_equal(t->attention_backward_f32(&env, x, wqkv, bqkv, wproj, bproj, dy, dx, dwqkv,
                                             dbqkv, dwproj, dbproj, scratch, need, s.batch,
                                             s.tokens, D, s.heads, s.hd),
                   HTP_KERNEL_OK);
  assert_string_equal(error, "");

  struct attn_model m = {s,
                         to_double(x, nx),
                         to_double(wqkv, nwqkv),
                         to_double(bqkv, nb),
                         to_double(wproj, nwp),
                         to_double(bproj, D),
                         dy};
  double *fd = dzeros(nwqkv > nx ? nwqkv : nx);
  finite_diff(attn_loss, &m, m.x, nx, fd);
  assert_close("attention dx (fd)", dx, fd, nx, FD_TOL);
  finite_diff(attn_loss, &m, m.wqkv, nwqkv, fd);
  assert_close("attention dwqkv (fd)", dwqkv, fd, nwqkv, FD_TOL);
  finite_diff(attn_loss, &m, m.bqkv, nb, fd);
  assert_close("attention dbqkv (fd)", dbqkv, fd, nb, FD_TOL);
  finite_diff(attn_loss, &m, m.wproj, nwp, fd);
  assert_close("attention dwproj (fd)", dwproj, fd, nwp, FD_TOL);
  finite_diff(attn_loss, &m, m.bproj, D, fd);
  assert_close("attention dbproj (fd)", dbproj, fd, D, FD_TOL);
  /* The k block of dbqkv is zero in exact arithmetic (softmax ignores a
   * shift shared by a row's scores); it must come out as round-off. */
  for (int64_t i = inner; i < 2 * inner; ++i)
    assert_true(fabsf(dbqkv[i]) < 1e-4f);

  /* += on the parameter gradients; dx written over garbage. */
  float *dx2 = random_floats(nx, 7, 8), *dwqkv2 = copy_of(dwqkv, nwqkv),
        *dbqkv2 = copy_of(dbqkv, nb), *dwproj2 = copy_of(dwproj, nwp),
        *dbproj2 = copy_of(dbproj, D);
  assert_int_equal(t->attention_backward_f32(&env, x, wqkv, bqkv, wproj, bproj, dy, dx2,
                                             dwqkv2, dbqkv2, dwproj2, dbproj2, scratch, need,
                                             s.batch, s.tokens, D, s.heads, s.hd),
                   HTP_KERNEL_OK);
  assert_memory_equal(dx2, dx, sizeof(float) * nx);
  /* (Close, not bitwise: a GEMM with beta = 1 may round C + A·B in steps.) */
  assert_doubled("attention dwqkv +=", dwqkv2, dwqkv, nwqkv);
  assert_doubled("attention dwproj +=", dwproj2, dwproj, nwp);
  assert_doubled("attention dbqkv +=", dbqkv2, dbqkv, nb);
  assert_doubled("attention dbproj +=", dbproj2, dbproj, D);

  /* NULL gradients: dwproj alone (no dqkv wanted), dx alone. */
  float *only = zeros(nwqkv > nx ? nwqkv : nx);
  assert_int_equal(t->attention_backward_f32(&env, x, wqkv, bqkv, wproj, bproj, dy, NULL, NULL,
                                             NULL, only, NULL, scratch, need, s.batch,
                                             s.tokens, D, s.heads, s.hd),
                   HTP_KERNEL_OK);
  assert_memory_equal(only, dwproj, sizeof(float) * nwp);
  assert_int_equal(t->attention_backward_f32(&env, x, wqkv, bqkv, wproj, bproj, dy, only, NULL,
                                             NULL, NULL, NULL, scratch, need, s.batch,
                                             s.tokens, D, s.heads, s.hd),
                   HTP_KERNEL_OK);
  assert_memory_equal(only, dx, sizeof(float) * nx);

  /* Too little scratch, or none: refused with a message, nothing written. */
  memcpy(dx2, dx, sizeof(float) * nx);
  assert_int_equal(t->attention_backward_f32(&env, x, wqkv, bqkv, wproj, bproj, dy, dx2, NULL,
                                             NULL, NULL, NULL, scratch, need - 1, s.batch,
                                             s.tokens, D, s.heads, s.hd),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "scratch"));
  error[0] = '\0';
  assert_int_equal(t->attention_backward_f32(&env, x, wqkv, bqkv, wproj, bproj, dy, dx2, NULL,
                                             NULL, NULL, NULL, NULL, need, s.batch, s.tokens,
                                             D, s.heads, s.hd),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "scratch"));
  error[0] = '\0';
  assert_memory_equal(dx2, dx, sizeof(float) * nx);

  free(x), free(wqkv), free(bqkv), free(wproj), free(bproj), free(dy), free(dx), free(dwqkv);
  free(dbqkv), free(dwproj), free(dbproj), free(scratch), free(fd), free(m.x), free(m.wqkv);
  free(m.bqkv), free(m.wproj), free(m.bproj), free(dx2), free(dwqkv2), free(dbqkv2);
  free(dwproj2), free(dbproj2), free(only);
}

static void attention_backward(void **state) {
  (void)state;
  /* Each shape twice: with the AVX-512 small-head products where the CPU
   * has them (tokens and head_dim <= 32), and forced onto the BLAS calls. */
  for (int paths = HTP_ATTENTION_ANY; paths <= HTP_ATTENTION_NARROW; paths += 2) {
    htp__attention_force(paths);
    /* Tensor-parallel-like shard: inner (6) differs from model_dim (7). */
    attention_case((struct attn_shape){2, 5, 7, 3, 2});
    /* 3 inner < model_dim: the scratch holds no [rows, model_dim] buffer. */
    attention_case((struct attn_shape){3, 4, 11, 1, 3});
    /* One token: softmax is 1, so only v's path carries gradient. */
    attention_case((struct attn_shape){2, 1, 5, 2, 2});
    /* The README model's heads (17 tokens x 12: four-row blocks and a
     * tail, one masked vector a row), the small path's limits (32 x 32:
     * two full vectors) and just past them (33 tokens: BLAS); a small
     * model_dim keeps the finite differences cheap (under ASan too). */
    attention_case((struct attn_shape){1, 17, 5, 2, 12});
    attention_case((struct attn_shape){1, 32, 3, 1, 32});
    attention_case((struct attn_shape){1, 33, 3, 1, 16});
  }
  htp__attention_force(HTP_ATTENTION_ANY);
}

static void attention_scratch_formula(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  /* By hand: rows 10, inner 6: 10*18 + 2*10*6 + 10*18 + min(6,64)*2*25 */
  assert_int_equal(t->attention_backward_scratch_floats(2, 5, 7, 3, 2),
                   180 + 120 + 180 + 6 * 50);
  /* rows 12, inner 3 (3 inner = 9 < model_dim 11): 12*9 + 2*12*3 + 12*9 + 3*2*16 */
  assert_int_equal(t->attention_backward_scratch_floats(3, 4, 11, 1, 3), 108 + 72 + 108 + 96);
  /* Slots stop at 64 however many (image, head) tasks there are. */
  assert_int_equal(t->attention_backward_scratch_floats(100, 2, 4, 1, 4),
                   200 * 12 + 2 * 200 * 4 + 200 * 12 + 64 * 2 * 4);
  assert_true(t->attention_backward_scratch_floats(-1, 5, 7, 3, 2) < 0);
  assert_true(t->attention_backward_scratch_floats(INT64_MAX / 2, 1 << 20, 7, 3, 2) < 0);
}

/* ----- Softmax cross-entropy --------------------------------------------- */

enum { CR = 6, CC = 5 };

struct ce_model {
  double *logits;
  const int32_t *labels;
  int64_t rows, classes;
};

/* log Σ_c e^{l[c]}, stably (the max taken out first). */
static double log_sum_exp(const double *l, int64_t classes) {
  double max = l[0], sum = 0.0;
  for (int64_t c = 1; c < classes; ++c)
    max = fmax(max, l[c]);
  for (int64_t c = 0; c < classes; ++c)
    sum += exp(l[c] - max);
  return max + log(sum);
}

static double ce_loss_ref(void *ctx) {
  const struct ce_model *m = ctx;
  double total = 0.0;
  for (int64_t r = 0; r < m->rows; ++r) {
    const double *l = m->logits + r * m->classes;
    total += log_sum_exp(l, m->classes) - l[m->labels[r]];
  }
  return total / (double)m->rows;
}

static void ce_grad_ref(const struct ce_model *m, double *d) {
  for (int64_t r = 0; r < m->rows; ++r) {
    const double *l = m->logits + r * m->classes;
    const double lse = log_sum_exp(l, m->classes);
    for (int64_t c = 0; c < m->classes; ++c)
      d[r * m->classes + c] =
          (exp(l[c] - lse) - (c == m->labels[r] ? 1.0 : 0.0)) / (double)m->rows;
  }
}

/* One-hot rows of labels: what the loader passes as probability targets. */
static float *one_hot(const int32_t *labels, int64_t rows, int64_t classes) {
  float *t = zeros(rows * classes);
  for (int64_t r = 0; r < rows; ++r)
    t[r * classes + labels[r]] = 1.0f;
  return t;
}

/* One-hot targets give exactly the label-indexed loss and gradient (the
 * kernel before probability targets): against the label references, finite
 * differences, and with loss or dlogits left out. */
static void softmax_cross_entropy(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  float *logits = random_floats(CR * CC, -3, 3);
  int32_t labels[CR] = {0, 4, 2, 2, 1, 3};
  float *targets = one_hot(labels, CR, CC);
  for (int c = 0; c < CC; ++c) /* a row far from 0 (stability) and a confident one */
    logits[CC + c] += 5000.0f, logits[2 * CC + c] = c == 2 ? 30.0f : 0.0f;
  float loss = -1.0f, *d = zeros(CR * CC);
  assert_int_equal(t->softmax_cross_entropy_f32(&env, logits, targets, &loss, d, CR, CC),
                   HTP_KERNEL_OK);
  struct ce_model m = {to_double(logits, CR * CC), labels, CR, CC};
  const double want = ce_loss_ref(&m);
  assert_true(fabs(loss - want) <= 1e-6 * fabs(want) + 1e-7);
  double *fd = dzeros(CR * CC), *ref = dzeros(CR * CC);
  finite_diff(ce_loss_ref, &m, m.logits, CR * CC, fd);
  assert_close("cross-entropy dlogits (fd)", d, fd, CR * CC, FD_TOL);
  ce_grad_ref(&m, ref);
  assert_close("cross-entropy dlogits", d, ref, CR * CC, 1e-6);
  /* Rows of dlogits sum to 0 (softmax sums to 1, so do the targets). */
  for (int r = 0; r < CR; ++r) {
    double s = 0.0;
    for (int c = 0; c < CC; ++c)
      s += d[r * CC + c];
    assert_true(fabs(s) < 1e-7);
  }
  /* NULL dlogits: the same loss; NULL loss: the same dlogits; both: nothing. */
  float loss2 = -1.0f, *d2 = random_floats(CR * CC, 50, 60);
  assert_int_equal(t->softmax_cross_entropy_f32(&env, logits, targets, &loss2, NULL, CR, CC),
                   HTP_KERNEL_OK);
  assert_true(loss2 == loss);
  assert_int_equal(t->softmax_cross_entropy_f32(&env, logits, targets, NULL, d2, CR, CC),
                   HTP_KERNEL_OK);
  assert_memory_equal(d2, d, sizeof(float) * CR * CC);
  assert_int_equal(t->softmax_cross_entropy_f32(&env, logits, targets, NULL, NULL, CR, CC),
                   HTP_KERNEL_OK);
  assert_string_equal(error, "");

  /* Bad shapes: refused with a message, loss untouched. */
  loss2 = -1.0f;
  assert_int_equal(t->softmax_cross_entropy_f32(&env, logits, targets, &loss2, d, 0, CC),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "rows"));
  error[0] = '\0';
  assert_int_equal(t->softmax_cross_entropy_f32(&env, logits, targets, &loss2, d, CR, 0),
                   HTP_KERNEL_ERR_INVALID);
  assert_true(loss2 == -1.0f);
  error[0] = '\0';
  free(logits), free(targets), free(d), free(d2), free(m.logits), free(fd), free(ref);
}

/* Probability targets in general: L = (1/rows) Σ_r Σ_k t[r,k] (lse_r -
 * l[r,k]), written here from the definition, in double. */
struct soft_model {
  double *logits;
  const float *targets;
  int64_t rows, classes;
};

static double soft_ce_ref(void *ctx) {
  const struct soft_model *m = ctx;
  double total = 0.0;
  for (int64_t r = 0; r < m->rows; ++r) {
    const double *l = m->logits + r * m->classes;
    const double lse = log_sum_exp(l, m->classes);
    for (int64_t k = 0; k < m->classes; ++k)
      total += (double)m->targets[r * m->classes + k] * (lse - l[k]);
  }
  return total / (double)m->rows;
}

static void cross_entropy_soft_targets(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  float *logits = random_floats(CR * CC, -3, 3), *targets = random_floats(CR * CC, 0.05f, 1);
  for (int r = 0; r < CR; ++r) { /* rows of probabilities ... */
    float s = 0.0f;
    for (int c = 0; c < CC; ++c)
      s += targets[r * CC + c];
    for (int c = 0; c < CC; ++c)
      targets[r * CC + c] /= s;
  }
  for (int c = 0; c < CC; ++c) /* ... but for one that sums to 0.7 (label smoothing off by */
    targets[4 * CC + c] *= 0.7f; /* a factor): the gradient is softmax Σt - t, not softmax - t */
  for (int c = 0; c < CC; ++c) /* large logits: the loss must not cancel */
    logits[5 * CC + c] += 3000.0f;
  float loss = -1.0f, *d = zeros(CR * CC);
  assert_int_equal(t->softmax_cross_entropy_f32(&env, logits, targets, &loss, d, CR, CC),
                   HTP_KERNEL_OK);
  struct soft_model m = {to_double(logits, CR * CC), targets, CR, CC};
  const double want = soft_ce_ref(&m);
  if (!(fabs(loss - want) <= 1e-6 * fabs(want) + 1e-7))
    fail_msg("soft cross-entropy loss %.9g, want %.9g", (double)loss, want);
  double *fd = dzeros(CR * CC), *ref = dzeros(CR * CC);
  finite_diff(soft_ce_ref, &m, m.logits, CR * CC, fd);
  assert_close("soft cross-entropy dlogits (fd)", d, fd, CR * CC, FD_TOL);
  /* Closed form: (softmax Σ_k t_k - t) / rows. */
  for (int r = 0; r < CR; ++r) {
    const double lse = log_sum_exp(m.logits + r * CC, CC);
    double t_sum = 0.0;
    for (int c = 0; c < CC; ++c)
      t_sum += targets[r * CC + c];
    for (int c = 0; c < CC; ++c)
      ref[r * CC + c] = (exp(m.logits[r * CC + c] - lse) * t_sum - targets[r * CC + c]) / CR;
  }
  assert_close("soft cross-entropy dlogits", d, ref, CR * CC, 1e-6);
  /* The row that sums to 0.7: its gradient sums to 0 too (Σ softmax = 1). */
  double s = 0.0;
  for (int c = 0; c < CC; ++c)
    s += d[4 * CC + c];
  assert_true(fabs(s) < 1e-7);
  assert_string_equal(error, "");
  free(logits), free(targets), free(d), free(m.logits), free(fd), free(ref);
}

/* ----- Reductions do not depend on the thread count ---------------------- */

/* Shapes past one chunk: 600 columns (three 256-column chunks), 1000 loss
 * rows (64 blocks), and checks against double at that size. */
static void same_on_any_thread_count(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  enum { R = 300, IN = 70, OUT = 600, CROWS = 1000, CCLS = 11 };
  float *x = random_floats(R * IN, -1, 1), *w = random_floats(OUT * IN, -1, 1);
  float *dy = random_floats(R * OUT, -1, 1), *lx = random_floats(R * OUT, -1, 1);
  float *gamma = random_floats(OUT, 0.5f, 1.5f), *logits = random_floats(CROWS * CCLS, -4, 4);
  int32_t *labels = malloc(sizeof(int32_t) * CROWS);
  assert_non_null(labels);
  for (int i = 0; i < CROWS; ++i)
    labels[i] = (int32_t)(i * 7 % CCLS);
  float *targets = one_hot(labels, CROWS, CCLS);
  float *out[2][7];
  float loss[2];
  const int before = htp_cpu_blas_threads();
  for (int run = 0; run < 2; ++run) {
    htp_cpu_set_blas_threads(run == 0 ? 1 : 3);
    float *dx = zeros(R * IN), *dw = zeros(OUT * IN), *db = zeros(OUT);
    float *ldx = zeros(R * OUT), *dg = zeros(OUT), *dbt = zeros(OUT), *dl = zeros(CROWS * CCLS);
    assert_int_equal(t->linear_backward_f32(&env, x, w, dy, dx, dw, db, R, IN, OUT),
                     HTP_KERNEL_OK);
    assert_int_equal(t->layer_norm_backward_f32(&env, lx, gamma, dy, ldx, dg, dbt, R, OUT, 1e-5f),
                     HTP_KERNEL_OK);
    assert_int_equal(
        t->softmax_cross_entropy_f32(&env, logits, targets, &loss[run], dl, CROWS, CCLS),
        HTP_KERNEL_OK);
    float *o[7] = {dx, dw, db, ldx, dg, dbt, dl};
    memcpy(out[run], o, sizeof o);
  }
  htp_cpu_set_blas_threads(before);
  const int64_t sizes[7] = {R * IN, OUT * IN, OUT, R * OUT, OUT, OUT, CROWS * CCLS};
  /* The reductions (db, layer norm's dx, dgamma, dbeta, the loss) bitwise;
   * the GEMMs' outputs (dx, dw) are htp__sgemm's, whose row split follows
   * the thread count and BLAS's edge kernels round differently by a few
   * ulp: close, not bitwise (as the forward linear). */
  for (int i = 2; i < 7; ++i)
    assert_memory_equal(out[0][i], out[1][i], sizeof(float) * (size_t)sizes[i]);
  for (int i = 0; i < 2; ++i) {
    double *as_double = to_double(out[0][i], sizes[i]);
    assert_close("gemm output on 1 and 3 threads", out[1][i], as_double, sizes[i], 1e-6);
    free(as_double);
  }
  assert_true(loss[0] == loss[1]);

  /* And right at this size: db and dbeta are column sums of dy. */
  double *col = dzeros(OUT), *rdx = dzeros(R * OUT), *rdg = dzeros(OUT), *rdb = dzeros(OUT);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < OUT; ++c)
      col[c] += dy[r * OUT + c];
  assert_close("big db", out[0][2], col, OUT, 1e-6);
  double *lxd = to_double(lx, R * OUT);
  layer_norm_grad_ref(lxd, gamma, dy, rdx, rdg, rdb, R, OUT, 1e-5);
  free(lxd);
  assert_close("big layer norm dx", out[0][3], rdx, R * OUT, 1e-5);
  assert_close("big dgamma", out[0][4], rdg, OUT, 1e-5);
  assert_close("big dbeta", out[0][5], col, OUT, 1e-6);
  struct ce_model m = {to_double(logits, CROWS * CCLS), labels, CROWS, CCLS};
  const double want = ce_loss_ref(&m);
  assert_true(fabs(loss[0] - want) <= 1e-6 * want);
  double *rdl = dzeros(CROWS * CCLS);
  ce_grad_ref(&m, rdl);
  assert_close("big dlogits", out[0][6], rdl, CROWS * CCLS, 1e-6);

  for (int run = 0; run < 2; ++run)
    for (int i = 0; i < 7; ++i)
      free(out[run][i]);
  free(x), free(w), free(dy), free(lx), free(gamma), free(logits), free(labels), free(col);
  free(targets);
  free(rdx), free(rdg), free(rdb), free(m.logits), free(rdl);
}

/* A weight gradient dW = dyᵀ x with dW wider than tall (out < in) and big
 * enough to be split: htp__sgemm splits it by dW's columns, A (dy) read
 * transposed; on 1 and 3 threads against double. dx = dy w (tall) splits
 * by rows. */
static void weight_gradient_split_by_columns(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  enum { R = 700, IN = 401, OUT = 24 };
  float *x = random_floats(R * IN, -1, 1), *w = random_floats(OUT * IN, -1, 1);
  float *dy = random_floats(R * OUT, -1, 1);
  double *rdx = dzeros(R * IN), *rdw = dzeros(OUT * IN);
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < OUT; ++o)
      for (int i = 0; i < IN; ++i) {
        rdx[r * IN + i] += (double)dy[r * OUT + o] * w[o * IN + i];
        rdw[o * IN + i] += (double)dy[r * OUT + o] * x[r * IN + i];
      }
  const int before = htp_cpu_blas_threads();
  for (int threads = 1; threads <= 3; threads += 2) {
    htp_cpu_set_blas_threads(threads);
    float *dx = zeros(R * IN), *dw = zeros(OUT * IN);
    assert_int_equal(t->linear_backward_f32(&env, x, w, dy, dx, dw, NULL, R, IN, OUT),
                     HTP_KERNEL_OK);
    assert_close("split dx", dx, rdx, R * IN, 1e-6);
    assert_close("split dw", dw, rdw, OUT * IN, 1e-6);
    free(dx), free(dw);
  }
  htp_cpu_set_blas_threads(before);
  free(x), free(w), free(dy), free(rdx), free(rdw);
}

/* ----- Optimizers -------------------------------------------------------- */

enum { ON = 13, STEPS = 4 };

static void sgd_momentum(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  const float lr = 0.1f, momentum = 0.9f, wd = 0.01f;
  float *w = random_floats(ON, -1, 1), *m = random_floats(ON, 100, 200); /* m: ignored at step 1 */
  float *w0 = copy_of(w, ON), *plain = copy_of(w, ON);
  double rw[ON], rm[ON], rp[ON];
  for (int i = 0; i < ON; ++i)
    rw[i] = rp[i] = w[i];
  for (int step = 1; step <= STEPS; ++step) {
    float *g = random_floats(ON, -1, 1);
    assert_int_equal(t->sgd_momentum_f32(&env, w, g, m, ON, lr, momentum, wd, step),
                     HTP_KERNEL_OK);
    /* momentum 0 needs no buffer: plain w -= lr (g + wd w) */
    assert_int_equal(t->sgd_momentum_f32(&env, plain, g, NULL, ON, lr, 0.0f, wd, step),
                     HTP_KERNEL_OK);
    for (int i = 0; i < ON; ++i) {
      const double d = g[i] + (double)wd * rw[i];
      rm[i] = step == 1 ? d : (double)momentum * rm[i] + d;
      rw[i] -= (double)lr * rm[i];
      rp[i] -= (double)lr * (g[i] + (double)wd * rp[i]);
    }
    free(g);
  }
  assert_close("sgd w", w, rw, ON, 1e-5);
  assert_close("sgd m", m, rm, ON, 1e-5);
  assert_close("sgd plain w", plain, rp, ON, 1e-5);
  assert_string_equal(error, "");
  assert_int_equal(t->sgd_momentum_f32(&env, w0, w0, m, ON, lr, momentum, wd, 0),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "step"));
  error[0] = '\0';
  assert_int_equal(t->sgd_momentum_f32(&env, w0, w0, NULL, ON, lr, momentum, wd, 1),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "momentum"));
  error[0] = '\0';
  free(w), free(m), free(w0), free(plain);
}

static void adamw(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.05f;
  float *w = random_floats(ON, -1, 1), *m = zeros(ON), *v = zeros(ON);
  double rw[ON], rm[ON] = {0}, rv[ON] = {0};
  for (int i = 0; i < ON; ++i)
    rw[i] = w[i];
  for (int step = 1; step <= STEPS; ++step) {
    float *g = random_floats(ON, -1, 1);
    if (step == 2)
      g[0] = 0.0f; /* a zero gradient early: only eps keeps the division finite */
    assert_int_equal(t->adamw_f32(&env, w, g, m, v, ON, lr, b1, b2, eps, wd, step),
                     HTP_KERNEL_OK);
    for (int i = 0; i < ON; ++i) {
      rw[i] -= (double)lr * wd * rw[i];
      rm[i] = b1 * rm[i] + (1.0 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1.0 - b2) * (double)g[i] * g[i];
      const double mhat = rm[i] / (1.0 - pow(b1, step)), vhat = rv[i] / (1.0 - pow(b2, step));
      rw[i] -= (double)lr * mhat / (sqrt(vhat) + eps);
    }
    free(g);
  }
  assert_close("adamw w", w, rw, ON, 1e-5);
  assert_close("adamw m", m, rm, ON, 1e-5);
  assert_close("adamw v", v, rv, ON, 1e-5);
  /* The step moved w by about lr per step (Adam's unit-scale update). */
  assert_string_equal(error, "");
  assert_int_equal(t->adamw_f32(&env, w, w, m, v, ON, lr, b1, b2, eps, wd, 0),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "step"));
  error[0] = '\0';
  assert_int_equal(t->adamw_f32(&env, w, w, m, v, ON, lr, 1.0f, b2, eps, wd, 1),
                   HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "betas"));
  error[0] = '\0';
  free(w), free(m), free(v);
}

/* ----- The model's ends: patches, tokens, pooling, sums ----------------- */

/* patchify's order by hand: images[i] = i, 1 image, 2 channels, 4 x 6, P = 2
 * (a 2 x 3 grid). Token order is row-major over the grid, each patch
 * vector (c, ky, kx). */
static void patchify_by_hand(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  float images[2 * 4 * 6], patches[6 * 8];
  for (int i = 0; i < 2 * 4 * 6; ++i)
    images[i] = (float)i;
  assert_int_equal(t->patchify_f32(&env, images, patches, 1, 2, 4, 6, 2), HTP_KERNEL_OK);
  /* token 0 (py 0, px 0): c 0 rows 0-1, cols 0-1; then c 1 (offset 24) */
  const float token0[8] = {0, 1, 6, 7, 24, 25, 30, 31};
  /* token 1 (py 0, px 1): cols 2-3 */
  const float token1[8] = {2, 3, 8, 9, 26, 27, 32, 33};
  /* token 3 (py 1, px 0): rows 2-3 */
  const float token3[8] = {12, 13, 18, 19, 36, 37, 42, 43};
  /* token 5 (py 1, px 2): rows 2-3, cols 4-5 */
  const float token5[8] = {16, 17, 22, 23, 40, 41, 46, 47};
  assert_memory_equal(patches + 0 * 8, token0, sizeof token0);
  assert_memory_equal(patches + 1 * 8, token1, sizeof token1);
  assert_memory_equal(patches + 3 * 8, token3, sizeof token3);
  assert_memory_equal(patches + 5 * 8, token5, sizeof token5);
  /* Not a multiple of the patch: refused. */
  assert_int_equal(t->patchify_f32(&env, images, patches, 1, 2, 4, 6, 4), HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "multiple"));
  error[0] = '\0';
}

/* patchify against the definition with general shapes, on 1 and 3 threads. */
static void patchify_general(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  enum { B = 3, C = 3, H = 12, W = 8, P = 4, GH = H / P, GW = W / P, K = C * P * P };
  float *images = random_floats(B * C * H * W, -1, 1);
  float *want = zeros(B * GH * GW * K);
  for (int b = 0; b < B; ++b)
    for (int py = 0; py < GH; ++py)
      for (int px = 0; px < GW; ++px)
        for (int c = 0; c < C; ++c)
          for (int ky = 0; ky < P; ++ky)
            for (int kx = 0; kx < P; ++kx)
              want[((b * GH + py) * GW + px) * K + (c * P + ky) * P + kx] =
                  images[((b * C + c) * H + py * P + ky) * W + px * P + kx];
  const int before = htp_cpu_blas_threads();
  for (int threads = 1; threads <= 3; threads += 2) {
    htp_cpu_set_blas_threads(threads);
    float *got = random_floats(B * GH * GW * K, 50, 60);
    assert_int_equal(t->patchify_f32(&env, images, got, B, C, H, W, P), HTP_KERNEL_OK);
    assert_memory_equal(got, want, sizeof(float) * B * GH * GW * K);
    free(got);
  }
  htp_cpu_set_blas_threads(before);
  free(images), free(want);
}

enum { EB = 3, EN = 4, ED = 5 };

static void embed_tokens_and_cls(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  float *patches = random_floats(EB * EN * ED, -1, 1), *cls = random_floats(ED, -1, 1);
  float *pos = random_floats((EN + 1) * ED, -1, 1), *y = random_floats(EB * (EN + 1) * ED, 9, 10);
  assert_int_equal(t->embed_tokens_f32(&env, patches, cls, pos, y, EB, EN, ED), HTP_KERNEL_OK);
  for (int b = 0; b < EB; ++b)
    for (int tok = 0; tok <= EN; ++tok)
      for (int d = 0; d < ED; ++d) {
        const double src = tok == 0 ? cls[d] : patches[(b * EN + tok - 1) * ED + d];
        assert_true(y[(b * (EN + 1) + tok) * ED + d] == (float)(src + pos[tok * ED + d]));
      }
  /* cls_token: token 0 of each image. */
  float *pooled = random_floats(EB * ED, 9, 10);
  assert_int_equal(t->cls_token_f32(&env, y, pooled, EB, EN + 1, ED), HTP_KERNEL_OK);
  for (int b = 0; b < EB; ++b)
    for (int d = 0; d < ED; ++d)
      assert_true(pooled[b * ED + d] == y[b * (EN + 1) * ED + d]);
  /* cls_token's adjoint: dy at token 0, zero elsewhere, written whole. */
  float *dy = random_floats(EB * ED, -1, 1), *dx = random_floats(EB * (EN + 1) * ED, 9, 10);
  assert_int_equal(t->cls_token_backward_f32(&env, dy, dx, EB, EN + 1, ED), HTP_KERNEL_OK);
  for (int b = 0; b < EB; ++b)
    for (int tok = 0; tok <= EN; ++tok)
      for (int d = 0; d < ED; ++d)
        assert_true(dx[(b * (EN + 1) + tok) * ED + d] == (tok == 0 ? dy[b * ED + d] : 0.0f));
  assert_string_equal(error, "");
  free(patches), free(cls), free(pos), free(y), free(pooled), free(dy), free(dx);
}

/* embed_tokens' adjoint against finite differences of the double forward
 * and the closed form, accumulation of dcls and dpos, NULL gradients. */
struct embed_model {
  double *patches, *cls, *pos, *y;
  const float *dy;
  int64_t batch, n, dim;
};

static double embed_loss(void *ctx) {
  struct embed_model *m = ctx;
  const int64_t N = m->n, D = m->dim;
  double total = 0.0;
  for (int64_t b = 0; b < m->batch; ++b)
    for (int64_t tok = 0; tok <= N; ++tok)
      for (int64_t d = 0; d < D; ++d) {
        const double src = tok == 0 ? m->cls[d] : m->patches[(b * N + tok - 1) * D + d];
        total += (src + m->pos[tok * D + d]) * m->dy[(b * (N + 1) + tok) * D + d];
      }
  return total;
}

static void embed_tokens_backward(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  const int64_t ny = EB * (EN + 1) * ED;
  float *patches = random_floats(EB * EN * ED, -1, 1), *cls = random_floats(ED, -1, 1);
  float *pos = random_floats((EN + 1) * ED, -1, 1), *dy = random_floats(ny, -1, 1);
  float *dp = random_floats(EB * EN * ED, 9, 10), *dcls = zeros(ED), *dpos = zeros((EN + 1) * ED);
  assert_int_equal(t->embed_tokens_backward_f32(&env, dy, dp, dcls, dpos, EB, EN, ED),
                   HTP_KERNEL_OK);
  struct embed_model m = {to_double(patches, EB * EN * ED), to_double(cls, ED),
                          to_double(pos, (EN + 1) * ED), NULL, dy, EB, EN, ED};
  double *fd = dzeros(EB * EN * ED);
  finite_diff(embed_loss, &m, m.patches, EB * EN * ED, fd);
  assert_close("embed dpatches (fd)", dp, fd, EB * EN * ED, FD_TOL);
  finite_diff(embed_loss, &m, m.cls, ED, fd);
  assert_close("embed dcls (fd)", dcls, fd, ED, FD_TOL);
  finite_diff(embed_loss, &m, m.pos, (EN + 1) * ED, fd);
  assert_close("embed dpos (fd)", dpos, fd, (EN + 1) * ED, FD_TOL);
  /* Closed form, in double: dpatches = dy[:, 1:], dcls = Σ_b dy[b, 0],
   * dpos = Σ_b dy[b]. */
  double *rdp = dzeros(EB * EN * ED), *rcls = dzeros(ED), *rpos = dzeros((EN + 1) * ED);
  for (int b = 0; b < EB; ++b)
    for (int tok = 0; tok <= EN; ++tok)
      for (int d = 0; d < ED; ++d) {
        const double g = dy[(b * (EN + 1) + tok) * ED + d];
        rpos[tok * ED + d] += g;
        if (tok == 0)
          rcls[d] += g;
        else
          rdp[(b * EN + tok - 1) * ED + d] = g;
      }
  assert_close("embed dpatches", dp, rdp, EB * EN * ED, 0.0);
  assert_close("embed dcls", dcls, rcls, ED, 1e-7);
  assert_close("embed dpos", dpos, rpos, (EN + 1) * ED, 1e-7);
  /* dcls and dpos accumulate; dpatches is written. */
  float *dp2 = random_floats(EB * EN * ED, 9, 10);
  assert_int_equal(t->embed_tokens_backward_f32(&env, dy, dp2, dcls, dpos, EB, EN, ED),
                   HTP_KERNEL_OK);
  assert_memory_equal(dp2, dp, sizeof(float) * EB * EN * ED);
  for (int i = 0; i < ED; ++i)
    rcls[i] *= 2;
  for (int i = 0; i < (EN + 1) * ED; ++i)
    rpos[i] *= 2;
  assert_close("embed dcls +=", dcls, rcls, ED, 1e-6);
  assert_close("embed dpos +=", dpos, rpos, (EN + 1) * ED, 1e-6);
  /* Each gradient may be NULL. */
  assert_int_equal(t->embed_tokens_backward_f32(&env, dy, NULL, NULL, NULL, EB, EN, ED),
                   HTP_KERNEL_OK);
  float *only = zeros(ED);
  assert_int_equal(t->embed_tokens_backward_f32(&env, dy, NULL, only, NULL, EB, EN, ED),
                   HTP_KERNEL_OK);
  for (int i = 0; i < ED; ++i)
    rcls[i] /= 2;
  assert_close("embed dcls alone", only, rcls, ED, 1e-7);
  assert_string_equal(error, "");
  free(patches), free(cls), free(pos), free(dy), free(dp), free(dcls), free(dpos), free(fd);
  free(m.patches), free(m.cls), free(m.pos), free(rdp), free(rcls), free(rpos), free(dp2);
  free(only);
}

/* row_sum and embed_tokens' sums over the batch: past one row block (256)
 * and one column chunk (512), against double loops and bitwise the same on
 * 1 and 3 threads. */
static void sums_any_thread_count(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  enum { R = 700, COLS = 1100, SB = 300, SN = 6, SD = 7 };
  float *x = random_floats(R * COLS, -1, 1), *dy = random_floats(SB * (SN + 1) * SD, -1, 1);
  float *out[2][3];
  const int before = htp_cpu_blas_threads();
  for (int run = 0; run < 2; ++run) {
    htp_cpu_set_blas_threads(run == 0 ? 1 : 3);
    float *y = random_floats(COLS, 9, 10); /* written: garbage before */
    float *dcls = zeros(SD), *dpos = zeros((SN + 1) * SD);
    assert_int_equal(t->row_sum_f32(&env, x, y, R, COLS), HTP_KERNEL_OK);
    assert_int_equal(t->embed_tokens_backward_f32(&env, dy, NULL, dcls, dpos, SB, SN, SD),
                     HTP_KERNEL_OK);
    out[run][0] = y, out[run][1] = dcls, out[run][2] = dpos;
  }
  htp_cpu_set_blas_threads(before);
  assert_memory_equal(out[0][0], out[1][0], sizeof(float) * COLS);
  assert_memory_equal(out[0][1], out[1][1], sizeof(float) * SD);
  assert_memory_equal(out[0][2], out[1][2], sizeof(float) * (SN + 1) * SD);
  double *col = dzeros(COLS), *rcls = dzeros(SD), *rpos = dzeros((SN + 1) * SD);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < COLS; ++c)
      col[c] += x[r * COLS + c];
  for (int b = 0; b < SB; ++b)
    for (int i = 0; i < (SN + 1) * SD; ++i) {
      rpos[i] += dy[b * (SN + 1) * SD + i];
      if (i < SD)
        rcls[i] += dy[b * (SN + 1) * SD + i];
    }
  assert_close("row sum", out[0][0], col, COLS, 1e-6);
  assert_close("dcls over a batch of 300", out[0][1], rcls, SD, 1e-6);
  assert_close("dpos over a batch of 300", out[0][2], rpos, (SN + 1) * SD, 1e-6);
  /* One row: the row itself. */
  float *one = zeros(COLS);
  assert_int_equal(t->row_sum_f32(&env, x, one, 1, COLS), HTP_KERNEL_OK);
  assert_memory_equal(one, x, sizeof(float) * COLS);
  assert_string_equal(error, "");
  for (int run = 0; run < 2; ++run)
    for (int i = 0; i < 3; ++i)
      free(out[run][i]);
  free(x), free(dy), free(col), free(rcls), free(rpos), free(one);
}

static void zero_entry(void **state) {
  (void)state;
  const htp_kernel_table *t = htp_cpu_kernel_table();
  enum { ZN = 300000 }; /* > one 1 MiB chunk */
  float *a = random_floats(ZN + 1, 1, 2);
  assert_int_equal(t->zero(&env, a, ZN * sizeof(float)), HTP_KERNEL_OK);
  for (int i = 0; i < ZN; ++i)
    if (a[i] != 0.0f)
      fail_msg("zero: element %d is %g", i, (double)a[i]);
  assert_true(a[ZN] >= 1.0f); /* nothing past the end */
  assert_int_equal(t->zero(&env, NULL, 0), HTP_KERNEL_OK);
  assert_int_equal(t->zero(&env, NULL, 4), HTP_KERNEL_ERR_INVALID);
  assert_non_null(strstr(error, "zero"));
  error[0] = '\0';
  free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(check_is_strict, setup),
      cmocka_unit_test_setup(linear_backward, setup),
      cmocka_unit_test_setup(layer_norm_backward, setup),
      cmocka_unit_test_setup(gelu_backward, setup),
      cmocka_unit_test_setup(attention_backward, setup),
      cmocka_unit_test_setup(attention_scratch_formula, setup),
      cmocka_unit_test_setup(softmax_cross_entropy, setup),
      cmocka_unit_test_setup(cross_entropy_soft_targets, setup),
      cmocka_unit_test_setup(same_on_any_thread_count, setup),
      cmocka_unit_test_setup(weight_gradient_split_by_columns, setup),
      cmocka_unit_test_setup(sgd_momentum, setup),
      cmocka_unit_test_setup(adamw, setup),
      cmocka_unit_test_setup(patchify_by_hand, setup),
      cmocka_unit_test_setup(patchify_general, setup),
      cmocka_unit_test_setup(embed_tokens_and_cls, setup),
      cmocka_unit_test_setup(embed_tokens_backward, setup),
      cmocka_unit_test_setup(sums_any_thread_count, setup),
      cmocka_unit_test_setup(zero_entry, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
