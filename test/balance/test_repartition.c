/*===- test/balance/test_repartition.c - run-time re-partition over threads ===*
 *
 * Three ranks (threads of a local world) hold the harness's model of 8
 * heads and 12 MLP units in slots with room (4 heads, 6 MLP units a rank):
 * heads 3, 3, 2 and MLP units 4, 4, 4 owned, the rest empty (zeros). Each
 * weight carries two states (as AdamW's moments) registered with
 * htp_balancer_add_state. Rank 2 runs slower on the units clock (plans
 * from modelled times: deterministic) in training mode (weights_updated
 * every step). Checked on the main thread, never against the hooks alone:
 *   - every step's output equals the unsharded double reference (before,
 *     during migration, after the re-partition);
 *   - a persistent straggler is re-partitioned exactly once; afterwards
 *     the plan moves nothing and the trace says what was weighed;
 *   - every global unit is owned by exactly one rank (the slot maps agree
 *     on every rank and count what each owns), each slot holds its global
 *     unit's weights and states bit for bit, empty slots are zero;
 *   - the same under SEMI with importance selection and the same imputation
 *     (their per-slot state restarts), and on the checked device (weights
 *     and states device memory the host cannot read);
 *   - a transient straggler (slow for a few steps) and ratio 0 migrate and
 *     never re-partition;
 *   - the step it happens at (the bytes' and the hysteresis' counts, which
 *     restart when the set of migrators changes); a straggler that could
 *     shed everything keeps one unit of each kind; without empty slots
 *     nothing is bought;
 *   - bad arguments are refused with a message.
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

#include "runtime/htp.h"
#include "runtime/htp_ops.h"

#include "harness.h"

enum { WORLD = 3, GLOBAL_TP = 2, GHEADS = GLOBAL_TP * HEADS, GUNITS = GLOBAL_TP * UNITS, STATES = 2 };

static const int32_t OWNED_HEADS[WORLD] = {3, 3, 2}, OWNED_UNITS[WORLD] = {4, 4, 4};

typedef struct scenario {
  double ratio;       /* repartition_ratio */
  double slowdown;    /* rank 2's */
  int slow_steps;     /* steps rank 2 is slow (then 1) */
  int steps;
  FILE *trace;        /* may be NULL */
  /* The balancer's choices (0, 0, 0: migrate, random, zero). */
  htp_policy policy;
  htp_select selection;
  htp_impute impute;
  int on_device;      /* the checked device: shards, states, x and outputs device memory */
  int world;          /* 0: WORLD ranks, the shares OWNED_*; 2: an even split, no spare room */
  int hysteresis;     /* planner.hysteresis_iters (0: the harness's 1) */
  int rank1_slow_from; /* rank 1 slowed by `slowdown` too from this step (0: never) */
  double rank1_before; /* and by this before it (0: not) */
} scenario;

static const scenario *the_scenario;
static model the_model;
static double reference[2 * LAYERS][ROWS * DIM];

/* What each rank reports. */
typedef struct rank_report {
  int64_t repartitions;
  int repartitioned_at; /* the step whose end_iteration re-partitioned first (-1: none) */
  int flows_at_end, migrated_at_some_step;
  int32_t owned[2];
  int32_t heads_map[WORLD * HEADS], units_map[WORLD * UNITS];
  double worst_error;
  shard shards[LAYERS], states[STATES][LAYERS];
} rank_report;
static rank_report reports[WORLD];

/* Rank r's slots as the compiled split fills them: its owned units in
 * order from the previous ranks' last, zeros after. */
static int32_t first_unit(const int32_t *owned, int r) {
  int32_t first = 0;
  for (int i = 0; i < r; ++i) first += owned[i];
  return first;
}

/* The scenario's world; with sc->world the split is even (every slot full). */
static int world_of(const scenario *sc) { return sc->world ? sc->world : WORLD; }
static const int32_t EVEN_HEADS[WORLD] = {HEADS, HEADS, HEADS}, EVEN_UNITS[WORLD] = {UNITS, UNITS, UNITS};

/* Copies global head h (or MLP unit u) of layer l into slot s of sh. */
static void put_head(const model *m, int l, int h, shard *sh, int s) {
  for (int q = 0; q < 3; ++q) {
    memcpy(sh->wqkv + (q * INNER + s * HEAD_DIM) * DIM,
           m->wqkv[l] + (q * GHEADS * HEAD_DIM + h * HEAD_DIM) * DIM,
           sizeof(float) * HEAD_DIM * DIM);
    memcpy(sh->bqkv + q * INNER + s * HEAD_DIM, m->bqkv[l] + q * GHEADS * HEAD_DIM + h * HEAD_DIM,
           sizeof(float) * HEAD_DIM);
  }
  for (int o = 0; o < DIM; ++o)
    memcpy(sh->wproj + o * INNER + s * HEAD_DIM, m->wproj[l] + o * GHEADS * HEAD_DIM + h * HEAD_DIM,
           sizeof(float) * HEAD_DIM);
}
static void put_unit(const model *m, int l, int u, shard *sh, int s) {
  memcpy(sh->w1 + s * WIDTH * DIM, m->w1[l] + u * WIDTH * DIM, sizeof(float) * WIDTH * DIM);
  memcpy(sh->b1 + s * WIDTH, m->b1[l] + u * WIDTH, sizeof(float) * WIDTH);
  for (int o = 0; o < DIM; ++o)
    memcpy(sh->w2 + o * HIDDEN + s * WIDTH, m->w2[l] + o * GUNITS * WIDTH + u * WIDTH,
           sizeof(float) * WIDTH);
}

/* The shard a slot map describes: heads_map / units_map [room] of one rank. */
static void fill_shard(const model *m, int l, const int32_t *heads, const int32_t *units,
                       shard *sh) {
  memset(sh, 0, sizeof *sh);
  for (int s = 0; s < HEADS; ++s)
    if (heads[s] >= 0) put_head(m, l, heads[s], sh, s);
  for (int s = 0; s < UNITS; ++s)
    if (units[s] >= 0) put_unit(m, l, units[s], sh, s);
}

/* State j of a weight: (j + 2) x the weight, so a moved state is told
 * from its weight and from the other state. */
static void scale_shard(const shard *w, float factor, shard *out) {
  const float *src = (const float *)w;
  float *dst = (float *)out;
  for (size_t i = 0; i < sizeof *w / sizeof(float); ++i) dst[i] = factor * src[i];
}

static void *rank_main(void *arg) {
  const rank_run *run = arg;
  const scenario *sc = the_scenario;
  const int r = run->rank;
  rank_report *rep = &reports[r];
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  float (*out)[ROWS * DIM] = malloc(sizeof(float) * 2 * LAYERS * ROWS * DIM);
  const int64_t att = htp_rt_attention_scratch_floats(BATCH, TOKENS, HEADS, HEAD_DIM),
                mlp = htp_rt_mlp_scratch_floats(ROWS, HIDDEN, WIDTH);
  const size_t scratch_bytes = sizeof(float) * (size_t)(att > mlp ? att : mlp);
  float *scratch = malloc(scratch_bytes);
  /* On the device: every buffer the hooks and the re-partition get is its
   * memory; shards and states come down for the checks at the end. */
  shard *dev_shards = NULL, *dev_states[STATES] = {NULL};
  float *dev_x = NULL, *dev_scratch = NULL;
  float(*dev_out)[ROWS * DIM] = NULL;
  CHECK(out && scratch);
  CHECK(htp_ctx_create(run->world, r, &ctx) == HTP_OK);
  int32_t heads[HEADS], units[UNITS];
  const int world = world_of(sc);
  const int32_t *oh = sc->world ? EVEN_HEADS : OWNED_HEADS, *ou = sc->world ? EVEN_UNITS : OWNED_UNITS;
  for (int s = 0; s < HEADS; ++s) heads[s] = s < oh[r] ? first_unit(oh, r) + s : -1;
  for (int s = 0; s < UNITS; ++s) units[s] = s < ou[r] ? first_unit(ou, r) + s : -1;
  for (int l = 0; l < LAYERS; ++l) {
    fill_shard(&the_model, l, heads, units, &rep->shards[l]);
    for (int j = 0; j < STATES; ++j) scale_shard(&rep->shards[l], (float)(j + 2), &rep->states[j][l]);
  }
  shard *shards = rep->shards, *states[STATES];
  for (int j = 0; j < STATES; ++j) states[j] = rep->states[j];
  const float *x = the_model.x;
  float(*outputs)[ROWS * DIM] = out;
  float *hook_scratch = scratch;
  if (sc->on_device) {
    CHECK(htp_mem_alloc(ctx, sizeof rep->shards, (void **)&dev_shards) == HTP_OK);
    CHECK(htp_mem_upload(ctx, dev_shards, rep->shards, sizeof rep->shards) == HTP_OK);
    for (int j = 0; j < STATES; ++j) {
      CHECK(htp_mem_alloc(ctx, sizeof rep->states[j], (void **)&dev_states[j]) == HTP_OK);
      CHECK(htp_mem_upload(ctx, dev_states[j], rep->states[j], sizeof rep->states[j]) == HTP_OK);
      states[j] = dev_states[j];
    }
    CHECK(htp_mem_alloc(ctx, sizeof(float) * ROWS * DIM, (void **)&dev_x) == HTP_OK);
    CHECK(htp_mem_upload(ctx, dev_x, the_model.x, sizeof(float) * ROWS * DIM) == HTP_OK);
    CHECK(htp_mem_alloc(ctx, sizeof(float) * 2 * LAYERS * ROWS * DIM, (void **)&dev_out) == HTP_OK);
    CHECK(htp_mem_alloc(ctx, scratch_bytes, (void **)&dev_scratch) == HTP_OK);
    shards = dev_shards;
    x = dev_x;
    outputs = dev_out;
    hook_scratch = dev_scratch;
  }
  htp_balancer_config config =
      harness_balancer_config(world, sc->policy ? sc->policy : HTP_POLICY_MIGRATE,
                              sc->selection, sc->impute);
  config.planner.owned[HTP_PAIR_ATTENTION] = sc->world ? NULL : OWNED_HEADS;
  config.planner.owned[HTP_PAIR_MLP] = sc->world ? NULL : OWNED_UNITS;
  if (sc->hysteresis) config.planner.hysteresis_iters = sc->hysteresis;
  config.repartition_ratio = sc->ratio;
  CHECK(htp_balancer_create(ctx, &config, &b) == HTP_OK);
  CHECK(htp_balancer_set_clock(b, HTP_CLOCK_UNITS) == HTP_OK);
  if (sc->trace) htp_balancer_set_trace(b, sc->trace);
  for (int l = 0; l < LAYERS; ++l) {
    shard *w = &shards[l];
    const float *weights[6] = {w->wqkv, w->bqkv, w->wproj, w->w1, w->b1, w->w2};
    for (int j = 0; j < STATES; ++j) {
      shard *st = &states[j][l];
      float *states[6] = {st->wqkv, st->bqkv, st->wproj, st->w1, st->b1, st->w2};
      for (int t = 0; t < 6; ++t) CHECK(htp_balancer_add_state(b, weights[t], states[t]) == HTP_OK);
    }
  }
  rep->worst_error = 0.0;
  rep->repartitioned_at = -1;
  for (int step = 0; step < sc->steps; ++step) {
    const int slow = (r == world - 1 && step < sc->slow_steps) ||
                     (r == 1 && sc->rank1_slow_from && step >= sc->rank1_slow_from);
    const double mild = r == 1 && sc->rank1_before > 0.0 ? sc->rank1_before : 1.0;
    CHECK(htp_balancer_set_slowdown(b, slow ? sc->slowdown : mild) == HTP_OK);
    CHECK(harness_forward(ctx, ctx, x, shards, outputs, hook_scratch, hook_scratch, 0, 0) ==
          HTP_OK);
    if (sc->on_device)
      CHECK(htp_mem_download(ctx, out, dev_out, sizeof(float) * 2 * LAYERS * ROWS * DIM) == HTP_OK);
    for (int p = 0; p < 2 * LAYERS; ++p) {
      const double e = relative_error(out[p], reference[p], ROWS * DIM);
      if (!(e <= rep->worst_error)) rep->worst_error = isnan(e) ? INFINITY : e;
    }
    CHECK(htp_balancer_weights_updated(b) == HTP_OK); /* training: migration re-sends a step */
    const htp_plan *plan = NULL;
    CHECK(htp_balancer_end_iteration(b, &(htp_iteration_measure){1e-3, 0, 1e-3}, NULL, &plan) ==
          HTP_OK);
    if (plan->num_flows[0] + plan->num_flows[1] > 0) rep->migrated_at_some_step = 1;
    rep->flows_at_end = plan->num_flows[0] + plan->num_flows[1];
    if (rep->repartitioned_at < 0 && htp_balancer_repartitions(b) > 0) rep->repartitioned_at = step;
  }
  rep->repartitions = htp_balancer_repartitions(b);
  int64_t room = 0;
  CHECK(htp_balancer_slot_units(b, shards[0].wqkv, rep->heads_map, world * HEADS, &room) ==
        HTP_OK);
  CHECK(room == HEADS);
  CHECK(htp_balancer_slot_units(b, states[1][1].w2, rep->units_map, world * UNITS, &room) ==
        HTP_OK); /* a state stands for its weight */
  CHECK(room == UNITS);
  const htp_plan *plan = htp_planner_plan(htp_balancer_planner(b));
  rep->owned[0] = plan->owned ? plan->owned[r] : HEADS;
  rep->owned[1] = plan->owned ? plan->owned[world + r] : UNITS;
  if (sc->on_device) { /* what the re-partition left in device memory */
    CHECK(htp_mem_download(ctx, rep->shards, dev_shards, sizeof rep->shards) == HTP_OK);
    for (int j = 0; j < STATES; ++j)
      CHECK(htp_mem_download(ctx, rep->states[j], dev_states[j], sizeof rep->states[j]) == HTP_OK);
  }
done:
  if (ctx && sc->on_device) {
    htp_mem_free(ctx, dev_shards);
    for (int j = 0; j < STATES; ++j) htp_mem_free(ctx, dev_states[j]);
    htp_mem_free(ctx, dev_x);
    htp_mem_free(ctx, dev_out);
    htp_mem_free(ctx, dev_scratch);
  }
  htp_balancer_destroy(b);
  htp_ctx_destroy(ctx);
  free(out);
  free(scratch);
  return NULL;
}

static void run(const scenario *sc) {
  static int initialised;
  if (initialised) model_free(&the_model);
  initialised = 1;
  model_init(&the_model, GLOBAL_TP, 0x5eed);
  for (int l = 0; l < LAYERS; ++l) {
    reference_attention(&the_model, l, NULL, reference[2 * l]);
    reference_mlp(&the_model, l, NULL, reference[2 * l + 1]);
  }
  memset(reports, 0, sizeof reports);
  the_scenario = sc;
  harness_device = sc->on_device ? HTP_DEVICE_CHECKED : HTP_DEVICE_CPU;
  run_world(world_of(sc), rank_main, NULL);
  harness_device = HTP_DEVICE_CPU;
}

/* Every global unit in exactly one slot of one rank, the ranks' maps
 * alike, each rank's count its owned, each slot's contents its unit's (and
 * the states' (j + 2) x that), bit for bit; empty slots zero. */
static void assert_ownership_exact(void) {
  const int world = world_of(the_scenario);
  for (int r = 1; r < world; ++r) {
    assert_memory_equal(reports[r].heads_map, reports[0].heads_map, sizeof reports[0].heads_map);
    assert_memory_equal(reports[r].units_map, reports[0].units_map, sizeof reports[0].units_map);
  }
  int seen_heads[GHEADS] = {0}, seen_units[GUNITS] = {0};
  for (int r = 0; r < world; ++r) {
    const int32_t *heads = reports[0].heads_map + r * HEADS, *units = reports[0].units_map + r * UNITS;
    int owned_heads = 0, owned_units = 0;
    for (int s = 0; s < HEADS; ++s) {
      if (heads[s] < 0) continue;
      assert_true(heads[s] < GHEADS);
      seen_heads[heads[s]]++;
      assert_int_equal(s, owned_heads++); /* owned slots are a prefix */
    }
    for (int s = 0; s < UNITS; ++s) {
      if (units[s] < 0) continue;
      assert_true(units[s] < GUNITS);
      seen_units[units[s]]++;
      assert_int_equal(s, owned_units++);
    }
    assert_int_equal(owned_heads, reports[r].owned[0]);
    assert_int_equal(owned_units, reports[r].owned[1]);
    for (int l = 0; l < LAYERS; ++l) {
      shard want, state;
      fill_shard(&the_model, l, heads, units, &want);
      assert_memory_equal(&reports[r].shards[l], &want, sizeof want);
      for (int j = 0; j < STATES; ++j) {
        scale_shard(&want, (float)(j + 2), &state);
        assert_memory_equal(&reports[r].states[j][l], &state, sizeof state);
      }
    }
  }
  for (int h = 0; h < GHEADS; ++h) assert_int_equal(seen_heads[h], 1);
  for (int u = 0; u < GUNITS; ++u) assert_int_equal(seen_units[u], 1);
}

/* A persistent 3x straggler: migrated, then re-partitioned once; the plan
 * then moves nothing, rank 2 owns fewer units, and nothing was lost. */
static void test_01_persistent_straggler_repartitions(void **unused) {
  (void)unused;
  FILE *trace = tmpfile();
  assert_non_null(trace);
  const scenario sc = {.ratio = 2.0, .slowdown = 3.0, .slow_steps = 1000, .steps = 24, .trace = trace};
  run(&sc);
  for (int r = 0; r < WORLD; ++r) {
    /* Migrating from step 0's plan: the moved units' bytes twice a step
     * (out, gradients back) against 3 once (weights, 2 states) x ratio 2:
     * equal at step 2, the step the re-partition happens. */
    assert_int_equal(reports[r].repartitioned_at, 2);
    assert_true(reports[r].worst_error < 1e-5);
    assert_int_equal(reports[r].repartitions, 1);
    assert_true(reports[r].migrated_at_some_step);
    assert_int_equal(reports[r].flows_at_end, 0);
  }
  assert_true(reports[2].owned[0] < OWNED_HEADS[2] || reports[2].owned[1] < OWNED_UNITS[2]);
  assert_ownership_exact();
  /* The trace weighed it: lines that chose to migrate, one that chose the
   * re-partition per rank, then lines with the new ownership. */
  rewind(trace);
  char line[8192];
  int migrate = 0, repartition = 0, after = 0;
  while (fgets(line, sizeof line, trace)) {
    if (getenv("SHOW_TRACE")) fputs(line, stderr);
    migrate += strstr(line, "\"choice\":\"migrate\"") != NULL;
    repartition += strstr(line, "\"choice\":\"repartition\"") != NULL;
    after += strstr(line, "\"repartitions\":1") != NULL;
  }
  fclose(trace);
  assert_true(migrate > 0);
  assert_int_equal(repartition, WORLD);
  assert_true(after > 0);
}

/* The same under SEMI (a 3x straggler migrates) with importance selection
 * and the same imputation: their per-slot state (scores, stored values)
 * restarts at the re-partition, and nothing else changes. */
static void test_01b_importance_and_same(void **unused) {
  (void)unused;
  const scenario sc = {.ratio = 2.0, .slowdown = 3.0, .slow_steps = 1000, .steps = 24,
                       .policy = HTP_POLICY_SEMI, .selection = HTP_SELECT_IMPORTANCE,
                       .impute = HTP_IMPUTE_SAME};
  run(&sc);
  for (int r = 0; r < WORLD; ++r) {
    assert_true(reports[r].worst_error < 1e-5);
    assert_int_equal(reports[r].repartitions, 1);
    assert_int_equal(reports[r].flows_at_end, 0);
  }
  assert_ownership_exact();
}

/* The persistent straggler on the checked device: weights and states are
 * device memory the host cannot read, so the moves go through host copies
 * of the shards; ownership and every slot's contents exact as on the CPU. */
static void test_01c_on_checked_device(void **unused) {
  (void)unused;
  const scenario sc = {.ratio = 2.0, .slowdown = 3.0, .slow_steps = 1000, .steps = 24,
                       .on_device = 1};
  run(&sc);
  for (int r = 0; r < WORLD; ++r) {
    assert_true(reports[r].worst_error < 1e-5);
    assert_int_equal(reports[r].repartitions, 1);
    assert_int_equal(reports[r].flows_at_end, 0);
  }
  assert_true(reports[2].owned[0] < OWNED_HEADS[2] || reports[2].owned[1] < OWNED_UNITS[2]);
  assert_ownership_exact();
}

/* A straggler slow for 3 steps only: it migrates and the plan ends before
 * the bytes pay for a re-partition (ratio 50); and with ratio 0 a
 * persistent one migrates for ever. Ownership stays as compiled. */
static void test_02_transient_and_off_migrate(void **unused) {
  (void)unused;
  const scenario transient = {.ratio = 50.0, .slowdown = 3.0, .slow_steps = 3, .steps = 16},
                 off = {.ratio = 0.0, .slowdown = 3.0, .slow_steps = 1000, .steps = 16};
  const scenario *cases[2] = {&transient, &off};
  for (int c = 0; c < 2; ++c) {
    run(cases[c]);
    for (int r = 0; r < WORLD; ++r) {
      assert_true(reports[r].worst_error < 1e-5);
      assert_int_equal(reports[r].repartitions, 0);
      assert_true(reports[r].migrated_at_some_step);
      assert_int_equal(reports[r].owned[0], OWNED_HEADS[r]);
      assert_int_equal(reports[r].owned[1], OWNED_UNITS[r]);
    }
    assert_ownership_exact();
  }
}

/* A 20x straggler the plan lets shed every unit (max_gamma 0.95 of 2 heads
 * and of 4 MLP units rounds up to all): the re-partition still leaves it
 * one unit of each kind (a rank owns at least one), and nothing is lost. */
static void test_04_very_slow_keeps_one(void **unused) {
  (void)unused;
  const scenario sc = {.ratio = 2.0, .slowdown = 20.0, .slow_steps = 1000, .steps = 24};
  run(&sc);
  for (int r = 0; r < WORLD; ++r) {
    assert_true(reports[r].worst_error < 1e-5);
    assert_int_equal(reports[r].repartitions, 1);
  }
  assert_int_equal(reports[2].owned[0], 1);
  assert_int_equal(reports[2].owned[1], 1);
  assert_ownership_exact();
}

/* An even split on 2 ranks fills every slot: a persistent straggler
 * migrates, but no helper has an empty slot, so nothing is bought (no
 * re-partition, no error) and ownership stays as compiled. */
static void test_05_no_room_migrates(void **unused) {
  (void)unused;
  const scenario sc = {.ratio = 2.0, .slowdown = 3.0, .slow_steps = 1000, .steps = 16,
                       .world = 2};
  run(&sc);
  for (int r = 0; r < 2; ++r) {
    assert_true(reports[r].worst_error < 1e-5);
    assert_int_equal(reports[r].repartitions, 0);
    assert_true(reports[r].migrated_at_some_step);
    assert_int_equal(reports[r].owned[0], HEADS);
    assert_int_equal(reports[r].owned[1], UNITS);
  }
  assert_ownership_exact();
}

/* Hysteresis 6 and a ratio so small that the bytes never wait: rank 2
 * (3x) migrates alone from step 5's plan, rank 1 (1.2x, a straggler that
 * helps) turns 3x at step 6 and migrates from step 10's. The count of
 * steps held restarts at the change of migrators, not at rank 2's first. */
static void test_06_hold_restarts_with_new_migrators(void **unused) {
  (void)unused;
  const scenario sc = {.ratio = 0.01, .slowdown = 3.0, .slow_steps = 1000, .steps = 20,
                       .hysteresis = 6, .rank1_slow_from = 6, .rank1_before = 1.2};
  run(&sc);
  for (int r = 0; r < WORLD; ++r) {
    assert_true(reports[r].worst_error < 1e-5);
    assert_int_equal(reports[r].repartitions, 1);
    /* {2} migrates at steps 5-9 (5 < 6), {1, 2} from step 10: held 6 at 15. */
    assert_int_equal(reports[r].repartitioned_at, 15);
  }
  assert_ownership_exact();
}

/* Bad arguments: refused with a message, nothing registered. */
static void *bad_arguments_main(void *arg) {
  const rank_run *run = arg;
  htp_ctx *ctx = NULL;
  htp_balancer *b = NULL;
  CHECK(htp_ctx_create(run->world, run->rank, &ctx) == HTP_OK);
  htp_balancer_config config =
      harness_balancer_config(1, HTP_POLICY_MIGRATE, HTP_SELECT_RANDOM, HTP_IMPUTE_ZERO);
  config.repartition_ratio = -1.0;
  CHECK(htp_balancer_create(ctx, &config, &b) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "repartition_ratio") != NULL);
  config.repartition_ratio = NAN;
  CHECK(htp_balancer_create(ctx, &config, &b) == HTP_ERR_INVALID);
  config.repartition_ratio = 2.0;
  CHECK(htp_balancer_create(ctx, &config, &b) == HTP_OK);
  float weight[4], state[4];
  CHECK(htp_balancer_add_state(NULL, weight, state) == HTP_ERR_INVALID);
  CHECK(htp_balancer_add_state(b, NULL, state) == HTP_ERR_INVALID);
  CHECK(htp_balancer_add_state(b, weight, NULL) == HTP_ERR_INVALID);
  CHECK(htp_balancer_add_state(b, weight, state) == HTP_OK);
  CHECK(htp_balancer_add_state(b, weight, state) == HTP_ERR_INVALID);
  CHECK(strstr(htp_last_error(ctx), "registered already") != NULL);
  int32_t map[16];
  int64_t room = 0;
  CHECK(htp_balancer_slot_units(b, weight, map, 16, &room) == HTP_ERR_INVALID); /* no hook ran */
  CHECK(strstr(htp_last_error(ctx), "no pair weight") != NULL);
  CHECK(htp_balancer_slot_units(b, weight, NULL, 16, &room) == HTP_ERR_INVALID);
  CHECK(htp_balancer_repartitions(NULL) == 0 && htp_balancer_repartitions(b) == 0);
done:
  htp_balancer_destroy(b);
  htp_ctx_destroy(ctx);
  return NULL;
}

static void test_03_bad_arguments(void **unused) {
  (void)unused;
  run_world(1, bad_arguments_main, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_01_persistent_straggler_repartitions),
      cmocka_unit_test(test_01b_importance_and_same),
      cmocka_unit_test(test_01c_on_checked_device),
      cmocka_unit_test(test_02_transient_and_off_migrate),
      cmocka_unit_test(test_03_bad_arguments),
      cmocka_unit_test(test_04_very_slow_keeps_one),
      cmocka_unit_test(test_05_no_room_migrates),
      cmocka_unit_test(test_06_hold_restarts_with_new_migrators),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
