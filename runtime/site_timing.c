/*===- runtime/site_timing.c - hook clock, --slow, end of iteration --------===*
 *
 * What the balancer's seconds are. A hook (a site: one pair kind) takes its
 * start on the clock htp_balancer_set_clock chose (htp__hook_now) and ends
 * with htp__balancer_end_site, which books its time on its kind: on the
 * device's clock where the kernels only enqueue, stretched by the emulated
 * slowdown of htp_balancer_set_slowdown (--slow), and on HTP_CLOCK_UNITS
 * also as the planner's modelled seconds. At the end of an iteration
 * htp_balancer_end_iteration turns what the caller measured and what the
 * hooks booked into the seconds the planner compares (stretching a
 * hookless block for --slow), steps (balancer_step.c) and applies the plan
 * (unit_weights.c).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"

#include "kernels/htp_kernel_table.h"

#include <math.h>

htp_result htp_balancer_set_slowdown(htp_balancer *b, double factor) {
  if (!b) return HTP_ERR_INVALID;
  if (!(factor >= 1.0 && factor <= 1e6))
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID, "htp_balancer_set_slowdown: factor %.17g not in [1, 1e6]",
                     factor);
  b->slowdown = factor;
  return HTP_OK;
}

htp_result htp_balancer_set_clock(htp_balancer *b, htp_clock clock) {
  if (!b) return HTP_ERR_INVALID;
  if (clock != HTP_CLOCK_WALL && clock != HTP_CLOCK_THREAD && clock != HTP_CLOCK_UNITS)
    return htp__ctx_error(b->ctx, HTP_ERR_INVALID, "htp_balancer_set_clock: clock %d is none of "
                          "HTP_CLOCK_WALL, HTP_CLOCK_THREAD, HTP_CLOCK_UNITS", (int)clock);
  b->clock = clock;
  return HTP_OK;
}

double htp__hook_now(const htp_ctx *ctx) {
  const htp_balancer *b = ctx ? ctx->balancer : NULL;
  return b && b->clock != HTP_CLOCK_WALL ? htp_thread_seconds() : htp_now();
}

/* The emulated straggler's wait of `seconds`: spinning below 200 us, where a
 * sleep would overshoot by the timer's granularity, else waiting on the
 * world (its wait_failure), so a wait of hours (--slow R:1e6) ends as soon
 * as a peer's deadline fails the world instead of holding the run. */
static htp_result slow_wait(htp_balancer *b, double seconds) {
  htp_ctx *ctx = b->ctx;
  if (seconds <= 0.0) return HTP_OK;
  if (seconds < 2e-4) {
    double until = htp_now() + seconds;
    while (htp_now() < until) {
    }
    return HTP_OK;
  }
  if (ctx->world->ops->wait_failure(ctx, htp_now() + seconds) != HTP_OK)
    return htp__check_failed(ctx, "the emulated slowdown (--slow)");
  return HTP_OK;
}

void htp__balancer_add_site_seconds(htp_balancer *b, htp_pair_kind kind, double seconds) {
  if (b && kind >= HTP_PAIR_ATTENTION && kind < HTP_PAIR_KINDS) b->site_seconds[kind] += seconds;
}

/* Books `elapsed` seconds of a hook's compute on kind: waits (slowdown - 1)
 * times it (the emulated straggler, wall clock only) and adds slowdown times
 * it to the site seconds; on HTP_CLOCK_UNITS also `units` (the units the
 * call ran, weighted: backward counts twice) to the modelled seconds. */
static htp_result book_site(htp_balancer *b, htp_pair_kind kind, double elapsed, double units) {
  /* On the thread clock the wait would not show (it is no CPU work): the
   * caller models the slowed time from the booked seconds instead. */
  if (b->clock == HTP_CLOCK_WALL) {
    htp_result r = slow_wait(b, (b->slowdown - 1.0) * elapsed);
    if (r != HTP_OK) return r;
  }
  htp__balancer_add_site_seconds(b, kind, b->slowdown * elapsed);
  b->unit_seconds[kind] += b->slowdown * units * b->config.planner.unit_cost[kind] *
                           HTP_UNIT_CLOCK_SECONDS;
  return HTP_OK;
}

/* Ends a hook's timing and books it. The emulated slowdown waits
 * (factor - 1) times the hook's time right here, before the block's
 * all-reduce, as a slower device would be late to it; a rank that sheds
 * units sheds slowed time too. The hook books factor times its compute, so
 * detection sees the factor exactly even where the wait overshoots.
 *
 * Whose clock times a hook. On the CPU the kernels finish before they
 * return, so the host's clock around the hook is its compute (unchanged:
 * the CPU tests and benchmarks rest on it). On a device the kernels only
 * enqueue: the host's clock would book the launches, not the compute, and
 * every rank would look equally fast. There the hook marks the rank's
 * stream before and after its work (htp_ctx_mark: the table's events) and
 * books the device's time between them; htp_ctx_elapsed waits for the
 * hook's work, one wait per hook. The hooks' marks are a timer of their own
 * (HTP_KERNEL_TIMER_HOOKS), so a caller timing the whole iteration with
 * htp_ctx_mark keeps its marks. */
htp_result htp__balancer_end_site(htp_ctx *ctx, htp_balancer *b, htp_pair_kind kind,
                                  int on_device, double units, double started) {
  double elapsed = 0.0;
  if (!on_device) {
    elapsed = htp__hook_now(ctx) - started;
  } else {
    htp_result r = htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_HOOKS, 1);
    if (r == HTP_OK) r = htp__ctx_elapsed_timer(ctx, HTP_KERNEL_TIMER_HOOKS, &elapsed);
    if (r != HTP_OK) return r;
  }
  return book_site(b, kind, elapsed, units);
}

double htp_balancer_hook_seconds(const htp_balancer *b) {
  return b ? b->site_seconds[HTP_PAIR_ATTENTION] + b->site_seconds[HTP_PAIR_MLP] : 0.0;
}

/* The measure's figures are the caller's: refuse what no clock gives. */
static int measure_is_valid(const htp_iteration_measure *m) {
  const double figures[] = {m->wall_seconds, m->comm_seconds, m->thread_seconds};
  for (size_t i = 0; i < sizeof figures / sizeof *figures; i++)
    if (!(figures[i] >= 0.0) || !isfinite(figures[i])) return 0;
  return 1;
}

htp_result htp_balancer_end_iteration(htp_balancer *b, const htp_iteration_measure *measured,
                                      htp_iteration_times *times, const htp_plan **plan_out) {
  if (plan_out) *plan_out = NULL;
  if (times) *times = (htp_iteration_times){0};
  if (!b) return HTP_ERR_INVALID;
  /* Collective: bad arguments fail the world, so the peers stop at once
   * instead of waiting out their deadline for this rank. */
  if (!measured || !measure_is_valid(measured))
    return htp__fail(b->ctx, HTP_ERR_INVALID,
                          measured ? "htp_balancer_end_iteration: a measured figure (wall %g, comm "
                                     "%g, thread %g seconds) is negative or not finite"
                                   : "htp_balancer_end_iteration: measured is NULL",
                          measured ? measured->wall_seconds : 0.0,
                          measured ? measured->comm_seconds : 0.0,
                          measured ? measured->thread_seconds : 0.0);
  double compute = b->clock == HTP_CLOCK_WALL ? measured->wall_seconds - measured->comm_seconds
                                              : measured->thread_seconds;
  if (compute < 0.0) compute = 0.0;
  /* --slow without hooks: the whole iteration is the work to stretch. With
   * hooks they stretch the unit work themselves (book_site), so shedding
   * units sheds slowed time. */
  if (b->hookless && b->slowdown > 1.0) {
    if (b->clock == HTP_CLOCK_WALL) {
      htp_result r = slow_wait(b, (b->slowdown - 1.0) * compute);
      if (r != HTP_OK) return r;
    }
    compute *= b->slowdown;
  }
  const double hooks = htp_balancer_hook_seconds(b);
  /* The planner compares the work it can move: the hooks' time. */
  const double planned = hooks > 0.0 ? hooks : compute > 0.0 ? compute : 1e-9;
  const htp_plan *plan = NULL;
  htp_result r = htp_balancer_step(b, planned, &plan);
  if (r == HTP_OK) r = htp__partition_carry_out(b, &plan);
  if (r != HTP_OK) return r;
  r = htp__balancer_apply(b, plan);
  if (r != HTP_OK) return r;
  if (times) *times = (htp_iteration_times){compute, hooks, planned};
  if (plan_out) *plan_out = plan;
  return HTP_OK;
}
