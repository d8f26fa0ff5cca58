//===- Passes.h - The htp passes --------------------------------*- C++ -*-===//
//
// Declares the htp passes (generated from Passes.td) and the named pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef HTP_PASSES_PASSES_H
#define HTP_PASSES_PASSES_H

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::htp {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Options of the named pipeline (`--htp-pipeline=tp=4`).
struct HTPPipelineOptions : public PassPipelineOptions<HTPPipelineOptions> {
  Option<int64_t> tp{*this, "tp",
                     llvm::cl::desc("Tensor-parallel ranks to split for (1: unsharded)"),
                     llvm::cl::init(1)};
  ListOption<int64_t> shares{
      *this, "shares",
      llvm::cl::desc("Uneven split: one positive share per rank (--htp-tensor-parallel's "
                     "shares; empty: even)")};
  Option<int64_t> spare{
      *this, "spare",
      llvm::cl::desc("Spare room per rank, in percent of the most units any rank owns "
                     "(--htp-tensor-parallel's spare, 0 to 1000; 0: none)"),
      llvm::cl::init(0)};
  Option<bool> hooks{*this, "hooks",
                     llvm::cl::desc("With tp > 1, add the balance hooks (--htp-balance-hooks) so "
                                    "the runtime can prune or migrate work units"),
                     llvm::cl::init(true)};
  Option<bool> grad{*this, "grad",
                    llvm::cl::desc("Add @F_grad, the backward of each public function whose "
                                   "result #0 is an htp.cross_entropy loss (--htp-grad; a module "
                                   "without one is unchanged)"),
                    llvm::cl::init(true)};
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("Fold each single-use linear's GELU into it "
                                   "(--htp-fuse-linear-gelu) and each residual add into the "
                                   "single-use linear or attention it reads "
                                   "(--htp-fuse-residual)"),
                    llvm::cl::init(true)};
};

/// Adds the whole chain (htp on tensors → LLVM dialect) to `pm`: what
/// `htp-opt --htp-pipeline`, the JIT and htp-compile all run.
void buildHTPPipeline(OpPassManager &pm, const HTPPipelineOptions &options = {});

/// Registers every htp pass and the `htp-pipeline` pipeline.
void registerHTPPassesAndPipeline();

} // namespace mlir::htp

#endif // HTP_PASSES_PASSES_H
