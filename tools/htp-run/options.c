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
      "htp-compile), binds its parameters and inputs, runs it on --tp ranks, times every\n"
      "iteration and reports. CPU only.\n"
      "\n"
      "options:\n"
      "  --entry F             entry function (default: the only public function; for a\n"
      "                        .so, the entry htp-compile marked as the default)\n"
      "  --iters K             timed iterations, K >= 1 (default 10)\n"
      "  --warmup W            untimed iterations before them, W >= 0 (default 1)\n"
      "  --seed S              seed of the random data (default 0)\n"
      "  --weights W.safetensors\n"
      "                        bind parameters by their htp.param names (timm names), at\n"
      "                        their GLOBAL (unsplit) shapes whatever --tp is; each rank\n"
      "                        gets its slice. Every parameter must be in the file with\n"
      "                        its exact shape; F32, F16, BF16 and F64 tensors are read\n"
      "                        (converted to f32); tensors the block does not use are\n"
      "                        skipped with a warning (a full checkpoint also holds\n"
      "                        patch_embed, ...)\n"
      "  --input X.npy         data input ('<f4' or '<f8', C order, exactly the input's\n"
      "                        shape); give it once per data input, in argument order\n"
      "  --output Y.npy        write a result of the last iteration ('<f4'; rank 0's,\n"
      "                        every rank has the whole result); give it once per result\n"
      "                        to save, in result order\n"
      "  --report table|json   table (default): the iterations and a summary line;\n"
      "                        json: exactly one JSON object on stdout (entry, file,\n"
      "                        iters, warmup, seed, tp, backend, device, policy, flops,\n"
      "                        block_flops, median_ms, min_ms, mean_ms, max_ms, gflops,\n"
      "                        times_ms, rank_compute_ms, stragglers, check, balance,\n"
      "                        plan, inputs, params, outputs with their shapes)\n"
      "  --tp N                tensor-parallel ranks (default 1). A .mlir is compiled\n"
      "                        split for N ranks (--htp-tensor-parallel); a .so runs at\n"
      "                        the tp it was compiled for (htp-compile --tp N), and a\n"
      "                        --tp that differs is an error\n"
      "  --backend local|mpi|nccl\n"
      "                        collectives backend (default local: one thread per rank\n"
      "                        in this process). mpi: one process per rank under\n"
      "                        mpirun (mpirun -np N htp-run ... --backend mpi); --tp,\n"
      "                        when given, must equal N; rank 0 reports and writes the\n"
      "                        outputs. nccl is not implemented yet\n"
      "  --device cpu|cuda     where to run (default cpu; cuda is not implemented yet)\n"
      "  --policy none|resize|migrate|semi\n"
      "                        what the ranks do about stragglers (see Balancing):\n"
      "                          none     detect and trace only (default)\n"
      "                          resize   a straggler skips (prunes) a fraction gamma\n"
      "                                   of its work units, imputed (--impute):\n"
      "                                   approximate\n"
      "                          migrate  a straggler hands gamma of its units to\n"
      "                                   fast ranks, which compute them: exact\n"
      "                          semi     the worst stragglers migrate, mild ones\n"
      "                                   resize (deficit above the planner's\n"
      "                                   resize_limit, 0.25, migrates)\n"
      "                        resize, migrate and semi need a block with balance hooks:\n"
      "                        a .mlir run with --tp > 1 (or a .so from htp-compile\n"
      "                        --tp > 1)\n"
      "  --impute zero|same|average\n"
      "                        values of pruned units (resize, semi): zero (default),\n"
      "                        same (the unit's last computed value), average (per\n"
      "                        token, the mean of the kept units)\n"
      "  --select random|importance\n"
      "                        which units a straggler sheds (resize, migrate, semi):\n"
      "                        random (default: a permutation seeded with --seed) or\n"
      "                        importance (least important first: per unit, an EWMA of\n"
      "                        mean |activation| x norm of its output weights, measured\n"
      "                        in the iterations before the plan change). Needs a block\n"
      "                        with balance hooks, as --policy does\n"
      "  --slow R:F[@K]        make rank R slower by a factor F >= 1 from iteration K on\n"
      "                        (default 0), so it stays F times slower at whatever work\n"
      "                        the plan gives it: in a block with balance hooks each\n"
      "                        hook waits (F - 1) times its own time before the\n"
      "                        all-reduce; otherwise the rank sleeps (F - 1) times its\n"
      "                        call's compute time after each call.\n"
      "                        Repeatable (one factor per rank; the last applies)\n"
      "  --fault KIND:R@K      inject a runtime fault on rank R at iteration K, for tests\n"
      "                        and experiments: hang (stops answering), die (fails), or\n"
      "                        delay=S (sleeps S seconds every iteration from K on).\n"
      "                        Peers see a timeout or a remote failure and htp-run exits\n"
      "                        with an error. Repeatable\n"
      "  --timeout S           deadline of every collective in seconds (default 60): a\n"
      "                        rank that waits longer for a peer fails the run\n"
      "  --trace T.jsonl       write the planner's trace: one JSON line per rank per\n"
      "                        iteration (warm-up included; \"iter\" counts from 0)\n"
      "  --check               (.mlir only) also compile and run the block unsplit (tp 1)\n"
      "                        on the same data and report max |y_tp - y_1| / max |y_1|\n"
      "                        per result; exit 1 if above 1e-4\n"
      "  -h, --help            print this help\n"
      "\n"
      "data defaults (without --weights / --input): seeded random data, each tensor\n"
      "drawn at its global shape from its own stream of (--seed, argument index), so a\n"
      "a .so, the JIT and every --tp see the same numbers whatever --iters is:\n"
      "  data inputs                        N(0, 1)\n"
      "  parameters named *norm*.weight     1 (layer-norm scale)\n"
      "  parameters named *norm*.bias       0\n"
      "  all other parameters               N(0, 0.02^2) (timm's init std for weights;\n"
      "                                     biases get it too, so they are exercised)\n"
      "\n"
      "Timing. Iterations are numbered from 0, warm-up ones first (so --slow and\n"
      "--fault iterations, the table and the trace use the same numbers). In each\n"
      "iteration the ranks meet at a barrier, then each calls the block and takes\n"
      "the balancing step (exchange of timings, a new plan, migration transfers);\n"
      "the iteration's time runs from the barrier to the last rank's end of that\n"
      "step (wall clock, CLOCK_MONOTONIC). A rank's compute time is its own call's wall time minus the\n"
      "time it spent in collectives (htp_ctx_comm_seconds: waiting for peers in the\n"
      "block's all-reduces is not its work), times F for a --slow rank. With balance\n"
      "hooks the planner is fed the rank's time in the hooks instead (the work it can\n"
      "move: layer norms and residuals do not shrink when units are shed).\n"
      "GFLOP/s counts the matrix products of the WHOLE block: the signature's flops\n"
      "(one rank's share after the split) times tp, over the iteration time (at the\n"
      "median in the summary).\n"
      "\n"
      "Detection. After every iteration the ranks all-gather their compute times into\n"
      "the runtime's planner (EWMA, threshold 0.90 of the fastest to become a\n"
      "straggler, 0.95 to recover, 3 iterations of hysteresis: runtime/htp.h). The\n"
      "table names the ranks it detected as stragglers.\n"
      "\n"
      "Balancing. A block split with --tp > 1 calls the runtime's balance hooks and its\n"
      "signature has a 'balance' record: per rank, its layers' attention heads and MLP\n"
      "units (groups of fc1/fc2 neurons) and their FLOPs. Each rank then gets an\n"
      "htp_balancer with that config (--policy, --impute, --select: random unit\n"
      "selection seeded with --seed, or importance), and htp_balancer_end_iteration replaces the plain step: detection,\n"
      "the plan (the same on every rank), the migration of handed-off units' weights\n"
      "(once per plan change) and the trace. The table shows the plan each iteration ran\n"
      "under (version; ranks that resize, migrate or help, with gamma) and the last plan's\n"
      "units; --check fails above tolerance for none and migrate only (resize and semi\n"
      "prune: the error is reported, marked approximate). A block without the record\n"
      "(tp 1, or compiled without hooks) has no units to balance: only --policy none\n"
      "runs, with a planner of one layer and one unit per kind, for detection.\n"
      "\n"
      "exit status: 0 success, 1 error (a failed rank, a --check above tolerance),\n"
      "2 bad command line.\n",
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

/* A non-negative int at *text, advancing it; no sign, no overflow. */
static int take_count(const char **text, long max, long *out) {
  const char *p = *text;
  long value = 0;
  if (*p < '0' || *p > '9')
    return 1;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (value > (max - (*p - '0')) / 10)
      return 1;
    value = value * 10 + (*p - '0');
  }
  *text = p;
  *out = value;
  return 0;
}

/* "R:F[@K]". */
static int parse_slow(const char *value, htp_run_slow *slow, char *err, size_t err_size) {
  const char *p = value;
  long rank, from = 0;
  char *end;
  if (take_count(&p, 1 << 20, &rank) || *p != ':')
    goto bad;
  errno = 0;
  double factor = strtod(p + 1, &end);
  if (errno || end == p + 1 || !(factor >= 1.0) || factor > 1e6)
    goto bad;
  p = end;
  if (*p == '@') {
    p++;
    if (take_count(&p, 1L << 40, &from))
      goto bad;
  }
  if (*p != '\0')
    goto bad;
  slow->rank = (int)rank;
  slow->factor = factor;
  slow->from_iteration = from;
  return 0;
bad:
  return htp_set_error(err, err_size, "--slow expects RANK:FACTOR[@ITERATION] with FACTOR in "
                       "[1, 1e6], e.g. 1:3 or 2:1.5@10, got '%s'", value);
}

/* "hang:R@K", "die:R@K", "delay[=S]:R@K". */
static int parse_fault(const char *value, htp_run_fault *fault, char *err, size_t err_size) {
  const char *p = value;
  long rank, iteration;
  memset(fault, 0, sizeof *fault);
  if (strncmp(p, "hang:", 5) == 0) {
    fault->kind = HTP_RUN_FAULT_HANG;
    p += 5;
  } else if (strncmp(p, "die:", 4) == 0) {
    fault->kind = HTP_RUN_FAULT_DIE;
    p += 4;
  } else if (strncmp(p, "delay", 5) == 0) {
    fault->kind = HTP_RUN_FAULT_DELAY;
    fault->seconds = 1.0;
    p += 5;
    if (*p == '=') {
      char *end;
      errno = 0;
      fault->seconds = strtod(p + 1, &end);
      if (errno || end == p + 1 || !(fault->seconds > 0) || fault->seconds > 1e7)
        goto bad;
      p = end;
    }
    if (*p++ != ':')
      goto bad;
  } else {
    goto bad;
  }
  if (take_count(&p, 1 << 20, &rank) || *p++ != '@' || take_count(&p, 1L << 40, &iteration) ||
      *p != '\0')
    goto bad;
  fault->rank = (int)rank;
  fault->iteration = iteration;
  return 0;
bad:
  return htp_set_error(err, err_size, "--fault expects hang:RANK@ITERATION, die:RANK@ITERATION "
                       "or delay[=SECONDS]:RANK@ITERATION, got '%s'", value);
}

int htp_run_parse_options(int argc, char **argv, htp_run_options *options, char *err,
                          size_t err_size) {
  static const char *const reports[] = {"table", "json", NULL};
  static const char *const backends[] = {"local", "mpi", "nccl", NULL};
  static const char *const devices[] = {"cpu", "cuda", NULL};
  static const char *const policies[] = {"none", "resize", "migrate", "semi", NULL};
  static const char *const imputes[] = {"zero", "same", "average", NULL};
  static const char *const selections[] = {"random", "importance", NULL};
  static const char *const valued[] = {"--entry",  "--iters",  "--warmup", "--seed",
                                       "--weights", "--input", "--output", "--report",
                                       "--tp",     "--backend", "--device", "--policy",
                                       "--slow",   "--trace",  "--fault",  "--timeout",
                                       "--impute", "--select", NULL};
  memset(options, 0, sizeof *options);
  options->iters = 10;
  options->warmup = 1;
  options->tp = 1;
  options->backend = "local";
  options->device = "cpu";
  options->policy = HTP_POLICY_NONE;
  options->impute = HTP_IMPUTE_ZERO;
  options->selection = HTP_SELECT_RANDOM;
  options->report = HTP_REPORT_TABLE;
  options->timeout_s = 60.0;

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
      options->tp_given = 1;
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
      htp_policy_parse(value, &options->policy);
    } else if (strcmp(flag, "--impute") == 0) {
      if (one_of(flag, value, imputes, err, err_size))
        return 1;
      htp_impute_parse(value, &options->impute);
    } else if (strcmp(flag, "--select") == 0) {
      if (one_of(flag, value, selections, err, err_size))
        return 1;
      htp_select_parse(value, &options->selection);
    } else if (strcmp(flag, "--slow") == 0) {
      if (options->num_slows == HTP_RUN_MAX_INJECTIONS)
        return htp_set_error(err, err_size, "too many --slow flags");
      if (parse_slow(value, &options->slows[options->num_slows], err, err_size))
        return 1;
      options->num_slows++;
      options->slow = value;
    } else if (strcmp(flag, "--fault") == 0) {
      if (options->num_faults == HTP_RUN_MAX_INJECTIONS)
        return htp_set_error(err, err_size, "too many --fault flags");
      if (parse_fault(value, &options->faults[options->num_faults], err, err_size))
        return 1;
      options->num_faults++;
    } else if (strcmp(flag, "--timeout") == 0) {
      char *end;
      errno = 0;
      double seconds = strtod(value, &end);
      if (errno || end == value || *end != '\0' || !(seconds > 0) || seconds > 1e7)
        return htp_set_error(err, err_size, "--timeout expects seconds in (0, 1e7], got '%s'",
                             value);
      options->timeout_s = seconds;
    } else if (strcmp(flag, "--trace") == 0) {
      options->trace = value;
    }
  }
  if (!options->help && !options->path)
    return htp_set_error(err, err_size, "no input file (FILE.mlir or FILE.so)");
  return 0;
}

int htp_run_check_implemented(const htp_run_options *options, char *err, size_t err_size) {
  if (strcmp(options->backend, "nccl") == 0)
    return htp_set_error(err, err_size, "--backend nccl is not implemented yet (local and mpi "
                         "are)");
  if (strcmp(options->device, "cpu") != 0)
    return htp_set_error(err, err_size, "--device %s is not implemented yet (only cpu)",
                         options->device);
  for (int i = 0; i < options->num_slows; i++)
    if (options->slows[i].rank >= options->tp && options->tp_given)
      return htp_set_error(err, err_size, "--slow %d:...: rank %d is not in [0, %ld) (--tp %ld)",
                           options->slows[i].rank, options->slows[i].rank, options->tp,
                           options->tp);
  for (int i = 0; i < options->num_faults; i++)
    if (options->faults[i].rank >= options->tp && options->tp_given)
      return htp_set_error(err, err_size, "--fault: rank %d is not in [0, %ld) (--tp %ld)",
                           options->faults[i].rank, options->tp, options->tp);
  return 0;
}
