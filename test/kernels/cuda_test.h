/*===- test/kernels/cuda_test.h - Host data and device copies, CUDA tests --===*
 *
 * What the CUDA kernel tests (test_kernels_cuda.c, test_train_cuda.c) share:
 * a seeded LCG stream per test file (static state: the same numbers on every
 * run), host buffers that exit on allocation failure, device copies that
 * fail the test on any CUDA error, the relative error the comparisons
 * use, and the two kernel tables side by side with their entry checks. These tests run outside cmocka (they exit 77 without a GPU), so
 * test_data.h's assert-based helpers do not fit.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TEST_KERNELS_CUDA_TEST_H
#define HTP_TEST_KERNELS_CUDA_TEST_H

#include "kernels/htp_kernel_table.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned seed = 12345;

/* Uniform in [lo, hi). */
static inline float uniform(float lo, float hi) {
  seed = seed * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
}

static inline float *host_alloc(int64_t n) {
  float *data = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!data) {
    fprintf(stderr, "FAIL: out of host memory\n");
    exit(1);
  }
  return data;
}

static inline float *host_random(int64_t n, float lo, float hi) {
  float *data = host_alloc(n);
  for (int64_t i = 0; i < n; ++i) data[i] = uniform(lo, hi);
  return data;
}

/* A CUDA runtime call of the test itself: any failure fails the test. */
static inline void cuda_or_die(cudaError_t status, const char *what) {
  if (status != cudaSuccess) {
    fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(status));
    exit(1);
  }
}

/* A device copy of bytes of host (uninitialised when host is NULL). */
static inline void *to_device_bytes(const void *host, size_t bytes) {
  void *device = NULL;
  cuda_or_die(cudaMalloc(&device, bytes > 0 ? bytes : 1), "cudaMalloc");
  if (host && bytes > 0)
    cuda_or_die(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice),
                "cudaMemcpy to the device");
  /* A pageable copy may still be in flight on return, and the kernels'
   * non-blocking streams do not wait for the default stream. */
  cuda_or_die(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return device;
}

static inline float *to_device(const float *host, int64_t n) {
  return to_device_bytes(host, (size_t)(n > 0 ? n : 0) * sizeof(float));
}

/* max |got - want| / max |want|; NaN anywhere in got or want: infinity. */
static inline double relative_error(const float *got, const float *want, int64_t n) {
  double scale = 1e-30, diff = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = fabs((double)got[i] - (double)want[i]);
    if (isnan(d)) return INFINITY;
    scale = fmax(scale, fabs(want[i]));
    diff = fmax(diff, d);
  }
  return diff / scale;
}

/* The CPU and CUDA kernel tables, each with its env and error text. */
typedef struct twin_tables {
  const htp_kernel_table *cpu, *cuda;
  htp_kernel_env cpu_env, cuda_env;
  char cpu_error[256], cuda_error[256];
} twin_tables;

/* Both tables on device 0; 0, or 1 after saying why not. */
static inline int twin_tables_open(twin_tables *t) {
  t->cpu = htp_cpu_kernel_table();
  t->cuda = htp_cuda_kernel_table();
  if (htp_cuda_kernel_env_create(0, &t->cuda_env, t->cuda_error, sizeof t->cuda_error) !=
      HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: htp_cuda_kernel_env_create: %s\n", t->cuda_error);
    return 1;
  }
  if (htp_cpu_kernel_env_create(&t->cpu_env, t->cpu_error, sizeof t->cpu_error) !=
      HTP_KERNEL_OK) {
    fprintf(stderr, "FAIL: htp_cpu_kernel_env_create: %s\n", t->cpu_error);
    return 1;
  }
  return 0;
}

/* A CUDA entry, then a wait for its stream; a CPU entry. Either failing
 * ends the test (there is a GPU by now). */
#define CUDA_ENTRY(t, call)                                                               \
  do {                                                                                  \
    if ((call) != HTP_KERNEL_OK ||                                                      \
        (t)->cuda->synchronize(&(t)->cuda_env) != HTP_KERNEL_OK) {                      \
      fprintf(stderr, "FAIL: %s: %s\n", #call, (t)->cuda_error);                        \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)
#define CPU_ENTRY(t, call)                                                                \
  do {                                                                                  \
    if ((call) != HTP_KERNEL_OK) {                                                      \
      fprintf(stderr, "FAIL: %s: %s\n", #call, (t)->cpu_error);                         \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

/* The exit code of a test that found no usable device (why): 1 if any of
 * the checks that need no GPU failed, or HTP_REQUIRE_GPU is set (non-empty,
 * not "0"), where a skip would hide a broken GPU run; else 77, skipped. */
static inline int no_device_exit(const char *why, int failures) {
  const char *require = getenv("HTP_REQUIRE_GPU");
  if (failures) {
    fprintf(stderr, "FAIL: %d of the checks that need no GPU failed\n", failures);
    return 1;
  }
  if (require && strcmp(require, "") != 0 && strcmp(require, "0") != 0) {
    fprintf(stderr, "FAIL: HTP_REQUIRE_GPU is set and no CUDA device is usable (%s)\n", why);
    return 1;
  }
  printf("no CUDA device (%s): skipped\n", why);
  return 77;
}

#endif /* HTP_TEST_KERNELS_CUDA_TEST_H */
