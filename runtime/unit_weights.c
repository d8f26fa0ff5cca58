/*===- runtime/unit_weights.c - the weights a plan moves -------------------===*
 *
 * What becomes of units' weights when the balancer applies a plan
 * (htp__balancer_apply: at a plan change, or after
 * htp_balancer_weights_updated said the optimizer changed them). The scores
 * so far decide the shed sets (unit_scores.c); the migration (migrate.c)
 * sends each handed-off unit's weights as a one-unit shard, which pack_unit
 * cuts from the weights the pair's forward hook registered
 * (htp__registered_pair, on every call); and a helper packs the units it
 * took in into blocks its hooks compute from.
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
 * (balance_internal.h, htp__packed_pair), uploaded on a device. The hooks
 * (balance_hooks.c) run each block as one call, or copy the blocks after
 * their kept units into one compact shard (htp__balancer_compact_weights).
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"

#include "kernels/htp_kernel_table.h"

#include <stdlib.h>
#include <string.h>

/* ===== Migration: packing one unit from the registered weights ========== */

/* Whether the context's kernels (and so the registered weights) live on a
 * device rather than in host memory. */
static int on_device(const htp_balancer *b) {
  return htp__kernel_table(b->ctx)->device != HTP_KERNEL_DEVICE_CPU;
}

/* The shard layout at the top of this file, for either kind, cut from the
 * registered weights: on a device cut there and copied down in one piece
 * (once per plan change, or per step in training). */
static int pack_unit(void *user, int pair, int unit, void *dst) {
  htp_balancer *b = user;
  const htp_balancer_config *c = &b->config;
  if (pair < 0 || pair >= b->num_pairs) return -1;
  if (!b->pairs[pair].seen)
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID,
                          "migration: the plan hands off unit %d of pair %d, whose forward hook "
                          "has not run on this rank (its weights are known from the hook's "
                          "call): call every pair's hook before the first htp_balancer_step",
                          unit, pair);
  const htp_pair_kind kind = htp_pair_kind_of(pair);
  const int units = c->planner.units_per_rank[kind];
  if (unit < 0 || unit >= units) return -1;
  const htp__registered_pair *w = &b->pairs[pair];
  const htp__unit_shape u = {htp__unit_parts(kind), htp__unit_width(c, kind), c->model_dim,
                             htp__element_bytes(c)};
  const htp__shard mine = {(void *)w->first, (void *)w->bias, (void *)w->second, units};
  const size_t bytes = (size_t)htp__unit_bytes(c, kind);
  const htp__unit_mover memory = htp__balancer_memory(b);
  void *one = dst;
  if (on_device(b)) {
    if (htp__balancer_reserve(b, &b->unit_device, &b->unit_device_capacity,
                              htp_balancer_shard_words(1, u.parts, u.width, u.d, u.elem)))
      return htp__ctx_error(b->ctx, HTP_ERR_NOMEM, "migration: no device memory to pack unit "
                            "%d of pair %d", unit, pair);
    one = b->unit_device;
  }
  const htp__shard out = htp__shard_at(one, 1, &u);
  if (htp__move_units(&memory, &mine, unit, &out, 0, 1, &u) != HTP_KERNEL_OK) return -1;
  if (on_device(b) && htp_mem_download(b->ctx, dst, b->unit_device, bytes) != HTP_OK)
    return -1;
  return 0;
}

/* On a device, pair pk's host blocks uploaded for the hooks (the buffer
 * grows and is kept, as the host one). */
static htp_result upload_packed(htp_balancer *b, int pair, htp__packed_pair *pk, size_t bytes) {
  if (!on_device(b) || bytes == 0) return HTP_OK;
  if (htp__balancer_reserve(b, &pk->device, &pk->device_capacity, htp_balancer_words((int64_t)bytes, 1)))
    return htp__ctx_error(b->ctx, HTP_ERR_NOMEM, "htp_balancer: pair %d: no device memory for "
                          "%zu bytes of migrated units", pair, bytes);
  return htp_mem_upload(b->ctx, pk->device, pk->data, bytes);
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
    const htp__unit_shape u = {parts, width, d, htp__element_bytes(c)};
    const size_t need = (size_t)s.num_in * (size_t)per_unit * (size_t)u.elem; /* bytes */
    if (need > pk->capacity) {
      unsigned char *grown = realloc(pk->data, need);
      if (!grown)
        return htp__ctx_error(b->ctx, HTP_ERR_NOMEM,
                              "htp_balancer: pair %d: out of memory packing %d migrated units", p,
                              s.num_in);
      pk->data = grown;
      pk->capacity = need;
    }
    unsigned char *block = pk->data;
    for (int i0 = 0; i0 < s.num_in; i0 += (int)cap) {
      const int64_t n = s.num_in - i0 < cap ? s.num_in - i0 : cap;
      const htp__shard packed = htp__shard_at(block, n, &u);
      for (int64_t j = 0; j < n; ++j) {
        const int src = s.in_src[i0 + j], unit = s.in_unit[i0 + j];
        const void *cached = htp_migration_weights(b->migration, p, src, unit);
        if (!cached)
          return htp__ctx_error(b->ctx, HTP_ERR_INTERNAL,
                                "htp_balancer: pair %d: the weights of rank %d's %s %d are not "
                                "cached here",
                                p, src, kind == HTP_PAIR_ATTENTION ? "head" : "MLP unit", unit);
        const htp__shard one = htp__shard_at((void *)cached, 1, &u);
        htp__copy_unit(&one, 0, &packed, j, &u);
      }
      block += n * per_unit * u.elem;
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
  if (htp__balancer_reserve(b, &b->compact_w, &b->compact_w_capacity,
                            htp_balancer_shard_words(total, u->parts, u->width, u->d, u->elem)))
    return -1;
  *out = htp__shard_at(b->compact_w, total, u);
  const htp__unit_mover memory = htp__balancer_memory(b);
  htp_kernel_status s = htp__gather_units_on(&memory, mine, list, count, out, 0, u);
  unsigned char *block = on_device(b) ? (unsigned char *)pk->device : pk->data;
  for (int i0 = 0; s == HTP_KERNEL_OK && i0 < pk->count; i0 += (int)cap) { /* the blocks, in order */
    const int64_t n = pk->count - i0 < cap ? pk->count - i0 : cap;
    const htp__shard packed = htp__shard_at(block, n, u);
    s = htp__move_units(&memory, &packed, 0, out, count + i0, n, u);
    block += n * per_unit * u->elem;
  }
  return s == HTP_KERNEL_OK ? 0 : -1;
}

htp__unit_mover htp__balancer_memory(const htp_balancer *b) {
  if (!on_device(b)) return (htp__unit_mover){NULL, NULL};
  return (htp__unit_mover){htp__kernel_table(b->ctx), htp__kernel_env(b->ctx)};
}

int htp__balancer_reserve(htp_balancer *b, float **buffer, size_t *capacity, int64_t words) {
  if (words < 0) return -1;
  const size_t floats = (size_t)words;
  if (!on_device(b)) return htp__reserve_floats(buffer, capacity, floats);
  if (floats <= *capacity) return 0;
  htp__balancer_release(b, *buffer);
  *buffer = NULL;
  *capacity = 0;
  void *grown = NULL;
  if (htp_mem_alloc(b->ctx, floats * sizeof(float), &grown) != HTP_OK) return -1;
  *buffer = grown;
  *capacity = floats;
  return 0;
}

uint64_t htp_balancer_device_bytes(const htp_balancer *b) {
  if (!b || b->hookless || !on_device(b)) return 0;
  uint64_t floats = b->compact_w_capacity + b->compact_dw_capacity +
                    b->compact_scratch_capacity + b->unit_device_capacity;
  for (int p = 0; p < b->num_pairs; ++p) floats += b->packed[p].device_capacity;
  return floats * sizeof(float);
}

void htp__balancer_release(htp_balancer *b, float *buffer) {
  if (!on_device(b)) free(buffer);
  else if (buffer) htp_mem_free(b->ctx, buffer);
}

void htp__balancer_set_one_by_one(htp_balancer *b, int one_by_one) {
  if (b) b->one_by_one = one_by_one != 0;
}

int htp__balancer_packed_units(const htp_balancer *b, int pair) {
  if (!b || b->hookless || pair < 0 || pair >= b->num_pairs) return -1;
  return b->packed[pair].count;
}

/* ===== Applying a plan ================================================= */

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

/* ===== Weights the optimizer changed ===================================== */

htp_result htp_balancer_weights_updated(htp_balancer *b) {
  if (!b) return HTP_ERR_INVALID;
  if (b->hookless) return HTP_OK;
  b->weights_stale = 1; /* migrated copies go out again at the next apply */
  return htp__scores_sample(b);
}
