/*===- runtime/balance.c - the balance hooks: a rank computes its plan's units ===*
 *
 * The run-time half of heterogeneous tensor parallelism (DESIGN §4). The
 * balancer ties together what the planner region provides for one rank:
 * planner (how many units), unit table (which ones), imputer (values of
 * pruned units) and migration cache (weights of units computed for others).
 * The hooks that compiled blocks call in place of the plain attention and
 * MLP kernels ask the table which units to compute, compute those with the
 * work-unit kernels of the context's kernel table (kernels/htp_kernel_table.h;
 * on the CPU kernels/cpu/units.c), impute the pruned ones, and add
 * the migrated-in units from packed blocks of their weights. No hook talks to
 * other ranks: the block's own all-reduce completes the sum, and the
 * migration transfers happen once per plan change, in
 * htp_balancer_end_iteration. Both hooks run one body (run_pair); what
 * differs between a head and an MLP unit is a row of pair_ops: how many
 * row blocks of the first weight a unit spans (q, k, v: 3; fc1: 1) and
 * the kernel that computes listed units' activations.
 *
 * One-unit shards, as the pack function writes them and the hooks read them:
 *   attention head h: wqkv_1 [3 * head_dim, d] (q_h | k_h | v_h rows),
 *                     bqkv_1 [3 * head_dim], wproj_1 [d, head_dim] (proj
 *                     columns of head h);
 *   MLP unit u:       w1_u [width, d], b1_u [width], w2_u [d, width] (fc2
 *                     columns of the unit).
 * A missing bias travels as zeros.
 *
 * A helper does not compute its migrated-in units from these one-unit
 * shards (unit-sized GEMMs, slower than the owner's merged ones): at each
 * plan change it packs them (pack_in_units) into blocks of up to
 * units_per_rank units, each a small shard of n units in the same layouts
 * (balance_internal.h, htp__packed_pair). On the CPU with zero imputation a
 * rank that prunes, hands off or takes in units computes its kept units and
 * its packed in-units as one compact shard (compute_compact): one
 * activation call and one row-parallel GEMM in all. Otherwise (a device,
 * average or same imputation) the hook runs its own units in place and each
 * packed block as one head or hidden-units call and one row-parallel linear.
 *
 * Unit scores (importance, variation, displacement): unit_scores.c.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"
#include "runtime/htp_ops.h"

#include "kernels/htp_kernel_table.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One hook call as both hooks describe it to the shared body. */
typedef struct pair_call {
  htp_pair_kind kind;
  int32_t pair;
  const float *x;
  const float *first;    /* wqkv / w1: [parts * units * width, d] */
  const float *bias;     /* bqkv / b1 (may be NULL) */
  const float *second;   /* wproj / w2: [d, units * width] */
  float *y;              /* [rows, d] partial sum */
  float *act;            /* [rows, units * width]: this rank's units' activations */
  float *migrated;       /* [rows, width]: one migrated unit's (one_by_one) */
  float *kernel_scratch; /* the head kernel's own scratch (attention) */
  int64_t batch, tokens, rows, model_dim;
  int64_t units, width;  /* this rank's share: units of width columns */
  int32_t tanh_approx;   /* MLP: GELU's tanh approximation */
  const htp_kernel_table *kernels; /* the context's table (ops.c) and its environment */
  const htp_kernel_env *env;
} pair_call;

/* out[:, unit columns] = activation of the listed units of a block of
 * `units` units whose weights are first / bias; list NULL: every unit. */
typedef htp_kernel_status (*activate_fn)(const pair_call *call, const float *first,
                                         const float *bias, int64_t units, const int32_t *list,
                                         int64_t count, float *out);

/* What differs between the kinds. */
typedef struct pair_ops {
  const char *hook;      /* the hook's name, for messages */
  const char *unit;      /* what a unit is called, for messages */
  activate_fn activate;
} pair_ops;

static htp_kernel_status attention_activate(const pair_call *c, const float *wqkv,
                                            const float *bqkv, int64_t heads,
                                            const int32_t *list, int64_t count, float *out) {
  if (list)
    return c->kernels->attention_heads_f32(c->env, c->x, wqkv, bqkv, out, c->kernel_scratch,
                                           c->batch, c->tokens, c->model_dim, heads, c->width,
                                           list, count);
  htp_kernel_status status = HTP_KERNEL_OK;
  for (int32_t h = 0; h < heads && status == HTP_KERNEL_OK; ++h) /* one head at a time */
    status = c->kernels->attention_heads_f32(c->env, c->x, wqkv, bqkv, out, c->kernel_scratch,
                                             c->batch, c->tokens, c->model_dim, heads,
                                             c->width, &h, 1);
  return status;
}

static htp_kernel_status mlp_activate(const pair_call *c, const float *w1, const float *b1,
                                      int64_t units, const int32_t *list, int64_t count,
                                      float *out) {
  const int64_t hidden = units * c->width;
  const int32_t everything = 0; /* every neuron as one unit: one GEMM */
  if (list)
    return c->kernels->mlp_hidden_units_f32(c->env, c->x, w1, b1, out, c->rows, c->model_dim,
                                            hidden, c->width, list, count, c->tanh_approx);
  return c->kernels->mlp_hidden_units_f32(c->env, c->x, w1, b1, out, c->rows, c->model_dim,
                                          hidden, hidden, &everything, 1, c->tanh_approx);
}

static const pair_ops PAIR_OPS[HTP_PAIR_KINDS] = {
    [HTP_PAIR_ATTENTION] = {"htp_rt_attention_f32", "head", attention_activate},
    [HTP_PAIR_MLP] = {"htp_rt_mlp_f32", "MLP unit", mlp_activate},
};

int64_t htp_balancer_unit_bytes(const htp_balancer_config *config, htp_pair_kind kind) {
  return config ? htp__unit_floats(config, kind) * (int64_t)sizeof(float) : 0;
}

/* ===== Lifecycle ========================================================= */

static int is_hookless(const htp_balancer_config *c) {
  return c->model_dim == 0 && c->head_dim == 0 && c->mlp_unit_width == 0;
}

static htp_result check_config(htp_ctx *ctx, const htp_balancer_config *c) {
#define REJECT(...) return htp__ctx_error(ctx, HTP_ERR_INVALID, "htp_balancer_create: " __VA_ARGS__)
  if (!c) REJECT("config is NULL");
  if (c->magic != HTP_BALANCER_CONFIG_MAGIC)
    REJECT("config.magic is 0x%08x, not HTP_BALANCER_CONFIG_MAGIC (start from "
           "HTP_BALANCER_CONFIG_INITIALIZER)",
           (unsigned)c->magic);
  char why[HTP__MESSAGE_SIZE - 64];
  if (htp_planner_config_check(&c->planner, why, sizeof why) != HTP_OK)
    REJECT("config.planner: %s", why);
  if (c->planner.world_size != htp_ctx_size(ctx))
    REJECT("config.planner.world_size is %d, the context's world has %d ranks",
           c->planner.world_size, htp_ctx_size(ctx));
  if (c->selection < HTP_SELECT_RANDOM || c->selection > HTP_SELECT_DISPLACEMENT)
    REJECT("unknown selection %d", (int)c->selection);
  if (c->impute < HTP_IMPUTE_ZERO || c->impute > HTP_IMPUTE_AVERAGE)
    REJECT("unknown impute %d", (int)c->impute);
  if (c->same_max_age < 0) REJECT("same_max_age %lld is negative", (long long)c->same_max_age);
  /* Importance scores and the same/average imputation read activations and
   * weights with the host's loops: on a device those are device memory. */
  const htp_kernel_table *table = htp__kernel_table(ctx);
  if (table->device != HTP_KERNEL_DEVICE_CPU &&
      (c->selection != HTP_SELECT_RANDOM || c->impute != HTP_IMPUTE_ZERO))
    REJECT("on the %s device only random selection and zero imputation run yet (importance, "
           "variation and the same/average imputation read device memory on the host); asked: "
           "select %s, impute %s",
           table->name, htp_select_name(c->selection), htp_impute_name(c->impute));
  if (is_hookless(c)) return HTP_OK;
  /* Every GEMM dimension must fit BLAS's int. */
  const int64_t limit = INT_MAX / 4;
  if (c->model_dim < 1 || c->model_dim > limit) REJECT("model_dim %lld is out of range [1, %lld]",
                                                      (long long)c->model_dim, (long long)limit);
  if (c->head_dim < 1 || c->head_dim > limit / c->planner.units_per_rank[HTP_PAIR_ATTENTION])
    REJECT("head_dim %lld is out of range (heads per rank %d)", (long long)c->head_dim,
           c->planner.units_per_rank[HTP_PAIR_ATTENTION]);
  if (c->mlp_unit_width < 1 || c->mlp_unit_width > limit / c->planner.units_per_rank[HTP_PAIR_MLP])
    REJECT("mlp_unit_width %lld is out of range (MLP units per rank %d)",
           (long long)c->mlp_unit_width, c->planner.units_per_rank[HTP_PAIR_MLP]);
  if (htp__unit_floats(c, HTP_PAIR_ATTENTION) > limit || htp__unit_floats(c, HTP_PAIR_MLP) > limit)
    REJECT("one unit's weights are too large (%lld / %lld floats)",
           (long long)htp__unit_floats(c, HTP_PAIR_ATTENTION), (long long)htp__unit_floats(c, HTP_PAIR_MLP));
  return HTP_OK;
#undef REJECT
}

/* The hook state: unit table, imputer, migration cache, registered pairs
 * and the importance arrays. */
static htp_result create_hook_state(htp_balancer *b) {
  const htp_balancer_config *config = &b->config;
  const int max_units = config->planner.units_per_rank[0] > config->planner.units_per_rank[1]
                            ? config->planner.units_per_rank[0]
                            : config->planner.units_per_rank[1];
  const size_t bytes[HTP_PAIR_KINDS] = {
      (size_t)htp__unit_floats(config, HTP_PAIR_ATTENTION) * sizeof(float),
      (size_t)htp__unit_floats(config, HTP_PAIR_MLP) * sizeof(float)};
  b->max_units = max_units;
  b->pairs = calloc((size_t)b->num_pairs, sizeof *b->pairs);
  b->listed = calloc((size_t)max_units, sizeof *b->listed);
  b->iota = calloc((size_t)max_units, sizeof *b->iota);
  b->imputed = calloc((size_t)max_units, sizeof *b->imputed);
  b->packed = calloc((size_t)b->num_pairs, sizeof *b->packed);
  htp_result r =
      b->pairs && b->listed && b->iota && b->imputed && b->packed ? HTP_OK : HTP_ERR_NOMEM;
  for (int i = 0; r == HTP_OK && i < max_units; ++i) b->iota[i] = i;
  if (r == HTP_OK) r = htp__scores_create(b);
  if (r == HTP_OK && config->impute == HTP_IMPUTE_SAME) { /* the backward hooks' store */
    b->same_part = calloc((size_t)b->num_pairs, sizeof *b->same_part);
    b->same_floats = calloc((size_t)b->num_pairs, sizeof *b->same_floats);
    b->same_stored_at = malloc((size_t)b->num_pairs * (size_t)max_units * sizeof(int64_t));
    if (!b->same_part || !b->same_floats || !b->same_stored_at) r = HTP_ERR_NOMEM;
  }
  const int rank = b->ctx->rank;
  if (r == HTP_OK)
    r = htp_unit_table_create(&config->planner, rank, config->selection, config->seed, &b->table);
  if (r == HTP_OK && config->impute != HTP_IMPUTE_ZERO)
    r = htp_imputer_create(b->num_pairs, &b->imputer);
  if (r == HTP_OK) r = htp_migration_create(&config->planner, rank, bytes, &b->migration);
  return r;
}

htp_result htp_balancer_create(htp_ctx *ctx, const htp_balancer_config *config,
                               htp_balancer **out) {
  if (!ctx) return HTP_ERR_INVALID;
  if (!out) return htp__ctx_error(ctx, HTP_ERR_INVALID, "htp_balancer_create: balancer is NULL");
  *out = NULL;
  htp_result r = check_config(ctx, config);
  if (r != HTP_OK) return r;
  if (ctx->balancer)
    return htp__ctx_error(ctx, HTP_ERR_INVALID,
                          "htp_balancer_create: rank %d already has a balancer", ctx->rank);
  htp_balancer *b = calloc(1, sizeof *b);
  if (!b) return htp__ctx_error(ctx, HTP_ERR_NOMEM, "htp_balancer_create: out of memory");
  b->ctx = ctx;
  b->config = *config;
  b->hookless = is_hookless(config);
  b->num_pairs = htp_num_pairs(config->planner.num_layers);
  b->applied_version = 0; /* the initial plan keeps every unit: the table starts so */
  b->slowdown = 1.0;
  b->clock = HTP_CLOCK_WALL;
  b->comm_at_last_line = htp_ctx_comm_seconds(ctx);
  const size_t n = (size_t)config->planner.world_size;
  b->gather = calloc(n * HTP__STEP_RECORD_DOUBLES, sizeof *b->gather);
  b->normalized = calloc(n, sizeof *b->normalized);
  int model = htp__site_model_init(&b->site_model, &config->planner);
  r = b->gather && b->normalized && model == 0 ? HTP_OK : HTP_ERR_NOMEM;
  if (r == HTP_OK) r = htp_planner_create(&config->planner, &b->planner);
  if (r == HTP_OK && !b->hookless) r = create_hook_state(b);
  if (r != HTP_OK) {
    b->ctx = NULL; /* not attached yet */
    htp_balancer_destroy(b);
    return htp__ctx_error(ctx, r, "htp_balancer_create: %s",
                          r == HTP_ERR_NOMEM ? "out of memory" : "planner objects rejected the config");
  }
  ctx->balancer = b;
  *out = b;
  return HTP_OK;
}

void htp_balancer_destroy(htp_balancer *b) {
  if (!b) return;
  if (b->ctx && b->ctx->balancer == b) b->ctx->balancer = NULL;
  htp_migration_destroy(b->migration);
  htp_imputer_destroy(b->imputer);
  htp_unit_table_destroy(b->table);
  htp_planner_destroy(b->planner);
  if (b->packed)
    for (int p = 0; p < b->num_pairs; ++p) {
      free(b->packed[p].data);
      if (b->ctx && b->packed[p].device) htp_mem_free(b->ctx, b->packed[p].device);
    }
  free(b->packed);
  free(b->pairs);
  free(b->listed);
  free(b->iota);
  free(b->imputed);
  htp__scores_free(b);
  /* The backward hooks' state (balance_train.c). */
  if (b->same_part)
    for (int p = 0; p < b->num_pairs; ++p) free(b->same_part[p]);
  free(b->same_part);
  free(b->same_floats);
  free(b->same_stored_at);
  free(b->grad_out);
  free(b->compact_w);
  free(b->compact_dw);
  free(b->compact_scratch);
  free(b->unit_staging);
  free(b->gather);
  free(b->normalized);
  htp__site_model_free(&b->site_model);
  free(b);
}

htp_balancer *htp_ctx_balancer(const htp_ctx *ctx) { return ctx ? ctx->balancer : NULL; }
htp_planner *htp_balancer_planner(htp_balancer *b) { return b ? b->planner : NULL; }
htp_unit_table *htp__balancer_table(htp_balancer *b) { return b ? b->table : NULL; }
htp_migration *htp__balancer_migration(htp_balancer *b) { return b ? b->migration : NULL; }

/* ===== Migration: packing one unit from the registered weights ========== */

/* Whether the context's kernels (and so the registered weights) live on a
 * device rather than in host memory. */
static int on_device(const htp_balancer *b) {
  return htp__kernel_table(b->ctx)->device != HTP_KERNEL_DEVICE_CPU;
}

/* bytes of the registered weights at src into the host shard at dst: a
 * memcpy on the CPU, a download from a device (once per plan change). */
static int fetch(const htp_balancer *b, void *dst, const void *src, size_t bytes) {
  if (!on_device(b)) {
    memcpy(dst, src, bytes);
    return 0;
  }
  return htp_mem_download(b->ctx, dst, src, bytes) == HTP_OK ? 0 : -1;
}

/* The shard layout at the top of this file, for either kind. */
static int pack_unit(void *user, int pair, int unit, void *dst) {
  const htp_balancer *b = user;
  const htp_balancer_config *c = &b->config;
  if (pair < 0 || pair >= b->num_pairs || !b->pairs[pair].seen) return -1;
  const htp_pair_kind kind = htp_pair_kind_of(pair);
  const int units = c->planner.units_per_rank[kind];
  if (unit < 0 || unit >= units) return -1;
  const htp__registered_pair *w = &b->pairs[pair];
  const int64_t d = c->model_dim, width = htp__unit_width(c, kind), inner = units * width;
  const int64_t parts = htp__unit_parts(kind);
  float *out = dst;
  int failed = 0;
  for (int64_t part = 0; part < parts && !failed; ++part) /* the unit's rows of each block */
    failed = fetch(b, out + part * width * d, w->first + (part * inner + unit * width) * d,
                   (size_t)(width * d) * sizeof(float));
  out += parts * width * d;
  for (int64_t part = 0; part < parts && !failed; ++part) {
    if (w->bias)
      failed = fetch(b, out + part * width, w->bias + part * inner + unit * width,
                     (size_t)width * sizeof(float));
    else memset(out + part * width, 0, (size_t)width * sizeof(float));
  }
  out += parts * width;
  for (int64_t o = 0; o < d && !failed; ++o) /* the unit's columns of second */
    failed = fetch(b, out + o * width, w->second + o * inner + unit * width,
                   (size_t)width * sizeof(float));
  return failed ? -1 : 0;
}

/* On a device, pair pk's host blocks uploaded for the hooks (the buffer
 * grows and is kept, as the host one). */
static htp_result upload_packed(htp_balancer *b, int pair, htp__packed_pair *pk, size_t floats) {
  if (!on_device(b) || floats == 0) return HTP_OK;
  if (floats > pk->device_capacity) {
    if (pk->device) htp_mem_free(b->ctx, pk->device);
    pk->device = NULL;
    pk->device_capacity = 0;
    void *grown = NULL;
    htp_result r = htp_mem_alloc(b->ctx, floats * sizeof(float), &grown);
    if (r != HTP_OK)
      return htp__ctx_error(b->ctx, r, "htp_balancer: pair %d: no device memory for %zu floats "
                            "of migrated units", pair, floats);
    pk->device = grown;
    pk->device_capacity = floats;
  }
  return htp_mem_upload(b->ctx, pk->device, pk->data, floats * sizeof(float));
}

/* ===== Packing a helper's migrated-in units ============================ */

/* Rebuilds every pair's packed blocks from the migration cache, for the
 * unit table's current in-lists (after htp_migration_apply). Buffers grow
 * and are kept; an unchanged plan never gets here. */
static htp_result pack_in_units(htp_balancer *b) {
  const htp_balancer_config *c = &b->config;
  const int64_t d = c->model_dim;
  for (int p = 0; p < b->num_pairs; ++p) {
    const htp_pair_kind kind = htp_pair_kind_of(p);
    const int64_t width = htp__unit_width(c, kind), parts = htp__unit_parts(kind);
    const int64_t per_unit = htp__unit_floats(c, kind), cap = c->planner.units_per_rank[kind];
    htp__packed_pair *pk = &b->packed[p];
    htp_unit_sets s;
    if (htp_unit_table_get(b->table, p, &s) != HTP_OK)
      return htp__ctx_error(b->ctx, HTP_ERR_INTERNAL, "htp_balancer: no unit sets for pair %d", p);
    pk->count = 0;
    const size_t need = (size_t)s.num_in * (size_t)per_unit;
    if (need > pk->capacity) {
      float *grown = realloc(pk->data, need * sizeof(float));
      if (!grown)
        return htp__ctx_error(b->ctx, HTP_ERR_NOMEM,
                              "htp_balancer: pair %d: out of memory packing %d migrated units", p,
                              s.num_in);
      pk->data = grown;
      pk->capacity = need;
    }
    const htp__unit_shape u = {parts, width, d};
    float *block = pk->data;
    for (int i0 = 0; i0 < s.num_in; i0 += (int)cap) {
      const int64_t n = s.num_in - i0 < cap ? s.num_in - i0 : cap;
      const htp__shard packed = htp__shard_at(block, n, &u);
      for (int64_t j = 0; j < n; ++j) {
        const int src = s.in_src[i0 + j], unit = s.in_unit[i0 + j];
        const float *cached = htp_migration_weights(b->migration, p, src, unit);
        if (!cached)
          return htp__ctx_error(b->ctx, HTP_ERR_INTERNAL,
                                "htp_balancer: pair %d: the weights of rank %d's %s %d are not "
                                "cached here",
                                p, src, PAIR_OPS[kind].unit, unit);
        const htp__shard one = htp__shard_at((float *)cached, 1, &u);
        htp__copy_unit(&one, 0, &packed, j, &u);
      }
      block += n * per_unit;
    }
    htp_result r = upload_packed(b, p, pk, need);
    if (r != HTP_OK) return r;
    pk->count = s.num_in;
  }
  return HTP_OK;
}

int htp__balancer_compact_weights(htp_balancer *b, int pair, const htp__shard *mine,
                                  const int32_t *list, int64_t count, const htp__unit_shape *u,
                                  htp__shard *out) {
  const htp_pair_kind kind = htp_pair_kind_of(pair);
  const htp__packed_pair *pk = &b->packed[pair];
  const int64_t total = count + pk->count, per_unit = htp__unit_floats(&b->config, kind);
  const int64_t cap = b->config.planner.units_per_rank[kind];
  if (htp__reserve_floats(&b->compact_w, &b->compact_w_capacity, (size_t)(total * per_unit)))
    return -1;
  *out = htp__shard_at(b->compact_w, total, u);
  htp__gather_units(mine, list, count, out, 0, u);
  float *block = pk->data;
  for (int i0 = 0; i0 < pk->count; i0 += (int)cap) { /* the packed blocks, in order */
    const int64_t n = pk->count - i0 < cap ? pk->count - i0 : cap;
    const htp__shard packed = htp__shard_at(block, n, u);
    for (int64_t j = 0; j < n; ++j) htp__copy_unit(&packed, j, out, count + i0 + j, u);
    block += n * per_unit;
  }
  return 0;
}

void htp__balancer_set_one_by_one(htp_balancer *b, int one_by_one) {
  if (b) b->one_by_one = one_by_one != 0;
}

int htp__balancer_packed_units(const htp_balancer *b, int pair) {
  if (!b || b->hookless || pair < 0 || pair >= b->num_pairs) return -1;
  return b->packed[pair].count;
}

/* ===== Per iteration ===================================================== */

/* A failure in the balancer's transfers leaves peers inside theirs: fail the
 * world so that they return at once instead of at their deadline. */
static htp_result fail_world(htp_ctx *ctx, htp_result r) {
  if (r == HTP_OK || htp_world_status(ctx->world) != HTP_OK) return r;
  char reason[HTP__MESSAGE_SIZE];
  memcpy(reason, ctx->last_error, sizeof reason);
  return htp__fail(ctx, r, "%s", reason);
}

static int migrates(const htp_plan *plan) {
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    if (plan->num_flows[k] > 0) return 1;
  return 0;
}

htp_result htp__balancer_apply(htp_balancer *b, const htp_plan *plan) {
  if (!b || !plan) return HTP_ERR_INVALID;
  if (b->hookless) return HTP_OK;
  const int changed = plan->version != b->applied_version;
  const int stale = b->weights_stale && migrates(plan);
  b->weights_stale = 0;
  if (!changed && !stale) return HTP_OK;
  /* Importance or variation: the scores so far decide the new plan's shed
   * sets (and only a new plan: the sets stay as they are between replans). */
  if (changed) {
    htp_result r = htp__scores_push(b);
    if (r != HTP_OK) return fail_world(b->ctx, r);
  }
  /* Weights the optimizer changed: every migrated unit is sent again, not
   * only those new to their helper. */
  if (stale) htp_migration_invalidate(b->migration);
  /* htp_migration_apply updates the unit table for the new version and
   * then fills in the migrated-in unit ids; updating the table again on an
   * unchanged version would forget ids only the transfer knows (importance
   * selection), so the table changes only here, with the version. */
  htp_result r = htp_migration_apply(b->migration, b->ctx, plan, b->table, pack_unit, b);
  if (r == HTP_OK) r = pack_in_units(b);
  if (r != HTP_OK) return fail_world(b->ctx, r);
  b->applied_version = plan->version;
  return HTP_OK;
}

htp_result htp_balancer_suspend(htp_balancer *b, int suspended) {
  if (!b) return HTP_ERR_INVALID;
  b->suspended = suspended != 0;
  return HTP_OK;
}

htp_result htp_balancer_set_slowdown(htp_balancer *b, double factor) {
  if (!b) return HTP_ERR_INVALID;
  if (!(factor >= 1.0 && factor <= 1e6))
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID, "htp_balancer_set_slowdown: factor %g not in [1, 1e6]",
                     factor);
  b->slowdown = factor;
  return HTP_OK;
}

htp_result htp_balancer_set_clock(htp_balancer *b, htp_clock clock) {
  if (!b) return HTP_ERR_INVALID;
  if (clock != HTP_CLOCK_WALL && clock != HTP_CLOCK_THREAD && clock != HTP_CLOCK_UNITS)
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID, "htp_balancer_set_clock: clock %d is none of "
                          "HTP_CLOCK_WALL, HTP_CLOCK_THREAD, HTP_CLOCK_UNITS", (int)clock);
  b->clock = clock;
  return HTP_OK;
}

double htp__hook_now(const htp_ctx *ctx) {
  const htp_balancer *b = ctx ? ctx->balancer : NULL;
  return b && b->clock != HTP_CLOCK_WALL ? htp_thread_seconds() : htp_now();
}

/* Waits `seconds`: spinning below 200 us, where a sleep would overshoot by
 * the timer's granularity, sleeping above. */
static void wait_seconds(double seconds) {
  if (seconds <= 0.0) return;
  if (seconds < 2e-4) {
    double until = htp_now() + seconds;
    while (htp_now() < until) {
    }
    return;
  }
  struct timespec pause = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
}

void htp__balancer_add_site_seconds(htp_balancer *b, htp_pair_kind kind, double seconds) {
  if (b && kind >= HTP_PAIR_ATTENTION && kind < HTP_PAIR_KINDS) b->site_seconds[kind] += seconds;
}

/* Whose clock times a hook. On the CPU the kernels finish before they
 * return, so the host's clock around the hook is its compute (unchanged:
 * the CPU tests and benchmarks rest on it). On a device the kernels only
 * enqueue: the host's clock would book the launches, not the compute, and
 * every rank would look equally fast. There the hook marks the rank's
 * stream before and after its work (htp_ctx_mark: the table's events) and
 * books the device's time between them; htp_ctx_elapsed waits for the
 * hook's work, one wait per hook. The hooks' marks are a timer of their own
 * (HTP_KERNEL_TIMER_HOOKS), so a caller timing the whole iteration with
 * htp_ctx_mark keeps its marks. */
static int timed_on_device(const pair_call *call) {
  return call->kernels->device != HTP_KERNEL_DEVICE_CPU;
}

/* Ends a hook's timing. The emulated slowdown waits (factor - 1) times the
 * hook's time right here, before the block's all-reduce, as a slower device
 * would be late to it; a rank that sheds units sheds slowed time too. The
 * hook books factor times its compute, so detection sees the factor exactly
 * even where the wait overshoots. */
static htp_result finish_site(htp_ctx *ctx, htp_balancer *b, const pair_call *call,
                              const htp_unit_sets *s, double started) {
  double elapsed = 0.0;
  if (!timed_on_device(call)) {
    elapsed = htp__hook_now(ctx) - started;
  } else {
    htp_result r = htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_HOOKS, 1);
    if (r == HTP_OK) r = htp__ctx_elapsed_timer(ctx, HTP_KERNEL_TIMER_HOOKS, &elapsed);
    if (r != HTP_OK) return r;
  }
  htp__balancer_book_site(b, call->kind, elapsed, (double)(s->num_kept + s->num_in));
  return HTP_OK;
}

void htp__balancer_book_site(htp_balancer *b, htp_pair_kind kind, double elapsed, double units) {
  /* On the thread clock the wait would not show (it is no CPU work): the
   * caller models the slowed time from the booked seconds instead. */
  if (b->clock == HTP_CLOCK_WALL) wait_seconds((b->slowdown - 1.0) * elapsed);
  htp__balancer_add_site_seconds(b, kind, b->slowdown * elapsed);
  b->unit_seconds[kind] += b->slowdown * units * b->config.planner.unit_cost[kind] *
                           HTP_UNIT_CLOCK_SECONDS;
}

htp_result htp_balancer_weights_updated(htp_balancer *b) {
  if (!b) return HTP_ERR_INVALID;
  if (b->hookless) return HTP_OK;
  b->weights_stale = 1; /* migrated copies go out again at the next apply */
  return htp__scores_sample(b);
}

double htp_balancer_hook_seconds(const htp_balancer *b) {
  return b ? b->site_seconds[HTP_PAIR_ATTENTION] + b->site_seconds[HTP_PAIR_MLP] : 0.0;
}

/* The measure's figures are the caller's: refuse what no clock gives. */
static int measure_is_valid(const htp_iteration_measure *m) {
  const double figures[] = {m->wall_seconds, m->comm_seconds, m->thread_seconds};
  for (size_t i = 0; i < sizeof figures / sizeof *figures; i++)
    if (!(figures[i] >= 0.0) || !isfinite(figures[i])) return 0;
  return 1;
}

htp_result htp_balancer_end_iteration(htp_balancer *b, const htp_iteration_measure *measured,
                                      htp_iteration_times *times, const htp_plan **plan_out) {
  if (plan_out) *plan_out = NULL;
  if (times) *times = (htp_iteration_times){0};
  if (!b) return HTP_ERR_INVALID;
  if (!measured || !measure_is_valid(measured))
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID,
                          measured ? "htp_balancer_end_iteration: a measured figure (wall %g, comm "
                                     "%g, thread %g seconds) is negative or not finite"
                                   : "htp_balancer_end_iteration: measured is NULL",
                          measured ? measured->wall_seconds : 0.0,
                          measured ? measured->comm_seconds : 0.0,
                          measured ? measured->thread_seconds : 0.0);
  double compute = b->clock == HTP_CLOCK_WALL ? measured->wall_seconds - measured->comm_seconds
                                              : measured->thread_seconds;
  if (compute < 0.0) compute = 0.0;
  /* --slow without hooks: the whole iteration is the work to stretch. With
   * hooks they stretch the unit work themselves (htp__balancer_book_site),
   * so shedding units sheds slowed time. */
  if (b->hookless && b->slowdown > 1.0) {
    if (b->clock == HTP_CLOCK_WALL) wait_seconds((b->slowdown - 1.0) * compute);
    compute *= b->slowdown;
  }
  const double hooks = htp_balancer_hook_seconds(b);
  /* The planner compares the work it can move: the hooks' time. */
  const double planned = hooks > 0.0 ? hooks : compute > 0.0 ? compute : 1e-9;
  const htp_plan *plan = NULL;
  htp_result r = htp_balancer_step(b, planned, &plan);
  if (r != HTP_OK) return r;
  r = htp__balancer_apply(b, plan);
  if (r != HTP_OK) return r;
  if (times) *times = (htp_iteration_times){compute, hooks, planned};
  if (plan_out) *plan_out = plan;
  return HTP_OK;
}

/* ===== The hooks ========================================================= */

htp_result htp__balancer_check_pair(htp_ctx *ctx, const htp_balancer *b, htp_pair_kind kind,
                                    int32_t pair, int64_t units, int64_t width,
                                    int64_t model_dim, const char *hook) {
  const htp_balancer_config *c = &b->config;
  const int config_units = c->planner.units_per_rank[kind];
  const char *unit = kind == HTP_PAIR_ATTENTION ? "head" : "MLP unit";
  HTP__INVALID_IF(ctx, pair < 0 || pair >= b->num_pairs,
                  "%s: pair %d is out of range [0, %d) (2 * layers of the balancer's config)", hook,
                  (int)pair, b->num_pairs);
  HTP__INVALID_IF(ctx, htp_pair_kind_of(pair) != kind,
                  "%s: pair %d is %s pair (pairs of this hook are %s)", hook, (int)pair,
                  kind == HTP_PAIR_ATTENTION ? "an MLP" : "an attention",
                  kind == HTP_PAIR_ATTENTION ? "even" : "odd");
  HTP__INVALID_IF(
      ctx, units != config_units || width != htp__unit_width(c, kind) || model_dim != c->model_dim,
      "%s: pair %d: %lld %ss of width %lld, model_dim %lld disagree with the "
      "balancer's %d of %lld, %lld",
      hook, (int)pair, (long long)units, unit, (long long)width, (long long)model_dim, config_units,
      (long long)htp__unit_width(c, kind), (long long)c->model_dim);
  return HTP_OK;
}


/* kept plus pruned units in ascending order (both lists are ascending). */
static int merge_units(const htp_unit_sets *s, int32_t *out) {
  int i = 0, j = 0, n = 0;
  while (i < s->num_kept || j < s->num_pruned) {
    if (j == s->num_pruned || (i < s->num_kept && s->kept[i] < s->pruned[j])) out[n++] = s->kept[i++];
    else out[n++] = s->pruned[j++];
  }
  return n;
}

/* Adds the migrated-in units' contributions to call->y from the packed
 * blocks: per block of n units, one activation call over all n (unit list
 * 0 .. n-1 of an n-unit shard) into call->act, which the rank's own units
 * no longer need once projected and which holds n <= units_per_rank units'
 * columns, then one row-parallel linear over the n units (one GEMM). */
static htp_kernel_status add_in_units_packed(const htp_balancer *b, const pair_call *call) {
  const htp__packed_pair *pk = &b->packed[call->pair];
  const int64_t parts = htp__unit_parts(call->kind), d = call->model_dim, width = call->width;
  const int64_t per_unit = htp__unit_floats(&b->config, call->kind);
  const int32_t zero = 0;
  const float *block = pk->device ? pk->device : pk->data; /* the device's copy on a device */
  htp_kernel_status status = HTP_KERNEL_OK;
  for (int i0 = 0; i0 < pk->count && status == HTP_KERNEL_OK; i0 += (int)call->units) {
    const int64_t n = pk->count - i0 < call->units ? pk->count - i0 : call->units;
    const int64_t inner = n * width;
    const float *first = block, *bias = first + parts * inner * d;
    const float *second = bias + parts * inner;
    status = PAIR_OPS[call->kind].activate(call, first, bias, n, b->iota, n, call->act);
    if (status == HTP_KERNEL_OK) /* the n units' columns are contiguous: one block of inner */
      status = call->kernels->linear_units_f32(call->env, call->act, second, call->y, call->rows,
                                               inner, d, inner, &zero, 1, 1);
    block += n * per_unit;
  }
  return status;
}

/* The same from the cached one-unit shards, one unit at a time (tests:
 * htp__balancer_set_one_by_one). */
static htp_kernel_status add_in_units_one_by_one(const htp_balancer *b, const pair_call *call,
                                                 const htp_unit_sets *s) {
  const int64_t parts = htp__unit_parts(call->kind);
  const int64_t first_floats = parts * call->width * call->model_dim;
  const int32_t zero = 0;
  htp_kernel_status status = HTP_KERNEL_OK;
  if (on_device(b)) return HTP_KERNEL_ERR_UNSUPPORTED; /* the cached shards are host memory */
  for (int i = 0; i < s->num_in && status == HTP_KERNEL_OK; ++i) {
    const float *shard = htp_migration_weights(b->migration, call->pair, s->in_src[i],
                                               s->in_unit[i]);
    if (!shard) return HTP_KERNEL_ERR_INVALID; /* packing found them all at the apply */
    const float *first_1 = shard, *bias_1 = shard + first_floats;
    const float *second_1 = bias_1 + parts * call->width;
    status = PAIR_OPS[call->kind].activate(call, first_1, bias_1, 1, &zero, 1, call->migrated);
    if (status == HTP_KERNEL_OK)
      status = call->kernels->linear_units_f32(call->env, call->migrated, second_1, call->y,
                                               call->rows, call->width, call->model_dim,
                                               call->width, &zero, 1, 1);
  }
  return status;
}

/* The kept and migrated-in units as one compact shard (htp__shard) in
 * balancer memory: the kept units' weights gathered, the packed in-units'
 * copied after them, one activation call over all of them and one
 * row-parallel GEMM. A straggler whose kept units are scattered (pruning
 * picks units by score, not position) would otherwise run one GEMM per run
 * of consecutive units, each reading and writing all of y, and a helper
 * one more activation and GEMM per packed block: at small units those
 * fixed costs outweigh the units' own work, so shedding units saved little
 * and a helper's first migrated unit cost it a third more. Copying the
 * weights costs a fraction 1 / rows of the GEMMs. Only where no pruned
 * unit is imputed (zero, or same with no recent value: average and same
 * project imputed columns of the rank's own layout), on the CPU (host loops
 * copy the weights). */
static htp_kernel_status compute_compact(htp_balancer *b, const pair_call *call,
                                         const htp_unit_sets *s) {
  const htp__unit_shape u = {htp__unit_parts(call->kind), call->width, call->model_dim};
  const int64_t total = s->num_kept + b->packed[call->pair].count, inner = total * call->width;
  const int32_t zero = 0;
  const htp__shard mine = {(float *)call->first, (float *)call->bias, (float *)call->second,
                           call->units};
  htp__shard w;
  if (htp__balancer_compact_weights(b, call->pair, &mine, s->kept, s->num_kept, &u, &w) ||
      htp__reserve_floats(&b->compact_scratch, &b->compact_scratch_capacity,
                          (size_t)(call->rows * inner)))
    return HTP_KERNEL_ERR_NOMEM;
  float *act = b->compact_scratch;
  htp_kernel_status status = HTP_KERNEL_OK;
  if (total > 0)
    status = PAIR_OPS[call->kind].activate(call, w.first, w.bias, total, NULL, 0, act);
  if (status != HTP_KERNEL_OK) return status;
  htp__scores_observe(b, call->pair, s, act, call->rows, call->width, inner, 1);
  return call->kernels->linear_units_f32(call->env, act, w.second, call->y, call->rows, inner,
                                         call->model_dim, inner, &zero, total > 0, 0);
}

/* The body both hooks share, after each checked its own arguments: the
 * plain split block without a (hooked) balancer; otherwise check the pair
 * and shapes against the balancer, register the weights, compute the kept
 * units, score them, impute the pruned ones, project, add the migrated-in
 * units from their packed blocks, and book the time (slowdown included). */
static htp_result run_pair(htp_ctx *ctx, const pair_call *call, double started) {
  const pair_ops *ops = &PAIR_OPS[call->kind];
  const int64_t inner = call->units * call->width;
  const int32_t zero = 0;
  htp_balancer *b = ctx ? ctx->balancer : NULL;
  htp_kernel_status status;
  if (!b || b->hookless || b->suspended) { /* the plain split block: every unit */
    status = ops->activate(call, call->first, call->bias, call->units, NULL, 0, call->act);
    if (status == HTP_KERNEL_OK)
      status = call->kernels->linear_units_f32(call->env, call->act, call->second, call->y,
                                               call->rows, inner, call->model_dim, inner,
                                               &zero, 1, 0);
    return status == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed(ctx, status, ops->hook);
  }

  const htp_balancer_config *c = &b->config;
  const int32_t pair = call->pair;
  htp_result checked = htp__balancer_check_pair(ctx, b, call->kind, pair, call->units,
                                                call->width, call->model_dim, ops->hook);
  if (checked != HTP_OK) return checked;
  htp__registered_pair *w = &b->pairs[pair];
  w->first = call->first;
  w->bias = call->bias;
  w->second = call->second;
  w->seen = 1;
  if (b->norm && w->normed != call->second)
    htp__scores_norms(b, call->pair, call->second, call->units, call->width, call->model_dim);
  htp_unit_sets s;
  if (htp_unit_table_get(b->table, pair, &s) != HTP_OK)
    return htp__fail(ctx, HTP_ERR_INTERNAL, "%s: no unit sets for pair %d", ops->hook, (int)pair);

  HTP__INVALID_IF(ctx, b->packed[pair].count != s.num_in,
                  "%s: pair %d: %d migrated-in %ss packed, the unit table has %d", ops->hook,
                  (int)pair, b->packed[pair].count, ops->unit, s.num_in);
  /* The pruned units given a value: all of them (average), those with a
   * recent stored value (same), none (zero). */
  htp_unit_sets imputed = s;
  if (c->impute == HTP_IMPUTE_ZERO) imputed.num_pruned = 0;
  if (c->impute == HTP_IMPUTE_SAME) {
    imputed.num_pruned = 0;
    imputed.pruned = b->imputed;
    for (int i = 0; i < s.num_pruned; ++i)
      if (htp_same_usable(htp_imputer_stored_at(b->imputer, pair, s.pruned[i]), b->steps,
                          c->same_max_age))
        b->imputed[imputed.num_pruned++] = s.pruned[i];
  }
  if (!timed_on_device(call) && !b->one_by_one && imputed.num_pruned == 0 &&
      (s.num_kept < call->units || s.num_in > 0)) {
    status = compute_compact(b, call, &s);
    if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, ops->hook);
    if (c->impute == HTP_IMPUTE_SAME) { /* the kept units' activations lead the compact ones */
      htp_result r = htp_imputer_store_listed(b->imputer, pair, b->compact_scratch,
                                              (size_t)call->rows,
                                              (size_t)((s.num_kept + s.num_in) * call->width),
                                              s.units, (size_t)call->width, s.kept, s.num_kept,
                                              b->steps);
      if (r != HTP_OK)
        return htp__fail(ctx, r, "%s: pair %d: imputation failed", ops->hook, (int)pair);
    }
    return finish_site(ctx, b, call, &s, started);
  }
  if (timed_on_device(call)) { /* the device's clock starts with the hook's first kernel */
    htp_result r = htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_HOOKS, 0);
    if (r != HTP_OK) return r;
  }
  status = ops->activate(call, call->first, call->bias, call->units, s.kept, s.num_kept,
                         call->act);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, ops->hook);
  htp__scores_observe(b, call->pair, &s, call->act, call->rows, call->width,
                      call->units * call->width, 0);
  const int32_t *projected = s.kept;
  int num_projected = s.num_kept;
  if (c->impute != HTP_IMPUTE_ZERO) {
    htp_result r = HTP_OK;
    if (c->impute == HTP_IMPUTE_SAME)
      r = htp_imputer_store(b->imputer, pair, call->act, (size_t)call->rows, (size_t)inner,
                            s.units, (size_t)call->width, &s, b->steps);
    if (r == HTP_OK)
      r = htp_impute_fill(b->imputer, pair, c->impute, call->act, (size_t)call->rows,
                          (size_t)inner, s.units, (size_t)call->width, &imputed, b->steps,
                          c->same_max_age);
    if (r != HTP_OK)
      return htp__fail(ctx, r, "%s: pair %d: imputation failed", ops->hook, (int)pair);
    num_projected = merge_units(&imputed, b->listed);
    projected = b->listed;
  }
  status = call->kernels->linear_units_f32(call->env, call->act, call->second, call->y,
                                           call->rows, inner, call->model_dim, call->width,
                                           projected, num_projected, 0);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, ops->hook);

  /* Migrated-in units: packed blocks (or one at a time, tests). The apply
   * packed exactly the table's in-units, each cached here. */
  status = b->one_by_one ? add_in_units_one_by_one(b, call, &s)
                         : add_in_units_packed(b, call);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, ops->hook);
  return finish_site(ctx, b, call, &s, started);
}

htp_result htp_rt_attention_f32(htp_ctx *ctx, int32_t pair, const float *x, const float *wqkv,
                                const float *bqkv, const float *wproj, float *y, float *scratch,
                                int64_t batch, int64_t tokens, int64_t model_dim,
                                int64_t num_heads, int64_t head_dim) {
  const char *what = PAIR_OPS[HTP_PAIR_ATTENTION].hook;
  const double started = htp__hook_now(ctx);
  HTP__INVALID_IF(ctx, !x || !wqkv || !wproj || !y || !scratch,
                  "%s: pair %d: x, wqkv, wproj, y or scratch is NULL", what, (int)pair);
  HTP__INVALID_IF(ctx, batch < 1 || tokens < 1 || model_dim < 1 || num_heads < 1 || head_dim < 1,
                  "%s: pair %d: batch %lld, tokens %lld, model_dim %lld, num_heads %lld, head_dim "
                  "%lld must all be >= 1",
                  what, (int)pair, (long long)batch, (long long)tokens, (long long)model_dim,
                  (long long)num_heads, (long long)head_dim);
  HTP__INVALID_IF(ctx,
                  batch > INT_MAX / tokens || tokens > INT_MAX / tokens || model_dim > INT_MAX ||
                      num_heads > INT_MAX / 3 / head_dim,
                  "%s: pair %d: a dimension exceeds BLAS's int range", what, (int)pair);
  const int64_t rows = batch * tokens, inner = num_heads * head_dim;
  /* scratch: context [rows, inner], one migrated head [rows, head_dim],
   * then the head kernel's own (htp_rt_attention_scratch_floats). */
  const pair_call call = {
      .kind = HTP_PAIR_ATTENTION, .pair = pair, .x = x, .first = wqkv, .bias = bqkv,
      .second = wproj, .y = y, .act = scratch, .migrated = scratch + rows * inner,
      .kernel_scratch = scratch + rows * inner + rows * head_dim, .batch = batch,
      .tokens = tokens, .rows = rows, .model_dim = model_dim, .units = num_heads,
      .width = head_dim, .tanh_approx = 0, .kernels = htp__kernel_table(ctx),
      .env = htp__kernel_env(ctx)};
  return run_pair(ctx, &call, started);
}

htp_result htp_rt_mlp_f32(htp_ctx *ctx, int32_t pair, const float *x, const float *w1,
                          const float *b1, const float *w2, float *y, float *scratch,
                          int64_t rows, int64_t model_dim, int64_t hidden_dim,
                          int64_t unit_width, int32_t tanh_approx) {
  const char *what = PAIR_OPS[HTP_PAIR_MLP].hook;
  const double started = htp__hook_now(ctx);
  HTP__INVALID_IF(ctx, !x || !w1 || !w2 || !y || !scratch,
                  "%s: pair %d: x, w1, w2, y or scratch is NULL", what, (int)pair);
  HTP__INVALID_IF(ctx, rows < 1 || model_dim < 1 || hidden_dim < 1 || unit_width < 1,
                  "%s: pair %d: rows %lld, model_dim %lld, hidden_dim %lld, unit_width %lld must "
                  "all be >= 1",
                  what, (int)pair, (long long)rows, (long long)model_dim, (long long)hidden_dim,
                  (long long)unit_width);
  HTP__INVALID_IF(ctx, hidden_dim % unit_width != 0,
                  "%s: pair %d: hidden_dim %lld is not a multiple of unit_width %lld", what,
                  (int)pair, (long long)hidden_dim, (long long)unit_width);
  HTP__INVALID_IF(ctx, rows > INT_MAX || model_dim > INT_MAX || hidden_dim > INT_MAX,
                  "%s: pair %d: a dimension exceeds BLAS's int range", what, (int)pair);
  /* scratch: hidden [rows, hidden_dim], one migrated unit [rows, unit_width]. */
  const pair_call call = {.kind = HTP_PAIR_MLP,
                          .pair = pair,
                          .x = x,
                          .first = w1,
                          .bias = b1,
                          .second = w2,
                          .y = y,
                          .act = scratch,
                          .migrated = scratch + rows * hidden_dim,
                          .kernel_scratch = NULL,
                          .batch = 1,
                          .tokens = rows,
                          .rows = rows,
                          .model_dim = model_dim,
                          .units = hidden_dim / unit_width,
                          .width = unit_width,
                          .tanh_approx = tanh_approx,
                          .kernels = htp__kernel_table(ctx),
                          .env = htp__kernel_env(ctx)};
  return run_pair(ctx, &call, started);
}
