/*===- kernels/table.c - What every kernel table instance shares ----------===*
 *
 * The environment's empty state and the error reporting of the entries, for
 * the CPU instance (cpu/table.c) and the CUDA one (cuda/table.c) alike.
 *===----------------------------------------------------------------------===*/
#include "kernels/htp_kernel_table.h"

#include <limits.h>
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

/* A product past int64 (product's answer; refused, and said so). */
#define OVERFLOWS INT64_MAX

/* Each named size in [0, INT_MAX]; the first that is not, in detail. */
static int sizes_problem(const char *const *names, const int64_t *sizes, int count,
                         char *detail, size_t detail_size) {
  for (int i = 0; i < count; ++i) {
    if (sizes[i] >= 0 && sizes[i] <= INT_MAX)
      continue;
    if (sizes[i] == OVERFLOWS)
      snprintf(detail, detail_size, "%s overflows 64 bits", names[i]);
    else
      snprintf(detail, detail_size, "%s = %lld is %s for cuBLAS's and the CUDA kernels' int sizes",
               names[i], (long long)sizes[i], sizes[i] < 0 ? "negative" : "too large");
    return 1;
  }
  return 0;
}

/* a * b for a, b >= 0; -1 where either is negative, OVERFLOWS where the
 * product does not fit (either way refused). */
static int64_t product(int64_t a, int64_t b) {
  int64_t p;
  if (a < 0 || b < 0)
    return -1;
  return __builtin_mul_overflow(a, b, &p) ? OVERFLOWS : p;
}

int htp_kernel_gemm_sizes_problem(int64_t rows, int64_t in_features, int64_t out_features,
                                  char *detail, size_t detail_size) {
  static const char *const names[] = {"rows", "in_features", "out_features"};
  const int64_t sizes[] = {rows, in_features, out_features};
  return sizes_problem(names, sizes, 3, detail, detail_size);
}

int htp_kernel_attention_sizes_problem(int64_t batch, int64_t tokens, int64_t model_dim,
                                       int64_t num_heads, int64_t head_dim, char *detail,
                                       size_t detail_size) {
  const int64_t inner = product(num_heads, head_dim), qkv = product(3, inner);
  static const char *const names[] = {"batch",          "model_dim",         "num_heads",
                                      "head_dim",       "batch x tokens",    "3 x heads x head_dim",
                                      "tokens x tokens", "tokens x 3 x heads x head_dim",
                                      "tokens x heads x head_dim"};
  const int64_t sizes[] = {batch,
                           model_dim,
                           num_heads,
                           head_dim,
                           product(batch, tokens),
                           qkv,
                           product(tokens, tokens),
                           product(tokens, qkv),
                           product(tokens, inner)};
  return sizes_problem(names, sizes, 9, detail, detail_size);
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
