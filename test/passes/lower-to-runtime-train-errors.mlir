// RUN: %htp-opt %s -split-input-file --htp-lower-to-runtime -verify-diagnostics
// A hand-written placement of a multi-result op is checked like any other:
// its results, written together, must not overlap each other, and a result
// not returned needs a workspace offset.

func.func @results_overlap(%x: tensor<2x4xf32>, %w: tensor<3x4xf32>, %dy: tensor<2x3xf32>) -> tensor<2x4xf32>
    attributes {htp.workspace_bytes = 128 : i64} {
  // expected-error @+2 {{its result #1 at bytes [0, 48) of the workspace overlaps its own result #0 at bytes [0, 32), live while it runs}}
  // expected-note @+1 {{the overlapped result #0 is that of this 'htp.linear_grad'}}
  %dx, %dw = htp.linear_grad %x, %w, %dy {htp.workspace_offsets = array<i64: 0, 0>}
      : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<3x4xf32>)
  %y = htp.gelu %dx : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

func.func @unplaced_result(%x: tensor<2x4xf32>, %w: tensor<3x4xf32>, %dy: tensor<2x3xf32>) -> tensor<2x4xf32>
    attributes {htp.workspace_bytes = 128 : i64} {
  // expected-error @+1 {{'htp.linear_grad' op has no workspace offset for its result #1 ('htp.workspace_offsets') and it is not returned: run --htp-assign-workspace first}}
  %dx, %dw = htp.linear_grad %x, %w, %dy {htp.workspace_offsets = array<i64: -1, -1>}
      : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<3x4xf32>)
  return %dx : tensor<2x4xf32>
}

// -----

func.func @scratch_overlaps_result(%img: tensor<1x1x4x4xf32>, %w: tensor<3x1x2x2xf32>, %b: tensor<3xf32>) -> tensor<1x4x3xf32>
    attributes {htp.workspace_bytes = 128 : i64} {
  // expected-error @+2 {{its kernel scratch at bytes [0, 64) of the workspace overlaps its own result at bytes [0, 48), live while it runs}}
  // expected-note @+1 {{the overlapped result is that of this 'htp.patch_embed'}}
  %t = htp.patch_embed %img, %w, %b {patch = 2 : i64, htp.workspace_offsets = array<i64: 0>, htp.scratch_offset = 0 : i64}
      : (tensor<1x1x4x4xf32>, tensor<3x1x2x2xf32>, tensor<3xf32>) -> tensor<1x4x3xf32>
  %y = htp.gelu %t : tensor<1x4x3xf32>
  return %y : tensor<1x4x3xf32>
}
