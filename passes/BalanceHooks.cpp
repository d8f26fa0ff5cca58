//===- BalanceHooks.cpp - Hand a split block's work units to the runtime --===//
//
// This file implements the htp-balance-hooks pass, which prepares a block
// that htp-tensor-parallel split for run-time balancing (DESIGN §4): each
// layer's attention gets its pair number, and each MLP column→GELU→row
// chain becomes one htp.mlp over units of `unit_width` neurons. The lowering
// turns both into runtime hooks that compute only the units the current
// SEMI plan gives the rank: kept, imputed, or migrated in from a straggler.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"
#include "runtime/htp_entry.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::htp {
#define GEN_PASS_DEF_HTPBALANCEHOOKS
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// A split MLP: fc1 (column-parallel) → one GELU → fc2 (row-parallel, no
/// bias: its bias follows the all-reduce). The GELU is an htp.gelu, or
/// fc1's own (`gelu`, --htp-fuse-linear-gelu's) with `gelu` null.
struct MLPChain {
  LinearOp fc1;
  GeluOp gelu;
  LinearOp fc2;
  ApproximationAttr approximate;
};

/// True when `value` is a rank's partial sum: its one use is an all-reduce.
bool feedsAllReduce(Value value) {
  // The sum's input, not a residual an all-reduce adds.
  return value.hasOneUse() && isa<AllReduceOp>(value.use_begin()->getOwner()) &&
         value.use_begin()->getOperandNumber() == 0;
}

/// Matches the chain the tensor-parallel pass leaves for an MLP pair (its
/// GELU fused into fc1 or not); nullopt where fc2 ends no such chain. A
/// chain htp.mlp cannot hold whole (a fused residual, a second GELU) is an
/// error: made into htp.mlp it would lose what was fused.
FailureOr<std::optional<MLPChain>> matchMLP(LinearOp fc2) {
  if (fc2.getBias() || !feedsAllReduce(fc2.getResult()) || !fc2.getInput().hasOneUse())
    return std::optional<MLPChain>();
  LinearOp fc1;
  auto gelu = fc2.getInput().getDefiningOp<GeluOp>();
  if (gelu) {
    if (!gelu.getInput().hasOneUse())
      return std::optional<MLPChain>();
    fc1 = gelu.getInput().getDefiningOp<LinearOp>();
  } else {
    fc1 = fc2.getInput().getDefiningOp<LinearOp>();
    if (fc1 && !fc1.getGelu())
      return std::optional<MLPChain>(); // no GELU between them: not an MLP
  }
  if (!fc1)
    return std::optional<MLPChain>();
  if (gelu && fc1.getGelu())
    return fc1.emitOpError() << "applies a GELU (`gelu`) and an htp.gelu follows it: "
                                "--htp-balance-hooks makes an MLP pair of one GELU";
  if (fc2.getGelu())
    return fc2.emitOpError() << "applies a GELU to a rank's partial sum in a split MLP pair: "
                                "--htp-balance-hooks cannot keep it in htp.mlp";
  for (LinearOp linear : {fc1, fc2})
    if (linear.getResidual())
      return linear.emitOpError()
             << "has a fused residual in a split MLP pair: --htp-balance-hooks cannot keep it "
                "in htp.mlp (the residual is added after the pair's all-reduce)";
  return std::optional<MLPChain>(
      MLPChain{fc1, gelu, fc2, gelu ? gelu.getApproximateAttr() : fc1.getGeluAttr()});
}

/// The smallest divisor of `hidden` that is at least min(64, hidden / 8) and
/// leaves at most HTP_ENTRY_MAX_UNITS units. Searches divisor pairs up to
/// sqrt(hidden), so a large prime width (2^31-1 is one) takes 46341 steps,
/// not 2^31.
int64_t automaticUnitWidth(int64_t hidden) {
  int64_t floor = std::max<int64_t>(1, std::min<int64_t>(64, hidden / 8));
  floor = std::max<int64_t>(floor, llvm::divideCeil(hidden, int64_t(HTP_ENTRY_MAX_UNITS)));
  return smallestDivisorAtLeast(hidden, floor);
}

int64_t dimOf(Value value, unsigned dim) {
  return cast<RankedTensorType>(value.getType()).getDimSize(dim);
}

struct BalanceHooksPass : htp::impl::HTPBalanceHooksBase<BalanceHooksPass> {
  using HTPBalanceHooksBase::HTPBalanceHooksBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isDeclaration() || !func->hasAttr(kTPAttrName))
      return; // only split functions have units to balance
    if (func->hasAttr(kBackwardAttrName))
      return; // a backward already written (by hand, or by --htp-grad run first)
    if (mlpUnitWidth < 0) {
      func.emitError() << "--htp-balance-hooks: mlp-unit-width must be >= 0, got "
                       << static_cast<int64_t>(mlpUnitWidth);
      return signalPassFailure();
    }

    // Hooked already: its MLP chains are htp.mlp ops now, its attentions
    // numbered.
    if (!func.getBody().front().getOps<MLPOp>().empty()) {
      func.emitError() << "function @" << func.getSymName()
                       << " already has its balance hooks (htp.mlp pairs); run "
                          "--htp-balance-hooks once";
      return signalPassFailure();
    }

    SmallVector<AttentionOp> attentions;
    SmallVector<MLPChain> mlps;
    for (Operation &op : func.getBody().front()) {
      if (auto attention = dyn_cast<AttentionOp>(op);
          attention && !attention.getProjBias() && feedsAllReduce(attention.getResult())) {
        if (attention.getResidual()) {
          attention.emitOpError() << "has a fused residual in a split layer: a balanced "
                                     "attention's residual is added after its all-reduce";
          return signalPassFailure();
        }
        attentions.push_back(attention);
      }
      if (auto linear = dyn_cast<LinearOp>(op)) {
        FailureOr<std::optional<MLPChain>> chain = matchMLP(linear);
        if (failed(chain))
          return signalPassFailure();
        if (*chain)
          mlps.push_back(**chain);
      }
    }
    if (failed(checkUniform(func, attentions, mlps)))
      return signalPassFailure();
    if (attentions.size() > static_cast<size_t>(HTP_ENTRY_MAX_LAYERS)) {
      func.emitError() << "--htp-balance-hooks: " << attentions.size()
                       << " layers exceed " << HTP_ENTRY_MAX_LAYERS << " (HTP_ENTRY_MAX_LAYERS)";
      return signalPassFailure();
    }

    OpBuilder builder(func.getContext());
    for (auto [layer, attention] : llvm::enumerate(attentions))
      attention.setPairAttr(builder.getI64IntegerAttr(2 * layer));
    for (auto [layer, chain] : llvm::enumerate(mlps)) {
      int64_t hidden = dimOf(chain.fc1.getWeight(), 0);
      int64_t width = mlpUnitWidth ? mlpUnitWidth : automaticUnitWidth(hidden);
      // An uneven split owns whole units of its own width: the hooks' units
      // must be those, or a rank's empty slots would not be whole units.
      if (ShardAttr shard = getArgumentShard(chain.fc1.getWeight()); shard && shard.getUnits()) {
        if (mlpUnitWidth && mlpUnitWidth != shard.getUnit()) {
          chain.fc1.emitOpError() << "was split by shares into MLP units of " << shard.getUnit()
                                  << " neurons, but mlp-unit-width is "
                                  << static_cast<int64_t>(mlpUnitWidth);
          return signalPassFailure();
        }
        width = shard.getUnit();
      }
      if (hidden % width != 0) {
        chain.fc1.emitOpError() << "hidden width (" << hidden
                                << ") is not a multiple of mlp-unit-width (" << width << ")";
        return signalPassFailure();
      }
      builder.setInsertionPoint(chain.fc2);
      auto fused = MLPOp::create(builder, chain.fc2.getLoc(), chain.fc2.getType(),
                                 chain.fc1.getInput(), chain.fc1.getWeight(),
                                 chain.fc2.getWeight(), chain.fc1.getBias(), chain.approximate,
                                 builder.getI64IntegerAttr(width),
                                 builder.getI64IntegerAttr(2 * layer + 1));
      chain.fc2.getResult().replaceAllUsesWith(fused.getResult());
      chain.fc2.erase();
      if (chain.gelu)
        chain.gelu.erase();
      chain.fc1.erase();
    }
  }

  /// The planner takes one unit count per kind: every layer must have one
  /// attention and one MLP pair, all of the same shapes.
  LogicalResult checkUniform(func::FuncOp func, MutableArrayRef<AttentionOp> attentions,
                             MutableArrayRef<MLPChain> mlps) {
    if (attentions.empty() || attentions.size() != mlps.size())
      return func.emitError() << "--htp-balance-hooks needs each layer to have one split "
                                 "attention and one split MLP pair; found "
                              << attentions.size() << " attention(s) and " << mlps.size()
                              << " MLP pair(s)";
    for (AttentionOp attention : attentions.drop_front())
      if (attention.getNumHeads() != attentions.front().getNumHeads() ||
          attention.getHeadDim() != attentions.front().getHeadDim())
        return attention.emitOpError()
               << "has " << attention.getNumHeads() << " heads of " << attention.getHeadDim()
               << " channels per rank, but the first layer has "
               << attentions.front().getNumHeads() << " of " << attentions.front().getHeadDim()
               << "; --htp-balance-hooks needs every layer alike";
    int64_t hidden = dimOf(mlps.front().fc1.getWeight(), 0);
    for (MLPChain &chain : mlps.drop_front())
      if (dimOf(chain.fc1.getWeight(), 0) != hidden)
        return chain.fc1.emitOpError()
               << "has " << dimOf(chain.fc1.getWeight(), 0)
               << " hidden neurons per rank, but the first layer has " << hidden
               << "; --htp-balance-hooks needs every layer alike";
    return success();
  }
};

} // namespace
