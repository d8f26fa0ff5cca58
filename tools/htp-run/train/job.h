/*===- tools/htp-run/train/job.h - What --train's files share -------------===*
 *
 * Private to the training wing: the job every rank reads and rank 0 fills
 * (train.c), and what each file does for it: finding and checking the
 * entries (entries.c), the starting weights and the checkpoint
 * (checkpoint.c), the metrics (metrics.c).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_TRAIN_JOB_H
#define HTP_RUN_TRAIN_JOB_H

#include "tools/htp-run/executor.h"
#include "tools/htp-run/train/dataset.h"

#include <stdio.h>

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

/* What an epoch's steps add up to (the scores on rank 0 only). */
typedef struct epoch_sums {
  double loss_sum, model_seconds;
  long correct, seen, skipped;
} epoch_sums;

/* --elastic (DESIGN §12): the live ranks, the split they run, and the
 * snapshot a new world of them resumes from (elastic.c). */
typedef struct train_elastic {
  long every;              /* steps between snapshots; 0: choose after the first; -1: off */
  int logical_tp;          /* the split as compiled */
  int *original;           /* [logical_tp]: live rank i is original rank original[i] */
  int32_t **units;         /* [num_args]: a split tensor's units per live rank (NULL: as
                            * compiled, when every rank lives) */
  int32_t *owned[2];       /* [logical_tp]: the balancer's owned heads and MLP units */
  void **state[3];         /* [num_args]: global w, m, v after `step` steps: what a
                            * world starts from */
  long step;               /* steps the global state has done */
  /* Each rank's own copy of its shards, taken every K steps by the rank
   * itself: set `current` is the last whole snapshot, the other the one
   * being written. Under mpirun each process also passes its split
   * tensors' copies to its buddy, the next rank (a dead process's memory
   * is gone), and after a death the survivors fill in the rest. A world
   * that ends puts a whole set together into `state` (assemble). */
  void ***copies[2][3];    /* [set][w, m, v][rank][num_args]: host copies (local shapes) */
  int32_t **maps[2];       /* [set][num_args]: a re-partitioned tensor's slot map (every
                            * rank's slots), NULL while it is as split */
  int current;             /* the set of the last whole snapshot */
  long set_step[2];        /* steps each set has done (-1: none taken this world) */
  epoch_sums set_sums[2];  /* its epoch's sums at that step (the books) */
  double set_seconds[2];   /* that epoch's training seconds by then */
  int own_rank;            /* whose copies of unsplit tensors to read: 0, or under mpirun
                            * this process's rank in the world that took them */
  epoch_sums sums;         /* the epoch's sums at `step` (the books) */
  double epoch_seconds;    /* that epoch's training seconds by then */
  long taken;              /* snapshots taken */
  double seconds;          /* their total wall time (rank 0) */
  long start_step;         /* where this world starts */
  long stop_at;            /* it stops after this many steps (a rank rejoins); -1: never */
  int stopped;             /* it stopped there */
  int *fired;              /* [num_faults]: the deaths that happened */
  double lost_at;          /* when the last world ended (htp_now), 0: none */
  long reached;            /* mpirun: the step this process was at when its world failed
                            * (after the agreement: the survivors' latest) */
  long agreed;             /* mpirun: the snapshot step the survivors resume from */
  struct {                 /* the deaths and rejoins so far (--metrics) */
    long step, replayed;
    int rank, tp, rejoin;
  } events[HTP_RUN_MAX_INJECTIONS];
  int num_events;
  char note[512];          /* what rank 0 says when the new world's first step starts */
} train_elastic;

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
  long profiled_steps;                 /* --profile: the steps timed (rank 0 sets it) */
  long first_epoch;                    /* 0-based: epochs already done (resume) */
  void **params;                       /* [num_args] global starting values (params only) */
  void **moments[2];                   /* [num_args] global m, v from --resume, or NULL */
  void **gathered[3];                  /* [num_args] rank 0's gathered w, m, v (checkpoint) */
  epoch_metrics *metrics;              /* [epochs] */
  long epochs_done;                    /* by this run */
  double metrics_written_at, metrics_cost; /* the last --metrics write: when it ended, its seconds */
  void *earlier_metrics;               /* --resume: the --metrics file's rows of the epochs the
                                        * checkpoint holds (a jansson array), or NULL */
  long earlier_first_epoch;            /* the first of them (1-based) */
  int *stragglers;                     /* [tp] flagged at some step (rank 0's planner) */
  int balance;                         /* the grad entry has balance hooks: a real balancer */
  htp_balancer_config balancer;        /* its config (without hooks: detection only) */
  FILE *trace;                         /* --trace: the balancers' lines, or NULL */
  char trace_temporary[4200];          /* where they go until the run ends (file_map.h) */
  int process_rank;                    /* mpi: this process's rank; local: -1 */
  long repartitions;                   /* run-time re-partitions so far (rank 0's balancer,
                                        * all worlds) */
  long repartitions_before;            /* those of the worlds that ended */
  train_elastic elastic;
} train_job;

/* entries.c. The grad entry: --entry, or the one entry of the file (the
 * loader's listing) whose results hold gradients, into state; the eval
 * entry, its name without _grad (quiet: say nothing when there is none);
 * what an entry takes and gives, checked and noted in job (the images,
 * targets, loss and logits indices, the batch). Non-zero with err. */
int htp_train_find_grad_entry(const htp_run_options *options, htp_run_state *state, int tp,
                              char *err, size_t err_size);
void htp_train_find_eval_entry(const htp_run_options *options, htp_run_state *state, int tp,
                               int quiet);
int htp_train_check_entry(const htp_signature *sig, train_job *job, int *loss, int *logits,
                          char *err, size_t err_size);

/* checkpoint.c. Global host buffers for every parameter of sig (NULL for
 * inputs), and their release; the starting weights (--params, --resume and
 * its moments, or the init) into job; an output path that must not be a
 * directory or device; rank 0's gathered job->gathered written as one
 * atomic checkpoint (weights and moments committed together, DESIGN §13). */
void htp_train_free_globals(void **globals, int count);
void **htp_train_param_buffers(const htp_signature *sig);
int htp_train_starting_weights(const htp_train_options *train, const htp_signature *sig,
                               train_job *job, char *err, size_t err_size);
int htp_train_check_output(const char *flag, const char *path, char *err, size_t err_size);
/* HTP_OK; HTP_ERR_INVALID when a value is not finite (nothing written);
 * HTP_ERR_NOMEM, or HTP_ERR_SYSTEM when a file could not be written. */
htp_result htp_train_write_checkpoint(const train_job *job, long epochs_done, long steps_done,
                                      char *err, size_t err_size);

/* elastic.c. prepare: --elastic's checks (local backend, a split with room
 * for a lost rank's units on the others) and its snapshot buffers, the
 * first snapshot being the starting weights; a no-op without --elastic.
 * split: the live ranks' split after a death or a rejoin (live[i] the
 * original rank of live rank i, n of them: units per tensor and owned per
 * kind, even over the live ranks; the compiled split when all live).
 * faults: the runtime faults the next world registers (deaths not yet
 * happened, of live ranks, renumbered; from start_step on) into out
 * (room for num_faults); next_rejoin: the step the next world stops at for
 * a rejoin (-1: none). free releases. Non-zero with err. */
int htp_train_elastic_prepare(const htp_run_options *options, train_job *job, char *err,
                              size_t err_size);
int htp_train_elastic_split(train_job *job, const int *live, int n, char *err, size_t err_size);
int htp_train_elastic_faults(const htp_run_options *options, const train_job *job,
                             htp_run_fault *out);
long htp_train_elastic_next_rejoin(const htp_run_options *options, const train_job *job);
void htp_train_elastic_free(train_job *job);
/* After a world ended (failed: by a rank's failure, else stopped for a
 * rejoin): the next world's live ranks (original ranks, in order) into
 * live, *n of them, what happened noted for the new world's first step and
 * in the events. 1 when the run cannot go on (a failure that is no injected
 * death, or the last rank). */
int htp_train_elastic_next_world(const htp_run_options *options, train_job *job,
                                 const htp_rank_outcome *outcome, int failed, int *live, int *n);
/* The same after ranks were lost: lost[] their ranks in the world that
 * ended (num_lost of them), hung 1 for an injected hang, noticed at step
 * `at` (the state assembled first: the note counts the steps replayed).
 * 1 when the run cannot go on (none or all lost). */
int htp_train_elastic_lost(const htp_run_options *options, train_job *job, const int *lost,
                           int num_lost, int hung, long at, int *live, int *n);
/* mpirun: after a shrink the survivors agreed to resume from the snapshot
 * of `step` (-1: the state the world started from): that set becomes the
 * one assembled. Non-zero with err when this process does not hold it. */
int htp_train_elastic_resume_from(train_job *job, long step, char *err, size_t err_size);
/* The snapshot copies' rows. holds: whether process `self` (a rank under
 * mpirun, -1 for the local backend, which holds every row) keeps rank r's
 * row between snapshots: its own and its buddy's, the previous rank's.
 * copies: set `set`, kind k (w, m, v), rank r's row, allocated and touched
 * on first use; NULL when out of memory. drop_copies (mpirun): frees the
 * rows of `set` that rank `self` does not hold in the current world
 * (job->tp ranks); self < 0: every row. */
int htp_train_elastic_holds(const train_job *job, int self, int r);
void **htp_train_elastic_copies(train_job *job, int set, int k, int r);
void htp_train_elastic_drop_copies(train_job *job, int set, int self);
/* On stderr once the run is over: the snapshots and what they cost. */
void htp_train_elastic_report(const htp_run_options *options, const train_job *job);
/* A split tensor's units per live rank now (the signature's when as compiled). */
const int32_t *htp_train_units(const train_job *job, int arg);
/* After a world ended: its last whole snapshot (each rank's copies of its
 * shards, with the split and slot maps they were taken under) put
 * together into the global state the next world starts from. A world that
 * took none leaves the state as it was. Non-zero with err. */
int htp_train_elastic_assemble(train_job *job, char *err, size_t err_size);

/* metrics.c. --metrics: the epochs so far as JSON, written atomically. */
int htp_train_write_metrics(const train_job *job, const char *eval_entry, char *err,
                            size_t err_size);
/* --resume with --metrics naming a file there: its rows of the epochs the
 * checkpoint holds (1 to first_epoch) go on in the new file, so that a run
 * resumed with the same flags keeps its history; a gap (a run killed after
 * its checkpoint and before its metrics caught up) or a file that is no
 * metrics of htp-run is said in a note. Non-zero with err when memory runs
 * short reading it (the history would be dropped as if foreign). Frees with
 * htp_train_free_metrics. */
int htp_train_read_earlier_metrics(train_job *job, char *err, size_t err_size);
void htp_train_free_metrics(train_job *job);

#endif /* HTP_RUN_TRAIN_JOB_H */
