/*===- test/kernels/cuda_test.h - Host data and device copies, CUDA tests --===*
 *
 * What the CUDA kernel tests (test_kernels_cuda.c, test_train_cuda.c) share:
 * a seeded LCG stream per test file (static state: the same numbers on every
 * run), host buffers that exit on allocation failure, device copies that
 * fail the test on any CUDA error, and the relative error the comparisons
 * use. These tests run outside cmocka (they exit 77 without a GPU), so
 * test_data.h's assert-based helpers do not fit.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TEST_KERNELS_CUDA_TEST_H
#define HTP_TEST_KERNELS_CUDA_TEST_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif /* HTP_TEST_KERNELS_CUDA_TEST_H */
