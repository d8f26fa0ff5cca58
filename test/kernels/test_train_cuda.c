/*===- test/kernels/test_train_cuda.c - CUDA training entries vs the CPU's ===*
 *
 * Every training entry of the CUDA kernel table (kernels/cuda/train.cu: the
 * backward of linear, layer norm, GELU and attention, the softmax
 * cross-entropy, SGD and AdamW; kernels/cuda/embed.cu: the model's ends)
 * against the CPU table's entry of the same name on the same random data,
 * on a few odd shapes. The CPU entries are checked against finite
 * differences and closed forms by kernels.train (test_train.c), so they
 * are the independent reference here. Outputs are compared as max |got -
 * want| over max |want| (the tolerance grows with the result's size; NaN
 * fails), exactly where the entry only copies.
 *
 * The conventions are tested, not only the values:
 * - written outputs (dx, dlogits, the loss, the copies) start as NaN on
 *   both sides, so an element left unwritten or added to fails;
 * - accumulated gradients (dw, db, dgamma, ...) run twice, from zeros and
 *   from random values of the gradient's own size (the first run's
 *   result), so writing instead of adding fails by O(1);
 * - each entry runs with several subsets of its gradients NULL (not
 *   wanted), comparing the ones that are;
 * - the attention backward's shapes take both of its groupings (an image's
 *   heads batched, or a head's images) and more (image, head) pairs than
 *   its 64 slots both ways; one short of its scratch is refused;
 * - bad arguments (negative or overflowing sizes, too little scratch, a
 *   momentum without its buffer, betas out of range) are refused.
 * Before looking for a GPU (so also on the build machines): the table has
 * every training entry, the attention backward's scratch count is the CPU
 * kernel's (which the runtime's balance hooks size it by), every entry
 * fails without crashing on a NULL environment, and the comparison itself
 * rejects a 0.1% error and a NaN.
 *
 * Exits 77 (ctest: skipped) where no GPU is present, unless
 * HTP_REQUIRE_GPU=1: then a missing GPU fails, as does any CUDA error.
 *===----------------------------------------------------------------------===*/
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

static int failures = 0;

/* ----- Host data and device copies (the rest: cuda_test.h) ------------- */

/* All bytes 0xFF: a NaN in every element. */
static float *host_nan(int64_t n) {
  float *data = host_alloc(n);
  memset(data, 0xFF, (size_t)(n > 0 ? n : 1) * sizeof(float));
  return data;
}

static float *host_copy(const float *src, int64_t n) {
  float *data = host_alloc(n);
  if (n > 0) memcpy(data, src, (size_t)n * sizeof(float));
  return data;
}

static double max_abs(const float *a, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = fmax(m, fabs(a[i]));
  return m;
}

static void download(float *host, const float *device, int64_t n) {
  if (n > 0)
    cuda_or_die(cudaMemcpy(host, device, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost),
                "cudaMemcpy from the device");
}

/* ----- Comparison --------------------------------------------------------- */

/* One case's comparisons: its worst error, and whether any failed. */
typedef struct verdict {
  double worst;
  char worst_name[48];
  int compared, failed;
} verdict;

static void check_host(verdict *v, const char *what, const float *got, const float *want,
                       int64_t n, double tolerance) {
  const double error = relative_error(got, want, n);
  const int ok = error <= tolerance;
  if (!ok) printf("    FAIL %s: relative error %.3g > %.3g\n", what, error, tolerance);
  if (v->compared == 0 || !(error <= v->worst)) {
    v->worst = error;
    snprintf(v->worst_name, sizeof v->worst_name, "%s", what);
  }
  v->compared += 1;
  v->failed |= !ok;
}

static void check(verdict *v, const char *what, const float *device, const float *want,
                  int64_t n, double tolerance) {
  float *got = host_alloc(n);
  download(got, device, n);
  check_host(v, what, got, want, n, tolerance);
  free(got);
}

static void report(const char *name, const verdict *v) {
  printf("%-58s %3d outputs, worst %.3g (%s) %s\n", name, v->compared, v->worst, v->worst_name,
         v->failed ? "FAIL" : "ok");
  failures += v->failed;
}

/* ----- Outputs: written or accumulated, wanted or NULL -------------------- */

/* One output of an entry. A written one starts as NaN on both sides; an
 * accumulated one starts as zeros (pass 0) or as the same random values of
 * `scale`, the size of pass 0's result (pass 1). Not wanted: both NULL. */
typedef struct output {
  const char *name;
  int64_t n;
  int accumulated;
  float scale;
  float *host, *device;
} output;

#define OUTPUT(name, n, accumulated) {name, n, accumulated, 1.0f, NULL, NULL}

static void outputs_begin(output *o, int count, unsigned wanted, int pass) {
  for (int i = 0; i < count; ++i) {
    o[i].host = o[i].device = NULL;
    if (!(wanted & (1u << i))) continue;
    if (!o[i].accumulated)
      o[i].host = host_nan(o[i].n);
    else if (pass == 0)
      o[i].host = host_random(o[i].n, 0.0f, 0.0f);
    else
      o[i].host = host_random(o[i].n, -o[i].scale, o[i].scale);
    o[i].device = to_device(o[i].host, o[i].n);
  }
}

/* Compares the wanted outputs (after both entries ran), keeps pass 0's
 * sizes for pass 1, frees. */
static void outputs_end(verdict *v, output *o, int count, int pass, double tolerance) {
  for (int i = 0; i < count; ++i) {
    if (!o[i].host) continue;
    char what[48];
    snprintf(what, sizeof what, "%s%s", o[i].name, o[i].accumulated && pass ? " (+=)" : "");
    check(v, what, o[i].device, o[i].host, o[i].n, tolerance);
    if (pass == 0 && o[i].accumulated) {
      const double m = max_abs(o[i].host, o[i].n);
      o[i].scale = m > 0.0 ? (float)m : 1.0f;
    }
    free(o[i].host);
    cudaFree(o[i].device);
    o[i].host = o[i].device = NULL;
  }
}

#define H(i) (out[i].host)
#define D(i) (out[i].device)

/* ----- linear_backward ---------------------------------------------------- */

static int linear_case(twin_tables *t, int64_t rows, int64_t in, int64_t out_features) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
  float *x = host_random(rows * in, -1, 1), *w = host_random(out_features * in, -0.5f, 0.5f);
  float *dy = host_random(rows * out_features, -1, 1);
  float *x_d = to_device(x, rows * in), *w_d = to_device(w, out_features * in);
  float *dy_d = to_device(dy, rows * out_features);
  output out[] = {OUTPUT("dx", rows * in, 0), OUTPUT("dw", out_features * in, 1),
                  OUTPUT("db", out_features, 1)};
  static const unsigned masks[] = {7, 1, 2, 4, 6};
  verdict v = {0};
  for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m)
    for (int pass = 0; pass < 2; ++pass) {
      outputs_begin(out, 3, masks[m], pass);
      CPU_ENTRY(t, t->cpu->linear_backward_f32(pe, x, w, dy, H(0), H(1), H(2), rows, in,
                                               out_features));
      CUDA_ENTRY(t, t->cuda->linear_backward_f32(ce, x_d, w_d, dy_d, D(0), D(1), D(2), rows, in,
                                                 out_features));
      outputs_end(&v, out, 3, pass, 1e-5);
    }
  char name[80];
  snprintf(name, sizeof name, "linear_backward rows %lld in %lld out %lld", (long long)rows,
           (long long)in, (long long)out_features);
  report(name, &v);
  cudaFree(x_d), cudaFree(w_d), cudaFree(dy_d), free(x), free(w), free(dy);
  return 0;
}

/* ----- layer_norm_backward ------------------------------------------------ */

static int layer_norm_case(twin_tables *t, int64_t rows, int64_t dim) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
  const float epsilon = 1e-5f;
  /* Rows off centre (the statistics must centre them) with their own spread. */
  float *x = host_random(rows * dim, -1, 1), *gamma = host_random(dim, 0.5f, 1.5f);
  for (int64_t r = 0; r < rows; ++r) {
    const float shift = uniform(-3, 3), spread = uniform(0.2f, 2.0f);
    for (int64_t i = 0; i < dim; ++i) x[r * dim + i] = shift + spread * x[r * dim + i];
  }
  float *dy = host_random(rows * dim, -1, 1);
  float *x_d = to_device(x, rows * dim), *gamma_d = to_device(gamma, dim);
  float *dy_d = to_device(dy, rows * dim);
  output out[] = {OUTPUT("dx", rows * dim, 0), OUTPUT("dgamma", dim, 1),
                  OUTPUT("dbeta", dim, 1)};
  static const unsigned masks[] = {7, 1, 6, 4, 2};
  verdict v = {0};
  for (int with_gamma = 1; with_gamma >= 0; --with_gamma)
    for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m)
      for (int pass = 0; pass < 2; ++pass) {
        outputs_begin(out, 3, masks[m], pass);
        CPU_ENTRY(t, t->cpu->layer_norm_backward_f32(pe, x, with_gamma ? gamma : NULL, dy, H(0),
                                                     H(1), H(2), rows, dim, epsilon));
        CUDA_ENTRY(t, t->cuda->layer_norm_backward_f32(ce, x_d, with_gamma ? gamma_d : NULL,
                                                       dy_d, D(0), D(1), D(2), rows, dim,
                                                       epsilon));
        outputs_end(&v, out, 3, pass, 1e-5);
      }
  char name[80];
  snprintf(name, sizeof name, "layer_norm_backward rows %lld dim %lld (gamma, none)",
           (long long)rows, (long long)dim);
  report(name, &v);
  cudaFree(x_d), cudaFree(gamma_d), cudaFree(dy_d), free(x), free(gamma), free(dy);
  return 0;
}

/* ----- gelu_backward ------------------------------------------------------ */

static int gelu_case(twin_tables *t, int64_t n) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
  float *x = host_random(n, -6, 6), *dy = host_random(n, -1, 1);
  float *x_d = to_device(x, n), *dy_d = to_device(dy, n);
  verdict v = {0};
  for (int tanh_approx = 0; tanh_approx < 2; ++tanh_approx) {
    const char *form = tanh_approx ? "tanh" : "erf";
    char what[48];
    /* Out of place into NaN. */
    float *want = host_nan(n), *got_d = to_device(want, n);
    CPU_ENTRY(t, t->cpu->gelu_backward_f32(pe, x, dy, want, n, tanh_approx));
    CUDA_ENTRY(t, t->cuda->gelu_backward_f32(ce, x_d, dy_d, got_d, n, tanh_approx));
    snprintf(what, sizeof what, "dx %s", form);
    check(&v, what, got_d, want, n, 2e-6);
    /* In place: dx = dy. */
    float *inplace = host_copy(dy, n), *inplace_d = to_device(dy, n);
    CPU_ENTRY(t, t->cpu->gelu_backward_f32(pe, x, inplace, inplace, n, tanh_approx));
    CUDA_ENTRY(t, t->cuda->gelu_backward_f32(ce, x_d, inplace_d, inplace_d, n, tanh_approx));
    snprintf(what, sizeof what, "dx = dy %s", form);
    check(&v, what, inplace_d, inplace, n, 2e-6);
    /* dx NULL: nothing wanted, nothing done. */
    CUDA_ENTRY(t, t->cuda->gelu_backward_f32(ce, x_d, dy_d, NULL, n, tanh_approx));
    free(want), free(inplace), cudaFree(got_d), cudaFree(inplace_d);
  }
  char name[80];
  snprintf(name, sizeof name, "gelu_backward n %lld (erf, tanh; dx = dy)", (long long)n);
  report(name, &v);
  cudaFree(x_d), cudaFree(dy_d), free(x), free(dy);
  return 0;
}

/* ----- attention_backward ------------------------------------------------- */

static int attention_case(twin_tables *t, int64_t batch, int64_t tokens, int64_t dim, int64_t heads,
                          int64_t head_dim, int with_bias) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
  const int64_t rows = batch * tokens, inner = heads * head_dim, wide = 3 * inner;
  float *x = host_random(rows * dim, -1, 1), *wqkv = host_random(wide * dim, -0.5f, 0.5f);
  float *bqkv = host_random(wide, -0.2f, 0.2f), *wproj = host_random(dim * inner, -0.4f, 0.4f);
  float *bproj = host_random(dim, -0.2f, 0.2f), *dy = host_random(rows * dim, -1, 1);
  float *x_d = to_device(x, rows * dim), *wqkv_d = to_device(wqkv, wide * dim);
  float *bqkv_d = to_device(bqkv, wide), *wproj_d = to_device(wproj, dim * inner);
  float *bproj_d = to_device(bproj, dim), *dy_d = to_device(dy, rows * dim);
  const int64_t cpu_floats = t->cpu->attention_backward_scratch_floats(batch, tokens, dim, heads,
                                                                       head_dim);
  const int64_t cuda_floats = t->cuda->attention_backward_scratch_floats(batch, tokens, dim,
                                                                         heads, head_dim);
  float *scratch = host_alloc(cpu_floats), *scratch_d = to_device(NULL, cuda_floats);
  output out[] = {OUTPUT("dx", rows * dim, 0), OUTPUT("dwqkv", wide * dim, 1),
                  OUTPUT("dbqkv", wide, 1), OUTPUT("dwproj", dim * inner, 1),
                  OUTPUT("dbproj", dim, 1)};
  /* All; dx only; the projection's only (no dqkv pass); qkv's only; no dbproj. */
  static const unsigned masks[] = {31, 1, 24, 6, 15};
  verdict v = {0};
  for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m)
    for (int pass = 0; pass < 2; ++pass) {
      outputs_begin(out, 5, masks[m], pass);
      CPU_ENTRY(t, t->cpu->attention_backward_f32(pe, x, wqkv, with_bias ? bqkv : NULL, wproj,
                                                  bproj, dy, H(0), H(1), H(2), H(3), H(4),
                                                  scratch, cpu_floats, batch, tokens, dim,
                                                  heads, head_dim));
      CUDA_ENTRY(t, t->cuda->attention_backward_f32(
                        ce, x_d, wqkv_d, with_bias ? bqkv_d : NULL, wproj_d, bproj_d, dy_d, D(0),
                        D(1), D(2), D(3), D(4), scratch_d, cuda_floats, batch, tokens, dim,
                        heads, head_dim));
      outputs_end(&v, out, 5, pass, 1e-4);
    }
  /* One float short of the CUDA kernel's count: refused, nothing run. */
  float *dx_d = to_device(NULL, rows * dim);
  const htp_kernel_status short_scratch = t->cuda->attention_backward_f32(
      ce, x_d, wqkv_d, bqkv_d, wproj_d, bproj_d, dy_d, dx_d, NULL, NULL, NULL, NULL, scratch_d,
      cuda_floats - 1, batch, tokens, dim, heads, head_dim);
  if (short_scratch != HTP_KERNEL_ERR_INVALID || !strstr(t->cuda_error, "scratch")) {
    printf("    FAIL scratch %lld (one short) not refused: %d, \"%s\"\n",
           (long long)(cuda_floats - 1), (int)short_scratch, t->cuda_error);
    v.failed = 1;
  }
  char name[96];
  snprintf(name, sizeof name, "attention_backward B %lld T %lld D %lld H %lld hd %lld%s",
           (long long)batch, (long long)tokens, (long long)dim, (long long)heads,
           (long long)head_dim, with_bias ? "" : " no bqkv");
  report(name, &v);
  cudaFree(x_d), cudaFree(wqkv_d), cudaFree(bqkv_d), cudaFree(wproj_d), cudaFree(bproj_d);
  cudaFree(dy_d), cudaFree(scratch_d), cudaFree(dx_d);
  free(x), free(wqkv), free(bqkv), free(wproj), free(bproj), free(dy), free(scratch);
  return 0;
}

/* ----- softmax_cross_entropy ---------------------------------------------- */

/* kind 0: one-hot rows; 1: probability rows; 2: rows summing to 0.5..2
 * with large logits (the stable forms matter). */
static int cross_entropy_case(twin_tables *t, int64_t rows, int64_t classes, int kind) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
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
  float *logits_d = to_device(logits, rows * classes);
  float *targets_d = to_device(targets, rows * classes);
  output out[] = {OUTPUT("loss", 1, 0), OUTPUT("dlogits", rows * classes, 0)};
  static const unsigned masks[] = {3, 1, 2};
  verdict v = {0};
  for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m) {
    outputs_begin(out, 2, masks[m], 0);
    CPU_ENTRY(t, t->cpu->softmax_cross_entropy_f32(pe, logits, targets, H(0), H(1), rows,
                                                   classes));
    CUDA_ENTRY(t, t->cuda->softmax_cross_entropy_f32(ce, logits_d, targets_d, D(0), D(1), rows,
                                                     classes));
    outputs_end(&v, out, 2, 0, 1e-5);
  }
  char name[80];
  static const char *kinds[] = {"one-hot", "soft", "unnormalised, |logit| <= 60"};
  snprintf(name, sizeof name, "softmax_cross_entropy rows %lld classes %lld %s",
           (long long)rows, (long long)classes, kinds[kind]);
  report(name, &v);
  cudaFree(logits_d), cudaFree(targets_d), free(logits), free(targets);
  return 0;
}

/* ----- Optimizers --------------------------------------------------------- */

/* Three steps from the same state on both sides (m NaN before step 1: it
 * must be set, not read), then a compare of w and m. Variants: momentum
 * with decay; no momentum and no buffer; no momentum with a buffer. */
static int sgd_case(twin_tables *t, int64_t n) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
  static const struct {
    float momentum, weight_decay;
    int buffer;
    const char *name;
  } variants[] = {{0.9f, 1e-2f, 1, "momentum 0.9, decay"},
                  {0.0f, 0.0f, 0, "no momentum, no buffer"},
                  {0.0f, 5e-3f, 1, "no momentum, a buffer"}};
  verdict v = {0};
  for (size_t k = 0; k < sizeof variants / sizeof *variants; ++k) {
    float *w = host_random(n, -1, 1), *m = host_nan(n);
    float *w_d = to_device(w, n), *m_d = to_device(m, n);
    float *buffer = variants[k].buffer ? m : NULL, *buffer_d = variants[k].buffer ? m_d : NULL;
    for (int64_t step = 1; step <= 3; ++step) {
      float *g = host_random(n, -1, 1), *g_d = to_device(g, n);
      CPU_ENTRY(t, t->cpu->sgd_momentum_f32(pe, w, g, buffer, n, 0.05f, variants[k].momentum,
                                            variants[k].weight_decay, step));
      CUDA_ENTRY(t, t->cuda->sgd_momentum_f32(ce, w_d, g_d, buffer_d, n, 0.05f,
                                              variants[k].momentum, variants[k].weight_decay,
                                              step));
      free(g), cudaFree(g_d);
    }
    char what[48];
    snprintf(what, sizeof what, "w, %s", variants[k].name);
    check(&v, what, w_d, w, n, 1e-6);
    if (buffer) {
      snprintf(what, sizeof what, "m, %s", variants[k].name);
      check(&v, what, m_d, m, n, 1e-6);
    }
    free(w), free(m), cudaFree(w_d), cudaFree(m_d);
  }
  char name[64];
  snprintf(name, sizeof name, "sgd_momentum n %lld, 3 steps", (long long)n);
  report(name, &v);
  return 0;
}

/* Steps 1, 2, 3 and then 10 (bias corrections), with decoupled decay. */
static int adamw_case(twin_tables *t, int64_t n) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
  float *w = host_random(n, -1, 1), *m = host_random(n, 0, 0), *v = host_random(n, 0, 0);
  float *w_d = to_device(w, n), *m_d = to_device(m, n), *v_d = to_device(v, n);
  static const int64_t steps[] = {1, 2, 3, 10};
  for (size_t s = 0; s < sizeof steps / sizeof *steps; ++s) {
    float *g = host_random(n, -1, 1), *g_d = to_device(g, n);
    CPU_ENTRY(t, t->cpu->adamw_f32(pe, w, g, m, v, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f,
                                   steps[s]));
    CUDA_ENTRY(t, t->cuda->adamw_f32(ce, w_d, g_d, m_d, v_d, n, 1e-2f, 0.9f, 0.999f, 1e-8f,
                                     0.05f, steps[s]));
    free(g), cudaFree(g_d);
  }
  verdict verdict_ = {0};
  check(&verdict_, "w", w_d, w, n, 1e-6);
  check(&verdict_, "m", m_d, m, n, 1e-6);
  check(&verdict_, "v", v_d, v, n, 1e-6);
  char name[64];
  snprintf(name, sizeof name, "adamw n %lld, steps 1 2 3 10", (long long)n);
  report(name, &verdict_);
  free(w), free(m), free(v), cudaFree(w_d), cudaFree(m_d), cudaFree(v_d);
  return 0;
}

/* ----- The model's ends --------------------------------------------------- */

static int ends_case(twin_tables *t, int64_t batch, int64_t channels, int64_t height, int64_t width,
                     int64_t patch, int64_t dim) {
  const htp_kernel_env *ce = &t->cuda_env, *pe = &t->cpu_env;
  const int64_t n = (height / patch) * (width / patch), features = channels * patch * patch;
  const int64_t tokens = n + 1;
  verdict v = {0};

  /* patchify: a copy, exact; into NaN. */
  float *images = host_random(batch * channels * height * width, -1, 1);
  float *images_d = to_device(images, batch * channels * height * width);
  float *patches = host_nan(batch * n * features), *patches_d = to_device(patches, batch * n * features);
  CPU_ENTRY(t, t->cpu->patchify_f32(pe, images, patches, batch, channels, height, width, patch));
  CUDA_ENTRY(t, t->cuda->patchify_f32(ce, images_d, patches_d, batch, channels, height, width,
                                      patch));
  check(&v, "patchify", patches_d, patches, batch * n * features, 0);

  /* embed_tokens, cls_token and its adjoint: exact. */
  float *tok = host_random(batch * n * dim, -1, 1), *cls = host_random(dim, -1, 1);
  float *pos = host_random(tokens * dim, -1, 1);
  float *tok_d = to_device(tok, batch * n * dim), *cls_d = to_device(cls, dim);
  float *pos_d = to_device(pos, tokens * dim);
  float *y = host_nan(batch * tokens * dim), *y_d = to_device(y, batch * tokens * dim);
  CPU_ENTRY(t, t->cpu->embed_tokens_f32(pe, tok, cls, pos, y, batch, n, dim));
  CUDA_ENTRY(t, t->cuda->embed_tokens_f32(ce, tok_d, cls_d, pos_d, y_d, batch, n, dim));
  check(&v, "embed_tokens", y_d, y, batch * tokens * dim, 0);
  float *pooled = host_nan(batch * dim), *pooled_d = to_device(pooled, batch * dim);
  CPU_ENTRY(t, t->cpu->cls_token_f32(pe, y, pooled, batch, tokens, dim));
  CUDA_ENTRY(t, t->cuda->cls_token_f32(ce, y_d, pooled_d, batch, tokens, dim));
  check(&v, "cls_token", pooled_d, pooled, batch * dim, 0);
  float *back = host_nan(batch * tokens * dim), *back_d = to_device(back, batch * tokens * dim);
  CPU_ENTRY(t, t->cpu->cls_token_backward_f32(pe, pooled, back, batch, tokens, dim));
  CUDA_ENTRY(t, t->cuda->cls_token_backward_f32(ce, pooled_d, back_d, batch, tokens, dim));
  check(&v, "cls_token_backward (written whole)", back_d, back, batch * tokens * dim, 0);

  /* embed_tokens' adjoint: dpatches written, dcls and dpos accumulated,
   * each NULL in some runs. */
  float *dy = host_random(batch * tokens * dim, -1, 1), *dy_d = to_device(dy, batch * tokens * dim);
  output out[] = {OUTPUT("dpatches", batch * n * dim, 0), OUTPUT("dcls", dim, 1),
                  OUTPUT("dpos", tokens * dim, 1)};
  static const unsigned masks[] = {7, 6, 1, 2, 4};
  for (size_t m = 0; m < sizeof masks / sizeof *masks; ++m)
    for (int pass = 0; pass < 2; ++pass) {
      outputs_begin(out, 3, masks[m], pass);
      CPU_ENTRY(t, t->cpu->embed_tokens_backward_f32(pe, dy, H(0), H(1), H(2), batch, n, dim));
      CUDA_ENTRY(t, t->cuda->embed_tokens_backward_f32(ce, dy_d, D(0), D(1), D(2), batch, n,
                                                       dim));
      outputs_end(&v, out, 3, pass, 1e-6);
    }

  /* row_sum over the embedded tokens as rows (past the CPU's 256-row
   * blocks when batch * tokens is), written; and over no rows: zeros. */
  const int64_t rows = batch * tokens;
  float *sums = host_nan(dim), *sums_d = to_device(sums, dim);
  CPU_ENTRY(t, t->cpu->row_sum_f32(pe, dy, sums, rows, dim));
  CUDA_ENTRY(t, t->cuda->row_sum_f32(ce, dy_d, sums_d, rows, dim));
  check(&v, "row_sum", sums_d, sums, dim, 1e-6);
  float *none = host_nan(dim), *none_d = to_device(none, dim);
  CPU_ENTRY(t, t->cpu->row_sum_f32(pe, dy, none, 0, dim));
  CUDA_ENTRY(t, t->cuda->row_sum_f32(ce, dy_d, none_d, 0, dim));
  check(&v, "row_sum of no rows", none_d, none, dim, 0);

  char name[96];
  snprintf(name, sizeof name, "model ends B %lld C %lld %lldx%lld P %lld D %lld",
           (long long)batch, (long long)channels, (long long)height, (long long)width,
           (long long)patch, (long long)dim);
  report(name, &v);
  cudaFree(images_d), cudaFree(patches_d), cudaFree(tok_d), cudaFree(cls_d), cudaFree(pos_d);
  cudaFree(y_d), cudaFree(pooled_d), cudaFree(back_d), cudaFree(dy_d), cudaFree(sums_d);
  cudaFree(none_d);
  free(images), free(patches), free(tok), free(cls), free(pos), free(y), free(pooled);
  free(back), free(dy), free(sums), free(none);
  return 0;
}

/* ----- Refusals (with a device: an environment without one fails first) --- */

static int refusal_cases(twin_tables *t) {
  const htp_kernel_env *ce = &t->cuda_env;
  const htp_kernel_table *k = t->cuda;
  float *buffer = to_device(NULL, 64);
  float *b = buffer;
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
      {"softmax_cross_entropy rows 0",
       k->softmax_cross_entropy_f32(ce, b, b, b, b, 0, 3)},
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
  verdict v = {0};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    const int ok = cases[i].status == HTP_KERNEL_ERR_INVALID;
    if (!ok) printf("    FAIL %s: status %d, not refused\n", cases[i].what, (int)cases[i].status);
    v.failed |= !ok;
    v.compared += 1;
  }
  /* The model's ends are twins of htp_kernels_cuda.h (any failure is the
   * table's ERR_SYSTEM): refused, whatever the code. */
  const int ends_refused =
      k->patchify_f32(ce, b, b, 1, 1, 5, 4, 2) != HTP_KERNEL_OK &&
      k->embed_tokens_f32(ce, b, b, b, b, huge, huge, 2) != HTP_KERNEL_OK &&
      k->cls_token_backward_f32(ce, b, b, huge, huge, 2) != HTP_KERNEL_OK &&
      k->row_sum_f32(ce, b, b, huge, 4) != HTP_KERNEL_OK;
  if (!ends_refused) printf("    FAIL a model-end entry ran with bad sizes\n");
  v.failed |= !ends_refused;
  v.compared += 1;
  /* Nothing above may have left an error on the stream. */
  if (k->synchronize(ce) != HTP_KERNEL_OK) {
    printf("    FAIL the stream after the refusals: %s\n", t->cuda_error);
    v.failed = 1;
  }
  snprintf(v.worst_name, sizeof v.worst_name, "refused");
  report("refusals of bad arguments", &v);
  cudaFree(buffer);
  return 0;
}

/* ----- What needs no GPU -------------------------------------------------- */

static void no_device_cases(void) {
  const htp_kernel_table *k = htp_cuda_kernel_table();
  verdict v = {0};
  const int complete = k->linear_backward_f32 && k->layer_norm_backward_f32 &&
                       k->gelu_backward_f32 && k->attention_backward_f32 &&
                       k->attention_backward_scratch_floats && k->softmax_cross_entropy_f32 &&
                       k->sgd_momentum_f32 && k->adamw_f32 && k->patchify_f32 &&
                       k->embed_tokens_f32 && k->cls_token_f32 && k->row_sum_f32 &&
                       k->embed_tokens_backward_f32 && k->cls_token_backward_f32 && k->zero;
  if (!complete) {
    printf("    FAIL the CUDA table lacks a training entry\n");
    v.failed = 1;
    report("CUDA table has every training entry", &v);
    return;
  }
  v.compared += 1;
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
      v.failed = 1;
    }
    v.compared += 1;
  }
  if (k->attention_backward_scratch_floats(INT64_MAX / 4, 4, 8, 2, 2) >= 0 ||
      k->attention_backward_scratch_floats(1, 4, 8, -1, 2) >= 0) {
    printf("    FAIL an overflowing or negative shape's scratch is not < 0\n");
    v.failed = 1;
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
  for (size_t i = 0; i < sizeof statuses / sizeof *statuses; ++i) {
    if (statuses[i] != HTP_KERNEL_ERR_SYSTEM) {
      printf("    FAIL entry %zu on a NULL environment: status %d\n", i, (int)statuses[i]);
      v.failed = 1;
    }
    v.compared += 1;
  }
  /* The comparison can fail: a 0.1% error at 1e-4 and a NaN are caught. */
  float want[4] = {1.0f, -2.0f, 0.5f, 4.0f}, off[4], nan_one[4];
  memcpy(off, want, sizeof want);
  memcpy(nan_one, want, sizeof want);
  off[2] += 4e-3f;
  memset(&nan_one[1], 0xFF, sizeof(float));
  if (!(relative_error(want, want, 4) == 0.0) || !(relative_error(off, want, 4) > 1e-4) ||
      !(relative_error(nan_one, want, 4) > 1.0)) {
    printf("    FAIL the comparison does not reject a 0.1%% error or a NaN\n");
    v.failed = 1;
  }
  v.compared += 1;
  snprintf(v.worst_name, sizeof v.worst_name, "no GPU needed");
  report("CUDA table's training entries without a device", &v);
}

int main(void) {
  no_device_cases();
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0)
    return no_device_exit(probe != cudaSuccess ? cudaGetErrorString(probe) : "no device",
                          failures);

  twin_tables t;
  if (twin_tables_open(&t))
    return 1;
  int rc =
      /* linear: odd sizes, one-wide ends, and out 0 (dx zeroed, not left). */
      linear_case(&t, 37, 19, 23) || linear_case(&t, 5, 1, 7) || linear_case(&t, 1, 33, 1) ||
      linear_case(&t, 301, 67, 129) || linear_case(&t, 6, 5, 0) ||
      /* layer norm: dims under, at and past one block's threads. */
      layer_norm_case(&t, 5, 3) || layer_norm_case(&t, 33, 47) ||
      layer_norm_case(&t, 7, 300) || layer_norm_case(&t, 300, 129) ||
      gelu_case(&t, 1001) || gelu_case(&t, 70001) ||
      /* attention: an image's heads batched (B < H, and 70 heads past the
       * 64 slots), a head's images batched (B > H, and 70 images past the
       * slots), no qkv bias, one token. */
      attention_case(&t, 2, 7, 12, 3, 4, 1) || attention_case(&t, 5, 9, 8, 2, 4, 1) ||
      attention_case(&t, 70, 3, 6, 1, 5, 1) || attention_case(&t, 1, 5, 9, 70, 1, 1) ||
      attention_case(&t, 3, 17, 20, 5, 6, 0) || attention_case(&t, 4, 1, 5, 2, 3, 1) ||
      attention_case(&t, 2, 50, 48, 3, 16, 1) ||
      cross_entropy_case(&t, 13, 10, 0) || cross_entropy_case(&t, 1, 1, 0) ||
      cross_entropy_case(&t, 257, 1000, 1) || cross_entropy_case(&t, 64, 37, 2) ||
      sgd_case(&t, 1001) || adamw_case(&t, 4099) ||
      ends_case(&t, 2, 1, 6, 9, 3, 7) || ends_case(&t, 70, 3, 8, 8, 4, 5) ||
      refusal_cases(&t);
  htp_cuda_kernel_env_destroy(&t.cuda_env);
  htp_cpu_kernel_env_destroy(&t.cpu_env);
  if (rc) return 1;
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
