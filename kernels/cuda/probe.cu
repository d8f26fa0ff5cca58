/*===- kernels/cuda/probe.cu - Which SMs a stream's blocks ran on ---------===*
 *
 * A test probe, linked into test_kernels_cuda only (not into
 * libhtpkernels_cuda): each block of a launch on a given stream records the
 * SM it ran on (PTX %smid), so the SM-partition test can check where a
 * green context's work ran, not only what it computed. Each block stays
 * resident for a few microseconds so that the launch spreads over every SM
 * the stream may use; on the whole device it must then see more SMs than
 * any partition has, or the partition's check would prove nothing.
 *
 * Compiled, not run: no GPU where this was written.
 *===----------------------------------------------------------------------===*/
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdio.h>

namespace {

__global__ void sm_id_kernel(unsigned *ids, long long spin_cycles) {
  if (threadIdx.x == 0) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    ids[blockIdx.x] = id;
  }
  const long long start = clock64();
  while (clock64() - start < spin_cycles) {
  }
}

int fail(char *err, size_t err_size, const char *what, cudaError_t rc) {
  snprintf(err, err_size, "sm probe: %s: %s", what, cudaGetErrorString(rc));
  return 1;
}

} // namespace

/* Launches `blocks` blocks on stream (a cudaStream_t; a green context's
 * included), waits, and writes block b's SM id into ids[b] (host memory).
 * An id no block wrote stays 0xFFFFFFFF. Returns 0, or 1 with why in err. */
extern "C" int htp_cuda_probe_sm_ids(void *stream, int blocks, unsigned *ids, char *err,
                                     size_t err_size) {
  if (blocks < 1 || !ids) {
    snprintf(err, err_size, "sm probe: %d blocks into %p", blocks, (void *)ids);
    return 1;
  }
  const cudaStream_t s = (cudaStream_t)stream;
  const size_t bytes = (size_t)blocks * sizeof(unsigned);
  unsigned *device = NULL;
  cudaError_t rc = cudaMalloc((void **)&device, bytes);
  if (rc != cudaSuccess) return fail(err, err_size, "cudaMalloc", rc);
  rc = cudaMemsetAsync(device, 0xFF, bytes, s);
  if (rc != cudaSuccess) {
    cudaFree(device);
    return fail(err, err_size, "cudaMemsetAsync", rc);
  }
  /* ~10 us at an H100's clock: long enough to keep blocks resident. */
  sm_id_kernel<<<(unsigned)blocks, 32, 0, s>>>(device, 20000);
  rc = cudaGetLastError();
  if (rc == cudaSuccess) rc = cudaMemcpyAsync(ids, device, bytes, cudaMemcpyDeviceToHost, s);
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(s);
  cudaFree(device);
  return rc == cudaSuccess ? 0 : fail(err, err_size, "launch or copy on the stream", rc);
}
