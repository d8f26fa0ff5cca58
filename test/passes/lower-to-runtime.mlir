// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-lower-to-runtime -cse | FileCheck %s

// A returned op result is computed in place in the result buffer
// (buffers[2]) by the runtime's op entry point on the rank's context
// (argument 0), whose status is checked (the block names no device kernel,
// DESIGN §6); a missing bias is passed as null; the entry is
// @"htp.entry.NAME" and its JSON signature @"htp.sig.NAME" (runtime/htp_entry.h)
// names the arguments, the workspace and the GEMM FLOPs (2*rows*in*out =
// 2*3*12*7).
// CHECK-LABEL: llvm.func @htp_op_linear_f32(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64) -> i32
// CHECK-LABEL: llvm.func @htp.entry.linear(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr, %[[BUFS:.*]]: !llvm.ptr) -> i32
// CHECK: %[[X_SLOT:.*]] = llvm.getelementptr %[[BUFS]][0]
// CHECK: %[[X:.*]] = llvm.load %[[X_SLOT]]
// CHECK: %[[W_SLOT:.*]] = llvm.getelementptr %[[BUFS]][1]
// CHECK: %[[W:.*]] = llvm.load %[[W_SLOT]]
// CHECK: %[[Y_SLOT:.*]] = llvm.getelementptr %[[BUFS]][2]
// CHECK: %[[Y:.*]] = llvm.load %[[Y_SLOT]]
// CHECK: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[STATUS:.*]] = llvm.call @htp_op_linear_f32(%[[CTX]], %[[X]], %[[W]], %[[NULL]], %[[Y]], %{{.*}}, %{{.*}}, %{{.*}})
// CHECK: %[[FAILED:.*]] = llvm.icmp "ne" %[[STATUS]]
// CHECK: llvm.cond_br %[[FAILED]], ^[[FAIL:bb[0-9]+]](%[[STATUS]] : i32), ^{{bb[0-9]+}}
// CHECK-NOT: memcpy
// CHECK-NOT: htp_op_copy
// CHECK: llvm.return
// CHECK: ^[[FAIL]](%[[CODE:.*]]: i32):
// CHECK-NEXT: llvm.return %[[CODE]] : i32
// CHECK: llvm.mlir.global external constant @htp.sig.linear("{\22htp_entry\22:2,\22entry\22:\22linear\22,
// CHECK-SAME: \22args\22:[{\22name\22:\22x\22,\22role\22:\22input\22,\22dtype\22:\22f32\22,\22shape\22:[3,12]},
// CHECK-SAME: {\22name\22:\22head.weight\22,\22role\22:\22param\22,\22dtype\22:\22f32\22,\22shape\22:[7,12]}],
// CHECK-SAME: \22results\22:[{\22name\22:\22result0\22,\22dtype\22:\22f32\22,\22shape\22:[3,7]}],
// CHECK-SAME: \22workspace_bytes\22:64,\22kernel_memory_bytes\22:0,\22flops\22:504}\00")
// CHECK: llvm.mlir.global external constant @htp.default_entry("linear\00")
func.func @linear(%x: tensor<3x12xf32> {htp.input = "x"},
                  %w: tensor<7x12xf32> {htp.param = "head.weight"}) -> tensor<3x7xf32> {
  %y = htp.linear %x, %w : (tensor<3x12xf32>, tensor<7x12xf32>) -> tensor<3x7xf32>
  return %y : tensor<3x7xf32>
}

// -----

// Workspace slots are reused once a value is dead: in a chain of four GELUs
// (64-byte slots): %a takes offset 0 and %b offset 64; %c reuses %a's slot; %d goes straight into the result buffer. Unnamed inputs are
// "arg<N>".
// CHECK-LABEL: llvm.func @htp.entry.chain(
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[Y:.*]] = llvm.load
// CHECK: %[[WS:.*]] = llvm.load
// CHECK: %[[OFF0:.*]] = llvm.mlir.constant(0 : i64)
// CHECK: %[[A:.*]] = llvm.getelementptr %[[WS]][%[[OFF0]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: llvm.call @htp_op_gelu_f32(%{{.*}}, %[[X]], %[[A]]
// CHECK: %[[OFF64:.*]] = llvm.mlir.constant(64 : i64)
// CHECK: %[[B:.*]] = llvm.getelementptr %[[WS]][%[[OFF64]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: llvm.call @htp_op_gelu_f32(%{{.*}}, %[[A]], %[[B]]
// CHECK: llvm.call @htp_op_gelu_f32(%{{.*}}, %[[B]], %[[A]]
// CHECK: llvm.call @htp_op_gelu_f32(%{{.*}}, %[[A]], %[[Y]]
// CHECK: @htp.sig.chain("{\22htp_entry\22:2,\22entry\22:\22chain\22,\22args\22:[{\22name\22:\22arg0\22,\22role\22:\22input\22,\22dtype\22:\22f32\22,\22shape\22:[16]}],
// CHECK-SAME: \22results\22:[{\22name\22:\22result0\22,\22dtype\22:\22f32\22,\22shape\22:[16]}],\22workspace_bytes\22:128,\22kernel_memory_bytes\22:0,\22flops\22:0}\00")
func.func @chain(%x: tensor<16xf32>) -> tensor<16xf32> {
  %a = htp.gelu %x : tensor<16xf32>
  %b = htp.gelu %a : tensor<16xf32>
  %c = htp.gelu %b : tensor<16xf32>
  %d = htp.gelu %c : tensor<16xf32>
  return %d : tensor<16xf32>
}

// -----

// A returned argument, and a value returned twice, are copied into their
// result buffers through the runtime (htp_op_copy: the buffers may live on
// a device), each copy's status checked; no llvm.memcpy; with two entries
// there is no default entry.
// CHECK-NOT: memcpy
// CHECK-LABEL: llvm.func @htp.entry.passthrough(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[R0:.*]] = llvm.load
// CHECK: %[[R1:.*]] = llvm.load
// CHECK: %[[R2:.*]] = llvm.load
// CHECK: llvm.call @htp_op_add_f32(%[[CTX]], %[[X]], %[[X]], %[[R0]]
// CHECK: %[[C1:.*]] = llvm.call @htp_op_copy(%[[CTX]], %[[R1]], %[[X]], %{{.*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK: llvm.icmp "ne" %[[C1]]
// CHECK: %[[C2:.*]] = llvm.call @htp_op_copy(%[[CTX]], %[[R2]], %[[R0]], %{{.*}})
// CHECK: llvm.icmp "ne" %[[C2]]
// CHECK-NOT: memcpy
// CHECK-LABEL: llvm.func @htp.entry.other(
// CHECK-NOT: @htp.default_entry
func.func @passthrough(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %s = htp.add %x, %x : tensor<4xf32>
  return %s, %x, %s : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
func.func @other(%x: tensor<4xf32>) -> tensor<4xf32> {
  %g = htp.gelu %x approximate tanh : tensor<4xf32>
  return %g : tensor<4xf32>
}

// -----

// A split block: the all-reduce calls libhtprt on the rank's context
// (argument 0) and returns its status at once when it fails; the bias is
// added after it; the signature records tp and each shard, and what the
// CUDA kernels keep of their own: the same-device sum of two ranks' partials
// stages their two pointers (16 bytes, then 16 of padding: 32).
// CHECK-LABEL: llvm.func @htp_allreduce_sum_f32(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK-LABEL: llvm.func @htp.entry.split(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr, %{{.*}}: !llvm.ptr) -> i32
// CHECK: llvm.call @htp_op_linear_f32(%[[CTX]],
// CHECK: %[[STATUS:.*]] = llvm.call @htp_allreduce_sum_f32(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32
// CHECK: %[[FAILED:.*]] = llvm.icmp "ne" %[[STATUS]], %{{.*}} : i32
// CHECK: llvm.cond_br %[[FAILED]], ^[[FAIL:bb[0-9]+]](%[[STATUS]] : i32), ^[[NEXT:bb[0-9]+]]
// CHECK: ^[[NEXT]]:
// CHECK: llvm.call @htp_op_bias_add_f32(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64) -> i32
// CHECK: llvm.return %{{.*}} : i32
// CHECK: ^[[FAIL]](%[[CODE:.*]]: i32):
// CHECK-NEXT: llvm.return %[[CODE]] : i32
// CHECK: @htp.sig.split("{\22htp_entry\22:2,\22entry\22:\22split\22,\22args\22:[{\22name\22:\22x\22,{{[^}]*}}},
// CHECK-SAME: {\22name\22:\22fc2.weight\22,\22role\22:\22param\22,\22dtype\22:\22f32\22,\22shape\22:[8,10],\22shard\22:{\22dim\22:1,\22parts\22:2,\22layout\22:\22blocks\22}},
// CHECK-SAME: {\22name\22:\22fc2.bias\22,\22role\22:\22param\22,\22dtype\22:\22f32\22,\22shape\22:[8]}],
// CHECK-SAME: \22kernel_memory_bytes\22:32,\22flops\22:480,\22tp\22:2}\00")
func.func @split(%x: tensor<3x10xf32> {htp.input = "x"},
                 %w: tensor<8x10xf32> {htp.param = "fc2.weight", htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>},
                 %b: tensor<8xf32> {htp.param = "fc2.bias"}) -> tensor<3x8xf32> attributes {htp.tp = 2 : i64} {
  %p = htp.linear %x, %w : (tensor<3x10xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  %s = htp.all_reduce %p : tensor<3x8xf32>
  %y = htp.bias_add %s, %b : tensor<3x8xf32>, tensor<8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// An unsplit attention calls the runtime's op entry point with its scratch
// slot and the slot's size in floats: the hungriest device's
// (htp_attention_scratch_floats(1, 3, 4, 2, 2): the CUDA kernel's 36 qkv + 12
// context + 2 heads x 9 scores = 66, where the CPU's needs 57), since the
// block names no device; a kernel that needs more still refuses instead of
// overrunning the workspace. Of their own the f32 CUDA kernels keep only
// cuBLASLt's workspace (4 MiB, under HTP_CUDA_LINEAR_EPILOGUE=cublaslt).
// CHECK-LABEL: llvm.func @htp_op_attention_f32(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i64, i64) -> i32
// CHECK-LABEL: llvm.func @htp.entry.attention(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[FLOATS:.*]] = llvm.mlir.constant(66 : i64) : i64
// CHECK: %[[STATUS:.*]] = llvm.call @htp_op_attention_f32(%[[CTX]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[FLOATS]],
// CHECK: llvm.icmp "ne" %[[STATUS]]
// CHECK: @htp.sig.attention({{.*}}\22kernel_memory_bytes\22:4194304,
func.func @attention(%x: tensor<1x3x4xf32> {htp.input = "x"},
    %wqkv: tensor<12x4xf32> {htp.param = "attn.qkv.weight"},
    %bqkv: tensor<12xf32> {htp.param = "attn.qkv.bias"},
    %wproj: tensor<4x4xf32> {htp.param = "attn.proj.weight"},
    %bproj: tensor<4xf32> {htp.param = "attn.proj.bias"}) -> tensor<1x3x4xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 2 : i64} : (tensor<1x3x4xf32>, tensor<12x4xf32>, tensor<12xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<1x3x4xf32>
  return %a : tensor<1x3x4xf32>
}
