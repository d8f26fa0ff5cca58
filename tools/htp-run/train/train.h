/*===- tools/htp-run/train.h - htp-run --train ----------------------------===*
 *
 * Private to htp-run: the training run (train.c), which run.c hands the
 * command line to once it knows the block's file kind and the backend.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_TRAIN_H
#define HTP_RUN_TRAIN_H

#include "tools/htp-run/executor.h"

/* Trains options->path's gradient entry (options->train). state holds the
 * file kind (shared), device, process rank and sm_counts; the entries it
 * loads and the outcome of the ranks are left in state for run.c to
 * release and report. *ranks is the world when run.c opened it (mpi),
 * else NULL and opened here (local). Returns 0; 1 with err; 2 when a rank
 * failed (state->outcome). */
int htp_train(const htp_run_options *options, const htp_compiler *jit, htp_run_state *state,
              htp_ranks **ranks, int requested_tp, char *err, size_t err_size);

/* The files of a checkpoint FILE (DESIGN §13): FILE, FILE.tmp,
 * FILE.optim, FILE.optim.tmp, FILE.optim.prev (suffix s of
 * HTP_TRAIN_CHECKPOINT_FILES; 0 is ""), so that other outputs can be kept
 * off all of them (paths.c). */
enum { HTP_TRAIN_CHECKPOINT_FILES = 5 };
const char *htp_train_checkpoint_suffix(int s);

#endif /* HTP_RUN_TRAIN_H */
