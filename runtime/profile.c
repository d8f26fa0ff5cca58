/*===- runtime/profile.c - Where a block's iteration goes, call by call ----===*
 *
 * htp_ctx_profile_* (runtime/htp.h): the calls a compiled block makes on a
 * context (op entry points, balance hooks, all-reduces) timed one by one on
 * the device's own clock (the kernel table's profile timer: events on a
 * GPU's stream), each call waited for before the next, and booked by its
 * place in the iteration, so a block's op k has its seconds per iteration.
 * A call made inside another timed call (a fused op's parts) is in its
 * caller's time. It marks through the context's kernel table itself and
 * writes its refusals to the context's message without failing the world
 * (a misused profile is its caller's error, not one the peers wait on), so
 * it calls into no other runtime file.
 *===----------------------------------------------------------------------===*/
#include "runtime/profile.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct htp__profile {
  int iterations;     /* columns of seconds */
  int iteration;      /* the one being booked; -1 before the first */
  int next;           /* the next call's place in it */
  int depth;          /* timed calls open (0 or 1: inner ones are not timed) */
  int count, room;    /* places seen, places allocated */
  const char **names; /* per place: the first call's name there */
  double *seconds;    /* room x iterations, NAN where no call was booked */
  int broken;         /* a mark failed: the profile stops booking */
  int full;           /* an iteration past `iterations` was refused: so is
                       * every call after it (none overwrites the last
                       * iteration's, none adds places) */
} htp__profile;

static int grow(htp__profile *p, int places) {
  if (places <= p->room) return 0;
  int room = p->room ? 2 * p->room : 64;
  while (room < places) room *= 2;
  const char **names = realloc(p->names, (size_t)room * sizeof *names);
  if (!names) return 1;
  p->names = names;
  double *seconds = realloc(p->seconds, (size_t)room * (size_t)p->iterations * sizeof *seconds);
  if (!seconds) return 1;
  p->seconds = seconds;
  for (size_t i = (size_t)p->room * (size_t)p->iterations;
       i < (size_t)room * (size_t)p->iterations; ++i)
    seconds[i] = NAN;
  p->room = room;
  return 0;
}

/* code, with the message on ctx (when there is one). */
HTP__PRINTF(3, 4)
static htp_result refuse(htp_ctx *ctx, htp_result code, const char *format, ...) {
  if (ctx) {
    va_list args;
    va_start(args, format);
    vsnprintf(ctx->last_error, sizeof ctx->last_error, format, args);
    va_end(args);
    ++ctx->error_count;
  }
  return code;
}

/* The context's profile timer: mark `which`, or with seconds not NULL its
 * elapsed time. Non-zero when the table cannot. */
static int profile_timer(htp_ctx *ctx, int which, double *seconds) {
  const htp_kernel_table *k = ctx->kernels;
  if (!k || !k->mark || !k->elapsed) return 1;
  if (seconds) return k->elapsed(&ctx->kernel_env, HTP_KERNEL_TIMER_PROFILE, seconds);
  return k->mark(&ctx->kernel_env, HTP_KERNEL_TIMER_PROFILE, which);
}

htp_result htp_ctx_profile_start(htp_ctx *ctx, int iterations) {
  if (!ctx || iterations < 1 || iterations > HTP_PROFILE_MAX_ITERATIONS)
    return refuse(ctx, HTP_ERR_INVALID, "htp_ctx_profile_start: ctx is NULL or iterations %d "
                  "not in [1, %d]", iterations, HTP_PROFILE_MAX_ITERATIONS);
  htp_ctx_profile_stop(ctx);
  htp__profile *p = calloc(1, sizeof *p);
  if (!p) return refuse(ctx, HTP_ERR_NOMEM, "htp_ctx_profile_start: out of memory");
  p->iterations = iterations;
  p->iteration = -1;
  ctx->profile = p;
  return HTP_OK;
}

htp_result htp_ctx_profile_iteration(htp_ctx *ctx) {
  if (!ctx || !ctx->profile)
    return refuse(ctx, HTP_ERR_INVALID, "htp_ctx_profile_iteration: no profile started");
  htp__profile *p = ctx->profile;
  if (p->iteration + 1 >= p->iterations) {
    p->full = 1;
    return refuse(ctx, HTP_ERR_INVALID, "htp_ctx_profile_iteration: the profile holds %d "
                  "iterations; the calls after this are not booked", p->iterations);
  }
  p->iteration++;
  p->next = 0;
  return HTP_OK;
}

int htp_ctx_profile_calls(const htp_ctx *ctx) {
  return ctx && ctx->profile ? ctx->profile->count : 0;
}

const char *htp_ctx_profile_call(const htp_ctx *ctx, int call, const double **seconds) {
  if (seconds) *seconds = NULL;
  if (!ctx || !ctx->profile || call < 0 || call >= ctx->profile->count) return NULL;
  const htp__profile *p = ctx->profile;
  if (seconds) *seconds = p->seconds + (size_t)call * (size_t)p->iterations;
  return p->names[call];
}

void htp_ctx_profile_stop(htp_ctx *ctx) {
  if (!ctx || !ctx->profile) return;
  free(ctx->profile->names);
  free(ctx->profile->seconds);
  free(ctx->profile);
  ctx->profile = NULL;
}

int htp__profile_begin(htp_ctx *ctx) {
  htp__profile *p = ctx ? ctx->profile : NULL;
  if (!p || p->broken || p->full || p->iteration < 0) return 0;
  if (p->depth++ > 0) return 2; /* inside a timed call: in its time */
  /* Work queued before this call is not its own: wait for it first. */
  const htp_kernel_table *k = ctx->kernels;
  if (!k || !k->synchronize || k->synchronize(&ctx->kernel_env) != HTP_KERNEL_OK ||
      profile_timer(ctx, 0, NULL)) {
    p->broken = 1;
    p->depth--;
    return 0;
  }
  return 1;
}

void htp__profile_end(htp_ctx *ctx, int timed, const char *what) {
  htp__profile *p = ctx ? ctx->profile : NULL;
  if (!p || timed == 0) return;
  p->depth--;
  if (timed != 1) return;
  double seconds = NAN;
  if (profile_timer(ctx, 1, NULL) || profile_timer(ctx, 1, &seconds)) {
    p->broken = 1;
    return;
  }
  const int place = p->next++;
  if (place >= p->count) {
    if (grow(p, place + 1)) {
      p->broken = 1;
      return;
    }
    p->names[place] = what;
    p->count = place + 1;
  }
  p->seconds[(size_t)place * (size_t)p->iterations + (size_t)p->iteration] = seconds;
}
