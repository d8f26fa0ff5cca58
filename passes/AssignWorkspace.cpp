//===- AssignWorkspace.cpp - Place an htp function's values in buffers ----===//
//
// This file implements the htp-assign-workspace pass, which decides where
// each value of an htp function lives when it runs as an entry point: in a
// caller's buffer, or in a slot of the one workspace, and records it as
// attributes (EntryFunction.h) for --htp-lower-to-runtime to read. Passes.td
// says why this is interval packing and not one-shot-bufferize.
//
//===----------------------------------------------------------------------===//

#include "passes/EntryFunction.h"
#include "passes/Passes.h"

#include "dialect/HTPOps.h"
#include "runtime/htp_entry.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::htp {
#define GEN_PASS_DEF_HTPASSIGNWORKSPACE
#include "passes/Passes.h.inc"
} // namespace mlir::htp

using namespace mlir;
using namespace mlir::htp;

namespace {

/// First-fit allocation of byte ranges in the workspace over live intervals.
class WorkspaceAllocator {
public:
  /// The offset of a new slot of `bytes`, or none when the workspace would
  /// pass HTP_ENTRY_MAX_WORKSPACE_BYTES (so no offset can overflow).
  std::optional<int64_t> allocate(int64_t bytes) {
    std::optional<int64_t> padded = alignToWorkspace(bytes).get();
    if (!padded || *padded > HTP_ENTRY_MAX_WORKSPACE_BYTES)
      return std::nullopt;
    int64_t offset = 0;
    for (auto [begin, end] : live) { // `live` is kept sorted by begin
      if (offset + *padded <= begin)
        break;
      offset = std::max(offset, end);
    }
    if (offset + *padded > HTP_ENTRY_MAX_WORKSPACE_BYTES)
      return std::nullopt;
    live.insert(std::upper_bound(live.begin(), live.end(), std::make_pair(offset, offset)),
                {offset, offset + *padded});
    highWater = std::max(highWater, offset + *padded);
    return offset;
  }
  void release(int64_t offset) {
    auto it = llvm::find_if(live, [&](auto &range) { return range.first == offset; });
    assert(it != live.end() && "releasing a slot that is not live");
    live.erase(it);
  }
  /// The workspace's bytes: never 0, the caller's workspace is never NULL.
  int64_t size() const { return std::max<int64_t>(highWater, kWorkspaceAlignment); }

private:
  SmallVector<std::pair<int64_t, int64_t>> live;
  int64_t highWater = 0;
};

/// Places the values of `func` and records the placement on it.
LogicalResult assignWorkspace(func::FuncOp func) {
  Block &body = func.getBody().front();
  Builder builder(func.getContext());

  // A returned value computed by an op is written straight into its result
  // buffer (the first one it is returned in; the lowering copies repeats).
  auto returnOp = cast<func::ReturnOp>(body.getTerminator());
  llvm::DenseSet<Value> inResultBuffer;
  for (Value value : returnOp.getOperands())
    if (value.getDefiningOp())
      inResultBuffer.insert(value);

  // The last op that reads each value, so its slot can be reused after it.
  llvm::DenseMap<Value, Operation *> lastUse;
  for (Operation &op : body.without_terminator())
    for (Value operand : op.getOperands())
      lastUse[operand] = &op;

  WorkspaceAllocator allocator;
  llvm::DenseMap<Value, int64_t> slot; ///< workspace offset of each value there
  auto tooLarge = [&](Operation &op, StringRef what) {
    return op.emitOpError() << what << " would make the workspace larger than "
                            << HTP_ENTRY_MAX_WORKSPACE_BYTES
                            << " bytes (HTP_ENTRY_MAX_WORKSPACE_BYTES)";
  };
  for (Operation &op : body.without_terminator()) {
    op.removeAttr(kWorkspaceOffsetsAttrName);
    op.removeAttr(kScratchOffsetAttrName);
    // Every result is placed before any is freed: a kernel writes all its
    // outputs at once, so they must not share bytes, read or not.
    SmallVector<int64_t> offsets;
    bool anyInWorkspace = false;
    for (OpResult result : op.getResults()) {
      if (inResultBuffer.contains(result)) {
        offsets.push_back(kInResultBuffer);
        continue;
      }
      std::optional<int64_t> offset = allocator.allocate(byteSize(result));
      if (!offset)
        return tooLarge(op, op.getNumResults() == 1
                                ? std::string("its result")
                                : "its result #" + std::to_string(result.getResultNumber()));
      slot[result] = *offset;
      offsets.push_back(*offset);
      anyInWorkspace = true;
    }
    if (anyInWorkspace)
      op.setAttr(kWorkspaceOffsetsAttrName, builder.getDenseI64ArrayAttr(offsets));
    std::optional<int64_t> scratch = scratchBytes(&op);
    if (!scratch)
      return op.emitOpError("needs more kernel scratch than int64 counts");
    if (*scratch) {
      // Live only while the op runs: placed after the results and before the
      // operands are released, so it overlaps none of them, and freed at once.
      std::optional<int64_t> offset = allocator.allocate(*scratch);
      if (!offset)
        return tooLarge(op, "its kernel scratch");
      op.setAttr(kScratchOffsetAttrName, builder.getI64IntegerAttr(*offset));
      allocator.release(*offset);
    }
    // Operands are released only after the results are placed: kernels do
    // not accept outputs aliasing their inputs.
    llvm::SetVector<Value> operands(op.operand_begin(), op.operand_end());
    for (Value operand : operands)
      if (lastUse.lookup(operand) == &op && slot.count(operand))
        allocator.release(slot.lookup(operand));
    // A result produced but never read (dead code survived, or a gradient
    // nobody wants) frees at once.
    for (OpResult result : op.getResults())
      if (result.use_empty() && slot.count(result))
        allocator.release(slot.lookup(result));
  }
  func->setAttr(kWorkspaceBytesAttrName, builder.getI64IntegerAttr(allocator.size()));
  return success();
}

struct AssignWorkspacePass : htp::impl::HTPAssignWorkspaceBase<AssignWorkspacePass> {
  using HTPAssignWorkspaceBase::HTPAssignWorkspaceBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isDeclaration()) // nothing to place; the lowering refuses it
      return;
    if (failed(checkEntryFunction(func)) || failed(assignWorkspace(func)))
      signalPassFailure();
  }
};

} // namespace
