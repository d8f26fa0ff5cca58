/*===- runtime/planner_internal.h - the planner's private state -----------===*
 *
 * Private to libhtprt and its tests. The planner (plan.c) is two parts:
 *   - the detector (detect.c): EWMA speeds and hysteresis, the only state
 *     that carries from one iteration to the next;
 *   - the planning step (htp__plan_compute): a pure function of (config,
 *     relative speeds, straggler flags, the hooks' fixed costs, per-kind
 *     speeds where measured) that writes
 *     a plan into caller-owned storage, using caller-owned scratch. No I/O,
 *     no trace, no collective, no allocation: two calls with the same
 *     inputs give the same plan bit for bit, whatever the scratch held
 *     before.
 * Gathering timings over the world and the trace are the balancer's
 * (balancer_step.c, trace.c).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_PLANNER_INTERNAL_H
#define HTP_PLANNER_INTERNAL_H

#include "runtime/htp.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define HTP__PLANNER_MESSAGE_SIZE 256

/* Bounds of a detector sample (work / seconds). Their ratio, 1e300, is
 * below DBL_MAX, so an EWMA of clamped samples over the fastest one is a
 * finite relative speed >= 1e-300, never 0 or NaN. Real samples (work of
 * at most ~1e26 cost units in 1e-9 to 1e6 s) are far inside. */
#define HTP__SAMPLE_MIN 1e-150
#define HTP__SAMPLE_MAX 1e150

/* The slowest relative speed the planning step plans with: a slower rank
 * (or per-kind speed) is planned as if at this one. It sheds what its cap
 * lets it either way, and every time in the plan ((units + phi) / speed,
 * at most ~2^21 / 1e-9 with the config's cost bounds) stays finite. */
#define HTP__PLAN_MIN_SPEED 1e-9

/* Detector state: identical on every rank that saw the same samples. */
typedef struct htp__detector {
  double *ewma;          /* [world] smoothed absolute speed (work / s) */
  double *relative;      /* [world] ewma / max ewma */
  uint8_t *straggler;    /* [world] current classification */
  int32_t *streak;       /* [world] consecutive iterations past the switch threshold */
  int64_t samples;       /* iterations observed */
} htp__detector;

/* A rank and its sort key (deficit or remainder), largest key first. */
typedef struct htp__rank_key {
  double key;
  int32_t rank;
} htp__rank_key;

/* What a plan view points into. */
typedef struct htp__plan_storage {
  double *speed, *gamma;         /* [world] */
  /* The config's owned units ([kinds * world], units_per_rank where it has
   * none) and each rank's share of a full rank's work ([world]: its owned
   * units' cost over units_per_rank's; 1 when even). */
  int32_t *owned;
  double *share;
  uint8_t *straggler, *action;   /* [world] */
  int32_t *pruned, *sent, *received, *absorb; /* [kinds * world] */
  htp_flow *flows[HTP_PAIR_KINDS];            /* [world] each: flows <= world */
} htp__plan_storage;

/* Working memory of one planning pass ([world] each); its contents never
 * influence the result. */
typedef struct htp__plan_scratch {
  int32_t *order;        /* stragglers: migrators then resizers, by deficit */
  int32_t *helpers;      /* healthy ranks in rank order */
  htp__rank_key *keys;   /* stragglers by deficit, then helpers by remainder */
  int32_t *need;         /* units a migrator hands off (one kind) */
  double *kind_speed;    /* one kind's speeds per unit: measured, else the rank's */
  double *rank_speed;    /* the same per whole rank (kind_speed / share) */
  double *speed;         /* the given speeds, floored at HTP__PLAN_MIN_SPEED */
  double *sums;          /* target_time's running sums [world + 1] */
} htp__plan_scratch;

/* Allocates storage and scratch for world ranks, and points *plan at the
 * storage with the initial plan (version 0: nobody balances, every speed
 * 1). Returns 0, or -1 when out of memory (then free what was allocated
 * with htp__plan_memory_free). */
int htp__plan_memory_init(const htp_planner_config *config, htp__plan_storage *storage,
                          htp__plan_scratch *scratch, htp_plan *plan);
void htp__plan_memory_free(htp__plan_storage *storage, htp__plan_scratch *scratch);

/* The planning step: the plan for relative speeds ([world] in (0, 1]),
 * straggler flags ([world]) and the hooks' fixed cost per call in units
 * ([kinds], >= 0: a rank with L > 0 units of kind k takes (L + fixed[k]) /
 * speed; it moves whole units between migrators and helpers; resizers'
 * pruning stays proportional to gamma) under config, written into *plan's
 * storage (plan must come from htp__plan_memory_init for this config).
 * kind_speeds ([kinds * world], kind-major; NULL: none) are each rank's
 * speed per kind of unit, relative to the kind's fastest rank, 0 where not
 * measured: a device may be slowed unevenly (a GPU rank on a third of the
 * SMs ran its MLP units 2.8x and its heads 2.0x slower), and each kind's
 * units are placed at that kind's speeds; detection, the target time and
 * gamma keep the rank's one speed. Every field of *plan but version is set;
 * the caller numbers versions. Speeds below HTP__PLAN_MIN_SPEED are
 * planned (and recorded in the plan) as that speed. */
void htp__plan_compute(const htp_planner_config *config, const double *speeds,
                       const uint8_t *stragglers, const double *fixed,
                       const double *kind_speeds, htp__plan_scratch *scratch,
                       htp__plan_storage *storage, htp_plan *plan);

/* A drifting straggler replans only when the new plan's predicted makespan
 * (htp__plan_makespan at the new speeds) beats the current plan's by more
 * than this fraction: near a rounding boundary of the unit counts, speed
 * noise alone would otherwise flip the plan (and move weights) back and
 * forth for a gain below what the noise itself costs. */
#define HTP__REPLAN_MIN_GAIN 0.03

/* A straggler's plan is judged again (against HTP__REPLAN_MIN_GAIN) when a
 * kind's fitted fixed cost moved more than this fraction of (1 + the cost
 * the plan was made with), in units: the fit settles over a few steps and
 * each step's nudge must not replan. */
#define HTP__REFIT_CHANGE 0.1

/* Predicted time of one iteration under the plan at the given relative
 * speeds ([world] in (0, 1]), fixed costs and per-kind speeds (as for
 * htp__plan_compute; kind_speeds may be NULL): per pair kind the slowest
 * rank's (units + fixed) / speed, 0 for a rank without units (every pair
 * ends in an all-reduce), times unit_cost, summed over kinds and layers. */
double htp__plan_makespan(const htp_plan *plan, const htp_planner_config *config,
                          const double *speeds, const double *fixed, const double *kind_speeds);

struct htp_planner {
  htp_planner_config config;
  htp__detector detector;
  htp__plan_storage storage;
  htp__plan_scratch scratch;
  htp_plan plan;
  /* The plan a drifting straggler would get, made beside the current one
   * and swapped in only when it gains enough (HTP__REPLAN_MIN_GAIN). */
  htp__plan_storage candidate_storage;
  htp__plan_scratch candidate_scratch;
  htp_plan candidate;
  double *work;          /* [world] work per rank under the current plan */
  /* The hooks' fixed cost per call, in units (0 until the balancer's site
   * model fits it; htp__planner_observe_sites takes it with each sample). */
  double fixed[HTP_PAIR_KINDS];
  double plan_fixed[HTP_PAIR_KINDS]; /* the fixed costs the plan was judged at */
  /* [kinds * world] speed per kind (0: not measured; the site model's,
   * htp__planner_observe_sites takes them with each sample), and those the
   * plan was judged at. */
  double *kind_speed, *plan_kind_speed;
  int64_t iteration;
  int pending; /* the straggler set changed while the plan was not yet settled */
  char message[HTP__PLANNER_MESSAGE_SIZE];
};

/* htp_planner_observe with the hooks' fitted fixed cost per call
 * ([kinds], in units) and the ranks' speeds per kind ([kinds * world],
 * kind-major, 0: not measured; NULL: none), which the plans count from then
 * on (htp_balancer_step's: the site model's). settled 0: the current plan
 * is not replaced this step (htp__site_model_settled): not on drifting
 * speeds or fits, and a straggler entering or leaving waits for the first
 * settled step. */
htp_result htp__planner_observe_sites(htp_planner *planner, const double *seconds,
                                      const double *fixed, const double *kind_speeds,
                                      int settled, int *replanned);

/* A change of ownership (a re-partition, repartition.c): owned
 * ([kinds * world], each in [1, units_per_rank]) becomes the planner's,
 * each rank's share follows, the detector starts over (speeds and
 * streaks: the old samples counted other work), and the plan becomes a new
 * version that balances nothing. The config's owned then point into the
 * planner's storage (also where they were NULL). HTP_ERR_INVALID for a
 * count out of range. */
htp_result htp__planner_set_owned(htp_planner *planner, const int32_t *owned);

/* detect.c */
int htp__detector_init(htp__detector *detector, int world_size);
void htp__detector_free(htp__detector *detector);
/* Feeds one sample per rank (work done / seconds) and updates the
 * classification with hysteresis. Returns 1 if the straggler set changed. */
int htp__detector_update(htp__detector *detector, const htp_planner_config *config,
                         const double *work, const double *seconds);

/* site_speed.c: the detector's seconds from every rank's balance-hook
 * seconds, with each kind's fixed cost (in units) fitted across plan
 * changes. A step's gathered record per rank: compute seconds, then the
 * hooks' seconds per kind (< 0: not measured), then the rank's balancer
 * config fingerprint (every rank must plan from the same config). */
#define HTP__STEP_RECORD_DOUBLES (2 + HTP_PAIR_KINDS)
#define HTP__STEP_RECORD_FINGERPRINT (1 + HTP_PAIR_KINDS)
typedef struct htp__site_model {
  int window;            /* steps a plan's means need before they count */
  double alpha;          /* the detector's EWMA weight */
  int64_t version;       /* plan the current means are for (-1: none yet) */
  double *now, *before;  /* [kinds * world] mean site seconds: this plan, the last (< 0: none) */
  int32_t steps;         /* steps measured under this plan */
  int32_t *units, *units_before; /* [kinds * world] units computed: this plan, the last */
  double num[HTP_PAIR_KINDS], den[HTP_PAIR_KINDS]; /* least-squares sums of the fit */
  double fixed[HTP_PAIR_KINDS]; /* fitted fixed cost, in units (0 until fitted) */
  int committed;         /* this plan's change is in num / den */
  /* [kinds * world] each rank's speed per kind: the kind's fastest rank's
   * time per unit over its own (fixed cost counted), an EWMA over steps
   * past a plan change's first ones; 0 until the rank computed a unit of
   * the kind. */
  double *kind_speed;
} htp__site_model;
/* 0, or -1 when out of memory (free with htp__site_model_free anyway). */
int htp__site_model_init(htp__site_model *model, const htp_planner_config *config);
void htp__site_model_free(htp__site_model *model);
/* Feeds one step's gathered records ([world * HTP__STEP_RECORD_DOUBLES],
 * measured under plan) and writes the seconds to feed the detector into
 * out ([world]): per kind, time per unit with the fixed cost counted, over
 * the fastest rank's, averaged over the rank's work (a rank with no unit:
 * its total seconds, which the detector does not sample). Returns 1, or 0
 * (out untouched; feed the totals) when a rank did not measure its
 * sites. */
int htp__site_model_seconds(htp__site_model *model, const htp_plan *plan,
                            const htp_planner_config *config, const double *records,
                            double *out);
/* Whether the current plan has been measured long enough for the fit to
 * see its change (its means past the first steps, MIN_STEPS of them; the
 * first plan, which balances nothing, always is, so a straggler is met as
 * soon as it is detected): until then a plan is not replaced, since speeds taken
 * before the fixed cost was fitted read a rank that shed units as slower
 * per unit, and replanning on them sheds more (an H200 rank on 8 SMs
 * handed its last bf16 units away within 20 steps, a plan every 2-4). */
int htp__site_model_settled(const htp__site_model *model);

/* plan.c */
htp_result htp__planner_error(htp_planner *planner, htp_result code, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* unit_table.c: shared by migrate.c */
uint64_t htp__splitmix64(uint64_t *state);

#endif /* HTP_PLANNER_INTERNAL_H */
