/*===- tools/htp-run/train.c - htp-run --train ----------------------------===*
 *
 * Trains a block's gradient entry on Fashion-MNIST with htp-run's own
 * machinery: the loader (JIT or .so), the signature, the world and its
 * rank threads (ranks.h tasks), each rank's buffers in its context's
 * memory, the shard layouts (shard.h), --params through the safetensors
 * binder, --slow/--fault and straggler detection. Per step every rank
 * takes the same batch, calls the grad entry (loss, logits, one gradient
 * per parameter: LOCAL shards, so a rank updates only what it holds), then
 * updates its parameters in place with the kernel table's optimizer entry
 * on device memory. After each epoch the test set runs through the eval
 * entry (the grad entry's name without "_grad"), rank 0 gathers the shards
 * into a timm-named checkpoint and writes the metrics.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/train.h"

#include "kernels/htp_kernels.h" /* htp_cpu_set_blas_threads */
#include "runtime/htp_ops.h" /* htp_op_sgd_momentum_f32, htp_op_adamw_f32 */
#include "tools/htp-run/data.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"
#include "tools/htp-run/safetensors.h"
#include "tools/htp-run/shard.h"
#include "tools/htp-run/so_loader.h"
#include "tools/htp-run/step.h"
#include "tools/htp-train/dataset.h"
#include "tools/htp-train/init.h"

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

enum { MAX_CANDIDATES = 64, NAME_SIZE = 512 };
#define ADAM_BETA1 0.9
#define ADAM_BETA2 0.999
#define ADAM_EPS 1e-8

/* One epoch's numbers (rank 0's). */
typedef struct epoch_metrics {
  long epoch; /* 1-based */
  double train_loss, train_acc, test_loss, test_acc, seconds, eval_seconds, ms_per_step;
  double model_seconds; /* --clock cpu or units: the steps' modelled time */
  long skipped;         /* steps left out for a non-finite loss (--skip-nonfinite) */
} epoch_metrics;

/* What every rank reads, and what rank 0 fills. */
typedef struct train_job {
  const htp_run_options *options;
  const htp_signature *sig, *eval_sig; /* eval_sig == sig: no eval entry */
  htp_entry_fn fn, eval_fn;
  int images, targets;                 /* argument indices */
  int loss, logits, eval_logits;       /* result indices */
  int batch;
  int tp;
  const htp_idx_set *train, *test;
  long steps;                          /* per epoch */
  long first_epoch;                    /* 0-based: epochs already done (resume) */
  void **params;                       /* [num_args] global starting values (params only) */
  void **moments[2];                   /* [num_args] global m, v from --resume, or NULL */
  void **gathered[3];                  /* [num_args] rank 0's gathered w, m, v (checkpoint) */
  epoch_metrics *metrics;              /* [epochs] */
  long epochs_done;                    /* by this run */
  int *stragglers;                     /* [tp] flagged at some step (rank 0's planner) */
  int balance;                         /* the grad entry has balance hooks: a real balancer */
  htp_balancer_config balancer;        /* its config (without hooks: detection only) */
  FILE *trace;                         /* --trace: the balancers' lines, or NULL */
  int process_rank;                    /* mpi: this process's rank; local: -1 */
} train_job;

/* ---------------------------------------------------------------------- */
/* Finding the entries.                                                    */

static int ends_with(const char *text, const char *suffix) {
  size_t length = strlen(text), tail = strlen(suffix);
  return length >= tail && strcmp(text + length - tail, suffix) == 0;
}

/* The entries --train may use, from the loader's listing: a .so's entries
 * as compiled; a .mlir's public functions each as NAME_grad (htp-grad's
 * name for its backward, written by the pipeline) or as itself when it
 * already ends in _grad. The signatures decide. */
typedef struct candidates {
  char names[MAX_CANDIDATES][NAME_SIZE];
  int count;
  int add_grad_suffix; /* a .mlir: the pipeline writes NAME_grad */
} candidates;

static void add_candidate(void *user, const char *name) {
  candidates *c = user;
  char candidate[NAME_SIZE];
  const int grad = c->add_grad_suffix && !ends_with(name, "_grad");
  if (c->count == MAX_CANDIDATES ||
      snprintf(candidate, sizeof candidate, "%s%s", name, grad ? "_grad" : "") >= NAME_SIZE)
    return;
  for (int i = 0; i < c->count; i++)
    if (strcmp(c->names[i], candidate) == 0)
      return;
  strcpy(c->names[c->count++], candidate);
}

/* Appends separator and text to buffer (NUL-terminated), cut to fit. */
static void append_text(char *buffer, size_t size, const char *separator, const char *text) {
  const char *parts[2] = {separator, text};
  size_t used = strlen(buffer);
  for (int k = 0; k < 2; k++) {
    size_t n = strlen(parts[k]);
    if (n > size - 1 - used)
      n = size - 1 - used;
    memcpy(buffer + used, parts[k], n);
    used += n;
  }
  buffer[used] = '\0';
}

static int has_gradients(const htp_signature *sig) {
  for (int k = 0; k < sig->num_results; k++)
    if (sig->results[k].role == HTP_SIG_GRAD)
      return 1;
  return 0;
}

/* Loads entry `name` and parses its signature; non-zero with err. */
static int load_entry(const htp_compiler *loader, const char *path, const char *name, int tp,
                      htp_compiled *compiled, htp_signature *sig, char *err, size_t err_size) {
  htp_compile_options compile = {tp, NULL};
  memset(compiled, 0, sizeof *compiled);
  if (loader->load(path, name, &compile, compiled, err, err_size)) {
    memset(compiled, 0, sizeof *compiled);
    return 1;
  }
  char reason[1024];
  const char *text = compiled->signature;
  if (htp_signature_parse(text, text ? strlen(text) : 0, sig, reason, sizeof reason) != HTP_OK) {
    loader->unload(compiled);
    memset(compiled, 0, sizeof *compiled);
    return htp_set_error(err, err_size, "%s: entry '%s': bad signature: %s", path, name, reason);
  }
  return 0;
}

/* The grad entry: --entry, or the one entry whose results hold gradients. */
static int find_grad_entry(const htp_run_options *options, htp_run_state *state, int tp,
                           char *err, size_t err_size) {
  const char *path = options->path;
  if (options->entry) {
    if (load_entry(state->loader, path, options->entry, tp, &state->compiled, &state->sig, err,
                   err_size))
      return 1;
    if (!has_gradients(&state->sig))
      return htp_set_error(err, err_size, "--train: entry '%s' of %s returns no gradients (no "
                           "result of role \"grad\"): name the gradient entry htp-grad wrote, "
                           "e.g. --entry %s_grad", options->entry, path, options->entry);
    return 0;
  }
  static candidates listed;
  listed.count = 0;
  listed.add_grad_suffix = !state->shared;
  if (state->loader->list(path, add_candidate, &listed, err, err_size) < 0)
    return 1;
  const int count = listed.count;
  char (*names)[NAME_SIZE] = listed.names;
  int found = 0;
  char first_error[1024] = "", list[2048] = "";
  for (int i = 0; i < count; i++) {
    htp_compiled compiled;
    htp_signature sig;
    char why[16384];
    if (load_entry(state->loader, path, names[i], tp, &compiled, &sig, why, sizeof why)) {
      if (!first_error[0])
        append_text(first_error, sizeof first_error, "", why);
      continue;
    }
    if (!has_gradients(&sig)) {
      htp_signature_free(&sig);
      state->loader->unload(&compiled);
      continue;
    }
    if (found++ == 0) {
      state->compiled = compiled;
      state->sig = sig;
      append_text(list, sizeof list, "", names[i]);
    } else {
      append_text(list, sizeof list, ", ", names[i]);
      htp_signature_free(&sig);
      state->loader->unload(&compiled);
    }
  }
  if (found == 1)
    return 0;
  if (found > 1)
    return htp_set_error(err, err_size, "--train: %s has several gradient entries (%s): choose "
                         "one with --entry", path, list);
  return htp_set_error(err, err_size, "--train: %s has no gradient entry (a function whose "
                       "results have role \"grad\", written by the compiler's htp-grad for a "
                       "function whose first result is an htp.cross_entropy loss)%s%s", path,
                       first_error[0] ? "; the last attempt said: " : "", first_error);
}

/* The eval entry: the grad entry's name without "_grad", with the same
 * arguments; without one the grad entry evaluates too (a note says so). */
static void find_eval_entry(const htp_run_options *options, htp_run_state *state, int tp,
                            int quiet) {
  const htp_signature *sig = &state->sig;
  char name[NAME_SIZE];
  if (!ends_with(sig->entry, "_grad") || strlen(sig->entry) >= NAME_SIZE)
    return;
  snprintf(name, sizeof name, "%.*s", (int)(strlen(sig->entry) - 5), sig->entry);
  char why[16384] = "";
  htp_compiled compiled;
  htp_signature eval;
  int ok = !load_entry(state->loader, options->path, name, tp, &compiled, &eval, why, sizeof why);
  if (ok) {
    int same = eval.num_args == sig->num_args && !has_gradients(&eval);
    for (int i = 0; same && i < sig->num_args; i++)
      same = strcmp(eval.args[i].name, sig->args[i].name) == 0 &&
             eval.args[i].bytes == sig->args[i].bytes && eval.args[i].rank == sig->args[i].rank &&
             eval.args[i].shard_layout == sig->args[i].shard_layout;
    if (same) {
      state->eval_compiled = compiled;
      state->eval_sig = eval;
      state->eval_loader = state->loader;
      return;
    }
    snprintf(why, sizeof why, "its arguments differ from %s's", sig->entry);
    htp_signature_free(&eval);
    state->loader->unload(&compiled);
  }
  if (!quiet)
    fprintf(stderr, "htp-run: note: --train: no eval entry '%s' (%.300s); the test set runs "
            "through %s\n", name, why, sig->entry);
}

/* ---------------------------------------------------------------------- */
/* Checking what the entries take and give.                                */

static int find_named(const htp_sig_tensor *tensors, int count, const char *name, int role,
                      int nth) {
  for (int i = 0; i < count; i++)
    if ((int)tensors[i].role == role && strcmp(tensors[i].name, name) == 0)
      return i;
  for (int i = 0, seen = 0; i < count; i++)
    if ((int)tensors[i].role == role && seen++ == nth)
      return i;
  return -1;
}

static int is_shape(const htp_sig_tensor *t, int rank, const int64_t *dims) {
  if (t->rank != rank || t->dtype != HTP_SIG_F32 || t->shard_layout != HTP_SHARD_NONE)
    return 0;
  for (int d = 0; d < rank; d++)
    if (t->dims[d] != dims[d])
      return 0;
  return 1;
}

/* Images [B, 1, 28, 28] and targets [B, 10] (inputs named so, else the
 * first two), loss [1] (named "loss", else result 0), logits [B, 10]
 * ("logits", else the next result); f32, not sharded. */
static int check_entry(const htp_signature *sig, train_job *job, int *loss, int *logits,
                       char *err, size_t err_size) {
  int images = find_named(sig->args, sig->num_args, "images", HTP_SIG_INPUT, 0);
  int targets = find_named(sig->args, sig->num_args, "targets", HTP_SIG_INPUT, 1);
  if (images < 0 || targets < 0 || images == targets)
    return htp_set_error(err, err_size, "--train: entry '%s' needs two data inputs, images and "
                         "targets", sig->entry);
  const int64_t batch = sig->args[images].rank > 0 ? sig->args[images].dims[0] : 0;
  const int64_t image_dims[4] = {batch, 1, HTP_FMNIST_SIDE, HTP_FMNIST_SIDE};
  const int64_t target_dims[2] = {batch, HTP_FMNIST_CLASSES};
  if (batch < 1 || batch > INT32_MAX || !is_shape(&sig->args[images], 4, image_dims) ||
      !is_shape(&sig->args[targets], 2, target_dims))
    return htp_set_error(err, err_size, "--train: entry '%s' takes '%s' and '%s'; Fashion-MNIST "
                         "needs images f32 [B, 1, 28, 28] and targets f32 [B, 10] (compile the "
                         "model with gen_vit.py --model --image 28 --channels 1 --classes 10)",
                         sig->entry, sig->args[images].name, sig->args[targets].name);
  *loss = -1;
  *logits = -1;
  for (int k = 0; k < sig->num_results; k++) {
    if (sig->results[k].role == HTP_SIG_GRAD)
      continue;
    if (strcmp(sig->results[k].name, "loss") == 0)
      *loss = k;
    else if (strcmp(sig->results[k].name, "logits") == 0)
      *logits = k;
  }
  for (int k = 0; k < sig->num_results && (*loss < 0 || *logits < 0); k++)
    if (sig->results[k].role != HTP_SIG_GRAD && k != *loss && k != *logits) {
      if (*loss < 0)
        *loss = k;
      else
        *logits = k;
    }
  const int64_t one = 1;
  if (*loss < 0 || *logits < 0 || !is_shape(&sig->results[*loss], 1, &one) ||
      !is_shape(&sig->results[*logits], 2, target_dims))
    return htp_set_error(err, err_size, "--train: entry '%s' must return a loss f32 [1] and "
                         "logits f32 [B, 10] (results named \"loss\" and \"logits\")",
                         sig->entry);
  job->images = images;
  job->targets = targets;
  job->batch = (int)batch;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Starting weights: --params, --resume (and its moments), or the init.    */

static void free_globals(void **globals, int count) {
  if (!globals)
    return;
  for (int i = 0; i < count; i++)
    free(globals[i]);
  free(globals);
}

/* Global host buffers for every parameter of sig (NULL for inputs). */
static void **param_buffers(const htp_signature *sig) {
  void **buffers = calloc((size_t)sig->num_args + 1, sizeof *buffers);
  if (!buffers)
    return NULL;
  for (int i = 0; i < sig->num_args; i++)
    if (sig->args[i].role == HTP_SIG_PARAM && !(buffers[i] = htp_aligned_buffer(sig->args[i].global_bytes))) {
      free_globals(buffers, sig->num_args);
      return NULL;
    }
  return buffers;
}

/* sig with every argument at its global shape, unsharded: what the
 * binder matches a safetensors file against. args must be freed. */
static htp_signature global_view(const htp_signature *sig) {
  htp_signature global = *sig;
  global.args = calloc((size_t)sig->num_args + 1, sizeof *global.args);
  for (int i = 0; global.args && i < sig->num_args; i++) {
    htp_sig_tensor *arg = &global.args[i];
    *arg = sig->args[i];
    memcpy(arg->dims, arg->global_dims, sizeof arg->dims);
    arg->count = arg->global_count;
    arg->bytes = arg->global_bytes;
    arg->shard_layout = HTP_SHARD_NONE;
  }
  return global;
}

static int read_moments(const char *path, const htp_signature *sig, const char *prefix,
                        void **out, char *err, size_t err_size) {
  htp_safetensors st;
  char reason[512];
  if (htp_safetensors_open(path, &st, reason, sizeof reason))
    return htp_set_error(err, err_size, "%s: %s", path, reason);
  int status = 0;
  for (int i = 0; i < sig->num_args && !status; i++) {
    const htp_sig_tensor *p = &sig->args[i];
    if (p->role != HTP_SIG_PARAM)
      continue;
    char name[NAME_SIZE + 8];
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    const htp_st_tensor *t = htp_safetensors_find(&st, name);
    int same = t && t->rank == p->rank;
    for (int d = 0; same && d < p->rank; d++)
      same = t->dims[d] == p->global_dims[d];
    if (!same)
      status = htp_set_error(err, err_size, "%s: no tensor '%s' of parameter '%s''s global "
                             "shape (the optimizer state of another model or optimizer?)", path,
                             name, p->name);
    else if (htp_safetensors_read_f32(&st, t, out[i], reason, sizeof reason))
      status = htp_set_error(err, err_size, "%s: %s", path, reason);
  }
  htp_safetensors_close(&st);
  return status;
}

/* A metadata value of the checkpoint as a non-negative integer. */
static int metadata_long(const htp_safetensors *st, const char *path, const char *key, long *out,
                         char *err, size_t err_size) {
  const char *text = htp_safetensors_metadata(st, key);
  char *end;
  errno = 0;
  long value = text ? strtol(text, &end, 10) : -1;
  if (!text || errno || end == text || *end || value < 0)
    return htp_set_error(err, err_size, "%s: not a checkpoint of htp-run --train (its metadata "
                         "has no valid '%s')", path, key);
  *out = value;
  return 0;
}

static const char *optimizer_name(htp_train_optimizer optimizer) {
  return optimizer == HTP_TRAIN_SGD ? "sgd" : "adamw";
}

const char *htp_train_checkpoint_suffix(int s) {
  static const char *const suffixes[HTP_TRAIN_CHECKPOINT_FILES] = {"", ".tmp", ".optim",
                                                                   ".optim.tmp", ".optim.prev"};
  return s >= 0 && s < HTP_TRAIN_CHECKPOINT_FILES ? suffixes[s] : "";
}

enum { CK_WEIGHTS, CK_WEIGHTS_NEW, CK_OPTIM, CK_OPTIM_NEW, CK_OPTIM_PREVIOUS };

static void checkpoint_file(const char *checkpoint, int which, char *path, size_t size) {
  snprintf(path, size, "%s%s", checkpoint, htp_train_checkpoint_suffix(which));
}

/* The optimizer state that belongs to checkpoint FILE (DESIGN §13):
 * FILE.optim, or after a commit that stopped half way FILE.optim.prev,
 * whichever carries FILE's id (htp.checkpoint; a checkpoint written before
 * ids: the same htp.epoch and htp.step). Its path in path, else err says
 * what each file holds. */
static int matching_optim(const char *checkpoint, const htp_safetensors *weights, char *path,
                          size_t size, char *err, size_t err_size) {
  const char *id = htp_safetensors_metadata(weights, "htp.checkpoint");
  const char *epoch = htp_safetensors_metadata(weights, "htp.epoch");
  const char *step = htp_safetensors_metadata(weights, "htp.step");
  char seen[2][4800] = {"", ""};
  const int candidates[2] = {CK_OPTIM, CK_OPTIM_PREVIOUS};
  for (int c = 0; c < 2; c++) {
    checkpoint_file(checkpoint, candidates[c], path, size);
    htp_safetensors st;
    char reason[512];
    if (htp_safetensors_open(path, &st, reason, sizeof reason)) {
      snprintf(seen[c], sizeof seen[c], "%s: %s", path, reason);
      continue;
    }
    const char *other_id = htp_safetensors_metadata(&st, "htp.checkpoint");
    const char *other_epoch = htp_safetensors_metadata(&st, "htp.epoch");
    const char *other_step = htp_safetensors_metadata(&st, "htp.step");
    int same = id ? other_id && strcmp(id, other_id) == 0
                  : !other_id && epoch && other_epoch && step && other_step &&
                        strcmp(epoch, other_epoch) == 0 && strcmp(step, other_step) == 0;
    snprintf(seen[c], sizeof seen[c], "%s is of epoch %s (%s)", path,
             other_epoch ? other_epoch : "?", other_id ? other_id : "no id");
    htp_safetensors_close(&st);
    if (same)
      return 0;
  }
  return htp_set_error(err, err_size, "--resume %s: its optimizer state does not belong to its "
                       "weights (epoch %s, %s): %s; %s. Refused: resuming would train on a pair "
                       "from two different steps", checkpoint, epoch ? epoch : "?",
                       id ? id : "no id", seen[0], seen[1]);
}

/* --resume FILE: the weights, FILE.optim's moments, and the epochs done. */
static int resume(const htp_train_options *train, const htp_signature *sig, train_job *job,
                  char *err, size_t err_size) {
  htp_safetensors st;
  char reason[512];
  if (htp_safetensors_open(train->resume, &st, reason, sizeof reason))
    return htp_set_error(err, err_size, "--resume %s: %s", train->resume, reason);
  long epoch = 0, batch = 0;
  const char *optimizer = htp_safetensors_metadata(&st, "htp.optimizer");
  int status = metadata_long(&st, train->resume, "htp.epoch", &epoch, err, err_size) ||
               metadata_long(&st, train->resume, "htp.batch", &batch, err, err_size);
  if (!status && (!optimizer || strcmp(optimizer, optimizer_name(train->optimizer)) != 0))
    status = htp_set_error(err, err_size, "--resume %s was trained with --optimizer %s; this run "
                           "has --optimizer %s", train->resume, optimizer ? optimizer : "?",
                           optimizer_name(train->optimizer));
  if (!status && batch != job->batch)
    status = htp_set_error(err, err_size, "--resume %s was trained with batches of %ld; this "
                           "block takes %d", train->resume, batch, job->batch);
  if (!status && epoch >= train->epochs)
    status = htp_set_error(err, err_size, "--resume %s has done %ld epoch%s already; --epochs "
                           "%ld asks for no more (--epochs counts all epochs, resumed or not)",
                           train->resume, epoch, epoch == 1 ? "" : "s", train->epochs);
  char path[4200];
  if (!status)
    status = matching_optim(train->resume, &st, path, sizeof path, err, err_size);
  htp_safetensors_close(&st);
  if (status)
    return 1;
  job->first_epoch = epoch;
  htp_signature global = global_view(sig);
  if (!global.args)
    return htp_set_error(err, err_size, "out of memory");
  status = htp_bind_weights(train->resume, &global, job->params, err, err_size);
  free(global.args);
  if (status)
    return 1;
  const int kinds = train->optimizer == HTP_TRAIN_ADAMW ? 2 : 1;
  for (int kind = 0; kind < kinds; kind++) {
    if (!(job->moments[kind] = param_buffers(sig)))
      return htp_set_error(err, err_size, "out of memory");
    if (read_moments(path, sig, kind ? "v." : "m.", job->moments[kind], err, err_size))
      return 1;
  }
  return 0;
}

static int starting_weights(const htp_train_options *train, const htp_signature *sig,
                            train_job *job, char *err, size_t err_size) {
  if (!(job->params = param_buffers(sig)))
    return htp_set_error(err, err_size, "out of memory");
  if (train->resume)
    return resume(train, sig, job, err, err_size);
  if (train->params) {
    htp_signature global = global_view(sig);
    if (!global.args)
      return htp_set_error(err, err_size, "out of memory");
    int status = htp_bind_weights(train->params, &global, job->params, err, err_size);
    free(global.args);
    return status;
  }
  for (int i = 0; i < sig->num_args; i++)
    if (sig->args[i].role == HTP_SIG_PARAM)
      htp_train_init_param(sig->args[i].name, sig->args[i].global_count, job->options->seed,
                           job->params[i]);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Writing: the checkpoint, its optimizer state, the metrics.             */

/* An output path must be a regular file where it exists, in a directory
 * where one can be created: checked before training, not after an epoch. */
static int check_output(const char *flag, const char *path, char *err, size_t err_size) {
  struct stat info;
  if (stat(path, &info) == 0 && !S_ISREG(info.st_mode))
    return htp_set_error(err, err_size, "--%s %s: not a regular file (a directory, device or "
                         "pipe?)", flag, path);
  char probe[4200];
  if ((size_t)snprintf(probe, sizeof probe, "%s.tmp", path) >= sizeof probe)
    return htp_set_error(err, err_size, "--%s: the name is too long", flag);
  FILE *file = fopen(probe, "wb");
  if (!file)
    return htp_set_error(err, err_size, "--%s %s: cannot create %s: %s", flag, path, probe,
                         strerror(errno));
  fclose(file);
  remove(probe);
  return 0;
}

/* HTP_TRAIN_CRASH_AT=K (tests only): the process kills itself (SIGKILL, as
 * kill -9 would) at the K-th step of committing checkpoints, counted over
 * the run from 1, so that a test can stop a commit between any two of its
 * writes and renames and check what a resume then finds. */
static void crash_point(void) {
  static long reached;
  const char *text = getenv("HTP_TRAIN_CRASH_AT");
  if (text && *text && ++reached == strtol(text, NULL, 10)) {
    fflush(NULL);
    raise(SIGKILL);
  }
}

/* A checkpoint is one unit (DESIGN §13): FILE (the weights, a timm state
 * dict) and FILE.optim (the moments) carry one id in their metadata, and
 * are committed so that a reader finds the old pair or the new one,
 * whatever is killed when: both new files are written and fsync'd beside
 * the old ones first (.tmp), the old FILE.optim steps aside as
 * FILE.optim.prev, the new FILE.optim takes its name, and renaming the new
 * weights over FILE is the commit; FILE.optim.prev goes last. A resume
 * takes the FILE.optim or FILE.optim.prev whose id is FILE's (resume()). */
static int commit_checkpoint(const char *checkpoint, const htp_st_write *weights, int count,
                             const htp_st_write *moments, int written,
                             const char *const *metadata, char *err, size_t err_size) {
  char path[HTP_TRAIN_CHECKPOINT_FILES][4200];
  for (int s = 0; s < HTP_TRAIN_CHECKPOINT_FILES; s++)
    checkpoint_file(checkpoint, s, path[s], sizeof path[s]);
  crash_point();
  if (htp_safetensors_write_f32_at(path[CK_OPTIM_NEW], moments, written, metadata, err,
                                   err_size))
    return 1;
  crash_point();
  if (htp_safetensors_write_f32_at(path[CK_WEIGHTS_NEW], weights, count, metadata, err,
                                   err_size)) {
    remove(path[CK_OPTIM_NEW]);
    return 1;
  }
  struct stat info;
  const struct {
    int from, to;
  } renames[] = {{CK_OPTIM, CK_OPTIM_PREVIOUS}, {CK_OPTIM_NEW, CK_OPTIM}, {CK_WEIGHTS_NEW, CK_WEIGHTS}};
  for (size_t r = 0; r < sizeof renames / sizeof *renames; r++) {
    crash_point();
    if (renames[r].from == CK_OPTIM && stat(path[CK_OPTIM], &info) != 0)
      continue; /* the first checkpoint: nothing to keep */
    if (rename(path[renames[r].from], path[renames[r].to]) != 0)
      return htp_set_error(err, err_size, "%s: cannot rename %s to %s: %s (the previous "
                           "checkpoint is still whole)", checkpoint, path[renames[r].from],
                           path[renames[r].to], strerror(errno));
  }
  htp_sync_directory_of(checkpoint);
  crash_point();
  remove(path[CK_OPTIM_PREVIOUS]);
  htp_sync_directory_of(checkpoint);
  return 0;
}

/* The first non-finite value of a gathered parameter, named in err. */
static int check_finite(const htp_signature *sig, void **gathered, const char *what, char *err,
                        size_t err_size) {
  for (int i = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *p = &sig->args[i];
    if (p->role != HTP_SIG_PARAM)
      continue;
    const float *values = gathered[i];
    for (int64_t k = 0; k < p->global_count; k++)
      if (!isfinite(values[k]))
        return htp_set_error(err, err_size, "%s '%s' holds %g at element %lld: not written (the "
                             "previous checkpoint stays)", what, p->name, (double)values[k],
                             (long long)k);
  }
  return 0;
}

static int write_checkpoint(const train_job *job, long epochs_done, long steps_done, char *err,
                            size_t err_size) {
  const htp_run_options *options = job->options;
  const htp_train_options *train = &options->train;
  const htp_signature *sig = job->sig;
  const int kinds = train->optimizer == HTP_TRAIN_ADAMW ? 3 : 2;
  for (int kind = 0; kind < kinds; kind++)
    if (check_finite(sig, job->gathered[kind], kind == 0 ? "parameter" : "an optimizer moment of",
                     err, err_size))
      return 1;
  htp_st_write *tensors = calloc((size_t)sig->num_args + 1, sizeof *tensors);
  if (!tensors)
    return htp_set_error(err, err_size, "out of memory");
  char epoch[32], steps[32], batch[32], seed[32], lr[32], wd[32], momentum[32], total[32],
      tp[16], limit[32], id[96];
  snprintf(epoch, sizeof epoch, "%ld", epochs_done);
  snprintf(steps, sizeof steps, "%ld", steps_done);
  snprintf(batch, sizeof batch, "%d", job->batch);
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)options->seed);
  snprintf(lr, sizeof lr, "%.17g", train->lr);
  snprintf(wd, sizeof wd, "%.17g", train->weight_decay);
  snprintf(momentum, sizeof momentum, "%.17g", train->momentum);
  snprintf(total, sizeof total, "%ld", train->epochs);
  snprintf(tp, sizeof tp, "%d", job->tp);
  snprintf(limit, sizeof limit, "%u", job->train->count);
  /* The pair's id: its step, and what tells two runs' same step apart. */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  snprintf(id, sizeof id, "step %ld, %lld.%09ld, process %ld", steps_done,
           (long long)now.tv_sec, now.tv_nsec, (long)getpid());
  const char *metadata[] = {"format", "pt", "htp.epoch", epoch, "htp.step", steps,
                            "htp.batch", batch, "htp.seed", seed,
                            "htp.optimizer", optimizer_name(train->optimizer), "htp.lr", lr,
                            "htp.weight_decay", wd, "htp.momentum", momentum,
                            "htp.schedule", train->schedule == HTP_TRAIN_COSINE ? "cosine"
                                                                                : "constant",
                            "htp.epochs", total, "htp.tp", tp, "htp.train_examples", limit,
                            "htp.entry", sig->entry, "htp.checkpoint", id, NULL};
  /* FILE: the weights under timm's names; FILE.optim: m.NAME (and v.NAME
   * for AdamW), all at their global shapes, with the same metadata. */
  char (*names)[NAME_SIZE + 2] = calloc((size_t)sig->num_args * 2 + 1, sizeof *names);
  int status = names ? 0 : htp_set_error(err, err_size, "out of memory");
  int count = 0;
  for (int i = 0; i < sig->num_args && !status; i++)
    if (sig->args[i].role == HTP_SIG_PARAM)
      tensors[count++] = (htp_st_write){sig->args[i].name, sig->args[i].rank,
                                        sig->args[i].global_dims, job->gathered[0][i]};
  htp_st_write *moments = status ? NULL : calloc((size_t)count * 2 + 1, sizeof *moments);
  if (!status && !moments)
    status = htp_set_error(err, err_size, "out of memory");
  int written = 0;
  for (int kind = 1; kind < kinds && !status; kind++)
    for (int i = 0; i < sig->num_args; i++) {
      const htp_sig_tensor *p = &sig->args[i];
      if (p->role != HTP_SIG_PARAM)
        continue;
      char *name = names[(size_t)(kind - 1) * (size_t)sig->num_args + (size_t)i];
      snprintf(name, NAME_SIZE + 2, "%s.%s", kind == 1 ? "m" : "v", p->name);
      moments[written++] = (htp_st_write){name, p->rank, p->global_dims, job->gathered[kind][i]};
    }
  if (!status)
    status = commit_checkpoint(train->checkpoint, tensors, count, moments, written, metadata, err,
                               err_size);
  free(moments);
  free(names);
  free(tensors);
  return status;
}

static int write_metrics(const train_job *job, const char *eval_entry, char *err,
                         size_t err_size) {
  const htp_run_options *options = job->options;
  json_t *root = json_object(), *epochs = json_array(), *stragglers = json_array();
  if (!root || !epochs || !stragglers) {
    json_decref(root);
    json_decref(epochs);
    json_decref(stragglers);
    return htp_set_error(err, err_size, "out of memory");
  }
  for (long e = 0; e < job->epochs_done; e++) {
    const epoch_metrics *m = &job->metrics[e];
    /* An epoch whose every step was skipped has no train loss: null. */
    json_t *row = json_pack("{s:I, s:o, s:o, s:f, s:f, s:f, s:f, s:f}", "epoch",
                            (json_int_t)m->epoch, "train_loss",
                            isfinite(m->train_loss) ? json_real(m->train_loss) : json_null(),
                            "train_acc",
                            isfinite(m->train_acc) ? json_real(m->train_acc) : json_null(),
                            "test_loss", m->test_loss, "test_acc", m->test_acc, "epoch_s",
                            m->seconds, "eval_s", m->eval_seconds, "ms_per_step",
                            m->ms_per_step);
    if (row && options->train.clock != HTP_TRAIN_CLOCK_WALL)
      json_object_set_new(row, "model_s", json_real(m->model_seconds));
    if (row && options->train.skip_nonfinite)
      json_object_set_new(row, "skipped_steps", json_integer(m->skipped));
    json_array_append_new(epochs, row);
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
  json_object_set_new(root, "policy", json_string(htp_policy_name(options->policy)));
  json_object_set_new(root, "slow", options->slow ? json_string(options->slow) : json_null());
  json_object_set_new(root, "select", json_string(htp_select_name(options->selection)));
  json_object_set_new(root, "impute", json_string(htp_impute_name(options->impute)));
  if (options->impute == HTP_IMPUTE_SAME)
    json_object_set_new(root, "same_max_age", json_integer(options->same_max_age));
  json_object_set_new(root, "optimizer", json_string(optimizer_name(options->train.optimizer)));
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
  json_object_set_new(root, "first_epoch", json_integer(job->first_epoch + 1));
  json_object_set_new(root, "stragglers", stragglers);
  /* What the policies move: heads and MLP units a rank (null unbalanced). */
  const htp_sig_balance *balance = &job->sig->balance;
  json_object_set_new(root, "units_per_rank",
                      balance->present ? json_pack("[ii]", balance->heads, balance->mlp_units)
                                       : json_null());
  json_object_set_new(root, "epochs", epochs);
  char temporary[4200];
  snprintf(temporary, sizeof temporary, "%s.tmp", options->train.metrics);
  int failed = json_dump_file(root, temporary, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0 ||
               rename(temporary, options->train.metrics) != 0;
  json_decref(root);
  if (failed) {
    remove(temporary);
    return htp_set_error(err, err_size, "--metrics %s: cannot write: %s",
                         options->train.metrics, strerror(errno));
  }
  return 0;
}

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
} rank_run;

#define RANK_TRY(call, step, iteration)                                                      \
  do {                                                                                       \
    htp_result try_result_ = (call);                                                         \
    if (try_result_ != HTP_OK) {                                                             \
      htp_rank_task_fail(run->task, run->ctx, try_result_, step, iteration,                  \
                         htp_last_error(run->ctx));                                          \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

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
                        t->shard_parts, run->rank, t->shard_layout, reason, sizeof reason)) {
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
  htp_result result = htp_rank_check_device_memory(run->ctx, bytes, why, sizeof why);
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
    if (upload_slice(run, p, job->params[i], b->grad[i]))
      return 1;
    void **moment[2] = {&b->m[i], &b->v[i]};
    const int kinds = job->options->train.optimizer == HTP_TRAIN_ADAMW ? 2 : 1;
    for (int kind = 0; kind < kinds; kind++) {
      RANK_TRY(htp_mem_alloc(run->ctx, p->bytes, moment[kind]), "allocating its buffers", -1);
      if (job->moments[kind]) {
        if (upload_slice(run, p, job->moments[kind][i], *moment[kind]))
          return 1;
      } else {
        void *zeros = calloc(1, p->bytes);
        htp_result result = zeros ? htp_mem_upload(run->ctx, *moment[kind], zeros, p->bytes)
                                  : HTP_ERR_NOMEM;
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
               optimizer_name(train->optimizer), sig->args[i].name, htp_last_error(run->ctx));
      return htp_step_fail(failure, result, "the optimizer", detail);
    }
  }
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
  int bad = 0;
  for (int r = 0; result == HTP_OK && !bad && r < run->job->tp; r++)
    bad = htp_shard_place(all + p->bytes * (size_t)r, out, p->element_size, p->rank, p->dims,
                          p->shard_dim, p->shard_parts, r, p->shard_layout, reason,
                          sizeof reason);
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
  if (write_checkpoint(job, epochs_done, steps_done, err, sizeof err)) {
    htp_rank_task_fail(run->task, run->ctx, HTP_ERR_SYSTEM, "writing the checkpoint", -1, err);
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

static int run_epochs(rank_run *run, rank_buffers *b, htp_balancer *balancer) {
  train_job *job = run->job;
  const htp_run_options *options = job->options;
  const htp_signature *sig = job->sig, *eval = job->eval_sig;
  const int batch = job->batch, is_zero = run->rank == 0;
  const long total = options->train.epochs * job->steps;
  const int tty = is_zero && isatty(STDERR_FILENO);
  float *images = malloc(sig->args[job->images].bytes), *targets = malloc(sig->args[job->targets].bytes);
  float *logits = malloc(sig->results[job->logits].bytes);
  int32_t *labels = malloc((size_t)batch * sizeof *labels);
  uint32_t *order = malloc((size_t)job->train->count * sizeof *order);
  const int cpu_clock = options->train.clock != HTP_TRAIN_CLOCK_WALL; /* cpu or units */
  double *rank_model = malloc((size_t)job->tp * sizeof *rank_model);
  int failed = 0;
  if (!images || !targets || !logits || !labels || !order || !rank_model) {
    htp_rank_task_fail(run->task, run->ctx, HTP_ERR_NOMEM, "allocating its batch", -1,
                       "out of memory");
    failed = 1;
  }
  const htp_plan *plan = NULL;
  /* HTP_TRAIN_NAN_STEP=K (tests only): step K's loss reads as nan. Read
   * once, not per step. */
  const char *nan_text = getenv("HTP_TRAIN_NAN_STEP");
  const long nan_step = nan_text && *nan_text ? strtol(nan_text, NULL, 10) : -1;
  step_update updater = {run, b, balancer, total, nan_step, 0, 0, 1, 0.0f};
  const htp_rank_step rank_step = {run->ctx, balancer, job->fn, b->grad, "the grad entry",
                                   update_after_step, &updater};
  for (long epoch = job->first_epoch; !failed && epoch < options->train.epochs; epoch++) {
    htp_fmnist_shuffle(order, job->train->count, options->seed, epoch);
    double loss_sum = 0, started = htp_now(), model_seconds = 0;
    long correct = 0, seen = 0, skipped = 0;
    for (long s = 0; s < job->steps && !failed; s++) {
      const long step = epoch * job->steps + s;
#define STEP_TRY(call, what) RANK_TRY(call, what, step)
      /* The batch first: the step's barrier and fault point come with its
       * timed call (step.h). */
      const int real =
          htp_fmnist_batch(job->train, order, (uint32_t)(s * batch), batch, images, targets, labels);
      if (options->train.augment != HTP_AUGMENT_NONE)
        htp_fmnist_augment(images, real,
                           options->train.augment == HTP_AUGMENT_FLIP_SHIFT ? HTP_FMNIST_SHIFT : 0,
                           options->seed, step);
      if (options->train.random_erase > 0)
        htp_fmnist_erase(images, real, options->train.random_erase, options->seed, step);
      if (options->train.label_smoothing > 0)
        htp_fmnist_smooth_targets(targets, real, options->train.label_smoothing);
      STEP_TRY(htp_mem_upload(run->ctx, b->grad[job->images], images,
                              sig->args[job->images].bytes), "uploading the batch");
      STEP_TRY(htp_mem_upload(run->ctx, b->grad[job->targets], targets,
                              sig->args[job->targets].bytes), "uploading the batch");
      const double factor = htp_step_slowdown(options->slows, options->num_slows, run->rank, step);
      updater.step = step;
      updater.finite = 1;
      htp_step_result done;
      htp_step_failure failure;
      if (htp_rank_step_run(&rank_step, step, factor, &done, &failure)) {
        htp_rank_task_fail(run->task, run->ctx, failure.code, failure.what, step, failure.detail);
        return 1;
      }
      plan = done.plan;
      const int finite = updater.finite;
      const float loss = updater.loss;
      if (!finite)
        skipped++;
      if (cpu_clock) {
        /* One device a rank: its CPU work plus the --slow share the hooks
         * booked (factor x their CPU time) without waiting; the step ends
         * with its slowest rank. */
        const double hooks = done.times.hook_seconds;
        double mine = done.times.compute_seconds + (hooks > 0 ? hooks - hooks / factor : 0);
        double slowest = 0;
        STEP_TRY(htp_allgather(run->ctx, &mine, rank_model, sizeof mine),
                 "gathering the modelled step times");
        for (int r = 0; r < job->tp; r++)
          slowest = rank_model[r] > slowest ? rank_model[r] : slowest;
        model_seconds += slowest;
      }
      if (!is_zero)
        continue;
      for (int r = 0; r < plan->world_size; r++)
        job->stragglers[r] |= plan->straggler[r] != 0;
      if (!finite)
        continue;
      STEP_TRY(htp_mem_download(run->ctx, logits, b->grad[sig->num_args + job->logits],
                                sig->results[job->logits].bytes), "downloading the logits");
      double ignored = 0;
      score(logits, labels, batch, &ignored, &correct);
      loss_sum += loss;
      seen += batch;
      if (tty)
        progress(epoch + 1, options->train.epochs, s + 1, job->steps,
                 loss_sum / (double)(s + 1 - skipped),
                 1e3 * (htp_now() - started) / (double)(s + 1));
#undef STEP_TRY
    }
    const double train_seconds = htp_now() - started;
    /* The test set, in batches of B: a last partial batch padded with
     * zeros, the padding left out of the loss and accuracy. */
    double test_loss = 0, eval_started = htp_now();
    long test_correct = 0;
    /* The whole model is evaluated, whatever the plan (every rank alike). */
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
      if (!is_zero)
        continue;
      void *source = eval == sig ? b->grad[sig->num_args + job->logits]
                                 : b->eval[eval->num_args + job->eval_logits];
      RANK_TRY(htp_mem_download(run->ctx, logits, source, sig->results[job->logits].bytes),
               "downloading the test logits", -1);
      score(logits, labels, real, &test_loss, &test_correct);
    }
    RANK_TRY(htp_balancer_suspend(balancer, 0), "resuming the balancer", -1);
    const double eval_seconds = htp_now() - eval_started;
    if (tty)
      fputc('\n', stderr);
    if (options->train.checkpoint && checkpoint(run, b, epoch + 1, (epoch + 1) * job->steps))
      return 1;
    if (!is_zero)
      continue;
    epoch_metrics *m = &job->metrics[job->epochs_done++];
    m->epoch = epoch + 1;
    m->train_loss = seen ? loss_sum / (double)(job->steps - skipped) : NAN;
    m->skipped = skipped;
    m->train_acc = seen ? (double)correct / (double)seen : NAN;
    m->test_loss = test_loss / (double)job->test->count;
    m->test_acc = (double)test_correct / (double)job->test->count;
    m->seconds = train_seconds;
    m->eval_seconds = eval_seconds;
    m->ms_per_step = 1e3 * train_seconds / (double)job->steps;
    m->model_seconds = model_seconds;
    char modelled[64] = "";
    if (cpu_clock)
      snprintf(modelled, sizeof modelled, ", modelled %.1f s", model_seconds);
    char skipped_note[96] = "";
    if (m->skipped)
      snprintf(skipped_note, sizeof skipped_note, ", %ld step%s skipped (non-finite loss)",
               m->skipped, m->skipped == 1 ? "" : "s");
    printf("epoch %ld/%ld: loss %.4f, train acc %.2f%%, test loss %.4f, test acc %.2f%%, %.1f s "
           "(%.1f ms/step%s), eval %.1f s%s\n", m->epoch, options->train.epochs, m->train_loss,
           100 * m->train_acc, m->test_loss, 100 * m->test_acc, m->seconds, m->ms_per_step,
           modelled, m->eval_seconds, skipped_note);
    fflush(stdout);
    char err[2048];
    if (options->train.metrics &&
        write_metrics(job, eval == sig ? sig->entry : eval->entry, err, sizeof err)) {
      htp_rank_task_fail(run->task, run->ctx, HTP_ERR_SYSTEM, "writing the metrics", -1, err);
      failed = 1;
    }
  }
  free(images);
  free(targets);
  free(logits);
  free(rank_model);
  free(labels);
  free(order);
  return failed;
}

static void train_rank(htp_rank_task *task, void *user) {
  rank_run run = {task, NULL, user, htp_rank_task_rank(task)};
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
  result = htp_balancer_create(run.ctx, &config, &balancer);
  if (result == HTP_OK)
    htp_balancer_set_trace(balancer, run.job->trace);
  const htp_train_clock clock = run.job->options->train.clock;
  if (result == HTP_OK && clock != HTP_TRAIN_CLOCK_WALL)
    result = htp_balancer_set_clock(balancer, clock == HTP_TRAIN_CLOCK_UNITS ? HTP_CLOCK_UNITS
                                                                               : HTP_CLOCK_THREAD);
  if (result != HTP_OK)
    htp_rank_task_fail(task, run.ctx, result, "creating its balancer", -1,
                       htp_last_error(run.ctx));
  else if (!make_buffers(&run, &buffers))
    run_epochs(&run, &buffers, balancer);
  free_buffers(run.ctx, run.job, &buffers);
  htp_balancer_destroy(balancer);
  htp_ctx_destroy(run.ctx);
}

/* ---------------------------------------------------------------------- */

static void release_job(train_job *job) {
  const int n = job->sig ? job->sig->num_args : 0;
  free_globals(job->params, n);
  for (int k = 0; k < 2; k++)
    free_globals(job->moments[k], n);
  for (int k = 0; k < 3; k++)
    free_globals(job->gathered[k], n);
  free(job->metrics);
  free(job->stragglers);
  if (job->trace)
    fclose(job->trace);
}

int htp_train(const htp_run_options *options, const htp_compiler *jit, htp_run_state *state,
              htp_ranks **ranks, int requested_tp, char *err, size_t err_size) {
  const htp_train_options *train = &options->train;
  const int quiet = state->process_rank > 0;
  if (options->trace && state->process_rank >= 0)
    return htp_set_error(err, err_size, "--train --trace: under mpirun the trace is not written "
                         "yet; trace a run of the local backend");
  state->loader = state->shared ? htp_so_loader() : jit;
  /* A write past the file size limit (ulimit -f) then fails with EFBIG,
   * which the writers report, instead of killing the process half way. */
  signal(SIGXFSZ, SIG_IGN);
  if ((train->checkpoint && check_output("checkpoint", train->checkpoint, err, err_size)) ||
      (train->metrics && check_output("metrics", train->metrics, err, err_size)) ||
      (options->trace && check_output("trace", options->trace, err, err_size)))
    return 1;
  if (train->checkpoint) {
    char optim[4200];
    snprintf(optim, sizeof optim, "%s.optim", train->checkpoint);
    if (check_output("checkpoint", optim, err, err_size))
      return 1;
  }
  train_job job;
  memset(&job, 0, sizeof job);
  job.options = options;
  job.process_rank = state->process_rank;
  htp_idx_set train_set, test_set;
  memset(&train_set, 0, sizeof train_set);
  memset(&test_set, 0, sizeof test_set);
  int status = 1;
  char reason[2048];
  /* The data first: its errors are the cheapest to hit. */
  if (htp_fmnist_load(train->data, HTP_FMNIST_TRAIN, train->limit_train, &train_set, reason,
                      sizeof reason) ||
      htp_fmnist_load(train->data, HTP_FMNIST_TEST, train->limit_test, &test_set, reason,
                      sizeof reason)) {
    htp_set_error(err, err_size, "--data: %s", reason);
    goto done;
  }
  if (find_grad_entry(options, state, requested_tp, err, err_size))
    goto done;
  const htp_signature *sig = &state->sig;
  if (sig->tp != requested_tp && !(state->shared && !options->tp_given)) {
    htp_set_error(err, err_size, "%s: entry '%s' is for tp %d, the run for tp %d", options->path,
                  sig->entry, sig->tp, requested_tp);
    goto done;
  }
  state->tp = job.tp = sig->tp;
  for (int i = 0; i < options->num_slows; i++)
    if (options->slows[i].rank >= state->tp) {
      htp_set_error(err, err_size, "--slow %s: rank %d is not in [0, %d) (tp %d)", options->slow,
                    options->slows[i].rank, state->tp, state->tp);
      goto done;
    }
  htp_rank_job probe;
  memset(&probe, 0, sizeof probe);
  if (htp_run_balance_config(options, state, &probe, err, err_size))
    goto done;
  job.balance = state->balance;
  if (job.balance) {
    job.balancer = state->balancer;
  } else {
    job.balancer = (htp_balancer_config)HTP_BALANCER_CONFIG_INITIALIZER;
    job.balancer.planner = probe.planner; /* detection only, with --ewma-alpha/--hysteresis */
  }
  if (options->trace && !(job.trace = fopen(options->trace, "w"))) {
    htp_set_error(err, err_size, "--trace %s: %s", options->trace, strerror(errno));
    goto done;
  }
  int loss, logits;
  if (check_entry(sig, &job, &loss, &logits, err, err_size))
    goto done;
  job.loss = loss;
  job.logits = logits;
  find_eval_entry(options, state, sig->tp, quiet);
  job.sig = sig;
  job.fn = state->compiled.fn;
  job.eval_sig = sig;
  job.eval_fn = job.fn;
  job.eval_logits = logits;
  if (state->eval_loader) {
    train_job probe = job;
    int eval_loss;
    if (check_entry(&state->eval_sig, &probe, &eval_loss, &job.eval_logits, err, err_size))
      goto done;
    job.eval_sig = &state->eval_sig;
    job.eval_fn = state->eval_compiled.fn;
  }
  job.train = &train_set;
  job.test = &test_set;
  job.steps = (long)(train_set.count / (uint32_t)job.batch);
  if (job.steps < 1) {
    htp_set_error(err, err_size, "--train: %u training images make no batch of %d (the "
                  "block's batch); give --limit-train >= %d", train_set.count, job.batch,
                  job.batch);
    goto done;
  }
  /* The machine's memory, as timed runs check it, before anything large
   * is allocated: the ranks' buffers (host memory but on a GPU), the global
   * parameters, their moments and (with --checkpoint) rank 0's gathered
   * copies of all three. */
  {
    uint64_t params = 0, held = 0;
    for (int i = 0; i < sig->num_args; i++)
      if (sig->args[i].role == HTP_SIG_PARAM)
        params += sig->args[i].global_bytes;
    const uint64_t copies = 1 + (train->optimizer == HTP_TRAIN_ADAMW ? 2 : 1) +
                            (train->checkpoint ? 3 : 0);
    const int local_ranks = state->process_rank >= 0 ? 1 : job.tp;
    uint64_t total = 0;
    if (__builtin_mul_overflow(params, copies, &held)) {
      htp_set_error(err, err_size, "%s: its parameters' size overflows", options->path);
      goto done;
    }
    if (htp_run_check_memory(options->path, held, sig,
                             state->device != HTP_DEVICE_CUDA ? local_ranks : 0, 1, &total, err,
                             err_size))
      goto done;
  }
  if (!(job.metrics = calloc((size_t)train->epochs, sizeof *job.metrics)) ||
      !(job.stragglers = calloc((size_t)job.tp, sizeof *job.stragglers))) {
    htp_set_error(err, err_size, "out of memory");
    goto done;
  }
  if (starting_weights(train, sig, &job, err, err_size))
    goto done;
  if (train->checkpoint)
    for (int k = 0; k < 3; k++)
      if (!(job.gathered[k] = param_buffers(sig))) {
        htp_set_error(err, err_size, "out of memory");
        goto done;
      }
  if (!*ranks && htp_ranks_open(ranks, HTP_BACKEND_LOCAL, job.tp, options->timeout_s,
                                state->device, state->sm_counts, err, err_size))
    goto done;
  if (htp_ranks_add_faults(*ranks, options->faults, options->num_faults, err, err_size))
    goto done;
  htp_run_choose_blas_threads(state, state->process_rank >= 0);
  if (train->clock != HTP_TRAIN_CLOCK_WALL) {
    /* A rank's thread CPU time is its work only if its kernels run on it. */
    htp_cpu_set_blas_threads(1);
    state->blas_threads = htp_cpu_blas_threads();
  }
  char extras[160] = "";
  if (train->augment != HTP_AUGMENT_NONE)
    snprintf(extras, sizeof extras, ", augmented (%s)", htp_run_augment_name(train->augment));
  if (train->random_erase > 0)
    snprintf(extras + strlen(extras), sizeof extras - strlen(extras), ", random erase %g",
             train->random_erase);
  if (train->label_smoothing > 0)
    snprintf(extras + strlen(extras), sizeof extras - strlen(extras), ", label smoothing %g",
             train->label_smoothing);
  if (train->clock != HTP_TRAIN_CLOCK_WALL)
    snprintf(extras + strlen(extras), sizeof extras - strlen(extras), ", %s clock (steps modelled%s)",
             htp_run_clock_name(train->clock),
             train->clock == HTP_TRAIN_CLOCK_UNITS ? ", plans from units" : "");
  if (!quiet)
    fprintf(stderr, "htp-run: --train: %s (eval: %s), tp %d (%d kernel thread%s a rank, GEMMs "
            "%s), batch %d, %u training and %u test images, %ld steps an epoch, %s lr %g "
            "(%s)%s%s%s\n",
            sig->entry, job.eval_sig->entry, job.tp, state->blas_threads,
            state->blas_threads == 1 ? "" : "s",
            state->device == HTP_DEVICE_CUDA ? "cuBLAS" : htp_cpu_gemm_provider(), job.batch,
            train_set.count, test_set.count,
            job.steps,
            optimizer_name(train->optimizer), train->lr,
            train->schedule == HTP_TRAIN_COSINE ? "cosine" : "constant",
            extras,
            train->resume ? ", resumed from " : "", train->resume ? train->resume : "");
  if (!quiet && job.tp > 1 && options->impute == HTP_IMPUTE_SAME && options->same_max_age == 0 &&
      (options->policy == HTP_POLICY_RESIZE || options->policy == HTP_POLICY_SEMI))
    fprintf(stderr, "htp-run: --train: warning: --same-max-age 0 lets --impute same fill a "
            "pruned unit with its values from the last step that computed it however old; a "
            "plan that keeps pruning the same units for many steps then replays one old "
            "batch's outputs and gradients every step, and computes them (bench/RESULTS.md, "
            "tp 4, 3 stragglers: 1.5 points lost and 1.35x the ideal time, against 0.3 and "
            "1.09x with the default, 1: only the last step's values)\n");
  status = htp_ranks_run_task(*ranks, train_rank, &job, options->faults, options->num_faults,
                              &state->outcome, err, err_size) ? 2 : 0;
done:
  release_job(&job);
  htp_idx_free_set(&train_set);
  htp_idx_free_set(&test_set);
  return status;
}
