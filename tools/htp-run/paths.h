/*===- tools/htp-run/paths.h - No two files of a run are one --------------===*
 *
 * Private to htp-run (paths.c).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_PATHS_H
#define HTP_RUN_PATHS_H

#include "tools/htp-run/options.h"

#include <stddef.h>

/* Refuses (non-zero, err says which two) a run whose outputs (--output,
 * --trace, --checkpoint and its files, --metrics) name one file twice, or
 * name an input (FILE, --weights, --input, --params, --resume), compared as
 * files: device and inode where the file exists, else its directory's and
 * its name. --checkpoint may name --resume's checkpoint (it is read whole
 * first). Before anything is read or written. */
int htp_run_check_paths(const htp_run_options *options, char *err, size_t err_size);

/* The option naming the first file the run writes ("--output", "--trace",
 * ...), or NULL when it writes none. */
const char *htp_run_first_output(const htp_run_options *options);

#endif /* HTP_RUN_PATHS_H */
