//===- htp-opt.cpp - mlir-opt with the htp dialect and passes -------------===//
//
// The upstream dialects and passes stay available, so htp IR can be mixed
// with and inspected by everything mlir-opt offers.
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPDialect.h"
#include "passes/Passes.h"
#include "tools/compiler/HelpPrefix.h"
#include "tools/compiler/Nesting.h"
#include "tools/compiler/OutOfMemory.h"
#include "tools/compiler/OutputFile.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <unistd.h>

int main(int argc, char **argv) {
  // Memory short: the -o file being written (a ToolOutputFile, removed on
  // a signal) goes too.
  mlir::htp::exitOnOutOfMemory("htp-opt", [] { llvm::sys::RunInterruptHandlers(); });
  mlir::registerAllPasses();
  mlir::htp::registerHTPPassesAndPipeline();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  registry.insert<mlir::htp::HTPDialect>();
  if (std::string unknown = mlir::htp::unknownHelpPrefixedOption(
          argc, argv,
          [](llvm::StringRef name) {
            return mlir::PassInfo::lookup(name) || mlir::PassPipelineInfo::lookup(name);
          });
      !unknown.empty()) {
    llvm::errs() << "htp-opt: error: unknown option '" << unknown
                 << "' (see htp-opt --help; a pass is --NAME)\n";
    return 1;
  }
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
  // MLIR prints the op in generic form after each error (a whole function
  // for a refused split: 16 lines for one bad option); the message and its
  // source line say it, as htp-compile's and htp-run's do.
  // --mlir-print-op-on-diagnostic brings it back.
  const auto &registered = llvm::cl::getRegisteredOptions();
  if (auto it = registered.find("mlir-print-op-on-diagnostic");
      it != registered.end() && !it->second->getNumOccurrences())
    it->second->addOccurrence(0, it->first, "false");
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // A pass option MLIR cannot parse is said at an unknown location, with an
  // empty message where llvm::cl printed the reason itself just before
  // ("<unknown>:0: error: "): said here as htp-opt's error instead.
  config.setPassPipelineSetupFn([base = config](mlir::PassManager &pm) {
    mlir::ScopedDiagnosticHandler options(pm.getContext(), [](mlir::Diagnostic &d) {
      if (d.getSeverity() != mlir::DiagnosticSeverity::Error ||
          !llvm::isa<mlir::UnknownLoc>(d.getLocation()))
        return mlir::failure();
      const std::string message = d.str();
      llvm::StringRef why = llvm::StringRef(message).trim();
      why.consume_front("<Pass-Options-Parser>: ");
      llvm::errs() << (why.contains("error: ") ? "htp-opt: " : "htp-opt: error: ")
                   << (why.empty() ? llvm::StringRef("a pass option's value is invalid (said above)")
                                   : why)
                   << "\n";
      return mlir::success();
    });
    return base.setupPassPipeline(pm);
  });
  if (config.shouldShowDialects() || config.shouldListPasses()) // no input, no output
    return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, input, output, registry));
  // The input is read whole here, up to its end (a procfs file says size 0),
  // once: nesting deep enough to overflow the parser's stack is refused
  // first, then MLIR parses this same buffer.
  if (input == "-" && isatty(STDIN_FILENO))
    llvm::errs() << "htp-opt: reading the input from stdin (end it with ctrl-d)\n";
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> read =
      input == "-" ? llvm::MemoryBuffer::getSTDIN() : llvm::MemoryBuffer::getFileAsStream(input);
  if (!read) {
    llvm::errs() << "htp-opt: error: cannot read "
                 << (input == "-" ? std::string("stdin") : "'" + input + "'") << ": "
                 << read.getError().message() << "\n";
    return 1;
  }
  std::unique_ptr<llvm::MemoryBuffer> text = std::move(*read);
  if (std::string deep = mlir::htp::nestingProblem(text->getBuffer()); !deep.empty()) {
    llvm::errs() << "htp-opt: error: " << (input == "-" ? "<stdin>" : input) << ": " << deep
                 << "\n";
    return 1;
  }
  // -o is written beside it and renamed over it once complete: a failed run
  // (bad IR, a full disk, a file-size limit) keeps the old file, the input
  // too when -o names it. A device (-o /dev/null) is written in place.
  if (std::string problem = mlir::htp::outputProblem(output, /*allowDevices=*/true);
      output != "-" && !problem.empty()) {
    llvm::errs() << "htp-opt: error: -o " << problem << "\n";
    return 1;
  }
  mlir::htp::reportFileSizeLimit();
  llvm::sys::fs::file_status outputStatus;
  const bool inPlace = output == "-" || (!llvm::sys::fs::status(output, outputStatus) &&
                                         llvm::sys::fs::exists(outputStatus) &&
                                         !llvm::sys::fs::is_regular_file(outputStatus));
  const std::string written = inPlace ? output : mlir::htp::temporaryBeside(output);
  if (!inPlace)
    llvm::sys::RemoveFileOnSignal(written); // a signal or memory short: removed
  auto failed = [&](const std::string &why) {
    if (!why.empty())
      llvm::errs() << "htp-opt: error: " << why << "\n";
    if (!inPlace)
      llvm::sys::fs::remove(written);
    return 1;
  };
  std::error_code code;
  llvm::raw_fd_ostream os(written, code, llvm::sys::fs::OF_None);
  if (code)
    return failed("cannot write " + written + ": " + code.message());
  const bool ok = mlir::succeeded(mlir::MlirOptMain(os, std::move(text), registry, config));
  os.close();
  // A write that failed (a full disk, a file-size limit) said here, once;
  // left set, the stream would end the process with LLVM's fatal error.
  if (os.has_error()) {
    std::string why = "writing " + output + ": " + os.error().message();
    os.clear_error();
    return failed(why);
  }
  if (!ok)
    return failed("");
  if (!inPlace) {
    if (std::error_code renamed = llvm::sys::fs::rename(written, output))
      return failed("cannot rename " + written + " over " + output + ": " + renamed.message());
  }
  return 0;
}
