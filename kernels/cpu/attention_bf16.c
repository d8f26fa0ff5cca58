/*===- kernels/cpu/attention_bf16.c - bf16 attention on the bf16 units ----===*
 *
 * The bf16 attention entry's work as oneDNN bf16 matmuls (AMX tiles,
 * AVX512-BF16), with the entry's contract kept: f32 accumulation, f32
 * intermediates, y rounded once. qkv = x · wqkvᵀ + b is a bf16 product
 * into f32. Its q, k and v, the softmax's p and the context are f32 values,
 * which the bf16 units cannot take whole; each is split into bf16 pieces,
 * hi = bf16(v), then the rest likewise, and a product of two split operands
 * is the sum in f32 of the pieces' products, one matmul over the pieces
 * side by side along k:
 *   scores q·kᵀ: three pieces each (exact: three bf16 hold f32's 24 bits),
 *     the six products down to 2^-24 of the whole (an error of e in a
 *     score is one of e relative in its probability, and scores reach the
 *     tens: two pieces, 2^-16, failed kernels.bf16's bound at 197 tokens);
 *   p·v: two pieces each, hi·hi + hi·lo + lo·hi (within 2^-16);
 *   the output projection: the context in two pieces against wproj twice.
 * The softmax itself stays in f32 (the f32 kernel's: max, htp__expf, the
 * division by the sum left to the context). Four times the bf16 work of a
 * plain bf16 attention's products, and still faster than the f32 kernel.
 *
 * Tasks on the kernels' pool: an image each where there are at least two
 * per thread (the image's qkv, 1.8 MiB of f32 for ViT-B, stays in the
 * thread's work room, cpu/onednn.c, instead of going through memory), else
 * an (image, head) each after one qkv GEMM over all rows. A head's operands
 * take about 0.8 MiB of the room for ViT-B.
 * Without AMX (AVX512-BF16 alone) a bf16 product runs at only about twice
 * an f32 one's rate, so the pieces' products (six and three times the
 * work) cost more than the f32 kernel's fused heads: there the heads run
 * in f32 on the f32 qkv (htp__attend, the f32 entry's own), and only the
 * qkv and output projections are bf16 products (on a Zen 5, 2 cores, ViT-B
 * batch 8, alternating: the bf16 block 34.1-35.9 ms against 36.0-37.7 ms
 * with the pieces). ONEDNN_MAX_CPU_ISA picks the path as it caps oneDNN's
 * ISA.
 * Built where the GEMMs are oneDNN's; non-zero from the entry point sends
 * the caller to the widening path.
 *===----------------------------------------------------------------------===*/
#include "kernels/cpu/attention_bf16.h"

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/env.h"
#include "kernels/cpu/onednn.h"
#include "kernels/htp_kernels.h"
#include "kernels/htp_scratch.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { PREFETCH_ROWS = 6 };

/* k of a product padded to whole AMX tile rows (32 bf16) with zeros. */
static int64_t padded_k(int64_t k) { return (k + 31) / 32 * 32; }

/* hi[i] = bf16(s x[i]), lo[i] = bf16(s x[i] - hi[i]); a second copy of hi
 * where hi2 is not NULL. */
HTP_VECTOR_CLONES
static void split(const float *x, float scale, htp_bf16 *hi, htp_bf16 *hi2, htp_bf16 *lo,
                  int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float v = x[i] * scale;
    const htp_bf16 h = htp_bf16_from_f32(v);
    hi[i] = h;
    lo[i] = htp_bf16_from_f32(v - htp_bf16_to_f32(h));
  }
  if (hi2)
    for (int64_t i = 0; i < n; i++) hi2[i] = hi[i];
}

/* The scores' operands in three pieces, v = hi + mid + lo exactly; the six
 * products down to 2^-24 of the whole are taken along k as
 *   q: [hi | hi  | hi | mid | mid | lo]
 *   k: [hi | mid | lo | hi  | mid | hi]  */
HTP_VECTOR_CLONES
static void split3(const float *x, float scale, htp_bf16 *hi, htp_bf16 *mid, htp_bf16 *lo,
                   int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float v = x[i] * scale;
    const htp_bf16 h = htp_bf16_from_f32(v);
    const float rest = v - htp_bf16_to_f32(h);
    const htp_bf16 m = htp_bf16_from_f32(rest);
    hi[i] = h;
    mid[i] = m;
    lo[i] = htp_bf16_from_f32(rest - htp_bf16_to_f32(m));
  }
}

/* One row of q (scaled) or k, n values, into its six parts of n. */
static void score_row(const float *x, float scale, int is_q, htp_bf16 *row, int64_t n) {
  const size_t bytes = (size_t)n * sizeof *row;
  if (is_q) {
    split3(x, scale, row, row + 3 * n, row + 5 * n, n);
    memcpy(row + n, row, bytes);
    memcpy(row + 2 * n, row, bytes);
    memcpy(row + 4 * n, row + 3 * n, bytes);
  } else {
    split3(x, scale, row, row + n, row + 2 * n, n);
    memcpy(row + 3 * n, row, bytes);
    memcpy(row + 4 * n, row + n, bytes);
    memcpy(row + 5 * n, row, bytes);
  }
}

/* One softmax row's numerators p = e^(s - max s), split into pcat's three
 * parts [phi | phi | plo]; returns 1 / sum p (htp__expf, as the f32 kernel). */
HTP_VECTOR_CLONES
static float softmax_split(const float *s, int64_t tokens, htp_bf16 *pcat, float *p) {
  float max = s[0];
#pragma omp simd reduction(max : max)
  for (int64_t j = 1; j < tokens; j++) max = s[j] > max ? s[j] : max;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < tokens; j++) {
    p[j] = htp__expf(s[j] - max);
    sum += p[j];
  }
  split(p, 1.0f, pcat, pcat + tokens, pcat + 2 * tokens, tokens);
  return 1.0f / sum;
}

/* The context's row pieces: c = ctx · inv, split into chi and clo. */
HTP_VECTOR_CLONES
static void scale_split(const float *ctx, float inv, htp_bf16 *hi, htp_bf16 *lo, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float c = ctx[i] * inv;
    const htp_bf16 h = htp_bf16_from_f32(c);
    hi[i] = h;
    lo[i] = htp_bf16_from_f32(c - htp_bf16_to_f32(h));
  }
}

struct head_job {
  const float *qkv; /* [rows, 3 inner]; NULL: per image, from x (below) */
  const htp_bf16 *x, *wqkv, *bqkv;
  htp_bf16 *ccat; /* [rows, 2 inner]: chi, then clo */
  int64_t tokens, num_heads, head_dim, inner, model_dim;
  int64_t kq, kp; /* the two products' k, padded */
  float scale;
  _Atomic int failed;
};

/* A task's operands in its thread's room: qcat, kcat [tokens, kq]; pcat
 * [tokens, kp]; vcat [kp, head_dim] (bf16); scores [tokens, tokens],
 * context [tokens, head_dim], p [tokens], inv [tokens] and, per image, the
 * image's qkv [tokens, 3 inner] (f32). */
typedef struct head_room {
  htp_bf16 *qcat, *kcat, *pcat, *vcat;
  float *scores, *context, *p, *inv, *qkv;
} head_room;

static int take_room(const struct head_job *job, head_room *room) {
  const int64_t tokens = job->tokens, head_dim = job->head_dim, kq = job->kq, kp = job->kp;
  const size_t bf16s = (size_t)(2 * tokens * kq + tokens * kp + kp * head_dim);
  const size_t even = (bf16s + 1) / 2 * 2; /* the floats 4-byte aligned */
  const size_t floats = (size_t)(tokens * tokens + tokens * head_dim + 2 * tokens +
                                 (job->qkv ? 0 : tokens * 3 * job->inner));
  htp_bf16 *base = htp__onednn_thread_room(even * sizeof(htp_bf16) + floats * sizeof(float));
  if (!base) return 1;
  room->qcat = base;
  room->kcat = room->qcat + tokens * kq;
  room->pcat = room->kcat + tokens * kq;
  room->vcat = room->pcat + tokens * kp;
  room->scores = (float *)(base + even);
  room->context = room->scores + tokens * tokens;
  room->p = room->context + tokens * head_dim;
  room->inv = room->p + tokens;
  room->qkv = room->inv + tokens;
  /* The zero padding along k (the same for every head). */
  for (int64_t t = 0; t < tokens; t++) {
    for (int64_t i = 6 * head_dim; i < kq; i++) room->qcat[t * kq + i] = room->kcat[t * kq + i] = 0;
    for (int64_t i = 3 * tokens; i < kp; i++) room->pcat[t * kp + i] = 0;
  }
  for (int64_t i = 3 * tokens * head_dim; i < kp * head_dim; i++) room->vcat[i] = 0;
  return 0;
}

/* Head h of image b, its q rows at q0 (k and v inner and 2 inner further,
 * rows `stride` apart): the context's chi and clo into ccat. */
static int one_head(const struct head_job *job, const head_room *room, const float *q0,
                    int64_t stride, int64_t b, int64_t h) {
  const int64_t tokens = job->tokens, head_dim = job->head_dim, inner = job->inner;
  const int64_t kq = job->kq, kp = job->kp;
  const htp__matmul scores_shape = {.batch = 1, .m = tokens, .k = kq, .n = tokens,
                                    .a_batch = tokens * kq, .a_row = kq,
                                    .b_batch = tokens * kq, .b_k = 1, .b_n = kq,
                                    .c_batch = tokens * tokens, .c_row = tokens, .f32_out = 1};
  const htp__matmul context_shape = {.batch = 1, .m = tokens, .k = kp, .n = head_dim,
                                     .a_batch = tokens * kp, .a_row = kp,
                                     .b_batch = kp * head_dim, .b_k = head_dim, .b_n = 1,
                                     .c_batch = tokens * head_dim, .c_row = head_dim,
                                     .f32_out = 1};
  htp_bf16 *qcat = room->qcat, *kcat = room->kcat, *pcat = room->pcat, *vcat = room->vcat;
  for (int64_t t = 0; t < tokens; t++) {
    const float *q = q0 + t * stride, *k = q + inner, *v = q + 2 * inner;
    /* Rows a qkv row apart defeat the hardware prefetcher: each row's
     * lines a few rows ahead. */
    if (t + PREFETCH_ROWS < tokens)
      for (int64_t part = 0; part < 3; part++)
        for (int64_t d = 0; d < head_dim; d += 16)
          __builtin_prefetch(q + PREFETCH_ROWS * stride + part * inner + d);
    htp_bf16 *qr = qcat + t * kq, *kr = kcat + t * kq;
    score_row(q, job->scale, 1, qr, head_dim);
    score_row(k, 1.0f, 0, kr, head_dim);
    split(v, 1.0f, vcat + t * head_dim, vcat + (2 * tokens + t) * head_dim,
          vcat + (tokens + t) * head_dim, head_dim);
  }
  if (htp__onednn_matmul(&scores_shape, qcat, kcat, NULL, room->scores)) return 1;
  for (int64_t t = 0; t < tokens; t++)
    room->inv[t] = softmax_split(room->scores + t * tokens, tokens, pcat + t * kp, room->p);
  if (htp__onednn_matmul(&context_shape, pcat, vcat, NULL, room->context)) return 1;
  for (int64_t t = 0; t < tokens; t++) {
    htp_bf16 *row = job->ccat + (b * tokens + t) * 2 * inner + h * head_dim;
    scale_split(room->context + t * head_dim, room->inv[t], row, row + inner, head_dim);
  }
  return 0;
}

/* Tasks [begin, end) of batch * num_heads (image-major) from job->qkv, or,
 * without it, of batch: one image's qkv into the room, then its heads. */
static void head_tasks(void *ctx, int64_t begin, int64_t end) {
  struct head_job *job = ctx;
  const int64_t tokens = job->tokens, inner = job->inner, stride = 3 * inner;
  head_room room;
  if (take_room(job, &room)) {
    atomic_store(&job->failed, 1);
    return;
  }
  const htp__matmul qkv_shape = {.batch = 1, .m = tokens, .k = job->model_dim, .n = stride,
                                 .a_batch = tokens * job->model_dim, .a_row = job->model_dim,
                                 .b_batch = job->model_dim * stride, .b_k = 1,
                                 .b_n = job->model_dim, .c_batch = tokens * stride,
                                 .c_row = stride, .bias = job->bqkv != NULL, .f32_out = 1};
  for (int64_t task = begin; task < end; task++) {
    int failed = 0;
    if (job->qkv) {
      const int64_t b = task / job->num_heads, h = task % job->num_heads;
      failed = one_head(job, &room, job->qkv + b * tokens * stride + h * job->head_dim, stride,
                        b, h);
    } else {
      failed = htp__onednn_matmul(&qkv_shape, job->x + task * tokens * job->model_dim,
                                  job->wqkv, job->bqkv, room.qkv);
      for (int64_t h = 0; h < job->num_heads && !failed; h++)
        failed = one_head(job, &room, room.qkv + h * job->head_dim, stride, task, h);
    }
    if (failed) {
      atomic_store(&job->failed, 1);
      return;
    }
  }
}

struct concat_job {
  const htp_bf16 *w;
  htp_bf16 *wcat;
  int64_t inner;
};

/* Rows [begin, end) of [w | w]. */
static void concat_rows(void *ctx, int64_t begin, int64_t end) {
  const struct concat_job *job = ctx;
  for (int64_t o = begin; o < end; o++)
    for (int64_t i = 0; i < job->inner; i++)
      job->wcat[o * 2 * job->inner + i] = job->wcat[o * 2 * job->inner + job->inner + i] =
          job->w[o * job->inner + i];
}

/* y = ccat · [wproj | wproj]ᵀ + bproj: the context, split into [chi | clo]
 * rows, through the output projection, rounded once. */
static int project_context(const htp_kernel_env *env, const htp_bf16 *ccat,
                           const htp_bf16 *wproj, const htp_bf16 *bproj, htp_bf16 *y,
                           int64_t rows, int64_t inner, int64_t model_dim) {
  float *owned, *room = htp__cpu_f32_room(env, htp__size_mul(model_dim, inner), &owned);
  if (!room) return 1;
  struct concat_job concat = {wproj, (htp_bf16 *)room /* [model_dim, 2 inner] */, inner};
  htp__parallel(model_dim, 1 + HTP_GRAIN / (2 * inner), concat_rows, &concat);
  const int failed =
      htp__onednn_linear_bf16(ccat, concat.wcat, bproj, y, rows, 2 * inner, model_dim);
  free(owned);
  return failed;
}

struct split_job {
  float *context; /* [rows, inner] f32, becoming [rows, 2 inner] bf16 in place */
  int64_t inner;
  _Atomic int failed;
};

/* Rows [begin, end) of the f32 context into [chi | clo], each in place
 * (a row's bf16 pair takes its f32 bytes) through the thread's room. */
static void split_rows(void *ctx, int64_t begin, int64_t end) {
  struct split_job *job = ctx;
  const int64_t inner = job->inner;
  float *row_copy = htp__onednn_thread_room((size_t)inner * sizeof(float));
  if (!row_copy) {
    atomic_store(&job->failed, 1);
    return;
  }
  for (int64_t r = begin; r < end; r++) {
    float *row = job->context + r * inner;
    memcpy(row_copy, row, (size_t)inner * sizeof(float));
    htp_bf16 *pair = (htp_bf16 *)row;
    scale_split(row_copy, 1.0f, pair, pair + inner, inner);
  }
}

/* Without AMX: qkv a bf16 product into f32, the heads in f32 (the f32
 * kernel's), the context split for the bf16 output projection. The scratch
 * as the f32 kernel's: [qkv][context][scores]. */
static int attention_f32_heads(const htp_kernel_env *env, const htp_bf16 *x,
                               const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                               const htp_bf16 *wproj, const htp_bf16 *bproj, htp_bf16 *y,
                               float *scratch, int64_t batch, int64_t tokens, int64_t model_dim,
                               int64_t num_heads, int64_t head_dim) {
  const int64_t rows = batch * tokens, inner = num_heads * head_dim;
  float *qkv = scratch, *context = qkv + rows * 3 * inner, *scores = context + rows * inner;
  if (htp__onednn_linear_bf16_f32(x, wqkv, bqkv, qkv, rows, model_dim, 3 * inner)) return 1;
  htp__attend(qkv, 3 * inner, inner, 2 * inner, head_dim, num_heads, context, inner, batch,
              tokens, head_dim, scores);
  struct split_job split = {context, inner, 0};
  htp__parallel(rows, 1 + HTP_GRAIN / inner, split_rows, &split);
  if (atomic_load(&split.failed)) return 1;
  return project_context(env, (const htp_bf16 *)context, wproj, bproj, y, rows, inner,
                         model_dim);
}

struct round_job {
  const float *from;
  htp_bf16 *to;
};

static void round_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct round_job *job = ctx;
  htp_bf16_from_f32_n(job->from + begin, job->to + begin, end - begin);
}

int htp__attention_context_bf16_units(const htp_kernel_env *env, const htp_bf16 *x,
                                      const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                      htp_bf16 *context, int64_t batch, int64_t tokens,
                                      int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const int64_t needed =
      htp_cpu_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  if (needed < 0) return 1;
  float *owned, *room = htp__cpu_f32_room(env, needed, &owned);
  if (!room) return 1;
  const int64_t rows = batch * tokens, inner = num_heads * head_dim;
  float *qkv = room, *ctx = qkv + rows * 3 * inner, *scores = ctx + rows * inner;
  const int failed =
      htp__onednn_linear_bf16_f32(x, wqkv, bqkv, qkv, rows, model_dim, 3 * inner);
  if (!failed) {
    htp__attend(qkv, 3 * inner, inner, 2 * inner, head_dim, num_heads, ctx, inner, batch, tokens,
                head_dim, scores);
    struct round_job round = {ctx, context};
    htp__parallel(rows * inner, HTP_GRAIN, round_chunk, &round);
  }
  free(owned);
  return failed;
}

int htp__attention_bf16_units(const htp_kernel_env *env, const htp_bf16 *x,
                              const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                              const htp_bf16 *wproj, const htp_bf16 *bproj, htp_bf16 *y,
                              float *scratch, int64_t scratch_floats, int64_t batch,
                              int64_t tokens, int64_t model_dim, int64_t num_heads,
                              int64_t head_dim) {
  const int64_t needed =
      htp_cpu_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  if (needed < 0 || scratch_floats < needed) return 1;
  if (!htp__onednn_has_amx())
    return attention_f32_heads(env, x, wqkv, bqkv, wproj, bproj, y, scratch, batch, tokens,
                               model_dim, num_heads, head_dim);
  const int64_t rows = batch * tokens, inner = num_heads * head_dim;
  /* The f32 kernel's scratch layout: qkv (f32), then the context's floats,
   * which hold [chi | clo] exactly. */
  float *qkv = scratch;
  htp_bf16 *ccat = (htp_bf16 *)(qkv + rows * 3 * inner);
  /* An image per task where there are enough images for the threads: its
   * qkv stays in the thread's room instead of going through memory in f32. */
  const int per_image = batch >= 2 * htp__threads();
  struct head_job job = {per_image ? NULL : qkv, x, wqkv, bqkv, ccat, tokens, num_heads,
                         head_dim, inner, model_dim, padded_k(6 * head_dim),
                         padded_k(3 * tokens), 1.0f / sqrtf((float)head_dim), 0};
  int failed =
      per_image ? 0 : htp__onednn_linear_bf16_f32(x, wqkv, bqkv, qkv, rows, model_dim, 3 * inner);
  if (!failed) {
    htp__parallel(per_image ? batch : batch * num_heads, 1, head_tasks, &job);
    failed = atomic_load(&job.failed);
  }
  return failed ||
         project_context(env, ccat, wproj, bproj, y, rows, inner, model_dim);
}
