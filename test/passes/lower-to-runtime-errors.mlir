// RUN: %htp-opt %s -split-input-file --htp-lower-to-runtime -verify-diagnostics
// What --htp-lower-to-runtime refuses, each with a diagnostic.

func.func @foreign_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'arith.addf' op is not supported by --htp-lower-to-runtime}}
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #0 has type 'tensor<?xf32>'; htp entry points take static f32 tensors only}}
func.func @dynamic(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

// expected-error @+1 {{an htp entry point must return at least one tensor}}
func.func @no_result(%x: tensor<4xf32>) {
  return
}

// -----

// expected-error @+1 {{external functions are not supported in htp modules}}
func.func private @external(%x: tensor<4xf32>) -> tensor<4xf32>

// -----

// A GEMM dim that does not fit BLAS's int would wrap silently in the kernels:
// here the rows (65536 * 65536), each dim being fine.
func.func @huge_rows(%x: tensor<65536x65536x1xf32>) -> tensor<65536x65536x1xf32> {
  // expected-error @+1 {{has a matrix dim above 2^31-1}}
  %y = htp.gelu %x : tensor<65536x65536x1xf32>
  return %y : tensor<65536x65536x1xf32>
}
