//===- ShardInterop.cpp - Reading and writing upstream shard annotations --===//
//
// This file implements the htp-import-shard and htp-export-shard passes,
// which translate between HTP's split (htp.shard on the arguments of a
// function --htp-tensor-parallel rewrote) and the upstream `shard` dialect's
// annotations of function arguments (`shard.grid`, `shard.sharding`,
// `shard.shard`), for the weights of linears and attentions.
//
// The two do not describe the same set of partitions (DESIGN §12): a
// shard.sharding cuts a tensor dim into contiguous blocks, one per device of
// a grid, while HTP's split cuts whole units (heads, MLP units) in one ratio
// for the whole function, and its qkv weight is strided (rank r takes its
// heads from each of the q, k and v blocks). The import therefore does not
// rewrite anything itself: it reads tp and the shares off the annotations,
// runs the split (splitForTensorParallel, the one copy of the head, unit and
// apportionment rules) and then checks that every annotation states exactly
// what the split made, refusing the ones it cannot honour. The export states
// each blocks shard the split made as the sharding of its global tensor; a
// qkv shard has no such statement and gets a remark instead.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/TensorParallel.h"

#include "dialect/HTPDialect.h"
#include "dialect/HTPOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "runtime/htp_entry.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/InterleavedRange.h"

#include <map>
#include <numeric>
#include <optional>

namespace mlir::htp {
#define GEN_PASS_DEF_HTPIMPORTSHARD
#define GEN_PASS_DEF_HTPEXPORTSHARD
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// The global rows (dim 0) or columns (dim 1) each rank owns of a blocks
/// shard whose rank-local type is `local`: tp + 1 offsets, rank r owning
/// [offsets[r], offsets[r+1]). Uneven shards own fewer rows than their room.
SmallVector<int64_t> globalOffsets(ShardAttr shard, RankedTensorType local) {
  SmallVector<int64_t> offsets = {0};
  for (int64_t rank = 0; rank < shard.getParts(); ++rank) {
    int64_t owned = shard.getUnits() ? shard.getUnits()[rank] * shard.getUnit()
                                     : local.getDimSize(shard.getDim());
    offsets.push_back(offsets.back() + owned);
  }
  return offsets;
}

/// The split axes of a sharding of tensor dim `dim` over axis 0 of a 1-D
/// grid: [[0]] for dim 0, [[], [0]] for dim 1.
SmallVector<shard::GridAxesAttr> splitAxesOf(MLIRContext *context, int64_t dim) {
  SmallVector<shard::GridAxesAttr> axes(dim, shard::GridAxesAttr::get(context, {}));
  axes.push_back(shard::GridAxesAttr::get(context, {shard::GridAxis(0)}));
  return axes;
}

//===----------------------------------------------------------------------===//
// Import
//===----------------------------------------------------------------------===//

/// What one function argument's shard annotation states.
struct Annotation {
  Location shardLoc;            ///< the shard.shard: where errors of fit go
  int64_t gridSize = 0;         ///< devices of its 1-D grid
  std::optional<int64_t> dim;   ///< the split tensor dim; none: replicated
  SmallVector<int64_t> offsets; ///< sharded_dims_offsets; empty: even
  bool sameAs(const Annotation &other) const {
    return gridSize == other.gridSize && dim == other.dim && offsets == other.offsets;
  }
};

/// The global size of dim `dim` of argument `index`: its own, or on an
/// argument the split made a shard, the global tensor's.
int64_t globalDimSize(func::FuncOp func, unsigned index, int64_t dim) {
  auto local = cast<RankedTensorType>(func.getArgument(index).getType());
  auto shard = func.getArgAttrOfType<ShardAttr>(index, kShardAttrName);
  if (shard && shard.getDim() == dim && shard.getLayout() == ShardLayout::Blocks)
    return globalOffsets(shard, local).back();
  return local.getDimSize(dim);
}

/// Reads the shard.sharding of `annotation` (of argument `index`) as HTP can
/// take it: a 1-D grid of static size, at most one split tensor dim, static
/// offsets that cover the dim, no halos. Equidistant offsets are the even
/// split (as upstream's canonicalizer has it).
FailureOr<Annotation> readAnnotation(shard::ShardOp annotation, func::FuncOp func,
                                     unsigned index) {
  auto sharding = annotation.getSharding().getDefiningOp<shard::ShardingOp>();
  if (!sharding)
    return annotation.emitError()
           << "cannot be imported: its sharding is not made by a shard.sharding in this function";
  auto grid = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(sharding, sharding.getGridAttr());
  if (!grid)
    return sharding.emitError() << "cannot be imported: no shard.grid " << sharding.getGridAttr();
  if (grid.getRank() != 1 || ShapedType::isDynamic(grid.getShape()[0]))
    return sharding.emitError() << "cannot be imported: grid " << sharding.getGridAttr() << " has "
                                << grid.getRank()
                                << " axes or a dynamic size; HTP's tensor parallelism is "
                                   "one axis of a static number of ranks (shape = tp)";
  if (!sharding.getStaticHaloSizes().empty() || !sharding.getDynamicHaloSizes().empty())
    return sharding.emitError() << "cannot be imported: halo_sizes; HTP's shards do not overlap";
  if (!sharding.getDynamicShardedDimsOffsets().empty())
    return sharding.emitError()
           << "cannot be imported: dynamic sharded_dims_offsets; HTP splits at compile time";

  Annotation result{annotation.getLoc(), grid.getShape()[0], std::nullopt, {}};
  for (auto [dim, axes] : llvm::enumerate(sharding.getSplitAxes().getAxes())) {
    if (axes.empty())
      continue;
    if (result.dim)
      return sharding.emitError() << "cannot be imported: it splits more than one tensor dim; "
                                     "HTP splits a weight along one";
    if (axes.size() != 1 || axes[0] != 0)
      return sharding.emitError() << "cannot be imported: it splits dim " << dim
                                  << " over grid axes [" << llvm::interleaved(axes.asArrayRef(), ", ")
                                  << "]; the grid has one axis, 0";
    result.dim = dim;
  }
  auto type = cast<RankedTensorType>(annotation.getSrc().getType());
  if (result.dim && *result.dim >= type.getRank())
    return annotation.emitError() << "cannot be imported: its sharding splits dim " << *result.dim
                                  << " of a rank-" << type.getRank() << " tensor";
  ArrayRef<int64_t> offsets = sharding.getStaticShardedDimsOffsets();
  if (offsets.empty())
    return result;
  if (!result.dim)
    return sharding.emitError() << "cannot be imported: sharded_dims_offsets without a split dim";
  int64_t size = globalDimSize(func, index, *result.dim);
  if (static_cast<int64_t>(offsets.size()) != result.gridSize + 1 || offsets.front() != 0 ||
      offsets.back() != size)
    return annotation.emitError() << "cannot be imported: sharded_dims_offsets = ["
                                  << llvm::interleaved(offsets, ", ") << "] do not cover dim "
                                  << *result.dim << " (" << size << "): " << result.gridSize
                                  << " ranks need " << result.gridSize + 1
                                  << " offsets from 0 to " << size;
  bool equidistant = true;
  for (size_t i = 1; i < offsets.size(); ++i)
    equidistant &= offsets[i] - offsets[i - 1] == offsets[1] - offsets[0];
  if (!equidistant)
    result.offsets.assign(offsets.begin(), offsets.end());
  return result;
}

/// One function's import: read, strip, split, compare.
class FunctionImporter {
public:
  FunctionImporter(func::FuncOp func, int64_t tpOption, int64_t mlpUnitWidth)
      : func(func), tpOption(tpOption), mlpUnitWidth(mlpUnitWidth) {}
  /// Imports the function; the grids its annotations named go to `grids`.
  LogicalResult run(llvm::SetVector<Attribute> &grids);

private:
  LogicalResult collect(llvm::SetVector<Attribute> &grids);
  void strip();
  LogicalResult checkRoles();
  FailureOr<int64_t> deriveTP();
  FailureOr<SmallVector<int64_t>> deriveShares();
  LogicalResult compare(ArrayRef<int64_t> shares);

  func::FuncOp func;
  int64_t tpOption, mlpUnitWidth;
  std::map<unsigned, Annotation> annotations; ///< argument number → what it states
  SmallVector<shard::ShardOp> shardOps;
  unsigned sharesFrom = 0; ///< the argument the shares were read from
};

LogicalResult FunctionImporter::collect(llvm::SetVector<Attribute> &grids) {
  func.walk([&](shard::ShardOp op) { shardOps.push_back(op); });
  for (shard::ShardOp op : shardOps) {
    // upstream chains annotations (`shard.shard %a to %s` then the result
    // again `annotate_for_users`): every link states the root's sharding.
    Value root = op.getSrc();
    while (auto inner = root.getDefiningOp<shard::ShardOp>())
      root = inner.getSrc();
    auto arg = dyn_cast<BlockArgument>(root);
    if (!arg || arg.getOwner() != &func.getBody().front())
      return op.emitError() << "cannot be imported: it annotates a value the function computes; "
                               "HTP reads the shardings of function arguments (weights) only";
    FailureOr<Annotation> annotation = readAnnotation(op, func, arg.getArgNumber());
    if (failed(annotation))
      return failure();
    if (auto sharding = op.getSharding().getDefiningOp<shard::ShardingOp>())
      grids.insert(sharding.getGridAttr());
    auto [it, inserted] = annotations.insert({arg.getArgNumber(), *annotation});
    if (!inserted && !it->second.sameAs(*annotation))
      return op.emitError() << "cannot be imported: "
                            << describeArgument(func, arg.getArgNumber())
                            << " has another, different sharding";
  }
  return success();
}

/// Drops the annotations: the htp ops read the arguments again, as the split
/// expects (a shard.shard use would be a use outside the split's ops).
void FunctionImporter::strip() {
  llvm::SetVector<Operation *> shardings; // a sharding may serve several
  for (shard::ShardOp op : llvm::reverse(shardOps)) {
    if (Operation *sharding = op.getSharding().getDefiningOp())
      shardings.insert(sharding);
    op.getResult().replaceAllUsesWith(op.getSrc());
    op.erase();
  }
  for (Operation *sharding : shardings)
    if (sharding->use_empty())
      sharding->erase();
}

/// A qkv weight or bias cannot carry a shard.sharding: Megatron's qkv split
/// is strided and a sharding's blocks are contiguous (DESIGN §12).
LogicalResult FunctionImporter::checkRoles() {
  for (auto &[index, annotation] : annotations)
    for (OpOperand &use : func.getArgument(index).getUses())
      if (isa<AttentionOp>(use.getOwner()) &&
          (use.getOperandNumber() == 1 || use.getOperandNumber() == 2))
        return emitError(annotation.shardLoc)
               << "cannot be imported: " << describeArgument(func, index)
               << " is a qkv weight or bias, whose split is strided (rank r takes its heads' "
                  "rows of each of the q, k and v blocks) where a shard.sharding's blocks are "
                  "contiguous; annotate the attention's proj weight (split_axes = [[], [0]]), "
                  "whose columns decide the heads, and leave qkv unannotated";
  return success();
}

FailureOr<int64_t> FunctionImporter::deriveTP() {
  const Annotation &first = annotations.begin()->second;
  for (auto &[index, annotation] : annotations)
    if (annotation.gridSize != first.gridSize)
      return emitError(annotation.shardLoc)
             << "cannot be imported: its grid has " << annotation.gridSize
             << " devices and another annotation's " << first.gridSize
             << "; a function is split over one tp";
  if (tpOption && tpOption != first.gridSize)
    return emitError(first.shardLoc) << "cannot be imported: its grid has " << first.gridSize
                                     << " devices, but tp = " << tpOption << " was asked for";
  if (first.gridSize < 1 || first.gridSize > HTP_ENTRY_MAX_TP)
    return emitError(first.shardLoc) << "cannot be imported: a grid of " << first.gridSize
                                     << " devices is outside tp's bounds, 1 to "
                                     << int64_t(HTP_ENTRY_MAX_TP) << " (HTP_ENTRY_MAX_TP)";
  return first.gridSize;
}

/// The split has one ratio per function: the shares are the blocks of the
/// uneven annotation of the longest dim (the finest statement of the
/// ratio; the first such argument on a tie), divided by their gcd. None
/// uneven: the even split.
FailureOr<SmallVector<int64_t>> FunctionImporter::deriveShares() {
  const Annotation *finest = nullptr;
  for (auto &[index, annotation] : annotations)
    if (!annotation.offsets.empty() &&
        (!finest || annotation.offsets.back() > finest->offsets.back())) {
      finest = &annotation;
      sharesFrom = index;
    }
  SmallVector<int64_t> shares;
  if (!finest)
    return shares;
  int64_t divisor = 0;
  for (size_t rank = 0; rank + 1 < finest->offsets.size(); ++rank) {
    int64_t block = finest->offsets[rank + 1] - finest->offsets[rank];
    if (block <= 0)
      return emitError(finest->shardLoc)
             << "cannot be imported: rank " << rank
             << "'s block is empty; HTP gives every rank at least one whole unit";
    shares.push_back(block);
    divisor = std::gcd(divisor, block);
  }
  for (int64_t &share : shares) {
    share /= divisor;
    if (share > HTP_ENTRY_MAX_SHARD_UNITS)
      return emitError(finest->shardLoc)
             << "cannot be imported: its blocks' ratio needs a share of " << share
             << ", above the split's bound " << int64_t(HTP_ENTRY_MAX_SHARD_UNITS);
  }
  return shares;
}

/// Every annotation must state what the split made of its argument.
LogicalResult FunctionImporter::compare(ArrayRef<int64_t> shares) {
  for (auto &[index, annotation] : annotations) {
    std::string name = describeArgument(func, index);
    auto shard = func.getArgAttrOfType<ShardAttr>(index, kShardAttrName);
    if (!shard) {
      if (!annotation.dim)
        continue; // stated replicated, and it is
      return emitError(annotation.shardLoc)
             << "cannot be imported: " << name
             << " is split by its sharding, but it is no weight the split cuts (the weights "
                "of a column→row linear pair and an attention's proj); HTP keeps it whole on "
                "every rank: state it replicated (split_axes = [[]]) or leave it unannotated";
    }
    if (!annotation.dim)
      return emitError(annotation.shardLoc)
             << "cannot be imported: " << name << " is stated replicated, but the split cuts "
             << "its dim " << shard.getDim() << " over the ranks";
    if (*annotation.dim != shard.getDim())
      return emitError(annotation.shardLoc)
             << "cannot be imported: its sharding splits dim " << *annotation.dim << " of " << name
             << ", but the split cuts dim " << shard.getDim()
             << (shard.getDim() == 0 ? " (rows: a column-parallel weight)"
                                     : " (columns: a row-parallel weight)");
    auto local = cast<RankedTensorType>(func.getArgument(index).getType());
    SmallVector<int64_t> made = globalOffsets(shard, local);
    SmallVector<int64_t> stated = annotation.offsets;
    if (stated.empty()) // even: the split's own blocks when it made them even
      for (int64_t rank = 0, size = made.back(), tp = shard.getParts(); rank <= tp; ++rank)
        stated.push_back(size / tp * rank);
    if (stated == made)
      continue;
    if (int64_t unit = shard.getUnit())
      for (int64_t offset : stated)
        if (offset % unit != 0)
          return emitError(annotation.shardLoc)
                 << "cannot be imported: " << name << "'s sharded_dims_offsets = ["
                 << llvm::interleaved(stated, ", ") << "] cut at " << offset
                 << ", inside a unit: the split moves whole units of " << unit
                 << (llvm::any_of(func.getArgument(index).getUsers(),
                                  [](Operation *user) { return isa<AttentionOp>(user); })
                         ? " (one head)"
                         : " (mlp-unit-width neurons)");
    InFlightDiagnostic diagnostic = emitError(annotation.shardLoc)
                                    << "cannot be imported: " << name << "'s sharding states ["
                                    << llvm::interleaved(stated, ", ")
                                    << "], but the split gives [" << llvm::interleaved(made, ", ")
                                    << "]";
    if (shares.empty())
      diagnostic << " (even over tp = " << shard.getParts() << ")";
    else
      diagnostic << " with shares " << llvm::interleaved(shares, ",") << " (read from "
                 << describeArgument(func, sharesFrom)
                 << "): every pair of a function is apportioned in one ratio, whole units by "
                    "largest remainder";
    return diagnostic;
  }
  return success();
}

LogicalResult FunctionImporter::run(llvm::SetVector<Attribute> &grids) {
  if (failed(collect(grids)))
    return failure();
  if (annotations.empty())
    return success();
  strip();
  if (failed(checkRoles()))
    return failure();
  FailureOr<int64_t> tp = deriveTP();
  if (failed(tp))
    return failure();
  FailureOr<SmallVector<int64_t>> shares = deriveShares();
  if (failed(shares))
    return failure();
  // A function split already (an export's output) is checked, not split.
  if (auto split = func->getAttrOfType<IntegerAttr>(kTPAttrName)) {
    if (split.getInt() != *tp)
      return func.emitError() << "cannot be imported: it is split over tp = " << split.getInt()
                              << " (" << kTPAttrName << "), but its annotations' grid has "
                              << *tp << " devices";
    return compare(*shares);
  }
  if (*tp == 1) // nothing to split; a split statement on one device is a whole one
    return success();
  if (failed(splitForTensorParallel(func, *tp, *shares, mlpUnitWidth)))
    return failure();
  return compare(*shares);
}

struct ImportShardPass : htp::impl::HTPImportShardBase<ImportShardPass> {
  using HTPImportShardBase::HTPImportShardBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tp < 0 || tp > HTP_ENTRY_MAX_TP || mlpUnitWidth < 0) {
      module.emitError() << "--htp-import-shard: tp must be from 0 (the grid's) to "
                         << int64_t(HTP_ENTRY_MAX_TP) << " and mlp-unit-width >= 0";
      return signalPassFailure();
    }
    llvm::SetVector<Attribute> grids;
    for (auto func : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (failed(FunctionImporter(func, tp, mlpUnitWidth).run(grids)))
        return signalPassFailure();
    // The grids the annotations named go with them once nothing names them.
    for (Attribute name : grids) {
      Operation *grid = SymbolTable::lookupSymbolIn(module, cast<FlatSymbolRefAttr>(name));
      if (grid && SymbolTable::symbolKnownUseEmpty(grid, module))
        grid->erase();
    }
  }
};

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

/// The module's 1-D grid of `tp` devices, `@htp_tp<N>`, made at the top of
/// the module when it is not there.
FailureOr<shard::GridOp> getOrCreateGrid(ModuleOp module, int64_t tp) {
  std::string name = "htp_tp" + std::to_string(tp);
  Operation *existing = SymbolTable::lookupSymbolIn(module, name);
  if (!existing) {
    OpBuilder builder = OpBuilder::atBlockBegin(module.getBody());
    return shard::GridOp::create(builder, module.getLoc(), name, ArrayRef<int64_t>{tp});
  }
  auto grid = dyn_cast<shard::GridOp>(existing);
  if (!grid || grid.getShape() != ArrayRef<int64_t>{tp})
    return existing->emitError() << "--htp-export-shard: the symbol @" << name
                                 << " is taken by something other than shard.grid @" << name
                                 << "(shape = " << tp << ")";
  return grid;
}

LogicalResult exportFunction(func::FuncOp func, ModuleOp module) {
  auto tpAttr = func->getAttrOfType<IntegerAttr>(kTPAttrName);
  if (!tpAttr || func.isDeclaration())
    return success();
  bool exported = false;
  func.walk([&](shard::ShardOp op) {
    exported |= isa<BlockArgument>(op.getSrc());
  });
  if (exported)
    return func.emitError() << "--htp-export-shard: its arguments already carry shard "
                               "annotations (run the export once)";
  FlatSymbolRefAttr gridName; // made with the first annotation
  OpBuilder builder = OpBuilder::atBlockBegin(&func.getBody().front());
  for (BlockArgument arg : func.getArguments()) {
    auto shard = func.getArgAttrOfType<ShardAttr>(arg.getArgNumber(), kShardAttrName);
    if (!shard)
      continue;
    if (shard.getLayout() == ShardLayout::Qkv) {
      emitRemark(arg.getLoc()) << "--htp-export-shard: "
                               << describeArgument(func, arg.getArgNumber())
                        << " is not annotated: its qkv shard is strided (rank r's rows of each "
                           "of q, k and v), which no shard.sharding (contiguous blocks) states; "
                           "its htp.shard does";
      continue;
    }
    if (!gridName) {
      FailureOr<shard::GridOp> grid = getOrCreateGrid(module, tpAttr.getInt());
      if (failed(grid))
        return failure();
      gridName = FlatSymbolRefAttr::get(grid->getSymNameAttr());
    }
    auto local = cast<RankedTensorType>(arg.getType());
    SmallVector<int64_t> offsets;
    if (shard.getUnits()) // even shards need none: upstream's default is the even split
      offsets = globalOffsets(shard, local);
    // The builder spelled in the op's own operand order: upstream's shorter
    // one (halos, then offsets) passes its two lists the other way round.
    auto sharding = shard::ShardingOp::create(
        builder, arg.getLoc(), gridName,
        shard::GridAxesArrayAttr::get(func.getContext(),
                                      splitAxesOf(func.getContext(), shard.getDim())),
        builder.getDenseI64ArrayAttr(offsets), ValueRange(), builder.getDenseI64ArrayAttr({}),
        ValueRange());
    shard::ShardOp::create(builder, arg.getLoc(), arg, sharding, UnitAttr());
  }
  return success();
}

struct ExportShardPass : htp::impl::HTPExportShardBase<ExportShardPass> {
  using HTPExportShardBase::HTPExportShardBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(exportFunction(func, getOperation())))
        return signalPassFailure();
  }
};

} // namespace
