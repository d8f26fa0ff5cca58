/*===- tools/htp-run/elf_entries.h - The entries of a shared object -------===*
 *
 * How htp-run lists the entry points an htp-compile shared object defines
 * (from its ELF dynamic symbol table, not by searching its bytes for names)
 * and checks that the file is whole before it is loaded.
 * The file is input anyone can edit, so nothing is read outside it.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_ELF_ENTRIES_H
#define HTP_RUN_ELF_ENTRIES_H

#include <stddef.h>

/* Calls each(user, NAME) for every defined function symbol
 * HTP_ENTRY_SYMBOL_PREFIX NAME in the dynamic symbol table of the ELF
 * object in bytes[0, size) (NAME 1 to HTP_ENTRY_MAX_NAME bytes). Returns
 * how many, or -1 with *why (a static message) when the bytes are not an
 * ELF object of this machine's class or its tables lie outside them. */
int htp_elf_list_entries(const unsigned char *bytes, size_t size,
                         void (*each)(void *user, const char *name), void *user,
                         const char **why);

/* 0 when bytes[0, size) hold a whole ELF object of this machine's class:
 * its program headers, every loadable segment's file bytes and its section
 * header table lie within them. Else -1 with *why: a file cut short
 * (a copy that stopped, a full disk) that dlopen would still map, reading
 * zeros past its end (a silent wrong result) or dying of SIGBUS. */
int htp_elf_check_whole(const unsigned char *bytes, size_t size, const char **why);

#endif /* HTP_RUN_ELF_ENTRIES_H */
