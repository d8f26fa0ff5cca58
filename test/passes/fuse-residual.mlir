// RUN: %htp-opt %s -split-input-file --htp-fuse-residual | FileCheck %s
// RUN: %htp-opt %s -split-input-file --htp-fuse-residual --htp-assign-workspace --htp-lower-to-runtime -cse | FileCheck %s --check-prefix=LOWER
// RUN: %htp-opt %s -split-input-file --htp-fuse-residual | %htp-opt -split-input-file | FileCheck %s

// A block's two residual adds fold: the attention's (the residual on the
// left) and fc2's (on the right). The lowering makes one call each, the
// residual after the (proj) bias.
// CHECK-LABEL: func.func @block
// CHECK: %[[A:.*]] = htp.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} residual %[[X:[^ ]*]] {num_heads = 2 : i64}
// CHECK: %[[H:.*]] = htp.linear %[[A]], %{{.*}}, %{{.*}} gelu none
// CHECK: %[[Y:.*]] = htp.linear %[[H]], %{{.*}}, %{{.*}} residual %[[A]] :
// CHECK-NOT: htp.add
// CHECK: return %[[Y]]
// LOWER-LABEL: llvm.func @htp.entry.block(
// LOWER: llvm.call @htp_op_attention_residual_f32(%{{[^,]*}}, %[[IN:[^,]*]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[IN]], %[[ATT:[^,]*]],
// LOWER: llvm.call @htp_op_linear_gelu_f32(
// LOWER: llvm.call @htp_op_linear_residual_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[ATT]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}})
// LOWER-NOT: htp_op_add
func.func @block(%x: tensor<2x5x8xf32> {htp.input = "x"},
                 %wqkv: tensor<24x8xf32> {htp.param = "attn.qkv.weight"},
                 %bqkv: tensor<24xf32> {htp.param = "attn.qkv.bias"},
                 %wp: tensor<8x8xf32> {htp.param = "attn.proj.weight"},
                 %bp: tensor<8xf32> {htp.param = "attn.proj.bias"},
                 %w1: tensor<16x8xf32> {htp.param = "fc1.weight"},
                 %b1: tensor<16xf32> {htp.param = "fc1.bias"},
                 %w2: tensor<8x16xf32> {htp.param = "fc2.weight"},
                 %b2: tensor<8xf32> {htp.param = "fc2.bias"}) -> tensor<2x5x8xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wp, %bp {num_heads = 2 : i64}
      : (tensor<2x5x8xf32>, tensor<24x8xf32>, tensor<24xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %s = htp.add %x, %a : tensor<2x5x8xf32>
  %h = htp.linear %s, %w1, %b1 gelu none : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  %m = htp.linear %h, %w2, %b2 : (tensor<2x5x16xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %y = htp.add %m, %s : tensor<2x5x8xf32>
  return %y : tensor<2x5x8xf32>
}

// -----

// bf16 and no bias: htp_op_linear_residual_bf16 with a null bias.
// CHECK-LABEL: func.func @bf16
// CHECK: htp.linear %{{.*}}, %{{.*}} residual %{{.*}} : (tensor<4x8xbf16>, tensor<8x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
// LOWER-LABEL: llvm.func @htp.entry.bf16(
// LOWER: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// LOWER: llvm.call @htp_op_linear_residual_bf16(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[NULL]],
func.func @bf16(%x: tensor<4x8xbf16> {htp.input = "x"},
                %w: tensor<8x8xbf16> {htp.param = "w"}) -> tensor<4x8xbf16> {
  %l = htp.linear %x, %w : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  %y = htp.add %l, %x : tensor<4x8xbf16>
  return %y : tensor<4x8xbf16>
}

// -----

// Nothing folds: a linear read twice, a linear with a fused GELU, an add of
// a value with itself, and a residual computed only after the linear.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: residual
// CHECK-COUNT-4: htp.add
// LOWER-LABEL: llvm.func @htp.entry.kept(
// LOWER-NOT: llvm.call @htp_op_{{[a-z]*}}_residual
func.func @kept(%x: tensor<4x8xf32> {htp.input = "x"},
                %w: tensor<8x8xf32> {htp.param = "w"})
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %l = htp.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = htp.add %l, %x : tensor<4x8xf32>
  %b = htp.add %l, %a : tensor<4x8xf32>
  %g = htp.linear %x, %w gelu none : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %c = htp.add %g, %x : tensor<4x8xf32>
  %m = htp.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %n = htp.gelu %x : tensor<4x8xf32>
  %d = htp.add %m, %n : tensor<4x8xf32>
  return %a, %b, %c, %d : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Two single-use linears: the later one takes the earlier as its residual
// (the earlier cannot read a value computed after it).
// CHECK-LABEL: func.func @two
// CHECK: %[[P:.*]] = htp.linear %{{.*}}, %{{.*}} :
// CHECK: %[[Q:.*]] = htp.linear %{{.*}}, %{{.*}} residual %[[P]] :
// CHECK-NEXT: return %[[Q]]
// LOWER-LABEL: llvm.func @htp.entry.two(
// LOWER: llvm.call @htp_op_linear_residual_f32(
func.func @two(%x: tensor<4x8xf32> {htp.input = "x"},
               %w: tensor<8x8xf32> {htp.param = "w"}) -> tensor<4x8xf32> {
  %p = htp.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %q = htp.linear %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %y = htp.add %p, %q : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A row-parallel sum's bias add (after its all-reduce) takes the residual:
// y = sum + b + r, one call (either operand order); the argument order is
// x, bias, r, y, rows, cols. The all-reduce read by that bias add alone
// then takes both (htp.all_reduce ... bias b residual r): its call's
// arguments are ctx, x, bias, r, y, rows, cols.
// CHECK-LABEL: func.func @bias_add
// CHECK: %[[S:.*]] = htp.all_reduce %{{[^ ]*}} bias %{{[^ ]*}} residual %{{[^ ]*}} : tensor<2x5x8xf32>, tensor<8xf32>
// CHECK: %[[Z:.*]] = htp.bias_add %{{.*}}, %{{.*}} residual %[[S]] : tensor<2x5x8xf32>, tensor<8xf32>
// CHECK-NOT: htp.add
// CHECK: return %[[Z]]
// LOWER-LABEL: llvm.func @htp.entry.bias_add(
// LOWER: llvm.call @htp_allreduce_sum_bias_residual_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[Y:[^,]*]], %{{[^,]*}}, %{{[^,]*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64) -> i32
// LOWER: llvm.call @htp_op_bias_add_residual_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[Y]],
// LOWER-NOT: llvm.call @htp_op_add
func.func @bias_add(%x: tensor<2x5x8xf32> {htp.input = "x"}, %p: tensor<2x5x8xf32> {htp.input = "p"},
                    %b: tensor<8xf32> {htp.param = "b"}) -> tensor<2x5x8xf32> {
  %s = htp.all_reduce %p : tensor<2x5x8xf32>
  %t = htp.bias_add %s, %b : tensor<2x5x8xf32>, tensor<8xf32>
  %y = htp.add %t, %x : tensor<2x5x8xf32>
  %u = htp.bias_add %p, %b : tensor<2x5x8xf32>, tensor<8xf32>
  %z = htp.add %y, %u : tensor<2x5x8xf32>
  return %z : tensor<2x5x8xf32>
}

// -----

// An all-reduce takes a bias alone, or a residual alone (a bias-free
// row-parallel layer), each lowered with a null pointer for the other; one
// read twice (here by its bias add, which then takes it as its residual
// too), or whose bias add's residual comes after it, is left alone.
// CHECK-LABEL: func.func @all_reduce_parts
// CHECK: %[[A:.*]] = htp.all_reduce %{{[^ ]*}} bias %{{[^ ]*}} : tensor<2x8xf32>, tensor<8xf32>
// CHECK: %[[B:.*]] = htp.all_reduce %{{[^ ]*}} residual %[[A]] : tensor<2x8xf32>
// CHECK: %[[C:.*]] = htp.all_reduce %[[B]] : tensor<2x8xf32>
// CHECK: htp.bias_add %[[C]], %{{[^ ]*}} residual %[[C]] :
// CHECK: %[[D:.*]] = htp.all_reduce %{{[^ ]*}} : tensor<2x8xf32>
// CHECK: %[[E:.*]] = htp.linear
// CHECK: htp.bias_add %[[D]], %{{[^ ]*}} residual %[[E]] :
// LOWER-LABEL: llvm.func @htp.entry.all_reduce_parts(
// LOWER: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// LOWER: llvm.call @htp_allreduce_sum_bias_residual_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[NULL]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}})
// LOWER: llvm.call @htp_allreduce_sum_bias_residual_f32(%{{[^,]*}}, %{{[^,]*}}, %[[NULL]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}})
// LOWER: llvm.call @htp_allreduce_sum_f32(
func.func @all_reduce_parts(%p: tensor<2x8xf32> {htp.input = "p"}, %w: tensor<8x8xf32> {htp.param = "w"},
                            %b: tensor<8xf32> {htp.param = "b"})
    -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = htp.all_reduce %p : tensor<2x8xf32>
  %a = htp.bias_add %s, %b : tensor<2x8xf32>, tensor<8xf32>
  %t = htp.all_reduce %p : tensor<2x8xf32>
  %c = htp.add %t, %a : tensor<2x8xf32>
  %u = htp.all_reduce %c : tensor<2x8xf32>
  %d = htp.bias_add %u, %b : tensor<2x8xf32>, tensor<8xf32>
  %e = htp.add %u, %d : tensor<2x8xf32>
  %v = htp.all_reduce %p : tensor<2x8xf32>
  %l = htp.linear %p, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %f = htp.bias_add %v, %b : tensor<2x8xf32>, tensor<8xf32>
  %g = htp.add %f, %l : tensor<2x8xf32>
  return %a, %e, %g : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// A layer norm that reads an all-reduce's sum folds into it
// (htp.all_reduce_norm: the sum, still read by the residual add after it,
// and its norm), with the bias and residual the all-reduce took; one whose
// weights come after the all-reduce is left alone. The call's arguments:
// ctx, x, bias, residual, sum, weight, norm bias, normed, rows, cols,
// epsilon.
// CHECK-LABEL: func.func @norm
// CHECK: %[[S:.*]], %[[N:.*]] = htp.all_reduce_norm %{{[^ ]*}} bias %{{[^ ]*}} residual %{{[^ ]*}} norm %{{[^ ]*}}, %{{[^ ]*}} {epsilon = 9.99999974E-6 : f32} : tensor<2x8xf32>, tensor<8xf32>
// CHECK: %[[M:.*]] = htp.linear %[[N]], %{{[^ ]*}} residual %[[S]]
// CHECK: %[[T:.*]] = htp.all_reduce %[[M]] : tensor<2x8xf32>
// CHECK: %[[G:.*]] = htp.bias_add
// CHECK: htp.layer_norm %[[T]], %[[G]], %{{[^ ]*}}
// LOWER-LABEL: llvm.func @htp.entry.norm(
// LOWER: llvm.call @htp_allreduce_sum_norm_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, f32) -> i32
// LOWER: llvm.call @htp_allreduce_sum_f32(
// LOWER: llvm.call @htp_op_layer_norm_f32(
func.func @norm(%x: tensor<2x8xf32> {htp.input = "x"}, %p: tensor<2x8xf32> {htp.input = "p"},
                %b: tensor<8xf32> {htp.param = "b"}, %g: tensor<8xf32> {htp.param = "g"},
                %w: tensor<8x8xf32> {htp.param = "w"}) -> tensor<2x8xf32> {
  %s = htp.all_reduce %p : tensor<2x8xf32>
  %t = htp.bias_add %s, %b : tensor<2x8xf32>, tensor<8xf32>
  %y = htp.add %t, %x : tensor<2x8xf32>
  %n = htp.layer_norm %y, %g, %b {epsilon = 1.0e-05 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %l = htp.linear %n, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %z = htp.add %l, %y : tensor<2x8xf32>
  %u = htp.all_reduce %z : tensor<2x8xf32>
  %g2 = htp.bias_add %g, %b : tensor<8xf32>, tensor<8xf32>
  %v = htp.layer_norm %u, %g2, %b : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %v : tensor<2x8xf32>
}

// -----

// A 0-D all-reduce has no rows to add a residual to: the add stays (the
// fold made an all-reduce whose lowering read a last dim it lacks).
// CHECK-LABEL: func.func @scalar_all_reduce
// CHECK: %[[S:.*]] = htp.all_reduce %{{[^ ]*}} : tensor<f32>
// CHECK: htp.add %[[S]], %{{.*}} : tensor<f32>
// LOWER-LABEL: llvm.func @htp.entry.scalar_all_reduce(
// LOWER: llvm.call @htp_allreduce_sum_f32(
// LOWER: llvm.call @htp_op_add_f32(
func.func @scalar_all_reduce(%p: tensor<f32> {htp.input = "p"}, %r: tensor<f32> {htp.input = "r"}) -> tensor<f32> {
  %s = htp.all_reduce %p : tensor<f32>
  %y = htp.add %s, %r : tensor<f32>
  return %y : tensor<f32>
}

// -----

// A bias add read twice, or one that already has a residual, is left alone.
// CHECK-LABEL: func.func @bias_add_kept
// CHECK: %[[T:.*]] = htp.bias_add %{{[^ ]*}}, %{{[^ ]*}} :
// CHECK: htp.add %[[T]], %{{.*}}
// CHECK: htp.bias_add %{{.*}}, %{{.*}} residual %{{.*}} :
// CHECK: htp.add
// LOWER-LABEL: llvm.func @htp.entry.bias_add_kept(
func.func @bias_add_kept(%x: tensor<2x8xf32> {htp.input = "x"}, %b: tensor<8xf32> {htp.param = "b"})
    -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %t = htp.bias_add %x, %b : tensor<2x8xf32>, tensor<8xf32>
  %y = htp.add %t, %x : tensor<2x8xf32>
  %f = htp.bias_add %x, %b residual %x : tensor<2x8xf32>, tensor<8xf32>
  %z = htp.add %f, %x : tensor<2x8xf32>
  return %t, %y, %z : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// In a split function (its all-reduces name the group) a norm of an
// htp.input argument, which every rank holds alike, takes the group: its
// ranks share its rows (htp_group_layer_norm_f32, the layer norm's
// arguments). A norm of a parameter, of a computed value, or one that
// already names a group is left as it is.
// CHECK-LABEL: func.func @group_norm
// CHECK: htp.layer_norm %arg0, %arg2, %arg3 {epsilon = 9.99999974E-6 : f32, group = "tp"}
// CHECK: htp.layer_norm %arg2, %arg2, %arg3 :
// CHECK: htp.layer_norm %{{[^ ]*}}, %arg2, %arg3 :
// CHECK: htp.layer_norm %arg0, %arg2, %arg3 {group = "other"}
// LOWER-LABEL: llvm.func @htp.entry.group_norm(
// LOWER: llvm.call @htp_group_layer_norm_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, f32) -> i32
// LOWER: llvm.call @htp_op_layer_norm_f32(
// LOWER: llvm.call @htp_op_layer_norm_f32(
// LOWER: llvm.call @htp_group_layer_norm_f32(
func.func @group_norm(%x: tensor<2x8xf32> {htp.input = "x"}, %p: tensor<2x8xf32> {htp.input = "p"},
                      %g: tensor<8xf32> {htp.param = "g"}, %b: tensor<8xf32> {htp.param = "b"})
    -> (tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %n = htp.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %m = htp.layer_norm %g, %g, %b : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %d = htp.add %x, %x : tensor<2x8xf32>
  %k = htp.layer_norm %d, %g, %b : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %o = htp.layer_norm %x, %g, %b {group = "other"} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %s = htp.all_reduce %p : tensor<2x8xf32>
  return %n, %m, %k, %o, %s : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// A function that is not split (no all-reduce) has one rank: the norm of
// its input stays a plain one.
// CHECK-LABEL: func.func @unsplit_norm
// CHECK: htp.layer_norm %arg0, %arg1, %arg2 :
// CHECK-NOT: group
// LOWER-LABEL: llvm.func @htp.entry.unsplit_norm(
// LOWER: llvm.call @htp_op_layer_norm_f32(
func.func @unsplit_norm(%x: tensor<2x8xf32> {htp.input = "x"}, %g: tensor<8xf32> {htp.param = "g"},
                        %b: tensor<8xf32> {htp.param = "b"}) -> tensor<2x8xf32> {
  %n = htp.layer_norm %x, %g, %b : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %n : tensor<2x8xf32>
}
