// RUN: %htp-opt %s --htp-tensor-parallel=tp=2 --htp-balance-hooks | not %htp-opt --htp-balance-hooks 2>&1 | FileCheck %s
// The hooks pass run on a function that has its hooks already says so (it
// said "found 1 attention(s) and 0 MLP pair(s)", its MLP chain being an
// htp.mlp by then).
// CHECK: error: function @block already has its balance hooks (htp.mlp pairs); run --htp-balance-hooks once
func.func @block(%x: tensor<2x3x12xf32> {htp.input = "x"},
    %wqkv: tensor<36x12xf32> {htp.param = "wqkv"}, %bqkv: tensor<36xf32> {htp.param = "bqkv"},
    %wp: tensor<12x12xf32> {htp.param = "wp"}, %w1: tensor<40x12xf32> {htp.param = "w1"},
    %w2: tensor<12x40xf32> {htp.param = "w2"}) -> tensor<2x3x12xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 4 : i64} : (tensor<2x3x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x3x12xf32>
  %h = htp.linear %a, %w1 : (tensor<2x3x12xf32>, tensor<40x12xf32>) -> tensor<2x3x40xf32>
  %g = htp.gelu %h : tensor<2x3x40xf32>
  %m = htp.linear %g, %w2 : (tensor<2x3x40xf32>, tensor<12x40xf32>) -> tensor<2x3x12xf32>
  return %m : tensor<2x3x12xf32>
}
