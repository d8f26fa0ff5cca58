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

// -----

// htp.attention_grad with a pair (the adjoint of a balanced attention):
// the forward's limits on pair and num_heads, and no dproj_bias.
func.func @attention_grad_pair_odd(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{'htp.attention_grad' op pair must be even (2 * layer) for attention, got 3}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64, pair = 3 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return
}

// -----

func.func @attention_grad_pair_limit(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{'htp.attention_grad' op pair (131072) must be below 2^17 (2 * HTP_ENTRY_MAX_LAYERS balance layers)}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64, pair = 131072 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return
}

// -----

func.func @attention_grad_pair_negative(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{attribute 'pair' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64, pair = -2 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return
}

// -----

// 2^20 + 1 heads of one channel on a rank: more units than the runtime takes.
func.func @attention_grad_units_limit(%x: tensor<1x1x1xf32>, %wqkv: tensor<3145731x1xf32>, %bqkv: tensor<3145731xf32>, %wp: tensor<1x1048577xf32>, %dy: tensor<1x1x1xf32>) {
  // expected-error @+1 {{'htp.attention_grad' op num_heads (1048577) of a balanced attention must be at most 2^20 (HTP_ENTRY_MAX_UNITS units per rank: the planner's units_per_rank)}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 1048577 : i64, pair = 0 : i64}
      : (tensor<1x1x1xf32>, tensor<3145731x1xf32>, tensor<3145731xf32>, tensor<1x1048577xf32>, tensor<1x1x1xf32>)
      -> (tensor<1x1x1xf32>, tensor<3145731x1xf32>, tensor<3145731xf32>, tensor<1x1048577xf32>)
  return
}

// -----

func.func @attention_grad_pair_dproj_bias(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>, %wp: tensor<12x12xf32>, %dy: tensor<2x5x12xf32>) {
  // expected-error @+1 {{'htp.attention_grad' op a balanced attention (with a pair) has no proj bias: its gradient has no dproj_bias (result #4)}}
  %d:5 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>)
  return
}

// -----

// htp.mlp_grad: htp.mlp's checks of its operands and attributes, then dy
// (the forward's result), each result, and dfc1_bias exactly with fc1_bias.
func.func @mlp_grad_bf16(%x: tensor<3x8xbf16>, %w1: tensor<16x8xbf16>, %w2: tensor<8x16xbf16>, %dy: tensor<3x8xbf16>) {
  // expected-error @+1 {{'htp.mlp_grad' op training ops are f32-only for now; input has element type bf16}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xbf16>, tensor<16x8xbf16>, tensor<8x16xbf16>, tensor<3x8xbf16>)
      -> (tensor<3x8xbf16>, tensor<16x8xbf16>, tensor<8x16xbf16>)
  return
}

// -----

func.func @mlp_grad_mixed(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>, %b1: tensor<16xbf16>) {
  // expected-error @+1 {{'htp.mlp_grad' op fc1 bias has element type bf16 but input has f32}}
  %d:4 = htp.mlp_grad %x, %w1, %w2, %dy fc1_bias(%b1) {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>, tensor<16xbf16>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @mlp_grad_input_rank(%x: tensor<f32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<f32>) {
  // expected-error @+1 {{'htp.mlp_grad' op input must have rank >= 1}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<f32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<f32>)
      -> (tensor<f32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_fc1(%x: tensor<3x8xf32>, %w1: tensor<16x6xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op fc1 weight must be [hidden, 8], got [16x6]}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x6xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x6xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_fc2(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x12xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op fc2 weight must be [8, 16], got [8x12]}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x12xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x12xf32>)
  return
}

// -----

func.func @mlp_grad_fc1_bias(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>, %b1: tensor<8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op fc1 bias must be [16] (rows of the fc1 weight), got [8]}}
  %d:4 = htp.mlp_grad %x, %w1, %w2, %dy fc1_bias(%b1) {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>, tensor<8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<8xf32>)
  return
}

// -----

func.func @mlp_grad_unit_width(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op hidden width (16) must be a multiple of unit_width (5)}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 5 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_unit_width_zero(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{attribute 'unit_width' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 0 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_units_limit(%x: tensor<1x1xf32>, %w1: tensor<1048577x1xf32>, %w2: tensor<1x1048577xf32>, %dy: tensor<1x1xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op hidden width / unit_width (1048577 / 1 = 1048577 units) must be at most 2^20 (HTP_ENTRY_MAX_UNITS: the planner's units_per_rank)}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 1 : i64}
      : (tensor<1x1xf32>, tensor<1048577x1xf32>, tensor<1x1048577xf32>, tensor<1x1xf32>)
      -> (tensor<1x1xf32>, tensor<1048577x1xf32>, tensor<1x1048577xf32>)
  return
}

// -----

func.func @mlp_grad_pair_limit(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op pair (131073) must be below 2^17 (2 * HTP_ENTRY_MAX_LAYERS balance layers)}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 131073 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_even_pair(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op pair must be odd (2 * layer + 1) for an MLP, got 2}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 2 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_no_pair(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op requires attribute 'pair'}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_dy(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x16xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op dy must be [3x8] (the forward's result: the input's shape), got [3x16]}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x16xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_dx(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op dx (result #0) must be [3x8] (the input's shape), got [24]}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<24xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_dfc1_weight(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op dfc1_weight (result #1) must be [16x8] (the fc1 weight's shape), got [8x16]}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<8x16xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_dfc2_weight(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op dfc2_weight (result #2) must be [8x16] (the fc2 weight's shape), got [16x8]}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>)
  return
}

// -----

func.func @mlp_grad_dfc1_bias_without_bias(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op dfc1_bias (result #3) must be written exactly when fc1_bias is an operand; got no fc1 bias and 4 results}}
  %d:4 = htp.mlp_grad %x, %w1, %w2, %dy {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @mlp_grad_bias_without_dfc1_bias(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>, %b1: tensor<16xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op dfc1_bias (result #3) must be written exactly when fc1_bias is an operand; got an fc1 bias and 3 results}}
  %d:3 = htp.mlp_grad %x, %w1, %w2, %dy fc1_bias(%b1) {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>, tensor<16xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @mlp_grad_dfc1_bias(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %dy: tensor<3x8xf32>, %b1: tensor<16xf32>) {
  // expected-error @+1 {{'htp.mlp_grad' op dfc1_bias (result #3) must be [16] (rows of the fc1 weight), got [8]}}
  %d:4 = htp.mlp_grad %x, %w1, %w2, %dy fc1_bias(%b1) {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<3x8xf32>, tensor<16xf32>)
      -> (tensor<3x8xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<8xf32>)
  return
}

// -----

func.func @zeros_like_bf16(%w: tensor<5x8xbf16>) -> tensor<5x8xbf16> {
  // expected-error @+1 {{'htp.zeros_like' op training ops are f32-only for now}}
  %z = htp.zeros_like %w : tensor<5x8xbf16>
  return %z : tensor<5x8xbf16>
}
