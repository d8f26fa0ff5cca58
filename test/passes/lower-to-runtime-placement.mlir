// RUN: %htp-opt %s -split-input-file --htp-lower-to-runtime -verify-diagnostics
// The lowering reads the placement --htp-assign-workspace records: IR
// without it is refused with a diagnostic saying to run that pass, and a
// slot outside the workspace (hand-written attributes) is refused before
// any kernel could write there.

// expected-error @+1 {{has no 'htp.workspace_bytes' (no workspace placement): run --htp-assign-workspace first}}
func.func @unplaced(%x: tensor<16xf32>) -> tensor<16xf32> {
  %y = htp.gelu %x : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// An intermediate with no slot, and not returned: nowhere to write it.
func.func @no_slot(%x: tensor<16xf32>) -> tensor<16xf32> attributes {htp.workspace_bytes = 64 : i64} {
  // expected-error @+1 {{'htp.gelu' op has no 'htp.workspace_offset' and its result is not returned: run --htp-assign-workspace first}}
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
  %a = htp.gelu %x {htp.workspace_offset = 0 : i64} : tensor<32xf32>
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
