//===- HTPOps.td - The htp dialect and its ops ---------------*- tablegen -*-===//
//
// The htp dialect describes transformer blocks as value-semantics ops on
// static f32 or bf16 tensors: the unit the tensor-parallel and balancing passes reason
// about is an op (a linear layer, an attention block), not a loop nest.
// Verifiers reject every shape that does not fit, naming the dims, and every
// tensor or attribute beyond what the runtime and BLAS can take (the limits of
// runtime/htp_entry.h), with arithmetic that cannot overflow.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_OPS_TD
#define HTP_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def HTP_Dialect : Dialect {
  let name = "htp";
  let summary = "Transformer blocks for heterogeneous tensor parallelism";
  let description = [{
    Value-semantics ops on static f32 or bf16 tensors describing transformer
    blocks (ViT first). A block is all f32 or all bf16: every tensor operand
    and result of an op has one element type (weights and activations
    alike); a bf16 op computes in f32 and rounds each output once. Function arguments that are parameters carry
    `{htp.param = "blocks.0.attn.qkv.weight"}` (timm's names) so checkpoints
    bind without renaming; data inputs may carry `{htp.input = "x"}` (an
    argument is one or the other, never both).

    After `--htp-tensor-parallel` the function carries `htp.tp = N : i64`
    and each sharded argument
    `htp.shard = #htp.shard<dim = D, parts = N, layout = blocks | qkv>`:
    the global parameter's dim D is N times the argument's, and rank r holds
    slice r of it (`qkv`: slice r of each of the q, k and v blocks).

    Limits (runtime/htp_entry.h), checked on every htp op's operands and
    results and on every argument marked `htp.param` or `htp.input`: rank at
    most 8, every dim from 1 to 2^31-1 (zero-sized tensors are rejected: no
    kernel is asked to reduce over nothing), at most 2^40 bytes per tensor;
    `htp.tp` and shard parts at most 1024.

    Function results may carry `{htp.result = "loss"}` (the result's name
    in the entry signature) or, on a gradient written by `--htp-grad`,
    `{htp.grad_of = "<param name>"}`, naming an `htp.param` argument of the
    same function and type (at most one gradient per parameter). A function
    written by `--htp-grad` carries the unit attribute `htp.backward`.
  }];
  let cppNamespace = "::mlir::htp";
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let useDefaultAttributePrinterParser = 1;
}

include "dialect/HTPAttrs.td"

/// Every htp tensor is a ranked, statically shaped f32 or bf16 tensor.
def HTP_Tensor : StaticShapeTensorOf<[F32, BF16]>;

/// All tensor operands and results of an op share one element type; the
/// diagnostic names the operand that differs (verifyOneElementType in
/// HTPOps.cpp). First among an op's traits, so it speaks before
/// SameOperandsAndResultType's less specific message.
def HTP_OneElementType : NativeOpTrait<"OneElementType"> {
  let cppNamespace = "::mlir::htp";
}

/// Every operand and result within the limits of runtime/htp_entry.h (rank,
/// dims >= 1 and <= 2^31-1, bytes); see verifyTensorLimits in HTPOps.cpp.
def HTP_TensorLimits : NativeOpTrait<"TensorLimits"> {
  let cppNamespace = "::mlir::htp";
}

/// The shape rules every op description ends with.
defvar HTP_LimitsDoc = [{

    Every operand and result is f32 or bf16, all of one element type, has
    rank at most 8 and dims from 1 to 2^31-1 (a zero-sized dim is an error,
    not an empty computation) and holds at most 2^40 bytes (4 bytes per f32
    element, 2 per bf16).
  }];

class HTP_Op<string mnemonic, list<Trait> traits = []>
    : Op<HTP_Dialect, mnemonic,
         !listconcat([HTP_OneElementType], traits, [Pure, HTP_TensorLimits])> {
  let hasVerifier = 1;
}

def HTP_LinearOp : HTP_Op<"linear", [AttrSizedOperandSegments]> {
  let summary = "y = x·wᵀ + b over the last dim (PyTorch nn.Linear layout)";
  let description = [{
    `weight` is `[out_features, in_features]`; `bias`, when present, is
    `[out_features]`. The input may have any rank ≥ 1; its last dim must be
    `in_features`, and the result replaces it with `out_features`.

    ```mlir
    %y = htp.linear %x, %w, %b : (tensor<8x197x768xf32>, tensor<3072x768xf32>,
                                  tensor<3072xf32>) -> tensor<8x197x3072xf32>
    %z = htp.linear %u, %v : (tensor<8x197x768xbf16>, tensor<3072x768xbf16>)
                           -> tensor<8x197x3072xbf16>
    ```

    `gelu`, when present, applies GELU to the result (`gelu none`: exact,
    `gelu tanh`: the tanh form, as htp.gelu's `approximate`): the epilogue
    `--htp-fuse-linear-gelu` folds a single-use linear's htp.gelu into, so
    the lowering makes one kernel call (on the CPU, a oneDNN post-op).
    Forward only: --htp-grad refuses it, and --htp-tensor-parallel never
    takes it for the row half of a pair (its GELU cannot follow a partial sum).

    ```mlir
    %h = htp.linear %x, %w1, %b1 gelu none
        : (tensor<8x197x768xf32>, tensor<3072x768xf32>, tensor<3072xf32>)
          -> tensor<8x197x3072xf32>
    ```

    `residual`, when present, is added to the result (`y = x·wᵀ + b + r`,
    `r` of the result's type): the residual add `--htp-fuse-residual` folds
    a single-use linear's htp.add into, so that a device whose GEMM can add
    it in its epilogue saves the pass over the activations. Not with `gelu`
    (the order of the two would be ambiguous). Forward only, as `gelu`;
    --htp-tensor-parallel moves it after the all-reduce of a row half.

    ```mlir
    %y = htp.linear %h, %w2, %b2 residual %x
        : (tensor<8x197x3072xf32>, tensor<768x3072xf32>, tensor<768xf32>,
           tensor<8x197x768xf32>) -> tensor<8x197x768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$weight,
                       Optional<HTP_Tensor>:$bias,
                       Optional<HTP_Tensor>:$residual,
                       OptionalAttr<HTP_ApproximationAttr>:$gelu);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? (`gelu` `` $gelu^)? (`residual` $residual^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def HTP_AttentionOp : HTP_Op<"attention", [AttrSizedOperandSegments]> {
  let summary = "multi-head self-attention with fused qkv (timm layout)";
  let description = [{
    `input` is `[batch, tokens, dim]`. `qkv_weight` is
    `[3·num_heads·head_dim, dim]`: the q rows, then the k rows, then the v rows,
    each block ordered by head; `qkv_bias` is `[3·num_heads·head_dim]`;
    `proj_weight` is `[dim, num_heads·head_dim]`; `proj_bias`, when present,
    is `[dim]`. `head_dim` is implied by the qkv weight. After
    tensor-parallel splitting `num_heads` counts the heads this rank holds,
    the projection has no bias (the result is this rank's partial sum) and
    the bias is added after the `htp.all_reduce`. `pair`, set by
    `--htp-balance-hooks` (and then without proj bias), numbers the
    attention pair (2 · layer) whose heads the runtime may prune or migrate.
    `3 · num_heads` is computed with overflow checks; with a `pair`,
    num_heads is at most 2^20 (HTP_ENTRY_MAX_UNITS) and pair below 2^17.

    ```mlir
    %y = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 12 : i64}
        : (tensor<8x197x768xf32>, tensor<2304x768xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>) -> tensor<8x197x768xf32>
    ```

    `residual`, when present (the input's type), is added to the result, as
    htp.linear's: `--htp-fuse-residual` folds a single-use attention's
    residual htp.add into it, so that the projection's GEMM adds it in its
    epilogue. Not with a `pair` (a partial sum); forward only.

    ```mlir
    %y = htp.attention %h, %wqkv, %bqkv, %wproj, %bproj residual %x {num_heads = 12 : i64}
        : (tensor<8x197x768xf32>, tensor<2304x768xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<8x197x768xf32>)
          -> tensor<8x197x768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$qkv_weight,
                       HTP_Tensor:$qkv_bias, HTP_Tensor:$proj_weight,
                       Optional<HTP_Tensor>:$proj_bias,
                       Optional<HTP_Tensor>:$residual,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$pair);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $qkv_weight `,` $qkv_bias `,` $proj_weight (`,` $proj_bias^)?
    (`residual` $residual^)? attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Channels per head, as implied by the qkv weight.
    int64_t getHeadDim();
  }];
}

def HTP_LayerNormOp : HTP_Op<"layer_norm"> {
  let summary = "layer normalisation over the last dim";
  let description = [{
    `y = (x - mean) / sqrt(var + epsilon) · weight + bias`, with the biased
    variance as in PyTorch; `weight` and `bias` are `[dim]`; `epsilon` is
    positive and finite. `epsilon` stays an f32 attribute in a bf16 block, whose
    mean and variance are computed in f32 too.

    ```mlir
    %y = htp.layer_norm %x, %g, %b {epsilon = 1.0e-06 : f32}
        : (tensor<8x197x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<8x197x768xf32>
    %z = htp.layer_norm %u, %h, %c {epsilon = 1.0e-06 : f32}
        : (tensor<8x197x768xbf16>, tensor<768xbf16>, tensor<768xbf16>) -> tensor<8x197x768xbf16>
    ```

    `group`, where given, names a tensor-parallel group whose ranks all hold
    the input alike (a split block's input): a collective, whose ranks may
    share the work (on one device each normalises its rows and hands them
    to the others, as `htp.all_reduce_norm` does with a sum's rows). The
    result is the same. `--htp-fuse-residual` sets it on the norm of a split
    function's `htp.input` argument.

    ```mlir
    %n = htp.layer_norm %x, %g, %b {epsilon = 1.0e-06 : f32, group = "tp"}
        : (tensor<8x197x768xf32>, tensor<768xf32>, tensor<768xf32>) -> tensor<8x197x768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$weight, HTP_Tensor:$bias,
                       DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon,
                       OptionalAttr<StrAttr>:$group);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_GeluOp : HTP_Op<"gelu", [SameOperandsAndResultType]> {
  let summary = "GELU, exact (erf) or tanh-approximated";
  let description = [{
    `approximate` is `none` (the default, `x·Φ(x)` with erf, not printed)
    or `tanh`, as in PyTorch's `nn.GELU(approximate=...)`; as an attribute
    it is `#htp<approximate tanh>`.

    ```mlir
    %y = htp.gelu %x approximate tanh : tensor<8x197x3072xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input,
                       DefaultValuedAttr<HTP_ApproximationAttr,
                                         "::mlir::htp::Approximation::None">:$approximate);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = "$input (`approximate` `` $approximate^)? attr-dict `:` type($result)";
}

def HTP_AddOp : HTP_Op<"add", [SameOperandsAndResultType]> {
  let summary = "elementwise sum of two tensors of one shape (the residual)";
  let description = [{
    No broadcasting: both operands and the result have the same type.

    ```mlir
    %y = htp.add %a, %b : tensor<8x197x768xf32>
    %z = htp.add %c, %d : tensor<8x197x768xbf16>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$lhs, HTP_Tensor:$rhs);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def HTP_MLPOp : HTP_Op<"mlp"> {
  let summary = "a rank's share of an MLP pair: fc2(GELU(fc1(x))) without fc2's bias";
  let description = [{
    The column→row pair of a split MLP as one op, made by
    `--htp-balance-hooks` so that the runtime can work on its units: blocks
    of `unit_width` hidden neurons (fc1 rows and the fc2 columns that read
    them). `fc1_weight` is `[hidden, dim]`, `fc1_bias` `[hidden]`,
    `fc2_weight` `[dim, hidden]`; the result is `[..., dim]`, this rank's
    partial sum (the all-reduce and fc2's bias follow). `pair` is
    2 · layer + 1. `approximate` is the GELU's, as in `htp.gelu`. At most
    2^20 units per rank (HTP_ENTRY_MAX_UNITS) and pair below 2^17.

    ```mlir
    %p = htp.mlp %x, %w1, %w2 fc1_bias(%b1) approximate tanh {pair = 1 : i64, unit_width = 64 : i64}
        : (tensor<8x197x768xf32>, tensor<768x768xf32>, tensor<768x768xf32>, tensor<768xf32>)
        -> tensor<8x197x768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$fc1_weight, HTP_Tensor:$fc2_weight,
                       Optional<HTP_Tensor>:$fc1_bias,
                       DefaultValuedAttr<HTP_ApproximationAttr,
                                         "::mlir::htp::Approximation::None">:$approximate,
                       ConfinedAttr<I64Attr, [IntPositive]>:$unit_width,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$pair);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $fc1_weight `,` $fc2_weight (`fc1_bias` `(` $fc1_bias^ `)`)?
    (`approximate` `` $approximate^)? attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_BiasAddOp : HTP_Op<"bias_add", [
    AllTypesMatch<["input", "result"]>,
    OptionalTypesMatchWith<"a residual has the input's type", "input", "residual", "$_self">]> {
  let summary = "adds a [dim] bias to every row of a tensor";
  let description = [{
    `bias` is 1-D and matches the input's last dim. The tensor-parallel pass
    puts it after an `htp.all_reduce`, so a row-parallel layer's bias is
    added once, not once per rank.

    ```mlir
    %y = htp.bias_add %x, %b : tensor<8x197x768xf32>, tensor<768xf32>
    ```

    `residual`, when present, is added too (`y = x + b + r`, `r` of the
    input's type): `--htp-fuse-residual` folds into it the residual add that
    follows a row-parallel layer's all-reduce and bias, so that a device
    makes one pass over the activations instead of two. `--htp-grad` gives
    it the adjoint of both adds.

    ```mlir
    %y = htp.bias_add %x, %b residual %r : tensor<8x197x768xf32>, tensor<768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$bias, Optional<HTP_Tensor>:$residual);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $bias (`residual` $residual^)? attr-dict `:` type($input) `,` type($bias)
  }];
}

def HTP_AllReduceOp : HTP_Op<"all_reduce", [
    AttrSizedOperandSegments, AllTypesMatch<["input", "result"]>,
    OptionalTypesMatchWith<"a residual has the input's type", "input", "residual", "$_self">]> {
  let summary = "sum over the tensor-parallel group";
  let description = [{
    Produced by the tensor-parallel pass after each row-parallel linear: every
    rank contributes its partial sum and receives the total. `group` names the
    communicator (`"tp"` by default). A bf16 sum is accumulated in f32 and
    rounded once.

    ```mlir
    %y = htp.all_reduce %partial {group = "tp"} : tensor<8x197x768xf32>
    ```

    `bias` (1-D, the input's last dim) and `residual` (the input's type),
    each optional, are added to the total (`y = sum + b + r`):
    `--htp-fuse-residual` folds into it the bias add (and its residual) that
    follows a row-parallel layer's all-reduce. Both are replicated values,
    the same on every rank, so a backend may add them where it sums: ranks
    sharing one device each add them to the part of the total they sum,
    instead of every rank passing over the whole total again.
    `--htp-grad` gives it the adjoint of the sum and both adds.

    ```mlir
    %y = htp.all_reduce %partial bias %b residual %r : tensor<8x197x768xf32>, tensor<768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, Optional<HTP_Tensor>:$bias,
                       Optional<HTP_Tensor>:$residual,
                       DefaultValuedAttr<StrAttr, "\"tp\"">:$group);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $input (`bias` $bias^)? (`residual` $residual^)? attr-dict `:` type($input)
    (`,` type($bias)^)?
  }];
}

def HTP_AllReduceNormOp : HTP_Op<"all_reduce_norm", [
    AttrSizedOperandSegments, AllTypesMatch<["input", "sum", "normed"]>,
    AllTypesMatch<["weight", "norm_bias"]>,
    OptionalTypesMatchWith<"a bias has the norm weight's type", "weight", "bias", "$_self">,
    OptionalTypesMatchWith<"a residual has the input's type", "input", "residual", "$_self">]> {
  let summary = "an all-reduce (with its bias and residual) and the layer norm of its sum";
  let description = [{
    `sum` is `htp.all_reduce`'s result (the total over the group, `+ bias`
    and `+ residual` where given) and `normed` its `htp.layer_norm` with
    `weight`, `norm_bias` and `epsilon`. `--htp-fuse-residual` makes it from
    a layer norm that reads an all-reduce's sum (the next half-layer's norm
    after a row-parallel layer), so that ranks sharing a device each
    normalise the rows of the sum they take, as they add the bias and
    residual there, instead of each normalising the whole sum. Forward only
    (made after `--htp-grad`).

    ```mlir
    %s, %n = htp.all_reduce_norm %partial bias %b residual %r norm %g, %beta {epsilon = 1.0e-06 : f32}
        : tensor<8x197x768xf32>, tensor<768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$weight, HTP_Tensor:$norm_bias,
                       Optional<HTP_Tensor>:$bias, Optional<HTP_Tensor>:$residual,
                       DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon,
                       DefaultValuedAttr<StrAttr, "\"tp\"">:$group);
  let results = (outs HTP_Tensor:$sum, HTP_Tensor:$normed);
  let assemblyFormat = [{
    $input (`bias` $bias^)? (`residual` $residual^)? `norm` $weight `,` $norm_bias attr-dict
    `:` type($input) `,` type($weight)
  }];
}

//===----------------------------------------------------------------------===//
// Training ops: the whole ViT's forward ends and every backward op (f32 only)
//===----------------------------------------------------------------------===//

/// Every operand and result f32: the training kernels exist in f32 only, so
/// a bf16 training op is refused with one message (verifyF32Only in
/// HTPOps.cpp). After HTP_OneElementType, which already made all of an
/// op's tensors one element type.
def HTP_F32Only : NativeOpTrait<"F32Only"> {
  let cppNamespace = "::mlir::htp";
}

defvar HTP_TrainDoc = [{

    Training ops are f32 only for now (a bf16 operand is an error); the
    other limits are the htp ops' own: rank at most 8, dims from 1 to
    2^31-1, at most 2^40 bytes per tensor.
  }];

class HTP_TrainOp<string mnemonic, list<Trait> traits = []>
    : HTP_Op<mnemonic, !listconcat([HTP_F32Only], traits)>;

def HTP_PatchEmbedOp : HTP_TrainOp<"patch_embed"> {
  let summary = "images to patch tokens: a stride-P convolution with a P×P kernel";
  let description = [{
    `images` is `[B, C, H, W]` with H and W multiples of `patch` (P);
    `weight` is `[D, C, P, P]` (timm's Conv2d `patch_embed.proj.weight`),
    `bias` `[D]`. The result is `[B, N, D]`, N = (H/P)·(W/P), tokens in
    row-major patch-grid order (timm's `flatten(2).transpose(1, 2)`); a
    patch's vector is ordered (c, ky, kx), so the weight seen as
    `[D, C·P·P]` is a linear. The kernel's im2col scratch is B·N·C·P·P
    floats.

    ```mlir
    %t = htp.patch_embed %img, %w, %b {patch = 4 : i64}
        : (tensor<2x1x28x28xf32>, tensor<16x1x4x4xf32>, tensor<16xf32>) -> tensor<2x49x16xf32>
    ```
  }] # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$images, HTP_Tensor:$weight, HTP_Tensor:$bias,
                       ConfinedAttr<I64Attr, [IntPositive]>:$patch);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $images `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_EmbedTokensOp : HTP_TrainOp<"embed_tokens"> {
  let summary = "prepends the class token and adds the position embedding";
  let description = [{
    `patches` `[B, N, D]`, `cls` `[1, 1, D]`, `pos` `[1, N+1, D]` →
    `[B, N+1, D]`: `y[b, 0] = cls + pos[0]`, `y[b, 1+i] = patches[b, i] +
    pos[1+i]`.

    ```mlir
    %x = htp.embed_tokens %t, %cls, %pos
        : (tensor<2x49x16xf32>, tensor<1x1x16xf32>, tensor<1x50x16xf32>) -> tensor<2x50x16xf32>
    ```
  }] # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$patches, HTP_Tensor:$cls, HTP_Tensor:$pos);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $patches `,` $cls `,` $pos attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_ClsTokenOp : HTP_TrainOp<"cls_token"> {
  let summary = "token 0 of each sequence (timm's global_pool='token')";
  let description = [{
    `[B, T, D]` → `[B, D]`.

    ```mlir
    %c = htp.cls_token %x : (tensor<2x50x16xf32>) -> tensor<2x16xf32>
    ```
  }] # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$input);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def HTP_CrossEntropyOp : HTP_TrainOp<"cross_entropy"> {
  let summary = "mean cross-entropy of softmax(logits) against target probabilities";
  let description = [{
    `logits` and `targets` are `[B, K]`; the result is `tensor<1xf32>`, the
    mean over rows of `-Σ_k t_k · log softmax(logits)_k` (PyTorch's
    `cross_entropy` with probability targets; one-hot rows for labels).

    ```mlir
    %l = htp.cross_entropy %logits, %t : (tensor<2x10xf32>, tensor<2x10xf32>) -> tensor<1xf32>
    ```
  }] # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$logits, HTP_Tensor:$targets);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` functional-type(operands, results)
  }];
}

defvar HTP_GradDoc = [{

    A backward op is a value: every gradient it yields is written whole,
    never accumulated into, and an unused result is still computed.
  }];

def HTP_LinearGradOp : HTP_TrainOp<"linear_grad"> {
  let summary = "gradients of htp.linear: dx, dweight and optionally dbias";
  let description = [{
    `input` `[..., in]`, `weight` `[out, in]`, `dy` `[..., out]` →
    `dx` (the input's type), `dweight` (the weight's type) and, when a third
    result is written, `dbias` `[out]`.

    ```mlir
    %dx, %dw, %db = htp.linear_grad %x, %w, %dy
        : (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<2x5x7xf32>)
        -> (tensor<2x5x12xf32>, tensor<7x12xf32>, tensor<7xf32>)
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$weight, HTP_Tensor:$dy);
  let results = (outs HTP_Tensor:$dx, HTP_Tensor:$dweight, Optional<HTP_Tensor>:$dbias);
  let assemblyFormat = [{
    $input `,` $weight `,` $dy attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_LayerNormGradOp : HTP_TrainOp<"layer_norm_grad"> {
  let summary = "gradients of htp.layer_norm: dx, dweight (gamma) and dbias (beta)";
  let description = [{
    `input` `[..., dim]`, `weight` (gamma) `[dim]`, `dy` the input's type →
    `dx` (the input's type), `dweight` and `dbias` `[dim]`. `epsilon` is the
    forward's. The forward's bias does not enter any gradient.

    ```mlir
    %dx, %dg, %db = htp.layer_norm_grad %x, %g, %dy {epsilon = 1.0e-06 : f32}
        : (tensor<2x5x12xf32>, tensor<12xf32>, tensor<2x5x12xf32>)
        -> (tensor<2x5x12xf32>, tensor<12xf32>, tensor<12xf32>)
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$weight, HTP_Tensor:$dy,
                       DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon);
  let results = (outs HTP_Tensor:$dx, HTP_Tensor:$dweight, HTP_Tensor:$dbias);
  let assemblyFormat = [{
    $input `,` $weight `,` $dy attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_GeluGradOp : HTP_TrainOp<"gelu_grad"> {
  let summary = "dx = dy · GELU'(x)";
  let description = [{
    `input`, `dy` and the result have one type; `approximate` is the
    forward's (`none` or `tanh`, as in `htp.gelu`).

    ```mlir
    %dx = htp.gelu_grad %x, %dy approximate tanh
        : (tensor<2x5x48xf32>, tensor<2x5x48xf32>) -> tensor<2x5x48xf32>
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$dy,
                       DefaultValuedAttr<HTP_ApproximationAttr,
                                         "::mlir::htp::Approximation::None">:$approximate);
  let results = (outs HTP_Tensor:$dx);
  let assemblyFormat = [{
    $input `,` $dy (`approximate` `` $approximate^)? attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_AttentionGradOp : HTP_TrainOp<"attention_grad"> {
  let summary = "gradients of htp.attention";
  let description = [{
    Operands as `htp.attention`'s without the proj bias (it changes no
    gradient but its own), then `dy` (the input's type); `num_heads` is
    the forward's. Results: `dx`, `dqkv_weight`, `dqkv_bias`,
    `dproj_weight`, each of its operand's type, and when a fifth result is
    written, `dproj_bias` `[dim]`. The kernel's scratch is
    `htp_cpu_attention_backward_scratch_floats` (kernels/htp_scratch.h).

    `pair`, written by `--htp-grad` for the adjoint of a balanced
    `htp.attention` (one with a `pair`), is the forward's: the lowering
    calls the backward hook `htp_rt_attention_grad_f32`, which
    differentiates the heads the plan gave the rank in forward (pruned
    heads get no weight gradient and an imputed share of `dx`), and `dx`
    is this rank's part, all-reduced after. Limits as the forward's: no
    `dproj_bias` (a balanced attention has no proj bias), num_heads at
    most 2^20 (HTP_ENTRY_MAX_UNITS), pair even and below 2^17; its
    scratch is `htp_rt_attention_grad_scratch_floats`.

    ```mlir
    %dx, %dwqkv, %dbqkv, %dwp, %dbp = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy {num_heads = 3 : i64}
        : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>,
           tensor<2x5x12xf32>)
        -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>,
            tensor<12xf32>)
    %hx, %hwqkv, %hbqkv, %hwp = htp.attention_grad %x, %wqkv, %bqkv, %wp, %dy
        {num_heads = 3 : i64, pair = 0 : i64}
        : (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>,
           tensor<2x5x12xf32>)
        -> (tensor<2x5x12xf32>, tensor<36x12xf32>, tensor<36xf32>, tensor<12x12xf32>)
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$qkv_weight, HTP_Tensor:$qkv_bias,
                       HTP_Tensor:$proj_weight, HTP_Tensor:$dy,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$pair);
  let results = (outs HTP_Tensor:$dx, HTP_Tensor:$dqkv_weight, HTP_Tensor:$dqkv_bias,
                      HTP_Tensor:$dproj_weight, Optional<HTP_Tensor>:$dproj_bias);
  let assemblyFormat = [{
    $input `,` $qkv_weight `,` $qkv_bias `,` $proj_weight `,` $dy attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Channels per head, as implied by the qkv weight.
    int64_t getHeadDim();
  }];
}

def HTP_MLPGradOp : HTP_TrainOp<"mlp_grad"> {
  let summary = "gradients of htp.mlp: dx and the pair's weight gradients";
  let description = [{
    The adjoint of a balanced MLP pair, written by `--htp-grad` for an
    `htp.mlp`. Operands as `htp.mlp`'s (`fc1_weight` `[hidden, dim]`,
    `fc2_weight` `[dim, hidden]`, `fc1_bias` `[hidden]` when present),
    then `dy`, the gradient of the forward's result (the input's type,
    `[..., dim]`). `approximate`, `unit_width` and `pair` are the
    forward's. Results: `dx` (the input's type: this rank's part, which
    the block all-reduces), `dfc1_weight`, `dfc2_weight`, each of its
    weight's type, and `dfc1_bias` `[hidden]`, present exactly when
    `fc1_bias` is. The lowering calls the backward hook
    `htp_rt_mlp_grad_f32`, which differentiates the units the plan gave
    the rank in forward (a pruned unit gets no weight gradient and an
    imputed share of `dx`); its scratch is
    `htp_rt_mlp_grad_scratch_floats` (kernels/htp_scratch.h). Limits as
    `htp.mlp`'s: hidden a multiple of `unit_width`, at most 2^20 units
    (HTP_ENTRY_MAX_UNITS), pair odd and below 2^17.

    ```mlir
    %dx, %dw1, %dw2, %db1 = htp.mlp_grad %x, %w1, %w2, %dy fc1_bias(%b1) approximate tanh
        {pair = 1 : i64, unit_width = 4 : i64}
        : (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>, tensor<2x5x12xf32>,
           tensor<24xf32>)
        -> (tensor<2x5x12xf32>, tensor<24x12xf32>, tensor<12x24xf32>, tensor<24xf32>)
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  // The optional operand comes last, as htp.mlp's: no operand segments.
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$fc1_weight, HTP_Tensor:$fc2_weight,
                       HTP_Tensor:$dy, Optional<HTP_Tensor>:$fc1_bias,
                       DefaultValuedAttr<HTP_ApproximationAttr,
                                         "::mlir::htp::Approximation::None">:$approximate,
                       ConfinedAttr<I64Attr, [IntPositive]>:$unit_width,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$pair);
  let results = (outs HTP_Tensor:$dx, HTP_Tensor:$dfc1_weight, HTP_Tensor:$dfc2_weight,
                      Optional<HTP_Tensor>:$dfc1_bias);
  let assemblyFormat = [{
    $input `,` $fc1_weight `,` $fc2_weight `,` $dy (`fc1_bias` `(` $fc1_bias^ `)`)?
    (`approximate` `` $approximate^)? attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_RowSumOp : HTP_TrainOp<"row_sum"> {
  let summary = "sum over every row of a tensor: htp.bias_add's bias gradient";
  let description = [{
    `[..., D]` → `[D]`.

    ```mlir
    %db = htp.row_sum %dy : (tensor<2x5x12xf32>) -> tensor<12xf32>
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$input);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def HTP_PatchEmbedGradOp : HTP_TrainOp<"patch_embed_grad"> {
  let summary = "gradients of htp.patch_embed's weight and bias";
  let description = [{
    `images` `[B, C, H, W]`, `dy` `[B, N, D]` (N = (H/P)·(W/P)) →
    `dweight` `[D, C, P, P]`, `dbias` `[D]`. No image gradient (images are
    data). Scratch as `htp.patch_embed`'s: B·N·C·P·P floats.

    ```mlir
    %dw, %db = htp.patch_embed_grad %img, %dt {patch = 4 : i64}
        : (tensor<2x1x28x28xf32>, tensor<2x49x16xf32>) -> (tensor<16x1x4x4xf32>, tensor<16xf32>)
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$images, HTP_Tensor:$dy,
                       ConfinedAttr<I64Attr, [IntPositive]>:$patch);
  let results = (outs HTP_Tensor:$dweight, HTP_Tensor:$dbias);
  let assemblyFormat = [{
    $images `,` $dy attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_EmbedTokensGradOp : HTP_TrainOp<"embed_tokens_grad"> {
  let summary = "gradients of htp.embed_tokens: dpatches, dcls and dpos";
  let description = [{
    `dy` `[B, N+1, D]` → `dpatches` `[B, N, D]`, `dcls` `[1, 1, D]`,
    `dpos` `[1, N+1, D]` (N at least 1).

    ```mlir
    %dt, %dcls, %dpos = htp.embed_tokens_grad %dx
        : (tensor<2x50x16xf32>) -> (tensor<2x49x16xf32>, tensor<1x1x16xf32>, tensor<1x50x16xf32>)
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$dy);
  let results = (outs HTP_Tensor:$dpatches, HTP_Tensor:$dcls, HTP_Tensor:$dpos);
  let assemblyFormat = "$dy attr-dict `:` functional-type(operands, results)";
}

def HTP_ClsTokenGradOp : HTP_TrainOp<"cls_token_grad"> {
  let summary = "gradient of htp.cls_token: dy in token 0, zeros elsewhere";
  let description = [{
    `dy` `[B, D]` → `[B, T, D]`; T comes from the result type.

    ```mlir
    %dx = htp.cls_token_grad %dc : (tensor<2x16xf32>) -> tensor<2x50x16xf32>
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$dy);
  let results = (outs HTP_Tensor:$dx);
  let assemblyFormat = "$dy attr-dict `:` functional-type(operands, results)";
}

def HTP_ZerosLikeOp : HTP_TrainOp<"zeros_like", [SameOperandsAndResultType]> {
  let summary = "zeros of its operand's type: the gradient of an unread parameter";
  let description = [{
    A tensor of zeros with the type of `input`, whose values are not part
    of the result. `--htp-grad` returns it as the gradient of a parameter
    the loss does not read, so a model with an unused parameter still gets
    one gradient per parameter.

    ```mlir
    %dw = htp.zeros_like %w : tensor<5x8xf32>
    ```
  }] # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$input);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def HTP_CrossEntropyGradOp : HTP_TrainOp<"cross_entropy_grad"> {
  let summary = "gradient of htp.cross_entropy's loss (d loss = 1) in the logits";
  let description = [{
    `logits`, `targets` and the result are `[B, K]`:
    `(softmax(logits) · Σ_k t_k - t) / B`.

    ```mlir
    %dl = htp.cross_entropy_grad %logits, %t
        : (tensor<2x10xf32>, tensor<2x10xf32>) -> tensor<2x10xf32>
    ```
  }] # HTP_GradDoc # HTP_TrainDoc;
  let arguments = (ins HTP_Tensor:$logits, HTP_Tensor:$targets);
  let results = (outs HTP_Tensor:$dlogits);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` functional-type(operands, results)
  }];
}

#endif // HTP_OPS_TD
