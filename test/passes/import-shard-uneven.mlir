// RUN: %htp-opt %s --htp-import-shard=mlp-unit-width=2 | FileCheck %s
// The same function without its annotations, split by shares by hand:
// RUN: sed -e '/shard\./d' -e 's/_sharded//g' %s | %htp-opt --htp-tensor-parallel="tp=4 shares=3,3,1,1 mlp-unit-width=2" | FileCheck %s
// RUN: %htp-opt %s --htp-import-shard=mlp-unit-width=2 -o %t.import
// RUN: sed -e '/shard\./d' -e 's/_sharded//g' %s | %htp-opt --htp-tensor-parallel="tp=4 shares=3,3,1,1 mlp-unit-width=2" -o %t.split
// RUN: diff %t.import %t.split

// Uneven shards (sharded_dims_offsets) in whole units: 8 heads of 2 columns
// go 3, 3, 1, 1 (proj columns 0, 6, 12, 14, 16), 16 MLP units of 2 neurons
// 6, 6, 2, 2 (fc1 rows and fc2 columns 0, 12, 24, 28, 32). The shares are
// the blocks of the longest annotated dim (fc1's 32 rows: 12:12:4:4, so
// 3,3,1,1), and the proj's blocks are what the split apportions of them.
// Every rank has room for the most units any rank owns (3 heads, 6 units).
// CHECK-NOT: shard.
// CHECK-LABEL: func.func @block(
// CHECK-SAME: tensor<18x16xf32> {htp.param = "blocks.0.attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 4, layout = qkv, units = [3, 3, 1, 1], unit = 2>}
// CHECK-SAME: tensor<18xf32> {htp.param = "blocks.0.attn.qkv.bias", htp.shard = #htp.shard<dim = 0, parts = 4, layout = qkv, units = [3, 3, 1, 1], unit = 2>}
// CHECK-SAME: tensor<16x6xf32> {htp.param = "blocks.0.attn.proj.weight", htp.shard = #htp.shard<dim = 1, parts = 4, layout = blocks, units = [3, 3, 1, 1], unit = 2>}
// CHECK-SAME: tensor<16xf32> {htp.param = "blocks.0.attn.proj.bias"}
// CHECK-SAME: tensor<12x16xf32> {htp.param = "blocks.0.mlp.fc1.weight", htp.shard = #htp.shard<dim = 0, parts = 4, layout = blocks, units = [6, 6, 2, 2], unit = 2>}
// CHECK-SAME: tensor<12xf32> {htp.param = "blocks.0.mlp.fc1.bias", htp.shard = #htp.shard<dim = 0, parts = 4, layout = blocks, units = [6, 6, 2, 2], unit = 2>}
// CHECK-SAME: tensor<16x12xf32> {htp.param = "blocks.0.mlp.fc2.weight", htp.shard = #htp.shard<dim = 1, parts = 4, layout = blocks, units = [6, 6, 2, 2], unit = 2>}
// CHECK-SAME: tensor<16xf32> {htp.param = "blocks.0.mlp.fc2.bias"})
// CHECK-SAME: attributes {htp.tp = 4 : i64}
// CHECK-NEXT: htp.attention {{.*}} {num_heads = 3 : i64}
// CHECK-NEXT: htp.all_reduce
// CHECK-NEXT: htp.bias_add
// CHECK-NEXT: htp.linear {{.*}} -> tensor<2x5x12xf32>
// CHECK-NEXT: htp.gelu {{.*}} : tensor<2x5x12xf32>
// CHECK-NEXT: htp.linear {{.*}} -> tensor<2x5x16xf32>
// CHECK-NEXT: htp.all_reduce
// CHECK-NEXT: htp.bias_add
// CHECK-NEXT: return
shard.grid @grid0(shape = 4)
func.func @block(%x: tensor<2x5x16xf32>,
    %wqkv: tensor<48x16xf32> {htp.param = "blocks.0.attn.qkv.weight"},
    %bqkv: tensor<48xf32> {htp.param = "blocks.0.attn.qkv.bias"},
    %wproj: tensor<16x16xf32> {htp.param = "blocks.0.attn.proj.weight"},
    %bproj: tensor<16xf32> {htp.param = "blocks.0.attn.proj.bias"},
    %w1: tensor<32x16xf32> {htp.param = "blocks.0.mlp.fc1.weight"},
    %b1: tensor<32xf32> {htp.param = "blocks.0.mlp.fc1.bias"},
    %w2: tensor<16x32xf32> {htp.param = "blocks.0.mlp.fc2.weight"},
    %b2: tensor<16xf32> {htp.param = "blocks.0.mlp.fc2.bias"}) -> tensor<2x5x16xf32> {
  %heads = shard.sharding @grid0 split_axes = [[], [0]] sharded_dims_offsets = [0, 6, 12, 14, 16] : !shard.sharding
  %rows = shard.sharding @grid0 split_axes = [[0]] sharded_dims_offsets = [0, 12, 24, 28, 32] : !shard.sharding
  %cols = shard.sharding @grid0 split_axes = [[], [0]] sharded_dims_offsets = [0, 12, 24, 28, 32] : !shard.sharding
  %wproj_sharded = shard.shard %wproj to %heads annotate_for_users : tensor<16x16xf32>
  %w1_sharded = shard.shard %w1 to %rows annotate_for_users : tensor<32x16xf32>
  %b1_sharded = shard.shard %b1 to %rows annotate_for_users : tensor<32xf32>
  %w2_sharded = shard.shard %w2 to %cols annotate_for_users : tensor<16x32xf32>
  %a = htp.attention %x, %wqkv, %bqkv, %wproj_sharded, %bproj {num_heads = 8 : i64} : (tensor<2x5x16xf32>, tensor<48x16xf32>, tensor<48xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %h = htp.linear %a, %w1_sharded, %b1_sharded : (tensor<2x5x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<2x5x32xf32>
  %g = htp.gelu %h : tensor<2x5x32xf32>
  %y = htp.linear %g, %w2_sharded, %b2 : (tensor<2x5x32xf32>, tensor<16x32xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  return %y : tensor<2x5x16xf32>
}
