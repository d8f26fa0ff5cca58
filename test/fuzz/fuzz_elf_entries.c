/*===- test/fuzz/fuzz_elf_entries.c - libFuzzer target: a .so's entries ---===*
 *
 * Feeds arbitrary bytes to htp_elf_list_entries (what htp-run --train runs
 * on a shared object's mapped file) and htp_elf_check_whole (what the
 * loader runs before dlopen). Besides what ASan/UBSan catch, it
 * checks what a caller relies on: every name is 1 to HTP_ENTRY_MAX_NAME
 * bytes, the count is the number of calls, and a failure says why and
 * lists nothing.
 *===----------------------------------------------------------------------===*/
#include "runtime/htp_entry.h"
#include "tools/htp-run/elf_entries.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void count_name(void *user, const char *name) {
  size_t length = strlen(name);
  if (length < 1 || length > HTP_ENTRY_MAX_NAME) abort();
  ++*(int *)user;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly size bytes, so ASan sees any read past the end. */
  unsigned char *bytes = malloc(size ? size : 1);
  if (!bytes) return 0;
  memcpy(bytes, data, size);
  int calls = 0;
  const char *why = NULL;
  int count = htp_elf_list_entries(bytes, size, count_name, &calls, &why);
  if (count < 0 ? (!why || !why[0] || calls != 0) : count != calls) {
    fprintf(stderr, "count %d, %d names, why '%s'\n", count, calls, why ? why : "(null)");
    abort();
  }
  /* The whole-file check: a verdict, and a reason with a refusal. */
  why = NULL;
  int whole = htp_elf_check_whole(bytes, size, &why);
  if (whole != 0 && whole != -1) abort();
  if (whole == -1 && (!why || !why[0])) abort();
  free(bytes);
  return 0;
}
