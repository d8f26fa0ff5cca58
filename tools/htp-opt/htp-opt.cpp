//===- htp-opt.cpp - mlir-opt with the htp dialect and passes -------------===//
//
// The upstream dialects and passes stay available, so htp IR can be mixed
// with and inspected by everything mlir-opt offers.
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPDialect.h"
#include "passes/Passes.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::htp::registerHTPPassesAndPipeline();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  registry.insert<mlir::htp::HTPDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "htp-opt: the HTP optimizer driver\n", registry));
}
