// RUN: %htp-opt %s -split-input-file --htp-grad | FileCheck %s
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

// -----

// The same folded into an all-reduce (y = sum(h) + b + r): the sum's
// adjoint is the identity (Megatron's g), so h gets dy twice (as the sum's
// input and as the residual), b the row sum of dy.
// CHECK-LABEL: func.func @all_reduce_residual_loss_grad(
// CHECK: %[[H:.+]] = htp.linear
// CHECK: %[[Y:.+]] = htp.all_reduce %[[H]] bias %{{.*}} residual %[[H]]
// CHECK: %[[DY:.+]] = htp.cross_entropy_grad %[[Y]]
// CHECK-DAG: %[[DH:.+]] = htp.add %[[DY]], %[[DY]]
// CHECK-DAG: %[[DB:.+]] = htp.row_sum %[[DY]]
// CHECK: %{{.+}}, %[[DW:.+]] = htp.linear_grad %{{.*}}, %{{.*}}, %[[DH]]
// CHECK: return %{{.*}}, %[[DW]], %[[DB]]
func.func @all_reduce_residual_loss(%x: tensor<2x8xf32> {htp.input = "x"},
                                    %t: tensor<2x8xf32> {htp.input = "targets"},
                                    %w: tensor<8x8xf32> {htp.param = "w"},
                                    %b: tensor<8xf32> {htp.param = "b"}) -> tensor<1xf32> {
  %h = htp.linear %x, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %y = htp.all_reduce %h bias %b residual %h : tensor<2x8xf32>, tensor<8xf32>
  %loss = htp.cross_entropy %y, %t : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}
