// RUN: %htp-opt %s -split-input-file -verify-diagnostics
// Every verifier error of the htp dialect, one case each.

func.func @linear_in_features(%x: tensor<2x13xf32>, %w: tensor<7x12xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{input's last dim (13) must equal the weight's in_features (dim 1 of [7x12] = 12)}}
  %y = htp.linear %x, %w : (tensor<2x13xf32>, tensor<7x12xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @linear_weight_rank(%x: tensor<2x12xf32>, %w: tensor<12xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{weight must be 2-D [out_features, in_features], got [12]}}
  %y = htp.linear %x, %w : (tensor<2x12xf32>, tensor<12xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @linear_bias(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>, %b: tensor<6xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{bias must be [7] (out_features of the weight), got [6]}}
  %y = htp.linear %x, %w, %b : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<6xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @linear_result(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{result must be [2x7] (input with its last dim replaced by out_features), got [2x8]}}
  %y = htp.linear %x, %w : (tensor<2x12xf32>, tensor<7x12xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @linear_dynamic(%x: tensor<?x12xf32>, %w: tensor<7x12xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float values}}
  %y = htp.linear %x, %w : (tensor<?x12xf32>, tensor<7x12xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @linear_f16(%x: tensor<2x12xf16>, %w: tensor<7x12xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float values}}
  %y = htp.linear %x, %w : (tensor<2x12xf16>, tensor<7x12xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @attention_rank(%x: tensor<10x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                          %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<10x12xf32> {
  // expected-error @+1 {{input must be 3-D [batch, tokens, dim], got [10x12]}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<10x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<10x12xf32>
  return %y : tensor<10x12xf32>
}

// -----

func.func @attention_qkv_cols(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x10xf32>, %bqkv: tensor<36xf32>,
                              %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{qkv weight must be [3*num_heads*head_dim, 12] (dim 1 = the input's dim), got [36x10]}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x10xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @attention_heads_divide(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                  %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{qkv weight rows (36) must be a positive multiple of 3*num_heads (3*5 = 15)}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 5 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @attention_heads_positive(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                    %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{attribute 'num_heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @attention_qkv_bias(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<12xf32>,
                              %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{qkv bias must be [36] (rows of the qkv weight), got [12]}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<12xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @attention_proj(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                          %wp: tensor<12x8xf32>, %bp: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{proj weight must be [12, 12] ([dim, num_heads*head_dim]), got [12x8]}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x8xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @attention_proj_bias(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                               %wp: tensor<12x12xf32>, %bp: tensor<4xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{proj bias must be [12] (the input's dim), got [4]}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<4xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @attention_result(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                            %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<2x6x12xf32> {
  // expected-error @+1 {{result must have the input's shape [2x5x12], got [2x6x12]}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x6x12xf32>
  return %y : tensor<2x6x12xf32>
}

// -----

func.func @norm_weight(%x: tensor<4x12xf32>, %g: tensor<10xf32>, %b: tensor<12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{weight must be [12] (the input's last dim), got [10]}}
  %y = htp.layer_norm %x, %g, %b : (tensor<4x12xf32>, tensor<10xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @norm_bias(%x: tensor<4x12xf32>, %g: tensor<12xf32>, %b: tensor<1x12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{bias must be [12] (the input's last dim), got [1x12]}}
  %y = htp.layer_norm %x, %g, %b : (tensor<4x12xf32>, tensor<12xf32>, tensor<1x12xf32>) -> tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @norm_epsilon(%x: tensor<4x12xf32>, %g: tensor<12xf32>, %b: tensor<12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{epsilon must be positive, got 0}}
  %y = htp.layer_norm %x, %g, %b {epsilon = 0.0 : f32} : (tensor<4x12xf32>, tensor<12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @norm_result(%x: tensor<4x12xf32>, %g: tensor<12xf32>, %b: tensor<12xf32>) -> tensor<2x24xf32> {
  // expected-error @+1 {{result must have the input's shape [4x12], got [2x24]}}
  %y = htp.layer_norm %x, %g, %b : (tensor<4x12xf32>, tensor<12xf32>, tensor<12xf32>) -> tensor<2x24xf32>
  return %y : tensor<2x24xf32>
}

// -----

func.func @gelu_approximate(%x: tensor<4x12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{approximate must be "none" or "tanh", got "sigmoid"}}
  %y = htp.gelu %x {approximate = "sigmoid"} : tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @add_shapes(%a: tensor<4x12xf32>, %b: tensor<12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %y = "htp.add"(%a, %b) : (tensor<4x12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @all_reduce_group(%x: tensor<4x12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{group must be a non-empty name}}
  %y = htp.all_reduce %x {group = ""} : tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

// expected-error @+1 {{'htp.param' on argument #0 must be a non-empty string}}
func.func @param_not_string(%x: tensor<4xf32> {htp.param = 3 : i64}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{unknown htp argument attribute 'htp.weight' on argument #0 (expected 'htp.param', 'htp.input' or 'htp.shard')}}
func.func @unknown_arg_attr(%x: tensor<4xf32> {htp.weight = "w"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

func.func @bias_add_bias(%x: tensor<2x5x12xf32>, %b: tensor<5xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{bias must be [12] (the input's last dim), got [5]}}
  %y = htp.bias_add %x, %b : tensor<2x5x12xf32>, tensor<5xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

// expected-error @+1 {{'htp.shard' on argument #0 must be {dim = D : i64, parts = N : i64, layout = "blocks" or "qkv"} with D >= 0 and N >= 1, got {dim = 1 : i64, layout = "qkv", parts = 2 : i64}}}
func.func @shard_qkv_dim(%w: tensor<4x6xf32> {htp.shard = {dim = 1 : i64, layout = "qkv", parts = 2 : i64}}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{'htp.shard' on argument #0 must be}}
func.func @shard_parts(%w: tensor<4x6xf32> {htp.shard = {dim = 0 : i64, layout = "blocks", parts = 0 : i64}}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{'htp.tp' must be a positive integer, got 0 : i64}}
func.func @tp_zero(%x: tensor<4xf32>) -> tensor<4xf32> attributes {htp.tp = 0 : i64} {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{unknown htp attribute 'htp.ranks' (expected 'htp.tp' on a function)}}
func.func @unknown_func_attr(%x: tensor<4xf32>) -> tensor<4xf32> attributes {htp.ranks = 2 : i64} {
  return %x : tensor<4xf32>
}

// -----

func.func @malformed(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected ':'}}
  %y = htp.gelu %x
  return %y : tensor<4xf32>
}

// -----

func.func @attention_pair_with_bias(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{a balanced attention (with a pair) yields a partial sum: its proj bias must follow the all-reduce, not be an operand}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64, pair = 0 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @attention_odd_pair(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{pair must be even (2 * layer) for attention, got 1}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 1 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @mlp_fc2(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %w2: tensor<8x12xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{fc2 weight must be [8, 10], got [8x12]}}
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x12xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @mlp_unit_width(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %w2: tensor<8x10xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{hidden width (10) must be a multiple of unit_width (4)}}
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 4 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @mlp_even_pair(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %w2: tensor<8x10xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{pair must be odd (2 * layer + 1) for an MLP, got 2}}
  %y = htp.mlp %x, %w1, %w2 {pair = 2 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
