/*===- tools/htp-run/prepare.c - What a run settles before its ranks start -===*
 *
 * Shared by timed runs (run.c), --check (check.c) and --train (train.c), so
 * none of them imports another for it: the memory a block's buffers need
 * against the machine's, the planner's and balancer's config from the
 * signature and the flags, and each rank's share of the cores. Declared
 * in executor.h.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/executor.h"

#include "kernels/htp_kernels.h" /* htp_cpu_set_blas_threads */
#include "tools/htp-run/errors.h"
#include "tools/htp-run/host.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Adds bytes, rounded up to the buffers' 64-byte alignment, to *total;
 * 0 when the sum overflows. */
static int add_buffer(uint64_t *total, uint64_t bytes) {
  uint64_t rounded;
  if (__builtin_add_overflow(bytes, 63, &rounded))
    return 0;
  return !__builtin_add_overflow(*total, rounded / 64 * 64, total);
}

int htp_run_buffer_bytes(const htp_signature *sig, uint64_t *per_rank, uint64_t *global) {
  int ok = 1;
  *per_rank = *global = 0;
  for (int i = 0; i < sig->num_args; i++)
    ok &= add_buffer(global, sig->args[i].global_bytes) & add_buffer(per_rank, sig->args[i].bytes);
  for (int i = 0; i < sig->num_results; i++)
    ok &= add_buffer(per_rank, sig->results[i].bytes);
  ok &= add_buffer(per_rank, sig->workspace_bytes);
  return ok;
}

int htp_run_check_memory(const char *what, uint64_t held, const htp_signature *sig,
                         int local_ranks, int globals, uint64_t *total, char *err,
                         size_t err_size) {
  uint64_t rank, global;
  int ok = htp_run_buffer_bytes(sig, &rank, &global);
  if (!globals)
    global = 0;
  ok = ok && !__builtin_mul_overflow(rank, (uint64_t)local_ranks, total) &&
       !__builtin_add_overflow(*total, global, total) &&
       !__builtin_add_overflow(*total, held, total);
  uint64_t memory = htp_host_memory_bytes();
  if (!ok || (memory && *total > memory)) {
    char already[64] = "";
    if (held)
      snprintf(already, sizeof already, ", plus %.4g GB the run already holds",
               (double)held / 1e9);
    return htp_set_error(err, err_size, "%s needs %.4g GB for its tensors (%d rank%s x %.4g GB "
                         "of arguments, results and workspace, plus %.4g GB of global "
                         "arguments%s), more than this machine's %.4g GB of memory: refused "
                         "before allocating anything", what, ok ? (double)*total / 1e9 : INFINITY,
                         local_ranks, local_ranks == 1 ? "" : "s", (double)rank / 1e9,
                         (double)global / 1e9, already, (double)memory / 1e9);
  }
  return 0;
}

uint64_t htp_run_host_staging_bytes(const htp_signature *sig, int local_ranks) {
  uint64_t rank = 0, largest = 0, total = 0;
  for (int k = 0; k < sig->num_results; k++)
    if (!add_buffer(&rank, sig->results[k].bytes))
      return UINT64_MAX;
  for (int i = 0; i < sig->num_args; i++)
    if (sig->args[i].bytes > largest)
      largest = sig->args[i].bytes;
  if (!add_buffer(&rank, largest) || __builtin_mul_overflow(rank, (uint64_t)local_ranks, &total))
    return UINT64_MAX;
  return total;
}

int htp_run_balance_config(const htp_run_options *options, htp_run_state *state,
                           htp_rank_job *job, char *err, size_t err_size) {
  htp_planner_config planner = HTP_PLANNER_CONFIG_INITIALIZER;
  planner.world_size = state->tp;
  planner.policy = HTP_POLICY_NONE;
  planner.ewma_alpha = options->ewma_alpha;
  planner.hysteresis_iters = (int)options->hysteresis;
  if (!state->sig.balance.present) {
    if (options->selection != HTP_SELECT_RANDOM)
      return htp_set_error(err, err_size, "--select %s needs a block split with balance hooks "
                           "(--tp > 1); %s (tp %d) has no 'balance' record, so it has no units "
                           "to select: run it with --tp > 1, or without --select",
                           htp_select_name(options->selection), options->path, state->tp);
    if (options->policy != HTP_POLICY_NONE)
      return htp_set_error(err, err_size, "--policy %s needs a block split with balance hooks "
                           "(--tp > 1); %s (tp %d) has no 'balance' record, so it has no units "
                           "to resize or migrate: run it with --tp > 1, or with --policy none",
                           htp_policy_name(options->policy), options->path, state->tp);
    job->balance = 0;
    job->planner = planner;
    return 0;
  }
  htp_balancer_config config = HTP_BALANCER_CONFIG_INITIALIZER;
  config.planner.policy = options->policy;
  config.planner.ewma_alpha = options->ewma_alpha;
  config.planner.hysteresis_iters = (int)options->hysteresis;
  config.selection = options->selection;
  config.seed = options->seed;
  config.impute = options->impute;
  config.same_max_age = options->same_max_age;
  config.repartition_ratio = options->repartition;
  if (htp_signature_balancer_config(&state->sig, &config) != HTP_OK)
    return htp_set_error(err, err_size, "%s: no balancer config from its signature",
                         options->path);
  /* What the config alone can say is wrong, before any rank starts. */
  char why[256];
  if (htp_balancer_config_check(&config, why, sizeof why) != HTP_OK)
    return htp_set_error(err, err_size, "%s: %s", options->path, why);
  state->balance = 1;
  state->balancer = config;
  job->balance = 1;
  job->balancer = config;
  job->planner = config.planner;
  return 0;
}

void htp_run_choose_blas_threads(htp_run_state *state, int mpi) {
  const char *bad = NULL;
  const int given = htp_cpu_threads_from_env(&state->blas_threads_from, &bad);
  if (bad)
    fprintf(stderr, "htp-run: note: %s='%.40s' is not a thread count (1 to 1024): ignored\n",
            bad, getenv(bad));
  if (given) {
    htp_cpu_set_blas_threads(given);
  } else {
    int on_host = mpi ? htp_host_mpi_local_size() : state->tp;
    if (on_host < 1)
      on_host = state->tp; /* a launcher that does not say: assume one host */
    htp_cpu_set_blas_threads(htp_host_blas_share(htp_cpu_cores(), on_host));
  }
  state->blas_threads = htp_cpu_blas_threads();
}

int htp_run_check_tp(const htp_run_options *options, int shared, long requested,
                    htp_run_state *state, char *err, size_t err_size) {
  const htp_signature *sig = &state->sig;
  if (!shared && sig->tp != requested)
    return htp_set_error(err, err_size, "%s: compiled for tp %ld, the block says tp %d (the "
                         "compiler did not split it as asked)", options->path, requested, sig->tp);
  if (shared && options->tp_given && sig->tp != options->tp) { /* the command line's: exit 2 */
    state->bad_command_line = 1;
    return htp_set_error(err, err_size, "--tp %ld disagrees with %s, which was compiled for tp "
                         "%d (htp-compile --tp %d); leave --tp out or recompile",
                         options->tp, options->path, sig->tp, sig->tp);
  }
  if (state->ranks && htp_ranks_size(state->ranks) != sig->tp)
    return htp_set_error(err, err_size, "%s is for tp %d but mpirun started %d rank "
                         "processes (mpirun -np %ld%s)", options->path, sig->tp,
                         htp_ranks_size(state->ranks), sig->tp + options->train.standby,
                         options->train.standby ? ", the standbys included" : "");
  state->tp = sig->tp;
  /* The command line's fault, found once the block said its tp: exit 2. */
  if (htp_run_check_ranks(options, state->tp, "the block's tp", err, err_size)) {
    state->bad_command_line = 1;
    return 1;
  }
  return 0;
}
