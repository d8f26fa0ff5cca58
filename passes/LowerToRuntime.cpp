//===- LowerToRuntime.cpp - htp functions to kernel-calling entry points --===//
//
// This file implements the htp-lower-to-runtime pass, which turns each
// func.func written in htp ops into an LLVM-dialect function with the entry
// ABI of runtime/htp_entry.h, calling the runtime's op entry points (the
// f32 ones, or their _bf16 twins for a bf16 block), and writes each
// function's JSON signature ("dtype" per argument and result) and its
// facts, the numbers a loader checks that signature against. Where
// each value lives was decided by htp-assign-workspace (AssignWorkspace.cpp);
// each op is lowered by its own pattern (OpLowerings.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/EntryFunction.h"
#include "passes/OpLowerings.h"
#include "passes/Passes.h"

#include "dialect/HTPOps.h"
#include "runtime/htp_entry.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/InterleavedRange.h"
#include "llvm/Support/JSON.h"

#include <limits>

namespace mlir::htp {
#define GEN_PASS_DEF_HTPLOWERTORUNTIME
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// Why `name` cannot name an argument or an entry point (empty when it can):
/// runtime/htp_entry.h's rules for names. Anything else, spaces and quotes
/// included, is safe: the signature is JSON and the symbols are prefixed.
std::string nameProblem(StringRef name) {
  if (name.empty())
    return "is empty";
  if (name.size() > HTP_ENTRY_MAX_NAME)
    return "is longer than " + std::to_string(HTP_ENTRY_MAX_NAME) + " bytes";
  if (!llvm::json::isUTF8(name))
    return "is not valid UTF-8";
  for (unsigned char byte : name.bytes())
    if (byte < 0x20 || byte == 0x7f)
      return "contains a control character";
  // C1 (U+0080 to U+009F, in UTF-8 0xC2 0x80..0x9F): the reader refuses
  // those too, so a .so that names one would not run.
  for (size_t i = 0; i + 1 < name.size(); ++i)
    if ((unsigned char)name[i] == 0xC2 && (unsigned char)name[i + 1] >= 0x80 &&
        (unsigned char)name[i + 1] <= 0x9F)
      return "contains a control character";
  return "";
}

/// `name` quoted and escaped for a diagnostic, cut short if long.
std::string quotedName(StringRef name) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << '\'';
  llvm::printEscapedString(name.take_front(64), os);
  os << (name.size() > 64 ? "...'" : "'");
  return text;
}

/// The slice of a global tensor an argument holds, from its htp.shard
/// attribute (written by --htp-tensor-parallel).
struct ShardRecord {
  int64_t dim, parts;
  std::string layout;
  SmallVector<int64_t> units; ///< uneven shards only
  int64_t unit = 0;
};

/// Argument `index`'s shard record: none when it is not sharded, failure
/// (with a diagnostic) when the attribute is malformed.
FailureOr<std::optional<ShardRecord>> readShard(func::FuncOp func, unsigned index) {
  // The dialect verified the attribute against the argument (HTPDialect.cpp).
  auto shard = func.getArgAttrOfType<ShardAttr>(index, kShardAttrName);
  if (!shard)
    return std::optional<ShardRecord>();
  ShardRecord record{shard.getDim(), shard.getParts(),
                     stringifyShardLayout(shard.getLayout()).str(), {}, shard.getUnit()};
  if (shard.getUnits())
    record.units.assign(shard.getUnits().asArrayRef().begin(), shard.getUnits().asArrayRef().end());
  return std::optional<ShardRecord>(std::move(record));
}

/// The units each rank owns of an uneven split, from the htp.shard of the
/// function argument `weight` (an attention's qkv weight, an MLP's fc1
/// weight); empty for an even split.
static SmallVector<int32_t> ownedUnits(Value weight) {
  ShardAttr shard = getArgumentShard(weight);
  if (!shard || !shard.getUnits())
    return {};
  return SmallVector<int32_t>(shard.getUnits().asArrayRef().begin(),
                              shard.getUnits().asArrayRef().end());
}

/// What the signature's "balance" record says: the shape of the work units
/// of the pairs the balance hooks marked (all layers alike, checked there).
struct BalanceSummary {
  int64_t layers = 0, modelDim = 0, heads = 0, headDim = 0, headFlops = 0;
  int64_t mlpUnits = 0, mlpUnitWidth = 0, mlpUnitFlops = 0;
  SmallVector<int32_t> headsOwned, mlpUnitsOwned; ///< uneven shares only

  void noteAttention(AttentionOp attention, int64_t flopsPerHead) {
    ++layers;
    modelDim = cast<RankedTensorType>(attention.getInput().getType()).getShape().back();
    heads = attention.getNumHeads();
    headDim = attention.getHeadDim();
    headFlops = flopsPerHead;
    headsOwned = ownedUnits(attention.getQkvWeight());
  }
  void noteMLP(MLPOp mlp, int64_t units, int64_t flopsPerUnit) {
    mlpUnits = units;
    mlpUnitWidth = mlp.getUnitWidth();
    mlpUnitFlops = flopsPerUnit;
    mlpUnitsOwned = ownedUnits(mlp.getFc1Weight());
  }
  /// The record has both owned lists or neither: a kind split evenly beside
  /// an uneven one (IR written by hand) owns all its slots on every rank.
  void completeOwned(size_t tp) {
    if (headsOwned.empty() == mlpUnitsOwned.empty())
      return;
    if (headsOwned.empty())
      headsOwned.assign(tp, static_cast<int32_t>(heads));
    else
      mlpUnitsOwned.assign(tp, static_cast<int32_t>(mlpUnits));
  }
};

/// Whether `op` lowers to a call of a balance hook: a balanced attention or
/// its adjoint (with a `pair`), an htp.mlp or an htp.mlp_grad.
static bool callsBalanceHook(Operation &op) {
  if (auto attention = dyn_cast<AttentionOp>(op))
    return attention.getPair().has_value();
  if (auto attentionGrad = dyn_cast<AttentionGradOp>(op))
    return attentionGrad.getPair().has_value();
  return isa<MLPOp, MLPGradOp>(op);
}

/// Lowers one htp function: checks it, reads its placement and its
/// signature's counts, builds the entry and lets the op patterns fill it.
class EntryLowering {
public:
  /// `name` is the function's own name: the pass renamed `func` out of the
  /// way of the symbols it creates.
  EntryLowering(func::FuncOp func, StringRef name, ModuleOp module)
      : func(func), name(name.str()), module(module) {}

  LogicalResult run();

private:
  LogicalResult checkSupported();
  LogicalResult readPlacement();
  LogicalResult countFlops();
  LogicalResult checkBalance();
  LogicalResult addFlops(Operation *op, CheckedInt flops);
  LogicalResult lowerBody();
  std::string argumentName(unsigned index);
  std::string resultName(unsigned index);
  std::optional<unsigned> gradientOf(unsigned resultIndex);
  std::string signatureJSON();
  SmallVector<int64_t> facts(size_t signatureBytes);

  func::FuncOp func;
  std::string name;
  ModuleOp module;

  EntryContext context; ///< what the op patterns share
  unsigned numResults = 0;
  int64_t workspaceBytes = 0;
  int64_t kernelMemoryBytes = 0; ///< the CUDA kernels' own memory, at most
  int64_t balancerMemoryBytes = 0; ///< the balancer's device memory, at most
  int64_t gemmFlops = 0; ///< matrix-product FLOPs per call
  BalanceSummary balance;
};

LogicalResult EntryLowering::checkSupported() {
  if (failed(checkEntryFunction(func)))
    return failure();
  if (func.getNumResults() == 0)
    return func.emitError("an htp entry point must return at least one tensor");
  // What runtime/htp_entry.h's reader refuses is refused here first.
  if (func.getNumArguments() > HTP_ENTRY_MAX_TENSORS ||
      func.getNumResults() > HTP_ENTRY_MAX_TENSORS)
    return func.emitError() << "an htp entry point takes at most "
                            << static_cast<int64_t>(HTP_ENTRY_MAX_TENSORS)
                            << " arguments and returns at most as many results";
  auto checkShape = [&](StringRef what, unsigned index, Type type) -> LogicalResult {
    auto tensor = cast<RankedTensorType>(type);
    if (tensor.getRank() > HTP_ENTRY_MAX_RANK)
      return func.emitError() << what << " #" << index << " has rank " << tensor.getRank()
                              << "; htp entry points take at most "
                              << static_cast<int64_t>(HTP_ENTRY_MAX_RANK) << " dims";
    for (int64_t dim : tensor.getShape())
      if (dim < 1 || dim > HTP_ENTRY_MAX_DIM)
        return func.emitError() << what << " #" << index << " has type " << type
                                << "; every dim of an htp entry point must be in [1, 2^31-1]";
    return success();
  };
  for (auto [index, type] : llvm::enumerate(func.getArgumentTypes())) {
    if (failed(checkShape("argument", index, type)))
      return failure();
    std::string problem = nameProblem(argumentName(index));
    if (!problem.empty())
      return func.emitError() << "argument #" << index << " is named "
                              << quotedName(argumentName(index)) << ", which " << problem
                              << " (a name must be 1 to "
                              << static_cast<int64_t>(HTP_ENTRY_MAX_NAME)
                              << " bytes of UTF-8 without control characters)";
    if (failed(readShard(func, index)))
      return failure();
  }
  for (auto [index, type] : llvm::enumerate(func.getResultTypes())) {
    if (failed(checkShape("result", index, type)))
      return failure();
    std::string problem = nameProblem(resultName(index));
    if (!problem.empty())
      return func.emitError() << "result #" << index << " is named "
                              << quotedName(resultName(index)) << ", which " << problem
                              << " (a name must be 1 to "
                              << static_cast<int64_t>(HTP_ENTRY_MAX_NAME)
                              << " bytes of UTF-8 without control characters)";
    if (func.getResultAttr(index, kGradOfAttrName) && !gradientOf(index))
      return func.emitError() << "result #" << index << "'s '" << kGradOfAttrName
                              << "' names no parameter of the function";
  }
  // The forward hooks have bf16 twins (htp_rt_attention_bf16,
  // htp_rt_mlp_bf16); the backward ones (htp_rt_attention_grad_f32,
  // htp_rt_mlp_grad_f32) are f32 only, as training is (their verifiers
  // refuse bf16 before; this keeps IR that skipped them out too).
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (isa<AttentionGradOp, MLPGradOp>(op) && callsBalanceHook(op) &&
        !opElementType(&op).isF32())
      return op.emitOpError() << "is a backward balance hook on "
                              << dtypeName(opElementType(&op))
                              << " tensors; the backward hooks are f32-only, as training is";
  }
  // BLAS takes its dims and leading dims as int: a larger GEMM dim would wrap.
  constexpr int64_t kMaxGemmDim = std::numeric_limits<int32_t>::max();
  for (Operation &op : func.getBody().front().without_terminator())
    for (Value value : llvm::concat<Value>(op.getOperands(), op.getResults())) {
      auto type = cast<RankedTensorType>(value.getType());
      if (type.getRank() == 0)
        continue;
      int64_t rows = type.getNumElements() / std::max<int64_t>(type.getShape().back(), 1);
      if (rows > kMaxGemmDim || type.getShape().back() > kMaxGemmDim)
        return op.emitOpError() << "operand or result of type " << type
                                << " has a matrix dim above 2^31-1, which the CPU kernels "
                                   "(BLAS int dims) cannot take";
    }
  return success();
}

/// Reads where each value lives (AssignWorkspace.cpp's attributes), checking
/// that every slot lies within the workspace (the kernels write there) and
/// that no two live at the same time overlap.
LogicalResult EntryLowering::readPlacement() {
  Block &body = func.getBody().front();
  context.numArgs = func.getNumArguments();
  numResults = func.getNumResults();
  auto bytes = func->getAttrOfType<IntegerAttr>(kWorkspaceBytesAttrName);
  if (!bytes)
    return func.emitError() << "has no '" << kWorkspaceBytesAttrName
                            << "' (no workspace placement): run --htp-assign-workspace first";
  workspaceBytes = bytes.getInt(); // the dialect checked it is aligned and within the limit
  auto checkInWorkspace = [&](Operation &op, StringRef what, int64_t offset,
                              std::optional<int64_t> size) -> LogicalResult {
    std::optional<int64_t> end = size ? (CheckedInt(offset) + *size).get() : std::nullopt;
    if (!end || *end > workspaceBytes)
      return op.emitOpError() << "its " << what << " at byte " << offset
                              << " does not fit in the workspace of " << workspaceBytes
                              << " bytes ('" << kWorkspaceBytesAttrName << "')";
    return success();
  };

  // An op result without a slot is computed in place in the result buffer
  // it is first returned in; every other returned value is copied there.
  auto returnOp = cast<func::ReturnOp>(body.getTerminator());
  llvm::DenseMap<Value, int64_t> firstResultBuffer;
  for (auto [index, value] : llvm::enumerate(returnOp.getOperands()))
    firstResultBuffer.try_emplace(value, context.numArgs + index);
  for (Operation &op : body.without_terminator()) {
    for (OpResult result : op.getResults()) {
      std::string what = op.getNumResults() == 1
                             ? std::string("result")
                             : "result #" + std::to_string(result.getResultNumber());
      if (std::optional<int64_t> offset = workspaceOffset(&op, result.getResultNumber())) {
        if (failed(checkInWorkspace(op, what, *offset, byteSize(result))))
          return failure();
      } else if (firstResultBuffer.count(result)) {
        context.resultBuffer[result] = firstResultBuffer.lookup(result);
      } else {
        return op.emitOpError() << "has no workspace offset for its " << what << " ('"
                                << kWorkspaceOffsetsAttrName
                                << "') and it is not returned: run --htp-assign-workspace first";
      }
    }
    std::optional<int64_t> scratch = scratchBytes(&op);
    if (!scratch)
      return op.emitOpError("needs more kernel scratch than int64 counts");
    if (!*scratch)
      continue;
    auto offset = op.getAttrOfType<IntegerAttr>(kScratchOffsetAttrName);
    if (!offset)
      return op.emitOpError() << "needs kernel scratch but has no '" << kScratchOffsetAttrName
                              << "': run --htp-assign-workspace first";
    if (failed(checkInWorkspace(op, "kernel scratch", offset.getInt(), *scratch)))
      return failure();
  }
  // The attributes can be written by hand: values live at once must not
  // share bytes, or a kernel would overwrite what a later one reads.
  if (failed(checkWorkspaceOverlaps(func)))
    return failure();
  for (auto [index, value] : llvm::enumerate(returnOp.getOperands())) {
    auto inPlace = context.resultBuffer.find(value);
    context.copyResult.push_back(inPlace == context.resultBuffer.end() ||
                                 inPlace->second != static_cast<int64_t>(context.numArgs + index));
  }
  return success();
}

/// Adds `op`'s matrix-product FLOPs to the block's, failing on overflow.
LogicalResult EntryLowering::addFlops(Operation *op, CheckedInt flops) {
  std::optional<int64_t> total = (flops + gemmFlops).get();
  if (!total)
    return op->emitOpError("the block's FLOP count overflows int64");
  gemmFlops = *total;
  return success();
}

/// The GEMM FLOPs of one htp.attention: the qkv and proj products, q·kᵀ and
/// p·v per head.
static CheckedInt attentionFlops(int64_t batch, int64_t tokens, int64_t dim, int64_t heads,
                                 int64_t headDim) {
  CheckedInt rows = CheckedInt(batch) * tokens, inner = CheckedInt(heads) * headDim;
  return CheckedInt(2) * rows * dim * 3 * inner +                    // qkv
         CheckedInt(4) * batch * heads * tokens * tokens * headDim + // q·kᵀ, p·v
         CheckedInt(2) * rows * inner * dim;                         // proj
}

/// The signature's counts: the block's GEMM FLOPs and the balance units'
/// shapes and costs, all checked.
LogicalResult EntryLowering::countFlops() {
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (auto linear = dyn_cast<LinearOp>(op)) {
      auto weight = cast<RankedTensorType>(linear.getWeight().getType());
      if (failed(addFlops(&op, CheckedInt(2) * leadingRows(linear.getType()) *
                                   weight.getDimSize(1) * weight.getDimSize(0))))
        return failure();
    } else if (auto attention = dyn_cast<AttentionOp>(op)) {
      auto input = cast<RankedTensorType>(attention.getInput().getType());
      int64_t batch = input.getDimSize(0), tokens = input.getDimSize(1),
              dim = input.getDimSize(2), heads = attention.getNumHeads(),
              headDim = attention.getHeadDim();
      if (attention.getPair()) {
        // One head's share: its q, k, v rows and proj columns, its scores.
        std::optional<int64_t> headFlops =
            (CheckedInt(2) * batch * tokens * (CheckedInt(3) * dim * headDim + headDim * dim) +
             CheckedInt(4) * batch * tokens * tokens * headDim)
                .get();
        if (!headFlops)
          return op.emitOpError("the FLOPs of one head overflow int64");
        balance.noteAttention(attention, *headFlops);
      }
      if (failed(addFlops(&op, attentionFlops(batch, tokens, dim, heads, headDim))))
        return failure();
    } else if (auto grad = dyn_cast<AttentionGradOp>(op)) {
      // The backward's GEMMs: twice the forward's (each product's two
      // adjoints); the kernel's recomputed forward is not counted. A
      // balanced one (pair) counts the same: its units' costs, in the
      // "balance" record, are the forward hooks', one layer per forward
      // attention.
      ArrayRef<int64_t> input = cast<RankedTensorType>(grad.getInput().getType()).getShape();
      if (failed(addFlops(&op, CheckedInt(2) * attentionFlops(input[0], input[1], input[2],
                                                              grad.getNumHeads(),
                                                              grad.getHeadDim()))))
        return failure();
    } else if (auto grad = dyn_cast<LinearGradOp>(op)) {
      // dx = dy·w and dw = dyᵀ·x: twice the forward's 2·rows·in·out.
      auto weight = cast<RankedTensorType>(grad.getWeight().getType());
      if (failed(addFlops(&op, CheckedInt(4) * leadingRows(grad.getDx().getType()) *
                                   weight.getDimSize(1) * weight.getDimSize(0))))
        return failure();
    } else if (isa<PatchEmbedOp, PatchEmbedGradOp>(op)) {
      // The patches [B·N, C·P·P] times the weight [D, C·P·P]ᵀ: 2·B·N·D·C·P·P.
      // The gradient computes only dw = dyᵀ·patches (images need none): as
      // many.
      auto images = cast<RankedTensorType>(op.getOperand(0).getType());
      auto tokens = cast<RankedTensorType>(isa<PatchEmbedOp>(op) ? op.getResult(0).getType()
                                                                 : op.getOperand(1).getType());
      // B·N·C·P·P is the images' element count (B·C·H·W).
      if (failed(addFlops(&op, CheckedInt(2) * elementCount(images) *
                                   tokens.getShape().back())))
        return failure();
    } else if (auto mlp = dyn_cast<MLPOp>(op)) {
      int64_t rows = leadingRows(mlp.getType()), dim = mlp.getType().getShape().back();
      int64_t hidden = cast<RankedTensorType>(mlp.getFc1Weight().getType()).getDimSize(0);
      int64_t width = mlp.getUnitWidth();
      std::optional<int64_t> unitFlops = (CheckedInt(4) * rows * dim * width).get();
      if (!unitFlops)
        return op.emitOpError("the FLOPs of one MLP unit overflow int64");
      balance.noteMLP(mlp, hidden / width, *unitFlops);
      if (failed(addFlops(&op, CheckedInt(4) * rows * dim * hidden)))
        return failure();
    } else if (auto grad = dyn_cast<MLPGradOp>(op)) {
      // Twice the forward htp.mlp's 4·rows·dim·hidden (fc1 and fc2, each
      // product's two adjoints); the units were noted from the forward.
      int64_t rows = leadingRows(cast<RankedTensorType>(grad.getInput().getType()));
      ArrayRef<int64_t> fc1 = cast<RankedTensorType>(grad.getFc1Weight().getType()).getShape();
      if (failed(addFlops(&op, CheckedInt(8) * rows * fc1[1] * fc1[0])))
        return failure();
    }
  }
  return success();
}

/// Checks that the "balance" record describes every hooked op, as the
/// signature's reader and the planner take it: one balanced attention (pair
/// 2l) and one htp.mlp (pair 2l + 1) for each layer l below the record's
/// layers, each pair once, all layers alike, and every backward hook's pair
/// among them. The record counts layers by balanced attentions: a function
/// without any has none, and its hooks (an htp.mlp, backward hooks, written
/// by hand) compute every unit, as a plain split block's do.
LogicalResult EntryLowering::checkBalance() {
  SmallVector<AttentionOp> attentions;
  SmallVector<MLPOp> mlps;
  SmallVector<Operation *> backward;
  Operation *firstHook = nullptr;
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (!callsBalanceHook(op))
      continue;
    if (!firstHook)
      firstHook = &op;
    if (auto attention = dyn_cast<AttentionOp>(op))
      attentions.push_back(attention);
    else if (auto mlp = dyn_cast<MLPOp>(op))
      mlps.push_back(mlp);
    else
      backward.push_back(&op);
  }
  if (attentions.empty())
    return success();
  const int64_t layers = attentions.size();
  if (attentions.size() != mlps.size())
    return firstHook->emitOpError()
           << "calls a balance hook, but the function has " << attentions.size()
           << " balanced attention(s) (with a pair) and " << mlps.size()
           << " htp.mlp; the signature's balance record takes one of each per layer "
              "(attention pair 2 * layer, htp.mlp pair 2 * layer + 1), as "
              "--htp-balance-hooks writes them";
  SmallVector<Operation *> pairOwner(2 * layers, nullptr);
  auto claimPair = [&](Operation *op, int64_t pair) -> LogicalResult {
    if (pair >= 2 * layers)
      return op->emitOpError() << "has pair " << pair << ", but with " << layers
                               << " layer(s) of balanced attention and htp.mlp the pairs "
                                  "are 0 to "
                               << 2 * layers - 1 << " (attention 2 * layer, MLP 2 * layer + 1)";
    if (pairOwner[pair]) {
      InFlightDiagnostic diag = op->emitOpError()
                                << "has pair " << pair << ", which an earlier op has too; "
                                << "each layer's attention and MLP have a pair of their own";
      diag.attachNote(pairOwner[pair]->getLoc()) << "the earlier op with pair " << pair;
      return diag;
    }
    pairOwner[pair] = op;
    return success();
  };
  auto describe = [](AttentionOp attention) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << attention.getNumHeads() << " heads of " << attention.getHeadDim() << " channels on "
       << attention.getInput().getType();
    if (SmallVector<int32_t> owned = ownedUnits(attention.getQkvWeight()); !owned.empty())
      os << ", owned per rank " << llvm::interleaved(owned, ",");
    return text;
  };
  for (AttentionOp attention : attentions) {
    if (failed(claimPair(attention, *attention.getPair())))
      return failure();
    if (describe(attention) != describe(attentions.front()))
      return attention.emitOpError()
             << "has " << describe(attention) << ", but the balanced attention of pair "
             << *attentions.front().getPair() << " has " << describe(attentions.front())
             << "; the signature's balance record describes every layer alike";
  }
  auto describeMLP = [](MLPOp mlp) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << cast<RankedTensorType>(mlp.getFc1Weight().getType()).getDimSize(0) / mlp.getUnitWidth()
       << " units of " << mlp.getUnitWidth() << " neurons on " << mlp.getInput().getType();
    if (SmallVector<int32_t> owned = ownedUnits(mlp.getFc1Weight()); !owned.empty())
      os << ", owned per rank " << llvm::interleaved(owned, ",");
    return text;
  };
  for (MLPOp mlp : mlps) {
    if (failed(claimPair(mlp, mlp.getPair())))
      return failure();
    if (describeMLP(mlp) != describeMLP(mlps.front()))
      return mlp.emitOpError() << "has " << describeMLP(mlp) << ", but the htp.mlp of pair "
                               << mlps.front().getPair() << " has " << describeMLP(mlps.front())
                               << "; the signature's balance record describes every layer alike";
  }
  for (Operation *op : backward) {
    auto attentionGrad = dyn_cast<AttentionGradOp>(op);
    int64_t pair = attentionGrad ? *attentionGrad.getPair() : cast<MLPGradOp>(op).getPair();
    if (pair >= 2 * layers)
      return op->emitOpError() << "has pair " << pair
                               << ", which no balanced attention or htp.mlp of the function has "
                                  "(its pairs are 0 to "
                               << 2 * layers - 1 << ")";
  }
  return success();
}

/// The name the signature gives argument `index`: its htp.param (timm's
/// name) or htp.input, else "argN".
std::string EntryLowering::argumentName(unsigned index) {
  if (auto param = func.getArgAttrOfType<StringAttr>(index, kParamAttrName))
    return param.getValue().str();
  if (auto input = func.getArgAttrOfType<StringAttr>(index, kInputAttrName))
    return input.getValue().str();
  return "arg" + std::to_string(index);
}

/// The argument whose gradient result `resultIndex` is (its htp.grad_of
/// names the argument's htp.param; the dialect checked it), or none.
std::optional<unsigned> EntryLowering::gradientOf(unsigned resultIndex) {
  auto param = func.getResultAttrOfType<StringAttr>(resultIndex, kGradOfAttrName);
  if (!param)
    return std::nullopt;
  for (unsigned index = 0; index < func.getNumArguments(); ++index)
    if (auto name = func.getArgAttrOfType<StringAttr>(index, kParamAttrName);
        name && name.getValue() == param.getValue())
      return index;
  return std::nullopt;
}

/// The name the signature gives result `index`: "grad.<param>" for a
/// gradient, its htp.result, else "resultN".
std::string EntryLowering::resultName(unsigned index) {
  if (auto param = func.getResultAttrOfType<StringAttr>(index, kGradOfAttrName))
    return "grad." + param.getValue().str();
  if (auto name = func.getResultAttrOfType<StringAttr>(index, kResultAttrName))
    return name.getValue().str();
  return "result" + std::to_string(index);
}

/// The signature (runtime/htp_entry.h, format 2) as compact JSON. Every
/// name was checked by checkSupported; the writer escapes the rest.
std::string EntryLowering::signatureJSON() {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream json(os);
  auto writeShape = [&](Type type) {
    json.attributeArray("shape", [&] {
      for (int64_t dim : cast<RankedTensorType>(type).getShape())
        json.value(dim);
    });
  };
  auto writeDtype = [&](Type type) {
    json.attribute("dtype", dtypeName(cast<RankedTensorType>(type).getElementType()));
  };
  auto writeShard = [&](unsigned argIndex) {
    if (std::optional<ShardRecord> shard = *readShard(func, argIndex))
      json.attributeObject("shard", [&] {
        json.attribute("dim", shard->dim);
        json.attribute("parts", shard->parts);
        json.attribute("layout", shard->layout);
        if (!shard->units.empty()) {
          json.attributeArray("units", [&] {
            for (int64_t count : shard->units)
              json.value(count);
          });
          json.attribute("unit", shard->unit);
        }
      });
  };
  json.object([&] {
    json.attribute("htp_entry", HTP_ENTRY_FORMAT_VERSION);
    json.attribute("entry", name);
    json.attributeArray("args", [&] {
      for (unsigned index = 0; index < context.numArgs; ++index)
        json.object([&] {
          json.attribute("name", argumentName(index));
          bool param = func.getArgAttrOfType<StringAttr>(index, kParamAttrName) != nullptr;
          json.attribute("role", param ? "param" : "input");
          writeDtype(func.getArgumentTypes()[index]);
          writeShape(func.getArgumentTypes()[index]);
          writeShard(index);
        });
    });
    json.attributeArray("results", [&] {
      for (unsigned index = 0; index < numResults; ++index)
        json.object([&] {
          json.attribute("name", resultName(index));
          // A gradient carries its parameter's name and shard (a rank
          // holds the gradient of its own slice).
          std::optional<unsigned> param = gradientOf(index);
          if (param) {
            json.attribute("role", "grad");
            json.attribute("grad_of", argumentName(*param));
          }
          writeDtype(func.getResultTypes()[index]);
          writeShape(func.getResultTypes()[index]);
          if (param)
            writeShard(*param);
        });
    });
    json.attribute("workspace_bytes", workspaceBytes);
    json.attribute("kernel_memory_bytes", kernelMemoryBytes);
    if (balance.layers)
      json.attribute("balancer_memory_bytes", balancerMemoryBytes);
    json.attribute("flops", gemmFlops);
    if (auto tp = func->getAttrOfType<IntegerAttr>(kTPAttrName))
      json.attribute("tp", tp.getInt());
    if (balance.layers)
      json.attributeObject("balance", [&] {
        json.attribute("layers", balance.layers);
        json.attribute("model_dim", balance.modelDim);
        json.attribute("heads", balance.heads);
        json.attribute("head_dim", balance.headDim);
        json.attribute("head_flops", balance.headFlops);
        json.attribute("mlp_units", balance.mlpUnits);
        json.attribute("mlp_unit_width", balance.mlpUnitWidth);
        json.attribute("mlp_unit_flops", balance.mlpUnitFlops);
        if (!balance.headsOwned.empty() || !balance.mlpUnitsOwned.empty()) {
          json.attributeArray("heads_owned", [&] {
            for (int32_t count : balance.headsOwned)
              json.value(count);
          });
          json.attributeArray("mlp_units_owned", [&] {
            for (int32_t count : balance.mlpUnitsOwned)
              json.value(count);
          });
        }
      });
  });
  return text;
}

static_assert(HTP_FACT_DIMS + HTP_ENTRY_MAX_RANK == HTP_FACT_SHARD_LAYOUT,
              "a facts record holds every dim");

/// The facts beside the signature (runtime/htp_entry.h): the numbers the
/// JSON states, taken again from the function's types, the placement and
/// the counts the op patterns use, so that a signature edited after
/// compilation no longer matches them.
SmallVector<int64_t> EntryLowering::facts(size_t signatureBytes) {
  SmallVector<int64_t> words(HTP_FACTS_HEADER_WORDS, 0);
  words[HTP_FACTS_FORMAT] = HTP_FACTS_MAGIC;
  words[HTP_FACTS_SIGNATURE_BYTES] = static_cast<int64_t>(signatureBytes);
  auto tp = func->getAttrOfType<IntegerAttr>(kTPAttrName);
  words[HTP_FACTS_TP] = tp ? tp.getInt() : 1;
  words[HTP_FACTS_WORKSPACE_BYTES] = workspaceBytes;
  words[HTP_FACTS_FLOPS] = gemmFlops;
  words[HTP_FACTS_NUM_ARGS] = context.numArgs;
  words[HTP_FACTS_NUM_RESULTS] = numResults;
  auto addTensor = [&](htp_sig_role role, Type type, std::optional<ShardRecord> shard,
                       int64_t gradArg) {
    auto tensor = cast<RankedTensorType>(type);
    int64_t record[HTP_FACTS_TENSOR_WORDS] = {};
    record[HTP_FACT_ROLE] = role;
    record[HTP_FACT_DTYPE] = tensor.getElementType().isBF16() ? HTP_SIG_BF16 : HTP_SIG_F32;
    // checkEntryFunction made sure the bytes fit.
    record[HTP_FACT_BYTES] = *(elementCount(tensor) * elementBytes(tensor.getElementType())).get();
    record[HTP_FACT_RANK] = tensor.getRank();
    for (auto [index, dim] : llvm::enumerate(tensor.getShape()))
      record[HTP_FACT_DIMS + index] = dim;
    if (shard) {
      record[HTP_FACT_SHARD_LAYOUT] = shard->layout == "qkv" ? HTP_SHARD_QKV : HTP_SHARD_BLOCKS;
      record[HTP_FACT_SHARD_DIM] = shard->dim;
      record[HTP_FACT_SHARD_PARTS] = shard->parts;
      if (!shard->units.empty()) {
        record[HTP_FACT_SHARD_UNIT] = shard->unit;
        SmallVector<int32_t> units(shard->units.begin(), shard->units.end());
        record[HTP_FACT_SHARD_UNITS_HASH] =
            htp_facts_units_hash(units.data(), static_cast<int>(units.size()));
      }
    }
    record[HTP_FACT_GRAD_ARG] = gradArg;
    words.append(std::begin(record), std::end(record));
  };
  for (unsigned index = 0; index < context.numArgs; ++index)
    addTensor(func.getArgAttrOfType<StringAttr>(index, kParamAttrName) ? HTP_SIG_PARAM
                                                                        : HTP_SIG_INPUT,
              func.getArgumentTypes()[index], *readShard(func, index), -1);
  for (unsigned index = 0; index < numResults; ++index) {
    std::optional<unsigned> param = gradientOf(index);
    addTensor(param ? HTP_SIG_GRAD : HTP_SIG_RESULT, func.getResultTypes()[index],
              param ? *readShard(func, *param) : std::nullopt,
              param ? static_cast<int64_t>(*param) : -1);
  }
  // Without a balanced attention there is no record (an htp.mlp alone
  // computes every unit): the facts say none either, as the JSON.
  const BalanceSummary none;
  const BalanceSummary &b = balance.layers ? balance : none;
  const int64_t balanceWords[HTP_FACTS_BALANCE_WORDS] = {
      b.layers != 0, b.layers,   b.modelDim,     b.heads,
      b.headDim,     b.headFlops, b.mlpUnits,    b.mlpUnitWidth,
      b.mlpUnitFlops,
      htp_facts_units_hash(b.headsOwned.empty() ? nullptr : b.headsOwned.data(),
                           static_cast<int>(b.headsOwned.size())),
      htp_facts_units_hash(b.mlpUnitsOwned.empty() ? nullptr : b.mlpUnitsOwned.data(),
                           static_cast<int>(b.mlpUnitsOwned.size()))};
  words.append(std::begin(balanceWords), std::end(balanceWords));
  words[HTP_FACTS_WORDS] = static_cast<int64_t>(words.size());
  return words;
}

/// Defines an externally visible constant int64 array `name`.
static void defineWordsGlobal(OpBuilder &builder, ModuleOp module, StringRef name,
                              ArrayRef<int64_t> words) {
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(module.getBody());
  auto type = LLVM::LLVMArrayType::get(builder.getI64Type(), words.size());
  auto value = DenseElementsAttr::get(
      RankedTensorType::get({static_cast<int64_t>(words.size())}, builder.getI64Type()), words);
  LLVM::GlobalOp::create(builder, module.getLoc(), type, /*isConstant=*/true,
                         LLVM::Linkage::External, name, value);
}

/// Defines a NUL-terminated, externally visible constant string `name`.
static void defineStringGlobal(OpBuilder &builder, ModuleOp module, StringRef name,
                               StringRef value) {
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(module.getBody());
  std::string bytes = value.str();
  bytes.push_back('\0');
  auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), bytes.size());
  LLVM::GlobalOp::create(builder, module.getLoc(), type, /*isConstant=*/true,
                         LLVM::Linkage::External, name, builder.getStringAttr(bytes));
}

/// Builds `i32 @"htp.entry.F"(ptr %rt_ctx, ptr %buffers)`, loads the
/// buffers, moves the function's ops into it and applies the op patterns.
LogicalResult EntryLowering::lowerBody() {
  MLIRContext *mlirContext = module.getContext();
  OpBuilder builder(func);
  Location loc = func.getLoc();
  auto ptrType = LLVM::LLVMPointerType::get(mlirContext);
  auto entryType = LLVM::LLVMFunctionType::get(builder.getI32Type(), {ptrType, ptrType});
  LLVM::LLVMFuncOp entry =
      LLVM::LLVMFuncOp::create(builder, loc, HTP_ENTRY_SYMBOL_PREFIX + name, entryType);
  Block *block = entry.addEntryBlock(builder);
  context.module = module;
  context.entry = entry;
  context.rtContext = block->getArgument(0);
  builder.setInsertionPointToEnd(block);
  for (int32_t index = 0, end = context.numArgs + numResults + 1; index < end; ++index) {
    Value slot = LLVM::GEPOp::create(builder, loc, ptrType, ptrType, block->getArgument(1),
                                     ArrayRef<LLVM::GEPArg>{index});
    context.buffers.push_back(LLVM::LoadOp::create(builder, loc, ptrType, slot, /*alignment=*/8));
  }

  // The ops move into the entry; each argument becomes its buffer, seen as
  // a tensor until the patterns have run.
  Block &body = func.getBody().front();
  for (BlockArgument arg : body.getArguments())
    arg.replaceAllUsesWith(UnrealizedConversionCastOp::create(builder, loc, arg.getType(),
                                                              context.buffers[arg.getArgNumber()])
                               .getResult(0));
  block->getOperations().splice(block->end(), body.getOperations());

  TypeConverter converter;
  converter.addConversion([](Type type) { return type; });
  converter.addConversion([ptrType](RankedTensorType) -> Type { return ptrType; });
  ConversionTarget target(*mlirContext);
  target.addLegalDialect<LLVM::LLVMDialect>();
  target.addLegalOp<UnrealizedConversionCastOp>();
  target.addIllegalDialect<HTPDialect>();
  target.addIllegalOp<func::ReturnOp>();
  RewritePatternSet patterns(mlirContext);
  populateOpLoweringPatterns(patterns, converter, context);
  if (failed(applyPartialConversion(entry, target, std::move(patterns))))
    return failure();
  context.branchOnFailures(builder);
  // Every tensor is now a pointer: the casts cancel out.
  SmallVector<UnrealizedConversionCastOp> casts, left;
  entry.walk([&](UnrealizedConversionCastOp cast) { casts.push_back(cast); });
  reconcileUnrealizedCasts(casts, &left);
  if (!left.empty())
    return left.front().emitError("internal error: a tensor left unlowered");
  return success();
}

LogicalResult EntryLowering::run() {
  if (failed(checkSupported()) || failed(readPlacement()) || failed(countFlops()) ||
      failed(checkBalance()))
    return failure();
  std::optional<int64_t> ownMemory = htp::kernelMemoryBytes(func);
  if (!ownMemory || *ownMemory > HTP_ENTRY_MAX_WORKSPACE_BYTES)
    return func.emitError() << "the memory its kernels keep of their own on a GPU (f32 sums, "
                               "attention scratch: kernels/htp_scratch.h) would exceed 2^40 "
                               "bytes";
  kernelMemoryBytes = *ownMemory;
  std::optional<int64_t> balancerMemory = htp::balancerMemoryBytes(func);
  if (!balancerMemory || *balancerMemory > HTP_ENTRY_MAX_WORKSPACE_BYTES)
    return func.emitError() << "the memory the balancer may keep of its own on a GPU "
                               "(compact shards, migrated units: kernels/htp_scratch.h) would "
                               "exceed 2^40 bytes";
  balancerMemoryBytes = *balancerMemory;
  if (failed(lowerBody()))
    return failure();
  if (auto tp = func->getAttrOfType<IntegerAttr>(kTPAttrName); tp && balance.layers)
    balance.completeOwned(static_cast<size_t>(tp.getInt()));
  OpBuilder builder(module.getContext());
  std::string signature = signatureJSON();
  defineStringGlobal(builder, module, HTP_SIGNATURE_SYMBOL_PREFIX + name, signature);
  defineWordsGlobal(builder, module, HTP_FACTS_SYMBOL_PREFIX + name, facts(signature.size()));
  func.erase();
  return success();
}

struct LowerToRuntimePass : htp::impl::HTPLowerToRuntimeBase<LowerToRuntimePass> {
  using HTPLowerToRuntimeBase::HTPLowerToRuntimeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkSymbols(module)))
      return signalPassFailure();
    // Each function is first moved out of the way: a func.func named like a
    // kernel (@htp_cpu_linear_f32) or a runtime function must not meet the
    // declaration the lowering adds. The temporary names start with a
    // control character, which no accepted function name has.
    SmallVector<std::pair<func::FuncOp, std::string>> entries;
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      entries.push_back({func, func.getSymName().str()});
    for (auto [index, entry] : llvm::enumerate(entries)) {
      std::string temporary;
      for (unsigned attempt = 0; temporary.empty() || module.lookupSymbol(temporary); ++attempt)
        temporary = "\x01htp.lowering." + std::to_string(index) + "." + std::to_string(attempt);
      entry.first.setSymName(temporary);
    }
    SmallVector<std::string> publicNames;
    for (auto &[func, name] : entries) {
      if (func.isPublic())
        publicNames.push_back(name);
      if (failed(EntryLowering(func, name, module).run()))
        return signalPassFailure();
    }
    // The default entry: the module's choice (htp-compile --entry) when it
    // names a public function lowered here, else the only public one.
    auto chosen = module->getAttrOfType<StringAttr>(kDefaultEntryAttrName);
    std::string defaultEntry;
    if (chosen && llvm::is_contained(publicNames, chosen.getValue().str()))
      defaultEntry = chosen.getValue().str();
    else if (publicNames.size() == 1)
      defaultEntry = publicNames.front();
    if (!defaultEntry.empty()) {
      OpBuilder builder(module.getContext());
      defineStringGlobal(builder, module, HTP_DEFAULT_ENTRY_SYMBOL, defaultEntry);
    }
  }

  /// Refuses functions the lowering cannot name, and symbols in the way of
  /// those it creates: every kernel and runtime function it declares is
  /// htp_*, every symbol it defines htp.* (runtime/htp_entry.h).
  static LogicalResult checkSymbols(ModuleOp module) {
    for (Operation &op : *module.getBody()) {
      auto symbol = dyn_cast<SymbolOpInterface>(op);
      if (!symbol)
        continue;
      StringRef name = symbol.getName();
      if (auto func = dyn_cast<func::FuncOp>(op)) {
        if (func.isDeclaration())
          return func.emitError("external functions are not supported in htp modules");
        std::string problem = nameProblem(name);
        if (!problem.empty())
          return func.emitError() << "function name " << quotedName(name) << " " << problem
                                  << " (a name must be 1 to "
                              << static_cast<int64_t>(HTP_ENTRY_MAX_NAME)
                                  << " bytes of UTF-8 without control characters)";
        continue;
      }
      if (name.starts_with("htp_") || name.starts_with("htp."))
        return op.emitError() << "symbol " << quotedName(name)
                              << " is reserved: --htp-lower-to-runtime declares htp_* and "
                                 "defines htp.* symbols";
    }
    return success();
  }
};

} // namespace
