/*===- kernels/cpu/env.c - The CPU environment, memory and timing ---------===*
 *
 * The CPU's side of the table entries every device has: its environment
 * object (htp_cpu_kernel_env_create), "device" memory (host memory, 64-byte
 * aligned like the CUDA allocator's 256 is enough for any vector load),
 * copies (the host is the device: plain memcpy) and timing marks on the
 * monotonic clock (nothing is enqueued, so the host clock is the device's).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "kernels/cpu/env.h"
#include "kernels/cpu/cpu_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

htp_kernel_status htp_cpu_kernel_env_create(htp_kernel_env *env, char *error,
                                            size_t error_size) {
  if (!env) return HTP_KERNEL_ERR_INVALID;
  htp_kernel_env_init(env, error, error_size);
  if (htp__cpu_gemm_ready() != 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "cpu: out of memory before the GEMM "
                           "library's first product (oneDNN makes its kernels then, and would "
                           "crash short of memory)");
  htp__cpu_env *object = calloc(1, sizeof *object);
  if (!object)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "cpu: out of memory for the environment");
  env->kernels = object;
  return HTP_KERNEL_OK;
}

void htp_cpu_kernel_env_destroy(htp_kernel_env *env) {
  if (!env || !env->kernels) return;
  htp__cpu_env *object = env->kernels;
  free(object->buffer);
  free(object);
  env->kernels = NULL;
}

float *htp__cpu_f32_room(const htp_kernel_env *env, int64_t floats, float **owned) {
  *owned = NULL;
  if (floats < 0 || (uint64_t)floats > SIZE_MAX / sizeof(float)) {
    htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "cpu bf16: the f32 copies' size overflows");
    return NULL;
  }
  if (floats == 0) floats = 1;
  htp__cpu_env *object = env ? env->kernels : NULL;
  if (object && object->buffer_floats >= floats) return object->buffer;
  float *room = malloc((size_t)floats * sizeof(float));
  if (!room) {
    htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "cpu bf16: out of memory for %lld f32 copies",
                    (long long)floats);
    return NULL;
  }
  if (object) {
    free(object->buffer);
    object->buffer = room;
    object->buffer_floats = floats;
  } else {
    *owned = room;
  }
  return room;
}

enum { ALIGNMENT = 64 };

htp_kernel_status htp__cpu_alloc(const htp_kernel_env *env, size_t bytes, void **out) {
  if (!out || bytes == 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cpu alloc: %zu bytes into %p", bytes,
                           (void *)out);
  *out = NULL;
  if (bytes > SIZE_MAX - ALIGNMENT)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "cpu alloc: %zu bytes is too many", bytes);
  void *memory = aligned_alloc(ALIGNMENT, (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT);
  if (!memory)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM, "cpu alloc: out of memory for %zu bytes",
                           bytes);
  *out = memory;
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__cpu_release(const htp_kernel_env *env, void *ptr) {
  (void)env;
  free(ptr);
  return HTP_KERNEL_OK;
}

static htp_kernel_status copy_bytes(const htp_kernel_env *env, void *dst, const void *src,
                                    size_t bytes, const char *what) {
  if (bytes && (!dst || !src))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "cpu %s: NULL with %zu bytes", what,
                           bytes);
  if (bytes) memcpy(dst, src, bytes);
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__cpu_to_device(const htp_kernel_env *env, void *dst, const void *host_src,
                                     size_t bytes) {
  return copy_bytes(env, dst, host_src, bytes, "to_device");
}

htp_kernel_status htp__cpu_to_host(const htp_kernel_env *env, void *host_dst, const void *src,
                                   size_t bytes) {
  return copy_bytes(env, host_dst, src, bytes, "to_host");
}

htp_kernel_status htp__cpu_synchronize(const htp_kernel_env *env) {
  (void)env;
  return HTP_KERNEL_OK;
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int valid_timer(int32_t timer) { return timer >= 0 && timer < HTP_KERNEL_TIMERS; }

htp_kernel_status htp__cpu_mark(const htp_kernel_env *env, int32_t timer, int32_t which) {
  htp__cpu_env *object = env ? env->kernels : NULL;
  if (!object || !valid_timer(timer) || (which != 0 && which != 1))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cpu mark %d of timer %d: needs mark 0 or 1 of a timer in [0, %d) "
                           "and an environment from htp_cpu_kernel_env_create",
                           (int)which, (int)timer, HTP_KERNEL_TIMERS);
  object->marks[timer][which] = now_seconds();
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__cpu_elapsed(const htp_kernel_env *env, int32_t timer, double *seconds) {
  htp__cpu_env *object = env ? env->kernels : NULL;
  if (!object || !seconds || !valid_timer(timer))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cpu elapsed of timer %d: needs a timer in [0, %d) and an "
                           "environment from htp_cpu_kernel_env_create",
                           (int)timer, HTP_KERNEL_TIMERS);
  /* Marks are 0 until recorded (the monotonic clock is past 0): elapsed
   * without both, or with mark 1 before mark 0, measured nothing. */
  const double start = object->marks[timer][0], end = object->marks[timer][1];
  if (start == 0.0 || end == 0.0 || end < start)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cpu elapsed of timer %d: %s", (int)timer,
                           start == 0.0 || end == 0.0 ? "needs mark 0 and mark 1 recorded first"
                                                      : "mark 1 was recorded before mark 0");
  *seconds = end - start;
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__cpu_set_matmul_precision(const htp_kernel_env *env, int32_t precision) {
  if (precision != HTP_MATMUL_F32 && precision != HTP_MATMUL_TF32 && precision != HTP_MATMUL_BF16)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cpu set_matmul_precision: %d is not an htp_matmul_precision",
                           (int)precision);
  htp__set_matmul_precision(precision);
  return HTP_KERNEL_OK;
}
