//===- htp-compile.cpp - Ahead-of-time compile an htp block to a .so ------===//
//
// The same pipeline as htp-run's JIT, but through the host target machine
// into a shared object that `htp-run block.so` (built with or without MLIR)
// loads with dlopen. This is how a compiled block reaches a machine that has
// no MLIR, such as a GPU box (DESIGN §7).
//
//===----------------------------------------------------------------------===//

#include "tools/compiler/Compiler.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

static cl::OptionCategory htpCategory("htp-compile options");

static cl::opt<std::string> inputPath(cl::Positional, cl::desc("<block.mlir>"), cl::cat(htpCategory), cl::Required);
static cl::opt<std::string> outputPath("o", cl::desc("Output: a shared object (.so), or an "
                                                     "object file (.o) with --emit=obj"),
                                       cl::value_desc("file"), cl::Required, cl::cat(htpCategory));
static cl::opt<std::string> entryName("entry",
                                      cl::desc("Entry function (default: the only public one)"),
                                      cl::value_desc("name"), cl::cat(htpCategory));
static cl::opt<int64_t> tensorParallel("tp",
                                       cl::desc("Split the block over N tensor-parallel ranks "
                                                "(default 1: unsharded)"),
                                       cl::value_desc("N"), cl::init(1), cl::cat(htpCategory));
static cl::list<int64_t> shares("shares",
                                cl::desc("Uneven split: one positive share per rank, e.g. "
                                         "--shares=3,3,2,1 with --tp 4 (heads and MLP units "
                                         "in proportion, whole units)"),
                                cl::CommaSeparated, cl::value_desc("S,S,..."),
                                cl::cat(htpCategory));
static cl::opt<int64_t> spare("spare",
                             cl::desc("Spare room per rank: P percent (0 to 1000, default 0) "
                                      "more slots of each kind than the most units any rank "
                                      "owns, rounded up to whole units; with --tp 2 or more, "
                                      "with or without --shares"),
                             cl::value_desc("P"), cl::init(0), cl::cat(htpCategory));
static cl::opt<bool> withGrad("grad",
                              cl::desc("Also compile NAME_grad, the backward of each function "
                                       "whose result #0 is an htp.cross_entropy loss (--htp-grad; "
                                       "default on, --grad=false leaves it out)"),
                              cl::init(true), cl::cat(htpCategory));
static cl::opt<std::string> emitKind("emit", cl::desc("What to write: so (default) or obj"),
                                     cl::init("so"), cl::cat(htpCategory));
static cl::opt<std::string> linker("cc", cl::desc("C compiler used to link the shared object"),
                                   cl::init("cc"), cl::cat(htpCategory));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(htpCategory);
  cl::ParseCommandLineOptions(argc, argv,
                              "htp-compile: compile an htp block ahead of time\n\n"
                              "  htp-compile block.mlir -o block.so && htp-run block.so\n");
  if (emitKind != "so" && emitKind != "obj") {
    llvm::errs() << "htp-compile: error: --emit must be 'so' or 'obj', got '" << emitKind << "'\n";
    return 2;
  }

  auto context = mlir::htp::makeCompilerContext();
  std::string entry = entryName, errors;
  auto module = mlir::htp::compileFile(*context, inputPath, entry, errors, tensorParallel,
                                       withGrad, shares, spare);
  // On success too: warnings (e.g. a bf16 block left without balance hooks).
  llvm::errs() << errors;
  if (!module)
    return 1;

  std::string objectPath = outputPath;
  if (emitKind == "so") {
    llvm::SmallString<128> temporary;
    if (std::error_code code = llvm::sys::fs::createTemporaryFile("htp-block", "o", temporary)) {
      llvm::errs() << "htp-compile: error: cannot create a temporary file: " << code.message()
                   << "\n";
      return 1;
    }
    objectPath = temporary.str().str();
  }
  if (!mlir::htp::emitObjectFile(*module, objectPath, errors)) {
    llvm::errs() << "htp-compile: error: " << errors;
    return 1;
  }
  if (emitKind == "obj")
    return 0;

  // The kernel and runtime symbols stay undefined: htp-run provides them.
  auto cc = llvm::sys::findProgramByName(linker);
  if (!cc) {
    llvm::errs() << "htp-compile: error: cannot find the C compiler '" << linker
                 << "' to link the shared object (use --emit=obj, or --cc)\n";
    return 1;
  }
  llvm::SmallVector<llvm::StringRef> args = {*cc, "-shared", "-o", outputPath, objectPath};
  std::string message;
  int status = llvm::sys::ExecuteAndWait(*cc, args, std::nullopt, {}, 0, 0, &message);
  llvm::sys::fs::remove(objectPath);
  if (status != 0) {
    llvm::errs() << "htp-compile: error: linking '" << outputPath << "' failed"
                 << (message.empty() ? "" : ": " + message) << "\n";
    return 1;
  }
  return 0;
}
