/*===- tools/htp-run/train/entries.c - --train's entries ------------------===*
 *
 * Finds the gradient entry through the loader's listing (never by reading
 * the file's text), its eval entry, and checks what they take and give.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/train/job.h"

#include "tools/htp-run/errors.h"

#include <stdio.h>
#include <string.h>

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

/* Loads entry `name` (split for tp ranks, by options' shares and spare room
 * when given) and parses its signature; non-zero with err: 2 when memory
 * ran short (a reason to stop, not to try the next entry). */
static int load_entry(const htp_compiler *loader, const htp_run_options *options,
                      const char *path, const char *name, int tp, htp_compiled *compiled,
                      htp_signature *sig, char *err, size_t err_size) {
  htp_compile_options compile = {.tp = tp, .shares = options->shares,
                                 .num_shares = options->num_shares,
                                 .spare = (int)options->spare};
  memset(compiled, 0, sizeof *compiled);
  const int loaded = loader->load(path, name, &compile, compiled, err, err_size);
  if (loaded) {
    memset(compiled, 0, sizeof *compiled);
    return loaded == 2 ? 2 : 1;
  }
  char reason[1024];
  const char *text = compiled->signature;
  const htp_result parsed = htp_signature_parse(text, text ? strlen(text) : 0, sig, reason,
                                                sizeof reason);
  if (parsed != HTP_OK) {
    loader->unload(compiled);
    memset(compiled, 0, sizeof *compiled);
    htp_set_error(err, err_size, "%s: entry '%s': %s%s", path, name,
                  parsed == HTP_ERR_NOMEM ? "" : "bad signature: ", reason);
    return parsed == HTP_ERR_NOMEM ? 2 : 1;
  }
  return 0;
}

/* The grad entry: --entry, or the one entry whose results hold gradients. */
int htp_train_find_grad_entry(const htp_run_options *options, htp_run_state *state, int tp,
                           char *err, size_t err_size) {
  const char *path = options->path;
  if (options->entry) {
    if (load_entry(state->loader, options, path, options->entry, tp, &state->compiled,
                   &state->sig, err,
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
    const int failed =
        load_entry(state->loader, options, path, names[i], tp, &compiled, &sig, why, sizeof why);
    if (failed == 2)
      return htp_set_error(err, err_size, "--train: %s", why);
    if (failed) {
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
void htp_train_find_eval_entry(const htp_run_options *options, htp_run_state *state, int tp,
                            int quiet) {
  const htp_signature *sig = &state->sig;
  char name[NAME_SIZE];
  if (!ends_with(sig->entry, "_grad") || strlen(sig->entry) >= NAME_SIZE)
    return;
  snprintf(name, sizeof name, "%.*s", (int)(strlen(sig->entry) - 5), sig->entry);
  char why[16384] = "";
  htp_compiled compiled;
  htp_signature eval;
  int ok = !load_entry(state->loader, options, options->path, name, tp, &compiled, &eval, why,
                       sizeof why);
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

/* ----- Checking what the entries take and give. ------------------------ */

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
int htp_train_check_entry(const htp_signature *sig, train_job *job, int *loss, int *logits,
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

