// RUN: %htp-opt %s --htp-grad | FileCheck %s
// RUN: %htp-opt %s --htp-grad | %htp-opt | FileCheck %s

// A linear written with its GELU fused trains: the gradient function
// computes the linear and the GELU apart, since the GELU's adjoint reads the
// pre-activation the fused linear does not keep; the forward function keeps
// the fused linear. (--htp-grad refused it.)
// CHECK-LABEL: func.func @f(
// CHECK: htp.linear {{.*}} gelu tanh
// CHECK-LABEL: func.func @f_grad(
// CHECK: %[[H:.+]] = htp.linear %arg0, %arg1, %arg2 : (tensor<2x4xf32>, tensor<6x4xf32>, tensor<6xf32>) -> tensor<2x6xf32>
// CHECK-NEXT: %[[G:.+]] = htp.gelu %[[H]] approximate tanh
// CHECK-NEXT: htp.linear %[[G]], %arg3
// CHECK: htp.gelu_grad %[[H]], %{{.+}} approximate tanh
func.func @f(%x: tensor<2x4xf32> {htp.input = "x"},
             %w1: tensor<6x4xf32> {htp.param = "fc1.weight"},
             %b1: tensor<6xf32> {htp.param = "fc1.bias"},
             %w2: tensor<3x6xf32> {htp.param = "head.weight"},
             %t: tensor<2x3xf32> {htp.input = "targets"}) -> tensor<1xf32> {
  %h = htp.linear %x, %w1, %b1 gelu tanh : (tensor<2x4xf32>, tensor<6x4xf32>, tensor<6xf32>) -> tensor<2x6xf32>
  %y = htp.linear %h, %w2 : (tensor<2x6xf32>, tensor<3x6xf32>) -> tensor<2x3xf32>
  %loss = htp.cross_entropy %y, %t : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}
