/*===- tools/htp-run/file_map.c - Map a regular file for reading ---------===*
 *
 * This file implements file_map.h. O_NONBLOCK on open keeps a FIFO with no
 * writer from blocking us before fstat can refuse it; it does nothing to a
 * regular file.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/file_map.h"

#include "tools/htp-run/errors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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
