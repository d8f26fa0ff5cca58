/*===- runtime/trace.c - one JSON line per rank per iteration -------------===*
 *
 * The line says what this rank measured and what the (shared) plan asks of
 * it, plus the straggler list, so the plots need no other file. Written with
 * one fwrite under the stream's lock: ranks may share a stream.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L /* flockfile */
#include "runtime/planner_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void htp_planner_set_trace(htp_planner *planner, FILE *stream) {
  if (planner) planner->trace = stream;
}

void htp_planner_note_moved_bytes(htp_planner *planner, uint64_t bytes) {
  if (planner) planner->moved_bytes = bytes;
}

/* A growing line in a fixed stack buffer; a line that does not fit is cut
 * at the last whole straggler and marked "truncated". */
typedef struct line {
  char text[8192];
  size_t used;
  int full;
} line;

static void put(line *l, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void put(line *l, const char *format, ...) {
  if (l->full) return;
  va_list args;
  va_start(args, format);
  int wrote = vsnprintf(l->text + l->used, sizeof l->text - l->used, format, args);
  va_end(args);
  if (wrote < 0 || (size_t)wrote >= sizeof l->text - l->used) {
    l->full = 1;
    l->text[l->used] = '\0';
    return;
  }
  l->used += (size_t)wrote;
}

/* JSON has no inf/nan: write null. */
static void put_number(line *l, const char *name, double value) {
  if (isfinite(value)) put(l, "\"%s\":%.9g,", name, value);
  else put(l, "\"%s\":null,", name);
}

void htp__trace_write(htp_planner *planner, int rank, double seconds, const double *sites) {
  const htp_plan *plan = &planner->plan;
  const int n = plan->world_size;
  line l = {.used = 0, .full = 0};
  put(&l, "{\"iter\":%lld,\"rank\":%d,", (long long)(planner->iteration - 1), rank);
  put_number(&l, "seconds", seconds);
  if (sites) put(&l, "\"site_seconds\":[%.9g,%.9g],", sites[0], sites[1]);
  else put(&l, "\"site_seconds\":null,");
  put_number(&l, "speed", planner->detector.relative[rank]);
  put(&l, "\"plan\":%lld,\"replanned\":%s,\"policy\":\"%s\",", (long long)plan->version,
      planner->replanned_last ? "true" : "false", htp_policy_name(plan->policy));
  put_number(&l, "target_time", plan->target_time);
  put(&l, "\"action\":\"%s\",", htp_action_name((htp_action)plan->action[rank]));
  put_number(&l, "gamma", plan->gamma[rank]);
  put(&l, "\"pruned\":[%d,%d],\"sent\":[%d,%d],\"received\":[%d,%d],", plan->pruned[rank],
      plan->pruned[n + rank], plan->sent[rank], plan->sent[n + rank], plan->received[rank],
      plan->received[n + rank]);
  put(&l, "\"moved_bytes\":%llu,\"stragglers\":[", (unsigned long long)planner->moved_bytes);
  int first = 1, truncated = 0;
  for (int r = 0; r < n; ++r) {
    if (!plan->straggler[r]) continue;
    size_t mark = l.used;
    put(&l, "%s{\"rank\":%d,\"speed\":%.6g,\"gamma\":%.6g,\"action\":\"%s\"}", first ? "" : ",",
        r, plan->speed[r], plan->gamma[r], htp_action_name((htp_action)plan->action[r]));
    /* keep room for the closing text */
    if (l.full || l.used + 64 > sizeof l.text) {
      l.full = 0;
      l.used = mark;
      l.text[mark] = '\0';
      truncated = 1;
      break;
    }
    first = 0;
  }
  put(&l, "]%s}\n", truncated ? ",\"truncated\":true" : "");
  flockfile(planner->trace);
  fwrite(l.text, 1, l.used, planner->trace);
  funlockfile(planner->trace);
}
