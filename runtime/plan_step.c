/*===- runtime/plan_step.c - htp_balancer_step: gather, detect, plan, trace ===*
 *
 * The per-iteration step compiled code and htp-run call: each rank
 * all-gathers a small fixed record (compute seconds, attention and MLP
 * seconds) with htp_allgather, then feeds its own planner the same numbers
 * in rank order, so every rank ends with the same plan. When every rank
 * measured both sites, the detector compares time per unit kind by kind.
 *===----------------------------------------------------------------------===*/
#include "runtime/comm_internal.h"
#include "runtime/planner_internal.h"

#include <math.h>

#define RECORD_DOUBLES (1 + HTP_PAIR_KINDS)

/* Seconds to feed the detector when every rank measured its sites (the
 * balance hooks' attention and MLP time): per kind, a rank's time per unit
 * over the fastest rank's, averaged over its work. The configured unit costs
 * (FLOPs) need not match how long a head and an MLP unit really take; with
 * raw totals a straggler that sheds mostly the cheaper kind would look ever
 * slower and shed ever more. Returns 0 (use the totals) when a site is
 * missing or a rank computed nothing. Same numbers in rank order on every
 * rank, so the same result everywhere. */
static int site_normalized_seconds(const htp_planner *planner, double *out) {
  const int n = planner->config.world_size;
  const htp_plan *plan = &planner->plan;
  double fastest[HTP_PAIR_KINDS];
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    fastest[k] = INFINITY;
    for (int r = 0; r < n; ++r) {
      int i = k * n + r;
      int units = plan->units_per_rank[k] - plan->pruned[i] - plan->sent[i] + plan->received[i];
      double site = planner->last_sites[(size_t)r * HTP_PAIR_KINDS + k];
      if (!(site >= 0.0)) return 0;
      if (units > 0 && site > 0.0 && site / units < fastest[k]) fastest[k] = site / units;
    }
  }
  for (int r = 0; r < n; ++r) {
    double work = 0.0, slowed = 0.0;
    for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
      int i = k * n + r;
      int units = plan->units_per_rank[k] - plan->pruned[i] - plan->sent[i] + plan->received[i];
      double site = planner->last_sites[(size_t)r * HTP_PAIR_KINDS + k];
      if (units == 0) continue;
      if (!(site > 0.0) || !isfinite(fastest[k])) return 0;
      double w = (double)units * planner->config.unit_cost[k] * (double)plan->num_layers;
      work += w;
      slowed += w * (site / units) / fastest[k];
    }
    if (!(work > 0.0)) return 0;
    out[r] = slowed; /* work / out[r] = 1 / (the rank's mean slowness) */
  }
  return 1;
}

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
  double *normalized = planner->gather; /* free again: the record was copied out */
  if (!site_normalized_seconds(planner, normalized)) normalized = planner->last_seconds;
  result = htp_planner_observe(planner, normalized, NULL);
  if (result != HTP_OK)
    return htp__ctx_error(ctx, result, "htp_balancer_step: %s", planner->message);
  if (planner->trace)
    htp__trace_write(planner, htp_ctx_rank(ctx), compute_seconds,
                     site_seconds ? record + 1 : NULL);
  *plan = &planner->plan;
  return HTP_OK;
}
