// RUN: %htp-opt %s -split-input-file --htp-lower-to-runtime -verify-diagnostics
// The lowering reads the placement --htp-assign-workspace records: IR
// without it is refused with a diagnostic saying to run that pass, and a
// slot outside the workspace, or two values live at the same time whose
// slots overlap (hand-written attributes), is refused before any kernel
// could write there.

// expected-error @+1 {{has no 'htp.workspace_bytes' (no workspace placement): run --htp-assign-workspace first}}
func.func @unplaced(%x: tensor<16xf32>) -> tensor<16xf32> {
  %y = htp.gelu %x : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// An intermediate with no slot, and not returned: nowhere to write it.
func.func @no_slot(%x: tensor<16xf32>) -> tensor<16xf32> attributes {htp.workspace_bytes = 64 : i64} {
  // expected-error @+1 {{'htp.gelu' op has no workspace offset for its result ('htp.workspace_offsets') and it is not returned: run --htp-assign-workspace first}}
  %a = htp.gelu %x : tensor<16xf32>
  %y = htp.gelu %a : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

func.func @no_scratch(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %w2: tensor<4x8xf32>) -> tensor<2x4xf32> attributes {htp.workspace_bytes = 128 : i64} {
  // expected-error @+1 {{'htp.mlp' op needs kernel scratch but has no 'htp.scratch_offset': run --htp-assign-workspace first}}
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 4 : i64} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// 128 bytes at offset 0 do not fit in 64.
func.func @slot_outside(%x: tensor<32xf32>) -> tensor<32xf32> attributes {htp.workspace_bytes = 64 : i64} {
  // expected-error @+1 {{'htp.gelu' op its result at byte 0 does not fit in the workspace of 64 bytes ('htp.workspace_bytes')}}
  %a = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<32xf32>
  %y = htp.gelu %a : tensor<32xf32>
  return %y : tensor<32xf32>
}

// -----

// The MLP's 96 bytes of scratch at 64 end past 128.
func.func @scratch_outside(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %w2: tensor<4x8xf32>) -> tensor<2x4xf32> attributes {htp.workspace_bytes = 128 : i64} {
  // expected-error @+1 {{'htp.mlp' op its kernel scratch at byte 64 does not fit in the workspace of 128 bytes ('htp.workspace_bytes')}}
  %y = htp.mlp %x, %w1, %w2 {htp.scratch_offset = 64 : i64, pair = 1 : i64, unit_width = 4 : i64} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// %a is still read by the add when %b is written over it.
func.func @overlapping_live(%x: tensor<16xf32>) -> tensor<16xf32> attributes {htp.workspace_bytes = 128 : i64} {
  // expected-note @+1 {{the overlapped result is that of this 'htp.gelu'}}
  %a = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<16xf32>
  // expected-error @+1 {{'htp.gelu' op its result at bytes [0, 64) of the workspace overlaps the result of 'htp.gelu' at bytes [0, 64), which is still live (read by this op or a later one)}}
  %b = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<16xf32>
  %y = htp.add %a, %b : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// Partial overlap counts: %a's 128 bytes at 0 reach into %b's slot at 64.
func.func @partial_overlap(%x: tensor<32xf32>) -> tensor<32xf32> attributes {htp.workspace_bytes = 192 : i64} {
  // expected-note @+1 {{the overlapped result is that of this 'htp.gelu'}}
  %a = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<32xf32>
  // expected-error @+1 {{its result at bytes [64, 192) of the workspace overlaps the result of 'htp.gelu' at bytes [0, 128)}}
  %b = htp.gelu %x {htp.workspace_offsets = array<i64: 64>} : tensor<32xf32>
  %y = htp.add %a, %b : tensor<32xf32>
  return %y : tensor<32xf32>
}

// -----

// A returned value placed in the workspace is live until the return copies it.
func.func @live_until_return(%x: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) attributes {htp.workspace_bytes = 64 : i64} {
  // expected-note @+1 {{the overlapped result is that of this 'htp.gelu'}}
  %a = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<16xf32>
  // expected-error @+1 {{its result at bytes [0, 64) of the workspace overlaps the result of 'htp.gelu' at bytes [0, 64), which is still live}}
  %b = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<16xf32>
  %c = htp.gelu %b : tensor<16xf32>
  return %a, %c : tensor<16xf32>, tensor<16xf32>
}

// -----

// Kernels do not accept outputs aliasing their inputs: a result must not
// overlap its own operand, even one it is the last reader of.
func.func @result_over_operand(%x: tensor<16xf32>) -> tensor<16xf32> attributes {htp.workspace_bytes = 64 : i64} {
  // expected-note @+1 {{the overlapped result is that of this 'htp.gelu'}}
  %a = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<16xf32>
  // expected-error @+1 {{'htp.gelu' op its result at bytes [0, 64) of the workspace overlaps the result of 'htp.gelu' at bytes [0, 64), which is still live (read by this op or a later one)}}
  %b = htp.gelu %a {htp.workspace_offsets = array<i64: 0>} : tensor<16xf32>
  %y = htp.gelu %b : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// The MLP's 96 bytes of scratch at 0 overlap its operand %a at [0, 32).
func.func @scratch_over_operand(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %w2: tensor<4x8xf32>) -> tensor<2x4xf32> attributes {htp.workspace_bytes = 128 : i64} {
  // expected-note @+1 {{the overlapped result is that of this 'htp.gelu'}}
  %a = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<2x4xf32>
  // expected-error @+1 {{'htp.mlp' op its kernel scratch at bytes [0, 96) of the workspace overlaps the result of 'htp.gelu' at bytes [0, 32), which is still live}}
  %y = htp.mlp %a, %w1, %w2 {htp.scratch_offset = 0 : i64, pair = 1 : i64, unit_width = 4 : i64} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// Scratch must not overlap its own op's result either.
func.func @scratch_over_result(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %w2: tensor<4x8xf32>) -> tensor<2x4xf32> attributes {htp.workspace_bytes = 128 : i64} {
  // expected-error @+2 {{'htp.mlp' op its kernel scratch at bytes [0, 96) of the workspace overlaps its own result at bytes [0, 32), live while it runs}}
  // expected-note @+1 {{the overlapped result is that of this 'htp.mlp'}}
  %m = htp.mlp %x, %w1, %w2 {htp.scratch_offset = 0 : i64, htp.workspace_offsets = array<i64: 0>, pair = 1 : i64, unit_width = 4 : i64} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  %y = htp.gelu %m : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// A result never read is still written while its op runs: its slot must
// not overlap a value live then.
func.func @dead_result_over_live(%x: tensor<16xf32>) -> tensor<16xf32> attributes {htp.workspace_bytes = 64 : i64} {
  // expected-note @+1 {{the overlapped result is that of this 'htp.gelu'}}
  %a = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<16xf32>
  // expected-error @+1 {{its result at bytes [0, 64) of the workspace overlaps the result of 'htp.gelu' at bytes [0, 64)}}
  %dead = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<16xf32>
  %y = htp.gelu %a : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// Legal reuse, accepted: %dead's slot is free once its op has run, so %a
// takes it; %a is dead after %b's op, so the MLP's scratch [0, 96) reuses
// it while %b (at 128, the MLP's operand) and the MLP's result (at 192)
// stay untouched; %c reuses 0 after the MLP, as its scratch lived only
// while the MLP ran.
func.func @legal_reuse(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %w2: tensor<4x8xf32>) -> tensor<2x4xf32> attributes {htp.workspace_bytes = 256 : i64} {
  %dead = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<2x4xf32>
  %a = htp.gelu %x {htp.workspace_offsets = array<i64: 0>} : tensor<2x4xf32>
  %b = htp.gelu %a {htp.workspace_offsets = array<i64: 128>} : tensor<2x4xf32>
  %m = htp.mlp %b, %w1, %w2 {htp.scratch_offset = 0 : i64, htp.workspace_offsets = array<i64: 192>, pair = 1 : i64, unit_width = 4 : i64} : (tensor<2x4xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  %c = htp.gelu %m {htp.workspace_offsets = array<i64: 0>} : tensor<2x4xf32>
  %y = htp.gelu %c : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
