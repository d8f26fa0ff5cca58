// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-lower-to-runtime -verify-diagnostics
// What a bf16 entry point refuses: a block that mixes f32 and bf16
// tensors, and the balance hooks, which are f32-only.

// An argument no op reads still sets the block's type: f32 beside bf16.
// expected-error @+1 {{argument #1 has element type f32 but argument #0 has bf16; an htp block is all f32 or all bf16}}
func.func @mixed_arguments(%x: tensor<4xbf16>, %unused: tensor<4xf32>) -> tensor<4xbf16> {
  %y = htp.gelu %x : tensor<4xbf16>
  return %y : tensor<4xbf16>
}

// -----

// f16 is not an htp element type (the ops refuse it too).
// expected-error @+1 {{argument #0 has type 'tensor<4xf16>'; htp entry points take static f32 or bf16 tensors only}}
func.func @f16_argument(%x: tensor<4xf16>) -> tensor<4xf16> {
  return %x : tensor<4xf16>
}

// -----

// An htp.mlp written by hand in bf16: the hook htp_rt_mlp_f32 computes f32.
func.func @bf16_mlp(%x: tensor<3x8xbf16>, %w1: tensor<10x8xbf16>, %w2: tensor<8x10xbf16>) -> tensor<3x8xbf16> attributes {htp.tp = 1 : i64} {
  // expected-error @+1 {{'htp.mlp' op is a balance hook on bf16 tensors; the runtime's balance hooks are f32-only}}
  %y = htp.mlp %x, %w1, %w2 {pair = 1 : i64, unit_width = 5 : i64} : (tensor<3x8xbf16>, tensor<10x8xbf16>, tensor<8x10xbf16>) -> tensor<3x8xbf16>
  return %y : tensor<3x8xbf16>
}

// -----

// A bf16 attention with a pair would call htp_rt_attention_f32.
func.func @bf16_paired_attention(%x: tensor<1x3x4xbf16>, %wqkv: tensor<12x4xbf16>, %bqkv: tensor<12xbf16>,
                                 %wproj: tensor<4x4xbf16>) -> tensor<1x3x4xbf16> attributes {htp.tp = 1 : i64} {
  // expected-error @+1 {{'htp.attention' op is a balance hook on bf16 tensors}}
  %a = htp.attention %x, %wqkv, %bqkv, %wproj {num_heads = 2 : i64, pair = 0 : i64} : (tensor<1x3x4xbf16>, tensor<12x4xbf16>, tensor<12xbf16>, tensor<4x4xbf16>) -> tensor<1x3x4xbf16>
  return %a : tensor<1x3x4xbf16>
}
