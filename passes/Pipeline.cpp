//===- Pipeline.cpp - The htp-pipeline named pipeline ---------------------===//
//
// One name for the whole chain, so users need not know the pass order
// (DESIGN §1). Later stages (tensor-parallel split, balance hooks) slot in
// before the lowering.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void htp::buildHTPPipeline(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(htp::createHTPLowerToRuntime());
  pm.addPass(createCSEPass()); // the lowering materialises each constant where used
}

void htp::registerHTPPassesAndPipeline() {
  registerHTPPasses();
  PassPipelineRegistration<>("htp-pipeline",
                             "Run the whole htp chain: htp ops on tensors to LLVM-dialect "
                             "entry points (see --htp-lower-to-runtime)",
                             [](OpPassManager &pm) { buildHTPPipeline(pm); });
}
