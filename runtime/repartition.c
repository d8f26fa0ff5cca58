/*===- runtime/repartition.c - run-time ownership: moving units for good ---===*
 *
 * DESIGN §12. A migration lends a straggler's units to helpers for as long
 * as its plan holds; in training that costs the units' weights out and
 * their gradients back every step. A re-partition gives them away: each
 * moved unit's weights and the buffers registered beside them (optimizer
 * moments, htp_balancer_add_state) go once into an empty slot of the
 * helper, the old slot is zeroed, and from then on the helper owns the
 * unit: its hooks compute it as their own, its optimizer updates it, and
 * nothing crosses per step.
 *
 * The choice is rent or buy (htp.h, repartition_ratio): weigh adds up the
 * bytes the same ranks' migration moves a step, predicted from the plan's
 * flows, and re-partitions when the sum reaches ratio x what a
 * re-partition moves once. Every rank weighs the same plans with the same
 * numbers, so every rank decides alike and no decision travels.
 *
 * Slots: each rank's arguments have room for units_per_rank units of a
 * kind; it owns the first owned[kind][rank], the rest are zeros (uneven
 * shares or spare room). A move takes the migrator's LAST owned slots and
 * puts them in the helper's FIRST empty ones, so owned slots stay a prefix
 * (what the unit tables and the planner count with) and no other slot
 * moves. Every layer moves the same slots: ownership is per kind, and
 * slot_unit says which global unit each slot holds (for gathering a
 * checkpoint).
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"

#include <stdlib.h>
#include <string.h>

#define TAG_REPARTITION 0x5000 /* + kind: a move's units, weights then states */

htp_result htp__partition_init(htp_balancer *b) {
  htp__partition *P = &b->partition;
  const htp_planner_config *c = &b->config.planner;
  const int n = c->world_size;
  P->migrators = calloc((size_t)n, 1);
  P->owned = calloc((size_t)n * HTP_PAIR_KINDS, sizeof *P->owned);
  P->moves = calloc((size_t)n * HTP_PAIR_KINDS, sizeof *P->moves);
  if (!P->migrators || !P->owned || !P->moves) return HTP_ERR_NOMEM;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    const int room = c->units_per_rank[k];
    P->slot_unit[k] = malloc((size_t)n * (size_t)room * sizeof(int32_t));
    if (!P->slot_unit[k]) return HTP_ERR_NOMEM;
    int32_t next = 0; /* the compiled split: rank r's units follow rank r - 1's */
    for (int r = 0; r < n; ++r) {
      const int owned = htp_config_owned(c, (htp_pair_kind)k, r);
      for (int s = 0; s < room; ++s) P->slot_unit[k][(size_t)r * room + s] = s < owned ? next++ : -1;
    }
  }
  return HTP_OK;
}

void htp__partition_free(htp_balancer *b) {
  htp__partition *P = &b->partition;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) free(P->slot_unit[k]);
  free(P->states);
  free(P->migrators);
  free(P->owned);
  free(P->moves);
  free(P->staging);
  free(P->mirror);
  memset(P, 0, sizeof *P);
}

/* The moves that turn the plan's flows into ownership, kind k: each flow
 * moves as many units as its helper has empty slots for, and its migrator
 * keeps at least one. owned ([world]) is updated; returns the moves
 * written to moves ([world]: a kind has at most world flows). */
static int plan_moves(const htp_balancer *b, const htp_plan *plan, int k, int32_t *owned,
                      htp__unit_move *moves) {
  const int room = b->config.planner.units_per_rank[k];
  int count = 0;
  for (int f = 0; f < plan->num_flows[k]; ++f) {
    const htp_flow *flow = &plan->flows[k][f];
    int32_t units = flow->count;
    if (units > room - owned[flow->dst]) units = room - owned[flow->dst];
    if (units > owned[flow->src] - 1) units = owned[flow->src] - 1;
    if (units <= 0) continue;
    moves[count++] = (htp__unit_move){flow->src, flow->dst, units, owned[flow->src] - units,
                                 owned[flow->dst]};
    owned[flow->src] -= units;
    owned[flow->dst] += units;
  }
  return count;
}

/* How many states are registered for weight, and the s-th of them. */
static int count_states(const htp__partition *P, const void *weight) {
  int count = 0;
  for (int i = 0; weight && i < P->num_states; ++i) count += P->states[i].weight == weight;
  return count;
}
static float *nth_state(const htp__partition *P, const void *weight, int s) {
  for (int i = 0; weight && i < P->num_states; ++i)
    if (P->states[i].weight == weight && s-- == 0) return P->states[i].state;
  return NULL;
}

/* States per unit weight: what the first seen pair's first weight has. */
static int states_per_weight(const htp_balancer *b) {
  for (int p = 0; p < b->num_pairs; ++p)
    if (b->pairs[p].seen) return count_states(&b->partition, b->pairs[p].first);
  return 0;
}

void htp__partition_weigh(htp_balancer *b, const htp_plan *plan) {
  htp__partition *P = &b->partition;
  P->pending = 0;
  P->step_bytes = P->once_bytes = 0.0;
  /* Re-partition moves weights and their optimizer states as f32 shards:
   * training, which is f32 (a bf16 block's migration rents nothing anyway). */
  if (b->hookless || !(b->config.repartition_ratio > 0.0) || htp__element_bytes(&b->config) != 4)
    return;
  const htp_planner_config *c = &b->config.planner;
  const int n = c->world_size;
  if (plan->num_flows[HTP_PAIR_ATTENTION] + plan->num_flows[HTP_PAIR_MLP] == 0) {
    P->held = 0;
    P->spent_bytes = 0.0;
    return;
  }
  int same = P->held > 0;
  for (int r = 0; r < n; ++r) {
    const uint8_t migrates = plan->action[r] == HTP_ACTION_MIGRATE;
    same = same && P->migrators[r] == migrates;
    P->migrators[r] = migrates;
  }
  if (!same) {
    P->held = 0;
    P->spent_bytes = 0.0;
  }
  /* A step of migration in training: each unit's weights out (they changed)
   * and its gradient back. In inference helpers keep what they were sent.
   * Only the units a re-partition can move count (a helper without empty
   * slots keeps renting whatever is bought). */
  const double per_step = b->weights_stale ? 2.0 : 0.0;
  const double carried = 1.0 + states_per_weight(b);
  int32_t *owned = P->owned;
  htp__unit_move *moves = P->moves;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    const double unit_bytes = (double)htp__unit_floats(&b->config, (htp_pair_kind)k) *
                              (double)sizeof(float) * c->num_layers;
    int64_t moved = 0;
    for (int r = 0; r < n; ++r) owned[r] = htp_config_owned(c, (htp_pair_kind)k, r);
    const int count = plan_moves(b, plan, k, owned, moves);
    for (int i = 0; i < count; ++i) moved += moves[i].count;
    P->step_bytes += per_step * (double)moved * unit_bytes;
    P->once_bytes += carried * (double)moved * unit_bytes;
  }
  P->held++;
  P->spent_bytes += P->step_bytes;
  P->pending = P->held >= c->hysteresis_iters && P->once_bytes > 0.0 &&
               P->spent_bytes >= b->config.repartition_ratio * P->once_bytes;
}

/* The pair's own shard of weights (s = -1) or of its s-th states, as a
 * shard of room units (the layout of balance_internal.h); -1 when its
 * weights do not all have `states` states. */
static int pair_shard(htp_balancer *b, int p, int s, int states, htp__shard *out) {
  const htp__registered_pair *w = &b->pairs[p];
  const htp__partition *P = &b->partition;
  const int room = b->config.planner.units_per_rank[htp_pair_kind_of(p)];
  if (s < 0) {
    *out = (htp__shard){(float *)w->first, (float *)w->bias, (float *)w->second, room};
    return 0;
  }
  if (count_states(P, w->first) != states || count_states(P, w->second) != states ||
      (w->bias && count_states(P, w->bias) != states))
    return -1;
  *out = (htp__shard){nth_state(P, w->first, s), nth_state(P, w->bias, s),
                      nth_state(P, w->second, s), room};
  return 0;
}

/* The three parts of a shard (a NULL bias is skipped) between device
 * memory and host memory of the same layout: download (to_host) or upload. */
static htp_result shard_transfer(htp_ctx *ctx, const htp__shard *device, const htp__shard *host,
                                 const htp__unit_shape *u, int to_host) {
  const size_t rows = (size_t)(u->parts * device->units * u->width), d = (size_t)u->d;
  float *const dev[3] = {device->first, device->bias, device->second};
  float *const mem[3] = {host->first, host->bias, host->second};
  const size_t floats[3] = {rows * d, rows, d * (size_t)(device->units * u->width)};
  for (int i = 0; i < 3; ++i) {
    if (!dev[i]) continue;
    const size_t bytes = floats[i] * sizeof(float);
    htp_result r = to_host ? htp_mem_download(ctx, mem[i], dev[i], bytes)
                           : htp_mem_upload(ctx, dev[i], mem[i], bytes);
    if (r != HTP_OK) return r;
  }
  return HTP_OK;
}

/* Moves kind k's units of pair p: this rank's part of every move, in move
 * order on every rank (blocking sends cannot deadlock: the earliest
 * unfinished move has both ends at it).
 *
 * On a device the registered weights and states are device memory: a rank
 * that takes part works on host mirrors of its whole shards, downloaded
 * before and uploaded after (one large copy each way of each part, where a
 * unit's columns of `second` alone would be d small ones), and the units
 * between ranks go as host messages, as a migration's do. */
static htp_result move_pair(htp_balancer *b, int p, const htp__unit_move *moves, int count,
                            int states) {
  htp_ctx *ctx = b->ctx;
  const int k = htp_pair_kind_of(p), rank = ctx->rank;
  int involved = 0;
  for (int i = 0; i < count; ++i) involved |= moves[i].src == rank || moves[i].dst == rank;
  if (!involved) return HTP_OK;
  const htp__unit_shape u = {htp__unit_parts(k), htp__unit_width(&b->config, k),
                             b->config.model_dim, sizeof(float)}; /* f32 (weigh) */
  const int64_t per_unit = htp__unit_floats(&b->config, k);
  htp__shard mine[1 + HTP__PARTITION_MAX_STATES], device[1 + HTP__PARTITION_MAX_STATES];
  for (int s = -1; s < states; ++s)
    if (pair_shard(b, p, s, states, &mine[s + 1]))
      return htp__ctx_error(ctx, HTP_ERR_INVALID,
                            "re-partition: pair %d: its weights do not all have the %d states "
                            "its first weight has (htp_balancer_add_state)",
                            p, states);
  const int on_device = htp__kernel_table(ctx)->device != HTP_KERNEL_DEVICE_CPU;
  if (on_device) {
    const int64_t room = mine[0].units, shard_floats = room * per_unit;
    if (htp__reserve_floats(&b->partition.mirror, &b->partition.mirror_capacity,
                            (size_t)(1 + states) * (size_t)shard_floats))
      return htp__ctx_error(ctx, HTP_ERR_NOMEM,
                            "re-partition: pair %d: out of memory for a host copy of its shards", p);
    for (int s = 0; s <= states; ++s) {
      device[s] = mine[s];
      mine[s] = htp__shard_at(b->partition.mirror + (size_t)s * (size_t)shard_floats, room, &u);
      if (!device[s].bias) mine[s].bias = NULL;
      htp_result r = shard_transfer(ctx, &device[s], &mine[s], &u, 1);
      if (r != HTP_OK) return r;
    }
  }
  for (int i = 0; i < count; ++i) {
    const htp__unit_move *m = &moves[i];
    if (m->src != rank && m->dst != rank) continue;
    const size_t floats = (size_t)m->count * (size_t)(1 + states) * (size_t)per_unit;
    if (htp__reserve_floats(&b->partition.staging, &b->partition.staging_capacity, floats))
      return htp__ctx_error(ctx, HTP_ERR_NOMEM, "re-partition: pair %d: out of memory for %d units",
                            p, m->count);
    /* Staged as (1 + states) shards of m->count units: weights, then each state. */
    htp__shard staged[1 + HTP__PARTITION_MAX_STATES];
    for (int s = 0; s <= states; ++s)
      staged[s] = htp__shard_at(b->partition.staging + (size_t)s * m->count * per_unit, m->count, &u);
    htp_result r;
    if (m->src == rank) {
      for (int s = 0; s <= states; ++s)
        for (int j = 0; j < m->count; ++j) {
          htp__copy_unit(&mine[s], m->from + j, &staged[s], j, &u);
          htp__zero_unit(&mine[s], m->from + j, &u);
        }
      r = htp_send_host(ctx, b->partition.staging, floats * sizeof(float), m->dst,
                         TAG_REPARTITION + k);
      b->partition.last_bytes += (double)(floats * sizeof(float));
    } else {
      r = htp_recv_host(ctx, b->partition.staging, floats * sizeof(float), m->src,
                         TAG_REPARTITION + k);
      b->partition.last_bytes += (double)(floats * sizeof(float));
      for (int s = 0; r == HTP_OK && s <= states; ++s)
        for (int j = 0; j < m->count; ++j) htp__copy_unit(&staged[s], j, &mine[s], m->to + j, &u);
    }
    if (r != HTP_OK) return r;
  }
  for (int s = 0; on_device && s <= states; ++s) {
    htp_result r = shard_transfer(ctx, &device[s], &mine[s], &u, 0);
    if (r != HTP_OK) return r;
  }
  return HTP_OK;
}

/* Everything that numbered units by slot starts over on the new owners. */
static htp_result install(htp_balancer *b, const int32_t *owned) {
  const int n = b->config.planner.world_size;
  if (!b->owned) {
    b->owned = malloc((size_t)n * HTP_PAIR_KINDS * sizeof *b->owned);
    if (!b->owned) return HTP_ERR_NOMEM;
  }
  memcpy(b->owned, owned, (size_t)n * HTP_PAIR_KINDS * sizeof *b->owned);
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) b->config.planner.owned[k] = b->owned + (size_t)k * n;
  htp_result r = htp__planner_set_owned(b->planner, b->owned);
  if (r == HTP_OK) r = htp_unit_table_set_owned(b->table, b->config.planner.owned);
  if (r == HTP_OK) r = htp__scores_reset(b);
  if (r == HTP_OK && b->imputer) {
    htp_imputer_destroy(b->imputer);
    b->imputer = NULL;
    r = htp_imputer_create(b->num_pairs, &b->imputer);
  }
  if (b->same_stored_at)
    for (size_t i = 0; i < (size_t)b->num_pairs * (size_t)b->max_units; ++i)
      b->same_stored_at[i] = -1;
  return r;
}

htp_result htp__partition_carry_out(htp_balancer *b, const htp_plan **plan) {
  htp__partition *P = &b->partition;
  if (!P->pending) return HTP_OK;
  P->pending = 0;
  const double started = htp_now();
  P->last_bytes = 0.0;
  const htp_planner_config *c = &b->config.planner;
  const int n = c->world_size;
  int32_t *owned = P->owned;
  htp__unit_move *moves[HTP_PAIR_KINDS] = {P->moves, P->moves + n};
  int count[HTP_PAIR_KINDS];
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) {
    for (int r = 0; r < n; ++r) owned[k * n + r] = htp_config_owned(c, (htp_pair_kind)k, r);
    count[k] = plan_moves(b, *plan, k, owned + k * n, moves[k]);
  }
  const int states = states_per_weight(b);
  if (states > HTP__PARTITION_MAX_STATES)
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID, "re-partition: %d states a weight, at most %d",
                          states, HTP__PARTITION_MAX_STATES);
  for (int p = 0; p < b->num_pairs; ++p) {
    const int k = htp_pair_kind_of(p);
    if (count[k] == 0) continue;
    if (!b->pairs[p].seen)
      return htp__ctx_error(b->ctx, HTP_ERR_INVALID,
                            "re-partition: pair %d's hook never ran: no weights to move", p);
    htp_result r = move_pair(b, p, moves[k], count[k], states);
    if (r != HTP_OK) return r;
  }
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) { /* the slot maps follow the moves */
    const int room = c->units_per_rank[k];
    for (int i = 0; i < count[k]; ++i) {
      const htp__unit_move *m = &moves[k][i];
      for (int j = 0; j < m->count; ++j) {
        int32_t *from = &P->slot_unit[k][(size_t)m->src * room + m->from + j];
        P->slot_unit[k][(size_t)m->dst * room + m->to + j] = *from;
        *from = -1;
      }
    }
  }
  htp_result r = install(b, owned);
  if (r != HTP_OK)
    return htp__ctx_error(b->ctx, r, "re-partition: %s",
                          r == HTP_ERR_NOMEM ? "out of memory" : htp_planner_last_error(b->planner));
  P->count++;
  P->reported = 0;
  P->last_seconds = htp_now() - started;
  P->held = 0;
  P->spent_bytes = 0.0;
  *plan = htp_planner_plan(b->planner);
  return HTP_OK;
}

/* ===== Public: states, the count, who owns what ========================= */

htp_result htp_balancer_add_state(htp_balancer *b, const void *weight, void *state) {
  if (!b) return HTP_ERR_INVALID;
  if (!weight || !state)
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID, "htp_balancer_add_state: weight or state is NULL");
  htp__partition *P = &b->partition;
  for (int i = 0; i < P->num_states; ++i)
    if (P->states[i].state == state)
      return htp__ctx_error(b->ctx, HTP_ERR_INVALID,
                            "htp_balancer_add_state: that state is registered already");
  if (P->num_states == P->states_capacity) {
    const int grown = P->states_capacity ? 2 * P->states_capacity : 16;
    htp__unit_state *more = realloc(P->states, (size_t)grown * sizeof *more);
    if (!more) return htp__ctx_error(b->ctx, HTP_ERR_NOMEM, "htp_balancer_add_state: out of memory");
    P->states = more;
    P->states_capacity = grown;
  }
  P->states[P->num_states++] = (htp__unit_state){weight, state};
  return HTP_OK;
}

int64_t htp_balancer_repartitions(const htp_balancer *b) { return b ? b->partition.count : 0; }

htp_result htp_balancer_slot_units(const htp_balancer *b, const void *weight, int32_t *slot_units,
                                   size_t count, int64_t *room) {
  if (!b) return HTP_ERR_INVALID;
  if (!weight || !slot_units || !room || b->hookless)
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID,
                          "htp_balancer_slot_units: %s", b->hookless ? "the balancer has no hooks"
                                                                     : "an argument is NULL");
  const void *target = weight;
  for (int i = 0; i < b->partition.num_states; ++i) /* a state stands for its weight */
    if (b->partition.states[i].state == weight) target = b->partition.states[i].weight;
  for (int p = 0; p < b->num_pairs; ++p) {
    const htp__registered_pair *w = &b->pairs[p];
    if (!w->seen || (w->first != target && w->second != target && (!w->bias || w->bias != target)))
      continue;
    const int k = htp_pair_kind_of(p), n = b->config.planner.world_size;
    const int64_t units = b->config.planner.units_per_rank[k];
    if (count < (size_t)n * (size_t)units)
      return htp__ctx_error(b->ctx, HTP_ERR_INVALID,
                            "htp_balancer_slot_units: %zu entries, the map has %lld", count,
                            (long long)(n * units));
    memcpy(slot_units, b->partition.slot_unit[k], (size_t)n * (size_t)units * sizeof(int32_t));
    *room = units;
    return HTP_OK;
  }
  return htp__ctx_error(b->ctx, HTP_ERR_INVALID,
                        "htp_balancer_slot_units: no pair weight the hooks ran is at %p", weight);
}
