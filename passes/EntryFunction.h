//===- EntryFunction.h - What the htp passes share about entry functions --===//
//
// The workspace assignment (AssignWorkspace.cpp) and the lowering
// (LowerToRuntime.cpp) both size the values of an htp entry function: this
// header holds what they share (the placement attributes the first writes
// and the second reads are named in dialect/HTPDialect.h): the check that
// a placement is sound, overflow-checked arithmetic, value sizes, the kernel
// scratch formulas, and the check that a function is one they can size.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_PASSES_ENTRYFUNCTION_H
#define HTP_PASSES_ENTRYFUNCTION_H

#include "dialect/HTPDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <optional>

namespace mlir::htp {

/// An int64 size or count that remembers an overflow instead of wrapping:
/// every product and sum the passes compute (bytes, elements, FLOPs,
/// offsets) goes through it, and the caller reports an empty one.
class CheckedInt {
public:
  CheckedInt(int64_t value) : value(value) {}
  static CheckedInt overflowed() { return CheckedInt(); }
  CheckedInt operator*(CheckedInt other) const {
    return value && other.value ? CheckedInt(llvm::checkedMul(*value, *other.value)) : overflowed();
  }
  CheckedInt operator+(CheckedInt other) const {
    return value && other.value ? CheckedInt(llvm::checkedAdd(*value, *other.value)) : overflowed();
  }
  std::optional<int64_t> get() const { return value; }

private:
  CheckedInt() = default;
  explicit CheckedInt(std::optional<int64_t> value) : value(value) {}
  std::optional<int64_t> value;
};

/// `bytes` rounded up to kWorkspaceAlignment.
CheckedInt alignToWorkspace(int64_t bytes);

/// Elements of a static shape (MLIR's getNumElements wraps).
CheckedInt elementCount(RankedTensorType type);

/// Product of all dims but the last: the rows an op applies its last-dim
/// transform to. Only for types checkEntryFunction found to fit.
int64_t leadingRows(RankedTensorType type);

/// Bytes of a tensor value (4 per f32 element, 2 per bf16);
/// checkEntryFunction made sure they fit.
int64_t byteSize(Value value);

/// The signature's dtype of an htp element type ("f32" or "bf16"), which is
/// also the suffix of the runtime's entry point for an op on it
/// (htp_op_linear_f32, htp_op_linear_bf16).
StringRef dtypeName(Type elementType);

/// The element type of the tensors `op` computes on (one per op, which the
/// dialect checks): its first operand's.
Type opElementType(Operation *op);

/// Bytes of kernel scratch `op` needs in the workspace while it runs (0:
/// none), or none when they pass int64. The formulas are the kernels' and
/// the hooks' own (kernels/htp_scratch.h, runtime/htp_ops.h); the scratch is f32
/// floats in a bf16 block too (the kernels compute in f32).
std::optional<int64_t> scratchBytes(Operation *op);

/// Bytes of device memory the CUDA kernels may hold of their own while
/// `func` runs on one rank (the signature's kernel_memory_bytes), or none
/// when they pass int64: for each of the kernel object's own buffers the
/// largest request any op may make (kernels/htp_scratch.h's own-memory
/// formulas), summed. A balance hook's compact shard may hold every unit of
/// its layer (its own and those migrated in), so pairs count tp times the
/// rank's units.
std::optional<int64_t> kernelMemoryBytes(func::FuncOp func);

/// Bytes of device memory the balancer may hold of its own while `func`
/// runs on one rank (the signature's balancer_memory_bytes), or none when
/// they pass int64: kernels/htp_scratch.h's balancer formulas over the
/// balanced pairs, forward and backward, each at every unit of its layer.
std::optional<int64_t> balancerMemoryBytes(func::FuncOp func);

/// The workspace offset --htp-assign-workspace gave result `index` of `op`
/// (htp.workspace_offsets), or none: a result in a result buffer, or an op
/// not placed (the dialect checked the array has one entry per result).
std::optional<int64_t> workspaceOffset(Operation *op, unsigned index);

/// Checks that `func` is one block of htp ops over static tensors, all f32
/// or all bf16, whose byte sizes fit int64: what both passes need to size
/// its values.
LogicalResult checkEntryFunction(func::FuncOp func);

/// Checks that no two workspace byte ranges of `func` that are live at the
/// same time overlap, whatever wrote the placement. A result slot is live
/// from its op to its last use (the return included), both ends included:
/// an op's operands are still live when its results are written, so they
/// must not alias, and the results of one op (written together) must not
/// overlap each other. Kernel scratch is live only while its op runs, so it
/// must not overlap that op's operands or result. Expects the checks of
/// checkEntryFunction and every slot within the workspace (so no end
/// overflows); slots that are absent are not checked.
LogicalResult checkWorkspaceOverlaps(func::FuncOp func);

} // namespace mlir::htp

#endif // HTP_PASSES_ENTRYFUNCTION_H
