/*===- kernels/cpu/elementwise.c - GELU, residual add, bias add ----------===*/
#include "kernels/htp_kernels.h"

#include <math.h>

void htp_cpu_gelu_f32(const float *x, float *y, int64_t n, int32_t tanh_approx) {
  if (tanh_approx) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; ++i) {
      float v = x[i];
      y[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
  } else {
    const float inv_sqrt2 = 0.7071067811865476f;
    for (int64_t i = 0; i < n; ++i)
      y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * inv_sqrt2));
  }
}

void htp_cpu_add_f32(const float *a, const float *b, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = a[i] + b[i];
}

void htp_cpu_bias_add_f32(const float *x, const float *bias, float *y, int64_t rows,
                          int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = x[r * cols + c] + bias[c];
}
