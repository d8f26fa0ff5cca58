//===- Pipeline.cpp - The htp-pipeline named pipeline ---------------------===//
//
// One name for the whole chain, so users need not know the pass order
// (DESIGN §1): `--htp-pipeline=tp=4` splits over 4 ranks, writes the
// backward of each loss function (`grad=false` leaves it out) and adds the
// balance hooks (`hooks=false` leaves them out).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void htp::buildHTPPipeline(OpPassManager &pm,
                           const HTPPipelineOptions &options) {
  if (options.tp > 1) {
    HTPTensorParallelOptions split;
    split.tp = options.tp;
    pm.addNestedPass<func::FuncOp>(htp::createHTPTensorParallel(split));
  }
  // After the split, so the backward is the split forward's (Megatron's
  // conjugates); before the hooks, which leave the backward alone.
  if (options.grad)
    pm.addPass(htp::createHTPGrad());
  if (options.tp > 1 && options.hooks)
    pm.addNestedPass<func::FuncOp>(htp::createHTPBalanceHooks());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
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
      "write the "
      "backward of each cross-entropy loss function (--htp-grad), add the "
      "balance hooks (--htp-balance-hooks) when tp > 1, place every value in a "
      "buffer or "
      "the workspace (--htp-assign-workspace), then htp ops on tensors to "
      "LLVM-dialect "
      "entry points (--htp-lower-to-runtime)",
      [](OpPassManager &pm, const HTPPipelineOptions &options) {
        buildHTPPipeline(pm, options);
      });
}
