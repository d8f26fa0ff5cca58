// The bounds of spare room, each found before any shape is made. A rank
// has room for at most 2^20 units of a shard: 2^21 neurons in units of 1
// give each of 2 ranks 2^20, and spare=1 would make room for 2^20 +
// ceil(2^20 / 100). The room's rows must fit a dim (2^31 - 1): 2 units of
// 2^29 neurons, one a rank, with spare=201 would need 4 x 2^29 = 2^31.
// The same with shares (1:1 is the same ownership).
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=1 mlp-unit-width=1" 2>&1 | FileCheck %s --check-prefix=MANY
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 shares=1,1 spare=1 mlp-unit-width=1" 2>&1 | FileCheck %s --check-prefix=MANY
// MANY: error: 'htp.linear' op cannot make spare=1 room: every rank would have room for 1059062 MLP units (the most any rank owns, 1048576, and 1% of it), more than a shard holds (1048576)
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=201 mlp-unit-width=536870912" 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 shares=1,1 spare=201 mlp-unit-width=536870912" 2>&1 | FileCheck %s --check-prefix=ROWS
// ROWS: error: 'htp.linear' op cannot make spare=201 room: 4 MLP units of 536870912 rows or columns each overflow a dim (at most 2147483647)
// Just within: spare=200 makes room for 3 units (1610612736 rows; the
// other function, whose width is no multiple of that unit, fails).
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=200 mlp-unit-width=536870912" 2>/dev/null | FileCheck %s --check-prefix=FITS
// FITS: tensor<1610612736x1xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [1, 1], unit = 536870912>}

func.func @wide(%x: tensor<1x1xf32>, %w1: tensor<1073741824x1xf32>, %w2: tensor<1x1073741824xf32>) -> tensor<1x1xf32> {
  %h = htp.linear %x, %w1 : (tensor<1x1xf32>, tensor<1073741824x1xf32>) -> tensor<1x1073741824xf32>
  %g = htp.gelu %h : tensor<1x1073741824xf32>
  %y = htp.linear %g, %w2 : (tensor<1x1073741824xf32>, tensor<1x1073741824xf32>) -> tensor<1x1xf32>
  return %y : tensor<1x1xf32>
}

// -----

func.func @many(%x: tensor<3x8xf32>, %w1: tensor<2097152x8xf32>, %w2: tensor<8x2097152xf32>) -> tensor<3x8xf32> {
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<2097152x8xf32>) -> tensor<3x2097152xf32>
  %g = htp.gelu %h : tensor<3x2097152xf32>
  %y = htp.linear %g, %w2 : (tensor<3x2097152xf32>, tensor<8x2097152xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
