/*===- tools/htp-run/step.h - One iteration of one rank -------------------===*
 *
 * The rank step that timed runs (ranks.c) and training (train.c) share: the
 * barrier, the fault point, the --slow factor handed to the balancer, the
 * entry call and what must be timed with it (training: the loss check and
 * the update), timed on the device's clock (htp_ctx_mark/htp_ctx_elapsed),
 * and htp_balancer_end_iteration with what was measured. The runtime
 * chooses which time the planner compares and stretches a hookless block
 * for --slow; the tool only measures and reports.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_STEP_H
#define HTP_RUN_STEP_H

#include "runtime/htp.h"
#include "tools/htp-run/entry.h"
#include "tools/htp-run/options.h"

#include <stdint.h>

/* Why a step failed, for the caller to report (ranks.h:
 * htp_rank_task_fail): the result, what failed, the runtime's message. */
typedef struct htp_step_failure {
  int32_t code;
  const char *what; /* "the barrier", "the fault point", the entry's name, ... */
  char detail[2048];
} htp_step_failure;

/* Work timed with the call; non-zero once it has filled *failure. */
typedef int (*htp_step_after_fn)(void *user, htp_step_failure *failure);

typedef struct htp_rank_step {
  htp_ctx *ctx;
  htp_balancer *balancer; /* hookless for a block without hooks */
  htp_entry_fn fn;
  void **buffers;         /* the entry's, in the context's memory */
  const char *entry;      /* names the call in failures: "the block", "the grad entry" */
  htp_step_after_fn after; /* NULL: nothing */
  void *user;
} htp_rank_step;

typedef struct htp_step_result {
  htp_iteration_times times; /* the balancer's reading of the measure */
  double seconds;            /* from the barrier's end to the balancer's: the iteration's
                              * cost (the exchange of timings, a --slow wait and any
                              * migration transfer included) */
  const htp_plan *plan;      /* in force for the next iteration */
} htp_step_result;

/* The --slow factor of rank at iteration (1 when none applies). */
double htp_step_slowdown(const htp_run_slow *slows, int num_slows, int rank, long iteration);

/* Runs one iteration. Returns 0 with *result, or non-zero with *failure
 * (which the caller reports; the world is not yet aborted). */
int htp_rank_step_run(const htp_rank_step *step, long iteration, double slowdown,
                      htp_step_result *result, htp_step_failure *failure);

/* Fills *failure; returns 1 (for `return htp_step_fail(...)`). */
int htp_step_fail(htp_step_failure *failure, int32_t code, const char *what, const char *detail);

#endif /* HTP_RUN_STEP_H */
