/*===- kernels/cpu/onednn.h - bf16 linears as oneDNN matmuls --------------===*
 *
 * Private to kernels/cpu; built where the GEMMs are oneDNN's
 * (HTP_BLAS_ONEDNN).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CPU_ONEDNN_H
#define HTP_KERNELS_CPU_ONEDNN_H

#include "kernels/htp_bf16.h"

#include <stddef.h>
#include <stdint.h>

/* y [rows, out] = x [rows, in] · w [out, in]ᵀ + b [out] (b may be NULL), all
 * bf16, f32 accumulation, each output rounded once: htp_cpu linear's
 * layout. Returns 0, or non-zero when oneDNN could not (no bf16 matmul for
 * this CPU, or a failure): then y is unspecified and the caller computes it
 * another way. */
int htp__onednn_linear_bf16(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
                            htp_bf16 *y, int64_t rows, int64_t in_features,
                            int64_t out_features);

/* y = GELU(x · wᵀ + b), the GELU (exact, or the tanh form with
 * tanh_approx) oneDNN's eltwise post-op on the f32 accumulator, y rounded
 * once. Returns as htp__onednn_linear_bf16. */
int htp__onednn_linear_gelu_bf16(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
                                 htp_bf16 *y, int64_t rows, int64_t in_features,
                                 int64_t out_features, int32_t tanh_approx);

/* The same with y in f32 (not rounded): a bf16 GEMM whose result an f32
 * kernel goes on with (the attention's qkv). */
int htp__onednn_linear_bf16_f32(const htp_bf16 *x, const htp_bf16 *w, const htp_bf16 *b,
                                float *y, int64_t rows, int64_t in_features,
                                int64_t out_features);

/* One bf16 product on the calling thread, f32 accumulation:
 *   C[b] = A[b] · B[b] (+ bias) for b in [0, batch), A [m, k], B [k, n],
 * element (i, p) of A[b] at a[b * a_batch + i * a_row + p], (p, j) of B[b]
 * at b[b * b_batch + p * b_k + j * b_n] (a weight [n, k] row-major is
 * b_k = 1, b_n = k), (i, j) of C[b] at c[b * c_batch + i * c_row + j];
 * bias (bf16 [n], with `bias` set) added before C is rounded; C is bf16,
 * each element rounded once, or with f32_out f32; with gelu, GELU applied
 * to each element (after the bias, before the rounding) as oneDNN's eltwise
 * post-op. Primitives are made once
 * per shape and kept. Returns 0, or non-zero where oneDNN has no JIT
 * kernel for it on this CPU or anything failed (C unspecified). */
enum { HTP_MATMUL_NO_GELU = 0, HTP_MATMUL_GELU_ERF = 1, HTP_MATMUL_GELU_TANH = 2 };

typedef struct htp__matmul {
  int64_t batch, m, k, n;
  int64_t a_batch, a_row, b_batch, b_k, b_n, c_batch, c_row;
  int bias, f32_out, gelu; /* gelu: HTP_MATMUL_* */
  int a_transposed;        /* (i, p) of A[b] at a[b * a_batch + p * a_row + i] */
  int accumulate;          /* C += the product (f32_out only), instead of C = */
} htp__matmul;

int htp__onednn_matmul(const htp__matmul *shape, const htp_bf16 *a, const htp_bf16 *b,
                       const htp_bf16 *bias, void *c);

/* C [m, n] (+)= op(A) · op(B) at bf16 precision: htp__linear_gemm's
 * HTP_MATMUL_BF16 (cpu_internal.h) with alpha 1 and beta `accumulate`, the
 * f32 operands rounded to bf16 (to nearest, ties to even) into the thread's
 * HTP_ROOM_OPERANDS, the exact products summed in f32 by oneDNN, C split
 * over the pool. Returns 0, or non-zero where oneDNN has no bf16 units here
 * or anything failed, before C was written. */
int htp__onednn_gemm_bf16(int a_transposed, int b_transposed, int64_t m, int64_t n, int64_t k,
                          const float *a, int64_t lda, const float *b, int64_t ldb,
                          int accumulate, float *c, int64_t ldc);

/* Whether oneDNN's effective ISA here (the CPU's, capped by
 * ONEDNN_MAX_CPU_ISA) includes `isa`, a dnnl_cpu_isa_t (each one a set of
 * bits holding those of the ISAs below it). */
int htp__onednn_isa_has(int isa);

#endif /* HTP_KERNELS_CPU_ONEDNN_H */
