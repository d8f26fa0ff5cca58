/*===- kernels/cuda/linear.cu - y = x·wᵀ + b through cuBLAS --------------===*
 *
 * cuBLAS is column-major: the row-major y[rows, out] = x·wᵀ is the
 * column-major yᵀ = w·xᵀ, i.e. gemm(T, N) with w and x as stored. The bias,
 * by the object's linear epilogue (kernels_internal.h):
 * - PASS (default): an f32 y gets the bias broadcast into it first and the
 *   GEMM accumulates onto it (beta = 1); a bf16 y is rounded once from f32:
 *   the GEMM writes x·wᵀ into the f32 workspace and one pass adds the bias
 *   and rounds (10 bytes an element, where broadcast, accumulate and
 *   convert took 18). Not cuBLAS's beta = 1 onto a bf16 C: on an H200
 *   (cuBLAS 13) it rounded x·wᵀ to bf16 before adding the bias at
 *   ViT-B/16's shapes, up to 4 bf16 ulps off where the bias cancels the
 *   product (gpu-check, 2026-11-27).
 * - CUBLASLT: one cuBLASLt matmul with CUBLASLT_EPILOGUE_BIAS, which adds
 *   the bias to the f32 accumulator before the one rounding: no f32 round
 *   trip (ViT-L/16 bf16, batch 64: ~0.9 GB less traffic a block). A plan
 *   takes the heuristic's best candidate that does not split K (split
 *   partial sums reduced in bf16 would round early: the likely cause of an
 *   early cuBLASLt try failing the kernel tests at K = 333), and only
 *   shapes whose sizes are multiples of 8 with 16-byte aligned tensors
 *   take it; the rest, and a shape with no such candidate, take PASS.
 * A residual r (the fused add of a ViT block's projection and fc2) is
 * an add after the linear, or with HTP_CUDA_RESIDUAL=epilogue cuBLASLt's C
 * with beta 1 and CUTLASS's source (PASS shapes add it in their bf16 bias
 * pass, else after).
 * One body for every element type pair (htp_cuda_linear, kernels_internal.h).
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

namespace {

template <typename In, typename Out>
__global__ void broadcast_bias_kernel(const In *bias, Out *y, int64_t rows, int64_t cols) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols)
    htp_cuda_store(y, i, htp_cuda_load(bias, i % cols));
}

} // namespace

/* ----- cuBLASLt plans, by shape ------------------------------------------ */

/* One shape's matmul: descriptors made once, the heuristic's algorithm, or
 * usable = 0 when it offered none without a split-K reduction. */
struct htp_cuda_lt_plan {
  int64_t rows, in_features, out_features;
  cudaDataType_t type; /* of x, w, b and y alike */
  cublasComputeType_t compute; /* htp_cuda_compute_type: the matmul precision */
  int usable;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t w_layout, x_layout, y_layout;
  cublasLtMatmulAlgo_t algo;
};

/* A few shapes a model uses again and again; filled in turn, the oldest
 * replaced when full. */
enum { HTP_CUDA_LT_PLANS = 32 };
struct htp_cuda_lt_cache {
  htp_cuda_lt_plan plans[HTP_CUDA_LT_PLANS];
  int count, next;
};

static void lt_plan_release(htp_cuda_lt_plan *plan) {
  if (plan->desc) cublasLtMatmulDescDestroy(plan->desc);
  if (plan->w_layout) cublasLtMatrixLayoutDestroy(plan->w_layout);
  if (plan->x_layout) cublasLtMatrixLayoutDestroy(plan->x_layout);
  if (plan->y_layout) cublasLtMatrixLayoutDestroy(plan->y_layout);
  memset(plan, 0, sizeof *plan);
}

void htp_cuda_lt_cache_destroy(htp_cuda_lt_cache *cache) {
  if (!cache)
    return;
  for (int i = 0; i < cache->count; ++i)
    lt_plan_release(&cache->plans[i]);
  free(cache);
}

int htp_cuda_linear_epilogue_from_env(void) {
  const char *value = getenv("HTP_CUDA_LINEAR_EPILOGUE");
  if (!value || !*value || strcmp(value, "cublaslt") == 0)
    return HTP_CUDA_EPILOGUE_CUBLASLT;
  return strcmp(value, "pass") == 0 ? HTP_CUDA_EPILOGUE_PASS : -1;
}

int htp_cuda_residual_from_env(void) {
  const char *value = getenv("HTP_CUDA_RESIDUAL");
  if (!value || !*value || strcmp(value, "add") == 0)
    return HTP_CUDA_RESIDUAL_ADD;
  return strcmp(value, "epilogue") == 0 ? HTP_CUDA_RESIDUAL_EPILOGUE : -1;
}

int htp_cuda_gemm_kernel_from_env(void) {
  const char *value = getenv("HTP_CUDA_GEMM");
  if (!value || !*value || strcmp(value, "cublas") == 0)
    return HTP_CUDA_GEMM_CUBLAS;
#ifdef HTP_HAVE_CUTLASS
  if (strcmp(value, "cutlass") == 0)
    return HTP_CUDA_GEMM_CUTLASS;
#endif
  return -1;
}

/* Where the variable names the epilogue (a check asking for it), each
 * shape's plan is said once on stderr, so the check's log shows what ran. */
static void note_plan(const htp_cuda_lt_plan *plan, const char *what) {
  if (!getenv("HTP_CUDA_LINEAR_EPILOGUE"))
    return;
  fprintf(stderr, "htp cuda: linear %s [%lld x %lld -> %lld]: cuBLASLt %s\n",
          plan->type == CUDA_R_16BF ? "bf16" : "f32", (long long)plan->rows,
          (long long)plan->in_features, (long long)plan->out_features, what);
}

#define HTP_LT_TRY(call)                                                                 \
  do {                                                                                  \
    cublasStatus_t status_ = (call);                                                    \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                             \
      lt_plan_release(plan);                                                            \
      return htp_cuda_fail(kernels, #call, cublasGetStatusString(status_));             \
    }                                                                                   \
  } while (0)

/* Makes *plan the matmul for yᵀ[out, rows] = op(wᵀ)·x plus the bias. */
static int lt_plan_make(htp_cuda_kernels *kernels, htp_cuda_lt_plan *plan, cudaDataType_t type,
                        cublasComputeType_t compute, int64_t rows, int64_t in_features,
                        int64_t out_features) {
  memset(plan, 0, sizeof *plan);
  plan->rows = rows;
  plan->in_features = in_features;
  plan->out_features = out_features;
  plan->type = type;
  plan->compute = compute;
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  HTP_LT_TRY(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  HTP_LT_TRY(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                            sizeof transpose));
  HTP_LT_TRY(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep,
                                            sizeof keep));
  HTP_LT_TRY(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                            sizeof epilogue));
  HTP_LT_TRY(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                            &type, sizeof type));
  /* In an SM partition the heuristics plan for its SMs, not the device's. */
  const int32_t sm_target = kernels->partition ? htp_cuda_partition_sm_count(kernels->partition)
                                               : 0;
  if (sm_target > 0)
    HTP_LT_TRY(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                              &sm_target, sizeof sm_target));
  /* Stored column-major: w as [in, out] (op T), x as [in, rows], y as [out, rows]. */
  HTP_LT_TRY(cublasLtMatrixLayoutCreate(&plan->w_layout, type, (uint64_t)in_features,
                                        (uint64_t)out_features, in_features));
  HTP_LT_TRY(cublasLtMatrixLayoutCreate(&plan->x_layout, type, (uint64_t)in_features,
                                        (uint64_t)rows, in_features));
  HTP_LT_TRY(cublasLtMatrixLayoutCreate(&plan->y_layout, type, (uint64_t)out_features,
                                        (uint64_t)rows, out_features));
  cublasLtMatmulPreference_t preference = NULL;
  HTP_LT_TRY(cublasLtMatmulPreferenceCreate(&preference));
  const size_t workspace = HTP_CUDA_LT_WORKSPACE_BYTES;
  enum { kCandidates = 8 };
  cublasLtMatmulHeuristicResult_t results[kCandidates];
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(kernels->lt, plan->desc, plan->w_layout,
                                            plan->x_layout, plan->y_layout, plan->y_layout,
                                            preference, kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  /* No plan is not an error: the shape takes the pass. */
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found < 1)) {
    note_plan(plan, "declined (no algorithm): the bias pass");
    return 0;
  }
  HTP_LT_TRY(status);
  /* The best candidate that does not split K (split partial sums are
   * reduced, in some schemes stored rounded) and fits the workspace. */
  for (int i = 0; i < found && !plan->usable; ++i) {
    int32_t splits = 1;
    size_t written = 0;
    if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > workspace ||
        cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                             &splits, sizeof splits,
                                             &written) != CUBLAS_STATUS_SUCCESS ||
        splits > 1)
      continue;
    plan->algo = results[i].algo;
    plan->usable = 1;
  }
  note_plan(plan, plan->usable ? "its epilogue"
                               : "declined (no candidate known not to split K): the bias pass");
  return 0;
}

/* The plan for this shape (made on first use), or NULL with the error. */
static htp_cuda_lt_plan *lt_plan(htp_cuda_kernels *kernels, cudaDataType_t type,
                                 cublasComputeType_t compute, int64_t rows, int64_t in_features,
                                 int64_t out_features) {
  htp_cuda_lt_cache *cache = kernels->lt_cache;
  if (!cache) {
    cache = (htp_cuda_lt_cache *)calloc(1, sizeof *cache);
    if (!cache) {
      htp_cuda_fail(kernels, "linear", "out of host memory for cuBLASLt plans");
      return NULL;
    }
    kernels->lt_cache = cache;
  }
  for (int i = 0; i < cache->count; ++i) {
    htp_cuda_lt_plan *plan = &cache->plans[i];
    if (plan->rows == rows && plan->in_features == in_features &&
        plan->out_features == out_features && plan->type == type && plan->compute == compute)
      return plan;
  }
  htp_cuda_lt_plan *plan = &cache->plans[cache->next];
  cache->next = (cache->next + 1) % HTP_CUDA_LT_PLANS;
  if (cache->count < HTP_CUDA_LT_PLANS)
    ++cache->count;
  else
    lt_plan_release(plan);
  return lt_plan_make(kernels, plan, type, compute, rows, in_features, out_features) ? NULL
                                                                                     : plan;
}

/* Whether the epilogue may take this shape: sizes multiples of 8 and every
 * tensor 16-byte aligned (cuBLASLt's tensor-core kernels' own conditions;
 * the shapes a model is made of, where the speed is). */
static bool lt_shape(int64_t in_features, int64_t out_features, const void *x, const void *w,
                     const void *b, const void *r, const void *y) {
  const uintptr_t bits =
      (uintptr_t)x | (uintptr_t)w | (uintptr_t)b | (uintptr_t)r | (uintptr_t)y;
  return in_features % 8 == 0 && out_features % 8 == 0 && bits % 16 == 0;
}

/* y = x·wᵀ + b (+ r, as C with beta 1) in one cuBLASLt matmul: 1 when done,
 * 0 when this shape takes the pass instead, -1 on failure (the error
 * recorded). */
template <typename T>
static int lt_linear(htp_cuda_kernels *kernels, const T *x, const T *w, const T *b, const T *r,
                     T *y, int64_t rows, int64_t in_features, int64_t out_features) {
  if (kernels->linear_epilogue != HTP_CUDA_EPILOGUE_CUBLASLT ||
      !lt_shape(in_features, out_features, x, w, b, r, y))
    return 0;
  htp_cuda_lt_plan *plan = lt_plan(kernels, htp_cuda_type<T>::value,
                                   htp_cuda_compute_type<T>(kernels), rows, in_features,
                                   out_features);
  if (!plan)
    return -1;
  if (!plan->usable)
    return 0;
  if (htp_cuda_buffer_reserve(kernels, &kernels->lt_workspace, &kernels->lt_workspace_bytes,
                              HTP_CUDA_LT_WORKSPACE_BYTES))
    return -1;
  const float one = 1.0f, beta = r ? 1.0f : 0.0f;
  cublasStatus_t status = cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b);
  /* C has y's layout; without r it is y itself, unread with beta 0. */
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmul(kernels->lt, plan->desc, &one, w, plan->w_layout, x, plan->x_layout,
                            &beta, r ? r : y, plan->y_layout, y, plan->y_layout, &plan->algo,
                            kernels->lt_workspace, HTP_CUDA_LT_WORKSPACE_BYTES, kernels->stream);
  if (status != CUBLAS_STATUS_SUCCESS) {
    htp_cuda_fail(kernels, "cublasLtMatmul (linear with a bias)", cublasGetStatusString(status));
    return -1;
  }
  return 1;
}

/* The linear without an epilogue: a GEMM, and the bias as PASS adds it;
 * r (where not NULL) added after, or in the bf16 bias pass itself (the f32
 * sum + b + r rounded once). */
template <typename In, typename Out>
static int pass_linear(htp_cuda_kernels *kernels, const In *x, const In *w, const In *b, Out *y,
                       int64_t rows, int64_t in_features, int64_t out_features, const Out *r) {
  const int64_t n = rows * out_features;
  if (!b)
    return htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features, (int)rows,
                         (int)in_features, 1.0f, w, (int)in_features, x, (int)in_features,
                         0.0f, y, (int)out_features) ||
           (r && htp_cuda_add(kernels, y, r, y, n));
  if constexpr (std::is_same_v<Out, float>) {
    broadcast_bias_kernel<<<htp_cuda_blocks(n, 256), 256, 0, kernels->stream>>>(
        b, y, rows, out_features);
    HTP_CUDA_CHECK_LAUNCH(kernels);
    return htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features, (int)rows,
                         (int)in_features, 1.0f, w, (int)in_features, x, (int)in_features,
                         1.0f, y, (int)out_features) ||
           (r && htp_cuda_add(kernels, y, r, y, n));
  } else {
    float *sum = htp_cuda_workspace(kernels, rows, out_features);
    if (!sum ||
        htp_cuda_gemm(kernels, CUBLAS_OP_T, CUBLAS_OP_N, (int)out_features, (int)rows,
                      (int)in_features, 1.0f, w, (int)in_features, x, (int)in_features, 0.0f,
                      sum, (int)out_features))
      return 1;
    return htp_cuda_bias_add_block(kernels, sum, b, y, rows, out_features, r);
  }
}

template <typename In, typename Out>
int htp_cuda_linear(htp_cuda_kernels *kernels, const In *x, const In *w, const In *b, Out *y,
                    int64_t rows, int64_t in_features, int64_t out_features, const Out *r) {
  if (htp_cuda_check_gemm_sizes(kernels, "linear", rows, in_features, out_features))
    return 1;
  if (rows == 0 || out_features == 0)
    return 0;
  if (r && kernels->residual != HTP_CUDA_RESIDUAL_EPILOGUE)
    return htp_cuda_linear(kernels, x, w, b, y, rows, in_features, out_features) ||
           htp_cuda_add(kernels, y, r, y, rows * out_features);
  if constexpr (std::is_same_v<In, Out>) {
    if (b) {
#ifdef HTP_HAVE_CUTLASS
      if constexpr (std::is_same_v<In, htp_cuda_bf16>) {
        const int done = htp_cuda_sm90_linear(kernels, x, w, b, r, y, out_features, rows,
                                              in_features, out_features, 0);
        if (done)
          return done < 0;
      }
#endif
      const int done = lt_linear(kernels, x, w, b, r, y, rows, in_features, out_features);
      if (done)
        return done < 0;
    }
  }
  return pass_linear(kernels, x, w, b, y, rows, in_features, out_features, r);
}

template int htp_cuda_linear<float, float>(htp_cuda_kernels *, const float *, const float *,
                                           const float *, float *, int64_t, int64_t, int64_t,
                                           const float *);
template int htp_cuda_linear<htp_cuda_bf16, htp_cuda_bf16>(
    htp_cuda_kernels *, const htp_cuda_bf16 *, const htp_cuda_bf16 *, const htp_cuda_bf16 *,
    htp_cuda_bf16 *, int64_t, int64_t, int64_t, const htp_cuda_bf16 *);
template int htp_cuda_linear<htp_cuda_bf16, float>(htp_cuda_kernels *, const htp_cuda_bf16 *,
                                                   const htp_cuda_bf16 *, const htp_cuda_bf16 *,
                                                   float *, int64_t, int64_t, int64_t,
                                                   const float *);

extern "C" int htp_cuda_linear_f32(htp_cuda_kernels *kernels, const float *x, const float *w,
                                   const float *b, float *y, int64_t rows, int64_t in_features,
                                   int64_t out_features) {
  return htp_cuda_linear(kernels, x, w, b, y, rows, in_features, out_features);
}

extern "C" int htp_cuda_linear_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                    const htp_bf16 *w, const htp_bf16 *b, htp_bf16 *y,
                                    int64_t rows, int64_t in_features, int64_t out_features) {
  return htp_cuda_linear(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(w),
                         htp_cuda_bf16_ptr(b), htp_cuda_bf16_ptr(y), rows, in_features,
                         out_features);
}

extern "C" int htp_cuda_linear_residual_f32(htp_cuda_kernels *kernels, const float *x,
                                            const float *w, const float *b, const float *r,
                                            float *y, int64_t rows, int64_t in_features,
                                            int64_t out_features) {
  return htp_cuda_linear(kernels, x, w, b, y, rows, in_features, out_features, r);
}

extern "C" int htp_cuda_linear_residual_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                             const htp_bf16 *w, const htp_bf16 *b,
                                             const htp_bf16 *r, htp_bf16 *y, int64_t rows,
                                             int64_t in_features, int64_t out_features) {
  return htp_cuda_linear(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(w),
                         htp_cuda_bf16_ptr(b), htp_cuda_bf16_ptr(y), rows, in_features,
                         out_features, htp_cuda_bf16_ptr(r));
}
