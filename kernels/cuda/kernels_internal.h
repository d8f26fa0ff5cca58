/*===- kernels/cuda/kernels_internal.h - State and checks of the CUDA twins ===*
 *
 * Shared by the .cu files and table.c. The part under __CUDACC__ is what
 * lets one kernel body serve f32 and bf16: loads widen to f32, stores
 * round once (round to nearest even, cuda_bf16.h's __float2bfloat16_rn,
 * the rounding of kernels/htp_bf16.h), and the GEMM helper maps the
 * element types to cuBLAS's (f32 compute in every case).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CUDA_INTERNAL_H
#define HTP_KERNELS_CUDA_INTERNAL_H

#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels_cuda.h"
#include "kernels/htp_scratch.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

/* How a linear with a bias gets its bias (HTP_CUDA_LINEAR_EPILOGUE, read
 * when the object is made): CUBLASLT, the default since an H200 passed it
 * (bench/RESULTS.md, 2026-11-28), adds it in cuBLASLt's epilogue to the f32
 * accumulator, no split-K reduction allowed, for aligned shapes (linear.cu);
 * PASS, what other shapes take and "pass" asks for everywhere, has the GEMM
 * write x·wᵀ (f32: onto the broadcast bias; bf16: into the f32 workspace,
 * then one bias-and-round pass). */
enum { HTP_CUDA_EPILOGUE_PASS = 0, HTP_CUDA_EPILOGUE_CUBLASLT = 1 };
/* Which kernel runs the fused bf16 attention (HTP_CUDA_ATTENTION, read when
 * the object is made; attention.cu): MMA, the default since an H200 passed
 * it (mma.sync with the scores and context in registers, heads up to 128
 * wide, a block per 64 queries); WMMA, what wider heads take and "wmma"
 * asks for everywhere; or HEAD, the mma.sync kernel with a block per image
 * and head (k and v loaded once; up to 256 tokens, heads up to 64 wide, the
 * rest on MMA), an experiment until a GPU check passes it. */
enum { HTP_CUDA_ATTENTION_WMMA = 0, HTP_CUDA_ATTENTION_MMA = 1, HTP_CUDA_ATTENTION_HEAD = 2 };
/* Which kernel runs the layer norm (HTP_CUDA_LAYER_NORM, read when the
 * object is made; layer_norm.cu): BLOCK, the verified default, a block of
 * 256 threads a row; or WARP, a warp a row with the row in registers (rows
 * of up to 2048 elements moved in fours), an experiment until a GPU check
 * passes it. */
enum { HTP_CUDA_LAYER_NORM_BLOCK = 0, HTP_CUDA_LAYER_NORM_WARP = 1 };
/* What runs a bf16 linear with a bias and the fused bf16 linear + GELU
 * (HTP_CUDA_GEMM, read when the object is made): CUBLAS, the verified
 * default (linear.cu, units.cu); or CUTLASS, one CUTLASS Hopper GEMM with
 * the bias and the GELU in its epilogue (linear_sm90.cu), where the build
 * has CUTLASS (HTP_HAVE_CUTLASS), the device is compute capability 9.0 and
 * the shape is aligned, an experiment until a GPU check passes it. */
enum { HTP_CUDA_GEMM_CUBLAS = 0, HTP_CUDA_GEMM_CUTLASS = 1 };
/* Where a fused residual add (the linear_residual and attention_residual
 * entries) happens (HTP_CUDA_RESIDUAL, read when the object is made): ADD,
 * the verified default, the linear as before and then the add kernel; or
 * EPILOGUE, the residual as the GEMM epilogue's C with beta 1 (cuBLASLt's,
 * CUTLASS's) where the linear takes an epilogue, an experiment until a GPU
 * check passes it. */
enum { HTP_CUDA_RESIDUAL_ADD = 0, HTP_CUDA_RESIDUAL_EPILOGUE = 1 };
struct htp_cuda_lt_cache;

struct htp_cuda_kernels {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  /* cuBLASLt for the bias epilogue (linear.cu): its handle, its plans by
   * shape (NULL until the first), its workspace (grown once). */
  cublasLtHandle_t lt;
  int linear_epilogue;  /* HTP_CUDA_EPILOGUE_* */
  int attention_kernel; /* HTP_CUDA_ATTENTION_* */
  int layer_norm_kernel; /* HTP_CUDA_LAYER_NORM_* */
  int gemm_kernel;       /* HTP_CUDA_GEMM_* */
  int residual;          /* HTP_CUDA_RESIDUAL_* */
  int sm90; /* compute capability 9.0: the SMs CUTLASS may use; -1: not; 0: not asked */
  /* The shapes the CUTLASS GEMM has said its tile for (linear_sm90.cu). */
  struct {
    int64_t rows, in_features, out_features;
    int epilogue; /* 0 bias, 1 bias + GELU, 2 bias + residual */
  } sm90_noted[32];
  int sm90_noted_count;
  /* htp_matmul_precision of the products with a weight (htp_cuda_gemm's
   * f32 compute type, the cuBLASLt plans'); the table sets it. */
  int matmul_precision;
  struct htp_cuda_lt_cache *lt_cache;
  void *lt_workspace;
  size_t lt_workspace_bytes;
  /* The listed-heads kernel's attention scratch and gathered weights
   * (units.cu, htp_cuda_heads_bytes): grown on demand, freed with the
   * object. */
  void *heads_scratch;
  size_t heads_scratch_bytes;
  /* Device copy of the host-side lists (unit ids, input pointers) that the
   * gather kernels read (gather.cu); grown on demand, freed with the object. */
  void *staging;
  size_t staging_bytes;
  /* f32 intermediates of the bf16 kernels that get no scratch from their
   * caller but must round their outputs once (the linear with a bias, the
   * unit kernels); grown on demand, freed with the object. */
  void *workspace;
  size_t workspace_bytes;
  /* The table's timing marks (table.c mark/elapsed), a pair per timer:
   * events on the stream, created on first use (in a green context, at
   * creation); bit i of marks_recorded[timer] once mark i was. */
  /* The fused bf16 attention (attention.cu): the shared memory the device
   * lets one block have (0: not asked yet), and a bit per kernel and head
   * width that was allowed it (the WMMA kernel's DP / 32, the mma one's
   * DP / 32 << 4), so neither is asked again every call. */
  int shared_per_block;
  unsigned fused_allowed;
  cudaEvent_t marks[HTP_KERNEL_TIMERS][2];
  int marks_recorded[HTP_KERNEL_TIMERS];
  /* 0 when stream is the caller's (the nccl backend's, or the partition's
   * below): destroying the object leaves it alone. */
  int owns_stream;
  /* The green context the stream belongs to (green.c), owned, or NULL: the
   * whole device. */
  struct htp_cuda_partition *partition;
  char error[256];
};

#ifdef __cplusplus
extern "C" {
#endif

/* ----- SM partitions (green.c) ---------------------------------------------
 * A green context of sm_count SMs of device and a non-blocking stream in
 * it. Partitions of one process and device never share SMs: the device is
 * split once into groups of its partition step and each partition takes
 * whole free groups. Returns 0 (HTP_KERNEL_OK), or with why in err
 * HTP_KERNEL_ERR_INVALID (a count that is not a whole number of steps,
 * more SMs than are free) or HTP_KERNEL_ERR_SYSTEM / _NOMEM (no driver,
 * no device, a failing driver call). */
typedef struct htp_cuda_partition htp_cuda_partition;
int htp_cuda_partition_create(int device, int sm_count, htp_cuda_partition **out,
                              cudaStream_t *stream, char *err, size_t err_size);
/* Waits for the stream, destroys it and the green context, frees the SMs.
 * Accepts NULL. */
void htp_cuda_partition_destroy(htp_cuda_partition *partition);
/* Makes the green context current on the calling thread (push) / restores
 * the previous one (pop): around creating what must belong to it. */
int htp_cuda_partition_enter(htp_cuda_partition *partition, char *err, size_t err_size);
void htp_cuda_partition_leave(htp_cuda_partition *partition);
int htp_cuda_partition_sm_count(const htp_cuda_partition *partition);

/* htp_cuda_kernels_create on a given stream: stream NULL creates the
 * object's own; otherwise the object uses it and never destroys it, and
 * partition (may be NULL), whose stream it is, becomes the object's (freed
 * with it, on failure too). The cuBLAS handle and the timing events are
 * made inside the partition's green context and bound to the stream. */
int htp_cuda_kernels_create_on(int device, cudaStream_t stream, htp_cuda_partition *partition,
                               htp_cuda_kernels **out, char *err, int err_size);

#ifdef __cplusplus
}
#endif

/* Makes *buffer (one of kernels' own device buffers, *size its size)
 * hold at least `bytes` bytes, sized by a formula of kernels/htp_scratch.h
 * (negative: it overflowed, refused). It grows to the request itself, not
 * beyond, so the object never holds more than the largest request the
 * compiler bounded (kernel_memory_bytes). Growing waits for the stream
 * first (earlier launches may still read the old buffer). Returns 0, or
 * non-zero with the error. */
int htp_cuda_buffer_reserve(htp_cuda_kernels *kernels, void **buffer, size_t *size,
                            int64_t bytes);
/* The object's f32 workspace as [rows, columns] floats
 * (htp_cuda_sums_bytes), or NULL with the error: the f32 results of the
 * bf16 kernels that round once (the linear with a bias, the unit kernels). */
float *htp_cuda_workspace(htp_cuda_kernels *kernels, int64_t rows, int64_t columns);

/* Frees the cuBLASLt plans (linear.cu); accepts NULL. */
void htp_cuda_lt_cache_destroy(struct htp_cuda_lt_cache *cache);
/* The linear epilogue HTP_CUDA_LINEAR_EPILOGUE asks for (unset or
 * "cublaslt": CUBLASLT, "pass": PASS), or -1 for any other value. */
int htp_cuda_linear_epilogue_from_env(void);
/* The attention kernel HTP_CUDA_ATTENTION asks for (unset or "mma": MMA,
 * "wmma": WMMA, "head": HEAD), or -1 for any other value (attention.cu). */
int htp_cuda_attention_kernel_from_env(void);
/* The layer norm HTP_CUDA_LAYER_NORM asks for (unset or "block": BLOCK,
 * "warp": WARP), or -1 for any other value (layer_norm.cu). */
int htp_cuda_layer_norm_kernel_from_env(void);
/* The GEMM HTP_CUDA_GEMM asks for (unset or "cublas": CUBLAS, "cutlass":
 * CUTLASS where the build has it), or -1 for any other value (linear.cu). */
int htp_cuda_gemm_kernel_from_env(void);
/* Where HTP_CUDA_RESIDUAL puts the residual add (unset or "add": ADD,
 * "epilogue": EPILOGUE), or -1 for any other value (linear.cu). */
int htp_cuda_residual_from_env(void);

/* Numerically stable softmax of each of `rows` rows of `cols` scores, in
 * place, enqueued on kernels' stream (attention.cu; the plain and the
 * listed-heads attention share it). Returns 0, or non-zero with the error. */
int htp_cuda_softmax_rows(htp_cuda_kernels *kernels, float *scores, int64_t rows,
                          int64_t cols);

/* Records a failure on `kernels` and returns non-zero; 0 for success. */
int htp_cuda_fail(htp_cuda_kernels *kernels, const char *what, const char *detail);

/* 0 when a linear's / an attention's sizes fit the kernels' int arguments
 * (htp_kernel_gemm_sizes_problem, htp_kernel_attention_sizes_problem: the
 * checked device holds the CPU to the same); else records why (op names
 * the caller). */
int htp_cuda_check_gemm_sizes(htp_cuda_kernels *kernels, const char *op, int64_t rows,
                              int64_t in_features, int64_t out_features);
int htp_cuda_check_attention_sizes(htp_cuda_kernels *kernels, const char *op, int64_t batch,
                                   int64_t tokens, int64_t model_dim, int64_t num_heads,
                                   int64_t head_dim);

#define HTP_CUDA_CHECK(kernels, call)                                                    \
  do {                                                                                  \
    cudaError_t status_ = (call);                                                       \
    if (status_ != cudaSuccess)                                                         \
      return htp_cuda_fail((kernels), #call, cudaGetErrorString(status_));              \
  } while (0)

#define HTP_CUBLAS_CHECK(kernels, call)                                                  \
  do {                                                                                  \
    cublasStatus_t status_ = (call);                                                    \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                               \
      return htp_cuda_fail((kernels), #call, cublasGetStatusString(status_));           \
  } while (0)

/* A launch leaves no status of its own: ask for the last error. */
#define HTP_CUDA_CHECK_LAUNCH(kernels) HTP_CUDA_CHECK(kernels, cudaGetLastError())

static inline unsigned htp_cuda_blocks(int64_t n, int threads) {
  return (unsigned)((n + threads - 1) / threads);
}

#ifdef __CUDACC__
#include <cuda_bf16.h>

/* The device's bf16: the same bits as htp_bf16 (kernels/htp_bf16.h). */
typedef __nv_bfloat16 htp_cuda_bf16;
static_assert(sizeof(htp_cuda_bf16) == sizeof(htp_bf16), "bf16 is two bytes");

static inline const htp_cuda_bf16 *htp_cuda_bf16_ptr(const htp_bf16 *p) {
  return reinterpret_cast<const htp_cuda_bf16 *>(p);
}
static inline htp_cuda_bf16 *htp_cuda_bf16_ptr(htp_bf16 *p) {
  return reinterpret_cast<htp_cuda_bf16 *>(p);
}
static inline const htp_cuda_bf16 *const *htp_cuda_bf16_ptr(const htp_bf16 *const *p) {
  return reinterpret_cast<const htp_cuda_bf16 *const *>(p);
}

/* Element i as f32, and v stored as the element type (rounded once). */
__device__ __forceinline__ float htp_cuda_load(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float htp_cuda_load(const htp_cuda_bf16 *p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void htp_cuda_store(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void htp_cuda_store(htp_cuda_bf16 *p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

/* Four consecutive elements i..i+3 as f32 in one load (16 bytes of f32, 8
 * of bf16), and four stored, each rounded once: for the memory-bound
 * passes, where one element per thread and load leaves most of the DRAM's
 * bandwidth unused. i must be a multiple of 4 and p aligned to four
 * elements (htp_cuda_quads says when a pass may use them). */
__device__ __forceinline__ float4 htp_cuda_load4(const float *p, int64_t i) {
  return *reinterpret_cast<const float4 *>(p + i);
}
__device__ __forceinline__ float4 htp_cuda_load4(const htp_cuda_bf16 *p, int64_t i) {
  const uint2 raw = *reinterpret_cast<const uint2 *>(p + i);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ void htp_cuda_store4(float *p, int64_t i, float4 v) {
  *reinterpret_cast<float4 *>(p + i) = v;
}
__device__ __forceinline__ void htp_cuda_store4(htp_cuda_bf16 *p, int64_t i, float4 v) {
  uint2 raw;
  *reinterpret_cast<__nv_bfloat162 *>(&raw.x) = __floats2bfloat162_rn(v.x, v.y);
  *reinterpret_cast<__nv_bfloat162 *>(&raw.y) = __floats2bfloat162_rn(v.z, v.w);
  *reinterpret_cast<uint2 *>(p + i) = raw;
}

/* Whether a pass over `n` elements per row (or in all) may move them in
 * fours: n a multiple of 4 and every pointer aligned to four elements of
 * its type (NULL pointers are ignored). */
template <typename... P> inline bool htp_cuda_quads(int64_t n, const P *...pointers) {
  return n % 4 == 0 &&
         ((pointers == nullptr || reinterpret_cast<uintptr_t>(pointers) % (4 * sizeof(P)) == 0) &&
          ...);
}

/* GELU in f32, exact (erf) or timm's tanh approximation, as the CPU twin. */
__device__ __forceinline__ float htp_cuda_gelu(float v, int32_t tanh_approx) {
  if (tanh_approx)
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}

template <typename T> struct htp_cuda_type;
template <> struct htp_cuda_type<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };
template <> struct htp_cuda_type<htp_cuda_bf16> {
  static constexpr cudaDataType_t value = CUDA_R_16BF;
};

/* The compute type of a product with a weight whose operands are of type
 * In: f32 ones at the object's matmul precision (exact f32, or rounded to
 * TF32 or bf16 on the tensor cores with f32 sums), bf16 ones with f32
 * accumulation. Attention's own products (cublasSgemm*) are always f32. */
template <typename In> inline cublasComputeType_t htp_cuda_compute_type(const htp_cuda_kernels *k) {
  if (htp_cuda_type<In>::value == CUDA_R_32F && k->matmul_precision == HTP_MATMUL_TF32)
    return CUBLAS_COMPUTE_32F_FAST_TF32;
  if (htp_cuda_type<In>::value == CUDA_R_32F && k->matmul_precision == HTP_MATMUL_BF16)
    return CUBLAS_COMPUTE_32F_FAST_16BF;
  return CUBLAS_COMPUTE_32F;
}

/* C = alpha·op(A)·op(B) + beta·C, column-major as cuBLAS: A and B of type
 * In, C of type Out, accumulated in f32 (htp_cuda_compute_type: for f32
 * operands the matmul precision, no TF32 by default; tensor cores for
 * bf16), C rounded once. The pairs cuBLAS supports: (f32, f32), (bf16,
 * bf16), (bf16, f32). Every product with a weight goes through here. */
template <typename In, typename Out>
int htp_cuda_gemm(htp_cuda_kernels *kernels, cublasOperation_t trans_a, cublasOperation_t trans_b,
                  int m, int n, int k, float alpha, const In *a, int lda, const In *b, int ldb,
                  float beta, Out *c, int ldc) {
  HTP_CUBLAS_CHECK(kernels, cublasGemmEx(kernels->blas, trans_a, trans_b, m, n, k, &alpha, a,
                                         htp_cuda_type<In>::value, lda, b,
                                         htp_cuda_type<In>::value, ldb, &beta, c,
                                         htp_cuda_type<Out>::value, ldc,
                                         htp_cuda_compute_type<In>(kernels),
                                         CUBLAS_GEMM_DEFAULT));
  return 0;
}

/* y[rows, out] = x[rows, in]·wᵀ + b + r (b and r may be NULL; r, a
 * residual, of y's shape and not overlapping it), x, w, b of type In, y and
 * r of type Out (linear.cu; instantiated for (f32, f32), (bf16, bf16) and
 * (bf16, f32): attention's qkv projection into f32 scratch). */
template <typename In, typename Out>
int htp_cuda_linear(htp_cuda_kernels *kernels, const In *x, const In *w, const In *b, Out *y,
                    int64_t rows, int64_t in_features, int64_t out_features,
                    const Out *r = nullptr);

/* y = a + b, n elements (elementwise.cu; f32 and bf16, y may be a or b). */
template <typename T>
int htp_cuda_add(htp_cuda_kernels *kernels, const T *a, const T *b, T *y, int64_t n);

/* y = x·wᵀ + b (+ r, a residual of [rows, out], where r is not NULL), through
 * the GELU where gelu is non-zero (not with r), all bf16, y's rows
 * ld_y elements apart, as one CUTLASS Hopper GEMM (linear_sm90.cu; built
 * where HTP_HAVE_CUTLASS). Returns 1 when enqueued, 0 when it does not take
 * the call (HTP_CUDA_GEMM is not cutlass, the device is not compute
 * capability 9.0, the shape or alignment does not suit, no bias) and the
 * caller runs the cuBLAS path, -1 on failure (the error recorded). */
int htp_cuda_sm90_linear(htp_cuda_kernels *kernels, const htp_cuda_bf16 *x,
                         const htp_cuda_bf16 *w, const htp_cuda_bf16 *b,
                         const htp_cuda_bf16 *r, htp_cuda_bf16 *y, int64_t ld_y, int64_t rows,
                         int64_t in_features, int64_t out_features, int gelu);

/* Every head's attention context, [rows, heads·head_dim] of T (attention.cu):
 * q, k, v = x·wqkvᵀ + b, softmax(q·kᵀ/√head_dim)·v per head and image, in
 * scratch laid out as htp_cuda_attention_scratch_floats says (qkv, context,
 * scores). Returns where the context is, inside scratch (the context
 * region, or a bf16 block's qkv region off the fused kernel), or NULL with
 * the error. htp_cuda_attention_* project it; the listed-heads kernel takes
 * it when its list is every head in order (units.cu). */
template <typename T>
T *htp_cuda_attention_context(htp_cuda_kernels *kernels, const T *x, const T *wqkv,
                              const T *bqkv, float *scratch, int64_t batch, int64_t tokens,
                              int64_t model_dim, int64_t num_heads, int64_t head_dim);

/* y[r, c] = x[r, c] + bias[c] (+ res[r, c] where res is not NULL) for a
 * rows x cols block, summed in f32 and rounded once to Y (elementwise.cu;
 * instantiated for the bias_add and bias_add_residual entries and for f32
 * sums with a bf16 bias into bf16: the bf16 linear). */
template <typename X, typename B, typename Y>
int htp_cuda_bias_add_block(htp_cuda_kernels *kernels, const X *x, const B *bias, Y *y,
                            int64_t rows, int64_t cols, const Y *res = nullptr);

/* dst[r, c] = src[r, c] converted (rounded once when Out is bf16), for a
 * rows × cols block with leading dimensions src_ld and dst_ld (elements)
 * (elementwise.cu; instantiated for f32 -> bf16 and bf16 -> f32). */
template <typename In, typename Out>
int htp_cuda_convert_block(htp_cuda_kernels *kernels, const In *src, int64_t src_ld, Out *dst,
                           int64_t dst_ld, int64_t rows, int64_t cols);
#endif /* __CUDACC__ */

#endif /* HTP_KERNELS_CUDA_INTERNAL_H */
