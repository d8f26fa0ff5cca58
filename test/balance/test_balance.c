/*===- test/balance/test_balance.c - the balance hooks over threads -------===*
 *
 * Ranks are threads of one local world. A random two-layer ViT-like model
 * (odd sizes) is split Megatron-style; each rank runs the hooks on its shard
 * and the partial outputs are all-reduced. The rank threads only compute and
 * record; the main thread checks everything against an unsharded reference
 * written from the math in double (never against the hooks' own output):
 *   - no balancer: the plain split block, exact;
 *   - MIGRATE (forced plan, and detected through end_iteration on the units
 *     clock, so a loaded machine cannot flip the plan): exact, and
 *     units really moved;
 *   - RESIZE with zero imputation: equals the reference WITHOUT the pruned
 *     units, and not the full one;
 *   - SEMI with a mild and a bad straggler: plan invariants, exact up to the
 *     pruned units;
 *   - importance selection (one calibration iteration, then a forced or
 *     detected plan): units with tiny output weights are shed first, RESIZE
 *     prunes exactly them, MIGRATE stays exact (ids reach the helpers);
 *   - packed migrated-in units (several per helper, from one or more
 *     owners, more than one block): the same output as computing them one
 *     at a time from their one-unit shards, and as the reference;
 *   - the plain split, migrate, resize and semi on the checked device
 *     (every buffer device memory the host cannot read);
 *   - bad arguments, a plan that migrates before the block ran, and
 *     htp_ctx_comm_seconds with a delayed peer.
 *===----------------------------------------------------------------------===*/
#include <float.h>
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

#include "kernels/htp_kernel_table.h"
#include "runtime/balance_internal.h"
#include "runtime/htp.h"
#include "runtime/htp_ops.h"
#include "harness.h"

/* Units whose output weights the `damp` scenarios scale by 1e-3 (local ids,
 * on every rank): heads 1 and 3 of 4, MLP units 0, 2 and 5 of 6. A rank
 * at half speed resizes exactly that many (round(0.5 u)), so importance
 * selection must prune exactly these. */
static int damped_unit(int kind, int local) {
  return kind == 0 ? (local == 1 || local == 3) : (local == 0 || local == 2 || local == 5);
}

static void model_damp(model *m) {
  const int ginner = m->tp * INNER, ghidden = m->tp * HIDDEN;
  for (int l = 0; l < LAYERS; ++l)
    for (int o = 0; o < DIM; ++o) {
      for (int i = 0; i < ginner; ++i)
        if (damped_unit(0, (i / HEAD_DIM) % HEADS)) m->wproj[l][o * ginner + i] *= 1e-3f;
      for (int n = 0; n < ghidden; ++n)
        if (damped_unit(1, (n / WIDTH) % UNITS)) m->w2[l][o * ghidden + n] *= 1e-3f;
    }
}

/* ----- a scenario: what the ranks do ------------------------------------- */

typedef enum drive {
  DRIVE_NONE = 0,    /* no balancer */
  DRIVE_FORCED = 1,  /* htp_planner_plan_speeds + htp__balancer_apply */
  DRIVE_DETECTED = 2 /* htp_balancer_end_iteration after a run slowed by 1 / speed */
} drive;

typedef struct scenario {
  int tp;
  drive how;
  htp_policy policy;
  htp_impute impute;
  double speeds[MAX_TP];
  htp_select selection; /* [HTP_SELECT_RANDOM] */
  int damp;             /* scale down some units' output weights (damped_unit) */
  int bf16;             /* the bf16 hooks on the model rounded to bf16 (CPU only) */
} scenario;

/* Test 13: the ranks also run the plan with migrated-in units one at a time. */
static int compare_one_by_one;

/* What the ranks record (each rank its own row; rank 0 the outputs). */
typedef struct record {
  float out[2 * LAYERS][ROWS * DIM]; /* all-reduced, per pair */
  uint8_t pruned[2 * LAYERS][MAX_TP * UNITS]; /* global unit ids pruned */
  uint8_t sent_units[2 * LAYERS][MAX_TP * UNITS]; /* global unit ids handed off */
  int unknown_in[MAX_TP];                         /* migrated-in units with id -1 */
  int kept[MAX_TP][2 * LAYERS], sent[MAX_TP][2 * LAYERS], in[MAX_TP][2 * LAYERS];
  uint64_t bytes[MAX_TP];
  int plan_ok[MAX_TP];
  int64_t version[MAX_TP];
  double site_seconds_sum[MAX_TP];
  int packed[MAX_TP][2 * LAYERS];     /* migrated-in units packed for the hooks */
  int in_sources[MAX_TP][2 * LAYERS]; /* distinct owners of those units */
  double one_by_one_error[MAX_TP];    /* packed vs one at a time, relative */
} record;

static const model *the_model;
static const scenario *the_scenario;
static record rec;

#define ATT_SCRATCH (ROWS * INNER + ROWS * HEAD_DIM + ROWS * 3 * HEAD_DIM + TOKENS * TOKENS)
#define MLP_SCRATCH (ROWS * HIDDEN + ROWS * WIDTH)

/* Where a rank's block runs: the input, its shards, its outputs and its
 * scratch, in host memory on the CPU; on the checked device in device
 * memory (htp_mem_alloc), the outputs downloaded after each run. */
typedef struct rank_memory {
  int on_device;
  const float *x;
  const shard *shards;
  float (*out)[ROWS * DIM]; /* on the device only */
  float *scratch;
  int bf16; /* the bf16 hooks on shards16 (host memory) */
  /* The shards' values (bf16 already) as bf16, layer after layer: made
   * once, as the hooks register the weights they get and the migration
   * packs from them later. */
  const uint16_t *shards16;
} rank_memory;

#define SHARD_ELEMENTS (sizeof(shard) / sizeof(float))

#define OUT_BYTES (sizeof(float) * 2 * LAYERS * ROWS * DIM)

/* Exact conversions between floats holding bf16 values and bf16. */
static void to_bf16(const float *src, uint16_t *dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &src[i], sizeof bits);
    dst[i] = (uint16_t)(bits >> 16);
  }
}
static void from_bf16(const uint16_t *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = (uint32_t)src[i] << 16;
    memcpy(&dst[i], &bits, sizeof bits);
  }
}

/* Rounds a float to the nearest bf16 (ties to even), as a float: written
 * here from the format, not taken from kernels/htp_bf16.h. */
static float round_bf16(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  memcpy(&v, &bits, sizeof v);
  return v;
}

/* The model's input and weights rounded to bf16 in place: the bf16
 * scenarios' model, which the double reference then reads exactly. */
static void model_round_bf16(model *m) {
  const size_t tp = (size_t)m->tp;
  for (int i = 0; i < ROWS * DIM; ++i) m->x[i] = round_bf16(m->x[i]);
  const struct { float **w; size_t n; } parts[] = {
      {m->wqkv, 3 * tp * INNER * DIM}, {m->bqkv, 3 * tp * INNER}, {m->wproj, DIM * tp * INNER},
      {m->w1, tp * HIDDEN * DIM},      {m->b1, tp * HIDDEN},      {m->w2, DIM * tp * HIDDEN}};
  for (size_t k = 0; k < sizeof parts / sizeof parts[0]; ++k)
    for (int l = 0; l < LAYERS; ++l)
      for (size_t i = 0; i < parts[k].n; ++i) parts[k].w[l][i] = round_bf16(parts[k].w[l][i]);
}

/* The bf16 hooks on the rank's bf16 shards, the bf16 all-reduce, the
 * outputs widened into out. */
static htp_result run_block_bf16(htp_ctx *ctx, const rank_memory *mem, float (*out)[ROWS * DIM]) {
  uint16_t x[ROWS * DIM], y[ROWS * DIM];
  to_bf16(the_model->x, x, ROWS * DIM);
  htp_result r = HTP_OK;
  for (int l = 0; l < LAYERS && r == HTP_OK; ++l) {
    const shard *s = &mem->shards[l];
    const uint16_t *w = mem->shards16 + (size_t)l * SHARD_ELEMENTS;
    const float *base = (const float *)s;
    const uint16_t *wqkv = w + (s->wqkv - base), *bqkv = w + (s->bqkv - base),
                   *wproj = w + (s->wproj - base), *w1 = w + (s->w1 - base),
                   *b1 = w + (s->b1 - base), *w2 = w + (s->w2 - base);
    r = htp_rt_attention_bf16(ctx, 2 * l, x, wqkv, bqkv, wproj, y, mem->scratch, BATCH, TOKENS,
                              DIM, HEADS, HEAD_DIM);
    if (r == HTP_OK) r = htp_allreduce_sum_bf16(ctx, y, y, ROWS * DIM);
    if (r == HTP_OK) from_bf16(y, out[2 * l], ROWS * DIM);
    if (r == HTP_OK)
      r = htp_rt_mlp_bf16(ctx, 2 * l + 1, x, w1, b1, w2, y, mem->scratch, ROWS, DIM, HIDDEN,
                          WIDTH, 0);
    if (r == HTP_OK) r = htp_allreduce_sum_bf16(ctx, y, y, ROWS * DIM);
    if (r == HTP_OK) from_bf16(y, out[2 * l + 1], ROWS * DIM);
  }
  return r;
}

/* Runs every pair's hook and all-reduces the partial sums into out (host). */
static htp_result run_block(htp_ctx *ctx, const rank_memory *mem, float (*out)[ROWS * DIM]) {
  if (mem->bf16) return run_block_bf16(ctx, mem, out);
  htp_result r = harness_forward(ctx, ctx, mem->x, mem->shards, mem->on_device ? mem->out : out,
                                 mem->scratch, mem->scratch, 0, 0);
  if (r == HTP_OK && mem->on_device) r = htp_mem_download(ctx, out, mem->out, OUT_BYTES);
  return r;
}

/* The rank's memory on the checked device: its shards and the input
 * uploaded, outputs and scratch allocated (0 on failure). */
static int device_memory(htp_ctx *ctx, const shard *shards, size_t scratch_bytes,
                         rank_memory *mem) {
  void *x = NULL, *s = NULL, *out = NULL, *scratch = NULL;
  int ok = htp_mem_alloc(ctx, sizeof(float) * ROWS * DIM, &x) == HTP_OK &&
           htp_mem_alloc(ctx, sizeof(shard) * LAYERS, &s) == HTP_OK &&
           htp_mem_alloc(ctx, OUT_BYTES, &out) == HTP_OK &&
           htp_mem_alloc(ctx, scratch_bytes, &scratch) == HTP_OK &&
           htp_mem_upload(ctx, x, the_model->x, sizeof(float) * ROWS * DIM) == HTP_OK &&
           htp_mem_upload(ctx, s, shards, sizeof(shard) * LAYERS) == HTP_OK;
  *mem = (rank_memory){1, x, s, out, scratch, 0, NULL};
  return ok;
}

static void free_device_memory(htp_ctx *ctx, rank_memory *mem) {
  if (!mem->on_device) return;
  htp_mem_free(ctx, (void *)mem->x);
  htp_mem_free(ctx, (void *)mem->shards);
  htp_mem_free(ctx, mem->out);
  htp_mem_free(ctx, mem->scratch);
}

static htp_balancer_config balancer_config(const scenario *sc) {
  htp_balancer_config c = harness_balancer_config(sc->tp, sc->policy, sc->selection, sc->impute);
  c.element_bytes = sc->bf16 ? 2 : 4;
  return c;
}

static void *rank_main(void *arg) {
  rank_run *run = arg;
  const scenario *sc = the_scenario;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  rank_memory mem = {0};
  shard *shards = malloc(sizeof(shard) * LAYERS);
  uint16_t *shards16 = NULL;
  float *scratch = malloc(sizeof(float) * (ATT_SCRATCH > MLP_SCRATCH ? ATT_SCRATCH : MLP_SCRATCH));
  float(*out)[ROWS * DIM] = malloc(sizeof(float) * 2 * LAYERS * ROWS * DIM);
  CHECK(htp_rt_attention_scratch_floats(BATCH, TOKENS, HEADS, HEAD_DIM) == ATT_SCRATCH);
  CHECK(htp_rt_mlp_scratch_floats(ROWS, HIDDEN, WIDTH) == MLP_SCRATCH);
  CHECK(shards && scratch && out);
  for (int l = 0; l < LAYERS; ++l) make_shard(the_model, l, run->rank, &shards[l]);
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  if (sc->bf16) {
    CHECK((shards16 = malloc(sizeof(uint16_t) * SHARD_ELEMENTS * LAYERS)) != NULL);
    to_bf16((const float *)shards, shards16, SHARD_ELEMENTS * LAYERS);
  }
  mem = (rank_memory){0, the_model->x, shards, NULL, scratch, sc->bf16, shards16};
  if (harness_device != HTP_DEVICE_CPU)
    CHECK(device_memory(ctx, shards,
                        sizeof(float) * (ATT_SCRATCH > MLP_SCRATCH ? ATT_SCRATCH : MLP_SCRATCH),
                        &mem));
  if (sc->how != DRIVE_NONE) {
    htp_balancer_config c = balancer_config(sc);
    CHECK(htp_balancer_create(ctx, &c, &b) == HTP_OK);
    CHECK(htp_ctx_balancer(ctx) == b);
    /* Detection on the units clock: the hooks book their units times the
     * slowdown, so the plan is the slowdown's, not a loaded machine's timer
     * noise (on the wall clock, two busy cores flipped these plans). */
    if (sc->how == DRIVE_DETECTED) CHECK(htp_balancer_set_clock(b, HTP_CLOCK_UNITS) == HTP_OK);
    /* The first iteration runs the initial plan (every unit kept) and
     * registers the weights; a detected straggler is slowed in its hooks,
     * whose seconds the step compares. */
    if (sc->how == DRIVE_DETECTED)
      CHECK(htp_balancer_set_slowdown(b, 1.0 / sc->speeds[run->rank]) == HTP_OK);
    CHECK(run_block(ctx, &mem, out) == HTP_OK);
    CHECK(htp_balancer_set_slowdown(b, 1.0) == HTP_OK);
    if (sc->how == DRIVE_FORCED) {
      CHECK(htp_planner_plan_speeds(htp_balancer_planner(b), sc->speeds, NULL) == HTP_OK);
      CHECK(htp__balancer_apply(b, htp_planner_plan(htp_balancer_planner(b))) == HTP_OK);
    } else {
      const htp_plan *plan = NULL;
      const double work =
          htp_plan_rank_work(htp_planner_plan(htp_balancer_planner(b)), &c.planner, run->rank);
      const htp_iteration_measure measured = {1e-3 * work / sc->speeds[run->rank], 0, 0};
      CHECK(htp_balancer_end_iteration(b, &measured, NULL, &plan) == HTP_OK);
      CHECK(plan == htp_planner_plan(htp_balancer_planner(b)));
    }
  }
  CHECK(run_block(ctx, &mem, out) == HTP_OK);
  if (b) {
    /* A second pass under the same plan: cached weights, same numbers. */
    float(*again)[ROWS * DIM] = malloc(sizeof(float) * 2 * LAYERS * ROWS * DIM);
    CHECK(again);
    htp_result r = run_block(ctx, &mem, again);
    int same = r == HTP_OK && memcmp(again, out, sizeof(float) * 2 * LAYERS * ROWS * DIM) == 0;
    free(again);
    CHECK(r == HTP_OK && same);
    const htp_plan *plan = htp_planner_plan(htp_balancer_planner(b));
    rec.plan_ok[run->rank] = htp_plan_check(plan, NULL, 0) == HTP_OK;
    rec.version[run->rank] = plan->version;
    rec.bytes[run->rank] = htp_migration_total_bytes(htp__balancer_migration(b));
    for (int p = 0; p < 2 * LAYERS; ++p) {
      htp_unit_sets s;
      CHECK(htp_unit_table_get(htp__balancer_table(b), p, &s) == HTP_OK);
      rec.kept[run->rank][p] = s.num_kept;
      rec.sent[run->rank][p] = s.num_out;
      rec.in[run->rank][p] = s.num_in;
      for (int i = 0; i < s.num_pruned; ++i) rec.pruned[p][run->rank * s.units + s.pruned[i]] = 1;
      for (int i = 0; i < s.num_out; ++i)
        rec.sent_units[p][run->rank * s.units + s.out_unit[i]] = 1;
      for (int i = 0; i < s.num_in; ++i) rec.unknown_in[run->rank] += s.in_unit[i] < 0;
      rec.packed[run->rank][p] = htp__balancer_packed_units(b, p);
      int owners[MAX_TP] = {0};
      for (int i = 0; i < s.num_in; ++i) owners[s.in_src[i]] = 1;
      for (int r = 0; r < MAX_TP; ++r) rec.in_sources[run->rank][p] += owners[r];
    }
    if (compare_one_by_one) {
      /* The same plan with every migrated-in unit computed alone, from its
       * cached one-unit shard: what the packed blocks must reproduce. */
      float(*alone)[ROWS * DIM] = malloc(sizeof(float) * 2 * LAYERS * ROWS * DIM);
      double *packed = malloc(sizeof(double) * ROWS * DIM);
      CHECK(alone && packed);
      htp__balancer_set_one_by_one(b, 1);
      htp_result r = run_block(ctx, &mem, alone);
      htp__balancer_set_one_by_one(b, 0);
      double worst = r == HTP_OK ? 0.0 : INFINITY;
      for (int p = 0; p < 2 * LAYERS && r == HTP_OK; ++p) {
        for (int i = 0; i < ROWS * DIM; ++i) packed[i] = out[p][i];
        worst = fmax(worst, relative_error(alone[p], packed, ROWS * DIM));
      }
      rec.one_by_one_error[run->rank] = worst;
      free(alone);
      free(packed);
      CHECK(r == HTP_OK);
    }
  }
  if (run->rank == 0) memcpy(rec.out, out, sizeof rec.out);
done:
  htp_balancer_destroy(b);
  free_device_memory(ctx, &mem);
  if (ctx && htp_ctx_balancer(ctx) != NULL) { /* destroy detaches */
    fprintf(stderr, "rank %d: the balancer is still attached\n", run->rank);
    __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
  }
  htp_ctx_destroy(ctx);
  free(shards);
  free(shards16);
  free(scratch);
  free(out);
  return NULL;
}

/* Runs the scenario and compares every pair's all-reduced output with the
 * reference without the recorded pruned units. Returns the largest error
 * against the FULL reference (all units). */
static double run_and_check_imputed(const scenario *sc, int imputed_exactly);
static double run_and_check(const scenario *sc) { return run_and_check_imputed(sc, 0); }

/* imputed_exactly: the pruned units' values are imputed exactly (SAME with
 * an unchanged input), so the reference is the full one. */
static double run_and_check_imputed(const scenario *sc, int imputed_exactly) {
  model *m = malloc(sizeof *m);
  assert_non_null(m);
  model_init(m, sc->tp, 0x9e3779b97f4a7c15ull + (uint64_t)sc->tp);
  if (sc->damp) model_damp(m);
  if (sc->bf16) model_round_bf16(m);
  /* bf16: the hooks round the activations and the partial sums (2^-9
   * relative each), the reference computes the rounded model in double. */
  const double tolerance = sc->bf16 ? 2e-2 : 1e-5;
  memset(&rec, 0, sizeof rec);
  the_model = m;
  the_scenario = sc;
  run_world(sc->tp, rank_main, NULL);
  double *want = malloc(sizeof(double) * ROWS * DIM);
  double full_error = 0;
  for (int p = 0; p < 2 * LAYERS; ++p) {
    const int l = p / 2;
    const uint8_t *excluded = imputed_exactly ? NULL : rec.pruned[p];
    if (p % 2 == 0) reference_attention(m, l, excluded, want);
    else reference_mlp(m, l, excluded, want);
    double error = relative_error(rec.out[p], want, ROWS * DIM);
    if (error > tolerance)
      fprintf(stderr, "pair %d: error %g vs the reference of kept units\n", p, error);
    assert_true(error <= tolerance);
    if (p % 2 == 0) reference_attention(m, l, NULL, want);
    else reference_mlp(m, l, NULL, want);
    full_error = fmax(full_error, relative_error(rec.out[p], want, ROWS * DIM));
  }
  free(want);
  model_free(m);
  free(m);
  return full_error;
}

static int total_pruned(void) {
  int n = 0;
  for (int p = 0; p < 2 * LAYERS; ++p)
    for (int u = 0; u < MAX_TP * UNITS; ++u) n += rec.pruned[p][u];
  return n;
}

/* ----- the cases --------------------------------------------------------- */

/* 1: no balancer: the sum of the hooks' partial outputs is the unsharded block. */
static void test_01_plain_split(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 4; ++tp) {
    scenario sc = {tp, DRIVE_NONE, HTP_POLICY_NONE, HTP_IMPUTE_ZERO, {1, 1, 1, 1}, HTP_SELECT_RANDOM, 0, 0};
    assert_true(run_and_check(&sc) <= 1e-5);
  }
}

/* 2: MIGRATE with a forced plan (rank 1 at 0.4): exact, and units really
 * moved: the straggler keeps fewer than it owns, bytes went over the wire. */
static void test_02_migrate_forced(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 4; ++tp) {
    scenario sc = {tp, DRIVE_FORCED, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {1, 0.4, 1, 1}, HTP_SELECT_RANDOM, 0, 0};
    assert_true(run_and_check(&sc) <= 1e-5);
    assert_int_equal(total_pruned(), 0);
    for (int p = 0; p < 2 * LAYERS; ++p) {
      assert_true(rec.kept[1][p] < (p % 2 ? UNITS : HEADS));
      assert_true(rec.sent[1][p] > 0);
      int in = 0;
      for (int r = 0; r < tp; ++r) in += rec.in[r][p];
      assert_int_equal(in, rec.sent[1][p]);
    }
    assert_true(rec.bytes[1] > 0);
    for (int r = 0; r < tp; ++r) assert_true(rec.plan_ok[r]);
  }
}

/* 3: MIGRATE detected through htp_balancer_end_iteration (hysteresis 1):
 * rank 2's hooks take 2.5x as long (htp_balancer_set_slowdown). */
static void test_03_migrate_detected(void **unused) {
  (void)unused;
  for (int tp = 3; tp <= 4; ++tp) {
    scenario sc = {tp, DRIVE_DETECTED, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {1, 1, 0.4, 1}, HTP_SELECT_RANDOM, 0, 0};
    assert_true(run_and_check(&sc) <= 1e-5);
    assert_int_equal(rec.version[0], 1);
    assert_true(rec.sent[2][0] > 0 && rec.sent[2][1] > 0);
    assert_true(rec.bytes[2] > 0);
  }
}

/* 4: RESIZE with zero imputation: equals the reference without the pruned
 * units (run_and_check), and differs from the full reference. */
static void test_04_resize_zero(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 4; ++tp) {
    scenario sc = {tp, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_ZERO, {1, 0.5, 1, 1}, HTP_SELECT_RANDOM, 0, 0};
    double full_error = run_and_check(&sc);
    assert_true(total_pruned() > 0);
    assert_true(full_error > 1e-3);
    for (int p = 0; p < 2 * LAYERS; ++p) {
      assert_true(rec.kept[1][p] < (p % 2 ? UNITS : HEADS));
      assert_int_equal(rec.sent[1][p], 0);
    }
    assert_int_equal(rec.bytes[1], 0);
  }
}

/* 5: SEMI on 4 ranks, rank 1 mildly slow (resizes), rank 3 badly slow
 * (migrates): plan invariants hold, the output is exact up to the pruned
 * units, and both actions happened. */
static void test_05_semi(void **unused) {
  (void)unused;
  scenario sc = {4, DRIVE_FORCED, HTP_POLICY_SEMI, HTP_IMPUTE_ZERO, {1, 0.78, 1, 0.7}, HTP_SELECT_RANDOM, 0, 0};
  run_and_check(&sc);
  for (int r = 0; r < 4; ++r) assert_true(rec.plan_ok[r]);
  int pruned_rank1 = 0, pruned_rank3 = 0;
  for (int p = 0; p < 2 * LAYERS; ++p)
    for (int u = 0; u < UNITS; ++u) {
      pruned_rank1 += rec.pruned[p][1 * (p % 2 ? UNITS : HEADS) + u] && u < (p % 2 ? UNITS : HEADS);
      pruned_rank3 += rec.pruned[p][3 * (p % 2 ? UNITS : HEADS) + u] && u < (p % 2 ? UNITS : HEADS);
    }
  assert_true(pruned_rank1 > 0);
  assert_int_equal(pruned_rank3, 0);
  assert_true(rec.sent[3][0] > 0 && rec.sent[3][1] > 0);
  assert_int_equal(rec.sent[1][0] + rec.sent[1][1], 0);
  assert_true(rec.bytes[3] > 0);
}

/* 6: RESIZE with SAME imputation: the first iteration kept every unit and
 * stored its values; the input does not change, so the pruned units'
 * imputed values are their true values and the output is the FULL block. */
static void test_06_resize_same(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 3; ++tp) {
    scenario sc = {tp, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_SAME, {1, 0.5, 1, 1}, HTP_SELECT_RANDOM, 0, 0};
    assert_true(run_and_check_imputed(&sc, 1) <= 1e-5);
    assert_true(total_pruned() > 0);
  }
}

/* 6b: SAME and AVERAGE imputation run (values are approximate by design):
 * the pruned heads are projected, so the output differs from zero-imputation
 * but stays finite; covered here only for crashes and sanity. */
static void test_06_impute_average(void **unused) {
  (void)unused;
  scenario sc = {2, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_AVERAGE, {1, 0.5, 1, 1}, HTP_SELECT_RANDOM, 0, 0};
  model *m = malloc(sizeof *m);
  model_init(m, 2, 5);
  memset(&rec, 0, sizeof rec);
  the_model = m;
  the_scenario = &sc;
  run_world(2, rank_main, NULL);
  /* expected: the reference with each pruned head's context replaced by the
   * mean of its rank's kept heads is hard to write independently; check
   * that the result is finite and differs from the zero-imputed reference. */
  double *want = malloc(sizeof(double) * ROWS * DIM);
  reference_attention(m, 0, rec.pruned[0], want);
  assert_true(total_pruned() > 0);
  double e = relative_error(rec.out[0], want, ROWS * DIM);
  assert_true(isfinite(e) && e > 1e-4);
  free(want);
  model_free(m);
  free(m);
}

/* 15: the bf16 hooks (htp_rt_attention_bf16, htp_rt_mlp_bf16) on the model
 * rounded to bf16: the plain split, RESIZE (forced: rank 1 at half speed),
 * MIGRATE (rank 1 at 0.4, with the packed in-units against the same plan
 * computed one unit at a time) and SEMI give the double reference of the
 * rounded model without the pruned units within the bf16 tolerance;
 * pruning moved the output away from the full block, migration did not,
 * and units and bytes (bf16 shards) moved. Importance selection prunes
 * exactly the damped units (scores from bf16 activations and weights),
 * SAME imputation gives the full block back (the stored activations), and
 * AVERAGE runs. An element size other than 2 or 4, and a hook of the other
 * dtype than the balancer's config, are refused. */
static void *mismatched_dtype_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  float scratch[ATT_SCRATCH], y[ROWS * DIM];
  shard *s = calloc(1, sizeof *s);
  CHECK(s && htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  htp_balancer_config c = harness_balancer_config(2, HTP_POLICY_RESIZE, HTP_SELECT_RANDOM,
                                                  HTP_IMPUTE_ZERO);
  c.element_bytes = 2;
  CHECK(htp_balancer_create(ctx, &c, &b) == HTP_OK);
  CHECK(htp_rt_attention_f32(ctx, 0, the_model->x, s->wqkv, s->bqkv, s->wproj, y, scratch, BATCH,
                             TOKENS, DIM, HEADS, HEAD_DIM) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "a f32 call, but the balancer is configured for bf16") != NULL);
done:
  htp_balancer_destroy(b);
  htp_ctx_destroy(ctx);
  free(s);
  return NULL;
}

static void *refused_bf16_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  htp_balancer_config odd = harness_balancer_config(2, HTP_POLICY_NONE, HTP_SELECT_RANDOM,
                                                    HTP_IMPUTE_ZERO);
  odd.element_bytes = 3;
  htp_balancer *b = NULL;
  CHECK(htp_balancer_create(ctx, &odd, &b) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "element_bytes 3") != NULL);
done:
  htp_ctx_destroy(ctx);
  return NULL;
}

static void test_15_bf16_hooks(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 4; tp += 2) {
    scenario plain = {tp, DRIVE_NONE, HTP_POLICY_NONE, HTP_IMPUTE_ZERO, {1, 1, 1, 1}, HTP_SELECT_RANDOM, 0, 1};
    assert_true(run_and_check(&plain) <= 2e-2);
    scenario hooked = plain;
    hooked.how = DRIVE_FORCED; /* a balancer whose plan keeps every unit */
    assert_true(run_and_check(&hooked) <= 2e-2);
    assert_int_equal(total_pruned(), 0);
    scenario resize = {tp, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_ZERO, {1, 0.5, 1, 1}, HTP_SELECT_RANDOM, 0, 1};
    assert_true(run_and_check(&resize) > 5e-2); /* against the full block */
    assert_true(total_pruned() > 0);
    for (int p = 0; p < 2 * LAYERS; ++p) {
      assert_true(rec.kept[1][p] < (p % 2 ? UNITS : HEADS));
      assert_int_equal(rec.sent[1][p] + rec.in[0][p], 0);
    }
    scenario migrate = {tp, DRIVE_FORCED, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {1, 0.4, 1, 1}, HTP_SELECT_RANDOM, 0, 1};
    compare_one_by_one = 1;
    assert_true(run_and_check(&migrate) <= 2e-2); /* exact: up to bf16 rounding */
    compare_one_by_one = 0;
    assert_int_equal(total_pruned(), 0);
    for (int p = 0; p < 2 * LAYERS; ++p) {
      assert_true(rec.sent[1][p] > 0);
      int in = 0;
      for (int r = 0; r < tp; ++r) in += rec.in[r][p];
      assert_int_equal(in, rec.sent[1][p]);
    }
    /* What moved is bf16: a head's qkv rows, bias and proj columns, 2 bytes each. */
    htp_balancer_config bf16 = harness_balancer_config(tp, HTP_POLICY_MIGRATE, HTP_SELECT_RANDOM,
                                                       HTP_IMPUTE_ZERO);
    bf16.element_bytes = 2;
    assert_int_equal(htp_balancer_unit_bytes(&bf16, HTP_PAIR_ATTENTION),
                     2 * (3 * HEAD_DIM * DIM + 3 * HEAD_DIM + DIM * HEAD_DIM));
    uint64_t sent_bytes = 0;
    for (int p = 0; p < 2 * LAYERS; ++p)
      sent_bytes += (uint64_t)rec.sent[1][p] *
                    (uint64_t)htp_balancer_unit_bytes(&bf16, (htp_pair_kind)(p % 2));
    assert_true(rec.bytes[1] > 0);
    assert_int_equal(rec.bytes[1], sent_bytes);
    /* One at a time, each migrated unit adds onto y and rounds it (1.1e-2
     * here); packed, one GEMM rounds once. */
    for (int r = 0; r < tp; ++r) assert_true(rec.one_by_one_error[r] <= 2e-2);
  }
  scenario semi = {4, DRIVE_FORCED, HTP_POLICY_SEMI, HTP_IMPUTE_ZERO, {1, 0.78, 1, 0.7}, HTP_SELECT_RANDOM, 0, 1};
  run_and_check(&semi);
  assert_true(rec.sent[3][0] > 0 && rec.sent[3][1] > 0 && rec.bytes[3] > 0);
  for (int r = 0; r < 4; ++r) assert_true(rec.plan_ok[r]);
  scenario important = {2, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_ZERO, {1, 0.5, 1, 1}, HTP_SELECT_IMPORTANCE, 1, 1};
  run_and_check(&important);
  for (int p = 0; p < 2 * LAYERS; ++p) {
    const int u = p % 2 ? UNITS : HEADS;
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < u; ++i)
        assert_int_equal(rec.pruned[p][r * u + i], r == 1 && damped_unit(p % 2, i));
  }
  scenario same = {2, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_SAME, {1, 0.5, 1, 1}, HTP_SELECT_RANDOM, 0, 1};
  assert_true(run_and_check_imputed(&same, 1) <= 2e-2);
  assert_true(total_pruned() > 0);
  /* AVERAGE: finite, and not the zero-imputed block (as test 6b). */
  scenario average = {2, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_AVERAGE, {1, 0.5, 1, 1}, HTP_SELECT_RANDOM, 0, 1};
  model *avg = malloc(sizeof *avg);
  assert_non_null(avg);
  model_init(avg, 2, 5);
  model_round_bf16(avg);
  memset(&rec, 0, sizeof rec);
  the_model = avg;
  the_scenario = &average;
  run_world(2, rank_main, NULL);
  double *want = malloc(sizeof(double) * ROWS * DIM);
  assert_non_null(want);
  reference_attention(avg, 0, rec.pruned[0], want);
  assert_true(total_pruned() > 0);
  const double e = relative_error(rec.out[0], want, ROWS * DIM);
  assert_true(isfinite(e) && e > 2e-2);
  free(want);
  model_free(avg);
  free(avg);
  model *m = malloc(sizeof *m);
  assert_non_null(m);
  model_init(m, 2, 3);
  the_model = m;
  run_world(2, refused_bf16_main, NULL);
  run_world(2, mismatched_dtype_main, NULL);
  model_free(m);
  free(m);
}

/* 11: importance selection, RESIZE: one calibration iteration under the
 * initial plan (every unit computed and scored), then a forced plan with
 * rank 1 at half speed. The units with 1000x smaller output weights score
 * lowest and are exactly the ones pruned (index order would prune heads
 * 0, 1 and units 0, 1, 2); the error against the full block is no larger
 * than with random selection on the same model. */
static void test_11_importance_resize(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 3; ++tp) {
    scenario random_sc = {tp, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_ZERO, {1, 0.5, 1, 1},
                          HTP_SELECT_RANDOM, 1, 0};
    const double random_error = run_and_check(&random_sc);
    scenario sc = random_sc;
    sc.selection = HTP_SELECT_IMPORTANCE;
    const double error = run_and_check(&sc);
    for (int p = 0; p < 2 * LAYERS; ++p) {
      const int u = p % 2 ? UNITS : HEADS;
      for (int r = 0; r < tp; ++r)
        for (int i = 0; i < u; ++i)
          assert_int_equal(rec.pruned[p][r * u + i], r == 1 && damped_unit(p % 2, i));
      assert_int_equal(rec.kept[1][p], u - (p % 2 ? 3 : 2));
    }
    assert_true(error <= random_error);
    assert_true(error < 1e-2); /* only units with 1e-3 output weights pruned */
    for (int r = 0; r < tp; ++r) assert_true(rec.plan_ok[r]);
  }
}

/* 12: importance selection, MIGRATE: still exact (the helpers learn the
 * handed-off ids from the transfer: none left at -1), and the straggler
 * hands off its least important units first: no damped unit is kept while
 * an undamped one is sent. Also detected through end_iteration. */
static void test_12_importance_migrate(void **unused) {
  (void)unused;
  for (int tp = 2; tp <= 4; ++tp)
    for (int how = DRIVE_FORCED; how <= DRIVE_DETECTED; ++how) {
      scenario sc = {tp, (drive)how, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {1, 0.4, 1, 1},
                     HTP_SELECT_IMPORTANCE, 1, 0};
      assert_true(run_and_check(&sc) <= 1e-5);
      assert_int_equal(total_pruned(), 0);
      for (int r = 0; r < tp; ++r) assert_int_equal(rec.unknown_in[r], 0);
      assert_true(rec.bytes[1] > 0);
      for (int p = 0; p < 2 * LAYERS; ++p) {
        const int u = p % 2 ? UNITS : HEADS;
        assert_true(rec.sent[1][p] > 0);
        int damped_kept = 0, undamped_sent = 0;
        for (int i = 0; i < u; ++i) {
          const int sent = rec.sent_units[p][1 * u + i];
          damped_kept += damped_unit(p % 2, i) && !sent;
          undamped_sent += !damped_unit(p % 2, i) && sent;
        }
        assert_false(damped_kept > 0 && undamped_sent > 0);
      }
    }
}

/* 13: a helper's migrated-in units run packed (one activation call and one
 * projection GEMM per block of up to units_per_rank units): several units
 * from one owner (tp 2), from two owners (tp 3), and more than one rank's
 * worth from three owners (tp 4: two blocks), under random and importance
 * selection. The output equals the unsplit reference (run_and_check) and
 * the one-at-a-time computation from the cached one-unit shards up to fp32
 * round-off; every migrated-in unit was packed. */
/* 14: the hooks on the checked device (kernels/checked): every buffer they
 * get is device memory the host cannot read, so a hook that reads a
 * weight, an activation or a migrated unit with the host's loops, or hands
 * a host buffer to a device entry or collective, fails here as it would on
 * a GPU. The plain split, migrate (forced and detected), resize and semi
 * give what they give on the CPU against the same reference; the selections
 * and imputations that read on the host are refused, with a message. */
static void test_14_on_checked_device(void **unused) {
  (void)unused;
  harness_device = HTP_DEVICE_CHECKED;
  for (int tp = 2; tp <= 4; tp += 2) {
    scenario plain = {tp, DRIVE_NONE, HTP_POLICY_NONE, HTP_IMPUTE_ZERO, {1, 1, 1, 1}, HTP_SELECT_RANDOM, 0, 0};
    assert_true(run_and_check(&plain) <= 1e-5);
    scenario migrate = {tp, DRIVE_FORCED, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {1, 0.4, 1, 1}, HTP_SELECT_RANDOM, 0, 0};
    assert_true(run_and_check(&migrate) <= 1e-5);
    assert_true(rec.sent[1][0] > 0 && rec.sent[1][1] > 0 && rec.bytes[1] > 0);
    for (int r = 0; r < tp; ++r) assert_int_equal(rec.packed[r][0], rec.in[r][0]);
    scenario resize = {tp, DRIVE_FORCED, HTP_POLICY_RESIZE, HTP_IMPUTE_ZERO, {1, 0.5, 1, 1}, HTP_SELECT_RANDOM, 0, 0};
    assert_true(run_and_check(&resize) > 1e-3);
    assert_true(total_pruned() > 0);
  }
  scenario detected = {3, DRIVE_DETECTED, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {1, 1, 0.4, 1}, HTP_SELECT_RANDOM, 0, 0};
  assert_true(run_and_check(&detected) <= 1e-5);
  assert_true(rec.sent[2][0] > 0 && rec.bytes[2] > 0);
  scenario semi = {4, DRIVE_FORCED, HTP_POLICY_SEMI, HTP_IMPUTE_ZERO, {1, 0.78, 1, 0.7}, HTP_SELECT_RANDOM, 0, 0};
  run_and_check(&semi);
  assert_true(rec.sent[3][0] > 0 && rec.bytes[3] > 0);
  for (int r = 0; r < 4; ++r) assert_true(rec.plan_ok[r]);
  harness_device = HTP_DEVICE_CPU;
}

static void test_13_packed_migrated_units(void **unused) {
  (void)unused;
  const struct {
    int tp;
    double speeds[MAX_TP];
    int owners; /* some helper takes units of this many owners in every pair */
    int blocks; /* ... and more units than one block holds in some pair */
  } cases[] = {{2, {1, 0.2}, 1, 0}, {3, {1, 0.3, 0.3}, 2, 0}, {4, {1, 0.1, 0.1, 0.1}, 3, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c)
    for (int sel = HTP_SELECT_RANDOM; sel <= HTP_SELECT_IMPORTANCE; ++sel) {
      const int tp = cases[c].tp;
      scenario sc = {tp, DRIVE_FORCED, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {0}, (htp_select)sel,
                     sel == HTP_SELECT_IMPORTANCE, 0};
      memcpy(sc.speeds, cases[c].speeds, sizeof sc.speeds);
      compare_one_by_one = 1;
      const double full_error = run_and_check(&sc);
      compare_one_by_one = 0;
      assert_true(full_error <= 1e-5);
      assert_int_equal(total_pruned(), 0);
      int beyond_one_block = 0;
      for (int p = 0; p < 2 * LAYERS; ++p) {
        const int u = p % 2 ? UNITS : HEADS;
        int most_in = 0, most_owners = 0;
        for (int r = 0; r < tp; ++r) {
          assert_int_equal(rec.packed[r][p], rec.in[r][p]);
          most_in = rec.in[r][p] > most_in ? rec.in[r][p] : most_in;
          if (rec.in_sources[r][p] > most_owners) most_owners = rec.in_sources[r][p];
        }
        assert_true(most_in >= 2);
        assert_true(most_owners >= cases[c].owners);
        beyond_one_block |= most_in > u;
      }
      assert_int_equal(beyond_one_block, cases[c].blocks);
      for (int r = 0; r < tp; ++r) {
        if (rec.one_by_one_error[r] > 1e-6)
          fprintf(stderr, "tp %d rank %d: packed vs one by one %g\n", tp, r,
                  rec.one_by_one_error[r]);
        assert_true(rec.one_by_one_error[r] <= 1e-6);
      }
    }
}

/* ----- bad arguments ------------------------------------------------------ */

static void *bad_arguments_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL, *second = NULL;
  static shard s; /* one rank */
  float scratch[ATT_SCRATCH], y[ROWS * DIM];
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  scenario sc = {1, DRIVE_FORCED, HTP_POLICY_SEMI, HTP_IMPUTE_ZERO, {1}, HTP_SELECT_RANDOM, 0, 0};
  htp_balancer_config c = balancer_config(&sc);
  const float *x = the_model->x;

  /* create: bad configs */
  htp_balancer_config bad = c;
  bad.magic = 0;
  CHECK(htp_balancer_create(ctx, &bad, &b) == HTP_ERR_INVALID && !b);
  CHECK(strstr(htp_last_error(ctx), "magic"));
  bad = c;
  bad.planner.world_size = 2;
  CHECK(htp_balancer_create(ctx, &bad, &b) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "world_size"));
  bad = c;
  bad.head_dim = 0;
  CHECK(htp_balancer_create(ctx, &bad, &b) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "head_dim"));
  bad = c;
  bad.same_max_age = -1;
  CHECK(htp_balancer_create(ctx, &bad, &b) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "same_max_age"));
  CHECK(htp_balancer_create(ctx, NULL, &b) == HTP_ERR_INVALID);
  CHECK(htp_balancer_create(NULL, &c, &b) == HTP_ERR_INVALID);
  CHECK(htp_ctx_balancer(ctx) == NULL);
  CHECK(htp_balancer_create(ctx, &c, &b) == HTP_OK);
  CHECK(htp_balancer_create(ctx, &c, &second) == HTP_ERR_INVALID && !second);
  CHECK(strstr(htp_last_error(ctx), "already"));
  CHECK(htp_ctx_balancer(ctx) == b);

  /* hooks: pair out of range, wrong kind, shapes that disagree */
  CHECK(htp_rt_attention_f32(ctx, 2 * LAYERS, x, s.wqkv, s.bqkv, s.wproj, y, scratch, BATCH,
                             TOKENS, DIM, HEADS, HEAD_DIM) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "out of range"));
  CHECK(htp_rt_attention_f32(ctx, -1, x, s.wqkv, s.bqkv, s.wproj, y, scratch, BATCH, TOKENS, DIM,
                             HEADS, HEAD_DIM) == HTP_ERR_INVALID);
  CHECK(htp_rt_attention_f32(ctx, 1, x, s.wqkv, s.bqkv, s.wproj, y, scratch, BATCH, TOKENS, DIM,
                             HEADS, HEAD_DIM) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "MLP pair"));
  CHECK(htp_rt_mlp_f32(ctx, 2, x, s.w1, s.b1, s.w2, y, scratch, ROWS, DIM, HIDDEN, WIDTH, 0) ==
        HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "attention pair"));
  CHECK(htp_rt_attention_f32(ctx, 0, x, s.wqkv, s.bqkv, s.wproj, y, scratch, BATCH, TOKENS, DIM,
                             HEADS - 1, HEAD_DIM) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "disagree"));
  CHECK(htp_rt_attention_f32(ctx, 0, x, s.wqkv, s.bqkv, s.wproj, y, scratch, BATCH, TOKENS,
                             DIM + 1, HEADS, HEAD_DIM) == HTP_ERR_INVALID);
  CHECK(htp_rt_mlp_f32(ctx, 1, x, s.w1, s.b1, s.w2, y, scratch, ROWS, DIM, HIDDEN - WIDTH, WIDTH,
                       0) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "disagree"));
  CHECK(htp_rt_mlp_f32(ctx, 1, x, s.w1, s.b1, s.w2, y, scratch, ROWS, DIM, HIDDEN, 2, 0) ==
        HTP_ERR_INVALID);
  CHECK(htp_rt_mlp_f32(ctx, 1, x, NULL, s.b1, s.w2, y, scratch, ROWS, DIM, HIDDEN, WIDTH, 0) ==
        HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "NULL"));
  CHECK(htp_rt_mlp_f32(ctx, 1, x, s.w1, s.b1, s.w2, y, scratch, ROWS, DIM, HIDDEN, WIDTH, 7) ==
        HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "tanh_approx 7 must be 0 or 1"));
  CHECK(htp_rt_attention_f32(ctx, 0, x, s.wqkv, s.bqkv, s.wproj, y, scratch, 0, TOKENS, DIM,
                             HEADS, HEAD_DIM) == HTP_ERR_INVALID);
  /* without a context: NULL buffers are still refused, without a message */
  CHECK(htp_rt_mlp_f32(NULL, 1, x, s.w1, s.b1, NULL, y, scratch, ROWS, DIM, HIDDEN, WIDTH, 0) ==
        HTP_ERR_INVALID);
  /* bad arguments fail the world, as the collectives do: the peers would
   * otherwise wait for this rank's all-reduce until the deadline */
  CHECK(htp_world_status(run->world) == HTP_ERR_INVALID);
  CHECK(htp_balancer_end_iteration(NULL, &(htp_iteration_measure){1.0, 0, 0}, NULL, NULL) ==
        HTP_ERR_INVALID);
  /* A context destroyed before its balancer is kept (the balancer's
   * destroy read it after it was freed: ASan's use after free in CI). */
  htp_ctx_destroy(ctx);
  CHECK(htp_ctx_balancer(ctx) == b && htp_ctx_rank(ctx) == run->rank);
done:
  htp_balancer_destroy(b);
  htp_ctx_destroy(ctx);
  return NULL;
}

/* Two-rank refusals of a step, each within a second, not a deadline:
 * - a bad measure on rank 0 fails the world: rank 1's end_iteration returns
 *   HTP_ERR_REMOTE at once, not after its 10 s deadline;
 * - balancers made from different configs (rank 1's hysteresis) all refuse
 *   the first step together, naming the rank (they timed out later, or
 *   planned apart, before); so do configs apart only in max_gamma (2: the
 *   fingerprint covers it, or the ranks would cap their shedding apart). */
static int refusal_by_config; /* which case: 0 bad measure, 1 hysteresis, 2 max_gamma */
static void *step_refusal_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  scenario sc = {2, DRIVE_FORCED, HTP_POLICY_SEMI, HTP_IMPUTE_ZERO, {1, 1}, HTP_SELECT_RANDOM,
                 0, 0};
  htp_balancer_config c = balancer_config(&sc);
  if (refusal_by_config == 1) c.planner.hysteresis_iters += run->rank;
  if (refusal_by_config == 2 && run->rank == 1) c.planner.max_gamma = 0.5;
  CHECK(htp_balancer_create(ctx, &c, &b) == HTP_OK);
  const int bad_measure = !refusal_by_config && run->rank == 0;
  const htp_iteration_measure measured = {bad_measure ? NAN : 1.0, 0, 0};
  const double start = htp_now();
  const htp_result r = htp_balancer_end_iteration(b, &measured, NULL, NULL);
  CHECK(r == (refusal_by_config || bad_measure ? HTP_ERR_INVALID : HTP_ERR_REMOTE));
  CHECK(!refusal_by_config ||
        strstr(htp_last_error(ctx), "rank 1's balancer config differs from rank 0's"));
  CHECK(htp_now() - start < 5.0);
done:
  htp_balancer_destroy(b);
  htp_ctx_destroy(ctx);
  return NULL;
}

/* 7: every bad argument is refused with a message, nothing crashes. */
static void test_07_bad_arguments(void **unused) {
  (void)unused;
  model *m = malloc(sizeof *m);
  model_init(m, 1, 3);
  the_model = m;
  run_world(1, bad_arguments_main, NULL);
  for (refusal_by_config = 0; refusal_by_config < 3; ++refusal_by_config)
    run_world(2, step_refusal_main, NULL);
  model_free(m);
  free(m);
}

/* A plan that migrates before the block ever ran: the owner has no weights
 * to pack. The migrator reports it; its peer learns it at once. */
static htp_result unregistered_result[MAX_TP];
static char unregistered_message[512];
static void *unregistered_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  scenario sc = {2, DRIVE_FORCED, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {1, 0.4}, HTP_SELECT_RANDOM, 0, 0};
  htp_balancer_config c = balancer_config(&sc);
  CHECK(htp_balancer_create(ctx, &c, &b) == HTP_OK);
  const double speeds[2] = {1, 0.4};
  CHECK(htp_planner_plan_speeds(htp_balancer_planner(b), speeds, NULL) == HTP_OK);
  double started = htp_now();
  unregistered_result[run->rank] = htp__balancer_apply(b, htp_planner_plan(htp_balancer_planner(b)));
  CHECK(htp_now() - started < 5.0); /* not the 10 s deadline */
  if (run->rank == 1)
    snprintf(unregistered_message, sizeof unregistered_message, "%s", htp_last_error(ctx));
done:
  htp_balancer_destroy(b);
  htp_ctx_destroy(ctx);
  return NULL;
}

/* 8: migrating unregistered weights is an error on both ranks, not a crash or a hang. */
static void test_08_migrate_before_registration(void **unused) {
  (void)unused;
  run_world(2, unregistered_main, NULL);
  assert_int_equal(unregistered_result[1], HTP_ERR_INVALID); /* the migrator */
  assert_int_equal(unregistered_result[0], HTP_ERR_REMOTE);  /* its helper */
  /* It says why (it said "pack failed for pair 0 unit 0"). */
  if (!strstr(unregistered_message, "whose forward hook has not run on this rank"))
    fail_msg("the migrator said: %s", unregistered_message);
}

/* A migrator whose device has no room to pack a unit it hands off: after
 * the block registered the weights, rank 1 (the straggler) fills the
 * checked device (1 MiB, HTP_CHECKED_MEMORY_MB, the rest allocated), so
 * pack_unit's device buffer cannot be had. */
static htp_result no_room_result[MAX_TP];
static char no_room_message[512];
static void *no_room_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  rank_memory mem = {0};
  void *filler = NULL;
  shard *shards = malloc(sizeof(shard) * LAYERS);
  float(*out)[ROWS * DIM] = malloc(OUT_BYTES);
  CHECK(shards && out);
  for (int l = 0; l < LAYERS; ++l) make_shard(the_model, l, run->rank, &shards[l]);
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  CHECK(device_memory(ctx, shards,
                      sizeof(float) * (ATT_SCRATCH > MLP_SCRATCH ? ATT_SCRATCH : MLP_SCRATCH),
                      &mem));
  scenario sc = {2, DRIVE_FORCED, HTP_POLICY_MIGRATE, HTP_IMPUTE_ZERO, {1, 0.4}, HTP_SELECT_RANDOM, 0, 0};
  htp_balancer_config c = balancer_config(&sc);
  CHECK(htp_balancer_create(ctx, &c, &b) == HTP_OK);
  CHECK(run_block(ctx, &mem, out) == HTP_OK); /* registers the weights */
  CHECK(htp_barrier(ctx) == HTP_OK);          /* the peer allocates no more */
  if (run->rank == 1) {
    size_t free_bytes = 0, total = 0;
    setenv("HTP_CHECKED_MEMORY_MB", "1", 1);
    CHECK(htp_mem_info(ctx, &free_bytes, &total) == HTP_OK && free_bytes > 0);
    CHECK(htp_mem_alloc(ctx, free_bytes, &filler) == HTP_OK);
  }
  CHECK(htp_barrier(ctx) == HTP_OK);
  CHECK(htp_planner_plan_speeds(htp_balancer_planner(b), sc.speeds, NULL) == HTP_OK);
  double started = htp_now();
  no_room_result[run->rank] = htp__balancer_apply(b, htp_planner_plan(htp_balancer_planner(b)));
  CHECK(htp_now() - started < 5.0); /* not the 10 s deadline */
  if (run->rank == 1)
    snprintf(no_room_message, sizeof no_room_message, "%s", htp_last_error(ctx));
done:
  if (filler) htp_mem_free(ctx, filler);
  if (run->rank == 1) unsetenv("HTP_CHECKED_MEMORY_MB");
  htp_balancer_destroy(b);
  free_device_memory(ctx, &mem);
  htp_ctx_destroy(ctx);
  free(shards);
  free(out);
  return NULL;
}

/* 19: no device memory to pack a migrated unit: the migrator says so,
 * naming the unit and its pair, its helper hears of it at once, and every
 * device allocation is given back. */
static void test_19_pack_without_device_memory(void **unused) {
  (void)unused;
  model *m = malloc(sizeof *m);
  assert_non_null(m);
  model_init(m, 2, 5);
  the_model = m;
  const size_t live = htp_checked_live_bytes();
  harness_device = HTP_DEVICE_CHECKED;
  run_world(2, no_room_main, NULL);
  harness_device = HTP_DEVICE_CPU;
  model_free(m);
  free(m);
  assert_int_equal(htp_checked_live_bytes(), live);
  if (no_room_result[1] != HTP_ERR_NOMEM || no_room_result[0] != HTP_ERR_REMOTE)
    fail_msg("the migrator got %s (%s), its helper %s", htp_strerror(no_room_result[1]),
             no_room_message, htp_strerror(no_room_result[0]));
  int unit = -1, pair = -1;
  if (sscanf(no_room_message, "migration: no device memory to pack unit %d of pair %d", &unit,
             &pair) != 2 || unit < 0 || unit >= HEADS || pair != 0)
    fail_msg("the migrator said: %s", no_room_message);
}

/* 20: on a device the balancer refuses what its host loops would read
 * there (importance, variation and displacement scores; the same and
 * average imputations), saying what it was asked; random + zero runs. */
static void *device_refusal_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  static const struct {
    htp_select selection;
    htp_impute impute;
    const char *asked;
  } cases[] = {{HTP_SELECT_IMPORTANCE, HTP_IMPUTE_ZERO, "select importance, impute zero"},
               {HTP_SELECT_VARIATION, HTP_IMPUTE_ZERO, "select variation, impute zero"},
               {HTP_SELECT_DISPLACEMENT, HTP_IMPUTE_ZERO, "select displacement, impute zero"},
               {HTP_SELECT_RANDOM, HTP_IMPUTE_SAME, "select random, impute same"},
               {HTP_SELECT_RANDOM, HTP_IMPUTE_AVERAGE, "select random, impute average"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    htp_balancer_config c =
        harness_balancer_config(1, HTP_POLICY_RESIZE, cases[i].selection, cases[i].impute);
    CHECK(htp_balancer_create(ctx, &c, &b) == HTP_ERR_INVALID && !b);
    CHECK(strstr(htp_last_error(ctx), "on the checked device only random selection and zero "
                                      "imputation run yet") != NULL);
    CHECK(strstr(htp_last_error(ctx), cases[i].asked) != NULL);
  }
  htp_balancer_config c = harness_balancer_config(1, HTP_POLICY_RESIZE, HTP_SELECT_RANDOM,
                                                  HTP_IMPUTE_ZERO);
  CHECK(htp_balancer_create(ctx, &c, &b) == HTP_OK);
done:
  htp_balancer_destroy(b);
  htp_ctx_destroy(ctx);
  return NULL;
}

static void test_20_device_refuses_host_scores(void **unused) {
  (void)unused;
  harness_device = HTP_DEVICE_CHECKED;
  run_world(1, device_refusal_main, NULL);
  harness_device = HTP_DEVICE_CPU;
}

/* ----- communication seconds ---------------------------------------------- */

static double comm_no_delay[2], comm_delayed[2];
static void *comm_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  float value = 1.0f;
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  CHECK(htp_ctx_comm_seconds(ctx) == 0.0);
  CHECK(htp_barrier(ctx) == HTP_OK);
  double before = htp_ctx_comm_seconds(ctx);
  CHECK(htp_fault_point(ctx, 0) == HTP_OK); /* no delay before iteration 1 */
  CHECK(htp_allreduce_sum_f32(ctx, &value, &value, 1) == HTP_OK);
  comm_no_delay[run->rank] = htp_ctx_comm_seconds(ctx) - before;
  CHECK(htp_barrier(ctx) == HTP_OK);
  before = htp_ctx_comm_seconds(ctx);
  CHECK(htp_fault_point(ctx, 1) == HTP_OK); /* rank 1 sleeps 0.5 s */
  CHECK(htp_allreduce_sum_f32(ctx, &value, &value, 1) == HTP_OK);
  comm_delayed[run->rank] = htp_ctx_comm_seconds(ctx) - before;
  CHECK(value == 4.0f);
done:
  htp_ctx_destroy(ctx);
  return NULL;
}

/* 9: a rank waiting in the all-reduce for a delayed peer accumulates the
 * wait; the delayed rank (its delay is compute, not communication) and the
 * undelayed iteration stay small. */
static void test_09_comm_seconds(void **unused) {
  (void)unused;
  htp_fault delay = {HTP_FAULT_DELAY, 1, 1, 0.5};
  run_world(2, comm_main, &delay);
  fprintf(stderr, "comm seconds: no delay %.4f %.4f, delayed %.4f %.4f\n", comm_no_delay[0],
          comm_no_delay[1], comm_delayed[0], comm_delayed[1]);
  assert_true(comm_delayed[0] >= 0.4);
  assert_true(comm_delayed[1] < 0.25);
  assert_true(comm_no_delay[0] < 0.25 && comm_no_delay[1] < 0.25);
  assert_true(htp_ctx_comm_seconds(NULL) == 0.0);
}

/* ----- emulated slowdown -------------------------------------------------- */

static double hooked_plain, hooked_slow, wall_plain, wall_slow;
static double hooked_thread, wall_thread, cpu_thread;
static htp_result bad_factor_result, bad_clock_result;
static void *slowdown_main(void *arg) {
  rank_run *run = arg;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  shard *shards = malloc(sizeof(shard) * LAYERS);
  float *scratch = malloc(sizeof(float) * (ATT_SCRATCH > MLP_SCRATCH ? ATT_SCRATCH : MLP_SCRATCH));
  float(*out)[ROWS * DIM] = malloc(sizeof(float) * 2 * LAYERS * ROWS * DIM);
  CHECK(shards && scratch && out);
  for (int l = 0; l < LAYERS; ++l) make_shard(the_model, l, run->rank, &shards[l]);
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  const rank_memory mem = {0, the_model->x, shards, NULL, scratch, 0, NULL};
  scenario sc = {1, DRIVE_FORCED, HTP_POLICY_NONE, HTP_IMPUTE_ZERO, {1}, HTP_SELECT_RANDOM, 0, 0};
  htp_balancer_config c = balancer_config(&sc);
  CHECK(htp_balancer_create(ctx, &c, &b) == HTP_OK);
  CHECK(htp_balancer_hook_seconds(b) == 0.0);
  {
    /* comm past wall (two clocks read apart): no negative compute */
    htp_iteration_times times;
    CHECK(htp_balancer_end_iteration(b, &(htp_iteration_measure){1.0, 2.0, 0}, &times, NULL) ==
          HTP_OK);
    CHECK(times.compute_seconds == 0.0 && times.planned_seconds == 1e-9);
  }
  bad_factor_result = htp_balancer_set_slowdown(b, 0.5);
  /* Many calls, so the timer's noise averages out; the best of five rounds,
   * plain and slowed interleaved, so a burst of load meets both alike. */
  hooked_plain = hooked_slow = wall_plain = wall_slow = 1e9;
  for (int round = 0; round < 5; ++round) {
    for (int slow = 0; slow < 2; ++slow) {
      CHECK(htp_balancer_set_slowdown(b, slow ? 4.0 : 1.0) == HTP_OK);
      double started = htp_now();
      for (int i = 0; i < 20; ++i) CHECK(run_block(ctx, &mem, out) == HTP_OK);
      double wall = htp_now() - started, hooked = htp_balancer_hook_seconds(b);
      htp_iteration_times times;
      CHECK(htp_balancer_end_iteration(b, &(htp_iteration_measure){1.0, 0, 0}, &times, NULL) ==
            HTP_OK);
      CHECK(htp_balancer_hook_seconds(b) == 0.0); /* reset by end_iteration */
      /* the hooks ran: the planner compared their time, not the call's */
      CHECK(times.hook_seconds == hooked && times.planned_seconds == hooked);
      double *best_hooked = slow ? &hooked_slow : &hooked_plain;
      double *best_wall = slow ? &wall_slow : &wall_plain;
      if (hooked < *best_hooked) *best_hooked = hooked;
      if (wall < *best_wall) *best_wall = wall;
    }
  }
  /* The thread clock: x1000 is booked on the hooks' CPU time, not waited. */
  bad_clock_result = htp_balancer_set_clock(b, (htp_clock)7);
  CHECK(htp_balancer_set_clock(b, HTP_CLOCK_THREAD) == HTP_OK);
  CHECK(htp_balancer_set_slowdown(b, 1000.0) == HTP_OK);
  {
    double started = htp_now(), cpu_started = htp_thread_seconds();
    for (int i = 0; i < 20; ++i) CHECK(run_block(ctx, &mem, out) == HTP_OK);
    cpu_thread = htp_thread_seconds() - cpu_started;
    wall_thread = htp_now() - started;
    hooked_thread = htp_balancer_hook_seconds(b);
  }
done:
  htp_balancer_destroy(b);
  htp_ctx_destroy(ctx);
  free(shards);
  free(scratch);
  free(out);
  return NULL;
}

/* 10: htp_balancer_set_slowdown stretches the hooks (booked and waited) by
 * the factor; a factor below 1 is refused. On the thread clock the factor
 * is booked on the hooks' CPU time and nothing waits. */
static void test_10_slowdown(void **unused) {
  (void)unused;
  model *m = malloc(sizeof *m);
  model_init(m, 1, 11);
  the_model = m;
  run_world(1, slowdown_main, NULL);
  fprintf(stderr, "hooks: plain %.5f s, x4 %.5f s booked; wall %.5f s, %.5f s\n", hooked_plain,
          hooked_slow, wall_plain, wall_slow);
  assert_int_equal(bad_factor_result, HTP_ERR_INVALID);
  assert_true(hooked_plain > 0.0);
  /* Wide bounds: the two are timed apart on a machine that may be loaded
   * (CI beside training runs read 2.3x; this test failed once in an ASan
   * build under heavy load, which bound unrecorded, so the upper one is now
   * 12x and the rounds five); a factor not applied reads ~1x, applied twice
   * ~16x. */
  assert_true(hooked_slow > 1.5 * hooked_plain && hooked_slow < 12.0 * hooked_plain);
  assert_true(wall_slow > 1.5 * wall_plain);
  fprintf(stderr, "thread clock x1000: %.5f s booked, %.5f s CPU, %.5f s wall\n", hooked_thread,
          cpu_thread, wall_thread);
  assert_int_equal(bad_clock_result, HTP_ERR_INVALID);
  assert_true(hooked_thread > 0.0 && hooked_thread <= 1000.0 * cpu_thread * 1.0001);
  /* A wait would add ~hooked_thread (999x the CPU time); a loaded machine
   * stretches the wall clock alone to ~10x the CPU time (CI read 0.6 ms CPU,
   * 5.9 ms wall), so the bound leaves that room. */
  assert_true(wall_thread < hooked_thread / 10.0);
  model_free(m);
  free(m);
}

/* ----- scores, shards and booking on a bare balancer ---------------------- */

/* 16: importance scores. norm: ||(3, 4)|| = 5 (unit 0), 1 (unit 1); a
 * sample is the mean |activation| times it, folded with alpha 0.3: 10,
 * then 10 + 0.3 (20 - 10) = 13; a NaN sample keeps the score; a sample
 * past FLT_MAX is clamped. Compact, the 65th kept unit (the second chunk)
 * reads its own columns. */
static void test_16_importance_scores(void **unused) {
  (void)unused;
  htp_balancer b = {0};
  htp__registered_pair pairs[1] = {{0}};
  double norm[65] = {0}, score[65] = {0};
  uint8_t observed[65] = {0};
  b.pairs = pairs;
  b.max_units = 2;
  b.norm = norm;
  b.score = score;
  b.observed = observed;
  const float second[2][4] = {{3, 0, 0, 2}, {4, 0, 0, 0}}; /* [d][units * width] */
  htp__scores_norms(&b, 0, second, 2, 2, 2);
  assert_true(norm[0] == 5.0);
  assert_true(norm[1] == 2.0);
  const int32_t kept[65] = {0, 1};
  const htp_unit_sets s = {.units = 2, .owned = 2, .num_kept = 2, .kept = kept};
  const float first[4] = {1, -3, FLT_MAX, FLT_MAX}, again[4] = {3, -5, 1, 1};
  const float nan_act[4] = {NAN, 1, 1, 1};
  htp__scores_observe(&b, 0, &s, first, 1, 2, 4, 0);
  assert_true(score[0] == 10.0);
  assert_true(score[1] == FLT_MAX);
  htp__scores_observe(&b, 0, &s, again, 1, 2, 4, 0);
  assert_true(fabs(score[0] - 13.0) <= 1e-12);
  htp__scores_observe(&b, 0, &s, nan_act, 1, 2, 4, 0);
  assert_true(fabs(score[0] - 13.0) <= 1e-12);
  /* compact, 65 kept units of width 1 in a row of 65 */
  int32_t many[65];
  float act[65];
  for (int i = 0; i < 65; ++i) {
    many[i] = i;
    act[i] = (float)(i + 1);
    norm[i] = 1.0;
    observed[i] = 0;
  }
  b.max_units = 65;
  const htp_unit_sets all = {.units = 65, .owned = 65, .num_kept = 65, .kept = many};
  htp__scores_observe(&b, 0, &all, act, 1, 1, 65, 1);
  assert_true(score[64] == 65.0);
}

/* 17: a unit moved from a shard without bias into one with bias has its
 * bias zeroed in every part (3 for heads), and no other unit's. */
static void test_17_move_zeroes_bias(void **unused) {
  (void)unused;
  const htp__unit_shape u = {3, 1, 1, sizeof(float)};
  float src_first[3] = {1, 2, 3}, src_second[1] = {4};
  float dst_first[6] = {0}, dst_bias[6], dst_second[2] = {0};
  for (int i = 0; i < 6; ++i) dst_bias[i] = 7;
  const htp__shard src = {src_first, NULL, src_second, 1};
  const htp__shard dst = {dst_first, dst_bias, dst_second, 2};
  assert_int_equal(htp__move_units(NULL, &src, 0, &dst, 1, 1, &u), HTP_KERNEL_OK);
  const float bias[6] = {7, 0, 7, 0, 7, 0}; /* [part][unit] */
  assert_memory_equal(dst_bias, bias, sizeof bias);
  assert_true(dst_first[1] == 1 && dst_first[3] == 2 && dst_first[5] == 3 && dst_second[1] == 4);
}

/* 18: seconds booked on a kind out of range are dropped, touching nothing. */
static void test_18_site_seconds_kind_range(void **unused) {
  (void)unused;
  htp_balancer b, zero;
  memset(&b, 0, sizeof b);
  memset(&zero, 0, sizeof zero);
  htp__balancer_add_site_seconds(&b, HTP_PAIR_KINDS, 1.0);
  htp__balancer_add_site_seconds(&b, (htp_pair_kind)-1, 1.0);
  assert_memory_equal(&b, &zero, sizeof b);
  htp__balancer_add_site_seconds(&b, HTP_PAIR_MLP, 1.0);
  assert_true(htp_balancer_hook_seconds(&b) == 1.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_01_plain_split),
      cmocka_unit_test(test_02_migrate_forced),
      cmocka_unit_test(test_03_migrate_detected),
      cmocka_unit_test(test_04_resize_zero),
      cmocka_unit_test(test_05_semi),
      cmocka_unit_test(test_06_resize_same),
      cmocka_unit_test(test_06_impute_average),
      cmocka_unit_test(test_07_bad_arguments),
      cmocka_unit_test(test_08_migrate_before_registration),
      cmocka_unit_test(test_09_comm_seconds),
      cmocka_unit_test(test_10_slowdown),
      cmocka_unit_test(test_11_importance_resize),
      cmocka_unit_test(test_12_importance_migrate),
      cmocka_unit_test(test_13_packed_migrated_units),
      cmocka_unit_test(test_14_on_checked_device),
      cmocka_unit_test(test_15_bf16_hooks),
      cmocka_unit_test(test_16_importance_scores),
      cmocka_unit_test(test_17_move_zeroes_bias),
      cmocka_unit_test(test_18_site_seconds_kind_range),
      cmocka_unit_test(test_19_pack_without_device_memory),
      cmocka_unit_test(test_20_device_refuses_host_scores),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
