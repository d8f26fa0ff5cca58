/*===- bench/gemm_bound.c - The GEMM-only bound of one ViT block ---------===*
 *
 * Runs exactly the GEMMs a ViT block does (qkv, per-head q·kᵀ and p·v, proj,
 * fc1, fc2) through the same library (oneDNN or OpenBLAS) and layouts as
 * kernels/cpu, and
 * nothing else: no layer norm, softmax, GELU, bias or residual. Its time is
 * the floor htp-run's forward could reach with these GEMMs; the ratio
 * htp-run / bound says how much the rest of the block costs.
 *
 *   htp-bench-gemm --batch 8 --tokens 197 --dim 768 --heads 12 --mlp 3072 --iters 10
 * prints one JSON object: {"median_ms":..., "min_ms":..., "gflops":...,
 * "linears_median_ms":...}; the last times the four big linears (qkv, proj,
 * fc1, fc2) alone, without the per-head GEMMs, which kernels/cpu now does in
 * its own fused attention loop rather than through BLAS: the stricter floor.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#ifdef HTP_BOUND_ONEDNN
/* The same row-major calls through oneDNN (its OpenMP threads: run with
 * OMP_NUM_THREADS=<cores>), the library the kernels' GEMMs use. */
#include <oneapi/dnnl/dnnl.h>
typedef enum { CblasRowMajor } CBLAS_ORDER;
typedef enum { CblasNoTrans = 'N', CblasTrans = 'T' } CBLAS_TRANSPOSE;
static void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, long m, long n,
                        long k, float alpha, const float *a, long lda, const float *b, long ldb,
                        float beta, float *c, long ldc) {
  (void)order;
  dnnl_sgemm((char)ta, (char)tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#else
#include <cblas.h>
#endif
#include "bench_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float *filled(long n) {
  float *data = malloc((size_t)n * sizeof(float));
  if (!data) {
    fprintf(stderr, "htp-bench-gemm: out of memory\n");
    exit(1);
  }
  for (long i = 0; i < n; ++i)
    data[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  return data;
}

/* y[m, n] = x[m, k] · w[n, k]ᵀ, as htp_cpu_linear_f32 does it. */
static void linear(const float *x, const float *w, float *y, int m, int k, int n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
}

int main(int argc, char **argv) {
  int batch = 8, tokens = 197, dim = 768, heads = 12, mlp = 3072, iters = 10, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    int *target = NULL;
    if (!strcmp(argv[i], "--batch")) target = &batch;
    else if (!strcmp(argv[i], "--tokens")) target = &tokens;
    else if (!strcmp(argv[i], "--dim")) target = &dim;
    else if (!strcmp(argv[i], "--heads")) target = &heads;
    else if (!strcmp(argv[i], "--mlp")) target = &mlp;
    else if (!strcmp(argv[i], "--iters")) target = &iters;
    else if (!strcmp(argv[i], "--warmup")) target = &warmup;
    if (!target || i + 1 == argc || (*target = atoi(argv[++i])) < (target == &warmup ? 0 : 1)) {
      fprintf(stderr, "usage: htp-bench-gemm [--batch B] [--tokens T] [--dim D] [--heads H] "
                      "[--mlp M] [--iters K] [--warmup W]  (all positive integers)\n");
      return 2;
    }
  }
  if (dim % heads) {
    fprintf(stderr, "htp-bench-gemm: --dim %d is not divisible by --heads %d\n", dim, heads);
    return 2;
  }
  int rows = batch * tokens, head_dim = dim / heads, qkv_stride = 3 * dim;
  float *x = filled((long)rows * dim), *wqkv = filled(3L * dim * dim), *wproj = filled((long)dim * dim);
  float *w1 = filled((long)mlp * dim), *w2 = filled((long)dim * mlp);
  float *qkv = filled((long)rows * qkv_stride), *context = filled((long)rows * dim);
  float *scores = filled((long)tokens * tokens), *hidden = filled((long)rows * mlp),
        *y = filled((long)rows * dim);
  double *times = malloc(sizeof(double) * (size_t)iters);
  double *linear_times = malloc(sizeof(double) * (size_t)iters);

  for (int iter = -warmup; iter < iters; ++iter) {
    double start = bench_now_ms(), in_linears = 0.0;
    linear(x, wqkv, qkv, rows, dim, qkv_stride);
    in_linears += bench_now_ms() - start;
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h) {
        const float *block = qkv + (long)b * tokens * qkv_stride;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tokens, tokens, head_dim, 1.0f,
                    block + h * head_dim, qkv_stride, block + dim + h * head_dim, qkv_stride, 0.0f,
                    scores, tokens);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tokens, head_dim, tokens, 1.0f,
                    scores, tokens, block + 2 * dim + h * head_dim, qkv_stride, 0.0f,
                    context + (long)b * tokens * dim + h * head_dim, dim);
      }
    double linears_start = bench_now_ms();
    linear(context, wproj, y, rows, dim, dim);
    linear(y, w1, hidden, rows, dim, mlp);
    linear(hidden, w2, y, rows, mlp, dim);
    double end = bench_now_ms();
    if (iter >= 0) {
      times[iter] = end - start;
      linear_times[iter] = in_linears + end - linears_start;
    }
  }
  double flops = 2.0 * rows * dim * (3.0 * dim + dim + 2.0 * mlp) +
                 4.0 * batch * heads * (double)tokens * tokens * head_dim;
  double median = bench_median(times, iters), linears = bench_median(linear_times, iters);
  printf("{\"median_ms\": %.4f, \"min_ms\": %.4f, \"gflops\": %.3f, \"flops\": %.0f, "
         "\"linears_median_ms\": %.4f}\n",
         median, times[0], flops / (median * 1e6), flops, linears);
  free(x); free(wqkv); free(wproj); free(w1); free(w2); free(qkv); free(context);
  free(scores); free(hidden); free(y); free(times); free(linear_times);
  return 0;
}
