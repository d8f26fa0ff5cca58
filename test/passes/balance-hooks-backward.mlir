// RUN: %htp-opt %s --htp-balance-hooks | FileCheck %s
// RUN: sed 's/attributes {htp.backward, /attributes {/' %s | %not %htp-opt --htp-balance-hooks 2>&1 | FileCheck %s --check-prefix=FORWARD
// A split function marked htp.backward (written by --htp-grad) is left
// alone: without the mark, the same function is refused (no split
// attention), so the pass did look at it.

// CHECK-LABEL: func.func @f_grad
// CHECK-NEXT: htp.linear
// CHECK-NEXT: htp.gelu
// CHECK-NEXT: htp.linear
// CHECK-NEXT: htp.all_reduce
// FORWARD: error: --htp-balance-hooks needs each layer to have one split attention and one split MLP pair; found 0 attention(s) and 1 MLP pair(s)
func.func @f_grad(%x: tensor<2x4xf32>, %w1: tensor<4x4xf32>, %w2: tensor<4x4xf32>) -> tensor<2x4xf32>
    attributes {htp.backward, htp.tp = 2 : i64} {
  %h = htp.linear %x, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %g = htp.gelu %h : tensor<2x4xf32>
  %p = htp.linear %g, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %y = htp.all_reduce %p : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
