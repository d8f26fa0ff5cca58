//===- HTPDialect.h - The htp dialect ---------------------------*- C++ -*-===//
//
// Declares the htp dialect (generated from HTPOps.td), its enums and
// attributes (HTPAttrs.td) and the names of the attributes it puts on
// functions, their arguments and ops (the workspace placement).
//
//===----------------------------------------------------------------------===//

#ifndef HTP_DIALECT_HTPDIALECT_H
#define HTP_DIALECT_HTPDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/Value.h"

#include "dialect/HTPOpsDialect.h.inc"

#include "dialect/HTPEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialect/HTPAttrs.h.inc"

namespace mlir::htp {
/// Marks a function argument as a parameter; the value is its timm name.
inline constexpr llvm::StringLiteral kParamAttrName = "htp.param";
/// Names a data-input argument (optional; "arg<N>" otherwise).
inline constexpr llvm::StringLiteral kInputAttrName = "htp.input";
/// On a sharded function argument: a ShardAttr, see HTPAttrs.td.
inline constexpr llvm::StringLiteral kShardAttrName = "htp.shard";
/// Names a function result in the entry signature (optional; "result<N>"
/// otherwise).
inline constexpr llvm::StringLiteral kResultAttrName = "htp.result";
/// On a gradient result (written by --htp-grad): the htp.param name of the
/// argument it is the gradient of; the signature names it "grad.<param>".
inline constexpr llvm::StringLiteral kGradOfAttrName = "htp.grad_of";
/// Unit attribute on a function written by --htp-grad (the backward):
/// --htp-balance-hooks leaves it alone.
inline constexpr llvm::StringLiteral kBackwardAttrName = "htp.backward";
/// On a function split by --htp-tensor-parallel: the number of ranks.
inline constexpr llvm::StringLiteral kTPAttrName = "htp.tp";
/// On a module: the function a compiled .so runs by default (htp-compile
/// --entry); --htp-lower-to-runtime writes it as HTP_DEFAULT_ENTRY_SYMBOL.
/// Without it, the module's only public function is the default.
inline constexpr llvm::StringLiteral kDefaultEntryAttrName = "htp.default_entry";

// The workspace placement --htp-assign-workspace records and
// --htp-lower-to-runtime reads (passes/AssignWorkspace.cpp); the dialect
// checks their form, the lowering their meaning.
/// On an htp op with a result in the workspace: one i64 per result
/// (array<i64: ...>), the result's byte offset there, or -1 for a result
/// computed in place in the result buffer it is returned in. An op whose
/// results all live in result buffers has none.
inline constexpr llvm::StringLiteral kWorkspaceOffsetsAttrName = "htp.workspace_offsets";
/// The offset kWorkspaceOffsetsAttrName gives a result in a result buffer.
inline constexpr int64_t kInResultBuffer = -1;
/// On an htp op that needs kernel scratch while it runs: the scratch's byte
/// offset in the workspace (i64).
inline constexpr llvm::StringLiteral kScratchOffsetAttrName = "htp.scratch_offset";
/// On a placed function: the workspace's size in bytes (i64).
inline constexpr llvm::StringLiteral kWorkspaceBytesAttrName = "htp.workspace_bytes";
/// Every workspace slot, and the workspace's size, is a multiple of this
/// (runtime/htp_entry.h: the caller's workspace is 64-byte aligned).
inline constexpr int64_t kWorkspaceAlignment = 64;

/// Checks that `type` is a tensor the runtime can take: rank <= 8
/// (HTP_ENTRY_MAX_RANK), every dim from 1 to HTP_ENTRY_MAX_DIM, and at most
/// HTP_ENTRY_MAX_TENSOR_BYTES of its element type (4 bytes per f32, 2 per
/// bf16), computed without overflow. `what`
/// names the value in the diagnostic ("operand #1"); non-tensors and
/// dynamic shapes are left to the type constraints.
LogicalResult verifyTensorTypeLimits(llvm::function_ref<InFlightDiagnostic()> emitError,
                                     Type type, const llvm::Twine &what);

/// Bytes of one element of an htp tensor: 4 for f32, 2 for bf16.
int64_t elementBytes(Type elementType);
/// The htp.shard of `value` when it is an argument of the function that
/// holds it, else null: how a pass asks whether an op reads a shard.
ShardAttr getArgumentShard(Value value);

/// The smallest divisor of `n` at or above `floor` (n itself when none is
/// smaller): divisor pairs are searched up to sqrt(n), so a prime n as large
/// as 2^31 - 1 takes 46341 steps. The MLP unit width of the split and of the
/// balance hooks.
int64_t smallestDivisorAtLeast(int64_t n, int64_t floor);
} // namespace mlir::htp

#endif // HTP_DIALECT_HTPDIALECT_H
