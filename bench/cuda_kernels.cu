/*===- bench/cuda_kernels.cu - Each CUDA kernel against the device's bound -===*
 *
 * Times every kernel of kernels/htp_kernels_cuda.h at one ViT block's shapes
 * (default ViT-B/16: batch 8, 197 tokens, dim 768, 12 heads, MLP 3072, f32)
 * and prints, per kernel, the median and best time and what it achieved
 * next to the device's bound:
 *   - GEMM-bound kernels (linear, attention): TFLOP/s against the FP32 FMA
 *     peak, SMs x clock x FP32 lanes per SM x 2 (one FMA is two FLOPs). The
 *     twins call cuBLAS in its default math mode, which is plain FP32, not
 *     TF32 tensor cores, so that is the bound that applies.
 *   - Memory-bound kernels (layer norm, GELU, add, bias add): GB/s, the
 *     bytes each must read and write once, against the DRAM peak,
 *     2 (double data rate) x memory clock x bus width / 8.
 * The clocks are the peak ones the device reports (cudaDevAttrClockRate and
 * cudaDevAttrMemoryClockRate: CUDA 13 dropped them from cudaDeviceProp);
 * SM count, bus width and L2 size come from cudaGetDeviceProperties.
 *
 * Timing: CUDA events on the kernels' own stream around each call, after
 * warm-up calls; before each timed call the L2 is flushed by writing a
 * buffer twice its size, so every repeat reads its inputs from DRAM.
 *
 *   htp-bench-cuda [--batch 8] [--tokens 197] [--dim 768] [--heads 12]
 *                  [--mlp 3072] [--repeats 20] [--warmup 3] [--device 0]
 *                  [--csv FILE]
 * Exits 77 when there is no CUDA device, 1 when a kernel fails, 2 on bad
 * arguments.
 *
 * It reads the kernels object's stream, so it includes the twins' private
 * header (kernels/cuda/kernels_internal.h): a benchmark of the internals.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

namespace {

struct Shape {
  int64_t batch = 8, tokens = 197, dim = 768, heads = 12, mlp = 3072;
  int64_t rows() const { return batch * tokens; }
  int64_t head_dim() const { return dim / heads; }
};

/* Deterministic values in [lo, hi): a hash of the index, no RNG state. */
__global__ void fill_kernel(float *data, int64_t n, float lo, float hi, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 2246822519u;
    h ^= h >> 13;
    data[i] = lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f);
  }
}

struct Buffers {
  std::vector<void *> owned;
  ~Buffers() {
    for (void *p : owned)
      cudaFree(p);
  }
  float *make(int64_t n, float lo, float hi) {
    void *p = nullptr;
    if (cudaMalloc(&p, sizeof(float) * (size_t)n) != cudaSuccess) {
      fprintf(stderr, "htp-bench-cuda: cudaMalloc of %lld floats failed\n", (long long)n);
      exit(1);
    }
    owned.push_back(p);
    fill_kernel<<<1024, 256>>>((float *)p, n, lo, hi, (uint32_t)owned.size() * 7919u);
    return (float *)p;
  }
};

/* One benchmark case: a kernel call and the work it must do. */
struct Case {
  const char *name;
  const char *shape; /* for the reader: what the call computes */
  double flops;      /* > 0: compared with the FLOP bound */
  double bytes;      /* used when flops == 0: compared with the DRAM bound */
  int (*run)(htp_cuda_kernels *, void *);
  void *args;
};

struct Args {
  const float *x, *w, *b, *gamma, *beta, *other, *wproj, *bproj;
  float *y, *scratch;
  int64_t rows, in, out;
  int64_t batch, tokens; /* attention only */
};

int run_linear(htp_cuda_kernels *k, void *p) {
  const Args *a = (const Args *)p;
  return htp_cuda_linear_f32(k, a->x, a->w, a->b, a->y, a->rows, a->in, a->out);
}
int run_layer_norm(htp_cuda_kernels *k, void *p) {
  const Args *a = (const Args *)p;
  return htp_cuda_layer_norm_f32(k, a->x, a->gamma, a->beta, a->y, a->rows, a->in, 1e-6f);
}
int run_gelu(htp_cuda_kernels *k, void *p) {
  const Args *a = (const Args *)p;
  return htp_cuda_gelu_f32(k, a->x, a->y, a->rows * a->in, 0);
}
int run_add(htp_cuda_kernels *k, void *p) {
  const Args *a = (const Args *)p;
  return htp_cuda_add_f32(k, a->x, a->other, a->y, a->rows * a->in);
}
int run_bias_add(htp_cuda_kernels *k, void *p) {
  const Args *a = (const Args *)p;
  return htp_cuda_bias_add_f32(k, a->x, a->b, a->y, a->rows, a->in);
}
/* in = model dim, out = heads (head_dim = in / out). */
int run_attention(htp_cuda_kernels *k, void *p) {
  const Args *a = (const Args *)p;
  return htp_cuda_attention_f32(k, a->x, a->w, a->b, a->wproj, a->bproj, a->y, a->scratch,
                                a->batch, a->tokens, a->in, a->out, a->in / a->out);
}

int parse_int(const char *flag, const char *value, int64_t lo, int64_t *out) {
  char *end = nullptr;
  long long v = value ? strtoll(value, &end, 10) : 0;
  if (!value || *end || v < lo) {
    fprintf(stderr, "htp-bench-cuda: %s needs an integer >= %lld\n", flag, (long long)lo);
    return 1;
  }
  *out = v;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Shape s;
  int64_t repeats = 20, warmup = 3, device = 0;
  const char *csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : nullptr;
    int bad = 0;
    if (!strcmp(flag, "--batch")) bad = parse_int(flag, value, 1, &s.batch);
    else if (!strcmp(flag, "--tokens")) bad = parse_int(flag, value, 1, &s.tokens);
    else if (!strcmp(flag, "--dim")) bad = parse_int(flag, value, 1, &s.dim);
    else if (!strcmp(flag, "--heads")) bad = parse_int(flag, value, 1, &s.heads);
    else if (!strcmp(flag, "--mlp")) bad = parse_int(flag, value, 1, &s.mlp);
    else if (!strcmp(flag, "--repeats")) bad = parse_int(flag, value, 1, &repeats);
    else if (!strcmp(flag, "--warmup")) bad = parse_int(flag, value, 0, &warmup);
    else if (!strcmp(flag, "--device")) bad = parse_int(flag, value, 0, &device);
    else if (!strcmp(flag, "--csv") && value) csv_path = value;
    else {
      fprintf(stderr, "htp-bench-cuda: unknown or incomplete argument '%s'\n", flag);
      return 2;
    }
    if (bad)
      return 2;
    ++i;
  }
  if (s.dim % s.heads) {
    fprintf(stderr, "htp-bench-cuda: --dim %lld is not a multiple of --heads %lld\n",
            (long long)s.dim, (long long)s.heads);
    return 2;
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("htp-bench-cuda: no CUDA device: skipped\n");
    return 77;
  }
  if (device >= devices) {
    fprintf(stderr, "htp-bench-cuda: no device %lld (%d present)\n", (long long)device, devices);
    return 2;
  }
  cudaDeviceProp prop;
  int sm_khz = 0, mem_khz = 0;
  if (cudaGetDeviceProperties(&prop, (int)device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, (int)device) != cudaSuccess ||
      cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, (int)device) != cudaSuccess) {
    fprintf(stderr, "htp-bench-cuda: cannot read the properties of device %lld\n",
            (long long)device);
    return 1;
  }
  /* FP32 lanes per SM: 64 on compute capability 6.0, 7.x and 8.0, 128 on
   * the others from 6.1 on (8.6, 8.9, 9.0, 10.x, 12.x). */
  const int lanes = (prop.major == 7 || (prop.major == 8 && prop.minor == 0) ||
                     (prop.major == 6 && prop.minor == 0))
                        ? 64
                        : 128;
  const double peak_flops = (double)prop.multiProcessorCount * sm_khz * 1e3 * lanes * 2.0;
  const double peak_bytes = 2.0 * mem_khz * 1e3 * prop.memoryBusWidth / 8.0;

  char err[256];
  htp_cuda_kernels *kernels = nullptr;
  if (htp_cuda_kernels_create((int)device, &kernels, err, sizeof err)) {
    fprintf(stderr, "htp-bench-cuda: %s\n", err);
    return 1;
  }

  const int64_t rows = s.rows(), d = s.dim, m = s.mlp, inner = s.dim; /* heads * head_dim */
  Buffers buf;
  float *x = buf.make(rows * std::max(d, m), -1, 1), *x2 = buf.make(rows * d, -1, 1);
  float *y = buf.make(rows * std::max(3 * d, m), 0, 0);
  float *w_qkv = buf.make(3 * inner * d, -0.05f, 0.05f), *b_qkv = buf.make(3 * inner, -0.1f, 0.1f);
  float *w_proj = buf.make(d * inner, -0.05f, 0.05f), *b_proj = buf.make(d, -0.1f, 0.1f);
  float *w_fc1 = buf.make(m * d, -0.05f, 0.05f), *b_fc1 = buf.make(m, -0.1f, 0.1f);
  float *w_fc2 = buf.make(d * m, -0.05f, 0.05f), *b_fc2 = buf.make(d, -0.1f, 0.1f);
  float *gamma = buf.make(d, 0.5f, 1.5f), *beta = buf.make(d, -0.1f, 0.1f);
  const int64_t scratch_floats =
      htp_cuda_attention_scratch_floats(s.batch, s.tokens, d, s.heads, s.head_dim());
  float *scratch = buf.make(std::max<int64_t>(scratch_floats, 1), 0, 0);
  /* Writing this flushes the L2 (twice its size, so no line survives). */
  const size_t flush_bytes = 2 * (size_t)std::max(prop.l2CacheSize, 1 << 20);
  void *flush = nullptr;
  if (cudaMalloc(&flush, flush_bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    fprintf(stderr, "htp-bench-cuda: cannot allocate or fill the buffers\n");
    return 1;
  }
  buf.owned.push_back(flush);

  const double f = sizeof(float), tk = (double)s.tokens, hd = (double)s.head_dim();
  Args linear_qkv{x, w_qkv, b_qkv, 0, 0, 0, 0, 0, y, 0, rows, d, 3 * inner, 0, 0};
  Args linear_proj{x, w_proj, b_proj, 0, 0, 0, 0, 0, y, 0, rows, inner, d, 0, 0};
  Args linear_fc1{x, w_fc1, b_fc1, 0, 0, 0, 0, 0, y, 0, rows, d, m, 0, 0};
  Args linear_fc2{x, w_fc2, b_fc2, 0, 0, 0, 0, 0, y, 0, rows, m, d, 0, 0};
  Args ln{x, 0, 0, gamma, beta, 0, 0, 0, y, 0, rows, d, 0, 0, 0};
  Args gelu{x, 0, 0, 0, 0, 0, 0, 0, y, 0, rows, m, 0, 0, 0};
  Args add{x, 0, 0, 0, 0, x2, 0, 0, y, 0, rows, d, 0, 0, 0};
  Args bias{x, 0, b_fc1, 0, 0, 0, 0, 0, y, 0, rows, m, 0, 0, 0};
  Args attn{x, w_qkv, b_qkv, 0, 0, 0, w_proj, b_proj, y, scratch, rows, d, s.heads,
            s.batch, s.tokens};
  const double r = (double)rows;
  char sh[8][96];
  snprintf(sh[0], 96, "%lldx%lld @ %lldx%lld^T", (long long)rows, (long long)d, (long long)(3 * inner), (long long)d);
  snprintf(sh[1], 96, "%lldx%lld @ %lldx%lld^T", (long long)rows, (long long)inner, (long long)d, (long long)inner);
  snprintf(sh[2], 96, "%lldx%lld @ %lldx%lld^T", (long long)rows, (long long)d, (long long)m, (long long)d);
  snprintf(sh[3], 96, "%lldx%lld @ %lldx%lld^T", (long long)rows, (long long)m, (long long)d, (long long)m);
  snprintf(sh[4], 96, "%lldx%lld", (long long)rows, (long long)d);
  snprintf(sh[5], 96, "%lldx%lld", (long long)rows, (long long)m);
  snprintf(sh[6], 96, "%lldx%lld", (long long)rows, (long long)d);
  snprintf(sh[7], 96, "b%lld t%lld d%lld h%lld (qkv+sdpa+proj)", (long long)s.batch,
           (long long)s.tokens, (long long)d, (long long)s.heads);
  /* Add a kernel here: one row (its call in a run_* function above), with
   * the FLOPs it must do, or 0 and the bytes it must move. */
  std::vector<Case> cases = {
      {"linear_qkv", sh[0], 2 * r * d * 3 * inner, 0, run_linear, &linear_qkv},
      {"linear_proj", sh[1], 2 * r * inner * d, 0, run_linear, &linear_proj},
      {"linear_fc1", sh[2], 2 * r * d * m, 0, run_linear, &linear_fc1},
      {"linear_fc2", sh[3], 2 * r * m * d, 0, run_linear, &linear_fc2},
      {"layer_norm", sh[4], 0, (2 * r * d + 2 * d) * f, run_layer_norm, &ln},
      {"gelu_erf", sh[5], 0, 2 * r * m * f, run_gelu, &gelu},
      {"add", sh[6], 0, 3 * r * d * f, run_add, &add},
      {"bias_add", sh[5], 0, (2 * r * m + m) * f, run_bias_add, &bias},
      {"attention", sh[7],
       2 * r * d * 3 * inner + (double)s.batch * s.heads * 2 * (2 * tk * tk * hd) +
           2 * r * inner * d,
       0, run_attention, &attn},
  };

  FILE *csv = nullptr;
  if (csv_path && !(csv = fopen(csv_path, "w"))) {
    fprintf(stderr, "htp-bench-cuda: cannot write %s\n", csv_path);
    return 1;
  }
  printf("device %lld: %s, sm_%d%d, %d SMs at %.0f MHz, %d-bit memory at %.0f MHz, L2 %.0f MiB\n",
         (long long)device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
         sm_khz / 1e3, prop.memoryBusWidth, mem_khz / 1e3, prop.l2CacheSize / 1048576.0);
  printf("bounds: FP32 FMA %.1f TFLOP/s (%d SMs x %.0f MHz x %d lanes x 2), "
         "DRAM %.0f GB/s (2 x %.0f MHz x %d bit / 8)\n",
         peak_flops / 1e12, prop.multiProcessorCount, sm_khz / 1e3, lanes, peak_bytes / 1e9,
         mem_khz / 1e3, prop.memoryBusWidth);
  printf("shape: batch %lld, tokens %lld, dim %lld, heads %lld, mlp %lld, f32; %lld repeats after "
         "%lld warm-up, L2 flushed before each\n",
         (long long)s.batch, (long long)s.tokens, (long long)d, (long long)s.heads,
         (long long)m, (long long)repeats, (long long)warmup);
  printf("%-12s %-40s %9s %9s %12s %12s %6s\n", "kernel", "shape", "median_ms", "min_ms",
         "achieved", "bound", "of_bound");
  if (csv)
    fprintf(csv, "kernel,shape,median_ms,min_ms,achieved,bound,unit,fraction_of_bound,device\n");

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  int failed = 0;
  std::vector<double> medians(cases.size(), 0.0);
  for (size_t c = 0; c < cases.size() && !failed; ++c) {
    const Case &k = cases[c];
    std::vector<float> ms;
    for (int64_t i = 0; i < warmup + repeats; ++i) {
      if (cudaMemsetAsync(flush, i & 0xff, flush_bytes, kernels->stream) != cudaSuccess ||
          cudaEventRecord(start, kernels->stream) != cudaSuccess || k.run(kernels, k.args) ||
          cudaEventRecord(stop, kernels->stream) != cudaSuccess ||
          htp_cuda_kernels_sync(kernels)) {
        fprintf(stderr, "htp-bench-cuda: %s failed: %s\n", k.name,
                htp_cuda_kernels_error(kernels));
        failed = 1;
        break;
      }
      float t = 0;
      cudaEventElapsedTime(&t, start, stop);
      if (i >= warmup)
        ms.push_back(t);
    }
    if (failed)
      break;
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2], best = ms[0];
    medians[c] = median;
    const bool gemm = k.flops > 0;
    const double achieved = gemm ? k.flops / (median * 1e-3) : k.bytes / (median * 1e-3);
    const double bound = gemm ? peak_flops : peak_bytes;
    const double scale = gemm ? 1e12 : 1e9;
    const char *unit = gemm ? "TFLOP/s" : "GB/s";
    printf("%-12s %-40s %9.4f %9.4f %7.1f %-4s %7.1f %-4s %5.1f%%\n", k.name, k.shape, median,
           best, achieved / scale, gemm ? "TF/s" : "GB/s", bound / scale, gemm ? "TF/s" : "GB/s",
           100.0 * achieved / bound);
    if (csv)
      fprintf(csv, "%s,\"%s\",%.5f,%.5f,%.3f,%.3f,%s,%.4f,\"%s\"\n", k.name, k.shape, median, best,
              achieved / scale, bound / scale, unit, achieved / bound, prop.name);
  }
  if (!failed) {
    /* One pre-norm block as the twins would run it: ln, attention, add, ln,
     * fc1, GELU, fc2, add (fc1's and fc2's biases are inside linear). */
    const double block = medians[4] + medians[8] + medians[6] + medians[4] + medians[2] +
                         medians[5] + medians[3] + medians[6];
    printf("block_sum    %-40s %9.4f (ln+attention+add+ln+fc1+gelu+fc2+add, medians, each "
           "from a cold L2)\n",
           "", block);
    if (csv)
      fprintf(csv, "block_sum,\"ln+attention+add+ln+fc1+gelu+fc2+add\",%.5f,,,,ms,,\"%s\"\n",
              block, prop.name);
  }
  if (csv)
    fclose(csv);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  htp_cuda_kernels_destroy(kernels);
  return failed;
}
