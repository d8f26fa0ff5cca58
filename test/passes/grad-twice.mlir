// RUN: %htp-opt %s --htp-grad > %t.once
// RUN: %htp-opt %t.once --htp-grad > %t.twice
// RUN: diff %t.once %t.twice
// RUN: %htp-opt %t.once --htp-pipeline | FileCheck %s
//
// --htp-grad on its own output changes nothing: a @F_grad marked
// htp.backward with @F's arguments and results first is an earlier run's,
// and stands (it once refused: "the module already has @vit_loss_grad").
// So htp-compile and htp-run, whose pipeline runs --htp-grad, take a module
// that already has its backward, and lower both functions.

// CHECK-DAG: llvm.func @htp.entry.lin_loss(
// CHECK-DAG: llvm.func @htp.entry.lin_loss_grad(
func.func @lin_loss(%x: tensor<2x8xf32> {htp.input = "x"}, %t: tensor<2x5xf32> {htp.input = "targets"},
                    %w: tensor<5x8xf32> {htp.param = "head.weight"}, %b: tensor<5xf32> {htp.param = "head.bias"})
    -> (tensor<1xf32> {htp.result = "loss"}) {
  %l = htp.linear %x, %w, %b : (tensor<2x8xf32>, tensor<5x8xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  %loss = htp.cross_entropy %l, %t : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}
