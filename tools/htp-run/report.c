/*===- tools/htp-run/report.c - htp-run's table and JSON report -----------===*
 *
 * This file implements the report half of executor.h: the per-iteration
 * table (--report table) and one JSON object (--report json, built with
 * jansson; bench scripts and lit tests read its keys). Shapes shown are the
 * global ones: what the user's files hold.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/executor.h"

#include "tools/htp-run/errors.h"
#include "tools/htp-run/shape.h"

#include "kernels/htp_kernel_table.h"
#include "kernels/htp_kernels.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { TABLE_ROWS = 20 };

typedef struct timing {
  double median, min, mean, max, gflops;
} timing;

static timing summarise(const double *times, long count, int64_t flops) {
  double *sorted = malloc((size_t)count * sizeof *sorted);
  timing t = {0, 0, 0, 0, 0};
  if (!sorted)
    return t;
  memcpy(sorted, times, (size_t)count * sizeof *sorted);
  t.median = htp_median(sorted, count);
  t.min = sorted[0];
  t.max = sorted[count - 1];
  for (long i = 0; i < count; i++)
    t.mean += times[i] / (double)count;
  t.gflops = t.median > 0 ? (double)flops / (t.median * 1e6) : 0;
  free(sorted);
  return t;
}

int htp_summarise_ranks(const htp_run_options *options, htp_run_state *state) {
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
    state->rank_compute_ms[r] = htp_median(column, iters);
  }
  free(column);
  return 0;
}

/* Weights the plans placed on helpers over the run (see ranks.h), at the
 * runtime's bytes per unit. */
static int64_t handoff_bytes(const htp_run_state *state) {
  if (!state->balance)
    return 0;
  return state->outcome.handoff_units[HTP_PAIR_ATTENTION] *
             htp_balancer_unit_bytes(&state->balancer, HTP_PAIR_ATTENTION) +
         state->outcome.handoff_units[HTP_PAIR_MLP] *
             htp_balancer_unit_bytes(&state->balancer, HTP_PAIR_MLP);
}

/* ===== Table ============================================================= */

/* "r1 migrate gamma=0.50, r0 help" for timed iteration i ("-" when every
 * rank keeps its units). */
static void format_actions(char *out, size_t size, const htp_run_state *state, long i) {
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

/* The table's plan lines: the last iteration's plan, per rank, and what
 * the plans handed off over the run. */
static void report_table_plan(const htp_run_options *options, const htp_run_state *state) {
  const htp_plan_record *plan = &state->outcome.last_plan;
  const htp_sig_balance *balance = &state->sig.balance;
  const int world = state->tp;
  char age[48] = "";
  if (options->impute == HTP_IMPUTE_SAME && options->same_max_age > 0)
    snprintf(age, sizeof age, " (max age %ld)", options->same_max_age);
  if (balance->heads_owned) {
    /* Uneven shares or spare room: what each rank owns, of the room every
     * rank has. */
    printf("units per rank (owned of the room): %d layers x (heads", balance->layers);
    for (int r = 0; r < world; r++)
      printf("%s%d", r ? "," : " ", (int)balance->heads_owned[r]);
    printf(" of %lld channels + MLP units", (long long)balance->head_dim);
    for (int r = 0; r < world; r++)
      printf("%s%d", r ? "," : " ", (int)balance->mlp_units_owned[r]);
    printf(" of %lld neurons; room for %d and %d)", (long long)balance->mlp_unit_width,
           balance->heads, balance->mlp_units);
  } else {
    printf("units per rank: %d layers x (%d heads of %lld + %d MLP units of %lld neurons)",
           balance->layers, balance->heads, (long long)balance->head_dim, balance->mlp_units,
           (long long)balance->mlp_unit_width);
  }
  printf("; policy %s, impute %s%s, select %s\n", htp_policy_name(options->policy),
         htp_impute_name(options->impute), age, htp_select_name(options->selection));
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

/* The block's inputs, parameters and outputs at their global shapes. */
static void report_table_block(const htp_run_options *options, const htp_signature *sig) {
  char shape[128];
  size_t param_bytes = 0;
  int params = 0;
  printf("%s (%s)\n", sig->entry, options->path);
  for (int i = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *arg = &sig->args[i];
    if (arg->role == HTP_SIG_PARAM) {
      params++;
      param_bytes += arg->global_bytes;
      continue;
    }
    htp_format_shape(shape, sizeof shape, arg->rank, arg->global_dims);
    printf("  input  %s %s\n", arg->name, shape);
  }
  printf("  params %d tensors, %.3f MB (whole block)\n", params, (double)param_bytes / 1e6);
  for (int i = 0; i < sig->num_results; i++) {
    htp_format_shape(shape, sizeof shape, sig->results[i].rank, sig->results[i].dims);
    printf("  output %s %s\n", sig->results[i].name, shape);
  }
  if (sig->results[0].dtype == HTP_SIG_BF16) /* a signature has at least one result */
    printf("  dtype bf16: tensors stored as bf16, arithmetic in f32 (the CPU kernels convert "
           "per call), --output widened to f32\n");
}

/* The most device memory any rank's kernels, or balancer, held of their own. */
static uint64_t most_held(const htp_run_state *state, const uint64_t *held) {
  uint64_t most = 0;
  for (int r = 0; r < state->tp; r++)
    if (held[r] > most)
      most = held[r];
  return most;
}

/* One line of the table's header: the device memory the kernels or the
 * balancer held of their own beside its bound (-1: none, `key` absent). */
static void print_own(const char *whose, uint64_t held, int64_t bound, const char *key) {
  printf("  %s own device memory per rank: %.4g MB held", whose, (double)held / 1e6);
  if (bound >= 0)
    printf(", bound %.4g MB (counted before the run)\n", (double)bound / 1e6);
  else
    printf(", no bound (a block compiled before %s: not counted)\n", key);
}

/* Whether the run's kernels have device memory of their own (not the CPU's). */
static int device_kernels(const htp_run_options *options) {
  return strcmp(options->device, "cpu") != 0;
}

/* --profile: each call's median per rank, in the block's order. */
enum { PROFILE_COLUMNS = 8 }; /* ranks shown one by one; more: rank 0 and the slowest */
static void print_ms(double seconds) {
  if (isnan(seconds)) printf(" %11s", "-"); /* no such call (or another process's rank) */
  else printf(" %11.4f", 1e3 * seconds);
}
void htp_report_profile(const htp_rank_outcome *o, int tp, long iterations, const char *what) {
  const int each = tp <= PROFILE_COLUMNS;
  printf("profile: each call's median ms over %ld %s, in order (each call waited for before "
         "the next: those ran so)%s\n",
         iterations, what, o->profile_broken ? "; a rank's marks failed: its profile is partial"
                                             : "");
  int width = 34; /* the call column: the longest name, at least this */
  for (int k = 0; k < o->profile_calls; k++)
    if (o->profile_names[k] && (int)strlen(o->profile_names[k]) > width)
      width = (int)strlen(o->profile_names[k]);
  printf("  %4s  %-*s", "#", width, "call");
  if (each)
    for (int r = 0; r < tp; r++) printf(" %9s%-2d", "rank ", r);
  else
    printf(" %11s %11s", "rank 0", "slowest");
  putchar('\n');
  double *sums = calloc((size_t)tp, sizeof *sums);
  for (int k = 0; k < o->profile_calls; k++) {
    const double *row = o->profile_s + (size_t)k * (size_t)tp;
    printf("  %4d  %-*s", k, width, o->profile_names[k] ? o->profile_names[k] : "?");
    double slowest = NAN;
    for (int r = 0; r < tp; r++) {
      if (sums && !isnan(row[r])) sums[r] += row[r];
      if (!isnan(row[r]) && !(row[r] <= slowest)) slowest = row[r];
      if (each) print_ms(row[r]);
    }
    if (!each) print_ms(row[0]), print_ms(slowest);
    putchar('\n');
  }
  if (sums) {
    printf("  %4s  %-*s", "", width, "all calls");
    double slowest = 0.0;
    for (int r = 0; r < tp; r++) {
      slowest = sums[r] > slowest ? sums[r] : slowest;
      if (each) printf(" %11.4f", 1e3 * sums[r]);
    }
    if (!each) printf(" %11.4f %11.4f", 1e3 * sums[0], 1e3 * slowest);
    putchar('\n');
  }
  free(sums);
}

/* The block's work: every rank's call, less the slots an uneven split
 * (spare room, shares) leaves empty (they hold zeros: room, not the
 * model's work), so that GFLOP/s figures compare across splits. */
static int64_t block_flops(const htp_signature *sig, int tp) {
  int64_t flops = sig->flops * tp;
  const htp_sig_balance *b = &sig->balance;
  if (!b->present || !b->heads_owned || !b->mlp_units_owned) return flops;
  for (int r = 0; r < tp; r++)
    flops -= (int64_t)b->layers * ((int64_t)(b->heads - b->heads_owned[r]) * b->head_flops +
                                   (int64_t)(b->mlp_units - b->mlp_units_owned[r]) *
                                       b->mlp_unit_flops);
  return flops;
}

static void report_table(const htp_run_options *options, const htp_run_state *state, timing t) {
  const htp_signature *sig = &state->sig;
  const int64_t work = block_flops(sig, state->tp);
  report_table_block(options, sig);
  printf("  tp %d, backend %s, device %s, policy %s; %ld warm-up + %ld timed iterations, "
         "%.4g GFLOP per block (%.4g per rank%s)\n",
         state->tp, options->backend, options->device, htp_policy_name(options->policy),
         options->warmup, options->iters, (double)work / 1e9, (double)sig->flops / 1e9,
         work != sig->flops * state->tp ? " with its empty slots" : "");
  printf("  BLAS threads per rank: %d (%s)\n", state->blas_threads,
         state->blas_threads_from ? state->blas_threads_from : "its share of the cores");
  if (strcmp(options->device, "cuda") != 0)
    printf("  CPU GEMMs: %s\n", htp_cpu_gemm_provider());
  if (options->matmul_precision != HTP_MATMUL_F32)
    printf("  products with a weight: %s operands, f32 sums (--matmul-precision)\n",
           htp_run_matmul_precision_name(options->matmul_precision));
  if (device_kernels(options)) {
    print_own("kernels'", most_held(state, state->outcome.kernel_memory),
              sig->kernel_memory_bytes, "kernel_memory_bytes");
    if (state->balance)
      print_own("balancer's", most_held(state, state->outcome.balancer_memory),
                sig->balancer_memory_bytes, "balancer_memory_bytes");
  }
  if (state->balance)
    printf("  %6s %12s %10s %5s  %s\n", "iter", "ms", "GFLOP/s", "plan", "actions");
  else
    printf("  %6s %12s %10s\n", "iter", "ms", "GFLOP/s");
  for (long i = 0; i < options->iters && i < TABLE_ROWS; i++) {
    printf("  %6ld %12.4f %10.2f", options->warmup + i, state->times[i],
           state->times[i] > 0 ? (double)work / (state->times[i] * 1e6) : 0.0);
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
  if (options->profile)
    htp_report_profile(&state->outcome, state->tp, options->iters, "timed iterations of the block");
  if (state->check_errors) {
    int approximate = htp_pruned_units(state) != 0;
    for (int r = 0; r < sig->num_results; r++)
      printf("check %s: max |y_tp%d - y_tp1| / max |y_tp1| = %.3e (tolerance %g%s): %s%s%s\n",
             sig->results[r].name, state->tp, state->check_errors[r], htp_check_tolerance(state),
             sig->results[r].dtype == HTP_SIG_BF16 ? ", bf16" : "",
             approximate                                          ? "approximate: policy "
             : state->check_errors[r] <= htp_check_tolerance(state) ? "ok"
                                                                  : "FAILED",
             approximate ? htp_policy_name(options->policy) : "",
             approximate ? " pruned units" : "");
  }
  printf("median %.4f ms, min %.4f ms, mean %.4f ms, max %.4f ms, %.2f GFLOP/s at the median\n",
         t.median, t.min, t.mean, t.max, t.gflops);
}

/* ===== JSON ============================================================== */

/* A finite number, or null (inf and NaN are not JSON). */
static json_t *number(double value) { return isfinite(value) ? json_real(value) : json_null(); }

/* Adds value to object under key; a NULL value (out of memory) is kept as
 * a failure in *ok. Takes the reference. */
static void put(json_t *object, const char *key, json_t *value, int *ok) {
  if (!value || json_object_set_new(object, key, value) != 0)
    *ok = 0;
}

static void append(json_t *array, json_t *value, int *ok) {
  if (!value || json_array_append_new(array, value) != 0)
    *ok = 0;
}

/* [{"name", "shape"}] of the tensors of role (or all for role < 0), at
 * their global shapes. */
static json_t *tensors_json(const htp_sig_tensor *tensors, int count, int role) {
  json_t *list = json_array();
  int ok = list != NULL;
  for (int i = 0; i < count && ok; i++) {
    if (role >= 0 && tensors[i].role != (htp_sig_role)role)
      continue;
    json_t *shape = json_array();
    ok = shape != NULL;
    for (int d = 0; d < tensors[i].rank && ok; d++)
      append(shape, json_integer(tensors[i].global_dims[d]), &ok);
    append(list, json_pack("{s:s, s:s, s:o}", "name", tensors[i].name, "dtype",
                           tensors[i].dtype == HTP_SIG_BF16 ? "bf16" : "f32", "shape", shape),
           &ok);
  }
  if (!ok)
    json_decref(list);
  return ok ? list : NULL;
}

static json_t *pair_json(const int32_t *counts, int world, int rank) {
  return json_pack("[i, i]", (int)counts[HTP_PAIR_ATTENTION * world + rank],
                   (int)counts[HTP_PAIR_MLP * world + rank]);
}

/* "balance" (the units) of the JSON report. */
static json_t *balance_json(const htp_run_options *options, const htp_run_state *state) {
  const htp_sig_balance *balance = &state->sig.balance;
  json_t *out = json_pack("{s:i, s:I, s:i, s:I, s:i, s:I, s:I, s:I, s:s, s:s}", "layers",
                   balance->layers, "model_dim", (json_int_t)balance->model_dim,
                   "heads_per_rank", balance->heads, "head_dim", (json_int_t)balance->head_dim,
                   "mlp_units_per_rank", balance->mlp_units, "mlp_unit_width",
                   (json_int_t)balance->mlp_unit_width, "head_bytes",
                   (json_int_t)htp_balancer_unit_bytes(&state->balancer, HTP_PAIR_ATTENTION),
                   "mlp_unit_bytes",
                   (json_int_t)htp_balancer_unit_bytes(&state->balancer, HTP_PAIR_MLP),
                   "impute", htp_impute_name(options->impute), "select",
                   htp_select_name(options->selection));
  if (out && options->impute == HTP_IMPUTE_SAME)
    json_object_set_new(out, "same_max_age", json_integer(options->same_max_age));
  if (out && balance->heads_owned) { /* uneven shares: what each rank owns */
    json_t *heads = json_array(), *mlp = json_array();
    for (int r = 0; r < state->tp && heads && mlp; r++) {
      json_array_append_new(heads, json_integer(balance->heads_owned[r]));
      json_array_append_new(mlp, json_integer(balance->mlp_units_owned[r]));
    }
    json_object_set_new(out, "heads_owned", heads);
    json_object_set_new(out, "mlp_units_owned", mlp);
  }
  return out;
}

/* "plan": the last iteration's plan, the plan changes, the weights handed
 * off, each timed iteration's plan version. */
static json_t *plan_json(const htp_run_options *options, const htp_run_state *state) {
  const htp_plan_record *plan = &state->outcome.last_plan;
  json_t *ranks = json_array(), *versions = json_array();
  int ok = ranks && versions;
  for (int r = 0; r < state->tp && ok; r++)
    append(ranks,
           json_pack("{s:i, s:s, s:o, s:o, s:o, s:o}", "rank", r, "action",
                     htp_action_name((htp_action)plan->action[r]), "gamma",
                     number(plan->gamma[r]), "pruned", pair_json(plan->pruned, state->tp, r),
                     "sent", pair_json(plan->sent, state->tp, r), "received",
                     pair_json(plan->received, state->tp, r)),
           &ok);
  for (long i = 0; i < options->iters && ok; i++)
    append(versions, json_integer(state->outcome.plan_version[i]), &ok);
  if (!ok) {
    json_decref(ranks);
    json_decref(versions);
    return NULL;
  }
  return json_pack("{s:I, s:o, s:I, s:I, s:[I, I], s:I, s:o}", "version",
                   (json_int_t)plan->version, "ranks", ranks, "pruned_units",
                   (json_int_t)htp_pruned_units(state), "changes",
                   (json_int_t)state->outcome.plan_changes, "handoff_units",
                   (json_int_t)state->outcome.handoff_units[HTP_PAIR_ATTENTION],
                   (json_int_t)state->outcome.handoff_units[HTP_PAIR_MLP], "handoff_bytes",
                   (json_int_t)handoff_bytes(state), "versions", versions);
}

/* "check": null without --check. */
/* --profile's calls: name and median ms per rank (null where none). */
static json_t *profile_json(const htp_run_options *options, const htp_run_state *state) {
  const htp_rank_outcome *o = &state->outcome;
  int ok = 1;
  json_t *calls = json_array();
  for (int k = 0; calls && k < o->profile_calls; k++) {
    json_t *ms = json_array();
    for (int r = 0; ms && r < state->tp; r++)
      append(ms, number(1e3 * o->profile_s[(size_t)k * (size_t)state->tp + (size_t)r]), &ok);
    append(calls, json_pack("{s:i, s:s, s:o}", "call", k, "name",
                            o->profile_names[k] ? o->profile_names[k] : "?", "median_ms",
                            ms ? ms : json_null()),
           &ok);
  }
  json_t *profile = json_pack("{s:I, s:b, s:o}", "iterations", (json_int_t)options->iters,
                              "partial", o->profile_broken, "calls", calls ? calls : json_null());
  if (!ok || !profile) {
    json_decref(profile);
    return NULL;
  }
  return profile;
}

static json_t *check_json(const htp_run_state *state) {
  if (!state->check_errors)
    return json_null();
  const htp_signature *sig = &state->sig;
  json_t *results = json_array();
  int ok = results != NULL, pass = 1, within = 1;
  for (int r = 0; r < sig->num_results && ok; r++) {
    append(results, json_pack("{s:s, s:o}", "name", sig->results[r].name, "error",
                              number(state->check_errors[r])), &ok);
    within &= state->check_errors[r] <= htp_check_tolerance(state);
    pass &= !htp_check_failed(state, r);
  }
  if (!ok) {
    json_decref(results);
    return NULL;
  }
  return json_pack("{s:f, s:o, s:b, s:b, s:b}", "tolerance", htp_check_tolerance(state), "results",
                   results, "within_tolerance", within, "approximate",
                   htp_pruned_units(state) != 0, "pass", pass);
}

/* The path is the user's bytes, not necessarily UTF-8 (which JSON needs):
 * then its non-ASCII bytes are shown as '?'. */
static json_t *path_json(const char *path) {
  json_t *value = json_string(path);
  if (value)
    return value;
  size_t length = strlen(path);
  char *ascii = malloc(length + 1);
  if (!ascii)
    return NULL;
  for (size_t i = 0; i <= length; i++)
    ascii[i] = (unsigned char)path[i] >= 0x80 ? '?' : path[i];
  value = json_string(ascii);
  free(ascii);
  return value;
}

static json_t *report_json(const htp_run_options *options, const htp_run_state *state,
                           timing t) {
  const htp_signature *sig = &state->sig;
  json_t *report = json_object();
  int ok = report != NULL;
  if (!ok)
    return NULL;
  put(report, "entry", json_string(sig->entry), &ok);
  put(report, "file", path_json(options->path), &ok);
  put(report, "iters", json_integer(options->iters), &ok);
  put(report, "warmup", json_integer(options->warmup), &ok);
  put(report, "seed", options->seed <= (uint64_t)INT64_MAX ? json_integer((json_int_t)options->seed)
                                                           : json_real((double)options->seed),
      &ok);
  put(report, "tp", json_integer(state->tp), &ok);
  put(report, "backend", json_string(options->backend), &ok);
  put(report, "device", json_string(options->device), &ok);
  put(report, "policy", json_string(htp_policy_name(options->policy)), &ok);
  put(report, "flops", json_integer(sig->flops), &ok);
  put(report, "block_flops", json_integer(block_flops(sig, state->tp)), &ok);
  put(report, "blas_threads", json_integer(state->blas_threads), &ok);
  put(report, "gemm_provider", json_string(htp_cpu_gemm_provider()), &ok);
  put(report, "matmul_precision",
      json_string(htp_run_matmul_precision_name(options->matmul_precision)), &ok);
  put(report, "median_ms", number(t.median), &ok);
  put(report, "min_ms", number(t.min), &ok);
  put(report, "mean_ms", number(t.mean), &ok);
  put(report, "max_ms", number(t.max), &ok);
  put(report, "gflops", number(t.gflops), &ok);
  json_t *times = json_array(), *compute = json_array(), *stragglers = json_array();
  put(report, "times_ms", times, &ok);
  put(report, "rank_compute_ms", compute, &ok);
  put(report, "stragglers", stragglers, &ok);
  for (long i = 0; i < options->iters && ok; i++)
    append(times, number(state->times[i]), &ok);
  for (int r = 0; r < state->tp && ok; r++)
    append(compute, number(state->rank_compute_ms[r]), &ok);
  for (int r = 0; r < state->tp && ok; r++)
    if (state->outcome.straggler_from[r] >= 0)
      append(stragglers,
             json_pack("{s:i, s:o, s:I, s:I}", "rank", r, "speed",
                       number(state->outcome.straggler_speed[r]), "from_iteration",
                       (json_int_t)state->outcome.straggler_from[r], "until_iteration",
                       (json_int_t)state->outcome.straggler_until[r]),
             &ok);
  put(report, "check", check_json(state), &ok);
  put(report, "balance", state->balance ? balance_json(options, state) : json_null(), &ok);
  put(report, "plan", state->balance ? plan_json(options, state) : json_null(), &ok);
  put(report, "profile", options->profile ? profile_json(options, state) : json_null(), &ok);
  put(report, "inputs", tensors_json(sig->args, sig->num_args, HTP_SIG_INPUT), &ok);
  put(report, "params", tensors_json(sig->args, sig->num_args, HTP_SIG_PARAM), &ok);
  put(report, "outputs", tensors_json(sig->results, sig->num_results, -1), &ok);
  put(report, "workspace_bytes", json_integer((json_int_t)sig->workspace_bytes), &ok);
  put(report, "kernel_memory_bytes",
      sig->kernel_memory_bytes >= 0 ? json_integer((json_int_t)sig->kernel_memory_bytes)
                                    : json_null(),
      &ok);
  put(report, "kernel_memory_held_bytes",
      device_kernels(options)
          ? json_integer((json_int_t)most_held(state, state->outcome.kernel_memory))
          : json_null(),
      &ok);
  put(report, "balancer_memory_bytes",
      sig->balancer_memory_bytes >= 0 ? json_integer((json_int_t)sig->balancer_memory_bytes)
                                      : json_null(),
      &ok);
  put(report, "balancer_memory_held_bytes",
      device_kernels(options) && state->balance
          ? json_integer((json_int_t)most_held(state, state->outcome.balancer_memory))
          : json_null(),
      &ok);
  if (!ok) {
    json_decref(report);
    return NULL;
  }
  return report;
}

int htp_report(const htp_run_options *options, const htp_run_state *state, char *err,
               size_t err_size) {
  timing t = summarise(state->times, options->iters, block_flops(&state->sig, state->tp));
  if (options->report != HTP_REPORT_JSON) {
    report_table(options, state, t);
    return 0;
  }
  json_t *report = report_json(options, state, t);
  if (!report)
    return htp_set_error(err, err_size, "out of memory building the JSON report");
  int status = json_dumpf(report, stdout, JSON_REAL_PRECISION(9)) != 0 ||
               fputc('\n', stdout) == EOF;
  json_decref(report);
  return status ? htp_set_error(err, err_size, "cannot write the report to stdout") : 0;
}
