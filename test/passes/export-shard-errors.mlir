// RUN: %htp-opt %s -split-input-file --htp-export-shard -verify-diagnostics

// A qkv shard is strided: no shard.sharding states it, so a remark says so
// and its htp.shard stays the only statement.
func.func @qkv(%x: tensor<2x5x16xf32>,
    // expected-remark @+1 {{argument #1 is not annotated: its qkv shard is strided (rank r's rows of each of q, k and v), which no shard.sharding (contiguous blocks) states; its htp.shard does}}
    %wqkv: tensor<24x16xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv>},
    // expected-remark @+1 {{argument #2 is not annotated}}
    %bqkv: tensor<24xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv>},
    %wproj: tensor<16x8xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>})
    -> tensor<2x5x16xf32> attributes {htp.tp = 2 : i64} {
  %a = htp.attention %x, %wqkv, %bqkv, %wproj {num_heads = 4 : i64} : (tensor<2x5x16xf32>, tensor<24x16xf32>, tensor<24xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %s = htp.all_reduce %a : tensor<2x5x16xf32>
  return %s : tensor<2x5x16xf32>
}

// -----

// Exported already: the export runs once.
shard.grid @htp_tp2(shape = 2)
// expected-error @+1 {{--htp-export-shard: its arguments already carry shard annotations (run the export once)}}
func.func @twice(%x: tensor<3x8xf32>, %w1: tensor<8x8xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>})
    -> tensor<3x8xf32> attributes {htp.tp = 2 : i64} {
  %s = shard.sharding @htp_tp2 split_axes = [[0]] : !shard.sharding
  %a = shard.shard %w1 to %s : tensor<8x8xf32>
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  return %h : tensor<3x8xf32>
}

// -----

// The grid's name is taken by another grid.
// expected-error @+1 {{--htp-export-shard: the symbol @htp_tp2 is taken by something other than shard.grid @htp_tp2(shape = 2)}}
shard.grid @htp_tp2(shape = 2x2)
func.func @taken(%x: tensor<3x8xf32>, %w1: tensor<8x8xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>})
    -> tensor<3x8xf32> attributes {htp.tp = 2 : i64} {
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  return %h : tensor<3x8xf32>
}
