// RUN: %htp-opt %s -split-input-file --htp-balance-hooks | FileCheck %s
// RUN: not %htp-opt %s -split-input-file --htp-balance-hooks=mlp-unit-width=-1 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: error: --htp-balance-hooks: mlp-unit-width must be >= 0, got -1
// The automatic MLP unit width at the edges of the runtime's limits: found
// in O(sqrt(hidden)) steps, and never more than 2^24 units (HTP_ENTRY_MAX_UNITS).

// A prime hidden width (1073741789, the largest prime below 2^30) has no
// divisor at or above 64 but itself: one unit, found without 10^9 trials.
// CHECK-LABEL: func.func @prime_hidden(
// CHECK: htp.mlp {{.*}} {pair = 1 : i64, unit_width = 1073741789 : i64}
func.func @prime_hidden(%x: tensor<1x1x1xf32>, %wqkv: tensor<3x1xf32>, %bqkv: tensor<3xf32>, %wp: tensor<1x1xf32>,
                        %w1: tensor<1073741789x1xf32>, %w2: tensor<1x1073741789xf32>) -> tensor<1x1x1xf32>
    attributes {htp.tp = 2 : i64} {
  %p = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 1 : i64} : (tensor<1x1x1xf32>, tensor<3x1xf32>, tensor<3xf32>, tensor<1x1xf32>) -> tensor<1x1x1xf32>
  %a = htp.all_reduce %p : tensor<1x1x1xf32>
  %h = htp.linear %a, %w1 : (tensor<1x1x1xf32>, tensor<1073741789x1xf32>) -> tensor<1x1x1073741789xf32>
  %g = htp.gelu %h : tensor<1x1x1073741789xf32>
  %m = htp.linear %g, %w2 : (tensor<1x1x1073741789xf32>, tensor<1x1073741789xf32>) -> tensor<1x1x1xf32>
  %y = htp.all_reduce %m : tensor<1x1x1xf32>
  return %y : tensor<1x1x1xf32>
}

// -----

// 2147483646 = 2·3²·7·11·31·151·331 neurons: the smallest divisor >= 64
// (66) would make 32537631 units, over 2^20 (the planner's units per rank);
// the width floor rises to ceil(hidden / 2^20) = 2048, giving 2114
// (1015839 units).
// CHECK-LABEL: func.func @many_units(
// CHECK: htp.mlp {{.*}} {pair = 1 : i64, unit_width = 2114 : i64}
func.func @many_units(%x: tensor<1x1x1xf32>, %wqkv: tensor<3x1xf32>, %bqkv: tensor<3xf32>, %wp: tensor<1x1xf32>,
                      %w1: tensor<2147483646x1xf32>, %w2: tensor<1x2147483646xf32>) -> tensor<1x1x1xf32>
    attributes {htp.tp = 2 : i64} {
  %p = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 1 : i64} : (tensor<1x1x1xf32>, tensor<3x1xf32>, tensor<3xf32>, tensor<1x1xf32>) -> tensor<1x1x1xf32>
  %a = htp.all_reduce %p : tensor<1x1x1xf32>
  %h = htp.linear %a, %w1 : (tensor<1x1x1xf32>, tensor<2147483646x1xf32>) -> tensor<1x1x2147483646xf32>
  %g = htp.gelu %h : tensor<1x1x2147483646xf32>
  %m = htp.linear %g, %w2 : (tensor<1x1x2147483646xf32>, tensor<1x2147483646xf32>) -> tensor<1x1x1xf32>
  %y = htp.all_reduce %m : tensor<1x1x1xf32>
  return %y : tensor<1x1x1xf32>
}
