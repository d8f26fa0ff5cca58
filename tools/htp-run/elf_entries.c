/*===- tools/htp-run/elf_entries.c - The entries of a shared object -------===*
 *
 * This file implements elf_entries.h: section headers, the dynamic symbol
 * table and its string table, each bounds-checked against the file before
 * a byte of it is read (memcpy: no alignment is assumed either).
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/elf_entries.h"

#include "runtime/htp_entry.h"

#include <elf.h>
#include <link.h>
#include <string.h>

/* The section header i of the file, when the table lies within it. */
static int section_at(const unsigned char *bytes, size_t size, const ElfW(Ehdr) *header, size_t i,
                      ElfW(Shdr) *section) {
  if (i >= header->e_shnum)
    return 0;
  memcpy(section, bytes + header->e_shoff + i * sizeof *section, sizeof *section);
  return section->sh_type == SHT_NOBITS ||
         (section->sh_offset <= size && section->sh_size <= size - section->sh_offset);
}

/* The file's ELF header, when it is an ELF object of this machine's class;
 * else 0 with *why. */
static int read_header(const unsigned char *bytes, size_t size, ElfW(Ehdr) *header,
                       const char **why) {
  if (size < sizeof *header || memcmp(bytes, ELFMAG, SELFMAG) != 0) {
    *why = "not an ELF object";
    return 0;
  }
  memcpy(header, bytes, sizeof *header);
  if (header->e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)) {
    *why = "not an ELF object of this machine's class";
    return 0;
  }
  return 1;
}

/* The section header table lies within the file (none counts as within). */
static int sections_within(const ElfW(Ehdr) *header, size_t size) {
  return header->e_shnum == 0 ||
         (header->e_shentsize == sizeof(ElfW(Shdr)) && header->e_shoff <= size &&
          header->e_shnum <= (size - header->e_shoff) / sizeof(ElfW(Shdr)));
}

int htp_elf_list_entries(const unsigned char *bytes, size_t size,
                         void (*each)(void *user, const char *name), void *user,
                         const char **why) {
  ElfW(Ehdr) header;
  if (!read_header(bytes, size, &header, why))
    return -1;
  if (!sections_within(&header, size)) {
    *why = "its section headers lie outside the file";
    return -1;
  }
  const size_t prefix = sizeof HTP_ENTRY_SYMBOL_PREFIX - 1;
  /* Every dynamic symbol table checked before any name is listed: a
   * refusal lists nothing. */
  for (size_t i = 0; i < header.e_shnum; i++) {
    ElfW(Shdr) symbols, names;
    if (!section_at(bytes, size, &header, i, &symbols) || symbols.sh_type != SHT_DYNSYM)
      continue;
    if (symbols.sh_entsize != sizeof(ElfW(Sym)) ||
        !section_at(bytes, size, &header, symbols.sh_link, &names) ||
        names.sh_type != SHT_STRTAB) {
      *why = "its dynamic symbol table is malformed";
      return -1;
    }
  }
  int count = 0;
  for (size_t i = 0; i < header.e_shnum; i++) {
    ElfW(Shdr) symbols, names;
    if (!section_at(bytes, size, &header, i, &symbols) || symbols.sh_type != SHT_DYNSYM ||
        !section_at(bytes, size, &header, symbols.sh_link, &names))
      continue;
    const char *strings = (const char *)bytes + names.sh_offset;
    for (size_t k = 0; k < symbols.sh_size / sizeof(ElfW(Sym)); k++) {
      ElfW(Sym) symbol;
      memcpy(&symbol, bytes + symbols.sh_offset + k * sizeof symbol, sizeof symbol);
      if (ELF64_ST_TYPE(symbol.st_info) != STT_FUNC || symbol.st_shndx == SHN_UNDEF ||
          symbol.st_name >= names.sh_size)
        continue;
      const char *name = strings + symbol.st_name;
      const size_t room = names.sh_size - symbol.st_name;
      const size_t length = strnlen(name, room);
      if (length == room || length <= prefix || length - prefix > HTP_ENTRY_MAX_NAME ||
          memcmp(name, HTP_ENTRY_SYMBOL_PREFIX, prefix) != 0)
        continue;
      each(user, name + prefix);
      count++;
    }
  }
  return count;
}


int htp_elf_check_whole(const unsigned char *bytes, size_t size, const char **why) {
  ElfW(Ehdr) header;
  if (!read_header(bytes, size, &header, why))
    return -1;
  if (header.e_type == ET_REL) {
    *why = "it is an object file (htp-compile --emit=obj), not a shared object: link it "
           "(cc -shared -o block.so block.o), or let htp-compile write the .so";
    return -1;
  }
  if (header.e_type != ET_DYN) {
    *why = "it is an ELF file but not a shared object (an executable or a core file?)";
    return -1;
  }
  if (header.e_phentsize != sizeof(ElfW(Phdr)) || header.e_phoff > size ||
      header.e_phnum > (size - header.e_phoff) / sizeof(ElfW(Phdr))) {
    *why = "the file is cut short: its program headers lie past its end";
    return -1;
  }
  for (size_t i = 0; i < header.e_phnum; i++) {
    ElfW(Phdr) segment;
    memcpy(&segment, bytes + header.e_phoff + i * sizeof segment, sizeof segment);
    if (segment.p_type == PT_LOAD &&
        (segment.p_offset > size || segment.p_filesz > size - segment.p_offset)) {
      *why = "the file is cut short: a loadable segment ends past its end";
      return -1;
    }
  }
  if (!sections_within(&header, size)) {
    *why = "the file is cut short: its section headers lie past its end";
    return -1;
  }
  return 0;
}
