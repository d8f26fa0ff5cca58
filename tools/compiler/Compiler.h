//===- Compiler.h - The compiler half of htp-run and htp-compile -*- C++ -*-===//
//
// Parses an htp .mlir file, runs the htp pipeline down to the LLVM dialect,
// and hands the result to the JIT (htp_jit_compiler) or to the object-file
// emitter (htp-compile). Both share this one path, so a JIT run and an AOT
// shared object are the same program.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_TOOLS_COMPILER_H
#define HTP_TOOLS_COMPILER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace mlir::htp {

/// Makes a context with every dialect and translation the pipeline needs.
std::unique_ptr<mlir::MLIRContext> makeCompilerContext();

/// Parses `path` and lowers it to the LLVM dialect, split over `tp` ranks
/// when tp > 1 (unevenly by `shares` when given: one per rank; with `spare`
/// percent of spare room per rank, which needs tp > 1), with the
/// backward NAME_grad of each loss function when
/// `grad` (--htp-grad). Checks that `entry` (if non-empty) is a public
/// function of the file or, with `grad`, one the pipeline wrote (NAME_grad),
/// or else picks the only public one and stores its name in `entry`. On
/// failure returns null and appends every diagnostic, with file:line:col, to
/// `errors`.
mlir::OwningOpRef<mlir::ModuleOp> compileFile(mlir::MLIRContext &context, const std::string &path,
                                              std::string &entry, std::string &errors,
                                              int64_t tp = 1, bool grad = true,
                                              llvm::ArrayRef<int64_t> shares = {},
                                              int64_t spare = 0);

/// Translates a lowered module to LLVM IR, optimises it (-O3) and writes a
/// position-independent object file for the host to `objectPath`.
bool emitObjectFile(mlir::ModuleOp module, const std::string &objectPath, std::string &errors);

} // namespace mlir::htp

#endif // HTP_TOOLS_COMPILER_H
