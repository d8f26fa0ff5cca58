/*===- runtime/balance_internal.h - the balancer's private state ----------===*
 *
 * Private to libhtprt and its tests. The balancer (balance.c) owns the
 * rank's planner and, unless it is hookless, the unit table, imputer and
 * migration cache its hooks follow; plan_step.c runs its per-iteration
 * step (gather, detect, plan) and trace.c writes its trace line.
 * htp_balancer_end_iteration is "step, then apply"; tests force a plan with
 * htp_planner_plan_speeds on htp_balancer_planner() and then apply it here,
 * bypassing detection.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_BALANCE_INTERNAL_H
#define HTP_BALANCE_INTERNAL_H

#include "runtime/htp.h"
#include "runtime/units_internal.h"

#include <stdint.h>
#include <stdio.h>

/* Where a pair's weights live (registered by its hook on every call). */
typedef struct htp__registered_pair {
  const float *first;  /* wqkv or w1 */
  const float *bias;   /* bqkv or b1 (may be NULL) */
  const float *second; /* wproj or w2 */
  int seen;
  const float *normed; /* importance: `second` when norm[] was computed */
  int scored;          /* importance: some unit has a score */
} htp__registered_pair;

/* A helper's migrated-in units of one pair, packed at each plan change
 * (balance.c, pack_in_units) so the hook runs them as few, large calls:
 * the pair's in-units in unit-table order, cut into blocks of at most
 * units_per_rank units (so a block's activations fit the hook's own
 * activation scratch), each block a small shard of n units in the layouts
 * the unit kernels take, back to back in data:
 *   first  [parts * n * width, d]  (q of the n units | k | v; or fc1 rows),
 *   bias   [parts * n * width]     (zeros where the owner has no bias),
 *   second [d, n * width]          (proj or fc2 columns). */
typedef struct htp__packed_pair {
  int count;       /* migrated-in units packed (the unit table's num_in) */
  float *data;     /* the blocks */
  size_t capacity; /* floats allocated in data */
  /* On a device (the context's table is not the CPU's): the blocks
   * uploaded, what the hooks compute from; NULL on the CPU. */
  float *device;
  size_t device_capacity; /* floats allocated in device */
} htp__packed_pair;

struct htp_balancer {
  htp_ctx *ctx;
  htp_balancer_config config;
  int hookless;           /* no hook state: step and trace only */
  int num_pairs;
  htp_planner *planner;
  htp_unit_table *table;  /* NULL when hookless */
  htp_imputer *imputer;   /* NULL for HTP_IMPUTE_ZERO or hookless */
  htp_migration *migration; /* NULL when hookless */
  htp__registered_pair *pairs; /* [num_pairs] */
  int32_t *listed;        /* [max units]: kept plus imputed units, ascending */
  int32_t *iota;          /* [max units]: 0, 1, 2, ... (a packed block's unit list) */
  htp__packed_pair *packed; /* [num_pairs]: migrated-in units, packed */
  int one_by_one;         /* tests: run migrated-in units one at a time, from the cache */
  /* Importance (HTP_SELECT_IMPORTANCE only, else NULL), [num_pairs * max
   * units], pair p's unit i at p * max_units + i: */
  int max_units;
  double *norm;           /* ||output weights of the unit||_F */
  double *score;          /* EWMA of mean |activation| x norm */
  uint8_t *observed;      /* the unit has had a sample */
  float *pushed;          /* [max units]: scores handed to the unit table */
  double site_seconds[HTP_PAIR_KINDS]; /* hooks' seconds since the last step */
  double slowdown;        /* >= 1: the hooks stretch their time by this */
  int64_t applied_version;
  /* The step and the trace: */
  double *gather;         /* [world * (1 + kinds)] the step's all-gather */
  double *normalized;     /* [world] seconds fed to the detector */
  FILE *trace;
  double comm_at_last_line; /* htp_ctx_comm_seconds at the previous trace line */
};

/* Makes plan the one the hooks follow: the unit table and the migration
 * transfers for it (collective over the plan's flows, as
 * htp_migration_apply). A version already applied costs nothing; a
 * hookless balancer applies nothing. */
htp_result htp__balancer_apply(htp_balancer *balancer, const htp_plan *plan);
/* The balancer's unit table and migration cache (NULL when hookless). */
htp_unit_table *htp__balancer_table(htp_balancer *balancer);
htp_migration *htp__balancer_migration(htp_balancer *balancer);
/* Tests: nonzero makes the hooks compute migrated-in units one at a time
 * from their cached one-unit shards (the path before packing) instead of
 * from the packed blocks; the two agree to fp32 round-off. */
void htp__balancer_set_one_by_one(htp_balancer *balancer, int one_by_one);
/* Migrated-in units of pair packed for the hooks (-1: bad arguments). */
int htp__balancer_packed_units(const htp_balancer *balancer, int pair);
/* Books seconds of hook work on a pair kind, as a hook does (tests). */
void htp__balancer_add_site_seconds(htp_balancer *balancer, htp_pair_kind kind, double seconds);

/* trace.c: the line for this iteration, after the step fed the planner;
 * replanned says whether this step changed the plan, sites is NULL when
 * the sites were not measured. */
void htp__trace_write(htp_balancer *balancer, double seconds, const double *sites,
                      int replanned);

#endif /* HTP_BALANCE_INTERNAL_H */
