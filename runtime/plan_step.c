/*===- runtime/plan_step.c - htp_balancer_step: gather, detect, plan, trace ===*
 *
 * The per-iteration step compiled code and htp-run call: each rank
 * all-gathers a small fixed record (compute seconds, attention and MLP
 * seconds) with htp_allgather, then feeds its own planner the same numbers
 * in rank order, so every rank ends with the same plan.
 *===----------------------------------------------------------------------===*/
#include "runtime/comm_internal.h"
#include "runtime/planner_internal.h"

#include <math.h>

#define RECORD_DOUBLES (1 + HTP_PAIR_KINDS)

htp_result htp_balancer_step(htp_planner *planner, htp_ctx *ctx, double compute_seconds,
                             const double *site_seconds, const htp_plan **plan) {
  if (plan) *plan = NULL;
  if (!ctx) return HTP_ERR_INVALID;
  if (!planner || !plan)
    return htp__ctx_error(ctx, HTP_ERR_INVALID, "htp_balancer_step: %s is NULL",
                          !planner ? "planner" : "plan");
  const int n = planner->config.world_size;
  if (htp_ctx_size(ctx) != n)
    return htp__ctx_error(ctx, HTP_ERR_INVALID,
                          "htp_balancer_step: planner world_size %d, context world has %d ranks",
                          n, htp_ctx_size(ctx));
  if (!(compute_seconds > 0.0) || !isfinite(compute_seconds))
    return htp__ctx_error(ctx, HTP_ERR_INVALID,
                          "htp_balancer_step: compute_seconds %g is not finite and > 0",
                          compute_seconds);
  double record[RECORD_DOUBLES] = {compute_seconds, -1.0, -1.0};
  if (site_seconds)
    for (int k = 0; k < HTP_PAIR_KINDS; ++k) record[1 + k] = site_seconds[k];
  double *all = planner->gather; /* [n][record], allocated with the planner */
  htp_result result = htp_allgather(ctx, record, all, sizeof record);
  if (result != HTP_OK) return result;
  for (int r = 0; r < n; ++r) {
    planner->last_seconds[r] = all[(size_t)r * RECORD_DOUBLES];
    for (int k = 0; k < HTP_PAIR_KINDS; ++k)
      planner->last_sites[(size_t)r * HTP_PAIR_KINDS + k] = all[(size_t)r * RECORD_DOUBLES + 1 + k];
  }
  result = htp_planner_observe(planner, planner->last_seconds, NULL);
  if (result != HTP_OK)
    return htp__ctx_error(ctx, result, "htp_balancer_step: %s", planner->message);
  if (planner->trace)
    htp__trace_write(planner, htp_ctx_rank(ctx), compute_seconds,
                     site_seconds ? record + 1 : NULL);
  *plan = &planner->plan;
  return HTP_OK;
}
