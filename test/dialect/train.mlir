// RUN: %htp-opt %s | %htp-opt | FileCheck %s
// Round trip of the training ops (f32 only): the whole ViT's forward ends
// and every backward op, multi-result ones with their result types written.

// CHECK-LABEL: func.func @forward_ends
func.func @forward_ends(%img: tensor<2x3x8x12xf32>, %w: tensor<16x3x4x4xf32>, %b: tensor<16xf32>,
                        %cls: tensor<1x1x16xf32>, %pos: tensor<1x7x16xf32>,
                        %t: tensor<2x10xf32>, %hw: tensor<10x16xf32>) -> (tensor<1xf32>, tensor<2x10xf32>) {
  // CHECK: htp.patch_embed %{{.*}}, %{{.*}}, %{{.*}} {patch = 4 : i64} : (tensor<2x3x8x12xf32>, tensor<16x3x4x4xf32>, tensor<16xf32>) -> tensor<2x6x16xf32>
  %p = htp.patch_embed %img, %w, %b {patch = 4 : i64}
      : (tensor<2x3x8x12xf32>, tensor<16x3x4x4xf32>, tensor<16xf32>) -> tensor<2x6x16xf32>
  // CHECK: htp.embed_tokens %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x6x16xf32>, tensor<1x1x16xf32>, tensor<1x7x16xf32>) -> tensor<2x7x16xf32>
  %x = htp.embed_tokens %p, %cls, %pos
      : (tensor<2x6x16xf32>, tensor<1x1x16xf32>, tensor<1x7x16xf32>) -> tensor<2x7x16xf32>
  // CHECK: htp.cls_token %{{.*}} : (tensor<2x7x16xf32>) -> tensor<2x16xf32>
  %c = htp.cls_token %x : (tensor<2x7x16xf32>) -> tensor<2x16xf32>
  %l = htp.linear %c, %hw : (tensor<2x16xf32>, tensor<10x16xf32>) -> tensor<2x10xf32>
  // CHECK: htp.cross_entropy %{{.*}}, %{{.*}} : (tensor<2x10xf32>, tensor<2x10xf32>) -> tensor<1xf32>
  %loss = htp.cross_entropy %l, %t : (tensor<2x10xf32>, tensor<2x10xf32>) -> tensor<1xf32>
  return %loss, %l : tensor<1xf32>, tensor<2x10xf32>
}

// CHECK-LABEL: func.func @backward_ops
func.func @backward_ops(%x: tensor<2x5x12xf32>, %w: tensor<7x12xf32>, %dy7: tensor<2x5x7xf32>,
                        %g: tensor<12xf32>, %dy: tensor<2x5x12xf32>,
                        %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>)
    -> (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<7xf32>) {
  // CHECK: htp.linear_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<2x5x7xf32>) -> (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<7xf32>)
  %dx, %dw, %db = htp.linear_grad %x, %w, %dy7
      : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<2x5x7xf32>)
      -> (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<7xf32>)
  // CHECK: htp.linear_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<2x5x7xf32>) -> (tensor<2x5x12xf32>, tensor<7x12xf32>)
  %dx2, %dw2 = htp.linear_grad %x, %w, %dy7
      : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<2x5x7xf32>) -> (tensor<2x5x12xf32>, tensor<7x12xf32>)
  // CHECK: htp.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {epsilon = {{.*}} : f32} : (tensor<2x5x12xf32>, tensor<12xf32>, tensor<2x5x12xf32>) -> (tensor<2x5x12xf32>, tensor<12xf32>, tensor<12xf32>)
  %dn, %dg, %dbeta = htp.layer_norm_grad %x, %g, %dy {epsilon = 1.0e-05 : f32}
      : (tensor<2x5x12xf32>, tensor<12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<12xf32>, tensor<12xf32>)
  // CHECK: htp.gelu_grad %{{.*}}, %{{.*}} approximate tanh : (tensor<2x5x12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  %dgelu = htp.gelu_grad %x, %dy approximate tanh
      : (tensor<2x5x12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  // CHECK: htp.gelu_grad %{{.*}}, %{{.*}} : (tensor<2x5x12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  %dgelu2 = htp.gelu_grad %x, %dy : (tensor<2x5x12xf32>, tensor<2x5x12xf32>) -> tensor<2x5x12xf32>
  // CHECK: htp.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 3 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>) -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>)
  %da:5 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>)
  // CHECK: htp.attention_grad {{.*}} -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  %dt:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  // CHECK: htp.row_sum %{{.*}} : (tensor<2x5x12xf32>) -> tensor<12xf32>
  %rs = htp.row_sum %dy : (tensor<2x5x12xf32>) -> tensor<12xf32>
  return %dx, %dw, %db : tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<7xf32>
}

// CHECK-LABEL: func.func @embedding_grads
func.func @embedding_grads(%img: tensor<2x3x8x12xf32>, %dp: tensor<2x6x16xf32>, %dx: tensor<2x7x16xf32>,
                           %dc: tensor<2x16xf32>, %l: tensor<2x10xf32>, %t: tensor<2x10xf32>)
    -> (tensor<16x3x4x4xf32>, tensor<16xf32>) {
  // CHECK: htp.patch_embed_grad %{{.*}}, %{{.*}} {patch = 4 : i64} : (tensor<2x3x8x12xf32>, tensor<2x6x16xf32>) -> (tensor<16x3x4x4xf32>, tensor<16xf32>)
  %dw, %db = htp.patch_embed_grad %img, %dp {patch = 4 : i64}
      : (tensor<2x3x8x12xf32>, tensor<2x6x16xf32>) -> (tensor<16x3x4x4xf32>, tensor<16xf32>)
  // CHECK: htp.embed_tokens_grad %{{.*}} : (tensor<2x7x16xf32>) -> (tensor<2x6x16xf32>, tensor<1x1x16xf32>, tensor<1x7x16xf32>)
  %e:3 = htp.embed_tokens_grad %dx
      : (tensor<2x7x16xf32>) -> (tensor<2x6x16xf32>, tensor<1x1x16xf32>, tensor<1x7x16xf32>)
  // CHECK: htp.cls_token_grad %{{.*}} : (tensor<2x16xf32>) -> tensor<2x7x16xf32>
  %dct = htp.cls_token_grad %dc : (tensor<2x16xf32>) -> tensor<2x7x16xf32>
  // CHECK: htp.cross_entropy_grad %{{.*}}, %{{.*}} : (tensor<2x10xf32>, tensor<2x10xf32>) -> tensor<2x10xf32>
  %dl = htp.cross_entropy_grad %l, %t : (tensor<2x10xf32>, tensor<2x10xf32>) -> tensor<2x10xf32>
  return %dw, %db : tensor<16x3x4x4xf32>, tensor<16xf32>
}

// The balanced adjoints: attention_grad with the forward's pair (four
// results), mlp_grad with and without fc1_bias (dfc1_bias then absent),
// approximate printed only when tanh.
// CHECK-LABEL: func.func @balanced_grads
func.func @balanced_grads(%x: tensor<2x5x12xf32>, %dy: tensor<2x5x12xf32>,
                          %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>,
                          %w1: tensor<24x12xf32>, %b1: tensor<24xf32>, %w2: tensor<12x24xf32>) {
  // CHECK: htp.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 3 : i64, pair = 2 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>) -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  %da:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64, pair = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  // CHECK: htp.mlp_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} fc1_bias(%{{.*}}) approximate tanh {pair = 1 : i64, unit_width = 4 : i64} : (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>, tensor<2x5x12xf32>, tensor<24xf32>) -> (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>, tensor<24xf32>)
  %dm:4 = htp.mlp_grad %x, %w1, %w2, %dy fc1_bias(%b1) approximate tanh {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>, tensor<2x5x12xf32>, tensor<24xf32>)
      -> (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>, tensor<24xf32>)
  // CHECK: htp.mlp_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {pair = 3 : i64, unit_width = 24 : i64} : (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>, tensor<2x5x12xf32>) -> (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>)
  %dn:3 = htp.mlp_grad %x, %w1, %w2, %dy approximate none {pair = 3 : i64, unit_width = 24 : i64}
      : (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>)
  return
}

// CHECK-LABEL: func.func @zeros_like
func.func @zeros_like(%w: tensor<5x8xf32>) -> tensor<5x8xf32> {
  // CHECK: htp.zeros_like %{{.*}} : tensor<5x8xf32>
  %z = htp.zeros_like %w : tensor<5x8xf32>
  return %z : tensor<5x8xf32>
}
