// RUN: %htp-opt %s --htp-import-shard=tp=2 -verify-diagnostics

// The grid has 4 devices; tp = 2 was asked for.
shard.grid @grid0(shape = 4)
func.func @grid_not_tp(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %rows = shard.sharding @grid0 split_axes = [[0]] : !shard.sharding
  // expected-error @+1 {{its grid has 4 devices, but tp = 2 was asked for}}
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %x, %a : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
