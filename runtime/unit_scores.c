/*===- runtime/unit_scores.c - which units a plan sheds first ------------===*
 *
 * The scores behind htp_balancer_config.selection, in one place: each
 * rank's per-unit numbers, gathered by the hooks and by
 * htp_balancer_weights_updated, pushed into the unit table (unit_table.c, which
 * orders the shed sets by them) only when a new plan version is applied.
 *
 * Importance (config.selection == HTP_SELECT_IMPORTANCE, DESIGN §4: in
 * inference a calibration statistic). Per local unit of each pair:
 *   sample = mean over rows and the unit's columns of |activation| (the
 *            head's context columns, the MLP unit's hidden columns after
 *            GELU), taken in the one pass over the kept units' activations
 *            the hook computed anyway,
 *   score  = EWMA (alpha 0.3, the first sample taken as is) of sample x
 *            ||output weights||_F (the head's proj columns, the unit's fc2
 *            columns; computed once per pair, when its hook first sees the
 *            weights or they move to other buffers).
 * EWMA rather than a running max: a max never forgets one outlying batch,
 * an EWMA follows the inputs while staying smooth. Units not computed in an
 * iteration (pruned, handed off) keep their last score. Scores are pushed
 * into the unit table only when a new plan version is applied, so the shed
 * sets stay fixed between replans. They depend only on this rank's data (the
 * owner decides; the migration transfer tells helpers the ids).
 *
 * The variation priority (HTP_SELECT_VARIATION, the paper's choice): at
 * every htp_balancer_weights_updated each local unit's update norm
 * ||W_t - W_{t-1}|| over its whole shard (first rows, bias, second
 * columns) goes into a window of HTP__VARIATION_WINDOW steps; a unit's
 * score is the window's sum, pushed into the unit table at plan changes,
 * so the least-varying units are shed first. HTP_SELECT_DISPLACEMENT scores
 * the net change instead: each unit's distance from an anchor copy of its
 * weights taken every HTP__VARIATION_WINDOW steps (the older of two, so 16
 * to 31 steps back).
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HTP__IMPORTANCE_ALPHA 0.3 /* weight of the newest importance sample */

/* Shards (balance_internal.h) under short names. */
typedef htp__shard shard;
typedef htp__unit_shape unit_shape;

/* ===== Importance ======================================================= */

/* Element i of a tensor of the block's dtype (the hooks' activations and
 * weights: f32, or bf16 widened exactly). */
static inline double element(const void *base, int64_t i, int bf16) {
  return bf16 ? (double)htp_bf16_to_f32(((const htp_bf16 *)base)[i]) : ((const float *)base)[i];
}

/* Importance: the Frobenius norm of each unit's output weights (proj
 * columns of a head, fc2 columns of an MLP unit: `second` is [d, units *
 * width]), once per pair and buffer. */
void htp__scores_norms(htp_balancer *b, int32_t pair, const void *second, int64_t units,
                       int64_t width, int64_t model_dim) {
  const int64_t stride = units * width;
  const int bf16 = htp__element_bytes(&b->config) == 2;
  double *norm = b->norm + (size_t)pair * (size_t)b->max_units;
  for (int64_t i = 0; i < units; ++i) norm[i] = 0.0;
  for (int64_t o = 0; o < model_dim; ++o)
    for (int64_t i = 0; i < units; ++i)
      for (int64_t j = 0; j < width; ++j) {
        const double v = element(second, o * stride + i * width + j, bf16);
        norm[i] += v * v;
      }
  for (int64_t i = 0; i < units; ++i) norm[i] = sqrt(norm[i]);
  b->pairs[pair].normed = second;
}

/* Importance: one sample per kept unit from the activation the hook just
 * computed (act, rows of row_stride floats: unit i in columns [i * width,
 * (i + 1) * width), or the k-th kept unit in [k * width, ...) when compact),
 * folded into the unit's EWMA: one pass over the kept columns, row by row,
 * summed in double on the stack (kept units in chunks of 64). Pruned and
 * handed-off units keep their last score. */
void htp__scores_observe(htp_balancer *b, int32_t pair, const htp_unit_sets *s,
                         const void *act, int64_t rows, int64_t width, int64_t row_stride,
                         int compact) {
  if (!b->score || s->num_kept == 0) return;
  const int bf16 = htp__element_bytes(&b->config) == 2;
  double sums[64];
  const int chunk = (int)(sizeof sums / sizeof sums[0]);
  const size_t base = (size_t)pair * (size_t)b->max_units;
  for (int k0 = 0; k0 < s->num_kept; k0 += chunk) {
    const int n = s->num_kept - k0 < chunk ? s->num_kept - k0 : chunk;
    memset(sums, 0, sizeof sums);
    for (int64_t r = 0; r < rows; ++r)
      for (int k = 0; k < n; ++k) {
        const int64_t at = r * row_stride + (int64_t)(compact ? k0 + k : s->kept[k0 + k]) * width;
        double acc = 0.0;
        for (int64_t c = 0; c < width; ++c) acc += fabs(element(act, at + c, bf16));
        sums[k] += acc;
      }
    for (int k = 0; k < n; ++k) {
      const size_t at = base + (size_t)s->kept[k0 + k];
      double sample = sums[k] / ((double)rows * (double)width) * b->norm[at];
      if (isnan(sample)) continue;            /* keep the last score */
      if (sample > FLT_MAX) sample = FLT_MAX; /* scores stay finite floats */
      b->score[at] = b->observed[at]
                         ? b->score[at] + HTP__IMPORTANCE_ALPHA * (sample - b->score[at])
                         : sample;
      b->observed[at] = 1;
    }
  }
  b->pairs[pair].scored = 1;
}

/* ===== Variation and displacement ====================================== */

static htp_result create_variation(htp_balancer *b) {
  b->previous = calloc((size_t)b->num_pairs, sizeof *b->previous);
  b->window = calloc((size_t)b->num_pairs * (size_t)b->max_units * HTP__VARIATION_WINDOW,
                     sizeof *b->window);
  return b->previous && b->window ? HTP_OK : HTP_ERR_NOMEM;
}

static void variation_scores(const htp_balancer *b, int pair, float *out) {
  const int units = b->config.planner.units_per_rank[htp_pair_kind_of(pair)];
  for (int i = 0; i < units; ++i) {
    const double *w = b->window + ((size_t)pair * (size_t)b->max_units + (size_t)i) *
                                      HTP__VARIATION_WINDOW;
    double sum = 0.0;
    for (int k = 0; k < HTP__VARIATION_WINDOW; ++k) sum += w[k];
    out[i] = (float)sum;
  }
}

/* One variation sample of pair p. HTP_SELECT_VARIATION: each unit's update
 * norm since the last sample into the window's slot, and the weights kept
 * for the next one. HTP_SELECT_DISPLACEMENT: previous[p] holds two anchors,
 * the weights at the last two samples that were multiples of the window
 * (the older first); each unit's distance from the older one is its score
 * (slot 0; the other slots stay 0). */
static htp_result sample_variation(htp_balancer *b, int p) {
  const htp__registered_pair *reg = &b->pairs[p];
  const htp_pair_kind kind = htp_pair_kind_of(p);
  const int units = b->config.planner.units_per_rank[kind];
  const int64_t per_unit = htp__unit_floats(&b->config, kind);
  const unit_shape shape = {htp__unit_parts(kind), htp__unit_width(&b->config, kind),
                            b->config.model_dim, sizeof(float)}; /* f32 blocks only */
  const shard mine = {(float *)reg->first, (float *)reg->bias, (float *)reg->second, units};
  const int net = b->config.selection == HTP_SELECT_DISPLACEMENT;
  const size_t snapshot = (size_t)units * (size_t)per_unit;
  const int first = b->previous[p] == NULL;
  if (first && !(b->previous[p] = malloc((net ? 2 : 1) * snapshot * sizeof(float))))
    return htp__ctx_error(b->ctx, HTP_ERR_NOMEM, "htp_balancer_weights_updated: out of memory");
  if (htp__reserve_floats(&b->unit_staging, &b->unit_staging_capacity, (size_t)per_unit))
    return htp__ctx_error(b->ctx, HTP_ERR_NOMEM, "htp_balancer_weights_updated: out of memory");
  const size_t slot = net ? 0 : (size_t)(b->samples % HTP__VARIATION_WINDOW);
  /* displacement: a new anchor every window (the first sample fills both) */
  const int anchor = net && (first || b->samples % HTP__VARIATION_WINDOW == 0);
  float *older = b->previous[p], *newer = older + snapshot;
  if (anchor && !first) memcpy(older, newer, snapshot * sizeof(float));
  for (int32_t i = 0; i < units; ++i) {
    float *last = older + (size_t)i * (size_t)per_unit;
    const shard now = htp__shard_at(first ? last : b->unit_staging, 1, &shape);
    htp__copy_unit(&mine, i, &now, 0, &shape);
    if (anchor)
      memcpy(newer + (size_t)i * (size_t)per_unit, first ? last : b->unit_staging,
             (size_t)per_unit * sizeof(float));
    if (first) continue;
    double sum = 0.0;
    for (int64_t j = 0; j < per_unit; ++j) {
      const double delta = (double)b->unit_staging[j] - (double)last[j];
      sum += delta * delta;
    }
    b->window[((size_t)p * (size_t)b->max_units + (size_t)i) * HTP__VARIATION_WINDOW + slot] =
        sqrt(sum);
    if (!net) memcpy(last, b->unit_staging, (size_t)per_unit * sizeof(float));
  }
  return HTP_OK;
}

htp_result htp__scores_sample(htp_balancer *b) {
  if (!b->window) return HTP_OK;
  for (int p = 0; p < b->num_pairs; ++p) {
    if (!b->pairs[p].seen) continue;
    htp_result r = sample_variation(b, p);
    if (r != HTP_OK) return r;
  }
  b->samples++;
  return HTP_OK;
}

/* ===== Lifecycle and the push at a plan change ========================= */

htp_result htp__scores_create(htp_balancer *b) {
  const htp_select selection = b->config.selection;
  const size_t n = (size_t)b->num_pairs * (size_t)b->max_units;
  if (selection == HTP_SELECT_IMPORTANCE) {
    b->norm = calloc(n, sizeof *b->norm);
    b->score = calloc(n, sizeof *b->score);
    b->observed = calloc(n, sizeof *b->observed);
    b->pushed = calloc((size_t)b->max_units, sizeof *b->pushed);
    if (!b->norm || !b->score || !b->observed || !b->pushed) return HTP_ERR_NOMEM;
  }
  if (selection == HTP_SELECT_VARIATION || selection == HTP_SELECT_DISPLACEMENT) {
    b->pushed = calloc((size_t)b->max_units, sizeof *b->pushed);
    return b->pushed ? create_variation(b) : HTP_ERR_NOMEM;
  }
  return HTP_OK;
}

void htp__scores_free(htp_balancer *b) {
  if (b->previous)
    for (int p = 0; p < b->num_pairs; ++p) free(b->previous[p]);
  free(b->previous);
  free(b->window);
  free(b->norm);
  free(b->score);
  free(b->observed);
  free(b->pushed);
}

htp_result htp__scores_reset(htp_balancer *b) {
  htp__scores_free(b);
  b->previous = NULL;
  b->window = NULL;
  b->norm = b->score = NULL;
  b->observed = NULL;
  b->pushed = NULL;
  b->samples = 0;
  for (int p = 0; p < b->num_pairs; ++p) {
    b->pairs[p].normed = NULL;
    b->pairs[p].scored = 0;
  }
  return htp__scores_create(b);
}

htp_result htp__scores_push(htp_balancer *b) {
  for (int p = 0; (b->score || b->window) && p < b->num_pairs; ++p) {
    if (b->score && !b->pairs[p].scored) continue;
    const int u = b->config.planner.units_per_rank[htp_pair_kind_of(p)];
    if (b->score) {
      const double *score = b->score + (size_t)p * (size_t)b->max_units;
      for (int i = 0; i < u; ++i) b->pushed[i] = (float)score[i];
    } else {
      variation_scores(b, p, b->pushed);
    }
    htp_result r = htp_unit_table_set_scores(b->table, p, b->pushed);
    if (r != HTP_OK)
      return htp__ctx_error(b->ctx, r, "htp_balancer: pair %d: the unit table refused the "
                            "scores", p);
  }
  return HTP_OK;
}
