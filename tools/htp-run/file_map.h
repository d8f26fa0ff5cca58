/*===- tools/htp-run/file_map.h - Map a regular file for reading ---------===*
 *
 * The one place where htp-run's readers (.npy inputs, safetensors weights)
 * open a file: open, then fstat, and refuse anything that is not a regular
 * file before a byte is read, so /dev/zero, a FIFO or a directory is a clear
 * error rather than a read until memory runs out or a blocked process. The
 * size read is the size fstat saw, whatever the file does later.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_FILE_MAP_H
#define HTP_RUN_FILE_MAP_H

#include <stddef.h>

typedef struct htp_file_map {
  const unsigned char *bytes; /* size bytes, read-only; a static empty buffer when size is 0 */
  size_t size;
  void *mapping;              /* what munmap releases; NULL for an empty file */
} htp_file_map;

/* Maps the regular file at path. On failure returns non-zero, leaves *map
 * empty and writes a message (without the path) to err: "cannot open: ...",
 * "not a regular file (a directory)", ... */
int htp_file_map_open(const char *path, htp_file_map *map, char *err, size_t err_size);

/* Unmaps; accepts an empty map. */
void htp_file_map_close(htp_file_map *map);

/* For a file about to be written: non-zero with a message when path exists
 * and is not a regular file (a directory, a device, a FIFO). */
int htp_check_writable_path(const char *path, char *err, size_t err_size);

#endif /* HTP_RUN_FILE_MAP_H */
