/*===- tools/htp-run/train/checkpoint.c - Starting weights and checkpoints -===*
 *
 * Starting weights: --params, --resume (and its moments), or the init.
 * Writing: the checkpoint and its optimizer state, one atomic unit.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/train/job.h"
#include "tools/htp-run/train/train.h"

#include "tools/htp-run/data.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"
#include "tools/htp-run/safetensors.h"
#include "tools/htp-run/train/init.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void htp_train_free_globals(void **globals, int count) {
  if (!globals)
    return;
  for (int i = 0; i < count; i++)
    free(globals[i]);
  free(globals);
}

/* Global host buffers for every parameter of sig (NULL for inputs). */
void **htp_train_param_buffers(const htp_signature *sig) {
  void **buffers = calloc((size_t)sig->num_args + 1, sizeof *buffers);
  if (!buffers)
    return NULL;
  for (int i = 0; i < sig->num_args; i++)
    if (sig->args[i].role == HTP_SIG_PARAM && !(buffers[i] = htp_aligned_buffer(sig->args[i].global_bytes))) {
      htp_train_free_globals(buffers, sig->num_args);
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
    /* A moment the training could not have written (not finite; a negative
     * second moment) is the file's fault: said here, not a step later as
     * the parameter it spoiled. */
    const float *values = out[i];
    const int second = strcmp(prefix, "v.") == 0;
    for (int64_t k = 0; !status && k < p->global_count; k++)
      if (!isfinite(values[k]) || (second && values[k] < 0.0f))
        status = htp_set_error(err, err_size, "%s: '%s' holds %g at element %lld: not an "
                               "optimizer state training writes (%s)", path, name,
                               (double)values[k], (long long)k,
                               second ? "a second moment is finite and >= 0" : "not finite");
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

/* A resumed run goes where the checkpoint's run would have gone only with
 * its settings (the schedule's length and the batches' order among them):
 * each that differs is said on stderr, not refused (a changed learning rate
 * may be the point). The values are formatted as commit_checkpoint writes
 * them. */
static void note_changed_settings(const htp_train_options *train, const train_job *job,
                                  const htp_safetensors *st) {
  char seed[32], lr[32], wd[32], momentum[32], epochs[32], limit[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)job->options->seed);
  snprintf(lr, sizeof lr, "%.17g", train->lr);
  snprintf(wd, sizeof wd, "%.17g", train->weight_decay);
  snprintf(momentum, sizeof momentum, "%.17g", train->momentum);
  snprintf(epochs, sizeof epochs, "%ld", train->epochs);
  snprintf(limit, sizeof limit, "%u", job->train->count);
  const struct {
    const char *key, *flag, *now;
    int matters;
  } settings[] = {
      {"htp.seed", "seed", seed, 1},
      {"htp.lr", "lr", lr, 1},
      {"htp.weight_decay", "weight-decay", wd, 1},
      {"htp.momentum", "momentum", momentum, train->optimizer == HTP_TRAIN_SGD},
      {"htp.schedule", "schedule", train->schedule == HTP_TRAIN_COSINE ? "cosine" : "constant", 1},
      /* The cosine schedule spans --epochs. */
      {"htp.epochs", "epochs", epochs, train->schedule == HTP_TRAIN_COSINE},
      {"htp.train_examples", "limit-train (training images)", limit, 1},
  };
  for (size_t i = 0; i < sizeof settings / sizeof *settings; i++) {
    const char *then = htp_safetensors_metadata(st, settings[i].key);
    if (!settings[i].matters || !then || strcmp(then, settings[i].now) == 0)
      continue;
    /* Numbers as a person writes them (0.05, not %.17g's 0.050000000000000003). */
    char *end_then, *end_now, shown_then[64], shown_now[64];
    const double a = strtod(then, &end_then), b = strtod(settings[i].now, &end_now);
    if (*then && !*end_then && !*end_now) {
      snprintf(shown_then, sizeof shown_then, "%.6g", a);
      snprintf(shown_now, sizeof shown_now, "%.6g", b);
    } else {
      snprintf(shown_then, sizeof shown_then, "%s", then);
      snprintf(shown_now, sizeof shown_now, "%s", settings[i].now);
    }
    fprintf(stderr, "htp-run: note: --resume %s was trained with --%s %s; this run has %s, so "
            "it goes on differently from the run that wrote it\n", train->resume,
            settings[i].flag, shown_then, shown_now);
  }
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
  if (!status && (!optimizer || strcmp(optimizer, htp_run_optimizer_name(train->optimizer)) != 0))
    status = htp_set_error(err, err_size, "--resume %s was trained with --optimizer %s; this run "
                           "has --optimizer %s", train->resume, optimizer ? optimizer : "?",
                           htp_run_optimizer_name(train->optimizer));
  /* Its own numbers must agree: a step that is not epoch x its steps an
   * epoch (train_examples / batch) is a file edited or broken. */
  long step = 0, examples = 0, steps_then;
  if (!status && htp_safetensors_metadata(&st, "htp.train_examples") &&
      !(status = metadata_long(&st, train->resume, "htp.step", &step, err, err_size) ||
                 metadata_long(&st, train->resume, "htp.train_examples", &examples, err,
                               err_size))) {
    const long per_epoch = batch > 0 ? examples / batch : 0;
    if (per_epoch < 1 || __builtin_mul_overflow(epoch, per_epoch, &steps_then) ||
        step != steps_then)
      status = htp_set_error(err, err_size, "--resume %s: its metadata disagree: htp.step %ld "
                             "is not htp.epoch %ld x (htp.train_examples %ld / htp.batch %ld): "
                             "not a checkpoint as htp-run writes one", train->resume, step,
                             epoch, examples, batch);
  }
  if (!status && batch != job->batch)
    status = htp_set_error(err, err_size, "--resume %s was trained with batches of %ld; this "
                           "block takes %d", train->resume, batch, job->batch);
  if (!status && epoch >= train->epochs)
    status = htp_set_error(err, err_size, "--resume %s has done %ld epoch%s already; --epochs "
                           "%ld asks for no more (--epochs counts all epochs, resumed or not)",
                           train->resume, epoch, epoch == 1 ? "" : "s", train->epochs);
  if (!status)
    note_changed_settings(train, job, &st);
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
    if (!(job->moments[kind] = htp_train_param_buffers(sig)))
      return htp_set_error(err, err_size, "out of memory");
    if (read_moments(path, sig, kind ? "v." : "m.", job->moments[kind], err, err_size))
      return 1;
  }
  return 0;
}

int htp_train_starting_weights(const htp_train_options *train, const htp_signature *sig,
                            train_job *job, char *err, size_t err_size) {
  if (!(job->params = htp_train_param_buffers(sig)))
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

/* ----- Writing the checkpoint and its optimizer state. ----------------- */

/* An output path must be in a directory where a file can be created:
 * checked before training, not after an epoch (that one that exists is a
 * regular file, paths.c checked for every output before the run). */
int htp_train_check_output(const char *flag, const char *path, char *err, size_t err_size) {
  char probe[4200];
  if ((size_t)snprintf(probe, sizeof probe, "%s.tmp", path) >= sizeof probe)
    return htp_set_error(err, err_size, "--%s: the name is too long", flag);
  /* The probe never touches a file that is there already: FILE.tmp may be
   * another file of the user's (paths.c refuses one this run reads); only
   * a probe made here is removed. */
  /* The processes of an mpirun job all probe the same name: one's probe
   * may vanish between another's refused create and its access (a process
   * failed alone on it under load, DESIGN §12), so that case probes again. */
  int fd = -1;
  for (int attempt = 0; attempt < 100; attempt++) {
    fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd >= 0 || errno != EEXIST)
      break;
    if (access(probe, W_OK) == 0)
      return 0;
    if (errno != ENOENT)
      return htp_set_error(err, err_size, "--%s %s: cannot write %s: %s", flag, path, probe,
                           strerror(errno));
  }
  if (fd < 0)
    return htp_set_error(err, err_size, "--%s %s: cannot create %s: %s", flag, path, probe,
                         strerror(errno));
  close(fd);
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
    htp_file_forget(path[CK_OPTIM_NEW]);
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
    htp_file_forget(path[renames[r].from]); /* a temporary, committed */
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

htp_result htp_train_write_checkpoint(const train_job *job, long epochs_done, long steps_done,
                                      char *err, size_t err_size) {
  const htp_run_options *options = job->options;
  const htp_train_options *train = &options->train;
  const htp_signature *sig = job->sig;
  const int kinds = train->optimizer == HTP_TRAIN_ADAMW ? 3 : 2;
  for (int kind = 0; kind < kinds; kind++)
    if (check_finite(sig, job->gathered[kind], kind == 0 ? "parameter" : "an optimizer moment of",
                     err, err_size))
      return HTP_ERR_INVALID; /* the model's values, not the disk */
  htp_st_write *tensors = calloc((size_t)sig->num_args + 1, sizeof *tensors);
  if (!tensors) {
    htp_set_error(err, err_size, "out of memory");
    return HTP_ERR_NOMEM;
  }
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
                            "htp.optimizer", htp_run_optimizer_name(train->optimizer), "htp.lr", lr,
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
  return status ? HTP_ERR_SYSTEM : HTP_OK;
}

