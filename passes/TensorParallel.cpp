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
#include "passes/TensorParallel.h"

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"
#include "runtime/htp_entry.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/InterleavedRange.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::htp {
#define GEN_PASS_DEF_HTPTENSORPARALLEL
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// How one argument is split: its dim `dim` is divided into tp slices;
/// uneven ones (shares, or spare room) give rank r units[r] units of `unit`
/// rows or columns (per q, k and v block for qkv), each rank holding room
/// for `room` units: the most any rank owns, plus the spare.
struct Shard {
  int64_t dim;
  ShardLayout layout;
  SmallVector<int64_t> units; ///< empty: even
  int64_t unit = 0;
  int64_t room = 0; ///< units every rank has room for (uneven only)
  bool operator==(const Shard &other) const {
    return dim == other.dim && layout == other.layout && units == other.units &&
           unit == other.unit && room == other.room;
  }
  int64_t blocks() const { return layout == ShardLayout::Qkv ? 3 : 1; }
};

/// The whole units of `total` for each share, in proportion (largest
/// remainder; ties to the lower rank). Exact integer arithmetic: shares
/// and totals are bounded by the caller.
SmallVector<int64_t> apportion(int64_t total, ArrayRef<int64_t> shares) {
  int64_t sum = 0;
  for (int64_t share : shares)
    sum += share;
  SmallVector<int64_t> units;
  SmallVector<std::pair<int64_t, size_t>> remainders; // (remainder, rank)
  int64_t given = 0;
  for (auto [rank, share] : llvm::enumerate(shares)) {
    // total * share fits: total <= 2^31, share <= 2^20.
    units.push_back(total * share / sum);
    given += units.back();
    remainders.push_back({total * share % sum, rank});
  }
  llvm::stable_sort(remainders, [](auto a, auto b) { return a.first > b.first; });
  for (size_t i = 0; given < total; ++i, ++given)
    ++units[remainders[i].second];
  return units;
}

/// The balance hooks' rule on the whole hidden width: the smallest divisor
/// at least min(64, hidden / (8 tp)) (about 8 or more units per rank, each
/// a GEMM of a few dozen columns) that leaves at most
/// HTP_ENTRY_MAX_SHARD_UNITS units, so no rank owns more than a shard holds.
int64_t automaticUnitWidth(int64_t hidden, int64_t tp) {
  int64_t floor = std::max<int64_t>(1, std::min<int64_t>(64, hidden / (8 * tp)));
  floor = std::max<int64_t>(floor, llvm::divideCeil(hidden, int64_t(HTP_ENTRY_MAX_SHARD_UNITS)));
  return smallestDivisorAtLeast(hidden, floor);
}

/// One split function; collects the shards, then rewrites.
class FunctionSplitter {
public:
  FunctionSplitter(func::FuncOp func, int64_t tp, ArrayRef<int64_t> shares,
                   int64_t mlpUnitWidth, int64_t spare)
      : func(func), tp(tp), shares(shares), mlpUnitWidth(mlpUnitWidth), spare(spare),
        builder(func) {}
  LogicalResult run();

private:
  /// Whether shards record units (shares, or spare room beside an even split).
  bool unevenShards() const { return !shares.empty() || spare > 0; }
  FailureOr<SmallVector<int64_t>> ownedUnits(Operation *op, int64_t total, StringRef what);
  FailureOr<int64_t> roomFor(Operation *op, ArrayRef<int64_t> units, int64_t rows,
                             StringRef what);
  LogicalResult shardOperand(Operation *op, unsigned operandIndex, Shard shard, StringRef role);
  void allowShardedUses(Operation *op, ArrayRef<unsigned> operandIndices);
  LogicalResult checkShardedUses();
  Value reduceAndAddBias(Operation *after, Value partial, Value bias, Value residual);
  LogicalResult splitAttention(AttentionOp attention);
  LogicalResult splitMLP(LinearOp column, ArrayRef<GeluOp> activations, LinearOp row);
  void rewriteSignature();

  func::FuncOp func;
  int64_t tp;
  ArrayRef<int64_t> shares; ///< empty: even
  int64_t mlpUnitWidth;
  int64_t spare; ///< percent of the most units any rank owns, 0 to 1000
  OpBuilder builder;
  llvm::MapVector<unsigned, Shard> shards; ///< argument number → shard
  /// The (op, operand) places where a sharded argument may be used.
  llvm::DenseSet<std::pair<Operation *, unsigned>> shardedUses;
};

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
  if (!shard.units.empty()) {
    int64_t total = 0;
    for (int64_t count : shard.units)
      total += count;
    if (size != shard.blocks() * total * shard.unit)
      return op->emitOpError() << "cannot be split by shares: dim " << shard.dim << " of its "
                               << role << " (" << size << ") is not " << shard.blocks() * total
                               << " units of " << shard.unit;
    return success();
  }
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

/// The units of `total` (heads or MLP units) each rank owns: in
/// proportion to the shares, or total / tp each (an even split with spare
/// room; the caller checked that tp divides total); an error naming a rank
/// whose share rounds to none or that would own more than a shard holds.
FailureOr<SmallVector<int64_t>> FunctionSplitter::ownedUnits(Operation *op, int64_t total,
                                                             StringRef what) {
  SmallVector<int64_t> units =
      shares.empty() ? SmallVector<int64_t>(tp, total / tp) : apportion(total, shares);
  for (auto [rank, count] : llvm::enumerate(units)) {
    if (count > HTP_ENTRY_MAX_SHARD_UNITS)
      return op->emitOpError() << "cannot be split "
                               << (shares.empty() ? "with spare room" : "by shares") << ": rank "
                               << rank << " would own " << count << " " << what
                               << ", more than a shard holds ("
                               << int64_t(HTP_ENTRY_MAX_SHARD_UNITS) << ")"
                               << (what == "MLP units" ? "; give a wider mlp-unit-width" : "");
    if (count == 0)
      return op->emitOpError() << "cannot be split by shares=" << llvm::interleaved(shares, ",")
                               << ": rank " << rank << "'s share gets none of the " << total
                               << " " << what << " (each rank needs at least one whole unit)";
  }
  return units;
}

/// The units every rank has room for: the most any rank owns plus spare
/// percent of it, rounded up (exact: the most is <= 2^20 and spare <=
/// 1000). `rows` is the rows or columns the room takes per unit (a qkv
/// shard's three blocks counted). An error when the room is more units than
/// a shard holds or more rows than a dim.
FailureOr<int64_t> FunctionSplitter::roomFor(Operation *op, ArrayRef<int64_t> units,
                                             int64_t rows, StringRef what) {
  const int64_t most = *llvm::max_element(units);
  const int64_t room = most + llvm::divideCeil(most * spare, int64_t(100));
  if (room > HTP_ENTRY_MAX_SHARD_UNITS)
    return op->emitOpError() << "cannot make spare=" << spare << " room: every rank would have "
                             << "room for " << room << " " << what << " (the most any rank owns, "
                             << most << ", and " << spare << "% of it), more than a shard holds ("
                             << int64_t(HTP_ENTRY_MAX_SHARD_UNITS) << ")";
  std::optional<int64_t> extent = llvm::checkedMul(room, rows);
  if (!extent || *extent > HTP_ENTRY_MAX_DIM)
    return op->emitOpError() << "cannot make spare=" << spare << " room: " << room << " " << what
                             << " of " << rows << " rows or columns each overflow a dim (at most "
                             << int64_t(HTP_ENTRY_MAX_DIM) << ")";
  return room;
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

/// all_reduce(partial), then + bias and + residual where there are; returns
/// the final value. (A fused residual cannot be added to a partial sum.)
Value FunctionSplitter::reduceAndAddBias(Operation *after, Value partial, Value bias,
                                         Value residual) {
  builder.setInsertionPointAfter(after);
  Location loc = after->getLoc();
  Value total = AllReduceOp::create(builder, loc, partial.getType(), partial, /*bias=*/Value(),
                                    /*residual=*/Value(), builder.getStringAttr("tp"))
                    .getResult();
  if (bias) // a residual too: one pass over the sum (y = sum + b + r)
    return BiasAddOp::create(builder, loc, total.getType(), total, bias, residual).getResult();
  if (residual)
    total = AddOp::create(builder, loc, total.getType(), total, residual).getResult();
  return total;
}

LogicalResult FunctionSplitter::splitAttention(AttentionOp attention) {
  int64_t heads = attention.getNumHeads(), localHeads = heads / tp;
  if (shares.empty() && heads % tp != 0)
    return attention.emitOpError() << "cannot be split over tp = " << tp << ": num_heads ("
                                   << heads << ") is not divisible by tp";
  SmallVector<int64_t> units;
  const int64_t unit = unevenShards() ? attention.getHeadDim() : 0;
  if (unevenShards()) {
    FailureOr<SmallVector<int64_t>> owned = ownedUnits(attention, heads, "heads");
    if (failed(owned))
      return failure();
    units = std::move(*owned);
    // The qkv rows are the widest extent a head's room takes.
    FailureOr<int64_t> room = roomFor(attention, units, 3 * unit, "heads");
    if (failed(room))
      return failure();
    localHeads = *room;
  }
  const int64_t room = units.empty() ? 0 : localHeads;
  if (failed(shardOperand(attention, 1, {0, ShardLayout::Qkv, units, unit, room},
                          "qkv weight")) ||
      failed(shardOperand(attention, 2, {0, ShardLayout::Qkv, units, unit, room}, "qkv bias")) ||
      failed(shardOperand(attention, 3, {1, ShardLayout::Blocks, units, unit, room},
                          "proj weight")))
    return failure();
  Value bias = attention.getProjBias();
  builder.setInsertionPoint(attention);
  auto local = AttentionOp::create(builder, attention.getLoc(), attention.getType(),
                                   attention.getInput(), attention.getQkvWeight(),
                                   attention.getQkvBias(), attention.getProjWeight(),
                                   /*proj_bias=*/Value(), /*residual=*/Value(),
                                   builder.getI64IntegerAttr(localHeads), /*pair=*/IntegerAttr());
  allowShardedUses(local, {1, 2, 3});
  attention.getResult().replaceAllUsesWith(
      reduceAndAddBias(local, local.getResult(), bias, attention.getResidual()));
  attention.erase();
  return success();
}

LogicalResult FunctionSplitter::splitMLP(LinearOp column, ArrayRef<GeluOp> activations,
                                         LinearOp row) {
  int64_t neurons = cast<RankedTensorType>(column.getWeight().getType()).getDimSize(0);
  int64_t localNeurons = neurons / tp, unit = 0, room = 0;
  if (shares.empty() && neurons % tp != 0)
    return column.emitOpError() << "cannot be split over tp = " << tp << ": out_features ("
                                << neurons << ") of this column-parallel linear is not "
                                << "divisible by tp";
  SmallVector<int64_t> units;
  if (unevenShards()) {
    // Shares cut the whole width into units; an even split's units are
    // those the balance hooks would pick on a rank's width, so spare room
    // changes no unit.
    unit = mlpUnitWidth ? mlpUnitWidth
                        : (shares.empty() ? automaticUnitWidth(neurons / tp, 1)
                                          : automaticUnitWidth(neurons, tp));
    const int64_t width = shares.empty() ? neurons / tp : neurons;
    if (width % unit != 0)
      return column.emitOpError()
             << "cannot be split " << (shares.empty() ? "with spare room" : "by shares") << ": "
             << (shares.empty() ? "a rank's share of out_features (" : "out_features (") << width
             << ") of this column-parallel linear is not a multiple of mlp-unit-width (" << unit
             << ")";
    FailureOr<SmallVector<int64_t>> owned = ownedUnits(column, neurons / unit, "MLP units");
    if (failed(owned))
      return failure();
    units = std::move(*owned);
    FailureOr<int64_t> rooms = roomFor(column, units, unit, "MLP units");
    if (failed(rooms))
      return failure();
    room = *rooms;
    localNeurons = room * unit;
  }
  if (failed(shardOperand(column, 1, {0, ShardLayout::Blocks, units, unit, room}, "weight")) ||
      (column.getBias() &&
       failed(shardOperand(column, 2, {0, ShardLayout::Blocks, units, unit, room}, "bias"))) ||
      failed(shardOperand(row, 1, {1, ShardLayout::Blocks, units, unit, room}, "weight")))
    return failure();
  // The hidden activation keeps this rank's room of neurons.
  auto hidden = cast<RankedTensorType>(column.getType());
  SmallVector<int64_t> shape(hidden.getShape());
  shape.back() = localNeurons;
  auto localHidden = RankedTensorType::get(shape, hidden.getElementType());
  column.getResult().setType(localHidden);
  for (GeluOp gelu : activations)
    gelu.getResult().setType(localHidden);

  Value bias = row.getBias();
  builder.setInsertionPoint(row);
  auto local = LinearOp::create(builder, row.getLoc(), row.getType(), row.getInput(),
                                row.getWeight(), /*bias=*/Value(), /*residual=*/Value(),
                                /*gelu=*/nullptr);
  if (column.getBias())
    allowShardedUses(column, {1, 2});
  else
    allowShardedUses(column, {1});
  allowShardedUses(local, {1});
  row.getResult().replaceAllUsesWith(
      reduceAndAddBias(local, local.getResult(), bias, row.getResidual()));
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
    if (shard.units.empty())
      shape[shard.dim] /= tp;
    else
      shape[shard.dim] = shard.blocks() * shard.room * shard.unit;
    arg.setType(RankedTensorType::get(shape, type.getElementType()));
    func.setArgAttr(index, kShardAttrName,
                    shard.units.empty()
                        ? ShardAttr::get(builder.getContext(), shard.dim, tp, shard.layout)
                        : ShardAttr::get(builder.getContext(), shard.dim, tp, shard.layout,
                                         builder.getDenseI64ArrayAttr(shard.units),
                                         shard.unit));
  }
  func.setFunctionType(builder.getFunctionType(body.getArgumentTypes(),
                                               func.getFunctionType().getResults()));
  func->setAttr(kTPAttrName, builder.getI64IntegerAttr(tp));
}

LogicalResult FunctionSplitter::run() {
  if (func.isDeclaration())
    return success();
  if (func->hasAttr(kTPAttrName))
    return func.emitError() << "function @" << func.getSymName() << " is already split ("
                            << kTPAttrName << " = "
                            << func->getAttr(kTPAttrName) << "); run --htp-tensor-parallel once";
  if (!func.getBody().hasOneBlock())
    return func.emitError("htp functions must be a single block to be split");
  // The split walks the function's own block: an htp op inside a nested
  // region (an scf.if, a loop) would stay whole in a function marked split.
  for (Operation &op : func.getBody().front()) {
    Operation *nested = nullptr;
    for (Region &region : op.getRegions())
      region.walk([&](Operation *inner) {
        if (!nested && isa<HTPDialect>(inner->getDialect()))
          nested = inner;
      });
    if (nested)
      return nested->emitError() << "is inside a nested region (of '" << op.getName()
                                 << "'): --htp-tensor-parallel splits the ops of the "
                                    "function's own block only";
  }

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
    // A column half's result is split: a residual added to it would have to
    // be too (IR written fused stays replicated there).
    if (!column || paired.contains(column) || column.getResidual())
      continue;
    paired.insert(column);
    paired.insert(row);
    pairs.emplace_back(column, std::move(activations), row);
  }

  // A caller would pass the full weights to the one rank's shards: the
  // split is for the functions htp-run enters, which nothing calls.
  if (!attentions.empty() || !pairs.empty())
    if (auto uses = SymbolTable::getSymbolUses(func, func->getParentOp()))
      for (const SymbolTable::SymbolUse &use : *uses) {
        InFlightDiagnostic error =
            use.getUser()->emitError()
            << "refers to @" << func.getSymName()
            << ", which --htp-tensor-parallel splits into one rank's shards (its weights "
               "change shape): split only functions no other function calls, or inline @"
            << func.getSymName() << " into its caller first";
        error.attachNote(func.getLoc()) << "@" << func.getSymName() << " is here";
        return failure();
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
    if (!shares.empty() && static_cast<int64_t>(shares.size()) != tp) {
      getOperation().emitError() << "--htp-tensor-parallel: shares needs one share per rank ("
                                 << static_cast<int64_t>(tp) << "), got " << shares.size();
      return signalPassFailure();
    }
    for (int64_t share : shares)
      if (share < 1 || share > HTP_ENTRY_MAX_SHARD_UNITS) {
        getOperation().emitError() << "--htp-tensor-parallel: each share must be from 1 to "
                                   << int64_t(HTP_ENTRY_MAX_SHARD_UNITS) << ", got " << share;
        return signalPassFailure();
      }
    if (spare < 0 || spare > 1000) {
      getOperation().emitError() << "--htp-tensor-parallel: spare must be from 0 to 1000 "
                                    "(percent of the most units any rank owns), got "
                                 << static_cast<int64_t>(spare);
      return signalPassFailure();
    }
    // Spare room is room in a split; at tp 1 there is none to make.
    if (spare != 0 && tp == 1) {
      getOperation().emitError() << "--htp-tensor-parallel: spare room (spare = "
                                 << static_cast<int64_t>(spare)
                                 << ") is room in a tensor-parallel split: it needs tp >= 2";
      return signalPassFailure();
    }
    if (mlpUnitWidth < 0) {
      getOperation().emitError() << "--htp-tensor-parallel: mlp-unit-width must be >= 0, got "
                                 << static_cast<int64_t>(mlpUnitWidth);
      return signalPassFailure();
    }
    if (tp == 1)
      return;
    SmallVector<int64_t> rankShares(shares.begin(), shares.end());
    bool split = true; // every function's errors are reported
    for (func::FuncOp func : llvm::make_early_inc_range(getOperation().getOps<func::FuncOp>()))
      split &= succeeded(splitForTensorParallel(func, tp, rankShares, mlpUnitWidth, spare));
    if (!split)
      signalPassFailure();
  }
};

} // namespace

std::string mlir::htp::describeArgument(func::FuncOp func, unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(index, kParamAttrName))
    return "argument #" + std::to_string(index) + " ('" + name.getValue().str() + "')";
  return "argument #" + std::to_string(index);
}

LogicalResult mlir::htp::splitForTensorParallel(func::FuncOp func, int64_t tp,
                                                ArrayRef<int64_t> shares, int64_t mlpUnitWidth,
                                                int64_t spare) {
  return FunctionSplitter(func, tp, shares, mlpUnitWidth, spare).run();
}
