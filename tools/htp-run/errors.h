/*===- tools/htp-run/errors.h - Error text for the executor's parsers ------===*
 *
 * Every parser of the executor reports failure the same way: it returns
 * non-zero and writes one line, without a trailing newline, into a caller's
 * buffer (err, err_size). htp_set_error is the one place that formats it.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_ERRORS_H
#define HTP_RUN_ERRORS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int htp_set_error(char *err, size_t err_size, const char *format, ...) {
  if (err && err_size > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(err, err_size, format, args);
    va_end(args);
  }
  return 1;
}

#endif /* HTP_RUN_ERRORS_H */
