/*===- test/executor/test_options.c - htp-run command line tests ---------===*
 *
 * Defaults, both value spellings, flags after the file, range checks, one
 * case per class of usage error (unknown flag, missing value, bad and
 * overflowing numbers, a single-valued flag repeated, enum names from the
 * runtime's tables), and the refusal of combinations that cannot run
 * (--sms without --device cuda and the local backend, --backend nccl
 * without --device cuda, a rank beyond --tp).
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/options.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define ARGS(...) ((char *[]){"htp-run", __VA_ARGS__, NULL})
#define COUNT(...) ((int)(sizeof((char *[]){"htp-run", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(options, err, ...)                                                                  \
  htp_run_parse_options(COUNT(__VA_ARGS__), ARGS(__VA_ARGS__), options, err, sizeof err)

static void test_defaults(void **state) {
  (void)state;
  htp_run_options options;
  char err[256] = "";
  assert_int_equal(PARSE(&options, err, "block.mlir"), 0);
  assert_string_equal(options.path, "block.mlir");
  assert_null(options.entry);
  assert_int_equal(options.iters, 10);
  assert_int_equal(options.warmup, 1);
  assert_int_equal(options.seed, 0);
  assert_int_equal(options.tp, 1);
  assert_string_equal(options.backend, "local");
  assert_string_equal(options.device, "cpu");
  assert_int_equal(options.policy, HTP_POLICY_NONE);
  assert_int_equal(options.impute, HTP_IMPUTE_ZERO);
  assert_int_equal(options.selection, HTP_SELECT_RANDOM);
  const htp_planner_config planner = HTP_PLANNER_CONFIG_INITIALIZER;
  assert_true(options.ewma_alpha == planner.ewma_alpha);
  assert_int_equal(options.hysteresis, planner.hysteresis_iters);
  assert_int_equal(options.report, HTP_REPORT_TABLE);
  assert_int_equal(htp_run_check_implemented(&options, err, sizeof err), 0);
}

static void expect_usage_error(int argc, char **argv, const char *expected) {
  htp_run_options options;
  char err[256] = "";
  int status = htp_run_parse_options(argc, argv, &options, err, sizeof err);
  if (status == 0 || strstr(err, expected) == NULL)
    fail_msg("expected failure containing \"%s\", got status %d \"%s\"", expected, status, err);
}

#define EXPECT_USAGE_ERROR(expected, ...) expect_usage_error(COUNT(__VA_ARGS__), ARGS(__VA_ARGS__), expected)

static void test_values(void **state) {
  (void)state;
  htp_run_options options;
  char err[256] = "";
  assert_int_equal(PARSE(&options, err, "--iters=5", "--warmup", "0", "--seed", "18446744073709551615",
                         "--entry", "f", "--report=json", "--input", "a.npy", "--input=b.npy",
                         "--output", "y.npy", "--weights", "w.safetensors", "--", "-odd-name.so"),
                   0);
  assert_int_equal(options.iters, 5);
  assert_int_equal(options.warmup, 0);
  assert_true(options.seed == UINT64_MAX);
  assert_string_equal(options.entry, "f");
  assert_int_equal(options.report, HTP_REPORT_JSON);
  assert_int_equal(options.num_inputs, 2);
  assert_string_equal(options.inputs[1], "b.npy");
  assert_int_equal(options.num_outputs, 1);
  assert_string_equal(options.weights, "w.safetensors");
  assert_string_equal(options.path, "-odd-name.so");
  /* A number too small for a double's normal range is that small number
   * (or 0), not an error: 1e-320 is in [0, 1e12]. */
  assert_int_equal(PARSE(&options, err, "a.mlir", "--policy", "migrate", "--repartition", "1e-320"),
                   0);
  assert_true(options.repartition > 0.0 && options.repartition < 1e-300);
  assert_int_equal(PARSE(&options, err, "a.mlir", "--policy", "semi", "--repartition", "1e-400"),
                   0);
  assert_true(options.repartition == 0.0);
  assert_int_equal(PARSE(&options, err, "--help"), 0);
  assert_true(options.help);
  assert_int_equal(PARSE(&options, err, "-h"), 0);
  assert_true(options.help);
  /* Flags after the file, a unique prefix, the limits. */
  assert_int_equal(PARSE(&options, err, "block.so", "--it", "7", "--tp=1024", "--warmup",
                         "10000000", "--policy", "migrate", "--select", "importance", "--ewma-alpha", "1",
                         "--hysteresis=1000000"), 0);
  assert_string_equal(options.path, "block.so");
  assert_int_equal(options.iters, 7);
  assert_int_equal(options.tp, 1024);
  assert_int_equal(options.warmup, 10000000);
  assert_int_equal(options.selection, HTP_SELECT_IMPORTANCE);
  assert_true(options.ewma_alpha == 1.0);
  assert_int_equal(options.hysteresis, 1000000);
  /* argv is not reordered. */
  char *argv[] = {"htp-run", "a.mlir", "--iters", "2", "--check", NULL};
  assert_int_equal(htp_run_parse_options(5, argv, &options, err, sizeof err), 0);
  assert_string_equal(argv[1], "a.mlir");
  assert_string_equal(argv[4], "--check");
  /* A file between flags, and after "--" a name that looks like a flag. */
  assert_int_equal(PARSE(&options, err, "--iters", "2", "b.mlir", "--check"), 0);
  assert_string_equal(options.path, "b.mlir");
  assert_true(options.check);
  assert_int_equal(PARSE(&options, err, "--check", "--", "--iters"), 0);
  assert_string_equal(options.path, "--iters");
  assert_int_equal(options.iters, 10);
  EXPECT_USAGE_ERROR("more than one file given ('a.mlir' and 'b.mlir')", "a.mlir", "--check",
                     "--", "b.mlir");
  EXPECT_USAGE_ERROR("more than one file given ('a.mlir' and 'b.mlir')", "a.mlir", "--check",
                     "b.mlir");
  /* "-" is a file name (stdin by convention), not a flag. */
  assert_int_equal(PARSE(&options, err, "-"), 0);
  assert_string_equal(options.path, "-");
  /* A value that starts with '-' is still the value (then checked). */
  assert_int_equal(PARSE(&options, err, "a.mlir", "--entry", "-f"), 0);
  assert_string_equal(options.entry, "-f");
  /* Repeatable flags collect; switches may repeat. */
  assert_int_equal(PARSE(&options, err, "a.mlir", "--check", "--check", "--output", "y.npy",
                         "--output=z.npy", "--fault", "die:0@1", "--fault", "hang:1@1"), 0);
  assert_true(options.check);
  assert_int_equal(options.num_outputs, 2);
  assert_int_equal(options.num_faults, 2);
}


static void test_usage_errors(void **state) {
  (void)state;
  EXPECT_USAGE_ERROR("no input file", "--iters", "3");
  EXPECT_USAGE_ERROR("more than one file", "a.mlir", "b.mlir");
  EXPECT_USAGE_ERROR("unknown option '--bogus'", "a.mlir", "--bogus");
  EXPECT_USAGE_ERROR("unknown option '--bogus'", "a.mlir", "--bogus=1");
  EXPECT_USAGE_ERROR("--iters needs a value", "a.mlir", "--iters");
  EXPECT_USAGE_ERROR("--iters expects an integer >= 1, got '0'", "a.mlir", "--iters", "0");
  EXPECT_USAGE_ERROR("--iters expects an integer >= 1, got '3x'", "a.mlir", "--iters", "3x");
  EXPECT_USAGE_ERROR("--iters expects", "a.mlir", "--iters", "99999999999999999999999");
  EXPECT_USAGE_ERROR("--warmup expects an integer >= 0", "a.mlir", "--warmup", "-1");
  EXPECT_USAGE_ERROR("--seed expects a non-negative integer", "a.mlir", "--seed", "-3");
  EXPECT_USAGE_ERROR("--tp expects an integer >= 1", "a.mlir", "--tp", "0");
  EXPECT_USAGE_ERROR("--report expects table|json, got 'xml'", "a.mlir", "--report", "xml");
  EXPECT_USAGE_ERROR("--backend expects local|mpi|nccl", "a.mlir", "--backend", "gloo");
  EXPECT_USAGE_ERROR("--device expects cpu|cuda", "a.mlir", "--device", "tpu");
  EXPECT_USAGE_ERROR("--policy expects none|resize|migrate|semi", "a.mlir", "--policy", "all");
  EXPECT_USAGE_ERROR("--impute expects zero|same|average", "a.mlir", "--impute", "mean");
  EXPECT_USAGE_ERROR("--entry needs a function name", "a.mlir", "--entry", "");
  EXPECT_USAGE_ERROR("--select expects random|importance|variation|displacement, got 'best'", "a.mlir", "--select",
                     "best");
  EXPECT_USAGE_ERROR("--report expects table|json, got ''", "a.mlir", "--report=");
}

/* Unknown flags: long, short, abbreviated ambiguously, a switch given a value. */
static void test_unknown_flags(void **state) {
  (void)state;
  EXPECT_USAGE_ERROR("unknown option '--bogus'", "--bogus", "a.mlir");
  EXPECT_USAGE_ERROR("unknown option '-x'", "a.mlir", "-x");
  EXPECT_USAGE_ERROR("unknown option '-i'", "a.mlir", "-i", "3");
  EXPECT_USAGE_ERROR("unknown option '--itersx'", "a.mlir", "--itersx=3");
  /* --t is --tp, --timeout, --trace or --train: ambiguous, and the error names them. */
  EXPECT_USAGE_ERROR("ambiguous option '--t': --tp, --timeout, --trace, --train", "a.mlir", "--t", "3");
  EXPECT_USAGE_ERROR("option '--check' takes no value", "a.mlir", "--check=yes");
  /* A single dash is not a flag prefix. */
  EXPECT_USAGE_ERROR("unknown option '-t'", "a.mlir", "-tp", "3");
}

/* Every valued flag at the end of the line, without its value. */
static void test_missing_values(void **state) {
  (void)state;
  static char *flags[] = {"--entry", "--iters",  "--warmup", "--seed",   "--weights", "--input",
                          "--output", "--report", "--tp",    "--backend", "--device", "--policy",
                          "--impute", "--select", "--slow",  "--fault",  "--timeout", "--trace",
                          "--ewma-alpha", "--hysteresis", "--same-max-age"};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    char expected[64];
    snprintf(expected, sizeof expected, "%s needs a value", flags[i]);
    expect_usage_error(3, (char *[]){"htp-run", "a.mlir", flags[i], NULL}, expected);
  }
  EXPECT_USAGE_ERROR("--weights needs a file name", "a.mlir", "--weights=");
  EXPECT_USAGE_ERROR("--input needs a file name", "a.mlir", "--input", "");
  EXPECT_USAGE_ERROR("--output needs a file name", "a.mlir", "--output=");
  EXPECT_USAGE_ERROR("--trace needs a file name", "a.mlir", "--trace", "");
}

/* Numbers: malformed, below the minimum, above the maximum, overflowing. */
static void test_bad_numbers(void **state) {
  (void)state;
  EXPECT_USAGE_ERROR("--iters expects an integer >= 1, got ''", "a.mlir", "--iters=");
  EXPECT_USAGE_ERROR("--iters expects an integer >= 1, got ' 3'", "a.mlir", "--iters", " 3");
  EXPECT_USAGE_ERROR("--iters expects an integer >= 1, got '3 '", "a.mlir", "--iters", "3 ");
  EXPECT_USAGE_ERROR("--iters expects an integer >= 1, got '0x10'", "a.mlir", "--iters", "0x10");
  EXPECT_USAGE_ERROR("--iters expects an integer >= 1, got '1e3'", "a.mlir", "--iters", "1e3");
  EXPECT_USAGE_ERROR("--iters expects an integer <= 10000000, got '10000001'", "a.mlir",
                     "--iters", "10000001");
  EXPECT_USAGE_ERROR("--iters expects an integer <= 10000000, got '9223372036854775808'",
                     "a.mlir", "--iters", "9223372036854775808");
  EXPECT_USAGE_ERROR("--iters expects an integer >= 1, got '-9223372036854775809'", "a.mlir",
                     "--iters", "-9223372036854775809");
  EXPECT_USAGE_ERROR("--warmup expects an integer <= 10000000", "a.mlir", "--warmup",
                     "99999999999999999999");
  EXPECT_USAGE_ERROR("--tp expects an integer <= 1024, got '1025'", "a.mlir", "--tp", "1025");
  EXPECT_USAGE_ERROR("--tp expects an integer <= 1024, got '1000000'", "a.mlir", "--tp",
                     "1000000");
  EXPECT_USAGE_ERROR("--seed expects a non-negative integer", "a.mlir", "--seed",
                     "18446744073709551616");
  EXPECT_USAGE_ERROR("--seed expects a non-negative integer", "a.mlir", "--seed", " 1");
  EXPECT_USAGE_ERROR("--seed expects a non-negative integer", "a.mlir", "--seed", "+1");
  EXPECT_USAGE_ERROR("--seed expects a non-negative integer", "a.mlir", "--seed", "");
  EXPECT_USAGE_ERROR("--timeout expects seconds in (0, 1e7]", "a.mlir", "--timeout", "1e400");
  EXPECT_USAGE_ERROR("--timeout expects seconds in (0, 1e7]", "a.mlir", "--timeout", "nan");
  EXPECT_USAGE_ERROR("--timeout expects seconds in (0, 1e7]", "a.mlir", "--timeout", "inf");
  EXPECT_USAGE_ERROR("--timeout expects seconds in (0, 1e7]", "a.mlir", "--timeout", "1e-400");
  /* Plain decimal only, as the integer flags: strtod alone took these. */
  EXPECT_USAGE_ERROR("--timeout expects seconds in (0, 1e7], got ' 3'", "a.mlir", "--timeout", " 3");
  EXPECT_USAGE_ERROR("--timeout expects seconds in (0, 1e7], got '+3'", "a.mlir", "--timeout", "+3");
  EXPECT_USAGE_ERROR("--timeout expects seconds in (0, 1e7], got '0x10'", "a.mlir", "--timeout",
                     "0x10");
  EXPECT_USAGE_ERROR("--repartition expects a number", "a.mlir", "--repartition", "0x10");
  EXPECT_USAGE_ERROR("--ewma-alpha expects a number", "a.mlir", "--ewma-alpha", "0x.8p0");
  EXPECT_USAGE_ERROR("--slow", "a.mlir", "--slow", "1:+3");
  EXPECT_USAGE_ERROR("--slow", "a.mlir", "--slow", "1:0x3");
  EXPECT_USAGE_ERROR("--fault", "a.mlir", "--fault", "delay=0x1:1@1");
  EXPECT_USAGE_ERROR("--ewma-alpha expects a number in (0, 1], got '0'", "a.mlir",
                     "--ewma-alpha", "0");
  EXPECT_USAGE_ERROR("--ewma-alpha expects a number in (0, 1], got '1.01'", "a.mlir",
                     "--ewma-alpha", "1.01");
  EXPECT_USAGE_ERROR("--ewma-alpha expects a number in (0, 1], got 'nan'", "a.mlir",
                     "--ewma-alpha", "nan");
  EXPECT_USAGE_ERROR("--hysteresis expects an integer >= 1, got '0'", "a.mlir", "--hysteresis",
                     "0");
  EXPECT_USAGE_ERROR("--hysteresis expects an integer <= 1000000, got '1000001'", "a.mlir",
                     "--hysteresis", "1000001");
  EXPECT_USAGE_ERROR("--lr expects a number in [1e-30, 10], got '11'", "m.mlir", "--train", "--lr",
                     "11");
}

/* A flag that takes one value, given twice, whatever the spelling. */
static void test_repeated_flags(void **state) {
  (void)state;
  static char *flags[][2] = {
      {"--iters", "3"},       {"--warmup", "0"},       {"--seed", "1"},       {"--entry", "f"},
      {"--weights", "w"},     {"--report", "json"},    {"--tp", "2"},         {"--backend", "mpi"},
      {"--device", "cpu"},    {"--policy", "migrate"}, {"--impute", "same"},  {"--select", "random"},
      {"--timeout", "5"},     {"--trace", "t.jsonl"},  {"--ewma-alpha", "0.1"}, {"--hysteresis", "9"},
      {"--same-max-age", "2"},
  };
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    char expected[96];
    snprintf(expected, sizeof expected, "%s given more than once", flags[i][0]);
    /* The same value twice is still a repetition: the user meant one of them. */
    expect_usage_error(6, (char *[]){"htp-run", flags[i][0], flags[i][1], "a.mlir", flags[i][0],
                                     flags[i][1], NULL},
                       expected);
  }
  EXPECT_USAGE_ERROR("--iters given more than once", "a.mlir", "--iters=3", "--iters", "4");
  EXPECT_USAGE_ERROR("--iters given more than once", "a.mlir", "--iters=3", "--it=4");
  EXPECT_USAGE_ERROR("--tp given more than once", "--tp", "2", "a.mlir", "--tp=2");
}

/* The names of the runtime's enums are the runtime's: every name its table
 * gives parses to that value, and the error lists exactly those names. */
static void test_enum_names_from_runtime(void **state) {
  (void)state;
  htp_run_options options;
  char err[256] = "", flag[64];
  for (int value = 0; strcmp(htp_policy_name((htp_policy)value), "?") != 0; value++) {
    snprintf(flag, sizeof flag, "--policy=%s", htp_policy_name((htp_policy)value));
    assert_int_equal(PARSE(&options, err, "a.mlir", flag), 0);
    assert_int_equal(options.policy, value);
  }
  for (int value = 0; strcmp(htp_impute_name((htp_impute)value), "?") != 0; value++) {
    snprintf(flag, sizeof flag, "--impute=%s", htp_impute_name((htp_impute)value));
    assert_int_equal(PARSE(&options, err, "a.mlir", "--policy=resize", flag), 0);
    assert_int_equal(options.impute, value);
  }
  for (int value = 0; strcmp(htp_select_name((htp_select)value), "?") != 0; value++) {
    snprintf(flag, sizeof flag, "--select=%s", htp_select_name((htp_select)value));
    /* variation ranks units by their training updates: --train only. */
    assert_int_equal(PARSE(&options, err, "a.mlir", "--train", "--policy=resize", flag), 0);
    assert_int_equal(options.selection, value);
  }
  EXPECT_USAGE_ERROR("--policy expects none|resize|migrate|semi, got '?'", "a.mlir", "--policy",
                     "?");
  EXPECT_USAGE_ERROR("--impute expects zero|same|average, got 'ZERO'", "a.mlir", "--impute",
                     "ZERO");
}

/* Too many of a repeatable flag. */
static void test_too_many(void **state) {
  (void)state;
  char *argv[2 + 2 * (HTP_RUN_MAX_FILES + 1) + 1];
  int argc = 0;
  argv[argc++] = "htp-run";
  argv[argc++] = "a.mlir";
  for (int i = 0; i <= HTP_RUN_MAX_FILES; i++) {
    argv[argc++] = "--input";
    argv[argc++] = "x.npy";
  }
  argv[argc] = NULL;
  expect_usage_error(argc, argv, "more than 64 --input flags");
}

static void expect_not_implemented(int argc, char **argv, const char *expected) {
  htp_run_options options;
  char err[256] = "";
  assert_int_equal(htp_run_parse_options(argc, argv, &options, err, sizeof err), 0);
  int status = htp_run_check_implemented(&options, err, sizeof err);
  if (status == 0 || strstr(err, expected) == NULL)
    fail_msg("expected failure containing \"%s\", got status %d \"%s\"", expected, status, err);
}

#define EXPECT_NOT_IMPLEMENTED(expected, ...)                                                     \
  expect_not_implemented(COUNT(__VA_ARGS__), ARGS(__VA_ARGS__), expected)

static void test_not_implemented(void **state) {
  (void)state;
  EXPECT_NOT_IMPLEMENTED("--backend nccl runs on GPUs: it needs --device cuda", "a.so",
                         "--backend", "nccl");
  EXPECT_NOT_IMPLEMENTED("--backend nccl runs on GPUs: it needs --device cuda", "a.so",
                         "--backend", "nccl", "--device", "cpu");
  EXPECT_NOT_IMPLEMENTED("--sms partitions a GPU's SMs among the ranks: it needs --device cuda",
                         "a.so", "--sms", "0:8");
  EXPECT_NOT_IMPLEMENTED("--sms partitions a GPU's SMs among the ranks: it needs --device cuda",
                         "a.so", "--device", "cpu", "--tp", "2", "--sms", "1:8");
  EXPECT_NOT_IMPLEMENTED("it needs --backend local (with --backend mpi each rank has a GPU",
                         "a.so", "--device", "cuda", "--backend", "mpi", "--sms", "0:8");
  EXPECT_NOT_IMPLEMENTED("it needs --backend local (with --backend nccl each rank has a GPU",
                         "a.so", "--device", "cuda", "--backend", "nccl", "--sms", "0:8");
  EXPECT_NOT_IMPLEMENTED("--sms 2:16: rank 2 is not in [0, 2) (--tp 2)", "a.mlir", "--device",
                         "cuda", "--tp", "2", "--sms", "0:8", "--sms", "2:16");
  EXPECT_NOT_IMPLEMENTED("--slow 2:3: rank 2 is not in [0, 2) (--tp 2)", "a.mlir", "--tp", "2",
                         "--slow", "2:3", "--slow", "0:2");
  EXPECT_NOT_IMPLEMENTED("--fault die:5@0: rank 5 is not in [0, 4) (--tp 4)", "a.mlir", "--tp",
                         "4", "--fault", "die:5@0");
}

/* What this build runs: tp, mpi, detection, trace, check, injections. */
static void test_implemented(void **state) {
  (void)state;
  htp_run_options options;
  char err[256] = "";
  assert_int_equal(PARSE(&options, err, "a.mlir", "--tp", "3", "--backend", "mpi", "--trace",
                         "t.jsonl", "--check", "--slow", "1:2.5@4", "--slow=2:3",
                         "--fault", "hang:1@2", "--fault", "die:0@0", "--fault",
                         "delay=0.5:2@7", "--fault", "delay:1@1", "--timeout", "2.5"), 0);
  assert_int_equal(htp_run_check_implemented(&options, err, sizeof err), 0);
  assert_int_equal(options.tp, 3);
  assert_true(options.tp_given);
  assert_true(options.timeout_s == 2.5);
  assert_int_equal(options.num_slows, 2);
  assert_int_equal(options.slows[0].rank, 1);
  assert_true(options.slows[0].factor == 2.5);
  assert_int_equal(options.slows[0].from_iteration, 4);
  assert_int_equal(options.slows[1].from_iteration, 0);
  assert_int_equal(options.num_faults, 4);
  assert_int_equal(options.faults[0].kind, HTP_RUN_FAULT_HANG);
  assert_int_equal(options.faults[0].rank, 1);
  assert_int_equal(options.faults[0].iteration, 2);
  assert_int_equal(options.faults[1].kind, HTP_RUN_FAULT_DIE);
  assert_int_equal(options.faults[2].kind, HTP_RUN_FAULT_DELAY);
  assert_true(options.faults[2].seconds == 0.5);
  assert_int_equal(options.faults[2].iteration, 7);
  assert_true(options.faults[3].seconds == 1.0);
  assert_int_equal(PARSE(&options, err, "a.mlir"), 0);
  assert_false(options.tp_given);
  assert_true(options.timeout_s == 60.0);
  /* The policies parse everywhere; whether a block can take one is the
   * executor's check (it needs the block's balance record). */
  static char *policies[] = {"none", "resize", "migrate", "semi"};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(PARSE(&options, err, "a.mlir", "--tp", "2", "--policy", policies[i]), 0);
    assert_string_equal(htp_policy_name(options.policy), policies[i]);
    assert_int_equal(htp_run_check_implemented(&options, err, sizeof err), 0);
  }
  /* --impute fills in pruned units: only with a policy that prunes. */
  for (int i = 0; i < 4; i++) {
    const int prunes = i == 1 || i == 3;
    assert_int_equal(PARSE(&options, err, "a.mlir", "--tp", "2", "--policy", policies[i],
                           "--impute=average") == 0, prunes);
    if (prunes)
      assert_int_equal(options.impute, HTP_IMPUTE_AVERAGE);
    else
      assert_non_null(strstr(err, "only --policy resize and semi prune"));
  }
}

/* --device cuda, --sms and --backend nccl parse and pass the checks that do
 * not need the block; whether CUDA and a GPU are there is the executor's. */
static void test_gpu_flags(void **state) {
  (void)state;
  htp_run_options options;
  char err[256] = "";
  assert_int_equal(PARSE(&options, err, "a.so", "--device", "cuda"), 0);
  assert_string_equal(options.device, "cuda");
  assert_int_equal(options.num_sms, 0);
  assert_int_equal(htp_run_check_implemented(&options, err, sizeof err), 0);
  assert_int_equal(PARSE(&options, err, "a.so", "--device=cuda", "--tp", "4", "--sms", "3:32",
                         "--sms=0:8", "--slow", "1:2"), 0);
  assert_int_equal(htp_run_check_implemented(&options, err, sizeof err), 0);
  assert_int_equal(options.num_sms, 2);
  assert_int_equal(options.sms[0].rank, 3);
  assert_int_equal(options.sms[0].count, 32);
  assert_int_equal(options.sms[1].rank, 0);
  assert_int_equal(options.sms[1].count, 8);
  assert_int_equal(options.num_slows, 1); /* --slow on top of --sms */
  /* Without --tp the rank is checked against the block's tp later. */
  assert_int_equal(PARSE(&options, err, "a.so", "--device", "cuda", "--sms", "7:8"), 0);
  assert_int_equal(htp_run_check_implemented(&options, err, sizeof err), 0);
  assert_int_equal(PARSE(&options, err, "a.so", "--device", "cuda", "--sms", "0:65536"), 0);
  assert_int_equal(options.sms[0].count, HTP_RUN_MAX_SM_COUNT);
  assert_int_equal(PARSE(&options, err, "a.so", "--backend", "nccl", "--device", "cuda"), 0);
  assert_string_equal(options.backend, "nccl");
  assert_int_equal(htp_run_check_implemented(&options, err, sizeof err), 0);
}

static void test_sms_errors(void **state) {
  (void)state;
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT with COUNT in [1, 65536]", "a.so", "--sms", "1");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", "1:0");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", "1:");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", ":8");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", "-1:8");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", "1:-8");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", "1:8x");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", "1:8:2");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", "1:65537");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", "99999999999999999999:8");
  EXPECT_USAGE_ERROR("--sms expects RANK:COUNT", "a.so", "--sms", " 1:8");
  EXPECT_USAGE_ERROR("--sms needs a value", "a.so", "--sms");
  EXPECT_USAGE_ERROR("--sms 1:16: rank 1 was already given 8 SMs (one --sms per rank)", "a.so",
                     "--sms", "1:8", "--sms", "0:8", "--sms", "1:16");
  /* More flags than ranks can have: refused by count, not by memory. */
  char *argv[2 * HTP_RUN_MAX_SMS + 8];
  char values[HTP_RUN_MAX_SMS + 1][16];
  int argc = 0;
  argv[argc++] = "htp-run";
  argv[argc++] = "a.so";
  for (int i = 0; i <= HTP_RUN_MAX_SMS; i++) {
    snprintf(values[i], sizeof values[i], "%d:8", i);
    argv[argc++] = "--sms";
    argv[argc++] = values[i];
  }
  argv[argc] = NULL;
  expect_usage_error(argc, argv, "more than 64 --sms flags");
}

static void test_injection_errors(void **state) {
  (void)state;
  EXPECT_USAGE_ERROR("--slow expects RANK:FACTOR[@ITERATION]", "a.mlir", "--slow", "1");
  EXPECT_USAGE_ERROR("--slow expects", "a.mlir", "--slow", "1:0.5");
  EXPECT_USAGE_ERROR("--slow expects", "a.mlir", "--slow", "-1:2");
  EXPECT_USAGE_ERROR("--slow expects", "a.mlir", "--slow", "1:2@");
  EXPECT_USAGE_ERROR("--slow expects", "a.mlir", "--slow", "1:2@3x");
  EXPECT_USAGE_ERROR("--slow expects", "a.mlir", "--slow", "1:nan");
  EXPECT_USAGE_ERROR("--fault expects hang:RANK@ITERATION", "a.mlir", "--fault", "hang:1");
  EXPECT_USAGE_ERROR("--fault expects", "a.mlir", "--fault", "explode:1@2");
  EXPECT_USAGE_ERROR("--fault expects", "a.mlir", "--fault", "delay=0:1@2");
  EXPECT_USAGE_ERROR("--fault expects", "a.mlir", "--fault", "die:1@-2");
  EXPECT_USAGE_ERROR("--fault expects", "a.mlir", "--fault", "die:99999999999999999999@2");
  EXPECT_USAGE_ERROR("--timeout expects seconds in (0, 1e7]", "a.mlir", "--timeout", "0");
  EXPECT_USAGE_ERROR("--timeout expects", "a.mlir", "--timeout", "1s");
}


/* --train's flags: defaults (some follow --optimizer), values, and every
 * class of error: a training flag without --train, a timed run's flag with
 * it, --params with --resume, bad numbers and names. */
static void test_train(void **state) {
  (void)state;
  htp_run_options options;
  char err[256] = "";
  assert_int_equal(PARSE(&options, err, "m.mlir", "--train"), 0);
  assert_true(options.train.enabled);
  assert_string_equal(options.train.data, "/usr/share/datasets/fashion-mnist");
  assert_int_equal(options.train.epochs, 5);
  assert_int_equal(options.train.optimizer, HTP_TRAIN_ADAMW);
  assert_true(options.train.lr == 1e-3 && options.train.weight_decay == 0.05);
  assert_int_equal(options.train.schedule, HTP_TRAIN_COSINE);
  assert_int_equal(options.train.augment, HTP_AUGMENT_NONE);
  assert_true(options.train.label_smoothing == 0.0);
  assert_true(options.train.random_erase == 0.0);
  assert_int_equal(options.train.clock, HTP_TRAIN_CLOCK_WALL);
  assert_int_equal(options.train.limit_train, 0);
  assert_null(options.train.checkpoint);
  assert_int_equal(PARSE(&options, err, "m.mlir", "--train", "--optimizer", "sgd"), 0);
  assert_true(options.train.lr == 0.05 && options.train.weight_decay == 0.0);
  assert_true(options.train.momentum == 0.9);
  assert_int_equal(PARSE(&options, err, "--train", "m.so", "--data=d", "--epochs", "3",
                         "--optimizer=sgd", "--lr", "0.1", "--momentum", "0", "--weight-decay",
                         "1e-4", "--schedule", "constant", "--augment", "flip-shift", "--limit-train", "512",
                         "--limit-test", "100", "--params", "p.st", "--checkpoint", "c.st",
                         "--metrics", "m.json", "--tp", "2", "--slow", "1:2", "--seed", "9"),
                   0);
  assert_string_equal(options.train.data, "d");
  assert_int_equal(options.train.epochs, 3);
  assert_int_equal(options.train.optimizer, HTP_TRAIN_SGD);
  assert_true(options.train.lr == 0.1 && options.train.momentum == 0.0);
  assert_true(options.train.weight_decay == 1e-4);
  assert_int_equal(options.train.schedule, HTP_TRAIN_CONSTANT);
  assert_int_equal(options.train.augment, HTP_AUGMENT_FLIP_SHIFT);
  assert_int_equal(options.train.limit_train, 512);
  assert_int_equal(options.train.limit_test, 100);
  assert_string_equal(options.train.params, "p.st");
  assert_string_equal(options.train.checkpoint, "c.st");
  assert_string_equal(options.train.metrics, "m.json");
  assert_int_equal(PARSE(&options, err, "m.mlir", "--train", "--augment", "flip",
                         "--label-smoothing", "0.1", "--random-erase", "1"), 0);
  assert_int_equal(options.train.augment, HTP_AUGMENT_FLIP);
  assert_true(options.train.random_erase == 1.0);
  assert_true(options.train.label_smoothing == 0.1);
  assert_string_equal(htp_run_augment_name(HTP_AUGMENT_FLIP_SHIFT), "flip-shift");
  assert_int_equal(PARSE(&options, err, "m.mlir", "--train", "--tp", "4", "--clock", "cpu"), 0);
  assert_int_equal(options.train.clock, HTP_TRAIN_CLOCK_CPU);
  assert_string_equal(htp_run_clock_name(HTP_TRAIN_CLOCK_CPU), "cpu");
  assert_int_equal(PARSE(&options, err, "m.mlir", "--train", "--tp", "4", "--clock", "units"), 0);
  assert_int_equal(options.train.clock, HTP_TRAIN_CLOCK_UNITS);
  assert_string_equal(htp_run_clock_name(HTP_TRAIN_CLOCK_UNITS), "units");
  assert_string_equal(htp_run_clock_name((htp_train_clock)9), "?");
  /* --same-max-age: 1 by default in training, 0 (any age) in a timed run */
  assert_int_equal(PARSE(&options, err, "m.mlir", "--train", "--tp", "2", "--policy", "resize",
                         "--impute", "same"), 0);
  assert_int_equal(options.same_max_age, 1);
  assert_int_equal(PARSE(&options, err, "m.mlir", "--tp", "2", "--policy", "semi", "--impute",
                         "same"), 0);
  assert_int_equal(options.same_max_age, 0);
  assert_int_equal(PARSE(&options, err, "m.mlir", "--train", "--policy", "resize", "--impute",
                         "same", "--same-max-age", "0"), 0);
  assert_int_equal(options.same_max_age, 0);
  assert_int_equal(PARSE(&options, err, "m.mlir", "--policy", "resize", "--impute", "same",
                         "--same-max-age", "7"), 0);
  assert_int_equal(options.same_max_age, 7);
  assert_int_equal(PARSE(&options, err, "m.so", "--train", "--resume", "c.st"), 0);
  assert_string_equal(options.train.resume, "c.st");

  /* Balancing in training: the policy flags and the trace are --train's too. */
  assert_int_equal(PARSE(&options, err, "m.mlir", "--train", "--tp", "4", "--policy", "semi",
                         "--impute", "average", "--select", "variation", "--trace", "t.jsonl",
                         "--slow", "3:2"), 0);
  assert_int_equal(options.policy, HTP_POLICY_SEMI);
  assert_int_equal(options.impute, HTP_IMPUTE_AVERAGE);
  assert_int_equal(options.selection, HTP_SELECT_VARIATION);
  assert_string_equal(options.trace, "t.jsonl");
  EXPECT_USAGE_ERROR("--select variation ranks units by how their weights change in training",
                     "m.mlir", "--tp", "2", "--select", "variation");

  EXPECT_USAGE_ERROR("--epochs is a flag of --train", "m.mlir", "--epochs", "2");
  EXPECT_USAGE_ERROR("--data is a flag of --train", "m.mlir", "--data", "d");
  EXPECT_USAGE_ERROR("--iters is not used by --train", "m.mlir", "--train", "--iters", "2");
  EXPECT_USAGE_ERROR("--check is not used by --train", "m.mlir", "--check", "--train");
  EXPECT_USAGE_ERROR("initial weights are --params", "m.mlir", "--train", "--weights", "w");
  EXPECT_USAGE_ERROR("--params and --resume both", "m.mlir", "--train", "--params", "p",
                     "--resume", "c");
  EXPECT_USAGE_ERROR("--epochs expects an integer >= 1", "m.mlir", "--train", "--epochs", "0");
  EXPECT_USAGE_ERROR("--epochs expects an integer <= 100000", "m.mlir", "--train", "--epochs",
                     "100001");
  EXPECT_USAGE_ERROR("--limit-train expects an integer >= 1", "m.mlir", "--train",
                     "--limit-train", "-5");
  EXPECT_USAGE_ERROR("--limit-test expects an integer", "m.mlir", "--train", "--limit-test",
                     "1e3");
  EXPECT_USAGE_ERROR("--lr expects a number in [1e-30, 10]", "m.mlir", "--train", "--lr", "0");
  /* A rate that rounds to a float 0 (the kernels' type) would not train. */
  EXPECT_USAGE_ERROR("--lr expects a number in [1e-30, 10]", "m.mlir", "--train", "--lr", "1e-50");
  EXPECT_USAGE_ERROR("--lr expects a number", "m.mlir", "--train", "--lr", "fast");
  EXPECT_USAGE_ERROR("--lr expects a number", "m.mlir", "--train", "--lr", "nan");
  EXPECT_USAGE_ERROR("--lr expects a number", "m.mlir", "--train", "--lr", "0.1x");
  EXPECT_USAGE_ERROR("--lr expects a number", "m.mlir", "--train", "--lr", " 0.1");
  EXPECT_USAGE_ERROR("--momentum expects a number in [0, 1)", "m.mlir", "--train",
                     "--momentum", "1");
  EXPECT_USAGE_ERROR("--weight-decay expects a number in [0, 10]", "m.mlir", "--train",
                     "--weight-decay", "-0.1");
  EXPECT_USAGE_ERROR("--optimizer expects adamw|sgd, got 'adam'", "m.mlir", "--train",
                     "--optimizer", "adam");
  EXPECT_USAGE_ERROR("--schedule expects cosine|constant, got 'linear'", "m.mlir", "--train",
                     "--schedule", "linear");
  EXPECT_USAGE_ERROR("--augment expects none|flip|flip-shift, got 'crop'", "m.mlir", "--train",
                     "--augment", "crop");
  EXPECT_USAGE_ERROR("--augment is a flag of --train", "m.mlir", "--augment", "flip-shift");
  EXPECT_USAGE_ERROR("--label-smoothing expects a number in [0, 1), got '1'", "m.mlir",
                     "--train", "--label-smoothing", "1");
  EXPECT_USAGE_ERROR("--label-smoothing expects a number in [0, 1)", "m.mlir", "--train",
                     "--label-smoothing", "-0.1");
  EXPECT_USAGE_ERROR("--label-smoothing is a flag of --train", "m.mlir", "--label-smoothing",
                     "0.1");
  EXPECT_USAGE_ERROR("--random-erase expects a number in [0, 1], got '1.5'", "m.mlir",
                     "--train", "--random-erase", "1.5");
  EXPECT_USAGE_ERROR("--random-erase expects a number in [0, 1], got 'nan'", "m.mlir",
                     "--train", "--random-erase", "nan");
  EXPECT_USAGE_ERROR("--random-erase is a flag of --train", "m.mlir", "--random-erase", "0.5");
  EXPECT_USAGE_ERROR("--clock expects wall|cpu|units, got 'gpu'", "m.mlir", "--train", "--clock",
                     "gpu");
  EXPECT_USAGE_ERROR("--clock units times each rank thread's CPU work: with --device cuda",
                     "m.mlir", "--train", "--device", "cuda", "--clock", "units");
  EXPECT_USAGE_ERROR("--clock is a flag of --train", "m.mlir", "--clock", "cpu");
  EXPECT_USAGE_ERROR("--same-max-age bounds the values --impute same reuses", "m.mlir",
                     "--train", "--same-max-age", "2");
  EXPECT_USAGE_ERROR("--select displacement ranks units by how their weights change in "
                     "training: use it with --train", "m.mlir", "--select", "displacement");
  EXPECT_USAGE_ERROR("--same-max-age bounds the values --impute same reuses", "m.mlir",
                     "--impute", "average", "--same-max-age", "2");
  EXPECT_USAGE_ERROR("--same-max-age expects an integer >= 0, got '-1'", "m.mlir", "--impute",
                     "same", "--same-max-age", "-1");
  EXPECT_USAGE_ERROR("--clock cpu times each rank thread's CPU work: with --device cuda", "m.mlir",
                     "--train", "--device", "cuda", "--clock", "cpu");
  EXPECT_USAGE_ERROR("--checkpoint needs a file name", "m.mlir", "--train", "--checkpoint", "");
  EXPECT_USAGE_ERROR("--lr given more than once", "m.mlir", "--train", "--lr", "1", "--lr=2");
  EXPECT_USAGE_ERROR("--data needs a value", "m.mlir", "--train", "--data");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_unknown_flags),
      cmocka_unit_test(test_missing_values),
      cmocka_unit_test(test_bad_numbers),
      cmocka_unit_test(test_repeated_flags),
      cmocka_unit_test(test_enum_names_from_runtime),
      cmocka_unit_test(test_too_many),
      cmocka_unit_test(test_not_implemented),
      cmocka_unit_test(test_implemented),
      cmocka_unit_test(test_injection_errors),
      cmocka_unit_test(test_gpu_flags),
      cmocka_unit_test(test_sms_errors),
      cmocka_unit_test(test_train),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
