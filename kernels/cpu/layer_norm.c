/*===- kernels/cpu/layer_norm.c - Layer norm over the last dim -----------===*
 *
 * Mean and variance are accumulated in double: rows are long (768+) and the
 * two-pass form in double keeps the result within f32 round-off of an exact
 * reference even when |mean| is large compared with the spread.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"

#include <math.h>

void htp_cpu_layer_norm_f32(const float *x, const float *gamma, const float *beta,
                            float *y, int64_t rows, int64_t dim, float epsilon) {
  for (int64_t row = 0; row < rows; ++row) {
    const float *in = x + row * dim;
    float *out = y + row * dim;
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
    float mean_f = (float)mean;
    for (int64_t i = 0; i < dim; ++i)
      out[i] = (in[i] - mean_f) * inv_std * gamma[i] + beta[i];
  }
}
