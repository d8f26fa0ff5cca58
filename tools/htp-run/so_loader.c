/*===- tools/htp-run/so_loader.c - Load an htp-compile shared object -----===*
 *
 * This file implements so_loader.h with dlopen/dlsym. A shared object is
 * input anyone can edit, so nothing in it is read past its symbol's ELF
 * size, and its signature is believed only where it agrees with the facts
 * the code was compiled for (runtime/htp_entry.h).
 *===----------------------------------------------------------------------===*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_*, dladdr1, dl_iterate_phdr, strnlen on glibc with -std=c11 */
#endif
#include "tools/htp-run/so_loader.h"

#include "tools/htp-run/elf_entries.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(HTP_FACT_DIMS + HTP_ENTRY_MAX_RANK == HTP_FACT_SHARD_LAYOUT,
               "a facts record holds every dim");

/* [begin, end) and whether a loaded segment holds all of it. */
typedef struct span {
  uintptr_t begin, end;
  int inside;
} span;

static int find_segment(struct dl_phdr_info *info, size_t info_size, void *data) {
  (void)info_size;
  span *wanted = data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
    if (segment->p_type != PT_LOAD || !(segment->p_flags & PF_R))
      continue;
    uintptr_t begin = info->dlpi_addr + segment->p_vaddr;
    if (wanted->begin >= begin && wanted->end - begin <= segment->p_memsz) {
      wanted->inside = 1;
      return 1;
    }
  }
  return 0;
}

/* The bytes of the data symbol `name` found at `address`, from the ELF
 * dynamic symbol table, once they are known to lie in one readable loaded
 * segment; 0 when they do not (an edited st_size) or nothing says. */
static size_t symbol_size(const void *address, const char *name) {
  Dl_info info;
  const ElfW(Sym) *symbol = NULL;
  if (!dladdr1(address, &info, (void **)&symbol, RTLD_DL_SYMENT) || !symbol ||
      info.dli_saddr != address || !info.dli_sname || strcmp(info.dli_sname, name) != 0)
    return 0;
  span wanted = {(uintptr_t)address, (uintptr_t)address + (uintptr_t)symbol->st_size, 0};
  if (symbol->st_size == 0 || wanted.end < wanted.begin)
    return 0;
  dl_iterate_phdr(find_segment, &wanted);
  return wanted.inside ? (size_t)symbol->st_size : 0;
}

/* The string symbol `name` of `handle`, NUL-terminated within its ELF size
 * and with no NUL before: *length its strlen. NULL (and a message) when
 * absent, unsized or unterminated; `absent` words the first case. */
static const char *string_symbol(void *handle, const char *path, const char *name,
                                 const char *absent, size_t *length, char *err,
                                 size_t err_size) {
  const char *text = dlsym(handle, name);
  if (!text) {
    htp_set_error(err, err_size, "%s: %s", path, absent);
    return NULL;
  }
  size_t size = symbol_size(text, name);
  if (size == 0) {
    htp_set_error(err, err_size, "%s: the symbol %.200s has no ELF size within the object's "
                  "loaded segments (a damaged or hand-edited .so?)", path, name);
    return NULL;
  }
  *length = strnlen(text, size);
  if (*length != size - 1) {
    htp_set_error(err, err_size, "%s: the symbol %.200s (%zu bytes) %s", path, name, size,
                  *length == size ? "is not NUL-terminated within its size"
                                  : "holds a NUL before its end");
    return NULL;
  }
  return text;
}

/* Word i of a facts array at any alignment. */
static int64_t fact(const unsigned char *facts, size_t i) {
  int64_t word;
  memcpy(&word, facts + i * sizeof word, sizeof word);
  return word;
}

#define MISMATCH_HINT "the signature was changed after htp-compile wrote it; compile the block again"

/* A value of a field whose values have names (role, dtype, shard layout). */
static const char *value_name(int64_t value, const char *const *names, int count) {
  return names && value >= 0 && value < count ? names[value] : NULL;
}

/* Fails with a message when the signature's `claimed` is not the code's
 * `compiled` for field `what`; names (count of them) words the values. */
static int same_fact(const char *path, const char *what, int64_t claimed, int64_t compiled,
                     const char *const *names, int count, char *err, size_t err_size) {
  if (claimed == compiled)
    return 0;
  const char *claimed_name = value_name(claimed, names, count);
  const char *compiled_name = value_name(compiled, names, count);
  char claimed_text[32], compiled_text[32];
  snprintf(claimed_text, sizeof claimed_text, "%" PRId64, claimed);
  snprintf(compiled_text, sizeof compiled_text, "%" PRId64, compiled);
  return htp_set_error(err, err_size, "%s: the signature does not match the compiled code: %s "
                       "is %s in the signature, the code was compiled for %s (" MISMATCH_HINT
                       ")", path, what, claimed_name ? claimed_name : claimed_text,
                       compiled_name ? compiled_name : compiled_text);
}

/* Compares the parsed signature of `path` with its facts (checked to be
 * the lowering's layout for as many tensors): every number a caller sizes,
 * slices or plans from must be the one the code was compiled for. */
static int check_facts(const char *path, const htp_signature *sig, const unsigned char *facts,
                       char *err, size_t err_size) {
  static const char *const roles[] = {"input", "param", "result", "grad"};
  static const char *const dtypes[] = {"f32", "bf16"};
  static const char *const layouts[] = {"none", "blocks", "qkv"};
#define FACT(what, claimed, word, names, count)                                              \
  do {                                                                                       \
    if (same_fact(path, what, (int64_t)(claimed), fact(facts, word), names, count, err,      \
                  err_size))                                                                 \
      return 1;                                                                              \
  } while (0)
  FACT("tp", sig->tp, HTP_FACTS_TP, NULL, 0);
  FACT("workspace_bytes", sig->workspace_bytes, HTP_FACTS_WORKSPACE_BYTES, NULL, 0);
  FACT("flops", sig->flops, HTP_FACTS_FLOPS, NULL, 0);
  FACT("the number of args", sig->num_args, HTP_FACTS_NUM_ARGS, NULL, 0);
  FACT("the number of results", sig->num_results, HTP_FACTS_NUM_RESULTS, NULL, 0);
  size_t at = HTP_FACTS_HEADER_WORDS;
  for (int k = 0; k < sig->num_args + sig->num_results; k++, at += HTP_FACTS_TENSOR_WORDS) {
    const int is_arg = k < sig->num_args;
    const htp_sig_tensor *t = is_arg ? &sig->args[k] : &sig->results[k - sig->num_args];
    char what[300];
    int n = snprintf(what, sizeof what, "%s %d ('%.200s') ", is_arg ? "argument" : "result",
                     is_arg ? k : k - sig->num_args, t->name);
    char *field = what + (n > 0 && (size_t)n < sizeof what ? n : 0);
    const size_t room = sizeof what - (size_t)(field - what);
#define TENSOR_FACT(name, claimed, word, names, count)                                       \
  do {                                                                                       \
    snprintf(field, room, "%s", name);                                                       \
    FACT(what, claimed, at + (word), names, count);                                          \
  } while (0)
    TENSOR_FACT("role", t->role, HTP_FACT_ROLE, roles, 4);
    TENSOR_FACT("dtype", t->dtype, HTP_FACT_DTYPE, dtypes, 2);
    TENSOR_FACT("bytes", t->bytes, HTP_FACT_BYTES, NULL, 0);
    TENSOR_FACT("rank", t->rank, HTP_FACT_RANK, NULL, 0);
    for (int d = 0; d < HTP_ENTRY_MAX_RANK; d++) {
      snprintf(field, room, "dim %d", d);
      FACT(what, d < t->rank ? t->dims[d] : 0, at + HTP_FACT_DIMS + (size_t)d, NULL, 0);
    }
    const int sharded = t->shard_layout != HTP_SHARD_NONE;
    TENSOR_FACT("shard layout", t->shard_layout, HTP_FACT_SHARD_LAYOUT, layouts, 3);
    TENSOR_FACT("shard dim", sharded ? t->shard_dim : 0, HTP_FACT_SHARD_DIM, NULL, 0);
    TENSOR_FACT("shard parts", sharded ? t->shard_parts : 0, HTP_FACT_SHARD_PARTS, NULL, 0);
    TENSOR_FACT("gradient's argument", t->role == HTP_SIG_GRAD ? t->grad_arg : -1,
                HTP_FACT_GRAD_ARG, NULL, 0);
    TENSOR_FACT("shard unit", t->shard_unit, HTP_FACT_SHARD_UNIT, NULL, 0);
    TENSOR_FACT("shard units", htp_facts_units_hash(t->shard_units, t->shard_parts),
                HTP_FACT_SHARD_UNITS_HASH, NULL, 0);
#undef TENSOR_FACT
  }
  const htp_sig_balance *b = &sig->balance;
  const int64_t balance[HTP_FACTS_BALANCE_WORDS] = {
      b->present,   b->layers,    b->model_dim,      b->heads,         b->head_dim,
      b->head_flops, b->mlp_units, b->mlp_unit_width, b->mlp_unit_flops,
      htp_facts_units_hash(b->heads_owned, sig->tp),
      htp_facts_units_hash(b->mlp_units_owned, sig->tp)};
  static const char *const balance_names[HTP_FACTS_BALANCE_WORDS] = {
      "balance",           "balance.layers",         "balance.model_dim",
      "balance.heads",     "balance.head_dim",       "balance.head_flops",
      "balance.mlp_units", "balance.mlp_unit_width", "balance.mlp_unit_flops",
      "balance.heads_owned", "balance.mlp_units_owned"};
  static const char *const present[] = {"absent", "present"};
  for (int i = 0; i < HTP_FACTS_BALANCE_WORDS; i++)
    FACT(balance_names[i], b->present ? balance[i] : 0, at + (size_t)i, i ? NULL : present,
         i ? 0 : 2);
#undef FACT
  return 0;
}

/* Reads the facts of entry `entry` (symbol facts_name) and checks them and
 * the signature (signature_length bytes) against each other. */
static int check_signature(void *handle, const char *path, const char *entry,
                           const char *facts_name, const char *signature,
                           size_t signature_length, char *err, size_t err_size) {
  const unsigned char *facts = dlsym(handle, facts_name);
  if (!facts)
    return htp_set_error(err, err_size, "%s: entry '%.200s' has no %.200s, what its code was "
                         "compiled for (written by an older htp-compile, or not by "
                         "htp-compile?): compile the block again", path, entry, facts_name);
  size_t bytes = symbol_size(facts, facts_name);
  const size_t max_words = HTP_FACTS_HEADER_WORDS +
                           2 * (size_t)HTP_ENTRY_MAX_TENSORS * HTP_FACTS_TENSOR_WORDS +
                           HTP_FACTS_BALANCE_WORDS;
  if (bytes % sizeof(int64_t) || bytes < HTP_FACTS_HEADER_WORDS * sizeof(int64_t) ||
      bytes > max_words * sizeof(int64_t))
    return htp_set_error(err, err_size, "%s: %.200s is %zu bytes, not an array of the facts' "
                         "layout (runtime/htp_entry.h)", path, facts_name, bytes);
  const size_t words = bytes / sizeof(int64_t);
  const int64_t args = fact(facts, HTP_FACTS_NUM_ARGS), results = fact(facts, HTP_FACTS_NUM_RESULTS);
  if (fact(facts, HTP_FACTS_FORMAT) != HTP_FACTS_MAGIC ||
      fact(facts, HTP_FACTS_WORDS) != (int64_t)words || args < 0 ||
      args > HTP_ENTRY_MAX_TENSORS || results < 0 || results > HTP_ENTRY_MAX_TENSORS ||
      words != HTP_FACTS_HEADER_WORDS + (size_t)(args + results) * HTP_FACTS_TENSOR_WORDS +
                   HTP_FACTS_BALANCE_WORDS)
    return htp_set_error(err, err_size, "%s: %.200s is not a facts array of format %#" PRIx64
                         " (runtime/htp_entry.h): compile the block again with this htp",
                         path, facts_name, (uint64_t)HTP_FACTS_MAGIC);
  if (fact(facts, HTP_FACTS_SIGNATURE_BYTES) != (int64_t)signature_length)
    return htp_set_error(err, err_size, "%s: the signature does not match the compiled code: it "
                         "is %zu bytes, the code's was %" PRId64 " (" MISMATCH_HINT ")", path,
                         signature_length, fact(facts, HTP_FACTS_SIGNATURE_BYTES));
  htp_signature sig;
  char reason[512];
  const htp_result parsed = htp_signature_parse(signature, signature_length, &sig, reason,
                                                sizeof reason);
  if (parsed == HTP_ERR_NOMEM)
    return htp_set_error(err, err_size, "%s: %s", path, reason), 2;
  if (parsed != HTP_OK)
    return htp_set_error(err, err_size, "%s: bad entry signature: %s", path, reason);
  int failed = 0;
  if (strcmp(sig.entry, entry) != 0)
    failed = htp_set_error(err, err_size, "%s: the signature of entry '%.200s' names entry "
                           "'%.200s' (" MISMATCH_HINT ")", path, entry, sig.entry);
  else
    failed = check_facts(path, &sig, facts, err, err_size);
  htp_signature_free(&sig);
  return failed;
}

/* dlopen of path, refused first if the file is cut short (dlopen maps one
 * as if whole: zeros, or SIGBUS, past its end). NULL with err. */
static void *open_whole(const char *path, char *err, size_t err_size) {
  htp_file_map file;
  char reason[512];
  const char *why = NULL;
  if (htp_file_map_open(path, &file, reason, sizeof reason)) {
    htp_set_error(err, err_size, "cannot load '%s': %s", path, reason);
    return NULL;
  }
  const int whole = htp_elf_check_whole(file.bytes, file.size, &why) == 0;
  htp_file_map_close(&file);
  if (!whole) {
    htp_set_error(err, err_size, "cannot load '%s': %s", path, why);
    return NULL;
  }
  /* dlopen searches the library path for a name without a slash. */
  char *relative = NULL;
  if (!strchr(path, '/')) {
    if (!(relative = malloc(strlen(path) + 3))) {
      htp_set_error(err, err_size, "out of memory");
      return NULL;
    }
    strcpy(relative, "./");
    strcat(relative, path);
  }
  dlerror();
  errno = 0;
  void *handle = dlopen(relative ? relative : path, RTLD_NOW | RTLD_LOCAL);
  const int dl_errno = errno;
  free(relative);
  if (!handle) {
    /* dlopen short of memory can say "No such file or directory" of the
     * file just read whole above: errno tells. */
    const char *dl_reason = dlerror();
    htp_set_error(err, err_size, "cannot load '%s': %s%s", path,
                  dl_reason ? dl_reason : "unknown dlopen error",
                  dl_errno == ENOMEM ? " (out of memory)" : "");
  }
  return handle;
}

/* prefix followed by the entry's name (length bytes), or NULL. */
static char *symbol_name(const char *prefix, const char *entry, size_t length) {
  const size_t used = strlen(prefix);
  char *name = malloc(used + length + 1);
  if (name) {
    memcpy(name, prefix, used);
    memcpy(name + used, entry, length + 1);
  }
  return name;
}

/* The entry's function, signature and facts symbols (the prefixes followed
 * by its name, runtime/htp_entry.h, so no name can reach a C library or
 * runtime symbol), the signature checked. Non-zero with err (2: memory
 * ran short). */
static int find_entry(void *handle, const char *path, const char *entry, size_t length,
                      void **function, const char **signature, char *err, size_t err_size) {
  char *function_name = symbol_name(HTP_ENTRY_SYMBOL_PREFIX, entry, length);
  char *signature_name = symbol_name(HTP_SIGNATURE_SYMBOL_PREFIX, entry, length);
  char *facts_name = symbol_name(HTP_FACTS_SYMBOL_PREFIX, entry, length);
  size_t signature_length = 0;
  int failed = 0;
  if (!function_name || !signature_name || !facts_name)
    failed = (htp_set_error(err, err_size, "out of memory"), 2);
  else if (!(*function = dlsym(handle, function_name)))
    failed = htp_set_error(err, err_size, "%s: unknown entry '%.200s'", path, entry);
  else if (!(*signature = string_symbol(handle, path, signature_name,
                                        "the entry has no signature (not written by "
                                        "htp-compile?)", &signature_length, err, err_size)))
    failed = 1;
  else
    failed = check_signature(handle, path, entry, facts_name, *signature, signature_length, err,
                             err_size);
  free(function_name);
  free(signature_name);
  free(facts_name);
  return failed;
}

static int so_load(const char *path, const char *entry, const htp_compile_options *options,
                   htp_compiled *out, char *err, size_t err_size) {
  (void)options;
  memset(out, 0, sizeof *out);
  void *handle = open_whole(path, err, err_size);
  if (!handle)
    return 1;
  size_t length;
  if (!entry) {
    entry = string_symbol(handle, path, HTP_DEFAULT_ENTRY_SYMBOL,
                          "names no default entry (it has several entry points, or was not "
                          "written by this htp-compile); choose one with --entry",
                          &length, err, err_size);
    if (!entry) {
      dlclose(handle);
      return 1;
    }
  } else {
    length = strnlen(entry, HTP_ENTRY_MAX_NAME + 1);
  }
  if (length == 0 || length > HTP_ENTRY_MAX_NAME) {
    dlclose(handle);
    return htp_set_error(err, err_size, "%s: the entry name must be 1 to %d bytes", path,
                         HTP_ENTRY_MAX_NAME);
  }
  void *function = NULL;
  const char *signature = NULL;
  const int failed = find_entry(handle, path, entry, length, &function, &signature, err, err_size);
  if (failed) {
    dlclose(handle);
    return failed;
  }
  /* Converting an object pointer to a function pointer: what POSIX dlsym
   * requires to work. */
  memcpy(&out->fn, &function, sizeof out->fn);
  out->signature = signature;
  out->handle = handle;
  return 0;
}

static void so_unload(htp_compiled *compiled) {
  if (!compiled)
    return;
  if (compiled->handle)
    dlclose(compiled->handle);
  memset(compiled, 0, sizeof *compiled);
}

static int so_list(const char *path, void (*each)(void *user, const char *name), void *user,
                   char *err, size_t err_size) {
  htp_file_map file;
  char reason[512];
  if (htp_file_map_open(path, &file, reason, sizeof reason))
    return htp_set_error(err, err_size, "%s: %s", path, reason), -1;
  const char *why = NULL;
  int count = htp_elf_list_entries(file.bytes, file.size, each, user, &why);
  htp_file_map_close(&file);
  if (count < 0)
    return htp_set_error(err, err_size, "%s: cannot list its entries: %s", path, why), -1;
  return count;
}

const htp_compiler *htp_so_loader(void) {
  static const htp_compiler loader = {so_load, so_unload, so_list, NULL};
  return &loader;
}
