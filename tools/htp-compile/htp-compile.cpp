//===- htp-compile.cpp - Ahead-of-time compile an htp block to a .so ------===//
//
// The same pipeline as htp-run's JIT, but through the host target machine
// into a shared object that `htp-run block.so` (built with or without MLIR)
// loads with dlopen. This is how a compiled block reaches a machine that has
// no MLIR, such as a GPU box (DESIGN §7).
//
//===----------------------------------------------------------------------===//

#include "tools/compiler/Compiler.h"

#include "runtime/htp_entry.h"
#include "tools/compiler/HelpPrefix.h"
#include "tools/compiler/OutOfMemory.h"
#include "tools/compiler/OutputFile.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Signals.h"
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
static cl::opt<std::string> tensorParallel("tp",
                                       cl::desc("Split the block over N tensor-parallel ranks "
                                                "(default: one per --shares, else 1: "
                                                "unsharded)"),
                                       cl::value_desc("N"), cl::cat(htpCategory));
static cl::list<std::string> shareTexts("shares",
                                cl::desc("Uneven split: one positive share per rank, e.g. "
                                         "--shares=3,3,2,1 with --tp 4 (heads and MLP units "
                                         "in proportion, whole units)"),
                                cl::CommaSeparated, cl::value_desc("S,S,..."),
                                cl::cat(htpCategory));
static cl::opt<std::string> spareText("spare",
                             cl::desc("Spare room per rank: P percent (0 to 1000, default 0) "
                                      "more slots of each kind than the most units any rank "
                                      "owns, rounded up to whole units; with --tp 2 or more, "
                                      "with or without --shares"),
                             cl::value_desc("P"), cl::cat(htpCategory));
static cl::opt<bool> withGrad("grad",
                              cl::desc("Also compile NAME_grad, the backward of each function "
                                       "whose result #0 is an htp.cross_entropy loss (--htp-grad; "
                                       "default on, --grad=false leaves it out)"),
                              cl::init(true), cl::cat(htpCategory));
static cl::opt<std::string> emitKind("emit", cl::desc("What to write: so (default) or obj"),
                                     cl::init("so"), cl::cat(htpCategory));
static cl::opt<std::string> linker("cc", cl::desc("C compiler used to link the shared object"),
                                   cl::init("cc"), cl::cat(htpCategory));

/// A bad command line: said once, exit 2 (a failed compile is 1).
static int usage(const llvm::Twine &message) {
  llvm::errs() << "htp-compile: error: " << message << "\n";
  return 2;
}

/// A flag's number, in decimal only as htp-run reads them (LLVM's own
/// parser took --tp=010 as octal 8 and 0x10 as hex); false for anything else.
static bool decimal(llvm::StringRef text, int64_t &value) {
  llvm::StringRef digits = text.starts_with("-") ? text.drop_front() : text;
  return !digits.empty() && digits.size() <= 18 && llvm::all_of(digits, llvm::isDigit) &&
         !text.getAsInteger(10, value);
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // Memory short: the temporaries (registered below) go, exit 1.
  mlir::htp::exitOnOutOfMemory("htp-compile", [] { llvm::sys::RunInterruptHandlers(); });
  cl::HideUnrelatedOptions(htpCategory);
  if (std::string unknown = mlir::htp::unknownHelpPrefixedOption(argc, argv); !unknown.empty())
    return usage("unknown option '" + unknown + "' (see htp-compile --help)");
  // Errors said here and exit 2 (LLVM's default exits 1: a failed compile).
  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "htp-compile: compile an htp block ahead of time\n\n"
                                   "  htp-compile block.mlir -o block.so && htp-run block.so\n\n"
                                   "Exit status: 0 written, 1 the block did not compile or link, "
                                   "2 a bad command line.\n",
                                   &llvm::errs()))
    return 2;
  // A flag given twice is a mistake, not the last one winning (--shares
  // twice would join its lists), as htp-run says.
  cl::Option *const once[] = {&outputPath, &entryName, &tensorParallel, &spareText,
                              &withGrad,   &emitKind,  &linker};
  for (cl::Option *option : once)
    if (option->getNumOccurrences() > 1)
      return usage("-" + std::string(option->ArgStr.size() > 1 ? "-" : "") +
                   option->ArgStr.str() + " is given more than once");
  for (unsigned i = 1; i < shareTexts.size(); ++i) // each value of one list has its position
    if (shareTexts.getPosition(i) != shareTexts.getPosition(0))
      return usage("--shares is given more than once");
  if (outputPath.empty())
    return usage("-o names no file");
  if (emitKind != "so" && emitKind != "obj")
    return usage("--emit must be 'so' or 'obj', got '" + emitKind + "'");
  int64_t tp = 1, spare = 0;
  if (tensorParallel.getNumOccurrences() && !decimal(tensorParallel, tp))
    return usage("--tp takes a whole number in decimal, got '" + tensorParallel + "'");
  if (spareText.getNumOccurrences() && !decimal(spareText, spare))
    return usage("--spare takes a whole number in decimal, got '" + spareText + "'");
  llvm::SmallVector<int64_t> shares;
  for (const std::string &text : shareTexts)
    if (!decimal(text, shares.emplace_back()))
      return usage("--shares takes whole numbers in decimal, got '" + text + "'");
  // As htp-run: --shares alone gives one rank per share.
  if (!tensorParallel.getNumOccurrences() && !shares.empty())
    tp = static_cast<int64_t>(shares.size());
  if (tp < 1 || tp > HTP_ENTRY_MAX_TP)
    return usage("--tp must be from 1 to " + llvm::Twine(int64_t(HTP_ENTRY_MAX_TP)) + ", got " +
                 llvm::Twine(tp));
  if (!shares.empty() && static_cast<int64_t>(shares.size()) != tp)
    return usage("--shares gives " + llvm::Twine(static_cast<int64_t>(shares.size())) +
                 " shares for --tp " + llvm::Twine(tp) + ": one per rank");
  if (spare < 0 || spare > 1000)
    return usage("--spare must be from 0 to 1000 (percent), got " + llvm::Twine(spare));
  if (spare > 0 && tp < 2)
    return usage("--spare=" + llvm::Twine(spare) +
                 " is room in a tensor-parallel split: it needs --tp 2 or more (or --shares)");
  for (int64_t share : shares)
    if (share < 1 || share > HTP_ENTRY_MAX_SHARD_UNITS)
      return usage("--shares: each share must be from 1 to " +
                   llvm::Twine(int64_t(HTP_ENTRY_MAX_SHARD_UNITS)) + ", got " +
                   llvm::Twine(share));
  if (entryName.getNumOccurrences() && entryName.empty())
    return usage("--entry needs a function name");
  if (linker.empty())
    return usage("--cc needs a C compiler's name or path");
  // The output must not be the input under another name: compared as files.
  llvm::sys::fs::UniqueID in, out;
  if (!llvm::sys::fs::getUniqueID(inputPath, in) && !llvm::sys::fs::getUniqueID(outputPath, out) &&
      in == out)
    return usage("-o " + outputPath + " is the input file " + inputPath +
                 ": the compile would overwrite it");
  // Written beside it and renamed over it: only a regular file, or nothing
  // yet, is replaced.
  if (std::string problem = mlir::htp::outputProblem(outputPath, /*allowDevices=*/false);
      !problem.empty())
    return usage("-o " + problem);
  mlir::htp::reportFileSizeLimit();

  auto context = mlir::htp::makeCompilerContext();
  std::string entry = entryName, errors;
  auto module = mlir::htp::compileFile(*context, inputPath, entry, errors, tp, withGrad, shares,
                                       spare);
  // On success too: warnings (e.g. a bf16 block left without balance hooks).
  llvm::errs() << errors;
  if (!module)
    return 1;

  const std::string written = mlir::htp::temporaryBeside(outputPath);
  llvm::sys::RemoveFileOnSignal(written); // a signal or memory short: removed
  std::string objectPath = written;
  if (emitKind == "so") {
    llvm::SmallString<128> temporary;
    if (std::error_code code = llvm::sys::fs::createTemporaryFile("htp-block", "o", temporary)) {
      llvm::errs() << "htp-compile: error: cannot create a temporary file: " << code.message()
                   << "\n";
      return 1;
    }
    objectPath = temporary.str().str();
    llvm::sys::RemoveFileOnSignal(objectPath);
  }
  if (!mlir::htp::emitObjectFile(*module, objectPath, errors)) {
    llvm::errs() << "htp-compile: error: " << errors;
    return 1;
  }
  if (emitKind == "so") {
    // The kernel and runtime symbols stay undefined: htp-run provides them.
    auto cc = llvm::sys::findProgramByName(linker);
    if (!cc) {
      llvm::sys::fs::remove(objectPath);
      llvm::errs() << "htp-compile: error: cannot find the C compiler '" << linker
                   << "' to link the shared object (use --emit=obj, or --cc)\n";
      return 1;
    }
    llvm::SmallVector<llvm::StringRef> args = {*cc, "-shared", "-o", written, objectPath};
    std::string message;
    int status = llvm::sys::ExecuteAndWait(*cc, args, std::nullopt, {}, 0, 0, &message);
    llvm::sys::fs::remove(objectPath);
    if (status != 0) {
      llvm::sys::fs::remove(written);
      llvm::errs() << "htp-compile: error: linking '" << outputPath << "' failed"
                   << (message.empty() ? "" : ": " + message) << "\n";
      return 1;
    }
    if (!llvm::sys::fs::exists(written)) {
      llvm::errs() << "htp-compile: error: linking '" << outputPath << "': the C compiler '"
                   << *cc << "' exited 0 but wrote no shared object\n";
      return 1;
    }
  }
  if (std::error_code code = llvm::sys::fs::rename(written, outputPath)) {
    llvm::sys::fs::remove(written);
    llvm::errs() << "htp-compile: error: cannot rename " << written << " over " << outputPath
                 << ": " << code.message() << "\n";
    return 1;
  }
  return 0;
}
