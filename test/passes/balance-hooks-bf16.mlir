// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=2 --htp-balance-hooks -verify-diagnostics | FileCheck %s
// RUN: %htp-opt %s -split-input-file --htp-pipeline=tp=2 2>&1 | FileCheck %s --check-prefix=PIPELINE
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=2 --htp-balance-hooks=mlp-unit-width=5 2>&1 | FileCheck %s --check-prefix=WIDTH

// A split bf16 block gets its hooks as an f32 one does: the attention gets
// its pair and each MLP chain becomes an htp.mlp; the pipeline lowers them
// to the bf16 hooks (htp_rt_attention_bf16, htp_rt_mlp_bf16) and the
// signature has the "balance" record. No warning.
// CHECK-LABEL: func.func @two_layers(
// CHECK: htp.attention {{.*}} {num_heads = 2 : i64, pair = 0 : i64} :
// CHECK: htp.mlp {{.*}} {pair = 1 : i64, unit_width = 2 : i64}
// CHECK: htp.attention {{.*}} {num_heads = 2 : i64, pair = 2 : i64} :
// CHECK: htp.mlp {{.*}} {pair = 3 : i64, unit_width = 2 : i64}
// PIPELINE-NOT: warning
// PIPELINE-LABEL: llvm.func @htp.entry.two_layers(
// PIPELINE: llvm.call @htp_rt_attention_bf16(
// PIPELINE: llvm.call @htp_allreduce_sum_bias_residual_bf16(
// PIPELINE: llvm.call @htp_rt_mlp_bf16(
// PIPELINE-NOT: _f32(
// What the CUDA kernels may keep of their own on a rank (kernel_memory_bytes),
// counted by hand: a hook's compact shard may hold all 4 heads of the layer
// (its 2 and 2 migrated in), so the listed-heads kernel's buffer is 4 heads'
// attention scratch (qkv 6 x 36 + context 6 x 12 + scores 2 images x 4 heads
// x 9 = 360 floats: 1440 bytes, to a 256-byte boundary 1536) and their
// gathered q, k, v rows and biases (36 x 13 = 468 bf16: 936 bytes); the
// largest f32 sum is the MLP's 40 hidden columns of 6 rows (960 bytes, over
// the qkv's 6 x 36: 864); two ranks' pointers staged (32); cuBLASLt's 4 MiB.
// 1536 + 936 + 960 + 32 + 4194304 = 4197768.
// PIPELINE: \22kernel_memory_bytes\22:4197768,
// What the balancer may keep on a device (balancer_memory_bytes), by hand:
// a head's weights are 9 rows of 12, 9 biases, 12 x 3 columns (153
// values), an MLP unit's 2 x 12 + 2 + 12 x 2 (50); a layer has 4 heads
// (612 values: 1224 bf16 bytes) and 20 MLP units (1000: 2000 bytes). Each
// pair's migrated-in units: 2 x (1224 + 2000) = 6448; shared: the compact
// weights at the larger pair (2000), the compact activations 6 rows x 20
// units x 2 wide (480 bytes), one unit cut out (306, in whole floats
// 308). 6448 + 2000 + 480 + 308 = 9236.
// PIPELINE-SAME: \22balancer_memory_bytes\22:9236,
// PIPELINE-SAME: \22tp\22:2,\22balance\22:{\22layers\22:2,
// An explicit unit width applies to it too.
// WIDTH-NOT: warning
// WIDTH-LABEL: func.func @two_layers(
// WIDTH: htp.mlp {{.*}}unit_width = 5 : i64
// WIDTH-LABEL: func.func @f32_layer(
// WIDTH: htp.mlp {{.*}}unit_width = 5 : i64
func.func @two_layers(%x: tensor<2x3x12xbf16>,
    %wqkv0: tensor<36x12xbf16>, %bqkv0: tensor<36xbf16>, %wp0: tensor<12x12xbf16>, %bp0: tensor<12xbf16>,
    %w10: tensor<40x12xbf16>, %b10: tensor<40xbf16>, %w20: tensor<12x40xbf16>, %b20: tensor<12xbf16>,
    %wqkv1: tensor<36x12xbf16>, %bqkv1: tensor<36xbf16>, %wp1: tensor<12x12xbf16>, %bp1: tensor<12xbf16>,
    %w11: tensor<40x12xbf16>, %b11: tensor<40xbf16>, %w21: tensor<12x40xbf16>, %b21: tensor<12xbf16>)
    -> tensor<2x3x12xbf16> {
  %a0 = htp.attention %x, %wqkv0, %bqkv0, %wp0, %bp0 {num_heads = 4 : i64} : (tensor<2x3x12xbf16>, tensor<36x12xbf16>, tensor<36xbf16>, tensor<12x12xbf16>, tensor<12xbf16>) -> tensor<2x3x12xbf16>
  %r0 = htp.add %x, %a0 : tensor<2x3x12xbf16>
  %h0 = htp.linear %r0, %w10, %b10 : (tensor<2x3x12xbf16>, tensor<40x12xbf16>, tensor<40xbf16>) -> tensor<2x3x40xbf16>
  %g0 = htp.gelu %h0 approximate tanh : tensor<2x3x40xbf16>
  %m0 = htp.linear %g0, %w20, %b20 : (tensor<2x3x40xbf16>, tensor<12x40xbf16>, tensor<12xbf16>) -> tensor<2x3x12xbf16>
  %o0 = htp.add %r0, %m0 : tensor<2x3x12xbf16>
  %a1 = htp.attention %o0, %wqkv1, %bqkv1, %wp1, %bp1 {num_heads = 4 : i64} : (tensor<2x3x12xbf16>, tensor<36x12xbf16>, tensor<36xbf16>, tensor<12x12xbf16>, tensor<12xbf16>) -> tensor<2x3x12xbf16>
  %r1 = htp.add %o0, %a1 : tensor<2x3x12xbf16>
  %h1 = htp.linear %r1, %w11, %b11 : (tensor<2x3x12xbf16>, tensor<40x12xbf16>, tensor<40xbf16>) -> tensor<2x3x40xbf16>
  %g1 = htp.gelu %h1 approximate tanh : tensor<2x3x40xbf16>
  %m1 = htp.linear %g1, %w21, %b21 : (tensor<2x3x40xbf16>, tensor<12x40xbf16>, tensor<12xbf16>) -> tensor<2x3x12xbf16>
  %o1 = htp.add %r1, %m1 : tensor<2x3x12xbf16>
  return %o1 : tensor<2x3x12xbf16>
}

// -----

// An f32 function beside it gets the f32 hooks.
// CHECK-LABEL: func.func @f32_layer(
// CHECK: htp.attention {{.*}} {num_heads = 2 : i64, pair = 0 : i64}
// CHECK: htp.mlp
// PIPELINE-LABEL: llvm.func @htp.entry.f32_layer(
// PIPELINE: llvm.call @htp_rt_attention_f32(
// PIPELINE: llvm.call @htp_rt_mlp_f32(
// In f32 the kernels keep no sums, and the gathered weights are 468 floats:
// 1536 + 1872 + 32 + 4194304.
// PIPELINE: \22kernel_memory_bytes\22:4197744,
// The balancer's in f32, one layer: 2448 + 4000 packed, compact weights
// 4000, activations 6 x 20 x 2 x 4 = 960, a head 612: 12020.
// PIPELINE-SAME: \22balancer_memory_bytes\22:12020,
func.func @f32_layer(%x: tensor<2x3x12xf32>,
    %wqkv0: tensor<36x12xf32>, %bqkv0: tensor<36xf32>, %wp0: tensor<12x12xf32>, %bp0: tensor<12xf32>,
    %w10: tensor<40x12xf32>, %b10: tensor<40xf32>, %w20: tensor<12x40xf32>, %b20: tensor<12xf32>)
    -> tensor<2x3x12xf32> {
  %a0 = htp.attention %x, %wqkv0, %bqkv0, %wp0, %bp0 {num_heads = 4 : i64} : (tensor<2x3x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  %r0 = htp.add %x, %a0 : tensor<2x3x12xf32>
  %h0 = htp.linear %r0, %w10, %b10 : (tensor<2x3x12xf32>, tensor<40x12xf32>, tensor<40xf32>) -> tensor<2x3x40xf32>
  %g0 = htp.gelu %h0 approximate tanh : tensor<2x3x40xf32>
  %m0 = htp.linear %g0, %w20, %b20 : (tensor<2x3x40xf32>, tensor<12x40xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  %o0 = htp.add %r0, %m0 : tensor<2x3x12xf32>
  return %o0 : tensor<2x3x12xf32>
}
