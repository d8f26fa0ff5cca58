// RUN: %htp-opt %s -split-input-file --htp-tensor-parallel=tp=3 -verify-diagnostics
// What cannot be split over tp ranks, one case each.

func.func @heads(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                 %wproj: tensor<12x12xf32>, %bproj: tensor<12xf32>) -> tensor<2x5x12xf32> {
  // expected-error @+1 {{cannot be split over tp = 3: num_heads (4) is not divisible by tp}}
  %y = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 4 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @neurons(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %w2: tensor<8x20xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{cannot be split over tp = 3: out_features (20) of this column-parallel linear is not divisible by tp}}
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
  %g = htp.gelu %h : tensor<3x20xf32>
  %y = htp.linear %g, %w2 : (tensor<3x20xf32>, tensor<8x20xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

func.func @computed_weight(%x: tensor<2x5x12xf32>, %wqkv: tensor<36x12xf32>, %bqkv: tensor<36xf32>,
                           %wproj: tensor<12x12xf32>, %bproj: tensor<12xf32>) -> tensor<2x5x12xf32> {
  %w = htp.add %wqkv, %wqkv : tensor<36x12xf32>
  // expected-error @+1 {{cannot be split over tp = 3: its qkv weight is computed, not a function argument (a parameter)}}
  %y = htp.attention %x, %w, %bqkv, %wproj, %bproj {num_heads = 3 : i64} : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>, tensor<12xf32>) -> tensor<2x5x12xf32>
  return %y : tensor<2x5x12xf32>
}

// -----

func.func @weight_used_whole(%x: tensor<3x8xf32>, %w1: tensor<21x8xf32> {htp.param = "fc1.weight"}, %w2: tensor<8x21xf32>) -> (tensor<3x8xf32>, tensor<21x8xf32>) {
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<21x8xf32>) -> tensor<3x21xf32>
  %g = htp.gelu %h : tensor<3x21xf32>
  %y = htp.linear %g, %w2 : (tensor<3x21xf32>, tensor<8x21xf32>) -> tensor<3x8xf32>
  // expected-error @+1 {{uses argument #1 ('fc1.weight') whole, but tp = 3 splits it for another op}}
  %twice = htp.add %w1, %w1 : tensor<21x8xf32>
  return %y, %twice : tensor<3x8xf32>, tensor<21x8xf32>
}

// -----

// expected-error @+1 {{function @twice is already split (htp.tp = 3 : i64); run --htp-tensor-parallel once}}
func.func @twice(%x: tensor<4xf32>) -> tensor<4xf32> attributes {htp.tp = 3 : i64} {
  return %x : tensor<4xf32>
}

// -----

// An htp op inside a nested region would stay whole in a function marked
// split: refused, naming it.
func.func @nested(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %w2: tensor<8x20xf32>,
                  %c: i1) -> tensor<3x8xf32> {
  %r = scf.if %c -> tensor<3x8xf32> {
    // expected-error @+1 {{is inside a nested region (of 'scf.if'): --htp-tensor-parallel splits the ops of the function's own block only}}
    %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
    %g = htp.gelu %h : tensor<3x20xf32>
    %y = htp.linear %g, %w2 : (tensor<3x20xf32>, tensor<8x20xf32>) -> tensor<3x8xf32>
    scf.yield %y : tensor<3x8xf32>
  } else {
    scf.yield %x : tensor<3x8xf32>
  }
  return %r : tensor<3x8xf32>
}

// -----

// A function another calls: its caller would pass full weights to one
// rank's shards (the verifier would only see mismatched call types).
// expected-note @+1 {{@mlp is here}}
func.func @mlp(%x: tensor<3x9xf32>, %w1: tensor<12x9xf32>, %w2: tensor<9x12xf32>) -> tensor<3x9xf32> {
  %h = htp.linear %x, %w1 : (tensor<3x9xf32>, tensor<12x9xf32>) -> tensor<3x12xf32>
  %y = htp.linear %h, %w2 : (tensor<3x12xf32>, tensor<9x12xf32>) -> tensor<3x9xf32>
  return %y : tensor<3x9xf32>
}

func.func @caller(%x: tensor<3x9xf32>, %w1: tensor<12x9xf32>, %w2: tensor<9x12xf32>) -> tensor<3x9xf32> {
  // expected-error @+1 {{refers to @mlp, which --htp-tensor-parallel splits into one rank's shards}}
  %y = func.call @mlp(%x, %w1, %w2) : (tensor<3x9xf32>, tensor<12x9xf32>, tensor<9x12xf32>) -> tensor<3x9xf32>
  return %y : tensor<3x9xf32>
}

// -----

// Two functions in error: both are reported.
func.func @first(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %w2: tensor<8x20xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{out_features (20) of this column-parallel linear is not divisible by tp}}
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
  %y = htp.linear %h, %w2 : (tensor<3x20xf32>, tensor<8x20xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

func.func @second(%x: tensor<3x8xf32>, %w1: tensor<10x8xf32>, %w2: tensor<8x10xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{out_features (10) of this column-parallel linear is not divisible by tp}}
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<10x8xf32>) -> tensor<3x10xf32>
  %y = htp.linear %h, %w2 : (tensor<3x10xf32>, tensor<8x10xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
