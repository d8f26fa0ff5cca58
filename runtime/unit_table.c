/*===- runtime/unit_table.c - unit tables (who keeps, prunes, moves) and imputation ===*
 *
 * The plan says HOW MANY units of each pair a rank prunes or hands off;
 * the unit table says WHICH, for one rank: a shed order per pair (a seeded
 * permutation, or least important first), of which the first pruned/sent
 * entries go. Because every shed set is a prefix of one fixed order, a plan
 * change moves as few units as it can. Imputation fills pruned units'
 * activations so every tensor keeps its shape.
 *===----------------------------------------------------------------------===*/
#include "runtime/planner_internal.h"
#include "runtime/units_internal.h"

#include <stdlib.h>
#include <string.h>

struct htp_unit_table {
  htp_planner_config config;
  int rank, num_pairs;
  htp_select selection;
  uint64_t seed;
  int32_t *offset;     /* [pairs + 1] start of the pair in the per-unit arrays */
  float *scores;       /* [units] scores (HTP_SELECT_IMPORTANCE, HTP_SELECT_VARIATION) */
  int32_t *order;      /* [units] shed order per pair (local unit indices) */
  int32_t *kept, *pruned, *out_unit, *out_dst; /* [units] */
  int32_t *num_kept, *num_pruned, *num_out, *num_in; /* [pairs] */
  int32_t **in_src, **in_unit; /* [pairs][in_capacity[pair]] */
  int32_t *in_capacity;        /* [pairs] */
  int32_t *scratch;            /* [max units] another rank's order */
  uint8_t *mark;               /* [max units] */
  htp__rank_key *keys;         /* [max units] importance sort */
  int orders_dirty;
};

uint64_t htp__splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The seeded shed order of (rank, pair): the same on every rank. */
static void random_order(uint64_t seed, int rank, int pair, int units, int32_t *order) {
  uint64_t state = seed ^ (0x100000001B3ull * (uint64_t)(rank + 1)) ^
                   (0xC2B2AE3D27D4EB4Full * (uint64_t)(pair + 1));
  for (int i = 0; i < units; ++i) order[i] = i;
  for (int i = units - 1; i > 0; --i) {
    int j = (int)(htp__splitmix64(&state) % (uint64_t)(i + 1));
    int32_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

/* Least important first; equal scores by lower index (key = -score so the
 * "largest key first" comparator gives ascending scores). */
static int by_key(const void *a, const void *b) {
  const htp__rank_key *x = a, *y = b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}


/* The shed orders as at creation, every owned unit kept. Only the units
 * the rank owns are ever kept, shed or moved: empty slots (the last) are in
 * no set. */
static void reset_orders(htp_unit_table *t) {
  for (int p = 0; p < t->num_pairs; ++p) {
    int owned = htp_config_owned(&t->config, htp_pair_kind_of(p), t->rank);
    int32_t *order = t->order + t->offset[p];
    if (t->selection == HTP_SELECT_RANDOM) random_order(t->seed, t->rank, p, owned, order);
    else
      for (int i = 0; i < owned; ++i) order[i] = i; /* all scores 0: by index */
    t->num_kept[p] = owned;
    t->num_pruned[p] = t->num_out[p] = t->num_in[p] = 0;
    for (int i = 0; i < owned; ++i) t->kept[t->offset[p] + i] = i;
  }
}

htp_result htp_unit_table_create(const htp_planner_config *config, int rank,
                                 htp_select selection, uint64_t seed, htp_unit_table **out) {
  if (!out) return HTP_ERR_INVALID;
  *out = NULL;
  if (htp_planner_config_check(config, NULL, 0) != HTP_OK || rank < 0 ||
      rank >= config->world_size ||
      (selection < HTP_SELECT_RANDOM || selection > HTP_SELECT_DISPLACEMENT))
    return HTP_ERR_INVALID;
  htp_unit_table *t = calloc(1, sizeof *t);
  if (!t) return HTP_ERR_NOMEM;
  t->config = *config;
  t->rank = rank;
  t->selection = selection;
  t->seed = seed;
  t->num_pairs = htp_num_pairs(config->num_layers);
  const size_t pairs = (size_t)t->num_pairs;
  int max_units = config->units_per_rank[0] > config->units_per_rank[1] ? config->units_per_rank[0]
                                                                       : config->units_per_rank[1];
  t->offset = calloc(pairs + 1, sizeof(int32_t));
  int ok = t->offset != NULL;
  if (ok)
    for (size_t p = 0; p < pairs; ++p)
      t->offset[p + 1] = t->offset[p] + config->units_per_rank[htp_pair_kind_of((int)p)];
  size_t units = ok ? (size_t)t->offset[pairs] : 0;
  t->scores = calloc(units, sizeof(float));
  t->order = calloc(units, sizeof(int32_t));
  t->kept = calloc(units, sizeof(int32_t));
  t->pruned = calloc(units, sizeof(int32_t));
  t->out_unit = calloc(units, sizeof(int32_t));
  t->out_dst = calloc(units, sizeof(int32_t));
  t->num_kept = calloc(pairs, sizeof(int32_t));
  t->num_pruned = calloc(pairs, sizeof(int32_t));
  t->num_out = calloc(pairs, sizeof(int32_t));
  t->num_in = calloc(pairs, sizeof(int32_t));
  t->in_src = calloc(pairs, sizeof(int32_t *));
  t->in_unit = calloc(pairs, sizeof(int32_t *));
  t->in_capacity = calloc(pairs, sizeof(int32_t));
  t->scratch = calloc((size_t)max_units, sizeof(int32_t));
  t->mark = calloc((size_t)max_units, 1);
  t->keys = calloc((size_t)max_units, sizeof(htp__rank_key));
  ok = ok && t->scores && t->order && t->kept && t->pruned && t->out_unit && t->out_dst &&
       t->num_kept && t->num_pruned && t->num_out && t->num_in && t->in_src && t->in_unit &&
       t->in_capacity && t->scratch && t->mark && t->keys;
  if (!ok) {
    htp_unit_table_destroy(t);
    return HTP_ERR_NOMEM;
  }
  reset_orders(t);
  *out = t;
  return HTP_OK;
}

htp_result htp_unit_table_set_owned(htp_unit_table *t, const int32_t *const *owned) {
  if (!t || !owned || !owned[HTP_PAIR_ATTENTION] || !owned[HTP_PAIR_MLP]) return HTP_ERR_INVALID;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k)
    for (int r = 0; r < t->config.world_size; ++r)
      if (owned[k][r] < 1 || owned[k][r] > t->config.units_per_rank[k]) return HTP_ERR_INVALID;
  for (int k = 0; k < HTP_PAIR_KINDS; ++k) t->config.owned[k] = owned[k];
  memset(t->scores, 0, (size_t)t->offset[t->num_pairs] * sizeof(float));
  reset_orders(t);
  return HTP_OK;
}

void htp_unit_table_destroy(htp_unit_table *t) {
  if (!t) return;
  if (t->in_src)
    for (int p = 0; p < t->num_pairs; ++p) free(t->in_src[p]);
  if (t->in_unit)
    for (int p = 0; p < t->num_pairs; ++p) free(t->in_unit[p]);
  free(t->offset);
  free(t->scores);
  free(t->order);
  free(t->kept);
  free(t->pruned);
  free(t->out_unit);
  free(t->out_dst);
  free(t->num_kept);
  free(t->num_pruned);
  free(t->num_out);
  free(t->num_in);
  free(t->in_src);
  free(t->in_unit);
  free(t->in_capacity);
  free(t->scratch);
  free(t->mark);
  free(t->keys);
  free(t);
}

htp_result htp_unit_table_set_scores(htp_unit_table *t, int pair, const float *scores) {
  if (!t || !scores || pair < 0 || pair >= t->num_pairs || t->selection == HTP_SELECT_RANDOM)
    return HTP_ERR_INVALID;
  int u = t->config.units_per_rank[htp_pair_kind_of(pair)];
  int owned = htp_config_owned(&t->config, htp_pair_kind_of(pair), t->rank);
  memcpy(t->scores + t->offset[pair], scores, (size_t)u * sizeof(float));
  for (int i = 0; i < owned; ++i) {
    t->keys[i].key = -(double)scores[i];
    t->keys[i].rank = i;
  }
  qsort(t->keys, (size_t)owned, sizeof(htp__rank_key), by_key);
  for (int i = 0; i < owned; ++i) t->order[t->offset[pair] + i] = t->keys[i].rank;
  return HTP_OK;
}

static int same_shape(const htp_unit_table *t, const htp_plan *plan) {
  return plan->world_size == t->config.world_size && plan->num_layers == t->config.num_layers &&
         plan->units_per_rank[0] == t->config.units_per_rank[0] &&
         plan->units_per_rank[1] == t->config.units_per_rank[1];
}

htp_result htp_unit_table_update(htp_unit_table *t, const htp_plan *plan) {
  if (!t || !plan || !same_shape(t, plan)) return HTP_ERR_INVALID;
  const int n = plan->world_size, rank = t->rank;
  for (int p = 0; p < t->num_pairs; ++p) {
    const int k = htp_pair_kind_of(p), u = htp_config_owned(&t->config, k, rank);
    const int32_t *order = t->order + t->offset[p];
    const int pruned = plan->pruned[k * n + rank], sent = plan->sent[k * n + rank];
    const int received = plan->received[k * n + rank];
    memset(t->mark, 0, (size_t)u);
    /* Pruned or handed-off units: a prefix of the shed order. */
    int32_t *pruned_set = t->pruned + t->offset[p];
    for (int i = 0; i < pruned; ++i) t->mark[order[i]] = 1;
    int np = 0;
    for (int i = 0; i < u; ++i)
      if (t->mark[i] == 1) pruned_set[np++] = i;
    t->num_pruned[p] = np;
    /* Out units in shed order, split over this rank's flows in flow order. */
    int32_t *out_unit = t->out_unit + t->offset[p], *out_dst = t->out_dst + t->offset[p];
    int no = 0;
    for (int f = 0; f < plan->num_flows[k]; ++f) {
      const htp_flow *flow = &plan->flows[k][f];
      if (flow->src != rank) continue;
      for (int c = 0; c < flow->count && no < sent; ++c) {
        out_unit[no] = order[no];
        out_dst[no] = flow->dst;
        t->mark[order[no]] = 2;
        no++;
      }
    }
    t->num_out[p] = no;
    int32_t *kept = t->kept + t->offset[p];
    int nk = 0;
    for (int i = 0; i < u; ++i)
      if (t->mark[i] == 0) kept[nk++] = i;
    t->num_kept[p] = nk;
    /* In units: from each flow into this rank; ids known for random
     * selection (every rank can compute the owner's order). */
    if (received > t->in_capacity[p]) {
      int32_t *src = realloc(t->in_src[p], (size_t)received * sizeof(int32_t));
      if (src) t->in_src[p] = src;
      int32_t *unit = realloc(t->in_unit[p], (size_t)received * sizeof(int32_t));
      if (unit) t->in_unit[p] = unit;
      if (!src || !unit) return HTP_ERR_NOMEM;
      t->in_capacity[p] = received;
    }
    int ni = 0;
    for (int f = 0; f < plan->num_flows[k]; ++f) {
      const htp_flow *flow = &plan->flows[k][f];
      if (flow->dst != rank) continue;
      /* Where this flow starts in the owner's shed order. */
      int start = 0;
      for (int g = 0; g < f; ++g)
        if (plan->flows[k][g].src == flow->src) start += plan->flows[k][g].count;
      if (t->selection == HTP_SELECT_RANDOM)
        random_order(t->seed, flow->src, p, htp_config_owned(&t->config, k, flow->src),
                     t->scratch);
      for (int c = 0; c < flow->count; ++c) {
        t->in_src[p][ni] = flow->src;
        t->in_unit[p][ni] = t->selection == HTP_SELECT_RANDOM ? t->scratch[start + c] : -1;
        ni++;
      }
    }
    t->num_in[p] = ni;
  }
  return HTP_OK;
}

htp_result htp_unit_table_get(const htp_unit_table *t, int pair, htp_unit_sets *sets) {
  if (!t || !sets || pair < 0 || pair >= t->num_pairs) return HTP_ERR_INVALID;
  const int32_t o = t->offset[pair];
  sets->units = t->config.units_per_rank[htp_pair_kind_of(pair)];
  sets->owned = htp_config_owned(&t->config, htp_pair_kind_of(pair), t->rank);
  sets->num_kept = t->num_kept[pair];
  sets->kept = t->kept + o;
  sets->num_pruned = t->num_pruned[pair];
  sets->pruned = t->pruned + o;
  sets->num_out = t->num_out[pair];
  sets->out_unit = t->out_unit + o;
  sets->out_dst = t->out_dst + o;
  sets->num_in = t->num_in[pair];
  sets->in_src = t->in_src[pair];
  sets->in_unit = t->in_unit[pair];
  return HTP_OK;
}

htp_result htp_unit_table_set_in_unit(htp_unit_table *t, int pair, int index, int unit) {
  if (!t || pair < 0 || pair >= t->num_pairs || index < 0 || index >= t->num_in[pair] ||
      unit < 0 || unit >= t->config.units_per_rank[htp_pair_kind_of(pair)])
    return HTP_ERR_INVALID;
  t->in_unit[pair][index] = unit;
  return HTP_OK;
}

/* ---- imputation ---------------------------------------------------------- */

const char *htp_select_name(htp_select selection) {
  switch (selection) {
  case HTP_SELECT_RANDOM: return "random";
  case HTP_SELECT_IMPORTANCE: return "importance";
  case HTP_SELECT_VARIATION: return "variation";
  case HTP_SELECT_DISPLACEMENT: return "displacement";
  }
  return "?";
}

htp_result htp_select_parse(const char *name, htp_select *selection) {
  if (!name || !selection) return HTP_ERR_INVALID;
  for (int i = HTP_SELECT_RANDOM; i <= HTP_SELECT_DISPLACEMENT; ++i)
    if (strcmp(name, htp_select_name((htp_select)i)) == 0) {
      *selection = (htp_select)i;
      return HTP_OK;
    }
  return HTP_ERR_INVALID;
}

const char *htp_impute_name(htp_impute impute) {
  switch (impute) {
  case HTP_IMPUTE_ZERO: return "zero";
  case HTP_IMPUTE_SAME: return "same";
  case HTP_IMPUTE_AVERAGE: return "average";
  }
  return "?";
}

htp_result htp_impute_parse(const char *name, htp_impute *impute) {
  if (!name || !impute) return HTP_ERR_INVALID;
  for (int i = HTP_IMPUTE_ZERO; i <= HTP_IMPUTE_AVERAGE; ++i)
    if (strcmp(name, htp_impute_name((htp_impute)i)) == 0) {
      *impute = (htp_impute)i;
      return HTP_OK;
    }
  return HTP_ERR_INVALID;
}

typedef struct stored_pair {
  float *values;     /* [rows][units * width], compact */
  int64_t *stored_at; /* [units]: the step each unit was stored at, -1: never */
  size_t rows, width;
  int units;
} stored_pair;

struct htp_imputer {
  int num_pairs;
  stored_pair *pairs;
};

htp_result htp_imputer_create(int num_pairs, htp_imputer **out) {
  if (!out) return HTP_ERR_INVALID;
  *out = NULL;
  if (num_pairs < 1) return HTP_ERR_INVALID;
  htp_imputer *imputer = calloc(1, sizeof *imputer);
  if (!imputer) return HTP_ERR_NOMEM;
  imputer->pairs = calloc((size_t)num_pairs, sizeof(stored_pair));
  if (!imputer->pairs) {
    free(imputer);
    return HTP_ERR_NOMEM;
  }
  imputer->num_pairs = num_pairs;
  *out = imputer;
  return HTP_OK;
}

void htp_imputer_destroy(htp_imputer *imputer) {
  if (!imputer) return;
  for (int p = 0; p < imputer->num_pairs; ++p) {
    free(imputer->pairs[p].values);
    free(imputer->pairs[p].stored_at);
  }
  free(imputer->pairs);
  free(imputer);
}

static int layout_ok(const float *act, size_t row_stride, int units, size_t unit_width,
                     const htp_unit_sets *sets) {
  return act && sets && units >= 1 && unit_width >= 1 && units == sets->units &&
         row_stride >= (size_t)units * unit_width;
}

/* Stores units list[0..count) of pair, unit list[i] read from act's columns
 * at column(i) * unit_width (its own index, or i for a compact act). */
static htp_result store_units(htp_imputer *imputer, int pair, const float *act, size_t rows,
                              size_t row_stride, int units, size_t unit_width,
                              const int32_t *list, int count, int compact, int64_t step) {
  stored_pair *s = &imputer->pairs[pair];
  if (s->rows != rows || s->units != units || s->width != unit_width || !s->values) {
    float *values = calloc(rows * (size_t)units * unit_width, sizeof(float));
    int64_t *stored_at = malloc((size_t)units * sizeof *stored_at);
    if (!values || !stored_at) {
      free(values);
      free(stored_at);
      return HTP_ERR_NOMEM;
    }
    for (int i = 0; i < units; ++i) stored_at[i] = -1;
    free(s->values);
    free(s->stored_at);
    s->values = values;
    s->stored_at = stored_at;
    s->rows = rows;
    s->units = units;
    s->width = unit_width;
  }
  const size_t stored_stride = (size_t)units * unit_width;
  for (size_t r = 0; r < rows; ++r)
    for (int i = 0, n; i < count; i += n) { /* runs of consecutive units: one copy each */
      n = htp_unit_run(list, i, count);
      memcpy(s->values + r * stored_stride + (size_t)list[i] * unit_width,
             act + r * row_stride + (size_t)(compact ? i : list[i]) * unit_width,
             (size_t)n * unit_width * sizeof(float));
    }
  for (int i = 0; i < count; ++i) s->stored_at[list[i]] = step;
  return HTP_OK;
}

htp_result htp_imputer_store(htp_imputer *imputer, int pair, const float *act, size_t rows,
                             size_t row_stride, int units, size_t unit_width,
                             const htp_unit_sets *sets, int64_t step) {
  if (!imputer || pair < 0 || pair >= imputer->num_pairs ||
      !layout_ok(act, row_stride, units, unit_width, sets))
    return HTP_ERR_INVALID;
  return store_units(imputer, pair, act, rows, row_stride, units, unit_width, sets->kept,
                     sets->num_kept, 0, step);
}

htp_result htp_imputer_store_listed(htp_imputer *imputer, int pair, const float *act,
                                    size_t rows, size_t row_stride, int units,
                                    size_t unit_width, const int32_t *list, int count,
                                    int64_t step) {
  if (!imputer || pair < 0 || pair >= imputer->num_pairs || units < 1 || unit_width < 1 ||
      count < 0 || count > units || (count > 0 && (!act || !list)) ||
      row_stride < (size_t)count * unit_width)
    return HTP_ERR_INVALID;
  for (int i = 0; i < count; ++i)
    if (list[i] < 0 || list[i] >= units) return HTP_ERR_INVALID;
  return store_units(imputer, pair, act, rows, row_stride, units, unit_width, list, count, 1,
                     step);
}

int64_t htp_imputer_stored_at(const htp_imputer *imputer, int pair, int unit) {
  if (!imputer || pair < 0 || pair >= imputer->num_pairs) return -1;
  const stored_pair *s = &imputer->pairs[pair];
  return s->values && unit >= 0 && unit < s->units ? s->stored_at[unit] : -1;
}

htp_result htp_impute_fill(const htp_imputer *imputer, int pair, htp_impute impute, float *act,
                           size_t rows, size_t row_stride, int units, size_t unit_width,
                           const htp_unit_sets *sets, int64_t step, int64_t max_age) {
  if (!layout_ok(act, row_stride, units, unit_width, sets) || pair < 0 ||
      (imputer && pair >= imputer->num_pairs) || impute < HTP_IMPUTE_ZERO ||
      impute > HTP_IMPUTE_AVERAGE || max_age < 0)
    return HTP_ERR_INVALID;
  if (sets->num_pruned == 0) return HTP_OK;
  const stored_pair *s = imputer ? &imputer->pairs[pair] : NULL;
  int have_same = impute == HTP_IMPUTE_SAME && s && s->values && s->rows == rows &&
                  s->units == units && s->width == unit_width;
  const size_t stored_stride = (size_t)units * unit_width;
  for (size_t r = 0; r < rows; ++r) {
    float *row = act + r * row_stride;
    if (impute == HTP_IMPUTE_AVERAGE && sets->num_kept > 0) {
      /* Mean of the kept units, summed in ascending unit order. */
      for (size_t j = 0; j < unit_width; ++j) {
        double sum = 0.0;
        for (int i = 0; i < sets->num_kept; ++i) sum += row[(size_t)sets->kept[i] * unit_width + j];
        float mean = (float)(sum / sets->num_kept);
        for (int i = 0; i < sets->num_pruned; ++i) row[(size_t)sets->pruned[i] * unit_width + j] = mean;
      }
      continue;
    }
    for (int i = 0; i < sets->num_pruned; ++i) {
      size_t at = (size_t)sets->pruned[i] * unit_width;
      if (have_same && htp_same_usable(s->stored_at[sets->pruned[i]], step, max_age))
        memcpy(row + at, s->values + r * stored_stride + at, unit_width * sizeof(float));
      else memset(row + at, 0, unit_width * sizeof(float));
    }
  }
  return HTP_OK;
}
