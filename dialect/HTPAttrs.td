//===- HTPAttrs.td - The htp dialect's attributes ------------*- tablegen -*-===//
//
// The enums and attributes of the htp dialect: how a GELU is computed, and
// how a sharded function argument is cut out of its global tensor. Included
// by HTPOps.td (the dialect is defined there).
//
//===----------------------------------------------------------------------===//

#ifndef HTP_ATTRS_TD
#define HTP_ATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def HTP_Approximation : I32EnumAttr<"Approximation", "how GELU is computed", [
    I32EnumAttrCase<"None", 0, "none">, // x·Φ(x) with erf
    I32EnumAttrCase<"Tanh", 1, "tanh">  // PyTorch's approximate="tanh"
  ]> {
  let cppNamespace = "::mlir::htp";
  let genSpecializedAttr = 0;
}

/// `#htp<approximate tanh>`; in htp.gelu and htp.mlp written `approximate tanh`.
def HTP_ApproximationAttr : EnumAttr<HTP_Dialect, HTP_Approximation, "approximate"> {
  let summary = "GELU approximation: none (erf) or tanh";
}

def HTP_ShardLayout : I32EnumAttr<"ShardLayout", "how a shard is cut from its global tensor", [
    I32EnumAttrCase<"Blocks", 0, "blocks">, // slice r of dim `dim`
    I32EnumAttrCase<"Qkv", 1, "qkv">        // dim 0 is q | k | v: slice r of each
  ]> {
  let cppNamespace = "::mlir::htp";
  let genSpecializedAttr = 0;
}

def HTP_ShardAttr : AttrDef<HTP_Dialect, "Shard"> {
  let mnemonic = "shard";
  let summary = "the slice of a global tensor that a function argument holds";
  let description = [{
    Put on a function argument by `--htp-tensor-parallel` as
    `htp.shard = #htp.shard<dim = 1, parts = 2, layout = blocks>`: the
    global tensor's dim `dim` is `parts` times the argument's, and rank r
    holds slice r of it. With `layout = qkv` (only on dim 0) the global dim
    0 is the q, k and v blocks one after the other, and rank r holds slice r
    of each of the three, in that order.

    On its own the attribute needs 0 <= dim < 8 and 1 <= parts <= 1024
    (HTP_ENTRY_MAX_TP). Where it is attached the dialect also checks that
    dim is below the argument's rank, that the global shape (dim × parts)
    stays within the tensor limits, that a qkv shard's rows divide by 3, and
    that parts equals the function's `htp.tp` when it has one.
  }];
  let parameters = (ins "int64_t":$dim, "int64_t":$parts,
                        EnumParameter<HTP_ShardLayout>:$layout);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // HTP_ATTRS_TD
