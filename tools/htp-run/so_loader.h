/*===- tools/htp-run/so_loader.h - Load an htp-compile shared object -----===*
 *
 * The ahead-of-time twin of the JIT: the same htp_compiler vtable
 * (tools/htp-run/entry.h), backed by dlopen. The shared object leaves the
 * kernel symbols undefined; they resolve against htp-run itself, which
 * exports them.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_SO_LOADER_H
#define HTP_RUN_SO_LOADER_H

#include "tools/htp-run/entry.h"

/* Loads a shared object written by htp-compile: the symbols
 * HTP_ENTRY_SYMBOL_PREFIX ENTRY and HTP_SIGNATURE_SYMBOL_PREFIX ENTRY
 * (runtime/htp_entry.h). ENTRY NULL picks the entry named by the object's
 * HTP_DEFAULT_ENTRY_SYMBOL string (present when the module had exactly one
 * public function). options->tp is not looked at: the
 * signature says what the object was compiled for. The load fails, with a
 * message naming what differs, unless the signature and the default entry
 * are NUL-terminated within their ELF symbol sizes, the signature's "entry"
 * is ENTRY, and every number of the signature equals the object's
 * HTP_FACTS_SYMBOL_PREFIX ENTRY facts (what its code was compiled for). */
const htp_compiler *htp_so_loader(void);

#endif /* HTP_RUN_SO_LOADER_H */
