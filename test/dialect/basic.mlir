// RUN: %htp-opt %s | %htp-opt | FileCheck %s
// Round trip: every htp op prints in its custom form and parses back.

// CHECK-LABEL: func.func @linear
// CHECK-SAME: {htp.param = "head.weight"}
func.func @linear(%x: tensor<2x5x12xf32> {htp.input = "x"},
                  %w: tensor<7x12xf32> {htp.param = "head.weight"},
                  %b: tensor<7xf32> {htp.param = "head.bias"}) -> tensor<2x5x7xf32> {
  // CHECK: htp.linear %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<7xf32>) -> tensor<2x5x7xf32>
  %y = htp.linear %x, %w, %b : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<7xf32>) -> tensor<2x5x7xf32>
  return %y : tensor<2x5x7xf32>
}

// CHECK-LABEL: func.func @linear_no_bias
func.func @linear_no_bias(%x: tensor<3x12xf32>, %w: tensor<7x12xf32>) -> tensor<3x7xf32> {
  // CHECK: htp.linear %{{.*}}, %{{.*}} : (tensor<3x12xf32>, tensor<7x12xf32>) -> tensor<3x7xf32>
  %y = htp.linear %x, %w : (tensor<3x12xf32>, tensor<7x12xf32>) -> tensor<3x7xf32>
  return %y : tensor<3x7xf32>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                     %wp: tensor<12x12xf32>, %bp: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // CHECK: htp.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 3 : i64}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// A tensor-parallel shard: 1 of 3 heads, so the proj weight is [dim, head_dim].
// CHECK-LABEL: func.func @attention_shard
func.func @attention_shard(%x: tensor<2x5x12xf32>, %wqkv: tensor<12x12xf32>, %bqkv: tensor<12xf32>,
                           %wp: tensor<12x4xf32>, %bp: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // CHECK: htp.attention {{.*}} {num_heads = 1 : i64}
  %y = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 1 : i64}
      : (tensor<2x5x12xf32>, tensor<12x12xf32>, tensor<12xf32>, tensor<12x4xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// The default epsilon and approximation are not printed; others are.
// CHECK-LABEL: func.func @norm_gelu_add_reduce
func.func @norm_gelu_add_reduce(%x: tensor<4x12xf32>, %g: tensor<12xf32>, %b: tensor<12xf32>) -> tensor<4x12xf32> {
  // CHECK: htp.layer_norm %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x12xf32>
  %0 = htp.layer_norm %x, %g, %b : (tensor<4x12xf32>, tensor<12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  // CHECK: htp.layer_norm {{.*}} {epsilon = 9.99999974E-6 : f32}
  %1 = htp.layer_norm %0, %g, %b {epsilon = 1.0e-5 : f32} : (tensor<4x12xf32>, tensor<12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  // CHECK: htp.gelu %{{.*}} : tensor<4x12xf32>
  %2 = htp.gelu %1 : tensor<4x12xf32>
  // CHECK: htp.gelu %{{.*}} {approximate = "tanh"} : tensor<4x12xf32>
  %3 = htp.gelu %2 {approximate = "tanh"} : tensor<4x12xf32>
  // CHECK: htp.add %{{.*}}, %{{.*}} : tensor<4x12xf32>
  %4 = htp.add %3, %x : tensor<4x12xf32>
  // CHECK: htp.all_reduce %{{.*}} : tensor<4x12xf32>
  %5 = htp.all_reduce %4 : tensor<4x12xf32>
  return %5 : tensor<4x12xf32>
}

// After the tensor-parallel split: a projection without bias, the bias added
// after the all-reduce, and the shard / tp attributes.
// CHECK-LABEL: func.func @split_forms(
// CHECK-SAME: htp.shard = {dim = 1 : i64, layout = "blocks", parts = 2 : i64}
// CHECK-SAME: attributes {htp.tp = 2 : i64}
func.func @split_forms(%x: tensor<2x5x12xf32>, %wqkv: tensor<18x12xf32>, %bqkv: tensor<18xf32>,
                       %wp: tensor<12x6xf32> {htp.shard = {dim = 1 : i64, layout = "blocks", parts = 2 : i64}},
                       %bp: tensor<12xf32>) -> tensor<2x5x12xf32> attributes {htp.tp = 2 : i64} {
  // CHECK: htp.attention %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^ ]*}} {num_heads = 2 : i64} : (tensor<2x5x12xf32>, tensor<18x12xf32>, tensor<18xf32>, tensor<12x6xf32>) -> tensor<2x5x12xf32>
  %p = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<18x12xf32>, tensor<18xf32>, tensor<12x6xf32>) -> tensor<2x5x12xf32>
  %s = htp.all_reduce %p : tensor<2x5x12xf32>
  // CHECK: htp.bias_add %{{.*}}, %{{.*}} : tensor<2x5x12xf32>, tensor<12xf32>
  %y = htp.bias_add %s, %bp : tensor<2x5x12xf32>, tensor<12xf32>
  return %y : tensor<2x5x12xf32>
}

// The fused MLP pair the balance hooks make (fc1 bias optional).
// CHECK-LABEL: func.func @mlp_pair(
func.func @mlp_pair(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %b1: tensor<10xf32>, %w2: tensor<8x10xf32>) -> tensor<3x8xf32> {
  // CHECK: htp.mlp %{{.*}}, %{{.*}}, %{{.*}} fc1_bias(%{{.*}}) {approximate = "tanh", pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>, tensor<10xf32>) -> tensor<3x8xf32>
  %y = htp.mlp %x, %w1, %w2 fc1_bias(%b1) {approximate = "tanh", pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>, tensor<10xf32>) -> tensor<3x8xf32>
  // CHECK: htp.mlp %{{.*}}, %{{.*}}, %{{.*}} {pair = 3 : i64, unit_width = 2 : i64}
  %z = htp.mlp %y, %w1, %w2 {pair = 3 : i64, unit_width = 2 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  return %z : tensor<3x8xf32>
}
