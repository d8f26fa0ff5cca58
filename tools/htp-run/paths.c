/*===- tools/htp-run/paths.c - No two files of a run are one --------------===*
 *
 * htp_run_check_paths (paths.h): every file a run writes is compared with
 * every other file it writes or reads, as files (device and inode; for a
 * file not there yet, its directory's and its name), never as names: a
 * second name for one file (./x, a symlink, a hard link) is the same file.
 * The files a writer makes beside its output count too (FILE.tmp, which
 * it unlinks and writes before renaming it over FILE; the checkpoint's
 * FILE.optim and its commit files), so `--metrics X.tmp --checkpoint X` is
 * refused like `--metrics X --checkpoint X`.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/paths.h"

#include "tools/htp-run/errors.h"
#include "tools/htp-run/file_map.h"
#include "tools/htp-run/train/train.h"
#if HTP_RUN_HAVE_TRAIN
#include "tools/htp-run/train/dataset.h"
#endif

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct run_file {
  const char *flag; /* the option that names it, "FILE" for the program */
  char path[4200];
  int output;
  int family;    /* files one writer owns together (the checkpoint's), else -1 */
  int member;    /* which of its family's files (the checkpoint's suffix index) */
  int temporary; /* a name its writer unlinks and creates anew (file_map.h): a
                    symlink there is replaced, its target never written */
} run_file;

typedef struct identity {
  int known; /* 0: neither the file nor its directory exists (nothing to clash with) */
  int exists;
  dev_t dev;
  ino_t ino;
  char name[NAME_MAX + 1]; /* the file's name in its directory, when it does not exist */
} identity;

static identity identify(const char *path, int depth, int temporary) {
  identity id;
  memset(&id, 0, sizeof id);
  struct stat info;
  if (temporary && lstat(path, &info) == 0) {
    id.known = id.exists = 1;
    id.dev = info.st_dev;
    id.ino = info.st_ino;
    return id;
  }
  if (!temporary && stat(path, &info) != 0 && depth < 8 && lstat(path, &info) == 0 && S_ISLNK(info.st_mode)) {
    /* A dangling symlink: a writer that opens it creates its target. */
    char target[4200], resolved[8500];
    ssize_t length = readlink(path, target, sizeof target - 1);
    if (length <= 0)
      return id;
    target[length] = '\0';
    const char *slash = strrchr(path, '/');
    if (target[0] == '/' || !slash)
      snprintf(resolved, sizeof resolved, "%s", target);
    else
      snprintf(resolved, sizeof resolved, "%.*s/%s", (int)(slash - path), path, target);
    return identify(resolved, depth + 1, 0);
  }
  if (!temporary && stat(path, &info) == 0) {
    id.known = id.exists = 1;
    id.dev = info.st_dev;
    id.ino = info.st_ino;
    return id;
  }
  const char *slash = strrchr(path, '/');
  char directory[4200];
  if (!slash) {
    snprintf(directory, sizeof directory, ".");
  } else {
    size_t length = (size_t)(slash - path);
    if (length >= sizeof directory)
      return id;
    memcpy(directory, path, length);
    directory[length ? length : 1] = '\0';
    if (!length)
      directory[0] = '/';
  }
  const char *name = slash ? slash + 1 : path;
  if (stat(directory, &info) != 0 || strlen(name) > NAME_MAX)
    return id;
  id.known = 1;
  id.dev = info.st_dev;
  id.ino = info.st_ino;
  snprintf(id.name, sizeof id.name, "%s", name);
  return id;
}

static int same_file(const identity *a, const identity *b) {
  if (!a->known || !b->known || a->exists != b->exists || a->dev != b->dev || a->ino != b->ino)
    return 0;
  return a->exists || strcmp(a->name, b->name) == 0;
}

enum { MAX_FILES = 3 * HTP_RUN_MAX_FILES + 20 }; /* inputs, outputs and their .tmp, the rest */

static void add_member(run_file *files, int *count, const char *flag, const char *path,
                       const char *suffix, int output, int family, int member) {
  /* Written beside the output, then renamed over it (file_map.h). */
  const int temporary = output && strlen(suffix) >= 4 &&
                        strcmp(suffix + strlen(suffix) - 4, ".tmp") == 0;
  if (!path || *count >= MAX_FILES)
    return;
  run_file *f = &files[(*count)++];
  f->flag = flag;
  snprintf(f->path, sizeof f->path, "%s%s", path, suffix);
  f->output = output;
  f->family = family;
  f->member = member;
  f->temporary = temporary;
}

static void add(run_file *files, int *count, const char *flag, const char *path,
                const char *suffix, int output, int family) {
  add_member(files, count, flag, path, suffix, output, family, -1);
}

/* Every file the run reads or writes, into files; returns how many. */
static int run_files(const htp_run_options *options, run_file *files) {
  int count = 0;
  enum { CHECKPOINT = 1, RESUME = 2 };
  const htp_train_options *train = &options->train;
  add(files, &count, "FILE", options->path, "", 0, -1);
  add(files, &count, "--weights", options->weights, "", 0, -1);
  for (int i = 0; i < options->num_inputs; i++)
    add(files, &count, "--input", options->inputs[i], "", 0, -1);
  for (int i = 0; i < options->num_outputs; i++) {
    add(files, &count, "--output", options->outputs[i], "", 1, -1);
    add(files, &count, "--output", options->outputs[i], ".tmp", 1, -1);
  }
  add(files, &count, "--trace", options->trace, "", 1, -1);
  add(files, &count, "--trace", options->trace, ".tmp", 1, -1);
  if (train->enabled) {
    add(files, &count, "--params", train->params, "", 0, -1);
#if HTP_RUN_HAVE_TRAIN
    /* The data set's four files are inputs too (a checkpoint written over
     * them would destroy the data set). */
    for (int split = HTP_FMNIST_TRAIN; split <= HTP_FMNIST_TEST; split++)
      for (int labels = 0; labels < 2; labels++) {
        char path[4200];
        if (!htp_fmnist_file(train->data, (htp_fmnist_split)split, labels, path, sizeof path))
          add(files, &count, "--data", path, "", 0, -1);
      }
#endif
    for (int s = 0; s < HTP_TRAIN_CHECKPOINT_FILES; s++) {
      add_member(files, &count, "--resume", train->resume, htp_train_checkpoint_suffix(s), 0,
                 RESUME, s);
      add_member(files, &count, "--checkpoint", train->checkpoint,
                 htp_train_checkpoint_suffix(s), 1, CHECKPOINT, s);
    }
    add(files, &count, "--metrics", train->metrics, "", 1, -1);
    add(files, &count, "--metrics", train->metrics, ".tmp", 1, -1);
  }
  return count;
}

const char *htp_run_first_output(const htp_run_options *options) {
  run_file files[MAX_FILES];
  const int count = run_files(options, files);
  for (int i = 0; i < count; i++)
    if (files[i].output)
      return files[i].flag;
  return NULL;
}

int htp_run_check_paths(const htp_run_options *options, char *err, size_t err_size) {
  run_file files[MAX_FILES];
  const int count = run_files(options, files);
  /* An output that exists must be a regular file: a FIFO opened for the
   * trace waited for a reader for ever; a device would be replaced. */
  for (int i = 0; i < count; i++) {
    char why[128];
    if (files[i].output && !files[i].temporary &&
        htp_check_writable_path(files[i].path, why, sizeof why))
      return htp_set_error(err, err_size, "%s %s: %s", files[i].flag, files[i].path, why);
  }
  /* A writer removes whatever has its temporary's name, but not a
   * directory: found at the end of a run, it lost the run's output. */
  for (int i = 0; i < count; i++) {
    struct stat info;
    if (files[i].output && files[i].temporary && lstat(files[i].path, &info) == 0 &&
        S_ISDIR(info.st_mode))
      return htp_set_error(err, err_size, "%s: %s is a directory, where the output is written "
                           "before it is renamed over its name: remove it or write elsewhere",
                           files[i].flag, files[i].path);
  }
  identity ids[MAX_FILES];
  for (int i = 0; i < count; i++)
    ids[i] = identify(files[i].path, 0, files[i].temporary);
  for (int i = 0; i < count; i++)
    for (int j = i + 1; j < count; j++) {
      const run_file *a = &files[i], *b = &files[j];
      if (!a->output && !b->output)
        continue;
      /* One writer's own files, and a checkpoint resumed in place (each of
       * its files read whole before the same file is written), are no
       * clash; --checkpoint X.optim over --resume X's X.optim is. */
      if (a->family >= 0 && b->family >= 0 &&
          (a->family == b->family || a->member == b->member))
        continue;
      if (!same_file(&ids[i], &ids[j]))
        continue;
      const run_file *out = a->output ? a : b, *other = a->output ? b : a;
      return htp_set_error(err, err_size, "%s %s and %s %s are the same file: %s would "
                           "overwrite %s; give each output a file of its own",
                           other->flag, other->path, out->flag, out->path, out->flag,
                           other->output ? "what the other writes" : "this input");
    }
  return 0;
}
