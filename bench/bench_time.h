/*===- bench/bench_time.h - the C benchmarks' clock and median -------------===*
 *
 * Header-only: each benchmark under bench/ is one program.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_BENCH_TIME_H
#define HTP_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

/* Monotonic milliseconds. */
static inline double bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static inline int bench_compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of n >= 1 values (sorts them in place). */
static inline double bench_median(double *values, int n) {
  qsort(values, (size_t)n, sizeof *values, bench_compare_doubles);
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

#endif /* HTP_BENCH_TIME_H */
