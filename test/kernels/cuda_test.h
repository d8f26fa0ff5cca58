/*===- test/kernels/cuda_test.h - What the CUDA tests share --------------===*
 *
 * Shared by test_kernels_cuda.c, test_train_cuda.c and (for its exit code)
 * test/runtime/nccl_test.c: a seeded LCG stream per test file (static
 * state: the same numbers on every run), host buffers that exit on
 * allocation failure, device copies that fail the test on any CUDA error;
 * the element-wise comparison against float64 references (check_close,
 * the f32 error bounds sum_error and random_sum_error) with its negative
 * control; a device behind its kernel table (the CUDA table on a GPU, the
 * checked device on the CPU) with poisoned outputs; and the exit code of a
 * test that found no GPU. These tests run outside cmocka (they exit 77
 * without a GPU), so test_data.h's assert-based helpers do not fit.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TEST_KERNELS_CUDA_TEST_H
#define HTP_TEST_KERNELS_CUDA_TEST_H

#include "kernels/htp_kernel_table.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned seed = 12345;

/* Uniform in [lo, hi). */
static inline float uniform(float lo, float hi) {
  seed = seed * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
}

static inline float *host_alloc(int64_t n) {
  float *data = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!data) {
    fprintf(stderr, "FAIL: out of host memory\n");
    exit(1);
  }
  return data;
}

static inline float *host_random(int64_t n, float lo, float hi) {
  float *data = host_alloc(n);
  for (int64_t i = 0; i < n; ++i) data[i] = uniform(lo, hi);
  return data;
}

/* A CUDA runtime call of the test itself: any failure fails the test. */
static inline void cuda_or_die(cudaError_t status, const char *what) {
  if (status != cudaSuccess) {
    fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(status));
    exit(1);
  }
}

/* A device copy of bytes of host (uninitialised when host is NULL). */
static inline void *to_device_bytes(const void *host, size_t bytes) {
  void *device = NULL;
  cuda_or_die(cudaMalloc(&device, bytes > 0 ? bytes : 1), "cudaMalloc");
  if (host && bytes > 0)
    cuda_or_die(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice),
                "cudaMemcpy to the device");
  /* A pageable copy may still be in flight on return, and the kernels'
   * non-blocking streams do not wait for the default stream. */
  cuda_or_die(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return device;
}

static inline float *to_device(const float *host, int64_t n) {
  return to_device_bytes(host, (size_t)(n > 0 ? n : 0) * sizeof(float));
}

/* ----- Element-wise comparison against a float64 reference -------------- *
 * Every element i must satisfy |got[i] - ref[i]| <= tol[i], with ref
 * computed in double from the very values the kernel read and tol[i] the
 * bound the reference derives for that element (the tests' formulas sit
 * beside their references). NaN or infinity in got is never accepted, so
 * an output filled with NaN (0xFF bytes: poison_bytes) before the kernel
 * fails wherever the kernel did not write. A tolerance relative to the
 * largest element would let a small element be wrong by the size of a
 * large one; these do not. */

/* Unit roundoffs: f32 (24-bit significand) and bf16 (8-bit). */
#define UNIT_F32 (1.0 / 16777216.0)
#define UNIT_BF16 (1.0 / 256.0)

/* The error of a sum of `terms` terms accumulated in f32, as a fraction of
 * the sum of the terms' magnitudes (their L1 norm): coefficient *
 * sqrt(terms) * 2^-24. The worst case is terms * 2^-24 (Higham's gamma_n);
 * rounding errors are modelled as independent (Higham and Mary, "A new
 * approach to probabilistic rounding error analysis", 2019) and every
 * partial sum is at most the L1 norm, so coefficient 4 is about 7 standard
 * deviations whatever the terms' signs. For sums of terms of one sign
 * (layer norm's mean, softmax's denominator, sums over rows) and for bf16
 * GEMMs on tensor cores (coefficient 16: their f32 accumulation may
 * truncate instead of rounding to nearest). */
static inline double sum_error(double coefficient, int64_t terms) {
  return coefficient * sqrt((double)(terms > 1 ? terms : 1)) * UNIT_F32;
}

/* The same for `terms` terms of random sign accumulated with f32 FMAs
 * (round to nearest, any order), given the sum of their squares: the
 * partial sums are then random walks, E s_k^2 <= Σ t^2, so the error's
 * variance is at most terms u^2 / 3 Σ t^2, and 4 sqrt(terms) u ||t||_2 is
 * again about 7 standard deviations; about sqrt(terms) times tighter than
 * the L1 form, so that at 4096 terms one dropped term or TF32 inputs
 * (2^-11 per operand) are far outside it. */
static inline double random_sum_error(int64_t terms, double squares) {
  return 4.0 * sqrt((double)(terms > 1 ? terms : 1)) * UNIT_F32 * sqrt(squares);
}

/* got[rows[r] * cols + c] against ref[r * cols + c] (r < count, c < cols;
 * rows NULL: rows 0, 1, ...), element-wise within tol (NULL: exactly).
 * Prints one line (worst |err| / tol and where), and the first few
 * mismatches with their [row, column] (llm.c's habit). Returns how many
 * elements failed. */
static inline int64_t check_close(const char *name, const float *got, int64_t cols,
                                  const int64_t *rows, int64_t count, const double *ref,
                                  const double *tol) {
  enum { SHOWN = 5 };
  int64_t bad = 0, worst_at = -1;
  double worst = 0.0;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t row = rows ? rows[r] : r;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const double value = got[row * cols + c], bound = tol ? tol[i] : 0.0;
      const double diff = fabs(value - ref[i]);
      /* NaN compares false: written this way round it fails. */
      const int ok = isfinite(value) && isfinite(bound) && diff <= bound;
      const double ratio = !isfinite(value) || !isfinite(bound) ? INFINITY
                           : bound > 0.0                         ? diff / bound
                           : diff > 0.0                          ? INFINITY
                                                                 : 0.0;
      if (worst_at < 0 || ratio > worst) worst = ratio, worst_at = i;
      if (ok) continue;
      if (bad < SHOWN)
        printf("    mismatch %s [%lld, %lld]: got %.9g want %.9g |err| %.3g > tol %.3g\n", name,
               (long long)row, (long long)c, value, ref[i], diff, bound);
      ++bad;
    }
  }
  const long long at_row = worst_at < 0 ? 0 : (long long)(rows ? rows[worst_at / cols] : worst_at / cols);
  const long long at_col = worst_at < 0 ? 0 : (long long)(worst_at % cols);
  printf("  %-46s %9lld checked, worst |err|/tol %-9.3g at [%lld, %lld] %s", name,
         (long long)(count * cols), worst, at_row, at_col, bad ? "FAIL" : "ok");
  if (bad) printf(" (%lld elements off)", (long long)bad);
  printf("\n");
  return bad;
}

/* How many of got's n elements are not finite: the poison an output
 * started as, left where the kernel wrote nothing. */
static inline int64_t check_written(const char *name, const float *got, int64_t n) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!isfinite(got[i])) {
      if (first < 0) first = i;
      ++bad;
    }
  if (bad)
    printf("  %-46s FAIL: %lld of %lld elements not written (first at %lld)\n", name,
           (long long)bad, (long long)n, (long long)first);
  return bad;
}

/* The NaN whose bytes are all 0xFF, as f32 and as a widened bf16. */
static inline int is_poison_f32(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits == 0xFFFFFFFFu || bits == 0xFFFF0000u;
}

/* Fills bytes with 0xFF: every f32 and bf16 element a NaN. */
static inline void poison_bytes(void *data, size_t bytes) { memset(data, 0xFF, bytes); }

/* ----- The checker's own negative control (no GPU needed) -------------- *
 * Deliberately wrong results must be rejected and right ones accepted:
 * one element off by 1e-3 (f32 tolerance) or by a few bf16 ulps (bf16
 * tolerance), one NaN, one infinity, an error in a sampled row, and one
 * element a "kernel" skipped, which passes on a buffer left holding an
 * earlier run's answer and fails once the buffer is poisoned. Returns the
 * number of the control's own failures. */

/* A kernel with a bug: y = 2 x except element skip, left alone. */
static inline void skipping_kernel(const float *x, float *y, int64_t n, int64_t skip) {
  for (int64_t i = 0; i < n; ++i)
    if (i != skip) y[i] = 2.0f * x[i];
}

static inline int checker_negative_control(void) {
  enum { N = 64, COLS = 8 };
  float x[N], got[N];
  double ref[N], tol[N];
  int wrong = 0;
  printf("checker negative control (each FAIL below is expected):\n");
  for (int i = 0; i < N; ++i) {
    x[i] = (float)(i % 7) * 0.37f - 1.1f;
    ref[i] = 2.0 * x[i];
    tol[i] = 2.0 * UNIT_F32 * fabs(ref[i]) + 1e-30;
  }
#define EXPECT(label, accepted, result)                                                  \
  do {                                                                                  \
    const int ok_ = (accepted) ? (result) == 0 : (result) > 0;                          \
    printf("  -> %s: %s\n", label, ok_ ? ((accepted) ? "accepted: ok" : "rejected: ok")   \
                                      : "WRONG VERDICT");                               \
    wrong += !ok_;                                                                      \
  } while (0)
  skipping_kernel(x, got, N, -1);
  EXPECT("exact result", 1, check_close("control exact", got, COLS, NULL, N / COLS, ref, tol));
  got[13] = (float)(ref[13] * (1.0 + 1e-3));
  EXPECT("one element off by 1e-3", 0,
         check_close("control 1e-3", got, COLS, NULL, N / COLS, ref, tol));
  skipping_kernel(x, got, N, -1);
  poison_bytes(&got[42], sizeof(float));
  EXPECT("one NaN", 0, check_close("control NaN", got, COLS, NULL, N / COLS, ref, tol));
  skipping_kernel(x, got, N, -1);
  got[7] = INFINITY;
  EXPECT("one infinity", 0, check_close("control inf", got, COLS, NULL, N / COLS, ref, tol));
  /* A row sample: rows 1 and 6 of got, held by the reference as its rows
   * 0 and 1; the error's row is reported as 6. */
  const int64_t sample[] = {1, 6};
  double sample_ref[2 * COLS], sample_tol[2 * COLS];
  for (int c = 0; c < COLS; ++c) {
    sample_ref[c] = ref[1 * COLS + c], sample_tol[c] = tol[1 * COLS + c];
    sample_ref[COLS + c] = ref[6 * COLS + c], sample_tol[COLS + c] = tol[6 * COLS + c];
  }
  skipping_kernel(x, got, N, -1);
  got[6 * COLS + 3] += 1e-3f;
  EXPECT("an error in sampled row 6", 0,
         check_close("control sampled rows", got, COLS, sample, 2, sample_ref, sample_tol));
  /* The skipped element: on the last run's buffer it goes unseen. */
  skipping_kernel(x, got, N, -1);
  skipping_kernel(x, got, N, 29);
  EXPECT("skipped element, stale buffer (why outputs are poisoned)", 1,
         check_close("control stale", got, COLS, NULL, N / COLS, ref, tol));
  poison_bytes(got, sizeof got);
  skipping_kernel(x, got, N, 29);
  EXPECT("skipped element, poisoned buffer", 0,
         check_close("control poisoned", got, COLS, NULL, N / COLS, ref, tol) +
             check_written("control poisoned written", got, N));
  /* bf16: one rounding of the output (at most 2^-8 of the value) passes,
   * a result 1e-2 off does not. */
  for (int i = 0; i < N; ++i) {
    got[i] = htp_bf16_to_f32(htp_bf16_from_f32((float)ref[i]));
    tol[i] = UNIT_BF16 * fabs(ref[i]) + 1e-30;
  }
  EXPECT("bf16 rounded once", 1, check_close("control bf16", got, COLS, NULL, N / COLS, ref, tol));
  got[50] = (float)(ref[50] * (1.0 + 1e-2));
  EXPECT("bf16 one element 1e-2 off", 0,
         check_close("control bf16 1e-2", got, COLS, NULL, N / COLS, ref, tol));
#undef EXPECT
  printf("checker negative control: %s\n", wrong ? "FAIL" : "ok");
  return wrong;
}

/* ----- A device behind its kernel table ----------------------------------- */

typedef enum dtype { F32, BF16 } dtype;

typedef struct device {
  const char *name;
  const htp_kernel_table *k;
  htp_kernel_env env;
  char error[256];
} device;

/* An entry, then a wait for the stream (an asynchronous failure is blamed
 * on its entry); any failure ends the test. */
#define ENTRY(d, call)                                                                    \
  do {                                                                                    \
    if ((call) != HTP_KERNEL_OK || (d)->k->synchronize(&(d)->env) != HTP_KERNEL_OK) {     \
      fprintf(stderr, "FAIL: %s on %s: %s\n", #call, (d)->name, (d)->error);              \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static inline size_t type_bytes(dtype t) { return t == F32 ? sizeof(float) : sizeof(htp_bf16); }

/* Random values the type holds exactly (bf16: rounded to nearest even), so
 * the reference reads what the device reads. */
static inline float *random_values(int64_t n, float lo, float hi, dtype t) {
  float *x = host_random(n, lo, hi);
  if (t == BF16)
    for (int64_t i = 0; i < n; ++i) x[i] = htp_bf16_to_f32(htp_bf16_from_f32(x[i]));
  return x;
}

static inline void *device_alloc(device *d, size_t bytes) {
  void *p = NULL;
  ENTRY(d, d->k->alloc(&d->env, bytes ? bytes : 1, &p));
  return p;
}

static inline void upload_to(device *d, void *p, const float *host, int64_t n, dtype t) {
  if (n <= 0) return;
  if (t == F32) {
    ENTRY(d, d->k->to_device(&d->env, p, host, (size_t)n * sizeof(float)));
    return;
  }
  htp_bf16 *h = malloc((size_t)n * sizeof(htp_bf16));
  if (!h) exit(1);
  htp_bf16_from_f32_n(host, h, n);
  ENTRY(d, d->k->to_device(&d->env, p, h, (size_t)n * sizeof(htp_bf16)));
  free(h);
}

static inline void *upload(device *d, const float *host, int64_t n, dtype t) {
  void *p = device_alloc(d, (size_t)n * type_bytes(t));
  upload_to(d, p, host, n, t);
  return p;
}

/* n elements of device memory, every byte 0xFF: NaN in either type. */
static inline void *upload_poison(device *d, int64_t n, dtype t) {
  const size_t bytes = (size_t)(n > 0 ? n : 1) * type_bytes(t);
  void *host = malloc(bytes), *p = device_alloc(d, bytes);
  if (!host) exit(1);
  poison_bytes(host, bytes);
  ENTRY(d, d->k->to_device(&d->env, p, host, bytes));
  free(host);
  return p;
}

/* n elements of p as f32 on the host (bf16 widened, exactly). */
static inline float *download(device *d, const void *p, int64_t n, dtype t) {
  float *host = host_alloc(n);
  if (n <= 0) return host;
  if (t == F32) {
    ENTRY(d, d->k->to_host(&d->env, host, p, (size_t)n * sizeof(float)));
    return host;
  }
  htp_bf16 *h = malloc((size_t)n * sizeof(htp_bf16));
  if (!h) exit(1);
  ENTRY(d, d->k->to_host(&d->env, h, p, (size_t)n * sizeof(htp_bf16)));
  htp_bf16_to_f32_n(h, host, n);
  free(h);
  return host;
}

static inline void release(device *d, void *p) {
  if (p) ENTRY(d, d->k->release(&d->env, p));
}

static inline double *doubles(int64_t n) {
  double *data = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!data) exit(1);
  return data;
}

/* Σ a[i] b[i] in double; the terms' L1 norm in *l1 and their squares'
 * sum in *squares. */
static inline double dot(const float *a, const float *b, int64_t n, double *l1, double *squares) {
  double s0 = 0, s1 = 0, m0 = 0, m1 = 0, q0 = 0, q1 = 0;
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    const double p0 = (double)a[i] * b[i], p1 = (double)a[i + 1] * b[i + 1];
    s0 += p0, s1 += p1, m0 += fabs(p0), m1 += fabs(p1), q0 += p0 * p0, q1 += p1 * p1;
  }
  for (; i < n; ++i) {
    const double p = (double)a[i] * b[i];
    s0 += p, m0 += fabs(p), q0 += p * p;
  }
  *l1 = m0 + m1;
  *squares = q0 + q1;
  return s0 + s1;
}

/* ----- The model's ends from their definitions (htp_kernel_table.h) ----- *
 * The copies are exact (an f32 addition is exact to compare: the same one
 * IEEE operation); the sums over images or rows are bounded by
 * sum_error(4, terms) times their terms' L1 norm plus the final rounding. */

static inline void patchify_reference(const float *images, double *patches, int64_t batch,
                                      int64_t channels, int64_t height, int64_t width,
                                      int64_t patch) {
  const int64_t grid = width / patch, n = (height / patch) * grid;
  const int64_t features = channels * patch * patch;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t y = 0; y < height; ++y)
        for (int64_t x = 0; x < width; ++x) {
          const int64_t token = b * n + (y / patch) * grid + x / patch;
          patches[token * features + (c * patch + y % patch) * patch + x % patch] =
              images[((b * channels + c) * height + y) * width + x];
        }
}

static inline void embed_tokens_reference(const float *patches, const float *cls,
                                          const float *pos, double *y, int64_t batch,
                                          int64_t n, int64_t dim) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t <= n; ++t)
      for (int64_t i = 0; i < dim; ++i) {
        const float token = t ? patches[(b * n + t - 1) * dim + i] : cls[i];
        y[(b * (n + 1) + t) * dim + i] = (float)(token + pos[t * dim + i]);
      }
}

static inline void cls_token_reference(const float *x, double *y, int64_t batch, int64_t tokens,
                                       int64_t dim) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < dim; ++i) y[b * dim + i] = x[b * tokens * dim + i];
}

static inline void cls_token_backward_reference(const float *dy, double *dx, int64_t batch,
                                                int64_t tokens, int64_t dim) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < dim; ++i)
        dx[(b * tokens + t) * dim + i] = t == 0 ? dy[b * dim + i] : 0.0;
}

/* sums[c] = start[c] (NULL: 0) + Σ_r x[r * stride + c] over `rows` rows,
 * with its bound. */
static inline void column_sum_reference(const float *x, int64_t rows, int64_t cols,
                                        int64_t stride, const float *start, double *sums,
                                        double *tol) {
  for (int64_t c = 0; c < cols; ++c) {
    double sum = start ? start[c] : 0.0, l1 = fabs(sum);
    for (int64_t r = 0; r < rows; ++r) sum += x[r * stride + c], l1 += fabs(x[r * stride + c]);
    sums[c] = sum;
    tol[c] = sum_error(4.0, rows + (start != NULL)) * l1 + UNIT_F32 * fabs(sum);
  }
}

/* embed_tokens' adjoint: dpatches (a copy), dcls += Σ_b dy[b, 0], dpos[t]
 * += Σ_b dy[b, t] onto the starts, with their bounds. */
static inline void embed_tokens_backward_reference(const float *dy, const float *cls_start,
                                                   const float *pos_start, double *dpatches,
                                                   double *dcls, double *dcls_tol, double *dpos,
                                                   double *dpos_tol, int64_t batch, int64_t n,
                                                   int64_t dim) {
  const int64_t tokens = n + 1;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 1; t < tokens; ++t)
      for (int64_t i = 0; i < dim; ++i)
        dpatches[(b * n + t - 1) * dim + i] = dy[(b * tokens + t) * dim + i];
  column_sum_reference(dy, batch, dim, tokens * dim, cls_start, dcls, dcls_tol);
  for (int64_t t = 0; t < tokens; ++t)
    column_sum_reference(dy + t * dim, batch, dim, tokens * dim,
                         pos_start ? pos_start + t * dim : NULL, dpos + t * dim,
                         dpos_tol + t * dim);
}

/* The exit code of a test that found no usable device (why): 1 if any of
 * the checks that need no GPU failed, or HTP_REQUIRE_GPU is set (non-empty,
 * not "0"), where a skip would hide a broken GPU run; else 77, skipped, or
 * 0 with HTP_TEST_NO_GPU_OK set (a run meant for its checks without a GPU:
 * the checked device at every shape). */
static inline int no_device_exit(const char *why, int failures) {
  const char *require = getenv("HTP_REQUIRE_GPU"), *no_gpu_ok = getenv("HTP_TEST_NO_GPU_OK");
  if (failures) {
    fprintf(stderr, "FAIL: %d of the checks that need no GPU failed\n", failures);
    return 1;
  }
  if (require && strcmp(require, "") != 0 && strcmp(require, "0") != 0) {
    fprintf(stderr, "FAIL: HTP_REQUIRE_GPU is set and no CUDA device is usable (%s)\n", why);
    return 1;
  }
  if (no_gpu_ok && *no_gpu_ok) {
    printf("no CUDA device (%s): the checks without a GPU passed\n", why);
    return 0;
  }
  printf("no CUDA device (%s): skipped\n", why);
  return 77;
}

#endif /* HTP_TEST_KERNELS_CUDA_TEST_H */
