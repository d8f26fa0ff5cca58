//===- tools/compiler/OutOfMemory.h - Memory short: an error, not a crash -===//
//
// LLVM and MLIR are built without exceptions: memory running short (under
// `ulimit -v`, say) in the parser or a pass ended the tools with "LLVM
// ERROR: out of memory", a stack dump and SIGABRT, and a thread LLVM could
// not start ("pthread_create failed") the same way. The tools install these
// handlers instead, for LLVM's own allocations, (through LLVM's new-handler)
// every C++ `new` in the process, and LLVM's fatal errors: each says why,
// lets the caller remove what it was writing, and exits 1. Header-only:
// htp-opt and the compiler library both include it.
//
//===----------------------------------------------------------------------===//
#ifndef HTP_TOOLS_COMPILER_OUT_OF_MEMORY_H
#define HTP_TOOLS_COMPILER_OUT_OF_MEMORY_H

#include "llvm/Support/ErrorHandling.h"

#include <cstring>
#include <unistd.h>

namespace mlir::htp {

namespace detail {
inline const char *outOfMemoryTool = "htp";
inline void (*outOfMemoryCleanup)(void) = nullptr;

/// Allocates nothing: fixed pieces written to stderr, then _exit.
inline void writeError(const char *text) {
  for (size_t left = std::strlen(text); left > 0;) {
    ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0)
      return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}
[[noreturn]] inline void fail(const char *what, const char *reason, const char *hint) {
  writeError(outOfMemoryTool);
  writeError(what);
  writeError(reason);
  writeError(hint);
  if (outOfMemoryCleanup)
    outOfMemoryCleanup();
  ::_exit(1);
}
inline void outOfMemory(void *, const char *reason, bool) {
  fail(": error: out of memory (", reason ? reason : "an allocation failed",
       "): the process may not take more memory (ulimit -v, or the machine's)\n");
}
inline void fatalError(void *, const char *reason, bool) {
  fail(": error: LLVM: ", reason ? reason : "a fatal error", "\n");
}
} // namespace detail

/// From here on memory running short in LLVM, MLIR or any C++ `new` is
/// "TOOL: error: out of memory (...)", an LLVM fatal error "TOOL: error:
/// LLVM: ...", each exit status 1 after `cleanup` (NULL: none; it must be
/// async-signal-safe, like a signal handler's). Idempotent.
inline void exitOnOutOfMemory(const char *tool, void (*cleanup)(void) = nullptr) {
  static bool installed = false;
  detail::outOfMemoryTool = tool;
  detail::outOfMemoryCleanup = cleanup;
  if (installed)
    return;
  installed = true;
  llvm::install_bad_alloc_error_handler(detail::outOfMemory);
  llvm::install_out_of_memory_new_handler();
  llvm::install_fatal_error_handler(detail::fatalError);
}

} // namespace mlir::htp

#endif // HTP_TOOLS_COMPILER_OUT_OF_MEMORY_H
