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

    Uneven shards (`--htp-tensor-parallel` with `shares`) add
    `units = array<i64: 4, 4, 3, 1>, unit = 64`: along `dim` (per block for
    qkv) the global tensor is sum(units) units of `unit` rows or columns,
    rank r owns units[r] of them, consecutive and in rank order, and every
    rank's argument has room for the same number of units, at least
    max(units) (more with `spare`): rank r's first units[r] units are its
    own, the rest are empty slots (zeros, contributing nothing).

    On its own the attribute needs 0 <= dim < 8, 1 <= parts <= 1024
    (HTP_ENTRY_MAX_TP), and with `units` one count per part, each from 1 to
    2^20, and `unit` >= 1. Where it is attached the dialect also checks that
    dim is below the argument's rank, that the global shape (dim × parts,
    or sum(units) × unit) stays within the tensor limits, that a qkv shard's
    rows divide by 3, that an uneven shard's dim is room × unit (× 3 for
    qkv) for a whole room from max(units) to 2^20 units, and that parts
    equals the function's `htp.tp` when it has one.
  }];
  let parameters = (ins "int64_t":$dim, "int64_t":$parts,
                        EnumParameter<HTP_ShardLayout>:$layout,
                        OptionalParameter<"::mlir::DenseI64ArrayAttr">:$units,
                        DefaultValuedParameter<"int64_t", "0">:$unit);
  let assemblyFormat = "`<` struct(params) `>`";
  let builders = [
    AttrBuilder<(ins "int64_t":$dim, "int64_t":$parts, "ShardLayout":$layout), [{
      return $_get($_ctxt, dim, parts, layout, ::mlir::DenseI64ArrayAttr(), 0);
    }]>
  ];
  let genVerifyDecl = 1;
}

#endif // HTP_ATTRS_TD
