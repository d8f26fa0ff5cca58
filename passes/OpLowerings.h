//===- OpLowerings.h - One lowering pattern per htp op --------------------===//
//
// The patterns --htp-lower-to-runtime applies inside an entry point
// (OpLowerings.cpp), and the little they share: the entry's pointers, the
// rank's context and the failure exit.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_PASSES_OPLOWERINGS_H
#define HTP_PASSES_OPLOWERINGS_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::htp {

/// What the op patterns of one entry point `i32 @"htp.entry.F"(ptr
/// %rt_ctx, ptr %buffers)` share. Built by the lowering before the patterns
/// run, from the placement --htp-assign-workspace recorded (and the
/// lowering checked).
struct EntryContext {
  ModuleOp module;
  LLVM::LLVMFuncOp entry;
  Value rtContext;              ///< the rank's htp_ctx: the entry's argument 0
  SmallVector<Value> buffers;   ///< buffers[i], loaded once on entry; the last is the workspace
  unsigned numArgs = 0;
  /// Op results computed in place: the index of their result buffer.
  llvm::DenseMap<Value, int64_t> resultBuffer;
  /// Per returned value: false when it was computed in place in its buffer.
  SmallVector<bool> copyResult;

  Value workspace() const { return buffers.back(); }
  /// Where `op` writes its result `index`: its workspace slot or its result
  /// buffer.
  Value resultPointer(OpBuilder &builder, Operation *op, unsigned index = 0);
  /// `op`'s kernel scratch in the workspace.
  Value scratchPointer(OpBuilder &builder, Operation *op);
  /// Calls the runtime's op entry point `name` (an htp_op_*, declared on
  /// first use) with the rank's context before `args`, and leaves the entry
  /// with its status when that is not HTP_OK.
  void callOp(RewriterBase &rewriter, Location loc, StringRef name, ValueRange args);
  /// Calls the libhtprt function `name`, which returns an htp_result (i32).
  Value callRuntime(OpBuilder &builder, Location loc, StringRef name, ValueRange args);
  /// Returns `status` (a runtime call's result) from the entry when it is
  /// not HTP_OK (a peer hung or died), and goes on in a new block otherwise:
  /// the call is marked here (a discardable attribute, which a rolled-back
  /// pattern's call takes with it) and branched by branchOnFailures once
  /// the patterns have run.
  void returnIfFailed(RewriterBase &rewriter, Value status);
  /// After the conversion: each marked call ends
  /// its block with `status != 0 ? return status : go on`. Splitting at the
  /// calls from the last to the first moves each op once; splitting inside
  /// the patterns moved every later op at each call, and the conversion
  /// logged each move (an 8,000-op function took 2.4 GB).
  void branchOnFailures(OpBuilder &builder);

private:
  LLVM::LLVMFuncOp declareFunction(OpBuilder &builder, StringRef name, Type result,
                                   ValueRange args);
};

/// Adds one pattern per htp op and one for func.return; `converter` maps
/// every tensor to !llvm.ptr.
void populateOpLoweringPatterns(RewritePatternSet &patterns, const TypeConverter &converter,
                                EntryContext &entry);

} // namespace mlir::htp

#endif // HTP_PASSES_OPLOWERINGS_H
