// RUN: %htp-opt %s -split-input-file --htp-assign-workspace | FileCheck %s
// Multi-result ops: every result is placed (htp.workspace_offsets, one
// offset per result, -1 for one computed in its result buffer), all before
// any is freed (the kernel writes them together); a result nobody reads
// (an unwanted gradient) still gets a slot, freed at once.

// dx [2x4] (32 bytes) takes [0, 64); dweight is returned (-1); dbias [3]
// takes [64, 128) although unread; gelu's result is in its result buffer.
// CHECK-LABEL: func.func @linear_grad(
// CHECK-SAME: attributes {htp.workspace_bytes = 128 : i64}
// CHECK-NEXT: htp.linear_grad {{.*}} {htp.workspace_offsets = array<i64: 0, -1, 64>}
// CHECK-NEXT: htp.gelu %{{.*}} : tensor<2x4xf32>
func.func @linear_grad(%x: tensor<2x4xf32>, %w: tensor<3x4xf32> {htp.param = "w"}, %dy: tensor<2x3xf32>)
    -> (tensor<3x4xf32> {htp.grad_of = "w"}, tensor<2x4xf32>) {
  %dx, %dw, %db = htp.linear_grad %x, %w, %dy
      : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>)
  %g = htp.gelu %dx : tensor<2x4xf32>
  return %dw, %g : tensor<3x4xf32>, tensor<2x4xf32>
}

// -----

// The patch embedding's im2col scratch is B*N*C*P*P = the images' 16 floats
// (64 bytes), for the forward and the gradient alike: the forward's result
// [1x4x3] (48 bytes) takes [0, 64), its scratch [64, 128); the gradient's
// dweight [64, 128) (the scratch was freed), its scratch [128, 192) (the
// operand %t is still live at [0, 64)).
// CHECK-LABEL: func.func @patch(
// CHECK-SAME: attributes {htp.workspace_bytes = 192 : i64}
// CHECK-NEXT: htp.patch_embed {{.*}} {htp.scratch_offset = 64 : i64, htp.workspace_offsets = array<i64: 0>, patch = 2 : i64}
// CHECK-NEXT: htp.patch_embed_grad {{.*}} {htp.scratch_offset = 128 : i64, htp.workspace_offsets = array<i64: 64, -1>, patch = 2 : i64}
func.func @patch(%img: tensor<1x1x4x4xf32>, %w: tensor<3x1x2x2xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %t = htp.patch_embed %img, %w, %b {patch = 2 : i64}
      : (tensor<1x1x4x4xf32>, tensor<3x1x2x2xf32>, tensor<3xf32>) -> tensor<1x4x3xf32>
  %dw, %db = htp.patch_embed_grad %img, %t {patch = 2 : i64}
      : (tensor<1x1x4x4xf32>, tensor<1x4x3xf32>) -> (tensor<3x1x2x2xf32>, tensor<3xf32>)
  return %db : tensor<3xf32>
}

// -----

// Attention backward: dx [2x5x12] (480 bytes) at 0, dqkv_weight (1728) at
// 512, dqkv_bias (144) at 2240, dproj_weight returned; the scratch,
// htp_cpu_attention_backward_scratch_floats(2, 5, 12, 3, 4) = 10*36 +
// 2*10*12 + 10*36 + 6*2*25 = 1260 floats (5040 bytes, 5056 aligned), at
// 2432: 7488 bytes.
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: attributes {htp.workspace_bytes = 7488 : i64}
// CHECK-NEXT: htp.attention_grad {{.*}} {htp.scratch_offset = 2432 : i64, htp.workspace_offsets = array<i64: 0, 512, 2240, -1>, num_heads = 3 : i64}
func.func @attention(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                     %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) -> tensor<12x12xf32> {
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return %d#3 : tensor<12x12xf32>
}

// -----

// A balanced attention backward (pair): the same results as the unbalanced
// one above, and the backward hook's scratch,
// htp_rt_attention_grad_scratch_floats(2, 5, 12, 3, 4) = 2 * 3 * (12*12 +
// 12 + 12*4) + 10*12 + 1260 = 1224 + 120 + 1260 = 2604 floats (10416
// bytes, 10432 aligned), at 2432: 12864 bytes.
// CHECK-LABEL: func.func @attention_balanced(
// CHECK-SAME: attributes {htp.workspace_bytes = 12864 : i64}
// CHECK-NEXT: htp.attention_grad {{.*}} {htp.scratch_offset = 2432 : i64, htp.workspace_offsets = array<i64: 0, 512, 2240, -1>, num_heads = 3 : i64, pair = 0 : i64}
func.func @attention_balanced(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                              %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) -> tensor<12x12xf32> {
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return %d#3 : tensor<12x12xf32>
}

// -----

// The MLP backward hook: every result placed, read or not: dx [2x3x8] (192
// bytes) at 0, dfc1_weight (512) at 192, dfc2_weight returned, dfc1_bias
// (64) at 704; the scratch, htp_rt_mlp_grad_scratch_floats(6, 8, 16, 4) =
// 2 * 4 * (4*8 + 4 + 8*4) + 6*8 + 3*6*16 = 544 + 48 + 288 = 880 floats
// (3520 bytes), at 768: 4288 bytes.
// CHECK-LABEL: func.func @mlp(
// CHECK-SAME: attributes {htp.workspace_bytes = 4288 : i64}
// CHECK-NEXT: htp.mlp_grad {{.*}} {htp.scratch_offset = 768 : i64, htp.workspace_offsets = array<i64: 0, 192, -1, 704>, pair = 1 : i64, unit_width = 4 : i64}
func.func @mlp(%x: tensor<2x3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>,
               %b1: tensor<16xf32>, %dy: tensor<2x3x8xf32>) -> tensor<8x16xf32> {
  %d:4 = htp.mlp_grad %x, %w1, %w2, %dy fc1_bias(%b1) {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<2x3x8xf32>, tensor<16xf32>)
      -> (tensor<2x3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  return %d#2 : tensor<8x16xf32>
}
