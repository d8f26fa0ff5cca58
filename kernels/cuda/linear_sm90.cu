/*===- kernels/cuda/linear_sm90.cu - bf16 linears as CUTLASS Hopper GEMMs -===*
 *
 * HTP_CUDA_GEMM=cutlass (kernels_internal.h): a bf16 linear with a bias,
 * and one with its GELU or a residual, as one CUTLASS 3 GEMM for sm_90a
 * (TMA loads, wgmma, a warp-specialized persistent kernel) whose epilogue
 * adds the bias (and the residual, as its source C with beta 1) to the f32
 * accumulator, applies the exact (erf) GELU where asked and rounds once to
 * bf16. What it is for: the fused linear + GELU, which
 * through cuBLAS keeps an f32 pre-activation in memory to round once
 * (ViT-L/16 bf16, batch 64: 0.274 ms against 0.147 for the GEMM alone on
 * an H200, bench/RESULTS.md).
 *
 * The product in CUTLASS's terms: y[rows, out] (row-major) is the
 * column-major M x N = out x rows matrix D = A·B with A = w [out, in]
 * (row-major, K-major) and B(k, n) = x[n, k] (column-major, K-major): the
 * "TN" GEMM Hopper's kernels like best, the bias one per row of D.
 * Taken only on a compute capability 9.0 device (the sm_90a code runs
 * nowhere else), with in and out multiples of 8 and every tensor 16-byte
 * aligned (TMA's conditions); everything else returns 0 and the caller
 * runs the cuBLAS path. Written without a GPU; bench/RESULTS.md says
 * whether a GPU check has run it.
 *===----------------------------------------------------------------------===*/
#include "kernels/cuda/kernels_internal.h"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <limits.h>
#include <stdio.h>

namespace {

using namespace cute;
using Element = cutlass::bfloat16_t;
constexpr int kAlignment = 8; /* elements in 16 bytes */

/* One kernel per epilogue and tile width: D = act(acc + beta·C + bias),
 * f32 throughout, rounded to nearest even once. C is the residual with
 * beta 1 where there is one; else beta is 0 and CUTLASS does not read C
 * (is_source_needed).
 * Tiles of 128 rows of D (out features; two consumer warp groups of 64) by
 * kTileN columns (y's rows), no cluster: a cluster's SMs must lie in one
 * GPC, which an SM partition (green.c) does not promise. */
template <template <class> class Activation, int kTileN> struct sm90_gemm {
  using TileShape = Shape<_128, Int<kTileN>, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using Fusion = cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<Activation, Element, float,
                                                                    Element, Element, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, Element,
      cutlass::layout::ColumnMajor, kAlignment, Element, cutlass::layout::ColumnMajor,
      kAlignment, cutlass::epilogue::TmaWarpSpecializedCooperative, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor,
      kAlignment, Element, cutlass::layout::ColumnMajor, kAlignment, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop,
                                                      Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

/* Whether the device runs sm_90a code, and the SMs the object's kernels
 * may use (its partition's, else the device's), asked once per object:
 * kernels->sm90 is that count, or -1 where CUTLASS does not run. */
bool on_sm90(htp_cuda_kernels *kernels) {
  if (!kernels->sm90) {
    int major = 0, minor = 0, sms = 0;
    const bool known =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, kernels->device) ==
            cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, kernels->device) ==
            cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, kernels->device) ==
            cudaSuccess;
    if (kernels->partition)
      sms = htp_cuda_partition_sm_count(kernels->partition);
    kernels->sm90 = known && major == 9 && minor == 0 && sms > 0 ? sms : -1;
    if (kernels->sm90 < 0)
      fprintf(stderr, "htp cuda: HTP_CUDA_GEMM=cutlass: compute capability %d.%d (%d SMs) is "
                      "not 9.0; the linears stay on cuBLAS\n", major, minor, sms);
  }
  return kernels->sm90 > 0;
}

/* Whether 128 x 256 tiles beat 128 x 128 ones for an out x rows D on `sms`
 * persistent CTAs: the time counted in waves (a wave's tiles run side by
 * side, the last wave's empty slots idle), a wide tile taken as 1.8 narrow
 * ones (its larger product keeps the tensor cores a little busier per byte
 * moved: a guess, which the check's kernel benchmark is there to test).
 * ViT-L/16 at batch 64 on 132 SMs: qkv and fc1 wide, the 1024-wide
 * projections narrow (400 wide tiles are 3.03 waves, 792 narrow ones 6.0). */
bool wide_tiles(int64_t out_features, int64_t rows, int sms) {
  const auto waves = [&](int64_t tile_n) {
    const int64_t tiles = (out_features + 127) / 128 * ((rows + tile_n - 1) / tile_n);
    return (tiles + sms - 1) / sms;
  };
  return 1.8 * (double)waves(256) <= (double)waves(128);
}

/* Each shape's outcome is said once on stderr (the switch is an
 * experiment: the check's log shows what ran): its tile, or that CUTLASS
 * declined it (done 0) and cuBLAS ran it. epilogue: 0 the bias, 1 and the
 * GELU, 2 and a residual. */
void note_outcome(htp_cuda_kernels *kernels, int64_t rows, int64_t in_features,
                  int64_t out_features, int epilogue, bool wide, int done) {
  for (int i = 0; i < kernels->sm90_noted_count; ++i) {
    const auto &noted = kernels->sm90_noted[i];
    if (noted.rows == rows && noted.in_features == in_features &&
        noted.out_features == out_features && noted.epilogue == epilogue)
      return;
  }
  if (kernels->sm90_noted_count < (int)(sizeof kernels->sm90_noted / sizeof *kernels->sm90_noted))
    kernels->sm90_noted[kernels->sm90_noted_count++] = {rows, in_features, out_features, epilogue};
  char what[64];
  if (done)
    snprintf(what, sizeof what, "CUTLASS sm90, 128 x %d tiles", wide ? 256 : 128);
  else
    snprintf(what, sizeof what, "CUTLASS declined it (can_implement, workspace): cuBLAS");
  static const char *const kEpilogues[] = {"", " + GELU", " + residual"};
  fprintf(stderr, "htp cuda: linear%s bf16 [%lld x %lld -> %lld]: %s\n", kEpilogues[epilogue],
          (long long)rows, (long long)in_features, (long long)out_features, what);
}

template <template <class> class Activation, int kTileN>
int run(htp_cuda_kernels *kernels, const htp_cuda_bf16 *x, const htp_cuda_bf16 *w,
        const htp_cuda_bf16 *b, const htp_cuda_bf16 *r, htp_cuda_bf16 *y, int64_t ld_y,
        int64_t rows, int64_t in_features, int64_t out_features, int sms) {
  using Gemm = typename sm90_gemm<Activation, kTileN>::Gemm;
  using Kernel = typename Gemm::GemmKernel;
  const int m = (int)out_features, n = (int)rows, k = (int)in_features;
  const auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{},
                                                         make_shape(m, k, 1));
  const auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{},
                                                         make_shape(n, k, 1));
  /* y's rows (D's columns) ld_y elements apart; r's (C's) out_features
   * apart, packed. Without r, C points at y, unread. */
  const auto stride_c = cutlass::make_cute_packed_stride(typename Kernel::StrideC{},
                                                         make_shape(m, n, 1));
  auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{},
                                                   make_shape(m, n, 1));
  get<1>(stride_d) = ld_y;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {m, n, k, 1},
      {reinterpret_cast<const Element *>(w), stride_a, reinterpret_cast<const Element *>(x),
       stride_b},
      {{},
       reinterpret_cast<const Element *>(r ? r : y), stride_c, reinterpret_cast<Element *>(y),
       stride_d}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = r ? 1.0f : 0.0f;
  args.epilogue.thread.bias_ptr = reinterpret_cast<const Element *>(b);
  args.hw_info.device_id = kernels->device;
  args.hw_info.sm_count = sms;

  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess)
    return 0; /* the cuBLAS path takes it */
  const size_t workspace = Gemm::get_workspace_size(args);
  if (workspace > (size_t)HTP_CUDA_LT_WORKSPACE_BYTES)
    return 0;
  if (htp_cuda_buffer_reserve(kernels, &kernels->lt_workspace, &kernels->lt_workspace_bytes,
                              HTP_CUDA_LT_WORKSPACE_BYTES))
    return -1;
  cutlass::Status status = gemm.initialize(args, kernels->lt_workspace, kernels->stream);
  if (status == cutlass::Status::kSuccess)
    status = gemm.run(kernels->stream);
  /* CUTLASS has read (and cleared) the launch's CUDA error: its status says it. */
  if (status != cutlass::Status::kSuccess)
    return htp_cuda_fail(kernels, "linear (CUTLASS sm90)", cutlassGetStatusString(status)), -1;
  return 1;
}

} // namespace

int htp_cuda_sm90_linear(htp_cuda_kernels *kernels, const htp_cuda_bf16 *x,
                         const htp_cuda_bf16 *w, const htp_cuda_bf16 *b,
                         const htp_cuda_bf16 *r, htp_cuda_bf16 *y, int64_t ld_y, int64_t rows,
                         int64_t in_features, int64_t out_features, int gelu) {
  const uintptr_t bits =
      (uintptr_t)x | (uintptr_t)w | (uintptr_t)b | (uintptr_t)r | (uintptr_t)y;
  /* The callers refused sizes past int (htp_cuda_check_gemm_sizes). A
   * residual with a GELU would be added before it: no caller asks. */
  if (kernels->gemm_kernel != HTP_CUDA_GEMM_CUTLASS || !b || (r && gelu) || rows < 1 ||
      in_features < 8 || out_features < 8 || in_features % kAlignment ||
      out_features % kAlignment || ld_y < out_features || ld_y % kAlignment || bits % 16 ||
      !on_sm90(kernels))
    return 0;
  const int sms = kernels->sm90;
  const bool wide = wide_tiles(out_features, rows, sms);
#define HTP_SM90_RUN(act, n)                                                                \
  run<cutlass::epilogue::thread::act, n>(kernels, x, w, b, r, y, ld_y, rows, in_features, \
                                         out_features, sms)
  const int done = gelu ? (wide ? HTP_SM90_RUN(GELU, 256) : HTP_SM90_RUN(GELU, 128))
                        : (wide ? HTP_SM90_RUN(Identity, 256) : HTP_SM90_RUN(Identity, 128));
#undef HTP_SM90_RUN
  if (done >= 0)
    note_outcome(kernels, rows, in_features, out_features, gelu ? 1 : r ? 2 : 0, wide, done);
  return done;
}
