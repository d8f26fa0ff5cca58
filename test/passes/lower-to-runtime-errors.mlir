// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-lower-to-runtime -verify-diagnostics
// What --htp-lower-to-runtime refuses, each with a diagnostic (the workspace
// placement's own errors are in assign-workspace-errors.mlir).

func.func @foreign_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'arith.addf' op is not an htp op: only htp ops and func.return may appear in an htp entry point}}
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #0 has type 'tensor<?xf32>'; htp entry points take static f32 or bf16 tensors only}}
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

// A C1 control character (U+0085, next line), valid UTF-8 but refused by
// the signature's reader: refused here, before a .so is written.
// expected-error @+1 {{argument #0 is named 'c1\C2\85nel', which contains a control character}}
func.func @c1_name(%x: tensor<4xf32> {htp.param = "c1\C2\85nel"}) -> tensor<4xf32> {
  %y = htp.gelu %x : tensor<4xf32>
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

// -----

// Every size and count is checked arithmetic (runtime/htp_entry.h's limits);
// none wraps. The block's FLOPs: 32 linears of 2 * 2^57 each reach 2^63.
func.func @flops_overflow(%x: tensor<524288x524288xf32>, %w: tensor<524288x524288xf32>) -> (tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>) {
  %y0 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y1 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y2 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y3 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y4 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y5 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y6 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y7 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y8 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y9 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y10 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y11 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y12 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y13 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y14 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y15 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y16 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y17 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y18 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y19 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y20 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y21 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y22 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y23 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y24 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y25 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y26 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y27 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y28 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y29 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  %y30 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  // expected-error @+1 {{'htp.linear' op the block's FLOP count overflows int64}}
  %y31 = htp.linear %x, %w : (tensor<524288x524288xf32>, tensor<524288x524288xf32>) -> tensor<524288x524288xf32>
  return %y0, %y1, %y2, %y3, %y4, %y5, %y6, %y7, %y8, %y9, %y10, %y11, %y12, %y13, %y14, %y15, %y16, %y17, %y18, %y19, %y20, %y21, %y22, %y23, %y24, %y25, %y26, %y27, %y28, %y29, %y30, %y31 : tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>, tensor<524288x524288xf32>
}

