// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=3 shares=9,1,1 mlp-unit-width=3" -verify-diagnostics
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=3 shares=1,1" 2>&1 | FileCheck %s --check-prefix=COUNT
// COUNT: --htp-tensor-parallel: shares needs one share per rank (3), got 2
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=3 shares=1,0,1" 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: --htp-tensor-parallel: each share must be from 1 to 1048576, got 0
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=3 shares=1,1,1 mlp-unit-width=-2" 2>&1 | FileCheck %s --check-prefix=WIDTH
// WIDTH: --htp-tensor-parallel: mlp-unit-width must be >= 0, got -2
// What shares cannot split, one case each: a rank whose share rounds to no
// whole unit (4 heads by 9:1:1 give 3, 1, 0), and a hidden width that is no
// multiple of the MLP unit.

func.func @no_head(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                   %wproj: tensor<12x12xf32>, %bproj: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{cannot be split by shares=9,1,1: rank 2's share gets none of the 4 heads (each rank needs at least one whole unit)}}
  %y = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 4 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @unit_width(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %w2: tensor<8x20xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{cannot be split by shares: out_features (20) of this column-parallel linear is not a multiple of mlp-unit-width (3)}}
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
  %g = htp.gelu %h : tensor<3x20xf32>
  %y = htp.linear %g, %w2 : (tensor<3x20xf32>, tensor<8x20xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

