/*===- runtime/plan_step.c - htp_balancer_step: gather, detect, plan, trace ===*
 *
 * The per-iteration step compiled code and htp-run call, on a balancer
 * (hookless or not): each rank all-gathers a small fixed record (compute
 * seconds, attention and MLP seconds of its hooks) with htp_allgather, then
 * feeds its own planner the same numbers in rank order, so every rank ends
 * with the same plan, and writes its trace line. When every rank measured
 * both sites, the detector compares time per unit kind by kind. The planner
 * itself never talks to other ranks nor writes anything.
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"

#include <math.h>
#include <string.h>

#define RECORD_DOUBLES (1 + HTP_PAIR_KINDS)

/* Site seconds of rank r in the gathered records. */
static double site_of(const double *gathered, int r, int kind) {
  return gathered[(size_t)r * RECORD_DOUBLES + 1 + kind];
}

/* Seconds to feed the detector when every rank measured its sites (the
 * balance hooks' attention and MLP time): per kind, a rank's time per unit
 * over the fastest rank's, averaged over its work. The configured unit costs
 * (FLOPs) need not match how long a head and an MLP unit really take; with
 * raw totals a straggler that sheds mostly the cheaper kind would look ever
 * slower and shed ever more. Returns 0 (use the totals) when a site is
 * missing or a rank computed nothing. Same numbers in rank order on every
 * rank, so the same result everywhere. */
static int site_normalized_seconds(const htp_plan *plan, const htp_planner_config *config,
                                   const double *gathered, double *out) {
  const int n = plan->world_size;
  double fastest[HTP_PAIR_KINDS];
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    fastest[k] = INFINITY;
    for (int r = 0; r < n; ++r) {
      int units = htp_plan_units(plan, (htp_pair_kind)k, r);
      double site = site_of(gathered, r, k);
      if (!(site >= 0.0)) return 0;
      if (units > 0 && site > 0.0 && site / units < fastest[k]) fastest[k] = site / units;
    }
  }
  for (int r = 0; r < n; ++r) {
    double work = 0.0, slowed = 0.0;
    for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
      int units = htp_plan_units(plan, (htp_pair_kind)k, r);
      double site = site_of(gathered, r, k);
      if (units == 0) continue;
      if (!(site > 0.0) || !isfinite(fastest[k])) return 0;
      double w = (double)units * config->unit_cost[k] * (double)plan->num_layers;
      work += w;
      slowed += w * (site / units) / fastest[k];
    }
    if (!(work > 0.0)) return 0;
    out[r] = slowed; /* work / out[r] = 1 / (the rank's mean slowness) */
  }
  return 1;
}

htp_result htp_balancer_step(htp_balancer *b, double compute_seconds, const htp_plan **plan) {
  if (plan) *plan = NULL;
  if (!b) return HTP_ERR_INVALID;
  htp_ctx *ctx = b->ctx;
  if (!plan) return htp__ctx_error(ctx, HTP_ERR_INVALID, "htp_balancer_step: plan is NULL");
  if (!(compute_seconds > 0.0) || !isfinite(compute_seconds))
    return htp__ctx_error(ctx, HTP_ERR_INVALID,
                          "htp_balancer_step: compute_seconds %g is not finite and > 0",
                          compute_seconds);
  /* Site seconds: -1 says "not measured" (a hookless balancer). */
  double record[RECORD_DOUBLES] = {compute_seconds, -1.0, -1.0};
  if (!b->hookless)
    for (int k = 0; k < HTP_PAIR_KINDS; ++k) record[1 + k] = b->site_seconds[k];
  memset(b->site_seconds, 0, sizeof b->site_seconds);
  htp_result result = htp_allgather(ctx, record, b->gather, sizeof record);
  if (result != HTP_OK) return result;

  htp_planner *planner = b->planner;
  const htp_planner_config *config = htp_planner_config_of(planner);
  const int n = config->world_size;
  if (!site_normalized_seconds(htp_planner_plan(planner), config, b->gather, b->normalized))
    for (int r = 0; r < n; ++r) b->normalized[r] = b->gather[(size_t)r * RECORD_DOUBLES];
  int replanned = 0;
  result = htp_planner_observe(planner, b->normalized, &replanned);
  if (result != HTP_OK)
    return htp__ctx_error(ctx, result, "htp_balancer_step: %s", htp_planner_last_error(planner));
  if (b->trace) htp__trace_write(b, compute_seconds, b->hookless ? NULL : record + 1, replanned);
  *plan = htp_planner_plan(planner);
  return HTP_OK;
}
