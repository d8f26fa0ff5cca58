/*===- runtime/balancer.c - the balancer: config, create, destroy ----------===*
 *
 * The run-time half of heterogeneous tensor parallelism (DESIGN §4). The
 * balancer ties together what the planner region provides for one rank:
 * planner (how many units), unit table (which ones), imputer (values of
 * pruned units) and migration cache (weights of units computed for others).
 * This file makes and unmakes it: the config checks, the state a balancer
 * with hooks allocates for them (a hookless one only steps and traces), the
 * accessors and htp_balancer_suspend. What the balancer does lives by
 * concern (struct htp_balancer: balance_internal.h):
 *   balance_hooks.c  the hooks compiled blocks call in place of the plain
 *                    attention and MLP kernels, forward and backward;
 *   unit_weights.c   the weights a plan moves: the one-unit shards the
 *                    migration sends, a helper's packed blocks of the units
 *                    it took in, and the apply of a plan;
 *   site_timing.c    the hooks' clock, --slow, and htp_balancer_end_iteration;
 *   balancer_step.c  htp_balancer_step: gather, detect, plan, trace;
 *   unit_scores.c    which units a plan sheds first.
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"

#include "kernels/htp_kernel_table.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

int64_t htp_balancer_unit_bytes(const htp_balancer_config *config, htp_pair_kind kind) {
  return config ? htp__unit_bytes(config, kind) : 0;
}

/* ===== Lifecycle ========================================================= */

static int is_hookless(const htp_balancer_config *c) {
  return c->model_dim == 0 && c->head_dim == 0 && c->mlp_unit_width == 0;
}

htp_result htp_balancer_config_check(const htp_balancer_config *c, char *why, size_t why_size) {
#define REJECT(...)                                                                       \
  do {                                                                                    \
    if (why && why_size) snprintf(why, why_size, __VA_ARGS__);                            \
    return HTP_ERR_INVALID;                                                               \
  } while (0)
  if (!c) REJECT("config is NULL");
  if (c->magic != HTP_BALANCER_CONFIG_MAGIC)
    REJECT("config.magic is 0x%08x, not HTP_BALANCER_CONFIG_MAGIC (start from "
           "HTP_BALANCER_CONFIG_INITIALIZER)",
           (unsigned)c->magic);
  char planner_why[HTP__MESSAGE_SIZE - 64];
  if (htp_planner_config_check(&c->planner, planner_why, sizeof planner_why) != HTP_OK)
    REJECT("config.planner: %s", planner_why);
  if (c->selection < HTP_SELECT_RANDOM || c->selection > HTP_SELECT_DISPLACEMENT)
    REJECT("unknown selection %d", (int)c->selection);
  if (c->impute < HTP_IMPUTE_ZERO || c->impute > HTP_IMPUTE_AVERAGE)
    REJECT("unknown impute %d", (int)c->impute);
  if (c->same_max_age < 0) REJECT("same_max_age %lld is negative", (long long)c->same_max_age);
  if (c->element_bytes != 0 && c->element_bytes != 4 && c->element_bytes != 2)
    REJECT("element_bytes %d is not 4 (f32) or 2 (bf16)", (int)c->element_bytes);
  if (!(c->repartition_ratio >= 0.0) || c->repartition_ratio > 1e12)
    REJECT("repartition_ratio %.17g is not in [0, 1e12]", c->repartition_ratio);
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

/* The config's own checks, then what it must agree with in ctx: the world
 * size, and what the context's device can run. */
static htp_result check_config(htp_ctx *ctx, const htp_balancer_config *c) {
#define REJECT(...) return htp__ctx_error(ctx, HTP_ERR_INVALID, "htp_balancer_create: " __VA_ARGS__)
  char why[HTP__MESSAGE_SIZE - 64];
  if (htp_balancer_config_check(c, why, sizeof why) != HTP_OK) REJECT("%s", why);
  if (c->planner.world_size != htp_ctx_size(ctx))
    REJECT("config.planner.world_size is %d, the context's world has %d ranks",
           c->planner.world_size, htp_ctx_size(ctx));
  /* Importance scores and the same/average imputation read activations and
   * weights with the host's loops: on a device those are device memory. */
  const htp_kernel_table *table = htp__kernel_table(ctx);
  if (table->device != HTP_KERNEL_DEVICE_CPU &&
      (c->selection != HTP_SELECT_RANDOM || c->impute != HTP_IMPUTE_ZERO))
    REJECT("on the %s device only random selection and zero imputation run yet (importance, "
           "variation and the same/average imputation read device memory on the host); asked: "
           "select %s, impute %s",
           table->name, htp_select_name(c->selection), htp_impute_name(c->impute));
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
      (size_t)htp_balancer_unit_bytes(config, HTP_PAIR_ATTENTION),
      (size_t)htp_balancer_unit_bytes(config, HTP_PAIR_MLP)};
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
  if (r == HTP_OK) r = htp__partition_init(b);
  return r;
}

/* FNV-1a over a config's bytes that every rank must share, field by field
 * (no padding, no pointers: the owned arrays by their contents), folded to
 * 52 bits so that a double carries it exactly through the step's
 * all-gather. */
static uint64_t fnv(uint64_t h, const void *bytes, size_t size) {
  for (size_t i = 0; i < size; ++i) h = (h ^ ((const unsigned char *)bytes)[i]) * 0x100000001b3ULL;
  return h;
}
#define FNV_FIELD(h, field) fnv((h), &(field), sizeof(field))
/* A double by value: -0.0 and 0.0 are one config. */
static uint64_t fnv_double(uint64_t h, double x) {
  const double value = x == 0.0 ? 0.0 : x;
  return fnv(h, &value, sizeof value);
}
static double config_fingerprint(const htp_balancer_config *c) {
  const htp_planner_config *p = &c->planner;
  uint64_t h = 0xcbf29ce484222325ULL;
  h = FNV_FIELD(h, p->world_size);
  h = FNV_FIELD(h, p->num_layers);
  h = FNV_FIELD(h, p->units_per_rank);
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) h = fnv_double(h, p->unit_cost[k]);
  h = FNV_FIELD(h, p->policy);
  h = fnv_double(h, p->ewma_alpha);
  h = fnv_double(h, p->enter_threshold);
  h = fnv_double(h, p->exit_threshold);
  h = FNV_FIELD(h, p->hysteresis_iters);
  h = fnv_double(h, p->resize_limit);
  h = fnv_double(h, p->replan_delta);
  h = fnv_double(h, p->max_gamma);
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    for (int r = 0; r < p->world_size; ++r) {
      const int32_t owned = htp_config_owned(p, (htp_pair_kind)k, r);
      h = FNV_FIELD(h, owned);
    }
  h = FNV_FIELD(h, c->selection);
  h = FNV_FIELD(h, c->seed);
  h = FNV_FIELD(h, c->impute);
  h = FNV_FIELD(h, c->model_dim);
  h = FNV_FIELD(h, c->head_dim);
  h = FNV_FIELD(h, c->mlp_unit_width);
  h = FNV_FIELD(h, c->same_max_age);
  h = fnv_double(h, c->repartition_ratio);
  const int32_t element_bytes = c->element_bytes ? c->element_bytes : 4;
  h = FNV_FIELD(h, element_bytes);
  return (double)(h >> 12);
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
  b->fingerprint = config_fingerprint(config);
  b->hookless = is_hookless(config);
  b->num_pairs = htp_num_pairs(config->planner.num_layers);
  b->applied_version = 0; /* the initial plan keeps every unit: the table starts so */
  b->slowdown = 1.0;
  b->clock = HTP_CLOCK_WALL;
  b->comm_at_last_line = htp_ctx_comm_seconds(ctx);
  const size_t n = (size_t)config->planner.world_size;
  b->gather = calloc(n * HTP__STEP_RECORD_DOUBLES, sizeof *b->gather);
  b->normalized = calloc(n, sizeof *b->normalized);
  /* The owned units (uneven shares) are copied: the table and the
   * migration read them for the balancer's life, not the caller's. */
  const int uneven = config->planner.owned[0] || config->planner.owned[1];
  if (uneven && (b->owned = malloc(n * HTP_PAIR_KINDS * sizeof *b->owned)))
    for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
      for (size_t i = 0; i < n; ++i)
        b->owned[k * n + i] = htp_config_owned(&config->planner, (htp_pair_kind)k, (int)i);
      b->config.planner.owned[k] = b->owned + k * n;
    }
  int model = htp__site_model_init(&b->site_model, &b->config.planner);
  r = b->gather && b->normalized && model == 0 && (!uneven || b->owned) ? HTP_OK : HTP_ERR_NOMEM;
  if (r == HTP_OK) r = htp_planner_create(&b->config.planner, &b->planner);
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
  htp__partition_free(b);
  free(b->owned);
  if (b->packed)
    for (int p = 0; p < b->num_pairs; ++p) {
      free(b->packed[p].data);
      if (b->ctx) htp__balancer_release(b, b->packed[p].device);
    }
  free(b->packed);
  free(b->pairs);
  free(b->listed);
  free(b->iota);
  free(b->imputed);
  htp__scores_free(b);
  /* The backward hooks' state (balance_hooks.c). */
  if (b->same_part)
    for (int p = 0; p < b->num_pairs; ++p) free(b->same_part[p]);
  free(b->same_part);
  free(b->same_floats);
  free(b->same_stored_at);
  free(b->grad_out);
  if (b->ctx) {
    htp__balancer_release(b, b->compact_w);
    htp__balancer_release(b, b->compact_dw);
    htp__balancer_release(b, b->compact_scratch);
    htp__balancer_release(b, b->unit_device);
  }
  free(b->unit_staging);
  free(b->act_f32);
  free(b->gather);
  free(b->normalized);
  htp__site_model_free(&b->site_model);
  free(b);
}

htp_balancer *htp_ctx_balancer(const htp_ctx *ctx) { return ctx ? ctx->balancer : NULL; }
htp_planner *htp_balancer_planner(htp_balancer *b) { return b ? b->planner : NULL; }
htp_unit_table *htp__balancer_table(htp_balancer *b) { return b ? b->table : NULL; }
htp_migration *htp__balancer_migration(htp_balancer *b) { return b ? b->migration : NULL; }

htp_result htp_balancer_suspend(htp_balancer *b, int suspended) {
  if (!b) return HTP_ERR_INVALID;
  b->suspended = suspended != 0;
  return HTP_OK;
}
