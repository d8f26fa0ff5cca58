/*===- runtime/site_speed.c - speeds from the hooks' seconds, fixed costs fitted -===*
 *
 * What the detector is fed when every rank timed its balance hooks: per pair
 * kind, how long a rank takes per unit against the fastest rank. A hook's
 * time is not proportional to its units: small shards run slower GEMMs and
 * every call has costs of its own (a rank with no head left still spends
 * ~5 % of a head in the attention hook). Model a rank's seconds on kind k
 * as F_r (a_k + b_k u): per-unit time (a_k / b_k + u) scaled, so dividing by
 * (phi_k + u) with phi_k = a_k / b_k (the fixed cost in units) leaves F_r
 * alone. Without it a rank that sheds looks slower per unit than it is and
 * sheds more at the next replan (a 3x rank keeping 2 of 8 MLP units measured
 * 3.9x).
 *
 * phi_k is fitted at plan changes, where a rank's units change and its
 * device does not: its mean seconds under the old plan (t0 at u0) and under
 * the new one (t1 at u1) give y = t1 / t0 = (phi + u1) / (phi + u0), i.e.
 * phi (y - 1) = u1 - y u0; least squares over every rank and change so far
 * (the newest change provisionally from MIN_STEPS steps on, for good after
 * hysteresis_iters steps or at the next change).
 * The same per-unit times give each rank's speed per kind (the kind's
 * fastest rank's time per unit over its own, an EWMA): the detector keeps
 * one speed per rank, but a device can be slowed unevenly (on an H200, a
 * rank on 8 of 24 SMs ran its heads 2.0x and its MLP units 2.8x slower),
 * and the planner places each kind's migrated units at that kind's speeds.
 * Everything runs on the gathered records in rank order: the same numbers,
 * the same fit, on every rank.
 *===----------------------------------------------------------------------===*/
#include "runtime/planner_internal.h"

#include <math.h>
#include <stdlib.h>

/* Steps right after a plan change that the means leave out: the first
 * steps under new unit sets pay one-off costs (buffers, caches). */
#define SKIP_STEPS 2
/* Steps a plan's means need before they enter the fit: the first plan
 * change comes after hysteresis_iters steps, and a fit should follow it
 * within a few, before the uncorrected per-unit ratios drift the speeds. */
#define MIN_STEPS 3

int htp__site_model_init(htp__site_model *m, const htp_planner_config *config) {
  const size_t kn = (size_t)config->world_size * HTP_PAIR_KINDS;
  *m = (htp__site_model){0};
  m->version = -1;
  m->window = config->hysteresis_iters > MIN_STEPS ? config->hysteresis_iters : MIN_STEPS;
  m->alpha = config->ewma_alpha;
  m->now = calloc(kn, sizeof *m->now);
  m->before = calloc(kn, sizeof *m->before);
  m->units = calloc(kn, sizeof *m->units);
  m->units_before = calloc(kn, sizeof *m->units_before);
  m->kind_speed = calloc(kn, sizeof *m->kind_speed);
  return m->now && m->before && m->units && m->units_before && m->kind_speed ? 0 : -1;
}

void htp__site_model_free(htp__site_model *m) {
  free(m->now);
  free(m->before);
  free(m->units);
  free(m->units_before);
  free(m->kind_speed);
}

static double site_of(const double *records, int r, int kind) {
  return records[(size_t)r * HTP__STEP_RECORD_DOUBLES + 1 + kind];
}

/* The least-squares sums of the changes from the last plan to this one:
 * every rank whose units of kind k changed adds its (u0, t0) -> (u1, t1),
 * unless either count is 0: a hook with no unit launches none of the calls
 * whose fixed cost the fit is after (an H200 rank on 8 SMs: 0.07 ms with
 * no head, 1.17 with one, 1.89 with four), so the model holds from 1 up. */
static void change_sums(const htp__site_model *m, int n, int k, double *num, double *den) {
  *num = *den = 0.0;
  for (int r = 0; r < n; ++r) {
    size_t i = (size_t)k * n + r;
    double t0 = m->before[i], t1 = m->now[i];
    double u0 = m->units_before[i], u1 = m->units[i];
    if (!(t0 > 0.0) || !(t1 > 0.0) || u0 == u1 || u0 == 0.0 || u1 == 0.0) continue;
    double y = t1 / t0;
    *num += (y - 1.0) * (u1 - y * u0);
    *den += (y - 1.0) * (y - 1.0);
  }
}

/* The fit with this plan's change in it: provisional while its means are
 * young (they move each step), committed to the sums once `commit`. */
static void fit(htp__site_model *m, const htp_planner_config *config, int n, int commit) {
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    double num, den;
    change_sums(m, n, k, &num, &den);
    num += m->num[k];
    den += m->den[k];
    if (commit) {
      m->num[k] = num;
      m->den[k] = den;
    }
    if (den > 0.0) {
      /* Below 0 (costs growing faster than the units) the plain per-unit
       * ratio is kept; above a rank's units, the fit is noise. */
      double phi = num / den, most = (double)config->units_per_rank[k];
      m->fixed[k] = phi < 0.0 ? 0.0 : phi > most ? most : phi;
    }
  }
  if (commit) m->committed = 1;
}

/* A plan change: this plan's change enters the sums if its means are old
 * enough and it has not yet, its means become "before", new ones start. */
static void start_plan(htp__site_model *m, const htp_plan *plan,
                       const htp_planner_config *config) {
  const int n = plan->world_size;
  const int counted = m->steps - SKIP_STEPS;
  /* The first plan is replaced as soon as a straggler is detected (no
   * wait: htp__site_model_settled), and its means count from one step. */
  const int enough = m->version <= 0 ? 1 : MIN_STEPS;
  if (counted >= MIN_STEPS && !m->committed) fit(m, config, n, 1);
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    for (int r = 0; r < n; ++r) {
      size_t i = (size_t)k * n + r;
      m->before[i] = counted >= enough ? m->now[i] : -1.0;
      m->units_before[i] = m->units[i];
      m->units[i] = htp_plan_units(plan, (htp_pair_kind)k, r);
      m->now[i] = 0.0;
    }
  m->version = plan->version;
  m->steps = 0;
  m->committed = 0;
}

/* Per kind, the fastest rank's time per unit this step (fixed cost
 * counted); INFINITY when no rank computed a unit of the kind. */
static void fastest_per_unit(const htp__site_model *m, const htp_plan *plan,
                             const double *records, double *fastest) {
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    fastest[k] = INFINITY;
    for (int r = 0; r < plan->world_size; ++r) {
      int units = htp_plan_units(plan, (htp_pair_kind)k, r);
      double site = site_of(records, r, k);
      double per = site / (units + m->fixed[k]);
      if (units > 0 && site > 0.0 && per < fastest[k]) fastest[k] = per;
    }
  }
}

/* The step's speed per kind of every rank that computed units of it, into
 * the EWMA (the first sample as it is). */
static void update_kind_speeds(htp__site_model *m, const htp_plan *plan, const double *records,
                               const double *fastest) {
  const int n = plan->world_size;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    for (int r = 0; r < n; ++r) {
      int units = htp_plan_units(plan, (htp_pair_kind)k, r);
      double site = site_of(records, r, k);
      if (units == 0 || !(site > 0.0) || !isfinite(fastest[k])) continue;
      double speed = fastest[k] / (site / (units + m->fixed[k]));
      double *kept = &m->kind_speed[(size_t)k * n + r];
      *kept = *kept > 0.0 ? *kept + m->alpha * (speed - *kept) : speed;
    }
}

/* Per kind, a rank's time per unit (fixed cost counted) over the fastest
 * rank's, averaged over its work; written as seconds whose work / seconds
 * is 1 / (the rank's mean slowness). A rank left with no unit of any kind
 * says nothing of its speed: its total seconds stand in, which the
 * detector does not sample (its planned work is 0). 0 (use the totals)
 * when a site went unmeasured or a ratio is out of range. */
static int normalized(const htp__site_model *m, const htp_plan *plan,
                      const htp_planner_config *config, const double *records,
                      const double *fastest, double *out) {
  const int n = plan->world_size;
  for (int r = 0; r < n; ++r) {
    double work = 0.0, slowed = 0.0;
    for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
      int units = htp_plan_units(plan, (htp_pair_kind)k, r);
      double site = site_of(records, r, k);
      if (units == 0) continue;
      if (!(site > 0.0) || !isfinite(fastest[k])) return 0;
      double w = (double)units * config->unit_cost[k] * (double)plan->num_layers;
      work += w;
      slowed += w * (site / (units + m->fixed[k])) / fastest[k];
    }
    if (work == 0.0) {
      out[r] = records[(size_t)r * HTP__STEP_RECORD_DOUBLES];
      if (!(out[r] > 0.0) || !isfinite(out[r])) return 0;
      continue;
    }
    /* Extreme site seconds can take the ratio out of range: the totals
     * (which the planner clamps) rather than a figure it refuses. */
    if (!(work > 0.0) || !(slowed > 0.0) || !isfinite(slowed)) return 0;
    out[r] = slowed;
  }
  return 1;
}

int htp__site_model_settled(const htp__site_model *m) {
  return m->version <= 0 || m->steps - SKIP_STEPS >= MIN_STEPS;
}

int htp__site_model_seconds(htp__site_model *m, const htp_plan *plan,
                            const htp_planner_config *config, const double *records,
                            double *out) {
  const int n = plan->world_size;
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < HTP_PAIR_KINDS; ++k)
      if (!(site_of(records, r, k) >= 0.0)) return 0; /* not measured: no model */
  if (plan->version != m->version) start_plan(m, plan, config);
  const int counted = ++m->steps - SKIP_STEPS;
  /* A mean over the first 1 / alpha steps, an EWMA after: the mean under
   * the old plan must follow a device that changed speed, and the first
   * sample must not weigh (1 - alpha)^s in it. */
  const double a = 1.0 / counted > m->alpha ? 1.0 / counted : m->alpha;
  for (int k = 0; k < HTP_PAIR_KINDS && counted > 0; ++k)
    for (int r = 0; r < n; ++r) {
      size_t i = (size_t)k * n + r;
      m->now[i] += a * (site_of(records, r, k) - m->now[i]);
    }
  if (counted >= MIN_STEPS && !m->committed) fit(m, config, n, counted >= m->window);
  double fastest[HTP_PAIR_KINDS];
  fastest_per_unit(m, plan, records, fastest);
  /* Past a plan change's first steps, as the means: those pay one-offs. */
  if (counted > 0) update_kind_speeds(m, plan, records, fastest);
  return normalized(m, plan, config, records, fastest, out);
}
