// RUN: %htp-opt %s -split-input-file --htp-assign-workspace --htp-lower-to-runtime -verify-diagnostics
// Balance hooks written by hand: the signature's "balance" record must be
// one the reader (runtime/htp_entry.h) and the planner take, one balanced
// attention (pair 2l) and one htp.mlp (pair 2l + 1) per layer, all alike,
// or --htp-lower-to-runtime refuses the function (it once wrote a record with
// "mlp_units": 0, which htp-run then refused as a bad signature). Layers are
// counted by balanced attentions: an htp.mlp without any (no record) computes
// every unit, as lower-to-runtime-placement.mlir's legal_reuse does.

// An attention with a pair and no MLP pair beside it.
func.func @attention_alone(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                           %wp: tensor<12x12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{'htp.attention' op calls a balance hook, but the function has 1 balanced attention(s) (with a pair) and 0 htp.mlp; the signature's balance record takes one of each per layer (attention pair 2 * layer, htp.mlp pair 2 * layer + 1), as --htp-balance-hooks writes them}}
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  return %a : tensor<2x5x12xf32>
}

// -----

// One layer numbered as the second.
func.func @pair_beyond(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                       %wp: tensor<12x12xf32>, %w1: tensor<8x12xf32>, %w2: tensor<12x8xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{'htp.attention' op has pair 2, but with 1 layer(s) of balanced attention and htp.mlp the pairs are 0 to 1 (attention 2 * layer, MLP 2 * layer + 1)}}
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  %m = htp.mlp %a, %w1, %w2 {pair = 3 : i64, unit_width = 4 : i64}
      : (tensor<2x5x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  return %m : tensor<2x5x12xf32>
}

// -----

// Two layers, both numbered 0 and 1.
func.func @pair_twice(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                      %wp: tensor<12x12xf32>, %w1: tensor<8x12xf32>, %w2: tensor<12x8xf32>) -> tensor<2x5x12xf32> {
  // expected-note @+1 {{the earlier op with pair 0}}
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  %m = htp.mlp %a, %w1, %w2 {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x5x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  // expected-error @+1 {{'htp.attention' op has pair 0, which an earlier op has too; each layer's attention and MLP have a pair of their own}}
  %b = htp.attention %m, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  %n = htp.mlp %b, %w1, %w2 {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x5x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  return %n : tensor<2x5x12xf32>
}

// -----

// Layers that differ: the record has one head count and one unit shape.
func.func @unlike_heads(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                        %wp: tensor<12x12xf32>, %w1: tensor<8x12xf32>, %w2: tensor<12x8xf32>) -> tensor<2x5x12xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  %m = htp.mlp %a, %w1, %w2 {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x5x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  // expected-error @+1 {{'htp.attention' op has 2 heads of 6 channels on tensor<2x5x12xf32>, but the balanced attention of pair 0 has 3 heads of 4 channels on tensor<2x5x12xf32>; the signature's balance record describes every layer alike}}
  %b = htp.attention %m, %wqkv, %bqkv, %wp {num_heads = 2 : i64, pair = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  %n = htp.mlp %b, %w1, %w2 {pair = 3 : i64, unit_width = 4 : i64}
      : (tensor<2x5x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  return %n : tensor<2x5x12xf32>
}

// -----

func.func @unlike_units(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                        %wp: tensor<12x12xf32>, %w1: tensor<8x12xf32>, %w2: tensor<12x8xf32>) -> tensor<2x5x12xf32> {
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  %m = htp.mlp %a, %w1, %w2 {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x5x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %b = htp.attention %m, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  // expected-error @+1 {{'htp.mlp' op has 4 units of 2 neurons on tensor<2x5x12xf32>, but the htp.mlp of pair 1 has 2 units of 4 neurons on tensor<2x5x12xf32>; the signature's balance record describes every layer alike}}
  %n = htp.mlp %b, %w1, %w2 {pair = 3 : i64, unit_width = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  return %n : tensor<2x5x12xf32>
}

// -----

// A backward hook for a layer the forward does not have.
func.func @backward_beyond(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                           %wp: tensor<12x12xf32>, %w1: tensor<8x12xf32>, %w2: tensor<12x8xf32>,
                           %dy: tensor<2x5x12xf32>)
    -> (tensor<2x5x12xf32>, tensor<2x5x12xf32>) {
  %a = htp.attention %x, %wqkv, %bqkv, %wp {num_heads = 3 : i64, pair = 0 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>) -> tensor<2x5x12xf32>
  %m = htp.mlp %a, %w1, %w2 {pair = 1 : i64, unit_width = 4 : i64}
      : (tensor<2x5x12xf32>, tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  // expected-error @+1 {{'htp.attention_grad' op has pair 2, which no balanced attention or htp.mlp of the function has (its pairs are 0 to 1)}}
  %d:4 = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64, pair = 2 : i64}
      : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<2x5x12xf32>)
      -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
  return %m, %d#0 : tensor<2x5x12xf32>, tensor<2x5x12xf32>
}
