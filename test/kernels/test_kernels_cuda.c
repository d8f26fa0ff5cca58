/*===- test/kernels/test_kernels_cuda.c - CUDA kernels vs their CPU twins -===*
 *
 * Runs each htp_cuda_* kernel and its CPU twin on the same random data and
 * compares: max |got - want| over the largest |want| (so the tolerance grows
 * with the magnitude of the result), exact where the kernel only copies or
 * adds in a fixed order. The twins are the htp_cpu_* kernels, and for the
 * reduction, unit packing and imputation (whose runtime versions are private
 * to libhtprt) reference loops below written from runtime/balance.c
 * pack_in_units and runtime/units.c htp_impute_fill. The unit kernels are
 * also run through the CUDA kernel table (kernels/cuda/table.c).
 *
 * The bf16 entries, and the same-device sums, are compared through the two
 * tables: each CUDA entry against the CPU table's entry of the same name
 * (kernels/cpu/bf16.c: widen, f32 kernel, round once) on the same bf16
 * data. Both round one f32 result once, so where their f32 arithmetic is
 * the same (add, bias add, the sums: one IEEE operation per element, in
 * the same order) the bits must be equal; elsewhere the f32 results differ
 * in their last bits (summation order, erff, __expf) and a rounding may
 * fall the other way: one bf16 ulp, at most 2^-7 of the largest value, so
 * 1e-2. attention_bf16 rounds its context before the projection, which
 * the CPU twin does not: 2e-2 there. The CUDA table's memory, copy,
 * synchronize and timing entries are run once, round trip. The model's
 * ends (patchify, token embedding, pooling, row sums, their adjoints,
 * zero) through both tables, f32.
 *
 * SM partitions (green contexts, kernels/cuda/green.c) and a caller's
 * stream: the SM-count check and the refusals that need no device run
 * everywhere, before the GPU probe; with a GPU, a partition's environment
 * computes, an invalid count and an exhausted device are refused, freed
 * SMs come back, and a caller's stream is used and left alive.
 *
 * Exits 77 (ctest: skipped) where no GPU is present, as on the build
 * machines, unless HTP_REQUIRE_GPU=1: then a missing GPU fails, as does any
 * CUDA error (always a failure, never a skip, once a device was found).
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h" /* the SM-count check, the partition */
#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"
#include "kernels/htp_kernels_cuda.h"
#include "test/kernels/cuda_test.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

/* max |got - want| / max |want| against the tolerance; NaN fails. */
static void compare_values(const char *name, const float *got, const float *want, int64_t n,
                           double tolerance) {
  double error = relative_error(got, want, n);
  int ok = error <= tolerance;
  printf("%-30s relative error %.3g %s\n", name, error, ok ? "ok" : "FAIL");
  failures += !ok;
}

static void compare(const char *name, const float *device, const float *want, int64_t n,
                    double tolerance) {
  float *got = malloc((size_t)n * sizeof(float));
  cuda_or_die(cudaMemcpy(got, device, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost),
              "cudaMemcpy from the device");
  compare_values(name, got, want, n, tolerance);
  free(got);
}

/* bf16 on the device against bf16 on the host, both widened (exact). */
static void compare_bf16(const char *name, const htp_bf16 *device, const htp_bf16 *want,
                         int64_t n, double tolerance) {
  htp_bf16 *got = malloc((size_t)n * sizeof(htp_bf16));
  float *got_f32 = malloc((size_t)n * sizeof(float)), *want_f32 = malloc((size_t)n * sizeof(float));
  cuda_or_die(cudaMemcpy(got, device, (size_t)n * sizeof(htp_bf16), cudaMemcpyDeviceToHost),
              "cudaMemcpy from the device");
  htp_bf16_to_f32_n(got, got_f32, n);
  htp_bf16_to_f32_n(want, want_f32, n);
  compare_values(name, got_f32, want_f32, n, tolerance);
  free(got), free(got_f32), free(want_f32);
}

#define CHECK_CALL(call)                                                                 \
  do {                                                                                  \
    if (call) {                                                                         \
      fprintf(stderr, "%s failed: %s\n", #call, htp_cuda_kernels_error(kernels));       \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

#define CHECK_TABLE(call)                                                                \
  do {                                                                                  \
    if ((call) != HTP_KERNEL_OK) {                                                      \
      fprintf(stderr, "FAIL: %s: %s\n", #call, table_error);                            \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

/* Waits for both objects' streams (the table's environment has its own):
 * non-blocking streams do not order with the cudaMemcpy of compare(). */
#define SYNC_BOTH()                                                                      \
  do {                                                                                  \
    CHECK_CALL(htp_cuda_kernels_sync(kernels));                                         \
    if (htp_cuda_kernels_sync((htp_cuda_kernels *)env.kernels)) {                       \
      fprintf(stderr, "FAIL: table stream: %s\n",                                       \
              htp_cuda_kernels_error((htp_cuda_kernels *)env.kernels));                 \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

/* ----- CPU twins of the gather kernels (reference loops) ----------------- */

/* y[i] = inputs[0][i] + ... in order, in f32. */
static void cpu_reduce_sum(const float *const *inputs, int64_t count, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float sum = count ? inputs[0][i] : 0.0f;
    for (int64_t k = 1; k < count; ++k) sum += inputs[k][i];
    y[i] = sum;
  }
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

/* ----- The unit kernels of the balance hooks ----------------------------- */

static int unit_cases(htp_cuda_kernels *kernels, const float *x, const float *wqkv,
                      const float *bqkv, int64_t batch, int64_t tokens, int64_t dim,
                      int64_t heads, int64_t head_dim) {
  const int64_t rows = batch * tokens, inner = heads * head_dim;
  char table_error[256] = "";
  htp_kernel_env env;
  if (htp_cuda_kernel_env_create(0, &env, table_error, sizeof table_error) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: htp_cuda_kernel_env_create: %s\n", table_error);
    return 1;
  }
  const htp_kernel_table *table = htp_cuda_kernel_table();
  float *dx = to_device(x, rows * dim), *dwqkv = to_device(wqkv, 3 * inner * dim);
  float *dbqkv = to_device(bqkv, 3 * inner);

  /* Listed heads, out of order with a run, into a context whose other
   * columns hold values that must survive (in the outputs' range, so they
   * do not loosen the relative measure); with and without the bias. */
  const int64_t scratch_floats = rows * 3 * head_dim + tokens * tokens;
  float *scratch = malloc(sizeof(float) * scratch_floats);
  float *dscratch = to_device(NULL, scratch_floats);
  const int32_t head_list[] = {3, 0, 1};
  for (int with_bias = 1; with_bias >= 0; --with_bias) {
    float *context = host_random(rows * inner, -1, 1);
    float *dcontext = to_device(context, rows * inner);
    CHECK_CALL(htp_cuda_attention_heads_f32(kernels, dx, dwqkv, with_bias ? dbqkv : NULL,
                                            dcontext, dscratch, batch, tokens, dim, heads,
                                            head_dim, head_list, 3));
    SYNC_BOTH();
    htp_cpu_attention_heads_f32(x, wqkv, with_bias ? bqkv : NULL, context, scratch, batch,
                                tokens, dim, heads, head_dim, head_list, 3);
    compare(with_bias ? "attention_heads {3,0,1}" : "attention_heads no bias", dcontext,
            context, rows * inner, 1e-4);
    cudaFree(dcontext), free(context);
  }
  { /* the table entry, one head */
    const int32_t one_head = 4;
    float *context = host_random(rows * inner, -1, 1);
    float *dcontext = to_device(context, rows * inner);
    CHECK_TABLE(table->attention_heads_f32(&env, dx, dwqkv, dbqkv, dcontext, dscratch, batch,
                                           tokens, dim, heads, head_dim, &one_head, 1));
    SYNC_BOTH();
    htp_cpu_attention_heads_f32(x, wqkv, bqkv, context, scratch, batch, tokens, dim, heads,
                                head_dim, &one_head, 1);
    compare("table attention_heads {4}", dcontext, context, rows * inner, 1e-4);
    cudaFree(dcontext), free(context);
  }

  /* MLP units: 9 units of 37 neurons, runs {0,1,2} {5} {7,8}; b1 NULL and
   * the tanh approximation once. */
  const int64_t width = 37, units = 9, hidden_dim = units * width;
  float *w1 = host_random(hidden_dim * dim, -0.2f, 0.2f), *b1 = host_random(hidden_dim, -0.5f, 0.5f);
  float *dw1 = to_device(w1, hidden_dim * dim), *db1 = to_device(b1, hidden_dim);
  const int32_t unit_list[] = {0, 1, 2, 5, 7, 8};
  for (int variant = 0; variant < 3; ++variant) {
    const int with_bias = variant != 1, tanh_approx = variant == 2;
    float *hidden = host_random(rows * hidden_dim, -1, 1);
    float *dhidden = to_device(hidden, rows * hidden_dim);
    if (variant < 2)
      CHECK_CALL(htp_cuda_mlp_hidden_units_f32(kernels, dx, dw1, with_bias ? db1 : NULL, dhidden,
                                               rows, dim, hidden_dim, width, unit_list, 6,
                                               tanh_approx));
    else
      CHECK_TABLE(table->mlp_hidden_units_f32(&env, dx, dw1, db1, dhidden, rows, dim, hidden_dim,
                                              width, unit_list, 6, tanh_approx));
    SYNC_BOTH();
    htp_cpu_mlp_hidden_units_f32(x, w1, with_bias ? b1 : NULL, hidden, rows, dim, hidden_dim,
                                 width, unit_list, 6, tanh_approx);
    static const char *names[] = {"mlp_hidden_units", "mlp_hidden_units no bias",
                                  "table mlp_hidden_units tanh"};
    compare(names[variant], dhidden, hidden, rows * hidden_dim, 1e-5);
    cudaFree(dhidden), free(hidden);
  }

  /* Row-parallel linear over unit blocks of a [rows, hidden_dim] input:
   * overwrite, accumulate (through the table), and the empty list. */
  float *a = host_random(rows * hidden_dim, -1, 1), *w2 = host_random(dim * hidden_dim, -0.2f, 0.2f);
  float *da = to_device(a, rows * hidden_dim), *dw2 = to_device(w2, dim * hidden_dim);
  const int32_t block_list[] = {1, 2, 3, 6, 8};
  for (int variant = 0; variant < 4; ++variant) {
    const int32_t accumulate = variant == 1 || variant == 3;
    const int64_t count = variant >= 2 ? 0 : 5;
    float *y = host_random(rows * dim, -3, 3);
    float *dy = to_device(y, rows * dim);
    if (variant == 1)
      CHECK_TABLE(table->linear_units_f32(&env, da, dw2, dy, rows, hidden_dim, dim, width,
                                          block_list, count, accumulate));
    else
      CHECK_CALL(htp_cuda_linear_units_f32(kernels, da, dw2, dy, rows, hidden_dim, dim, width,
                                           block_list, count, accumulate));
    SYNC_BOTH();
    htp_cpu_linear_units_f32(a, w2, y, rows, hidden_dim, dim, width, block_list, count,
                             accumulate);
    static const char *names[] = {"linear_units", "table linear_units accumulate",
                                  "linear_units none (zero)", "linear_units none (kept)"};
    compare(names[variant], dy, y, rows * dim, variant >= 2 ? 0 : 1e-5);
    cudaFree(dy), free(y);
  }

  /* An id out of range is refused on the host, before any launch. */
  const int32_t bad = (int32_t)heads;
  if (htp_cuda_attention_heads_f32(kernels, dx, dwqkv, dbqkv, dscratch, dscratch, batch, tokens,
                                   dim, heads, head_dim, &bad, 1) == 0) {
    printf("%-30s accepted head %d of %d: FAIL\n", "attention_heads bad id", (int)bad,
           (int)heads);
    ++failures;
  }

  htp_cuda_kernel_env_destroy(&env);
  cudaFree(dx), cudaFree(dwqkv), cudaFree(dbqkv), cudaFree(dscratch), cudaFree(dw1);
  cudaFree(db1), cudaFree(da), cudaFree(dw2);
  free(scratch), free(w1), free(b1), free(a), free(w2);
  return 0;
}

/* ----- Reduction, packing, imputation ------------------------------------ */

static int gather_cases(htp_cuda_kernels *kernels) {
  /* Three ranks' partial sums, the result in place over the first. */
  const int64_t n = 100003;
  float *in[3], *din[3];
  for (int k = 0; k < 3; ++k) in[k] = host_random(n, -100, 100), din[k] = to_device(in[k], n);
  float *want = malloc(sizeof(float) * n);
  cpu_reduce_sum((const float *const *)in, 3, want, n);
  CHECK_CALL(htp_cuda_reduce_sum_f32(kernels, (const float *const *)din, 3, din[0], n));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  compare("reduce_sum (in place)", din[0], want, n, 0);
  float *dy = to_device(NULL, n);
  CHECK_CALL(htp_cuda_reduce_sum_f32(kernels, (const float *const *)din, 0, dy, n));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  memset(want, 0, sizeof(float) * n);
  compare("reduce_sum no inputs", dy, want, n, 0);
  for (int k = 0; k < 3; ++k) cudaFree(din[k]), free(in[k]);
  cudaFree(dy), free(want);

  /* Packing: an attention pair (3 parts) of 5 heads, heads {4, 1} into
   * slots 1, 2 of a 4-unit block; an MLP pair (1 part, no bias) of 9 units,
   * unit 7 into slot 0 of a 1-unit block (a one-unit shard). */
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
    float *second = host_random(second_n, -1, 1), *block = host_random(block_n, -9, 9);
    float *dfirst = to_device(first, first_n), *dbias = to_device(bias, bias_n);
    float *dsecond = to_device(second, second_n), *dblock = to_device(block, block_n);
    CHECK_CALL(htp_cuda_pack_units_f32(kernels, dfirst, variant ? NULL : dbias, dsecond, units,
                                       width, d, parts, list, count, dblock, block_units, slot));
    CHECK_CALL(htp_cuda_kernels_sync(kernels));
    cpu_pack_units(first, variant ? NULL : bias, second, units, width, d, parts, list, count,
                   block, block_units, slot);
    compare(variant ? "pack_units mlp shard" : "pack_units heads {4,1}", dblock, block, block_n,
            0);
    cudaFree(dfirst), cudaFree(dbias), cudaFree(dsecond), cudaFree(dblock);
    free(first), free(bias), free(second), free(block);
  }
  { /* a slot range past the block is refused */
    float *dummy = to_device(NULL, 1);
    const int32_t unit = 0;
    if (htp_cuda_pack_units_f32(kernels, dummy, NULL, dummy, 1, 1, 1, 1, &unit, 1, dummy, 1, 1) ==
        0) {
      printf("%-30s accepted slot 1 of a 1-unit block: FAIL\n", "pack_units bad slot");
      ++failures;
    }
    cudaFree(dummy);
  }

  /* Imputation over [rows, 9 units of 37 + 5 padding columns]. */
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
    CHECK_CALL(htp_cuda_kernels_sync(kernels));
    cpu_impute(mode, act, stored, rows, row_stride, row_stride, width, kept, num_kept, pruned, 4);
    static const char *names[] = {"impute_zero", "impute_average", "impute_same",
                                  "impute_average none kept"};
    compare(names[variant], dact, act, rows * row_stride, mode == 1 && num_kept ? 1e-6 : 0);
    cudaFree(dact), free(act);
  }
  cudaFree(dstored), free(stored);
  return 0;
}

/* ----- bf16 entries and the sums, CUDA table against CPU table ------------ */

#define BF16_TOLERANCE 1e-2      /* one bf16 ulp of the largest value (2^-7), above */
#define BF16_ATTENTION 2e-2      /* the CUDA context's own rounding on top */

static htp_bf16 *host_random_bf16(int64_t n, float lo, float hi) {
  float *values = host_random(n, lo, hi);
  htp_bf16 *rounded = malloc((size_t)n * sizeof(htp_bf16));
  htp_bf16_from_f32_n(values, rounded, n);
  free(values);
  return rounded;
}

static htp_bf16 *to_device_bf16(const htp_bf16 *host, int64_t n) {
  return to_device_bytes(host, (size_t)(n > 0 ? n : 0) * sizeof(htp_bf16));
}

/* The plain ops: linear (with and without bias), layer norm, GELU (both
 * forms), add, bias add, attention (and its scratch check). */
static int bf16_op_cases(twin_tables *t, int64_t batch, int64_t tokens, int64_t dim,
                         int64_t heads, int64_t head_dim, int64_t mlp) {
  const int64_t rows = batch * tokens, inner = heads * head_dim;
  const htp_kernel_env *ce = &t->cuda_env, *he = &t->cpu_env;
  htp_bf16 *x = host_random_bf16(rows * dim, -1, 1), *w = host_random_bf16(mlp * dim, -0.2f, 0.2f);
  htp_bf16 *b = host_random_bf16(mlp, -0.5f, 0.5f), *other = host_random_bf16(rows * dim, -1, 1);
  htp_bf16 *gamma = host_random_bf16(dim, 0.5f, 1.5f), *beta = host_random_bf16(dim, -1, 1);
  htp_bf16 *want = malloc((size_t)(rows * mlp) * sizeof(htp_bf16));
  htp_bf16 *dx = to_device_bf16(x, rows * dim), *dw = to_device_bf16(w, mlp * dim);
  htp_bf16 *db = to_device_bf16(b, mlp), *dother = to_device_bf16(other, rows * dim);
  htp_bf16 *dgamma = to_device_bf16(gamma, dim), *dbeta = to_device_bf16(beta, dim);
  htp_bf16 *dy = to_device_bf16(NULL, rows * mlp);

  for (int with_bias = 1; with_bias >= 0; --with_bias) {
    CUDA_ENTRY(t, t->cuda->linear_bf16(ce, dx, dw, with_bias ? db : NULL, dy, rows, dim, mlp));
    CPU_ENTRY(t, t->cpu->linear_bf16(he, x, w, with_bias ? b : NULL, want, rows, dim, mlp));
    compare_bf16(with_bias ? "bf16 linear" : "bf16 linear no bias", dy, want, rows * mlp,
                 BF16_TOLERANCE);
  }
  CUDA_ENTRY(t, t->cuda->layer_norm_bf16(ce, dx, dgamma, dbeta, dy, rows, dim, 1e-6f));
  CPU_ENTRY(t, t->cpu->layer_norm_bf16(he, x, gamma, beta, want, rows, dim, 1e-6f));
  compare_bf16("bf16 layer_norm", dy, want, rows * dim, BF16_TOLERANCE);
  for (int tanh_approx = 0; tanh_approx < 2; ++tanh_approx) {
    CUDA_ENTRY(t, t->cuda->gelu_bf16(ce, dx, dy, rows * dim, tanh_approx));
    CPU_ENTRY(t, t->cpu->gelu_bf16(he, x, want, rows * dim, tanh_approx));
    compare_bf16(tanh_approx ? "bf16 gelu_tanh" : "bf16 gelu", dy, want, rows * dim,
                 BF16_TOLERANCE);
  }
  CUDA_ENTRY(t, t->cuda->add_bf16(ce, dx, dother, dy, rows * dim));
  CPU_ENTRY(t, t->cpu->add_bf16(he, x, other, want, rows * dim));
  compare_bf16("bf16 add", dy, want, rows * dim, 0);
  const int64_t cols = mlp < dim ? mlp : dim;
  CUDA_ENTRY(t, t->cuda->bias_add_bf16(ce, dx, db, dy, rows, cols));
  CPU_ENTRY(t, t->cpu->bias_add_bf16(he, x, b, want, rows, cols));
  compare_bf16("bf16 bias_add", dy, want, rows * cols, 0);

  htp_bf16 *wqkv = host_random_bf16(3 * inner * dim, -0.3f, 0.3f);
  htp_bf16 *bqkv = host_random_bf16(3 * inner, -0.1f, 0.1f);
  htp_bf16 *wproj = host_random_bf16(dim * inner, -0.2f, 0.2f);
  htp_bf16 *bproj = host_random_bf16(dim, -0.1f, 0.1f);
  htp_bf16 *dwqkv = to_device_bf16(wqkv, 3 * inner * dim), *dbqkv = to_device_bf16(bqkv, 3 * inner);
  htp_bf16 *dwproj = to_device_bf16(wproj, dim * inner), *dbproj = to_device_bf16(bproj, dim);
  const int64_t cuda_floats = t->cuda->attention_scratch_floats(batch, tokens, dim, heads, head_dim);
  const int64_t cpu_floats = t->cpu->attention_scratch_floats(batch, tokens, dim, heads, head_dim);
  float *dscratch = to_device(NULL, cuda_floats), *scratch = malloc(sizeof(float) * cpu_floats);
  CUDA_ENTRY(t, t->cuda->attention_bf16(ce, dx, dwqkv, dbqkv, dwproj, dbproj, dy, dscratch,
                                        cuda_floats, batch, tokens, dim, heads, head_dim));
  CPU_ENTRY(t, t->cpu->attention_bf16(he, x, wqkv, bqkv, wproj, bproj, want, scratch, cpu_floats,
                                      batch, tokens, dim, heads, head_dim));
  compare_bf16("bf16 attention", dy, want, rows * dim, BF16_ATTENTION);
  /* One float short of what the CUDA kernel needs is refused, not overrun. */
  htp_kernel_status short_scratch =
      t->cuda->attention_bf16(ce, dx, dwqkv, dbqkv, dwproj, dbproj, dy, dscratch,
                              cuda_floats - 1, batch, tokens, dim, heads, head_dim);
  printf("%-30s %s\n", "bf16 attention short scratch",
         short_scratch == HTP_KERNEL_ERR_INVALID ? "refused: ok" : "FAIL");
  failures += short_scratch != HTP_KERNEL_ERR_INVALID;

  cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dother), cudaFree(dgamma), cudaFree(dbeta);
  cudaFree(dy), cudaFree(dwqkv), cudaFree(dbqkv), cudaFree(dwproj), cudaFree(dbproj);
  cudaFree(dscratch);
  free(x), free(w), free(b), free(other), free(gamma), free(beta), free(want), free(wqkv);
  free(bqkv), free(wproj), free(bproj), free(scratch);
  return 0;
}

/* The unit kernels in bf16: outputs start from random values whose
 * untouched columns must survive (bf16 -> f32 -> bf16 is exact on the CPU
 * side, and the CUDA twin must not touch them). */
static int bf16_unit_cases(twin_tables *t, int64_t batch, int64_t tokens, int64_t dim,
                           int64_t heads, int64_t head_dim) {
  const int64_t rows = batch * tokens, inner = heads * head_dim;
  const htp_kernel_env *ce = &t->cuda_env, *he = &t->cpu_env;
  htp_bf16 *x = host_random_bf16(rows * dim, -1, 1);
  htp_bf16 *wqkv = host_random_bf16(3 * inner * dim, -0.3f, 0.3f);
  htp_bf16 *bqkv = host_random_bf16(3 * inner, -0.1f, 0.1f);
  htp_bf16 *dx = to_device_bf16(x, rows * dim), *dwqkv = to_device_bf16(wqkv, 3 * inner * dim);
  htp_bf16 *dbqkv = to_device_bf16(bqkv, 3 * inner);

  const int64_t scratch_floats = rows * 3 * head_dim + tokens * tokens;
  float *scratch = malloc(sizeof(float) * scratch_floats), *dscratch = to_device(NULL, scratch_floats);
  const int32_t head_list[] = {3, 0, 1};
  for (int with_bias = 1; with_bias >= 0; --with_bias) {
    htp_bf16 *context = host_random_bf16(rows * inner, -1, 1);
    htp_bf16 *dcontext = to_device_bf16(context, rows * inner);
    CUDA_ENTRY(t, t->cuda->attention_heads_bf16(ce, dx, dwqkv, with_bias ? dbqkv : NULL,
                                                dcontext, dscratch, batch, tokens, dim, heads,
                                                head_dim, head_list, 3));
    CPU_ENTRY(t, t->cpu->attention_heads_bf16(he, x, wqkv, with_bias ? bqkv : NULL, context,
                                              scratch, batch, tokens, dim, heads, head_dim,
                                              head_list, 3));
    compare_bf16(with_bias ? "bf16 attention_heads {3,0,1}" : "bf16 attention_heads no bias",
                 dcontext, context, rows * inner, BF16_TOLERANCE);
    cudaFree(dcontext), free(context);
  }

  /* MLP units: 9 units of 37, runs {0,1,2} {5} {7,8}; no bias; tanh. */
  const int64_t width = 37, units = 9, hidden_dim = units * width;
  htp_bf16 *w1 = host_random_bf16(hidden_dim * dim, -0.2f, 0.2f);
  htp_bf16 *b1 = host_random_bf16(hidden_dim, -0.5f, 0.5f);
  htp_bf16 *dw1 = to_device_bf16(w1, hidden_dim * dim), *db1 = to_device_bf16(b1, hidden_dim);
  const int32_t unit_list[] = {0, 1, 2, 5, 7, 8};
  for (int variant = 0; variant < 3; ++variant) {
    const int with_bias = variant != 1, tanh_approx = variant == 2;
    htp_bf16 *hidden = host_random_bf16(rows * hidden_dim, -1, 1);
    htp_bf16 *dhidden = to_device_bf16(hidden, rows * hidden_dim);
    CUDA_ENTRY(t, t->cuda->mlp_hidden_units_bf16(ce, dx, dw1, with_bias ? db1 : NULL, dhidden,
                                                 rows, dim, hidden_dim, width, unit_list, 6,
                                                 tanh_approx));
    CPU_ENTRY(t, t->cpu->mlp_hidden_units_bf16(he, x, w1, with_bias ? b1 : NULL, hidden, rows,
                                               dim, hidden_dim, width, unit_list, 6,
                                               tanh_approx));
    static const char *names[] = {"bf16 mlp_hidden_units", "bf16 mlp_hidden_units no bias",
                                  "bf16 mlp_hidden_units tanh"};
    compare_bf16(names[variant], dhidden, hidden, rows * hidden_dim, BF16_TOLERANCE);
    cudaFree(dhidden), free(hidden);
  }

  /* Row-parallel units: overwrite, accumulate (y's old values join the f32
   * sum), and the empty list both ways (zeros; y kept). */
  htp_bf16 *a = host_random_bf16(rows * hidden_dim, -1, 1);
  htp_bf16 *w2 = host_random_bf16(dim * hidden_dim, -0.2f, 0.2f);
  htp_bf16 *da = to_device_bf16(a, rows * hidden_dim), *dw2 = to_device_bf16(w2, dim * hidden_dim);
  const int32_t block_list[] = {1, 2, 3, 6, 8};
  for (int variant = 0; variant < 4; ++variant) {
    const int32_t accumulate = variant == 1 || variant == 3;
    const int64_t count = variant >= 2 ? 0 : 5;
    htp_bf16 *y = host_random_bf16(rows * dim, -3, 3);
    htp_bf16 *dy = to_device_bf16(y, rows * dim);
    CUDA_ENTRY(t, t->cuda->linear_units_bf16(ce, da, dw2, dy, rows, hidden_dim, dim, width,
                                             block_list, count, accumulate));
    CPU_ENTRY(t, t->cpu->linear_units_bf16(he, a, w2, y, rows, hidden_dim, dim, width,
                                           block_list, count, accumulate));
    static const char *names[] = {"bf16 linear_units", "bf16 linear_units accumulate",
                                  "bf16 linear_units none (zero)", "bf16 linear_units none (kept)"};
    compare_bf16(names[variant], dy, y, rows * dim, variant >= 2 ? 0 : BF16_TOLERANCE);
    cudaFree(dy), free(y);
  }

  cudaFree(dx), cudaFree(dwqkv), cudaFree(dbqkv), cudaFree(dscratch), cudaFree(dw1);
  cudaFree(db1), cudaFree(da), cudaFree(dw2);
  free(x), free(wqkv), free(bqkv), free(scratch), free(w1), free(b1), free(a), free(w2);
  return 0;
}

/* sum_f32 and sum_bf16: three parts, in place over the first, as ranks
 * that share a GPU sum their partials. The list of parts is a host array
 * of device pointers (kernels/cuda/table.c). Same order, same f32 adds:
 * equal bits. */
static int sum_cases(twin_tables *t) {
  const int64_t n = 100003;
  float *in[3], *din[3], *want = malloc(sizeof(float) * n);
  htp_bf16 *in16[3], *din16[3], *want16 = malloc(sizeof(htp_bf16) * n);
  for (int k = 0; k < 3; ++k) {
    in[k] = host_random(n, -100, 100), din[k] = to_device(in[k], n);
    in16[k] = host_random_bf16(n, -100, 100), din16[k] = to_device_bf16(in16[k], n);
  }
  CUDA_ENTRY(t, t->cuda->sum_f32(&t->cuda_env, (const float *const *)din, 3, din[0], n));
  CPU_ENTRY(t, t->cpu->sum_f32(&t->cpu_env, (const float *const *)in, 3, want, n));
  compare("table sum_f32 (in place)", din[0], want, n, 0);
  CUDA_ENTRY(t, t->cuda->sum_bf16(&t->cuda_env, (const htp_bf16 *const *)din16, 3, din16[0], n));
  CPU_ENTRY(t, t->cpu->sum_bf16(&t->cpu_env, (const htp_bf16 *const *)in16, 3, want16, n));
  compare_bf16("table sum_bf16 (in place)", din16[0], want16, n, 0);
  for (int k = 0; k < 3; ++k) cudaFree(din[k]), cudaFree(din16[k]), free(in[k]), free(in16[k]);
  free(want), free(want16);
  return 0;
}

/* The model's ends through both tables (f32): patchify and the copies
 * exactly; the sums over rows (row_sum, embed_tokens_backward's dcls and
 * dpos, accumulated onto a start value) to 1e-6 (the CPU adds row blocks
 * of 256 separately, CUDA one column in order); zero. */
static int embed_cases(twin_tables *t) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
  const int64_t B = 5, C = 3, H = 32, W = 16, P = 4, N = (H / P) * (W / P), K = C * P * P;
  const int64_t D = 37, R = 1000;
  float *images = host_random(B * C * H * W, -1, 1), *want = malloc(sizeof(float) * B * N * K);
  float *dimages = to_device(images, B * C * H * W), *dpatches = to_device(NULL, B * N * K);
  CUDA_ENTRY(t, t->cuda->patchify_f32(ce, dimages, dpatches, B, C, H, W, P));
  CPU_ENTRY(t, t->cpu->patchify_f32(pe, images, want, B, C, H, W, P));
  compare("table patchify_f32", dpatches, want, B * N * K, 0);

  float *patches = host_random(B * N * D, -1, 1), *cls = host_random(D, -1, 1);
  float *pos = host_random((N + 1) * D, -1, 1), *y = malloc(sizeof(float) * B * (N + 1) * D);
  float *dp = to_device(patches, B * N * D), *dcls = to_device(cls, D);
  float *dpos = to_device(pos, (N + 1) * D), *dy = to_device(NULL, B * (N + 1) * D);
  CUDA_ENTRY(t, t->cuda->embed_tokens_f32(ce, dp, dcls, dpos, dy, B, N, D));
  CPU_ENTRY(t, t->cpu->embed_tokens_f32(pe, patches, cls, pos, y, B, N, D));
  compare("table embed_tokens_f32", dy, y, B * (N + 1) * D, 0);
  float *pooled = malloc(sizeof(float) * B * D), *dpooled = to_device(NULL, B * D);
  CUDA_ENTRY(t, t->cuda->cls_token_f32(ce, dy, dpooled, B, N + 1, D));
  CPU_ENTRY(t, t->cpu->cls_token_f32(pe, y, pooled, B, N + 1, D));
  compare("table cls_token_f32", dpooled, pooled, B * D, 0);
  CUDA_ENTRY(t, t->cuda->cls_token_backward_f32(ce, dpooled, dy, B, N + 1, D));
  CPU_ENTRY(t, t->cpu->cls_token_backward_f32(pe, pooled, y, B, N + 1, D));
  compare("table cls_token_backward_f32", dy, y, B * (N + 1) * D, 0);

  /* embed_tokens' adjoint from a random dy; dcls and dpos start at cls
   * and pos (accumulated onto). */
  float *g = host_random(B * (N + 1) * D, -1, 1), *dg = to_device(g, B * (N + 1) * D);
  CUDA_ENTRY(t, t->cuda->embed_tokens_backward_f32(ce, dg, dp, dcls, dpos, B, N, D));
  CPU_ENTRY(t, t->cpu->embed_tokens_backward_f32(pe, g, patches, cls, pos, B, N, D));
  compare("table embed_tokens_backward dpatches", dp, patches, B * N * D, 0);
  compare("table embed_tokens_backward dcls", dcls, cls, D, 1e-6);
  compare("table embed_tokens_backward dpos", dpos, pos, (N + 1) * D, 1e-6);

  float *x = host_random(R * D, -1, 1), *sums = malloc(sizeof(float) * D);
  float *dx = to_device(x, R * D), *dsums = to_device(NULL, D);
  CUDA_ENTRY(t, t->cuda->row_sum_f32(ce, dx, dsums, R, D));
  CPU_ENTRY(t, t->cpu->row_sum_f32(pe, x, sums, R, D));
  compare("table row_sum_f32", dsums, sums, D, 1e-6);
  CUDA_ENTRY(t, t->cuda->zero(ce, dx, sizeof(float) * R * D));
  memset(x, 0, sizeof(float) * R * D);
  compare("table zero", dx, x, R * D, 0);

  cudaFree(dimages), cudaFree(dpatches), cudaFree(dp), cudaFree(dcls), cudaFree(dpos);
  cudaFree(dy), cudaFree(dpooled), cudaFree(dg), cudaFree(dx), cudaFree(dsums);
  free(images), free(want), free(patches), free(cls), free(pos), free(y), free(pooled), free(g);
  free(x), free(sums);
  return 0;
}

/* The device's memory, copies, synchronize and timing marks through the
 * CUDA table: a round trip through an add on the device, timed by marks
 * around it; refusals of a zero-byte allocation and of a mark other than
 * 0 or 1. */
static int memory_cases(twin_tables *t) {
  const htp_kernel_env *ce = &t->cuda_env;
  const int64_t n = 4099;
  float *host = host_random(n, -8, 8), *back = malloc(sizeof(float) * n);
  float *want = malloc(sizeof(float) * n);
  void *device = NULL;
  CUDA_ENTRY(t, t->cuda->alloc(ce, (size_t)n * sizeof(float), &device));
  CUDA_ENTRY(t, t->cuda->to_device(ce, device, host, (size_t)n * sizeof(float)));
  CUDA_ENTRY(t, t->cuda->mark(ce, 0, 0));
  CUDA_ENTRY(t, t->cuda->add_f32(ce, device, device, device, n));
  CUDA_ENTRY(t, t->cuda->mark(ce, 0, 1));
  /* to_host waits for the add enqueued before it. */
  CUDA_ENTRY(t, t->cuda->to_host(ce, back, device, (size_t)n * sizeof(float)));
  double seconds = -1;
  CUDA_ENTRY(t, t->cuda->elapsed(ce, 0, &seconds));
  CUDA_ENTRY(t, t->cuda->synchronize(ce));
  CUDA_ENTRY(t, t->cuda->release(ce, device));
  for (int64_t i = 0; i < n; ++i) want[i] = host[i] + host[i];
  compare_values("table alloc/to_device/to_host", back, want, n, 0);
  const int timed = seconds >= 0 && seconds < 10;
  printf("%-30s %.3g s %s\n", "table mark/elapsed", seconds, timed ? "ok" : "FAIL");
  failures += !timed;
  void *none = NULL;
  const int refused = t->cuda->alloc(ce, 0, &none) == HTP_KERNEL_ERR_INVALID &&
                      t->cuda->mark(ce, 0, 2) == HTP_KERNEL_ERR_INVALID;
  printf("%-30s %s\n", "table alloc 0 / mark 2", refused ? "refused: ok" : "FAIL");
  failures += !refused;
  free(host), free(back), free(want);
  return 0;
}

static int bf16_cases(int64_t batch, int64_t tokens, int64_t dim, int64_t heads,
                      int64_t head_dim, int64_t mlp) {
  twin_tables t;
  if (twin_tables_open(&t))
    return 1;
  /* Every entry this compares must exist in both tables (memory_cases
   * runs only the CUDA table's memory entries). */
  const htp_kernel_table *tables[] = {t.cpu, t.cuda};
  for (int i = 0; i < 2; ++i) {
    const htp_kernel_table *k = tables[i];
    if (!k->linear_bf16 || !k->layer_norm_bf16 || !k->gelu_bf16 || !k->add_bf16 ||
        !k->bias_add_bf16 || !k->attention_bf16 || !k->attention_heads_bf16 ||
        !k->mlp_hidden_units_bf16 || !k->linear_units_bf16 || !k->sum_f32 || !k->sum_bf16 ||
        !k->patchify_f32 || !k->embed_tokens_f32 || !k->cls_token_f32 || !k->row_sum_f32 ||
        !k->embed_tokens_backward_f32 || !k->cls_token_backward_f32 || !k->zero) {
      fprintf(stderr, "FAIL: the %s table lacks a bf16, sum or model-end entry\n", k->name);
      return 1;
    }
  }
  int rc = bf16_op_cases(&t, batch, tokens, dim, heads, head_dim, mlp) ||
           bf16_unit_cases(&t, batch, tokens, dim, heads, head_dim) || sum_cases(&t) ||
           memory_cases(&t) || embed_cases(&t);
  htp_cuda_kernel_env_destroy(&t.cuda_env);
  htp_cpu_kernel_env_destroy(&t.cpu_env);
  return rc;
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
    const int rc = htp_cuda_sm_count_check(0, cases[i].count, 132, cases[i].step,
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
static int add_through(const htp_kernel_env *env, const char *name) {
  const htp_kernel_table *table = htp_cuda_kernel_table();
  const int64_t n = 10007;
  float *host = host_random(n, -4, 4), *back = malloc(sizeof(float) * n);
  float *want = malloc(sizeof(float) * n);
  void *device = NULL;
  int rc = table->alloc(env, (size_t)n * sizeof(float), &device) ||
           table->to_device(env, device, host, (size_t)n * sizeof(float)) ||
           table->mark(env, 0, 0) || table->add_f32(env, device, device, device, n) ||
           table->mark(env, 0, 1) || table->to_host(env, back, device, (size_t)n * sizeof(float));
  double seconds = -1;
  if (!rc) rc = table->elapsed(env, 0, &seconds) || table->release(env, device);
  if (rc) {
    fprintf(stderr, "FAIL: %s: %s\n", name, env->error);
    failures++;
  } else {
    for (int64_t i = 0; i < n; ++i) want[i] = host[i] + host[i];
    compare_values(name, back, want, n, 0);
  }
  free(host), free(back), free(want);
  return rc;
}

static int partition_cases(void) {
  char why[512];
  htp_kernel_env env;
  /* 8 SMs: a partition on every GPU with green contexts (sm_90: steps of
   * 8; older: of 2 or 4). */
  if (htp_cuda_kernel_env_create_on(0, 8, NULL, &env, why, sizeof why) != HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: a partition of 8 SMs: %s\n", why);
    return 1;
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
    return 1;
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
  return 0;
}

int main(void) {
  int devices = 0;
  sm_count_cases();
  env_refusal_cases();
  cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    no_gpu_partition_case();
    return no_device_exit(probe != cudaSuccess ? cudaGetErrorString(probe) : "no device",
                          failures);
  }
  char err[256];
  htp_cuda_kernels *kernels = NULL;
  if (htp_cuda_kernels_create(0, &kernels, err, sizeof err)) {
    fprintf(stderr, "FAIL: %s\n", err);
    return 1;
  }
  const int64_t batch = 3, tokens = 197, dim = 120, heads = 5, head_dim = 24, mlp = 333;
  const int64_t rows = batch * tokens, inner = heads * head_dim;
  float *x = host_random(rows * dim, -1, 1), *w = host_random(mlp * dim, -0.2f, 0.2f);
  float *b = host_random(mlp, -0.1f, 0.1f), *want = malloc(sizeof(float) * rows * mlp);
  float *dx = to_device(x, rows * dim), *dw = to_device(w, mlp * dim), *db = to_device(b, mlp);
  float *dy = to_device(NULL, rows * mlp);

  CHECK_CALL(htp_cuda_linear_f32(kernels, dx, dw, db, dy, rows, dim, mlp));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_linear_f32(x, w, b, want, rows, dim, mlp);
  compare("linear", dy, want, rows * mlp, 1e-5);

  float *gamma = host_random(dim, 0.5f, 1.5f), *beta = host_random(dim, -1, 1);
  float *dgamma = to_device(gamma, dim), *dbeta = to_device(beta, dim);
  CHECK_CALL(htp_cuda_layer_norm_f32(kernels, dx, dgamma, dbeta, dy, rows, dim, 1e-6f));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_layer_norm_f32(x, gamma, beta, want, rows, dim, 1e-6f);
  compare("layer_norm", dy, want, rows * dim, 1e-5);

  for (int tanh_approx = 0; tanh_approx < 2; ++tanh_approx) {
    CHECK_CALL(htp_cuda_gelu_f32(kernels, dx, dy, rows * dim, tanh_approx));
    CHECK_CALL(htp_cuda_kernels_sync(kernels));
    htp_cpu_gelu_f32(x, want, rows * dim, tanh_approx);
    compare(tanh_approx ? "gelu_tanh" : "gelu", dy, want, rows * dim, 1e-6);
  }
  CHECK_CALL(htp_cuda_add_f32(kernels, dx, dx, dy, rows * dim));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_add_f32(x, x, want, rows * dim);
  compare("add", dy, want, rows * dim, 0);
  CHECK_CALL(htp_cuda_bias_add_f32(kernels, dx, db, dy, rows, mlp < dim ? mlp : dim));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_bias_add_f32(x, b, want, rows, mlp < dim ? mlp : dim);
  compare("bias_add", dy, want, rows * (mlp < dim ? mlp : dim), 0);

  float *wqkv = host_random(3 * inner * dim, -0.3f, 0.3f), *bqkv = host_random(3 * inner, -0.1f, 0.1f);
  float *wproj = host_random(dim * inner, -0.2f, 0.2f), *bproj = host_random(dim, -0.1f, 0.1f);
  float *cpu_scratch =
      malloc(sizeof(float) * htp_cpu_attention_scratch_floats(batch, tokens, dim, heads, head_dim));
  float *dwqkv = to_device(wqkv, 3 * inner * dim), *dbqkv = to_device(bqkv, 3 * inner);
  float *dwproj = to_device(wproj, dim * inner), *dbproj = to_device(bproj, dim);
  float *dscratch =
      to_device(NULL, htp_cuda_attention_scratch_floats(batch, tokens, dim, heads, head_dim));
  CHECK_CALL(htp_cuda_attention_f32(kernels, dx, dwqkv, dbqkv, dwproj, dbproj, dy, dscratch, batch,
                                    tokens, dim, heads, head_dim));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_attention_f32(x, wqkv, bqkv, wproj, bproj, want, cpu_scratch, batch, tokens, dim, heads,
                        head_dim);
  compare("attention", dy, want, rows * dim, 1e-4);

  if (unit_cases(kernels, x, wqkv, bqkv, batch, tokens, dim, heads, head_dim))
    return 1;
  if (gather_cases(kernels))
    return 1;
  if (bf16_cases(batch, tokens, dim, heads, head_dim, mlp))
    return 1;
  if (partition_cases())
    return 1;
  htp_cuda_kernels_destroy(kernels);
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
