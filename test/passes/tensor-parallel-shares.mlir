// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=3 shares=2,1,1 mlp-unit-width=2" | FileCheck %s
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=3 shares=1,1,1 mlp-unit-width=2" | FileCheck %s --check-prefix=EQUAL

// Uneven shards (shares 2:1:1): 4 heads of 3 channels go 2, 1, 1; every
// rank has room for 2 (the most any rank owns), so the local op has 2 heads
// and its weights 2 heads' rows (qkv: per q, k and v block) and columns.
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: tensor<18x12xf32> {htp.param = "blocks.0.attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 3, layout = qkv, units = [2, 1, 1], unit = 3>}
// CHECK-SAME: tensor<18xf32> {htp.param = "blocks.0.attn.qkv.bias", htp.shard = #htp.shard<dim = 0, parts = 3, layout = qkv, units = [2, 1, 1], unit = 3>}
// CHECK-SAME: tensor<12x6xf32> {htp.param = "blocks.0.attn.proj.weight", htp.shard = #htp.shard<dim = 1, parts = 3, layout = blocks, units = [2, 1, 1], unit = 3>}
// CHECK-SAME: tensor<12xf32> {htp.param = "blocks.0.attn.proj.bias"})
// CHECK-SAME: attributes {htp.tp = 3 : i64}
// CHECK: htp.attention {{.*}} {num_heads = 2 : i64}
// CHECK: htp.all_reduce
// Equal shares of 4 heads over 3 ranks, which the even split refuses: 2, 1, 1.
// EQUAL-LABEL: func.func @attention(
// EQUAL-SAME: tensor<18x12xf32> {htp.param = "blocks.0.attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 3, layout = qkv, units = [2, 1, 1], unit = 3>}
func.func @attention(%x: tensor<2x5x12xf32>,
    %wqkv: tensor<36x12xf32> {htp.param = "blocks.0.attn.qkv.weight"},
    %bqkv: tensor<36xf32> {htp.param = "blocks.0.attn.qkv.bias"},
    %wproj: tensor<12x12xf32> {htp.param = "blocks.0.attn.proj.weight"},
    %bproj: tensor<12xf32> {htp.param = "blocks.0.attn.proj.bias"}) -> tensor<2x5x12xf32> {
  %y = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 4 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

// 20 neurons in units of 2: 10 units, 5, 3, 2 by largest remainder (2.5
// and 2.5 left over: the tie goes to the lower rank); room for 5 units.
// CHECK-LABEL: func.func @mlp(
// CHECK-SAME: tensor<10x8xf32> {htp.shard = #htp.shard<dim = 0, parts = 3, layout = blocks, units = [5, 3, 2], unit = 2>}
// CHECK-SAME: tensor<10xf32> {htp.shard = #htp.shard<dim = 0, parts = 3, layout = blocks, units = [5, 3, 2], unit = 2>}
// CHECK-SAME: tensor<8x10xf32> {htp.shard = #htp.shard<dim = 1, parts = 3, layout = blocks, units = [5, 3, 2], unit = 2>}
// CHECK: htp.gelu {{.*}} : tensor<3x10xf32>
func.func @mlp(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %b1: tensor<20xf32>,
               %w2: tensor<8x20xf32>, %b2: tensor<8xf32>) -> tensor<3x8xf32> {
  %h = htp.linear %x, %w1, %b1 : (tensor<3x8xf32>, tensor<20x8xf32>, tensor<20xf32>) -> tensor<3x20xf32>
  %g = htp.gelu %h : tensor<3x20xf32>
  %y = htp.linear %g, %w2, %b2 : (tensor<3x20xf32>, tensor<8x20xf32>, tensor<8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
