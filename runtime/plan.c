/*===- runtime/plan.c - the planner: SEMI / resize / migrate plans --------===*
 *
 * htp__plan_compute, the pure planning step, turns relative speeds and a
 * straggler set into a plan (htp.h explains the rules): which stragglers
 * resize or migrate, the target time T, gamma per straggler, and per pair
 * kind the pruned / handed-off / taken-in unit counts and the flows between
 * ranks. Migrators' and helpers' whole unit counts are the ones with the
 * smallest predicted pair time (the slowest rank's units / speed), fewest
 * units moved among equals, rather than gamma u rounded up per rank. Everything runs in rank order on caller-owned arrays, so every
 * rank gets the same plan bit for bit and a plan allocates nothing. The
 * planner object around it feeds the detector (detect.c) and decides when
 * to replan. htp_plan_check states the invariants in code.
 *===----------------------------------------------------------------------===*/
#include "runtime/planner_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

htp_result htp__planner_error(htp_planner *planner, htp_result code, const char *format, ...) {
  if (planner) {
    va_list args;
    va_start(args, format);
    vsnprintf(planner->message, sizeof planner->message, format, args);
    va_end(args);
  }
  return code;
}

const char *htp_policy_name(htp_policy policy) {
  switch (policy) {
  case HTP_POLICY_NONE: return "none";
  case HTP_POLICY_RESIZE: return "resize";
  case HTP_POLICY_MIGRATE: return "migrate";
  case HTP_POLICY_SEMI: return "semi";
  }
  return "?";
}

htp_result htp_policy_parse(const char *name, htp_policy *policy) {
  static const htp_policy all[] = {HTP_POLICY_NONE, HTP_POLICY_RESIZE, HTP_POLICY_MIGRATE,
                                   HTP_POLICY_SEMI};
  if (!name || !policy) return HTP_ERR_INVALID;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    if (strcmp(name, htp_policy_name(all[i])) == 0) {
      *policy = all[i];
      return HTP_OK;
    }
  return HTP_ERR_INVALID;
}

const char *htp_action_name(htp_action action) {
  switch (action) {
  case HTP_ACTION_KEEP: return "keep";
  case HTP_ACTION_RESIZE: return "resize";
  case HTP_ACTION_MIGRATE: return "migrate";
  case HTP_ACTION_HELP: return "help";
  }
  return "?";
}

static htp_result config_error(char *why, size_t why_size, const char *message) {
  if (why && why_size) snprintf(why, why_size, "%s", message);
  return HTP_ERR_INVALID;
}

htp_result htp_planner_config_check(const htp_planner_config *c, char *why, size_t why_size) {
  if (!c) return config_error(why, why_size, "config is NULL");
  if (c->magic != HTP_PLANNER_CONFIG_MAGIC)
    return config_error(why, why_size, "config not started from HTP_PLANNER_CONFIG_INITIALIZER");
  if (c->world_size < 1 || c->world_size > (1 << 20))
    return config_error(why, why_size, "world_size must be in [1, 2^20]");
  if (c->num_layers < 1 || c->num_layers > (1 << 16))
    return config_error(why, why_size, "num_layers must be in [1, 65536]");
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    if (c->units_per_rank[k] < 1 || c->units_per_rank[k] > (1 << 20))
      return config_error(why, why_size, "units_per_rank must be in [1, 2^20]");
    /* Bounded so work, shares and modelled seconds stay finite; also
     * rejects NaN. */
    if (!(c->unit_cost[k] >= HTP_UNIT_COST_MIN && c->unit_cost[k] <= HTP_UNIT_COST_MAX))
      return config_error(why, why_size,
                          "unit_cost must be in [1e-9, 1e9] (relative costs: a head about 1)");
    for (int r = 0; c->owned[k] && r < c->world_size; ++r)
      if (c->owned[k][r] < 1 || c->owned[k][r] > c->units_per_rank[k])
        return config_error(why, why_size, "owned units must be in [1, units_per_rank]");
  }
  if (c->policy < HTP_POLICY_NONE || c->policy > HTP_POLICY_SEMI)
    return config_error(why, why_size, "unknown policy");
  if (!(c->ewma_alpha > 0.0 && c->ewma_alpha <= 1.0))
    return config_error(why, why_size, "ewma_alpha must be in (0, 1]");
  if (!(c->enter_threshold > 0.0 && c->enter_threshold <= 1.0))
    return config_error(why, why_size, "enter_threshold must be in (0, 1]");
  if (!(c->exit_threshold >= c->enter_threshold && c->exit_threshold <= 1.0))
    return config_error(why, why_size, "exit_threshold must be in [enter_threshold, 1]");
  if (c->hysteresis_iters < 1) return config_error(why, why_size, "hysteresis_iters must be >= 1");
  if (!(c->resize_limit >= 0.0 && c->resize_limit <= 1.0))
    return config_error(why, why_size, "resize_limit must be in [0, 1]");
  if (!(c->replan_delta >= 0.0) || !isfinite(c->replan_delta))
    return config_error(why, why_size, "replan_delta must be finite and >= 0");
  if (!(c->max_gamma > 0.0 && c->max_gamma <= 1.0))
    return config_error(why, why_size, "max_gamma must be in (0, 1]");
  if (why && why_size) why[0] = '\0';
  return HTP_OK;
}

/* Points the public plan view at the storage and writes the initial plan:
 * nobody balances, every speed 1. */
static void plan_reset(const htp_planner_config *config, htp__plan_storage *s, htp_plan *plan) {
  const int n = config->world_size;
  memset(plan, 0, sizeof *plan);
  plan->policy = config->policy;
  plan->world_size = n;
  plan->num_layers = config->num_layers;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    plan->units_per_rank[k] = config->units_per_rank[k];
    plan->flows[k] = s->flows[k];
  }
  plan->target_time = 1.0;
  plan->speed = s->speed;
  plan->straggler = s->straggler;
  plan->action = s->action;
  plan->gamma = s->gamma;
  plan->pruned = s->pruned;
  plan->sent = s->sent;
  plan->received = s->received;
  plan->absorb = s->absorb;
  plan->owned = s->owned;
  for (int r = 0; r < n; ++r) s->speed[r] = 1.0;
}

/* Rank r's share of a full rank's work: the cost of the units it owns
 * (owned, [kind][world]) over that of units_per_rank; exactly 1 when it
 * owns them all. */
static double share_of(const htp_planner_config *config, const int32_t *owned, int r) {
  double work = 0.0, full = 0.0;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    work += config->unit_cost[k] * owned[(size_t)k * config->world_size + r];
    full += config->unit_cost[k] * config->units_per_rank[k];
  }
  return work == full ? 1.0 : work / full;
}

/* The owned units of every rank, and each rank's share (the speeds the
 * planner plans with are per whole rank: a rank with half the units at
 * half the speed per unit is as fast as the others). */
static void fill_owned(const htp_planner_config *config, htp__plan_storage *s) {
  const int n = config->world_size;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    for (int r = 0; r < n; ++r)
      s->owned[(size_t)k * n + r] = htp_config_owned(config, (htp_pair_kind)k, r);
  for (int r = 0; r < n; ++r) s->share[r] = share_of(config, s->owned, r);
}

/* Whether every rank owns all its slots (an even split). */
static int owns_all(const htp_planner_config *config) {
  return !config->owned[HTP_PAIR_ATTENTION] && !config->owned[HTP_PAIR_MLP];
}

int htp__plan_memory_init(const htp_planner_config *config, htp__plan_storage *s,
                          htp__plan_scratch *scratch, htp_plan *plan) {
  const size_t n = (size_t)config->world_size, kn = n * HTP_PAIR_KINDS;
  memset(s, 0, sizeof *s);
  memset(scratch, 0, sizeof *scratch);
  s->speed = calloc(n, sizeof(double));
  s->gamma = calloc(n, sizeof(double));
  s->owned = calloc(kn, sizeof(int32_t));
  s->share = calloc(n, sizeof(double));
  s->straggler = calloc(n, 1);
  s->action = calloc(n, 1);
  s->pruned = calloc(kn, sizeof(int32_t));
  s->sent = calloc(kn, sizeof(int32_t));
  s->received = calloc(kn, sizeof(int32_t));
  s->absorb = calloc(kn, sizeof(int32_t));
  int ok = s->speed && s->gamma && s->owned && s->share && s->straggler && s->action &&
           s->pruned && s->sent && s->received && s->absorb;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    s->flows[k] = calloc(n, sizeof(htp_flow));
    ok = ok && s->flows[k];
  }
  scratch->order = calloc(n, sizeof(int32_t));
  scratch->helpers = calloc(n, sizeof(int32_t));
  scratch->keys = calloc(n, sizeof(htp__rank_key));
  scratch->need = calloc(n, sizeof(int32_t));
  scratch->kind_speed = calloc(n, sizeof(double));
  scratch->rank_speed = calloc(n, sizeof(double));
  scratch->speed = calloc(n, sizeof(double));
  scratch->sums = calloc(n + 1, sizeof(double));
  ok = ok && scratch->order && scratch->helpers && scratch->keys && scratch->need &&
       scratch->kind_speed && scratch->rank_speed && scratch->speed && scratch->sums;
  if (!ok) return -1;
  fill_owned(config, s);
  plan_reset(config, s, plan);
  return 0;
}

void htp__plan_memory_free(htp__plan_storage *s, htp__plan_scratch *scratch) {
  free(s->speed);
  free(s->gamma);
  free(s->owned);
  free(s->share);
  free(s->straggler);
  free(s->action);
  free(s->pruned);
  free(s->sent);
  free(s->received);
  free(s->absorb);
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) free(s->flows[k]);
  free(scratch->order);
  free(scratch->helpers);
  free(scratch->keys);
  free(scratch->need);
  free(scratch->kind_speed);
  free(scratch->rank_speed);
  free(scratch->speed);
  free(scratch->sums);
}

htp_result htp_planner_create(const htp_planner_config *config, htp_planner **planner_out) {
  if (!planner_out) return HTP_ERR_INVALID;
  *planner_out = NULL;
  if (htp_planner_config_check(config, NULL, 0) != HTP_OK) return HTP_ERR_INVALID;
  htp_planner *planner = calloc(1, sizeof *planner);
  if (!planner) return HTP_ERR_NOMEM;
  planner->config = *config;
  const size_t kn = (size_t)config->world_size * HTP_PAIR_KINDS;
  planner->work = calloc((size_t)config->world_size, sizeof(double));
  planner->kind_speed = calloc(kn, sizeof(double));
  planner->plan_kind_speed = calloc(kn, sizeof(double));
  if (!planner->work || !planner->kind_speed || !planner->plan_kind_speed ||
      htp__plan_memory_init(config, &planner->storage, &planner->scratch, &planner->plan) != 0 ||
      htp__plan_memory_init(config, &planner->candidate_storage, &planner->candidate_scratch,
                            &planner->candidate) != 0 ||
      htp__detector_init(&planner->detector, config->world_size) != 0) {
    htp_planner_destroy(planner);
    return HTP_ERR_NOMEM;
  }
  /* The caller's owned arrays need not outlive the planner: its copy. */
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    if (config->owned[k])
      planner->config.owned[k] = planner->storage.owned + (size_t)k * config->world_size;
  *planner_out = planner;
  return HTP_OK;
}

htp_result htp__planner_set_owned(htp_planner *planner, const int32_t *owned) {
  if (!planner || !owned) return HTP_ERR_INVALID;
  htp_planner_config *c = &planner->config;
  const int n = c->world_size;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    for (int r = 0; r < n; ++r)
      if (owned[(size_t)k * n + r] < 1 || owned[(size_t)k * n + r] > c->units_per_rank[k])
        return htp__planner_error(planner, HTP_ERR_INVALID,
                                  "re-partition: rank %d would own %d units of kind %d, not in "
                                  "[1, %d]",
                                  r, owned[(size_t)k * n + r], k, c->units_per_rank[k]);
  const size_t kn = (size_t)n * HTP_PAIR_KINDS;
  htp__plan_storage *both[2] = {&planner->storage, &planner->candidate_storage};
  for (int i = 0; i < 2; ++i) {
    memcpy(both[i]->owned, owned, kn * sizeof(int32_t));
    for (int r = 0; r < n; ++r) both[i]->share[r] = share_of(c, both[i]->owned, r);
  }
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) c->owned[k] = planner->storage.owned + (size_t)k * n;
  htp__detector *d = &planner->detector;
  d->samples = 0;
  planner->pending = 0;
  for (int r = 0; r < n; ++r) {
    d->ewma[r] = 0.0;
    d->relative[r] = 1.0;
    d->straggler[r] = 0;
    d->streak[r] = 0;
  }
  const int64_t version = planner->plan.version;
  htp__plan_storage *s = &planner->storage; /* the plan that balances nothing */
  memset(s->pruned, 0, kn * sizeof(int32_t));
  memset(s->sent, 0, kn * sizeof(int32_t));
  memset(s->received, 0, kn * sizeof(int32_t));
  memset(s->absorb, 0, kn * sizeof(int32_t));
  memset(s->gamma, 0, (size_t)n * sizeof(double));
  memset(s->straggler, 0, (size_t)n);
  memset(s->action, HTP_ACTION_KEEP, (size_t)n);
  plan_reset(c, s, &planner->plan);
  planner->plan.version = version + 1;
  return HTP_OK;
}

void htp_planner_destroy(htp_planner *planner) {
  if (!planner) return;
  htp__plan_memory_free(&planner->storage, &planner->scratch);
  htp__plan_memory_free(&planner->candidate_storage, &planner->candidate_scratch);
  htp__detector_free(&planner->detector);
  free(planner->work);
  free(planner->kind_speed);
  free(planner->plan_kind_speed);
  free(planner);
}

const char *htp_planner_last_error(const htp_planner *planner) {
  return planner ? planner->message : "planner is NULL";
}
const htp_planner_config *htp_planner_config_of(const htp_planner *planner) {
  return planner ? &planner->config : NULL;
}
const htp_plan *htp_planner_plan(const htp_planner *planner) {
  return planner ? &planner->plan : NULL;
}
const double *htp_planner_speeds(const htp_planner *planner) {
  return planner ? planner->detector.relative : NULL;
}
int64_t htp_planner_iteration(const htp_planner *planner) {
  return planner ? planner->iteration : -1;
}

/* A relative speed as the planning step uses it: at least
 * HTP__PLAN_MIN_SPEED, so no time it divides by it overflows. */
static double plan_speed(double speed) {
  return speed >= HTP__PLAN_MIN_SPEED ? speed : HTP__PLAN_MIN_SPEED;
}

/* Rank r's speed per unit of kind k: measured (kind_speeds, kind-major),
 * else its one speed (per whole rank) times its share of a full rank's
 * work. Both floored like the rank speeds. */
static double kind_speed_of(const double *speeds, const double *kind_speeds, double share, int n,
                            int k, int r) {
  const double measured = kind_speeds ? kind_speeds[(size_t)k * n + r] : 0.0;
  return measured > 0.0 ? plan_speed(measured) : plan_speed(speeds[r]) * share;
}

double htp__plan_makespan(const htp_plan *plan, const htp_planner_config *config,
                          const double *speeds, const double *fixed, const double *kind_speeds) {
  const int n = plan->world_size;
  double total = 0.0;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    double slowest = 0.0;
    for (int r = 0; r < n; ++r) {
      int units = htp_plan_units(plan, (htp_pair_kind)k, r);
      double t = units > 0 ? ((double)units + fixed[k]) /
                                 kind_speed_of(speeds, kind_speeds,
                                               plan->owned ? share_of(config, plan->owned, r) : 1.0,
                                               n, k, r)
                           : 0.0;
      if (t > slowest) slowest = t;
    }
    total += slowest * config->unit_cost[k];
  }
  return total * (double)plan->num_layers;
}

double htp_plan_rank_work(const htp_plan *plan, const htp_planner_config *config, int rank) {
  if (!plan || !config || rank < 0 || rank >= plan->world_size) return 0.0;
  double work = 0.0;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    work += (double)htp_plan_units(plan, (htp_pair_kind)k, rank) * config->unit_cost[k];
  return work * (double)plan->num_layers;
}

/* ---- planning ----------------------------------------------------------- */

/* Largest key first; equal keys by rank id, so the order is total and the
 * same on every rank whatever qsort's algorithm (qsort has no context, so
 * the key travels with the rank). */
typedef htp__rank_key deficit_key;

static int by_deficit(const void *a, const void *b) {
  const deficit_key *x = a, *y = b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* x (already whole) as a count in [0, most]: NaN and negatives are 0, and
 * anything above most (inf too) is most. The one way this file turns a
 * double into an integer: casting one outside the integer's range is
 * undefined behaviour, not a large number. */
static int64_t count_of(double x, int64_t most) {
  if (!(x > 0.0)) return 0;
  return x >= (double)most ? most : (int64_t)x;
}

static int32_t round_units(double x) { return (int32_t)count_of(floor(x + 0.5), INT32_MAX); }
/* Whole units covering x; the slack absorbs bisection and product error. */
static int32_t ceil_units(double x) { return (int32_t)count_of(ceil(x - 1e-9), INT32_MAX); }

/* Moves the `count` largest keys (by_deficit order) to the front of keys,
 * in no particular order among themselves: quickselect with a pivot chosen
 * by position, so the same input gives the same output on every rank (and
 * the key order is total, so the chosen SET is unique anyway). O(n). */
static void select_largest(htp__rank_key *keys, int n, int count) {
  int lo = 0, hi = n - 1;
  while (lo < hi && count > lo && count <= hi) {
    htp__rank_key pivot = keys[lo + (hi - lo) / 2];
    int i = lo, j = hi;
    while (i <= j) {
      while (by_deficit(&keys[i], &pivot) < 0) ++i;
      while (by_deficit(&keys[j], &pivot) > 0) --j;
      if (i <= j) {
        htp__rank_key t = keys[i];
        keys[i] = keys[j];
        keys[j] = t;
        ++i;
        --j;
      }
    }
    /* [lo, j] before the pivot, [i, hi] after it, (j, i) equal to it. */
    if (count <= j) hi = j;
    else if (count >= i) lo = i;
    else return;
  }
}

/* Whole-unit balancing of one pair kind. Time is in units at speed 1: a
 * rank computing L > 0 units at relative speed s takes (L + phi) / s, phi
 * the hooks' fixed cost per call in units (the site model's fit; 0 until
 * fitted); a rank left with no unit takes no time. */

/* Units a migrator of speed s must hand off to finish u units within t:
 * all of them when not even one fits beside the fixed cost. */
static int64_t units_to_shed(double t, double s, int u, double phi) {
  double fit = floor(t * s - phi);
  if (fit >= (double)u) return 0;
  return u - count_of(fit, u); /* NaN fits nothing: all of them */
}

/* Units a helper of speed s can take in on top of its own u within t. */
static int64_t units_room(double t, double s, int u, double phi) {
  double fit = floor(t * s - phi);
  return count_of(fit - (double)u, INT32_MAX);
}

/* The most units of its own u a migrator may shed (max_gamma of them). */
static int32_t shed_cap(double max_gamma, int u) {
  int32_t cap = ceil_units(max_gamma * u);
  return cap > u ? u : cap;
}

/* Whether every migrator (scratch->order[0, m)) finishes within t, shedding
 * at most its cap (none with `nobody_sheds`), with the helpers'
 * (scratch->helpers[0, h)) room at t covering what they shed. owned: the
 * kind's units per rank. Monotone in t. */
static int makespan_feasible(double t, const int32_t *owned, double phi, double max_gamma,
                             int nobody_sheds, const double *speeds,
                             const htp__plan_scratch *scratch, int m, int h) {
  int64_t need = 0, room = 0;
  for (int i = 0; i < m; ++i) {
    const int r = scratch->order[i];
    int64_t shed = units_to_shed(t, speeds[r], owned[r], phi);
    if (shed > (nobody_sheds ? 0 : shed_cap(max_gamma, owned[r]))) return 0;
    need += shed;
  }
  for (int i = 0; i < h && room < need; ++i)
    room += units_room(t, speeds[scratch->helpers[i]], owned[scratch->helpers[i]], phi);
  return need <= room;
}

/* The smallest feasible makespan (it is some (L + phi) / s: the feasible
 * set is [t*, inf)), by bisection: the counts at the returned t are the
 * fewest moves that reach t* (to 1e-13 of it). The bracket: the continuous
 * optimum T u (the plan's target time, capped or not) is a lower bound, and
 * fixed costs only lengthen a rank that keeps units; above it the
 * continuous surplus grows by at least the helpers' speed sum per unit of
 * time and whole units (and a fixed cost on each) lose at most 1 + phi per
 * rank, so T u + (m + h) (1 + phi) / sum_H s is feasible unless a cap
 * binds; at (u + phi) / min migrator speed nobody sheds, which is always
 * feasible. Rank order only: the same bits on every rank. */
static double min_makespan(int u, const int32_t *owned, int even, double phi, double max_gamma,
                           double T, const double *speeds, const htp__plan_scratch *scratch,
                           int m, int h) {
  double helper_speed = 0.0;
  for (int i = 0; i < h; ++i) helper_speed += speeds[scratch->helpers[i]];
  /* Uneven shares: T u is the continuous optimum only up to each rank's
   * rounding to whole units; the search starts from the slowest helper's
   * own units (helpers shed nothing, so no makespan is below that). */
  double lo = T * (double)u * (1.0 - 1e-9);
  if (even && lo < 0.5 * (double)u) lo = 0.5 * (double)u; /* below u nobody can take a unit */
  for (int i = 0; !even && i < h; ++i) {
    const int r = scratch->helpers[i];
    const double own = ((double)owned[r] + phi) / speeds[r] * (1.0 - 1e-9);
    if (i == 0 || own > lo) lo = own;
  }
  double hi = T * (double)u + (double)(m + h) * (1.0 + phi) / helper_speed;
  if (hi < lo) hi = lo / (1.0 - 1e-9); /* uneven: a helper's own units take longer */
  if (!makespan_feasible(hi, owned, phi, max_gamma, 0, speeds, scratch, m, h)) {
    hi = 0.0;
    for (int i = 0; i < m; ++i) {
      const int r = scratch->order[i];
      double t = ((double)owned[r] + phi) / speeds[r];
      if (t > hi) hi = t;
    }
    /* (u + phi) / s * s can round below: nudge up until nobody sheds. */
    for (int i = 0;
         i < 64 && !makespan_feasible(hi, owned, phi, max_gamma, 1, speeds, scratch, m, h); ++i)
      hi *= 1.0 + 1e-15 * (double)(1u << (i < 30 ? i : 30));
  }
  /* Each step halves [lo, hi]; the cap only bounds the loop by
   * construction (doubles need fewer than 2100 halvings to meet). */
  for (int step = 0; step < 4096 && hi - lo > 1e-13 * hi; ++step) {
    double mid = lo + (hi - lo) / 2.0;
    if (mid <= lo || mid >= hi) break;
    if (makespan_feasible(mid, owned, phi, max_gamma, 0, speeds, scratch, m, h)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/* The target time: the smallest T >= T0 = 1 / (slowest helper's speed) at
 * which the helpers' spare covers what the migrators (scratch->order[0, m),
 * worst first) must shed. At T >= T0 every helper has spare T s_h - 1 >= 0,
 * so with the shedding migrators M' the balance
 * T sum_H s - |H| = sum_M' (1 - T s_m) is linear:
 * T = (|H| + |M'|) / (sum_H s + sum_M' s). A migrator with T s_m >= 1
 * sheds nothing: drop the mildest and solve again. The sums over M' are
 * summed once, worst first (the order a sum per M' would take: the same
 * bits), so dropping many mild migrators stays linear, not quadratic
 * (131,072 ranks with 131,071 stragglers took 2 s a replan). */
static double target_time(const double *speeds, const htp__plan_scratch *scratch, int h,
                          int m) {
  double helper_speed = 0.0, slowest = 1.0;
  for (int i = 0; i < h; ++i) {
    double s = speeds[scratch->helpers[i]];
    helper_speed += s;
    if (s < slowest) slowest = s;
  }
  const double T0 = 1.0 / slowest;
  double *sums = scratch->sums; /* sums[j]: helpers' plus the first j migrators' */
  sums[0] = helper_speed;
  for (int i = 0; i < m; ++i) sums[i + 1] = sums[i] + speeds[scratch->order[i]];
  for (int shedding = m; shedding > 0; --shedding) {
    const double sum = sums[shedding];
    double t = (double)(h + shedding) / sum;
    if (t * speeds[scratch->order[shedding - 1]] < 1.0) return t > T0 ? t : T0;
  }
  return T0;
}

/* Takes up to `excess` units off the needs ([m], deficit order), mildest
 * migrator first; returns how many it took (0 when excess <= 0). */
static int64_t keep_on_mildest(int32_t *need, int m, int64_t excess) {
  int64_t taken = 0;
  for (int i = m - 1; i >= 0 && taken < excess; --i) {
    int64_t kept = need[i] < excess - taken ? need[i] : excess - taken;
    need[i] -= (int32_t)kept;
    taken += kept;
  }
  return taken;
}

/* Migrators and helpers of pair kind k: the whole unit counts that
 * minimise the pair's makespan (units_per_rank / speed, max over ranks;
 * every pair ends in an all-reduce, so each kind is balanced on its own),
 * moving as few units as reach it, and the flows that carry them.
 * Rounding gamma u up per rank instead hands off a whole extra unit for any
 * speed a hair under the exact one (3.16 -> 4 of 6 heads at speed 0.31 with
 * one helper), which makes the helper the slower rank. phi: the kind's
 * fixed cost per call, in units. */
static void place_migrated_units(const htp_planner_config *c, int k, double T,
                                 const double *speeds, double phi, int num_migrators,
                                 int num_helpers, htp__plan_scratch *scratch,
                                 htp__plan_storage *s, htp_plan *plan) {
  const int n = c->world_size;
  const int u = c->units_per_rank[k];
  const int32_t *owned = s->owned + (size_t)k * n;
  int32_t *sent = s->sent + (size_t)k * n;
  int32_t *received = s->received + (size_t)k * n, *absorb = s->absorb + (size_t)k * n;
  double makespan = min_makespan(u, owned, owns_all(c), phi, c->max_gamma, T, speeds, scratch,
                                 num_migrators, num_helpers);
  int64_t placed = 0, total_absorb = 0;
  for (int i = 0; i < num_migrators; ++i) {
    const int r = scratch->order[i];
    scratch->need[i] = (int32_t)units_to_shed(makespan, speeds[r], owned[r], phi);
    placed += scratch->need[i];
  }
  for (int i = 0; i < num_helpers; ++i) {
    int h = scratch->helpers[i];
    absorb[h] = (int32_t)units_room(makespan, speeds[h], owned[h], phi);
    total_absorb += absorb[h];
  }
  /* The makespan is feasible, so the room covers the need; should
   * rounding ever say otherwise, the excess stays on the mildest migrators
   * rather than looping below for room that is not there. */
  placed -= keep_on_mildest(scratch->need, num_migrators, placed - total_absorb);
  if (placed == 0) return;
  /* Quotas in proportion to room, largest remainder: every helper stays
   * within the makespan whatever its share. */
  int64_t given = 0;
  deficit_key *rest = scratch->keys; /* reuse: key = remainder, rank = helper */
  int num_rest = 0;
  for (int i = 0; i < num_helpers; ++i) {
    int h = scratch->helpers[i];
    double exact = (double)placed * (double)absorb[h] / (double)total_absorb;
    int32_t quota = (int32_t)count_of(floor(exact), absorb[h]);
    received[h] = quota;
    given += quota;
    if (quota < absorb[h]) {
      rest[num_rest].key = exact - floor(exact);
      rest[num_rest].rank = h;
      num_rest++;
    }
  }
  /* The largest remainders get one more unit each (usually one pass).
   * A pass that gives nothing ends the loop: with room >= need it never
   * happens, and then the rest stays on the mildest migrators. */
  int64_t left = placed - given;
  select_largest(rest, num_rest, left < num_rest ? (int)left : num_rest);
  for (int64_t gave = 1; given < placed && gave > 0;) {
    gave = 0;
    for (int i = 0; i < num_rest && given < placed; ++i) {
      int h = rest[i].rank;
      if (received[h] < absorb[h]) {
        received[h]++;
        given++;
        gave++;
      }
    }
  }
  placed -= keep_on_mildest(scratch->need, num_migrators, placed - given);
  /* Flows: migrators in deficit order against helpers in rank order. */
  htp_flow *flows = s->flows[k];
  int num_flows = 0, hi = 0;
  int32_t left_at_helper = num_helpers > 0 ? received[scratch->helpers[0]] : 0;
  for (int i = 0; i < num_migrators; ++i) {
    int m = scratch->order[i];
    int32_t left = scratch->need[i];
    sent[m] = left;
    while (left > 0) {
      /* received sums to the needs, so a helper with some left exists. */
      while (left_at_helper == 0 && hi + 1 < num_helpers)
        left_at_helper = received[scratch->helpers[++hi]];
      if (left_at_helper == 0) break;
      int32_t count = left < left_at_helper ? left : left_at_helper;
      flows[num_flows++] = (htp_flow){m, scratch->helpers[hi], count};
      left -= count;
      left_at_helper -= count;
    }
    sent[m] -= left; /* 0 unless the sums disagreed */
  }
  plan->num_flows[k] = num_flows;
}

/* Every field of the plan's storage at "nothing moves", and no flows. */
static void clear_plan(const htp_planner_config *c, const double *speeds,
                       const uint8_t *stragglers, htp__plan_storage *s, htp_plan *plan) {
  const int n = c->world_size;
  const size_t kn = (size_t)n * HTP_PAIR_KINDS;
  memcpy(s->speed, speeds, (size_t)n * sizeof(double));
  memcpy(s->straggler, stragglers, (size_t)n);
  memset(s->gamma, 0, (size_t)n * sizeof(double));
  memset(s->action, HTP_ACTION_KEEP, (size_t)n);
  memset(s->pruned, 0, kn * sizeof(int32_t));
  memset(s->sent, 0, kn * sizeof(int32_t));
  memset(s->received, 0, kn * sizeof(int32_t));
  memset(s->absorb, 0, kn * sizeof(int32_t));
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    memset(s->flows[k], 0, (size_t)n * sizeof(htp_flow));
    plan->num_flows[k] = 0;
  }
  plan->policy = c->policy;
}

/* Stragglers sorted by resize deficit (against T0, the slowest helper's
 * time), each marked migrate or resize (SEMI splits them at resize_limit):
 * scratch->order holds the migrators, then the resizers, each in deficit
 * order. Returns the migrators' count; *num_resizers the resizers'. */
static int order_stragglers(const htp_planner_config *c, const double *speeds,
                            const uint8_t *stragglers, double T0, htp__plan_scratch *scratch,
                            htp__plan_storage *s, int *num_resizers) {
  const int n = c->world_size;
  deficit_key *keys = scratch->keys;
  int num_stragglers = 0;
  for (int r = 0; r < n; ++r)
    if (stragglers[r]) {
      double deficit = 1.0 - speeds[r] * T0;
      keys[num_stragglers].key = deficit > 0.0 ? deficit : 0.0;
      keys[num_stragglers].rank = r;
      num_stragglers++;
    }
  qsort(keys, (size_t)num_stragglers, sizeof(deficit_key), by_deficit);
  for (int i = 0; i < num_stragglers; ++i) {
    int r = keys[i].rank;
    int migrate = c->policy == HTP_POLICY_MIGRATE ||
                  (c->policy == HTP_POLICY_SEMI && keys[i].key > c->resize_limit);
    s->action[r] = migrate ? HTP_ACTION_MIGRATE : HTP_ACTION_RESIZE;
  }
  int num_migrators = 0;
  for (int i = 0; i < num_stragglers; ++i)
    if (s->action[keys[i].rank] == HTP_ACTION_MIGRATE) scratch->order[num_migrators++] = keys[i].rank;
  *num_resizers = 0;
  for (int i = 0; i < num_stragglers; ++i)
    if (s->action[keys[i].rank] == HTP_ACTION_RESIZE)
      scratch->order[num_migrators + (*num_resizers)++] = keys[i].rank;
  return num_migrators;
}

/* Target time, then the stragglers it leaves time to spare. A mild
 * straggler beside much slower migrators may finish its own units within
 * T (T s_r >= 1): it sheds nothing and its spare would go unused, so it
 * helps instead (stragglers at 1.25x, 2x and 3x at tp 4: the 1.25x rank
 * takes in a head rather than rank 0 taking every head shed). Promotion
 * lowers T; never below 1 / s of a helper (target_time's T0), so nobody
 * promoted has to shed. Repeat until no straggler qualifies. Updates the
 * counts and scratch->order / helpers; returns T. */
static double promote_spare_stragglers(int n, const double *speeds, htp__plan_scratch *scratch,
                                       htp__plan_storage *s, int *num_migrators,
                                       int *num_resizers, int *num_helpers) {
  double T = target_time(speeds, scratch, *num_helpers, *num_migrators);
  while (*num_migrators > 0) {
    int kept = 0, migrators = 0;
    for (int i = 0; i < *num_migrators + *num_resizers; ++i) {
      int r = scratch->order[i];
      if (T * speeds[r] >= 1.0) {
        s->action[r] = HTP_ACTION_KEEP;
        continue;
      }
      migrators += i < *num_migrators;
      scratch->order[kept++] = r;
    }
    if (kept == *num_migrators + *num_resizers) break;
    *num_migrators = migrators;
    *num_resizers = kept - migrators;
    *num_helpers = 0; /* still in rank order */
    for (int r = 0; r < n; ++r)
      if (s->action[r] == HTP_ACTION_KEEP) scratch->helpers[(*num_helpers)++] = r;
    T = target_time(speeds, scratch, *num_helpers, *num_migrators);
  }
  return T;
}

/* Per kind: whole units, pruned by resizers (in proportion to gamma),
 * moved from migrators (at the kind's own speeds, and the target time they
 * give: the makespan search starts from it). */
static void shed_units(const htp_planner_config *c, const double *speeds, const double *fixed,
                       const double *kind_speeds, double T, int num_migrators,
                       int num_stragglers, int num_helpers, htp__plan_scratch *scratch,
                       htp__plan_storage *s, htp_plan *plan) {
  const int n = c->world_size, even = owns_all(c);
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    const int32_t *owned = s->owned + (size_t)k * n;
    int32_t *pruned = s->pruned + (size_t)k * n;
    for (int i = num_migrators; i < num_stragglers; ++i) {
      int r = scratch->order[i];
      int32_t units = round_units(s->gamma[r] * owned[r]);
      pruned[r] = units > owned[r] ? owned[r] : units;
    }
    if (num_migrators > 0 && num_helpers > 0) {
      /* Per unit (speeds are per whole rank): uneven, scaled so the fastest
       * is 1 like measured kind speeds; the target time from the same
       * speeds per whole rank. */
      double fastest = 0.0;
      for (int r = 0; r < n && !even; ++r)
        if (speeds[r] * s->share[r] > fastest) fastest = speeds[r] * s->share[r];
      for (int r = 0; r < n; ++r) {
        scratch->kind_speed[r] =
            kind_speed_of(speeds, kind_speeds, even ? 1.0 : s->share[r] / fastest, n, k, r);
        scratch->rank_speed[r] = scratch->kind_speed[r] / s->share[r];
      }
      const double T_k = kind_speeds || !even ? target_time(scratch->rank_speed, scratch,
                                                            num_helpers, num_migrators)
                                              : T;
      place_migrated_units(c, k, T_k, scratch->kind_speed, fixed[k], num_migrators, num_helpers,
                           scratch, s, plan);
    }
  }
}

/* Helpers that received units help; a straggler whose share rounds to no
 * whole unit (or whose units found no room) keeps them all: say so, rather
 * than "resize" with nothing pruned. */
static void name_actions(int n, int num_helpers, int num_stragglers,
                         const htp__plan_scratch *scratch, htp__plan_storage *s) {
  for (int i = 0; i < num_helpers; ++i) {
    int h = scratch->helpers[i];
    for (int k = 0; k < HTP_PAIR_KINDS; ++k)
      if (s->received[(size_t)k * n + h] > 0) s->action[h] = HTP_ACTION_HELP;
  }
  for (int i = 0; i < num_stragglers; ++i) {
    int r = scratch->order[i];
    int32_t shed = 0;
    for (int k = 0; k < HTP_PAIR_KINDS; ++k)
      shed += s->pruned[(size_t)k * n + r] + s->sent[(size_t)k * n + r];
    if (shed == 0) s->action[r] = HTP_ACTION_KEEP;
  }
}

void htp__plan_compute(const htp_planner_config *c, const double *speeds,
                       const uint8_t *stragglers, const double *fixed, const double *kind_speeds,
                       htp__plan_scratch *scratch, htp__plan_storage *s, htp_plan *plan) {
  const int n = c->world_size;
  /* Planned with floored speeds: a rank 1e300 times slower than the
   * fastest would make its times overflow. */
  for (int r = 0; r < n; ++r) scratch->speed[r] = plan_speed(speeds[r]);
  speeds = scratch->speed;
  clear_plan(c, speeds, stragglers, s, plan);

  /* Healthy ranks (helpers) in rank order; their slowest sets T0. */
  int num_helpers = 0;
  double slowest_all = 1.0, slowest_healthy = 1.0;
  for (int r = 0; r < n; ++r) {
    if (speeds[r] < slowest_all) slowest_all = speeds[r];
    if (!stragglers[r]) {
      scratch->helpers[num_helpers++] = r;
      if (speeds[r] < slowest_healthy) slowest_healthy = speeds[r];
    }
  }
  if (c->policy == HTP_POLICY_NONE || num_helpers == 0 || num_helpers == n) {
    plan->target_time = 1.0 / slowest_all;
    return;
  }
  int num_resizers = 0;
  int num_migrators =
      order_stragglers(c, speeds, stragglers, 1.0 / slowest_healthy, scratch, s, &num_resizers);
  const double T = promote_spare_stragglers(n, speeds, scratch, s, &num_migrators,
                                            &num_resizers, &num_helpers);
  const int num_stragglers = num_migrators + num_resizers; /* those that may shed */
  plan->target_time = T;
  for (int i = 0; i < num_stragglers; ++i) {
    int r = scratch->order[i];
    double gamma = 1.0 - T * speeds[r];
    gamma = gamma < 0.0 ? 0.0 : gamma;
    s->gamma[r] = gamma > c->max_gamma ? c->max_gamma : gamma;
  }
  shed_units(c, speeds, fixed, kind_speeds, T, num_migrators, num_stragglers, num_helpers,
             scratch, s, plan);
  name_actions(n, num_helpers, num_stragglers, scratch, s);
}

/* The next plan version, for these speeds and flags at the current fit
 * and kind speeds (NULL: the rank speeds alone, as given to
 * htp_planner_plan_speeds). */
static void replace_plan(htp_planner *planner, const double *speeds, const uint8_t *stragglers,
                         const double *kind_speeds) {
  const size_t kn = (size_t)planner->config.world_size * HTP_PAIR_KINDS;
  htp__plan_compute(&planner->config, speeds, stragglers, planner->fixed, kind_speeds,
                    &planner->scratch, &planner->storage, &planner->plan);
  memcpy(planner->plan_fixed, planner->fixed, sizeof planner->plan_fixed);
  if (kind_speeds) memcpy(planner->plan_kind_speed, kind_speeds, kn * sizeof(double));
  else memset(planner->plan_kind_speed, 0, kn * sizeof(double));
  planner->plan.version++;
}

/* Whether a straggler's speed on some kind moved more than replan_delta
 * since the plan was judged, or was first measured since (kind-major). */
static int kind_speeds_drifted(const htp_planner *planner) {
  const int n = planner->config.world_size;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    for (int r = 0; r < n; ++r) {
      const size_t i = (size_t)k * n + r;
      const double now = planner->kind_speed[i], then = planner->plan_kind_speed[i];
      if (planner->detector.straggler[r] && now > 0.0 &&
          (then <= 0.0 || fabs(now - then) > planner->config.replan_delta))
        return 1;
    }
  return 0;
}

htp_result htp_planner_plan_speeds(htp_planner *planner, const double *speeds,
                                   const uint8_t *stragglers) {
  if (!planner) return HTP_ERR_INVALID;
  if (!speeds) return htp__planner_error(planner, HTP_ERR_INVALID, "speeds is NULL");
  const int n = planner->config.world_size;
  for (int r = 0; r < n; ++r)
    if (!(speeds[r] > 0.0 && speeds[r] <= 1.0))
      return htp__planner_error(planner, HTP_ERR_INVALID,
                                "speed of rank %d is %g, not in (0, 1]", r, speeds[r]);
  uint8_t *flags = planner->detector.straggler;
  if (stragglers) {
    for (int r = 0; r < n; ++r) flags[r] = stragglers[r] ? 1 : 0;
  } else {
    for (int r = 0; r < n; ++r) flags[r] = speeds[r] < planner->config.enter_threshold;
  }
  memcpy(planner->detector.relative, speeds, (size_t)n * sizeof(double));
  replace_plan(planner, speeds, flags, NULL);
  return HTP_OK;
}

/* htp_planner_observe; settled 0 keeps the plan this step (a change of the
 * straggler set is made at the first settled step). */
static htp_result observe(htp_planner *planner, const double *seconds, int settled,
                          int *replanned) {
  if (replanned) *replanned = 0;
  if (!planner) return HTP_ERR_INVALID;
  if (!seconds) return htp__planner_error(planner, HTP_ERR_INVALID, "seconds is NULL");
  const int n = planner->config.world_size;
  for (int r = 0; r < n; ++r)
    if (!(seconds[r] > 0.0) || !isfinite(seconds[r]))
      return htp__planner_error(planner, HTP_ERR_INVALID,
                                "compute seconds of rank %d is %g, not finite and > 0", r,
                                seconds[r]);
  /* Work each rank did under the current plan. */
  double *work = planner->work;
  /* Per whole rank (divided by its share): a rank that owns half the
   * units and runs at half the speed per unit is not a straggler. */
  for (int r = 0; r < n; ++r)
    work[r] = htp_plan_rank_work(&planner->plan, &planner->config, r) / planner->storage.share[r];
  htp__detector *d = &planner->detector;
  int changed = htp__detector_update(d, &planner->config, work, seconds);
  planner->iteration++;
  /* A plan is replaced only once it has been measured (settled): a change
   * of the straggler set before then waits, and is made when it is. */
  planner->pending |= changed;
  changed = planner->pending && settled;
  if (changed) {
    planner->pending = 0;
    replace_plan(planner, d->relative, d->straggler, planner->kind_speed);
  } else {
    /* A straggler whose speed drifted may replan too, as long as it still
     * looks slow (a recovering one waits for the hysteresis); healthy
     * ranks' drift does not (they are within the thresholds by definition).
     * Both plans are judged at the new speeds: the new one is taken only if
     * it is predicted faster by more than HTP__REPLAN_MIN_GAIN. */
    int drifted = 0, refit = 0;
    for (int r = 0; r < n && !drifted; ++r)
      if (d->straggler[r] && d->relative[r] < planner->config.exit_threshold &&
          /* the plan holds its speeds floored: compare like with like */
          fabs(plan_speed(d->relative[r]) - planner->plan.speed[r]) >
              planner->config.replan_delta)
        drifted = 1;
    /* So does a fixed cost fitted since the plan was made: the fit needs a
     * plan change to see, so the first plan never has it, and the speeds
     * it corrects do not drift far enough to replan on their own. (Without
     * stragglers the candidate is the same plan and is not taken.) */
    for (int k = 0; k < HTP_PAIR_KINDS; ++k)
      if (fabs(planner->fixed[k] - planner->plan_fixed[k]) >
          HTP__REFIT_CHANGE * (1.0 + planner->plan_fixed[k]))
        refit = 1;
    /* And so do speeds per kind measured or moved since the plan was
     * judged (a device slowed unevenly: its kinds' units placed apart). */
    const int kinds_moved = kind_speeds_drifted(planner);
    if (settled && (drifted || refit || kinds_moved)) {
      htp__plan_compute(&planner->config, d->relative, d->straggler, planner->fixed,
                        planner->kind_speed, &planner->candidate_scratch,
                        &planner->candidate_storage, &planner->candidate);
      double now = htp__plan_makespan(&planner->plan, &planner->config, d->relative,
                                      planner->fixed, planner->kind_speed);
      double next = htp__plan_makespan(&planner->candidate, &planner->config, d->relative,
                                       planner->fixed, planner->kind_speed);
      if (now > next * (1.0 + HTP__REPLAN_MIN_GAIN)) {
        /* Swap: the views point into their own storage, which moves along. */
        htp__plan_storage storage = planner->storage;
        htp_plan plan = planner->plan;
        planner->storage = planner->candidate_storage;
        planner->plan = planner->candidate;
        planner->candidate_storage = storage;
        planner->candidate = plan;
        planner->plan.version = planner->candidate.version + 1;
        changed = 1;
      }
      /* Judged at this fit: the next one must move as far again. */
      memcpy(planner->plan_fixed, planner->fixed, sizeof planner->plan_fixed);
      memcpy(planner->plan_kind_speed, planner->kind_speed,
             (size_t)n * HTP_PAIR_KINDS * sizeof(double));
    }
  }
  if (replanned) *replanned = changed;
  return HTP_OK;
}

htp_result htp_planner_observe(htp_planner *planner, const double *seconds, int *replanned) {
  return observe(planner, seconds, 1, replanned);
}

htp_result htp__planner_observe_sites(htp_planner *planner, const double *seconds,
                                      const double *fixed, const double *kind_speeds,
                                      int settled, int *replanned) {
  if (planner && fixed) memcpy(planner->fixed, fixed, sizeof planner->fixed);
  if (planner && kind_speeds)
    memcpy(planner->kind_speed, kind_speeds,
           (size_t)planner->config.world_size * HTP_PAIR_KINDS * sizeof(double));
  return observe(planner, seconds, settled, replanned);
}

/* ---- invariants --------------------------------------------------------- */

static htp_result violation(char *why, size_t why_size, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static htp_result violation(char *why, size_t why_size, const char *format, ...) {
  if (why && why_size) {
    va_list args;
    va_start(args, format);
    vsnprintf(why, why_size, format, args);
    va_end(args);
  }
  return HTP_ERR_INTERNAL;
}

/* Kind k's counts on rank r: non-negative, within the rank's units, and
 * what the policy and the rank's action allow. */
static htp_result check_rank_counts(const htp_plan *plan, int k, int r, char *why,
                                    size_t why_size) {
  const int n = plan->world_size;
  const size_t i = (size_t)k * n + r;
  const int u = plan->owned ? plan->owned[i] : plan->units_per_rank[k];
  const int32_t pruned = plan->pruned[i], sent = plan->sent[i], received = plan->received[i];
  if (pruned < 0 || sent < 0 || received < 0)
    return violation(why, why_size, "kind %d rank %d: negative count", k, r);
  if (pruned + sent > u)
    return violation(why, why_size, "kind %d rank %d: prunes %d and sends %d of %d units", k, r,
                     pruned, sent, u);
  if (received > plan->absorb[i])
    return violation(why, why_size, "kind %d rank %d: receives %d but can absorb %d", k, r,
                     received, plan->absorb[i]);
  if (received > 0 && sent > 0)
    return violation(why, why_size, "kind %d rank %d: both sends and receives", k, r);
  if (received > 0 && plan->action[r] != HTP_ACTION_HELP)
    return violation(why, why_size, "kind %d rank %d: receives but action %s", k, r,
                     htp_action_name(plan->action[r]));
  if (pruned > 0 && (plan->policy == HTP_POLICY_MIGRATE || plan->policy == HTP_POLICY_NONE))
    return violation(why, why_size, "kind %d rank %d: policy %s prunes", k, r,
                     htp_policy_name(plan->policy));
  if (sent > 0 && (plan->policy == HTP_POLICY_RESIZE || plan->policy == HTP_POLICY_NONE))
    return violation(why, why_size, "kind %d rank %d: policy %s moves units", k, r,
                     htp_policy_name(plan->policy));
  if (pruned > 0 && plan->action[r] != HTP_ACTION_RESIZE)
    return violation(why, why_size, "kind %d rank %d: prunes but action %s", k, r,
                     htp_action_name(plan->action[r]));
  if (sent > 0 && plan->action[r] != HTP_ACTION_MIGRATE)
    return violation(why, why_size, "kind %d rank %d: sends but action %s", k, r,
                     htp_action_name(plan->action[r]));
  return HTP_OK;
}

/* Kind k's flows: well formed, and carrying exactly each rank's sent and
 * received counts (total_sent in all). */
static htp_result check_flows(const htp_plan *plan, int k, int64_t total_sent, char *why,
                              size_t why_size) {
  const int n = plan->world_size;
  int64_t flow_total = 0;
  for (int f = 0; f < plan->num_flows[k]; ++f) {
    const htp_flow *flow = &plan->flows[k][f];
    if (flow->src < 0 || flow->src >= n || flow->dst < 0 || flow->dst >= n ||
        flow->src == flow->dst || flow->count <= 0)
      return violation(why, why_size, "kind %d flow %d: bad (%d -> %d, %d)", k, f, flow->src,
                       flow->dst, flow->count);
    flow_total += flow->count;
  }
  if (flow_total != total_sent)
    return violation(why, why_size, "kind %d: flows carry %lld units, plan sends %lld", k,
                     (long long)flow_total, (long long)total_sent);
  int64_t *out = calloc((size_t)n * 2, sizeof(int64_t));
  if (!out) return violation(why, why_size, "out of memory while checking");
  int64_t *in = out + n;
  for (int f = 0; f < plan->num_flows[k]; ++f) {
    out[plan->flows[k][f].src] += plan->flows[k][f].count;
    in[plan->flows[k][f].dst] += plan->flows[k][f].count;
  }
  htp_result result = HTP_OK;
  for (int r = 0; r < n && result == HTP_OK; ++r) {
    const size_t i = (size_t)k * n + r;
    if (out[r] != plan->sent[i] || in[r] != plan->received[i])
      result = violation(why, why_size, "kind %d rank %d: flows say %lld out %lld in, plan %d/%d",
                         k, r, (long long)out[r], (long long)in[r], plan->sent[i],
                         plan->received[i]);
  }
  free(out);
  return result;
}

htp_result htp_plan_check(const htp_plan *plan, char *why, size_t why_size) {
  if (!plan) return violation(why, why_size, "plan is NULL");
  const int n = plan->world_size;
  for (int r = 0; r < n; ++r) {
    if (!(plan->gamma[r] >= 0.0 && plan->gamma[r] <= 1.0))
      return violation(why, why_size, "rank %d: gamma %g not in [0, 1]", r, plan->gamma[r]);
    if (!plan->straggler[r] && plan->gamma[r] != 0.0)
      return violation(why, why_size, "rank %d: healthy but gamma %g", r, plan->gamma[r]);
    if (plan->action[r] > HTP_ACTION_HELP)
      return violation(why, why_size, "rank %d: unknown action %d", r, plan->action[r]);
  }
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    int64_t total_sent = 0, total_received = 0, computed = 0, total_pruned = 0, units = 0;
    for (int r = 0; r < n; ++r) {
      htp_result result = check_rank_counts(plan, k, r, why, why_size);
      if (result != HTP_OK) return result;
      const size_t i = (size_t)k * n + r;
      units += plan->owned ? plan->owned[i] : plan->units_per_rank[k];
      total_sent += plan->sent[i];
      total_received += plan->received[i];
      total_pruned += plan->pruned[i];
      computed += htp_plan_units(plan, (htp_pair_kind)k, r);
    }
    if (total_sent != total_received)
      return violation(why, why_size, "kind %d: %lld units sent, %lld received", k,
                       (long long)total_sent, (long long)total_received);
    /* Every unit computed once or pruned on its owner. */
    if (computed + total_pruned != units)
      return violation(why, why_size, "kind %d: %lld computed + %lld pruned != %lld units", k,
                       (long long)computed, (long long)total_pruned, (long long)units);
    htp_result result = check_flows(plan, k, total_sent, why, why_size);
    if (result != HTP_OK) return result;
  }
  if (why && why_size) why[0] = '\0';
  return HTP_OK;
}

int htp_plan_equal(const htp_plan *a, const htp_plan *b) {
  if (a == b) return 1; /* the same plan, or both NULL */
  if (!a || !b) return 0;
  if (a->version != b->version || a->policy != b->policy || a->world_size != b->world_size ||
      a->num_layers != b->num_layers ||
      memcmp(&a->target_time, &b->target_time, sizeof(double)) != 0)
    return 0;
  const size_t n = (size_t)a->world_size, kn = n * HTP_PAIR_KINDS;
  if (memcmp(a->units_per_rank, b->units_per_rank, sizeof a->units_per_rank) ||
      memcmp(a->speed, b->speed, n * sizeof(double)) ||
      memcmp(a->gamma, b->gamma, n * sizeof(double)) || memcmp(a->straggler, b->straggler, n) ||
      memcmp(a->action, b->action, n) || memcmp(a->pruned, b->pruned, kn * sizeof(int32_t)) ||
      memcmp(a->sent, b->sent, kn * sizeof(int32_t)) ||
      memcmp(a->received, b->received, kn * sizeof(int32_t)) ||
      memcmp(a->absorb, b->absorb, kn * sizeof(int32_t)) ||
      (a->owned == NULL) != (b->owned == NULL) ||
      (a->owned && memcmp(a->owned, b->owned, kn * sizeof(int32_t))))
    return 0;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    if (a->num_flows[k] != b->num_flows[k] ||
        memcmp(a->flows[k], b->flows[k], (size_t)a->num_flows[k] * sizeof(htp_flow)))
      return 0;
  return 1;
}
