/*===- bench/onednn_postops.c - Linear epilogues: fused post-ops or passes -===*
 *
 * Issue 25, item 1 asks for bias, GELU and the residual add as oneDNN matmul
 * post-ops "where that is faster". This measures it at ViT-B/16's MLP
 * shapes (rows = batch * 197, fc1 768 -> 3072, fc2 3072 -> 768), f32 and
 * bf16, on the kernels' own pool as kernels/cpu runs its linears (rows split
 * into two parts per thread, multiples of 16, each part a single-threaded
 * primitive with the caller's scratchpad: cpu/onednn.c):
 *
 *   fc1  unfused: the table's linear (f32: bias broadcast + dnnl_sgemm
 *                 parts; bf16: oneDNN matmul parts with bias) then its GELU
 *        fused:   matmul parts with bias and an eltwise_gelu_erf post-op
 *   fc2  unfused: the table's linear then its add (y = residual + y)
 *        fused:   matmul parts with bias and a binary_add post-op (the
 *                 residual as src1), or a sum post-op onto y holding the
 *                 residual already (the in-place best case)
 *
 * plus the matmul primitive with bias alone (in f32: is the primitive
 * itself as fast as dnnl_sgemm?), each epilogue pass alone, and the
 * table's fused entry (linear_gelu_bf16, which this measurement led to).
 * Variants alternate within each round; each prints its median over every
 * call of every round and the median of the per-round ratios to the
 * unfused one.
 * It also checks the numbers: oneDNN's GELU per element over [-12, 12]
 * against double (the project's GELU holds 1e-6 relative), and each
 * fc1 variant's first rows against a float64 reference.
 *
 *   htp-bench-postops [--batch 8] [--iters 10] [--rounds 7] [--threads N]
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "kernels/cpu/cpu_internal.h"
#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <oneapi/dnnl/dnnl.h>
#include "bench_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what) {
  fprintf(stderr, "htp-bench-postops: %s\n", what);
  exit(1);
}

static void *allocate(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) die("out of memory");
  return p;
}

/* Values like a block's: activations in [-2, 2], weights ~ 1/sqrt(in). */
static float *filled(int64_t n, float scale, unsigned seed) {
  float *data = allocate((size_t)n * sizeof(float));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = scale * ((float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
  }
  return data;
}

static htp_bf16 *rounded(const float *x, int64_t n) {
  htp_bf16 *y = allocate((size_t)n * sizeof(htp_bf16));
  for (int64_t i = 0; i < n; ++i) y[i] = htp_bf16_from_f32(x[i]);
  return y;
}

/* ===== Matmul parts with post-ops (the fused variants) =================== */

enum epilogue { EPILOGUE_NONE, EPILOGUE_GELU, EPILOGUE_BINARY_ADD, EPILOGUE_SUM };

typedef struct part_key {
  int64_t rows, k, n, bf16, epilogue;
} part_key;

typedef struct part_primitive {
  part_key key;
  dnnl_primitive_t primitive;
  dnnl_memory_desc_t src, weights, bias, dst, residual, scratchpad;
} part_primitive;

static struct {
  dnnl_engine_t engine;
  part_primitive entries[64];
  int count;
  const char *impl[8]; /* the first few implementations made, for the report */
} parts;

#define CHECK_DNNL(call) \
  do { \
    if ((call) != dnnl_success) die(#call); \
  } while (0)

/* Made on first use by whichever pool thread runs that part shape first. */
static pthread_mutex_t parts_lock = PTHREAD_MUTEX_INITIALIZER;

static const part_primitive *part_for(part_key key) {
  pthread_mutex_lock(&parts_lock);
  for (int i = 0; i < parts.count; ++i)
    if (memcmp(&parts.entries[i].key, &key, sizeof key) == 0) {
      pthread_mutex_unlock(&parts_lock);
      return &parts.entries[i];
    }
  if (parts.count == 64) die("too many primitives");
  if (!parts.engine) CHECK_DNNL(dnnl_engine_create(&parts.engine, dnnl_cpu, 0));
  part_primitive *e = &parts.entries[parts.count];
  e->key = key;
  const dnnl_data_type_t type = key.bf16 ? dnnl_bf16 : dnnl_f32;
  const dnnl_dims_t src_dims = {key.rows, key.k}, src_strides = {key.k, 1};
  const dnnl_dims_t weight_dims = {key.k, key.n}, weight_strides = {1, key.k};
  const dnnl_dims_t bias_dims = {1, key.n}, bias_strides = {key.n, 1};
  const dnnl_dims_t dst_dims = {key.rows, key.n}, dst_strides = {key.n, 1};
  CHECK_DNNL(dnnl_memory_desc_init_by_strides(&e->src, 2, src_dims, type, src_strides));
  CHECK_DNNL(dnnl_memory_desc_init_by_strides(&e->weights, 2, weight_dims, type, weight_strides));
  CHECK_DNNL(dnnl_memory_desc_init_by_strides(&e->bias, 2, bias_dims, type, bias_strides));
  CHECK_DNNL(dnnl_memory_desc_init_by_strides(&e->dst, 2, dst_dims, type, dst_strides));
  e->residual = e->dst;
  dnnl_matmul_desc_t desc;
  CHECK_DNNL(dnnl_matmul_desc_init(&desc, &e->src, &e->weights, &e->bias, &e->dst));
  dnnl_primitive_attr_t attr;
  dnnl_post_ops_t ops;
  CHECK_DNNL(dnnl_primitive_attr_create(&attr));
  CHECK_DNNL(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  CHECK_DNNL(dnnl_post_ops_create(&ops));
  if (key.epilogue == EPILOGUE_GELU)
    CHECK_DNNL(dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_gelu_erf, 0.0f, 0.0f));
  else if (key.epilogue == EPILOGUE_BINARY_ADD)
    CHECK_DNNL(dnnl_post_ops_append_binary(ops, dnnl_binary_add, &e->residual));
  else if (key.epilogue == EPILOGUE_SUM)
    CHECK_DNNL(dnnl_post_ops_append_sum(ops, 1.0f));
  CHECK_DNNL(dnnl_primitive_attr_set_post_ops(attr, ops));
  dnnl_primitive_desc_t pd;
  CHECK_DNNL(dnnl_primitive_desc_create(&pd, &desc, attr, parts.engine, NULL));
  e->scratchpad = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  const char *impl = "?";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  if (parts.count < 8) parts.impl[parts.count] = strdup(impl);
  CHECK_DNNL(dnnl_primitive_create(&e->primitive, pd));
  dnnl_primitive_desc_destroy(pd);
  dnnl_post_ops_destroy(ops);
  dnnl_primitive_attr_destroy(attr);
  parts.count++;
  pthread_mutex_unlock(&parts_lock);
  return e;
}

/* What each pool thread keeps: one OpenMP thread for oneDNN (the pool owns
 * the cores), its stream and its scratchpad. */
static _Thread_local struct {
  int single;
  dnnl_stream_t stream;
  void *scratch;
  size_t scratch_bytes;
} thread;

struct fused_job {
  const void *x, *w, *b, *residual;
  void *y;
  int64_t k, n, bf16, epilogue;
};

static void fused_rows(void *ctx, int64_t begin, int64_t end) {
  const struct fused_job *job = ctx;
  if (!thread.single) {
    omp_set_num_threads(1);
    thread.single = 1;
  }
  const part_primitive *e =
      part_for((part_key){end - begin, job->k, job->n, job->bf16, job->epilogue});
  if (!thread.stream)
    CHECK_DNNL(dnnl_stream_create(&thread.stream, parts.engine, dnnl_stream_default_flags));
  const size_t pad_bytes = dnnl_memory_desc_get_size(&e->scratchpad);
  if (pad_bytes > thread.scratch_bytes) {
    free(thread.scratch);
    thread.scratch = allocate(pad_bytes);
    thread.scratch_bytes = pad_bytes;
  }
  const size_t element = job->bf16 ? 2 : 4;
  dnnl_memory_t src, weights, bias, dst, pad, residual = NULL;
  CHECK_DNNL(dnnl_memory_create(&src, &e->src, parts.engine,
                                (char *)job->x + (size_t)(begin * job->k) * element));
  CHECK_DNNL(dnnl_memory_create(&weights, &e->weights, parts.engine, (void *)job->w));
  CHECK_DNNL(dnnl_memory_create(&bias, &e->bias, parts.engine, (void *)job->b));
  CHECK_DNNL(dnnl_memory_create(&dst, &e->dst, parts.engine,
                                (char *)job->y + (size_t)(begin * job->n) * element));
  CHECK_DNNL(dnnl_memory_create(&pad, &e->scratchpad, parts.engine, thread.scratch));
  dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, src},         {DNNL_ARG_WEIGHTS, weights},
                             {DNNL_ARG_BIAS, bias},       {DNNL_ARG_DST, dst},
                             {DNNL_ARG_SCRATCHPAD, pad},  {0, NULL}};
  int count = 5;
  if (job->epilogue == EPILOGUE_BINARY_ADD) {
    CHECK_DNNL(dnnl_memory_create(&residual, &e->residual, parts.engine,
                                  (char *)job->residual + (size_t)(begin * job->n) * element));
    args[count++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, residual};
  }
  CHECK_DNNL(dnnl_primitive_execute(e->primitive, thread.stream, count, args));
  CHECK_DNNL(dnnl_stream_wait(thread.stream));
  dnnl_memory_destroy(src);
  dnnl_memory_destroy(weights);
  dnnl_memory_destroy(bias);
  dnnl_memory_destroy(dst);
  dnnl_memory_destroy(pad);
  dnnl_memory_destroy(residual);
}

/* The row split of cpu/onednn.c's linear: two parts per thread, at least
 * 2M multiply-adds each, multiples of 16 rows. */
static void fused_linear(const void *x, const void *w, const void *b, const void *residual,
                         void *y, int64_t rows, int64_t k, int64_t n, int bf16, int epilogue) {
  const int64_t threads = htp__threads();
  const double macs = (double)rows * (double)k * (double)n;
  int64_t count = 2 * threads;
  if (macs / (double)count < 2e6) count = (int64_t)(macs / 2e6) > 1 ? (int64_t)(macs / 2e6) : 1;
  int64_t grain = (rows + count - 1) / count;
  grain = (grain + 15) / 16 * 16;
  struct fused_job job = {x, w, b, residual, y, k, n, bf16, epilogue};
  if (grain >= rows)
    fused_rows(&job, 0, rows);
  else
    htp__parallel(rows, grain, fused_rows, &job);
}

/* ===== The variants ====================================================== */

typedef struct tensors {
  int64_t rows, dim, hidden;
  float *x, *w1, *b1, *h, *w2, *b2, *residual, *y; /* f32 */
  htp_bf16 *xb, *w1b, *b1b, *hb, *w2b, *b2b, *residualb, *yb;
} tensors;

static const htp_kernel_table *table;
static htp_kernel_env env;

#define OK(call) \
  do { \
    if ((call) != HTP_KERNEL_OK) die(#call); \
  } while (0)

typedef struct variant {
  const char *name;
  const char *baseline; /* the variant this one's ratio is against, or NULL */
  void (*run)(tensors *t);
} variant;

static void fc1_f32_unfused(tensors *t) {
  OK(table->linear_f32(&env, t->x, t->w1, t->b1, t->h, t->rows, t->dim, t->hidden));
  OK(table->gelu_f32(&env, t->h, t->h, t->rows * t->hidden, 0));
}
static void fc1_f32_linear_only(tensors *t) {
  OK(table->linear_f32(&env, t->x, t->w1, t->b1, t->h, t->rows, t->dim, t->hidden));
}
static void fc1_f32_gelu_only(tensors *t) {
  OK(table->gelu_f32(&env, t->h, t->h, t->rows * t->hidden, 0));
}
static void fc1_f32_matmul_bias(tensors *t) {
  fused_linear(t->x, t->w1, t->b1, NULL, t->h, t->rows, t->dim, t->hidden, 0, EPILOGUE_NONE);
}
static void fc1_f32_fused(tensors *t) {
  fused_linear(t->x, t->w1, t->b1, NULL, t->h, t->rows, t->dim, t->hidden, 0, EPILOGUE_GELU);
}
static void fc1_bf16_unfused(tensors *t) {
  OK(table->linear_bf16(&env, t->xb, t->w1b, t->b1b, t->hb, t->rows, t->dim, t->hidden));
  OK(table->gelu_bf16(&env, t->hb, t->hb, t->rows * t->hidden, 0));
}
static void fc1_bf16_linear_only(tensors *t) {
  OK(table->linear_bf16(&env, t->xb, t->w1b, t->b1b, t->hb, t->rows, t->dim, t->hidden));
}
static void fc1_bf16_gelu_only(tensors *t) {
  OK(table->gelu_bf16(&env, t->hb, t->hb, t->rows * t->hidden, 0));
}
static void fc1_bf16_matmul_bias(tensors *t) {
  fused_linear(t->xb, t->w1b, t->b1b, NULL, t->hb, t->rows, t->dim, t->hidden, 1, EPILOGUE_NONE);
}
static void fc1_bf16_fused(tensors *t) {
  fused_linear(t->xb, t->w1b, t->b1b, NULL, t->hb, t->rows, t->dim, t->hidden, 1, EPILOGUE_GELU);
}
static void fc1_bf16_table_fused(tensors *t) {
  OK(table->linear_gelu_bf16(&env, t->xb, t->w1b, t->b1b, t->hb, t->rows, t->dim, t->hidden, 0));
}
static void fc2_f32_unfused(tensors *t) {
  OK(table->linear_f32(&env, t->h, t->w2, t->b2, t->y, t->rows, t->hidden, t->dim));
  OK(table->add_f32(&env, t->residual, t->y, t->y, t->rows * t->dim));
}
static void fc2_f32_linear_only(tensors *t) {
  OK(table->linear_f32(&env, t->h, t->w2, t->b2, t->y, t->rows, t->hidden, t->dim));
}
static void fc2_f32_add_only(tensors *t) {
  OK(table->add_f32(&env, t->residual, t->y, t->y, t->rows * t->dim));
}
static void fc2_f32_matmul_bias(tensors *t) {
  fused_linear(t->h, t->w2, t->b2, NULL, t->y, t->rows, t->hidden, t->dim, 0, EPILOGUE_NONE);
}
static void fc2_f32_binary(tensors *t) {
  fused_linear(t->h, t->w2, t->b2, t->residual, t->y, t->rows, t->hidden, t->dim, 0,
               EPILOGUE_BINARY_ADD);
}
/* y holds the residual already (a block writing its output in place over
 * its input): what a sum post-op needs. The copy is not timed... it cannot
 * be avoided by a caller whose residual is an input, so this is the bound. */
static void fc2_f32_sum(tensors *t) {
  fused_linear(t->h, t->w2, t->b2, NULL, t->y, t->rows, t->hidden, t->dim, 0, EPILOGUE_SUM);
}
static void fc2_bf16_unfused(tensors *t) {
  OK(table->linear_bf16(&env, t->hb, t->w2b, t->b2b, t->yb, t->rows, t->hidden, t->dim));
  OK(table->add_bf16(&env, t->residualb, t->yb, t->yb, t->rows * t->dim));
}
static void fc2_bf16_linear_only(tensors *t) {
  OK(table->linear_bf16(&env, t->hb, t->w2b, t->b2b, t->yb, t->rows, t->hidden, t->dim));
}
static void fc2_bf16_add_only(tensors *t) {
  OK(table->add_bf16(&env, t->residualb, t->yb, t->yb, t->rows * t->dim));
}
static void fc2_bf16_binary(tensors *t) {
  fused_linear(t->hb, t->w2b, t->b2b, t->residualb, t->yb, t->rows, t->hidden, t->dim, 1,
               EPILOGUE_BINARY_ADD);
}
static void fc2_bf16_sum(tensors *t) {
  fused_linear(t->hb, t->w2b, t->b2b, NULL, t->yb, t->rows, t->hidden, t->dim, 1, EPILOGUE_SUM);
}

static const variant variants[] = {
    {"fc1 f32  linear+bias, then GELU (table)", NULL, fc1_f32_unfused},
    {"fc1 f32  linear+bias alone (table)", "fc1 f32  linear+bias, then GELU (table)",
     fc1_f32_linear_only},
    {"fc1 f32  GELU alone (table)", "fc1 f32  linear+bias, then GELU (table)", fc1_f32_gelu_only},
    {"fc1 f32  matmul primitive + bias", "fc1 f32  linear+bias, then GELU (table)",
     fc1_f32_matmul_bias},
    {"fc1 f32  matmul + bias + gelu_erf post-op", "fc1 f32  linear+bias, then GELU (table)",
     fc1_f32_fused},
    {"fc1 bf16 linear+bias, then GELU (table)", NULL, fc1_bf16_unfused},
    {"fc1 bf16 linear+bias alone (table)", "fc1 bf16 linear+bias, then GELU (table)",
     fc1_bf16_linear_only},
    {"fc1 bf16 GELU alone (table)", "fc1 bf16 linear+bias, then GELU (table)", fc1_bf16_gelu_only},
    {"fc1 bf16 matmul primitive + bias", "fc1 bf16 linear+bias, then GELU (table)",
     fc1_bf16_matmul_bias},
    {"fc1 bf16 matmul + bias + gelu_erf post-op", "fc1 bf16 linear+bias, then GELU (table)",
     fc1_bf16_fused},
    {"fc1 bf16 linear_gelu_bf16 (table, fused)", "fc1 bf16 linear+bias, then GELU (table)",
     fc1_bf16_table_fused},
    {"fc2 f32  linear+bias, then add (table)", NULL, fc2_f32_unfused},
    {"fc2 f32  linear+bias alone (table)", "fc2 f32  linear+bias, then add (table)",
     fc2_f32_linear_only},
    {"fc2 f32  add alone (table)", "fc2 f32  linear+bias, then add (table)", fc2_f32_add_only},
    {"fc2 f32  matmul primitive + bias", "fc2 f32  linear+bias, then add (table)",
     fc2_f32_matmul_bias},
    {"fc2 f32  matmul + bias + binary_add post-op", "fc2 f32  linear+bias, then add (table)",
     fc2_f32_binary},
    {"fc2 f32  matmul + bias + sum post-op (y = residual)",
     "fc2 f32  linear+bias, then add (table)", fc2_f32_sum},
    {"fc2 bf16 linear+bias, then add (table)", NULL, fc2_bf16_unfused},
    {"fc2 bf16 linear+bias alone (table)", "fc2 bf16 linear+bias, then add (table)",
     fc2_bf16_linear_only},
    {"fc2 bf16 add alone (table)", "fc2 bf16 linear+bias, then add (table)", fc2_bf16_add_only},
    {"fc2 bf16 matmul + bias + binary_add post-op", "fc2 bf16 linear+bias, then add (table)",
     fc2_bf16_binary},
    {"fc2 bf16 matmul + bias + sum post-op (y = residual)",
     "fc2 bf16 linear+bias, then add (table)", fc2_bf16_sum},
};
enum { VARIANTS = sizeof variants / sizeof variants[0] };

static int index_of(const char *name) {
  for (int i = 0; i < VARIANTS; ++i)
    if (strcmp(variants[i].name, name) == 0) return i;
  return -1;
}

/* ===== Numbers =========================================================== */

/* oneDNN's GELU alone (its eltwise primitive: the same JIT injector as the
 * post-op) per element over [-12, 12], exact and tanh forms, against double
 * (0.5 x erfc(-x/sqrt 2); the tanh formula), beside htp_cpu_gelu_f32. */
static void check_gelu_elementwise(int tanh_approx) {
  enum { N = 20001 };
  float *x = allocate(N * sizeof(float)), *y = allocate(N * sizeof(float));
  float *ours = allocate(N * sizeof(float));
  for (int i = 0; i < N; ++i) x[i] = -12.0f + 24.0f * (float)i / (float)(N - 1);
  x[N / 2] = 0.0f;
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  CHECK_DNNL(dnnl_engine_create(&engine, dnnl_cpu, 0));
  CHECK_DNNL(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {N};
  CHECK_DNNL(dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_f32, dnnl_a));
  dnnl_eltwise_desc_t desc;
  CHECK_DNNL(dnnl_eltwise_forward_desc_init(
      &desc, dnnl_forward_inference, tanh_approx ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_gelu_erf,
      &md, 0.0f, 0.0f));
  dnnl_primitive_desc_t pd;
  CHECK_DNNL(dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL));
  const char *impl = "?";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  dnnl_primitive_t eltwise;
  CHECK_DNNL(dnnl_primitive_create(&eltwise, pd));
  dnnl_memory_t src, dst;
  CHECK_DNNL(dnnl_memory_create(&src, &md, engine, x));
  CHECK_DNNL(dnnl_memory_create(&dst, &md, engine, y));
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
  CHECK_DNNL(dnnl_primitive_execute(eltwise, stream, 2, args));
  CHECK_DNNL(dnnl_stream_wait(stream));
  htp_cpu_gelu_f32(x, ours, N, tanh_approx);
  double worst[2] = {0, 0}, worst_x[2] = {0, 0}, worst_abs[2] = {0, 0};
  for (int i = 0; i < N; ++i) {
    const double v = x[i];
    const double pi = 3.14159265358979323846; /* M_PI is not C11 (_POSIX_C_SOURCE hides it) */
    const double want = tanh_approx
                            ? 0.5 * v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v * v * v)))
                            : 0.5 * v * erfc(-v / sqrt(2.0));
    const float got[2] = {y[i], ours[i]};
    for (int k = 0; k < 2; ++k) {
      const double abs_err = fabs(got[k] - want);
      const double err = want == 0 ? fabs(got[k]) : abs_err / fabs(want);
      if (err > worst[k]) worst_x[k] = x[i];
      worst[k] = fmax(worst[k], err);
      worst_abs[k] = fmax(worst_abs[k], abs_err);
    }
  }
  const char *name = tanh_approx ? "gelu_tanh" : "gelu_erf";
  printf("%s per element over [-12, 12] against double (%s):\n", name, impl);
  printf("  oneDNN eltwise_%-9s worst relative %.3g at x = %g, worst absolute %.3g\n", name,
         worst[0], worst_x[0], worst_abs[0]);
  printf("  htp_cpu_gelu_f32:        worst relative %.3g at x = %g, worst absolute %.3g\n",
         worst[1], worst_x[1], worst_abs[1]);
  dnnl_memory_destroy(src);
  dnnl_memory_destroy(dst);
  dnnl_primitive_destroy(eltwise);
  dnnl_primitive_desc_destroy(pd);
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(engine);
  free(x); free(y); free(ours);
}

/* max |got - ref| / max |ref| over the first `rows` rows of GELU(x w1ᵀ + b1)
 * (the operands rounded to bf16 first where bf16), ref in double. */
static double fc1_error(const tensors *t, const void *got, int bf16, int64_t rows) {
  double max_ref = 1e-30, max_diff = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < t->hidden; ++j) {
      double s = bf16 ? htp_bf16_to_f32(t->b1b[j]) : t->b1[j];
      for (int64_t p = 0; p < t->dim; ++p)
        s += bf16 ? (double)htp_bf16_to_f32(t->xb[r * t->dim + p]) *
                        htp_bf16_to_f32(t->w1b[j * t->dim + p])
                  : (double)t->x[r * t->dim + p] * t->w1[j * t->dim + p];
      const double want = 0.5 * s * erfc(-s / sqrt(2.0));
      const double value = bf16 ? htp_bf16_to_f32(((const htp_bf16 *)got)[r * t->hidden + j])
                                : ((const float *)got)[r * t->hidden + j];
      max_ref = fmax(max_ref, fabs(want));
      max_diff = fmax(max_diff, fabs(value - want));
    }
  return max_diff / max_ref;
}

/* The same for fc2 + residual, from the h each variant is given. */
static double fc2_error(const tensors *t, const void *got, int bf16, int64_t rows) {
  double max_ref = 1e-30, max_diff = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < t->dim; ++j) {
      double s = bf16 ? (double)htp_bf16_to_f32(t->b2b[j]) + htp_bf16_to_f32(t->residualb[r * t->dim + j])
                      : (double)t->b2[j] + t->residual[r * t->dim + j];
      for (int64_t p = 0; p < t->hidden; ++p)
        s += bf16 ? (double)htp_bf16_to_f32(t->hb[r * t->hidden + p]) *
                        htp_bf16_to_f32(t->w2b[j * t->hidden + p])
                  : (double)t->h[r * t->hidden + p] * t->w2[j * t->hidden + p];
      const double value = bf16 ? htp_bf16_to_f32(((const htp_bf16 *)got)[r * t->dim + j])
                                : ((const float *)got)[r * t->dim + j];
      max_ref = fmax(max_ref, fabs(s));
      max_diff = fmax(max_diff, fabs(value - s));
    }
  return max_diff / max_ref;
}

static void check_outputs(tensors *t) {
  const int64_t rows = 48; /* three of the first part's rows would do; more is cheap */
  printf("max |y - ref| / max |ref| over the first %lld rows, ref in double:\n", (long long)rows);
  fc1_f32_unfused(t);
  printf("  fc1 f32  unfused %.3g", fc1_error(t, t->h, 0, rows));
  fc1_f32_fused(t);
  printf("   fused %.3g\n", fc1_error(t, t->h, 0, rows));
  fc1_bf16_unfused(t);
  printf("  fc1 bf16 unfused %.3g", fc1_error(t, t->hb, 1, rows));
  fc1_bf16_fused(t);
  printf("   fused %.3g\n", fc1_error(t, t->hb, 1, rows));
  fc2_f32_unfused(t);
  printf("  fc2 f32  unfused %.3g", fc2_error(t, t->y, 0, rows));
  fc2_f32_binary(t);
  printf("   binary_add %.3g", fc2_error(t, t->y, 0, rows));
  memcpy(t->y, t->residual, (size_t)(t->rows * t->dim) * sizeof(float));
  fc2_f32_sum(t);
  printf("   sum %.3g\n", fc2_error(t, t->y, 0, rows));
  fc2_bf16_unfused(t);
  printf("  fc2 bf16 unfused %.3g", fc2_error(t, t->yb, 1, rows));
  fc2_bf16_binary(t);
  printf("   binary_add %.3g", fc2_error(t, t->yb, 1, rows));
  memcpy(t->yb, t->residualb, (size_t)(t->rows * t->dim) * sizeof(htp_bf16));
  fc2_bf16_sum(t);
  printf("   sum %.3g\n", fc2_error(t, t->yb, 1, rows));
}

int main(int argc, char **argv) {
  int64_t batch = 8, iters = 10, rounds = 7, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const long long value = atoll(argv[i + 1]);
    if (strcmp(argv[i], "--batch") == 0) batch = value;
    else if (strcmp(argv[i], "--iters") == 0) iters = value;
    else if (strcmp(argv[i], "--rounds") == 0) rounds = value;
    else if (strcmp(argv[i], "--threads") == 0) threads = value;
    else die("usage: htp-bench-postops [--batch B] [--iters N] [--rounds R] [--threads T]");
  }
  if (batch < 1 || iters < 1 || rounds < 1) die("batch, iters and rounds must be >= 1");
  if (threads > 0) htp_cpu_set_blas_threads((int)threads);
  table = htp_cpu_kernel_table();
  static char error[256];
  OK(htp_cpu_kernel_env_create(&env, error, sizeof error));

  tensors t = {.rows = batch * 197, .dim = 768, .hidden = 3072};
  const int64_t rows = t.rows, dim = t.dim, hidden = t.hidden;
  t.x = filled(rows * dim, 2.0f, 1);
  t.w1 = filled(hidden * dim, 1.0f / sqrtf((float)dim), 2);
  t.b1 = filled(hidden, 0.5f, 3);
  t.h = filled(rows * hidden, 1.0f, 4);
  t.w2 = filled(dim * hidden, 1.0f / sqrtf((float)hidden), 5);
  t.b2 = filled(dim, 0.5f, 6);
  t.residual = filled(rows * dim, 2.0f, 7);
  t.y = filled(rows * dim, 1.0f, 8);
  t.xb = rounded(t.x, rows * dim);
  t.w1b = rounded(t.w1, hidden * dim);
  t.b1b = rounded(t.b1, hidden);
  t.hb = rounded(t.h, rows * hidden);
  t.w2b = rounded(t.w2, dim * hidden);
  t.b2b = rounded(t.b2, dim);
  t.residualb = rounded(t.residual, rows * dim);
  t.yb = rounded(t.y, rows * dim);

  printf("htp-bench-postops: rows %lld (batch %lld x 197), fc1 %lld -> %lld, fc2 %lld -> %lld, "
         "%d threads, %s\n",
         (long long)rows, (long long)batch, (long long)dim, (long long)hidden, (long long)hidden,
         (long long)dim, htp__threads(), htp_cpu_gemm_provider());
  check_gelu_elementwise(0);
  check_gelu_elementwise(1);
  check_outputs(&t);
  /* fc2's inputs: fc1's fused bf16 output and its f32 twin (both GELUs of
   * the same numbers), so fc2 sees a block's hidden values. */
  fc1_f32_fused(&t);
  fc1_bf16_fused(&t);
  for (int i = 0; i < parts.count && i < 8; ++i) printf("primitive %d: %s\n", i, parts.impl[i]);

  double *samples = allocate((size_t)(VARIANTS * rounds * iters) * sizeof(double));
  double *round_medians = allocate((size_t)(VARIANTS * rounds) * sizeof(double));
  for (int v = 0; v < VARIANTS; ++v) variants[v].run(&t); /* warm-up: primitives, pages */
  for (int64_t round = 0; round < rounds; ++round)
    for (int v = 0; v < VARIANTS; ++v) {
      double *mine = samples + (v * rounds + round) * iters;
      for (int64_t i = 0; i < iters; ++i) {
        const double start = bench_now_ms();
        variants[v].run(&t);
        mine[i] = bench_now_ms() - start;
      }
      double copy[iters];
      memcpy(copy, mine, sizeof copy);
      round_medians[v * rounds + round] = bench_median(copy, (int)iters);
    }
  printf("%-52s %9s %9s %s\n", "variant", "median ms", "min ms", "ratio to unfused (per-round median)");
  for (int v = 0; v < VARIANTS; ++v) {
    double *mine = samples + v * rounds * iters;
    const double med = bench_median(mine, (int)(rounds * iters)), least = mine[0];
    printf("%-52s %9.3f %9.3f", variants[v].name, med, least);
    const int base = variants[v].baseline ? index_of(variants[v].baseline) : -1;
    if (base >= 0) {
      double ratios[rounds];
      for (int64_t r = 0; r < rounds; ++r)
        ratios[r] = round_medians[v * rounds + r] / round_medians[base * rounds + r];
      printf(" %.3f", bench_median(ratios, (int)rounds));
    }
    printf("\n");
  }
  htp_cpu_kernel_env_destroy(&env);
  return 0;
}
