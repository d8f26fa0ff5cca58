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

// -----

// Names go into the JSON signature and the symbols: a control character, an
// invalid UTF-8 is refused (an empty one, by the dialect's verifier) (a space is fine: JSON escapes it).
// expected-error @+1 {{argument #1 is named 'bad\0Aname', which contains a control character}}
func.func @newline_name(%x: tensor<4xf32> {htp.input = "x y"}, %w: tensor<4xf32> {htp.param = "bad\nname"}) -> tensor<4xf32> {
  %y = htp.add %x, %w : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #0 is named '\FF\FE', which is not valid UTF-8}}
func.func @not_utf8(%x: tensor<4xf32> {htp.param = "\FF\FE"}) -> tensor<4xf32> {
  %y = htp.gelu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{function name 'tab\09name' contains a control character}}
func.func @"tab\09name"(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = htp.gelu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{function name '\C3' is not valid UTF-8}}
func.func @"\C3"(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = htp.gelu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// The lowering declares htp_* and defines htp.* symbols: another symbol of
// those names would meet them.
// expected-error @+1 {{symbol 'htp_cpu_gelu_f32' is reserved}}
llvm.func @htp_cpu_gelu_f32(%x: !llvm.ptr)
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = htp.gelu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{symbol 'htp.sig.f' is reserved}}
llvm.mlir.global external constant @htp.sig.f("x\00")
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = htp.gelu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A rank the signature cannot carry (runtime/htp_entry.h: at most 8 dims).
// expected-error @+1 {{argument #0 has rank 9; htp entry points take at most 8 dims}}
func.func @rank9(%x: tensor<1x1x1x1x1x1x1x1x2xf32>) -> tensor<1x1x1x1x1x1x1x1x2xf32> {
  return %x : tensor<1x1x1x1x1x1x1x1x2xf32>
}

// -----

// expected-error @+1 {{argument #0 has type 'tensor<0x4xf32>'; every dim of an htp entry point must be in [1, 2^31-1]}}
func.func @zero_dim(%x: tensor<0x4xf32>) -> tensor<0x4xf32> {
  return %x : tensor<0x4xf32>
}
