// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=2 --htp-balance-hooks | FileCheck %s
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=2 --htp-balance-hooks=mlp-unit-width=5 | FileCheck %s --check-prefix=WIDTH
// RUN: %htp-opt %s -split-input-file --htp-pipeline=tp=2 | FileCheck %s --check-prefix=LOWER
// RUN: %htp-opt %s -split-input-file --htp-pipeline="tp=2 hooks=false" | FileCheck %s --check-prefix=NOHOOKS

// Two layers: attentions get pairs 0 and 2; each MLP chain becomes one
// htp.mlp (pairs 1 and 3) whose units are 2 neurons wide (the smallest
// divisor of the rank's 20 hidden neurons that is >= min(64, 20 / 8) = 2);
// the all-reduce and the bias stay after it.
// CHECK-LABEL: func.func @two_layers(
// CHECK: htp.attention {{.*}} {num_heads = 2 : i64, pair = 0 : i64}
// CHECK-NEXT: htp.all_reduce
// CHECK: %[[P1:.+]] = htp.mlp %{{.*}}, %{{.*}}, %{{.*}} fc1_bias(%{{.*}}) approximate tanh {pair = 1 : i64, unit_width = 2 : i64} : (tensor<2x3x12xf32>, tensor<20x12xf32>, tensor<12x20xf32>, tensor<20xf32>) -> tensor<2x3x12xf32>
// CHECK-NEXT: %[[S1:.+]] = htp.all_reduce %[[P1]]
// CHECK-NEXT: htp.bias_add %[[S1]]
// CHECK: htp.attention {{.*}} {num_heads = 2 : i64, pair = 2 : i64}
// CHECK: htp.mlp {{.*}} approximate tanh {pair = 3 : i64, unit_width = 2 : i64}
// CHECK-NOT: htp.linear
// CHECK-NOT: htp.gelu
// WIDTH: htp.mlp {{.*}} unit_width = 5 : i64
// The signature's balance record: 2 layers of width 12, 2 heads of 3 channels,
// 10 MLP units of 2 neurons per rank, with each unit's FLOPs.
// LOWER-LABEL: llvm.func @htp.entry.two_layers(
// LOWER: llvm.call @htp_rt_attention_f32(%arg0,
// LOWER: llvm.call @htp_rt_mlp_f32(%arg0,
// LOWER: @htp.sig.two_layers("{{.*}}\22tp\22:2,\22balance\22:{\22layers\22:2,\22model_dim\22:12,\22heads\22:2,\22head_dim\22:3,\22head_flops\22:1944,\22mlp_units\22:10,\22mlp_unit_width\22:2,\22mlp_unit_flops\22:576}}
// NOHOOKS-NOT: htp_rt_
// NOHOOKS: \22tp\22:2}
func.func @two_layers(%x: tensor<2x3x12xf32>,
    %wqkv0: tensor<36x12xf32>, %bqkv0: tensor<36xf32>, %wp0: tensor<12x12xf32>, %bp0: tensor<12xf32>,
    %w10: tensor<40x12xf32>, %b10: tensor<40xf32>, %w20: tensor<12x40xf32>, %b20: tensor<12xf32>,
    %wqkv1: tensor<36x12xf32>, %bqkv1: tensor<36xf32>, %wp1: tensor<12x12xf32>, %bp1: tensor<12xf32>,
    %w11: tensor<40x12xf32>, %b11: tensor<40xf32>, %w21: tensor<12x40xf32>, %b21: tensor<12xf32>) -> tensor<2x3x12xf32> {
  %a0 = htp.attention %x, %wqkv0, %bqkv0, %wp0, %bp0 {num_heads = 4 : i64} : (tensor<2x3x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  %h0 = htp.linear %a0, %w10, %b10 : (tensor<2x3x12xf32>, tensor<40x12xf32>, tensor<40xf32>) -> tensor<2x3x40xf32>
  %g0 = htp.gelu %h0 approximate tanh : tensor<2x3x40xf32>
  %m0 = htp.linear %g0, %w20, %b20 : (tensor<2x3x40xf32>, tensor<12x40xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  %a1 = htp.attention %m0, %wqkv1, %bqkv1, %wp1, %bp1 {num_heads = 4 : i64} : (tensor<2x3x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  %h1 = htp.linear %a1, %w11, %b11 : (tensor<2x3x12xf32>, tensor<40x12xf32>, tensor<40xf32>) -> tensor<2x3x40xf32>
  %g1 = htp.gelu %h1 approximate tanh : tensor<2x3x40xf32>
  %m1 = htp.linear %g1, %w21, %b21 : (tensor<2x3x40xf32>, tensor<12x40xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  return %m1 : tensor<2x3x12xf32>
}

// -----

// fc1 with its GELU fused (`gelu tanh`, as --htp-fuse-linear-gelu writes it)
// is an MLP pair too: its htp.mlp takes the fused GELU's form (the pass
// found no pair here and refused the block).
// CHECK-LABEL: func.func @fused_gelu
// CHECK: htp.attention {{.*}} {num_heads = 2 : i64, pair = 0 : i64}
// CHECK: htp.mlp {{.*}} approximate tanh {pair = 1 : i64, unit_width = 2 : i64}
// CHECK-NOT: htp.linear
// CHECK-NOT: htp.gelu
func.func @fused_gelu(%x: tensor<2x3x12xf32>,
    %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %bp: tensor<12xf32>,
    %w1: tensor<40x12xf32>, %b1: tensor<40xf32>, %w2: tensor<12x40xf32>, %b2: tensor<12xf32>) -> tensor<2x3x12xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 4 : i64} : (tensor<2x3x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  %h = htp.linear %a, %w1, %b1 gelu tanh : (tensor<2x3x12xf32>, tensor<40x12xf32>, tensor<40xf32>) -> tensor<2x3x40xf32>
  %m = htp.linear %h, %w2, %b2 : (tensor<2x3x40xf32>, tensor<12x40xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  return %m : tensor<2x3x12xf32>
}
