// RUN: %htp-opt %s --htp-pipeline | FileCheck %s
// Canonicalize and CSE in the pipeline keep multi-result ops whole: two
// identical linear_grads become one, whose unread dbias is still placed in
// the workspace and written (not null); a backward op none of whose results
// is read is dropped whole.

// CHECK-LABEL: llvm.func @htp.entry.f(
// CHECK: %[[WS:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.getelementptr %[[WS]]
// CHECK: %[[DB:.*]] = llvm.getelementptr %[[WS]]
// CHECK: llvm.call @htp_op_linear_backward_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[DX]], %{{[^,]*}}, %[[DB]],
// CHECK-NOT: htp_op_linear_backward_f32
// CHECK-NOT: htp_op_layer_norm_backward_f32
// CHECK: llvm.call @htp_op_add_f32
// CHECK-NOT: htp_op_linear_backward_f32
// CHECK: llvm.return
func.func @f(%x: tensor<2x4xf32>, %w: tensor<3x4xf32>, %dy: tensor<2x3xf32>, %g: tensor<4xf32>)
    -> (tensor<2x4xf32>, tensor<3x4xf32>) {
  %dx, %dw, %db = htp.linear_grad %x, %w, %dy
      : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>)
  %dx2, %dw2, %db2 = htp.linear_grad %x, %w, %dy
      : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>)
  %unused:3 = htp.layer_norm_grad %x, %g, %x
      : (tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>)
  %s = htp.add %dx, %dx2 : tensor<2x4xf32>
  return %s, %dw2 : tensor<2x4xf32>, tensor<3x4xf32>
}
