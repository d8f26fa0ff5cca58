/*===- tools/htp-run/ranks.h - Run an entry point on the ranks of a world --===*
 *
 * The multi-rank half of the executor: a libhtprt world (local: one thread
 * per rank in this process; mpi and nccl: this process is one rank) on a
 * device (htp_config.device), each rank with its htp_ctx as the entry's
 * rt_ctx. Each rank runs the block on buffers from its context's memory
 * (htp_mem_alloc: host memory on the CPU, device memory on a GPU): its
 * arguments sliced on the host and uploaded once, its results downloaded
 * after the last iteration. A block with balance hooks gets an
 * htp_balancer on each rank's context before its first call (a hookless
 * one otherwise: detection only). Every iteration is one rank step
 * (step.h, shared with --train). Failures of any rank end the run within
 * the deadline and are reported with the rank, the step and the runtime's
 * message; every thread is joined.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_RANKS_H
#define HTP_RUN_RANKS_H

#include "runtime/htp.h"
#include "tools/htp-run/entry.h"
#include "tools/htp-run/options.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct htp_ranks htp_ranks;

/* What to run. Each rank allocates its buffers (entry.h order: arguments,
 * results, workspace, sizes from sig) in its context's memory, slices each
 * argument from global[i] (sig's shard layout) on the host and uploads it,
 * and after the last iteration downloads result k into results[r][k] (host
 * buffers of sig->results[k].bytes). Under mpi/nccl only results[process
 * rank] is used. */
typedef struct htp_rank_job {
  htp_entry_fn fn;
  const htp_signature *sig;
  const void *const *global;
  void *const *const *results;
  long warmup, iters;
  const htp_run_slow *slows;
  int num_slows;
  const htp_run_fault *faults; /* those registered, to tell an injected death */
  int num_faults;
  /* balance 0: a block without hooks; detection only, with this planner.
   * balance 1: every rank attaches an htp_balancer of this config (its
   * planner.world_size must be the world's size). */
  int balance;
  htp_planner_config planner;
  htp_balancer_config balancer;
  const char *trace_path;     /* NULL: no trace */
  int profile;                /* time each call of the timed iterations (htp_ctx_profile_*) */
} htp_rank_job;

/* A copy of an htp_plan's per-rank content (plans are views that the next
 * planner step invalidates). Arrays: [world] and [kind * world + rank]. */
typedef struct htp_plan_record {
  int64_t version;
  uint8_t *action;   /* htp_action */
  double *gamma;
  int32_t *pruned, *sent, *received; /* units per pair of the kind */
} htp_plan_record;

enum { HTP_RANKS_MESSAGE = 2048 };

/* What came back. Timing arrays are [rank * iters + i] for timed iteration i
 * (all ranks, also under mpi: they are gathered). */
typedef struct htp_rank_outcome {
  double *compute_s;  /* the rank's call minus its time in collectives,
                       * stretched by --slow; seconds */
  double *elapsed_s;  /* from the iteration's barrier to the rank's finish */
  /* Straggler detection as seen by rank 0's planner: per rank, the first and
   * last iteration it was flagged (-1: never) and its relative speed at the
   * last flagged iteration. */
  long *straggler_from, *straggler_until;
  double *straggler_speed;
  /* The plan each timed iteration ran under (rank 0's; every rank computes
   * the same): plan_version[i], plan_action[i * world + r] (htp_action),
   * plan_gamma[i * world + r]; last_plan: the whole plan of the last one.
   * plan_changes counts new plan versions over the whole run (warm-up
   * included); handoff_units sums, over those changes, the units (all
   * layers) each new plan placed on helpers. */
  int64_t *plan_version;
  uint8_t *plan_action;
  double *plan_gamma;
  htp_plan_record last_plan;
  long plan_changes;
  int64_t handoff_units[2];
  /* Per rank, the device memory its kernels and its balancer held of their
   * own after its calls (htp_rank_check_own_memory; 0 on the CPU, and for
   * the ranks of other processes under mpirun). */
  uint64_t *kernel_memory, *balancer_memory;
  /* --profile: the calls of one iteration, in order, each with its name
   * and, per rank, its median seconds over the timed iterations
   * (profile_s[call * world + rank]; NAN for a rank that made no such call;
   * with a process per rank gathered from every process). profile_calls is
   * the most calls any rank made; profile_broken: a rank's marks failed. */
  int profile_calls;
  const char **profile_names;
  double *profile_s;
  int profile_broken;
  int failed;                          /* a rank failed (this process's ranks) */
  char message[HTP_RANKS_MESSAGE];     /* the first failure, "rank R: ..." */
  /* When that failure is an injected death (--fault die), or a deadline
   * that an injected hang (--fault hang) caused: the rank lost and the
   * iteration it died or hung at (hung 1 for a hang); else -1 and -1. */
  int died_rank;
  long died_at;
  int hung;
  char notes[HTP_RANKS_MESSAGE];       /* the other ranks' failures, one per line */
} htp_rank_outcome;

/* Creates the world. backend local: world_size ranks; mpi and nccl:
 * world_size 0, the size comes from mpirun (less `standbys`, mpi: its last
 * processes wait as standbys, htp_config.standbys; fence: a hung process
 * ends itself, htp_config.fence). device: where every
 * rank's kernels and buffers are; matmul_precision: their products with a
 * weight (htp_config.matmul_precision); sm_counts: NULL, or world_size SM
 * counts (device CUDA, local backend: htp_config.sm_counts). Returns 0, or
 * non-zero with err (a build without CUDA or without the backend says so). */
int htp_ranks_open(htp_ranks **ranks, htp_backend backend, int world_size, int standbys,
                   int fence, double timeout_s, htp_device device, int32_t matmul_precision,
                   const int32_t *sm_counts, char *err, size_t err_size);
/* Registers the runtime faults among faults (delay, hang, die; a rejoin is
 * htp-run's own). */
int htp_ranks_add_faults(htp_ranks *ranks, const htp_run_fault *faults, int count, char *err,
                         size_t err_size);
int htp_ranks_size(const htp_ranks *ranks);
/* This process's rank under mpi and nccl, -1 for local. */
int htp_ranks_process_rank(const htp_ranks *ranks);

/* Runs the job on every rank of this process and waits for all of them.
 * Returns 0 on success; non-zero when a rank failed (outcome->message) or
 * the run could not start (err). outcome's arrays are allocated here; free
 * them with htp_rank_outcome_free. */
int htp_ranks_run(htp_ranks *ranks, const htp_rank_job *job, htp_rank_outcome *outcome,
                  char *err, size_t err_size);
void htp_rank_outcome_free(htp_rank_outcome *outcome);

/* A task: any per-rank work (htp-run --train) on the ranks' threads (mpi,
 * nccl: this process's rank), with the failure reporting of a job. fn runs
 * once per rank with that rank's task handle; it makes its own context
 * (htp_ctx_create on htp_rank_task_world) and reports a failure with
 * htp_rank_task_fail, which also aborts the world so the peers stop
 * waiting. Returns 0, or non-zero when a rank failed (outcome->message and
 * notes; only those fields of outcome are used) or with err. */
typedef struct rank_state htp_rank_task;
typedef void (*htp_rank_task_fn)(htp_rank_task *task, void *user);
int htp_ranks_run_task(htp_ranks *ranks, htp_rank_task_fn fn, void *user,
                       const htp_run_fault *faults, int num_faults, htp_rank_outcome *outcome,
                       char *err, size_t err_size);
int htp_rank_task_rank(const htp_rank_task *task);
/* --profile: the rank's profile on ctx (started for `iterations`) into the
 * task's outcome (profile_*: each call's median), gathered from every
 * process where a process runs each rank, then stopped. Every rank calls
 * it. Returns 0, or non-zero after failing the task. */
int htp_rank_task_keep_profile(htp_rank_task *task, htp_ctx *ctx, long iterations);
/* Sorts values (count >= 1) in place and returns their median. */
double htp_median(double *values, long count);
htp_world *htp_rank_task_world(const htp_rank_task *task);
/* Records "rank R: STEP at iteration I failed: CODE: DETAIL" (iteration < 0:
 * none) and aborts the world through ctx (may be NULL). */
void htp_rank_task_fail(htp_rank_task *task, htp_ctx *ctx, int32_t code, const char *step,
                        long iteration, const char *detail);

/* The most device memory a run's kernels and its balancer may hold of their
 * own, beside the buffers (the signatures' kernel_memory_bytes and
 * balancer_memory_bytes); -1: unknown, not counted nor checked. */
typedef struct htp_rank_own_bound {
  int64_t kernels, balancer;
} htp_rank_own_bound;
/* The bound of a run of `sig` (and `eval`, when not NULL and not sig): the
 * own buffers are held at their largest request over both, at most the two
 * bounds together; -1 when either is unknown. */
htp_rank_own_bound htp_rank_own_memory_bound(const htp_signature *sig,
                                             const htp_signature *eval);

/* Before a rank allocates its `bytes` of buffers: on a device with its own
 * memory every rank asks how much is free, the ranks meet (so none has
 * allocated when another asks), and each refuses (non-zero, HTP_ERR_NOMEM,
 * why in `why`) when its device's ranks together need more than is free,
 * counting with each rank's buffers what its kernels and balancer may keep
 * of their own (`own`): the run ends with the figures instead of in a
 * failed cudaMalloc half way. On the CPU (host memory, checked before the
 * ranks start) returns 0 at once. Every rank of the world must call it. */
int htp_rank_check_device_memory(htp_ctx *ctx, uint64_t bytes, htp_rank_own_bound own,
                                 char *why, size_t why_size);
/* After a rank's calls: the device memory its kernels and its balancer
 * (NULL: none) hold of their own in *kernels_held and *balancer_held (0
 * where it is the host's), refused (non-zero, why in `why`) when above
 * `bound`: a request the compiler's bound missed, which
 * htp_rank_check_device_memory did not count. */
int htp_rank_check_own_memory(htp_ctx *ctx, const htp_balancer *balancer,
                              htp_rank_own_bound bound, uint64_t *kernels_held,
                              uint64_t *balancer_held, char *why, size_t why_size);

/* mpi: after processes died (a task failed with "rank R's process died"),
 * the world of the live ones (ranks renumbered in order) into *survivors;
 * lost[] the old ranks gone (at most capacity), *num_lost how many (0: no
 * process died; the failure was something else). Every survivor calls it.
 * The old ranks stay to be closed (which then does not wait for the dead).
 * Non-zero with err where the MPI cannot shrink (no ULFM) or the shrink
 * failed. */
int htp_ranks_shrink(htp_ranks *ranks, htp_ranks **survivors, int32_t *lost, int capacity,
                     int *num_lost, char *err, size_t err_size);

/* Standbys (mpi, htp_config.standbys): whether this process is one (no
 * rank; htp_ranks_size is the world's it waits beside); standby_wait: it
 * waits until the world grows with it (*joined its ranks) or lets it go
 * (*joined NULL); grow: the world's processes take one standby in at rank
 * `rank` (*grown; the old ranks stay to be closed); release: they let every
 * standby go. Non-zero with err. */
int htp_ranks_is_standby(const htp_ranks *ranks);
int htp_ranks_standby_wait(htp_ranks *ranks, htp_ranks **joined, char *err, size_t err_size);
int htp_ranks_grow(htp_ranks *ranks, int rank, htp_ranks **grown, char *err, size_t err_size);
int htp_ranks_release(htp_ranks *ranks, char *err, size_t err_size);

/* Destroys the world. Under mpi a failed world ends the whole job with
 * MPI_Abort (runtime/htp.h), so report first. Accepts NULL. */
void htp_ranks_close(htp_ranks *ranks);
/* A process of an mpi world that fails on its own before or outside a run
 * (a setup error only it met): fails the world, so that its peers stop
 * waiting for it at once instead of at their deadline (and the world's
 * destroy then finds every process). Returns 1 when the world had not
 * failed before (the failure is this process's own), else 0; NULL ranks
 * or a standby's world: 0, nothing done. */
int htp_ranks_abort(htp_ranks *ranks);

#endif /* HTP_RUN_RANKS_H */
