/*===- kernels/checked/arena.c - The checked device's memory --------------===*
 *
 * The checked device (checked/table.c) computes on the CPU but hands out
 * memory that host code cannot use unnoticed, as a GPU's: every allocation
 * is host memory whose address is given out with bit 62 set. Such an
 * address is non-canonical on x86-64 (and outside every user address space
 * on the other 64-bit targets), so a host load or store through it faults at
 * once, deterministically, on every thread: a device pointer memcpy'd by the
 * host, or read by a host loop, crashes here as it would read garbage or
 * crash on a GPU. Only the table's entries translate an address back
 * (htp__checked_span), after checking that it lies in a live allocation and
 * that the bytes the entry will touch fit in it.
 *
 * One arena per process, shared by every environment: the ranks of a local
 * world share one device, and may read each other's buffers (the same-device
 * reduction). New memory is poisoned with 0xFF bytes (NaN as f32 and as
 * bf16), as device memory is never zeroed: a result that reads memory nobody
 * wrote shows as NaN instead of as a lucky zero.
 *===----------------------------------------------------------------------===*/
#include "kernels/checked/checked.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DEVICE_TAG ((uintptr_t)1 << 62)

typedef struct region {
  uintptr_t base; /* the device address (tagged) */
  size_t bytes;
} region;

/* Sorted by base; guarded by lock. */
static struct {
  pthread_mutex_t lock;
  region *regions;
  size_t count, capacity;
  size_t live_bytes;
} arena = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0};

int htp_checked_is_device(const void *ptr) { return ((uintptr_t)ptr & DEVICE_TAG) != 0; }

static void *host_of(uintptr_t device) { return (void *)(device & ~DEVICE_TAG); }

/* Index of the first region whose base is > address. Lock held. */
static size_t upper_bound(uintptr_t address) {
  size_t low = 0, high = arena.count;
  while (low < high) {
    size_t middle = low + (high - low) / 2;
    if (arena.regions[middle].base <= address)
      low = middle + 1;
    else
      high = middle;
  }
  return low;
}

enum { ALIGNMENT = 256 }; /* what cudaMalloc guarantees */

/* The device's size: HTP_CHECKED_MEMORY_MB, default an H100's 80 GiB; 0
 * when the variable is not a size (alloc then says so). */
static size_t capacity_bytes(void) {
  const char *text = getenv("HTP_CHECKED_MEMORY_MB");
  if (!text || !*text) return (size_t)81920 << 20;
  char *end = NULL;
  errno = 0;
  unsigned long long mb = strtoull(text, &end, 10);
  if (errno || end == text || *end || mb == 0 || mb > (SIZE_MAX >> 21)) return 0;
  return (size_t)mb << 20;
}

htp_kernel_status htp__checked_memory(const htp_kernel_env *env, size_t *free_bytes,
                                      size_t *total_bytes) {
  if (!free_bytes || !total_bytes)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked memory: a result pointer is "
                                                        "NULL");
  const size_t capacity = capacity_bytes();
  if (!capacity)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked memory: HTP_CHECKED_MEMORY_MB='%.40s' is not a size in MiB "
                           "(1 to %zu)", getenv("HTP_CHECKED_MEMORY_MB"), SIZE_MAX >> 21);
  const size_t live = htp_checked_live_bytes();
  *total_bytes = capacity;
  *free_bytes = live < capacity ? capacity - live : 0;
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__checked_alloc(const htp_kernel_env *env, size_t bytes, void **out) {
  if (!out || bytes == 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked alloc: %zu bytes into %p",
                           bytes, (void *)out);
  *out = NULL;
  if (bytes > SIZE_MAX / 2 - ALIGNMENT)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "checked alloc: %zu bytes is too many",
                           bytes);
  size_t rounded = (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
  void *memory = aligned_alloc(ALIGNMENT, rounded);
  if (!memory || ((uintptr_t)memory & DEVICE_TAG)) {
    free(memory);
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM,
                           "checked alloc: out of memory for %zu bytes", bytes);
  }
  memset(memory, 0xFF, rounded);
  const uintptr_t base = (uintptr_t)memory | DEVICE_TAG;
  const size_t capacity = capacity_bytes();
  pthread_mutex_lock(&arena.lock);
  if (!capacity || bytes > capacity - (arena.live_bytes < capacity ? arena.live_bytes : capacity)) {
    const size_t live = arena.live_bytes;
    pthread_mutex_unlock(&arena.lock);
    free(memory);
    if (!capacity)
      return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                             "checked alloc: HTP_CHECKED_MEMORY_MB='%.40s' is not a size in MiB "
                             "(1 to %zu)", getenv("HTP_CHECKED_MEMORY_MB"), SIZE_MAX >> 21);
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM,
                           "checked alloc: out of device memory: %zu bytes asked, %zu of %zu "
                           "free",
                           bytes, live < capacity ? capacity - live : 0, capacity);
  }
  if (arena.count == arena.capacity) {
    size_t capacity = arena.capacity ? 2 * arena.capacity : 64;
    region *grown = realloc(arena.regions, capacity * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&arena.lock);
      free(memory);
      return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "checked alloc: out of memory");
    }
    arena.regions = grown;
    arena.capacity = capacity;
  }
  size_t at = upper_bound(base);
  memmove(&arena.regions[at + 1], &arena.regions[at], (arena.count - at) * sizeof(region));
  arena.regions[at] = (region){base, bytes};
  arena.count++;
  arena.live_bytes += bytes;
  pthread_mutex_unlock(&arena.lock);
  *out = (void *)base;
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__checked_release(const htp_kernel_env *env, void *ptr) {
  if (!ptr) return HTP_KERNEL_OK;
  if (!htp_checked_is_device(ptr))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked release: %p is host memory, not the checked device's", ptr);
  const uintptr_t base = (uintptr_t)ptr;
  pthread_mutex_lock(&arena.lock);
  size_t at = upper_bound(base);
  int found = at > 0 && arena.regions[at - 1].base == base;
  size_t bytes = 0;
  if (found) {
    bytes = arena.regions[at - 1].bytes;
    memmove(&arena.regions[at - 1], &arena.regions[at], (arena.count - at) * sizeof(region));
    arena.count--;
    arena.live_bytes -= bytes;
  }
  pthread_mutex_unlock(&arena.lock);
  if (!found)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked release: %p is not the start of a live allocation (freed "
                           "twice, or a pointer into one)", ptr);
  /* Poisoned as new memory is, so that a read after the release (a queued
   * copy run too late) sees NaN rather than the old bytes. */
  memset(host_of(base), 0xFF, bytes);
  free(host_of(base));
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__checked_span(const htp_kernel_env *env, const char *entry,
                                    const char *name, const void *ptr, int64_t bytes,
                                    int optional, void **host) {
  *host = NULL;
  if (!ptr) {
    if (optional || bytes == 0) return HTP_KERNEL_OK;
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked %s: %s is NULL", entry, name);
  }
  if (bytes < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked %s: %s: the size overflows (a shape too large)", entry, name);
  if (!htp_checked_is_device(ptr))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked %s: %s (%p) is host memory, not the device's: a host "
                           "pointer handed to a device entry",
                           entry, name, ptr);
  const uintptr_t address = (uintptr_t)ptr;
  pthread_mutex_lock(&arena.lock);
  size_t at = upper_bound(address);
  region found = at > 0 ? arena.regions[at - 1] : (region){0, 0};
  pthread_mutex_unlock(&arena.lock);
  if (!found.base || address - found.base > found.bytes)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked %s: %s (%p) is in no live allocation of the device "
                           "(freed, or never allocated)",
                           entry, name, ptr);
  const size_t offset = address - found.base;
  if ((uint64_t)bytes > found.bytes - offset)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked %s: %s needs %lld bytes at offset %zu of a %zu-byte "
                           "allocation: %lld bytes past its end",
                           entry, name, (long long)bytes, offset, found.bytes,
                           (long long)((uint64_t)bytes - (found.bytes - offset)));
  *host = host_of(address);
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__checked_host(const htp_kernel_env *env, const char *entry,
                                    const char *name, const void *ptr, int64_t bytes) {
  if (bytes > 0 && !ptr)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "checked %s: %s is NULL", entry, name);
  if (ptr && htp_checked_is_device(ptr))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "checked %s: %s (%p) is device memory where the entry takes a host "
                           "array",
                           entry, name, ptr);
  return HTP_KERNEL_OK;
}

size_t htp_checked_live_bytes(void) {
  pthread_mutex_lock(&arena.lock);
  size_t bytes = arena.live_bytes;
  pthread_mutex_unlock(&arena.lock);
  return bytes;
}
