/*===- kernels/cpu/linear.c - y = x·wᵀ + b through OpenBLAS -------------===*
 *
 * The GEMM of htp.linear. The bias is broadcast into y first so the GEMM can
 * accumulate onto it (beta = 1): one pass over y instead of two. The
 * broadcast is a memory-bound pass over y, so it is split over the threads.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <string.h>

struct broadcast_job {
  const float *b;
  float *y;
  int64_t cols;
};

static void broadcast_rows(void *ctx, int64_t begin, int64_t end) {
  const struct broadcast_job *job = ctx;
  for (int64_t row = begin; row < end; ++row)
    memcpy(job->y + row * job->cols, job->b, (size_t)job->cols * sizeof(float));
}

void htp_cpu_linear_f32(const float *x, const float *w, const float *b, float *y,
                        int64_t rows, int64_t in_features, int64_t out_features) {
  float beta = 0.0f;
  if (b && out_features > 0) {
    struct broadcast_job job = {b, y, out_features};
    htp__parallel(rows, 1 + 4 * HTP_GRAIN / out_features, broadcast_rows, &job);
    beta = 1.0f;
  }
  htp__linear_gemm(CblasNoTrans, CblasTrans, rows, out_features, in_features, 1.0f, x, in_features,
                   w, in_features, beta, y, out_features);
}
