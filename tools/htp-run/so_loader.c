/*===- tools/htp-run/so_loader.c - Load an htp-compile shared object -----===*
 *
 * This file implements so_loader.h with dlopen/dlsym.
 *===----------------------------------------------------------------------===*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_* and strnlen on glibc with -std=c11 */
#endif
#include "tools/htp-run/so_loader.h"

#include "tools/htp-run/errors.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static int so_load(const char *path, const char *entry, const htp_compile_options *options,
                   htp_compiled *out, char *err, size_t err_size) {
  (void)options;
  memset(out, 0, sizeof *out);
  /* dlopen searches the library path for a name without a slash. */
  char *relative = NULL;
  if (!strchr(path, '/')) {
    relative = malloc(strlen(path) + 3);
    if (!relative)
      return htp_set_error(err, err_size, "out of memory");
    strcpy(relative, "./");
    strcat(relative, path);
  }
  dlerror();
  void *handle = dlopen(relative ? relative : path, RTLD_NOW | RTLD_LOCAL);
  free(relative);
  if (!handle) {
    const char *reason = dlerror();
    return htp_set_error(err, err_size, "cannot load '%s': %s", path,
                         reason ? reason : "unknown dlopen error");
  }
  if (!entry) {
    const char *default_entry = dlsym(handle, HTP_DEFAULT_ENTRY_SYMBOL);
    if (!default_entry) {
      dlclose(handle);
      return htp_set_error(err, err_size,
                           "%s names no default entry (it has several entry points, or was not "
                           "written by this htp-compile); choose one with --entry", path);
    }
    entry = default_entry;
  }
  /* The symbols are the prefixes followed by the entry's name (runtime/
   * htp_entry.h), so no name can reach a C library or runtime symbol. */
  size_t length = strnlen(entry, HTP_ENTRY_MAX_NAME + 1);
  if (length == 0 || length > HTP_ENTRY_MAX_NAME) {
    dlclose(handle);
    return htp_set_error(err, err_size, "%s: the entry name must be 1 to %d bytes", path,
                         HTP_ENTRY_MAX_NAME);
  }
  char *function_name = malloc(sizeof HTP_ENTRY_SYMBOL_PREFIX + length);
  char *signature_name = malloc(sizeof HTP_SIGNATURE_SYMBOL_PREFIX + length);
  if (!function_name || !signature_name) {
    free(function_name);
    free(signature_name);
    dlclose(handle);
    return htp_set_error(err, err_size, "out of memory");
  }
  memcpy(function_name, HTP_ENTRY_SYMBOL_PREFIX, sizeof HTP_ENTRY_SYMBOL_PREFIX - 1);
  memcpy(function_name + sizeof HTP_ENTRY_SYMBOL_PREFIX - 1, entry, length + 1);
  memcpy(signature_name, HTP_SIGNATURE_SYMBOL_PREFIX, sizeof HTP_SIGNATURE_SYMBOL_PREFIX - 1);
  memcpy(signature_name + sizeof HTP_SIGNATURE_SYMBOL_PREFIX - 1, entry, length + 1);
  void *function = dlsym(handle, function_name);
  const char *signature = dlsym(handle, signature_name);
  free(function_name);
  free(signature_name);
  if (!function || !signature) {
    htp_set_error(err, err_size, "%s: unknown entry '%.200s'%s", path, entry,
                  function ? " (it has no signature; not written by htp-compile?)" : "");
    dlclose(handle);
    return 1;
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

const htp_compiler *htp_so_loader(void) {
  static const htp_compiler loader = {so_load, so_unload};
  return &loader;
}
