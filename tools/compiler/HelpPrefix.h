//===- tools/compiler/HelpPrefix.h - An unknown -h... option is not --help ===//
//
// LLVM's command line takes `-h` as a grouping flag: an unknown option that
// starts with h (a misspelled pass, `--htp-pipline=tp=2`, or `--hooks`)
// was read as -h followed by others, printed the whole help to stdout and
// exited 0 without writing -o. Before LLVM parses, htp-opt and htp-compile
// look up each such option's name among the registered ones and refuse one
// that is not there. Header-only: both tools include it.
//
//===----------------------------------------------------------------------===//
#ifndef HTP_TOOLS_COMPILER_HELP_PREFIX_H
#define HTP_TOOLS_COMPILER_HELP_PREFIX_H

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

#include <string>

namespace mlir::htp {

/// The first argument before `--` that names an option starting with h
/// (after its dashes, up to '=') that no registered option has and
/// `alsoKnown` does not know (htp-opt's passes, whose options MLIR
/// registers as it parses), or "".
inline std::string
unknownHelpPrefixedOption(int argc, char **argv,
                          llvm::function_ref<bool(llvm::StringRef)> alsoKnown = nullptr) {
  const auto &known = llvm::cl::getRegisteredOptions();
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--")
      break;
    if (!arg.starts_with("-"))
      continue;
    llvm::StringRef name = arg.drop_front(arg.starts_with("--") ? 2 : 1).split('=').first;
    if (llvm::is_contained({"h", "help", "help-hidden", "help-list", "help-list-hidden"},
                           name)) // LLVM's own, registered as it parses
      continue;
    if (name.starts_with("h") && !known.count(name) && !(alsoKnown && alsoKnown(name)))
      return arg.str();
  }
  return "";
}

} // namespace mlir::htp

#endif // HTP_TOOLS_COMPILER_HELP_PREFIX_H
