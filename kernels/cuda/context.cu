/*===- kernels/cuda/context.cu - Device, stream and cuBLAS handle --------===*
 *
 * The kernel object: a device, the stream it enqueues on (its own, the
 * caller's, or a green context's: green.c) and a cuBLAS handle bound to
 * that stream, plus the buffers the kernels grow on demand.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int htp_cuda_fail(htp_cuda_kernels *kernels, const char *what, const char *detail) {
  snprintf(kernels->error, sizeof kernels->error, "%s: %s", what, detail);
  return 1;
}

extern "C" int htp_cuda_kernels_create(int device, htp_cuda_kernels **out, char *err,
                                       int err_size) {
  return htp_cuda_kernels_create_on(device, NULL, NULL, out, err, err_size);
}

extern "C" int htp_cuda_kernels_create_on(int device, cudaStream_t stream,
                                          htp_cuda_partition *partition,
                                          htp_cuda_kernels **out, char *err, int err_size) {
  *out = NULL;
  htp_cuda_kernels *kernels = (htp_cuda_kernels *)calloc(1, sizeof *kernels);
  if (!kernels) {
    if (err) snprintf(err, (size_t)err_size, "out of memory");
    htp_cuda_partition_destroy(partition);
    return 1;
  }
  kernels->device = device;
  kernels->partition = partition;
  kernels->stream = stream;
  int failed = 0;
  /* The kernels' switches (kernels_internal.h), refused when misspelt. */
  const struct {
    const char *name, *expected;
    int *value;
    int (*from_env)(void);
  } switches[] = {
      {"HTP_CUDA_LINEAR_EPILOGUE", "pass or cublaslt", &kernels->linear_epilogue,
       htp_cuda_linear_epilogue_from_env},
      {"HTP_CUDA_ATTENTION", "mma, wmma or head", &kernels->attention_kernel,
       htp_cuda_attention_kernel_from_env},
      {"HTP_CUDA_LAYER_NORM", "block or warp", &kernels->layer_norm_kernel,
       htp_cuda_layer_norm_kernel_from_env},
      {"HTP_CUDA_RESIDUAL", "add or epilogue", &kernels->residual, htp_cuda_residual_from_env},
#ifdef HTP_HAVE_CUTLASS
      {"HTP_CUDA_GEMM", "cublas or cutlass", &kernels->gemm_kernel,
#else
      {"HTP_CUDA_GEMM", "cublas (this build has no CUTLASS)", &kernels->gemm_kernel,
#endif
       htp_cuda_gemm_kernel_from_env}};
  for (const auto &s : switches)
    if ((*s.value = s.from_env()) < 0) {
      if (err) snprintf(err, (size_t)err_size, "%s=%s: expected %s", s.name, getenv(s.name),
                        s.expected);
      htp_cuda_kernels_destroy(kernels);
      return 1;
    }
  cudaError_t status = cudaSetDevice(device);
  if (status == cudaSuccess && !stream) {
    status = cudaStreamCreateWithFlags(&kernels->stream, cudaStreamNonBlocking);
    kernels->owns_stream = status == cudaSuccess;
  }
  if (status != cudaSuccess) {
    /* Without a GPU or its driver the runtime's own words ("driver version
     * is insufficient") hide what is missing: said first. */
    const int no_gpu = status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver;
    if (err) snprintf(err, (size_t)err_size, "CUDA device %d: %s%s", device,
                      no_gpu ? "no usable GPU or NVIDIA driver on this machine (CUDA: " : "",
                      cudaGetErrorString(status));
    if (err && no_gpu && strlen(err) + 2 < (size_t)err_size) strcat(err, ")");
    failed = 1;
  }
  /* The handle and the marks belong to the partition's green context, as
   * its stream does (an event and the stream it is recorded on must share
   * a context). */
  char why[160] = "";
  const int entered =
      !failed && partition && htp_cuda_partition_enter(partition, why, sizeof why) == 0;
  if (!failed && partition && !entered) {
    if (err) snprintf(err, (size_t)err_size, "%s", why);
    failed = 1;
  }
  if (!failed && (cublasCreate(&kernels->blas) != CUBLAS_STATUS_SUCCESS ||
                  cublasSetStream(kernels->blas, kernels->stream) != CUBLAS_STATUS_SUCCESS)) {
    if (err) snprintf(err, (size_t)err_size, "cuBLAS initialisation failed on device %d", device);
    failed = 1;
  }
  /* In an SM partition cuBLAS plans its grids for the partition's SMs (it
   * would split a small GEMM for the whole device's). */
  if (!failed && partition &&
      cublasSetSmCountTarget(kernels->blas, htp_cuda_partition_sm_count(partition)) !=
          CUBLAS_STATUS_SUCCESS) {
    if (err) snprintf(err, (size_t)err_size, "cublasSetSmCountTarget(%d) failed on device %d",
                      htp_cuda_partition_sm_count(partition), device);
    failed = 1;
  }
  if (!failed && cublasLtCreate(&kernels->lt) != CUBLAS_STATUS_SUCCESS) {
    if (err) snprintf(err, (size_t)err_size, "cuBLASLt initialisation failed on device %d", device);
    failed = 1;
  }
  for (int i = 0; !failed && partition && i < 2 * HTP_KERNEL_TIMERS; ++i) {
    status = cudaEventCreate(&kernels->marks[i / 2][i % 2]);
    if (status != cudaSuccess) {
      if (err) snprintf(err, (size_t)err_size, "cudaEventCreate in the green context of device %d: %s",
                        device, cudaGetErrorString(status));
      failed = 1;
    }
  }
  if (entered) htp_cuda_partition_leave(partition);
  if (failed) {
    htp_cuda_kernels_destroy(kernels);
    return 1;
  }
  *out = kernels;
  return 0;
}

extern "C" void htp_cuda_kernels_destroy(htp_cuda_kernels *kernels) {
  if (!kernels)
    return;
  /* Nothing of this object may still run on a stream that outlives it
   * (the caller's) or that goes with the partition. */
  if (kernels->stream)
    cudaStreamSynchronize(kernels->stream);
  if (kernels->staging)
    cudaFree(kernels->staging);
  if (kernels->workspace)
    cudaFree(kernels->workspace);
  if (kernels->lt_workspace)
    cudaFree(kernels->lt_workspace);
  if (kernels->heads_scratch)
    cudaFree(kernels->heads_scratch);
  htp_cuda_lt_cache_destroy(kernels->lt_cache);
  if (kernels->lt)
    cublasLtDestroy(kernels->lt);
  for (int i = 0; i < 2 * HTP_KERNEL_TIMERS; ++i)
    if (kernels->marks[i / 2][i % 2])
      cudaEventDestroy(kernels->marks[i / 2][i % 2]);
  if (kernels->blas)
    cublasDestroy(kernels->blas);
  if (kernels->stream && kernels->owns_stream)
    cudaStreamDestroy(kernels->stream);
  htp_cuda_partition_destroy(kernels->partition);
  free(kernels);
}

int htp_cuda_buffer_reserve(htp_cuda_kernels *kernels, void **buffer, size_t *size,
                            int64_t bytes) {
  if (bytes < 0)
    return htp_cuda_fail(kernels, "workspace", "its size overflows");
  if ((size_t)bytes <= *size)
    return 0;
  HTP_CUDA_CHECK(kernels, cudaStreamSynchronize(kernels->stream));
  if (*buffer)
    HTP_CUDA_CHECK(kernels, cudaFree(*buffer));
  *buffer = NULL;
  *size = 0;
  HTP_CUDA_CHECK(kernels, cudaMalloc(buffer, (size_t)bytes));
  *size = (size_t)bytes;
  return 0;
}

float *htp_cuda_workspace(htp_cuda_kernels *kernels, int64_t rows, int64_t columns) {
  if (htp_cuda_buffer_reserve(kernels, &kernels->workspace, &kernels->workspace_bytes,
                              htp_cuda_sums_bytes(rows, columns)))
    return NULL;
  return (float *)kernels->workspace;
}

extern "C" uint64_t htp_cuda_kernels_own_bytes(const htp_cuda_kernels *kernels) {
  if (!kernels)
    return 0;
  return (uint64_t)kernels->workspace_bytes + kernels->heads_scratch_bytes +
         kernels->staging_bytes + kernels->lt_workspace_bytes;
}

int htp_cuda_check_gemm_sizes(htp_cuda_kernels *kernels, const char *op, int64_t rows,
                              int64_t in_features, int64_t out_features) {
  char why[160];
  if (htp_kernel_gemm_sizes_problem(rows, in_features, out_features, why, sizeof why))
    return htp_cuda_fail(kernels, op, why);
  return 0;
}

int htp_cuda_check_attention_sizes(htp_cuda_kernels *kernels, const char *op, int64_t batch,
                                   int64_t tokens, int64_t model_dim, int64_t num_heads,
                                   int64_t head_dim) {
  char why[160];
  if (htp_kernel_attention_sizes_problem(batch, tokens, model_dim, num_heads, head_dim, why,
                                         sizeof why))
    return htp_cuda_fail(kernels, op, why);
  return 0;
}

extern "C" int htp_cuda_kernels_sync(htp_cuda_kernels *kernels) {
  HTP_CUDA_CHECK(kernels, cudaStreamSynchronize(kernels->stream));
  return 0;
}

extern "C" const char *htp_cuda_kernels_error(const htp_cuda_kernels *kernels) {
  return kernels ? kernels->error : "no CUDA kernels object";
}
