//===- htp-opt.cpp - mlir-opt with the htp dialect and passes -------------===//
//
// The upstream dialects and passes stay available, so htp IR can be mixed
// with and inspected by everything mlir-opt offers.
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPDialect.h"
#include "passes/Passes.h"
#include "tools/compiler/Nesting.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::htp::registerHTPPassesAndPipeline();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  registry.insert<mlir::htp::HTPDialect>();
  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv, "htp-opt: the HTP optimizer driver\n", registry);
  // mlir-opt reads its input whole: a device or a pipe named as the input
  // would be read until memory runs out ("-" stays stdin).
  llvm::sys::fs::file_status status;
  if (input != "-" && !llvm::sys::fs::status(input, status) &&
      !llvm::sys::fs::is_regular_file(status)) {
    llvm::errs() << "htp-opt: error: '" << input
                 << "' is not a regular file (a directory, device or pipe?)\n";
    return 1;
  }
  // Nesting deep enough to overflow the parser's stack is refused first
  // (a regular file: stdin would be consumed).
  if (input != "-" && llvm::sys::fs::is_regular_file(status)) {
    auto buffer = llvm::MemoryBuffer::getFile(input);
    std::string deep = buffer ? mlir::htp::nestingProblem((*buffer)->getBuffer()) : "";
    if (!deep.empty()) {
      llvm::errs() << "htp-opt: error: " << input << ": " << deep << "\n";
      return 1;
    }
  }
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, input, output, registry));
}
