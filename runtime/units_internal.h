/*===- runtime/units_internal.h - unit tables, imputation, migration ------===*
 *
 * Private to libhtprt and its tests: the per-rank machinery the balancer
 * (balancer.c) owns to carry out a plan. The unit table says WHICH units a
 * rank keeps, prunes, hands off and takes in (unit_table.c); the imputer fills
 * pruned units' activations (unit_table.c); the migration moves and caches
 * handed-off units' weights (migrate.c). Embedders never touch these: they
 * create an htp_balancer (runtime/htp.h), which drives all three.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_UNITS_INTERNAL_H
#define HTP_UNITS_INTERNAL_H

#include "runtime/htp.h"

#include <stddef.h>
#include <stdint.h>

/* ----- Unit tables -------------------------------------------------------
 * For one rank, per pair <layer, kind>: which local units it keeps, prunes
 * and hands off (and to whom), and which units of other ranks it computes.
 * The COUNTS come from the plan (same on every rank); WHICH units is the
 * owner's choice:
 *   - HTP_SELECT_RANDOM: a fixed seeded permutation per (seed, rank, pair);
 *     the first gamma u units of it are shed. Every rank can compute any
 *     owner's choice, so migrated-in unit ids are known locally.
 *   - HTP_SELECT_IMPORTANCE: the caller feeds a score per local unit
 *     (htp_unit_table_set_scores); least important shed first (ties: lower
 *     index). Other ranks cannot know the choice: in_unit is -1 until the
 *     migration transfer (htp_migration_apply) delivers the ids.
 * Shed sets are nested as gamma grows (prefix of one order), so a plan
 * change moves as few units as it can. */

typedef struct htp_unit_table htp_unit_table;

/* The sets of one pair on one rank; arrays owned by the table, valid until
 * its next update or destroy. Local unit indices are in [0, units). */
typedef struct htp_unit_sets {
  int units;                /* slots this rank has in the pair (units_per_rank) */
  int owned;                /* units it owns, the first `owned` slots (uneven shares:
                             * fewer; the rest are empty, in no set below) */
  int num_kept;
  const int32_t *kept;      /* ascending */
  int num_pruned;
  const int32_t *pruned;    /* ascending */
  int num_out;
  const int32_t *out_unit;  /* handed off: local unit ... */
  const int32_t *out_dst;   /* ... and its helper; grouped by flow order */
  int num_in;
  const int32_t *in_src;    /* migrated in: owner rank ... */
  const int32_t *in_unit;   /* ... and owner's local unit (-1: not known yet) */
} htp_unit_sets;

htp_result htp_unit_table_create(const htp_planner_config *config, int rank,
                                 htp_select selection, uint64_t seed,
                                 htp_unit_table **table);
void htp_unit_table_destroy(htp_unit_table *table);
/* scores[units_per_rank of the pair's kind]: importance of each local unit
 * (copied). Takes effect at the next update. HTP_ERR_INVALID for a table
 * built with HTP_SELECT_RANDOM or a bad pair. */
htp_result htp_unit_table_set_scores(htp_unit_table *table, int pair, const float *scores);
/* Recomputes every pair's sets for the plan (a plan from a planner with the
 * same config). Allocates nothing. */
htp_result htp_unit_table_update(htp_unit_table *table, const htp_plan *plan);
htp_result htp_unit_table_get(const htp_unit_table *table, int pair, htp_unit_sets *sets);
/* A re-partition changed which slots each rank owns: owned[kind] ([world]
 * each, kept by the caller for the table's life) replace the config's,
 * the shed orders start over (random: the permutation for the new count;
 * scores: all 0, index order) and every owned unit is kept until the next
 * update. */
htp_result htp_unit_table_set_owned(htp_unit_table *table, const int32_t *const *owned);
/* Sets the owner's local unit of migrated-in entry i of pair (used by the
 * migration transfer for HTP_SELECT_IMPORTANCE). */
htp_result htp_unit_table_set_in_unit(htp_unit_table *table, int pair, int index, int unit);

/* ----- Imputation ----------------------------------------------------------
 * A pair's unit activations: `rows` rows (tokens), row r starting at
 * act + r * row_stride floats; unit i occupies floats
 * [i * unit_width, (i + 1) * unit_width) of each row (heads' outputs side by
 * side, or MLP hidden neurons with unit_width = group size). */

/* State for HTP_IMPUTE_SAME: the last kept value of every unit of every pair,
 * with the step (the caller's count) it was stored at. Buffers are allocated
 * on the first store of a pair (rows * units * unit_width floats); a later
 * call with another shape re-allocates. */
typedef struct htp_imputer htp_imputer;
htp_result htp_imputer_create(int num_pairs, htp_imputer **imputer);
void htp_imputer_destroy(htp_imputer *imputer);
/* Remembers the kept units' values of pair (after computing them). */
htp_result htp_imputer_store(htp_imputer *imputer, int pair, const float *act, size_t rows,
                             size_t row_stride, int units, size_t unit_width,
                             const htp_unit_sets *sets, int64_t step);
/* The same for a compact act: unit list[i]'s values are act's columns
 * [i * unit_width, (i + 1) * unit_width) of each row. */
htp_result htp_imputer_store_listed(htp_imputer *imputer, int pair, const float *act,
                                    size_t rows, size_t row_stride, int units,
                                    size_t unit_width, const int32_t *list, int count,
                                    int64_t step);
/* The step pair's unit was last stored at, -1 if never (or no such unit). */
int64_t htp_imputer_stored_at(const htp_imputer *imputer, int pair, int unit);
/* Fills the pruned units of act in place. imputer may be NULL for ZERO and
 * AVERAGE; SAME writes zeros for a unit with no stored value for the shape
 * or one older than max_age steps (htp_same_usable). AVERAGE with no kept
 * unit writes zeros. */
htp_result htp_impute_fill(const htp_imputer *imputer, int pair, htp_impute impute, float *act,
                           size_t rows, size_t row_stride, int units, size_t unit_width,
                           const htp_unit_sets *sets, int64_t step, int64_t max_age);
/* How many entries of an ascending unit list, from index `from`, are
 * consecutive units (list[from], list[from] + 1, ...): >= 1. */
static inline int htp_unit_run(const int32_t *list, int from, int count) {
  int n = 1;
  while (from + n < count && list[from + n] == list[from] + n) ++n;
  return n;
}
/* Whether a value stored at step stored_at (-1: never) may stand in for a
 * pruned unit at step `step`: stored, and at most max_age steps old (0: any
 * age). The forward imputer and the backward hooks' store share it. */
static inline int htp_same_usable(int64_t stored_at, int64_t step, int64_t max_age) {
  return stored_at >= 0 && (max_age == 0 || step - stored_at <= max_age);
}

/* ----- Migration transfers -------------------------------------------------
 * A migrated unit's weights go to its helper once per plan change and stay
 * cached on the helper while the plan keeps the unit there; units the new
 * plan no longer gives a helper are dropped from its cache. Transfers use
 * htp_send/htp_recv in one global order (kind, flow, layer), so they cannot
 * deadlock: every rank calls htp_migration_apply after every replan (or every
 * iteration: an unchanged plan version costs nothing). */
typedef struct htp_migration htp_migration;
/* Writes the weights of this rank's local unit `unit` of pair into dst
 * (bytes_per_unit[kind] bytes). Returns 0 on success; else an htp_result
 * whose message the packer left on the context, or -1 (the migration then
 * says only that packing failed). */
typedef int (*htp_unit_pack_fn)(void *user, int pair, int unit, void *dst);

/* bytes_per_unit[kind] > 0: size of one unit's weights (e.g. attention head:
 * 4 * head_dim * d floats plus biases, MLP unit: 2 * width * d floats plus
 * bias). */
htp_result htp_migration_create(const htp_planner_config *config, int rank,
                                const size_t bytes_per_unit[HTP_PAIR_KINDS],
                                htp_migration **migration);
void htp_migration_destroy(htp_migration *migration);
/* Collective over the ranks in the plan's flows: sends the weights of units
 * this rank hands off that its helper does not hold yet (pack), receives
 * those it helps with, drops what the plan no longer needs, and fills the
 * table's in_unit ids. No-op when plan->version was already applied. */
htp_result htp_migration_apply(htp_migration *migration, htp_ctx *ctx, const htp_plan *plan,
                               htp_unit_table *table, htp_unit_pack_fn pack, void *user);
/* Forgets which helper holds which unit and the version applied, so the
 * next htp_migration_apply (collective as ever) sends every handed-off
 * unit's weights again and the helpers overwrite their copies: training,
 * where the owner's optimizer changes the weights every step. */
void htp_migration_invalidate(htp_migration *migration);
/* Cached weights of owner src's local unit of pair, or NULL. Valid until
 * the next apply or destroy. */
const void *htp_migration_weights(const htp_migration *migration, int pair, int src, int unit);
/* Bytes received / sent by this rank at the last apply and in total. */
uint64_t htp_migration_last_bytes_received(const htp_migration *migration);
uint64_t htp_migration_last_bytes_sent(const htp_migration *migration);
uint64_t htp_migration_total_bytes(const htp_migration *migration);
/* Number of units currently cached on this rank (all pairs). */
int htp_migration_cached_units(const htp_migration *migration);

#endif /* HTP_UNITS_INTERNAL_H */
