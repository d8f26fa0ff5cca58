//===- FuseResidual.cpp - Fold a residual add into its linear or attention ===//
//
// This file implements the htp-fuse-residual pass, which rewrites
// htp.add(htp.linear(...), r), the linear's result read by the add alone,
// into htp.linear ... residual r (and the same for htp.attention): one
// kernel call whose GEMM epilogue can add r, instead of a second pass over
// the activations (DESIGN §6). A ViT block's attention projection and MLP
// fc2 are the cases; split over tp ranks, their sums' htp.bias_add after
// the all-reduce (y = sum + b + r in one pass). That bias add (with its
// residual, or a residual add alone) then folds into the all-reduce itself
// (htp.all_reduce ... bias b residual r), so that ranks sharing a device add
// them to the part of the sum each takes instead of each passing over the
// whole sum again. A layer norm that reads an all-reduce's sum folds in
// last (htp.all_reduce_norm: the sum and its norm), so that they normalise
// those rows there too. A norm of a split function's data input, which no
// all-reduce feeds (a block's first), takes the group: its ranks share its
// rows as well (htp_group_layer_norm_*).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dominance.h"

namespace mlir::htp {
#define GEN_PASS_DEF_HTPFUSERESIDUAL
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// The op `sum` can fold into when `value` is its operand and `residual` the
/// other: a linear (without a GELU), an unbalanced attention (no pair) or a
/// bias add, read by the add alone, without a residual yet, `residual`
/// available where it runs. Null when none.
Operation *foldTarget(DominanceInfo &dominance, Value value, Value residual) {
  Operation *producer = value.getDefiningOp();
  if (!producer || !value.hasOneUse() || !dominance.properlyDominates(residual, producer))
    return nullptr;
  if (auto linear = dyn_cast<LinearOp>(producer))
    return linear.getGelu() || linear.getResidual() ? nullptr : producer;
  if (auto attention = dyn_cast<AttentionOp>(producer))
    return attention.getPair() || attention.getResidual() ? nullptr : producer;
  if (auto biasAdd = dyn_cast<BiasAddOp>(producer))
    return biasAdd.getResidual() ? nullptr : producer;
  if (auto reduce = dyn_cast<AllReduceOp>(producer)) // rows of a last dim: rank >= 1
    return reduce.getResidual() || reduce.getType().getRank() < 1 ? nullptr : producer;
  return nullptr;
}

/// Folds `biasAdd` into the all-reduce that feeds it when the sum is read by
/// the bias add alone and the bias (and residual) are available where the
/// all-reduce runs.
void foldIntoAllReduce(DominanceInfo &dominance, BiasAddOp biasAdd) {
  auto reduce = biasAdd.getInput().getDefiningOp<AllReduceOp>();
  if (!reduce || !reduce.getResult().hasOneUse() || reduce.getBias() || reduce.getResidual())
    return;
  Value bias = biasAdd.getBias(), residual = biasAdd.getResidual();
  if (!dominance.properlyDominates(bias, reduce) ||
      (residual && !dominance.properlyDominates(residual, reduce)))
    return;
  reduce.getBiasMutable().assign(bias);
  if (residual)
    reduce.getResidualMutable().assign(residual);
  biasAdd.getResult().replaceAllUsesWith(reduce.getResult());
  biasAdd.erase();
}

/// Folds `norm` into the all-reduce whose sum it reads (any other readers
/// of the sum read the new op's `sum`) when its weight and bias are
/// available where the all-reduce runs: htp.all_reduce_norm.
void foldNormIntoAllReduce(DominanceInfo &dominance, LayerNormOp norm) {
  auto reduce = norm.getInput().getDefiningOp<AllReduceOp>();
  if (!reduce || !dominance.properlyDominates(norm.getWeight(), reduce) ||
      !dominance.properlyDominates(norm.getBias(), reduce))
    return;
  OpBuilder builder(reduce);
  auto fused = AllReduceNormOp::create(
      builder, reduce.getLoc(), reduce.getType(), reduce.getType(), reduce.getInput(),
      norm.getWeight(), norm.getBias(), reduce.getBias(), reduce.getResidual(),
      norm.getEpsilonAttr(), reduce.getGroupAttr());
  norm.getResult().replaceAllUsesWith(fused.getNormed());
  norm.erase();
  reduce.getResult().replaceAllUsesWith(fused.getSum());
  reduce.erase();
}

/// The group of the function's all-reduces when it is split over ranks
/// (all of one group), else none.
std::optional<StringRef> splitGroup(func::FuncOp function) {
  std::optional<StringRef> group;
  bool mixed = false;
  function.walk([&](Operation *op) {
    StringRef name;
    if (auto reduce = dyn_cast<AllReduceOp>(op))
      name = reduce.getGroup();
    else if (auto reduce = dyn_cast<AllReduceNormOp>(op))
      name = reduce.getGroup();
    else
      return;
    mixed |= group && *group != name;
    group = name;
  });
  return mixed ? std::nullopt : group;
}

/// Marks a norm of the split function's data input (an `htp.input`
/// argument: every rank holds it alike) as its group's: the ranks then
/// share its rows (a block's first norm, which no all-reduce feeds).
void shareInputNorm(func::FuncOp function, StringRef group, LayerNormOp norm) {
  auto argument = dyn_cast<BlockArgument>(norm.getInput());
  if (norm.getGroup() || !argument || argument.getOwner() != &function.getBody().front() ||
      !function.getArgAttr(argument.getArgNumber(), "htp.input"))
    return;
  norm.setGroup(group);
}

struct FuseResidualPass : htp::impl::HTPFuseResidualBase<FuseResidualPass> {
  using HTPFuseResidualBase::HTPFuseResidualBase;

  void runOnOperation() override {
    SmallVector<AddOp> sums;
    getOperation().walk([&](AddOp sum) { sums.push_back(sum); });
    DominanceInfo &dominance = getAnalysis<DominanceInfo>();
    for (AddOp sum : sums) {
      // Types match: htp.add has one type for its operands and result.
      Value value = sum.getLhs(), residual = sum.getRhs();
      Operation *target = foldTarget(dominance, value, residual);
      if (!target) {
        std::swap(value, residual);
        target = foldTarget(dominance, value, residual);
      }
      if (!target)
        continue;
      if (auto linear = dyn_cast<LinearOp>(target))
        linear.getResidualMutable().assign(residual);
      else if (auto attention = dyn_cast<AttentionOp>(target))
        attention.getResidualMutable().assign(residual);
      else if (auto biasAdd = dyn_cast<BiasAddOp>(target))
        biasAdd.getResidualMutable().assign(residual);
      else
        cast<AllReduceOp>(target).getResidualMutable().assign(residual);
      // The target now computes the sum; it stands before every reader of it.
      sum.getResult().replaceAllUsesWith(value);
      sum.erase();
    }
    SmallVector<BiasAddOp> biasAdds;
    getOperation().walk([&](BiasAddOp biasAdd) { biasAdds.push_back(biasAdd); });
    for (BiasAddOp biasAdd : biasAdds)
      foldIntoAllReduce(dominance, biasAdd);
    SmallVector<LayerNormOp> norms;
    getOperation().walk([&](LayerNormOp norm) { norms.push_back(norm); });
    for (LayerNormOp norm : norms)
      foldNormIntoAllReduce(dominance, norm);
    if (std::optional<StringRef> group = splitGroup(getOperation()))
      getOperation().walk([&](LayerNormOp norm) { shareInputNorm(getOperation(), *group, norm); });
  }
};

} // namespace
