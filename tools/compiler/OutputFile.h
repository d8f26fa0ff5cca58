//===- tools/compiler/OutputFile.h - -o written whole, or not at all ------===//
//
// htp-opt and htp-compile write their -o file beside it and rename it over
// it only once it is complete, so a run that fails (bad IR, a full disk, a
// file-size limit) keeps the old file, the input included when -o names
// it. Header-only, as Nesting.h.
//
//===----------------------------------------------------------------------===//
#ifndef HTP_TOOLS_COMPILER_OUTPUT_FILE_H
#define HTP_TOOLS_COMPILER_OUTPUT_FILE_H

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <csignal>
#include <string>

namespace mlir::htp {

/// Where the output goes while it is written: `path`.tmp, whatever had that
/// name (a stale temporary, a symlink) removed, not written through.
inline std::string temporaryBeside(const std::string &path) {
  std::string temporary = path + ".tmp";
  llvm::sys::fs::remove(temporary);
  return temporary;
}

/// Why -o `path` cannot be written by rename, or "": a directory at
/// `path`.tmp, at `path` a directory, a FIFO
/// or a socket (a FIFO without a reader would hang the write), and, unless
/// `allowDevices`, a device (renaming over it would replace it: as root,
/// /dev/null). A missing file or a regular one is fine where its folder is
/// there and writable.
inline std::string outputProblem(const std::string &path, bool allowDevices) {
  llvm::sys::fs::file_status status;
  // The temporary's name holds a directory: removing it would fail, and the
  // write after it.
  if (!llvm::sys::fs::status(path + ".tmp", status, /*follow=*/false) &&
      status.type() == llvm::sys::fs::file_type::directory_file)
    return path + ".tmp is a directory, where the output is written before it is renamed "
                  "over its name: remove it or write elsewhere";
  if (llvm::sys::fs::status(path, status) || !llvm::sys::fs::exists(status) ||
      status.type() == llvm::sys::fs::file_type::regular_file) {
    // The temporary goes beside it: its folder must be there, and
    // writable, before any work is done.
    std::string folder = llvm::sys::path::parent_path(path).str();
    if (folder.empty())
      folder = ".";
    if (!llvm::sys::fs::is_directory(folder))
      return path + ": its folder " + folder + " does not exist";
    if (llvm::sys::fs::access(folder, llvm::sys::fs::AccessMode::Write))
      return path + ": its folder " + folder + " is not writable";
    return "";
  }
  if (status.type() == llvm::sys::fs::file_type::directory_file)
    return path + " is a directory";
  if (allowDevices && (status.type() == llvm::sys::fs::file_type::character_file ||
                       status.type() == llvm::sys::fs::file_type::block_file))
    return "";
  return path + " is not a regular file (a " + (allowDevices ? "" : "device, ") +
         "FIFO or socket): refusing to " + (allowDevices ? "write" : "replace") + " it";
}

/// A file-size limit (ulimit -f) makes a write fail with EFBIG, which the
/// tools report, instead of killing them with SIGXFSZ half way.
inline void reportFileSizeLimit() { std::signal(SIGXFSZ, SIG_IGN); }

} // namespace mlir::htp

#endif // HTP_TOOLS_COMPILER_OUTPUT_FILE_H
