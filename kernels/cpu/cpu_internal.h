/*===- kernels/cpu/cpu_internal.h - Pieces the CPU kernels share ----------===*
 *
 * Private to kernels/cpu: not part of the ABI in kernels/htp_kernels.h.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CPU_INTERNAL_H
#define HTP_KERNELS_CPU_INTERNAL_H

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef HTP_BLAS_BLIS
/* BLIS's cblas.h names only the enum; OpenBLAS's and plain_blas's typedef it. */
typedef enum CBLAS_TRANSPOSE CBLAS_TRANSPOSE;
#endif

/* The build's GEMM library ready for its first product (oneDNN generates
 * its kernels then, unchecked): 0, or -1 when memory is short
 * (kernels/cpu/threads.c). Once per process. */
int htp__cpu_gemm_ready(void);

/* Row-wise softmax in place, subtracting each row's max first (so large
 * scores do not overflow expf). Used by attention.c and units.c. */
void htp__softmax_rows(float *scores, int64_t rows, int64_t cols);

/* softmax(q kᵀ / sqrt(head_dim)) v for num_heads heads of every image, the
 * (image, head) pairs in parallel, the softmax fused into the score tiles.
 * Image b, head h: q rows start at qkv + b*tokens*qkv_stride + h*head_step,
 * one every qkv_stride floats, k and v k_offset / v_offset floats further;
 * the result goes to context + b*tokens*ctx_stride + h*head_dim. scores
 * (tokens * tokens floats) is used only by the BLAS fallback for heads
 * whose tiles do not fit a thread's stack. Used by attention.c and units.c. */
void htp__attend(const float *qkv, int64_t qkv_stride, int64_t k_offset, int64_t v_offset,
                 int64_t head_step, int64_t num_heads, float *context, int64_t ctx_stride,
                 int64_t batch, int64_t tokens, int64_t head_dim, float *scores);

/* The build can compile the AVX-512 kernels (GCC's target attributes on
 * x86-64); whether they may run here is htp__wide_tiles(). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HTP_AVX512_KERNELS 1
#else
#define HTP_AVX512_KERNELS 0
#endif

/* Tests only: which attention paths may run, so that each is checked on
 * one machine. */
enum htp__attention_paths {
  HTP_ATTENTION_ANY,      /* the fastest that applies (the default) */
  HTP_ATTENTION_NO_SMALL, /* no small-head products: the AVX-512 tiles, BLAS in backward */
  HTP_ATTENTION_NARROW,   /* the AVX2-wide tiles, BLAS in backward */
};
void htp__attention_force(enum htp__attention_paths paths);
/* Whether AVX-512 kernels may run here: the CPU reports AVX-512 (F, VL,
 * BW, DQ), the build has them, the GEMM library's ISA is not capped below
 * them (htp__isa_cap_allows_avx512) and no test forced the narrow paths. */
int htp__wide_tiles(void);
/* 0 where ONEDNN_MAX_CPU_ISA caps oneDNN below avx512_core: one variable
 * caps the GEMMs and the attention's own tiles together, so the AVX2 paths
 * of a whole run are tested on an AVX-512 machine. 1 without oneDNN. (The
 * elementwise loops' target clones are chosen by the loader from the CPU
 * alone.) */
int htp__isa_cap_allows_avx512(void);

/* A head of at most HTP_SMALL_HEAD tokens and head_dim runs its products
 * in one AVX-512 kernel (htp__small_product) where htp__small_heads says
 * so: forward (htp__attend) and backward alike. A BLAS call of such a size
 * is mostly fixed cost (~0.35 us), and the tiles pad the keys to 32. */
enum { HTP_SMALL_HEAD = 32 };
int htp__small_heads(int64_t tokens, int64_t head_dim);
#if HTP_AVX512_KERNELS
/* C(i, 0..n) = alpha Σ_p A(i, p) B(p, 0..n) for i < m, n <= HTP_SMALL_HEAD,
 * A(i, p) at a[i ai + p ap], B's rows ldb apart, C's ldc; each C element
 * sums over p in order. Call only where htp__wide_tiles(). */
void htp__small_product(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t ai,
                        int64_t ap, const float *b, int64_t ldb, float *c, int64_t ldc);
/* One head's forward by the small products: p[t, t] = softmax(scale q kᵀ)
 * and ctx = p v; q, k, v rows `stride` floats apart, ctx rows ctx_stride. */
void htp__small_head_forward(const float *q, const float *k, const float *v, int64_t stride,
                             float *ctx, int64_t ctx_stride, int64_t tokens, int64_t head_dim,
                             float scale, float *p);
#endif

/* One range of htp_cpu_gelu_f32 and one row of htp_cpu_layer_norm_f32, on
 * the calling thread (the same numbers): for the bf16 entries, which widen
 * and round a block at a time around them. In place is allowed. */
void htp__gelu_range(const float *x, float *y, int64_t n, int32_t tanh_approx);
void htp__layer_norm_row(const float *in, const float *gamma, const float *beta, float *out,
                         int64_t dim, float epsilon);

/* The threads the kernels' own loops may use: the same count as BLAS's
 * (htp_cpu_set_blas_threads), so a rank's loops stay within its share of
 * the cores and tp ranks do not oversubscribe them. Always >= 1. */
int htp__threads(void);

/* Runs fn(ctx, begin, end) over [0, n) in chunks of `grain` items on up to
 * htp__threads() threads (the caller included), and returns when all are
 * done. Chunks may run in any order and concurrently; fn must not call
 * htp__parallel itself (it would run serially: the pool is busy). */
typedef void (*htp__chunk_fn)(void *ctx, int64_t begin, int64_t end);
void htp__parallel(int64_t n, int64_t grain, htp__chunk_fn fn, void *ctx);

/* C[m, n] = alpha op(A) op(B) + beta C, row-major (op(A) is [m, k], op(B)
 * [k, n]): cblas_sgemm with C split by rows or columns over the pool (each
 * part one single-threaded BLAS call; every C element's sum over k is one
 * call's). Every GEMM of the kernels goes through here. */
void htp__sgemm(CBLAS_TRANSPOSE transa, CBLAS_TRANSPOSE transb, int64_t m, int64_t n, int64_t k,
                float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                float beta, float *c, int64_t ldc);

/* The same product where one operand is a weight (every linear, forward
 * and backward: x·wᵀ, dy·w, dyᵀ·x): computed at the matmul precision the CPU
 * table's set_matmul_precision chose (process-wide, as the thread count).
 * HTP_MATMUL_F32 is htp__sgemm; HTP_MATMUL_BF16 and HTP_MATMUL_TF32 round
 * each element of A and B to that format first (to nearest, ties to even)
 * and sum the exact products in f32: on oneDNN's bf16 units where the CPU
 * has them (bf16 with alpha 1 and beta 0 or 1), else as rounded f32 copies
 * through htp__sgemm (the same numbers, no faster). */
void htp__linear_gemm(CBLAS_TRANSPOSE transa, CBLAS_TRANSPOSE transb, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float beta, float *c, int64_t ldc);
/* The precision htp__linear_gemm computes at (an htp_matmul_precision). */
int htp__matmul_precision(void);
void htp__set_matmul_precision(int precision);

/* This thread's room `which` (HTP_ROOM_*) of at least `bytes`, 64-byte
 * aligned, kept between calls and freed when the thread ends; NULL when out
 * of memory. Its contents are the caller's until its next call for the same
 * room on this thread. */
enum { HTP_ROOM_ATTENTION, /* the bf16 attention's operands of one task */
       HTP_ROOM_OPERANDS,  /* htp__linear_gemm's rounded operands */
       HTP_ROOMS };
void *htp__thread_room(int which, size_t bytes);

/* Items per chunk of an elementwise loop: ~64 KiB of floats, enough that a
 * chunk costs far more than claiming it. */
enum { HTP_GRAIN = 16384 };

/* Hot loops are compiled three times on x86-64 (AVX-512, AVX2/FMA and
 * baseline) and picked at load time, so the library stays portable and still
 * uses wide vectors (AVX-512 halves GELU's time on this Zen 5).
 * Not under the sanitizers: their instrumented ifunc resolvers run before
 * the sanitizer runtime is up (TSan crashed in one at load). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define HTP_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HTP_VECTOR_CLONES
#endif

/* e^x in f32 for every x, within 2 ulp, written so loops over it
 * vectorise: range reduction by x = n ln2 + r with |r| <= ln2/2, a degree-7
 * Taylor polynomial for e^r, and n added into the exponent bits. Defined for
 * every input: below -104 (past ln 2^-150, where e^x rounds to 0) x is
 * taken as -104, so -inf gives 0 exactly; above 88.75 as 88.75, which
 * overflows to +inf; a NaN passes the clamp and the polynomial and comes out
 * NaN. n is read from the bits of the rounding sum, not converted from a
 * float (converting a NaN to int32_t is undefined), and the exponents are
 * shifted unsigned. */
static inline float htp__expf(float x) {
  x = x < -104.0f ? -104.0f : (x > 88.75f ? 88.75f : x);
  /* round(x / ln2) with the 1.5 * 2^23 trick: the sum's low mantissa bits
   * hold n (no call to a rounding function). */
  const float shifter = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + shifter;
  const float n = shifted - shifter;
  float r = x - n * 0.693145751953125f; /* ln2 high part, exact in f32 */
  r = r - n * 1.428606765330187e-06f;   /* ln2 low part */
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* 2^n in two halves so n down to -150 (subnormal results) stays exact.
   * For a finite x, n is in [-150, 128]; for a NaN the bits are some
   * pattern whose difference cannot overflow, and p is NaN anyway. */
  union { float f; int32_t i; } sum = {shifted}, base = {shifter};
  const int32_t ni = sum.i - base.i, half = ni / 2;
  union { uint32_t i; float f; } s1 = {(uint32_t)(half + 127) << 23},
                                 s2 = {(uint32_t)(ni - half + 127) << 23};
  return p * s1.f * s2.f;
}

/* erfc(|x| / sqrt 2) within ~3e-7 relative, for every x (the factor of the
 * exact GELU): erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), with P of
 * degree 9 fitted for this library (least squares on the log of the relative
 * error, in double, against math.erfc; 1e-7 in double). -z^2 = -x^2/2
 * reaches -100 and beyond, where rounding it to f32 alone would cost 1e-5,
 * so x^2 = hi + lo exactly (fmaf) and e^{-hi/2} e^{P - lo/2}. |x| is taken
 * as at most HTP_GELU_FAR (where the result is already 0 in f32), so x^2
 * neither overflows nor meets inf - inf in lo; a NaN stays NaN. */
#define HTP_GELU_FAR 20.0f
static inline float htp__erfc_gelu(float x) {
  float a = fabsf(x);
  a = a > HTP_GELU_FAR ? HTP_GELU_FAR : a;
  float z = a * 0.7071067811865476f;
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.13332033f;
  p = p * t - 0.61785326f;
  p = p * t + 1.00939376f;
  p = p * t - 0.50170282f;
  p = p * t - 0.23948576f;
  p = p * t + 0.08468194f;
  p = p * t + 0.00673323f;
  p = p * t + 0.39234314f;
  p = p * t + 0.99798669f;
  p = p * t - 1.26541721f;
  float hi = a * a, lo = fmaf(a, a, -hi);
  return t * htp__expf(-0.5f * hi) * htp__expf(p - 0.5f * lo);
}

/* x, or -HTP_GELU_FAR below it (NaN as it is): GELU's x Phi(x) with Phi
 * already 0 out there, so GELU(-inf) is its limit 0 rather than -inf * 0. */
static inline float htp__gelu_far_left(float x) {
  return x < -HTP_GELU_FAR ? -HTP_GELU_FAR : x;
}

/* x within [-HTP_GELU_FAR, HTP_GELU_FAR] (NaN as it is): for the factor x of
 * the derivative's terms that are 0 out there on both sides (x phi(x), x
 * (1 - tanh^2)), where inf * 0 would be NaN and the limit is 0. */
static inline float htp__gelu_far_clamp(float x) {
  return x > HTP_GELU_FAR ? HTP_GELU_FAR : htp__gelu_far_left(x);
}

#endif /* HTP_KERNELS_CPU_INTERNAL_H */
