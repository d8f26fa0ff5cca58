/*===- tools/htp-run/train/train.c - htp-run --train ----------------------===*
 *
 * Trains a block's gradient entry on Fashion-MNIST with htp-run's own
 * machinery: the loader (JIT or .so), the signature, the world and its
 * rank threads (ranks.h tasks), each rank's buffers in its context's
 * memory, the shard layouts (slice.h), --params through the safetensors
 * binder, --slow/--fault and straggler detection. Per step every rank
 * takes the same batch, calls the grad entry (loss, logits, one gradient
 * per parameter: LOCAL shards, so a rank updates only what it holds), then
 * updates its parameters in place with the kernel table's optimizer entry
 * on device memory. After each epoch the test set runs through the eval
 * entry (the grad entry's name without "_grad"), rank 0 gathers the shards
 * into a timm-named checkpoint and writes the metrics.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/train/train.h"

#include "tools/htp-run/train/job.h"

#include "kernels/htp_kernel_table.h" /* HTP_MATMUL_F32 */
#include "kernels/htp_kernels.h"      /* htp_cpu_set_blas_threads */
#include "runtime/htp_ops.h" /* htp_op_sgd_momentum_f32, htp_op_adamw_f32 */
#include "tools/htp-run/data.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"
#include "tools/htp-run/safetensors.h"
#include "tools/htp-run/slice.h"
#include "tools/htp-run/so_loader.h"
#include "tools/htp-run/step.h"
#include "tools/htp-run/train/dataset.h"
#include "tools/htp-run/train/init.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* The ranks.                                                              */

static double learning_rate(const htp_train_options *train, long step, long total) {
  if (train->schedule == HTP_TRAIN_CONSTANT || total <= 0)
    return train->lr;
  return train->lr * 0.5 * (1.0 + cos(3.14159265358979323846 * (double)step / (double)total));
}

/* timm's no-decay group: vectors (biases, norms) and the cls/pos tokens. */
static int decays(const htp_sig_tensor *p) {
  return p->rank >= 2 && strcmp(p->name, "cls_token") != 0 && strcmp(p->name, "pos_embed") != 0;
}

/* Mean cross-entropy (double) and correct argmaxes of the first `rows`
 * rows of logits against labels. */
static void score(const float *logits, const int32_t *labels, int rows, double *loss_sum,
                  long *correct) {
  for (int r = 0; r < rows; r++) {
    const float *row = logits + (size_t)r * HTP_FMNIST_CLASSES;
    int best = 0;
    double top = row[0];
    for (int k = 1; k < HTP_FMNIST_CLASSES; k++)
      if (row[k] > top) {
        top = row[k];
        best = k;
      }
    double sum = 0;
    for (int k = 0; k < HTP_FMNIST_CLASSES; k++)
      sum += exp((double)row[k] - top);
    *loss_sum += log(sum) + top - (double)row[labels[r]];
    *correct += best == labels[r];
  }
}

/* One rank's device state. */
typedef struct rank_buffers {
  void **grad;    /* [num_args + num_results + 1] */
  void **eval;    /* [num_args + eval results + 1]: arguments shared with grad */
  void **m, **v;  /* [num_args] moments of parameters */
  void *gather;   /* checkpoint: world x the largest sharded parameter */
} rank_buffers;

typedef struct rank_run {
  htp_rank_task *task;
  htp_ctx *ctx;
  train_job *job;
  int rank;
  htp_balancer *balancer;
  long every;       /* --elastic: steps between snapshots (0: choose; -1: off) */
  long snapshot_at; /* steps done at this rank's last snapshot */
  double step_sum;  /* --elastic 0: seconds of this world's steps after its first */
  long step_count;
  int profiled;     /* --profile: this rank's profiled epoch is done */
} rank_run;

/* --elastic 0 chooses K once this many steps after a world's first were timed. */
enum { ELASTIC_TIMED_STEPS = 7 };

#define RANK_TRY(call, step, iteration)                                                      \
  do {                                                                                       \
    htp_result try_result_ = (call);                                                         \
    if (try_result_ != HTP_OK) {                                                             \
      htp_rank_task_fail(run->task, run->ctx, try_result_, step, iteration,                  \
                         htp_last_error(run->ctx));                                          \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

/* Whether this rank keeps the run's books (scores, epoch metrics, the
 * snapshots' sums): rank 0, and under mpirun with --elastic every process,
 * so that whichever survives can take rank 0's place. Only rank 0 prints
 * and writes them. */
static int keeps_books(const rank_run *run) {
  return run->rank == 0 || (run->job->process_rank >= 0 && run->job->elastic.every >= 0);
}

/* Uploads the rank's slice of global (host, global shape) into device. */
static int upload_slice(rank_run *run, const htp_sig_tensor *t, const void *global,
                        void *device) {
  void *slice = NULL;
  if (t->shard_layout != HTP_SHARD_NONE) {
    char reason[512];
    if (!(slice = malloc(t->bytes))) {
      htp_rank_task_fail(run->task, run->ctx, HTP_ERR_NOMEM, "slicing", -1, "out of memory");
      return 1;
    }
    if (htp_shard_slice(global, slice, t->element_size, t->rank, t->dims, t->shard_dim,
                        run->job->tp, run->rank, t->shard_layout,
                        htp_train_units(run->job, (int)(t - run->job->sig->args)), t->shard_unit,
                        reason, sizeof reason)) {
      free(slice);
      htp_rank_task_fail(run->task, run->ctx, HTP_ERR_INVALID, "slicing", -1, reason);
      return 1;
    }
  }
  htp_result result = htp_mem_upload(run->ctx, device, slice ? slice : global, t->bytes);
  free(slice);
  RANK_TRY(result, "uploading its parameters", -1);
  return 0;
}

static size_t entry_buffer_bytes(const htp_signature *sig, int i) {
  if (i < sig->num_args)
    return sig->args[i].bytes;
  if (i < sig->num_args + sig->num_results)
    return sig->results[i - sig->num_args].bytes;
  return sig->workspace_bytes;
}

/* What make_buffers will allocate, against the device's free memory.
 * Returns 0, or non-zero after failing the task. */
static int check_device_memory(rank_run *run) {
  const train_job *job = run->job;
  const htp_signature *sig = job->sig, *eval = job->eval_sig;
  const int kinds = job->options->train.optimizer == HTP_TRAIN_ADAMW ? 2 : 1;
  uint64_t bytes = 0, largest = 0;
  for (int i = 0; i < sig->num_args + sig->num_results + 1; i++)
    bytes += entry_buffer_bytes(sig, i) + 1;
  if (eval != sig)
    for (int i = eval->num_args; i < eval->num_args + eval->num_results + 1; i++)
      bytes += entry_buffer_bytes(eval, i) + 1;
  for (int i = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *p = &sig->args[i];
    if (p->role != HTP_SIG_PARAM)
      continue;
    bytes += (uint64_t)kinds * p->bytes;
    if (p->shard_layout != HTP_SHARD_NONE && p->bytes > largest)
      largest = p->bytes;
  }
  if (job->options->train.checkpoint)
    bytes += largest * (uint64_t)job->tp;
  char why[512];
  htp_result result = htp_rank_check_device_memory(
      run->ctx, bytes, htp_rank_own_memory_bound(sig, eval), why, sizeof why);
  if (result != HTP_OK)
    htp_rank_task_fail(run->task, run->ctx, result, "checking its device's memory", -1, why);
  return result != HTP_OK;
}

static int make_buffers(rank_run *run, rank_buffers *b) {
  const train_job *job = run->job;
  const htp_signature *sig = job->sig, *eval = job->eval_sig;
  const int n = sig->num_args + sig->num_results + 1;
  const int ne = eval->num_args + eval->num_results + 1;
  if (!(b->grad = calloc((size_t)n, sizeof *b->grad)) ||
      !(b->eval = calloc((size_t)ne, sizeof *b->eval)) ||
      !(b->m = calloc((size_t)sig->num_args + 1, sizeof *b->m)) ||
      !(b->v = calloc((size_t)sig->num_args + 1, sizeof *b->v))) {
    htp_rank_task_fail(run->task, run->ctx, HTP_ERR_NOMEM, "allocating its buffers", -1,
                       "out of memory");
    return 1;
  }
  if (check_device_memory(run))
    return 1;
  for (int i = 0; i < n; i++) {
    size_t bytes = entry_buffer_bytes(sig, i);
    RANK_TRY(htp_mem_alloc(run->ctx, bytes ? bytes : 1, &b->grad[i]), "allocating its buffers",
             -1);
  }
  if (eval != sig)
    for (int i = eval->num_args; i < ne; i++) {
      size_t bytes = entry_buffer_bytes(eval, i);
      RANK_TRY(htp_mem_alloc(run->ctx, bytes ? bytes : 1, &b->eval[i]),
               "allocating its buffers", -1);
    }
  size_t largest = 0;
  for (int i = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *p = &sig->args[i];
    b->eval[i] = b->grad[i];
    if (p->role != HTP_SIG_PARAM)
      continue;
    /* Under --elastic every world starts from the snapshot (the first is
     * the starting weights). */
    const int elastic = job->elastic.every >= 0;
    if (upload_slice(run, p, elastic ? job->elastic.state[0][i] : job->params[i], b->grad[i]))
      return 1;
    void **moment[2] = {&b->m[i], &b->v[i]};
    const int kinds = job->options->train.optimizer == HTP_TRAIN_ADAMW ? 2 : 1;
    for (int kind = 0; kind < kinds; kind++) {
      RANK_TRY(htp_mem_alloc(run->ctx, p->bytes, moment[kind]), "allocating its buffers", -1);
      const void *start = elastic ? job->elastic.state[1 + kind][i]
                                  : job->moments[kind] ? job->moments[kind][i] : NULL;
      if (start) {
        if (upload_slice(run, p, start, *moment[kind]))
          return 1;
      } else {
        void *zeros = calloc(1, p->bytes);
        if (!zeros) {
          htp_rank_task_fail(run->task, run->ctx, HTP_ERR_NOMEM, "zeroing the optimizer state",
                             -1, "out of memory for the host's zeros");
          return 1;
        }
        htp_result result = htp_mem_upload(run->ctx, *moment[kind], zeros, p->bytes);
        free(zeros);
        RANK_TRY(result, "zeroing the optimizer state", -1);
      }
    }
    if (p->shard_layout != HTP_SHARD_NONE && p->bytes > largest)
      largest = p->bytes;
  }
  if (largest && job->options->train.checkpoint)
    RANK_TRY(htp_mem_alloc(run->ctx, largest * (size_t)job->tp, &b->gather),
             "allocating its buffers", -1);
  return 0;
}

static void free_buffers(htp_ctx *ctx, const train_job *job, rank_buffers *b) {
  const htp_signature *sig = job->sig, *eval = job->eval_sig;
  if (b->grad)
    for (int i = 0; i < sig->num_args + sig->num_results + 1; i++)
      htp_mem_free(ctx, b->grad[i]);
  if (b->eval && eval != sig)
    for (int i = eval->num_args; i < eval->num_args + eval->num_results + 1; i++)
      htp_mem_free(ctx, b->eval[i]);
  for (int i = 0; b->m && i < sig->num_args; i++) {
    htp_mem_free(ctx, b->m[i]);
    htp_mem_free(ctx, b->v[i]);
  }
  htp_mem_free(ctx, b->gather);
  free(b->grad);
  free(b->eval);
  free(b->m);
  free(b->v);
}

/* Every parameter's update from its gradient, on this rank's shard. */
static int optimizer_step(rank_run *run, rank_buffers *b, long step, long total,
                          htp_step_failure *failure) {
  const train_job *job = run->job;
  const htp_train_options *train = &job->options->train;
  const htp_signature *sig = job->sig;
  const float lr = (float)learning_rate(train, step, total);
  for (int k = 0; k < sig->num_results; k++) {
    const htp_sig_tensor *g = &sig->results[k];
    if (g->role != HTP_SIG_GRAD)
      continue;
    const int i = g->grad_arg;
    const float wd = decays(&sig->args[i]) ? (float)train->weight_decay : 0.0f;
    float *w = b->grad[i];
    const float *grad = b->grad[sig->num_args + k];
    htp_result result =
        train->optimizer == HTP_TRAIN_ADAMW
            ? htp_op_adamw_f32(run->ctx, w, grad, b->m[i], b->v[i], g->count, lr,
                               (float)ADAM_BETA1, (float)ADAM_BETA2, (float)ADAM_EPS, wd, step + 1)
            : htp_op_sgd_momentum_f32(run->ctx, w, grad, b->m[i], g->count, lr,
                                      (float)train->momentum, wd, step + 1);
    if (result != HTP_OK) {
      char detail[NAME_SIZE + 1024];
      snprintf(detail, sizeof detail, "the %s update of '%s': %s",
               htp_run_optimizer_name(train->optimizer), sig->args[i].name, htp_last_error(run->ctx));
      return htp_step_fail(failure, result, "the optimizer", detail);
    }
  }
  return 0;
}

/* Who owns which unit of split parameter i once the balancer has
 * re-partitioned (htp_balancer_slot_units: every rank's slots, room each,
 * `units` in the global tensor); *slots stays NULL before any re-partition,
 * when the compiled split still holds. Non-zero with reason. */
static int owner_map(rank_run *run, rank_buffers *b, int i, int32_t **slots, int64_t *room,
                     int64_t *units, char *reason, size_t reason_size) {
  const htp_sig_tensor *p = &run->job->sig->args[i];
  if (!run->balancer || htp_balancer_repartitions(run->balancer) == 0)
    return 0;
  if (!p->shard_unit)
    return htp_set_error(reason, reason_size, "'%s' was re-partitioned but its shard has no "
                         "unit", p->name);
  const int64_t rows = p->dims[p->shard_dim] / (p->shard_layout == HTP_SHARD_QKV ? 3 : 1);
  const size_t count = (size_t)run->job->tp * (size_t)(rows / p->shard_unit);
  if (!(*slots = malloc(count * sizeof **slots)))
    return htp_set_error(reason, reason_size, "'%s': out of memory for its slot map", p->name);
  if (htp_balancer_slot_units(run->balancer, b->grad[i], *slots, count, room) != HTP_OK)
    return htp_set_error(reason, reason_size, "'%s': %s", p->name, htp_last_error(run->ctx));
  *units = 0;
  for (size_t s = 0; s < (size_t)run->job->tp * (size_t)*room; s++)
    *units += (*slots)[s] >= 0;
  return 0;
}

/* Gathers one tensor of parameter i (w, m or v on device) into rank 0's
 * global host copy `out`. Every rank takes part (the all-gather). */
static int gather(rank_run *run, rank_buffers *b, int i, const void *device, void *out) {
  const htp_sig_tensor *p = &run->job->sig->args[i];
  if (p->shard_layout == HTP_SHARD_NONE) {
    if (run->rank == 0)
      RANK_TRY(htp_mem_download(run->ctx, out, device, p->bytes), "the checkpoint", -1);
    return 0;
  }
  RANK_TRY(htp_allgather(run->ctx, device, b->gather, p->bytes), "the checkpoint's gather", -1);
  if (run->rank != 0)
    return 0;
  unsigned char *all = malloc(p->bytes * (size_t)run->job->tp);
  if (!all) {
    htp_rank_task_fail(run->task, run->ctx, HTP_ERR_NOMEM, "the checkpoint", -1, "out of memory");
    return 1;
  }
  htp_result result = htp_mem_download(run->ctx, all, b->gather, p->bytes * (size_t)run->job->tp);
  char reason[512] = "";
  int32_t *slots = NULL;
  int64_t room = 0, units = 0;
  int bad = result == HTP_OK ? owner_map(run, b, i, &slots, &room, &units, reason, sizeof reason)
                             : 0;
  for (int r = 0; result == HTP_OK && !bad && r < run->job->tp; r++)
    bad = slots ? htp_shard_place_slots(all + p->bytes * (size_t)r, out, p->element_size, p->rank,
                                        p->dims, p->shard_dim, p->shard_layout,
                                        slots + (size_t)r * (size_t)room, p->shard_unit, units,
                                        reason, sizeof reason)
                : htp_shard_place(all + p->bytes * (size_t)r, out, p->element_size, p->rank,
                                  p->dims, p->shard_dim, run->job->tp, r, p->shard_layout,
                                  htp_train_units(run->job, i), p->shard_unit, reason,
                                  sizeof reason);
  free(slots);
  free(all);
  RANK_TRY(result, "the checkpoint", -1);
  if (bad) {
    htp_rank_task_fail(run->task, run->ctx, HTP_ERR_INVALID, "the checkpoint", -1, reason);
    return 1;
  }
  return 0;
}

static int checkpoint(rank_run *run, rank_buffers *b, long epochs_done, long steps_done) {
  train_job *job = run->job;
  const htp_signature *sig = job->sig;
  const int kinds = job->options->train.optimizer == HTP_TRAIN_ADAMW ? 3 : 2;
  for (int i = 0; i < sig->num_args; i++) {
    if (sig->args[i].role != HTP_SIG_PARAM)
      continue;
    const void *sources[3] = {b->grad[i], b->m[i], b->v[i]};
    for (int kind = 0; kind < kinds; kind++)
      if (gather(run, b, i, sources[kind], run->rank == 0 ? job->gathered[kind][i] : NULL))
        return 1;
  }
  if (run->rank != 0)
    return 0;
  char err[2048];
  const htp_result written = htp_train_write_checkpoint(job, epochs_done, steps_done, err,
                                                        sizeof err);
  if (written != HTP_OK) {
    htp_rank_task_fail(run->task, run->ctx, written, "writing the checkpoint", -1, err);
    return 1;
  }
  return 0;
}

/* The first non-finite value in this rank's parameter shards, described
 * in why ("parameter 'NAME' holds nan at element K" or that none does). */
static int describe_parameters(rank_run *run, rank_buffers *b, char *why, size_t why_size) {
  const htp_signature *sig = run->job->sig;
  snprintf(why, why_size, "the weights (rank %d's shards) are all finite", run->rank);
  for (int i = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *p = &sig->args[i];
    if (p->role != HTP_SIG_PARAM)
      continue;
    float *values = malloc(p->bytes ? p->bytes : 1);
    if (!values)
      return htp_set_error(why, why_size, "out of memory");
    if (htp_mem_download(run->ctx, values, b->grad[i], p->bytes) != HTP_OK) {
      free(values);
      return htp_set_error(why, why_size, "%s", htp_last_error(run->ctx));
    }
    for (int64_t k = 0; k < p->count; k++)
      if (!isfinite(values[k])) {
        snprintf(why, why_size, "rank %d's shard of parameter '%s' already holds %g at element "
                 "%lld", run->rank, p->name, (double)values[k], (long long)k);
        free(values);
        return 0;
      }
    free(values);
  }
  return 0;
}

/* Rank 0's progress on a terminal: epoch, step/steps, loss, ms/step. */
static void progress(long epoch, long epochs, long step, long steps, double loss, double ms) {
  const int width = 24;
  int filled = (int)((double)width * (double)step / (double)steps);
  char bar[32];
  for (int i = 0; i < width; i++)
    bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
  bar[width] = '\0';
  fprintf(stderr, "\repoch %ld/%ld [%s] %ld/%ld loss %.4f %.1f ms/step ", epoch, epochs, bar, step,
          steps, loss, ms);
  fflush(stderr);
}

/* What follows the grad entry inside the timed step (htp_rank_step.after). */
typedef struct step_update {
  rank_run *run;
  rank_buffers *b;
  htp_balancer *balancer;
  long total;         /* steps of the whole run: the learning-rate schedule */
  long nan_step;      /* HTP_TRAIN_NAN_STEP (tests only): this step's loss reads as nan */
  long step;
  long nonfinite_run; /* --skip-nonfinite: steps in a row whose loss was not finite */
  int finite;         /* this step's loss was finite (and the update made) */
  float loss;
} step_update;

/* So many non-finite steps in a row mean the weights themselves are (no
 * step can repair them). */
enum { MAX_NONFINITE_RUN = 100 };

/* The loss (the same on every rank: it follows the all-reduces) decides,
 * before the update, whether the step may change the weights: a
 * non-finite one would make them all nan. */
static int update_after_step(void *user, htp_step_failure *failure) {
  step_update *u = user;
  rank_run *run = u->run;
  const train_job *job = run->job;
  const htp_run_options *options = job->options;
  const long step = u->step;
  htp_result result = htp_mem_download(run->ctx, &u->loss,
                                       u->b->grad[job->sig->num_args + job->loss], sizeof u->loss);
  if (result != HTP_OK)
    return htp_step_fail(failure, result, "downloading the loss", htp_last_error(run->ctx));
  if (step == u->nan_step)
    u->loss = NAN;
  u->finite = isfinite(u->loss);
  if (!u->finite) {
    char why[512];
    describe_parameters(run, u->b, why, sizeof why);
    if (!options->train.skip_nonfinite || ++u->nonfinite_run >= MAX_NONFINITE_RUN) {
      char detail[1024];
      snprintf(detail, sizeof detail, "the loss is %g (epoch %ld, batch %ld of %ld)%s; "
               "stopped before the update, so nothing non-finite was written (%s)%s",
               (double)u->loss, step / job->steps + 1, step % job->steps + 1, job->steps,
               u->nonfinite_run ? ", the 100th such step in a row" : "", why,
               options->train.skip_nonfinite ? "" : "; --skip-nonfinite skips such steps");
      return htp_step_fail(failure, HTP_ERR_INVALID, "the training step", detail);
    }
  } else {
    u->nonfinite_run = 0;
    if (optimizer_step(run, u->b, step, u->total, failure))
      return 1;
  }
  result = htp_balancer_weights_updated(u->balancer);
  if (result != HTP_OK)
    return htp_step_fail(failure, result, "noting the updated weights", htp_last_error(run->ctx));
  return 0;
}

/* The test set through the eval entry, in batches of B: a last partial
 * batch padded with zeros, the padding left out of the loss and accuracy
 * (rank 0 scores). The whole model is evaluated, whatever the plan (every
 * rank alike). Non-zero once the failure is reported. */
static int evaluate(rank_run *run, rank_buffers *b, htp_balancer *balancer, float *images,
                    float *targets, float *logits, int32_t *labels, double *test_loss,
                    long *test_correct) {
  const train_job *job = run->job;
  const htp_signature *sig = job->sig, *eval = job->eval_sig;
  const int batch = job->batch;
  RANK_TRY(htp_balancer_suspend(balancer, 1), "suspending the balancer", -1);
  for (uint32_t start = 0; start < job->test->count; start += (uint32_t)batch) {
    int real = htp_fmnist_batch(job->test, NULL, start, batch, images, targets, labels);
    RANK_TRY(htp_barrier(run->ctx), "the test barrier", -1);
    RANK_TRY(htp_mem_upload(run->ctx, b->eval[job->images], images, sig->args[job->images].bytes),
             "uploading a test batch", -1);
    RANK_TRY(htp_mem_upload(run->ctx, b->eval[job->targets], targets,
                            sig->args[job->targets].bytes), "uploading a test batch", -1);
    int32_t code = job->eval_fn(run->ctx, eval == sig ? b->grad : b->eval);
    if (code != 0) {
      htp_rank_task_fail(run->task, run->ctx, code, "the eval entry", -1,
                         htp_last_error(run->ctx));
      return 1;
    }
    if (!keeps_books(run))
      continue;
    void *source = eval == sig ? b->grad[sig->num_args + job->logits]
                               : b->eval[eval->num_args + job->eval_logits];
    RANK_TRY(htp_mem_download(run->ctx, logits, source, sig->results[job->logits].bytes),
             "downloading the test logits", -1);
    score(logits, labels, real, test_loss, test_correct);
  }
  RANK_TRY(htp_balancer_suspend(balancer, 0), "resuming the balancer", -1);
  return 0;
}

/* Rank 0's line for an epoch on stdout. */
static void print_epoch(const epoch_metrics *m, long epochs, int cpu_clock) {
  char modelled[64] = "";
  if (cpu_clock)
    snprintf(modelled, sizeof modelled, ", modelled %.1f s", m->model_seconds);
  char skipped_note[96] = "";
  if (m->skipped)
    snprintf(skipped_note, sizeof skipped_note, ", %ld step%s skipped (non-finite loss)",
             m->skipped, m->skipped == 1 ? "" : "s");
  /* An epoch whose every step was skipped has no training figures. */
  char trained[96] = "loss n/a, train acc n/a";
  if (isfinite(m->train_loss) && isfinite(m->train_acc))
    snprintf(trained, sizeof trained, "loss %.4f, train acc %.2f%%", m->train_loss,
             100 * m->train_acc);
  printf("epoch %ld/%ld: %s, test loss %.4f, test acc %.2f%%, %.1f s (%.1f ms/step%s), eval "
         "%.1f s%s\n", m->epoch, epochs, trained, m->test_loss, 100 * m->test_acc, m->seconds,
         m->ms_per_step, modelled, m->eval_seconds, skipped_note);
  fflush(stdout);
}

/* A rank's host side of the steps: the batch, its logits, the shuffle
 * order and the ranks' modelled step times. */
typedef struct host_batch {
  float *images, *targets, *logits;
  int32_t *labels;
  uint32_t *order;
  double *rank_model;
} host_batch;

static void host_batch_free(host_batch *h) {
  free(h->images);
  free(h->targets);
  free(h->logits);
  free(h->rank_model);
  free(h->labels);
  free(h->order);
}

/* Non-zero once the failure is reported. */
static int host_batch_alloc(rank_run *run, host_batch *h) {
  const train_job *job = run->job;
  const htp_signature *sig = job->sig;
  h->images = malloc(sig->args[job->images].bytes);
  h->targets = malloc(sig->args[job->targets].bytes);
  h->logits = malloc(sig->results[job->logits].bytes);
  h->labels = malloc((size_t)job->batch * sizeof *h->labels);
  h->order = malloc((size_t)job->train->count * sizeof *h->order);
  h->rank_model = malloc((size_t)job->tp * sizeof *h->rank_model);
  if (h->images && h->targets && h->logits && h->labels && h->order && h->rank_model)
    return 0;
  htp_rank_task_fail(run->task, run->ctx, HTP_ERR_NOMEM, "allocating its batch", -1,
                     "out of memory");
  return 1;
}

/* Step s of the epoch's batch on the host, augmented as the options say:
 * made before the step's barrier and fault point (they come with its timed
 * call, step.h). Returns the real images in it. */
static int make_batch(const train_job *job, host_batch *h, long s, long step) {
  const htp_run_options *options = job->options;
  const int real = htp_fmnist_batch(job->train, h->order, (uint32_t)(s * job->batch), job->batch,
                                    h->images, h->targets, h->labels);
  if (options->train.augment != HTP_AUGMENT_NONE)
    htp_fmnist_augment(h->images, real,
                       options->train.augment == HTP_AUGMENT_FLIP_SHIFT ? HTP_FMNIST_SHIFT : 0,
                       options->seed, step);
  if (options->train.random_erase > 0)
    htp_fmnist_erase(h->images, real, options->train.random_erase, options->seed, step);
  if (options->train.label_smoothing > 0)
    htp_fmnist_smooth_targets(h->targets, real, options->train.label_smoothing);
  return real;
}

/* With a CPU or units clock, one device a rank: its CPU work plus the
 * --slow share the hooks booked (factor x their CPU time) without waiting;
 * the step ends with its slowest rank. Non-zero once the failure is
 * reported. */
static int model_step(rank_run *run, host_batch *h, const htp_step_result *done, double factor,
                      long step, double *seconds) {
  const double hooks = done->times.hook_seconds;
  double mine = done->times.compute_seconds + (hooks > 0 ? hooks - hooks / factor : 0);
  double slowest = 0;
  RANK_TRY(htp_allgather_host(run->ctx, &mine, h->rank_model, sizeof mine),
           "gathering the modelled step times", step);
  for (int r = 0; r < run->job->tp; r++)
    slowest = h->rank_model[r] > slowest ? h->rank_model[r] : slowest;
  *seconds += slowest;
  return 0;
}

/* Training step s of epoch: the batch uploaded, the rank step (the update
 * inside it), the modelled time; rank 0 notes the stragglers and scores the
 * logits. Non-zero once the failure is reported. */
static int train_step(rank_run *run, rank_buffers *b, const htp_rank_step *rank_step,
                      step_update *updater, host_batch *h, long epoch, long s, double started,
                      epoch_sums *sums) {
  train_job *job = run->job;
  const htp_run_options *options = job->options;
  const htp_signature *sig = job->sig;
  const long step = epoch * job->steps + s;
  make_batch(job, h, s, step);
  RANK_TRY(htp_mem_upload(run->ctx, b->grad[job->images], h->images,
                          sig->args[job->images].bytes), "uploading the batch", step);
  RANK_TRY(htp_mem_upload(run->ctx, b->grad[job->targets], h->targets,
                          sig->args[job->targets].bytes), "uploading the batch", step);
  const int original = job->elastic.original ? job->elastic.original[run->rank] : run->rank;
  if (job->process_rank >= 0 && job->elastic.every >= 0) {
    job->elastic.reached = step;
    /* --fault die under mpirun with --elastic: the process is killed, as by
     * the kernel's OOM killer or a node going down (the survivors see it
     * through MPI, not from htp-run). */
    for (int i = 0; i < options->num_faults; i++)
      if (options->faults[i].kind == HTP_RUN_FAULT_DIE && options->faults[i].rank == original &&
          options->faults[i].iteration == step) {
        fflush(stdout);
        fflush(stderr);
        raise(SIGKILL);
      }
  }
  const double factor = htp_step_slowdown(options->slows, options->num_slows, original, step);
  updater->step = step;
  updater->finite = 1;
  htp_step_result done;
  htp_step_failure failure;
  if (htp_rank_step_run(rank_step, step, factor, &done, &failure)) {
    htp_rank_task_fail(run->task, run->ctx, failure.code, failure.what, step, failure.detail);
    return 1;
  }
  if (options->train.clock != HTP_TRAIN_CLOCK_WALL &&
      model_step(run, h, &done, factor, step, &sums->model_seconds))
    return 1;
  if (!keeps_books(run))
    return 0;
  for (int r = 0; r < done.plan->world_size; r++)
    job->stragglers[r] |= done.plan->straggler[r] != 0;
  if (!updater->finite) {
    sums->skipped++;
    return 0;
  }
  RANK_TRY(htp_mem_download(run->ctx, h->logits, b->grad[sig->num_args + job->logits],
                            sig->results[job->logits].bytes), "downloading the logits", step);
  double ignored = 0;
  score(h->logits, h->labels, job->batch, &ignored, &sums->correct);
  sums->loss_sum += updater->loss;
  sums->seen += job->batch;
  if (run->rank == 0 && isatty(STDERR_FILENO))
    progress(epoch + 1, options->train.epochs, s + 1, job->steps,
             sums->loss_sum / (double)(s + 1 - sums->skipped),
             1e3 * (htp_now() - started) / (double)(s + 1));
  return 0;
}

/* Rank 0's metrics of an epoch: kept, printed, and written to --metrics.
 * Non-zero once the failure is reported. */
static int record_epoch(rank_run *run, long epoch, const epoch_sums *sums, double train_seconds,
                        double test_loss, long test_correct, double eval_seconds) {
  train_job *job = run->job;
  const htp_run_options *options = job->options;
  if (job->epochs_done >= options->train.epochs) { /* a world replayed a recorded epoch */
    htp_rank_task_fail(run->task, run->ctx, HTP_ERR_INTERNAL, "recording the epoch", -1,
                       "more epochs recorded than the run has");
    return 1;
  }
  job->repartitions = job->repartitions_before + htp_balancer_repartitions(run->balancer);
  epoch_metrics *m = &job->metrics[job->epochs_done++];
  m->epoch = epoch + 1;
  m->train_loss = sums->seen ? sums->loss_sum / (double)(job->steps - sums->skipped) : NAN;
  m->skipped = sums->skipped;
  m->train_acc = sums->seen ? (double)sums->correct / (double)sums->seen : NAN;
  m->test_loss = test_loss / (double)job->test->count;
  m->test_acc = (double)test_correct / (double)job->test->count;
  m->seconds = train_seconds;
  m->eval_seconds = eval_seconds;
  m->ms_per_step = 1e3 * train_seconds / (double)job->steps;
  m->model_seconds = sums->model_seconds;
  if (run->rank != 0)
    return 0; /* the books kept, for a rank that may take rank 0's place */
  print_epoch(m, options->train.epochs, options->train.clock != HTP_TRAIN_CLOCK_WALL);
  char err[2048];
  const htp_signature *eval = job->eval_sig;
  /* The file is rewritten whole (so it is always a whole JSON document):
   * after the last epoch, and before it no more often than keeps the
   * writes to a tenth of the time (thousands of tiny epochs made them
   * quadratic). */
  const double now = htp_now();
  const int due = job->first_epoch + job->epochs_done == options->train.epochs ||
                  now - job->metrics_written_at >= 10.0 * job->metrics_cost;
  if (options->train.metrics && due) {
    if (htp_train_write_metrics(job, eval == job->sig ? job->sig->entry : eval->entry, err,
                                sizeof err)) {
      htp_rank_task_fail(run->task, run->ctx, HTP_ERR_SYSTEM, "writing the metrics", -1, err);
      return 1;
    }
    job->metrics_written_at = htp_now();
    job->metrics_cost = job->metrics_written_at - now;
  }
  return 0;
}

/* --elastic: after `done` steps every rank copies its own shards of the
 * model and its moments into its host copies of the set being written
 * (each rank its own, at once; under mpirun each also passes its copy to
 * its buddy, the next rank: a dead process's memory is gone), the
 * book keepers note the slot maps of any re-partitioned tensor, and after a
 * barrier make that set the current one (a death before leaves the last
 * whole one), with the epoch's sums so far. A world that ends puts a whole
 * set together (htp_train_elastic_assemble). With --elastic 0 the first
 * snapshot after ELASTIC_TIMED_STEPS timed steps also chooses K: the ranks
 * agree on the slowest snapshot and mean step (step_seconds), and K makes
 * snapshots cost about 1 % of the steps. Non-zero once the failure is
 * reported. */
enum { ELASTIC_STOPPED = 2 }; /* run_epoch: the world stopped for a rejoin */

/* Under mpirun: this rank's copy to its buddy (the next rank, in a ring),
 * the previous rank's into `theirs`. Sends wait for their receive, so even
 * ranks send first and odd ranks receive first (an odd ring's last link
 * waits for its first: no cycle). */
enum { BUDDY_TAG = 4099 };
static int pass_to_buddy(rank_run *run, const void *mine, void *theirs, size_t bytes, long done) {
  const int tp = run->job->tp, next = (run->rank + 1) % tp, previous = (run->rank + tp - 1) % tp;
  if (tp == 1) { /* the last rank left is its own buddy (a send to itself is refused) */
    memmove(theirs, mine, bytes);
    return 0;
  }
  for (int turn = 0; turn < 2; turn++) {
    if ((turn == 0) == (run->rank % 2 == 0))
      RANK_TRY(htp_send_host(run->ctx, mine, bytes, next, BUDDY_TAG), "passing a snapshot on",
               done);
    else
      RANK_TRY(htp_recv_host(run->ctx, theirs, bytes, previous, BUDDY_TAG),
               "passing a snapshot on", done);
  }
  return 0;
}

static int snapshot(rank_run *run, rank_buffers *b, long done, const epoch_sums *sums,
                    double epoch_seconds, double step_seconds) {
  train_job *job = run->job;
  train_elastic *e = &job->elastic;
  const double started = htp_now();
  const int set = 1 - e->current; /* flipped only after everyone's barrier */
  const int kinds = job->options->train.optimizer == HTP_TRAIN_ADAMW ? 3 : 2;
  const int processes = job->process_rank >= 0;
  for (int i = 0; i < job->sig->num_args; i++) {
    const htp_sig_tensor *p = &job->sig->args[i];
    if (p->role != HTP_SIG_PARAM)
      continue;
    const void *sources[3] = {b->grad[i], b->m[i], b->v[i]};
    for (int k = 0; k < kinds; k++) {
      void **copies = htp_train_elastic_copies(job, set, k, run->rank);
      void **buddy = htp_train_elastic_copies(job, set, k, (run->rank + job->tp - 1) % job->tp);
      if (!copies || !buddy) {
        htp_rank_task_fail(run->task, run->ctx, HTP_ERR_NOMEM, "taking a snapshot", done,
                           "out of memory for --elastic's snapshot copies");
        return 1;
      }
      RANK_TRY(htp_mem_download(run->ctx, copies[i], sources[k], p->bytes), "taking a snapshot",
               done);
      if (processes && p->shard_layout != HTP_SHARD_NONE &&
          pass_to_buddy(run, copies[i], buddy[i], p->bytes, done))
        return 1;
    }
    if (keeps_books(run) && p->shard_layout != HTP_SHARD_NONE) {
      char reason[512] = "";
      int32_t *slots = NULL;
      int64_t room = 0, units = 0;
      if (owner_map(run, b, i, &slots, &room, &units, reason, sizeof reason)) {
        free(slots);
        htp_rank_task_fail(run->task, run->ctx, HTP_ERR_INVALID, "taking a snapshot", done,
                           reason);
        return 1;
      }
      free(e->maps[set][i]);
      e->maps[set][i] = slots; /* NULL: as split */
    }
  }
  RANK_TRY(htp_barrier(run->ctx), "the snapshot's barrier", done);
  run->snapshot_at = done;
  const double seconds = htp_now() - started;
  if (run->every == 0) {
    double mine[2] = {seconds, step_seconds}, all[2 * HTP_ENTRY_MAX_TP];
    RANK_TRY(htp_allgather_host(run->ctx, mine, all, sizeof mine), "choosing --elastic's K", done);
    double slowest[2] = {0, 1e-9};
    for (int r = 0; r < job->tp; r++)
      for (int k = 0; k < 2; k++)
        slowest[k] = all[2 * r + k] > slowest[k] ? all[2 * r + k] : slowest[k];
    const double k = slowest[0] / (0.01 * slowest[1]);
    run->every = k < 1 ? 1 : k > 1e6 ? 1000000 : (long)(k + 0.999);
  }
  if (!keeps_books(run))
    return 0;
  e->current = set;
  e->set_step[set] = done;
  e->set_sums[set] = *sums;
  e->set_seconds[set] = epoch_seconds;
  e->own_rank = processes ? run->rank : 0;
  e->taken++;
  e->seconds += seconds;
  e->every = run->every;
  return 0;
}

/* One epoch: its steps (from `first` on: a world that resumed a snapshot
 * inside it, its sums so far in `sums`), the test set, the checkpoint,
 * rank 0's metrics; --elastic's snapshots and stop. Non-zero once the
 * failure is reported, ELASTIC_STOPPED when the world stops here. */
static int run_epoch(rank_run *run, rank_buffers *b, htp_balancer *balancer,
                     const htp_rank_step *rank_step, step_update *updater, host_batch *h,
                     long epoch, long first, epoch_sums sums, double seconds_before) {
  train_job *job = run->job;
  const htp_run_options *options = job->options;
  train_elastic *e = &job->elastic;
  htp_fmnist_shuffle(h->order, job->train->count, options->seed, epoch);
  const double started = htp_now() - seconds_before;
  /* --profile: this epoch's steps after its first (a warm-up), or its only
   * one, in the first epoch this rank trains. */
  const int profile = options->profile && !run->profiled;
  const long profile_from = first + (job->steps - first > 1), profiled = job->steps - profile_from;
  for (long s = first; s < job->steps; s++) {
    if (profile && s >= profile_from) {
      htp_result r = s == profile_from ? htp_ctx_profile_start(run->ctx, (int)profiled) : HTP_OK;
      if (r == HTP_OK) r = htp_ctx_profile_iteration(run->ctx);
      if (r != HTP_OK) {
        htp_rank_task_fail(run->task, run->ctx, r, "starting its profile", epoch * job->steps + s,
                           htp_last_error(run->ctx));
        return 1;
      }
    }
    const double step_started = htp_now();
    if (run->rank == 0 && e->note[0]) { /* a new world's first step: it is up */
      fprintf(stderr, "%s; its first step started %.3f s after the last world ended\n", e->note,
              step_started - e->lost_at);
      e->note[0] = '\0';
    }
    if (train_step(run, b, rank_step, updater, h, epoch, s, started, &sums))
      return 1;
    /* Also at each epoch's end: a world that resumes never replays into an
     * epoch already scored and recorded. */
    const long done = epoch * job->steps + s + 1;
    if (s > first) { /* a world's first step pays for its start */
      run->step_sum += htp_now() - step_started;
      run->step_count++;
    }
    const int choose = run->every == 0 && run->step_count >= ELASTIC_TIMED_STEPS;
    const int due = run->every >= 0 && (choose || (run->every > 0 && done % run->every == 0) ||
                                        s + 1 == job->steps || done == e->stop_at);
    if (due && snapshot(run, b, done, &sums, htp_now() - started,
                        run->step_count ? run->step_sum / (double)run->step_count : 0.0))
      return 1;
    if (done == e->stop_at && s + 1 < job->steps)
      return ELASTIC_STOPPED;
  }
  if (profile) { /* before the evaluation, whose calls are not a step's */
    run->profiled = 1;
    if (run->rank == 0) job->profiled_steps = profiled;
    if (htp_rank_task_keep_profile(run->task, run->ctx, profiled))
      return 1;
  }
  const double train_seconds = htp_now() - started;
  double test_loss = 0, eval_started = htp_now();
  long test_correct = 0;
  if (evaluate(run, b, balancer, h->images, h->targets, h->logits, h->labels, &test_loss,
               &test_correct))
    return 1;
  const double eval_seconds = htp_now() - eval_started;
  if (run->rank == 0 && isatty(STDERR_FILENO))
    fputc('\n', stderr);
  if (options->train.checkpoint && checkpoint(run, b, epoch + 1, (epoch + 1) * job->steps))
    return 1;
  if (keeps_books(run) &&
      record_epoch(run, epoch, &sums, train_seconds, test_loss, test_correct, eval_seconds))
    return 1;
  return (epoch + 1) * job->steps == e->stop_at ? ELASTIC_STOPPED : 0;
}

/* The epochs from the world's first step on (job->elastic.start_step: the
 * resumed epochs, or a snapshot's step). Non-zero once the failure is
 * reported. */
static int run_epochs(rank_run *run, rank_buffers *b, htp_balancer *balancer) {
  train_job *job = run->job;
  const htp_run_options *options = job->options;
  const train_elastic *e = &job->elastic;
  host_batch h = {0};
  int failed = host_batch_alloc(run, &h);
  /* HTP_TRAIN_NAN_STEP=K (tests only): step K's loss reads as nan. Read
   * once, not per step. */
  const char *nan_text = getenv("HTP_TRAIN_NAN_STEP");
  const long nan_step = nan_text && *nan_text ? strtol(nan_text, NULL, 10) : -1;
  step_update updater = {run, b, balancer, options->train.epochs * job->steps, nan_step, 0, 0, 1,
                         0.0f};
  const htp_rank_step rank_step = {run->ctx, balancer, job->fn, b->grad, "the grad entry",
                                   update_after_step, &updater};
  const long start = e->every >= 0 ? e->start_step : job->first_epoch * job->steps;
  for (long epoch = start / job->steps; !failed && epoch < options->train.epochs; epoch++) {
    /* A snapshot inside this epoch: its steps so far are done and scored. */
    const int inside = epoch == start / job->steps && start % job->steps != 0;
    const epoch_sums none = {0};
    failed = run_epoch(run, b, balancer, &rank_step, &updater, &h, epoch,
                       inside ? start % job->steps : 0, inside ? e->sums : none,
                       inside ? e->epoch_seconds : 0.0);
  }
  host_batch_free(&h);
  return failed == ELASTIC_STOPPED ? 0 : failed;
}

/* A re-partition (DESIGN §12) moves a unit's optimizer moments with its
 * weights: each split parameter's are registered beside it (the balancer
 * matches them to the weights its hooks read). */
static int register_moments(rank_run *run, rank_buffers *b, htp_balancer *balancer) {
  const htp_signature *sig = run->job->sig;
  if (!run->job->balance || !(run->job->balancer.repartition_ratio > 0.0))
    return 0;
  for (int i = 0; i < sig->num_args; i++) {
    if (sig->args[i].role != HTP_SIG_PARAM || sig->args[i].shard_layout == HTP_SHARD_NONE)
      continue;
    RANK_TRY(htp_balancer_add_state(balancer, b->grad[i], b->m[i]), "registering its moments", -1);
    if (b->v[i])
      RANK_TRY(htp_balancer_add_state(balancer, b->grad[i], b->v[i]), "registering its moments",
               -1);
  }
  return 0;
}

static void train_rank(htp_rank_task *task, void *user) {
  train_job *job = user;
  rank_run run = {task, NULL, job, htp_rank_task_rank(task), NULL, job->elastic.every, -1, 0, 0,
                  0};
  rank_buffers buffers;
  memset(&buffers, 0, sizeof buffers);
  htp_balancer *balancer = NULL;
  htp_result result = htp_ctx_create(htp_rank_task_world(task), run.rank, &run.ctx);
  if (result != HTP_OK) {
    htp_rank_task_fail(task, NULL, result, "creating its context", -1,
                       htp_world_last_error(htp_rank_task_world(task)));
    return;
  }
  /* With balance hooks (tp > 1) the signature's config and --policy;
   * without (tp 1), detection only. */
  htp_balancer_config config = run.job->balancer;
  if (run.job->elastic.units) { /* a world without some ranks: the split it runs */
    config.planner.world_size = run.job->tp;
    for (int k = 0; k < HTP_PAIR_KINDS; k++)
      config.planner.owned[k] = run.job->elastic.owned[k];
  }
  result = htp_balancer_create(run.ctx, &config, &balancer);
  if (result == HTP_OK) {
    htp_balancer_set_trace(balancer, run.job->trace);
    /* A later world's lines go on from the run's step it starts at. */
    if (run.job->elastic.every >= 0)
      htp_balancer_set_trace_first_iter(balancer, run.job->elastic.start_step);
  }
  const htp_train_clock clock = run.job->options->train.clock;
  if (result == HTP_OK && clock != HTP_TRAIN_CLOCK_WALL)
    result = htp_balancer_set_clock(balancer, clock == HTP_TRAIN_CLOCK_UNITS ? HTP_CLOCK_UNITS
                                                                               : HTP_CLOCK_THREAD);
  if (result != HTP_OK)
    htp_rank_task_fail(task, run.ctx, result, "creating its balancer", -1,
                       htp_last_error(run.ctx));
  else if (!make_buffers(&run, &buffers) && !register_moments(&run, &buffers, balancer)) {
    run.balancer = balancer;
    if (!run_epochs(&run, &buffers, balancer)) {
      char why[512];
      uint64_t kernels_held, balancer_held;
      result = htp_rank_check_own_memory(run.ctx, balancer,
                                         htp_rank_own_memory_bound(job->sig, job->eval_sig),
                                         &kernels_held, &balancer_held, why, sizeof why);
      if (result != HTP_OK)
        htp_rank_task_fail(task, run.ctx, result, "checking its own device memory", -1, why);
    }
    if (keeps_books(&run))
      job->repartitions_before += htp_balancer_repartitions(balancer);
  }
  free_buffers(run.ctx, run.job, &buffers);
  htp_balancer_destroy(balancer);
  htp_ctx_destroy(run.ctx);
}

/* ---------------------------------------------------------------------- */

static void release_job(train_job *job) {
  const int n = job->sig ? job->sig->num_args : 0;
  htp_train_free_globals(job->params, n);
  for (int k = 0; k < 2; k++)
    htp_train_free_globals(job->moments[k], n);
  for (int k = 0; k < 3; k++)
    htp_train_free_globals(job->gathered[k], n);
  free(job->metrics);
  free(job->stragglers);
  htp_train_elastic_free(job);
  htp_train_free_metrics(job);
  if (job->trace) /* a run that never started: its trace goes, the old stays */
    htp_file_finish(job->trace, 0, job->trace_temporary, NULL, 0);
  job->trace = NULL;
}

/* The outputs a training writes must be creatable where they are (the
 * checkpoint's .optim too); non-zero with err. */
static int check_outputs(const htp_run_options *options, char *err, size_t err_size) {
  const htp_train_options *train = &options->train;
  if ((train->checkpoint && htp_train_check_output("checkpoint", train->checkpoint, err, err_size)) ||
      (train->metrics && htp_train_check_output("metrics", train->metrics, err, err_size)) ||
      (options->trace && htp_train_check_output("trace", options->trace, err, err_size)))
    return 1;
  if (train->checkpoint) {
    char optim[4200];
    snprintf(optim, sizeof optim, "%s.optim", train->checkpoint);
    if (htp_train_check_output("checkpoint", optim, err, err_size))
      return 1;
  }
  return 0;
}

/* The machine's memory, as timed runs check it, before anything large is
 * allocated: the ranks' buffers (host memory but on a GPU), the global
 * parameters, their moments and (with --checkpoint) rank 0's gathered
 * copies of all three. Non-zero with err. */
static int check_memory(const htp_run_options *options, const htp_run_state *state, int tp,
                        char *err, size_t err_size) {
  const htp_train_options *train = &options->train;
  const htp_signature *sig = &state->sig;
  uint64_t params = 0, held = 0;
  for (int i = 0; i < sig->num_args; i++)
    if (sig->args[i].role == HTP_SIG_PARAM)
      params += sig->args[i].global_bytes;
  const uint64_t moments = train->optimizer == HTP_TRAIN_ADAMW ? 2 : 1;
  const uint64_t copies = 1 + moments + (train->checkpoint ? 3 : 0);
  const int local_ranks = state->process_rank >= 0 ? 1 : tp;
  /* --elastic: the global state a world starts from, and the copies of the
   * ranks' shards: two sets (the last snapshot and the next) of every
   * rank's in one process; under mpirun a process's own and its buddy's
   * per set, and every rank's of one set while it gathers a snapshot after
   * a death (the other set given back first). */
  const uint64_t held_rows = tp > 1 ? 4 : 2; /* two sets of its own and its buddy's */
  const uint64_t rows = state->process_rank < 0 ? 2 * (uint64_t)tp
                        : (uint64_t)tp > held_rows ? (uint64_t)tp : held_rows;
  uint64_t elastic = 0;
  for (int i = 0; train->elastic_given && i < sig->num_args; i++)
    if (sig->args[i].role == HTP_SIG_PARAM)
      elastic += (1 + moments) * (sig->args[i].global_bytes + rows * sig->args[i].bytes);
  uint64_t total = 0;
  if (__builtin_mul_overflow(params, copies, &held) ||
      __builtin_add_overflow(held, elastic, &held)) {
    htp_set_error(err, err_size, "%s: its parameters' size overflows", options->path);
    return 1;
  }
  return htp_run_check_memory(options->path, held, sig,
                              state->device != HTP_DEVICE_CUDA ? local_ranks : 0, 1, &total, err,
                              err_size);
}

/* What the run is, on stderr before it starts (rank 0). */
static void print_banner(const htp_run_options *options, const htp_run_state *state,
                         const train_job *job) {
  const htp_train_options *train = &options->train;
  const htp_signature *sig = job->sig;
  char extras[160] = "";
  if (train->augment != HTP_AUGMENT_NONE)
    snprintf(extras, sizeof extras, ", augmented (%s)", htp_run_augment_name(train->augment));
  if (train->random_erase > 0)
    snprintf(extras + strlen(extras), sizeof extras - strlen(extras), ", random erase %g",
             train->random_erase);
  if (train->label_smoothing > 0)
    snprintf(extras + strlen(extras), sizeof extras - strlen(extras), ", label smoothing %g",
             train->label_smoothing);
  if (options->matmul_precision != HTP_MATMUL_F32)
    snprintf(extras + strlen(extras), sizeof extras - strlen(extras),
             ", %s products with weights", htp_run_matmul_precision_name(options->matmul_precision));
  if (train->clock != HTP_TRAIN_CLOCK_WALL)
    snprintf(extras + strlen(extras), sizeof extras - strlen(extras), ", %s clock (steps modelled%s)",
             htp_run_clock_name(train->clock),
             train->clock == HTP_TRAIN_CLOCK_UNITS ? ", plans from units" : "");
  fprintf(stderr, "htp-run: --train: %s (eval: %s), tp %d (%d kernel thread%s a rank, GEMMs "
          "%s), batch %d, %u training and %u test images, %ld steps an epoch, %s lr %g "
          "(%s)%s%s%s\n",
          sig->entry, job->eval_sig->entry, job->tp, state->blas_threads,
          state->blas_threads == 1 ? "" : "s",
          state->device == HTP_DEVICE_CUDA ? "cuBLAS" : htp_cpu_gemm_provider(), job->batch,
          job->train->count, job->test->count, job->steps,
          htp_run_optimizer_name(train->optimizer), train->lr,
          train->schedule == HTP_TRAIN_COSINE ? "cosine" : "constant",
          extras,
          train->resume ? ", resumed from " : "", train->resume ? train->resume : "");
  if (job->tp > 1 && options->impute == HTP_IMPUTE_SAME && options->same_max_age == 0 &&
      (options->policy == HTP_POLICY_RESIZE || options->policy == HTP_POLICY_SEMI))
    fprintf(stderr, "htp-run: --train: warning: --same-max-age 0 lets --impute same fill a "
            "pruned unit with its values from the last step that computed it however old; a "
            "plan that keeps pruning the same units for many steps then replays one old "
            "batch's outputs and gradients every step, and computes them (bench/RESULTS.md, "
            "tp 4, 3 stragglers: 1.5 points lost and 1.35x the ideal time, against 0.3 and "
            "1.09x with the default, 1: only the last step's values)\n");
}

/* The grad entry found and checked against the run (tp, --slow's ranks),
 * the balancer's configuration, the trace opened, the eval entry found.
 * Non-zero with err. */
static int bind_entries(const htp_run_options *options, htp_run_state *state, int requested_tp,
                        int quiet, train_job *job, char *err, size_t err_size) {
  if (htp_train_find_grad_entry(options, state, requested_tp, err, err_size))
    return 1;
  const htp_signature *sig = &state->sig;
  if (htp_run_check_tp(options, state->shared, requested_tp, state, err, err_size))
    return 1;
  job->tp = state->tp;
  htp_rank_job probe;
  memset(&probe, 0, sizeof probe);
  if (htp_run_balance_config(options, state, &probe, err, err_size))
    return 1;
  job->balance = state->balance;
  if (job->balance) {
    job->balancer = state->balancer;
  } else {
    job->balancer = (htp_balancer_config)HTP_BALANCER_CONFIG_INITIALIZER;
    job->balancer.planner = probe.planner; /* detection only, with --ewma-alpha/--hysteresis */
  }
  char why[4600];
  if (options->trace && !(job->trace = htp_file_begin(options->trace, job->trace_temporary,
                                                      sizeof job->trace_temporary, why,
                                                      sizeof why)))
    return htp_set_error(err, err_size, "--trace: %s", why);
  int loss, logits;
  if (htp_train_check_entry(sig, job, &loss, &logits, err, err_size))
    return 1;
  job->loss = loss;
  job->logits = logits;
  htp_train_find_eval_entry(options, state, sig->tp, quiet);
  job->sig = sig;
  job->fn = state->compiled.fn;
  job->eval_sig = sig;
  job->eval_fn = job->fn;
  job->eval_logits = logits;
  if (state->eval_loader) {
    train_job eval_probe = *job;
    int eval_loss;
    if (htp_train_check_entry(&state->eval_sig, &eval_probe, &eval_loss, &job->eval_logits, err,
                              err_size))
      return 1;
    job->eval_sig = &state->eval_sig;
    job->eval_fn = state->eval_compiled.fn;
  }
  return 0;
}

/* A --fault or --slow at a step this run does not take never happens:
 * said, not refused, as for a timed run's iterations (options.c). The
 * steps are first_epoch x steps (after --resume) to epochs x steps - 1 (a
 * rejoin at K takes its rank back from step K on). */
static void note_steps_not_taken(const htp_run_options *options, const train_job *job) {
  static const char *const kinds[] = {"delay", "hang", "die", "rejoin"};
  const long first = job->first_epoch * job->steps, last = options->train.epochs * job->steps - 1;
  char steps[160];
  snprintf(steps, sizeof steps, "the run's steps are %ld to %ld (--epochs %ld of %ld steps%s)",
           first, last, options->train.epochs, job->steps, first ? ", resumed" : "");
  for (int i = 0; i < options->num_faults; i++) {
    const htp_run_fault *f = &options->faults[i];
    if (f->iteration < first || f->iteration > last)
      fprintf(stderr, "htp-run: note: --fault %s:%d@%ld never happens: %s\n",
              (unsigned)f->kind < 4 ? kinds[f->kind] : "?", f->rank, f->iteration, steps);
  }
  for (int i = 0; i < options->num_slows; i++)
    if (options->slows[i].from_iteration > last)
      fprintf(stderr, "htp-run: note: the --slow from step %ld never happens: %s\n",
              options->slows[i].from_iteration, steps);
}

/* The job's steps and host memory: the memory check, the metrics, the
 * starting weights, the checkpoint's gather buffers. Non-zero with err. */
static int size_job(const htp_run_options *options, const htp_run_state *state, train_job *job,
                    char *err, size_t err_size) {
  const htp_train_options *train = &options->train;
  job->steps = (long)(job->train->count / (uint32_t)job->batch);
  if (job->steps < 1 && train->limit_train > 0)
    return htp_set_error(err, err_size, "--train: %u training images make no batch of %d (the "
                         "block's batch); give --limit-train >= %d", job->train->count,
                         job->batch, job->batch);
  if (job->steps < 1) /* the whole set: no --limit-train helps */
    return htp_set_error(err, err_size, "--train: the training set (%s) holds %u images, which "
                         "make no batch of %d (the block's batch); use a larger set or a block "
                         "with a smaller batch", train->data, job->train->count, job->batch);
  if (check_memory(options, state, job->tp, err, err_size))
    return 1;
  if (!(job->metrics = calloc((size_t)train->epochs, sizeof *job->metrics)) ||
      !(job->stragglers = calloc((size_t)job->tp, sizeof *job->stragglers)))
    return htp_set_error(err, err_size, "out of memory");
  if (htp_train_starting_weights(train, job->sig, job, err, err_size) ||
      htp_train_elastic_prepare(options, job, err, err_size))
    return 1;
  if (job->process_rank <= 0) {
    note_steps_not_taken(options, job);
    if (htp_train_read_earlier_metrics(job, err, err_size))
      return 1;
  }
  if (train->checkpoint)
    for (int k = 0; k < 3; k++)
      if (!(job->gathered[k] = htp_train_param_buffers(job->sig)))
        return htp_set_error(err, err_size, "out of memory");
  return 0;
}

/* The local world (unless the caller brought one), its faults and the
 * BLAS threads. Non-zero with err. */
static int open_train_ranks(const htp_run_options *options, htp_run_state *state,
                            const train_job *job, htp_ranks **ranks, char *err,
                            size_t err_size) {
  if (!*ranks && htp_ranks_open(ranks, HTP_BACKEND_LOCAL, job->tp, 0, 0, options->timeout_s,
                                state->device, options->matmul_precision, state->sm_counts, err,
                                err_size))
    return 1;
  htp_run_choose_blas_threads(state, state->process_rank >= 0);
  if (options->train.clock != HTP_TRAIN_CLOCK_WALL) {
    /* A rank's thread CPU time is its work only if its kernels run on it. */
    htp_cpu_set_blas_threads(1);
    state->blas_threads = htp_cpu_blas_threads();
  }
  return 0;
}

/* --elastic under mpirun, after a shrink: the survivors agree on the
 * snapshot they resume from, and fill in the copies they lack. ULFM
 * reports a death to each process where it notices it, so a snapshot's
 * last exchange may have completed on some and failed on others; the
 * oldest step any survivor made current is whole everywhere (no process
 * can have overwritten it: that would take a step with the dead). Each
 * survivor holds its own copy and its buddy's (the previous rank's), so a
 * lost rank's copy is at its next rank; both lost, it is gone. */
typedef struct survivors {
  train_job *job;
  const int *old_rank; /* [n]: survivor i's rank in the world that took the snapshot */
  int n;
  char err[1024];      /* why the copies cannot be filled in ("" if they can) */
} survivors;

/* Every rank's copies of the current set's split tensors, each lost one
 * sent by a survivor that holds it to those that lack it (survivor j, of
 * old rank o, holds o's copy and its buddy's: o - 1's). Every survivor
 * walks the same (tensor, kind, rank, survivor) order, so each blocking
 * send meets its receive. Non-zero once the failure is reported. */
static int fill_in_copies(htp_rank_task *task, htp_ctx *ctx, survivors *alive) {
  train_job *job = alive->job;
  train_elastic *e = &job->elastic;
  const int parts = job->tp, set = e->current, self = htp_rank_task_rank(task);
  int holder[HTP_ENTRY_MAX_TP]; /* the survivor that sends rank d's copy, -1: gone */
  for (int d = 0; d < parts; d++) {
    holder[d] = -1;
    for (int j = 0; j < alive->n && holder[d] < 0; j++)
      holder[d] = alive->old_rank[j] == d ? j : -1;
    for (int j = 0; j < alive->n && holder[d] < 0; j++)
      holder[d] = alive->old_rank[j] == (d + 1) % parts ? j : -1;
    if (holder[d] < 0) {
      char left[256] = "";
      for (int j = 0, used = 0; j < alive->n && used < (int)sizeof left; j++)
        used += snprintf(left + used, sizeof left - (size_t)used, "%s%d", j ? ", " : "",
                         e->original[alive->old_rank[j]]);
      snprintf(alive->err, sizeof alive->err, "--elastic: ranks %d and %d were both lost, and "
               "rank %d's snapshot copy lived in those two processes only (its own and its "
               "buddy's): the run ends (left: rank%s %s)", e->original[d],
               e->original[(d + 1) % parts], e->original[d], alive->n == 1 ? "" : "s", left);
      return 0;
    }
  }
  /* Room for every rank's rows of the agreed set, the other set's first
   * given back (the next world writes its own). */
  const int kinds = job->options->train.optimizer == HTP_TRAIN_ADAMW ? 3 : 2;
  htp_train_elastic_drop_copies(job, 1 - set, -1);
  for (int k = 0; k < kinds; k++)
    for (int d = 0; d < parts; d++)
      if (!htp_train_elastic_copies(job, set, k, d)) {
        htp_rank_task_fail(task, ctx, HTP_ERR_NOMEM, "gathering the snapshot", -1,
                           "out of memory for the snapshot's copies");
        return 1;
      }
  for (int i = 0; i < job->sig->num_args; i++) {
    const htp_sig_tensor *p = &job->sig->args[i];
    if (p->role != HTP_SIG_PARAM || p->shard_layout == HTP_SHARD_NONE)
      continue;
    for (int k = 0; k < kinds; k++)
      for (int d = 0; d < parts; d++)
        for (int j = 0; j < alive->n; j++) {
          const int o = alive->old_rank[j];
          if (o == d || (o + parts - 1) % parts == d)
            continue; /* j holds it */
          void *copy = e->copies[set][k][d][i];
          htp_result result = HTP_OK;
          if (self == holder[d])
            result = htp_send_host(ctx, copy, p->bytes, j, BUDDY_TAG);
          else if (self == j)
            result = htp_recv_host(ctx, copy, p->bytes, holder[d], BUDDY_TAG);
          if (result != HTP_OK) {
            htp_rank_task_fail(task, ctx, result, "gathering the snapshot", -1,
                               htp_last_error(ctx));
            return 1;
          }
        }
  }
  return 0;
}

/* A task's context, or NULL after the task was failed. */
static htp_ctx *task_ctx(htp_rank_task *task) {
  htp_ctx *ctx = NULL;
  htp_result result = htp_ctx_create(htp_rank_task_world(task), htp_rank_task_rank(task), &ctx);
  if (result != HTP_OK)
    htp_rank_task_fail(task, NULL, result, "creating its context", -1,
                       htp_world_last_error(htp_rank_task_world(task)));
  return result == HTP_OK ? ctx : NULL;
}

static void agree_rank(htp_rank_task *task, void *user) {
  survivors *alive = user;
  train_job *job = alive->job;
  train_elastic *e = &job->elastic;
  htp_ctx *ctx = task_ctx(task);
  if (!ctx)
    return;
  long mine[2] = {e->set_step[e->current], e->reached}, all[2 * HTP_ENTRY_MAX_TP];
  htp_result result = htp_allgather_host(ctx, mine, all, sizeof mine);
  if (result != HTP_OK) {
    htp_rank_task_fail(task, ctx, result, "agreeing on the snapshot", -1, htp_last_error(ctx));
    htp_ctx_destroy(ctx);
    return;
  }
  e->agreed = mine[0];
  for (int r = 0; r < alive->n; r++) {
    e->agreed = all[2 * r] < e->agreed ? all[2 * r] : e->agreed;
    e->reached = all[2 * r + 1] > e->reached ? all[2 * r + 1] : e->reached;
  }
  alive->err[0] = '\0';
  if (htp_train_elastic_resume_from(job, e->agreed, alive->err, sizeof alive->err) == 0 &&
      e->agreed >= 0)
    fill_in_copies(task, ctx, alive);
  htp_ctx_destroy(ctx);
}

/* mpirun, a world stopped for a rejoin: every process fills in the copies
 * it lacks (all are alive: each holds its own and its buddy's). */
static void fill_in_rank(htp_rank_task *task, void *user) {
  survivors *alive = user;
  htp_ctx *ctx = task_ctx(task);
  if (!ctx)
    return;
  fill_in_copies(task, ctx, alive);
  htp_ctx_destroy(ctx);
}

/* ----- A standby joining (--standby, mpirun) -------------------------------
 * What a process needs beside the compiled block to go on as a rank: the
 * global state the new world starts from and the books every process keeps
 * (keeps_books), sent by the grown world's rank 0 (1 where the joiner
 * is 0) to the joiner, which waited from the start and has done no step. */
enum { BOOKS_TAG = 4100 };

typedef struct books {
  long step, epochs_done, taken, every, reached, repartitions, repartitions_before;
  double epoch_seconds, seconds;
  epoch_sums sums;
  int num_events, n_live, live[HTP_ENTRY_MAX_TP];
  char note[512];
} books;

typedef struct joining {
  train_job *job;
  int joiner; /* the joiner's rank in the grown world */
  books b;
} joining;

/* Who sends: the grown world's rank 0, or rank 1 where the joiner is 0. */
static int sender_of(const joining *J) { return J->joiner == 0 ? 1 : 0; }

/* The pieces in order: the books, the events, the deaths fired, the epoch
 * metrics, the stragglers, then every parameter's global w (m, v). */
static int move_books(htp_ctx *ctx, joining *J, int sending, char *why, size_t why_size) {
  train_job *job = J->job;
  train_elastic *e = &job->elastic;
  const htp_run_options *options = job->options;
  struct { void *at; size_t bytes; } pieces[5] = {
      {&J->b, sizeof J->b},
      {e->events, sizeof e->events},
      {e->fired, (size_t)options->num_faults * sizeof *e->fired},
      {job->metrics, (size_t)options->train.epochs * sizeof *job->metrics},
      {job->stragglers, (size_t)e->logical_tp * sizeof *job->stragglers},
  };
  const int peer = sending ? J->joiner : sender_of(J);
  for (int i = 0; i < 5; i++) {
    if (pieces[i].bytes == 0)
      continue;
    htp_result r = sending ? htp_send_host(ctx, pieces[i].at, pieces[i].bytes, peer, BOOKS_TAG)
                           : htp_recv_host(ctx, pieces[i].at, pieces[i].bytes, peer, BOOKS_TAG);
    if (r != HTP_OK)
      return snprintf(why, why_size, "%s", htp_last_error(ctx)), 1;
  }
  for (int k = 0; k < 3 && e->state[k]; k++)
    for (int i = 0; i < job->sig->num_args; i++) {
      const htp_sig_tensor *t = &job->sig->args[i];
      if (t->role != HTP_SIG_PARAM)
        continue;
      htp_result r = sending ? htp_send_host(ctx, e->state[k][i], t->global_bytes, peer, BOOKS_TAG)
                             : htp_recv_host(ctx, e->state[k][i], t->global_bytes, peer, BOOKS_TAG);
      if (r != HTP_OK)
        return snprintf(why, why_size, "%s", htp_last_error(ctx)), 1;
    }
  return 0;
}

static void join_rank(htp_rank_task *task, void *user) {
  joining *J = user;
  const int rank = htp_rank_task_rank(task);
  htp_ctx *ctx = task_ctx(task);
  if (!ctx)
    return;
  char why[512];
  const int sender = sender_of(J);
  if ((rank == sender || rank == J->joiner) &&
      move_books(ctx, J, rank == sender, why, sizeof why))
    htp_rank_task_fail(task, ctx, HTP_ERR_REMOTE, "sending the joiner the state and books", -1,
                       why);
  htp_ctx_destroy(ctx);
}

/* A task's failure as the run's (its message and notes); returns 2. */
static int take_failure(htp_rank_outcome *outcome, const htp_rank_outcome *task) {
  outcome->failed = 1;
  memcpy(outcome->message, task->message, sizeof outcome->message);
  memcpy(outcome->notes, task->notes, sizeof outcome->notes);
  return 2;
}

/* The books of this process, to send (the live ranks of the grown world). */
static void take_books(const train_job *job, const int *live, int n, books *b) {
  const train_elastic *e = &job->elastic;
  *b = (books){e->step, job->epochs_done, e->taken, e->every, e->reached, job->repartitions,
               job->repartitions_before, e->epoch_seconds, e->seconds, e->sums,
               e->num_events, n, {0}, ""};
  memcpy(b->live, live, (size_t)n * sizeof *live);
  snprintf(b->note, sizeof b->note, "%s", e->note);
}

static void put_books(train_job *job, const books *b) {
  train_elastic *e = &job->elastic;
  e->step = b->step;
  job->epochs_done = b->epochs_done;
  e->taken = b->taken;
  e->every = b->every;
  e->reached = b->reached;
  job->repartitions = b->repartitions;
  job->repartitions_before = b->repartitions_before;
  e->epoch_seconds = b->epoch_seconds;
  e->seconds = b->seconds;
  e->sums = b->sums;
  e->num_events = b->num_events;
  snprintf(e->note, sizeof e->note, "%s", b->note);
  e->set_step[0] = e->set_step[1] = -1;
}

/* The world stopped for a rejoin (mpirun, --standby): its processes fill
 * in the snapshot's copies and put it together, the next world's live
 * ranks are chosen, a standby comes in as the rank that returns, and rank
 * 0 (or 1) sends it the state and books. 0, 2 (the run cannot go on: why in the
 * notes), or 1 with err. */
static int grow_world(const htp_run_options *options, htp_run_state *state,
                      htp_ranks **ranks, train_job *job, int *live, int *n, char *err,
                      size_t err_size) {
  train_elastic *e = &job->elastic;
  htp_rank_outcome *outcome = &state->outcome;
  int identity[HTP_ENTRY_MAX_TP], before[HTP_ENTRY_MAX_TP];
  const int old_n = job->tp;
  for (int r = 0; r < old_n; r++)
    identity[r] = r, before[r] = e->original[r];
  survivors all = {job, identity, old_n, ""};
  htp_rank_outcome filled;
  if (e->set_step[e->current] >= 0 &&
      htp_ranks_run_task(*ranks, fill_in_rank, &all, NULL, 0, &filled, err, err_size))
    return filled.failed ? take_failure(outcome, &filled) : 1;
  if (htp_train_elastic_assemble(job, err, err_size))
    return 1;
  if (htp_train_elastic_next_world(options, job, outcome, 0, live, n))
    return 2;
  int joiner = -1;
  for (int i = 0; i < *n && joiner < 0; i++) {
    int was = 0;
    for (int r = 0; r < old_n; r++)
      was |= before[r] == live[i];
    joiner = was ? -1 : i;
  }
  if (joiner < 0)
    return htp_set_error(err, err_size, "--standby: a rejoin with no rank coming back");
  htp_ranks *grown = NULL;
  char why[1024];
  if (htp_ranks_grow(*ranks, joiner, &grown, why, sizeof why)) {
    const size_t used = strlen(outcome->notes);
    snprintf(outcome->notes + used, sizeof outcome->notes - used, "--standby: %s: the run "
             "ends\n", why);
    outcome->failed = 1;
    snprintf(outcome->message, sizeof outcome->message, "rank %d could not come back",
             live[joiner]);
    return 2;
  }
  htp_ranks_close(*ranks);
  *ranks = grown;
  state->process_rank = job->process_rank = htp_ranks_process_rank(grown);
  joining J = {job, joiner, {0}};
  take_books(job, live, *n, &J.b);
  htp_rank_outcome sent;
  if (htp_ranks_run_task(*ranks, join_rank, &J, NULL, 0, &sent, err, err_size))
    return sent.failed ? take_failure(outcome, &sent) : 1;
  return 0;
}

/* A standby process (--standby): it waits until the run takes it in as a
 * rank (then it receives the state and the books and goes on as one) or
 * lets it go (0). 0, 2, or 1 with err, as run_worlds. */
static int run_worlds(const htp_run_options *options, htp_run_state *state, htp_ranks **ranks,
                      train_job *job, char *err, size_t err_size);
static int stand_by(const htp_run_options *options, htp_run_state *state, htp_ranks **ranks,
                    train_job *job, char *err, size_t err_size) {
  htp_ranks *joined = NULL;
  if (htp_ranks_standby_wait(*ranks, &joined, err, err_size))
    return 1;
  if (!joined)
    return 0; /* the run ended without it */
  htp_ranks_close(*ranks);
  *ranks = joined;
  state->process_rank = job->process_rank = htp_ranks_process_rank(joined);
  joining J = {job, job->process_rank, {0}};
  htp_rank_outcome received;
  if (htp_ranks_run_task(*ranks, join_rank, &J, NULL, 0, &received, err, err_size))
    return received.failed ? take_failure(&state->outcome, &received) : 1;
  put_books(job, &J.b);
  train_elastic *e = &job->elastic;
  char why[1024];
  if (htp_train_elastic_split(job, J.b.live, J.b.n_live, why, sizeof why))
    return htp_set_error(err, err_size, "%s", why);
  for (int set = 0; set < 2; set++)
    htp_train_elastic_drop_copies(job, set, job->process_rank);
  e->start_step = e->step;
  e->lost_at = htp_now();
  return run_worlds(options, state, ranks, job, err, err_size);
}

/* --elastic under mpirun: the world failed. The survivors shrink it to the
 * live processes (again while one more dies), agree on the snapshot, put
 * it together and split it over themselves (live, *n: original ranks).
 * Returns 0, 2 when the run cannot go on (no process died: the failure
 * stands; or the shrink failed: why in the notes), or 1 with err. */
static int shrink_world(const htp_run_options *options, htp_run_state *state,
                        htp_ranks **ranks, train_job *job, int *live, int *n, char *err,
                        size_t err_size) {
  train_elastic *e = &job->elastic;
  htp_rank_outcome *outcome = &state->outcome;
  int old_rank[HTP_ENTRY_MAX_TP], lost[HTP_ENTRY_MAX_TP], num_lost = 0;
  for (int r = 0; r < job->tp; r++)
    old_rank[r] = r;
  int size = job->tp;
  char agreeing[HTP_RANKS_MESSAGE] = ""; /* why the last agreement failed */
  for (int failed = 1; failed;) {
    int32_t gone[HTP_ENTRY_MAX_TP];
    int count = 0;
    htp_ranks *next = NULL;
    char why[1024];
    if (htp_ranks_shrink(*ranks, &next, gone, HTP_ENTRY_MAX_TP, &count, why, sizeof why)) {
      const size_t used = strlen(outcome->notes);
      snprintf(outcome->notes + used, sizeof outcome->notes - used, "%s: the run ends\n", why);
      return 2;
    }
    htp_ranks_close(*ranks);
    *ranks = next;
    state->process_rank = job->process_rank = htp_ranks_process_rank(next);
    if (count == 0) { /* nobody (else) died: the failure stands */
      const size_t used = strlen(outcome->notes);
      if (agreeing[0])
        snprintf(outcome->notes + used, sizeof outcome->notes - used, "then, agreeing on the "
                 "snapshot to go on from: %s\n", agreeing);
      return 2;
    }
    /* The lost, numbered in the world that ended; the rest renumbered. */
    int kept = 0;
    for (int r = 0; r < size; r++) {
      int dead = 0;
      for (int j = 0; j < count; j++)
        dead |= gone[j] == r;
      if (dead && num_lost < HTP_ENTRY_MAX_TP)
        lost[num_lost++] = old_rank[r];
      else if (!dead)
        old_rank[kept++] = old_rank[r];
    }
    size = kept;
    htp_rank_outcome agreement;
    survivors alive = {job, old_rank, size, ""};
    failed = htp_ranks_run_task(*ranks, agree_rank, &alive, NULL, 0, &agreement, err, err_size);
    if (failed && !agreement.failed)
      return 1; /* could not start: err */
    snprintf(agreeing, sizeof agreeing, "%s", failed ? agreement.message : "");
    if (!failed && alive.err[0]) { /* the death stands; why it cannot go on, below it */
      const size_t used = strlen(outcome->notes);
      snprintf(outcome->notes + used, sizeof outcome->notes - used, "%s\n", alive.err);
      return 2;
    }
  }
  if (htp_train_elastic_assemble(job, err, err_size))
    return 1;
  return htp_train_elastic_lost(options, job, lost, num_lost, 0, e->reached, live, n) ? 2 : 0;
}

/* The run's worlds: one, or under --elastic a new one in this process after
 * each death (the survivors) and each rejoin (with the rank back), each
 * resuming from the last snapshot. Returns 0, 2 when a rank failed (the
 * outcome says how), or 1 with err. */
static int run_worlds(const htp_run_options *options, htp_run_state *state, htp_ranks **ranks,
                      train_job *job, char *err, size_t err_size) {
  train_elastic *e = &job->elastic;
  htp_run_fault faults[HTP_RUN_MAX_INJECTIONS];
  for (;;) {
    const htp_run_fault *registered = options->faults;
    int count = options->num_faults;
    if (e->every >= 0) {
      count = htp_train_elastic_faults(options, job, faults);
      registered = faults;
      e->stop_at = htp_train_elastic_next_rejoin(options, job);
    }
    if (htp_ranks_add_faults(*ranks, registered, count, err, err_size))
      return 1;
    const int failed = htp_ranks_run_task(*ranks, train_rank, job, registered, count,
                                          &state->outcome, err, err_size);
    e->lost_at = htp_now(); /* the world has ended: the next one is timed from here */
    if (e->every < 0 || (!failed && e->stop_at < 0))
      return failed ? 2 : 0;
    int live[HTP_ENTRY_MAX_TP], n;
    if (failed && job->process_rank >= 0) { /* mpirun: the survivors shrink the world */
      const int status = shrink_world(options, state, ranks, job, live, &n, err, err_size);
      if (status)
        return status;
    } else if (job->process_rank >= 0) { /* mpirun: a standby comes in (it was split) */
      const int status = grow_world(options, state, ranks, job, live, &n, err, err_size);
      if (status)
        return status;
    } else if (htp_train_elastic_assemble(job, err, err_size)) {
      return 1;
    } else if (htp_train_elastic_next_world(options, job, &state->outcome, failed, live, &n)) {
      return 2;
    }
    char why[1024];
    if (htp_train_elastic_split(job, live, n, why, sizeof why)) {
      /* The death stands as the run's error; why it could not go on, below it. */
      htp_rank_outcome *outcome = &state->outcome;
      const size_t used = strlen(outcome->notes);
      snprintf(outcome->notes + used, sizeof outcome->notes - used, "%s: the run ends\n", why);
      return 2;
    }
    e->start_step = e->step;
    if (job->process_rank >= 0) { /* the shrunk world runs next, holding its rows only */
      for (int set = 0; set < 2; set++)
        htp_train_elastic_drop_copies(job, set, job->process_rank);
      continue;
    }
    htp_ranks_close(*ranks);
    *ranks = NULL;
    if (htp_ranks_open(ranks, HTP_BACKEND_LOCAL, job->tp, 0, 0, options->timeout_s, state->device,
                       options->matmul_precision, job->tp == e->logical_tp ? state->sm_counts
                                                                           : NULL,
                       err, err_size))
      return 1;
  }
}

/* A failure in a world without some ranks names its ranks as that world
 * numbers them: a note says which of the run's ranks they are. */
static void name_renumbered_ranks(const train_job *job, htp_rank_outcome *outcome) {
  const train_elastic *e = &job->elastic;
  int renumbered = 0;
  for (int r = 0; e->original && r < job->tp; r++)
    renumbered |= e->original[r] != r;
  if (!renumbered || job->tp == e->logical_tp)
    return;
  size_t used = strlen(outcome->notes);
  used += (size_t)snprintf(outcome->notes + used, sizeof outcome->notes - used,
                           "the ranks above are the last world's (--elastic):");
  for (int r = 0; r < job->tp && used < sizeof outcome->notes; r++)
    used += (size_t)snprintf(outcome->notes + used, sizeof outcome->notes - used,
                             " %d is the run's rank %d%s", r, e->original[r],
                             r + 1 < job->tp ? "," : "\n");
}

int htp_train(const htp_run_options *options, const htp_compiler *jit, htp_run_state *state,
              htp_ranks **ranks, int requested_tp, char *err, size_t err_size) {
  const htp_train_options *train = &options->train;
  const int quiet = state->process_rank > 0;
  if (options->trace && state->process_rank >= 0) { /* options.c refuses --backend mpi */
    state->bad_command_line = 1;
    return htp_set_error(err, err_size, "--train --trace: under mpirun the trace is not written "
                         "yet; trace a run of the local backend");
  }
  state->loader = state->shared ? htp_so_loader() : jit;
  if (check_outputs(options, err, err_size))
    return 1;
  train_job job;
  memset(&job, 0, sizeof job);
  job.options = options;
  job.process_rank = state->process_rank;
  htp_idx_set train_set, test_set;
  memset(&train_set, 0, sizeof train_set);
  memset(&test_set, 0, sizeof test_set);
  job.train = &train_set;
  job.test = &test_set;
  int status = 1;
  char reason[2048];
  /* The data first: its errors are the cheapest to hit. */
  if (htp_fmnist_load(train->data, HTP_FMNIST_TRAIN, train->limit_train, &train_set, reason,
                      sizeof reason) ||
      htp_fmnist_load(train->data, HTP_FMNIST_TEST, train->limit_test, &test_set, reason,
                      sizeof reason))
    htp_set_error(err, err_size, "--data: %s", reason);
  else if (!bind_entries(options, state, requested_tp, quiet, &job, err, err_size) &&
           !size_job(options, state, &job, err, err_size) &&
           !open_train_ranks(options, state, &job, ranks, err, err_size)) {
    const int standby = htp_ranks_is_standby(*ranks);
    if (!quiet && !standby)
      print_banner(options, state, &job);
    status = standby ? stand_by(options, state, ranks, &job, err, err_size)
                     : run_worlds(options, state, ranks, &job, err, err_size);
    /* The standbys still waiting go when the run ends, however it ends. */
    char why[512];
    if (train->standby && !htp_ranks_is_standby(*ranks) &&
        htp_ranks_release(*ranks, why, sizeof why)) {
      const size_t used = strlen(state->outcome.notes);
      snprintf(state->outcome.notes + used, sizeof state->outcome.notes - used, "%s\n", why);
    }
    if (status == 2)
      name_renumbered_ranks(&job, &state->outcome);
    /* Under mpirun a shrink may have made this process rank 0. */
    if (state->process_rank <= 0 && job.elastic.taken > 0)
      htp_train_elastic_report(options, &job);
    if (status == 0 && options->profile && state->process_rank <= 0)
      htp_report_profile(&state->outcome, job.tp, job.profiled_steps,
                         "training steps of the first epoch (after its first)");
    /* The run's trace (a failed run's too: it says what led up to it)
     * replaces the old one, unless a write failed (a full disk, ulimit -f).
     * A run that never started leaves it to release_job: the old stays. */
    if (job.trace) {
      char why[4600];
      const int bad =
          htp_file_end(job.trace, job.trace_temporary, options->trace, why, sizeof why);
      job.trace = NULL;
      if (bad && status == 0)
        status = htp_set_error(err, err_size, "--trace %s: %.1900s (a full disk or a file-size "
                               "limit?): the old file is kept", options->trace, why);
    }
  }
  release_job(&job);
  htp_idx_free_set(&train_set);
  htp_idx_free_set(&test_set);
  return status;
}
