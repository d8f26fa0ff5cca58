/*===- kernels/htp_bf16.h - bfloat16 storage and its conversions ----------===*
 *
 * bf16 tensors are stored as their bit patterns (the top 16 bits of an IEEE
 * f32), and all arithmetic on them is done in f32: one type and one pair of
 * conversions for the kernels, the runtime's collectives and the executor's
 * loaders, so every part rounds the same way. f32 -> bf16 rounds to nearest,
 * ties to even (as PyTorch's .to(torch.bfloat16)); a NaN stays a (quiet)
 * NaN, infinities stay infinite, and a finite value past bf16's largest
 * rounds to infinity. Header-only: the passes and fuzzers may use it too.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_BF16_H
#define HTP_BF16_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t htp_bf16;

static inline float htp_bf16_to_f32(htp_bf16 h) {
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline htp_bf16 htp_bf16_from_f32(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, make it quiet */
    return (htp_bf16)((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest, ties to even */
  return (htp_bf16)(bits >> 16);
}

/* n elements each way; the arrays must not overlap. */
static inline void htp_bf16_to_f32_n(const htp_bf16 *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = htp_bf16_to_f32(x[i]);
}
static inline void htp_bf16_from_f32_n(const float *x, htp_bf16 *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = htp_bf16_from_f32(x[i]);
}

#ifdef __cplusplus
}
#endif

#endif /* HTP_BF16_H */
