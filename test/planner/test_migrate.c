/*===- test/planner/test_migrate.c - transfers and the step over threads -===*
 *
 * Ranks are threads of one local world. Migration: each unit's weights are a
 * pattern of (owner, pair, unit); after every plan change each helper's
 * cache must hold exactly the units the plan gives it, byte for byte
 * (memcmp and a checksum), no unit lost or held twice, and an unchanged
 * assignment moves no bytes. Step: htp_balancer_step gathers, every rank gets the same plan, and writes one trace line per
 * iteration (jansson's output, read back with jansson), whose comm_seconds
 * is the growth of htp_ctx_comm_seconds between lines.
 *===----------------------------------------------------------------------===*/
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/balance_internal.h"
#include "runtime/htp.h"
#include "runtime/htp_ops.h"
#include "runtime/units_internal.h"

#include <jansson.h>
#include <math.h>

enum { WORLD = 4, LAYERS = 2, HEADS = 4, MLP = 16 };
static const size_t BYTES[2] = {96, 40};

static unsigned char pattern(int owner, int pair, int unit, size_t i) {
  return (unsigned char)(owner * 31 + pair * 7 + unit * 13 + i * 5 + 1);
}

static int pack(void *user, int pair, int unit, void *dst) {
  int owner = *(int *)user;
  for (size_t i = 0; i < BYTES[pair & 1]; ++i) ((unsigned char *)dst)[i] = pattern(owner, pair, unit, i);
  return 0;
}

/* The balancer config of these tests (the migration tests take its planner's). */
static htp_balancer_config make_config(void) {
  htp_balancer_config c = HTP_BALANCER_CONFIG_INITIALIZER;
  c.planner.world_size = WORLD;
  c.planner.num_layers = LAYERS;
  c.planner.units_per_rank[0] = HEADS;
  c.planner.units_per_rank[1] = MLP;
  c.planner.policy = HTP_POLICY_MIGRATE;
  return c;
}

/* Shared between the rank threads (each writes its own row). */
static int held[WORLD][2 * LAYERS][WORLD][MLP];    /* [holder][pair][owner][unit] computed */
static uint64_t received_bytes[WORLD][8];
static int failures;

typedef struct rank_run {
  htp_world *world;
  int rank;
  htp_select selection;
  /* What the rank thread made (NULL: not made), destroyed by rank_close. */
  htp_ctx *ctx;
  htp_planner *planner;
  htp_unit_table *table;
  htp_migration *m;
  htp_balancer *b;
} rank_run;

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "rank %d: %s:%d: %s\n", run->rank, __FILE__, __LINE__, #cond);   \
      __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);                               \
      goto done;                                                                         \
    }                                                                                    \
  } while (0)

static void record(const rank_run *run) {
  memset(held[run->rank], 0, sizeof held[run->rank]);
  for (int p = 0; p < 2 * LAYERS; ++p) {
    htp_unit_sets s;
    htp_unit_table_get(run->table, p, &s);
    for (int i = 0; i < s.num_kept; ++i) held[run->rank][p][run->rank][s.kept[i]]++;
    for (int i = 0; i < s.num_in; ++i) {
      const unsigned char *w = htp_migration_weights(run->m, p, s.in_src[i], s.in_unit[i]);
      int exact = w != NULL;
      for (size_t b = 0; w && b < BYTES[p & 1]; ++b)
        exact &= w[b] == pattern(s.in_src[i], p, s.in_unit[i], b);
      if (exact) held[run->rank][p][s.in_src[i]][s.in_unit[i]]++;
    }
  }
}

static void rank_close(rank_run *run) {
  htp_balancer_destroy(run->b);
  htp_migration_destroy(run->m);
  htp_unit_table_destroy(run->table);
  htp_planner_destroy(run->planner);
  htp_ctx_destroy(run->ctx);
}

/* The rank's unit table (seed 11) and migration under c. */
static int migration_open(rank_run *run, const htp_planner_config *c) {
  return htp_unit_table_create(c, run->rank, run->selection, 11, &run->table) == HTP_OK &&
         htp_migration_create(c, run->rank, BYTES, &run->m) == HTP_OK;
}

/* The rank's context and a balancer under c on it. */
static int balancer_open(rank_run *run, const htp_balancer_config *c) {
  return htp_ctx_create(run->world, run->rank, &run->ctx) == HTP_OK &&
         htp_balancer_create(run->ctx, c, &run->b) == HTP_OK;
}

static void *rank_main(void *arg) {
  rank_run *run = arg;
  htp_planner_config c = make_config().planner;
  CHECK(htp_ctx_create(run->world, run->rank, &run->ctx) == HTP_OK);
  CHECK(htp_planner_create(&c, &run->planner) == HTP_OK);
  CHECK(migration_open(run, &c));
  if (run->selection == HTP_SELECT_IMPORTANCE) {
    float scores[MLP];
    for (int p = 0; p < 2 * LAYERS; ++p) {
      for (int i = 0; i < MLP; ++i) scores[i] = (float)((i * 5 + run->rank + p) % MLP);
      CHECK(htp_unit_table_set_scores(run->table, p, scores) == HTP_OK);
    }
  }
  /* Phase 4 migrates again after phase 3 moved nothing: it re-sends what
   * the helpers dropped, however phase 2 had placed it. */
  const double phases[5][WORLD] = {
      {1, 1, 1, 0.3}, {1, 1, 1, 0.3}, {1, 0.4, 1, 0.25}, {1, 1, 1, 1}, {1, 1, 1, 0.3}};
  for (int phase = 0; phase < 5; ++phase) {
    CHECK(htp_planner_plan_speeds(run->planner, phases[phase], NULL) == HTP_OK);
    const htp_plan *plan = htp_planner_plan(run->planner);
    CHECK(htp_plan_check(plan, NULL, 0) == HTP_OK);
    CHECK(htp_migration_apply(run->m, run->ctx, plan, run->table, pack, &run->rank) == HTP_OK);
    /* applying the same version again moves nothing */
    CHECK(htp_migration_apply(run->m, run->ctx, plan, run->table, pack, &run->rank) == HTP_OK);
    CHECK(htp_migration_last_bytes_received(run->m) == 0);
    CHECK(htp_barrier(run->ctx) == HTP_OK);
    htp_unit_sets s;
    int in_total = 0;
    for (int p = 0; p < 2 * LAYERS; ++p) {
      CHECK(htp_unit_table_get(run->table, p, &s) == HTP_OK);
      in_total += s.num_in;
    }
    CHECK(htp_migration_cached_units(run->m) == in_total);
    if (phase == 3) CHECK(in_total == 0); /* nobody migrates */
    record(run);
    received_bytes[run->rank][phase] = htp_migration_total_bytes(run->m);
    CHECK(htp_barrier(run->ctx) == HTP_OK); /* main checks between phases via the arrays */
    if (run->rank == 0) {
      /* every unit of every owner computed exactly once (no pruning here) */
      for (int p = 0; p < 2 * LAYERS; ++p)
        for (int owner = 0; owner < WORLD; ++owner)
          for (int u = 0; u < (p & 1 ? MLP : HEADS); ++u) {
            int count = 0;
            for (int h = 0; h < WORLD; ++h) count += held[h][p][owner][u];
            if (count != 1) {
              fprintf(stderr, "phase %d pair %d owner %d unit %d held %d times\n", phase, p,
                      owner, u, count);
              __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
            }
          }
    }
    CHECK(htp_barrier(run->ctx) == HTP_OK);
  }
  /* phase 1 repeats phase 0's flows under a new version: nothing re-sent */
  CHECK(received_bytes[run->rank][1] == received_bytes[run->rank][0]);
  /* phase 4 repeats phase 0's plan from an empty cache: as many bytes */
  CHECK(received_bytes[run->rank][4] - received_bytes[run->rank][3] ==
        received_bytes[run->rank][0]);
done:
  rank_close(run);
  return NULL;
}

static void run_world(htp_select selection, void *(*body)(void *)) {
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.world_size = WORLD;
  config.timeout_s = 10.0;
  htp_world *world = NULL;
  assert_int_equal(htp_world_create(&config, &world), HTP_OK);
  pthread_t threads[WORLD];
  rank_run runs[WORLD];
  failures = 0;
  for (int r = 0; r < WORLD; ++r) {
    runs[r] = (rank_run){.world = world, .rank = r, .selection = selection};
    assert_int_equal(pthread_create(&threads[r], NULL, body, &runs[r]), 0);
  }
  for (int r = 0; r < WORLD; ++r) pthread_join(threads[r], NULL);
  htp_world_destroy(world);
  assert_int_equal(failures, 0);
}

/* 1: random selection: ids known on both sides, transfers exact. */
static void test_01_migration_random(void **unused) {
  (void)unused;
  run_world(HTP_SELECT_RANDOM, rank_main);
}

/* 2: importance selection: helpers learn the ids from the transfer. */
static void test_02_migration_importance(void **unused) {
  (void)unused;
  run_world(HTP_SELECT_IMPORTANCE, rank_main);
}

/* 3: the step: every rank gets the same plan; one trace line per rank per
 * iteration; rank 3 is slowed 3x and becomes a migrating straggler. The
 * site seconds are booked as hooks would; only the step runs (no block, so
 * nothing to migrate). Rank 2 waits 20 ms in a barrier it enters late before
 * iteration 5's step, so its peers' iteration-5 lines carry that wait. */
static char trace_text[1 << 16];
static FILE *trace_stream;
static const htp_plan *step_plans[WORLD]; /* each rank's final plan */
static int plans_differ;
static double comm_total[WORLD];          /* htp_ctx_comm_seconds growth over the run */

static void *step_main(void *arg) {
  rank_run *run = arg;
  htp_balancer_config c = make_config();
  c.planner.policy = HTP_POLICY_SEMI;
  c.model_dim = 4; /* hooked, so the booked site seconds travel */
  c.head_dim = 2;
  c.mlp_unit_width = 2;
  CHECK(balancer_open(run, &c));
  const double comm_start = htp_ctx_comm_seconds(run->ctx);
  htp_balancer_set_trace(run->b, trace_stream);
  const htp_plan *plan = NULL;
  for (int it = 0; it < 8; ++it) {
    if (it == 5) {
      if (run->rank == 2) {
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
      }
      CHECK(htp_barrier(run->ctx) == HTP_OK);
    }
    double work = htp_plan_rank_work(htp_planner_plan(htp_balancer_planner(run->b)), &c.planner,
                                     run->rank);
    double seconds = work * (run->rank == 3 ? 3e-3 : 1e-3);
    htp__balancer_add_site_seconds(run->b, HTP_PAIR_ATTENTION, seconds / 3);
    htp__balancer_add_site_seconds(run->b, HTP_PAIR_MLP, 2 * seconds / 3);
    CHECK(htp_balancer_step(run->b, seconds, &plan) == HTP_OK);
    CHECK(plan == htp_planner_plan(htp_balancer_planner(run->b)));
  }
  CHECK(plan->straggler[3] && plan->action[3] == HTP_ACTION_MIGRATE);
  comm_total[run->rank] = htp_ctx_comm_seconds(run->ctx) - comm_start;
  step_plans[run->rank] = plan;
  CHECK(htp_barrier(run->ctx) == HTP_OK); /* every plan published ... */
  if (!htp_plan_equal(step_plans[0], plan)) plans_differ = 1;
  CHECK(htp_barrier(run->ctx) == HTP_OK); /* ... and compared before any goes */
  /* Refused, and (a collective) the world fails, last. */
  const htp_plan *refused = plan;
  CHECK(htp_balancer_step(run->b, -1.0, &refused) == HTP_ERR_INVALID && !refused);
  CHECK(strstr(htp_last_error(run->ctx), "compute_seconds") != NULL);
  CHECK(htp_balancer_step(NULL, 1.0, &refused) == HTP_ERR_INVALID);
  CHECK(htp_world_status(run->world) != HTP_OK);
done:
  rank_close(run);
  return NULL;
}

static void test_03_step_and_trace(void **unused) {
  (void)unused;
  memset(trace_text, 0, sizeof trace_text);
  trace_stream = fmemopen(trace_text, sizeof trace_text - 1, "w");
  assert_non_null(trace_stream);
  plans_differ = 0;
  run_world(HTP_SELECT_RANDOM, step_main);
  fclose(trace_stream);
  assert_int_equal(plans_differ, 0);
  int lines = 0;
  for (char *at = trace_text; (at = strchr(at, '\n')); ++at) lines++;
  assert_int_equal(lines, 8 * WORLD);
  assert_non_null(strstr(trace_text, "{\"iter\":7,\"rank\":3,"));
  assert_non_null(strstr(trace_text, "\"action\":\"migrate\""));
  assert_non_null(strstr(trace_text, "\"stragglers\":[{\"rank\":3,"));
  assert_non_null(strstr(trace_text, "\"replanned\":true"));
  /* Every line parses, has every key, and per rank comm_seconds add up to
   * what the context counted (the step's all-gathers and the barrier). */
  static const char *const keys[] = {
      "iter", "rank", "seconds", "comm_seconds", "site_seconds", "speed", "plan", "replanned",
      "policy", "target_time", "action", "gamma", "pruned", "sent", "received", "moved_bytes",
      "stragglers"};
  double comm_sum[WORLD] = {0}, comm_at_5[WORLD] = {0};
  char *save = NULL;
  for (char *text = strtok_r(trace_text, "\n", &save); text; text = strtok_r(NULL, "\n", &save)) {
    json_error_t error;
    json_t *line = json_loads(text, 0, &error);
    assert_non_null(line);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; ++k)
      assert_non_null(json_object_get(line, keys[k]));
    int rank = (int)json_integer_value(json_object_get(line, "rank"));
    int iter = (int)json_integer_value(json_object_get(line, "iter"));
    assert_true(rank >= 0 && rank < WORLD);
    double comm = json_real_value(json_object_get(line, "comm_seconds"));
    assert_true(comm >= 0.0);
    comm_sum[rank] += comm;
    if (iter == 5) comm_at_5[rank] = comm;
    assert_true(json_is_array(json_object_get(line, "site_seconds")));
    json_decref(line);
  }
  for (int r = 0; r < WORLD; ++r) {
    assert_true(fabs(comm_sum[r] - comm_total[r]) < 1e-6);
    /* ranks that waited for rank 2's late barrier show it in that line */
    if (r != 2) assert_true(comm_at_5[r] >= 0.015);
  }
}

/* 4: a hookless balancer: the hooks compute every unit (as with no
 * balancer), end_iteration does not apply (nothing to pack), and a config
 * with only some of model_dim / head_dim / mlp_unit_width is refused. */
static void *hookless_main(void *arg) {
  rank_run *run = arg;
  htp_balancer_config c = make_config();
  CHECK(htp_ctx_create(run->world, run->rank, &run->ctx) == HTP_OK);
  c.head_dim = 4;
  CHECK(htp_balancer_create(run->ctx, &c, &run->b) == HTP_ERR_INVALID && !run->b);
  c.head_dim = 0;
  CHECK(htp_balancer_create(run->ctx, &c, &run->b) == HTP_OK);
  CHECK(htp__balancer_table(run->b) == NULL && htp__balancer_migration(run->b) == NULL);
  /* a forced migrating plan: a hooked balancer would have to pack units */
  double speeds[WORLD] = {1.0, 1.0, 1.0, 0.3};
  CHECK(htp_planner_plan_speeds(htp_balancer_planner(run->b), speeds, NULL) == HTP_OK);
  const htp_plan *plan = NULL;
  char line[4096] = "";
  FILE *trace = fmemopen(line, sizeof line - 1, "w");
  CHECK(trace != NULL);
  htp_balancer_set_trace(run->b, trace);
  /* The balancer chooses from what was measured: no hooks ran, so the
   * planner compares wall - comm (1.5e-3 - 0.5e-3). */
  htp_iteration_measure measured = {1.5e-3, 0.5e-3, 7.0};
  htp_iteration_times times;
  CHECK(htp_balancer_end_iteration(run->b, &measured, &times, &plan) == HTP_OK);
  fclose(trace);
  CHECK(fabs(times.compute_seconds - 1e-3) < 1e-12 && times.hook_seconds == 0.0);
  CHECK(times.planned_seconds == times.compute_seconds);
  htp_balancer_set_trace(run->b, NULL);
  CHECK(plan != NULL);
  /* no hooks, no site seconds; the forced plan is traced */
  CHECK(strstr(line, "\"site_seconds\":null") != NULL);
  CHECK(strstr(line, "\"seconds\":0.001,\"comm_seconds\":") != NULL);
  CHECK(strstr(line, "\"stragglers\":[{\"rank\":3,") != NULL);
  /* every unit of a one-head attention with identity-ish weights */
  enum { D = 2, HD = 2, T = 1 };
  float x[T * D] = {1, 2}, wqkv[3 * HD * D] = {0}, wproj[D * HD] = {1, 0, 0, 1}, y[T * D];
  for (int i = 0; i < HD; ++i) wqkv[(2 * HD + i) * D + i] = 1; /* v = x */
  float scratch[64];
  CHECK(htp_rt_attention_scratch_floats(1, T, 1, HD) <= 64);
  CHECK(htp_rt_attention_f32(run->ctx, 0, x, wqkv, NULL, wproj, y, scratch, 1, T, D, 1, HD) ==
        HTP_OK);
  CHECK(y[0] == 1.0f && y[1] == 2.0f); /* one token: softmax 1, context = v = x */
  CHECK(htp_balancer_hook_seconds(run->b) == 0.0);
  /* --slow without hooks: the whole iteration is stretched, on the wall
   * clock also waited out (a slower device would take that long); on the
   * thread clock booked from the thread's CPU time, without a wait. */
  CHECK(htp_balancer_set_slowdown(run->b, 3.0) == HTP_OK);
  measured = (htp_iteration_measure){0.03, 0.01, 5.0};
  double started = htp_now();
  CHECK(htp_balancer_end_iteration(run->b, &measured, &times, NULL) == HTP_OK);
  CHECK(htp_now() - started >= 0.04); /* (3 - 1) x 0.02 */
  CHECK(fabs(times.compute_seconds - 0.06) < 1e-12 && times.planned_seconds == times.compute_seconds);
  CHECK(htp_balancer_set_clock(run->b, HTP_CLOCK_THREAD) == HTP_OK);
  measured = (htp_iteration_measure){9.0, 0.0, 0.02};
  started = htp_now();
  CHECK(htp_balancer_end_iteration(run->b, &measured, &times, NULL) == HTP_OK);
  CHECK(htp_now() - started < 1.0);
  CHECK(fabs(times.compute_seconds - 0.06) < 1e-12);
  /* A figure no clock gives is refused, naming it; nothing is stepped. */
  const htp_iteration_measure bad[] = {{-1.0, 0, 0}, {NAN, 0, 0}, {1, INFINITY, 0}, {1, 0, -2}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const htp_plan *refused = plan;
    CHECK(htp_balancer_end_iteration(run->b, &bad[i], &times, &refused) == HTP_ERR_INVALID);
    CHECK(!refused && times.planned_seconds == 0.0);
    CHECK(strstr(htp_last_error(run->ctx), "negative or not finite") != NULL);
  }
  CHECK(htp_balancer_end_iteration(run->b, NULL, NULL, NULL) == HTP_ERR_INVALID);
  CHECK(htp_balancer_end_iteration(NULL, &measured, NULL, NULL) == HTP_ERR_INVALID);
done:
  rank_close(run);
  return NULL;
}

static void test_04_hookless_balancer(void **unused) {
  (void)unused;
  run_world(HTP_SELECT_RANDOM, hookless_main);
}

/* 5: the step on seconds at the ends of the double range (R2: a rank's
 * 1e-320 made every rank spin in the planner, past any deadline). Every
 * rank gets a valid plan, speeds in (0, 1], the same plan. */
static void *extreme_main(void *arg) {
  rank_run *run = arg;
  htp_balancer_config c = make_config();
  c.planner.hysteresis_iters = 1;
  CHECK(balancer_open(run, &c));
  static const double seconds[][WORLD] = {{1e-320, 1.0, 1.0, 1.0},
                                          {1.0, 5e-324, 1e308, 1.0},
                                          {5e-324, 5e-324, 5e-324, 5e-324},
                                          {1.0, 1.0, 1.0, 1.0}};
  for (size_t step = 0; step < sizeof seconds / sizeof *seconds; ++step) {
    const htp_plan *plan = NULL;
    CHECK(htp_balancer_step(run->b, seconds[step][run->rank], &plan) == HTP_OK);
    CHECK(plan != NULL && htp_plan_check(plan, NULL, 0) == HTP_OK);
    const double *speeds = htp_planner_speeds(htp_balancer_planner(run->b));
    for (int r = 0; r < WORLD; ++r) CHECK(speeds[r] > 0.0 && speeds[r] <= 1.0);
    CHECK(isfinite(plan->target_time));
    step_plans[run->rank] = plan;
    CHECK(htp_barrier(run->ctx) == HTP_OK);
    if (run->rank == 0)
      for (int r = 1; r < WORLD; ++r) plans_differ |= !htp_plan_equal(step_plans[0], step_plans[r]);
    CHECK(htp_barrier(run->ctx) == HTP_OK);
  }
done:
  rank_close(run);
  return NULL;
}

static void test_05_step_extreme_seconds(void **unused) {
  (void)unused;
  alarm(20); /* a spinning rank ignores the world's deadline */
  plans_differ = 0;
  run_world(HTP_SELECT_RANDOM, extreme_main);
  assert_int_equal(plans_differ, 0);
  alarm(0);
}

/* 6: a received header naming unit id == units_per_rank is refused as a
 * bad id (not looked up). Rank 3 forges the first heads flow's header (the
 * format in migrate.c: ids then new flags, tag 0x4D00 + kind); its helper
 * alone applies. */
static char forged_error[256];

static void *forged_main(void *arg) {
  rank_run *run = arg;
  htp_planner_config c = make_config().planner;
  const double speeds[WORLD] = {1, 1, 1, 0.3};
  CHECK(htp_ctx_create(run->world, run->rank, &run->ctx) == HTP_OK);
  CHECK(htp_planner_create(&c, &run->planner) == HTP_OK);
  CHECK(htp_planner_plan_speeds(run->planner, speeds, NULL) == HTP_OK);
  const htp_plan *plan = htp_planner_plan(run->planner);
  CHECK(plan->num_flows[HTP_PAIR_ATTENTION] > 0);
  const htp_flow flow = plan->flows[HTP_PAIR_ATTENTION][0];
  CHECK(flow.src == 3);
  if (run->rank == 3) {
    int32_t header[2 * HEADS] = {0};
    header[0] = HEADS; /* one past the last head; not new */
    CHECK(htp_send_host(run->ctx, header, 2 * (size_t)flow.count * sizeof(int32_t), flow.dst,
                        0x4D00 + HTP_PAIR_ATTENTION) == HTP_OK);
  } else if (run->rank == flow.dst) {
    CHECK(migration_open(run, &c));
    CHECK(htp_migration_apply(run->m, run->ctx, plan, run->table, pack, &run->rank) ==
          HTP_ERR_INTERNAL);
    snprintf(forged_error, sizeof forged_error, "%s", htp_last_error(run->ctx));
  }
done:
  rank_close(run);
  return NULL;
}

static void test_06_migration_bad_unit_id(void **unused) {
  (void)unused;
  forged_error[0] = 0;
  run_world(HTP_SELECT_IMPORTANCE, forged_main);
  assert_non_null(strstr(forged_error, "bad unit id 4 from rank 3"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_01_migration_random),
      cmocka_unit_test(test_02_migration_importance),
      cmocka_unit_test(test_03_step_and_trace),
      cmocka_unit_test(test_04_hookless_balancer),
      cmocka_unit_test(test_05_step_extreme_seconds),
      cmocka_unit_test(test_06_migration_bad_unit_id),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
