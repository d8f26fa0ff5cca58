/*===- runtime/migrate.c - migration transfers: weights to helpers, cached ===*
 *
 * After a plan change a migrator sends each handed-off unit's weights to its
 * helper unless that helper already holds them from the previous plan;
 * helpers keep what the new plan still gives them and drop the rest. Every
 * rank walks the same flow list in the same order (kind, flow, layer) and
 * takes part in the flows it is an end of, so blocking sends cannot
 * deadlock: the earliest unfinished transfer always has both ends at it.
 * Per (flow, pair): a header (unit ids, new flags), then the new units'
 * weights in one message.
 *===----------------------------------------------------------------------===*/
#include "runtime/comm_internal.h"
#include "runtime/planner_internal.h"
#include "runtime/units_internal.h"

#include <stdlib.h>
#include <string.h>

#define TAG_HEADER 0x4D00 /* + kind */
#define TAG_WEIGHTS 0x4E00

typedef struct cached_unit {
  int32_t src, unit;
  int keep;
  void *data;
} cached_unit;

typedef struct cache_pair {
  cached_unit *entries;
  int count, capacity;
} cache_pair;

struct htp_migration {
  htp_planner_config config;
  int rank, num_pairs;
  size_t bytes[HTP_PAIR_KINDS];
  int64_t applied_version;
  int32_t *helper_of;  /* [pair offset + unit]: helper holding my unit, -1 */
  int32_t *previous;   /* same shape: helper_of before this apply */
  int32_t *offset;     /* [pairs + 1] */
  cache_pair *cache;   /* [pairs] units I hold for others */
  int32_t *header;     /* staging: 2 * max units */
  size_t header_capacity;
  unsigned char *staging; /* weights of one message */
  size_t staging_capacity;
  uint64_t last_received, last_sent, total;
};


htp_result htp_migration_create(const htp_planner_config *config, int rank,
                                const size_t bytes_per_unit[HTP_PAIR_KINDS],
                                htp_migration **out) {
  if (!out) return HTP_ERR_INVALID;
  *out = NULL;
  if (htp_planner_config_check(config, NULL, 0) != HTP_OK || rank < 0 ||
      rank >= config->world_size || !bytes_per_unit || !bytes_per_unit[0] || !bytes_per_unit[1])
    return HTP_ERR_INVALID;
  htp_migration *m = calloc(1, sizeof *m);
  if (!m) return HTP_ERR_NOMEM;
  m->config = *config;
  m->rank = rank;
  m->num_pairs = htp_num_pairs(config->num_layers);
  m->bytes[0] = bytes_per_unit[0];
  m->bytes[1] = bytes_per_unit[1];
  m->applied_version = -1;
  m->offset = calloc((size_t)m->num_pairs + 1, sizeof(int32_t));
  m->cache = calloc((size_t)m->num_pairs, sizeof(cache_pair));
  if (!m->offset || !m->cache) {
    htp_migration_destroy(m);
    return HTP_ERR_NOMEM;
  }
  for (int p = 0; p < m->num_pairs; ++p)
    m->offset[p + 1] = m->offset[p] + config->units_per_rank[htp_pair_kind_of(p)];
  m->helper_of = malloc((size_t)m->offset[m->num_pairs] * sizeof(int32_t));
  m->previous = malloc((size_t)m->offset[m->num_pairs] * sizeof(int32_t));
  if (!m->helper_of || !m->previous) {
    htp_migration_destroy(m);
    return HTP_ERR_NOMEM;
  }
  for (int32_t i = 0; i < m->offset[m->num_pairs]; ++i) m->helper_of[i] = -1;
  *out = m;
  return HTP_OK;
}

void htp_migration_destroy(htp_migration *m) {
  if (!m) return;
  if (m->cache)
    for (int p = 0; p < m->num_pairs; ++p) {
      for (int i = 0; i < m->cache[p].count; ++i) free(m->cache[p].entries[i].data);
      free(m->cache[p].entries);
    }
  free(m->cache);
  free(m->offset);
  free(m->helper_of);
  free(m->previous);
  free(m->header);
  free(m->staging);
  free(m);
}

static int reserve(void **buffer, size_t *capacity, size_t bytes) {
  if (bytes <= *capacity) return 0;
  void *grown = realloc(*buffer, bytes);
  if (!grown) return -1;
  *buffer = grown;
  *capacity = bytes;
  return 0;
}

static cached_unit *find(cache_pair *c, int src, int unit) {
  for (int i = 0; i < c->count; ++i)
    if (c->entries[i].src == src && c->entries[i].unit == unit) return &c->entries[i];
  return NULL;
}

/* Sends my units of one (flow, pair). */
static htp_result send_flow(htp_migration *m, htp_ctx *ctx, const htp_flow *flow, int pair,
                            const htp_unit_sets *sets, htp_unit_pack_fn pack, void *user) {
  const int k = htp_pair_kind_of(pair);
  int32_t *ids = m->header, *is_new = m->header + flow->count;
  int count = 0, fresh = 0;
  for (int i = 0; i < sets->num_out; ++i) {
    if (sets->out_dst[i] != flow->dst) continue;
    int unit = sets->out_unit[i];
    ids[count] = unit;
    is_new[count] = m->previous[m->offset[pair] + unit] != flow->dst;
    fresh += is_new[count];
    m->helper_of[m->offset[pair] + unit] = flow->dst;
    count++;
  }
  if (count != flow->count)
    return htp__ctx_error(ctx, HTP_ERR_INTERNAL, "migration: table has %d units for a flow of %d",
                          count, flow->count);
  htp_result r = htp_send_host(ctx, m->header, 2 * (size_t)count * sizeof(int32_t), flow->dst,
                          TAG_HEADER + k);
  if (r != HTP_OK || fresh == 0) return r;
  const size_t bytes = m->bytes[k] * (size_t)fresh;
  if (reserve((void **)&m->staging, &m->staging_capacity, bytes))
    return htp__ctx_error(ctx, HTP_ERR_NOMEM, "migration: out of memory for %zu bytes", bytes);
  for (int i = 0, at = 0; i < count; ++i) {
    if (!is_new[i]) continue;
    const int packed = pack(user, pair, ids[i], m->staging + m->bytes[k] * (size_t)at++);
    if (packed > 0 && packed < HTP_RESULT_COUNT) return (htp_result)packed; /* said on ctx */
    if (packed != 0)
      return htp__ctx_error(ctx, HTP_ERR_INVALID, "migration: pack failed for pair %d unit %d",
                            pair, ids[i]);
  }
  r = htp_send_host(ctx, m->staging, bytes, flow->dst, TAG_WEIGHTS + k);
  if (r == HTP_OK) m->last_sent += bytes;
  return r;
}

/* Receives one (flow, pair) and records the ids in the table. */
static htp_result recv_flow(htp_migration *m, htp_ctx *ctx, const htp_flow *flow, int pair,
                            htp_unit_table *table, int *in_index) {
  const int k = htp_pair_kind_of(pair);
  const int count = flow->count;
  htp_result r = htp_recv_host(ctx, m->header, 2 * (size_t)count * sizeof(int32_t), flow->src,
                          TAG_HEADER + k);
  if (r != HTP_OK) return r;
  int32_t *ids = m->header, *is_new = m->header + count;
  int fresh = 0;
  for (int i = 0; i < count; ++i) fresh += is_new[i] != 0;
  const size_t bytes = m->bytes[k] * (size_t)fresh;
  if (fresh) {
    if (reserve((void **)&m->staging, &m->staging_capacity, bytes))
      return htp__ctx_error(ctx, HTP_ERR_NOMEM, "migration: out of memory for %zu bytes", bytes);
    r = htp_recv_host(ctx, m->staging, bytes, flow->src, TAG_WEIGHTS + k);
    if (r != HTP_OK) return r;
    m->last_received += bytes;
  }
  cache_pair *c = &m->cache[pair];
  for (int i = 0, at = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= m->config.units_per_rank[k])
      return htp__ctx_error(ctx, HTP_ERR_INTERNAL, "migration: bad unit id %d from rank %d",
                            ids[i], flow->src);
    cached_unit *e = find(c, flow->src, ids[i]);
    if (is_new[i]) {
      if (!e) {
        if (c->count == c->capacity) {
          int capacity = c->capacity ? 2 * c->capacity : 16;
          cached_unit *grown = realloc(c->entries, (size_t)capacity * sizeof *grown);
          if (!grown) return htp__ctx_error(ctx, HTP_ERR_NOMEM, "migration: out of memory");
          c->entries = grown;
          c->capacity = capacity;
        }
        e = &c->entries[c->count++];
        *e = (cached_unit){flow->src, ids[i], 0, malloc(m->bytes[k])};
        if (!e->data) {
          c->count--;
          return htp__ctx_error(ctx, HTP_ERR_NOMEM, "migration: out of memory");
        }
      }
      memcpy(e->data, m->staging + m->bytes[k] * (size_t)at++, m->bytes[k]);
    } else if (!e) {
      return htp__ctx_error(ctx, HTP_ERR_INTERNAL,
                            "migration: rank %d says unit %d of pair %d is cached here; it is not",
                            flow->src, ids[i], pair);
    }
    e->keep = 1;
    if (table) htp_unit_table_set_in_unit(table, pair, (*in_index)++, ids[i]);
  }
  return HTP_OK;
}

htp_result htp_migration_apply(htp_migration *m, htp_ctx *ctx, const htp_plan *plan,
                               htp_unit_table *table, htp_unit_pack_fn pack, void *user) {
  if (!ctx) return HTP_ERR_INVALID;
  if (!m || !plan || !table || !pack)
    return htp__ctx_error(ctx, HTP_ERR_INVALID, "htp_migration_apply: NULL argument");
  if (plan->world_size != m->config.world_size || plan->num_layers != m->config.num_layers ||
      htp_ctx_rank(ctx) != m->rank)
    return htp__ctx_error(ctx, HTP_ERR_INVALID,
                          "htp_migration_apply: plan or context does not match the migration");
  if (plan->version == m->applied_version) {
    m->last_received = m->last_sent = 0;
    return HTP_OK;
  }
  htp_result r = htp_unit_table_update(table, plan);
  if (r != HTP_OK) return htp__ctx_error(ctx, r, "htp_migration_apply: unit table update failed");
  int max_units = m->config.units_per_rank[0] > m->config.units_per_rank[1]
                      ? m->config.units_per_rank[0]
                      : m->config.units_per_rank[1];
  /* A flow carries at most all of one rank's units. */
  if (reserve((void **)&m->header, &m->header_capacity, 2 * (size_t)max_units * sizeof(int32_t)))
    return htp__ctx_error(ctx, HTP_ERR_NOMEM, "migration: out of memory");
  m->last_received = m->last_sent = 0;
  const size_t all_units = (size_t)m->offset[m->num_pairs];
  memcpy(m->previous, m->helper_of, all_units * sizeof(int32_t));
  for (size_t i = 0; i < all_units; ++i) m->helper_of[i] = -1;
  for (int p = 0; p < m->num_pairs; ++p)
    for (int i = 0; i < m->cache[p].count; ++i) m->cache[p].entries[i].keep = 0;
  int *in_index = calloc((size_t)m->num_pairs, sizeof(int));
  if (!in_index) return htp__ctx_error(ctx, HTP_ERR_NOMEM, "migration: out of memory");
  for (int k = 0; k < HTP_PAIR_KINDS && r == HTP_OK; ++k)
    for (int f = 0; f < plan->num_flows[k] && r == HTP_OK; ++f) {
      const htp_flow *flow = &plan->flows[k][f];
      if (flow->src != m->rank && flow->dst != m->rank) continue;
      for (int layer = 0; layer < m->config.num_layers && r == HTP_OK; ++layer) {
        int pair = htp_pair_of(layer, (htp_pair_kind)k);
        htp_unit_sets sets;
        htp_unit_table_get(table, pair, &sets);
        r = flow->src == m->rank ? send_flow(m, ctx, flow, pair, &sets, pack, user)
                                 : recv_flow(m, ctx, flow, pair, table, &in_index[pair]);
      }
    }
  free(in_index);
  if (r != HTP_OK) return r;
  /* Drop what the new plan no longer gives this rank. */
  for (int p = 0; p < m->num_pairs; ++p) {
    cache_pair *c = &m->cache[p];
    int kept = 0;
    for (int i = 0; i < c->count; ++i) {
      if (c->entries[i].keep) c->entries[kept++] = c->entries[i];
      else free(c->entries[i].data);
    }
    c->count = kept;
  }
  m->applied_version = plan->version;
  m->total += m->last_received + m->last_sent;
  return HTP_OK;
}

void htp_migration_invalidate(htp_migration *m) {
  if (!m) return;
  for (int32_t i = 0; i < m->offset[m->num_pairs]; ++i) m->helper_of[i] = -1;
  m->applied_version = -1;
}

const void *htp_migration_weights(const htp_migration *m, int pair, int src, int unit) {
  if (!m || pair < 0 || pair >= m->num_pairs) return NULL;
  cached_unit *e = find(&m->cache[pair], src, unit);
  return e ? e->data : NULL;
}

uint64_t htp_migration_last_bytes_received(const htp_migration *m) {
  return m ? m->last_received : 0;
}
uint64_t htp_migration_last_bytes_sent(const htp_migration *m) { return m ? m->last_sent : 0; }
uint64_t htp_migration_total_bytes(const htp_migration *m) { return m ? m->total : 0; }

int htp_migration_cached_units(const htp_migration *m) {
  int count = 0;
  if (m)
    for (int p = 0; p < m->num_pairs; ++p) count += m->cache[p].count;
  return count;
}
