/*===- kernels/cpu/layer_norm.c - Layer norm over the last dim -----------===*
 *
 * Mean and variance are accumulated in double: rows are long (768+) and the
 * two-pass form in double keeps the result within f32 round-off of an exact
 * reference even when |mean| is large compared with the spread. Both sums
 * run in vector lanes; the mean's only where that gives the in-order sum
 * exactly (row_sum). Rows are independent, so they are split over the
 * kernels' threads.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The row's sum in double, as the loop in order gives it, in vector lanes
 * where that is provably the same number: every element is a multiple of
 * the smallest one's ulp, 2^(emin - 150), and below 2^(emax - 126), so every
 * partial sum is exact in double (53 bits) when emax - emin + 24 plus the
 * bits of dim stays below 53, whatever the order. Otherwise (a wide spread
 * of magnitudes, where cancellation makes the order matter; inf, NaN) the
 * loop in order. */
HTP_VECTOR_CLONES
static double row_sum(const float *in, int64_t dim) {
  uint32_t emax = 0, emin = 255;
  double sum = 0.0;
#pragma omp simd reduction(max : emax) reduction(min : emin) reduction(+ : sum)
  for (int64_t i = 0; i < dim; ++i) {
    uint32_t bits;
    memcpy(&bits, &in[i], sizeof bits);
    const uint32_t e = (bits >> 23) & 0xffu;
    /* Zeros do not count; subnormals have the ulp of exponent field 1. */
    const uint32_t quantum = (bits & 0x7fffffffu) ? (e ? e : 1u) : 255u;
    emax = e > emax ? e : emax;
    emin = quantum < emin ? quantum : emin;
    sum += in[i];
  }
  int64_t dim_bits = 0;
  while (dim_bits < 63 && (INT64_C(1) << dim_bits) <= dim)
    ++dim_bits;
  if (emax < 255 && (int64_t)emax - (int64_t)emin + 24 + dim_bits < 53)
    return sum;
  sum = 0.0;
  for (int64_t i = 0; i < dim; ++i)
    sum += in[i];
  return sum;
}

HTP_VECTOR_CLONES
static void norm_row(const float *in, const float *gamma, const float *beta, float *out,
                     int64_t dim, float epsilon) {
  double mean = row_sum(in, dim) / (double)dim;
  /* Squares are never negative: no cancellation, and their sum in vector
   * lanes is within dim ulps of double of the sum in order. */
  double squares = 0.0;
#pragma omp simd reduction(+ : squares)
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
