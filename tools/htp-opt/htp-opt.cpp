//===- htp-opt.cpp - mlir-opt with the htp dialect and passes -------------===//
//
// The upstream dialects and passes stay available, so htp IR can be mixed
// with and inspected by everything mlir-opt offers.
//
//===----------------------------------------------------------------------===//

#include "dialect/HTPDialect.h"
#include "passes/Passes.h"
#include "tools/compiler/Nesting.h"
#include "tools/compiler/OutOfMemory.h"
#include "tools/compiler/OutputFile.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

/// Puts `text` back as stdin (a memory file at offset 0), once it has been
/// read for the nesting scan.
static bool restoreStdin(llvm::StringRef text) {
  int fd = memfd_create("htp-opt-stdin", MFD_CLOEXEC);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  ok = ok && lseek(fd, 0, SEEK_SET) == 0 && dup2(fd, STDIN_FILENO) == STDIN_FILENO;
  if (!ok)
    llvm::errs() << "htp-opt: error: holding stdin: " << strerror(errno) << "\n";
  if (fd >= 0)
    close(fd);
  return ok;
}

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
  // Nesting deep enough to overflow the parser's stack is refused first.
  // Stdin (not a terminal: a person typing is no threat and --help must not
  // wait) is read whole here and handed on as a memory file in its place,
  // so MLIR still reads "<stdin>".
  std::unique_ptr<llvm::MemoryBuffer> text;
  if (input != "-" && llvm::sys::fs::is_regular_file(status)) {
    auto buffer = llvm::MemoryBuffer::getFile(input);
    if (buffer)
      text = std::move(*buffer);
  } else if (input == "-" && !isatty(STDIN_FILENO)) {
    auto buffer = llvm::MemoryBuffer::getSTDIN();
    if (!buffer) {
      llvm::errs() << "htp-opt: error: reading stdin: " << buffer.getError().message() << "\n";
      return 1;
    }
    text = std::move(*buffer);
    if (!restoreStdin(text->getBuffer()))
      return 1;
  }
  std::string deep = text ? mlir::htp::nestingProblem(text->getBuffer()) : "";
  text.reset(); // MLIR reads its own copy: not held twice through the compile
  if (!deep.empty()) {
    llvm::errs() << "htp-opt: error: " << (input == "-" ? "<stdin>" : input) << ": " << deep
                 << "\n";
    return 1;
  }
  // -o is written beside it and renamed over it once complete: a failed run
  // (bad IR, a full disk, a file-size limit) keeps the old file, the input
  // too when -o names it. A device (-o /dev/null) is written in place.
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses()) // no input, no output
    return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, input, output, registry));
  if (std::string problem = mlir::htp::outputProblem(output, /*allowDevices=*/true);
      output != "-" && !problem.empty()) {
    llvm::errs() << "htp-opt: error: -o " << problem << "\n";
    return 1;
  }
  std::string message;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &message);
  if (!file) {
    llvm::errs() << "htp-opt: error: " << message << "\n";
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
  const bool ok = mlir::succeeded(mlir::MlirOptMain(os, std::move(file), registry, config));
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
