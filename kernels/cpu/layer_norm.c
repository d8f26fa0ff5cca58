/*===- kernels/cpu/layer_norm.c - Layer norm over the last dim -----------===*
 *
 * Mean and variance are accumulated in double: rows are long (768+) and the
 * two-pass form in double keeps the result within f32 round-off of an exact
 * reference even when |mean| is large compared with the spread. Rows are
 * independent, so they are split over the kernels' threads.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <math.h>

HTP_VECTOR_CLONES
static void norm_row(const float *in, const float *gamma, const float *beta, float *out,
                     int64_t dim, float epsilon) {
  double sum = 0.0;
  for (int64_t i = 0; i < dim; ++i)
    sum += in[i];
  double mean = sum / (double)dim;
  double squares = 0.0;
  for (int64_t i = 0; i < dim; ++i) {
    double centered = in[i] - mean;
    squares += centered * centered;
  }
  float inv_std = (float)(1.0 / sqrt(squares / (double)dim + (double)epsilon));
  /* Centred in double: (float)mean alone can be off by half an ulp of a
   * large mean, which is a lot next to a small spread. */
  for (int64_t i = 0; i < dim; ++i)
    out[i] = (float)((double)in[i] - mean) * inv_std * gamma[i] + beta[i];
}

void htp__layer_norm_row(const float *in, const float *gamma, const float *beta, float *out,
                         int64_t dim, float epsilon) {
  norm_row(in, gamma, beta, out, dim, epsilon);
}

struct norm_job {
  const float *x, *gamma, *beta;
  float *y;
  int64_t dim;
  float epsilon;
};

static void norm_rows(void *ctx, int64_t begin, int64_t end) {
  const struct norm_job *job = ctx;
  for (int64_t row = begin; row < end; ++row)
    norm_row(job->x + row * job->dim, job->gamma, job->beta, job->y + row * job->dim, job->dim,
             job->epsilon);
}

void htp_cpu_layer_norm_f32(const float *x, const float *gamma, const float *beta,
                            float *y, int64_t rows, int64_t dim, float epsilon) {
  struct norm_job job = {x, gamma, beta, y, dim, epsilon};
  htp__parallel(rows, dim > 0 ? 1 + HTP_GRAIN / dim : rows, norm_rows, &job);
}
