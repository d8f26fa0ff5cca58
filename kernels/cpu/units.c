/*===- kernels/cpu/units.c - attention heads and MLP units, listed subsets --===*
 *
 * The kernels of the balance hooks (DESIGN §4): a rank computes only the
 * work units the plan gives it, so pruning or handing off a fraction of the
 * units removes that fraction of the FLOPs. Weights are never copied: every
 * GEMM addresses its unit's rows or columns in place through the leading
 * dimension. For MLP units and the row-parallel linear, runs of consecutive
 * unit ids (the usual case: kept sets are ascending) are merged into one
 * GEMM, so keeping every unit costs the same few large GEMMs as the plain
 * kernels. Attention goes head by head (its scores are per head anyway):
 * three qkv GEMMs of head_dim columns per head, where the plain kernel does
 * one for all heads, then the fused attention of attention.c over the images.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Length of the run of consecutive ids starting at units[i]. */
static int64_t run_length(const int32_t *units, int64_t i, int64_t count) {
  int64_t n = 1;
  while (i + n < count && units[i + n] == units[i] + n) ++n;
  return n;
}

void htp_cpu_attention_heads_f32(const float *x, const float *wqkv, const float *bqkv,
                                 float *context, float *scratch, int64_t batch, int64_t tokens,
                                 int64_t model_dim, int64_t num_heads, int64_t head_dim,
                                 const int32_t *heads, int64_t count) {
  const int64_t rows = batch * tokens, inner = num_heads * head_dim, stride = 3 * head_dim;
  float *qkv = scratch;                  /* [rows, q_h | k_h | v_h] */
  float *scores = qkv + rows * stride;   /* [tokens, tokens] */
  for (int64_t i = 0; i < count; ++i) {
    const int64_t h = heads[i];
    /* q, k and v of head h: three row blocks of wqkv, one GEMM each, side by
     * side in qkv (ldc = 3 head_dim) on top of the broadcast biases. */
    for (int64_t part = 0; part < 3; ++part) {
      const int64_t first = part * inner + h * head_dim;
      float *out = qkv + part * head_dim;
      float beta = 0.0f;
      if (bqkv) {
        for (int64_t r = 0; r < rows; ++r)
          memcpy(out + r * stride, bqkv + first, (size_t)head_dim * sizeof(float));
        beta = 1.0f;
      }
      htp__linear_gemm(CblasNoTrans, CblasTrans, rows, head_dim, model_dim, 1.0f, x, model_dim,
                       wqkv + first * model_dim, model_dim, beta, out, stride);
    }
    htp__attend(qkv, stride, head_dim, 2 * head_dim, 0, 1, context + h * head_dim, inner, batch,
                tokens, head_dim, scores);
  }
}

/* GELU in place over rows [begin, end) of a column block of hidden. Inside
 * a pool chunk htp_cpu_gelu_f32 runs serially (the pool is busy). */
struct gelu_rows_job {
  float *out;
  int64_t stride, columns;
  int32_t tanh_approx;
};

static void gelu_rows(void *ctx, int64_t begin, int64_t end) {
  const struct gelu_rows_job *job = ctx;
  for (int64_t r = begin; r < end; ++r)
    htp_cpu_gelu_f32(job->out + r * job->stride, job->out + r * job->stride, job->columns,
                     job->tanh_approx);
}

void htp_cpu_mlp_hidden_units_f32(const float *x, const float *w1, const float *b1,
                                  float *hidden, int64_t rows, int64_t dim, int64_t hidden_dim,
                                  int64_t width, const int32_t *units, int64_t count,
                                  int32_t tanh_approx) {
  for (int64_t i = 0; i < count;) {
    const int64_t run = run_length(units, i, count);
    const int64_t first = (int64_t)units[i] * width, columns = run * width;
    float *out = hidden + first;
    float beta = 0.0f;
    if (b1) {
      for (int64_t r = 0; r < rows; ++r)
        memcpy(out + r * hidden_dim, b1 + first, (size_t)columns * sizeof(float));
      beta = 1.0f;
    }
    htp__linear_gemm(CblasNoTrans, CblasTrans, rows, columns, dim, 1.0f, x, dim, w1 + first * dim,
                     dim, beta, out, hidden_dim);
    if (columns == hidden_dim) { /* whole rows: one contiguous block, one vector tail */
      htp_cpu_gelu_f32(out, out, rows * columns, tanh_approx);
    } else { /* row by row: each row's odd columns end in a scalar tail */
      struct gelu_rows_job job = {out, hidden_dim, columns, tanh_approx};
      htp__parallel(rows, 1 + HTP_GRAIN / (columns > 0 ? columns : 1), gelu_rows, &job);
    }
    i += run;
  }
}

void htp_cpu_linear_units_f32(const float *a, const float *w, float *y, int64_t rows,
                              int64_t in_features, int64_t out_features, int64_t width,
                              const int32_t *units, int64_t count, int32_t accumulate) {
  float beta = accumulate ? 1.0f : 0.0f;
  if (count == 0 && !accumulate) {
    memset(y, 0, (size_t)(rows * out_features) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < count;) {
    const int64_t run = run_length(units, i, count);
    const int64_t first = (int64_t)units[i] * width;
    htp__linear_gemm(CblasNoTrans, CblasTrans, rows, out_features, run * width, 1.0f, a + first,
                     in_features, w + first, in_features, beta, y, out_features);
    beta = 1.0f;
    i += run;
  }
}
