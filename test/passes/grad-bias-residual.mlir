// RUN: %htp-opt %s --htp-grad | FileCheck %s
// A bias add with a fused residual (y = x + b + r) has the adjoint of both
// adds: dy to x and to r (here the same value: their sum), the row sum of
// dy to b.

// CHECK-LABEL: func.func @bias_residual_loss_grad(
// CHECK: %[[H:.+]] = htp.linear
// CHECK: %[[Y:.+]] = htp.bias_add %[[H]], %{{.*}} residual %[[H]]
// CHECK: %[[DY:.+]] = htp.cross_entropy_grad %[[Y]]
// CHECK-DAG: %[[DH:.+]] = htp.add %[[DY]], %[[DY]]
// CHECK-DAG: %[[DB:.+]] = htp.row_sum %[[DY]]
// CHECK: %{{.+}}, %[[DW:.+]] = htp.linear_grad %{{.*}}, %{{.*}}, %[[DH]]
// CHECK: return %{{.*}}, %[[DW]], %[[DB]]
func.func @bias_residual_loss(%x: tensor<2x8xf32> {htp.input = "x"},
                              %t: tensor<2x8xf32> {htp.input = "targets"},
                              %w: tensor<8x8xf32> {htp.param = "w"},
                              %b: tensor<8xf32> {htp.param = "b"}) -> tensor<1xf32> {
  %h = htp.linear %x, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %y = htp.bias_add %h, %b residual %h : tensor<2x8xf32>, tensor<8xf32>
  %loss = htp.cross_entropy %y, %t : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}
