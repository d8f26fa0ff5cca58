// RUN: %htp-opt %s --htp-grad -verify-diagnostics | FileCheck %s
// RUN: %htp-opt %s --htp-pipeline 2>&1 | FileCheck %s --check-prefix=LOWER
//
// A parameter the loss does not read gets a zero gradient, with a warning
// (--htp-grad refused the whole model before: "does not reach the loss").
// The lowering writes the zeros through the runtime's entry points, as
// every op's result (a GPU's buffers are not the host's): cls_token's
// adjoint into scratch, then a copy.

// CHECK-LABEL: func.func @lin_loss_grad(
// CHECK-SAME: %[[U:[a-z0-9]+]]: tensor<3xf32> {htp.param = "unused"}
// CHECK-SAME: tensor<3xf32> {htp.grad_of = "unused"}
// CHECK: %[[Z:.*]] = htp.zeros_like %[[U]] : tensor<3xf32>
// CHECK: return {{.*}}, %[[Z]] :
// expected-warning @+1 {{parameter "unused" (argument #3) does not reach the loss: --htp-grad returns a zero gradient for it}}
func.func @lin_loss(%x: tensor<2x8xf32> {htp.input = "x"}, %t: tensor<2x5xf32> {htp.input = "targets"},
                    %w: tensor<5x8xf32> {htp.param = "head.weight"}, %u: tensor<3xf32> {htp.param = "unused"})
    -> (tensor<1xf32> {htp.result = "loss"}) {
  %l = htp.linear %x, %w : (tensor<2x8xf32>, tensor<5x8xf32>) -> tensor<2x5xf32>
  %loss = htp.cross_entropy %l, %t : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// LOWER: warning: parameter "unused" (argument #3) does not reach the loss: --htp-grad returns a zero gradient for it
// LOWER-LABEL: llvm.func @htp.entry.lin_loss_grad(
// LOWER: llvm.call @htp_op_cls_token_backward_f32(
// LOWER: llvm.call @htp_op_copy(
