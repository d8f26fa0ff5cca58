// RUN: %htp-opt %s -split-input-file --htp-assign-workspace -verify-diagnostics
// What --htp-assign-workspace refuses, and the placement attributes' form
// (checked by the dialect's verifier), each with a diagnostic.

// Only htp ops can be sized and placed.
func.func @foreign_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'arith.addf' op is not an htp op: only htp ops and func.return may appear in an htp entry point}}
  %y = arith.addf %x, %x : tensor<4xf32>
  %z = htp.gelu %y : tensor<4xf32>
  return %z : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #0 has type 'tensor<?xf32>'; htp entry points take static f32 or bf16 tensors only}}
func.func @dynamic(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

// An argument whose bytes pass int64 (each dim is valid for the type).
// expected-error @+1 {{argument #0 of type 'tensor<4294967296x4294967296xf32>' has more bytes than int64 holds}}
func.func @huge_argument(%x: tensor<4294967296x4294967296xf32>) -> tensor<4294967296x4294967296xf32> {
  return %x : tensor<4294967296x4294967296xf32>
}
// -----

// The workspace: two live values of 2^40 bytes pass HTP_ENTRY_MAX_WORKSPACE_BYTES.
func.func @workspace_too_large(%x: tensor<524288x524288xf32>) -> tensor<524288x524288xf32> {
  %a = htp.gelu %x : tensor<524288x524288xf32>
  // expected-error @+1 {{'htp.gelu' op its result would make the workspace larger than 1099511627776 bytes}}
  %b = htp.gelu %a : tensor<524288x524288xf32>
  %c = htp.add %a, %b : tensor<524288x524288xf32>
  return %c : tensor<524288x524288xf32>
}

// -----

// Kernel scratch whose float count overflows (kernels/htp_kernels.h's formula
// returns -1): tokens^2 + 4 * rows * num_heads * head_dim > 2^63.
func.func @scratch_count_overflow(%x: tensor<1x2147483647x1xf32>, %wqkv: tensor<2147483646x1xf32>, %bqkv: tensor<2147483646xf32>, %wp: tensor<1x715827882xf32>) -> tensor<1x2147483647x1xf32> {
  // expected-error @+1 {{'htp.attention' op needs more kernel scratch than int64 counts}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 1 : i64} : (tensor<1x2147483647x1xf32>, tensor<2147483646x1xf32>, tensor<2147483646xf32>, tensor<1x715827882xf32>) -> tensor<1x2147483647x1xf32>
  return %y : tensor<1x2147483647x1xf32>
}

// -----

// Kernel scratch whose bytes overflow: tokens^2 (about 2^62) floats.
func.func @scratch_bytes_overflow(%x: tensor<1x2147483647x1xf32>, %wqkv: tensor<3x1xf32>, %bqkv: tensor<3xf32>, %wp: tensor<1x1xf32>) -> tensor<1x2147483647x1xf32> {
  // expected-error @+1 {{'htp.attention' op needs more kernel scratch than int64 counts}}
  %y = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 1 : i64} : (tensor<1x2147483647x1xf32>, tensor<3x1xf32>, tensor<3xf32>, tensor<1x1xf32>) -> tensor<1x2147483647x1xf32>
  return %y : tensor<1x2147483647x1xf32>
}

// -----

// The attributes' form: an i64 multiple of 64, not negative, within
// HTP_ENTRY_MAX_WORKSPACE_BYTES, on a function (bytes) or an htp op (offsets).
// expected-error @+1 {{'htp.workspace_bytes' must be an i64 multiple of 64 from 0 to 1099511627776, got 100 : i64}}
func.func @unaligned_bytes(%x: tensor<4xf32>) -> tensor<4xf32> attributes {htp.workspace_bytes = 100 : i64} {
  return %x : tensor<4xf32>
}

// -----

func.func @negative_offset(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'htp.workspace_offsets': result #0's offset must be a multiple of 64 from 0 to 1099511627712, or -1 (in a result buffer), got -64}}
  %y = htp.gelu %x {htp.workspace_offsets = array<i64: -64>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @offset_past_limit(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'htp.scratch_offset' must be an i64 multiple of 64 from 0 to 1099511627712, got 1099511627776 : i64}}
  %y = htp.gelu %x {htp.scratch_offset = 1099511627776 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @offsets_not_array(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'htp.workspace_offsets' must be an array<i64> of one offset per result (1), got 0 : i64}}
  %y = htp.gelu %x {htp.workspace_offsets = 0 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @offsets_count(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'htp.workspace_offsets' must be an array<i64> of one offset per result (1), got array<i64: 0, 64>}}
  %y = htp.gelu %x {htp.workspace_offsets = array<i64: 0, 64>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @offsets_unaligned(%x: tensor<2x4xf32>, %w: tensor<3x4xf32>, %dy: tensor<2x3xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'htp.workspace_offsets': result #1's offset must be a multiple of 64 from 0 to 1099511627712, or -1 (in a result buffer), got 32}}
  %dx, %dw = htp.linear_grad %x, %w, %dy {htp.workspace_offsets = array<i64: -1, 32>} : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<3x4xf32>)
  return %dx : tensor<2x4xf32>
}

// -----

// The former single-result attribute is refused: placements are arrays now.
func.func @old_offset(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown htp attribute 'htp.workspace_offset'}}
  %y = htp.gelu %x {htp.workspace_offset = 0 : i64} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{'htp.workspace_offsets' belongs on an htp op}}
func.func @offset_on_function(%x: tensor<4xf32>) -> tensor<4xf32> attributes {htp.workspace_offsets = array<i64: 0>} {
  return %x : tensor<4xf32>
}
