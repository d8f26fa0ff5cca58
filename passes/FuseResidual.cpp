//===- FuseResidual.cpp - Fold a residual add into its linear or attention ===//
//
// This file implements the htp-fuse-residual pass, which rewrites
// htp.add(htp.linear(...), r), the linear's result read by the add alone,
// into htp.linear ... residual r (and the same for htp.attention): one
// kernel call whose GEMM epilogue can add r, instead of a second pass over
// the activations (DESIGN §6). A ViT block's attention projection and MLP
// fc2 are the cases; split over tp ranks, their sums' htp.bias_add after
// the all-reduce (y = sum + b + r in one pass).
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
  return nullptr;
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
      else
        cast<BiasAddOp>(target).getResidualMutable().assign(residual);
      // The target now computes the sum; it stands before every reader of it.
      sum.getResult().replaceAllUsesWith(value);
      sum.erase();
    }
  }
};

} // namespace
