/*===- kernels/table.c - What every kernel table instance shares ----------===*
 *
 * The environment's empty state and the error reporting of the entries, for
 * the CPU instance (cpu/table.c) and the CUDA one (cuda/table.c) alike.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernel_table.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void htp_kernel_env_init(htp_kernel_env *env, char *error, size_t error_size) {
  if (!env) return;
  memset(env, 0, sizeof *env);
  env->device = -1;
  env->error = error;
  env->error_size = error_size;
  if (error && error_size) error[0] = '\0';
}

htp_kernel_status htp_kernel_fail(const htp_kernel_env *env, htp_kernel_status status,
                                  const char *format, ...) {
  if (env && env->error && env->error_size) {
    va_list args;
    va_start(args, format);
    vsnprintf(env->error, env->error_size, format, args);
    va_end(args);
  }
  return status;
}
