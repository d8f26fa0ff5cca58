/*===- test/kernels/test_kernels_cuda.c - CUDA kernels vs their CPU twins -===*
 *
 * Runs each htp_cuda_* kernel and its htp_cpu_* twin on the same random data
 * and compares (relative to the largest magnitude). Exits 77 (ctest: skipped)
 * where no GPU is present, as on the build machines.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernels.h"
#include "kernels/htp_kernels_cuda.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int failures = 0;
static unsigned seed = 12345;

static float *host_random(int64_t n, float lo, float hi) {
  float *data = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    data[i] = lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
  }
  return data;
}

static float *to_device(const float *host, int64_t n) {
  float *device = NULL;
  if (cudaMalloc((void **)&device, (size_t)n * sizeof(float)) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc failed\n");
    exit(1);
  }
  if (host)
    cudaMemcpy(device, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
  return device;
}

static void compare(const char *name, const float *device, const float *want, int64_t n,
                    double tolerance) {
  float *got = malloc((size_t)n * sizeof(float));
  cudaMemcpy(got, device, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost);
  double max_ref = 1e-30, max_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_ref = fmax(max_ref, fabs(want[i]));
    double diff = fabs((double)got[i] - want[i]);
    max_diff = isnan(diff) ? INFINITY : fmax(max_diff, diff);
  }
  double error = max_diff / max_ref;
  int ok = error <= tolerance;
  printf("%-12s relative error %.3g %s\n", name, error, ok ? "ok" : "FAIL");
  failures += !ok;
  free(got);
}

#define CHECK_CALL(call)                                                                 \
  do {                                                                                  \
    if (call) {                                                                         \
      fprintf(stderr, "%s failed: %s\n", #call, htp_cuda_kernels_error(kernels));       \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

int main(void) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  char err[256];
  htp_cuda_kernels *kernels = NULL;
  if (htp_cuda_kernels_create(0, &kernels, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  const int64_t batch = 3, tokens = 197, dim = 120, heads = 5, head_dim = 24, mlp = 333;
  const int64_t rows = batch * tokens, inner = heads * head_dim;
  float *x = host_random(rows * dim, -1, 1), *w = host_random(mlp * dim, -0.2f, 0.2f);
  float *b = host_random(mlp, -0.1f, 0.1f), *want = malloc(sizeof(float) * rows * mlp);
  float *dx = to_device(x, rows * dim), *dw = to_device(w, mlp * dim), *db = to_device(b, mlp);
  float *dy = to_device(NULL, rows * mlp);

  CHECK_CALL(htp_cuda_linear_f32(kernels, dx, dw, db, dy, rows, dim, mlp));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_linear_f32(x, w, b, want, rows, dim, mlp);
  compare("linear", dy, want, rows * mlp, 1e-5);

  float *gamma = host_random(dim, 0.5f, 1.5f), *beta = host_random(dim, -1, 1);
  float *dgamma = to_device(gamma, dim), *dbeta = to_device(beta, dim);
  CHECK_CALL(htp_cuda_layer_norm_f32(kernels, dx, dgamma, dbeta, dy, rows, dim, 1e-6f));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_layer_norm_f32(x, gamma, beta, want, rows, dim, 1e-6f);
  compare("layer_norm", dy, want, rows * dim, 1e-5);

  for (int tanh_approx = 0; tanh_approx < 2; ++tanh_approx) {
    CHECK_CALL(htp_cuda_gelu_f32(kernels, dx, dy, rows * dim, tanh_approx));
    CHECK_CALL(htp_cuda_kernels_sync(kernels));
    htp_cpu_gelu_f32(x, want, rows * dim, tanh_approx);
    compare(tanh_approx ? "gelu_tanh" : "gelu", dy, want, rows * dim, 1e-6);
  }
  CHECK_CALL(htp_cuda_add_f32(kernels, dx, dx, dy, rows * dim));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_add_f32(x, x, want, rows * dim);
  compare("add", dy, want, rows * dim, 0);
  CHECK_CALL(htp_cuda_bias_add_f32(kernels, dx, db, dy, rows, mlp < dim ? mlp : dim));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_bias_add_f32(x, b, want, rows, mlp < dim ? mlp : dim);
  compare("bias_add", dy, want, rows * (mlp < dim ? mlp : dim), 0);

  float *wqkv = host_random(3 * inner * dim, -0.3f, 0.3f), *bqkv = host_random(3 * inner, -0.1f, 0.1f);
  float *wproj = host_random(dim * inner, -0.2f, 0.2f), *bproj = host_random(dim, -0.1f, 0.1f);
  float *cpu_scratch =
      malloc(sizeof(float) * htp_cpu_attention_scratch_floats(batch, tokens, dim, heads, head_dim));
  float *dwqkv = to_device(wqkv, 3 * inner * dim), *dbqkv = to_device(bqkv, 3 * inner);
  float *dwproj = to_device(wproj, dim * inner), *dbproj = to_device(bproj, dim);
  float *dscratch =
      to_device(NULL, htp_cuda_attention_scratch_floats(batch, tokens, dim, heads, head_dim));
  CHECK_CALL(htp_cuda_attention_f32(kernels, dx, dwqkv, dbqkv, dwproj, dbproj, dy, dscratch, batch,
                                    tokens, dim, heads, head_dim));
  CHECK_CALL(htp_cuda_kernels_sync(kernels));
  htp_cpu_attention_f32(x, wqkv, bqkv, wproj, bproj, want, cpu_scratch, batch, tokens, dim, heads,
                        head_dim);
  compare("attention", dy, want, rows * dim, 1e-4);

  htp_cuda_kernels_destroy(kernels);
  printf("%s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}
