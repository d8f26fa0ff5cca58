// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-lower-to-runtime | FileCheck %s

// Result names in the signature: htp.result names a result; a gradient
// (htp.grad_of) is "grad.<param>" with role "grad", its parameter's name
// and, when the parameter is sharded, the parameter's shard; an unnamed
// result stays "result<N>".
// CHECK-LABEL: @htp.sig.named(
// CHECK-SAME: \22results\22:[{\22name\22:\22loss\22,\22dtype\22:\22f32\22,\22shape\22:[2,7]},
// CHECK-SAME: {\22name\22:\22grad.fc1.weight\22,\22role\22:\22grad\22,\22grad_of\22:\22fc1.weight\22,\22dtype\22:\22f32\22,\22shape\22:[7,12],\22shard\22:{\22dim\22:0,\22parts\22:2,\22layout\22:\22blocks\22}},
// CHECK-SAME: {\22name\22:\22grad.fc1.bias\22,\22role\22:\22grad\22,\22grad_of\22:\22fc1.bias\22,\22dtype\22:\22f32\22,\22shape\22:[7]},
// CHECK-SAME: {\22name\22:\22result3\22,\22dtype\22:\22f32\22,\22shape\22:[2,7]}],
func.func @named(%x: tensor<2x12xf32> {htp.input = "x"},
                 %w: tensor<7x12xf32> {htp.param = "fc1.weight", htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>},
                 %b: tensor<7xf32> {htp.param = "fc1.bias"})
    -> (tensor<2x7xf32> {htp.result = "loss"}, tensor<7x12xf32> {htp.grad_of = "fc1.weight"},
        tensor<7xf32> {htp.grad_of = "fc1.bias"}, tensor<2x7xf32>)
    attributes {htp.tp = 2 : i64} {
  %y = htp.linear %x, %w, %b : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<7xf32>) -> tensor<2x7xf32>
  return %y, %w, %b, %y : tensor<2x7xf32>, tensor<7x12xf32>, tensor<7xf32>, tensor<2x7xf32>
}
