/*===- kernels/sm_partition.c - Which SM counts partition a GPU -----------===*/
#include "kernels/sm_partition.h"

#include <stdio.h>

int htp_sm_count_check(const char *device, int sm_count, int total_sms, int step, int groups,
                       char *err, size_t err_size) {
  const int largest = step * groups;
  if (step > 0 && groups > 0 && sm_count >= step && sm_count <= largest &&
      sm_count % step == 0)
    return 0;
  if (step <= 0 || groups <= 0) {
    snprintf(err, err_size, "%s (%d SMs) cannot be partitioned into SM groups", device,
             total_sms);
    return 1;
  }
  /* The nearest valid counts around the asked one. */
  int below = sm_count / step * step, above = below + step;
  if (below < step) below = 0;
  if (above > largest) above = 0;
  if (below > largest) below = largest;
  char nearest[64] = "";
  if (below && above) snprintf(nearest, sizeof nearest, "; nearest: %d or %d", below, above);
  else if (below || above) snprintf(nearest, sizeof nearest, "; nearest: %d", below ? below : above);
  snprintf(err, err_size,
           "%d SMs is not a partition of %s: it has %d SMs, partitioned in steps of %d "
           "into at most %d groups, so the valid counts are %d, %d, ..., %d (multiples of %d "
           "up to %d)%s",
           sm_count, device, total_sms, step, groups, step, groups > 1 ? 2 * step : step,
           largest, step, largest, nearest);
  return 1;
}
