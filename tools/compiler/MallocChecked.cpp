//===- tools/compiler/MallocChecked.cpp - A failed malloc ends the tool --===//
//
// Linked into htp-opt and htp-compile only. MLIR allocates each operation
// with plain malloc and does not check it (Operation::create): with memory
// short, a NULL there crashed the tool (SIGSEGV, "PLEASE submit a bug
// report", a stack dump; memory-short.test caught it about once in four at
// some limits). Defined in the executable, these malloc, calloc and realloc
// are the whole process's (ELF symbol interposition, libMLIR.so's calls
// included): they take glibc's own and, where glibc has no memory, end the
// tool as OutOfMemory.h does for LLVM's and C++'s allocations (the error,
// the tool's cleanup, exit 1). The tools have no allocation they can do
// without. Not under a sanitizer, which brings its own allocator; not in
// htp-run, whose runtime reports its own allocation failures and whose
// tests inject them with a preloaded malloc.
//
//===----------------------------------------------------------------------===//

#include "OutOfMemory.h"

#include <cstddef>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) ||                     \
    __has_feature(thread_sanitizer)
#define HTP_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HTP_SANITIZED 1
#endif

#if defined(__GLIBC__) && !defined(HTP_SANITIZED)
extern "C" {
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *old, size_t size);

void *malloc(size_t size) {
  void *p = __libc_malloc(size);
  if (!p && size)
    mlir::htp::detail::outOfMemory(nullptr, "malloc failed", false);
  return p;
}

void *calloc(size_t count, size_t size) {
  void *p = __libc_calloc(count, size);
  if (!p && count && size)
    mlir::htp::detail::outOfMemory(nullptr, "calloc failed", false);
  return p;
}

void *realloc(void *old, size_t size) {
  void *p = __libc_realloc(old, size);
  if (!p && size)
    mlir::htp::detail::outOfMemory(nullptr, "realloc failed", false);
  return p;
}
} // extern "C"
#endif
