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
    bind without renaming; data inputs may carry `{htp.input = "x"}`.

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
  }];
  let cppNamespace = "::mlir::htp";
  let hasRegionArgAttrVerify = 1;
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

def HTP_LinearOp : HTP_Op<"linear"> {
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
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$weight,
                       Optional<HTP_Tensor>:$bias);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def HTP_AttentionOp : HTP_Op<"attention"> {
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
    num_heads is at most 2^24 (HTP_ENTRY_MAX_UNITS) and pair below 2^21.

    ```mlir
    %y = htp.attention %x, %wqkv, %bqkv, %wproj, %bproj {num_heads = 12 : i64}
        : (tensor<8x197x768xf32>, tensor<2304x768xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>) -> tensor<8x197x768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$qkv_weight,
                       HTP_Tensor:$qkv_bias, HTP_Tensor:$proj_weight,
                       Optional<HTP_Tensor>:$proj_bias,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$pair);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $qkv_weight `,` $qkv_bias `,` $proj_weight (`,` $proj_bias^)?
    attr-dict `:` functional-type(operands, results)
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
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$weight, HTP_Tensor:$bias,
                       DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon);
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
    2^24 units per rank (HTP_ENTRY_MAX_UNITS) and pair below 2^21.

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

def HTP_BiasAddOp : HTP_Op<"bias_add", [AllTypesMatch<["input", "result"]>]> {
  let summary = "adds a [dim] bias to every row of a tensor";
  let description = [{
    `bias` is 1-D and matches the input's last dim. The tensor-parallel pass
    puts it after an `htp.all_reduce`, so a row-parallel layer's bias is
    added once, not once per rank.

    ```mlir
    %y = htp.bias_add %x, %b : tensor<8x197x768xf32>, tensor<768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input, HTP_Tensor:$bias);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = "$input `,` $bias attr-dict `:` type($input) `,` type($bias)";
}

def HTP_AllReduceOp : HTP_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "sum over the tensor-parallel group";
  let description = [{
    Produced by the tensor-parallel pass after each row-parallel linear: every
    rank contributes its partial sum and receives the total. `group` names the
    communicator (`"tp"` by default). A bf16 sum is accumulated in f32 and
    rounded once.

    ```mlir
    %y = htp.all_reduce %partial {group = "tp"} : tensor<8x197x768xf32>
    ```
  }] # HTP_LimitsDoc;
  let arguments = (ins HTP_Tensor:$input,
                       DefaultValuedAttr<StrAttr, "\"tp\"">:$group);
  let results = (outs HTP_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

#endif // HTP_OPS_TD
