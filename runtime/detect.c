/*===- runtime/detect.c - straggler detection: EWMA speeds, hysteresis ----===*
 *
 * Every rank runs this on the same all-gathered samples in rank order, so
 * every rank holds the same smoothed speeds and the same straggler set. The
 * sample of a rank is the work the plan gave it divided by its compute
 * seconds: a rank that pruned or handed off units is not mistaken for fast.
 * Samples are clamped to [HTP__SAMPLE_MIN, HTP__SAMPLE_MAX]: seconds the
 * contract accepts (a denormal, 1e308) would otherwise make a sample inf or
 * 0 and a relative speed inf / inf (NaN) or 0, outside (0, 1].
 *===----------------------------------------------------------------------===*/
#include "runtime/planner_internal.h"

#include <stdlib.h>

int htp__detector_init(htp__detector *detector, int world_size) {
  size_t n = (size_t)world_size;
  detector->ewma = calloc(n, sizeof(double));
  detector->relative = calloc(n, sizeof(double));
  detector->straggler = calloc(n, sizeof(uint8_t));
  detector->streak = calloc(n, sizeof(int32_t));
  detector->samples = 0;
  if (!detector->ewma || !detector->relative || !detector->straggler || !detector->streak)
    return -1;
  for (size_t r = 0; r < n; ++r) detector->relative[r] = 1.0;
  return 0;
}

void htp__detector_free(htp__detector *detector) {
  free(detector->ewma);
  free(detector->relative);
  free(detector->straggler);
  free(detector->streak);
}

int htp__detector_update(htp__detector *detector, const htp_planner_config *config,
                         const double *work, const double *seconds) {
  const int n = config->world_size;
  const double alpha = config->ewma_alpha;
  double fastest = 0.0;
  for (int r = 0; r < n; ++r) {
    /* A rank that did no work this step (every unit handed away or
     * pruned) gives no sample: its seconds are its fixed costs alone, and
     * a speed of ~0 from them would have the plan shed still more. Its
     * speed stays what it was (unknown before its first sample). */
    if (!(work[r] > 0.0) && detector->samples > 0) {
      if (detector->ewma[r] > fastest) fastest = detector->ewma[r];
      continue;
    }
    double sample = work[r] / seconds[r];
    /* !(>=) also catches NaN; the bounds keep every ratio below finite. */
    if (!(sample >= HTP__SAMPLE_MIN)) sample = HTP__SAMPLE_MIN;
    else if (sample > HTP__SAMPLE_MAX) sample = HTP__SAMPLE_MAX;
    /* The first sample seeds the average: no warm-up from zero. */
    detector->ewma[r] =
        detector->samples == 0 ? sample : alpha * sample + (1.0 - alpha) * detector->ewma[r];
    if (detector->ewma[r] > fastest) fastest = detector->ewma[r];
  }
  detector->samples++;
  int changed = 0;
  for (int r = 0; r < n; ++r) {
    double relative = detector->ewma[r] / fastest;
    detector->relative[r] = relative;
    /* Hysteresis: enter below enter_threshold, leave at or above
     * exit_threshold, each only after hysteresis_iters iterations in a row. */
    int past = detector->straggler[r] ? relative >= config->exit_threshold
                                      : relative < config->enter_threshold;
    detector->streak[r] = past ? detector->streak[r] + 1 : 0;
    if (detector->streak[r] >= config->hysteresis_iters) {
      detector->straggler[r] = !detector->straggler[r];
      detector->streak[r] = 0;
      changed = 1;
    }
  }
  return changed;
}
