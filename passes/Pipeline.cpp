//===- Pipeline.cpp - The htp-pipeline named pipeline ---------------------===//
//
// One name for the whole chain, so users need not know the pass order
// (DESIGN §1): `--htp-pipeline=tp=4` splits over 4 ranks, adds the balance
// hooks (`hooks=false` leaves them out) and writes the backward of each
// loss function (`grad=false` leaves it out), whose adjoints of the hooked
// ops are hooked too (DESIGN §11), then folds each single-use linear's GELU
// into it (`fuse=false` leaves them apart).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void htp::buildHTPPipeline(OpPassManager &pm,
                           const HTPPipelineOptions &options) {
  // At every tp: at tp 1 the split pass only checks tp, shares and spare
  // (a tp of 0, or shares at tp 1, is an error rather than an unsplit block).
  {
    HTPTensorParallelOptions split;
    split.tp = options.tp;
    split.shares.assign(options.shares.begin(), options.shares.end());
    split.spare = options.spare;
    pm.addPass(htp::createHTPTensorParallel(split));
  }
  if (options.tp > 1 && options.hooks)
    pm.addNestedPass<func::FuncOp>(htp::createHTPBalanceHooks());
  // After the split, so the backward is the split forward's (Megatron's
  // conjugates), and after the hooks, so it is the hooked forward's: a
  // hooked attention or MLP gets the backward hook as its adjoint. (The
  // hooks pass leaves a function already marked htp.backward alone.)
  if (options.grad)
    pm.addPass(htp::createHTPGrad());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // After the passes that match or differentiate the unfused pair.
  if (options.fuse) {
    pm.addNestedPass<func::FuncOp>(htp::createHTPFuseLinearGelu());
    pm.addNestedPass<func::FuncOp>(htp::createHTPFuseResidual());
  }
  pm.addNestedPass<func::FuncOp>(htp::createHTPAssignWorkspace());
  pm.addPass(htp::createHTPLowerToRuntime());
  pm.addPass(
      createCSEPass()); // the lowering materialises each constant where used
}

void htp::registerHTPPassesAndPipeline() {
  registerHTPPasses();
  PassPipelineRegistration<HTPPipelineOptions>(
      "htp-pipeline",
      "Run the whole htp chain: split over tp ranks (--htp-tensor-parallel), "
      "add the balance hooks (--htp-balance-hooks) when tp > 1, write the "
      "backward of each cross-entropy loss function, hooked where its forward "
      "is (--htp-grad), fold single-use linears' GELUs into them "
      "(--htp-fuse-linear-gelu) and residual adds into the linears, attentions, "
      "bias adds and all-reduces that feed them, bias adds and layer norms into the "
      "all-reduces they read, a split block's first norm shared among its ranks "
      "(--htp-fuse-residual), place every value in a buffer or the workspace "
      "(--htp-assign-workspace), then htp ops on tensors to LLVM-dialect "
      "entry points (--htp-lower-to-runtime)",
      [](OpPassManager &pm, const HTPPipelineOptions &options) {
        buildHTPPipeline(pm, options);
      });
}
