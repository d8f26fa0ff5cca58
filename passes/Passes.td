//===- Passes.td - The htp passes ----------------------------*- tablegen -*-===//
//
// Declares every htp pass and its options; the named pipeline that chains
// them is registered in Pipeline.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_PASSES_TD
#define HTP_PASSES_TD

include "mlir/Pass/PassBase.td"

def HTPTensorParallel : Pass<"htp-tensor-parallel", "mlir::ModuleOp"> {
  let summary = "Split attention heads and MLP neurons over tp ranks (Megatron)";
  let description = [{
    Rewrites a function on full shapes into the program ONE rank runs when
    the block is split over `tp` ranks, as in Megatron-LM:

    - `htp.attention` keeps `num_heads / tp` heads: its qkv weight and bias
      become this rank's rows of each of the q, k and v blocks (layout
      "qkv"), its proj weight this rank's columns (layout "blocks", dim 1).
      The projection then yields a partial sum: it loses its bias, and
      `htp.all_reduce` + `htp.bias_add` follow.
    - A column→row pair of `htp.linear`s (the second reads the first through
      `htp.gelu` ops only, each value used once: the MLP) keeps
      `out_features / tp` neurons: the first linear's weight rows and bias
      (dim 0), the second's weight columns (dim 1); the second's bias moves
      after an `htp.all_reduce`.
    - Every other op (layer norms, residual adds, linears outside a pair)
      is replicated: each rank computes it whole.

    Sharded arguments get their local type and
    `htp.shard = #htp.shard<dim = D, parts = N, layout = L>`; the function gets `htp.tp`. Heads or
    neurons not divisible by `tp`, and a parameter used both by a split op
    and elsewhere, are errors, as is splitting a function that another
    refers to (a `func.call`: the caller would pass full weights to one
    rank's shards). `tp = 1` leaves the function unchanged.

    Uneven shards (DESIGN §12): `shares=3,3,2,1` (one positive number per
    rank) gives rank r a part of each layer's heads and MLP units in
    proportion to shares[r], whole units only (largest remainder; ties to
    the lower rank). An MLP unit is `mlp-unit-width` neurons (0: the
    smallest divisor of the hidden width that is at least
    min(64, hidden / (8 tp))), the unit the balance hooks then use. Every
    rank's arguments have room for the most units any rank owns; rank r's
    own units come first, the rest are empty slots (zero weights, so they
    contribute nothing), and the shards say which global units each rank
    owns (`units`, `unit`). A rank whose share rounds to no unit, or a
    hidden width the unit does not divide, is an error.

    Spare room (DESIGN §12): `spare=P` (a whole percent, 0 to 1000) gives
    every rank room for max(units) + ceil(max(units) × P / 100) units of
    each kind, so that units can later move into a rank's empty slots. With
    shares the units are theirs; on an even split each rank owns heads / tp
    heads and its width / tp of MLP neurons in units of `mlp-unit-width` (0:
    the balance hooks' choice on a rank's width), and the shards record
    them as above (`units`, `unit`). A room of more than 2^20 units, or of
    more rows or columns than a dim holds (2^31 - 1), is an error.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "Number of tensor-parallel ranks (>= 1)">,
    ListOption<"shares", "shares", "int64_t",
               "Uneven split: one positive share per rank (empty: even)">,
    Option<"mlpUnitWidth", "mlp-unit-width", "int64_t", /*default=*/"0",
           "With shares or spare: hidden neurons per MLP unit (0: automatic)">,
    Option<"spare", "spare", "int64_t", /*default=*/"0",
           "Spare room per rank, in percent of the most units any rank owns "
           "(0 to 1000; 0: none)">
  ];
  let dependentDialects = ["mlir::htp::HTPDialect"];
}

def HTPImportShard : Pass<"htp-import-shard", "mlir::ModuleOp"> {
  let summary = "Split functions whose weights carry upstream shard annotations";
  let description = [{
    Reads the upstream `shard` dialect's annotations of function arguments
    (`%t = shard.shard %arg to %s [annotate_for_users]`, `%s` a
    `shard.sharding` on a `shard.grid`, chains of them included), derives
    what `--htp-tensor-parallel` needs, drops the annotations, runs that
    very split, and then checks that every annotation states exactly what
    the split made of its argument (DESIGN §12):

    - tp is the size of the annotations' grid, which must be 1-D and static
      (`shard.grid @g(shape = 4)`), the same for every annotation of the
      function, and equal to the `tp` option when that is given.
    - No `sharded_dims_offsets` (or equidistant ones, as upstream's
      canonicalizer reads them) is the even split. Uneven offsets give the
      shares: the blocks of the uneven annotation of the longest dim,
      divided by their gcd. Every other annotation must then be what the
      split gives with those shares, whole heads or MLP units of
      `mlp-unit-width` neurons apportioned by largest remainder: the split
      has one ratio per function.
    - The weights that can carry a split sharding are those the split cuts
      into contiguous blocks: an MLP pair's first weight and bias (dim 0,
      `split_axes = [[0]]`) and second weight (dim 1, `[[], [0]]`), and an
      attention's proj weight (dim 1), whose columns decide its heads.
      Other arguments may be stated replicated (`[[]]`) or left alone.

    Refused, with an error naming the argument: an attention's qkv weight
    or bias with any annotation (Megatron's qkv split is strided, rank r
    taking its heads from each of the q, k and v blocks, and a sharding's
    blocks are contiguous; the proj's annotation decides the heads), a
    split of any other argument or of a computed value, a grid of several
    axes or a dynamic one, grids of different sizes, a grid that is not
    the `tp` option, halos, dynamic offsets, offsets that do not run from 0
    to the dim's size, a boundary inside a unit, a wrong dim, a pair whose
    blocks are not the apportionment of the function's ratio, and two
    different annotations of one argument. A function without annotations
    is left as it is; the grids the annotations named are erased once
    unused. The output is what `--htp-tensor-parallel` with the derived
    options makes. A function split already (`htp.tp`, such as the output
    of `--htp-export-shard`) is not split again: its annotations, which
    then state global rows and columns of its shards, are checked against
    its `htp.shard`s in the same way and dropped.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"0",
           "Tensor-parallel ranks the grid must have (0: the grid's size)">,
    Option<"mlpUnitWidth", "mlp-unit-width", "int64_t", /*default=*/"0",
           "With uneven offsets: hidden neurons per MLP unit (0: the split's automatic width)">
  ];
  let dependentDialects = ["mlir::htp::HTPDialect"];
}

def HTPExportShard : Pass<"htp-export-shard", "mlir::ModuleOp"> {
  let summary = "State the split's shards of linear and proj weights as upstream shard annotations";
  let description = [{
    On each function `--htp-tensor-parallel` split (`htp.tp = N`), states
    every argument with a blocks `htp.shard` as the upstream `shard`
    dialect does: a `shard.grid @htp_tpN(shape = N)` at the top of the
    module (made once, reused), and at the top of the function
    `%s = shard.sharding @htp_tpN split_axes = [[0]]` (dim 0) or
    `[[], [0]]` (dim 1), with `sharded_dims_offsets` in global rows or
    columns for uneven shards (rank r owns [offsets[r], offsets[r+1]) of
    the global tensor; even shards need none, upstream's default being the
    even split), and `shard.shard %arg to %s`. The sharding describes the
    global tensor while the argument is the rank's local one (with room for
    the most units any rank owns, under shares): the function stays HTP's
    SPMD program, and the htp ops keep reading the arguments, so the
    annotations' results are unused (a canonicalizer erases them).

    A qkv shard is strided (rank r's rows of each of q, k and v), which no
    `shard.sharding` states: its argument gets a remark instead, and its
    `htp.shard` remains the statement. The annotations are for other
    tools: run the export last (the lowering takes htp ops only), and once
    (a function whose arguments are annotated already is an error).
  }];
  let dependentDialects = ["mlir::shard::ShardDialect"];
}

def HTPBalanceHooks : Pass<"htp-balance-hooks", "mlir::func::FuncOp"> {
  let summary = "Let the runtime prune or migrate the work units of a split block";
  let description = [{
    Runs after `--htp-tensor-parallel` on functions it split (`htp.tp`):
    numbers each layer's attention (pair 2·layer) and MLP pair (2·layer + 1)
    in program order, marks the attention with its `pair`, and fuses each
    MLP column→GELU→row chain into one `htp.mlp` whose units are blocks of
    `unit_width` hidden neurons. The lowering turns both into calls of the
    runtime's hooks (`htp_rt_attention_f32`, `htp_rt_mlp_f32`, or their
    `_bf16` twins in a bf16 block), which compute the units the current
    plan gives the rank (DESIGN §4).

    It runs before `--htp-grad`, whose adjoints of the hooked ops are the
    backward hooks (`htp.attention_grad` with the `pair`, `htp.mlp_grad`);
    a function already marked `htp.backward` (a backward written by hand,
    or by an earlier `--htp-grad`) is left alone.

    The planner takes one unit count per kind, so every layer must have one
    attention and one MLP pair of the same shapes; anything else is an error
    naming what differs. `mlp-unit-width = 0` picks the smallest divisor of
    the rank's hidden width that is at least min(64, hidden / 8): about 8 or
    more units per rank, each a GEMM of at least a few dozen columns.
  }];
  let options = [
    Option<"mlpUnitWidth", "mlp-unit-width", "int64_t", /*default=*/"0",
           "Hidden neurons per MLP unit (0: automatic)">
  ];
  let dependentDialects = ["mlir::htp::HTPDialect"];
}

def HTPGrad : Pass<"htp-grad", "mlir::ModuleOp"> {
  let summary = "Write the backward function of each cross-entropy loss function";
  let description = [{
    For every public function whose result #0 is an `htp.cross_entropy`
    loss, adds `@NAME_grad` (unit attribute `htp.backward`): the forward,
    then every op's adjoint in reverse order, returning the forward's
    results followed by d(loss)/d(p) for each `htp.param` argument p, in
    argument order, each marked `htp.grad_of = "<param name>"`. A value
    used several times gets the sum (`htp.add`) of its uses' adjoints.

    On a function `--htp-tensor-parallel` split (`htp.tp`), run it after
    the split and after `--htp-balance-hooks`: the adjoints follow
    Megatron's conjugate pair. The forward's `htp.all_reduce` is the
    identity in backward; the gradient of the replicated input of an op
    with row-sharded weights (a split attention, the column linear of a
    split MLP, an `htp.mlp`) is this rank's part and is all-reduced.
    Replicated parameters thus get the same gradient on every rank,
    sharded ones their shard's. The adjoint of a balanced op is balanced
    too: an `htp.attention` with a `pair` gets an `htp.attention_grad`
    with that `pair`, an `htp.mlp` an `htp.mlp_grad` with its `pair`,
    `unit_width` and `approximate`; the lowering calls the runtime's
    backward hooks for them (DESIGN §11).

    A `@NAME_grad` already in the module, marked `htp.backward`, with
    `@NAME`'s arguments and its results first, is an earlier run's output
    and is left as it is: running the pass twice changes nothing.

    A parameter that does not reach the loss gets a zero gradient
    (`htp.zeros_like`) and a warning saying so.

    Errors: an op with no adjoint, a patch embedding of a computed value,
    a second loss, a parameter that reaches the loss only as data (a patch
    embedding's images, the loss's targets: mark those `htp.input`), and any
    other existing symbol named `NAME_grad`.
  }];
  let dependentDialects = ["mlir::htp::HTPDialect"];
}

def HTPFuseResidual : Pass<"htp-fuse-residual", "mlir::func::FuncOp"> {
  let summary = "Fold each residual htp.add of a single-use htp.linear, htp.attention, "
                "htp.bias_add or htp.all_reduce into it, each bias add of a single-use "
                "all-reduce and each layer norm of an all-reduce's sum into the all-reduce, "
                "and share a split function's norm of its input among the ranks";
  let description = [{
    `htp.add(htp.linear(x, w, b), r)`, the linear's result read by the add
    alone, becomes `htp.linear x, w, b residual r` (either operand order;
    likewise an htp.attention without a `pair`), which the lowering turns
    into one call (`htp_op_linear_residual_*`, `htp_op_attention_residual_*`).
    On CUDA with HTP_CUDA_RESIDUAL=epilogue the GEMM adds r in its epilogue
    (cuBLASLt's C, CUTLASS's source) where the pair made a second pass over
    the activations (the default still adds after the linear); a device without
    the fused entry (the CPU: an add right after the GEMM costs ~0.05 ms of
    a 17 ms fc2, bench/onednn_postops.c) runs the GEMM then the add, as
    before. A ViT block's attention and MLP fc2 are the cases. A linear with
    a fused GELU is left alone. Split over tp ranks, the sum of a row half
    takes the bias after its all-reduce: `htp.add(htp.bias_add(s, b), r)`
    becomes `htp.bias_add s, b residual r` (`htp_op_bias_add_residual_*`,
    one pass over the activations on CUDA instead of two), and a bias add
    (with or without its residual) or a residual add that reads an
    htp.all_reduce alone folds into it: `htp.all_reduce p bias b residual r`
    (`htp_allreduce_sum_bias_residual_*`), where ranks sharing a device
    each add b and r to the rows of the sum they take instead of each
    passing over the whole sum (on 8 of an H200's SMs beside ranks on 24,
    a tenth of it). The bias and residual must be available before the
    all-reduce runs. Last, a layer norm that reads an all-reduce's sum folds
    in with it (`htp.all_reduce_norm`: the sum and its norm,
    `htp_allreduce_sum_norm_*`), where its weights are available before the
    all-reduce: each rank normalises its rows of the sum there too. In a
    split function (one whose all-reduces name one group), a layer norm of
    an `htp.input` argument, which every rank holds alike (a block's first
    norm), takes that group (`htp.layer_norm ... {group = "tp"}`,
    `htp_group_layer_norm_*`): its ranks share its rows as well.

    Forward only, after `--htp-tensor-parallel` (whose row halves yield
    partial sums the residual follows), `--htp-balance-hooks` and
    `--htp-grad`, and before `--htp-assign-workspace`.
  }];
  let dependentDialects = ["mlir::htp::HTPDialect"];
}

def HTPFuseLinearGelu : Pass<"htp-fuse-linear-gelu", "mlir::func::FuncOp"> {
  let summary = "Fold each htp.gelu of a single-use htp.linear into the linear";
  let description = [{
    `htp.gelu(htp.linear(x, w, b))`, the linear's result read by the GELU
    alone, becomes `htp.linear x, w, b gelu <approximate>`, which the
    lowering turns into one call (`htp_op_linear_gelu_f32` / `_bf16`): on
    the CPU a oneDNN matmul with the GELU as its post-op (bf16; f32 runs
    linear then GELU, fusing was no faster there), where the pair made two
    calls and a second pass over the hidden activations. A ViT block's
    MLP fc1 is the case (bench/onednn_postops.c: ViT-B's bf16 fc1 + GELU
    from 10.3 to 8.7 ms on a Zen 5).

    Forward only, after `--htp-tensor-parallel`, `--htp-balance-hooks` and
    `--htp-grad` (which match or differentiate the unfused pair: a backward
    reads the linear's result, so the pairs it keeps have two uses and stay
    unfused) and before `--htp-assign-workspace`, which then places one
    value instead of two.
  }];
  let dependentDialects = ["mlir::htp::HTPDialect"];
}

def HTPAssignWorkspace : Pass<"htp-assign-workspace", "mlir::func::FuncOp"> {
  let summary = "Place each value of an htp function in a caller buffer or a workspace slot";
  let description = [{
    Decides where every tensor of an htp function lives when it runs as an
    entry point (`runtime/htp_entry.h`): arguments in the caller's argument
    buffers; a value an op computes and the function returns, in place in
    the caller's result buffer it is first returned in; every other value in
    a 64-byte aligned slot of one workspace the caller allocates once. The
    placement is recorded for `--htp-lower-to-runtime`:

    - `htp.workspace_offsets = array<i64: ...>` on an op with a result in
      a slot: one byte offset per result, -1 for a result computed in
      place in its result buffer (none on an op whose results all are);
      every result of a multi-result op (the backward ops) is placed, read
      or not, before any slot is freed: the kernel writes them together;
    - `htp.scratch_offset = N : i64` on an op whose kernel needs scratch
      (`htp.attention`, `htp.mlp`, `htp.attention_grad`, `htp.mlp_grad`,
      `htp.patch_embed`, `htp.patch_embed_grad`), live only while the op
      runs;
    - `htp.workspace_bytes = N : i64` on the function (at least 64).

    Why interval packing and not one-shot-bufferize: htp functions are
    straight-line SSA over static shapes, so buffer assignment is an
    interval-packing problem solved here exactly (first fit over live
    intervals: a slot is reused once its value's last reader has run; an
    op's operands are released only after its result and scratch are placed,
    since the kernels take no output aliasing an input; a result never read
    is freed at once), and the lowering gets a plain C ABI (raw pointers, one
    workspace) instead of memref descriptors and per-call mallocs.

    Every size is overflow-checked; a value takes 4 bytes per f32 element
    and 2 per bf16; kernel scratch is f32 in both. A workspace above
    HTP_ENTRY_MAX_WORKSPACE_BYTES is an error naming the op. The function
    must be one block of htp ops over static tensors, all f32 or all bf16.
  }];
  let dependentDialects = ["mlir::htp::HTPDialect"];
}

def HTPLowerToRuntime : Pass<"htp-lower-to-runtime", "mlir::ModuleOp"> {
  let summary = "Lower htp functions to LLVM-dialect entry points that call the runtime";
  let description = [{
    Turns every `func.func @F` made of htp ops into an entry point with the
    C ABI of `runtime/htp_entry.h`:
    `i32 @"htp.entry.F"(ptr %rt_ctx, ptr %buffers)`, where `%buffers` points
    to the function's argument buffers, then its result buffers, then one
    workspace.

    Where each value lives comes from `--htp-assign-workspace`, which must
    run first (`htp-pipeline` runs it; `--htp-assign-workspace
    --htp-lower-to-runtime` by hand): a function without
    `htp.workspace_bytes`, or an op result that is neither placed nor
    returned, is an error saying so; a slot outside the workspace, or two
    slots that are live at the same time and overlap (the placement is IR a
    user may write, so it is checked, not trusted), is refused. Values returned but not computed in place (an argument, a value
    returned twice) are copied into their result buffers by `htp_op_copy`
    (no `llvm.memcpy`: the buffers may live on a device).

    One conversion pattern per op (passes/OpLowerings.cpp): each op becomes
    a call of libhtprt (`runtime/htp_ops.h`; the all-reduce `runtime/htp.h`)
    with the rank's context `%rt_ctx`
    first: its op entry point (`htp_op_linear_f32`, `htp_op_layer_norm_f32`,
    `htp_op_gelu_f32`, `htp_op_add_f32`, `htp_op_bias_add_f32`,
    `htp_op_attention_f32` with its scratch's size in floats), which
    dispatches through the context's kernel table (DESIGN §6), or
    `htp_allreduce_sum_f32`, or for the ops the balance hooks marked
    (`htp.attention` with a `pair`, `htp.mlp`) the hooks, and for their
    adjoints (`htp.attention_grad` with a `pair`, `htp.mlp_grad`) the
    backward hooks (`htp_rt_attention_grad_f32`, `htp_rt_mlp_grad_f32`).
    An op on bf16 tensors calls the `_bf16` twin of its entry point
    (`htp_op_linear_bf16`, ..., `htp_allreduce_sum_bf16`: the same
    arguments, bf16 pointers; the attention's scratch stays f32), the
    forward hooks too (`htp_rt_attention_bf16`, `htp_rt_mlp_bf16`); the
    backward hooks are f32-only, as training is. The
    block so names no device-specific kernel. Every call's status is checked, and a
    failing one (bad arguments, a device error, a peer that hung or died) is
    returned from the entry point at once.

    The pass also emits `@"htp.sig.F"`, the block's signature as JSON
    (format 2 of `runtime/htp_entry.h`: argument names, roles, dtypes
    (`"f32"` or `"bf16"`), shapes and
    shards, results, workspace bytes, GEMM FLOPs, tp, balance units),
    `@"htp.facts.F"`, the same numbers as an int64 array taken from the
    function's types (what the code was compiled for, which a loader
    compares with the JSON), and
    `@"htp.default_entry"` (the name F) when the module has exactly one
    public function. Every symbol it defines starts with `htp.` and every
    function it declares with `htp_`, so a function named like a C library,
    kernel or runtime function (`@memcpy`, `@htp_cpu_linear_f32`) cannot
    collide with them; other symbols of those prefixes are refused. Function
    and argument names must be 1 to 4096 bytes of UTF-8 without control
    characters; anything else (spaces, quotes) is escaped in the JSON.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

#endif // HTP_PASSES_TD
