//===- Passes.h - The htp passes --------------------------------*- C++ -*-===//
//
// Declares the htp passes (generated from Passes.td) and the named pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_PASSES_PASSES_H
#define HTP_PASSES_PASSES_H

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace mlir::htp {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Adds the whole chain (htp on tensors → LLVM dialect) to `pm`: what
/// `htp-opt --htp-pipeline`, the JIT and htp-compile all run.
void buildHTPPipeline(OpPassManager &pm);

/// Registers every htp pass and the `htp-pipeline` pipeline.
void registerHTPPassesAndPipeline();

} // namespace mlir::htp

#endif // HTP_PASSES_PASSES_H
