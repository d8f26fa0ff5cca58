/*===- test/balance/harness.h - what the balance tests share ---------------===*
 *
 * The harness of the balance hook tests (test_balance.c, the forward hooks;
 * test_balance_train.c, the backward ones): a random two-layer ViT-like
 * model with odd sizes, its Megatron shards, the unsharded forward reference
 * in double written from the math, and a local world whose ranks are
 * threads. Rank threads only compute and record; they report a failed CHECK
 * through `failures`, which run_world asserts is 0 on the main thread.
 * Include after <cmocka.h> and runtime/htp_ops.h. Everything here is static
 * inline: each test is one translation unit and uses what it needs.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TEST_BALANCE_HARNESS_H
#define HTP_TEST_BALANCE_HARNESS_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  MAX_TP = 4,
  LAYERS = 2,
  BATCH = 2,
  TOKENS = 7,
  ROWS = BATCH * TOKENS,
  DIM = 26,
  HEADS = 4, /* per rank */
  HEAD_DIM = 5,
  UNITS = 6, /* MLP units per rank */
  WIDTH = 3, /* neurons per MLP unit */
  HIDDEN = UNITS * WIDTH /* per rank */
};
#define INNER (HEADS * HEAD_DIM)

/* ----- random numbers ----------------------------------------------------- */

/* xorshift64 on *state: a uniform float in [lo, hi). Rank threads keep
 * their own state; the model's draws use rng_state (main thread only). */
static inline float draw(uint64_t *state, float lo, float hi) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return lo + (hi - lo) * (float)((*state >> 11) * (1.0 / 9007199254740992.0));
}

static uint64_t rng_state;
static inline float uniform(float lo, float hi) { return draw(&rng_state, lo, hi); }

static inline float *random_floats(size_t n, float scale) {
  float *p = malloc(n * sizeof(float));
  assert_non_null(p);
  for (size_t i = 0; i < n; ++i) p[i] = uniform(-scale, scale);
  return p;
}

/* ----- the global (unsharded) model --------------------------------------- */

typedef struct model {
  int tp;
  float x[ROWS * DIM];
  /* per layer, global: wqkv [3 * tp * INNER, DIM], bqkv, wproj [DIM, tp * INNER],
   * w1 [tp * HIDDEN, DIM], b1, w2 [DIM, tp * HIDDEN] */
  float *wqkv[LAYERS], *bqkv[LAYERS], *wproj[LAYERS], *w1[LAYERS], *b1[LAYERS], *w2[LAYERS];
} model;

static inline void model_init(model *m, int tp, uint64_t seed) {
  rng_state = seed;
  m->tp = tp;
  for (int i = 0; i < ROWS * DIM; ++i) m->x[i] = uniform(-1, 1);
  for (int l = 0; l < LAYERS; ++l) {
    m->wqkv[l] = random_floats((size_t)3 * tp * INNER * DIM, 0.4f);
    m->bqkv[l] = random_floats((size_t)3 * tp * INNER, 0.1f);
    m->wproj[l] = random_floats((size_t)DIM * tp * INNER, 0.2f);
    m->w1[l] = random_floats((size_t)tp * HIDDEN * DIM, 0.4f);
    m->b1[l] = random_floats((size_t)tp * HIDDEN, 0.2f);
    m->w2[l] = random_floats((size_t)DIM * tp * HIDDEN, 0.3f);
  }
}

static inline void model_free(model *m) {
  for (int l = 0; l < LAYERS; ++l) {
    free(m->wqkv[l]); free(m->bqkv[l]); free(m->wproj[l]);
    free(m->w1[l]); free(m->b1[l]); free(m->w2[l]);
  }
}

/* Rank r's Megatron shard of layer l (its weights stay in these buffers). */
typedef struct shard {
  float wqkv[3 * INNER * DIM], bqkv[3 * INNER], wproj[DIM * INNER];
  float w1[HIDDEN * DIM], b1[HIDDEN], w2[DIM * HIDDEN];
} shard;

static inline void make_shard(const model *m, int l, int r, shard *s) {
  const int tp = m->tp, ginner = tp * INNER, ghidden = tp * HIDDEN;
  for (int part = 0; part < 3; ++part) {
    memcpy(s->wqkv + part * INNER * DIM, m->wqkv[l] + (part * ginner + r * INNER) * DIM,
           sizeof(float) * INNER * DIM);
    memcpy(s->bqkv + part * INNER, m->bqkv[l] + part * ginner + r * INNER, sizeof(float) * INNER);
  }
  for (int o = 0; o < DIM; ++o) {
    memcpy(s->wproj + o * INNER, m->wproj[l] + o * ginner + r * INNER, sizeof(float) * INNER);
    memcpy(s->w2 + o * HIDDEN, m->w2[l] + o * ghidden + r * HIDDEN, sizeof(float) * HIDDEN);
  }
  memcpy(s->w1, m->w1[l] + r * HIDDEN * DIM, sizeof(float) * HIDDEN * DIM);
  memcpy(s->b1, m->b1[l] + r * HIDDEN, sizeof(float) * HIDDEN);
}

/* ----- the hooks over a rank's shards ------------------------------------- */

/* The balancer config for the model above on tp ranks: its pairs and units,
 * hooks of its shapes, seed 7, detection that follows the last iteration
 * (hysteresis 1, EWMA alpha 1). */
static inline htp_balancer_config harness_balancer_config(int tp, htp_policy policy,
                                                          htp_select selection,
                                                          htp_impute impute) {
  htp_balancer_config c = HTP_BALANCER_CONFIG_INITIALIZER;
  c.planner.world_size = tp;
  c.planner.num_layers = LAYERS;
  c.planner.units_per_rank[HTP_PAIR_ATTENTION] = HEADS;
  c.planner.units_per_rank[HTP_PAIR_MLP] = UNITS;
  c.planner.policy = policy;
  c.planner.hysteresis_iters = 1;
  c.planner.ewma_alpha = 1.0;
  c.seed = 7;
  c.selection = selection;
  c.impute = impute;
  c.model_dim = DIM;
  c.head_dim = HEAD_DIM;
  c.mlp_unit_width = WIDTH;
  return c;
}

/* Every pair's forward hook on x over the rank's shards (hooks get
 * hook_ctx, which may be NULL), then the all-reduce (over ctx) of the
 * partial sums into out. The scratch buffers may be one. no_mlp_bias: b1
 * NULL; tanh_approx: GELU's form. */
static inline htp_result harness_forward(htp_ctx *ctx, htp_ctx *hook_ctx, const float *x,
                                         const shard *shards, float (*out)[ROWS * DIM],
                                         float *attention_scratch, float *mlp_scratch,
                                         int no_mlp_bias, int tanh_approx) {
  for (int l = 0; l < LAYERS; ++l) {
    const shard *s = &shards[l];
    htp_result r = htp_rt_attention_f32(hook_ctx, 2 * l, x, s->wqkv, s->bqkv, s->wproj,
                                        out[2 * l], attention_scratch, BATCH, TOKENS, DIM, HEADS,
                                        HEAD_DIM);
    if (r == HTP_OK)
      r = htp_rt_mlp_f32(hook_ctx, 2 * l + 1, x, s->w1, no_mlp_bias ? NULL : s->b1, s->w2,
                         out[2 * l + 1], mlp_scratch, ROWS, DIM, HIDDEN, WIDTH, tanh_approx);
    if (r != HTP_OK) return r;
  }
  for (int p = 0; p < 2 * LAYERS; ++p) {
    htp_result r = htp_allreduce_sum_f32(ctx, out[p], out[p], ROWS * DIM);
    if (r != HTP_OK) return r;
  }
  return HTP_OK;
}

/* ----- the forward reference, in double ----------------------------------- */

/* Attention of layer l over the global heads not excluded, no proj bias,
 * into y [ROWS, DIM]. Where not NULL, also its intermediates: qkv [ROWS, 3
 * * inner] (every head), probs [BATCH, heads, TOKENS, TOKENS] (the softmax;
 * excluded heads' left alone) and context [ROWS, inner] (zero for excluded
 * heads), inner = tp * INNER. */
static inline void reference_attention_parts(const model *m, int l, const uint8_t *excluded,
                                             double *y, double *qkv_out, double *probs_out,
                                             double *context_out) {
  const int heads = m->tp * HEADS, inner = heads * HEAD_DIM;
  double *qkv = qkv_out ? qkv_out : malloc(sizeof(double) * ROWS * 3 * inner);
  double *ctx = context_out ? context_out : malloc(sizeof(double) * ROWS * inner);
  double p[TOKENS];
  for (int i = 0; i < ROWS * inner; ++i) ctx[i] = 0;
  for (int r = 0; r < ROWS; ++r)
    for (int o = 0; o < 3 * inner; ++o) {
      double acc = m->bqkv[l][o];
      for (int i = 0; i < DIM; ++i) acc += (double)m->x[r * DIM + i] * m->wqkv[l][o * DIM + i];
      qkv[r * 3 * inner + o] = acc;
    }
  for (int b = 0; b < BATCH; ++b)
    for (int h = 0; h < heads; ++h) {
      if (excluded && excluded[h]) continue;
      for (int t = 0; t < TOKENS; ++t) {
        const double *q = qkv + (b * TOKENS + t) * 3 * inner + h * HEAD_DIM;
        double max = -INFINITY, sum = 0;
        for (int s = 0; s < TOKENS; ++s) {
          const double *k = qkv + (b * TOKENS + s) * 3 * inner + inner + h * HEAD_DIM;
          double dot = 0;
          for (int d = 0; d < HEAD_DIM; ++d) dot += q[d] * k[d];
          p[s] = dot / sqrt((double)HEAD_DIM);
          max = fmax(max, p[s]);
        }
        for (int s = 0; s < TOKENS; ++s) sum += (p[s] = exp(p[s] - max));
        for (int s = 0; s < TOKENS; ++s) {
          p[s] /= sum;
          if (probs_out) probs_out[((b * heads + h) * TOKENS + t) * TOKENS + s] = p[s];
          const double *v = qkv + (b * TOKENS + s) * 3 * inner + 2 * inner + h * HEAD_DIM;
          for (int d = 0; d < HEAD_DIM; ++d)
            ctx[(b * TOKENS + t) * inner + h * HEAD_DIM + d] += p[s] * v[d];
        }
      }
    }
  for (int r = 0; r < ROWS; ++r)
    for (int o = 0; o < DIM; ++o) {
      double acc = 0;
      for (int i = 0; i < inner; ++i) acc += ctx[r * inner + i] * m->wproj[l][o * inner + i];
      y[r * DIM + o] = acc;
    }
  if (!qkv_out) free(qkv);
  if (!context_out) free(ctx);
}

static inline void reference_attention(const model *m, int l, const uint8_t *excluded,
                                       double *y) {
  reference_attention_parts(m, l, excluded, y, NULL, NULL, NULL);
}

/* GELU and its derivative: exact (erf) or the tanh approximation. */
#define HARNESS_PI 3.14159265358979323846
static inline double reference_gelu(double x, int tanh_approx) {
  if (!tanh_approx) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
  const double c = sqrt(2.0 / HARNESS_PI);
  return 0.5 * x * (1 + tanh(c * (x + 0.044715 * x * x * x)));
}
static inline double reference_gelu_grad(double x, int tanh_approx) {
  if (!tanh_approx)
    return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * HARNESS_PI);
  const double c = sqrt(2.0 / HARNESS_PI), t = tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

/* MLP of layer l (exact GELU) over the global units not excluded. */
static inline void reference_mlp(const model *m, int l, const uint8_t *excluded, double *y) {
  const int hidden = m->tp * HIDDEN;
  for (int r = 0; r < ROWS; ++r)
    for (int o = 0; o < DIM; ++o) y[r * DIM + o] = 0;
  for (int n = 0; n < hidden; ++n) {
    if (excluded && excluded[n / WIDTH]) continue;
    for (int r = 0; r < ROWS; ++r) {
      double pre = m->b1[l][n];
      for (int i = 0; i < DIM; ++i) pre += (double)m->x[r * DIM + i] * m->w1[l][n * DIM + i];
      double act = reference_gelu(pre, 0);
      for (int o = 0; o < DIM; ++o) y[r * DIM + o] += act * m->w2[l][o * hidden + n];
    }
  }
}

/* max |got - want| / max |want| (NaN in got: infinity). */
static inline double relative_error(const float *got, const double *want, int n) {
  double max_ref = 1e-30, max_diff = 0;
  for (int i = 0; i < n; ++i) {
    max_ref = fmax(max_ref, fabs(want[i]));
    double diff = fabs((double)got[i] - want[i]);
    if (!(diff <= max_diff)) max_diff = isnan(diff) ? INFINITY : diff;
  }
  return max_diff / max_ref;
}

/* ----- ranks as threads of one local world -------------------------------- */

static int failures; /* failed CHECKs on rank threads */

typedef struct rank_run {
  htp_world *world;
  int rank;
} rank_run;

/* On a rank thread (with `run` and `ctx` in scope and a `done:` label):
 * reports the failure with the context's last error and leaves. */
#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "rank %d: %s:%d: %s (%s)\n", run->rank, __FILE__, __LINE__, #cond,   \
              ctx ? htp_last_error(ctx) : "");                                             \
      __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);                                  \
      goto done;                                                                           \
    }                                                                                      \
  } while (0)

/* The device run_world's contexts compute on: the CPU, or the checked
 * device (kernels/checked: the CPU behind a GPU's contracts), where every
 * buffer a hook gets must be device memory (test_balance.c test 14). */
static htp_device harness_device = HTP_DEVICE_CPU;

/* Runs body on tp rank threads of a fresh local world (10 s deadline),
 * with fault injected when not NULL; asserts no CHECK failed. */
static inline void run_world(int tp, void *(*body)(void *), const htp_fault *fault) {
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.world_size = tp;
  config.timeout_s = 10.0;
  config.device = harness_device;
  htp_world *world = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  if (fault) assert_int_equal(htp_world_add_fault(world, fault), HTP_OK);
  pthread_t threads[MAX_TP];
  rank_run runs[MAX_TP];
  failures = 0;
  for (int r = 0; r < tp; ++r) {
    runs[r] = (rank_run){world, r};
    assert_int_equal(pthread_create(&threads[r], NULL, body, &runs[r]), 0);
  }
  for (int r = 0; r < tp; ++r) pthread_join(threads[r], NULL);
  htp_world_destroy(world);
  assert_int_equal(failures, 0);
}

#endif /* HTP_TEST_BALANCE_HARNESS_H */
