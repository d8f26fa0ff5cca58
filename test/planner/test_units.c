/*===- test/planner/test_units.c - unit tables and imputation ------------===*
 *
 * Every unit is computed exactly once (owner or one helper) or pruned on
 * its owner, checked unit by unit over all ranks' tables; selection orders
 * (seeded, importance); nested shed sets; the three imputations against
 * closed forms.
 *===----------------------------------------------------------------------===*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/htp.h"
#include "runtime/units_internal.h"

enum { WORLD = 8, LAYERS = 3 };

static htp_planner_config make_config(htp_policy policy) {
  htp_planner_config c = HTP_PLANNER_CONFIG_INITIALIZER;
  c.world_size = WORLD;
  c.num_layers = LAYERS;
  c.units_per_rank[HTP_PAIR_ATTENTION] = 6;
  c.units_per_rank[HTP_PAIR_MLP] = 40;
  c.policy = policy;
  return c;
}

/* Plans SEMI with a mild and a bad straggler and returns the planner. */
static htp_planner *semi_plan(const htp_planner_config *c, double mild, double bad) {
  htp_planner *p = NULL;
  assert_int_equal(htp_planner_create(c, &p), HTP_OK);
  double speeds[WORLD] = {1, 1, mild, 1, 1, bad, 1, 1};
  assert_int_equal(htp_planner_plan_speeds(p, speeds, NULL), HTP_OK);
  assert_int_equal(htp_plan_check(htp_planner_plan(p), NULL, 0), HTP_OK);
  return p;
}

/* Over all ranks' tables, each global unit is computed exactly once or
 * pruned on its owner, for every pair; counts match the plan. */
static void check_exactly_once(const htp_planner_config *c) {
  htp_planner *p = semi_plan(c, 0.8, 0.3);
  const htp_plan *plan = htp_planner_plan(p);
  htp_unit_table *tables[WORLD];
  for (int r = 0; r < WORLD; ++r) {
    assert_int_equal(htp_unit_table_create(c, r, HTP_SELECT_RANDOM, 99, &tables[r]), HTP_OK);
    assert_int_equal(htp_unit_table_update(tables[r], plan), HTP_OK);
  }
  int saw_pruned = 0, saw_moved = 0;
  for (int pair = 0; pair < 2 * LAYERS; ++pair) {
    int k = pair & 1, u = c->units_per_rank[k];
    int computed[WORLD][40], pruned[WORLD][40];
    memset(computed, 0, sizeof computed);
    memset(pruned, 0, sizeof pruned);
    for (int r = 0; r < WORLD; ++r) {
      htp_unit_sets s;
      assert_int_equal(htp_unit_table_get(tables[r], pair, &s), HTP_OK);
      assert_int_equal(s.units, u);
      assert_int_equal(s.owned, htp_config_owned(c, (htp_pair_kind)k, r));
      assert_int_equal(s.num_pruned, plan->pruned[k * WORLD + r]);
      assert_int_equal(s.num_out, plan->sent[k * WORLD + r]);
      assert_int_equal(s.num_in, plan->received[k * WORLD + r]);
      assert_int_equal(s.num_kept + s.num_pruned + s.num_out, s.owned);
      for (int i = 0; i < s.num_kept; ++i) computed[r][s.kept[i]]++;
      for (int i = 0; i < s.num_pruned; ++i) pruned[r][s.pruned[i]]++;
      for (int i = 0; i < s.num_in; ++i) {
        assert_in_range(s.in_unit[i], 0, htp_config_owned(c, (htp_pair_kind)k, s.in_src[i]) - 1);
        computed[s.in_src[i]][s.in_unit[i]]++;
      }
      for (int i = 0; i < s.num_out; ++i) assert_int_not_equal(s.out_dst[i], r);
      for (int i = 1; i < s.num_kept; ++i) assert_true(s.kept[i - 1] < s.kept[i]);
      saw_pruned += s.num_pruned;
      saw_moved += s.num_in;
    }
    /* Each owned unit computed once or pruned; an empty slot never. */
    for (int r = 0; r < WORLD; ++r)
      for (int i = 0; i < u; ++i)
        if (computed[r][i] + pruned[r][i] != (i < htp_config_owned(c, (htp_pair_kind)k, r)))
          fail_msg("pair %d unit %d of rank %d: computed %d pruned %d", pair, i, r,
                   computed[r][i], pruned[r][i]);
  }
  assert_true(saw_pruned > 0 && saw_moved > 0);
  for (int r = 0; r < WORLD; ++r) htp_unit_table_destroy(tables[r]);
  htp_planner_destroy(p);
}

/* 1: every unit is computed exactly once or pruned on its owner, with
 * every rank owning all its slots and with uneven shares (the last slots
 * of some ranks empty: in no set). */
static void test_01_exactly_once(void **unused) {
  (void)unused;
  htp_planner_config c = make_config(HTP_POLICY_SEMI);
  check_exactly_once(&c);
  const int32_t heads[WORLD] = {6, 6, 5, 6, 4, 3, 6, 6};
  const int32_t mlp[WORLD] = {40, 40, 33, 40, 20, 17, 40, 40};
  c.owned[HTP_PAIR_ATTENTION] = heads;
  c.owned[HTP_PAIR_MLP] = mlp;
  check_exactly_once(&c);
}

/* 2: shed sets are nested: a worse straggler prunes a superset. */
static void test_02_nested(void **unused) {
  (void)unused;
  htp_planner_config c = make_config(HTP_POLICY_RESIZE);
  htp_planner *p1 = semi_plan(&c, 0.8, 0.7), *p2 = semi_plan(&c, 0.6, 0.7);
  htp_unit_table *t1, *t2;
  assert_int_equal(htp_unit_table_create(&c, 2, HTP_SELECT_RANDOM, 5, &t1), HTP_OK);
  assert_int_equal(htp_unit_table_create(&c, 2, HTP_SELECT_RANDOM, 5, &t2), HTP_OK);
  assert_int_equal(htp_unit_table_update(t1, htp_planner_plan(p1)), HTP_OK);
  assert_int_equal(htp_unit_table_update(t2, htp_planner_plan(p2)), HTP_OK);
  htp_unit_sets a, b;
  assert_int_equal(htp_unit_table_get(t1, 1, &a), HTP_OK);
  assert_int_equal(htp_unit_table_get(t2, 1, &b), HTP_OK);
  assert_true(a.num_pruned > 0 && b.num_pruned > a.num_pruned);
  for (int i = 0; i < a.num_pruned; ++i) {
    int found = 0;
    for (int j = 0; j < b.num_pruned; ++j) found |= a.pruned[i] == b.pruned[j];
    assert_true(found);
  }
  /* Different seeds choose differently (the seed matters). */
  htp_unit_table *t3;
  assert_int_equal(htp_unit_table_create(&c, 2, HTP_SELECT_RANDOM, 6, &t3), HTP_OK);
  assert_int_equal(htp_unit_table_update(t3, htp_planner_plan(p2)), HTP_OK);
  htp_unit_sets d;
  assert_int_equal(htp_unit_table_get(t3, 1, &d), HTP_OK);
  assert_int_equal(d.num_pruned, b.num_pruned);
  assert_true(memcmp(d.pruned, b.pruned, (size_t)b.num_pruned * sizeof(int32_t)) != 0);
  htp_unit_table_destroy(t1);
  htp_unit_table_destroy(t2);
  htp_unit_table_destroy(t3);
  htp_planner_destroy(p1);
  htp_planner_destroy(p2);
}

/* 3: importance: least important pruned first; helpers learn ids later. */
static void test_03_importance(void **unused) {
  (void)unused;
  htp_planner_config c = make_config(HTP_POLICY_SEMI);
  htp_planner *p = semi_plan(&c, 0.8, 0.3);
  htp_unit_table *t;
  assert_int_equal(htp_unit_table_create(&c, 2, HTP_SELECT_IMPORTANCE, 0, &t), HTP_OK);
  float scores[40];
  for (int i = 0; i < 40; ++i) scores[i] = (float)((i * 17) % 40); /* a permutation of 0..39 */
  assert_int_equal(htp_unit_table_set_scores(t, 3, scores), HTP_OK);
  assert_int_equal(htp_unit_table_update(t, htp_planner_plan(p)), HTP_OK);
  htp_unit_sets s;
  assert_int_equal(htp_unit_table_get(t, 3, &s), HTP_OK);
  assert_true(s.num_pruned > 0);
  for (int i = 0; i < s.num_pruned; ++i) assert_true(scores[s.pruned[i]] < (float)s.num_pruned);
  for (int i = 0; i < s.num_kept; ++i) assert_true(scores[s.kept[i]] >= (float)s.num_pruned);
  /* A helper's in ids are unknown (-1) until the transfer sets them. */
  htp_unit_table *helper;
  assert_int_equal(htp_unit_table_create(&c, 0, HTP_SELECT_IMPORTANCE, 0, &helper), HTP_OK);
  assert_int_equal(htp_unit_table_update(helper, htp_planner_plan(p)), HTP_OK);
  assert_int_equal(htp_unit_table_get(helper, 1, &s), HTP_OK);
  assert_true(s.num_in > 0);
  assert_int_equal(s.in_unit[0], -1);
  assert_int_equal(htp_unit_table_set_in_unit(helper, 1, 0, 7), HTP_OK);
  assert_int_equal(s.in_unit[0], 7);
  assert_int_equal(htp_unit_table_set_in_unit(helper, 1, 0, 40), HTP_ERR_INVALID);
  /* scores on a random table, or a bad pair, are refused */
  htp_unit_table *random;
  assert_int_equal(htp_unit_table_create(&c, 0, HTP_SELECT_RANDOM, 0, &random), HTP_OK);
  assert_int_equal(htp_unit_table_set_scores(random, 0, scores), HTP_ERR_INVALID);
  assert_int_equal(htp_unit_table_set_scores(t, 2 * LAYERS, scores), HTP_ERR_INVALID);
  htp_unit_table_destroy(random);
  assert_int_equal(htp_unit_table_create(&c, WORLD, HTP_SELECT_RANDOM, 0, &random), HTP_ERR_INVALID);
  assert_null(random);
  htp_unit_table_destroy(t);
  htp_unit_table_destroy(helper);
  htp_planner_destroy(p);
}

/* 4: imputation: rows of 4 units x width 2, units 1 and 3 pruned. */
static void test_04_impute(void **unused) {
  (void)unused;
  enum { ROWS = 3, UNITS = 4, W = 2, STRIDE = 9 };
  const int32_t kept[] = {0, 2}, pruned[] = {1, 3};
  htp_unit_sets sets = {.units = UNITS, .num_kept = 2, .kept = kept, .num_pruned = 2,
                        .pruned = pruned};
  float act[ROWS * STRIDE], before[ROWS * STRIDE];
  for (int i = 0; i < ROWS * STRIDE; ++i) act[i] = (float)(i + 1);
  memcpy(before, act, sizeof act);
  /* zero */
  assert_int_equal(htp_impute_fill(NULL, 0, HTP_IMPUTE_ZERO, act, ROWS, STRIDE, UNITS, W, &sets, 0, 0),
                   HTP_OK);
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < STRIDE; ++j) {
      int unit = j < UNITS * W ? j / W : -1;
      float expect = (unit == 1 || unit == 3) ? 0.0f : before[r * STRIDE + j];
      assert_true(act[r * STRIDE + j] == expect);
    }
  /* average: mean of units 0 and 2, elementwise */
  memcpy(act, before, sizeof act);
  assert_int_equal(
      htp_impute_fill(NULL, 0, HTP_IMPUTE_AVERAGE, act, ROWS, STRIDE, UNITS, W, &sets, 0, 0), HTP_OK);
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < W; ++j) {
      float mean = (before[r * STRIDE + 0 * W + j] + before[r * STRIDE + 2 * W + j]) / 2;
      assert_true(act[r * STRIDE + 1 * W + j] == mean);
      assert_true(act[r * STRIDE + 3 * W + j] == mean);
    }
  /* same: last iteration's stored values (when the units were kept) */
  htp_imputer *imputer;
  assert_int_equal(htp_imputer_create(2, &imputer), HTP_OK);
  const int32_t all[] = {0, 1, 2, 3};
  htp_unit_sets all_kept = {.units = UNITS, .num_kept = 4, .kept = all};
  memcpy(act, before, sizeof act);
  assert_int_equal(htp_imputer_store(imputer, 1, act, ROWS, STRIDE, UNITS, W, &all_kept, 10), HTP_OK);
  for (int i = 0; i < ROWS * STRIDE; ++i) act[i] = -1.0f; /* next iteration's values */
  assert_int_equal(
      htp_impute_fill(imputer, 1, HTP_IMPUTE_SAME, act, ROWS, STRIDE, UNITS, W, &sets, 11, 1), HTP_OK);
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < W; ++j) {
      assert_true(act[r * STRIDE + 1 * W + j] == before[r * STRIDE + 1 * W + j]);
      assert_true(act[r * STRIDE + 3 * W + j] == before[r * STRIDE + 3 * W + j]);
      assert_true(act[r * STRIDE + 0 * W + j] == -1.0f); /* kept: untouched */
    }
  /* same_max_age: stored at step 10, read at 12 with max age 1: zeros; with
   * max age 2, or 0 (any age): the stored values */
  for (int i = 0; i < ROWS * STRIDE; ++i) act[i] = -1.0f;
  assert_int_equal(
      htp_impute_fill(imputer, 1, HTP_IMPUTE_SAME, act, ROWS, STRIDE, UNITS, W, &sets, 12, 1), HTP_OK);
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < W; ++j) {
      assert_true(act[r * STRIDE + 1 * W + j] == 0.0f);
      assert_true(act[r * STRIDE + 3 * W + j] == 0.0f);
    }
  for (int age = 0; age <= 2; age += 2) {
    for (int i = 0; i < ROWS * STRIDE; ++i) act[i] = -1.0f;
    assert_int_equal(htp_impute_fill(imputer, 1, HTP_IMPUTE_SAME, act, ROWS, STRIDE, UNITS, W,
                                     &sets, 12, age), HTP_OK);
    assert_true(act[1 * W] == before[1 * W] && act[2 * STRIDE + 3 * W + 1] == before[2 * STRIDE + 3 * W + 1]);
  }
  assert_int_equal(htp_impute_fill(imputer, 1, HTP_IMPUTE_SAME, act, ROWS, STRIDE, UNITS, W,
                                   &sets, 12, -1), HTP_ERR_INVALID);
  assert_true(htp_same_usable(10, 11, 1) && !htp_same_usable(-1, 11, 0) && htp_same_usable(0, 99, 0));
  /* store_listed: a compact act of units 3 then 1 (2 columns of W a row) */
  {
    float compact[ROWS * 2 * W];
    for (int i = 0; i < ROWS * 2 * W; ++i) compact[i] = 100.0f + (float)i;
    const int32_t listed[] = {3, 1};
    assert_int_equal(htp_imputer_store_listed(imputer, 1, compact, ROWS, 2 * W, UNITS, W, listed,
                                              2, 20), HTP_OK);
    assert_int_equal(htp_imputer_stored_at(imputer, 1, 3), 20);
    assert_int_equal(htp_imputer_stored_at(imputer, 1, 0), 10);
    for (int i = 0; i < ROWS * STRIDE; ++i) act[i] = -1.0f;
    assert_int_equal(htp_impute_fill(imputer, 1, HTP_IMPUTE_SAME, act, ROWS, STRIDE, UNITS, W,
                                     &sets, 21, 1), HTP_OK);
    for (int r = 0; r < ROWS; ++r)
      for (int j = 0; j < W; ++j) {
        assert_true(act[r * STRIDE + 3 * W + j] == compact[r * 2 * W + j]);
        assert_true(act[r * STRIDE + 1 * W + j] == compact[r * 2 * W + W + j]);
      }
    const int32_t bad[] = {4};
    assert_int_equal(htp_imputer_store_listed(imputer, 1, compact, ROWS, 2 * W, UNITS, W, bad, 1,
                                              22), HTP_ERR_INVALID);
    assert_int_equal(htp_imputer_stored_at(imputer, 1, 4), -1);
  }
  /* same with nothing stored for pair 0: zeros */
  assert_int_equal(
      htp_impute_fill(imputer, 0, HTP_IMPUTE_SAME, act, ROWS, STRIDE, UNITS, W, &sets, 0, 0), HTP_OK);
  assert_true(act[1 * W] == 0.0f);
  /* bad layouts */
  assert_int_equal(htp_impute_fill(NULL, 0, HTP_IMPUTE_ZERO, act, ROWS, 7, UNITS, W, &sets, 0, 0),
                   HTP_ERR_INVALID);
  assert_int_equal(htp_impute_fill(NULL, 0, HTP_IMPUTE_ZERO, act, ROWS, STRIDE, 5, W, &sets, 0, 0),
                   HTP_ERR_INVALID);
  htp_impute impute;
  assert_int_equal(htp_impute_parse("average", &impute), HTP_OK);
  assert_int_equal(impute, HTP_IMPUTE_AVERAGE);
  assert_int_equal(htp_impute_parse("mean", &impute), HTP_ERR_INVALID);
  htp_imputer_destroy(imputer);
  htp_imputer_destroy(NULL);
}

/* 5: the seeded shed order is a uniform shuffle (Fisher-Yates): over 2000
 * seeds the first unit a straggler hands off is its unit 0 about 1/6 of
 * the time (6 heads). A cyclic shuffle (Sattolo's) never leaves a unit in
 * its place, so it never would. */
static void test_05_shuffle_fixed_points(void **unused) {
  (void)unused;
  htp_planner_config c = make_config(HTP_POLICY_MIGRATE);
  htp_planner *p = semi_plan(&c, 1.0, 0.3);
  const htp_plan *plan = htp_planner_plan(p);
  assert_true(plan->sent[HTP_PAIR_ATTENTION * WORLD + 5] > 0);
  int first_is_zero = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    htp_unit_table *t;
    assert_int_equal(htp_unit_table_create(&c, 5, HTP_SELECT_RANDOM, seed, &t), HTP_OK);
    assert_int_equal(htp_unit_table_update(t, plan), HTP_OK);
    htp_unit_sets s;
    assert_int_equal(htp_unit_table_get(t, 0, &s), HTP_OK);
    assert_true(s.num_out > 0);
    first_is_zero += s.out_unit[0] == 0;
    htp_unit_table_destroy(t);
  }
  assert_in_range(first_is_zero, 2000 / 12, 2000 / 3); /* expected 333 */
  htp_planner_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_01_exactly_once),
      cmocka_unit_test(test_02_nested),
      cmocka_unit_test(test_03_importance),
      cmocka_unit_test(test_04_impute),
      cmocka_unit_test(test_05_shuffle_fixed_points),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
