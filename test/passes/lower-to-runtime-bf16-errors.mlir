// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-lower-to-runtime -verify-diagnostics
// What a bf16 entry point refuses: a block that mixes f32 and bf16
// tensors (its balance hooks lower to htp_rt_*_bf16:
// balance-hooks-bf16.mlir; the backward hooks' ops refuse bf16 in their
// verifiers, train-errors.mlir).

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
