//===- TensorParallel.cpp - Megatron split of htp functions over tp ranks -===//
//
// This file implements the htp-tensor-parallel pass, which rewrites a
// function on full shapes into the program one rank runs when the block is
// split over `tp` ranks: attention heads and MLP neurons are divided, each
// row-parallel op yields a partial sum that an htp.all_reduce completes, and
// the row-parallel bias is added once, after it. Parameters become shards
// whose mapping to the global tensor (htp.shard) is all the executor needs
// to slice a checkpoint.
//
// The rewrite keeps the graph's order, so every rank issues the same
// all-reduces in the same order (a mismatch would hang, not fail).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "runtime/htp_entry.h"
#include "llvm/Support/CheckedArithmetic.h"

namespace mlir::htp {
#define GEN_PASS_DEF_HTPTENSORPARALLEL
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// How one argument is split: its dim `dim` is divided into tp slices.
struct Shard {
  int64_t dim;
  ShardLayout layout;
  bool operator==(const Shard &other) const {
    return dim == other.dim && layout == other.layout;
  }
};

/// One split function; collects the shards, then rewrites.
class FunctionSplitter {
public:
  FunctionSplitter(func::FuncOp func, int64_t tp) : func(func), tp(tp), builder(func) {}
  LogicalResult run();

private:
  LogicalResult shardOperand(Operation *op, unsigned operandIndex, Shard shard, StringRef role);
  void allowShardedUses(Operation *op, ArrayRef<unsigned> operandIndices);
  LogicalResult checkShardedUses();
  Value reduceAndAddBias(Operation *after, Value partial, Value bias);
  LogicalResult splitAttention(AttentionOp attention);
  LogicalResult splitMLP(LinearOp column, ArrayRef<GeluOp> activations, LinearOp row);
  void rewriteSignature();

  func::FuncOp func;
  int64_t tp;
  OpBuilder builder;
  llvm::MapVector<unsigned, Shard> shards; ///< argument number → shard
  /// The (op, operand) places where a sharded argument may be used.
  llvm::DenseSet<std::pair<Operation *, unsigned>> shardedUses;
};

/// Names an argument for diagnostics: its htp.param name, or its number.
std::string describeArgument(func::FuncOp func, unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(index, kParamAttrName))
    return "argument #" + std::to_string(index) + " ('" + name.getValue().str() + "')";
  return "argument #" + std::to_string(index);
}

LogicalResult FunctionSplitter::shardOperand(Operation *op, unsigned operandIndex, Shard shard,
                                             StringRef role) {
  auto arg = dyn_cast<BlockArgument>(op->getOperand(operandIndex));
  if (!arg || arg.getOwner()->getParentOp() != func)
    return op->emitOpError() << "cannot be split over tp = " << tp << ": its " << role
                             << " is computed, not a function argument (a parameter)";
  auto [it, inserted] = shards.insert({arg.getArgNumber(), shard});
  if (!inserted && !(it->second == shard))
    return op->emitOpError() << "cannot be split over tp = " << tp << ": its " << role << ", "
                             << describeArgument(func, arg.getArgNumber())
                             << ", is split differently by another op";
  int64_t size = cast<RankedTensorType>(arg.getType()).getDimSize(shard.dim);
  // tp is bounded by HTP_ENTRY_MAX_TP in runOnOperation; checked all the same.
  std::optional<int64_t> parts = shard.layout == ShardLayout::Qkv ? llvm::checkedMul<int64_t>(3, tp)
                                                        : std::optional<int64_t>(tp);
  if (!parts)
    return op->emitOpError() << "cannot be split over tp = " << tp << ": 3*tp overflows int64";
  if (size % *parts != 0)
    return op->emitOpError() << "cannot be split over tp = " << tp << ": dim " << shard.dim
                             << " of its " << role << " (" << size << ") is not divisible by "
                             << *parts;
  return success();
}

/// Records that `op` reads its operands `operandIndices` as shards.
void FunctionSplitter::allowShardedUses(Operation *op, ArrayRef<unsigned> operandIndices) {
  for (unsigned index : operandIndices)
    shardedUses.insert({op, index});
}

LogicalResult FunctionSplitter::checkShardedUses() {
  for (auto &[index, shard] : shards)
    for (OpOperand &use : func.getArgument(index).getUses())
      if (!shardedUses.contains({use.getOwner(), use.getOperandNumber()}))
        return use.getOwner()->emitOpError()
               << "uses " << describeArgument(func, index)
               << " whole, but tp = " << tp
               << " splits it for another op; give each op its own parameter";
  return success();
}

/// all_reduce(partial), then + bias if there is one; returns the final value.
Value FunctionSplitter::reduceAndAddBias(Operation *after, Value partial, Value bias) {
  builder.setInsertionPointAfter(after);
  Location loc = after->getLoc();
  Value total = AllReduceOp::create(builder, loc, partial.getType(), partial,
                                    builder.getStringAttr("tp"))
                    .getResult();
  if (!bias)
    return total;
  return BiasAddOp::create(builder, loc, total.getType(), total, bias).getResult();
}

LogicalResult FunctionSplitter::splitAttention(AttentionOp attention) {
  int64_t heads = attention.getNumHeads();
  if (heads % tp != 0)
    return attention.emitOpError() << "cannot be split over tp = " << tp << ": num_heads ("
                                   << heads << ") is not divisible by tp";
  if (failed(shardOperand(attention, 1, {0, ShardLayout::Qkv}, "qkv weight")) ||
      failed(shardOperand(attention, 2, {0, ShardLayout::Qkv}, "qkv bias")) ||
      failed(shardOperand(attention, 3, {1, ShardLayout::Blocks}, "proj weight")))
    return failure();
  Value bias = attention.getProjBias();
  builder.setInsertionPoint(attention);
  auto local = AttentionOp::create(builder, attention.getLoc(), attention.getType(),
                                   attention.getInput(), attention.getQkvWeight(),
                                   attention.getQkvBias(), attention.getProjWeight(),
                                   /*proj_bias=*/Value(), builder.getI64IntegerAttr(heads / tp),
                                   /*pair=*/IntegerAttr());
  allowShardedUses(local, {1, 2, 3});
  attention.getResult().replaceAllUsesWith(reduceAndAddBias(local, local.getResult(), bias));
  attention.erase();
  return success();
}

LogicalResult FunctionSplitter::splitMLP(LinearOp column, ArrayRef<GeluOp> activations,
                                         LinearOp row) {
  int64_t neurons = cast<RankedTensorType>(column.getWeight().getType()).getDimSize(0);
  if (neurons % tp != 0)
    return column.emitOpError() << "cannot be split over tp = " << tp << ": out_features ("
                                << neurons << ") of this column-parallel linear is not "
                                << "divisible by tp";
  if (failed(shardOperand(column, 1, {0, ShardLayout::Blocks}, "weight")) ||
      (column.getBias() && failed(shardOperand(column, 2, {0, ShardLayout::Blocks}, "bias"))) ||
      failed(shardOperand(row, 1, {1, ShardLayout::Blocks}, "weight")))
    return failure();
  // The hidden activation keeps neurons / tp columns on this rank.
  auto hidden = cast<RankedTensorType>(column.getType());
  SmallVector<int64_t> shape(hidden.getShape());
  shape.back() /= tp;
  auto localHidden = RankedTensorType::get(shape, hidden.getElementType());
  column.getResult().setType(localHidden);
  for (GeluOp gelu : activations)
    gelu.getResult().setType(localHidden);

  Value bias = row.getBias();
  builder.setInsertionPoint(row);
  auto local = LinearOp::create(builder, row.getLoc(), row.getType(), row.getInput(),
                                row.getWeight(), /*bias=*/Value(), /*gelu=*/nullptr);
  if (column.getBias())
    allowShardedUses(column, {1, 2});
  else
    allowShardedUses(column, {1});
  allowShardedUses(local, {1});
  row.getResult().replaceAllUsesWith(reduceAndAddBias(local, local.getResult(), bias));
  row.erase();
  return success();
}

/// If `row` reads a linear through single-use GELUs only, returns that
/// linear (the column-parallel half) and the GELUs between them.
LinearOp findColumnPartner(LinearOp row, SmallVectorImpl<GeluOp> &activations) {
  Value input = row.getInput();
  while (true) {
    if (!input.hasOneUse())
      return nullptr;
    Operation *producer = input.getDefiningOp();
    if (auto gelu = dyn_cast_or_null<GeluOp>(producer)) {
      activations.push_back(gelu);
      input = gelu.getInput();
      continue;
    }
    return dyn_cast_or_null<LinearOp>(producer);
  }
}

void FunctionSplitter::rewriteSignature() {
  Block &body = func.getBody().front();
  for (auto &[index, shard] : shards) {
    BlockArgument arg = body.getArgument(index);
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[shard.dim] /= tp;
    arg.setType(RankedTensorType::get(shape, type.getElementType()));
    func.setArgAttr(index, kShardAttrName,
                    ShardAttr::get(builder.getContext(), shard.dim, tp, shard.layout));
  }
  func.setFunctionType(builder.getFunctionType(body.getArgumentTypes(),
                                               func.getFunctionType().getResults()));
  func->setAttr(kTPAttrName, builder.getI64IntegerAttr(tp));
}

LogicalResult FunctionSplitter::run() {
  if (func.isDeclaration())
    return success();
  if (func->hasAttr(kTPAttrName))
    return func.emitError() << "is already split (" << kTPAttrName << " = "
                            << func->getAttr(kTPAttrName) << "); run --htp-tensor-parallel once";
  if (!func.getBody().hasOneBlock())
    return func.emitError("htp functions must be a single block to be split");

  // Collect first (the rewrite erases ops), in program order.
  SmallVector<AttentionOp> attentions;
  SmallVector<std::tuple<LinearOp, SmallVector<GeluOp>, LinearOp>> pairs;
  llvm::DenseSet<Operation *> paired;
  for (Operation &op : func.getBody().front()) {
    if (auto attention = dyn_cast<AttentionOp>(op))
      attentions.push_back(attention);
    auto row = dyn_cast<LinearOp>(op);
    // A fused GELU cannot follow a partial sum: such a linear is no row half
    // (--htp-fuse-linear-gelu runs after this pass; IR written fused stays
    // replicated there).
    if (!row || paired.contains(row) || row.getGelu())
      continue;
    SmallVector<GeluOp> activations;
    LinearOp column = findColumnPartner(row, activations);
    if (!column || paired.contains(column))
      continue;
    paired.insert(column);
    paired.insert(row);
    pairs.emplace_back(column, std::move(activations), row);
  }

  for (AttentionOp attention : attentions)
    if (failed(splitAttention(attention)))
      return failure();
  for (auto &[column, activations, row] : pairs)
    if (failed(splitMLP(column, activations, row)))
      return failure();
  if (failed(checkShardedUses()))
    return failure();
  rewriteSignature();
  return success();
}

struct TensorParallelPass : htp::impl::HTPTensorParallelBase<TensorParallelPass> {
  using HTPTensorParallelBase::HTPTensorParallelBase;

  void runOnOperation() override {
    // The bound keeps 3 * tp and the shard products far from overflow and
    // matches what the runtime will create ranks for.
    if (tp < 1 || tp > HTP_ENTRY_MAX_TP) {
      getOperation().emitError() << "--htp-tensor-parallel: tp must be from 1 to "
                                 << int64_t(HTP_ENTRY_MAX_TP) << " (HTP_ENTRY_MAX_TP), got " << static_cast<int64_t>(tp);
      return signalPassFailure();
    }
    if (tp == 1)
      return;
    if (failed(FunctionSplitter(getOperation(), tp).run()))
      signalPassFailure();
  }
};

} // namespace
