// RUN: %htp-opt %s -split-input-file --htp-import-shard=mlp-unit-width=2 -verify-diagnostics

// A boundary inside a head: proj columns 0..3 are one and a half heads of 2.
shard.grid @grid0(shape = 4)
func.func @inside_a_head(%x: tensor<2x5x16xf32>, %wqkv: tensor<48x16xf32>, %bqkv: tensor<48xf32>,
    %wproj: tensor<16x16xf32>, %bproj: tensor<16xf32>) -> tensor<2x5x16xf32> {
  %s = shard.sharding @grid0 split_axes = [[], [0]] sharded_dims_offsets = [0, 3, 8, 12, 16] : !shard.sharding
  // expected-error @+1 {{argument #3's sharded_dims_offsets = [0, 3, 8, 12, 16] cut at 3, inside a unit: the split moves whole units of 2 (one head)}}
  %w = shard.shard %wproj to %s annotate_for_users : tensor<16x16xf32>
  %a = htp.attention %x, %wqkv, %bqkv, %w, %bproj {num_heads = 8 : i64} : (tensor<2x5x16xf32>, tensor<48x16xf32>, tensor<48xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  return %a : tensor<2x5x16xf32>
}

// -----

// A boundary inside an MLP unit of mlp-unit-width = 2 neurons.
shard.grid @grid0(shape = 2)
func.func @inside_a_unit(%x: tensor<3x8xf32>, %w1: tensor<20x8xf32>, %w2: tensor<8x20xf32>) -> tensor<3x8xf32> {
  %s = shard.sharding @grid0 split_axes = [[0]] sharded_dims_offsets = [0, 11, 20] : !shard.sharding
  // expected-error @+1 {{cut at 11, inside a unit: the split moves whole units of 2 (mlp-unit-width neurons)}}
  %w = shard.shard %w1 to %s annotate_for_users : tensor<20x8xf32>
  %h = htp.linear %x, %w : (tensor<3x8xf32>, tensor<20x8xf32>) -> tensor<3x20xf32>
  %y = htp.linear %h, %w2 : (tensor<3x20xf32>, tensor<8x20xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// Offsets that stop short of the dim.
shard.grid @grid0(shape = 4)
func.func @not_covering(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %s = shard.sharding @grid0 split_axes = [[0]] sharded_dims_offsets = [0, 4, 8, 12, 15] : !shard.sharding
  // expected-error @+1 {{sharded_dims_offsets = [0, 4, 8, 12, 15] do not cover dim 0 (16): 4 ranks need 5 offsets from 0 to 16}}
  %w = shard.shard %w1 to %s annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %x, %w : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A 2-D grid: HTP's ranks are one axis.
shard.grid @grid2d(shape = 2x2)
func.func @two_axes(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{grid @grid2d has 2 axes or a dynamic size; HTP's tensor parallelism is one axis of a static number of ranks}}
  %s = shard.sharding @grid2d split_axes = [[0]] : !shard.sharding
  %w = shard.shard %w1 to %s annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %x, %w : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A dynamic grid.
shard.grid @grid_any(shape = ?)
func.func @dynamic_grid(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{grid @grid_any has 1 axes or a dynamic size}}
  %s = shard.sharding @grid_any split_axes = [[0]] : !shard.sharding
  %w = shard.shard %w1 to %s annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %x, %w : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// The two weights of one MLP pair disagree: fc1 rows 12:12:4:4 give the
// ratio, which cuts fc2's columns at 12, 24, 28, not 10, 20, 26.
shard.grid @grid0(shape = 4)
func.func @pair_disagrees(%x: tensor<3x8xf32>, %w1: tensor<32x8xf32>, %w2: tensor<8x32xf32>) -> tensor<3x8xf32> {
  %rows = shard.sharding @grid0 split_axes = [[0]] sharded_dims_offsets = [0, 12, 24, 28, 32] : !shard.sharding
  %cols = shard.sharding @grid0 split_axes = [[], [0]] sharded_dims_offsets = [0, 10, 20, 26, 32] : !shard.sharding
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<32x8xf32>
  // expected-error @+1 {{argument #2's sharding states [0, 10, 20, 26, 32], but the split gives [0, 12, 24, 28, 32] with shares 3,3,1,1 (read from argument #1): every pair of a function is apportioned in one ratio}}
  %b = shard.shard %w2 to %cols annotate_for_users : tensor<8x32xf32>
  %h = htp.linear %x, %a : (tensor<3x8xf32>, tensor<32x8xf32>) -> tensor<3x32xf32>
  %y = htp.linear %h, %b : (tensor<3x32xf32>, tensor<8x32xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// Even on one weight of the pair, uneven on the other.
shard.grid @grid0(shape = 2)
func.func @even_and_uneven(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %rows = shard.sharding @grid0 split_axes = [[0]] : !shard.sharding
  %cols = shard.sharding @grid0 split_axes = [[], [0]] sharded_dims_offsets = [0, 10, 16] : !shard.sharding
  // expected-error @+1 {{argument #1's sharding states [0, 8, 16], but the split gives [0, 10, 16] with shares 5,3 (read from argument #2)}}
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<16x8xf32>
  %b = shard.shard %w2 to %cols annotate_for_users : tensor<8x16xf32>
  %h = htp.linear %x, %a : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %b : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A qkv weight: its split is strided, a sharding's blocks contiguous.
shard.grid @grid0(shape = 2)
func.func @qkv(%x: tensor<2x5x16xf32>, %wqkv: tensor<48x16xf32>, %bqkv: tensor<48xf32>,
    %wproj: tensor<16x16xf32>, %bproj: tensor<16xf32>) -> tensor<2x5x16xf32> {
  %rows = shard.sharding @grid0 split_axes = [[0]] : !shard.sharding
  %cols = shard.sharding @grid0 split_axes = [[], [0]] : !shard.sharding
  // expected-error @+1 {{argument #1 is a qkv weight or bias, whose split is strided (rank r takes its heads' rows of each of the q, k and v blocks) where a shard.sharding's blocks are contiguous; annotate the attention's proj weight}}
  %q = shard.shard %wqkv to %rows annotate_for_users : tensor<48x16xf32>
  %p = shard.shard %wproj to %cols annotate_for_users : tensor<16x16xf32>
  %a = htp.attention %x, %q, %bqkv, %p, %bproj {num_heads = 8 : i64} : (tensor<2x5x16xf32>, tensor<48x16xf32>, tensor<48xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
  return %a : tensor<2x5x16xf32>
}

// -----

// A split of an argument the split keeps whole (the input).
shard.grid @grid0(shape = 2)
func.func @non_weight(%x: tensor<4x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<4x8xf32> {
  %rows = shard.sharding @grid0 split_axes = [[0]] : !shard.sharding
  // expected-error @+1 {{argument #0 is split by its sharding, but it is no weight the split cuts (the weights of a column→row linear pair and an attention's proj); HTP keeps it whole on every rank}}
  %xs = shard.shard %x to %rows annotate_for_users : tensor<4x8xf32>
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %xs, %a : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %y = htp.linear %h, %w2 : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A value the function computes.
shard.grid @grid0(shape = 2)
func.func @computed(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %rows = shard.sharding @grid0 split_axes = [[], [0]] : !shard.sharding
  %h = htp.linear %x, %w1 : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  // expected-error @+1 {{it annotates a value the function computes; HTP reads the shardings of function arguments (weights) only}}
  %hs = shard.shard %h to %rows : tensor<3x16xf32>
  %y = htp.linear %hs, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// Grids of different sizes in one function.
shard.grid @grid2(shape = 2)
shard.grid @grid4(shape = 4)
func.func @two_grids(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %rows = shard.sharding @grid2 split_axes = [[0]] : !shard.sharding
  %cols = shard.sharding @grid4 split_axes = [[], [0]] : !shard.sharding
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<16x8xf32>
  // expected-error @+1 {{its grid has 4 devices and another annotation's 2; a function is split over one tp}}
  %b = shard.shard %w2 to %cols annotate_for_users : tensor<8x16xf32>
  %h = htp.linear %x, %a : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %b : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// The wrong dim: fc1 is cut by rows.
shard.grid @grid0(shape = 2)
func.func @wrong_dim(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %cols = shard.sharding @grid0 split_axes = [[], [0]] : !shard.sharding
  // expected-error @+1 {{its sharding splits dim 1 of argument #1, but the split cuts dim 0 (rows: a column-parallel weight)}}
  %a = shard.shard %w1 to %cols annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %x, %a : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A weight stated replicated that the split cuts.
shard.grid @grid0(shape = 2)
func.func @replicated_weight(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %rows = shard.sharding @grid0 split_axes = [[0]] : !shard.sharding
  %whole = shard.sharding @grid0 split_axes = [[]] : !shard.sharding
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<16x8xf32>
  // expected-error @+1 {{argument #2 is stated replicated, but the split cuts its dim 1 over the ranks}}
  %b = shard.shard %w2 to %whole annotate_for_users : tensor<8x16xf32>
  %h = htp.linear %x, %a : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %b : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// Two different shardings of one argument.
shard.grid @grid0(shape = 2)
func.func @two_shardings(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %even = shard.sharding @grid0 split_axes = [[0]] : !shard.sharding
  %uneven = shard.sharding @grid0 split_axes = [[0]] sharded_dims_offsets = [0, 10, 16] : !shard.sharding
  %a = shard.shard %w1 to %even : tensor<16x8xf32>
  // expected-error @+1 {{argument #1 has another, different sharding}}
  %b = shard.shard %a to %uneven annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %x, %b : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A rank with an empty block: HTP gives every rank a whole unit.
shard.grid @grid0(shape = 3)
func.func @empty_block(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  %rows = shard.sharding @grid0 split_axes = [[0]] sharded_dims_offsets = [0, 10, 10, 16] : !shard.sharding
  // expected-error @+1 {{rank 1's block is empty; HTP gives every rank at least one whole unit}}
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %x, %a : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// Halos: HTP's shards do not overlap.
shard.grid @grid0(shape = 2)
func.func @halo(%x: tensor<3x8xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{halo_sizes; HTP's shards do not overlap}}
  %rows = shard.sharding @grid0 split_axes = [[0]] halo_sizes = [1, 1] : !shard.sharding
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<16x8xf32>
  %h = htp.linear %x, %a : (tensor<3x8xf32>, tensor<16x8xf32>) -> tensor<3x16xf32>
  %y = htp.linear %h, %w2 : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A grid of no devices (shape = 0) is outside tp's bounds; it reached the
// split, which divided by it (SIGFPE).
shard.grid @grid0(shape = 0)
func.func @no_devices(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %w2: tensor<4x8xf32>) -> tensor<2x4xf32> {
  %rows = shard.sharding @grid0 split_axes = [[0]] : !shard.sharding
  %cols = shard.sharding @grid0 split_axes = [[], [0]] : !shard.sharding
  // expected-error @+1 {{cannot be imported: a grid of 0 devices is outside tp's bounds, 1 to 1024 (HTP_ENTRY_MAX_TP)}}
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<8x4xf32>
  %b = shard.shard %w2 to %cols annotate_for_users : tensor<4x8xf32>
  %h = htp.linear %x, %a : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  %g = htp.gelu %h : tensor<2x8xf32>
  %y = htp.linear %g, %b : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// A split over a grid axis the 1-D grid does not have was taken as axis 0.
shard.grid @grid0(shape = 2)
func.func @no_such_axis(%x: tensor<2x4xf32>, %w1: tensor<8x4xf32>, %w2: tensor<4x8xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{cannot be imported: it splits dim 0 over grid axes [5]; the grid has one axis, 0}}
  %rows = shard.sharding @grid0 split_axes = [[5]] : !shard.sharding
  %a = shard.shard %w1 to %rows annotate_for_users : tensor<8x4xf32>
  %h = htp.linear %x, %a : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  %y = htp.linear %h, %w2 : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
