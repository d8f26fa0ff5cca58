// RUN: %htp-opt %s -split-input-file --htp-balance-hooks -verify-diagnostics

// A split block whose pairs carry what an htp.mlp or a balanced attention
// cannot hold is refused by name: made into hooks, each lost what was fused
// (a GELU fused into fc1 beside an htp.gelu, a residual on fc1 or fc2: the
// block ran with exit 0 and a wrong output).

func.func @gelu_twice(%x: tensor<1x1x8xf32> {htp.input = "x"}, %wqkv: tensor<12x8xf32> {htp.param = "qkv"}, %bqkv: tensor<12xf32> {htp.param = "bqkv"}, %wp: tensor<8x4xf32> {htp.param = "proj"}, %w1: tensor<4x8xf32> {htp.param = "fc1"}, %b1: tensor<4xf32> {htp.param = "b1"}, %w2: tensor<8x4xf32> {htp.param = "fc2"}) -> tensor<1x1x8xf32> attributes {htp.tp = 2 : i64} {
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 2 : i64} : (tensor<1x1x8xf32>, tensor<12x8xf32>, tensor<12xf32>, tensor<8x4xf32>) -> tensor<1x1x8xf32>
  %s = htp.all_reduce %a : tensor<1x1x8xf32>
  // expected-error @+1 {{'htp.linear' op applies a GELU (`gelu`) and an htp.gelu follows it: --htp-balance-hooks makes an MLP pair of one GELU}}
  %h = htp.linear %s, %w1, %b1 gelu tanh : (tensor<1x1x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<1x1x4xf32>
  %g = htp.gelu %h : tensor<1x1x4xf32>
  %m = htp.linear %g, %w2 : (tensor<1x1x4xf32>, tensor<8x4xf32>) -> tensor<1x1x8xf32>
  %y = htp.all_reduce %m : tensor<1x1x8xf32>
  return %y : tensor<1x1x8xf32>
}

// -----

func.func @fc2_residual(%x: tensor<1x1x8xf32> {htp.input = "x"}, %wqkv: tensor<12x8xf32> {htp.param = "qkv"}, %bqkv: tensor<12xf32> {htp.param = "bqkv"}, %wp: tensor<8x4xf32> {htp.param = "proj"}, %w1: tensor<4x8xf32> {htp.param = "fc1"}, %b1: tensor<4xf32> {htp.param = "b1"}, %w2: tensor<8x4xf32> {htp.param = "fc2"}) -> tensor<1x1x8xf32> attributes {htp.tp = 2 : i64} {
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 2 : i64} : (tensor<1x1x8xf32>, tensor<12x8xf32>, tensor<12xf32>, tensor<8x4xf32>) -> tensor<1x1x8xf32>
  %s = htp.all_reduce %a : tensor<1x1x8xf32>
  %h = htp.linear %s, %w1, %b1 : (tensor<1x1x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<1x1x4xf32>
  %g = htp.gelu %h : tensor<1x1x4xf32>
  // expected-error @+1 {{'htp.linear' op has a fused residual in a split MLP pair: --htp-balance-hooks cannot keep it in htp.mlp}}
  %m = htp.linear %g, %w2 residual %x : (tensor<1x1x4xf32>, tensor<8x4xf32>, tensor<1x1x8xf32>) -> tensor<1x1x8xf32>
  %y = htp.all_reduce %m : tensor<1x1x8xf32>
  return %y : tensor<1x1x8xf32>
}

// -----

func.func @fc1_residual(%x: tensor<1x1x8xf32> {htp.input = "x"}, %wqkv: tensor<12x8xf32> {htp.param = "qkv"}, %bqkv: tensor<12xf32> {htp.param = "bqkv"}, %wp: tensor<8x4xf32> {htp.param = "proj"}, %w1: tensor<4x8xf32> {htp.param = "fc1"}, %b1: tensor<4xf32> {htp.param = "b1"}, %w2: tensor<8x4xf32> {htp.param = "fc2"}, %r: tensor<1x1x4xf32> {htp.param = "r"}) -> tensor<1x1x8xf32> attributes {htp.tp = 2 : i64} {
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 2 : i64} : (tensor<1x1x8xf32>, tensor<12x8xf32>, tensor<12xf32>, tensor<8x4xf32>) -> tensor<1x1x8xf32>
  %s = htp.all_reduce %a : tensor<1x1x8xf32>
  // expected-error @+1 {{'htp.linear' op has a fused residual in a split MLP pair}}
  %h = htp.linear %s, %w1, %b1 residual %r : (tensor<1x1x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
  %g = htp.gelu %h : tensor<1x1x4xf32>
  %m = htp.linear %g, %w2 : (tensor<1x1x4xf32>, tensor<8x4xf32>) -> tensor<1x1x8xf32>
  %y = htp.all_reduce %m : tensor<1x1x8xf32>
  return %y : tensor<1x1x8xf32>
}

// -----

func.func @attention_residual(%x: tensor<1x1x8xf32> {htp.input = "x"}, %wqkv: tensor<12x8xf32> {htp.param = "qkv"}, %bqkv: tensor<12xf32> {htp.param = "bqkv"}, %wp: tensor<8x4xf32> {htp.param = "proj"}) -> tensor<1x1x8xf32> attributes {htp.tp = 2 : i64} {
  // expected-error @+1 {{'htp.attention' op has a fused residual in a split layer: a balanced attention's residual is added after its all-reduce}}
  %a = htp.attention %x, %wqkv, %bqkv, %wp residual %x {num_heads = 2 : i64} : (tensor<1x1x8xf32>, tensor<12x8xf32>, tensor<12xf32>, tensor<8x4xf32>, tensor<1x1x8xf32>) -> tensor<1x1x8xf32>
  %s = htp.all_reduce %a : tensor<1x1x8xf32>
  return %s : tensor<1x1x8xf32>
}

// -----

func.func @fc2_gelu(%x: tensor<1x1x8xf32> {htp.input = "x"}, %wqkv: tensor<12x8xf32> {htp.param = "qkv"}, %bqkv: tensor<12xf32> {htp.param = "bqkv"}, %wp: tensor<8x4xf32> {htp.param = "proj"}, %w1: tensor<4x8xf32> {htp.param = "fc1"}, %b1: tensor<4xf32> {htp.param = "b1"}, %w2: tensor<8x4xf32> {htp.param = "fc2"}) -> tensor<1x1x8xf32> attributes {htp.tp = 2 : i64} {
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 2 : i64} : (tensor<1x1x8xf32>, tensor<12x8xf32>, tensor<12xf32>, tensor<8x4xf32>) -> tensor<1x1x8xf32>
  %s = htp.all_reduce %a : tensor<1x1x8xf32>
  %h = htp.linear %s, %w1, %b1 : (tensor<1x1x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<1x1x4xf32>
  %g = htp.gelu %h : tensor<1x1x4xf32>
  // expected-error @+1 {{'htp.linear' op applies a GELU to a rank's partial sum in a split MLP pair}}
  %m = htp.linear %g, %w2 gelu tanh : (tensor<1x1x4xf32>, tensor<8x4xf32>) -> tensor<1x1x8xf32>
  %y = htp.all_reduce %m : tensor<1x1x8xf32>
  return %y : tensor<1x1x8xf32>
}
