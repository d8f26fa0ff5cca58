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
  // CHECK: htp.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {group = "tp"} : (tensor<4x12xf32>
  %g1 = htp.layer_norm %x, %g, %b {group = "tp"} : (tensor<4x12xf32>, tensor<12xf32>, tensor<12xf32>) -> tensor<4x12xf32>
  // CHECK: htp.gelu %{{.*}} : tensor<4x12xf32>
  %2 = htp.gelu %1 : tensor<4x12xf32>
  // CHECK: htp.gelu %{{.*}} approximate tanh : tensor<4x12xf32>
  %3 = htp.gelu %2 approximate tanh : tensor<4x12xf32>
  // CHECK: htp.add %{{.*}}, %{{.*}} : tensor<4x12xf32>
  %4 = htp.add %3, %x : tensor<4x12xf32>
  // CHECK: htp.all_reduce %{{.*}} : tensor<4x12xf32>
  %5 = htp.all_reduce %4 : tensor<4x12xf32>
  return %5 : tensor<4x12xf32>
}

// After the tensor-parallel split: a projection without bias, the bias added
// after the all-reduce, and the shard / tp attributes.
// CHECK-LABEL: func.func @split_forms(
// CHECK-SAME: htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>
// CHECK-SAME: attributes {htp.tp = 2 : i64}
func.func @split_forms(%x: tensor<2x5x12xf32>, %wqkv: tensor<18x12xf32>, %bqkv: tensor<18xf32>,
                       %wp: tensor<12x6xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>},
                       %bp: tensor<12xf32>) -> tensor<2x5x12xf32> attributes {htp.tp = 2 : i64} {
  // CHECK: htp.attention %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^ ]*}} {num_heads = 2 : i64} : (tensor<2x5x12xf32>, tensor<18x12xf32>, tensor<18xf32>, tensor<12x6xf32>) -> tensor<2x5x12xf32>
  %p = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<18x12xf32>, tensor<18xf32>, tensor<12x6xf32>) -> tensor<2x5x12xf32>
  %s = htp.all_reduce %p : tensor<2x5x12xf32>
  // CHECK: htp.bias_add %{{.*}}, %{{.*}} : tensor<2x5x12xf32>, tensor<12xf32>
  %y = htp.bias_add %s, %bp : tensor<2x5x12xf32>, tensor<12xf32>
  // CHECK: htp.bias_add %{{.*}}, %{{.*}} residual %[[X:[^ ]*]] : tensor<2x5x12xf32>, tensor<12xf32>
  %z = htp.bias_add %s, %bp residual %y : tensor<2x5x12xf32>, tensor<12xf32>
  // CHECK: htp.all_reduce %{{[^ ]*}} bias %{{[^ ]*}} residual %{{[^ ]*}} {group = "g"} : tensor<2x5x12xf32>, tensor<12xf32>
  %a = htp.all_reduce %p bias %bp residual %z {group = "g"} : tensor<2x5x12xf32>, tensor<12xf32>
  // CHECK: htp.all_reduce %{{[^ ]*}} bias %{{[^ ]*}} : tensor<2x5x12xf32>, tensor<12xf32>
  %c = htp.all_reduce %p bias %bp : tensor<2x5x12xf32>, tensor<12xf32>
  // CHECK: htp.all_reduce %{{[^ ]*}} residual %{{[^ ]*}} : tensor<2x5x12xf32>{{$}}
  %d = htp.all_reduce %a residual %c : tensor<2x5x12xf32>
  // CHECK: %{{.*}}, %[[N:.*]] = htp.all_reduce_norm %{{[^ ]*}} bias %{{[^ ]*}} residual %{{[^ ]*}} norm %{{[^ ]*}}, %{{[^ ]*}} {epsilon = 9.99999974E-6 : f32} : tensor<2x5x12xf32>, tensor<12xf32>
  %e, %n = htp.all_reduce_norm %p bias %bp residual %d norm %bp, %bp {epsilon = 1.0e-05 : f32} : tensor<2x5x12xf32>, tensor<12xf32>
  // CHECK: htp.all_reduce_norm %{{[^ ]*}} norm %{{[^ ]*}}, %{{[^ ]*}} : tensor<2x5x12xf32>, tensor<12xf32>
  %f, %m = htp.all_reduce_norm %n norm %bp, %bp : tensor<2x5x12xf32>, tensor<12xf32>
  return %m : tensor<2x5x12xf32>
}

// Uneven shards with spare room: 2 and 1 heads of 3 channels owned, room
// for 3 on every rank (9 rows of each of q, k, v; the proj's 9 columns).
// CHECK-LABEL: func.func @spare_room(
// CHECK-SAME: tensor<27x12xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv, units = [2, 1], unit = 3>}
// CHECK-SAME: tensor<12x9xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks, units = [2, 1], unit = 3>}
func.func @spare_room(%x: tensor<2x5x12xf32>,
                      %wqkv: tensor<27x12xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv, units = [2, 1], unit = 3>},
                      %bqkv: tensor<27xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv, units = [2, 1], unit = 3>},
                      %wp: tensor<12x9xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks, units = [2, 1], unit = 3>})
    -> tensor<2x5x12xf32> attributes {htp.tp = 2 : i64} {
  %p = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<27x12xf32>, tensor<27xf32>, tensor<12x9xf32>) -> tensor<2x5x12xf32>
  %s = htp.all_reduce %p : tensor<2x5x12xf32>
  return %s : tensor<2x5x12xf32>
}

// The fused MLP pair the balance hooks make (fc1 bias optional).
// CHECK-LABEL: func.func @mlp_pair(
func.func @mlp_pair(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %b1: tensor<10xf32>, %w2: tensor<8x10xf32>) -> tensor<3x8xf32> {
  // CHECK: htp.mlp %{{.*}}, %{{.*}}, %{{.*}} fc1_bias(%{{.*}}) approximate tanh {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>, tensor<10xf32>) -> tensor<3x8xf32>
  %y = htp.mlp %x, %w1, %w2 fc1_bias(%b1) approximate tanh {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>, tensor<10xf32>) -> tensor<3x8xf32>
  // CHECK: htp.mlp %{{.*}}, %{{.*}}, %{{.*}} {pair = 3 : i64, unit_width = 2 : i64}
  %z = htp.mlp %y, %w1, %w2 {pair = 3 : i64, unit_width = 2 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  return %z : tensor<3x8xf32>
}

// The enum attributes: approximate prints as a keyword in the op and as
// #htp<approximate ...> in an attribute dictionary (both parse); none, the
// default, is not printed. Shards print their fields in one order, whatever
// order they were written in.
// CHECK-LABEL: func.func @attributes(
// CHECK-SAME: htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv>
// CHECK-SAME: htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>
// CHECK-SAME: attributes {htp.tp = 2 : i64}
func.func @attributes(%x: tensor<2x5x12xf32>,
                      %wqkv: tensor<18x12xf32> {htp.param = "qkv.weight", htp.shard = #htp.shard<layout = qkv, parts = 2, dim = 0>},
                      %bqkv: tensor<18xf32>,
                      %wp: tensor<12x6xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>})
    -> tensor<2x5x12xf32> attributes {htp.tp = 2 : i64} {
  %p = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<18x12xf32>, tensor<18xf32>, tensor<12x6xf32>) -> tensor<2x5x12xf32>
  // CHECK: htp.gelu %{{.*}} approximate tanh : tensor<2x5x12xf32>
  %0 = htp.gelu %p {approximate = #htp<approximate tanh>} : tensor<2x5x12xf32>
  // CHECK-NEXT: htp.gelu %{{.*}} : tensor<2x5x12xf32>
  %1 = htp.gelu %0 approximate none : tensor<2x5x12xf32>
  // CHECK-NEXT: htp.gelu %{{.*}} : tensor<2x5x12xf32>
  %2 = "htp.gelu"(%1) {approximate = #htp<approximate none>} : (tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  return %2 : tensor<2x5x12xf32>
}

// CHECK-LABEL: func.func @mlp_approximate(
func.func @mlp_approximate(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %w2: tensor<8x10xf32>) -> tensor<3x8xf32> {
  // CHECK: htp.mlp %{{.*}}, %{{.*}}, %{{.*}} {pair = 1 : i64, unit_width = 5 : i64}
  %y = htp.mlp %x, %w1, %w2 approximate none {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  // CHECK: htp.mlp %{{.*}}, %{{.*}}, %{{.*}} approximate tanh {pair = 3 : i64, unit_width = 2 : i64}
  %z = htp.mlp %y, %w1, %w2 {approximate = #htp<approximate tanh>, pair = 3 : i64, unit_width = 2 : i64} : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  return %z : tensor<3x8xf32>
}

// At the limits, not over them: a dim of 2^31-1, rank 8, exactly 2^40 bytes.
// CHECK-LABEL: func.func @at_limits(
func.func @at_limits(%a: tensor<2147483647xf32> {htp.input = "a"},
                     %b: tensor<1x1x1x1x1x1x1x2xf32>,
                     %c: tensor<262144x1048576xf32> {htp.param = "c"})
    -> (tensor<2147483647xf32>, tensor<1x1x1x1x1x1x1x2xf32>, tensor<262144x1048576xf32>) {
  // CHECK: htp.add {{.*}} : tensor<2147483647xf32>
  %0 = htp.add %a, %a : tensor<2147483647xf32>
  // CHECK: htp.gelu {{.*}} : tensor<1x1x1x1x1x1x1x2xf32>
  %1 = htp.gelu %b : tensor<1x1x1x1x1x1x1x2xf32>
  // CHECK: htp.all_reduce {{.*}} : tensor<262144x1048576xf32>
  %2 = htp.all_reduce %c : tensor<262144x1048576xf32>
  return %0, %1, %2 : tensor<2147483647xf32>, tensor<1x1x1x1x1x1x1x2xf32>, tensor<262144x1048576xf32>
}

// A fused residual, on a linear (with and without a bias) and an attention.
// CHECK-LABEL: func.func @residuals
func.func @residuals(%x: tensor<2x5x12xf32>, %w: tensor<12x12xf32>, %b: tensor<12xf32>,
                     %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>) -> tensor<2x5x12xf32> {
  // CHECK: htp.linear %{{.*}}, %{{.*}}, %{{.*}} residual %{{.*}} : (tensor<2x5x12xf32>, tensor<12x12xf32>, tensor<12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  %y = htp.linear %x, %w, %b residual %x : (tensor<2x5x12xf32>, tensor<12x12xf32>, tensor<12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  // CHECK: htp.linear %{{.*}}, %{{.*}} residual %{{.*}} : (tensor<2x5x12xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  %z = htp.linear %y, %w residual %y : (tensor<2x5x12xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  // CHECK: htp.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} residual %{{.*}} {num_heads = 3 : i64}
  %a = htp.attention %z, %wqkv, %bqkv, %w, %b residual %z {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  // CHECK: htp.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} residual %{{.*}} {num_heads = 3 : i64}
  %c = htp.attention %a, %wqkv, %bqkv, %w residual %a {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  return %c : tensor<2x5x12xf32>
}
