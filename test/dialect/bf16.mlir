// RUN: %htp-opt %s | %htp-opt | FileCheck %s
// Round trip of bf16 blocks: every htp op takes bf16 tensors when all its
// operands and its result are bf16; layer_norm's epsilon stays an f32 attr.

// CHECK-LABEL: func.func @linear
// CHECK-SAME: tensor<7x12xbf16> {htp.param = "head.weight"}
func.func @linear(%x: tensor<2x5x12xbf16> {htp.input = "x"},
                  %w: tensor<7x12xbf16> {htp.param = "head.weight"},
                  %b: tensor<7xbf16> {htp.param = "head.bias"}) -> tensor<2x5x7xbf16> {
  // CHECK: htp.linear %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x5x12xbf16>, tensor<7x12xbf16>, tensor<7xbf16>) -> tensor<2x5x7xbf16>
  %y = htp.linear %x, %w, %b : (tensor<2x5x12xbf16>, tensor<7x12xbf16>, tensor<7xbf16>) -> tensor<2x5x7xbf16>
  return %y : tensor<2x5x7xbf16>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%x: tensor<2x5x12xbf16>, %wqkv: tensor<36x12xbf16>, %bqkv: tensor<36xbf16>,
                     %wp: tensor<12x12xbf16>, %bp: tensor<12xbf16>) -> tensor<2x5x12xbf16> {
  // CHECK: htp.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 3 : i64} : (tensor<2x5x12xbf16>, tensor<36x12xbf16>, tensor<36xbf16>, tensor<12x12xbf16>, tensor<12xbf16>) -> tensor<2x5x12xbf16>
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<2x5x12xbf16>, tensor<36x12xbf16>, tensor<36xbf16>, tensor<12x12xbf16>, tensor<12xbf16>) -> tensor<2x5x12xbf16>
  return %y : tensor<2x5x12xbf16>
}

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<3x8xbf16>, %g: tensor<8xbf16>, %b: tensor<8xbf16>) -> tensor<3x8xbf16> {
  // CHECK: htp.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 9.99999974E-6 : f32} : (tensor<3x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> tensor<3x8xbf16>
  %n = htp.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f32} : (tensor<3x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> tensor<3x8xbf16>
  // CHECK: htp.gelu %{{.*}} approximate tanh : tensor<3x8xbf16>
  %a = htp.gelu %n approximate tanh : tensor<3x8xbf16>
  // CHECK: htp.add %{{.*}}, %{{.*}} : tensor<3x8xbf16>
  %r = htp.add %x, %a : tensor<3x8xbf16>
  // CHECK: htp.all_reduce %{{.*}} : tensor<3x8xbf16>
  %s = htp.all_reduce %r : tensor<3x8xbf16>
  // CHECK: htp.bias_add %{{.*}}, %{{.*}} : tensor<3x8xbf16>, tensor<8xbf16>
  %t = htp.bias_add %s, %b : tensor<3x8xbf16>, tensor<8xbf16>
  return %t : tensor<3x8xbf16>
}

// CHECK-LABEL: func.func @mlp
func.func @mlp(%x: tensor<3x8xbf16>, %w1: tensor<10x8xbf16>, %w2: tensor<8x10xbf16>, %b1: tensor<10xbf16>) -> tensor<3x8xbf16> {
  // CHECK: htp.mlp %{{.*}}, %{{.*}}, %{{.*}} fc1_bias(%{{.*}}) {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xbf16>, tensor<10x8xbf16>, tensor<8x10xbf16>, tensor<10xbf16>) -> tensor<3x8xbf16>
  %y = htp.mlp %x, %w1, %w2 fc1_bias(%b1) {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xbf16>, tensor<10x8xbf16>, tensor<8x10xbf16>, tensor<10xbf16>) -> tensor<3x8xbf16>
  return %y : tensor<3x8xbf16>
}

// The byte limit counts 2 bytes per bf16 element: 2^19 * 2^20 elements are
// exactly 2^40 bytes, twice the elements an f32 tensor may hold. A shard's
// global tensor is counted the same way.
// CHECK-LABEL: func.func @bf16_at_byte_limit(
func.func @bf16_at_byte_limit(%a: tensor<524288x1048576xbf16> {htp.param = "a"},
                              %s: tensor<524288x1024xbf16> {htp.shard = #htp.shard<dim = 1, parts = 1024, layout = blocks>})
    -> tensor<524288x1048576xbf16> attributes {htp.tp = 1024 : i64} {
  // CHECK: htp.all_reduce {{.*}} : tensor<524288x1048576xbf16>
  %y = htp.all_reduce %a : tensor<524288x1048576xbf16>
  return %y : tensor<524288x1048576xbf16>
}
