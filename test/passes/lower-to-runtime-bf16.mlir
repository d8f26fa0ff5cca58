// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-lower-to-runtime -cse | FileCheck %s
// bf16 blocks: every op calls the _bf16 twin of its runtime entry point
// (the same arguments as the f32 one, bf16 pointers), the signature says
// "dtype":"bf16", and every byte size counts 2 bytes per element, except
// kernel scratch, which is f32 floats as for an f32 block, and the f32 sums
// the CUDA kernels keep of their own (kernel_memory_bytes).

// A linear on bf16 calls htp_op_linear_bf16 with the f32 entry's arguments
// (rows, in, out in elements); the signature's dtypes are bf16. On CUDA
// its bias is added to an f32 sum of [3, 7] (84 bytes) kept by the kernels,
// beside cuBLASLt's 4 MiB: 4194388.
// CHECK-LABEL: llvm.func @htp_op_linear_bf16(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
// CHECK-NOT: _f32
// CHECK-LABEL: llvm.func @htp.entry.linear(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr, %[[BUFS:.*]]: !llvm.ptr) -> i32
// CHECK-DAG: %[[ROWS:.*]] = llvm.mlir.constant(3 : i64)
// CHECK-DAG: %[[IN:.*]] = llvm.mlir.constant(12 : i64)
// CHECK-DAG: %[[OUT:.*]] = llvm.mlir.constant(7 : i64)
// CHECK: llvm.call @htp_op_linear_bf16(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ROWS]], %[[IN]], %[[OUT]])
// CHECK: llvm.mlir.global external constant @htp.sig.linear("{\22htp_entry\22:2,\22entry\22:\22linear\22,
// CHECK-SAME: \22args\22:[{\22name\22:\22x\22,\22role\22:\22input\22,\22dtype\22:\22bf16\22,\22shape\22:[3,12]},
// CHECK-SAME: {\22name\22:\22head.weight\22,\22role\22:\22param\22,\22dtype\22:\22bf16\22,\22shape\22:[7,12]},
// CHECK-SAME: {\22name\22:\22head.bias\22,\22role\22:\22param\22,\22dtype\22:\22bf16\22,\22shape\22:[7]}],
// CHECK-SAME: \22results\22:[{\22name\22:\22result0\22,\22dtype\22:\22bf16\22,\22shape\22:[3,7]}],
// CHECK-SAME: \22workspace_bytes\22:64,\22kernel_memory_bytes\22:4194388,\22flops\22:504}\00")
func.func @linear(%x: tensor<3x12xbf16> {htp.input = "x"},
                  %w: tensor<7x12xbf16> {htp.param = "head.weight"},
                  %b: tensor<7xbf16> {htp.param = "head.bias"}) -> tensor<3x7xbf16> {
  %y = htp.linear %x, %w, %b : (tensor<3x12xbf16>, tensor<7x12xbf16>, tensor<7xbf16>) -> tensor<3x7xbf16>
  return %y : tensor<3x7xbf16>
}

// -----

// Slots are sized at 2 bytes per element: 64 bf16 values take 128 bytes
// (256 as f32), so %a is at 0, %b at 128, %c reuses %a's slot and the
// workspace is 256 bytes. GELU counts elements (64), not bytes.
// CHECK-LABEL: llvm.func @htp.entry.chain(
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[Y:.*]] = llvm.load
// CHECK: %[[WS:.*]] = llvm.load
// CHECK: %[[OFF0:.*]] = llvm.mlir.constant(0 : i64)
// CHECK: %[[A:.*]] = llvm.getelementptr %[[WS]][%[[OFF0]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: %[[COUNT:.*]] = llvm.mlir.constant(64 : i64)
// CHECK: llvm.call @htp_op_gelu_bf16(%{{.*}}, %[[X]], %[[A]], %[[COUNT]]
// CHECK: %[[OFF128:.*]] = llvm.mlir.constant(128 : i64)
// CHECK: %[[B:.*]] = llvm.getelementptr %[[WS]][%[[OFF128]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: llvm.call @htp_op_gelu_bf16(%{{.*}}, %[[A]], %[[B]], %[[COUNT]]
// CHECK: llvm.call @htp_op_gelu_bf16(%{{.*}}, %[[B]], %[[A]], %[[COUNT]]
// CHECK: llvm.call @htp_op_gelu_bf16(%{{.*}}, %[[A]], %[[Y]], %[[COUNT]]
// CHECK: @htp.sig.chain({{.*}}\22dtype\22:\22bf16\22,\22shape\22:[64]}],
// CHECK-SAME: \22workspace_bytes\22:256,\22kernel_memory_bytes\22:0,
func.func @chain(%x: tensor<64xbf16>) -> tensor<64xbf16> {
  %a = htp.gelu %x : tensor<64xbf16>
  %b = htp.gelu %a : tensor<64xbf16>
  %c = htp.gelu %b : tensor<64xbf16>
  %d = htp.gelu %c : tensor<64xbf16>
  return %d : tensor<64xbf16>
}

// -----

// A returned bf16 argument is copied by htp_op_copy with its size in bytes:
// 3 * 5 elements of 2 bytes = 30.
// CHECK-LABEL: llvm.func @htp.entry.passthrough(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[R0:.*]] = llvm.load
// CHECK: %[[BYTES:.*]] = llvm.mlir.constant(30 : i64)
// CHECK: llvm.call @htp_op_copy(%[[CTX]], %[[R0]], %[[X]], %[[BYTES]])
func.func @passthrough(%x: tensor<3x5xbf16>) -> tensor<3x5xbf16> {
  return %x : tensor<3x5xbf16>
}

// -----

// The unsplit bf16 attention calls htp_op_attention_bf16 with the same
// scratch as f32 (lower-to-runtime.mlir): 66 floats of 4 bytes
// (htp_attention_scratch_floats(1, 3, 4, 2, 2)), a 320-byte slot. Of their
// own the CUDA kernels keep the qkv projection's f32 sum, [3, 12] (144
// bytes, more than the output projection's [3, 4]), and cuBLASLt's 4 MiB.
// CHECK-LABEL: llvm.func @htp_op_attention_bf16(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i64, i64) -> i32
// CHECK-LABEL: llvm.func @htp.entry.attention(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[FLOATS:.*]] = llvm.mlir.constant(66 : i64) : i64
// CHECK: llvm.call @htp_op_attention_bf16(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[FLOATS]],
// CHECK: @htp.sig.attention({{.*}}\22workspace_bytes\22:320,\22kernel_memory_bytes\22:4194448,
func.func @attention(%x: tensor<1x3x4xbf16> {htp.input = "x"},
    %wqkv: tensor<12x4xbf16> {htp.param = "attn.qkv.weight"},
    %bqkv: tensor<12xbf16> {htp.param = "attn.qkv.bias"},
    %wproj: tensor<4x4xbf16> {htp.param = "attn.proj.weight"},
    %bproj: tensor<4xbf16> {htp.param = "attn.proj.bias"}) -> tensor<1x3x4xbf16> {
  %a = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 2 : i64} : (tensor<1x3x4xbf16>, tensor<12x4xbf16>, tensor<12xbf16>, tensor<4x4xbf16>, tensor<4xbf16>) -> tensor<1x3x4xbf16>
  return %a : tensor<1x3x4xbf16>
}

// -----

// The rest of a split bf16 block: layer norm (epsilon stays an f32),
// all-reduce (count in elements), bias add and residual, each its _bf16
// entry point; nothing f32 is called.
// CHECK-NOT: _f32
// CHECK-LABEL: llvm.func @htp.entry.rest(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK-DAG: %[[EPS:.*]] = llvm.mlir.constant(9.99999997E-7 : f32) : f32
// CHECK-DAG: %[[ROWS:.*]] = llvm.mlir.constant(6 : i64)
// CHECK-DAG: %[[DIM:.*]] = llvm.mlir.constant(8 : i64)
// CHECK: llvm.call @htp_op_layer_norm_bf16(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ROWS]], %[[DIM]], %[[EPS]])
// CHECK: %[[COUNT:.*]] = llvm.mlir.constant(48 : i64)
// CHECK: llvm.call @htp_allreduce_sum_bf16(%[[CTX]], %{{.*}}, %{{.*}}, %[[COUNT]]) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK: llvm.call @htp_op_bias_add_bf16(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %[[ROWS]], %[[DIM]])
// CHECK: llvm.call @htp_op_add_bf16(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %[[COUNT]])
// CHECK-NOT: _f32
func.func @rest(%x: tensor<2x3x8xbf16>, %g: tensor<8xbf16>, %b: tensor<8xbf16>) -> tensor<2x3x8xbf16> {
  %n = htp.layer_norm %x, %g, %b {epsilon = 1.0e-06 : f32} : (tensor<2x3x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> tensor<2x3x8xbf16>
  %s = htp.all_reduce %n : tensor<2x3x8xbf16>
  %t = htp.bias_add %s, %b : tensor<2x3x8xbf16>, tensor<8xbf16>
  %r = htp.add %x, %t : tensor<2x3x8xbf16>
  return %r : tensor<2x3x8xbf16>
}
