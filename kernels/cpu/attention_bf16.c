/*===- kernels/cpu/attention_bf16.c - bf16 attention on the bf16 units ----===*
 *
 * The bf16 attention entry's work as oneDNN bf16 matmuls (AMX tiles,
 * AVX512-BF16), computed as the CUDA kernel and PyTorch's bf16 attention
 * compute it: qkv = x · wqkvᵀ + b rounded to bf16 (f32 accumulation); per
 * image and head, scores = q · kᵀ in f32 from the bf16 q and k, scaled;
 * the softmax in f32, its numerators p = e^(s - max s) rounded to bf16 and
 * the rounded p summed; context = p · v in f32 over the bf16 p and v,
 * divided by that sum and rounded to bf16; y = context · wprojᵀ + bproj,
 * rounded once. So q, k, v, p and the context are bf16 operands, as they
 * are on the GPU (kernels/cuda/attention.cu) and in timm's bf16 Block; the
 * kernel tests' attention bound carries those roundings.
 *
 * Tasks on the kernels' pool, an (image, head) each: the head's q, k and v
 * rows copied out of qkv into the thread's room (contiguous, v and p
 * padded with zeros along the second product's k to whole AMX tile rows),
 * two single-threaded products, the softmax between them.
 * Built where the GEMMs are oneDNN's; non-zero from the entry point sends
 * the caller to the widening path (f32 throughout, then one rounding).
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

/* k of a product padded to whole AMX tile rows (32 bf16) with zeros. */
static int64_t padded_k(int64_t k) { return (k + 31) / 32 * 32; }

struct head_job {
  const htp_bf16 *qkv; /* [rows, 3 inner] */
  htp_bf16 *context;   /* [rows, inner] */
  int64_t tokens, num_heads, head_dim, inner;
  int64_t kp; /* p · v's k (tokens), padded */
  float scale;
  _Atomic int failed;
};

/* A task's operands in its thread's room: q, k [tokens, head_dim], v [kp,
 * head_dim], p [tokens, kp] (bf16); scores [tokens, tokens], context
 * [tokens, head_dim], inv [tokens], e [tokens] (f32). */
typedef struct head_room {
  htp_bf16 *q, *k, *v, *p;
  float *scores, *context, *inv, *e;
} head_room;

static int take_room(const struct head_job *job, head_room *room) {
  const int64_t tokens = job->tokens, head_dim = job->head_dim, kp = job->kp;
  const size_t bf16s = (size_t)(2 * tokens * head_dim + kp * head_dim + tokens * kp);
  const size_t even = (bf16s + 1) / 2 * 2; /* the floats 4-byte aligned */
  const size_t floats = (size_t)(tokens * tokens + tokens * head_dim + 2 * tokens);
  htp_bf16 *base =
      htp__thread_room(HTP_ROOM_ATTENTION, even * sizeof(htp_bf16) + floats * sizeof(float));
  if (!base) return 1;
  room->q = base;
  room->k = room->q + tokens * head_dim;
  room->v = room->k + tokens * head_dim;
  room->p = room->v + kp * head_dim;
  room->scores = (float *)(base + even);
  room->context = room->scores + tokens * tokens;
  room->inv = room->context + tokens * head_dim;
  room->e = room->inv + tokens;
  /* The zero padding along the second product's k (the same for every head). */
  memset(room->v + tokens * head_dim, 0, (size_t)((kp - tokens) * head_dim) * sizeof(htp_bf16));
  for (int64_t t = 0; t < tokens; t++)
    memset(room->p + t * kp + tokens, 0, (size_t)(kp - tokens) * sizeof(htp_bf16));
  return 0;
}

/* One softmax row: p = bf16(e^(scale (s - max s))) into p_row, e as room;
 * returns 1 / the sum of the rounded p (htp__expf, as the f32 kernel). */
HTP_VECTOR_CLONES
static float softmax_row(const float *s, float scale, int64_t tokens, float *e,
                         htp_bf16 *p_row) {
  float max = s[0];
#pragma omp simd reduction(max : max)
  for (int64_t j = 1; j < tokens; j++) max = s[j] > max ? s[j] : max;
#pragma omp simd
  for (int64_t j = 0; j < tokens; j++) e[j] = htp__expf(scale * (s[j] - max));
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < tokens; j++) {
    const htp_bf16 rounded = htp_bf16_from_f32(e[j]);
    p_row[j] = rounded;
    sum += htp_bf16_to_f32(rounded);
  }
  return 1.0f / sum;
}

/* A context row: bf16(c · inv). */
HTP_VECTOR_CLONES
static void context_row(const float *c, float inv, htp_bf16 *out, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; d++) out[d] = htp_bf16_from_f32(c[d] * inv);
}

/* Head h of image b: its context columns. */
static int one_head(const struct head_job *job, const head_room *room, int64_t b, int64_t h) {
  const int64_t tokens = job->tokens, head_dim = job->head_dim, inner = job->inner;
  const int64_t kp = job->kp, stride = 3 * inner;
  const size_t row_bytes = (size_t)head_dim * sizeof(htp_bf16);
  const htp__matmul scores_shape = {.batch = 1, .m = tokens, .k = head_dim, .n = tokens,
                                    .a_batch = tokens * head_dim, .a_row = head_dim,
                                    .b_batch = tokens * head_dim, .b_k = 1, .b_n = head_dim,
                                    .c_batch = tokens * tokens, .c_row = tokens, .f32_out = 1};
  const htp__matmul context_shape = {.batch = 1, .m = tokens, .k = kp, .n = head_dim,
                                     .a_batch = tokens * kp, .a_row = kp,
                                     .b_batch = kp * head_dim, .b_k = head_dim, .b_n = 1,
                                     .c_batch = tokens * head_dim, .c_row = head_dim,
                                     .f32_out = 1};
  const htp_bf16 *image = job->qkv + b * tokens * stride + h * head_dim;
  for (int64_t t = 0; t < tokens; t++) {
    const htp_bf16 *q = image + t * stride;
    memcpy(room->q + t * head_dim, q, row_bytes);
    memcpy(room->k + t * head_dim, q + inner, row_bytes);
    memcpy(room->v + t * head_dim, q + 2 * inner, row_bytes);
  }
  if (htp__onednn_matmul(&scores_shape, room->q, room->k, NULL, room->scores)) return 1;
  for (int64_t t = 0; t < tokens; t++)
    room->inv[t] = softmax_row(room->scores + t * tokens, job->scale, tokens, room->e,
                               room->p + t * kp);
  if (htp__onednn_matmul(&context_shape, room->p, room->v, NULL, room->context)) return 1;
  for (int64_t t = 0; t < tokens; t++)
    context_row(room->context + t * head_dim, room->inv[t],
                job->context + (b * tokens + t) * inner + h * head_dim, head_dim);
  return 0;
}

/* Tasks [begin, end) of batch * num_heads, image-major. */
static void head_tasks(void *ctx, int64_t begin, int64_t end) {
  struct head_job *job = ctx;
  head_room room;
  if (take_room(job, &room)) {
    atomic_store(&job->failed, 1);
    return;
  }
  for (int64_t task = begin; task < end; task++)
    if (one_head(job, &room, task / job->num_heads, task % job->num_heads)) {
      atomic_store(&job->failed, 1);
      return;
    }
}

/* qkv [rows, 3 inner] (room for it) and the context [rows, inner], bf16. */
static int attention_context(const htp_bf16 *x, const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                             htp_bf16 *qkv, htp_bf16 *context, int64_t batch, int64_t tokens,
                             int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const int64_t rows = batch * tokens, inner = num_heads * head_dim;
  if (htp__onednn_linear_bf16(x, wqkv, bqkv, qkv, rows, model_dim, 3 * inner)) return 1;
  struct head_job job = {qkv, context, tokens, num_heads, head_dim, inner, padded_k(tokens),
                         1.0f / sqrtf((float)head_dim), 0};
  htp__parallel(batch * num_heads, 1, head_tasks, &job);
  return atomic_load(&job.failed);
}

int htp__attention_context_bf16_units(const htp_kernel_env *env, const htp_bf16 *x,
                                      const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                      htp_bf16 *context, int64_t batch, int64_t tokens,
                                      int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const int64_t qkv_bf16s = htp__size_mul(htp__size_mul(batch, tokens),
                                          htp__size_mul(htp__size_mul(num_heads, head_dim), 3));
  if (qkv_bf16s < 0) return 1;
  float *owned, *room = htp__cpu_f32_room(env, (qkv_bf16s + 1) / 2, &owned);
  if (!room) return 1;
  const int failed = attention_context(x, wqkv, bqkv, (htp_bf16 *)room, context, batch, tokens,
                                       model_dim, num_heads, head_dim);
  free(owned);
  return failed;
}

int htp__attention_bf16_units(const htp_kernel_env *env, const htp_bf16 *x,
                              const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                              const htp_bf16 *wproj, const htp_bf16 *bproj, htp_bf16 *y,
                              float *scratch, int64_t scratch_floats, int64_t batch,
                              int64_t tokens, int64_t model_dim, int64_t num_heads,
                              int64_t head_dim) {
  (void)env;
  const int64_t needed =
      htp_cpu_attention_scratch_floats(batch, tokens, model_dim, num_heads, head_dim);
  if (needed < 0 || scratch_floats < needed) return 1;
  const int64_t rows = batch * tokens, inner = num_heads * head_dim;
  /* The f32 kernel's scratch layout, half used: qkv, then the context. */
  htp_bf16 *qkv = (htp_bf16 *)scratch, *context = (htp_bf16 *)(scratch + rows * 3 * inner);
  return attention_context(x, wqkv, bqkv, qkv, context, batch, tokens, model_dim, num_heads,
                           head_dim) ||
         htp__onednn_linear_bf16(context, wproj, bproj, y, rows, inner, model_dim);
}
