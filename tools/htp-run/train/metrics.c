/*===- tools/htp-run/train/metrics.c - --metrics --------------------------===*
 *
 * The epochs so far, the stragglers and the run's settings, as one JSON
 * object (written to a temporary file, then renamed).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/train/job.h"

#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static json_t *finite_or_null(double value) {
  return isfinite(value) ? json_real(value) : json_null();
}

int htp_train_write_metrics(const train_job *job, const char *eval_entry, char *err,
                         size_t err_size) {
  const htp_run_options *options = job->options;
  json_t *root = json_object(), *epochs = json_array(), *stragglers = json_array();
  if (!root || !epochs || !stragglers) {
    json_decref(root);
    json_decref(epochs);
    json_decref(stragglers);
    return htp_set_error(err, err_size, "out of memory");
  }
  json_t *earlier = job->earlier_metrics;
  for (size_t i = 0; earlier && i < json_array_size(earlier); i++)
    json_array_append(epochs, json_array_get(earlier, i));
  for (long e = 0; e < job->epochs_done; e++) {
    const epoch_metrics *m = &job->metrics[e];
    /* A figure that is not finite (an epoch whose every step was skipped
     * has no train loss; a diverged model's test loss is NaN) is null:
     * JSON has no NaN, and jansson refuses to pack one. */
    json_t *row = json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "epoch",
                            (json_int_t)m->epoch, "train_loss", finite_or_null(m->train_loss),
                            "train_acc", finite_or_null(m->train_acc), "test_loss",
                            finite_or_null(m->test_loss), "test_acc",
                            finite_or_null(m->test_acc), "epoch_s", finite_or_null(m->seconds),
                            "eval_s", finite_or_null(m->eval_seconds), "ms_per_step",
                            finite_or_null(m->ms_per_step));
    if (row && options->train.clock != HTP_TRAIN_CLOCK_WALL)
      json_object_set_new(row, "model_s", finite_or_null(m->model_seconds));
    if (row && options->train.skip_nonfinite)
      json_object_set_new(row, "skipped_steps", json_integer(m->skipped));
    if (!row || json_array_append_new(epochs, row) != 0) {
      json_decref(root);
      json_decref(epochs);
      json_decref(stragglers);
      return htp_set_error(err, err_size, "--metrics: epoch %ld's row: out of memory", m->epoch);
    }
  }
  for (int r = 0; r < job->tp; r++)
    if (job->stragglers[r])
      json_array_append_new(stragglers, json_integer(r));
  json_object_set_new(root, "entry", json_string(job->sig->entry));
  json_object_set_new(root, "eval_entry", json_string(eval_entry));
  json_object_set_new(root, "file", json_string(options->path));
  json_object_set_new(root, "tp", json_integer(job->tp));
  json_object_set_new(root, "backend", json_string(options->backend));
  json_object_set_new(root, "device", json_string(options->device));
  json_object_set_new(root, "matmul_precision",
                      json_string(htp_run_matmul_precision_name(options->matmul_precision)));
  json_object_set_new(root, "policy", json_string(htp_policy_name(options->policy)));
  json_object_set_new(root, "slow", options->slow ? json_string(options->slow) : json_null());
  json_object_set_new(root, "select", json_string(htp_select_name(options->selection)));
  json_object_set_new(root, "impute", json_string(htp_impute_name(options->impute)));
  if (options->impute == HTP_IMPUTE_SAME)
    json_object_set_new(root, "same_max_age", json_integer(options->same_max_age));
  json_object_set_new(root, "optimizer", json_string(htp_run_optimizer_name(options->train.optimizer)));
  json_object_set_new(root, "lr", json_real(options->train.lr));
  json_object_set_new(root, "augment", json_string(htp_run_augment_name(options->train.augment)));
  json_object_set_new(root, "label_smoothing", json_real(options->train.label_smoothing));
  json_object_set_new(root, "random_erase", json_real(options->train.random_erase));
  json_object_set_new(root, "clock", json_string(htp_run_clock_name(options->train.clock)));
  json_object_set_new(root, "schedule", json_string(options->train.schedule == HTP_TRAIN_COSINE
                                                        ? "cosine" : "constant"));
  json_object_set_new(root, "weight_decay", json_real(options->train.weight_decay));
  json_object_set_new(root, "momentum", json_real(options->train.momentum));
  json_object_set_new(root, "seed", json_integer((json_int_t)options->seed));
  json_object_set_new(root, "batch", json_integer(job->batch));
  json_object_set_new(root, "train_examples", json_integer(job->train->count));
  json_object_set_new(root, "test_examples", json_integer(job->test->count));
  json_object_set_new(root, "steps_per_epoch", json_integer(job->steps));
  json_object_set_new(root, "first_epoch", json_integer(earlier ? job->earlier_first_epoch
                                                               : job->first_epoch + 1));
  json_object_set_new(root, "resumed_after_epoch",
                      job->first_epoch ? json_integer(job->first_epoch) : json_null());
  json_object_set_new(root, "stragglers", stragglers);
  /* What the policies move: heads and MLP units a rank (null unbalanced). */
  const htp_sig_balance *balance = &job->sig->balance;
  json_object_set_new(root, "units_per_rank",
                      balance->present ? json_pack("[ii]", balance->heads, balance->mlp_units)
                                       : json_null());
  json_object_set_new(root, "repartitions", json_integer(job->repartitions));
  /* --elastic: how often it snapshot, and the deaths and rejoins so far. */
  const train_elastic *e = &job->elastic;
  json_t *elastic = json_null();
  if (e->every >= 0) {
    json_t *events = json_array();
    for (int i = 0; events && i < e->num_events; i++)
      json_array_append_new(events, json_pack("{s:s, s:i, s:I, s:I, s:i}", "event",
                                              e->events[i].rejoin ? "rejoin" : "death", "rank",
                                              e->events[i].rank, "step",
                                              (json_int_t)e->events[i].step, "replayed",
                                              (json_int_t)e->events[i].replayed, "tp",
                                              e->events[i].tp));
    elastic = json_pack("{s:I, s:I, s:f, s:o}", "every", (json_int_t)e->every, "snapshots",
                        (json_int_t)e->taken, "snapshot_seconds", e->seconds,
                        "events", events ? events : json_null());
  }
  json_object_set_new(root, "elastic", elastic ? elastic : json_null());
  json_object_set_new(root, "epochs", epochs);
  char temporary[4200], why[4600];
  FILE *file = NULL;
  if (htp_file_temporary_name(options->train.metrics, temporary, sizeof temporary))
    snprintf(why, sizeof why, "the name is too long");
  else if ((file = htp_file_create(temporary, why, sizeof why)) != NULL) {
    int ok = json_dumpf(root, file, JSON_INDENT(1) | JSON_PRESERVE_ORDER) == 0;
    if (htp_file_finish(file, ok, temporary, why, sizeof why) == 0 &&
        htp_file_commit(temporary, options->train.metrics, why, sizeof why) == 0) {
      json_decref(root);
      return 0;
    }
  }
  json_decref(root);
  return htp_set_error(err, err_size, "--metrics %s: %s", options->train.metrics, why);
}


int htp_train_read_earlier_metrics(train_job *job, char *err, size_t err_size) {
  const htp_run_options *options = job->options;
  const char *path = options->train.metrics;
  if (!options->train.resume || !path || job->first_epoch < 1)
    return 0;
  struct stat info;
  if (stat(path, &info) != 0)
    return 0; /* a new file */
  json_error_t error;
  errno = 0; /* jansson says "invalid token" or nothing when memory runs short */
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &error);
  json_t *kept = json_array();
  if ((!root && (errno == ENOMEM || json_error_code(&error) == json_error_out_of_memory)) ||
      !kept)
    goto short_of_memory;
  json_t *rows = root ? json_object_get(root, "epochs") : NULL;
  json_t *first = root ? json_object_get(root, "first_epoch") : NULL;
  long last = 0;
  int ok = json_is_array(rows) && json_is_integer(first);
  for (size_t i = 0; ok && i < json_array_size(rows); i++) {
    json_t *epoch = json_object_get(json_array_get(rows, i), "epoch");
    ok = json_is_integer(epoch) && json_integer_value(epoch) == json_integer_value(first) + (long)i;
    if (ok && json_integer_value(epoch) <= job->first_epoch) {
      if (json_array_append(kept, json_array_get(rows, i)))
        goto short_of_memory;
      last = (long)json_integer_value(epoch);
    }
  }
  if (!ok || json_array_size(kept) == 0) {
    fprintf(stderr, "htp-run: note: --metrics %s: %s; the file is replaced by this run's epochs "
            "(from %ld)\n", path, !root ? error.text : !ok ? "not the metrics of htp-run --train "
            "(no consecutive epochs)" : "it has no epoch the checkpoint holds",
            job->first_epoch + 1);
    json_decref(kept);
  } else {
    job->earlier_metrics = kept;
    job->earlier_first_epoch = (long)json_integer_value(first);
    if (last < job->first_epoch)
      fprintf(stderr, "htp-run: note: --metrics %s holds epochs %ld to %ld and --resume is at "
              "epoch %ld: epochs %ld to %ld have no row (the run that wrote them stopped "
              "before its metrics caught up)\n", path, job->earlier_first_epoch, last,
              job->first_epoch, last + 1, job->first_epoch);
  }
  json_decref(root);
  return 0;
short_of_memory:
  json_decref(root);
  json_decref(kept);
  return htp_set_error(err, err_size, "--metrics %s: out of memory reading its earlier epochs",
                       path);
}

void htp_train_free_metrics(train_job *job) {
  json_decref(job->earlier_metrics);
  job->earlier_metrics = NULL;
}
