/*===- runtime/balancer_step.c - htp_balancer_step: gather, detect, plan, trace ===*
 *
 * The per-iteration step compiled code and htp-run call, on a balancer
 * (hookless or not): each rank all-gathers a small fixed record (compute
 * seconds, attention and MLP seconds of its hooks) with htp_allgather_host
 * (host memory, over the host world on every backend), then feeds its own
 * planner the same numbers in rank order, so every rank ends
 * with the same plan, and writes its trace line. When every rank measured
 * both sites, the detector compares time per unit kind by kind, fixed
 * costs counted (site_speed.c). The planner
 * itself never talks to other ranks nor writes anything.
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"

#include <math.h>
#include <string.h>

htp_result htp_balancer_step(htp_balancer *b, double compute_seconds, const htp_plan **plan) {
  if (plan) *plan = NULL;
  if (!b) return HTP_ERR_INVALID;
  htp_ctx *ctx = b->ctx;
  /* Collective: bad arguments fail the world (the peers stop at once). */
  if (!plan) return htp__fail(ctx, HTP_ERR_INVALID, "htp_balancer_step: plan is NULL");
  if (!(compute_seconds > 0.0) || !isfinite(compute_seconds))
    return htp__fail(ctx, HTP_ERR_INVALID,
                          "htp_balancer_step: compute_seconds %g is not finite and > 0",
                          compute_seconds);
  /* Site seconds: -1 says "not measured" (a hookless balancer). */
  double record[HTP__STEP_RECORD_DOUBLES] = {compute_seconds, -1.0, -1.0};
  record[HTP__STEP_RECORD_FINGERPRINT] = b->fingerprint;
  const int units_clock = b->clock == HTP_CLOCK_UNITS;
  double measured[HTP_PAIR_KINDS];
  memcpy(measured, b->site_seconds, sizeof measured);
  if (!b->hookless)
    for (int k = 0; k < HTP_PAIR_KINDS; ++k)
      record[1 + k] = units_clock ? b->unit_seconds[k] : b->site_seconds[k];
  memset(b->site_seconds, 0, sizeof b->site_seconds);
  memset(b->unit_seconds, 0, sizeof b->unit_seconds);
  b->steps++;
  htp_result result = htp_allgather_host(ctx, record, b->gather, sizeof record);
  if (result != HTP_OK) return result;
  /* Ranks that plan from different configs would part ways in a later
   * collective (a deadline, or worse, plans that disagree): every rank
   * sees the same records, so all refuse here together. */
  for (int r = 1; r < htp_ctx_size(ctx); ++r)
    if (b->gather[(size_t)r * HTP__STEP_RECORD_DOUBLES + HTP__STEP_RECORD_FINGERPRINT] !=
        b->gather[HTP__STEP_RECORD_FINGERPRINT])
      return htp__fail(ctx, HTP_ERR_INVALID, "htp_balancer_step: rank %d's balancer config "
                       "differs from rank 0's (policy, thresholds, units, seed, ...): every "
                       "rank must create its balancer from the same config", r);

  htp_planner *planner = b->planner;
  const htp_planner_config *config = htp_planner_config_of(planner);
  const int n = config->world_size;
  const int modelled = htp__site_model_seconds(&b->site_model, htp_planner_plan(planner),
                                               config, b->gather, b->normalized);
  if (!modelled)
    for (int r = 0; r < n; ++r)
      b->normalized[r] = b->gather[(size_t)r * HTP__STEP_RECORD_DOUBLES];
  /* The fit counts in the plans' makespans too: shedding a rank's last
   * units saves their fixed cost, a helper's extra units do not add one. */
  int replanned = 0;
  result = htp__planner_observe_sites(planner, b->normalized, b->site_model.fixed,
                                      b->hookless ? NULL : b->site_model.kind_speed,
                                      !modelled || htp__site_model_settled(&b->site_model),
                                      &replanned);
  if (result != HTP_OK)
    return htp__ctx_error(ctx, result, "htp_balancer_step: %s", htp_planner_last_error(planner));
  htp__partition_weigh(b, htp_planner_plan(planner));
  if (b->trace)
    htp__trace_write(b, compute_seconds, b->hookless ? NULL : record + 1,
                     units_clock && !b->hookless ? measured : NULL, replanned);
  *plan = htp_planner_plan(planner);
  return HTP_OK;
}
