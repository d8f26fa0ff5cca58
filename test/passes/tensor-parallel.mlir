// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=2 | FileCheck %s
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=1 | FileCheck %s --check-prefix=TP1

// Attention keeps half the heads: qkv rows by heads within each of q|k|v,
// proj columns; the projection loses its bias, which follows the all-reduce.
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x5x12xf32>
// CHECK-SAME: %[[WQKV:[^:]*]]: tensor<18x12xf32> {htp.param = "blocks.0.attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv>}
// CHECK-SAME: %[[BQKV:[^:]*]]: tensor<18xf32> {htp.param = "blocks.0.attn.qkv.bias", htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv>}
// CHECK-SAME: %[[WPROJ:[^:]*]]: tensor<12x6xf32> {htp.param = "blocks.0.attn.proj.weight", htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>}
// CHECK-SAME: %[[BPROJ:[^:]*]]: tensor<12xf32> {htp.param = "blocks.0.attn.proj.bias"})
// CHECK-SAME: attributes {htp.tp = 2 : i64}
// CHECK-NEXT: %[[PART:.+]] = htp.attention %[[X]], %[[WQKV]], %[[BQKV]], %[[WPROJ]] {num_heads = 2 : i64} : (tensor<2x5x12xf32>, tensor<18x12xf32>, tensor<18xf32>, tensor<12x6xf32>) -> tensor<2x5x12xf32>
// CHECK-NEXT: %[[SUM:.+]] = htp.all_reduce %[[PART]] : tensor<2x5x12xf32>
// CHECK-NEXT: %[[Y:.+]] = htp.bias_add %[[SUM]], %[[BPROJ]] : tensor<2x5x12xf32>, tensor<12xf32>
// CHECK-NEXT: return %[[Y]]
// TP1-LABEL: func.func @attention(
// TP1-NOT: htp.shard
// TP1: htp.attention %{{.*}} {num_heads = 4 : i64}
// TP1-NOT: htp.all_reduce
func.func @attention(%x: tensor<2x5x12xf32>,
    %wqkv: tensor<36x12xf32> {htp.param = "blocks.0.attn.qkv.weight"},
    %bqkv: tensor<36xf32> {htp.param = "blocks.0.attn.qkv.bias"},
    %wproj: tensor<12x12xf32> {htp.param = "blocks.0.attn.proj.weight"},
    %bproj: tensor<12xf32> {htp.param = "blocks.0.attn.proj.bias"}) -> tensor<2x5x12xf32> {
  %y = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 4 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

// The MLP pair: fc1 keeps half its rows (and bias), the GELU runs on the
// local neurons, fc2 half its columns; fc2's bias follows the all-reduce.
// A linear outside a pair (the head) stays whole on every rank.
// CHECK-LABEL: func.func @mlp(
// CHECK-SAME: %[[X:[^:]*]]: tensor<3x8xf32>
// CHECK-SAME: %[[W1:[^:]*]]: tensor<10x8xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>}
// CHECK-SAME: %[[B1:[^:]*]]: tensor<10xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>}
// CHECK-SAME: %[[W2:[^:]*]]: tensor<8x10xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>}
// CHECK-SAME: %[[B2:[^:]*]]: tensor<8xf32>,
// CHECK-SAME: %[[WH:[^:]*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[H:.+]] = htp.linear %[[X]], %[[W1]], %[[B1]] : (tensor<3x8xf32>, tensor<10x8xf32>, tensor<10xf32>) -> tensor<3x10xf32>
// CHECK-NEXT: %[[G:.+]] = htp.gelu %[[H]] approximate tanh : tensor<3x10xf32>
// CHECK-NEXT: %[[P:.+]] = htp.linear %[[G]], %[[W2]] : (tensor<3x10xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
// CHECK-NEXT: %[[S:.+]] = htp.all_reduce %[[P]] : tensor<3x8xf32>
// CHECK-NEXT: %[[Y:.+]] = htp.bias_add %[[S]], %[[B2]] : tensor<3x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[OUT:.+]] = htp.linear %[[Y]], %[[WH]] : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x4xf32>
// CHECK-NEXT: return %[[OUT]]
func.func @mlp(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %b1: tensor<20xf32>,
               %w2: tensor<8x20xf32>, %b2: tensor<8xf32>, %wh: tensor<4x8xf32>) -> tensor<3x4xf32> {
  %h = htp.linear %x, %w1, %b1 : (tensor<3x8xf32>, tensor<20x8xf32>, tensor<20xf32>) -> tensor<3x20xf32>
  %g = htp.gelu %h approximate tanh : tensor<3x20xf32>
  %y = htp.linear %g, %w2, %b2 : (tensor<3x20xf32>, tensor<8x20xf32>, tensor<8xf32>) -> tensor<3x8xf32>
  %out = htp.linear %y, %wh : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x4xf32>
  return %out : tensor<3x4xf32>
}

// -----

// A hidden activation read twice is not a private column→row chain: both
// linears stay whole (correct, just not split).
// CHECK-LABEL: func.func @shared_hidden(
// CHECK-NOT: htp.shard
// CHECK-NOT: htp.all_reduce
// CHECK: return
func.func @shared_hidden(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %w2: tensor<8x20xf32>) -> (tensor<3x8xf32>, tensor<3x20xf32>) {
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
  %y = htp.linear %h, %w2 : (tensor<3x20xf32>, tensor<8x20xf32>) -> tensor<3x8xf32>
  return %y, %h : tensor<3x8xf32>, tensor<3x20xf32>
}

// -----

// A linear whose GELU is already fused is a column half (the GELU is per
// neuron: @fused_column) but never a row half, whose GELU would have to
// follow a partial sum (@fused_row: nothing splits).
// CHECK-LABEL: func.func @fused_column(
// CHECK-SAME: %{{[^:]*}}: tensor<10x8xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>}
// CHECK-SAME: %{{[^:]*}}: tensor<8x10xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>}
// CHECK: htp.linear %{{.*}} gelu none : (tensor<3x8xf32>, tensor<10x8xf32>) -> tensor<3x10xf32>
// CHECK: htp.all_reduce
func.func @fused_column(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>,
                        %w2: tensor<8x20xf32>) -> tensor<3x8xf32> {
  %h = htp.linear %x, %w1 gelu none : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
  %y = htp.linear %h, %w2 : (tensor<3x20xf32>, tensor<8x20xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// CHECK-LABEL: func.func @fused_row(
// CHECK-NOT: htp.shard
// CHECK: htp.linear %{{.*}} : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
// CHECK-NEXT: htp.linear %{{.*}} gelu tanh : (tensor<3x20xf32>, tensor<6x20xf32>) -> tensor<3x6xf32>
// CHECK-NOT: htp.all_reduce
func.func @fused_row(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>,
                     %w2: tensor<6x20xf32>) -> tensor<3x6xf32> {
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
  %y = htp.linear %h, %w2 gelu tanh : (tensor<3x20xf32>, tensor<6x20xf32>) -> tensor<3x6xf32>
  return %y : tensor<3x6xf32>
}

// -----

// IR written with fused residuals: a partial sum cannot take one, so the
// attention's and the row half's residuals go onto the bias add after the
// all-reduce (y = sum + b + r in one op). A column half with a residual
// stays whole (its result is split; the residual is not).
// CHECK-LABEL: func.func @residuals(
// CHECK-SAME: %[[X:[^:]*]]: tensor<3x1x8xf32>
// CHECK: %[[PART:.+]] = htp.attention %[[X]], %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 1 : i64}
// CHECK-NEXT: %[[SUM:.+]] = htp.all_reduce %[[PART]]
// CHECK-NEXT: %[[A:.+]] = htp.bias_add %[[SUM]], %{{.*}} residual %[[X]] : tensor<3x1x8xf32>, tensor<8xf32>
// CHECK: %[[H:.+]] = htp.linear %[[A]], %{{.*}}, %{{.*}} :
// CHECK-NEXT: %[[G:.+]] = htp.gelu %[[H]]
// CHECK-NEXT: %[[P:.+]] = htp.linear %[[G]], %{{.*}} :
// CHECK-NEXT: %[[S:.+]] = htp.all_reduce %[[P]]
// CHECK-NEXT: %[[Z:.+]] = htp.bias_add %[[S]], %{{.*}} residual %[[A]]
// CHECK-NEXT: %[[C:.+]] = htp.linear %[[Z]], %{{.*}} residual %[[Z]] : (tensor<3x1x8xf32>, tensor<8x8xf32>, tensor<3x1x8xf32>)
// CHECK-NEXT: %[[G2:.+]] = htp.gelu %[[C]]
// CHECK-NEXT: %[[R:.+]] = htp.linear %[[G2]], %{{.*}} : (tensor<3x1x8xf32>, tensor<8x8xf32>)
// CHECK-NEXT: return %[[R]]
func.func @residuals(%x: tensor<3x1x8xf32>,
    %wqkv: tensor<24x8xf32> {htp.param = "attn.qkv.weight"},
    %bqkv: tensor<24xf32> {htp.param = "attn.qkv.bias"},
    %wp: tensor<8x8xf32> {htp.param = "attn.proj.weight"},
    %bp: tensor<8xf32> {htp.param = "attn.proj.bias"},
    %w1: tensor<20x8xf32>, %b1: tensor<20xf32>, %w2: tensor<8x20xf32>, %b2: tensor<8xf32>,
    %w3: tensor<8x8xf32>, %w4: tensor<8x8xf32>) -> tensor<3x1x8xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wp, %bp residual %x {num_heads = 2 : i64}
      : (tensor<3x1x8xf32>, tensor<24x8xf32>, tensor<24xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<3x1x8xf32>) -> tensor<3x1x8xf32>
  %h = htp.linear %a, %w1, %b1 : (tensor<3x1x8xf32>, tensor<20x8xf32>, tensor<20xf32>) -> tensor<3x1x20xf32>
  %g = htp.gelu %h : tensor<3x1x20xf32>
  %z = htp.linear %g, %w2, %b2 residual %a : (tensor<3x1x20xf32>, tensor<8x20xf32>, tensor<8xf32>, tensor<3x1x8xf32>) -> tensor<3x1x8xf32>
  %c = htp.linear %z, %w3 residual %z : (tensor<3x1x8xf32>, tensor<8x8xf32>, tensor<3x1x8xf32>) -> tensor<3x1x8xf32>
  %g2 = htp.gelu %c : tensor<3x1x8xf32>
  %r = htp.linear %g2, %w4 : (tensor<3x1x8xf32>, tensor<8x8xf32>) -> tensor<3x1x8xf32>
  return %r : tensor<3x1x8xf32>
}
