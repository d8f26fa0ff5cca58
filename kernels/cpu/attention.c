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

/* Eight floats as one value (GCC/Clang vector extension): AVX2 registers in
 * the x86-64-v3 clone, register pairs in the baseline one. The aligned(4)
 * type reads and writes rows at any float offset; vectors of float may alias
 * floats. */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));
#define load8(p) (*(const v8u *)(p))
#define store8(p, v) (*(v8u *)(p) = (v))

enum {
  QB = 4,  /* query rows per tile */
  JB = 16, /* keys, or context columns, per tile: two AVX2 vectors */
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

/* One (image, head): ctx[t, :] = softmax_j(scale q_t·k_j) v_j for every
 * token t. q, k, v and ctx are rows of head_dim floats `stride` /
 * `ctx_stride` apart. kt holds head_dim * padded floats (padded = tokens
 * rounded up to JB), s QB * padded, qs QB * head_dim. */
HTP_VECTOR_CLONES
static void attend_head(const float *q, const float *k, const float *v, int64_t stride,
                        float *ctx, int64_t ctx_stride, int64_t tokens, int64_t head_dim,
                        float scale, int64_t padded, float *kt, float *s, float *qs) {
  /* K^T, zero-padded: the score tiles then run over whole JB-wide columns. */
  for (int64_t j = 0; j < padded; ++j)
    for (int64_t d = 0; d < head_dim; ++d)
      kt[d * padded + j] = j < tokens ? k[j * stride + d] : 0.0f;

  for (int64_t t0 = 0; t0 < tokens; t0 += QB) {
    const int64_t valid = tokens - t0 < QB ? tokens - t0 : QB;
    /* Scaled q rows; a short last tile repeats its last row (not stored). */
    for (int64_t r = 0; r < QB; ++r) {
      const float *row = q + (t0 + (r < valid ? r : valid - 1)) * stride;
      for (int64_t d = 0; d < head_dim; ++d)
        qs[r * head_dim + d] = row[d] * scale;
    }
    /* Scores of QB rows against all keys, JB keys at a time: eight vector
     * accumulators, written out so they stay in registers. */
    for (int64_t j0 = 0; j0 < padded; j0 += JB) {
      v8 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
      for (int64_t d = 0; d < head_dim; ++d) {
        const float *kr = kt + d * padded + j0;
        const v8 k0 = load8(kr), k1 = load8(kr + 8);
        const float *qd = qs + d;
        a00 += qd[0] * k0; a01 += qd[0] * k1;
        a10 += qd[head_dim] * k0; a11 += qd[head_dim] * k1;
        a20 += qd[2 * head_dim] * k0; a21 += qd[2 * head_dim] * k1;
        a30 += qd[3 * head_dim] * k0; a31 += qd[3 * head_dim] * k1;
      }
      float *out = s + j0;
      store8(out, a00); store8(out + 8, a01);
      store8(out + padded, a10); store8(out + padded + 8, a11);
      store8(out + 2 * padded, a20); store8(out + 2 * padded + 8, a21);
      store8(out + 3 * padded, a30); store8(out + 3 * padded + 8, a31);
    }
    /* Softmax numerators; the division by the sum is left to the context
     * (head_dim values per row instead of tokens). */
    float inv[QB];
    for (int r = 0; r < QB; ++r) {
      float *row = s + r * padded;
      float max = row[0];
#pragma omp simd reduction(max : max)
      for (int64_t j = 1; j < tokens; ++j)
        max = row[j] > max ? row[j] : max;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < tokens; ++j) {
        row[j] = htp__expf(row[j] - max);
        sum += row[j];
      }
      inv[r] = 1.0f / sum;
    }
    /* p·v, JB context columns at a time; the tail of head_dim below. */
    int64_t d0 = 0;
    for (; d0 + JB <= head_dim; d0 += JB) {
      v8 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
      for (int64_t j = 0; j < tokens; ++j) {
        const float *vr = v + j * stride + d0;
        const v8 v0 = load8(vr), v1 = load8(vr + 8);
        const float *pj = s + j;
        a00 += pj[0] * v0; a01 += pj[0] * v1;
        a10 += pj[padded] * v0; a11 += pj[padded] * v1;
        a20 += pj[2 * padded] * v0; a21 += pj[2 * padded] * v1;
        a30 += pj[3 * padded] * v0; a31 += pj[3 * padded] * v1;
      }
      const v8 acc[QB][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
      for (int64_t r = 0; r < valid; ++r) {
        float *out = ctx + (t0 + r) * ctx_stride + d0;
        store8(out, acc[r][0] * inv[r]);
        store8(out + 8, acc[r][1] * inv[r]);
      }
    }
    if (d0 < head_dim) {
      const int64_t width = head_dim - d0;
      float acc[QB][JB] = {{0}};
      for (int64_t j = 0; j < tokens; ++j) {
        const float *vr = v + j * stride + d0;
        for (int r = 0; r < QB; ++r)
          for (int64_t jj = 0; jj < width; ++jj)
            acc[r][jj] += s[r * padded + j] * vr[jj];
      }
      for (int64_t r = 0; r < valid; ++r)
        for (int64_t jj = 0; jj < width; ++jj)
          ctx[(t0 + r) * ctx_stride + d0 + jj] = acc[r][jj] * inv[r];
    }
  }
}

/* The layout of htp__attend's operands (see cpu_internal.h). */
struct head_job {
  const float *qkv;
  int64_t qkv_stride, k_offset, v_offset, head_step, num_heads;
  float *context;
  int64_t ctx_stride, tokens, head_dim, padded;
  float scale;
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
    attend_head(q, q + job->k_offset, q + job->v_offset, job->qkv_stride,
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
    htp__sgemm(CblasTrans, tokens, tokens, head_dim, job->scale, q, stride, q + job->k_offset,
               stride, 0.0f, scores, tokens);
    htp__softmax_rows(scores, tokens, tokens);
    htp__sgemm(CblasNoTrans, tokens, head_dim, tokens, 1.0f, scores, tokens, q + job->v_offset,
               stride, 0.0f, task_context(job, task), job->ctx_stride);
  }
}

void htp__attend(const float *qkv, int64_t qkv_stride, int64_t k_offset, int64_t v_offset,
                 int64_t head_step, int64_t num_heads, float *context, int64_t ctx_stride,
                 int64_t batch, int64_t tokens, int64_t head_dim, float *scores) {
  const int64_t padded = (tokens + JB - 1) / JB * JB;
  struct head_job job = {qkv, qkv_stride, k_offset, v_offset, head_step, num_heads, context,
                         ctx_stride, tokens, head_dim, padded, 1.0f / sqrtf((float)head_dim)};
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
