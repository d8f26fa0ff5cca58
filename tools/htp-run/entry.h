/*===- tools/htp-run/entry.h - The seam between compiler and executor -----===*
 *
 * htp-run is two halves (DESIGN §7). The compiler half (C++, MLIR) turns a
 * .mlir file into an entry point, by JIT or ahead of time into a shared
 * object (htp-compile); the executor half (C, builds without MLIR) binds data,
 * runs, times and reports. What a compiled block exports and what its
 * signature says is the runtime's public entry ABI (runtime/htp_entry.h);
 * this header adds only how htp-run's two halves hand an entry point over.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_ENTRY_H
#define HTP_RUN_ENTRY_H

#include "runtime/htp_entry.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Options the executor forwards to the compiler half. */
typedef struct htp_compile_options {
  int tp;                 /* tensor-parallel degree; 1 = unsharded */
  const int64_t *shares;  /* num_shares (0 or tp) shares: an uneven split */
  int num_shares;
  const char *pipeline;   /* extra pipeline text, or NULL for the default */
  int spare;              /* spare room per rank, percent (0: none) */
} htp_compile_options;

/* A loaded entry point: what either half hands the executor. */
typedef struct htp_compiled {
  htp_entry_fn fn;        /* the symbol HTP_ENTRY_SYMBOL_PREFIX NAME */
  const char *signature;  /* HTP_SIGNATURE_SYMBOL_PREFIX NAME: NUL-terminated
                           * JSON, owned by the loader, valid until unload */
  void *handle;           /* loader's private state */
} htp_compiled;

/* The compiler half, as a vtable so the executor builds without it. */
typedef struct htp_compiler {
  /* Compiles or loads PATH and looks up entry NAME (NULL: the one that
   * HTP_DEFAULT_ENTRY_SYMBOL names, an error if there is none). On failure
   * returns non-zero and writes a message (diagnostics included) to err:
   * 2 when memory ran short (a caller trying entries in turn stops). */
  int (*load)(const char *path, const char *entry, const htp_compile_options *options,
              htp_compiled *out, char *err, size_t err_size);
  void (*unload)(htp_compiled *compiled);
  /* Lists the entries PATH defines, calling each(user, name) once per name
   * (NUL-terminated, valid during the call): the JIT a .mlir's public
   * functions (before the pipeline, so not the NAME_grad --htp-grad writes),
   * the shared-object loader the entry symbols of its ELF dynamic symbol
   * table. Returns how many, or -1 with a message in err. */
  int (*list)(const char *path, void (*each)(void *user, const char *name), void *user,
              char *err, size_t err_size);
  /* NULL, or: from here on memory running short inside the compiler's
   * libraries (C++: LLVM, MLIR, any `new` in the process) is "TOOL: error:
   * out of memory" and exit status 1 after cleanup (async-signal-safe),
   * not SIGABRT. */
  void (*exit_on_out_of_memory)(const char *tool, void (*cleanup)(void));
} htp_compiler;

/* The JIT, or NULL in a build without MLIR (tools/compiler/). */
const htp_compiler *htp_jit_compiler(void);

/* htp-run's whole command line; the executor half (tools/htp-run/run.c).
 * jit may be NULL: then only shared objects from htp-compile can be run. */
int htp_run_main(int argc, char **argv, const htp_compiler *jit);

#ifdef __cplusplus
}
#endif

#endif /* HTP_RUN_ENTRY_H */
