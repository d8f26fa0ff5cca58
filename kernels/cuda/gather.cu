/*===- kernels/cuda/gather.cu - Reduction, unit packing, imputation -------===*
 *
 * The memory-bound kernels around the balance hooks: a same-device sum of
 * the partial results of ranks that share one GPU (f32 or bf16, summed in
 * f32 either way), the packing of units into the contiguous block layout
 * of runtime/unit_weights.c pack_in_units, and the imputation of pruned
 * units (runtime/unit_table.c htp_impute_fill). Their lists arrive in host memory and
 * are copied to the object's staging buffer on the stream before the launch
 * (stream order keeps a later call's copy from overwriting a list an
 * earlier launch still reads). One thread per output element; the lists
 * are short, so they are read from global memory.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <stdio.h>

namespace {

constexpr int kThreads = 256;

/* 0 when every id of list is in [0, limit); else records why. */
int check_list(htp_cuda_kernels *kernels, const char *op, const int32_t *list, int64_t count,
               int64_t limit) {
  char detail[96];
  if (count < 0 || (count > 0 && !list)) {
    snprintf(detail, sizeof detail, "%lld ids and %s list", (long long)count, list ? "a" : "no");
    return htp_cuda_fail(kernels, op, detail);
  }
  for (int64_t i = 0; i < count; ++i)
    if (list[i] < 0 || list[i] >= limit) {
      snprintf(detail, sizeof detail, "id %d (entry %lld) is not in [0, %lld)", (int)list[i],
               (long long)i, (long long)limit);
      return htp_cuda_fail(kernels, op, detail);
    }
  return 0;
}

size_t aligned(size_t bytes) { return (bytes + 15) & ~(size_t)15; }

/* Copies up to two host arrays to the staging buffer (one after the other,
 * 16-byte aligned); *first_out / *second_out get their device addresses. */
int stage(htp_cuda_kernels *kernels, const void *first, size_t first_bytes, const void *second,
          size_t second_bytes, const void **first_out, const void **second_out) {
  if (htp_cuda_buffer_reserve(kernels, &kernels->staging, &kernels->staging_bytes,
                              htp_cuda_staging_bytes((int64_t)first_bytes,
                                                     (int64_t)second_bytes)))
    return 1;
  char *base = (char *)kernels->staging;
  if (first_bytes)
    HTP_CUDA_CHECK(kernels, cudaMemcpyAsync(base, first, first_bytes, cudaMemcpyHostToDevice,
                                            kernels->stream));
  if (second_bytes)
    HTP_CUDA_CHECK(kernels, cudaMemcpyAsync(base + aligned(first_bytes), second, second_bytes,
                                            cudaMemcpyHostToDevice, kernels->stream));
  *first_out = base;
  if (second_out)
    *second_out = base + aligned(first_bytes);
  return 0;
}

/* In f32, in list order, rounded once into y (bf16 or f32). */
template <typename T>
__global__ void reduce_sum_kernel(const T *const *inputs, int64_t count, T *y, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float sum = htp_cuda_load(inputs[0], i);
  for (int64_t k = 1; k < count; ++k)
    sum += htp_cuda_load(inputs[k], i);
  htp_cuda_store(y, i, sum);
}

template <typename T>
int reduce_sum(htp_cuda_kernels *kernels, const T *const *inputs, int64_t count, T *y,
               int64_t n) {
  if (count < 0 || n < 0 || (count > 0 && !inputs))
    return htp_cuda_fail(kernels, "reduce_sum", "negative size or no list of inputs");
  if (n == 0)
    return 0;
  if (count == 0) {
    HTP_CUDA_CHECK(kernels, cudaMemsetAsync(y, 0, (size_t)n * sizeof(T), kernels->stream));
    return 0;
  }
  const void *device_inputs = NULL;
  if (stage(kernels, inputs, (size_t)count * sizeof(T *), NULL, 0, &device_inputs, NULL))
    return 1;
  reduce_sum_kernel<<<htp_cuda_blocks(n, kThreads), kThreads, 0, kernels->stream>>>(
      (const T *const *)device_inputs, count, y, n);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

/* One thread per packed element of count units: e indexes a unit's
 * per_unit floats, laid out [first rows | bias | second columns]. */
__global__ void pack_units_kernel(const float *first, const float *bias, const float *second,
                                  int64_t units, int64_t width, int64_t d, int64_t parts,
                                  const int32_t *list, int64_t count, float *block,
                                  int64_t block_units, int64_t slot) {
  const int64_t first_floats = parts * width * d, bias_floats = parts * width;
  const int64_t per_unit = first_floats + bias_floats + d * width;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count * per_unit)
    return;
  const int64_t j = i / per_unit, u = list[j], to = slot + j;
  int64_t e = i % per_unit;
  const int64_t src_inner = units * width, dst_inner = block_units * width;
  float *block_bias = block + parts * dst_inner * d, *block_second = block_bias + parts * dst_inner;
  if (e < first_floats) {
    const int64_t part = e / (width * d), rest = e % (width * d);
    block[(part * dst_inner + to * width) * d + rest] =
        first[(part * src_inner + u * width) * d + rest];
    return;
  }
  e -= first_floats;
  if (e < bias_floats) {
    const int64_t part = e / width, c = e % width;
    block_bias[part * dst_inner + to * width + c] =
        bias ? bias[part * src_inner + u * width + c] : 0.0f;
    return;
  }
  e -= bias_floats;
  const int64_t o = e / width, c = e % width;
  block_second[o * dst_inner + to * width + c] = second[o * src_inner + u * width + c];
}

/* act[r, pruned[i]*width + c] = stored ? stored[same place] : 0. */
__global__ void impute_fill_kernel(float *act, const float *stored, int64_t rows,
                                   int64_t row_stride, int64_t stored_stride, int64_t width,
                                   const int32_t *pruned, int64_t num_pruned) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * num_pruned * width)
    return;
  const int64_t c = i % width, k = (i / width) % num_pruned, r = i / (width * num_pruned);
  const int64_t at = (int64_t)pruned[k] * width + c;
  act[r * row_stride + at] = stored ? stored[r * stored_stride + at] : 0.0f;
}

/* One thread per (row, column of a unit): the kept units' mean, summed in
 * list order in double as the CPU, into every pruned unit. */
__global__ void impute_average_kernel(float *act, int64_t rows, int64_t row_stride,
                                      int64_t width, const int32_t *kept, int64_t num_kept,
                                      const int32_t *pruned, int64_t num_pruned) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * width)
    return;
  float *row = act + (i / width) * row_stride;
  const int64_t c = i % width;
  double sum = 0.0;
  for (int64_t k = 0; k < num_kept; ++k)
    sum += row[(int64_t)kept[k] * width + c];
  const float mean = (float)(sum / (double)num_kept);
  for (int64_t k = 0; k < num_pruned; ++k)
    row[(int64_t)pruned[k] * width + c] = mean;
}

} // namespace

extern "C" int htp_cuda_reduce_sum_f32(htp_cuda_kernels *kernels, const float *const *inputs,
                                       int64_t count, float *y, int64_t n) {
  return reduce_sum(kernels, inputs, count, y, n);
}

extern "C" int htp_cuda_reduce_sum_bf16(htp_cuda_kernels *kernels,
                                        const htp_bf16 *const *inputs, int64_t count,
                                        htp_bf16 *y, int64_t n) {
  return reduce_sum(kernels, htp_cuda_bf16_ptr(inputs), count, htp_cuda_bf16_ptr(y), n);
}

extern "C" int htp_cuda_pack_units_f32(htp_cuda_kernels *kernels, const float *first,
                                       const float *bias, const float *second, int64_t units,
                                       int64_t width, int64_t model_dim, int64_t parts,
                                       const int32_t *list, int64_t count, float *block,
                                       int64_t block_units, int64_t slot) {
  const char *op = "pack_units";
  if (width < 1 || model_dim < 1 || parts < 1 || slot < 0 || block_units < 0 ||
      count > block_units - slot)
    return htp_cuda_fail(kernels, op,
                         "width, model_dim and parts must be >= 1 and slots [slot, slot + "
                         "count) inside the block");
  if (check_list(kernels, op, list, count, units))
    return 1;
  if (count == 0)
    return 0;
  const void *device_list = NULL;
  if (stage(kernels, list, (size_t)count * sizeof(int32_t), NULL, 0, &device_list, NULL))
    return 1;
  const int64_t per_unit = parts * width * model_dim + parts * width + model_dim * width;
  pack_units_kernel<<<htp_cuda_blocks(count * per_unit, kThreads), kThreads, 0,
                      kernels->stream>>>(first, bias, second, units, width, model_dim, parts,
                                         (const int32_t *)device_list, count, block, block_units,
                                         slot);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

/* zero and same: one fill kernel, stored NULL for zero. */
static int impute_fill(htp_cuda_kernels *kernels, const char *op, float *act,
                       const float *stored, int64_t rows, int64_t row_stride,
                       int64_t stored_stride, int64_t width, const int32_t *pruned,
                       int64_t num_pruned) {
  if (rows < 0 || width < 1 || row_stride < 0)
    return htp_cuda_fail(kernels, op, "rows < 0, width < 1 or row_stride < 0");
  if (check_list(kernels, op, pruned, num_pruned, row_stride / width) ||
      (stored && check_list(kernels, op, pruned, num_pruned, stored_stride / width)))
    return 1;
  if (num_pruned == 0 || rows == 0)
    return 0;
  const void *device_pruned = NULL;
  if (stage(kernels, pruned, (size_t)num_pruned * sizeof(int32_t), NULL, 0, &device_pruned,
            NULL))
    return 1;
  impute_fill_kernel<<<htp_cuda_blocks(rows * num_pruned * width, kThreads), kThreads, 0,
                       kernels->stream>>>(act, stored, rows, row_stride, stored_stride, width,
                                          (const int32_t *)device_pruned, num_pruned);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

extern "C" int htp_cuda_impute_zero_f32(htp_cuda_kernels *kernels, float *act, int64_t rows,
                                        int64_t row_stride, int64_t width,
                                        const int32_t *pruned, int64_t num_pruned) {
  return impute_fill(kernels, "impute_zero", act, NULL, rows, row_stride, 0, width, pruned,
                     num_pruned);
}

extern "C" int htp_cuda_impute_same_f32(htp_cuda_kernels *kernels, float *act,
                                        const float *stored, int64_t rows, int64_t row_stride,
                                        int64_t stored_stride, int64_t width,
                                        const int32_t *pruned, int64_t num_pruned) {
  if (!stored)
    return htp_cuda_fail(kernels, "impute_same", "no stored activations");
  return impute_fill(kernels, "impute_same", act, stored, rows, row_stride, stored_stride,
                     width, pruned, num_pruned);
}

extern "C" int htp_cuda_impute_average_f32(htp_cuda_kernels *kernels, float *act, int64_t rows,
                                           int64_t row_stride, int64_t width,
                                           const int32_t *kept, int64_t num_kept,
                                           const int32_t *pruned, int64_t num_pruned) {
  const char *op = "impute_average";
  if (num_kept == 0) /* nothing to average: zeros, as the CPU */
    return impute_fill(kernels, op, act, NULL, rows, row_stride, 0, width, pruned, num_pruned);
  if (rows < 0 || width < 1 || row_stride < 0)
    return htp_cuda_fail(kernels, op, "rows < 0, width < 1 or row_stride < 0");
  if (check_list(kernels, op, kept, num_kept, row_stride / width) ||
      check_list(kernels, op, pruned, num_pruned, row_stride / width))
    return 1;
  if (num_pruned == 0 || rows == 0)
    return 0;
  const void *device_kept = NULL, *device_pruned = NULL;
  if (stage(kernels, kept, (size_t)num_kept * sizeof(int32_t), pruned,
            (size_t)num_pruned * sizeof(int32_t), &device_kept, &device_pruned))
    return 1;
  impute_average_kernel<<<htp_cuda_blocks(rows * width, kThreads), kThreads, 0,
                          kernels->stream>>>(act, rows, row_stride, width,
                                             (const int32_t *)device_kept, num_kept,
                                             (const int32_t *)device_pruned, num_pruned);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}
