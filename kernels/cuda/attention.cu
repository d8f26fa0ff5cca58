/*===- kernels/cuda/attention.cu - Multi-head self-attention, timm layout -===*
 *
 * The CPU twin's algorithm with the per-image loop folded into cuBLAS
 * strided batched GEMMs: for each head, the scores of every image come from
 * one call (image b's q and k start b·tokens qkv rows apart), then one
 * softmax launch over all batch·heads·tokens rows, then per head one batched
 * p·v that writes that head's columns of every image's context: 2 heads + 1
 * launches, where a loop over the images took 3 per image (192 for ViT-L/16
 * at batch 64, launch-bound on an H200). Scratch layout, in floats:
 *   [qkv: rows * 3 * inner][context: rows * inner]
 *   [scores: heads * batch * tokens², head-major]
 * The bf16 twin (head_dim up to 256) fuses the rest instead, as PyTorch's
 * bf16 flash attention does: its qkv projection (bf16 GEMM) writes q, k, v
 * rounded to bf16 into the qkv region, and one kernel
 * (fused_attention_kernel) per image, head and tile of 64 queries takes
 * q·kᵀ and p·v on the tensor cores (WMMA, f32 accumulation) a tile of 64
 * keys at a time, with the next tile's k and v copying in (cp.async) while
 * it works, and an online softmax in f32 (the scores never leave the SM);
 * it rounds p to bf16 for p·v and sums the rounded p for the normalisation
 * (so the context is the exact average of v under the rounded weights),
 * and writes the context rounded to bf16 into the context region for the
 * bf16 output projection. The scores region goes unused; the scratch
 * formula stays the f32 one, so a block's workspace does not depend on
 * its dtype. Larger heads (or a device that gives a block less shared
 * memory than the fused kernel needs) take the f32 path below with the
 * context rounded to bf16.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <math.h>
#include <mma.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

int htp_cuda_attention_kernel_from_env(void) {
  const char *value = getenv("HTP_CUDA_ATTENTION");
  if (!value || !*value || strcmp(value, "mma") == 0)
    return HTP_CUDA_ATTENTION_MMA;
  if (strcmp(value, "head") == 0)
    return HTP_CUDA_ATTENTION_HEAD;
  return strcmp(value, "wmma") == 0 ? HTP_CUDA_ATTENTION_WMMA : -1;
}

constexpr int kThreads = 256;

/* Max (is_max) or sum over the block; every thread gets the result. */
__device__ float block_reduce(float value, bool is_max, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = is_max ? fmaxf(value, other) : value + other;
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  float total = shared[0];
  for (int i = 1; i < (int)blockDim.x / 32; ++i)
    total = is_max ? fmaxf(total, shared[i]) : total + shared[i];
  return total;
}

/* Numerically stable softmax of one row per block, in place. */
__global__ void softmax_rows_kernel(float *scores, int64_t cols) {
  __shared__ float shared[kThreads / 32];
  float *row = scores + blockIdx.x * cols;
  float max = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    max = fmaxf(max, row[c]);
  max = block_reduce(max, true, shared);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float e = __expf(row[c] - max);
    row[c] = e;
    sum += e;
  }
  float inv = 1.0f / block_reduce(sum, false, shared);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    row[c] *= inv;
}

int htp_cuda_softmax_rows(htp_cuda_kernels *kernels, float *scores, int64_t rows,
                          int64_t cols) {
  softmax_rows_kernel<<<(unsigned)rows, kThreads, 0, kernels->stream>>>(scores, cols);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}


/* ----- fused bf16 attention ----------------------------------------------
 * A block of 4 warps takes 64 query rows of one (image, head); warp w owns
 * rows 16w..16w+15 of every per-row tile below, so only the K and V tiles
 * are shared (__syncthreads around their loads) and the rest needs
 * __syncwarp alone. Shared memory, DP = head_dim padded to a multiple of
 * 16 (zeros beyond head_dim, and zero rows beyond the image's tokens):
 *   q, k, v: bf16 [64][DP + 8]; s: f32 [64][68]; p: bf16 [64][72];
 *   o: f32 [64][DP + 4] (the running context); the rows' max and sum.
 * The +8 / +4 pads shift rows across banks and keep every 16x16 fragment
 * 32-byte aligned (WMMA's requirement). */
namespace fused {
namespace wmma = nvcuda::wmma;
constexpr int kRows = 64, kKeys = 64, kWarps = 4, kThreads = 32 * kWarps;
constexpr int kLdS = kKeys + 4, kLdP = kKeys + 8;
template <int DP> struct layout {
  static constexpr int ld_in = DP + 8, ld_o = DP + 4;
  static constexpr size_t q = 0, k = q + 2u * kRows * ld_in, v = k + 2u * kKeys * ld_in,
                          s = v + 2u * kKeys * ld_in, p = s + 4u * kRows * kLdS,
                          o = p + 2u * kRows * kLdP, max = o + 4u * kRows * ld_o,
                          sum = max + 4u * kRows, bytes = sum + 4u * kRows;
};

/* 16 bytes global -> shared without passing through registers (sm_80's
 * cp.async); zeros instead where !valid. */
__device__ __forceinline__ void copy16_async(void *dst, const void *src, bool valid) {
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void commit_async() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most the latest group of copies is still in flight (the
 * "memory" clobbers keep the compiler from moving shared-memory accesses
 * across the copies it cannot see). */
__device__ __forceinline__ void wait_async_but_latest() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

/* Rows [0, 64) of one head's q, k or v (bf16, row stride ld) into dst
 * [64][ld_in], zeros past `valid` rows; columns past head_dim are left
 * alone (zeroed once). async: head_dim % 8 == 0 and 16-byte aligned rows,
 * so the copy is issued as cp.async and lands by a later wait; else plain
 * loads and stores. */
template <int DP>
__device__ void copy_tile(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int64_t ld, int valid,
                          int head_dim, bool async) {
  constexpr int ld_in = layout<DP>::ld_in;
  if (async) {
    const int pieces = head_dim / 8;
    for (int i = threadIdx.x; i < kRows * pieces; i += kThreads) {
      const int r = i / pieces, d = i % pieces * 8;
      copy16_async(dst + r * ld_in + d, r < valid ? src + r * ld + d : src, r < valid);
    }
    return;
  }
  for (int i = threadIdx.x; i < kRows * head_dim; i += kThreads) {
    const int r = i / head_dim, d = i % head_dim;
    dst[r * ld_in + d] = r < valid ? src[r * ld + d] : __float2bfloat16_rn(0.f);
  }
}

template <int DP>
__global__ void __launch_bounds__(kThreads)
    fused_attention_kernel(const __nv_bfloat16 *qkv, __nv_bfloat16 *context, int tokens,
                           int heads, int head_dim, int q_tiles, float scale_log2, bool async) {
  using L = layout<DP>;
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(smem + L::q);
  __nv_bfloat16 *ks = reinterpret_cast<__nv_bfloat16 *>(smem + L::k);
  __nv_bfloat16 *vs = reinterpret_cast<__nv_bfloat16 *>(smem + L::v);
  float *ss = reinterpret_cast<float *>(smem + L::s);
  __nv_bfloat16 *ps = reinterpret_cast<__nv_bfloat16 *>(smem + L::p);
  float *os = reinterpret_cast<float *>(smem + L::o);
  float *row_max = reinterpret_cast<float *>(smem + L::max);
  float *row_sum = reinterpret_cast<float *>(smem + L::sum);

  const int image = blockIdx.x / q_tiles, first = blockIdx.x % q_tiles * kRows;
  const int head = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t inner = (int64_t)heads * head_dim, ld = 3 * inner;
  const __nv_bfloat16 *base = qkv + (int64_t)image * tokens * ld + (int64_t)head * head_dim;

  /* q, k and v lie one after the other: 192 rows whose pad columns stay 0 */
  if (head_dim < DP)
    for (int i = threadIdx.x; i < 3 * kRows * DP; i += kThreads)
      if (i % DP >= head_dim) qs[i / DP * L::ld_in + i % DP] = __float2bfloat16_rn(0.f);
  for (int i = threadIdx.x; i < kRows * L::ld_o; i += kThreads) os[i] = 0.f;
  for (int i = threadIdx.x; i < kRows; i += kThreads) row_max[i] = -INFINITY, row_sum[i] = 0.f;

  /* The copies run one tile ahead: k of the next tile loads during this
   * tile's softmax and p·v, v of the next during the next q·kᵀ. Every
   * step commits one group (empty past the last tile), so "all but the
   * latest group" is always the one a step waits for. */
  copy_tile<DP>(qs, base + first * ld, ld, tokens - first, head_dim, async);
  copy_tile<DP>(ks, base + inner, ld, tokens, head_dim, async);
  commit_async();
  copy_tile<DP>(vs, base + 2 * inner, ld, tokens, head_dim, async);
  commit_async();

  /* A warp whose rows all lie past the image's tokens (the last tile's)
   * only helps copy k and v; in the last key tile, 16-key chunks past the
   * tokens are skipped. */
  const int row0 = warp * 16;
  const bool active = first + row0 < tokens;
  for (int key0 = 0; key0 < tokens; key0 += kKeys) {
    const int next = key0 + kKeys;
    const int keys = min(kKeys, tokens - key0), chunks = (keys + 15) / 16;
    wait_async_but_latest(); /* this tile's k (and q) */
    __syncthreads();

    /* s = q·kᵀ for the warp's 16 rows and the tile's keys */
    if (active)
    for (int n = 0; n < chunks; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < DP / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(a, qs + row0 * L::ld_in + kk * 16, L::ld_in);
        wmma::load_matrix_sync(b, ks + n * 16 * L::ld_in + kk * 16, L::ld_in);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(ss + row0 * kLdS + n * 16, acc, kLdS, wmma::mem_row_major);
    }
    __syncthreads(); /* every warp is done with this tile's k */
    if (next < tokens)
      copy_tile<DP>(ks, base + inner + next * ld, ld, tokens - next, head_dim, async);
    commit_async();

    /* Online softmax, the warp's 16 rows at once, two lanes a row (32 keys
     * each): the new max, p rounded to bf16 (0 past the tokens), the
     * running sum of the rounded p, and the running context rescaled to the
     * new max. */
    if (active) {
      const int r = row0 + lane / 2, half = lane % 2;
      const float *srow = ss + r * kLdS + half * 32;
      float sv[32], tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < 32; c += 4) {
        const float4 f = *reinterpret_cast<const float4 *>(srow + c);
        const int col = half * 32 + c;
        sv[c] = col < keys ? f.x * scale_log2 : -INFINITY;
        sv[c + 1] = col + 1 < keys ? f.y * scale_log2 : -INFINITY;
        sv[c + 2] = col + 2 < keys ? f.z * scale_log2 : -INFINITY;
        sv[c + 3] = col + 3 < keys ? f.w * scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, fmaxf(fmaxf(sv[c], sv[c + 1]), fmaxf(sv[c + 2], sv[c + 3])));
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float old_max = row_max[r], new_max = fmaxf(old_max, tile_max);
      __nv_bfloat16 *prow = ps + r * kLdP + half * 32;
      float tile_sum = 0.f;
#pragma unroll
      for (int c = 0; c < 32; c += 2) {
        const __nv_bfloat162 pair =
            __floats2bfloat162_rn(exp2f(sv[c] - new_max), exp2f(sv[c + 1] - new_max));
        *reinterpret_cast<__nv_bfloat162 *>(prow + c) = pair;
        const float2 rounded = __bfloat1622float2(pair);
        tile_sum += rounded.x + rounded.y;
      }
      tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
      const float rescale = exp2f(old_max - new_max); /* 0 on the first tile */
      float *orow = os + r * L::ld_o + half * (DP / 2);
#pragma unroll
      for (int d = 0; d < DP / 2; d += 4) {
        float4 o = *reinterpret_cast<float4 *>(orow + d);
        o.x *= rescale, o.y *= rescale, o.z *= rescale, o.w *= rescale;
        *reinterpret_cast<float4 *>(orow + d) = o;
      }
      __syncwarp(); /* both lanes of the row have read row_max[r] */
      if (half == 0) row_max[r] = new_max, row_sum[r] = row_sum[r] * rescale + tile_sum;
    }
    wait_async_but_latest(); /* this tile's v */
    __syncthreads();

    /* o += p·v over the tile's chunks of keys */
    if (active)
    for (int n = 0; n < DP / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, os + row0 * L::ld_o + n * 16, L::ld_o, wmma::mem_row_major);
      for (int kk = 0; kk < chunks; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
        wmma::load_matrix_sync(a, ps + row0 * kLdP + kk * 16, kLdP);
        wmma::load_matrix_sync(b, vs + kk * 16 * L::ld_in + n * 16, L::ld_in);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(os + row0 * L::ld_o + n * 16, acc, L::ld_o, wmma::mem_row_major);
    }
    __syncthreads(); /* every warp is done with this tile's v */
    if (next < tokens)
      copy_tile<DP>(vs, base + 2 * inner + next * ld, ld, tokens - next, head_dim, async);
    commit_async();
  }
  __syncwarp();

  /* context = o / sum, rounded to bf16, for the tile's real rows */
  for (int r = row0; r < row0 + 16 && first + r < tokens; ++r) {
    const float inv = 1.0f / row_sum[r];
    __nv_bfloat16 *out = context + ((int64_t)image * tokens + first + r) * inner +
                         (int64_t)head * head_dim;
    for (int d = lane; d < head_dim; d += 32)
      out[d] = __float2bfloat16_rn(os[r * L::ld_o + d] * inv);
  }
}

/* A fused kernel's signature; both (this one and mma_path's) run a block of
 * kThreads per image, head and tile of 64 queries. */
using kernel_fn = void (*)(const __nv_bfloat16 *, __nv_bfloat16 *, int, int, int, int, float,
                           bool);

/* Launches `kernel` with `bytes` of shared memory, which the device is asked
 * to allow once per kernels object (`bit` of fused_allowed). */
int launch_kernel(htp_cuda_kernels *kernels, kernel_fn kernel, size_t bytes, unsigned bit,
                  const __nv_bfloat16 *qkv, __nv_bfloat16 *context, int64_t batch,
                  int64_t tokens, int64_t heads, int64_t head_dim) {
  if (!(kernels->fused_allowed & bit)) {
    HTP_CUDA_CHECK(kernels, cudaFuncSetAttribute(kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)bytes));
    kernels->fused_allowed |= bit;
  }
  const int q_tiles = (int)((tokens + kRows - 1) / kRows);
  const float scale_log2 = 1.4426950408889634f / sqrtf((float)head_dim);
  const bool async = head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(qkv) % 16 == 0;
  kernel<<<dim3((unsigned)(q_tiles * batch), (unsigned)heads), kThreads, bytes,
           kernels->stream>>>(qkv, context, (int)tokens, (int)heads, (int)head_dim, q_tiles,
                              scale_log2, async);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

template <int DP>
int launch(htp_cuda_kernels *kernels, const __nv_bfloat16 *qkv, __nv_bfloat16 *context,
           int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim) {
  return launch_kernel(kernels, fused_attention_kernel<DP>, layout<DP>::bytes,
                       DP / 32 /* 1, 2, 4, 8 */, qkv, context, batch, tokens, heads, head_dim);
}

/* Whether the fused kernel takes this shape: heads up to 256 wide, grid
 * dimensions within CUDA's limits. */
/* The padded head width a head_dim runs at. */
int64_t padded(int64_t head_dim) {
  return head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256;
}

/* Whether the fused kernel takes this shape on this device: heads up to
 * 256 wide, grid dimensions within CUDA's limits, and the block's shared
 * memory within what the device lets one block have (sm_90: 227 KiB, the
 * 256-wide heads' 191 KiB fits; sm_80's 163 KiB would not). */
bool takes(htp_cuda_kernels *kernels, int64_t batch, int64_t tokens, int64_t heads,
           int64_t head_dim) {
  if (head_dim > 256 || heads > 65535 || (tokens + kRows - 1) / kRows * batch > 0x7fffffff)
    return false;
  const int64_t dp = padded(head_dim);
  const size_t bytes = dp == 32 ? layout<32>::bytes : dp == 64 ? layout<64>::bytes
                       : dp == 128 ? layout<128>::bytes : layout<256>::bytes;
  if (!kernels->shared_per_block &&
      cudaDeviceGetAttribute(&kernels->shared_per_block,
                             cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             kernels->device) != cudaSuccess)
    return false;
  return bytes <= (size_t)kernels->shared_per_block;
}

int run(htp_cuda_kernels *kernels, const __nv_bfloat16 *qkv, __nv_bfloat16 *context,
        int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim) {
  switch (padded(head_dim)) {
  case 32: return launch<32>(kernels, qkv, context, batch, tokens, heads, head_dim);
  case 64: return launch<64>(kernels, qkv, context, batch, tokens, heads, head_dim);
  case 128: return launch<128>(kernels, qkv, context, batch, tokens, heads, head_dim);
  default: return launch<256>(kernels, qkv, context, batch, tokens, heads, head_dim);
  }
}
} // namespace fused

/* ----- the same on mma.sync, scores and context in registers -------------
 * The default (HTP_CUDA_ATTENTION unset or mma; wmma keeps the kernel above
 * for every width), for heads up to 128 wide: the fused kernel's contract
 * (bf16 q, k, v and p, f32 accumulation, the online softmax in the exp2
 * domain, the rounded p summed) with what kept it latency-bound gone: each
 * warp keeps its 16 query rows' q fragments, their scores and their running
 * context in registers (mma.m16n8k16, whose accumulator layout is the next
 * product's operand layout, so p never goes through shared memory), the
 * rows' max and sum in registers (a row's four lanes combine by shuffles),
 * and k and v in two stages of shared memory, the next tile copying in
 * while the current one computes: two barriers a tile instead of four, no
 * accumulator round trips. Fragments come from shared memory by ldmatrix (v
 * transposed by ldmatrix.trans). Shared memory, DP as above: q and two
 * stages of k and of v, bf16 [64][DP + 8] each (the pad spreads ldmatrix's
 * rows across banks): 46 KiB at DP = 64. */
namespace mma_path {
constexpr int kRows = 64, kKeys = 64, kWarps = 4, kThreads = 32 * kWarps;
template <int DP> struct layout {
  static constexpr int ld = fused::layout<DP>::ld_in; /* so fused::copy_tile fills it */
  static constexpr size_t tile = 2u * kRows * ld, q = 0, k = tile, v = 3 * tile,
                          bytes = 5 * tile;
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16 *p) {
  const unsigned at = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16 *p) {
  const unsigned at = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}
/* d += a·b: a 16x16 (row), b 16x8 (col), bf16; d 16x8 f32. */
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t bits(__nv_bfloat162 pair) {
  return *reinterpret_cast<uint32_t *>(&pair);
}

/* One tile of up to 64 keys (k and v at kt and vt, kKeys rows of ld) for a
 * warp's 16 query rows (their q fragments qf): s = q·kᵀ, the online softmax
 * (row_max, row_sum of the rows group and group + 8), o += p·v. What both
 * kernels below run per tile. */
template <int DP>
__device__ __forceinline__ void attend_tile(const uint32_t (&qf)[DP / 16][4],
                                            float (&o)[DP / 8][4], float (&row_max)[2],
                                            float (&row_sum)[2], const __nv_bfloat16 *kt,
                                            const __nv_bfloat16 *vt, int key0, int tokens,
                                            float scale_log2, int lane) {
  using L = layout<DP>;
  constexpr int kSteps = DP / 16, kDTiles = DP / 8;
  const int quad = lane % 4;
  const int keys = min(kKeys, tokens - key0), chunks = (keys + 15) / 16;

  /* s = q·kᵀ: 8 tiles of 8 keys, those of 16-key chunks past the tokens skipped */
  float s[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    if (c < chunks) {
#pragma unroll
      for (int kk = 0; kk < kSteps; kk += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, kt + (c * 16 + lane % 8) * L::ld + kk * 16 + lane / 8 * 8);
        mma(s[2 * c], qf[kk], b[0], b[1]);
        mma(s[2 * c], qf[kk + 1], b[2], b[3]);
        ldmatrix_x4(b, kt + (c * 16 + 8 + lane % 8) * L::ld + kk * 16 + lane / 8 * 8);
        mma(s[2 * c + 1], qf[kk], b[0], b[1]);
        mma(s[2 * c + 1], qf[kk + 1], b[2], b[3]);
      }
    }
  }

  /* Online softmax: element e of tile j is row group + 8 (e / 2), key
   * key0 + 8j + 2 quad + e % 2; a row's 64 keys are on its 4 lanes. */
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + 8 * j + 2 * quad + (e & 1);
      s[j][e] = key < tokens ? s[j][e] * scale_log2 : -INFINITY;
      tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[j][e]);
    }
  float new_max[2], rescale[2], tile_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    new_max[r] = fmaxf(row_max[r], tile_max[r]);
    rescale[r] = exp2f(row_max[r] - new_max[r]); /* 0 on the first tile */
  }
  /* p rounded to bf16, packed as p·v's a operand: tile j is half of chunk j / 2. */
  uint32_t p[4][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const __nv_bfloat162 top = __floats2bfloat162_rn(exp2f(s[j][0] - new_max[0]),
                                                     exp2f(s[j][1] - new_max[0]));
    const __nv_bfloat162 bottom = __floats2bfloat162_rn(exp2f(s[j][2] - new_max[1]),
                                                        exp2f(s[j][3] - new_max[1]));
    const float2 rounded_top = __bfloat1622float2(top);
    const float2 rounded_bottom = __bfloat1622float2(bottom);
    tile_sum[0] += rounded_top.x + rounded_top.y;
    tile_sum[1] += rounded_bottom.x + rounded_bottom.y;
    p[j / 2][(j % 2) * 2] = bits(top);
    p[j / 2][(j % 2) * 2 + 1] = bits(bottom);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 1);
    tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 2);
    row_sum[r] = row_sum[r] * rescale[r] + tile_sum[r];
    row_max[r] = new_max[r];
  }
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) {
    o[n][0] *= rescale[0], o[n][1] *= rescale[0];
    o[n][2] *= rescale[1], o[n][3] *= rescale[1];
  }

  /* o += p·v over the tile's chunks of keys */
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    if (c < chunks) {
#pragma unroll
      for (int n = 0; n < kDTiles; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vt + (c * 16 + lane % 16) * L::ld + n * 8 + lane / 16 * 8);
        mma(o[n], p[c], b[0], b[1]);
        mma(o[n + 1], p[c], b[2], b[3]);
      }
    }
  }
}

/* The warp's 16 query rows from `row` on: q fragments from shared memory
 * (qs: rows of ld), the running context and softmax state cleared. */
template <int DP>
__device__ __forceinline__ void start_rows(uint32_t (&qf)[DP / 16][4], float (&o)[DP / 8][4],
                                           float (&row_max)[2], float (&row_sum)[2],
                                           const __nv_bfloat16 *qs, int row, int lane) {
#pragma unroll
  for (int kk = 0; kk < DP / 16; ++kk)
    ldmatrix_x4(qf[kk], qs + (row + lane % 16) * layout<DP>::ld + kk * 16 + lane / 16 * 8);
#pragma unroll
  for (int n = 0; n < DP / 8; ++n)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  row_max[0] = row_max[1] = -INFINITY;
  row_sum[0] = row_sum[1] = 0.f;
}

/* context = o / sum, rounded to bf16, for the real rows (of the warp's 16
 * from `row` on) and columns; out is the image's first row of the head's
 * context columns, rows `inner` apart. */
template <int DP>
__device__ __forceinline__ void store_rows(const float (&o)[DP / 8][4], const float (&row_sum)[2],
                                           __nv_bfloat16 *out, int64_t inner, int row,
                                           int tokens, int head_dim, int lane) {
  const int group = lane / 4, quad = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int at = row + group + 8 * r;
    if (at >= tokens)
      continue;
    const float inv = 1.0f / row_sum[r];
    __nv_bfloat16 *line = out + (int64_t)at * inner;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int col = n * 8 + 2 * quad;
      if (col < head_dim) line[col] = __float2bfloat16_rn(o[n][2 * r] * inv);
      if (col + 1 < head_dim) line[col + 1] = __float2bfloat16_rn(o[n][2 * r + 1] * inv);
    }
  }
}

template <int DP>
__global__ void __launch_bounds__(kThreads)
    mma_attention_kernel(const __nv_bfloat16 *qkv, __nv_bfloat16 *context, int tokens,
                         int heads, int head_dim, int q_tiles, float scale_log2, bool async) {
  using L = layout<DP>;
  static_assert(DP % 32 == 0, "q·kᵀ takes its k-steps in pairs");
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16 *const qs = reinterpret_cast<__nv_bfloat16 *>(smem + L::q);
  __nv_bfloat16 *const ks = reinterpret_cast<__nv_bfloat16 *>(smem + L::k);
  __nv_bfloat16 *const vs = reinterpret_cast<__nv_bfloat16 *>(smem + L::v);
  constexpr int stage_elems = kRows * L::ld;

  const int image = blockIdx.x / q_tiles, first = blockIdx.x % q_tiles * kRows;
  const int head = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t inner = (int64_t)heads * head_dim, ld = 3 * inner;
  const __nv_bfloat16 *base = qkv + (int64_t)image * tokens * ld + (int64_t)head * head_dim;

  /* The five tiles lie one after the other: 320 rows whose pad columns stay 0. */
  if (head_dim < DP)
    for (int i = threadIdx.x; i < 5 * kRows * DP; i += kThreads)
      if (i % DP >= head_dim) qs[i / DP * L::ld + i % DP] = __float2bfloat16_rn(0.f);

  fused::copy_tile<DP>(qs, base + first * ld, ld, tokens - first, head_dim, async);
  fused::copy_tile<DP>(ks, base + inner, ld, tokens, head_dim, async);
  fused::copy_tile<DP>(vs, base + 2 * inner, ld, tokens, head_dim, async);
  fused::commit_async();

  const int row0 = warp * 16;
  const bool active = first + row0 < tokens;
  uint32_t qf[DP / 16][4];
  float o[DP / 8][4], row_max[2], row_sum[2];

  const int tiles = (tokens + kKeys - 1) / kKeys;
  for (int t = 0; t < tiles; ++t) {
    const int key0 = t * kKeys, stage = t & 1;
    /* The next tile into the other stage (last read a tile ago, before
     * that tile's closing barrier); every step commits one group. */
    if (t + 1 < tiles) {
      const int next = key0 + kKeys;
      fused::copy_tile<DP>(ks + (stage ^ 1) * stage_elems, base + inner + next * ld, ld,
                    tokens - next, head_dim, async);
      fused::copy_tile<DP>(vs + (stage ^ 1) * stage_elems, base + 2 * inner + next * ld, ld,
                    tokens - next, head_dim, async);
    }
    fused::commit_async();
    fused::wait_async_but_latest(); /* this tile's k and v (and q) */
    __syncthreads();

    if (active) {
      if (t == 0)
        start_rows<DP>(qf, o, row_max, row_sum, qs, row0, lane);
      attend_tile<DP>(qf, o, row_max, row_sum, ks + stage * stage_elems,
                      vs + stage * stage_elems, key0, tokens, scale_log2, lane);
    }
    __syncthreads(); /* every warp is done with this stage */
  }

  if (active)
    store_rows<DP>(o, row_sum,
                   context + (int64_t)image * tokens * inner + (int64_t)head * head_dim +
                       (int64_t)first * inner,
                   inner, row0, tokens - first, head_dim, lane);
}

template <int DP>
int launch(htp_cuda_kernels *kernels, const __nv_bfloat16 *qkv, __nv_bfloat16 *context,
           int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim) {
  static_assert(kThreads == fused::kThreads && kRows == fused::kRows, "fused's grid");
  return fused::launch_kernel(kernels, mma_attention_kernel<DP>, layout<DP>::bytes,
                              (DP / 32) << 4 /* beside the fused kernel's bits */, qkv, context,
                              batch, tokens, heads, head_dim);
}

/* ----- a whole head a block (HTP_CUDA_ATTENTION=head) ---------------------
 * The kernel above runs a block per 64 queries, each loading all of the
 * head's k and v: at ViT-L/16 (197 tokens) four blocks per image and head,
 * the fourth with 5 real queries, so k and v cross from L2 four times and a
 * quarter of the blocks do almost nothing. Here one block of up to 8 warps
 * takes an image's head whole: its q, k and v, up to kHeadTokens rows, land in
 * shared memory once (cp.async; rows past the tokens zero), then each warp
 * takes 16-query slices in turn (13 at 197 tokens over 7 warps) through the
 * same tile step, with no barrier after the first. Shared memory: 3 x
 * tokens rounded up to 64 rows of DP + 8 bf16; at 197 tokens and DP = 64,
 * 108 KiB, two blocks an SM. An experiment until a GPU check passes it. */
constexpr int kHeadWarps = 8, kHeadThreads = 32 * kHeadWarps, kHeadTokens = 256;

template <int DP> size_t head_bytes(int64_t tokens) {
  const int64_t rows = (tokens + kKeys - 1) / kKeys * kKeys;
  return 3u * 2u * (size_t)rows * layout<DP>::ld;
}

template <int DP>
__global__ void __launch_bounds__(kHeadThreads, 2) /* two blocks an SM: 128 registers */
    mma_head_kernel(const __nv_bfloat16 *qkv, __nv_bfloat16 *context, int tokens, int heads,
                    int head_dim, float scale_log2, bool async) {
  using L = layout<DP>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int rows = (tokens + kKeys - 1) / kKeys * kKeys;
  __nv_bfloat16 *const qs = reinterpret_cast<__nv_bfloat16 *>(smem);
  __nv_bfloat16 *const ks = qs + rows * L::ld;
  __nv_bfloat16 *const vs = ks + rows * L::ld;

  const int image = blockIdx.x, head = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t inner = (int64_t)heads * head_dim, ld = 3 * inner;
  const __nv_bfloat16 *base = qkv + (int64_t)image * tokens * ld + (int64_t)head * head_dim;

  /* q, k and v of every row (zeros past the tokens), their pad columns 0. */
  if (head_dim < DP)
    for (int i = threadIdx.x; i < 3 * rows * DP; i += blockDim.x)
      if (i % DP >= head_dim) qs[i / DP * L::ld + i % DP] = __float2bfloat16_rn(0.f);
  if (async) {
    const int pieces = head_dim / 8;
    for (int i = threadIdx.x; i < 3 * rows * pieces; i += blockDim.x) {
      const int which = i / (rows * pieces), r = i / pieces % rows, d = i % pieces * 8;
      const __nv_bfloat16 *src = base + which * inner + (int64_t)r * ld + d;
      fused::copy16_async(qs + ((int64_t)which * rows + r) * L::ld + d, r < tokens ? src : base,
                          r < tokens);
    }
    fused::commit_async();
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  } else {
    for (int i = threadIdx.x; i < 3 * rows * head_dim; i += blockDim.x) {
      const int which = i / (rows * head_dim), r = i / head_dim % rows, d = i % head_dim;
      qs[((int64_t)which * rows + r) * L::ld + d] =
          r < tokens ? base[which * inner + (int64_t)r * ld + d] : __float2bfloat16_rn(0.f);
    }
  }
  __syncthreads();

  const int tiles = rows / kKeys;
  __nv_bfloat16 *out = context + (int64_t)image * tokens * inner + (int64_t)head * head_dim;
  for (int row = warp * 16; row < tokens; row += blockDim.x / 32 * 16) {
    uint32_t qf[DP / 16][4];
    float o[DP / 8][4], row_max[2], row_sum[2];
    start_rows<DP>(qf, o, row_max, row_sum, qs, row, lane);
    for (int t = 0; t < tiles; ++t)
      attend_tile<DP>(qf, o, row_max, row_sum, ks + t * kKeys * L::ld, vs + t * kKeys * L::ld,
                      t * kKeys, tokens, scale_log2, lane);
    store_rows<DP>(o, row_sum, out, inner, row, tokens, head_dim, lane);
  }
}

template <int DP>
int launch_head(htp_cuda_kernels *kernels, const __nv_bfloat16 *qkv, __nv_bfloat16 *context,
                int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim) {
  /* Allowed once, at the most any call may ask (kHeadTokens rows). */
  const unsigned bit = (DP / 32) << 8; /* beside the other kernels' bits */
  if (!(kernels->fused_allowed & bit)) {
    HTP_CUDA_CHECK(kernels, cudaFuncSetAttribute(mma_head_kernel<DP>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)head_bytes<DP>(kHeadTokens)));
    kernels->fused_allowed |= bit;
  }
  const float scale_log2 = 1.4426950408889634f / sqrtf((float)head_dim);
  const bool async = head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(qkv) % 16 == 0;
  /* As few warps as take the slices in the fewest turns (at most 8): at
   * 197 tokens 13 slices, 7 warps of two turns, not 8 with 3 idle for one. */
  const int slices = (int)((tokens + 15) / 16), turns = (slices + kHeadWarps - 1) / kHeadWarps;
  const int warps = (slices + turns - 1) / turns;
  mma_head_kernel<DP><<<dim3((unsigned)batch, (unsigned)heads), 32 * warps,
                        head_bytes<DP>(tokens), kernels->stream>>>(
      qkv, context, (int)tokens, (int)heads, (int)head_dim, scale_log2, async);
  HTP_CUDA_CHECK_LAUNCH(kernels);
  return 0;
}

/* Whether the whole-head kernel takes the shape: asked for, heads up to 64
 * wide, up to kHeadTokens tokens, a grid within CUDA's limits, and its
 * shared memory within the block's. */
bool takes_head(const htp_cuda_kernels *kernels, int64_t batch, int64_t tokens,
                int64_t head_dim) {
  /* tokens >= 1: the launch divides by its slice count (an empty call
   * reaches here from the table, which allows zero sizes). */
  if (kernels->attention_kernel != HTP_CUDA_ATTENTION_HEAD || head_dim > 64 || tokens < 1 ||
      tokens > kHeadTokens || batch > 0x7fffffff)
    return false;
  return head_bytes<64>(kHeadTokens) <= (size_t)kernels->shared_per_block;
}

/* Whether this path takes the shape: asked for (mma, or head for what the
 * whole-head kernel does not take), heads up to 128 wide, and its shared
 * memory within the block's (fused::takes checked the rest). */
bool takes(const htp_cuda_kernels *kernels, int64_t head_dim) {
  if (kernels->attention_kernel == HTP_CUDA_ATTENTION_WMMA || head_dim > 128)
    return false;
  const int64_t dp = fused::padded(head_dim);
  const size_t bytes = dp == 32 ? layout<32>::bytes : dp == 64 ? layout<64>::bytes
                                                               : layout<128>::bytes;
  return bytes <= (size_t)kernels->shared_per_block;
}

int run(htp_cuda_kernels *kernels, const __nv_bfloat16 *qkv, __nv_bfloat16 *context,
        int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim) {
  if (takes_head(kernels, batch, tokens, head_dim))
    return fused::padded(head_dim) == 32
               ? launch_head<32>(kernels, qkv, context, batch, tokens, heads, head_dim)
               : launch_head<64>(kernels, qkv, context, batch, tokens, heads, head_dim);
  switch (fused::padded(head_dim)) {
  case 32: return launch<32>(kernels, qkv, context, batch, tokens, heads, head_dim);
  case 64: return launch<64>(kernels, qkv, context, batch, tokens, heads, head_dim);
  default: return launch<128>(kernels, qkv, context, batch, tokens, heads, head_dim);
  }
}
} // namespace mma_path

template <typename T>
T *htp_cuda_attention_context(htp_cuda_kernels *kernels, const T *x, const T *wqkv,
                              const T *bqkv, float *scratch, int64_t batch, int64_t tokens,
                              int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const char *op = "attention";
  int64_t rows = batch * tokens, inner = num_heads * head_dim, qkv_stride = 3 * inner;
  if (htp_cuda_check_attention_sizes(kernels, op, batch, tokens, model_dim, num_heads,
                                     head_dim))
    return nullptr;
  float *qkv = scratch;
  float *context = qkv + rows * qkv_stride;
  float *scores = context + rows * inner;
  float scale = 1.0f / sqrtf((float)head_dim), one = 1.0f, zero = 0.0f;
  int t = (int)tokens, hd = (int)head_dim, ld = (int)qkv_stride;

  if constexpr (!std::is_same_v<T, float>) {
    if (fused::takes(kernels, batch, tokens, num_heads, head_dim)) {
      T *qkv_rounded = reinterpret_cast<T *>(qkv), *rounded = reinterpret_cast<T *>(context);
      const bool mma = mma_path::takes(kernels, head_dim);
      if (htp_cuda_linear(kernels, x, wqkv, bqkv, qkv_rounded, rows, model_dim, qkv_stride) ||
          (mma ? mma_path::run : fused::run)(kernels, qkv_rounded, rounded, batch, tokens,
                                             num_heads, head_dim))
        return nullptr;
      return rounded;
    }
  }
  if (htp_cuda_linear(kernels, x, wqkv, bqkv, qkv, rows, model_dim, qkv_stride))
    return nullptr;
  const int images = (int)batch;
  const int64_t image_qkv = tokens * qkv_stride, image_scores = tokens * tokens;
  for (int64_t h = 0; h < num_heads; ++h) {
    const float *head = qkv + h * head_dim;
    float *head_scores = scores + h * batch * image_scores;
    /* Row-major scores[t, t] = q·kᵀ is column-major scoresᵀ = k·qᵀ. */
    const cublasStatus_t status = cublasSgemmStridedBatched(
        kernels->blas, CUBLAS_OP_T, CUBLAS_OP_N, t, t, hd, &scale, head + inner, ld, image_qkv,
        head, ld, image_qkv, &zero, head_scores, t, image_scores, images);
    if (status != CUBLAS_STATUS_SUCCESS) {
      htp_cuda_fail(kernels, "cublasSgemmStridedBatched (q·kᵀ)", cublasGetStatusString(status));
      return nullptr;
    }
  }
  if (htp_cuda_softmax_rows(kernels, scores, num_heads * batch * tokens, tokens))
    return nullptr;
  for (int64_t h = 0; h < num_heads; ++h) {
    /* Row-major context[t, hd] = p·v is column-major contextᵀ = vᵀ·pᵀ. */
    const cublasStatus_t status = cublasSgemmStridedBatched(
        kernels->blas, CUBLAS_OP_N, CUBLAS_OP_N, hd, t, t, &one, qkv + 2 * inner + h * head_dim,
        ld, image_qkv, scores + h * batch * image_scores, t, image_scores, &zero,
        context + h * head_dim, (int)inner, tokens * inner, images);
    if (status != CUBLAS_STATUS_SUCCESS) {
      htp_cuda_fail(kernels, "cublasSgemmStridedBatched (p·v)", cublasGetStatusString(status));
      return nullptr;
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    return context;
  } else {
    T *rounded = reinterpret_cast<T *>(qkv);
    if (htp_cuda_convert_block(kernels, context, inner, rounded, inner, rows, inner))
      return nullptr;
    return rounded;
  }
}

template float *htp_cuda_attention_context<float>(htp_cuda_kernels *, const float *,
                                                  const float *, const float *, float *, int64_t,
                                                  int64_t, int64_t, int64_t, int64_t);
template htp_cuda_bf16 *htp_cuda_attention_context<htp_cuda_bf16>(
    htp_cuda_kernels *, const htp_cuda_bf16 *, const htp_cuda_bf16 *, const htp_cuda_bf16 *,
    float *, int64_t, int64_t, int64_t, int64_t, int64_t);

namespace {

/* The context, then its projection (+ r, a residual, where r is not NULL:
 * htp_cuda_linear decides where it is added). */
template <typename T>
int attention(htp_cuda_kernels *kernels, const T *x, const T *wqkv, const T *bqkv,
              const T *wproj, const T *bproj, const T *r, T *y, float *scratch, int64_t batch,
              int64_t tokens, int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const T *context = htp_cuda_attention_context(kernels, x, wqkv, bqkv, scratch, batch, tokens,
                                                model_dim, num_heads, head_dim);
  if (!context)
    return 1;
  return htp_cuda_linear(kernels, context, wproj, bproj, y, batch * tokens,
                         num_heads * head_dim, model_dim, r);
}

} // namespace

extern "C" int htp_cuda_attention_f32(htp_cuda_kernels *kernels, const float *x,
                                      const float *wqkv, const float *bqkv, const float *wproj,
                                      const float *bproj, float *y, float *scratch, int64_t batch,
                                      int64_t tokens, int64_t model_dim, int64_t num_heads,
                                      int64_t head_dim) {
  return attention(kernels, x, wqkv, bqkv, wproj, bproj, (const float *)nullptr, y, scratch,
                   batch, tokens, model_dim, num_heads, head_dim);
}

extern "C" int htp_cuda_attention_bf16(htp_cuda_kernels *kernels, const htp_bf16 *x,
                                       const htp_bf16 *wqkv, const htp_bf16 *bqkv,
                                       const htp_bf16 *wproj, const htp_bf16 *bproj, htp_bf16 *y,
                                       float *scratch, int64_t batch, int64_t tokens,
                                       int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  return attention(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(wqkv),
                   htp_cuda_bf16_ptr(bqkv), htp_cuda_bf16_ptr(wproj), htp_cuda_bf16_ptr(bproj),
                   (const htp_cuda_bf16 *)nullptr, htp_cuda_bf16_ptr(y), scratch, batch, tokens,
                   model_dim, num_heads, head_dim);
}

extern "C" int htp_cuda_attention_residual_f32(htp_cuda_kernels *kernels, const float *x,
                                               const float *wqkv, const float *bqkv,
                                               const float *wproj, const float *bproj,
                                               const float *r, float *y, float *scratch,
                                               int64_t batch, int64_t tokens, int64_t model_dim,
                                               int64_t num_heads, int64_t head_dim) {
  return attention(kernels, x, wqkv, bqkv, wproj, bproj, r, y, scratch, batch, tokens,
                   model_dim, num_heads, head_dim);
}

extern "C" int htp_cuda_attention_residual_bf16(
    htp_cuda_kernels *kernels, const htp_bf16 *x, const htp_bf16 *wqkv, const htp_bf16 *bqkv,
    const htp_bf16 *wproj, const htp_bf16 *bproj, const htp_bf16 *r, htp_bf16 *y,
    float *scratch, int64_t batch, int64_t tokens, int64_t model_dim, int64_t num_heads,
    int64_t head_dim) {
  return attention(kernels, htp_cuda_bf16_ptr(x), htp_cuda_bf16_ptr(wqkv),
                   htp_cuda_bf16_ptr(bqkv), htp_cuda_bf16_ptr(wproj), htp_cuda_bf16_ptr(bproj),
                   htp_cuda_bf16_ptr(r), htp_cuda_bf16_ptr(y), scratch, batch, tokens, model_dim,
                   num_heads, head_dim);
}
