/*===- tools/htp-run/options.c - htp-run's command line ------------------===*
 *
 * This file implements options.h. Flags take their value as the next
 * argument or after '=' (--iters=5). Values are checked here; whether this
 * build can act on them is htp_run_check_implemented's job, so that the
 * "not implemented yet" messages live in one place.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/options.h"

#include "tools/htp-run/errors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void htp_run_print_help(FILE *stream) {
  fputs(
      "usage: htp-run FILE.mlir|FILE.so [options]\n"
      "\n"
      "Runs an htp block: compiles FILE.mlir with the JIT (or loads FILE.so written by\n"
      "htp-compile), binds its parameters and inputs, runs it, times every iteration\n"
      "and reports. This build runs unsharded blocks (--tp 1) on the CPU.\n"
      "\n"
      "options:\n"
      "  --entry F             entry function (default: the only public function; for a\n"
      "                        .so, the entry htp-compile marked as the default)\n"
      "  --iters K             timed iterations, K >= 1 (default 10)\n"
      "  --warmup W            untimed iterations before them, W >= 0 (default 1)\n"
      "  --seed S              seed of the random data (default 0)\n"
      "  --weights W.safetensors\n"
      "                        bind parameters by their htp.param names (timm names).\n"
      "                        Every parameter must be in the file with its exact shape;\n"
      "                        F32, F16, BF16 and F64 tensors are read (converted to\n"
      "                        f32); tensors the block does not use are skipped with a\n"
      "                        warning (a full checkpoint also holds patch_embed, ...)\n"
      "  --input X.npy         data input ('<f4' or '<f8', C order, exactly the input's\n"
      "                        shape); give it once per data input, in argument order\n"
      "  --output Y.npy        write a result of the last iteration ('<f4'); give it once\n"
      "                        per result to save, in result order\n"
      "  --report table|json   table (default): the iterations and a summary line;\n"
      "                        json: exactly one JSON object on stdout (entry, file,\n"
      "                        iters, warmup, seed, tp, backend, device, policy, flops,\n"
      "                        median_ms, min_ms, mean_ms, max_ms, gflops, times_ms,\n"
      "                        inputs, params, outputs with their shapes)\n"
      "  --tp N                tensor-parallel ranks (default 1; N > 1 is not\n"
      "                        implemented yet)\n"
      "  --backend local|mpi|nccl\n"
      "                        collectives backend (default local; libhtprt has mpi\n"
      "                        and nccl, but htp-run uses them only with --tp > 1,\n"
      "                        which is not implemented yet)\n"
      "  --device cpu|cuda     where to run (default cpu; cuda is not implemented yet)\n"
      "  --policy none|resize|migrate|semi\n"
      "                        straggler policy (default none; the others are not\n"
      "                        implemented yet)\n"
      "  --slow R:F            slow rank R down by a factor F (not implemented yet)\n"
      "  --trace T.jsonl       write a JSON-lines trace (not implemented yet)\n"
      "  --check               also run unsharded and report the max error (not\n"
      "                        implemented yet)\n"
      "  -h, --help            print this help\n"
      "\n"
      "data defaults (without --weights / --input): seeded random data, each tensor\n"
      "drawn from its own stream of (--seed, argument index), so a .so and the JIT see\n"
      "the same numbers whatever --iters is:\n"
      "  data inputs                        N(0, 1)\n"
      "  parameters named *norm*.weight     1 (layer-norm scale)\n"
      "  parameters named *norm*.bias       0\n"
      "  all other parameters               N(0, 0.02^2) (timm's init std for weights;\n"
      "                                     biases get it too, so they are exercised)\n"
      "\n"
      "Per-iteration time is wall clock (CLOCK_MONOTONIC) around one call; GFLOP/s\n"
      "counts the matrix products the compiler reports in the block's signature,\n"
      "at the median time.\n"
      "\n"
      "exit status: 0 success, 1 error, 2 bad command line.\n",
      stream);
}

static int parse_long(const char *flag, const char *text, long min, long *out, char *err,
                      size_t err_size) {
  char *end;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno || end == text || *end != '\0' || value < min)
    return htp_set_error(err, err_size, "%s expects an integer >= %ld, got '%s'", flag, min, text);
  *out = value;
  return 0;
}

static int one_of(const char *flag, const char *value, const char *const *choices, char *err,
                  size_t err_size) {
  for (const char *const *choice = choices; *choice; choice++)
    if (strcmp(value, *choice) == 0)
      return 0;
  char list[128] = "";
  for (const char *const *choice = choices; *choice; choice++) {
    strncat(list, *choice, sizeof list - strlen(list) - 1);
    if (choice[1])
      strncat(list, "|", sizeof list - strlen(list) - 1);
  }
  return htp_set_error(err, err_size, "%s expects %s, got '%s'", flag, list, value);
}

int htp_run_parse_options(int argc, char **argv, htp_run_options *options, char *err,
                          size_t err_size) {
  static const char *const reports[] = {"table", "json", NULL};
  static const char *const backends[] = {"local", "mpi", "nccl", NULL};
  static const char *const devices[] = {"cpu", "cuda", NULL};
  static const char *const policies[] = {"none", "resize", "migrate", "semi", NULL};
  static const char *const valued[] = {"--entry",  "--iters",  "--warmup", "--seed",
                                       "--weights", "--input", "--output", "--report",
                                       "--tp",     "--backend", "--device", "--policy",
                                       "--slow",   "--trace",  NULL};
  memset(options, 0, sizeof *options);
  options->iters = 10;
  options->warmup = 1;
  options->tp = 1;
  options->backend = "local";
  options->device = "cpu";
  options->policy = "none";
  options->report = HTP_REPORT_TABLE;

  int only_positional = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (only_positional || arg[0] != '-' || arg[1] == '\0') {
      if (options->path)
        return htp_set_error(err, err_size, "more than one file given ('%s' and '%s')",
                             options->path, arg);
      options->path = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      only_positional = 1;
      continue;
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      options->help = 1;
      continue;
    }
    if (strcmp(arg, "--check") == 0) {
      options->check = 1;
      continue;
    }
    /* A flag with a value: "--flag value" or "--flag=value". */
    char flag[32];
    const char *value = NULL;
    const char *equals = strchr(arg, '=');
    size_t flag_length = equals ? (size_t)(equals - arg) : strlen(arg);
    if (flag_length >= sizeof flag)
      return htp_set_error(err, err_size, "unknown option '%s'", arg);
    memcpy(flag, arg, flag_length);
    flag[flag_length] = '\0';
    int known = 0;
    for (const char *const *name = valued; *name; name++)
      known |= strcmp(flag, *name) == 0;
    if (!known)
      return htp_set_error(err, err_size, "unknown option '%s'", flag);
    if (equals) {
      value = equals + 1;
    } else {
      if (i + 1 >= argc)
        return htp_set_error(err, err_size, "%s needs a value", flag);
      value = argv[++i];
    }

    long number = 0;
    if (strcmp(flag, "--entry") == 0) {
      if (!*value)
        return htp_set_error(err, err_size, "--entry needs a function name");
      options->entry = value;
    } else if (strcmp(flag, "--iters") == 0) {
      if (parse_long(flag, value, 1, &options->iters, err, err_size))
        return 1;
    } else if (strcmp(flag, "--warmup") == 0) {
      if (parse_long(flag, value, 0, &options->warmup, err, err_size))
        return 1;
    } else if (strcmp(flag, "--seed") == 0) {
      char *end;
      errno = 0;
      unsigned long long seed = strtoull(value, &end, 10);
      if (errno || end == value || *end != '\0' || value[0] == '-')
        return htp_set_error(err, err_size, "--seed expects a non-negative integer, got '%s'",
                             value);
      options->seed = (uint64_t)seed;
    } else if (strcmp(flag, "--weights") == 0) {
      options->weights = value;
    } else if (strcmp(flag, "--input") == 0 || strcmp(flag, "--output") == 0) {
      int is_input = flag[2] == 'i';
      int *count = is_input ? &options->num_inputs : &options->num_outputs;
      if (*count == HTP_RUN_MAX_FILES)
        return htp_set_error(err, err_size, "too many %s flags", flag);
      (is_input ? options->inputs : options->outputs)[(*count)++] = value;
    } else if (strcmp(flag, "--report") == 0) {
      if (one_of(flag, value, reports, err, err_size))
        return 1;
      options->report = strcmp(value, "json") == 0 ? HTP_REPORT_JSON : HTP_REPORT_TABLE;
    } else if (strcmp(flag, "--tp") == 0) {
      if (parse_long(flag, value, 1, &number, err, err_size))
        return 1;
      options->tp = number;
    } else if (strcmp(flag, "--backend") == 0) {
      if (one_of(flag, value, backends, err, err_size))
        return 1;
      options->backend = value;
    } else if (strcmp(flag, "--device") == 0) {
      if (one_of(flag, value, devices, err, err_size))
        return 1;
      options->device = value;
    } else if (strcmp(flag, "--policy") == 0) {
      if (one_of(flag, value, policies, err, err_size))
        return 1;
      options->policy = value;
    } else if (strcmp(flag, "--slow") == 0) {
      options->slow = value;
    } else if (strcmp(flag, "--trace") == 0) {
      options->trace = value;
    }
  }
  if (!options->help && !options->path)
    return htp_set_error(err, err_size, "no input file (FILE.mlir or FILE.so)");
  return 0;
}

int htp_run_check_implemented(const htp_run_options *options, char *err, size_t err_size) {
  if (options->tp > 1)
    return htp_set_error(err, err_size, "--tp %ld: tensor-parallel execution is not implemented "
                         "yet (only --tp 1)", options->tp);
  if (strcmp(options->backend, "local") != 0)
    return htp_set_error(err, err_size, "--backend %s is not implemented yet (only local)",
                         options->backend);
  if (strcmp(options->device, "cpu") != 0)
    return htp_set_error(err, err_size, "--device %s is not implemented yet (only cpu)",
                         options->device);
  if (strcmp(options->policy, "none") != 0)
    return htp_set_error(err, err_size, "--policy %s is not implemented yet (only none)",
                         options->policy);
  if (options->slow)
    return htp_set_error(err, err_size, "--slow is not implemented yet");
  if (options->trace)
    return htp_set_error(err, err_size, "--trace is not implemented yet");
  if (options->check)
    return htp_set_error(err, err_size, "--check is not implemented yet");
  return 0;
}
