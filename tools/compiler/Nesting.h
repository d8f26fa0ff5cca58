//===- tools/compiler/Nesting.h - How deep a text's brackets go -----------===//
//
// MLIR's parser recurses once per nested region, attribute list or type:
// 5,000 nested `module {` (a 55 KB file) overflowed its stack (SIGSEGV) in
// htp-opt, htp-compile and htp-run's JIT. Before parsing, the tools count
// the brackets' depth ( ( [ { < ) outside string literals and comments and
// refuse a file nested deeper than any block needs. Header-only: htp-opt
// and the compiler library both include it.
//
//===----------------------------------------------------------------------===//
#ifndef HTP_TOOLS_COMPILER_NESTING_H
#define HTP_TOOLS_COMPILER_NESTING_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir::htp {

/// Deeper than this is refused: an htp block nests a few levels, and the
/// parser's stack holds a few thousand.
constexpr unsigned kMaxNesting = 1000;

/// Empty when `text` nests at most kMaxNesting deep, else why (with the
/// line). `->` is an arrow, not a closing bracket.
inline std::string nestingProblem(llvm::StringRef text) {
  unsigned depth = 0, line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '"') { // a string literal, with its escapes
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i)
        if (text[i] == '\\')
          ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') { // a comment
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > kMaxNesting)
        return "line " + std::to_string(line) + " nests brackets more than " +
               std::to_string(kMaxNesting) +
               " deep, beyond any block (the parser recurses once a level)";
    } else if ((c == ')' || c == ']' || c == '}' || (c == '>' && (i == 0 || text[i - 1] != '-'))) &&
               depth > 0) {
      --depth;
    }
  }
  return "";
}

} // namespace mlir::htp

#endif // HTP_TOOLS_COMPILER_NESTING_H
