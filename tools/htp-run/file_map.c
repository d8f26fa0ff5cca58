/*===- tools/htp-run/file_map.c - Files read whole, files written whole ---===*
 *
 * This file implements file_map.h. O_NONBLOCK on open keeps a FIFO with no
 * writer from blocking us before fstat can refuse it; it does nothing to a
 * regular file.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/file_map.h"

#include "tools/htp-run/errors.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a plain file";
}

int htp_file_map_open(const char *path, htp_file_map *map, char *err, size_t err_size) {
  static const unsigned char empty[1];
  memset(map, 0, sizeof *map);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return htp_set_error(err, err_size, "cannot open: %s", strerror(errno));
  struct stat info;
  if (fstat(fd, &info) != 0) {
    int saved = errno;
    close(fd);
    return htp_set_error(err, err_size, "cannot stat: %s", strerror(saved));
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return htp_set_error(err, err_size, "not a regular file (%s)", kind_of(info.st_mode));
  }
  if (info.st_size < 0 || (uintmax_t)info.st_size > SIZE_MAX) {
    close(fd);
    return htp_set_error(err, err_size, "file too large to map");
  }
  map->size = (size_t)info.st_size;
  if (map->size == 0) {
    close(fd);
    map->bytes = empty;
    return 0;
  }
  void *mapping = mmap(NULL, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
  int saved = errno;
  close(fd);
  if (mapping == MAP_FAILED) {
    map->size = 0;
    return htp_set_error(err, err_size, "cannot map: %s", strerror(saved));
  }
  map->mapping = mapping;
  map->bytes = mapping;
  return 0;
}

void htp_file_map_close(htp_file_map *map) {
  if (!map)
    return;
  if (map->mapping)
    munmap(map->mapping, map->size);
  memset(map, 0, sizeof *map);
}

int htp_check_writable_path(const char *path, char *err, size_t err_size) {
  struct stat info;
  if (stat(path, &info) == 0 && !S_ISREG(info.st_mode))
    return htp_set_error(err, err_size, "not a regular file (%s): refusing to write to it",
                         kind_of(info.st_mode));
  return 0;
}

/* The temporaries being written now (made here, not yet committed or
 * removed), for htp_file_remove_unfinished: a slot is 0 free, 1 being
 * filled in, 2 holding a path. */
enum { UNFINISHED_SLOTS = 16 };
static char unfinished_path[UNFINISHED_SLOTS][4200];
static atomic_int unfinished_state[UNFINISHED_SLOTS];
/* Set by htp_file_remove_unfinished before it unlinks: a writer whose
 * create raced it (its file made after the unlink) removes its own. */
static atomic_int stopping;

static void note_unfinished(const char *path) {
  if (strlen(path) >= sizeof unfinished_path[0])
    return;
  for (int i = 0; i < UNFINISHED_SLOTS; i++) {
    int free_slot = 0;
    if (atomic_compare_exchange_strong(&unfinished_state[i], &free_slot, 1)) {
      strcpy(unfinished_path[i], path);
      atomic_store(&unfinished_state[i], 2);
      return;
    }
  }
}

void htp_file_forget(const char *path) {
  for (int i = 0; i < UNFINISHED_SLOTS; i++)
    if (atomic_load(&unfinished_state[i]) == 2 && strcmp(unfinished_path[i], path) == 0) {
      atomic_store(&unfinished_state[i], 0);
      return;
    }
}

void htp_file_remove_unfinished(void) {
  atomic_store(&stopping, 1);
  for (int i = 0; i < UNFINISHED_SLOTS; i++)
    if (atomic_load(&unfinished_state[i]) == 2)
      unlink(unfinished_path[i]);
}

FILE *htp_file_create(const char *path, char *err, size_t err_size) {
  /* unlink removes a symlink itself, not its target; a directory stays and
   * the exclusive create then says so. */
  if (unlink(path) != 0 && errno != ENOENT && errno != EISDIR && errno != EPERM) {
    htp_set_error(err, err_size, "cannot create %s: %s", path, strerror(errno));
    return NULL;
  }
  note_unfinished(path); /* before it exists: a signal between the two is covered */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  FILE *file = fd < 0 ? NULL : fdopen(fd, "wb");
  if (!file) {
    htp_set_error(err, err_size, "cannot create %s: %s", path, strerror(errno));
    if (fd >= 0) {
      close(fd);
      unlink(path);
    }
    htp_file_forget(path);
  } else if (atomic_load(&stopping)) {
    /* The process is dying of a signal: the file may have been made after
     * the handler's unlink. Removed here, and this thread waits for the end. */
    unlink(path);
    for (;;)
      pause();
  }
  return file;
}

int htp_file_finish(FILE *file, int ok, const char *path, char *err, size_t err_size) {
  int saved = ok ? 0 : errno;
  if (ok && (fflush(file) != 0 || fsync(fileno(file)) != 0)) {
    ok = 0;
    saved = errno;
  }
  if (fclose(file) != 0 && ok) {
    ok = 0;
    saved = errno;
  }
  if (ok)
    return 0;
  unlink(path);
  htp_file_forget(path);
  return htp_set_error(err, err_size, "cannot write %s: %s", path,
                       saved ? strerror(saved) : "write error");
}

int htp_file_commit(const char *temporary, const char *path, char *err, size_t err_size) {
  if (rename(temporary, path) != 0) {
    int saved = errno;
    unlink(temporary);
    htp_file_forget(temporary);
    return htp_set_error(err, err_size, "cannot rename %s over %s: %s", temporary, path,
                         strerror(saved));
  }
  htp_file_forget(temporary);
  htp_sync_directory_of(path);
  return 0;
}

int htp_file_temporary_name(const char *path, char *out, size_t out_size) {
  return (size_t)snprintf(out, out_size, "%s.tmp", path) >= out_size;
}

int htp_sync_directory_of(const char *path) {
  char directory[4200];
  const char *slash = strrchr(path, '/');
  size_t length = slash ? (size_t)(slash - path) : 0;
  if (length >= sizeof directory)
    return -1;
  if (!slash)
    snprintf(directory, sizeof directory, ".");
  else if (!length)
    snprintf(directory, sizeof directory, "/");
  else {
    memcpy(directory, path, length);
    directory[length] = '\0';
  }
  int fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

FILE *htp_file_begin(const char *path, char *temporary, size_t temporary_size, char *err,
                     size_t err_size) {
  if (htp_file_temporary_name(path, temporary, temporary_size)) {
    htp_set_error(err, err_size, "%s: the name is too long", path);
    return NULL;
  }
  return htp_file_create(temporary, err, err_size);
}

int htp_file_end(FILE *file, const char *temporary, const char *path, char *err,
                 size_t err_size) {
  const int ok = !ferror(file);
  if (!ok)
    errno = 0; /* the failed write's errno is gone: "write error" */
  return htp_file_finish(file, ok, temporary, err, err_size) ||
         htp_file_commit(temporary, path, err, err_size);
}
