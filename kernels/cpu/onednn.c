/*===- kernels/cpu/onednn.c - bf16 linears as oneDNN matmuls --------------===*
 *
 * A bf16 linear, y = x · wᵀ + b with every tensor bf16, as oneDNN matmul
 * primitives, which run bf16 on the CPU's own bf16 units (AMX tiles,
 * AVX512-BF16) where the f32 path would widen, multiply in f32 and round:
 * f32 accumulation and one rounding of each output, as the widening path
 * (cpu/bf16.c) promises. The rows are split over the kernels' pool as the
 * f32 GEMMs are (threads.c), each part a single-threaded primitive, so the
 * pool stays the one owner of the cores; primitives are created once per
 * part shape and kept (a few per linear of a model). Where oneDNN has no
 * bf16 units to run them on (no AVX512-BF16 or AMX: its emulation is
 * slower than widening), or anything fails, the caller falls back to
 * widening. A linear followed by a GELU runs the GELU as the matmul's
 * eltwise post-op, on the f32 accumulator before the one rounding: at
 * ViT-B's fc1 on a Zen 5 (AVX512-BF16) that took the pair from 10.3 to
 * 8.7 ms, the separate pass having cost 2.2 ms (bench/onednn_postops.c).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "kernels/cpu/onednn.h"

#include "kernels/cpu/cpu_internal.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The primitive's shape: htp__onednn_matmul's, every field an int64_t so
 * that keys compare with memcmp (no padding). */
typedef struct matmul_key {
  int64_t batch, m, k, n;
  int64_t a_batch, a_row, b_batch, b_k, b_n, c_batch, c_row;
  int64_t bias, f32_out, gelu, a_transposed, accumulate;
} matmul_key;

typedef struct matmul_entry {
  matmul_key key;
  dnnl_primitive_t primitive;
  dnnl_memory_desc_t src, weights, bias, dst, scratchpad;
} matmul_entry;

enum { MAX_PRIMITIVES = 256 };

static struct {
  pthread_mutex_t lock;
  dnnl_engine_t engine;
  int engine_failed;
  matmul_entry entries[MAX_PRIMITIVES];
  int count;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static dnnl_engine_t engine(void) {
  if (!cache.engine && !cache.engine_failed &&
      dnnl_engine_create(&cache.engine, dnnl_cpu, 0) != dnnl_success)
    cache.engine_failed = 1;
  return cache.engine;
}

static matmul_key key_of(const htp__matmul *shape) {
  return (matmul_key){shape->batch,   shape->m,     shape->k,       shape->n,
                      shape->a_batch, shape->a_row, shape->b_batch, shape->b_k,
                      shape->b_n,     shape->c_batch, shape->c_row, shape->bias != 0,
                      shape->f32_out != 0, shape->gelu, shape->a_transposed != 0,
                      shape->accumulate != 0 && shape->f32_out != 0};
}

/* Whether oneDNN runs bf16 products on bf16 units here (AVX512-BF16 or
 * AMX in its effective ISA, which ONEDNN_MAX_CPU_ISA caps). Without them
 * it emulates bf16 with conversions, slower than widening to the f32
 * GEMM: capped at avx512_core on a Zen 5, ViT-B/16's bf16 block took 155
 * ms this way against 57 ms in f32. */
static int native_bf16(void) { return htp__onednn_isa_has(dnnl_cpu_isa_avx512_core_bf16); }

/* The primitive for one shape, made on first use (NULL: oneDNN has none
 * for this CPU, only an emulation, or the cache is full). */
static const matmul_entry *primitive_for(const htp__matmul *shape) {
  if (!native_bf16()) return NULL;
  const matmul_key key = key_of(shape);
  pthread_mutex_lock(&cache.lock);
  const matmul_entry *found = NULL;
  for (int i = 0; i < cache.count && !found; i++)
    if (memcmp(&cache.entries[i].key, &key, sizeof key) == 0) found = &cache.entries[i];
  if (found || cache.count == MAX_PRIMITIVES || !engine()) {
    pthread_mutex_unlock(&cache.lock);
    return found;
  }
  matmul_entry e = {.key = key};
  /* Three dimensions, the batch first; bias [1, 1, n]. */
  const dnnl_dims_t src_dims = {key.batch, key.m, key.k},
                    src_strides = {key.a_batch, key.a_transposed ? 1 : key.a_row,
                                   key.a_transposed ? key.a_row : 1};
  const dnnl_dims_t weight_dims = {key.batch, key.k, key.n},
                    weight_strides = {key.b_batch, key.b_k, key.b_n};
  const dnnl_dims_t bias_dims = {1, 1, key.n}, bias_strides = {key.n, key.n, 1};
  const dnnl_dims_t dst_dims = {key.batch, key.m, key.n},
                    dst_strides = {key.c_batch, key.c_row, 1};
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd = NULL;
  /* The scratchpad is the caller's: with the library's (one global) two
   * pool threads running parts at once would share it. */
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post_ops = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success ||
      dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success ||
      ((key.gelu || key.accumulate) &&
       (dnnl_post_ops_create(&post_ops) != dnnl_success ||
        (key.accumulate && dnnl_post_ops_append_sum(post_ops, 1.0f) != dnnl_success) ||
        (key.gelu &&
         dnnl_post_ops_append_eltwise(post_ops, 1.0f,
                                      key.gelu == HTP_MATMUL_GELU_TANH ? dnnl_eltwise_gelu_tanh
                                                                       : dnnl_eltwise_gelu_erf,
                                      0.0f, 0.0f) != dnnl_success) ||
        dnnl_primitive_attr_set_post_ops(attr, post_ops) != dnnl_success))) {
    if (post_ops) dnnl_post_ops_destroy(post_ops);
    dnnl_primitive_attr_destroy(attr);
    pthread_mutex_unlock(&cache.lock);
    return NULL;
  }
  if (post_ops) dnnl_post_ops_destroy(post_ops); /* the attribute keeps its copy */
  int ok = dnnl_memory_desc_init_by_strides(&e.src, 3, src_dims, dnnl_bf16, src_strides) ==
               dnnl_success &&
           dnnl_memory_desc_init_by_strides(&e.weights, 3, weight_dims, dnnl_bf16,
                                            weight_strides) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&e.bias, 3, bias_dims, dnnl_bf16, bias_strides) ==
               dnnl_success &&
           dnnl_memory_desc_init_by_strides(&e.dst, 3, dst_dims, key.f32_out ? dnnl_f32 : dnnl_bf16,
                                            dst_strides) == dnnl_success &&
           dnnl_matmul_desc_init(&desc, &e.src, &e.weights, key.bias ? &e.bias : NULL,
                                 &e.dst) == dnnl_success &&
           dnnl_primitive_desc_create(&pd, &desc, attr, cache.engine, NULL) == dnnl_success;
  dnnl_primitive_attr_destroy(attr);
  const dnnl_memory_desc_t *scratchpad =
      ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
  if (scratchpad) e.scratchpad = *scratchpad;
  ok = ok && scratchpad;
  /* A reference (non-JIT) implementation would be far slower than widening. */
  const char *impl = NULL;
  if (ok && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
      impl && strncmp(impl, "ref", 3) == 0)
    ok = 0;
  ok = ok && dnnl_primitive_create(&e.primitive, pd) == dnnl_success;
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (ok) {
    cache.entries[cache.count] = e;
    found = &cache.entries[cache.count++];
  }
  pthread_mutex_unlock(&cache.lock);
  return found;
}

/* What a thread keeps between calls: its stream and its scratchpad, freed
 * when the thread ends (the pool's workers are joined at exit: kept in
 * _Thread_local pointers, they leaked then). */
typedef struct thread_state {
  int single;
  dnnl_stream_t stream;
  void *scratch;
  size_t scratch_bytes;
} thread_state;

static pthread_key_t state_key;
static int state_key_failed;

static void free_thread_state(void *data) {
  thread_state *state = data;
  if (state->stream) dnnl_stream_destroy(state->stream);
  free(state->scratch);
  free(state);
}

static void make_state_key(void) {
  state_key_failed = pthread_key_create(&state_key, free_thread_state) != 0;
}

/* This thread's state, made on first use; NULL when out of memory. */
static thread_state *this_thread(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_state_key);
  if (state_key_failed) return NULL;
  thread_state *state = pthread_getspecific(state_key);
  if (!state && (state = calloc(1, sizeof *state)) && pthread_setspecific(state_key, state)) {
    free(state);
    state = NULL;
  }
  return state;
}

/* Grows *buffer to at least `bytes` (64-byte aligned); 0 when out of memory. */
static int grow(void **buffer, size_t *size, size_t bytes) {
  if (bytes <= *size) return 1;
  free(*buffer);
  *size = 0;
  bytes = (bytes + 63) / 64 * 64;
  if (!(*buffer = aligned_alloc(64, bytes))) return 0;
  *size = bytes;
  return 1;
}

int htp__onednn_isa_has(int isa) {
  return ((int)dnnl_get_effective_cpu_isa() & isa) == isa;
}

int htp__onednn_matmul(const htp__matmul *shape, const htp_bf16 *a, const htp_bf16 *b,
                       const htp_bf16 *bias, void *c) {
  thread_state *state = this_thread();
  if (!state) return 1;
  if (!state->single) { /* one OpenMP thread: the pool owns the cores (threads.c) */
    omp_set_num_threads(1);
    state->single = 1;
  }
  const matmul_entry *e = primitive_for(shape);
  if (!e || (!state->stream && dnnl_stream_create(&state->stream, cache.engine,
                                                  dnnl_stream_default_flags) != dnnl_success))
    return 1;
  const size_t needed = dnnl_memory_desc_get_size(&e->scratchpad);
  if (!grow(&state->scratch, &state->scratch_bytes, needed)) return 1;
  dnnl_memory_t src = NULL, weights = NULL, bias_memory = NULL, dst = NULL, pad = NULL;
  int ok = dnnl_memory_create(&pad, &e->scratchpad, cache.engine,
                              needed ? state->scratch : NULL) == dnnl_success &&
           dnnl_memory_create(&src, &e->src, cache.engine, (void *)a) == dnnl_success &&
           dnnl_memory_create(&weights, &e->weights, cache.engine, (void *)b) == dnnl_success &&
           (!e->key.bias || dnnl_memory_create(&bias_memory, &e->bias, cache.engine,
                                               (void *)bias) == dnnl_success) &&
           dnnl_memory_create(&dst, &e->dst, cache.engine, c) == dnnl_success;
  if (ok) {
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights},
                               {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, pad},
                               {DNNL_ARG_BIAS, bias_memory}};
    ok = dnnl_primitive_execute(e->primitive, state->stream, e->key.bias ? 5 : 4, args) ==
             dnnl_success &&
         dnnl_stream_wait(state->stream) == dnnl_success;
  }
  dnnl_memory_destroy(src);
  dnnl_memory_destroy(weights);
  dnnl_memory_destroy(bias_memory);
  dnnl_memory_destroy(dst);
  dnnl_memory_destroy(pad);
  return !ok;
}

struct linear_job {
  const htp_bf16 *x, *w, *b;
  void *y; /* htp_bf16 or, with f32_out, float */
  int f32_out, gelu;
  int64_t k, n;
  _Atomic int failed;
};

/* Rows [begin, end) of y on this thread: one primitive. */
static void linear_rows(void *ctx, int64_t begin, int64_t end) {
  struct linear_job *job = ctx;
  const int64_t rows = end - begin;
  /* x [rows, k] row-major; w [n, k] row-major read as [k, n]; y [rows, n]. */
  const htp__matmul shape = {.batch = 1, .m = rows, .k = job->k, .n = job->n,
                             .a_batch = rows * job->k, .a_row = job->k,
                             .b_batch = job->k * job->n, .b_k = 1, .b_n = job->k,
                             .c_batch = rows * job->n, .c_row = job->n,
                             .bias = job->b != NULL, .f32_out = job->f32_out,
                             .gelu = job->gelu};
  char *y = (char *)job->y +
            (size_t)(begin * job->n) * (job->f32_out ? sizeof(float) : sizeof(htp_bf16));
  if (htp__onednn_matmul(&shape, job->x + begin * job->k, job->w, job->b, y))
    atomic_store(&job->failed, 1);
}

enum { PART_MACS = 2000000 };

static int linear(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b, void *y,
                  int f32_out, int gelu, int64_t rows, int64_t in_features,
                  int64_t out_features) {
  if (rows < 1 || in_features < 1 || out_features < 1) return 1;
  /* The same primitive for every part: parts of equal rows (the last may be
   * shorter), at least PART_MACS each, two per thread. */
  const int64_t threads = htp__threads();
  const double macs = (double)rows * (double)in_features * (double)out_features;
  int64_t parts = 2 * threads;
  if (macs / (double)parts < PART_MACS) parts = (int64_t)(macs / PART_MACS) > 1 ? (int64_t)(macs / PART_MACS) : 1;
  int64_t grain = (rows + parts - 1) / parts;
  grain = (grain + 15) / 16 * 16;
  struct linear_job job = {x, w, b, y, f32_out, gelu, in_features, out_features, 0};
  if (grain >= rows)
    linear_rows(&job, 0, rows);
  else
    htp__parallel(rows, grain, linear_rows, &job);
  return atomic_load(&job.failed);
}

int htp__onednn_linear_bf16(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
                            htp_bf16 *y, int64_t rows, int64_t in_features,
                            int64_t out_features) {
  return linear(x, w, b, y, 0, HTP_MATMUL_NO_GELU, rows, in_features, out_features);
}

int htp__onednn_linear_gelu_bf16(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
                                 htp_bf16 *y, int64_t rows, int64_t in_features,
                                 int64_t out_features, int32_t tanh_approx) {
  return linear(x, w, b, y, 0, tanh_approx ? HTP_MATMUL_GELU_TANH : HTP_MATMUL_GELU_ERF, rows,
                in_features, out_features);
}

int htp__onednn_linear_bf16_f32(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
                                float *y, int64_t rows, int64_t in_features,
                                int64_t out_features) {
  return linear(x, w, b, y, 1, HTP_MATMUL_NO_GELU, rows, in_features, out_features);
}

/* f32 to bf16, to nearest, ties to even; a NaN stays a quiet NaN
 * (htp_bf16_from_f32's rounding, branch-free so the rows vectorise). */
struct bf16_rows_job {
  const float *src;
  htp_bf16 *dst;
  int64_t src_ld, cols;
};

HTP_VECTOR_CLONES static void bf16_rows(void *ctx, int64_t begin, int64_t end) {
  const struct bf16_rows_job *job = ctx;
  for (int64_t r = begin; r < end; ++r) {
    const uint32_t *src = (const uint32_t *)(const void *)(job->src + r * job->src_ld);
    htp_bf16 *dst = job->dst + r * job->cols;
    for (int64_t i = 0; i < job->cols; ++i) {
      const uint32_t bits = src[i];
      const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
      const uint32_t quiet = (bits >> 16) | 0x0040u;
      dst[i] = (htp_bf16)((bits & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
  }
}

/* A stored matrix, `rows` of `cols` floats ld apart, into dst packed. */
static void to_bf16(const float *src, int64_t ld, int64_t rows, int64_t cols, htp_bf16 *dst) {
  struct bf16_rows_job job = {src, dst, ld, cols};
  htp__parallel(rows, 1 + HTP_GRAIN / cols, bf16_rows, &job);
}

struct gemm_job {
  const htp_bf16 *a, *b;
  float *c;
  int a_transposed, b_transposed, accumulate, by_rows;
  int64_t m, n, k, ldc;
};

/* The primitive's shape of C's rows (or columns) [begin, end), and where
 * its operands start. A is packed [m, k] (transposed: [k, m]), B [k, n]
 * (transposed: [n, k]). */
static htp__matmul part_shape(const struct gemm_job *job, int64_t begin, int64_t end,
                              const htp_bf16 **a, const htp_bf16 **b, float **c) {
  const int64_t m = job->by_rows ? end - begin : job->m, n = job->by_rows ? job->n : end - begin;
  *a = job->a, *b = job->b, *c = job->c;
  if (job->by_rows) {
    *a += job->a_transposed ? begin : begin * job->k;
    *c += begin * job->ldc;
  } else {
    *b += job->b_transposed ? begin * job->k : begin;
    *c += begin;
  }
  return (htp__matmul){.batch = 1, .m = m, .k = job->k, .n = n,
                       .a_batch = job->m * job->k, .a_row = job->a_transposed ? job->m : job->k,
                       .b_batch = job->k * job->n, .b_k = job->b_transposed ? 1 : job->n,
                       .b_n = job->b_transposed ? job->k : 1, .c_batch = m * job->ldc,
                       .c_row = job->ldc, .f32_out = 1, .a_transposed = job->a_transposed,
                       .accumulate = job->accumulate};
}

/* One part on this thread. Its primitive exists (made before any part
 * ran); should the call still fail (no memory for this thread's
 * scratchpad), the part is summed here, element by element in f32 from
 * the same bf16 operands: slow, but C is never left half written. */
static void gemm_part(void *ctx, int64_t begin, int64_t end) {
  const struct gemm_job *job = ctx;
  const htp_bf16 *a, *b;
  float *c;
  const htp__matmul shape = part_shape(job, begin, end, &a, &b, &c);
  if (htp__onednn_matmul(&shape, a, b, NULL, c) == 0) return;
  for (int64_t i = 0; i < shape.m; i++)
    for (int64_t j = 0; j < shape.n; j++) {
      float sum = 0.0f;
      for (int64_t p = 0; p < shape.k; p++)
        sum += htp_bf16_to_f32(a[shape.a_transposed ? p * shape.a_row + i : i * shape.a_row + p]) *
               htp_bf16_to_f32(b[p * shape.b_k + j * shape.b_n]);
      c[i * shape.c_row + j] = shape.accumulate ? c[i * shape.c_row + j] + sum : sum;
    }
}

int htp__onednn_gemm_bf16(int a_transposed, int b_transposed, int64_t m, int64_t n, int64_t k,
                          const float *a, int64_t lda, const float *b, int64_t ldb,
                          int accumulate, float *c, int64_t ldc) {
  if (!native_bf16() || m < 1 || n < 1 || k < 1) return 1;
  /* As htp__sgemm splits: two parts a thread, none below PART_MACS, along
   * C's longer side in multiples of 16; at most two part shapes (the last
   * part may be shorter), both made before anything is written. */
  struct gemm_job job = {NULL, NULL, c, a_transposed, b_transposed, accumulate, m >= n,
                         m, n, k, ldc};
  const int64_t side = m >= n ? m : n;
  const double macs = (double)m * (double)n * (double)k;
  int64_t parts = 2 * (int64_t)htp__threads();
  if (macs / (double)parts < PART_MACS)
    parts = (int64_t)(macs / PART_MACS) > 1 ? (int64_t)(macs / PART_MACS) : 1;
  int64_t grain = (side + parts - 1) / parts;
  grain = (grain + 15) / 16 * 16;
  if (grain > side) grain = side;
  const htp_bf16 *pa, *pb;
  float *pc;
  const htp__matmul first = part_shape(&job, 0, grain, &pa, &pb, &pc),
                    last = part_shape(&job, side - (side % grain ? side % grain : grain), side,
                                      &pa, &pb, &pc);
  if (!primitive_for(&first) || !primitive_for(&last)) return 1;
  htp_bf16 *room =
      htp__thread_room(HTP_ROOM_OPERANDS, (size_t)(m * k + k * n) * sizeof(htp_bf16));
  if (!room) return 1;
  job.a = room;
  job.b = room + m * k;
  to_bf16(a, lda, a_transposed ? k : m, a_transposed ? m : k, room);
  to_bf16(b, ldb, b_transposed ? n : k, b_transposed ? k : n, room + m * k);
  htp__parallel(side, grain, gemm_part, &job);
  return 0;
}
