/*===- kernels/cpu/onednn.h - bf16 linears as oneDNN matmuls --------------===*
 *
 * Private to kernels/cpu; built where the GEMMs are oneDNN's
 * (HTP_BLAS_ONEDNN).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CPU_ONEDNN_H
#define HTP_KERNELS_CPU_ONEDNN_H

#include "kernels/htp_bf16.h"

#include <stdint.h>

/* y [rows, out] = x [rows, in] · w [out, in]ᵀ + b [out] (b may be NULL), all
 * bf16, f32 accumulation, each output rounded once: htp_cpu linear's
 * layout. Returns 0, or non-zero when oneDNN could not (no bf16 matmul for
 * this CPU, or a failure): then y is unspecified and the caller computes it
 * another way. */
int htp__onednn_linear_bf16(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
                            htp_bf16 *y, int64_t rows, int64_t in_features,
                            int64_t out_features);

/* The same with y in f32 (not rounded): a bf16 GEMM whose result an f32
 * kernel goes on with (the attention's qkv). */
int htp__onednn_linear_bf16_f32(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
                                float *y, int64_t rows, int64_t in_features,
                                int64_t out_features);

#endif /* HTP_KERNELS_CPU_ONEDNN_H */
