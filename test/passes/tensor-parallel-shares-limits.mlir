// The limits of an uneven split, each found at once. A rank owns at most
// 2^20 units of a shard: 2^21 + 2 neurons in units of 1 would give each of
// 2 ranks 2^20 + 1. The automatic unit width searches divisors up to the
// square root: a prime width (2^31 - 1) is one unit, found without 2^31
// steps, and then rank 1 gets none.
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 shares=1,1 mlp-unit-width=1" 2>&1 | FileCheck %s --check-prefix=MANY
// MANY: cannot be split by shares: rank 0 would own 1048577 MLP units, more than a shard holds (1048576); give a wider mlp-unit-width
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 shares=1,1" 2>&1 | FileCheck %s --check-prefix=PRIME
// PRIME: cannot be split by shares=1,1: rank 1's share gets none of the 1 MLP units

func.func @many(%x: tensor<3x8xf32>, %w1: tensor<2097154x8xf32>, %w2: tensor<8x2097154xf32>) -> tensor<3x8xf32> {
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<2097154x8xf32>) -> tensor<3x2097154xf32>
  %g = htp.gelu %h : tensor<3x2097154xf32>
  %y = htp.linear %g, %w2 : (tensor<3x2097154xf32>, tensor<8x2097154xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @prime(%x: tensor<3x8xf32>, %w1: tensor<2147483647x8xf32>, %w2: tensor<8x2147483647xf32>) -> tensor<3x8xf32> {
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<2147483647x8xf32>) -> tensor<3x2147483647xf32>
  %g = htp.gelu %h : tensor<3x2147483647xf32>
  %y = htp.linear %g, %w2 : (tensor<3x2147483647xf32>, tensor<8x2147483647xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
