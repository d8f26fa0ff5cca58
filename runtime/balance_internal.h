/*===- runtime/balance_internal.h - the balancer's private state ----------===*
 *
 * Private to libhtprt and its tests. The balancer (balancer.c) owns the
 * rank's planner and, unless it is hookless, the unit table, imputer and
 * migration cache its hooks (balance_hooks.c) follow; balancer_step.c runs
 * its per-iteration step (gather, detect, plan) and trace.c writes its
 * trace line. htp_balancer_end_iteration (site_timing.c) is "step, then
 * apply" (unit_weights.c); tests force a plan with htp_planner_plan_speeds
 * on htp_balancer_planner() and then apply it here, bypassing detection.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_BALANCE_INTERNAL_H
#define HTP_BALANCE_INTERNAL_H

#include "kernels/htp_kernel_table.h"
#include "kernels/htp_scratch.h"
#include "runtime/htp.h"
#include "runtime/planner_internal.h"
#include "runtime/units_internal.h"

#include <stdint.h>
#include <stdio.h>

/* Where a pair's weights live (registered by its hook on every call). */
typedef struct htp__registered_pair {
  const void *first;  /* wqkv or w1, of the block's dtype (element_bytes) */
  const void *bias;   /* bqkv or b1 (may be NULL) */
  const void *second; /* wproj or w2 */
  int seen;
  const float *normed; /* importance: `second` when norm[] was computed */
  int scored;          /* importance: some unit has a score */
} htp__registered_pair;

/* A helper's migrated-in units of one pair, packed at each plan change
 * (unit_weights.c, pack_in_units) so the hook runs them as few, large calls:
 * the pair's in-units in unit-table order, cut into blocks of at most
 * units_per_rank units (so a block's activations fit the hook's own
 * activation scratch), each block a small shard of n units in the layouts
 * the unit kernels take, back to back in data:
 *   first  [parts * n * width, d]  (q of the n units | k | v; or fc1 rows),
 *   bias   [parts * n * width]     (zeros where the owner has no bias),
 *   second [d, n * width]          (proj or fc2 columns). */
typedef struct htp__packed_pair {
  int count;       /* migrated-in units packed (the unit table's num_in) */
  unsigned char *data; /* the blocks, elements of the block's dtype */
  size_t capacity;     /* bytes allocated in data */
  /* On a device (the context's table is not the CPU's): the blocks
   * uploaded, what the hooks compute from; NULL on the CPU. */
  float *device;
  size_t device_capacity; /* floats' room allocated in device (htp__balancer_reserve) */
} htp__packed_pair;

/* A buffer that moves with a pair weight's units (htp_balancer_add_state). */
typedef struct htp__unit_state {
  const void *weight;
  float *state;
} htp__unit_state;

/* One move of a re-partition: `count` units of a kind from src's slots
 * [from, from + count) to dst's [to, to + count). */
typedef struct htp__unit_move {
  int32_t src, dst, count, from, to;
} htp__unit_move;

/* States a weight may carry along (AdamW has two moments). */
#define HTP__PARTITION_MAX_STATES 4

/* Run-time ownership (repartition.c; repartition_ratio in htp.h). */
typedef struct htp__partition {
  int32_t *slot_unit[HTP_PAIR_KINDS]; /* [world * units_per_rank[k]]: global unit, -1 empty */
  htp__unit_state *states;
  int num_states, states_capacity;
  uint8_t *migrators;   /* [world] the ranks whose migration `held` counts */
  int64_t held;         /* steps the same ranks have migrated (0: no migration) */
  double step_bytes;    /* bytes this step's plan moves a step */
  double spent_bytes;   /* their sum over the held steps */
  double once_bytes;    /* what a re-partition would move now */
  int pending;          /* the step chose to re-partition; end_iteration carries it out */
  int64_t count;        /* re-partitions carried out */
  int reported;         /* the trace has described the last one */
  double last_bytes;    /* what this rank sent and received in the last one */
  double last_seconds;  /* how long it took here (moves and the new ownership) */
  int32_t *owned;       /* [kinds * world] scratch: owned counts after the moves */
  htp__unit_move *moves; /* [kinds * world] scratch: a kind's moves (one per flow at most) */
  float *staging;       /* one move's units (weights, then states) */
  size_t staging_capacity; /* floats */
  float *mirror;        /* on a device: a pair's shards in host memory (weights, then states) */
  size_t mirror_capacity; /* floats */
} htp__partition;

struct htp_balancer {
  htp_ctx *ctx;
  htp_balancer_config config;
  int32_t *owned;         /* config.planner.owned's copy ([kinds * world]), or NULL */
  int hookless;           /* no hook state: step and trace only */
  int num_pairs;
  htp_planner *planner;
  htp_unit_table *table;  /* NULL when hookless */
  htp_imputer *imputer;   /* NULL for HTP_IMPUTE_ZERO or hookless */
  htp_migration *migration; /* NULL when hookless */
  htp__registered_pair *pairs; /* [num_pairs] */
  int32_t *listed;        /* [max units]: kept plus imputed units, ascending */
  int32_t *iota;          /* [max units]: 0, 1, 2, ... (a packed block's unit list) */
  int32_t *imputed;       /* [max units]: the pruned units same has a recent value for */
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
  double unit_seconds[HTP_PAIR_KINDS]; /* HTP_CLOCK_UNITS: the planner's modelled seconds */
  double slowdown;        /* >= 1: the hooks stretch their time by this */
  htp_clock clock;        /* what times the hooks */
  int64_t applied_version;
  /* The step and the trace: */
  int suspended;          /* htp_balancer_suspend: the hooks compute every unit */
  int64_t steps;          /* htp_balancer_step calls so far: the imputation's clock */
  /* Training (weights_stale: unit_weights.c; the rest: the backward hooks, balance_hooks.c): */
  int weights_stale;      /* htp_balancer_weights_updated since the migrated copies were sent */
  float **same_part;      /* [num_pairs]: HTP_IMPUTE_SAME's backward store, each local unit's
                           * gradient at its first matrix's output, rows x parts x units x
                           * width floats (allocated at the pair's first backward), or NULL */
  size_t *same_floats;    /* [num_pairs]: floats of same_part[p] */
  int64_t *same_stored_at; /* [num_pairs * max_units]: the step the unit's part was stored
                           * at (-1: never; set when same_part[p] is allocated) */
  float *grad_out;        /* migrated-in units' weight gradients, unit layout, in-list order */
  size_t grad_out_capacity; /* floats */
  /* Compact shards of kept and migrated-in units (htp__shard) the hooks
   * build in place of separate blocks: weights, their gradients, and the
   * kernels' scratch (backward) or the units' activations (forward); in
   * the context's memory (htp__balancer_reserve). */
  float *compact_w, *compact_dw, *compact_scratch;
  size_t compact_w_capacity, compact_dw_capacity, compact_scratch_capacity; /* floats */
  float *unit_staging;    /* one message of unit shards (gradient return) */
  size_t unit_staging_capacity; /* floats */
  float *act_f32;         /* a bf16 hook's activations widened for the imputer (host) */
  size_t act_f32_capacity; /* floats */
  float *unit_device;     /* on a device: unit_staging's or grad_out's twin in its memory */
  size_t unit_device_capacity; /* floats */
  /* HTP_SELECT_VARIATION: per pair, the local units' weights at the last
   * sample (unit layout, units x unit floats), and per unit a window of
   * update norms. */
  float **previous;       /* [num_pairs] */
  double *window;         /* [num_pairs * max_units * HTP__VARIATION_WINDOW] */
  long samples;           /* htp_balancer_weights_updated calls that compared weights */
  double *gather;         /* [world * HTP__STEP_RECORD_DOUBLES] the step's all-gather */
  double fingerprint;     /* of the config, 52 bits (exact in a double): the step compares */
  double *normalized;     /* [world] seconds fed to the detector */
  htp__site_model site_model; /* the hooks' seconds -> the detector's (site_speed.c) */
  FILE *trace;
  double comm_at_last_line; /* htp_ctx_comm_seconds at the previous trace line */
  int64_t traced_sets_version; /* the applied plan whose shed units the trace listed */
  int64_t trace_first_iter;    /* "iter" of the first step's line */
  htp__partition partition;
};

/* Steps over which HTP_SELECT_VARIATION sums a unit's update norms. */
#define HTP__VARIATION_WINDOW 16

/* balancer.c: the balancer's unit table and migration cache (NULL when
 * hookless). */
htp_unit_table *htp__balancer_table(htp_balancer *balancer);
htp_migration *htp__balancer_migration(htp_balancer *balancer);

/* ----- The weights a plan moves (unit_weights.c). Makes plan the one the
 * hooks follow: the unit table and the migration transfers for it
 * (collective over the plan's flows, as htp_migration_apply). A version
 * already applied costs nothing, unless htp_balancer_weights_updated said
 * the weights changed and the plan migrates units: then every migrated
 * unit's weights are sent again. A hookless balancer applies nothing. */
htp_result htp__balancer_apply(htp_balancer *balancer, const htp_plan *plan);
/* Tests: nonzero makes the hooks compute migrated-in units one at a time
 * from their cached one-unit shards (the path before packing) instead of
 * from the packed blocks; the two agree to fp32 round-off. */
void htp__balancer_set_one_by_one(htp_balancer *balancer, int one_by_one);
/* Migrated-in units of pair packed for the hooks (-1: bad arguments). */
int htp__balancer_packed_units(const htp_balancer *balancer, int pair);

/* trace.c: the line for this iteration, after the step fed the planner;
 * replanned says whether this step changed the plan, sites (what the
 * planner was fed) is NULL when the sites were not measured, measured
 * (the hooks' own seconds) is non-NULL on HTP_CLOCK_UNITS only. */
void htp__trace_write(htp_balancer *balancer, double seconds, const double *sites,
                      const double *measured, int replanned);

/* repartition.c (DESIGN §12). init builds the slot maps of the compiled
 * split (hooked balancers only; 0 or HTP_ERR_NOMEM), free releases. weigh
 * runs in the step before the trace line: it adds the step's plan to the
 * migration held so far and sets pending when a re-partition pays.
 * carry_out runs at the end of iteration, after the step: with pending it
 * moves the units (collective: every rank decided alike), installs the new
 * ownership and points *plan at the planner's fresh plan; else nothing. */
htp_result htp__partition_init(htp_balancer *b);
void htp__partition_free(htp_balancer *b);
void htp__partition_weigh(htp_balancer *b, const htp_plan *plan);
htp_result htp__partition_carry_out(htp_balancer *b, const htp_plan **plan);
/* Restarts the scores (after units changed slots): as just created. */
htp_result htp__scores_reset(htp_balancer *b);

/* unit_scores.c, the scores of config.selection. create allocates them
 * (htp_balancer_create, after max_units and pairs) and free releases them;
 * norms and observe feed importance from a forward hook (the output
 * weights' norms, once per pair and buffer; the kept units' activations,
 * act: rows of row_stride floats, unit i at columns [i * width, ...), or
 * the k-th kept unit there when compact); sample takes a variation sample
 * of every seen pair (htp_balancer_weights_updated); push hands every
 * pair's scores to the unit table (apply, at a plan change; a refusal has
 * its message in the context). All are no-ops for a selection without
 * scores. */
htp_result htp__scores_create(htp_balancer *b);
void htp__scores_free(htp_balancer *b);
void htp__scores_norms(htp_balancer *b, int32_t pair, const void *second, int64_t units,
                       int64_t width, int64_t model_dim);
void htp__scores_observe(htp_balancer *b, int32_t pair, const htp_unit_sets *s,
                         const void *act, int64_t rows, int64_t width, int64_t row_stride,
                         int compact);
htp_result htp__scores_sample(htp_balancer *b);
htp_result htp__scores_push(htp_balancer *b);

/* ----- A unit of each pair kind. */

/* Columns of one unit's activation: a head's channels or an MLP unit's
 * neurons. */
static inline int64_t htp__unit_width(const htp_balancer_config *c, htp_pair_kind kind) {
  return kind == HTP_PAIR_ATTENTION ? c->head_dim : c->mlp_unit_width;
}
/* Row blocks of a unit's first weight: q, k, v = 3; fc1 = 1. */
static inline int64_t htp__unit_parts(htp_pair_kind kind) {
  return kind == HTP_PAIR_ATTENTION ? 3 : 1;
}
/* Bytes of one element of the block's tensors (the config's, 4 by default). */
static inline int64_t htp__element_bytes(const htp_balancer_config *c) {
  return c->element_bytes ? c->element_bytes : 4;
}
/* Elements of one unit's shard (the layout at the top of unit_weights.c):
 * floats in an f32 block, bf16 values in a bf16 one. */
static inline int64_t htp__unit_floats(const htp_balancer_config *c, htp_pair_kind kind) {
  return htp__units_floats(1, htp__unit_parts(kind), htp__unit_width(c, kind), c->model_dim);
}
/* Bytes of one unit's shard (htp_balancer_unit_bytes). */
static inline int64_t htp__unit_bytes(const htp_balancer_config *c, htp_pair_kind kind) {
  return htp__unit_floats(c, kind) * htp__element_bytes(c);
}
/* ----- Shards (unit_shard.c). A shard of `units` work units of one pair kind:
 *   first  [parts * units * width, d] (part q's rows of unit u at
 *          (q * units + u) * width: q of every unit | k | v, or fc1 rows),
 *   bias   [parts * units * width] (NULL: none; zeros when copied out),
 *   second [d, units * width] (proj or fc2 columns).
 * A one-unit shard is the layout migration moves; packed blocks, the
 * backward's compact weights and gradients and the forward's compact
 * weights are shards too. Elements are the shape's elem bytes each: the
 * block's dtype for weights (f32 or bf16), f32 for gradients and states. */
typedef struct htp__shard {
  void *first, *bias, *second;
  int64_t units;
} htp__shard;

typedef struct htp__unit_shape {
  int64_t parts, width, d; /* htp__unit_parts, htp__unit_width, model_dim */
  int64_t elem;            /* bytes of one element: 4 (f32) or 2 (bf16) */
} htp__unit_shape;

/* Where shards' elements live: host memory (a NULL mover, or a NULL table)
 * or the memory of a kernel table's device, copied with its copy_2d and
 * cleared with its zero (the balanced backward on a device). The _on
 * functions take one and return the table's status; the others are host
 * memory. */
typedef struct htp__unit_mover {
  const htp_kernel_table *table;
  const htp_kernel_env *env;
} htp__unit_mover;

/* The shard of `units` units laid out from base (htp__units_floats elements). */
htp__shard htp__shard_at(void *base, int64_t units, const htp__unit_shape *u);
/* Unit `from` of src into slot `to` of dst; a NULL src bias gives zeros, a
 * NULL dst bias is skipped. */
void htp__copy_unit(const htp__shard *src, int64_t from, const htp__shard *dst, int64_t to,
                    const htp__unit_shape *u);
/* dst slots at .. at + count - 1 = the listed units of src. */
void htp__gather_units(const htp__shard *src, const int32_t *list, int64_t count,
                       const htp__shard *dst, int64_t at, const htp__unit_shape *u);
/* The listed units of dst = src slots at .. at + count - 1 (gather's inverse). */
void htp__scatter_units(const htp__shard *src, int64_t at, const int32_t *list, int64_t count,
                        const htp__shard *dst, const htp__unit_shape *u);
void htp__zero_shard(const htp__shard *s, const htp__unit_shape *u);
/* count consecutive units: src's from .. from + count - 1 into dst's to ..
 * (a NULL src bias gives zeros, a NULL dst bias is skipped). */
htp_kernel_status htp__move_units(const htp__unit_mover *m, const htp__shard *src, int64_t from,
                                  const htp__shard *dst, int64_t to, int64_t count,
                                  const htp__unit_shape *u);
htp_kernel_status htp__gather_units_on(const htp__unit_mover *m, const htp__shard *src,
                                       const int32_t *list, int64_t count, const htp__shard *dst,
                                       int64_t at, const htp__unit_shape *u);
htp_kernel_status htp__scatter_units_on(const htp__unit_mover *m, const htp__shard *src,
                                        int64_t at, const int32_t *list, int64_t count,
                                        const htp__shard *dst, const htp__unit_shape *u);
htp_kernel_status htp__zero_shard_on(const htp__unit_mover *m, const htp__shard *s,
                                     const htp__unit_shape *u);
/* Zeroes slot `unit` of s (its rows, bias and columns; a NULL bias is
 * skipped). */
void htp__zero_unit(const htp__shard *s, int64_t unit, const htp__unit_shape *u);
/* Grows *buffer to hold floats (contents kept); 0, or -1 out of memory. */
int htp__reserve_floats(float **buffer, size_t *capacity, size_t floats);

/* unit_weights.c: the compact shard of a rank's listed own units (of
 * `mine`) followed by pair's packed migrated-in units, in in-list order, in
 * b->compact_w (grown; the context's memory, as the weights); the forward
 * and the backward hooks compute from it. 0, or -1 out of memory or a
 * failed copy. */
int htp__balancer_compact_weights(htp_balancer *b, int pair, const htp__shard *mine,
                                  const int32_t *list, int64_t count, const htp__unit_shape *u,
                                  htp__shard *out);
/* The memory the context's weights are in (a device's, or the host's). */
htp__unit_mover htp__balancer_memory(const htp_balancer *b);
/* Buffers of b in that memory: *buffer grown to hold `words` floats (one of
 * kernels/htp_scratch.h's htp_balancer_*_words, the formulas the
 * compiler's bound sums; contents kept in host memory, not on a device: the
 * device buffers are scratch, or rewritten whole); 0, or -1 out of memory
 * (or words < 0: an overflowed size). release frees one (NULL: no-op). */
int htp__balancer_reserve(htp_balancer *b, float **buffer, size_t *capacity, int64_t words);
void htp__balancer_release(htp_balancer *b, float *buffer);

/* ----- Site timing (site_timing.c). Now on the clock that times ctx's
 * hooks (its balancer's; the wall clock without one): a hook's start. */
double htp__hook_now(const htp_ctx *ctx);
/* Ends a hook on kind that started at `started` (htp__hook_now), or on a
 * device at its HTP_KERNEL_TIMER_HOOKS mark 0, and books its seconds,
 * --slow included; `units` is what it ran, weighted (backward counts
 * twice), for HTP_CLOCK_UNITS. */
htp_result htp__balancer_end_site(htp_ctx *ctx, htp_balancer *b, htp_pair_kind kind,
                                  int on_device, double units, double started);
/* Books seconds of hook work on a pair kind, as a hook does (tests). */
void htp__balancer_add_site_seconds(htp_balancer *balancer, htp_pair_kind kind, double seconds);

#endif /* HTP_BALANCE_INTERNAL_H */
