/*===- test/executor/test_signature.c - Entry signature reader tests ------===*
 *
 * htp_signature_parse (runtime/htp_entry.h) on the JSON the compiler writes:
 * valid signatures parse into the shapes, shards and balance units they
 * describe (sizes checked against hand-computed values); every class of
 * hostile or broken signature is refused with a message naming the field,
 * and leaves the signature empty. htp_signature_balancer_config gives the
 * balancer what the balance record says.
 *===----------------------------------------------------------------------===*/
#include "runtime/htp_entry.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *const valid =
    "{\"htp_entry\": 2, \"entry\": \"small_block\",\n"
    " \"args\": [{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [2, 5, 12]},\n"
    "          {\"name\": \"blocks.0.norm1.weight\", \"role\": \"param\", \"dtype\": \"f32\",\n"
    "           \"shape\": [12]},\n"
    "          {\"name\": \"scalar\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": []}],\n"
    " \"results\": [{\"name\": \"result0\", \"dtype\": \"f32\", \"shape\": [2, 5, 12]}],\n"
    " \"workspace_bytes\": 3072, \"flops\": 23520}";

/* A signature with the given args, results and further top-level members. */
static char *signature_with(const char *args, const char *results, const char *extra) {
  const char *format = "{\"htp_entry\": 2, \"entry\": \"f\", \"args\": %s, \"results\": %s, "
                       "\"workspace_bytes\": 64%s}";
  size_t size = strlen(format) + strlen(args) + strlen(results) + strlen(extra) + 1;
  char *text = malloc(size);
  assert_non_null(text);
  snprintf(text, size, format, args, results, extra);
  return text;
}

#define RESULT_Y "[{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4]}]"
#define ARG_X "[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [4]}]"

static htp_result parse(const char *text, htp_signature *sig, char *err, size_t err_size) {
  return htp_signature_parse(text, text ? strlen(text) : 0, sig, err, err_size);
}

static void expect_refused_n(const char *text, size_t length, const char *expected) {
  htp_signature sig;
  char err[512] = "";
  htp_result status = htp_signature_parse(text, length, &sig, err, sizeof err);
  if (status != HTP_ERR_INVALID || strstr(err, expected) == NULL)
    fail_msg("expected refusal containing \"%s\", got status %d \"%s\" for %.300s", expected,
             (int)status, err, text ? text : "(null)");
  /* Refused: nothing is left allocated or half-filled. */
  assert_int_equal(sig.num_args, 0);
  assert_null(sig.args);
  assert_int_equal(sig.num_results, 0);
  assert_null(sig.results);
  assert_null(sig.entry);
  assert_int_equal(sig.tp, 1);
  assert_false(sig.balance.present);
}

static void expect_refused(const char *text, const char *expected) {
  expect_refused_n(text, text ? strlen(text) : 0, expected);
}

/* The args/results variant: frees the built text. */
static void expect_refused_with(const char *args, const char *results, const char *extra,
                                const char *expected) {
  char *text = signature_with(args, results, extra);
  expect_refused(text, expected);
  free(text);
}

static void expect_parsed_with(const char *args, const char *results, const char *extra,
                               htp_signature *sig) {
  char *text = signature_with(args, results, extra);
  char err[512] = "";
  if (parse(text, sig, err, sizeof err) != HTP_OK)
    fail_msg("expected success, got \"%s\" for %s", err, text);
  free(text);
}

static void test_valid(void **state) {
  (void)state;
  htp_signature sig;
  char err[256] = "";
  assert_int_equal(parse(valid, &sig, err, sizeof err), HTP_OK);
  assert_string_equal(err, "");
  assert_string_equal(sig.entry, "small_block");
  assert_int_equal(sig.num_args, 3);
  assert_int_equal(sig.args[0].role, HTP_SIG_INPUT);
  assert_string_equal(sig.args[0].name, "x");
  assert_int_equal(sig.args[0].rank, 3);
  assert_true(sig.args[0].dims[0] == 2 && sig.args[0].dims[1] == 5 && sig.args[0].dims[2] == 12);
  assert_int_equal(sig.args[0].count, 120);
  assert_int_equal(sig.args[0].bytes, 480);
  /* Not sharded: the global shape is the local one. */
  assert_int_equal(sig.args[0].shard_layout, HTP_SHARD_NONE);
  assert_int_equal(sig.args[0].global_dims[2], 12);
  assert_int_equal(sig.args[0].global_count, 120);
  assert_int_equal(sig.args[0].global_bytes, 480);
  assert_int_equal(sig.args[1].role, HTP_SIG_PARAM);
  assert_string_equal(sig.args[1].name, "blocks.0.norm1.weight");
  assert_int_equal(sig.args[2].rank, 0);
  assert_int_equal(sig.args[2].count, 1);
  assert_int_equal(sig.args[2].bytes, 4);
  assert_int_equal(sig.num_results, 1);
  assert_int_equal(sig.results[0].role, HTP_SIG_RESULT);
  assert_string_equal(sig.results[0].name, "result0");
  assert_int_equal(sig.workspace_bytes, 3072);
  assert_int_equal(sig.kernel_memory_bytes, -1); /* absent: unknown */
  assert_int_equal(sig.balancer_memory_bytes, -1);
  assert_int_equal(sig.flops, 23520);
  assert_int_equal(sig.tp, 1);
  assert_false(sig.balance.present);
  htp_signature_free(&sig);
  assert_null(sig.args);
  htp_signature_free(&sig); /* idempotent */
  htp_signature_free(NULL);
}

/* Unknown keys are skipped (later versions add keys); tp and flops are
 * optional; names may hold spaces and any printable UTF-8. */
static void test_optional_and_names(void **state) {
  (void)state;
  htp_signature sig;
  expect_parsed_with("[{\"name\": \"my input x\", \"role\": \"input\", \"dtype\": \"f32\", "
                     "\"shape\": [1, 4], \"future\": {\"a\": [1]}}, "
                     "{\"name\": \"bl\\u00f6cke \\u4e2d \\ud83d\\ude00\", \"role\": \"param\", "
                     "\"dtype\": \"f32\", \"shape\": [4]}]",
                     "[{\"name\": \"y y\", \"role\": \"result\", \"dtype\": \"f32\", "
                     "\"shape\": [4]}]",
                     ", \"units\": [3, 1], \"note\": \"x\"", &sig);
  assert_int_equal(sig.tp, 1);
  assert_int_equal(sig.flops, 0);
  assert_string_equal(sig.args[0].name, "my input x");
  assert_string_equal(sig.args[1].name, "bl\xc3\xb6" "cke \xe4\xb8\xad \xf0\x9f\x98\x80");
  assert_string_equal(sig.results[0].name, "y y");
  htp_signature_free(&sig);
  /* No arguments at all is a valid block; "balance": null is no record. */
  expect_parsed_with("[]", RESULT_Y, ", \"tp\": 4, \"balance\": null", &sig);
  assert_int_equal(sig.num_args, 0);
  assert_int_equal(sig.tp, 4);
  assert_false(sig.balance.present);
  htp_signature_free(&sig);
  /* A name of exactly HTP_ENTRY_MAX_NAME bytes is accepted. */
  char *name = malloc(HTP_ENTRY_MAX_NAME + 64);
  assert_non_null(name);
  int used = snprintf(name, 64, "[{\"name\": \"");
  memset(name + used, 'n', HTP_ENTRY_MAX_NAME);
  snprintf(name + used + HTP_ENTRY_MAX_NAME, 64, "\", \"dtype\": \"f32\", \"shape\": [4]}]");
  expect_parsed_with("[]", name, "", &sig);
  assert_int_equal(strlen(sig.results[0].name), HTP_ENTRY_MAX_NAME);
  htp_signature_free(&sig);
  /* One byte more is refused. */
  memset(name + used, 'n', HTP_ENTRY_MAX_NAME + 1);
  snprintf(name + used + HTP_ENTRY_MAX_NAME + 1, 63, "\", \"dtype\": \"f32\", \"shape\": [4]}]");
  expect_refused_with("[]", name, "", "results[0]: name must be 1 to 4096 bytes");
  free(name);
}

/* Sharded arguments: layouts, and the global shapes computed for them. */
static void test_shards(void **state) {
  (void)state;
  htp_signature sig;
  expect_parsed_with(
      "[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [5, 12]},"
      " {\"name\": \"blocks.0.attn.qkv.weight\", \"role\": \"param\", \"dtype\": \"f32\","
      "  \"shape\": [18, 12], \"shard\": {\"dim\": 0, \"parts\": 2, \"layout\": \"qkv\"}},"
      " {\"name\": \"blocks.0.attn.proj.weight\", \"role\": \"param\", \"dtype\": \"f32\","
      "  \"shape\": [12, 6], \"shard\": {\"dim\": 1, \"parts\": 2, \"layout\": \"blocks\"}},"
      " {\"name\": \"blocks.0.mlp.fc1.bias\", \"role\": \"param\", \"dtype\": \"f32\","
      "  \"shape\": [10], \"shard\": {\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\"}}]",
      RESULT_Y, ", \"tp\": 2, \"flops\": 10", &sig);
  assert_int_equal(sig.tp, 2);
  assert_int_equal(sig.args[0].shard_layout, HTP_SHARD_NONE);
  assert_int_equal(sig.args[1].shard_layout, HTP_SHARD_QKV);
  assert_int_equal(sig.args[1].shard_dim, 0);
  assert_int_equal(sig.args[1].shard_parts, 2);
  assert_true(sig.args[1].global_dims[0] == 36 && sig.args[1].global_dims[1] == 12);
  assert_int_equal(sig.args[1].count, 18 * 12); /* count and bytes stay local */
  assert_int_equal(sig.args[1].bytes, 18 * 12 * 4);
  assert_int_equal(sig.args[1].global_count, 36 * 12);
  assert_int_equal(sig.args[1].global_bytes, 36 * 12 * 4);
  assert_int_equal(sig.args[2].shard_layout, HTP_SHARD_BLOCKS);
  assert_int_equal(sig.args[2].shard_dim, 1);
  assert_true(sig.args[2].global_dims[0] == 12 && sig.args[2].global_dims[1] == 12);
  assert_true(sig.args[3].global_dims[0] == 20 && sig.args[3].global_bytes == 80);
  assert_true(sig.args[0].global_dims[0] == 5 && sig.args[0].global_count == 60);
  htp_signature_free(&sig);
}

#define BALANCE                                                                              \
  "\"layers\": 2, \"model_dim\": 48, \"heads\": 2, \"head_dim\": 12, \"head_flops\": 90720, " \
  "\"mlp_units\": 8, \"mlp_unit_width\": 6"

/* The balance record, and the balancer config made from it. */
static void test_balance(void **state) {
  (void)state;
  htp_signature sig;
  expect_parsed_with(ARG_X, RESULT_Y,
                     ", \"tp\": 3, \"balance\": {" BALANCE ", \"mlp_unit_flops\": 20736}", &sig);
  assert_true(sig.balance.present);
  assert_int_equal(sig.balance.layers, 2);
  assert_int_equal(sig.balance.model_dim, 48);
  assert_int_equal(sig.balance.heads, 2);
  assert_int_equal(sig.balance.head_dim, 12);
  assert_int_equal(sig.balance.head_flops, 90720);
  assert_int_equal(sig.balance.mlp_units, 8);
  assert_int_equal(sig.balance.mlp_unit_width, 6);
  assert_int_equal(sig.balance.mlp_unit_flops, 20736);
  htp_balancer_config config = HTP_BALANCER_CONFIG_INITIALIZER;
  config.seed = 77;
  config.impute = HTP_IMPUTE_AVERAGE;
  config.planner.policy = HTP_POLICY_MIGRATE;
  assert_int_equal(htp_signature_balancer_config(&sig, &config), HTP_OK);
  assert_int_equal(config.magic, HTP_BALANCER_CONFIG_MAGIC);
  assert_int_equal(config.planner.world_size, 3);
  assert_int_equal(config.planner.num_layers, 2);
  assert_int_equal(config.planner.units_per_rank[HTP_PAIR_ATTENTION], 2);
  assert_int_equal(config.planner.units_per_rank[HTP_PAIR_MLP], 8);
  assert_true(config.planner.unit_cost[HTP_PAIR_ATTENTION] == 1.0);
  assert_true(config.planner.unit_cost[HTP_PAIR_MLP] == 20736.0 / 90720.0);
  assert_int_equal(config.model_dim, 48);
  assert_int_equal(config.head_dim, 12);
  assert_int_equal(config.mlp_unit_width, 6);
  /* What the caller set stays. */
  assert_int_equal(config.seed, 77);
  assert_int_equal(config.impute, HTP_IMPUTE_AVERAGE);
  assert_int_equal(config.planner.policy, HTP_POLICY_MIGRATE);
  htp_signature_free(&sig);
  /* FLOPs ratios past the planner's cost range are clamped into it (the
   * planner refuses a config outside it). */
  static const struct {
    const char *flops;
    double cost;
  } extremes[] = {
      {", \"head_flops\": 1, \"mlp_unit_flops\": 9223372036854775807", HTP_UNIT_COST_MAX},
      {", \"head_flops\": 9223372036854775807, \"mlp_unit_flops\": 1", HTP_UNIT_COST_MIN}};
  for (size_t i = 0; i < sizeof extremes / sizeof *extremes; i++) {
    char extra[512];
    snprintf(extra, sizeof extra,
             ", \"tp\": 3, \"balance\": {\"layers\": 2, \"model_dim\": 48, \"heads\": 2, "
             "\"head_dim\": 12, \"mlp_units\": 8, \"mlp_unit_width\": 6%s}",
             extremes[i].flops);
    expect_parsed_with(ARG_X, RESULT_Y, extra, &sig);
    config = (htp_balancer_config)HTP_BALANCER_CONFIG_INITIALIZER;
    assert_int_equal(htp_signature_balancer_config(&sig, &config), HTP_OK);
    assert_true(config.planner.unit_cost[HTP_PAIR_MLP] == extremes[i].cost);
    assert_int_equal(htp_planner_config_check(&config.planner, NULL, 0), HTP_OK);
    htp_signature_free(&sig);
  }
  /* No record: no units to balance. */
  char err[256];
  assert_int_equal(parse(valid, &sig, err, sizeof err), HTP_OK);
  assert_false(sig.balance.present);
  assert_int_equal(htp_signature_balancer_config(&sig, &config), HTP_ERR_INVALID);
  assert_int_equal(htp_signature_balancer_config(NULL, &config), HTP_ERR_INVALID);
  htp_signature_free(&sig);

  /* Owned units (uneven shares): into the config; refused malformed. */
#define OWNED(lists) ", \"tp\": 3, \"balance\": {" BALANCE ", \"mlp_unit_flops\": 1" lists "}"
  expect_parsed_with(ARG_X, RESULT_Y,
                     OWNED(", \"heads_owned\": [2, 2, 1], \"mlp_units_owned\": [8, 6, 4]"), &sig);
  assert_true(sig.balance.heads_owned && sig.balance.heads_owned[2] == 1);
  assert_true(sig.balance.mlp_units_owned && sig.balance.mlp_units_owned[1] == 6);
  config = (htp_balancer_config)HTP_BALANCER_CONFIG_INITIALIZER;
  assert_int_equal(htp_signature_balancer_config(&sig, &config), HTP_OK);
  assert_ptr_equal(config.planner.owned[HTP_PAIR_ATTENTION], sig.balance.heads_owned);
  assert_ptr_equal(config.planner.owned[HTP_PAIR_MLP], sig.balance.mlp_units_owned);
  htp_signature_free(&sig);
  /* Spare room (an even split with spare): every rank owns fewer than its
   * slots (1 of 2 heads, 6 of 8 MLP units), and the planner is told so. */
  expect_parsed_with(ARG_X, RESULT_Y,
                     OWNED(", \"heads_owned\": [1, 1, 1], \"mlp_units_owned\": [6, 6, 6]"), &sig);
  config = (htp_balancer_config)HTP_BALANCER_CONFIG_INITIALIZER;
  assert_int_equal(htp_signature_balancer_config(&sig, &config), HTP_OK);
  assert_int_equal(config.planner.units_per_rank[HTP_PAIR_ATTENTION], 2);
  assert_int_equal(config.planner.units_per_rank[HTP_PAIR_MLP], 8);
  assert_int_equal(htp_config_owned(&config.planner, HTP_PAIR_ATTENTION, 2), 1);
  assert_int_equal(htp_config_owned(&config.planner, HTP_PAIR_MLP, 0), 6);
  htp_signature_free(&sig);
  expect_refused_with(ARG_X, RESULT_Y, OWNED(", \"heads_owned\": [2, 2, 1]"),
                      "balance: an uneven split has both \"heads_owned\" and "
                      "\"mlp_units_owned\"");
  expect_refused_with(ARG_X, RESULT_Y,
                      OWNED(", \"heads_owned\": [2, 2], \"mlp_units_owned\": [8, 6, 4]"),
                      "balance.heads_owned must be an array of one count per rank (3)");
  expect_refused_with(ARG_X, RESULT_Y,
                      OWNED(", \"heads_owned\": [2, 3, 1], \"mlp_units_owned\": [8, 6, 4]"),
                      "balance.heads_owned[1] is 3, not in [1, 2]");
  expect_refused_with(ARG_X, RESULT_Y,
                      OWNED(", \"heads_owned\": [2, 2, 1], \"mlp_units_owned\": [8, 0, 4]"),
                      "balance.mlp_units_owned[1] is 0, not in [1, 8]");
  expect_refused_with(ARG_X, RESULT_Y,
                      OWNED(", \"heads_owned\": 2, \"mlp_units_owned\": [8, 6, 4]"),
                      "balance.heads_owned must be an array");
#undef OWNED

  expect_refused_with(ARG_X, RESULT_Y, ", \"balance\": [1]", "\"balance\" must be an object");
  expect_refused_with(ARG_X, RESULT_Y, ", \"balance\": {" BALANCE "}",
                      "\"balance\" has no \"mlp_unit_flops\"");
  expect_refused_with(ARG_X, RESULT_Y,
                      ", \"balance\": {" BALANCE ", \"mlp_unit_flops\": 0}",
                      "balance.mlp_unit_flops is 0, not in [1,");
  expect_refused_with(ARG_X, RESULT_Y,
                      ", \"balance\": {" BALANCE ", \"mlp_unit_flops\": \"9\"}",
                      "balance.mlp_unit_flops must be an integer");
  expect_refused_with(ARG_X, RESULT_Y,
                      ", \"balance\": {\"layers\": 2, \"model_dim\": 48, \"heads\": 99999999999, "
                      "\"head_dim\": 12, \"head_flops\": 1, \"mlp_units\": 8, "
                      "\"mlp_unit_width\": 6, \"mlp_unit_flops\": 1}",
                      "balance.heads is 99999999999, not in [1, 1048576]");
  expect_refused_with(ARG_X, RESULT_Y,
                      ", \"balance\": {\"layers\": -2, \"model_dim\": 48, \"heads\": 2, "
                      "\"head_dim\": 12, \"head_flops\": 1, \"mlp_units\": 8, "
                      "\"mlp_unit_width\": 6, \"mlp_unit_flops\": 1}",
                      "balance.layers is -2");
  /* Products: heads x head_dim beyond a dim, one unit's weights beyond a tensor. */
  expect_refused_with(ARG_X, RESULT_Y,
                      ", \"balance\": {\"layers\": 2, \"model_dim\": 48, \"heads\": 1048576, "
                      "\"head_dim\": 2147483647, \"head_flops\": 1, \"mlp_units\": 8, "
                      "\"mlp_unit_width\": 6, \"mlp_unit_flops\": 1}",
                      "heads x head_dim");
  expect_refused_with(ARG_X, RESULT_Y,
                      ", \"balance\": {\"layers\": 2, \"model_dim\": 2147483647, \"heads\": 1, "
                      "\"head_dim\": 2147483647, \"head_flops\": 1, \"mlp_units\": 8, "
                      "\"mlp_unit_width\": 6, \"mlp_unit_flops\": 1}",
                      "one unit's weights are larger");
}

/* Text that is not JSON, or not one object, or has a NUL inside. */
static void test_bad_json(void **state) {
  (void)state;
  expect_refused(NULL, "no signature");
  expect_refused("", "not valid JSON (line 1, column 0)");
  expect_refused("{\"htp_entry\": 2,\n \"entry\": }", "not valid JSON (line 2, column 11)");
  expect_refused("{\"htp_entry\": 2", "not valid JSON");
  expect_refused("{} trailing", "not valid JSON");
  expect_refused("[]", "must be a JSON object");
  expect_refused("7", "not valid JSON"); /* jansson reads objects and arrays only */
  /* A NUL byte inside the text (the length says there is more). */
  const char with_nul[] = "{\"htp_entry\": 2}\0{\"more\": 1}";
  expect_refused_n(with_nul, sizeof with_nul - 1, "NUL byte at offset 16");
  /* Invalid UTF-8 in the text itself (jansson checks while reading). */
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\xff\"}", "not valid JSON");
  /* Integers beyond int64 are a JSON error, not a wrapped value. */
  expect_refused_with(ARG_X, RESULT_Y, ", \"flops\": 99999999999999999999999", "not valid JSON");
}

static void test_version_and_keys(void **state) {
  (void)state;
  expect_refused("{\"entry\": \"f\"}", "the signature has no \"htp_entry\"");
  expect_refused("{\"htp_entry\": 1, \"entry\": \"f\"}", "\"htp_entry\" is not 2");
  expect_refused("{\"htp_entry\": \"2\", \"entry\": \"f\"}", "\"htp_entry\" is not 2");
  expect_refused("{\"htp_entry\": 2.0, \"entry\": \"f\"}", "\"htp_entry\" is not 2");
  expect_refused("{\"htp_entry\": 2}", "has no \"entry\"");
  expect_refused("{\"htp_entry\": 2, \"entry\": 5}", "\"entry\" must be a string");
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\", \"results\": []}", "has no \"args\"");
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\", \"args\": []}", "has no \"results\"");
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\", \"args\": [], \"results\": " RESULT_Y "}",
                 "has no \"workspace_bytes\"");
  /* Duplicate keys, at the top and inside a tensor. */
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\", \"entry\": \"g\"}", "duplicate");
  expect_refused_with("[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", "
                      "\"shape\": [4], \"shape\": [4, 4]}]", RESULT_Y, "", "duplicate");
  /* Two arguments of one role with one name (the compiler refuses them;
   * an edited signature did not); a parameter and an input may share one. */
  expect_refused_with("[{\"name\": \"w\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [4]}, "
                      "{\"name\": \"w\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [4]}]",
                      RESULT_Y, "", "args[0] and args[1] are both parameter 'w': each names one tensor");
  expect_refused_with("[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [4]}, "
                      "{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [4]}]",
                      RESULT_Y, "", "args[0] and args[1] are both input 'x'");
  htp_signature both;
  expect_parsed_with("[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [4]}, "
                     "{\"name\": \"x\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [4]}]",
                     RESULT_Y, "", &both);
  htp_signature_free(&both);
  /* Wrong types of the lists and the scalars. */
  expect_refused_with("{}", RESULT_Y, "", "\"args\" must be an array");
  expect_refused_with("[]", "\"y\"", "", "\"results\" must be an array");
  expect_refused_with("[]", "[]", "", "\"results\" has 0 entries");
  expect_refused_with("[7]", RESULT_Y, "", "args[0] must be an object");
  expect_refused_with("[]", RESULT_Y, ", \"tp\": \"2\"", "\"tp\" must be an integer");
  expect_refused_with("[]", RESULT_Y, ", \"tp\": 2.5", "\"tp\" must be an integer");
  expect_refused_with("[]", RESULT_Y, ", \"flops\": -1", "\"flops\" is -1");
  /* flops x tp (the whole block's FLOPs) must fit. */
  expect_refused_with("[]", RESULT_Y, ", \"tp\": 4, \"flops\": 4611686018427387904",
                      "\"flops\" is 4611686018427387904, not in [0, 2305843009213693951]");
  /* Missing or wrong tensor fields. */
  expect_refused_with("[{\"role\": \"input\", \"dtype\": \"f32\", \"shape\": [4]}]", RESULT_Y, "",
                      "args[0] has no \"name\"");
  expect_refused_with("[{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4]}]", RESULT_Y, "",
                      "args[0] has no \"role\"");
  expect_refused_with("[{\"name\": \"x\", \"role\": \"weight\", \"dtype\": \"f32\", "
                      "\"shape\": [4]}]", RESULT_Y, "", "args[0]: role must be");
  expect_refused_with("[{\"name\": \"x\", \"role\": \"input\", \"shape\": [4]}]", RESULT_Y, "",
                      "args[0] has no \"dtype\"");
  expect_refused_with("[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f16\", "
                      "\"shape\": [4]}]", RESULT_Y, "", "args[0]: dtype must be \"f32\"");
  expect_refused_with("[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\"}]", RESULT_Y,
                      "", "args[0] has no \"shape\"");
  expect_refused_with("[]", "[{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": \"4\"}]", "",
                      "results[0]: shape must be an array");
  expect_refused_with("[]", "[{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [\"4\"]}]", "",
                      "results[0]: shape[0] must be an integer");
  expect_refused_with("[]", "[{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4.0]}]", "",
                      "results[0]: shape[0] must be an integer");
  expect_refused_with("[]", "[{\"name\": \"y\", \"role\": \"input\", \"dtype\": \"f32\", "
                      "\"shape\": [4]}]", "", "a result's role, when given, must be");
  expect_refused_with("[]", "[{\"name\": 3, \"dtype\": \"f32\", \"shape\": [4]}]", "",
                      "results[0]: name must be a string");
  expect_refused_with("[]", "[{\"name\": \"y\", \"dtype\": \"f32\", "
                      "\"shape\": [1, 1, 1, 1, 1, 1, 1, 1, 1]}]", "",
                      "shape must be an array of at most 8 dims");
}

/* Dims: every one in [1, 2^31 - 1]; products checked. */
static void test_dims_and_sizes(void **state) {
  (void)state;
#define ONE_RESULT(shape) "[{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": " shape "}]"
  expect_refused_with("[]", ONE_RESULT("[4, 0]"), "", "results[0]: shape[1] is 0, not in [1,");
  expect_refused_with("[]", ONE_RESULT("[-4]"), "", "shape[0] is -4");
  expect_refused_with("[]", ONE_RESULT("[2147483648]"), "", "shape[0] is 2147483648");
  expect_refused_with("[]", ONE_RESULT("[9223372036854775807]"), "",
                      "shape[0] is 9223372036854775807");
  expect_refused_with("[]", ONE_RESULT("[1e30]"), "", "shape[0] must be an integer");
  /* Each dim fits, the product does not (it would wrap int64). */
  expect_refused_with("[]", ONE_RESULT("[2147483647, 2147483647, 2147483647]"), "",
                      "results[0] is larger than 1099511627776 bytes");
  /* 2^38 bytes fits; 2^40 + 4 does not. */
  htp_signature sig;
  expect_parsed_with("[]", ONE_RESULT("[65536, 65536, 16]"), "", &sig);
  assert_int_equal(sig.results[0].bytes, (size_t)1 << 38);
  htp_signature_free(&sig);
  expect_refused_with("[]", ONE_RESULT("[65536, 65536, 64, 2]"), "", "is larger than");
  /* Workspace: negative, beyond the limit, huge. */
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\", \"args\": [], \"results\": " RESULT_Y
                 ", \"workspace_bytes\": -1}", "\"workspace_bytes\" is -1, not in [0, ");
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\", \"args\": [], \"results\": " RESULT_Y
                 ", \"workspace_bytes\": 1099511627777}", "\"workspace_bytes\" is 1099511627777");
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\", \"args\": [], \"results\": " RESULT_Y
                 ", \"workspace_bytes\": 9223372036854775807}", "\"workspace_bytes\" is");
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\", \"args\": [], \"results\": " RESULT_Y
                 ", \"workspace_bytes\": 64.5}", "\"workspace_bytes\" must be an integer");
  /* The kernels' and the balancer's own memory: optional, within the
   * workspace's limit. */
  static const char *const own[] = {"kernel_memory_bytes", "balancer_memory_bytes"};
  for (int k = 0; k < 2; k++) {
    char extra[96], why[96];
    snprintf(extra, sizeof extra, ", \"%s\": 1099511627776", own[k]);
    expect_parsed_with("[]", RESULT_Y, extra, &sig);
    assert_int_equal(k ? sig.balancer_memory_bytes : sig.kernel_memory_bytes, INT64_C(1) << 40);
    assert_int_equal(k ? sig.kernel_memory_bytes : sig.balancer_memory_bytes, -1);
    htp_signature_free(&sig);
    snprintf(extra, sizeof extra, ", \"%s\": -1", own[k]);
    snprintf(why, sizeof why, "\"%s\" is -1, not in [0, ", own[k]);
    expect_refused_with("[]", RESULT_Y, extra, why);
    snprintf(extra, sizeof extra, ", \"%s\": 1099511627777", own[k]);
    snprintf(why, sizeof why, "\"%s\" is 1099511627777", own[k]);
    expect_refused_with("[]", RESULT_Y, extra, why);
    snprintf(extra, sizeof extra, ", \"%s\": \"4 MB\"", own[k]);
    snprintf(why, sizeof why, "\"%s\" must be an integer", own[k]);
    expect_refused_with("[]", RESULT_Y, extra, why);
  }
}

/* More tensors than the limit. */
static void test_too_many_tensors(void **state) {
  (void)state;
  const char *one = "{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [1]},";
  size_t count = HTP_ENTRY_MAX_TENSORS + 1, size = count * strlen(one) + 3;
  char *list = malloc(size);
  assert_non_null(list);
  list[0] = '[';
  for (size_t i = 0; i < count; i++)
    memcpy(list + 1 + i * strlen(one), one, strlen(one));
  list[size - 3] = ']'; /* over the last comma */
  list[size - 2] = '\0';
  expect_refused_with("[]", list, "", "\"results\" has 4097 entries, not 1 to 4096");
  free(list);
}

#define SHARDED(shape, shard)                                                                \
  "[{\"name\": \"w\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": " shape           \
  ", \"shard\": " shard "}]"

static void test_tp_and_shards(void **state) {
  (void)state;
  expect_refused_with("[]", RESULT_Y, ", \"tp\": 0", "\"tp\" is 0, not in [1, 1024]");
  expect_refused_with("[]", RESULT_Y, ", \"tp\": 1025", "\"tp\" is 1025");
  expect_refused_with("[]", RESULT_Y, ", \"tp\": 1000000", "\"tp\" is 1000000");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\"}"),
                      RESULT_Y, ", \"tp\": 3", "args[0] is split in 2 parts but the block is for "
                      "tp 3");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\"}"),
                      RESULT_Y, "", "split in 2 parts but the block is for tp 1");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": 0, \"parts\": 0, \"layout\": \"blocks\"}"),
                      RESULT_Y, "", "args[0]: shard parts is 0");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": 2, \"parts\": 2, \"layout\": \"blocks\"}"),
                      RESULT_Y, ", \"tp\": 2", "args[0]: shard dim is 2, not in [0, 1]");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": -1, \"parts\": 2, \"layout\": \"blocks\"}"),
                      RESULT_Y, ", \"tp\": 2", "args[0]: shard dim is -1");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": 0, \"parts\": 2, \"layout\": \"rows\"}"),
                      RESULT_Y, ", \"tp\": 2", "shard layout must be \"blocks\" or \"qkv\"");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": 0, \"parts\": 2, \"layout\": 1}"),
                      RESULT_Y, ", \"tp\": 2", "shard layout must be");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": 1, \"parts\": 2, \"layout\": \"qkv\"}"),
                      RESULT_Y, ", \"tp\": 2", "a qkv shard must be of dim 0");
  expect_refused_with(SHARDED("[4, 4]", "{\"dim\": 0, \"parts\": 2, \"layout\": \"qkv\"}"),
                      RESULT_Y, ", \"tp\": 2", "multiple of 3 rows (dim 0, 4 rows)");
  expect_refused_with(SHARDED("[6, 4]", "{\"dim\": 0, \"parts\": 2}"), RESULT_Y, ", \"tp\": 2",
                      "args[0] has no \"layout\"");
  expect_refused_with(SHARDED("[6, 4]", "[0, 2]"), RESULT_Y, ", \"tp\": 2",
                      "\"shard\" must be an object");
  expect_refused_with(SHARDED("[]", "{\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\"}"),
                      RESULT_Y, ", \"tp\": 2", "a scalar cannot be sharded");
  expect_refused_with("[]", "[{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4], \"shard\": "
                      "{\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\"}}]", ", \"tp\": 2",
                      "a result cannot be sharded");
  /* The local shape fits, the global one does not. */
  expect_refused_with(SHARDED("[2147483647]", "{\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\"}"),
                      RESULT_Y, ", \"tp\": 2", "the global dim 0 is larger than 2147483647");
  expect_refused_with(SHARDED("[65536, 65536, 16]",
                              "{\"dim\": 2, \"parts\": 8, \"layout\": \"blocks\"}"),
                      RESULT_Y, ", \"tp\": 8", "the global tensor is larger than");
}

/* Uneven shards: rank r owns units[r] units of `unit` rows; each local
 * dim has room for the most (x 3 for qkv), the global one holds them all. */
static void test_uneven_shards(void **state) {
  (void)state;
  htp_signature sig;
  expect_parsed_with(
      "[{\"name\": \"qkv\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [18, 12],"
      "  \"shard\": {\"dim\": 0, \"parts\": 3, \"layout\": \"qkv\", \"units\": [2, 1, 1],"
      "  \"unit\": 3}},"
      " {\"name\": \"fc2\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [8, 10],"
      "  \"shard\": {\"dim\": 1, \"parts\": 3, \"layout\": \"blocks\", \"units\": [5, 3, 2],"
      "  \"unit\": 2}}]",
      RESULT_Y, ", \"tp\": 3", &sig);
  assert_true(sig.args[0].shard_units && sig.args[0].shard_units[0] == 2 &&
              sig.args[0].shard_units[2] == 1 && sig.args[0].shard_unit == 3);
  assert_true(sig.args[0].global_dims[0] == 36 && sig.args[0].global_count == 36 * 12);
  assert_true(sig.args[1].global_dims[0] == 8 && sig.args[1].global_dims[1] == 20);
  assert_int_equal(sig.args[1].global_bytes, 8 * 20 * 4);
  htp_signature_free(&sig);
  /* Spare room: more slots than any rank owns (3 heads of room for 2, 1;
   * 7 MLP units for 3, 3), in whole units; the global tensors are the
   * owned units' alone. */
  expect_parsed_with(
      "[{\"name\": \"qkv\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [27, 12],"
      "  \"shard\": {\"dim\": 0, \"parts\": 2, \"layout\": \"qkv\", \"units\": [2, 1],"
      "  \"unit\": 3}},"
      " {\"name\": \"fc1\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [14, 8],"
      "  \"shard\": {\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\", \"units\": [3, 3],"
      "  \"unit\": 2}}]",
      RESULT_Y, ", \"tp\": 2", &sig);
  assert_true(sig.args[0].dims[0] == 27 && sig.args[0].global_dims[0] == 27 &&
              sig.args[0].global_dims[1] == 12);
  assert_true(sig.args[1].dims[0] == 14 && sig.args[1].global_dims[0] == 12 &&
              sig.args[1].global_count == 12 * 8);
  assert_true(sig.args[1].shard_units[0] == 3 && sig.args[1].shard_unit == 2);
  htp_signature_free(&sig);
#define UNEVEN(shape, units_and_unit)                                                        \
  SHARDED(shape, "{\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\", " units_and_unit "}")
  expect_refused_with(UNEVEN("[4, 4]", "\"units\": [2, 1]"), RESULT_Y, ", \"tp\": 2",
                      "an uneven shard has both \"units\" and \"unit\"");
  expect_refused_with(UNEVEN("[4, 4]", "\"unit\": 2"), RESULT_Y, ", \"tp\": 2",
                      "an uneven shard has both");
  expect_refused_with(UNEVEN("[4, 4]", "\"units\": [2, 1, 1], \"unit\": 2"), RESULT_Y,
                      ", \"tp\": 2", "shard units must be an array of one count per part (2)");
  expect_refused_with(UNEVEN("[4, 4]", "\"units\": 3, \"unit\": 2"), RESULT_Y, ", \"tp\": 2",
                      "shard units must be an array");
  expect_refused_with(UNEVEN("[4, 4]", "\"units\": [2, 0], \"unit\": 2"), RESULT_Y,
                      ", \"tp\": 2", "args[0]: shard units[1] is 0, not in [1, 1048576]");
  expect_refused_with(UNEVEN("[4, 4]", "\"units\": [2, 1], \"unit\": 0"), RESULT_Y,
                      ", \"tp\": 2", "args[0]: shard unit is 0");
  /* The room: less than the most units of any rank, not whole units, more
   * units than a shard holds. */
  expect_refused_with(UNEVEN("[2, 4]", "\"units\": [2, 1], \"unit\": 2"), RESULT_Y,
                      ", \"tp\": 2", "an uneven shard's dim 0 (2) must be room for whole units "
                      "(room x 2), at least the most units of any rank (2) and at most 1048576");
  expect_refused_with(UNEVEN("[5, 4]", "\"units\": [2, 1], \"unit\": 2"), RESULT_Y,
                      ", \"tp\": 2", "an uneven shard's dim 0 (5) must be room for whole units");
  expect_refused_with(UNEVEN("[2097154]", "\"units\": [2, 1], \"unit\": 2"), RESULT_Y,
                      ", \"tp\": 2", "(2097154) must be room for whole units");
  expect_refused_with(SHARDED("[15, 4]", "{\"dim\": 0, \"parts\": 2, \"layout\": \"qkv\", "
                              "\"units\": [2, 1], \"unit\": 2}"),
                      RESULT_Y, ", \"tp\": 2", "(15) must be room for whole units (3 x room x 2)");
  /* The least room's product overflows before it is compared. */
  expect_refused_with(UNEVEN("[4, 4]", "\"units\": [1048576, 1], \"unit\": 2147483647"),
                      RESULT_Y, ", \"tp\": 2", "must be room for whole units");
  expect_refused_with(UNEVEN("[2147483647]", "\"units\": [1, 1], \"unit\": 2147483647"),
                      RESULT_Y, ", \"tp\": 2", "the global dim 0 is larger than 2147483647");
#undef UNEVEN
}

#define SHARDED_BF16(shape, shard)                                                           \
  "[{\"name\": \"w\", \"role\": \"param\", \"dtype\": \"bf16\", \"shape\": " shape          \
  ", \"shard\": " shard "}]"

/* bf16 tensors: 2 bytes an element, so every byte size and byte limit
 * counts them at 2 (sizes hand-computed); f32 tensors beside them still
 * read as 4. Any other dtype, or a near miss of "bf16", is refused. */
static void test_bf16(void **state) {
  (void)state;
  htp_signature sig;
  expect_parsed_with("[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"bf16\", "
                     "\"shape\": [2, 5, 12]}, "
                     "{\"name\": \"w\", \"role\": \"param\", \"dtype\": \"bf16\", "
                     "\"shape\": [6, 4], \"shard\": {\"dim\": 0, \"parts\": 2, "
                     "\"layout\": \"qkv\"}}, "
                     "{\"name\": \"eps\", \"role\": \"param\", \"dtype\": \"f32\", "
                     "\"shape\": []}]",
                     "[{\"name\": \"y\", \"dtype\": \"bf16\", \"shape\": [2, 5, 12]}]",
                     ", \"tp\": 2", &sig);
  assert_int_equal(sig.args[0].dtype, HTP_SIG_BF16);
  assert_int_equal(sig.args[0].element_size, 2);
  assert_int_equal(sig.args[0].count, 120);
  assert_int_equal(sig.args[0].bytes, 240);
  assert_int_equal(sig.args[0].global_bytes, 240);
  assert_int_equal(sig.args[1].bytes, 6 * 4 * 2);
  assert_int_equal(sig.args[1].global_count, 48);
  assert_int_equal(sig.args[1].global_bytes, 12 * 4 * 2);
  assert_int_equal(sig.args[2].dtype, HTP_SIG_F32);
  assert_int_equal(sig.args[2].element_size, 4);
  assert_int_equal(sig.args[2].bytes, 4);
  assert_int_equal(sig.results[0].dtype, HTP_SIG_BF16);
  assert_int_equal(sig.results[0].bytes, 240);
  htp_signature_free(&sig);
  /* 2^39 elements: 2^40 bytes in bf16 (the limit, accepted), 2^41 in f32. */
#define BF16_RESULT(shape) "[{\"name\": \"y\", \"dtype\": \"bf16\", \"shape\": " shape "}]"
  expect_parsed_with("[]", BF16_RESULT("[65536, 65536, 128]"), "", &sig);
  assert_int_equal(sig.results[0].bytes, (size_t)1 << 40);
  htp_signature_free(&sig);
  expect_refused_with("[]", ONE_RESULT("[65536, 65536, 128]"), "",
                      "results[0] is larger than 1099511627776 bytes");
  expect_refused_with("[]", BF16_RESULT("[65536, 65536, 128, 2]"), "",
                      "results[0] is larger than 1099511627776 bytes");
  /* The global shape's bytes count at 2 too: 2^37 x 4 elements = 2^40 bytes. */
  expect_parsed_with(SHARDED_BF16("[65536, 65536, 32]",
                                  "{\"dim\": 2, \"parts\": 4, \"layout\": \"blocks\"}"),
                     RESULT_Y, ", \"tp\": 4", &sig);
  assert_int_equal(sig.args[0].global_bytes, (size_t)1 << 40);
  htp_signature_free(&sig);
  expect_refused_with(SHARDED_BF16("[65536, 65536, 32]",
                                   "{\"dim\": 2, \"parts\": 8, \"layout\": \"blocks\"}"),
                      RESULT_Y, ", \"tp\": 8", "the global tensor is larger than");
  /* Unknown dtypes, for args and results. */
  static const char *const unknown[] = {"\"f16\"", "\"BF16\"", "\"bf16 \"", "\"bf1\"",
                                        "\"bfloat16\"", "\"f64\"", "\"\"", "16", "null",
                                        "[\"bf16\"]"};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    char args[160], results[160];
    snprintf(args, sizeof args, "[{\"name\": \"x\", \"role\": \"input\", \"dtype\": %s, "
             "\"shape\": [4]}]", unknown[i]);
    snprintf(results, sizeof results, "[{\"name\": \"y\", \"dtype\": %s, \"shape\": [4]}]",
             unknown[i]);
    expect_refused_with(args, RESULT_Y, "", "args[0]: dtype must be \"f32\" or \"bf16\"");
    expect_refused_with("[]", results, "", "results[0]: dtype must be \"f32\" or \"bf16\"");
  }
#undef BF16_RESULT
}

/* Names: what could rewrite a line-based format, confuse a terminal or a
 * safetensors lookup is refused. */
static void test_names(void **state) {
  (void)state;
#define NAMED(name) "[{\"name\": \"" name "\", \"dtype\": \"f32\", \"shape\": [4]}]"
  expect_refused_with("[]", NAMED(""), "", "results[0]: name must be 1 to 4096 bytes");
  expect_refused_with("[]", NAMED("a\\u0001b"), "", "results[0]: name is not valid UTF-8 "
                      "without control characters");
  expect_refused_with("[]", NAMED("a\\tb"), "", "name is not valid UTF-8 without control");
  expect_refused_with("[]", NAMED("a\\u007fb"), "", "name is not valid UTF-8 without control");
  expect_refused_with("[]", NAMED("a\\u0085b"), "", "name is not valid UTF-8 without control");
  /* A newline followed by what looked like a shape in the old text format. */
  expect_refused_with("[]", NAMED("y f32 1 4\\nresult 1 z f32 1 99999"), "",
                      "results[0]: name is not valid UTF-8 without control");
  expect_refused_with("[]", NAMED("y\\r[4, 4]"), "", "name is not valid UTF-8 without control");
  /* NUL inside a name: jansson refuses \u0000 unless asked not to. */
  expect_refused_with("[]", NAMED("a\\u0000b"), "", "not valid JSON");
  /* Raw invalid UTF-8 and an unpaired surrogate escape. */
  expect_refused_with("[]", NAMED("a\xc3("), "", "not valid JSON");
  expect_refused_with("[]", NAMED("a\xed\xa0\x80"), "", "not valid JSON");
  expect_refused_with("[]", NAMED("a\\ud800b"), "", "not valid JSON");
  /* The entry name follows the same rules. */
  expect_refused("{\"htp_entry\": 2, \"entry\": \"f\\ng\"}", "\"entry\" is not valid UTF-8");
  expect_refused("{\"htp_entry\": 2, \"entry\": \"\"}", "\"entry\" must be 1 to 4096 bytes");
  /* A bad name is not echoed into the message. */
  htp_signature sig;
  char err[512];
  char *text = signature_with("[]", NAMED("evil\\u001b[2J"), "");
  assert_int_equal(parse(text, &sig, err, sizeof err), HTP_ERR_INVALID);
  assert_null(strstr(err, "evil"));
  free(text);
}

/* The message buffer: truncated safely, or absent. */

/* Gradient results (htp-grad): role "grad" with grad_of naming a
 * parameter; a gradient carries its parameter's shard. Every way to get
 * that wrong is refused. */
#define GRAD_ARGS                                                                             \
  "[{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [2, 4]},"            \
  " {\"name\": \"w\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [3, 4],"             \
  "  \"shard\": {\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\"}},"                           \
  " {\"name\": \"b\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": [6]}]"
#define LOSS "{\"name\": \"loss\", \"dtype\": \"f32\", \"shape\": [1]}"
#define W_SHARD "\"shard\": {\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\"}"
#define GRAD_W "{\"name\": \"grad.w\", \"role\": \"grad\", \"grad_of\": \"w\", \"dtype\": " \
               "\"f32\", \"shape\": [3, 4], " W_SHARD "}"
#define GRAD_B "{\"name\": \"grad.b\", \"role\": \"grad\", \"grad_of\": \"b\", \"dtype\": " \
               "\"f32\", \"shape\": [6]}"

static void test_gradients(void **state) {
  (void)state;
  htp_signature sig;
  expect_parsed_with(GRAD_ARGS,
                     "[" LOSS ", {\"name\": \"logits\", \"role\": \"result\", \"dtype\": "
                     "\"f32\", \"shape\": [2, 6]}, " GRAD_W ", " GRAD_B "]",
                     ", \"tp\": 2", &sig);
  assert_int_equal(sig.num_results, 4);
  assert_string_equal(sig.results[0].name, "loss");
  assert_int_equal(sig.results[0].role, HTP_SIG_RESULT);
  assert_null(sig.results[0].grad_of);
  assert_int_equal(sig.results[1].role, HTP_SIG_RESULT);
  assert_int_equal(sig.results[2].role, HTP_SIG_GRAD);
  assert_string_equal(sig.results[2].grad_of, "w");
  assert_int_equal(sig.results[2].grad_arg, 1);
  assert_int_equal(sig.results[2].shard_layout, HTP_SHARD_BLOCKS);
  assert_int_equal(sig.results[2].global_dims[0], 6);
  assert_int_equal(sig.results[2].global_bytes, 6 * 4 * 4);
  assert_int_equal(sig.results[3].role, HTP_SIG_GRAD);
  assert_string_equal(sig.results[3].grad_of, "b");
  assert_int_equal(sig.results[3].grad_arg, 2);
  assert_int_equal(sig.results[3].shard_layout, HTP_SHARD_NONE);
  htp_signature_free(&sig);

  /* role grad without grad_of; grad_of without role grad (or role result). */
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", \"dtype\": "
                      "\"f32\", \"shape\": [6]}]", ", \"tp\": 2",
                      "results[1]: a result of role \"grad\" needs \"grad_of\"");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"grad_of\": \"b\", \"dtype\": "
                      "\"f32\", \"shape\": [6]}]", ", \"tp\": 2",
                      "results[1]: \"grad_of\" is allowed only on a result of role \"grad\"");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"result\", "
                      "\"grad_of\": \"b\", \"dtype\": \"f32\", \"shape\": [6]}]", ", \"tp\": 2",
                      "\"grad_of\" is allowed only on a result of role \"grad\"");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"gradient\", "
                      "\"grad_of\": \"b\", \"dtype\": \"f32\", \"shape\": [6]}]", ", \"tp\": 2",
                      "must be \"result\" or \"grad\"");
  /* grad_of: a string name, of an argument, that is a parameter. */
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": 1, \"dtype\": \"f32\", \"shape\": [6]}]", ", \"tp\": 2",
                      "results[1]: grad_of must be a string");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"\", \"dtype\": \"f32\", \"shape\": [6]}]", ", \"tp\": 2",
                      "results[1]: grad_of must be 1 to");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"c\", \"dtype\": \"f32\", \"shape\": [6]}]", ", \"tp\": 2",
                      "results[1] ('g'): grad_of 'c' is not an argument of f");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"x\", \"dtype\": \"f32\", \"shape\": [2, 4]}]", ", \"tp\": 2",
                      "grad_of 'x' is a data input, not a parameter");
  /* One gradient per parameter. */
  expect_refused_with(GRAD_ARGS, "[" LOSS ", " GRAD_B ", " GRAD_B "]", ", \"tp\": 2",
                      "results[2] ('grad.b'): 'b' already has a gradient (results[1])");
  /* The parameter's dtype and local shape. */
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"b\", \"dtype\": \"f32\", \"shape\": [3]}]", ", \"tp\": 2",
                      "its dtype or shape differs from parameter 'b'");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"b\", \"dtype\": \"bf16\", \"shape\": [6]}]", ", \"tp\": 2",
                      "its dtype or shape differs");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"w\", \"dtype\": \"f32\", \"shape\": [6, 4]}]", ", \"tp\": 2",
                      "its dtype or shape differs from parameter 'w'");
  /* The parameter's shard: missing, on a replicated parameter, or another. */
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"w\", \"dtype\": \"f32\", \"shape\": [3, 4]}]", ", \"tp\": 2",
                      "its shard must be that of parameter 'w' (the same dim, parts, layout, "
                      "units and unit)");
  /* An uneven parameter's gradient owns the same units. */
  expect_refused_with("[{\"name\": \"w\", \"role\": \"param\", \"dtype\": \"f32\", \"shape\": "
                      "[4, 4], \"shard\": {\"dim\": 0, \"parts\": 2, \"layout\": \"blocks\", "
                      "\"units\": [2, 1], \"unit\": 2}}]",
                      "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", \"grad_of\": \"w\", "
                      "\"dtype\": \"f32\", \"shape\": [4, 4], \"shard\": {\"dim\": 0, \"parts\": 2, "
                      "\"layout\": \"blocks\", \"units\": [1, 2], \"unit\": 2}}]", ", \"tp\": 2",
                      "its shard must be that of parameter 'w' (the same dim, parts, layout, "
                      "units and unit)");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"b\", \"dtype\": \"f32\", \"shape\": [6], " W_SHARD "}]",
                      ", \"tp\": 2", "its shard must be that of parameter 'b' (none: it is "
                      "replicated)");
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"role\": \"grad\", "
                      "\"grad_of\": \"w\", \"dtype\": \"f32\", \"shape\": [3, 4], \"shard\": "
                      "{\"dim\": 1, \"parts\": 2, \"layout\": \"blocks\"}}]", ", \"tp\": 2",
                      "its shard must be that of parameter 'w'");
  /* A sharded result that is not a gradient is still refused. */
  expect_refused_with(GRAD_ARGS, "[" LOSS ", {\"name\": \"g\", \"dtype\": \"f32\", \"shape\": "
                      "[3, 4], " W_SHARD "}]", ", \"tp\": 2", "a result cannot be sharded");
}

static void test_messages(void **state) {
  (void)state;
  htp_signature sig;
  char err[8];
  assert_int_equal(parse("[]", &sig, err, sizeof err), HTP_ERR_INVALID);
  assert_int_equal(strlen(err), 7);
  assert_int_equal(parse("[]", &sig, NULL, 0), HTP_ERR_INVALID);
  assert_int_equal(htp_signature_parse(valid, strlen(valid), NULL, NULL, 0), HTP_ERR_INVALID);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),           cmocka_unit_test(test_optional_and_names),
      cmocka_unit_test(test_shards),          cmocka_unit_test(test_balance),
      cmocka_unit_test(test_bad_json),        cmocka_unit_test(test_version_and_keys),
      cmocka_unit_test(test_dims_and_sizes),  cmocka_unit_test(test_too_many_tensors),
      cmocka_unit_test(test_tp_and_shards),   cmocka_unit_test(test_names),
      cmocka_unit_test(test_messages),        cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_gradients),       cmocka_unit_test(test_uneven_shards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
