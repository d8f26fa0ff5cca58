// RUN: %htp-opt %s -split-input-file -verify-diagnostics
// A block is all f32 or all bf16: each op names the operand (or the result)
// whose element type differs from its first operand's. And the byte limit
// of a bf16 tensor counts 2 bytes per element.

func.func @linear_weight_f32(%x: tensor<2x12xbf16>, %w: tensor<7x12xf32>) -> tensor<2x7xbf16> {
  // expected-error @+1 {{'htp.linear' op weight has element type f32 but input has bf16 (an htp block is all f32 or all bf16)}}
  %y = htp.linear %x, %w : (tensor<2x12xbf16>, tensor<7x12xf32>) -> tensor<2x7xbf16>
  return %y : tensor<2x7xbf16>
}

// -----

func.func @linear_bias_bf16(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>, %b: tensor<7xbf16>) -> tensor<2x7xf32> {
  // expected-error @+1 {{'htp.linear' op bias has element type bf16 but input has f32}}
  %y = htp.linear %x, %w, %b : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<7xbf16>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @linear_result(%x: tensor<2x12xbf16>, %w: tensor<7x12xbf16>) -> tensor<2x7xf32> {
  // expected-error @+1 {{'htp.linear' op result has element type f32 but input has bf16}}
  %y = htp.linear %x, %w : (tensor<2x12xbf16>, tensor<7x12xbf16>) -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @attention_proj_bias(%x: tensor<2x5x12xbf16>, %wqkv: tensor<36x12xbf16>, %bqkv: tensor<36xbf16>,
                               %wp: tensor<12x12xbf16>, %bp: tensor<12xf32>) -> tensor<2x5x12xbf16> {
  // expected-error @+1 {{'htp.attention' op proj bias has element type f32 but input has bf16}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<2x5x12xbf16>, tensor<36x12xbf16>, tensor<36xbf16>, tensor<12x12xbf16>, tensor<12xf32>) -> tensor<2x5x12xbf16>
  return %y : tensor<2x5x12xbf16>
}

// -----

func.func @attention_qkv_weight(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xbf16>, %bqkv: tensor<36xf32>,
                                %wp: tensor<12x12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{'htp.attention' op qkv weight has element type bf16 but input has f32}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xbf16>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @layer_norm_weight(%x: tensor<3x8xbf16>, %g: tensor<8xf32>, %b: tensor<8xbf16>) -> tensor<3x8xbf16> {
  // expected-error @+1 {{'htp.layer_norm' op weight has element type f32 but input has bf16}}
  %y = htp.layer_norm %x, %g, %b : (tensor<3x8xbf16>, tensor<8xf32>, tensor<8xbf16>) -> tensor<3x8xbf16>
  return %y : tensor<3x8xbf16>
}

// -----

func.func @mlp_fc2_weight(%x: tensor<3x8xbf16>, %w1: tensor<10x8xbf16>, %w2: tensor<8x10xf32>) -> tensor<3x8xbf16> {
  // expected-error @+1 {{'htp.mlp' op fc2 weight has element type f32 but input has bf16}}
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xbf16>, tensor<10x8xbf16>, tensor<8x10xf32>) -> tensor<3x8xbf16>
  return %y : tensor<3x8xbf16>
}

// -----

func.func @mlp_fc1_bias(%x: tensor<3x8xbf16>, %w1: tensor<10x8xbf16>, %w2: tensor<8x10xbf16>, %b1: tensor<10xf32>) -> tensor<3x8xbf16> {
  // expected-error @+1 {{'htp.mlp' op fc1 bias has element type f32 but input has bf16}}
  %y = htp.mlp %x, %w1, %w2 fc1_bias(%b1) {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xbf16>, tensor<10x8xbf16>, tensor<8x10xbf16>, tensor<10xf32>) -> tensor<3x8xbf16>
  return %y : tensor<3x8xbf16>
}

// -----

func.func @bias_add_bias(%x: tensor<3x8xbf16>, %b: tensor<8xf32>) -> tensor<3x8xbf16> {
  // expected-error @+1 {{'htp.bias_add' op bias has element type f32 but input has bf16}}
  %y = htp.bias_add %x, %b : tensor<3x8xbf16>, tensor<8xf32>
  return %y : tensor<3x8xbf16>
}

// -----

// The custom forms of add, gelu and all_reduce spell one type; the generic
// form can mix them, and the element check speaks before the
// same-type trait's plainer message (all_reduce's types, tied by a
// type-matching trait that the parser infers from, are checked first).
func.func @add_rhs(%a: tensor<3x8xbf16>, %b: tensor<3x8xf32>) -> tensor<3x8xbf16> {
  // expected-error @+1 {{'htp.add' op rhs has element type f32 but lhs has bf16}}
  %y = "htp.add"(%a, %b) : (tensor<3x8xbf16>, tensor<3x8xf32>) -> tensor<3x8xbf16>
  return %y : tensor<3x8xbf16>
}

// -----

func.func @gelu_result(%x: tensor<3x8xbf16>) -> tensor<3x8xf32> {
  // expected-error @+1 {{'htp.gelu' op result has element type f32 but input has bf16}}
  %y = "htp.gelu"(%x) : (tensor<3x8xbf16>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @all_reduce_result(%x: tensor<3x8xf32>) -> tensor<3x8xbf16> {
  // expected-error @+1 {{'htp.all_reduce' op failed to verify that all of {input, result} have same type}}
  %y = "htp.all_reduce"(%x) <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (tensor<3x8xf32>) -> tensor<3x8xbf16>
  return %y : tensor<3x8xbf16>
}

// -----

// Only f32 and bf16: f16 is refused by the type constraint, which names both.
func.func @f16(%x: tensor<3x8xf16>) -> tensor<3x8xf16> {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type values, but got 'tensor<3x8xf16>'}}
  %y = htp.gelu %x : tensor<3x8xf16>
  return %y : tensor<3x8xf16>
}

// -----

// 2^20 * (2^20 + 1) bf16 elements: 2^41 + 2^21 bytes, just over 2^40.
func.func @bf16_bytes_limit(%a: tensor<524288x1048577xbf16>) -> tensor<524288x1048577xbf16> {
  // expected-error @+1 {{operand #0 [524288x1048577] holds more than 2^40 bytes of bf16 (HTP_ENTRY_MAX_TENSOR_BYTES)}}
  %y = htp.add %a, %a : tensor<524288x1048577xbf16>
  return %y : tensor<524288x1048577xbf16>
}

// -----

// A bf16 parameter's global tensor (dim 1 times 1024 parts) past 2^40 bytes.
// expected-error @+1 {{argument #0's global tensor (dim 1 times 1024 parts) [524288x1049600] holds more than 2^40 bytes of bf16 (HTP_ENTRY_MAX_TENSOR_BYTES)}}
func.func @bf16_shard_global_bytes(%w: tensor<524288x1025xbf16> {htp.shard = #htp.shard<dim = 1, parts = 1024, layout = blocks>}) -> tensor<524288x1025xbf16> {
  return %w : tensor<524288x1025xbf16>
}

// -----

// Regression: sizing an htp.param of a type the ops do not take (index,
// complex) asserted once the byte limit counted element sizes; it counts
// 8 bytes per index: 2^18 * (2^19 + 1) of them are just over 2^40.
// expected-error @+1 {{argument #1 ('htp.param') [262144x524289] holds more than 2^40 bytes of index (HTP_ENTRY_MAX_TENSOR_BYTES)}}
func.func @index_param(%c: tensor<4xcomplex<f32>> {htp.param = "c"}, %i: tensor<262144x524289xindex> {htp.param = "i"}) -> tensor<4xcomplex<f32>> {
  return %c : tensor<4xcomplex<f32>>
}
