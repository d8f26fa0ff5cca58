/*===- test/balance/test_balance_train.c - the backward balance hooks -----===*
 *
 * htp_rt_attention_grad_f32 and htp_rt_mlp_grad_f32 (runtime/balance_hooks.c)
 * over threads of one local world, on the random split model of harness.h.
 * Each rank runs the forward hooks, then the backward hooks with the same dy
 * on every rank (the gradient of the pair's all-reduced output); the test
 * sums the ranks' dx parts as the block's all-reduce would. The main thread
 * checks against gradients written from the math in double, never against
 * the hooks' own output:
 *   1. no balancer, a hookless one, no context, no fc1 bias: the split
 *      pair's gradients (summed dx; each rank's weight-gradient shard);
 *   2. RESIZE, zero imputation: the gradients of the model without the
 *      pruned units; pruned units' gradients exactly 0; dx differs from the
 *      full model's;
 *   3. RESIZE, average: the pruning rank's dx part is its kept units' part
 *      times units / kept;
 *   4. RESIZE, same: after a backward that kept every unit, the pruned
 *      units' stored parts make dx the full model's (without that backward:
 *      the pruned model's); 4b: with same_max_age 1 they do one step
 *      later and not two (the pruned model's y and dx);
 *   5. MIGRATE (one and several helpers, both kinds, more units than one
 *      packed block): every weight gradient and dx are the full model's
 *      (handed-off units' gradients come back from the helpers);
 *   6. htp_balancer_weights_updated under MIGRATE: after new weights the
 *      helpers compute with them (the migrated units are sent again);
 *      without the call they would not, and the test sees it;
 *   7. HTP_SELECT_VARIATION: the units whose weights moved least over some
 *      updates are exactly the ones a RESIZE plan prunes (random selection
 *      prunes others); 7b: HTP_SELECT_DISPLACEMENT prunes units whose
 *      updates cancel, where variation prunes the ones that drift;
 *   8. htp_balancer_suspend: every unit computed while suspended, none of
 *      the time booked; pruning again after;
 *   9. bad arguments of the backward hooks;
 *  10. a plan the planner made after the forward but nobody applied: the
 *      backward refuses (or stays exact), never loses the handed-off units'
 *      gradients silently;
 *  11. RESIZE and MIGRATE as in 2 and 5 on the checked device, every
 *      buffer device memory.
 * Scratch buffers have exactly the floats kernels/htp_scratch.h asks for,
 * and gradient buffers hold garbage before each call (the hooks write them).
 *===----------------------------------------------------------------------===*/
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/balance_internal.h"
#include "runtime/htp.h"
#include "runtime/htp_ops.h"
#include "harness.h"

enum { PAIRS = 2 * LAYERS };

/* Relative error (to the reference's largest magnitude) allowed against a
 * double reference. */
#define TOLERANCE 1e-5
/* An error at least this large says two results really differ. */
#define DIFFERENT 1e-3
/* What gradient buffers hold before a backward hook: it must write them. */
#define GARBAGE 1000.0f

/* A kind's units in a shard: q/k/v (3) or fc1 (1) row blocks of `width`
 * rows, `units` per rank. */
typedef struct kind_layout {
  int parts, width, units;
} kind_layout;
static const kind_layout LAYOUT[HTP_PAIR_KINDS] = {[HTP_PAIR_ATTENTION] = {3, HEAD_DIM, HEADS},
                                                   [HTP_PAIR_MLP] = {1, WIDTH, UNITS}};

/* A kind's three weights (or their gradients) in a rank's shard. */
typedef struct pair_weights {
  float *first, *bias, *second;
} pair_weights;
static pair_weights weights_of(shard *s, int kind) {
  if (kind == HTP_PAIR_ATTENTION) return (pair_weights){s->wqkv, s->bqkv, s->wproj};
  return (pair_weights){s->w1, s->b1, s->w2};
}
/* The same, to read (the checks read recorded gradients only). */
static pair_weights view_of(const shard *s, int kind) { return weights_of((shard *)s, kind); }

/* The row of a rank's first weight (and the entry of its bias) that holds
 * row j of part q of local unit `unit`. */
static int first_row(const kind_layout *k, int q, int unit, int j) {
  return (q * k->units + unit) * k->width + j;
}
/* The column of a rank's second weight that holds column j of local unit
 * `unit`. */
static int second_column(const kind_layout *k, int unit, int j) { return unit * k->width + j; }

/* ----- the gradient reference, in double ---------------------------------- */

/* One pair's forward output, dx and weight gradients, in the global
 * layouts of the model (sized for the larger kind at MAX_TP). */
typedef struct pair_reference {
  double y[ROWS * DIM], dx[ROWS * DIM];
  double first[3 * MAX_TP * INNER * DIM], bias[3 * MAX_TP * INNER], second[DIM * MAX_TP * INNER];
} pair_reference;

/* Attention of layer l over the heads not excluded: S = q kᵀ / √hd, P =
 * softmax(S), context = P v, y = context wprojᵀ; then from dy:
 * dcontext = dy wproj, dwproj = dyᵀ context, dP = dcontext vᵀ, dv = Pᵀ
 * dcontext, dS = P ∘ (dP - rowsum(dP ∘ P)), dq = dS k / √hd, dk = dSᵀ q /
 * √hd, dwqkv = dqkvᵀ x, dbqkv = Σ_rows dqkv, dx = dqkv wqkv. */
static void reference_attention_grad(const model *m, int l, const float *dy,
                                     const uint8_t *excluded, pair_reference *g) {
  const int heads = m->tp * HEADS, inner = heads * HEAD_DIM, wide = 3 * inner;
  double *qkv = malloc(sizeof(double) * ROWS * wide);
  double *probs = malloc(sizeof(double) * BATCH * heads * TOKENS * TOKENS);
  double *context = malloc(sizeof(double) * ROWS * inner);
  double *dcontext = calloc((size_t)ROWS * inner, sizeof(double));
  double *dqkv = calloc((size_t)ROWS * wide, sizeof(double));
  assert_true(qkv && probs && context && dcontext && dqkv);
  memset(g, 0, sizeof *g);
  reference_attention_parts(m, l, excluded, g->y, qkv, probs, context);
  const float *wqkv = m->wqkv[l], *wproj = m->wproj[l], *x = m->x;
  for (int r = 0; r < ROWS; ++r)
    for (int i = 0; i < inner; ++i) {
      if (excluded && excluded[i / HEAD_DIM]) continue;
      double acc = 0;
      for (int o = 0; o < DIM; ++o) acc += (double)dy[r * DIM + o] * wproj[o * inner + i];
      dcontext[r * inner + i] = acc;
    }
  for (int o = 0; o < DIM; ++o)
    for (int i = 0; i < inner; ++i) {
      double acc = 0;
      for (int r = 0; r < ROWS; ++r) acc += (double)dy[r * DIM + o] * context[r * inner + i];
      g->second[o * inner + i] = acc;
    }
  const double scale = 1.0 / sqrt((double)HEAD_DIM);
  for (int b = 0; b < BATCH; ++b)
    for (int h = 0; h < heads; ++h) {
      if (excluded && excluded[h]) continue;
      for (int t = 0; t < TOKENS; ++t) {
        const double *p = probs + ((b * heads + h) * TOKENS + t) * TOKENS;
        const int row_t = (b * TOKENS + t) * wide + h * HEAD_DIM;
        const double *dc = dcontext + (b * TOKENS + t) * inner + h * HEAD_DIM;
        double dp[TOKENS], dot = 0;
        for (int s = 0; s < TOKENS; ++s) {
          const double *v = qkv + (b * TOKENS + s) * wide + 2 * inner + h * HEAD_DIM;
          dp[s] = 0;
          for (int d = 0; d < HEAD_DIM; ++d) dp[s] += dc[d] * v[d];
          dot += dp[s] * p[s];
        }
        for (int s = 0; s < TOKENS; ++s) {
          const int row_s = (b * TOKENS + s) * wide + h * HEAD_DIM;
          const double ds = p[s] * (dp[s] - dot);
          for (int d = 0; d < HEAD_DIM; ++d) {
            dqkv[row_t + d] += ds * qkv[row_s + inner + d] * scale;     /* dq */
            dqkv[row_s + inner + d] += ds * qkv[row_t + d] * scale;     /* dk */
            dqkv[row_s + 2 * inner + d] += p[s] * dc[d];                /* dv */
          }
        }
      }
    }
  for (int o = 0; o < wide; ++o)
    for (int r = 0; r < ROWS; ++r) {
      const double d = dqkv[r * wide + o];
      g->bias[o] += d;
      for (int c = 0; c < DIM; ++c) {
        g->first[o * DIM + c] += d * x[r * DIM + c];
        g->dx[r * DIM + c] += d * wqkv[o * DIM + c];
      }
    }
  free(qkv);
  free(probs);
  free(context);
  free(dcontext);
  free(dqkv);
}

/* MLP of layer l over the units not excluded, neuron by neuron: pre = x·w1
 * + b1, y += GELU(pre) w2; dact = dy·w2, dpre = dact GELU'(pre), dw2 +=
 * dy GELU(pre), dw1 += dpre x, db1 += dpre, dx += dpre w1. */
static void reference_mlp_grad(const model *m, int l, const float *dy, const uint8_t *excluded,
                               int tanh_approx, pair_reference *g) {
  const int hidden = m->tp * HIDDEN;
  const float *w1 = m->w1[l], *w2 = m->w2[l], *x = m->x;
  memset(g, 0, sizeof *g);
  for (int n = 0; n < hidden; ++n) {
    if (excluded && excluded[n / WIDTH]) continue;
    for (int r = 0; r < ROWS; ++r) {
      double pre = m->b1[l][n], dact = 0;
      for (int c = 0; c < DIM; ++c) pre += (double)x[r * DIM + c] * w1[n * DIM + c];
      const double act = reference_gelu(pre, tanh_approx);
      for (int o = 0; o < DIM; ++o) {
        g->y[r * DIM + o] += act * w2[o * hidden + n];
        g->second[o * hidden + n] += (double)dy[r * DIM + o] * act;
        dact += (double)dy[r * DIM + o] * w2[o * hidden + n];
      }
      const double dpre = dact * reference_gelu_grad(pre, tanh_approx);
      g->bias[n] += dpre;
      for (int c = 0; c < DIM; ++c) {
        g->first[n * DIM + c] += dpre * x[r * DIM + c];
        g->dx[r * DIM + c] += dpre * w1[n * DIM + c];
      }
    }
  }
}

static void reference_grad(const model *m, int pair, const float *dy, const uint8_t *excluded,
                           int tanh_approx, pair_reference *g) {
  if (htp_pair_kind_of(pair) == HTP_PAIR_ATTENTION)
    reference_attention_grad(m, htp_pair_layer(pair), dy, excluded, g);
  else
    reference_mlp_grad(m, htp_pair_layer(pair), dy, excluded, tanh_approx, g);
}

/* Rank r's slice of a pair's reference weight gradient, in its shard's
 * layout (as make_shard slices the weights). */
static void reference_slice(const pair_reference *g, int kind, int tp, int r, double *first,
                            double *bias, double *second) {
  const kind_layout *k = &LAYOUT[kind];
  const int local = k->units * k->width, global = tp * local;
  for (int q = 0; q < k->parts; ++q)
    for (int i = 0; i < local; ++i) {
      const int from = q * global + r * local + i, to = q * local + i;
      bias[to] = g->bias[from];
      for (int c = 0; c < DIM; ++c) first[to * DIM + c] = g->first[from * DIM + c];
    }
  for (int o = 0; o < DIM; ++o)
    for (int i = 0; i < local; ++i) second[o * local + i] = g->second[o * global + r * local + i];
}

/* ----- what the ranks do -------------------------------------------------- */

typedef enum balancer_kind { NO_BALANCER, HOOKLESS, HOOKED } balancer_kind;

typedef struct scenario {
  int tp;
  balancer_kind balancer;
  htp_policy policy;
  htp_impute impute;
  double speeds[MAX_TP]; /* the forced plan's (HOOKED) */
  int tanh_approx;       /* the MLP's GELU */
  int no_mlp_bias;       /* b1 and db1 NULL (the model's b1 zeroed) */
  int null_ctx;          /* the hooks get ctx NULL (NO_BALANCER) */
  int same_warmup;       /* a backward under the initial plan, before the forced one */
  int64_t same_max_age;  /* the config's */
  int64_t age;           /* steps the balancer's clock moves on after the warmup */
  int suspend;           /* phase 0 suspended, phase 1 not */
  int refresh;           /* phase 1 runs the_new_model's weights: 1 announced by
                          * htp_balancer_weights_updated and re-applied, -1 silently */
  htp_select selection;  /* [HTP_SELECT_RANDOM] */
  int oscillate;         /* variation_main: test 7b's updates */
  int on_device;         /* the checked device: every buffer device memory (test 11) */
} scenario;

/* What one phase (forward + backward) recorded; each rank writes its rows. */
typedef struct record {
  float y[PAIRS][ROWS * DIM];          /* all-reduced forward output (rank 0) */
  float dx[MAX_TP][PAIRS][ROWS * DIM]; /* each rank's dx part */
  shard grad[MAX_TP][LAYERS];          /* each rank's weight gradients */
  uint8_t pruned[PAIRS][MAX_TP * UNITS]; /* global unit ids */
  uint8_t sent[PAIRS][MAX_TP * UNITS];
  int in[MAX_TP][PAIRS];      /* migrated-in units */
  int owners[MAX_TP][PAIRS];  /* distinct owners of those */
  int helpers[MAX_TP][PAIRS]; /* distinct helpers of this rank's units */
  uint64_t bytes[MAX_TP];     /* htp_migration_total_bytes after the phase */
  double hook_seconds[MAX_TP]; /* booked during the phase */
} record;

enum { PHASES = 2 };
static record rec[PHASES];
static const scenario *the_scenario;
static const model *the_model;     /* x and the weights the ranks start from */
static const model *the_new_model; /* refresh: the weights of phase 1 */
static float the_dy[PAIRS][ROWS * DIM];

/* What a rank computes with on the checked device: the input, dy, its
 * shards, gradients and outputs in one device allocation (the host
 * buffers' twins, uploaded or downloaded around each hook pass). */
typedef struct device_block {
  float x[ROWS * DIM], dy[PAIRS][ROWS * DIM];
  shard shards[LAYERS], grads[LAYERS];
  float y[PAIRS][ROWS * DIM], dx[PAIRS][ROWS * DIM];
} device_block;

/* A rank's buffers; every scratch exactly the size kernels/htp_scratch.h
 * gives (device memory on the checked device, where `device` holds the
 * rest). */
typedef struct rank_buffers {
  shard shards[LAYERS], grads[LAYERS];
  float y[PAIRS][ROWS * DIM], dx[PAIRS][ROWS * DIM];
  float *attention_scratch, *mlp_scratch, *attention_grad_scratch, *mlp_grad_scratch;
  htp_ctx *device_ctx; /* the context the device memory is of, or NULL */
  device_block *device;
} rank_buffers;

static float *scratch_of(int64_t floats) {
  return floats > 0 ? malloc(sizeof(float) * (size_t)floats) : NULL;
}

static rank_buffers *buffers_create(void) {
  rank_buffers *buf = calloc(1, sizeof *buf);
  if (!buf) return NULL;
  buf->attention_scratch = scratch_of(htp_rt_attention_scratch_floats(BATCH, TOKENS, HEADS, HEAD_DIM));
  buf->mlp_scratch = scratch_of(htp_rt_mlp_scratch_floats(ROWS, HIDDEN, WIDTH));
  buf->attention_grad_scratch =
      scratch_of(htp_rt_attention_grad_scratch_floats(BATCH, TOKENS, DIM, HEADS, HEAD_DIM));
  buf->mlp_grad_scratch = scratch_of(htp_rt_mlp_grad_scratch_floats(ROWS, DIM, HIDDEN, WIDTH));
  return buf;
}

/* The checked device's twins of buf: the block and the scratches (the host
 * scratches freed); the input, dy and the shards uploaded. */
static htp_result buffers_to_device(htp_ctx *ctx, rank_buffers *buf) {
  float **scratches[] = {&buf->attention_scratch, &buf->mlp_scratch,
                         &buf->attention_grad_scratch, &buf->mlp_grad_scratch};
  const int64_t floats[] = {
      htp_rt_attention_scratch_floats(BATCH, TOKENS, HEADS, HEAD_DIM),
      htp_rt_mlp_scratch_floats(ROWS, HIDDEN, WIDTH),
      htp_rt_attention_grad_scratch_floats(BATCH, TOKENS, DIM, HEADS, HEAD_DIM),
      htp_rt_mlp_grad_scratch_floats(ROWS, DIM, HIDDEN, WIDTH)};
  buf->device_ctx = ctx;
  htp_result r = htp_mem_alloc(ctx, sizeof *buf->device, (void **)&buf->device);
  for (int i = 0; r == HTP_OK && i < 4; ++i) {
    free(*scratches[i]);
    *scratches[i] = NULL;
    r = htp_mem_alloc(ctx, sizeof(float) * (size_t)floats[i], (void **)scratches[i]);
  }
  device_block *d = buf->device;
  if (r == HTP_OK) r = htp_mem_upload(ctx, d->x, the_model->x, sizeof d->x);
  if (r == HTP_OK) r = htp_mem_upload(ctx, d->dy, the_dy, sizeof d->dy);
  if (r == HTP_OK) r = htp_mem_upload(ctx, d->shards, buf->shards, sizeof d->shards);
  return r;
}

static void buffers_destroy(rank_buffers *buf) {
  if (!buf) return;
  if (buf->device_ctx) {
    htp_mem_free(buf->device_ctx, buf->device);
    htp_mem_free(buf->device_ctx, buf->attention_scratch);
    htp_mem_free(buf->device_ctx, buf->mlp_scratch);
    htp_mem_free(buf->device_ctx, buf->attention_grad_scratch);
    htp_mem_free(buf->device_ctx, buf->mlp_grad_scratch);
  } else {
    free(buf->attention_scratch);
    free(buf->mlp_scratch);
    free(buf->attention_grad_scratch);
    free(buf->mlp_grad_scratch);
  }
  free(buf);
}

static int buffers_ok(const rank_buffers *buf) {
  return buf && buf->attention_scratch && buf->mlp_scratch && buf->attention_grad_scratch &&
         buf->mlp_grad_scratch;
}

/* Every pair's forward hook, then the all-reduce of the partial sums (on
 * the device: computed there, y downloaded). */
static htp_result forward(htp_ctx *ctx, htp_ctx *hook_ctx, rank_buffers *buf) {
  const scenario *sc = the_scenario;
  device_block *d = buf->device;
  htp_result r = harness_forward(ctx, hook_ctx, d ? d->x : the_model->x,
                                 d ? d->shards : buf->shards, d ? d->y : buf->y,
                                 buf->attention_scratch, buf->mlp_scratch, sc->no_mlp_bias,
                                 sc->tanh_approx);
  if (r == HTP_OK && d) r = htp_mem_download(ctx, buf->y, d->y, sizeof buf->y);
  return r;
}

static void fill(float *p, size_t n, float value) {
  for (size_t i = 0; i < n; ++i) p[i] = value;
}

/* Every pair's backward hook, in pair order on every rank (the gradient
 * return talks to the flows' peers); dx and the gradients start as garbage. */
static htp_result backward(htp_ctx *hook_ctx, rank_buffers *buf) {
  const scenario *sc = the_scenario;
  device_block *d = buf->device;
  const float *x = d ? d->x : the_model->x;
  fill(&buf->dx[0][0], sizeof buf->dx / sizeof(float), GARBAGE);
  for (int l = 0; l < LAYERS; ++l) {
    shard *g = &buf->grads[l];
    float *arrays[] = {g->wqkv, g->bqkv, g->wproj, g->w1, g->b1, g->w2};
    const size_t sizes[] = {sizeof g->wqkv, sizeof g->bqkv, sizeof g->wproj,
                            sizeof g->w1, sizeof g->b1, sizeof g->w2};
    for (int a = 0; a < 6; ++a) fill(arrays[a], sizes[a] / sizeof(float), GARBAGE);
  }
  if (d) { /* the garbage goes up too */
    htp_result r = htp_mem_upload(buf->device_ctx, d->dx, buf->dx, sizeof d->dx);
    if (r == HTP_OK) r = htp_mem_upload(buf->device_ctx, d->grads, buf->grads, sizeof d->grads);
    if (r != HTP_OK) return r;
  }
  for (int l = 0; l < LAYERS; ++l) {
    const shard *s = d ? &d->shards[l] : &buf->shards[l];
    shard *g = d ? &d->grads[l] : &buf->grads[l];
    const float *dy_attention = d ? d->dy[2 * l] : the_dy[2 * l];
    const float *dy_mlp = d ? d->dy[2 * l + 1] : the_dy[2 * l + 1];
    float *dx_attention = d ? d->dx[2 * l] : buf->dx[2 * l];
    float *dx_mlp = d ? d->dx[2 * l + 1] : buf->dx[2 * l + 1];
    htp_result r = htp_rt_attention_grad_f32(
        hook_ctx, 2 * l, x, s->wqkv, s->bqkv, s->wproj, dy_attention, dx_attention, g->wqkv,
        g->bqkv, g->wproj, buf->attention_grad_scratch, BATCH, TOKENS, DIM, HEADS, HEAD_DIM);
    if (r == HTP_OK)
      r = htp_rt_mlp_grad_f32(hook_ctx, 2 * l + 1, x, s->w1, sc->no_mlp_bias ? NULL : s->b1,
                              s->w2, dy_mlp, dx_mlp, g->w1, sc->no_mlp_bias ? NULL : g->b1, g->w2,
                              buf->mlp_grad_scratch, ROWS, DIM, HIDDEN, WIDTH, sc->tanh_approx);
    if (r != HTP_OK) return r;
  }
  if (d) {
    htp_result r = htp_mem_download(buf->device_ctx, buf->dx, d->dx, sizeof buf->dx);
    if (r == HTP_OK) r = htp_mem_download(buf->device_ctx, buf->grads, d->grads, sizeof buf->grads);
    return r;
  }
  return HTP_OK;
}

static htp_balancer_config balancer_config(const scenario *sc) {
  htp_balancer_config c = harness_balancer_config(sc->tp, sc->policy, sc->selection, sc->impute);
  c.same_max_age = sc->same_max_age;
  if (sc->balancer == HOOKLESS) c.model_dim = c.head_dim = c.mlp_unit_width = 0;
  return c;
}

/* Forces the plan of sc->speeds and makes the hooks follow it. */
static htp_result force_plan(htp_balancer *b, const double *speeds) {
  htp_result r = htp_planner_plan_speeds(htp_balancer_planner(b), speeds, NULL);
  return r == HTP_OK ? htp__balancer_apply(b, htp_planner_plan(htp_balancer_planner(b))) : r;
}

static int distinct(const int32_t *ranks, int n) {
  int seen[MAX_TP] = {0}, count = 0;
  for (int i = 0; i < n; ++i) count += !seen[ranks[i]]++;
  return count;
}

/* The unit sets and bytes moved, into rc (nothing without a hooked balancer). */
static htp_result record_sets(htp_balancer *b, int rank, record *rc) {
  htp_unit_table *table = htp__balancer_table(b);
  if (!table) return HTP_OK;
  for (int p = 0; p < PAIRS; ++p) {
    htp_unit_sets s;
    htp_result r = htp_unit_table_get(table, p, &s);
    if (r != HTP_OK) return r;
    for (int i = 0; i < s.num_pruned; ++i) rc->pruned[p][rank * s.units + s.pruned[i]] = 1;
    for (int i = 0; i < s.num_out; ++i) rc->sent[p][rank * s.units + s.out_unit[i]] = 1;
    rc->in[rank][p] = s.num_in;
    rc->owners[rank][p] = distinct(s.in_src, s.num_in);
    rc->helpers[rank][p] = distinct(s.out_dst, s.num_out);
  }
  rc->bytes[rank] = htp_migration_total_bytes(htp__balancer_migration(b));
  return HTP_OK;
}

/* What a rank thread holds. */
typedef struct rank_state {
  htp_ctx *ctx;
  htp_balancer *b; /* NULL for NO_BALANCER */
  rank_buffers *buf;
} rank_state;

/* Rank run->rank of the_scenario: its buffers, its shards of the_model, its
 * context and its balancer. st is complete enough for rank_close even on
 * failure. */
static htp_result rank_open(const rank_run *run, rank_state *st) {
  const scenario *sc = the_scenario;
  memset(st, 0, sizeof *st);
  st->buf = buffers_create();
  if (!buffers_ok(st->buf)) return HTP_ERR_NOMEM;
  for (int l = 0; l < LAYERS; ++l) make_shard(the_model, l, run->rank, &st->buf->shards[l]);
  htp_result r = htp_ctx_create(run->world, run->rank, &st->ctx);
  if (r == HTP_OK && sc->on_device) r = buffers_to_device(st->ctx, st->buf);
  if (r == HTP_OK && sc->balancer != NO_BALANCER) {
    htp_balancer_config c = balancer_config(sc);
    r = htp_balancer_create(st->ctx, &c, &st->b);
  }
  return r;
}

static void rank_close(rank_state *st) {
  htp_balancer_destroy(st->b);
  buffers_destroy(st->buf); /* device memory first: the context frees it */
  htp_ctx_destroy(st->ctx);
}

/* The last forward and backward (and the unit sets) into rc. */
static htp_result record_phase(const rank_state *st, int rank, record *rc) {
  if (rank == 0) memcpy(rc->y, st->buf->y, sizeof rc->y);
  memcpy(rc->dx[rank], st->buf->dx, sizeof st->buf->dx);
  memcpy(rc->grad[rank], st->buf->grads, sizeof st->buf->grads);
  return record_sets(st->b, rank, rc);
}

/* Opens the rank (st) and leaves through CHECK if that failed; then ctx, b
 * and buf name its parts. */
#define OPEN_RANK(run, st)                                                                  \
  rank_state st;                                                                            \
  const htp_result opened_ = rank_open(run, &st);                                           \
  htp_ctx *ctx = st.ctx;                                                                    \
  htp_balancer *b = st.b;                                                                   \
  rank_buffers *buf = st.buf;                                                               \
  CHECK(opened_ == HTP_OK)

static void *rank_main(void *arg) {
  rank_run *run = arg;
  const scenario *sc = the_scenario;
  const int rank = run->rank;
  OPEN_RANK(run, st);
  htp_ctx *hook_ctx = sc->null_ctx ? NULL : ctx;
  if (sc->balancer == HOOKED) {
    /* The initial plan keeps every unit; the forward hooks register the
     * weights the migration packs from. */
    CHECK(forward(ctx, hook_ctx, buf) == HTP_OK);
    if (sc->same_warmup) CHECK(backward(hook_ctx, buf) == HTP_OK);
    CHECK(force_plan(b, sc->speeds) == HTP_OK);
    b->steps += sc->age; /* as that many htp_balancer_step calls, without replanning */
  }
  const int phases = sc->suspend || sc->refresh ? 2 : 1;
  for (int phase = 0; phase < phases; ++phase) {
    record *rc = &rec[phase];
    if (sc->suspend) CHECK(htp_balancer_suspend(b, phase == 0) == HTP_OK);
    if (sc->refresh && phase == 1) {
      /* The optimizer's step, in place: the hooks see the same buffers. */
      for (int l = 0; l < LAYERS; ++l) make_shard(the_new_model, l, rank, &buf->shards[l]);
      if (sc->refresh > 0) CHECK(htp_balancer_weights_updated(b) == HTP_OK);
      CHECK(htp__balancer_apply(b, htp_planner_plan(htp_balancer_planner(b))) == HTP_OK);
    }
    const double booked = htp_balancer_hook_seconds(b);
    CHECK(forward(ctx, hook_ctx, buf) == HTP_OK);
    CHECK(backward(hook_ctx, buf) == HTP_OK);
    rc->hook_seconds[rank] = htp_balancer_hook_seconds(b) - booked;
    CHECK(record_phase(&st, rank, rc) == HTP_OK);
  }
done:
  rank_close(&st);
  return NULL;
}

/* ----- checks on the main thread ------------------------------------------ */

/* A fresh model for tp ranks and its dy (zeroed fc1 bias: no_mlp_bias). */
static model *new_model(int tp, uint64_t seed, int no_mlp_bias) {
  model *m = malloc(sizeof *m);
  assert_non_null(m);
  model_init(m, tp, seed);
  for (int p = 0; p < PAIRS; ++p)
    for (int i = 0; i < ROWS * DIM; ++i) the_dy[p][i] = uniform(-1, 1);
  if (no_mlp_bias)
    for (int l = 0; l < LAYERS; ++l) memset(m->b1[l], 0, sizeof(float) * (size_t)tp * HIDDEN);
  return m;
}

static void delete_model(model *m) {
  if (!m) return;
  model_free(m);
  free(m);
}

/* Runs sc on model m (new_weights: phase 1's, for refresh). */
static void run_scenario(const scenario *sc, const model *m, const model *new_weights) {
  memset(rec, 0, sizeof rec);
  the_scenario = sc;
  the_model = m;
  the_new_model = new_weights;
  harness_device = sc->on_device ? HTP_DEVICE_CHECKED : HTP_DEVICE_CPU;
  run_world(sc->tp, rank_main, NULL);
  harness_device = HTP_DEVICE_CPU;
}

/* Largest relative errors of a phase against a reference. */
typedef struct errors {
  double y, dx, dw;
} errors;

/* The phase against model m without each pair's excluded units (NULL: the
 * full model): the forward output, the ranks' dx parts summed (in rank
 * order, as the all-reduce), and every rank's weight-gradient shard. */
static errors compare(const model *m, const record *rc, const scenario *sc,
                      const uint8_t (*excluded)[MAX_TP * UNITS]) {
  errors e = {0, 0, 0};
  pair_reference *g = malloc(sizeof *g);
  double *first = malloc(sizeof(double) * 3 * INNER * DIM);
  double *bias = malloc(sizeof(double) * 3 * INNER), *second = malloc(sizeof(double) * DIM * INNER);
  float summed[ROWS * DIM];
  assert_true(g && first && bias && second);
  for (int p = 0; p < PAIRS; ++p) {
    const int kind = htp_pair_kind_of(p), l = htp_pair_layer(p);
    const kind_layout *k = &LAYOUT[kind];
    const int local = k->units * k->width;
    reference_grad(m, p, the_dy[p], excluded ? excluded[p] : NULL, sc->tanh_approx, g);
    e.y = fmax(e.y, relative_error(rc->y[p], g->y, ROWS * DIM));
    memcpy(summed, rc->dx[0][p], sizeof summed);
    for (int r = 1; r < sc->tp; ++r)
      for (int i = 0; i < ROWS * DIM; ++i) summed[i] += rc->dx[r][p][i];
    e.dx = fmax(e.dx, relative_error(summed, g->dx, ROWS * DIM));
    for (int r = 0; r < sc->tp; ++r) {
      reference_slice(g, kind, sc->tp, r, first, bias, second);
      pair_weights got = view_of(&rc->grad[r][l], kind);
      e.dw = fmax(e.dw, relative_error(got.first, first, k->parts * local * DIM));
      e.dw = fmax(e.dw, relative_error(got.second, second, DIM * local));
      if (!(kind == HTP_PAIR_MLP && sc->no_mlp_bias))
        e.dw = fmax(e.dw, relative_error(got.bias, bias, k->parts * local));
    }
  }
  free(g);
  free(first);
  free(bias);
  free(second);
  return e;
}

static void print_errors(const char *what, errors e) {
  fprintf(stderr, "%-44s y %.2e  dx %.2e  dw %.2e\n", what, e.y, e.dx, e.dw);
}

/* Asserts the phase equals the reference without `excluded` (NULL: full). */
static void assert_matches(const char *what, const model *m, const record *rc,
                           const scenario *sc, const uint8_t (*excluded)[MAX_TP * UNITS]) {
  errors e = compare(m, rc, sc, excluded);
  print_errors(what, e);
  assert_true(e.y <= TOLERANCE);
  assert_true(e.dx <= TOLERANCE);
  assert_true(e.dw <= TOLERANCE);
}

/* Pruned units recorded in the phase, after asserting that every element of
 * their weight gradients (rows, bias, second columns) is exactly 0. */
static int assert_pruned_gradients_zero(const record *rc, const scenario *sc) {
  int pruned = 0;
  for (int p = 0; p < PAIRS; ++p) {
    const int kind = htp_pair_kind_of(p);
    const kind_layout *k = &LAYOUT[kind];
    for (int r = 0; r < sc->tp; ++r) {
      pair_weights g = view_of(&rc->grad[r][htp_pair_layer(p)], kind);
      for (int unit = 0; unit < k->units; ++unit) {
        if (!rc->pruned[p][r * k->units + unit]) continue;
        pruned++;
        for (int q = 0; q < k->parts; ++q)
          for (int j = 0; j < k->width; ++j) {
            const int row = first_row(k, q, unit, j);
            if (!(kind == HTP_PAIR_MLP && sc->no_mlp_bias)) assert_true(g.bias[row] == 0.0f);
            for (int c = 0; c < DIM; ++c) assert_true(g.first[row * DIM + c] == 0.0f);
          }
        for (int o = 0; o < DIM; ++o)
          for (int j = 0; j < k->width; ++j)
            assert_true(g.second[o * k->units * k->width + second_column(k, unit, j)] == 0.0f);
      }
    }
  }
  return pruned;
}

/* Pruned units of rank r in every pair: round(gamma u) as a half-speed
 * rank's RESIZE asks (2 of 4 heads, 3 of 6 MLP units). */
static void assert_half_pruned(const record *rc, int r) {
  for (int p = 0; p < PAIRS; ++p) {
    const int u = LAYOUT[htp_pair_kind_of(p)].units;
    int n = 0;
    for (int i = 0; i < u; ++i) n += rc->pruned[p][r * u + i];
    assert_int_equal(n, u / 2);
  }
}

/* ----- the cases ---------------------------------------------------------- */

/* 1: without a balancer (also: a hookless one, no context, no fc1 bias,
 * GELU's tanh form) the hooks differentiate the plain split pair. */
static void test_01_no_balancer(void **unused) {
  (void)unused;
  const struct {
    int tp;
    balancer_kind balancer;
    int tanh_approx, no_mlp_bias, null_ctx;
    const char *what;
  } cases[] = {
      {1, NO_BALANCER, 0, 0, 0, "tp 1"},
      {2, NO_BALANCER, 0, 0, 0, "tp 2"},
      {3, NO_BALANCER, 1, 0, 0, "tp 3, tanh GELU"},
      {4, NO_BALANCER, 0, 1, 0, "tp 4, no fc1 bias"},
      {2, HOOKLESS, 1, 0, 0, "tp 2, hookless balancer, tanh GELU"},
      {3, NO_BALANCER, 0, 0, 1, "tp 3, no context"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    scenario sc = {.tp = cases[c].tp, .balancer = cases[c].balancer,
                   .tanh_approx = cases[c].tanh_approx, .no_mlp_bias = cases[c].no_mlp_bias,
                   .null_ctx = cases[c].null_ctx};
    model *m = new_model(sc.tp, 101 + c, sc.no_mlp_bias);
    run_scenario(&sc, m, NULL);
    assert_matches(cases[c].what, m, &rec[0], &sc, NULL);
    delete_model(m);
  }
}

/* 2: RESIZE, zero imputation (rank 1 at half speed): the gradients of the
 * model without the pruned units, pruned units' exactly 0, and dx is not
 * the full model's. */
static void test_02_resize_zero(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 4; ++tp) {
    scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_RESIZE,
                   .impute = HTP_IMPUTE_ZERO, .speeds = {1, 0.5, 1, 1},
                   .tanh_approx = tp == 3, .no_mlp_bias = tp == 4};
    model *m = new_model(tp, 200 + (uint64_t)tp, sc.no_mlp_bias);
    run_scenario(&sc, m, NULL);
    const record *rc = &rec[0];
    assert_half_pruned(rc, 1);
    assert_matches("resize zero: vs the pruned model", m, rc, &sc, rc->pruned);
    assert_int_equal(assert_pruned_gradients_zero(&rec[0], &sc), LAYERS * (HEADS / 2 + UNITS / 2));
    errors full = compare(m, &rec[0], &sc, NULL);
    print_errors("resize zero: vs the full model", full);
    assert_true(full.dx > DIFFERENT && full.dw > DIFFERENT);
    delete_model(m);
  }
}

/* 3: RESIZE, average imputation: the pruning rank's dx part is its kept
 * units' part times units / kept; the others' are their full parts; weight
 * gradients as with zero imputation. */
static void test_03_resize_average(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 3; ++tp) {
    scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_RESIZE,
                   .impute = HTP_IMPUTE_AVERAGE, .speeds = {1, 0.5, 1, 1}, .tanh_approx = tp == 3};
    model *m = new_model(tp, 300 + (uint64_t)tp, 0);
    run_scenario(&sc, m, NULL);
    const record *rc = &rec[0];
    assert_half_pruned(rc, 1);
    assert_true(assert_pruned_gradients_zero(rc, &sc) > 0);
    assert_true(compare(m, rc, &sc, rc->pruned).dw <= TOLERANCE);
    pair_reference *g = malloc(sizeof *g);
    double *want = malloc(sizeof(double) * ROWS * DIM);
    assert_true(g && want);
    for (int p = 0; p < PAIRS; ++p) {
      const int u = LAYOUT[htp_pair_kind_of(p)].units;
      for (int r = 0; r < tp; ++r) {
        /* Rank r's kept units alone: every other unit excluded. */
        uint8_t others[MAX_TP * UNITS];
        int kept = 0;
        for (int i = 0; i < tp * u; ++i) {
          others[i] = i / u != r || rc->pruned[p][i];
          kept += !others[i];
        }
        reference_grad(m, p, the_dy[p], others, sc.tanh_approx, g);
        const double scale = (double)u / kept;
        for (int i = 0; i < ROWS * DIM; ++i) want[i] = scale * g->dx[i];
        const double error = relative_error(rc->dx[r][p], want, ROWS * DIM);
        if (error > TOLERANCE) fprintf(stderr, "pair %d rank %d: dx part error %g\n", p, r, error);
        assert_true(error <= TOLERANCE);
        if (r == 1) { /* the scale is there: the unscaled part is far off */
          assert_true(kept < u);
          assert_true(relative_error(rc->dx[r][p], g->dx, ROWS * DIM) > DIFFERENT);
        } else {
          assert_int_equal(kept, u);
        }
      }
    }
    free(g);
    free(want);
    delete_model(m);
  }
}

/* 4: RESIZE, same imputation. With a backward under the initial plan first
 * (every unit's dx part stored), the same x, dy and weights give the FULL
 * model's dx, while the pruned units get no weight gradient. Without it
 * nothing is stored yet: the pruned model's dx. */
static void test_04_resize_same(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 3; ++tp)
    for (int warmup = 1; warmup >= 0; --warmup) {
      scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_RESIZE,
                     .impute = HTP_IMPUTE_SAME, .speeds = {1, 0.5, 1, 1}, .tanh_approx = tp == 3,
                     .same_warmup = warmup};
      model *m = new_model(tp, 400 + (uint64_t)tp, 0);
      run_scenario(&sc, m, NULL);
      const record *rc = &rec[0];
      assert_half_pruned(rc, 1);
      assert_true(assert_pruned_gradients_zero(rc, &sc) > 0);
      errors full = compare(m, rc, &sc, NULL), pruned = compare(m, rc, &sc, rc->pruned);
      print_errors(warmup ? "same, stored: vs the full model" : "same, nothing stored: vs full", full);
      print_errors(warmup ? "same, stored: vs the pruned model" : "same, nothing stored: vs pruned",
                   pruned);
      assert_true(pruned.dw <= TOLERANCE);
      assert_true(full.y <= TOLERANCE); /* the forward's same imputation, as the backward's */
      if (warmup) {
        assert_true(full.dx <= TOLERANCE);
        assert_true(pruned.dx > DIFFERENT);
      } else {
        assert_true(pruned.dx <= TOLERANCE);
        assert_true(full.dx > DIFFERENT);
      }
      delete_model(m);
    }
}

/* 4b: same_max_age 1: the values stored by the warmup stand in one step
 * later (the full model's y and dx), and two steps later they are too old:
 * the pruned units read zero in forward and backward (the pruned model's). */
static void test_04b_same_max_age(void **unused) {
  (void)unused;
  for (int age = 1; age <= 2; ++age) {
    scenario sc = {.tp = 2, .balancer = HOOKED, .policy = HTP_POLICY_RESIZE,
                   .impute = HTP_IMPUTE_SAME, .speeds = {1, 0.5, 1, 1}, .same_warmup = 1,
                   .same_max_age = 1, .age = age};
    model *m = new_model(2, 402, 0);
    run_scenario(&sc, m, NULL);
    const record *rc = &rec[0];
    assert_half_pruned(rc, 1);
    errors full = compare(m, rc, &sc, NULL), pruned = compare(m, rc, &sc, rc->pruned);
    print_errors(age == 1 ? "same, 1 step old: vs the full model" : "same, 2 steps old: vs pruned",
                 age == 1 ? full : pruned);
    assert_true(pruned.dw <= TOLERANCE);
    const errors *match = age == 1 ? &full : &pruned, *other = age == 1 ? &pruned : &full;
    assert_true(match->y <= TOLERANCE && match->dx <= TOLERANCE);
    assert_true(other->y > DIFFERENT && other->dx > DIFFERENT);
    delete_model(m);
  }
}

/* 5: MIGRATE: every weight gradient, the summed dx and the forward output
 * are the full model's: the handed-off units' gradients come back from
 * their helpers. One helper (tp 2), two owners into one helper (tp 3, no
 * fc1 bias: helpers get zero bias and their bias gradient is dropped), one
 * owner over several helpers (tp 4, rank 1), and a helper with more units
 * than one packed block (tp 4, three stragglers). */
static void test_05_migrate(void **unused) {
  (void)unused;
  const struct {
    int tp;
    double speeds[MAX_TP];
    int tanh_approx, no_mlp_bias;
    int most_owners, most_helpers, beyond_one_block;
  } cases[] = {
      {2, {1, 0.2}, 0, 0, 1, 1, 0},
      {3, {1, 0.3, 0.3}, 1, 1, 2, 1, 0},
      {4, {1, 0.4, 1, 1}, 0, 0, 1, 2, 0},
      {4, {1, 0.1, 0.1, 0.1}, 1, 0, 3, 1, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    const int tp = cases[c].tp;
    scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_MIGRATE,
                   .impute = HTP_IMPUTE_ZERO, .tanh_approx = cases[c].tanh_approx,
                   .no_mlp_bias = cases[c].no_mlp_bias};
    memcpy(sc.speeds, cases[c].speeds, sizeof sc.speeds);
    model *m = new_model(tp, 500 + c, sc.no_mlp_bias);
    run_scenario(&sc, m, NULL);
    const record *rc = &rec[0];
    char what[64];
    snprintf(what, sizeof what, "migrate, tp %d, case %zu", tp, c);
    assert_matches(what, m, rc, &sc, NULL);
    assert_int_equal(assert_pruned_gradients_zero(rc, &sc), 0);
    for (int p = 0; p < PAIRS; ++p) {
      const int u = LAYOUT[htp_pair_kind_of(p)].units;
      int sent = 0, in = 0, most_in = 0, most_owners = 0, most_helpers = 0;
      for (int i = 0; i < tp * u; ++i) sent += rc->sent[p][i];
      for (int r = 0; r < tp; ++r) {
        in += rc->in[r][p];
        most_in = rc->in[r][p] > most_in ? rc->in[r][p] : most_in;
        most_owners = rc->owners[r][p] > most_owners ? rc->owners[r][p] : most_owners;
        most_helpers = rc->helpers[r][p] > most_helpers ? rc->helpers[r][p] : most_helpers;
      }
      assert_true(sent > 0);
      assert_int_equal(in, sent);
      assert_true(most_owners >= cases[c].most_owners);
      assert_true(most_helpers >= cases[c].most_helpers);
      if (cases[c].beyond_one_block) assert_true(most_in > u);
    }
    delete_model(m);
  }
}

/* Phase 1's weights: the model's, moved by a step of the size an optimizer
 * might take (same x and dy). */
static model *stepped_model(int tp, uint64_t seed) {
  model *m = new_model(tp, seed, 0);
  for (int l = 0; l < LAYERS; ++l) {
    float *weights[] = {m->wqkv[l], m->bqkv[l], m->wproj[l], m->w1[l], m->b1[l], m->w2[l]};
    const size_t sizes[] = {(size_t)3 * tp * INNER * DIM, (size_t)3 * tp * INNER,
                            (size_t)DIM * tp * INNER, (size_t)tp * HIDDEN * DIM,
                            (size_t)tp * HIDDEN, (size_t)DIM * tp * HIDDEN};
    for (int w = 0; w < 6; ++w)
      for (size_t i = 0; i < sizes[w]; ++i) weights[w][i] += uniform(-0.1f, 0.1f);
  }
  return m;
}

/* 6: weights changed in place under a MIGRATE plan. Announced with
 * htp_balancer_weights_updated and re-applied (same plan version), the
 * migrated units are sent again (the bytes moved double) and forward and
 * backward are the NEW model's. Not announced, nothing moves and the
 * helpers compute with the old copies: the forward output and the returned
 * gradients are off. */
static void test_06_weights_refresh(void **unused) {
  (void)unused;
  for (int announced = 1; announced >= -1; announced -= 2) {
    const int tp = 3;
    scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_MIGRATE,
                   .impute = HTP_IMPUTE_ZERO, .speeds = {1, 0.3, 0.3}, .tanh_approx = 1,
                   .refresh = announced};
    model *old = new_model(tp, 600, 0);
    model *stepped = stepped_model(tp, 600);
    run_scenario(&sc, old, stepped);
    assert_matches("refresh: before the step", old, &rec[0], &sc, NULL);
    uint64_t moved = 0;
    for (int r = 0; r < tp; ++r) {
      moved += rec[0].bytes[r];
      assert_true(rec[1].bytes[r] == (announced > 0 ? 2 : 1) * rec[0].bytes[r]);
    }
    assert_true(moved > 0);
    if (announced > 0) {
      assert_matches("refresh: after the announced step", stepped, &rec[1], &sc, NULL);
    } else {
      errors e = compare(stepped, &rec[1], &sc, NULL);
      print_errors("refresh: after a silent step (stale copies)", e);
      assert_true(e.y > DIFFERENT && e.dx > DIFFERENT && e.dw > DIFFERENT);
    }
    delete_model(old);
    delete_model(stepped);
  }
}

/* ----- 7: variation selection --------------------------------------------- */

/* The units whose weights barely move (the others move a lot): half of
 * each rank's units, a different half for ranks 1 and 2 and per layer, and
 * no index prefix. */
static int quiet_unit(int rank, int pair, int unit) {
  return (unit + rank + htp_pair_layer(pair)) % 2 == 0;
}

/* One optimizer-like update of a rank's shards in place: quiet units by
 * ~1e-4 in every weight; loud ones by ~0.05 in ONE of their first rows,
 * bias or second columns (which one depends on the unit and layer, so
 * every part alone makes some unit loud). */
static void perturb_units(shard *shards, int rank, uint64_t *state) {
  for (int p = 0; p < PAIRS; ++p) {
    const int kind = htp_pair_kind_of(p);
    const kind_layout *k = &LAYOUT[kind];
    pair_weights w = weights_of(&shards[htp_pair_layer(p)], kind);
    int loud = 0;
    for (int unit = 0; unit < k->units; ++unit) {
      const int quiet = quiet_unit(rank, p, unit);
      const int part = quiet ? -1 : (loud++ + htp_pair_layer(p)) % 3;
      const float a = quiet ? 1e-4f : 0.05f;
      for (int q = 0; q < k->parts; ++q)
        for (int j = 0; j < k->width; ++j) {
          const int row = first_row(k, q, unit, j);
          if (part < 0 || part == 0)
            for (int c = 0; c < DIM; ++c) w.first[row * DIM + c] += draw(state, -a, a);
          if (part < 0 || part == 1) w.bias[row] += draw(state, -a, a);
        }
      if (part < 0 || part == 2)
        for (int o = 0; o < DIM; ++o)
          for (int j = 0; j < k->width; ++j)
            w.second[o * k->units * k->width + second_column(k, unit, j)] += draw(state, -a, a);
    }
  }
}

/* Defined with test 7b. */
static void oscillate_units(shard *shards, int rank, int round);

/* The first weights' sample, then the scenario's updates (4 perturbations,
 * or 20 oscillations: test 7b), then the forced plan's shed sets. */
static void *variation_main(void *arg) {
  rank_run *run = arg;
  const scenario *sc = the_scenario;
  const int rank = run->rank;
  uint64_t state = 0x5eed0000u + (uint64_t)rank;
  OPEN_RANK(run, st);
  CHECK(forward(ctx, ctx, buf) == HTP_OK); /* registers the weights */
  CHECK(htp_balancer_weights_updated(b) == HTP_OK); /* the first sample: the starting point */
  for (int round = 1; round <= (sc->oscillate ? 20 : 4); ++round) {
    if (sc->oscillate) oscillate_units(buf->shards, rank, round);
    else perturb_units(buf->shards, rank, &state);
    CHECK(htp_balancer_weights_updated(b) == HTP_OK);
  }
  CHECK(force_plan(b, sc->speeds) == HTP_OK);
  CHECK(record_sets(b, rank, &rec[0]) == HTP_OK);
done:
  rank_close(&st);
  return NULL;
}

/* Pruned units that are not the quiet ones of a resizing rank (ranks 1, 2),
 * after variation_main's updates under selection sel at tp 3 (ranks 1 and 2
 * at half speed prune half their units). */
static int selection_mismatches(model *m, htp_select sel, int oscillate) {
  const int tp = 3;
  scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_RESIZE,
                 .impute = HTP_IMPUTE_ZERO, .speeds = {1, 0.5, 0.5}, .selection = sel,
                 .oscillate = oscillate};
  memset(rec, 0, sizeof rec);
  the_scenario = &sc;
  the_model = m;
  run_world(tp, variation_main, NULL);
  assert_half_pruned(&rec[0], 1);
  assert_half_pruned(&rec[0], 2);
  int mismatches = 0;
  for (int p = 0; p < PAIRS; ++p) {
    const int u = LAYOUT[htp_pair_kind_of(p)].units;
    for (int r = 0; r < tp; ++r)
      for (int i = 0; i < u; ++i)
        mismatches += rec[0].pruned[p][r * u + i] != (r != 0 && quiet_unit(r, p, i));
  }
  fprintf(stderr, "%s selection%s: %d units pruned other than the quiet ones\n",
          htp_select_name(sel), oscillate ? " (quiet units oscillate)" : "", mismatches);
  return mismatches;
}

/* 7: HTP_SELECT_VARIATION: after four updates, a RESIZE plan (ranks 1 and 2
 * at half speed) prunes exactly the quiet units, though each loud unit
 * moved in only its rows, its bias or its second columns. Random selection
 * on the same updates prunes others. */
static void test_07_variation(void **unused) {
  (void)unused;
  model *m = new_model(3, 700, 0);
  assert_int_equal(selection_mismatches(m, HTP_SELECT_VARIATION, 0), 0);
  assert_true(selection_mismatches(m, HTP_SELECT_RANDOM, 0) > 0);
  delete_model(m);
}

/* 7b: variation against displacement. Quiet units now oscillate, +0.05
 * and -0.05 on alternate updates (a long path, no net change after an even
 * number of steps); the others drift by 1e-3 an update (a short path, a
 * net change). After 20 updates (the older anchor is the first sample,
 * 20 steps back) displacement prunes exactly the oscillating units and
 * variation exactly the drifting ones. */
static void oscillate_units(shard *shards, int rank, int round) {
  for (int p = 0; p < PAIRS; ++p) {
    const int kind = htp_pair_kind_of(p);
    const kind_layout *k = &LAYOUT[kind];
    pair_weights w = weights_of(&shards[htp_pair_layer(p)], kind);
    for (int unit = 0; unit < k->units; ++unit) {
      const float a = quiet_unit(rank, p, unit) ? (round % 2 ? 0.05f : -0.05f) : 1e-3f;
      for (int q = 0; q < k->parts; ++q)
        for (int j = 0; j < k->width; ++j) {
          const int row = first_row(k, q, unit, j);
          for (int c = 0; c < DIM; ++c) w.first[row * DIM + c] += a;
          w.bias[row] += a;
        }
      for (int o = 0; o < DIM; ++o)
        for (int j = 0; j < k->width; ++j)
          w.second[o * k->units * k->width + second_column(k, unit, j)] += a;
    }
  }
}

static void test_07b_displacement(void **unused) {
  (void)unused;
  model *m = new_model(3, 701, 0);
  int resized = 0; /* units pruned on ranks 1 and 2: each is a mismatch twice when wrong */
  for (int p = 0; p < PAIRS; ++p) resized += LAYOUT[htp_pair_kind_of(p)].units;
  assert_int_equal(selection_mismatches(m, HTP_SELECT_DISPLACEMENT, 1), 0);
  assert_int_equal(selection_mismatches(m, HTP_SELECT_VARIATION, 1), 2 * resized);
  delete_model(m);
}

/* 7c: displacement's anchors move every window: a one-head pair (7
 * floats) whose weights all read t at sample t is scored from sample 0
 * up to sample 31, then from sample 16 (the older anchor, 16 back). */
static void test_07c_displacement_anchor(void **unused) {
  (void)unused;
  htp_balancer b;
  memset(&b, 0, sizeof b);
  htp__registered_pair pair;
  memset(&pair, 0, sizeof pair);
  float first[3], bias[3], second[1];
  pair.first = first;
  pair.bias = bias;
  pair.second = second;
  pair.seen = 1;
  b.pairs = &pair;
  b.num_pairs = 1;
  b.max_units = 1;
  b.config.selection = HTP_SELECT_DISPLACEMENT;
  b.config.planner.units_per_rank[0] = b.config.planner.units_per_rank[1] = 1;
  b.config.model_dim = b.config.head_dim = b.config.mlp_unit_width = 1;
  assert_int_equal(htp__scores_create(&b), HTP_OK);
  for (int t = 0; t <= 32; ++t) {
    for (int i = 0; i < 3; ++i) first[i] = bias[i] = (float)t;
    second[0] = (float)t;
    assert_int_equal(htp__scores_sample(&b), HTP_OK);
    if (t == 31) assert_true(fabs(b.window[0] - 31.0 * sqrt(7.0)) <= 1e-9);
  }
  assert_true(fabs(b.window[0] - 16.0 * sqrt(7.0)) <= 1e-9);
  htp__scores_free(&b);
  free(b.unit_staging);
}

/* 8: suspended under a RESIZE plan, the hooks compute every unit (forward
 * and backward are the full model's) and book no time; resumed, they prune
 * again. */
static void test_08_suspend(void **unused) {
  (void)unused;
  const int tp = 2;
  scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_RESIZE,
                 .impute = HTP_IMPUTE_ZERO, .speeds = {1, 0.5}, .tanh_approx = 1, .suspend = 1};
  model *m = new_model(tp, 800, 0);
  run_scenario(&sc, m, NULL);
  assert_half_pruned(&rec[0], 1);
  assert_matches("suspended: vs the full model", m, &rec[0], &sc, NULL);
  const record *resumed_rc = &rec[1];
  assert_matches("resumed: vs the pruned model", m, resumed_rc, &sc, resumed_rc->pruned);
  assert_true(assert_pruned_gradients_zero(&rec[1], &sc) > 0);
  errors resumed = compare(m, &rec[1], &sc, NULL);
  print_errors("resumed: vs the full model", resumed);
  assert_true(resumed.y > DIFFERENT && resumed.dx > DIFFERENT);
  for (int r = 0; r < tp; ++r) {
    assert_true(rec[0].hook_seconds[r] == 0.0);
    assert_true(rec[1].hook_seconds[r] > 0.0);
  }
  delete_model(m);
}

/* ----- 9: bad arguments ----------------------------------------------------- */

/* The hook returned HTP_ERR_INVALID and its message names the hook and says
 * `why`. */
static int refused(htp_ctx *ctx, htp_result r, const char *hook, const char *why) {
  const char *message = htp_last_error(ctx);
  if (r == HTP_ERR_INVALID && strstr(message, hook) && strstr(message, why)) return 1;
  fprintf(stderr, "expected HTP_ERR_INVALID from %s saying \"%s\"; got %d: %s\n", hook, why,
          (int)r, message);
  return 0;
}

static void *bad_arguments_main(void *arg) {
  rank_run *run = arg;
  OPEN_RANK(run, st);
  const float *x = the_model->x, *dy = the_dy[0];
  const shard *s = &buf->shards[0];
  shard *g = &buf->grads[0];
  float *dx = buf->dx[0], *as = buf->attention_grad_scratch, *ms = buf->mlp_grad_scratch;
  const char *att = "htp_rt_attention_grad_f32", *mlp = "htp_rt_mlp_grad_f32";
#define ATTENTION(pair_, x_, first_, bias_, dy_, dx_, dfirst_, dbias_, scratch_, heads_, dim_,  \
                  width_)                                                                       \
  htp_rt_attention_grad_f32(ctx, pair_, x_, first_, bias_, s->wproj, dy_, dx_, dfirst_, dbias_, \
                            g->wproj, scratch_, BATCH, TOKENS, dim_, heads_, width_)
#define MLP(pair_, first_, bias_, second_, dx_, dbias_, dsecond_, scratch_, rows_, hidden_,     \
            width_)                                                                             \
  htp_rt_mlp_grad_f32(ctx, pair_, x, first_, bias_, second_, dy, dx_, g->w1, dbias_, dsecond_,  \
                      scratch_, rows_, DIM, hidden_, width_, 0)

  /* What follows would be accepted but for the one argument changed. */
  CHECK(ATTENTION(0, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS, DIM, HEAD_DIM) ==
        HTP_OK);
  CHECK(MLP(1, s->w1, s->b1, s->w2, dx, g->b1, g->w2, ms, ROWS, HIDDEN, WIDTH) == HTP_OK);
  CHECK(MLP(1, s->w1, NULL, s->w2, dx, NULL, g->w2, ms, ROWS, HIDDEN, WIDTH) == HTP_OK);

  /* NULL buffers */
  CHECK(refused(ctx, ATTENTION(0, NULL, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS,
                               DIM, HEAD_DIM), att, "NULL"));
  CHECK(refused(ctx, ATTENTION(0, x, NULL, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS, DIM,
                               HEAD_DIM), att, "NULL"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, NULL, dx, g->wqkv, g->bqkv, as, HEADS,
                               DIM, HEAD_DIM), att, "NULL"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, dy, NULL, g->wqkv, g->bqkv, as, HEADS,
                               DIM, HEAD_DIM), att, "NULL"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, dy, dx, NULL, g->bqkv, as, HEADS, DIM,
                               HEAD_DIM), att, "NULL"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, NULL, HEADS,
                               DIM, HEAD_DIM), att, "NULL"));
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, NULL, dx, g->b1, g->w2, ms, ROWS, HIDDEN, WIDTH), mlp,
                "NULL"));
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, s->w2, dx, g->b1, NULL, ms, ROWS, HIDDEN, WIDTH), mlp,
                "NULL"));
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, s->w2, dx, g->b1, g->w2, NULL, ROWS, HIDDEN, WIDTH),
                mlp, "NULL"));
  /* a bias without its gradient, a gradient without its bias */
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, s->w2, dx, NULL, g->w2, ms, ROWS, HIDDEN, WIDTH), mlp,
                "bias gradient"));
  CHECK(refused(ctx, MLP(1, s->w1, NULL, s->w2, dx, g->b1, g->w2, ms, ROWS, HIDDEN, WIDTH), mlp,
                "bias gradient"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, NULL, as, HEADS, DIM,
                               HEAD_DIM), att, "bias gradient"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, NULL, dy, dx, g->wqkv, g->bqkv, as, HEADS, DIM,
                               HEAD_DIM), att, "bias gradient"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, NULL, dy, dx, g->wqkv, NULL, as, HEADS, DIM,
                               HEAD_DIM), att, "bqkv is NULL"));
  /* hidden not a multiple of the unit width, sizes < 1 */
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, s->w2, dx, g->b1, g->w2, ms, ROWS, HIDDEN - 1, WIDTH),
                mlp, "multiple"));
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, s->w2, dx, g->b1, g->w2, ms, ROWS, HIDDEN, 0), mlp,
                "multiple"));
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, s->w2, dx, g->b1, g->w2, ms, 0, HIDDEN, WIDTH), mlp,
                ">= 1"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, 0, DIM,
                               HEAD_DIM), att, ">= 1"));
  /* pairs out of range or of the other kind */
  CHECK(refused(ctx, ATTENTION(PAIRS, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS,
                               DIM, HEAD_DIM), att, "out of range"));
  CHECK(refused(ctx, ATTENTION(-2, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS, DIM,
                               HEAD_DIM), att, "out of range"));
  CHECK(refused(ctx, ATTENTION(1, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS, DIM,
                               HEAD_DIM), att, "MLP pair"));
  CHECK(refused(ctx, MLP(2, s->w1, s->b1, s->w2, dx, g->b1, g->w2, ms, ROWS, HIDDEN, WIDTH), mlp,
                "attention pair"));
  CHECK(refused(ctx, MLP(PAIRS + 1, s->w1, s->b1, s->w2, dx, g->b1, g->w2, ms, ROWS, HIDDEN,
                         WIDTH), mlp, "out of range"));
  /* shapes other than the balancer's (scratch large enough for each) */
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS - 1,
                               DIM, HEAD_DIM), att, "disagree"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS,
                               DIM - 1, HEAD_DIM), att, "disagree"));
  CHECK(refused(ctx, ATTENTION(0, x, s->wqkv, s->bqkv, dy, dx, g->wqkv, g->bqkv, as, HEADS, DIM,
                               HEAD_DIM - 1), att, "disagree"));
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, s->w2, dx, g->b1, g->w2, ms, ROWS, HIDDEN - WIDTH,
                         WIDTH), mlp, "disagree"));
  CHECK(refused(ctx, MLP(1, s->w1, s->b1, s->w2, dx, g->b1, g->w2, ms, ROWS, HIDDEN, 2), mlp,
                "disagree"));
#undef ATTENTION
#undef MLP
  /* without a context: refused, without a message */
  CHECK(htp_rt_mlp_grad_f32(NULL, 1, x, s->w1, s->b1, s->w2, NULL, dx, g->w1, g->b1, g->w2, ms,
                            ROWS, DIM, HIDDEN, WIDTH, 0) == HTP_ERR_INVALID);
  CHECK(htp_rt_attention_grad_f32(NULL, 0, x, s->wqkv, s->bqkv, s->wproj, dy, dx, g->wqkv,
                                  g->bqkv, g->wproj, as, BATCH, TOKENS, DIM, HEADS, 0) ==
        HTP_ERR_INVALID);
  /* a failing hook fails the world: the peers will not see its all-reduce */
  CHECK(htp_world_status(run->world) == HTP_ERR_INVALID);
  CHECK(htp_balancer_weights_updated(NULL) == HTP_ERR_INVALID);
  CHECK(htp_balancer_suspend(NULL, 1) == HTP_ERR_INVALID);
  CHECK(htp_balancer_suspend(b, 0) == HTP_OK);
done:
  rank_close(&st);
  return NULL;
}

/* 9: every bad argument of the backward hooks is refused with
 * HTP_ERR_INVALID and a message saying what (one rank: failing its world
 * is harmless). */
static void test_09_bad_arguments(void **unused) {
  (void)unused;
  scenario sc = {.tp = 1, .balancer = HOOKED, .policy = HTP_POLICY_RESIZE};
  model *m = new_model(1, 900, 0);
  the_scenario = &sc;
  the_model = m;
  run_world(1, bad_arguments_main, NULL);
  delete_model(m);
}

/* ----- 10: a plan in force that was never applied ---------------------- */

static htp_result unapplied_result[MAX_TP];
static char unapplied_message[MAX_TP][256];

/* Forward under an applied MIGRATE plan; then the planner makes a plan
 * without migration that nobody applies (htp_balancer_step alone would do
 * the same); then the backward of the same forward. */
static void *unapplied_main(void *arg) {
  rank_run *run = arg;
  const scenario *sc = the_scenario;
  const int rank = run->rank;
  OPEN_RANK(run, st);
  CHECK(forward(ctx, ctx, buf) == HTP_OK);
  CHECK(force_plan(b, sc->speeds) == HTP_OK);
  CHECK(forward(ctx, ctx, buf) == HTP_OK);
  const double healthy[MAX_TP] = {1, 1, 1, 1};
  CHECK(htp_planner_plan_speeds(htp_balancer_planner(b), healthy, NULL) == HTP_OK);
  CHECK(htp_planner_plan(htp_balancer_planner(b))->num_flows[HTP_PAIR_MLP] == 0);
  unapplied_result[rank] = backward(ctx, buf);
  snprintf(unapplied_message[rank], sizeof unapplied_message[rank], "%s", htp_last_error(ctx));
  CHECK(record_phase(&st, rank, &rec[0]) == HTP_OK);
done:
  rank_close(&st);
  return NULL;
}

/* 10: the backward hooks follow the plan the forward ran under (the one
 * applied), not a newer one the planner made meanwhile: with a plan in
 * force that was never applied, they either still return exact gradients
 * (the handed-off units' from their helpers) or refuse, on every rank of
 * the flows; never HTP_OK with the handed-off units' gradients lost. */
static void test_10_unapplied_plan(void **unused) {
  (void)unused;
  const int tp = 2;
  scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_MIGRATE,
                 .impute = HTP_IMPUTE_ZERO, .speeds = {1, 0.2}};
  model *m = new_model(tp, 1000, 0);
  memset(rec, 0, sizeof rec);
  the_scenario = &sc;
  the_model = m;
  run_world(tp, unapplied_main, NULL);
  fprintf(stderr, "backward under an unapplied plan: %s, %s\n",
          htp_strerror(unapplied_result[0]), htp_strerror(unapplied_result[1]));
  if (unapplied_result[0] == HTP_OK || unapplied_result[1] == HTP_OK) {
    assert_int_equal(unapplied_result[0], HTP_OK);
    assert_int_equal(unapplied_result[1], HTP_OK);
    errors e = compare(m, &rec[0], &sc, NULL);
    print_errors("backward under an unapplied plan", e);
    assert_true(e.dx <= TOLERANCE && e.dw <= TOLERANCE);
  } else {
    for (int r = 0; r < tp; ++r) {
      fprintf(stderr, "rank %d: %s\n", r, unapplied_message[r]);
      assert_non_null(strstr(unapplied_message[r], "not the one applied"));
    }
  }
  delete_model(m);
}

/* 11: the backward hooks on the checked device (kernels/checked: device
 * memory the host cannot read, the CUDA kernels' contracts): every buffer
 * is device memory, so a gather, a scatter or a gradient return done with
 * host loops would fault. RESIZE with zero imputation gives the pruned
 * model's gradients (pruned units' exactly 0), MIGRATE the full model's
 * (one helper and several, more units than one packed block), against the
 * same double references as on the CPU. */
static void test_11_on_checked_device(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 3; ++tp) {
    scenario sc = {.tp = tp, .balancer = HOOKED, .policy = HTP_POLICY_RESIZE,
                   .impute = HTP_IMPUTE_ZERO, .speeds = {1, 0.5, 1, 1},
                   .no_mlp_bias = tp == 3, .on_device = 1};
    model *m = new_model(tp, 1100 + (uint64_t)tp, sc.no_mlp_bias);
    run_scenario(&sc, m, NULL);
    assert_half_pruned(&rec[0], 1);
    assert_matches("checked device, resize zero: vs the pruned model", m, &rec[0], &sc,
                   rec[0].pruned);
    assert_int_equal(assert_pruned_gradients_zero(&rec[0], &sc),
                     LAYERS * (HEADS / 2 + UNITS / 2));
    delete_model(m);
  }
  const struct {
    int tp;
    double speeds[MAX_TP];
  } cases[] = {{2, {1, 0.2}}, {4, {1, 0.1, 0.1, 0.1}}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    scenario sc = {.tp = cases[c].tp, .balancer = HOOKED, .policy = HTP_POLICY_MIGRATE,
                   .impute = HTP_IMPUTE_ZERO, .tanh_approx = (int)c, .on_device = 1};
    memcpy(sc.speeds, cases[c].speeds, sizeof sc.speeds);
    model *m = new_model(sc.tp, 1150 + c, 0);
    run_scenario(&sc, m, NULL);
    assert_matches("checked device, migrate: vs the full model", m, &rec[0], &sc, NULL);
    int in = 0;
    for (int r = 0; r < sc.tp; ++r)
      for (int p = 0; p < PAIRS; ++p) in += rec[0].in[r][p];
    assert_true(in > 0);
    delete_model(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_01_no_balancer),
      cmocka_unit_test(test_02_resize_zero),
      cmocka_unit_test(test_03_resize_average),
      cmocka_unit_test(test_04_resize_same),
      cmocka_unit_test(test_04b_same_max_age),
      cmocka_unit_test(test_05_migrate),
      cmocka_unit_test(test_06_weights_refresh),
      cmocka_unit_test(test_07_variation),
      cmocka_unit_test(test_07b_displacement),
      cmocka_unit_test(test_07c_displacement_anchor),
      cmocka_unit_test(test_08_suspend),
      cmocka_unit_test(test_09_bad_arguments),
      cmocka_unit_test(test_10_unapplied_plan),
      cmocka_unit_test(test_11_on_checked_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
