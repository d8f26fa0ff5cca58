// RUN: %htp-opt %s --htp-import-shard | FileCheck %s
// The same function without its annotations (the shard ops' lines dropped,
// the annotated names read as the arguments), split by hand:
// RUN: sed -e '/shard\./d' -e 's/_sharded//g' %s | %htp-opt --htp-tensor-parallel=tp=4 | FileCheck %s
// RUN: %htp-opt %s --htp-import-shard -o %t.import
// RUN: sed -e '/shard\./d' -e 's/_sharded//g' %s | %htp-opt --htp-tensor-parallel=tp=4 -o %t.split
// RUN: diff %t.import %t.split

// Even shardings on a grid of 4 are --htp-tensor-parallel=tp=4: the proj
// weight's columns decide the heads (qkv follows, unannotated), the MLP's
// fc1 rows and bias and fc2 columns its neurons. Upstream's two forms of
// annotation are both read: on the argument's definition (fc1 weight, then
// re-annotated for its user) and for the users (the rest). Replicated
// statements (x, the row biases) are true of the split and dropped with the
// rest; the grid goes once nothing names it.
// CHECK-NOT: shard.
// CHECK-LABEL: func.func @block(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x5x16xf32>
// CHECK-SAME: %[[WQKV:[^:]*]]: tensor<12x16xf32> {htp.param = "blocks.0.attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 4, layout = qkv>}
// CHECK-SAME: %[[BQKV:[^:]*]]: tensor<12xf32> {htp.param = "blocks.0.attn.qkv.bias", htp.shard = #htp.shard<dim = 0, parts = 4, layout = qkv>}
// CHECK-SAME: %[[WPROJ:[^:]*]]: tensor<16x4xf32> {htp.param = "blocks.0.attn.proj.weight", htp.shard = #htp.shard<dim = 1, parts = 4, layout = blocks>}
// CHECK-SAME: %[[BPROJ:[^:]*]]: tensor<16xf32> {htp.param = "blocks.0.attn.proj.bias"}
// CHECK-SAME: %[[W1:[^:]*]]: tensor<8x16xf32> {htp.param = "blocks.0.mlp.fc1.weight", htp.shard = #htp.shard<dim = 0, parts = 4, layout = blocks>}
// CHECK-SAME: %[[B1:[^:]*]]: tensor<8xf32> {htp.param = "blocks.0.mlp.fc1.bias", htp.shard = #htp.shard<dim = 0, parts = 4, layout = blocks>}
// CHECK-SAME: %[[W2:[^:]*]]: tensor<16x8xf32> {htp.param = "blocks.0.mlp.fc2.weight", htp.shard = #htp.shard<dim = 1, parts = 4, layout = blocks>}
// CHECK-SAME: %[[B2:[^:]*]]: tensor<16xf32> {htp.param = "blocks.0.mlp.fc2.bias"})
// CHECK-SAME: attributes {htp.tp = 4 : i64}
// CHECK-NEXT: %[[A:.+]] = htp.attention %[[X]], %[[WQKV]], %[[BQKV]], %[[WPROJ]] {num_heads = 1 : i64}
// CHECK-NEXT: %[[AS:.+]] = htp.all_reduce %[[A]]
// CHECK-NEXT: %[[AB:.+]] = htp.bias_add %[[AS]], %[[BPROJ]]
// CHECK-NEXT: %[[H:.+]] = htp.linear %[[AB]], %[[W1]], %[[B1]] : (tensor<2x5x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
// CHECK-NEXT: %[[G:.+]] = htp.gelu %[[H]] : tensor<2x5x8xf32>
// CHECK-NEXT: %[[P:.+]] = htp.linear %[[G]], %[[W2]] : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
// CHECK-NEXT: %[[S:.+]] = htp.all_reduce %[[P]]
// CHECK-NEXT: %[[Y:.+]] = htp.bias_add %[[S]], %[[B2]]
// CHECK-NEXT: return %[[Y]]
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
  %whole = shard.sharding @grid0 split_axes = [[]] : !shard.sharding
  %rows = shard.sharding @grid0 split_axes = [[0]] : !shard.sharding
  %cols = shard.sharding @grid0 split_axes = [[], [0]] : !shard.sharding
  %x_sharded = shard.shard %x to %whole annotate_for_users : tensor<2x5x16xf32>
  %wproj_sharded = shard.shard %wproj to %cols annotate_for_users : tensor<16x16xf32>
  %bproj_sharded = shard.shard %bproj to %whole annotate_for_users : tensor<16xf32>
  %w1_defined = shard.shard %w1 to %rows : tensor<32x16xf32>
  %w1_sharded = shard.shard %w1_defined to %rows annotate_for_users : tensor<32x16xf32>
  %b1_sharded = shard.shard %b1 to %rows annotate_for_users : tensor<32xf32>
  %w2_sharded = shard.shard %w2 to %cols annotate_for_users : tensor<16x32xf32>
  %a = htp.attention %x_sharded, %wqkv, %bqkv, %wproj_sharded, %bproj_sharded {num_heads = 4 : i64} : (tensor<2x5x16xf32>, tensor<48x16xf32>, tensor<48xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %h = htp.linear %a, %w1_sharded, %b1_sharded : (tensor<2x5x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<2x5x32xf32>
  %g = htp.gelu %h : tensor<2x5x32xf32>
  %y = htp.linear %g, %w2_sharded, %b2 : (tensor<2x5x32xf32>, tensor<16x32xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  return %y : tensor<2x5x16xf32>
}
