//===- FuseLinearGelu.cpp - Fold a linear's GELU into the linear ----------===//
//
// This file implements the htp-fuse-linear-gelu pass, which rewrites
// htp.gelu(htp.linear(x, w, b)), where the GELU is the linear's only reader,
// into htp.linear x, w, b gelu <approximate>: one kernel call instead of two
// and no second pass over the hidden activations (DESIGN §6: bias and GELU
// as matmul post-ops where that is faster; on the CPU the bf16 linear's
// post-op, bench/onednn_postops.c).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::htp {
#define GEN_PASS_DEF_HTPFUSELINEARGELU
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

struct FuseLinearGeluPass : htp::impl::HTPFuseLinearGeluBase<FuseLinearGeluPass> {
  using HTPFuseLinearGeluBase::HTPFuseLinearGeluBase;

  void runOnOperation() override {
    SmallVector<GeluOp> gelus;
    getOperation().walk([&](GeluOp gelu) { gelus.push_back(gelu); });
    for (GeluOp gelu : gelus) {
      auto linear = gelu.getInput().getDefiningOp<LinearOp>();
      // Types match too: a GELU keeps its input's type (SameOperandsAndResultType).
      // A linear with a residual keeps its GELU apart: GELU(x·wᵀ + b + r)
      // has no fused form (the linear takes one epilogue or the other).
      if (!linear || linear.getGelu() || linear.getResidual() ||
          !linear.getResult().hasOneUse())
        continue;
      linear.setGeluAttr(ApproximationAttr::get(&getContext(), gelu.getApproximate()));
      // The linear now computes the GELU's value; it stands where the linear
      // was, before every reader of the GELU.
      gelu.getResult().replaceAllUsesWith(linear.getResult());
      gelu.erase();
    }
  }
};

} // namespace
