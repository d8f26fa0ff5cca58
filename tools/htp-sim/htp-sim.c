/*===- tools/htp-sim/htp-sim.c - the planner driven by a cost model -------===*
 *
 * Runs libhtprt's detector and planner (the same code ranks run) on
 * simulated timings: N ranks, chi of them slowed down, and reports for each
 * policy the simulated iteration time over the ideal time, the fraction of
 * work pruned (what resize pays in accuracy), the weights moved, and the
 * planner's own wall time per iteration. See --help for the cost model.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "runtime/htp.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *usage =
    "usage: htp-sim [options]\n"
    "\n"
    "Drives libhtprt's real detector and planner (htp_planner_observe) with\n"
    "simulated compute times and prints one row per (ranks, stragglers,\n"
    "slowdown, policy).\n"
    "\n"
    "Cost model (per iteration):\n"
    "  Every layer has an attention pair and an MLP pair; each pair ends in\n"
    "  an all-reduce, so each pair takes the time of its slowest rank:\n"
    "    pair time = max over ranks r of (kept + migrated-in units) * unit cost\n"
    "                / speed_r\n"
    "    iteration = layers * (attention pair time + MLP pair time)\n"
    "              + weight transfer, in the iteration after a replan:\n"
    "                max over ranks of bytes sent or received / bandwidth,\n"
    "                counting only units a helper does not hold yet (the\n"
    "                runtime caches migrated weights while a plan keeps them)\n"
    "  ideal       = layers * total work of all ranks / sum of speeds\n"
    "                (perfect balance, nothing pruned, free transfers).\n"
    "  All-reduce time is the same for every policy and is left out of both,\n"
    "  which makes the ratio stricter, not looser. Speeds: 1 for healthy\n"
    "  ranks, 1/slowdown for stragglers, each times (1 + noise * u), u\n"
    "  uniform in [-1, 1] drawn per rank per iteration. The planner sees each\n"
    "  rank's own compute time (its work / its speed), as htp_balancer_step\n"
    "  would gather it; detection takes hysteresis_iters (3) iterations.\n"
    "  resize removes pruned units from the work (so it looks fast) and the\n"
    "  'pruned%' column reports the fraction of all work it skipped: the\n"
    "  accuracy it pays. migrate and semi report 'moved' (MiB per replan, mean).\n"
    "\n"
    "Columns: time/ideal over the steady iterations (after --warmup) and over\n"
    "the whole run (detection and transfers included); pruned%; moved MiB;\n"
    "replans; planner wall time per iteration, mean and max (microseconds,\n"
    "one rank's htp_planner_observe: detector + plan when it replans; the max\n"
    "includes whatever the OS did meanwhile); replan_us: median wall time of\n"
    "21 forced replans (htp_planner_plan_speeds) at the final speeds.\n"
    "\n";
/* Two strings: ISO C promises only 4095 characters in one literal. */
static const char *usage_options =
    "Options (defaults in brackets; each number must lie in the range given;\n"
    "a LIST is values separated by commas, none empty, at most 32; a real\n"
    "number is plain decimal, [-]digits[.digits][e[+-]digits]; each option\n"
    "at most once, as --opt VALUE or --opt=VALUE):\n"
    "  --ranks LIST          world sizes, 2 to 1048576 [8,64,512,4096]\n"
    "  --stragglers LIST     straggler counts chi, 1 to 1048575 [1,2,4]\n"
    "  --slowdowns LIST      slowdown factors, 1 to 1000 [1.5,2,4,8]\n"
    "  --policies LIST       policies (below), each at most once [all of them]\n"
    "  --iters K             iterations per row, 1 to 10000000 [200]\n"
    "  --warmup K            iterations left out of the steady ratio,\n"
    "                        0 to 10000000 and below --iters [20]\n"
    "  --noise X             relative speed noise, 0 to 0.99 [0.02]\n"
    "  --layers L            layers, 1 to 65536 [80]\n"
    "  --heads-per-rank H    attention units per rank, 1 to 1048576 [8]\n"
    "  --mlp-units-per-rank M  MLP units (64-neuron groups) per rank,\n"
    "                        1 to 1048576 [56]\n"
    "  --head-cost C         cost of one head relative to one MLP unit,\n"
    "                        0.001 to 1000 [4.5]\n"
    "  --unit-seconds S      seconds one MLP unit takes on a healthy rank\n"
    "                        (per layer per iteration), 1e-9 to 1000 [4.3e-5]\n"
    "  --head-bytes B        weight bytes of one head, 0 to 1e12 [8388608]\n"
    "  --mlp-unit-bytes B    weight bytes of one MLP unit, 0 to 1e12 [2097152]\n"
    "  --bandwidth B         bytes/s of a rank's link for transfers,\n"
    "                        1 to 1e15 [2.5e10]\n"
    "  --resize-limit X      SEMI resize limit, 0 to 1 [0.25]\n"
    "  --seed N              placement of stragglers and noise,\n"
    "                        0 to 9007199254740991 [1]\n"
    "  -h, --help            this text\n"
    "\n"
    "Every (ranks, stragglers) pair of the lists is simulated whose straggler\n"
    "count is below its world size; each other pair is skipped with a note on\n"
    "stderr, and when no pair is left htp-sim refuses the command line.\n"
    "\n"
    "The defaults describe a LLaMA-2-70B-like layer at tp = 8: 64 heads of\n"
    "dim 128 (8 per rank), d = 8192, MLP 28672 neurons in groups of 64 (56\n"
    "per rank), bf16 weights. Ranks beyond 8 keep the same per-rank shape.\n"
    "Exit status: 0; 1 if a simulation fails; 2 for an unknown option, a bad\n"
    "value (the message names the option and the value) or no pair to run.\n"
    "\n"
    "Policies (libhtprt's names):";

/* Every policy, in the order of the table's rows; names from libhtprt. */
static const htp_policy ALL_POLICIES[] = {HTP_POLICY_NONE, HTP_POLICY_RESIZE, HTP_POLICY_MIGRATE,
                                          HTP_POLICY_SEMI};
enum { NUM_POLICIES = sizeof ALL_POLICIES / sizeof ALL_POLICIES[0] };

enum { MAX_LIST = 32, MAX_ITEM = 64 };

typedef struct options {
  int ranks[MAX_LIST], num_ranks;
  int stragglers[MAX_LIST], num_stragglers;
  double slowdowns[MAX_LIST];
  int num_slowdowns;
  htp_policy policies[NUM_POLICIES];
  int num_policies;
  int iters, warmup, layers, heads, mlp_units;
  double noise, head_cost, unit_seconds, head_bytes, mlp_unit_bytes, bandwidth, resize_limit;
  unsigned long long seed;
} options;

/* The one list syntax of every option (a single value is a list of one):
 * items between commas, none empty (strtok would skip "8,," silently), at
 * most max. Returns the count, or -1 after naming the option and value. */
static int split_list(const char *option, const char *text, int max, char items[][MAX_ITEM]) {
  int n = 0;
  for (const char *start = text;; ++n) {
    const char *comma = strchr(start, ',');
    size_t length = comma ? (size_t)(comma - start) : strlen(start);
    const char *why = length == 0 ? "an empty item"
                      : length >= MAX_ITEM ? "an item too long"
                      : n == max ? "too many items" : NULL;
    if (why) {
      if (max == 1)
        fprintf(stderr, "htp-sim: bad value '%s' for %s: %s (one value)\n", text, option, why);
      else
        fprintf(stderr, "htp-sim: bad value '%s' for %s: %s (values separated by commas, at "
                "most %d)\n", text, option, why, max);
      return -1;
    }
    memcpy(items[n], start, length);
    items[n][length] = '\0';
    if (!comma) return n + 1;
    start = comma + 1;
  }
}

/* What a number option accepts: integers or finite reals in [min, max]
 * (bounds that keep the cost model finite and the planner's config valid),
 * at most max_count of them. */
typedef struct number_rule {
  const char *option;
  int integer, max_count;
  double min, max;
} number_rule;

/* strtod for plain decimal only ([-]digits[.digits][e[+-]digits], the rule
 * of htp-run's real flags): strtod alone also takes "0x10", "0x1p3", "inf"
 * and "nan". Returns 0 and *out, or -1 (not such a number, or beyond a
 * double; a value that underflows to a subnormal is taken). */
static int decimal_real(const char *text, double *out) {
  const char *p = text + (*text == '-');
  const char *digits = p;
  while (isdigit((unsigned char)*p)) p++;
  int seen = p > digits;
  if (*p == '.') {
    p++;
    while (isdigit((unsigned char)*p)) { p++; seen = 1; }
  }
  if (!seen) return -1;
  if (*p == 'e' || *p == 'E') {
    p += 1 + (p[1] == '+' || p[1] == '-');
    if (!isdigit((unsigned char)*p)) return -1;
    while (isdigit((unsigned char)*p)) p++;
  }
  if (*p) return -1;
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  /* ERANGE on underflow is fine (the value is tiny, the range check
   * decides); on overflow it is HUGE_VAL. */
  if (*end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* Parses text by the rule into out (integers are exact as doubles up to
 * 2^53). Returns the count, or -1 after naming the option and value. */
static int parse_numbers(const number_rule *rule, const char *text, double *out) {
  char items[MAX_LIST][MAX_ITEM];
  int n = split_list(rule->option, text, rule->max_count, items);
  for (int i = 0; i < n; ++i) {
    char *end;
    errno = 0;
    /* strtoll and strtod skip leading spaces and strtoull takes "-1": the
     * item must start like a number and be consumed whole. */
    double v = 0;
    int number;
    if (rule->integer) {
      v = (double)strtoll(items[i], &end, 10);
      number = (isdigit((unsigned char)items[i][0]) || strchr("+-", items[i][0])) && !*end &&
               errno != ERANGE;
    } else {
      number = decimal_real(items[i], &v) == 0;
    }
    if (!number || v < rule->min || v > rule->max) {
      if (rule->integer)
        fprintf(stderr, "htp-sim: bad value '%s' for %s: '%s' is not an integer from %lld to "
                "%lld\n", text, rule->option, items[i], (long long)rule->min, (long long)rule->max);
      else
        fprintf(stderr, "htp-sim: bad value '%s' for %s: '%s' is not a number from %g to %g\n",
                text, rule->option, items[i], rule->min, rule->max);
      return -1;
    }
    out[i] = v;
  }
  return n;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double uniform(unsigned long long *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*state >> 11) / 9007199254740992.0;
}

typedef struct row {
  double steady_ratio, run_ratio, pruned_fraction, moved_mib, plan_us_mean, plan_us_max;
  double replan_us; /* median of forced replans at the final speeds */
  int replans;
} row;

/* Orders flows by (src, dst). */
static int by_route(const void *a, const void *b) {
  const htp_flow *x = a, *y = b;
  if (x->src != y->src) return x->src < y->src ? -1 : 1;
  return (x->dst > y->dst) - (x->dst < y->dst);
}

/* Units of the (src, dst) flow among `flows` (sorted by route), 0 if none. */
static int cached_count(const htp_flow *flows, int count, int src, int dst) {
  htp_flow key = {src, dst, 0};
  const htp_flow *hit = bsearch(&key, flows, (size_t)count, sizeof *flows, by_route);
  return hit ? hit->count : 0;
}

/* One row's simulation: the planner and what it keeps across iterations. */
typedef struct sim {
  htp_planner_config config;
  htp_planner *planner;
  double *base, *speed, *seconds, *moved; /* [world] */
  /* The last plan's flows per kind, sorted by (src, dst): what helpers
   * hold. A plan has at most one flow per (src, dst) pair and fewer than
   * 2 * world flows per kind. */
  htp_flow *held_flows[HTP_PAIR_KINDS];
  int num_held[HTP_PAIR_KINDS];
} sim;

static void sim_free(sim *m) {
  htp_planner_destroy(m->planner);
  free(m->base);
  free(m->speed);
  free(m->seconds);
  free(m->moved);
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) free(m->held_flows[k]);
}

/* The planner for the options' shape, the buffers, and chi stragglers
 * placed at random (base speed 1 / slowdown). 0, or -1 (then sim_free). */
static int sim_init(sim *m, const options *o, int world, int chi, double slowdown,
                    htp_policy policy, unsigned long long *rng) {
  memset(m, 0, sizeof *m);
  htp_planner_config *c = &m->config;
  *c = (htp_planner_config)HTP_PLANNER_CONFIG_INITIALIZER;
  c->world_size = world;
  c->num_layers = o->layers;
  c->units_per_rank[HTP_PAIR_ATTENTION] = o->heads;
  c->units_per_rank[HTP_PAIR_MLP] = o->mlp_units;
  c->unit_cost[HTP_PAIR_ATTENTION] = o->head_cost;
  c->unit_cost[HTP_PAIR_MLP] = 1.0;
  c->policy = policy;
  c->resize_limit = o->resize_limit;
  if (htp_planner_create(c, &m->planner) != HTP_OK) {
    fprintf(stderr, "htp-sim: cannot create the planner for %d ranks\n", world);
    return -1;
  }
  m->base = malloc((size_t)world * sizeof(double));
  m->speed = malloc((size_t)world * sizeof(double));
  m->seconds = malloc((size_t)world * sizeof(double));
  m->moved = calloc((size_t)world, sizeof(double));
  int ok = m->base && m->speed && m->seconds && m->moved;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    ok = ok && (m->held_flows[k] = malloc((size_t)2 * world * sizeof(htp_flow)));
  if (!ok) {
    fprintf(stderr, "htp-sim: out of memory\n");
    return -1;
  }
  for (int r = 0; r < world; ++r) m->base[r] = 1.0;
  for (int placed = 0; placed < chi && placed < world;) {
    int r = (int)(uniform(rng) * world);
    if (m->base[r] == 1.0) { m->base[r] = 1.0 / slowdown; placed++; }
  }
  return 0;
}

/* Seconds of weight transfer a new plan costs: every unit that moves (all
 * layers); a rank's link carries what it sends or receives. Helpers keep
 * what they hold (libhtprt's migration cache, nested unit sets): a flow
 * only moves the units it has beyond the same (src, dst) flow of the last
 * plan. Adds the bytes to *moved_total. */
static double transfer_seconds(sim *m, const options *o, const htp_plan *plan,
                               double *moved_total) {
  const int world = m->config.world_size;
  const double bytes[HTP_PAIR_KINDS] = {o->head_bytes, o->mlp_unit_bytes};
  memset(m->moved, 0, (size_t)world * sizeof(double));
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    for (int f = 0; f < plan->num_flows[k]; ++f) {
      const htp_flow *flow = &plan->flows[k][f];
      int held = cached_count(m->held_flows[k], m->num_held[k], flow->src, flow->dst);
      double b = (flow->count > held ? flow->count - held : 0) * bytes[k] * o->layers;
      m->moved[flow->src] += b;
      m->moved[flow->dst] += b;
      *moved_total += b;
    }
    m->num_held[k] = plan->num_flows[k];
    memcpy(m->held_flows[k], plan->flows[k], (size_t)m->num_held[k] * sizeof(htp_flow));
    qsort(m->held_flows[k], (size_t)m->num_held[k], sizeof(htp_flow), by_route);
  }
  double busiest = 0;
  for (int r = 0; r < world; ++r) busiest = m->moved[r] > busiest ? m->moved[r] : busiest;
  return busiest / o->bandwidth;
}

/* The cost of one replan alone, without the machine's noise: median of 21
 * forced replans from the detector's final speeds and stragglers, in s. */
static double replan_seconds(sim *m) {
  const int world = m->config.world_size;
  double samples[21];
  memcpy(m->speed, htp_planner_speeds(m->planner), (size_t)world * sizeof(double));
  uint8_t *flags = malloc((size_t)world);
  if (!flags) {
    fprintf(stderr, "htp-sim: out of memory\n");
    return NAN;
  }
  memcpy(flags, htp_planner_plan(m->planner)->straggler, (size_t)world);
  for (int i = 0; i < 21; ++i) {
    double t0 = now_seconds();
    if (htp_planner_plan_speeds(m->planner, m->speed, flags) != HTP_OK) {
      fprintf(stderr, "htp-sim: the planner failed: %s\n", htp_planner_last_error(m->planner));
      free(flags);
      return NAN;
    }
    samples[i] = now_seconds() - t0;
  }
  free(flags);
  for (int i = 1; i < 21; ++i)
    for (int j = i; j > 0 && samples[j - 1] > samples[j]; --j) {
      double t = samples[j];
      samples[j] = samples[j - 1];
      samples[j - 1] = t;
    }
  return samples[10];
}

/* What a row adds up over its iterations. */
typedef struct sim_sums {
  double total_time, total_ideal, steady_time, steady_ideal;
  double pruned_work, all_work, moved_total, plan_sum, plan_max;
  int replans;
} sim_sums;

/* One iteration under the plan in force: every rank's noisy speed, each
 * pair's slowest rank, the transfer a replan charged; then the planner
 * fed the ranks' seconds (timed), and a new plan's transfer charged to the
 * next iteration (*transfer_due). 0, or -1 for a planner error. */
static int sim_iteration(sim *m, const options *o, int it, unsigned long long *rng,
                         double *transfer_due, sim_sums *sums) {
  const int world = m->config.world_size;
  const double cost[HTP_PAIR_KINDS] = {o->head_cost, 1.0};
  const double per_rank_work = o->heads * o->head_cost + o->mlp_units;
  const htp_plan *plan = htp_planner_plan(m->planner);
  double sum_speed = 0;
  for (int r = 0; r < world; ++r) {
    m->speed[r] = m->base[r] * (1.0 + o->noise * (2.0 * uniform(rng) - 1.0));
    sum_speed += m->speed[r];
  }
  double iteration = 0;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    double slowest = 0;
    for (int r = 0; r < world; ++r) {
      double t = htp_plan_units(plan, (htp_pair_kind)k, r) * cost[k] / m->speed[r];
      if (t > slowest) slowest = t;
      sums->pruned_work += o->layers * plan->pruned[k * world + r] * cost[k];
    }
    iteration += slowest;
  }
  sums->all_work += o->layers * per_rank_work * world;
  iteration = iteration * o->layers * o->unit_seconds + *transfer_due;
  double ideal = o->layers * per_rank_work * world / sum_speed * o->unit_seconds;
  sums->total_time += iteration;
  sums->total_ideal += ideal;
  if (it >= o->warmup) {
    sums->steady_time += iteration;
    sums->steady_ideal += ideal;
  }
  /* A plan may take all of a rank's units: its work is then 0, but a real
   * rank still takes time, and the balancer hands the planner at least
   * 1e-9 s (runtime/site_timing.c), never 0, which the planner refuses. */
  for (int r = 0; r < world; ++r) {
    const double t = htp_plan_rank_work(plan, &m->config, r) / m->speed[r] * o->unit_seconds;
    m->seconds[r] = t > 1e-9 ? t : 1e-9;
  }
  int replanned = 0;
  double t0 = now_seconds();
  if (htp_planner_observe(m->planner, m->seconds, &replanned) != HTP_OK) {
    fprintf(stderr, "htp-sim: the planner failed: %s\n", htp_planner_last_error(m->planner));
    return -1;
  }
  double spent = now_seconds() - t0;
  sums->plan_sum += spent;
  if (spent > sums->plan_max) sums->plan_max = spent;
  *transfer_due = 0;
  if (!replanned) return 0;
  sums->replans++;
  plan = htp_planner_plan(m->planner);
  char why[256];
  if (htp_plan_check(plan, why, sizeof why) != HTP_OK) {
    fprintf(stderr, "htp-sim: invalid plan: %s\n", why);
    return -1;
  }
  *transfer_due = transfer_seconds(m, o, plan, &sums->moved_total);
  return 0;
}

static int simulate(const options *o, int world, int chi, double slowdown, htp_policy policy,
                    row *out) {
  unsigned long long rng = o->seed * 0x9E3779B97F4A7C15ull + (unsigned long long)world;
  sim m;
  int failed = sim_init(&m, o, world, chi, slowdown, policy, &rng);
  sim_sums sums = {0};
  double transfer_due = 0; /* seconds of weight transfer charged to the next iteration */
  for (int it = 0; !failed && it < o->iters; ++it)
    failed = sim_iteration(&m, o, it, &rng, &transfer_due, &sums);
  if (!failed) {
    out->steady_ratio = sums.steady_time / sums.steady_ideal;
    out->run_ratio = sums.total_time / sums.total_ideal;
    out->pruned_fraction = sums.pruned_work / sums.all_work;
    out->moved_mib = sums.replans ? sums.moved_total / sums.replans / 1048576.0 : 0;
    out->plan_us_mean = sums.plan_sum / o->iters * 1e6;
    out->plan_us_max = sums.plan_max * 1e6;
    out->replans = sums.replans;
    out->replan_us = replan_seconds(&m) * 1e6;
    if (isnan(out->replan_us)) failed = -1;
  }
  sim_free(&m);
  return failed ? -1 : 0;
}

/* stdout flushed and closed: 0, or 1 after saying why (a full disk, a
 * closed stdout: the table or help would be lost without a word). error:
 * the errno of a write that already failed, or 0. */
static int finish_output(int error) {
  errno = 0;
  int failed = fflush(stdout) != 0 || ferror(stdout) || error;
  if (!error) error = errno;
  if (fclose(stdout) != 0 && !failed) {
    failed = 1;
    error = errno;
  }
  if (failed) {
    fprintf(stderr, "htp-sim: cannot write to stdout: %s\n",
            error ? strerror(error) : "write error");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  options o = {.ranks = {8, 64, 512, 4096}, .num_ranks = 4, .stragglers = {1, 2, 4},
               .num_stragglers = 3, .slowdowns = {1.5, 2, 4, 8}, .num_slowdowns = 4,
               .num_policies = NUM_POLICIES, .iters = 200, .warmup = 20, .layers = 80, .heads = 8,
               .mlp_units = 56, .noise = 0.02, .head_cost = 4.5, .unit_seconds = 4.3e-5,
               .head_bytes = 8388608, .mlp_unit_bytes = 2097152, .bandwidth = 2.5e10,
               .resize_limit = 0.25, .seed = 1};
  memcpy(o.policies, ALL_POLICIES, sizeof ALL_POLICIES); /* --policies not given: all */
  /* Where each number option goes: a list of ints or doubles with its
   * count, an int, a double, or the seed. */
  const struct {
    number_rule rule;
    int *ints, *count;
    double *reals;
  } numbers[] = {
      {{"--ranks", 1, MAX_LIST, 2, 1 << 20}, o.ranks, &o.num_ranks, NULL},
      {{"--stragglers", 1, MAX_LIST, 1, (1 << 20) - 1}, o.stragglers, &o.num_stragglers, NULL},
      {{"--slowdowns", 0, MAX_LIST, 1, 1000}, NULL, &o.num_slowdowns, o.slowdowns},
      {{"--iters", 1, 1, 1, 1e7}, &o.iters, NULL, NULL},
      {{"--warmup", 1, 1, 0, 1e7}, &o.warmup, NULL, NULL},
      {{"--layers", 1, 1, 1, 1 << 16}, &o.layers, NULL, NULL},
      {{"--heads-per-rank", 1, 1, 1, 1 << 20}, &o.heads, NULL, NULL},
      {{"--mlp-units-per-rank", 1, 1, 1, 1 << 20}, &o.mlp_units, NULL, NULL},
      {{"--noise", 0, 1, 0, 0.99}, NULL, NULL, &o.noise},
      {{"--head-cost", 0, 1, 1e-3, 1e3}, NULL, NULL, &o.head_cost},
      {{"--unit-seconds", 0, 1, 1e-9, 1e3}, NULL, NULL, &o.unit_seconds},
      {{"--head-bytes", 0, 1, 0, 1e12}, NULL, NULL, &o.head_bytes},
      {{"--mlp-unit-bytes", 0, 1, 0, 1e12}, NULL, NULL, &o.mlp_unit_bytes},
      {{"--bandwidth", 0, 1, 1, 1e15}, NULL, NULL, &o.bandwidth},
      {{"--resize-limit", 0, 1, 0, 1}, NULL, NULL, &o.resize_limit},
      {{"--seed", 1, 1, 0, 9007199254740991.0}, NULL, NULL, NULL},
  };
  int given[sizeof numbers / sizeof numbers[0]] = {0}, policies_given = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    /* --opt=value, as htp-run takes it: the value is the rest of the word
     * (never the next argument). */
    char name[64];
    const char *v = NULL;
    const char *equals = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
    if (equals) {
      if ((size_t)(equals - a) >= sizeof name) {
        fprintf(stderr, "htp-sim: unknown option %.*s (see --help)\n", (int)(equals - a), a);
        return 2;
      }
      memcpy(name, a, (size_t)(equals - a));
      name[equals - a] = '\0';
      a = name;
      v = equals + 1;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      if (v) { fprintf(stderr, "htp-sim: %s takes no value\n", a); return 2; }
      fputs(usage, stdout);
      fputs(usage_options, stdout);
      for (int p = 0; p < NUM_POLICIES; ++p) printf(" %s", htp_policy_name(ALL_POLICIES[p]));
      putchar('\n');
      return finish_output(0);
    }
    if (!v) {
      if (i + 1 >= argc) { fprintf(stderr, "htp-sim: %s needs a value or is unknown (see --help)\n", a); return 2; }
      v = argv[++i];
    }
    if (!strcmp(a, "--policies")) {
      if (policies_given++) {
        fprintf(stderr, "htp-sim: %s given twice (give it once, with a list)\n", a);
        return 2;
      }
      char items[NUM_POLICIES][MAX_ITEM];
      int n = split_list(a, v, NUM_POLICIES, items);
      if (n < 0) return 2;
      for (int p = 0; p < n; ++p) {
        if (htp_policy_parse(items[p], &o.policies[p]) != HTP_OK) {
          fprintf(stderr, "htp-sim: bad value '%s' for %s: '%s' is not a policy (see --help)\n",
                  v, a, items[p]);
          return 2;
        }
        for (int q = 0; q < p; ++q)
          if (o.policies[q] == o.policies[p]) {
            fprintf(stderr, "htp-sim: bad value '%s' for %s: '%s' given twice\n", v, a,
                    items[p]);
            return 2;
          }
      }
      o.num_policies = n;
      continue;
    }
    int known = 0;
    for (size_t k = 0; k < sizeof numbers / sizeof numbers[0] && !known; ++k) {
      if (strcmp(a, numbers[k].rule.option)) continue;
      if (given[k]++) {
        fprintf(stderr, "htp-sim: %s given twice (give it once%s)\n", a,
                numbers[k].rule.max_count > 1 ? ", with a list" : "");
        return 2;
      }
      double values[MAX_LIST];
      int n = parse_numbers(&numbers[k].rule, v, values);
      if (n < 0) return 2;
      for (int j = 0; j < n; ++j) {
        if (numbers[k].ints) numbers[k].ints[j] = (int)values[j];
        else if (numbers[k].reals) numbers[k].reals[j] = values[j];
        else o.seed = (unsigned long long)values[j];
      }
      if (numbers[k].count) *numbers[k].count = n;
      known = 1;
    }
    if (!known) { fprintf(stderr, "htp-sim: unknown option %s (see --help)\n", a); return 2; }
  }
  if (o.warmup >= o.iters) {
    fprintf(stderr, "htp-sim: --warmup %d must be below --iters %d\n", o.warmup, o.iters);
    return 2;
  }
  /* A sweep may cross sizes with counts that fit only some of them: skip
   * the rest, saying so, but refuse a command line that leaves no row. */
  int runnable = 0;
  for (int a = 0; a < o.num_ranks; ++a)
    for (int b = 0; b < o.num_stragglers; ++b)
      if (o.stragglers[b] < o.ranks[a]) runnable++;
      else
        fprintf(stderr, "htp-sim: note: skipping %d ranks with %d stragglers (needs fewer "
                "stragglers than ranks)\n", o.ranks[a], o.stragglers[b]);
  if (!runnable) {
    fprintf(stderr, "htp-sim: no (ranks, stragglers) pair to run: no count of --stragglers is "
            "below a world size of --ranks\n");
    return 2;
  }
  printf("%6s %4s %8s %8s %12s %10s %8s %10s %7s %10s %11s %10s\n", "ranks", "chi",
         "slowdown", "policy", "steady/ideal", "run/ideal", "pruned%", "moved_MiB", "replans",
         "plan_us", "plan_us_max", "replan_us");
  for (int a = 0; a < o.num_ranks; ++a)
    for (int b = 0; b < o.num_stragglers; ++b)
      for (int s = 0; s < o.num_slowdowns; ++s)
        for (int p = 0; p < o.num_policies; ++p) {
          row r;
          if (o.stragglers[b] >= o.ranks[a]) continue;
          if (simulate(&o, o.ranks[a], o.stragglers[b], o.slowdowns[s], o.policies[p], &r) != 0) {
            fprintf(stderr, "htp-sim: simulation failed (ranks %d, stragglers %d, slowdown %g, "
                    "policy %s)\n", o.ranks[a], o.stragglers[b], o.slowdowns[s],
                    htp_policy_name(o.policies[p]));
            return 1;
          }
          printf("%6d %4d %8.2f %8s %12.4f %10.4f %8.2f %10.1f %7d %10.1f %11.1f %10.1f\n",
                 o.ranks[a], o.stragglers[b], o.slowdowns[s], htp_policy_name(o.policies[p]),
                 r.steady_ratio, r.run_ratio, 100 * r.pruned_fraction, r.moved_mib, r.replans,
                 r.plan_us_mean, r.plan_us_max, r.replan_us);
          if (fflush(stdout) != 0) return finish_output(errno);
        }
  return finish_output(0);
}
