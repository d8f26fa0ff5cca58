/*===- runtime/trace.c - one JSON line per rank per iteration -------------===*
 *
 * The line says what this rank measured (compute seconds, seconds spent
 * communicating, its hooks' seconds) and what the (shared) plan asks of it,
 * plus the straggler list, so the plots need no other file. htp.h lists the
 * keys; plotting tools rely on them, so keys are only ever added. Built
 * with jansson and written with one fwrite under the stream's lock: ranks
 * may share a stream.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L /* flockfile */
#include "runtime/balance_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Stragglers listed per line: keeps a line under 8 KiB (an entry is < 100
 * bytes), so an appending stream writes it in one piece. */
#define HTP__TRACE_MAX_STRAGGLERS 64

void htp_balancer_set_trace(htp_balancer *balancer, FILE *stream) {
  if (balancer) balancer->trace = stream;
}

/* JSON has no inf/nan: null. */
static json_t *number(double value) { return isfinite(value) ? json_real(value) : json_null(); }

static json_t *kind_pair(const int32_t *per_kind, int n, int rank) {
  return json_pack("[ii]", (int)per_kind[rank], (int)per_kind[n + rank]);
}

/* Per pair, the local unit ids in one of this rank's shed lists: pruned
 * (which) or handed off. */
static json_t *shed_lists(const htp_unit_table *table, int num_pairs, int pruned) {
  json_t *pairs = json_array();
  for (int p = 0; pairs && p < num_pairs; ++p) {
    htp_unit_sets s;
    json_t *ids = json_array();
    if (!ids || htp_unit_table_get(table, p, &s) != HTP_OK ||
        json_array_append_new(pairs, ids) != 0) {
      json_decref(pairs);
      return NULL;
    }
    const int count = pruned ? s.num_pruned : s.num_out;
    const int32_t *unit = pruned ? s.pruned : s.out_unit;
    for (int i = 0; i < count; ++i) json_array_append_new(ids, json_integer(unit[i]));
  }
  return pairs;
}

static json_t *trace_line(htp_balancer *b, double seconds, const double *sites, int replanned,
                          double comm_seconds) {
  const htp_plan *plan = htp_planner_plan(b->planner);
  const int n = plan->world_size, rank = htp_ctx_rank(b->ctx);
  json_t *stragglers = json_array();
  int listed = 0, truncated = 0;
  for (int r = 0; r < n && stragglers; ++r) {
    if (!plan->straggler[r]) continue;
    if (listed == HTP__TRACE_MAX_STRAGGLERS) {
      truncated = 1;
      break;
    }
    json_array_append_new(stragglers,
                          json_pack("{s:i, s:o, s:o, s:s}", "rank", r, "speed",
                                    number(plan->speed[r]), "gamma", number(plan->gamma[r]),
                                    "action", htp_action_name((htp_action)plan->action[r])));
    listed++;
  }
  /* "o" steals each reference, also when json_pack fails. */
  json_t *line = json_pack(
      "{s:I, s:i, s:o, s:o, s:o, s:o, s:I, s:b, s:s, s:o, s:s, s:o, s:o, s:o, s:o, s:I, s:o}",
      "iter", (json_int_t)(b->trace_first_iter + htp_planner_iteration(b->planner) - 1),
      "rank", rank,
      "seconds", number(seconds), "comm_seconds", number(comm_seconds), "site_seconds",
      sites ? json_pack("[oo]", number(sites[0]), number(sites[1])) : json_null(), "speed",
      number(htp_planner_speeds(b->planner)[rank]), "plan", (json_int_t)plan->version,
      "replanned", replanned, "policy", htp_policy_name(plan->policy), "target_time",
      number(plan->target_time), "action", htp_action_name((htp_action)plan->action[rank]),
      "gamma", number(plan->gamma[rank]), "pruned", kind_pair(plan->pruned, n, rank), "sent",
      kind_pair(plan->sent, n, rank), "received", kind_pair(plan->received, n, rank),
      "moved_bytes", (json_int_t)(b->migration ? htp_migration_last_bytes_received(b->migration)
                                               : 0),
      "stragglers", stragglers);
  if (line) {
    const double *kinds = b->site_model.kind_speed;
    json_object_set_new(line, "fixed_units",
                        sites ? json_pack("[oo]", number(b->site_model.fixed[0]),
                                          number(b->site_model.fixed[1]))
                              : json_null());
    /* 0 is "not measured yet" (the rank has computed no unit of the kind). */
    json_object_set_new(line, "kind_speeds",
                        sites && kinds
                            ? json_pack("[oo]", kinds[rank] > 0 ? number(kinds[rank]) : json_null(),
                                        kinds[(size_t)n + rank] > 0
                                            ? number(kinds[(size_t)n + rank])
                                            : json_null())
                            : json_null());
  }
  if (line && truncated) json_object_set_new(line, "truncated", json_true());
  htp__partition *P = &b->partition;
  if (line && !b->hookless && b->config.repartition_ratio > 0.0) {
    json_object_set_new(line, "owned",
                        json_pack("[ii]", htp_config_owned(&b->config.planner, HTP_PAIR_ATTENTION, rank),
                                  htp_config_owned(&b->config.planner, HTP_PAIR_MLP, rank)));
    json_object_set_new(line, "repartitions", json_integer((json_int_t)P->count));
    if (P->count > 0 && !P->reported) {
      json_object_set_new(line, "repartitioned",
                          json_pack("{s:o, s:o}", "bytes", number(P->last_bytes), "seconds",
                                    number(P->last_seconds)));
      b->partition.reported = 1;
    }
    if (P->held > 0)
      json_object_set_new(line, "partition",
                          json_pack("{s:I, s:o, s:o, s:o, s:s}", "held", (json_int_t)P->held,
                                    "step_bytes", number(P->step_bytes), "spent_bytes",
                                    number(P->spent_bytes), "once_bytes", number(P->once_bytes),
                                    "choice", P->pending ? "repartition" : "migrate"));
  }
  /* Which units a plan sheds, once: on the first line after the hooks
   * applied it (the table changes at apply, after this step's line) that
   * still carries that plan. A step that replanned again describes the new
   * plan, whose counts the applied table's lists would contradict. */
  if (line && b->table && b->applied_version != b->traced_sets_version &&
      b->applied_version == plan->version) {
    json_t *pruned = shed_lists(b->table, b->num_pairs, 1);
    json_t *sent = shed_lists(b->table, b->num_pairs, 0);
    if (pruned && sent) {
      json_object_set_new(line, "pruned_units", pruned);
      json_object_set_new(line, "sent_units", sent);
      b->traced_sets_version = b->applied_version;
    } else {
      json_decref(pruned);
      json_decref(sent);
    }
  }
  return line;
}

void htp__trace_write(htp_balancer *b, double seconds, const double *sites,
                      const double *measured, int replanned) {
  const double comm = htp_ctx_comm_seconds(b->ctx);
  json_t *line = trace_line(b, seconds, sites, replanned, comm - b->comm_at_last_line);
  if (line && measured)
    json_object_set_new(line, "measured_seconds",
                        json_pack("[oo]", number(measured[0]), number(measured[1])));
  b->comm_at_last_line = comm;
  /* The trace is best effort: a line that cannot be built (out of memory)
   * is left out rather than failing the iteration. */
  char *text = line ? json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
  json_decref(line);
  if (!text) return;
  flockfile(b->trace);
  fputs(text, b->trace);
  fputc('\n', b->trace);
  funlockfile(b->trace);
  free(text);
}

void htp_balancer_set_trace_first_iter(htp_balancer *b, int64_t first) {
  if (b) b->trace_first_iter = first > 0 ? first : 0;
}
