/*===- tools/htp-run/so_loader.c - Load an htp-compile shared object -----===*
 *
 * This file implements so_loader.h with dlopen/dlsym.
 *===----------------------------------------------------------------------===*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_* on glibc with -std=c11 */
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
    const char *default_entry = dlsym(handle, "htp_default_entry");
    if (!default_entry) {
      dlclose(handle);
      return htp_set_error(err, err_size,
                           "%s names no default entry (it has several entry points, or was not "
                           "written by htp-compile); choose one with --entry", path);
    }
    entry = default_entry;
  }
  size_t length = strlen(entry);
  char *signature_name = malloc(length + sizeof HTP_SIG_SUFFIX);
  if (!signature_name) {
    dlclose(handle);
    return htp_set_error(err, err_size, "out of memory");
  }
  memcpy(signature_name, entry, length);
  memcpy(signature_name + length, HTP_SIG_SUFFIX, sizeof HTP_SIG_SUFFIX);
  void *function = dlsym(handle, entry);
  const char *signature = dlsym(handle, signature_name);
  free(signature_name);
  if (!function || !signature) {
    htp_set_error(err, err_size, "%s: unknown entry '%s'%s", path, entry,
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
