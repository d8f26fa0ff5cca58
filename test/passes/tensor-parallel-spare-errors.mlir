// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=50 mlp-unit-width=4" -verify-diagnostics
// What spare room on an even split cannot do, one case each: heads that tp
// does not divide (the split stays even: shares split those), and a rank's
// width (10 of 20 neurons) that is no multiple of the MLP unit.

func.func @odd_heads(%x: tensor<2x5x9xf32>, %wqkv: tensor<27x9xf32>, %bqkv: tensor<27xf32>,
                     %wproj: tensor<9x9xf32>, %bproj: tensor<9xf32>) -> tensor<2x5x9xf32> {
  // expected-error @+1 {{cannot be split over tp = 2: num_heads (3) is not divisible by tp}}
  %y = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 3 : i64} : (tensor<2x5x9xf32>, tensor<27x9xf32>, tensor<27xf32>, tensor<9x9xf32>, tensor<9xf32>) -> tensor<2x5x9xf32>
  return %y : tensor<2x5x9xf32>
}

// -----

func.func @unit_width(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %w2: tensor<8x20xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{cannot be split with spare room: a rank's share of out_features (10) of this column-parallel linear is not a multiple of mlp-unit-width (4)}}
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
  %g = htp.gelu %h : tensor<3x20xf32>
  %y = htp.linear %g, %w2 : (tensor<3x20xf32>, tensor<8x20xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
