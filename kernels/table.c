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

int htp_kernel_unit_list_problem(int64_t width, const int32_t *list, int64_t count, int64_t limit,
                                 char *detail, size_t detail_size) {
  if (width < 1) {
    snprintf(detail, detail_size, "unit width %lld < 1", (long long)width);
    return 1;
  }
  if (count < 0 || (count > 0 && !list)) {
    snprintf(detail, detail_size, "%lld ids and %s list", (long long)count, list ? "a" : "no");
    return 1;
  }
  for (int64_t i = 0; i < count; ++i)
    if (list[i] < 0 || list[i] >= limit) {
      snprintf(detail, detail_size, "id %d (entry %lld) is not in [0, %lld)", (int)list[i],
               (long long)i, (long long)limit);
      return 1;
    }
  return 0;
}
