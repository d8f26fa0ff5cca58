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

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HTP_WIDE_TILES 1
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));
#define TILE_FN attend_head_v16
#define TILE_V v16
#define TILE_W 16
#define TILE_LOAD(p) (*(const v16u *)(p))
#define TILE_STORE(p, v) (*(v16u *)(p) = (v))
#define TILE_ATTR __attribute__((target("arch=x86-64-v4")))
#include "kernels/cpu/attention_tile.h"
#else
#define HTP_WIDE_TILES 0
#endif

static _Atomic int force_narrow;

void htp__attention_force_narrow(int narrow) { atomic_store(&force_narrow, narrow); }

/* Whether the AVX-512 tiles may run here (cpu_internal.h). */
int htp__wide_tiles(void) {
#if HTP_WIDE_TILES
  if (atomic_load(&force_narrow))
    return 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#else
  return 0;
#endif
}

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
#if HTP_WIDE_TILES
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
