/*===- kernels/cpu/env.h - The CPU environment's own object ---------------===*
 *
 * Private to kernels/cpu: what htp_cpu_kernel_env_create puts in
 * env->kernels (conversion buffers for the bf16 entries, timing marks), and
 * the one way the entries take f32 room from it.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_KERNELS_CPU_ENV_H
#define HTP_KERNELS_CPU_ENV_H

#include "kernels/htp_kernel_table.h"

typedef struct htp__cpu_env {
  float *buffer; /* the bf16 entries' f32 copies, grown as needed, never shrunk */
  int64_t buffer_floats;
  double marks[HTP_KERNEL_TIMERS][2]; /* htp_kernel_table.mark's times, seconds */
} htp__cpu_env;

/* f32 room for one call's operands: `floats` floats (< 0: the caller's size
 * arithmetic overflowed). From env's object when it has one, else a fresh
 * allocation that the caller frees through *owned. NULL, with env's error
 * set, on failure. */
float *htp__cpu_f32_room(const htp_kernel_env *env, int64_t floats, float **owned);

/* The table's device-memory and timing entries (cpu/env.c). */
htp_kernel_status htp__cpu_alloc(const htp_kernel_env *env, size_t bytes, void **out);
htp_kernel_status htp__cpu_release(const htp_kernel_env *env, void *ptr);
htp_kernel_status htp__cpu_to_device(const htp_kernel_env *env, void *dst, const void *host_src,
                                     size_t bytes);
htp_kernel_status htp__cpu_to_host(const htp_kernel_env *env, void *host_dst, const void *src,
                                   size_t bytes);
htp_kernel_status htp__cpu_synchronize(const htp_kernel_env *env);
htp_kernel_status htp__cpu_mark(const htp_kernel_env *env, int32_t timer, int32_t which);
htp_kernel_status htp__cpu_elapsed(const htp_kernel_env *env, int32_t timer, double *seconds);
/* The table's set_matmul_precision: process-wide (htp__linear_gemm). */
htp_kernel_status htp__cpu_set_matmul_precision(const htp_kernel_env *env, int32_t precision);

#endif /* HTP_KERNELS_CPU_ENV_H */
