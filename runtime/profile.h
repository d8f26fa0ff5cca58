/*===- runtime/profile.h - The per-call profile's hooks (internal) --------===*
 *
 * What the runtime's entry points call around a call a compiled block
 * makes (profile.c; the public side is htp.h's htp_ctx_profile_*). The
 * profile reaches the context's kernel table itself, so it depends on no
 * other runtime file.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUNTIME_PROFILE_H
#define HTP_RUNTIME_PROFILE_H

#include "runtime/comm_internal.h"

/* The per-call profile (profile.c): around each call a compiled block makes
 * (an op entry point, a balance hook, an all-reduce), begin returns 1 when
 * this call is timed (profiling on, outside any other timed call: the
 * profile timer marked), 2 inside a timed one, 0 when not profiling; end,
 * given that answer, books a timed call's seconds to its place in the
 * iteration under `what`. Neither fails the call. */
HTP__HIDDEN int htp__profile_begin(htp_ctx *ctx);
HTP__HIDDEN void htp__profile_end(htp_ctx *ctx, int timed, const char *what);
/* A call a compiled block makes, timed as one however many entries it
 * runs (an op, a hook, an all-reduce; a backward with its gradients'
 * zeroing): declared where its time starts, it begins the profile there
 * and ends it at whichever return leaves the scope (a cleanup). */
typedef struct htp__profiled {
  htp_ctx *ctx;
  int timed;
  const char *what;
} htp__profiled;
static inline void htp__profiled_end(htp__profiled *call) {
  htp__profile_end(call->ctx, call->timed, call->what);
}
#define HTP__PROFILED(ctx, what)                                                               \
  htp__profiled profiled_ __attribute__((cleanup(htp__profiled_end))) = {                      \
      (ctx), htp__profile_begin(ctx), (what)}

#endif /* HTP_RUNTIME_PROFILE_H */
