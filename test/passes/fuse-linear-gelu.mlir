// RUN: %htp-opt %s -split-input-file --htp-fuse-linear-gelu | FileCheck %s
// RUN: %htp-opt %s -split-input-file --htp-fuse-linear-gelu --htp-assign-workspace --htp-lower-to-runtime -cse | FileCheck %s --check-prefix=LOWER
// RUN: %htp-opt %s -split-input-file --htp-fuse-linear-gelu | %htp-opt -split-input-file | FileCheck %s

// A single-use linear's GELU folds into it; the lowering makes one call,
// htp_op_linear_gelu_f32, with linear's arguments then the tanh flag.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[H:.*]] = htp.linear %{{.*}}, %{{.*}}, %{{.*}} gelu none : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NOT: htp.gelu
// CHECK: htp.linear %[[H]], %{{.*}} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
// LOWER-LABEL: llvm.func @htp.entry.mlp(
// LOWER-DAG: %[[ROWS:.*]] = llvm.mlir.constant(4 : i64)
// LOWER-DAG: %[[IN:.*]] = llvm.mlir.constant(8 : i64)
// LOWER-DAG: %[[OUT:.*]] = llvm.mlir.constant(16 : i64)
// LOWER-DAG: %[[EXACT:.*]] = llvm.mlir.constant(0 : i32)
// LOWER: llvm.call @htp_op_linear_gelu_f32(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ROWS]], %[[IN]], %[[OUT]], %[[EXACT]])
// LOWER-NOT: htp_op_gelu
// LOWER: llvm.call @htp_op_linear_f32(
func.func @mlp(%x: tensor<4x8xf32> {htp.input = "x"},
               %w1: tensor<16x8xf32> {htp.param = "fc1.weight"},
               %b1: tensor<16xf32> {htp.param = "fc1.bias"},
               %w2: tensor<8x16xf32> {htp.param = "fc2.weight"}) -> tensor<4x8xf32> {
  %h = htp.linear %x, %w1, %b1 : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = htp.gelu %h : tensor<4x16xf32>
  %y = htp.linear %g, %w2 : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// The tanh form, bf16, no bias, the GELU's value returned: it is written
// straight into the result buffer by htp_op_linear_gelu_bf16 (flag 1).
// CHECK-LABEL: func.func @tanh_bf16
// CHECK: %[[H:.*]] = htp.linear %{{.*}}, %{{.*}} gelu tanh : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x16xbf16>
// CHECK-NEXT: return %[[H]]
// LOWER-LABEL: llvm.func @htp.entry.tanh_bf16(
// LOWER-DAG: %[[TANH:.*]] = llvm.mlir.constant(1 : i32)
// LOWER: llvm.call @htp_op_linear_gelu_bf16({{.*}}, %[[TANH]])
// LOWER-NOT: htp_op_copy
func.func @tanh_bf16(%x: tensor<4x8xbf16> {htp.input = "x"},
                     %w1: tensor<16x8xbf16> {htp.param = "fc1.weight"}) -> tensor<4x16xbf16> {
  %h = htp.linear %x, %w1 : (tensor<4x8xbf16>, tensor<16x8xbf16>) -> tensor<4x16xbf16>
  %g = htp.gelu %h approximate tanh : tensor<4x16xbf16>
  return %g : tensor<4x16xbf16>
}

// -----

// The linear's result read by another op too (a backward's GELU adjoint,
// or here a second GELU and the return): nothing folds.
// CHECK-LABEL: func.func @shared
// CHECK: htp.linear %{{.*}}, %{{.*}} :
// CHECK: htp.gelu
// CHECK: htp.gelu
// LOWER-LABEL: llvm.func @htp.entry.shared(
// LOWER: llvm.call @htp_op_linear_f32(
// LOWER: llvm.call @htp_op_gelu_f32(
func.func @shared(%x: tensor<4x8xf32> {htp.input = "x"},
                  %w1: tensor<16x8xf32> {htp.param = "fc1.weight"})
    -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %h = htp.linear %x, %w1 : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %g = htp.gelu %h : tensor<4x16xf32>
  %t = htp.gelu %h approximate tanh : tensor<4x16xf32>
  return %g, %t : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// A GELU of a GELU: the first folds, the second reads the fused linear's
// result (now a GELU's, so it stays a separate op).
// CHECK-LABEL: func.func @twice
// CHECK: %[[H:.*]] = htp.linear %{{.*}}, %{{.*}} gelu none :
// CHECK: htp.gelu %[[H]] approximate tanh
func.func @twice(%x: tensor<4x8xf32> {htp.input = "x"},
                 %w1: tensor<16x8xf32> {htp.param = "fc1.weight"}) -> tensor<4x16xf32> {
  %h = htp.linear %x, %w1 : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %g = htp.gelu %h : tensor<4x16xf32>
  %t = htp.gelu %g approximate tanh : tensor<4x16xf32>
  return %t : tensor<4x16xf32>
}

// -----

// A linear with a residual keeps its GELU apart: GELU(x·wᵀ + r) has no fused
// form (a linear takes a gelu or a residual, not both: the verifier refused
// what this pass made of it).
// CHECK-LABEL: func.func @residual
// CHECK: %[[L:.*]] = htp.linear %{{.*}}, %{{.*}} residual %{{.*}} :
// CHECK: htp.gelu %[[L]]
func.func @residual(%x: tensor<4x8xf32> {htp.input = "x"},
                    %w: tensor<8x8xf32> {htp.param = "w"}) -> tensor<4x8xf32> {
  %l = htp.linear %x, %w residual %x : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %g = htp.gelu %l : tensor<4x8xf32>
  return %g : tensor<4x8xf32>
}
