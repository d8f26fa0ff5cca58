// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=4 --htp-export-shard | FileCheck %s --check-prefix=EVEN
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=4 shares=3,3,1,1 mlp-unit-width=2" --htp-export-shard | FileCheck %s --check-prefix=UNEVEN
// What the upstream ops accept: the output parses and verifies again (the
// shardings' grid and offsets are checked against the grid), by htp-opt and
// by upstream's own mlir-opt (htp ops in generic form, unregistered there).
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=4 shares=3,3,1,1 mlp-unit-width=2" --htp-export-shard | %htp-opt -split-input-file | FileCheck %s --check-prefix=UNEVEN
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=4 shares=3,3,1,1 mlp-unit-width=2" --htp-export-shard --mlir-print-op-generic | mlir-opt -split-input-file --allow-unregistered-dialect | FileCheck %s --check-prefix=UNEVEN
// Round trip: the import of the export checks each annotation against the
// split's htp.shard and drops them, which gives the split back.
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=4 shares=3,3,1,1 mlp-unit-width=2" -o %t.split
// RUN: %htp-opt %t.split -split-input-file --htp-export-shard --htp-import-shard -o %t.back
// RUN: diff %t.split %t.back

// Each blocks shard is stated as its global tensor's sharding over a 1-D
// grid of tp devices: fc1 rows and bias [[0]], proj and fc2 columns
// [[], [0]]; even shards with upstream's default (no offsets), uneven ones
// with the global rows or columns each rank owns, the same offsets that
// --htp-import-shard reads (import-shard-uneven.mlir). The htp ops keep
// reading the arguments. The qkv weight and bias are not annotated (a
// remark says so: export-shard-errors.mlir).
// EVEN: shard.grid @htp_tp4(shape = 4)
// EVEN-LABEL: func.func @block(
// EVEN-SAME: %[[X:[^:]*]]: tensor<2x5x16xf32>
// EVEN-SAME: %[[WQKV:[^:]*]]: tensor<12x16xf32>
// EVEN-SAME: %[[BQKV:[^:]*]]: tensor<12xf32>
// EVEN-SAME: %[[WPROJ:[^:]*]]: tensor<16x4xf32>
// EVEN-SAME: %[[W1:[^:]*]]: tensor<8x16xf32>
// EVEN-SAME: %[[B1:[^:]*]]: tensor<8xf32>
// EVEN-SAME: %[[W2:[^:]*]]: tensor<16x8xf32>
// EVEN-NEXT: %[[S0:.+]] = shard.sharding @htp_tp4 split_axes = {{\[\[}}], [0]] : !shard.sharding
// EVEN-NEXT: shard.shard %[[WPROJ]] to %[[S0]] : tensor<16x4xf32>
// EVEN-NEXT: %[[S1:.+]] = shard.sharding @htp_tp4 split_axes = {{\[\[}}0]] : !shard.sharding
// EVEN-NEXT: shard.shard %[[W1]] to %[[S1]] : tensor<8x16xf32>
// EVEN-NEXT: %[[S2:.+]] = shard.sharding @htp_tp4 split_axes = {{\[\[}}0]] : !shard.sharding
// EVEN-NEXT: shard.shard %[[B1]] to %[[S2]] : tensor<8xf32>
// EVEN-NEXT: %[[S3:.+]] = shard.sharding @htp_tp4 split_axes = {{\[\[}}], [0]] : !shard.sharding
// EVEN-NEXT: shard.shard %[[W2]] to %[[S3]] : tensor<16x8xf32>
// EVEN-NEXT: htp.attention %[[X]], %[[WQKV]], %[[BQKV]], %[[WPROJ]]
// UNEVEN: shard.grid @htp_tp4(shape = 4)
// UNEVEN-LABEL: func.func @block(
// UNEVEN: shard.sharding @htp_tp4 split_axes = {{\[\[}}], [0]] sharded_dims_offsets = [0, 6, 12, 14, 16] : !shard.sharding
// UNEVEN-NEXT: shard.shard %{{.*}} : tensor<16x6xf32>
// UNEVEN-NEXT: shard.sharding @htp_tp4 split_axes = {{\[\[}}0]] sharded_dims_offsets = [0, 12, 24, 28, 32] : !shard.sharding
// UNEVEN-NEXT: shard.shard %{{.*}} : tensor<12x16xf32>
// UNEVEN-NEXT: shard.sharding @htp_tp4 split_axes = {{\[\[}}0]] sharded_dims_offsets = [0, 12, 24, 28, 32] : !shard.sharding
// UNEVEN-NEXT: shard.shard %{{.*}} : tensor<12xf32>
// UNEVEN-NEXT: shard.sharding @htp_tp4 split_axes = {{\[\[}}], [0]] sharded_dims_offsets = [0, 12, 24, 28, 32] : !shard.sharding
// UNEVEN-NEXT: shard.shard %{{.*}} : tensor<16x12xf32>
// UNEVEN-NEXT: htp.attention
func.func @block(%x: tensor<2x5x16xf32>,
    %wqkv: tensor<48x16xf32> {htp.param = "blocks.0.attn.qkv.weight"},
    %bqkv: tensor<48xf32> {htp.param = "blocks.0.attn.qkv.bias"},
    %wproj: tensor<16x16xf32> {htp.param = "blocks.0.attn.proj.weight"},
    %bproj: tensor<16xf32> {htp.param = "blocks.0.attn.proj.bias"},
    %w1: tensor<32x16xf32> {htp.param = "blocks.0.mlp.fc1.weight"},
    %b1: tensor<32xf32> {htp.param = "blocks.0.mlp.fc1.bias"},
    %w2: tensor<16x32xf32> {htp.param = "blocks.0.mlp.fc2.weight"},
    %b2: tensor<16xf32> {htp.param = "blocks.0.mlp.fc2.bias"}) -> tensor<2x5x16xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 8 : i64} : (tensor<2x5x16xf32>, tensor<48x16xf32>, tensor<48xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %h = htp.linear %a, %w1, %b1 : (tensor<2x5x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<2x5x32xf32>
  %g = htp.gelu %h : tensor<2x5x32xf32>
  %y = htp.linear %g, %w2, %b2 : (tensor<2x5x32xf32>, tensor<16x32xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  return %y : tensor<2x5x16xf32>
}

// -----

// A split function with no shard (nothing here is a pair) gets nothing,
// and no grid is made for it.
// EVEN-NOT: shard.grid
// EVEN-LABEL: func.func @head(
// EVEN-NOT: shard.
// EVEN: return
func.func @head(%x: tensor<3x8xf32>, %w: tensor<4x8xf32>) -> tensor<3x4xf32> {
  %y = htp.linear %x, %w : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}
