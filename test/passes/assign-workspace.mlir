// RUN: %htp-opt %s -split-input-file --htp-assign-workspace | FileCheck %s
// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-assign-workspace | FileCheck %s
// The placement --htp-assign-workspace records: a 64-byte aligned workspace
// slot per result that needs one (htp.workspace_offsets: one offset per
// result, -1 for one in a result buffer), kernel scratch
// (htp.scratch_offset), and the workspace's size (htp.workspace_bytes).
// Run twice, it places the same (the second run replaces the attributes).

// A slot is reused once its value is dead: a chain of four GELUs of 64 bytes.
// %a takes [0, 64), %b [64, 128) (%a is still read by %b's op when %b is
// placed), %c reuses %a's slot, %d is computed in place in the result buffer.
// CHECK-LABEL: func.func @chain(
// CHECK-SAME: attributes {htp.workspace_bytes = 128 : i64}
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 0>}
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 64>}
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 0>}
// CHECK-NEXT: %[[D:.*]] = htp.gelu %{{.*}} : tensor<16xf32>
// CHECK-NEXT: return %[[D]]
func.func @chain(%x: tensor<16xf32>) -> tensor<16xf32> {
  %a = htp.gelu %x : tensor<16xf32>
  %b = htp.gelu %a : tensor<16xf32>
  %c = htp.gelu %b : tensor<16xf32>
  %d = htp.gelu %c : tensor<16xf32>
  return %d : tensor<16xf32>
}

// -----

// Alignment: 12 bytes (3 floats) take a 64-byte slot, 80 bytes (20 floats) a
// 128-byte one. %s and %t are both read by the add, so %u goes at 128; then
// both die and %v's 128-byte slot fits in [0, 128), before %u: the workspace
// is 192 bytes.
// CHECK-LABEL: func.func @alignment(
// CHECK-SAME: attributes {htp.workspace_bytes = 192 : i64}
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 0>} : tensor<3xf32>
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 64>} : tensor<3xf32>
// CHECK-NEXT: htp.add %{{.*}}, %{{.*}} {htp.workspace_offsets = array<i64: 128>} : tensor<3xf32>
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 0>} : tensor<20xf32>
func.func @alignment(%x: tensor<3xf32>, %y: tensor<20xf32>) -> (tensor<3xf32>, tensor<20xf32>) {
  %s = htp.gelu %x : tensor<3xf32>
  %t = htp.gelu %s : tensor<3xf32>
  %u = htp.add %s, %t : tensor<3xf32>
  %v = htp.gelu %y : tensor<20xf32>
  %w = htp.gelu %v : tensor<20xf32>
  %z = htp.add %u, %u : tensor<3xf32>
  return %z, %w : tensor<3xf32>, tensor<20xf32>
}

// -----

// A value returned twice is computed in place in the first result buffer it
// is returned in (the lowering copies it to the other); a returned argument
// takes no slot; nothing else needs one: the workspace is the minimum, 64.
// CHECK-LABEL: func.func @returned_twice(
// CHECK-SAME: attributes {htp.workspace_bytes = 64 : i64}
// CHECK-NEXT: %[[S:.*]] = htp.add %{{.*}}, %{{.*}} : tensor<4xf32>
// CHECK-NEXT: return %[[S]], %{{.*}}, %[[S]]
func.func @returned_twice(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %s = htp.add %x, %x : tensor<4xf32>
  return %s, %x, %s : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Dead code: a result never read still gets a slot (the kernel writes it)
// but frees it at once, so the next value reuses offset 0.
// CHECK-LABEL: func.func @dead(
// CHECK-SAME: attributes {htp.workspace_bytes = 64 : i64}
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 0>}
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 0>}
// CHECK-NEXT: htp.gelu %{{.*}} : tensor<16xf32>
func.func @dead(%x: tensor<16xf32>) -> tensor<16xf32> {
  %dead = htp.gelu %x : tensor<16xf32>
  %a = htp.gelu %x : tensor<16xf32>
  %y = htp.gelu %a : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// Kernel scratch: htp_cpu_attention_scratch_floats(batch 1, tokens 2, dim 4,
// 2 heads of 2) = qkv 2*3*4 + context 2*4 + scores 2*2 = 36 floats, 144
// bytes, a 192-byte slot. It is placed after the result ([64, 128)) while the
// operand %n ([0, 64)) is still live, so at 128, and freed after the op:
// workspace 128 + 192 = 320.
// CHECK-LABEL: func.func @scratch(
// CHECK-SAME: attributes {htp.workspace_bytes = 320 : i64}
// CHECK-NEXT: htp.gelu %{{.*}} {htp.workspace_offsets = array<i64: 0>}
// CHECK-NEXT: htp.attention {{.*}} {htp.scratch_offset = 128 : i64, htp.workspace_offsets = array<i64: 64>, num_heads = 2 : i64}
// CHECK-NEXT: htp.gelu %{{.*}} : tensor<1x2x4xf32>
func.func @scratch(%x: tensor<1x2x4xf32>, %wqkv: tensor<12x4xf32>, %bqkv: tensor<12xf32>, %wp: tensor<4x4xf32>) -> tensor<1x2x4xf32> {
  %n = htp.gelu %x : tensor<1x2x4xf32>
  %a = htp.attention %n, %wqkv, %bqkv, %wp {num_heads = 2 : i64} : (tensor<1x2x4xf32>, tensor<12x4xf32>, tensor<12xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
  %y = htp.gelu %a : tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}

// -----

// An MLP's scratch: htp_rt_mlp_scratch_floats(rows 2, hidden 8, unit width 4)
// = 2*8 + 2*4 = 24 floats, 96 bytes, a 128-byte slot; its result is returned,
// so the scratch is all the workspace holds.
// CHECK-LABEL: func.func @mlp_scratch(
// CHECK-SAME: attributes {htp.workspace_bytes = 128 : i64}
// CHECK-NEXT: htp.mlp {{.*}} {htp.scratch_offset = 0 : i64, pair = 1 : i64, unit_width = 4 : i64}
func.func @mlp_scratch(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %w2: tensor<4x8xf32>) -> tensor<2x4xf32> {
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 4 : i64} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
