/*===- tools/htp-run/ranks.c - Run an entry point on the ranks of a world --===*
 *
 * This file implements ranks.h. Each rank records its own failure (the step,
 * the iteration, the result and htp_last_error) with the time it noticed.
 * One is reported as the cause, the others as its consequences: an injected
 * death first, then a deadline that passed (a hung rank times its peers out,
 * then is released by their abort), then the earliest of the rest, and last
 * the ranks that only heard of a peer's failure. Any failure aborts
 * the world, so no rank waits for a dead peer longer than the deadline.
 * Every buffer a rank hands the block, and the exchange of timings under
 * mpi/nccl, goes through the runtime's memory API, so the CPU runs the very
 * path a GPU does (the CPU table's memory is host memory).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/ranks.h"

#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"
#include "tools/htp-run/slice.h"
#include "tools/htp-run/step.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct htp_ranks {
  htp_world *world;
  htp_backend backend;
  int per_process; /* mpi, nccl: this process is one rank */
};

/* One rank's state while it runs: a job (htp_ranks_run), or a task
 * (htp_ranks_run_task: fn and user, job NULL). */
typedef struct rank_state {
  htp_ranks *ranks;
  const htp_rank_job *job;
  htp_rank_task_fn fn;
  void *user;
  const htp_run_fault *faults; /* those registered, to tell an injected death */
  int num_faults;
  htp_rank_outcome *outcome;
  FILE *trace; /* local: shared by the ranks; mpi: this process's stream */
  int rank;
  int failed;
  int priority; /* 0 injected death, 1 deadline passed, 2 other, 3 a peer's failure heard */
  double failed_at;
  long failed_iteration;
  int injected; /* the failure is an injected death (--fault die) */
  int hung;     /* the rank hung (--fault hang) until the world's failure released it */
  char message[HTP_RANKS_MESSAGE];
} rank_state;

static const char *backend_name(htp_backend backend) {
  return backend == HTP_BACKEND_MPI ? "mpi" : backend == HTP_BACKEND_NCCL ? "nccl" : "local";
}

int htp_ranks_open(htp_ranks **out, htp_backend backend, int world_size, int standbys,
                   int fence, double timeout_s, htp_device device, int32_t matmul_precision,
                   const int32_t *sm_counts, char *err, size_t err_size) {
  *out = NULL;
  if (!htp_backend_available(backend))
    return htp_set_error(err, err_size, "this htp-run was built without the %s backend%s",
                         backend_name(backend),
                         backend == HTP_BACKEND_NCCL ? " (build with -DHTP_ENABLE_CUDA=ON and "
                                                       "NCCL installed)" : "");
  htp_ranks *ranks = calloc(1, sizeof *ranks);
  if (!ranks)
    return htp_set_error(err, err_size, "out of memory");
  htp_config config = HTP_CONFIG_INITIALIZER;
  config.backend = backend;
  config.world_size = world_size;
  config.timeout_s = timeout_s;
  config.device = device;
  config.matmul_precision = matmul_precision;
  config.sm_counts = sm_counts;
  config.standbys = standbys;
  config.fence = fence;
  char message[512];
  htp_result result = htp_world_create_verbose(&config, &ranks->world, message, sizeof message);
  if (result != HTP_OK) {
    free(ranks);
    /* The runtime refuses device CUDA in a build without its CUDA table. */
    if (result == HTP_ERR_UNSUPPORTED && device == HTP_DEVICE_CUDA)
      return htp_set_error(err, err_size, "--device cuda: this htp-run was built without CUDA "
                           "(rebuild with -DHTP_ENABLE_CUDA=ON on a machine with the CUDA "
                           "toolkit): %s", message);
    return htp_set_error(err, err_size, "cannot create the %s world: %s: %s",
                         backend_name(backend), htp_strerror(result), message);
  }
  ranks->backend = backend;
  ranks->per_process = htp_world_process_rank(ranks->world) >= 0;
  *out = ranks;
  return 0;
}

int htp_ranks_is_standby(const htp_ranks *ranks) {
  return ranks && htp_world_is_standby(ranks->world);
}

/* ranks' like around a new world (mpi: one process per rank). */
static htp_ranks *around(const htp_ranks *like, htp_world *world) {
  htp_ranks *ranks = calloc(1, sizeof *ranks);
  if (!ranks) {
    htp_world_destroy(world);
    return NULL;
  }
  ranks->world = world;
  ranks->backend = like->backend;
  ranks->per_process = 1;
  return ranks;
}

int htp_ranks_standby_wait(htp_ranks *ranks, htp_ranks **joined, char *err, size_t err_size) {
  *joined = NULL;
  htp_world *world = NULL;
  htp_result result = htp_world_standby_wait(ranks->world, &world);
  if (result != HTP_OK)
    return htp_set_error(err, err_size, "a standby waiting to join: %s: %s",
                         htp_strerror(result), htp_world_last_error(ranks->world));
  if (world && !(*joined = around(ranks, world)))
    return htp_set_error(err, err_size, "out of memory");
  return 0;
}

int htp_ranks_grow(htp_ranks *ranks, int rank, htp_ranks **grown, char *err, size_t err_size) {
  *grown = NULL;
  htp_world *world = NULL;
  htp_result result = htp_world_grow(ranks->world, rank, &world);
  if (result != HTP_OK)
    return htp_set_error(err, err_size, "taking a standby process in as rank %d: %s: %s", rank,
                         htp_strerror(result), htp_world_last_error(ranks->world));
  if (!(*grown = around(ranks, world)))
    return htp_set_error(err, err_size, "out of memory");
  return 0;
}

int htp_ranks_release(htp_ranks *ranks, char *err, size_t err_size) {
  htp_result result = htp_world_release_standbys(ranks->world);
  if (result != HTP_OK)
    return htp_set_error(err, err_size, "letting the standby processes go: %s: %s",
                         htp_strerror(result), htp_world_last_error(ranks->world));
  return 0;
}

int htp_ranks_add_faults(htp_ranks *ranks, const htp_run_fault *faults, int count, char *err,
                         size_t err_size) {
  static const htp_fault_kind kinds[] = {HTP_FAULT_DELAY, HTP_FAULT_HANG, HTP_FAULT_DIE};
  for (int i = 0; i < count; i++) {
    if (faults[i].kind == HTP_RUN_FAULT_REJOIN)
      continue;
    htp_fault fault = {kinds[faults[i].kind], faults[i].rank, faults[i].iteration,
                       faults[i].seconds};
    if (htp_world_add_fault(ranks->world, &fault) != HTP_OK)
      return htp_set_error(err, err_size, "--fault: %s", htp_world_last_error(ranks->world));
  }
  return 0;
}

int htp_ranks_size(const htp_ranks *ranks) { return htp_world_size(ranks->world); }

int htp_ranks_process_rank(const htp_ranks *ranks) {
  return ranks->per_process ? htp_world_process_rank(ranks->world) : -1;
}

int htp_ranks_shrink(htp_ranks *ranks, htp_ranks **survivors, int32_t *lost, int capacity,
                     int *num_lost, char *err, size_t err_size) {
  *survivors = NULL;
  *num_lost = 0;
  htp_ranks *next = calloc(1, sizeof *next);
  if (!next)
    return htp_set_error(err, err_size, "out of memory");
  htp_result result = htp_world_shrink(ranks->world, &next->world, lost, capacity, num_lost);
  if (result != HTP_OK) {
    free(next);
    return htp_set_error(err, err_size, "cannot shrink the %s world to its live processes: "
                         "%s: %s", backend_name(ranks->backend), htp_strerror(result),
                         htp_world_last_error(ranks->world));
  }
  next->backend = ranks->backend;
  next->per_process = ranks->per_process;
  *survivors = next;
  return 0;
}

int htp_ranks_abort(htp_ranks *ranks) {
  if (!ranks || !ranks->per_process || htp_world_is_standby(ranks->world))
    return 0;
  const int first = htp_world_status(ranks->world) == HTP_OK;
  htp_ctx *ctx = NULL;
  if (htp_ctx_create(ranks->world, htp_world_process_rank(ranks->world), &ctx) == HTP_OK) {
    htp_abort(ctx, HTP_ERR_REMOTE);
    htp_ctx_destroy(ctx);
  }
  return first;
}

void htp_ranks_close(htp_ranks *ranks) {
  if (!ranks)
    return;
  htp_world_destroy(ranks->world);
  free(ranks);
}

/* Records this rank's failure and aborts the world so its peers stop
 * waiting. ctx may be NULL (context creation failed). */
static void rank_failed(rank_state *state, htp_ctx *ctx, int32_t code, const char *step,
                        long iteration, const char *detail) {
  state->failed = 1;
  state->failed_at = htp_now();
  state->failed_iteration = iteration;
  /* A rank that only heard of a peer's failure reports a consequence: it
   * may notice before the failed rank has recorded its cause. */
  state->priority = code == HTP_ERR_TIMEOUT ? 1 : code == HTP_ERR_REMOTE ? 3 : 2;
  for (int i = 0; i < state->num_faults; i++) {
    const htp_run_fault *fault = &state->faults[i];
    if (fault->kind == HTP_RUN_FAULT_DIE && fault->rank == state->rank &&
        fault->iteration == iteration && strcmp(step, "the fault point") == 0) {
      state->priority = 0;
      state->injected = 1;
    }
    /* A hang is not the cause reported (the deadline that found it is),
     * but it is the rank that was lost. */
    if (fault->kind == HTP_RUN_FAULT_HANG && fault->rank == state->rank &&
        fault->iteration <= iteration && strcmp(step, "the fault point") == 0)
      state->hung = 1;
  }
  char where[96] = "";
  if (iteration >= 0)
    snprintf(where, sizeof where, " at iteration %ld", iteration);
  snprintf(state->message, sizeof state->message, "rank %d: %s%s failed: %s (%s): %s",
           state->rank, step, where, htp_strerror((htp_result)code),
           code >= 0 && code < HTP_RESULT_COUNT ? "" : "not an htp_result",
           detail && *detail ? detail : "(no message)");
  /* "(%s)" above is empty for a known code: tidy it away. */
  char *empty = strstr(state->message, " ()");
  if (empty)
    memmove(empty, empty + 3, strlen(empty + 3) + 1);
  if (ctx)
    htp_abort(ctx, code == HTP_ERR_TIMEOUT ? HTP_ERR_TIMEOUT : HTP_ERR_REMOTE);
}

/* Under mpi every process appends its own lines to the one trace file, which
 * rank 0 truncates first; a line (< 8 KiB, runtime/trace.c) goes out in one
 * write(2) of a line-buffered stream opened for appending. */
static int open_mpi_trace(rank_state *state, htp_ctx *ctx) {
  char path[4200], why[4600];
  if (htp_file_temporary_name(state->job->trace_path, path, sizeof path)) {
    rank_failed(state, ctx, HTP_ERR_SYSTEM, "opening the trace", -1, "the name is too long");
    return 1;
  }
  if (state->rank == 0) { /* FILE.tmp, renamed over FILE by rank 0 at its end */
    FILE *file = htp_file_create(path, why, sizeof why);
    if (!file || fclose(file) != 0) {
      rank_failed(state, ctx, HTP_ERR_SYSTEM, "opening the trace", -1,
                  file ? strerror(errno) : why);
      return 1;
    }
  }
  htp_result result = htp_barrier(ctx);
  if (result != HTP_OK) {
    rank_failed(state, ctx, result, "the barrier before the trace", -1, htp_last_error(ctx));
    return 1;
  }
  state->trace = fopen(path, "a");
  if (!state->trace || setvbuf(state->trace, NULL, _IOLBF, 1 << 16) != 0) {
    rank_failed(state, ctx, HTP_ERR_SYSTEM, "opening the trace", -1, strerror(errno));
    return 1;
  }
  return 0;
}

/* Notes which ranks the (shared) plan flags as stragglers. */
static void note_stragglers(rank_state *state, const htp_plan *plan, const htp_planner *planner,
                            long iteration) {
  htp_rank_outcome *outcome = state->outcome;
  const double *speeds = htp_planner_speeds(planner);
  for (int r = 0; r < plan->world_size; r++) {
    if (!plan->straggler[r])
      continue;
    if (outcome->straggler_from[r] < 0)
      outcome->straggler_from[r] = iteration;
    outcome->straggler_until[r] = iteration;
    outcome->straggler_speed[r] = speeds[r];
  }
}

/* Copies what the report needs of plan into record (sized for world). */
static void record_plan(htp_plan_record *record, const htp_plan *plan) {
  const int world = plan->world_size;
  record->version = plan->version;
  memcpy(record->action, plan->action, (size_t)world * sizeof *record->action);
  memcpy(record->gamma, plan->gamma, (size_t)world * sizeof *record->gamma);
  memcpy(record->pruned, plan->pruned, (size_t)(HTP_PAIR_KINDS * world) * sizeof(int32_t));
  memcpy(record->sent, plan->sent, (size_t)(HTP_PAIR_KINDS * world) * sizeof(int32_t));
  memcpy(record->received, plan->received, (size_t)(HTP_PAIR_KINDS * world) * sizeof(int32_t));
}

/* Rank 0's bookkeeping of a plan returned by the step: a new version counts
 * as a change, and the units it places on helpers as handed off. */
static void note_plan_change(rank_state *state, const htp_plan *plan, int64_t *version) {
  if (plan->version == *version)
    return;
  *version = plan->version;
  htp_rank_outcome *outcome = state->outcome;
  outcome->plan_changes++;
  for (int kind = 0; kind < HTP_PAIR_KINDS; kind++)
    for (int r = 0; r < plan->world_size; r++)
      outcome->handoff_units[kind] +=
          (int64_t)plan->received[kind * plan->world_size + r] * plan->num_layers;
}

/* Bytes of buffer i in entry.h order: arguments, results, workspace. */
static size_t buffer_bytes(const htp_signature *sig, int i) {
  if (i < sig->num_args)
    return sig->args[i].bytes;
  if (i < sig->num_args + sig->num_results)
    return sig->results[i - sig->num_args].bytes;
  return sig->workspace_bytes;
}

/* The rank's buffers in its context's memory (device[] zeroed, count
 * entries): each argument sliced on the host and uploaded once, results and
 * workspace allocated. Returns 0, or non-zero after rank_failed; what was
 * allocated stays in device[] for free_device_buffers. */
static int make_device_buffers(rank_state *state, htp_ctx *ctx, void **device, int count) {
  const htp_signature *sig = state->job->sig;
  htp_result result;
  for (int i = 0; i < count; i++) {
    size_t bytes = buffer_bytes(sig, i);
    /* htp_mem_alloc takes >= 1 byte: an empty buffer still gets an address. */
    if ((result = htp_mem_alloc(ctx, bytes ? bytes : 1, &device[i])) != HTP_OK) {
      rank_failed(state, ctx, result, "allocating its buffers", -1, htp_last_error(ctx));
      return 1;
    }
    if (i >= sig->num_args || bytes == 0)
      continue;
    const htp_sig_tensor *arg = &sig->args[i];
    const void *global = state->job->global[i];
    void *slice = NULL;
    if (arg->shard_layout != HTP_SHARD_NONE) {
      char reason[512];
      if (!(slice = malloc(bytes))) {
        rank_failed(state, ctx, HTP_ERR_NOMEM, "slicing its arguments", -1, "out of memory");
        return 1;
      }
      if (htp_shard_slice(global, slice, arg->element_size, arg->rank, arg->dims, arg->shard_dim,
                          arg->shard_parts, state->rank, arg->shard_layout, arg->shard_units,
                          arg->shard_unit, reason,
                          sizeof reason)) {
        free(slice);
        rank_failed(state, ctx, HTP_ERR_INVALID, "slicing its arguments", -1, reason);
        return 1;
      }
    }
    /* An unsplit argument is uploaded straight from the global copy. */
    result = htp_mem_upload(ctx, device[i], slice ? slice : global, bytes);
    free(slice);
    if (result != HTP_OK) {
      rank_failed(state, ctx, result, "uploading its arguments", -1, htp_last_error(ctx));
      return 1;
    }
  }
  return 0;
}

static void free_device_buffers(htp_ctx *ctx, void **device, int count) {
  if (!device)
    return;
  for (int i = 0; i < count; i++)
    htp_mem_free(ctx, device[i]);
  free(device);
}

/* Per-process ranks send rank 0 their timings (control values: over the
 * host world, whatever the device). Returns 0, or non-zero after
 * rank_failed. */
static int gather_timings(rank_state *state, htp_ctx *ctx) {
  const htp_rank_job *job = state->job;
  htp_rank_outcome *outcome = state->outcome;
  const int world = htp_ctx_size(ctx);
  const size_t bytes = (size_t)job->iters * sizeof(double);
  double *mine = malloc(2 * bytes), *all = malloc(2 * bytes * (size_t)world);
  htp_result result = HTP_ERR_NOMEM;
  const char *failure = "out of memory";
  if (mine && all) {
    memcpy(mine, outcome->compute_s + (size_t)state->rank * job->iters, bytes);
    memcpy(mine + job->iters, outcome->elapsed_s + (size_t)state->rank * job->iters, bytes);
    result = htp_allgather_host(ctx, mine, all, 2 * bytes);
    failure = htp_last_error(ctx);
  }
  for (int r = 0; result == HTP_OK && r < world; r++) {
    memcpy(outcome->compute_s + (size_t)r * job->iters, all + 2 * (size_t)r * job->iters, bytes);
    memcpy(outcome->elapsed_s + (size_t)r * job->iters, all + (2 * (size_t)r + 1) * job->iters,
           bytes);
  }
  free(all);
  free(mine);
  if (result != HTP_OK)
    rank_failed(state, ctx, result, "gathering the timings", -1, failure);
  return result != HTP_OK;
}

/* The ranks of a local world are threads that fill one outcome: the
 * profile's arrays grow under this lock. */
static pthread_mutex_t outcome_lock = PTHREAD_MUTEX_INITIALIZER;

static int compare_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double htp_median(double *values, long count) {
  qsort(values, (size_t)count, sizeof *values, compare_double);
  return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

/* Grows the outcome's profile to `calls` calls of `world` ranks, new names
 * NULL and new seconds NAN. Returns 0, or non-zero when out of memory. */
static int grow_profile(htp_rank_outcome *outcome, int calls, int world) {
  if (calls <= outcome->profile_calls) return 0;
  const char **names = realloc(outcome->profile_names, (size_t)calls * sizeof *names);
  if (!names) return 1;
  outcome->profile_names = names;
  double *seconds = realloc(outcome->profile_s, (size_t)calls * (size_t)world * sizeof *seconds);
  if (!seconds) return 1;
  outcome->profile_s = seconds;
  for (size_t i = (size_t)outcome->profile_calls * (size_t)world;
       i < (size_t)calls * (size_t)world; ++i)
    seconds[i] = NAN;
  for (int k = outcome->profile_calls; k < calls; ++k) names[k] = NULL;
  outcome->profile_calls = calls;
  return 0;
}

/* The rank's per-call profile (of `iters` iterations) into the outcome:
 * each call's median over the iterations that booked it; then stops it.
 * The calls' names are the runtime's. */
static void keep_profile(rank_state *state, htp_ctx *ctx, long iters) {
  htp_rank_outcome *outcome = state->outcome;
  const int world = htp_ctx_size(ctx), calls = htp_ctx_profile_calls(ctx);
  double *sorted = malloc((size_t)iters * sizeof *sorted);
  pthread_mutex_lock(&outcome_lock);
  const int grown = !grow_profile(outcome, calls, world);
  for (int k = 0; sorted && grown && k < calls; ++k) {
    const double *seconds = NULL;
    const char *name = htp_ctx_profile_call(ctx, k, &seconds);
    int n = 0;
    for (long i = 0; i < iters; ++i)
      if (!isnan(seconds[i])) sorted[n++] = seconds[i];
    if (!outcome->profile_names[k]) outcome->profile_names[k] = name;
    if (n > 0)
      outcome->profile_s[(size_t)k * (size_t)world + (size_t)state->rank] = htp_median(sorted, n);
  }
  if (!sorted || !grown || calls == 0) outcome->profile_broken = 1;
  pthread_mutex_unlock(&outcome_lock);
  free(sorted);
  htp_ctx_profile_stop(ctx);
}

/* One process per rank (mpi, nccl): every rank's profile column to every
 * process, so rank 0 reports them all. The ranks agree on the most calls
 * any made first; a shorter column is NAN-padded. Returns 0, or non-zero
 * after rank_failed. */
static int gather_profile(rank_state *state, htp_ctx *ctx) {
  htp_rank_outcome *outcome = state->outcome;
  const int world = htp_ctx_size(ctx);
  int64_t mine = outcome->profile_calls, *counts = calloc((size_t)world, sizeof *counts);
  double *column = NULL, *all = NULL;
  const char *failure = "out of memory";
  htp_result result = HTP_ERR_NOMEM;
  if (counts) {
    result = htp_allgather_host(ctx, &mine, counts, sizeof mine);
    failure = htp_last_error(ctx);
  }
  int64_t calls = 0;
  for (int r = 0; result == HTP_OK && r < world; r++)
    calls = counts[r] > calls ? counts[r] : calls;
  if (result == HTP_OK && calls > 0) {
    column = malloc((size_t)calls * sizeof *column);
    all = malloc((size_t)calls * (size_t)world * sizeof *all);
    result = column && all && !grow_profile(outcome, (int)calls, world) ? HTP_OK : HTP_ERR_NOMEM;
    failure = "out of memory";
    double *seconds = outcome->profile_s;
    if (result == HTP_OK) {
      for (int64_t k = 0; k < calls; k++)
        column[k] = k < mine ? seconds[k * world + state->rank] : NAN;
      result = htp_allgather_host(ctx, column, all, (size_t)calls * sizeof *column);
      failure = htp_last_error(ctx);
    }
    for (int64_t k = 0; result == HTP_OK && k < calls; k++)
      for (int r = 0; r < world; r++)
        seconds[k * world + r] = all[(size_t)r * (size_t)calls + (size_t)k];
  }
  free(counts), free(column), free(all);
  if (result != HTP_OK)
    rank_failed(state, ctx, result, "gathering the profile", -1, failure);
  return result != HTP_OK;
}

/* The rank's buffers in its context's memory, checked against the
 * device's memory first. Returns 0, or non-zero after rank_failed. */
static int make_rank_buffers(rank_state *state, htp_ctx *ctx, void ***device, int num_buffers) {
  const htp_signature *sig = state->job->sig;
  if (!(*device = calloc((size_t)num_buffers, sizeof **device))) {
    rank_failed(state, ctx, HTP_ERR_NOMEM, "allocating its buffers", -1, "out of memory");
    return 1;
  }
  uint64_t buffers = 0;
  for (int i = 0; i < num_buffers; i++)
    buffers += buffer_bytes(sig, i) ? buffer_bytes(sig, i) : 1;
  char why[512];
  htp_result result =
      htp_rank_check_device_memory(ctx, buffers, htp_rank_own_memory_bound(sig, NULL), why,
                                   sizeof why);
  if (result != HTP_OK) {
    rank_failed(state, ctx, result, "checking its device's memory", -1, why);
    return 1;
  }
  return make_device_buffers(state, ctx, *device, num_buffers);
}

/* Rank 0's record of a timed iteration: the plan it ran under (the copy
 * made when it arrived). */
static void record_timed(rank_state *state, long timed, int world_size) {
  htp_rank_outcome *outcome = state->outcome;
  outcome->plan_version[timed] = outcome->last_plan.version;
  memcpy(outcome->plan_action + (size_t)timed * world_size, outcome->last_plan.action,
         (size_t)world_size);
  memcpy(outcome->plan_gamma + (size_t)timed * world_size, outcome->last_plan.gamma,
         (size_t)world_size * sizeof(double));
}

/* The warm-up and timed iterations, each one rank step; the timings, and
 * on rank 0 the plans. Returns 0, or non-zero after rank_failed. */
static int run_iterations(rank_state *state, htp_ctx *ctx, htp_balancer *balancer,
                          void **device) {
  const htp_rank_job *job = state->job;
  htp_rank_outcome *outcome = state->outcome;
  htp_planner *planner = htp_balancer_planner(balancer);
  const long total = job->warmup + job->iters;
  const int world_size = htp_ctx_size(ctx);
  /* The plan in force for the next call; rank 0 keeps a copy for the report. */
  const htp_plan *plan = htp_planner_plan(planner);
  int64_t version = plan->version;
  if (state->rank == 0)
    record_plan(&outcome->last_plan, plan);
  const htp_rank_step step = {ctx, balancer, job->fn, device, "the block", NULL, NULL};
  for (long iteration = 0; iteration < total; iteration++) {
    htp_result profiled = HTP_OK;
    if (job->profile && iteration == job->warmup)
      profiled = htp_ctx_profile_start(ctx, (int)job->iters);
    if (job->profile && iteration >= job->warmup && profiled == HTP_OK)
      profiled = htp_ctx_profile_iteration(ctx);
    if (profiled != HTP_OK) {
      rank_failed(state, ctx, profiled, "starting its profile", iteration, htp_last_error(ctx));
      return 1;
    }
    htp_step_result done_step;
    htp_step_failure failure;
    double slowdown = htp_step_slowdown(job->slows, job->num_slows, state->rank, iteration);
    if (htp_rank_step_run(&step, iteration, slowdown, &done_step, &failure)) {
      rank_failed(state, ctx, failure.code, failure.what, iteration, failure.detail);
      return 1;
    }
    plan = done_step.plan;
    if (iteration >= job->warmup) {
      long timed = iteration - job->warmup;
      long i = (long)state->rank * job->iters + timed;
      outcome->compute_s[i] = done_step.times.compute_seconds;
      outcome->elapsed_s[i] = done_step.seconds;
      if (state->rank == 0)
        record_timed(state, timed, world_size);
    }
    if (state->rank == 0) {
      note_stragglers(state, plan, planner, iteration);
      note_plan_change(state, plan, &version);
      if (iteration + 1 < total)
        record_plan(&outcome->last_plan, plan);
    }
  }
  return 0;
}

static void run_rank(rank_state *state) {
  const htp_rank_job *job = state->job;
  htp_world *world = state->ranks->world;
  const int per_process = state->ranks->per_process;
  const htp_signature *sig = job->sig;
  const int num_buffers = sig->num_args + sig->num_results + 1;
  void **device = NULL; /* the rank's buffers, in its context's memory */
  htp_ctx *ctx = NULL;
  htp_balancer *balancer = NULL; /* without hooks: a hookless one, detection only */
  htp_result result = htp_ctx_create(world, state->rank, &ctx);
  if (result != HTP_OK) {
    rank_failed(state, NULL, result, "creating its context", -1, htp_world_last_error(world));
    return;
  }
  /* Before the first call: the hooks find it on the context. A block
   * without hooks gets a hookless one: detection and the trace only. */
  htp_balancer_config hookless = HTP_BALANCER_CONFIG_INITIALIZER;
  hookless.planner = job->planner;
  result = htp_balancer_create(ctx, job->balance ? &job->balancer : &hookless, &balancer);
  if (result != HTP_OK) {
    rank_failed(state, ctx, result, "creating its balancer", -1, htp_last_error(ctx));
    goto done;
  }
  if (per_process && job->trace_path && open_mpi_trace(state, ctx))
    goto done;
  htp_balancer_set_trace(balancer, state->trace);
  if (make_rank_buffers(state, ctx, &device, num_buffers) ||
      run_iterations(state, ctx, balancer, device))
    goto done;
  /* The last iteration's results, for --output and --check. */
  for (int k = 0; k < sig->num_results; k++) {
    result = htp_mem_download(ctx, job->results[state->rank][k], device[sig->num_args + k],
                              sig->results[k].bytes);
    if (result != HTP_OK) {
      rank_failed(state, ctx, result, "downloading its results", -1, htp_last_error(ctx));
      goto done;
    }
  }
  char why[512];
  result = htp_rank_check_own_memory(ctx, balancer, htp_rank_own_memory_bound(sig, NULL),
                                     &state->outcome->kernel_memory[state->rank],
                                     &state->outcome->balancer_memory[state->rank], why,
                                     sizeof why);
  if (result != HTP_OK) {
    rank_failed(state, ctx, result, "checking its own device memory", -1, why);
    goto done;
  }
  if (job->profile && htp_rank_task_keep_profile(state, ctx, job->iters))
    goto done;
  /* Rank 0 reports: it needs every rank's timings. */
  if (per_process)
    gather_timings(state, ctx);
done:
  if (per_process && state->trace) {
    char temporary[4200], why[4600];
    const int failed = ferror(state->trace) | (fclose(state->trace) != 0);
    state->trace = NULL;
    if (failed && !state->failed)
      rank_failed(state, ctx, HTP_ERR_SYSTEM, "writing the trace", -1, "write error");
    else if (state->rank == 0 &&
             (htp_file_temporary_name(job->trace_path, temporary, sizeof temporary) ||
              htp_file_commit(temporary, job->trace_path, why, sizeof why)) && !state->failed)
      rank_failed(state, ctx, HTP_ERR_SYSTEM, "committing the trace", -1, why);
  }
  free_device_buffers(ctx, device, num_buffers);
  htp_balancer_destroy(balancer); /* before its context */
  htp_ctx_destroy(ctx);
}

static void *rank_thread(void *arg) {
  rank_state *state = arg;
  if (state->fn)
    state->fn(state, state->user);
  else
    run_rank(state);
  return NULL;
}

/* A bound of the own memory as a count: 0 when unknown (-1). */
static uint64_t counted(int64_t bound) { return bound > 0 ? (uint64_t)bound : 0; }

int htp_rank_check_device_memory(htp_ctx *ctx, uint64_t bytes, htp_rank_own_bound own,
                                 char *why, size_t why_size) {
  size_t free_bytes = 0, total_bytes = 0;
  htp_result result = htp_mem_info(ctx, &free_bytes, &total_bytes);
  if (result == HTP_ERR_UNSUPPORTED)
    return 0;
  if (result == HTP_OK)
    result = htp_barrier(ctx);
  if (result != HTP_OK) {
    snprintf(why, why_size, "%s", htp_last_error(ctx));
    return result;
  }
  /* Ranks of a local world share one device; one process per rank has its own. */
  const htp_world *world = htp_ctx_world(ctx);
  const uint64_t ranks = htp_world_backend(world) == HTP_BACKEND_LOCAL
                             ? (uint64_t)htp_world_size(world) : 1;
  const uint64_t kernels = counted(own.kernels), balancer = counted(own.balancer);
  uint64_t rank_bytes, needed;
  if (__builtin_add_overflow(bytes, kernels, &rank_bytes) ||
      __builtin_add_overflow(rank_bytes, balancer, &rank_bytes) ||
      __builtin_mul_overflow(rank_bytes, ranks, &needed) || needed > free_bytes) {
    char counted_kernels[96] = "the kernels' own memory not counted: the block does not state it";
    if (own.kernels >= 0)
      snprintf(counted_kernels, sizeof counted_kernels,
               "%.4g GB its kernels may keep of their own", (double)kernels / 1e9);
    char counted_balancer[96] = "";
    if (own.balancer >= 0)
      snprintf(counted_balancer, sizeof counted_balancer, " and %.4g GB its balancer may keep",
               (double)balancer / 1e9);
    snprintf(why, why_size, "the device has %.4g GB free of %.4g GB; the run needs %.4g GB "
             "(%llu rank%s on it x %.4g GB of buffers, %s%s): refused before allocating",
             (double)free_bytes / 1e9, (double)total_bytes / 1e9,
             ((double)bytes + (double)kernels + (double)balancer) * (double)ranks / 1e9,
             (unsigned long long)ranks, ranks == 1 ? "" : "s", (double)bytes / 1e9,
             counted_kernels, counted_balancer);
    return HTP_ERR_NOMEM;
  }
  return 0;
}

int htp_rank_check_own_memory(htp_ctx *ctx, const htp_balancer *balancer,
                              htp_rank_own_bound bound, uint64_t *kernels_held,
                              uint64_t *balancer_held, char *why, size_t why_size) {
  *kernels_held = *balancer_held = 0;
  htp_result result = htp_mem_kernels_own(ctx, kernels_held);
  if (result == HTP_ERR_UNSUPPORTED)
    return 0;
  if (result != HTP_OK) {
    snprintf(why, why_size, "%s", htp_last_error(ctx));
    return result;
  }
  *balancer_held = htp_balancer_device_bytes(balancer);
  static const struct {
    const char *holds, *own, *them, *key;
  } says[2] = {{"its kernels hold", "their", "them", "kernel_memory_bytes"},
               {"its balancer holds", "its", "it", "balancer_memory_bytes"}};
  const uint64_t held[2] = {*kernels_held, *balancer_held};
  const int64_t bounds[2] = {bound.kernels, bound.balancer};
  for (int k = 0; k < 2; k++)
    if (bounds[k] >= 0 && held[k] > (uint64_t)bounds[k]) {
      snprintf(why, why_size, "%s %llu bytes of device memory of %s own, more than the %lld "
               "its block's signature bounds %s to (%s), which the memory check before the "
               "run counted: the compiler's bound (passes/EntryFunction.cpp, "
               "kernels/htp_scratch.h) misses a request", says[k].holds,
               (unsigned long long)held[k], says[k].own, (long long)bounds[k], says[k].them,
               says[k].key);
      return HTP_ERR_INTERNAL;
    }
  return 0;
}

/* One of the bounds over a block and its evaluation block (each at most
 * 2^40: the sum fits). */
static int64_t both(int64_t block, int64_t eval) {
  return block < 0 || eval < 0 ? -1 : block + eval;
}

htp_rank_own_bound htp_rank_own_memory_bound(const htp_signature *sig,
                                             const htp_signature *eval) {
  if (!eval || eval == sig)
    return (htp_rank_own_bound){sig->kernel_memory_bytes, sig->balancer_memory_bytes};
  return (htp_rank_own_bound){both(sig->kernel_memory_bytes, eval->kernel_memory_bytes),
                              both(sig->balancer_memory_bytes, eval->balancer_memory_bytes)};
}

void htp_rank_task_fail(htp_rank_task *task, htp_ctx *ctx, int32_t code, const char *step,
                        long iteration, const char *detail) {
  rank_failed(task, ctx, code, step, iteration, detail);
}

int htp_rank_task_keep_profile(htp_rank_task *task, htp_ctx *ctx, long iterations) {
  keep_profile(task, ctx, iterations);
  return task->ranks->per_process && gather_profile(task, ctx);
}

int htp_rank_task_rank(const htp_rank_task *task) { return task->rank; }

htp_world *htp_rank_task_world(const htp_rank_task *task) { return task->ranks->world; }

/* Runs every local rank's state (threads for local, this one for mpi) and
 * picks the failure to report: the cause first, the others as notes. */
static int run_states(htp_ranks *ranks, rank_state *states, int local_ranks,
                      htp_rank_outcome *outcome) {
  const int size = htp_world_size(ranks->world);
  pthread_t *threads = calloc((size_t)local_ranks, sizeof *threads);
  if (!threads) {
    outcome->failed = 1;
    snprintf(outcome->message, sizeof outcome->message, "out of memory starting the ranks");
    return 1;
  }
  if (ranks->per_process) {
    rank_thread(&states[0]);
  } else {
    int started = 0, why = 0;
    for (; started < size; started++)
      if ((why = pthread_create(&threads[started], NULL, rank_thread, &states[started])) != 0)
        break;
    if (started < size) {
      /* The started ranks would wait for the missing one until the
       * deadline: its context, made here, fails the world at once. */
      htp_ctx *missing = NULL;
      if (htp_ctx_create(ranks->world, started, &missing) == HTP_OK)
        htp_abort(missing, HTP_ERR_SYSTEM);
      htp_ctx_destroy(missing);
      snprintf(states[started].message, sizeof states[started].message,
               "rank %d: cannot start its thread: %s", started, strerror(why));
      states[started].failed = 1;
      states[started].priority = 0;
      states[started].failed_at = 0;
    }
    for (int i = 0; i < started; i++)
      pthread_join(threads[i], NULL);
  }
  free(threads);
  /* The earliest failure is the cause; the rest are noted. */
  int first = -1;
  for (int i = 0; i < local_ranks; i++)
    if (states[i].failed &&
        (first < 0 || states[i].priority < states[first].priority ||
         (states[i].priority == states[first].priority &&
          states[i].failed_at < states[first].failed_at)))
      first = i;
  outcome->died_rank = -1;
  outcome->died_at = -1;
  outcome->hung = 0;
  if (first >= 0 && states[first].injected) {
    outcome->died_rank = states[first].rank;
    outcome->died_at = states[first].failed_iteration;
  }
  for (int i = 0; first >= 0 && outcome->died_rank < 0 && i < local_ranks; i++)
    if (states[i].hung) {
      outcome->died_rank = states[i].rank;
      outcome->died_at = states[i].failed_iteration;
      outcome->hung = 1;
    }
  if (first >= 0) {
    outcome->failed = 1;
    snprintf(outcome->message, sizeof outcome->message, "%s", states[first].message);
    size_t used = 0;
    for (int i = 0; i < local_ranks; i++)
      if (i != first && states[i].failed && used < sizeof outcome->notes)
        used += (size_t)snprintf(outcome->notes + used, sizeof outcome->notes - used, "%s\n",
                                 states[i].message);
  }
  return outcome->failed;
}

int htp_ranks_run_task(htp_ranks *ranks, htp_rank_task_fn fn, void *user,
                       const htp_run_fault *faults, int num_faults, htp_rank_outcome *outcome,
                       char *err, size_t err_size) {
  memset(outcome, 0, sizeof *outcome);
  const int local_ranks = ranks->per_process ? 1 : htp_world_size(ranks->world);
  rank_state *states = calloc((size_t)local_ranks, sizeof *states);
  if (!states)
    return htp_set_error(err, err_size, "out of memory");
  for (int i = 0; i < local_ranks; i++) {
    states[i].ranks = ranks;
    states[i].outcome = outcome; /* its profile (htp_rank_task_keep_profile) */
    states[i].fn = fn;
    states[i].user = user;
    states[i].faults = faults;
    states[i].num_faults = num_faults;
    states[i].rank = ranks->per_process ? htp_world_process_rank(ranks->world) : i;
  }
  int failed = run_states(ranks, states, local_ranks, outcome);
  free(states);
  /* What follows a task until the next one's first wait (putting a snapshot
   * together, a split) every process does at once: not a hang (the fence,
   * under mpirun --elastic). */
  htp_world_fence_rest(ranks->world);
  return failed;
}

void htp_rank_outcome_free(htp_rank_outcome *outcome) {
  free(outcome->compute_s);
  free(outcome->elapsed_s);
  free(outcome->straggler_from);
  free(outcome->straggler_until);
  free(outcome->straggler_speed);
  free(outcome->plan_version);
  free(outcome->plan_action);
  free(outcome->plan_gamma);
  free(outcome->kernel_memory);
  free(outcome->balancer_memory);
  free(outcome->profile_names);
  free(outcome->profile_s);
  outcome->profile_names = NULL;
  outcome->profile_s = NULL;
  outcome->profile_calls = 0;
  htp_plan_record *last = &outcome->last_plan;
  free(last->action);
  free(last->gamma);
  free(last->pruned);
  free(last->sent);
  free(last->received);
  memset(last, 0, sizeof *last);
  outcome->compute_s = outcome->elapsed_s = outcome->straggler_speed = NULL;
  outcome->straggler_from = outcome->straggler_until = NULL;
  outcome->plan_version = NULL;
  outcome->plan_action = NULL;
  outcome->plan_gamma = NULL;
  outcome->kernel_memory = NULL;
  outcome->balancer_memory = NULL;
}

int htp_ranks_run(htp_ranks *ranks, const htp_rank_job *job, htp_rank_outcome *outcome,
                  char *err, size_t err_size) {
  const int size = htp_world_size(ranks->world);
  const int per_process = ranks->per_process; /* mpi, nccl: one rank here */
  memset(outcome, 0, sizeof *outcome);
  int planned = job->balance ? job->balancer.planner.world_size : job->planner.world_size;
  if (planned != size)
    return htp_set_error(err, err_size, "planner for %d ranks, world of %d", planned, size);
  size_t cells = (size_t)size * (size_t)job->iters;
  outcome->compute_s = calloc(cells, sizeof(double));
  outcome->elapsed_s = calloc(cells, sizeof(double));
  outcome->straggler_from = malloc((size_t)size * sizeof(long));
  outcome->straggler_until = malloc((size_t)size * sizeof(long));
  outcome->straggler_speed = calloc((size_t)size, sizeof(double));
  outcome->plan_version = calloc((size_t)job->iters, sizeof(int64_t));
  outcome->plan_action = calloc(cells, 1);
  outcome->plan_gamma = calloc(cells, sizeof(double));
  outcome->kernel_memory = calloc((size_t)size, sizeof(uint64_t));
  outcome->balancer_memory = calloc((size_t)size, sizeof(uint64_t));
  htp_plan_record *last = &outcome->last_plan;
  last->action = calloc((size_t)size, 1);
  last->gamma = calloc((size_t)size, sizeof(double));
  last->pruned = calloc((size_t)(HTP_PAIR_KINDS * size), sizeof(int32_t));
  last->sent = calloc((size_t)(HTP_PAIR_KINDS * size), sizeof(int32_t));
  last->received = calloc((size_t)(HTP_PAIR_KINDS * size), sizeof(int32_t));
  int local_ranks = per_process ? 1 : size;
  rank_state *states = calloc((size_t)local_ranks, sizeof *states);
  if (!outcome->compute_s || !outcome->elapsed_s || !outcome->straggler_from ||
      !outcome->straggler_until || !outcome->straggler_speed || !outcome->plan_version ||
      !outcome->plan_action || !outcome->plan_gamma || !outcome->kernel_memory || !outcome->balancer_memory ||
      !last->action || !last->gamma ||
      !last->pruned || !last->sent || !last->received || !states) {
    free(states);
    htp_rank_outcome_free(outcome);
    return htp_set_error(err, err_size, "out of memory");
  }
  for (int r = 0; r < size; r++)
    outcome->straggler_from[r] = outcome->straggler_until[r] = -1;

  FILE *trace = NULL;
  char trace_temporary[4200], why[4600];
  if (!per_process && job->trace_path &&
      !(trace = htp_file_begin(job->trace_path, trace_temporary, sizeof trace_temporary, why,
                               sizeof why))) {
    free(states);
    htp_rank_outcome_free(outcome);
    return htp_set_error(err, err_size, "--trace: %s", why);
  }
  for (int i = 0; i < local_ranks; i++) {
    states[i].ranks = ranks;
    states[i].job = job;
    states[i].outcome = outcome;
    states[i].trace = trace;
    states[i].faults = job->faults;
    states[i].num_faults = job->num_faults;
    states[i].rank = per_process ? htp_world_process_rank(ranks->world) : i;
  }
  run_states(ranks, states, local_ranks, outcome);
  /* A failed run's trace is committed too: it says what led up to it. */
  if (trace && htp_file_end(trace, trace_temporary, job->trace_path, why, sizeof why) &&
      !outcome->failed) {
    snprintf(outcome->message, sizeof outcome->message, "--trace: %.1900s", why);
    outcome->failed = 1;
  }
  free(states);
  return outcome->failed;
}
