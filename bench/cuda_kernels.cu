/*===- bench/cuda_kernels.cu - Each CUDA kernel against the device's bound -===*
 *
 * Times every kernel of kernels/htp_kernels_cuda.h at one ViT block's shapes
 * (default ViT-B/16: batch 8, 197 tokens, dim 768, 12 heads, MLP 3072), in
 * f32 and then in bf16 (the _bf16 rows), and prints, per kernel, the median
 * and best time and what it achieved next to the device's bound:
 *   - f32 GEMM-bound kernels (linear, attention): TFLOP/s against the FP32
 *     FMA peak, SMs x clock x FP32 lanes per SM x 2 (one FMA is two FLOPs).
 *     The twins call cuBLAS with CUBLAS_COMPUTE_32F in its default math
 *     mode, which is plain FP32, not TF32 tensor cores, so that is the
 *     bound that applies.
 *   - bf16 GEMM-bound kernels: TFLOP/s against the dense BF16 tensor-core
 *     peak with f32 accumulation, SMs x clock x BF16 FLOPs per SM and clock
 *     (4096 on sm_90, H100/H200; 2048 on sm_80, A100; other devices: no
 *     bound printed). The clock is the peak one the device reports, which
 *     can be above the clock NVIDIA's datasheet peak assumes (H100 SXM:
 *     989 TFLOP/s at 1830 MHz), so the bound is if anything high.
 *     attention_bf16 runs its projections and its fused scores and p·v on
 *     tensor cores, the online softmax on the CUDA cores between them.
 *   - Memory-bound kernels (layer norm, GELU, add, bias add): GB/s, the
 *     bytes each must read and write once (2 per bf16 element), against the
 *     DRAM peak, 2 (double data rate) x memory clock x bus width / 8.
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
 * The CSV has one row per kernel and dtype, and block_sum rows: one
 * pre-norm block as the twins would run it (medians added), per dtype.
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
#include <string>
#include <vector>

namespace {

struct Shape {
  int64_t batch = 8, tokens = 197, dim = 768, heads = 12, mlp = 3072;
  int64_t rows() const { return batch * tokens; }
  int64_t head_dim() const { return dim / heads; }
};

/* Deterministic values in [lo, hi): a hash of the index, no RNG state;
 * stored as T (bf16: rounded once). */
template <typename T>
__global__ void fill_kernel(T *data, int64_t n, float lo, float hi, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 2246822519u;
    h ^= h >> 13;
    htp_cuda_store(data, i, lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f));
  }
}

struct Buffers {
  std::vector<void *> owned;
  ~Buffers() {
    for (void *p : owned)
      cudaFree(p);
  }
  template <typename T> T *make(int64_t n, float lo, float hi) {
    void *p = nullptr;
    if (cudaMalloc(&p, sizeof(T) * (size_t)n) != cudaSuccess) {
      fprintf(stderr, "htp-bench-cuda: cudaMalloc of %lld elements failed\n", (long long)n);
      exit(1);
    }
    owned.push_back(p);
    fill_kernel<<<1024, 256>>>((T *)p, n, lo, hi, (uint32_t)owned.size() * 7919u);
    return (T *)p;
  }
};

/* One benchmark case: a kernel call and the work it must do. */
struct Case {
  std::string name;
  std::string shape; /* for the reader: what the call computes */
  double flops;      /* > 0: compared with the dtype's FLOP bound */
  double bytes;      /* used when flops == 0: compared with the DRAM bound */
  bool bf16;
  int (*run)(htp_cuda_kernels *, const void *);
  const void *args;
};

/* The twins of one element type, as the host sees it (float or htp_bf16). */
template <typename T> struct Twins;
#define TWINS(T, dtype, row_suffix)                                                        \
  template <> struct Twins<T> {                                                            \
    static constexpr auto linear = htp_cuda_linear_##dtype;                                \
    static constexpr auto layer_norm = htp_cuda_layer_norm_##dtype;                        \
    static constexpr auto gelu = htp_cuda_gelu_##dtype;                                    \
    static constexpr auto add = htp_cuda_add_##dtype;                                      \
    static constexpr auto bias_add = htp_cuda_bias_add_##dtype;                            \
    static constexpr auto attention = htp_cuda_attention_##dtype;                          \
    static constexpr auto linear_residual = htp_cuda_linear_residual_##dtype;              \
    static constexpr auto attention_residual = htp_cuda_attention_residual_##dtype;        \
    static constexpr auto mlp_hidden_units = htp_cuda_mlp_hidden_units_##dtype;            \
    static constexpr auto attention_heads = htp_cuda_attention_heads_##dtype;              \
    static constexpr auto bias_add_residual = htp_cuda_bias_add_residual_##dtype;          \
    static constexpr const char *suffix = row_suffix;                                      \
  };
TWINS(float, f32, "")
TWINS(htp_bf16, bf16, "_bf16")
#undef TWINS
/* The device-side type of T's storage, for the fill kernel. */
template <typename T> struct Stored { typedef float type; };
template <> struct Stored<htp_bf16> { typedef htp_cuda_bf16 type; };

template <typename T> struct Args {
  const T *x, *w, *b, *gamma, *beta, *other, *wproj, *bproj;
  T *y;
  float *scratch;
  int64_t rows, in, out;
  int64_t batch, tokens; /* attention only */
};

template <typename T> int run_linear(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::linear(k, a->x, a->w, a->b, a->y, a->rows, a->in, a->out);
}
/* The CUDA table's linear_gelu entry: the MLP unit kernel over every column. */
template <typename T> int run_linear_gelu(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  const int32_t every_column = 0;
  return Twins<T>::mlp_hidden_units(k, a->x, a->w, a->b, a->y, a->rows, a->in, a->out, a->out,
                                    &every_column, 1, 0);
}
template <typename T> int run_layer_norm(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::layer_norm(k, a->x, a->gamma, a->beta, a->y, a->rows, a->in, 1e-6f);
}
template <typename T> int run_gelu(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::gelu(k, a->x, a->y, a->rows * a->in, 0);
}
template <typename T> int run_add(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::add(k, a->x, a->other, a->y, a->rows * a->in);
}
template <typename T> int run_bias_add(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::bias_add(k, a->x, a->b, a->y, a->rows, a->in);
}
/* in = model dim, out = heads (head_dim = in / out). */
template <typename T> int run_attention(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::attention(k, a->x, a->w, a->b, a->wproj, a->bproj, a->y, a->scratch,
                             a->batch, a->tokens, a->in, a->out, a->in / a->out);
}
/* The fused residual entries (as compiled blocks call the projection and
 * fc2): `other` is the residual. */
template <typename T> int run_linear_residual(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::linear_residual(k, a->x, a->w, a->b, a->other, a->y, a->rows, a->in, a->out);
}
template <typename T> int run_attention_residual(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::attention_residual(k, a->x, a->w, a->b, a->wproj, a->bproj, a->other, a->y,
                                      a->scratch, a->batch, a->tokens, a->in, a->out,
                                      a->in / a->out);
}

/* A row-parallel layer's sum after its all-reduce: + bias + residual
 * (`other`) in one pass. */
template <typename T> int run_bias_add_residual(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  return Twins<T>::bias_add_residual(k, a->x, a->b, a->other, a->y, a->rows, a->in);
}
/* The balance hooks' listed-heads kernel (no projection): `out` heads, the
 * list every head in order (other == NULL) or one head alone, head 1 where
 * there are two (other != NULL: a rank that keeps one head, its weights
 * gathered). */
template <typename T> int run_attention_heads(htp_cuda_kernels *k, const void *p) {
  const Args<T> *a = (const Args<T> *)p;
  static std::vector<int32_t> every;
  while ((int64_t)every.size() < a->out)
    every.push_back((int32_t)every.size());
  const int32_t one[] = {a->out > 1 ? 1 : 0};
  const int64_t count = a->other ? 1 : a->out;
  return Twins<T>::attention_heads(k, a->x, a->w, a->b, a->y, a->scratch, a->batch, a->tokens,
                                   a->in, a->out, a->in / a->out, a->other ? one : every.data(),
                                   count);
}

/* Indices of a dtype's cases, in the order add_cases appends them. */
enum {
  kQkv, kProj, kFc1, kFc2, kLayerNorm, kGelu, kAdd, kBiasAdd, kAttention, kFc1Gelu,
  kFc2Residual, kAttentionResidual, kHeadsEvery, kHeadsOne, kBiasAddResidual, kBiasAddDim,
  kCasesPerType
};

/* Appends the kCasesPerType cases of element type T, its buffers in buf,
 * their arguments in args (kept alive by the caller). */
template <typename T>
void add_cases(std::vector<Case> &cases, std::vector<Args<T>> &args, Buffers &buf,
               const Shape &s, float *scratch) {
  typedef typename Stored<T>::type D;
  const int64_t rows = s.rows(), d = s.dim, m = s.mlp, inner = s.dim; /* heads * head_dim */
  T *x = (T *)buf.make<D>(rows * std::max(d, m), -1, 1), *x2 = (T *)buf.make<D>(rows * d, -1, 1);
  T *y = (T *)buf.make<D>(rows * std::max(3 * d, m), 0, 0);
  T *w_qkv = (T *)buf.make<D>(3 * inner * d, -0.05f, 0.05f);
  T *b_qkv = (T *)buf.make<D>(3 * inner, -0.1f, 0.1f);
  T *w_proj = (T *)buf.make<D>(d * inner, -0.05f, 0.05f), *b_proj = (T *)buf.make<D>(d, -0.1f, 0.1f);
  T *w_fc1 = (T *)buf.make<D>(m * d, -0.05f, 0.05f), *b_fc1 = (T *)buf.make<D>(m, -0.1f, 0.1f);
  T *w_fc2 = (T *)buf.make<D>(d * m, -0.05f, 0.05f), *b_fc2 = (T *)buf.make<D>(d, -0.1f, 0.1f);
  T *gamma = (T *)buf.make<D>(d, 0.5f, 1.5f), *beta = (T *)buf.make<D>(d, -0.1f, 0.1f);
  args.assign({
      {x, w_qkv, b_qkv, 0, 0, 0, 0, 0, y, 0, rows, d, 3 * inner, 0, 0},
      {x, w_proj, b_proj, 0, 0, 0, 0, 0, y, 0, rows, inner, d, 0, 0},
      {x, w_fc1, b_fc1, 0, 0, 0, 0, 0, y, 0, rows, d, m, 0, 0},
      {x, w_fc2, b_fc2, 0, 0, 0, 0, 0, y, 0, rows, m, d, 0, 0},
      {x, 0, 0, gamma, beta, 0, 0, 0, y, 0, rows, d, 0, 0, 0},
      {x, 0, 0, 0, 0, 0, 0, 0, y, 0, rows, m, 0, 0, 0},
      {x, 0, 0, 0, 0, x2, 0, 0, y, 0, rows, d, 0, 0, 0},
      {x, 0, b_fc1, 0, 0, 0, 0, 0, y, 0, rows, m, 0, 0, 0},
      {x, w_qkv, b_qkv, 0, 0, 0, w_proj, b_proj, y, scratch, rows, d, s.heads, s.batch, s.tokens},
      {x, w_fc1, b_fc1, 0, 0, 0, 0, 0, y, 0, rows, d, m, 0, 0},
      {x, w_fc2, b_fc2, 0, 0, x2, 0, 0, y, 0, rows, m, d, 0, 0},
      {x, w_qkv, b_qkv, 0, 0, x2, w_proj, b_proj, y, scratch, rows, d, s.heads, s.batch,
       s.tokens},
      {x, w_qkv, b_qkv, 0, 0, 0, 0, 0, y, scratch, rows, d, s.heads, s.batch, s.tokens},
      {x, w_qkv, b_qkv, 0, 0, x2, 0, 0, y, scratch, rows, d, s.heads, s.batch, s.tokens},
      {x, 0, b_proj, 0, 0, x2, 0, 0, y, 0, rows, d, 0, 0, 0},
      {x, 0, b_proj, 0, 0, 0, 0, 0, y, 0, rows, d, 0, 0, 0},
  });
  const double r = (double)rows, e = sizeof(T), tk = (double)s.tokens, hd = (double)s.head_dim();
  auto gemm = [](int64_t a, int64_t b, int64_t c, int64_t k) {
    return std::to_string(a) + "x" + std::to_string(b) + " @ " + std::to_string(c) + "x" +
           std::to_string(k) + "^T";
  };
  const std::string rd = std::to_string(rows) + "x" + std::to_string(d);
  const std::string rm = std::to_string(rows) + "x" + std::to_string(m);
  const std::string sfx = Twins<T>::suffix;
  const bool bf16 = sizeof(T) == 2;
  /* Add a kernel here: one row (its call in a run_* function above), with
   * the FLOPs it must do, or 0 and the bytes it must move; then its index
   * in the enum above. */
  const Case rows_of_t[kCasesPerType] = {
      {"linear_qkv" + sfx, gemm(rows, d, 3 * inner, d), 2 * r * d * 3 * inner, 0, bf16,
       run_linear<T>, &args[kQkv]},
      {"linear_proj" + sfx, gemm(rows, inner, d, inner), 2 * r * inner * d, 0, bf16,
       run_linear<T>, &args[kProj]},
      {"linear_fc1" + sfx, gemm(rows, d, m, d), 2 * r * d * m, 0, bf16, run_linear<T>,
       &args[kFc1]},
      {"linear_fc2" + sfx, gemm(rows, m, d, m), 2 * r * m * d, 0, bf16, run_linear<T>,
       &args[kFc2]},
      {"layer_norm" + sfx, rd, 0, (2 * r * d + 2 * d) * e, bf16, run_layer_norm<T>,
       &args[kLayerNorm]},
      {"gelu_erf" + sfx, rm, 0, 2 * r * m * e, bf16, run_gelu<T>, &args[kGelu]},
      {"add" + sfx, rd, 0, 3 * r * d * e, bf16, run_add<T>, &args[kAdd]},
      {"bias_add" + sfx, rm, 0, (2 * r * m + m) * e, bf16, run_bias_add<T>, &args[kBiasAdd]},
      {"attention" + sfx,
       "b" + std::to_string(s.batch) + " t" + std::to_string(s.tokens) + " d" +
           std::to_string(d) + " h" + std::to_string(s.heads) + " (qkv+sdpa+proj)",
       2 * r * d * 3 * inner + (double)s.batch * s.heads * 2 * (2 * tk * tk * hd) +
           2 * r * inner * d,
       0, bf16, run_attention<T>, &args[kAttention]},
      {"linear_gelu_fc1" + sfx, gemm(rows, d, m, d), 2 * r * d * m, 0, bf16, run_linear_gelu<T>,
       &args[kFc1Gelu]},
      {"linear_fc2_residual" + sfx, gemm(rows, m, d, m) + " + r", 2 * r * m * d, 0, bf16,
       run_linear_residual<T>, &args[kFc2Residual]},
      {"attention_residual" + sfx,
       "b" + std::to_string(s.batch) + " t" + std::to_string(s.tokens) + " d" +
           std::to_string(d) + " h" + std::to_string(s.heads) + " (qkv+sdpa+proj) + r",
       2 * r * d * 3 * inner + (double)s.batch * s.heads * 2 * (2 * tk * tk * hd) +
           2 * r * inner * d,
       0, bf16, run_attention_residual<T>, &args[kAttentionResidual]},
      {"attention_heads_every" + sfx,
       "b" + std::to_string(s.batch) + " t" + std::to_string(s.tokens) + " d" +
           std::to_string(d) + " " + std::to_string(s.heads) + " of h" + std::to_string(s.heads) +
           " (qkv+sdpa)",
       2 * r * d * 3 * inner + (double)s.batch * s.heads * 2 * (2 * tk * tk * hd), 0, bf16,
       run_attention_heads<T>, &args[kHeadsEvery]},
      {"attention_heads_one" + sfx,
       "b" + std::to_string(s.batch) + " t" + std::to_string(s.tokens) + " d" +
           std::to_string(d) + " one head of h" + std::to_string(s.heads) + " (qkv+sdpa)",
       2 * r * d * 3 * hd + (double)s.batch * 2 * (2 * tk * tk * hd), 0, bf16,
       run_attention_heads<T>, &args[kHeadsOne]},
      {"bias_add_residual" + sfx, rd + " + b + r", 0, (3 * r * d + d) * e, bf16,
       run_bias_add_residual<T>, &args[kBiasAddResidual]},
      /* the bias add bias_add_residual replaces: [rows, dim], not fc1's [rows, mlp] */
      {"bias_add_dim" + sfx, rd, 0, (2 * r * d + d) * e, bf16, run_bias_add<T>,
       &args[kBiasAddDim]},
  };
  cases.insert(cases.end(), rows_of_t, rows_of_t + kCasesPerType);
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

struct Options {
  Shape shape;
  int64_t repeats = 20, warmup = 3, device = 0;
  const char *csv_path = nullptr;
};

const char kUsage[] =
    "usage: htp-bench-cuda [--batch 8] [--tokens 197] [--dim 768] [--heads 12]\n"
    "                      [--mlp 3072] [--repeats 20] [--warmup 3] [--device 0]\n"
    "                      [--csv FILE]\n"
    "Times every CUDA kernel of one pre-norm ViT block's shapes (default ViT-B/16,\n"
    "batch 8), f32 then bf16, each from a cold L2, against the device's FP32, bf16\n"
    "tensor-core and DRAM bounds; --csv writes a row per kernel and the block sums.\n"
    "Exit 0; 77 without a CUDA device; 1 when a kernel fails; 2 on bad arguments.\n";

/* The command line into o: 0, or the exit code (2) after a message; -1
 * after --help. */
int parse_args(int argc, char **argv, Options *o) {
  Shape &s = o->shape;
  for (int i = 1; i < argc; ++i) {
    const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : nullptr;
    int bad = 0;
    if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
      fputs(kUsage, stdout);
      return -1;
    }
    if (!strcmp(flag, "--batch")) bad = parse_int(flag, value, 1, &s.batch);
    else if (!strcmp(flag, "--tokens")) bad = parse_int(flag, value, 1, &s.tokens);
    else if (!strcmp(flag, "--dim")) bad = parse_int(flag, value, 1, &s.dim);
    else if (!strcmp(flag, "--heads")) bad = parse_int(flag, value, 1, &s.heads);
    else if (!strcmp(flag, "--mlp")) bad = parse_int(flag, value, 1, &s.mlp);
    else if (!strcmp(flag, "--repeats")) bad = parse_int(flag, value, 1, &o->repeats);
    else if (!strcmp(flag, "--warmup")) bad = parse_int(flag, value, 0, &o->warmup);
    else if (!strcmp(flag, "--device")) bad = parse_int(flag, value, 0, &o->device);
    else if (!strcmp(flag, "--csv") && value) o->csv_path = value;
    else {
      fprintf(stderr, "htp-bench-cuda: unknown or incomplete argument '%s'\n%s", flag, kUsage);
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
  return 0;
}

/* The device and the bounds its rows are measured against. */
struct Device {
  cudaDeviceProp prop;
  int sm_khz = 0, mem_khz = 0, lanes = 0, bf16_per_clock = 0;
  double peak_flops = 0, peak_bf16 = 0, peak_bytes = 0;
};

/* 0, 77 (no CUDA device), or another exit code after a message. */
int read_device(int64_t device, Device *d) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("htp-bench-cuda: no CUDA device: skipped\n");
    return 77;
  }
  if (device >= devices) {
    fprintf(stderr, "htp-bench-cuda: no device %lld (%d present)\n", (long long)device, devices);
    return 2;
  }
  if (cudaGetDeviceProperties(&d->prop, (int)device) != cudaSuccess ||
      cudaDeviceGetAttribute(&d->sm_khz, cudaDevAttrClockRate, (int)device) != cudaSuccess ||
      cudaDeviceGetAttribute(&d->mem_khz, cudaDevAttrMemoryClockRate, (int)device) !=
          cudaSuccess) {
    fprintf(stderr, "htp-bench-cuda: cannot read the properties of device %lld\n",
            (long long)device);
    return 1;
  }
  const cudaDeviceProp &prop = d->prop;
  /* FP32 lanes per SM: 64 on compute capability 6.0, 7.x and 8.0, 128 on
   * the others from 6.1 on (8.6, 8.9, 9.0, 10.x, 12.x). */
  d->lanes = (prop.major == 7 || (prop.major == 8 && prop.minor == 0) ||
              (prop.major == 6 && prop.minor == 0))
                 ? 64
                 : 128;
  d->peak_flops = (double)prop.multiProcessorCount * d->sm_khz * 1e3 * d->lanes * 2.0;
  /* Dense BF16 tensor FLOPs per SM and clock, f32 accumulation: 0 where
   * this program does not know the device's (no bound printed). */
  d->bf16_per_clock = prop.major == 9 && prop.minor == 0   ? 4096
                      : prop.major == 8 && prop.minor == 0 ? 2048
                                                           : 0;
  d->peak_bf16 = (double)prop.multiProcessorCount * d->sm_khz * 1e3 * d->bf16_per_clock;
  d->peak_bytes = 2.0 * d->mem_khz * 1e3 * prop.memoryBusWidth / 8.0;
  return 0;
}

void print_header(const Options &o, const Device &d, FILE *csv) {
  const cudaDeviceProp &prop = d.prop;
  const Shape &s = o.shape;
  printf("device %lld: %s, sm_%d%d, %d SMs at %.0f MHz, %d-bit memory at %.0f MHz, L2 %.0f MiB\n",
         (long long)o.device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
         d.sm_khz / 1e3, prop.memoryBusWidth, d.mem_khz / 1e3, prop.l2CacheSize / 1048576.0);
  printf("bounds: FP32 FMA %.1f TFLOP/s (%d SMs x %.0f MHz x %d lanes x 2), "
         "DRAM %.0f GB/s (2 x %.0f MHz x %d bit / 8)\n",
         d.peak_flops / 1e12, prop.multiProcessorCount, d.sm_khz / 1e3, d.lanes,
         d.peak_bytes / 1e9, d.mem_khz / 1e3, prop.memoryBusWidth);
  if (d.bf16_per_clock)
    printf("        BF16 dense tensor, f32 accumulate %.1f TFLOP/s (%d SMs x %.0f MHz x %d)\n",
           d.peak_bf16 / 1e12, prop.multiProcessorCount, d.sm_khz / 1e3, d.bf16_per_clock);
  else
    printf("        BF16 tensor: no bound known for sm_%d%d (bf16 GEMM rows print none)\n",
           prop.major, prop.minor);
  printf("shape: batch %lld, tokens %lld, dim %lld, heads %lld, mlp %lld, f32 then bf16; %lld "
         "repeats after %lld warm-up, L2 flushed before each\n",
         (long long)s.batch, (long long)s.tokens, (long long)s.dim, (long long)s.heads,
         (long long)s.mlp, (long long)o.repeats, (long long)o.warmup);
  printf("%-17s %-40s %9s %9s %12s %12s %6s\n", "kernel", "shape", "median_ms", "min_ms",
         "achieved", "bound", "of_bound");
  if (csv)
    fprintf(csv, "kernel,dtype,shape,median_ms,min_ms,achieved,bound,unit,fraction_of_bound,"
                 "device\n");
}

/* The L2 flush buffer and the events around each timed call. */
struct Timer {
  void *flush = nullptr;
  size_t flush_bytes = 0;
  cudaEvent_t start = nullptr, stop = nullptr;
};

/* Case k's times (ms) after warm-up calls, each from a cold L2, sorted.
 * 0, or 1 after a message. */
int time_case(htp_cuda_kernels *kernels, const Case &k, const Options &o, const Timer &t,
              std::vector<float> *ms) {
  for (int64_t i = 0; i < o.warmup + o.repeats; ++i) {
    if (cudaMemsetAsync(t.flush, i & 0xff, t.flush_bytes, kernels->stream) != cudaSuccess ||
        cudaEventRecord(t.start, kernels->stream) != cudaSuccess || k.run(kernels, k.args) ||
        cudaEventRecord(t.stop, kernels->stream) != cudaSuccess ||
        htp_cuda_kernels_sync(kernels)) {
      fprintf(stderr, "htp-bench-cuda: %s failed: %s\n", k.name.c_str(),
              htp_cuda_kernels_error(kernels));
      return 1;
    }
    float elapsed = 0;
    cudaEventElapsedTime(&elapsed, t.start, t.stop);
    if (i >= o.warmup)
      ms->push_back(elapsed);
  }
  std::sort(ms->begin(), ms->end());
  return 0;
}

/* A case's row: median and best, what it achieved and against which bound. */
void print_row(const Case &k, const Device &d, double median, double best, FILE *csv) {
  const bool gemm = k.flops > 0;
  const double achieved = gemm ? k.flops / (median * 1e-3) : k.bytes / (median * 1e-3);
  const double bound = gemm ? (k.bf16 ? d.peak_bf16 : d.peak_flops) : d.peak_bytes;
  const double scale = gemm ? 1e12 : 1e9;
  const char *unit = gemm ? "TFLOP/s" : "GB/s", *dtype = k.bf16 ? "bf16" : "f32";
  if (bound > 0) {
    printf("%-17s %-40s %9.4f %9.4f %7.1f %-4s %7.1f %-4s %5.1f%%\n", k.name.c_str(),
           k.shape.c_str(), median, best, achieved / scale, gemm ? "TF/s" : "GB/s",
           bound / scale, gemm ? "TF/s" : "GB/s", 100.0 * achieved / bound);
    if (csv)
      fprintf(csv, "%s,%s,\"%s\",%.5f,%.5f,%.3f,%.3f,%s,%.4f,\"%s\"\n", k.name.c_str(), dtype,
              k.shape.c_str(), median, best, achieved / scale, bound / scale, unit,
              achieved / bound, d.prop.name);
  } else {
    printf("%-17s %-40s %9.4f %9.4f %7.1f %-4s %12s %6s\n", k.name.c_str(), k.shape.c_str(),
           median, best, achieved / scale, "TF/s", "n/a", "");
    if (csv)
      fprintf(csv, "%s,%s,\"%s\",%.5f,%.5f,%.3f,,%s,,\"%s\"\n", k.name.c_str(), dtype,
              k.shape.c_str(), median, best, achieved / scale, unit, d.prop.name);
  }
}

/* One pre-norm block as compiled blocks run it, per dtype: ln, attention
 * with its residual add, ln, fc1 with its GELU, fc2 with its residual add
 * (the fused entries; the biases are inside the linears). */
void print_block_sums(const std::vector<Case> &cases, const std::vector<double> &medians,
                      const Device &d, FILE *csv) {
  for (size_t first = 0; first < cases.size(); first += kCasesPerType) {
    const double *m = &medians[first];
    const double block = m[kLayerNorm] + m[kAttentionResidual] + m[kLayerNorm] +
                         m[kFc1Gelu] + m[kFc2Residual];
    const char *dtype = cases[first].bf16 ? "bf16" : "f32";
    printf("block_sum %-7s %-40s %9.4f (ln+attention_residual+ln+fc1_gelu+fc2_residual, "
           "medians, each from a cold L2)\n",
           dtype, "", block);
    if (csv)
      fprintf(csv,
              "block_sum,%s,\"ln+attention_residual+ln+fc1_gelu+fc2_residual\",%.5f,,,,ms,,"
              "\"%s\"\n",
              dtype, block, d.prop.name);
    /* What a tp > 1 block's fused sum and a hook's listed heads cost beside
     * what they replace. */
    printf("fusions %-7s bias_add_residual %.4f ms vs bias_add+add %.4f; one head %.4f ms vs "
           "every head %.4f\n",
           dtype, m[kBiasAddResidual], m[kBiasAddDim] + m[kAdd], m[kHeadsOne], m[kHeadsEvery]);
  }
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  Device d;
  int code = parse_args(argc, argv, &o);
  if (code < 0)
    return 0;
  if (code || (code = read_device(o.device, &d)))
    return code;
  const Shape &s = o.shape;
  char err[256];
  htp_cuda_kernels *kernels = nullptr;
  if (htp_cuda_kernels_create((int)o.device, &kernels, err, sizeof err)) {
    fprintf(stderr, "htp-bench-cuda: %s\n", err);
    return 1;
  }
  Buffers buf;
  /* One f32 scratch for both dtypes: the bf16 attention needs what f32 does. */
  const int64_t scratch_floats =
      htp_cuda_attention_scratch_floats(s.batch, s.tokens, s.dim, s.heads, s.head_dim());
  float *scratch = buf.make<float>(std::max<int64_t>(scratch_floats, 1), 0, 0);
  std::vector<Case> cases;
  std::vector<Args<float>> f32_args;
  std::vector<Args<htp_bf16>> bf16_args;
  add_cases<float>(cases, f32_args, buf, s, scratch);
  add_cases<htp_bf16>(cases, bf16_args, buf, s, scratch);
  /* Writing this flushes the L2 (twice its size, so no line survives). */
  Timer timer;
  timer.flush_bytes = 2 * (size_t)std::max(d.prop.l2CacheSize, 1 << 20);
  if (cudaMalloc(&timer.flush, timer.flush_bytes) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {
    fprintf(stderr, "htp-bench-cuda: cannot allocate or fill the buffers\n");
    return 1;
  }
  buf.owned.push_back(timer.flush);
  FILE *csv = nullptr;
  if (o.csv_path && !(csv = fopen(o.csv_path, "w"))) {
    fprintf(stderr, "htp-bench-cuda: cannot write %s\n", o.csv_path);
    return 1;
  }
  print_header(o, d, csv);
  cudaEventCreate(&timer.start);
  cudaEventCreate(&timer.stop);
  int failed = 0;
  std::vector<double> medians(cases.size(), 0.0);
  for (size_t c = 0; c < cases.size() && !failed; ++c) {
    std::vector<float> ms;
    failed = time_case(kernels, cases[c], o, timer, &ms);
    if (failed)
      break;
    medians[c] = ms[ms.size() / 2];
    print_row(cases[c], d, medians[c], ms[0], csv);
  }
  if (!failed)
    print_block_sums(cases, medians, d, csv);
  if (csv)
    fclose(csv);
  cudaEventDestroy(timer.start);
  cudaEventDestroy(timer.stop);
  htp_cuda_kernels_destroy(kernels);
  return failed;
}
