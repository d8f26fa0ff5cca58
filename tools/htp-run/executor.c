/*===- tools/htp-run/executor.c - The executor half of htp-run -----------===*
 *
 * This file implements htp_run_main (tools/htp-run/entry.h): parse the
 * command line, get an entry point from the JIT or from a shared object,
 * read its signature, bind data, run warm-up and timed iterations, write the
 * outputs and report. Parameters are held at their global shapes and each
 * rank gets its slice (shard.h); the ranks run in ranks.c. Flags of later
 * issues are parsed and refused (options.c).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/entry.h"

#include "tools/htp-run/data.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/npy.h"
#include "tools/htp-run/options.h"
#include "tools/htp-run/ranks.h"
#include "tools/htp-run/shard.h"
#include "tools/htp-run/signature.h"
#include "tools/htp-run/so_loader.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EXIT_ERROR = 1, EXIT_USAGE = 2, TABLE_ROWS = 20 };

/* --check: max |y_tp - y_1| / max |y_1| above this fails the run. */
static const double CHECK_TOLERANCE = 1e-4;

/* Under mpi the errors every process meets alike (bad flags, files, ...)
 * are printed by rank 0 only; each prints its own rank's failure. */
static int errors_muted;

/* Prints an error in one write, so that processes under mpirun do not
 * interleave; control characters that came from a corrupt file's names are
 * shown as '?' rather than sent to the terminal. */
static int fail(const char *message) {
  if (errors_muted)
    return EXIT_ERROR;
  char line[20000];
  size_t used = (size_t)snprintf(line, sizeof line, "htp-run: error: ");
  for (const unsigned char *p = (const unsigned char *)message; *p && used + 2 < sizeof line; p++)
    line[used++] = (char)((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f ? '?' : *p);
  line[used++] = '\n';
  line[used] = '\0';
  fputs(line, stderr);
  fflush(stderr);
  return EXIT_ERROR;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* An ELF file is a shared object from htp-compile; anything else goes to the
 * JIT. Returns -1 (with err) when the file cannot be read. */
static int is_shared_object(const char *path, char *err, size_t err_size) {
  FILE *file = fopen(path, "rb");
  if (!file) {
    htp_set_error(err, err_size, "cannot open '%s': %s", path, strerror(errno));
    return -1;
  }
  unsigned char magic[4] = {0};
  size_t got = fread(magic, 1, sizeof magic, file);
  fclose(file);
  return got == 4 && memcmp(magic, "\x7f" "ELF", 4) == 0;
}

static void *aligned_buffer(size_t bytes) {
  size_t size = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, size ? size : 64);
}

/* JSON string literal (the names come from user files). */
static void json_string(FILE *out, const char *text) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

static void json_tensors(FILE *out, const htp_sig_tensor *tensors, int count, int role) {
  fputc('[', out);
  int first = 1;
  for (int i = 0; i < count; i++) {
    if (role >= 0 && tensors[i].role != (htp_sig_role)role)
      continue;
    fputs(first ? "{\"name\": " : ", {\"name\": ", out);
    first = 0;
    json_string(out, tensors[i].name);
    fputs(", \"shape\": [", out);
    int64_t dims[HTP_SIG_MAX_RANK]; /* global: what the user's files hold */
    htp_sig_global_dims(&tensors[i], dims);
    for (int d = 0; d < tensors[i].rank; d++)
      fprintf(out, "%s%lld", d ? ", " : "", (long long)dims[d]);
    fputs("]}", out);
  }
  fputc(']', out);
}

/* Finite JSON number (inf and nan are not JSON). */
static void json_number(FILE *out, double value) {
  if (isfinite(value))
    fprintf(out, "%.9g", value);
  else
    fputs("null", out);
}

typedef struct timing {
  double median, min, mean, max, gflops;
} timing;

/* Sorts values in place and returns their median. */
static double median_of(double *values, long count) {
  qsort(values, (size_t)count, sizeof *values, compare_double);
  return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

static timing summarise(const double *times, long count, int64_t flops) {
  double *sorted = malloc((size_t)count * sizeof *sorted);
  timing t = {0, 0, 0, 0, 0};
  if (!sorted)
    return t;
  memcpy(sorted, times, (size_t)count * sizeof *sorted);
  t.median = median_of(sorted, count);
  t.min = sorted[0];
  t.max = sorted[count - 1];
  for (long i = 0; i < count; i++)
    t.mean += times[i] / (double)count;
  t.gflops = t.median > 0 ? (double)flops / (t.median * 1e6) : 0;
  free(sorted);
  return t;
}


/* Everything a run owns, released in one place. */
typedef struct run_state {
  const htp_compiler *loader;
  htp_compiled compiled;
  htp_signature sig;
  const htp_compiler *check_loader;  /* --check: the tp-1 build of the block */
  htp_compiled check_compiled;
  htp_signature check_sig;
  int tp;
  int process_rank;                  /* mpi: this process's rank; local: -1 */
  float **global;                    /* [num_args] arguments at their global shapes */
  void ***buffers;                   /* [tp][num_buffers]; NULL for other processes' ranks */
  int num_buffers;
  htp_ranks *ranks;
  htp_rank_outcome outcome;
  double *times;                     /* [iters] iteration ms */
  double *rank_compute_ms;           /* [tp] median compute ms */
  double *check_errors;              /* [num_results] or NULL */
  int balance;                       /* each rank has an htp_balancer */
} run_state;

static void free_buffers(void **buffers, int count) {
  if (!buffers)
    return;
  for (int i = 0; i < count; i++)
    free(buffers[i]);
  free(buffers);
}

static void release(run_state *state) {
  if (state->buffers)
    for (int r = 0; r < state->tp; r++)
      free_buffers(state->buffers[r], state->num_buffers);
  free(state->buffers);
  if (state->global)
    for (int i = 0; i < state->sig.num_args; i++)
      free(state->global[i]);
  free(state->global);
  free(state->times);
  free(state->rank_compute_ms);
  free(state->check_errors);
  htp_rank_outcome_free(&state->outcome);
  htp_signature_free(&state->sig);
  htp_signature_free(&state->check_sig);
  if (state->loader && state->compiled.handle)
    state->loader->unload(&state->compiled);
  if (state->check_loader && state->check_compiled.handle)
    state->check_loader->unload(&state->check_compiled);
  /* Last: under mpi a failed world ends the process (MPI_Abort). */
  htp_ranks_close(state->ranks);
}

/* An argument at its global shape: the same tensor with the shard undone. */
static htp_sig_tensor global_tensor(const htp_sig_tensor *local) {
  htp_sig_tensor global = *local;
  htp_sig_global_dims(local, global.dims);
  global.count = 1;
  for (int d = 0; d < global.rank; d++)
    global.count *= global.dims[d];
  global.bytes = (size_t)global.count * sizeof(float);
  global.shard_layout = HTP_SHARD_NONE;
  return global;
}

/* Fills state->global: random data, --input files, --weights, all at the
 * global shapes (so errors name the shapes the user's files have). */
static int bind_global_data(const htp_run_options *options, run_state *state, char *err,
                            size_t err_size) {
  const htp_signature *sig = &state->sig;
  htp_signature global_sig = *sig;
  global_sig.args = calloc((size_t)sig->num_args + 1, sizeof *global_sig.args);
  state->global = calloc((size_t)sig->num_args + 1, sizeof *state->global);
  if (!global_sig.args || !state->global) {
    free(global_sig.args);
    return htp_set_error(err, err_size, "out of memory");
  }
  int status = 0;
  for (int i = 0, input = 0; i < sig->num_args && !status; i++) {
    const htp_sig_tensor *arg = &global_sig.args[i];
    global_sig.args[i] = global_tensor(&sig->args[i]);
    if (!(state->global[i] = aligned_buffer(arg->bytes))) {
      status = htp_set_error(err, err_size, "out of memory allocating %zu bytes for argument '%s'",
                             arg->bytes, arg->name);
    } else if (arg->role == HTP_SIG_INPUT && options->num_inputs) {
      status = htp_bind_input(options->inputs[input++], arg, state->global[i], err, err_size);
    } else if (arg->role == HTP_SIG_INPUT || !options->weights) {
      htp_fill_random(arg, i, options->seed, state->global[i]);
    }
  }
  if (!status && options->weights)
    status = htp_bind_weights(options->weights, &global_sig, (void *const *)state->global, err,
                              err_size);
  free(global_sig.args);
  return status;
}

/* Rank r's buffers: its slices of the arguments, its results, its workspace. */
static int make_rank_buffers(run_state *state, int rank, char *err, size_t err_size) {
  const htp_signature *sig = &state->sig;
  void **buffers = calloc((size_t)state->num_buffers, sizeof *buffers);
  if (!buffers)
    return htp_set_error(err, err_size, "out of memory");
  state->buffers[rank] = buffers;
  for (int i = 0; i < state->num_buffers; i++) {
    size_t bytes = i < sig->num_args               ? sig->args[i].bytes
                   : i < state->num_buffers - 1 ? sig->results[i - sig->num_args].bytes
                                                : sig->workspace_bytes;
    if (!(buffers[i] = aligned_buffer(bytes)))
      return htp_set_error(err, err_size, "out of memory allocating %zu bytes for buffer %d of "
                           "rank %d", bytes, i, rank);
    if (i < sig->num_args) {
      const htp_sig_tensor *arg = &sig->args[i];
      if (htp_shard_slice(state->global[i], buffers[i], arg->rank, arg->dims, arg->shard_dim,
                          arg->shard_parts, rank, arg->shard_layout, err, err_size))
        return 1;
    }
  }
  return 0;
}

/* Bytes of one unit's weights as the migration moves them (runtime/balance.c:
 * a head's qkv rows, qkv bias and proj columns; an MLP unit's fc1 rows, fc1
 * bias and fc2 columns). */
static int64_t unit_bytes(const htp_sig_balance *balance, int kind) {
  const int64_t d = balance->model_dim;
  if (kind == HTP_PAIR_ATTENTION)
    return 4 * (4 * balance->head_dim * d + 3 * balance->head_dim);
  return 4 * (2 * balance->mlp_unit_width * d + balance->mlp_unit_width);
}

/* The planner's view of the block. With a balance record, the balancer's
 * config from it (units per rank, relative unit costs from their FLOPs);
 * without, one layer of one unit per kind: detection only. */
static int balance_config(const htp_run_options *options, const run_state *state,
                          htp_rank_job *job, char *err, size_t err_size) {
  const htp_sig_balance *balance = &state->sig.balance;
  const htp_policy policy = options->policy;
  const htp_impute impute = options->impute;
  htp_planner_config planner = HTP_PLANNER_CONFIG_INITIALIZER;
  planner.world_size = state->tp;
  planner.policy = HTP_POLICY_NONE;
  const htp_select selection = options->selection;
  if (!balance->present) {
    if (selection != HTP_SELECT_RANDOM)
      return htp_set_error(err, err_size, "--select %s needs a block split with balance hooks "
                           "(--tp > 1); %s (tp %d) has no 'balance' record, so it has no units "
                           "to select: run it with --tp > 1, or without --select",
                           htp_select_name(options->selection), options->path, state->tp);
    if (policy != HTP_POLICY_NONE)
      return htp_set_error(err, err_size, "--policy %s needs a block split with balance hooks "
                           "(--tp > 1); %s (tp %d) has no 'balance' record, so it has no units "
                           "to resize or migrate: run it with --tp > 1, or with --policy none",
                           htp_policy_name(options->policy), options->path, state->tp);
    job->balance = 0;
    job->planner = planner;
    return 0;
  }
  planner.num_layers = balance->layers;
  planner.units_per_rank[HTP_PAIR_ATTENTION] = balance->heads;
  planner.units_per_rank[HTP_PAIR_MLP] = balance->mlp_units;
  /* Relative: a head costs 1. */
  planner.unit_cost[HTP_PAIR_ATTENTION] = 1.0;
  planner.unit_cost[HTP_PAIR_MLP] = (double)balance->mlp_unit_flops / (double)balance->head_flops;
  planner.policy = policy;
  htp_balancer_config config = HTP_BALANCER_CONFIG_INITIALIZER;
  config.planner = planner;
  config.selection = selection;
  config.seed = options->seed;
  config.impute = impute;
  config.model_dim = balance->model_dim;
  config.head_dim = balance->head_dim;
  config.mlp_unit_width = balance->mlp_unit_width;
  job->balance = 1;
  job->balancer = config;
  job->planner = planner;
  return 0;
}

/* Iteration times (the last rank's finish) and each rank's median compute. */
static int summarise_ranks(const htp_run_options *options, run_state *state) {
  long iters = options->iters;
  state->times = calloc((size_t)iters, sizeof *state->times);
  state->rank_compute_ms = calloc((size_t)state->tp, sizeof *state->rank_compute_ms);
  double *column = calloc((size_t)iters, sizeof *column);
  if (!state->times || !state->rank_compute_ms || !column) {
    free(column);
    return 1;
  }
  for (int r = 0; r < state->tp; r++)
    for (long i = 0; i < iters; i++) {
      double elapsed = state->outcome.elapsed_s[r * iters + i] * 1e3;
      if (elapsed > state->times[i])
        state->times[i] = elapsed;
    }
  for (int r = 0; r < state->tp; r++) {
    for (long i = 0; i < iters; i++)
      column[i] = state->outcome.compute_s[r * iters + i] * 1e3;
    state->rank_compute_ms[r] = median_of(column, iters);
  }
  free(column);
  return 0;
}

/* --check: the tp-1 build of the block on the same global data; the error
 * of rank 0's results against it. */
static int run_check(const htp_run_options *options, const htp_compiler *jit, run_state *state,
                     char *err, size_t err_size) {
  htp_compile_options compile = {1, NULL};
  if (jit->load(options->path, options->entry, &compile, &state->check_compiled, err, err_size))
    return 1;
  state->check_loader = jit;
  char reason[1024];
  const htp_signature *sig = &state->sig, *one = &state->check_sig;
  if (htp_signature_parse(state->check_compiled.signature, &state->check_sig, reason,
                          sizeof reason))
    return htp_set_error(err, err_size, "--check: %s at tp 1: bad entry signature: %s",
                         options->path, reason);
  if (one->tp != 1 || one->num_results != sig->num_results)
    return htp_set_error(err, err_size, "--check: the tp-1 build of %s has tp %d and %d "
                         "results, the tp-%d build %d results", options->path, one->tp,
                         one->num_results, state->tp, sig->num_results);
  int count = one->num_args + one->num_results + 1;
  void **buffers = calloc((size_t)count, sizeof *buffers);
  if (!buffers)
    return htp_set_error(err, err_size, "out of memory");
  int status = 0;
  for (int i = 0; i < count && !status; i++) {
    size_t bytes = i < one->num_args ? one->args[i].bytes
                   : i < count - 1  ? one->results[i - one->num_args].bytes
                                    : one->workspace_bytes;
    if (!(buffers[i] = aligned_buffer(bytes))) {
      status = htp_set_error(err, err_size, "out of memory");
      break;
    }
    if (i >= one->num_args)
      continue;
    /* The same tensor of the split block, by name and global shape. */
    const htp_sig_tensor *arg = &one->args[i];
    int found = -1;
    for (int j = 0; j < sig->num_args && found < 0; j++) {
      htp_sig_tensor global = global_tensor(&sig->args[j]);
      if (strcmp(global.name, arg->name) == 0 && global.count == arg->count)
        found = j;
    }
    if (found < 0)
      status = htp_set_error(err, err_size, "--check: argument '%s' of the tp-1 build has no "
                             "counterpart of the same size in the tp-%d build", arg->name,
                             state->tp);
    else
      memcpy(buffers[i], state->global[found], arg->bytes);
  }
  if (!status) {
    int32_t code = state->check_compiled.fn(NULL, buffers);
    if (code != 0)
      status = htp_set_error(err, err_size, "--check: the tp-1 block returned %d (%s)", (int)code,
                             htp_strerror((htp_result)code));
  }
  if (!status && !(state->check_errors = calloc((size_t)sig->num_results, sizeof(double))))
    status = htp_set_error(err, err_size, "out of memory");
  for (int r = 0; r < sig->num_results && !status; r++) {
    const float *reference = buffers[one->num_args + r];
    const float *split = state->buffers[0][sig->num_args + r];
    if (one->results[r].count != sig->results[r].count) {
      status = htp_set_error(err, err_size, "--check: result %d has %lld values at tp 1 and "
                             "%lld at tp %d", r, (long long)one->results[r].count,
                             (long long)sig->results[r].count, state->tp);
      break;
    }
    double largest = 0, difference = 0;
    for (int64_t k = 0; k < sig->results[r].count; k++) {
      double a = fabs((double)reference[k]), d = fabs((double)split[k] - (double)reference[k]);
      if (!(a <= largest))
        largest = a;
      if (!(d <= difference))
        difference = d; /* NaN propagates */
    }
    state->check_errors[r] = largest > 0 ? difference / largest : difference;
  }
  free_buffers(buffers, count);
  return status;
}

/* Units (all ranks and layers) that the plan of the last timed iteration
 * pruned: when there are some, the output is approximate by design. */
static int64_t pruned_units(const run_state *state) {
  if (!state->balance)
    return 0;
  int64_t units = 0;
  for (int k = 0; k < HTP_PAIR_KINDS * state->tp; k++)
    units += state->outcome.last_plan.pruned[k];
  return units * state->sig.balance.layers;
}

/* --check fails above tolerance unless the last iteration pruned units. */
static int check_failed(const run_state *state, int result) {
  return !(state->check_errors[result] <= CHECK_TOLERANCE) && pruned_units(state) == 0;
}

/* "r1 migrate gamma=0.50, r0 help" for timed iteration i ("-" when every
 * rank keeps its units). */
static void format_actions(char *out, size_t size, const run_state *state, long i) {
  size_t used = 0;
  out[0] = '\0';
  for (int r = 0; r < state->tp && used < size; r++) {
    htp_action action = (htp_action)state->outcome.plan_action[(size_t)i * state->tp + r];
    if (action == HTP_ACTION_KEEP)
      continue;
    double gamma = state->outcome.plan_gamma[(size_t)i * state->tp + r];
    used += (size_t)snprintf(out + used, size - used, "%sr%d %s", used ? ", " : "", r,
                             htp_action_name(action));
    if (gamma > 0 && used < size)
      used += (size_t)snprintf(out + used, size - used, " gamma=%.2f", gamma);
  }
  if (!out[0])
    snprintf(out, size, "-");
}

/* Weights the plans placed on helpers over the run (see ranks.h). */
static int64_t handoff_bytes(const run_state *state) {
  return state->outcome.handoff_units[HTP_PAIR_ATTENTION] *
             unit_bytes(&state->sig.balance, HTP_PAIR_ATTENTION) +
         state->outcome.handoff_units[HTP_PAIR_MLP] * unit_bytes(&state->sig.balance, HTP_PAIR_MLP);
}

static void json_pair(FILE *out, const char *name, const int32_t *counts, int world, int rank) {
  fprintf(out, ", \"%s\": [%d, %d]", name, (int)counts[HTP_PAIR_ATTENTION * world + rank],
          (int)counts[HTP_PAIR_MLP * world + rank]);
}

/* "balance" (the units) and "plan" (the last iteration's plan, the plan
 * changes, the weights handed off) of the JSON report. */
static void report_json_plan(FILE *out, const htp_run_options *options, const run_state *state) {
  const htp_sig_balance *balance = &state->sig.balance;
  if (!state->balance) {
    fputs(", \"balance\": null, \"plan\": null", out);
    return;
  }
  fprintf(out, ", \"balance\": {\"layers\": %d, \"model_dim\": %lld, \"heads_per_rank\": %d, "
          "\"head_dim\": %lld, \"mlp_units_per_rank\": %d, \"mlp_unit_width\": %lld, "
          "\"head_bytes\": %lld, \"mlp_unit_bytes\": %lld, \"impute\": \"%s\", "
          "\"select\": \"%s\"}",
          balance->layers, (long long)balance->model_dim, balance->heads,
          (long long)balance->head_dim, balance->mlp_units, (long long)balance->mlp_unit_width,
          (long long)unit_bytes(balance, HTP_PAIR_ATTENTION),
          (long long)unit_bytes(balance, HTP_PAIR_MLP), htp_impute_name(options->impute), htp_select_name(options->selection));
  const htp_plan_record *plan = &state->outcome.last_plan;
  fprintf(out, ", \"plan\": {\"version\": %lld, \"ranks\": [", (long long)plan->version);
  for (int r = 0; r < state->tp; r++) {
    fprintf(out, "%s{\"rank\": %d, \"action\": \"%s\", \"gamma\": ", r ? ", " : "", r,
            htp_action_name((htp_action)plan->action[r]));
    json_number(out, plan->gamma[r]);
    json_pair(out, "pruned", plan->pruned, state->tp, r);
    json_pair(out, "sent", plan->sent, state->tp, r);
    json_pair(out, "received", plan->received, state->tp, r);
    fputc('}', out);
  }
  fprintf(out, "], \"pruned_units\": %lld, \"changes\": %ld, \"handoff_units\": [%lld, %lld], "
          "\"handoff_bytes\": %lld, \"versions\": [",
          (long long)pruned_units(state), state->outcome.plan_changes,
          (long long)state->outcome.handoff_units[HTP_PAIR_ATTENTION],
          (long long)state->outcome.handoff_units[HTP_PAIR_MLP], (long long)handoff_bytes(state));
  for (long i = 0; i < options->iters; i++)
    fprintf(out, "%s%lld", i ? ", " : "", (long long)state->outcome.plan_version[i]);
  fputs("]}", out);
}

static void report_json(const htp_run_options *options, const run_state *state, timing t) {
  const htp_signature *sig = &state->sig;
  FILE *out = stdout;
  fputs("{\"entry\": ", out);
  json_string(out, sig->entry);
  fputs(", \"file\": ", out);
  json_string(out, options->path);
  fprintf(out, ", \"iters\": %ld, \"warmup\": %ld, \"seed\": %llu, \"tp\": %d, ", options->iters,
          options->warmup, (unsigned long long)options->seed, state->tp);
  fprintf(out, "\"backend\": \"%s\", \"device\": \"%s\", \"policy\": \"%s\", \"flops\": %lld, "
          "\"block_flops\": %lld",
          options->backend, options->device, htp_policy_name(options->policy), (long long)sig->flops,
          (long long)sig->flops * state->tp);
  fputs(", \"median_ms\": ", out);
  json_number(out, t.median);
  fputs(", \"min_ms\": ", out);
  json_number(out, t.min);
  fputs(", \"mean_ms\": ", out);
  json_number(out, t.mean);
  fputs(", \"max_ms\": ", out);
  json_number(out, t.max);
  fputs(", \"gflops\": ", out);
  json_number(out, t.gflops);
  fputs(", \"times_ms\": [", out);
  for (long i = 0; i < options->iters; i++) {
    if (i)
      fputs(", ", out);
    json_number(out, state->times[i]);
  }
  fputs("], \"rank_compute_ms\": [", out);
  for (int r = 0; r < state->tp; r++) {
    if (r)
      fputs(", ", out);
    json_number(out, state->rank_compute_ms[r]);
  }
  fputs("], \"stragglers\": [", out);
  for (int r = 0, first = 1; r < state->tp; r++) {
    if (state->outcome.straggler_from[r] < 0)
      continue;
    fprintf(out, "%s{\"rank\": %d, \"speed\": ", first ? "" : ", ", r);
    json_number(out, state->outcome.straggler_speed[r]);
    fprintf(out, ", \"from_iteration\": %ld, \"until_iteration\": %ld}",
            state->outcome.straggler_from[r], state->outcome.straggler_until[r]);
    first = 0;
  }
  fputs("], \"check\": ", out);
  if (state->check_errors) {
    fprintf(out, "{\"tolerance\": %g, \"results\": [", CHECK_TOLERANCE);
    int pass = 1, within = 1;
    for (int r = 0; r < sig->num_results; r++) {
      fputs(r ? ", {\"name\": " : "{\"name\": ", out);
      json_string(out, sig->results[r].name);
      fputs(", \"error\": ", out);
      json_number(out, state->check_errors[r]);
      fputc('}', out);
      within &= state->check_errors[r] <= CHECK_TOLERANCE;
      pass &= !check_failed(state, r);
    }
    fprintf(out, "], \"within_tolerance\": %s, \"approximate\": %s, \"pass\": %s}",
            within ? "true" : "false", pruned_units(state) ? "true" : "false",
            pass ? "true" : "false");
  } else {
    fputs("null", out);
  }
  report_json_plan(out, options, state);
  fputs(", \"inputs\": ", out);
  json_tensors(out, sig->args, sig->num_args, HTP_SIG_INPUT);
  fputs(", \"params\": ", out);
  json_tensors(out, sig->args, sig->num_args, HTP_SIG_PARAM);
  fputs(", \"outputs\": ", out);
  json_tensors(out, sig->results, sig->num_results, -1);
  fprintf(out, ", \"workspace_bytes\": %zu}\n", sig->workspace_bytes);
}

/* The table's plan lines: the last iteration's plan, per rank, and what
 * the plans handed off over the run. */
static void report_table_plan(const htp_run_options *options, const run_state *state) {
  const htp_plan_record *plan = &state->outcome.last_plan;
  const htp_sig_balance *balance = &state->sig.balance;
  const int world = state->tp;
  printf("units per rank: %d layers x (%d heads of %lld + %d MLP units of %lld neurons); policy "
         "%s, impute %s, select %s\n", balance->layers, balance->heads,
         (long long)balance->head_dim, balance->mlp_units, (long long)balance->mlp_unit_width,
         htp_policy_name(options->policy), htp_impute_name(options->impute), htp_select_name(options->selection));
  printf("plan of the last iteration: version %lld", (long long)plan->version);
  int any = 0;
  for (int r = 0; r < world; r++) {
    htp_action action = (htp_action)plan->action[r];
    if (action == HTP_ACTION_KEEP)
      continue;
    const int32_t *counts = action == HTP_ACTION_RESIZE    ? plan->pruned
                            : action == HTP_ACTION_MIGRATE ? plan->sent
                                                           : plan->received;
    const char *verb = action == HTP_ACTION_RESIZE    ? "prunes"
                       : action == HTP_ACTION_MIGRATE ? "sends"
                                                      : "receives";
    printf("%s rank %d %s", any ? "," : ":", r, htp_action_name(action));
    if (plan->gamma[r] > 0)
      printf(" (gamma %.2f)", plan->gamma[r]);
    printf(" %s %d heads + %d MLP units per layer", verb,
           (int)counts[HTP_PAIR_ATTENTION * world + r], (int)counts[HTP_PAIR_MLP * world + r]);
    /* A semi straggler may do both. */
    if (action == HTP_ACTION_MIGRATE &&
        plan->pruned[HTP_PAIR_ATTENTION * world + r] + plan->pruned[HTP_PAIR_MLP * world + r])
      printf(" and prunes %d + %d", (int)plan->pruned[HTP_PAIR_ATTENTION * world + r],
             (int)plan->pruned[HTP_PAIR_MLP * world + r]);
    any = 1;
  }
  printf(any ? "\n" : ": every rank keeps its units\n");
  printf("plan changes: %ld; units handed to helpers by them: %lld heads + %lld MLP units, %.3f MB "
         "of weights (at most what migrated: helpers keep what they already hold)\n",
         state->outcome.plan_changes,
         (long long)state->outcome.handoff_units[HTP_PAIR_ATTENTION],
         (long long)state->outcome.handoff_units[HTP_PAIR_MLP], (double)handoff_bytes(state) / 1e6);
}

static void report_table(const htp_run_options *options, const run_state *state, timing t) {
  const htp_signature *sig = &state->sig;
  char shape[128];
  size_t param_bytes = 0;
  int params = 0;
  int64_t block_flops = sig->flops * state->tp;
  printf("%s (%s)\n", sig->entry, options->path);
  for (int i = 0; i < sig->num_args; i++) {
    htp_sig_tensor global = global_tensor(&sig->args[i]);
    if (global.role == HTP_SIG_PARAM) {
      params++;
      param_bytes += global.bytes;
      continue;
    }
    htp_format_shape(shape, sizeof shape, global.rank, global.dims);
    printf("  input  %s %s\n", global.name, shape);
  }
  printf("  params %d tensors, %.3f MB (whole block)\n", params, (double)param_bytes / 1e6);
  for (int i = 0; i < sig->num_results; i++) {
    htp_format_shape(shape, sizeof shape, sig->results[i].rank, sig->results[i].dims);
    printf("  output %s %s\n", sig->results[i].name, shape);
  }
  printf("  tp %d, backend %s, device %s, policy %s; %ld warm-up + %ld timed iterations, "
         "%.4g GFLOP per block (%.4g per rank)\n",
         state->tp, options->backend, options->device, htp_policy_name(options->policy), options->warmup,
         options->iters, (double)block_flops / 1e9, (double)sig->flops / 1e9);
  if (state->balance)
    printf("  %6s %12s %10s %5s  %s\n", "iter", "ms", "GFLOP/s", "plan", "actions");
  else
    printf("  %6s %12s %10s\n", "iter", "ms", "GFLOP/s");
  for (long i = 0; i < options->iters && i < TABLE_ROWS; i++) {
    printf("  %6ld %12.4f %10.2f", options->warmup + i, state->times[i],
           state->times[i] > 0 ? (double)block_flops / (state->times[i] * 1e6) : 0.0);
    if (state->balance) {
      char actions[512];
      format_actions(actions, sizeof actions, state, i);
      printf(" %5lld  %s", (long long)state->outcome.plan_version[i], actions);
    }
    putchar('\n');
  }
  if (options->iters > TABLE_ROWS)
    printf("  ... %ld more iterations\n", options->iters - TABLE_ROWS);
  if (state->tp > 1) {
    printf("  rank compute, median ms:");
    for (int r = 0; r < state->tp; r++)
      printf(" %d: %.4f%s", r, state->rank_compute_ms[r], r + 1 < state->tp ? "," : "\n");
  }
  int any = 0;
  for (int r = 0; r < state->tp; r++) {
    if (state->outcome.straggler_from[r] < 0)
      continue;
    printf("%s rank %d (relative speed %.2f) from iteration %ld", any ? "," : "stragglers detected:",
           r, state->outcome.straggler_speed[r], state->outcome.straggler_from[r]);
    if (state->outcome.straggler_until[r] < options->warmup + options->iters - 1)
      printf(" until iteration %ld", state->outcome.straggler_until[r]);
    any = 1;
  }
  printf(any ? "\n" : "stragglers detected: none\n");
  if (state->balance)
    report_table_plan(options, state);
  char pruned_note[96];
  snprintf(pruned_note, sizeof pruned_note, "%s pruned units", htp_policy_name(options->policy));
  if (state->check_errors)
    for (int r = 0; r < sig->num_results; r++)
      printf("check %s: max |y_tp%d - y_tp1| / max |y_tp1| = %.3e (tolerance %g): %s%s\n",
             sig->results[r].name, state->tp, state->check_errors[r], CHECK_TOLERANCE,
             pruned_units(state)                               ? "approximate: policy "
             : state->check_errors[r] <= CHECK_TOLERANCE ? "ok"
                                                              : "FAILED",
             pruned_units(state) ? pruned_note : "");
  printf("median %.4f ms, min %.4f ms, mean %.4f ms, max %.4f ms, %.2f GFLOP/s at the median\n",
         t.median, t.min, t.mean, t.max, t.gflops);
}

/* Warns about NaN or inf in a result: a wrong block, or bad weights. */
static void check_finite(const htp_sig_tensor *result, const float *data) {
  int64_t bad = 0;
  for (int64_t i = 0; i < result->count; i++)
    bad += !isfinite(data[i]);
  if (bad)
    fprintf(stderr, "htp-run: warning: result '%s' holds %lld non-finite values\n", result->name,
            (long long)bad);
}

/* Resolves the tp: .mlir is compiled for the requested one; a .so's
 * signature decides and a --tp that differs is an error. */
static int check_tp(const htp_run_options *options, int shared, long requested, run_state *state,
                    char *err, size_t err_size) {
  const htp_signature *sig = &state->sig;
  if (!shared && sig->tp != requested)
    return htp_set_error(err, err_size, "%s: compiled for tp %ld, the block says tp %d (the "
                         "compiler did not split it as asked)", options->path, requested, sig->tp);
  if (shared && options->tp_given && sig->tp != options->tp)
    return htp_set_error(err, err_size, "--tp %ld disagrees with %s, which was compiled for tp "
                         "%d (htp-compile --tp %d); leave --tp out or recompile",
                         options->tp, options->path, sig->tp, sig->tp);
  if (state->ranks && htp_ranks_size(state->ranks) != sig->tp)
    return htp_set_error(err, err_size, "%s is for tp %d but mpirun started %d processes "
                         "(mpirun -np %d)", options->path, sig->tp,
                         htp_ranks_size(state->ranks), sig->tp);
  state->tp = sig->tp;
  for (int i = 0; i < options->num_slows; i++)
    if (options->slows[i].rank >= state->tp)
      return htp_set_error(err, err_size, "--slow %s: rank %d is not in [0, %d) (tp %d)",
                           options->slow, options->slows[i].rank, state->tp, state->tp);
  for (int i = 0; i < options->num_faults; i++)
    if (options->faults[i].rank >= state->tp)
      return htp_set_error(err, err_size, "--fault: rank %d is not in [0, %d) (tp %d)",
                           options->faults[i].rank, state->tp, state->tp);
  return 0;
}

static int run(const htp_run_options *options, const htp_compiler *jit, run_state *state) {
  char err[16384];
  const int mpi = strcmp(options->backend, "mpi") == 0;
  state->process_rank = -1;
  int shared = is_shared_object(options->path, err, sizeof err);
  if (shared < 0)
    return fail(err);
  if (!shared && !jit) {
    htp_set_error(err, sizeof err,
                  "%s: this htp-run was built without MLIR, so it cannot compile .mlir files; "
                  "compile with htp-compile elsewhere and run the .so",
                  options->path);
    return fail(err);
  }
  if (shared && options->check) {
    htp_set_error(err, sizeof err, "--check needs the JIT (it compiles the block again at tp 1); "
                  "%s is a shared object: run --check on the .mlir", options->path);
    return fail(err);
  }
  long requested = options->tp;
  if (mpi) {
    /* The world first: its size is the tp, and only rank 0 reports. */
    if (htp_ranks_open(&state->ranks, HTP_BACKEND_MPI, 0, options->timeout_s, err, sizeof err))
      return fail(err);
    state->process_rank = htp_ranks_process_rank(state->ranks);
    errors_muted = state->process_rank != 0;
    int size = htp_ranks_size(state->ranks);
    if (options->tp_given && options->tp != size) {
      htp_set_error(err, sizeof err, "--tp %ld but mpirun started %d processes: they must be "
                    "equal (mpirun -np %ld)", options->tp, size, options->tp);
      return fail(err);
    }
    requested = size;
  }
  state->loader = shared ? htp_so_loader() : jit;
  htp_compile_options compile = {(int)requested, NULL};
  if (state->loader->load(options->path, options->entry, &compile, &state->compiled, err,
                          sizeof err)) {
    state->loader = NULL;
    return fail(err);
  }

  char reason[1024];
  if (htp_signature_parse(state->compiled.signature, &state->sig, reason, sizeof reason)) {
    htp_set_error(err, sizeof err, "%s: bad entry signature: %s", options->path, reason);
    return fail(err);
  }
  const htp_signature *sig = &state->sig;
  if (check_tp(options, shared, requested, state, err, sizeof err))
    return fail(err);
  htp_rank_job job;
  memset(&job, 0, sizeof job);
  if (balance_config(options, state, &job, err, sizeof err))
    return fail(err);
  state->balance = job.balance;

  int num_inputs = 0;
  for (int i = 0; i < sig->num_args; i++)
    num_inputs += sig->args[i].role == HTP_SIG_INPUT;
  if (options->num_inputs && options->num_inputs != num_inputs) {
    htp_set_error(err, sizeof err, "%s takes %d data input%s but --input was given %d time%s",
                  sig->entry, num_inputs, num_inputs == 1 ? "" : "s", options->num_inputs,
                  options->num_inputs == 1 ? "" : "s");
    return fail(err);
  }
  if (options->num_outputs > sig->num_results) {
    htp_set_error(err, sizeof err, "%s returns %d result%s but --output was given %d times",
                  sig->entry, sig->num_results, sig->num_results == 1 ? "" : "s",
                  options->num_outputs);
    return fail(err);
  }

  if (bind_global_data(options, state, err, sizeof err))
    return fail(err);
  /* buffers[r][]: arguments, results, workspace (entry.h). */
  state->num_buffers = sig->num_args + sig->num_results + 1;
  state->buffers = calloc((size_t)state->tp, sizeof *state->buffers);
  if (!state->buffers)
    return fail("out of memory");
  for (int r = 0; r < state->tp; r++)
    if ((!mpi || r == state->process_rank) && make_rank_buffers(state, r, err, sizeof err))
      return fail(err);

  if (!mpi && htp_ranks_open(&state->ranks, HTP_BACKEND_LOCAL, state->tp, options->timeout_s,
                             err, sizeof err))
    return fail(err);
  if (htp_ranks_add_faults(state->ranks, options->faults, options->num_faults, err, sizeof err))
    return fail(err);

  job.fn = state->compiled.fn;
  job.buffers = (void *const *const *)state->buffers;
  job.warmup = options->warmup;
  job.iters = options->iters;
  job.slows = options->slows;
  job.num_slows = options->num_slows;
  job.faults = options->faults;
  job.num_faults = options->num_faults;
  job.trace_path = options->trace;
  errors_muted = 0; /* from here on, each process reports its own rank */
  int failed = htp_ranks_run(state->ranks, &job, &state->outcome, err, sizeof err);
  if (mpi && state->process_rank != 0)
    errors_muted = 1; /* after the run only rank 0 works */
  if (failed) {
    errors_muted = 0;
    if (!state->outcome.failed)
      return fail(err);
    fail(state->outcome.message);
    /* The other ranks' failures, which followed from it. */
    for (char *line = state->outcome.notes, *end; *line; line = end + 1) {
      if (!(end = strchr(line, '\n')))
        break;
      fprintf(stderr, "htp-run: note: then %.*s\n", (int)(end - line), line);
    }
    return EXIT_ERROR;
  }
  if (mpi && state->process_rank != 0)
    return 0; /* rank 0 reports and writes the outputs */

  void **results = state->buffers[0] + sig->num_args;
  for (int r = 0; r < sig->num_results; r++)
    check_finite(&sig->results[r], results[r]);
  for (int rank = 1; rank < state->tp && !mpi; rank++)
    for (int r = 0; r < sig->num_results; r++)
      if (memcmp(results[r], state->buffers[rank][sig->num_args + r], sig->results[r].bytes))
        fprintf(stderr, "htp-run: warning: result '%s' of rank %d differs from rank 0's\n",
                sig->results[r].name, rank);
  for (int r = 0; r < options->num_outputs; r++) {
    const htp_sig_tensor *result = &sig->results[r];
    if (htp_npy_write(options->outputs[r], result->rank, result->dims, results[r], reason,
                      sizeof reason)) {
      htp_set_error(err, sizeof err, "%s: %s", options->outputs[r], reason);
      return fail(err);
    }
  }
  if (options->check && run_check(options, jit, state, err, sizeof err))
    return fail(err);

  if (summarise_ranks(options, state))
    return fail("out of memory");
  timing t = summarise(state->times, options->iters, sig->flops * state->tp);
  if (options->report == HTP_REPORT_JSON)
    report_json(options, state, t);
  else
    report_table(options, state, t);
  if (fflush(stdout) != 0)
    return fail("cannot write the report to stdout");
  if (state->check_errors)
    for (int r = 0; r < sig->num_results; r++)
      if (check_failed(state, r)) {
        htp_set_error(err, sizeof err, "--check: result '%s' differs from the unsplit block by "
                      "%.3e (relative), above the tolerance %g", sig->results[r].name,
                      state->check_errors[r], CHECK_TOLERANCE);
        return fail(err);
      }
  return 0;
}

int htp_run_main(int argc, char **argv, const htp_compiler *jit) {
  htp_run_options options;
  char err[1024];
  if (htp_run_parse_options(argc, argv, &options, err, sizeof err)) {
    fprintf(stderr, "htp-run: error: %s (see htp-run --help)\n", err);
    return EXIT_USAGE;
  }
  if (options.help) {
    htp_run_print_help(stdout);
    return 0;
  }
  if (htp_run_check_implemented(&options, err, sizeof err))
    return fail(err);
  run_state state;
  memset(&state, 0, sizeof state);
  int status = run(&options, jit, &state);
  release(&state);
  return status;
}
