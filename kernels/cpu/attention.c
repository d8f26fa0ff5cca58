/*===- kernels/cpu/attention.c - Multi-head self-attention, timm layout --===*
 *
 * qkv = x·wqkvᵀ + bqkv once for all heads (one large GEMM through BLAS), then
 * per (image, head) one task: the scores q·kᵀ, the softmax and p·v fused in
 * one pass over tiles of query rows, reading q, k and v straight out of the
 * qkv buffer; tasks are spread over the kernels' threads (htp__parallel).
 * Then the output projection (BLAS). Scratch layout, in floats:
 *   [qkv: rows * 3 * inner][context: rows * inner][scores: tokens * tokens]
 * with rows = batch * tokens and inner = heads * head_dim.
 *
 * A task's K^T and its score tiles live on its thread's stack; a head too
 * large for that (head_dim * tokens > HTP_ATTN_STACK_FLOATS) goes through
 * the BLAS path instead: per head q·kᵀ and p·v GEMMs around a row softmax
 * in the scores scratch.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#if HTP_AVX512_KERNELS
#include <immintrin.h>
#endif

/* Eight floats as one value (GCC/Clang vector extension): AVX2 registers in
 * the x86-64-v3 clone, register pairs in the baseline one. The aligned(4)
 * type reads and writes rows at any float offset; vectors of float may alias
 * floats. */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

enum {
  QB = 4,  /* query rows per tile */
  HTP_ATTN_STACK_FLOATS = 32768, /* 128 KiB of K^T per thread at most */
};

HTP_VECTOR_CLONES
void htp__softmax_rows(float *scores, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float *row = scores + r * cols;
    float max = row[0];
#pragma omp simd reduction(max : max)
    for (int64_t c = 1; c < cols; ++c)
      max = row[c] > max ? row[c] : max;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) {
      row[c] = htp__expf(row[c] - max);
      sum += row[c];
    }
    float inv = 1.0f / sum;
    for (int64_t c = 0; c < cols; ++c)
      row[c] *= inv;
  }
}

/* The tiles of one (image, head), AVX2-wide (clones for every target), and
 * AVX-512-wide where GCC can target it; htp__attend picks at run time. */
#define TILE_FN attend_head_v8
#define TILE_V v8
#define TILE_W 8
#define TILE_LOAD(p) (*(const v8u *)(p))
#define TILE_STORE(p, v) (*(v8u *)(p) = (v))
#define TILE_ATTR HTP_VECTOR_CLONES
#include "kernels/cpu/attention_tile.h"

#if HTP_AVX512_KERNELS
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));
#define TILE_FN attend_head_v16
#define TILE_V v16
#define TILE_W 16
#define TILE_LOAD(p) (*(const v16u *)(p))
#define TILE_STORE(p, v) (*(v16u *)(p) = (v))
#define TILE_ATTR __attribute__((target("arch=x86-64-v4")))
#include "kernels/cpu/attention_tile.h"
#endif

static _Atomic int forced_paths; /* enum htp__attention_paths */

void htp__attention_force(enum htp__attention_paths paths) { atomic_store(&forced_paths, paths); }

/* Whether the AVX-512 kernels may run here (cpu_internal.h). */
int htp__wide_tiles(void) {
#if HTP_AVX512_KERNELS
  if (atomic_load(&forced_paths) == HTP_ATTENTION_NARROW)
    return 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         htp__isa_cap_allows_avx512();
#else
  return 0;
#endif
}

int htp__small_heads(int64_t tokens, int64_t head_dim) {
  return tokens <= HTP_SMALL_HEAD && head_dim <= HTP_SMALL_HEAD &&
         atomic_load(&forced_paths) == HTP_ATTENTION_ANY && htp__wide_tiles();
}

#if HTP_AVX512_KERNELS
#define HTP_AVX512 __attribute__((target("arch=x86-64-v4")))

/* htp__expf on 16 lanes, the same steps (so the same numbers up to the
 * order of rounding in the polynomial); NaN stays NaN (max and min return
 * their second operand when either is NaN). */
HTP_AVX512 static inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.75f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 shifter = _mm512_set1_ps(12582912.0f);
  const __m512 shifted = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                       shifter);
  const __m512 n = _mm512_sub_ps(shifted, shifter);
  __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(1.428606765330187e-06f)));
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  /* 2^n in two halves, so n down to -150 (subnormal results) stays exact. */
  const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_castps_si512(shifter));
  const __m512i half = _mm512_srai_epi32(ni, 1), bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, half), bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

/* One row of C from its two accumulators: scaled, and with `softmax` the
 * row's softmax over its n columns, all in registers (the scores of a small
 * head never make a second pass through memory). */
HTP_AVX512 static inline void store_row(float *out, __m512 c0, __m512 c1, __m512 scale,
                                        __mmask16 m0, __mmask16 m1, int softmax) {
  c0 = _mm512_mul_ps(c0, scale);
  c1 = _mm512_mul_ps(c1, scale);
  if (softmax) {
    const __m512 low = _mm512_set1_ps(-INFINITY);
    const float max = _mm512_reduce_max_ps(
        _mm512_max_ps(_mm512_mask_mov_ps(low, m0, c0), _mm512_mask_mov_ps(low, m1, c1)));
    const __m512 shift = _mm512_set1_ps(max);
    c0 = _mm512_maskz_mov_ps(m0, exp16(_mm512_sub_ps(c0, shift)));
    c1 = _mm512_maskz_mov_ps(m1, exp16(_mm512_sub_ps(c1, shift)));
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_add_ps(c0, c1)));
    c0 = _mm512_mul_ps(c0, inv);
    c1 = _mm512_mul_ps(c1, inv);
  }
  _mm512_mask_storeu_ps(out, m0, c0);
  _mm512_mask_storeu_ps(out + 16, m1, c1);
}

/* Two masked 16-float vectors a row of C, four rows at a time in named
 * accumulators (kept in registers): ~0.1 us at 17 x 12 x 17, where a BLAS
 * call took ~0.35 us. (An intrinsics kernel with accumulator arrays
 * spilled them: 3x slower.) Inlined twice: plain, and with each row's
 * softmax (softmax a constant there). */
HTP_AVX512 static inline void small_product(int64_t m, int64_t n, int64_t k, float alpha,
                                            const float *a, int64_t ai, int64_t ap,
                                            const float *b, int64_t ldb, float *c, int64_t ldc,
                                            int softmax) {
  const __mmask16 m0 = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
  const __mmask16 m1 = (__mmask16)(n <= 16 ? 0u : n >= 32 ? 0xFFFFu : (1u << (n - 16)) - 1u);
  const __m512 scale = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00;
    const float *a0 = a + i * ai, *a1 = a0 + ai, *a2 = a1 + ai, *a3 = a2 + ai;
    for (int64_t p = 0; p < k; ++p) {
      const float *row = b + p * ldb;
      const __m512 b0 = _mm512_maskz_loadu_ps(m0, row), b1 = _mm512_maskz_loadu_ps(m1, row + 16);
      __m512 x = _mm512_set1_ps(a0[p * ap]);
      c00 = _mm512_fmadd_ps(x, b0, c00), c01 = _mm512_fmadd_ps(x, b1, c01);
      x = _mm512_set1_ps(a1[p * ap]);
      c10 = _mm512_fmadd_ps(x, b0, c10), c11 = _mm512_fmadd_ps(x, b1, c11);
      x = _mm512_set1_ps(a2[p * ap]);
      c20 = _mm512_fmadd_ps(x, b0, c20), c21 = _mm512_fmadd_ps(x, b1, c21);
      x = _mm512_set1_ps(a3[p * ap]);
      c30 = _mm512_fmadd_ps(x, b0, c30), c31 = _mm512_fmadd_ps(x, b1, c31);
    }
    float *r = c + i * ldc;
    store_row(r, c00, c01, scale, m0, m1, softmax);
    store_row(r + ldc, c10, c11, scale, m0, m1, softmax);
    store_row(r + 2 * ldc, c20, c21, scale, m0, m1, softmax);
    store_row(r + 3 * ldc, c30, c31, scale, m0, m1, softmax);
  }
  for (; i < m; ++i) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0;
    const float *a0 = a + i * ai;
    for (int64_t p = 0; p < k; ++p) {
      const float *row = b + p * ldb;
      const __m512 x = _mm512_set1_ps(a0[p * ap]);
      c0 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m0, row), c0);
      c1 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m1, row + 16), c1);
    }
    store_row(c + i * ldc, c0, c1, scale, m0, m1, softmax);
  }
}

HTP_AVX512 void htp__small_product(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                                   int64_t ai, int64_t ap, const float *b, int64_t ldb, float *c,
                                   int64_t ldc) {
  small_product(m, n, k, alpha, a, ai, ap, b, ldb, c, ldc, 0);
}

/* p = softmax(scale q kᵀ) by rows: the scores' product with the softmax in
 * its registers. */
HTP_AVX512 static void small_scores(int64_t tokens, int64_t head_dim, float scale, const float *q,
                                    int64_t stride, const float *kt, float *p) {
  small_product(tokens, tokens, head_dim, scale, q, stride, 1, kt, tokens, p, tokens, 1);
}

void htp__small_head_forward(const float *q, const float *k, const float *v, int64_t stride,
                             float *ctx, int64_t ctx_stride, int64_t tokens, int64_t head_dim,
                             float scale, float *p) {
  /* kᵀ [head_dim, tokens] (the products read B by rows); the thread's own (a
   * stack array reads to GCC as maybe uninitialised through the masked loads). */
  static _Thread_local float kt[HTP_SMALL_HEAD * HTP_SMALL_HEAD];
  for (int64_t j = 0; j < tokens; ++j)
    for (int64_t c = 0; c < head_dim; ++c)
      kt[c * tokens + j] = k[j * stride + c];
  small_scores(tokens, head_dim, scale, q, stride, kt, p);
  htp__small_product(tokens, head_dim, tokens, 1.0f, p, tokens, 1, v, stride, ctx, ctx_stride);
}
#endif

/* The layout of htp__attend's operands (see cpu_internal.h). */
struct head_job {
  const float *qkv;
  int64_t qkv_stride, k_offset, v_offset, head_step, num_heads;
  float *context;
  int64_t ctx_stride, tokens, head_dim, padded;
  float scale;
  int wide; /* the AVX-512 tiles (padded a multiple of 32, else of 16) */
};

static const float *task_q(const struct head_job *job, int64_t task) {
  const int64_t b = task / job->num_heads, h = task % job->num_heads;
  return job->qkv + b * job->tokens * job->qkv_stride + h * job->head_step;
}

static float *task_context(const struct head_job *job, int64_t task) {
  const int64_t b = task / job->num_heads, h = task % job->num_heads;
  return job->context + b * job->tokens * job->ctx_stride + h * job->head_dim;
}

/* Tasks [begin, end) of batch * num_heads (image-major); the tiles live on
 * this thread's stack. */
static void head_tasks(void *ctx, int64_t begin, int64_t end) {
  const struct head_job *job = ctx;
  const int64_t tokens = job->tokens, head_dim = job->head_dim, padded = job->padded;
  float kt[head_dim * padded], s[QB * padded], qs[QB * head_dim];
  for (int64_t task = begin; task < end; ++task) {
    const float *q = task_q(job, task);
#if HTP_AVX512_KERNELS
    if (job->wide) {
      attend_head_v16(q, q + job->k_offset, q + job->v_offset, job->qkv_stride,
                      task_context(job, task), job->ctx_stride, tokens, head_dim, job->scale,
                      padded, kt, s, qs);
      continue;
    }
#endif
    attend_head_v8(q, q + job->k_offset, q + job->v_offset, job->qkv_stride,
                   task_context(job, task), job->ctx_stride, tokens, head_dim, job->scale, padded,
                   kt, s, qs);
  }
}

#if HTP_AVX512_KERNELS
/* Tasks [begin, end) of small heads (htp__small_heads), each by the small
 * products; the scores in the thread's own buffer. */
static void small_tasks(void *ctx, int64_t begin, int64_t end) {
  const struct head_job *job = ctx;
  static _Thread_local float p[HTP_SMALL_HEAD * HTP_SMALL_HEAD];
  for (int64_t task = begin; task < end; ++task) {
    const float *q = task_q(job, task);
    htp__small_head_forward(q, q + job->k_offset, q + job->v_offset, job->qkv_stride,
                            task_context(job, task), job->ctx_stride, job->tokens,
                            job->head_dim, job->scale, p);
  }
}
#endif

/* The tasks through BLAS, one after the other (each GEMM threaded by BLAS),
 * around a row softmax in `scores`: for heads too large for the stack tiles. */
static void blas_tasks(const struct head_job *job, float *scores, int64_t tasks) {
  const int tokens = (int)job->tokens, head_dim = (int)job->head_dim,
            stride = (int)job->qkv_stride;
  for (int64_t task = 0; task < tasks; ++task) {
    const float *q = task_q(job, task);
    htp__sgemm(CblasNoTrans, CblasTrans, tokens, tokens, head_dim, job->scale, q, stride,
               q + job->k_offset, stride, 0.0f, scores, tokens);
    htp__softmax_rows(scores, tokens, tokens);
    htp__sgemm(CblasNoTrans, CblasNoTrans, tokens, head_dim, tokens, 1.0f, scores, tokens,
               q + job->v_offset, stride, 0.0f, task_context(job, task), job->ctx_stride);
  }
}

void htp__attend(const float *qkv, int64_t qkv_stride, int64_t k_offset, int64_t v_offset,
                 int64_t head_step, int64_t num_heads, float *context, int64_t ctx_stride,
                 int64_t batch, int64_t tokens, int64_t head_dim, float *scores) {
  const int wide = htp__wide_tiles();
  const int64_t tile = wide ? 32 : 16; /* two vectors of keys per score tile */
  const int64_t padded = (tokens + tile - 1) / tile * tile;
  struct head_job job = {qkv, qkv_stride, k_offset, v_offset, head_step, num_heads, context,
                         ctx_stride, tokens, head_dim, padded, 1.0f / sqrtf((float)head_dim),
                         wide};
#if HTP_AVX512_KERNELS
  if (htp__small_heads(tokens, head_dim)) {
    htp__parallel(batch * num_heads, 1, small_tasks, &job);
    return;
  }
#endif
  if (head_dim * padded > HTP_ATTN_STACK_FLOATS)
    blas_tasks(&job, scores, batch * num_heads);
  else
    htp__parallel(batch * num_heads, 1, head_tasks, &job);
}

void htp_cpu_attention_f32(const float *x, const float *wqkv, const float *bqkv,
                           const float *wproj, const float *bproj, float *y, float *scratch,
                           int64_t batch, int64_t tokens, int64_t model_dim,
                           int64_t num_heads, int64_t head_dim) {
  int64_t rows = batch * tokens, inner = num_heads * head_dim, qkv_stride = 3 * inner;
  float *qkv = scratch;
  float *context = qkv + rows * qkv_stride;
  float *scores = context + rows * inner;

  htp_cpu_linear_f32(x, wqkv, bqkv, qkv, rows, model_dim, qkv_stride);
  htp__attend(qkv, qkv_stride, inner, 2 * inner, head_dim, num_heads, context, inner, batch,
              tokens, head_dim, scores);
  htp_cpu_linear_f32(context, wproj, bproj, y, rows, inner, model_dim);
}
