// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=2 --htp-balance-hooks -verify-diagnostics

// The planner takes one unit count per kind: an attention without an MLP pair
// has nothing to pair with.
// expected-error @+1 {{--htp-balance-hooks needs each layer to have one split attention and one split MLP pair; found 1 attention(s) and 0 MLP pair(s)}}
func.func @attention_only(%x: tensor<2x3x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                          %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<2x3x12xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 4 : i64} : (tensor<2x3x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x3x12xf32>
  return %a : tensor<2x3x12xf32>
}

// -----

func.func @unlike_layers(%x: tensor<2x3x12xf32>,
    %wqkv0: tensor<36x12xf32>, %bqkv0: tensor<36xf32>, %wp0: tensor<12x12xf32>,
    %w10: tensor<40x12xf32>, %w20: tensor<12x40xf32>,
    %wqkv1: tensor<36x12xf32>, %bqkv1: tensor<36xf32>, %wp1: tensor<12x12xf32>,
    %w11: tensor<20x12xf32>, %w21: tensor<12x20xf32>) -> tensor<2x3x12xf32> {
  %a0 = htp.attention %x, %wqkv0, %bqkv0, %wp0 {num_heads = 4 : i64} : (tensor<2x3x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x3x12xf32>
  %h0 = htp.linear %a0, %w10 : (tensor<2x3x12xf32>, tensor<40x12xf32>) -> tensor<2x3x40xf32>
  %g0 = htp.gelu %h0 : tensor<2x3x40xf32>
  %m0 = htp.linear %g0, %w20 : (tensor<2x3x40xf32>, tensor<12x40xf32>) -> tensor<2x3x12xf32>
  %a1 = htp.attention %m0, %wqkv1, %bqkv1, %wp1 {num_heads = 4 : i64} : (tensor<2x3x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x3x12xf32>
  // expected-error @+1 {{has 10 hidden neurons per rank, but the first layer has 20; --htp-balance-hooks needs every layer alike}}
  %h1 = htp.linear %a1, %w11 : (tensor<2x3x12xf32>, tensor<20x12xf32>) -> tensor<2x3x20xf32>
  %g1 = htp.gelu %h1 : tensor<2x3x20xf32>
  %m1 = htp.linear %g1, %w21 : (tensor<2x3x20xf32>, tensor<12x20xf32>) -> tensor<2x3x12xf32>
  return %m1 : tensor<2x3x12xf32>
}
