/*===- kernels/checked/checked.h - The checked device, private parts ------===*
 *
 * Shared by the checked device's arena (arena.c) and table (table.c); the
 * public side (the table, its environment, htp_checked_is_device) is in
 * kernels/htp_kernel_table.h.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CHECKED_H
#define HTP_KERNELS_CHECKED_H

#include "kernels/htp_kernel_table.h"

#include <stdint.h>

/* The table's alloc and release entries. */
htp_kernel_status htp__checked_alloc(const htp_kernel_env *env, size_t bytes, void **out);
htp_kernel_status htp__checked_release(const htp_kernel_env *env, void *ptr);
/* The table's memory entry: HTP_CHECKED_MEMORY_MB less what is allocated. */
htp_kernel_status htp__checked_memory(const htp_kernel_env *env, size_t *free_bytes,
                                      size_t *total_bytes);

/* Checks that ptr is device memory holding `bytes` bytes from ptr on (bytes
 * < 0: the caller's size overflowed) and gives the host address the CPU
 * kernels compute on in *host. NULL is allowed when optional or bytes is 0
 * (then *host is NULL). On failure writes "checked ENTRY: NAME ..." into
 * env's error buffer. */
htp_kernel_status htp__checked_span(const htp_kernel_env *env, const char *entry,
                                    const char *name, const void *ptr, int64_t bytes,
                                    int optional, void **host);
/* Checks that ptr is NOT device memory (an argument the entry reads on the
 * host: unit lists, arrays of part pointers, copies' host ends). */
htp_kernel_status htp__checked_host(const htp_kernel_env *env, const char *entry,
                                    const char *name, const void *ptr, int64_t bytes);

#endif /* HTP_KERNELS_CHECKED_H */
