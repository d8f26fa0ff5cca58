/*===- tools/htp-run/step.c - One iteration of one rank -------------------===*
 *
 * This file implements step.h.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/step.h"

#include <stdio.h>
#include <string.h>

double htp_step_slowdown(const htp_run_slow *slows, int num_slows, int rank, long iteration) {
  double factor = 1.0;
  for (int i = 0; i < num_slows; i++)
    if (slows[i].rank == rank && iteration >= slows[i].from_iteration)
      factor = slows[i].factor;
  return factor;
}

int htp_step_fail(htp_step_failure *failure, int32_t code, const char *what, const char *detail) {
  failure->code = code;
  failure->what = what;
  snprintf(failure->detail, sizeof failure->detail, "%s", detail ? detail : "");
  return 1;
}

/* "the fault point" is also how ranks.c tells an injected death. */
#define STEP_TRY(call, what)                                                                 \
  do {                                                                                       \
    htp_result try_result_ = (call);                                                         \
    if (try_result_ != HTP_OK)                                                               \
      return htp_step_fail(failure, try_result_, what, htp_last_error(ctx));                 \
  } while (0)

int htp_rank_step_run(const htp_rank_step *step, long iteration, double slowdown,
                      htp_step_result *result, htp_step_failure *failure) {
  htp_ctx *ctx = step->ctx;
  *result = (htp_step_result){{0}, 0, NULL};
  STEP_TRY(htp_barrier(ctx), "the barrier");
  const double started = htp_now();
  STEP_TRY(htp_fault_point(ctx, iteration), "the fault point");
  STEP_TRY(htp_balancer_set_slowdown(step->balancer, slowdown), "the slowdown");
  /* The window is timed on the device's clock: marks around it on the
   * rank's stream (CUDA events; the CPU's monotonic clock), and elapsed
   * waits for its work to finish. Waiting for peers in the block's
   * collectives is not this rank's work: the balancer takes it off. */
  const double comm_before = htp_ctx_comm_seconds(ctx);
  const double thread_before = htp_thread_seconds();
  STEP_TRY(htp_ctx_mark(ctx, 0), "the start mark");
  /* The context keeps its last error: one left from before the call (an
   * unsupported htp_mem_info, say) is not why the entry failed. */
  const uint64_t errors_before = htp_ctx_error_count(ctx);
  int32_t code = step->fn(ctx, step->buffers);
  if (code != 0)
    return htp_step_fail(failure, code, step->entry,
                         htp_ctx_error_count(ctx) != errors_before
                             ? htp_last_error(ctx)
                             : "it returned the code without a runtime call failing "
                               "(no message)");
  if (step->after && step->after(step->user, failure))
    return 1;
  htp_iteration_measure measured = {0, 0, 0};
  STEP_TRY(htp_ctx_mark(ctx, 1), "timing the step");
  STEP_TRY(htp_ctx_elapsed(ctx, &measured.wall_seconds), "timing the step");
  measured.comm_seconds = htp_ctx_comm_seconds(ctx) - comm_before;
  measured.thread_seconds = htp_thread_seconds() - thread_before;
  /* Clocks read apart can disagree by a tick: no figure below 0. */
  if (measured.comm_seconds < 0)
    measured.comm_seconds = 0;
  if (measured.thread_seconds < 0)
    measured.thread_seconds = 0;
  STEP_TRY(htp_balancer_end_iteration(step->balancer, &measured, &result->times, &result->plan),
           "the balancer's end of iteration");
  result->seconds = htp_now() - started;
  return 0;
}
