/*===- tools/htp-run/convert.h - Float conversions shared by the readers ---===*/
#ifndef HTP_RUN_CONVERT_H
#define HTP_RUN_CONVERT_H

#include <float.h>
#include <math.h>

/* double to float, saturating to ±inf: an out-of-range cast is undefined in C. */
static inline float htp_narrow_to_float(double value) {
  if (value > FLT_MAX)
    return INFINITY;
  if (value < -FLT_MAX)
    return -INFINITY;
  return (float)value;
}

#endif /* HTP_RUN_CONVERT_H */
