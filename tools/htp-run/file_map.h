/*===- tools/htp-run/file_map.h - Files read whole, files written whole ---===*
 *
 * The one place where htp-run's readers (.npy inputs, safetensors weights)
 * open a file: open, then fstat, and refuse anything that is not a regular
 * file before a byte is read, so /dev/zero, a FIFO or a directory is a clear
 * error rather than a read until memory runs out or a blocked process. The
 * size read is the size fstat saw, whatever the file does later.
 *
 * And the one place where its writers (--output, --checkpoint, --metrics,
 * --trace)
 * make a file: a new file under a temporary name (never written through
 * what was there: a stale temporary, a symlink), flushed to the disk, then
 * renamed over the real name, so a reader or a crash finds the old file or
 * the new one, never half of one.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_FILE_MAP_H
#define HTP_RUN_FILE_MAP_H

#include <stddef.h>
#include <stdio.h>

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

/* A new, empty file at path, open for writing: whatever has that name (a
 * stale temporary, a symlink to another file) is unlinked first and the file
 * created with O_EXCL | O_NOFOLLOW. NULL with err ("cannot create PATH: ...")
 * on failure. */
FILE *htp_file_create(const char *path, char *err, size_t err_size);

/* Flushes, fsyncs (on the disk before anyone renames it into place) and
 * closes a file from htp_file_create; if any of that fails, or ok is 0 (the
 * caller's writes failed), the file is removed. 0, or non-zero with err
 * ("cannot write PATH: ..."). */
int htp_file_finish(FILE *file, int ok, const char *path, char *err, size_t err_size);

/* Renames temporary over path (the commit) and syncs their directory; on
 * failure removes temporary and leaves path as it was. */
int htp_file_commit(const char *temporary, const char *path, char *err, size_t err_size);

/* PATH.tmp, where a writer puts PATH's next version; non-zero when the
 * name does not fit. */
int htp_file_temporary_name(const char *path, char *out, size_t out_size);

/* A file written while a run goes (--trace): htp_file_create of PATH.tmp
 * (its name in temporary, 4200 bytes), and at the end htp_file_end: the
 * writes checked (ferror), finished and committed over PATH, so a run
 * killed or a write that fails leaves the old PATH. NULL / non-zero with
 * err. */
FILE *htp_file_begin(const char *path, char *temporary, size_t temporary_size, char *err,
                     size_t err_size);
int htp_file_end(FILE *file, const char *temporary, const char *path, char *err,
                 size_t err_size);
/* Unlinks every temporary htp_file_create made that is not yet committed
 * or removed: for a signal handler (async-signal-safe: unlink and atomic
 * loads), so that a run stopped by SIGINT or SIGTERM leaves the old files
 * and no temporaries. */
void htp_file_remove_unfinished(void);
/* For a writer that renames or removes its temporary itself (the
 * checkpoint's pair, committed together): path is no longer unfinished. */
void htp_file_forget(const char *path);
/* fsync of the directory that holds path, so that renames in it are on the
 * disk. 0, or -1 (errno). */
int htp_sync_directory_of(const char *path);

#endif /* HTP_RUN_FILE_MAP_H */
