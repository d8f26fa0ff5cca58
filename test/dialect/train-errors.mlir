// RUN: %htp-opt %s -split-input-file -verify-diagnostics
// Every verifier error of the training ops, one case each.

func.func @bf16(%l: tensor<2x10xbf16>, %t: tensor<2x10xbf16>) -> tensor<1xbf16> {
  // expected-error @+1 {{'htp.cross_entropy' op training ops are f32-only for now; logits has element type bf16}}
  %y = htp.cross_entropy %l, %t : (tensor<2x10xbf16>, tensor<2x10xbf16>) -> tensor<1xbf16>
  return %y : tensor<1xbf16>
}

// -----

func.func @bf16_grad(%dy: tensor<2x5x12xbf16>) -> tensor<12xbf16> {
  // expected-error @+1 {{'htp.row_sum' op training ops are f32-only for now; input has element type bf16}}
  %y = htp.row_sum %dy : (tensor<2x5x12xbf16>) -> tensor<12xbf16>
  return %y : tensor<12xbf16>
}

// -----

func.func @mixed(%x: tensor<2x5x12xf32>, %w: tensor<7x12xf32>, %dy: tensor<2x5x7xbf16>) {
  // expected-error @+1 {{'htp.linear_grad' op dy has element type bf16 but input has f32}}
  %dx, %dw = htp.linear_grad %x, %w, %dy : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<2x5x7xbf16>) -> (tensor<2x5x12xf32>, tensor<7x12xf32>)
  return
}

// -----

func.func @mixed_result(%x: tensor<2x5x12xf32>, %w: tensor<7x12xf32>, %dy: tensor<2x5x7xf32>) {
  // expected-error @+1 {{'htp.linear_grad' op result #1 has element type bf16 but input has f32}}
  %dx, %dw = htp.linear_grad %x, %w, %dy : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<2x5x7xf32>) -> (tensor<2x5x12xf32>, tensor<7x12xbf16>)
  return
}

// -----

func.func @patch_embed_rank(%img: tensor<2x8x8xf32>, %w: tensor<16x1x4x4xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{images must be 4-D [batch, channels, height, width], got [2x8x8]}}
  %p = htp.patch_embed %img, %w, %b {patch = 4 : i64} : (tensor<2x8x8xf32>, tensor<16x1x4x4xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @patch_embed_multiple(%img: tensor<2x1x8x10xf32>, %w: tensor<16x1x4x4xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{images' height (8) and width (10) must be multiples of patch (4)}}
  %p = htp.patch_embed %img, %w, %b {patch = 4 : i64} : (tensor<2x1x8x10xf32>, tensor<16x1x4x4xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @patch_embed_patch(%img: tensor<2x1x8x8xf32>, %w: tensor<16x1x4x4xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{attribute 'patch' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %p = htp.patch_embed %img, %w, %b {patch = 0 : i64} : (tensor<2x1x8x8xf32>, tensor<16x1x4x4xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @patch_embed_vector(%img: tensor<1x1x65536x65536xf32>, %w: tensor<1x1x65536x65536xf32>, %b: tensor<1xf32>) {
  // expected-error @+1 {{a patch vector (channels*patch*patch = 1*65536*65536) must have at most 2^31-1 elements (BLAS's int)}}
  %p = htp.patch_embed %img, %w, %b {patch = 65536 : i64} : (tensor<1x1x65536x65536xf32>, tensor<1x1x65536x65536xf32>, tensor<1xf32>) -> tensor<1x1x1xf32>
  return
}

// -----

func.func @patch_embed_weight(%img: tensor<2x3x8x8xf32>, %w: tensor<16x1x4x4xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{weight must be [16x3x4x4] ([dim, channels, patch, patch]), got [16x1x4x4]}}
  %p = htp.patch_embed %img, %w, %b {patch = 4 : i64} : (tensor<2x3x8x8xf32>, tensor<16x1x4x4xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @patch_embed_weight_rank(%img: tensor<2x3x8x8xf32>, %w: tensor<16x48xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{weight must be 4-D [dim, 3, 4, 4], got [16x48]}}
  %p = htp.patch_embed %img, %w, %b {patch = 4 : i64} : (tensor<2x3x8x8xf32>, tensor<16x48xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @patch_embed_bias(%img: tensor<2x1x8x8xf32>, %w: tensor<16x1x4x4xf32>, %b: tensor<15xf32>) {
  // expected-error @+1 {{bias must be [16] (dim 0 of the weight), got [15]}}
  %p = htp.patch_embed %img, %w, %b {patch = 4 : i64} : (tensor<2x1x8x8xf32>, tensor<16x1x4x4xf32>, tensor<15xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @patch_embed_result(%img: tensor<2x1x8x8xf32>, %w: tensor<16x1x4x4xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{result must be [2x4x16] ([batch, (height/patch)*(width/patch), dim]), got [2x5x16]}}
  %p = htp.patch_embed %img, %w, %b {patch = 4 : i64} : (tensor<2x1x8x8xf32>, tensor<16x1x4x4xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  return
}

// -----

func.func @embed_tokens_rank(%p: tensor<8x16xf32>, %cls: tensor<1x1x16xf32>, %pos: tensor<1x5x16xf32>) {
  // expected-error @+1 {{patches must be 3-D [batch, patches, dim], got [8x16]}}
  %x = htp.embed_tokens %p, %cls, %pos : (tensor<8x16xf32>, tensor<1x1x16xf32>, tensor<1x5x16xf32>) -> tensor<2x5x16xf32>
  return
}

// -----

func.func @embed_tokens_cls(%p: tensor<2x4x16xf32>, %cls: tensor<1x16xf32>, %pos: tensor<1x5x16xf32>) {
  // expected-error @+1 {{cls must be [1x1x16] ([1, 1, dim]), got [1x16]}}
  %x = htp.embed_tokens %p, %cls, %pos : (tensor<2x4x16xf32>, tensor<1x16xf32>, tensor<1x5x16xf32>) -> tensor<2x5x16xf32>
  return
}

// -----

func.func @embed_tokens_pos(%p: tensor<2x4x16xf32>, %cls: tensor<1x1x16xf32>, %pos: tensor<1x4x16xf32>) {
  // expected-error @+1 {{pos must be [1x5x16] ([1, patches+1, dim]), got [1x4x16]}}
  %x = htp.embed_tokens %p, %cls, %pos : (tensor<2x4x16xf32>, tensor<1x1x16xf32>, tensor<1x4x16xf32>) -> tensor<2x5x16xf32>
  return
}

// -----

func.func @embed_tokens_result(%p: tensor<2x4x16xf32>, %cls: tensor<1x1x16xf32>, %pos: tensor<1x5x16xf32>) {
  // expected-error @+1 {{result must be [2x5x16] ([batch, patches+1, dim]), got [2x4x16]}}
  %x = htp.embed_tokens %p, %cls, %pos : (tensor<2x4x16xf32>, tensor<1x1x16xf32>, tensor<1x5x16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @cls_token_rank(%x: tensor<10x16xf32>) {
  // expected-error @+1 {{input must be 3-D [batch, tokens, dim], got [10x16]}}
  %c = htp.cls_token %x : (tensor<10x16xf32>) -> tensor<10x16xf32>
  return
}

// -----

func.func @cls_token_result(%x: tensor<2x5x16xf32>) {
  // expected-error @+1 {{result must be [2x16] ([batch, dim]: token 0 of each sequence), got [2x5x16]}}
  %c = htp.cls_token %x : (tensor<2x5x16xf32>) -> tensor<2x5x16xf32>
  return
}

// -----

func.func @cross_entropy_rank(%l: tensor<2x3x10xf32>, %t: tensor<2x3x10xf32>) {
  // expected-error @+1 {{logits must be 2-D [batch, classes], got [2x3x10]}}
  %y = htp.cross_entropy %l, %t : (tensor<2x3x10xf32>, tensor<2x3x10xf32>) -> tensor<1xf32>
  return
}

// -----

func.func @cross_entropy_targets(%l: tensor<2x10xf32>, %t: tensor<2x9xf32>) {
  // expected-error @+1 {{targets must be [2x10] (the logits' shape: one probability row per logits row), got [2x9]}}
  %y = htp.cross_entropy %l, %t : (tensor<2x10xf32>, tensor<2x9xf32>) -> tensor<1xf32>
  return
}

// -----

func.func @cross_entropy_result(%l: tensor<2x10xf32>, %t: tensor<2x10xf32>) {
  // expected-error @+1 {{result must be [1] (the mean loss, one value), got [2]}}
  %y = htp.cross_entropy %l, %t : (tensor<2x10xf32>, tensor<2x10xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @cross_entropy_grad_targets(%l: tensor<2x10xf32>, %t: tensor<3x10xf32>) {
  // expected-error @+1 {{targets must be [2x10] (the logits' shape: one probability row per logits row), got [3x10]}}
  %y = htp.cross_entropy_grad %l, %t : (tensor<2x10xf32>, tensor<3x10xf32>) -> tensor<2x10xf32>
  return
}

// -----

func.func @cross_entropy_grad_result(%l: tensor<2x10xf32>, %t: tensor<2x10xf32>) {
  // expected-error @+1 {{result must be [2x10] (the logits' shape), got [1]}}
  %y = htp.cross_entropy_grad %l, %t : (tensor<2x10xf32>, tensor<2x10xf32>) -> tensor<1xf32>
  return
}

// -----

func.func @linear_grad_weight(%x: tensor<2x12xf32>, %w: tensor<84xf32>, %dy: tensor<2x7xf32>) {
  // expected-error @+1 {{weight must be 2-D [out_features, in_features], got [84]}}
  %dx, %dw = htp.linear_grad %x, %w, %dy : (tensor<2x12xf32>, tensor<84xf32>, tensor<2x7xf32>) -> (tensor<2x12xf32>, tensor<84xf32>)
  return
}

// -----

func.func @linear_grad_in(%x: tensor<2x13xf32>, %w: tensor<7x12xf32>, %dy: tensor<2x7xf32>) {
  // expected-error @+1 {{input's last dim (13) must equal the weight's in_features (dim 1 of [7x12] = 12)}}
  %dx, %dw = htp.linear_grad %x, %w, %dy : (tensor<2x13xf32>, tensor<7x12xf32>, tensor<2x7xf32>) -> (tensor<2x13xf32>, tensor<7x12xf32>)
  return
}

// -----

func.func @linear_grad_dy(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{dy must be [2x7] (the forward's result: input with its last dim replaced by out_features), got [2x8]}}
  %dx, %dw = htp.linear_grad %x, %w, %dy : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<2x8xf32>) -> (tensor<2x12xf32>, tensor<7x12xf32>)
  return
}

// -----

func.func @linear_grad_dx(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>, %dy: tensor<2x7xf32>) {
  // expected-error @+1 {{dx (result #0) must be [2x12] (the input's shape), got [2x7]}}
  %dx, %dw = htp.linear_grad %x, %w, %dy : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<2x7xf32>) -> (tensor<2x7xf32>, tensor<7x12xf32>)
  return
}

// -----

func.func @linear_grad_dweight(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>, %dy: tensor<2x7xf32>) {
  // expected-error @+1 {{dweight (result #1) must be [7x12] (the weight's shape), got [12x7]}}
  %dx, %dw = htp.linear_grad %x, %w, %dy : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<2x7xf32>) -> (tensor<2x12xf32>, tensor<12x7xf32>)
  return
}

// -----

func.func @linear_grad_dbias(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>, %dy: tensor<2x7xf32>) {
  // expected-error @+1 {{dbias (result #2) must be [7] (out_features of the weight), got [12]}}
  %dx, %dw, %db = htp.linear_grad %x, %w, %dy : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<2x7xf32>) -> (tensor<2x12xf32>, tensor<7x12xf32>, tensor<12xf32>)
  return
}

// -----

func.func @linear_grad_one_result(%x: tensor<2x12xf32>, %w: tensor<7x12xf32>, %dy: tensor<2x7xf32>) {
  // expected-error @+1 {{'htp.linear_grad' op expected 2 or more results}}
  %dx = "htp.linear_grad"(%x, %w, %dy) : (tensor<2x12xf32>, tensor<7x12xf32>, tensor<2x7xf32>) -> (tensor<2x12xf32>)
  return
}

// -----

func.func @layer_norm_grad_weight(%x: tensor<2x12xf32>, %g: tensor<11xf32>, %dy: tensor<2x12xf32>) {
  // expected-error @+1 {{weight must be [12] (the input's last dim), got [11]}}
  %dx, %dg, %db = htp.layer_norm_grad %x, %g, %dy : (tensor<2x12xf32>, tensor<11xf32>, tensor<2x12xf32>) -> (tensor<2x12xf32>, tensor<12xf32>, tensor<12xf32>)
  return
}

// -----

func.func @layer_norm_grad_dy(%x: tensor<2x12xf32>, %g: tensor<12xf32>, %dy: tensor<3x12xf32>) {
  // expected-error @+1 {{dy must be [2x12] (the input's shape), got [3x12]}}
  %dx, %dg, %db = htp.layer_norm_grad %x, %g, %dy : (tensor<2x12xf32>, tensor<12xf32>, tensor<3x12xf32>) -> (tensor<2x12xf32>, tensor<12xf32>, tensor<12xf32>)
  return
}

// -----

func.func @layer_norm_grad_epsilon(%x: tensor<2x12xf32>, %g: tensor<12xf32>, %dy: tensor<2x12xf32>) {
  // expected-error @+1 {{epsilon must be positive and finite, got 0}}
  %dx, %dg, %db = htp.layer_norm_grad %x, %g, %dy {epsilon = 0.0 : f32} : (tensor<2x12xf32>, tensor<12xf32>, tensor<2x12xf32>) -> (tensor<2x12xf32>, tensor<12xf32>, tensor<12xf32>)
  return
}

// -----

func.func @layer_norm_grad_dbias(%x: tensor<2x12xf32>, %g: tensor<12xf32>, %dy: tensor<2x12xf32>) {
  // expected-error @+1 {{dbias (result #2) must be [12] (the input's last dim), got [2x12]}}
  %dx, %dg, %db = htp.layer_norm_grad %x, %g, %dy : (tensor<2x12xf32>, tensor<12xf32>, tensor<2x12xf32>) -> (tensor<2x12xf32>, tensor<12xf32>, tensor<2x12xf32>)
  return
}

// -----

func.func @gelu_grad_dy(%x: tensor<2x12xf32>, %dy: tensor<12x2xf32>) {
  // expected-error @+1 {{dy must be [2x12] (the input's shape), got [12x2]}}
  %dx = htp.gelu_grad %x, %dy : (tensor<2x12xf32>, tensor<12x2xf32>) -> tensor<2x12xf32>
  return
}

// -----

func.func @gelu_grad_result(%x: tensor<2x12xf32>, %dy: tensor<2x12xf32>) {
  // expected-error @+1 {{result must be [2x12] (the input's shape), got [24]}}
  %dx = htp.gelu_grad %x, %dy : (tensor<2x12xf32>, tensor<2x12xf32>) -> tensor<24xf32>
  return
}

// -----

func.func @attention_grad_heads(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{qkv weight rows (36) must be a positive multiple of 3*num_heads (3*5 = 15)}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 5 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return
}

// -----

func.func @attention_grad_proj(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x6xf32>, %dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{proj weight must be [12, 12] ([dim, num_heads*head_dim]), got [12x6]}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x6xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x6xf32>)
  return
}

// -----

func.func @attention_grad_dy(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %dy: tensor<2x4x12xf32>) {
  // expected-error @+1 {{dy must be [2x5x12] (the input's shape), got [2x4x12]}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x4x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return
}

// -----

func.func @attention_grad_dqkv(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{dqkv_bias (result #2) must be [36] (the qkv bias's shape), got [12]}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<12xf32>, tensor<12x12xf32>)
  return
}

// -----

func.func @attention_grad_dproj_bias(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{dproj_bias (result #4) must be [12] (the input's dim), got [36]}}
  %d:5 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<36xf32>)
  return
}

// -----

func.func @row_sum_result(%dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{result must be [12] (the input's last dim), got [5x12]}}
  %y = htp.row_sum %dy : (tensor<2x5x12xf32>) -> tensor<5x12xf32>
  return
}

// -----

func.func @patch_embed_grad_dy(%img: tensor<2x1x8x8xf32>, %dy: tensor<2x5x16xf32>) {
  // expected-error @+1 {{dy must be [2x4x16] ([batch, (height/patch)*(width/patch), dim]), got [2x5x16]}}
  %dw, %db = htp.patch_embed_grad %img, %dy {patch = 4 : i64} : (tensor<2x1x8x8xf32>, tensor<2x5x16xf32>) -> (tensor<16x1x4x4xf32>, tensor<16xf32>)
  return
}

// -----

func.func @patch_embed_grad_dweight(%img: tensor<2x1x8x8xf32>, %dy: tensor<2x4x16xf32>) {
  // expected-error @+1 {{dweight (result #0) must be [16x1x4x4] ([dim, channels, patch, patch]), got [16x16]}}
  %dw, %db = htp.patch_embed_grad %img, %dy {patch = 4 : i64} : (tensor<2x1x8x8xf32>, tensor<2x4x16xf32>) -> (tensor<16x16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @patch_embed_grad_dbias(%img: tensor<2x1x8x8xf32>, %dy: tensor<2x4x16xf32>) {
  // expected-error @+1 {{dbias (result #1) must be [16] (dy's last dim), got [4]}}
  %dw, %db = htp.patch_embed_grad %img, %dy {patch = 4 : i64} : (tensor<2x1x8x8xf32>, tensor<2x4x16xf32>) -> (tensor<16x1x4x4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @embed_tokens_grad_tokens(%dy: tensor<2x1x16xf32>) {
  // expected-error @+1 {{dy must have at least 2 tokens (the class token and a patch), got 1}}
  %d:3 = htp.embed_tokens_grad %dy : (tensor<2x1x16xf32>) -> (tensor<2x1x16xf32>, tensor<1x1x16xf32>, tensor<1x1x16xf32>)
  return
}

// -----

func.func @embed_tokens_grad_dpos(%dy: tensor<2x5x16xf32>) {
  // expected-error @+1 {{dpos (result #2) must be [1x5x16] ([1, patches+1, dim]), got [2x5x16]}}
  %d:3 = htp.embed_tokens_grad %dy : (tensor<2x5x16xf32>) -> (tensor<2x4x16xf32>, tensor<1x1x16xf32>, tensor<2x5x16xf32>)
  return
}

// -----

func.func @embed_tokens_grad_dpatches(%dy: tensor<2x5x16xf32>) {
  // expected-error @+1 {{dpatches (result #0) must be [2x4x16] ([batch, patches, dim]), got [2x5x16]}}
  %d:3 = htp.embed_tokens_grad %dy : (tensor<2x5x16xf32>) -> (tensor<2x5x16xf32>, tensor<1x1x16xf32>, tensor<1x5x16xf32>)
  return
}

// -----

func.func @cls_token_grad_rank(%dy: tensor<2x16xf32>) {
  // expected-error @+1 {{result must be 3-D [batch, tokens, dim], got [2x16]}}
  %dx = htp.cls_token_grad %dy : (tensor<2x16xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @cls_token_grad_dim(%dy: tensor<2x16xf32>) {
  // expected-error @+1 {{result must be [2x5x16] ([batch, tokens, dim] with dy's batch and dim), got [2x5x8]}}
  %dx = htp.cls_token_grad %dy : (tensor<2x16xf32>) -> tensor<2x5x8xf32>
  return
}
