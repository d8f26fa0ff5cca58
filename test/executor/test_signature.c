/*===- test/executor/test_signature.c - __htp_sig parser tests -----------===*
 *
 * The text LowerToRuntime writes parses into the shapes it describes;
 * unknown records are skipped; every malformed text is refused with the
 * line it is on.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/signature.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static const char *const valid =
    "htp-entry 1\n"
    "entry small_block\n"
    "arg 0 input x f32 3 2 5 12\n"
    "arg 1 param blocks.0.norm1.weight f32 1 12\n"
    "arg 2 param scalar f32 0\n"
    "result 0 result0 f32 3 2 5 12\n"
    "workspace 3072\n"
    "flops 23520\n"
    "end\n";

static void expect_failure(const char *text, const char *expected) {
  htp_signature sig;
  char err[256] = "";
  int status = htp_signature_parse(text, &sig, err, sizeof err);
  if (status == 0 || strstr(err, expected) == NULL)
    fail_msg("expected failure containing \"%s\", got status %d \"%s\"", expected, status, err);
  assert_int_equal(sig.num_args, 0);
  assert_null(sig.args);
  assert_null(sig.entry);
}

static void test_valid(void **state) {
  (void)state;
  htp_signature sig;
  char err[256] = "";
  assert_int_equal(htp_signature_parse(valid, &sig, err, sizeof err), 0);
  assert_string_equal(sig.entry, "small_block");
  assert_int_equal(sig.num_args, 3);
  assert_int_equal(sig.args[0].role, HTP_SIG_INPUT);
  assert_string_equal(sig.args[0].name, "x");
  assert_int_equal(sig.args[0].rank, 3);
  assert_int_equal(sig.args[0].dims[2], 12);
  assert_int_equal(sig.args[0].count, 120);
  assert_int_equal(sig.args[0].bytes, 480);
  assert_int_equal(sig.args[1].role, HTP_SIG_PARAM);
  assert_string_equal(sig.args[1].name, "blocks.0.norm1.weight");
  assert_int_equal(sig.args[2].rank, 0);
  assert_int_equal(sig.args[2].count, 1);
  assert_int_equal(sig.num_results, 1);
  assert_int_equal(sig.results[0].role, HTP_SIG_RESULT);
  assert_int_equal(sig.workspace_bytes, 3072);
  assert_int_equal(sig.flops, 23520);
  assert_int_equal(sig.tp, 1);
  htp_signature_free(&sig);
  htp_signature_free(&sig); /* idempotent */
  htp_signature_free(NULL);
}

static void test_unknown_records_and_tp(void **state) {
  (void)state;
  const char *text = "htp-entry 1\nentry f\nfuture record with  odd  spacing\n"
                     "arg 0 input x f32 1 4\nresult 0 y f32 1 4\nunits 3 1 2 3\n"
                     "workspace 64\ntp 4\nend\ntrailing text after end is ignored";
  htp_signature sig;
  char err[256] = "";
  assert_int_equal(htp_signature_parse(text, &sig, err, sizeof err), 0);
  assert_int_equal(sig.tp, 4);
  assert_int_equal(sig.flops, 0);
  htp_signature_free(&sig);
}

/* The tensor-parallel records: each argument's shard, its global shape. */
static void test_shards(void **state) {
  (void)state;
  const char *text = "htp-entry 1\nentry f\narg 0 input x f32 2 5 12\n"
                     "arg 1 param blocks.0.attn.qkv.weight f32 2 18 12\n"
                     "arg 2 param blocks.0.attn.proj.weight f32 2 12 6\n"
                     "arg 3 param blocks.0.mlp.fc1.bias f32 1 10\n"
                     "result 0 y f32 2 5 12\nworkspace 64\nflops 10\ntp 2\n"
                     "shard 1 0 2 qkv\nshard 2 1 2 blocks\nshard 3 0 2 blocks\nend\n";
  htp_signature sig;
  char err[256] = "";
  assert_int_equal(htp_signature_parse(text, &sig, err, sizeof err), 0);
  assert_int_equal(sig.tp, 2);
  assert_int_equal(sig.args[0].shard_layout, HTP_SHARD_NONE);
  assert_int_equal(sig.args[1].shard_layout, HTP_SHARD_QKV);
  assert_int_equal(sig.args[2].shard_layout, HTP_SHARD_BLOCKS);
  assert_int_equal(sig.args[2].shard_dim, 1);
  assert_int_equal(sig.args[2].shard_parts, 2);
  int64_t dims[HTP_SIG_MAX_RANK];
  htp_sig_global_dims(&sig.args[1], dims);
  assert_true(dims[0] == 36 && dims[1] == 12);
  htp_sig_global_dims(&sig.args[2], dims);
  assert_true(dims[0] == 12 && dims[1] == 12);
  htp_sig_global_dims(&sig.args[0], dims);
  assert_true(dims[0] == 5 && dims[1] == 12);
  assert_int_equal(sig.args[1].count, 18 * 12); /* count and bytes stay local */
  htp_signature_free(&sig);
}

/* The balance hooks' record: the units per rank that the balancer gets. */
static void test_balance(void **state) {
  (void)state;
  const char *text = "htp-entry 1\nentry f\narg 0 input x f32 1 4\nresult 0 y f32 1 4\n"
                     "workspace 64\ntp 2\nbalance 2 48 2 12 90720 8 6 20736\nend\n";
  htp_signature sig;
  char err[256] = "";
  assert_int_equal(htp_signature_parse(text, &sig, err, sizeof err), 0);
  assert_true(sig.balance.present);
  assert_int_equal(sig.balance.layers, 2);
  assert_int_equal(sig.balance.model_dim, 48);
  assert_int_equal(sig.balance.heads, 2);
  assert_int_equal(sig.balance.head_dim, 12);
  assert_int_equal(sig.balance.head_flops, 90720);
  assert_int_equal(sig.balance.mlp_units, 8);
  assert_int_equal(sig.balance.mlp_unit_width, 6);
  assert_int_equal(sig.balance.mlp_unit_flops, 20736);
  htp_signature_free(&sig);
  assert_int_equal(htp_signature_parse(valid, &sig, err, sizeof err), 0);
  assert_false(sig.balance.present); /* no record: no units to balance */
  htp_signature_free(&sig);
#define BALANCE_HEAD "htp-entry 1\nentry f\n"
  expect_failure(BALANCE_HEAD "balance 2 48 2 12 90720 8 6\n", "expected 'balance LAYERS DIM");
  expect_failure(BALANCE_HEAD "balance 2 48 2 12 90720 8 6 20736 1\n", "expected 'balance");
  expect_failure(BALANCE_HEAD "balance 0 48 2 12 90720 8 6 20736\n", "balance LAYERS '0'");
  expect_failure(BALANCE_HEAD "balance 2 48 2 12 90720 -8 6 20736\n", "balance MLP_UNITS '-8'");
  expect_failure(BALANCE_HEAD "balance 2 48 99999999999 12 1 8 6 1\n", "balance HEADS");
  expect_failure(BALANCE_HEAD "balance 2 48 2 12 0 8 6 20736\n", "balance HEAD_FLOPS '0'");
  expect_failure(BALANCE_HEAD "balance 2 48 2 12 9 8 6 9\nbalance 2 48 2 12 9 8 6 9\n",
                 "line 4: a second 'balance' record");
  expect_failure(BALANCE_HEAD "balance  2 48 2 12 9 8 6 9\n", "line 3: malformed 'balance'");
}

static void test_malformed(void **state) {
  (void)state;
  expect_failure(NULL, "no signature");
  expect_failure("", "expected 'htp-entry 1'");
  expect_failure("htp-entry 2\n", "expected 'htp-entry 1'");
  expect_failure("htp-entry 1\nentry f\nresult 0 y f32 1 4\nworkspace 64\n", "no 'end' record");
  expect_failure("htp-entry 1\nresult 0 y f32 1 4\nworkspace 64\nend\n", "no 'entry'");
  expect_failure("htp-entry 1\nentry f\nresult 0 y f32 1 4\nend\n", "no 'workspace'");
  expect_failure("htp-entry 1\nentry f\nworkspace 64\nend\n", "declares no results");
  expect_failure("htp-entry 1\nentry f\nentry g\n", "line 3: bad or repeated 'entry'");
  expect_failure("htp-entry 1\nentry f\narg 1 input x f32 1 4\n", "line 3: arg index '1', expected 0");
  expect_failure("htp-entry 1\nentry f\narg 0 weight x f32 1 4\n", "line 3: arg kind");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f16 1 4\n", "dtype 'f16'; only f32");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32 2 4\n", "rank 2 but 1 dims");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32 9 1 1 1 1 1 1 1 1 1\n", "bad rank");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32 1 -4\n", "bad dim '-4'");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32 1 4x\n", "bad dim '4x'");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32 3 4294967296 4294967296 4\n", "too large");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32 1 99999999999999999999999\n", "bad dim");
  expect_failure("htp-entry 1\nentry f\narg 0 input x\n", "expected NAME DTYPE RANK");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32  1 4\n", "line 3: malformed 'arg'");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32 1 4 \n", "line 3: malformed 'arg'");
  expect_failure("htp-entry 1\nentry f\nresult 0 y f32 1 4\narg 0 input x f32 1 4\n",
                 "'arg' after 'result'");
  expect_failure("htp-entry 1\nentry f\nworkspace -1\n", "bad workspace");
  expect_failure("htp-entry 1\nentry f\nflops lots\n", "bad flops");
  expect_failure("htp-entry 1\nentry f\ntp 0\n", "bad tp");
#define SHARD_HEAD "htp-entry 1\nentry f\narg 0 param w f32 2 6 4\n"
  expect_failure(SHARD_HEAD "shard 1 0 2 blocks\n", "shard of argument '1', but 1 arguments");
  expect_failure(SHARD_HEAD "shard 0 2 2 blocks\n", "shard dim '2' of argument 0");
  expect_failure(SHARD_HEAD "shard 0 0 0 blocks\n", "bad shard parts '0'");
  expect_failure(SHARD_HEAD "shard 0 0 2 rows\n", "unknown shard layout 'rows'");
  expect_failure(SHARD_HEAD "shard 0 1 2 qkv\n", "a qkv shard must be of dim 0");
  expect_failure(SHARD_HEAD "shard 0 0 2 blocks\nshard 0 1 2 blocks\n", "two shard records");
  expect_failure(SHARD_HEAD "shard 0 0 2\n", "expected 'shard INDEX DIM PARTS LAYOUT'");
  expect_failure(SHARD_HEAD "result 0 y f32 1 4\nworkspace 64\ntp 3\nshard 0 0 2 blocks\nend\n",
                 "split in 2 parts but the block is for tp 3");
  expect_failure(SHARD_HEAD "result 0 y f32 1 4\nworkspace 64\nshard 0 0 2 blocks\nend\n",
                 "split in 2 parts but the block is for tp 1");
  expect_failure("htp-entry 1\nentry f\narg 0 input x f32 8 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\n",
                 "malformed 'arg'");
}

static void test_format_shape(void **state) {
  (void)state;
  char out[64];
  const int64_t dims[] = {2, 5, 12};
  htp_format_shape(out, sizeof out, 3, dims);
  assert_string_equal(out, "[2, 5, 12]");
  htp_format_shape(out, sizeof out, 0, dims);
  assert_string_equal(out, "[]");
  htp_format_shape(out, 4, 3, dims); /* truncates, stays terminated */
  assert_int_equal(strlen(out), 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),
      cmocka_unit_test(test_unknown_records_and_tp),
      cmocka_unit_test(test_shards),
      cmocka_unit_test(test_balance),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_format_shape),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
