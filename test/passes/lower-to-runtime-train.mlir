// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-lower-to-runtime -cse | FileCheck %s
// The training ops' lowering: each op is one call of its runtime entry
// point (runtime/htp.h, f32 only) on the rank's context, with a pointer per
// operand and per result (its result buffer or workspace slot), null for an
// optional gradient not wanted, its scratch and the dims; "flops" counts
// the patch embedding's GEMM (2*B*N*D*C*P*P, the gradient's dw as many)
// and the backward GEMMs (twice the forward's).

// linear_grad with two results: dbias not wanted (null); dx and dw go to
// the result buffers 3 and 4; rows 2, in 4, out 3; flops 4*2*4*3 = 96.
// CHECK-LABEL: llvm.func @htp.entry.linear_grad(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[W:.*]] = llvm.load
// CHECK: %[[DY:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.load
// CHECK: %[[DW:.*]] = llvm.load
// CHECK: %[[NULL:.*]] = llvm.mlir.zero
// CHECK: %[[C2:.*]] = llvm.mlir.constant(2 : i64)
// CHECK: %[[C4:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: %[[C3:.*]] = llvm.mlir.constant(3 : i64)
// CHECK: llvm.call @htp_op_linear_backward_f32(%[[CTX]], %[[X]], %[[W]], %[[DY]], %[[DX]], %[[DW]], %[[NULL]], %[[C2]], %[[C4]], %[[C3]])
// CHECK: @htp.sig.linear_grad({{.*}}\22flops\22:96}
func.func @linear_grad(%x: tensor<2x4xf32>, %w: tensor<3x4xf32>, %dy: tensor<2x3xf32>)
    -> (tensor<2x4xf32>, tensor<3x4xf32>) {
  %dx, %dw = htp.linear_grad %x, %w, %dy
      : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<3x4xf32>)
  return %dx, %dw : tensor<2x4xf32>, tensor<3x4xf32>
}

// -----

// With dbias, whose result lives in the workspace (it is only read by the
// add): rows = 2*5 of a 3-D input.
// CHECK-LABEL: llvm.func @htp.entry.linear_grad_bias(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[W:.*]] = llvm.load
// CHECK: %[[DY:.*]] = llvm.load
// CHECK: %[[B:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.load
// CHECK: %[[DW:.*]] = llvm.load
// CHECK: %[[R:.*]] = llvm.load
// CHECK: %[[WS:.*]] = llvm.load
// CHECK: %[[OFF:.*]] = llvm.mlir.constant(0 : i64)
// CHECK: %[[DB:.*]] = llvm.getelementptr %[[WS]][%[[OFF]]]
// CHECK: %[[ROWS:.*]] = llvm.mlir.constant(10 : i64)
// CHECK: llvm.call @htp_op_linear_backward_f32(%[[CTX]], %[[X]], %[[W]], %[[DY]], %[[DX]], %[[DW]], %[[DB]], %[[ROWS]], %{{.*}}, %{{.*}})
// CHECK: llvm.call @htp_op_add_f32(%[[CTX]], %[[DB]], %[[B]], %[[R]], %{{.*}})
func.func @linear_grad_bias(%x: tensor<2x5x4xf32>, %w: tensor<3x4xf32>, %dy: tensor<2x5x3xf32>, %b: tensor<3xf32>)
    -> (tensor<2x5x4xf32>, tensor<3x4xf32>, tensor<3xf32>) {
  %dx, %dw, %db = htp.linear_grad %x, %w, %dy
      : (tensor<2x5x4xf32>, tensor<3x4xf32>, tensor<2x5x3xf32>) -> (tensor<2x5x4xf32>, tensor<3x4xf32>, tensor<3xf32>)
  %s = htp.add %db, %b : tensor<3xf32>
  return %dx, %dw, %s : tensor<2x5x4xf32>, tensor<3x4xf32>, tensor<3xf32>
}

// -----

// layer_norm_grad: (ctx, x, gamma, dy, dx, dgamma, dbeta, rows, dim, eps).
// CHECK-LABEL: llvm.func @htp.entry.layer_norm_grad(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[G:.*]] = llvm.load
// CHECK: %[[DY:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.load
// CHECK: %[[DG:.*]] = llvm.load
// CHECK: %[[DB:.*]] = llvm.load
// CHECK: %[[EPS:.*]] = llvm.mlir.constant(9.99999974E-6 : f32)
// CHECK: %[[ROWS:.*]] = llvm.mlir.constant(6 : i64)
// CHECK: %[[DIM:.*]] = llvm.mlir.constant(8 : i64)
// CHECK: llvm.call @htp_op_layer_norm_backward_f32(%[[CTX]], %[[X]], %[[G]], %[[DY]], %[[DX]], %[[DG]], %[[DB]], %[[ROWS]], %[[DIM]], %[[EPS]])
// The CUDA backward keeps two doubles a row of its own (2 x 6 x 8 bytes).
// CHECK: @htp.sig.layer_norm_grad({{.*}}\22kernel_memory_bytes\22:96,\22flops\22:0}
func.func @layer_norm_grad(%x: tensor<2x3x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x3x8xf32>)
    -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %dx, %dg, %db = htp.layer_norm_grad %x, %g, %dy {epsilon = 1.0e-05 : f32}
      : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %dx, %dg, %db : tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// gelu_grad: (ctx, x, dy, dx, count, tanh).
// CHECK-LABEL: llvm.func @htp.entry.gelu_grad(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[DY:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.load
// CHECK-DAG: %[[TANH:.*]] = llvm.mlir.constant(1 : i32)
// CHECK-DAG: %[[N:.*]] = llvm.mlir.constant(24 : i64)
// CHECK: llvm.call @htp_op_gelu_backward_f32(%[[CTX]], %[[X]], %[[DY]], %[[DX]], %[[N]], %[[TANH]])
func.func @gelu_grad(%x: tensor<2x12xf32>, %dy: tensor<2x12xf32>) -> tensor<2x12xf32> {
  %dx = htp.gelu_grad %x, %dy approximate tanh : (tensor<2x12xf32>, tensor<2x12xf32>) -> tensor<2x12xf32>
  return %dx : tensor<2x12xf32>
}

// -----

// attention_grad with dproj_bias: (ctx, x, wqkv, bqkv, wproj, dy, dx, dwqkv,
// dbqkv, dwproj, dbproj, scratch, scratch floats, batch, tokens, dim,
// heads, head_dim); the scratch is htp_cpu_attention_backward_scratch_floats
// (2, 5, 12, 3, 4) = 1260 floats, at workspace offset 0 (every result is in
// a result buffer). flops: twice the forward's 2*10*12*36 + 4*2*3*5*5*4 +
// 2*10*12*12 = 13920: 27840.
// CHECK-LABEL: llvm.func @htp.entry.attention_grad(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[WQKV:.*]] = llvm.load
// CHECK: %[[BQKV:.*]] = llvm.load
// CHECK: %[[WP:.*]] = llvm.load
// CHECK: %[[DY:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.load
// CHECK: %[[DWQKV:.*]] = llvm.load
// CHECK: %[[DBQKV:.*]] = llvm.load
// CHECK: %[[DWP:.*]] = llvm.load
// CHECK: %[[DBP:.*]] = llvm.load
// CHECK: %[[WS:.*]] = llvm.load
// CHECK: %[[SCRATCH:.*]] = llvm.getelementptr %[[WS]]
// CHECK: %[[FLOATS:.*]] = llvm.mlir.constant(1260 : i64)
// CHECK: %[[B:.*]] = llvm.mlir.constant(2 : i64)
// CHECK: %[[T:.*]] = llvm.mlir.constant(5 : i64)
// CHECK: %[[D:.*]] = llvm.mlir.constant(12 : i64)
// CHECK: %[[H:.*]] = llvm.mlir.constant(3 : i64)
// CHECK: %[[HD:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: llvm.call @htp_op_attention_backward_f32(%[[CTX]], %[[X]], %[[WQKV]], %[[BQKV]], %[[WP]], %[[DY]], %[[DX]], %[[DWQKV]], %[[DBQKV]], %[[DWP]], %[[DBP]], %[[SCRATCH]], %[[FLOATS]], %[[B]], %[[T]], %[[D]], %[[H]], %[[HD]])
// CHECK: @htp.sig.attention_grad({{.*}}\22workspace_bytes\22:5056,\22kernel_memory_bytes\22:0,\22flops\22:27840}
func.func @attention_grad(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                          %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>)
    -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) {
  %d:5 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>)
  return %d#0, %d#1, %d#2, %d#3, %d#4
      : tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>
}

// -----

// Without dproj_bias the kernel gets null.
// CHECK-LABEL: llvm.func @htp.entry.attention_grad_no_bias(
// CHECK: %[[NULL:.*]] = llvm.mlir.zero
// CHECK: llvm.call @htp_op_attention_backward_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[NULL]], %{{[^,]*}}, %{{[^,]*}},
func.func @attention_grad_no_bias(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                  %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>)
    -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) {
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return %d#0, %d#1, %d#2, %d#3 : tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>
}

// -----

// attention_grad with a pair (a balanced attention's adjoint): the backward
// hook, 17 arguments (ctx, pair, x, wqkv, bqkv, wproj, dy, dx, dwqkv,
// dbqkv, dwproj, scratch, batch, tokens, dim, heads, head_dim): no proj
// bias, no scratch size; its scratch is
// htp_rt_attention_grad_scratch_floats(2, 5, 12, 3, 4) = 2604 floats (10432
// bytes aligned). flops as the unbalanced one's: 27840.
// CHECK-LABEL: llvm.func @htp.entry.attention_grad_balanced(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[WQKV:.*]] = llvm.load
// CHECK: %[[BQKV:.*]] = llvm.load
// CHECK: %[[WP:.*]] = llvm.load
// CHECK: %[[DY:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.load
// CHECK: %[[DWQKV:.*]] = llvm.load
// CHECK: %[[DBQKV:.*]] = llvm.load
// CHECK: %[[DWP:.*]] = llvm.load
// CHECK: %[[WS:.*]] = llvm.load
// CHECK: %[[PAIR:.*]] = llvm.mlir.constant(2 : i32)
// CHECK: %[[SCRATCH:.*]] = llvm.getelementptr %[[WS]]
// CHECK: %[[B:.*]] = llvm.mlir.constant(2 : i64)
// CHECK: %[[T:.*]] = llvm.mlir.constant(5 : i64)
// CHECK: %[[D:.*]] = llvm.mlir.constant(12 : i64)
// CHECK: %[[H:.*]] = llvm.mlir.constant(3 : i64)
// CHECK: %[[HD:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: %[[STATUS:.*]] = llvm.call @htp_rt_attention_grad_f32(%[[CTX]], %[[PAIR]], %[[X]], %[[WQKV]], %[[BQKV]], %[[WP]], %[[DY]], %[[DX]], %[[DWQKV]], %[[DBQKV]], %[[DWP]], %[[SCRATCH]], %[[B]], %[[T]], %[[D]], %[[H]], %[[HD]]) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i64) -> i32
// CHECK: llvm.icmp "ne" %[[STATUS]]
// CHECK-NOT: htp_op_attention_backward_f32
// CHECK: @htp.sig.attention_grad_balanced({{.*}}\22workspace_bytes\22:10432,\22kernel_memory_bytes\22:0,\22flops\22:27840}
func.func @attention_grad_balanced(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                                   %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>)
    -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) {
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64, pair = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return %d#0, %d#1, %d#2, %d#3 : tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>
}

// -----

// mlp_grad: the backward hook, 17 arguments (ctx, pair, x, w1, b1, w2, dy,
// dx, dw1, db1, dw2, scratch, rows, dim, hidden, unit_width, tanh): the
// results in the runtime's order (db1, result #3, before dw2, result #2);
// rows 2*3, dim 8, hidden 16; scratch htp_rt_mlp_grad_scratch_floats(6, 8,
// 16, 4) = 880 floats (3520 bytes). flops: twice the forward's 4*6*8*16:
// 6144.
// CHECK-LABEL: llvm.func @htp.entry.mlp_grad(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[W1:.*]] = llvm.load
// CHECK: %[[W2:.*]] = llvm.load
// CHECK: %[[B1:.*]] = llvm.load
// CHECK: %[[DY:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.load
// CHECK: %[[DW1:.*]] = llvm.load
// CHECK: %[[DW2:.*]] = llvm.load
// CHECK: %[[DB1:.*]] = llvm.load
// CHECK: %[[WS:.*]] = llvm.load
// CHECK: %[[PAIR:.*]] = llvm.mlir.constant(3 : i32)
// CHECK: %[[SCRATCH:.*]] = llvm.getelementptr %[[WS]]
// CHECK: %[[ROWS:.*]] = llvm.mlir.constant(6 : i64)
// CHECK: %[[DIM:.*]] = llvm.mlir.constant(8 : i64)
// CHECK: %[[HIDDEN:.*]] = llvm.mlir.constant(16 : i64)
// CHECK: %[[WIDTH:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: %[[TANH:.*]] = llvm.mlir.constant(1 : i32)
// CHECK: %[[STATUS:.*]] = llvm.call @htp_rt_mlp_grad_f32(%[[CTX]], %[[PAIR]], %[[X]], %[[W1]], %[[B1]], %[[W2]], %[[DY]], %[[DX]], %[[DW1]], %[[DB1]], %[[DW2]], %[[SCRATCH]], %[[ROWS]], %[[DIM]], %[[HIDDEN]], %[[WIDTH]], %[[TANH]]) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, i32) -> i32
// CHECK: llvm.icmp "ne" %[[STATUS]]
// CHECK: @htp.sig.mlp_grad({{.*}}\22workspace_bytes\22:3520,\22kernel_memory_bytes\22:0,\22flops\22:6144}
func.func @mlp_grad(%x: tensor<2x3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>,
                    %b1: tensor<16xf32>, %dy: tensor<2x3x8xf32>)
    -> (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32>) {
  %d:4 = htp.mlp_grad %x, %w1, %w2, %dy fc1_bias(%b1) approximate tanh {pair = 3 : i64, unit_width = 4 : i64}
      : (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<2x3x8xf32>, tensor<16xf32>)
      -> (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  return %d#0, %d#1, %d#2, %d#3 : tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32>
}

// -----

// Without fc1 bias the hook gets null for b1 and db1; tanh 0.
// CHECK-LABEL: llvm.func @htp.entry.mlp_grad_no_bias(
// CHECK: %[[NULL:.*]] = llvm.mlir.zero
// CHECK: %[[EXACT:.*]] = llvm.mlir.constant(0 : i32)
// CHECK: llvm.call @htp_rt_mlp_grad_f32(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[NULL]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[NULL]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[EXACT]])
func.func @mlp_grad_no_bias(%x: tensor<2x3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>,
                            %dy: tensor<2x3x8xf32>)
    -> (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>) {
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<2x3x8xf32>)
      -> (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return %d#0, %d#1, %d#2 : tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>
}

// -----

// patch_embed: (ctx, images, w, b, y, scratch, scratch floats = B*C*H*W =
// 2*3*8*4 = 192, batch, channels, height, width, patch, dim); then
// patch_embed_grad (ctx, images, dy, dw, db, scratch, floats, the same
// dims). flops: 2*B*N*D*C*P*P = 2*2*8*5*3*2*2 = 1920 for each: 3840.
// CHECK-LABEL: llvm.func @htp.entry.patch(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[IMG:.*]] = llvm.load
// CHECK: %[[W:.*]] = llvm.load
// CHECK: %[[B:.*]] = llvm.load
// CHECK: %[[Y:.*]] = llvm.load
// CHECK: %[[DW:.*]] = llvm.load
// CHECK: %[[DB:.*]] = llvm.load
// CHECK: %[[WS:.*]] = llvm.load
// CHECK: %[[SCRATCH:.*]] = llvm.getelementptr %[[WS]]
// CHECK: %[[FLOATS:.*]] = llvm.mlir.constant(192 : i64)
// CHECK: %[[BATCH:.*]] = llvm.mlir.constant(2 : i64)
// CHECK: %[[C:.*]] = llvm.mlir.constant(3 : i64)
// CHECK: %[[H:.*]] = llvm.mlir.constant(8 : i64)
// CHECK: %[[WD:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: %[[D:.*]] = llvm.mlir.constant(5 : i64)
// CHECK: llvm.call @htp_op_patch_embed_f32(%[[CTX]], %[[IMG]], %[[W]], %[[B]], %[[Y]], %[[SCRATCH]], %[[FLOATS]], %[[BATCH]], %[[C]], %[[H]], %[[WD]], %[[BATCH]], %[[D]])
// CHECK: llvm.call @htp_op_patch_embed_backward_f32(%[[CTX]], %[[IMG]], %[[Y]], %[[DW]], %[[DB]], %[[SCRATCH]], %[[FLOATS]], %[[BATCH]], %[[C]], %[[H]], %[[WD]], %[[BATCH]], %[[D]])
// CHECK: @htp.sig.patch({{.*}}\22flops\22:3840}
func.func @patch(%img: tensor<2x3x8x4xf32>, %w: tensor<5x3x2x2xf32>, %b: tensor<5xf32>)
    -> (tensor<2x8x5xf32>, tensor<5x3x2x2xf32>, tensor<5xf32>) {
  %t = htp.patch_embed %img, %w, %b {patch = 2 : i64}
      : (tensor<2x3x8x4xf32>, tensor<5x3x2x2xf32>, tensor<5xf32>) -> tensor<2x8x5xf32>
  %dw, %db = htp.patch_embed_grad %img, %t {patch = 2 : i64}
      : (tensor<2x3x8x4xf32>, tensor<2x8x5xf32>) -> (tensor<5x3x2x2xf32>, tensor<5xf32>)
  return %t, %dw, %db : tensor<2x8x5xf32>, tensor<5x3x2x2xf32>, tensor<5xf32>
}

// -----

// embed_tokens (ctx, patches, cls, pos, y, batch, patches_per_image, dim),
// its gradient (ctx, dy, dpatches, dcls, dpos, batch, patches_per_image,
// dim), cls_token (ctx, x, y, batch, tokens, dim), its gradient (ctx, dy,
// dx, batch, tokens, dim) and row_sum (ctx, x, y, rows, cols).
// CHECK-LABEL: llvm.func @htp.entry.tokens(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[P:.*]] = llvm.load
// CHECK: %[[CLS:.*]] = llvm.load
// CHECK: %[[POS:.*]] = llvm.load
// CHECK: %[[DC:.*]] = llvm.load
// CHECK: %[[X:.*]] = llvm.load
// CHECK: %[[C:.*]] = llvm.load
// CHECK: %[[DP:.*]] = llvm.load
// CHECK: %[[DCLS:.*]] = llvm.load
// CHECK: %[[DPOS:.*]] = llvm.load
// CHECK: %[[DX:.*]] = llvm.load
// CHECK: %[[RS:.*]] = llvm.load
// CHECK: %[[B:.*]] = llvm.mlir.constant(2 : i64)
// CHECK: %[[N:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: %[[D:.*]] = llvm.mlir.constant(6 : i64)
// CHECK: llvm.call @htp_op_embed_tokens_f32(%[[CTX]], %[[P]], %[[CLS]], %[[POS]], %[[X]], %[[B]], %[[N]], %[[D]])
// CHECK: %[[T:.*]] = llvm.mlir.constant(5 : i64)
// CHECK: llvm.call @htp_op_cls_token_f32(%[[CTX]], %[[X]], %[[C]], %[[B]], %[[T]], %[[D]])
// CHECK: llvm.call @htp_op_embed_tokens_backward_f32(%[[CTX]], %[[X]], %[[DP]], %[[DCLS]], %[[DPOS]], %[[B]], %[[N]], %[[D]])
// CHECK: llvm.call @htp_op_cls_token_backward_f32(%[[CTX]], %[[DC]], %[[DX]], %[[B]], %[[T]], %[[D]])
// CHECK: %[[ROWS:.*]] = llvm.mlir.constant(10 : i64)
// CHECK: llvm.call @htp_op_row_sum_f32(%[[CTX]], %[[X]], %[[RS]], %[[ROWS]], %[[D]])
func.func @tokens(%p: tensor<2x4x6xf32>, %cls: tensor<1x1x6xf32>, %pos: tensor<1x5x6xf32>, %dc: tensor<2x6xf32>)
    -> (tensor<2x5x6xf32>, tensor<2x6xf32>, tensor<2x4x6xf32>, tensor<1x1x6xf32>, tensor<1x5x6xf32>,
        tensor<2x5x6xf32>, tensor<6xf32>) {
  %x = htp.embed_tokens %p, %cls, %pos
      : (tensor<2x4x6xf32>, tensor<1x1x6xf32>, tensor<1x5x6xf32>) -> tensor<2x5x6xf32>
  %c = htp.cls_token %x : (tensor<2x5x6xf32>) -> tensor<2x6xf32>
  %e:3 = htp.embed_tokens_grad %x
      : (tensor<2x5x6xf32>) -> (tensor<2x4x6xf32>, tensor<1x1x6xf32>, tensor<1x5x6xf32>)
  %dx = htp.cls_token_grad %dc : (tensor<2x6xf32>) -> tensor<2x5x6xf32>
  %rs = htp.row_sum %x : (tensor<2x5x6xf32>) -> tensor<6xf32>
  return %x, %c, %e#0, %e#1, %e#2, %dx, %rs
      : tensor<2x5x6xf32>, tensor<2x6xf32>, tensor<2x4x6xf32>, tensor<1x1x6xf32>, tensor<1x5x6xf32>,
        tensor<2x5x6xf32>, tensor<6xf32>
}

// -----

// cross_entropy (ctx, logits, targets, loss, rows, classes) and its
// gradient (ctx, logits, targets, dlogits, rows, classes); the loss is
// named by htp.result.
// CHECK-LABEL: llvm.func @htp.entry.loss(
// CHECK-SAME: %[[CTX:[^:]*]]: !llvm.ptr
// CHECK: %[[L:.*]] = llvm.load
// CHECK: %[[T:.*]] = llvm.load
// CHECK: %[[LOSS:.*]] = llvm.load
// CHECK: %[[DL:.*]] = llvm.load
// CHECK: %[[R:.*]] = llvm.mlir.constant(3 : i64)
// CHECK: %[[K:.*]] = llvm.mlir.constant(10 : i64)
// CHECK: llvm.call @htp_op_cross_entropy_f32(%[[CTX]], %[[L]], %[[T]], %[[LOSS]], %[[R]], %[[K]])
// CHECK: llvm.call @htp_op_cross_entropy_backward_f32(%[[CTX]], %[[L]], %[[T]], %[[DL]], %[[R]], %[[K]])
// CHECK: @htp.sig.loss({{.*}}\22results\22:[{\22name\22:\22loss\22,\22dtype\22:\22f32\22,\22shape\22:[1]},{\22name\22:\22result1\22,
// The CUDA loss sums a double per row (3 x 8 bytes) in memory of its own.
// CHECK-SAME: \22kernel_memory_bytes\22:24,
func.func @loss(%l: tensor<3x10xf32>, %t: tensor<3x10xf32>)
    -> (tensor<1xf32> {htp.result = "loss"}, tensor<3x10xf32>) {
  %loss = htp.cross_entropy %l, %t : (tensor<3x10xf32>, tensor<3x10xf32>) -> tensor<1xf32>
  %dl = htp.cross_entropy_grad %l, %t : (tensor<3x10xf32>, tensor<3x10xf32>) -> tensor<3x10xf32>
  return %loss, %dl : tensor<1xf32>, tensor<3x10xf32>
}
