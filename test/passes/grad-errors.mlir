// RUN: %htp-opt %s -split-input-file --htp-grad -verify-diagnostics
// Each error of --htp-grad names the op or parameter it cannot handle.

// An op on the loss's path with no adjoint (here a backward op).
func.func @no_adjoint(%x: tensor<2x3x8xf32>, %t: tensor<2x8xf32>) -> tensor<1xf32> {
  // expected-error @+1 {{'htp.row_sum' op has no adjoint in --htp-grad}}
  %s = htp.row_sum %x : (tensor<2x3x8xf32>) -> tensor<8xf32>
  %l = htp.cls_token %x : (tensor<2x3x8xf32>) -> tensor<2x8xf32>
  %b = htp.bias_add %l, %s : tensor<2x8xf32>, tensor<8xf32>
  %loss = htp.cross_entropy %b, %t : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// -----

// An op with several results on the path (no adjoint either).
func.func @multi_result(%x: tensor<2x8xf32>, %w: tensor<5x8xf32>, %dy: tensor<2x5xf32>,
                        %t: tensor<2x8xf32>) -> tensor<1xf32> {
  // expected-error @+1 {{'htp.linear_grad' op has no adjoint in --htp-grad}}
  %dx, %dw = htp.linear_grad %x, %w, %dy
      : (tensor<2x8xf32>, tensor<5x8xf32>, tensor<2x5xf32>) -> (tensor<2x8xf32>, tensor<5x8xf32>)
  %loss = htp.cross_entropy %dx, %t : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// -----

// The patch embedding's gradient has no dx: its images must be an input.
func.func @embedded_computed(%img: tensor<2x1x8x8xf32>, %w: tensor<4x1x4x4xf32>,
                             %b: tensor<4xf32>, %t: tensor<2x4xf32>) -> tensor<1xf32> {
  %twice = htp.add %img, %img : tensor<2x1x8x8xf32>
  // expected-error @+1 {{'htp.patch_embed' op embeds a computed value; --htp-grad differentiates patch embeddings of inputs only}}
  %p = htp.patch_embed %twice, %w, %b {patch = 4 : i64}
      : (tensor<2x1x8x8xf32>, tensor<4x1x4x4xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
  %r = htp.add %p, %p : tensor<2x4x4xf32>
  %c = htp.cls_token %r : (tensor<2x4x4xf32>) -> tensor<2x4xf32>
  %loss = htp.cross_entropy %c, %t : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// -----

// Two losses: which one to differentiate would be a guess.
func.func @two_losses(%l: tensor<2x5xf32>, %t: tensor<2x5xf32>) -> (tensor<1xf32>, tensor<1xf32>) {
  // expected-error @+1 {{'htp.cross_entropy' op is a second loss; --htp-grad differentiates result 0's only}}
  %a = htp.cross_entropy %l, %t : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  %b = htp.cross_entropy %t, %l : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  return %b, %a : tensor<1xf32>, tensor<1xf32>
}

// -----

// @f_grad is taken.
// expected-error @+1 {{--htp-grad would write @f_grad, but the module already has a symbol of that name}}
func.func @f(%l: tensor<2x5xf32>, %t: tensor<2x5xf32>) -> tensor<1xf32> {
  %loss = htp.cross_entropy %l, %t : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}
func.func @f_grad() {
  return
}

// -----

// @f_grad marked as a backward, but not of @f's arguments.
// expected-error @+1 {{--htp-grad would write @f_grad, but the module already has a symbol of that name marked htp.backward whose arguments or first results are not @f's}}
func.func @f(%l: tensor<2x5xf32>, %t: tensor<2x5xf32>) -> tensor<1xf32> {
  %loss = htp.cross_entropy %l, %t : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}
func.func @f_grad(%l: tensor<2x5xf32>) -> tensor<2x5xf32> attributes {htp.backward} {
  return %l : tensor<2x5xf32>
}

// -----

// Images marked as a parameter: the patch embedding has no gradient for its
// images (they are data), which is what the message says.
// expected-error @+1 {{parameter "images" (argument #0) is the images of 'htp.patch_embed', which --htp-grad does not differentiate: that is data, not a parameter; mark it htp.input}}
func.func @images_param(%img: tensor<2x1x8x8xf32> {htp.param = "images"}, %w: tensor<4x1x4x4xf32> {htp.param = "w"},
                        %b: tensor<4xf32> {htp.param = "b"}, %t: tensor<2x4xf32>) -> tensor<1xf32> {
  // expected-note @+1 {{the 'htp.patch_embed' that reads it as its images}}
  %p = htp.patch_embed %img, %w, %b {patch = 4 : i64}
      : (tensor<2x1x8x8xf32>, tensor<4x1x4x4xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
  %c = htp.cls_token %p : (tensor<2x4x4xf32>) -> tensor<2x4xf32>
  %loss = htp.cross_entropy %c, %t : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// -----

// Targets marked as a parameter.
// expected-error @+1 {{parameter "targets" (argument #2) is the targets of 'htp.cross_entropy', which --htp-grad does not differentiate: that is data, not a parameter; mark it htp.input}}
func.func @targets_param(%x: tensor<2x8xf32>, %w: tensor<5x8xf32> {htp.param = "w"},
                         %t: tensor<2x5xf32> {htp.param = "targets"}) -> tensor<1xf32> {
  %l = htp.linear %x, %w : (tensor<2x8xf32>, tensor<5x8xf32>) -> tensor<2x5xf32>
  // expected-note @+1 {{the 'htp.cross_entropy' that reads it as its targets}}
  %loss = htp.cross_entropy %l, %t : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// -----

// A fused residual has no adjoint (--htp-fuse-residual runs after --htp-grad).
func.func @fused_residual(%x: tensor<2x4xf32> {htp.input = "x"},
                          %w: tensor<4x4xf32> {htp.param = "head.weight"},
                          %t: tensor<2x4xf32> {htp.input = "targets"}) -> tensor<1xf32> {
  // expected-error @+1 {{'htp.linear' op has a fused residual, which has no adjoint here}}
  %y = htp.linear %x, %w residual %x : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %loss = htp.cross_entropy %y, %t : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// -----

func.func @fused_residual_attention(%x: tensor<2x3x4xf32> {htp.input = "x"},
    %wqkv: tensor<12x4xf32> {htp.param = "qkv.weight"}, %bqkv: tensor<12xf32> {htp.param = "qkv.bias"},
    %wp: tensor<4x4xf32> {htp.param = "proj.weight"},
    %t: tensor<2x4xf32> {htp.input = "targets"}) -> tensor<1xf32> {
  // expected-error @+1 {{'htp.attention' op has a fused residual, which has no adjoint here}}
  %a = htp.attention %x, %wqkv, %bqkv, %wp residual %x {num_heads = 1 : i64}
      : (tensor<2x3x4xf32>, tensor<12x4xf32>, tensor<12xf32>, tensor<4x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %c = htp.cls_token %a : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
  %loss = htp.cross_entropy %c, %t : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

// -----

// An all-reduce folded with its norm (--htp-fuse-residual, after --htp-grad)
// has no adjoint: the unfused pair has.
func.func @all_reduce_norm(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %t: tensor<2x8xf32>) -> tensor<1xf32> {
  // expected-error @+1 {{'htp.all_reduce_norm' op has no adjoint here: write htp.all_reduce and htp.layer_norm (--htp-fuse-residual makes it after --htp-grad)}}
  %s, %n = htp.all_reduce_norm %x norm %g, %g : tensor<2x8xf32>, tensor<8xf32>
  %loss = htp.cross_entropy %n, %t : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}
