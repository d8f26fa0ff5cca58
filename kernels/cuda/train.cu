/*===- kernels/cuda/train.cu - Backward kernels, the loss, optimizers -----===*
 *
 * CUDA twins of kernels/cpu/backward.c and kernels/cpu/optim.c (the CUDA
 * table's training entries, cuda/train.h), f32, with the CPU kernels'
 * formulas and conventions: dx written, parameter gradients accumulated
 * (+=), a NULL gradient not computed.
 *
 * GEMMs go through cuBLAS (htp_cuda_gemm, f32 compute, no TF32). Every
 * other reduction has an order fixed by the shapes alone, so a step's
 * gradients are the same bits from run to run: column sums (db, dgamma,
 * dbeta) take one block per 32 columns, each of 16 row lanes summing its
 * rows in order in double, then the 16 partials in order; row sums (layer
 * norm's statistics, the loss's log-sum-exp, softmax's backward dot) run
 * in double over a fixed tree of lanes; the loss's mean adds the rows'
 * losses in one block in a fixed order. The CPU orders its sums
 * differently, so the two agree to f32 round-off, not bitwise.
 *
 * Attention's adjoint recomputes the forward into its scratch as the CPU
 * twin does, with the same scratch size (htp_cpu_attention_backward_scratch_floats,
 * which the runtime's balance hooks use whatever the device), in floats:
 *   [qkv: rows * 3 * inner][context: rows * inner][dcontext: rows * inner]
 *   [dqkv: rows * 3 * inner][P: S * tokens²][dP: S * tokens²]
 * rows = batch * tokens, inner = num_heads * head_dim, S = min(batch *
 * num_heads, HTP_ATTN_BWD_SLOTS). The (image, head) pairs go S at a time
 * through strided batched GEMMs: the heads of one image (their q, k, v and
 * context columns head_dim floats apart) or one head of several images
 * (one image's rows apart), whichever takes fewer groups. Per group:
 * P = softmax(q kᵀ s), context = P v, then dP = dcontext vᵀ, dS = P ∘ (dP
 * - rowsum(P ∘ dP)) s, dv = Pᵀ dcontext, dq = dS k, dk = dSᵀ q. The softmax
 * is the forward's (attention.cu, htp_cuda_softmax_rows), so the recomputed
 * forward is the CUDA forward's. The projections' gradients are
 * linear_backward's, around the groups.
 *
 * Layer norm's statistics (for the column pass) and the loss's per-row
 * values go in the kernel object's workspace, as the bf16 unit kernels'
 * intermediates do: growing it waits for the stream once (the buffer may
 * still be read), nothing else here waits on the host.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/train.h"

#include "kernels/cuda/kernels_internal.h"
#include "kernels/htp_scratch.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
/* Column sums: a block of kColumnTile columns by kRowLanes row lanes. */
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 16;
/* Grids stop growing here; the kernels stride over the rest. */
constexpr int64_t kMaxBlocks = 1 << 16;

unsigned grid_for(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return (unsigned)(blocks < 1 ? 1 : (blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

/* ----- Reductions in double ------------------------------------------------ */

__device__ __forceinline__ double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

/* Sum over a block of kThreads; every thread gets it. shared: kWarps. */
__device__ double block_sum(double value, double *shared) {
  value = warp_sum(value);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads(); /* shared may still be read from a previous call */
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < kWarps; ++i)
    total += shared[i];
  return total;
}

/* out[c] += Σ_r a[r*ld + c] for c < cols (blocks of kColumnTile x
 * kRowLanes threads). */
__global__ void column_sum_kernel(const float *a, int64_t rows, int64_t cols, int64_t ld,
                                  float *out) {
  __shared__ double partial[kRowLanes][kColumnTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t c0 = (int64_t)blockIdx.x * kColumnTile; c0 < cols;
       c0 += (int64_t)gridDim.x * kColumnTile) {
    const int64_t c = c0 + tx;
    double acc = 0.0;
    if (c < cols)
      for (int64_t r = ty; r < rows; r += kRowLanes)
        acc += a[r * ld + c];
    partial[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < cols) {
      double sum = 0.0;
      for (int i = 0; i < kRowLanes; ++i)
        sum += partial[i][tx];
      out[c] += (float)sum;
    }
    __syncthreads(); /* partial is rewritten for the next tile */
  }
}

int column_sum_acc(htp_cuda_kernels *kernels, const float *a, int64_t rows, int64_t cols,
                   int64_t ld, float *out) {
  if (rows == 0 || cols == 0)
    return 0;
  column_sum_kernel<<<grid_for(cols, kColumnTile), dim3(kColumnTile, kRowLanes), 0,
                      kernels->stream>>>(a, rows, cols, ld, out);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

/* ----- Linear ------------------------------------------------------------ */

/* dx = dy·w (written), dw += dyᵀ·x, db += Σ_rows dy; sizes in [0, INT_MAX].
 * Row-major [r, c] is column-major [c, r], so dxᵀ = wᵀ·dyᵀ is gemm(N, N)
 * on w and dy as stored and dwᵀ += xᵀ·dy is gemm(N, T) on x and dy. */
int linear_backward(htp_cuda_kernels *kernels, const float *x, const float *w, const float *dy,
                    float *dx, float *dw, float *db, int64_t rows, int64_t in_features,
                    int64_t out_features) {
  const int m = (int)in_features, n = (int)rows, k = (int)out_features;
  if (dx && rows > 0 && in_features > 0) {
    if (out_features == 0)
      HTP_CUDA_CHECK(kernels, cudaMemsetAsync(dx, 0, (size_t)(rows * in_features) * sizeof(float),
                                              kernels->stream));
    else if (htp_cuda_gemm(kernels, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1.0f, w, m, dy, k, 0.0f,
                           dx, m))
      return 1;
  }
  if (db && column_sum_acc(kernels, dy, rows, out_features, out_features, db))
    return 1;
  if (dw && rows > 0 && in_features > 0 && out_features > 0 &&
      htp_cuda_gemm(kernels, CUBLAS_OP_N, CUBLAS_OP_T, m, k, n, 1.0f, x, m, dy, k, 1.0f, dw, m))
    return 1;
  return 0;
}

/* ----- Layer norm -------------------------------------------------------- */

/* One block per row (striding over rows): the statistics in double, as the
 * forward's, into stats (when not NULL) and dx = rstd (g - mean(g) - x̂
 * mean(g x̂)), g = dy γ (γ NULL: ones), in f32 from double coefficients, as
 * the CPU twin. */
__global__ void layer_norm_rows_kernel(const float *x, const float *gamma, const float *dy,
                                       float *dx, double *stats, int64_t rows, int64_t dim,
                                       float epsilon) {
  __shared__ double shared[kWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * dim, *dyr = dy + r * dim;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
      sum += xr[i];
    const double mean = block_sum(sum, shared) / (double)dim;
    double squares = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const double centred = (double)xr[i] - mean;
      squares += centred * centred;
    }
    const double rstd = 1.0 / sqrt(block_sum(squares, shared) / (double)dim + (double)epsilon);
    if (stats && threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
    if (!dx)
      continue;
    double g_sum = 0.0, gx_sum = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const double g = (double)dyr[i] * (gamma ? (double)gamma[i] : 1.0);
      g_sum += g;
      gx_sum += g * ((double)xr[i] - mean);
    }
    g_sum = block_sum(g_sum, shared);
    gx_sum = block_sum(gx_sum, shared);
    const double g_mean = g_sum / (double)dim, gx_mean = gx_sum * rstd / (double)dim;
    const float a = (float)rstd, b = (float)(rstd * g_mean), c = (float)(rstd * rstd * gx_mean);
    float *dxr = dx + r * dim;
    /* The sums above ended in a barrier: every read of the row is done. */
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float g = gamma ? dyr[i] * gamma[i] : dyr[i];
      dxr[i] = a * g - b - ((float)((double)xr[i] - mean)) * c;
    }
  }
}

/* dγ += Σ_rows dy x̂, dβ += Σ_rows dy from the saved statistics, the
 * column sums' blocks and order. */
__global__ void layer_norm_columns_kernel(const float *x, const float *dy, const double *stats,
                                          float *dgamma, float *dbeta, int64_t rows,
                                          int64_t dim) {
  __shared__ double partial_g[kRowLanes][kColumnTile + 1];
  __shared__ double partial_b[kRowLanes][kColumnTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t c0 = (int64_t)blockIdx.x * kColumnTile; c0 < dim;
       c0 += (int64_t)gridDim.x * kColumnTile) {
    const int64_t c = c0 + tx;
    double acc_g = 0.0, acc_b = 0.0;
    if (c < dim)
      for (int64_t r = ty; r < rows; r += kRowLanes) {
        const float d = dy[r * dim + c];
        acc_g += d * (((double)x[r * dim + c] - stats[2 * r]) * stats[2 * r + 1]);
        acc_b += d;
      }
    partial_g[ty][tx] = acc_g;
    partial_b[ty][tx] = acc_b;
    __syncthreads();
    if (ty == 0 && c < dim) {
      double sum_g = 0.0, sum_b = 0.0;
      for (int i = 0; i < kRowLanes; ++i) {
        sum_g += partial_g[i][tx];
        sum_b += partial_b[i][tx];
      }
      if (dgamma)
        dgamma[c] += (float)sum_g;
      if (dbeta)
        dbeta[c] += (float)sum_b;
    }
    __syncthreads();
  }
}

/* ----- GELU -------------------------------------------------------------- */

/* The CPU twin's derivatives: exact, Φ(x) + x φ(x) with Φ from erfc of |x|
 * (full relative precision on both sides); tanh form, (1 + t)/2 + x (1 -
 * t²) k (1 + 3 c x²)/2 through e = e^{-2|u|}. dx may equal dy. */
__global__ void gelu_backward_kernel(const float *x, const float *dy, float *dx, int64_t n,
                                     int32_t tanh_approx) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    float grad;
    if (tanh_approx) {
      const float k = 0.7978845608028654f, c = 0.044715f;
      const float u = k * (v + c * v * v * v);
      const float e = expf(-2.0f * fabsf(u));
      const float inv = 1.0f / (1.0f + e);
      const float one_plus_tanh = u >= 0.0f ? 2.0f * inv : 2.0f * e * inv;
      const float sech2 = 4.0f * e * inv * inv;
      grad = 0.5f * one_plus_tanh + 0.5f * v * sech2 * k * (1.0f + 3.0f * c * v * v);
    } else {
      const float e = erfcf(fabsf(v) * 0.7071067811865476f);
      const float cdf = v >= 0.0f ? 1.0f - 0.5f * e : 0.5f * e;
      const float pdf = 0.3989422804014327f * expf(-0.5f * v * v);
      grad = cdf + v * pdf;
    }
    dx[i] = dy[i] * grad;
  }
}

/* ----- Attention --------------------------------------------------------- */

/* d = p ∘ (d - Σ p ∘ d) scale, one warp per row of cols (rows striding). */
__global__ void softmax_backward_kernel(const float *p, float *d, int64_t rows, int64_t cols,
                                        float scale) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32; r < rows;
       r += (int64_t)gridDim.x * kWarps) {
    const float *pr = p + r * cols;
    float *dr = d + r * cols;
    double dot = 0.0;
    for (int64_t c = lane; c < cols; c += 32)
      dot += (double)pr[c] * dr[c];
    const float shift = (float)warp_sum(dot);
    for (int64_t c = lane; c < cols; c += 32)
      dr[c] = pr[c] * (dr[c] - shift) * scale;
  }
}

/* C_i = alpha op(A_i) op(B_i) + beta C_i for `count` members `stride_*`
 * floats apart, column-major (cuBLAS's view of the row-major tensors). */
int gemm_batched(htp_cuda_kernels *kernels, cublasOperation_t trans_a, cublasOperation_t trans_b,
                 int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, int64_t stride_a,
                 const float *b, int64_t ldb, int64_t stride_b, float alpha, float *c,
                 int64_t ldc, int64_t stride_c, int64_t count) {
  const float beta = 0.0f;
  HTP_CUBLAS_CHECK(kernels, cublasSgemmStridedBatched(
                                kernels->blas, trans_a, trans_b, (int)m, (int)n, (int)k, &alpha,
                                a, (int)lda, (long long)stride_a, b, (int)ldb,
                                (long long)stride_b, &beta, c, (int)ldc, (long long)stride_c,
                                (int)count));
  return 0;
}

/* The attention's sizes and its scratch regions (layout above). */
struct attention_shape {
  int64_t batch, tokens, model_dim, num_heads, head_dim;
  int64_t rows, inner, wide, square, slots;
  float *qkv, *context, *dcontext, *dqkv, *probs, *dprobs;
};

/* One group: `count` (image, head) pairs whose q (and context) columns
 * start at qkv_offset (context_offset) and lie member_qkv (member_context)
 * floats apart. Row-major [t, t] or [t, head_dim] blocks are column-major
 * transposes, so each row-major product A·B below is the column-major
 * Bᵀ·Aᵀ. */
int attention_group(htp_cuda_kernels *kernels, const attention_shape &s, int want_dqkv,
                    int64_t qkv_offset, int64_t context_offset, int64_t member_qkv,
                    int64_t member_context, int64_t count) {
  const float scale = 1.0f / sqrtf((float)s.head_dim);
  const int64_t t = s.tokens, hd = s.head_dim, wide = s.wide, inner = s.inner, sq = s.square;
  const float *q = s.qkv + qkv_offset, *k = q + inner, *v = q + 2 * inner;
  float *context = s.context + context_offset;
  const float *dcontext = s.dcontext + context_offset;
  float *dq = s.dqkv + qkv_offset, *dk = dq + inner, *dv = dq + 2 * inner;

  /* P = softmax(q kᵀ s): column-major Pᵀ = k qᵀ. */
  if (gemm_batched(kernels, CUBLAS_OP_T, CUBLAS_OP_N, t, t, hd, k, wide, member_qkv, q, wide,
                   member_qkv, scale, s.probs, t, sq, count) ||
      htp_cuda_softmax_rows(kernels, s.probs, count * t, t))
    return 1;
  /* context = P v: contextᵀ = vᵀ Pᵀ. */
  if (gemm_batched(kernels, CUBLAS_OP_N, CUBLAS_OP_N, hd, t, t, v, wide, member_qkv, s.probs, t,
                   sq, 1.0f, context, inner, member_context, count))
    return 1;
  if (!want_dqkv)
    return 0;
  /* dP = dcontext vᵀ: dPᵀ = v dcontextᵀ; then dS in place. */
  if (gemm_batched(kernels, CUBLAS_OP_T, CUBLAS_OP_N, t, t, hd, v, wide, member_qkv, dcontext,
                   inner, member_context, 1.0f, s.dprobs, t, sq, count))
    return 1;
  softmax_backward_kernel<<<grid_for(count * t, kWarps), kThreads, 0, kernels->stream>>>(
      s.probs, s.dprobs, count * t, t, scale);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  /* dv = Pᵀ dcontext: dvᵀ = dcontextᵀ P. */
  if (gemm_batched(kernels, CUBLAS_OP_N, CUBLAS_OP_T, hd, t, t, dcontext, inner, member_context,
                   s.probs, t, sq, 1.0f, dv, wide, member_qkv, count))
    return 1;
  /* dq = dS k: dqᵀ = kᵀ dSᵀ. */
  if (gemm_batched(kernels, CUBLAS_OP_N, CUBLAS_OP_N, hd, t, t, k, wide, member_qkv, s.dprobs, t,
                   sq, 1.0f, dq, wide, member_qkv, count))
    return 1;
  /* dk = dSᵀ q: dkᵀ = qᵀ dS. */
  return gemm_batched(kernels, CUBLAS_OP_N, CUBLAS_OP_T, hd, t, t, q, wide, member_qkv, s.dprobs,
                      t, sq, 1.0f, dk, wide, member_qkv, count);
}

/* Sizes checked by the entry: rows > 0, model_dim > 0, every GEMM size
 * and leading dimension in int, slots * tokens in int. */
int attention_backward(htp_cuda_kernels *kernels, const float *x, const float *wqkv,
                       const float *bqkv, const float *wproj, const float *dy, float *dx,
                       float *dwqkv, float *dbqkv, float *dwproj, float *dbproj,
                       attention_shape &s) {
  const int want_dqkv = dx || dwqkv || dbqkv;
  if (s.inner > 0) {
    if (htp_cuda_linear(kernels, x, wqkv, bqkv, s.qkv, s.rows, s.model_dim, s.wide))
      return 1;
    /* dcontext = dy · wproj: the output projection's input gradient. */
    if (want_dqkv && linear_backward(kernels, NULL, wproj, dy, s.dcontext, NULL, NULL, s.rows,
                                     s.inner, s.model_dim))
      return 1;
    /* Groups over the heads of an image, or over the images for a head. */
    const int64_t by_image = s.batch * ((s.num_heads + s.slots - 1) / s.slots);
    const int64_t by_head = s.num_heads * ((s.batch + s.slots - 1) / s.slots);
    const int heads_outer = by_head < by_image;
    const int64_t outer = heads_outer ? s.num_heads : s.batch;
    const int64_t members = heads_outer ? s.batch : s.num_heads;
    const int64_t member_qkv = heads_outer ? s.tokens * s.wide : s.head_dim;
    const int64_t member_context = heads_outer ? s.tokens * s.inner : s.head_dim;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t first = 0; first < members; first += s.slots) {
        const int64_t count = members - first < s.slots ? members - first : s.slots;
        const int64_t b = heads_outer ? first : o, h = heads_outer ? o : first;
        if (attention_group(kernels, s, want_dqkv, b * s.tokens * s.wide + h * s.head_dim,
                            b * s.tokens * s.inner + h * s.head_dim, member_qkv,
                            member_context, count))
          return 1;
      }
  }
  /* The output projection's parameters (context · wprojᵀ), then the qkv
   * projection's and dx (x · wqkvᵀ): with inner 0, dx = 0 and dbproj. */
  if ((dwproj || dbproj) && linear_backward(kernels, s.context, NULL, dy, NULL, dwproj, dbproj,
                                            s.rows, s.inner, s.model_dim))
    return 1;
  if (want_dqkv && linear_backward(kernels, x, wqkv, s.dqkv, dx, dwqkv, dbqkv, s.rows,
                                   s.model_dim, s.wide))
    return 1;
  return 0;
}

/* ----- Softmax cross-entropy --------------------------------------------- */

/* One warp per row (rows striding), the CPU twin's formulas: lse = max +
 * log Σ e^{l - max}, T = Σ t; loss_r = T log Σ - Σ t (l - max) into
 * row_loss (when not NULL); dlogits = (softmax T - t) / rows. */
__global__ void cross_entropy_rows_kernel(const float *logits, const float *targets,
                                          float *dlogits, double *row_loss, int64_t rows,
                                          int64_t classes, float inv_rows) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32; r < rows;
       r += (int64_t)gridDim.x * kWarps) {
    const float *l = logits + r * classes, *t = targets + r * classes;
    float max = -INFINITY;
    for (int64_t c = lane; c < classes; c += 32)
      max = fmaxf(max, l[c]);
    max = warp_max(max);
    double sum = 0.0, t_sum = 0.0, tl_sum = 0.0;
    for (int64_t c = lane; c < classes; c += 32) {
      sum += expf(l[c] - max);
      t_sum += t[c];
      tl_sum += (double)t[c] * ((double)l[c] - (double)max);
    }
    sum = warp_sum(sum);
    t_sum = warp_sum(t_sum);
    tl_sum = warp_sum(tl_sum);
    if (dlogits) {
      const float scale = (float)(t_sum / sum) * inv_rows;
      float *d = dlogits + r * classes;
      for (int64_t c = lane; c < classes; c += 32)
        d[c] = expf(l[c] - max) * scale - t[c] * inv_rows;
    }
    if (row_loss && lane == 0)
      row_loss[r] = t_sum * log(sum) - tl_sum;
  }
}

/* *loss = (Σ row_loss) / rows in one block: a fixed order. */
__global__ void mean_kernel(const double *row_loss, int64_t rows, float *loss) {
  __shared__ double shared[kWarps];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    sum += row_loss[r];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0)
    *loss = (float)(sum / (double)rows);
}

/* ----- Optimizers -------------------------------------------------------- */

/* PyTorch's SGD (dampening 0, no Nesterov), as cpu/optim.c. */
__global__ void sgd_kernel(float *w, const float *g, float *m, int64_t n, float lr,
                           float momentum, float weight_decay, int first) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float d = g[i] + weight_decay * w[i];
    if (m) {
      d = first ? d : momentum * m[i] + d;
      m[i] = d;
    }
    w[i] -= lr * d;
  }
}

/* AdamW with the host's bias corrections, as cpu/optim.c. */
__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, int64_t n, float decay,
                             float beta1, float beta2, float step_size, float bc2_sqrt,
                             float epsilon) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float wi = w[i] * decay;
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bc2_sqrt + epsilon;
    wi -= step_size * mi / denom;
    w[i] = wi;
  }
}

/* ----- Entry plumbing ---------------------------------------------------- */

/* The kernel object of env, or NULL after writing why there is none. */
htp_cuda_kernels *kernels_of(const htp_kernel_env *env, const char *op) {
  if (!env || !env->kernels) {
    htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM,
                    "cuda %s: the environment has no CUDA device (htp_cuda_kernel_env_create "
                    "failed or was not called)",
                    op);
    return NULL;
  }
  return (htp_cuda_kernels *)env->kernels;
}

__attribute__((format(printf, 3, 4))) htp_kernel_status refuse(const htp_kernel_env *env,
                                                               const char *op,
                                                               const char *format, ...) {
  char why[224];
  va_list args;
  va_start(args, format);
  vsnprintf(why, sizeof why, format, args);
  va_end(args);
  return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cuda %s: %s", op, why);
}

/* A device-side step's non-zero return: its message is on the object. */
htp_kernel_status device_status(const htp_kernel_env *env, htp_cuda_kernels *kernels,
                                const char *op, int rc) {
  if (rc == 0)
    return HTP_KERNEL_OK;
  return htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM, "cuda %s: %s", op,
                         htp_cuda_kernels_error(kernels));
}

/* The launches just enqueued: their error (a bad configuration, a sticky
 * fault), else OK. */
htp_kernel_status launch_status(const htp_kernel_env *env, const char *op) {
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_SYSTEM, "cuda %s: %s", op,
                           cudaGetErrorString(launched));
  return HTP_KERNEL_OK;
}

/* The object's workspace as `count` doubles, or NULL (why on the object). */
double *workspace_doubles(htp_cuda_kernels *kernels, int64_t count) {
  if (htp_cuda_buffer_reserve(kernels, &kernels->workspace, &kernels->workspace_bytes,
                              htp_cuda_doubles_bytes(count)))
    return NULL;
  return (double *)kernels->workspace;
}

int fits_int(int64_t value) { return value >= 0 && value <= INT_MAX; }

} // namespace

/* ----- The entries ------------------------------------------------------- */

extern "C" htp_kernel_status htp__cuda_linear_backward_f32(const htp_kernel_env *env,
                                                           const float *x, const float *w,
                                                           const float *dy, float *dx, float *dw,
                                                           float *db, int64_t rows,
                                                           int64_t in_features,
                                                           int64_t out_features) {
  const char *op = "linear_backward_f32";
  htp_cuda_kernels *kernels = kernels_of(env, op);
  if (!kernels)
    return HTP_KERNEL_ERR_SYSTEM;
  /* Each in int, so every product of two fits int64. */
  if (!fits_int(rows) || !fits_int(in_features) || !fits_int(out_features))
    return refuse(env, op, "rows %lld, in_features %lld, out_features %lld must be in [0, %d]",
                  (long long)rows, (long long)in_features, (long long)out_features, INT_MAX);
  const int gemm_dx = dx && rows > 0 && in_features > 0 && out_features > 0;
  const int gemm_dw = dw && rows > 0 && in_features > 0 && out_features > 0;
  const int sum_db = db && rows > 0 && out_features > 0;
  if ((gemm_dx || gemm_dw || sum_db) && !dy)
    return refuse(env, op, "dy is NULL");
  if ((gemm_dx && !w) || (gemm_dw && !x))
    return refuse(env, op, "%s is NULL and %s is wanted", gemm_dx && !w ? "w" : "x",
                  gemm_dx && !w ? "dx" : "dw");
  return device_status(env, kernels, op,
                       linear_backward(kernels, x, w, dy, dx, dw, db, rows, in_features,
                                       out_features));
}

extern "C" htp_kernel_status htp__cuda_layer_norm_backward_f32(const htp_kernel_env *env,
                                                               const float *x, const float *gamma,
                                                               const float *dy, float *dx,
                                                               float *dgamma, float *dbeta,
                                                               int64_t rows, int64_t dim,
                                                               float epsilon) {
  const char *op = "layer_norm_backward_f32";
  htp_cuda_kernels *kernels = kernels_of(env, op);
  if (!kernels)
    return HTP_KERNEL_ERR_SYSTEM;
  if (rows < 0 || dim < 0 || htp__size_mul(rows, dim) < 0 || htp__size_mul(rows, 16) < 0)
    return refuse(env, op, "rows %lld and dim %lld must be >= 0 (and their product fit)",
                  (long long)rows, (long long)dim);
  if (rows == 0 || dim == 0 || (!dx && !dgamma && !dbeta))
    return HTP_KERNEL_OK;
  if (!x || !dy)
    return refuse(env, op, "x or dy is NULL");
  const int columns = dgamma || dbeta;
  double *stats = NULL;
  if (columns && !(stats = workspace_doubles(kernels, 2 * rows)))
    return device_status(env, kernels, op, 1);
  layer_norm_rows_kernel<<<grid_for(rows, 1), kThreads, 0, kernels->stream>>>(
      x, gamma, dy, dx, stats, rows, dim, epsilon);
  const htp_kernel_status launched = launch_status(env, op);
  if (launched != HTP_KERNEL_OK || !columns)
    return launched;
  layer_norm_columns_kernel<<<grid_for(dim, kColumnTile), dim3(kColumnTile, kRowLanes), 0,
                              kernels->stream>>>(x, dy, stats, dgamma, dbeta, rows, dim);
  return launch_status(env, op);
}

extern "C" htp_kernel_status htp__cuda_gelu_backward_f32(const htp_kernel_env *env,
                                                         const float *x, const float *dy,
                                                         float *dx, int64_t n,
                                                         int32_t tanh_approx) {
  const char *op = "gelu_backward_f32";
  htp_cuda_kernels *kernels = kernels_of(env, op);
  if (!kernels)
    return HTP_KERNEL_ERR_SYSTEM;
  if (n < 0)
    return refuse(env, op, "negative size %lld", (long long)n);
  if (!dx || n == 0)
    return HTP_KERNEL_OK;
  if (!x || !dy)
    return refuse(env, op, "x or dy is NULL");
  gelu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, kernels->stream>>>(x, dy, dx, n,
                                                                                tanh_approx);
  return launch_status(env, op);
}

extern "C" int64_t htp__cuda_attention_backward_scratch_floats(int64_t batch, int64_t tokens,
                                                               int64_t model_dim,
                                                               int64_t num_heads,
                                                               int64_t head_dim) {
  return htp_cpu_attention_backward_scratch_floats(batch, tokens, model_dim, num_heads,
                                                   head_dim);
}

extern "C" htp_kernel_status htp__cuda_attention_backward_f32(
    const htp_kernel_env *env, const float *x, const float *wqkv, const float *bqkv,
    const float *wproj, const float *bproj, const float *dy, float *dx, float *dwqkv,
    float *dbqkv, float *dwproj, float *dbproj, float *scratch, int64_t scratch_floats,
    int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  (void)bproj; /* y's value does not enter its adjoint */
  const char *op = "attention_backward_f32";
  htp_cuda_kernels *kernels = kernels_of(env, op);
  if (!kernels)
    return HTP_KERNEL_ERR_SYSTEM;
  const int64_t needed = htp__cuda_attention_backward_scratch_floats(batch, tokens, model_dim,
                                                                     num_heads, head_dim);
  if (batch < 0 || tokens < 0 || num_heads < 0 || head_dim < 0 || needed < 0)
    return refuse(env, op,
                  "batch %lld, tokens %lld, model_dim %lld, num_heads %lld, head_dim %lld must "
                  "be >= 0 (and the scratch's size fit)",
                  (long long)batch, (long long)tokens, (long long)model_dim,
                  (long long)num_heads, (long long)head_dim);
  if (!scratch || scratch_floats < needed)
    return refuse(env, op, "scratch holds %lld floats, the kernel needs %lld",
                  (long long)(scratch ? scratch_floats : 0), (long long)needed);
  /* needed >= 0: rows * 3 * inner and every other region fits int64. */
  attention_shape s;
  s.batch = batch, s.tokens = tokens, s.model_dim = model_dim, s.num_heads = num_heads;
  s.head_dim = head_dim;
  s.rows = batch * tokens, s.inner = num_heads * head_dim, s.wide = 3 * s.inner;
  s.square = tokens * tokens;
  const int64_t pairs = batch * num_heads, most = HTP_ATTN_BWD_SLOTS;
  s.slots = pairs < most ? pairs : most;
  if (!fits_int(s.rows) || !fits_int(s.wide) || !fits_int(model_dim) ||
      !fits_int(s.slots * tokens))
    return refuse(env, op,
                  "rows %lld, 3 * num_heads * head_dim %lld, model_dim %lld and %lld * tokens "
                  "must each fit cuBLAS's int",
                  (long long)s.rows, (long long)s.wide, (long long)model_dim,
                  (long long)s.slots);
  if (s.rows == 0 || model_dim == 0)
    return HTP_KERNEL_OK; /* nothing flows (dx has no elements, or only zeros) */
  const int want_dqkv = dx || dwqkv || dbqkv;
  if (!dy || (s.inner > 0 && (!x || !wqkv || (want_dqkv && !wproj))))
    return refuse(env, op, "dy, x, wqkv or wproj is NULL");
  s.qkv = scratch;
  s.context = s.qkv + s.rows * s.wide;
  s.dcontext = s.context + s.rows * s.inner;
  s.dqkv = s.dcontext + s.rows * s.inner;
  s.probs = s.dqkv + s.rows * s.wide;
  s.dprobs = s.probs + s.slots * s.square;
  return device_status(env, kernels, op,
                       attention_backward(kernels, x, wqkv, bqkv, wproj, dy, dx, dwqkv, dbqkv,
                                          dwproj, dbproj, s));
}

extern "C" htp_kernel_status htp__cuda_softmax_cross_entropy_f32(const htp_kernel_env *env,
                                                                 const float *logits,
                                                                 const float *targets,
                                                                 float *loss, float *dlogits,
                                                                 int64_t rows, int64_t classes) {
  const char *op = "softmax_cross_entropy_f32";
  htp_cuda_kernels *kernels = kernels_of(env, op);
  if (!kernels)
    return HTP_KERNEL_ERR_SYSTEM;
  if (rows < 1 || classes < 1 || htp__size_mul(rows, classes) < 0 ||
      htp__size_mul(rows, 8) < 0)
    return refuse(env, op,
                  "needs rows >= 1 and classes >= 1 (and their product to fit), got %lld rows, "
                  "%lld classes",
                  (long long)rows, (long long)classes);
  if (!logits || !targets)
    return refuse(env, op, "logits or targets is NULL");
  if (!loss && !dlogits)
    return HTP_KERNEL_OK;
  double *row_loss = NULL;
  if (loss && !(row_loss = workspace_doubles(kernels, rows)))
    return device_status(env, kernels, op, 1);
  cross_entropy_rows_kernel<<<grid_for(rows, kWarps), kThreads, 0, kernels->stream>>>(
      logits, targets, dlogits, row_loss, rows, classes, (float)(1.0 / (double)rows));
  const htp_kernel_status launched = launch_status(env, op);
  if (launched != HTP_KERNEL_OK || !loss)
    return launched;
  mean_kernel<<<1, kThreads, 0, kernels->stream>>>(row_loss, rows, loss);
  return launch_status(env, op);
}

extern "C" htp_kernel_status htp__cuda_sgd_momentum_f32(const htp_kernel_env *env, float *w,
                                                        const float *g, float *m, int64_t n,
                                                        float lr, float momentum,
                                                        float weight_decay, int64_t step) {
  const char *op = "sgd_momentum_f32";
  htp_cuda_kernels *kernels = kernels_of(env, op);
  if (!kernels)
    return HTP_KERNEL_ERR_SYSTEM;
  if (n < 0 || step < 1)
    return refuse(env, op, "needs n >= 0 and step >= 1, got n %lld, step %lld", (long long)n,
                  (long long)step);
  if (!m && momentum != 0.0f)
    return refuse(env, op, "momentum %g needs a momentum buffer", (double)momentum);
  if (n == 0)
    return HTP_KERNEL_OK;
  if (!w || !g)
    return refuse(env, op, "w or g is NULL");
  /* momentum 0 keeps no buffer (as PyTorch): m, when given, just gets g'. */
  sgd_kernel<<<grid_for(n, kThreads), kThreads, 0, kernels->stream>>>(
      w, g, m, n, lr, momentum, weight_decay, step == 1);
  return launch_status(env, op);
}

extern "C" htp_kernel_status htp__cuda_adamw_f32(const htp_kernel_env *env, float *w,
                                                 const float *g, float *m, float *v, int64_t n,
                                                 float lr, float beta1, float beta2,
                                                 float epsilon, float weight_decay,
                                                 int64_t step) {
  const char *op = "adamw_f32";
  htp_cuda_kernels *kernels = kernels_of(env, op);
  if (!kernels)
    return HTP_KERNEL_ERR_SYSTEM;
  if (n < 0 || step < 1)
    return refuse(env, op, "needs n >= 0 and step >= 1, got n %lld, step %lld", (long long)n,
                  (long long)step);
  if (!(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f))
    return refuse(env, op, "betas must lie in [0, 1), got %g and %g", (double)beta1,
                  (double)beta2);
  if (n == 0)
    return HTP_KERNEL_OK;
  if (!w || !g || !m || !v)
    return refuse(env, op, "w, g, m or v is NULL");
  /* The CPU twin's constants, computed the same way on the host. */
  const double bc1 = 1.0 - pow((double)beta1, (double)step);
  const double bc2 = 1.0 - pow((double)beta2, (double)step);
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, kernels->stream>>>(
      w, g, m, v, n, (float)(1.0 - (double)lr * (double)weight_decay), beta1, beta2,
      (float)((double)lr / bc1), (float)sqrt(bc2), epsilon);
  return launch_status(env, op);
}
