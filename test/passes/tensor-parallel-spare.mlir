// Spare room (DESIGN §12): every rank's shards have room for the most units
// any rank owns plus spare percent of it, rounded up; the extra slots are
// empty (the balance record and the slicing know them by the shard's units).
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=50 mlp-unit-width=2" | FileCheck %s --check-prefix=EVEN
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=1 mlp-unit-width=2" | FileCheck %s --check-prefix=CEIL
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=0 mlp-unit-width=2" | FileCheck %s --check-prefix=NONE
// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel="tp=3 shares=2,1,1 spare=100 mlp-unit-width=2" | FileCheck %s --check-prefix=SHARES
// Spare is a whole percent from 0 to 1000.
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=-1" 2>&1 | FileCheck %s --check-prefix=RANGE -DP=-1
// RUN: not %htp-opt %s -split-input-file --htp-tensor-parallel="tp=2 spare=1001" 2>&1 | FileCheck %s --check-prefix=RANGE -DP=1001
// RANGE: --htp-tensor-parallel: spare must be from 0 to 1000 (percent of the most units any rank owns), got [[P]]

// Even split with spare=50: 4 heads of 3 channels, 2 a rank, room for 2 +
// ceil(2 x 0.5) = 3, recorded with the units each rank owns (the split is
// still even). The local attention has 3 heads; the proj 3 heads' columns.
// EVEN-LABEL: func.func @attention(
// EVEN-SAME: tensor<27x12xf32> {htp.param = "blocks.0.attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv, units = [2, 2], unit = 3>}
// EVEN-SAME: tensor<27xf32> {htp.param = "blocks.0.attn.qkv.bias", htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv, units = [2, 2], unit = 3>}
// EVEN-SAME: tensor<12x9xf32> {htp.param = "blocks.0.attn.proj.weight", htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks, units = [2, 2], unit = 3>}
// EVEN-SAME: attributes {htp.tp = 2 : i64}
// EVEN-NEXT: htp.attention {{.*}} {num_heads = 3 : i64}
// EVEN-NEXT: htp.all_reduce
// spare=1 still gives a whole spare head: ceil(2 x 0.01) = 1.
// CEIL-LABEL: func.func @attention(
// CEIL-SAME: tensor<27x12xf32> {{.*}}units = [2, 2], unit = 3>}
// CEIL: {num_heads = 3 : i64}
// spare=0 is the even split as it always was: no units, no room.
// NONE-LABEL: func.func @attention(
// NONE-SAME: tensor<18x12xf32> {htp.param = "blocks.0.attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 2, layout = qkv>}
// NONE: {num_heads = 2 : i64}
// Shares 2:1:1 with spare=100: room for 2 + 2 = 4 heads on every rank.
// SHARES-LABEL: func.func @attention(
// SHARES-SAME: tensor<36x12xf32> {htp.param = "blocks.0.attn.qkv.weight", htp.shard = #htp.shard<dim = 0, parts = 3, layout = qkv, units = [2, 1, 1], unit = 3>}
// SHARES-SAME: tensor<12x12xf32> {htp.param = "blocks.0.attn.proj.weight", htp.shard = #htp.shard<dim = 1, parts = 3, layout = blocks, units = [2, 1, 1], unit = 3>}
// SHARES-NEXT: htp.attention {{.*}} {num_heads = 4 : i64}
func.func @attention(%x: tensor<2x5x12xf32>,
    %wqkv: tensor<36x12xf32> {htp.param = "blocks.0.attn.qkv.weight"},
    %bqkv: tensor<36xf32> {htp.param = "blocks.0.attn.qkv.bias"},
    %wproj: tensor<12x12xf32> {htp.param = "blocks.0.attn.proj.weight"},
    %bproj: tensor<12xf32> {htp.param = "blocks.0.attn.proj.bias"}) -> tensor<2x5x12xf32> {
  %y = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 4 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

// 24 neurons in units of 2. Even: 6 units a rank, room for 6 + 3 = 9 (18
// neurons). Shares 2:1:1: 6, 3, 3 units, room for 12 (24 neurons).
// EVEN-LABEL: func.func @mlp(
// EVEN-SAME: tensor<18x8xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [6, 6], unit = 2>}
// EVEN-SAME: tensor<18xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks, units = [6, 6], unit = 2>}
// EVEN-SAME: tensor<8x18xf32> {htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks, units = [6, 6], unit = 2>}
// EVEN: htp.gelu {{.*}} : tensor<3x18xf32>
// CEIL-LABEL: func.func @mlp(
// CEIL-SAME: tensor<14x8xf32> {{.*}}units = [6, 6], unit = 2>}
// NONE-LABEL: func.func @mlp(
// NONE-SAME: tensor<12x8xf32> {htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>}
// SHARES-LABEL: func.func @mlp(
// SHARES-SAME: tensor<24x8xf32> {htp.shard = #htp.shard<dim = 0, parts = 3, layout = blocks, units = [6, 3, 3], unit = 2>}
// SHARES-SAME: tensor<8x24xf32> {htp.shard = #htp.shard<dim = 1, parts = 3, layout = blocks, units = [6, 3, 3], unit = 2>}
// SHARES: htp.gelu {{.*}} : tensor<3x24xf32>
func.func @mlp(%x: tensor<3x8xf32>, %w1: tensor<24x8xf32>, %b1: tensor<24xf32>,
               %w2: tensor<8x24xf32>, %b2: tensor<8xf32>) -> tensor<3x8xf32> {
  %h = htp.linear %x, %w1, %b1 : (tensor<3x8xf32>, tensor<24x8xf32>, tensor<24xf32>) -> tensor<3x24xf32>
  %g = htp.gelu %h : tensor<3x24xf32>
  %y = htp.linear %g, %w2, %b2 : (tensor<3x24xf32>, tensor<8x24xf32>, tensor<8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
