/* alloc-failures.test's allocator: preloaded into htp-run, it fails the
 * FAIL_AT-th allocation (malloc, calloc, realloc, the aligned ones) counted
 * from main's first getopt_long (library constructors before main are not
 * htp-run's), once, and says on stderr which file the call came from (the
 * sweep tells htp-run's handling from a library's own); FAIL_COUNT=1 prints
 * how many there were at exit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_int counting;
static atomic_long count;
static long fail_at = -2;

static int should_fail(void *caller) {
  if (!atomic_load(&counting)) return 0;
  if (fail_at == -2) {
    const char *at = getenv("FAIL_AT");
    fail_at = at ? atol(at) : -1;
  }
  if (atomic_fetch_add(&count, 1) + 1 != fail_at) return 0;
  Dl_info info;
  const char *from = dladdr(caller, &info) && info.dli_fname ? info.dli_fname : "?";
  const char *slash = strrchr(from, '/');
  char line[256];
  int n = snprintf(line, sizeof line, "[alloc-failures: failed a call from %s]\n",
                   slash ? slash + 1 : from);
  if (n > 0) (void)!write(STDERR_FILENO, line, (size_t)n); /* best effort */
  return 1;
}
#define SHOULD_FAIL() should_fail(__builtin_return_address(0))

void *malloc(size_t n) {
  if (SHOULD_FAIL()) return errno = ENOMEM, NULL;
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  if (SHOULD_FAIL()) return errno = ENOMEM, NULL;
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  if (SHOULD_FAIL()) return errno = ENOMEM, NULL;
  return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
  if (SHOULD_FAIL()) return ENOMEM;
  void *p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void *aligned_alloc(size_t align, size_t n) {
  if (SHOULD_FAIL()) return errno = ENOMEM, NULL;
  return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
  if (SHOULD_FAIL()) return errno = ENOMEM, NULL;
  return __libc_memalign(align, n);
}

int getopt_long(int argc, char *const argv[], const char *options, const struct option *longs,
                int *index) {
  static int (*real)(int, char *const[], const char *, const struct option *, int *);
  if (!real) real = (int (*)(int, char *const[], const char *, const struct option *, int *))
                        dlsym(RTLD_NEXT, "getopt_long");
  atomic_store(&counting, 1);
  return real(argc, argv, options, longs, index);
}

__attribute__((destructor)) static void report(void) {
  if (getenv("FAIL_COUNT")) {
    char line[64];
    int n = snprintf(line, sizeof line, "[alloc-failures: %ld allocations]\n", (long)count);
    if (write(STDERR_FILENO, line, (size_t)n) < 0) return;
  }
}
