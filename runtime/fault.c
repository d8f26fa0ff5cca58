/*===- runtime/fault.c - fault injection: delay, hang, die ----------------===*
 *
 * Faults are registered on the world and applied by htp_fault_point, which
 * the rank calls once per iteration. They exercise the deadlines: a hung
 * rank must become HTP_ERR_TIMEOUT on its peers, a dead one HTP_ERR_REMOTE.
 * A hang waits on the backend's failure signal (wait_failure), so that the
 * world's failure releases the hung rank and its thread can be joined; in a
 * fenced world (config.fence) it stays stuck until the fence ends the
 * process.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "runtime/comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A hang with no duration of its own lasts at most this many deadlines; the
 * peers time out long before, which releases it. A rank alone in its world
 * has no peer to notice: it hangs one deadline, as long as a peer would
 * have waited for it. */
enum { HANG_CAP_DEADLINES = 10 };

htp_result htp_world_add_fault(htp_world *world, const htp_fault *fault) {
  if (!world) return HTP_ERR_INVALID;
  const char *problem = NULL;
  if (!fault) problem = "fault is NULL";
  else if (fault->kind != HTP_FAULT_DELAY && fault->kind != HTP_FAULT_HANG &&
           fault->kind != HTP_FAULT_DIE)
    problem = "kind is not HTP_FAULT_DELAY, HTP_FAULT_HANG or HTP_FAULT_DIE";
  else if (fault->rank < 0 || fault->rank >= world->size)
    problem = "rank is out of range";
  else if (fault->iteration < 0)
    problem = "iteration is negative";
  else if (!(fault->seconds >= 0) || fault->seconds > 1e7)
    problem = "seconds must be in [0, 1e7]";
  else if (fault->kind == HTP_FAULT_DELAY && fault->seconds == 0)
    problem = "a delay needs seconds > 0";
  pthread_mutex_lock(&world->lock);
  htp_result rc = HTP_OK;
  if (problem) {
    htp__world_message(world, "htp_world_add_fault: %s (rank %d of %d)", problem,
                       fault ? fault->rank : -1, world->size);
    rc = HTP_ERR_INVALID;
  } else {
    if (world->fault_count == world->fault_capacity) {
      int capacity = world->fault_capacity ? 2 * world->fault_capacity : 4;
      htp_fault *faults = realloc(world->faults, (size_t)capacity * sizeof *faults);
      if (!faults) {
        htp__world_message(world, "htp_world_add_fault: out of memory");
        rc = HTP_ERR_NOMEM;
      } else {
        world->faults = faults;
        world->fault_capacity = capacity;
      }
    }
    if (rc == HTP_OK) world->faults[world->fault_count++] = *fault;
  }
  pthread_mutex_unlock(&world->lock);
  return rc;
}

/* The fault due on ctx at iteration, the first registered one winning. */
static int due_fault(htp_ctx *ctx, int64_t iteration, htp_fault *out) {
  htp_world *world = ctx->world;
  int found = 0;
  pthread_mutex_lock(&world->lock);
  for (int i = 0; i < world->fault_count && !found; ++i) {
    const htp_fault *fault = &world->faults[i];
    if (fault->rank != ctx->rank) continue;
    int due = fault->kind == HTP_FAULT_DIE ? iteration == fault->iteration
                                           : iteration >= fault->iteration;
    if (due) {
      *out = *fault;
      found = 1;
    }
  }
  pthread_mutex_unlock(&world->lock);
  return found;
}

htp_result htp_fault_point(htp_ctx *ctx, int64_t iteration) {
  if (!ctx) return HTP_ERR_INVALID;
  htp_result rc = htp__check_failed(ctx, "htp_fault_point");
  if (rc != HTP_OK) return rc;
  if (iteration < 0)
    return htp__ctx_error(ctx, HTP_ERR_INVALID, "htp_fault_point: iteration %lld is negative",
                          (long long)iteration);
  htp_fault fault;
  if (!due_fault(ctx, iteration, &fault)) return HTP_OK;
  htp_world *world = ctx->world;
  switch (fault.kind) {
  case HTP_FAULT_DELAY:
    rc = world->ops->wait_failure(ctx, htp_now() + fault.seconds);
    if (rc != HTP_OK) return htp__check_failed(ctx, "htp_fault_point (delay)");
    return HTP_OK;
  case HTP_FAULT_HANG: {
    const int alone = world->size == 1;
    const double cap = fault.seconds > 0 ? fault.seconds
                                         : (alone ? 1 : HANG_CAP_DEADLINES) * world->config.timeout_s;
    if (world->config.fence) { /* stuck, as in a kernel that never returns: the fence ends it */
      for (const double until = htp_now() + cap; htp_now() < until;) htp__sleep(0.01);
      return htp__fail(ctx, HTP_ERR_TIMEOUT, "htp_fault_point: rank %d hung at iteration %lld "
                       "for %.3g s and its world's fence did not end it", ctx->rank,
                       (long long)iteration, cap);
    }
    rc = world->ops->wait_failure(ctx, htp_now() + cap);
    if (rc == HTP_OK)
      return htp__fail(ctx, HTP_ERR_TIMEOUT, "htp_fault_point: rank %d hung at iteration %lld for "
                       "%.3g s and %s", ctx->rank, (long long)iteration, cap,
                       alone ? "no peer could notice (a world of one rank): its own deadline ended it"
                             : "no peer noticed");
    htp__check_failed(ctx, "htp_fault_point");
    return htp__ctx_error(ctx, HTP_ERR_REMOTE,
                          "htp_fault_point: rank %d hung at iteration %lld (fault injection) "
                          "and was released by the world's failure",
                          ctx->rank, (long long)iteration);
  }
  case HTP_FAULT_DIE:
    htp_abort(ctx, HTP_ERR_REMOTE);
    return htp__ctx_error(ctx, HTP_ERR_REMOTE,
                          "htp_fault_point: rank %d died at iteration %lld (fault injection)",
                          ctx->rank, (long long)iteration);
  case HTP_FAULT_NONE: break;
  }
  return HTP_OK;
}
