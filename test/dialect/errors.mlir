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
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type values}}
  %y = htp.linear %x, %w : (tensor<?x12xf32>, tensor<7x12xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @linear_f16(%x: tensor<2x12xf16>, %w: tensor<7x12xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type values}}
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
  // expected-error @+1 {{epsilon must be positive and finite, got 0}}
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
  // expected-error @+2 {{expected ::mlir::htp::Approximation to be one of: none, tanh}}
  // expected-error @+1 {{failed to parse HTP_ApproximationAttr parameter 'value'}}
  %y = htp.gelu %x approximate sigmoid : tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

// The string form of earlier versions is refused, not read as the default.
func.func @gelu_approximate_string(%x: tensor<4x12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{attribute 'approximate' failed to satisfy constraint: GELU approximation: none (erf) or tanh}}
  %y = htp.gelu %x {approximate = "tanh"} : tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @add_shapes(%a: tensor<4x12xf32>, %b: tensor<12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %y = "htp.add"(%a, %b) : (tensor<4x12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @layer_norm_group(%x: tensor<4x12xf32>, %g: tensor<12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{group must be a non-empty name where given}}
  %y = htp.layer_norm %x, %g, %g {group = ""} : (tensor<4x12xf32>, tensor<12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
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

// An argument is bound from the weights or from the data, not both.
// expected-error @+1 {{argument #1 is marked both 'htp.param' ("w") and 'htp.input' ("x"): a parameter is bound from the weights, a data input from the inputs; keep one}}
func.func @param_and_input(%x: tensor<4xf32>, %w: tensor<4xf32> {htp.param = "w", htp.input = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// One name, one tensor: two parameters of one name would both be bound to
// the weights' one tensor.
// expected-error @+1 {{arguments #1 and #2 are both 'htp.param' = "norm.weight": each names one tensor; give them names of their own}}
func.func @param_twice(%x: tensor<4xf32> {htp.input = "x"}, %g: tensor<4xf32> {htp.param = "norm.weight"}, %b: tensor<4xf32> {htp.param = "norm.weight"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{arguments #0 and #1 are both 'htp.input' = "x": each names one tensor; give them names of their own}}
func.func @input_twice(%x: tensor<4xf32> {htp.input = "x"}, %y: tensor<4xf32> {htp.input = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

func.func @bias_add_bias(%x: tensor<2x5x12xf32>, %b: tensor<5xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{bias must be [12] (the input's last dim), got [5]}}
  %y = htp.bias_add %x, %b : tensor<2x5x12xf32>, tensor<5xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

// An all-reduce's bias is a vector of its input's last dim, its residual
// of its input's type.
func.func @all_reduce_bias(%x: tensor<2x12xf32>, %b: tensor<2xf32>) -> tensor<2x12xf32> {
  // expected-error @+1 {{'htp.all_reduce' op bias must be [12] (the input's last dim), got [2]}}
  %y = htp.all_reduce %x bias %b : tensor<2x12xf32>, tensor<2xf32>
  return %y : tensor<2x12xf32>
}

// -----

func.func @all_reduce_residual(%x: tensor<2x12xf32>, %r: tensor<3x12xf32>) -> tensor<2x12xf32> {
  // expected-error @+1 {{failed to verify that a residual has the input's type}}
  %y = "htp.all_reduce"(%x, %r) <{operandSegmentSizes = array<i32: 1, 0, 1>}> : (tensor<2x12xf32>, tensor<3x12xf32>) -> tensor<2x12xf32>
  return %y : tensor<2x12xf32>
}

// -----

func.func @all_reduce_scalar_residual(%x: tensor<f32>, %r: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{'htp.all_reduce' op input must have rank >= 1 to take a bias or a residual (rows of a last dim)}}
  %y = htp.all_reduce %x residual %r : tensor<f32>
  return %y : tensor<f32>
}

// -----

// An all-reduce with its norm: the norm's weights are vectors of the
// input's last dim, its epsilon positive and finite.
func.func @all_reduce_norm_weight(%x: tensor<2x12xf32>, %g: tensor<3xf32>) -> tensor<2x12xf32> {
  // expected-error @+1 {{'htp.all_reduce_norm' op norm weight must be [12] (the input's last dim), got [3]}}
  %s, %n = htp.all_reduce_norm %x norm %g, %g : tensor<2x12xf32>, tensor<3xf32>
  return %n : tensor<2x12xf32>
}

// -----

func.func @all_reduce_norm_epsilon(%x: tensor<2x12xf32>, %g: tensor<12xf32>) -> tensor<2x12xf32> {
  // expected-error @+1 {{'htp.all_reduce_norm' op epsilon must be positive and finite, got 0}}
  %s, %n = htp.all_reduce_norm %x norm %g, %g {epsilon = 0.0 : f32} : tensor<2x12xf32>, tensor<12xf32>
  return %n : tensor<2x12xf32>
}

// -----

func.func @all_reduce_bias_type(%x: tensor<2x12xf32>, %b: tensor<12xbf16>) -> tensor<2x12xf32> {
  // expected-error @+1 {{'htp.all_reduce' op bias has element type bf16 but input has f32}}
  %y = htp.all_reduce %x bias %b : tensor<2x12xf32>, tensor<12xbf16>
  return %y : tensor<2x12xf32>
}

// -----

// A residual has the input's type (the custom form infers it; the generic
// form can say another).
func.func @bias_add_residual(%x: tensor<2x12xf32>, %b: tensor<12xf32>, %r: tensor<3x12xf32>) -> tensor<2x12xf32> {
  // expected-error @+1 {{failed to verify that a residual has the input's type}}
  %y = "htp.bias_add"(%x, %b, %r) : (tensor<2x12xf32>, tensor<12xf32>, tensor<3x12xf32>) -> tensor<2x12xf32>
  return %y : tensor<2x12xf32>
}

// -----

// expected-error @+1 {{a qkv shard cuts dim 0 (the q, k and v rows), got dim 1}}
func.func @shard_qkv_dim(%w: tensor<6x6xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = qkv>}) -> tensor<6x6xf32> {
  return %w : tensor<6x6xf32>
}

// -----

// expected-error @+1 {{shard parts must be from 1 to 1024 (HTP_ENTRY_MAX_TP), got 0}}
func.func @shard_parts(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 0, layout = blocks>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{shard parts must be from 1 to 1024 (HTP_ENTRY_MAX_TP), got 4611686018427387904}}
func.func @shard_parts_huge(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 4611686018427387904, layout = blocks>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{shard dim must be from 0 to 7 (below HTP_ENTRY_MAX_RANK), got -1}}
func.func @shard_dim_negative(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = -1, parts = 2, layout = blocks>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{'htp.shard' on argument #0 cuts dim 2, but the argument has rank 2}}
func.func @shard_dim_rank(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 2, parts = 2, layout = blocks>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// The global tensor is the local dim times parts: checked against the limits.
// expected-error @+1 {{argument #0's global tensor (dim 0 times 2 parts) has dim 0 = 4294967294, above 2^31-1 (HTP_ENTRY_MAX_DIM, BLAS's int)}}
func.func @shard_global_dim(%w: tensor<2147483647xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>}) -> tensor<2147483647xf32> {
  return %w : tensor<2147483647xf32>
}

// -----

// expected-error @+1 {{argument #0's global tensor (dim 1 times 1024 parts) [262144x1049600] holds more than 2^40 bytes of f32 (HTP_ENTRY_MAX_TENSOR_BYTES)}}
func.func @shard_global_bytes(%w: tensor<262144x1025xf32> {htp.shard = #htp.shard<dim = 1, parts = 1024, layout = blocks>}) -> tensor<262144x1025xf32> {
  return %w : tensor<262144x1025xf32>
}

// -----

// expected-error @+1 {{'htp.shard' on argument #0: a qkv shard holds a slice of each of q, k and v, so its rows (4) must divide by 3}}
func.func @shard_qkv_rows(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{'htp.shard' on argument #0 has parts = 3, but the function's htp.tp is 2}}
func.func @shard_parts_tp(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 3, layout = blocks>}) -> tensor<4x6xf32> attributes {htp.tp = 2 : i64} {
  return %w : tensor<4x6xf32>
}

// -----

// Without htp.tp the function is for one rank: a split argument was compiled
// into a .so the signature's reader then refused.
// expected-error @+1 {{'htp.shard' on argument #0 has parts = 2, but the function has no htp.tp (one rank)}}
func.func @shard_without_tp(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// The dictionary form of earlier versions is refused with the new syntax.
// expected-error @+1 {{'htp.shard' on argument #0 must be a #htp.shard<dim = D, parts = N, layout = blocks|qkv>, got {dim = 0 : i64, layout = "blocks", parts = 2 : i64}}}
func.func @shard_dictionary(%w: tensor<4x6xf32> {htp.shard = {dim = 0 : i64, layout = "blocks", parts = 2 : i64}}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{an uneven shard has one unit count per part: 2 parts, 3 counts}}
func.func @shard_units_count(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [1, 1, 1], unit = 2>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{an uneven shard's unit count must be from 1 to 1048576, part 1 has 0}}
func.func @shard_units_zero(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [2, 0], unit = 2>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{an uneven shard's unit must be from 1 to 2147483647 rows or columns, got 0}}
func.func @shard_unit_zero(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [2, 1]>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{a shard's unit (2) goes with its units (uneven shards)}}
func.func @shard_unit_alone(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, unit = 2>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// Room for whole units, at least the most of any rank: 2 units of 2 rows
// at least (6 rows, room for 3, is spare room), never 3 rows or 5.
// expected-error @+1 {{'htp.shard' on argument #0: an uneven shard's dim 0 is room for whole units (room x unit), from the most units of any rank (max(units)) to 1048576, but it is 2}}
func.func @shard_units_room(%w: tensor<2x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [2, 1], unit = 2>}) -> tensor<2x6xf32> {
  return %w : tensor<2x6xf32>
}

// -----

// expected-error @+1 {{'htp.shard' on argument #0: an uneven shard's dim 0 is room for whole units (room x unit), from the most units of any rank (max(units)) to 1048576, but it is 5}}
func.func @shard_units_room_partial(%w: tensor<5x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [2, 1], unit = 2>}) -> tensor<5x6xf32> {
  return %w : tensor<5x6xf32>
}

// -----

// A room of more units than a shard holds (2^20 + 1 units of 1 column).
// expected-error @+1 {{'htp.shard' on argument #0: an uneven shard's dim 1 is room for whole units (room x unit), from the most units of any rank (max(units)) to 1048576, but it is 1048577}}
func.func @shard_units_room_bound(%w: tensor<1x1048577xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks, units = [2, 1], unit = 1>}) -> tensor<1x1048577xf32> {
  return %w : tensor<1x1048577xf32>
}

// -----

// expected-error @+1 {{'htp.shard' on argument #0: an uneven shard's dim 0 is room for whole units (3 x room x unit), from the most units of any rank (max(units)) to 1048576, but it is 6}}
func.func @shard_units_room_qkv(%w: tensor<6x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv, units = [2, 1], unit = 2>}) -> tensor<6x6xf32> {
  return %w : tensor<6x6xf32>
}

// -----

// expected-error @+1 {{'htp.shard' on argument #0: an uneven shard's dim 0 is room for whole units (3 x room x unit), from the most units of any rank (max(units)) to 1048576, but it is 15}}
func.func @shard_units_room_qkv_partial(%w: tensor<15x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv, units = [2, 1], unit = 2>}) -> tensor<15x6xf32> {
  return %w : tensor<15x6xf32>
}

// -----

// expected-error @+1 {{argument #0's global tensor (dim 0 of sum(units) x unit)}}
func.func @shard_units_global(%w: tensor<1073741824xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [1, 1], unit = 1073741824>}) -> tensor<1073741824xf32> {
  return %w : tensor<1073741824xf32>
}

// -----

// expected-error @+2 {{expected ::mlir::htp::ShardLayout to be one of: blocks, qkv}}
// expected-error @+1 {{failed to parse HTP_ShardAttr parameter 'layout'}}
func.func @shard_layout(%w: tensor<4x6xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = rows>}) -> tensor<4x6xf32> {
  return %w : tensor<4x6xf32>
}

// -----

// expected-error @+1 {{'htp.tp' must be an integer from 1 to 1024 (HTP_ENTRY_MAX_TP), got 0 : i64}}
func.func @tp_zero(%x: tensor<4xf32>) -> tensor<4xf32> attributes {htp.tp = 0 : i64} {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{unknown htp attribute 'htp.ranks' (expected 'htp.tp' or 'htp.backward' on a function)}}
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

// -----
// Limits and overflow (runtime/htp_entry.h): products are checked, not wrapped.

func.func @attention_heads_overflow(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                    %wp: tensor<12x12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{num_heads (4611686018427387904) is too large: 3*num_heads overflows int64}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 4611686018427387904 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

// 3 * num_heads fits int64 but is beyond the qkv rows: refused, not divided.
func.func @attention_heads_huge(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                %wp: tensor<12x12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{qkv weight rows (36) must be a positive multiple of 3*num_heads (3*1099511627776 = 3298534883328)}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 1099511627776 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

// The element count itself overflows int64 (2^93): caught step by step.
func.func @count_overflow(%x: tensor<2147483647x2147483647x2147483647xf32>) -> tensor<2147483647x2147483647x2147483647xf32> {
  // expected-error @+1 {{operand #0 [2147483647x2147483647x2147483647] holds more than 2^40 bytes of f32 (HTP_ENTRY_MAX_TENSOR_BYTES)}}
  %y = htp.gelu %x : tensor<2147483647x2147483647x2147483647xf32>
  return %y : tensor<2147483647x2147483647x2147483647xf32>
}

// -----

// 2^18 * (2^20 + 1) elements: 2^40 + 2^22 bytes, just over.
func.func @bytes_limit(%a: tensor<262144x1048577xf32>) -> tensor<262144x1048577xf32> {
  // expected-error @+1 {{operand #0 [262144x1048577] holds more than 2^40 bytes of f32 (HTP_ENTRY_MAX_TENSOR_BYTES)}}
  %y = htp.add %a, %a : tensor<262144x1048577xf32>
  return %y : tensor<262144x1048577xf32>
}

// -----

func.func @dim_limit(%x: tensor<2x2147483648xf32>, %w: tensor<3x2147483648xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{operand #0 has dim 1 = 2147483648, above 2^31-1 (HTP_ENTRY_MAX_DIM, BLAS's int)}}
  %y = htp.linear %x, %w : (tensor<2x2147483648xf32>, tensor<3x2147483648xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @rank_limit(%x: tensor<1x1x1x1x1x1x1x1x2xf32>) -> tensor<1x1x1x1x1x1x1x1x2xf32> {
  // expected-error @+1 {{operand #0 has rank 9, above 8 (HTP_ENTRY_MAX_RANK)}}
  %y = htp.all_reduce %x : tensor<1x1x1x1x1x1x1x1x2xf32>
  return %y : tensor<1x1x1x1x1x1x1x1x2xf32>
}

// -----

func.func @result_limit(%x: tensor<2x12xf32>, %w: tensor<2147483648x12xf32>) -> tensor<2x2147483648xf32> {
  // expected-error @+1 {{operand #1 has dim 0 = 2147483648, above 2^31-1}}
  %y = htp.linear %x, %w : (tensor<2x12xf32>, tensor<2147483648x12xf32>) -> tensor<2x2147483648xf32>
  return %y : tensor<2x2147483648xf32>
}

// -----

func.func @norm_epsilon_inf(%x: tensor<4x12xf32>, %g: tensor<12xf32>, %b: tensor<12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{epsilon must be positive and finite, got INF}}
  %y = htp.layer_norm %x, %g, %b {epsilon = 0x7F800000 : f32} : (tensor<4x12xf32>, tensor<12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @norm_epsilon_nan(%x: tensor<4x12xf32>, %g: tensor<12xf32>, %b: tensor<12xf32>) -> tensor<4x12xf32> {
  // expected-error @+1 {{epsilon must be positive and finite, got nan}}
  %y = htp.layer_norm %x, %g, %b {epsilon = 0x7FC00000 : f32} : (tensor<4x12xf32>, tensor<12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  return %y : tensor<4x12xf32>
}

// -----

func.func @attention_pair_limit(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{pair (131072) must be below 2^17 (2 * HTP_ENTRY_MAX_LAYERS balance layers)}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 131072 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

// 2^20 + 1 heads of one channel on a rank: more units than the runtime takes.
func.func @attention_units_limit(%x: tensor<1x1x1xf32>, %wqkv: tensor<3145731x1xf32>, %bqkv: tensor<3145731xf32>, %wp: tensor<1x1048577xf32>) -> tensor<1x1x1xf32> {
  // expected-error @+1 {{num_heads (1048577) of a balanced attention must be at most 2^20 (HTP_ENTRY_MAX_UNITS units per rank: the planner's units_per_rank)}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 1048577 : i64, pair = 0 : i64} : (tensor<1x1x1xf32>, tensor<3145731x1xf32>, tensor<3145731xf32>, tensor<1x1048577xf32>) -> tensor<1x1x1xf32>
  return %y : tensor<1x1x1xf32>
}

// -----

func.func @mlp_pair_limit(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %w2: tensor<8x10xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{pair (9223372036854775807) must be below 2^17}}
  %y = htp.mlp %x, %w1, %w2 {pair = 9223372036854775807 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @mlp_units_limit(%x: tensor<1x1xf32>, %w1: tensor<1048577x1xf32>, %w2: tensor<1x1048577xf32>) -> tensor<1x1xf32> {
  // expected-error @+1 {{hidden width / unit_width (1048577 / 1 = 1048577 units) must be at most 2^20 (HTP_ENTRY_MAX_UNITS: the planner's units_per_rank)}}
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 1 : i64} : (tensor<1x1xf32>, tensor<1048577x1xf32>, tensor<1x1048577xf32>) -> tensor<1x1xf32>
  return %y : tensor<1x1xf32>
}

// -----

func.func @mlp_unit_width_zero(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %w2: tensor<8x10xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{attribute 'unit_width' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 0 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// expected-error @+1 {{'htp.tp' must be an integer from 1 to 1024 (HTP_ENTRY_MAX_TP), got 4611686018427387904 : i64}}
func.func @tp_huge(%x: tensor<4xf32>) -> tensor<4xf32> attributes {htp.tp = 4611686018427387904 : i64} {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #1 ('htp.param') has dim 0 = 4294967296, above 2^31-1}}
func.func @param_dim_limit(%x: tensor<4xf32>, %w: tensor<4294967296xf32> {htp.param = "w"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #0 ('htp.input') has rank 9, above 8 (HTP_ENTRY_MAX_RANK)}}
func.func @input_rank_limit(%x: tensor<1x1x1x1x1x1x1x1x1xf32> {htp.input = "x"}) -> tensor<1x1x1x1x1x1x1x1x1xf32> {
  return %x : tensor<1x1x1x1x1x1x1x1x1xf32>
}

// -----
// Zero-sized dims: refused in every op (no kernel runs over nothing).

// A linear with no input features would leave its result uninitialised.
func.func @zero_linear_in_features(%x: tensor<2x0xf32>, %w: tensor<7x0xf32>, %b: tensor<7xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{operand #0 has a zero-sized dim (dim 1 of [2x0]); htp tensors are not empty}}
  %y = htp.linear %x, %w, %b : (tensor<2x0xf32>, tensor<7x0xf32>, tensor<7xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @zero_linear_out_features(%x: tensor<2x12xf32>, %w: tensor<0x12xf32>) -> tensor<2x0xf32> {
  // expected-error @+1 {{operand #1 has a zero-sized dim (dim 0 of [0x12])}}
  %y = htp.linear %x, %w : (tensor<2x12xf32>, tensor<0x12xf32>) -> tensor<2x0xf32>
  return %y : tensor<2x0xf32>
}

// -----

func.func @zero_attention_tokens(%x: tensor<2x0x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                 %wp: tensor<12x12xf32>) -> tensor<2x0x12xf32> {
  // expected-error @+1 {{operand #0 has a zero-sized dim (dim 1 of [2x0x12])}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64}
      : (tensor<2x0x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x0x12xf32>
  return %y : tensor<2x0x12xf32>
}

// -----

func.func @zero_attention_heads(%x: tensor<2x5x12xf32>, %wqkv: tensor<0x12xf32>, %bqkv: tensor<0xf32>,
                                %wp: tensor<12x0xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{operand #1 has a zero-sized dim (dim 0 of [0x12])}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<0x12xf32>, tensor<0xf32>, tensor<12x0xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @zero_norm(%x: tensor<4x0xf32>, %g: tensor<0xf32>, %b: tensor<0xf32>) -> tensor<4x0xf32> {
  // expected-error @+1 {{operand #0 has a zero-sized dim (dim 1 of [4x0])}}
  %y = htp.layer_norm %x, %g, %b : (tensor<4x0xf32>, tensor<0xf32>, tensor<0xf32>) -> tensor<4x0xf32>
  return %y : tensor<4x0xf32>
}

// -----

func.func @zero_gelu(%x: tensor<0x12xf32>) -> tensor<0x12xf32> {
  // expected-error @+1 {{operand #0 has a zero-sized dim (dim 0 of [0x12])}}
  %y = htp.gelu %x : tensor<0x12xf32>
  return %y : tensor<0x12xf32>
}

// -----

func.func @zero_add(%a: tensor<3x0xf32>) -> tensor<3x0xf32> {
  // expected-error @+1 {{operand #0 has a zero-sized dim (dim 1 of [3x0])}}
  %y = htp.add %a, %a : tensor<3x0xf32>
  return %y : tensor<3x0xf32>
}

// -----

func.func @zero_mlp(%x: tensor<3x8xf32>, %w1: tensor<0x8xf32>, %w2: tensor<8x0xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{operand #1 has a zero-sized dim (dim 0 of [0x8])}}
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<0x8xf32>, tensor<8x0xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @zero_bias_add(%x: tensor<0x5x12xf32>, %b: tensor<12xf32>) -> tensor<0x5x12xf32> {
  // expected-error @+1 {{operand #0 has a zero-sized dim (dim 0 of [0x5x12])}}
  %y = htp.bias_add %x, %b : tensor<0x5x12xf32>, tensor<12xf32>
  return %y : tensor<0x5x12xf32>
}

// -----

func.func @zero_all_reduce(%x: tensor<0xf32>) -> tensor<0xf32> {
  // expected-error @+1 {{operand #0 has a zero-sized dim (dim 0 of [0])}}
  %y = htp.all_reduce %x : tensor<0xf32>
  return %y : tensor<0xf32>
}

// -----

// expected-error @+1 {{argument #1 ('htp.param') has a zero-sized dim (dim 1 of [7x0])}}
func.func @zero_param(%x: tensor<2x12xf32>, %w: tensor<7x0xf32> {htp.param = "head.weight"}) -> tensor<2x12xf32> {
  return %x : tensor<2x12xf32>
}

// -----

// expected-error @+1 {{argument #0 ('htp.input') has a zero-sized dim (dim 0 of [0x12])}}
func.func @zero_input(%x: tensor<0x12xf32> {htp.input = "x"}) -> tensor<0x12xf32> {
  return %x : tensor<0x12xf32>
}

// -----

func.func @linear_residual_shape(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>, %r: tensor<2x12xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{residual must have the result's type [2x7], got [2x12]}}
  %y = htp.linear %x, %w residual %r : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<2x12xf32>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @linear_residual_gelu(%x: tensor<2x12xf32>, %w: tensor<12x12xf32>) -> tensor<2x12xf32> {
  // expected-error @+1 {{has both a gelu and a residual}}
  %y = htp.linear %x, %w gelu none residual %x : (tensor<2x12xf32>, tensor<12x12xf32>, tensor<2x12xf32>) -> tensor<2x12xf32>
  return %y : tensor<2x12xf32>
}

// -----

func.func @linear_residual_type(%x: tensor<2x12xf32>, %w: tensor<12x12xf32>, %r: tensor<2x12xbf16>) -> tensor<2x12xf32> {
  // expected-error @+1 {{residual has element type bf16 but input has f32}}
  %y = htp.linear %x, %w residual %r : (tensor<2x12xf32>, tensor<12x12xf32>, tensor<2x12xbf16>) -> tensor<2x12xf32>
  return %y : tensor<2x12xf32>
}

// -----

func.func @attention_residual_shape(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                    %wp: tensor<12x12xf32>, %r: tensor<2x4x12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{residual must have the result's type [2x5x12], got [2x4x12]}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp residual %r {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x4x12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @attention_residual_pair(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                   %wp: tensor<12x12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{its residual must be added after the all-reduce}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp residual %x {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}
