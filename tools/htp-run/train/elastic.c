/*===- tools/htp-run/train/elastic.c - Going on without a lost rank ---------===*
 *
 * --train --elastic (DESIGN §12, shrink and grow). The ranks' state lives on
 * their threads; a rank that dies ends the world (the local world is sticky
 * once failed, §5). So the run keeps, every K steps, a snapshot of the
 * whole model and its optimizer moments in host memory (each rank's copy of
 * its own shards, put together only when a world ends), and when a rank
 * dies htp-run makes
 * a new world of the survivors in this process and resumes from the
 * snapshot: the same compiled block (one SPMD function; its room holds
 * more units than a rank owns when split with --spare), the lost rank's
 * units spread over the survivors' empty slots, the steps since the
 * snapshot replayed on the same batches. A rejoin is the same in the other
 * direction: the world stops at a step, snapshots, and the full world
 * resumes. This file holds what the worlds share (the live ranks, their
 * split, the snapshot buffers, the faults each world registers) and what
 * happens between two of them (who lives next, the events); train.c runs
 * the worlds and takes the snapshots.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/train/job.h"

#include "tools/htp-run/errors.h"
#include "tools/htp-run/slice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows (per qkv block) of a split tensor along its cut, and its unit. */
static int64_t slot_rows(const htp_sig_tensor *t) {
  return t->dims[t->shard_dim] / (t->shard_layout == HTP_SHARD_QKV ? 3 : 1);
}

static int64_t total_units(const int32_t *units, int parts) {
  int64_t total = 0;
  for (int p = 0; p < parts; p++)
    total += units[p];
  return total;
}

/* total units over n ranks, evenly (the remainder to the lower ranks). */
static void even_units(int64_t total, int n, int32_t *out) {
  for (int r = 0; r < n; r++)
    out[r] = (int32_t)(total / n + (r < total % n ? 1 : 0));
}

const int32_t *htp_train_units(const train_job *job, int arg) {
  return job->elastic.units ? job->elastic.units[arg] : job->sig->args[arg].shard_units;
}

/* Under mpirun the survivors of a killed process shrink the communicator
 * (ULFM): refused where that cannot happen, and a rejoin without a standby
 * to come back as. A hung process ends itself (htp_config.fence, set by
 * run.c), so a hang is a death too. Non-zero with err. */
static int mpi_refuses(const htp_run_options *options, char *err, size_t err_size) {
  if (options->backend && strcmp(options->backend, "mpi") != 0)
    return htp_set_error(err, err_size, "--elastic with --backend %s: not built (NCCL 2.27's "
                         "ncclCommShrink would shrink its communicator); use --backend mpi or "
                         "local", options->backend);
  if (!htp_backend_can_shrink(HTP_BACKEND_MPI))
    return htp_set_error(err, err_size, "--elastic under mpirun: this htp-run's MPI cannot "
                         "shrink a communicator (it has no ULFM: Open MPI 4, Debian's, has "
                         "not), so a lost process ends the job; build against an MPI with "
                         "ULFM (scripts/setup.sh installs Open MPI 5 into .ompi5/) or use "
                         "--backend local");
  const char *ft = getenv("OMPI_MCA_mpi_ft_enable");
  if (!ft || !(strcmp(ft, "1") == 0 || strcmp(ft, "true") == 0))
    return htp_set_error(err, err_size, "--elastic under mpirun: the launcher's fault "
                         "tolerance is off, so a killed process would end the job; launch with "
                         "mpirun --with-ft ulfm --mca pml ob1 --mca btl sm,tcp,self");
  int rejoins = 0;
  for (int i = 0; i < options->num_faults; i++)
    rejoins += options->faults[i].kind == HTP_RUN_FAULT_REJOIN;
  if (rejoins > options->train.standby)
    return htp_set_error(err, err_size, "--elastic under mpirun: %d rejoin%s and %ld standby "
                         "process%s: a rank comes back as a new process, a standby that "
                         "waits from the start (--standby %d, and mpirun -np tp + %d)",
                         rejoins, rejoins == 1 ? "" : "s", options->train.standby,
                         options->train.standby == 1 ? "" : "es", rejoins, rejoins);
  return 0;
}

int htp_train_elastic_prepare(const htp_run_options *options, train_job *job, char *err,
                              size_t err_size) {
  train_elastic *e = &job->elastic;
  e->every = -1;
  e->stop_at = -1;
  e->logical_tp = job->tp;
  if (!options->train.elastic_given)
    return 0;
  if (job->process_rank >= 0 && mpi_refuses(options, err, err_size))
    return 1;
  if (job->tp < 2 || !job->balance)
    return htp_set_error(err, err_size, "--elastic needs a split with balance hooks (--tp > 1) "
                         "whose ranks can take a lost rank's units; this run is tp %d", job->tp);
  const htp_signature *sig = job->sig;
  for (int i = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *t = &sig->args[i];
    if (t->role != HTP_SIG_PARAM || t->shard_layout == HTP_SHARD_NONE)
      continue;
    const int spare = (100 + job->tp - 2) / (job->tp - 1); /* percent that makes room */
    if (!t->shard_units)
      return htp_set_error(err, err_size, "--elastic: '%s' is split evenly without spare room: "
                           "a lost rank's units would have nowhere to go; split with spare room "
                           "(--spare P, P >= %d)", t->name, spare);
    const int64_t room = slot_rows(t) / t->shard_unit;
    const int64_t total = total_units(t->shard_units, t->shard_parts);
    if (room * (job->tp - 1) < total)
      return htp_set_error(err, err_size, "--elastic: if a rank is lost, the other %d have room "
                           "for %lld of the %lld units of '%s'; split with more spare room "
                           "(--spare P, P >= %d)", job->tp - 1, (long long)(room * (job->tp - 1)),
                           (long long)total, t->name, spare);
  }
  e->every = options->train.elastic;
  e->original = calloc((size_t)job->tp, sizeof *e->original);
  e->fired = calloc((size_t)options->num_faults + 1, sizeof *e->fired);
  for (int k = 0; k < 2; k++)
    e->owned[k] = calloc((size_t)job->tp, sizeof *e->owned[k]);
  if (!e->original || !e->fired || !e->owned[0] || !e->owned[1])
    return htp_set_error(err, err_size, "out of memory");
  for (int r = 0; r < job->tp; r++)
    e->original[r] = r;
  const int kinds = options->train.optimizer == HTP_TRAIN_ADAMW ? 3 : 2;
  for (int k = 0; k < kinds; k++)
    if (!(e->state[k] = htp_train_param_buffers(sig)))
      return htp_set_error(err, err_size, "out of memory for --elastic's snapshots");
  /* Each rank's copies: its local shards (the local shape is the same for
   * every live rank and world: the room). Under mpirun a process holds its
   * own rows and its buddy's (the rest only while it gathers a snapshot
   * after a death), the local backend every rank's. */
  for (int set = 0; set < 2; set++) {
    if (!(e->maps[set] = calloc((size_t)sig->num_args + 1, sizeof *e->maps[set])))
      return htp_set_error(err, err_size, "out of memory for --elastic's snapshots");
    for (int k = 0; k < kinds; k++)
      if (!(e->copies[set][k] = calloc((size_t)job->tp, sizeof *e->copies[set][k])))
        return htp_set_error(err, err_size, "out of memory for --elastic's snapshots");
    e->set_step[set] = -1;
  }
  for (int set = 0; set < 2; set++)
    for (int k = 0; k < kinds; k++)
      for (int r = 0; r < job->tp; r++)
        if (htp_train_elastic_holds(job, job->process_rank, r) &&
            !htp_train_elastic_copies(job, set, k, r))
          return htp_set_error(err, err_size, "out of memory for --elastic's snapshots");
  /* The first snapshot: where the run starts (zero moments unless resumed). */
  for (int i = 0; i < sig->num_args; i++) {
    if (sig->args[i].role != HTP_SIG_PARAM)
      continue;
    const size_t bytes = sig->args[i].global_bytes;
    memcpy(e->state[0][i], job->params[i], bytes);
    for (int k = 1; k < kinds; k++) {
      if (job->moments[k - 1])
        memcpy(e->state[k][i], job->moments[k - 1][i], bytes);
      else
        memset(e->state[k][i], 0, bytes);
    }
  }
  e->step = e->start_step = job->first_epoch * job->steps;
  return 0;
}

int htp_train_elastic_holds(const train_job *job, int self, int r) {
  return self < 0 || r == self || r == (self + job->tp - 1) % job->tp;
}

void **htp_train_elastic_copies(train_job *job, int set, int k, int r) {
  train_elastic *e = &job->elastic;
  void ***row = &e->copies[set][k][r];
  if (*row)
    return *row;
  const htp_signature *sig = job->sig;
  void **mine = calloc((size_t)sig->num_args + 1, sizeof *mine);
  /* Touched now (zeros), so a snapshot's time is its copy, not the first
   * use of fresh pages. */
  for (int i = 0; mine && i < sig->num_args; i++) {
    if (sig->args[i].role != HTP_SIG_PARAM)
      continue;
    if (!(mine[i] = malloc(sig->args[i].bytes))) {
      for (int j = 0; j < i; j++)
        free(mine[j]);
      free(mine);
      return NULL;
    }
    memset(mine[i], 0, sig->args[i].bytes);
  }
  return *row = mine;
}

void htp_train_elastic_drop_copies(train_job *job, int set, int self) {
  train_elastic *e = &job->elastic;
  const int n = job->sig->num_args;
  for (int k = 0; k < 3; k++)
    for (int r = 0; e->copies[set][k] && r < e->logical_tp; r++) {
      if (!e->copies[set][k][r] ||
          (self >= 0 && r < job->tp && htp_train_elastic_holds(job, self, r)))
        continue;
      for (int i = 0; i < n; i++)
        free(e->copies[set][k][r][i]);
      free(e->copies[set][k][r]);
      e->copies[set][k][r] = NULL;
    }
}

int htp_train_elastic_resume_from(train_job *job, long step, char *err, size_t err_size) {
  train_elastic *e = &job->elastic;
  if (step < 0) { /* the state the world started from */
    e->set_step[0] = e->set_step[1] = -1;
    return 0;
  }
  for (int set = 0; set < 2; set++)
    if (e->set_step[set] == step) {
      e->current = set;
      return 0;
    }
  return htp_set_error(err, err_size, "--elastic: the survivors agreed on the snapshot of step "
                       "%ld, which this process does not hold (it holds %ld and %ld)", step,
                       e->set_step[0], e->set_step[1]);
}

int htp_train_elastic_assemble(train_job *job, char *err, size_t err_size) {
  train_elastic *e = &job->elastic;
  const int set = e->current, parts = job->tp; /* the world that took it: not yet split anew */
  if (e->set_step[set] < 0)
    return 0; /* this world took no snapshot */
  const htp_signature *sig = job->sig;
  for (int k = 0; k < 3 && e->state[k]; k++)
    for (int i = 0; i < sig->num_args; i++) {
      const htp_sig_tensor *t = &sig->args[i];
      if (t->role != HTP_SIG_PARAM)
        continue;
      if (t->shard_layout == HTP_SHARD_NONE) { /* the same on every rank */
        memcpy(e->state[k][i], e->copies[set][k][e->own_rank][i], t->bytes);
        continue;
      }
      const int32_t *map = e->maps[set][i];
      const int64_t room = map ? slot_rows(t) / t->shard_unit : 0;
      int64_t units = 0;
      for (int64_t slot = 0; map && slot < parts * room; slot++)
        units += map[slot] >= 0;
      for (int r = 0; r < parts; r++)
        if (map ? htp_shard_place_slots(e->copies[set][k][r][i], e->state[k][i], t->element_size,
                                        t->rank, t->dims, t->shard_dim, t->shard_layout,
                                        map + (size_t)r * (size_t)room, t->shard_unit, units, err,
                                        err_size)
                : htp_shard_place(e->copies[set][k][r][i], e->state[k][i], t->element_size,
                                  t->rank, t->dims, t->shard_dim, parts, r, t->shard_layout,
                                  htp_train_units(job, i), t->shard_unit, err, err_size))
          return 1;
    }
  e->step = e->set_step[set];
  e->sums = e->set_sums[set];
  e->epoch_seconds = e->set_seconds[set];
  e->set_step[0] = e->set_step[1] = -1;
  return 0;
}

int htp_train_elastic_split(train_job *job, const int *live, int n, char *err, size_t err_size) {
  train_elastic *e = &job->elastic;
  const htp_signature *sig = job->sig;
  for (int i = 0; i < sig->num_args; i++) { /* room for every unit on the live ranks? */
    const htp_sig_tensor *t = &sig->args[i];
    if (t->role != HTP_SIG_PARAM || !t->shard_units)
      continue;
    const int64_t room = slot_rows(t) / t->shard_unit, total = total_units(t->shard_units,
                                                                           t->shard_parts);
    if (room * n < total || total < n)
      return htp_set_error(err, err_size, "--elastic: %d live rank%s %s room for %lld of the "
                           "%lld units of '%s'", n, n == 1 ? "" : "s", n == 1 ? "has" : "have",
                           (long long)(room * n), (long long)total, t->name);
  }
  memcpy(e->original, live, (size_t)n * sizeof *live);
  if (e->units)
    for (int i = 0; i < sig->num_args; i++)
      free(e->units[i]);
  free(e->units);
  e->units = NULL;
  job->tp = n;
  if (n == e->logical_tp)
    return 0; /* everyone: the split as compiled */
  if (!(e->units = calloc((size_t)sig->num_args, sizeof *e->units)))
    return htp_set_error(err, err_size, "out of memory");
  for (int i = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *t = &sig->args[i];
    if (t->role != HTP_SIG_PARAM || !t->shard_units)
      continue;
    if (!(e->units[i] = malloc((size_t)n * sizeof *e->units[i])))
      return htp_set_error(err, err_size, "out of memory");
    even_units(total_units(t->shard_units, t->shard_parts), n, e->units[i]);
  }
  const htp_sig_balance *balance = &sig->balance;
  const int per_rank[2] = {balance->heads, balance->mlp_units};
  const int32_t *compiled[2] = {balance->heads_owned, balance->mlp_units_owned};
  for (int k = 0; k < 2; k++)
    even_units(compiled[k] ? total_units(compiled[k], e->logical_tp)
                           : (int64_t)per_rank[k] * e->logical_tp,
               n, e->owned[k]);
  return 0;
}

int htp_train_elastic_faults(const htp_run_options *options, const train_job *job,
                             htp_run_fault *out) {
  const train_elastic *e = &job->elastic;
  int count = 0;
  for (int i = 0; i < options->num_faults; i++) {
    const htp_run_fault *f = &options->faults[i];
    /* Under mpirun a death is the process killing itself (train.c). */
    if (f->kind == HTP_RUN_FAULT_REJOIN || (e->fired && e->fired[i]) ||
        (job->process_rank >= 0 && e->every >= 0 && f->kind == HTP_RUN_FAULT_DIE) ||
        (e->original && f->iteration < e->start_step))
      continue;
    int live = e->original ? -1 : f->rank;
    for (int r = 0; e->original && r < job->tp; r++)
      if (e->original[r] == f->rank)
        live = r;
    if (live < 0)
      continue; /* not in this world */
    out[count] = *f;
    out[count++].rank = live;
  }
  return count;
}

long htp_train_elastic_next_rejoin(const htp_run_options *options, const train_job *job) {
  const train_elastic *e = &job->elastic;
  long next = -1;
  for (int i = 0; e->original && i < options->num_faults; i++) {
    const htp_run_fault *f = &options->faults[i];
    int live = 0;
    for (int r = 0; r < job->tp; r++)
      live |= e->original[r] == f->rank;
    if (f->kind == HTP_RUN_FAULT_REJOIN && !live && f->iteration > e->start_step &&
        (next < 0 || f->iteration < next))
      next = f->iteration;
  }
  return next;
}

/* --elastic's cost, once the run is over: how often it snapshot and what
 * that took beside the steps (rank 0's clock). */
void htp_train_elastic_report(const htp_run_options *options, const train_job *job) {
  const train_elastic *e = &job->elastic;
  double steps_seconds = 0;
  for (long i = 0; i < job->epochs_done; i++)
    steps_seconds += job->metrics[i].seconds;
  fprintf(stderr, "htp-run: --train --elastic: %ld snapshot%s every %ld steps (%s), %.3g ms "
          "each, %.2g %% of the training steps' wall time\n", e->taken, e->taken == 1 ? "" : "s",
          e->every, options->train.elastic ? "given" : "chosen from the first: about 1 % of a "
          "step", 1e3 * e->seconds / (double)e->taken,
          steps_seconds > 0 ? 100 * e->seconds / steps_seconds : 0.0);
}

int htp_train_elastic_lost(const htp_run_options *options, train_job *job, const int *lost,
                           int num_lost, int hung, long at, int *live, int *n) {
  train_elastic *e = &job->elastic;
  *n = 0;
  if (num_lost < 1 || num_lost >= job->tp)
    return 1; /* not a death the survivors can go on from */
  int gone[HTP_ENTRY_MAX_TP] = {0};
  for (int j = 0; j < num_lost; j++)
    if (lost[j] >= 0 && lost[j] < job->tp)
      gone[lost[j]] = 1;
  char names[128] = "";
  for (int r = 0; r < job->tp; r++) {
    if (!gone[r]) {
      live[(*n)++] = e->original[r];
      continue;
    }
    const int died = e->original[r];
    for (int i = 0; i < options->num_faults; i++) /* what happened does not happen again */
      if (options->faults[i].rank == died &&
          ((options->faults[i].kind == HTP_RUN_FAULT_DIE && !hung &&
            options->faults[i].iteration <= at) ||
           (options->faults[i].kind == HTP_RUN_FAULT_HANG && hung &&
            options->faults[i].iteration <= at)))
        e->fired[i] = 1;
    const size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%d", used ? " and " : "", died);
    if (e->num_events < HTP_RUN_MAX_INJECTIONS) {
      e->events[e->num_events].step = at;
      e->events[e->num_events].replayed = at - e->step;
      e->events[e->num_events].rank = died;
      e->events[e->num_events].tp = job->tp - num_lost;
      e->events[e->num_events++].rejoin = 0;
    }
  }
  if (*n != job->tp - num_lost)
    return 1; /* a lost rank that was not in the world */
  const char *what = hung ? "hung (the deadline found it) at"
                     : job->process_rank < 0 ? "died at"
                     : num_lost == 1        ? "lost its process (noticed at"
                                            : "lost their processes (noticed at";
  snprintf(e->note, sizeof e->note, "htp-run: --train --elastic: rank%s %s %s step %ld%s; went "
           "on at tp %d from the snapshot of step %ld (%ld step%s replayed)",
           num_lost == 1 ? "" : "s", names, what, at, strchr(what, '(') && !hung ? ")" : "", *n,
           e->step, at - e->step, at - e->step == 1 ? "" : "s");
  return 0;
}

/* The live ranks after the world that just ended: without the rank that
 * died (its death noted as happened), or with the ranks whose rejoin is at
 * the step it stopped at. *n of them into live (original ranks, in order);
 * what happened in note. Returns 0, or 1 when the run cannot go on. */
int htp_train_elastic_next_world(const htp_run_options *options, train_job *job,
                                 const htp_rank_outcome *outcome, int failed, int *live, int *n) {
  train_elastic *e = &job->elastic;
  char *note = e->note;
  const size_t size = sizeof e->note;
  *n = 0;
  if (failed) {
    if (outcome->died_rank < 0)
      return 1; /* not a death the survivors can go on from */
    return htp_train_elastic_lost(options, job, &outcome->died_rank, 1, outcome->hung,
                                  outcome->died_at, live, n);
  }
  int back[HTP_ENTRY_MAX_TP] = {0};
  for (int r = 0; r < job->tp; r++)
    back[e->original[r]] = 1;
  int written = snprintf(note, size, "htp-run: --train --elastic: at step %ld rank", e->stop_at);
  for (int i = 0; i < options->num_faults; i++)
    if (options->faults[i].kind == HTP_RUN_FAULT_REJOIN &&
        options->faults[i].iteration == e->stop_at && !back[options->faults[i].rank]) {
      back[options->faults[i].rank] = 1;
      if (e->num_events < HTP_RUN_MAX_INJECTIONS) {
        e->events[e->num_events].step = e->stop_at;
        e->events[e->num_events].replayed = 0;
        e->events[e->num_events].rank = options->faults[i].rank;
        e->events[e->num_events].tp = 0; /* filled below */
        e->events[e->num_events++].rejoin = 1;
      }
      if (written > 0 && (size_t)written < size)
        written += snprintf(note + written, size - (size_t)written, " %d",
                            options->faults[i].rank);
    }
  for (int r = 0; r < e->logical_tp; r++)
    if (back[r])
      live[(*n)++] = r;
  for (int i = 0; i < e->num_events; i++)
    if (e->events[i].rejoin && e->events[i].tp == 0)
      e->events[i].tp = *n;
  if (written > 0 && (size_t)written < size)
    snprintf(note + written, size - (size_t)written, " rejoined: tp %d", *n);
  return 0;
}

void htp_train_elastic_free(train_job *job) {
  train_elastic *e = &job->elastic;
  const int n = job->sig ? job->sig->num_args : 0;
  for (int k = 0; k < 3; k++)
    htp_train_free_globals(e->state[k], n);
  for (int set = 0; set < 2; set++) {
    for (int k = 0; k < 3; k++) {
      for (int r = 0; e->copies[set][k] && r < e->logical_tp; r++) {
        for (int i = 0; e->copies[set][k][r] && i < n; i++)
          free(e->copies[set][k][r][i]);
        free(e->copies[set][k][r]);
      }
      free(e->copies[set][k]);
    }
    for (int i = 0; e->maps[set] && i < n; i++)
      free(e->maps[set][i]);
    free(e->maps[set]);
  }
  if (e->units)
    for (int i = 0; i < n; i++)
      free(e->units[i]);
  free(e->units);
  free(e->original);
  free(e->fired);
  free(e->owned[0]);
  free(e->owned[1]);
  memset(e, 0, sizeof *e);
}
